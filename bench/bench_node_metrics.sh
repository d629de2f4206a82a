#!/usr/bin/env bash
# gpuvisor-node /metrics: cost of scraping every 5 s with 110 containers'
# regions on the fake driver (target < 1% of a core) and the agent's idle
# memory with them (target <= 5 MiB).  See bench/bench_node_metrics.py.
exec /usr/bin/python3 "$(dirname "$0")/bench_node_metrics.py"
