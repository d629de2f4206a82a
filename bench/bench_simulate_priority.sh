#!/usr/bin/env bash
# gpuvisor simulate --high-priority with --defrag-every: how long
# high-priority pods wait, and how many low-priority pods they evict, per
# policy, once pods depart (docs/simulate.md, "Priorities in the churn
# replay"): the synthetic cluster at 120 % offered load, 3 lifetimes,
# seeds 42-44, a fifth and a half of the pods high priority.
set -eu
BIN="${BUILD:-build}/bin/gpuvisor"
for pct in 20 50; do
    echo "\$ gpuvisor simulate --seeds 42-44 --defrag-every 200 --churn load=120,lifetimes=3 --high-priority $pct"
    nice -n 10 "$BIN" simulate --seeds 42-44 --defrag-every 200 --churn load=120,lifetimes=3 \
        --high-priority "$pct"
    echo
done
