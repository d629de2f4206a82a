#!/usr/bin/env bash
# deploy/kubernetes/v1.NN: one overlay per Kubernetes minor version (docs/
# install.md, "Which Kubernetes").  Checks, for every overlay:
#  - the committed tree is what scripts/gen-deploy-versions.sh writes;
#  - it renders with the kubectl on PATH (and a standalone kustomize if
#    present); v1.20 also with the real kubectl 1.20 (its kustomize 2.0.3)
#    when one is there (GV_KUBECTL_1_20, else the loopback cluster's build)
#    and the two renderings agree;
#  - kube-scheduler's image is of that minor, its KubeSchedulerConfiguration
#    apiVersion one that minor's kube-scheduler reads, with only fields that
#    apiVersion has;
#  - every rendered kind exists in that minor (so the apply cannot stop half
#    way on an unknown kind): the ValidatingAdmissionPolicy from 1.30 on only,
#    and there it is on;
#  - gpuvisor's images are the ones `make images` names (gpuvisor-node:VERSION),
#    and nothing names the unpublished ghcr.io/gpuvisor images;
#  - deploy/node-cleanup renders too (kubectl 1.20 included);
#  - kube-scheduler's node sampling is set for the gpuvisor profile: the
#    template's percentageOfNodesToScore at top level up to 1.26, in the
#    profile from 1.27.
# And the real kube-scheduler 1.20 (GV_KUBE_SCHEDULER_1_20, else the loopback
# build) parses the v1.20 overlay's configuration with its strict decoder.
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/deploy-versions.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
failed=0
nok() { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

scripts/gen-deploy-versions.sh "$tmp/gen" >/dev/null 2>"$tmp/gen.err" || true
if d=$(diff -r "$tmp/gen" deploy/kubernetes 2>&1); then
    ok "deploy/kubernetes is what scripts/gen-deploy-versions.sh writes"
else
    nok "deploy/kubernetes is what scripts/gen-deploy-versions.sh writes (rerun it)" "$(echo "$d" | head -20)"
fi

leftover=$(git grep -n 'ghcr\.io/gpuvisor' -- deploy docs README.md scripts 2>/dev/null | head -5)
if [ -z "$leftover" ]; then
    ok "nothing in deploy/, docs/, README or scripts/ names the unpublished ghcr.io/gpuvisor images"
else
    nok "nothing names the unpublished ghcr.io/gpuvisor images" "$leftover"
fi

if ! "$PY" -c 'import yaml' 2>/dev/null; then
    skip "render the overlays" "python3-yaml not installed"
    echo "1..$n"
    exit $failed
fi

# renderers: name and command prefix (the overlay directory is appended)
renderers=()
command -v kubectl >/dev/null 2>&1 && renderers+=("kubectl|kubectl kustomize")
command -v kustomize >/dev/null 2>&1 && renderers+=("kustomize|kustomize build")
k120=${GV_KUBECTL_1_20:-/var/tmp/loopback-k8s/bin/kubectl}
if [ ${#renderers[@]} -eq 0 ]; then
    skip "render the overlays" "kubectl not installed (not packaged in Debian) and no standalone kustomize"
fi
overlays=$(cd deploy/kubernetes && ls -d v1.* | sort -t. -k2 -n)
for r in "${renderers[@]}"; do
    rn=${r%%|*} rc=${r#*|}
    for o in $overlays; do
        if ! $rc "deploy/kubernetes/$o" >"$tmp/$rn-$o.yaml" 2>"$tmp/err"; then
            nok "$rn renders deploy/kubernetes/$o" "$(grep -v Warning "$tmp/err" | head -5)"
            rm -f "$tmp/$rn-$o.yaml"
        fi
    done
done
if [ -x "$k120" ] && "$k120" version --client 2>/dev/null | grep -q 'GitVersion:"v1\.20\.'; then
    if "$k120" kustomize deploy/kubernetes/v1.20 >"$tmp/kubectl120-v1.20.yaml" 2>"$tmp/err"; then
        ok "kubectl 1.20 (kustomize 2.0.3) renders deploy/kubernetes/v1.20"
    else
        nok "kubectl 1.20 (kustomize 2.0.3) renders deploy/kubernetes/v1.20" "$(head -5 "$tmp/err")"
        rm -f "$tmp/kubectl120-v1.20.yaml"
    fi
else
    skip "kubectl 1.20 renders deploy/kubernetes/v1.20" "no kubectl 1.20 at $k120 (GV_KUBECTL_1_20)"
fi

version=$(sed -n 's/^#define GV_VERSION "\(.*\)"$/\1/p' src/common/gv_version.h)
# deploy/node-cleanup (the uninstall's last step) with every renderer there
# is, kubectl 1.20 included: gpuvisor-node's image, removing only gpuvisor's
# paths.
for r in "${renderers[@]}" "kubectl120|$k120 kustomize"; do
    rn=${r%%|*} rc=${r#*|}
    [ "$rn" = kubectl120 ] && [ ! -s "$tmp/kubectl120-v1.20.yaml" ] && continue
    if $rc deploy/node-cleanup >"$tmp/cleanup.yaml" 2>"$tmp/err" &&
        [ "$(grep -c "image: gpuvisor-node:$version\$" "$tmp/cleanup.yaml")" = 2 ] &&
        grep -q 'rm -rf "$p"' "$tmp/cleanup.yaml" &&
        grep -q '/host/usr/local/gpuvisor /host/var/lib/gpuvisor' "$tmp/cleanup.yaml"; then
        ok "$rn renders deploy/node-cleanup (gpuvisor-node:$version, removes gpuvisor's paths only)"
    else
        nok "$rn renders deploy/node-cleanup" "$(head -5 "$tmp/err")"
    fi
done

# The v1.20 configuration, for the real kube-scheduler below.
N0=$n "$PY" - "$tmp" "$version" <<'EOF'
import glob, json, os, re, sys, yaml

tmp, version = sys.argv[1:]
n = int(os.environ.get("N0", "0"))
out = []

# Kinds and the first minor that serves them (group/version as rendered).
SINCE = {
    ("v1", "Namespace"): 0, ("v1", "ServiceAccount"): 0, ("v1", "Service"): 0,
    ("v1", "ConfigMap"): 0, ("v1", "Secret"): 0,
    ("apps/v1", "Deployment"): 9, ("apps/v1", "DaemonSet"): 9, ("batch/v1", "Job"): 0,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): 8, ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): 8,
    ("rbac.authorization.k8s.io/v1", "Role"): 8, ("rbac.authorization.k8s.io/v1", "RoleBinding"): 8,
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): 16,
    ("networking.k8s.io/v1", "NetworkPolicy"): 7,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): 30,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): 30,
}
# KubeSchedulerConfiguration versions and the minors whose kube-scheduler
# reads them (each removed a few releases after its successor came).
SERVED = {"v1beta1": (19, 22), "v1beta2": (22, 25), "v1beta3": (23, 28), "v1": (25, 99)}
# Fields gpuvisor may use per apiVersion (kube-scheduler's types).
COMMON = {"apiVersion", "kind", "leaderElection", "clientConnection", "percentageOfNodesToScore",
          "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders",
          "enableProfiling", "enableContentionProfiling"}
