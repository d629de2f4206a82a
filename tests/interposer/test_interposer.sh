#!/usr/bin/env bash
# libgpuvisor.so against the fake driver (tests/fakes), the way applications
# reach a real one: gv_probe links libcuda.so.1, dlopens it, or fetches entry
# points through cuGetProcAddress.  TAP on stdout.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
LIB=$PWD/$BUILD/lib/libgpuvisor.so
PROBE=$PWD/$BUILD/tests/gv_probe
TMP=$(mktemp -d "${GV_TEST_TMP:-/tmp}/interposer.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export LD_LIBRARY_PATH=$PWD/$BUILD/tests/fakes
export GV_FAKE_GPU_STATE=$TMP/fake.state
unset CUDA_VISIBLE_DEVICES GPUVISOR_LIMITS_FILE CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT \
    CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_OVERSUBSCRIBE GPUVISOR_LOG_LEVEL LIBCUDA_LOG_LEVEL

# A sanitizer-built library needs its runtime loaded before it.
PRELOAD=$LIB
asan=$(ldd "$LIB" 2>/dev/null | awk '/libasan/ {print $3}')
[ -n "$asan" ] && PRELOAD="$asan $LIB"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}

n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); echo "not ok $n - $*"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else nok "$name"; fi; }
fresh() { rm -f "$TMP"/*.cache "$GV_FAKE_GPU_STATE"; }
# probe [env...] -- ops : runs the probe under the interposer, TAP passes through.
# A probe killed by a signal (a crash in the interposer) is a failure of its
# own: its later checks never print, and a missing "ok" is not a "not ok".
exec 3>&1
probe() {
    env LD_PRELOAD="$PRELOAD" "$@"
    local st=$?
    [ $st -ge 128 ] && nok "a probe died of signal $((st - 128)); its later checks never ran: ${*: -2}" >&3
    return $st
}
# probe_bg: the same for `probe_bg ... &`, so $! is the probe itself (kill -9 reaches it).
probe_bg() { exec env LD_PRELOAD="$PRELOAD" "$@"; }
# fill_together OUT "OPS" ENV...: eight probes with ENV run OPS at once on
# the region; sets total (the chunks they filled) and bad (their "not ok"s).
fill_together() {
    local out=$1 ops=$2 i pids=()
    shift 2
    for i in 1 2 3 4 5 6 7 8; do
        # shellcheck disable=SC2086 # OPS are separate words
        probe_bg "$@" CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" $ops \
            >"$TMP/$out.$i" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    total=$(cat "$TMP/$out".* | awk '/^# filled/ {s += $3} END {print s + 0}')
    bad=$(cat "$TMP/$out".* | grep -c '^not ok')
}
# passed FILE: a probe's TAP output has at least one ok and no "not ok".
passed() { grep -q '^ok' "$1" && ! grep -q '^not ok' "$1"; }
# sync NAME: a fresh barrier directory for probes that wait on each other.
syncdir() { rm -rf "$TMP/sync.$1"; mkdir -p "$TMP/sync.$1"; echo "$TMP/sync.$1"; }
# wait_for FILE-GLOB: waits until a file matching it exists (a condition, not
# a time; bounded at 120 s so a broken run cannot hang the suite).
wait_for() { local i; for i in $(seq 12000); do compgen -G "$1" >/dev/null && return 0; sleep 0.01; done; return 1; }

if [ -e /etc/gpuvisor/limits.env ]; then
    has_etc_limits=1
else
    has_etc_limits=0
fi

# --- exports ---------------------------------------------------------------
want=$(grep -o '[A-Za-z_0-9]\+;' "$BUILD/interposer/libgpuvisor.map" | tr -d ';' | sort)
got=$(nm -D --defined-only "$LIB" | awk '$2 ~ /^[TtWwDdBbVviu]$/ {print $3}' | sed 's/@.*//' | sort)
check "nm -D exports exactly the hook list ($(echo "$want" | wc -l) symbols)" [ "$want" = "$got" ]
check "the hook list covers every allocation path" \
    bash -c "for s in cuMemAlloc_v2 cuMemAllocPitch_v2 cuMemAllocManaged cuMemFree_v2 cuMemCreate cuMemRelease \
        cuMemAllocAsync cuMemAllocFromPoolAsync cuMemFreeAsync cuArrayCreate_v2 cuArray3DCreate_v2 cuArrayDestroy \
        cuMipmappedArrayCreate cuMipmappedArrayDestroy cuImportExternalMemory cuDestroyExternalMemory \
        cuGetProcAddress_v2 dlsym dlvsym; do echo '$got' | grep -qx \$s || exit 1; done"

# --- the three ways in, every allocation path -------------------------------
for via in link dlopen procaddr:12000 procaddr:12080:pt procaddr:13000; do
    fresh
    case $via in
        procaddr*) hooked="pa:cuMemAlloc:${via#procaddr:}:0:cuMemAlloc_v2"; hooked=${hooked/:pt:0:/:0:} ;;
        *) hooked="hooked:cuMemAlloc_v2:yes" ;;
    esac
    probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
        "$PROBE" --via "$via" init "$hooked" \
        alloc:512m:OK alloc:512m:OK alloc:1:OOM info:0:1g free-last:OK info:512m:1g \
        total:0:1g nvml-mem:0:512m:1g free-last:OK \
        pitch:1000:1024:OK info:1023m:1g freeall \
        array:256:1024:OK info:1023m:1g array3d:128:4:512:OK info:1022m:1g freeall \
        mipmap:256:256:2:OK info:1048256k:1g freeall \
        vmm:2m:OK info:1022m:1g vmm:1g:OOM vmm-noprop:2m:INVAL info:1022m:1g freeall \
        async:1m:OK async-pt:1m:OK pool:1m:OK info:1021m:1g managed:1m:OK info:1020m:1g \
        alloc:1021m:OOM freeall info:1g:1g nvml-mem:0:0:1g free-bogus:INVAL
done

# --- thousands of live allocations: the tracking table grows (1024 slots at
# first, doubled at three quarters) and loses none; every free is credited ----
fresh
probe CUDA_DEVICE_MEMORY_LIMIT=8m CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init fill:4k info:0:8m free-last:OK free-last:OK info:8k:8m alloc:8k:OK \
    info:0:8m freeall info:8m:8m alloc:8m:OK info:0:8m freeall info:8m:8m

# --- memory cached by stream-ordered pools is charged until trimmed ---------
fresh
probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init pool:256m:OK pool-keep:1g pool:256m:OK info:512m:1g free-last:OK info:512m:1g \
    nvml-mem:0:512m:1g pool:512m:OK info:256m:1g freeall info:256m:1g pool-trim:0 info:1g:1g \
    pool:600m:OK pool-keep:1g free-last:OK info:424m:1g alloc:500m:OK info:524m:1g \
    pool-destroy:OK info:524m:1g pool-keep:1g:default async:300m:OK free-last:OK info:224m:1g \
    async:300m:OK info:224m:1g freeall info:724m:1g pool-trim:0:default info:1g:1g
# A pool whose cache stands in the way of an allocation is trimmed back to the driver.
fresh
probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init pool-keep:1g:default async:600m:OK free-last:OK info:424m:1g alloc:600m:OK \
    info:424m:1g

