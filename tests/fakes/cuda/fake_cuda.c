/*
 * Fake libcuda.so.1 (tests only): devices, contexts and every device-memory
 * allocation path with real bookkeeping, so the interposer can be tested
 * the way applications reach a driver.  Execution (streams, kernels,
 * graphs, virtual clock) lives in fake_cuda_exec.c.
 *
 * Faithful where the interposer depends on it: error codes, CUDA_VISIBLE_DEVICES
 * ordinals, per-thread context stacks, pitch rounding, VMM granularity,
 * pool reservation/trim, out-of-memory when the simulated card is full.
 */
#include "fake_cuda.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PITCH_ALIGN 512u /* GV_FAKE_PITCH_ALIGN overrides */
#define VMM_GRANULARITY (2u << 20)
#define MAX_CTX_STACK 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int visible[FAKE_MAX_GPUS]; /* CUDA ordinal -> physical index */
static int nvisible;
static struct CUctx_st primary[FAKE_MAX_GPUS];
static _Thread_local struct CUctx_st *ctx_stack[MAX_CTX_STACK];
static _Thread_local int ctx_depth;

/* --- errors ------------------------------------------------------------- */
#define FAKE_ERRORS(X)                                                                             \
    X(CUDA_SUCCESS, "no error")                                                                    \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                                \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                   \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                          \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                  \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                         \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                        \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                        \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                              \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                                    \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                         \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                         \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define X(code, text)                                                                              \
    case code: *pStr = text; return CUDA_SUCCESS;
        FAKE_ERRORS(X)
#undef X
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define X(code, text)                                                                              \
    case code: *pStr = #code; return CUDA_SUCCESS;
        FAKE_ERRORS(X)
#undef X
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

/* --- init and devices ---------------------------------------------------- */

/*
 * The driver's enumeration order.  NVML (and CUDA_DEVICE_ORDER=PCI_BUS_ID)
 * enumerate by PCI bus; the driver's default, FASTEST_FIRST, may put another
 * GPU first.  GV_FAKE_CUDA_ORDER (NVML indices, comma-separated) models that:
 * the listed GPUs come first in that order, the others follow in NVML order.
 */
static int enumeration_order(int *order, int n)
{
    int count = 0;
    bool used[FAKE_MAX_GPUS] = {false};
    const char *want = getenv("GV_FAKE_CUDA_ORDER");
    const char *dev_order = getenv("CUDA_DEVICE_ORDER");
    if (want != NULL && (dev_order == NULL || strcmp(dev_order, "PCI_BUS_ID") != 0)) {
        for (const char *p = want; *p != '\0';) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            if (v >= 0 && v < n && !used[v]) {
                used[v] = true;
                order[count++] = (int)v;
            }
            p = *end == ',' ? end + 1 : end;
            if (*end != ',')
                break;
        }
    }
    for (int i = 0; i < n; i++)
        if (!used[i])
            order[count++] = i;
    return count;
}

/* CUDA_VISIBLE_DEVICES: indices (in the driver's enumeration order) or uuid
 * prefixes; the first bad entry ends the list. */
static void parse_visible(void)
{
    int order[FAKE_MAX_GPUS];
    int n = enumeration_order(order, fake_gpu_count());
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    nvisible = 0;
    if (cvd == NULL) {
        for (int i = 0; i < n; i++)
            visible[nvisible++] = order[i];
        return;
    }
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", cvd);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL && nvisible < FAKE_MAX_GPUS;
         tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok))
            tok++;
        int found = -1;
        if (strncmp(tok, "GPU-", 4) == 0 || strncmp(tok, "MIG-", 4) == 0) {
            for (int i = 0; i < n; i++) {
                const struct fake_gpu *g = fake_gpu_get(i);
                /* A GPU in MIG mode is reached through its instance's uuid only. */
                const char *name = g->mig[0] ? g->mig : g->uuid;
                if (strncmp(name, tok, strlen(tok)) == 0)
                    found = i;
            }
        } else if (isdigit((unsigned char)*tok)) {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end == '\0' && v >= 0 && v < n)
                found = order[v];
        }
        if (found < 0)
            break;
        visible[nvisible++] = found;
    }
}

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!initialized) {
        parse_visible();
        for (int i = 0; i < nvisible; i++)
            primary[i] = (struct CUctx_st){.device = i, .phys = visible[i], .primary = true};
        initialized = 1;
    }
    pthread_mutex_unlock(&lock);
    return nvisible > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult fake_cuda_check_init(void)
{
    return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                          : CUDA_ERROR_NOT_INITIALIZED;
}

