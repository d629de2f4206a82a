/*
 * The scheduler's self-check (docs/scheduler.md): the engine's accounting
 * compared with what the caches show, node by node, and repaired where it
 * drifted.
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
#include "scheduler/gv_extender.h"
#include "scheduler/placement_guard.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/whole.h"
#include "scheduler/sched_pods.h"

/* ---- self-check ------------------------------------------------------ */

/* Is the truth behind a record of our own bind not delivered yet?  Our
 * bind wrote the annotation and created the Binding (BOUND), or could not
 * learn whether the Binding took (UNBOUND, bind_unknown); until the pod
 * informer shows the pod bound (it may still be at a version before our
 * annotation, or before the Binding), the record stands: deletion or
 * termination, which the informer does deliver, frees it, and an unknown
 * bind's record lapses after the reservation timeout (stale_hold.c).  A
 * self-check in that window must not take the lag for a drift and free
 * GPUs a running pod may hold. */
static bool truth_lags(const struct srec *r, json_t *t)
{
    struct truth o;
    bool ours = (r->phase == REC_BOUND && r->bound_here) ||
                (r->phase == REC_UNBOUND && r->bind_unknown);
    return ours && !(truth_get(t, &o) && o.bound);
}

/* What uid's placement should be per the API (or our own live reservation
 * or bind), or NULL for none. */
static const char *expected_text(struct gv_sched *s, const struct srec *r, const char *uid,
                                 time_t wall)
{
    if (r != NULL &&
        (r->phase == REC_RESERVED || r->phase == REC_BINDING || r->phase == REC_INFLIGHT))
        return r->encoded; /* ours: a reservation, a bind, or a hold for a Binding in flight */
    json_t *t = json_object_get(s->truth, uid);
    const char *text = truth_live(s, t, wall);
    if (text == NULL && r != NULL && truth_lags(r, t))
        return r->encoded;
    return text;
}

struct gpu_sum {
    const char *node; /* the record's */
    const char *uuid; /* into the record's assignment text, uuid_len bytes */
    size_t uuid_len;
    uint64_t mem;
    uint32_t milli, tasks;
};

static int gpu_sum_cmp(const void *a, const void *b)
{
    const struct gpu_sum *x = a, *y = b;
    int c = strcmp(x->node, y->node);
    if (c != 0)
        return c;
    size_t n = x->uuid_len < y->uuid_len ? x->uuid_len : y->uuid_len;
    c = memcmp(x->uuid, y->uuid, n);
    return c != 0 ? c : x->uuid_len < y->uuid_len ? -1 : x->uuid_len > y->uuid_len;
}

struct sums {
    struct gpu_sum *v;
    size_t n, cap;
};

static void sums_free(struct sums *m)
{
    free(m->v);
    memset(m, 0, sizeof(*m));
}

/* Appends the devices of an assignment text (already validated when it was
 * placed: "v1;node=N;c=uuid:mem:milli,...;c2=...") without decoding it into
 * the engine's structure: at 40,000 pods a full decode of each one was most
 * of a self-check's time under the lock.  false on OOM. */
static bool sums_add(struct sums *m, const char *node, const char *text)
{
    const char *p = strchr(text, ';');
    p = p ? strchr(p + 1, ';') : NULL; /* past "v1;node=N" */
    while (p != NULL && *p == ';') {
        const char *eq = strchr(p, '=');
        if (eq == NULL)
            break;
        p = eq + 1;
        for (;;) {
            const char *colon = strchr(p, ':');
            if (colon == NULL)
                return true;
            char *end = NULL;
            unsigned long long mem = strtoull(colon + 1, &end, 10);
            unsigned long milli = end && *end == ':' ? strtoul(end + 1, &end, 10) : 0;
            if (m->n == m->cap) {
                size_t nc = m->cap ? m->cap * 2 : 64;
                struct gpu_sum *nv = realloc(m->v, nc * sizeof(*nv));
                if (nv == NULL)
                    return false;
                m->v = nv;
                m->cap = nc;
            }
            m->v[m->n++] = (struct gpu_sum){node, p, (size_t)(colon - p), mem, (uint32_t)milli, 1};
            if (end == NULL || *end != ',') {
                p = end;
                break;
            }
            p = end + 1;
        }
    }
    return true;
}

