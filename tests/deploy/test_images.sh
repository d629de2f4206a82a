#!/usr/bin/env bash
# The container images (docs/install.md, "Images").
# Always: `make images` and both Dockerfiles build through the one script,
# scripts/build-image.sh (the Dockerfiles run its rootfs step and copy the
# tree into FROM scratch; their USER and ENTRYPOINT are what the script's
# config step prints, which is what `make images` writes into the OCI config).
# When `make images` has run ($BUILD/images/gpuvisor-*-VERSION.oci.tar): each
# archive is a valid OCI layout (every blob's digest and size as its
# descriptor says; skopeo reads it) named as the deploy refers to it; its
# config runs the entrypoint as the deploy's user (numeric, non-root for the
# scheduler); the layer holds the binaries, a licence file for every
# installed package and no manuals or translations; uncompressed under
# 100 MiB; and, as root, the binary starts in the image's tree as the
# image's user (every library present) and the node image runs the
# DaemonSet's install-interposer command itself.
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
failed=0
nok() { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/images.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
version=$(scripts/build-image.sh version)

# ---- one source of truth ---------------------------------------------------
for img in node scheduler; do
    df=deploy/docker/$img.Dockerfile
    want_user=$(scripts/build-image.sh config $img | sed -n 's/^user //p')
    want_ep=$(scripts/build-image.sh config $img | sed -n 's/^entrypoint //p')
    last=$(awk '/^FROM /{s=""} {s=s $0 "\n"} END{printf "%s", s}' "$df")
    problems=()
    grep -Eq '^ARG BASE=debian:bookworm-slim@sha256:[0-9a-f]{64}$' "$df" || problems+=("build stage base not pinned by digest")
    grep -q 'packages.sh build image)' "$df" || problems+=("build stage does not install the build and image groups")
    grep -Eq "scripts/build-image.sh rootfs $img build /rootfs.tar" "$df" || problems+=("no 'scripts/build-image.sh rootfs $img'")
    grep -Eq 'apt-get install[^$]*\<lib[a-z0-9-]+\>' "$df" && problems+=("installs named libraries itself")
    [[ $last == "FROM scratch"* ]] || problems+=("final stage is not FROM scratch")
    [[ $last == *"COPY --from=build /rootfs/ /"* ]] || problems+=("final stage does not copy the script's tree")
    [[ $last == *"USER $want_user"* ]] || problems+=("USER is not $want_user")
    [[ $last == *"ENTRYPOINT [\"$want_ep\"]"* ]] || problems+=("ENTRYPOINT is not [\"$want_ep\"]")
    [ "$(grep -c '^\(RUN\|COPY\|ADD\)' <<<"$last")" = 1 ] || problems+=("final stage adds more than the script's tree")
    if [ ${#problems[@]} -eq 0 ]; then
        ok "$df builds its image with scripts/build-image.sh (user $want_user, entrypoint $want_ep)"
    else
        nok "$df builds its image with scripts/build-image.sh" "${problems[@]}"
    fi
done
plan=$(make -n --no-print-directory BUILD="$tmp/planbuild" images 2>&1)
if grep -q "scripts/build-image.sh rootfs node $tmp/planbuild" <<<"$plan" &&
    grep -q "scripts/build-image.sh rootfs scheduler $tmp/planbuild" <<<"$plan" &&
    grep -q "scripts/build-image.sh oci node .*gpuvisor-node-$version.oci.tar" <<<"$plan" &&
    grep -q "scripts/build-image.sh oci scheduler .*gpuvisor-scheduler-$version.oci.tar" <<<"$plan"; then
    ok "make images builds both images with scripts/build-image.sh (rootfs, then oci)"
else
    nok "make images builds both images with scripts/build-image.sh (rootfs, then oci)" "$(grep build-image <<<"$plan" | head -4)"
fi

# ---- the archives ----------------------------------------------------------
archives=("$BUILD/images/gpuvisor-node-$version.oci.tar" "$BUILD/images/gpuvisor-scheduler-$version.oci.tar")
if [ ! -s "${archives[0]}" ] || [ ! -s "${archives[1]}" ]; then
    skip "the image archives" "not built (make images: needs root and the Debian archive)"
    echo "1..$n"
    exit $failed
fi
for img in node scheduler; do
    a=$BUILD/images/gpuvisor-$img-$version.oci.tar
    d=$tmp/$img
    mkdir -p "$d/layout"
    tar -C "$d/layout" -xf "$a"
    if command -v skopeo >/dev/null 2>&1; then
        if skopeo inspect --config "oci:$d/layout:$version" >"$d/skopeo.json" 2>"$d/err"; then
            ok "gpuvisor-$img: skopeo reads the archive's OCI layout, tag $version"
        else
            nok "gpuvisor-$img: skopeo reads the archive's OCI layout, tag $version" "$(head -3 "$d/err")"
        fi
    else
        skip "gpuvisor-$img: skopeo reads the archive" "skopeo not installed (image group)"
    fi
    ep=$(scripts/build-image.sh config $img | sed -n 's/^entrypoint //p')
    user=$(scripts/build-image.sh config $img | sed -n 's/^user //p')
    N0=$n "$PY" - "$d" "$img" "$version" "$ep" "$user" <<'EOF'
import gzip, hashlib, io, json, os, sys, tarfile
d, img, version, ep, user = sys.argv[1:]
lay = os.path.join(d, "layout")
n = int(os.environ.get("N0", "0"))
out = []


def check(cond, name, detail=""):
    global n
    n += 1
    out.append(("ok %d - gpuvisor-%s: %s" if cond else "not ok %d - gpuvisor-%s: %s") % (n, img, name))
    if not cond and detail:
        out.append("# " + str(detail)[:1500])


def blob(desc):
    algo, hexd = desc["digest"].split(":")
    data = open(os.path.join(lay, "blobs", algo, hexd), "rb").read()
    return data, hashlib.sha256(data).hexdigest() == hexd and len(data) == desc["size"]


idx = json.load(open(os.path.join(lay, "index.json")))
layout = json.load(open(os.path.join(lay, "oci-layout")))
m = idx["manifests"][0] if len(idx.get("manifests", [])) == 1 else {}
ann = m.get("annotations", {})
check(layout.get("imageLayoutVersion") == "1.0.0" and
      ann.get("org.opencontainers.image.ref.name") == version and
      ann.get("io.containerd.image.name") == "docker.io/library/gpuvisor-%s:%s" % (img, version),
      "one manifest, named gpuvisor-%s:%s (the deploy's image, for ctr images import)" % (img, version), ann)
manifest, good = blob(m)
manifest = json.loads(manifest)
config, cgood = blob(manifest["config"])
config = json.loads(config)
layers = [blob(l) for l in manifest["layers"]]
check(good and cgood and all(g for _, g in layers) and len(layers) == 1,
      "every blob matches its digest and size; one layer")
c = config.get("config", {})
check(c.get("Entrypoint") == [ep] and c.get("User") == user and config.get("architecture") == "amd64"
      and config.get("os") == "linux", "config runs %s as %s" % (ep, user), c)
check(user.split(":")[0].isdigit() and (img == "node" or user.split(":")[0] != "0"),
      "the user is numeric%s (the kubelet can check runAsNonRoot)" % ("" if img == "node" else ", not root"))
check(c.get("Labels", {}).get("org.opencontainers.image.version") == version, "labelled with its version")

tf = tarfile.open(fileobj=io.BytesIO(gzip.decompress(layers[0][0])))
members = {t.name.lstrip("./").rstrip("/"): t for t in tf.getmembers()}
total = sum(t.size for t in members.values() if t.isfile())


def resolve(p, depth=0):
    """The member a path names in the image, following symlinks in every component."""
    parts = [x for x in p.split("/") if x]
    cur = ""
    for i, part in enumerate(parts):
        nxt = part if not cur else cur + "/" + part
        t = members.get(nxt)
        if t is not None and t.issym() and depth < 40:
            tgt = t.linkname
            base = "" if tgt.startswith("/") else cur
            rest = "/".join(parts[i + 1:])
            target = os.path.normpath(os.path.join(base, tgt.lstrip("/")))
            return resolve(target + ("/" + rest if rest else ""), depth + 1)
        if t is None:
            return None
        cur = nxt
    return members.get(cur)


e = resolve(ep.lstrip("/"))
check(e is not None and e.isfile() and e.mode & 0o111, "the entrypoint %s is an executable file" % ep)
if img == "node":
    lib = resolve("usr/local/gpuvisor/lib/libgpuvisor.so")
    check(lib is not None and lib.isfile(), "carries the interposer the init container installs")
    tools = [t for t in ("bin/sh", "bin/mkdir", "bin/cp", "bin/mv") if resolve(t) is None]
    check(not tools, "has the init container's shell and tools", tools)
else:
    pw = tf.extractfile(resolve("etc/passwd")).read().decode()
    check(any(l.split(":")[2:4] == ["65532", "65532"] for l in pw.splitlines()),
          "/etc/passwd names user 65532", pw[-200:])
status = tf.extractfile(resolve("var/lib/dpkg/status")).read().decode()
pkgs = [l.split(":", 1)[1].strip() for l in status.splitlines() if l.startswith("Package:")]
nolic = [p for p in pkgs if resolve("usr/share/doc/%s/copyright" % p) is None]
check(pkgs and not nolic, "a licence (usr/share/doc/<package>/copyright) for each of its %d packages" % len(pkgs), nolic)
check(resolve("usr/share/doc/gpuvisor/VERSION") is not None, "gpuvisor's own notice in usr/share/doc/gpuvisor")
lic = resolve("usr/share/doc/gpuvisor/LICENSE")
check(lic is not None and lic.isfile() and tf.extractfile(lic).read() == open("LICENSE", "rb").read(),
      "gpuvisor's licence: usr/share/doc/gpuvisor/LICENSE is the repository's LICENSE")
docs = [p for p in members if p.startswith(("usr/share/man/", "usr/share/info/"))
        or (p.startswith("usr/share/locale/") and members[p].isfile() and not p.endswith("locale.alias"))
        or (p.startswith("usr/share/doc/") and members[p].isfile() and not p.endswith("/copyright")
            and not p.startswith("usr/share/doc/gpuvisor/"))]
check(not docs, "no manuals, info pages, translations or other docs", docs[:5])
hostf = [p for p in ("etc/resolv.conf", "etc/hostname") if p in members]
check(not hostf, "nothing of the build host (its resolv.conf, hostname: the runtime mounts them)", hostf)
devs = [p for p, t in members.items() if t.ischr() or t.isblk() or t.isfifo()]
check(not devs, "no device nodes (the runtime provides /dev; a build stage needs no CAP_MKNOD)", devs[:5])
check(total < 100 * 1024 * 1024, "uncompressed size %.1f MiB, under 100 MiB" % (total / 1048576.0))
print("\n".join(out))
open(os.path.join(d, "n"), "w").write(str(n))
if any(l.startswith("not ok") for l in out):
    open(os.path.join(d, "failed"), "w").write("1")
EOF
    if [ -s "$d/n" ]; then n=$(cat "$d/n"); else nok "gpuvisor-$img: the layer checks ran"; fi
    [ -e "$d/failed" ] && failed=1

    # Run it: the image's tree, the image's user, nothing from the host.
    if [ "$(id -u)" != 0 ] || ! command -v chroot >/dev/null 2>&1; then
        skip "gpuvisor-$img: starts in its own tree" "needs root (chroot)"
        continue
    fi
    mkdir -p "$d/root"
    layer=$("$PY" -c 'import json,sys; l=sys.argv[1]; i=json.load(open(l+"/index.json")); m=i["manifests"][0]["digest"].split(":")[1]; print(l+"/blobs/sha256/"+json.load(open(l+"/blobs/sha256/"+m))["layers"][0]["digest"].split(":")[1])' "$d/layout")
    tar -C "$d/root" --numeric-owner -xzpf "$layer"
    if out=$(chroot --userspec="$user" "$d/root" "$ep" --version 2>&1) && [[ $out == *"$version"* ]]; then
        ok "gpuvisor-$img: $ep --version runs in the image's tree as $user ($out)"
    else
        nok "gpuvisor-$img: $ep --version runs in the image's tree as $user" "$out"
    fi
    if [ $img = node ]; then
        # The init container's command, taken from the DaemonSet itself.
        script=$("$PY" -c 'import sys,yaml
for d in yaml.safe_load_all(open("deploy/base/node-agent.yaml")):
    if d and d["kind"] == "DaemonSet":
        c = d["spec"]["template"]["spec"]["initContainers"][0]
        print(c["command"][-1])' 2>/dev/null)
        mkdir -p "$d/root/host/usr/local/gpuvisor"
        if [ -n "$script" ] && chroot "$d/root" /bin/sh -ec "$script" 2>"$d/init.err" &&
            cmp -s "$d/root/host/usr/local/gpuvisor/lib/libgpuvisor.so" "$d/root/usr/local/gpuvisor/lib/libgpuvisor.so" &&
            [ "$(cat "$d/root/host/usr/local/gpuvisor/ld.so.preload")" = /usr/local/gpuvisor/lib/libgpuvisor.so ]; then
            ok "gpuvisor-node: the DaemonSet's install-interposer command runs in the image and installs the interposer"
        else
            nok "gpuvisor-node: the DaemonSet's install-interposer command runs in the image" "$(head -3 "$d/init.err")"
        fi
    fi
done
echo "1..$n"
exit $failed