# --- context creation overhead is charged -----------------------------------
# The fake driver takes 64 MiB per context; measured through NVML, or fixed.
fresh
probe GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init info:960m:1g nvml-mem:0:64m:1g ctx-create:0:OK info:896m:1g ctx-destroy:OK \
    info:960m:1g alloc:960m:OK ctx-create:0:OOM info:0:1g
fresh
probe GV_FAKE_CTX_MEMORY=64m GPUVISOR_CONTEXT_RESERVE=100m CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:924m:1g ctx-create:0:OK \
    info:824m:1g ctx-destroy:OK info:924m:1g

# A context is billed to its own process: another tenant (outside the
# container) allocates 25 MiB inside the window in which the interposer
# measures the context (the fake driver holds the creation at a gate), and
# the context is still charged exactly its 64 MiB.  First the primary
# context (host pid not known yet), then a created one (host pid known).
# ctx_neighbour GATE N [MIB [PROBES]]: open gate N while a neighbour holds MIB
# (25) MiB more; it then waits at $done_ with PROBES (2) probes in all.
ctx_neighbour() {
    local nb; nb=$(syncdir "nb$2")
    wait_for "$1/ctx.*.$2" || return 1
    "$PROBE" init alloc:"${3:-25}"m:OK barrier:"$nb":1 barrier:"$done_":"${4:-2}" >"$TMP/neighbour.$2" 2>&1 &
    wait_for "$nb/*" && touch "$1/go.$2"
}
fresh
gate=$(syncdir gate); done_=$(syncdir done)
probe_bg GV_FAKE_CTX_MEMORY=64m GV_FAKE_CTX_GATE="$gate" CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:960m:1g barrier:"$done_":2 \
    >"$TMP/billed" 2>&1 &
tenant=$!
ctx_neighbour "$gate" 1
wait $tenant
wait
cat "$TMP/billed"
check "a neighbour's allocation during our first context is not billed to us (fake driver)" \
    passed "$TMP/billed"
check "the neighbour passed" passed "$TMP/neighbour.1"
fresh
gate=$(syncdir gate); done_=$(syncdir done)
probe_bg GV_FAKE_CTX_MEMORY=64m GV_FAKE_CTX_GATE="$gate" CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:960m:1g ctx-create:0:OK \
    info:896m:1g barrier:"$done_":2 >"$TMP/billed" 2>&1 &
tenant=$!
wait_for "$gate/ctx.*.1" && touch "$gate/go.1"
ctx_neighbour "$gate" 2
wait $tenant
wait
cat "$TMP/billed"
check "a neighbour's allocation during a later context is not billed to us (fake driver)" \
    passed "$TMP/billed"

# Eight processes of one container starting together (torchrun), each with a
# 64 MiB context, fill a 1 GiB limit once all have their context: 8 contexts
# + exactly 16 x 32 MiB.
fresh
filled=$(syncdir filled); started=$(syncdir started)
fill_together cfill "init barrier:$started:8 fill:32m barrier:$filled:8" \
    GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=1g
check "8 processes with 64 MiB contexts filling 1 GiB together get exactly 16 x 32 MiB (got $total)" \
    [ "$total" -eq 16 -a "$bad" -eq 0 ]

# The CUDA runtime releases and resets primary contexts through the v1 entry
# points: their charge is credited too (the context is measured at 64 MiB).
for v in 1 2; do
    fresh
    probe GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
        "$PROBE" init nvml-mem:0:64m:1g init nvml-mem:0:64m:1g release:0:$v:OK nvml-mem:0:64m:1g \
        release:0:$v:OK nvml-mem:0:0:1g init nvml-mem:0:64m:1g reset:0:$v:OK nvml-mem:0:0:1g
done
fresh
probe GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" --via procaddr:10000 init nvml-mem:0:64m:1g release:0:1:OK nvml-mem:0:0:1g \
    pa:cuDevicePrimaryCtxRelease:10000:0:cuDevicePrimaryCtxRelease \
    pa:cuDevicePrimaryCtxRelease:12000:0:cuDevicePrimaryCtxRelease_v2 \
    pa:cuDevicePrimaryCtxReset:10000:0:cuDevicePrimaryCtxReset

# --- cuGetProcAddress honours cudaVersion and flags ------------------------
# A driver whose table hands out internal entry points for the allocation
# functions, not its exported symbols (the fake's GV_FAKE_PROC_INTERNAL): the
# interposer knows them by the name asked for, so the limit and the slice's
# view hold on that path too, for either stream flavour.
fresh
probe GV_FAKE_PROC_INTERNAL=1 CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" --via procaddr:12000 init info:1g:1g alloc:768m:OK info:256m:1g alloc:512m:OOM \
    async:512m:OOM async-pt:512m:OOM async:200m:OK info:56m:1g
fresh
probe "$PROBE" --via dlopen init \
    pa:cuMemAlloc:12000:0:cuMemAlloc_v2 pa:cuMemGetInfo:13000:0:cuMemGetInfo_v2 \
    pa:cuMemAllocAsync:12000:0:cuMemAllocAsync pa:cuMemAllocAsync:12000:2:cuMemAllocAsync_ptsz \
    pa:cuMemFreeAsync:13000:2:cuMemFreeAsync_ptsz pa:cuMemAllocAsync:11000:0:-:2 \
    pa:cuNoSuchFunction:12000:0:-:1 pa:cuMemAlloc:12000:0:cuMemAlloc_v2:0 \
    pa:cuGetProcAddress:11030:0:cuGetProcAddress pa:cuGetProcAddress:12000:0:cuGetProcAddress_v2 \
    pa:cuCtxCreate:12000:0:cuCtxCreate_v3 pa:cuCtxCreate:13000:0:cuCtxCreate_v4 \
    pa:cuCtxCreate:3020:0:cuCtxCreate_v2 pa:cuMemAlloc:13000:2:cuMemAlloc_v2 \
    pa:cuImportExternalMemory:13000:0:cuImportExternalMemory pa:cuDestroyExternalMemory:10000:0:cuDestroyExternalMemory \
    pa:cuDevicePrimaryCtxReset:13000:0:cuDevicePrimaryCtxReset_v2 pa:cuDevicePrimaryCtxRelease:7000:0:cuDevicePrimaryCtxRelease \
    hooked:cuCtxCreate_v4:yes hooked:cuCtxGetCurrent:no hooked:nvmlDeviceGetMemoryInfo_v2:yes hooked:nvmlDeviceGetCount_v2:no \
    hooked:nvmlDeviceGetGraphicsRunningProcesses:yes hooked:nvmlDeviceGetMPSComputeRunningProcesses_v3:yes
# The request pattern of the CUDA 13 runtime (libcudart.so.13, traced against the fake):
# each entry point is asked for with the ABI version the runtime was built for.
fresh
probe "$PROBE" --via dlopen init \
    pa:cuMemAlloc:3020:0:cuMemAlloc_v2 pa:cuMemGetInfo:3020:0:cuMemGetInfo_v2 \
    pa:cuDeviceTotalMem:3020:0:cuDeviceTotalMem_v2 pa:cuMemAllocManaged:6000:0:cuMemAllocManaged \
    pa:cuMemAllocAsync:11020:2:cuMemAllocAsync_ptsz pa:cuMemFreeAsync:11020:0:cuMemFreeAsync \
    pa:cuArray3DCreate:3020:0:cuArray3DCreate_v2 pa:cuMipmappedArrayCreate:5000:0:cuMipmappedArrayCreate \
    pa:cuLaunchKernel:7000:2:cuLaunchKernel_ptsz pa:cuLaunchKernelEx:11060:0:cuLaunchKernelEx \
    pa:cuGraphLaunch:10000:2:cuGraphLaunch_ptsz pa:cuIpcOpenMemHandle:11000:0:cuIpcOpenMemHandle_v2 \
    pa:cuGetProcAddress:12000:0:cuGetProcAddress_v2