/* Per-GPU usage node's records say the engine holds there: the sum of the
 * recorded assignments of the pods the engine has placed on it, sorted by
 * uuid (an engine placement without a record adds nothing, so its usage
 * shows as a difference).  The entries point into the records: use them
 * before the next change.  false on OOM. */
static bool sums_node(struct gv_sched *s, const char *node, struct sums *m)
{
    memset(m, 0, sizeof(*m));
    const char *stack[64];
    size_t n = gv_alloc_node_pods(s->cluster, node, stack, 64);
    const char **uids = n <= 64 ? stack : malloc(n * sizeof(*uids));
    if (uids == NULL)
        return false;
    if (uids != stack)
        gv_alloc_node_pods(s->cluster, node, uids, n);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        struct srec *r = gv_sched_rec_find(s, uids[i]);
        if (r != NULL && gv_sched_phase_placed(r->phase) && r->encoded != NULL &&
            r->node != NULL && strcmp(r->node, node) == 0)
            ok = sums_add(m, r->node, r->encoded);
    }
    if (uids != stack)
        free((void *)uids);
    if (!ok) {
        sums_free(m);
        return false;
    }
    if (m->n > 1)
        qsort(m->v, m->n, sizeof(*m->v), gpu_sum_cmp);
    size_t k = 0; /* merge equal uuids */
    for (size_t i = 0; i < m->n; i++) {
        if (k > 0 && gpu_sum_cmp(&m->v[k - 1], &m->v[i]) == 0) {
            m->v[k - 1].mem += m->v[i].mem;
            m->v[k - 1].milli += m->v[i].milli;
            m->v[k - 1].tasks += m->v[i].tasks;
        } else {
            m->v[k++] = m->v[i];
        }
    }
    m->n = k;
    return true;
}

/* Does GPU g of node differ from the records?  *want gets what they say. */
static bool gpu_differs(struct gv_sched *s, const struct sums *m, const char *node, uint32_t g,
                        struct gv_alloc_gpu_usage *u, struct gpu_sum *want)
{
    if (gv_alloc_gpu_usage_at(s->cluster, node, g, u, NULL) != GV_OK)
        return false;
    struct gpu_sum key = {.node = node, .uuid = u->uuid, .uuid_len = strlen(u->uuid)};
    const struct gpu_sum *e = m->n ? bsearch(&key, m->v, m->n, sizeof(*m->v), gpu_sum_cmp) : NULL;
    *want = e != NULL ? *e : (struct gpu_sum){node, NULL, 0, 0, 0, 0};
    return want->mem != u->mem_mib || want->milli != u->milli || want->tasks != u->tasks;
}

/* The GPUs of node sn whose engine usage differs from its records' sum
 * (lock held): their uuids (heap copies) go to out; logged as drift when
 * log is set.  Returns how many. */
static size_t node_differing_gpus(struct gv_sched *s, const struct snode *sn,
                                  char *out[GV_ALLOC_MAX_NODE_GPUS], bool log)
{
    struct sums m;
    size_t n = 0;
    if (!sums_node(s, sn->name, &m))
        return 0;
    for (uint32_t g = 0; g < sn->n_gpus && n < GV_ALLOC_MAX_NODE_GPUS; g++) {
        struct gv_alloc_gpu_usage u;
        struct gpu_sum e;
        if (!gpu_differs(s, &m, sn->name, g, &u, &e))
            continue;
        if (log)
            gv_warn("accounting drift: node %s GPU %s counted %" PRIu64 " MiB, %u milli, %u "
                    "task(s); its pods hold %" PRIu64 " MiB, %u milli, %u task(s); rebuilt",
                    sn->name, u.uuid, u.mem_mib, u.milli, u.tasks, e.mem, e.milli, e.tasks);
        if ((out[n] = strdup(u.uuid)) != NULL)
            n++;
    }
    sums_free(&m); /* points into records the caller may rewrite */
    return n;
}

