# Benchmarks (make bench).  Each fragment owner adds its own lines.

# Compute share (docs/compute-share.md): launch overhead of the interposer and
# share accuracy on the fake driver's virtual clock.
BENCH_PROGS += bench_launch
bench_launch_SRCS := bench/bench_launch.c
bench_launch_LDLIBS := -L$(BUILD)/tests/fakes -l:libcuda.so.1
$(BUILD)/bench/bench_launch: $(GV_FAKE_CUDA) $(GV_INTERPOSER)
BENCH_SCRIPTS += bench/bench_throttle_launch.sh bench/bench_compute_share.sh
