#!/usr/bin/env bash
# The container images (docs/install.md, "Images"): each image built twice
# from the same commit and binaries with scripts/build-image.sh (what
# `make images` runs), into two separate directories.  Reports per image: the
# build time, the uncompressed size of its file system (the sum of its
# files, and the layer tar) and the compressed archive, what dominates the
# size (the largest packages by dpkg's Installed-Size, gpuvisor's own files),
# and whether the two builds have the same digest (if not: the files that
# differ).  Needs root and the Debian archive (mmdebstrap); prints a line
# saying so and exits 0 without them.
set -u
BUILD=${BUILD:-build}
PY=/usr/bin/python3
if [ "$(id -u)" != 0 ] || ! command -v mmdebstrap >/dev/null || ! command -v umoci >/dev/null; then
    echo "images: not measured (needs root, mmdebstrap and umoci: scripts/debian-packages.txt, ## image)"
    exit 0
fi
make --no-print-directory -s BUILD="$BUILD" "$BUILD/bin/gpuvisor-node" "$BUILD/lib/libgpuvisor.so" \
    "$BUILD/bin/gpuvisor-scheduler" >&2 || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
version=$(scripts/build-image.sh version)
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH
echo "commit $(git rev-parse --short HEAD), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, Debian archive: $(scripts/build-image.sh version >/dev/null; grep -h '^URIs:\|^deb ' /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list 2>/dev/null | head -1)"
echo
for img in node scheduler; do
    for run in 1 2; do
        d=$work/$run
        mkdir -p "$d"
        t0=$(date +%s.%N)
        scripts/build-image.sh rootfs $img "$BUILD" "$d/$img.rootfs.tar" >"$d/$img.log" 2>&1 ||
            { echo "image $img: build $run FAILED"; tail -5 "$d/$img.log"; exit 1; }
        scripts/build-image.sh oci $img "$d/$img.rootfs.tar" "$d/gpuvisor-$img-$version.oci.tar" >>"$d/$img.log" 2>&1 ||
            { echo "image $img: oci $run FAILED"; tail -5 "$d/$img.log"; exit 1; }
        t1=$(date +%s.%N)
        echo "$t0 $t1" | awk '{printf "%.0f\n", $2 - $1}' >"$d/$img.secs"
    done
    "$PY" - "$work" "$img" "$version" <<'EOF'
import gzip, hashlib, io, json, os, sys, tarfile
work, img, version = sys.argv[1:]


def load(run):
    lay = os.path.join(work, run, "lay-" + img)
    os.makedirs(lay, exist_ok=True)
    arch = os.path.join(work, run, "gpuvisor-%s-%s.oci.tar" % (img, version))
    tarfile.open(arch).extractall(lay)
    idx = json.load(open(os.path.join(lay, "index.json")))
    mdig = idx["manifests"][0]["digest"]
    man = json.load(open(os.path.join(lay, "blobs", "sha256", mdig.split(":")[1])))
    layer = open(os.path.join(lay, "blobs", "sha256", man["layers"][0]["digest"].split(":")[1]), "rb").read()
    raw = gzip.decompress(layer)
    secs = open(os.path.join(work, run, img + ".secs")).read().strip()
    return mdig, os.path.getsize(arch), len(layer), raw, secs


d1, a1, l1, raw1, s1 = load("1")
d2, a2, l2, raw2, s2 = load("2")
tf = tarfile.open(fileobj=io.BytesIO(raw1))
members = tf.getmembers()
files = sum(m.size for m in members if m.isfile())
mib = lambda b: b / 1048576.0
print("image gpuvisor-%s:%s" % (img, version))
print("  build time (rootfs + oci):        %s s, %s s" % (s1, s2))
print("  uncompressed, sum of files:       %.1f MiB (%d entries)" % (mib(files), len(members)))
print("  uncompressed, layer tar:          %.1f MiB" % mib(len(raw1)))
print("  compressed layer (gzip):          %.1f MiB; archive %.1f MiB" % (mib(l1), mib(a1)))
print("  digest, build 1:                  %s" % d1)
print("  digest, build 2:                  %s" % d2)
print("  reproducible:                     %s" % ("yes, same digest" if d1 == d2 else "NO"))
if d1 != d2:
    t2 = {m.name: m for m in tarfile.open(fileobj=io.BytesIO(raw2)).getmembers()}
    t1 = {m.name: m for m in members}
    diff = [n for n in sorted(set(t1) | set(t2)) if n not in t1 or n not in t2 or
            (t1[n].size, t1[n].mtime, t1[n].mode, t1[n].linkname) != (t2[n].size, t2[n].mtime, t2[n].mode, t2[n].linkname)
            or (t1[n].isfile() and tf.extractfile(t1[n]).read() !=
                tarfile.open(fileobj=io.BytesIO(raw2)).extractfile(t2[n]).read())]
    print("  differing entries:                %s" % (", ".join(diff[:20]) or "none (tar metadata only)"))
status = tf.extractfile("./var/lib/dpkg/status").read().decode()
pk = []
for para in status.split("\n\n"):
    f = dict(l.split(": ", 1) for l in para.splitlines() if ": " in l and not l.startswith(" "))
    if "Package" in f:
        pk.append((int(f.get("Installed-Size", "0")), f["Package"]))
pk.sort(reverse=True)
# What the image actually holds per package is less than Installed-Size
# (docs, manuals, translations are filtered out), so also the largest
# directories of the tree.
dirs = {}
for m in members:
    if m.isfile():
        parts = m.name.lstrip("./").split("/")
        key = "/".join(parts[:4]) if parts[:3] == ["usr", "lib", "x86_64-linux-gnu"] else "/".join(parts[:3])
        dirs[key] = dirs.get(key, 0) + m.size
own = sum(m.size for m in members if m.isfile() and ("gpuvisor" in m.name.split("/")[-1] or "/gpuvisor/" in m.name))
print("  packages: %d; largest by Installed-Size: %s" % (len(pk), ", ".join("%s %.1f MiB" % (n, s / 1024.0) for s, n in pk[:6])))
print("  largest paths in the tree: %s" % ", ".join("/%s %.1f MiB" % (k, mib(v)) for k, v in sorted(dirs.items(), key=lambda x: -x[1])[:6]))
print("  gpuvisor's own files: %.2f MiB" % mib(own))
print()
EOF
done
