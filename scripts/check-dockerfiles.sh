#!/bin/sh
# make images-docker-check: builds deploy/docker/{node,scheduler}.Dockerfile
# for real, with podman (Debian's; no Docker daemon, no registry), and
# checks that each gives the same files as `make images` (build/images/):
# every path with the same type, permission bits, owner, size, content,
# link target and timestamp, and the same user and entrypoint.  The layer
# digests themselves differ: buildah writes its own tar headers.
#
# Offline but for the Debian archive, as make images: the Dockerfiles' build
# stage base (debian:bookworm-slim, pinned by digest for Docker users) cannot
# be pulled here, so a stand-in is made from the same archive (mmdebstrap
# --variant=minbase, as Debian's images are; cached in podman's storage as
# localhost/gpuvisor-build-base:bookworm) and passed as --build-arg BASE.
# --isolation=chroot: the RUN steps without an OCI runtime, which cannot set
# podman's default rlimits on a machine without CAP_SYS_RESOURCE.
# Root.  Usage: scripts/check-dockerfiles.sh [BUILD]   (default build)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cd "$repo"
build=${1:-build}
base=localhost/gpuvisor-build-base:bookworm
ver=$(scripts/build-image.sh version)
sde=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
rev=${GV_REVISION:-$(git rev-parse HEAD)}
fail=0

[ "$(id -u)" = 0 ] || { echo "FAIL dockerfiles: needs root (podman, mmdebstrap --mode=root)"; exit 1; }
for t in podman mmdebstrap; do
    command -v $t >/dev/null ||
        { echo "FAIL dockerfiles: $t missing (scripts/install-deps.sh)"; exit 1; }
done
for img in node scheduler; do
    [ -s "$build/images/gpuvisor-$img-$ver.oci.tar" ] ||
        { echo "FAIL dockerfiles: $build/images/gpuvisor-$img-$ver.oci.tar missing (make images)"; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/gv-dockerfiles.XXXXXX")
trap 'rm -rf "$work"' EXIT

if ! podman image exists "$base"; then
    src=/etc/apt/sources.list.d/debian.sources
    [ -s "$src" ] || src=/etc/apt/sources.list
    mmdebstrap --variant=minbase --format=tar bookworm "$work/base.tar" "$src" >"$work/base.log" 2>&1 ||
        { echo "FAIL dockerfiles: build stage base (mmdebstrap): $(tail -3 "$work/base.log")"; exit 1; }
    podman import "$work/base.tar" "$base" >/dev/null
    rm -f "$work/base.tar"
fi

# The build stages' intermediate images this run leaves (about 1 GiB each):
# removed at the end; those from earlier runs stay (the apt layer is reused).
podman images -q --filter dangling=true | sort -u >"$work/before"
for img in node scheduler; do
    t0=$(date +%s)
    if ! podman build --isolation=chroot --network=host -f "deploy/docker/$img.Dockerfile" \
        --build-arg BASE="$base" --build-arg SOURCE_DATE_EPOCH="$sde" --build-arg GV_REVISION="$rev" \
        -t "localhost/gpuvisor-$img:dockerfile-check" . >"$work/$img.log" 2>&1; then
        echo "FAIL $img.Dockerfile builds: $(grep -v '^ *$' "$work/$img.log" | tail -5 | tr '\n' ' ')"
        fail=1
        continue
    fi
    podman save --format oci-dir -o "$work/$img" "localhost/gpuvisor-$img:dockerfile-check" >/dev/null 2>&1
    podman rmi "localhost/gpuvisor-$img:dockerfile-check" >/dev/null 2>&1 || true
    python3 - "$build/images/gpuvisor-$img-$ver.oci.tar" "$work/$img" "$img" "$(( $(date +%s) - t0 ))" <<'EOF' || fail=1
import gzip, hashlib, io, json, sys, tarfile

made, docker, img, secs = sys.argv[1:]


def open_layout(get):
    idx = json.loads(get("index.json"))
    m = json.loads(get("blobs/sha256/" + idx["manifests"][0]["digest"].split(":")[1]))
    cfg = json.loads(get("blobs/sha256/" + m["config"]["digest"].split(":")[1]))
    return [get("blobs/sha256/" + l["digest"].split(":")[1]) for l in m["layers"]], cfg.get("config", {})


t = tarfile.open(made)
a_layers, a_cfg = open_layout(lambda p: t.extractfile(p).read())
b_layers, b_cfg = open_layout(lambda p: open(docker + "/" + p, "rb").read())


def files(layers):
    """path -> what a container sees of it (tar header details left out)."""
    out = {}
    for data in layers:
        tf = tarfile.open(fileobj=io.BytesIO(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data))
        for e in tf.getmembers():
            name = e.name.lstrip("./").rstrip("/")
            if not name:
                continue
            link = e.linkname.lstrip("./") if e.islnk() else e.linkname if e.issym() else ""
            body = hashlib.sha256(tf.extractfile(e).read()).hexdigest() if e.isfile() else ""
            out[name] = (e.type, e.mode & 0o7777, e.uid, e.gid, e.size if e.isfile() else 0, body,
                         link, int(e.mtime))
    return out


A, B = files(a_layers), files(b_layers)
only_a, only_b = sorted(set(A) - set(B)), sorted(set(B) - set(A))
diff = sorted(p for p in set(A) & set(B) if A[p] != B[p])
same = not only_a and not only_b and not diff
print("%s %s.Dockerfile gives make images' files: %d paths, %d only in make images %s, "
      "%d only in the Dockerfile's %s, %d differ %s (podman build %s s)"
      % ("PASS" if same else "FAIL", img, len(A), len(only_a), only_a[:3], len(only_b), only_b[:3],
         len(diff), [(p, A[p][:5], B[p][:5]) for p in diff[:3]], secs))
keys = ("User", "Entrypoint")
ok = all(a_cfg.get(k) == b_cfg.get(k) for k in keys)
print("%s %s.Dockerfile runs as make images' config: user %s, entrypoint %s (Dockerfile: %s, %s)"
      % ("PASS" if ok else "FAIL", img, a_cfg.get("User"), a_cfg.get("Entrypoint"),
         b_cfg.get("User"), b_cfg.get("Entrypoint")))
sys.exit(0 if same and ok else 1)
EOF
done
podman images -q --filter dangling=true | sort -u >"$work/after"
comm -13 "$work/before" "$work/after" | while read -r id; do
    # kept when a later stage still uses it (the shared apt layer)
    podman rmi "$id" >/dev/null 2>&1 || true
done
exit $fail
