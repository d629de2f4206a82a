#!/usr/bin/env bash
# tests/mutants/sweep.py on a stand-in repository: a C function with two
# checks, one tested at both boundaries and one never tested.  The sweep's
# patches go through tests/mutants/run.sh: the tested check's mutants are
# KILLED, the untested one's SURVIVED (the sweep names it), and comments,
# strings and preprocessor lines are never mutated.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/mutants-sweep.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
. "$here/../runner/tap_check.sh"
CC=${CC:-cc}

repo="$tmp/repo"
mkdir -p "$repo/src" "$repo/tests"
cd "$repo" || exit 1
cat >src/limit.c <<'C'
#include <stdio.h>
/* a comment: a < b && c == d */
static const char *msg = "x < y";
int fits(unsigned used, unsigned want, unsigned limit)
{
    if (want > limit)
        return 0;
    return used <= limit - want;
}
int valid_index(int i)
{
    if (i < 0 || i >= 16)
        return 0;
    return 1;
}
int main(void)
{
    int ok = fits(600, 400, 1000) && !fits(600, 401, 1000) && !fits(0, 1001, 1000);
    printf("%s %d\n", msg, valid_index(3));
    return ok ? 0 : 1;
}
C
printf 'build/limit: src/limit.c\n\tmkdir -p build && %s -o build/limit src/limit.c\n' "$CC" >Makefile
printf '/build/\n/build-mutants/\n/sweep/\n' >.gitignore
git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm init

python3 "$here/sweep.py" --kill 'build/limit' --out sweep src/limit.c >"$tmp/gen" 2>&1
check "patches are written, one per mutant, in run.sh's format" \
    bash -c "grep -q '^sweep: [0-9]* mutants in sweep' '$tmp/gen' && ls sweep/*.patch >/dev/null &&
             for p in sweep/*.patch; do head -1 \$p | grep -q '^# mutant: src/limit.c:' &&
             sed -n 2p \$p | grep -qx '# kill: build/limit' || exit 1; done"
check "every patch applies to the file as it is" \
    bash -c "for p in sweep/*.patch; do patch -p1 --dry-run -s <\$p >/dev/null || exit 1; done"
check "comments, string literals and #include lines are left alone" \
    bash -c "! grep -h '^# mutant' sweep/*.patch | grep -E 'limit.c:(1|2|3) '"
check "the operators: a boundary flip, a guard made false, && for ||" \
    bash -c "grep -qF 'if (want > limit) -> if (want >= limit)' sweep/*.patch &&
             grep -qF 'if (want > limit) -> if (0)' sweep/*.patch &&
             grep -qF 'if (i < 0 || i >= 16) -> if (i < 0 && i >= 16)' sweep/*.patch"

env -u MUTANTS_SUBSET MUTANTS_SRC="$repo" MUTANTS_DIR=sweep MUTANTS_BUILD_CMD="make -s" \
    "$here/run.sh" >"$tmp/out" 2>&1
check "the tested boundary's mutants are KILLED" \
    bash -c "grep '^KILLED' '$tmp/out' | grep -q 'limit-L6-' && grep '^KILLED' '$tmp/out' | grep -q 'limit-L8-'"
check "the untested check's mutants SURVIVE and are named" \
    bash -c "grep -q '^SURVIVED limit-L12-.*i < 0 || i >= 16' '$tmp/out' &&
             ! grep '^KILLED' '$tmp/out' | grep -q 'limit-L12-'"

python3 "$here/sweep.py" --kill 'build/limit' --out every3 --every 3 src/limit.c >"$tmp/gen3" 2>&1
check "--every 3 keeps a third" \
    bash -c "a=\$(ls sweep | wc -l); b=\$(ls every3 | wc -l); [ \$b -ge 1 ] && [ \$b -le \$(( (a + 2) / 3 )) ]"
check "a missing file is a clear error" \
    bash -c "! python3 '$here/sweep.py' --kill x --out none src/nope.c 2>'$tmp/err' && grep -q 'no such file' '$tmp/err'"
echo "1..$n"
