"""Helpers shared by the end-to-end suite (tests/e2e/run-e2e.py) and the
bind benchmark (bench/bench_e2e_bind.sh) on the loopback Kubernetes of
../shared/k8s (README there): paths, a small API client with the admin
client certificate (many requests in parallel, one keep-alive connection per
thread), fake GPU nodes, and the cluster's start and stop.

Everything that uses the cluster holds /var/tmp/gv-k8s.lock (fcntl.flock):
its ports are fixed, so one user at a time on a machine.
"""
import fcntl
import http.client
import json
import os
import ssl
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.environ.get("GV_K8S_HARNESS", os.path.join(os.path.dirname(ROOT), "shared", "k8s"))
K8S_ROOT = os.environ.get("K8S_ROOT", "/var/tmp/loopback-k8s")
BIN = os.path.join(K8S_ROOT, "bin")
RUN = os.path.join(K8S_ROOT, "run")
PKI = os.path.join(RUN, "pki")
LOGS = os.path.join(RUN, "logs")
ADMIN_CONF = os.path.join(RUN, "kubeconfig", "admin.conf")
LOCK = "/var/tmp/gv-k8s.lock"


def log(msg):
    print("# [%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Lock:
    """The machine-wide cluster lock, held for one run."""

    def __enter__(self):
        self.f = open(LOCK, "a")
        log("waiting for %s" % LOCK)
        fcntl.flock(self.f, fcntl.LOCK_EX)
        log("holding %s" % LOCK)
        return self

    def __exit__(self, *a):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def kubeconfig():
    """The kubeconfig in use: $KUBECONFIG's (another cluster), else the
    harness's admin one."""
    return os.environ.get("KUBECONFIG") or ADMIN_CONF


class Api:
    """kube-apiserver over HTTPS with the kubeconfig's credentials (client
    certificate or token; files or inline data)."""

    def __init__(self):
        import base64
        import tempfile
        import urllib.parse
        import yaml
        with open(kubeconfig()) as f:
            kc = yaml.safe_load(f)
        ctxname = kc.get("current-context")
        ctx = next(c["context"] for c in kc["contexts"] if c["name"] == ctxname)
        cl = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
        us = next(u["user"] for u in kc["users"] if u["name"] == ctx["user"]) or {}
        self.tmp = tempfile.mkdtemp(prefix="gv-e2e-kc.")

        def path(d, key):
            if d.get(key):
                return d[key]
            if d.get(key + "-data"):
                p = os.path.join(self.tmp, key)
                with open(p, "wb") as f:
                    f.write(base64.b64decode(d[key + "-data"]))
                return p
            return None
        u = urllib.parse.urlparse(cl["server"])
        self.host, self.port = u.hostname, u.port or 443
        ca = path(cl, "certificate-authority")
        self.ctx = ssl.create_default_context(cafile=ca)
        if cl.get("insecure-skip-tls-verify"):
            self.ctx.check_hostname = False
            self.ctx.verify_mode = ssl.CERT_NONE
        crt, key = path(us, "client-certificate"), path(us, "client-key")
        if crt and key:
            self.ctx.load_cert_chain(crt, key)
        self.token = us.get("token")
        self.local = threading.local()
        # The context holds the CA and client key now: their files are not
        # read again, so they do not outlive the client.
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            self.local.c = c
        return c

    def call(self, method, path, body=None, ctype="application/json"):
        """(status, parsed JSON or text); one retry on a dropped connection."""
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
        for attempt in range(2):
            c = self._conn()
            try:
                h = {"Content-Type": ctype, "Accept": "application/json"}
                if self.token:
                    h["Authorization"] = "Bearer " + self.token
                c.request(method, path, body=data, headers=h)
                r = c.getresponse()
                raw = r.read()
                try:
                    return r.status, json.loads(raw)
                except ValueError:
                    return r.status, raw.decode(errors="replace")
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.c = None
                if attempt:
                    raise

    def ok(self, method, path, body=None, ctype="application/json"):
        st, out = self.call(method, path, body, ctype)
        if st >= 300:
            raise RuntimeError("%s %s: %d %s" % (method, path, st, str(out)[:300]))
        return out

    def parallel(self, fn, items, workers=16):
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(fn, items))


