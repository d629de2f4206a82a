/*
 * Device identity: which shared-region device an application's CUDA
 * ordinal or NVML handle is, and which configured limit applies to it.
 *
 * Limits are indexed by the CUDA ordinal the application sees (after
 * CUDA_VISIBLE_DEVICES), as in HAMi.  The region keys devices by uuid so
 * processes with different CUDA_VISIBLE_DEVICES share one account per GPU
 * (or MIG compute instance).  NVML ignores CUDA_VISIBLE_DEVICES and
 * enumerates in PCI order, while the driver's default order
 * (CUDA_DEVICE_ORDER=FASTEST_FIRST) may differ, so an NVML handle is mapped
 * to the CUDA ordinal whose uuid it has: the driver's word when the process
 * uses CUDA, else CUDA_VISIBLE_DEVICES where it is exact (cuda_index_of).
 */
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "interposer/interposer.h"

/* Cached region index + 2 per CUDA ordinal (0 = not resolved). */
static _Atomic int cuda_map[GV_SHM_MAX_DEVICES];
/* Resolved NVML handles (GPUs and MIG devices): appended under map_lock. */
#define NVML_CACHE 64
static struct {
    _Atomic(nvmlDevice_t) handle;
    _Atomic int idx;
} nvml_map[NVML_CACHE];
static _Atomic int nvml_mapped;
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

/* When limits exist but cannot be enforced, deny; otherwise pass through. */
static int unenforceable(void)
{
    return !gv_ip.cfg_ok || gv_ipcfg_has_limits(&gv_ip.cfg) ? GV_DEV_DENY : GV_DEV_UNTRACKED;
}

static int register_device(const char *uuid, int cuda_index, uint64_t physical)
{
    if (gv_ip.shm == NULL)
        return unenforceable();
    struct gv_shm_limits lim = {.mem_physical = physical};
    if (cuda_index >= 0) {
        lim.mem_limit = gv_ipcfg_mem_limit(&gv_ip.cfg, cuda_index, physical);
        lim.sm_limit = gv_ipcfg_sm_limit(&gv_ip.cfg, cuda_index);
        if (gv_ip.cfg.oversubscribe && lim.mem_limit != 0) {
            lim.flags = GV_SHM_DEV_OVERSUBSCRIBE;
            /* Device-resident part: the configured share, else the card. */
            lim.mem_share = gv_ipcfg_mem_share(&gv_ip.cfg, cuda_index);
            if (lim.mem_share == 0 || lim.mem_share > physical)
                lim.mem_share = physical;
        }
    }
    int idx = -1;
    struct gv_error err;
    gv_status rc = gv_shm_device_attach(gv_ip.shm, uuid, &lim, &idx, &err);
    if (rc == GV_ECONFLICT)
        gv_error("refused: %s", err.msg);
    else if (rc != GV_OK) {
        gv_error("shared region: %s", err.msg);
        return unenforceable();
    }
    return idx;
}

/*
 * The uuid of CUDA ordinal dev in NVML's form: "GPU-..." for a GPU, and
 * "MIG-..." for a MIG compute instance, which cuDeviceGetUuid_v2 names by
 * its own uuid while cuDeviceGetUuid names the GPU it lives on.
 */
static bool cuda_uuid(CUdevice dev, char *out, size_t n)
{
    CUuuid u1, u2;
    bool have1 = gv_cu.cuDeviceGetUuid != NULL && gv_cu.cuDeviceGetUuid(&u1, dev) == CUDA_SUCCESS;
    bool have2 =
        gv_cu.cuDeviceGetUuid_v2 != NULL && gv_cu.cuDeviceGetUuid_v2(&u2, dev) == CUDA_SUCCESS;
    if (!have1 && !have2)
        return false;
    bool mig = have1 && have2 && memcmp(u1.bytes, u2.bytes, sizeof(u1.bytes)) != 0;
    return gv_cuda_uuid_text(have2 ? &u2 : &u1, mig ? "MIG-" : "GPU-", out, n);
}

/* The same GPU or MIG instance: uuids compared without their GPU-/MIG- prefix. */
static bool same_device(const char *a, const char *b)
{
    if (strncmp(a, "GPU-", 4) == 0 || strncmp(a, "MIG-", 4) == 0)
        a += 4;
    if (strncmp(b, "GPU-", 4) == 0 || strncmp(b, "MIG-", 4) == 0)
        b += 4;
    return strcasecmp(a, b) == 0;
}

