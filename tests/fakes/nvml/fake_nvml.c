/*
 * Fake libnvidia-ml.so.1 (tests only): the simulated GPUs of fake_gpus.c
 * seen through NVML.  Like the real library it ignores CUDA_VISIBLE_DEVICES,
 * reports memory used by every live process on the card (shared state file)
 * and lists the processes using it.
 *
 * Other helpers extend this fake in their own clearly separated blocks at
 * the end of this file (or in their own .c files beside it).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/gv_nvml.h"
#include "fake_gpus.h"
#include "fake_nvml_mig.h"
#include "fake_nvml_telemetry.h"

struct nvmlDevice_st {
    int index;
};

static struct nvmlDevice_st devices[FAKE_MAX_GPUS];
static _Atomic int init_count;

#define FAKE_NVML_ERRORS(X)                                                                        \
    X(NVML_SUCCESS, "Success")                                                                     \
    X(NVML_ERROR_UNINITIALIZED, "Uninitialized")                                                   \
    X(NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument")                                             \
    X(NVML_ERROR_NOT_SUPPORTED, "Not Supported")                                                   \
    X(NVML_ERROR_NOT_FOUND, "Not Found")                                                           \
    X(NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size")                                           \
    X(NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found")                                         \
    X(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument version mismatch")                           \
    X(NVML_ERROR_UNKNOWN, "Unknown Error")

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
#define X(code, text)                                                                              \
    case code: return text;
        FAKE_NVML_ERRORS(X)
#undef X
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    int n = fake_gpu_count();
    for (int i = 0; i < n; i++)
        devices[i].index = i;
    atomic_fetch_add(&init_count, 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    int c = atomic_load(&init_count);
    while (c > 0 && !atomic_compare_exchange_weak(&init_count, &c, c - 1))
        ;
    return c > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

#define CHECK_INIT()                                                                               \
    do {                                                                                           \
        if (atomic_load(&init_count) == 0)                                                         \
            return NVML_ERROR_UNINITIALIZED;                                                       \
    } while (0)

/* Validates a handle and yields its simulated GPU. */
#define CHECK_DEVICE(dev, g)                                                                       \
    do {                                                                                           \
        CHECK_INIT();                                                                              \
        if ((dev) == NULL || (dev) < devices || (dev) >= devices + fake_gpu_count())               \
            return NVML_ERROR_INVALID_ARGUMENT;                                                    \
        (g) = fake_gpu_get((dev)->index);                                                          \
    } while (0)

