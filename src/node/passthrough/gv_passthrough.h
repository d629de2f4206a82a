/*
 * Whole GPUs for virtual machines and secure containers: VFIO passthrough
 * and mediated devices (vfio-mdev, NVIDIA vGPU), discovered from sysfs.
 *
 * NVML cannot see a GPU bound to vfio-pci, so this module reads sysfs only:
 * <sys-root>/sys/bus/pci/devices/<bdf>/{vendor,device,class,driver,
 * iommu_group} and /sys/bus/mdev/devices/<uuid>.  Resource names, device IDs
 * and the Allocate environment follow NVIDIA's kubevirt-gpu-device-plugin
 * and KubeVirt's virt-launcher; every difference is listed in
 * docs/passthrough.md.
 *
 * Nothing here talks to the kubelet: the sharing-mode seam turns a scan into
 * device lists and an answer into a ContainerAllocateResponse.
 */
#ifndef GV_NODE_PASSTHROUGH_H
#define GV_NODE_PASSTHROUGH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

#define GV_PT_VENDOR_NVIDIA 0x10de
#define GV_PT_VFIO_DRIVER "vfio-pci"
#define GV_PT_NAMESPACE "nvidia.com"
#define GV_PT_PCI_IDS_DEFAULT "/usr/share/misc/pci.ids"
/* The environment prefixes virt-launcher reads (KubeVirt). */
#define GV_PT_ENV_PCI "PCI_RESOURCE"
#define GV_PT_ENV_MDEV "MDEV_PCI_RESOURCE"

#define GV_PT_BDF_MAX 16       /* "0000:41:00.0" */
#define GV_PT_GROUP_ID_MAX 16  /* decimal IOMMU group number */
#define GV_PT_RESOURCE_MAX 128 /* "nvidia.com/<name>" */
#define GV_PT_REASON_MAX 192
#define GV_PT_UUID_MAX 40
#define GV_PT_MAX_SPECS 17     /* /dev/vfio/vfio + one node per group (16 GPUs at most) */

/*
 * The node config's "passthrough" object (docs/passthrough.md, "Node
 * configuration"):
 *   {"enabled": true, "resourceName": "nvidia.com/pgpu", "pciIds": "/path/pci.ids",
 *    "bindAtStart": false, "bind": ["0000:41:00.0"]}
 * Off by default: another plugin (NVIDIA's) may own these devices.
 */
#define GV_PT_MAX_BIND 16
struct gv_pt_settings {
    bool enabled;
    bool bind_at_start; /* the binding helper, for the addresses in bind */
    char resource_override[GV_PT_RESOURCE_MAX];
    char pci_ids[256];
    size_t n_bind;
    char bind[GV_PT_MAX_BIND][GV_PT_BDF_MAX];
};
struct json_t;
/* Strict: unknown keys, wrong types, bad addresses and names fail naming path.key. */
gv_status gv_pt_settings_parse(struct json_t *v, const char *path, struct gv_pt_settings *out,
                               struct gv_error *err);

struct gv_pt_config {
    const char *sys_root;          /* NULL: "/" (tests point it at a fake tree) */
    const char *dev_root;          /* NULL: "/" ; /dev/vfio/<group> is checked under it */
    const char *pci_ids;           /* NULL: GV_PT_PCI_IDS_DEFAULT */
    const char *resource_override; /* non-NULL: every passthrough GPU advertises this name */
};

/* One PCI function of an IOMMU group. */
struct gv_pt_function {
    char bdf[GV_PT_BDF_MAX];
    uint16_t vendor, device;
    uint32_t class_code; /* 24-bit PCI class, e.g. 0x030200 (3D controller) */
    char driver[32];     /* "" when unbound */
};

struct gv_pt_group {
    char id[GV_PT_GROUP_ID_MAX];
    bool viable;                  /* every function bound to vfio-pci or a bridge */
    char reason[GV_PT_REASON_MAX]; /* why not viable */
    size_t n_funcs;
    struct gv_pt_function *funcs;
};

/* A passthrough GPU: an NVIDIA display-class function bound to vfio-pci. */
struct gv_pt_gpu {
    char bdf[GV_PT_BDF_MAX];
    uint16_t device;
    char resource[GV_PT_RESOURCE_MAX]; /* "nvidia.com/GH100_H100_PCIE" */
    char group[GV_PT_GROUP_ID_MAX];
    int numa; /* -1: unknown */
    bool healthy;
    char reason[GV_PT_REASON_MAX]; /* why unhealthy */
};

/* A mediated device instance (created by the operator). */
struct gv_pt_mdev {
    char uuid[GV_PT_UUID_MAX];
    char type_id[64];                  /* "nvidia-558" */
    char resource[GV_PT_RESOURCE_MAX]; /* "nvidia.com/NVIDIA_A2-4Q" */
    char parent[GV_PT_BDF_MAX];        /* parent function (a GPU or an SR-IOV VF) */
    char gpu[GV_PT_BDF_MAX];           /* the physical GPU: the VF's physfn, else the parent */
    char group[GV_PT_GROUP_ID_MAX];
    bool healthy;
    char reason[GV_PT_REASON_MAX];
};

struct gv_pt_scan {
    size_t n_gpus, n_groups, n_mdevs;
    struct gv_pt_gpu *gpus;     /* sorted by bdf */
    struct gv_pt_group *groups; /* groups holding at least one passthrough GPU */
    struct gv_pt_mdev *mdevs;   /* sorted by uuid */
};

