/*
 * Context creation overhead: the driver takes device memory for every
 * context (hundreds of MiB on current GPUs), which is the slice's memory
 * like any allocation.  Each context a process creates, and each primary
 * context it brings to life, is charged:
 *   - GPUVISOR_CONTEXT_RESERVE[_<i>] bytes when configured (reserved before
 *     the driver is asked, like an allocation), else
 *   - what the driver took for this process: the change of this process's
 *     own entry in NVML's per-process list across the creation (never the
 *     card's used memory, which moves with every neighbour's allocation),
 *     less what this process's other threads charged in the meantime.
 * Context creation is serialised across the container (gv_shm_ctx_serialize)
 * so that the one process that appears in NVML's list while we create is
 * us: that is how a process in a container learns its host pid.  When it
 * cannot tell (another container's process appeared in the same window),
 * the card's context size measured earlier (the region's ctx_bytes, or this
 * process's own earlier measurement) is charged instead, never a delta that
 * includes a neighbour; with none measured yet, the smallest of the entries
 * that appeared (ours is one of them, so never more than our context took;
 * and never nothing: a process left unsure at its first context never
 * learns later, and charging nothing let every context it made stay
 * outside the slice).
 * A context that does not fit the slice is destroyed again and the call
 * returns CUDA_ERROR_OUT_OF_MEMORY.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "interposer/interposer.h"

/* No context is this large; a bigger measurement includes someone else. */
#define CTX_MEASURE_MAX (1ull << 30)
#define CARD_PROCS 64

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static int primary_refs[GV_SHM_MAX_DEVICES];
static uint64_t primary_charge[GV_SHM_MAX_DEVICES];
/* This process's host pid (as NVML names it), learned at its first context;
 * kept here, not read back from the region, which others can write. */
static unsigned my_host_pid;
/* The last context size this process measured itself, per region device. */
static uint64_t my_ctx_bytes[GV_SHM_MAX_DEVICES];

struct ctx_charge {
    CUcontext ctx;
    int rdev;
    uint64_t bytes;
};
/* Created contexts still alive (few per process). */
static struct ctx_charge created[64];

/* NVML's per-process view of the card. */
struct card_view {
    unsigned npids;
    unsigned pids[CARD_PROCS];
    uint64_t used[CARD_PROCS];
};

static bool card_view(int rdev, struct card_view *v)
{
    const struct gv_shm_device *d = gv_ip_dev_info(rdev);
    static bool nvml_inited;
    nvmlDevice_t h;
    if (d == NULL || !gv_ip_nvml_ready() || gv_nv.nvmlInit_v2 == NULL ||
        gv_nv.nvmlDeviceGetHandleByUUID == NULL ||
        gv_nv.nvmlDeviceGetComputeRunningProcesses_v3 == NULL)
        return false;
    if (!nvml_inited && gv_nv.nvmlInit_v2() == NVML_SUCCESS)
        nvml_inited = true;
    char uuid[GV_SHM_UUID_LEN];
    snprintf(uuid, sizeof(uuid), "%.*s", GV_SHM_UUID_LEN - 1, d->uuid);
    nvmlProcessInfo_t infos[CARD_PROCS];
    unsigned n = CARD_PROCS;
    if (gv_nv.nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS ||
        gv_nv.nvmlDeviceGetComputeRunningProcesses_v3(h, &n, infos) != NVML_SUCCESS)
        return false;
    v->npids = 0;
    for (unsigned i = 0; i < n && i < CARD_PROCS; i++) {
        v->pids[v->npids] = infos[i].pid;
        /* NVML_VALUE_NOT_AVAILABLE (no per-process figures, e.g. some
         * Windows/vGPU setups) reads as "unknown": charged as 0. */
        v->used[v->npids++] =
            infos[i].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE
                ? 0
                : infos[i].usedGpuMemory;
    }
    return true;
}

