#!/usr/bin/env bash
# Compute share and priority end to end: test_throttle_tenant (an application
# linked to the fake libcuda.so.1) under LD_PRELOAD=libgpuvisor.so, configured
# by the HAMi environment contract, on the fake driver's virtual clock
# (tests/fakes/cuda/fake_cuda_exec.c).  Tenants run as separate processes on
# one fake GPU (GV_FAKE_GPU_STATE).  TAP on stdout.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
LIB=$PWD/$BUILD/lib/libgpuvisor.so
TENANT=$PWD/$BUILD/tests/test_throttle_tenant
TMP=$(mktemp -d "${GV_TEST_TMP:-/tmp}/throttle.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export LD_LIBRARY_PATH=$PWD/$BUILD/tests/fakes
unset CUDA_VISIBLE_DEVICES GPUVISOR_LIMITS_FILE CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT \
    CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_OVERSUBSCRIBE CUDA_TASK_PRIORITY \
    GPU_CORE_UTILIZATION_POLICY GPUVISOR_NODE_DIR GPUVISOR_LOG_LEVEL GV_FAKE_ACTORS
for v in $(env | grep -o '^CUDA_DEVICE_SM_LIMIT_[0-9]*'); do unset "$v"; done

PRELOAD=$LIB
asan=$(ldd "$LIB" 2>/dev/null | awk '/libasan/ {print $3}')
[ -n "$asan" ] && PRELOAD="$asan $LIB"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}

