#!/usr/bin/python3
"""gpuvisor-scheduler places whole devices by count (docs/scheduler.md,
"Whole devices"): MIG devices (mixed profiles), passthrough GPUs and mdevs
listed in the agents' inventories.  Drives the real scheduler against the
kube-apiserver stand-in (tests/fakes/apiserver), with the awkward things the
real kube-scheduler does: the same filter sent again, a bind repeated after
a lost answer, pods deleted and their events arriving later than our own
answers.  Also: a node with passthrough GPUs never gets slices on them, and
a container asking 2 GPUs is never put on MPS GPUs."""
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
    t.skip("scheduler and whole devices by count", "gpuvisor-scheduler not built")
    t.done()

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
H100_PT = "nvidia.com/GH100_H100_PCIE"


def gpu(name, i, mode="vgpu", mig=False, bus=0x81):
    return {"uuid": "GPU-%s-%d" % (name, i), "index": i, "model": "NVIDIA H100 PCIe",
            "memoryMiB": 81559, "memoryScaling": 1.0, "cores": 100, "split": 10, "numa": 0,
            "healthy": True, "mode": mode, "mig": mig, "pciBusId": "00000000:%02X:00.0" % (bus + i)}


def node(name, gpus, whole):
    inv = {"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4", "gpus": gpus}
    if whole:
        inv["wholeDevices"] = whole
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {"gpuvisor.io/node-gpus": json.dumps(inv),
                                         "gpuvisor.io/node-heartbeat": cluster_fixture.rfc3339(time.time() + 3600)}},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}


def mig(name, gi, k, profile, healthy=True):
    return {"kind": "mig", "resource": "nvidia.com/mig-" + profile,
            "id": "MIG-%s-%d-%d" % (name, gi, k), "pciBusId": "00000000:%02X:00.0" % (0x81 + gi),
            "iommuGroup": "", "healthy": healthy, "gpuUuid": "GPU-%s-%d" % (name, gi),
            "profile": profile, "memoryMiB": 9856}


# mig-a: GPU 0 split 1x3g + 3x1g (one 1g unhealthy), GPU 1 plain vGPU
MIG_A = node("mig-a", [gpu("mig-a", 0, mig=True), gpu("mig-a", 1)],
             [mig("mig-a", 0, 0, "3g.40gb"), mig("mig-a", 0, 1, "1g.10gb"),
              mig("mig-a", 0, 2, "1g.10gb"), mig("mig-a", 0, 3, "1g.10gb", healthy=False)])
# mig-b: 2x1g
MIG_B = node("mig-b", [gpu("mig-b", 0, mig=True)],
             [mig("mig-b", 0, 0, "1g.10gb"), mig("mig-b", 0, 1, "1g.10gb")])
# vm-a: GPUs 0 and 1 bound to vfio-pci (mode passthrough), GPU 2 shared
PT = [{"kind": "passthrough", "resource": H100_PT, "id": "0000_%02x_00.0" % (0x41 + i),
       "pciBusId": "0000:%02x:00.0" % (0x41 + i), "iommuGroup": str(17 + i), "healthy": True}
      for i in range(2)]
VM_A = node("vm-a", [gpu("vm-a", 0, mode="passthrough", bus=0x41), gpu("vm-a", 1, mode="passthrough", bus=0x41),
                     gpu("vm-a", 2, bus=0x41)], PT)
# mps-a: two MPS GPUs; plain-a: two vGPU GPUs, no whole devices
# mig-c: GPU 0 MIG-enabled with no MIG device served (strategy none), GPU 1 plain
MIG_C = node("mig-c", [gpu("mig-c", 0, mig=True), gpu("mig-c", 1)], None)
MPS_A = node("mps-a", [gpu("mps-a", 0, mode="mps"), gpu("mps-a", 1, mode="mps")], None)
PLAIN_A = node("plain-a", [gpu("plain-a", 0), gpu("plain-a", 1)], None)
ALL = ["mig-a", "mig-b", "vm-a", "mps-a", "plain-a"]

stand = obs_stand.Stand(gvtest.scratch("sched-whole"), extra_seed=[MIG_A, MIG_B, MIG_C, VM_A, MPS_A, PLAIN_A])
api = None


def dev_container(name, res, n):
    return {"name": name, "resources": {"limits": {res: str(n)}}}


