/*
 * Whole devices (docs/scheduler.md, "Whole devices"): MIG devices,
 * passthrough GPUs and mediated devices, which the kubelet hands out one
 * device each under their own resource names.  The engine does not model
 * them; the extender places a pod asking `<resource>: N` by count: a node
 * fits when it lists at least N healthy devices of that name beyond what
 * the pods on it hold.  The kubelet picks the concrete devices.
 *
 * What pods hold follows the same rules as the engine's accounting
 * (sched.c, top): one entry per pod uid, replaced, never added to, so a
 * repeated filter, bind or informer event cannot count a pod twice; an
 * entry leaves only when the pod is deleted or ends, its bind definitively
 * fails, or its reservation lapses.
 *
 *   filter: entry RESERVED on the chosen node (or the same answer again)
 *   bind:   RESERVED -> BINDING -> BOUND; a bind without a reservation
 *           takes the devices on the bind's node first (or fails)
 *   informer: a pod bound to a node (spec.nodeName) -> BOUND there, by
 *           plain overwrite; deleted or finished -> gone
 *
 * The pod's own object is the record: spec.nodeName and the container
 * resources never change after binding, so nothing a tenant can patch
 * (annotations, labels) moves what is counted.  Lock: the scheduler's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
#include "scheduler/sched_internal.h"
#include "scheduler/whole.h"

enum wphase { W_RESERVED, W_BINDING, W_BOUND };

static const char *const phase_names[] = {"reserved", "binding", "bound"};

struct wnode {
    char *name;
    struct gv_podspec_whole *res;
    uint32_t n;
    uint32_t *held;   /* scratch: per res, filled by hold_count */
    uint32_t stamp;   /* hold_count pass that filled held */
};

struct wpod {
    char *uid, *ns, *name, *node;
    enum wphase phase;
    double since; /* monotonic: when RESERVED began */
    bool gone;    /* BINDING: deleted or ended meanwhile */
    struct gv_podspec_whole_req req;
};

struct gv_sched_whole {
    struct wnode **nodes; /* sorted by name */
    size_t n_nodes, cap_nodes;
    struct wpod **pods; /* sorted by uid */
    size_t n_pods, cap_pods;
    uint32_t stamp;
};

/* ---- sorted tables ------------------------------------------------------ */

/* First index of a sorted table whose key is >= key.  Both item structs
 * start with their key (wnode.name, wpod.uid), so one search serves both. */
static size_t lower(void *const *tab, size_t n, const char *key, bool *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(*(char *const *)tab[mid], key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < n && strcmp(*(char *const *)tab[lo], key) == 0;
    return lo;
}

#define FIND(tab, n, key, found) lower((void *const *)(tab), (n), (key), (found))

static bool grow(void ***tab, size_t n, size_t *cap)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 16;
    void **t = realloc(*tab, nc * sizeof(*t));
    if (t == NULL)
        return false;
    *tab = t;
    *cap = nc;
    return true;
}

static struct wnode *node_find(struct gv_sched_whole *w, const char *name)
{
    bool found;
    size_t i = FIND(w->nodes, w->n_nodes, name, &found);
    return found ? w->nodes[i] : NULL;
}

static struct wpod *pod_find(struct gv_sched_whole *w, const char *uid)
{
    bool found;
    size_t i = FIND(w->pods, w->n_pods, uid, &found);
    return found ? w->pods[i] : NULL;
}

static void node_free(struct wnode *n)
{
    if (n == NULL)
        return;
    free(n->name);
    free(n->res);
    free(n->held);
    free(n);
}

static void pod_free(struct wpod *p)
{
    if (p == NULL)
        return;
    free(p->uid);
    free(p->ns);
    free(p->name);
    free(p->node);
    free(p);
}

static void pod_drop(struct gv_sched_whole *w, const char *uid)
{
    bool found;
    size_t i = FIND(w->pods, w->n_pods, uid, &found);
    if (!found)
        return;
    pod_free(w->pods[i]);
    memmove(&w->pods[i], &w->pods[i + 1], (w->n_pods - i - 1) * sizeof(w->pods[0]));
    w->n_pods--;
}

