#!/usr/bin/env bash
# tests/mutants/run.sh itself, on a stand-in repository (a two-file "build"
# and a check script), so it runs in seconds in `make test`: a no-op mutant
# is reported SURVIVED and fails the run; a real one is KILLED; a patch that
# no longer applies and a kill command that fails without its mutant are
# BROKEN; a mutant that does not build is BROKEN; the scratch copy is reused
# without keeping a mutant's build output; subsets pick k, k+n, ...; the
# header comments do not stop a plain `patch -p1`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/mutants-runner.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
. "$here/../runner/tap_check.sh"

repo="$tmp/repo"
mkdir -p "$repo/src" "$repo/tests/mutants"
cd "$repo" || exit 1
# "build": build/value is src/value.txt, through make, so timestamps matter
printf 'build/value: src/value.txt\n\tmkdir -p build && cp src/value.txt build/value\n' >Makefile
# programs a kill command may name: built one by one per mutant (targeted)
printf 'all: build/value build/tests/one build/tests/two\nbuild/tests/%%: src/value.txt\n\tmkdir -p build/tests && cp src/value.txt $@\n' >>Makefile
printf '42\n' >src/value.txt
printf 'the notes nobody checks\n' >src/notes.txt
printf '#!/bin/sh\ntest "$(cat build/value)" = 42\n' >tests/check.sh
chmod +x tests/check.sh
printf '/build/\n/build-mutants/\n' >.gitignore
git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm init

mkpatch() { # name, kill command, file, old line, new line
    printf '# mutant: %s\n# kill: %s\n--- a/%s\n+++ b/%s\n@@ -1 +1 @@\n-%s\n+%s\n' \
        "$1" "$2" "$3" "$3" "$4" "$5" >"tests/mutants/$1.patch"
}
mkpatch real 'tests/check.sh' src/value.txt 42 41
mkpatch noop 'tests/check.sh' src/notes.txt 'the notes nobody checks' 'the notes nobody reads'
mkpatch stale 'tests/check.sh' src/value.txt 43 44
mkpatch badkill 'false' src/value.txt 42 40
mkpatch nobuild 'tests/check.sh' Makefile 'build/value: src/value.txt' 'build/value: src/missing.txt'

run() { # runner arguments...: output in $tmp/out, status in $tmp/rc
    env -u MUTANTS_SUBSET MUTANTS_SRC="$repo" MUTANTS_BUILD_CMD="make -s" \
        "$here/run.sh" "$@" >"$tmp/out" 2>&1
    echo $? >"$tmp/rc"
}
has() { grep -qE -- "$1" "$tmp/out" || { cat "$tmp/out"; return 1; }; }
rc_is() { [ "$(cat "$tmp/rc")" = "$1" ] || { echo "rc $(cat "$tmp/rc")"; cat "$tmp/out"; return 1; }; }

run real
check "a mutant the check catches is KILLED, and the run passes" \
    bash -c "grep -q '^KILLED   real' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"
check "the developer's tree is untouched" \
    bash -c "cd '$repo' && [ \"\$(cat src/value.txt)\" = 42 ] && [ -z \"\$(git status --porcelain -- src Makefile)\" ]"

run noop
check "a no-op mutant is SURVIVED and fails the run" \
    bash -c "grep -q '^SURVIVED noop: noop' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"

run real
check "the reused copy rebuilds after the revert (baseline passes, KILLED again)" \
    bash -c "grep -q '^KILLED   real' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"

run stale
check "a patch that no longer applies is BROKEN, named, and fails the run" \
    bash -c "grep -q '^BROKEN   stale: no longer applies' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"

# a kill command that finds the root through git must land in the copy
printf '# mutant: value changed\n# kill: cd "$(git rev-parse --show-toplevel)" && tests/check.sh\n' \
    >tests/mutants/gitroot.patch
sed '1,2d' tests/mutants/real.patch >>tests/mutants/gitroot.patch
run gitroot
check "the copy is its own git root (a test using git rev-parse runs the mutant's build)" \
    bash -c "grep -q '^KILLED   gitroot' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"
rm tests/mutants/gitroot.patch

# default build command: per mutant only the programs the kill command names
mkpatch targeted 'test "$(cat build/tests/one)" = 42 && test "$(cat build/tests/two)" = 42' \
    src/value.txt 42 41
env -u MUTANTS_SUBSET MUTANTS_SRC="$repo" "$here/run.sh" targeted >"$tmp/out" 2>&1
echo $? >"$tmp/rc"
check "targeted builds: a kill command naming two programs gets both rebuilt with the mutant" \
    bash -c "grep -q '^KILLED   targeted' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"
rm tests/mutants/targeted.patch

run badkill
check "a kill command failing without its mutant is BROKEN (it would kill anything)" \
    bash -c "grep -q '^BROKEN   badkill: kill command fails without the mutant' '$tmp/out' &&
             ! grep -q KILLED '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"

run nobuild
check "a mutant that does not build is BROKEN" \
    bash -c "grep -q '^BROKEN   nobuild: does not build' '$tmp/out' && [ \$(cat '$tmp/rc') = 1 ]"

run real
check "after a broken build the copy is whole again" \
    bash -c "grep -q '^KILLED   real' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"

# a change in the developer's tree reaches the copy (by content)
printf '41\n' >"$repo/src/value.txt"
printf '#!/bin/sh\ntest "$(cat build/value)" = 41\n' >"$repo/tests/check.sh"
mkpatch real41 'tests/check.sh' src/value.txt 41 42
run real41
check "uncommitted edits in the tree are what gets mutated" \
    bash -c "grep -q '^KILLED   real41' '$tmp/out' && [ \$(cat '$tmp/rc') = 0 ]"
(cd "$repo" && git checkout -q -- src/value.txt tests/check.sh && rm tests/mutants/real41.patch)

env MUTANTS_SUBSET=2/3 MUTANTS_SRC="$repo" "$here/run.sh" --list >"$tmp/out" 2>&1
check "MUTANTS_SUBSET=2/3 picks the 2nd, 5th, ... of the sorted list" \
    bash -c "[ \"\$(grep -v '^mutants:' '$tmp/out' | tr '\n' ' ')\" = 'nobuild stale ' ]"
env MUTANTS_SUBSET=day/3 MUTANTS_SRC="$repo" "$here/run.sh" --list >"$tmp/out" 2>&1
check "MUTANTS_SUBSET=day/n picks one of the n subsets" \
    bash -c "[ \$(grep -vc '^mutants:' '$tmp/out') -ge 1 ] && [ \$(grep -vc '^mutants:' '$tmp/out') -le 2 ]"
env MUTANTS_SUBSET=4/3 MUTANTS_SRC="$repo" "$here/run.sh" --list >"$tmp/out" 2>&1
echo $? >"$tmp/rc"
check "MUTANTS_SUBSET out of range is a usage error" rc_is 2

check "the header comments do not stop a plain 'patch -p1'" \
    bash -c "mkdir -p '$tmp/p/src' && cp '$repo/src/value.txt' '$tmp/p/src/' && cd '$tmp/p' &&
             patch -p1 -s <'$repo/tests/mutants/real.patch' && [ \"\$(cat src/value.txt)\" = 41 ]"

echo "1..$n"