def make_pod(ns, name, containers, init=None):
    spec = {"schedulerName": "gpuvisor-scheduler", "containers": containers}
    if init:
        spec["initContainers"] = init
    code, body = obs_stand.http("POST", "%s/api/v1/namespaces/%s/pods" % (api, ns),
                                {"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": name, "namespace": ns}, "spec": spec})
    if code != 201:
        raise RuntimeError("create pod %s: %s %s" % (name, code, body))
    return json.loads(body)


def filt(pod, nodes):
    code, body = obs_stand.http("POST", stand.ext + "/gpuvisor/filter", {"Pod": pod, "NodeNames": nodes})
    return json.loads(body) if code == 200 else {"http": code, "body": body}


def bind(pod, node):
    code, body = obs_stand.http("POST", stand.ext + "/gpuvisor/bind",
                                {"PodName": pod["metadata"]["name"], "PodNamespace": pod["metadata"]["namespace"],
                                 "PodUID": pod["metadata"]["uid"], "Node": node})
    return json.loads(body) if code == 200 else {"Error": "http %d %s" % (code, body)}


def names(ans):
    return ans.get("NodeNames") or []


def failed(ans):
    return dict(ans.get("FailedNodes") or {}, **(ans.get("FailedAndUnresolvableNodes") or {}))


def place(ns, name, containers, nodes, init=None):
    """filter + bind as kube-scheduler does: returns (pod, filter answer, bind answer)."""
    pod = make_pod(ns, name, containers, init)
    ans = filt(pod, nodes)
    got = names(ans)
    b = bind(pod, got[0]) if len(got) == 1 else None
    return pod, ans, b


def wait_for(what, fn, timeout=60):
    """Polls fn until true (informer events arrive when they arrive)."""
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    return fn()


