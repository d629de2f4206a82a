#!/usr/bin/env python3
"""GPU pods through the real kube-scheduler 1.20 and gpuvisor's extender,
against the same kube-scheduler binding plain pods, on the loopback cluster of
../shared/k8s (bench_e2e_bind.sh runs this; results in bench/results/e2e_bind.txt).

  - N fake nodes (Node objects with the agent's inventory and heartbeat and no
    kubelet: the harness runs no node lifecycle controller), 8 A100s each;
  - gpuvisor-scheduler (build/bin) on the host, extender on 127.0.0.1:8888;
  - kube-scheduler (the harness's 1.20 binary) with deploy/'s v1.20
    kube-scheduler config (v1beta1), leader election off and its client rate
    limit raised (qps = burst = 5000) so that the API client is not what is
    measured;
  - round "plain": M pods with no GPU resources (kube-scheduler does not
    call the extender: none of its managedResources) -> kube-scheduler binds;
  - round "gpu": M pods asking nvidia.com/gpumem -> filter and bind by the
    extender.
Rounds alternate plain, gpu, plain, gpu ... (GV_BENCH_ROUNDS pairs, 3) with
the deploy's configuration; then, for packing under kube-scheduler's node
sampling, one gpu and one plain round per percentageOfNodesToScore in
GV_BENCH_PCTS ("0,50,100"; 0 = kube-scheduler's adaptive default, about 10 %
at 5,000 nodes).  Pods are created before kube-scheduler starts (one burst
per round) and force-deleted after it, so every round starts from an empty
cluster.  Throughput is pods/(last - first "Successfully bound pod to node")
in kube-scheduler's log (microsecond timestamps).  Also printed, to say where
a bind's time goes: extender errors in kube-scheduler's log, the extender's
filter and bind latency (its /metrics), the API server's own time per
Binding (its /metrics), the TCP connections the extender opened to the API
server and the most open at once (sampled from /proc every 0.2 s), and the
CPU seconds each process used in the round.  Packing (gpu rounds): nodes and
GPUs used (from the pods' assignments), idle GPUs stranded on used nodes.
GV_BENCH_NODES / GV_BENCH_PODS override N / M (5000 / 1000).  GV_BENCH_EXT_B
names a second gpuvisor-scheduler binary: each pair of rounds then runs gpu
rounds with both (plain, gpu A, gpu B), the extender restarted between them,
for an alternated comparison of two builds.  The extender journals its
Bindings (--bind-journal-dir, in memory as deployed; docs/scheduler.md);
GV_BENCH_NO_JOURNAL=A or B runs that one without it (the journal's cost, A/B
with the same binary, both orders).
"""
import json
import math
import os
import re
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "e2e"))
import k8s  # noqa: E402
import yaml  # noqa: E402

N_NODES = int(os.environ.get("GV_BENCH_NODES", "5000"))
N_PODS = int(os.environ.get("GV_BENCH_PODS", "1000"))
ROUNDS = int(os.environ.get("GV_BENCH_ROUNDS", "3"))
PCTS = [int(x) for x in os.environ.get("GV_BENCH_PCTS", "100").split(",") if x.strip()]
BUILD = os.environ.get("BUILD", "build")
EXT = "127.0.0.1:8888"
KS_METRICS = "127.0.0.1:10261"
GPUS_PER_NODE = 8
PODS_PER_GPU = 10  # the fake inventory's split; 1000 MiB of 81559 fits 81
# kube-scheduler's log line for a failed extender call (the config it echoes
# at start names the URL too)
EXT_ERROR = re.compile(r"(?i)error|failed|reset by peer|refused|deadline exceeded|\btimeout|\bEOF")


