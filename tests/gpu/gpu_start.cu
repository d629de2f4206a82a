// First start of a CUDA process in a container, for the real-GPU suite
// (tests/gpu/run-gpu-tests.sh): initialise the driver, create the primary
// context and allocate a little memory.  Run several at once on a fresh
// shared region to check region creation under a real driver (what torchrun
// does when it starts eight ranks together).
// Output: "PASS start" or "FAIL start: <step>: <error>"; exit 0 / 1.
//
//   gpu_start [MIB]   (default 32)
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 32;
    void *p = nullptr;
    cudaError_t e = cudaFree(0); // driver init + primary context
    if (e != cudaSuccess) {
        printf("FAIL start: init: %s\n", cudaGetErrorString(e));
        return 1;
    }
    if ((e = cudaMalloc(&p, mib << 20)) != cudaSuccess) {
        printf("FAIL start: cudaMalloc %zu MiB: %s\n", mib, cudaGetErrorString(e));
        return 1;
    }
    if ((e = cudaMemset(p, 1, mib << 20)) != cudaSuccess ||
        (e = cudaDeviceSynchronize()) != cudaSuccess) {
        printf("FAIL start: memset: %s\n", cudaGetErrorString(e));
        return 1;
    }
    cudaFree(p);
    printf("PASS start\n");
    return 0;
}
