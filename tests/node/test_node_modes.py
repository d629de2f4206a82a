#!/usr/bin/python3
"""Sharing modes end to end: MPS under a fake nvidia-cuda-mps-control and
NVIDIA's sharing blocks (timeSlicing, mps), with the kubelet stand-in.

The real agent runs over the fake NVML and API server (tests/node/agent.py);
the MPS control program is the stand-in tests/fakes/mps/nvidia-cuda-mps-control,
which checks the environment and protocol the agent uses and records every
call in each GPU's MPS log directory.
"""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, ann, envs, mounts  # noqa: E402

t = gvtest.Tap()
if not agent.have_fake_nvml():
    t.skip("sharing modes end to end", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()

FAKE_MPS = os.path.join(gvtest.ROOT, "tests/fakes/mps/nvidia-cuda-mps-control")
MPS_ARGS = ["--mps-control", FAKE_MPS, "--mps-probe-ms", "300"]


def calls(env, uuid):
    """What the fake MPS control program recorded for one GPU."""
    path = os.path.join(env.state, "mps", uuid, "log", "fake-calls.jsonl")
    try:
        with open(path) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except OSError:
        return []


def daemon_pid(env, uuid):
    try:
        with open(os.path.join(env.state, "mps", uuid, "pipe", "fake-daemon.pid")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def startups(env, uuid):
    return [c for c in calls(env, uuid) if c.get("event") == "startup"]


def commands(env, uuid):
    return [c["command"] for c in calls(env, uuid) if c.get("event") == "command"]


def seen_or_wait(k, mark, name, pred, timeout):
    """An event the stand-in reported since line `mark` (perhaps while the test
    waited for another one), or the next one to come."""
    for ln in k.seen[mark:]:
        try:
            e = json.loads(ln)
        except ValueError:
            continue
        if e.get("event") == name and pred(e):
            return e
    return k.event(name, pred, timeout)


def inventory(env, pred, timeout=15):
    """The node's inventory once pred holds (it is published on its own beat and may trail
    the kubelet's devices), or the last one seen."""
    get = lambda: json.loads(ann(env.api.node(env.node_name), "gpuvisor.io/node-gpus") or "{}")
    gvtest.wait_for(lambda: pred(get()), timeout)
    return get()


def mps_env(split, gpu_lines):
    """An agent environment in mps mode whose fake NVML shows exactly these GPU config lines
    (GPUS[i] is the uuid of line i)."""
    env = agent.Env(config={"mode": "mps", "deviceSplitCount": split})
    with open(env.gpu_cfg, "w") as f:
        for i, line in enumerate(gpu_lines):
            f.write(line % GPUS[i] + "\n")
    return env


def healthy_ids(ev, uuid):
    return [d["id"] for d in ev["devices"] if d["id"].startswith(uuid) and d["health"] == "Healthy"]


def scenario_mps():
    env = agent.Env(config={"mode": "mps", "deviceSplitCount": 4})
    try:
        env.start_agent(MPS_ARGS)
        k = env.start_kubelet("py")
        ev = k.event("devices", lambda e: all(len(healthy_ids(e, g)) == 4 for g in GPUS), 60)
        t.ok(ev is not None, "mps: 4 replicas per GPU, Healthy once each GPU's daemon answers", ev)
        ok = True
        diag = []
        for g in GPUS:
            cli = [c for c in calls(env, g) if c.get("role") == "cli"]
            starts = [c for c in cli if c["argv"] == ["-d"]]
            e = starts[0]["env"] if starts else {}
            ok &= (len(starts) == 1 and not any(c["problems"] for c in cli) and
                   e.get("CUDA_VISIBLE_DEVICES") == g and
                   e.get("CUDA_MPS_PIPE_DIRECTORY") == os.path.join(env.state, "mps", g, "pipe") and
                   e.get("CUDA_MPS_LOG_DIRECTORY") == os.path.join(env.state, "mps", g, "log") and
                   len(startups(env, g)) == 1)
            diag.append(cli)
        t.ok(ok, "mps: one `nvidia-cuda-mps-control -d` per GPU, CUDA_VISIBLE_DEVICES = that GPU, "
             "its own pipe and log directories (checked by the fake)", diag)
        t.ok(all("get_default_active_thread_percentage" in commands(env, g) and
                 not any(c.startswith("set_default") for c in commands(env, g)) for g in GPUS),
             "mps (gpuvisor mode): daemon probed; no daemon-wide defaults (limits are per client)",
             [commands(env, g) for g in GPUS])
        inv = inventory(env, lambda i: sorted(g.get("mode") for g in i.get("gpus", [])) == ["mps", "mps"])
        t.ok(sorted(g.get("mode") for g in inv.get("gpus", [])) == ["mps", "mps"],
             "mps: the inventory tells the scheduler these are MPS GPUs", inv)

        # a pod scheduled by gpuvisor: limits from gpucores / gpumem, driver-enforced
        env.api.create_pod("infer", [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000",
                                               "nvidia.com/gpucores": "30"})],
                           "v1;node=node1;main=%s:2000:300" % GPUS[0])
        a = k.cmd("admit", size=1)
        uid = env.api.pod("infer")["metadata"]["uid"]
        lim_file = os.path.join(env.state, "limits", uid, "main", "limits.env")
        text = open(lim_file).read() if os.path.exists(lim_file) else ""
        e = envs(a)
        m = mounts(a)
        t.ok(a and a["ok"] and e.get("NVIDIA_VISIBLE_DEVICES") == GPUS[0] and
             e.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "30" and
             e.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=2000M" and
             e.get("CUDA_MPS_PIPE_DIRECTORY") == "/tmp/nvidia-mps" and
             "CUDA_DEVICE_SM_LIMIT" not in e and "CUDA_DEVICE_SM_LIMIT_0" not in e,
             "mps Allocate: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from gpucores (30), "
             "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from gpumem (0=2000M), no time limiter", a)
        t.ok(m.get("/tmp/nvidia-mps") == ("/host" + os.path.join(env.state, "mps", GPUS[0], "pipe"), False) and
             m.get("/dev/shm") == ("/host" + os.path.join(env.state, "mps", "shm"), False) and
             "/etc/ld.so.preload" in m and "/etc/gpuvisor/limits.env" in m,
             "mps Allocate: the GPU's pipe directory at CUDA's default path, /dev/shm shared with "
             "the daemon, the interposer preloaded", m)
        t.ok(all(l in text for l in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30\n",
                                     "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2000M\n",
                                     "CUDA_DEVICE_MEMORY_LIMIT_0=2000m\n")) and
             agent.limits_unreachable(a) is None,
             "mps: the MPS limits are in the read-only limits file too (the interposer re-exports "
             "them over the pod's env), next to the memory view limit", text)
        t.ok(gvtest.wait_for(lambda: ann(env.api.pod("infer"), "gpuvisor.io/allocation") == "success", 5),
             "mps: the pod is recorded as served")

        # two GPUs in one container: a CUDA client talks to one daemon
        env.api.create_pod("two", [("main", {"nvidia.com/gpu": "2"})],
                           "v1;node=node1;main=%s:1000:100,%s:1000:100" % (GPUS[0], GPUS[1]))
        a = k.cmd("admit", size=2)
        t.ok(a and not a["ok"] and "only GPU" in a.get("message", ""),
             "mps: a container asking two MPS GPUs is refused with the reason", a)
        env.api.delete_pod("two")

        # the daemon dies: the GPU's devices go Unhealthy, the agent restarts it
        pid = daemon_pid(env, GPUS[0])
        os.kill(pid, signal.SIGKILL)
        ev = k.event("devices", lambda e: not healthy_ids(e, GPUS[0]) and len(healthy_ids(e, GPUS[1])) == 4, 60)
        t.ok(ev is not None, "mps: daemon of GPU 0 killed -> its devices Unhealthy, GPU 1's stay Healthy", ev)
        ev = k.event("devices", lambda e: len(healthy_ids(e, GPUS[0])) == 4, 60)
        t.ok(ev is not None and len(startups(env, GPUS[0])) == 2 and daemon_pid(env, GPUS[0]) != pid,
             "mps: the agent restarts the daemon (a second startup) and the devices are Healthy again",
             (ev, startups(env, GPUS[0])))

        # clean shutdown: `quit` to every daemon
        pids = [daemon_pid(env, g) for g in GPUS]
        rc = env.stop_agent()
        t.ok(rc == 0 and all("quit" in commands(env, g) for g in GPUS) and
             gvtest.wait_for(lambda: not any(alive(p) for p in pids), 5),
             "mps: SIGTERM -> `quit` to each daemon, which exit", ([commands(env, g) for g in GPUS], rc))

        # a restarted agent adopts a daemon left running (agent killed, daemon alive)
        env.start_agent(MPS_ARGS)
        k.event("devices", lambda e: all(len(healthy_ids(e, g)) == 4 for g in GPUS), 60)
        n0 = len(startups(env, GPUS[0]))
        env.stop_agent(signal.SIGKILL)
        left = daemon_pid(env, GPUS[0])
        env.start_agent(MPS_ARGS)
        ev = k.event("devices", lambda e: all(len(healthy_ids(e, g)) == 4 for g in GPUS), 60)
        t.ok(ev is not None and len(startups(env, GPUS[0])) == n0 and daemon_pid(env, GPUS[0]) == left and
             alive(left),
             "mps: after an agent crash the running daemon is adopted, not started twice",
             (startups(env, GPUS[0]), left))
        # mode change: the GPU leaves MPS, its daemon gets `quit`
        agent.write_atomic(env.config, json.dumps({"mode": "mps", "deviceSplitCount": 4,
                                                   "gpus": [{"index": 1, "mode": "timeslicing"}]}))
        t.ok(gvtest.wait_for(lambda: commands(env, GPUS[1]).count("quit") >= 2, 10),
             "mps: a GPU configured out of MPS mode -> its daemon is quit", commands(env, GPUS[1]))
    finally:
        env.close()


