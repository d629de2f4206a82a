#!/usr/bin/env bash
# `make mutants`: plants each known bug (tests/mutants/<name>.patch) in a
# scratch copy of the tree, one at a time, and checks that its kill command
# then fails.  A mutant whose kill command still passes SURVIVED: the suite
# no longer catches a bug it was written to catch.  See docs/contributing.md
# ("Mutants").
#
# A mutant file is a unified diff that applies with `patch -p1` at the repo
# root, preceded by comment lines (patch skips leading text before the first
# `---`, so the file stays a plain patch):
#   # mutant: <the bug it plants>
#   # kill: <shell command, run from the root after building, that must FAIL>
#
# Why a scratch copy: the developer's tree and build/ are never touched, and
# one copy is kept (default build-mutants/, seeded from build/ with
# timestamps kept) so each mutant costs one incremental rebuild, not a full
# one.  Files are refreshed by content, not by time: a file only gets a new
# mtime (and so a rebuild) when its content differs from the scratch copy's.
#
# Each kill command is first run on the unmutated copy and must pass there;
# otherwise "killed" would mean nothing (a broken or flaky kill command kills
# every mutant).
#
# Usage: tests/mutants/run.sh [--list] [name ...]   (names without .patch; default all)
#   --list   print the selected mutants' names and stop
# Environment:
#   MUTANTS_SUBSET=k/n    only mutants k, k+n, k+2n, ... of the sorted list (1-based)
#   MUTANTS_SUBSET=day/n  k from the day number, so successive days cover every mutant
#   MUTANTS_DIR           patches (default tests/mutants)
#   MUTANTS_SCRATCH       scratch directory (default build-mutants)
#   MUTANTS_SEED_BUILD    build tree to seed a new scratch copy from (default build)
#   MUTANTS_BUILD_CMD     build command in the copy, every time (default: make -j$JOBS all,
#                         JOBS=2; per mutant only the build/... programs its kill command
#                         names when it names no script: relinking every test program for
#                         each mutant cost most of a run)
#   MUTANTS_TIMEOUT       seconds per kill command (default 600); a timeout is a kill
#   MUTANTS_SRC           tree to copy (default: this repository); must be a git work tree
# Kill commands run with GV_FAIL_FAST=1: the test harnesses that honour it
# (tests/node/gvtest.py's Tap, tests/run-tests.sh) stop at the first failure,
# since one failure is a kill and what follows it (often timeouts the mutant
# caused) only costs time.  The unmutated run is not shortened by it.
# Exit status: 0 when every selected mutant was killed, 1 otherwise (a
# survivor, a patch that no longer applies, a mutant that does not build, a
# kill command failing without the mutant), 2 on usage errors.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "${MUTANTS_SRC:-$here/../..}" && pwd)
pdir=$(cd "$src" && cd "${MUTANTS_DIR:-tests/mutants}" && pwd) || exit 2
scratch="${MUTANTS_SCRATCH:-$src/build-mutants}"
case "$scratch" in /*) ;; *) scratch="$src/$scratch" ;; esac
seed_build="${MUTANTS_SEED_BUILD:-build}"
case "$seed_build" in /*) ;; *) seed_build="$src/$seed_build" ;; esac
build_cmd="${MUTANTS_BUILD_CMD:-make -j${JOBS:-2} all}"
targeted=1
[ -n "${MUTANTS_BUILD_CMD:-}" ] && targeted=0
timeout_s="${MUTANTS_TIMEOUT:-600}"
tree="$scratch/tree"
logs="$scratch/logs"

die() { echo "mutants: $*" >&2; exit 2; }

header() { # header <file> <key>: the value of the first "# <key>:" line
    sed -n "s/^# $2:[[:space:]]*//p" "$1" | head -1
}