# --- without limits the interposer is transparent ---------------------------
fresh
probe "$PROBE" init info:16g:16g total:0:16g alloc:1g:OK info:15g:16g nvml-mem:0:1g:16g freeall

# --- limit across many concurrent processes --------------------------------
# Each holds what it got until all eight are done (a process that exited
# early would free room for the others).
fresh
filled=$(syncdir filled)
fill_together fill "init fill:32m barrier:$filled:8" CUDA_DEVICE_MEMORY_LIMIT=1g
check "8 processes filling a 1 GiB limit together get exactly 32 x 32 MiB (got $total)" \
    [ "$total" -eq 32 -a "$bad" -eq 0 ]

# torchrun-style first starts, repeated: eight processes start at once on a
# fresh region (and a fresh fake card) and fill it; every trial must give
# exactly 32 x 32 MiB with no failed cuInit.  GV_FIRST_START_TRIALS sets the
# count (20 here; 1,000 reported in docs/shared-region.md).
first_starts() {
    local t failed=0
    for t in $(seq "${GV_FIRST_START_TRIALS:-20}"); do
        fresh
        filled=$(syncdir filled)
        fill_together start "init fill:32m barrier:$filled:8" CUDA_DEVICE_MEMORY_LIMIT=1g
        if [ "$total" -ne 32 ] || [ "$bad" -ne 0 ]; then
            failed=$((failed + 1))
            echo "# trial $t: $total x 32 MiB, $bad failed steps" >&2
        fi
    done
    [ "$failed" -eq 0 ]
}
check "concurrent first starts on a fresh region: every trial exact, no cuInit failure" first_starts

# --- views: NVML process list shows the container's processes ---------------
# The holder and the other tenant allocate, then wait (barrier "up") until
# both have; the views are read; then everyone is let go (barrier "done").
fresh
up=$(syncdir up); done_=$(syncdir done)
probe_bg CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init alloc:100m:OK barrier:"$up":3 barrier:"$done_":3 >"$TMP/holder" 2>&1 &
holder=$!
"$PROBE" init alloc:50m:OK barrier:"$up":3 barrier:"$done_":3 >"$TMP/other" 2>&1 & # another tenant, outside the container
other=$!
"$PROBE" barrier:"$up":3 >/dev/null
probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" nvml-procs:0:1 nvml-util:0:1 nvml-mem:0:100m:1g
"$PROBE" nvml-procs:0:2 nvml-util:0:2 barrier:"$done_":3 # without the interposer NVML shows both tenants
wait $holder $other
check "holder process passed" passed "$TMP/holder"
check "other tenant passed" passed "$TMP/other"
# The other tenant first in NVML's list, and the holder knowing its host pid
# (its context takes memory, so it learns it): the container's view keeps the
# holder alone, moved to the front with its charged bytes (64 MiB context +
# 100 MiB), and no slot of ours stands for another pid.  A process without a
# shared region configured sees the driver's list as it is.
fresh
up=$(syncdir up); done_=$(syncdir done); first=$(syncdir first)
"$PROBE" init alloc:50m:OK barrier:"$first":1 barrier:"$up":3 barrier:"$done_":3 >"$TMP/other" 2>&1 &
other=$!
wait_for "$first/*"
probe_bg GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init alloc:100m:OK barrier:"$up":3 barrier:"$done_":3 >"$TMP/holder" 2>&1 &
holder=$!
"$PROBE" barrier:"$up":3 >/dev/null
probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" nvml-procs:0:1 >"$TMP/view" 2>&1
probe CUDA_DEVICE_MEMORY_LIMIT=1g "$PROBE" nvml-procs:0:2 >"$TMP/view.plain" 2>&1
"$PROBE" barrier:"$done_":3 >/dev/null
wait $holder $other
cat "$TMP/view" "$TMP/view.plain"
check "the view lists the container's one process, not the tenant listed before it" passed "$TMP/view"
check "the listed process is the holder, with its charged 164 MiB" grep -qx "# pid $holder used 171966464" "$TMP/view"
check "without a shared region the driver's list is left as it is (both tenants)" passed "$TMP/view.plain"
check "the holder passed" passed "$TMP/holder"
check "the other tenant passed" passed "$TMP/other"

# In a pid namespace (a container) NVML's pids are host pids: the interposer
# learns its own while creating its first context.
if unshare -p -f true 2>/dev/null; then
    fresh
    unshare -p -f env LD_PRELOAD="$PRELOAD" GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=1g \
        CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init alloc:100m:OK nvml-procs:0:1 \
        >"$TMP/ns.out" 2>&1
    cat "$TMP/ns.out"
    check "NVML lists the namespaced process with its charged bytes (context + 100 MiB)" \
        grep -q '^# pid [0-9]* used 171966464$' "$TMP/ns.out"
    # Two processes of one container (one pid namespace, one region): A
    # measures the card's context (64 MiB) at its first context. B's first
    # context is created while a process of another container appears on the
    # card with 32 MiB, so two entries are new and neither carries B's pid:
    # B cannot tell which is its own and charges the size A measured (not
    # the smaller new entry, which it charges only when nothing was measured).
    fresh
    gate=$(syncdir gate); up=$(syncdir up); done_=$(syncdir done)
    export PRELOAD PROBE TMP gate up done_
    unshare -p -f bash -c '
        env LD_PRELOAD="$PRELOAD" GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=1g \
            CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:960m:1g \
            barrier:"$up":2 barrier:"$done_":3 >"$TMP/ns.a" 2>&1 &
        "$PROBE" barrier:"$up":2 >/dev/null
        env LD_PRELOAD="$PRELOAD" GV_FAKE_CTX_MEMORY=64m GV_FAKE_CTX_GATE="$gate" \
            CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" \
            init info:896m:1g barrier:"$done_":3 >"$TMP/ns.b" 2>&1 &
        wait' &
    inner=$!
    ctx_neighbour "$gate" 1 32 3
    wait $inner
    wait
    cat "$TMP/ns.a" "$TMP/ns.b"
    check "a process that cannot tell its NVML entry charges the context size its container measured (fake driver)" \
        passed "$TMP/ns.b"
    check "the measuring process passed" passed "$TMP/ns.a"
    check "the other container's process passed" passed "$TMP/neighbour.1"

    # A process of the container that never learned its host pid (its
    # context takes no memory here) allocates 32 MiB while B creates its
    # first context: that new entry is the sibling's (its charges cover it,
    # exactly), so B's own is the other one and B learns its host pid; its
    # later context is then measured on its own entry.  Both are charged
    # 64 MiB.  (Were the sibling's charges above B's context, both entries
    # could be the sibling's and B would charge what its container measured
    # before: the first test above.)
    fresh
    gate=$(syncdir gate); up=$(syncdir up); s1=$(syncdir s1); s2=$(syncdir s2); done_=$(syncdir done)
    export gate up s1 s2 done_
    unshare -p -f bash -c '
        env LD_PRELOAD="$PRELOAD" CUDA_DEVICE_MEMORY_LIMIT=1g \
            CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init barrier:"$up":2 \
            barrier:"$s1":2 alloc:32m:OK barrier:"$s2":2 barrier:"$done_":2 >"$TMP/ns.s" 2>&1 &
        "$PROBE" barrier:"$up":2 >/dev/null
        env LD_PRELOAD="$PRELOAD" GV_FAKE_CTX_MEMORY=64m GV_FAKE_CTX_GATE="$gate" \
            CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" \
            init ctx-create:0:OK info:864m:1g barrier:"$done_":2 >"$TMP/ns.b" 2>&1 &
        wait' &
    inner=$!
    touch "$gate/go.2"
    if wait_for "$gate/ctx.*.1"; then
        "$PROBE" barrier:"$s1":2 >/dev/null
        "$PROBE" barrier:"$s2":2 >/dev/null
    fi
    touch "$gate/go.1"
    wait $inner
    cat "$TMP/ns.s" "$TMP/ns.b"
    check "a sibling's new entry during our first context is told apart from ours (fake driver)" \
        passed "$TMP/ns.b"
    check "the sibling passed" passed "$TMP/ns.s"

    # The first process of a container creates its first context while a
    # process of another container appears (100 MiB): it cannot tell its
    # entry and nobody measured a context here before.  It charges the
    # smallest new entry (its own 64 MiB), and so does every later context
    # of it (it never learns its host pid afterwards): charging nothing let
    # a tenant that staged one such start keep every context it then made
    # outside its slice.
    fresh
    gate=$(syncdir gate); done_=$(syncdir done)
    export gate done_
    unshare -p -f bash -c '
        exec env LD_PRELOAD="$PRELOAD" GV_FAKE_CTX_MEMORY=64m GV_FAKE_CTX_GATE="$gate" \
            CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" \
            init info:960m:1g ctx-create:0:OK info:896m:1g ctx-destroy:OK info:960m:1g \
            barrier:"$done_":2 >"$TMP/ns.b" 2>&1' &
    inner=$!
    touch "$gate/go.2"
    ctx_neighbour "$gate" 1 100
    wait $inner
    wait
    cat "$TMP/ns.b"
    check "a process unsure of its entry with no size measured charges its contexts, not nothing (fake driver)" \
        passed "$TMP/ns.b"
