#!/usr/bin/env bash
# The real gpuvisor-scheduler binary serving the admission webhook over
# HTTPS, driven with curl: certificates made by openssl at test time, cluster
# facts (largest GPU) from the kube-apiserver stand-in, certificate rotation
# on disk while running, malformed reviews, health and metrics, clean exit
# on SIGTERM.
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
. tests/scheduler/scheduler_testlib.sh
BIN="$BUILD/bin/gpuvisor-scheduler"
sched_testlib_init webhook

mkcert() { # cn -> $tmp/cert.pem, $tmp/key.pem, replaced atomically
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=$1" \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
        -keyout "$tmp/new.key" -out "$tmp/new.crt" >/dev/null 2>&1 &&
        mv "$tmp/new.key" "$tmp/key.pem" && mv "$tmp/new.crt" "$tmp/cert.pem"
}
mkcert first || { echo "1..1"; echo "not ok 1 - openssl could not make a certificate"; exit 1; }
cp "$tmp/cert.pem" "$tmp/ca-first.pem"

# The API-server stand-in, with one node whose agent reports an 80 GB GPU.
start_fake_apiserver
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
inv='{"version":1,"driverVersion":"550.54.15","cudaVersion":"12.4","gpus":[{"uuid":"GPU-a","index":0,"model":"NVIDIA A100-SXM4-80GB","memoryMiB":81559,"memoryScaling":1.0,"cores":100,"split":10,"numa":0,"healthy":true,"mode":"vgpu","mig":false,"pciBusId":"00000000:07:00.0"}]}'
node=$("$PY" -c 'import json,sys; print(json.dumps({"apiVersion":"v1","kind":"Node","metadata":{"name":"gpu-1","annotations":{"gpuvisor.io/node-gpus":sys.argv[1],"gpuvisor.io/node-heartbeat":sys.argv[2]}}}))' "$inv" "$now")
curl -sf -X POST -H 'Content-Type: application/json' -d "$node" "$url/api/v1/nodes" >/dev/null
check "node with inventory created on the API stand-in" '[ $? -eq 0 ]'

# Without a placement key the daemon refuses to start (fail closed), naming the way out.
timeout 20 "$BIN" --master "$url" --extender-listen 127.0.0.1:0 --log-level warn 2>"$tmp/nokey.log"
rc=$?
check "no placement key: refuses to start and says why" \
    '[ "$rc" != 0 ] && grep -q "no placement key: give --placement-key-file" "$tmp/nokey.log"' \
    "exit $rc: $(cat "$tmp/nokey.log")"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/placement.key"
# A config file that does not parse stops the start (not defaults in its place), naming it.
echo '{"nodePolicy":"random"}' >"$tmp/bad-config.json"
# (bounded: a daemon that starts anyway is stopped after 20 s, and fails the check)
timeout 20 "$BIN" --master "$url" --extender-listen 127.0.0.1:0 \
    --placement-key-file "$tmp/placement.key" --config "$tmp/bad-config.json" --log-level warn \
    2>"$tmp/badcfg.log"
rc=$?
check "a config that does not parse: refuses to start, naming the file and the key" \
    '[ "$rc" != 0 ] && grep -q "bad-config.json.*nodePolicy" "$tmp/badcfg.log"' \
    "exit $rc: $(cat "$tmp/badcfg.log")"
