# Sourced by the shell tests of the test tooling (tests/runner/test_run_tests.sh,
# tests/mutants/test_mutants_runner.sh): one TAP line per check.
#   check DESCRIPTION CMD...   "ok N - DESCRIPTION" when CMD succeeds, else
#                              "not ok" and CMD's first output lines (# ...)
# Needs $tmp (a scratch directory); counts in $n.
n=${n:-0}
check() { # description, command: ok when the command succeeds
    local d=$1; shift
    n=$((n + 1))
    if "$@" >"$tmp/last" 2>&1; then echo "ok $n - $d"; else
        echo "not ok $n - $d"; sed 's/^/# /' "$tmp/last" | head -30; fi
}