else
    for _ in 1 2 3 4 5 6 7; do echo "ok $((n += 1)) # SKIP cannot create a pid namespace here (unshare -p)"; done
fi

# A process that knows its host pid measures each later context on its own
# entry: a process of another container appearing on the card meanwhile is
# not taken for it (which would bill the neighbour's 100 MiB now and nothing
# for every context after).  Three contexts, 3 x 64 MiB.
fresh
gate=$(syncdir gate); done_=$(syncdir done)
touch "$gate/go.1" "$gate/go.3"
probe_bg GV_FAKE_CTX_MEMORY=64m GV_FAKE_CTX_GATE="$gate" CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init ctx-create:0:OK ctx-create:0:OK \
    info:832m:1g barrier:"$done_":2 >"$TMP/billed" 2>&1 &
tenant=$!
ctx_neighbour "$gate" 2 100
wait $tenant
wait
cat "$TMP/billed"
check "a neighbour appearing during a later context is not taken for us (fake driver)" \
    passed "$TMP/billed"

# A primary context that does not fit the slice is released again: the
# driver must not keep its memory for a process that was told OOM.
fresh
up=$(syncdir up); done_=$(syncdir done)
probe_bg GV_FAKE_CTX_MEMORY=64m CUDA_DEVICE_MEMORY_LIMIT=32m CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init:0:OOM barrier:"$up":2 barrier:"$done_":2 >"$TMP/refused" 2>&1 &
tenant=$!
"$PROBE" barrier:"$up":2 nvml-procs:0:0 barrier:"$done_":2 >"$TMP/seen" 2>&1
wait $tenant
cat "$TMP/refused" "$TMP/seen"
check "a primary context that does not fit is refused" passed "$TMP/refused"
check "a refused primary context is released (nothing of it left on the card)" passed "$TMP/seen"

# --- a forked child is a process of its own ---------------------------------
# A worker forked by a process that then exits (a fork server, Python's
# multiprocessing): the child takes a slot of its own, so its 50 MiB stay
# charged after the parent is gone and the parent's 100 MiB are released; the
# container's view lists the child.
fresh
reaped=$(syncdir reaped); done_=$(syncdir done)
probe_bg CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init alloc:100m:OK fork init alloc:50m:OK barrier:"$reaped":2 alloc:900m:OK \
    info:74m:1g alloc:100m:OOM nvml-procs:0:1 barrier:"$done_":2 >"$TMP/forked" 2>&1 &
parent=$!
wait $parent
"$PROBE" barrier:"$reaped":2 >/dev/null
"$PROBE" barrier:"$done_":2 >/dev/null
worker=$(sed -n 's/^# forked \([0-9]*\)$/\1/p' "$TMP/forked")
for _ in $(seq 12000); do [ -n "$worker" ] && kill -0 "$worker" 2>/dev/null || break; sleep 0.01; done
cat "$TMP/forked"
check "a forked worker keeps its own charges when its parent exits, the parent's are released" \
    passed "$TMP/forked"
check "the container's view lists the worker" grep -q "nvml-procs:0:1: rc 0 count 1" "$TMP/forked"

# --- imported IPC memory is charged once, to its owner ----------------------
fresh
up=$(syncdir up); done_=$(syncdir done)
probe_bg CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init alloc:256m:OK ipc-export:"$TMP/ipc" barrier:"$up":2 barrier:"$done_":2 \
    >"$TMP/owner" 2>&1 &
owner=$!
probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" barrier:"$up":2 init ipc-import:"$TMP/ipc":OK info:768m:1g freeall info:768m:1g \
    barrier:"$done_":2
wait $owner
check "IPC owner passed" passed "$TMP/owner"

# --- external memory (from a graphics API) is charged to the importer --------
fresh
probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init ext-import:256m:OK info:768m:1g ext-map:128m:OK info:768m:1g free-last:OK \
    ext-import:1g:OOM alloc:768m:OK alloc:1:OOM free-last:OK free-last:OK info:1g:1g

# --- device remapping with CUDA_VISIBLE_DEVICES ----------------------------
fresh
probe CUDA_VISIBLE_DEVICES=1 CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=2g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init info:1g:1g total:0:1g alloc:256m:OK nvml-mem:1:256m:1g nvml-mem:0:0:16g
fresh
probe CUDA_VISIBLE_DEVICES=GPU-fa4e0001,GPU-fa4e0000 CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    CUDA_DEVICE_MEMORY_LIMIT_1=2g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init info:1g:1g ctx:1 info:2g:2g alloc:1g:OK nvml-mem:0:1g:2g nvml-mem:1:0:1g

