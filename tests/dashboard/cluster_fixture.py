#!/usr/bin/env python3
"""A known, realistic GPU cluster for the observability tests, as seed objects
for the kube-apiserver stand-in (tests/fakes/apiserver, --seed FILE).

Five nodes: two 8 x A100-80GB nodes with a mix of shared slices and whole
GPUs, a 4 x T4 node, an 8 x H100 node whose agent stopped reporting (stale
heartbeat) and a CPU node without the agent.  Bound pods carry the
scheduler's assignment annotation and label, as bind writes them.  The
expected figures the tests assert are computed here from the same data
(EXPECTED), never copied from the programs' output.

usage: cluster_fixture.py OUT.json
"""
import json
import sys
import time

A100 = ("NVIDIA A100-SXM4-80GB", 81920)
T4 = ("Tesla T4", 15360)
H100 = ("NVIDIA H100 80GB HBM3", 81559)

NODES = [  # name, model, gpus, heartbeat age (s) or None for no agent
    ("gpu-a100-1", A100, 8, 5),
    ("gpu-a100-2", A100, 8, 5),
    ("gpu-t4-1", T4, 4, 5),
    ("gpu-h100-1", H100, 8, 3600),
    ("cpu-1", None, 0, None),
]

# namespace, pod, node, [(container, [(gpu index, MiB, cores %)])]
PODS = [
    ("ml-train", "bert-finetune-0", "gpu-a100-1", [("trainer", [(0, 40960, 50), (1, 40960, 50)])]),
    ("ml-train", "bert-finetune-1", "gpu-a100-1", [("trainer", [(0, 20480, 30)])]),
    ("inference", "llama-serve-7b", "gpu-a100-1", [("server", [(2, 24576, 40)]),
                                                   ("sidecar", [(2, 2048, 10)])]),
    ("inference", "whisper-asr", "gpu-a100-1", [("asr", [(3, 10240, 20)])]),
    ("research", "notebook-alice", "gpu-a100-1", [("jupyter", [(4, 8192, 0)])]),
    ("research", "sweep-03", "gpu-a100-2", [("job", [(0, 81920, 100)])]),
    ("research", "sweep-04", "gpu-a100-2", [("job", [(1, 81920, 100)])]),
    ("ml-train", "resnet-ddp", "gpu-a100-2", [("worker", [(2, 65536, 80), (3, 65536, 80),
                                                          (4, 65536, 80), (5, 65536, 80)])]),
    ("inference", "embed-small", "gpu-t4-1", [("embed", [(0, 4096, 25)])]),
    ("inference", "embed-small-2", "gpu-t4-1", [("embed", [(0, 4096, 25)])]),
    ("inference", "ocr", "gpu-t4-1", [("ocr", [(1, 12288, 60)])]),
    ("research", "old-job", "gpu-h100-1", [("job", [(0, 40000, 50)])]),
]


def uuid(node, i):
    return "GPU-%s-%02d" % (node, i)


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def inventory(node, model, n):
    return json.dumps({"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4",
                       "gpus": [{"uuid": uuid(node, i), "index": i, "model": model[0],
                                 "memoryMiB": model[1], "memoryScaling": 1.0, "cores": 100,
                                 "split": 10, "numa": i // 4, "healthy": True, "mode": "vgpu",
                                 "mig": False, "pciBusId": "00000000:%02x:00.0" % (7 + i)}
                                for i in range(n)]}, separators=(",", ":"))


def objects(agents=None, now=None):
    """agents: {node: (ip, port)} of node-agent pods to add."""
    now = time.time() if now is None else now
    out = []
    for k, (name, model, n, age) in enumerate(NODES):
        ann = {}
        if model is not None:
            ann["gpuvisor.io/node-gpus"] = inventory(name, model, n)
            ann["gpuvisor.io/node-heartbeat"] = rfc3339(now - age)
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "annotations": ann,
                                 "labels": {"kubernetes.io/hostname": name}},
                    "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})
    for i, (ns, pod, node, containers) in enumerate(PODS):
        parts = ["v1", "node=" + node]
        specs = []
        for cname, devs in containers:
            parts.append(cname + "=" + ",".join("%s:%d:%d" % (uuid(node, g), mib, cores * 10)
                                               for g, mib, cores in devs))
            limits = {"nvidia.com/gpu": str(len(devs)), "nvidia.com/gpumem": str(devs[0][1]),
                      "nvidia.com/gpucores": str(devs[0][2])}
            specs.append({"name": cname, "image": "example/" + cname,
                          "resources": {"limits": limits}})
        # a container without GPUs first in one pod: HAMi's container_index counts it
        if pod == "llama-serve-7b":
            specs.insert(0, {"name": "init-proxy", "image": "example/proxy"})
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod, "namespace": ns, "uid": "uid-%02d-%s" % (i, pod),
                                 "labels": {"gpuvisor.io/assigned": "true"},
                                 "annotations": {"gpuvisor.io/assignment": ";".join(parts),
                                                 "gpuvisor.io/assigned-node": node,
                                                 "gpuvisor.io/assigned-at": rfc3339(now - 600)}},
                    "spec": {"schedulerName": "gpuvisor-scheduler", "nodeName": node,
                             "containers": specs},
                    "status": {"phase": "Running", "podIP": "10.0.0.%d" % (i + 10)}})
    for name, (host, port) in sorted((agents or {}).items()):
        # the node agents' pods (DaemonSet), reached through the API server's pod proxy
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "gpuvisor-node-" + name, "namespace": "gpuvisor-system",
                                 "uid": "agent-" + name,
                                 "labels": {"app.kubernetes.io/name": "gpuvisor-node"}},
                    "spec": {"nodeName": name, "containers": [{
                        "name": "agent", "ports": [{"name": "metrics", "containerPort": port}]}]},
                    "status": {"phase": "Running", "podIP": host}})
    return out


def expected():
    """Figures the tests assert, derived from NODES/PODS."""
    e = {"gpu_mem": {}, "gpu_cores": {}, "gpu_tasks": {}, "vgpu": []}
    for ns, pod, node, containers in PODS:
        for cname, devs in containers:
            for g, mib, cores in devs:
                u = uuid(node, g)
                e["gpu_mem"][u] = e["gpu_mem"].get(u, 0) + mib
                e["gpu_cores"][u] = e["gpu_cores"].get(u, 0) + cores
                e["gpu_tasks"][u] = e["gpu_tasks"].get(u, 0) + 1
                e["vgpu"].append((ns, pod, node, cname, u, mib, cores))
    return e


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump({"kind": "List", "apiVersion": "v1", "items": objects()}, f, indent=1)
