# Hostile-tenant tests (issue 14, docs/isolation.md): each attack as a test.
TEST_PROGS += test_placement_signing
test_placement_signing_SRCS := tests/security/test_placement_signing.c
test_placement_signing_LIBS := node kube contracts alloc shm common
test_placement_signing_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(contracts_LDLIBS) \
	$(shell $(PKG_CONFIG) --libs cmocka)
test_placement_signing_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/security/test_placement_signing.o: $(NODE_PB_H)

TEST_SCRIPTS += tests/security/test_forged_placements_with_fake_apiserver.sh

TEST_PROGS += test_grpc_conn_caps
test_grpc_conn_caps_SRCS := tests/security/test_grpc_conn_caps.c
test_grpc_conn_caps_LIBS := node shm common
test_grpc_conn_caps_LDLIBS := $(NODE_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_grpc_conn_caps_CFLAGS := $(NODE_CFLAGS)

TEST_SCRIPTS += tests/security/test_control_plane_abuse.py

TEST_PROGS += test_grpc_client_replies
test_grpc_client_replies_SRCS := tests/security/test_grpc_client_replies.c
test_grpc_client_replies_LIBS := node shm common
test_grpc_client_replies_LDLIBS := $(NODE_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka libnghttp2)
test_grpc_client_replies_CFLAGS := $(NODE_CFLAGS)

# Fuzz targets for hostile input (docs/contributing.md, "Tests").
FUZZ_TARGETS += fuzz_placement
fuzz_placement_SRCS := tests/security/fuzz_placement.c src/contracts/placement.c \
	src/common/gv_error.c src/common/gv_file.c
fuzz_placement_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson) -lmbedcrypto

FUZZ_TARGETS += fuzz_ipcfg_load
fuzz_ipcfg_load_SRCS := tests/security/fuzz_ipcfg_load.c src/interposer/config.c src/common/gv_error.c

FUZZ_TARGETS += fuzz_sched_pods
fuzz_sched_pods_SRCS := tests/security/fuzz_sched_pods.c \
	$(filter-out src/scheduler/main.c,$(wildcard src/scheduler/*.c)) $(wildcard src/kube/*.c) \
	$(wildcard src/contracts/*.c) $(wildcard src/alloc/*.c) $(wildcard src/common/*.c) \
	$(dashboard_SRCS)
fuzz_sched_pods_LDLIBS := $(scheduler_LDLIBS) $(contracts_LDLIBS)

FUZZ_TARGETS += fuzz_kube_list_pages
fuzz_kube_list_pages_SRCS := tests/security/fuzz_kube_list_pages.c $(wildcard src/kube/*.c) \
	src/common/gv_buf.c src/common/gv_error.c src/common/gv_log.c src/common/gv_file.c \
	src/common/gv_jalloc.c
fuzz_kube_list_pages_CFLAGS := -Itests/security
fuzz_kube_list_pages_LDLIBS := $(kube_LDLIBS)

FUZZ_TARGETS += fuzz_grpc_client
fuzz_grpc_client_SRCS := tests/security/fuzz_grpc_client.c src/node/kubelet/grpc_client.c src/node/loop/loop.c \
	src/node/kubelet/grpc_frame.c src/common/gv_buf.c src/common/gv_error.c src/common/gv_log.c
fuzz_grpc_client_CFLAGS := -Itests/security
fuzz_grpc_client_LDLIBS := $(shell $(PKG_CONFIG) --libs libnghttp2)

TEST_PROGS += test_sched_placements
test_sched_placements_SRCS := tests/security/test_sched_placements.c
test_sched_placements_LIBS := $(SCHED_LIBS)
test_sched_placements_LDLIBS := $(SCHED_TEST_LDLIBS)

TEST_SCRIPTS += tests/security/test_forged_allocate_with_fake_apiserver.py
