#!/usr/bin/python3
"""kubectl gpuvisor defrag against the kube-apiserver stand-in (Eviction
subresource, policy/v1 and v1beta1 PodDisruptionBudgets), with a stand-in for
the ReplicaSet controller and the scheduler written here: when a pod owned by
a controller is evicted, a replacement appears; the stand-in scheduler then
places it where the test's scenario says (normally where the plan predicted,
i.e. where gpuvisor's engine would; in the surprise scenarios elsewhere, late
or never).  The real scheduler cannot run its kube-scheduler half here.

Cluster: four nodes of one T4 each, every GPU 30 % used by one pod: solo (no
controller), agent (a DaemonSet's), web-1 and web-2 (ReplicaSet web).  Only
the web pods may move; moving one onto another used GPU frees its GPU.

Every placement is signed as the scheduler signs it (HMAC-SHA256, computed
here independently of src/contracts) under the key the stand-in serves as
the gpuvisor-placement-key Secret, so the plugin verifies them as a cluster
admin's would; the last scenarios take the key away or forge placements."""
import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dashboard"))
from obs_stand import FAKE_API, gvtest, http  # noqa: E402

t = gvtest.Tap()
BIN = os.path.join(gvtest.BUILD, "bin", "kubectl-gpuvisor")
if not os.path.exists(BIN):
    t.skip("kubectl-gpuvisor defrag", "not built")
    t.done()
work = gvtest.scratch("kcdefrag")
T4 = ("Tesla T4", 15360)
NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
# pod, node, owner kind (None: no controller), labels
PODS = [("solo", "gpu-a", None, {"app": "solo"}),
        ("agent", "gpu-b", "DaemonSet", {"app": "agent"}),
        ("web-1", "gpu-c", "ReplicaSet", {"app": "web"}),
        ("web-2", "gpu-d", "ReplicaSet", {"app": "web"})]
NODE_OF = {name: node for name, node, _, _ in PODS}  # each pod's node before any move


def uuid(node):
    return "GPU-%s-00" % node


KEY = b"defrag-test-key-0123456789abcdef0123456789abcdef"
KEY_SECRET = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "gpuvisor-placement-key", "namespace": "gpuvisor-system"},
              "data": {"key": base64.b64encode(KEY + b"\n").decode()}}


def sign(uid, node, at, assignment, key=KEY):
    """The scheduler's placement signature (src/contracts/placement.c)."""
    msg = b"gpuvisor.io/placement/v1\0" + b"".join(f.encode() + b"\0" for f in (uid, node, at, assignment))
    return "v1." + hmac.new(key, msg, hashlib.sha256).hexdigest()


def placement(uid, node, at, key=KEY):
    """A pod's placement annotations as the scheduler writes them at bind."""
    asg = "v1;node=%s;main=%s:4096:300" % (node, uuid(node))
    return {"gpuvisor.io/assignment": asg, "gpuvisor.io/assigned-node": node,
            "gpuvisor.io/assigned-at": at, "gpuvisor.io/assignment-sig": sign(uid, node, at, asg, key)}


def now3339(off=0):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + off))


def pod_obj(name, node, owner, labels, uid=None):
    md = {"name": name, "namespace": "default", "labels": dict(labels), "annotations": {}}
    if uid:
        md["uid"] = uid
    if owner:
        md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "own-" + labels["app"],
                                  "uid": "owner-" + labels["app"], "controller": True}]
    spec = {"schedulerName": "gpuvisor-scheduler", "containers": [{
        "name": "main", "image": "example/x",
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096",
                                 "nvidia.com/gpucores": "30"}}}]}
    if node:
        spec["nodeName"] = node
        md["annotations"] = placement(uid or "", node, now3339(-600))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def seed_objects(pdbs=()):
    out = []
    for n in NODES:
        inv = json.dumps({"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4",
                          "gpus": [{"uuid": uuid(n), "index": 0, "model": T4[0], "memoryMiB": T4[1],
                                    "memoryScaling": 1.0, "cores": 100, "split": 10, "numa": 0,
                                    "healthy": True, "mode": "vgpu", "mig": False,
                                    "pciBusId": "00000000:07:00.0"}]})
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": n, "annotations": {"gpuvisor.io/node-gpus": inv,
                                       "gpuvisor.io/node-heartbeat": now3339()}}})
    for name, node, owner, labels in PODS:
        out.append(pod_obj(name, node, owner, labels, uid="uid-" + name))
    out.append(KEY_SECRET)
    for name, selector, allowed in pdbs:
        out.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"selector": selector}, "status": {"disruptionsAllowed": allowed}})
    return out


