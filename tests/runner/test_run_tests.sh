#!/usr/bin/env bash
# tests/run-tests.sh and tests/repeat-tests.sh themselves, on stand-in tests
# that print fixed TAP: a skip is a skip (cmocka's "not ok N # SKIP" too) and
# is listed with its reason; an unexpected skip fails under GV_NO_SKIPS /
# GV_EXPECTED_SKIPS; a crash without a "not ok" is a failure; repeat names
# every case that failed in any run, with its count.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/runner.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
. "$here/runner/tap_check.sh"
mk() { # name, body: an executable stand-in test
    printf '#!/bin/sh\n%s\n' "$2" >"$tmp/$1"; chmod +x "$tmp/$1"
}
mk cm 'echo "1..3"; echo "# openssl CLI not found"; echo "not ok 1 # SKIP test_tls"; echo "ok 2 - test_b"; echo "ok 3 - test_c"'
mk py 'echo "ok 1 - a"; echo "ok 2 - kube # SKIP kubectl not installed"; echo "1..2"'
mk bad 'echo "ok 1 - fine"; echo "ERROR: seed 7 round 9: GPU over capacity"; echo "not ok 2 - broken"; echo "# got 3, want 4"; exit 1'
mk crash 'echo "ok 1 - fine"; kill -SEGV $$'
mk mute 'exit 0'
# fails on the first call in this scratch dir, passes afterwards
mk flaky "if [ -e '$tmp/flaky.seen' ]; then echo 'ok 1 - coin'; else : >'$tmp/flaky.seen'; echo 'not ok 1 - coin'; exit 1; fi"

run() { # runner arguments...: output in $tmp/out, status in $tmp/rc
    env -u GV_NO_SKIPS -u GV_EXPECTED_SKIPS -u GV_TEST_FAILURES -u GV_REPEAT_PREVIOUS_RUNS -u GV_FAIL_FAST BUILD="$tmp/b" \
        GV_TEST_LOGDIR="$tmp/logs" "$@" >"$tmp/out" 2>&1
    echo $? >"$tmp/rc"
}
has() { grep -qF -- "$1" "$tmp/out" || { cat "$tmp/out"; return 1; }; }
rc_is() { [ "$(cat "$tmp/rc")" = "$1" ] || { echo "rc $(cat "$tmp/rc")"; cat "$tmp/out"; return 1; }; }

run "$here/run-tests.sh" "$tmp/cm" "$tmp/py"
check "skips (cmocka's 'not ok N' with SKIP, TAP's 'ok N' with SKIP) are skips, not failures" \
    bash -c "grep -qx '3 passed, 0 failed, 2 skipped' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"
check "every skip is listed with its test and reason" \
    bash -c "grep -qF '$tmp/cm: test_tls: openssl CLI not found' '$tmp/out' &&
             grep -qF '$tmp/py: kube: kubectl not installed' '$tmp/out'"

run env GV_NO_SKIPS=1 "$here/run-tests.sh" "$tmp/cm" "$tmp/py"
check "GV_NO_SKIPS=1: every skip is a failure, marked UNEXPECTED" \
    bash -c "grep -qx '3 passed, 2 failed, 0 skipped' '$tmp/out' && grep -q 'UNEXPECTED' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"

printf '# comment\n: kube: kubectl not installed\n' >"$tmp/allow"
run env GV_EXPECTED_SKIPS="$tmp/allow" "$here/run-tests.sh" "$tmp/cm" "$tmp/py"
check "GV_EXPECTED_SKIPS: an allowed skip passes, any other fails" \
    bash -c "grep -qx '3 passed, 1 failed, 1 skipped' '$tmp/out' &&
             grep -qF 'UNEXPECTED $tmp/cm: test_tls' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"

run "$here/run-tests.sh" "$tmp/bad" "$tmp/crash" "$tmp/mute"
check "a failure, a crash without 'not ok' and a test with no results all fail" \
    bash -c "grep -qx '2 passed, 3 failed, 0 skipped' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"
check "a failure is shown with the diagnostics after it" has "# got 3, want 4"
check "a failure is shown with cmocka's message before it (fail_msg's ERROR line)" \
    has "ERROR: seed 7 round 9: GPU over capacity"

run env GV_FAIL_FAST=1 "$here/run-tests.sh" "$tmp/bad" "$tmp/crash" "$tmp/py"
check "GV_FAIL_FAST=1: the run stops after the first failing test" \
    bash -c "grep -qx '1 passed, 1 failed, 0 skipped' '$tmp/out' && ! grep -q '^crash' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"
# tests/node/gvtest.py's Tap: the first failed check ends the script (status 1)
printf 'import sys\nsys.path.insert(0, "%s/node")\nimport gvtest\nt = gvtest.Tap()\nt.ok(True, "a")\nt.ok(False, "b")\nt.ok(False, "c")\nt.done()\n' \
    "$here" >"$tmp/tap.py"
run env GV_FAIL_FAST=1 python3 "$tmp/tap.py"
check "gvtest.Tap under GV_FAIL_FAST=1: stops at the first failed check, status 1" \
    bash -c "grep -q '^not ok 2 - b' '$tmp/out' && ! grep -q ' - c' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"
run python3 "$tmp/tap.py"
check "gvtest.Tap without it: every check runs, status 1" \
    bash -c "grep -q '^not ok 3 - c' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"

run "$here/repeat-tests.sh" 3 "$tmp/flaky" "$tmp/py"
check "test-repeat: fails when a case failed in any run" rc_is 1
check "test-repeat: names the case with runs failed / runs" has "1/3 $tmp/flaky: coin"
rm -f "$tmp/flaky.seen"; : >"$tmp/flaky.seen"
run "$here/repeat-tests.sh" 2 "$tmp/flaky"
check "test-repeat: all runs clean is a pass" bash -c "grep -q 'no case failed in 2 runs' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"
echo "1..$n"
exit 0
