/* NVML discovery and health: see gv_gpus.h. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/gv_log.h"
#include "common/gv_nvml.h"
#include "node/discovery/gv_gpus.h"
#include "node/loop/gv_loop.h"

/* The NVML functions we resolve: one list makes the table and the dlsym loop. */
#define NODE_NVML_FUNCS(X)                                                                         \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlShutdown)                                                                                \
    X(nvmlErrorString)                                                                             \
    X(nvmlSystemGetDriverVersion)                                                                  \
    X(nvmlSystemGetCudaDriverVersion_v2)                                                           \
    X(nvmlDeviceGetCount_v2)                                                                       \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetName)                                                                           \
    X(nvmlDeviceGetIndex)                                                                          \
    X(nvmlDeviceGetMemoryInfo)                                                                     \
    X(nvmlDeviceGetPciInfo_v3)                                                                     \
    X(nvmlDeviceGetMigMode)                                                                        \
    X(nvmlDeviceGetCudaComputeCapability)                                                          \
    X(nvmlDeviceGetMaxMigDeviceCount)                                                              \
    X(nvmlDeviceGetMinorNumber)                                                                    \
    X(nvmlDeviceGetMigDeviceHandleByIndex)                                                         \
    X(nvmlDeviceGetGpuInstanceId)                                                                  \
    X(nvmlDeviceGetComputeInstanceId)                                                              \
    X(nvmlDeviceGetAttributes_v2)                                                                  \
    X(nvmlDeviceGetTemperature)                                                                    \
    X(nvmlEventSetCreate)                                                                          \
    X(nvmlDeviceRegisterEvents)                                                                    \
    X(nvmlEventSetWait_v2)                                                                         \
    X(nvmlEventSetFree)

struct nvml_fns {
#define GV_X_FN(name) __typeof__(&name) name;
    NODE_NVML_FUNCS(GV_X_FN)
#undef GV_X_FN
};

struct gpu_state {
    struct gv_gpu info;
    nvmlDevice_t handle;
    int64_t last_xid_ms; /* 0: none */
    bool unreachable;
    /* MIG devices an instance-scoped Xid made Unhealthy (by UUID: a recreated instance is new) */
    struct mig_bad {
        char uuid[96];
        int64_t xid_ms;
        char why[64];
    } mig_bad[GV_GPU_MAX_MIGS];
    unsigned n_mig_bad;
};

struct gv_gpus {
    void *dl;
    struct nvml_fns f;
    /* optional (R470+): without it SM counts stay unknown (gv_gpu.sms = 0) */
    __typeof__(&nvmlDeviceGetNumGpuCores) num_cores;
    bool inited;
    char driver[80];
    char cuda[16];
    int64_t probe_ms, recover_ms;
    unsigned *ignored;
    size_t n_ignored;
    pthread_mutex_t lock; /* guards gpus[].info health fields */
    struct gpu_state *gpus;
    size_t n;
    pthread_t thread;
    bool running, quit;
    void (*changed)(void *);
    void *changed_ud;
};

static const char *nv_err(struct gv_gpus *g, nvmlReturn_t r)
{
    const char *s = g->f.nvmlErrorString ? g->f.nvmlErrorString(r) : NULL;
    return s ? s : "unknown NVML error";
}

/* NVML: "00000000:3B:00.0" (8-digit domain); sysfs: "0000:3b:00.0".  Opens <attr> of it. */
static FILE *pci_attr(const char *sys_root, const char *pci_bus_id, const char *attr)
{
    const char *colon = strchr(pci_bus_id, ':');
    if (colon == NULL || colon - pci_bus_id < 4)
        return NULL;
    char id[32];
    snprintf(id, sizeof(id), "%.4s%s", colon - 4, colon);
    for (char *p = id; *p; p++)
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    char path[4096];
    snprintf(path, sizeof(path), "%s/sys/bus/pci/devices/%s/%s",
             strcmp(sys_root, "/") == 0 ? "" : sys_root, id, attr);
    return fopen(path, "r");
}

int gv_gpus_numa_node(const char *sys_root, const char *pci_bus_id)
{
    FILE *f = pci_attr(sys_root, pci_bus_id, "numa_node");
    if (f == NULL)
        return -1;
    int n = -1;
    if (fscanf(f, "%d", &n) != 1 || n < 0)
        n = -1;
    fclose(f);
    return n;
}

