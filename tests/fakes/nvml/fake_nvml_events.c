/*
 * Fake libnvidia-ml.so.1, node-agent block (tests only): MIG mode, GPU
 * temperature (the agent's reachability probe), and event sets delivering
 * Xid errors, all driven by a faults file the test rewrites atomically
 * (write a temporary file, rename it over):
 *
 *   GV_FAKE_NVML_FAULTS=/path/faults
 *     xid <gpu index> <xid> <id> [<gi> <ci>]
 *                                  an Xid critical error event; ids increase,
 *                                  each is delivered once to every event set
 *                                  created before the line appeared; gi/ci
 *                                  name the MIG GPU / compute instance it is
 *                                  attributed to (default: none, 0xFFFFFFFF,
 *                                  as NVML reports a GPU-wide event)
 *     lost <gpu index>             GPU unreachable: probes answer GPU_IS_LOST
 *     mig <gpu index>              MIG mode enabled
 *
 * nvmlEventSetWait_v2 blocks on inotify on the file's directory, so an idle
 * agent stays idle under the fake too.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_nvml.h"
#include "fake_gpus.h"
#include "fake_nvml_mig.h"
#include "fake_nvml_telemetry.h"

#define MAX_LINES 256

struct fault {
    char kind[8];
    unsigned gpu;
    unsigned long long xid, id;
    unsigned gi, ci; /* GV_NVML_NO_INSTANCE unless given */
};

struct nvmlEventSet_st {
    unsigned long long delivered; /* highest xid id handed out */
    unsigned long long mask[64];  /* event types registered per GPU index */
    int ino;
};

static size_t read_faults(struct fault *out, size_t max)
{
    const char *path = getenv("GV_FAKE_NVML_FAULTS");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    size_t n = 0;
    char line[256];
    while (f && n < max && fgets(line, sizeof(line), f)) {
        struct fault *x = &out[n];
        memset(x, 0, sizeof(*x));
        x->gi = x->ci = GV_NVML_NO_INSTANCE;
        int k = sscanf(line, "%7s %u %llu %llu %u %u", x->kind, &x->gpu, &x->xid, &x->id, &x->gi,
                       &x->ci);
        if (k >= 2 && x->kind[0] != '#')
            n++;
    }
    if (f)
        fclose(f);
    return n;
}

static bool has_fault(const char *kind, unsigned gpu)
{
    struct fault fs[MAX_LINES];
    size_t n = read_faults(fs, MAX_LINES);
    for (size_t i = 0; i < n; i++)
        if (strcmp(fs[i].kind, kind) == 0 && fs[i].gpu == gpu)
            return true;
    return false;
}

static nvmlReturn_t index_of(nvmlDevice_t device, unsigned *idx)
{
    return nvmlDeviceGetIndex(device, idx);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    unsigned idx;
    nvmlReturn_t r = index_of(device, &idx);
    if (r != NVML_SUCCESS)
        return r;
    if (currentMode == NULL || pendingMode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct fake_gpu *g = fake_gpu_get((int)idx);
    bool enabled = has_fault("mig", idx) || (g && g->mig[0]) || fake_mig_enabled((int)idx);
    int cap = g ? g->mig_capable : 1;
    if (cap < 0) /* the default rule of fake_gpus.h */
        cap = g->cc_minor == 0 && (g->cc_major == 8 || g->cc_major == 9 || g->cc_major == 10);
    if (!enabled && !cap)
        return NVML_ERROR_NOT_SUPPORTED; /* as the real NVML on a GPU without MIG */
    *currentMode = *pendingMode = enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned int *temp)
{
    unsigned idx;
    nvmlReturn_t r = index_of(device, &idx);
    if (r != NVML_SUCCESS)
        return r;
    if (temp == NULL || sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (has_fault("lost", idx))
        return NVML_ERROR_GPU_IS_LOST;
    *temp = fake_telemetry_gpu(idx, "temp", 40 + idx, NULL);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    /* Like NVML: only events after registration are seen. */
    struct fault fs[MAX_LINES];
    size_t n = read_faults(fs, MAX_LINES);
    for (size_t i = 0; i < n; i++)
        if (strcmp(fs[i].kind, "xid") == 0 && fs[i].id > s->delivered)
            s->delivered = fs[i].id;
    s->ino = -1;
    const char *path = getenv("GV_FAKE_NVML_FAULTS");
    if (path && *path) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        s->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (s->ino >= 0)
            inotify_add_watch(s->ino, slash ? dir : ".", IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE);
    }
    *set = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set)
{
    unsigned idx;
    nvmlReturn_t r = index_of(device, &idx);
    if (r != NVML_SUCCESS)
        return r;
    if (set == NULL || idx >= 64)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->mask[idx] |= eventTypes;
    return NVML_SUCCESS;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (set == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int64_t deadline = now_ms() + timeoutms;
    for (;;) {
        struct fault fs[MAX_LINES];
        size_t n = read_faults(fs, MAX_LINES);
        const struct fault *next = NULL;
        for (size_t i = 0; i < n; i++)
            if (strcmp(fs[i].kind, "xid") == 0 && fs[i].id > set->delivered &&
                fs[i].gpu < 64 && (set->mask[fs[i].gpu] & nvmlEventTypeXidCriticalError) &&
                (next == NULL || fs[i].id < next->id))
                next = &fs[i];
        if (next) {
            set->delivered = next->id;
            memset(data, 0, sizeof(*data));
            nvmlDeviceGetHandleByIndex_v2(next->gpu, &data->device);
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = next->xid;
            data->gpuInstanceId = next->gi;
            data->computeInstanceId = next->ci;
            return NVML_SUCCESS;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        if (set->ino < 0) {
            struct timespec ts = {left / 1000, (left % 1000) * 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        struct pollfd p = {.fd = set->ino, .events = POLLIN};
        if (poll(&p, 1, (int)left) > 0) {
            char buf[4096];
            while (read(set->ino, buf, sizeof(buf)) > 0)
                ;
        }
    }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (set->ino >= 0)
        close(set->ino);
    free(set);
    return NVML_SUCCESS;
}
