#!/usr/bin/env bash
# Checks fake_apiserver's HTTPS mode, and the certificates
# gen_test_certs.sh makes, against a real client: kubectl (client-go, Go's
# crypto/tls).  What test_kube_tls_with_fake_apiserver.c demands of our
# client (IP and DNS SAN checks, an IP only in a DNS SAN refused, unknown CA
# refused, RSA and EC client certificates, x509 auth, watch over TLS) is
# what client-go does here.  Skips without kubectl or openssl.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
for tool in kubectl openssl; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "1..0 # SKIP $tool not installed"
        echo "ok 1 # SKIP $tool not installed"
        exit 0
    fi
done
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/kubectl-tls.XXXXXX")
pid=
watch_pid=
cleanup() {
    [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
sh "$here/tests/fakes/apiserver/gen_test_certs.sh" "$tmp" || {
    echo "1..1"; echo "not ok 1 - gen_test_certs.sh failed"; exit 1; }

port=
start() { # server-cert-name, extra fake args...
    local name=$1; shift
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
    # The previous server's READY line must be gone before we look: the
    # background job truncates the file only when it gets to run, and reading
    # the old line gave the dead server's port (connection refused).
    rm -f "$tmp/out"
    /usr/bin/python3 "$here/tests/fakes/apiserver/fake_apiserver.py" --port 0 \
        --tls-cert "$tmp/$name.crt" --tls-key "$tmp/$name.key" "$@" >"$tmp/out" 2>/dev/null &
    pid=$!
    # until it is ready or gone (no time limit of ours: load must not fail it)
    while kill -0 "$pid" 2>/dev/null && ! grep -q READY "$tmp/out" 2>/dev/null; do sleep 0.05; done
    port=$(awk '/^READY/ {n = split($2, a, ":"); print a[n]}' "$tmp/out")
}
kc() { # host, cluster fields, user fields: writes $tmp/kubeconfig
    cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: t
clusters: [{name: c, cluster: {server: "https://$1:$port", $2}}]
contexts: [{name: t, context: {cluster: c, user: u, namespace: default}}]
users: [{name: u, user: {$3}}]
EOF
}
k() { kubectl --kubeconfig "$tmp/kubeconfig" --request-timeout=10s "$@"; }
b64() { base64 -w0 "$tmp/$1"; }

n=0
check() { # description, then a command whose success is the result
    local d=$1; shift
    n=$((n + 1))
    if "$@" >"$tmp/last" 2>&1; then echo "ok $n - $d"; else
        echo "not ok $n - $d"; sed 's/^/# /' "$tmp/last"; fi
}
fails_with() { # pattern, command...: command fails, its output contains pattern
    local pat=$1; shift
    ! "$@" >"$tmp/last" 2>&1 && grep -q -- "$pat" "$tmp/last"
}
ca="certificate-authority: $tmp/ca.crt"
ec="client-certificate: $tmp/client-ec.crt, client-key: $tmp/client-ec.key"
rsa="client-certificate-data: $(b64 client-rsa.crt), client-key-data: $(b64 client-rsa.key)"

echo "1..10"
start server --client-ca "$tmp/ca.crt" --token s3cret --control-port 0
kc 127.0.0.1 "$ca" "$ec"
check "EC (SEC1) client cert, server by IP SAN" k get nodes
check "the stand-in authenticated the EC certificate's subject" \
    /usr/bin/python3 -c "import sys, urllib.request as u
sys.exit('X509 system:node:node2' not in u.urlopen(sys.argv[1] + '/_fake/stats').read().decode())" \
    "$(awk '/^CONTROL/ {print $2}' "$tmp/out")"
kc localhost "certificate-authority-data: $(b64 ca.crt)" "$rsa"
check "RSA client cert from *-data, server by DNS SAN (localhost)" k get nodes
printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{"containers":[{"name":"c","image":"i"}]}}\n' \
    late >"$tmp/late.json"
kubectl --kubeconfig "$tmp/kubeconfig" get pods --watch -o name --request-timeout=20s \
    >"$tmp/watch" 2>&1 &
watch_pid=$!
# No race: kubectl lists, then watches from the list's resourceVersion.
k create --validate=false -f "$tmp/late.json" >/dev/null 2>&1
for _ in $(seq 200); do grep -q "pod/late" "$tmp/watch" && break; sleep 0.05; done
check "watch over TLS receives a pod created later" grep -q "pod/late" "$tmp/watch"
kill "$watch_pid" 2>/dev/null
watch_pid=
kc 127.0.0.1 "$ca" "token: s3cret"
check "no client certificate: refused in the handshake" fails_with "certificate required" k get nodes
kc 127.0.0.1 "certificate-authority: $tmp/other-ca.crt" "$ec"
check "unknown CA refused" fails_with "unknown authority" k get nodes

start wrong-san
kc 127.0.0.1 "$ca" "token: t"
check "no IP SAN for the address: refused" fails_with "IP SANs" k get nodes
kc localhost "$ca" "token: t"
check "no DNS SAN for the name: refused" fails_with "not localhost" k get nodes
kc 127.0.0.1 "insecure-skip-tls-verify: true" "token: t"
check "insecure-skip-tls-verify accepts it" k get nodes
start ip-as-dns
kc 127.0.0.1 "$ca" "token: t"
check "an IP only in a DNS SAN does not verify the IP" fails_with "IP SANs" k get nodes
