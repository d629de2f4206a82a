/* HTTP handlers: extender verbs, webhook, health and metrics. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
#include "scheduler/bind_inflight.h"
#include "scheduler/gv_extender.h"
#include "scheduler/gv_webhook.h"
#include "scheduler/placement_guard.h"
#include "scheduler/preempt.h"
#include "scheduler/preempt_self.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/whole.h"
#include "scheduler/handlers_internal.h"

/* Attempts of the annotate step when the pod changed under us (409). */
#define BIND_ATTEMPTS 5


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
        /* GPUs held for a preemptor of higher priority stay out of reach
         * here too (feasible mode, a reservation elsewhere, a 409 retry) */
        st = gv_sched_preempt_exclude(s, pod, req, err);
        if (st == GV_OK)
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
 * answer)?  Asked with a GET, tried again if the API does not answer: only
 * BIND_NOT_TAKEN lets the bind release the pod's GPUs.  A GET that fails is
 * BIND_UNKNOWN, never "not taken": under load a read can time out (waiting
 * for a connection, or on a slow API server) while the Binding stands, and
 * freeing its GPUs then hands a running pod's share to the next pod. */
enum bind_truth { BIND_TOOK, BIND_NOT_TAKEN, BIND_UNKNOWN };

#define BIND_READBACK_ATTEMPTS 3

static enum bind_truth binding_state(struct gv_sched *s, const struct gv_ext_bind_args *b,
                                     const char *enc)
{
    char path[1024];
    pod_path(b, path, sizeof(path));
    for (int attempt = 0; attempt < BIND_READBACK_ATTEMPTS; attempt++) {
        json_t *pod = NULL;
        struct gv_error err = {0};
        gv_status st = gv_kube_get(s->kube, path, &pod, &err);
        if (st == GV_ENOTFOUND)
            return BIND_NOT_TAKEN; /* gone: nothing of it to count */
        if (st == GV_OK) {
            const char *uid = meta(pod, "uid");
            const char *bound =
                json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
            /* ours only if bound with our assignment: another Binding to
             * the same node (a predecessor's, landed late) is not ours */
            const char *ann = json_string_value(json_object_get(
                json_object_get(json_object_get(pod, "metadata"), "annotations"),
                ANN_ASSIGNMENT));
            bool took = uid != NULL && strcmp(uid, b->pod_uid) == 0 && bound != NULL &&
                        strcmp(bound, b->node) == 0 &&
                        (enc == NULL || (ann != NULL && strcmp(ann, enc) == 0));
            json_decref(pod);
            return took ? BIND_TOOK : BIND_NOT_TAKEN;
        }
        gv_debug("bind %s/%s: reading it back: %s", b->pod_namespace, b->pod_name, err.msg);
        usleep(100000u * (unsigned)(attempt + 1));
    }
    return BIND_UNKNOWN;
}