# Listen addresses: ADDRESS:PORT, [ADDRESS]:PORT; no port, or an address past the buffer
# (128 bytes, exactly), is refused by name, never cut or overrun.
long=$(printf 'a%.0s' $(seq 128))
for bad in "--extender-listen 127.0.0.1" "--extender-listen $long:80" "--dashboard-listen nonsense"; do
    flag=${bad%% *} val=${bad#* }
    args=(--extender-listen 127.0.0.1:0)
    [ "$flag" = --extender-listen ] && args=()
    timeout 20 "$BIN" --master "$url" "${args[@]}" "$flag" "$val" \
        --placement-key-file "$tmp/placement.key" --log-level warn 2>"$tmp/listen.log"
    rc=$?
    check "$flag ${val:0:20}: refused as not ADDRESS:PORT" \
        '[ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q -- "$flag .* is not ADDRESS:PORT" "$tmp/listen.log"' \
        "exit $rc: $(cat "$tmp/listen.log")"
done
# Brackets are taken off ("[::1]:0"); an IPv4 address in them works on every machine.
rm -f "$tmp/ports-brk"
"$BIN" --master "$url" --extender-listen '[127.0.0.1]:0' --placement-key-file "$tmp/placement.key" \
    --port-file "$tmp/ports-brk" --log-level warn 2>"$tmp/brk.log" &
brk=$!
for _ in $(seq 100); do [ -s "$tmp/ports-brk" ] && break; sleep 0.1; done
pbrk=$(sed -n 's/^extender=//p' "$tmp/ports-brk" 2>/dev/null)
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$pbrk/metrics" 2>/dev/null)
kill "$brk" 2>/dev/null; wait "$brk" 2>/dev/null
check "--extender-listen [127.0.0.1]:0 listens (brackets taken off the address)" \
    '[ "$code" = 200 ]' "port '$pbrk', HTTP $code: $(cat "$tmp/brk.log")"
# TLS needs both halves: a certificate without its key is a usage error at once.
timeout 20 "$BIN" --master "$url" --extender-listen 127.0.0.1:0 \
    --placement-key-file "$tmp/placement.key" --webhook-listen 127.0.0.1:0 \
    --tls-cert-file "$tmp/cert.pem" --log-level warn 2>"$tmp/halftls.log"
rc=$?
check "webhook with a certificate and no key: usage error (exit 2) saying both are needed" \
    '[ "$rc" = 2 ] && grep -q "need --tls-cert-file and --tls-key-file" "$tmp/halftls.log"' \
    "exit $rc: $(cat "$tmp/halftls.log")"

"$BIN" --master "$url" --extender-listen 127.0.0.1:0 --extender-tls --webhook-listen 127.0.0.1:0 \
    --health-listen 127.0.0.1:0 --placement-key-file "$tmp/placement.key" \
    --tls-cert-file "$tmp/cert.pem" --tls-key-file "$tmp/key.pem" --port-file "$tmp/ports" \
    --log-level warn 2>"$tmp/sched.log" &
sched_pid=$!
for _ in $(seq 100); do [ -s "$tmp/ports" ] && break; sleep 0.1; done
wport=$(sed -n 's/^webhook=//p' "$tmp/ports" 2>/dev/null)
check "scheduler started with the webhook listener" '[ -n "$wport" ] && [ "$wport" -gt 0 ]' "$(cat "$tmp/sched.log")"
W="https://127.0.0.1:$wport"
H="http://127.0.0.1:$(sed -n 's/^health=//p' "$tmp/ports" 2>/dev/null)"

for _ in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$H/readyz")" = 200 ] && break
    sleep 0.1
done
check "healthz on the health listener" '[ "$(curl -s "$H/healthz")" = ok ]'
check "webhook listener serves no health or metrics (tenants may reach it)" \
    '[ "$(curl -s --cacert "$tmp/ca-first.pem" -o /dev/null -w "%{http_code}" "$W/metrics")" = 404 ] &&
     [ "$(curl -s --cacert "$tmp/ca-first.pem" -o /dev/null -w "%{http_code}" "$W/healthz")" = 404 ]'
eport=$(sed -n 's/^extender=//p' "$tmp/ports" 2>/dev/null)
out=$(curl -s --cacert "$tmp/ca-first.pem" -H 'Content-Type: application/json' \
    -d '{"Pod":{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[{"name":"c"}]}},"NodeNames":["gpu-1"]}' \
    "https://127.0.0.1:$eport/gpuvisor/filter")
check "extender over HTTPS (--extender-tls) answers filter" '[[ "$out" == *"\"NodeNames\":[\"gpu-1\"]"* ]]' "$out"
check "readyz turns ready once caches are synced" \
    '[ "$(curl -s -o /dev/null -w "%{http_code}" "$H/readyz")" = 200 ]'

