// Device-memory limit through the CUDA runtime API, run by
// tests/gpu/run-gpu-tests.sh under `gpuvisor run --gpumem LIMIT_MIB`.
// Prints one "PASS name" / "FAIL name: why" line per check.
//
//   gpu_mem LIMIT_MIB
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

static int failures;
static void check(bool ok, const char *name, const char *fmt = "", double a = 0, double b = 0)
{
    if (ok) {
        printf("PASS %s\n", name);
    } else {
        printf("FAIL %s: ", name);
        printf(fmt, a, b);
        printf("\n");
        failures++;
    }
}

static const size_t MiB = 1 << 20;

// Allocates chunks until the allocator refuses; returns bytes obtained.
template <typename Alloc, typename Free>
static size_t fill(size_t chunk, Alloc alloc, Free release, cudaError_t *last)
{
    std::vector<void *> ptrs;
    size_t total = 0;
    for (;;) {
        void *p = nullptr;
        cudaError_t e = alloc(&p, chunk);
        if (e != cudaSuccess) {
            *last = e;
            cudaGetLastError(); // clear the sticky-free error state
            break;
        }
        ptrs.push_back(p);
        total += chunk;
        if (total > (size_t)1 << 44)
            break;
    }
    for (void *p : ptrs)
        release(p);
    return total;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gpu_mem LIMIT_MIB\n");
        return 2;
    }
    size_t limit = (size_t)atol(argv[1]) * MiB;
    size_t free_b = 0, total_b = 0;
    cudaStream_t s;
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess ||
        cudaStreamCreate(&s) != cudaSuccess) {
        printf("FAIL cuda init\n");
        return 1;
    }

    cudaMemGetInfo(&free_b, &total_b);
    check(total_b == limit, "cudaMemGetInfo total is the limit", "total %.0f MiB, limit %.0f MiB",
          (double)total_b / MiB, (double)limit / MiB);
    check(free_b <= limit, "cudaMemGetInfo free is within the limit", "free %.0f MiB",
          (double)free_b / MiB);

    // The context itself is charged to the slice, so fills are checked
    // against what cudaMemGetInfo says is free just before them.
    cudaError_t last = cudaSuccess;
    cudaMemGetInfo(&free_b, &total_b);
    size_t got = fill(
        64 * MiB, [](void **p, size_t n) { return cudaMalloc(p, n); },
        [](void *p) { cudaFree(p); }, &last);
    check(last == cudaErrorMemoryAllocation, "cudaMalloc past the limit is cudaErrorMemoryAllocation",
          "error %.0f", (double)last);
    check(got <= free_b && got + 128 * MiB >= free_b,
          "cudaMalloc gets what the slice has free, not more", "got %.0f MiB of %.0f MiB free",
          (double)got / MiB, (double)free_b / MiB);

    cudaMemGetInfo(&free_b, &total_b);
    got = fill(
        64 * MiB,
        [s](void **p, size_t n) {
            cudaError_t e = cudaMallocAsync(p, n, s);
            if (e == cudaSuccess)
                e = cudaStreamSynchronize(s);
            return e;
        },
        [s](void *p) {
            cudaFreeAsync(p, s);
            cudaStreamSynchronize(s);
        },
        &last);
    check(got <= free_b && got + 128 * MiB >= free_b,
          "cudaMallocAsync gets what the slice has free, not more",
          "got %.0f MiB of %.0f MiB free", (double)got / MiB, (double)free_b / MiB);

    void *p = nullptr;
    size_t pitch = 0;
    // Rows of 1000 bytes are padded to the pitch: height rows of the real
    // pitch must be charged, so this fits only if pitch*height <= limit.
    size_t height = limit / 1024 + 1024;
    cudaError_t e = cudaMallocPitch(&p, &pitch, 1000, height);
    check(e == cudaErrorMemoryAllocation, "cudaMallocPitch charges pitch x height",
          "error %.0f, pitch %.0f", (double)e, (double)pitch);
    if (e == cudaSuccess)
        cudaFree(p);
    cudaGetLastError();
    e = cudaMallocPitch(&p, &pitch, 1000, 1024);
    check(e == cudaSuccess, "a small cudaMallocPitch succeeds", "error %.0f", (double)e);
    if (e == cudaSuccess)
        cudaFree(p);

    cudaChannelFormatDesc desc = cudaCreateChannelDesc<float4>();
    cudaArray_t arr = nullptr;
    size_t side = 1;
    while (side * side * 16 <= limit * 2)
        side *= 2; // a 2D array of about twice the limit
    e = cudaMalloc3DArray(&arr, &desc, make_cudaExtent(side / 4, side / 4, 16), 0);
    check(e == cudaErrorMemoryAllocation, "cudaMalloc3DArray over the limit fails",
          "error %.0f", (double)e);
    if (e == cudaSuccess)
        cudaFreeArray(arr);
    cudaGetLastError();
    e = cudaMallocArray(&arr, &desc, 1024, 1024, 0);
    check(e == cudaSuccess, "a 16 MiB cudaMallocArray succeeds", "error %.0f", (double)e);
    if (e == cudaSuccess) {
        size_t before = 0, after = 0, t;
        cudaMemGetInfo(&before, &t);
        cudaFreeArray(arr);
        cudaMemGetInfo(&after, &t);
        check(after >= before + 15 * MiB, "freeing the array gives its memory back",
              "free %.0f -> %.0f MiB", (double)before / MiB, (double)after / MiB);
    }
    return failures ? 1 : 0;
}
