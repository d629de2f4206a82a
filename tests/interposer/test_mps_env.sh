#!/usr/bin/env bash
# MPS client limits: the interposer puts CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and CUDA_MPS_PIPE_DIRECTORY from the limits
# file back into the environment before main() (src/interposer/mps_env.c), so
# a tenant's own env (which the container runtime lets win over the device
# plugin's) cannot raise its MPS limits.  TAP on stdout.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
LIB=$PWD/$BUILD/lib/libgpuvisor.so
TMP=$(mktemp -d "${GV_TEST_TMP:-/tmp}/mpsenv.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
PRELOAD=$LIB
asan=$(ldd "$LIB" 2>/dev/null | awk '/libasan/ {print $3}')
[ -n "$asan" ] && PRELOAD="$asan $LIB"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
n=0
check() { n=$((n + 1)); if eval "$1"; then echo "ok $n - $2"; else echo "not ok $n - $2"; echo "# got: $out"; fi; }

if [ -e /etc/gpuvisor/limits.env ]; then
    echo "ok 1 - MPS env from the limits file # SKIP /etc/gpuvisor/limits.env exists on this machine"
    echo "1..1"; exit 0
fi
printf 'CUDA_DEVICE_MEMORY_LIMIT_0=2000m\nCUDA_MPS_LINE_WITHOUT_A_VALUE\nCUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30\nexport CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2000M"\nCUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps\n' >"$TMP/limits.env"
out=$(env -i PATH=/usr/bin:/bin LD_PRELOAD="$PRELOAD" ASAN_OPTIONS="$ASAN_OPTIONS" \
    GPUVISOR_LIMITS_FILE="$TMP/limits.env" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 \
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G CUDA_MPS_PIPE_DIRECTORY=/tenant/own /usr/bin/env 2>&1)
check 'grep -qx "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" <<<"$out"' \
    "the tenant's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 is replaced by the limits file's 30 (a line without '=' before it skipped)"
check 'grep -qx "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2000M" <<<"$out"' \
    "the tenant's pinned memory limit 0=80G is replaced by 0=2000M (quotes and export stripped)"
check 'grep -qx "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" <<<"$out"' \
    "the tenant cannot point CUDA at a daemon of its own"
check '! grep -q "^CUDA_DEVICE_MEMORY_LIMIT_0=" <<<"$out"' \
    "other limits-file keys are not exported (the interposer reads them itself)"
printf 'CUDA_DEVICE_MEMORY_LIMIT_0=2000m\n' >"$TMP/plain.env"
out=$(env -i PATH=/usr/bin:/bin LD_PRELOAD="$PRELOAD" ASAN_OPTIONS="$ASAN_OPTIONS" \
    GPUVISOR_LIMITS_FILE="$TMP/plain.env" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 /usr/bin/env 2>&1)
check 'grep -qx "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" <<<"$out"' \
    "no MPS keys in the limits file (not an MPS GPU): the environment is left alone"
# The node agent's way: the limits file at its default path (here in a
# private mount namespace, a tmpfs over /etc).  It is the file, whatever the
# tenant names in GPUVISOR_LIMITS_FILE; and lines indented, or with a value in
# single quotes, are read as the agent's other lines.
if unshare -m true 2>/dev/null; then
    printf 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100\nCUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G\n' >"$TMP/tenant.env"
    printf '  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30\n\texport CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='"'"'0=2000M'"'"'\n' \
        >"$TMP/etc.env"
    cp /etc/ld.so.cache "$TMP/ld.so.cache" 2>/dev/null || true
    out=$(unshare -m sh -c '
        mount -t tmpfs gpuvisor-test /etc || exit 2
        cp "$1/ld.so.cache" /etc/ 2>/dev/null
        mkdir /etc/gpuvisor && cp "$1/etc.env" /etc/gpuvisor/limits.env
        exec env -i PATH=/usr/bin:/bin LD_PRELOAD="$2" ASAN_OPTIONS="$3" GPUVISOR_LIMITS_FILE="$1/tenant.env" \
            CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G /usr/bin/env' \
        sh "$TMP" "$PRELOAD" "$ASAN_OPTIONS" 2>&1)
    check 'grep -qx "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" <<<"$out"' \
        "with /etc/gpuvisor/limits.env present, the tenant's GPUVISOR_LIMITS_FILE is not read (30, not its 100)"
    check 'grep -qx "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2000M" <<<"$out"' \
        "an indented line and a value in single quotes are read (0=2000M)"
else
    for _ in 1 2; do n=$((n + 1)); echo "ok $n # SKIP cannot create a mount namespace here (unshare -m)"; done
fi
echo "1..$n"
