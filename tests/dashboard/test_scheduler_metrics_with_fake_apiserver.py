#!/usr/bin/python3
"""gpuvisor-scheduler's /metrics parsed with a real Prometheus text parser
(prometheus_client, Debian python3-prometheus-client), against a known
cluster on the kube-apiserver stand-in (cluster_fixture.py).  By default
the exposition is bounded: per-node and cluster aggregates, at most one
series per node and family, no per-GPU or per-container series.  With
--metrics-per-gpu: HAMi's allocation series with HAMi's labels and units,
gpuvisor's own per-GPU series, and the per-node sums agree with them.
Filter latency histograms and pending pods with their top reason.  (The
size at 5,000 nodes is measured by bench/bench_scheduler_metrics.py, not
here.)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import obs_stand  # noqa: E402
from obs_stand import cluster_fixture, gvtest  # noqa: E402

t = gvtest.Tap()
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    t.skip("scheduler metrics", "python3-prometheus-client not installed")
    t.done()
if not os.path.exists(obs_stand.SCHED_BIN):
    t.skip("scheduler metrics", "gpuvisor-scheduler not built")
    t.done()

MIB = 1024 * 1024
PER_GPU = ("gpuvisor_gpu_", "hami_gpu_", "hami_node_gpu_", "hami_vgpu_")
NODE_FAMS = ("gpuvisor_node_gpus", "gpuvisor_node_gpu_memory_mib", "gpuvisor_node_gpu_memory_allocated_mib",
             "gpuvisor_node_gpu_cores_allocated_percent", "gpuvisor_node_gpu_tasks", "gpuvisor_node_gpus_shared")


def node_expected():
    """The per-node sums the scheduler should export, from the fixture."""
    exp = cluster_fixture.expected()
    want = {f: {} for f in NODE_FAMS}
    for node, model, n, age in cluster_fixture.NODES:
        if model is None:
            continue
        us = [cluster_fixture.uuid(node, i) for i in range(n)]
        want["gpuvisor_node_gpus"][node] = n
        want["gpuvisor_node_gpu_memory_mib"][node] = n * model[1]
        want["gpuvisor_node_gpu_memory_allocated_mib"][node] = sum(exp["gpu_mem"].get(u, 0) for u in us)
        want["gpuvisor_node_gpu_cores_allocated_percent"][node] = sum(exp["gpu_cores"].get(u, 0) for u in us)
        want["gpuvisor_node_gpu_tasks"][node] = sum(exp["gpu_tasks"].get(u, 0) for u in us)
        want["gpuvisor_node_gpus_shared"][node] = sum(exp["gpu_tasks"].get(u, 0) > 1 for u in us)
    return want


stand = obs_stand.Stand(gvtest.scratch("obsm"))
try:
    # the default exposition: bounded by the number of nodes
    stand.start_scheduler()
    fams = {f.name: f for f in text_string_to_metric_families(obs_stand.http("GET", stand.ext + "/metrics")[1])}
    per_gpu = sorted(n for n in fams if n.startswith(PER_GPU))
    t.ok(not per_gpu, "default /metrics: no per-GPU or per-container family", per_gpu)
    gpu_nodes = [n for n, model, k, age in cluster_fixture.NODES if model is not None]
    over = {n: len(f.samples) for n, f in fams.items() if len(f.samples) > len(gpu_nodes)
            and n != "gpuvisor_scheduler_filter_duration_seconds"}  # histogram: fixed buckets
    t.ok(not over, "default /metrics: no family has more series than the %d GPU nodes" % len(gpu_nodes), over)
    labelled = sorted({k for f in fams.values() for smp in f.samples for k in smp.labels}
                      & {"gpu", "device_uuid", "device_index", "container_index"})
    t.ok(not labelled, "default /metrics: no series carries a GPU or container label", labelled)
    want = node_expected()
    for fam in NODE_FAMS:
        got = {smp.labels["node"]: smp.value for smp in fams[fam].samples} if fam in fams else None
        t.ok(got == want[fam], "%s: one series per GPU node, the fixture's sum" % fam, (got, want[fam]))
    clus = {n: [smp.value for smp in fams[n.replace("_node_", "_cluster_")].samples]
            for n in NODE_FAMS if n.replace("_node_", "_cluster_") in fams}
    wclus = {n: [sum(want[n].values())] for n in NODE_FAMS}
    t.ok(clus == wclus, "cluster aggregates: the sums over all nodes", (clus, wclus))
    rc, log = stand.stop_scheduler()
    t.ok(rc == 0, "scheduler (default metrics) exits cleanly", log[-3000:])

    # opted in: the per-GPU and per-container series come back
    stand.start_scheduler("--metrics-per-gpu")
    answers = obs_stand.drive_filters(stand, fitting=False)
    code, text = obs_stand.http("GET", stand.ext + "/metrics")
    t.ok(code == 200, "/metrics answers 200")
    try:
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        t.ok(True, "exposition parses with prometheus_client")
    except Exception as e:  # the parser's own error is the diagnosis
        t.ok(False, "exposition parses with prometheus_client", e)
        fams = {}

    def samples(name, suffix=""):
        f = fams.get(name)
        return [s for s in f.samples if s.name == name + suffix] if f else []

    exp = cluster_fixture.expected()
    gpus = {}  # uuid -> (node, index, model, MiB)
    for node, model, n, age in cluster_fixture.NODES:
        for i in range(n):
            gpus[cluster_fixture.uuid(node, i)] = (node, i, model[0], model[1])

    # HAMi per-GPU series: every GPU once, labels as HAMi's scheduler writes them
    lim = {s.labels["device_uuid"]: s for s in samples("hami_gpu_memory_limit_bytes")}
    t.ok(set(lim) == set(gpus), "hami_gpu_memory_limit_bytes: one series per GPU (%d)" % len(gpus),
         sorted(set(lim) ^ set(gpus)))
    bad = [u for u, s in lim.items()
           if s.value != gpus[u][3] * MIB or s.labels["node"] != gpus[u][0]
           or s.labels["device_index"] != str(gpus[u][1])
           or s.labels["device_type"] != "NVIDIA-" + gpus[u][2] or s.labels["zone"] != "vGPU"]
    t.ok(not bad, "memory limit in bytes with node/device_index/device_type(NVIDIA-<model>)/zone labels", bad)
    alloc = {s.labels["device_uuid"]: s for s in samples("hami_gpu_memory_allocated_bytes")}
    bad = [u for u in gpus if alloc.get(u) is None
           or alloc[u].value != exp["gpu_mem"].get(u, 0) * MIB or alloc[u].labels.get("device_cores") != "100"]
    t.ok(not bad, "hami_gpu_memory_allocated_bytes equals the fixture's slices per GPU", bad)
    cores = {s.labels["device_uuid"]: s.value for s in samples("hami_gpu_core_allocated_ratio")}
    bad = [u for u in gpus if cores.get(u) != exp["gpu_cores"].get(u, 0)]
    t.ok(not bad, "hami_gpu_core_allocated_ratio in percent (0-100) per GPU", bad)
    shared = {s.labels["device_uuid"]: s.value for s in samples("hami_gpu_shared_count")}
    bad = [u for u in gpus if shared.get(u) != exp["gpu_tasks"].get(u, 0)]
    t.ok(not bad, "hami_gpu_shared_count counts the containers on each GPU", bad)
    ov = {s.labels["device_uuid"]: s for s in samples("hami_node_gpu_overview")}
    bad = [u for u in gpus if ov.get(u) is None or ov[u].value != exp["gpu_mem"].get(u, 0) * MIB
           or ov[u].labels["device_memory_limit"] != str(gpus[u][3])]
    t.ok(not bad, "hami_node_gpu_overview: allocated bytes, capacity in MiB as a label", bad)
    ratio = {s.labels["device_uuid"]: s.value for s in samples("hami_node_gpu_memory_allocated_ratio")}
    u0 = cluster_fixture.uuid("gpu-a100-1", 0)
    t.ok(abs(ratio.get(u0, -1) - (40960 + 20480) / 81920) < 1e-9,
         "hami_node_gpu_memory_allocated_ratio is a 0-1 fraction", ratio.get(u0))

    # per-container allocations
    vmem = {(s.labels["namespace"], s.labels["pod"], s.labels["container_index"], s.labels["device_uuid"]): s
            for s in samples("hami_vgpu_memory_allocated_bytes")}
    want = {}
    for ns, pod, node, cname, u, mib, c in exp["vgpu"]:
        spec = [x for x in cluster_fixture.objects() if x["kind"] == "Pod" and x["metadata"]["name"] == pod][0]
        idx = [k for k, sc in enumerate(spec["spec"]["containers"]) if sc["name"] == cname][0]
        want[(ns, pod, str(idx), u)] = (mib, c, node)
    bound = {k: v for k, v in vmem.items() if k[1] in {p[1] for p in cluster_fixture.PODS}}
    t.ok(set(bound) == set(want), "hami_vgpu_memory_allocated_bytes: one series per container and GPU",
         sorted(set(bound) ^ set(want)))
    bad = [k for k, (mib, c, node) in want.items()
           if k not in vmem or vmem[k].value != mib * MIB or vmem[k].labels["node"] != node]
    t.ok(not bad, "per-container memory in bytes, on the right node", bad)
    t.ok(("inference", "llama-serve-7b", "1", cluster_fixture.uuid("gpu-a100-1", 2)) in vmem,
         "container_index is the position in the pod spec (a GPU-less container first counts)")
    vcore = {(s.labels["namespace"], s.labels["pod"], s.labels["container_index"], s.labels["device_uuid"]): s.value
             for s in samples("hami_vgpu_core_allocated_ratio")}
    bad = [k for k, (mib, c, node) in want.items() if vcore.get(k) != c]
    t.ok(not bad, "hami_vgpu_core_allocated_ratio in percent per container", bad)

    # gpuvisor's own series are still there and agree
    own = {s.labels["gpu"]: s.value for s in samples("gpuvisor_gpu_memory_allocated_mib")}
    t.ok(all(own.get(u) == exp["gpu_mem"].get(u, 0) for u in gpus),
         "gpuvisor_gpu_memory_allocated_mib kept and consistent")
    # the per-node sums stay, and agree with the per-GPU series
    sums = {}
    for u, v in own.items():
        sums[gpus[u][0]] = sums.get(gpus[u][0], 0) + v
    node_mem = {s.labels["node"]: s.value for s in samples("gpuvisor_node_gpu_memory_allocated_mib")}
    t.ok(node_mem == sums and len(node_mem) == 4,
         "--metrics-per-gpu: gpuvisor_node_gpu_memory_allocated_mib is the sum of the node's GPUs", (node_mem, sums))

    # a fitting filter reserves a slice: exactly one GPU grows by it
    answers.update(obs_stand.drive_fitting(stand))
    before = {u: s.value for u, s in alloc.items()}
    text = obs_stand.http("GET", stand.ext + "/metrics")[1]
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    after = {s.labels["device_uuid"]: s.value for s in samples("hami_gpu_memory_allocated_bytes")}
    grew = {u: after[u] - before[u] for u in after if after[u] != before.get(u)}
    t.ok(list(grew.values()) == [8192 * MIB], "a reservation counts on exactly one GPU, 8192 MiB", grew)
    # filter outcomes
    t.ok("NodeNames" in str(answers["small-infer"][1]) and answers["small-infer"][0] == 200,
         "a small slice fits (reserved at filter)", answers["small-infer"])
    res = {s.labels["result"]: s.value for s in samples("gpuvisor_scheduler_filter_duration_seconds", "_count")}
    t.ok(res == {"fit": 1, "nofit": 1, "invalid": 1, "not_gpu": 1},
         "filter latency histogram counts each outcome once", res)
    inf = [s for s in samples("gpuvisor_scheduler_filter_duration_seconds", "_bucket")
           if s.labels["le"] == "+Inf" and s.labels["result"] == "nofit"]
    t.ok(len(inf) == 1 and inf[0].value == 1, "histogram has cumulative buckets up to +Inf")

    pend = {s.labels["pod"]: s.labels for s in samples("gpuvisor_scheduler_pending_pod")}
    t.ok(set(pend) == {"big-train", "bad-cores"}, "pending pods listed by name", pend)
    big = pend.get("big-train", {})
    t.ok(big.get("reason") == "insufficient_gpu" and big.get("message", "").startswith("3/5 nodes:"),
         "top failure reason: the most common one over the candidates, counted", big)
    t.ok("gpucores" in pend.get("bad-cores", {}).get("message", "")
         and pend.get("bad-cores", {}).get("reason") == "invalid_request",
         "invalid request: the engine's message", pend.get("bad-cores"))
    # the same pod, asking for less, fits: it leaves the pending list with its reason
    stand.filter("ml-train", "big-train", "p-big", [obs_stand.gpu_container("t", 1, 1024, 10)],
                 obs_stand.ALL_NODES)
    fams = {f.name: f for f in text_string_to_metric_families(obs_stand.http("GET", stand.ext + "/metrics")[1])}
    pend = {s.labels["pod"] for s in samples("gpuvisor_scheduler_pending_pod")}
    t.ok(pend == {"bad-cores"}, "a pod placed at a later filter is no longer pending", pend)
    frag = samples("gpuvisor_cluster_fragmentation_ratio")
    t.ok(len(frag) == 1 and 0 <= frag[0].value <= 1, "fragmentation ratio exported (0-1)", frag)
    idle = samples("gpuvisor_cluster_idle_gpus")
    unused = [x for x in samples("hami_gpu_shared_count") if x.value == 0]
    t.ok(len(idle) == 1 and idle[0].value == len(unused) > 0,
         "idle GPUs exported: the GPUs no container shares", (idle, len(unused)))

    # a pod that finishes frees its slices in every family
    code, _ = obs_stand.http("PATCH", stand.api_url + "/api/v1/namespaces/inference/pods/ocr/status",
                             {"status": {"phase": "Succeeded"}}, "application/merge-patch+json")
    gone = False
    for _ in range(200):
        text = obs_stand.http("GET", stand.ext + "/metrics")[1]
        if 'pod="ocr"' not in text:
            gone = True
            break
        import time
        time.sleep(0.05)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    u = cluster_fixture.uuid("gpu-t4-1", 1)
    t.ok(gone and [s.value for s in samples("hami_gpu_memory_allocated_bytes") if s.labels["device_uuid"] == u] == [0],
         "finished pod: its container series vanish and its GPU reads 0 bytes")
    rc, log = stand.stop_scheduler()
    t.ok(rc == 0 and "Sanitizer" not in log and "runtime error" not in log,
         "scheduler exits cleanly on SIGTERM (no sanitizer report)", log[-3000:])

    # HAMi's names can be switched off, also with the per-GPU series on
    stand.start_scheduler("--hami-metrics", "off", "--metrics-per-gpu")
    text = obs_stand.http("GET", stand.ext + "/metrics")[1]
    names = {f.name for f in text_string_to_metric_families(text)}
    t.ok(not any(n.startswith("hami_") for n in names) and "gpuvisor_gpu_memory_allocated_mib" in names
         and "gpuvisor_node_gpu_memory_allocated_mib" in names,
         "--hami-metrics off: no hami_ family, gpuvisor's kept", sorted(names))
finally:
    stand.stop()
t.done()
