#!/usr/bin/env bash
# Renders deploy/ with `kubectl kustomize` (offline) and checks the result's
# structure: the objects an install needs exist, names that must agree do
# (services, secrets, config maps, resource names, ports), RBAC stays least
# privilege.  kubectl is not a Debian package: without it the test skips.
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
. tests/deploy/render-prereqs.sh

tmp="${GV_TEST_TMP:-/tmp}/deploy-render.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
# The newest Kubernetes' overlay: the base plus every component on by
# default (tests/deploy/test_deploy_versions.sh covers the other versions).
overlay=${GV_DEPLOY_OVERLAY:-deploy/kubernetes/v1.34}
if ! kubectl kustomize "$overlay" >"$tmp/all.yaml" 2>"$tmp/err"; then
    echo "1..1"
    echo "not ok 1 - kubectl kustomize $overlay failed"
    sed 's/^/# /' "$tmp/err"
    exit 1
fi

exec "$PY" - "$tmp/all.yaml" deploy/base/config/scheduler.json <<'EOF'
import json, sys, yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sched_cfg = json.load(open(sys.argv[2]))
n = 0
failed = 0

def check(cond, name, detail=""):
    global n, failed
    n += 1
    if cond:
        print(f"ok {n} - {name}")
    else:
        failed += 1
        print(f"not ok {n} - {name}")
        if detail:
            print(f"# {detail}")

def objs(kind):
    return [d for d in docs if d.get("kind") == kind]

def one(kind, name):
    for d in objs(kind):
        if d["metadata"]["name"] == name:
            return d
    return None

NS = "gpuvisor-system"
cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                  "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}
wanted = ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
          "RoleBinding", "DaemonSet", "Deployment", "Service", "ConfigMap",
          "MutatingWebhookConfiguration", "Job"]
have = {d["kind"] for d in docs}
check(set(wanted) <= have, "every kind an install needs is rendered",
      f"missing: {sorted(set(wanted) - have)}")

bad_ns = [f'{d["kind"]}/{d["metadata"]["name"]}={d["metadata"].get("namespace")}'
          for d in docs if d["kind"] not in cluster_scoped
          and d["metadata"].get("namespace") != NS
          and not (d["kind"] == "RoleBinding" and d["metadata"].get("namespace") == "kube-system"
                   and d["roleRef"]["name"] == "extension-apiserver-authentication-reader")]
check(not bad_ns, f"namespaced objects live in {NS}", ", ".join(bad_ns))

# RBAC: no wildcards, and the components get only the verbs they use.
wild = []
for kind in ("ClusterRole", "Role"):
    for r in objs(kind):
        for rule in r.get("rules", []):
            for field in ("verbs", "resources", "apiGroups"):
                if "*" in rule.get(field, []):
                    wild.append(f'{r["metadata"]["name"]}.{field}')
check(not wild, "no wildcard in any RBAC rule", ", ".join(wild))

def perms(role):
    out = set()
    for rule in role.get("rules", []):
        for res in rule["resources"]:
            for v in rule["verbs"]:
                out.add((res, v))
    return out

sched_role = one("ClusterRole", "gpuvisor-scheduler")
node_role = one("ClusterRole", "gpuvisor-node")
sp = perms(sched_role) if sched_role else set()
npm = perms(node_role) if node_role else set()
check({("pods/binding", "create"), ("pods", "patch"), ("pods", "watch"), ("nodes", "watch")} <= sp,
      "scheduler role can watch nodes/pods, annotate pods and bind", str(sorted(sp)))
pdb_rules = [r for r in (sched_role or {}).get("rules", [])
             if "poddisruptionbudgets" in r["resources"]]
check(len(pdb_rules) == 1 and pdb_rules[0]["apiGroups"] == ["policy"] and
      {"list", "watch"} <= set(pdb_rules[0]["verbs"]) and
      not {"create", "update", "patch", "delete"} & set(pdb_rules[0]["verbs"]),
      "scheduler role lists and watches PodDisruptionBudgets (policy group: v1 and v1beta1), "
      "read-only", str(pdb_rules))
