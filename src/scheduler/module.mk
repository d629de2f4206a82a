# gpuvisor-scheduler: kube-scheduler extender + admission webhook.
# The library holds everything but main() so tests, the fuzz target and the
# bench link the same code the daemon runs.
LIBS += scheduler
scheduler_SRCS := $(filter-out src/scheduler/main.c,$(wildcard src/scheduler/*.c))
scheduler_LDLIBS := $(shell $(PKG_CONFIG) --libs libmicrohttpd gnutls jansson)

#PROGS += gpuvisor-scheduler
gpuvisor-scheduler_SRCS := src/scheduler/main.c
gpuvisor-scheduler_LIBS := scheduler common
gpuvisor-scheduler_LDLIBS := $(scheduler_LDLIBS)

FUZZ_TARGETS += fuzz_extender
fuzz_extender_SRCS := tests/scheduler/fuzz_extender.c src/scheduler/extender.c src/common/gv_error.c
fuzz_extender_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
