# Fake GPU driver libraries for tests (no GPU in CI): libcuda.so.1 from
# tests/fakes/cuda/*.c and libnvidia-ml.so.1 from tests/fakes/nvml/*.c, both
# over the simulated GPUs of tests/fakes/fake_gpus.c.  Tests put
# $(BUILD)/tests/fakes on LD_LIBRARY_PATH.  See tests/fakes/README.md.
GV_FAKES_DIR := $(BUILD)/tests/fakes
GV_FAKE_CUDA := $(GV_FAKES_DIR)/libcuda.so.1
GV_FAKE_NVML := $(GV_FAKES_DIR)/libnvidia-ml.so.1

fake_cuda_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/fakes/cuda/*.c) tests/fakes/fake_gpus.c)
fake_nvml_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/fakes/nvml/*.c) tests/fakes/fake_gpus.c)
$(fake_cuda_OBJS) $(fake_nvml_OBJS): EXTRA_CFLAGS := -Itests/fakes -Itests/fakes/cuda
ALL_OBJS += $(fake_cuda_OBJS) $(fake_nvml_OBJS)

$(GV_FAKE_CUDA): $(fake_cuda_OBJS) tests/fakes/fake.map tests/fakes/module.mk
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic \
		-Wl,--version-script=tests/fakes/fake.map -o $@ $(fake_cuda_OBJS) -lpthread

$(GV_FAKE_NVML): $(fake_nvml_OBJS) tests/fakes/fake.map tests/fakes/module.mk
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,-Bsymbolic \
		-Wl,--version-script=tests/fakes/fake.map -o $@ $(fake_nvml_OBJS) -lpthread

EXTRA_ALL += $(GV_FAKE_CUDA) $(GV_FAKE_NVML)

# The API-server stand-in's C launcher (apiserver/fake_apiserver_proc.c)
# drives the fake's control endpoints with libcurl, a real HTTP client.
FAKE_APISERVER_LDLIBS := $(shell $(PKG_CONFIG) --libs libcurl)

# Fake sysfs tree generator (tests/fakes/sysfs): linked into the passthrough
# tests and built as $(BUILD)/testbin/fake_sysfs for script tests.
fake_sysfs_SRCS := tests/fakes/sysfs/fake_sysfs_main.c tests/fakes/sysfs/fake_sysfs.c
fake_sysfs_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
$(eval $(call GV_EXE,fake_sysfs,testbin))
EXTRA_ALL += $(BUILD)/testbin/fake_sysfs
