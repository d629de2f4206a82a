#!/usr/bin/env bash
# Hostile tenant vs. placements (issue 14, docs/isolation.md "Placements"):
# the real gpuvisor-scheduler against the kube-apiserver stand-in, with a
# node of 8 GPUs.  The tenant creates a pod carrying a forged
# gpuvisor.io/assignment for all 8 GPUs, assigned-at 2099 and the
# gpuvisor.io/assigned label.
#  - webhook up: the test plays the API server's part and sends the
#    AdmissionReview (userInfo = the tenant) to the real webhook: refused;
#    the same review from gpuvisor's service account passes.
#  - webhook down (the stand-in has no admission, as with failurePolicy
#    Ignore or an outage): the pod is stored; the scheduler must not count
#    it (signature missing or wrong), so a real 1-GPU pod still fits.
# GV_SECURITY_BASELINE=1 runs the same attacks against a build without the
# fixes (no signing flags), to show they succeed there.
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
. tests/scheduler/scheduler_testlib.sh
BIN="$BUILD/bin/gpuvisor-scheduler"
BASELINE="${GV_SECURITY_BASELINE:-0}"
sched_testlib_init forged

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=webhook" \
    -addext "subjectAltName=IP:127.0.0.1" -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
    >/dev/null 2>&1 || bail "openssl could not make a certificate"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/placement.key"

start_fake_apiserver

# One node, 8 GPUs, live agent heartbeat.
"$PY" - "$url" <<'PYEOF'
import json, sys, time, urllib.request
url = sys.argv[1]
gpus = [{"uuid": "GPU-%d" % i, "index": i, "model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81559,
         "memoryScaling": 1.0, "cores": 100, "split": 10, "numa": 0, "healthy": True,
         "mode": "vgpu", "mig": False, "pciBusId": "00000000:%02x:00.0" % (7 + i)} for i in range(8)]
inv = {"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4", "gpus": gpus}
now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "annotations": {
    "gpuvisor.io/node-gpus": json.dumps(inv, separators=(",", ":")),
    "gpuvisor.io/node-heartbeat": now}}}
req = urllib.request.Request(url + "/api/v1/nodes", data=json.dumps(node).encode(), method="POST",
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req).read()
PYEOF
check "node with 8 GPUs on the API stand-in" '[ $? -eq 0 ]'

# The forged pod: all 8 GPUs exclusively, "assigned" far in the future.
forged=$("$PY" - <<'PYEOF'
import json
asg = "v1;node=gpu-1;c=" + ",".join("GPU-%d:81559:1000" % i for i in range(8))
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
    "name": "forged", "namespace": "tenant",
    "labels": {"gpuvisor.io/assigned": "true"},
    "annotations": {"gpuvisor.io/assignment": asg, "gpuvisor.io/assigned-node": "gpu-1",
                    "gpuvisor.io/assigned-at": "2099-01-01T00:00:00.000000Z",
                    "gpuvisor.io/assignment-sig": "v1." + "ab" * 32}},
    "spec": {"schedulerName": "gpuvisor-scheduler",
             "containers": [{"name": "c", "image": "x",
                             "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}))
PYEOF
)

if [ "$BASELINE" = 1 ]; then
    flags=()
else
    flags=(--placement-key-file "$tmp/placement.key")
fi
"$BIN" --master "$url" --extender-listen 127.0.0.1:0 --webhook-listen 127.0.0.1:0 \
    --tls-cert-file "$tmp/cert.pem" --tls-key-file "$tmp/key.pem" --port-file "$tmp/ports" \
    "${flags[@]}" --log-level warn 2>"$tmp/sched.log" &
sched_pid=$!
for _ in $(seq 100); do [ -s "$tmp/ports" ] && break; sleep 0.1; done
E="http://127.0.0.1:$(sed -n 's/^extender=//p' "$tmp/ports" 2>/dev/null)"
W="https://127.0.0.1:$(sed -n 's/^webhook=//p' "$tmp/ports" 2>/dev/null)"
check "scheduler started" '[ -s "$tmp/ports" ]' "$(cat "$tmp/sched.log")"

# ---- webhook up: the API server would send this review -------------------
review() { # user pod-json [old-pod-json]
    "$PY" -c '
import json, sys
req = {"uid": "r-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
       "resource": {"group": "", "version": "v1", "resource": "pods"},
       "operation": "UPDATE" if len(sys.argv) > 3 else "CREATE", "namespace": "tenant",
       "userInfo": {"username": sys.argv[1]}, "object": json.loads(sys.argv[2])}
if len(sys.argv) > 3:
    req["oldObject"] = json.loads(sys.argv[3])
print(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}))' "$@"
}
verdict() { # review-json -> "allowed" | "denied: msg"
    curl -s --cacert "$tmp/cert.pem" -H 'Content-Type: application/json' -d "$1" "$W/mutate" |
        "$PY" -c 'import json,sys; r=json.load(sys.stdin)["response"]; print("allowed" if r["allowed"] else "denied: " + r["status"]["message"])' 2>&1
}
v=$(verdict "$(review system:serviceaccount:tenant:default "$forged")")
check "webhook up: tenant's CREATE with placement annotations is refused" \
    '[[ "$v" == "denied: annotation gpuvisor.io/"*"written only by gpuvisor"* ]]' "$v"
