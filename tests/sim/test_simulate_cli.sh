#!/usr/bin/env bash
# gpuvisor simulate end to end: the README quickstart, outputs, bad input and
# usage errors (exit 2, nothing written), Kubernetes dumps, and the real
# openb trace when it sits beside the repository (GV_OPENB_DIR overrides).
set -u
bin="$BUILD/bin/gpuvisor"
tmp="${GV_TEST_TMP:-/tmp}/simulate.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
n=0
check() { # check <description> <command...>
    n=$((n + 1)); local d=$1; shift
    if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fi
}
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }

# The README quickstart: no arguments but --plot, built-in synthetic cluster.
(cd "$tmp" && "$OLDPWD/$bin" simulate --plot simulate.svg >quick.out 2>quick.err)
rc=$?
check "quickstart exits 0" test "$rc" -eq 0
check "quickstart prints every policy" bash -c "for p in binpack spread bestfit fgd; do grep -q \"^\$p \" '$tmp/quick.out' || exit 1; done"
check "quickstart last line is the machine-readable summary" bash -c \
    "tail -1 '$tmp/quick.out' | grep -Eq '^unallocated_pct_at_100 policy=fgd mean=[0-9]+\.[0-9]{2} sd=[0-9]+\.[0-9]{2} seeds=10$'"
check "quickstart writes an SVG chart (two panels x (ideal + 4 policies))" bash -c "head -c 5 '$tmp/simulate.svg' | grep -q '<?xml' && grep -c '<polyline' '$tmp/simulate.svg' | grep -qx 10"
check "no temp files left" bash -c "! ls '$tmp' | grep -q tmp"

"$bin" simulate --synthetic nodes=30 --policy fgd --seed 7 --csv "$tmp/a.csv" >"$tmp/a.out" 2>/dev/null
check "one policy, one seed, CSV written" bash -c \
    "head -1 '$tmp/a.csv' | grep -qx 'policy,seed,arrived_pct,allocated_pct' && [ \$(wc -l <'$tmp/a.csv') -eq 132 ] && grep -q 'seeds=1$' '$tmp/a.out'"
"$bin" simulate --synthetic nodes=30 --policy fgd --seed 7 >"$tmp/b.out" 2>/dev/null
check "same seed, same result" bash -c "diff <(grep -v s/seed '$tmp/a.out' | cut -c1-100) <(grep -v s/seed '$tmp/b.out' | cut -c1-100) >/dev/null"
"$bin" simulate --synthetic nodes=30 --policy fgd --seed 7 --shuffle-nodes >"$tmp/s1.out" 2>/dev/null
rc=$?
"$bin" simulate --synthetic nodes=30 --policy fgd --seed 7 --shuffle-nodes >"$tmp/s2.out" 2>/dev/null
check "--shuffle-nodes runs and repeats for the same seed" bash -c \
    "[ $rc -eq 0 ] && grep -q 'seeds=1$' '$tmp/s1.out' && diff <(grep -v s/seed '$tmp/s1.out' | cut -c1-100) <(grep -v s/seed '$tmp/s2.out' | cut -c1-100) >/dev/null"
# --exact: below 5,000 nodes the engine is exact anyway, so the same report
# (the budget's own effect: tests/sim/test_sim.c, test_exact_turns_the_budget_off)
"$bin" simulate --synthetic nodes=30 --policy fgd --seed 7 --exact >"$tmp/x.out" 2>/dev/null
rc=$?
check "--exact runs, and a small cluster places as without it" bash -c \
    "[ $rc -eq 0 ] && grep -q 'seeds=1$' '$tmp/x.out' && diff <(grep -v s/seed '$tmp/a.out' | cut -c1-100) <(grep -v s/seed '$tmp/x.out' | cut -c1-100) >/dev/null"

# Priorities: a high-priority share preempts the rest; bad shares are refused.
"$bin" simulate --synthetic nodes=20 --seeds 1 --policy fgd --high-priority 25 >"$tmp/hp.out" 2>/dev/null
check "--high-priority adds the preemption table" bash -c \
    "[ $? -eq 0 ] && grep -q '^priorities (high-priority pods' '$tmp/hp.out' && grep -q '^fgd ' '$tmp/hp.out'"
