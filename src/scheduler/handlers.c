/* HTTP handlers: extender verbs, webhook, health and metrics. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
#include "scheduler/gv_extender.h"
#include "scheduler/gv_webhook.h"
#include "scheduler/placement_guard.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/stale_hold.h"
#include "scheduler/whole.h"

#define ANN_ASSIGNMENT GV_ALLOC_ASSIGNMENT_ANNOTATION
#define ANN_ASSIGNED_NODE "gpuvisor.io/assigned-node"
#define ANN_ASSIGNED_AT "gpuvisor.io/assigned-at"
/* Attempts of the annotate step when the pod changed under us (409). */
#define BIND_ATTEMPTS 5

static const char *const pending_labels[PENDING_COUNT] = {
#define X_LABEL(code, label) label,
    GV_SCHED_PENDING_LIST(X_LABEL)
#undef X_LABEL
};

static void respond_json(struct gv_http_response *resp, char *text)
{
    if (text == NULL) {
        gv_http_respond_error(resp, 500, "out of memory");
        return;
    }
    free(resp->body);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = text;
    resp->body_len = strlen(text);
}

static const char *meta(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

/* Marks a pod pending (metrics) unless it holds a placement (lock held). */
static void note_pending(struct gv_sched *s, json_t *pod, enum pending_reason why)
{
    const char *uid = meta(pod, "uid");
    if (uid == NULL)
        return;
    s->filters_nofit++;
    struct srec *r = gv_sched_rec_find(s, uid);
    if (r != NULL && gv_sched_phase_placed(r->phase))
        return; /* its placement stands; only what frees GPUs may end it */
    r = gv_sched_rec_get(s, uid, meta(pod, "namespace"), meta(pod, "name"));
    if (r != NULL) {
        gv_sched_rec_set(r, REC_PENDING, NULL, NULL, NULL);
        r->pending = why;
    }
}

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

static char *encode_assignment(const struct gv_alloc_assignment *a)
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

static void handle_filter(void *ctx, const struct gv_http_request *hreq,
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
        if (!any)
            note_pending(s, f.args.pod,
                         f.n_usable == 0 ? PENDING_NO_GPU_NODE : PENDING_INSUFFICIENT_GPU);
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

static void handle_prioritize(void *ctx, const struct gv_http_request *hreq,
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

/* ---- bind -------------------------------------------------------------- */

static void pod_path(const struct gv_ext_bind_args *b, char *buf, size_t cap)
{
    snprintf(buf, cap, "/api/v1/namespaces/%s/pods/%s", b->pod_namespace, b->pod_name);
}

/* Fresh placement of the pod on the bind's node (no usable reservation).
 * Reads the pod, picks GPUs on that node and places them (lock inside). */
static gv_status bind_compute(struct gv_sched *s, struct gv_ext_bind_args *b, char **enc, char **rv,
                              bool *no_gpu, bool *whole, struct gv_error *err)
{
    char path[1024];
    json_t *pod = NULL;
    struct gv_alloc_request *req = NULL;
    struct gv_alloc_assignment *a = NULL;
    gv_status st;
    pod_path(b, path, sizeof(path));
    if ((st = gv_kube_get(s->kube, path, &pod, err)) != GV_OK)
        goto out;
    const char *uid = meta(pod, "uid");
    const char *bound =
        json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    if (uid == NULL || *uid == '\0') {
        st = gv_error_set(err, GV_EPROTO, "pod %s/%s has no metadata.uid", b->pod_namespace,
                          b->pod_name);
        goto out;
    }
    if (b->pod_uid[0] == '\0') {
        /* Older callers omit PodUID: adopt the pod's, so records match. */
        char *copy = strdup(uid);
        if (copy == NULL) {
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto out;
        }
        free(b->pod_uid);
        b->pod_uid = copy;
    }
    if (strcmp(uid, b->pod_uid) != 0) {
        st = gv_error_set(err, GV_ECONFLICT, "pod %s/%s was replaced (uid %s, expected %s)",
                          b->pod_namespace, b->pod_name, uid, b->pod_uid);
        goto out;
    }
    if (bound != NULL && *bound != '\0') {
        st = gv_error_set(err, GV_ECONFLICT, "pod %s/%s is already bound to %s", b->pod_namespace,
                          b->pod_name, bound);
        goto out;
    }
    if ((st = gv_podspec_request(&s->cfg.alloc, pod, &req, err)) != GV_OK)
        goto out;
    if (req->n_containers == 0) {
        /* No GPU shares: whole devices are taken by count on the node
         * (whole.c); a pod with neither (kube-scheduler only sends those
         * when misconfigured) is just bound. */
        *no_gpu = true;
        st = gv_sched_whole_bind_take(s, pod, b->node, whole, err);
        goto out;
    }
    snprintf(req->uid, sizeof(req->uid), "%s", uid);
    if ((a = malloc(sizeof(*a))) == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    pthread_mutex_lock(&s->lock);
    struct snode *n = gv_sched_node_find(s, b->node);
    char buf[256];
    const char *why = gv_sched_node_unusable(s, n, time(NULL), buf, sizeof(buf));
    if (why != NULL) {
        st = gv_error_set(err, GV_EUNAVAILABLE, "node %s: %s", b->node, why);
    } else {
        /* Replaces whatever this pod held (a reservation elsewhere, or the
         * placement a 409 made stale) in the same critical section. */
        if (gv_alloc_is_placed(s->cluster, req->uid))
            gv_alloc_release(s->cluster, req->uid, NULL);
        const char *one[1] = {b->node};
        st = gv_alloc_pick(s->cluster, req, one, 1, a, err);
        if (st == GV_OK)
            st = gv_alloc_place(s->cluster, req, a, err);
        char qwhy[GV_ALLOC_REASON_MAX];
        if (st == GV_OK &&
            !gv_sched_quota_admit(s, req->uid, b->pod_namespace, a, qwhy, sizeof(qwhy))) {
            gv_alloc_release(s->cluster, req->uid, NULL);
            st = gv_error_set(err, GV_ENOFIT, "%s", qwhy);
        }
        if (st == GV_OK && (*enc = encode_assignment(a)) == NULL) {
            gv_alloc_release(s->cluster, req->uid, NULL);
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
        }
        struct srec *r =
            st == GV_OK ? gv_sched_rec_get(s, req->uid, b->pod_namespace, b->pod_name) : NULL;
        bool gone = r != NULL && r->gone;
        if (st == GV_OK &&
            (r == NULL || gv_sched_rec_set(r, REC_BINDING, b->node, *enc, NULL) != GV_OK)) {
            gv_alloc_release(s->cluster, req->uid, NULL);
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
        }
        if (r != NULL)
            r->gone = gone;
    }
    pthread_mutex_unlock(&s->lock);
    if (st == GV_OK) {
        const char *v = meta(pod, "resourceVersion");
        *rv = v ? strdup(v) : NULL;
    }
out:
    free(a);
    gv_alloc_request_free(req);
    json_decref(pod);
    return st;
}

/* Binds the pod with its placement in one write: the Binding carries our
 * annotations, which the API server writes onto the pod in the same update
 * that sets spec.nodeName.  Two writes (a PATCH of the annotations, then the
 * Binding) made every GPU pod cost kube-apiserver and etcd twice what a
 * plain pod costs, which capped a burst at half kube-scheduler's own bind
 * rate (bench/results/e2e_bind.txt), and left a window in which the pod
 * was annotated but unbound.  rv (the version the filter saw) is a
 * precondition where the server checks it (not 1.20's): a pod changed since
 * is recomputed. */
static gv_status bind_post(struct gv_sched *s, const struct gv_ext_bind_args *b, const char *enc,
                           const char *rv, struct gv_error *err)
{
    char at[48];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    gv_sched_format_time(&now, at, sizeof(at));
    char sig[GV_PLACEMENT_SIG_MAX];
    gv_status sst = gv_sched_placement_sign(&s->cfg, b->pod_uid, b->node, at, enc, sig,
                                            sizeof(sig), err);
    if (sst != GV_OK)
        return sst;
    /* Annotations only: kube-scheduler ignores annotation changes of an
     * assumed pod, while a label change (older versions added
     * gpuvisor.io/assigned=true here) made it filter the pod again. */
    json_t *ann = json_pack("{s:s,s:s,s:s}", ANN_ASSIGNMENT, enc, ANN_ASSIGNED_NODE, b->node,
                            ANN_ASSIGNED_AT, at);
    /* Unsigned (no key): no signature annotation at all.  A merge patch's
     * null removed it; in a Binding a null would be written as a value. */
    if (ann != NULL && sig[0] &&
        json_object_set_new(ann, GV_PLACEMENT_SIG_ANNOTATION, json_string(sig)) != 0) {
        json_decref(ann);
        ann = NULL;
    }
    if (ann == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    gv_status st = gv_kube_bind_pod_annotated(s->kube, b->pod_namespace, b->pod_name,
                                              b->pod_uid[0] ? b->pod_uid : NULL, rv, b->node, ann,
                                              err);
    json_decref(ann);
    return st;
}

/* Did a Binding whose call failed take effect anyway (a timeout or a lost
 * answer)?  Only "no" lets the bind release the pod's GPUs. */
static bool binding_took(struct gv_sched *s, const struct gv_ext_bind_args *b)
{
    char path[1024];
    json_t *pod = NULL;
    struct gv_error err = {0};
    pod_path(b, path, sizeof(path));
    if (gv_kube_get(s->kube, path, &pod, &err) != GV_OK)
        return false;
    const char *uid = meta(pod, "uid");
    const char *bound =
        json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    bool took = uid != NULL && strcmp(uid, b->pod_uid) == 0 && bound != NULL &&
                strcmp(bound, b->node) == 0;
    json_decref(pod);
    return took;
}

/* The bind of a pod whose whole devices its filter reserved on b->node:
 * only the Binding; the kubelet picks the devices. */
static gv_status bind_whole_held(struct gv_sched *s, struct gv_ext_bind_args *b,
                                 struct gv_error *err)
{
    gv_status st = gv_kube_bind_pod(s->kube, b->pod_namespace, b->pod_name, b->pod_uid, b->node,
                                    err);
    if (st != GV_OK && binding_took(s, b))
        st = GV_OK;
    pthread_mutex_lock(&s->lock);
    gv_sched_whole_bind_end(s, b->pod_uid, st == GV_OK);
    if (st == GV_OK)
        s->binds_ok++;
    else
        s->binds_failed++;
    pthread_mutex_unlock(&s->lock);
    if (st == GV_OK)
        gv_info("bound %s/%s to %s (whole devices)", b->pod_namespace, b->pod_name, b->node);
    return st;
}

static gv_status do_bind(struct gv_sched *s, struct gv_ext_bind_args *b, struct gv_error *err)
{
    char *enc = NULL, *rv = NULL, *written = NULL;
    gv_status st = GV_OK;
    if (s->kube == NULL)
        return gv_error_set(err, GV_EUNAVAILABLE, "no Kubernetes API connection configured");
    switch (gv_sched_whole_bind_begin(s, b->pod_uid, b->node, err)) {
    case GV_WHOLE_BIND_HELD:
        return bind_whole_held(s, b, err);
    case GV_WHOLE_BIND_DONE:
        return GV_OK;
    case GV_WHOLE_BIND_FAIL:
        return err->code;
    case GV_WHOLE_BIND_NONE:
        break;
    }

    pthread_mutex_lock(&s->lock);
    struct srec *r = b->pod_uid[0] ? gv_sched_rec_find(s, b->pod_uid) : NULL;
    if (r != NULL && r->phase == REC_BINDING) {
        pthread_mutex_unlock(&s->lock);
        return gv_error_set(err, GV_ECONFLICT, "a bind of pod %s/%s is already in progress",
                            b->pod_namespace, b->pod_name);
    }
    if (r != NULL && r->phase == REC_BOUND) {
        /* A repeated bind (kube-scheduler lost our answer): same node is
         * done already; nothing changes either way. */
        bool same = r->node != NULL && strcmp(r->node, b->node) == 0;
        char other[GV_ALLOC_NODE_MAX];
        snprintf(other, sizeof(other), "%s", r->node ? r->node : "?");
        pthread_mutex_unlock(&s->lock);
        if (same)
            return GV_OK;
        return gv_error_set(err, GV_ECONFLICT, "pod %s/%s is already bound to %s",
                            b->pod_namespace, b->pod_name, other);
    }
    if (r != NULL && (r->phase == REC_RESERVED || r->phase == REC_UNBOUND) && r->node != NULL &&
        strcmp(r->node, b->node) == 0 && r->encoded != NULL &&
        gv_alloc_is_placed(s->cluster, b->pod_uid)) {
        enc = strdup(r->encoded);
        rv = r->phase == REC_RESERVED && r->rv ? strdup(r->rv) : NULL;
        r->phase = REC_BINDING;
        r->gone = false;
    } else if (r != NULL && gv_sched_phase_placed(r->phase)) {
        /* Held elsewhere (kube-scheduler chose another node): kept until
         * bind_compute replaces it under the lock. */
        r->phase = REC_BINDING;
        r->gone = false;
    } else if (b->pod_uid[0]) {
        struct srec *nr = gv_sched_rec_get(s, b->pod_uid, b->pod_namespace, b->pod_name);
        if (nr != NULL) {
            gv_sched_rec_set(nr, REC_BINDING, NULL, NULL, NULL);
            nr->gone = false;
        }
    }
    pthread_mutex_unlock(&s->lock);

    bool no_gpu = false, whole = false;
    for (int attempt = 0;; attempt++) {
        if (enc == NULL && (st = bind_compute(s, b, &enc, &rv, &no_gpu, &whole, err)) != GV_OK)
            break;
        if (no_gpu) {
            st = gv_kube_bind_pod(s->kube, b->pod_namespace, b->pod_name,
                                  b->pod_uid[0] ? b->pod_uid : NULL, b->node, err);
            break;
        }
        st = bind_post(s, b, enc, rv, err);
        if (st != GV_ECONFLICT || attempt + 1 >= BIND_ATTEMPTS)
            break;
        /* The pod changed since we read it: read it again and recompute
         * (bind_compute replaces the placement under the lock). */
        gv_debug("bind %s/%s: %s; recomputing", b->pod_namespace, b->pod_name, err->msg);
        pthread_mutex_lock(&s->lock);
        s->bind_conflicts++;
        pthread_mutex_unlock(&s->lock);
        free(enc);
        free(rv);
        enc = rv = NULL;
    }
    if (st != GV_OK && enc != NULL && b->pod_uid[0] && binding_took(s, b)) {
        /* A Binding whose answer was lost (timeout, reset) took effect. */
        gv_info("bind %s/%s: %s, but the pod is bound to %s: done", b->pod_namespace,
                b->pod_name, err->msg, b->node);
        gv_error_clear(err);
        st = GV_OK;
    }
    pthread_mutex_lock(&s->lock);
    if (whole)
        gv_sched_whole_bind_end(s, b->pod_uid, st == GV_OK);
    struct srec *fr = b->pod_uid[0] ? gv_sched_rec_find(s, b->pod_uid) : NULL;
    if (st == GV_OK) {
        s->binds_ok++;
        if (fr != NULL && (no_gpu || fr->gone)) {
            gv_sched_forget_pod(s, b->pod_uid); /* no GPUs, or deleted meanwhile */
        } else if (fr != NULL) {
            fr->phase = REC_BOUND;
            fr->bound_here = true;
            free(fr->rv);
            fr->rv = written;
            written = NULL;
        }
    } else {
        s->binds_failed++;
        if (b->pod_uid[0]) {
            /* The bind definitively failed: free what it held, then count
             * whatever the API still shows (an annotation whose removal we
             * have not seen yet stays counted until we do). */
            gv_sched_forget_pod(s, b->pod_uid);
            gv_sched_apply_truth(s, b->pod_uid, time(NULL));
            if (!gv_alloc_is_placed(s->cluster, b->pod_uid)) {
                struct srec *pr = gv_sched_rec_get(s, b->pod_uid, b->pod_namespace, b->pod_name);
                if (pr != NULL && !gv_sched_phase_placed(pr->phase)) {
                    gv_sched_rec_set(pr, REC_PENDING, NULL, NULL, NULL);
                    pr->pending = PENDING_BIND_FAILED;
                }
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (st == GV_OK)
        gv_info("bound %s/%s to %s: %s", b->pod_namespace, b->pod_name, b->node,
                enc ? enc : "(no GPU)");
    free(enc);
    free(rv);
    free(written);
    return st;
}

static void handle_bind(void *ctx, const struct gv_http_request *hreq,
                        struct gv_http_response *resp)
{
    struct gv_sched *s = ctx;
    struct gv_ext_bind_args b;
    struct gv_error err = {0};
    if (gv_ext_bind_args_parse(hreq->body, hreq->body_len, &b, &err) != GV_OK) {
        gv_http_respond_error(resp, 400, err.msg);
        return;
    }
    gv_status st = do_bind(s, &b, &err);
    if (st != GV_OK)
        gv_warn("bind %s/%s to %s failed: %s", b.pod_namespace, b.pod_name, b.node, err.msg);
    respond_json(resp, gv_ext_bind_result_encode(st == GV_OK ? NULL : err.msg));
    gv_ext_bind_args_clear(&b);
}

/* ---- webhook ----------------------------------------------------------- */

static void webhook_limits(void *ud, struct gv_webhook_limits *out)
{
    struct gv_sched *s = ud;
    out->largest_gpu_mib = 0;
    out->most_gpus = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_nodes; i++) {
        const struct snode *n = s->nodes[i];
        if (n->state != NODE_OK)
            continue;
        if (n->max_gpu_mib > out->largest_gpu_mib)
            out->largest_gpu_mib = n->max_gpu_mib;
        if (n->n_gpus > out->most_gpus)
            out->most_gpus = n->n_gpus;
    }
    pthread_mutex_unlock(&s->lock);
}

/* A node lists the resource as a whole device (webhook routing). */
static bool webhook_whole(void *ud, const char *resource)
{
    struct gv_sched *s = ud;
    struct gv_podspec_whole_req req = {.n = 1};
    snprintf(req.r[0].resource, sizeof(req.r[0].resource), "%s", resource);
    req.r[0].count = 1;
    pthread_mutex_lock(&s->lock);
    bool whole = gv_sched_whole_wanted(s, &req);
    pthread_mutex_unlock(&s->lock);
    return whole;
}

static void handle_mutate(void *ctx, const struct gv_http_request *hreq,
                          struct gv_http_response *resp)
{
    struct gv_sched *s = ctx;
    struct gv_webhook_env env = {&s->cfg.alloc,   s->cfg.scheduler_name,
                                 webhook_limits,  s,
                                 &s->cfg.admission, s->cfg.runtime_class,
                                 s->cfg.hide_gpus_from_others, gv_sched_quota_webhook,
                                 webhook_whole};
    struct gv_error err = {0};
    char *out = NULL;
    if (gv_webhook_review(&env, hreq->body, hreq->body_len, &out, &err) != GV_OK) {
        gv_http_respond_error(resp, err.code == GV_ENOMEM ? 500 : 400, err.msg);
        return;
    }
    respond_json(resp, out);
}

/* ---- health and metrics ------------------------------------------------ */

static void handle_healthz(void *ctx, const struct gv_http_request *hreq,
                           struct gv_http_response *resp)
{
    (void)ctx;
    (void)hreq;
    gv_http_respond(resp, 200, "text/plain", "ok\n");
}

static void handle_readyz(void *ctx, const struct gv_http_request *hreq,
                          struct gv_http_response *resp)
{
    (void)hreq;
    if (gv_sched_ready(ctx))
        gv_http_respond(resp, 200, "text/plain", "ok\n");
    else
        gv_http_respond(resp, 503, "text/plain", "node/pod caches not synced yet\n");
}

static void write_state_metrics(struct gv_sched *s, FILE *f)
{
    gv_sched_placement_metrics(&s->cfg, f);
    size_t pending[PENDING_COUNT] = {0};
    size_t reserved = 0, unbound = 0, nodes_ok = 0, nodes_bad = 0, nodes_stale = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_recs; i++) {
        const struct srec *r = s->recs[i];
        if (r->phase == REC_PENDING)
            pending[r->pending]++;
        else if (r->phase == REC_UNBOUND)
            unbound++;
        else if (r->phase == REC_RESERVED || r->phase == REC_BINDING)
            reserved++;
    }
    time_t now = time(NULL);
    for (size_t i = 0; i < s->n_nodes; i++) {
        const struct snode *n = s->nodes[i];
        if (n->state != NODE_OK)
            nodes_bad++;
        else if (n->heartbeat == 0 || now - n->heartbeat > s->cfg.heartbeat_timeout_s)
            nodes_stale++;
        else
            nodes_ok++;
    }
    fputs("# HELP gpuvisor_scheduler_pods_pending GPU pods the last filter could not place, by "
          "reason.\n# TYPE gpuvisor_scheduler_pods_pending gauge\n",
          f);
    for (int i = 0; i < PENDING_COUNT; i++)
        fprintf(f, "gpuvisor_scheduler_pods_pending{reason=\"%s\"} %zu\n", pending_labels[i],
                pending[i]);
    fprintf(f,
            "# HELP gpuvisor_scheduler_reservations Placements held for pods not bound yet.\n"
            "# TYPE gpuvisor_scheduler_reservations gauge\n"
            "gpuvisor_scheduler_reservations{state=\"reserved\"} %zu\n"
            "gpuvisor_scheduler_reservations{state=\"annotated_unbound\"} %zu\n"
            "# HELP gpuvisor_scheduler_nodes Nodes by gpuvisor agent state.\n"
            "# TYPE gpuvisor_scheduler_nodes gauge\n"
            "gpuvisor_scheduler_nodes{state=\"ready\"} %zu\n"
            "gpuvisor_scheduler_nodes{state=\"stale\"} %zu\n"
            "gpuvisor_scheduler_nodes{state=\"unusable\"} %zu\n"
            "# HELP gpuvisor_scheduler_binds_total Bind calls by outcome.\n"
            "# TYPE gpuvisor_scheduler_binds_total counter\n"
            "gpuvisor_scheduler_binds_total{result=\"ok\"} %" PRIu64 "\n"
            "gpuvisor_scheduler_binds_total{result=\"failed\"} %" PRIu64 "\n"
            "# HELP gpuvisor_scheduler_bind_conflicts_total Pod changed during bind "
            "(409), placement recomputed.\n"
            "# TYPE gpuvisor_scheduler_bind_conflicts_total counter\n"
            "gpuvisor_scheduler_bind_conflicts_total %" PRIu64 "\n"
            "# HELP gpuvisor_accounting_drift_repairs_total Differences between the GPU "
            "accounting and the pods in the API that the self-check repaired (a bug: stays 0).\n"
            "# TYPE gpuvisor_accounting_drift_repairs_total counter\n"
            "gpuvisor_accounting_drift_repairs_total %" PRIu64 "\n"
            "# HELP gpuvisor_accounting_self_checks_total Accounting self-checks run.\n"
            "# TYPE gpuvisor_accounting_self_checks_total counter\n"
            "gpuvisor_accounting_self_checks_total %" PRIu64 "\n",
            reserved, unbound, nodes_ok, nodes_stale, nodes_bad, s->binds_ok, s->binds_failed,
            s->bind_conflicts, s->drift_repairs, s->self_checks);
    pthread_mutex_unlock(&s->lock);
    gv_sched_quota_metrics(s, f); /* hami_resource_quota_used / _limit */
}

/*
 * Per-GPU series are streamed: at 5,000 nodes x 8 GPUs they are megabytes of
 * text, which a single buffer would hold (and glibc keep) at every scrape.
 * Prometheus wants each family's samples together, so the node table is
 * walked once per family, a batch of nodes per read, resuming after the
 * last node name written (nodes may come and go between batches).
 */
#define GPU_FAMILIES_OWN 3
#define GPU_FAMILIES (GPU_FAMILIES_OWN + GV_SCHED_OBS_GPU_FAMILIES) /* + HAMi's */
#define NODES_PER_BATCH 64

static const char *const gpu_family_head[GPU_FAMILIES_OWN] = {
    "# HELP gpuvisor_gpu_memory_allocated_mib GPU memory assigned to pods, per GPU.\n"
    "# TYPE gpuvisor_gpu_memory_allocated_mib gauge\n",
    "# HELP gpuvisor_gpu_cores_allocated_percent GPU compute assigned to pods, per GPU "
    "(100 = one whole GPU).\n"
    "# TYPE gpuvisor_gpu_cores_allocated_percent gauge\n",
    "# HELP gpuvisor_gpu_tasks Containers sharing each GPU.\n"
    "# TYPE gpuvisor_gpu_tasks gauge\n",
};

struct metrics_stream {
    struct gv_sched *s;
    char *text; /* pending bytes */
    size_t len, off;
    int family; /* GPU_FAMILIES = finished */
    bool family_started;
    char after[GV_ALLOC_NODE_MAX]; /* last node written in this family */
};

static void gpu_sample(FILE *f, int family, const char *node, const char *uuid,
                       const struct gv_alloc_gpu_usage *u)
{
    switch (family) {
    case 0:
        fprintf(f, "gpuvisor_gpu_memory_allocated_mib{node=\"%s\",gpu=\"%s\"} %" PRIu64 "\n", node,
                uuid, u->mem_mib);
        break;
    case 1:
        fprintf(f, "gpuvisor_gpu_cores_allocated_percent{node=\"%s\",gpu=\"%s\"} %.1f\n", node,
                uuid, u->milli / 10.0);
        break;
    default:
        fprintf(f, "gpuvisor_gpu_tasks{node=\"%s\",gpu=\"%s\"} %" PRIu32 "\n", node, uuid,
                u->tasks);
        break;
    }
}

/* Formats the next batch into ms->text; false when everything is written. */
static bool metrics_next_batch(struct metrics_stream *ms)
{
    struct gv_sched *s = ms->s;
    free(ms->text);
    ms->text = NULL;
    ms->len = ms->off = 0;
    while (ms->family < GPU_FAMILIES) {
        FILE *f = open_memstream(&ms->text, &ms->len);
        if (f == NULL)
            return false;
        if (!ms->family_started) {
            fputs(ms->family < GPU_FAMILIES_OWN
                      ? gpu_family_head[ms->family]
                      : gv_sched_obs_gpu_family_head(s, ms->family - GPU_FAMILIES_OWN),
                  f);
            ms->family_started = true;
        }
        size_t written = 0;
        pthread_mutex_lock(&s->lock);
        size_t i;
        for (i = ms->after[0] != '\0' ? gv_sched_node_after(s, ms->after) : 0;
             i < s->n_nodes && written < NODES_PER_BATCH;
             i++, written++) {
            const struct snode *n = s->nodes[i];
            for (uint32_t g = 0; n->state == NODE_OK && g < n->n_gpus; g++) {
                struct gv_alloc_gpu_usage u;
                if (ms->family >= GPU_FAMILIES_OWN)
                    gv_sched_obs_gpu_sample(s, f, ms->family - GPU_FAMILIES_OWN, n->name, g);
                else if (gv_alloc_gpu_usage_at(s->cluster, n->name, g, &u, NULL) == GV_OK)
                    gpu_sample(f, ms->family, n->name, u.uuid, &u);
            }
            snprintf(ms->after, sizeof(ms->after), "%s", n->name);
        }
        bool family_done = i >= s->n_nodes;
        pthread_mutex_unlock(&s->lock);
        fclose(f);
        if (family_done) {
            ms->family++;
            ms->family_started = false;
            ms->after[0] = '\0';
        }
        if (ms->len > 0)
            return true;
        free(ms->text);
        ms->text = NULL;
    }
    return false;
}

static size_t metrics_read(void *cls, char *buf, size_t max)
{
    struct metrics_stream *ms = cls;
    if (ms->off == ms->len && !metrics_next_batch(ms))
        return 0;
    size_t n = ms->len - ms->off < max ? ms->len - ms->off : max;
    memcpy(buf, ms->text + ms->off, n);
    ms->off += n;
    return n;
}

static void metrics_free(void *cls)
{
    struct metrics_stream *ms = cls;
    free(ms->text);
    free(ms);
}

static void handle_metrics(void *ctx, const struct gv_http_request *hreq,
                           struct gv_http_response *resp)
{
    (void)hreq;
    struct gv_sched *s = ctx;
    struct metrics_stream *ms = calloc(1, sizeof(*ms));
    FILE *f = ms ? open_memstream(&ms->text, &ms->len) : NULL;
    if (f == NULL) {
        free(ms);
        gv_http_respond_error(resp, 500, "out of memory");
        return;
    }
    ms->s = s;
    /* The small families first, in one piece. */
    gv_httpd_write_metrics_header(f);
    for (size_t i = 0; i < s->n_servers; i++)
        gv_httpd_write_metrics(s->servers[i], f);
    write_state_metrics(s, f);
    gv_sched_obs_write_metrics(s, f);
    fclose(f);
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->stream = metrics_read;
    resp->stream_cls = ms;
    resp->stream_free = metrics_free;
}

/* ---- registration ------------------------------------------------------ */

static gv_status remember_server(struct gv_sched *s, struct gv_httpd *h)
{
    for (size_t i = 0; i < s->n_servers; i++)
        if (s->servers[i] == h)
            return GV_OK;
    if (s->n_servers == sizeof(s->servers) / sizeof(s->servers[0]))
        return GV_ERANGE;
    s->servers[s->n_servers++] = h;
    return GV_OK;
}

gv_status gv_sched_serve_extender(struct gv_sched *s, struct gv_httpd *h, const char *prefix,
                                  struct gv_error *err)
{
    static const struct {
        const char *verb;
        gv_httpd_handler fn;
    } verbs[] = {
        {"filter", handle_filter}, {"prioritize", handle_prioritize}, {"bind", handle_bind}};
    size_t plen = strlen(prefix);
    while (plen > 0 && prefix[plen - 1] == '/')
        plen--;
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "%.*s/%s", (int)plen, prefix, verbs[i].verb);
        gv_status st = gv_httpd_route(h, "POST", path, verbs[i].fn, s, err);
        if (st != GV_OK)
            return st;
    }
    return remember_server(s, h) == GV_OK ? GV_OK
                                          : gv_error_set(err, GV_ERANGE, "too many servers");
}

gv_status gv_sched_serve_webhook(struct gv_sched *s, struct gv_httpd *h, struct gv_error *err)
{
    gv_status st = gv_httpd_route(h, "POST", "/mutate", handle_mutate, s, err);
    if (st == GV_OK && remember_server(s, h) != GV_OK)
        st = gv_error_set(err, GV_ERANGE, "too many servers");
    return st;
}

gv_status gv_sched_serve_health(struct gv_sched *s, struct gv_httpd *h, struct gv_error *err)
{
    gv_status st;
    if ((st = gv_httpd_route(h, "GET", "/healthz", handle_healthz, s, err)) != GV_OK ||
        (st = gv_httpd_route(h, "GET", "/readyz", handle_readyz, s, err)) != GV_OK ||
        (st = gv_httpd_route(h, "GET", "/metrics", handle_metrics, s, err)) != GV_OK)
        return st;
    return remember_server(s, h) == GV_OK ? GV_OK
                                          : gv_error_set(err, GV_ERANGE, "too many servers");
}