# NVML enumerates in PCI order; the driver's default order (FASTEST_FIRST) may
# differ: here CUDA ordinal 0 is NVML device 1 (GV_FAKE_CUDA_ORDER).  Handles
# are mapped by uuid, whatever the order and CUDA_VISIBLE_DEVICES.
fresh
probe GV_FAKE_CUDA_ORDER=1,0 CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=2g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init info:1g:1g alloc:256m:OK nvml-mem:1:256m:1g nvml-mem:0:0:2g
# An NVML-only process (nvidia-smi) registers the devices first: it must give
# them the CUDA ordinals' limits, or the CUDA process would be refused.
# (The fake's default GPUs have different names, i.e. models: only the driver
# knows its order, so the NVML-only process initialises it to ask.)
fresh
probe GV_FAKE_CUDA_ORDER=1,0 CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=2g \
    GPUVISOR_LOG_LEVEL=debug CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" nvml-mem:0:0:2g nvml-mem:1:0:1g 2>"$TMP/order.err"
check "an NVML-only process initialises the driver only to learn an order it cannot know" \
    grep -q 'initialising the driver to learn its device order' "$TMP/order.err"
probe GV_FAKE_CUDA_ORDER=1,0 CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=2g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:1g:1g ctx:1 info:2g:2g
# Indices in CUDA_VISIBLE_DEVICES are the driver's order: "0" is NVML device 1.
fresh
probe GV_FAKE_CUDA_ORDER=1,0 CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" nvml-mem:1:0:1g nvml-mem:0:0:16g \
    init info:1g:1g alloc:128m:OK nvml-mem:1:128m:1g
# CUDA_DEVICE_ORDER=PCI_BUS_ID puts the driver back in NVML's order.
fresh
probe GV_FAKE_CUDA_ORDER=1,0 CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    CUDA_DEVICE_MEMORY_LIMIT_1=2g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" nvml-mem:0:0:1g init info:1g:1g
# Full uuids in CUDA_VISIBLE_DEVICES, NVML-only process first: exact without the driver.
fresh
probe CUDA_VISIBLE_DEVICES=GPU-fa4e0001-0000-4000-8000-000000000001 CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    GPUVISOR_LOG_LEVEL=debug CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" nvml-mem:0:0:16g nvml-mem:1:0:1g 2>"$TMP/order.err"
check "uuids in CUDA_VISIBLE_DEVICES: an NVML-only process leaves the driver alone" \
    bash -c "! grep -q 'initialising the driver' '$TMP/order.err'"
probe CUDA_VISIBLE_DEVICES=GPU-fa4e0001-0000-4000-8000-000000000001 CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:1g:1g
# GPUs of one model keep PCI order: indices are exact without the driver too.
fresh
printf 'name=H100\nname=H100\n' >"$TMP/same.conf"
probe GV_FAKE_GPU_CONFIG="$TMP/same.conf" CUDA_VISIBLE_DEVICES=1 CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    GPUVISOR_LOG_LEVEL=debug CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" nvml-mem:1:0:1g nvml-mem:0:0:16g 2>"$TMP/order.err"
check "GPUs of one model: an NVML-only process leaves the driver alone" \
    bash -c "! grep -q 'initialising the driver' '$TMP/order.err'"
probe GV_FAKE_GPU_CONFIG="$TMP/same.conf" CUDA_VISIBLE_DEVICES=1 CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:1g:1g

# MIG: CUDA sees a compute instance (cuDeviceGetUuid_v2 names it "MIG-…"),
# NVML's GPU handle keeps the GPU's uuid.  The slice is the instance's, keyed
# by its MIG uuid in the region; the GPU handle is not the slice (untracked).
fresh
printf 'name=A\nname=B uuid=GPU-fa4e0001-0000-4000-8000-000000000001 mig=MIG-3c2d1e0f-0000-4000-8000-0000000000aa\n' \
    >"$TMP/mig.conf"
probe GV_FAKE_GPU_CONFIG="$TMP/mig.conf" CUDA_VISIBLE_DEVICES=MIG-3c2d1e0f CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" nvml-mem:1:0:16g init info:1g:1g \
    alloc:256m:OK info:768m:1g nvml-mem:1:256m:16g nvml-mem:0:0:16g
check "a MIG compute instance is keyed by its MIG uuid in the region" \
    grep -qa 'MIG-3c2d1e0f-0000-4000-8000-0000000000aa' "$TMP/r.cache"

# vGPU slices inside a MIG instance (docs/mig-cdi.md): the fake NVML has the
# MIG geometry (GV_FAKE_MIG_CONFIG: a 3g.40gb instance, 40704 MiB, then a
# 1g.10gb one, 9984 MiB) of an 80 GiB card, and the fake libcuda sees the
# first instance, as a container given NVIDIA_VISIBLE_DEVICES=<MIG uuid> does.
MIGU=MIG-3c2d1e0f-0000-4000-8000-0000000000bb
printf 'name=A100 uuid=GPU-fa4e0000-0000-4000-8000-000000000000 memory=80g mig=%s\nname=H100\n' "$MIGU" \
    >"$TMP/mig80.conf"
