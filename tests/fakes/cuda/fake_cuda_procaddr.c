/*
 * cuGetProcAddress / cuGetProcAddress_v2 of the fake driver: resolves a
 * base name for a CUDA version and stream flavour from FAKE_CUDA_PROCS, as
 * the real driver does from its internal table.
 */
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

/* Weak: an entry whose implementation is not built resolves to NULL. */
#define X(base, ver, pt, sym) extern __typeof__(sym) sym __attribute__((weak));
FAKE_CUDA_PROCS(X)
#undef X

struct proc {
    const char *base;
    int version;
    int per_thread;
    void *fn;
};

static const struct proc procs[] = {
#define X(base, ver, pt, sym) {#base, ver, pt, (void *)sym},
    FAKE_CUDA_PROCS(X)
#undef X
};

/*
 * GV_FAKE_PROC_INTERNAL=1: the table hands out internal entry points for the
 * allocation functions instead of the exported symbols (a driver need not
 * give out its exported addresses), so an interposer must know them by the
 * name asked for.  The library is linked -Bsymbolic: these call the fake's
 * own functions, never a preloaded hook of the same name.
 */
static CUresult internal_alloc(CUdeviceptr *p, size_t n) { return cuMemAlloc_v2(p, n); }
static CUresult internal_info(size_t *free_bytes, size_t *total)
{
    return cuMemGetInfo_v2(free_bytes, total);
}
static CUresult internal_alloc_async(CUdeviceptr *p, size_t n, CUstream s)
{
    return cuMemAllocAsync(p, n, s);
}
static CUresult internal_alloc_async_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
    return cuMemAllocAsync_ptsz(p, n, s);
}

static void *entry_point(void *fn)
{
    const char *v = getenv("GV_FAKE_PROC_INTERNAL");
    if (v == NULL || strcmp(v, "1") != 0)
        return fn;
    if (fn == (void *)cuMemAlloc_v2)
        return (void *)internal_alloc;
    if (fn == (void *)cuMemGetInfo_v2)
        return (void *)internal_info;
    if (fn == (void *)cuMemAllocAsync)
        return (void *)internal_alloc_async;
    if (fn == (void *)cuMemAllocAsync_ptsz)
        return (void *)internal_alloc_async_ptsz;
    return fn;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc *best = NULL;
    int found_name = 0;
    /* Prefer the requested stream flavour; fall back to the plain entry
     * for functions that have no per-thread variant. */
    for (int pass = want_pt; pass >= 0 && best == NULL; pass--) {
        for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
            const struct proc *p = &procs[i];
            if (strcmp(p->base, symbol) != 0 || p->per_thread != pass)
                continue;
            found_name = 1;
            if (p->version <= cudaVersion && (best == NULL || p->version > best->version))
                best = p;
        }
    }
    if (best == NULL || best->fn == NULL) {
        if (status != NULL)
            *status = found_name && best == NULL ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                                 : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = entry_point(best->fn);
    if (status != NULL)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
