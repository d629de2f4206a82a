TEST_PROGS += test_alloc
test_alloc_SRCS := tests/alloc/test_alloc.c
test_alloc_LIBS := alloc common
test_alloc_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
