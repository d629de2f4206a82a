/*
 * What this agent knows about each pod it serves beyond the (possibly
 * lagging) cache, and the writer thread that hands that progress back to
 * the API server as annotations, retried through outages.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc/gv_alloc.h"
#include "common/gv_jalloc.h"
#include "contracts/gpushare.h"
#include "contracts/podspec.h"
#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "interposer/priority.h" /* the node directory's container path, priority range */
#include "node/modes/answer_internal.h"
#include "node/allocate/gv_allocator.h"
#include "node/allocate/gv_direct.h"
#include "node/modes/gv_mode.h"
#include "node/monitor/gv_monitor.h"
#include "node/kubelet/gv_grpc.h"
#include "node/loop/gv_loop.h"
#include "node/allocate/allocate_internal.h"

/* ---- small helpers ------------------------------------------------------ */

/* o[k1][k2] when it is a string, else NULL (pod fields are at most two levels deep here). */
const char *jstr2(json_t *o, const char *k1, const char *k2)
{
    json_t *v = json_object_get(json_object_get(o, k1), k2);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The uid of a cached pod, whichever form the cache keeps it in (gv_allocator_cache_pod). */
const char *cached_uid(json_t *form)
{
    return json_is_string(form) ? json_string_value(form) : jstr2(form, "metadata", "uid");
}

/* uids and container names become path components: allow only what Kubernetes allows. */
bool safe_component(const char *s)
{
    if (s == NULL || *s == '\0' || strlen(s) > 127 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
              (*p >= 'A' && *p <= 'Z') || *p == '_'))
            return false;
    return true;
}

bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

struct pod_state *find_pod(struct gv_allocator *a, const char *uid)
{
    for (struct pod_state *p = a->pods; p; p = p->next)
        if (strcmp(p->uid, uid) == 0)
            return p;
    return NULL;
}

void pod_free(struct pod_state *p)
{
    if (p == NULL)
        return;
    while (p->recs) {
        struct ctr_rec *r = p->recs;
        p->recs = r->next;
        free(r->ids);
        free(r);
    }
    free(p->ns);
    free(p->name);
    free(p->done);
    free(p->message);
    free(p);
}

/* Sets the pod's namespace and name; false when out of memory. */
bool pod_set_name(struct pod_state *p, const char *ns, const char *name)
{
    char *n = strdup(ns), *m = strdup(name);
    if (n == NULL || m == NULL) {
        free(n);
        free(m);
        return false;
    }
    free(p->ns);
    free(p->name);
    p->ns = n;
    p->name = m;
    return true;
}

/* NULL ns: not known (recovered from disk).  NULL when out of memory. */
struct pod_state *get_pod(struct gv_allocator *a, const char *uid, const char *ns,
                                 const char *name)
{
    struct pod_state *p = find_pod(a, uid);
    if (p) {
        if (p->ns == NULL && ns && !pod_set_name(p, ns, name)) /* recovered: now we know its name */
            return NULL;
        return p;
    }
    size_t len = strlen(uid);
    p = calloc(1, sizeof(*p) + len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p->uid, uid, len + 1);
    if (ns && !pod_set_name(p, ns, name)) {
        free(p);
        return NULL;
    }
    p->next = a->pods;
    a->pods = p;
    return p;
}

bool pod_has(const struct pod_state *p, const char *ctr)
{
    return in_list(p->done, ctr) || strcmp(p->inflight, ctr) == 0;
}

/* Records container ctr as served; false when full or out of memory. */
bool pod_add_done(struct pod_state *p, const char *ctr)
{
    size_t old = p->done ? strlen(p->done) : 0, n = strlen(ctr);
    if (p->n_done >= GV_ALLOC_MAX_CONTAINERS || n >= GV_ALLOC_CNAME_MAX)
        return false;
    char *d = realloc(p->done, old + n + 2);
    if (d == NULL)
        return false;
    if (old)
        d[old++] = ',';
    memcpy(d + old, ctr, n + 1);
    p->done = d;
    p->n_done++;
    return true;
}

struct ctr_rec *find_rec(const struct pod_state *p, const char *ctr)
{
    for (struct ctr_rec *r = p ? p->recs : NULL; r; r = r->next)
        if (strcmp(r->ctr, ctr) == 0)
            return r;
    return NULL;
}

/* Sets (replaces) container ctr's record; false when out of memory. */
bool set_rec(struct pod_state *p, const char *ctr, const char *ids, bool answered)
{
    struct ctr_rec *r = find_rec(p, ctr);
    char *d = strdup(ids);
    if (d == NULL)
        return false;
    if (r == NULL) {
        size_t n = strlen(ctr);
        r = calloc(1, sizeof(*r) + n + 1);
        if (r == NULL) {
            free(d);
            return false;
        }
        memcpy(r->ctr, ctr, n + 1);
        r->next = p->recs;
        p->recs = r;
    }
    free(r->ids);
    r->ids = d;
    r->answered = answered;
    r->started = false;
    r->since = gv_loop_now_ms();
    return true;
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/*
 * The identity of a device request: its IDs sorted and comma-joined (the
 * kubelet may list them in any order).  NULL when out of memory.
 */
char *ids_key(const char *const *ids, size_t n)
{
    const char **v = malloc((n + 1) * sizeof(*v));
    size_t len = 1;
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        v[i] = ids[i];
        len += strlen(ids[i]) + 1;
    }
    qsort(v, n, sizeof(*v), cmp_str);
    char *k = malloc(len);
    if (k) {
        k[0] = '\0';
        for (size_t i = 0; i < n; i++) {
            if (i)
                strcat(k, ",");
            strcat(k, v[i]);
        }
    }
    free(v);
    return k;
}

