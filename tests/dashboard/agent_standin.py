"""Node-agent stand-ins for the observability tests: HTTP servers serving
/metrics in gpuvisor-node's names (docs/observability.md; the agent's
src/node/monitor/monitor.c) with usage derived from the known cluster
(cluster_fixture.py), or HAMi's names only.  The kube-apiserver stand-in
reaches them through its pod proxy (kubectl gpuvisor top); the scheduler's
dashboard reads them by pod IP."""
import http.server
import threading

import cluster_fixture

MIB = 1 << 20
# Memory in use, as a fraction of each pod's slice.
USED_FRAC = {"bert-finetune-0": 0.9, "bert-finetune-1": 0.5, "llama-serve-7b": 0.75,
             "whisper-asr": 0.25, "notebook-alice": 0.0, "sweep-03": 1.0, "sweep-04": 0.6,
             "resnet-ddp": 0.8, "embed-small": 0.5, "embed-small-2": 0.25, "ocr": 0.95,
             "old-job": 0.1}


def agent_metrics(node, hami_only=False):
    """Exposition for one node: usage derived from the fixture's slices
    (used = limit x a fixed fraction per pod), in the agent's names."""
    lines = []
    used_frac = USED_FRAC
    for ns, pod, n, cname, u, mib, cores in cluster_fixture.expected()["vgpu"]:
        if n != node:
            continue
        used = int(mib * used_frac[pod]) * MIB
        lab = 'node="%s",namespace="%s",pod="%s",container="%s",uuid="%s"' % (node, ns, pod, cname, u)
        if hami_only:
            hl = 'namespace="%s",pod="%s",container="%s",vdevice_index="0",device_uuid="%s",zone="vGPU"' % (
                ns, pod, cname, u[:40])
            lines += ["hami_vgpu_memory_used_bytes{%s} %d" % (hl, used),
                      "hami_vgpu_memory_limit_bytes{%s} %d" % (hl, mib * MIB),
                      "hami_container_device_utilization_ratio{%s} %d" % (hl, cores // 2)]
            continue
        lines += ["gpuvisor_container_gpu_memory_used_bytes{%s} %d" % (lab, used),
                  "gpuvisor_container_gpu_memory_limit_bytes{%s} %d" % (lab, mib * MIB),
                  "gpuvisor_container_gpu_compute_share_limit_ratio{%s} %g" % (lab, cores / 100 if cores else 1),
                  "gpuvisor_container_gpu_compute_share_achieved_ratio{%s} %g" % (lab, cores / 200)]
    for name, model, n, age in cluster_fixture.NODES:
        if name != node:
            continue
        for i in range(n):
            u = cluster_fixture.uuid(node, i)
            util = (i * 13) % 100
            used = sum(int(m * used_frac[p]) for _, p, nn, _, uu, m, _ in cluster_fixture.expected()["vgpu"]
                       if uu == u)
            dl = 'gpu="%d",UUID="%s",device="nvidia%d",modelName="%s",Hostname="%s"' % (i, u, i, model[0], node)
            if hami_only:
                hl = 'node="%s",device_index="%d",device_uuid="%s",device_type="NVIDIA-%s",zone="vGPU"' % (
                    node, i, u, model[0])
                lines += ["hami_host_gpu_utilization_ratio{%s} %d" % (hl, util),
                          "hami_host_gpu_memory_used_bytes{%s} %d" % (hl, used * MIB)]
            else:
                lines += ["DCGM_FI_DEV_GPU_UTIL{%s} %d" % (dl, util),
                          "DCGM_FI_DEV_FB_USED{%s} %d" % (dl, used),
                          "DCGM_FI_DEV_FB_FREE{%s} %d" % (dl, model[1] - used)]
    # a malformed line must not hide the rest
    return "# TYPE x gauge\n" + "\n".join(lines) + "\nthis is { not a sample\n"


class Agent(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.server.text.encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass



def start_agents(skip=(), hami_only=("gpu-t4-1",)):
    """One server per node with the agent; returns {node: (ip, port)}."""
    agents = {}
    for name, model, n, age in cluster_fixture.NODES:
        if model is None or name in skip:
            continue
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Agent)
        srv.text = agent_metrics(name, hami_only=(name in hami_only))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        agents[name] = ("127.0.0.1", srv.server_address[1])
    return agents


def start_impostor(node="gpu-a100-1"):
    """A tenant's stand-in for the agent of node: the same series, with every
    container's memory use claimed as 1 MiB and every GPU at 99 % use.
    Returns (ip, port)."""
    import re
    text = agent_metrics(node)
    text = re.sub(r"^(gpuvisor_container_gpu_memory_used_bytes\{[^}]*\}) \d+$", r"\1 %d" % MIB, text,
                  flags=re.M)
    text = re.sub(r"^(DCGM_FI_DEV_GPU_UTIL\{[^}]*\}) \d+$", r"\1 99", text, flags=re.M)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Agent)
    srv.text = text
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return ("127.0.0.1", srv.server_address[1])


def impostor_pod(host, port, ns="ml-train", node="gpu-a100-1"):
    """The tenant's pod posing as gpuvisor-node: the agents' label and a
    port named metrics, in the tenant's own namespace (anyone who may create
    a pod can make this one)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gpuvisor-node-" + node, "namespace": ns, "uid": "impostor-" + node,
                         "labels": {"app.kubernetes.io/name": "gpuvisor-node"}},
            "spec": {"nodeName": node, "containers": [{
                "name": "agent", "ports": [{"name": "metrics", "containerPort": port}]}]},
            "status": {"phase": "Running", "podIP": host}}
