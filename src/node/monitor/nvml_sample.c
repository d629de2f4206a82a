/* The monitor's NVML side: opening the library, sampling each GPU, XID events. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_file.h"
#include "common/gv_log.h"
#include "common/gv_nvml.h"
#include "interposer/throttle.h"
#include "node/monitor/gv_monitor.h"
#include "node/monitor/monitor_internal.h"
#include "shm/gv_shm.h"
#include "node/monitor/monitor_state.h"

/* ---- NVML -------------------------------------------------------------------- */

void nvml_open(struct gv_monitor *m)
{
    const char *lib = m->cfg.nvml_lib ? m->cfg.nvml_lib : "libnvidia-ml.so.1";
    m->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (m->dl == NULL) {
        gv_warn("monitor: cannot load %s (%s): no per-GPU or per-process series", lib, dlerror());
        return;
    }
#define GV_X_FN(name) *(void **)&m->f.name = dlsym(m->dl, #name);
    MON_NVML_FUNCS(GV_X_FN)
    MON_NVML_OPTIONAL(GV_X_FN)
#undef GV_X_FN
#define GV_X_FN(name) || m->f.name == NULL
    if (0 MON_NVML_FUNCS(GV_X_FN)) {
        gv_warn("monitor: %s lacks a required NVML function: no per-GPU series", lib);
        return;
    }
#undef GV_X_FN
    if (m->f.nvmlInit_v2() != NVML_SUCCESS) {
        gv_warn("monitor: nvmlInit failed: no per-GPU series");
        return;
    }
    m->nvml_ok = true;
    unsigned n = 0;
    if (m->f.nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS)
        n = 0;
    if (m->f.nvmlEventSetCreate && m->f.nvmlEventSetCreate(&m->events) != NVML_SUCCESS)
        m->events = NULL;
    for (unsigned i = 0; i < n && m->n_gpus < GV_MONITOR_MAX_GPUS; i++) {
        struct gpu *g = &m->gpus[m->n_gpus];
        if (m->f.nvmlDeviceGetHandleByIndex_v2(i, &g->h) != NVML_SUCCESS ||
            m->f.nvmlDeviceGetUUID(g->h, g->uuid, sizeof(g->uuid)) != NVML_SUCCESS)
            continue;
        if (m->f.nvmlDeviceGetName(g->h, g->name, sizeof(g->name)) != NVML_SUCCESS)
            snprintf(g->name, sizeof(g->name), "unknown");
        g->index = i;
        g->minor = i;
        if (m->f.nvmlDeviceGetMinorNumber)
            m->f.nvmlDeviceGetMinorNumber(g->h, &g->minor);
        if (m->events && m->f.nvmlDeviceRegisterEvents)
            m->f.nvmlDeviceRegisterEvents(g->h, nvmlEventTypeXidCriticalError, m->events);
        m->n_gpus++;
    }
}

int gpu_by_uuid(const struct gv_monitor *m, const char *uuid)
{
    for (unsigned i = 0; i < m->n_gpus; i++)
        if (strcmp(m->gpus[i].uuid, uuid) == 0)
            return (int)i;
    return -1;
}

void sample_gpu(struct gv_monitor *m, struct gpu *g)
{
    g->ok = g->have_util = g->have_temp = g->have_power = g->have_clock = false;
    g->n_procs = 0;
    nvmlMemory_t mem;
    if (m->f.nvmlDeviceGetMemoryInfo(g->h, &mem) == NVML_SUCCESS) {
        g->ok = true;
        g->total = mem.total;
        g->used = mem.used;
    }
    nvmlUtilization_t u;
    if (m->f.nvmlDeviceGetUtilizationRates && m->f.nvmlDeviceGetUtilizationRates(g->h, &u) == NVML_SUCCESS) {
        g->have_util = true;
        g->util = u.gpu;
    }
    g->have_temp = m->f.nvmlDeviceGetTemperature &&
                   m->f.nvmlDeviceGetTemperature(g->h, NVML_TEMPERATURE_GPU, &g->temp) == NVML_SUCCESS;
    g->have_power = m->f.nvmlDeviceGetPowerUsage &&
                    m->f.nvmlDeviceGetPowerUsage(g->h, &g->power_mw) == NVML_SUCCESS;
    g->have_clock = m->f.nvmlDeviceGetClockInfo &&
                    m->f.nvmlDeviceGetClockInfo(g->h, NVML_CLOCK_SM, &g->sm_clock) == NVML_SUCCESS;
    /* Processes: the size query first, then the list (it may grow in between:
     * retry once with the new size). */
    __typeof__(m->f.nvmlDeviceGetComputeRunningProcesses_v3) list =
        m->f.nvmlDeviceGetComputeRunningProcesses_v3 ? m->f.nvmlDeviceGetComputeRunningProcesses_v3
                                                      : m->f.nvmlDeviceGetComputeRunningProcesses_v2;
    if (list == NULL)
        return;
    nvmlProcessInfo_t *infos = NULL;
    unsigned n = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        unsigned cap = n;
        nvmlReturn_t r = list(g->h, &n, infos);
        if (r == NVML_SUCCESS && (infos != NULL || n == 0))
            break;
        if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE) {
            n = 0;
            break;
        }
        if (n > MAX_PROCS_PER_GPU)
            n = MAX_PROCS_PER_GPU;
        if (n <= cap && infos != NULL) {
            n = 0;
            break;
        }
        free(infos);
        infos = calloc(n + 8, sizeof(*infos));
        if (infos == NULL) {
            n = 0;
            break;
        }
        n += 8;
    }
    if (n > 0 && infos != NULL) {
        g->procs = calloc(n, sizeof(*g->procs));
        for (unsigned i = 0; g->procs && i < n; i++) {
            g->procs[i].pid = infos[i].pid;
            g->procs[i].bytes = infos[i].usedGpuMemory == (unsigned long long)-1 ? 0 : infos[i].usedGpuMemory;
            g->procs[i].ctr = -1;
        }
        g->n_procs = g->procs ? n : 0;
    }
    free(infos);
    if (g->n_procs == 0 || m->f.nvmlDeviceGetProcessUtilization == NULL)
        return;
    unsigned ns = 0;
    if (m->f.nvmlDeviceGetProcessUtilization(g->h, NULL, &ns, g->util_seen) !=
            NVML_ERROR_INSUFFICIENT_SIZE || ns == 0)
        return;
    ns += 8;
    nvmlProcessUtilizationSample_t *sm = calloc(ns, sizeof(*sm));
    if (sm && m->f.nvmlDeviceGetProcessUtilization(g->h, sm, &ns, g->util_seen) == NVML_SUCCESS) {
        for (unsigned i = 0; i < ns; i++) {
            if (sm[i].timeStamp > g->util_seen)
                g->util_seen = sm[i].timeStamp;
            for (unsigned k = 0; k < g->n_procs; k++)
                if (g->procs[k].pid == sm[i].pid)
                    g->procs[k].sm = sm[i].smUtil;
        }
    }
    free(sm);
}

void drain_xids(struct gv_monitor *m)
{
    if (m->events == NULL || m->f.nvmlEventSetWait_v2 == NULL)
        return;
    nvmlEventData_t ev;
    for (int i = 0; i < 256 && m->f.nvmlEventSetWait_v2(m->events, &ev, 0) == NVML_SUCCESS; i++) {
        if (!(ev.eventType & nvmlEventTypeXidCriticalError))
            continue;
        for (unsigned k = 0; k < m->n_gpus; k++)
            if (m->gpus[k].h == ev.device)
                m->gpus[k].last_xid = ev.eventData;
    }
}
