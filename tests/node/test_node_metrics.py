#!/usr/bin/python3
"""gpuvisor-node /metrics and the NVML backstop, end to end on stand-ins.

The real agent runs over the fake NVML (telemetry from GV_FAKE_NVML_TELEMETRY,
per-process memory from the fake driver's shared state file), the fake API
server and the Python kubelet stand-in.  Containers are allocated through the
real Allocate path; a gv_probe under the real interposer creates a real shared
region, and a second gv_probe without the interposer allocates around it (the
process the backstop exists for).  /proc/<pid>/cgroup comes from a fake proc
tree (--proc-root) naming the pod, as the kubelet's cgroup layout would.
Every exposition is parsed with prometheus_client's own text parser
(Debian python3-prometheus-client) and values are checked against what the
regions and the fake NVML hold.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import time
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, write_atomic  # noqa: E402

t = gvtest.Tap()
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    t.skip("node metrics", "python3-prometheus-client is not installed (scripts/debian-packages.txt)")
    t.done()
if not agent.have_fake_nvml():
    t.skip("node metrics", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()

PROBE = os.path.join(gvtest.BUILD, "tests", "gv_probe")
LIB = os.path.join(gvtest.BUILD, "lib", "libgpuvisor.so")
MiB = 1 << 20


def preload():
    """The interposer, after the sanitizer runtime it needs when built with one."""
    out = subprocess.run(["ldd", LIB], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
    asan = [ln.split()[2] for ln in out.splitlines() if "libasan" in ln and len(ln.split()) > 2]
    return " ".join(asan + [LIB])


def scrape(port, path="/metrics"):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def parse(text):
    """[(name, labels, value)] through the real parser (raises on bad syntax)."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, dict(s.labels), s.value))
    return out


def find(samples, name, **labels):
    hits = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]
    return hits[0] if len(hits) == 1 else (None if not hits else ("many", hits))


def labelsets(samples, name):
    return [lab for n, lab, v in samples if n == name]


class Setup:
    def __init__(self, config):
        self.env = agent.Env(config=config)
        d = self.env.dir
        self.proc = os.path.join(d, "proc")
        os.makedirs(self.proc)
        self.tele = os.path.join(d, "telemetry")
        write_atomic(self.tele, "gpu 0 util=63 temp=57 power=212500 smclock=1755\n"
                                "gpu 1 util=7 power=na\n")
        self.gpu_state = os.path.join(d, "fake.state")
        self.node_dir = os.path.join(d, "prio")
        os.makedirs(self.node_dir)
        self.fake_env = dict(GV_FAKE_GPU_STATE=self.gpu_state, GV_FAKE_NVML_TELEMETRY=self.tele)
        self.probes = []

    def start(self):
        self.env.start_agent(["--metrics-listen", "127.0.0.1:0", "--proc-root", self.proc],
                             env_extra=self.fake_env)
        line = gvtest.wait_for(lambda: [ln for ln in self.env.agent_log().splitlines()
                                        if "metrics: listening on" in ln], 10)
        self.port = int(line[0].split("(port ")[1].split(")")[0]) if line else 0
        return self.port

    def probe(self, args, limits=None, name="probe", visible=None, extra=None):
        env = dict(os.environ, LD_LIBRARY_PATH=agent.FAKES, GV_FAKE_GPU_CONFIG=self.env.gpu_cfg,
                   ASAN_OPTIONS="detect_leaks=0", GPUVISOR_NODE_DIR=self.node_dir, **self.fake_env)
        for k in ("GPUVISOR_LIMITS_FILE", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
                  "CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD"):
            env.pop(k, None)
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        env.update(extra or {})
        if limits is not None:
            f = os.path.join(self.env.dir, name + ".limits")
            write_atomic(f, "".join("%s=%s\n" % kv for kv in limits.items()))
            env["GPUVISOR_LIMITS_FILE"] = f
            env["LD_PRELOAD"] = preload()
        p = gvtest.Proc([PROBE] + args, env=env, stdin=False, log=os.path.join(self.env.dir, name + ".log"))
        self.probes.append(p)
        return p

    def cgroup(self, pid, uid, cid):
        """The kubelet's systemd-driver layout for a burstable pod's container."""
        d = os.path.join(self.proc, str(pid))
        os.makedirs(d, exist_ok=True)
        write_atomic(os.path.join(d, "cgroup"),
                     "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
                     "cri-containerd-%s.scope\n" % (uid.replace("-", "_"), cid))

    def nspid(self, pid):
        """/proc/<pid>/status with its NSpid line (no pid namespace of its own here:
        the pid it has inside is the host's)."""
        d = os.path.join(self.proc, str(pid))
        os.makedirs(d, exist_ok=True)
        write_atomic(os.path.join(d, "status"), "Name:\tprobe\nTgid:\t%d\nNSpid:\t%d\n" % (pid, pid))

    def with_pod(self, name, containers, annotation):
        """The agent and the grpcio kubelet up, then pod `name` in namespace team (one GPU
        per container) created and its containers allocated in order: (port, all
        allocated, pod uid)."""
        port = self.start()
        k = self.env.start_kubelet("py")
        ev = k.event("devices", timeout=10)
        ids = [d["id"] for d in ev["devices"]] if ev else []
        self.env.api.create_pod(name, [(c, {"nvidia.com/gpu": "1"}) for c in containers], annotation, ns="team")
        res = [k.cmd("allocate", ids=[ids[i]]) if i < len(ids) else None for i in range(len(containers))]
        return port, all(r and r["ok"] for r in res), self.env.api.pod(name, ns="team")["metadata"]["uid"]

    def region(self, uid, ctr):
        return os.path.join(self.env.state, "containers", uid, ctr, "shared.cache")

    def holder(self, name, size, uid, cid, extra=None, limits=None, wait=True):
        """A probe holding size on GPU 0, in container cid of pod uid (its cgroup and NSpid
        written at once); with wait, (probe, allocated) once it reported the allocation."""
        p = self.probe(["init", "alloc:%s:OK" % size, "sleep:60000"], name=name, extra=extra, limits=limits)
        self.cgroup(p.p.pid, uid, cid)
        self.nspid(p.p.pid)
        if not wait:
            return p, None
        got = p.expect(lambda ln: ln.startswith("ok 2") or ln.startswith("not ok"), 20)
        return p, bool(got and got.startswith("ok 2"))

    def passes(self, n, timeout=10):
        """Waits for n more backstop passes."""
        first = find(parse(scrape(self.port)[2]), "gpuvisor_backstop_passes_total")
        return gvtest.wait_for(lambda: find(parse(scrape(self.port)[2]), "gpuvisor_backstop_passes_total")
                               >= first + n, timeout)

    def actions(self, action, **labels):
        """gpuvisor_backstop_actions_total of that action for those labels (0 when absent)."""
        return find(parse(scrape(self.port)[2]), "gpuvisor_backstop_actions_total", action=action, **labels) or 0

    def close(self):
        for p in self.probes:
            p.stop(signal.SIGKILL)
        self.env.close()