"$bin" simulate --synthetic nodes=20 --seeds 1 --policy fgd --defrag-every 100 --churn load=150,lifetimes=2 \
    --high-priority 50 >"$tmp/hpc.out" 2>/dev/null; rc=$?
check "--high-priority with --defrag-every reports how long high-priority pods wait" bash -c \
    "[ $rc -eq 0 ] && [ \$(grep -c '^high_wait policy=fgd defrag=\(none\|periodic\) mean=[0-9.]* p95=[0-9.]* p99=[0-9.]* ' '$tmp/hpc.out') -eq 2 ] && grep -q '^  high priority: [0-9]* arrived' '$tmp/hpc.out'"
"$bin" simulate --synthetic nodes=10 --high-priority 150 >"$tmp/hpbad.out" 2>"$tmp/hpbad.err"
check "--high-priority outside [0, 100] is refused" bash -c \
    "[ $? -ne 0 ] && grep -q 'percentage in \\[0, 100\\]' '$tmp/hpbad.err' && [ ! -s '$tmp/hpbad.out' ]"

printf 'sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\n' >"$tmp/pn.csv"
{ echo 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,priority'
  for i in 0 1 2 3 4 5 6 7 8 9 10 11; do echo "p$i,1000,1024,1,1000,,$([ $((i % 3)) -eq 2 ] && echo 1000 || echo 0)"; done; } >"$tmp/pp.csv"
"$bin" simulate --nodes "$tmp/pn.csv" --pods "$tmp/pp.csv" --seed 2 --policy fgd --inflate 3 >"$tmp/pp.out" 2>/dev/null
check "a priority column preempts: the high pod evicts one of priority 0" bash -c \
    "[ $? -eq 0 ] && awk '\$1 == \"fgd\" && NF == 7 && \$4 == \"1.0\" && \$6 == \"1.0\" { ok = 1 } END { exit !ok }' '$tmp/pp.out'"
printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,priority\np0,1,1,1,500,-5\n' >"$tmp/ppbad.csv"
"$bin" simulate --nodes "$tmp/pn.csv" --pods "$tmp/ppbad.csv" --seed 1 >/dev/null 2>"$tmp/ppbad.err"
check "a negative priority is refused with file, line and field" bash -c \
    "[ $? -eq 2 ] && grep -q 'ppbad.csv:2: field priority' '$tmp/ppbad.err'"

# Bad input: exit 2, message names file, line and field, nothing written.
printf 'sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\n' >"$tmp/nodes.csv"
printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,oops,1,500\n' >"$tmp/bad.csv"
"$bin" simulate --nodes "$tmp/nodes.csv" --pods "$tmp/bad.csv" --plot "$tmp/bad.svg" --csv "$tmp/bad.out.csv" >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
check "bad pod file exits 2" test "$rc" -eq 2
check "error names file, line and field" grep -q "bad.csv:2: field memory_mib" "$tmp/bad.err"
check "no partial output on bad input" bash -c "[ ! -e '$tmp/bad.svg' ] && [ ! -e '$tmp/bad.out.csv' ] && [ ! -s '$tmp/bad.out' ]"
: >"$tmp/empty.csv"
"$bin" simulate --nodes "$tmp/empty.csv" --pods "$tmp/bad.csv" >/dev/null 2>"$tmp/empty.err"
check "empty file exits 2 and says so" bash -c "[ $? -eq 2 ] && grep -q 'empty.csv: empty file' '$tmp/empty.err'"
printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1,1,1,500,A100\n' >"$tmp/spec.csv"
"$bin" simulate --nodes "$tmp/nodes.csv" --pods "$tmp/spec.csv" >/dev/null 2>"$tmp/spec.err"
check "unknown GPU model in a constraint exits 2" bash -c "[ $? -eq 2 ] && grep -q 'spec.csv:2: field gpu_spec: unknown GPU model' '$tmp/spec.err'"
"$bin" simulate --nodes "$tmp/missing.csv" --pods "$tmp/bad.csv" >/dev/null 2>"$tmp/missing.err"
check "missing file exits 2" bash -c "[ $? -eq 2 ] && grep -q 'missing.csv: cannot open' '$tmp/missing.err'"