check(not any(v in ("delete", "create", "update") for r, v in sp if r in ("pods", "nodes")),
      "scheduler role cannot create/update/delete pods or nodes")
check(("nodes", "patch") in npm and ("pods", "patch") in npm and
      not any(r == "pods/binding" or (v in ("delete", "create") and r != "events") for r, v in npm),
      "node role patches its node/pods and cannot bind, create or delete (events aside)", str(sorted(npm)))

sas = {d["metadata"]["name"] for d in objs("ServiceAccount")}
for kind in ("ClusterRoleBinding", "RoleBinding"):
    for b in objs(kind):
        for s in b.get("subjects", []):
            if s["kind"] == "ServiceAccount":
                check(s["name"] in sas and s.get("namespace") == NS,
                      f'{kind} {b["metadata"]["name"]} binds an existing service account')
        if b["roleRef"]["name"].startswith("gpuvisor"):
            rk = b["roleRef"]["kind"]
            check(one(rk, b["roleRef"]["name"]) is not None,
                  f'{kind} {b["metadata"]["name"]} refers to a rendered {rk}')

cms = {d["metadata"]["name"] for d in objs("ConfigMap")}
# Secrets the admin creates before install (docs/install.md).
secrets_made = {"gpuvisor-placement-key"}
for j in objs("Job"):
    for c in j["spec"]["template"]["spec"]["containers"]:
        for a in c.get("args", []):
            if a.startswith("--secret-name="):
                secrets_made.add(a.split("=", 1)[1])

def pod_checks(kind, obj):
    spec = obj["spec"]["template"]["spec"]
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        paths = [m["mountPath"].rstrip("/") for m in c.get("volumeMounts", [])]
        nested = [(a, b) for a in paths for b in paths if a != b and b.startswith(a + "/")]
        check(not nested, f'{kind} container {c["name"]}: no mount inside another mount '
              "(a read-only ConfigMap/Secret volume cannot hold a mount point)", str(nested))
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            v = vols.get(m["name"], {})
            if "configMap" in v:
                files = [a for a in c.get("args", []) + c.get("command", [])
                         if "=" in a and a.split("=", 1)[1].startswith(m["mountPath"] + "/")]
                for a in files:
                    fname = a.split("=", 1)[1][len(m["mountPath"]) + 1:]
                    cm = next((d for d in objs("ConfigMap")
                               if d["metadata"]["name"] == v["configMap"]["name"]), None)
                    check(cm is not None and fname in cm.get("data", {}),
                          f'{kind} container {c["name"]}: {a} names a file of its ConfigMap')
    check(spec.get("serviceAccountName") in sas, f"{kind} runs as a rendered service account")
    for v in spec.get("volumes", []):
        if "configMap" in v:
            check(v["configMap"]["name"] in cms,
                  f'{kind} volume {v["name"]} uses a rendered ConfigMap ({v["configMap"]["name"]})')
        if "secret" in v:
            check(v["secret"]["secretName"] in secrets_made,
                  f'{kind} volume {v["name"]} uses a Secret the certgen Job or the install creates')
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        img = c.get("image", "")
        check(":" in img.rsplit("/", 1)[-1] and not img.endswith(":latest"),
              f'{kind} container {c["name"]} image is pinned ({img})')
    return spec

