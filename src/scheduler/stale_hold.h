/* A held placement on a node kube-scheduler no longer offers (stale_hold.c). */
#ifndef GV_STALE_HOLD_H
#define GV_STALE_HOLD_H

#include <stddef.h>

struct gv_sched;

enum gv_hold_check {
    GV_HOLD_KEEP,     /* keep the placement (the API could not say, or ours changed) */
    GV_HOLD_BOUND,    /* the API shows the pod bound, to bound_node */
    GV_HOLD_RELEASED, /* confirmed unbound: released; place it afresh */
};

/* Asks the API whether pod ns/name (uid) is bound, for a filter whose
 * candidates do not include the node the pod is held on (a RESERVED or
 * UNBOUND record, or an assignment annotation with no record).  Called with
 * s->lock held; drops it for the API calls and holds it again on return, so
 * the caller must look its record up again. */
enum gv_hold_check gv_sched_hold_confirm(struct gv_sched *s, const char *ns, const char *name,
                                         const char *uid, char *bound_node, size_t cap);

#endif