/* Places r's recorded assignment again (releasing what the engine holds
 * for it first), keeping the record's phase and bookkeeping.  Lock held. */
static gv_status rec_place_again(struct gv_sched *s, struct srec *r, struct gv_error *err)
{
    char *text = strdup(r->encoded), *ns = strdup(r->ns), *name = strdup(r->name),
         *uid = strdup(r->uid), *rv = r->rv ? strdup(r->rv) : NULL;
    enum rec_phase ph = r->phase;
    time_t at = r->assigned_at;
    bool here = r->bound_here, unknown = r->bind_unknown;
    gv_status st = gv_error_set(err, GV_ENOMEM, "out of memory");
    if (text != NULL && ns != NULL && name != NULL && uid != NULL) {
        if (gv_alloc_is_placed(s->cluster, uid))
            gv_alloc_release(s->cluster, uid, NULL);
        st = gv_sched_place_encoded(s, uid, ns, name, text, ph, err);
        struct srec *nr = gv_sched_rec_find(s, uid);
        if (nr != NULL) {
            nr->assigned_at = at;
            nr->bound_here = here;
            nr->bind_unknown = unknown;
            free(nr->rv);
            nr->rv = rv;
            rv = NULL;
        }
    }
    free(text);
    free(ns);
    free(name);
    free(uid);
    free(rv);
    return st;
}

/* Releases and places again, from its record, every placement on node
 * (all, or only those using a GPU listed in uuids); releases placements
 * the engine holds there without a record.  Lock held. */
static void node_replace_pods(struct gv_sched *s, const char *node, char *const *uuids,
                              size_t n_uuids)
{
    /* Unrecorded placements first (a bug, or planted drift). */
    size_t n = gv_alloc_node_pods(s->cluster, node, NULL, 0);
    const char **held = calloc(n ? n : 1, sizeof(*held));
    char **copy = calloc(n ? n : 1, sizeof(*copy));
    if (held != NULL && copy != NULL) {
        gv_alloc_node_pods(s->cluster, node, held, n);
        for (size_t i = 0; i < n; i++)
            copy[i] = strdup(held[i]);
        for (size_t i = 0; i < n; i++) {
            struct srec *r = copy[i] ? gv_sched_rec_find(s, copy[i]) : NULL;
            if (copy[i] != NULL && (r == NULL || !gv_sched_phase_placed(r->phase))) {
                gv_warn("accounting drift: node %s held a placement for pod uid %s that no "
                        "pod accounts for; released",
                        node, copy[i]);
                gv_alloc_release(s->cluster, copy[i], NULL);
            }
            free(copy[i]);
        }
    }
    free(held);
    free(copy);
    for (size_t i = 0; i < s->n_recs; i++) {
        struct srec *r = s->recs[i];
        if (!gv_sched_phase_placed(r->phase) || r->node == NULL || r->encoded == NULL ||
            strcmp(r->node, node) != 0)
            continue;
        bool uses = n_uuids == 0;
        for (size_t k = 0; k < n_uuids && !uses; k++)
            uses = strstr(r->encoded, uuids[k]) != NULL;
        if (!uses || !encoded_placeable(s, r->encoded))
            continue;
        struct gv_error err = {0};
        if (rec_place_again(s, r, &err) != GV_OK)
            gv_error("pod %s/%s: assignment %s does not fit node %s now: %s", r->ns, r->name,
                     r->encoded, node, err.msg);
    }
}

/* After a node's inventory appeared or changed (lock held): recorded pods
 * not placed yet (seen before their node, or on a GPU that was missing) are
 * placed, and GPUs whose usage no longer matches the records (a GPU that
 * vanished and came back starts empty in the engine) get their pods placed
 * again.  Health changes keep the engine's usage as it is. */