/*
 * Scans sysfs.  Devices that vanish mid-scan are skipped (hot removal); a
 * missing /sys/bus/mdev is an empty mdev list.  Fails only when the PCI
 * device directory cannot be read.
 */
gv_status gv_pt_scan_new(const struct gv_pt_config *cfg, struct gv_pt_scan **out,
                         struct gv_error *err);
void gv_pt_scan_free(struct gv_pt_scan *s);
/*
 * Hot removal: devices of prev that are gone from now are added back to now
 * as Unhealthy ("removed ..."), so the kubelet sees them Unhealthy rather
 * than silently dropped (what NVIDIA's plugin does when /dev/vfio/<group>
 * goes).  They stay until the agent restarts.
 */
gv_status gv_pt_scan_carry(struct gv_pt_scan *now, const struct gv_pt_scan *prev,
                           struct gv_error *err);
const struct gv_pt_gpu *gv_pt_scan_gpu(const struct gv_pt_scan *s, const char *bdf);
const struct gv_pt_mdev *gv_pt_scan_mdev(const struct gv_pt_scan *s, const char *uuid);
const struct gv_pt_group *gv_pt_scan_group(const struct gv_pt_scan *s, const char *id);

/*
 * The names NVIDIA's plugin derives: a device name from pci.ids (upper case;
 * '/' and '.' become '_', whitespace runs '_', anything but [A-Za-z0-9_.]
 * dropped), falling back to the 4-digit hex device ID; an mdev type name with
 * whitespace runs as '_'.  out gets at least "" on error.
 */
gv_status gv_pt_pci_name(const char *pci_ids, uint16_t vendor, uint16_t device, char *out,
                         size_t size, struct gv_error *err);
void gv_pt_mangle_pci_name(const char *in, char *out, size_t size);
void gv_pt_mangle_mdev_name(const char *in, char *out, size_t size);
/* KubeVirt's variable name: PREFIX_ + resource upper-cased, '.' and '/' as '_'. */
void gv_pt_env_name(const char *prefix, const char *resource, char *out, size_t size);

/* A container's answer, independent of the protobuf types. */
struct gv_pt_answer {
    size_t n_specs;
    char specs[GV_PT_MAX_SPECS][64]; /* host path = container path, "rw" */
    char env_key[GV_PT_RESOURCE_MAX + 32];
    char env_value[1024]; /* comma list of BDFs or mdev UUIDs, in request order */
};

/*
 * Allocate for passthrough GPUs of `resource`: every ID must be a known,
 * healthy GPU of that resource, and the request must hold whole IOMMU groups
 * (every GPU of each group it touches): the group's device node hands all of
 * them to one VM anyway.  Refusals name the ID and the reason.
 */
gv_status gv_pt_allocate_gpus(const struct gv_pt_scan *s, const char *resource,
                              const char *const *ids, size_t n, struct gv_pt_answer *out,
                              struct gv_error *err);
/* The same for mediated devices (IDs are mdev UUIDs). */
gv_status gv_pt_allocate_mdevs(const struct gv_pt_scan *s, const char *resource,
                               const char *const *ids, size_t n, struct gv_pt_answer *out,
                               struct gv_error *err);
/*
 * GetPreferredAllocation for passthrough GPUs: must-include IDs first, then
 * whole groups (every GPU of a group available), smallest groups first, up to
 * size.  Writes at most size IDs (pointers into `available`/`must`); returns
 * how many.
 */
size_t gv_pt_preferred(const struct gv_pt_scan *s, const char *const *available, size_t n_avail,
                       const char *const *must, size_t n_must, size_t size,
                       const char **out);

/*
 * Optional binding helper (off by default; docs/passthrough.md "Binding").
 * The kernel side is reached through ops so tests can run a fake kernel
 * against a fake tree; gv_pt_bind_ops_sysfs() writes the files for real.
 * busy() answers whether the GPU runs processes (NVML, through the host
 * driver it is still bound to); NULL means "not busy".
 */
struct gv_pt_bind_ops {
    /* Writes text to an absolute path; returns 0 or an errno value. */
    int (*write)(void *ud, const char *path, const char *text);
    /* Returns true and fills why when the GPU at bdf has running processes. */
    bool (*busy)(void *ud, const char *bdf, char *why, size_t why_size);
    void *ud;
};
const struct gv_pt_bind_ops *gv_pt_bind_ops_sysfs(void);

/*
 * Binds the NVIDIA functions of the GPU's IOMMU group to vfio-pci
 * (driver_override, unbind, drivers_probe) and checks the result.  Refuses a
 * busy GPU, a non-NVIDIA device and a group with foreign non-bridge devices;
 * already bound is success.  On a failure midway the functions already moved
 * are handed back to the host driver.
 */
gv_status gv_pt_bind(const char *sys_root, const char *bdf, const struct gv_pt_bind_ops *ops,
                     struct gv_error *err);
/* Unbinds from vfio-pci and lets the host driver probe it again. */
gv_status gv_pt_unbind(const char *sys_root, const char *bdf, const struct gv_pt_bind_ops *ops,
                       struct gv_error *err);

/* The passthrough mode's last scan as the inventory's wholeDevices (mode_passthrough.c). */
struct gv_modes;
struct gv_inventory;
void gv_mode_passthrough_inventory(struct gv_modes *m, struct gv_inventory *inv);

#endif
