#!/usr/bin/env bash
# Checks fake_apiserver (the kube-apiserver stand-in) against a real
# Kubernetes client: kubectl (client-go) does discovery, create, get, list
# with label/field selectors and chunking, label (patch), conflicting
# annotate, watch, delete and reads the Status errors.  If client-go accepts
# the stand-in's answers, our own client's tests against it mean something.
# kubectl is not a Debian package: without it the test skips.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v kubectl >/dev/null 2>&1; then
    echo "1..0 # SKIP kubectl not installed (not packaged in Debian)"
    echo "ok 1 # SKIP kubectl not installed"
    exit 0
fi
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/kubectl.XXXXXX")
/usr/bin/python3 "$here/tests/fakes/apiserver/fake_apiserver.py" --port 0 >"$tmp/out" 2>"$tmp/err" &
pid=$!
watch_pid=
cleanup() {
    [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null
    kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q READY "$tmp/out" && break; sleep 0.05; done
url=$(awk '/^READY/ {print $2}' "$tmp/out")
cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: fake
clusters:
- name: fake
  cluster: {server: "$url"}
contexts:
- name: fake
  context: {cluster: fake, namespace: default}
EOF
export KUBECONFIG="$tmp/kubeconfig"
k() { kubectl --request-timeout=10s "$@"; }

n=0
check() { # description, then a command whose success is the result
    local d=$1; shift
    n=$((n + 1))
    if "$@" >"$tmp/last" 2>&1; then echo "ok $n - $d"; else
        echo "not ok $n - $d"; sed 's/^/# /' "$tmp/last"; fi
}
run_has() { # pattern, command...: command output contains pattern
    local pat=$1; shift
    "$@" >"$tmp/last" 2>&1
    grep -q -- "$pat" "$tmp/last"
}

pod() { # name [node]
    printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"app":"demo"}},"spec":{"containers":[{"name":"c","image":"busybox"}]%s}}\n' \
        "$1" "${2:+,\"nodeName\":\"$2\"}" >"$tmp/$1.json"
    echo "$tmp/$1.json"
}

echo "1..12"
check "kubectl discovers the API (api-resources lists pods, nodes)" \
    run_has "pods" k api-resources
check "kubectl create pod" k create --validate=false -f "$(pod p1)"
check "kubectl get pod -o jsonpath reads the object" \
    run_has "^p1$" k get pod p1 -o 'jsonpath={.metadata.name}{"\n"}'
for i in 2 3 4 5; do k create --validate=false -f "$(pod p$i node-a)" >/dev/null 2>&1; done
check "kubectl list with --chunk-size 2 (limit/continue) sees all 5" \
    bash -c "kubectl --request-timeout=10s get pods --chunk-size=2 -o name | wc -l | grep -qx 5"
check "kubectl field selector spec.nodeName" \
    bash -c "kubectl --request-timeout=10s get pods --field-selector spec.nodeName=node-a -o name | wc -l | grep -qx 4"
check "kubectl label (patch) then label selector" \
    bash -c "kubectl label pod p1 tier=gpu >/dev/null && kubectl get pods -l tier=gpu -o name | grep -qx pod/p1"
check "kubectl annotate with a stale resourceVersion gets the Conflict Status" \
    run_has "Conflict" k annotate pod p1 x=y --resource-version=1
check "kubectl create of an existing pod gets AlreadyExists" \
    run_has "AlreadyExists" k create --validate=false -f "$tmp/p1.json"

# Watch: client-go decodes our chunked WatchEvent stream.
kubectl get pods --watch -o name --request-timeout=20s >"$tmp/watch" 2>&1 &
watch_pid=$!
for _ in $(seq 100); do grep -q "pod/p5" "$tmp/watch" && break; sleep 0.05; done
k create --validate=false -f "$(pod late)" >/dev/null 2>&1
for _ in $(seq 200); do grep -q "pod/late" "$tmp/watch" && break; sleep 0.05; done
check "kubectl get --watch receives a pod created later" grep -q "pod/late" "$tmp/watch"
kill "$watch_pid" 2>/dev/null
watch_pid=

check "kubectl delete (waits on a metadata.name field-selector watch)" \
    k delete pod p2 --wait=true --timeout=10s
check "kubectl get of a deleted pod gets NotFound" \
    run_has 'pods "p2" not found' k get pod p2
check "kubectl patch --type=json" \
    bash -c "kubectl patch pod p3 --type=json -p '[{\"op\":\"add\",\"path\":\"/metadata/annotations\",\"value\":{\"k\":\"v\"}}]' >/dev/null && kubectl get pod p3 -o 'jsonpath={.metadata.annotations.k}' | grep -qx v"
