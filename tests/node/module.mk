# Node agent tests: see docs/node-agent.md ("Tests").
#
# Helper programs the test scripts drive (not tests themselves) are built
# into $(BUILD)/testbin/ with the same template as programs.
NODE_TEST_HELPERS := grpc_harness mps_share cdi_spec_gen
grpc_harness_SRCS := tests/node/grpc_harness.c
grpc_harness_LIBS := node shm common
grpc_harness_LDLIBS := $(NODE_LDLIBS)
grpc_harness_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/node/grpc_harness.o: $(NODE_PB_H)
# the MPS mode's percentages on this machine's GPUs (tests/gpu/run-gpu-tests.sh)
mps_share_SRCS := tests/node/mps_share.c
mps_share_LIBS := node kube contracts alloc shm common
mps_share_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS)
mps_share_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/node/mps_share.o: $(NODE_PB_H)

# the CDI spec for a real consumer (tests/node/test_node_cdi_podman.sh)
cdi_spec_gen_SRCS := tests/node/cdi_spec_gen.c
cdi_spec_gen_LIBS := node kube contracts alloc shm common
cdi_spec_gen_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS)
cdi_spec_gen_CFLAGS := $(NODE_CFLAGS)

$(foreach h,$(NODE_TEST_HELPERS),$(eval $(call GV_EXE,$(h),testbin)))
EXTRA_ALL += $(foreach h,$(NODE_TEST_HELPERS),$(BUILD)/testbin/$(h))

TEST_PROGS += test_node_units
test_node_units_SRCS := tests/node/test_node_units.c
test_node_units_LIBS := node kube contracts alloc shm common
test_node_units_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_units_CFLAGS := $(NODE_CFLAGS)

# The agent's event loop: fd callbacks after adds, changes and removals, timers, posts.
TEST_PROGS += test_node_loop
test_node_loop_SRCS := tests/node/test_node_loop.c
test_node_loop_LIBS := node kube contracts alloc shm common
test_node_loop_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_loop_CFLAGS := $(NODE_CFLAGS)

# Monitor units: cgroup parsing, container records, metrics settings, a rendered region.
TEST_PROGS += test_node_metrics_units
test_node_metrics_units_SRCS := tests/node/test_node_metrics_units.c
test_node_metrics_units_LIBS := node kube contracts alloc shm common
test_node_metrics_units_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_metrics_units_CFLAGS := $(NODE_CFLAGS)

# The pod cache's transform, and Allocate from trimmed pods.
TEST_PROGS += test_node_podcache
test_node_podcache_SRCS := tests/node/test_node_podcache.c
test_node_podcache_LIBS := node kube contracts alloc shm common
test_node_podcache_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_podcache_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/node/test_node_podcache.o: $(NODE_PB_H)

# Recovery removes the temporary files a killed agent left in live pods' directories.
TEST_PROGS += test_node_recovery_tmp
test_node_recovery_tmp_SRCS := tests/node/test_node_recovery_tmp.c
test_node_recovery_tmp_LIBS := node kube contracts alloc shm common
test_node_recovery_tmp_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_recovery_tmp_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/node/test_node_recovery_tmp.o: $(NODE_PB_H)

TEST_SCRIPTS += tests/node/test_standin_order.py
TEST_SCRIPTS += tests/node/test_grpc_transport.py tests/node/test_node_agent.py tests/node/test_node_crash.py
# /metrics and the NVML backstop (docs/observability.md)
TEST_SCRIPTS += tests/node/test_node_metrics.py
# Sharing modes: MPS (fake nvidia-cuda-mps-control), NVIDIA's sharing blocks, one plugin per resource
TEST_SCRIPTS += tests/node/test_node_modes.py

# Fuzz targets: bytes from a socket peer (HTTP/2 + gRPC framing), the
# inventory annotation and the node config file.
FUZZ_TARGETS += fuzz_node_grpc_server fuzz_node_inventory fuzz_node_config fuzz_node_allocate
fuzz_node_grpc_server_SRCS := tests/node/fuzz_node_grpc_server.c src/node/kubelet/grpc_server.c \
	src/node/kubelet/grpc_frame.c src/node/loop/loop.c src/common/gv_buf.c src/common/gv_error.c src/common/gv_log.c
fuzz_node_grpc_server_LDLIBS := $(shell $(PKG_CONFIG) --libs libnghttp2)
fuzz_node_inventory_SRCS := tests/node/fuzz_node_inventory.c src/contracts/inventory.c \
	src/common/gv_error.c
