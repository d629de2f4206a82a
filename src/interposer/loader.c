/*
 * How libgpuvisor.so gets between programs and the driver:
 *
 *  - exported hooks with the drivers' own symbol names (LD_PRELOAD,
 *    /etc/ld.so.preload, or programs linked against libcuda.so.1);
 *  - an exported dlsym, so programs and frameworks that dlopen libcuda /
 *    libnvidia-ml and look symbols up themselves (nvidia-smi, the CUDA
 *    runtime's fallbacks) get the hooks too;
 *  - cuGetProcAddress / cuGetProcAddress_v2 hooks, which is how the CUDA
 *    runtime (shared and static) fetches every driver entry point: the real
 *    driver resolves the version and stream flavour, and we replace its
 *    answer with the hook implementing that same function.
 *
 * The real functions come from our own dlopen handles, never from the
 * global scope (which would find the hooks again): real.c, below every hook
 * and this file.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gv_sanitizer.h"
#include "interposer/interposer.h"
#include "interposer/loader_internal.h"

/* --- dispatch tables ----------------------------------------------------- */

struct hook {
    const char *name;
    const char *base;
    int version;
    int per_thread;
    void *hook;
    void **real;
};

static const struct hook cuda_hooks[] = {
#define GV_X(sym, base, ver, pt) {#sym, #base, ver, pt, (void *)sym, (void **)&gv_cu.sym},
    GV_CUDA_HOOKS(GV_X)
#undef GV_X
};

static const struct {
    const char *name;
    void *hook;
    void **real;
} nvml_hooks[] = {
#define GV_X(sym) {#sym, (void *)sym, (void **)&gv_nv.sym},
    GV_NVML_HOOKS(GV_X)
#undef GV_X
};

/* --- dlsym --------------------------------------------------------------- */

GV_NO_ASAN static void *hook_for_name(const char *name)
{
    if (name[0] == 'c' && name[1] == 'u') {
        for (size_t i = 0; i < COUNT(cuda_hooks); i++)
            if (same_name(cuda_hooks[i].name, name))
                return cuda_hooks[i].hook;
    } else if (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l') {
        for (size_t i = 0; i < COUNT(nvml_hooks); i++)
            if (same_name(nvml_hooks[i].name, name))
                return nvml_hooks[i].hook;
    }
    return NULL;
}

/*
 * RTLD_NEXT is relative to the caller's object, which the real dlsym reads
 * from its return address: it must be reached by a tail call so that
 * address is our caller's (verified by test_interposer.sh).  RTLD_NEXT
 * lookups are not redirected to hooks: whoever asks for "the next" function
 * wraps it deliberately.
 */
GV_EXPORT GV_NO_ASAN void *dlsym(void *handle, const char *name)
{
    dlsym_fn rd = real_dlsym();
    if (rd == NULL)
        return NULL; /* glibc's dlsym not found: nothing to answer with */
    if (handle == RTLD_NEXT)
        GV_TAIL return rd(handle, name);
    void *p = rd(handle, name);
    if (p == NULL || in_loader)
        return p;
    void *h = hook_for_name(name);
    return h != NULL ? h : p;
}

/* The same for versioned lookups (the driver libraries' symbols are unversioned,
 * so any version the caller names finds them). */
GV_EXPORT GV_NO_ASAN void *dlvsym(void *handle, const char *name, const char *version)
{
    dlvsym_fn rv = real_dlvsym();
    if (rv == NULL)
        return NULL;
    if (handle == RTLD_NEXT)
        GV_TAIL return rv(handle, name, version);
    void *p = rv(handle, name, version);
    if (p == NULL || in_loader)
        return p;
    void *h = hook_for_name(name);
    return h != NULL ? h : p;
}

/* --- cuGetProcAddress ---------------------------------------------------- */

/*
 * The hook standing for the driver function fn that the driver chose for
 * (symbol, cudaVersion, flags).  Identity with the functions we resolved
 * decides first; the name table is the fallback for drivers whose table
 * entries are not their exported symbols.
 */
static void *hook_for_proc(void *fn, const char *symbol, int cudaVersion, cuuint64_t flags)
{
    for (size_t i = 0; i < COUNT(cuda_hooks); i++)
        if (*cuda_hooks[i].real == fn)
            return cuda_hooks[i].hook;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct hook *best = NULL;
    for (int pass = want_pt; pass >= 0 && best == NULL; pass--)
        for (size_t i = 0; i < COUNT(cuda_hooks); i++) {
            const struct hook *h = &cuda_hooks[i];
            if (h->per_thread == pass && h->version <= cudaVersion &&
                strcmp(h->base, symbol) == 0 && (best == NULL || h->version > best->version))
                best = h;
        }
    return best != NULL ? best->hook : NULL;
}

static CUresult proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status, bool v2)
{
    if (!gv_ip_cuda_ready())
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc;
    if (v2 && gv_cu.cuGetProcAddress_v2 != NULL)
        rc = gv_cu.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
    else if (gv_cu.cuGetProcAddress != NULL) {
        rc = gv_cu.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
        if (status != NULL)
            *status = rc == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS
                                         : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    } else
        return CUDA_ERROR_NOT_SUPPORTED;
    gv_trace("cuGetProcAddress(%s, %d, 0x%llx) = %d", symbol ? symbol : "(null)", cudaVersion,
             (unsigned long long)flags, (int)rc);
    if (rc != CUDA_SUCCESS || pfn == NULL || *pfn == NULL || symbol == NULL)
        return rc;
    void *h = hook_for_proc(*pfn, symbol, cudaVersion, flags);
    if (h != NULL)
        *pfn = h;
    return rc;
}

GV_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    return proc_address(symbol, pfn, cudaVersion, flags, NULL, false);
}

GV_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    return proc_address(symbol, pfn, cudaVersion, flags, status, true);
}

GV_EXPORT CUresult cuInit(unsigned int Flags)
{
    GV_NEED_CU(cuInit);
    if (!gv_ip.cfg_ok)
        return CUDA_ERROR_INVALID_VALUE; /* the reason is in the log */
    return gv_cu.cuInit(Flags);
}