def backstop_cfg(mode, grace_ms=0):
    return {"metrics": {"backstop": mode, "backstopGraceMs": grace_ms, "backstopPeriodMs": 100,
                        "backstopMarginMiB": 0}}


def backstop_off_then_report():
    """The backstop thread sleeps while off and wakes on a reload; an episode
    ends when no GPU runs any process (the pass that stops after NVML)."""
    cfg = backstop_cfg("off")
    s = Setup(cfg)
    try:
        port, a, uid = s.with_pod("solo", ["main"], "v1;node=node1;main=%s:1000:100" % GPUS[0])
        cm = dict(namespace="team", pod="solo", container="main", uuid=GPUS[0])

        def events():
            code, body = s.env.api.req("GET", "/api/v1/namespaces/team/events")
            return [e for e in (body or {}).get("items", []) if e.get("reason") == "GPUMemoryOverLimit"]

        p1, ok1 = s.holder("bypass1", "2g", uid, "d" * 64)
        m = gvtest.wait_for(lambda: (lambda x: x if find(x, "gpuvisor_backstop_over_limit", **cm) == 1 else None)(
            parse(scrape(port)[2])), 10)
        t.ok(a and ok1 and m is not None and find(m, "gpuvisor_backstop_actions_total",
                                                  action="report", **cm) == 0 and not events() and
             find(m, "gpuvisor_backstop_passes_total") == 0,
             "backstop off: a container over its limit shows on /metrics, no pass runs, nothing reported",
             m and events())
        cfg["metrics"]["backstop"] = "report"
        write_atomic(s.env.config, json.dumps(cfg))
        s.env.agent.p.send_signal(signal.SIGHUP)
        ev = gvtest.wait_for(lambda: events(), 10)
        t.ok(ev and len(ev) == 1, "switched to report by a reload: the sleeping thread wakes and reports", ev)
        p1.stop(signal.SIGKILL)
        gone = gvtest.wait_for(lambda: find(parse(scrape(port)[2]), "gpuvisor_container_gpu_nvml_processes",
                                            **cm) == 0, 10)
        # two more passes: the second one started after the GPU was seen empty,
        # so it found no process at all (the pass that stops after NVML)
        later = s.passes(2)
        p2, ok2 = s.holder("bypass2", "2g", uid, "d" * 64)
        ev = gvtest.wait_for(lambda: (lambda e: e if len(e) >= 2 else None)(events()), 10)
        t.ok(gone and later and ok2 and ev is not None,
             "the process gone (no GPU process left), the episode ends: the next bypass is reported again",
             events())
    finally:
        s.close()


