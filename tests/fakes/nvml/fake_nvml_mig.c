/*
 * Fake NVML, MIG devices (tests only; tests/fakes/README.md, "MIG").
 *
 * The MIG geometry lives in the file GV_FAKE_MIG_CONFIG, one line per
 * MIG-enabled GPU: "<gpu index> <profile>,<profile>,...", a profile
 * "<g>g.<gb>gb" or "-" for an unused MIG device index (the real NVML's
 * indexes have holes).  A GPU on a line has MIG mode enabled, even with no
 * profile ("enabled but empty").  Like an operator running `nvidia-smi mig`,
 * a test may rewrite the file while the agent runs: the fake re-reads it
 * when its mtime or size changes, and instances whose line changed get new
 * UUIDs (real MIG UUIDs are regenerated when instances are recreated).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/gv_nvml.h"
#include "fake_gpus.h"
#include "fake_nvml_mig.h"

#define MIG_SLOTS 7 /* nvmlDeviceGetMaxMigDeviceCount of A100/H100 */

struct fake_mig {
    int gpu, slot;
    bool used;
    unsigned g, gb; /* "<g>g.<gb>gb" */
    char profile[16];
    char uuid[80];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_mig migs[FAKE_MAX_GPUS][MIG_SLOTS];
static bool enabled[FAKE_MAX_GPUS];
static char lines[FAKE_MAX_GPUS][256];
static unsigned generation[FAKE_MAX_GPUS];
static struct stat seen;

static void parse_gpu(int i, const char *spec)
{
    memset(migs[i], 0, sizeof(migs[i]));
    const struct fake_gpu *g = fake_gpu_get(i);
    const char *p = spec;
    for (int slot = 0; slot < MIG_SLOTS && *p; slot++) {
        struct fake_mig *m = &migs[i][slot];
        size_t len = strcspn(p, ",");
        char one[32];
        snprintf(one, sizeof(one), "%.*s", (int)(len < 31 ? len : 31), p);
        p += len + (p[len] == ',');
        m->gpu = i;
        m->slot = slot;
        if (sscanf(one, "%ug.%ugb", &m->g, &m->gb) != 2 || m->g == 0 || m->g > 7)
            continue; /* "-" (or garbage): an unused index */
        m->used = true;
        snprintf(m->profile, sizeof(m->profile), "%ug.%ugb", m->g, m->gb);
        snprintf(m->uuid, sizeof(m->uuid), "MIG-%08x-%04x-4000-8000-%012x", 0x5a1e0000u + (unsigned)i,
                 generation[i] & 0xffff, (unsigned)slot);
    }
    /* the fake libcuda's one compute instance (mig=MIG-...) is the first MIG device */
    for (int slot = 0; g && g->mig[0] && slot < MIG_SLOTS; slot++)
        if (migs[i][slot].used) {
            snprintf(migs[i][slot].uuid, sizeof(migs[i][slot].uuid), "%s", g->mig);
            break;
        }
}

/* Re-reads the geometry when the file changed. Caller holds lock. */
static void refresh(void)
{
    const char *path = getenv("GV_FAKE_MIG_CONFIG");
    struct stat st;
    memset(&st, 0, sizeof(st));
    if (path == NULL || *path == '\0' || stat(path, &st) != 0)
        memset(&st, 0, sizeof(st));
    if (st.st_mtim.tv_sec == seen.st_mtim.tv_sec && st.st_mtim.tv_nsec == seen.st_mtim.tv_nsec &&
        st.st_size == seen.st_size && st.st_ino == seen.st_ino)
        return;
    seen = st;
    char now[FAKE_MAX_GPUS][256];
    bool on[FAKE_MAX_GPUS] = {false};
    memset(now, 0, sizeof(now));
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        int idx, used = 0;
        if (line[0] == '#' || sscanf(line, "%d%n", &idx, &used) != 1 || idx < 0 ||
            idx >= FAKE_MAX_GPUS)
            continue;
        char *spec = line + used;
        spec += strspn(spec, " \t");
        spec[strcspn(spec, " \t\r\n")] = '\0';
        on[idx] = true;
        snprintf(now[idx], sizeof(now[idx]), "%s", spec);
    }
    if (f)
        fclose(f);
    for (int i = 0; i < FAKE_MAX_GPUS && i < fake_gpu_count(); i++) {
        if (on[i] == enabled[i] && strcmp(now[i], lines[i]) == 0)
            continue;
        generation[i]++;
        enabled[i] = on[i];
        memcpy(lines[i], now[i], sizeof(lines[i]));
        if (on[i])
            parse_gpu(i, lines[i]);
        else
            memset(migs[i], 0, sizeof(migs[i]));
    }
}

bool fake_mig_enabled(int gpu)
{
    if (gpu < 0 || gpu >= FAKE_MAX_GPUS)
        return false;
    pthread_mutex_lock(&lock);
    refresh();
    bool on = enabled[gpu];
    pthread_mutex_unlock(&lock);
    return on;
}

/* The MIG device behind a handle, or NULL for any other handle. */
static struct fake_mig *as_mig(nvmlDevice_t d)
{
    struct fake_mig *m = (struct fake_mig *)(void *)d;
    if (m < &migs[0][0] || m >= &migs[0][0] + FAKE_MAX_GPUS * MIG_SLOTS)
        return NULL;
    return m;
}

bool fake_mig_handle(nvmlDevice_t d) { return as_mig(d) != NULL; }

