# gpuvisor-scheduler: kube-scheduler extender + admission webhook.
# The library holds everything but main() so tests, the fuzz target and the
# bench link the same code the daemon runs.
SCHED_PKGS := libmicrohttpd gnutls jansson
LIBS += scheduler
scheduler_LDLIBS := $(shell $(PKG_CONFIG) --libs $(SCHED_PKGS)) $(kube_LDLIBS)
# Component libraries the scheduler library needs, in link order.
SCHED_LIBS := scheduler dashboard kube contracts alloc common

# The daemon reads the node agent's inventory through its codec
# (src/contracts/inventory.h, landed with the node agent).  Until that codec
# is on the branch, only the parts that do not need it are built: the wire
# codec, HTTP server, webhook, config and state tables.
SCHED_DAEMON := $(if $(wildcard src/contracts/inventory.h),yes)
ifeq ($(SCHED_DAEMON),yes)
scheduler_SRCS := $(filter-out src/scheduler/main.c,$(wildcard src/scheduler/*.c))
PROGS += gpuvisor-scheduler
gpuvisor-scheduler_SRCS := src/scheduler/main.c
gpuvisor-scheduler_LIBS := $(SCHED_LIBS)
gpuvisor-scheduler_LDLIBS := $(scheduler_LDLIBS) $(contracts_LDLIBS)
else
scheduler_SRCS := $(addprefix src/scheduler/,extender.c httpd.c webhook.c config.c sched_state.c)
endif

FUZZ_TARGETS += fuzz_extender
fuzz_extender_SRCS := tests/scheduler/fuzz_extender.c src/scheduler/extender.c \
	src/scheduler/preempt_wire.c \
	src/scheduler/sched_state.c $(wildcard src/alloc/*.c) src/common/gv_error.c src/common/gv_jalloc.c
fuzz_extender_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)

FUZZ_TARGETS += fuzz_webhook
fuzz_webhook_SRCS := tests/scheduler/fuzz_webhook.c src/scheduler/webhook.c src/scheduler/webhook_hami.c src/contracts/podspec.c \
	src/contracts/inventory.c \
	$(wildcard src/alloc/*.c) src/common/gv_error.c src/common/gv_log.c
fuzz_webhook_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson gnutls)

FUZZ_TARGETS += fuzz_sched_config
fuzz_sched_config_SRCS := tests/scheduler/fuzz_sched_config.c src/scheduler/config.c \
	src/scheduler/hami_config.c src/contracts/placement.c $(wildcard src/kube/*.c) \
	$(wildcard src/alloc/*.c) src/common/gv_error.c src/common/gv_file.c src/common/gv_log.c \
	src/common/gv_buf.c
fuzz_sched_config_LDLIBS := $(kube_LDLIBS)
