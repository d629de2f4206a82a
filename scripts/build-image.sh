#!/bin/sh
# Builds gpuvisor's container images from Debian packages, without Docker or
# a registry: the one place that says what an image contains.  Both ways of
# building call it:
#   make images                      rootfs + oci, here (build/images/)
#   deploy/docker/*.Dockerfile       rootfs inside a Debian build stage, then
#                                    FROM scratch + COPY of the same tree
#
#   scripts/build-image.sh rootfs IMAGE BUILD OUT.tar
#       the image's file system as a tar (an empty /dev): Debian bookworm's Essential set plus
#       the "runtime" group of scripts/debian-packages.txt (mmdebstrap, from
#       the host's apt sources), gpuvisor's binaries from BUILD (make's output
#       tree), documentation stripped but every /usr/share/doc/*/copyright kept
#   scripts/build-image.sh oci IMAGE ROOTFS.tar OUT.oci.tar
#       that tree as a one-layer OCI image (umoci), its config (entrypoint,
#       user, labels) from image_config below, saved as an OCI archive that
#       `ctr images import`, `podman load` and `skopeo copy oci-archive:` read
#   scripts/build-image.sh config IMAGE
#       prints "user <uid:gid>" and "entrypoint <path>" (the Dockerfiles and
#       tests/deploy/test_images.sh compare theirs with it)
# IMAGE is node or scheduler.  Reproducible: SOURCE_DATE_EPOCH (default: the
# last commit's time) fixes every timestamp; two builds from the same commit
# against the same archive state give the same digest (bench/results/images.txt).
# Needs root (mmdebstrap --mode=root) or MMDEBSTRAP_MODE=unshare as a user
# with subuids; no network but the Debian archive.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

die() { echo "build-image.sh: $*" >&2; exit 1; }

# The project version: the images' tag (src/common/gv_version.h).
version() {
    sed -n 's/^#define GV_VERSION "\(.*\)"$/\1/p' "$repo/src/common/gv_version.h"
}

# What each image runs.  The node agent is root without capabilities (the
# kubelet's device-plugin directory and the host state directory are root's);
# the scheduler (extender + webhook) runs as 65532, numeric so that
# runAsNonRoot can be checked by the kubelet.
image_config() {
    case $1 in
    node) user=0:0 entrypoint=/usr/local/bin/gpuvisor-node
          desc="gpuvisor node agent (kubelet device plugin) and the interposer it installs" ;;
    scheduler) user=65532:65532 entrypoint=/usr/local/bin/gpuvisor-scheduler
          desc="gpuvisor scheduler extender and admission webhook" ;;
    *) die "unknown image '$1' (node or scheduler)" ;;
    esac
}

# The commit the image is built from: GV_REVISION when set (a `docker build`
# context has no .git: the Dockerfiles take it as a build argument), else
# git's HEAD.
revision() {
    if [ -n "${GV_REVISION:-}" ]; then
        echo "$GV_REVISION"
    else
        git -C "$repo" rev-parse HEAD 2>/dev/null || echo "$1"
    fi
}

sde() {
    if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
        echo "$SOURCE_DATE_EPOCH"
    elif git -C "$repo" log -1 --format=%ct 2>/dev/null; then
        :
    else
        die "set SOURCE_DATE_EPOCH (no git history to take it from)"
    fi
}

