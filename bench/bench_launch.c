/*
 * Cost of one cuLaunchKernel call, measured from the application's side.
 * Linked to libcuda.so.1; bench/bench_throttle_launch.sh runs it against the
 * fake driver directly and under libgpuvisor.so, so the difference is what
 * the interposer adds to a launch.  The kernel takes no virtual time, so the
 * fake's launch queue never fills.
 *
 *   bench_launch [LAUNCHES]    prints "ns_per_launch=X" (best of 7 rounds)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/gv_cuda.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUstream s;
    if (n <= 0 || cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&mod, "fake image") || cuModuleGetFunction(&f, mod, "empty_0ns") ||
        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) {
        fprintf(stderr, "bench_launch: driver set-up failed\n");
        return 1;
    }
    double best = 1e30;
    for (int round = 0; round < 7; round++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS) {
                fprintf(stderr, "bench_launch: launch failed\n");
                return 1;
            }
        }
        double per = (now_ns() - t0) / (double)n;
        if (per < best)
            best = per;
        cuStreamSynchronize(s);
    }
    printf("ns_per_launch=%.1f\n", best);
    return 0;
}