def zombie(proc):
    """Killed and not yet reaped: NVML still lists such a process with its memory,
    as the real driver does until the process's context is torn down."""
    try:
        with open("/proc/%d/stat" % proc.p.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def backstop_kill_choice(learned):
    """Kill mode, several processes of one container on one GPU: the one holding memory
    its region does not account for goes, not the biggest; a killed process NVML still
    lists while it goes away is neither killed again nor a reason to kill another; a
    second bypass while the first is still going away goes too.  learned: the honest
    process learned its host pid (its context took memory, as on a GPU); otherwise its
    region slot names it only by its pid in the container, which /proc's NSpid maps."""
    s = Setup(backstop_cfg("kill"))
    try:
        port, a, uid = s.with_pod("heavy", ["a"], "v1;node=node1;a=%s:1000:100" % GPUS[0])
        ca = dict(namespace="team", pod="heavy", container="a", uuid=GPUS[0])
        region = s.region(uid, "a")
        # Every context takes 64 MiB, as on a real GPU: how the interposer learns its
        # host pid (the process new on NVML's list after its first context), which is
        # how the region tells which NVML process is whose.
        ctx = {"GV_FAKE_CTX_MEMORY": "64m" if learned else "0"}
        base = 64 if learned else 0
        how = "host pid learned" if learned else "host pid unknown, NSpid"
        # the honest process: interposed, exactly its 1000 MiB (context included), the most
        # memory of any
        inside, got = s.holder("honest", "%dm" % (1000 - base), uid, "a" * 64, extra=ctx,
                               limits={"CUDA_DEVICE_MEMORY_LIMIT_0": "1000m",
                                       "CUDA_DEVICE_MEMORY_SHARED_CACHE": region})
        with open(region, "rb") as f:
            f.seek(4096 + 4)
            hostpid = struct.unpack("<i", f.read(4))[0]
        t.ok(hostpid == (inside.p.pid if learned else 0),
             "%s: the honest process's region slot names host pid %s" % (how, hostpid))
        s.passes(3)
        m = parse(scrape(port)[2])
        t.ok(find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **ca) == 1000 * MiB and
             find(m, "gpuvisor_backstop_over_limit", **ca) == 0 and s.actions("kill", **ca) == 0 and
             s.actions("report", **ca) == 0 and inside.p.poll() is None,
             "%s: a container at exactly its limit (1000 MiB on NVML) is within it: nothing done" % how)
        # a bypass of 64 + 200 MiB takes the container to 1228 MiB on NVML
        small, _ = s.holder("bypass-small", "200m", uid, "a" * 64, extra=ctx, wait=False)
        dead = gvtest.wait_for(lambda: zombie(small), 10)
        t.ok(a and got and dead and inside.p.poll() is None,
             "%s: kill mode, 1000 MiB interposed + %d MiB bypass in one container: the bypass is killed, "
             "not the bigger process the region accounts for" % (how, base + 200),
             (got, dead, inside.p.poll()))
        # the killed process is still listed (a zombie here) with its 264 MiB for several passes
        s.passes(5)
        t.ok(zombie(small) and s.actions("kill", **ca) == 1 and inside.p.poll() is None,
             "%s: a killed process still listed while it goes away: not killed again, nobody else killed" % how,
             (zombie(small), s.actions("kill", **ca)))
        # while it lingers, a second bypass takes the container over again: it goes too
        more, _ = s.holder("bypass-more", "300m", uid, "a" * 64, extra=ctx, wait=False)
        dead2 = gvtest.wait_for(lambda: zombie(more), 10)
        t.ok(dead2 and zombie(small) and s.actions("kill", **ca) == 2 and inside.p.poll() is None,
             "%s: a second bypass while the first is still going away is killed as well" % how,
             (dead2, zombie(small), s.actions("kill", **ca)))
        small.p.poll()
        more.p.poll()
        m = gvtest.wait_for(lambda: (lambda x: x if find(x, "gpuvisor_backstop_over_limit", **ca) == 0 and
                                     find(x, "gpuvisor_container_gpu_memory_nvml_bytes", **ca) == 1000 * MiB
                                     else None)(parse(scrape(port)[2])), 10)
        t.ok(m is not None and inside.p.poll() is None,
             "%s: both reaped: 1000 MiB left, at the limit, the honest process runs on" % how)
    finally:
        s.close()


def no_pod_cgroup_claimed_by_region():
    """A process whose cgroup names no pod (no Kubernetes: `gpuvisor run`, tests) is
    the container's whose region names its host pid, on any of the container's GPUs,
    its first included."""
    s = Setup(backstop_cfg("report"))
    try:
        port, a, uid = s.with_pod("plain", ["a"], "v1;node=node1;a=%s:1000:100" % GPUS[0])
        ca = dict(namespace="team", pod="plain", container="a", uuid=GPUS[0])
        # no /proc/<pid>/cgroup for it; its first context (64 MiB) teaches it its host pid
        p = s.probe(["init", "alloc:136m:OK", "sleep:60000"], name="nocgroup",
                    extra={"GV_FAKE_CTX_MEMORY": "64m"},
                    limits={"CUDA_DEVICE_MEMORY_LIMIT_0": "1000m",
                            "CUDA_DEVICE_MEMORY_SHARED_CACHE": s.region(uid, "a")})
        got = p.expect(lambda ln: ln.startswith("ok 2") or ln.startswith("not ok"), 20)
        m = gvtest.wait_for(lambda: (lambda x: x if find(x, "gpuvisor_container_gpu_memory_nvml_bytes", **ca)
                                     == 200 * MiB else None)(parse(scrape(port)[2])), 10)
        t.ok(a and got and got.startswith("ok 2") and m is not None and
             not find(m, "gpuvisor_gpu_unattributed_memory_bytes", uuid=GPUS[0]),
             "a process without a pod cgroup, named by its container's region: its 200 MiB are the "
             "container's (its GPU is the container's first), none unattributed",
             m and [x for x in m if "nvml" in x[0] or "unattributed" in x[0]])
    finally:
        s.close()


def backstop_kill_fewest():
    """Kill mode with two bypasses: the one holding more unaccounted memory goes first,
    whatever NVML's order, and the backstop stops as soon as the container fits (the
    first process NVML lists included)."""
    s = Setup(backstop_cfg("kill"))
    try:
        _, a, uid = s.with_pod("two", ["a"], "v1;node=node1;a=%s:1000:100" % GPUS[0])
        ca = dict(namespace="team", pod="two", container="a", uuid=GPUS[0])
        ctx = {"GV_FAKE_CTX_MEMORY": "64m"}
        big, _ = s.holder("two-bypass-big", "300m", uid, "a" * 64, extra=ctx)
        small, _ = s.holder("two-bypass-small", "100m", uid, "a" * 64, extra=ctx)
        honest, _ = s.holder("two-honest", "700m", uid, "a" * 64, extra=ctx,
                             limits={"CUDA_DEVICE_MEMORY_LIMIT_0": "1000m",
                                     "CUDA_DEVICE_MEMORY_SHARED_CACHE": s.region(uid, "a")})
        # 364 + 164 MiB of bypass and 764 interposed (the most memory, all accounted for): 1292
        # against 1000; killing the 364 suffices
        dead = gvtest.wait_for(lambda: zombie(big), 10)
        s.passes(3)
        kills = s.actions("kill", **ca)
        t.ok(a and dead and kills == 1 and small.p.poll() is None and honest.p.poll() is None,
             "two bypasses over the limit: only the bigger one (the first on NVML's list) is killed, "
             "which is enough; the interposed process, though bigger than either, stays",
             (dead, kills, small.p.poll(), honest.p.poll()))
    finally:
        s.close()


