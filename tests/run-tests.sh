#!/usr/bin/env bash
# Runs every test program/script given as arguments and totals their results.
#
# Each test speaks TAP on stdout ("ok N - name", "not ok N - name",
# "ok N # SKIP reason"); cmocka programs do so via CMOCKA_MESSAGE_OUTPUT=TAP.
# A test that exits non-zero without reporting a failure (a crash, a
# sanitizer abort) counts as one failure, so nothing is lost silently.
# The last line is the machine-readable total: "N passed, N failed, N skipped".
set -u
export CMOCKA_MESSAGE_OUTPUT=TAP
export BUILD="${BUILD:-build}"
export GV_TEST_TMP="${GV_TEST_TMP:-$(mktemp -d /tmp/gpuvisor-test.XXXXXX)}"
logdir="$BUILD/test-logs"
mkdir -p "$logdir"

pass=0 fail=0 skip=0
failed_names=()
for t in "$@"; do
    name=$(basename "$t")
    log="$logdir/$name.log"
    start=$(date +%s.%N)
    # stdin closed: a test must never wait on the terminal (CI has none)
    "$t" </dev/null >"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    p=$(grep -cE '^ok [0-9]+' "$log" | head -1)
    s=$(grep -cE '^ok [0-9]+.*# *(SKIP|skip)' "$log" | head -1)
    f=$(grep -cE '^not ok [0-9]+' "$log" | head -1)
    p=$((p - s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "not ok - $name exited with status $rc without reporting a failure" >>"$log"
    fi
    if [ $((p + f + s)) -eq 0 ]; then
        f=1
        echo "not ok - $name reported no test results" >>"$log"
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    printf '%-40s %4d passed %3d failed %3d skipped  (%.1fs)\n' "$name" "$p" "$f" "$s" \
        "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')"
    if [ "$f" -ne 0 ]; then
        failed_names+=("$name")
        grep -E '^not ok|^# ' "$log" | head -40 | sed 's/^/    /'
        echo "    (full log: $log)"
    fi
done
rm -rf "$GV_TEST_TMP"
if [ ${#failed_names[@]} -ne 0 ]; then
    echo "failing: ${failed_names[*]}"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
