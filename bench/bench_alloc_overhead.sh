#!/usr/bin/env bash
# Allocation + free round trip through libgpuvisor.so vs the fake driver
# alone (target: <= 1 us more).  The interposed run has a memory limit and a
# shared region, i.e. the full accounting path.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bench/alloc_roundtrip
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export LD_LIBRARY_PATH=$PWD/$BUILD/tests/fakes
export GV_FAKE_GPU_STATE=$TMP/fake.state
direct=$("$BIN" | awk '{print $2}')
interposed=$(env LD_PRELOAD="$PWD/$BUILD/lib/libgpuvisor.so" CUDA_DEVICE_MEMORY_LIMIT=8g \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/r.cache" "$BIN" | awk '{print $2}')
echo "alloc+free round trip (cuMemAlloc_v2 4 KiB + cuMemFree_v2), median of 7 x 100000"
echo "direct fake driver:        $direct ns"
echo "through libgpuvisor.so:    $interposed ns"
awk -v a="$direct" -v b="$interposed" 'BEGIN {
    printf "overhead:                  %.1f ns (target <= 1000 ns): %s\n", b - a, (b - a <= 1000) ? "met" : "NOT met" }'