unsigned gv_gpus_pci_class(const char *sys_root, const char *pci_bus_id)
{
    FILE *f = pci_attr(sys_root, pci_bus_id, "class");
    if (f == NULL)
        return 0;
    unsigned c = 0;
    if (fscanf(f, "%x", &c) != 1 || c > 0xffffff)
        c = 0;
    fclose(f);
    return c;
}

unsigned gv_gpus_sm_count(unsigned cuda_cores, int cc_major, int cc_minor)
{
    /* FP32 cores per SM: Volta/Turing (7.x) and GA100 (8.0) have 64; GA10x,
     * Ada, Hopper, Blackwell and Thor (8.6-12.x) 128.  Pascal and older run
     * no MPS limits (Volta+), so they are left unknown. */
    unsigned per_sm;
    if (cc_major == 7 || (cc_major == 8 && cc_minor == 0))
        per_sm = 64;
    else if ((cc_major == 8 && cc_minor > 0) || (cc_major >= 9 && cc_major <= 12))
        per_sm = 128;
    else
        return 0;
    if (cuda_cores == 0 || cuda_cores % per_sm != 0)
        return 0;
    return cuda_cores / per_sm;
}

void gv_gpus_mig_profile(unsigned gi_slices, unsigned ci_slices, uint64_t memory_mib, char *out,
                         size_t cap)
{
    unsigned long long gb = (memory_mib + 1023) / 1024;
    if (ci_slices && ci_slices < gi_slices)
        snprintf(out, cap, "%uc.%ug.%llugb", ci_slices, gi_slices, gb);
    else
        snprintf(out, cap, "%ug.%llugb", gi_slices, gb);
}

/*
 * The MIG devices of GPU h in MIG device index order (indexes with no
 * device, NVML_ERROR_NOT_FOUND, are holes).  A device NVML cannot describe
 * is left out (logged): it cannot be advertised.
 */
static unsigned scan_migs(struct gv_gpus *g, nvmlDevice_t h, const char *gpu_uuid,
                          struct gv_mig *out)
{
    unsigned max = 0, n = 0;
    if (g->f.nvmlDeviceGetMaxMigDeviceCount(h, &max) != NVML_SUCCESS)
        return 0;
    for (unsigned i = 0; i < max && n < GV_GPU_MAX_MIGS; i++) {
        nvmlDevice_t m;
        nvmlDeviceAttributes_t a;
        struct gv_mig *d = &out[n];
        nvmlReturn_t r = g->f.nvmlDeviceGetMigDeviceHandleByIndex(h, i, &m);
        if (r == NVML_ERROR_NOT_FOUND)
            continue;
        if (r != NVML_SUCCESS ||
            (r = g->f.nvmlDeviceGetUUID(m, d->uuid, sizeof(d->uuid))) != NVML_SUCCESS ||
            (r = g->f.nvmlDeviceGetGpuInstanceId(m, &d->gi)) != NVML_SUCCESS ||
            (r = g->f.nvmlDeviceGetComputeInstanceId(m, &d->ci)) != NVML_SUCCESS ||
            (r = g->f.nvmlDeviceGetAttributes_v2(m, &a)) != NVML_SUCCESS) {
            gv_warn("NVML: GPU %s: MIG device %u skipped: %s", gpu_uuid, i, nv_err(g, r));
            continue;
        }
        d->gi_slices = a.gpuInstanceSliceCount;
        d->ci_slices = a.computeInstanceSliceCount;
        d->sms = a.multiprocessorCount;
        d->copy = a.sharedCopyEngineCount;
        d->decoder = a.sharedDecoderCount;
        d->encoder = a.sharedEncoderCount;
        d->jpeg = a.sharedJpegCount;
        d->ofa = a.sharedOfaCount;
        d->memory_mib = a.memorySizeMB;
        gv_gpus_mig_profile(d->gi_slices, d->ci_slices, d->memory_mib, d->profile,
                            sizeof(d->profile));
        n++;
    }
    return n;
}

