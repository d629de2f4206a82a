/* The extender's filter and prioritize verbs (docs/scheduler.md, "Filter"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
#include "scheduler/gv_extender.h"
#include "scheduler/gv_webhook.h"
#include "scheduler/placement_guard.h"
#include "scheduler/preempt.h"
#include "scheduler/preempt_self.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/stale_hold.h"
#include "scheduler/whole.h"
#include "scheduler/handlers_internal.h"

/* ---- filter ------------------------------------------------------------ */

/*
 * A filter's per-candidate state is its verdicts (and reasons, allocated
 * when a first candidate gets one): while it runs, GV_EXT_FIT marks a
 * usable candidate, and the chosen node's candidates are found from its
 * record (filter_pos, plus the rare repeats of a name) instead of through
 * arrays of the usable candidates' names and positions.  At 50,000
 * candidates each such array was fresh memory on every filter (a
 * mapping of its own, 0.4 and 0.2 MB), and fresh pages cost more than
 * everything the filter computes on them.
 */
struct filter_ctx {
    struct gv_sched *s;
    struct gv_ext_args args;
    struct gv_alloc_request *req;
    enum gv_ext_verdict *verdicts;
    char **reasons;       /* NULL until a candidate gets a reason */
    bool oom;             /* a reason could not be stored: the answer is a 500 */
    size_t n_usable;      /* candidates with a live agent (verdict GV_EXT_FIT) */
    uint32_t n_engine;    /* distinct usable candidates the engine models */
    uint32_t *repeats;    /* positions of usable candidates naming a node again */
    size_t n_repeats, cap_repeats;
};

static void filter_ctx_clear(struct filter_ctx *f)
{
    for (size_t i = 0; f->reasons != NULL && i < f->args.n_names; i++)
        free(f->reasons[i]);
    free(f->reasons);
    free(f->verdicts);
    free(f->repeats);
    gv_alloc_request_free(f->req);
    gv_ext_args_clear(&f->args);
}

/* Gives candidate i the reason why (copied) unless it has one. */
static void set_reason(struct filter_ctx *f, size_t i, const char *why)
{
    if (f->reasons == NULL) {
        f->reasons = calloc(f->args.n_names ? f->args.n_names : 1, sizeof(*f->reasons));
        if (f->reasons == NULL) {
            f->oom = true;
            return;
        }
    }
    if (f->reasons[i] == NULL && (f->reasons[i] = strdup(why)) == NULL)
        f->oom = true;
}

static void set_all(struct filter_ctx *f, enum gv_ext_verdict v, const char *why)
{
    for (size_t i = 0; i < f->args.n_names; i++) {
        f->verdicts[i] = v;
        if (why != NULL)
            set_reason(f, i, why);
    }
}

static bool grow_repeats(struct filter_ctx *f)
{
    size_t cap = f->cap_repeats ? f->cap_repeats * 2 : 16;
    uint32_t *r = realloc(f->repeats, cap * sizeof(*r));
    if (r == NULL) {
        f->oom = true;
        return false;
    }
    f->repeats = r;
    f->cap_repeats = cap;
    return true;
}

/* Sorts candidates into usable ones (verdict GV_EXT_FIT for now) and those
 * whose agent is missing, stale or unreadable (lock held). */
