# Interposer tests (no GPU): unit tests of the shared region and the
# configuration parser, and scripts that run gv_probe (an application
# reaching the fake driver by link, dlopen+dlsym or cuGetProcAddress) under
# libgpuvisor.so.
GV_PROBE := $(BUILD)/tests/gv_probe
gv_probe_SRCS := tests/interposer/gv_probe.c
gv_probe_LDLIBS := -L$(BUILD)/tests/fakes -l:libcuda.so.1 -l:libnvidia-ml.so.1 -ldl
$(eval $(call GV_EXE,gv_probe,tests))
$(GV_PROBE): $(GV_FAKE_CUDA) $(GV_FAKE_NVML)
EXTRA_ALL += $(GV_PROBE)

TEST_PROGS += test_shm
test_shm_SRCS := tests/interposer/test_shm.c
test_shm_LIBS := shm common
test_shm_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
test_shm_CFLAGS := -I.

# Opening a region at its edges (src/shm/open.c): no create, no directory,
# files left aside by dead creators, a refused open's mapping.
TEST_PROGS += test_shm_open
test_shm_open_SRCS := tests/interposer/test_shm_open.c
test_shm_open_LIBS := shm common
test_shm_open_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)
test_shm_open_CFLAGS := -I.

TEST_PROGS += test_ipcfg
test_ipcfg_SRCS := tests/interposer/test_ipcfg.c src/interposer/config.c
test_ipcfg_LIBS := common
test_ipcfg_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)

TEST_SCRIPTS += tests/interposer/test_interposer.sh tests/interposer/test_cli_run.sh
# The scripts need the library, the fakes and the probe.
all: $(GV_INTERPOSER) $(GV_PROBE)

FUZZ_TARGETS += fuzz_ipcfg
fuzz_ipcfg_SRCS := tests/interposer/fuzz_ipcfg.c src/interposer/config.c src/common/gv_error.c

# Compute share and priority on the fake driver's virtual clock
# (docs/compute-share.md).  The test dlopens the fake libcuda.so.1.
TEST_PROGS += test_throttle
test_throttle_SRCS := tests/interposer/test_throttle.c tests/interposer/throttle_stub.c \
                      src/interposer/throttle.c src/interposer/priority.c
test_throttle_LIBS := common
test_throttle_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka) -ldl
$(BUILD)/tests/test_throttle: $(GV_FAKE_CUDA)

# The throttle's driver operations and the launches it leaves alone, with
# stand-in entry points beside the fake driver's.
TEST_PROGS += test_throttle_ops
test_throttle_ops_SRCS := tests/interposer/test_throttle_ops.c tests/interposer/throttle_stub.c \
                          src/interposer/throttle.c src/interposer/priority.c
test_throttle_ops_LIBS := common
test_throttle_ops_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka) -ldl
$(BUILD)/tests/test_throttle_ops: $(GV_FAKE_CUDA)

# A compute-bound application for the compute-share script and benchmark.
GV_THROTTLE_TENANT := $(BUILD)/tests/test_throttle_tenant
test_throttle_tenant_SRCS := tests/interposer/test_throttle_tenant.c
test_throttle_tenant_CFLAGS := -Itests/fakes -Itests/fakes/cuda
test_throttle_tenant_LDLIBS := -L$(BUILD)/tests/fakes -l:libcuda.so.1
$(eval $(call GV_EXE,test_throttle_tenant,tests))
$(GV_THROTTLE_TENANT): $(GV_FAKE_CUDA)
EXTRA_ALL += $(GV_THROTTLE_TENANT)
TEST_SCRIPTS += tests/interposer/test_throttle_preload.sh
# MPS client limits re-exported from the limits file (src/interposer/mps_env.c)
TEST_SCRIPTS += tests/interposer/test_mps_env.sh
all: $(GV_THROTTLE_TENANT)

# The node priority board's file is written by every tenant: fuzz what we read.
FUZZ_TARGETS += fuzz_prio_board
fuzz_prio_board_SRCS := tests/interposer/test_throttle_fuzz_prio.c src/interposer/priority.c \
                        src/common/gv_error.c src/common/gv_log.c

FUZZ_TARGETS += fuzz_shm
fuzz_shm_SRCS := tests/interposer/fuzz_shm.c $(wildcard src/shm/*.c) src/common/gv_error.c

# A hostile process writing arbitrary bytes into the region another
# process holds charges in: no crash, no hang, no limit raised.
FUZZ_TARGETS += fuzz_shm_hostile
fuzz_shm_hostile_SRCS := tests/interposer/fuzz_shm_hostile.c $(wildcard src/shm/*.c) src/common/gv_error.c
