# Benchmarks that are not tied to one component's test fragment.

# Interposer: allocation + free round trip overhead (bench_alloc_overhead.sh
# runs alloc_roundtrip with and without libgpuvisor.so).
alloc_roundtrip_SRCS := bench/alloc_roundtrip.c
alloc_roundtrip_LDLIBS := -L$(BUILD)/tests/fakes -l:libcuda.so.1
$(eval $(call GV_EXE,alloc_roundtrip,bench))
$(BUILD)/bench/alloc_roundtrip: $(GV_FAKE_CUDA)
EXTRA_ALL += $(BUILD)/bench/alloc_roundtrip
BENCH_SCRIPTS += bench/bench_alloc_overhead.sh

# Allocation engine: placement decision latency at 5,000 nodes x 8 GPUs.
BENCH_PROGS += bench_placement
bench_placement_SRCS := bench/bench_placement.c
bench_placement_LIBS := sim contracts alloc common
bench_placement_LDLIBS = $(contracts_LDLIBS) $(sim_LDLIBS)
# Node index: fgd replay of a 10x openb cluster, indexed vs every node scored.
BENCH_PROGS += bench_index
bench_index_SRCS := bench/bench_index.c
bench_index_LIBS := sim contracts alloc common
bench_index_LDLIBS = $(contracts_LDLIBS) $(sim_LDLIBS)
# Defragmentation planning at 5,000 nodes (goal: under 2 s).
BENCH_PROGS += bench_defrag
bench_defrag_SRCS := bench/bench_defrag.c
bench_defrag_LIBS := alloc common
# gpuvisor simulate: openb replay speed and quality over every bundled trace.
BENCH_SCRIPTS += bench/bench_simulate.sh
# gpuvisor simulate --defrag-every: churn replay with and without defragmentation.
BENCH_SCRIPTS += bench/bench_simulate_defrag.sh
# ... with a high-priority share: how long high-priority pods wait, per policy.
BENCH_SCRIPTS += bench/bench_simulate_priority.sh
# gpuvisor simulate's cost on openb x10 against x1 (goal <= 15x), per --reference.
BENCH_SCRIPTS += bench/bench_simulate_scale.sh
# Packing across workload families (openb, held-out seeds, resampled mixes,
# synthetic sweep, heterogeneous clusters) against the previous release.
BENCH_SCRIPTS += bench/bench_packing.sh
# gpuvisor-scheduler: /metrics (with and without HAMi's names) and the
# dashboard's /api/state at 1,000 nodes x 8 GPUs.
BENCH_SCRIPTS += bench/bench_scheduler_metrics.sh

# Compute share (docs/compute-share.md): launch overhead of the interposer and
# share accuracy on the fake driver's virtual clock.
# bench_launch is the application bench_throttle_launch.sh times.
bench_launch_SRCS := bench/bench_launch.c
bench_launch_LDLIBS := -L$(BUILD)/tests/fakes -l:libcuda.so.1
$(eval $(call GV_EXE,bench_launch,bench))
$(BUILD)/bench/bench_launch: $(GV_FAKE_CUDA)
EXTRA_ALL += $(BUILD)/bench/bench_launch
BENCH_SCRIPTS += bench/bench_throttle_launch.sh bench/bench_compute_share.sh

# gpuvisor-scheduler: concurrent filter+bind, 5,000- and 50,000-node filter
# latency and RSS (the daemon), and the same filter in-process (the
# scheduler library: per-request server time, memory per node).
ifeq ($(SCHED_DAEMON),yes)
BENCH_PROGS += bench_scheduler
bench_scheduler_SRCS := bench/bench_scheduler.c tests/scheduler/sched_testlib.c \
	tests/fakes/apiserver/fake_apiserver_proc.c
bench_scheduler_LIBS := $(SCHED_LIBS)
bench_scheduler_LDLIBS := $(scheduler_LDLIBS) $(contracts_LDLIBS) $(FAKE_APISERVER_LDLIBS)
bench_scheduler_CFLAGS := -I.
# 200-pod burst with repeated filters of bound pods (issue 12): over-commit,
# binds/s, filter p99, accounting drift.
BENCH_PROGS += bench_sched_burst
bench_sched_burst_SRCS := bench/bench_sched_burst.c tests/scheduler/sched_testlib.c \
	tests/fakes/apiserver/fake_apiserver_proc.c
bench_sched_burst_LIBS := kube alloc common
bench_sched_burst_LDLIBS := $(kube_LDLIBS) $(FAKE_APISERVER_LDLIBS)
bench_sched_burst_CFLAGS := -I.
# Preempt verb (issue 26): 100 candidate nodes x 8 GPUs x 50 pods, p99.
BENCH_PROGS += bench_preempt
bench_preempt_SRCS := bench/bench_preempt.c tests/scheduler/sched_testlib.c \
	tests/fakes/apiserver/fake_apiserver_proc.c
bench_preempt_LIBS := $(SCHED_LIBS)
bench_preempt_LDLIBS := $(scheduler_LDLIBS) $(contracts_LDLIBS) $(FAKE_APISERVER_LDLIBS)
bench_preempt_CFLAGS := -I.
endif

# gpuvisor-node: Allocate p99 with 500 pods on the node, idle RSS and CPU.
BENCH_SCRIPTS += bench/bench_node_agent.sh

# gpuvisor-node /metrics: scrape cost and memory with 110 containers' regions
# (bench_mkregions makes the regions through the shm API).
bench_mkregions_SRCS := bench/bench_mkregions.c
bench_mkregions_LIBS := shm common
$(eval $(call GV_EXE,bench_mkregions,bench))
EXTRA_ALL += $(BUILD)/bench/bench_mkregions
BENCH_SCRIPTS += bench/bench_node_metrics.sh
# Container images: size, what dominates it, build time and reproducibility
# (two builds, same digest); needs root and the Debian archive.
BENCH_SCRIPTS += bench/bench_images.sh

# The real kube-scheduler 1.20 with the extender vs plain pods (bind rate) on
# the loopback cluster of ../shared/k8s (root).
BENCH_SCRIPTS += bench/bench_e2e_bind.sh
