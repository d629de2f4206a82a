#!/bin/sh
# Stand-in for registry.k8s.io/ingress-nginx/kube-webhook-certgen in the
# end-to-end cluster, which has no registry to pull it from (tests only;
# tests/e2e/overlay/kustomization.yaml).  Takes the arguments deploy/'s Jobs
# give the real tool and does what it does with them:
#   create --host=H1,H2 --namespace=NS --secret-name=S
#       unless Secret NS/S exists: a CA and a serving certificate for the
#       hosts, stored as Secret S with keys ca, cert, key
#   patch --webhook-name=W --namespace=NS --secret-name=S --patch-mutating=true ...
#       writes the Secret's ca into every webhook's caBundle of the
#       MutatingWebhookConfiguration W (and failurePolicy, when given)
# with openssl and curl, through the pod's service account.
set -eu
cmd=$1
shift
host= ns= secret= webhook= policy=
for a in "$@"; do
    case $a in
    --host=*) host=${a#--host=} ;;
    --namespace=*) ns=${a#--namespace=} ;;
    --secret-name=*) secret=${a#--secret-name=} ;;
    --webhook-name=*) webhook=${a#--webhook-name=} ;;
    --patch-failure-policy=*) policy=${a#--patch-failure-policy=} ;;
    esac
done
sa=/var/run/secrets/kubernetes.io/serviceaccount
api=https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
kc() { # kc METHOD PATH [BODY-FILE] [CONTENT-TYPE] -> body on stdout, HTTP code in $tmp/code
    m=$1 p=$2 b=${3:-} ct=${4:-application/json}
    # (a user agent of its own: the API server pretty-prints JSON for curl's)
    set -- -sS -A kube-webhook-certgen-standin --cacert "$sa/ca.crt" \
        -H "Authorization: Bearer $(cat "$sa/token")" \
        -H "Content-Type: $ct" -X "$m" -o "$tmp/out" -w '%{http_code}' "$api$p"
    [ -n "$b" ] && set -- "$@" --data-binary "@$b"
    curl "$@" >"$tmp/code"
    cat "$tmp/out"
}
tmp=$(mktemp -d)
b64() { base64 -w0 <"$1"; }
case $cmd in
create)
    kc GET "/api/v1/namespaces/$ns/secrets/$secret" >/dev/null
    if [ "$(cat "$tmp/code")" = 200 ]; then echo "secret $ns/$secret exists"; exit 0; fi
    san=$(echo "$host" | tr ',' '\n' | sed 's/^/DNS:/' | paste -sd, -)
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj /CN=gpuvisor-webhook-ca -keyout "$tmp/ca.key" -out "$tmp/ca" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=${host%%,*}" -keyout "$tmp/key" -out "$tmp/csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >"$tmp/ext"
    openssl x509 -req -in "$tmp/csr" -CA "$tmp/ca" -CAkey "$tmp/ca.key" -CAcreateserial \
        -days 3650 -extfile "$tmp/ext" -out "$tmp/cert" 2>/dev/null
    printf '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"%s","namespace":"%s"},"data":{"ca":"%s","cert":"%s","key":"%s"}}' \
        "$secret" "$ns" "$(b64 "$tmp/ca")" "$(b64 "$tmp/cert")" "$(b64 "$tmp/key")" >"$tmp/body"
    kc POST "/api/v1/namespaces/$ns/secrets" "$tmp/body" >/dev/null
    code=$(cat "$tmp/code")
    [ "$code" = 201 ] || { echo "create secret: HTTP $code: $(cat "$tmp/out")" >&2; exit 1; }
    echo "secret $ns/$secret created"
    ;;
patch)
    kc GET "/api/v1/namespaces/$ns/secrets/$secret" >"$tmp/secret"
    [ "$(cat "$tmp/code")" = 200 ] || { echo "secret $ns/$secret: HTTP $(cat "$tmp/code")" >&2; exit 1; }
    ca=$(sed -n 's/.*"ca": *"\([^"]*\)".*/\1/p' "$tmp/secret" | head -1)
    [ -n "$ca" ] || { echo "secret $ns/$secret has no ca" >&2; exit 1; }
    path=/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/$webhook
    kc GET "$path" >"$tmp/wh"
    [ "$(cat "$tmp/code")" = 200 ] || { echo "webhook $webhook: HTTP $(cat "$tmp/code")" >&2; exit 1; }
    # update, as the real tool (its ClusterRole grants get and update): the
    # object as read, every webhook's caBundle (and failurePolicy) replaced
    sed -e 's/"caBundle":"[^"]*",\{0,1\}//g' -e "s|\"clientConfig\":{|\"clientConfig\":{\"caBundle\":\"$ca\",|g" \
        "$tmp/wh" >"$tmp/body"
    if [ -n "$policy" ]; then
        sed -i "s/\"failurePolicy\":\"[A-Za-z]*\"/\"failurePolicy\":\"$policy\"/g" "$tmp/body"
    fi
    n=$(grep -o '"caBundle"' "$tmp/body" | wc -l)
    [ "$n" -gt 0 ] || { echo "webhook $webhook: no clientConfig found in $(head -c 300 "$tmp/wh")" >&2; exit 1; }
    kc PUT "$path" "$tmp/body" >/dev/null
    code=$(cat "$tmp/code")
    [ "$code" = 200 ] || { echo "update webhook: HTTP $code: $(cat "$tmp/out")" >&2; exit 1; }
    echo "webhook $webhook: caBundle set on $n webhook(s)"
    ;;
*) echo "certgen-standin: unknown command $cmd" >&2; exit 2 ;;
esac
