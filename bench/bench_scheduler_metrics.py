#!/usr/bin/python3
"""gpuvisor-scheduler's /metrics at 1,000 nodes x 8 GPUs (GV_BENCH_NODES) on the
kube-apiserver stand-in: bytes and time of a scrape by default (per-node and
cluster aggregates), with --metrics-per-gpu (per-GPU and per-container series,
HAMi's names on) and with --metrics-per-gpu --hami-metrics off, and of the
dashboard's /api/state; the default's series count and its largest family.
Median of 5 scrapes, client side (urllib over loopback)."""
import os
import statistics
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "dashboard"))
import cluster_fixture  # noqa: E402
import obs_stand  # noqa: E402
from obs_stand import gvtest  # noqa: E402

NODES = int(os.environ.get("GV_BENCH_NODES", "1000"))  # GV_BENCH_NODES=5000: the issue-27 size


def nodes():
    now = time.time()
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-%05d" % k, "annotations": {
        "gpuvisor.io/node-gpus": cluster_fixture.inventory("node-%05d" % k, cluster_fixture.A100, 8),
        "gpuvisor.io/node-heartbeat": cluster_fixture.rfc3339(now)}}} for k in range(NODES)]


def scrape(url):
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return len(body), time.monotonic() - t0


def series(url):
    """Series in the exposition, and the largest family's (name, count)."""
    with urllib.request.urlopen(url, timeout=120) as r:
        lines = [ln for ln in r.read().decode().splitlines() if ln and not ln.startswith("#")]
    fams = {}
    for ln in lines:
        name = ln.split("{", 1)[0].split(" ", 1)[0]
        for suf in ("_bucket", "_sum", "_count"):  # a histogram's lines: one family
            if name.endswith(suf) and name.startswith("gpuvisor_") and "duration" in name:
                name = name[:-len(suf)]
        fams[name] = fams.get(name, 0) + 1
    big = max(fams.items(), key=lambda kv: kv[1])
    return len(lines), big


def measure(stand, url, what):
    runs = [scrape(url) for _ in range(5)]
    size = runs[-1][0]
    med = statistics.median(t for _, t in runs)
    print("%-44s %10.2f MB  median %7.1f ms" % (what, size / 1e6, med * 1000))


stand = obs_stand.Stand(gvtest.scratch("benchm"), extra_seed=nodes())
try:
    print("cluster: %d nodes x 8 GPUs (+ the 5-node test fixture)" % NODES)
    stand.start_scheduler()
    measure(stand, stand.ext + "/metrics", "/metrics (default: per node)")
    n, (fam, k) = series(stand.ext + "/metrics")
    print("  default: %d series, largest family %s with %d" % (n, fam, k))
    measure(stand, stand.dash + "/api/state", "/api/state (dashboard)")
    stand.stop_scheduler()
    stand.start_scheduler("--metrics-per-gpu")
    measure(stand, stand.ext + "/metrics", "/metrics --metrics-per-gpu (+ HAMi names)")
    stand.stop_scheduler()
    stand.start_scheduler("--metrics-per-gpu", "--hami-metrics", "off")
    measure(stand, stand.ext + "/metrics", "/metrics --metrics-per-gpu --hami-metrics off")
finally:
    stand.stop()