/* A MIG handle whose instance was destroyed since is invalid, as on a real GPU. */
static nvmlReturn_t live(nvmlDevice_t d, struct fake_mig *copy)
{
    struct fake_mig *m = as_mig(d);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    refresh();
    bool ok = m->used;
    *copy = *m;
    pthread_mutex_unlock(&lock);
    return ok ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t gpu_index(nvmlDevice_t d, unsigned *idx)
{
    if (d == NULL || as_mig(d))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < (unsigned)fake_gpu_count(); i++) {
        nvmlDevice_t h;
        if (nvmlDeviceGetHandleByIndex_v2(i, &h) == NVML_SUCCESS && h == d) {
            *idx = i;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    unsigned idx, cur, pend;
    nvmlReturn_t r = gpu_index(device, &idx);
    if (r != NVML_SUCCESS)
        return r;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = nvmlDeviceGetMigMode(device, &cur, &pend)) != NVML_SUCCESS)
        return r; /* NOT_SUPPORTED without MIG */
    *count = MIG_SLOTS;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    unsigned idx;
    nvmlReturn_t r = gpu_index(device, &idx);
    if (r != NVML_SUCCESS)
        return r;
    if (migDevice == NULL || index >= MIG_SLOTS)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned cur = 0, pend = 0;
    if (nvmlDeviceGetMigMode(device, &cur, &pend) != NVML_SUCCESS || cur != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_INVALID_ARGUMENT; /* MIG off (a MIG fault alone: on, no instances) */
    pthread_mutex_lock(&lock);
    refresh();
    bool used = migs[idx][index].used;
    pthread_mutex_unlock(&lock);
    if (!used)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = (nvmlDevice_t)(void *)&migs[idx][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    if (device == NULL || isMigDevice == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = as_mig(device) != NULL;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    struct fake_mig m;
    nvmlReturn_t r = live(migDevice, &m);
    if (r != NVML_SUCCESS || device == NULL)
        return r != NVML_SUCCESS ? r : NVML_ERROR_INVALID_ARGUMENT;
    return nvmlDeviceGetHandleByIndex_v2((unsigned)m.gpu, device);
}

/* An instance id of a MIG handle (GPU handles: NOT_SUPPORTED, as the real NVML). */
static nvmlReturn_t instance_id(nvmlDevice_t device, unsigned int *id, bool gpu_instance)
{
    struct fake_mig m;
    nvmlReturn_t r = live(device, &m);
    if (r != NVML_SUCCESS)
        return as_mig(device) ? r : NVML_ERROR_NOT_SUPPORTED;
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* GPU instance ids start at 1; one compute instance (0) spans its GPU instance */
    *id = gpu_instance ? (unsigned)m.slot + 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, true);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, false);
}

/* "<g>g.<gb>gb": the instance's memory as NVML reports it, a little under gb GiB (4864 MiB for 5gb). */
static unsigned long long mig_mib(const struct fake_mig *m) { return m->gb * 1024ull - 256; }

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *a)
{
    struct fake_mig m;
    nvmlReturn_t r = live(device, &m);
    if (r != NVML_SUCCESS)
        return as_mig(device) ? r : NVML_ERROR_NOT_SUPPORTED;
    if (a == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct fake_gpu *g = fake_gpu_get(m.gpu);
    memset(a, 0, sizeof(*a));
    a->multiprocessorCount = (unsigned)(g ? g->sm_count : 98) * m.g / 7;
    a->sharedCopyEngineCount = m.g;
    a->sharedDecoderCount = m.g / 2;
    a->sharedJpegCount = m.g == 7;
    a->sharedOfaCount = m.g == 7;
    a->gpuInstanceSliceCount = m.g;
    a->computeInstanceSliceCount = m.g;
    a->memorySizeMB = mig_mib(&m);
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_out(char *dst, unsigned int length, const char *text)
{
    if (dst == NULL || length <= strlen(text))
        return dst == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(dst, length, "%s", text);
    return NVML_SUCCESS;
}

nvmlReturn_t fake_mig_uuid(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct fake_mig m;
    nvmlReturn_t r = live(device, &m);
    return r != NVML_SUCCESS ? r : copy_out(uuid, length, m.uuid);
}

nvmlReturn_t fake_mig_name(nvmlDevice_t device, char *name, unsigned int length)
{
    struct fake_mig m;
    nvmlReturn_t r = live(device, &m);
    if (r != NVML_SUCCESS)
        return r;
    const struct fake_gpu *g = fake_gpu_get(m.gpu);
    char text[160];
    snprintf(text, sizeof(text), "%s MIG %s", g ? g->name : "NVIDIA GPU", m.profile);
    return copy_out(name, length, text);
}

nvmlReturn_t fake_mig_memory(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct fake_mig m;
    nvmlReturn_t r = live(device, &m);
    if (r != NVML_SUCCESS)
        return r;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = mig_mib(&m) << 20;
    /* the fake libcuda's one compute instance is where CUDA allocations land */
    const struct fake_gpu *g = fake_gpu_get(m.gpu);
    memory->used = g && g->mig[0] && strcmp(m.uuid, g->mig) == 0 ? fake_gpu_mem_used(m.gpu) : 0;
    if (memory->used > memory->total)
        memory->used = memory->total;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t fake_mig_by_uuid(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t r = NVML_ERROR_NOT_FOUND;
    pthread_mutex_lock(&lock);
    refresh();
    for (int i = 0; i < FAKE_MAX_GPUS && r != NVML_SUCCESS; i++)
        for (int k = 0; k < MIG_SLOTS; k++)
            if (migs[i][k].used && strcmp(migs[i][k].uuid, uuid) == 0) {
                *device = (nvmlDevice_t)(void *)&migs[i][k];
                r = NVML_SUCCESS;
                break;
            }
    pthread_mutex_unlock(&lock);
    return r;
}
