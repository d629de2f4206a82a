#!/usr/bin/env bash
# Runs the suite N times (`make test-repeat N=...`) and names every case that
# failed at least once, with how many runs it failed in.  Zero tolerance: one
# failure in any run fails the whole, since a flaky test is a bug in the
# product or in the test.
#
#   tests/repeat-tests.sh N test...
#
# Each run gets fresh scratch space and its own logs ($BUILD/test-logs/run-<i>/).
# GV_TEST_FAILURES / GV_REPEAT_PREVIOUS_RUNS: .ci/run points GV_TEST_FAILURES
# at the file its first (README) run already appended to and says how many runs
# that was, so the tally covers all of them.
set -u
if [ $# -lt 1 ] || ! [ "$1" -ge 1 ] 2>/dev/null; then
    echo "usage: $0 N test..." >&2
    exit 2
fi
runs=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
export BUILD="${BUILD:-build}"
failures="${GV_TEST_FAILURES:-}"
own_failures=0
if [ -z "$failures" ]; then
    failures=$(mktemp /tmp/gpuvisor-repeat.XXXXXX)
    own_failures=1
fi
export GV_TEST_FAILURES="$failures"
prev=${GV_REPEAT_PREVIOUS_RUNS:-0}
total=$((prev + runs))

bad_runs=0
for i in $(seq 1 "$runs"); do
    echo "== suite run $((prev + i)) of $total"
    # a fresh scratch dir per run (run-tests.sh makes one when unset)
    if ! env -u GV_TEST_TMP GV_TEST_LOGDIR="$BUILD/test-logs/run-$((prev + i))" \
        "$here/run-tests.sh" "$@"; then
        bad_runs=$((bad_runs + 1))
    fi
done
echo "== $total suite runs"
if [ -s "$failures" ]; then
    echo "cases that failed (runs failed / $total):"
    sort "$failures" | uniq -c | sort -rn | awk -v n="$total" '{c=$1; $1=""; printf "  %d/%d %s\n", c, n, substr($0, 2)}'
    [ "$own_failures" = 1 ] && rm -f "$failures"
    exit 1
fi
[ "$own_failures" = 1 ] && rm -f "$failures"
if [ "$bad_runs" -ne 0 ]; then
    echo "$bad_runs run(s) failed without naming a case (see the logs above)"
    exit 1
fi
echo "no case failed in $total runs"
