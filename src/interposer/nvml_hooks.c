/*
 * NVML views inside a container: memory totals are the slice (nvidia-smi
 * shows "0MiB / 3000MiB"), and process lists show the container's own
 * processes (those holding a slot in its shared region) with the bytes the
 * region charged them.
 */
#include <string.h>

#include "interposer/interposer.h"

GV_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    GV_NEED_NVML(nvmlDeviceGetMemoryInfo);
    nvmlReturn_t rc = gv_nv.nvmlDeviceGetMemoryInfo(device, memory);
    if (rc != NVML_SUCCESS)
        return rc;
    uint64_t f, t, u;
    if (gv_ip_mem_view(gv_ip_nvml_dev(device), memory->free, &f, &t, &u)) {
        memory->total = t;
        memory->free = f;
        memory->used = u;
    }
    return rc;
}

GV_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    GV_NEED_NVML(nvmlDeviceGetMemoryInfo_v2);
    nvmlReturn_t rc = gv_nv.nvmlDeviceGetMemoryInfo_v2(device, memory);
    if (rc != NVML_SUCCESS)
        return rc;
    uint64_t f, t, u;
    if (gv_ip_mem_view(gv_ip_nvml_dev(device), memory->free, &f, &t, &u)) {
        memory->total = t;
        memory->reserved = 0; /* the driver's reserve is outside the slice */
        memory->free = f;
        memory->used = u;
    }
    return rc;
}

/* The container's slot for a pid NVML reports (host or container pid). */
static const struct gv_shm_proc *slot_of_pid(unsigned pid)
{
    const struct gv_shm_region *r = gv_shm_region(gv_ip.shm);
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
        const struct gv_shm_proc *p = &r->procs[i];
        int32_t spid = atomic_load(&p->pid);
        if (spid != 0 && ((unsigned)spid == pid || (p->hostpid != 0 && (unsigned)p->hostpid == pid)))
            return p;
    }
    return NULL;
}

/*
 * Keeps the entries of the container's processes (entries are stride
 * bytes, pid first) and, for process lists (pid then usedGpuMemory in every
 * NVML version), reports what the region charged them.  Without a shared
 * region configured the list is left as the driver gave it.
 */
static void filter_procs(nvmlDevice_t device, unsigned *count, void *infos, size_t stride,
                         bool memory)
{
    if (gv_ip.shm == NULL || !gv_ip.cfg.shared_cache[0] || infos == NULL)
        return;
    int rdev = gv_ip_nvml_dev(device);
    unsigned kept = 0;
    for (unsigned i = 0; i < *count; i++) {
        char *e = (char *)infos + (size_t)i * stride;
        nvmlProcessInfo_v1_t head;
        memcpy(&head, e, sizeof(head));
        const struct gv_shm_proc *p = slot_of_pid(head.pid);
        if (p == NULL)
            continue;
        if (rdev >= 0 && memory)
            head.usedGpuMemory = atomic_load(&p->mem_used[rdev]);
        memcpy(e, &head, sizeof(head));
        if (kept != i)
            memmove((char *)infos + (size_t)kept * stride, e, stride);
        kept++;
    }
    *count = kept;
}

#define GV_PROC_HOOK(sym, type)                                                                    \
    GV_EXPORT nvmlReturn_t sym(nvmlDevice_t device, unsigned int *infoCount, type *infos)          \
    {                                                                                              \
        GV_NEED_NVML(sym);                                                                         \
        nvmlReturn_t rc = gv_nv.sym(device, infoCount, infos);                                     \
        if (rc == NVML_SUCCESS && infoCount != NULL)                                               \
            filter_procs(device, infoCount, infos, sizeof(type), true);                            \
        return rc;                                                                                 \
    }

GV_PROC_HOOK(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
GV_PROC_HOOK(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t)
GV_PROC_HOOK(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
GV_PROC_HOOK(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
GV_PROC_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_t)
GV_PROC_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
GV_PROC_HOOK(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
GV_PROC_HOOK(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_t)
GV_PROC_HOOK(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

/* Per-process utilisation samples name processes too: only the container's. */
GV_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                       nvmlProcessUtilizationSample_t *utilization,
                                                       unsigned int *processSamplesCount,
                                                       unsigned long long lastSeenTimeStamp)
{
    GV_NEED_NVML(nvmlDeviceGetProcessUtilization);
    nvmlReturn_t rc = gv_nv.nvmlDeviceGetProcessUtilization(device, utilization,
                                                            processSamplesCount, lastSeenTimeStamp);
    if (rc != NVML_SUCCESS || processSamplesCount == NULL)
        return rc;
    filter_procs(device, processSamplesCount, utilization, sizeof(*utilization), false);
    /* NVML's answer when no process has a sample. */
    return *processSamplesCount == 0 && utilization != NULL && gv_ip.shm != NULL &&
                   gv_ip.cfg.shared_cache[0]
               ? NVML_ERROR_NOT_FOUND
               : rc;
}