n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); echo "not ok $n - $*"; }
run=0
# fresh: a new fake GPU (state + virtual clock) for the next scenario.
# Each has its own node directory: board times are on the fake's clock, which
# restarts at 0 with every fake GPU.
fresh() {
    run=$((run + 1))
    export GV_FAKE_GPU_STATE=$TMP/gpu.$run
    export GPUVISOR_NODE_DIR=$TMP/node.$run
    mkdir -p "$GPUVISOR_NODE_DIR"
}
# tenant [VAR=value...] -- API KERNEL HORIZON_MS [MARK_MS [IDLE_MS]]
# Each tenant is its own container: its own shared region, named by the pid of
# the subshell that runs it ($BASHPID: distinct for tenants running at the same
# time).  Not $RANDOM: two background subshells can draw the same number, and
# then the second tenant joins the first one's region, its limit is refused
# ("limits already fixed by the first process") and the pair shares one budget
# (seen once under load: "30% beside a 70% tenant: got 0.2").
tenant() {
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env LD_PRELOAD="$PRELOAD" CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.$run.$BASHPID.cache" \
        "${envs[@]}" "$TENANT" "$@"
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
# within VALUE TARGET TOL
within() { awk -v v="$1" -v t="$2" -v d="$3" 'BEGIN { exit !(v >= t - d && v <= t + d) }'; }
expect_field() { # field unit name output target tolerance: the tenant's FIELD=value
    local got
    got=$(field "$1" "$4")
    if [ -n "$got" ] && within "$got" "$5" "$6"; then
        ok "$3: ${got}$2 (target $5 +- $6)"
    else
        nok "$3: got '${got:-nothing}'$2 (target $5 +- $6); output: $4"
    fi
}
expect_share() { expect_field share % "$@"; } # name output target tolerance

# --- one tenant, every launch API -------------------------------------------------
for api in kernel kernel_ptsz ex coop multi graph; do
    fresh
    kernel=spin_1000us
    [ "$api" = graph ] && kernel=step_250us
    out=$(tenant CUDA_DEVICE_SM_LIMIT=30 -- $api $kernel 1000)
    expect_share "CUDA_DEVICE_SM_LIMIT=30 alone, $api" "$out" 30 5
done

for p in 10 50 90; do
    fresh
    out=$(tenant CUDA_DEVICE_SM_LIMIT=$p -- kernel spin_1000us 1000)
    expect_share "CUDA_DEVICE_SM_LIMIT=$p alone" "$out" "$p" 5
done

# Sleeps that overshoot (50 us of timer slack) must not pace 100 us kernels below
# their share, with or without burst credit.
for pol in default force; do
    fresh
    out=$(tenant GV_FAKE_SLEEP_SLACK_NS=50000 GPU_CORE_UTILIZATION_POLICY=$pol \
        CUDA_DEVICE_SM_LIMIT=50 -- kernel spin_100us 1000)
    expect_share "policy $pol, 100 us kernels, sleeps overshooting by 50 us" "$out" 50 5
done

# --- two tenants (separate containers: separate shared regions) -------------------
for p in 10 30; do
    fresh
    q=$((100 - p))
    tenant GV_FAKE_ACTORS=2 CUDA_DEVICE_SM_LIMIT=$p -- kernel spin_1000us 1000 >"$TMP/a" &
    a=$!
    tenant GV_FAKE_ACTORS=2 CUDA_DEVICE_SM_LIMIT=$q -- kernel spin_1000us 1000 >"$TMP/b" &
    b=$!
    wait $a $b
    expect_share "$p% beside a $q% tenant" "$(cat "$TMP/a")" "$p" 5
    expect_share "$q% beside a $p% tenant" "$(cat "$TMP/b")" "$q" 5
done

# --- processes of one container share its budget ---------------------------------
fresh
for i in 1 2; do
    env LD_PRELOAD="$PRELOAD" CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/one.$run.cache" GV_FAKE_ACTORS=2 \
        CUDA_DEVICE_SM_LIMIT=40 "$TENANT" kernel spin_1000us 1000 >"$TMP/p$i" &
done
wait
s1=$(field share "$(cat "$TMP/p1")")
s2=$(field share "$(cat "$TMP/p2")")
sum=$(awk -v a="$s1" -v b="$s2" 'BEGIN { print a + b }')
if within "$sum" 40 5; then
    ok "two processes of one container at CUDA_DEVICE_SM_LIMIT=40 share it: $s1% + $s2%"
else
    nok "two processes of one container at 40%: $s1% + $s2% = $sum%"
fi

# --- a later process cannot raise its container's SM limit ------------------------
# The container's first process fixes the limit in the shared region; a tenant
# is root in its container and sets its own processes' environment, so a later
# process asking more, or nothing, is held to the region's limit; one asking
# less keeps its own (throttle_gate.c: the region may lower, never raise).
# One fake GPU, one process after another: the fake's clock runs on, so each
# later process spins from where the last stopped, measured over its last
# 500 ms (launches after MARK_MS: 1 ms kernels, 150 at 30%).
fresh
fixed="$TMP/fixed.$run.cache"
in_fixed() { # horizon_ms [VAR=value...]
    local h=$1; shift
    env LD_PRELOAD="$PRELOAD" CUDA_DEVICE_MEMORY_SHARED_CACHE="$fixed" "$@" "$TENANT" kernel spin_1000us \
        "$h" $((h - 500)) 2>/dev/null
}
expect_after() { expect_field after_mark " ms of 500" "$@"; } # launches after the mark
expect_after "the container's first process at CUDA_DEVICE_SM_LIMIT=30" \
    "$(in_fixed 600 CUDA_DEVICE_SM_LIMIT=30)" 150 25
expect_after "a later process asking CUDA_DEVICE_SM_LIMIT=90: held to the region's 30" \
    "$(in_fixed 1200 CUDA_DEVICE_SM_LIMIT=90)" 150 25
expect_after "a later process with no SM limit of its own: held to the region's 30" \
    "$(in_fixed 1800)" 150 25
expect_after "a later process asking CUDA_DEVICE_SM_LIMIT=15: keeps its lower 15" \
    "$(in_fixed 2400 CUDA_DEVICE_SM_LIMIT=15)" 75 20

# --- the achieved share is published in the region --------------------------------
# Once a virtual second the gate writes the process's utilisation into its slot
# of the shared region, where `gpuvisor ps` and the node agent's monitor read it.
fresh
hold="$TMP/hold.$run"
env LD_PRELOAD="$PRELOAD" CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/util.$run.cache" CUDA_DEVICE_SM_LIMIT=30 \
    GV_TENANT_HOLD="$hold" "$TENANT" kernel spin_1000us 3000 >"$TMP/util.out" 2>&1 &
holder=$!
for _ in $(seq 300); do [ -e "$hold.ready" ] && break; sleep 0.1; done
ps_out=$("$PWD/$BUILD/bin/gpuvisor" ps "$TMP/util.$run.cache" 2>&1)
touch "$hold"
wait "$holder"
util=$(awk 'NR > 1 && $1 != "" {print $NF}' <<<"$ps_out" | head -1)
if [ -n "$util" ] && within "$util" 30 5; then
    ok "a process at CUDA_DEVICE_SM_LIMIT=30 publishes its achieved share in the region: gpuvisor ps says $util%"
else
    nok "achieved share in the region: gpuvisor ps says '${util:-nothing}' (want 30 +- 5): $ps_out"
fi

# --- what is not limited runs free ------------------------------------------------
fresh
expect_share "no limit: not throttled" "$(tenant -- kernel spin_1000us 500)" 100 1
fresh
expect_share "GPU_CORE_UTILIZATION_POLICY=disable ignores the limit" \
    "$(tenant CUDA_DEVICE_SM_LIMIT=30 GPU_CORE_UTILIZATION_POLICY=disable -- kernel spin_1000us 500)" 100 1
fresh
expect_share "CUDA_DEVICE_SM_LIMIT_1 does not limit device 0" \
    "$(tenant CUDA_DEVICE_SM_LIMIT_1=30 -- kernel spin_1000us 500)" 100 1
fresh
expect_share "CUDA_DEVICE_SM_LIMIT_0 follows CUDA_VISIBLE_DEVICES=1 (index the app sees)" \
    "$(tenant CUDA_VISIBLE_DEVICES=1 CUDA_DEVICE_SM_LIMIT_0=40 -- kernel spin_1000us 500)" 40 5
fresh
expect_share "GPU_CORE_UTILIZATION_POLICY=force holds the share" \
    "$(tenant CUDA_DEVICE_SM_LIMIT=60 GPU_CORE_UTILIZATION_POLICY=force -- kernel spin_1000us 500)" 60 5
fresh
printf 'CUDA_DEVICE_SM_LIMIT=20\n' >"$TMP/limits.env"
expect_share "the limits file wins over the environment" \
    "$(tenant GPUVISOR_LIMITS_FILE="$TMP/limits.env" CUDA_DEVICE_SM_LIMIT=80 -- kernel spin_1000us 500)" 20 5

# --- priority across containers (node directory shared by both) -------------------
fresh
solo=$(tenant CUDA_TASK_PRIORITY=0 -- kernel spin_1000us 1000)
fresh
tenant GV_FAKE_ACTORS=2 CUDA_TASK_PRIORITY=0 -- \
    kernel spin_1000us 1000 >"$TMP/hi" &
a=$!
tenant GV_FAKE_ACTORS=2 CUDA_TASK_PRIORITY=2 -- \
    kernel spin_1000us 1000 >"$TMP/lo" &
b=$!
wait $a $b
s=$(field kernels "$solo")
h=$(field kernels "$(cat "$TMP/hi")")
if [ -n "$s" ] && [ -n "$h" ] && [ $((h * 10)) -ge $((s * 9)) ]; then
    ok "priority 0 keeps >= 90% of its solo throughput beside a priority-2 hog ($h vs $s kernels)"
else
    nok "priority 0 beside a priority-2 hog: $h vs solo $s kernels"
fi
# The high one stops at 500 ms; the low one must get the GPU back.
fresh
tenant GV_FAKE_ACTORS=2 CUDA_TASK_PRIORITY=0 -- \
    kernel spin_1000us 500 >"$TMP/hi" &
a=$!
tenant GV_FAKE_ACTORS=2 CUDA_TASK_PRIORITY=2 -- \
    kernel spin_1000us 1000 500 >"$TMP/lo" &
b=$!
wait $a $b
lo=$(cat "$TMP/lo")
total=$(field kernels "$lo")
after=$(field after_mark "$lo")
resume=$(field resume_ns "$lo")
lo_end=$(field end_ns "$lo")
hi_end=$(field end_ns "$(cat "$TMP/hi")")
# The high tenant is busy until its queued work is done (hi_end); then the low
# one must resume within a few ms and have the GPU to itself.
if [ -n "$resume" ] && [ -n "$hi_end" ] && [ $((total - after)) -le 2 ] &&
    [ $((resume + 1000000)) -ge "$hi_end" ] && [ "$resume" -le $((hi_end + 10000000)) ] &&
    awk -v k="$after" -v a="$resume" -v b="$lo_end" 'BEGIN { exit !(k * 1e6 / (b - a) >= 0.9) }'; then
    ok "priority 2 yields while priority 0 is busy (until $hi_end ns) and resumes at $resume ns"
else
    nok "priority 2 yield/resume: high busy until ${hi_end:-?}; low: $lo"
fi

# --- the same through `gpuvisor run` (it gives its runs one priority directory) ------
fresh
GPUVISOR_RUN_DIR=$TMP/runs
export GPUVISOR_RUN_DIR
unset GPUVISOR_NODE_DIR
GV=$PWD/$BUILD/bin/gpuvisor
GV_FAKE_ACTORS=2 "$GV" run --priority 0 -- "$TENANT" kernel spin_1000us 500 >"$TMP/hi" &
a=$!
GV_FAKE_ACTORS=2 "$GV" run --priority 3 -- "$TENANT" kernel spin_1000us 500 >"$TMP/lo" &
b=$!
wait $a $b
hi=$(field share "$(cat "$TMP/hi")")
lo=$(cat "$TMP/lo")
if within "$hi" 100 2 && [ -n "$(field kernels "$lo")" ] && [ "$(field kernels "$lo")" -le 5 ]; then
    ok "gpuvisor run: --priority 0 gets ${hi}%, a --priority 3 run yields"
else
    nok "gpuvisor run priority: high $hi% (want 100 +- 2), low: $lo"
fi
# A level-0 run held to half the GPU by its own share leaves the other half to
# the lower one (its waits for its budget carry no grace), and keeps its half.
fresh
GV_FAKE_ACTORS=2 "$GV" run --priority 0 --gpucores 50 -- "$TENANT" kernel spin_1000us 500 >"$TMP/hi" &
a=$!
GV_FAKE_ACTORS=2 "$GV" run --priority 3 -- "$TENANT" kernel spin_1000us 500 >"$TMP/lo" &
b=$!
wait $a $b
hi=$(field share "$(cat "$TMP/hi")")
lo=$(field share "$(cat "$TMP/lo")")
if within "$hi" 50 5 && within "$lo" 50 5; then
    ok "gpuvisor run: --priority 0 --gpucores 50 gets ${hi}%, a --priority 3 run fills the rest (${lo}%)"
else
    nok "gpuvisor run priority with a share: high $hi% (want 50 +- 5), low $lo% (want 50 +- 5)"
fi

# --- bad values fail closed for compute too (reported; cuInit refuses, no crash) --
fresh
out=$(tenant CUDA_DEVICE_SM_LIMIT=abc -- kernel spin_1000us 100 2>"$TMP/err")
rc=$?
if [ "$rc" -lt 128 ] && grep -q "CUDA_DEVICE_SM_LIMIT" "$TMP/err"; then
    ok "a malformed CUDA_DEVICE_SM_LIMIT is reported, the program is not crashed (exit $rc)"
else
    nok "malformed CUDA_DEVICE_SM_LIMIT: exit $rc; $out / $(cat "$TMP/err")"
fi

echo "1..$n"