int fake_cuda_device_count(void) { return fake_cuda_check_init() == CUDA_SUCCESS ? nvisible : 0; }

int fake_cuda_phys(CUdevice dev)
{
    return dev >= 0 && dev < fake_cuda_device_count() ? visible[dev] : -1;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const char *v = getenv("GV_FAKE_CUDA_DRIVER_VERSION");
    *driverVersion = v != NULL ? atoi(v) : GV_CUDA_API_VERSION;
    return CUDA_SUCCESS;
}

#define CHECK_INIT()                                                                               \
    do {                                                                                           \
        CUresult rc_ = fake_cuda_check_init();                                                     \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            return rc_;                                                                            \
    } while (0)

#define CHECK_DEV(dev, phys_out)                                                                   \
    do {                                                                                           \
        CHECK_INIT();                                                                              \
        if (((phys_out) = fake_cuda_phys(dev)) < 0)                                                \
            return CUDA_ERROR_INVALID_DEVICE;                                                      \
    } while (0)

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    int phys;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(ordinal, phys);
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    *count = nvisible;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    int phys;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    snprintf(name, (size_t)len, "%s", fake_gpu_get(phys)->name);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    int phys;
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    const struct fake_gpu *g = fake_gpu_get(phys);
    /* A MIG compute instance is named by its own uuid (since CUDA 11.4's _v2). */
    memcpy(uuid->bytes, g->mig[0] ? g->mig_bytes : g->uuid_bytes, 16);
    return CUDA_SUCCESS;
}