/* Sets uid's entry (replacing any): the one place an entry is written. */
static bool pod_set(struct gv_sched_whole *w, const char *uid, const char *ns, const char *name,
                    const char *node, enum wphase phase, const struct gv_podspec_whole_req *req)
{
    struct wpod *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->uid = strdup(uid)) == NULL || (p->ns = strdup(ns ? ns : "")) == NULL ||
        (p->name = strdup(name ? name : "")) == NULL || (p->node = strdup(node)) == NULL) {
        pod_free(p);
        return false;
    }
    p->phase = phase;
    p->since = gv_sched_now();
    p->req = *req;
    bool found;
    size_t i = FIND(w->pods, w->n_pods, uid, &found);
    if (found) {
        pod_free(w->pods[i]);
        w->pods[i] = p;
        return true;
    }
    if (!grow((void ***)&w->pods, w->n_pods, &w->cap_pods)) {
        pod_free(p);
        return false;
    }
    memmove(&w->pods[i + 1], &w->pods[i], (w->n_pods - i) * sizeof(w->pods[0]));
    w->pods[i] = p;
    w->n_pods++;
    return true;
}

gv_status gv_sched_whole_new(struct gv_sched_whole **out, struct gv_error *err)
{
    *out = calloc(1, sizeof(**out));
    return *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
}

void gv_sched_whole_free(struct gv_sched_whole *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->n_nodes; i++)
        node_free(w->nodes[i]);
    for (size_t i = 0; i < w->n_pods; i++)
        pod_free(w->pods[i]);
    free(w->nodes);
    free(w->pods);
    free(w);
}

/* ---- nodes -------------------------------------------------------------- */

void gv_sched_whole_node(struct gv_sched *s, const char *name, const struct gv_podspec_node *pn)
{
    struct gv_sched_whole *w = s->whole;
    bool found;
    size_t i = FIND(w->nodes, w->n_nodes, name, &found);
    if (pn == NULL || pn->n_whole_res == 0) {
        if (found) {
            node_free(w->nodes[i]);
            memmove(&w->nodes[i], &w->nodes[i + 1], (w->n_nodes - i - 1) * sizeof(w->nodes[0]));
            w->n_nodes--;
        }
        return;
    }
    struct wnode *n = calloc(1, sizeof(*n));
    if (n == NULL || (n->name = strdup(name)) == NULL ||
        (n->res = malloc(pn->n_whole_res * sizeof(*n->res))) == NULL ||
        (n->held = calloc(pn->n_whole_res, sizeof(*n->held))) == NULL ||
        (!found && !grow((void ***)&w->nodes, w->n_nodes, &w->cap_nodes))) {
        node_free(n);
        gv_error("node %s: whole devices not recorded: out of memory", name);
        return;
    }
    memcpy(n->res, pn->whole, pn->n_whole_res * sizeof(*n->res));
    n->n = pn->n_whole_res;
    if (found) {
        node_free(w->nodes[i]);
        w->nodes[i] = n;
        return;
    }
    memmove(&w->nodes[i + 1], &w->nodes[i], (w->n_nodes - i) * sizeof(w->nodes[0]));
    w->nodes[i] = n;
    w->n_nodes++;
}

/* ---- what pods ask ------------------------------------------------------ */

/* Is name a whole-device resource: by its form, or listed by some node? */
static bool known_whole(void *ud, const char *name)
{
    struct gv_sched_whole *w = ud;
    if (gv_podspec_whole_by_name(name))
        return true;
    for (size_t i = 0; i < w->n_nodes; i++)
        for (uint32_t k = 0; k < w->nodes[i]->n; k++)
            if (strcmp(w->nodes[i]->res[k].resource, name) == 0)
                return true;
    return false;
}

bool gv_sched_whole_wanted(struct gv_sched *s, const struct gv_podspec_whole_req *req)
{
    for (uint32_t k = 0; k < req->n; k++)
        if (known_whole(s->whole, req->r[k].resource))
            return true;
    return false;
}