static void classify_candidates(struct filter_ctx *f)
{
    struct gv_sched *s = f->s;
    time_t now = time(NULL);
    if (++s->filter_stamp == 0) {
        for (size_t i = 0; i < s->n_nodes; i++)
            s->nodes[i]->filter_stamp = 0;
        s->filter_stamp = 1;
    }
    /* Looked up in batches (gv_sched_nodes_find overlaps their cache
     * misses) small enough that each record is still in cache when it is
     * checked and stamped below, and that need no allocation. */
    struct snode *found[256];
    for (size_t i = 0; i < f->args.n_names; i++) {
        if (i % 256 == 0) {
            size_t m = f->args.n_names - i < 256 ? f->args.n_names - i : 256;
            gv_sched_nodes_find(s, f->args.names + i, m, found);
        }
        struct snode *n = found[i % 256];
        char buf[256];
        const char *why =
            gv_sched_node_usable(s, n, now) ? NULL : gv_sched_node_unusable(s, n, now, buf, sizeof(buf));
        if (why == NULL) {
            f->verdicts[i] = GV_EXT_FIT;
            f->n_usable++;
            if (n->stale_logged)
                n->stale_logged = false;
            if (n->filter_stamp != s->filter_stamp) {
                n->filter_stamp = s->filter_stamp;
                n->filter_pos = (uint32_t)i;
                f->n_engine += n->in_engine;
            } else if (f->n_repeats < f->cap_repeats || grow_repeats(f)) {
                f->repeats[f->n_repeats++] = (uint32_t)i;
            }
            continue;
        }
        f->verdicts[i] = GV_EXT_UNRESOLVABLE;
        set_reason(f, i, why);
        /* Staleness is only noticed here (a dead agent sends no events):
         * log it once per episode, not once per pod. */
        if (n != NULL && n->state == NODE_OK && !n->stale_logged) {
            gv_warn("node %s skipped: %s", n->name, why);
            n->stale_logged = true;
        }
    }
}

/* The usable candidates' names, for a pick over a list (caller frees). */
static const char **usable_names(const struct filter_ctx *f)
{
    const char **out = malloc((f->n_usable ? f->n_usable : 1) * sizeof(*out));
    size_t k = 0;
    for (size_t i = 0; out != NULL && i < f->args.n_names; i++)
        if (f->verdicts[i] == GV_EXT_FIT)
            out[k++] = f->args.names[i];
    return out;
}

/* Per-node engine reasons for every usable candidate (lock held). */
static void engine_reasons(struct filter_ctx *f, bool keep_fits)
{
    for (size_t i = 0; i < f->args.n_names; i++) {
        if (f->verdicts[i] != GV_EXT_FIT)
            continue;
        struct gv_alloc_fit fit = {0};
        if (gv_alloc_filter(f->s->cluster, f->req, f->args.names[i], &fit, NULL) == GV_OK &&
            fit.fits) {
            f->verdicts[i] = keep_fits ? GV_EXT_FIT : GV_EXT_FAILED;
            continue;
        }
        f->verdicts[i] = GV_EXT_FAILED;
        set_reason(f, i, fit.reason[0] ? fit.reason : "does not fit");
    }
}

char *encode_assignment(const struct gv_alloc_assignment *a)
{
    size_t cap = GV_ALLOC_ASSIGNMENT_MAX;
    char *buf = malloc(cap);
    size_t len = 0;
    if (buf == NULL || gv_alloc_assignment_encode(a, buf, cap, &len, NULL) != GV_OK) {
        free(buf);
        return NULL;
    }
    char *shrunk = realloc(buf, len + 1);
    return shrunk ? shrunk : buf;
}

