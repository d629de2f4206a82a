#!/usr/bin/python3
"""MIG strategy single from the node agent to the scheduler (docs/mig-cdi.md,
"MIG in the scheduler"): the real gpuvisor-node over the fake NVML with a
MIG geometry file (stand-in for an operator-partitioned A100) and
"migStrategy": "single" publishes its inventory into the kube-apiserver
stand-in: one GPU entry of mode mig per MIG device, no whole devices.  The
real scheduler reads it back and places pods asking nvidia.com/gpu: N on N
MIG devices of the node, one pod per MIG device (mode mig is exclusive),
and refuses a pod that does not fit with a reason.  Last, the kubelet
stand-in admits a placed pod: the agent answers with the assigned MIG
device."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dashboard"))
sys.path.insert(0, os.path.join(HERE, "..", "node"))
import agent  # noqa: E402
import obs_stand  # noqa: E402
from obs_stand import gvtest  # noqa: E402

t = gvtest.Tap()
if not os.path.exists(obs_stand.SCHED_BIN) or not agent.have_fake_nvml():
    t.skip("scheduler and MIG strategy single", "gpuvisor-scheduler or the fake NVML not built")
    t.done()

env = agent.Env()
# the scheduler on the agent's API server stand-in (obs_stand's start, not its seeded cluster)
stand = obs_stand.Stand.__new__(obs_stand.Stand)
stand.dir, stand.api_url, stand.sched = env.dir, env.api.url, None
NODE = env.node_name
MIGS = []


def place(name, limits):
    """create, filter and (when the node fits) bind a pod with one container of these limits."""
    code, body = obs_stand.http("POST", "%s/api/v1/namespaces/ml/pods" % stand.api_url, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
        "spec": {"schedulerName": "gpuvisor-scheduler", "containers": [{"name": "c", "resources": {
            "limits": limits}}]}})
    pod = json.loads(body)
    if code != 201:
        return None, {"http": code, "body": body}
    code, body = obs_stand.http("POST", stand.ext + "/gpuvisor/filter", {"Pod": pod, "NodeNames": [NODE]})
    ans = json.loads(body) if code == 200 else {"http": code, "body": body}
    if ans.get("NodeNames") == [NODE]:
        obs_stand.http("POST", stand.ext + "/gpuvisor/bind",
                       {"PodName": name, "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"], "Node": NODE})
    return pod, ans


def assigned(name):
    """The MIG uuids of the pod's gpuvisor.io/assignment (waits for the bind to write it)."""
    def get():
        code, body = obs_stand.http("GET", "%s/api/v1/namespaces/ml/pods/%s" % (stand.api_url, name))
        a = (json.loads(body)["metadata"].get("annotations") or {}) if code == 200 else {}
        return a.get("gpuvisor.io/assignment")
    text = gvtest.wait_for(get, 30) or ""
    # v1;node=<node>;c=<uuid>:<mem>:<milli>[,...]
    part = [p for p in text.split(";") if p.startswith("c=")]
    return text, [d.split(":")[0] for d in part[0][2:].split(",")] if part else []