TOP = {"v1beta1": COMMON | {"healthzBindAddress", "metricsBindAddress"},
       "v1beta2": COMMON | {"healthzBindAddress", "metricsBindAddress", "parallelism"},
       "v1beta3": COMMON | {"parallelism"}, "v1": COMMON | {"parallelism"}}
EXTENDER = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
            "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
LEADER = {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
          "resourceName", "resourceNamespace"}


def check(cond, name, detail=""):
    global n
    n += 1
    out.append(("ok %d - %s" if cond else "not ok %d - %s") % (n, name))
    if not cond and detail:
        out.append("# " + str(detail)[:1500])


def norm(docs):
    res = {}
    for d in docs:
        s = re.sub(r'(gpuvisor-(scheduler|node)-config)-[a-z0-9]{10}', r'\1', json.dumps(d, sort_keys=True))
        d = json.loads(s)
        if d["metadata"].get("annotations") == {}:
            del d["metadata"]["annotations"]
        res[(d["kind"], d["metadata"]["name"])] = d
    return res


# The sampling setting every overlay carries: the template's top-level one.
PCT = yaml.safe_load(open("deploy/base/config/kube-scheduler-config.yaml")).get("percentageOfNodesToScore")
check(isinstance(PCT, int) and 0 < PCT <= 100,
      "deploy/base/config/kube-scheduler-config.yaml sets percentageOfNodesToScore (1-100)", PCT)