# Input the way users have it.
"$bin" simulate --synthetic nodes=20 --policy fgd --seeds 42 >"$tmp/one.out" 2>/dev/null
check "--seeds with a single seed is accepted" bash -c "[ $? -eq 0 ] && grep -q 'seeds=1$' '$tmp/one.out'"
check "every report shows the offline oracle and the lower bound" bash -c \
    "grep -q '^oracle ' '$tmp/one.out' && grep -q '^bound ' '$tmp/one.out' && grep -q 'offline reference' '$tmp/one.out'"
"$bin" simulate --synthetic nodes=20 --policy fgd --seeds 42 --reference bounds >"$tmp/rb.out" 2>/dev/null
check "--reference bounds: the same bounds, no oracle, same placements" bash -c \
    "[ $? -eq 0 ] && grep -q '^oracle   not computed' '$tmp/rb.out' && diff <(grep -E '^(bound|capacity) ' '$tmp/one.out' | cut -c1-80) <(grep -E '^(bound|capacity) ' '$tmp/rb.out' | cut -c1-80) >/dev/null && diff <(grep '^fgd ' '$tmp/one.out' | cut -c1-100) <(grep '^fgd ' '$tmp/rb.out' | cut -c1-100) >/dev/null && [ \"\$(tail -1 '$tmp/one.out')\" = \"\$(tail -1 '$tmp/rb.out')\" ]"
"$bin" simulate --synthetic nodes=20 --policy fgd --seeds 42 --reference none >"$tmp/rn.out" 2>/dev/null
check "--reference none: no offline reference, same summary line" bash -c \
    "[ $? -eq 0 ] && ! grep -Eq 'offline reference|^oracle |^bound ' '$tmp/rn.out' && [ \"\$(tail -1 '$tmp/one.out')\" = \"\$(tail -1 '$tmp/rn.out')\" ]"
"$bin" simulate --synthetic nodes=20 --reference some >"$tmp/rx.out" 2>"$tmp/rx.err"
check "--reference with another word is a usage error" bash -c \
    "[ $? -eq 2 ] && grep -q 'full, bounds or none' '$tmp/rx.err' && [ ! -s '$tmp/rx.out' ]"
"$bin" simulate --synthetic nodes=20 --policy fgd --seed 1 --csv "$tmp/no/such/dir/x.csv" >"$tmp/unw.out" 2>"$tmp/unw.err"
rc=$?
check "unwritable --csv fails before the replay (exit 1, names the path, no report)" bash -c \
    "[ $rc -eq 1 ] && grep -q 'no/such/dir/x.csv: cannot write there' '$tmp/unw.err' && [ ! -s '$tmp/unw.out' ]"
mkdir -p "$tmp/adir"
"$bin" simulate --synthetic nodes=20 --policy fgd --seed 1 --plot "$tmp/adir" >"$tmp/dir.out" 2>"$tmp/dir.err"
rc=$?
check "a directory as --plot fails before the replay" bash -c \
    "[ $rc -eq 1 ] && grep -q 'adir: is a directory' '$tmp/dir.err' && [ ! -s '$tmp/dir.out' ] && [ -z \"\$(ls '$tmp/adir')\" ]"
printf '\xef\xbb\xbfsn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\n' >"$tmp/bom_nodes.csv"
printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,num_gpu\np0,4000,1,1,500,1\n' >"$tmp/dup.csv"
"$bin" simulate --nodes "$tmp/bom_nodes.csv" --pods "$tmp/dup.csv" >/dev/null 2>"$tmp/dup.err"
check "BOM accepted; duplicated column refused naming both" bash -c \
    "[ $? -eq 2 ] && grep -q 'dup.csv:1: column \"num_gpu\" appears twice (columns 4 and 6)' '$tmp/dup.err'"
