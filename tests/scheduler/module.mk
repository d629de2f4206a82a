# Scheduler tests.  "with_fake_apiserver" tests run the daemon against
# tests/fakes/apiserver/fake_apiserver.py, a kube-apiserver stand-in.
SCHED_TEST_LDLIBS := $(scheduler_LDLIBS) $(contracts_LDLIBS) $(FAKE_APISERVER_LDLIBS) \
	$(shell $(PKG_CONFIG) --libs cmocka)

TEST_PROGS += test_extender_codec
test_extender_codec_SRCS := tests/scheduler/test_extender_codec.c
test_extender_codec_LIBS := $(SCHED_LIBS)
test_extender_codec_LDLIBS := $(SCHED_TEST_LDLIBS)

TEST_PROGS += test_httpd
test_httpd_SRCS := tests/scheduler/test_httpd.c
test_httpd_LIBS := $(SCHED_LIBS)
test_httpd_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)

TEST_PROGS += test_webhook
# HAMi's example pods and default device ConfigMap through webhook and engine
TEST_PROGS += test_hami_examples
test_hami_examples_SRCS := tests/scheduler/test_hami_examples.c
test_hami_examples_LIBS := $(SCHED_LIBS)
test_hami_examples_LDLIBS := $(SCHED_TEST_LDLIBS)
test_webhook_SRCS := tests/scheduler/test_webhook.c
test_webhook_LIBS := $(SCHED_LIBS)
test_webhook_LDLIBS := $(SCHED_TEST_LDLIBS)

TEST_SCRIPTS += tests/scheduler/test_deploy.sh

TEST_PROGS += test_config
test_config_SRCS := tests/scheduler/test_config.c
test_config_LIBS := $(SCHED_LIBS)
test_config_LDLIBS := $(SCHED_TEST_LDLIBS)

TEST_PROGS += test_sched_units
test_sched_units_SRCS := tests/scheduler/test_sched_units.c
test_sched_units_LIBS := $(SCHED_LIBS)
test_sched_units_LDLIBS := $(SCHED_TEST_LDLIBS)

# Tests of the daemon itself (see SCHED_DAEMON in src/scheduler/module.mk).
ifeq ($(SCHED_DAEMON),yes)
SCHED_TESTLIB_SRCS := tests/scheduler/sched_testlib.c tests/fakes/apiserver/fake_apiserver_proc.c

TEST_PROGS += test_scheduler_with_fake_apiserver
test_scheduler_with_fake_apiserver_SRCS := tests/scheduler/test_scheduler_with_fake_apiserver.c \
	$(SCHED_TESTLIB_SRCS) tests/scheduler/sched_handfed.c
test_scheduler_with_fake_apiserver_LIBS := $(SCHED_LIBS)
test_scheduler_with_fake_apiserver_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_scheduler_with_fake_apiserver_CFLAGS := -I.
TEST_PROGS += test_quota
test_quota_SRCS := tests/scheduler/test_quota.c
test_quota_LIBS := $(SCHED_LIBS)
test_quota_LDLIBS := $(SCHED_TEST_LDLIBS)
TEST_PROGS += test_quota_with_fake_apiserver
test_quota_with_fake_apiserver_SRCS := tests/scheduler/test_quota_with_fake_apiserver.c \
	$(SCHED_TESTLIB_SRCS)
test_quota_with_fake_apiserver_LIBS := $(SCHED_LIBS)
test_quota_with_fake_apiserver_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_quota_with_fake_apiserver_CFLAGS := -I.
TEST_SCRIPTS += tests/scheduler/test_webhook_https_with_fake_apiserver.sh

# The daemon (build/bin/gpuvisor-scheduler) under randomized rounds with
# SIGKILL + restart; see the file's head.
TEST_PROGS += test_sched_stress_with_fake_apiserver
test_sched_stress_with_fake_apiserver_SRCS := tests/scheduler/test_sched_stress_with_fake_apiserver.c \
	$(SCHED_TESTLIB_SRCS)
