TEST_PROGS += test_podspec
test_podspec_SRCS := tests/contracts/test_podspec.c
test_podspec_LIBS := contracts alloc common
test_podspec_LDLIBS := $(contracts_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)

FUZZ_TARGETS += fuzz_podspec
fuzz_podspec_SRCS := tests/contracts/fuzz_podspec.c src/contracts/podspec.c src/contracts/inventory.c \
	$(wildcard src/alloc/*.c) src/common/gv_error.c
fuzz_podspec_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)

# Whole devices: the inventory's mig kind, per-node counts, pod counts and the count fit.
TEST_PROGS += test_whole_devices
test_whole_devices_SRCS := tests/contracts/test_whole_devices.c
test_whole_devices_LIBS := contracts alloc common
test_whole_devices_LDLIBS := $(contracts_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)

# The agents' /metrics reader (untrusted text): every line shape, malformed
# lines counted, bodies cut at every byte (SAN sees reads past the end); the
# usage model read from it, and the agent's port.
TEST_PROGS += test_agent_usage
test_agent_usage_SRCS := tests/contracts/test_agent_usage.c
test_agent_usage_LIBS := contracts common
test_agent_usage_LDLIBS := $(contracts_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka jansson)

# Aliyun gpushare's container environment: values, who gets none, saturated sums.
TEST_PROGS += test_gpushare
test_gpushare_SRCS := tests/contracts/test_gpushare.c
test_gpushare_LIBS := contracts common
test_gpushare_LDLIBS := $(contracts_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka jansson)