if command -v script >/dev/null 2>&1; then
    GV_SIMULATE_PROGRESS_AFTER=0 script -qec "'$bin' simulate --synthetic nodes=20 --policy fgd --seeds 1-3" /dev/null >"$tmp/tty.out" 2>&1
    check "progress bar redrawn on a terminal" bash -c "grep -q \$'\\rsimulate \\[' '$tmp/tty.out' && grep -q '6/6 runs' '$tmp/tty.out'"
    GV_SIMULATE_PROGRESS_AFTER=0 "$bin" simulate --synthetic nodes=20 --policy fgd --seeds 1-3 >/dev/null 2>"$tmp/notty.err"
    check "no bar when stderr is not a terminal (one line per run)" bash -c \
        "! grep -q \$'\\r' '$tmp/notty.err' && grep -q 'seed 3 done (6/6' '$tmp/notty.err'"
else
    skip "script(1) not installed: progress bar on a terminal"
    skip "script(1) not installed: no bar off a terminal"
fi

# Usage errors.
for args in "--policy worst" "--seeds 9-3" "--seed x" "--inflate 0.5" "--nodes $tmp/nodes.csv" \
    "--synthetic nodes=5 --nodes a --pods b" "--synthetic bogus=1" "--frobnicate" "extra"; do
    # shellcheck disable=SC2086
    "$bin" simulate $args >/dev/null 2>&1
    check "usage error exits 2: $args" test $? -eq 2
done
check "--help exits 0 and documents the flags" bash -c "'$bin' simulate --help | grep -q -- '--inflate'"

# Kubernetes JSON dumps.
cat >"$tmp/nodes.json" <<'EOF'
{"apiVersion":"v1","kind":"List","items":[
 {"metadata":{"name":"g1","labels":{"nvidia.com/gpu.product":"Tesla-T4","nvidia.com/gpu.memory":"15360"}},
  "status":{"capacity":{"cpu":"32","memory":"128Gi","nvidia.com/gpu":"4"}}},
 {"metadata":{"name":"g2","labels":{"nvidia.com/gpu.product":"A100-SXM4-80GB","nvidia.com/gpu.memory":"81920"}},
  "status":{"capacity":{"cpu":"64","memory":"512Gi","nvidia.com/gpu":"8"}}}]}
