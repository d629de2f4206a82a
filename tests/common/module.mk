TEST_PROGS += test_common
test_common_SRCS := tests/common/test_common.c
test_common_LIBS := common
test_common_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
TEST_PROGS += test_gv_buf
test_gv_buf_SRCS := tests/common/test_gv_buf.c
test_gv_buf_LIBS := common
test_gv_buf_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
TEST_PROGS += test_jalloc
test_jalloc_SRCS := tests/common/test_jalloc.c
test_jalloc_LIBS := common
test_jalloc_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka jansson)
TEST_PROGS += test_gv_file
test_gv_file_SRCS := tests/common/test_gv_file.c
test_gv_file_LIBS := common
test_gv_file_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)

# fsync before the rename, the directory's after (the calls, seen by
# interposing fsync and rename in the test program itself).
TEST_PROGS += test_gv_file_durability
test_gv_file_durability_SRCS := tests/common/test_gv_file_durability.c
test_gv_file_durability_LIBS := common
test_gv_file_durability_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
