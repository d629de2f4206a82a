#!/usr/bin/env python3
"""GPU pods through the real kube-scheduler 1.20 and gpuvisor's extender,
against the same kube-scheduler binding plain pods, on the loopback cluster of
../shared/k8s (bench_e2e_bind.sh runs this; results in bench/results/e2e_bind.txt).

  - N fake nodes (Node objects with the agent's inventory and heartbeat and no
    kubelet: the harness runs no node lifecycle controller), 8 A100s each;
  - gpuvisor-scheduler (build/bin) on the host, extender on 127.0.0.1:8888;
  - kube-scheduler (the harness's 1.20 binary) with deploy/'s
    kube-scheduler-config.yaml, moved to the v1beta1 API 1.20 reads, leader
    election off and its client rate limit raised (qps = burst = 5000) so
    that the API client is not what is measured;
  - round "plain": M pods with no GPU resources (kube-scheduler does not
    call the extender: none of its managedResources) -> kube-scheduler binds;
  - round "gpu": M pods asking nvidia.com/gpumem -> filter and bind by the
    extender.
Pods are created before kube-scheduler starts (one burst).  Throughput is
pods/(last - first "Successfully bound pod to node") in kube-scheduler's log
(microsecond timestamps).  Also printed: extender errors in kube-scheduler's
log (any line naming the extender's URL), the extender's filter and bind
latency (its /metrics), and the API server's own time for the bind's two
calls (PATCH pod, POST pods/binding; its /metrics), which says where a bind's
time goes.  GV_BENCH_NODES / GV_BENCH_PODS override N / M (5000 / 1000).
"""
import json
import os
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "e2e"))
import k8s  # noqa: E402
import yaml  # noqa: E402

N_NODES = int(os.environ.get("GV_BENCH_NODES", "5000"))
N_PODS = int(os.environ.get("GV_BENCH_PODS", "1000"))
BUILD = os.environ.get("BUILD", "build")
EXT = "127.0.0.1:8888"
# kube-scheduler's log line for a failed extender call (the config it echoes
# at start names the URL too)
EXT_ERROR = re.compile(r"(?i)error|failed|reset by peer|refused|deadline exceeded|\btimeout|\bEOF")


def scheduler_config(path):
    with open(os.path.join(k8s.ROOT, "deploy", "kubernetes", "config-v1beta1", "kube-scheduler-config.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["apiVersion"] = "kubescheduler.config.k8s.io/v1beta1"
    cfg["leaderElection"] = {"leaderElect": False}
    # 1.20 serves healthz/metrics on 0.0.0.0:10251 unless told: the
    # harness's default kube-scheduler has that port.
    cfg["healthzBindAddress"] = "127.0.0.1:10261"
    cfg["metricsBindAddress"] = "127.0.0.1:10261"
    cfg["clientConnection"] = {"kubeconfig": os.path.join(k8s.RUN, "kubeconfig", "scheduler.conf"),
                               "qps": 5000, "burst": 5000}
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)


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
    """Seconds of day of every "Successfully bound pod to node" line."""
    out = []
    rx = re.compile(r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+)")
    with open(logfile, errors="replace") as f:
        for line in f:
            if "Successfully bound pod to node" in line:
                m = rx.match(line)
                if m:
                    out.append(int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)))
    return out


def unbound(api, ns):
    items = api.ok("GET", "/api/v1/namespaces/%s/pods" % ns)["items"]
    return sum(1 for p in items if not p["spec"].get("nodeName"))


def metric_sum_count(text, name, labels):
    s = c = 0.0
    for line in text.splitlines():
        if line.startswith(name + "_sum{") or line.startswith(name + "_count{"):
            if all(l in line for l in labels):
                v = float(line.rsplit(" ", 1)[1])
                if line.startswith(name + "_sum{"):
                    s += v
                else:
                    c += v
    return s, c


def api_metrics(api):
    st, text = api.call("GET", "/metrics")
    return text if isinstance(text, str) else ""


def ext_metrics():
    with urllib.request.urlopen("http://%s/metrics" % EXT, timeout=10) as r:
        return r.read().decode()


