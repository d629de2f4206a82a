#!/usr/bin/env bash
# gpuvisor simulate on the openb traces (Alibaba GPU cluster trace v2023):
# replay speed with fgd, then quality for every bundled pod list x every
# policy, mean over seeds 42-51, 130 % inflation.  Reads the trace from
# ../shared/data/openb beside the repository (GV_OPENB_DIR overrides) and
# says so when it is absent.  Published reference (FGD paper artifact,
# default trace): fgd 4.77 +- 0.11, bestfit 7.14, random 13.70 % unallocated.
set -u
bin="${BUILD:-build}/bin/gpuvisor"
openb="${GV_OPENB_DIR:-$(git rev-parse --show-toplevel 2>/dev/null)/../shared/data/openb}"
nodes="$openb/openb_node_list_gpu_node.csv"
if [ ! -f "$nodes" ]; then
    echo "SKIPPED: openb trace not found at $openb (set GV_OPENB_DIR)"
    exit 0
fi
echo "trace directory: $openb"
echo
echo "== speed: openb default, fgd, one replay per seed (s/seed column)"
cmd="$bin simulate --nodes $nodes --pods $openb/openb_pod_list_default.csv --policy fgd --seeds 42-51"
echo "\$ $cmd"
$cmd 2>/dev/null || exit 1
echo
for pods in "$openb"/openb_pod_list_*.csv; do
    name=$(basename "$pods" .csv)
    echo "== quality: ${name#openb_pod_list_}"
    cmd="$bin simulate --nodes $nodes --pods $pods --policy all --seeds 42-51"
    echo "\$ $cmd"
    $cmd 2>/dev/null || exit 1
    echo
done