/* Fills held[] of every node with what the pods (but `except`) hold there. */
static void hold_count(struct gv_sched_whole *w, const char *except)
{
    if (++w->stamp == 0)
        w->stamp = 1;
    for (size_t i = 0; i < w->n_pods; i++) {
        const struct wpod *p = w->pods[i];
        if (except != NULL && strcmp(p->uid, except) == 0)
            continue;
        struct wnode *n = node_find(w, p->node);
        if (n == NULL)
            continue;
        if (n->stamp != w->stamp) {
            memset(n->held, 0, n->n * sizeof(*n->held));
            n->stamp = w->stamp;
        }
        for (uint32_t k = 0; k < p->req.n; k++)
            for (uint32_t r = 0; r < n->n; r++)
                if (strcmp(n->res[r].resource, p->req.r[k].resource) == 0)
                    n->held[r] += p->req.r[k].count;
    }
}

static const uint32_t *held_of(struct gv_sched_whole *w, struct wnode *n)
{
    if (n->stamp != w->stamp) {
        memset(n->held, 0, n->n * sizeof(*n->held));
        n->stamp = w->stamp;
    }
    return n->held;
}

/* After hold_count: can node take req?  Unused devices left after it in *slack. */
static bool node_fits(struct gv_sched_whole *w, const char *node,
                      const struct gv_podspec_whole_req *req, uint64_t *slack, char *why,
                      size_t cap)
{
    struct wnode *n = node_find(w, node);
    static const struct gv_podspec_whole none;
    const struct gv_podspec_whole *res = n ? n->res : &none;
    uint32_t nr = n ? n->n : 0;
    const uint32_t *held = n ? held_of(w, n) : NULL;
    return gv_podspec_whole_fits(res, nr, held, req, known_whole, w, slack, why, cap);
}

/* ---- informer ----------------------------------------------------------- */

static const char *str2(json_t *o, const char *a, const char *b)
{
    return json_string_value(json_object_get(json_object_get(o, a), b));
}