static gv_status discover(struct gv_gpus *g, const char *sys_root, struct gv_error *err)
{
    unsigned count = 0;
    nvmlReturn_t r = g->f.nvmlDeviceGetCount_v2(&count);
    if (r != NVML_SUCCESS)
        return gv_error_set(err, GV_EIO, "NVML: device count: %s", nv_err(g, r));
    g->gpus = calloc(count + 1, sizeof(*g->gpus));
    if (g->gpus == NULL)
        return gv_error_set(err, GV_ENOMEM, "NVML: out of memory");
    for (unsigned i = 0; i < count; i++) {
        struct gpu_state *s = &g->gpus[g->n];
        struct gv_gpu *d = &s->info;
        nvmlMemory_t mem;
        nvmlPciInfo_t pci;
        unsigned cur = 0, pend = 0;
        if ((r = g->f.nvmlDeviceGetHandleByIndex_v2(i, &s->handle)) != NVML_SUCCESS ||
            (r = g->f.nvmlDeviceGetUUID(s->handle, d->uuid, sizeof(d->uuid))) != NVML_SUCCESS) {
            /* A GPU that cannot even name itself cannot be advertised. */
            gv_warn("NVML: GPU %u skipped: %s", i, nv_err(g, r));
            continue;
        }
        d->index = i;
        unsigned idx;
        if (g->f.nvmlDeviceGetIndex(s->handle, &idx) == NVML_SUCCESS)
            d->index = idx;
        if (g->f.nvmlDeviceGetName(s->handle, d->model, sizeof(d->model)) != NVML_SUCCESS)
            snprintf(d->model, sizeof(d->model), "NVIDIA GPU");
        if ((r = g->f.nvmlDeviceGetMemoryInfo(s->handle, &mem)) != NVML_SUCCESS)
            return gv_error_set(err, GV_EIO, "NVML: GPU %s memory: %s", d->uuid, nv_err(g, r));
        d->memory_mib = mem.total >> 20;
        d->numa = -1;
        if (g->f.nvmlDeviceGetPciInfo_v3(s->handle, &pci) == NVML_SUCCESS) {
            snprintf(d->pci_bus_id, sizeof(d->pci_bus_id), "%s", pci.busId);
            d->numa = gv_gpus_numa_node(sys_root, d->pci_bus_id);
            d->pci_class = gv_gpus_pci_class(sys_root, d->pci_bus_id);
        }
        /* as go-nvlib's IsMigCapable: the MIG mode query answers at all (NOT_SUPPORTED: no MIG) */
        r = g->f.nvmlDeviceGetMigMode(s->handle, &cur, &pend);
        d->mig_capable = r == NVML_SUCCESS;
        d->mig = r == NVML_SUCCESS && cur == NVML_DEVICE_MIG_ENABLE;
        if (g->f.nvmlDeviceGetCudaComputeCapability(s->handle, &d->cc_major, &d->cc_minor) !=
            NVML_SUCCESS)
            d->cc_major = d->cc_minor = 0;
        unsigned cores = 0;
        if (g->num_cores && g->num_cores(s->handle, &cores) == NVML_SUCCESS)
            d->sms = gv_gpus_sm_count(cores, d->cc_major, d->cc_minor);
        if (g->f.nvmlDeviceGetMinorNumber(s->handle, &d->minor) != NVML_SUCCESS)
            d->minor = d->index;
        d->n_migs = d->mig ? scan_migs(g, s->handle, d->uuid, d->migs) : 0;
        d->healthy = true;
        g->n++;
    }
    return GV_OK;
}

/* Union-find over g->gpus positions: root of i. */
static size_t uf_find(size_t *parent, size_t i)
{
    while (parent[i] != i)
        i = parent[i] = parent[parent[i]];
    return i;
}

/* Group ids from a union-find: the lowest GPU index of each group of two
 * or more, -1 for a GPU alone. */
static void uf_ids(struct gv_gpus *g, size_t *parent, bool nvlink)
{
    for (size_t i = 0; i < g->n; i++) {
        int id = -1;
        size_t members = 0;
        for (size_t j = 0; j < g->n; j++) {
            if (uf_find(parent, j) != uf_find(parent, i))
                continue;
            members++;
            if (id < 0 || (int)g->gpus[j].info.index < id)
                id = (int)g->gpus[j].info.index;
        }
        if (nvlink)
            g->gpus[i].info.nvlink_island = members > 1 ? id : -1;
        else
            g->gpus[i].info.pcie_switch = members > 1 ? id : -1;
    }
}

/*
 * Interconnect groups from NVML: GPUs joined by active NVLinks (the peer
 * named by its PCI bus id), and GPUs whose common PCIe ancestor is a switch
 * (PIX / PXB).  Drivers without these calls leave every GPU in no group.
 */
