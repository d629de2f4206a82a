/*
 * gv_probe: a CUDA/NVML "application" for the interposer tests.
 *
 * It reaches the driver one of the three ways real programs do, chosen by
 * --via: "link" (calls the symbols it is linked against: libcuda.so.1),
 * "dlopen" (dlopen + dlsym, like frameworks and nvidia-smi), or
 * "procaddr:VERSION[:pt]" (dlsym only cuGetProcAddress_v2, then fetch
 * every entry point by base name, like the CUDA runtime).  It then runs the
 * operations given as arguments and prints one TAP line per operation,
 * checking each against the expectation written in the operation.
 *
 *   op      := name[:arg...]      expectations: OK OOM INVAL NS or a number
 *   init                         cuInit + primary context of device 0
 *   ctx:D                        make device D's primary context current
 *   release:D:1|2:EXP  reset:D:1|2:EXP   cuDevicePrimaryCtxRelease / Reset, v1 or _v2
 *   alloc:SIZE:EXP  pitch:W:H:EXP[:PITCH[:ELEMSIZE]]  managed:SIZE:EXP  vmm:SIZE:EXP[:DEV]
 *   vmm-noprop:SIZE:EXP           cuMemCreate with no allocation properties (NULL)
 *   async:SIZE:EXP  async-pt:SIZE:EXP  pool:SIZE:EXP
 *   array:W:H:EXP  array3d:W:H:D:EXP  mipmap:W:H:LEVELS:EXP
 *   free-last:EXP   freeall       free-bogus:EXP (an address never allocated)
 *   info:FREE:TOTAL               cuMemGetInfo (either may be '*')
 *   total:DEV:BYTES               cuDeviceTotalMem
 *   nvml-mem:IDX:USED:TOTAL       nvmlDeviceGetMemoryInfo and _v2
 *   nvml-mig-mem:IDX:MIG:USED:TOTAL  the same for MIG device MIG of GPU IDX
 *                                 (nvmlDeviceGetMigDeviceHandleByIndex)
 *   nvml-uuid-mem:UUID:USED:TOTAL the same for nvmlDeviceGetHandleByUUID(UUID) (GPU- or MIG-)
 *   nvml-free:IDX:FREE            the free bytes both report
 *   nvml-procs:IDX:COUNT          compute processes NVML lists
 *   nvml-util:IDX:COUNT           processes with utilisation samples (size query, then fill)
 *   fill:CHUNK                    allocate until out of memory; prints "# filled N"
 *   hooked:NAME:yes|no            whether NAME, reached via --via, is the interposer's
 *   pa:BASE:VER:FLAGS:SYMBOL[:ST] cuGetProcAddress_v2(BASE) is what dlsym gives for SYMBOL
 *                                 ("-": nothing); ST: the query status it must report too
 *   ctx-create:DEV:EXP  ctx-destroy:EXP   a created context (made current, then popped)
 *   pool-keep:BYTES   release threshold of the probe's pool ("default": the device's current pool)
 *   pool-trim:BYTES   cuMemPoolTrimTo on the probe's pool   pool-destroy:EXP
 *   ipc-export:FILE  ipc-import:FILE:EXP
 *   ext-import:SIZE:EXP           cuImportExternalMemory (an opaque fd from a graphics API)
 *   ext-map:SIZE:EXP              a buffer mapped from the last import (freed with cuMemFree)
 *   sleep:MS
 *   fork                          the remaining ops run in a child; the parent exits at
 *                                 once (a worker a fork server leaves behind)
 *   parent-gone                   waits until the process that forked us has exited
 *   barrier:DIR:N                 waits until N probes reached it: each adds DIR/<pid>,
 *                                 DIR must exist (ops that read shared state only after
 *                                 every tenant is done changing it).  The 120 s bound
 *                                 only keeps a broken run from hanging: a probe that
 *                                 gave up early would free memory the others count.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_cuda.h"
#include "common/gv_nvml.h"

/* field, versioned symbol, base name for cuGetProcAddress, per-thread flavour */
#define PROBE_CUDA(X)                                                                              \
    X(init, cuInit, cuInit, 0)                                                                     \
    X(retain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 0)                               \
    X(release1, cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 0)                           \
    X(release2, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 0)                        \
    X(reset1, cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 0)                                 \
    X(reset2, cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 0)                              \
    X(set_current, cuCtxSetCurrent, cuCtxSetCurrent, 0)                                            \
    X(ctx_create, cuCtxCreate_v2, cuCtxCreate, 0)                                                  \
    X(ctx_destroy, cuCtxDestroy_v2, cuCtxDestroy, 0)                                               \
    X(mem_alloc, cuMemAlloc_v2, cuMemAlloc, 0)                                                     \
    X(mem_pitch, cuMemAllocPitch_v2, cuMemAllocPitch, 0)                                           \
    X(mem_managed, cuMemAllocManaged, cuMemAllocManaged, 0)                                        \
    X(mem_free, cuMemFree_v2, cuMemFree, 0)                                                        \
    X(mem_info, cuMemGetInfo_v2, cuMemGetInfo, 0)                                                  \
    X(total_mem, cuDeviceTotalMem_v2, cuDeviceTotalMem, 0)                                         \
    X(mem_create, cuMemCreate, cuMemCreate, 0)                                                     \
    X(mem_release, cuMemRelease, cuMemRelease, 0)                                                  \
    X(alloc_async, cuMemAllocAsync, cuMemAllocAsync, 0)                                            \
    X(alloc_async_pt, cuMemAllocAsync_ptsz, cuMemAllocAsync, 1)                                    \
    X(alloc_pool, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 0)                             \
    X(free_async, cuMemFreeAsync, cuMemFreeAsync, 0)                                               \
    X(pool_create, cuMemPoolCreate, cuMemPoolCreate, 0)                                            \
    X(pool_destroy, cuMemPoolDestroy, cuMemPoolDestroy, 0)                                         \
    X(pool_trim, cuMemPoolTrimTo, cuMemPoolTrimTo, 0)                                              \
    X(pool_set, cuMemPoolSetAttribute, cuMemPoolSetAttribute, 0)                                   \
    X(pool_current, cuDeviceGetMemPool, cuDeviceGetMemPool, 0)                                     \
    X(array_create, cuArrayCreate_v2, cuArrayCreate, 0)                                            \
    X(array3d_create, cuArray3DCreate_v2, cuArray3DCreate, 0)                                      \
    X(array_destroy, cuArrayDestroy, cuArrayDestroy, 0)                                            \
    X(mipmap_create, cuMipmappedArrayCreate, cuMipmappedArrayCreate, 0)                            \
    X(mipmap_destroy, cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 0)                         \
    X(ipc_get, cuIpcGetMemHandle, cuIpcGetMemHandle, 0)                                            \
    X(ipc_open, cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 0)                                      \
    X(ipc_close, cuIpcCloseMemHandle, cuIpcCloseMemHandle, 0)                                      \
    X(ext_import, cuImportExternalMemory, cuImportExternalMemory, 0)                               \
    X(ext_map, cuExternalMemoryGetMappedBuffer, cuExternalMemoryGetMappedBuffer, 0)                \
    X(ext_destroy, cuDestroyExternalMemory, cuDestroyExternalMemory, 0)