/* The v1 ABI names the GPU, also for a MIG compute instance on it. */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    int phys;
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    memcpy(uuid->bytes, fake_gpu_get(phys)->uuid_bytes, 16);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    int phys;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    *bytes = fake_gpu_cuda_total(phys);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    int phys;
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    const struct fake_gpu *g = fake_gpu_get(phys);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = g->sm_count; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = (int)g->pci_bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = (int)g->pci_device; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = (int)g->pci_domain; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = g->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = g->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *pi = 1; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    int phys;
    if (pciBusId == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    const struct fake_gpu *g = fake_gpu_get(phys);
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", g->pci_domain, g->pci_bus, g->pci_device);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    unsigned dom, bus, devno;
    if (dev == NULL || pciBusId == NULL || sscanf(pciBusId, "%x:%x:%x", &dom, &bus, &devno) != 3)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    for (int i = 0; i < nvisible; i++) {
        const struct fake_gpu *g = fake_gpu_get(visible[i]);
        if (g->pci_domain == dom && g->pci_bus == bus && g->pci_device == devno) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* --- contexts ------------------------------------------------------------ */

struct CUctx_st *fake_cuda_current(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

bool fake_cuda_ctx_valid(const struct CUctx_st *ctx)
{
    if (ctx == NULL || ctx->destroyed)
        return false;
    return !ctx->primary || ctx->refs > 0;
}

/* Device memory the driver takes for each context (GV_FAKE_CTX_MEMORY, default 0). */
static uint64_t ctx_memory(void)
{
    const char *v = getenv("GV_FAKE_CTX_MEMORY");
    char *end;
    unsigned long long b = v != NULL ? strtoull(v, &end, 10) : 0;
    if (v != NULL && (*end == 'm' || *end == 'M'))
        b <<= 20;
    return b;
}

/*
 * GV_FAKE_CTX_GATE=<dir>: the n-th context this process creates that takes
 * memory holds the creating call, after the memory is taken, until
 * <dir>/go.<n> exists (announcing itself as <dir>/ctx.<pid>.<n>), so a test
 * can let a neighbour allocate inside the window in which the interposer
 * measures the context.  Bounded at 60 s.
 */
static void ctx_gate(void)
{
    static _Atomic int count;
    const char *dir = getenv("GV_FAKE_CTX_GATE");
    if (dir == NULL || *dir == '\0' || ctx_memory() == 0)
        return;
    int n = atomic_fetch_add(&count, 1) + 1;
    char path[4096];
    snprintf(path, sizeof(path), "%s/ctx.%d.%d", dir, (int)getpid(), n);
    FILE *f = fopen(path, "w");
    if (f != NULL)
        fclose(f);
    snprintf(path, sizeof(path), "%s/go.%d", dir, n);
    for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++)
        usleep(1000);
}

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
    int phys;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    if (!fake_gpu_mem_charge(phys, ctx_memory()))
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_gate();
    struct CUctx_st *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fake_gpu_mem_uncharge(phys, ctx_memory());
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->device = dev;
    c->phys = phys;
    if (ctx_depth >= MAX_CTX_STACK) {
        free(c);
        fake_gpu_mem_uncharge(phys, ctx_memory());
        return CUDA_ERROR_INVALID_VALUE;
    }
    ctx_stack[ctx_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    return ctx_create(pctx, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                        unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && paramsArray == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    (void)flags;
    return ctx_create(pctx, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                        CUdevice dev)
{
    (void)ctxCreateParams;
    (void)flags;
    return ctx_create(pctx, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CHECK_INIT();
    if (!fake_cuda_ctx_valid(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < ctx_depth; i++) {
        if (ctx_stack[i] == ctx) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1], sizeof(ctx_stack[0]) * (size_t)(ctx_depth - i - 1));
            ctx_depth--;
            i--;
        }
    }
    /* Contexts are kept (marked destroyed) so stale handles stay detectable. */
    ctx->destroyed = true;
    fake_gpu_mem_uncharge(ctx->phys, ctx_memory());
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    *pctx = fake_cuda_current();
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CHECK_INIT();
    if (ctx == NULL) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!fake_cuda_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CHECK_INIT();
    if (!fake_cuda_ctx_valid(ctx) || ctx_depth >= MAX_CTX_STACK)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CHECK_INIT();
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = ctx_stack[--ctx_depth];
    if (pctx != NULL)
        *pctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    struct CUctx_st *c = fake_cuda_current();
    if (!fake_cuda_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    int phys;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    pthread_mutex_lock(&lock);
    /* The primary context comes to life (and takes memory) at its first retain. */
    CUresult rc = CUDA_SUCCESS;
    bool born = primary[dev].refs == 0;
    if (born && !fake_gpu_mem_charge(phys, ctx_memory()))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        primary[dev].refs++;
    pthread_mutex_unlock(&lock);
    if (rc == CUDA_SUCCESS && born)
        ctx_gate();
    if (rc == CUDA_SUCCESS)
        *pctx = &primary[dev];
    return rc;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    int phys;
    CHECK_DEV(dev, phys);
    pthread_mutex_lock(&lock);
    CUresult rc = primary[dev].refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS && --primary[dev].refs == 0)
        fake_gpu_mem_uncharge(phys, ctx_memory());
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The pre-11.0 ABI (the CUDA runtime still asks for it): same behaviour here. */
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    int phys;
    CHECK_DEV(dev, phys);
    pthread_mutex_lock(&lock);
    if (primary[dev].refs > 0) {
        primary[dev].refs = 0;
        fake_gpu_mem_uncharge(phys, ctx_memory());
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* --- memory bookkeeping -------------------------------------------------- */

enum alloc_kind { K_DEVICE, K_MANAGED, K_ASYNC, K_IPC, K_EXTERNAL, K_RESERVE };

struct alloc {
    CUdeviceptr base;
    size_t size;    /* what the application asked for / sees */
    size_t charged; /* device bytes the simulated card spends */
    int phys;
    enum alloc_kind kind;
    struct CUmemPoolHandle_st *pool;
};

struct CUmemPoolHandle_st {
    int phys;
    uint64_t reserved; /* bytes the pool holds on the card */
    uint64_t used;     /* bytes handed out */
    uint64_t release_threshold;
    bool is_default;
    bool destroyed; /* kept, like contexts, so stale handles are detected */
};

struct CUarray_st {
    int phys;
    size_t bytes;
};
struct CUmipmappedArray_st {
    int phys;
    size_t bytes;
};
struct CUextMemory_st {
    int phys;
    unsigned long long size;
};

struct vmm_handle {
    CUmemGenericAllocationHandle id;
    size_t size;
    int phys;
    int maps;
};

static struct alloc *allocs;
static size_t nallocs, cap_allocs;
static struct vmm_handle *handles;
static size_t nhandles, cap_handles;
static CUdeviceptr next_va[FAKE_MAX_GPUS + 1];
static CUmemGenericAllocationHandle next_handle = 1;
static struct CUmemPoolHandle_st default_pools[FAKE_MAX_GPUS];
static struct CUmemPoolHandle_st *current_pools[FAKE_MAX_GPUS]; /* NULL: the default pool */

/* Fresh, never reused, 512-byte aligned device addresses per GPU. */
static CUdeviceptr new_va(int phys, size_t size)
{
    int slot = phys < 0 ? FAKE_MAX_GPUS : phys;
    if (next_va[slot] == 0)
        next_va[slot] = 0x7f0000000000ull + ((CUdeviceptr)slot << 36);
    CUdeviceptr va = next_va[slot];
    next_va[slot] += ((size + 0xfffu) & ~(CUdeviceptr)0xfffu) + 0x1000u;
    return va;
}

static struct alloc *add_alloc(void)
{
    if (nallocs == cap_allocs) {
        size_t ncap = cap_allocs ? cap_allocs * 2 : 64;
        struct alloc *n = realloc(allocs, ncap * sizeof(*n));
        if (n == NULL)
            return NULL;
        allocs = n;
        cap_allocs = ncap;
    }
    struct alloc *a = &allocs[nallocs++];
    memset(a, 0, sizeof(*a));
    return a;
}

static struct alloc *find_alloc(CUdeviceptr p)
{
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].base == p)
            return &allocs[i];
    return NULL;
}

static void drop_alloc(struct alloc *a) { *a = allocs[--nallocs]; }

static CUresult current_phys(int *phys, CUdevice *dev)
{
    CHECK_INIT();
    struct CUctx_st *c = fake_cuda_current();
    if (!fake_cuda_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *phys = c->phys;
    if (dev != NULL)
        *dev = c->device;
    return CUDA_SUCCESS;
}

static CUresult record(CUdeviceptr *dptr, size_t size, size_t charged, int phys,
                       enum alloc_kind kind, struct CUmemPoolHandle_st *pool)
{
    if (charged > 0 && !fake_gpu_mem_charge(phys, charged))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct alloc *a = add_alloc();
    if (a == NULL) {
        fake_gpu_mem_uncharge(phys, charged);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = new_va(phys, size);
    a->size = size;
    a->charged = charged;
    a->phys = phys;
    a->kind = kind;
    a->pool = pool;
    *dptr = a->base;
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    int phys;
    if (free_bytes == NULL || total == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = current_phys(&phys, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t t = fake_gpu_cuda_total(phys), used = fake_gpu_mem_used(phys);
    *total = t;
    *free_bytes = used < t ? t - used : 0;
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    int phys;
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = current_phys(&phys, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    rc = record(dptr, bytesize, bytesize, phys, K_DEVICE, NULL);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    int phys;
    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = current_phys(&phys, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* The driver chooses the pitch (its alignment differs by GPU and may
     * grow for wide rows): the interposer can only guess it up front. */
    const char *pa = getenv("GV_FAKE_PITCH_ALIGN");
    size_t align = pa != NULL && atoi(pa) > 0 ? (size_t)atoi(pa) : PITCH_ALIGN;
    size_t pitch = (WidthInBytes + align - 1) / align * align;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    rc = record(dptr, pitch * Height, pitch * Height, phys, K_DEVICE, NULL);
    pthread_mutex_unlock(&lock);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    int phys;
    if (dptr == NULL || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = current_phys(&phys, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Managed pages migrate on demand: the card is not charged up front. */
    pthread_mutex_lock(&lock);
    rc = record(dptr, bytesize, 0, phys, K_MANAGED, NULL);
    pthread_mutex_unlock(&lock);
    return rc;
}

static void pool_shrink(struct CUmemPoolHandle_st *p, uint64_t keep);

/* Releases a live allocation; false when it is not freeable by cuMemFree*. */
static bool free_locked(struct alloc *a)
{
    if (a->kind == K_ASYNC) {
        struct CUmemPoolHandle_st *p = a->pool;
        p->used -= a->size;
        drop_alloc(a);
        /* Freed memory stays in the pool up to the release threshold. */
        pool_shrink(p, p->release_threshold);
        return true;
    }
    if (a->kind == K_DEVICE || a->kind == K_MANAGED || a->kind == K_EXTERNAL) {
        fake_gpu_mem_uncharge(a->phys, a->charged);
        drop_alloc(a);
        return true;
    }
    return false;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CHECK_INIT();
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct alloc *a = find_alloc(dptr);
    CUresult rc = a != NULL && free_locked(a) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    for (size_t i = 0; i < nallocs; i++) {
        if (dptr >= allocs[i].base && dptr < allocs[i].base + allocs[i].size) {
            if (pbase != NULL)
                *pbase = allocs[i].base;
            if (psize != NULL)
                *psize = allocs[i].size;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* --- virtual memory management ----------------------------------------- */

static struct vmm_handle *find_handle(CUmemGenericAllocationHandle id)
{
    for (size_t i = 0; i < nhandles; i++)
        if (handles[i].id == id)
            return &handles[i];
    return NULL;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    (void)option;
    if (granularity == NULL || prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    *granularity = VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (handle == NULL || prop == NULL || flags != 0 || size == 0 || size % VMM_GRANULARITY != 0 ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    int phys = fake_cuda_phys(prop->location.id);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (nhandles == cap_handles) {
        size_t ncap = cap_handles ? cap_handles * 2 : 32;
        struct vmm_handle *n = realloc(handles, ncap * sizeof(*n));
        if (n == NULL)
            goto out;
        handles = n;
        cap_handles = ncap;
    }
    if (!fake_gpu_mem_charge(phys, size))
        goto out;
    handles[nhandles] = (struct vmm_handle){.id = next_handle++, .size = size, .phys = phys};
    *handle = handles[nhandles++].id;
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    struct vmm_handle *h = find_handle(handle);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (h != NULL) {
        /* The card's memory returns when the last mapping goes too; the
         * fake releases it here, which is when applications stop owning it. */
        fake_gpu_mem_uncharge(h->phys, h->size);
        *h = handles[--nhandles];
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    (void)alignment;
    (void)addr;
    if (ptr == NULL || size == 0 || size % VMM_GRANULARITY != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    CUresult rc = record(ptr, size, 0, -1, K_RESERVE, NULL);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    struct alloc *a = find_alloc(ptr);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (a != NULL && a->kind == K_RESERVE && a->size == size) {
        drop_alloc(a);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static bool in_reserved(CUdeviceptr ptr, size_t size)
{
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].kind == K_RESERVE && ptr >= allocs[i].base &&
            ptr + size <= allocs[i].base + allocs[i].size)
            return true;
    return false;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    CHECK_INIT();
    if (flags != 0 || offset != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct vmm_handle *h = find_handle(handle);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (h != NULL && size <= h->size && in_reserved(ptr, size)) {
        h->maps++;
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    CUresult rc = in_reserved(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CHECK_INIT();
    if (desc == NULL || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = in_reserved(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* --- stream-ordered allocator ----------------------------------------- */

/* Gives pool memory back to the card down to keep (never below what is in use). */
static void pool_shrink(struct CUmemPoolHandle_st *p, uint64_t keep)
{
    if (keep < p->used)
        keep = p->used;
    if (p->reserved > keep) {
        fake_gpu_mem_uncharge(p->phys, p->reserved - keep);
        p->reserved = keep;
    }
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t size, struct CUmemPoolHandle_st *p)
{
    if (dptr == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t cached = p->reserved - p->used;
    uint64_t grow = size > cached ? size - cached : 0;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (grow == 0 || fake_gpu_mem_charge(p->phys, grow)) {
        p->reserved += grow;
        rc = record(dptr, size, 0, p->phys, K_ASYNC, p);
        if (rc == CUDA_SUCCESS)
            p->used += size;
        else
            pool_shrink(p, p->reserved - grow);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static struct CUmemPoolHandle_st *default_pool(int dev)
{
    struct CUmemPoolHandle_st *p = &default_pools[dev];
    p->phys = fake_cuda_phys(dev);
    p->is_default = true;
    return p;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    int phys;
    if (pool_out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    pthread_mutex_lock(&lock);
    *pool_out = default_pool(dev);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    int phys;
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_DEV(dev, phys);
    pthread_mutex_lock(&lock);
    *pool = current_pools[dev] != NULL ? current_pools[dev] : default_pool(dev);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    int phys;
    CHECK_DEV(dev, phys);
    if (pool == NULL || pool->phys != phys)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    current_pools[dev] = pool;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* cuMemAllocAsync allocates from the device's current pool. */
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    (void)hStream;
    int phys;
    CUdevice dev;
    CUresult rc = current_phys(&phys, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    struct CUmemPoolHandle_st *p = current_pools[dev] != NULL ? current_pools[dev] : default_pool(dev);
    pthread_mutex_unlock(&lock);
    return pool_alloc(dptr, bytesize, p);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return cuMemAllocAsync(dptr, bytesize, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream)
{
    (void)hStream;
    CHECK_INIT();
    if (pool == NULL || pool->destroyed)
        return CUDA_ERROR_INVALID_VALUE;
    return pool_alloc(dptr, bytesize, pool);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream)
{
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    (void)hStream;
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    struct alloc *a = find_alloc(dptr);
    CUresult rc = a != NULL && free_locked(a) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return cuMemFreeAsync(dptr, hStream);
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    if (pool == NULL || poolProps == NULL || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_INIT();
    int phys = fake_cuda_phys(poolProps->location.id);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->phys = phys;
    *pool = p;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CHECK_INIT();
    if (pool == NULL || pool->is_default || pool->destroyed)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    /* Allocations still live keep their memory until freed (as the driver does). */
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].pool == pool) {
            allocs[i].pool = NULL;
            allocs[i].kind = K_DEVICE;
            allocs[i].charged = allocs[i].size;
            pool->used -= allocs[i].size;
            pool->reserved -= allocs[i].size;
        }
    pool_shrink(pool, 0);
    for (int d = 0; d < FAKE_MAX_GPUS; d++)
        if (current_pools[d] == pool)
            current_pools[d] = NULL;
    pool->destroyed = true;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CHECK_INIT();
    if (pool == NULL || pool->destroyed)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    pool_shrink(pool, minBytesToKeep);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CHECK_INIT();
    if (pool == NULL || value == NULL || pool->destroyed)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CHECK_INIT();
    if (pool == NULL || value == NULL || attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD ||
        pool->destroyed)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    pool->release_threshold = *(cuuint64_t *)value;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* --- arrays -------------------------------------------------------------- */

/* Device bytes of an array: rows padded to the pitch alignment. */
static size_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch)
{
    size_t eb = gv_cuda_format_bytes(f);
    if (eb == 0 || (ch != 1 && ch != 2 && ch != 4) || w == 0)
        return 0;
    size_t row = (w * eb * ch + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    return row * (h ? h : 1) * (d ? d : 1);
}

static CUresult array_create(int *phys_out, size_t bytes)
{
    int phys;
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = current_phys(&phys, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!fake_gpu_mem_charge(phys, bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phys_out = phys;
    return CUDA_SUCCESS;
}

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (pHandle == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->bytes = array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels);
    CUresult rc = array_create(&a->phys, a->bytes);
    if (rc != CUDA_SUCCESS) {
        free(a);
        return rc;
    }
    *pHandle = a;
    return CUDA_SUCCESS;
}

CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (pHandle == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->bytes = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels);
    CUresult rc = array_create(&a->phys, a->bytes);
    if (rc != CUDA_SUCCESS) {
        free(a);
        return rc;
    }
    *pHandle = a;
    return CUDA_SUCCESS;
}

CUresult cuArrayDestroy(CUarray hArray)
{
    CHECK_INIT();
    if (hArray == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    fake_gpu_mem_uncharge(hArray->phys, hArray->bytes);
    free(hArray);
    return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                unsigned int numMipmapLevels)
{
    if (pHandle == NULL || d == NULL || numMipmapLevels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = 0;
    for (unsigned l = 0; l < numMipmapLevels; l++) {
        size_t w = d->Width >> l, h = d->Height >> l, z = d->Depth >> l;
        size_t b = array_bytes(w ? w : 1, d->Height ? (h ? h : 1) : 0,
                               d->Depth ? (z ? z : 1) : 0, d->Format, d->NumChannels);
        if (b == 0)
            return CUDA_ERROR_INVALID_VALUE;
        total += b;
    }
    struct CUmipmappedArray_st *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->bytes = total;
    CUresult rc = array_create(&m->phys, total);
    if (rc != CUDA_SUCCESS) {
        free(m);
        return rc;
    }
    *pHandle = m;
    return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    CHECK_INIT();
    if (hMipmappedArray == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    fake_gpu_mem_uncharge(hMipmappedArray->phys, hMipmappedArray->bytes);
    free(hMipmappedArray);
    return CUDA_SUCCESS;
}

/* --- IPC and external memory (imported: never charged to the importer) -- */

struct ipc_payload {
    uint32_t magic;
    int32_t pid;
    uint64_t base;
    uint64_t size;
    int32_t phys;
};
#define IPC_MAGIC 0x43504946u

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CHECK_INIT();
    if (pHandle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct alloc *a = find_alloc(dptr);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (a != NULL && a->kind == K_DEVICE) {
        struct ipc_payload p = {IPC_MAGIC, (int32_t)getpid(), a->base, a->size, a->phys};
        memset(pHandle, 0, sizeof(*pHandle));
        memcpy(pHandle->reserved, &p, sizeof(p));
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    (void)Flags;
    int phys;
    if (pdptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = current_phys(&phys, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct ipc_payload p;
    memcpy(&p, handle.reserved, sizeof(p));
    if (p.magic != IPC_MAGIC || p.phys != phys)
        return CUDA_ERROR_INVALID_VALUE;
    if (p.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* the driver refuses opening one's own handle */
    pthread_mutex_lock(&lock);
    rc = record(pdptr, p.size, 0, phys, K_IPC, NULL);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CHECK_INIT();
    pthread_mutex_lock(&lock);
    struct alloc *a = find_alloc(dptr);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (a != NULL && a->kind == K_IPC) {
        drop_alloc(a);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuImportExternalMemory(CUexternalMemory *extMem_out,
                                const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *memHandleDesc)
{
    int phys;
    if (extMem_out == NULL || memHandleDesc == NULL || memHandleDesc->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = current_phys(&phys, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUextMemory_st *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->phys = phys;
    m->size = memHandleDesc->size;
    *extMem_out = m;
    return CUDA_SUCCESS;
}

CUresult cuExternalMemoryGetMappedBuffer(CUdeviceptr *devPtr, CUexternalMemory extMem,
                                         const CUDA_EXTERNAL_MEMORY_BUFFER_DESC *bufferDesc)
{
    CHECK_INIT();
    if (devPtr == NULL || extMem == NULL || bufferDesc == NULL || bufferDesc->size == 0 ||
        bufferDesc->offset + bufferDesc->size > extMem->size)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = record(devPtr, bufferDesc->size, 0, extMem->phys, K_EXTERNAL, NULL);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuDestroyExternalMemory(CUexternalMemory extMem)
{
    CHECK_INIT();
    if (extMem == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    free(extMem);
    return CUDA_SUCCESS;
}