ds = one("DaemonSet", "gpuvisor-node")
check(ds is not None, "node agent DaemonSet rendered")
if ds:
    spec = pod_checks("DaemonSet", ds)
    paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    need = {"/var/lib/kubelet/device-plugins", "/usr/local/gpuvisor", "/var/lib/gpuvisor"}
    check(need <= paths, "DaemonSet mounts the kubelet plugin dir, interposer dir, container dirs",
          f"missing {sorted(need - paths)}")
    check(bool(spec.get("nodeSelector")) and bool(spec.get("tolerations")),
          "DaemonSet has a node selector and tolerations")
    mounts = {m["mountPath"]: m for c in spec["containers"] for m in c.get("volumeMounts", [])}
    check(mounts.get("/usr/local/gpuvisor", {}).get("readOnly") is True,
          "agent mounts the interposer directory read-only")
    agent_c = spec["containers"][0]
    mport = next((p for p in agent_c.get("ports", []) if p.get("name") == "metrics"), {})
    listen = next((a.split("=", 1)[1] for a in agent_c.get("args", []) if a.startswith("--metrics-listen=")), "")
    check(mport and listen.endswith(":%d" % mport["containerPort"]) and
          agent_c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz" and
          agent_c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz" and
          all(agent_c[p]["httpGet"]["port"] == "metrics" for p in ("livenessProbe", "readinessProbe")) and
          ds["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/port") ==
          str(mport.get("containerPort")),
          "node agent: --metrics-listen on its metrics port, /healthz and /readyz probes, scrape annotations",
          str((listen, mport)))
    check(all(m in mounts and mounts[m]["name"] == next(v["name"] for v in spec["volumes"]
              if v.get("hostPath", {}).get("path") == m) for m in need),
          "each host path is mounted at the same path inside the agent (Allocate names host paths)")

dep = one("Deployment", "gpuvisor-scheduler")
check(dep is not None, "scheduler Deployment rendered")
ks_cfg = None
if dep:
    spec = pod_checks("Deployment", dep)
    names = {c["name"]: c for c in spec["containers"]}
    check({"kube-scheduler", "extender"} <= set(names), "kube-scheduler runs beside the extender")
    ext = names.get("extender", {})
    args = dict(a[2:].split("=", 1) for a in ext.get("args", []) if a.startswith("--") and "=" in a)
    cm = next((d for d in objs("ConfigMap") if d["metadata"]["name"].startswith("gpuvisor-scheduler-config")), None)
    ks_cfg = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"]) if cm else None
    check(ks_cfg is not None and ks_cfg.get("kind") == "KubeSchedulerConfiguration",
          "KubeSchedulerConfiguration present in the scheduler ConfigMap")
    check(cm is not None and json.loads(cm["data"]["scheduler.json"]) == sched_cfg,
          "scheduler.json shipped unchanged in the ConfigMap")
    if ks_cfg:
        e = ks_cfg["extenders"][0]
        listen = args.get("extender-listen", "")
        check(e["urlPrefix"].startswith(f"http://{listen}/"),
              "extender urlPrefix points at the extender's listen address",
              f'{e["urlPrefix"]} vs {listen}')
        check(listen.startswith("127.0.0.1:"), "extender (filter/bind) listens on loopback only")
        check(e.get("filterVerb") == "filter" and e.get("bindVerb") == "bind",
              "filterVerb and bindVerb registered")
        check(e.get("preemptVerb") == "preempt", "preemptVerb registered (GPU-aware preemption)")
        check(e.get("nodeCacheCapable") is True, "nodeCacheCapable: true")
        if sched_cfg.get("filterReturns", "node") == "feasible":
            check(e.get("prioritizeVerb") == "prioritize", "prioritizeVerb set in feasible mode")
        else:
            check("prioritizeVerb" not in e, "no prioritizeVerb when filter returns one node")
        mr = {m["name"]: m.get("ignoredByScheduler") for m in e.get("managedResources", [])}
        # plus gpushare's GPU count, a fixed name beside aliyun.com/gpu-mem (no node
        # advertises either: kube-scheduler must not count them)
        res = set(sched_cfg["resources"].values()) | {"aliyun.com/gpu-count"}
        check(set(mr) == res and all(mr.values()),
              "managedResources = the configured resource names and aliyun.com/gpu-count, "
              "all ignoredByScheduler",
              f"{mr} vs {sorted(res)}")
        prof = [p["schedulerName"] for p in ks_cfg.get("profiles", [])]
        check(sched_cfg["schedulerName"] in prof,
              "kube-scheduler profile name = the name the webhook sets")
        le = ks_cfg.get("leaderElection", {})
        lease_role = one("Role", "gpuvisor-scheduler-leader-election")
        check(le.get("resourceNamespace") == NS and lease_role is not None and
              any(le.get("resourceName") in r.get("resourceNames", []) for r in lease_role["rules"]),
              "leader-election lease is covered by a Role")

