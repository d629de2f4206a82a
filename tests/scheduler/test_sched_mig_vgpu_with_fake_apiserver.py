#!/usr/bin/python3
"""vGPU slices inside MIG instances reach the scheduler with no scheduler
change (docs/mig-cdi.md, "vGPU slices inside MIG instances"): a node whose
agent runs "migMode": "vgpu" publishes one vgpu GPU entry per MIG device
(uuid = MIG uuid, memory = the instance's, mig false, the parent's index and
PCI address).  The real scheduler against the kube-apiserver stand-in places
slices on those entries, bounded by each instance's memory."""
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
    t.skip("scheduler and vGPU slices inside MIG", "gpuvisor-scheduler not built")
    t.done()

BIG = "MIG-5a1e0000-0001-4000-8000-000000000000"    # 3g.20gb: 20224 MiB
SMALL = "MIG-5a1e0000-0001-4000-8000-000000000002"  # 2g.10gb: 9984 MiB


def entry(uuid, mem):
    """What gv_mode_vgpu_mig_inventory publishes for one MIG device of GPU 0."""
    return {"uuid": uuid, "index": 0, "model": "NVIDIA A100-SXM4-40GB", "memoryMiB": mem,
            "memoryScaling": 1.0, "cores": 100, "split": 4, "numa": 0, "healthy": True,
            "mode": "vgpu", "mig": False, "pciBusId": "00000000:3B:00.0"}


inv = {"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4",
       "gpus": [entry(BIG, 20224), entry(SMALL, 9984)]}
NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "migv", "labels": {"kubernetes.io/hostname": "migv"},
                     "annotations": {"gpuvisor.io/node-gpus": json.dumps(inv),
                                     "gpuvisor.io/node-heartbeat": cluster_fixture.rfc3339(time.time() + 3600)}},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}
stand = obs_stand.Stand(gvtest.scratch("sched-migv"), extra_seed=[NODE])


def place(name, mem):
    """create, filter and (when one node fits) bind a pod asking one slice of mem MiB."""
    code, body = obs_stand.http("POST", "%s/api/v1/namespaces/ml/pods" % stand.api_url, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
        "spec": {"schedulerName": "gpuvisor-scheduler", "containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}}}]}})
    pod = json.loads(body)
    if code != 201:
        return None, {"http": code, "body": body}
    code, body = obs_stand.http("POST", stand.ext + "/gpuvisor/filter", {"Pod": pod, "NodeNames": ["migv"]})
    ans = json.loads(body) if code == 200 else {}
    if ans.get("NodeNames") == ["migv"]:
        obs_stand.http("POST", stand.ext + "/gpuvisor/bind",
                       {"PodName": name, "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"], "Node": "migv"})
    return pod, ans


def assignment(name):
    def get():
        code, body = obs_stand.http("GET", "%s/api/v1/namespaces/ml/pods/%s" % (stand.api_url, name))
        a = (json.loads(body)["metadata"].get("annotations") or {}) if code == 200 else {}
        return a.get("gpuvisor.io/assignment")
    end = time.time() + 30
    while time.time() < end and not get():
        time.sleep(0.05)
    return get() or ""


try:
    stand.start_scheduler()
    _, a = place("big", 15000)
    got = assignment("big")
    t.ok(a.get("NodeNames") == ["migv"] and (BIG + ":15000") in got,
         "15000 MiB slice (stand-in API server): placed on the 3g.20gb MIG device, the only instance "
         "with room", (a, got))
    _, a = place("small", 9000)
    got = assignment("small")
    t.ok(a.get("NodeNames") == ["migv"] and (SMALL + ":9000") in got,
         "9000 MiB slice: on the 2g.10gb MIG device (5224 MiB left on the other)", (a, got))
    _, a = place("too-big", 12000)
    t.ok(a.get("NodeNames") in (None, []) and "migv" in json.dumps(a.get("FailedNodes") or a),
         "12000 MiB slice: no MIG device has room (each instance bounds its slices)", a)
finally:
    stand.stop()
t.done()