/* Node mode: choose the node and GPUs now and hold them for the bind. */
static void filter_reserve(struct filter_ctx *f)
{
    struct gv_sched *s = f->s;
    const char *uid = f->req->uid;
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    struct gv_error err = {0};
    if (a == NULL) {
        set_all(f, GV_EXT_FAILED, "scheduler out of memory");
        return;
    }
    /* Candidates naming every node the engine has (the usual case) are the
     * whole cluster: the engine's index answers without a lookup per name.
     * The chosen node is checked against this filter's marks all the same. */
    bool whole = f->n_engine > 0 && f->n_engine == gv_alloc_node_count(s->cluster);
    const char **usable = NULL;
    gv_status st = GV_ENOFIT;
    /* GPUs a preemption freed for this pod (preempt.c) come first; while
     * they do not fit yet (victims still terminating) the usual pick runs. */
    bool held = gv_sched_preempt_held(s, uid, a) &&
                gv_alloc_place(s->cluster, f->req, a, NULL) == GV_OK;
    if (held) {
        st = GV_OK;
    } else {
        if (f->n_usable > 0 && whole) {
            st = gv_alloc_pick(s->cluster, f->req, NULL, 0, a, &err);
            struct snode *chosen = st == GV_OK ? gv_sched_node_find(s, a->node) : NULL;
            whole = st != GV_OK || (chosen != NULL && chosen->filter_stamp == s->filter_stamp);
        }
        if (f->n_usable > 0 && !whole) {
            usable = usable_names(f);
            st = usable == NULL ? GV_ENOMEM
                                : gv_alloc_pick(s->cluster, f->req, usable, f->n_usable, a, &err);
            free(usable);
        }
        if (st == GV_OK)
            st = gv_alloc_place(s->cluster, f->req, a, &err);
    }
    char qwhy[GV_ALLOC_REASON_MAX];
    if (st == GV_OK &&
        !gv_sched_quota_admit(s, uid, meta(f->args.pod, "namespace"), a, qwhy, sizeof(qwhy))) {
        gv_alloc_release(s->cluster, uid, NULL); /* over its namespace's ResourceQuota */
        set_all(f, GV_EXT_FAILED, qwhy);
        free(a);
        return;
    }
    char *enc = st == GV_OK ? encode_assignment(a) : NULL;
    if (st == GV_OK && enc == NULL) {
        gv_alloc_release(s->cluster, uid, NULL);
        st = GV_ENOMEM;
    }
    if (st != GV_OK) {
        engine_reasons(f, false);
        note_pending(s, f->args.pod,
                     f->n_usable == 0 ? PENDING_NO_GPU_NODE : PENDING_INSUFFICIENT_GPU);
        gv_sched_preempt_self_pod(s, f->args.pod, false); /* nominated: preempt_self.c */
        free(a);
        return;
    }
    struct srec *r =
        gv_sched_rec_get(s, uid, meta(f->args.pod, "namespace"), meta(f->args.pod, "name"));
    if (r == NULL || gv_sched_rec_set(r, REC_RESERVED, a->node, enc,
                                      meta(f->args.pod, "resourceVersion")) != GV_OK) {
        gv_alloc_release(s->cluster, uid, NULL);
        gv_sched_rec_drop(s, uid);
        set_all(f, GV_EXT_FAILED, "scheduler out of memory");
        free(enc);
        free(a);
        return;
    }
    /* Only the chosen node is kept.  The other usable candidates are left
     * out without a reason: the pod is being scheduled, so kube-scheduler
     * never shows them, and 5,000 reason strings would cost more than the
     * placement itself.  The chosen node's candidates are its record's
     * first position and the repeats naming that record. */
    const struct snode *chosen = gv_sched_node_find(s, a->node);
    bool marked = chosen != NULL && chosen->filter_stamp == s->filter_stamp;
    for (size_t i = 0; i < f->args.n_names; i++)
        if (f->verdicts[i] == GV_EXT_FIT)
            f->verdicts[i] = !marked && strcmp(f->args.names[i], a->node) == 0 ? GV_EXT_FIT
                                                                               : GV_EXT_DROPPED;
    if (marked) {
        f->verdicts[chosen->filter_pos] = GV_EXT_FIT;
        for (size_t k = 0; k < f->n_repeats; k++)
            if (strcmp(f->args.names[f->repeats[k]], chosen->name) == 0)
                f->verdicts[f->repeats[k]] = GV_EXT_FIT;
    }
    gv_sched_preempt_consume(s, uid); /* a hold becomes this reservation */
    gv_debug("filter: pod %s/%s reserved on %s: %s", meta(f->args.pod, "namespace"),
             meta(f->args.pod, "name"), a->node, enc);
    free(enc);
    free(a);
}

/* The answer for a pod placed on node: that node passes, every other
 * candidate is left out (or, when node is not among them, fails with why). */
static void filter_placed(struct filter_ctx *f, const char *node, const char *how)
{
    bool listed = false;
    for (size_t i = 0; i < f->args.n_names; i++)
        listed = listed || strcmp(f->args.names[i], node) == 0;
    char why[GV_ALLOC_NODE_MAX + 96];
    snprintf(why, sizeof(why), "pod %s on node %s (gpuvisor keeps that placement)", how, node);
    for (size_t i = 0; i < f->args.n_names; i++) {
        bool match = strcmp(f->args.names[i], node) == 0;
        f->verdicts[i] = match ? GV_EXT_FIT : listed ? GV_EXT_DROPPED : GV_EXT_FAILED;
        if (!match && !listed)
            set_reason(f, i, why);
    }
}

