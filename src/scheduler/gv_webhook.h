/*
 * Mutating admission webhook (admission.k8s.io/v1 AdmissionReview) for pods.
 *
 * For a pod that asks for gpuvisor resources: route it to gpuvisor's
 * scheduler (spec.schedulerName), make every GPU container carry a GPU count
 * (so the kubelet calls the device plugin's Allocate for it) and the
 * configured default memory/cores; reject requests no node can ever satisfy
 * with a message the user reads in `kubectl apply`'s output.  Pods that ask
 * for no GPU pass untouched.  See docs/scheduler.md ("Admission webhook").
 */
#ifndef GV_WEBHOOK_H
#define GV_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/gv_alloc.h"
#include "common/gv_error.h"

struct gv_webhook_limits {
    uint64_t largest_gpu_mib; /* biggest GPU memory of any node; 0 = unknown */
    uint32_t most_gpus;       /* most GPUs on one node; 0 = unknown */
};

/*
 * Who may do what (docs/isolation.md).  writers: the identities
 * (AdmissionReview userInfo.username) allowed to create or change
 * placement keys (gpuvisor.io/assignment, -sig, assigned-node, assigned-at,
 * allocation*, the gpuvisor.io/assigned label); NULL = the default
 * service accounts gpuvisor-system:gpuvisor-scheduler and :gpuvisor-node.
 * opt_out_namespaces: where a pod may run GPUs without limits
 * (gpuvisor.io/preload: "false", CUDA_DISABLE_CONTROL,
 * NVIDIA_VISIBLE_DEVICES in its env); NULL = nowhere.  Both lists are
 * NULL-terminated.
 */
struct gv_webhook_policy {
    const char *const *writers;
    const char *const *opt_out_namespaces;
};

extern const char *const gv_webhook_default_writers[];

struct gv_webhook_env {
    const struct gv_alloc_config *alloc; /* resource names and defaults */
    const char *scheduler_name;
    /* Cluster facts for "impossible request" checks (may be NULL). */
    void (*limits)(void *ud, struct gv_webhook_limits *out);
    void *ud;
    const struct gv_webhook_policy *policy; /* NULL = defaults above */
    /* NVIDIA container runtime switches (webhook_hami.c): runtimeClassName
     * for GPU pods (NULL or "" = none); NVIDIA_VISIBLE_DEVICES=none on
     * containers asking for no GPU. */
    const char *runtime_class;
    bool hide_gpus_from_others;
    /* Namespace ResourceQuota on GPU memory / cores (NULL = none): false
     * with why set refuses the pod (quota.h). */
    bool (*quota)(void *ud, const char *ns, const struct gv_alloc_request *req, char *why,
                  size_t cap);
    /* Whether a resource name is a whole device some node lists (MIG,
     * passthrough, mdev; docs/scheduler.md, "Whole devices"); NULL = only
     * nvidia.com/mig-* names count.  Takes the scheduler's lock itself. */
    bool (*whole)(void *ud, const char *resource);
};

/*
 * Answers one AdmissionReview request body.  On success *out is the
 * AdmissionReview response (heap string) and the HTTP status is 200, also
 * for denied pods.  A body that is not an AdmissionReview gives GV_EINVAL
 * (answer 400 with err's message).
 */
gv_status gv_webhook_review(const struct gv_webhook_env *env, const char *body, size_t len,
                            char **out, struct gv_error *err);

#endif
