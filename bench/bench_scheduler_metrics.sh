#!/usr/bin/env bash
# Size and time of the scheduler's /metrics (default, per GPU) and /api/state at 1,000 nodes
# (bench_scheduler_metrics.py; docs/observability.md).
exec /usr/bin/python3 "$(dirname "$0")/bench_scheduler_metrics.py"
