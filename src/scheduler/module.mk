# gpuvisor-scheduler: kube-scheduler extender + admission webhook.
# The library holds everything but main() so tests, the fuzz target and the
# bench link the same code the daemon runs.
SCHED_PKGS := libmicrohttpd gnutls jansson
LIBS += scheduler
# Until the node agent's inventory codec (src/contracts/inventory.h) lands,
# the daemon's state and handlers are not built; the codec, HTTP server,
# webhook and config are.
scheduler_SRCS := src/scheduler/extender.c src/scheduler/httpd.c src/scheduler/webhook.c \
	src/scheduler/config.c
scheduler_LDLIBS := $(shell $(PKG_CONFIG) --libs $(SCHED_PKGS))
# Component libraries the scheduler library needs, in link order.
SCHED_LIBS := scheduler contracts alloc common

FUZZ_TARGETS += fuzz_extender
fuzz_extender_SRCS := tests/scheduler/fuzz_extender.c src/scheduler/extender.c src/common/gv_error.c
fuzz_extender_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)

FUZZ_TARGETS += fuzz_webhook
fuzz_webhook_SRCS := tests/scheduler/fuzz_webhook.c src/scheduler/webhook.c src/contracts/podspec.c \
	$(wildcard src/alloc/*.c) src/common/gv_error.c src/common/gv_log.c
fuzz_webhook_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson gnutls)

FUZZ_TARGETS += fuzz_sched_config
fuzz_sched_config_SRCS := tests/scheduler/fuzz_sched_config.c src/scheduler/config.c \
	$(wildcard src/alloc/*.c) src/common/gv_error.c src/common/gv_file.c
fuzz_sched_config_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