try:
    # GPU 0: 2x 3g.20gb, GPU 1: 1x 3g.20gb (one profile, as NVIDIA's single strategy wants)
    env.start_mig_agent("0 3g.20gb,3g.20gb\n1 3g.20gb\n", {"mode": "exclusive", "migStrategy": "single"})
    k = env.start_kubelet("py")
    ev = k.event("devices", lambda e: e["resource"] == "nvidia.com/gpu" and len(e["devices"]) == 3, 20)
    MIGS[:] = sorted(d["id"] for d in ev["devices"]) if ev else []

    def published():
        text = (env.api.node(NODE)["metadata"].get("annotations") or {}).get("gpuvisor.io/node-gpus")
        gs = json.loads(text).get("gpus", []) if text else []
        return gs if sorted(g["uuid"] for g in gs) == MIGS else None
    gs = gvtest.wait_for(published, 30) or []
    t.ok(len(MIGS) == 3 and all(m.startswith("MIG-") for m in MIGS) and len(gs) == 3 and
         all(g["mode"] == "mig" and g["mig"] is False and g["memoryMiB"] == 20224 for g in gs),
         "agent (fake NVML, single): the 3 MIG devices advertised under nvidia.com/gpu and published as GPU "
         "entries of mode mig", gs)
    stand.start_scheduler()
    _, a = place("one", {"nvidia.com/gpu": "1"})
    text1, one = assigned("one")
    t.ok(a.get("NodeNames") == [NODE] and len(one) == 1 and one[0] in MIGS and "node=%s" % NODE in text1,
         "nvidia.com/gpu: 1 (stand-in API server): placed on one MIG device of the single-strategy node", (a, text1))
    _, a = place("two", {"nvidia.com/gpu": "2"})
    text2, two = assigned("two")
    t.ok(a.get("NodeNames") == [NODE] and len(two) == 2 and len(set(two)) == 2 and set(two) <= set(MIGS) and
         not set(two) & set(one),
         "nvidia.com/gpu: 2: two distinct MIG devices, neither the one already taken (one pod per MIG device)",
         (a, text2))
    _, a = place("three", {"nvidia.com/gpu": "1"})
    why = json.dumps(a.get("FailedNodes") or a)
    t.ok(a.get("NodeNames") in (None, []) and NODE in (a.get("FailedNodes") or {}) and
         "0/3 free" in (a.get("FailedNodes") or {}).get(NODE, ""),
         "a third pod: every MIG device is taken, refused with a reason for the node", why)
    # a slice request on a mode-mig entry takes the whole MIG device (exclusive), so it does not fit either
    _, a = place("slice", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    t.ok(a.get("NodeNames") in (None, []) and (a.get("FailedNodes") or {}).get(NODE),
         "a 1000 MiB slice request: no MIG device is free to share (each is exclusive)", a)
    # the first pod ends: its MIG device is free for the slice request, which then holds it whole
    code, _ = obs_stand.http("DELETE", "%s/api/v1/namespaces/ml/pods/one" % stand.api_url)
    pods = {}

    def refit(name, limits):
        pods["p"], pods["a"] = place(name, limits)
        if pods["a"].get("NodeNames") == [NODE]:
            return True
        obs_stand.http("DELETE", "%s/api/v1/namespaces/ml/pods/%s" % (stand.api_url, name))
        return False
    n = [0]

    def retry():
        n[0] += 1
        return refit("slice%d" % n[0], {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    fitted = code == 200 and gvtest.wait_for(retry, 30)
    text, got = assigned("slice%d" % n[0]) if fitted else ("", [])
    t.ok(fitted and got == one and (one[0] + ":1000:") in text,
         "after the first pod is deleted: the slice request gets its MIG device", (pods.get("a"), text))
    _, a = place("slice-b", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    t.ok(a.get("NodeNames") in (None, []),
         "a second slice request: the MIG device already holds a container (one at a time)", a)
    # the kubelet admits "two" (stand-in): once the agent's pod cache has it, its preference
    # names the two assigned MIG devices (before, a plain GPU gets no preference)
    last = {}

    def preferred():
        last["p"] = k.cmd("preferred", available=MIGS, size=2)
        return last["p"] and last["p"]["ok"] and sorted(last["p"]["ids"]) == sorted(two)
    seen = len(two) == 2 and gvtest.wait_for(preferred, 10)
    a = k.cmd("allocate", ids=last["p"]["ids"]) if seen else None
    t.ok(seen and a and a["ok"] and
         sorted(agent.envs(a).get("NVIDIA_VISIBLE_DEVICES", "").split(",")) == sorted(two),
         "the placed pod admitted (kubelet stand-in): GetPreferredAllocation names its two MIG devices, "
         "Allocate answers NVIDIA_VISIBLE_DEVICES = those", (last.get("p"), a))
finally:
    stand.stop_scheduler()
    env.close()
t.done()
