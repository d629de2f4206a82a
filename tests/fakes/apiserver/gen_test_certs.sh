#!/bin/sh
# Makes throw-away TLS material for the kube TLS tests in DIR (created if
# needed) with the openssl CLI.  Nothing here is ever committed: tests call
# this at run time into their scratch directory.  Exit status 2 when openssl
# is missing (callers skip), 1 on any other failure.
#
#   ca.crt/.key            test CA, RSA 2048 (as kubeadm makes)
#   other-ca.crt/.key      an unrelated CA (wrong-CA tests)
#   server.crt/.key        CN=kube-apiserver, SAN IP:127.0.0.1, DNS:localhost
#                          (CN is not the address: a client must check SANs)
#   wrong-san.crt/.key     same CA, SAN DNS:wrong.example only
#   ip-as-dns.crt/.key     same CA, SAN DNS:127.0.0.1 (an IP spelled as a DNS
#                          name: it must not verify the IP 127.0.0.1)
#   client-rsa.crt/.key    client cert (O=system:nodes), PKCS#1 RSA key
#   client-ec.crt/.key     client cert, EC P-256 key in SEC1 form ("EC PRIVATE
#                          KEY", what kubeadm and kind write)
#   client-ec.p8.key       the same EC key as PKCS#8 ("PRIVATE KEY")
#   other-client.crt/.key  client cert signed by other-ca (must be refused)
set -eu
dir=${1:?usage: gen_test_certs.sh DIR}
command -v openssl >/dev/null 2>&1 || { echo "openssl CLI not found" >&2; exit 2; }
mkdir -p "$dir"
cd "$dir"
umask 077

ca() { # name cn
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days 2 \
        -subj "/CN=$2" -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

# sign name ca subject extensions keyspec: key made by the caller in $name.key
sign() {
    openssl req -new -key "$1.key" -out "$1.csr" -subj "$3" 2>/dev/null
    printf '%s\n' "$4" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial \
        -out "$1.crt" -days 2 -extfile "$1.ext" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

rsa_key() { openssl genrsa -traditional -out "$1.key" 2048 2>/dev/null; }

server_ext() {
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n'
    printf 'extendedKeyUsage=serverAuth\nsubjectAltName=%s' "$1"
}
client_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'

ca ca gpuvisor-test-ca
ca other-ca unrelated-test-ca

rsa_key server
sign server ca /CN=kube-apiserver "$(server_ext IP:127.0.0.1,DNS:localhost)"
rsa_key wrong-san
sign wrong-san ca /CN=kube-apiserver "$(server_ext DNS:wrong.example)"
rsa_key ip-as-dns
sign ip-as-dns ca /CN=kube-apiserver "$(server_ext DNS:127.0.0.1)"

rsa_key client-rsa
sign client-rsa ca "/O=system:nodes/CN=system:node:node1" "$client_ext"
openssl ecparam -name prime256v1 -genkey -noout -out client-ec.key 2>/dev/null
sign client-ec ca "/O=system:nodes/CN=system:node:node2" "$client_ext"
openssl pkcs8 -topk8 -nocrypt -in client-ec.key -out client-ec.p8.key
rsa_key other-client
sign other-client other-ca /CN=intruder "$client_ext"
rm -f ./*.srl
