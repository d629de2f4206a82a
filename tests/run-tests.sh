#!/usr/bin/env bash
# Runs every test program/script given as arguments and totals their results.
#
# Each test speaks TAP on stdout ("ok N - name", "not ok N - name",
# "ok N - name # SKIP reason"); cmocka programs do so via
# CMOCKA_MESSAGE_OUTPUT=TAP, and report a skip() as "not ok N # SKIP <test>",
# which counts as a skip, not a failure (its reason is the "# ..." line the
# test printed just before, if any).
# A test that exits non-zero without reporting a failure (a crash, a
# sanitizer abort) counts as one failure, so nothing is lost silently.
#
# Every skip is listed with its reason before the total.  Skips are allowed
# unless one of these is set (CI sets them, see .ci/run):
#   GV_NO_SKIPS=1            every skip counts as a failure
#   GV_EXPECTED_SKIPS=file   a skip counts as a failure unless its line
#                            "<test file>: <name>: <reason>" matches one of the
#                            extended regexes in file (one a line, # comments)
# GV_TEST_LOGDIR: where logs go (default $BUILD/test-logs).
# GV_FAIL_FAST=1: stop after the first test that fails (tests/mutants/run.sh
# sets it: any failure kills a mutant); tests/node/gvtest.py honours it too.
# GV_TEST_FAILURES: if set, one line per failed case is appended to this file
# ("<test file>: <case name>"); `make test-repeat` totals them across runs.
#
# The last line is the machine-readable total: "N passed, N failed, N skipped".
set -u
export CMOCKA_MESSAGE_OUTPUT=TAP
export BUILD="${BUILD:-build}"
# Scratch space: ours unless the caller gave one (then it is the caller's to
# remove: a runner run inside a test must not delete its parent's files).
own_tmp=0
if [ -z "${GV_TEST_TMP:-}" ]; then
    GV_TEST_TMP=$(mktemp -d /tmp/gpuvisor-test.XXXXXX)
    own_tmp=1
fi
export GV_TEST_TMP
logdir="${GV_TEST_LOGDIR:-$BUILD/test-logs}"
mkdir -p "$logdir"

allow_file="${GV_EXPECTED_SKIPS:-}"
strict=0
if [ "${GV_NO_SKIPS:-0}" = 1 ] || [ -n "$allow_file" ]; then
    strict=1
fi
if [ -n "$allow_file" ] && [ ! -r "$allow_file" ]; then
    echo "run-tests: GV_EXPECTED_SKIPS=$allow_file is not readable" >&2
    exit 2
fi

# A TAP skip directive: "# SKIP" (case-insensitive, per TAP) after the number.
skip_re='^(not )?ok [0-9]+.*#[[:space:]]*[Ss][Kk][Ii][Pp]'

# Prints "<case>: <reason>" for every skip in a log.
skip_reasons() {
    awk '
        /^(not )?ok [0-9]+.*#[[:space:]]*[Ss][Kk][Ii][Pp]/ {
            line = $0
            sub(/^(not )?ok [0-9]+[[:space:]]*(-[[:space:]]*)?/, "", line)
            i = match(line, /#[[:space:]]*[Ss][Kk][Ii][Pp]/)
            desc = substr(line, 1, i - 1); why = substr(line, i + RLENGTH)
            sub(/[[:space:]]+$/, "", desc); sub(/^[[:space:]]+/, "", why)
            # cmocka: "not ok N # SKIP <test>" and the reason, if any, on the
            # "# ..." line printed before it
            if (desc == "" && prev ~ /^# / && prev !~ /^# *(not )?ok /) {
                desc = why; why = substr(prev, 3)
                sub(/^[Ss][Kk][Ii][Pp]:? */, "", why)
            }
            if (desc == "") desc = "(unnamed)"
            if (why == "") why = "(no reason given)"
            print desc ": " why
        }
        { prev = $0 }' "$1"
}

# Prints the name of every failed case in a log (number dropped, so the same
# case in another run gives the same line).
failed_cases() {
    grep -E '^not ok' "$1" | grep -vE "$skip_re" |
        sed -E 's/^not ok [0-9]*[[:space:]]*(-[[:space:]]*)?//'
}

pass=0 fail=0 skip=0
failed_names=()
skip_lines=()
for t in "$@"; do
    name=$(basename "$t")
    log="$logdir/$name.log"
    start=$(date +%s.%N)
    # stdin closed: a test must never wait on the terminal (CI has none)
    "$t" </dev/null >"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    s=$(grep -cE "$skip_re" "$log")
    p=$(grep -E '^ok [0-9]+' "$log" | grep -cvE "$skip_re")
    f=$(grep -E '^not ok [0-9]+' "$log" | grep -cvE "$skip_re")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "not ok - $name exited with status $rc without reporting a failure" >>"$log"
    fi
    if [ $((p + f + s)) -eq 0 ]; then
        f=1
        echo "not ok - $name reported no test results" >>"$log"
    fi
    unexpected=0
    if [ "$s" -ne 0 ]; then
        while IFS= read -r r; do
            entry="$t: $r"
            if [ "$strict" = 1 ] &&
                { [ -z "$allow_file" ] ||
                    ! printf '%s\n' "$entry" | grep -qE -f <(grep -vE '^[[:space:]]*(#|$)' "$allow_file"); }; then
                skip_lines+=("UNEXPECTED $entry")
                echo "not ok - unexpected skip: $r" >>"$log"
                unexpected=$((unexpected + 1))
            else
                skip_lines+=("$entry")
            fi
        done < <(skip_reasons "$log")
        f=$((f + unexpected)); s=$((s - unexpected))
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    printf '%-40s %4d passed %3d failed %3d skipped  (%.1fs)\n' "$name" "$p" "$f" "$s" \
        "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')"
    if [ "$f" -ne 0 ]; then
        failed_names+=("$name")
        # each failure with the diagnostics printed right after it, and the
        # message cmocka prints before it ("ERROR: ..." from fail_msg: CI's
        # excerpt showed only "error: Failure!" without it)
        awk -v skip="$skip_re" '
            /^not ok/ && $0 !~ skip { if (e != "") print e; e = ""; print; k = 8; next }
            /^not ok/ || /^ok / { e = "" }
            /^ERROR: / { e = substr($0, 1, 400) }
            /^# / && k > 0 { print; k--; next }
            { k = 0 }' "$log" | head -40 | sed 's/^/    /'
        echo "    (full log: $log)"
        if [ -n "${GV_TEST_FAILURES:-}" ]; then
            failed_cases "$log" | sed "s|^|$t: |" >>"$GV_TEST_FAILURES"
        fi
        [ "${GV_FAIL_FAST:-}" = 1 ] && break
    fi
done
if [ "$own_tmp" = 1 ]; then
    rm -rf "$GV_TEST_TMP"
fi
if [ ${#skip_lines[@]} -ne 0 ]; then
    echo "skipped (${#skip_lines[@]}):"
    printf '    %s\n' "${skip_lines[@]}"
fi
if [ ${#failed_names[@]} -ne 0 ]; then
    echo "failing: ${failed_names[*]}"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