static uint64_t used_by(const struct card_view *v, unsigned pid)
{
    for (unsigned i = 0; i < v->npids; i++)
        if (v->pids[i] == pid)
            return v->used[i];
    return 0;
}

/* What each other slot has charged on rdev (a snapshot across a creation). */
struct sibling_view {
    uint64_t used[GV_SHM_MAX_PROCS];
};

static void sibling_view(int rdev, struct sibling_view *v)
{
    const struct gv_shm_region *r = gv_shm_region(gv_ip.shm);
    const struct gv_shm_proc *self = gv_shm_self(gv_ip.shm);
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++)
        v->used[i] = &r->procs[i] == self || atomic_load(&r->procs[i].pid) == 0
                         ? 0
                         : atomic_load(&r->procs[i].mem_used[rdev]);
}

static bool claimed_by_sibling(unsigned pid);

/*
 * Whether NVML's entry (pid, used) may be a sibling's: a sibling already
 * known by that host pid, or one whose host pid is unknown and whose charges
 * cover used (every sibling charges before it allocates and credits after
 * it frees, so its charges are never below what NVML shows for it).
 */
static bool maybe_sibling(unsigned pid, uint64_t used, const struct sibling_view *sib)
{
    const struct gv_shm_region *r = gv_shm_region(gv_ip.shm);
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
        if (sib->used[i] == 0 && r->procs[i].hostpid == 0)
            continue;
        if (sib->used[i] >= used && r->procs[i].hostpid == 0)
            return true;
    }
    return claimed_by_sibling(pid);
}

/* Whether another slot of the region already names pid as its host pid. */
static bool claimed_by_sibling(unsigned pid)
{
    const struct gv_shm_region *r = gv_shm_region(gv_ip.shm);
    const struct gv_shm_proc *self = gv_shm_self(gv_ip.shm);
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++)
        if (&r->procs[i] != self && atomic_load(&r->procs[i].pid) != 0 &&
            (unsigned)r->procs[i].hostpid == pid)
            return true;
    return false;
}

/* Whether after's entry i may be ours: new in this window (our first
 * context is what brings us into NVML's list) and not a sibling's. */
static bool candidate(const struct card_view *before, const struct card_view *after, unsigned i,
                      const struct sibling_view *sib)
{
    return after->used[i] != 0 && used_by(before, after->pids[i]) == 0 &&
           !maybe_sibling(after->pids[i], after->used[i], sib);
}

/*
 * When we cannot tell which new entry is ours and no context size is known:
 * the smallest candidate.  Ours is among them, so this never bills a
 * neighbour's memory beyond what our context took, and a new entry is at
 * least a context of this card: an undercharge by the difference between
 * two contexts at most, where charging nothing was a whole one.  Entries a
 * sibling's charges explain are never taken: at a container's simultaneous
 * start they are its siblings' first allocations, and charging one for a
 * context refused the context (seen: one start in ten of eight).
 */
static uint64_t smallest_new(const struct card_view *before, const struct card_view *after,
                             const struct sibling_view *sib)
{
    uint64_t best = 0;
    for (unsigned i = 0; i < after->npids; i++)
        if (candidate(before, after, i, sib) && (best == 0 || after->used[i] < best))
            best = after->used[i];
    return best;
}

/*
 * NVML names processes by their pid on the host, which a process in a
 * container cannot see.  A process enters NVML's list with its first
 * context, and context creation is serialised across the container, so the
 * one pid that is new in the list after our first creation is ours -- unless
 * it may be a sibling's (maybe_sibling: a sibling that never learned its own
 * host pid, e.g. one whose contexts take no memory and which just made its
 * first allocation) or a process of another container appeared in the same
 * window: then we learn nothing this time, and say so.
 */