class Api:
    def __init__(self, tag, pdbs=(), versions=None, graceful=False, extra=()):
        seed = os.path.join(work, tag + ".json")
        with open(seed, "w") as f:
            json.dump({"kind": "List", "items": seed_objects(pdbs) + list(extra)}, f)
        self.p = gvtest.Proc([gvtest.PY, FAKE_API, "--port", "0", "--seed", seed]
                             + (["--graceful-pod-deletion"] if graceful else []), stdin=False,
                             log=os.path.join(work, tag + ".api.log"))
        self.url = self.p.expect(lambda ln: ln.startswith("READY "), timeout=30).split()[1]
        if versions:
            http("POST", self.url + "/_fake/policy-versions?v=" + versions)

    def pods(self):
        return {p["metadata"]["name"]: p for p in
                json.loads(http("GET", self.url + "/api/v1/pods")[1])["items"]}

    def stats(self):
        return json.loads(http("GET", self.url + "/_fake/stats")[1])

    def stop(self):
        self.p.stop()


class Cluster(threading.Thread):
    """The ReplicaSet controller and the scheduler, as stand-ins: a web pod that
    goes gets a replacement "<name>-r"; place(name) says where it goes (a node,
    or None: not yet, as while the scheduler restarts)."""

    def __init__(self, api, place, on_evict=None, key=KEY):
        super().__init__(daemon=True)
        self.api, self.place, self.on_evict, self.key = api, place, on_evict, key
        self.stop_ev = threading.Event()
        self.replaced = set()

    def run(self):
        while not self.stop_ev.is_set():
            pods = self.api.pods()
            for name, node, owner, labels in PODS:
                # a terminating pod is gone for its controller: it starts the replacement
                going = name not in pods or "deletionTimestamp" in pods[name]["metadata"]
                if owner == "ReplicaSet" and going and name not in self.replaced:
                    self.replaced.add(name)
                    if self.on_evict:
                        self.on_evict(name)
                    r = pod_obj(name + "-r", None, owner, labels)
                    http("POST", self.api.url + "/api/v1/namespaces/default/pods", r)
            for name in list(self.replaced):
                rp = pods.get(name + "-r")
                if rp is None or rp["spec"].get("nodeName"):
                    continue
                node = self.place(name)
                if node is None:
                    continue
                ann = {"metadata": {"annotations": placement(rp["metadata"]["uid"], node, now3339(),
                                                             key=self.key)}}
                base = self.api.url + "/api/v1/namespaces/default/pods/" + name + "-r"
                req_patch(base, ann)
                http("POST", base + "/binding", {"kind": "Binding", "target": {"kind": "Node", "name": node}})
                self.placed_at = time.time()
            # the kubelet confirms terminations 2 s after the replacement is placed
            if getattr(self, "placed_at", None) and time.time() - self.placed_at > 2:
                http("POST", self.api.url + "/_fake/finish-deletions")
            time.sleep(0.1)

    def stop(self):
        self.stop_ev.set()
        self.join(5)


def req_patch(url, body):
    import urllib.request
    r = urllib.request.Request(url, data=json.dumps(body).encode(), method="PATCH")
    r.add_header("Content-Type", "application/merge-patch+json")
    urllib.request.urlopen(r, timeout=10).read()


def KEYFILE_OK():
    """A file holding the scheduler's key."""
    path = os.path.join(work, "placement-ok.key")
    with open(path, "wb") as f:
        f.write(KEY + b"\n")
    return path


def run(api, *args, timeout=120):
    e = dict(os.environ, HOME=work)
    e.pop("KUBECONFIG", None)
    r = subprocess.run([BIN, "-s", api.url, "defrag", "--heartbeat-timeout", "1800"] + list(args),
                       capture_output=True, env=e, timeout=timeout)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def plan_of(api, *args):
    rc, out, err = run(api, "-o", "json", *args)
    return rc, (json.loads(out) if rc == 0 and out.strip() else {}), err