printf '0 3g.40gb,1g.10gb\n' >"$TMP/mig80.geom"
mig() { probe GV_FAKE_GPU_CONFIG="$TMP/mig80.conf" GV_FAKE_MIG_CONFIG="$TMP/mig80.geom" \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$@"; }
fresh
mig CUDA_VISIBLE_DEVICES=$MIGU CUDA_DEVICE_MEMORY_LIMIT_0=4g "$PROBE" \
    init total:0:4g info:4g:4g alloc:3g:OK alloc:2g:OOM info:1g:4g \
    nvml-mig-mem:0:0:3g:4g nvml-uuid-mem:$MIGU:3g:4g nvml-mig-mem:0:1:0:9984m nvml-mem:0:3g:80g \
    >"$TMP/mig.slice" 2>&1
check "fake MIG instance: a 4g slice holds inside the 3g.40gb instance (cuMemGetInfo, cuDeviceTotalMem)" \
    passed "$TMP/mig.slice"
grep -v '^ok' "$TMP/mig.slice" | sed 's/^/# /'
fresh
# a limit above the instance: bounded by the instance (40704 MiB), not by the 80 GiB card
mig CUDA_VISIBLE_DEVICES=$MIGU CUDA_DEVICE_MEMORY_LIMIT_0=60g "$PROBE" \
    init info:40704m:40704m alloc:40000m:OK alloc:1g:OOM nvml-mig-mem:0:0:40000m:40704m \
    >"$TMP/mig.big" 2>&1
check "fake MIG instance: a limit above the instance is bounded by the instance's memory, not the card's" \
    passed "$TMP/mig.big"
grep -v '^ok' "$TMP/mig.big" | sed 's/^/# /'
fresh
# NVML-only (nvidia-smi before any CUDA process): the MIG handle is found by its
# uuid in CUDA_VISIBLE_DEVICES, so the second ordinal's limit applies
mig CUDA_VISIBLE_DEVICES=GPU-fa4e0001-0000-4000-8000-000000000001,$MIGU CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    CUDA_DEVICE_MEMORY_LIMIT_1=2g "$PROBE" nvml-mig-mem:0:0:0:2g nvml-uuid-mem:$MIGU:0:2g \
    nvml-mig-mem:0:1:0:9984m >"$TMP/mig.nvml" 2>&1
check "fake MIG instance, NVML only: the MIG device named by uuid in CUDA_VISIBLE_DEVICES shows its slice" \
    passed "$TMP/mig.nvml"
grep -v '^ok' "$TMP/mig.nvml" | sed 's/^/# /'
fresh
# and with the driver's word: CUDA ordinal 1 is the instance, its limit and its view
mig CUDA_VISIBLE_DEVICES=GPU-fa4e0001-0000-4000-8000-000000000001,$MIGU CUDA_DEVICE_MEMORY_LIMIT_0=1g \
    CUDA_DEVICE_MEMORY_LIMIT_1=2g "$PROBE" init total:1:2g ctx:1 alloc:1536m:OK alloc:1g:OOM info:512m:2g \
    nvml-mig-mem:0:0:1536m:2g ctx:0 info:1g:1g >"$TMP/mig.order" 2>&1
check "fake MIG instance by uuid in CUDA_VISIBLE_DEVICES: ordinal 1's limit applies to the instance" \
    passed "$TMP/mig.order"
grep -v '^ok' "$TMP/mig.order" | sed 's/^/# /'

# --- a pitched allocation is charged the pitch the driver chose ---------------
# The interposer charges its guess (rows of 512 bytes) before the call and
# settles to pitch x height after: a driver choosing wider rows is charged
# the difference (or refused when it does not fit), narrower rows give it back.
fresh
probe GV_FAKE_PITCH_ALIGN=2048 CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init \
    pitch:1000:262144:OK:2048 info:512m:1g alloc:513m:OOM pitch:1000:131072:OK:2048 info:256m:1g \
    pitch:1000:262144:OOM info:256m:1g freeall info:1g:1g
fresh
probe GV_FAKE_PITCH_ALIGN=256 CUDA_DEVICE_MEMORY_LIMIT=1g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init \
    pitch:200:1048576:OK:256 info:768m:1g alloc:768m:OK alloc:1:OOM freeall info:1g:1g

# --- oversubscription: beyond the share, managed memory capped by the card ---
fresh
probe CUDA_OVERSUBSCRIBE=true CUDA_DEVICE_MEMORY_LIMIT=8g GPUVISOR_DEVICE_MEMORY_SHARE=4g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init total:0:8g alloc:3g:OK alloc:2g:OK info:3g:8g nvml-mem:0:5g:8g \
    pitch:1000:1048576:OK:1024 pitch:1000:1024:OK:1024 pitch:1000:1:INVAL:0:3 array:256:1024:OOM \
    vmm:2m:OOM pool:1m:OOM async:1m:OK info:2046m:8g alloc:2g:OOM alloc:1g:OK info:1022m:8g \
    free-last:OK free-last:OK info:2047m:8g freeall info:8g:8g
# (pitch:…:INVAL: an element size of 3 is refused as the driver would.)
fresh
probe CUDA_OVERSUBSCRIBE=true CUDA_DEVICE_MEMORY_LIMIT=32g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init info:32g:32g alloc:15g:OK alloc:2g:OOM \
    alloc:512m:OK info:16896m:32g pitch:1024:1048576:OOM pitch:1024:262144:OK:1024 async:1g:OOM \
    info:16640m:32g freeall info:32g:32g
fresh
up=$(syncdir up); done_=$(syncdir done)
"$PROBE" init alloc:14g:OK barrier:"$up":2 barrier:"$done_":2 >"$TMP/hog" 2>&1 & # another tenant fills the card
hog=$!
probe CUDA_OVERSUBSCRIBE=true CUDA_DEVICE_MEMORY_LIMIT=8g GPUVISOR_DEVICE_MEMORY_SHARE=4g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" barrier:"$up":2 init alloc:3g:OOM alloc:1g:OK alloc:1536m:OOM alloc:512m:OK \
    barrier:"$done_":2
wait $hog
check "the tenant filling the card passed" passed "$TMP/hog"

# The slice's free memory is capped by what the card really has free: another
# tenant (outside the container) holds 14 GiB of the 16 GiB card, so a 4 GiB
# slice shows 2 GiB free through cuMemGetInfo and NVML, and gets no more.
fresh
up=$(syncdir up); done_=$(syncdir done)
"$PROBE" init alloc:14g:OK barrier:"$up":2 barrier:"$done_":2 >"$TMP/hog" 2>&1 &
hog=$!
probe CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" barrier:"$up":2 init info:2g:4g nvml-free:0:2g nvml-mem:0:0:4g alloc:1g:OK \
    info:1g:4g nvml-free:0:1g alloc:1g:OK info:0:4g alloc:1:OOM barrier:"$done_":2
wait $hog
check "the tenant filling the card passed (real free below the slice's free)" passed "$TMP/hog"

# Many processes oversubscribing together: the virtual limit holds exactly, and
# exactly the share is device memory.
# NVML is read once all four are done filling (and before any frees):
# earlier, another tenant's allocation may still be between its charge and
# the driver's answer.
fresh
pids=()
mkdir -p "$TMP/ofilled" "$TMP/ochecked"
for i in 1 2 3 4; do
    probe_bg CUDA_OVERSUBSCRIBE=true CUDA_DEVICE_MEMORY_LIMIT=8g GPUVISOR_DEVICE_MEMORY_SHARE=2g \
        CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
        "$PROBE" init fill:256m barrier:"$TMP/ofilled":4 nvml-mem:0:8g:8g \
        barrier:"$TMP/ochecked":4 >"$TMP/ofill.$i" 2>&1 &
    pids+=($!)
done
wait "${pids[@]}"
total=$(cat "$TMP"/ofill.* | awk '/^# filled/ {s += $3} END {print s + 0}')
bad=$(cat "$TMP"/ofill.* | grep -c '^not ok')
check "4 processes oversubscribing an 8 GiB slice (2 GiB share) together get exactly 32 x 256 MiB (got $total)" \
    [ "$total" -eq 32 -a "$bad" -eq 0 ]

# --- limits fixed by the first process --------------------------------------
fresh
up=$(syncdir up); done_=$(syncdir done)
probe_bg CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init alloc:1m:OK barrier:"$up":2 barrier:"$done_":2 >"$TMP/first" 2>&1 &
first=$!
probe CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" barrier:"$up":2 init info:1023m:1g alloc:1g:OOM barrier:"$done_":2 2>"$TMP/second.err"
wait $first
check "the first process passed" passed "$TMP/first"
check "a later process with other limits is refused with a log line" \
    grep -q 'refused: device GPU-fa4e0000.*limits already fixed' "$TMP/second.err"

# --- a hostile container editing or deleting its region ---------------------
# A process holds 600 MiB of a 1 GiB slice; then the container (root in it)
# raises mem_limit and zeroes every usage field in the region, or deletes the
# region file.  The holder may still not allocate past its limit, and its
# views keep showing the configured 1 GiB; after a delete it allocates
# nothing more (its accounting is no longer the container's).
hostile_edit() { # the region's device 0: mem_limit = 16 GiB, mem_used = 0, every slot's usage = 0
    python3 - "$1" <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b")
dev = 2048
f.seek(dev + 64); f.write(struct.pack("<Q", 16 << 30))        # mem_limit
f.seek(dev + 80); f.write(struct.pack("<Q", 0))               # mem_used
for i in range(1024):                                          # slots' mem_used[]
    f.seek(4096 + i * 704 + 32); f.write(b"\0" * 128)
PY
}
for attack in edit delete; do
    fresh
    up=$(syncdir up); done_=$(syncdir done)
    probe_bg CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
        "$PROBE" init alloc:600m:OK barrier:"$up":2 barrier:"$done_":2 alloc:500m:OOM \
        total:0:1g nvml-mem:0:*:1g $([ $attack = delete ] && echo alloc:100m:OOM) \
        >"$TMP/victim" 2>&1 &
    victim=$!
    "$PROBE" barrier:"$up":2 >/dev/null
    case $attack in
        edit) hostile_edit "$TMP/r.cache" ;;
        delete) rm -f "$TMP/r.cache" ;;
    esac
    "$PROBE" barrier:"$done_":2 >/dev/null
    wait $victim
    cat "$TMP/victim"
    check "a region $attack never raises what a process may allocate" passed "$TMP/victim"
