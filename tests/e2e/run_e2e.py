#!/usr/bin/env python3
"""make e2e: gpuvisor installed from deploy/ on a real Kubernetes, checked with
real pods, real images, the real kubelet and the real kube-scheduler.

The cluster: ../shared/k8s's loopback Kubernetes v1.20.2 (started here, under
/var/tmp/gv-k8s.lock, and stopped at the end), or any cluster KUBECONFIG names.
Then nothing is started or stopped and no lock is taken; the cluster must
already have a pod network and the images (make images' and the overlay's
stand-ins), this machine must be its node GV_E2E_NODE (the fakes are mounted
from here; its containerd socket GV_E2E_CONTAINERD, default
/run/containerd/containerd.sock, takes the upgrade check's image tag), and the
run ends by checking that the cluster is left as it was found: gpuvisor
installed and uninstalled, nothing else (last check).  `run_e2e.py --up` /
`--down` bring the loopback cluster up with everything the suite needs, and
take it down, for trying that path on this machine (the caller holds the
lock: `flock /var/tmp/gv-k8s.lock sh -c 'run_e2e.py --up && KUBECONFIG=...
make e2e; run_e2e.py --down'`).  On the loopback cluster this adds what its
README says it lacks: a pod network (Debian's CNI plugins: bridge +
host-local + portmap on 10.244.0.0/16, the pod CIDR deploy/'s
network-policy.yaml names), kube-proxy (iptables mode), the "kubernetes"
Service's endpoint (the API server listens on 127.0.0.1 only: a socat relay
on the bridge's address), and the images (make images' archives, plus the
stand-ins tests/e2e/overlay/kustomization.yaml lists).

The install is docs/install.md's, step by step, through the overlay
tests/e2e/overlay (deploy/kubernetes/v1.20 plus the fake NVML; the only
difference).  Each check prints one line: "PASS <name>: <figure>" or
"FAIL <name>: <figure>"; the last line is "e2e: N passed, N failed".
Everything is removed at the end, on failure too (the cluster's logs are
copied to $GV_E2E_LOGS, default build/e2e-logs, first).
"""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s  # noqa: E402
import preempt_e2e  # noqa: E402

ROOT = k8s.ROOT
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
HERE = os.path.dirname(os.path.abspath(__file__))
OVERLAY = os.path.join(HERE, "overlay")
WORK = "/var/tmp/gv-e2e"
FAKES = os.path.join(WORK, "fakes")
KEPT_LOGS = os.path.join(WORK, "kept-logs")  # ours, kept before the uninstall
LOGDIR = os.environ.get("GV_E2E_LOGS", os.path.join(BUILD, "e2e-logs"))
NS = "gpuvisor-system"
POD_CIDR = "10.244.0.0/16"
BRIDGE, GATEWAY = "gve2e0", "10.244.0.1"
VERSION = "0.1.0"
# the node the agent runs on (this machine): the harness's "vm", or
# GV_E2E_NODE on a $KUBECONFIG cluster
NODE = os.environ.get("GV_E2E_NODE", "vm")
MIB = 1 << 20
# --only preempt / burst / pods: install, the registration checks and the
# preemption checks (or the 200-pod bursts only; or the preemption checks,
# then the webhook/slice/long-running pod checks GV_E2E_ROUNDS times): a
# shorter loop while working on them; the default run has them all once
ONLY = None

results = []


def check(name, ok, figure):
    results.append(bool(ok))
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, figure), flush=True)
    return ok


def sh(cmd, check_rc=True):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check_rc and r.returncode != 0:
        raise RuntimeError("%s: %s" % (cmd, (r.stderr or r.stdout)[-800:]))
    return r.stdout


def kubectl(*a, **kw):
    return k8s.kubectl(*a, **kw)


def wait(what, fn, timeout, every=1.0):
    """fn() until truthy; returns (value, seconds) or (None, timeout)."""
    t = time.time()
    while time.time() - t < timeout:
        try:
            v = fn()
        except Exception:  # the API may be restarting a component
            v = None
        if v:
            return v, time.time() - t
        time.sleep(every)
    k8s.log("timed out after %d s waiting for %s" % (timeout, what))
    return None, timeout