/*
 * Whether device ID id is promised or answered to a live container other
 * than (uid, ctr): the kubelet holds answered IDs until the pod ends, and a
 * promise is an answer on its way, so neither is preferred twice (a
 * kubelet's available list can lag behind its own calls).
 */
bool taken_elsewhere(struct gv_allocator *a, json_t *pods, const char *id, const char *uid,
                            const char *ctr)
{
    for (struct pod_state *p = a->pods; p; p = p->next)
        for (struct ctr_rec *r = p->recs; r; r = r->next)
            if (!p->ended && p->gone_since == 0 && in_list(r->ids, id) && cached(pods, p->uid) &&
                !(strcmp(p->uid, uid) == 0 && strcmp(r->ctr, ctr) == 0))
                return true;
    return false;
}

const struct gv_allocator_gpu *find_gpu(const struct gv_allocator *a, const char *uuid)
{
    for (size_t i = 0; i < a->n_gpus; i++)
        if (strcmp(a->gpus[i].gpu.uuid, uuid) == 0)
            return &a->gpus[i];
    return NULL;
}

/* ---- annotations ---------------------------------------------------------- */

/*
 * Progress annotations are written by one writer thread, off Allocate's
 * path: the kubelet waits for Allocate, nobody waits for the annotation.
 * What a restarted agent must know (which containers were served) is on
 * disk first: the per-container directory is created before the reply.
 */
void record(struct gv_allocator *a, struct pod_state *p, const char *state,
                   const char *message)
{
    pthread_mutex_lock(&a->mu);
    snprintf(p->state, sizeof(p->state), "%s", state);
    free(p->message);
    p->message = message && *message ? strdup(message) : NULL; /* NULL on ENOMEM: no message */
    p->version++;
    p->next_try = 0;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
}

/* Caller holds a->mu; returns with it held.  Writes p's progress as of now. */
static void write_progress(struct gv_allocator *a, struct pod_state *p)
{
    char list[GV_ALLOC_MAX_CONTAINERS * GV_ALLOC_CNAME_MAX] = "";
    char state[16], message[256], path[600];
    snprintf(list, sizeof(list), "%s", p->done ? p->done : "");
    snprintf(state, sizeof(state), "%s", p->state);
    snprintf(message, sizeof(message), "%s", p->message ? p->message : "");
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", p->ns, p->name);
    uint64_t version = p->version;
    p->writing = true;
    pthread_mutex_unlock(&a->mu);
    const char *keys[] = {ANN_ALLOCATION, ANN_CONTAINERS, ANN_MESSAGE};
    const char *vals[] = {state, list, message[0] ? message : NULL};
    struct gv_error err;
    gv_status st = gv_kube_patch_annotations(a->writer, path, NULL, keys, vals, 3, NULL, &err);
    pthread_mutex_lock(&a->mu);
    p->writing = false;
    if (st == GV_OK || st == GV_ENOTFOUND) { /* a deleted pod needs no progress */
        if (p->attempts)
            gv_info("pod %s/%s: allocation %s recorded after %u retries", p->ns, p->name, state,
                    p->attempts);
        p->written = version;
        p->attempts = 0;
    } else {
        int64_t delay = 250LL << (p->attempts < 7 ? p->attempts : 7); /* up to 32 s */
        p->attempts++;
        p->next_try = gv_loop_now_ms() + delay;
        gv_warn("pod %s/%s: cannot record allocation %s (retry in %lld ms): %s", p->ns, p->name,
                state, (long long)delay, err.msg);
    }
}

static bool needs_write(const struct pod_state *p)
{
    return p->version != p->written && p->gone_since == 0 && p->ns;
}

void *writer_main(void *arg)
{
    struct gv_allocator *a = arg;
    pthread_mutex_lock(&a->mu);
    while (!a->quit) {
        struct pod_state *todo = NULL;
        int64_t now = gv_loop_now_ms(), wake = INT64_MAX;
        for (struct pod_state *p = a->pods; p; p = p->next) {
            if (!needs_write(p))
                continue;
            if (p->next_try <= now) {
                todo = p;
                break;
            }
            if (p->next_try < wake)
                wake = p->next_try;
        }
        if (todo) {
            write_progress(a, todo);
            continue;
        }
        if (wake == INT64_MAX) {
            pthread_cond_wait(&a->changed, &a->mu);
        } else {
            struct timespec ts;
            gv_loop_abstime(&ts, wake - now);
            pthread_cond_timedwait(&a->changed, &a->mu, &ts);
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}