def idle_after(moves):
    """Idle GPUs once the moves are made, computed from the cluster here."""
    on = {n: 0 for n in NODES}
    for name, node, _, _ in PODS:
        on[node] += 1
    for m in moves:
        on[m["from"]["node"]] -= 1
        on[m["to"]["node"]] += 1
    return sum(1 for n in NODES if on[n] == 0)


# ---- planning ------------------------------------------------------------
api = Api("plan")
try:
    rc, doc, err = plan_of(api)
    moves = doc.get("moves", [])
    moved = {m["pod"] for m in moves}
    t.ok(rc == 0 and moved == {"web-1", "web-2"}, "plan moves only the controller-owned web pods "
         "(not the pod without a controller, not the DaemonSet's)", (rc, moved, err))
    t.ok(rc == 0 and doc["before"]["idleGPUs"] == 0 and doc["after"]["idleGPUs"] == idle_after(moves) == 2
         and all(m["to"]["node"] != m["from"]["node"] for m in moves),
         "plan: each move lands on another used GPU, freeing 2 whole GPUs", doc)
    t.ok(doc.get("pods") == {"total": 4, "movable": 2, "noController": 1, "daemonSet": 1,
                             "severalBudgets": 0}, "plan counts why pods may not move", doc.get("pods"))
    t.ok(doc["after"]["fragmentation"]["ratio"] <= doc["before"]["fragmentation"]["ratio"],
         "plan: fragmentation does not grow", (doc["before"], doc["after"]))
    rc, doc1, err = plan_of(api, "--max-moves", "1")
    t.ok(rc == 0 and len(doc1["moves"]) == 1 and doc1["after"]["idleGPUs"] == 1, "--max-moves 1: one move, one GPU", doc1)
    rc, out, err = run(api)
    t.ok(rc == 0 and "idle GPUs:            0 -> 2" in out and "web-1" in out and "solo" not in out.split("idle GPUs")[0],
         "table output: the moves and the gain", out + err)
    rc, out, err = run(api, "--max-moves", "x")
    t.ok(rc == 2 and "--max-moves" in err, "bad --max-moves is a usage error", (rc, err))
    rc, out, err = run(api, "extra")
    t.ok(rc == 2 and "unexpected argument 'extra'" in err, "stray argument is a usage error", (rc, err))
    st = api.stats()
    t.ok(not any(k.endswith("/eviction") for k in st), "planning never evicts", st)
finally:
    api.stop()

# Why pods may not move, counted apart: a mirror pod (owned by its Node) comes
# back where it was, as a DaemonSet's does; an owner that is not the
# controller, or none at all, gives no replacement.
mirror = pod_obj("static-1", "gpu-b", "Node", {"app": "static"}, uid="uid-static-1")
helper = pod_obj("helper", "gpu-a", "ReplicaSet", {"app": "helper"}, uid="uid-helper")
helper["metadata"]["ownerReferences"][0]["controller"] = False
batch = pod_obj("batch", "gpu-a", None, {"app": "batch"}, uid="uid-batch")
api = Api("plan-owners", extra=[mirror, helper, batch])
try:
    rc, doc, err = plan_of(api)
    t.ok(rc == 0 and doc.get("pods") == {"total": 7, "movable": 2, "noController": 3, "daemonSet": 2,
                                         "severalBudgets": 0},
         "plan counts mirror pods with DaemonSets, non-controller owners with the unowned", (rc, doc.get("pods"), err))
    t.ok(rc == 0 and {m["pod"] for m in doc.get("moves", [])} <= {"web-1", "web-2"},
         "plan moves none of them", doc.get("moves"))
finally:
    api.stop()

# ---- disruption budgets ----------------------------------------------------
for versions in ("v1,v1beta1", "v1beta1"):
    api = Api("pdb-" + versions.replace(",", "-"), pdbs=[("web", {"matchLabels": {"app": "web"}}, 1)],
              versions=versions)
    try:
        rc, doc, err = plan_of(api)
        t.ok(rc == 0 and len(doc["moves"]) == 1 and doc["disruptionBudgetAPI"] == versions.split(",")[0],
             "PDB allowing 1 disruption (read through policy/%s): one move" % versions.split(",")[0], (doc, err))
    finally:
        api.stop()