done

# --- a corrupt or foreign region is reported and not trusted ---------------
fresh
head -c 8192 /dev/urandom >"$TMP/r.cache"
probe CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
    "$PROBE" init:0:OOM 2>"$TMP/corrupt.err"
check "corrupt region reported" grep -q 'shared region not usable, failing closed' "$TMP/corrupt.err"

# --- the node agent's way: /etc/ld.so.preload and /etc/gpuvisor/limits.env ---
# In a private mount namespace, a tmpfs over /etc holds the two files the node
# agent mounts into containers.  No LD_PRELOAD: the dynamic linker loads the
# interposer from ld.so.preload, and the limits file wins over the environment
# (even over GPUVISOR_LIMITS_FILE).
if unshare -m true 2>/dev/null; then
    fresh
    cp /etc/ld.so.cache "$TMP/ld.so.cache" 2>/dev/null || true
    unshare -m sh -c '
        mount -t tmpfs gpuvisor-test /etc || exit 2
        cp "$1/ld.so.cache" /etc/ 2>/dev/null
        printf "%s\n" $2 >/etc/ld.so.preload
        mkdir /etc/gpuvisor
        printf "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s/r.cache\n" "$1" \
            >/etc/gpuvisor/limits.env
        exec env -u LD_PRELOAD CUDA_DEVICE_MEMORY_LIMIT=8g GPUVISOR_LIMITS_FILE="$1/none.env" \
            "$3" init info:1g:1g alloc:2g:OOM hooked:cuMemAlloc_v2:yes' sh "$TMP" "$PRELOAD" "$PROBE"
else
    echo "ok $((n += 1)) # SKIP cannot create a mount namespace here (unshare -m)"
fi

# --- configuration precedence and bad values --------------------------------
if [ $has_etc_limits -eq 1 ]; then
    echo "ok $((n += 1)) # SKIP /etc/gpuvisor/limits.env exists on this machine"
else
    fresh
    printf '# test limits\nCUDA_DEVICE_MEMORY_LIMIT=1g\nexport CUDA_DEVICE_MEMORY_SHARED_CACHE="%s"\n' \
        "$TMP/r.cache" >"$TMP/limits.env"
    probe GPUVISOR_LIMITS_FILE="$TMP/limits.env" CUDA_DEVICE_MEMORY_LIMIT=8g \
        CUDA_DEVICE_MEMORY_LIMIT_0=8g "$PROBE" init info:1g:1g alloc:2g:OOM
    fresh
    probe CUDA_DEVICE_MEMORY_LIMIT=2g CUDA_DEVICE_MEMORY_LIMIT_0=3g "$PROBE" init info:3g:3g
    fresh
    echo 'CUDA_DEVICE_MEMORY_LIMIT=lots' >"$TMP/bad.env"
    probe GPUVISOR_LIMITS_FILE="$TMP/bad.env" "$PROBE" init:0:INVAL alloc:1m:OOM 2>"$TMP/bad.err"
    check "bad limits file value is named in the log" \
        grep -q 'bad.env:1: CUDA_DEVICE_MEMORY_LIMIT="lots"' "$TMP/bad.err"
fi
# bad_value KEY=VALUE: cuInit fails closed and stderr names the key.
bad_value() {
    fresh
    probe "$1" "$PROBE" init:0:INVAL >"$TMP/bad.out" 2>"$TMP/bad.err"
    grep -q '^ok' "$TMP/bad.out" && grep -q "${1%%=*}" "$TMP/bad.err"
}
for bad in CUDA_DEVICE_MEMORY_LIMIT=12x CUDA_DEVICE_MEMORY_LIMIT_99=1g CUDA_DEVICE_SM_LIMIT=150 \
    CUDA_TASK_PRIORITY=-1 GPU_CORE_UTILIZATION_POLICY=sometimes CUDA_OVERSUBSCRIBE=maybe \
    CUDA_DEVICE_MEMORY_SHARED_CACHE=relative/path; do
    check "bad value $bad fails closed with a named error" bad_value "$bad"
done
logs_to_stderr() {
    fresh
    probe LIBCUDA_LOG_LEVEL=4 CUDA_DEVICE_MEMORY_LIMIT=1g "$PROBE" init >"$TMP/log.out" 2>"$TMP/log.err"
    grep -q 'configuration from environment' "$TMP/log.err" && [ "$(grep -vc '^ok' "$TMP/log.out")" -eq 0 ]
}
check "logs go to stderr, never stdout (LIBCUDA_LOG_LEVEL honoured)" logs_to_stderr

# --- SIGKILL storm on the shared region --------------------------------------
fresh
for round in 1 2 3; do
    pids=()
    for i in 1 2 3 4 5 6; do
        probe_bg CUDA_DEVICE_MEMORY_LIMIT=512m CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" \
            "$PROBE" init fill:64k sleep:5000 >/dev/null 2>&1 &
        pids+=($!)
    done
    sleep "0.$((RANDOM % 3 + 1))"
    kill -9 "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
done
timeout 30 env LD_PRELOAD="$PRELOAD" CUDA_DEVICE_MEMORY_LIMIT=512m \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$PROBE" init fill:16m >"$TMP/storm" 2>&1
check "after a SIGKILL storm a new process gets the whole limit back without deadlock" \
    grep -q '^# filled 32$' "$TMP/storm"

# --- a hook whose real function is missing returns CUDA_ERROR_NOT_SUPPORTED --
# A driver stub that lacks cuMemAlloc_v2 stands in for an older driver.
missing_function() {
    mkdir -p "$TMP/stub"
    printf 'int cuInit(unsigned f) { return f ? 1 : 0; }\n' >"$TMP/stub/stub.c"
    cat >"$TMP/missing.c" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    int (*alloc)(void *, unsigned long) = h ? (int (*)(void *, unsigned long))dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") : 0;
    unsigned long long p;
    printf("%d\n", alloc ? alloc(&p, 16) : -1);
    return 0;
}
EOF
    ${CC:-cc} -shared -fPIC -o "$TMP/stub/libcuda.so.1" "$TMP/stub/stub.c" &&
        ${CC:-cc} -o "$TMP/missing" "$TMP/missing.c" -ldl || return 2
    out=$(env LD_LIBRARY_PATH="$TMP/stub" LD_PRELOAD="$PRELOAD" "$TMP/missing" 2>/dev/null)
    [ "$out" = 801 ]
}
check "a missing real function returns CUDA_ERROR_NOT_SUPPORTED, never calls NULL" missing_function

