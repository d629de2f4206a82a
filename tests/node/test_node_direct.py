#!/usr/bin/python3
"""CDI spec and Allocate without the NVIDIA container runtime, end to end:
the real agent over the fake NVML and a fake driver root (stand-in host made
by tests/fakes/make-driver-root.sh), with the kubelet stand-in.
docs/mig-cdi.md, "CDI" and "Without the NVIDIA container runtime".
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
    t.skip("direct allocation end to end", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()


def driver_root(env):
    root = os.path.join(env.dir, "driver")
    subprocess.run(["sh", os.path.join(gvtest.ROOT, "tests/fakes/make-driver-root.sh"), root,
                    "550.54.15", "2"], check=True)
    return root


def devices(ev):
    return {d["container_path"]: (d["host_path"], d["permissions"]) for d in ev["resp"]["devices"]} \
        if ev and ev.get("ok") else {}


def scenario_no_runtime():
    env = agent.Env()
    try:
        root = driver_root(env)
        # the host has the driver at /; the agent sees it at <root> (containerDriverRoot)
        agent.write_atomic(env.config, json.dumps({"mode": "exclusive", "nvidiaRuntime": False,
                                                   "containerDriverRoot": root}))
        env.start_agent()
        k = env.start_kubelet("py")
        t.ok(k.event("devices", lambda e: len(e["devices"]) == 2, 20) is not None,
             "nvidiaRuntime false: the GPUs are advertised as usual")
        a = k.cmd("allocate", ids=[GPUS[1]])
        d, m = devices(a), mounts(a)
        t.ok(a and a["ok"] and d.get("/dev/nvidia1") == ("/dev/nvidia1", "rw") and
             "/dev/nvidia0" not in d and all(n in d for n in ("/dev/nvidiactl", "/dev/nvidia-uvm",
                                                                "/dev/nvidia-uvm-tools")),
             "no runtime: the GPU's device node and the control nodes, host paths as the host sees them", a)
        lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
        t.ok(m.get("/usr/local/nvidia/lib64/libcuda.so.1") == (lib, True) and
             m.get("/usr/local/nvidia/lib64/libcuda.so.550.54.15") == (lib, True) and
             m.get("/usr/local/nvidia/lib64/libnvidia-ml.so.1", ("", False))[1] is True and
             m.get("/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1", ("", False))[1] is True and
             m.get("/usr/local/nvidia/bin/nvidia-smi") == ("/usr/bin/nvidia-smi", True) and
             not any("470.00.01" in h or "i386" in h for h, _ in m.values()),
             "no runtime: the driver's libraries (versioned and soname) and tools, read-only", m)
        t.ok(envs(a).get("NVIDIA_VISIBLE_DEVICES") == "void",
             "no runtime: NVIDIA_VISIBLE_DEVICES=void so an NVIDIA runtime left installed does not inject twice",
             envs(a))
        # a wrong driver root: refused with the reason, not a pod without its GPU
        agent.write_atomic(env.config, json.dumps({"mode": "exclusive", "nvidiaRuntime": False,
                                                   "containerDriverRoot": root + "-missing"}))
        t.ok(gvtest.wait_for(lambda: "driver files not found" in env.agent_log(), 10),
             "no runtime, driver files missing: logged", env.agent_log()[-500:])
        a = k.cmd("allocate", ids=[GPUS[0]])
        t.ok(a and not a["ok"] and "libcuda.so.550.54.15 not found" in a.get("message", ""),
             "no runtime, driver files missing: Allocate refused with the reason (fail closed)", a)
    finally:
        env.close()


def scenario_cdi_spec():
    env = agent.Env()
    try:
        root = driver_root(env)
        spec_dir = os.path.join(env.dir, "cdi")
        agent.write_atomic(env.config, json.dumps({"mode": "exclusive", "cdi": True, "cdiSpecDir": spec_dir,
                                                   "containerDriverRoot": root}))
        env.start_agent()
        k = env.start_kubelet("py")
        k.event("devices", lambda e: len(e["devices"]) == 2, 20)
        path = os.path.join(spec_dir, "gpuvisor-gpuvisor.io_gpu.json")
        t.ok(gvtest.wait_for(lambda: os.path.exists(path), 10), "cdi: the spec is written in cdiSpecDir", path)
        try:
            with open(path) as f:
                spec = json.load(f)
        except (OSError, ValueError):
            spec = {}
        names = {d["name"]: d for d in spec.get("devices", [])}
        t.ok(spec.get("cdiVersion") == "0.5.0" and spec.get("kind") == "gpuvisor.io/gpu" and
             all(u in names for u in GPUS[:2]) and "0" in names and "all" in names and "gpuvisor" in names,
             "cdi: devices by index and UUID, all, and gpuvisor's interposer device", sorted(names))
        a = k.cmd("allocate", ids=[GPUS[0]])
        cdi = a["resp"]["cdi_devices"] if a and a.get("ok") else []
        t.ok(cdi == ["gpuvisor.io/gpu=" + GPUS[0]] and GPUS[0] in names and
             any(n["path"] == "/dev/nvidia0" for n in names[GPUS[0]]["containerEdits"]["deviceNodes"]),
             "cdi: Allocate names a CDI device that resolves in the written spec to its device node", (cdi, a))
    finally:
        env.close()


scenario_no_runtime()
scenario_cdi_spec()
t.done()