static void discover_topology(struct gv_gpus *g)
{
    __typeof__(&nvmlDeviceGetTopologyCommonAncestor) common;
    __typeof__(&nvmlDeviceGetNvLinkState) state;
    __typeof__(&nvmlDeviceGetNvLinkRemotePciInfo_v2) remote;
    *(void **)&common = dlsym(g->dl, "nvmlDeviceGetTopologyCommonAncestor");
    *(void **)&state = dlsym(g->dl, "nvmlDeviceGetNvLinkState");
    *(void **)&remote = dlsym(g->dl, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    for (size_t i = 0; i < g->n; i++)
        g->gpus[i].info.nvlink_island = g->gpus[i].info.pcie_switch = -1;
    size_t *nv = calloc(g->n + 1, sizeof(*nv)), *pc = calloc(g->n + 1, sizeof(*pc));
    if (nv == NULL || pc == NULL)
        goto out;
    for (size_t i = 0; i < g->n; i++)
        nv[i] = pc[i] = i;
    for (size_t i = 0; i < g->n; i++) {
        for (size_t j = i + 1; common != NULL && j < g->n; j++) {
            nvmlGpuTopologyLevel_t lvl;
            if (common(g->gpus[i].handle, g->gpus[j].handle, &lvl) == NVML_SUCCESS &&
                lvl <= NVML_TOPOLOGY_MULTIPLE)
                pc[uf_find(pc, j)] = uf_find(pc, i);
        }
        for (unsigned l = 0; state != NULL && remote != NULL && l < NVML_NVLINK_MAX_LINKS; l++) {
            nvmlEnableState_t on;
            nvmlPciInfo_t pci;
            if (state(g->gpus[i].handle, l, &on) != NVML_SUCCESS)
                break; /* no NVLink on this GPU */
            if (on != NVML_FEATURE_ENABLED || remote(g->gpus[i].handle, l, &pci) != NVML_SUCCESS)
                continue;
            for (size_t j = 0; j < g->n; j++)
                if (j != i && strcasecmp(pci.busId, g->gpus[j].info.pci_bus_id) == 0)
                    nv[uf_find(nv, j)] = uf_find(nv, i);
        }
    }
    uf_ids(g, nv, true);
    uf_ids(g, pc, false);
out:
    free(nv);
    free(pc);
}

gv_status gv_gpus_open(const struct gv_gpus_config *cfg, struct gv_gpus **out,
                       struct gv_error *err)
{
    static const unsigned app_xids[] = {GV_GPUS_APP_XIDS};
    const char *lib = cfg->library ? cfg->library : "libnvidia-ml.so.1";
    struct gv_gpus *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return gv_error_set(err, GV_ENOMEM, "NVML: out of memory");
    pthread_mutex_init(&g->lock, NULL);
    g->probe_ms = cfg->probe_interval_ms > 0 ? cfg->probe_interval_ms : 10000;
    g->recover_ms = cfg->recover_after_ms > 0 ? cfg->recover_after_ms : 60000;
    size_t n_app = sizeof(app_xids) / sizeof(app_xids[0]);
    g->ignored = calloc(n_app + cfg->n_extra_ignored_xids, sizeof(unsigned));
    if (g->ignored == NULL) {
        gv_error_set(err, GV_ENOMEM, "NVML: out of memory");
        goto fail;
    }
    memcpy(g->ignored, app_xids, sizeof(app_xids));
    if (cfg->n_extra_ignored_xids)
        memcpy(g->ignored + n_app, cfg->extra_ignored_xids,
               cfg->n_extra_ignored_xids * sizeof(unsigned));
    g->n_ignored = n_app + cfg->n_extra_ignored_xids;
    g->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (g->dl == NULL) {
        gv_error_set(err, GV_EUNAVAILABLE, "NVML: cannot load %s: %s (is the NVIDIA driver "
                     "installed and the library mounted?)", lib, dlerror());
        goto fail;
    }
#define GV_X_FN(name)                                                                              \
    *(void **)&g->f.name = dlsym(g->dl, #name);                                                    \
    if (g->f.name == NULL) {                                                                       \
        gv_error_set(err, GV_EUNSUPPORTED, "NVML: %s lacks %s (driver too old?)", lib, #name);     \
        goto fail;                                                                                 \
    }
    NODE_NVML_FUNCS(GV_X_FN)
#undef GV_X_FN
    *(void **)&g->num_cores = dlsym(g->dl, "nvmlDeviceGetNumGpuCores");
    nvmlReturn_t r = g->f.nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        gv_error_set(err, GV_EUNAVAILABLE, "NVML: init: %s", nv_err(g, r));
        goto fail;
    }
    g->inited = true;
    if (g->f.nvmlSystemGetDriverVersion(g->driver, sizeof(g->driver)) != NVML_SUCCESS)
        g->driver[0] = '\0';
    int cv = 0;
    if (g->f.nvmlSystemGetCudaDriverVersion_v2(&cv) == NVML_SUCCESS && cv > 0)
        snprintf(g->cuda, sizeof(g->cuda), "%d.%d", cv / 1000, (cv % 1000) / 10);
    if (discover(g, cfg->sys_root ? cfg->sys_root : "/", err) != GV_OK)
        goto fail;
    discover_topology(g);
    *out = g;
    return GV_OK;
fail:
    gv_gpus_free(g);
    return err ? err->code : GV_EIO;
}

void gv_gpus_free(struct gv_gpus *g)
{
    if (g == NULL)
        return;
    if (g->running) {
        pthread_mutex_lock(&g->lock);
        g->quit = true;
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->thread, NULL);
    }
    if (g->inited)
        g->f.nvmlShutdown();
    if (g->dl)
        dlclose(g->dl);
    free(g->gpus);
    free(g->ignored);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

gv_status gv_gpus_snapshot(struct gv_gpus *g, struct gv_gpu **out, size_t *n,
                           struct gv_error *err)
{
    struct gv_gpu *copy = calloc(g->n + 1, sizeof(*copy));
    if (copy == NULL)
        return gv_error_set(err, GV_ENOMEM, "GPUs: out of memory");
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->n; i++) {
        copy[i] = g->gpus[i].info;
        /* per-MIG-device health goes into the copy only (the MIG re-read compares info.migs) */
        for (unsigned b = 0; b < g->gpus[i].n_mig_bad; b++)
            for (unsigned k = 0; k < copy[i].n_migs; k++)
                if (strcmp(copy[i].migs[k].uuid, g->gpus[i].mig_bad[b].uuid) == 0) {
                    copy[i].migs[k].unhealthy = true;
                    snprintf(copy[i].migs[k].reason, sizeof(copy[i].migs[k].reason), "%s",
                             g->gpus[i].mig_bad[b].why);
                }
    }
    pthread_mutex_unlock(&g->lock);
    *out = copy;
    *n = g->n;
    return GV_OK;
}

const char *gv_gpus_driver_version(const struct gv_gpus *g)
{
    return g->driver;
}

const char *gv_gpus_cuda_version(const struct gv_gpus *g)
{
    return g->cuda;
}

/* ---- health ------------------------------------------------------------- */

static bool xid_ignored(const struct gv_gpus *g, unsigned long long xid)
{
    for (size_t i = 0; i < g->n_ignored; i++)
        if (g->ignored[i] == xid)
            return true;
    return false;
}

/* Caller holds the lock.  Returns true when health flipped. */
static bool set_health(struct gpu_state *s, bool healthy, const char *reason)
{
    bool changed = s->info.healthy != healthy;
    s->info.healthy = healthy;
    snprintf(s->info.reason, sizeof(s->info.reason), "%s", healthy ? "" : reason);
    if (changed) {
        if (healthy)
            gv_info("GPU %u (%s) is healthy again", s->info.index, s->info.uuid);
        else
            gv_warn("GPU %u (%s) is unhealthy: %s", s->info.index, s->info.uuid, reason);
    }
    return changed;
}

/* An Xid of GPU instance gi / compute instance ci of MIG-enabled s. Caller holds the lock. */
static bool mig_xid(struct gpu_state *s, unsigned gi, unsigned ci, const char *why, int64_t now)
{
    const struct gv_mig *m = NULL;
    for (unsigned k = 0; k < s->info.n_migs && m == NULL; k++)
        if (s->info.migs[k].gi == gi && s->info.migs[k].ci == ci)
            m = &s->info.migs[k];
    if (m == NULL) {
        /* as NVIDIA's plugin: an instance no MIG device of ours is touches none */
        gv_info("GPU %u (%s): %s of GPU instance %u / compute instance %u, no MIG device "
                "of ours: health unchanged", s->info.index, s->info.uuid, why, gi, ci);
        return false;
    }
    for (unsigned b = 0; b < s->n_mig_bad; b++)
        if (strcmp(s->mig_bad[b].uuid, m->uuid) == 0) {
            s->mig_bad[b].xid_ms = now; /* already Unhealthy: the quiet time starts again */
            return false;
        }
    if (s->n_mig_bad >= GV_GPU_MAX_MIGS)
        return false; /* cannot happen: one entry per MIG device */
    struct mig_bad *b = &s->mig_bad[s->n_mig_bad++];
    _Static_assert(sizeof(b->uuid) == sizeof(m->uuid), "MIG uuid sizes");
    memcpy(b->uuid, m->uuid, sizeof(b->uuid)); /* NUL-terminated within: NVML wrote it */
    snprintf(b->why, sizeof(b->why), "%s", why);
    b->xid_ms = now;
    gv_warn("GPU %u (%s): MIG device %s (GPU instance %u, compute instance %u) is unhealthy: %s",
            s->info.index, s->info.uuid, m->uuid, gi, ci, why);
    return true;
}

/* MIG devices without an Xid for recover_ms are Healthy again (as GPUs). Caller holds the lock. */
static bool mig_recover(struct gpu_state *s, int64_t now, int64_t recover_ms)
{
    bool changed = false;
    for (unsigned b = 0; b < s->n_mig_bad;) {
        if (now - s->mig_bad[b].xid_ms < recover_ms) {
            b++;
            continue;
        }
        gv_info("GPU %u (%s): MIG device %s is healthy again", s->info.index, s->info.uuid,
                s->mig_bad[b].uuid);
        s->mig_bad[b] = s->mig_bad[--s->n_mig_bad];
        changed = true;
    }
    return changed;
}

static bool on_xid(struct gv_gpus *g, const nvmlEventData_t *ev)
{
    unsigned long long xid = ev->eventData;
    if (xid_ignored(g, xid)) {
        gv_info("Xid %llu on a GPU is application-caused: health unchanged", xid);
        return false;
    }
    char why[64];
    snprintf(why, sizeof(why), "critical Xid %llu", xid);
    bool changed = false;
    int64_t now = gv_loop_now_ms();
    /*
     * On a MIG-enabled GPU NVML names the GPU and compute instance an Xid
     * belongs to (0xFFFFFFFF: not instance-scoped).  Scoped: only that MIG
     * device turns Unhealthy, as NVIDIA's device plugin does; otherwise the
     * whole GPU with all its MIG devices.
     */
    bool scoped = ev->gpuInstanceId != GV_NVML_NO_INSTANCE &&
                  ev->computeInstanceId != GV_NVML_NO_INSTANCE;
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->n; i++) {
        struct gpu_state *s = &g->gpus[i];
        /* An event without a device concerns every GPU (NVML's convention). */
        if (ev->device != NULL && ev->device != s->handle)
            continue;
        if (scoped && s->info.mig) {
            changed |= mig_xid(s, ev->gpuInstanceId, ev->computeInstanceId, why, now);
            continue;
        }
        s->last_xid_ms = now;
        changed |= set_health(s, false, why);
    }
    pthread_mutex_unlock(&g->lock);
    return changed;
}

