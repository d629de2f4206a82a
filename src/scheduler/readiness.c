/*
 * Whether the scheduler has its first view of the cluster: both informers
 * have their first list (a scheduler fed by hand, or with no API server, at
 * once).  Its own file, below sched.c, because the health listener's
 * /readyz, the metrics and the dashboard ask it too.
 */
#include "scheduler/sched_internal.h"

bool gv_sched_ready(struct gv_sched *s)
{
    return gv_sched_wait_ready(s, 0);
}

void gv_sched_feed_by_hand(struct gv_sched *s)
{
    s->hand_fed = true;
}

bool gv_sched_wait_ready(struct gv_sched *s, long timeout_ms)
{
    if (s->node_inf == NULL || s->hand_fed)
        return true;
    double until = gv_sched_now() + (double)timeout_ms / 1000.0;
    if (!gv_informer_wait_synced(s->node_inf, timeout_ms))
        return false;
    /* the pod informer starts once the nodes are in (sched.c) */
    long left = (long)((until - gv_sched_now()) * 1000.0);
    return gv_informer_wait_synced(s->pod_inf, left > 0 ? left : 0);
}
