#!/usr/bin/python3
"""kubectl-gpuvisor (the `kubectl gpuvisor` plugin) against the
kube-apiserver stand-in seeded with the known cluster
(tests/dashboard/cluster_fixture.py) and node-agent stand-ins serving
/metrics in the agent's format, reached through the stand-in's pod proxy.

Golden outputs live in tests/kubectl/golden/ (GV_UPDATE_GOLDEN=1 rewrites
them; review the diff).  Structured outputs (-o json / yaml) are checked
against figures computed from the fixture, not against the program."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dashboard"))
import agent_standin  # noqa: E402
import obs_stand  # noqa: E402
from obs_stand import cluster_fixture, gvtest  # noqa: E402

t = gvtest.Tap()
BIN = os.path.join(gvtest.BUILD, "bin", "kubectl-gpuvisor")
if not os.path.exists(BIN):
    t.skip("kubectl-gpuvisor", "not built")
    t.done()
try:
    import yaml
except ImportError:
    yaml = None
GOLDEN = os.path.join(HERE, "golden")
UPDATE = os.environ.get("GV_UPDATE_GOLDEN") == "1"
# Heartbeats in the fixture are 5 s (live) and 3600 s (stale) old: a 1800 s
# timeout keeps the states whatever the machine's load.
HB = ["--heartbeat-timeout", "1800"]

MIB = agent_standin.MIB
work = gvtest.scratch("kc")


agents = agent_standin.start_agents(skip=("gpu-h100-1",))  # the stale node's agent is gone
# the stale node's agent pod still exists but answers nothing (port 1 refuses)
agents_seed = dict(agents)
agents_seed["gpu-h100-1"] = ("127.0.0.1", 1)


def run(*args, env=None):
    e = dict(os.environ)
    e.pop("KUBECONFIG", None)
    e["HOME"] = work  # no ~/.kube/config of the machine's user
    if env:
        e.update(env)
    r = subprocess.run([BIN] + list(args), capture_output=True, env=e, timeout=120)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def golden(name, text):
    path = os.path.join(GOLDEN, name)
    if UPDATE:
        with open(path, "w") as f:
            f.write(text)
    want = open(path).read() if os.path.exists(path) else None
    if want == text:
        return True, None
    import difflib
    return False, "".join(difflib.unified_diff((want or "").splitlines(True), text.splitlines(True),
                                               "golden/" + name, "got"))


# a tenant's pod posing as gpuvisor-node (the agents' label, a port named
# metrics) in its own namespace, its /metrics claiming gpu-a100-1 idle at 99 %
impostor = agent_standin.impostor_pod(*agent_standin.start_impostor())
stand = obs_stand.Stand(work, agents=agents_seed, extra_seed=[impostor])
S = ["-s", stand.api_url]
try:
    # ---- inspect ------------------------------------------------------------
    rc, out, err = run(*S, "inspect", "-d", *HB)
    ok, diff = golden("inspect-d.txt", out)
    t.ok(rc == 0 and ok, "inspect -d matches golden/inspect-d.txt", diff or err)
    rc, out, err = run(*S, "inspect", "gpu-t4-1", "-o", "wide", *HB)
    ok, diff = golden("inspect-node-wide.txt", out)
    t.ok(rc == 0 and ok, "inspect NODE -o wide matches golden/inspect-node-wide.txt", diff or err)
    rc, out, err = run(*S, "inspect", "-d", "-n", "inference", "gpu-a100-1", *HB)
    ok, diff = golden("inspect-d-namespace.txt", out)
    t.ok(rc == 0 and ok, "inspect -d -n NS lists only that namespace's pods", diff or err)

    rc, out, err = run(*S, "inspect", "-o", "json", *HB)
    doc = json.loads(out) if rc == 0 else {}
    exp = cluster_fixture.expected()
    gpus = {g["uuid"]: g for n in doc.get("nodes", []) for g in n["gpus"]}
    bad = [u for u, g in gpus.items() if g["usedMemMiB"] != exp["gpu_mem"].get(u, 0)
           or g["usedCores"] != exp["gpu_cores"].get(u, 0) or g["tasks"] != exp["gpu_tasks"].get(u, 0)]
    t.ok(rc == 0 and len(gpus) == 28 and not bad, "-o json: every GPU's allocation equals the fixture's", bad or err)
    states = {n["name"]: n["state"] for n in doc.get("nodes", [])}
    t.ok(states == {"cpu-1": "no_agent", "gpu-a100-1": "ready", "gpu-a100-2": "ready",
                    "gpu-h100-1": "stale", "gpu-t4-1": "ready"}, "-o json: node states", states)
    tot = doc.get("totals", {})
    t.ok(tot.get("usedMemMiB") == sum(exp["gpu_mem"].values()) and tot.get("pods") == len(cluster_fixture.PODS),
         "-o json: cluster totals", tot)
    fr = doc.get("fragmentation", {})
    t.ok(0 < fr.get("ratio", 0) < 1 and abs(fr["fragmentedGPUs"] - sum(n["fragmentedGPUs"] for n in doc["nodes"])) < 1e-6,
         "-o json: fragmentation is the engine's measure, the sum of its nodes'", fr)
    pods_on = {(p["namespace"], p["pod"], p["container"]) for g in gpus.values() for p in g["pods"]}
    t.ok(("inference", "llama-serve-7b", "sidecar") in pods_on and len(pods_on) == 13,
         "-o json: pods on each GPU, per container", sorted(pods_on))
    if yaml is None:
        t.skip("-o yaml", "python3-yaml not installed")
    else:
        rc, out, err = run(*S, "inspect", "-o", "yaml", *HB)
        y = yaml.safe_load(out) if rc == 0 else None
        for n in (y or {}).get("nodes", []) + doc.get("nodes", []):
            n.pop("reason", None)  # heartbeat ages move between the two runs
        t.ok(y == doc, "-o yaml is the same document as -o json (YAML parser)", err)
    # through kubectl itself: it finds kubectl-gpuvisor on PATH and passes the arguments on
    import shutil
    if shutil.which("kubectl") is None:
        t.skip("kubectl gpuvisor through kubectl", "kubectl not installed")
    else:
        e = dict(os.environ, PATH=os.path.dirname(BIN) + os.pathsep + os.environ.get("PATH", ""),
                 HOME=work)
        e.pop("KUBECONFIG", None)
        r = subprocess.run(["kubectl", "gpuvisor", "inspect", "-d", "-s", stand.api_url] + HB,
                           capture_output=True, env=e, timeout=120)
        ok, diff = golden("inspect-d.txt", r.stdout.decode())
        t.ok(r.returncode == 0 and ok, "`kubectl gpuvisor inspect -d` (real kubectl, plugin on PATH) prints the same",
             diff or r.stderr.decode())
    rc, out, err = run(*S, "inspect", "no-such-node", *HB)
    t.ok(rc == 1 and 'node "no-such-node" not found' in err, "inspect of an unknown node: clear error", err)

    # ---- whole devices (docs/passthrough.md): the inventory's wholeDevices ----
    node_url = stand.api_url + "/api/v1/nodes/gpu-t4-1"
    code, body = obs_stand.http("GET", node_url)
    ann = json.loads(body)["metadata"]["annotations"]
    inv_before = ann["gpuvisor.io/node-gpus"]
    inv = json.loads(inv_before)
    inv["wholeDevices"] = [
        {"kind": "passthrough", "resource": "nvidia.com/TU104GL_TESLA_T4", "id": "0000:d8:00.0",
         "pciBusId": "0000:d8:00.0", "iommuGroup": "71", "healthy": True},
        {"kind": "mdev", "resource": "nvidia.com/NVIDIA_A10-4Q",
         "id": "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01", "pciBusId": "0000:d9:00.0",
         "iommuGroup": "90", "healthy": False}]
    patch = lambda text: obs_stand.http(  # noqa: E731
        "PATCH", node_url, {"metadata": {"annotations": {"gpuvisor.io/node-gpus": text}}},
        "application/merge-patch+json")[0]
    t.ok(patch(json.dumps(inv)) == 200, "wholeDevices added to gpu-t4-1's inventory (stand-in)")
    rc, out, err = run(*S, "inspect", "gpu-t4-1", "-o", "json", *HB)
    node = (json.loads(out)["nodes"] or [{}])[0] if rc == 0 else {}
    t.ok([(w["kind"], w["id"], w["healthy"]) for w in node.get("wholeDevices", [])] ==
         [("passthrough", "0000:d8:00.0", True), ("mdev", "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01", False)],
         "inspect -o json lists the node's whole devices", out + err)
    rc, out, err = run(*S, "inspect", "gpu-t4-1", "-o", "wide", *HB)
    rows = [ln.split() for ln in out.split("\nWhole devices")[0].splitlines() if "nvidia.com/" in ln]
    t.ok(rc == 0 and rows == [["passthrough", "nvidia.com/TU104GL_TESLA_T4", "whole", "0000:d8:00.0", "healthy"],
                              ["mdev", "nvidia.com/NVIDIA_A10-4Q", "whole",
                               "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01", "unhealthy"]],
         "inspect -o wide: one row per whole device", out + err)
    # a VM pod bound there holds the passthrough GPU: free/total per resource (count placement)
    vm = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vm-t4", "namespace": "default"},
          "spec": {"schedulerName": "gpuvisor-scheduler", "nodeName": "gpu-t4-1",
                   "containers": [{"name": "compute", "resources": {"limits": {"nvidia.com/TU104GL_TESLA_T4": "1"}}}]}}
    code, _ = obs_stand.http("POST", stand.api_url + "/api/v1/namespaces/default/pods", vm)
    rc, out, err = run(*S, "inspect", "gpu-t4-1", "-o", "json", *HB)
    node = (json.loads(out)["nodes"] or [{}])[0] if rc == 0 else {}
    res = {w["resource"]: (w["kind"], w["free"], w["total"], w["healthy"]) for w in node.get("wholeResources", [])}
    t.ok(code == 201 and res == {"nvidia.com/TU104GL_TESLA_T4": ("passthrough", 0, 1, 1),
                                 "nvidia.com/NVIDIA_A10-4Q": ("mdev", 0, 1, 0)},
         "inspect -o json: per whole-device resource, free (healthy minus what bound pods ask), total, healthy",
         out + err)
    rc, out, err = run(*S, "inspect", "gpu-t4-1", *HB)
    rows = [ln.split() for ln in out.splitlines()[out.splitlines().index(
        "Whole devices (MIG, passthrough, mdev; placed by count):") + 1:] if "nvidia.com/" in ln] \
        if "Whole devices (MIG, passthrough, mdev; placed by count):" in out else []
    t.ok(rc == 0 and rows == [["gpu-t4-1", "passthrough", "nvidia.com/TU104GL_TESLA_T4", "0/1", "1/1"],
                              ["mdev", "nvidia.com/NVIDIA_A10-4Q", "0/1", "0/1"]],
         "inspect: whole devices per node and resource, free/total and healthy", out + err)
    obs_stand.http("DELETE", stand.api_url + "/api/v1/namespaces/default/pods/vm-t4")
    t.ok(patch(inv_before) == 200, "inventory restored")

    # ---- top ----------------------------------------------------------------
    rc, out, err = run(*S, "top", "pods", "-A")
    ok, diff = golden("top-pods-A.txt", out)
    t.ok(rc == 0 and ok, "top pods -A (memory used first) matches golden/top-pods-A.txt", diff or err)
    t.ok("gpu-h100-1" in err and "warning" in err, "an unreachable agent is a warning, not a failure", err)
    t.ok("malformed metric line" in err, "malformed exposition lines are reported and skipped", err)
    rc, out, err = run(*S, "top", "pods", "-n", "inference", "--sort", "share")
    ok, diff = golden("top-pods-inference-share.txt", out)
    t.ok(rc == 0 and ok, "top pods -n NS --sort share matches golden", diff or err)
    rc, out, err = run(*S, "top", "gpus")
    ok, diff = golden("top-gpus.txt", out)
    t.ok(rc == 0 and ok, "top gpus (utilisation first) matches golden/top-gpus.txt", diff or err)
    rc, out, err = run(*S, "top", "nodes", "--sort", "name")
    ok, diff = golden("top-nodes-name.txt", out)
    t.ok(rc == 0 and ok, "top nodes --sort name matches golden/top-nodes-name.txt", diff or err)
    rc, out, err = run(*S, "top", "pods", "-A", "-o", "json")
    rows = json.loads(out) if rc == 0 else []
    bert = [r for r in rows if r["pod"] == "bert-finetune-0"]
    t.ok(len(bert) == 2 and all(r["memoryLimitBytes"] == 40960 * MIB and r["memoryUsedBytes"] == int(40960 * 0.9) * MIB
                                and r["shareTarget"] == 0.5 and r["shareAchieved"] == 0.25 for r in bert),
         "top -o json: used/limit bytes and achieved/target share from the agent", bert)
    ocr = [r for r in rows if r["pod"] == "ocr"]
    t.ok(len(ocr) == 1 and ocr[0]["memoryUsedBytes"] == int(12288 * 0.95) * MIB and "shareTarget" not in ocr[0],
         "top reads HAMi's names where the agent exports only those", ocr)
    rc, out, err = run(*S, "top", "pods", "--sort", "bogus")
    t.ok(rc == 2 and "--sort" in err, "unknown sort key: usage error", err)
    # the impostor is never read: the goldens above hold the real agents' figures,
    # and the plugin listed only the agents' namespace
    st = json.loads(obs_stand.http("GET", stand.api_url + "/_fake/stats")[1])
    t.ok(not any("/namespaces/ml-train/pods/gpuvisor-node" in k for k in st)
         and not any(k.startswith("GET /api/v1/pods?") and "gpuvisor-node" in k for k in st)
         and any(k.startswith("GET /api/v1/namespaces/gpuvisor-system/pods") for k in st),
         "top reads agents of the agents' namespace only: a tenant's pod with their label is not scraped",
         sorted(k for k in st if "pods" in k)[:20])
    rc, out, err = run(*S, "top", "gpus", "--agent-namespace", "ml-train")
    t.ok(rc == 0 and " 99%" in out, "--agent-namespace names where the agents are (here: the impostor's)", out + err)
    for bad in ("ML-train", "-x", "a/b", "x" * 64, ""):
        rc, out, err = run(*S, "top", "gpus", "--agent-namespace", bad)
        t.ok(rc == 2 and "not a namespace name" in err, "--agent-namespace %r: usage error" % bad[:10], err)

    # ---- connection: kubeconfig, context, namespace from the context --------
    kc = os.path.join(work, "kubeconfig")
    with open(kc, "w") as f:
        f.write("""apiVersion: v1
