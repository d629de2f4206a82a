#!/usr/bin/python3
"""MIG devices in the published inventory (docs/mig-cdi.md, "MIG in the
scheduler"): the real agent over the fake NVML with a MIG geometry file
(stand-in for an operator-partitioned A100), publishing to the
kube-apiserver stand-in.  Each MIG device it advertises is a "wholeDevices"
entry of kind mig with the resource it is advertised under, its UUID, its
parent GPU and memory; the MIG-enabled GPU says mig: true (never sliced)."""
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
env, _, _ = scenario("single", "0 1g.5gb,1g.5gb\n", [("nvidia.com/gpu", "1g.5gb")] * 2)
env.close()
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
