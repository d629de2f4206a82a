TEST_PROGS += test_common
test_common_SRCS := tests/common/test_common.c
test_common_LIBS := common
test_common_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
