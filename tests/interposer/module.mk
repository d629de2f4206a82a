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

TEST_PROGS += test_ipcfg
test_ipcfg_SRCS := tests/interposer/test_ipcfg.c src/interposer/config.c
test_ipcfg_LIBS := common
test_ipcfg_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka)

TEST_SCRIPTS += tests/interposer/test_interposer.sh
# The scripts need the library, the fakes and the probe.
all: $(GV_INTERPOSER) $(GV_PROBE)

FUZZ_TARGETS += fuzz_ipcfg
fuzz_ipcfg_SRCS := tests/interposer/fuzz_ipcfg.c src/interposer/config.c src/common/gv_error.c
