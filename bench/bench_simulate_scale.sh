#!/usr/bin/env bash
# Cost of `gpuvisor simulate` as the cluster grows (issue 27, item 5): the
# whole command a user runs (read the CSVs, replay, offline reference,
# report) on openb default and on openb x10 (every node and every pod row
# repeated ten times, names suffixed -x0..-x9), side by side in one run.
# Goal: x10 costs at most 15 times x1.  CPU seconds (user + system) of the
# process: on a shared machine wall time measures the neighbours.  Each
# pair runs ROUNDS times alternated (x1, x10, x1, ...); the median counts.
# For each --reference (full, bounds, none).  Then what the engine's score
# budget (beyond 5,000 nodes; docs/alloc.md, "Score budget") costs in
# packing at x10: unallocated GPU % against --exact, seeds 42-44.
# Reads the trace from
# ../shared/data/openb (GV_OPENB_DIR overrides); says SKIPPED without it.
set -u
bin="${BUILD:-build}/bin/gpuvisor"
openb="${GV_OPENB_DIR:-$(git rev-parse --show-toplevel 2>/dev/null)/../shared/data/openb}"
rounds="${GV_BENCH_ROUNDS:-3}"
if [ ! -f "$openb/openb_node_list_gpu_node.csv" ]; then
    echo "SKIPPED: openb trace not found at $openb (set GV_OPENB_DIR)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in openb_node_list_gpu_node openb_pod_list_default; do
    cp "$openb/$f.csv" "$tmp/x1_$f.csv"
    awk -F, 'NR == 1 { print; next } { row[NR] = $0 }
             END { for (k = 0; k < 10; k++) for (i = 2; i <= NR; i++) {
                       s = row[i]; split(s, f, ","); sub(/^[^,]*/, f[1] "-x" k, s); print s } }' \
        "$openb/$f.csv" >"$tmp/x10_$f.csv"
done
echo "openb default: $(($(wc -l <"$tmp/x1_openb_node_list_gpu_node.csv") - 1)) nodes," \
     "$(($(wc -l <"$tmp/x1_openb_pod_list_default.csv") - 1)) pods; x10:" \
     "$(($(wc -l <"$tmp/x10_openb_node_list_gpu_node.csv") - 1)) nodes," \
     "$(($(wc -l <"$tmp/x10_openb_pod_list_default.csv") - 1)) pods"
echo "command: gpuvisor simulate --nodes N --pods P --policy fgd --seed 42 --reference R"
echo "CPU seconds (user+sys) of the whole command, median of $rounds alternated runs"
echo

# cpu_of <scale> <reference>: CPU seconds of one run; the summary line kept
cpu_of() {
    local TIMEFORMAT='%U %S' t
    t=$( { time "$bin" simulate --nodes "$tmp/$1_openb_node_list_gpu_node.csv" \
            --pods "$tmp/$1_openb_pod_list_default.csv" --policy fgd --seed 42 \
            --reference "$2" >"$tmp/out" 2>/dev/null; } 2>&1) || return 1
    tail -1 "$tmp/out" >"$tmp/last_$1_$2"
    awk '{ printf "%.2f", $1 + $2 }' <<<"$t"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-10s %-28s %-28s %8s  %s\n' reference "x1 CPU s (runs)" "x10 CPU s (runs)" ratio goal
status=0
for ref in full bounds none; do
    a="" b=""
    for r in $(seq "$rounds"); do
        a="$a $(cpu_of x1 "$ref")" || exit 1
        b="$b $(cpu_of x10 "$ref")" || exit 1
    done
    ma=$(median <<<"$a") mb=$(median <<<"$b")
    ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.1f", (a > 0 ? b / a : 0) }')
    goal=$(awk -v r="$ratio" 'BEGIN { print (r <= 15 ? "meets <= 15x" : "MISSES <= 15x") }')
    printf '%-10s %-28s %-28s %7sx  %s\n' "$ref" "$ma ($(echo $a))" "$mb ($(echo $b))" "$ratio" "$goal"
    echo "           x1:  $(cat "$tmp/last_x1_$ref")"
    echo "           x10: $(cat "$tmp/last_x10_$ref")"
done

echo
echo "packing at x10 (unallocated GPU % at 100 % arrived, --reference none): score budget vs --exact"
printf '%-6s %10s %10s %8s\n' seed budget exact diff
seeds="${GV_BENCH_PACKING_SEEDS:-42 43 44}"
for seed in $seeds; do
    u=""
    for mode in "" --exact; do
        "$bin" simulate --nodes "$tmp/x10_openb_node_list_gpu_node.csv" \
            --pods "$tmp/x10_openb_pod_list_default.csv" --policy fgd --seed "$seed" \
            --reference none $mode >"$tmp/out" 2>/dev/null || exit 1
        u="$u $(tail -1 "$tmp/out" | sed -n 's/.*mean=\([0-9.]*\).*/\1/p')"
    done
    set -- $u
    printf '%-6s %10s %10s %+8.2f\n' "$seed" "$1" "$2" "$(awk -v a="$1" -v b="$2" 'BEGIN { print a - b }')"
done
exit $status