# ---- which mutants -----------------------------------------------------------
list_only=0
if [ "${1:-}" = --list ]; then list_only=1; shift; fi
all=()
while IFS= read -r f; do all+=("$f"); done < <(cd "$pdir" && ls -1 -- *.patch 2>/dev/null | sort)
[ ${#all[@]} -ne 0 ] || die "no *.patch in $pdir"
sel=()
if [ $# -ne 0 ]; then
    for n in "$@"; do
        n="${n%.patch}"
        [ -f "$pdir/$n.patch" ] || die "no mutant $n ($pdir/$n.patch)"
        sel+=("$n.patch")
    done
else
    sel=("${all[@]}")
fi
if [ -n "${MUTANTS_SUBSET:-}" ]; then
    k="${MUTANTS_SUBSET%/*}" n="${MUTANTS_SUBSET#*/}"
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "MUTANTS_SUBSET=$MUTANTS_SUBSET: want k/n or day/n"
    if [ "$k" = day ]; then
        k=$(( ($(date -u +%s) / 86400) % n + 1 ))
    fi
    [[ "$k" =~ ^[1-9][0-9]*$ ]] && [ "$k" -le "$n" ] ||
        die "MUTANTS_SUBSET=$MUTANTS_SUBSET: k must be 1..n"
    picked=()
    for i in "${!sel[@]}"; do
        if [ $((i % n)) -eq $((k - 1)) ]; then picked+=("${sel[$i]}"); fi
    done
    echo "mutants: subset $k/$n: ${#picked[@]} of ${#sel[@]}"
    sel=("${picked[@]}")
fi
for f in "${sel[@]}"; do
    [ -n "$(header "$pdir/$f" mutant)" ] || die "$f: no '# mutant:' line"
    [ -n "$(header "$pdir/$f" kill)" ] || die "$f: no '# kill:' line"
done

if [ "$list_only" = 1 ]; then
    for f in "${sel[@]}"; do echo "${f%.patch}"; done
    exit 0
fi

# ---- the scratch copy ----------------------------------------------------------
mkdir -p "$scratch" "$logs" || exit 2
files=$(cd "$src" && git ls-files -co --exclude-standard -z | tr '\0' '\n') ||
    die "$src is not a git work tree"
if [ ! -d "$tree" ]; then
    echo "mutants: new scratch copy in $tree"
    mkdir -p "$tree"
    # timestamps kept, so the seeded build/ is as up to date as the source's
    (cd "$src" && printf '%s\n' "$files" | while IFS= read -r p; do
        [ -e "$p" ] || [ -L "$p" ] || continue   # deleted, not yet committed
        printf '%s\0' "$p"; done | tar --null -T - -cf -) | (cd "$tree" && tar -xpf -) ||
        die "cannot copy the tree"
    if [ -d "$seed_build" ]; then
        mkdir -p "$tree/build"
        (cd "$seed_build" && tar --exclude=./test-logs -cf - .) | (cd "$tree/build" && tar -xpf -)
    fi
else
    # refresh by content: unchanged files keep their old mtimes
    changed=0
    while IFS= read -r p; do
        if [ ! -e "$src/$p" ] && [ ! -L "$src/$p" ]; then continue; fi
        if ! cmp -s "$src/$p" "$tree/$p" 2>/dev/null; then
            mkdir -p "$tree/$(dirname "$p")"
            rm -f "$tree/$p"
            cp -P "$src/$p" "$tree/$p" && changed=$((changed + 1))
        fi
    done <<<"$files"
    # files gone from the source go from the copy (build/ is the copy's own)
    keep=$(mktemp)
    printf '%s\n' "$files" | sort >"$keep"
    (cd "$tree" && find . \( -path ./build -o -path ./.git \) -prune -o \( -type f -o -type l \) -print |
        sed 's|^\./||' | sort | comm -23 - "$keep" | while IFS= read -r p; do rm -f "$p"; done)
    rm -f "$keep"
    echo "mutants: scratch copy $tree refreshed ($changed files changed)"
fi
# The copy is a git work tree of its own: tests that find the root with
# `git rev-parse --show-toplevel` (or list files with git) must find the
# copy, never the developer's tree around it.
(cd "$tree" && { [ -d .git ] || git init -q .; } && git add -A >/dev/null 2>&1) ||
    die "cannot make $tree a git work tree"
# the tests look for shared/ beside the repository (openb traces)
if [ -e "$src/../shared" ] && [ ! -e "$scratch/shared" ]; then
    ln -s "$(cd "$src/../shared" && pwd)" "$scratch/shared"
fi

build() { # build <log> [kill command]: everything, or what the kill command runs
    local cmd="$build_cmd" progs
    if [ "$targeted" = 1 ] && [ -n "${2:-}" ]; then
        progs=$(grep -oE '(^|[[:space:]])build/(tests|bin|testbin)/[A-Za-z0-9_.+-]+' <<<"$2" |
            sed 's/^[[:space:]]*//' | sort -u | tr '\n' ' ')
        # a script (tests/.../x.sh, .py) may run any program: then everything
        if [ -n "$progs" ] && ! grep -qE '(^|[[:space:]])tests/[^[:space:]]+\.(sh|py)' \
            <<<"${2//tests\/run-tests.sh/}"; then
            cmd="make -j${JOBS:-2} $progs"
        fi
    fi
    (cd "$tree" && eval "$cmd") >"$1" 2>&1
}

kill_cmd() { # kill_cmd <command> <log>: the command's exit status (124: timed out)
    local t
    t=$(mktemp -d /tmp/gpuvisor-mutant.XXXXXX)
    (cd "$tree" && BUILD=build GV_TEST_TMP="$t" GV_FAIL_FAST=1 timeout -k 10 "$timeout_s" bash -c "$1") \
        </dev/null >"$2" 2>&1
    local rc=$?
    rm -rf "$t"
    return $rc
}

echo "mutants: building the unmutated copy"
if ! build "$logs/baseline.build.log"; then
    tail -20 "$logs/baseline.build.log"
    echo "mutants: the unmutated copy does not build (log: $logs/baseline.build.log)"
    exit 1
fi

# ---- each kill command must pass without its mutant ------------------------------
bad=0
declare -A baseline_ok=()
for f in "${sel[@]}"; do
    # every patch must still apply, checked before anything runs
    if ! (cd "$tree" && patch -p1 --dry-run --silent -f --no-backup-if-mismatch -r - <"$pdir/$f" >/dev/null 2>&1); then
        echo "BROKEN   ${f%.patch}: no longer applies to the tree (update tests/mutants/$f to the moved code)"
        bad=$((bad + 1))
        continue
    fi
    c=$(header "$pdir/$f" kill)
    [ -n "${baseline_ok[$c]:-}" ] && continue
    if kill_cmd "$c" "$logs/${f%.patch}.baseline.log"; then
        baseline_ok[$c]=1
    else
        baseline_ok[$c]=0
        echo "BROKEN   ${f%.patch}: kill command fails without the mutant: $c (log: $logs/${f%.patch}.baseline.log)"
        bad=$((bad + 1))
    fi
done

# ---- the mutants -----------------------------------------------------------------------
killed=0 survived=0
for f in "${sel[@]}"; do
    name="${f%.patch}"
    c=$(header "$pdir/$f" kill)
    [ "${baseline_ok[$c]:-0}" = 1 ] || continue
    (cd "$tree" && patch -p1 --silent -f --no-backup-if-mismatch -r - <"$pdir/$f" >"$logs/$name.patch.log" 2>&1) || {
        echo "BROKEN   $name: patch failed (log: $logs/$name.patch.log)"
        bad=$((bad + 1)); continue
    }
    start=$(date +%s)
    if ! build "$logs/$name.build.log" "$c"; then
        echo "BROKEN   $name: does not build with the mutant (log: $logs/$name.build.log)"
        bad=$((bad + 1))
    else
        kill_cmd "$c" "$logs/$name.kill.log"
        rc=$?
        if [ "$rc" -eq 0 ]; then
            echo "SURVIVED $name: $(header "$pdir/$f" mutant)"
            echo "         kill command passed with the mutant: $c"
            survived=$((survived + 1))
        else
            why="exit $rc"
            [ "$rc" -eq 124 ] && why="timed out after ${timeout_s}s"
            echo "KILLED   $name ($why, $(( $(date +%s) - start ))s)"
            killed=$((killed + 1))
        fi
    fi
    # undo; the reverted files are newer than the mutant's objects, so the
    # next build recompiles them
    (cd "$tree" && patch -p1 -R --silent -f --no-backup-if-mismatch -r - <"$pdir/$f" >>"$logs/$name.patch.log" 2>&1) || {
        echo "mutants: cannot revert $name; removing the scratch copy"
        rm -rf "$tree"
        exit 1
    }
done

echo "mutants: $killed killed, $survived survived, $bad broken (of ${#sel[@]}; logs in $logs)"
[ "$survived" -eq 0 ] && [ "$bad" -eq 0 ]
