"""The scheduler on the kube-apiserver stand-in, seeded with the known
cluster of cluster_fixture.py: shared by the metrics, dashboard and
kubectl-plugin tests.  Reuses the node tests' TAP/process helpers
(tests/node/gvtest.py)."""
import json
import os
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "node"))
import gvtest  # noqa: E402
import cluster_fixture  # noqa: E402

FAKE_API = os.path.join(gvtest.ROOT, "tests", "fakes", "apiserver", "fake_apiserver.py")
SCHED_BIN = os.path.join(gvtest.BUILD, "bin", "gpuvisor-scheduler")


def http(method, url, body=None, ctype="application/json"):
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Stand:
    def __init__(self, workdir, agents=None, extra_seed=()):
        self.dir = workdir
        seed = os.path.join(workdir, "seed.json")
        items = cluster_fixture.objects(agents) + list(extra_seed)
        with open(seed, "w") as f:
            json.dump({"kind": "List", "apiVersion": "v1", "items": items}, f)
        self.api = gvtest.Proc([gvtest.PY, FAKE_API, "--port", "0", "--seed", seed],
                               stdin=False, log=os.path.join(workdir, "api.log"))
        ready = self.api.expect(lambda ln: ln.startswith("READY "), timeout=30)
        if ready is None:
            raise RuntimeError("fake apiserver did not start")
        self.api_url = ready.split()[1]
        self.sched = None

    def start_scheduler(self, *extra):
        ports = os.path.join(self.dir, "ports")
        if os.path.exists(ports):
            os.unlink(ports)
        self.sched = gvtest.Proc([SCHED_BIN, "--master", self.api_url, "--extender-listen",
                                  "127.0.0.1:0", "--dashboard-listen", "127.0.0.1:0",
                                  "--port-file", ports, "--log-level", "warn",
                                  # the fixture's assignments are written unsigned:
                                  # these tests are about what is shown, not trust
                                  "--insecure-unsigned-placements"] + list(extra),
                                 stdin=False, log=os.path.join(self.dir, "sched.log"))
        # the port file is written once the listeners are up (no sleep-based wait)
        for _ in range(600):
            if os.path.exists(ports):
                break
            if self.sched.p.poll() is not None:
                raise RuntimeError("scheduler exited: " + open(os.path.join(self.dir, "sched.log")).read())
            time.sleep(0.05)
        kv = dict(ln.split("=", 1) for ln in open(ports).read().split())
        self.ext = "http://127.0.0.1:%s" % kv["extender"]
        self.dash = "http://127.0.0.1:%s" % kv["dashboard"]
        for _ in range(600):  # readyz: caches synced from the stand-in
            if http("GET", self.ext + "/readyz")[0] == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("scheduler never became ready")

    def filter(self, ns, name, uid, containers, nodes):
        pod = {"metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1"},
               # as the webhook sets it; the scheduler tracks pods by this name
               "spec": {"schedulerName": "gpuvisor-scheduler", "containers": containers}}
        code, body = http("POST", self.ext + "/gpuvisor/filter", {"Pod": pod, "NodeNames": nodes})
        return code, json.loads(body) if code == 200 else body

    def stop_scheduler(self):
        """SIGTERM; returns (exit status, its log): a sanitizer build reports
        leaks and errors there and exits non-zero."""
        if self.sched is None:
            return None, ""
        rc = self.sched.stop(timeout=60)
        self.sched = None
        return rc, open(os.path.join(self.dir, "sched.log"), errors="replace").read()

    def stop(self):
        self.stop_scheduler()
        self.api.stop()


def gpu_container(name, gpus, mem, cores):
    return {"name": name, "resources": {"limits": {"nvidia.com/gpu": str(gpus),
                                                   "nvidia.com/gpumem": str(mem),
                                                   "nvidia.com/gpucores": str(cores)}}}


ALL_NODES = [n[0] for n in cluster_fixture.NODES]


def drive_filters(stand, fitting=True):
    """The pods the tests expect to see pending or reserved after filters:
    returns {name: answer}.  fitting=False leaves out the one that fits (a
    reservation changes the per-GPU figures)."""
    out = {}
    # 8 whole H100-class GPUs: fits nowhere (A100 nodes are partly used)
    out["big-train"] = stand.filter("ml-train", "big-train", "p-big", [gpu_container("t", 8, 81920, 100)],
                                    ALL_NODES)
    # invalid: 150 % of a GPU's compute
    out["bad-cores"] = stand.filter("research", "bad-cores", "p-bad", [gpu_container("c", 1, 1000, 150)],
                                    ALL_NODES)
    # a pod without GPUs passes through
    out["web"] = stand.filter("default", "web", "p-web", [{"name": "nginx"}], ALL_NODES)
    if fitting:
        out.update(drive_fitting(stand))
    return out


def drive_fitting(stand):
    """A small slice that fits: reserved at filter time (no bind here)."""
    return {"small-infer": stand.filter("inference", "small-infer", "p-small",
                                      [gpu_container("s", 1, 8192, 20)], ALL_NODES)}


def usage_state(stand):
    """The dashboard's /api/state once its first round of agent reads is in
    (the agents are read once the caches are synced, then every 15 s; no
    timing asserted); {} when it never came."""
    state = {}
    for _ in range(1200):
        code, body = http("GET", stand.dash + "/api/state")
        state = json.loads(body) if code == 200 else {}
        if state.get("usage", {}).get("time"):
            break
        time.sleep(0.05)
    return state
