#!/usr/bin/env bash
# `gpuvisor run` and `gpuvisor ps` with the fake driver: limits reach the
# command through the interposer, ps lists live tenants, bad values are
# refused with a clear message.  TAP on stdout.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
GV=$PWD/$BUILD/bin/gpuvisor
PROBE=$PWD/$BUILD/tests/gv_probe
TMP=$(mktemp -d "${GV_TEST_TMP:-/tmp}/cli-run.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export LD_LIBRARY_PATH=$PWD/$BUILD/tests/fakes
export GV_FAKE_GPU_STATE=$TMP/fake.state
export GPUVISOR_RUN_DIR=$TMP/runs
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
unset CUDA_VISIBLE_DEVICES GPUVISOR_LIMITS_FILE CUDA_DEVICE_MEMORY_LIMIT LD_PRELOAD

n=0
check() { local name=$1; shift; n=$((n + 1)); if "$@"; then echo "ok $n - $name"; else echo "not ok $n - $name"; fi; }

if [ -e /etc/gpuvisor/limits.env ]; then
    echo "ok 1 # SKIP /etc/gpuvisor/limits.env exists: its limits would override gpuvisor run's"
    exit 0
fi

# The probe's own TAP lines check what the command sees.
"$GV" run --gpumem 1Gi -- "$PROBE" init info:1g:1g alloc:1g:OK alloc:1:OOM
"$GV" run --gpumem 2048 -- "$PROBE" init info:2g:2g total:0:2g
"$GV" run --gpumem 25% -- "$PROBE" init info:4g:4g nvml-mem:1:0:4g
"$GV" run --device 1 --gpumem 512Mi -- "$PROBE" init info:512m:512m nvml-mem:1:0:512m nvml-mem:0:0:16g

# Oversubscription: 8 GiB visible, 4 GiB of it device memory, the rest managed.
"$GV" run --gpumem 8Gi --oversubscribe --gpumem-share 4Gi -- "$PROBE" init info:8g:8g alloc:3g:OK \
    alloc:2g:OK info:3g:8g alloc:4g:OOM

exit_code() { "$GV" run -- sh -c 'exit 7'; [ $? -eq 7 ]; }
check "run returns the command's exit status" exit_code

ps_lists() {
    "$GV" run --name job-a --gpumem 1Gi --gpucores 30 --priority 2 -- \
        "$PROBE" init alloc:100m:OK sleep:1500 >"$TMP/job.out" 2>&1 &
    local job=$!
    for _ in $(seq 50); do grep -q 'alloc:100m' "$TMP/job.out" 2>/dev/null && break; sleep 0.05; done
    "$GV" ps >"$TMP/ps.out"
    wait $job
    grep -Eq '^job-a +[0-9]+ +[0-9]+ +2 +GPU-fa4e0000-[0-9a-f-]+ +100/1024 +- +30 +[0-9]+$' "$TMP/ps.out" &&
        grep -q '^ok' "$TMP/job.out" && ! grep -q '^not ok' "$TMP/job.out"
}
check "ps lists a live run with its usage, limit, share and priority" ps_lists
ps_managed() {
    "$GV" run --name job-o --gpumem 8Gi --oversubscribe --gpumem-share 1Gi -- \
        "$PROBE" init alloc:512m:OK alloc:1g:OK sleep:1500 >"$TMP/jobo.out" 2>&1 &
    local job=$!
    for _ in $(seq 50); do grep -q 'alloc:1g' "$TMP/jobo.out" 2>/dev/null && break; sleep 0.05; done
    "$GV" ps >"$TMP/ps.out"
    wait $job
    grep -Eq '^job-o +[0-9]+ +[0-9]+ +[0-9]+ +GPU-fa4e0000-[0-9a-f-]+ +1536/8192 +1024 +- +[0-9]+$' "$TMP/ps.out"
}
check "ps shows the managed part of an oversubscribed slice" ps_managed
check "the run's region is removed when the command ends" bash -c "! ls '$TMP/runs/job-a.cache' 2>/dev/null"
ps_empty() { [ "$("$GV" ps | wc -l)" -eq 1 ]; }
check "ps with no live tenants prints only its header" ps_empty

ps_corrupt() {
    head -c 100 /dev/zero >"$TMP/bad.cache"
    "$GV" ps "$TMP/bad.cache" >/dev/null 2>"$TMP/ps.err"
    [ $? -eq 1 ] && grep -q 'not a gpuvisor shared region' "$TMP/ps.err"
}
check "ps reports a corrupt region instead of trusting it" ps_corrupt

# bad_value ARGS... : exit status 2 and a message naming the option.
bad_value() {
    local opt=$1
    "$GV" run "$@" -- true >/dev/null 2>"$TMP/err"
    [ $? -eq 2 ] && grep -q -- "$opt" "$TMP/err"
}
for args in "--gpumem abc" "--gpumem 0" "--gpumem 101%" "--gpumem -5Gi" "--gpucores 0" \
    "--gpucores 150" "--gpucores x" "--priority 16" "--priority -1" "--device a" "--device 0,0" \
    "--device 1," "--name ../x" "--gpumem-share 2Gi" "--gpumem-share 0 --oversubscribe"; do
    # shellcheck disable=SC2086
    check "run refuses $args" bad_value $args
done
no_command() { "$GV" run --gpumem 1Gi >/dev/null 2>"$TMP/err"; [ $? -eq 2 ] && grep -q 'no command' "$TMP/err"; }
check "run without a command is refused" no_command
missing_lib() { "$GV" run --lib /nonexistent.so -- true 2>"$TMP/err"; [ $? -eq 1 ] && grep -q nonexistent "$TMP/err"; }
check "run names a missing interposer" missing_lib