static void learn_host_pid(const struct card_view *before, const struct card_view *after,
                           const struct sibling_view *sib)
{
    if (my_host_pid != 0)
        return;
    unsigned found = 0, count = 0, self = (unsigned)getpid();
    bool self_new = false;
    for (unsigned i = 0; i < after->npids; i++) {
        if (!candidate(before, after, i, sib))
            continue;
        found = after->pids[i];
        count++;
        self_new = self_new || found == self;
    }
    /* Several are new (another container started meanwhile): without a pid
     * namespace of our own, ours carries our pid; otherwise we cannot tell. */
    if (count > 1 && self_new) {
        found = self;
        count = 1;
    }
    if (count == 1) {
        my_host_pid = found;
        struct gv_shm_proc *me = gv_shm_self(gv_ip.shm);
        if (me != NULL)
            me->hostpid = (int32_t)found;
        gv_debug("host pid %u", found);
    } else if (count > 1) {
        gv_debug("host pid not learned: %u processes appeared while our context was created",
                 count);
    }
}

/*
 * What creating a context on rdev took for this process: its own NVML
 * figure's growth, less what its other threads charged meanwhile (held_*),
 * or, when we cannot tell, the card's context size known from earlier, else
 * the smallest new entry (kept as this process's own size for its later
 * contexts, which cannot tell either).
 */
static uint64_t measured_bytes(int rdev, const struct card_view *before,
                               const struct card_view *after, const struct sibling_view *sib,
                               uint64_t held_before)
{
    _Atomic uint64_t *known = &((struct gv_shm_device *)gv_ip_dev_info(rdev))->ctx_bytes;
    if (my_host_pid == 0) {
        uint64_t k = my_ctx_bytes[rdev] != 0 ? my_ctx_bytes[rdev] : atomic_load(known);
        if (k == 0) {
            k = smallest_new(before, after, sib);
            my_ctx_bytes[rdev] = k < CTX_MEASURE_MAX ? k : CTX_MEASURE_MAX;
        }
        gv_debug("context on region device %d: own NVML entry unknown, charging the card's "
                 "context size %llu",
                 rdev, (unsigned long long)k);
        return k < CTX_MEASURE_MAX ? k : CTX_MEASURE_MAX;
    }
    uint64_t b = used_by(before, my_host_pid), a = used_by(after, my_host_pid);
    uint64_t bytes = a > b ? a - b : 0;
    uint64_t held_after = gv_shm_mem_held(gv_ip.shm, rdev);
    uint64_t others = held_after > held_before ? held_after - held_before : 0;
    bytes = bytes > others ? bytes - others : 0;
    if (bytes > CTX_MEASURE_MAX)
        bytes = CTX_MEASURE_MAX;
    if (bytes != 0) {
        my_ctx_bytes[rdev] = bytes;
        uint64_t zero = 0;
        atomic_compare_exchange_strong(known, &zero, bytes);
    }
    return bytes;
}

/*
 * Runs create() (which makes a context on CUDA ordinal dev) and charges it.
 * Called with ctx_lock held.  *charged gets the bytes charged; *refused is
 * set when the context was created but does not fit the slice (the caller
 * undoes the creation and returns CUDA_ERROR_OUT_OF_MEMORY).
 */
typedef CUresult (*create_fn)(void *arg);

