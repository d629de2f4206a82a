/*
 * cuMemAlloc_v2 + cuMemFree_v2 round trips against whatever libcuda.so.1
 * the process gets (bench_alloc_overhead.sh runs it with and without
 * libgpuvisor.so preloaded).  Prints "ns_per_roundtrip <median of runs>".
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

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 100000;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot initialise the driver\n");
        return 1;
    }
    enum { RUNS = 7 };
    double per[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_ns();
        for (int i = 0; i < iters; i++) {
            CUdeviceptr p;
            if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) {
                fprintf(stderr, "allocation failed at %d\n", i);
                return 1;
            }
        }
        per[r] = (now_ns() - t0) / iters;
    }
    qsort(per, RUNS, sizeof(per[0]), cmp);
    printf("ns_per_roundtrip %.1f\n", per[RUNS / 2]);
    return 0;
}
