#!/usr/bin/python3
"""gpuvisor-scheduler's /metrics at 1,000 nodes x 8 GPUs on the kube-apiserver
stand-in: bytes and time of a scrape with HAMi's names (default) and with
--hami-metrics off, and of the dashboard's /api/state.  Median of 5 scrapes,
client side (urllib over loopback)."""
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
        n = len(r.read())
    return n, time.monotonic() - t0


def measure(stand, url, what):
    runs = [scrape(url) for _ in range(5)]
    size = runs[-1][0]
    med = statistics.median(t for _, t in runs)
    print("%-44s %10.2f MB  median %7.1f ms" % (what, size / 1e6, med * 1000))


stand = obs_stand.Stand(gvtest.scratch("benchm"), extra_seed=nodes())
try:
    print("cluster: %d nodes x 8 GPUs (+ the 5-node test fixture)" % NODES)
    stand.start_scheduler()
    measure(stand, stand.ext + "/metrics", "/metrics (gpuvisor + HAMi names)")
    measure(stand, stand.dash + "/api/state", "/api/state (dashboard)")
    stand.stop_scheduler()
    stand.start_scheduler("--hami-metrics", "off")
    measure(stand, stand.ext + "/metrics", "/metrics --hami-metrics off")
finally:
    stand.stop()