void node_replace(struct gv_sched *s, const char *node)
{
    for (size_t i = 0; i < s->n_recs; i++) {
        struct srec *r = s->recs[i];
        if (!gv_sched_phase_placed(r->phase) || r->node == NULL || r->encoded == NULL ||
            strcmp(r->node, node) != 0 || gv_alloc_is_placed(s->cluster, r->uid) ||
            !encoded_placeable(s, r->encoded))
            continue;
        struct gv_error err = {0};
        if (rec_place_again(s, r, &err) != GV_OK)
            gv_error("pod %s/%s: assignment %s does not fit node %s: %s", r->ns, r->name,
                     r->encoded, node, err.msg);
    }
    struct snode *sn = gv_sched_node_find(s, node);
    char *uuids[GV_ALLOC_MAX_NODE_GPUS];
    size_t nu = sn != NULL ? node_differing_gpus(s, sn, uuids, false) : 0;
    if (nu > 0) {
        gv_info("node %s: inventory changed; %zu GPU(s) get their pods placed again", node, nu);
        node_replace_pods(s, node, uuids, nu);
    }
    for (size_t k = 0; k < nu; k++)
        free(uuids[k]);
}

/* One record against what the API says (lock held).  Returns the repairs
 * made; *removed tells whether the record left the table. */
static unsigned check_rec(struct gv_sched *s, struct srec *r, time_t wall, bool *removed)
{
    *removed = false;
    if (!gv_sched_phase_placed(r->phase) || (r->phase == REC_BINDING && r->encoded == NULL))
        return 0; /* pending, or a bind computing its placement */
    const char *want = expected_text(s, r, r->uid, wall);
    if (want == NULL) {
        gv_warn("accounting drift: pod %s/%s held %s but the API shows no live assignment "
                "for it; released",
                r->ns, r->name, r->encoded ? r->encoded : "?");
        gv_sched_forget_pod(s, r->uid);
        *removed = true;
        return 1;
    }
    if (r->encoded == NULL || strcmp(want, r->encoded) != 0) {
        gv_warn("accounting drift: pod %s/%s held %s but the API says %s; replaced", r->ns,
                r->name, r->encoded ? r->encoded : "?", want);
        char *uid = strdup(r->uid);
        if (uid != NULL) {
            gv_sched_apply_truth(s, uid, wall);
            *removed = gv_sched_rec_find(s, uid) != r;
            free(uid);
        }
        return 1;
    }
    if (gv_alloc_is_placed(s->cluster, r->uid) || !encoded_placeable(s, r->encoded))
        return 0;
    struct gv_error err = {0};
    if (rec_place_again(s, r, &err) != GV_OK) {
        /* Not a drift the scheduler can repair: the GPUs are unhealthy or
         * taken (the API itself over-commits). */
        gv_debug("pod %s/%s: %s not placeable now: %s", r->ns, r->name, r->encoded, err.msg);
        return 0;
    }
    gv_warn("accounting drift: pod %s/%s: %s was not counted; placed", r->ns, r->name,
            r->encoded);
    return 1;
}

/* The engine's usage of each GPU of nodes [lo, hi) against the sum of the
 * recorded placements there (lock held).  Returns the repairs made. */
static unsigned check_nodes(struct gv_sched *s, size_t lo, size_t hi)
{
    unsigned repairs = 0;
    for (size_t i = lo; i < hi && i < s->n_nodes; i++) {
        const struct snode *sn = s->nodes[i];
        if (!sn->in_engine)
            continue;
        char *bad[GV_ALLOC_MAX_NODE_GPUS];
        size_t nb = node_differing_gpus(s, sn, bad, true);
        repairs += (unsigned)nb;
        if (nb > 0)
            node_replace_pods(s, sn->name, bad, nb);
        for (size_t k = 0; k < nb; k++)
            free(bad[k]);
    }
    return repairs;
}

/*
 * The pass works a slice at a time (CHECK_RECS records, CHECK_NODES nodes,
 * CHECK_TRUTH truth entries per lock hold), so filters never wait for a
 * whole pass: at 5,000 nodes and 40,000 pods a pass in one piece held the
 * lock for ~85 ms of CPU.  Each slice compares records, truth and engine in
 * one critical section, so what it finds is a real difference, never a
 * half-applied event; a slice resumes after the last uid / node it saw.
 */