int gv_ip_cuda_dev(CUdevice dev)
{
    if (!gv_ip.cfg_ok)
        return GV_DEV_DENY;
    if (dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return unenforceable();
    int cached = atomic_load_explicit(&cuda_map[dev], memory_order_acquire);
    if (cached != 0)
        return cached - 2;
    pthread_mutex_lock(&map_lock);
    int idx = atomic_load(&cuda_map[dev]) - 2;
    if (idx != -2)
        goto out;
    char uuid[GV_SHM_UUID_LEN];
    size_t total = 0;
    CUresult rc = cuda_uuid(dev, uuid, sizeof(uuid)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    if (rc == CUDA_SUCCESS && gv_cu.cuDeviceTotalMem_v2 != NULL)
        rc = gv_cu.cuDeviceTotalMem_v2(&total, dev);
    if (rc != CUDA_SUCCESS) {
        /* Not a device the driver knows: nothing to account, and not cached. */
        pthread_mutex_unlock(&map_lock);
        return GV_DEV_UNTRACKED;
    }
    idx = register_device(uuid, dev, total);
    atomic_store_explicit(&cuda_map[dev], idx + 2, memory_order_release);
out:
    pthread_mutex_unlock(&map_lock);
    return idx;
}

int gv_ip_current_dev(void)
{
    CUdevice dev;
    if (!gv_ip.cfg_ok)
        return GV_DEV_DENY;
    if (gv_cu.cuCtxGetDevice == NULL || gv_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return GV_DEV_UNTRACKED; /* no context: the driver will refuse the call itself */
    return gv_ip_cuda_dev(dev);
}

/*
 * Without the driver's word: the CUDA ordinal of NVML device (index, uuid)
 * under CUDA_VISIBLE_DEVICES, with indices in NVML's (PCI) order, or -1.
 */
static int cuda_index_from_env(unsigned nvml_index, const char *uuid)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == NULL)
        return nvml_index == UINT_MAX ? -1 : (int)nvml_index;
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", cvd);
    int pos = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save), pos++) {
        while (isspace((unsigned char)*tok))
            tok++;
        if (strncmp(tok, "GPU-", 4) == 0 || strncmp(tok, "MIG-", 4) == 0) {
            if (strncmp(uuid, tok, strlen(tok)) == 0)
                return pos;
            continue;
        }
        char *end;
        long v = strtol(tok, &end, 10);
        if (end == tok || *end != '\0' || v < 0)
            return -1; /* the driver stops at the first invalid entry */
        if ((unsigned long)v == nvml_index)
            return pos;
    }
    return -1;
}

/*
 * Whether CUDA_VISIBLE_DEVICES alone tells the CUDA ordinal of every GPU:
 * it names them all by uuid, or the driver enumerates in NVML's PCI order
 * (CUDA_DEVICE_ORDER=PCI_BUS_ID, or the default FASTEST_FIRST among GPUs of
 * one model, which it keeps in PCI order).
 */
static bool order_known(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd != NULL && *cvd != '\0') {
        bool all_uuids = true;
        for (const char *p = cvd; *p != '\0' && all_uuids;) {
            while (isspace((unsigned char)*p))
                p++;
            all_uuids = strncmp(p, "GPU-", 4) == 0 || strncmp(p, "MIG-", 4) == 0;
            p = strchr(p, ',') != NULL ? strchr(p, ',') + 1 : p + strlen(p);
        }
        if (all_uuids)
            return true;
    }
    const char *order = getenv("CUDA_DEVICE_ORDER");
    if (order != NULL && strcmp(order, "PCI_BUS_ID") == 0)
        return true;
    unsigned n = 0;
    char first[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    if (gv_nv.nvmlDeviceGetCount_v2 == NULL || gv_nv.nvmlDeviceGetHandleByIndex_v2 == NULL ||
        gv_nv.nvmlDeviceGetName == NULL || gv_nv.nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS)
        return false;
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t h;
        if (gv_nv.nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS ||
            gv_nv.nvmlDeviceGetName(h, name, sizeof(name)) != NVML_SUCCESS)
            return false;
        if (i == 0)
            snprintf(first, sizeof(first), "%s", name);
        else if (strcmp(first, name) != 0)
            return false;
    }
    return true;
}

/*
 * The CUDA ordinal with this NVML uuid, or -1 when CUDA does not see it.
 * When this process has initialised the driver, the driver says (it has
 * applied CUDA_VISIBLE_DEVICES and its enumeration order).  A process that
 * has not (nvidia-smi, or a program that queries NVML before it forks CUDA
 * workers) is not made to: CUDA_VISIBLE_DEVICES decides when that is exact
 * (order_known), and only otherwise -- GPUs of different models under the
 * default FASTEST_FIRST order, named by index -- is the driver initialised
 * here (cuInit creates no context) to learn its order.
 */
