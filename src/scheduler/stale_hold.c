/*
 * A placement the API does not show, on a node kube-scheduler no longer
 * offers: confirm the pod is unbound, then let it go.
 *
 * A filter keeps a pod's earlier placement (a reservation, or an assignment
 * annotation whose Binding has not come) and answers "pod holds GPUs on node
 * X", because freeing the GPUs of a pod that is in fact bound is how running
 * pods ended up counted nowhere.  But when a bind is cut off (kube-scheduler
 * timed out, the extender restarted between the annotation and the Binding)
 * the pod is re-filtered, and at scale kube-scheduler offers the extender
 * only a sample of the nodes (about 500 of 5,000 per attempt): when X is not
 * in it, every attempt fails until the reservation lapses (60 s by default),
 * and kube-scheduler parks the pod for a minute each time.
 *
 * So when the held node is not among the candidates, the filter asks the API
 * (one GET, a quorum read) whether the pod is bound.  Bound: the placement
 * stands (answered as bound).  Unbound, and nothing of ours changed the
 * record while we asked (no bind began, none ended): the placement is
 * released under the lock and the stale assignment annotation is removed with
 * the version we read as precondition, so a bind that annotated meanwhile is
 * never undone.  The pod is then placed among the offered nodes in the same
 * filter.  The no-over-commit invariant is kept: the release and the new
 * placement happen under the lock, and a bind that arrives later for X
 * places afresh there (bind_compute) or fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/placement.h"
#include "contracts/podspec.h"
#include "scheduler/sched_internal.h"
#include "scheduler/stale_hold.h"

static const char *meta(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

/* Removes our assignment annotations from the pod if it is still at version
 * rv (best effort: a 409 means someone, maybe our own bind, wrote since). */
static void unannotate_at(struct gv_sched *s, const char *path, const char *rv)
{
    json_t *patch = json_pack("{s:{s:s,s:{s:n,s:n,s:n,s:n}}}", "metadata", "resourceVersion", rv,
                              "annotations", GV_ALLOC_ASSIGNMENT_ANNOTATION,
                              "gpuvisor.io/assigned-node", "gpuvisor.io/assigned-at",
                              GV_PLACEMENT_SIG_ANNOTATION);
    struct gv_error err = {0};
    if (patch != NULL &&
        gv_kube_patch(s->kube, path, GV_KUBE_PATCH_MERGE, patch, NULL, &err) != GV_OK &&
        err.code != GV_ENOTFOUND && err.code != GV_ECONFLICT)
        gv_warn("stale assignment of %s: not removed: %s", path, err.msg);
    json_decref(patch);
}

enum gv_hold_check gv_sched_hold_confirm(struct gv_sched *s, const char *ns, const char *name,
                                         const char *uid, char *bound_node, size_t cap)
{
    if (s->kube == NULL || ns == NULL || name == NULL)
        return GV_HOLD_KEEP;
    /* What we hold now; only these phases are "not shown by the API". */
    struct srec *r = gv_sched_rec_find(s, uid);
    bool had_rec = r != NULL && gv_sched_phase_placed(r->phase);
    enum rec_phase phase = REC_PENDING;
    double since = 0;
    char node[GV_ALLOC_NODE_MAX] = "";
    if (had_rec) {
        if (r->phase != REC_RESERVED && r->phase != REC_UNBOUND)
            return GV_HOLD_KEEP;
        phase = r->phase;
        since = r->since;
        snprintf(node, sizeof(node), "%s", r->node ? r->node : "");
    }
    char path[1024];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
    pthread_mutex_unlock(&s->lock);
    json_t *pod = NULL;
    struct gv_error err = {0};
    gv_status st = gv_kube_get(s->kube, path, &pod, &err);
    const char *puid = st == GV_OK ? meta(pod, "uid") : NULL;
    const char *bound =
        json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    const char *rv = st == GV_OK ? meta(pod, "resourceVersion") : NULL;
    enum gv_hold_check out = GV_HOLD_KEEP;
    if (st != GV_OK || puid == NULL || strcmp(puid, uid) != 0) {
        /* Unknown, or the name is another pod now: keep what we hold. */
        pthread_mutex_lock(&s->lock);
        goto done;
    }
    if (bound != NULL && *bound != '\0') {
        snprintf(bound_node, cap, "%s", bound);
        pthread_mutex_lock(&s->lock);
        out = GV_HOLD_BOUND;
        goto done;
    }
    pthread_mutex_lock(&s->lock);
    r = gv_sched_rec_find(s, uid);
    if (had_rec) {
        /* Anything ours that happened while we asked (a bind began, ended,
         * or a new filter placed it) wins: the caller answers from it. */
        if (r == NULL || r->phase != phase || r->since != since || r->node == NULL ||
            strcmp(r->node, node) != 0)
            goto done;
        gv_info("pod %s/%s: its placement on %s is not in the API (the pod is unbound) and "
                "kube-scheduler no longer offers that node: released",
                ns, name, node);
        gv_sched_forget_pod(s, uid);
    } else if (r != NULL && gv_sched_phase_placed(r->phase)) {
        goto done; /* placed by someone else meanwhile */
    }
    /* The API's assignment of an unbound pod is dropped with it: the pod
     * informer brings it back only if it is still there after our patch. */
    json_object_del(s->truth, uid);
    out = GV_HOLD_RELEASED;
    if (rv != NULL && gv_podspec_annotation(pod, GV_ALLOC_ASSIGNMENT_ANNOTATION) != NULL) {
        char *v = strdup(rv);
        pthread_mutex_unlock(&s->lock);
        if (v != NULL)
            unannotate_at(s, path, v);
        free(v);
        pthread_mutex_lock(&s->lock);
    }
done:
    json_decref(pod);
    return out;
}
