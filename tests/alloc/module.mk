TEST_PROGS += test_alloc
test_alloc_SRCS := tests/alloc/test_alloc.c
test_alloc_LIBS := alloc common
test_alloc_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
test_alloc_CFLAGS := -I.

# Node index: indexed search == exhaustive scoring on random clusters.
TEST_PROGS += test_alloc_index
test_alloc_index_SRCS := tests/alloc/test_alloc_index.c
test_alloc_index_LIBS := alloc common
test_alloc_index_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
test_alloc_index_CFLAGS := -I.

# Preemption victims and what-if (src/alloc/victims.c).
TEST_PROGS += test_victims
test_victims_SRCS := tests/alloc/test_victims.c
test_victims_LIBS := alloc common
test_victims_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
test_victims_CFLAGS := -I.

# Fuzz targets: parsers of untrusted input (quantities from pod specs, the
# assignment annotation the node agent reads).
FUZZ_TARGETS += fuzz_alloc_quantity fuzz_alloc_assignment
fuzz_alloc_quantity_SRCS := tests/alloc/fuzz_alloc_quantity.c src/alloc/quantity.c \
	src/common/gv_error.c
fuzz_alloc_assignment_SRCS := tests/alloc/fuzz_alloc_assignment.c src/alloc/assign.c \
	src/common/gv_error.c

# Defragmentation planner against exhaustive search on small clusters.
TEST_PROGS += test_defrag
test_defrag_SRCS := tests/alloc/test_defrag.c
test_defrag_LIBS := alloc common
test_defrag_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
test_defrag_CFLAGS := -I.

# Score budget on large clusters: known answers and order independence.
TEST_PROGS += test_score_budget
test_score_budget_SRCS := tests/alloc/test_score_budget.c
test_score_budget_LIBS := alloc common
test_score_budget_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
test_score_budget_CFLAGS := -I.
