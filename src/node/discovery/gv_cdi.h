/*
 * CDI (Container Device Interface) spec of the node's GPUs and MIG devices,
 * built as `nvidia-ctk cdi generate` builds it, plus gpuvisor's interposer
 * files, and written atomically where container runtimes read specs
 * (/var/run/cdi).  The same discovery gives the runtime-independent
 * Allocate answer (device nodes and read-only mounts).  docs/mig-cdi.md,
 * "CDI" and "Without the NVIDIA container runtime".
 */
#ifndef GV_NODE_CDI_H
#define GV_NODE_CDI_H

#include <jansson.h>
#include <stddef.h>

#include "common/gv_error.h"
#include "node/discovery/gv_gpus.h"

/* The CDI spec version written: the lowest that has every field used (hostPath: 0.5.0). */
#define GV_CDI_VERSION "0.5.0"
/* Where containers find the driver's files (as GKE and NVIDIA's CUDA images expect). */
#define GV_CDI_CTR_LIB "/usr/local/nvidia/lib64"
#define GV_CDI_CTR_BIN "/usr/local/nvidia/bin"

/*
 * Where the interposer's files appear in every container (docs/contracts.md):
 * the CDI spec (cdi.c) and Allocate's answer (allocate/ctr_answer.c) mount
 * them at the same paths.
 */
#define GV_NODE_CONTAINER_PATH "/var/run/gpuvisor"
#define GV_NODE_LIMITS_PATH "/etc/gpuvisor/limits.env"
#define GV_NODE_PRELOAD_PATH "/etc/ld.so.preload"
#define GV_NODE_LIB_PATH "/usr/local/gpuvisor/lib/libgpuvisor.so"

/* One host file and where it goes in the container. */
struct gv_cdi_file {
    char host[512];
    char ctr[512];
};

/* The driver's user-space files and device nodes found on the host. */
struct gv_cdi_host {
    struct gv_cdi_file *libs; /* versioned libraries and their soname names */
    size_t n_libs;
    struct gv_cdi_file *bins;
    size_t n_bins;
    char ctl_nodes[4][512]; /* nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset present */
    size_t n_ctl;
    char root[256];      /* driver root as the agent sees it ("" for /), files found here */
    char host_root[256]; /* the same as the host sees it ("" for /): paths in answers and specs */
    char broken[256];    /* non-empty: discovery failed, why (Allocate refuses with it) */
};

/*
 * Finds, under driver_root (the agent's view; "/" or NULL: the agent sees
 * the host's /), the compute and utility
 * libraries of driver `version` (lib<name>.so.<version> in the 64-bit
 * library directories, as libnvidia-container matches them), the tools
 * and the control device nodes.  Fails when libcuda or libnvidia-ml of that
 * version is missing (a pod could not use the GPU).  host_driver_root (NULL:
 * driver_root) is where the host has the same files: the paths the
 * runtime is given.
 */
gv_status gv_cdi_discover(const char *driver_root, const char *host_driver_root,
                          const char *version, struct gv_cdi_host **out, struct gv_error *err);
/* The host's view of a path found under h->root (into out). */
void gv_cdi_host_path(const struct gv_cdi_host *h, const char *found, char *out, size_t cap);
void gv_cdi_host_free(struct gv_cdi_host *h);

/* The device node path of a GPU and the nvidia-caps nodes of a MIG device (0: none). */
void gv_cdi_gpu_node(const struct gv_cdi_host *h, const struct gv_gpu *g, char *out, size_t cap);
size_t gv_cdi_mig_nodes(const struct gv_cdi_host *h, const struct gv_gpu *g,
                        const struct gv_mig *m, char out[2][512]);

struct gv_cdi_interposer {
    const char *lib;     /* host path of libgpuvisor.so; NULL: no interposer device */
    const char *preload; /* host path of the ld.so.preload file naming it */
};

/*
 * The spec: kind (e.g. "nvidia.com/gpu"); devices "<index>" and "<uuid>"
 * per GPU, "<index>:<mig index>" and "<MIG uuid>" per MIG device, "all";
 * common edits: control nodes, library and tool mounts, env
 * NVIDIA_VISIBLE_DEVICES=void.  With ip->lib, a device "gpuvisor" adds the
 * interposer and its ld.so.preload.
 */
json_t *gv_cdi_spec(const char *kind, const struct gv_cdi_host *h, const struct gv_gpu *gpus,
                    size_t n, const struct gv_cdi_interposer *ip, struct gv_error *err);

/*
 * Writes spec to dir/file atomically (a temporary file in dir, fsync,
 * rename): a runtime reading the directory sees the old spec or the new
 * one, never a part.  Creates dir (0755) when missing.
 */
gv_status gv_cdi_write(const char *dir, const char *file, const json_t *spec,
                       struct gv_error *err);

/*
 * Checks kind against CDI's name rules as its strictest consumers apply
 * them (cdi_kind.c): <vendor>/<class>, each starting with a letter and
 * ending with a letter or digit; '_', '-', '.' inside the vendor, '_', '-'
 * inside the class.  A spec whose kind fails is dropped whole by consumers.
 */
gv_status gv_cdi_kind_check(const char *kind, struct gv_error *err);
/*
 * Other spec files (*.json, *.yaml) in the NULL-terminated dirs whose kind is
 * kind, own (a path) excepted: how many, their paths listed into out.
 */
size_t gv_cdi_kind_claimed(const char *const *dirs, const char *kind, const char *own,
                           char *out, size_t cap);

#endif