review() { # pod-json -> AdmissionReview request
    "$PY" -c 'import json,sys; print(json.dumps({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"r-1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","namespace":"default","object":json.loads(sys.argv[1])}}))' "$1"
}
post() { curl -s --cacert "$tmp/ca-first.pem" -H 'Content-Type: application/json' -d "$1" -w '\n%{http_code}' "$W/mutate"; }

out=$(post "$(review '{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"4096"}}}]}}')")
code=$(tail -1 <<<"$out"); body=$(sed '$d' <<<"$out")
patch=$("$PY" -c 'import json,sys,base64; r=json.loads(sys.argv[1])["response"]; assert r["uid"]=="r-1" and r["allowed"] and r["patchType"]=="JSONPatch"; print(base64.b64decode(r["patch"]).decode())' "$body" 2>/dev/null)
check "GPU pod allowed with a base64 JSON Patch" '[ "$code" = 200 ] && [ -n "$patch" ]' "$body"
check "patch routes the pod to gpuvisor-scheduler" \
    '"$PY" -c "import json,sys; p=json.loads(sys.argv[1]); assert {\"op\":\"add\",\"path\":\"/spec/schedulerName\",\"value\":\"gpuvisor-scheduler\"} in p" "$patch"' "$patch"
check "patch adds the GPU count the kubelet needs" \
    '"$PY" -c "import json,sys; p=json.loads(sys.argv[1]); assert any(o[\"path\"]==\"/spec/containers/0/resources/limits/nvidia.com~1gpu\" and o[\"value\"]==\"1\" for o in p)" "$patch"' "$patch"

out=$(post "$(review '{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"200000"}}}]}}')")
msg=$("$PY" -c 'import json,sys; r=json.loads(sys.argv[1])["response"]; assert not r["allowed"]; print(r["status"]["message"])' "$(sed '$d' <<<"$out")" 2>/dev/null)
check "too much memory denied with the cluster's largest GPU" \
    '[[ "$msg" == *"nvidia.com/gpumem 200000 exceeds the largest GPU in the cluster (81559 MiB)"* ]]' "$msg"

out=$(post "$(review '{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpucores":"120"}}}]}}')")
msg=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["response"]["status"]["message"])' "$(sed '$d' <<<"$out")" 2>/dev/null)
check "gpucores out of range denied" '[[ "$msg" == *"0..100"* ]]' "$msg"

out=$(post '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"')
check "malformed review gets 400 with an error body" \
    '[ "$(tail -1 <<<"$out")" = 400 ] && [[ "$(sed "\$d" <<<"$out")" == *"\"Error\""* ]]' "$out"
out=$(post '{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}')
check "wrong API version gets 400" '[ "$(tail -1 <<<"$out")" = 400 ]'

# Rotate the certificate on disk: the next handshake presents it.
sleep 1
mkcert rotated
sleep 1.2
subj=$(curl -sv --cacert "$tmp/cert.pem" "$W/mutate" 2>&1 | sed -n 's/^\*  *subject: *//p')
check "rotated certificate served without restart" '[[ "$subj" == *rotated* ]]' "subject: $subj"
check "old CA no longer verifies the server" \
    '! curl -s --cacert "$tmp/ca-first.pem" "$W/mutate" >/dev/null 2>&1'

metrics=$(curl -s "$H/metrics")
check "metrics count webhook requests per code" \
    '[[ "$metrics" == *"gpuvisor_http_requests_total{server=\"webhook\",path=\"/mutate\",code=\"400\"} 2"* ]]'
check "metrics carry the latency histogram" \
    '[[ "$metrics" == *"gpuvisor_http_request_duration_seconds_bucket{server=\"webhook\",path=\"/mutate\",le=\"+Inf\"} 5"* ]]'

check "metrics say placements are signed" '[[ "$metrics" == *"gpuvisor_placement_signing_enabled 1"* ]]'

kill -TERM "$sched_pid"
wait "$sched_pid"
rc=$?
sched_pid=
check "SIGTERM: clean exit" '[ "$rc" = 0 ]' "exit $rc"

echo "1..$n"
[ "$fails" -eq 0 ]
