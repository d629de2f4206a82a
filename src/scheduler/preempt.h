/*
 * GPU-aware preemption (docs/scheduler.md, "Preemption"): the extender's
 * preempt verb, the priorities of the pods it may evict, and the holds that
 * keep the GPUs freed for a preemptor until its next filter.
 *
 * Wire types are k8s.io/kube-scheduler/extender/v1's ExtenderPreemptionArgs
 * {Pod, NodeNameToVictims, NodeNameToMetaVictims} and
 * ExtenderPreemptionResult{NodeNameToMetaVictims}, keys in Go field casing.
 */
#ifndef GV_SCHED_PREEMPT_H
#define GV_SCHED_PREEMPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc/gv_alloc.h"
#include "common/gv_error.h"
#include "scheduler/gv_httpd.h"

/* One candidate node of a preempt call and the victims kube-scheduler's own
 * dry run chose there (either form: full Pods or MetaPods, by UID). */
struct gv_ext_preempt_node {
    const char *name;         /* into root */
    const char **victims;     /* victim uids, into root */
    size_t n_victims;
    int64_t pdb_violations;   /* NumPDBViolations */
};

struct gv_ext_preempt_args {
    json_t *root;             /* owns everything */
    json_t *pod;              /* the preemptor */
    struct gv_ext_preempt_node *nodes;
    size_t n_nodes;
    bool meta;                /* NodeNameToMetaVictims (nodeCacheCapable) form */
};

gv_status gv_ext_preempt_args_parse(const char *body, size_t len, struct gv_ext_preempt_args *out,
                                    struct gv_error *err);
void gv_ext_preempt_args_clear(struct gv_ext_preempt_args *a);
/* ExtenderPreemptionResult: {"NodeNameToMetaVictims":{node:{"Pods":[{"UID":..}],
 * "NumPDBViolations":n}}}; error non-NULL adds nothing (the protocol has no
 * error field: failures are HTTP errors).  Heap string, NULL on OOM. */
char *gv_ext_preempt_result_encode(const struct gv_ext_preempt_node *nodes, size_t n);

struct gv_sched;
struct gv_sched_preempt;

/* preempt.c: state hung off struct gv_sched (lock: the scheduler's). */
struct gv_sched_preempt *gv_sched_preempt_new(void);
void gv_sched_preempt_free(struct gv_sched_preempt *p);
/* The preempt verb (POST <prefix>/preempt). */
void gv_sched_handle_preempt(void *ctx, const struct gv_http_request *hreq,
                             struct gv_http_response *resp);
/* Pod informer: its priority, and the end of its hold once it is bound,
 * finished or gone.  Lock held. */
void gv_sched_preempt_pod(struct gv_sched *s, json_t *pod, bool finished);
void gv_sched_preempt_pod_gone(struct gv_sched *s, const char *uid);
/* Filter, lock held: the GPUs held for other preemptors of a priority at
 * least the pod's become unusable to req (its nouse-gpuuuid list).
 * GV_ENOMEM only. */
gv_status gv_sched_preempt_exclude(struct gv_sched *s, json_t *pod, struct gv_alloc_request *req,
                                   struct gv_error *err);
/* Filter, lock held: the GPUs held for uid on a node this filter found
 * usable, into a; false when it holds none there. */
bool gv_sched_preempt_held(struct gv_sched *s, const char *uid, struct gv_alloc_assignment *a);
/* Does uid hold GPUs promised by a preemption?  Lock held. */
bool gv_sched_preempt_has_hold(struct gv_sched *s, const char *uid);
/* The pod's hold ends (it is bound, finished or gone).  Lock held. */
void gv_sched_preempt_release(struct gv_sched *s, const char *uid);
/* The pod's hold became its reservation: it no longer excludes or places
 * anything, and is kept until it lapses only so that the pod's annotation
 * is not taken back as a new hold.  Lock held. */
void gv_sched_preempt_consume(struct gv_sched *s, const char *uid);
/* Metrics (lock held). */
void gv_sched_preempt_metrics(struct gv_sched *s, FILE *f);
/* A pod's spec.priority (0 when unset, as kube-scheduler reads it). */
int32_t gv_sched_pod_priority(const json_t *pod);

#endif
