#!/usr/bin/python3
"""End to end, with every real gpuvisor daemon and stand-ins only for what
cannot run here.

  kube-apiserver  -> tests/fakes/apiserver/fake_apiserver.py (real HTTP/JSON
                     semantics: resourceVersion, 409, watch, Binding)
  GPUs / NVML     -> the fake libnvidia-ml.so.1 (tests/fakes/nvml)
  kubelet         -> the kubelet stand-ins (tests/fakes/kubelet): grpc-go (the
                     library the kubelet uses) on node2 when Go is installed
                     (a build error is a failure; Go missing: a listed skip
                     and grpcio there too), Python grpcio on node1; each admits
                     a container as the device manager does:
                     GetPreferredAllocation, then Allocate with those IDs
  kube-scheduler  -> this script: it sends the extender the requests
                     kube-scheduler would (filter with node names, bind)

Real: gpuvisor-scheduler (extender + webhook) and one gpuvisor-node agent
per node.  A pod goes: created in the API -> filter -> bind (assignment
annotation + Binding) -> the kubelet stand-in calls Allocate on the pod's
node -> the environment and mounts each container receives are checked.

The node fixtures come from tests/node/agent.py (the node agent's own test
harness), so both suites start the agent the same way.
"""
import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "node"))
try:
    import agent  # noqa: E402
    import gvtest  # noqa: E402
except ImportError as e:
    print("1..1\nok 1 # SKIP node agent test harness (tests/node/agent.py) missing: %s" % e)
    sys.exit(0)

t = gvtest.Tap()
SCHED_BIN = os.path.join(gvtest.BUILD, "bin", "gpuvisor-scheduler")
if not agent.have_fake_nvml():
    t.skip("gpuvisor end to end", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()
if not os.path.exists(SCHED_BIN) or not os.path.exists(agent.NODE_BIN):
    t.skip("gpuvisor end to end", "gpuvisor-scheduler or gpuvisor-node not built")
    t.done()

# node1: 2 x A100 40 GB (the node harness's GPUs); node2: 2 x T4 16 GB and an L4 24 GB
# (cards of different sizes on one node).
NODE1_GPUS = agent.GPUS
NODE2_GPUS = ["GPU-22222222-3333-4444-8555-000000000000", "GPU-22222222-3333-4444-8555-000000000001",
              "GPU-22222222-3333-4444-8555-000000000002"]
NODE2_MODELS = [("Tesla T4", "16g"), ("Tesla T4", "16g"), ("NVIDIA L4", "24g")]
HEARTBEAT_TIMEOUT = 3


class Scheduler:
    """The real gpuvisor-scheduler, pointed at the fake API server."""

    def __init__(self, api_url, workdir, config):
        self.dir = workdir
        self.api_url = api_url
        self.config = os.path.join(workdir, "scheduler.json")
        with open(self.config, "w") as f:
            json.dump(config, f)
        self.proc = None
        self.base = None
        self.n = 0

    def make_cert(self):
        """Self-signed serving certificate for the webhook (openssl)."""
        self.cert = os.path.join(self.dir, "tls.crt")
        self.key = os.path.join(self.dir, "tls.key")
        r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                            "-subj", "/CN=gpuvisor-webhook", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", self.key, "-out", self.cert], capture_output=True)
        return r.returncode == 0

    def start(self):
        self.n += 1
        ports = os.path.join(self.dir, "ports.%d" % self.n)
        self.proc = gvtest.Proc([SCHED_BIN, "--master", self.api_url, "--config", self.config,
                                 "--extender-listen", "127.0.0.1:0", "--port-file", ports,
                                 "--webhook-listen", "127.0.0.1:0", "--tls-cert-file", self.cert,
                                 "--tls-key-file", self.key, "--log-level", "debug"],
                                stdin=False, log=os.path.join(self.dir, "scheduler.%d.log" % self.n))
        ok = gvtest.wait_for(lambda: os.path.exists(ports), 10)
        lines = dict(l.split("=") for l in open(ports).read().split()) if ok else {}
        self.base = "http://127.0.0.1:%s" % lines.get("extender", "0")
        self.webhook = "https://127.0.0.1:%s/mutate" % lines.get("webhook", "0")
        gvtest.wait_for(lambda: self.get("/readyz")[0] == 200, 10)
        return ok

    def stop(self, sig=signal.SIGTERM):
        rc = self.proc.stop(sig) if self.proc else None
        self.proc = None
        return rc

    def get(self, path):
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def post(self, verb, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + "/gpuvisor/" + verb, data=data, method="POST")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode()

    def admit(self, pod):
        """AdmissionReview v1 round trip over HTTPS; returns the response."""
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "e2e", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                              "operation": "CREATE", "namespace": "default", "object": pod}}
        ctx = ssl.create_default_context(cafile=self.cert)
        req = urllib.request.Request(self.webhook, data=json.dumps(review).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return json.loads(r.read())["response"]

    def filter(self, pod, nodes):
        return self.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})

    def bind(self, pod, node):
        md = pod["metadata"]
        return self.post("bind", {"PodName": md["name"], "PodNamespace": md["namespace"],
                                  "PodUID": md["uid"], "Node": node})

    def log(self):
        try:
            return open(os.path.join(self.dir, "scheduler.%d.log" % self.n)).read()[-3000:]
        except OSError:
            return ""