kind: Config
current-context: broken
clusters:
- name: dead
  cluster: {server: "http://127.0.0.1:1"}
- name: stand
  cluster: {server: "%s"}
users:
- name: u
  user: {}
contexts:
- name: broken
  context: {cluster: dead, user: u}
- name: lab
  context: {cluster: stand, user: u, namespace: ml-train}
""" % stand.api_url)
    rc, out, err = run("--kubeconfig", kc, "--context", "lab", "top", "pods")
    pods = sorted({ln.split()[1] for ln in out.splitlines()[1:] if ln.strip()})
    t.ok(rc == 0 and pods == ["bert-finetune-0", "bert-finetune-1", "resnet-ddp"],
         "--kubeconfig + --context: that cluster, pods of the context's namespace", out + err)
    rc, out, err = run("top", "pods", "-A", "--context", "lab", env={"KUBECONFIG": "/nonexistent:" + kc})
    t.ok(rc == 0 and "sweep-03" in out, "$KUBECONFIG: first existing entry used", err)
    rc, out, err = run("top", "pods", env={"KUBECONFIG": kc})
    t.ok(rc == 1 and ("127.0.0.1 port 1:" in err or "127.0.0.1:1" in err), "current-context of $KUBECONFIG used; an unreachable server is a clear error", err)
    rc, out, err = run("inspect")
    t.ok(rc == 1 and "no kubeconfig found" in err, "no kubeconfig, not in a cluster: clear error", err)

    # ---- nominated holds (issue #26): pending pods' gpuvisor.io/nominated-hold
    import time as _time

    def hold_pod(name, node, uuid, mem, until, asg_node=None):
        hold = {"node": node, "until": until, "sig": "v1." + "0" * 64,
                "assignment": "v1;node=%s;main=%s:%d:0" % (asg_node or node, uuid, mem)}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "ml-train",
                            "annotations": {"gpuvisor.io/nominated-hold": json.dumps(hold)}},
               "spec": {"schedulerName": "gpuvisor-scheduler", "priority": 1000,
                        "containers": [{"name": "main", "image": "x",
                                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
               "status": {"phase": "Pending"}}
        return obs_stand.http("POST", stand.api_url + "/api/v1/namespaces/ml-train/pods", pod)[0]

    fmt = lambda t: _time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", _time.gmtime(t))  # noqa: E731
    now = int(_time.time())
    t.ok(hold_pod("prod-infer", "gpu-a100-1", "GPU-held-0", 20480, fmt(now + 300)) in (200, 201) and
         hold_pod("lapsed", "gpu-a100-1", "GPU-held-1", 1024, fmt(now - 5)) in (200, 201),
         "pending pods with a hold and a lapsed hold created")
    rc, out, err = run(*S, "inspect", "-o", "json", *HB)
    nom = json.loads(out).get("nominated") if rc == 0 else None
    t.ok(nom is not None and len(nom) == 1 and nom[0]["namespace"] == "ml-train" and
         nom[0]["pod"] == "prod-infer" and nom[0]["node"] == "gpu-a100-1" and
         nom[0]["gpus"] == [{"container": "main", "uuid": "GPU-held-0", "memMiB": 20480, "cores": 0}] and
         nom[0]["until"] == fmt(now + 300) and 250 <= nom[0]["expiresInSeconds"] <= 300 and nom[0]["signed"],
         "inspect -o json: nominated holds (pod, node, GPUs, expiry), the lapsed one left out", out + err)
    rc, out, err = run(*S, "inspect", *HB)
    rows = [ln for ln in out.splitlines() if ln.startswith("ml-train/prod-infer")]
    t.ok(rc == 0 and "Nominated" in out and len(rows) == 1 and "gpu-a100-1" in rows[0] and
         "GPU-held-0 (20480, 0)" in rows[0] and fmt(now + 300) in rows[0] and "lapsed" not in out,
         "inspect: a Nominated table with pod, node, GPUs and expiry", out + err)
    # with the placement key, each hold is checked as the scheduler checks it:
    # prod-infer's signed here over its uid (src/contracts' HMAC, computed
    # independently), a second one carrying a signature no key made
    import hashlib
    import hmac
    key = b"plugin-test-key-0123456789abcdef0123456789abcdef"
    kf = os.path.join(work, "placement.key")
    with open(kf, "wb") as f:
        f.write(key + b"\n")
    pj = json.loads(obs_stand.http("GET", stand.api_url + "/api/v1/namespaces/ml-train/pods/prod-infer")[1])
    hold = json.loads(pj["metadata"]["annotations"]["gpuvisor.io/nominated-hold"])
    msg = b"gpuvisor.io/nominated-hold/v1\0" + b"".join(
        f.encode() + b"\0" for f in (pj["metadata"]["uid"], hold["node"], hold["until"], hold["assignment"]))
    hold["sig"] = "v1." + hmac.new(key, msg, hashlib.sha256).hexdigest()
    obs_stand.http("PATCH", stand.api_url + "/api/v1/namespaces/ml-train/pods/prod-infer",
                   {"metadata": {"annotations": {"gpuvisor.io/nominated-hold": json.dumps(hold)}}},
                   ctype="application/merge-patch+json")
    t.ok(hold_pod("bad-hold", "gpu-a100-1", "GPU-held-3", 512, fmt(now + 300)) in (200, 201),
         "a pending pod whose hold no key signed created")
    rc, out, err = run(*S, "inspect", "-o", "json", "--placement-key-file", kf, *HB)
    ver = {h["pod"]: h.get("verified") for h in json.loads(out)["nominated"]} if rc == 0 else None
    t.ok(ver == {"prod-infer": True, "bad-hold": False} and "warning" not in err,
         "inspect --placement-key-file: each hold verified or not, as the scheduler would", (ver, err))
    rc, out, err = run(*S, "inspect", "--placement-key-file", kf, *HB)
    nomtab = out.split("Nominated")[-1].split("Placements that do not verify")[0]
    rows = {ln.split()[0]: ln.split()[-1] for ln in nomtab.splitlines() if ln.startswith("ml-train/")}
    t.ok(rc == 0 and rows == {"ml-train/prod-infer": "verified", "ml-train/bad-hold": "invalid"},
         "inspect: the SIGNED column says verified or invalid with the key", out + err)
    rc, out, err = run(*S, "inspect", "-o", "json", *HB)
    t.ok(rc == 0 and all("verified" not in h for h in json.loads(out)["nominated"])
         and "placements are read as written, not verified" in err and "HTTP 404" in err,
         "without a key (no Secret): no verdict on holds, and a warning that placements are not verified",
         err)
    obs_stand.http("DELETE", stand.api_url + "/api/v1/namespaces/ml-train/pods/bad-hold")
    rc, out, err = run(*S, "inspect", "gpu-a100-2", "-o", "json", *HB)
    t.ok(rc == 0 and json.loads(out)["nominated"] == [], "inspect NODE: only that node's holds", out + err)
    # a tenant writes its own pod's hold: terminal escapes in it (OSC 52 sets
    # the clipboard, CSI 2J clears the screen, a C1 CSI, a carriage return)
    # reach the admin's table as '?', and -o json keeps the text exact
    evil = "gpu-a100-1\x1b]52;c;ZXZpbA==\x07\x1b[2J\u009b1A\rok"
    t.ok(hold_pod("forged", evil, "GPU-held-2", 512, fmt(now + 300), "gpu-a100-1") in (200, 201), "a pod with a forged hold created")
    rc, out, err = run(*S, "inspect", *HB)
    row = [ln for ln in out.splitlines() if ln.startswith("ml-train/forged")]
    t.ok(rc == 0 and len(row) == 1 and "gpu-a100-1?]52;c;ZXZpbA==??[2J?1A?ok" in row[0] and
         not any(ord(ch) < 0x20 and ch != "\n" or 0x7f <= ord(ch) <= 0x9f for ch in out),
         "inspect: control characters a tenant wrote print as '?' (no escape reaches the terminal)",
         repr(out))
    rc, out, err = run(*S, "inspect", "-o", "json", *HB)
    t.ok(rc == 0 and [h["node"] for h in json.loads(out)["nominated"] if h["pod"] == "forged"] == [evil],
         "inspect -o json: the same text exact (JSON escapes it)", out + err)
    obs_stand.http("DELETE", stand.api_url + "/api/v1/namespaces/ml-train/pods/forged")
    rc, out, err = run(*S, "inspect", "-n", "inference", "-o", "json", *HB)
    t.ok(rc == 0 and json.loads(out)["nominated"] == [], "inspect -n NS: only that namespace's holds", out + err)
    for name in ("prod-infer", "lapsed"):
        obs_stand.http("DELETE", stand.api_url + "/api/v1/namespaces/ml-train/pods/" + name)

    # ---- RBAC and "not installed" -----------------------------------------
    ctl = lambda op: obs_stand.http("POST", stand.api_url + "/_fake/" + op)[0]  # noqa: E731
    ctl("forbid?resource=nodes&verb=list")
    rc, out, err = run(*S, "inspect")
    t.ok(rc == 4 and 'cannot list resource "nodes"' in err and "gpuvisor-viewer" in err,
         "403 on nodes: exit 4, the API's message and which role grants it", err)
    ctl("forbid")
    ctl("forbid?resource=pods/proxy&verb=get")
    rc, out, err = run(*S, "top", "pods", "-A")
    t.ok(rc == 4 and "pods/proxy" in err, "403 on the agents' proxy: exit 4 with the reason", err)
    ctl("forbid")
finally:
    stand.stop()

bare = obs_stand.Stand(gvtest.scratch("kc0"), agents={})
try:
    # a cluster without gpuvisor: drop the fixture to one node without an agent
    for name, model, n, age in cluster_fixture.NODES:
        if model is not None:
            obs_stand.http("DELETE", bare.api_url + "/api/v1/nodes/" + name)
    for ns, pod, node, c in cluster_fixture.PODS:
        obs_stand.http("DELETE", bare.api_url + "/api/v1/namespaces/%s/pods/%s" % (ns, pod))
    rc, out, err = run("-s", bare.api_url, "inspect")
    t.ok(rc == 3 and "gpuvisor does not seem to be installed" in err, "not installed: exit 3, says so", err)
    rc, out, err = run("-s", bare.api_url, "top")
    t.ok(rc == 3 and "no gpuvisor-node agent pods" in err, "top without agents: exit 3, says so", err)
finally:
    bare.stop()
t.done()