#define CHECK_RECS 2048
#define CHECK_NODES 512
#define CHECK_TRUTH 2048

unsigned gv_sched_self_check(struct gv_sched *s)
{
    unsigned repairs = 0;
    if (s->pod_inf == NULL && s->kube != NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    expire_locked(s, gv_sched_now(), time(NULL));
    pthread_mutex_unlock(&s->lock);

    /* 1. Pods: each record against what the API says. */
    char *after = NULL;
    for (bool done = false; !done;) {
        pthread_mutex_lock(&s->lock);
        time_t wall = time(NULL);
        size_t i = after != NULL ? gv_sched_rec_after(s, after) : 0;
        for (size_t n = 0; i < s->n_recs && n < CHECK_RECS; n++) {
            struct srec *r = s->recs[i];
            char *uid = strdup(r->uid);
            bool removed;
            repairs += check_rec(s, r, wall, &removed);
            free(after);
            after = uid;
            i = uid != NULL ? gv_sched_rec_after(s, uid) : i + 1;
        }
        done = i >= s->n_recs || after == NULL;
        pthread_mutex_unlock(&s->lock);
    }
    free(after);
    after = NULL;

    /* 2. Pods the API shows placed that no record holds. */
    for (bool done = false; !done;) {
        pthread_mutex_lock(&s->lock);
        time_t wall = time(NULL);
        void *it = after != NULL ? json_object_iter_at(s->truth, after) : json_object_iter(s->truth);
        if (after != NULL && it != NULL)
            it = json_object_iter_next(s->truth, it);
        /* (A resume key deleted meanwhile ends the step: the next pass
         * covers the rest.) */
        done = after != NULL && json_object_iter_at(s->truth, after) == NULL;
        for (size_t n = 0; !done && it != NULL && n < CHECK_TRUTH; n++) {
            const char *uid = json_object_iter_key(it);
            json_t *t = json_object_iter_value(it);
            it = json_object_iter_next(s->truth, it);
            free(after);
            after = strdup(uid);
            struct srec *r = gv_sched_rec_find(s, uid);
            if ((r != NULL && gv_sched_phase_placed(r->phase)) || truth_live(s, t, wall) == NULL)
                continue;
            struct truth o;
            if (truth_get(t, &o))
                gv_warn("accounting drift: pod %s/%s has assignment %s in the API but was not "
                        "counted; placed",
                        o.ns, o.name, o.text);
            gv_sched_apply_truth(s, uid, wall); /* keeps t's key: apply_truth does not delete */
            repairs++;
        }
        done = done || it == NULL || after == NULL;
        pthread_mutex_unlock(&s->lock);
    }
    free(after);

    /* 3. GPUs: the engine's usage against the sum of the recorded
     * placements (which steps 1 and 2 made equal to the API's). */
    char last[GV_ALLOC_NODE_MAX] = "";
    for (bool done = false; !done;) {
        pthread_mutex_lock(&s->lock);
        size_t lo = last[0] != '\0' ? gv_sched_node_after(s, last) : 0;
        size_t hi = lo + CHECK_NODES < s->n_nodes ? lo + CHECK_NODES : s->n_nodes;
        if (lo < hi) {
            repairs += check_nodes(s, lo, hi);
            hi = hi < s->n_nodes ? hi : s->n_nodes;
            if (hi > lo)
                snprintf(last, sizeof(last), "%s", s->nodes[hi - 1]->name);
        }
        done = hi >= s->n_nodes || lo >= hi;
        pthread_mutex_unlock(&s->lock);
    }

    pthread_mutex_lock(&s->lock);
    s->drift_repairs += repairs;
    s->self_checks++;
    pthread_mutex_unlock(&s->lock);
    return repairs;
}

uint64_t gv_sched_drift_repairs(struct gv_sched *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->drift_repairs;
    pthread_mutex_unlock(&s->lock);
    return n;
}
