#!/usr/bin/env bash
# gpuvisor-node: Allocate p99 with 500 pods on the node, idle memory (VmRSS,
# anonymous, file-backed, Pss) at start / 110 pods / 500 pods / after GC, idle
# CPU (targets: p99 <= 5 ms, RSS <= 5 MiB, CPU ~ 0).  See bench/bench_node_agent.py.
exec /usr/bin/python3 "$(dirname "$0")/bench_node_agent.py"
