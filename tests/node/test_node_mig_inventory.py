#!/usr/bin/python3
"""MIG devices in the published inventory (docs/mig-cdi.md, "MIG in the
scheduler"): the real agent over the fake NVML with a MIG geometry file
(stand-in for an operator-partitioned A100), publishing to the
kube-apiserver stand-in.  Under migStrategy mixed each MIG device it
advertises is a "wholeDevices" entry of kind mig with the resource it is
advertised under, its UUID, its parent GPU and memory; the MIG-enabled GPU
says mig: true (never sliced).  Under single each MIG device is a GPU entry
of mode mig instead (uuid = MIG UUID, the instance's memory, the parent's
index and PCI address, mig false), the parent's entry gone, no whole device."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS  # noqa: E402

t = gvtest.Tap()
if not agent.have_fake_nvml():
    t.skip("MIG devices in the inventory", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()


def inventory(env):
    code, node = env.api.req("GET", "/api/v1/nodes/" + env.node_name)
    text = (node.get("metadata", {}).get("annotations", {}) if code == 200 else {}).get("gpuvisor.io/node-gpus")
    return json.loads(text) if text else {}


def migs(inv):
    return [w for w in inv.get("wholeDevices", []) if w.get("kind") == "mig"]


def scenario(strategy, geometry, want):
    env = agent.Env()
    try:
        mig = os.path.join(env.dir, "mig.conf")
        agent.write_atomic(mig, geometry)
        agent.write_atomic(env.config, json.dumps({"mode": "exclusive", "migStrategy": strategy}))
        env.start_agent(env_extra={"GV_FAKE_MIG_CONFIG": mig})
        env.start_kubelet("py")
        inv = gvtest.wait_for(lambda: (lambda i: i if len(migs(i)) == len(want) else None)(inventory(env)), 30) or {}
        got = sorted((w["resource"], w["profile"]) for w in migs(inv))
        t.ok(got == sorted(want), "%s: one kind-mig entry per MIG device, under its advertised resource" % strategy,
             inv.get("wholeDevices"))
        parent = [g for g in inv.get("gpus", []) if g.get("uuid") == GPUS[0]]
        t.ok(migs(inv) and all(w["gpuUuid"] == GPUS[0] and w["id"].startswith("MIG-") and w["memoryMiB"] > 0 and
                 w["healthy"] and w["pciBusId"] == parent[0]["pciBusId"] for w in migs(inv)) and parent
             and parent[0]["mig"] is True,
             "%s: each names its MIG UUID, parent GPU (uuid, PCI address) and memory; the parent says mig" % strategy,
             inv)
        return env, mig, inv
    except Exception:
        env.close()
        raise


env, mig, inv = scenario("mixed", "0 1g.5gb,-,1g.5gb,3g.20gb\n",
                         [("nvidia.com/mig-1g.5gb", "1g.5gb"), ("nvidia.com/mig-1g.5gb", "1g.5gb"),
                          ("nvidia.com/mig-3g.20gb", "3g.20gb")])
try:
    # the operator re-partitions: the inventory follows
    agent.write_atomic(mig, "0 7g.40gb\n")
    inv = gvtest.wait_for(lambda: (lambda i: i if [w["profile"] for w in migs(i)] == ["7g.40gb"] else None)(
        inventory(env)), 30)
    t.ok(inv is not None, "mixed: a geometry change replaces the MIG entries", inv and inv.get("wholeDevices"))
finally:
    env.close()


def scenario_single():
    """migStrategy single: the MIG devices are nvidia.com/gpu, so the scheduler
    must see them as GPUs (exclusive ones), not as whole devices."""
    env = agent.Env()
    try:
        # a long quiet time: an Unhealthy entry must not recover before the test reads it
        mig = env.start_mig_agent("0 1g.5gb,-,1g.5gb\n1 1g.5gb\n",
                                  {"mode": "exclusive", "migStrategy": "single", "deviceSplitCount": 4},
                                  extra=["--health-recover-ms", "600000"])
        k = env.start_kubelet("py")
        ev = k.event("devices", lambda e: e["resource"] == "nvidia.com/gpu" and len(e["devices"]) == 3, 20)
        advertised = sorted(d["id"] for d in ev["devices"]) if ev else []

        def entries():
            i = inventory(env)
            return i if sorted(g["uuid"] for g in i.get("gpus", [])) == advertised and advertised else None
        inv = gvtest.wait_for(entries, 30) or inventory(env)
        gs = inv.get("gpus", [])
        pci = {0: "00000000:3B:00.0", 1: "00000000:3C:00.0"}
        t.ok(len(gs) == 3 and all(g["uuid"].startswith("MIG-") and g["mode"] == "mig" and g["mig"] is False and
                                  g["memoryMiB"] == 4864 and g["split"] == 1 and g["healthy"] and
                                  g["pciBusId"].upper() == pci.get(g["index"]) for g in gs) and
             sorted(g["index"] for g in gs) == [0, 0, 1] and not set(GPUS) & {g["uuid"] for g in gs},
             "single: one GPU entry of mode mig per advertised MIG device (MIG uuid, 4864 MiB, split 1, "
             "parent's index and PCI address, mig false); the parents' entries replaced", inv)
        t.ok(migs(inv) == [] and not set(advertised) & {w["id"] for w in inv.get("wholeDevices", [])},
             "single: the MIG devices are not also listed as whole devices", inv.get("wholeDevices"))

        def labels():
            code, node = env.api.req("GET", "/api/v1/nodes/" + env.node_name)
            return node.get("metadata", {}).get("labels", {}) if code == 200 else {}
        want = {"nvidia.com/gpu.count": "3", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                "nvidia.com/gpu.memory": "4864", "nvidia.com/gpu.replicas": "1", "nvidia.com/mig.strategy": "single"}
        t.ok(gvtest.wait_for(lambda: all(labels().get(k_) == v for k_, v in want.items()), 10),
             "single: GFD's single-strategy labels still describe the MIG devices (count 3, product -MIG-1g.5gb)",
             labels())
        # an Xid of GPU 0's first instance (GPU instance 1 in the fake): that entry only
        agent.write_atomic(env.faults, "xid 0 79 1 1 0\n")
        health = gvtest.wait_for(lambda: (lambda h: h if sorted(h.values()) == [False, True, True] else None)(
            {g["uuid"]: g["healthy"] for g in inventory(env).get("gpus", [])}), 10)
        bad = [u for u, h in (health or {}).items() if not h]
        t.ok(health and len(bad) == 1 and [g["index"] for g in inventory(env)["gpus"] if g["uuid"] == bad[0]] == [0],
             "single: an instance-scoped Xid (fake NVML) makes that MIG device's entry unhealthy, its siblings' "
             "stay healthy", inventory(env))
        # the operator re-partitions: the entries follow (new UUIDs, the instance's memory)
        agent.write_atomic(mig, "0 2g.10gb\n1 1g.5gb\n")
        inv = gvtest.wait_for(lambda: (lambda i: i if sorted(g["memoryMiB"] for g in i.get("gpus", [])) ==
                                       [4864, 9984] else None)(inventory(env)), 30)
        t.ok(inv is not None and all(g["mode"] == "mig" and g["uuid"] not in advertised or g["index"] == 1
                                     for g in inv["gpus"]),
             "single: a geometry change replaces the GPU entries (2g.10gb: 9984 MiB)", inv or inventory(env))
    finally:
        env.close()


scenario_single()
env = agent.Env()
try:
    mig = os.path.join(env.dir, "mig.conf")
    agent.write_atomic(mig, "0 1g.5gb,1g.5gb\n")
    agent.write_atomic(env.config, json.dumps({"mode": "exclusive", "migStrategy": "none"}))
    env.start_agent(env_extra={"GV_FAKE_MIG_CONFIG": mig})
    env.start_kubelet("py")
    inv = gvtest.wait_for(lambda: (lambda i: i if i.get("gpus") else None)(inventory(env)), 30) or {}
    t.ok(migs(inv) == [] and any(g.get("mig") for g in inv.get("gpus", [])),
         "none: no MIG device is served, so none is listed; the GPU still says mig (never sliced)", inv)
finally:
    env.close()
t.done()
