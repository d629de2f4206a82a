# Benchmarks (make bench).  Each component adds its own lines.

# gpuvisor-scheduler: concurrent filter+bind, 5,000-node filter latency, RSS.
ifeq ($(SCHED_DAEMON),yes)
BENCH_PROGS += bench_scheduler
bench_scheduler_SRCS := bench/bench_scheduler.c tests/scheduler/sched_testlib.c \
	tests/fakes/apiserver/fake_apiserver_proc.c
bench_scheduler_LIBS := kube common
bench_scheduler_LDLIBS := $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
bench_scheduler_CFLAGS := -I.
endif
