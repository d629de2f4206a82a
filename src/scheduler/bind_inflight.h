/*
 * Bindings that may still land.
 *
 * A Binding is one POST; once kube-apiserver has read it, it applies it
 * whether or not the caller is still there to hear the answer.  Two cases
 * leave gpuvisor not knowing:
 *
 *  - the extender is killed (OOM, crash, a node drain) while its Bindings
 *    are in flight, and its successor starts, lists the pods and finds
 *    them unbound a moment before those Bindings are applied;
 *  - a Binding call fails without a definite answer (timeout, connection
 *    reset, a 5xx) and the read-back shows the pod unbound: the write may
 *    still be queued in the server.
 *
 * Freeing those GPUs at once hands them to the next pod, and when the late
 * Binding lands the GPU is over-committed in the API (seen in the stress
 * test: 4 tasks on a 3-task GPU).  So such a Binding keeps its GPUs as an
 * "in-flight hold" until it cannot land any more: the pod is seen bound (to
 * any node: a bound pod refuses every other Binding), deleted, replaced or
 * finished, or the server's request timeout has passed.
 *
 * A hold is a record of its own (uid GV_INFLIGHT_PREFIX + the pod's uid,
 * phase REC_INFLIGHT, assigned_at = its deadline), so the engine, the
 * self-check and node changes count it like any placement; it is never a
 * pod: not filtered, not a preemption victim, not charged to a quota.
 *
 * For the successor to know, each Binding is journaled before it is sent
 * (bindJournalDir: one small file per Binding, removed when the outcome is
 * known; an emptyDir survives the container's restart).  The successor
 * turns the files it finds into holds before it serves anything.  Process
 * death is what it guards against: the files are not fsync'd (after a
 * machine reboot every such request is long over).
 */
#ifndef GV_SCHED_BIND_INFLIGHT_H
#define GV_SCHED_BIND_INFLIGHT_H

#include <stdbool.h>
#include <time.h>

#include "scheduler/sched_internal.h"

#define GV_INFLIGHT_PREFIX "inflight/"
/* How long a Binding can still be applied after it was sent: kube-
 * apiserver's default --request-timeout (60 s), plus a margin. */
#define GV_INFLIGHT_S 65

/* Is uid a hold's record key (never a pod's)? */
bool gv_sched_inflight_key(const char *uid);

/* Did a failed Binding call end without a definite answer (timeout,
 * connection lost, a 5xx, an unreadable reply), so the server may still
 * apply it?  409/404/422 and the like are definite refusals. */
bool gv_sched_inflight_ambiguous(gv_status st);

/* Journals a Binding of pod uid about to be sent (no lock needed; a no-op
 * without bindJournalDir).  Returns whether it was written. */
bool gv_sched_inflight_journal(struct gv_sched *s, const char *uid, const char *ns,
                               const char *name, const char *node, const char *encoded);
/* The Binding's outcome is known (taken or definitely refused). */
void gv_sched_inflight_unjournal(struct gv_sched *s, const char *uid);

/* The Binding of pod uid with assignment encoded may still land: hold its
 * GPUs until it cannot (lock held).  The pod's own record is the caller's. */
void gv_sched_inflight_hold(struct gv_sched *s, const char *uid, const char *ns,
                            const char *name, const char *encoded, time_t deadline);

/* A pod event (lock held), before its accounting: a pod that is bound,
 * finished or gone settles its hold (dropped first, so that its own
 * placement never competes with it for the same GPUs). */
void gv_sched_inflight_pod(struct gv_sched *s, const char *uid, bool settled);

/* Drops hold record r if it is past its deadline (lock held; r may be freed). */
void gv_sched_inflight_expire(struct gv_sched *s, struct srec *r, time_t wall);

/* Start-up, after the node cache synced and before anything is served:
 * the predecessor's journaled Bindings become holds.  Lock held. */
void gv_sched_inflight_restore(struct gv_sched *s);

/* Holds whose pod the pod cache no longer has (deleted while nobody
 * watched) are dropped.  No lock held; called by the sweeper when ready. */
void gv_sched_inflight_settle(struct gv_sched *s);

#endif
