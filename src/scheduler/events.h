/*
 * Kubernetes Events on pods from gpuvisor-scheduler: best effort (a failed
 * post is logged at debug level), rate-limited process-wide (5 a second,
 * bursts of 20) so no tenant's pods can make the scheduler flood the API.
 */
#ifndef GV_SCHED_EVENTS_H
#define GV_SCHED_EVENTS_H

#include "kube/gv_kube.h"

/* One Event on pod ns/name (uid) with type "Normal"/"Warning", a reason and
 * a message; suffix makes the event's name (<name>.<uid[:13]>.<suffix>):
 * an existing event of that name is left as it is.  No-op without kube. */
void gv_sched_pod_event(struct gv_kube_client *kube, const char *ns, const char *name,
                        const char *uid, const char *type, const char *reason,
                        const char *message, const char *suffix);

#endif
