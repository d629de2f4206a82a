#!/usr/bin/python3
"""gpuvisor-scheduler and whole devices (docs/passthrough.md): a node whose
inventory lists passthrough GPUs and mdevs in "wholeDevices" never gets a
gpuvisor slice on the GPU an mdev occupies, and the scheduler counts the
node's whole devices (dashboard /api/state).  Drives the real scheduler
against the kube-apiserver stand-in (tests/dashboard/obs_stand.py)."""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dashboard"))
import obs_stand  # noqa: E402
from obs_stand import cluster_fixture, gvtest  # noqa: E402

t = gvtest.Tap()
if not os.path.exists(obs_stand.SCHED_BIN):
    t.skip("scheduler and whole devices", "gpuvisor-scheduler not built")
    t.done()


def node(name, whole):
    inv = {"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4",
           "gpus": [{"uuid": "GPU-%s-%d" % (name, i), "index": i, "model": "NVIDIA A10",
                     "memoryMiB": 24576, "memoryScaling": 1.0, "cores": 100, "split": 10,
                     "numa": 0, "healthy": True, "mode": "vgpu", "mig": False,
                     "pciBusId": "00000000:%02X:00.0" % (0x81 + i)} for i in range(2)]}
    if whole:
        inv["wholeDevices"] = [
            # a vGPU on GPU 0 (the agent names the VF's PF in sysfs form)
            {"kind": "mdev", "resource": "nvidia.com/NVIDIA_A10-4Q",
             "id": "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01", "pciBusId": "0000:81:00.0",
             "iommuGroup": "90", "healthy": True},
            {"kind": "passthrough", "resource": "nvidia.com/GH100_H100_PCIE", "id": "0000_41_00.0",
             "pciBusId": "0000:41:00.0", "iommuGroup": "17", "healthy": True}]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {"gpuvisor.io/node-gpus": json.dumps(inv),
                                         "gpuvisor.io/node-heartbeat": cluster_fixture.rfc3339(time.time())}},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}


stand = obs_stand.Stand(gvtest.scratch("sched-pt"), extra_seed=[node("vm-node", True), node("plain-node", False)])
try:
    stand.start_scheduler()
    two = [obs_stand.gpu_container("c", 2, 1000, 10)]
    one = [obs_stand.gpu_container("c", 1, 1000, 10)]
    # one candidate at a time: the filter reserves on the node it picks
    code, ans = stand.filter("default", "two-gpus", "p-two", two, ["vm-node"])
    fits = ((ans or {}).get("NodeNames") or []) if code == 200 else None
    t.ok(code == 200 and fits == [],
         "two GPUs asked: the node whose GPU 0 hosts a vGPU has one GPU left for slices", ans)
    code, ans = stand.filter("default", "two-gpus-plain", "p-two-plain", two, ["plain-node"])
    t.ok(code == 200 and (ans or {}).get("NodeNames") == ["plain-node"],
         "the same pod fits the node without whole devices", ans)
    code, ans = stand.filter("default", "one-gpu", "p-one", one, ["vm-node"])
    t.ok(code == 200 and (ans or {}).get("NodeNames") == ["vm-node"],
         "one GPU asked: the free GPU of that node still serves slices", ans)
    code, body = obs_stand.http("GET", stand.dash + "/api/state")
    nodes = {n["name"]: n for n in json.loads(body).get("nodes", [])} if code == 200 else {}
    vm = nodes.get("vm-node", {})
    t.ok(vm.get("wholeDevices") == 2 and "wholeDevices" not in nodes.get("plain-node", {"wholeDevices": 0}),
         "the scheduler counts the node's whole devices (and only where there are some)", vm)
    healthy = {g.get("uuid"): g.get("healthy") for g in vm.get("gpus", [])}
    t.ok(healthy == {"GPU-vm-node-0": False, "GPU-vm-node-1": True},
         "the occupied GPU is shown unavailable for slices", healthy)
    rc, log = stand.stop_scheduler()
    t.ok(rc == 0, "the scheduler stops cleanly", log[-1500:])
finally:
    stand.stop()
t.done()