def backstop_grace():
    """An episode is acted on once it has lasted backstopGraceMs, not before: a
    container over its limit for less than that gets no event."""
    s = Setup(backstop_cfg("report", 5000))
    try:
        port, a, uid = s.with_pod("patient", ["main"], "v1;node=node1;main=%s:1000:100" % GPUS[0])
        cm = dict(namespace="team", pod="patient", container="main", uuid=GPUS[0])
        p, got = s.holder("over-briefly", "2g", uid, "d" * 64)
        start = time.time()
        seen = gvtest.wait_for(lambda: (lambda x: x if find(x, "gpuvisor_backstop_over_limit", **cm) == 1
                                        else None)(parse(scrape(port)[2])), 3)
        # several backstop passes see it over the limit
        s.passes(3, 3)
        early = s.actions("report", **cm)
        # The 5 s grace cannot have run out yet; on a machine so loaded that 4 s went by,
        # a report now would be right, so only the later half is asserted then.
        quick = time.time() - start < 4
        late = gvtest.wait_for(lambda: s.actions("report", **cm) == 1, 15)
        t.ok(a and got and seen is not None and (early == 0 or not quick) and late,
             "grace 5 s: over the limit shows at once, the report comes only once the episode has lasted the grace",
             (seen is not None, quick, early, late))
    finally:
        s.close()


def backstop_kill_spares_sibling():
    """Kill mode, two containers of one pod on one GPU: only the container over its limit
    loses a process, even when its sibling holds far more memory (a kill of the sibling's
    process would pass the pod check: same pod)."""
    s = Setup(backstop_cfg("kill"))
    try:
        port, a, uid = s.with_pod("sibs", ["x", "y"], "v1;node=node1;x=%s:300:0;y=%s:2000:0" % (GPUS[0], GPUS[0]))
        cx = dict(namespace="team", pod="sibs", container="x", uuid=GPUS[0])
        cy = dict(namespace="team", pod="sibs", container="y", uuid=GPUS[0])
        ctx = {"GV_FAKE_CTX_MEMORY": "64m"}

        def interposed(ctr, cid, size, limit):
            return s.holder("sib-" + ctr, size, uid, cid * 64, extra=ctx,
                            limits={"CUDA_DEVICE_MEMORY_LIMIT_0": limit,
                                    "CUDA_DEVICE_MEMORY_SHARED_CACHE": s.region(uid, ctr)})
        big, ok_y = interposed("y", "b", "800m", "2000m")
        small, ok_x = interposed("x", "a", "10m", "300m")
        m = gvtest.wait_for(lambda: (lambda x: x if find(x, "gpuvisor_container_gpu_memory_nvml_bytes", **cx) == 74 * MiB
                                     and find(x, "gpuvisor_container_gpu_memory_nvml_bytes", **cy) == 864 * MiB
                                     else None)(parse(scrape(port)[2])), 10)
        # x goes around the interposer: 74 + 364 MiB against its 300
        bypass, _ = s.holder("sib-x-bypass", "300m", uid, "a" * 64, extra=ctx, wait=False)
        dead = gvtest.wait_for(lambda: zombie(bypass), 10)
        try:
            kills_x = s.actions("kill", **cx)
        except OSError as e:  # an agent wedged in its backstop answers no scrape
            kills_x = e
        t.ok(a and ok_x and ok_y and m is not None and dead and
             kills_x == 1 and big.p.poll() is None and small.p.poll() is None,
             "two containers of a pod on one GPU, x over its limit: x's bypass is killed; y's 864 MiB "
             "process and x's interposed one run on", (m is not None, dead, kills_x, big.p.poll(), small.p.poll()))
    finally:
        s.close()


