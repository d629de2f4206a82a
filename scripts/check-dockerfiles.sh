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

# The build stages' intermediate images this run leaves (about 1 GiB each)
# are removed at the end.  The first build takes no layer from the cache: its
# apt layer is then the archive's of today, as a Docker user's build gets (a
# cached one from an earlier run can be older than this machine's packages);
# the second reuses it.
podman images -q --filter dangling=true | sort -u >"$work/before"
# This machine's package versions, for the build stage's to be compared with:
# make images compiles with this machine's compiler and headers, the
# Dockerfile with the stage's (scripts/install-deps.sh, as root, keeps this
# machine's current).
# Only the build group's closure counts (the compiler, libc's and the -dev
# packages' headers); the rest of the stage is its own business.
scripts/packages.sh --closure build >"$work/closure" || :
dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' 2>/dev/null | awk '$1 == "ii" { print $2, $3 }' |
    sort | join - "$work/closure" >"$work/host.versions" || :
cache=--no-cache
for img in node scheduler; do
    t0=$(date +%s)
    set -- --isolation=chroot --network=host -f "deploy/docker/$img.Dockerfile" \
        --build-arg BASE="$base" --build-arg SOURCE_DATE_EPOCH="$sde" --build-arg GV_REVISION="$rev"
    if ! podman build $cache "$@" -t "localhost/gpuvisor-$img:dockerfile-check" . >"$work/$img.log" 2>&1; then
        echo "FAIL $img.Dockerfile builds: $(grep -v '^ *$' "$work/$img.log" | tail -5 | tr '\n' ' ')"
        fail=1
        continue
    fi
    cache=
    podman save --format oci-dir -o "$work/$img" "localhost/gpuvisor-$img:dockerfile-check" >/dev/null 2>&1
    podman rmi "localhost/gpuvisor-$img:dockerfile-check" >/dev/null 2>&1 || true
    # The build stage's installed packages (its layers are cached: seconds).
    : >"$work/$img.status"
    if podman build "$@" --target build -t "localhost/gpuvisor-$img-build:dockerfile-check" . \
        >/dev/null 2>&1; then
        if c=$(podman create "localhost/gpuvisor-$img-build:dockerfile-check" /bin/true 2>/dev/null); then
            podman cp "$c:/var/lib/dpkg/status" "$work/$img.status" >/dev/null 2>&1 || :
            podman rm "$c" >/dev/null 2>&1 || :
        fi
        podman rmi "localhost/gpuvisor-$img-build:dockerfile-check" >/dev/null 2>&1 || :
    fi
    python3 - "$build/images/gpuvisor-$img-$ver.oci.tar" "$work/$img" "$img" "$(( $(date +%s) - t0 ))" \
        "$work/host.versions" "$work/$img.status" <<'EOF' || fail=1
import gzip, hashlib, io, json, sys, tarfile

made, docker, img, secs, host_versions, stage_status = sys.argv[1:]


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


FIELDS = ("type", "mode", "uid", "gid", "size", "content", "link", "mtime")


def skew():
    """Packages installed both here and in the build stage, at other versions."""
    here = dict(l.split(" ", 1) for l in open(host_versions).read().splitlines() if " " in l)
    out, pkg, ver, ok = [], None, None, False
    for line in open(stage_status).read().splitlines() + [""]:
        if line.startswith("Package: "):
            pkg = line[9:]
        elif line.startswith("Version: "):
            ver = line[9:]
        elif line.startswith("Status: "):
            ok = line.endswith(" installed")
        elif not line:
            if ok and pkg in here and here[pkg] != ver:
                out.append("%s %s here, %s in the stage" % (pkg, here[pkg], ver))
            pkg, ver, ok = None, None, False
    return out


A, B = files(a_layers), files(b_layers)
only_a, only_b = sorted(set(A) - set(B)), sorted(set(B) - set(A))
diff = sorted(p for p in set(A) & set(B) if A[p] != B[p])
same = not only_a and not only_b and not diff
what = ["%s: %s" % (p, ", ".join("%s %s vs %s" % (f, str(x)[:12], str(y)[:12])
                                 for f, x, y in zip(FIELDS, A[p], B[p]) if x != y)) for p in diff[:3]]
print("%s %s.Dockerfile gives make images' files: %d paths, %d only in make images %s, "
      "%d only in the Dockerfile's %s, %d differ %s (podman build %s s)"
      % ("PASS" if same else "FAIL", img, len(A), len(only_a), only_a[:3], len(only_b), only_b[:3],
         len(diff), what, secs))
try:
    sk = skew()
except OSError:
    sk = None
if sk is None or not open(stage_status).read():
    print("NOTE %s.Dockerfile: the build stage's package versions could not be read" % img)
elif sk:
    # make images' binaries come from this machine's compiler and headers
    print("%s %s.Dockerfile: %d packages here differ from the build stage's (%s%s)%s"
          % ("FAIL" if not same else "NOTE", img, len(sk), "; ".join(sk[:6]), "; ..." if len(sk) > 6 else "",
             ": as root, scripts/install-deps.sh brings this machine's to the archive's" if not same else ""))
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
