/*
 * GPU memory and cores per namespace from Kubernetes ResourceQuota objects,
 * with the keys HAMi documents: spec.hard "limits.nvidia.com/gpumem" (MiB)
 * and "limits.nvidia.com/gpucores" (percent of a GPU), "requests." forms
 * too, resource names as configured.  A pod's charge is its memory and
 * cores summed over its GPUs.  Enforced at admission (early refusal) and
 * in the filter, where the check and the charge happen under the
 * scheduler's lock with the placement, so concurrent pods never overrun.
 * See docs/scheduler.md ("ResourceQuota").
 */
#ifndef GV_SCHED_QUOTA_H
#define GV_SCHED_QUOTA_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc/gv_alloc.h"
#include "kube/gv_kube.h"

struct gv_quota;

/* Is the pod with this uid still holding GPUs (reserved or assigned)? */
typedef bool (*gv_quota_placed_fn)(void *ud, const char *uid);

struct gv_quota *gv_quota_new(const char *mem_resource, const char *cores_resource);
void gv_quota_free(struct gv_quota *q);
/* A ResourceQuota added or changed (deleted: removed).  Keys it does not
 * know are not ours (Kubernetes enforces them); a GPU key's fraction rounds
 * down, and a value that is no quantity counts as 0 (logged): an unreadable
 * limit admits nothing rather than everything. */
void gv_quota_object(struct gv_quota *q, json_t *rq, bool deleted);
/* Records (or replaces) what pod uid of namespace ns holds. */
void gv_quota_charge(struct gv_quota *q, const char *uid, const char *ns, uint64_t mem_mib,
                     uint64_t cores);
/*
 * Would pod uid (its own charge excluded) asking for mem_mib / cores more
 * stay within every ResourceQuota of ns?  Charges of pods placed() no
 * longer holds are dropped on the way.  false with why set otherwise.
 */
bool gv_quota_fits(struct gv_quota *q, const char *ns, const char *uid, uint64_t mem_mib,
                   uint64_t cores, gv_quota_placed_fn placed, void *ud, char *why, size_t cap);
/* hami_resource_quota_used / _limit, per namespace and resource. */
void gv_quota_metrics(struct gv_quota *q, FILE *out, gv_quota_placed_fn placed, void *ud);

/* A placement's totals: memory MiB and cores percent summed over its GPUs. */
void gv_quota_of_assignment(const struct gv_alloc_assignment *a, uint64_t *mem_mib,
                            uint64_t *cores);

/* ---- the scheduler's use (quota.c, beside sched.c) ---------------------- */
struct gv_sched;
struct gv_webhook_env;
/* In gv_sched_new: the table and, with kube, a ResourceQuota informer. */
gv_status gv_sched_quota_init(struct gv_sched *s, struct gv_kube_client *kube,
                              struct gv_error *err);
gv_status gv_sched_quota_start(struct gv_sched *s, struct gv_error *err);
void gv_sched_quota_fini(struct gv_sched *s);
/* A pod's placement was recorded in the engine (lock held). */
void gv_sched_quota_placed(struct gv_sched *s, const char *uid, const char *ns,
                           const struct gv_alloc_assignment *a);
/* Filter, lock held, after the engine placed a: false (why set) = over quota. */
bool gv_sched_quota_admit(struct gv_sched *s, const char *uid, const char *ns,
                          const struct gv_alloc_assignment *a, char *why, size_t cap);
/* Webhook check (takes the lock): the MiB-sized part of the request. */
bool gv_sched_quota_webhook(void *sched, const char *ns, const struct gv_alloc_request *req,
                            char *why, size_t cap);
void gv_sched_quota_metrics(struct gv_sched *s, FILE *out);

#endif