#define PROBE_NVML(X)                                                                              \
    X(nv_init, nvmlInit_v2)                                                                        \
    X(nv_handle, nvmlDeviceGetHandleByIndex_v2)                                                    \
    X(nv_mem, nvmlDeviceGetMemoryInfo)                                                             \
    X(nv_mem2, nvmlDeviceGetMemoryInfo_v2)                                                         \
    X(nv_procs, nvmlDeviceGetComputeRunningProcesses_v3)                                            \
    X(nv_util, nvmlDeviceGetProcessUtilization)                                                    \
    X(nv_mig_handle, nvmlDeviceGetMigDeviceHandleByIndex)                                          \
    X(nv_uuid_handle, nvmlDeviceGetHandleByUUID)

static struct {
#define X(f, sym, base, pt) __typeof__(&sym) f;
    PROBE_CUDA(X)
#undef X
#define X(f, sym) __typeof__(&sym) f;
    PROBE_NVML(X)
#undef X
} api;

enum kind { K_MEM, K_ASYNC, K_VMM, K_ARRAY, K_MIPMAP, K_IPC, K_EXT };
struct item {
    enum kind kind;
    uint64_t handle;
};
static struct item items[4096];
static int nitems;
static int test_no;
static int failures;
static const char *via = "link";
static int pa_version = 13000;
static unsigned pa_flags;
static void *cuda_handle, *nvml_handle;
static CUmemoryPool probe_pool;
static CUcontext probe_ctx, primary_ctx;