svc = one("Service", "gpuvisor-webhook")
mwc = one("MutatingWebhookConfiguration", "gpuvisor-webhook")
check(svc is not None and mwc is not None, "webhook Service and MutatingWebhookConfiguration rendered")
if svc and mwc and dep:
    w = mwc["webhooks"][0]
    s = w["clientConfig"]["service"]
    port = svc["spec"]["ports"][0]
    check(s["name"] == svc["metadata"]["name"] and s["namespace"] == NS and s.get("port", 443) == port["port"],
          "webhook clientConfig points at the Service")
    check(s.get("path") == "/mutate", "webhook path is /mutate")
    check("v1" in w["admissionReviewVersions"] and w["sideEffects"] == "None",
          "webhook speaks AdmissionReview v1 without side effects")
    check(any("pods" in r["resources"] and "CREATE" in r["operations"] for r in w["rules"]),
          "webhook sees pod creation")
    check(any({"pods", "pods/ephemeralcontainers", "pods/resize"} <= set(r["resources"]) and
              "UPDATE" in r["operations"] for r in w["rules"]),
          "webhook sees pod updates, ephemeral containers and resizes")
    check(w.get("failurePolicy") == "Fail", "webhook failurePolicy is Fail (docs/isolation.md)")
    patch_job = one("Job", "gpuvisor-webhook-certgen-patch")
    check(patch_job is not None and "--patch-failure-policy=Fail" in
          patch_job["spec"]["template"]["spec"]["containers"][0]["args"],
          "the certgen patch Job keeps failurePolicy Fail")
    sel = dep["spec"]["template"]["metadata"]["labels"]
    check(all(sel.get(k) == v for k, v in svc["spec"]["selector"].items()),
          "webhook Service selects the scheduler pods")
    ports = {p.get("name"): p["containerPort"] for c in dep["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", [])}
    check(port["targetPort"] in ports, "Service targetPort names a container port")
    ext = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    wl = next((a.split("=", 1)[1] for a in ext["args"] if a.startswith("--webhook-listen=")), "")
    check(wl.endswith(f":{ports.get(port['targetPort'])}"), "webhook listens on the container port")
    excluded = [v for e in w["namespaceSelector"]["matchExpressions"] for v in e.get("values", [])]
    check(NS in excluded and "kube-system" in excluded,
          "webhook skips kube-system and its own namespace")

# ---- least privilege (issue 14) ----------------------------------------
for kind, name in (("DaemonSet", "gpuvisor-node"), ("Deployment", "gpuvisor-scheduler"),
                   ("Job", "gpuvisor-webhook-certgen-create"), ("Job", "gpuvisor-webhook-certgen-patch")):
    o = one(kind, name)
    if o is None:
        continue
    spec = o["spec"]["template"]["spec"]
    pod_seccomp = spec.get("securityContext", {}).get("seccompProfile", {}).get("type")
    # Host namespaces: the node agent alone joins the host PID namespace, for
    # the NVML backstop (NVML names host pids; docs/isolation.md), and nothing
    # joins the host network or IPC namespace.
    want_pid = name == "gpuvisor-node"
    check(bool(spec.get("hostPID")) == want_pid and not spec.get("hostNetwork") and not spec.get("hostIPC"),
          f"{kind} {name}: hostPID {'true (the backstop maps and signals host pids)' if want_pid else 'off'}, "
          "no hostNetwork, no hostIPC")
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        check((sc.get("seccompProfile", {}).get("type") or pod_seccomp) == "RuntimeDefault",
              f"{kind} {name} container {c['name']}: seccomp RuntimeDefault")
        check(sc.get("capabilities", {}).get("drop") == ["ALL"] and not sc.get("capabilities", {}).get("add"),
              f"{kind} {name} container {c['name']}: every capability dropped")
        check(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False
              and not sc.get("privileged"),
              f"{kind} {name} container {c['name']}: read-only root, no privilege escalation")