void gv_sched_whole_pod(struct gv_sched *s, json_t *pod, bool finished)
{
    struct gv_sched_whole *w = s->whole;
    const char *uid = str2(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    if (finished) {
        gv_sched_whole_pod_gone(s, uid);
        return;
    }
    const char *node = str2(pod, "spec", "nodeName");
    if (node == NULL || *node == '\0')
        return; /* not bound: our reservation or bind, if any, owns the entry */
    struct gv_podspec_whole_req req;
    struct gv_error err = {0};
    if (gv_podspec_whole_request(&s->cfg.alloc, pod, &req, &err) != GV_OK) {
        /* the API server validated it, the kubelet counts it: so do we, as best we can */
        gv_warn("pod %s/%s: %s", str2(pod, "metadata", "namespace"),
                str2(pod, "metadata", "name"), err.msg);
        return;
    }
    struct wpod *p = pod_find(w, uid);
    if (!gv_sched_whole_wanted(s, &req))
        req.n = 0; /* other extended resources are kube-scheduler's: nothing to hold */
    if (req.n == 0) {
        if (p != NULL && p->phase != W_BINDING)
            pod_drop(w, uid);
        return;
    }
    if (p != NULL && p->phase == W_BOUND && strcmp(p->node, node) == 0)
        return; /* a repeated event: nothing changes */
    if (p != NULL && p->phase == W_BINDING && strcmp(p->node, node) == 0) {
        p->phase = W_BOUND; /* our Binding landed before its answer did */
        return;
    }
    if (!pod_set(w, uid, str2(pod, "metadata", "namespace"), str2(pod, "metadata", "name"), node,
                 W_BOUND, &req))
        gv_error("pod %s: whole devices not counted: out of memory", uid);
}

void gv_sched_whole_pod_gone(struct gv_sched *s, const char *uid)
{
    struct wpod *p = pod_find(s->whole, uid);
    if (p != NULL && p->phase == W_BINDING)
        p->gone = true; /* the bind frees it when it ends */
    else if (p != NULL)
        pod_drop(s->whole, uid);
}

void gv_sched_whole_expire(struct gv_sched *s, double now)
{
    struct gv_sched_whole *w = s->whole;
    for (size_t i = w->n_pods; i-- > 0;) {
        struct wpod *p = w->pods[i];
        if (p->phase != W_RESERVED || now - p->since <= (double)s->cfg.reservation_ttl_s)
            continue;
        gv_info("pod %s/%s: whole-device reservation on %s expired after %lds without a bind",
                p->ns, p->name, p->node, s->cfg.reservation_ttl_s);
        pod_drop(w, p->uid);
    }
}

/* ---- filter ------------------------------------------------------------- */

void gv_sched_whole_filter(struct gv_sched *s, json_t *pod, const struct gv_podspec_whole_req *req,
                           const char *const *names, size_t n, enum gv_ext_verdict *verdicts,
                           char **reasons)
{
    struct gv_sched_whole *w = s->whole;
    const char *uid = str2(pod, "metadata", "uid");
    const char *bound = str2(pod, "spec", "nodeName");
    pthread_mutex_lock(&s->lock);
    struct wpod *p = pod_find(w, uid);
    const char *keep = p != NULL ? p->node : bound != NULL && *bound ? bound : NULL;
    if (keep != NULL) {
        /* Placed already: the same answer every time, nothing recounted. */
        bool listed = false;
        for (size_t i = 0; i < n; i++)
            listed = listed || strcmp(names[i], keep) == 0;
        char why[GV_ALLOC_NODE_MAX + 96];
        snprintf(why, sizeof(why), "pod's whole devices are %s on node %s (gpuvisor keeps that "
                 "placement)", p != NULL ? phase_names[p->phase] : "bound", keep);
        for (size_t i = 0; i < n; i++) {
            bool match = strcmp(names[i], keep) == 0;
            verdicts[i] = match ? GV_EXT_FIT : listed ? GV_EXT_DROPPED : GV_EXT_FAILED;
            if (!match && !listed)
                reasons[i] = strdup(why);
        }
        pthread_mutex_unlock(&s->lock);
        return;
    }
    hold_count(w, uid);
    time_t now = time(NULL);
    size_t best = n;
    uint64_t best_slack = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        char buf[512];
        const char *why = gv_sched_node_unusable(s, gv_sched_node_find(s, names[i]), now, buf,
                                                 sizeof(buf));
        uint64_t slack = 0;
        if (why != NULL) {
            verdicts[i] = GV_EXT_UNRESOLVABLE;
            reasons[i] = strdup(why);
        } else if (!node_fits(w, names[i], req, &slack, buf, sizeof(buf))) {
            /* a node that lists none of it never will; one that is full may free some */
            verdicts[i] = strncmp(buf, "node has no ", 12) == 0 ? GV_EXT_UNRESOLVABLE
                                                                : GV_EXT_FAILED;
            reasons[i] = strdup(buf);
        } else {
            verdicts[i] = GV_EXT_FIT;
            /* best fit: the node with the fewest devices left over keeps the
             * emptier ones for larger requests */
            if (slack < best_slack) {
                best = i;
                best_slack = slack;
            }
        }
    }
    if (!s->cfg.filter_feasible && best < n) {
        if (!pod_set(w, uid, str2(pod, "metadata", "namespace"), str2(pod, "metadata", "name"),
                     names[best], W_RESERVED, req)) {
            for (size_t i = 0; i < n; i++) {
                verdicts[i] = GV_EXT_FAILED;
                free(reasons[i]);
                reasons[i] = strdup("scheduler out of memory");
            }
        } else {
            for (size_t i = 0; i < n; i++)
                if (verdicts[i] == GV_EXT_FIT && i != best)
                    verdicts[i] = GV_EXT_DROPPED;
            gv_debug("filter: pod %s/%s reserved whole devices on %s", str2(pod, "metadata",
                     "namespace"), str2(pod, "metadata", "name"), names[best]);
        }
    }
    pthread_mutex_unlock(&s->lock);
}