# --- dlsym(RTLD_NEXT) keeps its meaning for wrappers under the interposer ---
# libwrap defines gv_next_probe and asks for the next one (in libreal): if our
# dlsym broke RTLD_NEXT the wrapper would find itself.
rtld_next() {
    mkdir -p "$TMP/next"
    printf 'int gv_next_probe(void) { return 2; }\n' >"$TMP/next/real.c"
    cat >"$TMP/next/wrap.c" <<'EOF'
#include <dlfcn.h>
int gv_next_probe(void) { return 1; }
int gv_call_next(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gv_next_probe");
    return next ? next() : -1;
}
EOF
    printf '#include <stdio.h>\nint gv_call_next(void);\nint main(void) { printf("%%d\\n", gv_call_next()); return 0; }\n' \
        >"$TMP/next/main.c"
    ( cd "$TMP/next" &&
        ${CC:-cc} -shared -fPIC -o libreal.so real.c &&
        ${CC:-cc} -shared -fPIC -o libwrap.so wrap.c -ldl &&
        ${CC:-cc} -o main main.c -L. -Wl,--no-as-needed -lwrap -lreal -ldl ) || return 2
    out=$(env LD_LIBRARY_PATH="$TMP/next" LD_PRELOAD="$PRELOAD" "$TMP/next/main" 2>/dev/null)
    [ "$out" = 2 ]
}
check "dlsym(RTLD_NEXT) from a wrapper library still finds the next definition" rtld_next

# --- NVML: a missing real function returns NVML_ERROR_FUNCTION_NOT_FOUND ------
missing_nvml_function() {
    mkdir -p "$TMP/nvstub"
    printf 'int nvmlInit_v2(void) { return 0; }\n' >"$TMP/nvstub/stub.c"
    cat >"$TMP/nvmissing.c" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
int main(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    int (*mem)(void *, void *) = h ? (int (*)(void *, void *))dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo_v2") : 0;
    unsigned long long m[5] = {0};
    printf("%d\n", mem ? mem(0, m) : -1);
    return 0;
}
EOF
    ${CC:-cc} -shared -fPIC -o "$TMP/nvstub/libnvidia-ml.so.1" "$TMP/nvstub/stub.c" &&
        ${CC:-cc} -o "$TMP/nvmissing" "$TMP/nvmissing.c" -ldl || return 2
    out=$(env LD_LIBRARY_PATH="$TMP/nvstub" LD_PRELOAD="$PRELOAD" "$TMP/nvmissing" 2>/dev/null)
    [ "$out" = 13 ]
}
check "NVML: a missing real function returns NVML_ERROR_FUNCTION_NOT_FOUND" missing_nvml_function

# --- a program that never touches the GPU is left alone ----------------------
quiet_for_others() {
    out=$(env LD_PRELOAD="$PRELOAD" GPUVISOR_LOG_LEVEL=trace CUDA_DEVICE_MEMORY_LIMIT=1g \
        sh -c 'echo hello' 2>"$TMP/quiet.err")
    [ "$out" = hello ] && [ ! -s "$TMP/quiet.err" ]
}
check "preloaded into a program without CUDA: nothing on stdout or stderr" quiet_for_others

# --- dlvsym lookups of driver symbols are redirected like dlsym ---------------
# The CUDA toolkit's libcuda.so stub carries no symbol versions (the driver's
# libraries are assumed alike), so dlvsym finds their symbols whatever version
# the caller names.  The fakes
# link glibc and so carry a version table, which makes dlvsym refuse their
# unversioned symbols: stubs built without libc stand in for the drivers here.
dlvsym_redirect() {
    mkdir -p "$TMP/vs"
    printf 'int cuInit(unsigned f) { return (int)f; }\nint cuMemAlloc_v2(void *p, unsigned long n) { (void)p; (void)n; return 0; }\n' \
        >"$TMP/vs/cuda.c"
    printf 'int nvmlDeviceGetMemoryInfo_v2(void *d, void *m) { (void)d; (void)m; return 0; }\nint nvmlDeviceGetCount_v2(unsigned *n) { *n = 1; return 0; }\n' \
        >"$TMP/vs/nvml.c"
    cat >"$TMP/vs/main.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
static const char *where(void *h, const char *name, int versioned)
{
    Dl_info info;
    void *fn = versioned ? dlvsym(h, name, "ANY_1.0") : dlsym(h, name);
    if (fn == NULL)
        return "none";
    return dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libgpuvisor") ? "hook" : "real";
}
int main(void)
{
    void *cu = dlopen("libcuda.so.1", RTLD_NOW), *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (cu == NULL || nv == NULL)
        return 2;
    /* cuMemGetInfo_v2 and nvmlDeviceGetMemoryInfo are hooked but absent from
     * these libraries: a lookup of them must fail, not find our hook */
    for (int v = 1; v >= 0; v--)
        printf("%s %s %s %s %s %s%s", where(cu, "cuMemAlloc_v2", v), where(cu, "cuCtxGetCurrent", v),
               where(cu, "cuMemGetInfo_v2", v), where(nv, "nvmlDeviceGetMemoryInfo_v2", v),
               where(nv, "nvmlDeviceGetCount_v2", v), where(nv, "nvmlDeviceGetMemoryInfo", v),
               v ? " | " : "\n");
    return 0;
}
EOF
    ${CC:-cc} -shared -fPIC -nostdlib -o "$TMP/vs/libcuda.so.1" "$TMP/vs/cuda.c" &&
        ${CC:-cc} -shared -fPIC -nostdlib -o "$TMP/vs/libnvidia-ml.so.1" "$TMP/vs/nvml.c" &&
        ${CC:-cc} -o "$TMP/vs/main" "$TMP/vs/main.c" -ldl || return 2
    bare=$(env LD_LIBRARY_PATH="$TMP/vs" "$TMP/vs/main" 2>/dev/null)
    out=$(env LD_LIBRARY_PATH="$TMP/vs" LD_PRELOAD="$PRELOAD" "$TMP/vs/main" 2>/dev/null)
    echo "# dlvsym without the interposer: $bare; with it: $out"
    [ "$bare" = "real none none real real none | real none none real real none" ] &&
        [ "$out" = "hook none none hook real none | hook none none hook real none" ]
}
check "dlvsym and dlsym of a hooked driver symbol give the hook; others are untouched; a hooked name the library lacks stays missing" dlvsym_redirect
# The RTLD_NEXT wrapper above again, through dlvsym: still relative to the caller.
rtld_next_versioned() {
    sed -e 's/dlsym(RTLD_NEXT, "gv_next_probe")/dlvsym(RTLD_NEXT, "gv_next_probe", "V1")/' \
        -e '1i #define _GNU_SOURCE' "$TMP/next/wrap.c" >"$TMP/next/wrapv.c"
    printf 'V1 { global: gv_next_probe; };\n' >"$TMP/next/v1.map"
    ( cd "$TMP/next" &&
        ${CC:-cc} -shared -fPIC -Wl,--version-script=v1.map -o libreal.so real.c &&
        ${CC:-cc} -shared -fPIC -o libwrap.so wrapv.c -ldl &&
        ${CC:-cc} -o mainv main.c -L. -Wl,--no-as-needed -lwrap -lreal -ldl ) || return 2
    out=$(env LD_LIBRARY_PATH="$TMP/next" LD_PRELOAD="$PRELOAD" "$TMP/next/mainv" 2>/dev/null)
    [ "$out" = 2 ]
}
check "dlvsym(RTLD_NEXT) from a wrapper library still finds the next definition" rtld_next_versioned