PLACEMENT_KEY = None


class Cluster:
    """Two real agents on one fake API server, each with a kubelet stand-in."""

    def __init__(self):
        self.n1 = agent.Env(gpus=2, node="node1")
        # The second node reuses the first one's API server (its own is left
        # idle) and gets its own GPUs: uuids are unique in a cluster.
        self.n2 = agent.Env(gpus=2, node="node2")
        self.n2.api = self.n1.api
        code, _ = self.api.req("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                         "metadata": {"name": "node2"}})
        assert code == 201
        with open(self.n2.gpu_cfg, "w") as f:
            for i, u in enumerate(NODE2_GPUS):
                f.write('name="%s" uuid=%s memory=%s pci=0:%x:0\n' % (NODE2_MODELS[i][0], u, NODE2_MODELS[i][1],
                                                                      0x3b + i))
        self.kubelets = {}
        self.devices = {}

    @property
    def api(self):
        return self.n1.api

    def env(self, node):
        return self.n1 if node == "node1" else self.n2

    def start_node(self, node, kind="py", go_bin=None):
        e = self.env(node)
        # The real scheduler signs its placements; the agents verify them.
        e.start_agent(extra=["--placement-key-file", PLACEMENT_KEY])
        k = e.start_kubelet(kind, go_bin)
        reg = k.event("registered", timeout=10)
        ev = k.event("devices", timeout=10)
        self.kubelets[node] = k
        self.devices[node] = [d["id"] for d in ev["devices"]] if ev else []
        return reg is not None and ev is not None

    def inventory_published(self):
        for n in ("node1", "node2"):
            ann = self.api.node(n).get("metadata", {}).get("annotations") or {}
            if "gpuvisor.io/node-gpus" not in ann or "gpuvisor.io/node-heartbeat" not in ann:
                return False
        return True

    def allocate(self, node, count):
        """What the kubelet's device manager does for one container:
        GetPreferredAllocation among the devices not in use, then Allocate
        with the preferred IDs (the event has both: "ids" is what the
        kubelet records)."""
        return self.kubelets[node].cmd("admit", size=count)

    def close(self):
        self.n2.close()
        self.n1.close()


def create_pod(c, name, containers, annotations=None):
    """A pod as the webhook leaves it: schedulerName set, GPU counts present."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
            "spec": {"schedulerName": "gpuvisor-scheduler", "containers": [
                {"name": n, "image": "cuda", "resources": {"limits": lim, "requests": lim}}
                for n, lim in containers]}}
    code, obj = c.api.req("POST", "/api/v1/namespaces/default/pods", body)
    assert code == 201, (code, obj)
    return obj


def schedule(c, s, pod, nodes=("node1", "node2")):
    """filter then bind, as kube-scheduler would; returns (node, filter result)."""
    code, res = s.filter(pod, list(nodes))
    if code != 200 or not res.get("NodeNames"):
        return None, res
    node = res["NodeNames"][0]
    code, b = s.bind(pod, node)
    if code != 200 or b.get("Error"):
        return None, b
    return node, res


def tasks(s):
    """GPU tasks the scheduler counts, from its metrics."""
    code, text = s.get("/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gpuvisor_node_gpu_tasks{")) if code == 200 else -1


def delete_pods(c, s, names):
    """Pods the kubelet stand-in will not admit are deleted, so the agent's
    Allocate never has to choose among them; waits until the scheduler has
    released them."""
    before = tasks(s)
    for n in names:
        c.api.delete_pod(n)
    gvtest.wait_for(lambda: tasks(s) <= before - len(names), 5)


def apply_patch(obj, ops):
    """The JSON Patch subset the webhook emits ("add")."""
    for op in ops:
        assert op["op"] == "add", op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
        cur = obj
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        cur[parts[-1]] = op["value"]
    return obj


def envs(ev):
    return ev["resp"]["envs"] if ev and ev.get("ok") else {}


def mounts(ev):
    return {m["container_path"]: (m["host_path"], m["read_only"]) for m in ev["resp"]["mounts"]} \
        if ev and ev.get("ok") else {}


def ann(pod, key):
    return (pod.get("metadata", {}).get("annotations") or {}).get(key)


def main():
    c = Cluster()
    global PLACEMENT_KEY
    PLACEMENT_KEY = os.path.join(c.n1.dir, "placement.key")
    with open(PLACEMENT_KEY, "w") as f:
        f.write("e2e-placement-key-0123456789abcdef0123456789\n")
    s = Scheduler(c.api.url, c.n1.dir, {"nodePolicy": "binpack", "gpuPolicy": "binpack",
                                        "placementKeyFile": PLACEMENT_KEY,
                                        "heartbeatTimeoutSeconds": HEARTBEAT_TIMEOUT,
                                        "reservationTimeoutSeconds": 30})
    try:
        go_bin = gvtest.build_go_standin().report(t, "node2 with the grpc-go kubelet stand-in")
        kind2 = "go" if go_bin else "py"
        t.ok(c.start_node("node1") and c.start_node("node2", kind2, go_bin),
             "two gpuvisor-node agents registered with their kubelet stand-ins (node1: py, "
             "node2: %s)" % kind2,
             c.n1.agent_log()[-2000:] + c.n2.agent_log()[-2000:])
        t.ok(gvtest.wait_for(c.inventory_published, 10),
             "agents published inventory and heartbeat annotations", c.api.node("node2"))
        t.ok(s.make_cert(), "openssl made the webhook's serving certificate")
        t.ok(s.start(), "gpuvisor-scheduler started against the API stand-in", s.log())
        scenarios(c, s)
    finally:
        s.stop()
        c.close()
    t.done()


def hami_examples(c, s):
    """HAMi's own example manifests (tests/data/hami/pods, unchanged) on an
    empty cluster: webhook -> API -> filter -> bind -> Allocate."""
    try:
        import yaml
    except ImportError:
        t.skip("HAMi example manifests end to end", "python3-yaml missing")
        return
    root = os.path.join(HERE, "..", "data", "hami", "pods")
    cases = [("default_use.yaml", 1, {"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m", "CUDA_DEVICE_SM_LIMIT": "30"}),
             ("use_sharing_card.yaml", 1, {"CUDA_DEVICE_SM_LIMIT": "60"}),
             ("use_exclusive_card.yaml", 2, {"CUDA_DEVICE_SM_LIMIT": "100"})]
    names = []
    for f, ngpu, want in cases:
        with open(os.path.join(root, f)) as fh:
            pod = next(d for d in yaml.safe_load_all(fh) if d and d.get("kind") == "Pod")
        name = "hami-" + f.split(".")[0].replace("_", "-")
        pod["metadata"]["name"] = name
        pod["metadata"]["namespace"] = "default"
        r = s.admit(pod)
        ops = json.loads(base64.b64decode(r.get("patch", ""))) if r.get("allowed") else []
        admitted = apply_patch(json.loads(json.dumps(pod)), ops)
        code, created = c.api.req("POST", "/api/v1/namespaces/default/pods", admitted)
        names.append(name)
        node, res = schedule(c, s, created) if code == 201 else (None, created)
        e = envs(c.allocate(node, ngpu)) if node else {}
        visible = (e.get("NVIDIA_VISIBLE_DEVICES") or "").split(",")
        t.ok(r.get("allowed") and admitted["spec"].get("schedulerName") == "gpuvisor-scheduler" and
             node is not None and len(visible) == ngpu and
             all(e.get(k) == v for k, v in want.items()) and e.get("CUDA_DEVICE_MEMORY_LIMIT_0"),
             "HAMi example %s: admitted, placed on %s, Allocate answers %d GPU(s) with %s" %
             (f, node, ngpu, want), (r, res, e))
    delete_pods(c, s, names)


def cores_and_split_decide(c, s):
    """Compute share and the split count decide fits through the whole stack
    (agent inventory -> scheduler -> bind): one T4 of node2, split 10 (the
    agent's default).  A fit check ignoring cores, or a split count off by
    one (src/alloc/fit.c), fails here."""
    gpu = {"nvidia.com/use-gpuuuid": NODE2_GPUS[1]}
    names, got = [], []
    for name, cores in (("k60", "60"), ("k50", "50"), ("k40", "40")):
        lim = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100", "nvidia.com/gpucores": cores}
        node, res = schedule(c, s, create_pod(c, name, [("m", lim)], gpu), ("node2",))
        names.append(name)
        got.append(node)
    t.ok(got == ["node2", None, "node2"],
         "cores decide: 60% then 40% share the T4, 50% on top of 60% does not fit", got)
    for i in range(9):
        lim = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"}
        node, res = schedule(c, s, create_pod(c, "sp%d" % i, [("m", lim)], gpu), ("node2",))
        names.append("sp%d" % i)
        got.append(node)
    t.ok(got[3:] == ["node2"] * 8 + [None],
         "split decides: tasks 3..10 fit the T4 (split 10), the 11th does not", got[3:])
    bound = [n for n, g in zip(names, got) if g]
    delete_pods(c, s, bound)
    for n in names:
        if n not in bound:
            c.api.delete_pod(n)


def scenarios(c, s):
    hami_examples(c, s)
    cores_and_split_decide(c, s)
    # --- binpack vs spread, on an empty cluster -----------------------------
    # Pods of half a GPU's compute: node1 (2 x A100) and node2 (2 x T4) then
    # look alike to the policies, whatever their memory sizes.
    half = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "50"}
    placed = {}
    for pol in ("spread", "binpack"):
        names = ["%s-%d" % (pol, i) for i in range(2)]
        placed[pol] = [schedule(c, s, create_pod(c, n, [("m", half)],
                                                 {"gpuvisor.io/node-policy": pol}))[0]
                       for n in names]
        delete_pods(c, s, names)
    t.ok(None not in placed["spread"] and placed["spread"][0] != placed["spread"][1],
         "spread: two pods land on different nodes", placed)
    t.ok(placed["binpack"][0] is not None and placed["binpack"][0] == placed["binpack"][1],
         "binpack: two pods land on the same node", placed)
    gp = {}
    for pol in ("spread", "binpack"):
        names = ["gpu%s-%d" % (pol, i) for i in range(2)]
        gpus = []
        for n in names:
            schedule(c, s, create_pod(c, n, [("m", half)], {"gpuvisor.io/gpu-policy": pol}), ("node2",))
            a = ann(c.api.pod(n), "gpuvisor.io/assignment") or ""
            gpus.append(a.split("m=")[1].split(":")[0] if "m=" in a else None)
        gp[pol] = gpus
        delete_pods(c, s, names)
    t.ok(None not in gp["spread"] and gp["spread"][0] != gp["spread"][1],
         "GPU spread: two pods on different GPUs of the node", gp)
    t.ok(gp["binpack"][0] is not None and gp["binpack"][0] == gp["binpack"][1],
         "GPU binpack: two pods share one GPU", gp)

    # --- single container: filter -> bind -> Allocate ---------------------
    pod = create_pod(c, "single", [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000",
                                             "nvidia.com/gpucores": "30"})],
                     {"nvidia.com/use-gputype": "A100"})
    node, res = schedule(c, s, pod)
    t.ok(node == "node1", "single: A100 constraint places the pod on node1", res)
    p = c.api.pod("single")
    a = ann(p, "gpuvisor.io/assignment") or ""
    t.ok(p["spec"].get("nodeName") == "node1" and a.startswith("v1;") and ":4000:300" in a,
         "single: bound, assignment annotation written by bind", p.get("metadata"))
    ev = c.allocate("node1", 1)
    e = envs(ev)
    gpu = a.split("main=")[1].split(":")[0] if "main=" in a else "?"
    t.ok(e.get("NVIDIA_VISIBLE_DEVICES") == gpu and e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "4000m" and
         e.get("CUDA_DEVICE_SM_LIMIT_0") == "30",
         "single: Allocate hands the scheduler's GPU with its memory and compute limits", ev)
    t.ok(ev and ev.get("ok") and [i.split("::")[0] for i in ev["ids"]] == [gpu],
         "single: the kubelet's recorded device IDs are on that GPU (preference from the assignment)", ev)
    t.ok(agent.limits_unreachable(ev) is None,
         "single: no writable mount reaches the limits file's host directory", agent.limits_unreachable(ev))
    m = mounts(ev)
    uid = p["metadata"]["uid"]
    t.ok(m.get("/usr/local/gpuvisor/lib/libgpuvisor.so", (None, None))[1] is True and
         m.get("/etc/ld.so.preload", (None, None))[1] is True and
         m.get("/var/run/gpuvisor", ("", None))[0].endswith("/containers/%s/main" % uid),
         "single: interposer and ld.so.preload mounted read-only, per-container dir", m)
    t.ok(gvtest.wait_for(lambda: ann(c.api.pod("single"), "gpuvisor.io/allocation") == "success", 5),
         "single: agent records allocation=success", c.api.pod("single").get("metadata"))

    # --- from the user's spec: webhook -> API -> filter -> bind -> Allocate ---
    user = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "hami-style", "namespace": "default",
                         "annotations": {"nvidia.com/use-gputype": "A100"}},
            "spec": {"containers": [{"name": "app", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpumem": "3000"}}}]}}
    r = s.admit(user)
    ops = json.loads(base64.b64decode(r.get("patch", ""))) if r.get("allowed") else []
    admitted = apply_patch(json.loads(json.dumps(user)), ops)
    t.ok(admitted["spec"].get("schedulerName") == "gpuvisor-scheduler" and
         admitted["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu") == "1",
         "webhook: HAMi-style pod (gpumem only) routed to gpuvisor and given a GPU count", r)
    code, pod = c.api.req("POST", "/api/v1/namespaces/default/pods", admitted)
    node, res = schedule(c, s, pod)
    e = envs(c.allocate(node or "node1", 1))
    t.ok(node == "node1" and e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "3000m",
         "webhook: the admitted pod is scheduled and its container gets 3000 MiB", (res, e))
    r = s.admit({"metadata": {"name": "x"}, "spec": {"containers": [
        {"name": "big", "resources": {"limits": {"nvidia.com/gpumem": "50000"}}}]}})
    t.ok(not r.get("allowed") and "exceeds the largest GPU in the cluster (40960 MiB)" in
         r.get("status", {}).get("message", ""),
         "webhook: a request larger than any agent's GPU is refused", r)

    # --- multi-container pod ----------------------------------------------
    pod = create_pod(c, "pair", [("a", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
                                 ("b", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"})],
                     {"nvidia.com/use-gputype": "A100"})
    node, res = schedule(c, s, pod)
    a = ann(c.api.pod("pair"), "gpuvisor.io/assignment") or ""
    t.ok(node == "node1" and "a=" in a and "b=" in a, "pair: both containers assigned", a)
    ga = a.split("a=")[1].split(":")[0] if "a=" in a else "?"
    gb = a.split("b=")[1].split(":")[0] if "b=" in a else "?"
    e1 = envs(c.allocate("node1", 1))
    e2 = envs(c.allocate("node1", 1))
    t.ok(e1.get("NVIDIA_VISIBLE_DEVICES") == ga and e1.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "1000m" and
         e2.get("NVIDIA_VISIBLE_DEVICES") == gb and e2.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "2000m",
         "pair: each Allocate gets its own container's GPU and limit, in order", (e1, e2))

    # --- multi-GPU container ------------------------------------------------
    pod = create_pod(c, "multi", [("train", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000"})],
                     {"gpuvisor.io/use-gputype": "T4"})
    node, res = schedule(c, s, pod)
    t.ok(node == "node2", "multi: T4 constraint places the 2-GPU pod on node2", res)
    e = envs(c.allocate("node2", 2))
    t.ok(sorted((e.get("NVIDIA_VISIBLE_DEVICES") or "").split(",")) == sorted(NODE2_GPUS[:2]) and
         e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "3000m" and e.get("CUDA_DEVICE_MEMORY_LIMIT_1") == "3000m",
         "multi: both GPUs visible, a memory limit per visible index", e)

    # --- one container on cards of different sizes, gpumem-percentage ------
    # 50 % of a 16 GiB T4 and of a 24 GiB L4: each visible index gets its own
    # card's share (a builder handing every index device 0's limit fails here).
    pod = create_pod(c, "mixedpct", [("main", {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50",
                                               "nvidia.com/gpucores": "25"})],
                     {"nvidia.com/use-gpuuuid": "%s,%s" % (NODE2_GPUS[0], NODE2_GPUS[2])})
    node, res = schedule(c, s, pod, ("node2",))
    a = ann(c.api.pod("mixedpct"), "gpuvisor.io/assignment") or ""
    ev = c.allocate("node2", 2)
    e = envs(ev)
    want = {NODE2_GPUS[0]: "8192m", NODE2_GPUS[2]: "12288m"}
    vis = (e.get("NVIDIA_VISIBLE_DEVICES") or "").split(",")
    t.ok(node == "node2" and sorted(vis) == sorted(want) and
         all(e.get("CUDA_DEVICE_MEMORY_LIMIT_%d" % i) == want[g] for i, g in enumerate(vis)) and
         e.get("CUDA_DEVICE_SM_LIMIT_0") == "25" and e.get("CUDA_DEVICE_SM_LIMIT_1") == "25",
         "mixed cards, gpumem-percentage 50: index i gets 50 % of card i (T4 8192m, L4 12288m)", (a, ev))
    t.ok(ev and ev.get("ok") and sorted(i.split("::")[0] for i in ev["ids"]) == sorted(want),
         "mixed cards: the kubelet's recorded device IDs are on the assigned cards", ev)

    # --- uuid constraint ----------------------------------------------------
    pod = create_pod(c, "byuuid", [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "500"})],
                     {"nvidia.com/use-gpuuuid": NODE1_GPUS[1]})
    node, res = schedule(c, s, pod)
    a = ann(c.api.pod("byuuid"), "gpuvisor.io/assignment") or ""
    t.ok(node == "node1" and NODE1_GPUS[1] in a, "uuid constraint: the named GPU is used", a)
    e = envs(c.allocate("node1", 1))
    t.ok(e.get("NVIDIA_VISIBLE_DEVICES") == NODE1_GPUS[1], "uuid constraint: Allocate agrees", e)

    # --- fits nowhere: reasons ---------------------------------------------
    pod = create_pod(c, "toobig", [("m", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "60000"})])
    code, res = s.filter(pod, ["node1", "node2", "node9"])
    failed = res.get("FailedNodes") or {}
    unres = res.get("FailedAndUnresolvableNodes") or {}
    t.ok(code == 200 and not res.get("NodeNames") and "node1" in failed and "node2" in failed and
         "node9" in unres and all(len(v) > 10 for v in failed.values()),
         "fits nowhere: a reason per node, unknown node unresolvable", res)

    # --- scheduler restart mid-stream ---------------------------------------
    # Fill node2's second T4 (16384 MiB, 3000 taken by "multi") nearly full,
    # restart, and check the new process counts it: a pod that needs the
    # room no longer fits there.
    pod = create_pod(c, "filler", [("m", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "13000"})],
                     {"nvidia.com/use-gpuuuid": NODE2_GPUS[1]})
    node, res = schedule(c, s, pod)
    t.ok(node == "node2", "restart: filler pod bound before the restart", res)
    half = create_pod(c, "halfway", [("m", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"})],
                      {"nvidia.com/use-gpuuuid": NODE2_GPUS[1]})
    code, res = s.filter(half, ["node2"])  # reserved, never bound: dies with the process
    s.stop(signal.SIGKILL)
    t.ok(s.start(), "restart: a new scheduler process is ready", s.log())
    code, res = s.filter(half, ["node2"])
    t.ok(code == 200 and not res.get("NodeNames") and "node2" in (res.get("FailedNodes") or {}),
         "restart: usage rebuilt from the API (the filled GPU is full)", res)
    ok = create_pod(c, "after", [("m", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
                    {"nvidia.com/use-gpuuuid": NODE2_GPUS[0]})
    node, res = schedule(c, s, ok)
    t.ok(node == "node2", "restart: scheduling goes on after the restart", res)

    # --- agent going stale ---------------------------------------------------
    c.n2.stop_agent()
    time.sleep(HEARTBEAT_TIMEOUT + 1.5)
    pod = create_pod(c, "stale", [("m", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"})])
    code, res = s.filter(pod, ["node1", "node2"])
    why = (res.get("FailedAndUnresolvableNodes") or {}).get("node2", "")
    t.ok(code == 200 and res.get("NodeNames") == ["node1"] and "stale" in why,
         "stale agent: node2 skipped with the reason, node1 chosen", res)

    # --- malformed extender requests -----------------------------------------
    bad = [b"", b"{", b"[1]", b'{"Pod":{"metadata":{}}}', b'{"Pod":3,"NodeNames":["node1"]}',
           b'{"Pod":{"metadata":{}},"NodeNames":[null]}', b"\xff\xfe"]
    answers = [s.post(v, b)[0] for b in bad for v in ("filter", "prioritize", "bind")]
    t.ok(all(a == 400 for a in answers), "malformed requests: 400 each", answers)
    t.ok(s.get("/healthz")[0] == 200 and s.proc and s.proc.p.poll() is None,
         "malformed requests: scheduler still serving", s.log())


main()
