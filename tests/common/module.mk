TEST_PROGS += test_common
test_common_SRCS := tests/common/test_common.c
test_common_LIBS := common
test_common_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
TEST_PROGS += test_gv_buf
test_gv_buf_SRCS := tests/common/test_gv_buf.c
test_gv_buf_LIBS := common
test_gv_buf_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