/* Is node among the filter's candidates? */
static bool candidate(const struct filter_ctx *f, const char *node)
{
    for (size_t i = 0; i < f->args.n_names; i++)
        if (strcmp(f->args.names[i], node) == 0)
            return true;
    return false;
}

/* The node a pod object says it is placed on: bound (spec.nodeName), or
 * carrying an assignment whose bind may still come (assigned-at within the
 * reservation TTL).  Lock held (reads the config only). */
static bool pod_placement_node(struct gv_sched *s, json_t *pod, char *buf, size_t cap)
{
    const char *bound =
        json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    if (bound != NULL && *bound != '\0') {
        snprintf(buf, cap, "%s", bound);
        return true;
    }
    const char *text = gv_podspec_annotation(pod, ANN_ASSIGNMENT);
    time_t at = 0;
    if (text == NULL || gv_sched_parse_time(gv_podspec_annotation(pod, ANN_ASSIGNED_AT), &at) != 0 ||
        time(NULL) - at > s->cfg.reservation_ttl_s || strncmp(text, "v1;node=", 8) != 0)
        return false;
    size_t n = strcspn(text + 8, ";");
    if (n == 0 || n >= cap)
        return false;
    memcpy(buf, text + 8, n);
    buf[n] = '\0';
    return true;
}

void handle_filter(void *ctx, const struct gv_http_request *hreq,
                          struct gv_http_response *resp)
{
    struct filter_ctx f = {.s = ctx};
    struct gv_sched *s = f.s;
    struct gv_error err = {0};
    double t0 = gv_sched_now();
    if (gv_ext_args_parse_inplace(hreq->body, hreq->body_len, &f.args, &err) != GV_OK) {
        gv_http_respond_error(resp, 400, err.msg);
        return;
    }
    f.verdicts = calloc(f.args.n_names ? f.args.n_names : 1, sizeof(*f.verdicts));
    if (f.verdicts == NULL) {
        gv_http_respond_error(resp, 500, "out of memory");
        goto out;
    }
    const char *uid = meta(f.args.pod, "uid");
    if (gv_podspec_request(&s->cfg.alloc, f.args.pod, &f.req, &err) != GV_OK) {
        char why[GV_ERROR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "invalid GPU request: %s", err.msg);
        set_all(&f, GV_EXT_UNRESOLVABLE, why);
        pthread_mutex_lock(&s->lock);
        note_pending(s, f.args.pod, PENDING_INVALID_REQUEST);
        pthread_mutex_unlock(&s->lock);
        goto answer;
    }
    /* Whole devices (MIG, passthrough, mdev) are placed by count (whole.c). */
    struct gv_podspec_whole_req wreq;
    bool whole = false;
    if (gv_podspec_whole_request(&s->cfg.alloc, f.args.pod, &wreq, &err) != GV_OK) {
        char why[GV_ERROR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "invalid device request: %s", err.msg);
        set_all(&f, GV_EXT_UNRESOLVABLE, why);
        goto answer;
    }
    if (wreq.n > 0) { /* only pods asking other extended resources pay for the lock */
        pthread_mutex_lock(&s->lock);
        whole = gv_sched_whole_wanted(s, &wreq);
        pthread_mutex_unlock(&s->lock);
    }
    if (whole && f.req->n_containers > 0) {
        set_all(&f, GV_EXT_UNRESOLVABLE,
                "pod asks both gpuvisor GPU shares and whole devices (MIG, passthrough, mdev): "
                "not supported in one pod");
        goto answer;
    }
    if (f.req->n_containers == 0 && !whole) {
        /* Not a GPU pod: nothing for us to decide. */
        set_all(&f, GV_EXT_FIT, NULL);
        goto answer;
    }
    if (uid == NULL || *uid == '\0') {
        gv_http_respond_error(resp, 400, "ExtenderArgs: Pod has no metadata.uid");
        goto out;
    }
    snprintf(f.req->uid, sizeof(f.req->uid), "%s", uid);
    const char *sched_name =
        json_string_value(json_object_get(json_object_get(f.args.pod, "spec"), "schedulerName"));
    if (sched_name == NULL || strcmp(sched_name, s->cfg.scheduler_name) != 0) {
        /* Our pod informer watches pods by spec.schedulerName: a placement
         * for another name would be counted nowhere after a restart. */
        char why[512];
        snprintf(why, sizeof(why),
                 "pod's schedulerName is \"%.200s\", not \"%.200s\": gpuvisor cannot track "
                 "its placement",
                 sched_name ? sched_name : "", s->cfg.scheduler_name);
        set_all(&f, GV_EXT_UNRESOLVABLE, why);
        goto answer;
    }
    if (whole) {
        f.reasons = calloc(f.args.n_names ? f.args.n_names : 1, sizeof(*f.reasons));
        if (f.reasons == NULL) {
            gv_http_respond_error(resp, 500, "out of memory");
            goto out;
        }
        gv_sched_whole_filter(s, f.args.pod, &wreq, f.args.names, f.args.n_names, f.verdicts,
                              f.reasons);
        goto answer;
    }