def scenario_nvidia_mps():
    cfg = {"sharing": {"mps": {"renameByDefault": True,
                               "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    env = agent.Env(config=cfg)
    try:
        env.start_agent(MPS_ARGS)
        k = env.start_kubelet("py")
        mark = len(k.seen)
        regs = [k.event("registered", timeout=15), k.event("registered", timeout=15)]
        names = sorted((r or {}).get("resource_name") for r in regs)
        t.ok(names == ["nvidia.com/gpu", "nvidia.com/gpu.shared"] and
             any(r["endpoint"] == "gpuvisor-nvidia.com_gpu.shared.sock" for r in regs if r),
             "sharing.mps renameByDefault: nvidia.com/gpu.shared registered on its own socket, "
             "nvidia.com/gpu kept", regs)
        ev = seen_or_wait(k, mark, "devices", lambda e: e["resource"] == "nvidia.com/gpu.shared" and
                          all(len(healthy_ids(e, g)) == 4 for g in GPUS), 60)
        t.ok(ev is not None, "sharing.mps: 4 replicas of each GPU under nvidia.com/gpu.shared", ev)
        t.ok(all("set_default_active_thread_percentage 25" in commands(env, g) and
                 "set_default_device_pinned_mem_limit 0 10240M" in commands(env, g) for g in GPUS),
             "sharing.mps: daemon defaults as NVIDIA sets them (100/replicas threads, memory/replicas)",
             [commands(env, g) for g in GPUS])
        inv = inventory(env, lambda i: [(g.get("mode"), g.get("resource")) for g in i.get("gpus", [])] ==
                        [("mps", "nvidia.com/gpu.shared")] * 2)
        t.ok([(g.get("mode"), g.get("resource")) for g in inv.get("gpus", [])] ==
             [("mps", "nvidia.com/gpu.shared")] * 2,
             "sharing.mps: the inventory names the renamed resource (the scheduler places no "
             "nvidia.com/gpu pod there)", inv)
        a = k.cmd("allocate", ids=["%s::1" % GPUS[0]], resource="nvidia.com/gpu.shared")
        t.ok(a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": GPUS[0],
                                           "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"} and
             "/tmp/nvidia-mps" in mounts(a) and "/etc/ld.so.preload" not in mounts(a),
             "sharing.mps: a pod gpuvisor did not schedule gets the pipe directory and the daemon's "
             "equal share, as from NVIDIA's plugin", a)
        a = k.cmd("allocate", ids=["%s::2" % GPUS[0], "%s::3" % GPUS[0]], resource="nvidia.com/gpu.shared")
        t.ok(a and not a["ok"] and "maximum request size for shared resources is 1; found 2" in a["message"],
             "sharing.mps: failRequestsGreaterThanOne defaults to true (NVIDIA): 2 replicas refused", a)
    finally:
        env.close()


def scenario_nvidia_timeslicing():
    cfg = {"sharing": {"timeSlicing": {"failRequestsGreaterThanOne": True, "resources": [
        {"name": "nvidia.com/gpu", "replicas": 3, "devices": [1]}]}}}
    env = agent.Env(config=cfg)
    try:
        env.start_agent()
        k = env.start_kubelet("py")
        reg = k.event("registered", timeout=15)
        ev = k.event("devices", lambda e: len(e["devices"]) == 13, 60)
        ids = sorted(d["id"] for d in ev["devices"]) if ev else []
        t.ok(reg and reg["resource_name"] == "nvidia.com/gpu" and
             ids == sorted(["%s::%d" % (GPUS[0], i) for i in range(10)] +
                           ["%s::%d" % (GPUS[1], i) for i in range(3)]),
             "sharing.timeSlicing, devices [1], no rename: GPU 1 as 3 replicas next to GPU 0's "
             "10 vGPU slices, one resource", ev)
        want = {GPUS[0]: ("vgpu", 10), GPUS[1]: ("timeslicing", 3)}
        inv = inventory(env, lambda i: {g["uuid"]: (g["mode"], g["split"]) for g in i.get("gpus", [])} == want)
        modes = {g["uuid"]: (g["mode"], g["split"]) for g in inv.get("gpus", [])}
        t.ok(modes == {GPUS[0]: ("vgpu", 10), GPUS[1]: ("timeslicing", 3)},
             "sharing.timeSlicing: the inventory says which GPU is time-sliced", modes)
        a = k.cmd("allocate", ids=["%s::0" % GPUS[1]])
        t.ok(a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": GPUS[1]} and not a["resp"]["mounts"],
             "sharing.timeSlicing: one replica answered from the kubelet's IDs, no interposer", a)
        a = k.cmd("allocate", ids=["%s::1" % GPUS[1], "%s::2" % GPUS[1]])
        t.ok(a and not a["ok"] and "maximum request size for shared resources is 1; found 2" in a["message"],
             "sharing.timeSlicing failRequestsGreaterThanOne: 2 replicas refused with NVIDIA's message", a)
        # renameByDefault: the replicas move to nvidia.com/gpu.shared, registered on their own socket
        agent.write_atomic(env.config, json.dumps({"sharing": {"timeSlicing": {
            "renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}))
        mark = len(k.seen)
        reg = k.event("registered", timeout=15)
        ev = seen_or_wait(k, mark, "devices",
                          lambda e: e["resource"] == "nvidia.com/gpu.shared" and len(e["devices"]) == 4, 60)
        # the old resource's new (empty) list may come before the new registration
        ev0 = seen_or_wait(k, mark, "devices", lambda e: e["resource"] == "nvidia.com/gpu" and not e["devices"], 60)
        t.ok(reg and reg["resource_name"] == "nvidia.com/gpu.shared" and ev and ev0,
             "renameByDefault on reload: nvidia.com/gpu.shared registered with 2 x 2 replicas, "
             "nvidia.com/gpu left with no devices", (reg, ev, ev0))
        a = k.cmd("allocate", ids=["%s::0" % GPUS[0], "%s::1" % GPUS[0]], resource="nvidia.com/gpu.shared")
        t.ok(a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": GPUS[0]},
             "failRequestsGreaterThanOne unset: defaults to false for timeSlicing (NVIDIA): "
             "2 replicas of one GPU -> that GPU once", a)
        bad = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}}
        agent.write_atomic(env.config, json.dumps(bad))
        t.ok(gvtest.wait_for(lambda: "number of replicas must be 2" in env.agent_log(), 5) and
             env.agent.p.poll() is None,
             "replicas 1: refused with NVIDIA's reason, the agent keeps the previous config")
    finally:
        env.close()


def scenario_mps_pre_volta():
    """MPS refuses a pre-Volta GPU (compute capability < 7.0, from the fake NVML):
    advertised Unhealthy with the reason, no daemon; the Volta+ GPU is served,
    its daemon started with the agent's PATH and LD_LIBRARY_PATH (deploy/mps)."""
    env = mps_env(2, ['name="Tesla P100-PCIE-16GB" uuid=%s memory=16g pci=0:3b:0 cc=6.0',
                      'name="Tesla V100-SXM2-16GB" uuid=%s memory=16g pci=0:3c:0 cc=7.0'])
    try:
        env.start_agent(MPS_ARGS)
        k = env.start_kubelet("py")
        ev = k.event("devices", lambda e: len(healthy_ids(e, GPUS[1])) == 2, 60)
        p100 = [d["health"] for d in ev["devices"] if d["id"].startswith(GPUS[0])] if ev else []
        t.ok(ev and p100 == ["Unhealthy", "Unhealthy"] and
             "MPS needs compute capability 7.0 (Volta) or newer; this GPU is 6.0" in env.agent_log(),
             "mps (fake NVML, stand-in): a compute capability 6.0 GPU is advertised Unhealthy with the "
             "reason logged; the 7.0 GPU is Healthy", (ev, env.agent_log()[-1500:]))
        t.ok(startups(env, GPUS[0]) == [] and len(startups(env, GPUS[1])) == 1,
             "mps: no control daemon for the pre-Volta GPU (fake mps-control records none)",
             (calls(env, GPUS[0]), calls(env, GPUS[1])))
        want = {GPUS[0]: False, GPUS[1]: True}
        inv = inventory(env, lambda i: {g["uuid"]: g["healthy"] for g in i.get("gpus", [])} == want)
        t.ok({g["uuid"]: g["healthy"] for g in inv.get("gpus", [])} == want,
             "mps: the inventory marks the pre-Volta GPU unhealthy (the scheduler places nothing there)", inv)
        starts = [c for c in calls(env, GPUS[1]) if c.get("role") == "cli" and c["argv"] == ["-d"]]
        e = starts[0]["env"] if starts else {}
        # (pyenv's python3, if the fake runs under it, puts its own entries in front of PATH)
        t.ok(e.get("LD_LIBRARY_PATH") == agent.FAKES and (e.get("PATH") or "").endswith(os.environ.get("PATH", "-")),
             "mps: the daemon gets the agent's PATH and LD_LIBRARY_PATH (where deploy/mps mounts the "
             "server and libcuda)", e)
    finally:
        env.close()


def scenario_mps_tpcs():
    """The active-thread percentage in whole TPCs of the GPU's SMs (NVML's core count):
    on a 132-SM GPU gpucores 30/70 become 29/72 (19 + 47 of 66 TPCs, every TPC handed out
    once); where NVML cannot count cores (pre-R470) the shares themselves."""
    env = mps_env(4, ['name="NVIDIA H200" uuid=%s memory=141g pci=0:3b:0 sms=132 cc=9.0',
                      'name="NVIDIA H200" uuid=%s memory=141g pci=0:3c:0 sms=132 cc=9.0 cores=0'])
    try:
        env.start_agent(MPS_ARGS)
        k = env.start_kubelet("py")
        k.event("devices", lambda e: all(len(healthy_ids(e, g)) == 4 for g in GPUS), 60)
        got = {}
        for g in GPUS:
            for share in (30, 70):
                name = "p%d-%s" % (share, g[-4:].lower())
                env.api.create_pod(name, [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": str(share)})],
                                   "v1;node=node1;main=%s:1000:%d" % (g, share * 10))
                a = k.cmd("admit", size=1)
                got[(g, share)] = envs(a).get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") if a and a["ok"] else a
                if a and a["ok"]:
                    k.send(json.dumps({"cmd": "release", "ids": a["ids"]}))  # no reply
                env.api.delete_pod(name)
        t.ok(got.get((GPUS[0], 30)) == "29" and got.get((GPUS[0], 70)) == "72",
             "mps (fake NVML: 132 SMs): gpucores 30 / 70 -> active threads 29 / 72, i.e. 19 + 47 of "
             "66 TPCs under the driver's rounding (the larger client rounded up)", got)
        t.ok(got.get((GPUS[1], 30)) == "30" and got.get((GPUS[1], 70)) == "70",
             "mps (fake NVML without nvmlDeviceGetNumGpuCores): SM count unknown -> the shares "
             "themselves, 30 / 70", got)
        # the helper make test-gpu asks for the same figures on a real GPU
        helper = os.path.join(gvtest.BUILD, "testbin", "mps_share")
        fenv = dict(os.environ, LD_LIBRARY_PATH=agent.FAKES, GV_FAKE_GPU_CONFIG=env.gpu_cfg)
        outs = [subprocess.run([helper, str(i), "300", "700"], env=fenv, capture_output=True,
                               text=True, timeout=30) for i in (0, 1)]
        t.ok([o.stdout for o in outs] == ["sms=132 pct=29 72\n", "sms=0 pct=30 70\n"] and
             all(o.returncode == 0 for o in outs),
             "mps_share (the make test-gpu helper) over the fake NVML: the agent's SM count and "
             "percentages", [(o.returncode, o.stdout, o.stderr) for o in outs])
    finally:
        env.close()


scenario_mps()
scenario_mps_tpcs()
scenario_mps_pre_volta()
scenario_nvidia_mps()
scenario_nvidia_timeslicing()
t.done()
