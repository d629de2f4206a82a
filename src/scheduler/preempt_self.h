/*
 * Preemption when kube-scheduler does not call the preempt verb
 * (preempt_self.c; docs/scheduler.md, "Preemption").
 */
#ifndef GV_SCHED_PREEMPT_SELF_H
#define GV_SCHED_PREEMPT_SELF_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "scheduler/gv_httpd.h"

struct gv_sched;
struct gv_sched_preempt_self;

struct gv_sched_preempt_self *gv_sched_preempt_self_new(void);
/* Waits (up to 30 s) for the preemptions still running. */
void gv_sched_preempt_self_free(struct gv_sched_preempt_self *p);
/* The route of the preempt verb: notes that kube-scheduler calls it, then
 * answers as gv_sched_handle_preempt. */
void gv_sched_preempt_self_verb(void *ctx, const struct gv_http_request *hreq,
                                struct gv_http_response *resp);
/* Pod informer, and a filter that found no room; lock held: a GPU-slice
 * pod nominated by kube-scheduler (status.nominatedNodeName) with no
 * promise of GPUs, while the verb was never called, starts the extender's
 * own preemption of that node (a detached thread, one per pod at a time). */
void gv_sched_preempt_self_pod(struct gv_sched *s, json_t *pod, bool finished);
/* Metrics (no lock needed). */
void gv_sched_preempt_self_metrics(struct gv_sched *s, FILE *f);

#endif
