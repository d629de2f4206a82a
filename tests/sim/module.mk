TEST_PROGS += test_sim
test_sim_SRCS := tests/sim/test_sim.c
test_sim_LIBS := sim contracts alloc common
test_sim_LDLIBS = $(contracts_LDLIBS) $(sim_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
TEST_SCRIPTS += tests/sim/test_simulate_cli.sh
# --from-cluster with MIG devices: count placement and its report.
TEST_SCRIPTS += tests/sim/test_simulate_mig.py

FUZZ_TARGETS += fuzz_sim_openb_csv
fuzz_sim_openb_csv_SRCS := tests/sim/fuzz_sim_openb_csv.c $(wildcard src/sim/*.c) \
	src/contracts/podspec.c src/contracts/inventory.c $(wildcard src/alloc/*.c) src/common/gv_error.c \
	src/common/gv_file.c
fuzz_sim_openb_csv_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson) -lglpk
# The LP bound against brute-force optima of random small clusters.
TEST_PROGS += test_lp_bound
test_lp_bound_SRCS := tests/sim/test_lp_bound.c
test_lp_bound_LIBS := sim contracts alloc common
test_lp_bound_LDLIBS = $(contracts_LDLIBS) $(sim_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
