/* HAMi's pod-level switches at admission: see webhook_hami.c. */
#ifndef GV_WEBHOOK_HAMI_H
#define GV_WEBHOOK_HAMI_H

#include <jansson.h>
#include <stdbool.h>

#include "scheduler/gv_webhook.h"

/* hami.io/webhook: "ignore". */
bool gv_webhook_hami_ignored(json_t *pod);
/* A pod asking for no GPU at all: NVIDIA_VISIBLE_DEVICES=none when
 * configured (ignored pods too: a tenant's annotation must not let it see
 * every GPU).  GV_ENOMEM only. */
gv_status gv_webhook_hami_other(const struct gv_webhook_env *env, json_t *pod, json_t *ops,
                                char *why, size_t cap);
/* A pod asking whole devices (MIG instances, VFIO GPUs, mdevs) and no
 * slice: the runtime class when it asks MIG devices (a VM's runtime class
 * for VFIO devices is the pod's own); no NVIDIA_VISIBLE_DEVICES=none.
 * GV_ENOMEM only. */
gv_status gv_webhook_hami_whole(const struct gv_webhook_env *env, json_t *pod, bool mig,
                                json_t *ops);
/* A GPU pod: why[0] != 0 when it is refused (ignore annotation, mixed
 * CUDA_DISABLE_CONTROL); otherwise adds the opt-out annotation, the runtime
 * class and NVIDIA_VISIBLE_DEVICES=none on its non-GPU containers to ops. */
gv_status gv_webhook_hami_gpu(const struct gv_webhook_env *env, json_t *pod,
                              const struct gv_alloc_request *req, json_t *ops, char *why,
                              size_t cap);

#endif
