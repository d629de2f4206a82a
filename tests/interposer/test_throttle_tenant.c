/*
 * A compute-bound tenant for the compute-share scripts and benchmark: an
 * application linked to libcuda.so.1 (the fake one) that launches kernels on
 * one stream until a virtual deadline and prints what it got.  Run under
 * libgpuvisor.so it is throttled exactly as a real program would be.
 *
 *   test_throttle_tenant API KERNEL HORIZON_MS [MARK_MS [IDLE_MS]]
 *
 * API: kernel | kernel_ptsz | ex | coop | multi | graph (4 captured nodes).
 * KERNEL: a fake kernel name carrying its run time, e.g. spin_1000us.
 * Prints "kernels=N after_mark=M resume_ns=R end_ns=T share=P": M launches
 * were let through at or after MARK_MS, the first of them at R; P is the
 * kernel time the fake driver ran for this process over the run's virtual
 * time, in percent.
 *
 * GV_TENANT_HOLD=PATH: after printing, create PATH.ready and stay alive (real
 * time, at most 30 s) until PATH exists, so a test can read what the process
 * published in its shared region (gpuvisor ps) while it is still there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_cuda.h"
#include "fake_cuda.h"

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            fprintf(stderr, "tenant: %s failed: %d\n", #call, (int)rc_);                           \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s API KERNEL HORIZON_MS [MARK_MS [IDLE_MS]]\n", argv[0]);
        return 2;
    }
    const char *api = argv[1];
    const char *kname = argv[2];
    uint64_t horizon = strtoull(argv[3], NULL, 10) * 1000000ull;
    uint64_t mark = argc > 4 ? strtoull(argv[4], NULL, 10) * 1000000ull : UINT64_MAX;
    uint64_t idle = argc > 5 ? strtoull(argv[5], NULL, 10) * 1000000ull : 0;

    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUstream s;
    CUgraphExec g = NULL;

    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, "fake image"));
    CHECK(cuModuleGetFunction(&f, mod, kname));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (strcmp(api, "graph") == 0) {
        CUgraph graph;
        CHECK(cuStreamBeginCapture_v2(s, 0));
        for (int i = 0; i < 4; i++)
            CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
        CHECK(cuStreamEndCapture(s, &graph));
        CHECK(cuGraphInstantiateWithFlags(&g, graph, 0));
    }
    uint64_t n = 0, after = 0, resume = 0;
    CUlaunchConfig cfg = {.gridDimX = 132,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 256,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .hStream = s};
    CUDA_LAUNCH_PARAMS mp = {.function = f,
                             .gridDimX = 132,
                             .gridDimY = 1,
                             .gridDimZ = 1,
                             .blockDimX = 256,
                             .blockDimY = 1,
                             .blockDimZ = 1,
                             .hStream = s};
    while (gvfake_clock_ns() < horizon) {
        if (strcmp(api, "kernel") == 0)
            CHECK(cuLaunchKernel(f, 132, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
        else if (strcmp(api, "kernel_ptsz") == 0)
            CHECK(cuLaunchKernel_ptsz(f, 132, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
        else if (strcmp(api, "ex") == 0)
            CHECK(cuLaunchKernelEx(&cfg, f, NULL, NULL));
        else if (strcmp(api, "coop") == 0)
            CHECK(cuLaunchCooperativeKernel(f, 132, 1, 1, 256, 1, 1, 0, s, NULL));
        else if (strcmp(api, "multi") == 0)
            CHECK(cuLaunchCooperativeKernelMultiDevice(&mp, 1, 0));
        else if (strcmp(api, "graph") == 0)
            CHECK(cuGraphLaunch(g, s));
        else {
            fprintf(stderr, "tenant: unknown API '%s'\n", api);
            return 2;
        }
        n++;
        /* A launch that waited counts where it was let through. */
        uint64_t let = gvfake_clock_ns();
        if (let >= mark && after++ == 0)
            resume = let;
        if (n == 1 && idle)
            gvfake_sleep_ns(idle);
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamSynchronize_ptsz(NULL));
    uint64_t end = gvfake_clock_ns();
    printf("kernels=%llu after_mark=%llu resume_ns=%llu end_ns=%llu share=%.1f\n",
           (unsigned long long)n, (unsigned long long)after, (unsigned long long)resume,
           (unsigned long long)end,
           end ? 100.0 * (double)gvfake_process_busy_ns() / (double)end : 0.0);
    fflush(stdout);
    const char *hold = getenv("GV_TENANT_HOLD");
    if (hold != NULL && hold[0] != '\0') {
        char ready[4096];
        snprintf(ready, sizeof(ready), "%s.ready", hold);
        FILE *mark_file = fopen(ready, "w");
        if (mark_file != NULL)
            fclose(mark_file);
        struct timespec tick = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 3000 && access(hold, F_OK) != 0; i++)
            nanosleep(&tick, NULL);
    }
    return 0;
}
