/*
 * GPU discovery and health through NVML, loaded with
 * dlopen("libnvidia-ml.so.1") and our own declarations
 * (src/common/gv_nvml.h): nothing from a driver or toolkit is needed to
 * build.  Health comes from an NVML event set (Xid errors) plus a periodic
 * reachability probe, on a thread of its own; see docs/node-agent.md
 * ("Health").
 */
#ifndef GV_NODE_GPUS_H
#define GV_NODE_GPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

/* Xids caused by applications, not by the GPU: they never make a GPU unhealthy. */
#define GV_GPUS_APP_XIDS 13, 31, 43, 45, 68, 109

/* MIG devices per GPU at most (7 on A100/H100; room for one more). */
#define GV_GPU_MAX_MIGS 8

/* One MIG device (a compute instance inside a GPU instance), as NVML lists it. */
struct gv_mig {
    char uuid[96];     /* "MIG-..." */
    char profile[32];  /* "1g.10gb", or "1c.2g.20gb" when the CI is smaller than its GI */
    unsigned gi, ci;   /* GPU / compute instance ids */
    unsigned gi_slices, ci_slices, sms;
    unsigned copy, decoder, encoder, jpeg, ofa; /* shared engines (NVML attributes) */
    uint64_t memory_mib;
    /*
     * An Xid NVML attributed to this instance (its GPU and compute instance
     * ids in the event): set in gv_gpus_snapshot's copies only, never in
     * what the MIG re-read compares.
     */
    bool unhealthy;
    char reason[64];
};

struct gv_gpu {
    char uuid[96];
    unsigned index;
    char model[96];
    uint64_t memory_mib;
    char pci_bus_id[32];
    int numa; /* -1: unknown */
    bool mig; /* MIG mode enabled */
    bool mig_capable;       /* MIG supported (nvmlDeviceGetMigMode answers), enabled or not */
    int cc_major, cc_minor; /* CUDA compute capability; 0.0 unknown */
    unsigned sms;           /* streaming multiprocessors (gv_gpus_sm_count); 0 unknown */
    unsigned pci_class;     /* PCI class code (0x030200 3D/compute, 0x030000 VGA); 0 unknown */
    unsigned minor;         /* /dev/nvidia<minor> (nvmlDeviceGetMinorNumber; index if unknown) */
    /* MIG devices when mig (geometry set by the operator; re-read by the health thread) */
    struct gv_mig migs[GV_GPU_MAX_MIGS];
    unsigned n_migs;
    bool healthy;
    char reason[128]; /* why unhealthy */
    /* Interconnect groups (docs/contracts.md, "Node inventory"): GPUs with
     * the same id are joined by NVLink / sit under one PCIe switch; the id
     * is the lowest GPU index of the group, -1 = in no group (or unknown). */
    int nvlink_island;
    int pcie_switch;
};

struct gv_gpus_config {
    const char *library;        /* NULL: "libnvidia-ml.so.1" */
    const char *sys_root;       /* NULL: "/" (tests point it at a fake /sys tree) */
    int64_t probe_interval_ms;  /* reachability probe period (0: 10000) */
    int64_t recover_after_ms;   /* quiet time after a critical Xid before Healthy (0: 60000) */
    const unsigned *extra_ignored_xids;
    size_t n_extra_ignored_xids;
};

struct gv_gpus;

gv_status gv_gpus_open(const struct gv_gpus_config *cfg, struct gv_gpus **out,
                       struct gv_error *err);
/* Stops the health thread, shuts NVML down, unloads it. */
void gv_gpus_free(struct gv_gpus *g);

/* Copy of the current GPUs with their health (caller frees *out). */
gv_status gv_gpus_snapshot(struct gv_gpus *g, struct gv_gpu **out, size_t *n,
                           struct gv_error *err);
const char *gv_gpus_driver_version(const struct gv_gpus *g);
/* "12.4", or "" when NVML cannot say. */
const char *gv_gpus_cuda_version(const struct gv_gpus *g);

/*
 * Starts the health thread; changed(ud) runs on that thread after any
 * GPU's health flips (use it to wake the event loop).
 */
gv_status gv_gpus_watch(struct gv_gpus *g, void (*changed)(void *ud), void *ud,
                        struct gv_error *err);

/*
 * NVML's MIG profile name of a MIG device from its attributes, as go-nvlib
 * names it: "<gi>g.<gb>gb", "<ci>c.<gi>g.<gb>gb" when the compute instance
 * has fewer slices than its GPU instance; gb = memory rounded up to GiB.
 */
void gv_gpus_mig_profile(unsigned gi_slices, unsigned ci_slices, uint64_t memory_mib, char *out,
                         size_t cap);

/*
 * SMs of a GPU from NVML's CUDA core count and its compute capability (the
 * cores per SM of each architecture, Volta to Blackwell); 0 when either is
 * unknown or the architecture is newer than this table (a caller then
 * treats the SM count as unknown rather than guessing).
 */
unsigned gv_gpus_sm_count(unsigned cuda_cores, int cc_major, int cc_minor);

/* The sysfs PCI class of a bus id under sys_root (0x030200, ...); 0 when unknown. */
unsigned gv_gpus_pci_class(const char *sys_root, const char *pci_bus_id);

/* Parses the sysfs numa_node of a PCI bus id under sys_root; -1 when unknown. */
int gv_gpus_numa_node(const char *sys_root, const char *pci_bus_id);

#endif
