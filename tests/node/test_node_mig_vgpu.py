#!/usr/bin/python3
"""vGPU slices inside MIG instances and health per MIG device, end to end:
the real agent over the fake NVML with a MIG geometry file (stand-in for an
operator-partitioned A100, tests/fakes/README.md "MIG") and Xid events
attributed to GPU / compute instances, the fake API server and the Python
kubelet stand-in.  docs/mig-cdi.md, "vGPU slices inside MIG instances" and
"Health per MIG device".
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, envs, mounts  # noqa: E402

t = gvtest.Tap()
if not agent.have_fake_nvml():
    t.skip("MIG vGPU end to end", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()

# fake NVML: GPU instance id = slot + 1, compute instance 0; memory gb*1024-256 MiB
GEOMETRY = "0 3g.20gb,-,2g.10gb\n"


def start(config, recover_ms="600000"):
    env = agent.Env()
    mig = os.path.join(env.dir, "mig.conf")
    agent.write_atomic(mig, GEOMETRY)
    agent.write_atomic(env.config, json.dumps(config))
    # a long quiet time: an Unhealthy state must not recover before the test reads it
    env.start_agent(extra=["--health-recover-ms", recover_ms], env_extra={"GV_FAKE_MIG_CONFIG": mig})
    return env, mig, env.start_kubelet("py")


def devices(k, pred, timeout=20):
    return k.event("devices", lambda e: e["resource"] == "nvidia.com/gpu" and pred(e["devices"]), timeout)


def inventory(env):
    node = env.api.node("node1")
    return json.loads((node["metadata"].get("annotations") or {}).get("gpuvisor.io/node-gpus", "{}"))


def labels(env):
    return env.api.node("node1")["metadata"].get("labels") or {}


def mig_uuids(devs):
    return sorted({d["id"].split("::")[0] for d in devs if d["id"].startswith("MIG-")})


def scenario_vgpu_in_mig():
    env, mig, k = start({"migMode": "vgpu", "deviceSplitCount": 4})
    try:
        ev = devices(k, lambda ds: len(ds) == 12)
        ds = ev["devices"] if ev else []
        migs = mig_uuids(ds)
        t.ok(ev and len(migs) == 2 and
             sorted(d["id"] for d in ds if d["id"].startswith(GPUS[1])) == ["%s::%d" % (GPUS[1], i) for i in range(4)] and
             all(sum(d["id"].startswith(m + "::") for d in ds) == 4 for m in migs) and
             not any(d["id"].startswith(GPUS[0]) for d in ds),
             "migMode vgpu (fake NVML, kubelet stand-in): each MIG device advertised as 4 slices "
             "<MIG uuid>::<k> under nvidia.com/gpu, the MIG-enabled GPU itself not", ds)

        def inv_ok():
            gs = {g["uuid"]: g for g in inventory(env).get("gpus", [])}
            return gs if len(gs) == 3 and GPUS[0] not in gs else None
        gs = gvtest.wait_for(inv_ok, 10) or {}
        mems = sorted(gs[u]["memoryMiB"] for u in migs if u in gs)
        t.ok(len(migs) == 2 and all(u in gs and gs[u]["mode"] == "vgpu" and gs[u]["split"] == 4 and
                                    gs[u]["index"] == 0 and gs[u]["mig"] is False and gs[u]["healthy"]
                                    for u in migs) and mems == [9984, 20224],
             "inventory (fake API server): one vgpu GPU entry per MIG device, uuid = MIG uuid, memory = the "
             "instance's (20224 / 9984 MiB); the parent GPU's entry replaced", gs)
        whole = [w["id"] for w in inventory(env).get("wholeDevices", [])]
        t.ok(not (set(whole) & set(migs)),
             "inventory: MIG devices served as slices are not also whole devices (kind mig)", whole)
        t.ok(gvtest.wait_for(lambda: labels(env).get("nvidia.com/gpu.count") == "2", 10),
             "GFD gpu.count still counts physical GPUs (2), not MIG entries", labels(env))

        # the scheduler's choice: 4096 MiB and 30% of the 3g.20gb instance
        big = [u for u in migs if gs.get(u, {}).get("memoryMiB") == 20224]
        big = big[0] if big else migs[0] if migs else "MIG-none"
        env.api.create_pod("slice", [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096",
                                               "nvidia.com/gpucores": "30"})],
                           "v1;node=node1;main=%s:4096:300" % big)
        a = k.cmd("admit", size=1)
        e = envs(a)
        m = mounts(a)
        t.ok(a and a["ok"] and e.get("NVIDIA_VISIBLE_DEVICES") == big and
             e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "4096m" and e.get("CUDA_DEVICE_SM_LIMIT_0") == "30" and
             all(i.startswith(big + "::") for i in a.get("ids", [])) and
             m.get("/etc/ld.so.preload", ("", False))[1] is True and
             agent.limits_unreachable(a) is None,
             "Allocate (stand-in admit): NVIDIA_VISIBLE_DEVICES=<MIG uuid>, memory/SM limits relative to "
             "the instance, the interposer preloaded, a slice of that MIG device recorded", a)
        # an Xid of the 3g.20gb instance (GPU instance 1 in the fake): its slices and its entry only
        agent.write_atomic(env.faults, "xid 0 79 1 1 0\n")
        ev = devices(k, lambda ds: any(d["health"] == "Unhealthy" for d in ds), 10)
        ds = ev["devices"] if ev else []
        t.ok(ev and all((d["health"] == "Unhealthy") == d["id"].startswith(big + "::") for d in ds),
             "instance-scoped Xid (fake NVML): the slices of that MIG device Unhealthy, the others Healthy", ds)
        other = ([u for u in migs if u != big] or ["MIG-none"])[0]
        inv = gvtest.wait_for(lambda: {g["uuid"]: g["healthy"] for g in inventory(env).get("gpus", [])}
                              == {big: False, other: True, GPUS[1]: True}, 10)
        t.ok(inv, "inventory: that MIG device's entry unhealthy, its sibling's and GPU 1's healthy",
             inventory(env))
        # re-partitioning: the new instances (new UUIDs) replace the old ones
        agent.write_atomic(mig, "0 7g.40gb\n")
        ev = devices(k, lambda ds: len(ds) == 8 and not (set(mig_uuids(ds)) & set(migs)) and
                     len(mig_uuids(ds)) == 1)
        t.ok(ev is not None, "re-partitioned (fake MIG geometry rewritten): slices of the new 7g.40gb device only",
             ev)
    finally:
        env.close()


def scenario_vgpu_in_mig_no_runtime():
    """The runtime-independent path (nvidiaRuntime false, fake driver root with
    nvidia-caps minors): a slice of a MIG device gets the parent's device node
    and the instance's nvidia-caps nodes, plus the interposer's limits."""
    env = agent.Env()
    root = os.path.join(env.dir, "driver")
    subprocess.run(["sh", os.path.join(gvtest.ROOT, "tests/fakes/make-driver-root.sh"), root, "550.54.15", "2",
                    "gpu0/gi1/access 21", "gpu0/gi1/ci0/access 22", "gpu0/gi3/access 30",
                    "gpu0/gi3/ci0/access 31"], check=True)
    mig = os.path.join(env.dir, "mig.conf")
    agent.write_atomic(mig, GEOMETRY)
    agent.write_atomic(env.config, json.dumps({"migMode": "vgpu", "deviceSplitCount": 2,
                                               "nvidiaRuntime": False, "containerDriverRoot": root}))
    env.start_agent(env_extra={"GV_FAKE_MIG_CONFIG": mig})
    k = env.start_kubelet("py")
    try:
        ev = devices(k, lambda ds: len(ds) == 6)
        migs = mig_uuids(ev["devices"]) if ev else []
        gs = gvtest.wait_for(lambda: {g["uuid"]: g["memoryMiB"] for g in inventory(env).get("gpus", [])}, 10) or {}
        small = [u for u in migs if gs.get(u) == 9984] or ["MIG-none"]
        env.api.create_pod("direct", [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048"})],
                           "v1;node=node1;main=%s:2048:0" % small[0])
        a = k.cmd("admit", size=1)
        d = {x["container_path"]: x["host_path"] for x in a["resp"]["devices"]} if a and a.get("ok") else {}
        e = envs(a)
        t.ok(d.get("/dev/nvidia0") == "/dev/nvidia0" and
             d.get("/dev/nvidia-caps/nvidia-cap30") == "/dev/nvidia-caps/nvidia-cap30" and
             d.get("/dev/nvidia-caps/nvidia-cap31") == "/dev/nvidia-caps/nvidia-cap31" and
             not any("cap21" in p or "cap22" in p for p in d) and "/dev/nvidiactl" in d and
             e.get("NVIDIA_VISIBLE_DEVICES") == "void" and e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "2048m" and
             "/etc/ld.so.preload" in mounts(a),
             "nvidiaRuntime false (fake driver root): a slice of the 2g.10gb MIG device gets /dev/nvidia0 and "
             "its instance's nvidia-caps nodes (gi3, ci0) only, with the interposer's limits", a)
    finally:
        env.close()


def scenario_whole_default():
    """Without migMode the MIG devices stay whole (migStrategy), as before."""
    env, mig, k = start({"migStrategy": "single", "deviceSplitCount": 4})
    try:
        ev = devices(k, lambda ds: len(ds) == 6)
        ds = ev["devices"] if ev else []
        t.ok(ev and sorted(d["id"] for d in ds if d["id"].startswith("MIG-")) == mig_uuids(ds),
             "default migMode whole (fake NVML, stand-in): MIG devices advertised bare, one container each", ds)
    finally:
        env.close()


def scenario_mig_health():
    """Whole MIG devices (migStrategy single): each is one device, so the
    kubelet's view shows exactly which instance an Xid hit."""
    env, mig, k = start({"migStrategy": "single", "deviceSplitCount": 2})
    try:
        ev = devices(k, lambda ds: len(ds) == 4)
        migs = mig_uuids(ev["devices"]) if ev else []
        # the fake's GPU instance ids: slot + 1 (3g.20gb in slot 0 -> gi 1, 2g.10gb in slot 2 -> gi 3)
        agent.write_atomic(env.faults, "xid 0 79 1 3 0\n")
        ev = devices(k, lambda ds: any(d["health"] == "Unhealthy" for d in ds), 10)
        ds = ev["devices"] if ev else []
        bad = sorted({d["id"].split("::")[0] for d in ds if d["health"] == "Unhealthy"})
        t.ok(len(bad) == 1 and bad[0] in migs and
             all(d["health"] == "Healthy" for d in ds if not d["id"].startswith(bad[0])),
             "critical Xid of GPU instance 3 / compute instance 0 (fake NVML event): only that MIG device "
             "turns Unhealthy in ListAndWatch (stand-in); its sibling and GPU 1 stay Healthy", ds)
        # an application Xid scoped to the other instance changes nothing
        agent.write_atomic(env.faults, "xid 0 79 1 3 0\nxid 0 43 2 1 0\n")
        ev = devices(k, lambda ds: True, 1.5)
        t.ok(ev is None, "application Xid 43 on GPU instance 1 leaves health unchanged", ev)
        # an Xid naming an instance no MIG device is: nothing
        agent.write_atomic(env.faults, "xid 0 79 1 3 0\nxid 0 43 2 1 0\nxid 0 79 3 5 0\n")
        ev = devices(k, lambda ds: True, 1.5)
        t.ok(ev is None and "no MIG device of ours" in env.agent_log(),
             "critical Xid of GPU instance 5 (no MIG device there): health unchanged, logged", ev)
        # a GPU-wide Xid (no instance, 0xFFFFFFFF as NVML reports it): every MIG device of GPU 0
        agent.write_atomic(env.faults, "xid 0 79 1 3 0\nxid 0 43 2 1 0\nxid 0 79 3 5 0\nxid 0 48 4\n")
        ev = devices(k, lambda ds: sum(d["health"] == "Unhealthy" for d in ds) == 2, 10)
        ds = ev["devices"] if ev else []
        t.ok(ev and all((d["health"] == "Unhealthy") == d["id"].startswith("MIG-") for d in ds),
             "GPU-wide critical Xid 48 on GPU 0: all its MIG devices Unhealthy, GPU 1 Healthy", ds)
    finally:
        env.close()