static int cuda_index_of(nvmlDevice_t dev, const char *uuid)
{
    int count = 0;
    unsigned index;
    CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
    bool have_cuda = gv_ip_cuda_ready() && gv_cu.cuDeviceGetCount != NULL;
    if (have_cuda)
        rc = gv_cu.cuDeviceGetCount(&count);
    if (rc == CUDA_ERROR_NOT_INITIALIZED && !order_known() && gv_cu.cuInit != NULL) {
        gv_debug("GPUs of different models, CUDA_VISIBLE_DEVICES by index: initialising the "
                 "driver to learn its device order");
        rc = gv_cu.cuInit(0);
        if (rc == CUDA_SUCCESS)
            rc = gv_cu.cuDeviceGetCount(&count);
    }
    if (rc == CUDA_ERROR_NO_DEVICE)
        return -1; /* CUDA_VISIBLE_DEVICES hides every device */
    if (rc != CUDA_SUCCESS) {
        if (gv_nv.nvmlDeviceGetIndex != NULL && gv_nv.nvmlDeviceGetIndex(dev, &index) == NVML_SUCCESS)
            return cuda_index_from_env(index, uuid);
        /*
         * A MIG device has no NVML index of its own, but CUDA_VISIBLE_DEVICES
         * may name it by its MIG uuid: nvidia-smi in the container then
         * shows the slice before any CUDA process registered the device.
         */
        return strncmp(uuid, "MIG-", 4) == 0 ? cuda_index_from_env(UINT_MAX, uuid) : -1;
    }
    char cu[GV_SHM_UUID_LEN];
    for (int i = 0; i < count; i++)
        if (cuda_uuid(i, cu, sizeof(cu)) && same_device(cu, uuid))
            return i;
    return -1;
}

int gv_ip_nvml_dev(nvmlDevice_t dev)
{
    int n = atomic_load_explicit(&nvml_mapped, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&nvml_map[i].handle, memory_order_relaxed) == dev)
            return atomic_load_explicit(&nvml_map[i].idx, memory_order_relaxed);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (gv_nv.nvmlDeviceGetUUID == NULL ||
        gv_nv.nvmlDeviceGetUUID(dev, uuid, sizeof(uuid)) != NVML_SUCCESS)
        return GV_DEV_UNTRACKED;
    pthread_mutex_lock(&map_lock);
    n = atomic_load(&nvml_mapped);
    for (int i = 0; i < n; i++)
        if (atomic_load(&nvml_map[i].handle) == dev) {
            int cached = atomic_load(&nvml_map[i].idx);
            pthread_mutex_unlock(&map_lock);
            return cached;
        }
    int idx = gv_ip.shm != NULL ? gv_shm_device_find(gv_ip.shm, uuid) : -1;
    if (idx < 0) {
        nvmlMemory_t mem = {0, 0, 0};
        if (gv_nv.nvmlDeviceGetMemoryInfo != NULL)
            gv_nv.nvmlDeviceGetMemoryInfo(dev, &mem);
        int cuda_index = cuda_index_of(dev, uuid);
        idx = cuda_index >= 0 ? register_device(uuid, cuda_index, mem.total) : GV_DEV_UNTRACKED;
    }
    n = atomic_load(&nvml_mapped);
    if (n < NVML_CACHE) {
        atomic_store_explicit(&nvml_map[n].idx, idx, memory_order_relaxed);
        atomic_store_explicit(&nvml_map[n].handle, dev, memory_order_relaxed);
        atomic_store_explicit(&nvml_mapped, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&map_lock);
    return idx;
}

const struct gv_shm_device *gv_ip_dev_info(int rdev)
{
    if (gv_ip.shm == NULL || rdev < 0 || rdev >= GV_SHM_MAX_DEVICES)
        return NULL;
    return &gv_shm_region(gv_ip.shm)->devices[rdev];
}

bool gv_ip_mem_view(int rdev, uint64_t real_free, uint64_t *free_out, uint64_t *total_out,
                    uint64_t *used_out)
{
    const struct gv_shm_device *d = gv_ip_dev_info(rdev);
    uint64_t total, share;
    uint32_t flags;
    /* The limit this process trusts (never more than its configuration). */
    if (d == NULL || !gv_shm_limit(gv_ip.shm, rdev, &total, &share, &flags) || total == 0)
        return false;
    /* Without oversubscription a limit above the card is capped by the card. */
    if (!(flags & GV_SHM_DEV_OVERSUBSCRIBE) && d->mem_physical != 0 && total > d->mem_physical)
        total = d->mem_physical;
    uint64_t used = gv_shm_mem_used(gv_ip.shm, rdev);
    uint64_t free_bytes = used < total ? total - used : 0;
    /* Oversubscribed slices may grow past what the card has free. */
    if (free_bytes > real_free && !(flags & GV_SHM_DEV_OVERSUBSCRIBE))
        free_bytes = real_free;
    *free_out = free_bytes;
    *total_out = total;
    if (used_out != NULL)
        *used_out = used < total ? used : total;
    return true;
}
