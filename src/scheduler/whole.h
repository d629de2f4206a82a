/*
 * Whole devices in the extender (whole.c; docs/scheduler.md, "Whole
 * devices"): count placement of MIG devices, passthrough GPUs and mdevs.
 * Internal to gpuvisor-scheduler.  Unless said otherwise, called with the
 * scheduler's lock held.
 */
#ifndef GV_SCHED_WHOLE_H
#define GV_SCHED_WHOLE_H

#include <jansson.h>
#include <stdbool.h>

#include "common/gv_error.h"
#include "contracts/podspec.h"
#include "scheduler/gv_extender.h"

struct gv_sched;
struct gv_sched_whole;

gv_status gv_sched_whole_new(struct gv_sched_whole **out, struct gv_error *err);
void gv_sched_whole_free(struct gv_sched_whole *w);

/* The node's whole devices from its inventory (pn NULL or none: forgets the node). */
void gv_sched_whole_node(struct gv_sched *s, const char *name, const struct gv_podspec_node *pn);
/* A pod as the informer delivers it: bound ones are counted on their node. */
void gv_sched_whole_pod(struct gv_sched *s, json_t *pod, bool finished);
/* The pod was deleted or ended. */
void gv_sched_whole_pod_gone(struct gv_sched *s, const char *uid);
/* Drops reservations older than the reservation TTL (now: gv_sched_now). */
void gv_sched_whole_expire(struct gv_sched *s, double now);
/* Does req ask a whole-device resource (by name, or listed by a node)? */
bool gv_sched_whole_wanted(struct gv_sched *s, const struct gv_podspec_whole_req *req);
/* The node's whole devices: [{resource, total, healthy, free}], NULL when none. */
json_t *gv_sched_whole_node_json(struct gv_sched *s, const char *node);

/*
 * Filter of a pod asking whole devices (takes the lock): a verdict and,
 * for refused nodes, a reason per candidate; reserves on the best fitting
 * node unless the config says filter-feasible.
 */
void gv_sched_whole_filter(struct gv_sched *s, json_t *pod, const struct gv_podspec_whole_req *req,
                           const char *const *names, size_t n, enum gv_ext_verdict *verdicts,
                           char **reasons);

enum gv_whole_bind {
    GV_WHOLE_BIND_NONE, /* no whole-device entry of this pod: the usual bind path */
    GV_WHOLE_BIND_HELD, /* its reservation on the node is now the bind's */
    GV_WHOLE_BIND_DONE, /* already bound there: a repeated bind */
    GV_WHOLE_BIND_FAIL, /* refused (err) */
};
/* Start of a bind of uid to node (takes the lock). */
enum gv_whole_bind gv_sched_whole_bind_begin(struct gv_sched *s, const char *uid,
                                             const char *node, struct gv_error *err);
/* A bind without reservation, pod read from the API (takes the lock): when
 * it asks whole devices, takes them on node (*taken) or fails with why. */
gv_status gv_sched_whole_bind_take(struct gv_sched *s, json_t *pod, const char *node, bool *taken,
                                   struct gv_error *err);
/* The bind of uid ended (ok: the Binding exists). */
void gv_sched_whole_bind_end(struct gv_sched *s, const char *uid, bool ok);

#endif
