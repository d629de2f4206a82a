TEST_PROGS += test_podspec
test_podspec_SRCS := tests/contracts/test_podspec.c
test_podspec_LIBS := contracts alloc common
test_podspec_LDLIBS := $(contracts_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)

FUZZ_TARGETS += fuzz_podspec
fuzz_podspec_SRCS := tests/contracts/fuzz_podspec.c src/contracts/podspec.c src/contracts/inventory.c \
	$(wildcard src/alloc/*.c) src/common/gv_error.c
fuzz_podspec_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