def scheduler_config(path, pct=None):
    """deploy's v1.20 config as the bench runs it; pct overrides
    percentageOfNodesToScore (0: unset, kube-scheduler's adaptive default).
    Returns the value used (0 for unset)."""
    with open(os.path.join(k8s.ROOT, "deploy", "kubernetes", "config-v1beta1",
                           "kube-scheduler-config.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["leaderElection"] = {"leaderElect": False}
    # 1.20 serves healthz/metrics on 0.0.0.0:10251 unless told: the
    # harness's default kube-scheduler has that port.
    cfg["healthzBindAddress"] = KS_METRICS
    cfg["metricsBindAddress"] = KS_METRICS
    cfg["clientConnection"] = {"kubeconfig": os.path.join(k8s.RUN, "kubeconfig", "scheduler.conf"),
                               "qps": 5000, "burst": 5000}
    if pct is not None:
        cfg.pop("percentageOfNodesToScore", None)
        if pct:
            cfg["percentageOfNodesToScore"] = pct
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return cfg.get("percentageOfNodesToScore", 0)


def pod(ns, name, gpu):
    res = {"limits": {"nvidia.com/gpumem": "1000"}} if gpu else \
        {"requests": {"cpu": "10m", "memory": "16Mi"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulerName": "gpuvisor-scheduler", "automountServiceAccountToken": False,
                     "nodeSelector": {"gpuvisor.io/fake": "true"},
                     "containers": [{"name": "c", "image": "harness.local/busybox:1",
                                     "resources": res}]}}


def bound_times(logfile):
    """Seconds of day of every "Successfully bound pod to node" line, and
    the nodes kube-scheduler evaluated for each (its evaluatedNodes=)."""
    out, evaluated = [], []
    rx = re.compile(r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+)")
    ev = re.compile(r"evaluatedNodes=(\d+)")
    with open(logfile, errors="replace") as f:
        for line in f:
            if "Successfully bound pod to node" in line:
                m = rx.match(line)
                if m:
                    out.append(int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)))
                m = ev.search(line)
                if m:
                    evaluated.append(int(m.group(1)))
    return out, evaluated


def list_pods(api, ns):
    return api.ok("GET", "/api/v1/namespaces/%s/pods" % ns)["items"]


def metric_sum_count(text, name, labels):
    s = c = 0.0
    for line in text.splitlines():
        if line.startswith(name + "_sum{") or line.startswith(name + "_count{"):
            if all(lb in line for lb in labels):
                v = float(line.rsplit(" ", 1)[1])
                if line.startswith(name + "_sum{"):
                    s += v
                else:
                    c += v
    return s, c


