#!/bin/sh
# Builds a one-layer OCI archive (for `ctr images import`) from files of this
# machine, for the images the end-to-end cluster cannot pull (no registry, no
# network) and gpuvisor does not build:
#   standin-image.sh REF ENTRYPOINT OUT.oci.tar FILE...
# Each FILE (or SRC=DEST) is copied to the same path (DEST) with the shared libraries
# ldd names (and the dynamic loader), so a dynamically linked host binary
# runs as it does here.  Used by tests/e2e/run_e2e.py for
#   harness.local/kube-scheduler:v1.20.2   the harness's kube-scheduler binary
#   harness.local/kube-webhook-certgen:standin   tests/e2e/certgen-standin.sh
#                                          with sh, openssl and curl
# (tests/e2e/overlay/kustomization.yaml says why each is swapped in).
set -eu
[ $# -ge 4 ] || { echo "usage: $0 REF ENTRYPOINT OUT.oci.tar FILE..." >&2; exit 2; }
ref=$1 entry=$2 out=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/gv-standin.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/tmp" "$root/etc" "$root/etc/ssl/certs"
chmod 1777 "$root/tmp"
echo "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" >"$root/etc/passwd"
echo "nogroup:x:65534:" >"$root/etc/group"
add() { # add SRC [DEST]: copy a file (symlinks resolved) to DEST (default: SRC)
    d=${2:-$1}
    mkdir -p "$root$(dirname "$d")"
    cp -L "$1" "$root$d"
}
for spec in "$@"; do
    f=${spec%%=*}
    add "$f" "${spec#*=}"
    for l in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[[:space:]]*\/[^ ]*ld-linux/{print $1}'); do
        [ -e "$root$l" ] || add "$l"
    done
done
tar -C "$root" --owner=0 --group=0 --numeric-owner -cf "$work/rootfs.tar" .
lay=$work/layout
tag=${ref##*:}
umoci init --layout "$lay"
umoci new --image "$lay:$tag"
umoci raw add-layer --image "$lay:$tag" "$work/rootfs.tar"
umoci config --image "$lay:$tag" --architecture amd64 --os linux --config.entrypoint "$entry" \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.workingdir /
umoci gc --layout "$lay"
python3 - "$lay/index.json" "$ref" "$tag" <<'EOF'
import json, sys
path, ref, tag = sys.argv[1:]
idx = json.load(open(path))
for m in idx["manifests"]:
    m["annotations"] = {"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": ref}
json.dump(idx, open(path, "w"))
EOF
mkdir -p "$(dirname "$out")"
tar -C "$lay" -cf "$out" oci-layout index.json blobs