static void tap(int ok, const char *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void tap(int ok, const char *op, const char *fmt, ...)
{
    char detail[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    printf("%sok %d - [%s] %s%s%s\n", ok ? "" : "not ", ++test_no, via, op, detail[0] ? ": " : "",
           detail);
    if (!ok)
        failures++;
    fflush(stdout);
}

static uint64_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v;
}

static int expect_code(const char *e)
{
    if (strcmp(e, "OK") == 0) return CUDA_SUCCESS;
    if (strcmp(e, "OOM") == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (strcmp(e, "INVAL") == 0) return CUDA_ERROR_INVALID_VALUE;
    if (strcmp(e, "NS") == 0) return CUDA_ERROR_NOT_SUPPORTED;
    return atoi(e);
}

static int check_rc(const char *op, CUresult rc, const char *exp)
{
    int want = expect_code(exp);
    tap((int)rc == want, op, "got %d, expected %d", (int)rc, want);
    return rc == CUDA_SUCCESS;
}

static void *resolve_cuda(const char *sym, const char *base, int pt)
{
    if (strcmp(via, "link") == 0)
        return NULL; /* filled from the linked symbols */
    if (strncmp(via, "procaddr", 8) == 0) {
        void *fn = NULL;
        static __typeof__(&cuGetProcAddress_v2) gpa;
        if (gpa == NULL)
            gpa = (__typeof__(gpa))dlsym(cuda_handle, "cuGetProcAddress_v2");
        if (gpa == NULL)
            return NULL;
        cuuint64_t flags = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : pa_flags;
        if (gpa(base, &fn, pa_version, flags, NULL) != CUDA_SUCCESS)
            return NULL;
        return fn;
    }
    return dlsym(cuda_handle, sym);
}

static int setup_api(void)
{
    if (strcmp(via, "link") == 0) {
#define X(f, sym, base, pt) api.f = sym;
        PROBE_CUDA(X)
#undef X
#define X(f, sym) api.f = sym;
        PROBE_NVML(X)
#undef X
        return 0;
    }
    cuda_handle = dlopen("libcuda.so.1", RTLD_NOW);
    nvml_handle = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (cuda_handle == NULL || nvml_handle == NULL) {
        printf("not ok 1 - cannot dlopen the driver: %s\n", dlerror());
        return -1;
    }
#define X(f, sym, base, pt) api.f = (__typeof__(api.f))resolve_cuda(#sym, #base, pt);
    PROBE_CUDA(X)
#undef X
#define X(f, sym) api.f = (__typeof__(api.f))dlsym(nvml_handle, #sym);
    PROBE_NVML(X)
#undef X
    return 0;
}

static void push(enum kind k, uint64_t h)
{
    if (nitems < (int)(sizeof(items) / sizeof(items[0])))
        items[nitems++] = (struct item){k, h};
}

static CUresult release(const struct item *it)
{
    switch (it->kind) {
    case K_MEM: return api.mem_free((CUdeviceptr)it->handle);
    case K_ASYNC: return api.free_async((CUdeviceptr)it->handle, NULL);
    case K_VMM: return api.mem_release((CUmemGenericAllocationHandle)it->handle);
    case K_ARRAY: return api.array_destroy((CUarray)(uintptr_t)it->handle);
    case K_MIPMAP: return api.mipmap_destroy((CUmipmappedArray)(uintptr_t)it->handle);
    case K_IPC: return api.ipc_close((CUdeviceptr)it->handle);
    case K_EXT: return api.ext_destroy((CUexternalMemory)(uintptr_t)it->handle);
    }
    return CUDA_ERROR_UNKNOWN;
}

static nvmlDevice_t nvml_dev(unsigned idx)
{
    static int inited;
    nvmlDevice_t d = NULL;
    if (!inited && api.nv_init() == NVML_SUCCESS)
        inited = 1;
    if (api.nv_handle(idx, &d) != NVML_SUCCESS)
        return NULL;
    return d;
}

/* MIG device mig of GPU idx (nvmlDeviceGetMigDeviceHandleByIndex), or NULL. */
static nvmlDevice_t nvml_mig_dev(unsigned idx, unsigned mig)
{
    nvmlDevice_t g = nvml_dev(idx), d = NULL;
    if (g == NULL || api.nv_mig_handle == NULL || api.nv_mig_handle(g, mig, &d) != NVML_SUCCESS)
        return NULL;
    return d;
}

/* A device by uuid ("GPU-..." or "MIG-...", as nvidia-smi -i takes them), or NULL. */
static nvmlDevice_t nvml_uuid_dev(const char *uuid)
{
    nvmlDevice_t d = NULL;
    if (nvml_dev(0) == NULL || api.nv_uuid_handle == NULL || api.nv_uuid_handle(uuid, &d) != NVML_SUCCESS)
        return NULL;
    return d;
}

/* nvmlDeviceGetMemoryInfo and _v2 of handle d. */
static void nvml_mem_of(nvmlDevice_t d, nvmlMemory_t *m, nvmlMemory_v2_t *m2, nvmlReturn_t *r1,
                        nvmlReturn_t *r2)
{
    memset(m, 0, sizeof(*m));
    memset(m2, 0, sizeof(*m2));
    m2->version = nvmlMemory_v2;
    *r1 = d ? api.nv_mem(d, m) : NVML_ERROR_INVALID_ARGUMENT;
    *r2 = d ? api.nv_mem2(d, m2) : NVML_ERROR_INVALID_ARGUMENT;
}

/* nvmlDeviceGetMemoryInfo and _v2 of NVML device idx. */
static void nvml_mem_both(unsigned idx, nvmlMemory_t *m, nvmlMemory_v2_t *m2, nvmlReturn_t *r1,
                          nvmlReturn_t *r2)
{
    nvml_mem_of(nvml_dev(idx), m, m2, r1, r2);
}

static int eq_or_any(const char *want, uint64_t got) { return strcmp(want, "*") == 0 || parse_size(want) == got; }

/* Entries of dir other than . and .. (-1 when it cannot be read). */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* The probe's pid before its fork op (0: none). */
static pid_t forked_from;

static void run_op(char *op)
{
    char orig[256];
    snprintf(orig, sizeof(orig), "%s", op);
    char *a[8] = {0};
    int n = 0;
    for (char *save = NULL, *t = strtok_r(op, ":", &save); t != NULL && n < 8; t = strtok_r(NULL, ":", &save))
        a[n++] = t;
    const char *name = a[0];
#define NEED(k)                                                                                    \
    do {                                                                                           \
        if (n < (k)) {                                                                             \
            tap(0, orig, "needs %d arguments", (k)-1);                                             \
            return;                                                                                \
        }                                                                                          \
    } while (0)
    CUresult rc;
    if (strcmp(name, "init") == 0 || strcmp(name, "ctx") == 0) {
        int dev = n > 1 ? atoi(a[1]) : 0;
        CUcontext ctx;
        rc = api.init(0);
        if (rc == CUDA_SUCCESS)
            rc = api.retain(&ctx, dev);
        if (rc == CUDA_SUCCESS)
            rc = api.set_current(ctx);
        if (rc == CUDA_SUCCESS)
            primary_ctx = ctx;
        check_rc(orig, rc, n > 2 ? a[2] : "OK");
    } else if (strcmp(name, "release") == 0 || strcmp(name, "reset") == 0) {
        NEED(4);
        __typeof__(api.release1) fn = name[2] == 'l' ? (a[2][0] == '1' ? api.release1 : api.release2)
                                                     : (a[2][0] == '1' ? api.reset1 : api.reset2);
        rc = fn != NULL ? fn(atoi(a[1])) : CUDA_ERROR_NOT_FOUND;
        check_rc(orig, rc, a[3]);
    } else if (strcmp(name, "alloc") == 0 || strcmp(name, "managed") == 0) {
        NEED(3);
        CUdeviceptr p = 0;
        rc = name[0] == 'a' ? api.mem_alloc(&p, parse_size(a[1]))
                            : api.mem_managed(&p, parse_size(a[1]), CU_MEM_ATTACH_GLOBAL);
        if (check_rc(orig, rc, a[2]))
            push(K_MEM, p);
    } else if (strcmp(name, "pitch") == 0) {
        NEED(4);
        CUdeviceptr p = 0;
        size_t pitch = 0;
        unsigned elem = n > 5 ? (unsigned)atoi(a[5]) : 4;
        rc = api.mem_pitch(&p, &pitch, parse_size(a[1]), parse_size(a[2]), elem);
        if (check_rc(orig, rc, a[3])) {
            push(K_MEM, p);
            printf("# pitch %zu\n", pitch);
            if (n > 4)
                tap(pitch == parse_size(a[4]), orig, "pitch %zu", pitch);
        }
    } else if (strcmp(name, "vmm") == 0) {
        NEED(3);
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = n > 3 ? atoi(a[3]) : 0;
        CUmemGenericAllocationHandle h = 0;
        rc = api.mem_create(&h, parse_size(a[1]), &prop, 0);
        if (check_rc(orig, rc, a[2]))
            push(K_VMM, h);
    } else if (strcmp(name, "vmm-noprop") == 0) {
        NEED(3);
        CUmemGenericAllocationHandle h = 0;
        rc = api.mem_create(&h, parse_size(a[1]), NULL, 0);
        if (check_rc(orig, rc, a[2]))
            push(K_VMM, h);
    } else if (strcmp(name, "async") == 0 || strcmp(name, "async-pt") == 0) {
        NEED(3);
        CUdeviceptr p = 0;
        rc = (name[5] ? api.alloc_async_pt : api.alloc_async)(&p, parse_size(a[1]), NULL);
        if (check_rc(orig, rc, a[2]))
            push(K_ASYNC, p);
    } else if (strcmp(name, "ctx-create") == 0) {
        NEED(3);
        rc = api.ctx_create(&probe_ctx, 0, atoi(a[1]));
        if (check_rc(orig, rc, a[2]) && api.set_current(primary_ctx) != CUDA_SUCCESS)
            tap(0, orig, "cannot return to the primary context");
    } else if (strcmp(name, "ctx-destroy") == 0) {
        NEED(2);
        if (check_rc(orig, api.ctx_destroy(probe_ctx), a[1]))
            probe_ctx = NULL;
    } else if (strcmp(name, "pool-keep") == 0 || strcmp(name, "pool-trim") == 0 ||
               strcmp(name, "pool-destroy") == 0) {
        NEED(2);
        CUmemoryPool target = probe_pool;
        if (n > 2 && strcmp(a[2], "default") == 0 && api.pool_current(&target, 0) != CUDA_SUCCESS)
            target = NULL;
        cuuint64_t v = parse_size(a[1]);
        if (name[5] == 'k')
            rc = api.pool_set(target, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
        else if (name[5] == 't')
            rc = api.pool_trim(target, (size_t)v);
        else
            rc = api.pool_destroy(target);
        check_rc(orig, rc, name[5] == 'd' ? a[1] : "OK");
        if (name[5] == 'd' && rc == CUDA_SUCCESS)
            probe_pool = NULL;
    } else if (strcmp(name, "pool") == 0) {
        NEED(3);
        CUdeviceptr p = 0;
        CUmemoryPool pool = probe_pool;
        if (pool == NULL) {
            CUmemPoolProps props;
            memset(&props, 0, sizeof(props));
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = n > 3 ? atoi(a[3]) : 0;
            if (api.pool_create(&pool, &props) != CUDA_SUCCESS) {
                tap(0, orig, "cuMemPoolCreate failed");
                return;
            }
            probe_pool = pool;
        }
        rc = api.alloc_pool(&p, parse_size(a[1]), pool, NULL);
        if (check_rc(orig, rc, a[2]))
            push(K_ASYNC, p);
    } else if (strcmp(name, "array") == 0) {
        NEED(4);
        CUDA_ARRAY_DESCRIPTOR d = {parse_size(a[1]), parse_size(a[2]), CU_AD_FORMAT_FLOAT, 1};
        CUarray arr = NULL;
        rc = api.array_create(&arr, &d);
        if (check_rc(orig, rc, a[3]))
            push(K_ARRAY, (uint64_t)(uintptr_t)arr);
    } else if (strcmp(name, "array3d") == 0) {
        NEED(5);
        CUDA_ARRAY3D_DESCRIPTOR d = {parse_size(a[1]), parse_size(a[2]), parse_size(a[3]),
                                     CU_AD_FORMAT_FLOAT, 1, 0};
        CUarray arr = NULL;
        rc = api.array3d_create(&arr, &d);
        if (check_rc(orig, rc, a[4]))
            push(K_ARRAY, (uint64_t)(uintptr_t)arr);
    } else if (strcmp(name, "mipmap") == 0) {
        NEED(5);
        CUDA_ARRAY3D_DESCRIPTOR d = {parse_size(a[1]), parse_size(a[2]), 0, CU_AD_FORMAT_FLOAT, 1, 0};
        CUmipmappedArray m = NULL;
        rc = api.mipmap_create(&m, &d, (unsigned)atoi(a[3]));
        if (check_rc(orig, rc, a[4]))
            push(K_MIPMAP, (uint64_t)(uintptr_t)m);
    } else if (strcmp(name, "free-last") == 0) {
        NEED(2);
        if (nitems == 0) {
            tap(0, orig, "nothing allocated");
            return;
        }
        if (check_rc(orig, release(&items[nitems - 1]), a[1]))
            nitems--;
    } else if (strcmp(name, "freeall") == 0) {
        int bad = 0;
        while (nitems > 0)
            bad += release(&items[--nitems]) != CUDA_SUCCESS;
        tap(bad == 0, orig, "%d releases failed", bad);
    } else if (strcmp(name, "free-bogus") == 0) {
        NEED(2);
        check_rc(orig, api.mem_free((CUdeviceptr)0xdead0000ull), a[1]);
    } else if (strcmp(name, "info") == 0) {
        NEED(3);
        size_t f = 0, t = 0;
        rc = api.mem_info(&f, &t);
        tap(rc == CUDA_SUCCESS && eq_or_any(a[1], f) && eq_or_any(a[2], t), orig,
            "rc %d free %zu total %zu", (int)rc, f, t);
    } else if (strcmp(name, "total") == 0) {
        NEED(3);
        size_t t = 0;
        rc = api.total_mem(&t, atoi(a[1]));
        tap(rc == CUDA_SUCCESS && eq_or_any(a[2], t), orig, "rc %d total %zu", (int)rc, t);
    } else if (strcmp(name, "nvml-mem") == 0) {
        NEED(4);
        nvmlMemory_t m;
        nvmlMemory_v2_t m2;
        nvmlReturn_t r1, r2;
        nvml_mem_both((unsigned)atoi(a[1]), &m, &m2, &r1, &r2);
        tap(r1 == NVML_SUCCESS && r2 == NVML_SUCCESS && eq_or_any(a[2], m.used) &&
                eq_or_any(a[3], m.total) && m.used == m2.used && m.total == m2.total &&
                m.free + m.used <= m.total,
            orig, "rc %d/%d used %llu total %llu free %llu (v2 used %llu total %llu)", r1, r2,
            m.used, m.total, m.free, m2.used, m2.total);
    } else if (strcmp(name, "nvml-mig-mem") == 0 || strcmp(name, "nvml-uuid-mem") == 0) {
        int by_uuid = strcmp(name, "nvml-uuid-mem") == 0;
        int k = by_uuid ? 0 : 1; /* argument shift: uuid takes one slot, gpu:mig two */
        NEED(4 + k);
        nvmlMemory_t m;
        nvmlMemory_v2_t m2;
        nvmlReturn_t r1, r2;
        nvml_mem_of(by_uuid ? nvml_uuid_dev(a[1]) : nvml_mig_dev((unsigned)atoi(a[1]), (unsigned)atoi(a[2])),
                    &m, &m2, &r1, &r2);
        tap(r1 == NVML_SUCCESS && r2 == NVML_SUCCESS && eq_or_any(a[2 + k], m.used) &&
                eq_or_any(a[3 + k], m.total) && m.used == m2.used && m.total == m2.total &&
                m.free + m.used <= m.total,
            orig, "rc %d/%d used %llu total %llu free %llu (v2 used %llu total %llu)", r1, r2,
            m.used, m.total, m.free, m2.used, m2.total);
    } else if (strcmp(name, "nvml-free") == 0) {
        NEED(3);
        nvmlMemory_t m;
        nvmlMemory_v2_t m2;
        nvmlReturn_t r1, r2;
        nvml_mem_both((unsigned)atoi(a[1]), &m, &m2, &r1, &r2);
        tap(r1 == NVML_SUCCESS && r2 == NVML_SUCCESS && eq_or_any(a[2], m.free) &&
                m.free == m2.free,
            orig, "rc %d/%d free %llu (v2 free %llu)", r1, r2, m.free, m2.free);
    } else if (strcmp(name, "nvml-procs") == 0) {
        NEED(3);
        nvmlDevice_t d = nvml_dev((unsigned)atoi(a[1]));
        nvmlProcessInfo_t infos[64];
        unsigned count = 64;
        nvmlReturn_t r = d ? api.nv_procs(d, &count, infos) : NVML_ERROR_INVALID_ARGUMENT;
        tap(r == NVML_SUCCESS && count == (unsigned)atoi(a[2]), orig, "rc %d count %u", r, count);
        for (unsigned i = 0; r == NVML_SUCCESS && i < count; i++)
            printf("# pid %u used %llu\n", infos[i].pid, infos[i].usedGpuMemory);
    } else if (strcmp(name, "nvml-util") == 0) {
        NEED(3);
        nvmlDevice_t d = nvml_dev((unsigned)atoi(a[1]));
        nvmlProcessUtilizationSample_t s[64];
        unsigned count = 0;
        nvmlReturn_t r = d ? api.nv_util(d, NULL, &count, 0) : NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_ERROR_INSUFFICIENT_SIZE && count <= 64)
            r = api.nv_util(d, s, &count, 0);
        unsigned want = (unsigned)atoi(a[2]);
        tap(want == 0 ? r == NVML_ERROR_NOT_FOUND : (r == NVML_SUCCESS && count == want), orig,
            "rc %d count %u", r, count);
    } else if (strcmp(name, "fill") == 0) {
        NEED(2);
        uint64_t chunk = parse_size(a[1]);
        int filled = 0;
        CUdeviceptr p;
        while ((rc = api.mem_alloc(&p, chunk)) == CUDA_SUCCESS) {
            push(K_MEM, p);
            filled++;
        }
        tap(rc == CUDA_ERROR_OUT_OF_MEMORY, orig, "stopped with %d after %d", (int)rc, filled);
        printf("# filled %d\n", filled);
    } else if (strcmp(name, "hooked") == 0) {
        NEED(3);
        void *fn = NULL;
        if (strcmp(via, "link") == 0)
            fn = dlsym(RTLD_DEFAULT, a[1]);
        else
            fn = resolve_cuda(a[1], a[1], 0);
        if (fn == NULL && nvml_handle != NULL)
            fn = dlsym(nvml_handle, a[1]);
        Dl_info info;
        int ours = fn != NULL && dladdr(fn, &info) != 0 && info.dli_fname != NULL &&
                   strstr(info.dli_fname, "libgpuvisor") != NULL;
        tap(ours == (strcmp(a[2], "yes") == 0), orig, "%p in %s", fn,
            fn != NULL && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?");
    } else if (strcmp(name, "pa") == 0) {
        NEED(5);
        __typeof__(&cuGetProcAddress_v2) gpa =
            (__typeof__(gpa))dlsym(cuda_handle ? cuda_handle : RTLD_DEFAULT, "cuGetProcAddress_v2");
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        rc = gpa ? gpa(a[1], &fn, atoi(a[2]), strtoull(a[3], NULL, 0), &st) : CUDA_ERROR_NOT_FOUND;
        void *want = strcmp(a[4], "-") == 0 ? NULL : dlsym(RTLD_DEFAULT, a[4]);
        int st_ok = n < 6 || (int)st == atoi(a[5]);
        tap(fn == want && (want != NULL) == (rc == CUDA_SUCCESS) && st_ok, orig,
            "rc %d status %d got %p want %p", (int)rc, (int)st, fn, want);
    } else if (strcmp(name, "ipc-export") == 0) {
        NEED(2);
        CUipcMemHandle h;
        rc = nitems > 0 ? api.ipc_get(&h, (CUdeviceptr)items[nitems - 1].handle) : CUDA_ERROR_INVALID_VALUE;
        FILE *f = rc == CUDA_SUCCESS ? fopen(a[1], "wb") : NULL;
        int ok = f != NULL && fwrite(&h, sizeof(h), 1, f) == 1;
        if (f)
            fclose(f);
        tap(ok, orig, "rc %d", (int)rc);
    } else if (strcmp(name, "ipc-import") == 0) {
        NEED(3);
        CUipcMemHandle h;
        FILE *f = fopen(a[1], "rb");
        int ok = f != NULL && fread(&h, sizeof(h), 1, f) == 1;
        if (f)
            fclose(f);
        CUdeviceptr p = 0;
        rc = ok ? api.ipc_open(&p, h, 1) : CUDA_ERROR_INVALID_VALUE;
        if (check_rc(orig, rc, a[2]))
            push(K_IPC, p);
    } else if (strcmp(name, "ext-import") == 0) {
        NEED(3);
        CUDA_EXTERNAL_MEMORY_HANDLE_DESC d;
        memset(&d, 0, sizeof(d));
        d.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
        d.handle.fd = -1;
        d.size = parse_size(a[1]);
        CUexternalMemory m = NULL;
        rc = api.ext_import(&m, &d);
        if (check_rc(orig, rc, a[2]))
            push(K_EXT, (uint64_t)(uintptr_t)m);
    } else if (strcmp(name, "ext-map") == 0) {
        NEED(3);
        CUDA_EXTERNAL_MEMORY_BUFFER_DESC b;
        memset(&b, 0, sizeof(b));
        b.size = parse_size(a[1]);
        CUdeviceptr p = 0;
        rc = nitems > 0 && items[nitems - 1].kind == K_EXT
                 ? api.ext_map(&p, (CUexternalMemory)(uintptr_t)items[nitems - 1].handle, &b)
                 : CUDA_ERROR_INVALID_VALUE;
        if (check_rc(orig, rc, a[2]))
            push(K_MEM, p);
    } else if (strcmp(name, "barrier") == 0) {
        NEED(3);
        char mine[4096];
        snprintf(mine, sizeof(mine), "%s/%d", a[1], (int)getpid());
        FILE *f = fopen(mine, "w");
        if (f != NULL)
            fclose(f);
        int want = atoi(a[2]), seen = 0;
        for (int tries = 0; f != NULL && tries < 12000 && (seen = count_entries(a[1])) < want;
             tries++) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        tap(f != NULL && seen >= want, orig, "%d of %d probes arrived", seen, want);
    } else if (strcmp(name, "fork") == 0) {
        fflush(stdout);
        fflush(stderr);
        forked_from = getpid();
        pid_t c = fork();
        if (c < 0) {
            tap(0, orig, "fork failed");
        } else if (c > 0) {
            printf("# forked %d\n", (int)c);
            fflush(stdout);
            _exit(failures ? 1 : 0);
        }
    } else if (strcmp(name, "parent-gone") == 0) {
        int tries = 0;
        for (; forked_from != 0 && getppid() == forked_from && tries < 6000; tries++) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        tap(forked_from != 0 && getppid() != forked_from, orig, "parent %d gone",
            (int)forked_from);
    } else if (strcmp(name, "sleep") == 0) {
        NEED(2);
        struct timespec ts = {atoi(a[1]) / 1000, (atoi(a[1]) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    } else {
        tap(0, orig, "unknown operation");
    }
}

int main(int argc, char **argv)
{
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--via") == 0) {
        via = argv[i + 1];
        i += 2;
    }
    if (strncmp(via, "procaddr", 8) == 0) {
        const char *v = strchr(via, ':');
        if (v != NULL) {
            pa_version = atoi(v + 1);
            if (strstr(v + 1, ":pt") != NULL)
                pa_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        }
    }
    if (setup_api() != 0)
        return 1;
    for (; i < argc; i++)
        run_op(argv[i]);
    return failures ? 1 : 0;
}
