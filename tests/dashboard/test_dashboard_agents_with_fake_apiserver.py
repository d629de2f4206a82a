#!/usr/bin/python3
"""Where the scheduler's dashboard reads live usage from: the node agents'
pods of the agents' namespace (agentNamespace, gpuvisor-system), against the
kube-apiserver stand-in seeded with the known cluster (cluster_fixture.py)
and node-agent stand-ins.  A tenant's pod posing as an agent (the agents'
label, a port named metrics, in its own namespace) serves figures of its own
for a real node; the dashboard must not read it."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import agent_standin  # noqa: E402
import obs_stand  # noqa: E402
from obs_stand import gvtest  # noqa: E402

t = gvtest.Tap()
if not os.path.exists(obs_stand.SCHED_BIN):
    t.skip("dashboard agents", "gpuvisor-scheduler not built")
    t.done()


def slice_of(state, node, pod, container):
    return next((x for n in state.get("nodes", []) if n["name"] == node for g in n["gpus"]
                 for x in g["slices"] if x["pod"] == pod and x["container"] == container), {})


agents = agent_standin.start_agents(skip=("gpu-h100-1",))
impostor = agent_standin.impostor_pod(*agent_standin.start_impostor())
stand = obs_stand.Stand(gvtest.scratch("dashagents"), agents=agents, extra_seed=[impostor])
try:
    stand.start_scheduler()
    obs_stand.drive_filters(stand)
    state = obs_stand.usage_state(stand)
    b0 = slice_of(state, "gpu-a100-1", "bert-finetune-0", "trainer")
    a100 = {g["index"]: g.get("utilPercent") for n in state.get("nodes", []) if n["name"] == "gpu-a100-1"
            for g in n["gpus"]}
    t.ok(state.get("usage", {}).get("agents") == 3,
         "the dashboard reads the 3 agents of gpuvisor-system, not the tenant's pod with their label",
         state.get("usage"))
    t.ok(b0.get("usedMemMiB") == int(40960 * 0.9) and a100.get(0) == 0 and 99 not in a100.values(),
         "the figures shown are the real agent's (the impostor claims 1 MiB used and 99 % busy)",
         (b0, a100))
    st = json.loads(obs_stand.http("GET", stand.api_url + "/_fake/stats")[1])
    t.ok(any(k.startswith("GET /api/v1/namespaces/gpuvisor-system/pods") for k in st)
         and not any(k.startswith("GET /api/v1/pods?labelSelector=app.kubernetes.io") for k in st),
         "the agents are listed in their namespace only", sorted(k for k in st if "pods" in k)[:10])
finally:
    stand.stop()

# agentNamespace moves where they are read from: here, to the impostor's
cfg = os.path.join(gvtest.scratch("dashagents2"), "sched.json")
with open(cfg, "w") as f:
    json.dump({"agentNamespace": "ml-train"}, f)
stand = obs_stand.Stand(gvtest.scratch("dashagents3"), agents=agents, extra_seed=[impostor])
try:
    stand.start_scheduler("--config", cfg)
    obs_stand.drive_filters(stand)
    state = obs_stand.usage_state(stand)
    a100 = {g["index"]: g.get("utilPercent") for n in state.get("nodes", []) if n["name"] == "gpu-a100-1"
            for g in n["gpus"]}
    t.ok(state.get("usage", {}).get("agents") == 1 and a100.get(0) == 99,
         "agentNamespace: the agents of that namespace are read", (state.get("usage"), a100))
finally:
    stand.stop()
t.done()