EOF
cat >"$tmp/pods.json" <<'EOF'
{"apiVersion":"v1","kind":"List","items":[
 {"metadata":{"name":"infer","namespace":"a","uid":"u1"},"spec":{"containers":[{"name":"m",
  "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"8000","nvidia.com/gpucores":"30"},"requests":{"cpu":"2"}}}]}},
 {"metadata":{"name":"train","namespace":"a","uid":"u2","annotations":{"nvidia.com/use-gputype":"a100"}},
  "spec":{"containers":[{"name":"m","resources":{"limits":{"nvidia.com/gpu":"4","nvidia.com/gpucores":"100"},"requests":{"cpu":"16"}}}]}}]}
EOF
"$bin" simulate --nodes "$tmp/nodes.json" --pods "$tmp/pods.json" --seeds 1-3 >"$tmp/k8s.out" 2>"$tmp/k8s.err"
check "Kubernetes JSON dumps replay" bash -c "[ $? -eq 0 ] && grep -q 'seeds=3$' '$tmp/k8s.out' && grep -q '2 nodes, 12 GPUs, 2 pods' '$tmp/k8s.out'"

# A live cluster in one dump (kubectl get nodes,pods -A -o json).
cat >"$tmp/cluster.json" <<'EOF'
{"apiVersion":"v1","kind":"List","items":[
 {"kind":"Pod","metadata":{"name":"infer","namespace":"a","uid":"u1"},"spec":{"containers":[{"name":"m",
  "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpucores":"30"},"requests":{"cpu":"2"}}}]},"status":{"phase":"Running"}},
 {"kind":"Pod","metadata":{"name":"web","namespace":"a","uid":"u3"},"spec":{"containers":[{"name":"m",
  "resources":{"requests":{"cpu":"1"}}}]},"status":{"phase":"Pending"}},
 {"kind":"Node","metadata":{"name":"g1","labels":{"nvidia.com/gpu.product":"Tesla-T4","nvidia.com/gpu.memory":"15360"}},
  "status":{"allocatable":{"cpu":"32","memory":"128Gi","nvidia.com/gpu":"4"}}}]}
EOF
"$bin" simulate --from-cluster "$tmp/cluster.json" --seeds 1-2 >"$tmp/dump.out" 2>"$tmp/dump.err"
check "--from-cluster replays a kubectl get nodes,pods dump" bash -c \
    "[ $? -eq 0 ] && grep -q 'cluster dump cluster.json (1 nodes, 4 GPUs, 2 pods)' '$tmp/dump.out'"
"$bin" simulate --from-cluster "$tmp/pods.json" >/dev/null 2>"$tmp/dump2.err"
check "--from-cluster without Node items exits 2 and says how to dump" bash -c \
    "[ $? -eq 2 ] && grep -q 'no Node items' '$tmp/dump2.err'"
"$bin" simulate --from-cluster "$tmp/cluster.json" --nodes "$tmp/nodes.json" --pods "$tmp/pods.json" >/dev/null 2>&1
check "--from-cluster with --nodes is a usage error" test $? -eq 2

# --topology: the interconnect section, the summary still last; a bad spec is a usage error.
"$bin" simulate --synthetic nodes=40 --policy all --seed 3 --topology nvlink=2,pcie=4 >"$tmp/topo.out" 2>/dev/null
check "--topology exits 0" test $? -eq 0
check "--topology reports how multi-GPU containers' GPUs are joined" bash -c \
    "grep -q 'one NVLink island' '$tmp/topo.out' && grep -Eq '^multi_gpu_tightest_set_pct policy=fgd pct=[0-9.]+ containers=[0-9.]+$' '$tmp/topo.out'"
check "--topology keeps the summary line last" bash -c "tail -1 '$tmp/topo.out' | grep -q '^unallocated_pct_at_100 policy=fgd'"
check "no --topology, no interconnect section" bash -c "! grep -q 'NVLink' '$tmp/a.out'"
"$bin" simulate --synthetic nodes=40 --seed 3 --topology nvlink=2,pcie --plot "$tmp/topo.svg" >"$tmp/topo-bad.out" 2>"$tmp/topo-bad.err"
check "bad --topology exits 2 with the expected form" bash -c \
    "[ $? -eq 2 ] && grep -q 'want nvlink=N,pcie=M' '$tmp/topo-bad.err' && [ ! -e '$tmp/topo.svg' ] && [ ! -s '$tmp/topo-bad.out' ]"

# The real openb trace.
openb="${GV_OPENB_DIR:-$(git rev-parse --show-toplevel 2>/dev/null)/../shared/data/openb}"
if [ -f "$openb/openb_node_list_gpu_node.csv" ] && [ -f "$openb/openb_pod_list_default.csv" ]; then
    out=$("$bin" simulate --nodes "$openb/openb_node_list_gpu_node.csv" \
        --pods "$openb/openb_pod_list_default.csv" --policy fgd --seed 42 2>/dev/null)
    fgd=$(echo "$out" | tail -1 | sed -n 's/.* mean=\([0-9.]*\) .*/\1/p')
    out=$("$bin" simulate --nodes "$openb/openb_node_list_gpu_node.csv" \
        --pods "$openb/openb_pod_list_default.csv" --policy bestfit --seed 42 2>/dev/null)
    bf=$(echo "$out" | tail -1 | sed -n 's/.* mean=\([0-9.]*\) .*/\1/p')
    check "openb default: trace shape (1213 nodes, 6212 GPUs, 8152 pods)" bash -c "echo '$out' | grep -q '1213 nodes, 6212 GPUs, 8152 pods'"
    check "openb default seed 42: fgd ($fgd%) leaves less unallocated than bestfit ($bf%)" \
        awk -v f="$fgd" -v b="$bf" 'BEGIN { exit !(f != "" && b != "" && f + 0 < b + 0) }'
else
    skip "openb trace not found at $openb (set GV_OPENB_DIR)"
    skip "openb trace not found at $openb (set GV_OPENB_DIR)"
fi
echo "1..$n"