# an empty selector: every pod of the namespace in policy/v1, none in v1beta1;
# no selector at all (null): none in either (LabelSelectorAsSelector(nil))
for versions, sel, want in (("v1", {}, 0), ("v1beta1", {}, 2), ("v1", None, 2)):
    api = Api("pdb-empty-%s-%s" % (versions, sel is None), pdbs=[("all", sel, 0)], versions=versions)
    try:
        rc, doc, err = plan_of(api)
        t.ok(rc == 0 and len(doc["moves"]) == want,
             "%s PDB selector under policy/%s: %d moves" % ("empty" if sel is not None else "null",
                                                            versions, want), (doc, err))
    finally:
        api.stop()
api = Api("pdb-two", pdbs=[("a", {"matchLabels": {"app": "web"}}, 5),
                           ("b", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, 5)])
try:
    rc, doc, err = plan_of(api)
    t.ok(rc == 0 and doc["moves"] == [] and doc["pods"]["severalBudgets"] == 2,
         "pods under two PDBs are not moved (the Eviction API refuses them)", (doc, err))
finally:
    api.stop()


# ---- --apply ---------------------------------------------------------------
def apply_scenario(tag, place, *args, on_evict=None, pdbs=(), before=None, graceful=False, extra=(),
                   key=KEY):
    api = Api(tag, pdbs=pdbs, graceful=graceful, extra=extra)
    try:
        rc, doc, err = plan_of(api, *args)
        planned = {m["pod"]: m["to"]["node"] for m in doc.get("moves", [])}
        planned["_first"] = doc["moves"][0]["pod"] if doc.get("moves") else None
        if before:
            before(api)
        c = Cluster(api, lambda name: place(name, planned), on_evict=on_evict and (lambda n: on_evict(api, n)),
                    key=key)
        c.start()
        try:
            rc, out, err = run(api, "--apply", "--timeout", "10", *args)
        finally:
            c.stop()
        return rc, out, err, api.pods(), api.stats(), planned, api
    finally:
        api.stop()


rc, out, err, pods, st, planned, _ = apply_scenario("apply-ok", lambda n, pl: pl.get(n),
                                                     pdbs=[("web", {"matchLabels": {"app": "web"}}, 2)])
t.ok(rc == 0 and "applied 2 moves" in out and "web-1" not in pods and "web-2" not in pods
     and pods["web-1-r"]["spec"]["nodeName"] == planned["web-1"]
     and pods["web-2-r"]["spec"]["nodeName"] == planned["web-2"],
     "--apply: both pods evicted, replacements placed as planned", out + err)
t.ok(st.get("POST /api/v1/namespaces/default/pods/web-1/eviction") == 1 and
     not any(k.startswith("DELETE") for k in st), "--apply evicts through the Eviction API only, once per move", st)

# graceful termination: the replacement is placed while the evicted pod still
# terminates; apply waits for it to go before checking the gain and moving on
rc, out, err, pods, st, planned, _ = apply_scenario("apply-graceful", lambda n, pl: pl.get(n), graceful=True)
t.ok(rc == 0 and "applied 2 moves" in out and "web-1" not in pods and "web-2" not in pods,
     "evicted pods that terminate gracefully: replacement placed first, apply waits for the old pod", out + err)

# a PDB refuses (429): stop at once, no retries, nothing else evicted
rc, out, err, pods, st, planned, _ = apply_scenario(
    "apply-429", lambda n, pl: pl.get(n),
    before=lambda api: http("POST", api.url + "/_fake/refuse-evictions?count=1"))
evs = {k: v for k, v in st.items() if k.endswith("/eviction")}
t.ok(rc == 5 and "HTTP 429" in out and "stopped after 0 of 2 moves" in out and "web-1" in pods and "web-2" in pods,
     "eviction refused by a PDB (429): stop, nothing evicted", out + err)
t.ok(sum(evs.values()) == 1, "429 is not retried (one eviction request in all)", evs)


# a pod that changes under the plan: web-2 is replaced (new uid) when web-1 goes
def swap_other(api, name):
    other = {"web-1": "web-2", "web-2": "web-1"}[name]
    node = NODE_OF[other]
    http("DELETE", api.url + "/api/v1/namespaces/default/pods/" + other)
    http("POST", api.url + "/api/v1/namespaces/default/pods", pod_obj(other, node, None, {"app": "web"}))
    sign_again(api, other, node)