    pthread_mutex_lock(&s->lock);
    struct srec *r = gv_sched_rec_find(s, uid);
    /* A pod that already holds a placement (reserved, binding, annotated
     * or bound) gets the same answer every time and changes nothing:
     * kube-scheduler filters an assumed or bound pod again when something
     * about it changes, and freeing its GPUs then is how running pods
     * ended up counted nowhere.  Unless the API shows no such placement
     * and kube-scheduler no longer offers its node (stale_hold.c). */
    char bound_node[GV_ALLOC_NODE_MAX];
    enum gv_hold_check hold = GV_HOLD_KEEP;
    if (r != NULL && gv_sched_phase_placed(r->phase) && r->node != NULL &&
        (r->phase == REC_RESERVED || r->phase == REC_UNBOUND) && !candidate(&f, r->node)) {
        hold = gv_sched_hold_confirm(s, meta(f.args.pod, "namespace"), meta(f.args.pod, "name"),
                                     uid, bound_node, sizeof(bound_node));
        r = gv_sched_rec_find(s, uid);
    }
    if (hold == GV_HOLD_BOUND) {
        filter_placed(&f, bound_node, "is bound");
        pthread_mutex_unlock(&s->lock);
        goto answer;
    }
    if (r != NULL && gv_sched_phase_placed(r->phase) && r->node != NULL) {
        filter_placed(&f, r->node, r->phase == REC_BOUND ? "is bound" : "holds GPUs");
        pthread_mutex_unlock(&s->lock);
        goto answer;
    }
    if (r != NULL && r->phase == REC_BINDING) {
        pthread_mutex_unlock(&s->lock);
        respond_json(resp, gv_ext_filter_result_encode(&f.args, NULL, NULL,
                                                       "a bind for this pod is still in progress"));
        goto out;
    }
    char known[GV_ALLOC_NODE_MAX];
    if (hold != GV_HOLD_RELEASED && pod_placement_node(s, f.args.pod, known, sizeof(known)) &&
        !candidate(&f, known) && (r == NULL || !gv_sched_phase_placed(r->phase))) {
        hold = gv_sched_hold_confirm(s, meta(f.args.pod, "namespace"), meta(f.args.pod, "name"),
                                     uid, bound_node, sizeof(bound_node));
        r = gv_sched_rec_find(s, uid);
        if (hold == GV_HOLD_BOUND || (r != NULL && gv_sched_phase_placed(r->phase))) {
            filter_placed(&f, hold == GV_HOLD_BOUND ? bound_node : r->node ? r->node : known,
                          hold == GV_HOLD_BOUND ? "is bound" : "holds GPUs");
            pthread_mutex_unlock(&s->lock);
            goto answer;
        }
    }
    if (hold != GV_HOLD_RELEASED && pod_placement_node(s, f.args.pod, known, sizeof(known))) {
        /* Placed per the pod itself, not (yet) per our records: after a
         * restart, or the pod informer behind.  Same answer, no accounting
         * (the informer brings the placement). */
        filter_placed(&f, known, "is assigned");
        pthread_mutex_unlock(&s->lock);
        goto answer;
    }
    if (gv_alloc_is_placed(s->cluster, uid)) {
        /* Never left by design; the self-check repairs it. */
        set_all(&f, GV_EXT_FAILED, "gpuvisor accounting is being repaired for this pod; retry");
        pthread_mutex_unlock(&s->lock);
        goto answer;
    }
    bool first_seen = r == NULL;
    if (first_seen)
        gv_alloc_observe(s->cluster, f.req);
    if (gv_sched_preempt_exclude(s, f.args.pod, f.req, &err) != GV_OK) {
        set_all(&f, GV_EXT_FAILED, "scheduler out of memory");
        pthread_mutex_unlock(&s->lock);
        goto answer;
    }
    classify_candidates(&f);
    if (f.oom) {
        pthread_mutex_unlock(&s->lock);
        goto answer; /* nothing reserved on a partial view of the candidates */
    }
    if (s->cfg.filter_feasible) {
        engine_reasons(&f, true);
        bool any = false;
        for (size_t i = 0; i < f.args.n_names && !any; i++)
            any = f.verdicts[i] == GV_EXT_FIT;
        if (!any) {
            note_pending(s, f.args.pod,
                         f.n_usable == 0 ? PENDING_NO_GPU_NODE : PENDING_INSUFFICIENT_GPU);
            gv_sched_preempt_self_pod(s, f.args.pod, false); /* nominated: preempt_self.c */
        }
        else if (r != NULL)
            gv_sched_rec_drop(s, uid); /* a PENDING record: nothing placed */
    } else {
        filter_reserve(&f);
    }
    pthread_mutex_unlock(&s->lock);
answer:
    if (f.oom) { /* a reason or repeat lost: no answer that could mislead */
        gv_http_respond_error(resp, 500, "scheduler out of memory");
        goto out;
    }
    respond_json(resp, gv_ext_filter_result_encode(&f.args, f.verdicts,
                                                   (const char *const *)f.reasons, NULL));
    gv_sched_obs_filter(s, &f.args, f.req ? (int)f.req->n_containers : -1, f.verdicts,
                        (const char *const *)f.reasons, gv_sched_now() - t0);
out:
    filter_ctx_clear(&f);
}

