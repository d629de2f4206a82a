/*
 * Kubernetes Pod / Node JSON -> allocation-engine inputs.
 *
 * The one place that knows where GPU requests sit in a Pod object (as
 * `kubectl get pod -o json` prints it and as kube-scheduler sends it to
 * extenders) and how a Node describes its GPUs.  Used by the scheduler
 * extender, the admission webhook, the node agent and `gpuvisor simulate`.
 * Errors name the JSON path of the offending field.
 */
#ifndef GV_CONTRACTS_PODSPEC_H
#define GV_CONTRACTS_PODSPEC_H

#include <jansson.h>

#include "alloc/gv_alloc.h"
#include "common/gv_error.h"

/*
 * Pod object -> request: metadata.{uid,namespace,name,annotations},
 * spec.containers[].{name,resources.{limits,requests}}.  Init containers
 * are ignored (they never hold GPUs past start-up).  Quantities may be JSON
 * strings or numbers.  A pod without GPU requests gives n_containers == 0.
 */
gv_status gv_podspec_request(const struct gv_alloc_config *cfg, const json_t *pod,
                             struct gv_alloc_request **out, struct gv_error *err);
/* Same from JSON text (len bytes). */
gv_status gv_podspec_request_text(const struct gv_alloc_config *cfg, const char *text, size_t len,
                                  struct gv_alloc_request **out, struct gv_error *err);

/* metadata.annotations[key] as a string, or NULL. */
const char *gv_podspec_annotation(const json_t *obj, const char *key);

/* A node spec with the storage its pointers refer to. */
struct gv_podspec_node {
    struct gv_alloc_node_spec spec;
    struct gv_alloc_gpu_spec *gpus;
    struct gv_alloc_kv *labels;
    char *strings; /* uuids, model names */
    /* interconnect groups per GPU for gv_alloc_node_set_links (NULL: none) */
    uint32_t *nvlink_group, *pcie_group;
    uint32_t n_whole; /* whole devices for VMs in the inventory (docs/passthrough.md) */
};

/*
 * Node object -> node spec.  CPU and memory from status.allocatable (else
 * status.capacity).  GPUs: from the node agent's inventory annotation
 * gpuvisor.io/node-gpus when present (an unreadable one is an error);
 * otherwise status.capacity["nvidia.com/gpu"] (else allocatable) with the
 * GFD labels nvidia.com/gpu.product (model) and nvidia.com/gpu.memory (MiB),
 * uuids "<node>-gpu<i>".  A node without GPUs is valid (n_gpus == 0).  The
 * spec's name and labels point into the JSON: keep it alive until the spec
 * has been used (upsert copies it).
 */
gv_status gv_podspec_node(const json_t *node, struct gv_podspec_node **out, struct gv_error *err);
void gv_podspec_node_free(struct gv_podspec_node *n);

struct gv_inventory_gpu;
/*
 * Engine view of one inventory GPU: schedulable memory = memoryMiB x
 * memoryScaling; "exclusive" mode GPUs take one whole-GPU task, "vgpu" and
 * "timeslicing" are shared up to split.  uuid and model point into g.
 */
void gv_podspec_gpu_from_inventory(const struct gv_inventory_gpu *g,
                                   struct gv_alloc_gpu_spec *out);

#endif
