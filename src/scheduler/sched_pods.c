/*
 * The scheduler's pods: what the pod informer shows (the truth table,
 * s->truth) applied to the engine's accounting, placements from encoded
 * assignments, and the expiry of pending records.  Below sched.c (nodes,
 * life cycle) and self_check.c, which both call in here.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_jalloc.h"
#include "common/gv_log.h"
#include "contracts/inventory.h"
#include "contracts/podspec.h"
#include "scheduler/bind_inflight.h"
#include "scheduler/gv_extender.h"
#include "scheduler/placement_guard.h"
#include "scheduler/preempt.h"
#include "scheduler/preempt_self.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/whole.h"
#include "scheduler/sched_pods.h"

/* A PENDING record (metrics only) outlives its last filter by this long:
 * kube-scheduler retries unschedulable pods at least every 5 minutes, and we
 * never see pending pods being deleted (the pod informer watches assigned
 * pods only). */
#define PENDING_TTL_S 600.0

const char *str_at(json_t *obj, const char *a, const char *b)
{
    json_t *v = json_object_get(obj, a);
    if (b != NULL)
        v = json_object_get(v, b);
    return json_string_value(v);
}

const char *annotation(json_t *obj, const char *key)
{
    return gv_podspec_annotation(obj, key);
}

uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}
/* ---- pods ------------------------------------------------------------ */

