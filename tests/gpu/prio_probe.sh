#!/usr/bin/env bash
# Task priority on a real GPU, taken apart (docs/compute-share.md, "Priority on
# a real GPU").  For each interposer build named in GV_PRIO_LIBS
# ("name=path name=path ...", default: this build's), spin kernels of
# tests/gpu/gpu_burn.cu through `gpuvisor run --lib`:
#
#   arrival   a level-2 hog runs alone for 1 s, then a level-0 tenant starts and
#             runs SECS (the make test-gpu case): % of its solo throughput and
#             the milliseconds it lost, for SECS and 3*SECS (a loss that does
#             not grow with the run is a start-up cost, not a steady leak);
#             a trace of the first bins shows where
#   steady    the level-0 tenant first, the hog arriving 1 s later
#   duty      the level-0 tenant at gpucores 50 beside the hog, both measured
#             over the same interval: what it keeps of its solo at 50, and the
#             hog's share of the GPU time the level-0 tenant leaves, for 1 ms
#             and 10 ms kernels
#
# SM clocks (nvidia-smi) are sampled per case.  Prints one line per figure.
# Needs: a GPU, nvcc, a built gpuvisor (make).  Not part of make test-gpu's
# pass/fail: it reports; run-gpu-tests.sh asserts.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
GV=$PWD/$BUILD/bin/gpuvisor
DEV=${GV_GPU_DEVICE:-0}
SECS=${GV_GPU_SECONDS:-3}
LIBS=${GV_PRIO_LIBS:-new=$PWD/$BUILD/lib/libgpuvisor.so}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gv-prio.XXXXXX")
trap 'kill ${SMI:-} 2>/dev/null; rm -rf "$TMP"' EXIT
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT CUDA_TASK_PRIORITY \
    GPU_CORE_UTILIZATION_POLICY GPUVISOR_LIMITS_FILE
export GPUVISOR_NODE_DIR=$TMP/node GPUVISOR_RUN_DIR=$TMP/run
mkdir -p "$GPUVISOR_NODE_DIR" "$GPUVISOR_RUN_DIR"

BURN=$TMP/gpu_burn
"$NVCC" -O2 -std=c++17 -o "$BURN" tests/gpu/gpu_burn.cu || { echo "nvcc failed"; exit 1; }
. tests/gpu/gpu_lib.sh # field, ratio, isnum
trace() { sed -n 's/.*trace=\([0-9,]*\).*/\1/p' <<<"$1" | cut -d, -f1-12; }
# lost ms: what the run would have done at the solo rate, minus what it did
lost() { awk -v r="$1" -v s="$2" -v t="$3" 'BEGIN { if (s > 0) printf "%.0f", 1000 * t * (1 - r / s); else print "nan" }'; }
smi_on() {
    nvidia-smi -i "$DEV" --query-gpu=clocks.sm --format=csv,noheader,nounits -lms 100 >"$TMP/smi" 2>/dev/null &
    SMI=$!
}
smi_off() { # mean SM clock (MHz) over the samples
    kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null; SMI=
    awk '{ s += $1; c++ } END { if (c) printf "%.0f", s / c; else print "nan" }' "$TMP/smi"
}
burn() { # burn LIB [run options] -- [gpu_burn options]
    local lib=$1; shift
    local opts=()
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    "$GV" run --device "$DEV" --lib "$lib" "${opts[@]}" -- "$BURN" "$@"
}
at() { echo $(($(date +%s) + $1)); }

echo "GPU $DEV: $(nvidia-smi -i "$DEV" --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader)"
base=$(field rate "$(CUDA_VISIBLE_DEVICES=$DEV "$BURN" --seconds "$SECS")")
echo "native unlimited: $base kernels/s"

for spec in $LIBS; do
    name=${spec%%=*} lib=${spec#*=}
    smi_on
    solo=$(burn "$lib" --priority 0 -- --seconds "$SECS" --trace-ms 100)
    sclk=$(smi_off)
    srate=$(field rate "$solo")
    echo "[$name] solo level 0: $srate kernels/s (SM clock $sclk MHz), trace/100ms $(trace "$solo")"
    for secs in "$SECS" "$SECS" $((SECS * 3)); do
        smi_on
        burn "$lib" --priority 2 -- --seconds $((secs + 5)) >"$TMP/low" &
        low=$!
        sleep ${GV_PRIO_SLEEP:-1}
        high=$(burn "$lib" --priority 0 -- --seconds "$secs" --trace-ms 100)
        wait $low
        clk=$(smi_off)
        r=$(field rate "$high")
        echo "[$name] arrival, ${secs}s: level 0 keeps $(ratio "$r" "$srate")% of solo, lost $(lost "$r" "$srate" "$(field seconds "$high")") ms (SM clock $clk MHz), trace/100ms $(trace "$high")"
    done
    smi_on
    burn "$lib" --priority 0 -- --seconds $((SECS + 2)) >"$TMP/high" &
    high=$!
    sleep ${GV_PRIO_SLEEP:-1}
    burn "$lib" --priority 2 -- --seconds "$SECS" >"$TMP/low"
    wait $high
    clk=$(smi_off)
    r=$(field rate "$(cat "$TMP/high")")
    echo "[$name] steady (hog arrives 1 s later): level 0 keeps $(ratio "$r" "$srate")% of solo; hog $(ratio "$(field rate "$(cat "$TMP/low")")" "$base")% of unlimited (SM clock $clk MHz)"
    for k in 1000 10000; do
        s50=$(field rate "$(burn "$lib" --priority 0 --gpucores 50 -- --seconds "$SECS" --kernel-us "$k")")
        kb=$(awk -v b="$base" -v k="$k" 'BEGIN { print b * 1000 / k }')
        t=$(at 6)
        burn "$lib" --priority 0 --gpucores 50 -- --seconds "$SECS" --kernel-us "$k" --start-at "$t" >"$TMP/high" &
        high=$!
        burn "$lib" --priority 2 -- --seconds "$SECS" --kernel-us "$k" --start-at "$t" >"$TMP/low"
        wait $high
        h=$(ratio "$(field rate "$(cat "$TMP/high")")" "$kb")
        l=$(ratio "$(field rate "$(cat "$TMP/low")")" "$kb")
        left=$(awk -v h="$h" 'BEGIN { printf "%.1f", 100 - h }')
        echo "[$name] duty, ${k}us kernels: level 0 at gpucores 50 keeps $(ratio "$(field rate "$(cat "$TMP/high")")" "$s50")% of its solo at 50 ($h% of unlimited); the hog gets $l% of unlimited = $(ratio "$l" "$left")% of the $left% left"
    done
done