fuzz_node_inventory_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
fuzz_node_config_SRCS := tests/node/fuzz_node_config.c src/node/config/config.c \
	src/node/discovery/cdi_kind.c $(wildcard src/node/passthrough/*.c) \
	src/contracts/inventory.c \
	src/node/monitor/monitor_record.c src/common/gv_log.c src/common/gv_error.c \
	src/common/gv_file.c
fuzz_node_config_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson) -ldl
# The kubelet's device manager checkpoint, as Allocate reads it.
FUZZ_TARGETS += fuzz_node_checkpoint
fuzz_node_checkpoint_SRCS := tests/node/fuzz_node_checkpoint.c src/node/allocate/kubelet_checkpoint.c \
	src/common/gv_file.c src/common/gv_error.c
fuzz_node_checkpoint_CFLAGS := $(NODE_CFLAGS)
fuzz_node_checkpoint_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
$(FUZZ_BUILD)/fuzz_node_checkpoint: | $(NODE_PB_H)
# What the monitor parses: /proc/<pid>/cgroup text, container records, HTTP request heads.
FUZZ_TARGETS += fuzz_node_metrics
fuzz_node_metrics_SRCS := tests/node/fuzz_node_metrics.c $(wildcard src/node/monitor/*.c) \
	$(wildcard src/shm/*.c) src/common/gv_buf.c src/common/gv_error.c src/common/gv_log.c src/common/gv_file.c \
	$(wildcard src/kube/*.c)
fuzz_node_metrics_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) -lpthread
# Pods from the API server through Allocate's pod selection and answer.
fuzz_node_allocate_SRCS := tests/node/fuzz_node_allocate.c $(wildcard src/node/allocate/*.c) src/node/modes/answer.c \
	src/node/config/config.c \
	$(wildcard src/node/passthrough/*.c) \
	$(wildcard src/node/modes/mode*.c) \
	src/node/monitor/monitor_record.c src/node/discovery/cdi.c src/node/discovery/cdi_kind.c \
	src/node/loop/loop.c src/contracts/inventory.c src/contracts/podspec.c src/contracts/placement.c \
	src/contracts/gpushare.c $(wildcard src/shm/*.c) \
	$(wildcard src/alloc/*.c) \
	$(wildcard src/kube/*.c) \
	src/common/gv_buf.c src/common/gv_error.c src/common/gv_log.c src/common/gv_file.c \
	src/common/gv_jalloc.c $(NODE_PB_C)
fuzz_node_allocate_CFLAGS := $(NODE_CFLAGS)
fuzz_node_allocate_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS)
# order-only: the replay rule compiles $^, which must hold sources only
$(FUZZ_BUILD)/fuzz_node_allocate: | $(NODE_PB_H)

# NVIDIA GFD labels: golden table per fake node (docs/mig-cdi.md, "GFD labels").
TEST_PROGS += test_node_labels
test_node_labels_SRCS := tests/node/test_node_labels.c
test_node_labels_LIBS := node kube contracts alloc shm common
test_node_labels_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_labels_CFLAGS := $(NODE_CFLAGS)

# MIG discovery through the fake NVML (GV_FAKE_MIG_CONFIG), geometry re-read (docs/mig-cdi.md).
TEST_PROGS += test_node_mig
test_node_mig_SRCS := tests/node/test_node_mig.c
test_node_mig_LIBS := node kube contracts alloc shm common
test_node_mig_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_mig_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/tests/test_node_mig: | $(GV_FAKE_NVML)

# CDI spec against a fake driver root (tests/fakes/make-driver-root.sh) and a CDI 0.5.0 reader.
# A real CDI consumer (podman, Debian's) reads the spec; real device nodes (root).
TEST_SCRIPTS += tests/node/test_node_cdi_podman.sh

# CDI kinds: the name rules, the config's refusal, other specs of the same kind.
TEST_PROGS += test_node_cdi_kind
test_node_cdi_kind_SRCS := tests/node/test_node_cdi_kind.c
test_node_cdi_kind_LIBS := node kube contracts alloc shm common
test_node_cdi_kind_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_cdi_kind_CFLAGS := $(NODE_CFLAGS)

TEST_PROGS += test_node_cdi
test_node_cdi_SRCS := tests/node/test_node_cdi.c
test_node_cdi_LIBS := node kube contracts alloc shm common
test_node_cdi_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_cdi_CFLAGS := $(NODE_CFLAGS)
TEST_SCRIPTS += tests/node/test_node_direct.py
TEST_SCRIPTS += tests/node/test_node_mig_strategies.py
# MIG devices in the published inventory (kind mig) for the scheduler.
TEST_SCRIPTS += tests/node/test_node_mig_inventory.py
TEST_SCRIPTS += tests/node/test_node_mig_vgpu.py
TEST_SCRIPTS += tests/node/test_node_multi_resource_go.py

# Passthrough and mediated devices against the fake sysfs tree (docs/passthrough.md).
TEST_PROGS += test_node_passthrough
test_node_passthrough_SRCS := tests/node/test_node_passthrough.c tests/fakes/sysfs/fake_sysfs.c
test_node_passthrough_LIBS := node contracts alloc shm common
test_node_passthrough_LDLIBS := $(NODE_LDLIBS) $(contracts_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_node_passthrough_CFLAGS := $(NODE_CFLAGS) -Itests/fakes/sysfs
# The agent's passthrough mode with the kubelet stand-in over a fake sysfs tree.
TEST_SCRIPTS += tests/node/test_node_passthrough_agent.py