def kubectl(*args, check=True, capture=True, input=None):
    # the harness's kubectl (1.20), else the PATH's (a $KUBECONFIG cluster
    # on a machine without the harness)
    exe = os.path.join(BIN, "kubectl")
    if not os.path.exists(exe):
        exe = "kubectl"
    r = subprocess.run([exe, "--kubeconfig", kubeconfig()] + list(args),
                       capture_output=capture, text=True, input=input)
    if check and r.returncode != 0:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), (r.stderr or "")[-600:]))
    return r.stdout if capture else ""


def start_cluster():
    t = time.time()
    subprocess.run([os.path.join(HARNESS, "start-all.sh")], check=True)
    log("cluster up in %.0f s" % (time.time() - t))


def stop_cluster():
    subprocess.run([os.path.join(HARNESS, "stop-all.sh")], check=False)


def spawn(name, argv, env=None):
    """A process recorded like lib/common.sh's spawn, so stop-all.sh stops it."""
    os.makedirs(os.path.join(RUN, "pids"), exist_ok=True)
    logf = open(os.path.join(LOGS, name + ".log"), "a")
    p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, env=env)
    with open(os.path.join(RUN, "pids", name + ".pid"), "w") as f:
        f.write("%d\n" % p.pid)
    time.sleep(0.05)
    try:
        with open("/proc/%d/stat" % p.pid) as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        with open(os.path.join(RUN, "pids", name + ".start"), "w") as f:
            f.write(start + "\n")
    except OSError:
        pass
    return p


def stop(p, name):
    if p is not None and p.poll() is None:
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for ext in (".pid", ".start"):
        try:
            os.unlink(os.path.join(RUN, "pids", name + ext))
        except OSError:
            pass


def wait_sa(api, ns, timeout=60):
    """Pods of a new namespace can be created once its default service
    account exists (the controller-manager adds it)."""
    t = time.time()
    while time.time() - t < timeout:
        if api.call("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % ns)[0] == 200:
            return
        time.sleep(0.2)
    raise RuntimeError("no default service account in %s after %d s" % (ns, timeout))


def inventory(node, n_gpus, mem_mib=81559, model="NVIDIA A100-SXM4-80GB"):
    """The node agent's gpuvisor.io/node-gpus text (src/contracts/inventory.c)."""
    gpus = [{"uuid": "GPU-%s-%d" % (node, i), "index": i, "model": model, "memoryMiB": mem_mib,
             "memoryScaling": 1.0, "cores": 100, "split": 10, "numa": 0, "healthy": True,
             "mode": "vgpu", "mig": False, "pciBusId": "00000000:%02x:00.0" % (i + 1)}
            for i in range(n_gpus)]
    return json.dumps({"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4",
                       "gpus": gpus}, separators=(",", ":"))


def fake_node(name, n_gpus=8, taint=False):
    """A Node with no kubelet behind it: Ready as created (the node
    lifecycle controller is off in the harness), with the inventory and a
    heartbeat as the agent writes them."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "gpuvisor.io/fake": "true"},
                         "annotations": {"gpuvisor.io/node-gpus": inventory(name, n_gpus),
                                         "gpuvisor.io/node-heartbeat": now}},
            "spec": {"taints": [{"key": "gpuvisor.io/fake", "value": "true",
                                 "effect": "NoSchedule"}] if taint else []},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Fake",
                                       "lastHeartbeatTime": now, "lastTransitionTime": now}]}}


def create_fake_nodes(api, n, prefix="fake-", n_gpus=8, taint=False):
    """n fake nodes; taint: NoSchedule gpuvisor.io/fake=true, so that only
    pods tolerating it (a test's) land there, never a Deployment's."""
    names = ["%s%05d" % (prefix, i) for i in range(n)]

    def one(nm):
        api.ok("POST", "/api/v1/nodes", fake_node(nm, n_gpus, taint))
        untaint(api, nm, taint)
    api.parallel(one, names)
    return names


def untaint(api, name, fake_taint=False):
    """The TaintNodesByCondition admission plugin gives every new node the
    not-ready taint, and only the node lifecycle controller (off in the
    harness) takes it away: a node that is Ready loses it here."""
    taints = [{"key": "gpuvisor.io/fake", "value": "true", "effect": "NoSchedule"}] \
        if fake_taint else None
    api.ok("PATCH", "/api/v1/nodes/" + name, {"spec": {"taints": taints}},
           "application/merge-patch+json")
