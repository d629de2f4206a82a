TEST_PROGS += test_podspec
test_podspec_SRCS := tests/contracts/test_podspec.c
test_podspec_LIBS := contracts alloc common
test_podspec_LDLIBS := $(contracts_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