if dep:
    dspec = dep["spec"]["template"]["spec"]
    check(dspec.get("securityContext", {}).get("runAsNonRoot") is True,
          "scheduler pods run as non-root")
    ext = next(c for c in dspec["containers"] if c["name"] == "extender")
    hp = next((p["containerPort"] for p in ext.get("ports", []) if p.get("name") == "health"), None)
    probes = [ext.get("readinessProbe", {}), ext.get("livenessProbe", {})]
    check(hp is not None and all(pr.get("httpGet", {}).get("port") == "health" for pr in probes),
          "scheduler probes use the health listener, not the webhook port")
    check(any(a == "--health-listen=0.0.0.0:%s" % hp for a in ext["args"]),
          "the health listener is the health port")
    check(any(a.startswith("--placement-key-file=") for a in ext["args"]),
          "scheduler signs placements (--placement-key-file)")
    check(not any(a.startswith("--insecure") for a in ext["args"]), "scheduler runs without insecure flags")
if ds:
    agent = next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "gpuvisor-node")
    check(any(a.startswith("--placement-key-file=") for a in agent["args"]) and
          not any(a.startswith("--insecure") for a in agent["args"]),
          "node agent verifies placements (--placement-key-file, no insecure flag)")
node_role = one("ClusterRole", "gpuvisor-node")
vap = one("ValidatingAdmissionPolicy", "gpuvisor-node-own-node")
vapb = one("ValidatingAdmissionPolicyBinding", "gpuvisor-node-own-node")
check(vap is not None and vapb is not None and vapb["spec"]["policyName"] == "gpuvisor-node-own-node"
      and "Deny" in vapb["spec"]["validationActions"],
      "a ValidatingAdmissionPolicy confines the node agent to its own node, bound with Deny")
if vap:
    mc = " ".join(m["expression"] for m in vap["spec"].get("matchConditions", []))
    check("system:serviceaccount:gpuvisor-system:gpuvisor-node" in mc,
          "the policy matches the node agent's service account")
    res = {r for rr in vap["spec"]["matchConstraints"]["resourceRules"] for r in rr["resources"]}
    check({"pods", "nodes"} <= res, "the policy covers the pods and nodes the agent may patch")
cg = one("Role", "gpuvisor-webhook-certgen")
if cg:
    gets = [r for r in cg["rules"] if "get" in r["verbs"] and "secrets" in r["resources"]]
    check(all(r.get("resourceNames") == ["gpuvisor-webhook-tls"] for r in gets),
          "certgen reads only its own Secret (not the placement key)")
pols = objs("NetworkPolicy")
check(any(p["spec"].get("podSelector") == {} and p["spec"].get("policyTypes") == ["Ingress"]
          and not p["spec"].get("ingress") for p in pols),
      "NetworkPolicy: ingress to gpuvisor-system denied by default")
sp_ = next((p for p in pols if p["spec"].get("podSelector", {}).get("matchLabels", {}).get(
    "app.kubernetes.io/name") == "gpuvisor-scheduler"), None)
if sp_:
    ports_open = {pt["port"] for rule in sp_["spec"]["ingress"] for pt in rule.get("ports", [])}
    check(ports_open == {8443, 8081}, "NetworkPolicy opens only the webhook and health ports",
          str(ports_open))
    check(all(rule.get("from") for rule in sp_["spec"]["ingress"]),
          "NetworkPolicy: every allowed port names its sources")
else:
    check(False, "NetworkPolicy for the scheduler pods rendered")

print(f"1..{n}")
sys.exit(1 if failed else 0)
EOF