/*
 * The operator may change MIG mode or geometry (nvidia-smi mig) while the
 * agent runs: re-read both and report a change so the devices are
 * re-advertised (docs/mig-cdi.md, "Static MIG procedure").
 */
static bool reread_mig(struct gv_gpus *g, struct gpu_state *s)
{
    if (!s->info.mig_capable)
        return false;
    unsigned cur = 0, pend = 0;
    struct gv_mig migs[GV_GPU_MAX_MIGS];
    memset(migs, 0, sizeof(migs));
    if (g->f.nvmlDeviceGetMigMode(s->handle, &cur, &pend) != NVML_SUCCESS)
        return false;
    bool on = cur == NVML_DEVICE_MIG_ENABLE;
    unsigned n = on ? scan_migs(g, s->handle, s->info.uuid, migs) : 0;
    pthread_mutex_lock(&g->lock);
    bool changed = on != s->info.mig || n != s->info.n_migs ||
                   memcmp(migs, s->info.migs, n * sizeof(migs[0])) != 0;
    if (changed) {
        s->info.mig = on;
        s->info.n_migs = n;
        memcpy(s->info.migs, migs, sizeof(migs));
        gv_info("GPU %s: MIG %s, %u MIG device(s): re-advertising", s->info.uuid,
                on ? "enabled" : "disabled", n);
    }
    pthread_mutex_unlock(&g->lock);
    return changed;
}