def scenario_mig_health_two_instances():
    """A critical Xid of one MIG device, then of its sibling: each is marked
    by its own uuid, so the second turns Unhealthy too (not taken for the
    first one's repeat)."""
    env, mig, k = start({"migStrategy": "single", "deviceSplitCount": 2})
    try:
        ev = devices(k, lambda ds: len(ds) == 4)
        migs = mig_uuids(ev["devices"]) if ev else []
        # the MIG geometry is re-read at every probe (100 ms here): unchanged, nothing is re-sent
        quiet = devices(k, lambda ds: True, 1.5)
        t.ok(quiet is None, "an unchanged MIG geometry is not re-advertised at each probe", quiet)
        agent.write_atomic(env.faults, "xid 0 79 1 3 0\n")
        devices(k, lambda ds: sum(d["health"] == "Unhealthy" for d in ds) == 1, 10)
        agent.write_atomic(env.faults, "xid 0 79 1 3 0\nxid 0 79 2 1 0\n")
        ev = devices(k, lambda ds: sum(d["health"] == "Unhealthy" for d in ds) == 2, 10)
        ds = ev["devices"] if ev else []
        bad = sorted({d["id"].split("::")[0] for d in ds if d["health"] == "Unhealthy"})
        t.ok(len(migs) == 2 and bad == sorted(migs),
             "critical Xids of GPU instances 3, then 1: both MIG devices Unhealthy, GPU 1 Healthy",
             (migs, ds))
    finally:
        env.close()


def scenario_mig_health_recovers():
    env, mig, k = start({"migMode": "vgpu", "deviceSplitCount": 2}, recover_ms="300")
    try:
        devices(k, lambda ds: len(ds) == 6)  # slices of both MIG devices and GPU 1
        agent.write_atomic(env.faults, "xid 0 79 1 1 0\n")
        # whether the Unhealthy list is seen depends on timing; the recovery must come either way
        ev = devices(k, lambda ds: len(ds) == 6 and all(d["health"] == "Healthy" for d in ds) and
                     "MIG device" in env.agent_log() and "is healthy again" in env.agent_log(), 15)
        t.ok(ev is not None and "is unhealthy: critical Xid 79" in env.agent_log(),
             "an instance-scoped Xid (fake NVML) recovers after the quiet time, as GPUs do", env.agent_log()[-2000:])
    finally:
        env.close()


scenario_vgpu_in_mig()
scenario_vgpu_in_mig_no_runtime()
scenario_whole_default()
scenario_mig_health()
scenario_mig_health_two_instances()
scenario_mig_health_recovers()
t.done()
