/*
 * gpuvisor-node's per-node configuration file (docs/node-agent.md,
 * "Configuration"): how GPUs are sliced and shared, which are excluded, and
 * what the plugin registers.  One JSON document can serve a whole cluster
 * (a ConfigMap mounted by the DaemonSet): top-level defaults, overridden by
 * the entry of "nodeConfig" whose name is this node, overridden per GPU.
 * Keys are matched case-insensitively so HAMi's device-config keys
 * (devicesplitcount, devicememoryscaling, filterdevices, nodeconfig) work.
 */
#ifndef GV_NODE_CONFIG_H
#define GV_NODE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "contracts/inventory.h"
#include "node/monitor/gv_metrics.h"
#include "node/passthrough/gv_passthrough.h"

#define GV_NODE_CONFIG_PATH "/etc/gpuvisor/node-config.json"
#define GV_NODE_MAX_SPLIT 1024

/* The sharing modes are the inventory's (one list: contracts/inventory.h). */
#define GV_NODE_MODE_VGPU GV_INVENTORY_MODE_VGPU               /* limits via the interposer */
#define GV_NODE_MODE_EXCLUSIVE GV_INVENTORY_MODE_EXCLUSIVE     /* whole GPUs, no interposer */
#define GV_NODE_MODE_TIMESLICING GV_INVENTORY_MODE_TIMESLICING /* replicas without limits */
#define GV_NODE_MODE_MPS GV_INVENTORY_MODE_MPS                 /* CUDA MPS, per-client limits */
typedef enum gv_inventory_mode gv_node_mode;

struct gv_node_gpu_settings {
    gv_node_mode mode;
    unsigned split;     /* devices advertised per GPU (1 in exclusive mode) */
    double mem_scaling; /* > 1: oversubscription */
    double core_scaling;
    /*
     * From NVIDIA's sharing block (below) for the GPUs it replicates: the
     * resource the devices go under ("" = resourceName) and whether a
     * request for more than one replica is refused.
     */
    char resource[128];
    bool fail_gt_one;
    /*
     * "migMode": how a MIG-enabled GPU's MIG devices are served.  false
     * ("whole", default): one container each, per migStrategy (mode_mig.c);
     * true ("vgpu"): each MIG device is a vGPU GPU of its own, sliced
     * `split` ways with the interposer's limits inside the instance
     * (docs/mig-cdi.md, "vGPU slices inside MIG instances").
     */
    bool mig_vgpu;
};

/* One entry of sharing.<strategy>.resources (NVIDIA's ReplicatedResource). */
struct gv_node_shared_resource {
    char name[128];    /* the resource replicated: GPUs match when it is resourceName */
    unsigned replicas; /* >= 2 */
    unsigned count;    /* devices: the first `count` GPUs by index; 0 with n_list 0: all */
    char (*list)[96];  /* devices: GPU indexes (decimal) or UUIDs */
    size_t n_list;
};

/*
 * NVIDIA's `sharing` block (k8s-device-plugin config v1): timeSlicing, or
 * mps (which wins when both replicate, as in NVIDIA's plugin).
 */
struct gv_node_sharing {
    bool active;
    gv_node_mode mode; /* GV_NODE_MODE_TIMESLICING or GV_NODE_MODE_MPS */
    bool rename_by_default;
    bool fail_gt_one; /* default false for timeSlicing, true for mps (NVIDIA's) */
    struct gv_node_shared_resource *res;
    size_t n_res;
};

struct gv_node_gpu_rule {
    char uuid[96]; /* "" when matched by index */
    int index;     /* -1 when matched by uuid */
    /* which settings the rule overrides */
    bool has_mode, has_split, has_mem, has_core, has_mig;
    struct gv_node_gpu_settings s;
};

struct gv_node_config {
    char resource_name[128];
    bool cdi;              /* answer CDI device names instead of NVIDIA_VISIBLE_DEVICES */
    char cdi_kind[128];    /* "gpuvisor.io/gpu": CDI names are <kind>=<uuid> */
    char core_policy[16];  /* GPU_CORE_UTILIZATION_POLICY: "", default, force, disable */
    char mig_strategy[8];  /* migStrategy (HAMi: migstrategy): none (default), single, mixed */
    /*
     * docs/mig-cdi.md: cdiSpecDir (where the CDI spec is written when cdi is
     * on; default /var/run/cdi), driverRoot (the host driver's files, as the
     * agent sees them; default /) and nvidiaRuntime (false: Allocate
     * mounts device nodes and driver files itself, plain runc suffices).
     * containerDriverRoot: where the agent sees driverRoot (NVIDIA's
     * plugin's name; default: driverRoot).
     */
    char cdi_spec_dir[256];
    char driver_root[256];
    char container_driver_root[256];
    bool nvidia_runtime;
    struct gv_node_gpu_settings defaults;
    char (*exclude_uuids)[96];
    size_t n_exclude_uuids;
    int *exclude_indexes;
    size_t n_exclude_indexes;
    struct gv_node_gpu_rule *rules;
    size_t n_rules;
    /* HAMi's node keys (docs/migrate-from-hami.md, "Node configuration"). */
    uint64_t preconfigured_mem_mib; /* memory of GPUs NVML reports none for; 0 = none */
    char libcuda_log_level[8];      /* LIBCUDA_LOG_LEVEL handed to containers; "" = unset */
    bool hide_numa;                 /* enablenumatopology false: no NUMA node to the kubelet */
    /* Why a HAMi key read here changes nothing (each also logged at parse). */
    char (*notes)[256];
    size_t n_notes;
    struct gv_metrics_settings metrics; /* "metrics": listener, series, backstop */
    struct gv_node_sharing sharing;     /* NVIDIA's sharing block (a node's replaces the top one) */
    /* What was accepted and ignored, as NVIDIA's plugin warns (e.g. "rename"); "" none. */
    char warnings[256];
    struct gv_pt_settings passthrough;  /* "passthrough": docs/passthrough.md */
};

/* Defaults: nvidia.com/gpu, vgpu, split 10, scaling 1, no CDI, nothing excluded. */
gv_status gv_node_config_default(struct gv_node_config **out, struct gv_error *err);
/*
 * Parses a config document for node `node` (may be NULL: no per-node
 * section applies).  Unknown keys, wrong types and out-of-range values fail
 * with a message naming the key path and the value.
 */
gv_status gv_node_config_parse(const char *text, size_t len, const char *node,
                               struct gv_node_config **out, struct gv_error *err);
/* Reads path; a missing file gives the defaults (the file is optional). */
gv_status gv_node_config_load(const char *path, const char *node, struct gv_node_config **out,
                              struct gv_error *err);
void gv_node_config_free(struct gv_node_config *cfg);

/* Settings of one GPU; returns false when the GPU is excluded. */
bool gv_node_config_gpu(const struct gv_node_config *cfg, const char *uuid, unsigned index,
                        struct gv_node_gpu_settings *out);

#endif
