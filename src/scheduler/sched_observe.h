/*
 * What gpuvisor-scheduler shows about itself beyond the extender's own
 * counters (src/scheduler/observe.c): HAMi's allocation series, filter
 * latency, pending pods with their top reason, who holds which slice, and
 * the fragmentation history the dashboard draws (sampled by a thread of its
 * own, started with the dashboard).  Fed by one-line hooks in sched.c (new,
 * free, the pod informer's transform and delete) and handlers.c (filter,
 * metrics); it never changes the scheduler's state.
 *
 * Lock order: s->lock before the observer's own lock.
 */
#ifndef GV_SCHED_OBSERVE_H
#define GV_SCHED_OBSERVE_H

#include <stdio.h>

#include "scheduler/gv_extender.h"
#include "scheduler/sched_internal.h"

/* Per-GPU families appended to health_metrics.c's streamed ones (HAMi names;
 * only with metrics_per_gpu). */
#define GV_SCHED_OBS_GPU_FAMILIES 7

gv_status gv_sched_obs_new(struct gv_sched *s);
void gv_sched_obs_free(struct gv_sched *s);
/* Pod informer events (any thread, no lock held). */
void gv_sched_obs_pod_update(struct gv_sched *s, json_t *pod);
void gv_sched_obs_pod_delete(struct gv_sched *s, json_t *pod);
/* One filter call's outcome (no lock held); gpu_containers: the request's
 * GPU containers, 0 for a pod without GPUs, -1 for an invalid request. */
void gv_sched_obs_filter(struct gv_sched *s, const struct gv_ext_args *args, int gpu_containers,
                         const enum gv_ext_verdict *verdicts, const char *const *reasons,
                         double seconds);
/* Non-GPU families: filter histogram, pending pods, fragmentation, and with
 * metrics_per_gpu the per-container HAMi allocations (takes the locks itself; s->lock not held). */
void gv_sched_obs_write_metrics(struct gv_sched *s, FILE *f);
/* HAMi per-GPU family fam (0..GV_SCHED_OBS_GPU_FAMILIES-1): its header, and
 * one GPU's sample (s->lock held). */
/* The dashboard's JSON state (heap text; NULL on OOM). */
char *gv_sched_obs_state_json(struct gv_sched *s);
const char *gv_sched_obs_gpu_family_head(struct gv_sched *s, int fam);
/* Whether HAMi's names are on (--hami-metrics, default on). */
bool gv_sched_obs_hami(struct gv_sched *s);
void gv_sched_obs_gpu_sample(struct gv_sched *s, FILE *f, int fam, const char *node, uint32_t i);

#endif