test_sched_stress_with_fake_apiserver_LIBS := $(SCHED_LIBS)
test_sched_stress_with_fake_apiserver_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_sched_stress_with_fake_apiserver_CFLAGS := -I.

# The preempt verb over HTTP, holds, restarts, random rounds (in-process).
TEST_PROGS += test_preempt
test_preempt_SRCS := tests/scheduler/test_preempt.c $(SCHED_TESTLIB_SRCS)
test_preempt_LIBS := $(SCHED_LIBS)
test_preempt_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_preempt_CFLAGS := -I.

# The extender's own preemption when kube-scheduler never calls the verb
# (1.20.0-1.20.9, 1.21.0-1.21.3), against the kube-apiserver stand-in.
TEST_PROGS += test_preempt_self_with_fake_apiserver
test_preempt_self_with_fake_apiserver_SRCS := tests/scheduler/test_preempt_self_with_fake_apiserver.c \
	$(SCHED_TESTLIB_SRCS)
test_preempt_self_with_fake_apiserver_LIBS := $(SCHED_LIBS)
test_preempt_self_with_fake_apiserver_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_preempt_self_with_fake_apiserver_CFLAGS := -I.

# deploy/'s config files through the daemons' own parsers.
TEST_PROGS += test_deploy_configs
test_deploy_configs_SRCS := tests/scheduler/test_deploy_configs.c
test_deploy_configs_LIBS := node $(SCHED_LIBS)
test_deploy_configs_LDLIBS := $(SCHED_TEST_LDLIBS) $(NODE_LDLIBS)
endif

FUZZ_TARGETS += fuzz_quota
fuzz_quota_SRCS := tests/scheduler/fuzz_quota.c src/scheduler/quota.c $(wildcard src/alloc/*.c) \
	$(wildcard src/kube/*.c) src/common/gv_error.c src/common/gv_log.c src/common/gv_file.c \
	src/common/gv_buf.c
fuzz_quota_LDLIBS := $(kube_LDLIBS)

# Whole devices (docs/passthrough.md): GPUs they occupy are never sliced; counted per node.
TEST_SCRIPTS += tests/scheduler/test_sched_passthrough_with_fake_apiserver.py
# Whole devices by count (MIG, passthrough, mdev), MPS GPUs kept from 2-GPU containers.
TEST_SCRIPTS += tests/scheduler/test_sched_whole_with_fake_apiserver.py
TEST_SCRIPTS += tests/scheduler/test_sched_mig_vgpu_with_fake_apiserver.py
# MIG strategy single: the agent's GPU entries of mode mig placed as exclusive GPUs, admitted.
TEST_SCRIPTS += tests/scheduler/test_sched_mig_single_with_fake_apiserver.py

# The self-check compares memory, cores and tasks (drift planted in one alone).
TEST_PROGS += test_self_check_fields
test_self_check_fields_SRCS := tests/scheduler/test_self_check_fields.c $(SCHED_TESTLIB_SRCS) tests/scheduler/sched_handfed.c
test_self_check_fields_LIBS := $(SCHED_LIBS)
test_self_check_fields_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_self_check_fields_CFLAGS := -I.

# The self-check against the API: multi-device pods, a record the API
# contradicts, a placement with no record, pods seen before their node.
TEST_PROGS += test_self_check_records
test_self_check_records_SRCS := tests/scheduler/test_self_check_records.c $(SCHED_TESTLIB_SRCS) tests/scheduler/sched_handfed.c
test_self_check_records_LIBS := $(SCHED_LIBS)
test_self_check_records_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_self_check_records_CFLAGS := -I.

# Who holds which slice on /metrics and the dashboard: the engine's verified
# placement, not a tenant's patch of its bound pod's annotation.
TEST_PROGS += test_obs_slices
test_obs_slices_SRCS := tests/scheduler/test_obs_slices.c $(SCHED_TESTLIB_SRCS) tests/scheduler/sched_handfed.c
test_obs_slices_LIBS := $(SCHED_LIBS)
test_obs_slices_LDLIBS := $(SCHED_TEST_LDLIBS) $(shell $(PKG_CONFIG) --libs libcurl)
test_obs_slices_CFLAGS := -I.
