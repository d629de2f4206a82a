/*
 * Node GPU inventory: the JSON the node agent publishes in the node
 * annotation gpuvisor.io/node-gpus and the scheduler reads back.  Schema
 * (version 1) in docs/contracts.md, "Node GPU inventory".
 *
 * The decoder is strict (it reads what another process wrote into the API
 * server): unknown versions, missing or mistyped fields, duplicate uuids and
 * out-of-range numbers fail with a message naming the field.  Unknown extra
 * fields are ignored so a newer agent can add fields without breaking an
 * older scheduler.
 */
#ifndef GV_CONTRACTS_INVENTORY_H
#define GV_CONTRACTS_INVENTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

#define GV_INVENTORY_ANNOTATION "gpuvisor.io/node-gpus"
#define GV_INVENTORY_HEARTBEAT_ANNOTATION "gpuvisor.io/node-heartbeat"
#define GV_INVENTORY_VERSION 1
#define GV_INVENTORY_MAX_GPUS 64
#define GV_INVENTORY_UUID_MAX 96
#define GV_INVENTORY_MODEL_MAX 96

/*
 * The sharing modes: the one list (docs/node-agent.md, "Sharing modes").
 * X(ID, name in the JSON, whole): whole = 1 when a unit of the mode goes to
 * one container at a time (the scheduler places it as an exclusive GPU).
 * The node agent has one src/node/mode_<name>.c per entry (gv_mode_<ID>).
 */
#define GV_INVENTORY_MODE_LIST(X)                                                                  \
    X(VGPU, "vgpu", 0)                                                                             \
    X(EXCLUSIVE, "exclusive", 1)                                                                   \
    X(TIMESLICING, "timeslicing", 0)                                                               \
    X(MPS, "mps", 0)                                                                               \
    X(MIG, "mig", 1)                                                                               \
    X(PASSTHROUGH, "passthrough", 1)

enum gv_inventory_mode {
#define GV_X_IMODE(id, name, whole) GV_INVENTORY_MODE_##id,
    GV_INVENTORY_MODE_LIST(GV_X_IMODE)
#undef GV_X_IMODE
    GV_INVENTORY_MODE_COUNT
};

const char *gv_inventory_mode_name(enum gv_inventory_mode m);
/* -1 when unknown. */
int gv_inventory_mode_parse(const char *name);
/* Whether a unit of the mode is placed whole (one container at a time). */
bool gv_inventory_mode_whole(enum gv_inventory_mode m);

struct gv_inventory_gpu {
    char uuid[GV_INVENTORY_UUID_MAX];
    uint32_t index;
    char model[GV_INVENTORY_MODEL_MAX];
    uint64_t memory_mib;       /* physical */
    double memory_scaling;     /* schedulable memory = memory_mib * memory_scaling */
    uint32_t cores;            /* schedulable compute, percent (100 x core scaling) */
    uint32_t split;            /* max tasks (devices advertised) */
    int32_t numa;              /* -1: unknown */
    bool healthy;
    enum gv_inventory_mode mode;
    bool mig;                  /* MIG mode enabled */
    char pci_bus_id[32];
    /*
     * Agent-local (the node labels are computed from these; not in the
     * JSON, so the scheduler never sees them): NVIDIA GFD's inputs.
     */
    bool mig_capable;          /* MIG supported, enabled or not */
    int32_t cc_major, cc_minor; /* compute capability; 0.0 unknown */
    uint32_t pci_class;        /* 0x030200 compute, 0x030000 graphics; 0 unknown */
    bool renamed;              /* its replicas go under a renamed resource (no -SHARED) */
    /* Interconnect groups, 1 + the lowest GPU index of the GPUs joined by
     * NVLink / under one PCIe switch; 0 = in none (a zeroed struct claims no
     * topology).  JSON: "nvlinkIsland" / "pcieSwitch" = that index, absent
     * when 0. */
    uint32_t nvlink_group;
    uint32_t pcie_group;
    /*
     * "resource" (optional): the resource the GPU is advertised under when
     * not the agent's resourceName (NVIDIA's sharing block renamed it, e.g.
     * nvidia.com/gpu.shared); "" = resourceName.  Pods asking resourceName
     * cannot get such a GPU, so the scheduler does not place them there.
     */
    char resource[128];
};

