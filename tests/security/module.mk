# Hostile-tenant tests (issue 14, docs/isolation.md): each attack as a test.
TEST_PROGS += test_placement_signing
test_placement_signing_SRCS := tests/security/test_placement_signing.c
test_placement_signing_LIBS := node kube contracts alloc common
test_placement_signing_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(contracts_LDLIBS) \
	$(shell $(PKG_CONFIG) --libs cmocka)
test_placement_signing_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/security/test_placement_signing.o: $(NODE_PB_H)

TEST_SCRIPTS += tests/security/test_forged_placements_with_fake_apiserver.sh

TEST_PROGS += test_grpc_conn_caps
test_grpc_conn_caps_SRCS := tests/security/test_grpc_conn_caps.c
test_grpc_conn_caps_LIBS := node common
test_grpc_conn_caps_LDLIBS := $(NODE_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
test_grpc_conn_caps_CFLAGS := $(NODE_CFLAGS)

TEST_SCRIPTS += tests/security/test_control_plane_abuse.py