def pod_story(api, ns, name):
    """One line on why a pod is where it is: phase, node, conditions,
    container states, our annotation, its Events and the lines of
    kube-scheduler's and the extender's logs that name it (what a timed-out
    wait prints, so that CI's tail says why)."""
    try:
        st, p = api.call("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
        if st != 200:
            return "%s/%s: GET %d" % (ns, name, st)
        status = p.get("status", {})
        conds = ["%s=%s%s" % (c.get("type"), c.get("status"),
                              "(%s: %s)" % (c.get("reason"), c.get("message", "")[:160])
                              if c.get("reason") else "")
                 for c in status.get("conditions") or []]
        cs = []
        for c in status.get("containerStatuses") or []:
            for k, v in (c.get("state") or {}).items():
                cs.append("%s %s %s" % (k, v.get("reason", ""), v.get("message", "")[:160]))
        evs = api.call("GET", "/api/v1/namespaces/%s/events?fieldSelector=involvedObject.name=%s"
                       % (ns, name))[1]
        evs = ["%s %s x%s: %s" % (e.get("source", {}).get("component", "?"), e.get("reason"),
                                  e.get("count", 1), (e.get("message") or "")[:200])
               for e in (evs.get("items") or [] if isinstance(evs, dict) else [])][-6:]
        logs = []
        for c in ("kube-scheduler", "extender"):
            text = kubectl("-n", NS, "logs", "deploy/gpuvisor-scheduler", "-c", c,
                           "--tail=2000", check=False)
            logs += ["%s: %s" % (c, l[:240]) for l in text.splitlines() if name in l][-4:]
        return "%s/%s: phase %s node %s; conditions %s; containers %s; assignment %s; events %s; logs %s" % (
            ns, name, status.get("phase"), p["spec"].get("nodeName") or "-", conds or "-",
            cs or "-", (p["metadata"].get("annotations") or {}).get("gpuvisor.io/assignment", "-"),
            evs or "-", logs or "-")
    except Exception as ex:  # a diagnostic must not end the run
        return "%s/%s: no story (%s)" % (ns, name, ex)


def wait_pod(api, ns, name, what, pred, timeout):
    """wait() on one pod's object until pred holds or the pod failed (a
    terminal phase pred does not accept ends the wait); otherwise its story
    goes to the log."""
    def get():
        return api.ok("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))

    def settled():
        p = get()
        return pred(p) or p["status"].get("phase") == "Failed"
    v, t = wait(what, settled, timeout)
    ok = False
    with contextlib.suppress(Exception):
        ok = bool(pred(get()))
    if not ok:
        k8s.log(pod_story(api, ns, name))
        return None, t
    return v, t


# ---------------------------------------------------------------- cluster setup

# the node's containerd: the harness's, or GV_E2E_CONTAINERD on a
# $KUBECONFIG cluster (this machine is its node)
OWN = not os.environ.get("KUBECONFIG")
CTR = "ctr -a %s -n k8s.io" % (os.path.join(k8s.RUN, "containerd", "containerd.sock") if OWN else
                               os.environ.get("GV_E2E_CONTAINERD", "/run/containerd/containerd.sock"))
UPGRADE_TAG = "docker.io/library/gpuvisor-node:%s-e2e" % VERSION


def add_pod_network(api):
    """Bridge CNI on POD_CIDR; the node turns Ready (and untainted)."""
    sh("ip link show %s >/dev/null 2>&1 || ip link add %s type bridge" % (BRIDGE, BRIDGE))
    sh("ip addr show %s | grep -q 'inet %s/' || ip addr add %s/16 dev %s"
       % (BRIDGE, GATEWAY, GATEWAY, BRIDGE))
    sh("ip link set %s up" % BRIDGE)
    cni_bin = os.path.join(k8s.RUN, "cni", "bin")
    os.makedirs(cni_bin, exist_ok=True)
    for p in ("bridge", "host-local", "loopback", "portmap"):
        shutil.copy2(os.path.join("/usr/lib/cni", p), os.path.join(cni_bin, p))
    conf = {"cniVersion": "0.4.0", "name": "gv-e2e", "plugins": [
        {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True,
         "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                  "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]}
    netd = os.path.join(k8s.RUN, "cni", "net.d")
    os.makedirs(netd, exist_ok=True)
    with open(os.path.join(netd, "10-gv-e2e.conflist"), "w") as f:
        json.dump(conf, f)
    ready, _ = wait("node vm Ready", lambda: any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in api.ok("GET", "/api/v1/nodes/" + NODE)["status"]["conditions"]), 90)
    if not ready:
        raise RuntimeError("node vm did not turn Ready with the pod network")
    k8s.untaint(api, "vm")


def add_kube_proxy(api):
    """kube-proxy (iptables), and the kubernetes Service's endpoint: the API
    server listens on 127.0.0.1 only, pods reach it through a relay on the
    bridge's address."""
    k8s.spawn("e2e-apiserver-relay", ["socat", "TCP-LISTEN:6443,bind=%s,fork,reuseaddr" % GATEWAY,
                                      "TCP:127.0.0.1:6443"])
    ep = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes",
                                                                "namespace": "default"},
          "subsets": [{"addresses": [{"ip": GATEWAY}],
                       "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]}
    st, _ = api.call("PUT", "/api/v1/namespaces/default/endpoints/kubernetes", ep)
    if st >= 300:
        api.ok("POST", "/api/v1/namespaces/default/endpoints", ep)
    conf = os.path.join(WORK, "kube-proxy.yaml")
    with open(conf, "w") as f:
        f.write("""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: iptables
clusterCIDR: %s
hostnameOverride: vm
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0}
""" % (k8s.ADMIN_CONF, POD_CIDR))
    k8s.spawn("e2e-kube-proxy", [os.path.join(k8s.BIN, "kube-proxy"), "--config", conf, "--v=1"])
    ok, _ = wait("kube-proxy rules", lambda: "KUBE-SERVICES" in sh("iptables-save -t nat"), 60)
    if not ok:
        raise RuntimeError("kube-proxy installed no rules (see %s)" % os.path.join(
            k8s.LOGS, "e2e-kube-proxy.log"))


def import_images():
    """make images' archives (docs/install.md, "Images": ctr import) and the
    two stand-ins."""
    imgs = os.path.join(BUILD, "images")
    for n in ("node", "scheduler"):
        sh("%s images import %s/gpuvisor-%s-%s.oci.tar" % (CTR, imgs, n, VERSION))
    os.makedirs(WORK, exist_ok=True)
    ks = os.path.join(WORK, "kube-scheduler.oci.tar")
    sh("%s/standin-image.sh harness.local/kube-scheduler:v1.20.2 /usr/local/bin/kube-scheduler %s "
       "%s=/usr/local/bin/kube-scheduler" % (HERE, ks, os.path.join(k8s.BIN, "kube-scheduler")))
    cg = os.path.join(WORK, "certgen.oci.tar")
    sh("%s/standin-image.sh harness.local/kube-webhook-certgen:standin "
       "/usr/local/bin/kube-webhook-certgen-standin %s "
       "%s/certgen-standin.sh=/usr/local/bin/kube-webhook-certgen-standin "
       "/bin/sh /usr/bin/openssl /usr/bin/curl /usr/bin/base64 /usr/bin/cat /usr/bin/sed "
       "/usr/bin/tr /usr/bin/paste /usr/bin/mktemp /usr/bin/grep /usr/bin/wc /usr/bin/head "
       "/usr/lib/ssl/openssl.cnf" % (HERE, cg, HERE))
    for a in (ks, cg):
        sh("%s images import %s" % (CTR, a))


# ---------------------------------------------------------------- install (docs/install.md)

def install():
    """docs/install.md "Install", steps 1, 2, 4, 5 (step 3 is reading)."""
    kubectl("label", "node", NODE, "gpuvisor.io/gpu-node=true", "--overwrite")  # step 1
    kubectl("create", "namespace", NS)  # step 2
    key = sh("openssl rand -hex 32").strip()
    kubectl("-n", NS, "create", "secret", "generic", "gpuvisor-placement-key",
            "--from-literal=key=" + key)
    ks = api_labels("/api/v1/namespaces/kube-system")
    install.labelled_kube_system = "kubernetes.io/metadata.name" not in ks
    kubectl("label", "namespace", "kube-system", "kubernetes.io/metadata.name=kube-system",
            "--overwrite")
    kubectl("apply", "--dry-run=server", "-k", OVERLAY)  # step 4
    return kubectl("apply", "-k", OVERLAY)


def api_labels(path):
    out = json.loads(kubectl("get", "--raw", path))
    return out["metadata"].get("labels") or {}


def wait_running():
    """Step 5's commands; returns seconds until the node's GPUs are published."""
    t = time.time()
    kubectl("-n", NS, "wait", "--for=condition=complete", "--timeout=180s",
            "job/gpuvisor-webhook-certgen-create", "job/gpuvisor-webhook-certgen-patch")
    kubectl("-n", NS, "rollout", "status", "deploy/gpuvisor-scheduler", "--timeout=240s")
    kubectl("-n", NS, "rollout", "status", "ds/gpuvisor-node", "--timeout=240s")
    return time.time() - t


# ---------------------------------------------------------------- workloads

def gpu_pod(name, ns, mib, cmd=None, node_selector=None, probe=False, sched=False):
    """A HAMi-style pod: nvidia.com/gpu + nvidia.com/gpumem limits and no
    schedulerName (the webhook sets it)."""
    c = {"name": "c", "image": "harness.local/busybox:1",
         "command": cmd or ["sleep", "3600"],
         "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)}}}
    spec = {"containers": [c], "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False}
    if probe:
        # gv_probe (tests/interposer) and the fake libcuda from the host;
        # a glibc image (gpuvisor-node's) to run them in.
        c["image"] = "gpuvisor-node:%s" % VERSION
        c["command"] = ["/e2e/fakes/gv_probe", "--via", "dlopen", "init",
                        "info:*:%d" % (mib * MIB), "nvml-mem:0:*:%d" % (mib * MIB)]
        c["env"] = [{"name": "LD_LIBRARY_PATH", "value": "/e2e/fakes"},
                    {"name": "GV_FAKE_GPU_COUNT", "value": "2"}]
        c["volumeMounts"] = [{"name": "fakes", "mountPath": "/e2e/fakes", "readOnly": True}]
        spec["volumes"] = [{"name": "fakes", "hostPath": {"path": FAKES, "type": "Directory"}}]
        spec["restartPolicy"] = "Never"
    if node_selector:
        spec["nodeSelector"] = node_selector
        spec["tolerations"] = [{"key": "gpuvisor.io/fake", "operator": "Exists",
                                "effect": "NoSchedule"}]
    if sched:
        spec["schedulerName"] = "gpuvisor-scheduler"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def assignment_usage(pods):
    """(gpu uuid -> MiB assigned) over the bound pods' gpuvisor.io/assignment."""
    use = {}
    for p in pods:
        if not p["spec"].get("nodeName"):
            continue
        a = (p["metadata"].get("annotations") or {}).get("gpuvisor.io/assignment", "")
        # v1;node=N;c=<uuid>:<mib>:<cores>[,...] (docs/alloc.md)
        for uuid, mib in re.findall(r"(GPU-[A-Za-z0-9._-]+):(\d+)", a):
            use[uuid] = use.get(uuid, 0) + int(mib)
    return use


def scheduler_log(since_s=None):
    args = ["-n", NS, "logs", "deploy/gpuvisor-scheduler", "-c", "kube-scheduler"]
    if since_s:
        args.append("--since=%ds" % since_s)
    return kubectl(*args, check=False)


def extender_errors(text):
    """kube-scheduler's log lines for failed extender calls (its config echo
    at start names the URL too, without an error)."""
    return [l for l in text.splitlines() if "127.0.0.1:8888/gpuvisor" in l and
            re.search(r"(?i)error|failed|reset by peer|refused|deadline exceeded|\btimeout|\bEOF", l)]


class Heartbeats:
    """Refreshes the fake nodes' heartbeat annotation, as their agents would."""

    def __init__(self, api, names):
        self.api, self.names, self.stop = api, names, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.wait(20):
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for n in self.names:
                try:
                    self.api.call("PATCH", "/api/v1/nodes/" + n,
                                  {"metadata": {"annotations": {"gpuvisor.io/node-heartbeat": now}}},
                                  "application/merge-patch+json")
                except Exception:
                    pass


def burst(api, ns, n, mib, prefix):
    """n pods at once.  A create refused while the webhook is down (its pod
    being recreated: failurePolicy Fail) is retried, as a controller would,
    for up to 120 s."""
    def one(i):
        body = gpu_pod("%s-%03d" % (prefix, i), ns, mib, node_selector={"gpuvisor.io/fake": "true"})
        t = time.time()
        while True:
            st, out = api.call("POST", "/api/v1/namespaces/%s/pods" % ns, body)
            if st < 300 or st == 409 or time.time() - t > 120:
                return st < 300 or st == 409
            time.sleep(1)
    return sum(api.parallel(one, range(n)))


def ns_pods(api, ns, prefix=""):
    return [p for p in api.ok("GET", "/api/v1/namespaces/%s/pods" % ns)["items"]
            if p["metadata"]["name"].startswith(prefix)]


# ---------------------------------------------------------------- the checks

def burst_checks(api):
    """The 200-pod bursts on 10 fake nodes: plain, with the scheduler and
    DaemonSet recreated, with the extender SIGKILLed twice.  Returns the
    fake nodes' names."""
    # -- a 200-pod burst over-commits nothing (fake nodes: 10 x 2 A100-80GB)
    fake = k8s.create_fake_nodes(api, 10, prefix="e2e-fake-", n_gpus=2, taint=True)
    hb = Heartbeats(api, fake)
    try:
        api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "e2e-burst"}})
        k8s.wait_sa(api, "e2e-burst")
        time.sleep(3)  # the extender's informer has the fake nodes
        log0 = len(scheduler_log().splitlines())
        t0 = time.time()
        burst(api, "e2e-burst", 200, 20000, "b")   # 4 fit a GPU: 80 of 200 fit
        fits = 10 * 2 * (81559 // 20000)
        bound, t_b = wait("burst bound", lambda: sum(1 for p in ns_pods(api, "e2e-burst")
                                                     if p["spec"].get("nodeName")) >= fits, 180)
        time.sleep(5)  # anything more would be an over-commit
        pods = ns_pods(api, "e2e-burst")
        nb = sum(1 for p in pods if p["spec"].get("nodeName"))
        use = assignment_usage(pods)
        worst = max(use.values()) if use else 0
        errs = extender_errors("\n".join(scheduler_log().splitlines()[log0:]))
        check("200-pod burst over-commits nothing", nb == fits and worst <= 81559,
              "%d of 200 bound (%d fit), most on one GPU %d MiB of 81559, in %.1f s"
              % (nb, fits, worst, time.time() - t0))
        check("burst: zero extender errors in kube-scheduler's log", not errs,
              "%d errors%s" % (len(errs), (": " + errs[0][:200]) if errs else ""))

        # -- delete and recreate the scheduler Deployment and the DaemonSet mid-burst
        for p in pods:
            api.call("DELETE", "/api/v1/namespaces/e2e-burst/pods/%s?gracePeriodSeconds=0"
                     % p["metadata"]["name"])
        wait("burst pods gone", lambda: not ns_pods(api, "e2e-burst"), 120)
        created = []
        burst_thread = threading.Thread(target=lambda: created.append(
            burst(api, "e2e-burst", 200, 20000, "r")))
        burst_thread.start()
        time.sleep(1)
        kubectl("-n", NS, "delete", "deploy/gpuvisor-scheduler", "ds/gpuvisor-node", "--wait=false")
        time.sleep(3)
        kubectl("apply", "-k", OVERLAY)
        t_apply = time.time()
        burst_thread.join()
        kubectl("-n", NS, "rollout", "status", "deploy/gpuvisor-scheduler", "--timeout=240s")
        t_up = time.time() - t_apply
        t_w = time.time()
        bound, t_b = wait("restart burst bound", lambda: sum(
            1 for p in ns_pods(api, "e2e-burst", "r-") if p["spec"].get("nodeName")) >= fits, 240)
        t_b = t_w + t_b - t_apply  # from the re-apply to every fitting pod bound
        time.sleep(5)
        pods = ns_pods(api, "e2e-burst", "r-")
        nb = sum(1 for p in pods if p["spec"].get("nodeName"))
        use = assignment_usage(pods)
        worst = max(use.values()) if use else 0
        check("scheduler and DaemonSet recreated mid-burst: the cluster converges",
              nb == fits and worst <= 81559,
              "%d of %d created bound (%d fit) %.1f s after the re-apply (the scheduler "
              "ready after %.1f s), most on one GPU %d MiB" % (nb, created[0] if created else 0,
                                                                fits, t_b, t_up, worst))

        # -- the extender SIGKILLed mid-burst, twice: kubelet restarts it in the
        # same pod, where its Binding journal (an emptyDir) survives; Bindings
        # it had in kube-apiserver must not be handed out again (bind_inflight.h)
        for p in pods:
            api.call("DELETE", "/api/v1/namespaces/e2e-burst/pods/%s?gracePeriodSeconds=0"
                     % p["metadata"]["name"])
        wait("restart-burst pods gone", lambda: not ns_pods(api, "e2e-burst"), 120)

        def extender_container():
            for sp in ns_pods(api, NS):
                if not sp["metadata"]["name"].startswith("gpuvisor-scheduler-"):
                    continue
                for cs in sp["status"].get("containerStatuses") or []:
                    if cs["name"] == "extender" and cs.get("containerID") and \
                            cs.get("state", {}).get("running"):
                        return sp["metadata"]["name"], cs["containerID"].split("//")[-1], \
                            cs.get("restartCount", 0), sp["metadata"]["uid"]
            return None, None, 0, None
        created = []
        burst_thread = threading.Thread(target=lambda: created.append(
            burst(api, "e2e-burst", 200, 20000, "k")))
        burst_thread.start()
        kills, kill_at, seen = 0, [], 0

        def k_bound():
            return sum(1 for p in ns_pods(api, "e2e-burst", "k-") if p["spec"].get("nodeName"))
        for target in (25, 50):
            # kill once `target` pods are bound (many GPUs full: an answer
            # that counts no bound pod lands on one) and while a Binding is
            # in flight: its journal entry is in the emptyDir (seen from the
            # node; cheap to poll every 2 ms, unlike the pod list); then
            # kube-scheduler calls the successor at once, before it has
            # listed the pods.  No entry within 2 s of the target: killed
            # anyway (a figure says how often an entry was seen).
            _, cid, _, puid = extender_container()
            jdir = "/var/lib/kubelet/pods/%s/volumes/kubernetes.io~empty-dir/binds" % puid
            try:  # entries a predecessor left (holds not settled yet) do not count
                old = set(os.listdir(jdir))
            except OSError:
                old = set()
            t_poll, found, t_target, n = time.time(), False, None, 0
            while not found and time.time() - t_poll < 60:
                if t_target is None and n % 25 == 0 and k_bound() >= min(target, fits - 1):
                    t_target = time.time()
                n += 1
                if t_target is not None:
                    try:
                        found = bool(set(os.listdir(jdir)) - old)
                    except OSError:
                        pass
                    if time.time() - t_target > 2:
                        break
                if not found:
                    time.sleep(0.002)
            seen += found
            if cid and subprocess.run("%s tasks kill --signal SIGKILL %s" % (CTR, cid),
                                      shell=True, capture_output=True).returncode == 0:
                kills += 1
            kill_at.append(k_bound())
            wait("extender running again", lambda: extender_container()[1] not in (None, cid),
                 120)
        burst_thread.join()
        bound, t_b = wait("kill burst bound", lambda: sum(
            1 for p in ns_pods(api, "e2e-burst", "k-") if p["spec"].get("nodeName")) >= fits, 240)
        time.sleep(5)
        pods = ns_pods(api, "e2e-burst", "k-")
        nb = sum(1 for p in pods if p["spec"].get("nodeName"))
        use = assignment_usage(pods)
        worst = max(use.values()) if use else 0
        pod_name, _, restarts, _ = extender_container()
        # how many Bindings the restarted extenders found in the journal (a
        # figure: the kills wait for an entry, but it may be gone by then)
        held = sum(kubectl("-n", NS, "logs", pod_name or "-", "-c", "extender", *prev,
                           check=False).count("may still land")
                   for prev in ([], ["--previous"]))
        check("extender SIGKILLed twice mid-burst, restarted in place: over-commits nothing",
              nb == fits and worst <= 81559 and restarts >= 2,
              "%d of %d created bound (%d fit), most on one GPU %d MiB; %d kills (%s pods "
              "bound just after), extender restarts %d (%s); a journal entry (a Binding in "
              "flight) seen at %d of the kills; journaled Bindings held after a restart: %d"
              % (nb, created[0] if created else 0, fits, worst, kills,
                 " and ".join(map(str, kill_at)), restarts, pod_name, seen, held))
    finally:
        hb.stop.set()
    return fake


def pod_checks(api, sfx=""):
    """A HAMi-style pod through the webhook's Service, placed, allocated,
    seeing its slice; then a long-running GPU pod (the rolling update's
    keeper<sfx>).  Namespace e2e exists."""
    slice_, keeper = "slice" + sfx, "keeper" + sfx
    # Real objects carry many entries: node-feature-discovery labels a node
    # by the dozen, meshes annotate pods as much.  The node gets 80 such
    # labels and the pod 80 annotations (more than 64 were refused once).
    feats = ["feature.node.kubernetes.io/e2e-%d" % i for i in range(80)]
    kubectl("label", "node", NODE, "--overwrite", *("%s=true" % k for k in feats))
    try:
        pod = gpu_pod(slice_, "e2e", 3000, probe=True)
        pod["metadata"]["annotations"] = {"sidecar.example.com/e2e-%d" % i: "on" for i in range(80)}
        api.ok("POST", "/api/v1/namespaces/e2e/pods", pod)
        p = api.ok("GET", "/api/v1/namespaces/e2e/pods/" + slice_)
        check("webhook reached through its Service mutates a HAMi-style pod (80 annotations)",
              p["spec"].get("schedulerName") == "gpuvisor-scheduler",
              "schedulerName=%s" % p["spec"].get("schedulerName"))
        wait_pod(api, "e2e", slice_, "pod slice to finish",
                 lambda p: p["status"].get("phase") in ("Succeeded", "Failed"), 180)
    finally:
        kubectl("label", "node", NODE, *("%s-" % k for k in feats), check=False)
    p = api.ok("GET", "/api/v1/namespaces/e2e/pods/" + slice_)
    logs = kubectl("-n", "e2e", "logs", slice_, check=False)
    a = (p["metadata"].get("annotations") or {}).get("gpuvisor.io/assignment", "")
    check("pod placed (on a node with 80 more labels) and allocated; its container sees its "
          "slice through the interposer",
          p["status"].get("phase") == "Succeeded" and "not ok" not in logs and a,
          "phase %s, node %s, assignment %s, probe: %s" % (
              p["status"].get("phase"), p["spec"].get("nodeName"), a or "-",
              " | ".join(l for l in logs.splitlines() if l.startswith(("ok", "not ok")))[:300]))
    # a long-running GPU pod (the rolling update keeps it), created as the
    # previous one ends
    t0 = time.time()
    api.ok("POST", "/api/v1/namespaces/e2e/pods", gpu_pod(keeper, "e2e", 2000))
    up, _ = wait_pod(api, "e2e", keeper, "keeper running",
                     lambda p: p["status"].get("phase") == "Running", 120)
    p = api.ok("GET", "/api/v1/namespaces/e2e/pods/" + keeper)
    check("a long-running GPU pod created as the last one ends runs", up,
          "phase %s %.1f s after its creation, assignment %s" % (
              p["status"].get("phase"), time.time() - t0,
              (p["metadata"].get("annotations") or {}).get("gpuvisor.io/assignment", "-")))


def kubectl_plugin_checks():
    """kubectl gpuvisor as a cluster admin runs it: the placement key read from
    the gpuvisor-placement-key Secret, every placement the real scheduler
    wrote verifies, and the keeper's counts on its GPU."""
    exe = os.path.join(BUILD, "bin", "kubectl-gpuvisor")
    r = subprocess.run([exe, "--kubeconfig", k8s.kubeconfig(), "inspect", "-o", "json"],
                       capture_output=True, text=True, timeout=120)
    try:
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
    except ValueError:
        doc = {}
    on = ["%s/%s" % (n["name"], g["uuid"][-6:]) for n in doc.get("nodes", []) for g in n["gpus"]
          for p in g["pods"] if p["pod"] == "keeper"]
    pl = doc.get("placements", {})
    check("kubectl gpuvisor inspect (cluster admin) verifies placements with the Secret's key",
          r.returncode == 0 and pl.get("verified") is True
          and pl.get("key") == "Secret %s/gpuvisor-placement-key" % NS
          and doc.get("unverified") == [] and len(on) == 1,
          "rc %d, key: %s, %d unverified, keeper on %s%s" % (
              r.returncode, pl.get("key", "-"), len(doc.get("unverified") or []), on or "-",
              "" if r.returncode == 0 else "; " + r.stderr.strip()[-300:]))


def tenant_checks(api):
    """A tenant, root in its own namespace (a service account that may create
    and patch pods there; kubectl --as impersonates it), against placements
    on the real cluster.  In e2e the webhook refuses a pod of its own
    carrying a placement and a patch of its running pod's placement.  In a
    namespace the admin took out of the webhook (gpuvisor.io/webhook=
    disabled) the patch lands, and counts nowhere: the scheduler goes on
    counting the verified assignment, rejects the altered one, and kubectl
    gpuvisor (as an admin, with the key) lists it as not verifying."""
    off = "e2e-nowebhook"
    api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": off, "labels": {"gpuvisor.io/webhook": "disabled"}}})
    k8s.wait_sa(api, off)
    for ns in ("e2e", off):
        api.ok("POST", "/api/v1/namespaces/%s/serviceaccounts" % ns,
               {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}})
        api.ok("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % ns, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "tenant"},
            "rules": [{"apiGroups": [""], "resources": ["pods"],
                       "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]})
        api.ok("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % ns, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "tenant"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]})
        api.ok("POST", "/api/v1/namespaces/%s/pods" % ns, gpu_pod("mine", ns, 1000, sched=True))
    for ns in ("e2e", off):
        wait_pod(api, ns, "mine", "tenant pod running in " + ns,
                 lambda p: p["status"].get("phase") == "Running", 120)

    def asg(ns, name="mine"):
        st, p = api.call("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
        return ((p.get("metadata") or {}).get("annotations") or {}).get("gpuvisor.io/assignment") \
            if st == 200 else None

    def as_tenant(ns, *args, input=None):
        try:
            kubectl("--as=system:serviceaccount:%s:tenant" % ns, "-n", ns, *args, input=input)
            return None
        except RuntimeError as ex:
            return str(ex)

    a0 = {ns: asg(ns) for ns in ("e2e", off)}
    forged = {ns: (a or "").replace(":1000:", ":70000:") for ns, a in a0.items()}
    refused = as_tenant("e2e", "annotate", "pod", "mine", "gpuvisor.io/assignment=" + forged["e2e"],
                        "--overwrite")
    check("tenant: the webhook refuses a patch of its own pod's placement",
          a0["e2e"] and refused and "denied the request" in refused and asg("e2e") == a0["e2e"],
          "assignment %s kept: %s; %s" % (a0["e2e"], asg("e2e") == a0["e2e"], (refused or "ACCEPTED")[-200:]))
    pod = gpu_pod("forged", "e2e", 1000, sched=True)
    pod["metadata"]["annotations"] = {
        "gpuvisor.io/assignment": forged["e2e"], "gpuvisor.io/assigned-node": NODE,
        "gpuvisor.io/assigned-at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpuvisor.io/assignment-sig": "v1." + "0" * 64}
    refused = as_tenant("e2e", "create", "-f", "-", input=json.dumps(pod))
    check("tenant: the webhook refuses a pod created with a placement of its own",
          refused and "denied the request" in refused
          and api.call("GET", "/api/v1/namespaces/e2e/pods/forged")[0] == 404,
          (refused or "CREATED")[-200:])

    m0, _ = preempt_e2e.scheduler_metrics(api, sys.modules[__name__])
    landed = as_tenant(off, "annotate", "pod", "mine", "gpuvisor.io/assignment=" + forged[off], "--overwrite")
    key = "gpuvisor_cluster_gpu_memory_allocated_mib"  # bounded series: per-pod ones are opt-in

    def settled():
        m, _ = preempt_e2e.scheduler_metrics(api, sys.modules[__name__])
        rej = m.get("gpuvisor_placements_rejected_total", 0) - m0.get("gpuvisor_placements_rejected_total", 0)
        return (m, rej) if rej >= 1 else None
    got, t_rej = wait("scheduler rejects the altered placement", settled, 30)
    m1, rej = got or ({}, 0)
    r = subprocess.run([os.path.join(BUILD, "bin", "kubectl-gpuvisor"), "--kubeconfig", k8s.kubeconfig(),
                        "inspect", "-o", "json", "-n", off], capture_output=True, text=True, timeout=120)
    try:
        unv = json.loads(r.stdout).get("unverified", []) if r.returncode == 0 else []
    except ValueError:
        unv = []
    check("tenant, webhook off for its namespace: an altered placement lands and counts nowhere",
          landed is None and asg(off) == forged[off] and rej >= 1
          and m0.get(key) is not None and m1.get(key) == m0.get(key)
          and [(u["pod"], "does not match" in u["reason"]) for u in unv] == [("mine", True)],
          "patch %s; scheduler: %d rejected in %.0f s, cluster allocation %s MiB (was %s); "
          "kubectl gpuvisor lists as not verifying: %s" % (
              "landed" if landed is None else "refused: " + landed[-120:], rej, t_rej or -1,
              m1.get(key), m0.get(key),
              [(u["namespace"], u["pod"]) for u in unv] or r.stderr.strip()[-200:]))
    for ns in ("e2e", off):
        api.call("DELETE", "/api/v1/namespaces/%s/pods/mine?gracePeriodSeconds=0" % ns)
    api.call("DELETE", "/api/v1/namespaces/" + off)


def run_checks(api):
    out = install()
    t_ready = wait_running()
    # -- the DaemonSet registers and advertises
    inv, t_inv = wait("node inventory", lambda: (api.ok("GET", "/api/v1/nodes/" + NODE)["metadata"]
                                                 .get("annotations") or {}).get("gpuvisor.io/node-gpus"), 120)
    alloc, t_alloc = wait("allocatable nvidia.com/gpu", lambda: api.ok("GET", "/api/v1/nodes/" + NODE)
                          ["status"].get("allocatable", {}).get("nvidia.com/gpu"), 120)
    t_inv += t_alloc
    n_gpus = len(json.loads(inv)["gpus"]) if inv else 0
    check("daemonset registers and advertises", inv and n_gpus == 2 and alloc == "20",
          "%d GPUs in gpuvisor.io/node-gpus, allocatable nvidia.com/gpu=%s, %.0f s after apply"
          % (n_gpus, alloc, t_ready + t_inv))
    # -- the certificate Job creates the webhook secret
    sec = api.call("GET", "/api/v1/namespaces/%s/secrets/gpuvisor-webhook-tls" % NS)[1]
    keys = sorted((sec.get("data") or {}).keys()) if isinstance(sec, dict) else []
    wh = api.ok("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                "gpuvisor-webhook")
    ca = wh["webhooks"][0]["clientConfig"].get("caBundle", "")
    check("certificate Job creates the webhook secret", keys == ["ca", "cert", "key"] and ca,
          "secret keys %s, caBundle %d bytes" % (",".join(keys), len(ca)))
    # -- GPU-aware preemption on the real kube-scheduler and kubelet (node
    # vm's two GPUs, before anything else holds them)
    if ONLY == "burst":
        burst_checks(api)
        return
    preempt_e2e.run(api, sys.modules[__name__])
    if ONLY == "preempt":
        return
    api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "e2e"}})
    k8s.wait_sa(api, "e2e")
    if ONLY == "pods":  # the pod checks again and again (GV_E2E_ROUNDS, default 5)
        for i in range(int(os.environ.get("GV_E2E_ROUNDS", "5"))):
            pod_checks(api, "-%d" % i)
            for n in ("slice", "keeper"):
                api.call("DELETE", "/api/v1/namespaces/e2e/pods/%s-%d?gracePeriodSeconds=0" % (n, i))
        return
    pod_checks(api)
    kubectl_plugin_checks()
    tenant_checks(api)

    # -- a second install on top of the first is a no-op: nothing is written
    # (every object keeps its resourceVersion; kubectl may still say
    # "configured" for a field the server drops, e.g. 1.20's Jobs lose
    # ttlSecondsAfterFinished, an alpha field there)
    def versions():
        objs = json.loads(kubectl("get", "-k", OVERLAY, "-o", "json"))["items"]
        return {"%s/%s" % (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                for o in objs}
    v1 = versions()
    pods1 = sorted(p["metadata"]["uid"] for p in ns_pods(api, NS))
    again = kubectl("apply", "-k", OVERLAY)
    time.sleep(3)
    v2 = versions()
    pods2 = sorted(p["metadata"]["uid"] for p in ns_pods(api, NS))
    written = sorted(k for k in v1 if v2.get(k) != v1[k])
    said = [l for l in again.splitlines() if l and not l.endswith(" unchanged")]
    check("a second install on top of the first is a no-op", not written and pods1 == pods2,
          "%d objects, %d rewritten %s, pods %s; kubectl said %s"
          % (len(v1), len(written), written[:3], "kept" if pods1 == pods2 else "replaced",
             said or "all unchanged"))

    fake = burst_checks(api)  # the fake nodes: removed with the uninstall below


    # -- rolling update of the DaemonSet (image change) keeps running pods and their limits
    k0 = api.ok("GET", "/api/v1/namespaces/e2e/pods/keeper")
    cid0 = (k0["status"].get("containerStatuses") or [{}])[0].get("containerID")
    env0 = kubectl("-n", "e2e", "exec", "keeper", "--", "sh", "-c",
                   "env | grep ^CUDA_DEVICE_ | sort", check=False)
    sh("%s images tag --force docker.io/library/gpuvisor-node:%s %s" % (CTR, VERSION, UPGRADE_TAG))
    kubectl("-n", NS, "set", "image", "ds/gpuvisor-node",
            "gpuvisor-node=gpuvisor-node:%s-e2e" % VERSION,
            "install-interposer=gpuvisor-node:%s-e2e" % VERSION)
    kubectl("-n", NS, "rollout", "status", "ds/gpuvisor-node", "--timeout=240s")
    k1 = api.ok("GET", "/api/v1/namespaces/e2e/pods/keeper")
    cid1 = (k1["status"].get("containerStatuses") or [{}])[0].get("containerID")
    env1 = kubectl("-n", "e2e", "exec", "keeper", "--", "sh", "-c",
                   "env | grep ^CUDA_DEVICE_ | sort", check=False)
    check("DaemonSet rolling update (image change) keeps running pods and their limits",
          cid0 and cid0 == cid1 and k1["status"].get("phase") == "Running" and env0 == env1 and env0,
          "container %s kept: %s; limits %s" % ((cid0 or "-")[-12:], cid0 == cid1,
                                                 env1.strip().replace("\n", " ") or "(none)"))
    kubectl("apply", "-k", OVERLAY)  # back to the deploy's image
    kubectl("-n", NS, "rollout", "status", "ds/gpuvisor-node", "--timeout=240s", check=False)
    sh("%s images rm %s" % (CTR, UPGRADE_TAG), check_rc=False)

    # -- kubectl delete -k leaves nothing of ours behind (our logs kept first)
    try:
        os.makedirs(KEPT_LOGS, exist_ok=True)
        keep_component_logs(KEPT_LOGS)
    except Exception as ex:
        k8s.log("keeping our logs: %r" % ex)
    for n in ("e2e", "e2e-burst", "e2e-nowebhook"):
        api.call("DELETE", "/api/v1/namespaces/" + n)
    for n in fake:
        api.call("DELETE", "/api/v1/nodes/" + n)
    kubectl("delete", "-k", OVERLAY, "--wait=true", check=False)
    gone, t_gone = wait("namespace gone", lambda: api.call("GET", "/api/v1/namespaces/" + NS)[0]
                        == 404, 180)
    left = []
    for path in ("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                 "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                 "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                 "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"):
        for o in api.ok("GET", path)["items"]:
            if "gpuvisor" in o["metadata"]["name"]:
                left.append(o["metadata"]["name"])
    pods_left = [p["metadata"]["name"] for p in api.ok("GET", "/api/v1/pods")["items"]
                 if "gpuvisor" in p["metadata"]["name"]]
    rules = [l for l in sh("iptables-save").splitlines() if "gpuvisor" in l]
    check("kubectl delete -k leaves no pods, webhooks, RBAC, CRDs or iptables rules of ours",
          gone and not left and not pods_left and not rules,
          "namespace gone in %.0f s; objects left %s; pods left %s; iptables rules %d"
          % (t_gone, left, pods_left, len(rules)))
    # docs/install.md "Uninstall": node-cleanup removes the host files
    cleanup = os.path.join(ROOT, "deploy", "node-cleanup")
    host = ["/usr/local/gpuvisor", "/var/lib/gpuvisor",
            "/var/lib/kubelet/device-plugins/gpuvisor.sock"]
    if os.path.isdir(cleanup):
        kubectl("apply", "-k", cleanup, check=False)
        kubectl("-n", "gpuvisor-cleanup", "rollout", "status", "ds/gpuvisor-node-cleanup",
                "--timeout=180s", check=False)
        kubectl("delete", "-k", cleanup, check=False)
    kubectl("label", "node", NODE, "gpuvisor.io/gpu-node-", check=False)
    kubectl("annotate", "node", NODE, "gpuvisor.io/node-gpus-", "gpuvisor.io/node-heartbeat-",
            check=False)
    remove_agent_labels()
    if getattr(install, "labelled_kube_system", False):  # docs/install.md, Uninstall (1.20)
        kubectl("label", "namespace", "kube-system", "kubernetes.io/metadata.name-", check=False)
    host_left = [h for h in host if os.path.exists(h)]
    check("uninstall leaves no host files of ours", not host_left,
          "left: %s" % (host_left or "none"))
    md = api.ok("GET", "/api/v1/nodes/" + NODE)["metadata"]
    marks = [k for k in list((md.get("labels") or {})) + list(md.get("annotations") or {})
             if OUR_MARK.match(k)]
    check("uninstall leaves no labels or annotations of ours on the node", not marks,
          "left on %s: %s" % (NODE, marks or "none"))


# gpuvisor's node labels and annotations (the GFD-style ones included)
OUR_MARK = re.compile(r"^(gpuvisor\.io/|nvidia\.com/(cuda\.|gfd\.|gpu\.|mig|mps\.))")


def remove_agent_labels():
    """docs/install.md, Uninstall: its command for the agent's labels, as
    written there (the shell lines from `kubectl get nodes -o go-template`
    to `done`), with the harness's kubectl and this run's kubeconfig."""
    lines, on = [], False
    with open(os.path.join(ROOT, "docs", "install.md")) as f:
        for ln in f:
            on = on or ln.startswith("kubectl get nodes -o go-template")
            if on:
                lines.append(ln)
                if ln.rstrip().endswith("done"):
                    break
    if not lines:
        raise RuntimeError("docs/install.md has no label-removal command (Uninstall)")
    kbin = os.path.dirname(os.path.join(k8s.BIN, "kubectl")) if os.path.exists(
        os.path.join(k8s.BIN, "kubectl")) else ""
    env = dict(os.environ, KUBECONFIG=k8s.kubeconfig(),
               PATH=(kbin + ":" if kbin else "") + os.environ.get("PATH", ""))
    subprocess.run(["sh", "-c", "".join(lines)], env=env, capture_output=True, text=True)


def cluster_state(api):
    """What a $KUBECONFIG run must leave as it found it: the nodes (names;
    this node's labels, annotations and taints), namespaces and kube-system's
    labels, cluster-wide objects (webhooks, RBAC, CRDs, priority classes),
    the images on this node and the iptables rules (packet counters left
    out).  Left out: gpuvisor's extended resources in the node's capacity,
    which the kubelet keeps for 5 minutes after the device plugin left, then
    at 0 until it restarts (docs/install.md, Uninstall): kubelet state, not
    ours to remove."""
    st = {}
    nodes = api.ok("GET", "/api/v1/nodes")["items"]
    st["nodes"] = sorted(n["metadata"]["name"] for n in nodes)
    for n in nodes:
        if n["metadata"]["name"] == NODE:
            md = n["metadata"]
            st["node labels"] = md.get("labels") or {}
            st["node annotations"] = md.get("annotations") or {}
            st["node taints"] = n["spec"].get("taints") or []
            st["node capacity"] = {k: v for k, v in n["status"].get("capacity", {}).items()
                                   if v != "0" and not OUR_RESOURCE.match(k)}
    nss = api.ok("GET", "/api/v1/namespaces")["items"]
    st["namespaces"] = sorted(n["metadata"]["name"] for n in nss)
    st["kube-system labels"] = next((n["metadata"].get("labels") or {} for n in nss
                                     if n["metadata"]["name"] == "kube-system"), {})
    for path in ("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                 "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                 "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                 "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                 "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                 "/apis/scheduling.k8s.io/v1/priorityclasses",
                 "/api/v1/persistentvolumes"):
        st[path.rsplit("/", 1)[1]] = sorted(o["metadata"]["name"] for o in api.ok("GET", path)["items"])
    st["images"] = sorted(sh("%s images ls -q" % CTR, check_rc=False).split())
    st["iptables"] = sorted(re.sub(r"\[\d+:\d+\]", "", l) for l in sh("iptables-save", check_rc=False)
                            .splitlines() if l and not l.startswith("#"))
    return st


OUR_RESOURCE = re.compile(r"^(nvidia\.com/gpu|gpuvisor\.io/)")


def state_diff(before, after):
    """[(what, removed, added)] for each part that differs."""
    out = []
    for k in before:
        b, a = before[k], after.get(k)
        if b == a:
            continue
        if isinstance(b, dict):
            a = a or {}
            out.append((k, sorted("%s=%s" % (x, b[x]) for x in b if a.get(x) != b[x]),
                        sorted("%s=%s" % (x, a[x]) for x in a if b.get(x) != a[x])))
        elif isinstance(b, list) and all(isinstance(x, str) for x in b + (a or [])):
            out.append((k, sorted(set(b) - set(a or [])), sorted(set(a or []) - set(b))))
        else:
            out.append((k, [json.dumps(b)[:200]], [json.dumps(a)[:200]]))
    return out


def remove_leftovers(api, fake_prefix="e2e-fake-"):
    """After a $KUBECONFIG run that stopped part-way: what the checks create
    and their own uninstall would have removed (each step harmless when
    already done)."""
    for n in ("e2e", "e2e-burst", "e2e-nowebhook"):
        api.call("DELETE", "/api/v1/namespaces/" + n)
    for n in api.ok("GET", "/api/v1/nodes")["items"]:
        if n["metadata"]["name"].startswith(fake_prefix):
            api.call("DELETE", "/api/v1/nodes/" + n["metadata"]["name"])
    kubectl("delete", "-k", OVERLAY, "--ignore-not-found", "--wait=true", check=False)
    kubectl("delete", "namespace", NS, "--ignore-not-found", check=False)
    kubectl("label", "node", NODE, "gpuvisor.io/gpu-node-", check=False)
    kubectl("annotate", "node", NODE, "gpuvisor.io/node-gpus-", "gpuvisor.io/node-heartbeat-",
            check=False)
    if getattr(install, "labelled_kube_system", False):
        kubectl("label", "namespace", "kube-system", "kubernetes.io/metadata.name-", check=False)
    sh("%s images rm %s" % (CTR, UPGRADE_TAG), check_rc=False)
    for n in ("e2e", "e2e-burst", NS, preempt_e2e.NSP):
        wait("namespace %s gone" % n, lambda: api.call("GET", "/api/v1/namespaces/" + n)[0] == 404, 120)


def prepare_fakes():
    for d in (FAKES, KEPT_LOGS):  # nothing from an earlier run
        if os.path.exists(d):
            shutil.rmtree(d)
    os.makedirs(FAKES)
    for f in ("libcuda.so.1", "libnvidia-ml.so.1"):
        shutil.copy2(os.path.join(BUILD, "tests", "fakes", f), FAKES)
    shutil.copy2(os.path.join(BUILD, "tests", "gv_probe"), FAKES)


def keep_component_logs(into, skip=()):
    """Our components' logs, and the pods and Events, into the directory
    (before the uninstall takes them away; save_logs copies them along).
    A file is only replaced by a non-empty log; names in skip are left."""
    outs = [("gpuvisor-scheduler-%s.log" % c, ("-n", NS, "logs", "deploy/gpuvisor-scheduler",
                                               "-c", c)) for c in ("kube-scheduler", "extender")]
    outs += [("gpuvisor-node.log", ("-n", NS, "logs", "ds/gpuvisor-node")),
             ("pods.txt", ("get", "pods", "-A", "-o", "wide")), ("events.txt", ("get", "events", "-A"))]
    for name, args in outs:
        if name in skip:
            continue
        text = kubectl(*args, check=False)
        if text.strip():
            with open(os.path.join(into, name), "w") as f:
                f.write(text)


def save_logs():
    """The cluster's logs (the loopback one's), what keep_component_logs kept
    before the uninstall, else our components' logs as they are now."""
    try:
        if os.path.exists(LOGDIR):
            shutil.rmtree(LOGDIR)
        if os.path.isdir(k8s.LOGS):
            shutil.copytree(k8s.LOGS, LOGDIR)
        os.makedirs(LOGDIR, exist_ok=True)
        kept = os.listdir(KEPT_LOGS) if os.path.isdir(KEPT_LOGS) else []
        for f in kept:
            shutil.copy2(os.path.join(KEPT_LOGS, f), LOGDIR)
        keep_component_logs(LOGDIR, skip=kept)
    except Exception as e:  # logs are a courtesy; the verdict stands
        k8s.log("saving logs: %r" % e)


def teardown_network():
    subprocess.run([os.path.join(k8s.BIN, "kube-proxy"), "--cleanup"], capture_output=True)
    subprocess.run("ip link del %s" % BRIDGE, shell=True, capture_output=True)
    # what the bridge plugin's ipMasq added (stop-all.sh kills the
    # containers without a CNI DEL): the jumps, then the chains
    chains = set()
    for l in sh("iptables-save -t nat", check_rc=False).splitlines():
        if 'gv-e2e' not in l:
            continue
        if l.startswith("-A POSTROUTING"):
            subprocess.run("iptables -t nat -D " + l[3:], shell=True, capture_output=True)
        elif l.startswith("-A CNI-"):
            chains.add(l.split()[1])
    for c in chains:
        subprocess.run("iptables -t nat -F %s && iptables -t nat -X %s" % (c, c), shell=True,
                       capture_output=True)
    shutil.rmtree("/var/lib/cni/networks/gv-e2e", ignore_errors=True)
    for f in ("10-gv-e2e.conflist",):
        try:
            os.unlink(os.path.join(k8s.RUN, "cni", "net.d", f))
        except OSError:
            pass


def loopback_up():
    """--up: the loopback cluster with everything the suite needs (the
    caller holds the lock)."""
    os.makedirs(WORK, exist_ok=True)
    k8s.start_cluster()
    api = k8s.Api()
    add_pod_network(api)
    add_kube_proxy(api)
    import_images()


def loopback_down():
    """--down: the loopback cluster and what --up added, gone."""
    k8s.stop_cluster()
    teardown_network()
    shutil.rmtree(WORK, ignore_errors=True)


def main():
    global ONLY
    if sys.argv[1:2] == ["--only"] and sys.argv[2:3] in (["preempt"], ["burst"], ["pods"]):
        ONLY = sys.argv[2]
    elif sys.argv[1:] and sys.argv[1:] not in (["--up"], ["--down"]):
        print("usage: run_e2e.py [--only preempt|burst|pods | --up | --down]", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("FAIL e2e: needs root (the loopback cluster runs containerd and a kubelet)")
        return 1
    for need in (os.path.join(BUILD, "images", "gpuvisor-node-%s.oci.tar" % VERSION),
                 os.path.join(BUILD, "tests", "gv_probe")):
        if not os.path.exists(need):
            print("FAIL e2e: %s missing (make e2e builds it)" % need)
            return 1
    if sys.argv[1:] in (["--up"], ["--down"]):
        if not OWN:
            print("run_e2e.py %s: the loopback cluster only (unset KUBECONFIG)" % sys.argv[1])
            return 2
        try:
            (loopback_up if sys.argv[1] == "--up" else loopback_down)()
        except Exception as e:
            print("run_e2e.py %s: %s" % (sys.argv[1], e))
            return 1
        return 0
    t0 = time.time()
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    # The lock guards the loopback cluster's fixed ports: taken when this
    # run starts that cluster; on a $KUBECONFIG cluster whoever started it
    # owns it (the loopback one too: its --up caller holds the lock).
    with (k8s.Lock() if OWN else contextlib.nullcontext()):
        found = None
        try:
            if OWN:
                if not os.path.exists(os.path.join(k8s.BIN, "kubelet")):
                    subprocess.run([os.path.join(k8s.HARNESS, "build.sh")], check=True)
                k8s.start_cluster()
            api = k8s.Api()
            if not OWN:
                found = cluster_state(api)
            prepare_fakes()
            if OWN:
                add_pod_network(api)
                add_kube_proxy(api)
                import_images()
            run_checks(api)
        except Exception as e:
            check("e2e run", False, "aborted: %s" % str(e)[:600])
        except KeyboardInterrupt:
            check("e2e run", False, "interrupted")
        finally:
            save_logs()
            if OWN:
                k8s.stop_cluster()
                teardown_network()
            elif found is not None:
                try:
                    # --only stops before the suite's own uninstall
                    if not all(results) or ONLY:
                        remove_leftovers(api)
                    diff = state_diff(found, cluster_state(api))
                    check("the $KUBECONFIG cluster is left as it was found", not diff,
                          "; ".join("%s: -%s +%s" % (k, r[:4], a[:4]) for k, r, a in diff)[:800]
                          or "nodes, namespaces, cluster objects, images, iptables rules as before")
                except Exception as e:
                    check("the $KUBECONFIG cluster is left as it was found", False, "aborted: %s" % e)
            shutil.rmtree(WORK, ignore_errors=True)
    npass = sum(results)
    nfail = len(results) - npass
    print("e2e: %d passed, %d failed (%.0f s)" % (npass, nfail, time.time() - t0))
    return 0 if nfail == 0 and npass > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
