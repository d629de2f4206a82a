# Hostile-tenant tests (issue 14, docs/isolation.md): each attack as a test.
TEST_PROGS += test_placement_signing
test_placement_signing_SRCS := tests/security/test_placement_signing.c
test_placement_signing_LIBS := node kube contracts alloc common
test_placement_signing_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS) $(contracts_LDLIBS) \
	$(shell $(PKG_CONFIG) --libs cmocka)
test_placement_signing_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/security/test_placement_signing.o: $(NODE_PB_H)

TEST_SCRIPTS += tests/security/test_forged_placements_with_fake_apiserver.sh