static bool binding_took(struct gv_sched *s, const struct gv_ext_bind_args *b)
{
    return binding_state(s, b, NULL) == BIND_TOOK;
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
        r->bind_unknown = false;
        r->gone = false;
    } else if (r != NULL && gv_sched_phase_placed(r->phase)) {
        /* Held elsewhere (kube-scheduler chose another node): kept until
         * bind_compute replaces it under the lock. */
        r->phase = REC_BINDING;
        r->bind_unknown = false;
        r->gone = false;
    } else if (b->pod_uid[0]) {
        struct srec *nr = gv_sched_rec_get(s, b->pod_uid, b->pod_namespace, b->pod_name);
        if (nr != NULL) {
            gv_sched_rec_set(nr, REC_BINDING, NULL, NULL, NULL);
            nr->gone = false;
        }
    }
    pthread_mutex_unlock(&s->lock);

    bool no_gpu = false, whole = false, journaled = false;
    for (int attempt = 0;; attempt++) {
        if (enc == NULL && (st = bind_compute(s, b, &enc, &rv, &no_gpu, &whole, err)) != GV_OK)
            break;
        if (no_gpu) {
            st = gv_kube_bind_pod(s->kube, b->pod_namespace, b->pod_name,
                                  b->pod_uid[0] ? b->pod_uid : NULL, b->node, err);
            break;
        }
        /* Journaled first: if this process dies with the Binding sent, its
         * successor holds the GPUs until it lands or cannot any more. */
        journaled = b->pod_uid[0] &&
                    gv_sched_inflight_journal(s, b->pod_uid, b->pod_namespace, b->pod_name,
                                              b->node, enc);
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
    enum bind_truth truth = BIND_NOT_TAKEN;
    if (st != GV_OK && enc != NULL && b->pod_uid[0])
        truth = binding_state(s, b, enc);
    /* A failure without a definite answer (timeout, reset, 5xx) may still
     * be applied by the server after the read-back showed the pod unbound. */
    bool may_land = st != GV_OK && enc != NULL && truth == BIND_NOT_TAKEN &&
                    gv_sched_inflight_ambiguous(st);
    if (truth == BIND_TOOK) {
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
        /* bound now: no other Binding of the pod can land any more */
        gv_sched_inflight_pod(s, b->pod_uid, b->pod_uid[0] != '\0');
        if (fr != NULL && (no_gpu || fr->gone)) {
            gv_sched_forget_pod(s, b->pod_uid); /* no GPUs, or deleted meanwhile */
        } else if (fr != NULL) {
            fr->phase = REC_BOUND;
            fr->bound_here = true;
            fr->bind_unknown = false;
            free(fr->rv);
            fr->rv = written;
            written = NULL;
        }
    } else if (truth == BIND_UNKNOWN && fr != NULL && !fr->gone && fr->encoded != NULL &&
               gv_alloc_is_placed(s->cluster, b->pod_uid)) {
        /* The API did not say whether the Binding took: keep the placement
         * as an assignment not yet seen bound.  The informer settles it when
         * it shows the pod bound (counted), deleted or ended (released),
         * else it lapses after the reservation timeout like any unbound
         * one.  A version without our annotation settles nothing: it may be
         * one from before our write, delivered late (bind_unknown). */
        s->binds_failed++;
        fr->phase = REC_UNBOUND;
        fr->bind_unknown = true;
        fr->assigned_at = time(NULL);
        gv_warn("bind %s/%s to %s: %s, and the API did not answer whether it took: its GPUs "
                "stay held until the pod shows it (at most %lds)",
                b->pod_namespace, b->pod_name, b->node, err->msg, s->cfg.reservation_ttl_s);
    } else {
        s->binds_failed++;
        if (b->pod_uid[0]) {
            /* The bind definitively failed: free what it held, then count
             * whatever the API still shows (an annotation whose removal we
             * have not seen yet stays counted until we do). */
            gv_sched_forget_pod(s, b->pod_uid);
            /* Bound by another Binding (a predecessor's that landed): its
             * hold goes before the placement the pod is bound with counts. */
            gv_sched_inflight_pod(s, b->pod_uid, gv_sched_truth_bound(s, b->pod_uid));
            if (may_land) /* its GPUs stay counted, as a hold */
                gv_sched_inflight_hold(s, b->pod_uid, b->pod_namespace, b->pod_name, enc,
                                       time(NULL) + GV_INFLIGHT_S);
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
    /* Outcome known (bound, or refused for good): the journal entry goes.
     * Unknown (kept as an unbound assignment, or held): it stays, for a
     * successor, until the hold settles or its deadline passes (the
     * sweeper prunes what no hold owns). */
    if (journaled && !may_land && truth != BIND_UNKNOWN)
        gv_sched_inflight_unjournal(s, b->pod_uid);
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

/* ---- registration ------------------------------------------------------ */

/* Every extender verb, each behind verb_ready: a restarted extender is
 * called before its informers have listed (kube-scheduler does not wait for
 * readiness), and an answer then would count none of the pods' GPUs. */
#define EXTENDER_VERBS(X)                                                                     \
    X(filter, handle_filter)                                                                  \
    X(prioritize, handle_prioritize)                                                          \
    X(bind, handle_bind)                                                                      \
    X(preempt, gv_sched_preempt_self_verb)

#define X_GATED(verb, fn)                                                                     \
    static void gated_##verb(void *ctx, const struct gv_http_request *hreq,                   \
                             struct gv_http_response *resp)                                  \
    {                                                                                         \
        if (verb_ready(ctx, #verb, resp))                                                     \
            fn(ctx, hreq, resp);                                                              \
    }
EXTENDER_VERBS(X_GATED)
#undef X_GATED

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
#define X_ROUTE(verb, fn) {#verb, gated_##verb},
        EXTENDER_VERBS(X_ROUTE)
#undef X_ROUTE
    };
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
