#!/usr/bin/env bash
# A real CDI consumer reads the node agent's spec (issue 28): podman (4.3,
# Debian bookworm's) runs a container from a local busybox image with
# --device <kind>=<GPU uuid> and the container gets the device nodes (real
# ones, made with mknod in a stand-in driver root, so a hostPath that is no
# device node fails here), the env and the read-only library mounts.  And
# podman confirms the two ways a spec is lost: a kind CDI 0.5 cannot parse
# ("gpuvisor.io/gpu.shared", the whole spec dropped), and a second spec of
# the same kind (nvidia-ctk's nvidia.com/gpu: nothing resolves), which is
# why the agent checks kinds and defaults to gpuvisor.io/gpu.
#
# podman reads /etc/cdi and /var/run/cdi only (4.3 has no spec-dir option):
# the test runs in a mount namespace of its own with a tmpfs over each, so
# the host's specs are neither read nor touched.
#
# Skips, with the reason: not root (mknod, rootful podman), podman or a
# static busybox missing, no mount namespace, or podman unable to run any
# container here (checked first with a container without CDI devices).
#
# The OCI runtime: podman's default first, runc when that one cannot start a
# container here.  Debian's podman defaults to crun, and crun refuses a host
# whose cgroups are "hybrid" (v1 controllers, and a cgroup2 tree that still
# holds one: "cgroups in hybrid mode not supported"), which some machines
# boot with (CI's did at stop 35); runc runs there.  CDI is resolved by
# podman itself before either runtime starts, so what is tested is the same.
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
BUILD="${BUILD:-build}"
GEN="$BUILD/testbin/cdi_spec_gen"
UUID=GPU-0badc0de-0000-4000-8000-000000000000
VER=550.54.15
n=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }
skip_all() {
    for d in "container without CDI devices runs" "the spec resolves: device nodes" \
             "the spec resolves: env" "the spec resolves: read-only library mounts" \
             "a class with '.' is not resolved by the consumer" \
             "two specs of one kind: neither resolves"; do
        n=$((n + 1)); echo "ok $n - $d # SKIP $1"
    done
    echo "1..$n"
    exit 0
}

[ "$(id -u)" = 0 ] || skip_all "needs root (mknod, rootful podman)"
command -v podman >/dev/null || skip_all "podman not installed"
busybox=
for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || skip_all "no static busybox (package busybox-static)"
[ -x "$GEN" ] || { echo "not ok 1 - $GEN not built"; echo "1..1"; exit 1; }

tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/cdi-podman.XXXXXX")
tmp=$(cd "$tmp" && pwd)
made=()
trap 'for d in "${made[@]}"; do rmdir "$d" 2>/dev/null; done
      podman --root "$tmp/store" --runroot "$tmp/run" rm -af >/dev/null 2>&1
      podman --root "$tmp/store" --runroot "$tmp/run" system reset -f >/dev/null 2>&1; rm -rf "$tmp"' EXIT

# the stand-in driver root, with real character devices (NVIDIA's majors)
root="$tmp/driver"
tests/fakes/make-driver-root.sh "$root" "$VER" 1 >/dev/null
for node in nvidia0:195:0 nvidiactl:195:255 nvidia-uvm:511:0 nvidia-uvm-tools:511:1 \
            nvidia-modeset:195:254; do
    IFS=: read -r name major minor <<<"$node"
    rm -f "$root/dev/$name" && mknod -m 666 "$root/dev/$name" c "$major" "$minor"
done

# an image from a tarball: no registry needed
mkdir -p "$tmp/rootfs/bin"
cp "$busybox" "$tmp/rootfs/bin/busybox"
for c in sh ls cat stat env grep touch; do ln -s busybox "$tmp/rootfs/bin/$c"; done
tar -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
pm=(podman --root "$tmp/store" --runroot "$tmp/run")
"${pm[@]}" import "$tmp/rootfs.tar" gv-cdi-test:latest >"$tmp/import.log" 2>&1 ||
    skip_all "podman import failed: $(tail -1 "$tmp/import.log")"

# podman run in a mount namespace whose /etc/cdi and /var/run/cdi hold only
# the files given: in_ns SPEC_FILES... -- RUN_ARGS...
in_ns() {
    local specs=()
    while [ "$1" != -- ]; do specs+=("$1"); shift; done
    shift
    # shellcheck disable=SC2016
    unshare -m bash -c '
        set -e
        for d in /etc/cdi /var/run/cdi; do mount -t tmpfs gv-cdi-test "$d"; done
        while [ "$1" != -- ]; do cp "$1" /var/run/cdi/; shift; done
        shift
        exec "$@"' in_ns "${specs[@]}" -- "${pm[@]}" run "${runtime[@]}" --rm --network none \
        --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@"
}
runtime=()
# /etc/cdi and /var/run/cdi must exist to be mounted over; made here when
# missing (empty, removed again at the end)
for d in /etc/cdi /var/run/cdi; do
    if [ ! -d "$d" ]; then mkdir -p "$d" && made+=("$d"); fi