static bool pod_finished(json_t *pod)
{
    const char *phase = str_at(pod, "status", "phase");
    return phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

/* Node of an assignment text, into buf; false when unreadable. */
static bool encoded_node(const char *text, char *buf, size_t cap)
{
    const char *p = strncmp(text, "v1;node=", 8) == 0 ? text + 8 : NULL;
    size_t n = p != NULL ? strcspn(p, ";") : 0;
    if (n == 0 || n >= cap)
        return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}

/*
 * The truth table (s->truth, uid -> packed entry above): the last state of
 * each pod with an assignment as the pod informer delivered it, by plain
 * overwrite.  It is what the accounting must equal (with the live
 * reservations), and what the self-check recomputes usage from.  A bound
 * pod whose annotation disappears keeps its assignment: the container got
 * those GPUs and keeps them until it ends.  Lock held.
 */
static void truth_note(struct gv_sched *s, json_t *pod)
{
    const char *uid = str_at(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    if (pod_finished(pod)) {
        json_object_del(s->truth, uid);
        return;
    }
    const char *text = annotation(pod, ANN_ASSIGNMENT);
    /* A placement gpuvisor did not write (no valid signature) counts as
     * none: a bound pod keeps the verified assignment it had. */
    if (text != NULL && !gv_sched_placement_admit(s, pod))
        text = NULL;
    const char *bound = str_at(pod, "spec", "nodeName");
    bool is_bound = bound != NULL && *bound != '\0';
    const char *rv = str_at(pod, "metadata", "resourceVersion");
    char node[GV_ALLOC_NODE_MAX];
    if (text == NULL) {
        struct truth o;
        json_t *keep = NULL;
        if (is_bound && truth_get(json_object_get(s->truth, uid), &o) &&
            encoded_node(o.text, node, sizeof(node)) && strcmp(node, bound) == 0)
            keep = truth_make(true, o.at, rv, o.ns, o.name, o.text);
        if (keep != NULL)
            json_object_set_new(s->truth, uid, keep);
        else
            json_object_del(s->truth, uid);
        return;
    }
    if (!encoded_node(text, node, sizeof(node)) || (is_bound && strcmp(node, bound) != 0)) {
        json_object_del(s->truth, uid);
        return;
    }
    time_t at = 0;
    gv_sched_parse_time(annotation(pod, ANN_ASSIGNED_AT), &at);
    json_t *t = truth_make(is_bound, at, rv, str_at(pod, "metadata", "namespace"),
                           str_at(pod, "metadata", "name"), text);
    if (t != NULL)
        json_object_set_new(s->truth, uid, t);
}

/* The assignment the truth entry t says is live at wall time, or NULL:
 * bound pods always, unbound ones until their assigned-at is older than
 * the reservation TTL (their bind never completed). */
const char *truth_live(struct gv_sched *s, json_t *t, time_t wall)
{
    struct truth o;
    if (!truth_get(t, &o))
        return NULL;
    if (!o.bound && (o.at == 0 || wall - o.at > s->cfg.reservation_ttl_s))
        return NULL;
    return o.text;
}

/* Records (and places, when its GPUs are known) text as uid's placement in
 * phase; replaces a different earlier one.  Lock held. */
static void account(struct gv_sched *s, const char *uid, const char *ns, const char *name,
                    const char *text, enum rec_phase phase)
{
    struct gv_error err = {0};
    if (gv_alloc_is_placed(s->cluster, uid))
        gv_alloc_release(s->cluster, uid, NULL);
    if (encoded_placeable(s, text)) {
        if (gv_sched_place_encoded(s, uid, ns, name, text, phase, &err) == GV_OK)
            return;
        gv_error("pod %s/%s: recorded assignment %s does not fit the node's current inventory: %s",
                 ns, name, text, err.msg);
    }
    /* Node or GPU not known yet: kept on record, placed when the node's
     * inventory lists them (node_replace). */
    char node[GV_ALLOC_NODE_MAX];
    struct srec *r = gv_sched_rec_get(s, uid, ns, name);
    if (r != NULL && encoded_node(text, node, sizeof(node)))
        gv_sched_rec_set(r, phase, node, text, NULL);
}

/* Settles uid's accounting with its truth entry after an informer event
 * (lock held).  Only pods whose placement no bind or reservation of ours
 * owns are touched; a BOUND placement is kept even when the annotation
 * vanishes (only deletion or termination frees it). */
void gv_sched_apply_truth(struct gv_sched *s, const char *uid, time_t wall)
{
    struct srec *r = gv_sched_rec_find(s, uid);
    json_t *t = json_object_get(s->truth, uid);
    struct truth o;
    bool bound = truth_get(t, &o) && o.bound;
    /* A reservation of ours for a pod the API shows bound (a Binding that
     * was not this filter's: a predecessor's that landed late) is moot:
     * the pod's GPUs are the ones it is bound with.  A bind of ours in
     * progress settles it itself when it ends. */
    if (r != NULL && r->phase == REC_RESERVED && bound) {
        gv_sched_forget_pod(s, uid);
        r = NULL;
    }
    if (r != NULL && (r->phase == REC_RESERVED || r->phase == REC_BINDING))
        return;
    const char *text = truth_live(s, t, wall);
    if (text == NULL) {
        /* bind failed elsewhere, or lapsed; an unknown bind of ours stays
         * until the pod shows bound, ends, or the timeout (the event may
         * be one from before our annotation, delivered late) */
        if (r != NULL && r->phase == REC_UNBOUND && !r->bind_unknown)
            gv_sched_forget_pod(s, uid);
        return;
    }
    enum rec_phase want = bound ? REC_BOUND : REC_UNBOUND;
    if (r != NULL && gv_sched_phase_placed(r->phase) && r->encoded != NULL &&
        strcmp(r->encoded, text) == 0) {
        if (r->phase == REC_UNBOUND && bound) {
            r->phase = REC_BOUND;
            r->bind_unknown = false;
        }
        return;
    }
    const char *ns = o.ns, *name = o.name;
    if (r != NULL && gv_sched_phase_placed(r->phase))
        gv_warn("pod %s/%s: assignment changed in the API from %s to %s; following the API", ns,
                name, r->encoded ? r->encoded : "?", text);
    account(s, uid, ns, name, text, want);
    if (!bound) {
        struct srec *nr = gv_sched_rec_find(s, uid);
        if (nr != NULL)
            nr->assigned_at = o.at;
    }
}

/* A pod ended or left (lock held): free it, unless our bind owns the
 * placement, which then frees it when it ends. */
static void pod_gone(struct gv_sched *s, const char *uid)
{
    json_object_del(s->truth, uid);
    struct srec *r = gv_sched_rec_find(s, uid);
    if (r != NULL && r->phase == REC_BINDING)
        r->gone = true;
    else
        gv_sched_forget_pod(s, uid);
}

void gv_sched_pod_update(struct gv_sched *s, json_t *pod)
{
    const char *uid = str_at(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    /* A Binding of ours that may still land settles once the pod is bound
     * (it refuses any other Binding) or over; dropped before the pod's own
     * placement is counted, so the two never compete for its GPUs. */
    const char *on = str_at(pod, "spec", "nodeName");
    struct srec *own = gv_sched_rec_find(s, uid);
    if (own == NULL || own->phase != REC_BINDING || pod_finished(pod))
        gv_sched_inflight_pod(s, uid, pod_finished(pod) || (on != NULL && *on != '\0'));
    /* else our own bind of it is in progress: it settles the hold when it
     * ends, after it knows which placement the pod is bound with (dropping
     * it now would leave the GPUs of a landed Binding counted nowhere). */
    if (pod_finished(pod)) {
        pod_gone(s, uid);
    } else {
        truth_note(s, pod);
        gv_sched_apply_truth(s, uid, time(NULL));
    }
    gv_sched_whole_pod(s, pod, pod_finished(pod));
    gv_sched_preempt_pod(s, pod, pod_finished(pod));
    gv_sched_preempt_self_pod(s, pod, pod_finished(pod));
    pthread_mutex_unlock(&s->lock);
}

void gv_sched_pod_delete(struct gv_sched *s, json_t *pod)
{
    const char *uid = str_at(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    gv_sched_inflight_pod(s, uid, true);
    pod_gone(s, uid);
    gv_sched_whole_pod_gone(s, uid);
    gv_sched_preempt_pod_gone(s, uid);
    pthread_mutex_unlock(&s->lock);
}

/* Expiry at (now, wall); lock held. */
void expire_locked(struct gv_sched *s, double now, time_t wall)
{
    gv_sched_whole_expire(s, now);
    for (size_t i = s->n_recs; i-- > 0;) {
        struct srec *r = s->recs[i];
        bool expired = false;
        if (r->phase == REC_INFLIGHT) { /* a hold: its own deadline */
            gv_sched_inflight_expire(s, r, wall);
            continue;
        }
        if (r->phase == REC_RESERVED)
            expired = now - r->since > (double)s->cfg.reservation_ttl_s;
        else if (r->phase == REC_UNBOUND)
            expired = wall - r->assigned_at > s->cfg.reservation_ttl_s;
        else if (r->phase == REC_PENDING)
            expired = now - r->since > PENDING_TTL_S;
        if (!expired)
            continue;
        if (r->phase != REC_PENDING)
            gv_info("pod %s/%s: reservation on %s expired after %lds without a completed bind",
                    r->ns, r->name, r->node ? r->node : "?", s->cfg.reservation_ttl_s);
        gv_sched_forget_pod(s, r->uid);
    }
}

void gv_sched_expire(struct gv_sched *s)
{
    pthread_mutex_lock(&s->lock);
    expire_locked(s, gv_sched_now(), time(NULL));
    pthread_mutex_unlock(&s->lock);
}