/* Reachability: a GPU that stops answering NVML is Unhealthy until it answers again. */
static bool probe(struct gv_gpus *g)
{
    bool changed = false;
    int64_t now = gv_loop_now_ms();
    for (size_t i = 0; i < g->n; i++) {
        struct gpu_state *s = &g->gpus[i];
        unsigned temp;
        nvmlReturn_t r = g->f.nvmlDeviceGetTemperature(s->handle, NVML_TEMPERATURE_GPU, &temp);
        pthread_mutex_lock(&g->lock);
        if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED) {
            char why[128];
            snprintf(why, sizeof(why), "unreachable: %s", nv_err(g, r));
            s->unreachable = true;
            changed |= set_health(s, false, why);
        } else {
            s->unreachable = false;
            if (!s->info.healthy && (s->last_xid_ms == 0 || now - s->last_xid_ms >= g->recover_ms))
                changed |= set_health(s, true, "");
            changed |= mig_recover(s, now, g->recover_ms);
        }
        pthread_mutex_unlock(&g->lock);
        changed |= reread_mig(g, s);
    }
    return changed;
}

static bool quitting(struct gv_gpus *g)
{
    pthread_mutex_lock(&g->lock);
    bool q = g->quit;
    pthread_mutex_unlock(&g->lock);
    return q;
}