static CUresult charged_create(CUdevice dev, create_fn create, void *arg, uint64_t *charged,
                               bool *refused)
{
    int rdev = gv_ip_cuda_dev(dev);
    *charged = 0;
    *refused = false;
    if (rdev == GV_DEV_DENY)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rdev < 0)
        return create(arg);
    uint64_t fixed = gv_ipcfg_ctx_reserve(&gv_ip.cfg, dev);
    if (fixed != 0) {
        if (gv_shm_mem_reserve(gv_ip.shm, rdev, fixed, GV_SHM_DEVICE, NULL) != GV_OK)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult rc = create(arg);
        if (rc != CUDA_SUCCESS)
            gv_shm_mem_release(gv_ip.shm, rdev, fixed, false);
        else
            *charged = fixed;
        return rc;
    }
    /* Only a process that does not know its host pid yet needs the
     * container to itself: afterwards its own NVML entry is exact. */
    bool serial = my_host_pid == 0 && gv_shm_ctx_serialize(gv_ip.shm) == GV_OK;
    if (my_host_pid == 0 && !serial)
        gv_warn("context creation not serialised across the container (another process "
                "kept creating for too long): measuring anyway");
    static struct sibling_view sib_after; /* under ctx_lock */
    struct card_view before, after;
    uint64_t held_before = gv_shm_mem_held(gv_ip.shm, rdev);
    bool viewed = card_view(rdev, &before);
    CUresult rc = create(arg);
    bool viewed_after = rc == CUDA_SUCCESS && viewed && card_view(rdev, &after);
    sibling_view(rdev, &sib_after);
    if (viewed_after && serial)
        learn_host_pid(&before, &after, &sib_after);
    uint64_t bytes =
        viewed_after ? measured_bytes(rdev, &before, &after, &sib_after, held_before) : 0;
    if (serial)
        gv_shm_ctx_unserialize(gv_ip.shm);
    if (rc != CUDA_SUCCESS || bytes == 0)
        return rc;
    if (gv_shm_mem_reserve(gv_ip.shm, rdev, bytes, GV_SHM_DEVICE, NULL) != GV_OK) {
        *refused = true;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *charged = bytes;
    return CUDA_SUCCESS;
}

/* --- created contexts ------------------------------------------------------ */

struct create_args {
    int version;
    CUcontext *pctx;
    unsigned int flags;
    CUdevice dev;
    CUexecAffinityParam *params;
    int nparams;
    CUctxCreateParams *cparams;
};

static CUresult do_create(void *arg)
{
    struct create_args *a = arg;
    switch (a->version) {
    case 2: return gv_cu.cuCtxCreate_v2(a->pctx, a->flags, a->dev);
    case 3: return gv_cu.cuCtxCreate_v3(a->pctx, a->params, a->nparams, a->flags, a->dev);
    default: return gv_cu.cuCtxCreate_v4(a->pctx, a->cparams, a->flags, a->dev);
    }
}

static CUresult create_context(struct create_args *a)
{
    uint64_t bytes;
    bool refused;
    pthread_mutex_lock(&ctx_lock);
    CUresult rc = charged_create(a->dev, do_create, a, &bytes, &refused);
    if (refused) {
        gv_cu.cuCtxDestroy_v2(*a->pctx);
        *a->pctx = NULL;
    }
    if (rc == CUDA_SUCCESS && bytes != 0) {
        size_t i = 0;
        while (i < sizeof(created) / sizeof(created[0]) && created[i].ctx != NULL)
            i++;
        if (i < sizeof(created) / sizeof(created[0]))
            created[i] = (struct ctx_charge){*a->pctx, gv_ip_cuda_dev(a->dev), bytes};
        else
            gv_warn("more than %zu live contexts: the next one's memory stays charged",
                    sizeof(created) / sizeof(created[0]));
    }
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

GV_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    GV_NEED_CU(cuCtxCreate_v2);
    GV_NEED_CU(cuCtxDestroy_v2);
    struct create_args a = {.version = 2, .pctx = pctx, .flags = flags, .dev = dev};
    return create_context(&a);
}

GV_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                  unsigned int flags, CUdevice dev)
{
    GV_NEED_CU(cuCtxCreate_v3);
    GV_NEED_CU(cuCtxDestroy_v2);
    struct create_args a = {.version = 3, .pctx = pctx, .flags = flags, .dev = dev,
                            .params = paramsArray, .nparams = numParams};
    return create_context(&a);
}

GV_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                  unsigned int flags, CUdevice dev)
{
    GV_NEED_CU(cuCtxCreate_v4);
    GV_NEED_CU(cuCtxDestroy_v2);
    struct create_args a = {.version = 4, .pctx = pctx, .flags = flags, .dev = dev,
                            .cparams = ctxCreateParams};
    return create_context(&a);
}