try:
    api = stand.api_url
    stand.start_scheduler()

    # ---- MIG, mixed profiles ---------------------------------------------
    p1, a1, b1 = place("ml", "mig3g", [dev_container("c", MIG_3G, 1)], ALL)
    t.ok(names(a1) == ["mig-a"] and b1 is not None and not b1.get("Error"),
         "a 3g.40gb MIG pod goes to the only node listing that profile, and binds", (a1, b1))
    f = failed(a1)
    t.ok("no nvidia.com/mig-3g.40gb devices" in f.get("mig-b", "") and "no nvidia.com/mig-3g.40gb" in f.get("plain-a", ""),
         "nodes lacking the profile are refused with a reason naming it", f)
    p2, a2, _ = place("ml", "mig3g-2", [dev_container("c", MIG_3G, 1)], ALL)
    t.ok(names(a2) == [] and "nvidia.com/mig-3g.40gb: 0 free of 1 healthy" in failed(a2).get("mig-a", ""),
         "the second 3g.40gb pod fits nowhere: the one device is held", failed(a2).get("mig-a"))
    # two 1g in one pod: mig-a has 2 healthy 1g (one of its 3 is unhealthy), mig-b 2
    p3 = make_pod("ml", "mig1g-two", [dev_container("a", MIG_1G, 1), dev_container("b", MIG_1G, 1)])
    a3 = filt(p3, ALL)
    first = (names(a3) or ["?"])[0]
    a3b = filt(p3, ALL)  # kube-scheduler filters again before binding (its own retry)
    b3 = bind(p3, first)
    t.ok(len(names(a3)) == 1 and first in ("mig-a", "mig-b") and names(a3b) == [first] and not b3.get("Error"),
         "two containers with one 1g.10gb each: placed on a node with 2 free healthy, "
         "the same answer to a repeated filter, and bound", (a3, a3b, b3))
    other = "mig-b" if first == "mig-a" else "mig-a"
    # repeated filter of the same pod: same answer, no second hold
    again = filt(p3, ALL)
    t.ok(names(again) == [first], "the same filter again answers the same node", again)
    rb = bind(p3, first)
    t.ok(not rb.get("Error"), "a repeated bind on the same node succeeds (lost answer)", rb)
    # a pod asking 2 more 1g: only `other` has 2 free left
    p4, a4, b4 = place("ml", "mig1g-more", [dev_container("c", MIG_1G, 2)], ALL)
    t.ok(names(a4) == [other] and not (b4 or {}).get("Error"),
         "duplicate filter+bind did not count the first 1g pod twice: the other node takes 2 more", (a4, b4))
    t.ok("nvidia.com/mig-1g.10gb: 0 free of 2 healthy" in failed(a4).get(first, ""),
         "the full node says how many are free, healthy and listed", failed(a4))
    p5 = make_pod("ml", "mig1g-none", [dev_container("c", MIG_1G, 1)])
    a5 = filt(p5, ALL)
    t.ok(names(a5) == [], "no 1g.10gb left anywhere: refused everywhere", a5)
    # delete the first 1g pod: its node's devices come back once the informer says so
    code, _ = obs_stand.http("DELETE", "%s/api/v1/namespaces/ml/pods/mig1g-two" % api)
    p6 = make_pod("ml", "mig1g-after", [dev_container("c", MIG_1G, 2)])
    a6 = wait_for("freed", lambda: (lambda a: a if names(a) else None)(filt(p6, [first])))
    t.ok(code == 200 and a6 is not None and names(a6) == [first],
         "deleting a pod frees its MIG devices for the next pod", a6)

    # ---- passthrough by count ------------------------------------------------
    v1, av1, bv1 = place("vm", "vm-one", [dev_container("compute", H100_PT, 1)], ALL)
    t.ok(names(av1) == ["vm-a"] and not (bv1 or {}).get("Error"), "a VM pod asking one passthrough GPU is placed",
         (av1, bv1))
    v2 = make_pod("vm", "vm-two", [dev_container("compute", H100_PT, 2)])
    av2 = filt(v2, ALL)
    t.ok(names(av2) == [] and "1 free of 2 healthy" in failed(av2).get("vm-a", ""),
         "two passthrough GPUs asked with one free: refused with the count", failed(av2))
    # a node with passthrough GPUs never gets slices on those GPUs
    s1 = make_pod("inference", "slice-two", [obs_stand.gpu_container("c", 2, 1000, 10)])
    as1 = filt(s1, ["vm-a"])
    t.ok(names(as1) == [], "2 vGPU slices asked: the node has one GPU that is not passed through", as1)
    s2 = make_pod("inference", "slice-one", [obs_stand.gpu_container("c", 1, 1000, 10)])
    as2 = filt(s2, ["vm-a"])
    bs2 = bind(s2, "vm-a")
    pod_s2 = json.loads(obs_stand.http("GET", "%s/api/v1/namespaces/inference/pods/slice-one" % api)[1])
    assign = pod_s2["metadata"].get("annotations", {}).get("gpuvisor.io/assignment", "")
    t.ok(names(as2) == ["vm-a"] and not bs2.get("Error") and "GPU-vm-a-2" in assign
         and "GPU-vm-a-0" not in assign and "GPU-vm-a-1" not in assign,
         "one slice asked: it lands on the shared GPU, never on a passthrough one", assign)
    # a MIG-enabled GPU is never sliced either
    s3 = make_pod("inference", "slice-mig", [obs_stand.gpu_container("c", 1, 1000, 10)])
    as3 = filt(s3, ["mig-b"])
    t.ok(names(as3) == [], "a slice asked on a node whose only GPU is MIG-enabled: refused", as3)
    s4 = make_pod("inference", "slice-mig-two", [obs_stand.gpu_container("c", 2, 1000, 10)])
    as4 = filt(s4, ["mig-c"])
    t.ok(names(as4) == [] and "gpu 1/2 free" in failed(as4).get("mig-c", ""),
         "a MIG-enabled GPU without MIG devices served is not sliced either", as4)

    # ---- MPS: containers asking 2 GPUs are kept off MPS GPUs -------------------
    m2 = make_pod("inference", "mps-two", [obs_stand.gpu_container("c", 2, 1000, 10)])
    am2 = filt(m2, ["mps-a"])
    t.ok(names(am2) == [] and "MPS" in failed(am2).get("mps-a", ""),
         "a 2-GPU container is not placed on MPS GPUs (the reason names MPS)", am2)
    am2b = filt(m2, ["mps-a", "plain-a"])
    t.ok(names(am2b) == ["plain-a"], "the same container fits a node with vGPU GPUs", am2b)
    m1 = make_pod("inference", "mps-one", [obs_stand.gpu_container("c", 1, 1000, 10)])
    am1 = filt(m1, ["mps-a"])
    t.ok(names(am1) == ["mps-a"], "a 1-GPU container still fits the MPS GPUs", am1)

    # ---- mixing and restarts ---------------------------------------------------
    x = make_pod("ml", "mixed", [obs_stand.gpu_container("c", 1, 1000, 10), dev_container("d", MIG_1G, 1)])
    ax = filt(x, ALL)
    t.ok(names(ax) == [] and "both" in json.dumps(ax), "a pod asking slices and MIG devices is refused with why", ax)
    rc, log = stand.stop_scheduler()
    t.ok(rc == 0, "the scheduler stops cleanly", log[-1500:])
    # a restarted scheduler counts the bound pods from the API again
    stand.start_scheduler()
    p8 = make_pod("ml", "mig3g-restart", [dev_container("c", MIG_3G, 1)])
    a8 = filt(p8, ["mig-a"])
    t.ok(names(a8) == [] and "0 free of 1" in failed(a8).get("mig-a", ""),
         "after a restart the bound 3g.40gb pod still holds its device", a8)
    code, _ = obs_stand.http("DELETE", "%s/api/v1/namespaces/ml/pods/mig3g" % api)
    a9 = wait_for("freed", lambda: (lambda a: a if names(a) else None)(filt(p8, ["mig-a"])))
    t.ok(a9 is not None and names(a9) == ["mig-a"], "and deleting it frees the device", a9)

    # ---- another scheduler's Binding lands while ours is in flight ----------------
    # (a second replica, or a predecessor's late Binding): the devices count where the API
    # says the pod is, not where our bind aimed; our Binding is then refused
    code, _ = obs_stand.http("DELETE", "%s/api/v1/namespaces/ml/pods/mig1g-more" % api)
    time.sleep(1.0)  # the informer's delete event: both 1g nodes have 2 free again
    r = make_pod("ml", "mig1g-raced", [dev_container("c", MIG_1G, 2)])
    import threading
    obs_stand.http("POST", "%s/_fake/bind-delay?ms=2000&fixed=1" % api)
    theirs, ours = {}, {}
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "mig1g-raced", "namespace": "ml"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "mig-b"}}
    th1 = threading.Thread(target=lambda: theirs.update(code=obs_stand.http(
        "POST", "%s/api/v1/namespaces/ml/pods/mig1g-raced/binding" % api, body)[0]))
    th1.start()
    time.sleep(0.5)
    th2 = threading.Thread(target=lambda: ours.update(b=bind(r, "mig-a")))
    th2.start()
    th1.join()
    th2.join()
    obs_stand.http("POST", "%s/_fake/bind-delay?ms=0" % api)
    landed = json.loads(obs_stand.http("GET", "%s/api/v1/namespaces/ml/pods/mig1g-raced" % api)[1])
    q = make_pod("ml", "mig1g-after-race", [dev_container("c", MIG_1G, 1)])
    aq = wait_for("settled", lambda: (lambda a: a if names(a) else None)(filt(q, ["mig-a", "mig-b"])))
    t.ok(code == 200 and theirs.get("code") == 201 and landed["spec"].get("nodeName") == "mig-b" and
         (ours.get("b") or {}).get("Error") and aq is not None and names(aq) == ["mig-a"] and
         "0 free of 2" in failed(aq).get("mig-b", ""),
         "another scheduler's Binding lands while ours is in flight: the pod's devices count on the "
         "node it landed on, and the node our bind aimed at keeps its devices free",
         (theirs, landed["spec"].get("nodeName"), ours, aq))
    rc, log = stand.stop_scheduler()
    t.ok(rc == 0, "the restarted scheduler stops cleanly", log[-1500:])

    # ---- reservations lapse, bound pods never ------------------------------------
    # with a 1 s reservation TTL: a filtered pod that never binds gives its devices back, a
    # bound one (mig1g-raced, 2 on mig-b) keeps them however long it runs
    cfg = os.path.join(stand.dir, "short-ttl.json")
    with open(cfg, "w") as f:
        json.dump({"reservationTimeoutSeconds": 1}, f)
    stand.start_scheduler("--config", cfg)
    held = make_pod("ml", "mig1g-unbound", [dev_container("c", MIG_1G, 2)])
    ah = filt(held, ["mig-a"])
    probe2 = make_pod("ml", "mig1g-ttl-probe", [dev_container("c", MIG_1G, 1)])
    blocked = filt(probe2, ["mig-a"])
    time.sleep(3.0)  # the TTL and a sweep or two past it
    lapsed = filt(probe2, ["mig-a"])
    probe3 = make_pod("ml", "mig1g-ttl-probe-b", [dev_container("c", MIG_1G, 1)])
    still = filt(probe3, ["mig-b"])
    t.ok(names(ah) == ["mig-a"] and names(blocked) == [] and names(lapsed) == ["mig-a"] and
         names(still) == [] and "0 free of 2" in failed(still).get("mig-b", ""),
         "a 1 s reservation TTL: an unbound reservation lapses and frees its devices, a bound pod's "
         "devices stay held past it", (ah, blocked, lapsed, still))
    rc, log = stand.stop_scheduler()
    t.ok(rc == 0, "the scheduler with a short TTL stops cleanly", log[-1500:])
finally:
    stand.stop()
t.done()