/* ---- bind --------------------------------------------------------------- */

enum gv_whole_bind gv_sched_whole_bind_begin(struct gv_sched *s, const char *uid,
                                             const char *node, struct gv_error *err)
{
    enum gv_whole_bind r = GV_WHOLE_BIND_NONE;
    if (uid == NULL || *uid == '\0')
        return r;
    pthread_mutex_lock(&s->lock);
    struct wpod *p = pod_find(s->whole, uid);
    if (p == NULL) {
        /* nothing of ours */
    } else if (p->phase == W_BINDING) {
        gv_error_set(err, GV_ECONFLICT, "a bind of pod %s/%s is already in progress", p->ns,
                     p->name);
        r = GV_WHOLE_BIND_FAIL;
    } else if (p->phase == W_BOUND) {
        /* a repeated bind: the same node is done; another one is refused */
        if (strcmp(p->node, node) == 0)
            r = GV_WHOLE_BIND_DONE;
        else {
            gv_error_set(err, GV_ECONFLICT, "pod %s/%s is already bound to %s", p->ns, p->name,
                         p->node);
            r = GV_WHOLE_BIND_FAIL;
        }
    } else if (strcmp(p->node, node) == 0) {
        p->phase = W_BINDING;
        p->gone = false;
        r = GV_WHOLE_BIND_HELD;
    } else {
        pod_drop(s->whole, uid); /* kube-scheduler chose another node: taken afresh there */
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

gv_status gv_sched_whole_bind_take(struct gv_sched *s, json_t *pod, const char *node,
                                   bool *taken, struct gv_error *err)
{
    struct gv_podspec_whole_req req;
    *taken = false;
    gv_status st = gv_podspec_whole_request(&s->cfg.alloc, pod, &req, err);
    if (st != GV_OK)
        return st;
    const char *uid = str2(pod, "metadata", "uid");
    pthread_mutex_lock(&s->lock);
    if (!gv_sched_whole_wanted(s, &req)) {
        pthread_mutex_unlock(&s->lock);
        return GV_OK;
    }
    char buf[512];
    const char *why = gv_sched_node_unusable(s, gv_sched_node_find(s, node), time(NULL), buf,
                                             sizeof(buf));
    uint64_t slack;
    if (why != NULL) {
        st = gv_error_set(err, GV_EUNAVAILABLE, "node %s: %s", node, why);
    } else {
        hold_count(s->whole, uid);
        if (!node_fits(s->whole, node, &req, &slack, buf, sizeof(buf)))
            st = gv_error_set(err, GV_ENOFIT, "node %s: %s", node, buf);
        else if (!pod_set(s->whole, uid, str2(pod, "metadata", "namespace"),
                          str2(pod, "metadata", "name"), node, W_BINDING, &req))
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
        else
            *taken = true;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

void gv_sched_whole_bind_end(struct gv_sched *s, const char *uid, bool ok)
{
    struct wpod *p = pod_find(s->whole, uid);
    if (p == NULL || p->phase != W_BINDING)
        return; /* the informer settled it meanwhile */
    if (ok && !p->gone)
        p->phase = W_BOUND;
    else
        pod_drop(s->whole, uid);
}

/* ---- reading ------------------------------------------------------------ */

json_t *gv_sched_whole_node_json(struct gv_sched *s, const char *node)
{
    struct wnode *n = node_find(s->whole, node);
    if (n == NULL)
        return NULL;
    hold_count(s->whole, NULL);
    const uint32_t *held = held_of(s->whole, n);
    json_t *arr = json_array();
    for (uint32_t r = 0; arr != NULL && r < n->n; r++) {
        const struct gv_podspec_whole *x = &n->res[r];
        uint32_t free_n = x->healthy > held[r] ? x->healthy - held[r] : 0;
        json_array_append_new(arr, json_pack("{s:s,s:i,s:i,s:i}", "resource", x->resource,
                                             "total", (int)x->total, "healthy", (int)x->healthy,
                                             "free", (int)free_n));
    }
    return arr;
}