def sign_again(api, name, node):
    """Signs a pod created by POST over the uid the API server gave it."""
    uid = api.pods()[name]["metadata"]["uid"]
    req_patch(api.url + "/api/v1/namespaces/default/pods/" + name,
              {"metadata": {"annotations": placement(uid, node, now3339(-600))}})


rc, out, err, pods, st, planned, _ = apply_scenario("apply-changed", lambda n, pl: pl.get(n), on_evict=swap_other)
second = ({"web-1", "web-2"} - {planned["_first"]}).pop() if planned["_first"] else "?"
t.ok(rc == 5 and "another pod now" in out and "stopped after 1 of 2 moves" in out
     and not st.get("POST /api/v1/namespaces/default/pods/%s/eviction" % second),
     "a pod that changed since the plan is not evicted: stop", out + err)

# the scheduler restarts mid-plan: web-1's replacement waits 3 s, then lands as planned
t0 = [None]


def late(name, pl):
    t0[0] = t0[0] or time.time()
    return pl.get(name) if time.time() - t0[0] > 3 else None


rc, out, err, pods, st, planned, _ = apply_scenario("apply-restart", late)
t.ok(rc == 0 and "applied 2 moves" in out, "scheduler restart mid-plan: apply waits for the replacement and goes on", out + err)


# the restarted scheduler puts the replacement elsewhere: stop there
def elsewhere(name, pl):
    if name != pl["_first"]:
        return pl.get(name)
    home = NODE_OF[name]
    return home  # back where it was: the plan never says that (it would gain nothing)


rc, out, err, pods, st, planned, _ = apply_scenario("apply-surprise", elsewhere)
evs = [k for k in st if k.endswith("/eviction")]
t.ok(rc == 5 and "was placed on %s" % NODE_OF.get(planned["_first"], "?") in out
     and "stopped after 0 of 2 moves" in out and len(evs) == 1,
     "replacement placed elsewhere than planned: stop before the next eviction", out + err)

# a stranger takes the GPU the first move freed (another scheduler, a pod
# bound by hand): the replacement lands as planned but the GPU is not idle
def stranger(api, name):
    home = NODE_OF[name]
    http("POST", api.url + "/api/v1/namespaces/default/pods",
         pod_obj("stranger", home, None, {"app": "stranger"}, uid="uid-stranger"))
    sign_again(api, "stranger", home)


rc, out, err, pods, st, planned, _ = apply_scenario("apply-stranger", lambda n, pl: pl.get(n), on_evict=stranger)
evs = [k for k in st if k.endswith("/eviction")]
t.ok(rc == 5 and "0 GPUs are idle, the plan said 1" in out and len(evs) == 1,
     "the freed GPU taken by another pod: the gain is not there, stop before the next eviction", out + err)


# budgets that cannot be read (RBAC without poddisruptionbudgets): no plan,
# never one that ignores them
api = Api("plan-pdb-forbidden", pdbs=[("web", {"matchLabels": {"app": "web"}}, 0)])
try:
    http("POST", api.url + "/_fake/forbid?resource=poddisruptionbudgets&verb=list")
    rc, out, err = run(api)
    t.ok(rc != 0 and "moves:" not in out and "poddisruptionbudgets" in err.lower(),
         "PDBs forbidden: defrag fails with the reason, plans nothing", (rc, out, err))
finally:
    api.stop()


# a pending pod asking a whole GPU: the first move lets it fit, and --apply checks
# that it does (it stays pending here: nothing schedules it)
def whole_gpu_pod(name):
    p = pod_obj(name, None, None, {"app": name}, uid="uid-" + name)
    p["spec"]["containers"][0]["resources"]["limits"].update(
        {"nvidia.com/gpumem": str(T4[1]), "nvidia.com/gpucores": "100"})
    return p


# a pending pod asking no GPU and one whose GPU request is not valid are not
# the plan's pending pods (the scheduler extender never places them)
cpu_pod = pod_obj("cpu-only", None, None, {"app": "cpu"}, uid="uid-cpu-only")
cpu_pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
bad_pod = pod_obj("bad-gpu", None, None, {"app": "bad"}, uid="uid-bad-gpu")
bad_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
api = Api("plan-pending", extra=[whole_gpu_pod("big"), cpu_pod, bad_pod])
try:
    rc, doc, err = plan_of(api)
    t.ok(rc == 0 and doc["before"]["pending"] == 1 and doc["before"]["pendingFit"] == 0
         and doc["after"]["pendingFit"] == 1 and doc["moves"][0]["pendingFitAfter"] == 1,
         "plan with a pending whole-GPU pod: the first move lets it fit", doc)