def run_round(api, kind, conf):
    ns = "bench-" + kind
    api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": ns}})
    k8s.wait_sa(api, ns)
    t = time.time()
    api.parallel(lambda i: api.ok("POST", "/api/v1/namespaces/%s/pods" % ns,
                                  pod(ns, "p-%04d" % i, kind == "gpu")), range(N_PODS))
    k8s.log("%s: %d pods created in %.1f s" % (kind, N_PODS, time.time() - t))
    am0 = api_metrics(api)
    em0 = ext_metrics() if kind == "gpu" else ""
    name = "kube-scheduler-bench-" + kind
    logfile = os.path.join(k8s.LOGS, name + ".log")
    if os.path.exists(logfile):
        os.unlink(logfile)
    ks = k8s.spawn(name, [os.path.join(k8s.BIN, "kube-scheduler"), "--config", conf,
                          "--port=0", "--secure-port=0", "--v=2"])
    t0 = time.time()
    left, last_change = N_PODS, time.time()
    while time.time() - last_change < 60 and ks.poll() is None:
        time.sleep(1)
        now_left = unbound(api, ns)
        if now_left != left:
            left, last_change = now_left, time.time()
        if left == 0:
            break
    wall = time.time() - t0
    k8s.stop(ks, name)
    times = bound_times(logfile)
    with open(logfile, errors="replace") as f:
        ext_errors = sum(1 for line in f if "8888/gpuvisor" in line and EXT_ERROR.search(line))
    am1 = api_metrics(api)
    res = {"kind": kind, "pods": N_PODS, "unbound": left, "wall_s": wall, "bound_logged": len(times),
           "ext_errors": ext_errors}
    if len(times) > 1:
        span = max(times) - min(times)
        res["span_s"] = span
        res["pods_per_s"] = (len(times) - 1) / span if span > 0 else 0
    for what, labels in (("patch", ['resource="pods"', 'subresource=""', 'verb="PATCH"']),
                         ("binding", ['resource="pods"', 'subresource="binding"', 'verb="POST"'])):
        s0, c0 = metric_sum_count(am0, "apiserver_request_duration_seconds", labels)
        s1, c1 = metric_sum_count(am1, "apiserver_request_duration_seconds", labels)
        if c1 > c0:
            res["api_%s_ms" % what] = 1000 * (s1 - s0) / (c1 - c0)
            res["api_%s_n" % what] = int(c1 - c0)
    if kind == "gpu":
        em1 = ext_metrics()
        for verb in ("filter", "bind"):
            lab = ['server="extender"', 'path="/gpuvisor/%s"' % verb]
            s0, c0 = metric_sum_count(em0, "gpuvisor_http_request_duration_seconds", lab)
            s1, c1 = metric_sum_count(em1, "gpuvisor_http_request_duration_seconds", lab)
            if c1 > c0:
                res["ext_%s_ms" % verb] = 1000 * (s1 - s0) / (c1 - c0)
                res["ext_%s_n" % verb] = int(c1 - c0)
    api.ok("DELETE", "/api/v1/namespaces/%s" % ns)
    return res


def main():
    if os.geteuid() != 0 or not os.path.exists(os.path.join(k8s.BIN, "kubelet")):
        print("bench_e2e_bind: needs root and the loopback Kubernetes built "
              "(../shared/k8s/build.sh)", file=sys.stderr)
        return 1
    tmp = os.path.join(k8s.K8S_ROOT, "bench-e2e")
    os.makedirs(tmp, exist_ok=True)
    ext = None
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
            ext = k8s.spawn("gpuvisor-scheduler-bench",
                            [os.path.join(k8s.ROOT, BUILD, "bin", "gpuvisor-scheduler"),
                             "--config", sconf, "--kubeconfig", k8s.ADMIN_CONF,
                             "--extender-listen", EXT, "--insecure-unsigned-placements",
                             "--log-level", "warn"])
            for _ in range(600):
                try:
                    with urllib.request.urlopen("http://%s/readyz" % EXT, timeout=2) as r:
                        if r.status == 200:
                            break
                except Exception:
                    pass
                time.sleep(0.5)
            conf = os.path.join(tmp, "kube-scheduler.yaml")
            scheduler_config(conf)
            results = [run_round(api, "plain", conf), run_round(api, "gpu", conf)]
        finally:
            k8s.stop(ext, "gpuvisor-scheduler-bench")
            k8s.stop_cluster()
    plain, gpu = results
    print("kube-scheduler %s, %d fake nodes x 8 GPUs, %d pods per round, one burst each"
          % ("v1.20.2", N_NODES, N_PODS))
    for r in results:
        print("%-5s pods bound %d/%d  throughput %.1f pods/s (first to last bind %.2f s)  "
              "extender errors in kube-scheduler's log %d"
              % (r["kind"], r["pods"] - r["unbound"], r["pods"], r.get("pods_per_s", 0),
                 r.get("span_s", 0), r["ext_errors"]))
        print("      API server time: PATCH pod %.1f ms (n=%d), POST binding %.1f ms (n=%d)"
              % (r.get("api_patch_ms", 0), r.get("api_patch_n", 0),
                 r.get("api_binding_ms", 0), r.get("api_binding_n", 0)))
    print("gpu   extender: filter %.2f ms (n=%d), bind %.1f ms (n=%d)"
          % (gpu.get("ext_filter_ms", 0), gpu.get("ext_filter_n", 0),
             gpu.get("ext_bind_ms", 0), gpu.get("ext_bind_n", 0)))
    ratio = gpu.get("pods_per_s", 0) / plain["pods_per_s"] if plain.get("pods_per_s") else 0
    print("gpu_vs_plain_bind_rate %.2f" % ratio)
    return 0 if gpu["unbound"] == 0 and plain["unbound"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