/* ---- prioritize -------------------------------------------------------- */

void handle_prioritize(void *ctx, const struct gv_http_request *hreq,
                              struct gv_http_response *resp)
{
    struct gv_sched *s = ctx;
    struct gv_ext_args args;
    struct gv_error err = {0};
    struct gv_alloc_request *req = NULL;
    int32_t *scores = NULL;
    long *out = NULL;
    if (gv_ext_args_parse_inplace(hreq->body, hreq->body_len, &args, &err) != GV_OK) {
        gv_http_respond_error(resp, 400, err.msg);
        return;
    }
    size_t n = args.n_names;
    scores = calloc(n ? n : 1, sizeof(*scores));
    out = calloc(n ? n : 1, sizeof(*out));
    if (scores == NULL || out == NULL) {
        gv_http_respond_error(resp, 500, "out of memory");
        goto done;
    }
    if (gv_podspec_request(&s->cfg.alloc, args.pod, &req, &err) == GV_OK && req->n_containers > 0) {
        const char *uid = meta(args.pod, "uid");
        snprintf(req->uid, sizeof(req->uid), "%s", uid ? uid : "");
        pthread_mutex_lock(&s->lock);
        if (gv_alloc_score_nodes(s->cluster, req, args.names, n, scores, &err) != GV_OK)
            gv_warn("prioritize: %s", err.msg);
        pthread_mutex_unlock(&s->lock);
        /* Engine scores are 0..100 over the fitting nodes; kube-scheduler
         * takes 0..10 from an extender. */
        for (size_t i = 0; i < n; i++)
            out[i] = scores[i] < 0 ? 0 : (scores[i] * GV_EXT_MAX_SCORE + 50) / 100;
    }
    respond_json(resp, gv_ext_priorities_encode(args.names, out, n));
done:
    free(scores);
    free(out);
    gv_alloc_request_free(req);
    gv_ext_args_clear(&args);
}