finally:
    api.stop()
rc, out, err, pods, st, planned, _ = apply_scenario("apply-pending", lambda n, pl: pl.get(n),
                                                     extra=[whole_gpu_pod("big")])
t.ok(rc == 0 and "applied 2 moves" in out and "big" in pods and not pods["big"]["spec"].get("nodeName"),
     "--apply with a pending pod: the move is made and the pod fits as planned (no surprise)", out + err)

# never placed: stop after the timeout
rc, out, err, pods, st, planned, _ = apply_scenario("apply-timeout", lambda n, pl: None)
t.ok(rc == 5 and "no replacement was placed within 10s" in out, "replacement never placed: stop at the timeout", out + err)

# ---- placements a tenant forged ------------------------------------------
# A tenant patches its own pods: one claims gpu-a's GPU with no signature,
# one gpu-b's with a signature under a key that is not the scheduler's.  The
# scheduler and the agents ignore both; so must the plan.
OTHER_KEY = b"not-the-scheduler-key-0123456789abcdef0123456789"
unsigned = pod_obj("forged-unsigned", "gpu-a", "ReplicaSet", {"app": "tenant"}, uid="uid-forged-unsigned")
del unsigned["metadata"]["annotations"]["gpuvisor.io/assignment-sig"]
wrongkey = pod_obj("forged-wrong-key", "gpu-b", "ReplicaSet", {"app": "tenant"}, uid="uid-forged-wrong-key")
wrongkey["metadata"]["annotations"] = placement("uid-forged-wrong-key", "gpu-b", now3339(-60), key=OTHER_KEY)
bad_secrets = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": n, "namespace": "gpuvisor-system"},
                "data": d} for n, d in (("not-base64", {"key": "!!not base64!!"}), ("no-key", {"other": "eA=="}),
                                         ("short-key", {"key": base64.b64encode(b"short\n").decode()}),
                                         ("empty-key", {"key": ""}),
                                         # 64 KiB of base64 at most: 49,152 bytes of key file
                                         ("big-key", {"key": base64.b64encode(b"k" * 49151 + b"\n").decode()}),
                                         ("huge-key", {"key": base64.b64encode(b"k" * 49152 + b"\n").decode()}))]