/*
 * Whole devices: units the kubelet hands out one per device, under their
 * own resource names, which the scheduler places by count
 * (docs/scheduler.md, "Whole devices"): GPUs bound to vfio-pci and
 * mediated devices for VMs (docs/passthrough.md), and MIG devices
 * (docs/mig-cdi.md).  Optional "wholeDevices" list; absent means none.
 * The GPU a device occupies (pci_bus_id: the passthrough GPU itself, an
 * mdev's physical GPU, a MIG device's parent) is never sliced: the
 * scheduler treats a GPU with the same PCI address as unavailable.
 */
#define GV_INVENTORY_MAX_WHOLE 128
#define GV_INVENTORY_WHOLE_KIND_LIST(X)                                                            \
    X(PASSTHROUGH, "passthrough")                                                                  \
    X(MDEV, "mdev")                                                                                \
    X(MIG, "mig")

enum gv_inventory_whole_kind {
#define GV_X_WKIND(id, name) GV_INVENTORY_WHOLE_##id,
    GV_INVENTORY_WHOLE_KIND_LIST(GV_X_WKIND)
#undef GV_X_WKIND
    GV_INVENTORY_WHOLE_KIND_COUNT
};

struct gv_inventory_whole {
    enum gv_inventory_whole_kind kind;
    char resource[128];  /* "nvidia.com/GH100_H100_PCIE" */
    char id[64];         /* device ID advertised: PCI address, mdev UUID or MIG UUID */
    char pci_bus_id[32]; /* the physical GPU it occupies */
    char iommu_group[16];
    bool healthy;
    /* Optional (JSON "gpuUuid", "profile", "memoryMiB"; absent = "" / 0),
     * set for MIG devices: the parent GPU's uuid (required for kind mig),
     * the MIG profile ("1g.10gb") and the device's memory. */
    char gpu_uuid[GV_INVENTORY_UUID_MAX];
    char profile[32];
    uint64_t memory_mib;
};

struct gv_inventory_whole_list {
    uint32_t n;
    struct gv_inventory_whole dev[GV_INVENTORY_MAX_WHOLE];
};

struct gv_inventory {
    uint32_t version;
    char driver_version[80];
    char cuda_version[16]; /* "12.4"; "" unknown */
    char mig_strategy[8];  /* agent-local, labels only: none, single, mixed ("" = none) */
    /* agent-local, labels only: the MIG devices by profile (GFD's per-profile labels) */
    struct gv_inventory_mig {
        char profile[32];
        char model[GV_INVENTORY_MODEL_MAX]; /* of the first GPU holding one */
        uint32_t count, sms, gi_slices, ci_slices, copy, decoder, encoder, jpeg, ofa;
        uint64_t memory_mib;
    } migs[16];
    uint32_t n_migs;
    bool mig_empty; /* a MIG-enabled GPU has no MIG device */
    uint32_t n_gpus;
    struct gv_inventory_gpu gpus[GV_INVENTORY_MAX_GPUS];
    struct gv_inventory_whole_list whole; /* additive: "wholeDevices" */
};

/* Encodes to compact JSON with keys in a fixed order (stable text: compare to detect change). */
gv_status gv_inventory_encode(const struct gv_inventory *inv, char **out, struct gv_error *err);
/* Strict decoder of the above (len bytes, need not be NUL-terminated). */
gv_status gv_inventory_decode(const char *text, size_t len, struct gv_inventory *out,
                              struct gv_error *err);

/* True when g is not to be sliced: a whole device of inv occupies it (same
 * PCI address, any domain width), it is set aside for passthrough, or MIG
 * is enabled on it (its MIG devices, not the GPU, are what it serves). */
/* "passthrough", "mdev", "mig"; "unknown" out of range. */
const char *gv_inventory_whole_kind_name(enum gv_inventory_whole_kind k);
bool gv_inventory_gpu_taken(const struct gv_inventory *inv, const struct gv_inventory_gpu *g);
/* Whether two PCI addresses name one function ("00000000:41:00.0" = "0000:41:00.0"). */
bool gv_inventory_same_pci(const char *a, const char *b);

#endif