done
unshare -m true 2>/dev/null || skip_all "no mount namespace (unshare -m fails)"

# runs the container without CDI devices with the runtime in ${runtime[@]}
control_runs() {
    in_ns -- gv-cdi-test:latest sh -c 'echo up' >"$tmp/control.log" 2>&1 &&
        grep -qx up "$tmp/control.log"
}
used="podman's default runtime"
if ! control_runs; then
    why=$(tail -1 "$tmp/control.log")
    runc=$(command -v runc || true)
    [ -n "$runc" ] || skip_all "podman cannot run a container here: $why (and no runc)"
    runtime=(--runtime "$runc")
    control_runs ||
        skip_all "podman cannot run a container here: $why; with runc: $(tail -1 "$tmp/control.log")"
    used="runc (the default failed: $why)"
fi
echo "# OCI runtime: $used"
ok 0 "container without CDI devices runs"

"$GEN" "$root" "$VER" gpuvisor.io/gpu "$tmp/spec" gpuvisor-gpuvisor.io_gpu.json 2>"$tmp/gen.log"
in_ns "$tmp/spec/gpuvisor-gpuvisor.io_gpu.json" -- --device "gpuvisor.io/gpu=$UUID" \
    gv-cdi-test:latest sh -c 'stat -c "%n %F %t:%T" /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm;
        env; cat /proc/mounts; touch /usr/local/nvidia/lib64/libcuda.so.'"$VER"' && echo WRITABLE;
        cat /usr/local/nvidia/lib64/libcuda.so.'"$VER" >"$tmp/run.log" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q "^/dev/nvidia0 character special file c3:0$" "$tmp/run.log" &&
    grep -q "^/dev/nvidiactl character special file c3:ff$" "$tmp/run.log" &&
    grep -q "^/dev/nvidia-uvm character special file 1ff:0$" "$tmp/run.log"
r=$?
ok $r "the spec resolves: device nodes"
[ $r = 0 ] || sed 's/^/# /' "$tmp/run.log" "$tmp/gen.log" | head -20
grep -qx "NVIDIA_VISIBLE_DEVICES=void" "$tmp/run.log"
ok $? "the spec resolves: env"
grep -q " /usr/local/nvidia/lib64/libcuda.so.$VER .*[ ,]ro[ ,]" "$tmp/run.log" &&
    grep -qx "libcuda $VER" "$tmp/run.log" && ! grep -q WRITABLE "$tmp/run.log"
ok $? "the spec resolves: read-only library mounts"

"$GEN" "$root" "$VER" nvidia.com/gpu "$tmp/spec2" dotted.json 2>>"$tmp/gen.log"
sed 's|"kind": *"nvidia.com/gpu"|"kind":"gpuvisor.io/gpu.shared"|' "$tmp/spec2/dotted.json" \
    >"$tmp/spec2/gpuvisor-dotted.json"
# podman 4.3 does not even take it for a CDI name ("stat <name>: no such
# file"); later versions parse the name and drop the spec ("unresolvable")
grep -q gpu.shared "$tmp/spec2/gpuvisor-dotted.json" &&
    ! in_ns "$tmp/spec2/gpuvisor-dotted.json" -- --device "gpuvisor.io/gpu.shared=$UUID" \
        gv-cdi-test:latest true >"$tmp/dot.log" 2>&1 &&
    grep -qiE "unresolvable CDI|stat gpuvisor.io/gpu.shared=.*no such file" "$tmp/dot.log"
r=$?
ok $r "a class with '.' is not resolved by the consumer (the agent refuses such a cdiKind)"
[ $r = 0 ] || sed 's/^/# /' "$tmp/dot.log" | head -5

# nvidia-ctk's spec (same kind, its own devices) beside ours
cat >"$tmp/spec2/nvidia.json" <<EOF
{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"$UUID",
 "containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","hostPath":"$root/dev/nvidia0"}]}}]}
EOF
! in_ns "$tmp/spec2/dotted.json" "$tmp/spec2/nvidia.json" -- --device "nvidia.com/gpu=$UUID" \
    gv-cdi-test:latest true >"$tmp/dup.log" 2>&1 && grep -qi "unresolvable CDI" "$tmp/dup.log"
r=$?
ok $r "two specs of one kind: neither resolves (why the default kind is gpuvisor.io/gpu)"
[ $r = 0 ] || sed 's/^/# /' "$tmp/dup.log" | head -5
echo "1..$n"