static nvmlReturn_t copy_string(char *dst, unsigned int len, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    CHECK_INIT();
    const char *v = getenv("GV_FAKE_NVML_DRIVER_VERSION");
    return copy_string(version, length, v != NULL ? v : "580.65.06");
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    CHECK_INIT();
    return copy_string(version, length, "13.580.65.06");
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *v = getenv("GV_FAKE_CUDA_DRIVER_VERSION");
    *cudaDriverVersion = v != NULL ? atoi(v) : 13000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    CHECK_INIT();
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* a driver that initialises but cannot enumerate (a GPU off the bus
     * mid-scan, a driver/library mismatch): NVML answers UNKNOWN */
    const char *fail = getenv("GV_FAKE_NVML_COUNT_FAILS");
    if (fail != NULL && strcmp(fail, "1") == 0)
        return NVML_ERROR_UNKNOWN;
    *deviceCount = (unsigned)fake_gpu_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (device == NULL || index >= (unsigned)fake_gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < fake_gpu_count(); i++) {
        if (strcmp(fake_gpu_get(i)->uuid, uuid) == 0) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    /* MIG devices are found by their uuid too (nvidia-smi -i MIG-...) */
    return strncmp(uuid, "MIG-", 4) == 0 ? fake_mig_by_uuid(uuid, device) : NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    CHECK_INIT();
    unsigned dom, bus, dev;
    if (pciBusId == NULL || device == NULL || sscanf(pciBusId, "%x:%x:%x", &dom, &bus, &dev) != 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < fake_gpu_count(); i++) {
        const struct fake_gpu *g = fake_gpu_get(i);
        if (g->pci_domain == dom && g->pci_bus == bus && g->pci_device == dev) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    (void)g;
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    if (fake_mig_handle(device)) /* fake_nvml_mig.c */
        return fake_mig_name(device, name, length);
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    return copy_string(name, length, g->name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    if (fake_mig_handle(device)) /* fake_nvml_mig.c */
        return fake_mig_uuid(device, uuid, length);
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    return copy_string(uuid, length, g->uuid);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    (void)g;
    if (minorNumber == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = (unsigned)device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = 0x233010de;
    snprintf(pci->busId, sizeof(pci->busId), "%s", g->pci_bus_id);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", g->pci_domain,
             g->pci_bus, g->pci_device);
    return NVML_SUCCESS;
}

/* Topology from the table (tests/fakes/README.md): NVLink is not a PCIe
 * level, so pairs report their PCIe path whatever their links. */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo)
{
    const struct fake_gpu *a, *b;
    CHECK_DEVICE(device1, a);
    CHECK_DEVICE(device2, b);
    if (pathInfo == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (a == b)
        *pathInfo = NVML_TOPOLOGY_INTERNAL;
    else if (a->pcie_switch >= 0 && a->pcie_switch == b->pcie_switch)
        *pathInfo = NVML_TOPOLOGY_SINGLE;
    else if (a->numa_node == b->numa_node)
        *pathInfo = NVML_TOPOLOGY_NODE;
    else
        *pathInfo = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (isActive == NULL || link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    bool any = false;
    for (int l = 0; l < NVML_NVLINK_MAX_LINKS; l++)
        any |= g->nvlink_peer[l] >= 0;
    if (!any)
        return NVML_ERROR_NOT_SUPPORTED; /* a GPU without NVLink, as on PCIe cards */
    *isActive = g->nvlink_peer[link] >= 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (pci == NULL || link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct fake_gpu *peer = g->nvlink_peer[link] >= 0 ? fake_gpu_get(g->nvlink_peer[link])
                                                             : NULL;
    if (peer == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof(*pci));
    pci->domain = peer->pci_domain;
    pci->bus = peer->pci_bus;
    pci->device = peer->pci_device;
    snprintf(pci->busId, sizeof(pci->busId), "%s", peer->pci_bus_id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (node == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->numa_node < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned)g->numa_node;
    return NVML_SUCCESS;
}

/* sm_count x the FP32 cores per SM of its architecture, as the real NVML
 * reports (the agent divides back); FAKE_GPU_<i>=...,cores=0 makes the
 * query fail as on drivers before R470 (NOT_SUPPORTED) */
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (numCores == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->no_core_count)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned per_sm = g->cc_major == 7 || (g->cc_major == 8 && g->cc_minor == 0) ? 64 : 128;
    *numCores = (unsigned)g->sm_count * per_sm;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (major == NULL || minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (fake_mig_handle(device)) /* fake_nvml_mig.c */
        return fake_mig_memory(device, memory);
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t used = fake_gpu_mem_used(device->index);
    memory->total = g->mem_total;
    memory->used = used;
    memory->free = used < g->mem_total ? g->mem_total - used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (fake_mig_handle(device)) { /* fake_nvml_mig.c: the instance's memory */
        if (memory == NULL)
            return NVML_ERROR_INVALID_ARGUMENT;
        if (memory->version != nvmlMemory_v2)
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        nvmlMemory_t m;
        nvmlReturn_t r = fake_mig_memory(device, &m);
        if (r == NVML_SUCCESS) {
            memory->total = m.total;
            memory->reserved = 0;
            memory->used = m.used;
            memory->free = m.free;
        }
        return r;
    }
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t used = fake_gpu_mem_used(device->index);
    memory->total = g->mem_total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = used < g->mem_total ? g->mem_total - used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (utilization == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t used = fake_gpu_mem_used(device->index);
    utilization->gpu = fake_telemetry_gpu((unsigned)device->index, "util", 0, NULL);
    utilization->memory = (unsigned)(g->mem_total ? used * 100 / g->mem_total : 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    if (processSamplesCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /*
     * One sample, taken now, per live process holding memory on the card:
     * memory utilisation is its share of the card; SM utilisation comes from
     * the telemetry file (fake_nvml_telemetry.h), 0 when it names none.
     */
    pid_t pids[FAKE_MAX_PROCS];
    uint64_t bytes[FAKE_MAX_PROCS];
    int n = fake_gpu_procs(device->index, pids, bytes, FAKE_MAX_PROCS);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
    if (n == 0 || now <= lastSeenTimeStamp) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == NULL || *processSamplesCount < (unsigned)n) {
        *processSamplesCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++)
        utilization[i] = (nvmlProcessUtilizationSample_t){
            .pid = (unsigned)pids[i],
            .timeStamp = now,
            .smUtil = fake_telemetry_proc_sm((unsigned)pids[i]),
            .memUtil = (unsigned)(g->mem_total ? bytes[i] * 100 / g->mem_total : 0)};
    *processSamplesCount = (unsigned)n;
    return NVML_SUCCESS;
}

/* Fills infos (stride-sized entries) from the card's live processes. */
static nvmlReturn_t list_procs(nvmlDevice_t device, unsigned int *infoCount, void *infos,
                               size_t stride)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    (void)g;
    if (infoCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    pid_t pids[FAKE_MAX_PROCS];
    uint64_t bytes[FAKE_MAX_PROCS];
    int n = fake_gpu_procs(device->index, pids, bytes, FAKE_MAX_PROCS);
    if (infos == NULL || *infoCount < (unsigned)n) {
        *infoCount = (unsigned)n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        nvmlProcessInfo_t e = {.pid = (unsigned)pids[i],
                               .usedGpuMemory = bytes[i],
                               .gpuInstanceId = 0xFFFFFFFFu,
                               .computeInstanceId = 0xFFFFFFFFu};
        memcpy((char *)infos + (size_t)i * stride, &e, stride);
    }
    *infoCount = (unsigned)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return list_procs(device, infoCount, infos, sizeof(nvmlProcessInfo_v1_t));
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return list_procs(device, infoCount, infos, sizeof(nvmlProcessInfo_t));
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return list_procs(device, infoCount, infos, sizeof(nvmlProcessInfo_t));
}

/* The simulated card runs no graphics work and no MPS server: empty lists. */
static nvmlReturn_t no_procs(nvmlDevice_t device, unsigned int *infoCount)
{
    const struct fake_gpu *g;
    CHECK_DEVICE(device, g);
    (void)g;
    if (infoCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

#define FAKE_NO_PROCS(sym, type)                                                                   \
    nvmlReturn_t sym(nvmlDevice_t device, unsigned int *infoCount, type *infos)                    \
    {                                                                                              \
        (void)infos;                                                                               \
        return no_procs(device, infoCount);                                                        \
    }
FAKE_NO_PROCS(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
FAKE_NO_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_t)
FAKE_NO_PROCS(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
FAKE_NO_PROCS(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
FAKE_NO_PROCS(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_t)
FAKE_NO_PROCS(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

/* ---- node agent block (events, Xid injection, MIG, ...) goes below ---- */
