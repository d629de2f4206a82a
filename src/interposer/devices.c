/*
 * Device identity: which shared-region device an application's CUDA
 * ordinal or NVML handle is, and which configured limit applies to it.
 *
 * Limits are indexed by the CUDA ordinal the application sees (after
 * CUDA_VISIBLE_DEVICES), as in HAMi.  The region keys devices by uuid so
 * processes with different CUDA_VISIBLE_DEVICES share one account per GPU.
 * NVML ignores CUDA_VISIBLE_DEVICES, so an NVML handle is mapped to a CUDA
 * ordinal by parsing it the way the driver does (indices in NVML order, or
 * GPU-uuid prefixes; the first invalid entry ends the list).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interposer/interposer.h"

/* Cached region index + 2 per CUDA ordinal / NVML index (0 = not resolved). */
static _Atomic int cuda_map[GV_SHM_MAX_DEVICES];
static _Atomic int nvml_map[GV_SHM_MAX_DEVICES];
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

static void format_uuid(const CUuuid *u, char *out, size_t n)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
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
    CUuuid u;
    CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
    if (gv_cu.cuDeviceGetUuid_v2 != NULL)
        rc = gv_cu.cuDeviceGetUuid_v2(&u, dev);
    else if (gv_cu.cuDeviceGetUuid != NULL)
        rc = gv_cu.cuDeviceGetUuid(&u, dev);
    size_t total = 0;
    if (rc == CUDA_SUCCESS && gv_cu.cuDeviceTotalMem_v2 != NULL)
        rc = gv_cu.cuDeviceTotalMem_v2(&total, dev);
    if (rc != CUDA_SUCCESS) {
        /* Not a device the driver knows: nothing to account, and not cached. */
        pthread_mutex_unlock(&map_lock);
        return GV_DEV_UNTRACKED;
    }
    char uuid[GV_SHM_UUID_LEN];
    format_uuid(&u, uuid, sizeof(uuid));
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

/* The CUDA ordinal of NVML device (index, uuid) under CUDA_VISIBLE_DEVICES, or -1. */
static int cuda_index_of(unsigned nvml_index, const char *uuid)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == NULL)
        return (int)nvml_index;
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", cvd);
    int pos = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save), pos++) {
        while (isspace((unsigned char)*tok))
            tok++;
        if (strncmp(tok, "GPU-", 4) == 0) {
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

int gv_ip_nvml_dev(nvmlDevice_t dev)
{
    unsigned index;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (gv_nv.nvmlDeviceGetIndex == NULL || gv_nv.nvmlDeviceGetUUID == NULL ||
        gv_nv.nvmlDeviceGetIndex(dev, &index) != NVML_SUCCESS || index >= GV_SHM_MAX_DEVICES ||
        gv_nv.nvmlDeviceGetUUID(dev, uuid, sizeof(uuid)) != NVML_SUCCESS)
        return GV_DEV_UNTRACKED;
    int cached = atomic_load_explicit(&nvml_map[index], memory_order_acquire);
    if (cached != 0)
        return cached - 2;
    pthread_mutex_lock(&map_lock);
    int idx = gv_ip.shm != NULL ? gv_shm_device_find(gv_ip.shm, uuid) : -1;
    if (idx < 0) {
        nvmlMemory_t mem = {0, 0, 0};
        if (gv_nv.nvmlDeviceGetMemoryInfo != NULL)
            gv_nv.nvmlDeviceGetMemoryInfo(dev, &mem);
        int cuda_index = cuda_index_of(index, uuid);
        idx = cuda_index >= 0 ? register_device(uuid, cuda_index, mem.total) : GV_DEV_UNTRACKED;
    }
    atomic_store_explicit(&nvml_map[index], idx + 2, memory_order_release);
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
    if (d == NULL || d->mem_limit == 0)
        return false;
    uint64_t total = d->mem_limit;
    /* Without oversubscription a limit above the card is capped by the card. */
    if (!(d->flags & GV_SHM_DEV_OVERSUBSCRIBE) && d->mem_physical != 0 && total > d->mem_physical)
        total = d->mem_physical;
    uint64_t used = gv_shm_mem_used(gv_ip.shm, rdev);
    uint64_t free_bytes = used < total ? total - used : 0;
    /* Oversubscribed slices may grow past what the card has free. */
    if (free_bytes > real_free && !(d->flags & GV_SHM_DEV_OVERSUBSCRIBE))
        free_bytes = real_free;
    *free_out = free_bytes;
    *total_out = total;
    if (used_out != NULL)
        *used_out = used < total ? used : total;
    return true;
}
