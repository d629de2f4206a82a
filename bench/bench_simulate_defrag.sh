#!/usr/bin/env bash
# gpuvisor simulate --defrag-every: what periodic defragmentation buys on the
# synthetic cluster once pods depart (docs/simulate.md, "Pods departing and
# defragmentation"), fgd, seeds 42-46, a pass every 200 and every 50 arrivals.
set -eu
BIN="${BUILD:-build}/bin/gpuvisor"
for every in 200 50; do
    echo "\$ gpuvisor simulate --policy fgd --seeds 42-46 --defrag-every $every"
    nice -n 10 "$BIN" simulate --policy fgd --seeds 42-46 --defrag-every "$every"
    echo
done