plain=$("$PY" -c 'import json,sys; p=json.loads(sys.argv[1]); p["metadata"].pop("annotations"); p["metadata"].pop("labels"); print(json.dumps(p))' "$forged")
v=$(verdict "$(review system:serviceaccount:tenant:default "$forged" "$plain")")
check "webhook up: tenant's UPDATE adding an assignment to its pod is refused" \
    '[[ "$v" == denied:*"may not change or remove it"* ]]' "$v"
v=$(verdict "$(review system:serviceaccount:gpuvisor-system:gpuvisor-scheduler "$forged" "$plain")")
check "webhook up: the same UPDATE by gpuvisor-scheduler's service account passes" \
    '[ "$v" = allowed ]' "$v"
optout=$("$PY" -c 'import json,sys; p=json.loads(sys.argv[1]); p["metadata"]["annotations"]={"gpuvisor.io/preload":"false"}; p["metadata"].pop("labels"); print(json.dumps(p))' "$forged")
v=$(verdict "$(review system:serviceaccount:tenant:default "$optout")")
check "webhook up: preload opt-out outside the admin's namespaces is refused" \
    '[[ "$v" == denied:*"optOutNamespaces"* ]]' "$v"

# ---- webhook down: the forged pod reaches the store ----------------------
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d "$forged" "$url/api/v1/namespaces/tenant/pods")
check "webhook down: the forged pod is stored by the API stand-in" '[ "$code" = 201 ]' "$code"
# Give the informer the event: the pod shows up in the scheduler's log or
# metrics.  Bounded wait, not a timing assertion.
for _ in $(seq 50); do
    m=$(curl -s "$E/metrics")
    [[ "$m" == *"gpuvisor_placements_rejected_total 1"* ]] && break
    [[ "$m" == *"gpuvisor_node_gpus{"* ]] && [ "$BASELINE" = 1 ] && sleep 1 && break
    sleep 0.1
done
probe='{"Pod":{"metadata":{"name":"real","namespace":"tenant2","uid":"u-real"},"spec":{"schedulerName":"gpuvisor-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}},"NodeNames":["gpu-1"]}'
out=$(curl -s -H 'Content-Type: application/json' -d "$probe" "$E/gpuvisor/filter")
check "webhook down: the forged placement is not counted (a real 1-GPU pod still fits)" \
    '[[ "$out" == *"\"NodeNames\":[\"gpu-1\"]"* ]]' "$out"
check "webhook down: the rejection is logged with the reason" \
    'grep -q "pod tenant/forged: placement ignored, not counted: gpuvisor.io/assignment-sig does not match" "$tmp/sched.log"' \
    "$(tail -5 "$tmp/sched.log")"
check "webhook down: the rejection is counted in metrics" \
    '[[ "$(curl -s "$E/metrics")" == *"gpuvisor_placements_rejected_total 1"* ]]'
ev=$(curl -s "$url/api/v1/namespaces/tenant/events" | "$PY" -c '
import json, sys
for e in json.load(sys.stdin).get("items", []):
    if e.get("reason") == "PlacementRejected" and e["involvedObject"]["name"] == "forged":
        print(e["type"] + ": " + e["message"])' 2>&1)
check "webhook down: a Warning event PlacementRejected on the pod says why" \
    '[[ "$ev" == "Warning: gpuvisor placement ignored"*"assignment-sig does not match"* ]]' "$ev"

# ---- a tenant patching its forged pod in a loop fills no log ----------------
for i in $(seq 40); do
    curl -s -o /dev/null -X PATCH -H 'Content-Type: application/merge-patch+json' \
        -d "{\"metadata\":{\"labels\":{\"loop\":\"$i\"}}}" \
        "$url/api/v1/namespaces/tenant/pods/forged"
done
for _ in $(seq 100); do
    [[ "$(curl -s "$E/metrics")" == *"gpuvisor_placements_rejected_total 41"* ]] && break
    sleep 0.1
done
check "forged pod patched 40 times: every update is still rejected and counted" \
    '[[ "$(curl -s "$E/metrics")" == *"gpuvisor_placements_rejected_total 41"* ]]' \
    "$(curl -s "$E/metrics" | grep rejected_total)"
lines=$(grep -c "pod tenant/forged: placement ignored" "$tmp/sched.log")
check "forged pod patched 40 times: the warning is rate-limited (at most 10 a minute)" \
    '[ "$lines" -le 10 ] && [ "$lines" -ge 1 ]' "$lines lines"

echo "1..$n"
[ "$fails" -eq 0 ]
