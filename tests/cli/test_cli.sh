#!/usr/bin/env bash
# CLI smoke tests: dispatch, help, unknown commands and exit codes.
set -u
bin="$BUILD/bin/gpuvisor"
n=0
check() { # check <description> <command...>
    n=$((n + 1)); local d=$1; shift
    if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fi
}
check "version prints semver" bash -c "'$bin' version | grep -Eq '^gpuvisor [0-9]+\.[0-9]+\.[0-9]+$'"
check "help lists commands on stdout" bash -c "'$bin' --help | grep -q '^  version'"
check "no command is a usage error (2)" bash -c "'$bin' >/dev/null 2>&1; [ \$? -eq 2 ]"
check "unknown command exits 2 and names it" bash -c "'$bin' frobnicate 2>&1 >/dev/null | grep \"unknown command 'frobnicate'\" >/dev/null; [ \${PIPESTATUS[0]} -eq 2 ]"

# --- gpuvisor run: usage errors are exit 2 with the reason, before anything runs
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
usage_error() { # expected message, run arguments...: exit 2, message on stderr, command not run
    local want=$1; shift
    "$bin" run "$@" -- touch "$tmp/ran" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/err" && [ ! -e "$tmp/ran" ] && [ ! -s "$tmp/out" ] ||
        { echo "# rc=$rc stderr: $(head -3 "$tmp/err")"; return 1; }
}
check "run --help prints its usage on stdout, exit 0" \
    bash -c "'$bin' run --help | grep -q '^usage: gpuvisor run'"
check "run: an unknown option is a usage error naming it" usage_error 'unknown option "--frob"' --frob
check "run: --gpumem 150% is refused (a percentage is 1..100)" usage_error 'expected a percentage 1..100' --gpumem 150%
check "run: --gpumem-share without --oversubscribe is refused" usage_error '--gpumem-share needs --oversubscribe' --gpumem-share 1Gi
check "run: a missing interposer (--lib) is an error naming it" \
    bash -c "'$bin' run --lib '$tmp/nope.so' -- touch '$tmp/ran' 2>&1 | grep -qF '$tmp/nope.so' && [ ! -e '$tmp/ran' ]"

# --- gpuvisor run passes SIGTERM on to the command and returns its status.
# We wait until run has its handler installed (SigCgt in /proc), never for a
# time: a signal before that would kill run itself (default action).  The
# command ends by itself (exit 9) if the signal never comes, so a broken
# forwarder fails the check instead of hanging it.
sigterm_forwarded() {
    "$bin" run --name "cli-sig-$$" -- sh -c \
        'trap "echo term >'"$tmp"'/got; exit 3" TERM; : >'"$tmp"'/started
         i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done; exit 9' &
    local pid=$!
    local i=0
    while [ $i -lt 1200 ]; do # gives up only if run never installs its handler
        if [ -e "$tmp/started" ] && [ -r "/proc/$pid/status" ] &&
            [ $(( 0x$(awk '/^SigCgt/ {print $2}' "/proc/$pid/status") & 0x4000 )) -ne 0 ]; then
            break
        fi
        sleep 0.05; i=$((i + 1))
    done
    kill -TERM "$pid"
    wait "$pid"
    local rc=$?
    [ $rc -eq 3 ] && grep -q term "$tmp/got" || { echo "# rc=$rc"; return 1; }
}
check "run: SIGTERM reaches the command; run exits with the command's status" sigterm_forwarded

# --- gpuvisor ps
check "ps --help prints its usage, exit 0" bash -c "'$bin' ps --help | grep -q '^usage: gpuvisor ps'"
ps_bad_file() {
    printf 'not a region' >"$tmp/bad.cache"
    "$bin" ps "$tmp/bad.cache" "$tmp/missing.cache" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    grep -q "bad.cache" "$tmp/err" && grep -q "missing.cache" "$tmp/err" && [ $rc -ne 0 ] ||
        { echo "# rc=$rc stderr: $(head -3 "$tmp/err")"; return 1; }
}
check "ps: an unreadable or foreign region file is named on stderr, non-zero exit" ps_bad_file
echo "1..$n"
