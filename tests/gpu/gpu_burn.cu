// Compute-bound load for the real-GPU suite (tests/gpu/run-gpu-tests.sh):
// launches kernels that keep every SM busy for --kernel-us each, for
// --seconds of wall time, and prints the throughput.  Under libgpuvisor.so
// with CUDA_DEVICE_SM_LIMIT=p the throughput should be p% of an unlimited run.
//
//   gpu_burn [--seconds S] [--kernel-us K] [--graph] [--launch-rate N]
//
// --graph captures four kernels of K/4 us into a CUDA graph and launches that.
// --launch-rate N instead times N launches of an empty kernel.
// Output: "kernels=N seconds=T rate=R" (R per second; with --graph, N counts
// graph launches).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#define CHECK(call)                                                                               \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "gpu_burn: %s: %s\n", #call, cudaGetErrorString(e_));                 \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

__global__ void empty() {}

static double now_s()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int main(int argc, char **argv)
{
    double seconds = 3.0;
    long kernel_us = 1000, rate_n = 0;
    bool graph = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--kernel-us") && i + 1 < argc)
            kernel_us = atol(argv[++i]);
        else if (!strcmp(argv[i], "--graph"))
            graph = true;
        else if (!strcmp(argv[i], "--launch-rate") && i + 1 < argc)
            rate_n = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: gpu_burn [--seconds S] [--kernel-us K] [--graph] "
                            "[--launch-rate N]\n");
            return 2;
        }
    }
    int khz = 0, sms = 0;
    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    if (rate_n > 0) {
        empty<<<1, 32, 0, s>>>();
        CHECK(cudaStreamSynchronize(s));
        double t0 = now_s();
        for (long i = 0; i < rate_n; i++)
            empty<<<1, 32, 0, s>>>();
        CHECK(cudaStreamSynchronize(s));
        double t = now_s() - t0;
        printf("kernels=%ld seconds=%.3f rate=%.1f\n", rate_n, t, (double)rate_n / t);
        return 0;
    }

    // Every SM busy: several blocks per SM, each spinning for the whole kernel.
    int blocks = sms * 4;
    long long cycles = (long long)kernel_us * khz / 1000;
    cudaGraphExec_t exec = nullptr;
    if (graph) {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < 4; i++)
            spin<<<blocks, 256, 0, s>>>(cycles / 4);
        CHECK(cudaStreamEndCapture(s, &g));
        CHECK(cudaGraphInstantiate(&exec, g, 0));
    }
    for (int i = 0; i < 4; i++) // warm-up (module load, clocks)
        spin<<<blocks, 256, 0, s>>>(cycles);
    CHECK(cudaStreamSynchronize(s));

    long n = 0;
    double t0 = now_s();
    while (now_s() - t0 < seconds) {
        for (int i = 0; i < 8; i++, n++) {
            if (graph)
                CHECK(cudaGraphLaunch(exec, s));
            else
                spin<<<blocks, 256, 0, s>>>(cycles);
        }
        CHECK(cudaGetLastError());
    }
    CHECK(cudaStreamSynchronize(s));
    double t = now_s() - t0;
    printf("kernels=%ld seconds=%.3f rate=%.3f\n", n, t, (double)n / t);
    return 0;
}
