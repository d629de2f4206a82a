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
#include <stdbool.h>

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

/*
 * Whole devices (docs/scheduler.md, "Whole devices"): resources the kubelet
 * hands out one device each (MIG devices, passthrough GPUs, mdevs), placed
 * by count, never by the engine.
 */
#define GV_PODSPEC_WHOLE_NAME_MAX 128
/* One whole-device resource of a node: how many the inventory lists, how many healthy. */
struct gv_podspec_whole {
    char resource[GV_PODSPEC_WHOLE_NAME_MAX];
    int kind; /* enum gv_inventory_whole_kind of its first device */
    uint32_t total, healthy;
};

/*
 * A pod's extended resources that are not the engine's (cfg->res names):
 * per name, the count the kubelet will hand out for the pod, max(sum over
 * containers, largest init container), limits first then requests.  Only
 * names with a '/' outside kubernetes.io count.  Which of them are whole
 * devices is the caller's to decide (gv_podspec_whole_by_name, or a node
 * listing the name).  Strict (an error naming the field) only for
 * nvidia.com/mig-* names; another name whose count is not a whole number
 * in [0, 1024] (or beyond the 16th name) is left out.
 */
#define GV_PODSPEC_WHOLE_REQ_MAX 16
struct gv_podspec_whole_req {
    uint32_t n;
    struct {
        char resource[GV_PODSPEC_WHOLE_NAME_MAX];
        uint32_t count;
    } r[GV_PODSPEC_WHOLE_REQ_MAX];
};
gv_status gv_podspec_whole_request(const struct gv_alloc_config *cfg, const json_t *pod,
                                   struct gv_podspec_whole_req *out, struct gv_error *err);
/* Names a resource that is a whole device by its form alone (nvidia.com/mig-<profile>). */
bool gv_podspec_whole_by_name(const char *resource);
/*
 * Whether node (n whole-device resources) can take req: every asked name
 * the node lists needs count <= healthy - held[i] (held: what pods on the
 * node hold of res[i], NULL = none), and an asked name that is_whole(name)
 * says is a whole-device resource must be listed.  False with reason;
 * true with *slack (unless NULL) = the asked names' devices left free after
 * it (the placement rule prefers the least: best fit).
 */
bool gv_podspec_whole_fits(const struct gv_podspec_whole *res, size_t n, const uint32_t *held,
                           const struct gv_podspec_whole_req *req,
                           bool (*is_whole)(void *ud, const char *name), void *ud,
                           uint64_t *slack, char *why, size_t why_cap);

/* A node spec with the storage its pointers refer to. */
struct gv_podspec_node {
    struct gv_alloc_node_spec spec;
    struct gv_alloc_gpu_spec *gpus;
    struct gv_alloc_kv *labels;
    char *strings; /* uuids, model names */
    /* interconnect groups per GPU for gv_alloc_node_set_links (NULL: none) */
    uint32_t *nvlink_group, *pcie_group;
    uint32_t n_whole; /* whole devices in the inventory (MIG, passthrough, mdev) */
    struct gv_podspec_whole *whole; /* per resource name, n_whole_res of them */
    uint32_t n_whole_res;
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
