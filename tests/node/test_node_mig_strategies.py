#!/usr/bin/python3
"""MIG strategies end to end: the real agent over the fake NVML with a MIG
geometry file (stand-in for an operator-partitioned A100,
tests/fakes/README.md "MIG"), with the kubelet stand-in.
docs/mig-cdi.md, "MIG".
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, envs  # noqa: E402

t = gvtest.Tap()
if not agent.have_fake_nvml():
    t.skip("MIG strategies end to end", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()


def start(strategy, geometry):
    env = agent.Env()
    mig = os.path.join(env.dir, "mig.conf")
    agent.write_atomic(mig, geometry)
    agent.write_atomic(env.config, json.dumps({"mode": "exclusive", "migStrategy": strategy}))
    env.start_agent(env_extra={"GV_FAKE_MIG_CONFIG": mig})
    return env, mig, env.start_kubelet("py")


def ids(ev):
    return sorted(d["id"] for d in ev["devices"]) if ev else []


def wait_state(k, state, cond, timeout=20):
    """Folds "devices" events (one per resource) into state until cond(state)."""
    def seen(e):
        state[e["resource"]] = ids(e)
        return cond(state)
    return cond(state) or k.event("devices", seen, timeout) is not None


def scenario_mixed():
    env, mig, k = start("mixed", "0 1g.5gb,-,1g.5gb,3g.20gb\n")
    try:
        st = {}
        ok = wait_state(k, st, lambda s: len(s.get("nvidia.com/mig-1g.5gb", [])) == 2 and
                        len(s.get("nvidia.com/mig-3g.20gb", [])) == 1 and
                        s.get("nvidia.com/gpu") == [GPUS[1]])
        migs = st.get("nvidia.com/mig-1g.5gb", []) + st.get("nvidia.com/mig-3g.20gb", [])
        t.ok(ok and all(i.startswith("MIG-") for i in migs),
             "mixed: nvidia.com/mig-<profile> per profile (MIG UUIDs), the whole GPU 1 under nvidia.com/gpu", st)
        big = st.get("nvidia.com/mig-3g.20gb")

        def labels():
            code, node = env.api.req("GET", "/api/v1/nodes/" + env.node_name)
            return node.get("metadata", {}).get("labels", {}) if code == 200 else {}
        t.ok(gvtest.wait_for(lambda: labels().get("nvidia.com/mig-1g.5gb.count") == "2" and
                             labels().get("nvidia.com/mig-3g.20gb.product") ==
                             "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb" and
                             labels().get("nvidia.com/mig.strategy") == "mixed", 10),
             "mixed: GFD's per-profile labels on the Node", labels())
        mid = big[0] if big else "MIG-none"
        a = k.cmd("allocate", ids=[mid], resource="nvidia.com/mig-3g.20gb")
        t.ok(a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": mid},
             "mixed: a MIG device is allocated as NVIDIA_VISIBLE_DEVICES=<MIG UUID>", a)
        # the operator re-partitions GPU 0: the old devices go, the new ones come
        agent.write_atomic(mig, "0 7g.40gb\n")
        ok = wait_state(k, st, lambda s: len(s.get("nvidia.com/mig-7g.40gb", [])) == 1 and
                        s.get("nvidia.com/mig-1g.5gb") == [] and s.get("nvidia.com/mig-3g.20gb") == [])
        t.ok(ok, "mixed: a geometry change is re-read and re-advertised (old profiles emptied)", st)
    finally:
        env.close()


def scenario_single():
    env, mig, k = start("single", "0 1g.5gb,1g.5gb\n")
    try:
        ev = k.event("devices", lambda e: e["resource"] == "nvidia.com/gpu" and len(e["devices"]) == 3, 20)
        got = ids(ev)
        t.ok(ev and sum(i.startswith("MIG-") for i in got) == 2 and GPUS[1] in got,
             "single: the MIG devices under nvidia.com/gpu", got)
    finally:
        env.close()


def scenario_none():
    env, mig, k = start("none", "0 1g.5gb,1g.5gb\n")
    try:
        ev = k.event("devices", lambda e: e["resource"] == "nvidia.com/gpu" and len(e["devices"]) >= 1, 20)
        t.ok(ev and ids(ev) == [GPUS[1]] and "MIG is enabled" in env.agent_log(),
             "none: the MIG-enabled GPU is not advertised (its MIG devices neither), with the reason logged",
             ids(ev))
    finally:
        env.close()


scenario_mixed()
scenario_single()
scenario_none()
t.done()
