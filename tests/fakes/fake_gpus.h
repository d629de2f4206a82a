/*
 * Simulated GPUs shared by the fake libcuda.so.1 and libnvidia-ml.so.1
 * (tests only).  Configuration and the cross-process state file are
 * described in tests/fakes/README.md.
 *
 * Device memory is accounted per process in an optional state file
 * (GV_FAKE_GPU_STATE) so that, as on a real GPU, NVML in one process sees
 * what CUDA allocated in another, and a process that exits releases its
 * memory (entries of dead pids are ignored and recycled).
 */
#ifndef GV_FAKE_GPUS_H
#define GV_FAKE_GPUS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FAKE_MAX_GPUS 8
#define FAKE_MAX_PROCS 64

struct fake_gpu {
    char name[96];
    char uuid[80];          /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned char uuid_bytes[16];
    uint64_t mem_total;     /* bytes */
    char pci_bus_id[32];    /* "00000000:3B:00.0" */
    unsigned pci_domain, pci_bus, pci_device;
    int numa_node;          /* -1 = none */
    int sm_count;
    int cc_major, cc_minor;
    int no_core_count; /* key cores=0: nvmlDeviceGetNumGpuCores is NOT_SUPPORTED (pre-R470) */
    /* MIG mode: "" = off, else the uuid ("MIG-...") of the one compute
     * instance CUDA sees on this GPU (NVML's GPU handle keeps the GPU uuid). */
    char mig[80];
    unsigned char mig_bytes[16];
    /* MIG supported (nvmlDeviceGetMigMode answers; NOT_SUPPORTED otherwise):
     * key migcap=0|1, default 1 for compute capability 8.0, 9.0 and 10.0 (A100/A30,
     * H100/H200, B200: the data-centre parts that have MIG), 0 for the rest. */
    int mig_capable; /* -1: default rule */
    /* Topology table: NVLink peer (GPU index) of each link, -1 = link down;
     * PCIe switch id (GPUs sharing one are PIX to each other), -1 = none. */
    int nvlink_peer[18];
    int pcie_switch;
};

/* Number of simulated GPUs (config parsed once, thread-safe). */
int fake_gpu_count(void);
/* GPU i in NVML (physical) order, or NULL. */
const struct fake_gpu *fake_gpu_get(int i);

/*
 * The memory CUDA sees on GPU i: the card's, or for a GPU in MIG mode
 * (mig=MIG-...) the memory of the compute instance CUDA uses, when
 * GV_FAKE_MIG_CONFIG gives the GPU a geometry (its first MIG device, the one
 * the fake NVML names with that uuid; "<g>g.<gb>gb" = gb*1024-256 MiB, as a
 * real instance reports a little under its name).  CUDA allocations are
 * bounded by it, as by the instance on a real GPU.
 */
uint64_t fake_gpu_cuda_total(int i);

/* Bytes in use on GPU i by live processes. */
uint64_t fake_gpu_mem_used(int i);
/* Charges bytes on GPU i to this process; false when the GPU is full. */
bool fake_gpu_mem_charge(int i, uint64_t bytes);
void fake_gpu_mem_uncharge(int i, uint64_t bytes);
/* Live processes using GPU i: fills up to max (pid, bytes); returns the count. */
int fake_gpu_procs(int i, pid_t *pids, uint64_t *bytes, int max);

#endif
