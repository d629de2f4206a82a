#!/usr/bin/python3
"""MIG strategies end to end: the real agent over the fake NVML with a MIG
geometry file (stand-in for an operator-partitioned A100,
tests/fakes/README.md "MIG"), with the kubelet stand-in.
docs/mig-cdi.md, "MIG".
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


def allocation(env, pod):
    code, obj = env.api.req("GET", "/api/v1/namespaces/default/pods/" + pod)
    return (obj.get("metadata", {}).get("annotations") or {}).get("gpuvisor.io/allocation") if code == 200 else None


def preferred_when_seen(k, avail, size, want):
    """GetPreferredAllocation (stand-in) until the agent's pod cache has the
    pod and it names want (a pod not seen yet gets no preference)."""
    last = {}

    def ask():
        last["r"] = k.cmd("preferred", available=avail, size=size)
        return last["r"] and last["r"]["ok"] and sorted(last["r"]["ids"]) == sorted(want)
    return gvtest.wait_for(ask, 10), last.get("r")


def scenario_single():
    env, mig, k = start("single", "0 1g.5gb,1g.5gb\n")
    try:
        ev = k.event("devices", lambda e: e["resource"] == "nvidia.com/gpu" and len(e["devices"]) == 3, 20)
        got = ids(ev)
        t.ok(ev and sum(i.startswith("MIG-") for i in got) == 2 and GPUS[1] in got,
             "single: the MIG devices under nvidia.com/gpu", got)
        m = sorted(i for i in got if i.startswith("MIG-")) + ["MIG-none"] * 2
        avail = [GPUS[1], m[0], m[1]]  # the kubelet's own order would take GPU 1 first
        # gpuvisor-scheduler placed the pod on the second MIG device (an exclusive GPU entry)
        env.api.create_pod("one", [("main", {"nvidia.com/gpu": "1"})], "v1;node=node1;main=%s:4864:1000" % m[1])
        seen, p = preferred_when_seen(k, avail, 1, [m[1]])
        t.ok(seen, "single: GetPreferredAllocation names the MIG device of the assignment", p)
        a = k.cmd("allocate", ids=[m[1]])
        t.ok(a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": m[1]} and not a["resp"]["mounts"] and
             gvtest.wait_for(lambda: allocation(env, "one") == "success", 10),
             "single: Allocate answers NVIDIA_VISIBLE_DEVICES=<MIG uuid>, no interposer; the pod is "
             "annotated success", a)
        # a container given both MIG devices, once "one" is gone (its device free again)
        env.api.delete_pod("one")
        env.api.create_pod("two", [("main", {"nvidia.com/gpu": "2"})],
                           "v1;node=node1;main=%s:4864:1000,%s:4864:1000" % (m[0], m[1]))
        seen, p = preferred_when_seen(k, avail, 2, [m[0], m[1]])
        a = k.cmd("allocate", ids=p["ids"] if seen else [m[0], m[1]])
        t.ok(seen and a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": "%s,%s" % (m[0], m[1])},
             "single: two MIG devices assigned: both preferred, both visible in the assignment's order", (p, a))
        # the kubelet hands another device than the assignment's (its TopologyManager decided)
        env.api.delete_pod("two")
        env.api.create_pod("other", [("main", {"nvidia.com/gpu": "1"})], "v1;node=node1;main=%s:4864:1000" % m[0])
        seen, p = preferred_when_seen(k, avail, 1, [m[0]])
        a = k.cmd("allocate", ids=[GPUS[1]])
        t.ok(seen and a and a["ok"] and envs(a) == {"NVIDIA_VISIBLE_DEVICES": m[0]} and
             gvtest.wait_for(lambda: "on other GPUs than assigned" in env.agent_log() and
                             "default/other" in env.agent_log(), 5),
             "single: kubelet IDs other than the assignment's: the container gets its assigned MIG device, "
             "the mismatch logged (as for exclusive GPUs)", a)
    finally:
        env.close()


def scenario_single_no_runtime():
    """nvidiaRuntime false (fake driver root with nvidia-caps minors): a MIG
    device placed by gpuvisor under single gets the parent's device node and
    its instance's nvidia-caps nodes."""
    env = agent.Env()
    root = os.path.join(env.dir, "driver")
    subprocess.run(["sh", os.path.join(gvtest.ROOT, "tests/fakes/make-driver-root.sh"), root, "550.54.15", "2",
                    "gpu0/gi1/access 21", "gpu0/gi1/ci0/access 22", "gpu0/gi2/access 30",
                    "gpu0/gi2/ci0/access 31"], check=True)
    env.start_mig_agent("0 1g.5gb,1g.5gb\n", {"mode": "exclusive", "migStrategy": "single",
                                               "nvidiaRuntime": False, "containerDriverRoot": root})
    k = env.start_kubelet("py")
    try:
        ev = k.event("devices", lambda e: e["resource"] == "nvidia.com/gpu" and len(e["devices"]) == 3, 20)
        m = sorted(i for i in ids(ev) if i.startswith("MIG-")) + ["MIG-none"] * 2
        # fake NVML: GPU instance id = slot + 1, so the second MIG device is gi2
        env.api.create_pod("direct", [("main", {"nvidia.com/gpu": "1"})], "v1;node=node1;main=%s:4864:1000" % m[1])
        seen, p = preferred_when_seen(k, [GPUS[1], m[0], m[1]], 1, [m[1]])
        a = k.cmd("allocate", ids=[m[1]])
        d = {x["container_path"]: x["host_path"] for x in a["resp"]["devices"]} if a and a.get("ok") else {}
        t.ok(seen and d.get("/dev/nvidia0") == "/dev/nvidia0" and "/dev/nvidia1" not in d and
             d.get("/dev/nvidia-caps/nvidia-cap30") == "/dev/nvidia-caps/nvidia-cap30" and
             d.get("/dev/nvidia-caps/nvidia-cap31") == "/dev/nvidia-caps/nvidia-cap31" and
             not any("cap21" in x or "cap22" in x for x in d) and "/dev/nvidiactl" in d and
             envs(a).get("NVIDIA_VISIBLE_DEVICES") == "void" and "/etc/ld.so.preload" not in mounts(a),
             "single, nvidiaRuntime false (fake driver root): the assigned MIG device gets /dev/nvidia0 and "
             "its instance's nvidia-caps nodes (gi2, ci0) only, no interposer", a)
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
scenario_single_no_runtime()
scenario_none()
t.done()
