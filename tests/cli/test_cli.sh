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
echo "1..$n"
