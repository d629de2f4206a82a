#!/bin/sh
# GPU pods through the real kube-scheduler and gpuvisor's extender against the
# same kube-scheduler binding plain pods, on the loopback Kubernetes of
# ../shared/k8s (bench/e2e_bind.py says how).  Root; holds /var/tmp/gv-k8s.lock
# while the cluster runs.  GV_BENCH_NODES / GV_BENCH_PODS: 5000 / 1000.
exec nice -n 10 python3 "$(dirname "$0")/e2e_bind.py"
