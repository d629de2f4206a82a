# Benchmarks that are not tied to one component's test fragment.

# Interposer: allocation + free round trip overhead (bench_alloc_overhead.sh
# runs alloc_roundtrip with and without libgpuvisor.so).
alloc_roundtrip_SRCS := bench/alloc_roundtrip.c
alloc_roundtrip_LDLIBS := -L$(BUILD)/tests/fakes -l:libcuda.so.1
$(eval $(call GV_EXE,alloc_roundtrip,bench))
$(BUILD)/bench/alloc_roundtrip: $(GV_FAKE_CUDA)
EXTRA_ALL += $(BUILD)/bench/alloc_roundtrip
BENCH_SCRIPTS += bench/bench_alloc_overhead.sh