/* Bounded waits keep shutdown prompt; 4 wake-ups a second cost nothing measurable. */
#define WAIT_SLICE_MS 250

static void *health_main(void *arg)
{
    struct gv_gpus *g = arg;
    nvmlEventSet_t set = NULL;
    nvmlReturn_t r = g->f.nvmlEventSetCreate(&set);
    if (r != NVML_SUCCESS) {
        gv_warn("NVML: no event set (%s): health from probes only", nv_err(g, r));
        set = NULL;
    }
    for (size_t i = 0; set && i < g->n; i++) {
        r = g->f.nvmlDeviceRegisterEvents(g->gpus[i].handle, nvmlEventTypeXidCriticalError, set);
        if (r != NVML_SUCCESS)
            gv_warn("NVML: GPU %s: no Xid events (%s): health from probes only",
                    g->gpus[i].info.uuid, nv_err(g, r));
    }
    int64_t next_probe = gv_loop_now_ms() + g->probe_ms;
    while (!quitting(g)) {
        bool changed = false;
        int64_t left = next_probe - gv_loop_now_ms();
        unsigned wait = (unsigned)(left < 0 ? 0 : left > WAIT_SLICE_MS ? WAIT_SLICE_MS : left);
        if (set) {
            nvmlEventData_t ev;
            memset(&ev, 0, sizeof(ev));
            r = g->f.nvmlEventSetWait_v2(set, &ev, wait);
            if (r == NVML_SUCCESS && (ev.eventType & nvmlEventTypeXidCriticalError))
                changed |= on_xid(g, &ev);
            else if (r != NVML_SUCCESS && r != NVML_ERROR_TIMEOUT)
                next_probe = 0; /* the driver itself is in trouble: probe every GPU now */
        } else {
            struct timespec ts = {wait / 1000, (long)(wait % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
        if (gv_loop_now_ms() >= next_probe) {
            changed |= probe(g);
            next_probe = gv_loop_now_ms() + g->probe_ms;
        }
        if (changed && g->changed)
            g->changed(g->changed_ud);
    }
    if (set)
        g->f.nvmlEventSetFree(set);
    return NULL;
}

gv_status gv_gpus_watch(struct gv_gpus *g, void (*changed)(void *ud), void *ud,
                        struct gv_error *err)
{
    g->changed = changed;
    g->changed_ud = ud;
    if (pthread_create(&g->thread, NULL, health_main, g) != 0)
        return gv_error_set(err, GV_EINTERNAL, "GPUs: cannot start the health thread");
    g->running = true;
    return GV_OK;
}