def metric_value(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def get_text(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except Exception:
        return ""


def api_metrics(api):
    st, text = api.call("GET", "/metrics")
    return text if isinstance(text, str) else ""


def cpu_s(pid):
    """utime + stime of pid in seconds (0 when gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


def harness_pid(name):
    try:
        with open(os.path.join(k8s.RUN, "pids", name + ".pid")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError):
        return 0


class ConnSampler(threading.Thread):
    """The TCP connections pid holds to port 6443, sampled every 0.2 s from
    /proc: distinct connections seen (each a TCP + TLS handshake) and the
    most open at once.  Short-lived ones between samples are missed, so
    "opened" is a lower bound."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.seen, self.most, self.stop = pid, set(), 0, threading.Event()

    def sample(self):
        inodes = set()
        try:
            for fd in os.listdir("/proc/%d/fd" % self.pid):
                try:
                    t = os.readlink("/proc/%d/fd/%s" % (self.pid, fd))
                except OSError:
                    continue
                if t.startswith("socket:["):
                    inodes.add(t[8:-1])
            conns = set()
            for tab in ("tcp", "tcp6"):
                with open("/proc/%d/net/%s" % (self.pid, tab)) as f:
                    next(f)
                    for line in f:
                        p = line.split()
                        if p[9] in inodes and p[2].endswith(":192B") and p[3] == "01":
                            conns.add(p[1])
        except OSError:
            return
        self.seen |= conns
        self.most = max(self.most, len(conns))

    def run(self):
        while not self.stop.is_set():
            self.sample()
            time.sleep(0.2)


def force_delete_pods(api, ns):
    """Pods on fake nodes have no kubelet to finish a graceful deletion."""
    api.call("DELETE", "/api/v1/namespaces/%s/pods?gracePeriodSeconds=0" % ns)
    for _ in range(300):
        if not list_pods(api, ns):
            return
        time.sleep(0.5)
    raise RuntimeError("pods of %s not gone after 150 s" % ns)


def packing(items):
    nodes, gpus = set(), {}
    for p in items:
        a = (p["metadata"].get("annotations") or {}).get("gpuvisor.io/assignment", "")
        if not p["spec"].get("nodeName") or not a:
            continue
        nodes.add(p["spec"]["nodeName"])
        for part in a.split(";")[2:]:
            for dev in part.split("=", 1)[1].split(","):
                u = dev.split(":")[0]
                gpus[u] = gpus.get(u, 0) + 1
    partial = sum(1 for n in gpus.values() if n < PODS_PER_GPU)
    return {"nodes_used": len(nodes), "gpus_used": len(gpus), "gpus_partial": partial,
            "gpus_idle_on_used_nodes": len(nodes) * GPUS_PER_NODE - len(gpus)}


def run_round(api, ext_pid, kind, conf, pct):
    ns = "bench-" + kind
    t = time.time()
    api.parallel(lambda i: api.ok("POST", "/api/v1/namespaces/%s/pods" % ns,
                                  pod(ns, "p-%04d" % i, kind == "gpu")), range(N_PODS))
    k8s.log("%s (pct %s): %d pods created in %.1f s" % (kind, pct, N_PODS, time.time() - t))
    am0 = api_metrics(api)
    em0 = get_text("http://%s/metrics" % EXT)
    name = "kube-scheduler-bench"
    logfile = os.path.join(k8s.LOGS, name + ".log")
    if os.path.exists(logfile):
        os.unlink(logfile)
    pids = {"kube-apiserver": harness_pid("kube-apiserver"), "etcd": harness_pid("etcd"),
            "gpuvisor-scheduler": ext_pid}
    cpu0 = {k: cpu_s(v) for k, v in pids.items()}
    sampler = ConnSampler(ext_pid)
    sampler.start()
    ks = k8s.spawn(name, [os.path.join(k8s.BIN, "kube-scheduler"), "--config", conf,
                          "--secure-port=0", "--v=2"])
    pids["kube-scheduler"] = ks.pid
    cpu0["kube-scheduler"] = 0.0
    left, last_change = N_PODS, time.time()
    while time.time() - last_change < 60 and ks.poll() is None:
        time.sleep(1)
        now_left = sum(1 for p in list_pods(api, ns) if not p["spec"].get("nodeName"))
        if now_left != left:
            left, last_change = now_left, time.time()
        if left == 0:
            break
    time.sleep(1)  # the last binds' answers and log lines
    ksm = get_text("http://%s/metrics" % KS_METRICS)
    cpu = {k: cpu_s(v) - cpu0[k] for k, v in pids.items()}
    sampler.stop.set()
    sampler.join()
    k8s.stop(ks, name)
    times, evaluated = bound_times(logfile)
    with open(logfile, errors="replace") as f:
        ext_errors = sum(1 for line in f if "8888/gpuvisor" in line and EXT_ERROR.search(line))
    am1 = api_metrics(api)
    em1 = get_text("http://%s/metrics" % EXT)
    res = {"kind": kind, "pct": pct, "pods": N_PODS, "unbound": left, "bound_logged": len(times),
           "ext_errors": ext_errors, "cpu": cpu, "conns_opened": len(sampler.seen),
           "conns_most": sampler.most,
           "evaluated": statistics.mean(evaluated) if evaluated else 0}
    if len(times) > 1:
        span = max(times) - min(times)
        res["span_s"] = span
        res["pods_per_s"] = (len(times) - 1) / span if span > 0 else 0
    s0, c0 = metric_sum_count(am0, "apiserver_request_duration_seconds",
                              ['resource="pods"', 'subresource="binding"', 'verb="POST"'])
    s1, c1 = metric_sum_count(am1, "apiserver_request_duration_seconds",
                              ['resource="pods"', 'subresource="binding"', 'verb="POST"'])
    if c1 > c0:
        res["api_binding_ms"], res["api_binding_n"] = 1000 * (s1 - s0) / (c1 - c0), int(c1 - c0)
    # kube-scheduler's own time per pod (its process started this round)
    for what, mname, labels in (
            ("ks_algorithm_ms", "scheduler_scheduling_algorithm_duration_seconds", []),
            ("ks_e2e_ms", "scheduler_e2e_scheduling_duration_seconds", ['result="scheduled"']),
            ("ks_filter_ms", "scheduler_framework_extension_point_duration_seconds",
             ['extension_point="Filter"']),
            ("ks_score_ms", "scheduler_framework_extension_point_duration_seconds",
             ['extension_point="Score"'])):
        s, c = metric_sum_count(ksm.replace("_sum ", "_sum{} ").replace("_count ", "_count{} "),
                                mname, labels)
        if c > 0:
            res[what] = 1000 * s / c
    if kind == "gpu":
        for verb in ("filter", "bind"):
            lab = ['server="extender"', 'path="/gpuvisor/%s"' % verb]
            s0, c0 = metric_sum_count(em0, "gpuvisor_http_request_duration_seconds", lab)
            s1, c1 = metric_sum_count(em1, "gpuvisor_http_request_duration_seconds", lab)
            if c1 > c0:
                res["ext_%s_ms" % verb] = 1000 * (s1 - s0) / (c1 - c0)
                res["ext_%s_n" % verb] = int(c1 - c0)
        for k in ("connections_opened_total", "requests_queued_total", "queue_wait_seconds_total"):
            v0 = metric_value(em0, "gpuvisor_kube_" + k)
            v1 = metric_value(em1, "gpuvisor_kube_" + k)
            if v0 is not None and v1 is not None:
                res["kube_" + k] = v1 - v0
        res.update(packing(list_pods(api, ns)))
    force_delete_pods(api, ns)
    return res


def fmt_round(r):
    cpu = " ".join("%s %.1f" % (k, v) for k, v in sorted(r["cpu"].items()))
    out = ["%-5s pct %-3s bound %d/%d  %.1f pods/s (first to last bind %.2f s)  "
           "extender errors %d" % (r["kind"], r["pct"] or "dflt", r["pods"] - r["unbound"],
                                   r["pods"], r.get("pods_per_s", 0), r.get("span_s", 0),
                                   r["ext_errors"]),
           "      kube-scheduler per pod: %.0f nodes evaluated, algorithm %.2f ms (filter plugins %.2f, score %.2f), "
           "e2e %.2f ms; API server per Binding %.1f ms (n=%d)"
           % (r["evaluated"], r.get("ks_algorithm_ms", 0), r.get("ks_filter_ms", 0), r.get("ks_score_ms", 0),
              r.get("ks_e2e_ms", 0), r.get("api_binding_ms", 0), r.get("api_binding_n", 0)),
           "      CPU s in the round: " + cpu]
    if r["kind"].startswith("gpu") and "kube_requests_queued_total" in r:
        q = r["kube_requests_queued_total"]
        out.append("      extender's API client: connections opened %d, requests that waited for "
                   "one of its kept connections %d, mean wait %.1f ms"
                   % (r["kube_connections_opened_total"], q,
                      1000 * r["kube_queue_wait_seconds_total"] / q if q else 0))
    if r["kind"].startswith("gpu"):
        out.append("      extender: filter %.2f ms (n=%d), bind %.1f ms (n=%d); connections to "
                   "the API server seen %d, most at once %d"
                   % (r.get("ext_filter_ms", 0), r.get("ext_filter_n", 0), r.get("ext_bind_ms", 0),
                      r.get("ext_bind_n", 0), r["conns_opened"], r["conns_most"]))
        out.append("      packing: nodes used %d (fewest %d), GPUs used %d (fewest %d), "
                   "GPUs partly used %d, idle GPUs on used nodes %d"
                   % (r["nodes_used"], math.ceil(N_PODS / (GPUS_PER_NODE * PODS_PER_GPU)),
                      r["gpus_used"], math.ceil(N_PODS / PODS_PER_GPU), r["gpus_partial"],
                      r["gpus_idle_on_used_nodes"]))
    return "\n".join(out)


def mean_sd(xs):
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0) if xs else (0, 0)


def main():
    if os.geteuid() != 0 or not os.path.exists(os.path.join(k8s.BIN, "kubelet")):
        print("SKIPPED: needs root and the loopback Kubernetes of ../shared/k8s built "
              "(../shared/k8s/build.sh)", flush=True)
        return 0
    tmp = os.path.join(k8s.K8S_ROOT, "bench-e2e")
    os.makedirs(tmp, exist_ok=True)
    ext = None
    results = []
    with k8s.Lock():
        try:
            k8s.start_cluster()
            api = k8s.Api()
            t = time.time()
            k8s.create_fake_nodes(api, N_NODES)
            k8s.log("%d fake nodes in %.1f s" % (N_NODES, time.time() - t))
            sconf = os.path.join(tmp, "scheduler.json")
            with open(os.path.join(k8s.ROOT, "deploy", "base", "config", "scheduler.json")) as f:
                cfg = json.load(f)
            cfg["heartbeatTimeoutSeconds"] = 86400  # fake nodes: no agent refreshes it
            with open(sconf, "w") as f:
                json.dump(cfg, f)
            bins = {"A": os.path.join(k8s.ROOT, BUILD, "bin", "gpuvisor-scheduler")}
            if os.environ.get("GV_BENCH_EXT_B"):
                bins["B"] = os.environ["GV_BENCH_EXT_B"]

            # in memory, as the deploy's emptyDir (medium: Memory)
            journal = "/dev/shm/gv-bench-binds"

            def start_ext(which):
                args = [bins[which], "--config", sconf, "--kubeconfig", k8s.ADMIN_CONF,
                        "--extender-listen", EXT, "--insecure-unsigned-placements",
                        "--log-level", "warn"]
                if os.environ.get("GV_BENCH_NO_JOURNAL") != which:
                    args += ["--bind-journal-dir", journal]
                p = k8s.spawn("gpuvisor-scheduler-bench", args)
                for _ in range(600):
                    if get_text("http://%s/readyz" % EXT):
                        break
                    time.sleep(0.5)
                return p
            ext, ext_which = start_ext("A"), "A"
            for kind in ("plain", "gpu"):
                ns = "bench-" + kind
                api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": ns}})
                k8s.wait_sa(api, ns)
            # pct 0 = kube-scheduler's adaptive default (percentageOfNodesToScore unset)
            deploy_pct = scheduler_config(os.path.join(tmp, "kube-scheduler-deploy.yaml"))
            if len(bins) == 1:
                triple = [("plain", 0, "A"), ("gpu", 0, "A")] + \
                    ([("gpu", deploy_pct, "A")] if deploy_pct else [])
            else:
                triple = [("plain", 0, "A"), ("gpu", 0, "A"), ("gpu", 0, "B")]
            plan = [t for _ in range(ROUNDS) for t in triple]
            if deploy_pct and len(bins) == 1:
                plan.append(("plain", deploy_pct, "A"))
            plan += [(k, p, "A") for p in PCTS for k in ("gpu", "plain")]
            for kind, pct, which in plan:
                if kind == "gpu" and which != ext_which:
                    k8s.stop(ext, "gpuvisor-scheduler-bench")
                    ext, ext_which = start_ext(which), which
                c = os.path.join(tmp, "kube-scheduler-pct%d.yaml" % pct)
                scheduler_config(c, pct)
                r = run_round(api, ext.pid, kind, c, pct)
                if len(bins) > 1 and kind == "gpu":
                    r["kind"] = "gpu" + which
                results.append(r)
                print(fmt_round(r), flush=True)
        finally:
            k8s.stop(ext, "gpuvisor-scheduler-bench")
            k8s.stop_cluster()
    print("kube-scheduler v1.20.2, %d fake nodes x %d GPUs, %d pods per round, one burst each; "
          "rounds alternate as listed; deploy's percentageOfNodesToScore %s"
          % (N_NODES, GPUS_PER_NODE, N_PODS, deploy_pct or "unset (adaptive)"))
    for r in results:
        print(fmt_round(r))
    groups = {}
    for r in results:
        groups.setdefault((r["kind"], r["pct"]), []).append(r)
    print("# by kind and sampling (pct dflt: kube-scheduler's adaptive default, about 10 %% of "
          "%d nodes)" % N_NODES)
    for (kind, pct), rs in groups.items():
        rates = [r.get("pods_per_s", 0) for r in rs]
        m, sd = mean_sd(rates)
        line = "%-5s pct %-4s n=%d pods/s mean %.1f sd %.1f (%s); kube-scheduler filter plugins " \
            "%.2f ms, score %.2f ms per pod" % (
                kind, pct or "dflt", len(rs), m, sd, " ".join("%.1f" % x for x in rates),
                statistics.mean(r.get("ks_filter_ms", 0) for r in rs),
                statistics.mean(r.get("ks_score_ms", 0) for r in rs))
        if kind.startswith("gpu"):
            line += "; nodes used %s, GPUs used %s, idle GPUs on used nodes %s" % tuple(
                "/".join(str(r[k]) for r in rs)
                for k in ("nodes_used", "gpus_used", "gpus_idle_on_used_nodes"))
        print(line)

    def rates(kind, pct):
        return [r.get("pods_per_s", 0) for r in groups.get((kind, pct), [])]
    gpu_kind = "gpuA" if len(bins) > 1 else "gpu"
    plain, gpu = rates("plain", 0), rates(gpu_kind, 0)
    pm, gm = mean_sd(plain)[0], mean_sd(gpu)[0]
    print("gpu_vs_plain_bind_rate %.2f (both at kube-scheduler's default sampling; ratio of means "
          "%.1f / %.1f; per pair %s)" % (gm / pm if pm else 0, gm, pm,
                                         " ".join("%.2f" % (g / p) for p, g in zip(plain, gpu) if p)))
    if len(bins) > 1:
        b = rates("gpuB", 0)
        print("gpuB_vs_gpuA %.2f (%s vs %s)" % (mean_sd(b)[0] / gm if gm else 0, bins["B"],
                                                bins["A"]))
    elif deploy_pct:
        d = rates("gpu", deploy_pct)
        dm = mean_sd(d)[0]
        print("gpu_as_deployed_vs_plain %.2f (gpu pods at the deploy's percentageOfNodesToScore %d, "
              "%.1f pods/s, vs plain pods at kube-scheduler's default, %.1f pods/s)"
              % (dm / pm if pm else 0, deploy_pct, dm, pm))
    ok = all(r["unbound"] == 0 for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