def main():
    cfg = {"metrics": {"backstop": "report", "backstopGraceMs": 0, "backstopPeriodMs": 100}}
    s = Setup(cfg)
    try:
        port = s.start()
        t.ok(port > 0, "agent logs the metrics port it bound (--metrics-listen 127.0.0.1:0)", s.env.agent_log())
        code, _, body = scrape(port, "/readyz")
        t.ok(code == 503 and "not ready:" in body and ("kubelet" in body or "starting" in body or "pod cache" in body),
             "/readyz 503 with the reason while no kubelet is there to register with", (code, body))
        k = s.env.start_kubelet("py")
        ev = k.event("devices", timeout=10)
        ids = [d["id"] for d in ev["devices"]] if ev else []
        code, _, _ = scrape(port, "/healthz")
        t.ok(code == 200, "/healthz 200 while the event loop runs", code)
        ready = gvtest.wait_for(lambda: scrape(port, "/readyz")[0] == 200, 10)
        t.ok(ready, "/readyz 200 once registered with the kubelet and the pod cache is synced",
             scrape(port, "/readyz"))

        # per-GPU series before any container
        code, ctype, text = scrape(port)
        m = parse(text)
        t.ok(code == 200 and ctype.startswith("text/plain; version=0.0.4"),
             "/metrics: 200, text exposition 0.0.4", (code, ctype))
        lab = dict(gpu="0", UUID=GPUS[0], modelName="NVIDIA A100-SXM4-40GB", Hostname="node1", device="nvidia0")
        t.ok(find(m, "DCGM_FI_DEV_GPU_UTIL", **lab) == 63 and find(m, "DCGM_FI_DEV_GPU_TEMP", **lab) == 57 and
             find(m, "DCGM_FI_DEV_POWER_USAGE", **lab) == 212.5 and find(m, "DCGM_FI_DEV_SM_CLOCK", **lab) == 1755 and
             find(m, "DCGM_FI_DEV_FB_USED", **lab) == 0 and find(m, "DCGM_FI_DEV_FB_FREE", **lab) == 40960 and
             find(m, "DCGM_FI_DEV_XID_ERRORS", **lab) == 0,
             "dcgm-exporter names and labels: util %, temp C, power W (from mW), SM clock MHz, FB MiB, last Xid",
             [x for x in m if x[0].startswith("DCGM")])
        t.ok(find(m, "DCGM_FI_DEV_POWER_USAGE", gpu="1") is None and find(m, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == 7,
             "a GPU without a power sensor (NOT_SUPPORTED) has no power sample, its other series stay")
        t.ok(find(m, "hami_host_gpu_utilization_ratio", node="node1", device_index="0", device_uuid=GPUS[0],
                  device_type="NVIDIA-NVIDIA A100-SXM4-40GB", zone="vGPU") == 63 and
             find(m, "hami_host_gpu_memory_used_bytes", device_index="1") == 0,
             "HAMi host series: node, device_index, device_uuid, device_type=NVIDIA-<name>, zone")
        t.ok(find(m, "gpuvisor_gpu_healthy", uuid=GPUS[0]) == 1 and find(m, "gpuvisor_gpu_slices", uuid=GPUS[1]) == 10
             and find(m, "gpuvisor_gpu_slices_in_use", uuid=GPUS[0]) == 0,
             "per GPU: healthy, slices advertised, none in use", [x for x in m if x[0].startswith("gpuvisor_gpu")])

        # a two-container pod: both present from Allocate on, before any CUDA call
        s.env.api.create_pod("pair", [("a", {"nvidia.com/gpu": "1"}, {"CUDA_TASK_PRIORITY": "2"}),
                                      ("b", {"nvidia.com/gpu": "1"})],
                             "v1;node=node1;a=%s:1000:300;b=%s:500:100" % (GPUS[0], GPUS[1]), ns="team")
        a1 = k.cmd("allocate", ids=[ids[0]])
        a2 = k.cmd("allocate", ids=[ids[1]])
        t.ok(a1 and a1["ok"] and a2 and a2["ok"], "both containers allocated", (a1, a2))
        uid = s.env.api.pod("pair", ns="team")["metadata"]["uid"]
        m = parse(scrape(port)[2])
        ca = dict(node="node1", namespace="team", pod="pair", container="a", uuid=GPUS[0])
        cb = dict(node="node1", namespace="team", pod="pair", container="b", uuid=GPUS[1])
        t.ok(find(m, "gpuvisor_container_gpu_memory_limit_bytes", **ca) == 1000 * MiB and
             find(m, "gpuvisor_container_gpu_memory_limit_bytes", **cb) == 500 * MiB and
             find(m, "gpuvisor_container_gpu_memory_used_bytes", **ca) == 0 and
             find(m, "gpuvisor_container_gpu_compute_share_limit_ratio", **ca) == 0.3 and
             find(m, "gpuvisor_container_gpu_compute_share_limit_ratio", **cb) == 0.1,
             "multi-container pod: each container with its own GPU, memory limit and share (HAMi 863)",
             [x for x in m if x[0].startswith("gpuvisor_container")])
        t.ok(find(m, "gpuvisor_container_region_present", container="a", limited="true") == 1 and
             find(m, "hami_vgpu_memory_limit_bytes", namespace="team", pod="pair", container="b",
                  vdevice_index="0", device_uuid=GPUS[1][:40], zone="vGPU") == 500 * MiB,
             "present from Allocate on, before the first CUDA call (HAMi 281): region made by the agent, nothing used, limits shown")
        t.ok(find(m, "gpuvisor_container_priority", namespace="team", pod="pair", container="a") == 2 and
             find(m, "gpuvisor_container_priority", container="b") is None,
             "priority from the container's CUDA_TASK_PRIORITY; none set, no sample")
        t.ok(find(m, "gpuvisor_gpu_slices_in_use", uuid=GPUS[0]) == 1 and
             find(m, "gpuvisor_gpu_memory_allocated_bytes", uuid=GPUS[1]) == 500 * MiB and
             find(m, "DCGM_FI_DEV_GPU_UTIL", gpu="0", pod="pair", namespace="team", container="a") == 63,
             "per GPU: slices in use, memory allocated; dcgm series carry pod/namespace/container of the sole owner")

        # container a's process under the real interposer: a real region
        region = os.path.join(s.env.state, "containers", uid, "a", "shared.cache")
        inside = s.probe(["init", "alloc:256m:OK", "alloc:64m:OK", "alloc:1g:OOM", "alloc:700m:OOM",
                          "sleep:60000"], name="inside",
                         limits={"CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_SM_LIMIT_0": "30",
                                 "CUDA_DEVICE_MEMORY_SHARED_CACHE": region, "CUDA_TASK_PRIORITY": "2"})
        got = inside.expect(lambda ln: ln.startswith("ok 5") or ln.startswith("not ok"), 20)
        t.ok(got and got.startswith("ok 5"),
             "probe under the interposer allocated 256 + 64 MiB; 1 GiB and 700 MiB more refused (limit 1000 MiB)",
             inside.seen)
        write_atomic(s.tele, "gpu 0 util=63 temp=57 power=212500 smclock=1755\nproc %d sm=37\n" % inside.p.pid)
        s.cgroup(inside.p.pid, uid, "a" * 64)
        m = parse(scrape(port)[2])
        t.ok(find(m, "gpuvisor_container_gpu_memory_used_bytes", **ca) == 320 * MiB and
             find(m, "gpuvisor_container_region_present", container="a") == 1 and
             find(m, "gpuvisor_container_processes", namespace="team", pod="pair", container="a") == 1 and
             find(m, "hami_vgpu_memory_used_bytes", pod="pair", container="a") == 320 * MiB,
             "memory in use from the shared region, exact (320 MiB), one process",
             [x for x in m if "memory" in x[0] or "region" in x[0]])
        t.ok(find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **ca) == 320 * MiB and
             find(m, "gpuvisor_container_gpu_nvml_processes", **ca) == 1 and
             find(m, "gpuvisor_container_gpu_sm_utilization_ratio", **ca) == 0.37 and
             find(m, "hami_container_device_utilization_ratio", pod="pair", container="a") == 37 and
             find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **cb) == 0,
             "NVML per-process memory and SM utilisation mapped to container a (host pid in its region)")
        t.ok(find(m, "DCGM_FI_DEV_FB_USED", gpu="0") == 320 and find(m, "gpuvisor_backstop_over_limit", **ca) == 0,
             "FB used in MiB; within its limit: backstop quiet")
        hl = dict(namespace="team", pod="pair", container="a", vdevice_index="0", device_uuid=GPUS[0][:40],
                  zone="vGPU")
        t.ok(find(m, "gpuvisor_container_gpu_oom_total", **ca) == 2 and
             find(m, "hami_vgpu_oom_total", **hl) == 2 and
             find(m, "gpuvisor_container_gpu_throttled_seconds_total", **ca) == 0 and
             find(m, "gpuvisor_container_gpu_oom_total", **cb) is None,
             "allocations refused at the limit counted by the interposer in the region (2), nothing throttled yet;"
             " no region for b, no sample", [x for x in m if "oom" in x[0] or "throttled" in x[0]])
        region_fams = ("gpuvisor_container_gpu_memory_managed_bytes",
                       "gpuvisor_container_gpu_region_utilization_ratio",
                       "gpuvisor_container_gpu_throttle_debt_seconds",
                       "gpuvisor_container_gpu_busy_seconds_total")
        t.ok(find(m, region_fams[0], **ca) == 0 and find(m, region_fams[2], **ca) == 0 and
             all(isinstance(find(m, f, **ca), float) for f in region_fams) and
             all(find(m, f, **cb) is None for f in region_fams),
             "the region's series for a's first device (region slot 0): managed memory 0, no debt, utilisation "
             "and busy time present; none for b, which has no region",
             [x for x in m if any(x[0] == f for f in region_fams)])
        # the throttle pool's throttled_ns (region sched bytes at 112, 64 per device, field at 32):
        # written here as the throttle would, to check the reader's offsets and unit
        with open(region, "r+b") as f:
            f.seek(112 + 0 * 64 + 32)
            f.write(struct.pack("<Q", 2500000000))
        m = parse(scrape(port)[2])
        t.ok(find(m, "gpuvisor_container_gpu_throttled_seconds_total", **ca) == 2.5 and
             find(m, "hami_vgpu_throttled_seconds_total", **hl) == 2.5,
             "time throttled from the container's throttle pool, in seconds",
             [x for x in m if "throttled" in x[0]])

        # a process of container a allocating around the interposer
        outside = s.probe(["init", "alloc:1g:OK", "sleep:60000"], name="outside")
        s.cgroup(outside.p.pid, uid, "a" * 64)
        got = outside.expect(lambda ln: ln.startswith("ok 2") or ln.startswith("not ok"), 20)
        t.ok(got and got.startswith("ok 2"), "a process without the interposer allocates 1 GiB on GPU 0", outside.seen)

        def events(reason):
            code, body = s.env.api.req("GET", "/api/v1/namespaces/team/events")
            return [e for e in (body or {}).get("items", []) if e.get("reason") == reason]
        ev = gvtest.wait_for(lambda: events("GPUMemoryOverLimit"), 10)
        t.ok(ev and ev[0]["involvedObject"]["name"] == "pair" and ev[0]["involvedObject"]["uid"] == uid and
             ev[0]["type"] == "Warning" and "container a" in ev[0]["message"] and "1344 MiB" in ev[0]["message"],
             "backstop report: NVML shows a over its limit (1344 > 1000 MiB): Warning event on the pod", ev)
        m = parse(scrape(port)[2])
        t.ok(find(m, "gpuvisor_backstop_over_limit", **ca) == 1 and
             find(m, "gpuvisor_backstop_actions_total", action="report", **ca) == 1 and
             find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **ca) == 1344 * MiB and
             find(m, "gpuvisor_container_gpu_memory_used_bytes", **ca) == 320 * MiB,
             "metrics: over limit 1, one report; the region still says 320 MiB (the bypass is invisible to it)")
        t.ok(outside.p.poll() is None and len(events("GPUMemoryOverLimit")) == 1,
             "report mode kills nothing and reports an episode once")

        # kill mode, switched by a config reload
        cfg["metrics"]["backstop"] = "kill"
        write_atomic(s.env.config, json.dumps(cfg))
        s.env.agent.p.send_signal(signal.SIGHUP)
        dead = gvtest.wait_for(lambda: outside.p.poll() is not None, 10)
        t.ok(dead and outside.p.returncode == -signal.SIGKILL and inside.p.poll() is None,
             "backstop kill: the process holding memory the region does not account for is SIGKILLed; "
             "the interposed process stays", (outside.p.returncode, inside.p.poll()))
        ev = gvtest.wait_for(lambda: events("GPUMemoryOverLimitKilled"), 10)
        t.ok(ev and ("process %d killed" % outside.p.pid) in ev[0]["message"],
             "kill event on the pod names the process", ev)
        m = parse(scrape(port)[2])
        t.ok(find(m, "gpuvisor_backstop_actions_total", action="kill", **ca) == 1 and
             find(m, "gpuvisor_backstop_over_limit", **ca) == 0 and
             find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **ca) == 320 * MiB,
             "metrics: one kill, back within the limit")

        # a process of another pod on the node is never killed for this one
        stranger = s.probe(["init", "alloc:2g:OK", "sleep:60000"], name="stranger")
        s.cgroup(stranger.p.pid, "0badc0de-0000-4000-8000-000000000000", "c" * 64)
        got = stranger.expect(lambda ln: ln.startswith("ok 2") or ln.startswith("not ok"), 20)
        m = gvtest.wait_for(lambda: (lambda x: x if find(x, "gpuvisor_gpu_unattributed_memory_bytes",
                                                         uuid=GPUS[0]) == 2048 * MiB else None)(parse(scrape(port)[2])), 5)
        t.ok(m and stranger.p.poll() is None and find(m, "gpuvisor_backstop_over_limit", **ca) == 0,
             "a process of an unknown pod: unattributed memory on the GPU, not charged to a, not killed",
             m and [x for x in m if "unattributed" in x[0]])

        # hostile tenant: container a writes the stranger's host pid into its own region slot
        # (the region is writable from the container); it must not pull the stranger in
        forged = False
        with open(region, "r+b") as f:
            for i in range(1024):
                f.seek(4096 + i * 704)
                pid_, _ = struct.unpack("<ii", f.read(8))
                if pid_ == inside.p.pid:
                    f.seek(4096 + i * 704 + 4)
                    f.write(struct.pack("<i", stranger.p.pid))
                    forged = True
        m = parse(scrape(port)[2])
        t.ok(forged and find(m, "gpuvisor_gpu_unattributed_memory_bytes", uuid=GPUS[0]) == 2048 * MiB and
             find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **ca) == 320 * MiB and
             find(m, "gpuvisor_backstop_over_limit", **ca) == 0 and stranger.p.poll() is None,
             "a region naming another pod's process as its own: ignored (cgroup decides), nobody killed",
             m and [x for x in m if "nvml" in x[0] or "unattributed" in x[0]])

        # two containers of one pod on the same GPU: told apart by the host pids in their regions
        s.env.api.create_pod("duo", [("x", {"nvidia.com/gpu": "1"}), ("y", {"nvidia.com/gpu": "1"})],
                             "v1;node=node1;x=%s:2000:0;y=%s:2000:0" % (GPUS[1], GPUS[1]), ns="team")
        d1 = k.cmd("allocate", ids=[ids[12]])
        d2 = k.cmd("allocate", ids=[ids[13]])
        duo = s.env.api.pod("duo", ns="team")["metadata"]["uid"]
        outs = []
        for ctr, size in (("x", "100m"), ("y", "200m")):
            reg = os.path.join(s.env.state, "containers", duo, ctr, "shared.cache")
            outs.append(s.probe(["init", "alloc:%s:OK" % size, "sleep:60000"], name="duo-" + ctr, visible="1",
                                # a context holds memory, so NVML lists the process when its
                                # context is created: the interposer learns its host pid then
                                extra={"GV_FAKE_CTX_MEMORY": "4m"},
                                limits={"CUDA_DEVICE_MEMORY_LIMIT_0": "2000m",
                                        "CUDA_DEVICE_MEMORY_SHARED_CACHE": reg}))
        for p, cid in zip(outs, ("e" * 64, "f" * 64)):
            s.cgroup(p.p.pid, duo, cid)
        ok_all = all(p.expect(lambda ln: ln.startswith("ok 2") or ln.startswith("not ok"), 20) or False
                     for p in outs)
        m = parse(scrape(port)[2])
        cx = dict(namespace="team", pod="duo", container="x", uuid=GPUS[1])
        cy = dict(namespace="team", pod="duo", container="y", uuid=GPUS[1])
        t.ok(d1 and d1["ok"] and d2 and d2["ok"] and ok_all and
             find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **cx) == 104 * MiB and
             find(m, "gpuvisor_container_gpu_memory_nvml_bytes", **cy) == 204 * MiB and
             find(m, "gpuvisor_container_gpu_memory_used_bytes", **cx) == 104 * MiB and
             find(m, "DCGM_FI_DEV_GPU_UTIL", gpu="1", pod="duo") is None,
             "two containers of a pod on one GPU: NVML memory split by their regions' host pids; "
             "dcgm series name no owner on a shared GPU",
             [x for x in m if "nvml_bytes" in x[0]])

        # Xid: the last one per GPU
        write_atomic(s.env.faults, "xid 1 79 1\n")
        m = gvtest.wait_for(lambda: (lambda x: x if find(x, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 79 else None)(
            parse(scrape(port)[2])), 5)
        t.ok(m is not None, "DCGM_FI_DEV_XID_ERRORS: the last Xid on the GPU (79)")

        # slow loris from one address (another pod): 40 connections sending half a head
        hogs = []
        for _ in range(40):
            so = socket.socket()
            try:
                so.bind(("127.0.0.2", 0))
                so.connect(("127.0.0.1", port))
                so.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass
            hogs.append(so)
        code, _, _ = scrape(port, "/healthz")
        code2, _, text = scrape(port)
        t.ok(code == 200 and code2 == 200 and parse(text),
             "40 stalled connections from one peer: probes and scrapes from another still answered", (code, code2))

        def eof(so):
            so.settimeout(10)
            try:
                return so.recv(100) == b""
            except OSError:
                return True
        closed = [eof(so) for so in hogs]
        for so in hogs:
            so.close()
        t.ok(all(closed), "every stalled connection is closed by the agent (4 per peer, 2 s for a head)",
             closed.count(False))

        # a head that arrives in two pieces is answered
        so = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            so.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            time.sleep(0.3)
            so.sendall(b"st: x\r\n\r\n")
            got = so.recv(100)
        except OSError as e:
            got = repr(e).encode()
        finally:
            so.close()
        t.ok(got.startswith(b"HTTP/1.1 200"), "a request head in two pieces 0.3 s apart: answered", got[:60])
        # exactly 4 connections from one address: the 5th and 6th are closed at once, the first 4
        # stay until their 2 s for a head run out
        six = []
        t0 = time.time()
        for _ in range(6):
            so = socket.socket()
            so.bind(("127.0.0.3", 0))
            so.connect(("127.0.0.1", port))
            six.append(so)

        def closed_now(so, wait):
            so.settimeout(wait)
            try:
                return so.recv(100) == b""
            except socket.timeout:
                return False
            except OSError:
                return True
        extra = [closed_now(so, 1.5) for so in six[4:]]
        # the first 4 have 2 s for a head; on a machine so loaded that most of it went by,
        # their being closed would be right, so only the first half is asserted then
        in_time = time.time() - t0 < 1.8
        kept = [not closed_now(so, 0.01) for so in six[:4]]
        for so in six:
            so.close()
        t.ok(all(extra) and (all(kept) or not in_time), "4 connections per address: a 5th and 6th from it "
             "are closed at once, the first 4 kept", (extra, kept, in_time))

        # all 32 slots held by stalled clients (8 addresses x 4): the next client waits in the
        # kernel's backlog until one of them runs out of time (2 s), then is answered
        held = []
        t0 = time.time()
        for a in range(8):
            for _ in range(4):
                so = socket.socket()
                so.bind(("127.0.0.%d" % (11 + a), 0))
                so.connect(("127.0.0.1", port))
                so.sendall(b"GET /metrics HTTP/1.1\r\n")
                held.append(so)
        time.sleep(0.2)  # accepted, and their 2 s for a head started
        late = socket.socket()
        late.bind(("127.0.0.19", 0))
        late.connect(("127.0.0.1", port))
        late.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        late.settimeout(1.0)
        try:
            early = late.recv(100)
        except socket.timeout:
            early = None
        except OSError as e:
            early = repr(e).encode()
        # no slot can free before the first held connection's 2 s run out; if the machine was
        # so slow that they had, an early answer would be right
        in_time = time.time() - t0 < 1.9
        late.settimeout(10)
        try:
            later = late.recv(100) if early is None else early
        except OSError as e:
            later = repr(e).encode()
        for so in held + [late]:
            so.close()
        t.ok((early is None or not in_time) and later is not None and later.startswith(b"HTTP/1.1 200"),
             "32 connections held: the 33rd is not taken in (no answer within 1 s) and is answered once "
             "a slot frees", (early, later[:40] if later else later, in_time))

        # a head over 8 KiB: 431, then closed
        so = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            so.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"p" * 9000 + b"\r\n")
            got = b""
            while True:
                d = so.recv(4096)
                if not d:
                    break
                got += d
        except OSError as e:
            got = repr(e).encode()
        finally:
            so.close()
        t.ok(got.startswith(b"HTTP/1.1 431"), "a request head over 8 KiB: 431, then the connection is closed",
             got[:80])
        # a client that leaves after half a head: closed, and the listener goes on answering
        so = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            so.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            so.shutdown(socket.SHUT_WR)
            rest = so.recv(100)
        except OSError as e:
            rest = repr(e).encode()
        finally:
            so.close()
        try:
            code, _, _ = scrape(port, "/healthz")
        except OSError as e:  # a listener stuck on that connection answers no one
            code = e
        t.ok(rest == b"" and code == 200, "half a head, then the client's end closed: closed without an "
             "answer, and the next probe is answered", (rest, code))

        # HAMi names switched off; bad input
        code, _, _ = scrape(port, "/nope")
        t.ok(code == 404, "unknown path: 404")
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, data=b"x", method="POST")
        try:
            code = urllib.request.urlopen(req, timeout=5).status
        except urllib.error.HTTPError as e:
            code = e.code
        t.ok(code in (400, 405), "POST /metrics refused", code)
        cfg["metrics"]["hamiNames"] = False
        write_atomic(s.env.config, json.dumps(cfg))
        s.env.agent.p.send_signal(signal.SIGHUP)
        m = gvtest.wait_for(lambda: (lambda x: x if not [y for y in x if y[0].startswith("hami_")] else None)(
            parse(scrape(port)[2])), 5)
        t.ok(m is not None and find(m, "gpuvisor_container_gpu_memory_limit_bytes", **ca) == 1000 * MiB,
             "metrics.hamiNames false: no hami_* series, gpuvisor's stay")
        # pod gone: its containers leave /metrics once GC removed the directory
        s.env.api.delete_pod("pair", ns="team")
        m = gvtest.wait_for(lambda: (lambda x: x if not [lab for lab in labelsets(
            x, "gpuvisor_container_gpu_memory_limit_bytes") if lab["pod"] == "pair"] else None)(
            parse(scrape(port)[2])), 10)
        t.ok(m is not None, "pod deleted and collected: its series are gone")
    finally:
        s.close()

    backstop_off_then_report()
    backstop_kill_choice(True)
    backstop_kill_choice(False)
    backstop_kill_spares_sibling()
    backstop_kill_fewest()
    no_pod_cgroup_claimed_by_region()
    backstop_grace()

    # configuration errors name the key
    bad = agent.Env(config={"metrics": {"backstop": "explode"}})
    try:
        p = bad.start_agent(["--metrics-listen", "127.0.0.1:0"])
        rc = p.p.wait(10)
        t.ok(rc == 2 and "metrics.backstop" in bad.agent_log(), "bad metrics.backstop: agent refuses to start, names the key",
             bad.agent_log()[-500:])
    finally:
        bad.agent = None
        bad.close()
    bad = agent.Env()
    try:
        p = bad.start_agent(["--metrics-listen", "127.0.0.1:notaport"])
        rc = p.p.wait(10)
        t.ok(rc != 0 and "bad port" in bad.agent_log(), "bad --metrics-listen: clear error, no start",
             bad.agent_log()[-500:])
    finally:
        bad.agent = None
        bad.close()


main()
t.done()
