# Sourced by the shell tests that run the real gpuvisor-scheduler against
# the kube-apiserver stand-in (tests/scheduler/test_webhook_https_*,
# tests/security/test_forged_placements_*): TAP helpers, tool checks, a
# scratch directory cleaned up on exit with the processes, and the stand-in.
# Set BIN, then: sched_testlib_init NAME; start_fake_apiserver (sets $url).
BUILD="${BUILD:-build}"
PY=/usr/bin/python3
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && echo "# $2"; }
check() { if eval "$2"; then ok "$1"; else nok "$1" "${3:-}"; fi; }
bail() { echo "1..1"; echo "not ok 1 - $1"; exit 1; }

sched_testlib_init() { # name: needs openssl and curl (else SKIP), makes $tmp
    for tool in openssl curl; do
        if ! command -v $tool >/dev/null; then
            echo "1..1"; echo "ok 1 # SKIP $tool not installed"; exit 0
        fi
    done
    tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/$1.XXXXXX")
    fa_pid= sched_pid=
    trap sched_testlib_cleanup EXIT
}

sched_testlib_cleanup() {
    [ -n "$sched_pid" ] && kill "$sched_pid" 2>/dev/null && wait "$sched_pid" 2>/dev/null
    [ -n "$fa_pid" ] && kill "$fa_pid" 2>/dev/null && wait "$fa_pid" 2>/dev/null
    rm -rf "$tmp"
}

start_fake_apiserver() { # sets $url and $fa_pid
    coproc FA { exec "$PY" tests/fakes/apiserver/fake_apiserver.py --port 0; }
    fa_pid=$FA_PID
    read -r -t 20 ready url <&"${FA[0]}"
    [ "${ready:-}" = READY ] || bail "fake apiserver did not start"
}