GV_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    GV_NEED_CU(cuCtxDestroy_v2);
    pthread_mutex_lock(&ctx_lock);
    CUresult rc = gv_cu.cuCtxDestroy_v2(ctx);
    for (size_t i = 0; rc == CUDA_SUCCESS && ctx != NULL && i < sizeof(created) / sizeof(created[0]);
         i++) {
        if (created[i].ctx == ctx) {
            gv_shm_mem_release(gv_ip.shm, created[i].rdev, created[i].bytes, false);
            memset(&created[i], 0, sizeof(created[i]));
        }
    }
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

/* --- primary contexts -------------------------------------------------------- */

struct retain_args {
    CUcontext *pctx;
    CUdevice dev;
};

static CUresult do_retain(void *arg)
{
    struct retain_args *a = arg;
    return gv_cu.cuDevicePrimaryCtxRetain(a->pctx, a->dev);
}

GV_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    GV_NEED_CU(cuDevicePrimaryCtxRetain);
    if (dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return gv_cu.cuDevicePrimaryCtxRetain(pctx, dev);
    pthread_mutex_lock(&ctx_lock);
    CUresult rc;
    if (primary_refs[dev] > 0) {
        rc = gv_cu.cuDevicePrimaryCtxRetain(pctx, dev);
    } else {
        /* The first retain in this process brings the context to life. */
        bool refused;
        struct retain_args a = {pctx, dev};
        rc = charged_create(dev, do_retain, &a, &primary_charge[dev], &refused);
        if (refused) {
            CUresult (*undo)(CUdevice) = gv_cu.cuDevicePrimaryCtxRelease_v2 != NULL
                                             ? gv_cu.cuDevicePrimaryCtxRelease_v2
                                             : gv_cu.cuDevicePrimaryCtxRelease;
            if (undo != NULL)
                undo(dev);
            *pctx = NULL;
        }
    }
    if (rc == CUDA_SUCCESS)
        primary_refs[dev]++;
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

/* Credits the primary context of dev when this process no longer holds it. */
static void primary_gone(CUdevice dev)
{
    int rdev = gv_ip_cuda_dev(dev);
    if (primary_charge[dev] != 0 && rdev >= 0)
        gv_shm_mem_release(gv_ip.shm, rdev, primary_charge[dev], false);
    primary_charge[dev] = 0;
}

/*
 * Release and reset exist in two ABIs (the v1 entry points predate CUDA
 * 11.0 and the CUDA runtime still fetches them); both credit the charge.
 */
typedef CUresult (*primary_fn)(CUdevice);

static CUresult primary_release(primary_fn real, CUdevice dev)
{
    pthread_mutex_lock(&ctx_lock);
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < GV_SHM_MAX_DEVICES && primary_refs[dev] > 0 &&
        --primary_refs[dev] == 0)
        primary_gone(dev);
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

static CUresult primary_reset(primary_fn real, CUdevice dev)
{
    pthread_mutex_lock(&ctx_lock);
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < GV_SHM_MAX_DEVICES) {
        primary_refs[dev] = 0;
        primary_gone(dev);
    }
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

#define GV_PRIMARY_HOOK(sym, impl)                                                                 \
    GV_EXPORT CUresult sym(CUdevice dev)                                                           \
    {                                                                                              \
        GV_NEED_CU(sym);                                                                           \
        return impl(gv_cu.sym, dev);                                                               \
    }

GV_PRIMARY_HOOK(cuDevicePrimaryCtxRelease, primary_release)
GV_PRIMARY_HOOK(cuDevicePrimaryCtxRelease_v2, primary_release)
GV_PRIMARY_HOOK(cuDevicePrimaryCtxReset, primary_reset)
GV_PRIMARY_HOOK(cuDevicePrimaryCtxReset_v2, primary_reset)
