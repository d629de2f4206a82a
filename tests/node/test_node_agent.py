#!/usr/bin/python3
"""gpuvisor-node end to end, with stand-ins for what cannot run here.

The real agent binary runs over the fake libnvidia-ml.so.1
(tests/fakes/nvml, faults injected through GV_FAKE_NVML_FAULTS), the fake
API server (tests/fakes/apiserver) and the kubelet stand-ins
(tests/fakes/kubelet: Python grpcio and grpc-go).
"""
import json
import os
import subprocess
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, ann, envs, mounts, write_atomic  # noqa: E402

t = gvtest.Tap()
if not agent.have_fake_nvml():
    t.skip("gpuvisor-node end to end", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()

LIM1 = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"}


def wait_ann(env, pod, key, want, timeout=30):
    return gvtest.wait_for(lambda: ann(env.api.pod(pod), key) == want, timeout)


def devices_event(k, pred=None, timeout=30):
    return k.event("devices", pred, timeout)


def scenario_priority(kind, env, k, ids):
    """CUDA_TASK_PRIORITY from nvidia.com/priority or HAMi's env, into env and limits file."""
    cases = [("prio-res", dict(LIM1, **{"nvidia.com/priority": "0"}), {}, "0", "nvidia.com/priority: 0"),
             ("prio-env", LIM1, {"CUDA_TASK_PRIORITY": "1"}, "1", "env CUDA_TASK_PRIORITY=1 (HAMi)"),
             ("prio-both", dict(LIM1, **{"nvidia.com/priority": "2"}), {"CUDA_TASK_PRIORITY": "5"}, "2",
              "nvidia.com/priority wins over env"),
             ("prio-low", dict(LIM1, **{"nvidia.com/priority": "40"}), {}, "15",
              "nvidia.com/priority 40: the lowest level the interposer accepts, 15"),
             ("prio-bad", LIM1, {"CUDA_TASK_PRIORITY": "high"}, None, "env CUDA_TASK_PRIORITY=high ignored")]
    for i, (name, lim, cenv, want, what) in enumerate(cases):
        env.api.create_pod(name, [("main", lim, cenv)], "v1;node=node1;main=%s:1000:300" % GPUS[i % 2])
        a = k.cmd("allocate", ids=[ids[5 + i]])
        uid = env.api.pod(name)["metadata"]["uid"]
        lim_file = os.path.join(env.state, "limits", uid, "main", "limits.env")
        text = open(lim_file).read() if os.path.exists(lim_file) else ""
        has = ("CUDA_TASK_PRIORITY=%s\n" % want) in text if want else "CUDA_TASK_PRIORITY" not in text
        t.ok(a and a["ok"] and envs(a).get("CUDA_TASK_PRIORITY") == want and has and
             "CUDA_DEVICE_SM_LIMIT_0=30\n" in text and "/var/run/gpuvisor-node" in mounts(a),
             "[%s] %s -> CUDA_TASK_PRIORITY %s in env and limits file, SM limit, node dir mounted"
             % (kind, what, want), (a, text))
    # the directory removed under a running agent comes back at the next Allocate
    node_dir = os.path.join(env.state, "node")
    os.rmdir(node_dir)
    env.api.create_pod("prio-again", [("main", LIM1)], "v1;node=node1;main=%s:1000:0" % GPUS[0])
    a = k.cmd("allocate", ids=[ids[5 + len(cases)]])
    t.ok(a and a["ok"] and os.path.isdir(node_dir) and os.stat(node_dir).st_mode & 0o7777 == 0o1777,
         "[%s] node directory removed on the host: recreated (1777) before the next reply" % kind, a)


def scenario_core(kind, go_bin):
    """Registration, ListAndWatch, Allocate flows, kubelet restart: for each stand-in."""
    env = agent.Env()
    try:
        env.start_agent()
        k = env.start_kubelet(kind, go_bin)
        reg = k.event("registered", timeout=10)
        t.ok(reg and reg["resource_name"] == "nvidia.com/gpu" and reg["version"] == "v1beta1",
             "[%s] agent registers nvidia.com/gpu v1beta1" % kind, reg or env.agent_log())
        ev = devices_event(k, timeout=10)
        ids = [d["id"] for d in ev["devices"]] if ev else []
        t.ok(len(ids) == 20 and all(len(i) <= 63 for i in ids) and
             sum(i.startswith(GPUS[1]) for i in ids) == 10,
             "[%s] 2 GPUs x deviceSplitCount 10 = 20 devices, IDs <= 63 chars" % kind, ev)
        t.ok(ev and {tuple(d["numa"]) for d in ev["devices"] if d["id"].startswith(GPUS[1])} == {(1,)},
             "[%s] NUMA node of each GPU comes from /sys (PCI bus id)" % kind)

        # single GPU
        env.api.create_pod("single", [("main", LIM1)], "v1;node=node1;main=%s:1000:300" % GPUS[1])
        a = k.cmd("allocate", ids=[ids[0]])
        e = envs(a)
        t.ok(e.get("NVIDIA_VISIBLE_DEVICES") == GPUS[1] and e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "1000m" and
             e.get("CUDA_DEVICE_SM_LIMIT_0") == "30" and e.get("CUDA_DEVICE_SM_LIMIT") == "30" and
             e.get("CUDA_DEVICE_MEMORY_SHARED_CACHE") == "/var/run/gpuvisor/shared.cache" and
             "CUDA_OVERSUBSCRIBE" not in e,
             "[%s] Allocate single-GPU: the scheduler's GPU (not the kubelet's pick) and its limits" % kind, a)
        pod = env.api.pod("single")
        uid = pod["metadata"]["uid"]
        m = mounts(a)
        host = "/host%s/containers/%s/main" % (env.state, uid)
        t.ok(m.get("/usr/local/gpuvisor/lib/libgpuvisor.so") == ("/usr/local/gpuvisor/lib/libgpuvisor.so", True) and
             m.get("/etc/ld.so.preload") == ("/usr/local/gpuvisor/ld.so.preload", True) and
             m.get("/var/run/gpuvisor") == (host, False) and
             m.get("/etc/gpuvisor/limits.env") == ("/host%s/limits/%s/main/limits.env" % (env.state, uid), True),
             "[%s] mounts: interposer ro, ld.so.preload ro, per-container dir rw, limits file ro" % kind, m)
        t.ok(agent.limits_unreachable(a) is None,
             "[%s] no writable mount reaches the limits file's host directory, a parent or a child of it"
             % kind, agent.limits_unreachable(a))
        # The region is made by the agent and mounted as a file of its own: the
        # container can write it but not unlink or replace it (a region deleted
        # in the container let later processes start with a fresh limit).
        region = os.path.join(env.state, "containers", uid, "main", "shared.cache")
        magic = open(region, "rb").read(8) if os.path.exists(region) else b""
        t.ok(m.get("/var/run/gpuvisor/shared.cache") == (host + "/shared.cache", False) and
             len(magic) == 8 and magic != b"\0" * 8 and (os.stat(region).st_mode & 0o666) == 0o666,
             "[%s] region made at Allocate (initialised, writable by any uid) and mounted as its own file"
             % kind, (m.get("/var/run/gpuvisor/shared.cache"), magic))
        lim = os.path.join(env.state, "limits", uid, "main", "limits.env")
        text = open(lim).read() if os.path.exists(lim) else ""
        t.ok("CUDA_DEVICE_MEMORY_LIMIT_0=1000m\n" in text and "CUDA_DEVICE_SM_LIMIT_0=30\n" in text and
             "NVIDIA_VISIBLE_DEVICES" not in text,
             "[%s] limits file written with the same keys as the environment" % kind, text)
        node_dir = os.path.join(env.state, "node")
        st = os.stat(node_dir) if os.path.isdir(node_dir) else None
        t.ok(m.get("/var/run/gpuvisor-node") == ("/host%s/node" % env.state, False) and
             st is not None and st.st_mode & 0o7777 == 0o1777 and "CUDA_TASK_PRIORITY" not in e,
             "[%s] node priority directory: <state>/node mode 1777 mounted rw at /var/run/gpuvisor-node; "
             "no priority asked, none set" % kind, (m, st and oct(st.st_mode)))
        scenario_priority(kind, env, k, ids)
        t.ok(wait_ann(env, "single", "gpuvisor.io/allocation", "success") and
             ann(env.api.pod("single"), "gpuvisor.io/allocated-containers") == "main",
             "[%s] pod annotated allocation=success, allocated-containers=main" % kind, env.api.pod("single"))

        # multi-GPU container
        env.api.create_pod("multi", [("train", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2000"})],
                           "v1;node=node1;train=%s:2000:0,%s:2000:0" % (GPUS[0], GPUS[1]))
        a = k.cmd("allocate", ids=[ids[0], ids[15]])
        e = envs(a)
        t.ok(e.get("NVIDIA_VISIBLE_DEVICES") == "%s,%s" % (GPUS[0], GPUS[1]) and
             e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "2000m" and e.get("CUDA_DEVICE_MEMORY_LIMIT_1") == "2000m" and
             "CUDA_DEVICE_SM_LIMIT_0" not in e and "ALIYUN_COM_GPU_MEM_IDX" not in e,
             "[%s] Allocate multi-GPU: both GPUs in assignment order, a memory limit per index" % kind, a)

        # Aliyun gpushare: aliyun.com/gpu-mem (GiB per container) sets its env
        env.api.create_pod("share", [("app", {"aliyun.com/gpu-mem": "3"}), ("side", {"cpu": "1"})],
                           "v1;node=node1;app=%s:3072:0" % GPUS[1])
        a = k.cmd("allocate", ids=[ids[12]])  # IDs no other container of this test uses
        e = envs(a)
        t.ok(e.get("ALIYUN_COM_GPU_MEM_IDX") == "1" and e.get("ALIYUN_COM_GPU_MEM_DEV") == "40" and
             e.get("ALIYUN_COM_GPU_MEM_CONTAINER") == "3" and e.get("ALIYUN_COM_GPU_MEM_POD") == "3" and
             e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "3072m",
             "[%s] aliyun.com/gpu-mem: 3 -> gpushare env (GPU index 1, its 40 GiB, the 3 GiB asked) and a 3 GiB limit"
             % kind, a)

        # multi-container pod: one Allocate per container, in order
        env.api.create_pod("pair", [("a", LIM1), ("b", LIM1)],
                           "v1;node=node1;a=%s:1000:300;b=%s:500:100" % (GPUS[0], GPUS[1]))
        a1 = k.cmd("allocate", ids=[ids[1]])
        t.ok(envs(a1).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "1000m" and
             wait_ann(env, "pair", "gpuvisor.io/allocation", "allocating"),
             "[%s] multi-container: first container allocated, pod still allocating" % kind, a1)
        a2 = k.cmd("allocate", ids=[ids[2]])
        t.ok(envs(a2).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "500m" and
             envs(a2).get("NVIDIA_VISIBLE_DEVICES") == GPUS[1] and
             wait_ann(env, "pair", "gpuvisor.io/allocation", "success") and
             ann(env.api.pod("pair"), "gpuvisor.io/allocated-containers") == "a,b",
             "[%s] multi-container: second container gets its own GPU, pod success" % kind, a2)

        # opt-out of /etc/ld.so.preload
        env.api.create_pod("optout", [("main", LIM1)], "v1;node=node1;main=%s:1000:0" % GPUS[0],
                           annotations={"gpuvisor.io/preload": "false"})
        a = k.cmd("allocate", ids=[ids[3]])
        m = mounts(a)
        t.ok(a and a["ok"] and "/etc/ld.so.preload" not in m and "/usr/local/gpuvisor/lib/libgpuvisor.so" in m,
             "[%s] gpuvisor.io/preload=false drops only the ld.so.preload mount" % kind, m)

        # two pods pending at once, no promise: Allocate names no pod, so the agent serves the
        # oldest assignment first (the kubelet admits pods in the order they were bound);
        # names sort the other way, so an order by name would swap the two pods' limits
        env.api.create_pod("zz-older", [("main", LIM1)], "v1;node=node1;main=%s:600:0" % GPUS[0])
        time.sleep(0.01)
        env.api.create_pod("aa-newer", [("main", LIM1)], "v1;node=node1;main=%s:800:0" % GPUS[0])
        first = k.cmd("allocate", ids=[ids[13]])  # IDs no other container of this test uses
        second = k.cmd("allocate", ids=[ids[16]])
        t.ok(first and first["ok"] and envs(first).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "600m" and
             second and second["ok"] and envs(second).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "800m" and
             wait_ann(env, "zz-older", "gpuvisor.io/allocation", "success") and
             wait_ann(env, "aa-newer", "gpuvisor.io/allocation", "success"),
             "[%s] two pods pending: the older assignment is served first, whatever the names" % kind,
             (first, second))

        # no assignment: clear error
        env.api.create_pod("plain", [("main", {"nvidia.com/gpu": "1"})])
        a = k.cmd("allocate", ids=[ids[4]])
        t.ok(a and not a["ok"] and a["code"] == 9 and "no pending pod on node node1" in a["message"] and
             "gpuvisor-scheduler" in a["message"],
             "[%s] no assignment: FAILED_PRECONDITION explaining why" % kind, a)
        env.api.delete_pod("plain")

        # kubelet restart: sockets deleted, the agent registers again (how
        # fast is a timing goal for make bench, not asserted here)
        restarted, reg = k.restart()
        t.ok(restarted is not None and reg is not None and reg["resource_name"] == "nvidia.com/gpu",
             "[%s] kubelet restart: the agent registers again" % kind, (restarted, reg))
        ev = devices_event(k, timeout=30)  # a bound on waiting, not a timing claim
        t.ok(ev and len(ev["devices"]) == 20, "[%s] devices re-sent after kubelet restart" % kind)
    finally:
        env.close()


def gpu_of(dev_id):
    return dev_id.split("::")[0]


def scenario_preferred(kind, go_bin):
    """The kubelet's device manager: GetPreferredAllocation, then Allocate with
    the preferred IDs, so its checkpoint names the GPU of the assignment.  On a
    node with mixed cards (40 GiB A100 + 16 GiB T4): per-device limits, SM
    shares that are not multiples of 10 %, a kubelet that ignores the
    preference, a repeated request."""
    env = agent.Env(models=[("NVIDIA A100-SXM4-40GB", "40g"), ("Tesla T4", "16g")])
    try:
        env.start_agent()
        k = env.start_kubelet(kind, go_bin)
        k.event("registered", timeout=10)
        devices_event(k, timeout=10)
        # the kubelet's own order would take GPU 0's devices first: the pod is on GPU 1
        env.api.create_pod("pref", [("main", LIM1)], "v1;node=node1;main=%s:1000:333" % GPUS[1])
        a = k.cmd("admit", size=1)
        t.ok(a and a["ok"] and a["preferred"] == a["ids"] and len(a["ids"]) == 1 and
             gpu_of(a["ids"][0]) == GPUS[1] and envs(a).get("NVIDIA_VISIBLE_DEVICES") == GPUS[1] and
             envs(a).get("CUDA_DEVICE_SM_LIMIT_0") == "34",
             "[%s] GetPreferredAllocation names a device of the assigned GPU; the kubelet records "
             "what Allocate hands over (SM 333 thousandths -> 34 %%)" % kind, a)
        # one container on both cards, 50 % of each (what gpumem-percentage 50 assigns)
        env.api.create_pod("mixed", [("main", {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50",
                                               "nvidia.com/gpucores": "25"})],
                           "v1;node=node1;main=%s:8192:251,%s:20480:1000" % (GPUS[1], GPUS[0]))
        a = k.cmd("admit", size=2)
        e = envs(a)
        t.ok(a and a["ok"] and sorted(gpu_of(i) for i in a["ids"]) == sorted(GPUS) and
             e.get("NVIDIA_VISIBLE_DEVICES") == "%s,%s" % (GPUS[1], GPUS[0]) and
             e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "8192m" and e.get("CUDA_DEVICE_MEMORY_LIMIT_1") == "20480m" and
             e.get("CUDA_DEVICE_SM_LIMIT_0") == "26" and e.get("CUDA_DEVICE_SM_LIMIT_1") == "100" and
             "CUDA_DEVICE_SM_LIMIT" not in e,
             "[%s] mixed cards, 50 %% of each: every index gets its own card's memory and share "
             "(251 -> 26 %%, rounded up)" % kind, a)
        # a kubelet that ignores the preference (its TopologyManager decided)
        env.api.create_pod("ignored", [("main", LIM1)], "v1;node=node1;main=%s:700:0" % GPUS[1])
        a = k.cmd("admit", size=1, ignore_preference=True)
        t.ok(a and a["ok"] and a["preferred"] == [] and gpu_of(a["ids"][0]) == GPUS[0] and
             envs(a).get("NVIDIA_VISIBLE_DEVICES") == GPUS[1] and
             envs(a).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "700m",
             "[%s] kubelet ignoring the preference: the container still gets its assigned GPU and limits" % kind, a)
        t.ok(gvtest.wait_for(lambda: "on other GPUs than assigned" in env.agent_log() and
                             "default/ignored" in env.agent_log(), 5),
             "[%s] the mismatch is logged naming the pod" % kind)
        # the same request again (the reply was lost): the same answer, no second pod consumed
        again = k.cmd("allocate", ids=a["ids"]) if a and a["ok"] else None
        t.ok(again and again["ok"] and again["resp"] == a["resp"],
             "[%s] a repeated Allocate gets the same answer" % kind, again)
        # ... also after the container's runtime directory was removed: the answer mounts
        # the directory and its region (a file of its own), and the runtime fails a
        # container whose mount source is missing
        uid = env.api.pod("ignored")["metadata"]["uid"]
        rt = os.path.join(env.state, "containers", uid, "main")
        # "pref" was promised its IDs by GetPreferredAllocation, then answered
        rec = os.path.join(env.state, "limits", env.api.pod("pref")["metadata"]["uid"], "main")
        t.ok(os.path.isfile(os.path.join(rec, "answer")) and
             not os.path.exists(os.path.join(rec, "promise")) and
             os.stat(rt).st_mode & 0o7777 == 0o1777 and
             os.stat(os.path.join(rt, "shared.cache")).st_mode & 0o777 == 0o666,
             "[%s] answered: the answer record replaces the promise; the runtime directory is "
             "sticky and world-writable (1777) and its region 0666, for a container of any user"
             % kind, (os.listdir(rec), oct(os.stat(rt).st_mode)))
        shutil.rmtree(rt, ignore_errors=True)
        again = k.cmd("allocate", ids=a["ids"]) if a and a["ok"] else None
        t.ok(again and again["ok"] and again["resp"] == a["resp"] and
             os.path.isfile(os.path.join(rt, "shared.cache")) and
             os.stat(os.path.join(rt, "shared.cache")).st_size > 0,
             "[%s] repeated after its runtime directory was removed: the same answer, the "
             "directory and its region made again" % kind, (again, os.path.exists(rt)))
        t.ok(wait_ann(env, "ignored", "gpuvisor.io/allocation", "success") and
             wait_ann(env, "mixed", "gpuvisor.io/allocation", "success"),
             "[%s] pods annotated success" % kind)
        # once the pod's status shows the container created, the kubelet had the answer:
        # the same IDs no longer replay it (a new container must not inherit it)
        code, _ = env.api.req("PATCH", "/api/v1/namespaces/default/pods/ignored/status",
                              {"status": {"containerStatuses": [{"name": "main", "containerID": "containerd://1"}]}},
                              "application/merge-patch+json")
        last = {}

        def refused():
            last["a"] = k.cmd("allocate", ids=a["ids"])
            return last["a"] and not last["a"]["ok"] and last["a"]["code"] == 9
        t.ok(code == 200 and a and a["ok"] and gvtest.wait_for(refused, 5),
             "[%s] container created (status has its containerID): a repeat is refused, not replayed" % kind,
             (code, last))
    finally:
        env.close()


def scenario_health():
    env = agent.Env()
    try:
        env.start_agent()
        k = env.start_kubelet("py")
        devices_event(k, timeout=10)
        write_atomic(env.faults, "xid 1 13 1\n")
        ev = devices_event(k, timeout=1.5)
        t.ok(ev is None, "application Xid 13 leaves health unchanged", ev)
        write_atomic(env.faults, "xid 1 13 1\nxid 1 79 2\n")
        ev = devices_event(k, lambda e: any(d["health"] == "Unhealthy" for d in e["devices"]), 5)
        t.ok(ev and all((d["health"] == "Unhealthy") == d["id"].startswith(GPUS[1]) for d in ev["devices"]),
             "critical Xid 79 on GPU 1: its 10 devices turn Unhealthy in ListAndWatch", ev)
        inv = gvtest.wait_for(lambda: json.loads(
            (env.api.node("node1")["metadata"].get("annotations") or {}).get("gpuvisor.io/node-gpus", "{}")
        ).get("gpus", [{}, {}])[1].get("healthy") is False, 5)
        t.ok(inv, "inventory annotation shows GPU 1 unhealthy")
        ev = devices_event(k, lambda e: all(d["health"] == "Healthy" for d in e["devices"]), 5)
        t.ok(ev is not None, "GPU 1 back to Healthy after the quiet period (recovery)")
        write_atomic(env.faults, "lost 0\n")
        ev = devices_event(k, lambda e: any(d["health"] == "Unhealthy" for d in e["devices"]), 5)
        t.ok(ev and all((d["health"] == "Unhealthy") == d["id"].startswith(GPUS[0]) for d in ev["devices"]),
             "unreachable GPU 0 (GPU_IS_LOST): Unhealthy", ev)
        write_atomic(env.faults, "")
        ev = devices_event(k, lambda e: all(d["health"] == "Healthy" for d in e["devices"]), 5)
        t.ok(ev is not None, "GPU 0 reachable again: Healthy")
    finally:
        env.close()


def scenario_health_quiet_period():
    """A GPU a critical Xid made Unhealthy stays so until the quiet period has
    passed with no new Xid, however often the health probe runs (every 100 ms
    here, the quiet period 10 minutes): a probe that finds the GPU reachable
    is no reason to bring it back early."""
    env = agent.Env()
    try:
        env.start_agent(extra=["--health-recover-ms", "600000"])
        k = env.start_kubelet("py")
        devices_event(k, timeout=10)
        write_atomic(env.faults, "xid 1 79 1\n")
        ev = devices_event(k, lambda e: any(d["health"] == "Unhealthy" for d in e["devices"]), 5)
        t.ok(ev is not None, "critical Xid 79 on GPU 1: Unhealthy", ev)
        ev = devices_event(k, lambda e: all(d["health"] == "Healthy" for d in e["devices"]), 2)
        t.ok(ev is None, "still Unhealthy after 20 probes: the 10-minute quiet period has not passed", ev)
    finally:
        env.close()


def scenario_node_publication(tls=False):
    """Inventory, labels, heartbeat, API outage; tls: the same over HTTPS with
    the CA and token from a kubeconfig (the transport a cluster uses)."""
    tag = "[https] " if tls else ""

    def ok(cond, name, diag=None):
        t.ok(cond, tag + name, diag)

    env = agent.Env(tls=tls)
    try:
        env.start_agent()
        node = gvtest.wait_for(lambda: (env.api.node("node1")["metadata"].get("annotations") or {})
                               .get("gpuvisor.io/node-gpus") and env.api.node("node1"), 10)
        a = node["metadata"]["annotations"] if node else {}
        inv = json.loads(a.get("gpuvisor.io/node-gpus", "{}"))
        g = inv.get("gpus", [{}])[0]
        ok(inv.get("version") == 1 and len(inv.get("gpus", [])) == 2 and g.get("uuid") == GPUS[0] and
             g.get("model") == "NVIDIA A100-SXM4-40GB" and g.get("memoryMiB") == 40960 and
             g.get("split") == 10 and g.get("cores") == 100 and g.get("numa") == 0 and
             g.get("mode") == "vgpu" and g.get("healthy") is True and inv.get("cudaVersion") == "12.4",
             "node annotation gpuvisor.io/node-gpus carries the versioned inventory", inv)
        lab = node["metadata"].get("labels", {}) if node else {}
        ok(lab.get("nvidia.com/gpu.product") == "NVIDIA-A100-SXM4-40GB-SHARED" and lab.get("nvidia.com/gpu.count") == "2" and
             lab.get("nvidia.com/gpu.memory") == "40960" and lab.get("nvidia.com/gpu.replicas") == "10" and
             lab.get("nvidia.com/gpu.sharing-strategy") == "none" and lab.get("gpuvisor.io/gpu.sharing-mode") == "vgpu" and
             lab.get("nvidia.com/cuda.driver.major") == "550" and lab.get("nvidia.com/cuda.driver-version.major") == "550" and
             lab.get("nvidia.com/cuda.runtime.major") == "12" and lab.get("nvidia.com/mig.capable") == "true" and
             lab.get("nvidia.com/gpu.compute.major") == "9" and lab.get("nvidia.com/gfd.timestamp", "").isdigit(),
             "NVIDIA GFD labels published (fake NVML)", lab)
        hb1 = a.get("gpuvisor.io/node-heartbeat")
        rv1 = node["metadata"]["resourceVersion"] if node else None
        time.sleep(2.2)
        node2 = env.api.node("node1")
        hb2 = node2["metadata"]["annotations"].get("gpuvisor.io/node-heartbeat")
        ok(hb1 and hb2 and hb2 > hb1, "heartbeat annotation refreshed (%s -> %s)" % (hb1, hb2))
        stats = json.loads(env.api.get_raw("/_fake/stats"))
        patches = sum(v for k2, v in stats.items() if k2.startswith("PATCH /api/v1/nodes/node1"))
        ok(node2["metadata"]["annotations"]["gpuvisor.io/node-gpus"] == a["gpuvisor.io/node-gpus"] and
             rv1 is not None, "inventory text unchanged across heartbeats (%d node patches)" % patches)

        # API outage: heartbeats fail, then resume
        env.api.ctl("fail?code=503&count=-1")
        time.sleep(1.5)
        env.api.ctl("heal")
        hb_before = env.api.node("node1")["metadata"]["annotations"]["gpuvisor.io/node-heartbeat"]
        resumed = gvtest.wait_for(lambda: env.api.node("node1")["metadata"]["annotations"]
                                  ["gpuvisor.io/node-heartbeat"] > hb_before, 6)
        ok(resumed and env.agent.p.poll() is None, "API outage: agent survives, heartbeat resumes after recovery")
        if tls:
            stats = json.loads(env.api.get_raw("/_fake/stats"))
            ok(stats.get("TLS handshake", 0) >= 1 and stats.get("TLS handshake-failed", 0) == 0,
               "agent reached the API server over verified TLS with the kubeconfig's CA", stats)
    finally:
        env.close()


def scenario_topology():
    """NVLink and PCIe-switch groups from (fake) NVML in the inventory: a 5-GPU
    box with NVLink bridges 0-1 and 2-3, GPUs 0 and 1 behind one PCIe switch,
    GPU 4 on neither (alone: no group, not a group of one)."""
    env = agent.Env(gpus=5)
    try:
        topo = ["nvlink=1:4 pcieswitch=7", "nvlink=0:4 pcieswitch=7", "nvlink=3:2", "nvlink=2:2", ""]
        lines = open(env.gpu_cfg).read().splitlines()
        write_atomic(env.gpu_cfg, "".join("%s %s\n" % (l, x) for l, x in zip(lines, topo)))
        env.start_agent()
        node = gvtest.wait_for(lambda: (env.api.node("node1")["metadata"].get("annotations") or {})
                               .get("gpuvisor.io/node-gpus") and env.api.node("node1"), 10)
        inv = json.loads(node["metadata"]["annotations"]["gpuvisor.io/node-gpus"]) if node else {}
        gpus = inv.get("gpus", [])
        t.ok([g.get("nvlinkIsland") for g in gpus] == [0, 0, 2, 2, None] and
             [g.get("pcieSwitch") for g in gpus] == [0, 0, None, None, None],
             "inventory: nvlinkIsland from NVLink state + remote PCI ids, pcieSwitch from the common "
             "ancestor (PIX); GPUs in no group carry neither", gpus)
    finally:
        env.close()


def scenario_nvml_count_fails():
    """NVML initialises but cannot count the GPUs: the agent stops with the
    reason, and publishes no inventory (an empty one would tell the
    scheduler the node's GPUs are gone, and its pods with them)."""
    env = agent.Env()
    try:
        p = env.start_agent(env_extra={"GV_FAKE_NVML_COUNT_FAILS": "1"})

        def anns():
            node = env.api.node("node1")
            return (node or {}).get("metadata", {}).get("annotations") or {}
        # until it exits, or (the bug) publishes an inventory: bounded, not a timing check
        gvtest.wait_for(lambda: p.p.poll() is not None or "gpuvisor.io/node-gpus" in anns(), 30)
        rc = p.p.poll()
        log = open(os.path.join(env.dir, "agent.log"), errors="replace").read()
        t.ok(rc != 0 and "NVML: device count" in log,
             "NVML device count fails: the agent exits non-zero naming it", (rc, log[-2000:]))
        t.ok("gpuvisor.io/node-gpus" not in anns(),
             "NVML device count fails: no inventory published", anns())
    finally:
        env.close()


def scenario_numeric_flags():
    """Numeric flags take positive integers: 0 (a heartbeat or GC loop with no
    pause) or text is a usage error naming the flag, before anything starts."""
    for flag, val in (("--heartbeat-seconds", "0"), ("--gc-seconds", "-5"), ("--health-probe-ms", "10x")):
        r = subprocess.run([agent.NODE_BIN, "--node-name", "n", flag, val], capture_output=True,
                           timeout=30)
        err = r.stderr.decode(errors="replace")
        t.ok(r.returncode == 2 and "%s needs a positive integer, not '%s'" % (flag, val) in err,
             "%s %s: usage error naming the flag" % (flag, val), (r.returncode, err))


def scenario_config_reload():
    env = agent.Env(config={"deviceSplitCount": 4})
    try:
        env.start_agent()
        k = env.start_kubelet("py")
        ev = devices_event(k, timeout=10)
        t.ok(ev and len(ev["devices"]) == 8, "config file: deviceSplitCount 4 -> 8 devices", ev)
        env.api.create_pod("running", [("main", LIM1)], "v1;node=node1;main=%s:1000:0" % GPUS[0])
        a = k.cmd("allocate", ids=[ev["devices"][0]["id"]])
        uid = env.api.pod("running")["metadata"]["uid"]
        t.ok("LIBCUDA_LOG_LEVEL" not in envs(a), "no libcudaloglevel configured: no LIBCUDA_LOG_LEVEL", a)
        write_atomic(env.config, json.dumps({"deviceSplitCount": 2, "gpus": [
            {"index": 1, "mode": "exclusive"}], "deviceMemoryScaling": 2, "libcudaloglevel": "3"}))
        ev = devices_event(k, timeout=30)
        t.ok(ev and sorted(d["id"] for d in ev["devices"]) == sorted(
            ["%s::0" % GPUS[0], "%s::1" % GPUS[0], GPUS[1]]),
            "file change reloads: split 2 on GPU 0, GPU 1 exclusive (one device, bare uuid)", ev)
        t.ok(a and a["ok"] and os.path.isdir(os.path.join(env.state, "containers", uid, "main")),
             "running pod's container directory kept across the reload")
        env.api.create_pod("over", [("main", LIM1)], "v1;node=node1;main=%s:30000:0" % GPUS[0])
        a = k.cmd("allocate", ids=["%s::1" % GPUS[0]])
        t.ok(envs(a).get("CUDA_OVERSUBSCRIBE") == "true" and envs(a).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "30000m",
             "deviceMemoryScaling 2: CUDA_OVERSUBSCRIBE=true", a)
        t.ok(envs(a).get("LIBCUDA_LOG_LEVEL") == "3",
             "HAMi's libcudaloglevel \"3\" in the config: LIBCUDA_LOG_LEVEL=3 in the container", a)
        a = k.cmd("allocate", ids=[GPUS[1]])
        t.ok(a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": GPUS[1]} and not a["resp"]["mounts"],
             "exclusive GPU without a gpuvisor assignment: the kubelet's device, no interposer", a)
        env.api.create_pod("excl", [("main", dict(LIM1, **{"nvidia.com/priority": "0"}))],
                           "v1;node=node1;main=%s:40960:1000" % GPUS[1])
        # A plain-GPU Allocate is answered at once from the kubelet's IDs when
        # no pod in the cache claims it (no waiting for pods gpuvisor did not
        # schedule), so let the watch deliver the pod first (it takes ~1 ms).
        time.sleep(0.5)
        a = k.cmd("allocate", ids=[GPUS[1]])
        t.ok(a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": GPUS[1]} and not a["resp"]["mounts"] and
             wait_ann(env, "excl", "gpuvisor.io/allocation", "success"),
             "exclusive GPU with a gpuvisor assignment: no interposer, so no limits, priority or node dir", a)
        write_atomic(env.config, "{\"deviceSplitCount\": 0}")
        time.sleep(0.6)
        t.ok(env.agent.p.poll() is None and "deviceSplitCount = 0 is outside" in env.agent_log(),
             "invalid config: clear error, agent keeps running with the old one")
        write_atomic(env.config, json.dumps({"deviceSplitCount": 3}))
        ev = devices_event(k, lambda e: len(e["devices"]) == 6, 5)
        t.ok(ev is not None, "a valid config after an invalid one is picked up (3 x 2 devices)")
        with open(env.config, "w") as f:  # in place, no rename: SIGHUP is the way
            f.write(json.dumps({"deviceSplitCount": 5, "cdi": True}))
        env.agent.p.send_signal(signal.SIGHUP)
        ev = devices_event(k, lambda e: len(e["devices"]) == 10, 5)
        t.ok(ev is not None, "SIGHUP reloads the config (5 x 2 devices)")
        env.api.create_pod("cdi", [("main", LIM1)], "v1;node=node1;main=%s:1000:0" % GPUS[1])
        a = k.cmd("allocate", ids=["%s::0" % GPUS[1]])
        t.ok(a and a["ok"] and a["resp"]["cdi_devices"] == ["gpuvisor.io/gpu=%s" % GPUS[1]] and
             "NVIDIA_VISIBLE_DEVICES" not in envs(a),
             "cdi: true answers CDI device names instead of NVIDIA_VISIBLE_DEVICES", a)
    finally:
        env.close()


def scenario_restart_and_gc():
    env = agent.Env()
    try:
        env.start_agent()
        k = env.start_kubelet("py")
        ev = devices_event(k, timeout=10)
        ids = [d["id"] for d in ev["devices"]]
        env.api.create_pod("half", [("a", LIM1), ("b", LIM1)],
                           "v1;node=node1;a=%s:100:0;b=%s:200:0" % (GPUS[0], GPUS[1]))
        a = k.cmd("allocate", ids=[ids[0]])
        wait_ann(env, "half", "gpuvisor.io/allocated-containers", "a")
        # agent crash: SIGKILL leaves a stale socket behind
        env.stop_agent(signal.SIGKILL)
        sock = os.path.join(env.plugin_dir, "gpuvisor.sock")
        t.ok(os.path.exists(sock), "after a crash the stale plugin socket remains")
        k.event("stream_end", timeout=30)
        env.start_agent()
        reg = k.event("registered", timeout=10)
        ev = devices_event(k, timeout=30)
        t.ok(reg is not None and ev is not None, "agent restart: stale socket replaced, registered, devices listed")
        a = k.cmd("allocate", ids=[ids[1]])
        t.ok(envs(a).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "200m" and
             wait_ann(env, "half", "gpuvisor.io/allocation", "success"),
             "after a restart the next container of a half-allocated pod is served (state from annotations)", a)

        # malformed annotations from the API: clear error, no crash
        env.api.create_pod("bad", [("main", LIM1)], "v1;node=node1;main=%s:lots:0" % GPUS[0])
        a = k.cmd("allocate", ids=[ids[2]])
        t.ok(a and not a["ok"] and a["code"] == 3 and "default/bad" in a["message"] and
             "assignment" in a["message"] and env.agent.p.poll() is None,
             "malformed assignment: INVALID_ARGUMENT naming the pod and the problem, agent alive", a)
        t.ok(wait_ann(env, "bad", "gpuvisor.io/allocation", "failed") and
             ann(env.api.pod("bad"), "gpuvisor.io/allocation-message"),
             "malformed assignment: pod marked failed with a message")
        env.api.create_pod("foreign", [("main", LIM1)], "v1;node=node1;main=GPU-deadbeef:100:0")
        a = k.cmd("allocate", ids=[ids[3]])
        t.ok(a and not a["ok"] and "GPU-deadbeef" in a["message"] and "not advertised" in a["message"],
             "assignment naming a GPU this node lacks: refused with the uuid", a)

        # API outage during Allocate: answered from the cache, annotations written on recovery
        env.api.create_pod("outage", [("main", LIM1)], "v1;node=node1;main=%s:100:0" % GPUS[1])
        time.sleep(0.3)
        env.api.ctl("fail?code=503&count=-1")
        a = k.cmd("allocate", ids=[ids[4]])
        t.ok(a and a["ok"] and envs(a).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "100m",
             "API down: Allocate still answered from the informer cache", a)
        env.api.ctl("heal")
        t.ok(wait_ann(env, "outage", "gpuvisor.io/allocation", "success", timeout=8),
             "API back: the pending allocation annotation is written (backoff retry)")

        # crash before the progress annotation was written: the directory on disk remembers
        env.api.create_pod("crash", [("a", LIM1), ("b", LIM1)],
                           "v1;node=node1;a=%s:300:0;b=%s:400:0" % (GPUS[0], GPUS[1]))
        time.sleep(0.3)
        env.api.ctl("fail?code=503&count=-1")
        a = k.cmd("allocate", ids=[ids[5]])
        env.stop_agent(signal.SIGKILL)
        k.event("stream_end", timeout=30)
        env.api.ctl("heal")
        t.ok(envs(a).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "300m" and
             ann(env.api.pod("crash"), "gpuvisor.io/allocated-containers") is None,
             "container a served while the API was down, agent killed before recording it")
        env.start_agent()
        k.event("registered", timeout=10)
        devices_event(k, timeout=30)
        a = k.cmd("allocate", ids=[ids[6]])
        t.ok(envs(a).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "400m" and
             wait_ann(env, "crash", "gpuvisor.io/allocated-containers", "a,b"),
             "restarted agent serves container b next (served containers recovered from disk)", a)

        # GC of per-container directories
        uid = env.api.pod("half")["metadata"]["uid"]
        d = os.path.join(env.state, "containers", uid)
        t.ok(os.path.isdir(d), "per-container directory exists while the pod does")
        # the runtime directory is the tenant's (mounted writable, 1777): links it plants there
        # must go with it, never what they point at (the agent removes as root)
        outside = os.path.join(env.dir, "not-the-pods")
        os.makedirs(os.path.join(outside, "sub"))
        for f in ("keep", os.path.join("sub", "keep")):
            with open(os.path.join(outside, f), "w") as fh:
                fh.write("host data\n")
        os.symlink(outside, os.path.join(d, "a", "escape"))
        os.symlink(os.path.join(outside, "keep"), os.path.join(d, "a", "escape-file"))
        env.api.delete_pod("half")
        t.ok(gvtest.wait_for(lambda: not os.path.exists(d), 6), "directory GC'd after the pod is deleted")
        t.ok(os.path.isfile(os.path.join(outside, "keep")) and
             os.path.isfile(os.path.join(outside, "sub", "keep")),
             "links the tenant planted in its runtime directory are removed, not followed: "
             "the directory and file they name are untouched", os.listdir(outside))
        uid2 = env.api.pod("outage")["metadata"]["uid"]
        t.ok(os.path.isdir(os.path.join(env.state, "containers", uid2)), "other pods' directories kept")
        rc = env.stop_agent()
        t.ok(rc == 0 and not os.path.exists(sock), "SIGTERM: graceful exit 0, socket removed")
    finally:
        env.close()


def scenario_concurrency():
    """Several pods admitted at once: parallel Allocates each get a different pod."""
    sys.path.insert(0, os.path.join(gvtest.ROOT, "tests", "fakes", "kubelet"))
    import grpc
    import kubelet_py
    import threading
    pb, pbg = kubelet_py.pb, kubelet_py.pbg
    env = agent.Env()
    try:
        env.start_agent()
        k = env.start_kubelet("py")
        devices_event(k, timeout=10)
        n = 8
        for i in range(n):
            env.api.create_pod("c%d" % i, [("main", LIM1)],
                               "v1;node=node1;main=%s:%d:0" % (GPUS[i % 2], 100 + i))
        time.sleep(0.3)
        ch = grpc.insecure_channel("unix://" + os.path.join(env.plugin_dir, "gpuvisor.sock"))
        stub = pbg.DevicePluginStub(ch)
        got, errs = [], []

        def one(i):
            try:
                r = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
                    devices_ids=["%s::%d" % (GPUS[i % 2], i)])]), timeout=10)
                got.append(r.container_responses[0].envs["CUDA_DEVICE_MEMORY_LIMIT_0"])
            except grpc.RpcError as e:
                errs.append(e.details())
        ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        ch.close()
        t.ok(not errs and sorted(got) == sorted("%dm" % (100 + i) for i in range(n)),
             "%d concurrent Allocates: each served a different pod" % n, (got, errs))
        t.ok(gvtest.wait_for(lambda: all(ann(env.api.pod("c%d" % i), "gpuvisor.io/allocation") == "success"
                                         for i in range(n)), 5),
             "every concurrently admitted pod recorded as success")
    finally:
        env.close()