open(os.path.join(tmp, "pct"), "w").write(str(PCT))

renders = sorted(glob.glob(os.path.join(tmp, "*-v1.*.yaml")))
for path in renders:
    rn, o = os.path.basename(path)[:-5].split("-", 1)
    minor = int(o.split(".")[1])
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    what = "%s: deploy/kubernetes/%s" % (rn, o)
    bad = ["%s %s" % (d["apiVersion"], d["kind"]) for d in docs
           if SINCE.get((d["apiVersion"], d["kind"]), 999) > minor]
    check(not bad, "%s: every kind exists in Kubernetes 1.%d" % (what, minor), bad)
    has_vap = any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs)
    check(has_vap == (minor >= 30), "%s: the node-own-node policy %s" %
          (what, "is on (1.30+)" if minor >= 30 else "is left out (before 1.30)"))
    dep = next((d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuvisor-scheduler"), None)
    ds = next((d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuvisor-node"), None)
    images = {c["name"]: c["image"] for x in (dep, ds) if x
              for c in x["spec"]["template"]["spec"]["containers"] + x["spec"]["template"]["spec"].get("initContainers", [])}
    ks = images.get("kube-scheduler", "")
    check(re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v1\.%d\.\d+" % minor, ks) is not None,
          "%s: kube-scheduler is a 1.%d release" % (what, minor), ks)
    check(images.get("extender") == "gpuvisor-scheduler:" + version and
          images.get("gpuvisor-node") == "gpuvisor-node:" + version and
          images.get("install-interposer") == "gpuvisor-node:" + version,
          "%s: gpuvisor's images are make images' gpuvisor-{node,scheduler}:%s" % (what, version), images)
    check("ghcr.io/gpuvisor" not in open(path).read(), "%s: no ghcr.io/gpuvisor image" % what)
    cm = next((d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpuvisor-scheduler-config")), None)
    cfg = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"]) if cm else {}
    api = (cfg.get("apiVersion") or "").rsplit("/", 1)[-1]
    lo, hi = SERVED.get(api, (99, 0))
    check(cfg.get("apiVersion", "").startswith("kubescheduler.config.k8s.io/") and lo <= minor <= hi,
          "%s: KubeSchedulerConfiguration %s is read by kube-scheduler 1.%d" % (what, api, minor),
          cfg.get("apiVersion"))
    extra = set(cfg) - TOP.get(api, set())
    ext_extra = {k for e in cfg.get("extenders", []) for k in e} - EXTENDER
    le_extra = set(cfg.get("leaderElection", {})) - LEADER
    # KubeSchedulerProfile has percentageOfNodesToScore from 1.27 (v1)
    prof_fields = {"schedulerName", "plugins", "pluginConfig"} | \
        ({"percentageOfNodesToScore"} if api == "v1" and minor >= 27 else set())
    check(not extra and not ext_extra and not le_extra and
          all(set(p) <= prof_fields for p in cfg.get("profiles", [])),
          "%s: only fields %s has" % (what, api), (extra, ext_extra, le_extra))
    # kube-scheduler's node sampling off for the gpuvisor profile (docs/
    # scheduler.md, "Node sampling"): top level up to 1.26, in the profile
    # from 1.27 (and then only there, so another profile keeps its own).
    prof = next((p for p in cfg.get("profiles", []) if p.get("schedulerName") == "gpuvisor-scheduler"), {})
    where = (prof.get("percentageOfNodesToScore"), cfg.get("percentageOfNodesToScore"))
    check(where == ((PCT, None) if minor >= 27 else (None, PCT)),
          "%s: percentageOfNodesToScore %s %s" % (what, PCT, "in the gpuvisor profile" if minor >= 27
                                                  else "at top level"), where)
    ns = next((d for d in docs if d["kind"] == "Namespace"), {})
    check(ns.get("metadata", {}).get("labels", {}).get("kubernetes.io/metadata.name") == "gpuvisor-system",
          "%s: the namespace carries kubernetes.io/metadata.name (the webhook skips it on 1.20 too)" % what)
    if rn == "kubectl" and o == "v1.20":
        open(os.path.join(tmp, "ks-1.20.yaml"), "w").write(cm["data"]["kube-scheduler-config.yaml"] if cm else "")

a, b = os.path.join(tmp, "kubectl120-v1.20.yaml"), os.path.join(tmp, "kubectl-v1.20.yaml")
if os.path.exists(a) and os.path.exists(b):
    x = norm([d for d in yaml.safe_load_all(open(a)) if d])
    y = norm([d for d in yaml.safe_load_all(open(b)) if d])
    check(x == y, "kubectl 1.20 and the current kubectl render deploy/kubernetes/v1.20 alike",
          [k for k in set(x) | set(y) if x.get(k) != y.get(k)][:5])
print("\n".join(out))
open(os.path.join(tmp, "n"), "w").write(str(n))
if any(l.startswith("not ok") for l in out):
    open(os.path.join(tmp, "failed"), "w").write("1")
EOF
[ -s "$tmp/n" ] || { echo "not ok $((n + 1)) - the overlay checks ran"; echo "1..$((n + 1))"; exit 1; }
n=$(cat "$tmp/n")
[ -e "$tmp/failed" ] && failed=1

# The real kube-scheduler 1.20 reads the v1.20 overlay's configuration
# (strict: an unknown or misspelt field is an error) and writes back what it
# understood.  Its own listeners and API client are pointed at nothing.
ks=${GV_KUBE_SCHEDULER_1_20:-/var/tmp/loopback-k8s/bin/kube-scheduler}
if [ ! -s "$tmp/ks-1.20.yaml" ]; then
    skip "kube-scheduler 1.20 reads the v1.20 configuration" "the v1.20 overlay was not rendered (no kubectl)"
elif ! [ -x "$ks" ] || ! "$ks" --version 2>/dev/null | grep -q 'v1\.20\.'; then
    skip "kube-scheduler 1.20 reads the v1.20 configuration" "no kube-scheduler 1.20 at $ks (GV_KUBE_SCHEDULER_1_20)"
else
    cat >"$tmp/kubeconfig" <<'KC'
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
KC
    # kube-scheduler 1.20 binds its healthz/metrics port even with
    # --write-config-to and refuses port 0: a port below the ephemeral range,
    # another one if a parallel test holds it.
    for attempt in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 12000))
        { cat "$tmp/ks-1.20.yaml"
          printf 'healthzBindAddress: "127.0.0.1:%s"\nmetricsBindAddress: "127.0.0.1:%s"\n' "$port" "$port"
          printf 'clientConnection:\n  kubeconfig: %s\n' "$tmp/kubeconfig"
        } >"$tmp/ks-test.yaml"
        timeout 60 "$ks" --secure-port=0 --config="$tmp/ks-test.yaml" --write-config-to="$tmp/ks-out.yaml" \
            >"$tmp/ks.log" 2>&1
        ks_rc=$?
        grep -q 'address already in use' "$tmp/ks.log" || break
    done
    if [ "$ks_rc" = 0 ] && "$PY" - "$tmp/ks-out.yaml" "$(cat "$tmp/pct")" <<'PYEOF' 2>>"$tmp/ks.log"
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
assert c["percentageOfNodesToScore"] == int(sys.argv[2]), c.get("percentageOfNodesToScore")
e = c["extenders"][0]
assert e["urlPrefix"].startswith("http://127.0.0.1:") and e["filterVerb"] == "filter" and e["bindVerb"] == "bind"
assert e["nodeCacheCapable"] and not e.get("ignorable") and len(e["managedResources"]) >= 5
assert [p["schedulerName"] for p in c["profiles"]] == ["gpuvisor-scheduler"]
assert c["leaderElection"]["resourceName"] == "gpuvisor-scheduler"
PYEOF
    then
        ok "kube-scheduler 1.20 reads the v1.20 configuration: profile, extender, managed resources, lease, percentageOfNodesToScore"
    else
        nok "kube-scheduler 1.20 reads the v1.20 configuration" "$(tail -5 "$tmp/ks.log")"
    fi
fi
echo "1..$n"
exit $failed
