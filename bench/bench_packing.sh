#!/usr/bin/env bash
# Packing quality across workload families (bench/bench_packing.py):
# fgd against binpack, best-fit, spread and the previous release's fgd, with
# the offline oracle and the LP bound.  Minutes on 2 cores.
exec python3 "$(dirname "$0")/bench_packing.py"