def scenario_readmission(kind, go_bin):
    """kubelet 1.20's device manager race, seen on the real kubelet (make e2e,
    --only pods): a pod being torn down is re-allocated from its pod worker
    while a new pod is admitted; Allocate names no pod, so the torn-down
    pod's call takes the new pod's answer, and the new pod's own admission
    then asks with other IDs (the real kubelet failed it:
    UnexpectedAdmissionError).  It gets its answer again -- when it is the
    one container answered and not created, and the kubelet's checkpoint
    holds no devices for it; otherwise the call is refused."""
    env = agent.Env()
    try:
        env.start_agent()
        k = env.start_kubelet(kind, go_bin)
        k.event("registered", timeout=10)
        ev = devices_event(k, timeout=10)
        ids = [d["id"] for d in ev["devices"]] if ev else []
        ckpt = os.path.join(env.plugin_dir, "kubelet_internal_checkpoint")

        def checkpoint(entries):
            write_atomic(ckpt, json.dumps({"Data": {"PodDeviceEntries": entries,
                                                    "RegisteredDevices": {"nvidia.com/gpu": ids}},
                                           "Checksum": 1}))
        checkpoint(None)  # Go writes an empty list as null
        env.api.create_pod("fresh", [("main", LIM1)], "v1;node=node1;main=%s:1000:300" % GPUS[1])
        stolen = k.cmd("allocate", ids=[ids[12]])  # the torn-down pod's call
        own = k.cmd("allocate", ids=[ids[13]])  # the pod's own admission, other IDs
        t.ok(stolen and stolen["ok"] and own and own["ok"] and own["resp"] == stolen["resp"] and
             envs(own).get("NVIDIA_VISIBLE_DEVICES") == GPUS[1] and
             envs(own).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "1000m",
             "[%s] a pod whose answer another call took, admitted again with other IDs: its own "
             "answer again (the kubelet's checkpoint holds nothing for it)" % kind, (stolen, own))
        uid = env.api.pod("fresh")["metadata"]["uid"]
        checkpoint([{"PodUID": uid, "ContainerName": "main", "ResourceName": "nvidia.com/gpu",
                     "DeviceIDs": {"-1": [ids[13]]}, "AllocResp": ""}])
        held = k.cmd("allocate", ids=[ids[14]])
        t.ok(held and not held["ok"] and held["code"] == 9,
             "[%s] the kubelet's checkpoint holds the container's devices: a call with other IDs is "
             "refused, not given its answer (a pod nobody assigned must not share its slice)" % kind, held)
        os.unlink(ckpt)
        none = k.cmd("allocate", ids=[ids[14]])
        t.ok(none and not none["ok"] and none["code"] == 9,
             "[%s] no checkpoint to read: refused, not guessed" % kind, none)
        checkpoint([])
        # once its container is created, it is no candidate: the next pod's admission again
        code, _ = env.api.req("PATCH", "/api/v1/namespaces/default/pods/fresh/status",
                              {"status": {"containerStatuses": [{"name": "main",
                                                                 "containerID": "containerd://1"}]}},
                              "application/merge-patch+json")
        env.api.create_pod("next", [("main", LIM1)], "v1;node=node1;main=%s:700:0" % GPUS[0])
        first = k.cmd("allocate", ids=[ids[1]])
        again = {}

        def readmitted():
            again["a"] = k.cmd("allocate", ids=[ids[2]])
            return again["a"] and again["a"]["ok"]
        t.ok(code == 200 and first and first["ok"] and
             envs(first).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "700m" and
             gvtest.wait_for(readmitted, 10) and again["a"]["resp"] == first["resp"],
             "[%s] a created container is no candidate: the one not created is admitted again" % kind,
             (code, first, again))
        env.api.create_pod("third", [("main", LIM1)], "v1;node=node1;main=%s:500:0" % GPUS[0])
        third = k.cmd("allocate", ids=[ids[3]])
        two = k.cmd("allocate", ids=[ids[4]])
        t.ok(third and third["ok"] and envs(third).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "500m" and
             two and not two["ok"] and two["code"] == 9 and "could be the one" in two.get("message", ""),
             "[%s] two containers answered and not created: a call with other IDs is refused as "
             "ambiguous" % kind, (third, two))
    finally:
        env.close()


# the quick start-up refusals first: a mutant they catch fails in seconds (GV_FAIL_FAST)
scenario_numeric_flags()
scenario_nvml_count_fails()
go_bin = gvtest.build_go_standin().report(t, "[go] core scenarios")
scenario_core("py", None)
scenario_preferred("py", None)
scenario_readmission("py", None)
if go_bin:
    scenario_core("go", go_bin)
    scenario_preferred("go", go_bin)
scenario_health()
scenario_health_quiet_period()
scenario_node_publication()
scenario_node_publication(tls=True)
scenario_topology()
scenario_config_reload()
scenario_restart_and_gc()
scenario_concurrency()
t.done()
