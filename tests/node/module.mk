# Node agent tests: see docs/node-agent.md ("Tests").
#
# Helper programs the test scripts drive (not tests themselves) are built
# into $(BUILD)/testbin/ with the same template as programs.
NODE_TEST_HELPERS := grpc_harness
grpc_harness_SRCS := tests/node/grpc_harness.c
grpc_harness_LIBS := node common
grpc_harness_LDLIBS := $(NODE_LDLIBS)
grpc_harness_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/tests/node/grpc_harness.o: $(NODE_PB_H)

$(foreach h,$(NODE_TEST_HELPERS),$(eval $(call GV_EXE,$(h),testbin)))
EXTRA_ALL += $(foreach h,$(NODE_TEST_HELPERS),$(BUILD)/testbin/$(h))

TEST_SCRIPTS += tests/node/test_grpc_transport.py