api = Api("plan-forged", extra=[unsigned, wrongkey] + bad_secrets)
try:
    rc, doc, err = plan_of(api)
    unv = {u["pod"]: u["reason"] for u in doc.get("unverified", [])}
    t.ok(rc == 0 and doc.get("placements", {}).get("verified") is True
         and doc["placements"].get("key") == "Secret gpuvisor-system/gpuvisor-placement-key",
         "the key is read from the gpuvisor-placement-key Secret", (rc, doc.get("placements"), err))
    t.ok(set(unv) == {"forged-unsigned", "forged-wrong-key"} and "not signed" in unv["forged-unsigned"]
         and "does not match" in unv["forged-wrong-key"],
         "forged placements are listed as not verifying, with the reason", unv)
    t.ok(doc.get("pods", {}).get("total") == 4 and doc["before"]["idleGPUs"] == 0
         and {m["pod"] for m in doc.get("moves", [])} == {"web-1", "web-2"} and doc["after"]["idleGPUs"] == 2,
         "forged placements count for nothing: the plan is the one without them", doc)
    # inspect reads the same cluster: the forged placements are listed, not counted
    e = dict(os.environ, HOME=work)
    e.pop("KUBECONFIG", None)
    r = subprocess.run([BIN, "-s", api.url, "inspect", "-o", "json", "--heartbeat-timeout", "1800"],
                       capture_output=True, env=e, timeout=60)
    idoc = json.loads(r.stdout) if r.returncode == 0 else {}
    used = {g["uuid"]: g["tasks"] for n in idoc.get("nodes", []) for g in n["gpus"]}
    t.ok(r.returncode == 0 and idoc["totals"]["pods"] == 4 and used == {uuid(n): 1 for n in NODES}
         and {u["pod"] for u in idoc["unverified"]} == {"forged-unsigned", "forged-wrong-key"}
         and idoc["placements"]["verified"] is True,
         "inspect with the key: forged placements listed under unverified, no GPU counts them",
         (idoc.get("totals"), used, r.stderr))
    r = subprocess.run([BIN, "-s", api.url, "inspect", "--heartbeat-timeout", "1800"],
                       capture_output=True, env=e, timeout=60)
    tail = r.stdout.decode().split("Placements that do not verify")[-1]
    t.ok(r.returncode == 0 and "default/forged-wrong-key" in tail and "gpu-b" in tail and "does not match" in tail,
         "inspect's table names them, with node and reason", r.stdout.decode())
    rc, out, err = run(api)
    t.ok(rc == 0 and "placements that do not verify (not counted, never moved):" in out
         and "default/forged-unsigned: placement is not signed" in out and "warning" not in err,
         "table output names the placements that do not verify", out + err)
    for name, why in (("not-base64", "is not base64"), ("no-key", 'has no data "key"'),
                      ("short-key", "at least 32"), ("empty-key", 'has no data "key"'),
                      ("huge-key", "is over 64 KiB")):
        rc, doc, err = plan_of(api, "--placement-key-secret", "gpuvisor-system/" + name)
        t.ok(rc == 0 and doc["placements"]["verified"] is False and why in doc["placements"]["key"]
             and "not verified" in err, "a Secret whose key is unusable (%s): unverified, and why" % name,
             (doc.get("placements"), err))
    rc, doc, err = plan_of(api, "--placement-key-secret", "gpuvisor-system/big-key")
    t.ok(rc == 0 and doc["placements"] == {"verified": True, "key": "Secret gpuvisor-system/big-key"}
         and doc["pods"]["total"] == 0, "a key of 64 KiB of base64 is read (and verifies nothing here)",
         (doc.get("placements"), err))
    # no key at hand (a viewer): plan on placements as written, and say so
    http("POST", api.url + "/_fake/forbid?resource=secrets&verb=get")
    rc, doc, err = plan_of(api)
    t.ok(rc == 0 and doc["placements"]["verified"] is False and "HTTP 403" in doc["placements"]["key"]
         and "not verified" in err and doc["pods"]["total"] == 6 and doc["unverified"] == [],
         "Secret forbidden: the plan reads placements as written and warns", (doc.get("placements"), err))
    rc, doc, err = plan_of(api, "--placement-key-secret", "")
    t.ok(rc == 0 and doc["placements"] == {"verified": False, "key": 'no key asked for (--placement-key-secret "")'}
         and "not verified" in err, '--placement-key-secret "": no Secret read, unverified, and said', (doc, err))
    rc, out, err = run(api, "--apply", "--timeout", "1")
    st = api.stats()
    t.ok(rc == 2 and "cannot be verified" in err and "--trust-annotations" in err
         and not any(k.endswith("/eviction") for k in st),
         "Secret forbidden: --apply refuses to evict on unverified placements", (rc, err))
    kf = os.path.join(work, "placement.key")
    with open(kf, "wb") as f:
        f.write(b"# the Secret's key\n" + KEY + b"\n")
    rc, doc, err = plan_of(api, "--placement-key-file", kf)
    t.ok(rc == 0 and doc["placements"] == {"verified": True, "key": "file " + kf}
         and doc["pods"]["total"] == 4 and len(doc["unverified"]) == 2 and "warning" not in err,
         "--placement-key-file verifies without the Secret", (doc.get("placements"), err))
    with open(kf, "wb") as f:
        f.write(OTHER_KEY + b"\n")
    rc, doc, err = plan_of(api, "--placement-key-file", kf)
    t.ok(rc == 0 and doc["pods"]["total"] == 1 and {u["pod"] for u in doc["unverified"]}
         == {"solo", "agent", "web-1", "web-2", "forged-unsigned"} and doc["moves"] == [],
         "a key that is not the scheduler's verifies only what it signed", doc)
    rc, out, err = run(api, "--placement-key-file", os.path.join(work, "missing.key"))
    t.ok(rc == 2 and "missing.key" in err, "an unreadable --placement-key-file is a usage error", (rc, err))
    with open(kf, "wb") as f:
        f.write(b"short\n")
    rc, out, err = run(api, "--placement-key-file", kf)
    t.ok(rc == 2 and "at least 32" in err, "a key file with a short key is refused, as the scheduler refuses it",
         (rc, err))
    # NAMESPACE/NAME as the API names things (DNS-1123: a-z, 0-9, '-', '.'; 63 + 1 + 253
    # characters at most): nothing else reaches a request path
    for ref in ("gpuvisor-system/../../x", "gpuvisor-system/a_b", "gpuvisor-system/Key", "gpuvisor-system/a b",
                "gpuvisor-system/a?b", "gpuvisor-system/", "/key", "key", "-ns/key", "n" * 64 + "/key",
                "n" * 63 + "/" + "k" * 254):
        rc, out, err = run(api, "--placement-key-secret", ref)
        t.ok(rc == 2 and "not NAMESPACE/NAME" in err, "--placement-key-secret %r is refused" % ref[:40], (rc, err))
    for ref in ("gpuvisor-system/key.v0-z9", "n" * 63 + "/" + "k" * 253):
        rc, doc, err = plan_of(api, "--placement-key-secret", ref)
        t.ok(rc == 0 and doc["placements"]["verified"] is False
             and doc["placements"]["key"].startswith("cannot read Secret %s: GET /api/v1/namespaces/" % ref),
             "--placement-key-secret %r is a name the API may hold (looked up)" % ref[:40],
             (rc, doc.get("placements"), err))
    # the upgrade window: unsigned placements of pods created before the
    # scheduler's acceptUnsignedPlacementsBefore count (the stand-in created them just now)
    rc, doc, err = plan_of(api, "--placement-key-file", KEYFILE_OK(),
                           "--accept-unsigned-placements-before", now3339(3600))
    t.ok(rc == 0 and {u["pod"] for u in doc["unverified"]} == {"forged-wrong-key"} and doc["pods"]["total"] == 5,
         "--accept-unsigned-placements-before: unsigned placements of older pods count, wrongly signed ones never", doc)
    rc, doc, err = plan_of(api, "--placement-key-file", KEYFILE_OK(),
                           "--accept-unsigned-placements-before", now3339(-3600))
    t.ok(rc == 0 and len(doc["unverified"]) == 2, "--accept-unsigned-placements-before in the past: no window for these pods", doc)
    rc, out, err = run(api, "--accept-unsigned-placements-before", "yesterday")
    t.ok(rc == 2 and "--accept-unsigned-placements-before" in err, "a bad --accept-unsigned-placements-before is a usage error", (rc, err))
