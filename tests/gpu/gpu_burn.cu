// Compute-bound load for the real-GPU suite (tests/gpu/run-gpu-tests.sh):
// launches kernels that keep every SM busy for --kernel-us each, for
// --seconds of wall time, and prints the throughput.  Under libgpuvisor.so
// with CUDA_DEVICE_SM_LIMIT=p the throughput should be p% of an unlimited run.
//
//   gpu_burn [--seconds S] [--kernel-us K] [--graph] [--launch-rate N]
//            [--start-at EPOCH] [--trace-ms B]
//
// --graph captures four kernels of K/4 us into a CUDA graph and launches that.
// --launch-rate N instead times N launches of an empty kernel.
// --start-at waits after the warm-up until that wall-clock time (seconds since
// the epoch), so tenants of a duel measure over the same interval.
// --trace-ms records an event after every 8 kernels and prints, per bin of B
// ms of GPU time from the first kernel, how many kernels had finished in it
// ("trace=c1,c2,..."): where a tenant lost time, not only how much.
// Output: "kernels=N seconds=T rate=R" (R per second; with --graph, N counts
// graph launches).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

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
    double start_at = 0, trace_ms = 0;
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
        else if (!strcmp(argv[i], "--start-at") && i + 1 < argc)
            start_at = atof(argv[++i]);
        else if (!strcmp(argv[i], "--trace-ms") && i + 1 < argc)
            trace_ms = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: gpu_burn [--seconds S] [--kernel-us K] [--graph] "
                            "[--launch-rate N] [--start-at EPOCH] [--trace-ms B]\n");
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
    if (start_at > 0) {
        for (;;) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double left = start_at - ((double)ts.tv_sec + ts.tv_nsec / 1e9);
            if (left <= 0)
                break;
            struct timespec d = {(time_t)left, (long)((left - (time_t)left) * 1e9)};
            nanosleep(&d, nullptr);
        }
    }
    std::vector<cudaEvent_t> marks;
    if (trace_ms > 0) {
        marks.resize((size_t)(seconds * 1e6 / kernel_us / 8) * 2 + 16);
        for (auto &e : marks)
            CHECK(cudaEventCreate(&e));
        CHECK(cudaEventRecord(marks[0], s));
    }
    size_t nmarks = trace_ms > 0 ? 1 : 0;

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
        if (nmarks > 0 && nmarks < marks.size())
            CHECK(cudaEventRecord(marks[nmarks++], s));
    }
    CHECK(cudaStreamSynchronize(s));
    double t = now_s() - t0;
    printf("kernels=%ld seconds=%.3f rate=%.3f\n", n, t, (double)n / t);
    if (nmarks > 1) {
        std::vector<long> bins;
        for (size_t i = 1; i < nmarks; i++) {
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, marks[0], marks[i]));
            size_t b = (size_t)(ms / trace_ms);
            if (bins.size() <= b)
                bins.resize(b + 1, 0);
            bins[b] += 8;
        }
        std::string out;
        for (size_t b = 0; b < bins.size(); b++)
            out += (b ? "," : "") + std::to_string(bins[b]);
        printf("trace_ms=%g trace=%s\n", trace_ms, out.c_str());
    }
    return 0;
}