# The host's apt sources (deb822 or one-line), so the image comes from the
# archive this machine already uses: Debian's own file names first (the
# debian:bookworm images keep debian.sources), then any other .sources file
# (mmdebstrap-made trees name theirs 0000debian.sources).
apt_sources() {
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list \
        /etc/apt/sources.list.d/*.sources; do
        if [ -s "$f" ] && grep -qv '^[[:space:]]*\(#\|$\)' "$f"; then echo "$f"; return; fi
    done
    die "no apt sources in /etc/apt (mmdebstrap needs the Debian archive)"
}

cmd_rootfs() {
    [ $# -eq 3 ] || die "usage: rootfs IMAGE BUILD OUT.tar"
    image_config "$1"
    img=$1 build=$(cd "$2" && pwd) out=$3
    case $img in
    node) bins="$build/bin/gpuvisor-node $build/lib/libgpuvisor.so" ;;
    scheduler) bins="$build/bin/gpuvisor-scheduler" ;;
    esac
    mode=${MMDEBSTRAP_MODE:-root}
    [ "$mode" != root ] || [ "$(id -u)" = 0 ] ||
        die "mmdebstrap --mode=root needs root: run as root, or MMDEBSTRAP_MODE=unshare with subuids (docs/install.md, \"Images\")"
    command -v mmdebstrap >/dev/null ||
        die "mmdebstrap is missing: scripts/install-deps.sh (group 'image' of scripts/debian-packages.txt)"
    for b in $bins; do
        [ -f "$b" ] || die "$b is missing: run make first"
    done
    # A sanitizer or coverage build must not ship.
    for b in $bins; do
        if readelf -d "$b" | grep -q 'NEEDED.*\(lib[aut]san\|libgcov\)'; then
            die "$b is a sanitizer build; build the images from a plain make"
        fi
    done
    pkgs=$("$here/packages.sh" runtime | paste -sd, -)
    # Here, not inside mmdebstrap's arguments: a failure there would not stop
    # the script (set -e ignores command substitutions in arguments).
    sources=$(apt_sources)
    # Under one name whichever file it came from: mmdebstrap names the
    # image's sources file after it (etc/apt/sources.list.d/0000<name>).
    srcdir=$(mktemp -d "${TMPDIR:-/tmp}/gv-apt.XXXXXX")
    trap 'rm -rf "$srcdir"' EXIT
    case $sources in
    *.sources) cp "$sources" "$srcdir/debian.sources"; sources=$srcdir/debian.sources ;;
    *) cp "$sources" "$srcdir/sources.list"; sources=$srcdir/sources.list ;;
    esac
    SOURCE_DATE_EPOCH=$(sde)
    export SOURCE_DATE_EPOCH
    mkdir -p "$(dirname "$out")"
    # Every hook below runs with the image's tree as $1.  --skip=chroot/mount:
    # no /proc, /sys, /dev mounts, so the same command runs in an unprivileged
    # `docker build` stage; no package in the set needs them to install.
    # merged-usr hook: /bin -> usr/bin without the usrmerge package (and
    # the Perl it pulls in).  mmdebstrap copies the build host's
    # resolv.conf and hostname in: removed (the runtime mounts its own;
    # they would name this machine's DNS server in the image and differ
    # from host to host).  The dpkg path filters keep docs, manuals and
    # translations out, the copyright files (licences) in.
    # shellcheck disable=SC2016
    mmdebstrap --mode="$mode" --variant=essential --format=tar \
        --skip=chroot/mount \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --include="$pkgs" \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --customize-hook='rm -rf "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/var/cache/ldconfig/aux-cache "$1"/usr/share/info' \
        --customize-hook='rm -f "$1"/etc/resolv.conf "$1"/etc/hostname' \
        --customize-hook='find "$1"/usr/share/doc -xtype l -delete' \
        --customize-hook="\"$here/build-image.sh\" install-files $img \"$build\" \"\$1\"" \
        bookworm "$out.full" "$sources"
    # No device nodes in the image (runtimes give every container its own
    # /dev; Docker's debian images ship an empty one too), so the tree also
    # unpacks without CAP_MKNOD: in a Dockerfile's build stage under podman.
    mmtarfilter --path-exclude='/dev/*' <"$out.full" >"$out.tmp"
    rm -f "$out.full"
    mv -f "$out.tmp" "$out"
}

# Called by the rootfs hook: gpuvisor's own files in the tree $3.
cmd_install_files() {
    img=$1 build=$2 root=$3
    case $img in
    node)
        install -D -m 0755 -s "$build/bin/gpuvisor-node" "$root/usr/local/bin/gpuvisor-node"
        # Copied to the host by the DaemonSet's init container.
        install -D -m 0755 -s "$build/lib/libgpuvisor.so" "$root/usr/local/gpuvisor/lib/libgpuvisor.so" ;;
    scheduler)
        install -D -m 0755 -s "$build/bin/gpuvisor-scheduler" "$root/usr/local/bin/gpuvisor-scheduler" ;;
    esac
    # The scheduler's user, named (ps, logs); group 65532 reads its Secrets.
    grep -q '^gpuvisor:' "$root/etc/passwd" ||
        echo 'gpuvisor:x:65532:65532:gpuvisor:/nonexistent:/usr/sbin/nologin' >>"$root/etc/passwd"
    grep -q '^gpuvisor:' "$root/etc/group" || echo 'gpuvisor:x:65532:' >>"$root/etc/group"
    # gpuvisor's own notice beside the packages' copyright files.
    install -d "$root/usr/share/doc/gpuvisor"
    for f in "$repo"/LICENSE* "$repo"/COPYING* "$repo/README.md"; do
        [ -f "$f" ] && install -m 0644 "$f" "$root/usr/share/doc/gpuvisor/"
    done
    printf '%s\n' "gpuvisor $(version), built from $(revision 'an unversioned tree')" \
        >"$root/usr/share/doc/gpuvisor/VERSION"
}

cmd_oci() {
    [ $# -eq 3 ] || die "usage: oci IMAGE ROOTFS.tar OUT.oci.tar"
    image_config "$1"
    img=$1 rootfs=$2 out=$3
    [ -s "$rootfs" ] || die "$rootfs is missing or empty"
    command -v umoci >/dev/null ||
        die "umoci is missing: scripts/install-deps.sh (group 'image' of scripts/debian-packages.txt)"
    ver=$(version)
    name=gpuvisor-$img
    when=$(date -u -d "@$(sde)" +%Y-%m-%dT%H:%M:%SZ)
    rev=$(revision unknown)
    work=$(mktemp -d "${TMPDIR:-/tmp}/gv-oci.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    lay=$work/layout
    umoci init --layout "$lay"
    umoci new --image "$lay:$ver"
    # umoci's own gzip is deterministic; --history.created fixes the rest.
    umoci raw add-layer --image "$lay:$ver" --history.created "$when" \
        --history.created_by "scripts/build-image.sh rootfs $img" "$rootfs"
    umoci config --image "$lay:$ver" --created "$when" --history.created "$when" \
        --history.created_by "scripts/build-image.sh oci $img" \
        --author gpuvisor --architecture amd64 --os linux \
        --config.user "$user" --config.entrypoint "$entrypoint" \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.workingdir / \
        --config.label "org.opencontainers.image.title=$name" \
        --config.label "org.opencontainers.image.description=$desc" \
        --config.label "org.opencontainers.image.version=$ver" \
        --config.label "org.opencontainers.image.revision=$rev" \
        --config.label "org.opencontainers.image.created=$when"
    umoci gc --layout "$lay"
    # The index names the image as the kubelet will ask for it: the tag as
    # the OCI ref name, the full reference for containerd's import.
    python3 - "$lay/index.json" "$name" "$ver" <<'EOF'
import json, sys
path, name, ver = sys.argv[1:]
idx = json.load(open(path))
for m in idx["manifests"]:
    m["annotations"] = {"org.opencontainers.image.ref.name": ver,
                        "io.containerd.image.name": "docker.io/library/%s:%s" % (name, ver)}
json.dump(idx, open(path, "w"), sort_keys=True, separators=(",", ":"))
EOF
    mkdir -p "$(dirname "$out")"
    tar --sort=name --mtime="@$(sde)" --owner=0 --group=0 --numeric-owner \
        --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
        -C "$lay" -cf "$out.tmp" oci-layout index.json blobs
    mv -f "$out.tmp" "$out"
}

cmd_config() {
    image_config "$1"
    echo "user $user"
    echo "entrypoint $entrypoint"
}

[ $# -ge 1 ] || die "usage: build-image.sh rootfs|oci|config ..."
sub=$1
shift
case $sub in
rootfs) cmd_rootfs "$@" ;;
install-files) cmd_install_files "$@" ;;
oci) cmd_oci "$@" ;;
config) cmd_config "$@" ;;
version) version ;;
*) die "unknown command '$sub'" ;;
esac