finally:
    api.stop()

# a pending pod whose forged placement names a node: the scheduler ignores the
# placement and will place the pod afresh, so it is one of the plan's pending pods
big = whole_gpu_pod("big-forged")
big["metadata"]["annotations"] = placement("uid-big-forged", "gpu-c", now3339(-60), key=OTHER_KEY)
api = Api("plan-forged-pending", extra=[big])
try:
    rc, doc, err = plan_of(api)
    t.ok(rc == 0 and [u["pod"] for u in doc.get("unverified", [])] == ["big-forged"]
         and doc["before"]["pending"] == 1 and doc["after"]["pendingFit"] == 1,
         "an unbound pod with a forged placement is pending for the plan, as for the scheduler", doc)
finally:
    api.stop()

# --trust-annotations: the admin's explicit choice without a key
rc, out, err, pods, st, planned, _ = apply_scenario(
    "apply-trusted", lambda n, pl: pl.get(n), "--trust-annotations",
    before=lambda api: http("POST", api.url + "/_fake/forbid?resource=secrets&verb=get"))
t.ok(rc == 0 and "applied 2 moves" in out, "--trust-annotations: --apply runs on placements as written", out + err)

# a replacement whose placement does not verify (a tenant's pod posing as it,
# or a placement that is not the scheduler's): stop before the next eviction
rc, out, err, pods, st, planned, _ = apply_scenario("apply-forged-replacement", lambda n, pl: pl.get(n),
                                                     key=OTHER_KEY)
evs = [k for k in st if k.endswith("/eviction")]
t.ok(rc == 5 and "carries a placement that does not verify" in out and "stopped after 0 of 2 moves" in out
     and len(evs) == 1, "replacement with a placement that does not verify: stop", out + err)
t.done()
