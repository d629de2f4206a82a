/* Allocate from the scheduler's assignment: see gv_allocator.h. */
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
#include "node/answer_internal.h"
#include "node/gv_allocator.h"
#include "node/gv_direct.h"
#include "node/gv_mode.h"
#include "node/gv_monitor.h"
#include "node/gv_grpc.h"
#include "node/gv_loop.h"

#define ANN_ASSIGNMENT GV_ALLOC_ASSIGNMENT_ANNOTATION
#define ANN_ASSIGNED_AT "gpuvisor.io/assigned-at"
#define ANN_ALLOCATION "gpuvisor.io/allocation"
#define ANN_MESSAGE "gpuvisor.io/allocation-message"
#define ANN_CONTAINERS "gpuvisor.io/allocated-containers"
#define ANN_PRELOAD "gpuvisor.io/preload"

/*
 * What this agent knows about a pod beyond the (possibly lagging) cache.
 * One per pod served since its last GC, so strings are sized to their
 * content rather than to their maximum (a fixed-size record was 2.3 KiB).
 */
/*
 * One container's Allocate record (docs/node-agent.md, "Allocate state
 * machine"): promised (GetPreferredAllocation chose these IDs for it) or
 * answered (the answer is on disk and a repeat of the same IDs gets it
 * again, until the pod's status shows the container created).
 */
struct ctr_rec {
    struct ctr_rec *next;
    char *ids;     /* the device IDs, sorted, comma-joined (ids_key) */
    bool answered; /* false: promised */
    int64_t since; /* monotonic ms of the promise; 0: recovered from disk (older than any) */
    bool started;  /* the kubelet created the container: it had the answer */
    char ctr[];
};

struct pod_state {
    struct pod_state *next;
    char *ns, *name;           /* NULL until known (recovered from disk) */
    char *done;                /* containers served, comma-separated; NULL: none */
    size_t n_done;
    char inflight[GV_ALLOC_CNAME_MAX];
    bool all_done;
    struct ctr_rec *recs;      /* promises and answers of its containers */
    unsigned n_total;          /* containers in its assignment (0: not known yet) */
    bool ended;                /* deleted or finished, as the pod cache last showed it */
    bool recovered;            /* answers read from disk: compare with the annotations once */
    uint64_t version, written; /* progress changes / the last one the API took */
    bool writing;              /* the writer thread is sending it (GC must wait) */
    unsigned attempts;         /* failed writes in a row */
    int64_t next_try;          /* monotonic ms of the next attempt */
    char state[16];
    char *message;             /* NULL when none */
    int64_t gone_since;        /* monotonic ms the cache stopped showing it; 0 while present */
    char uid[];
};

struct gv_allocator {
    struct gv_allocator_config cfg;
    char *node, *state_dir, *host_state_dir, *install_dir;
    char node_dir[4096], host_node_dir[4096]; /* the node-wide priority directory, both views */
    struct gv_kube_client *kube;
    struct gv_kube_client *writer;
    struct gv_informer *pods_inf;
    struct gv_jzone *pending_zone; /* the cache's forms of pods that may be admitted */
    json_t *fixed_pods; /* tests/fuzzing: the pod list instead of the informer's */
    pthread_mutex_t mu; /* guards everything below; never held across I/O */
    pthread_cond_t changed;
    uint64_t generation; /* bumped by every cache event */
    struct pod_state *pods;
    struct gv_allocator_gpu *gpus;
    size_t n_gpus;
    bool cdi;
    char cdi_kind[128];
    /* nvidiaRuntime false: the driver's files found on the host (gv_direct.h); else NULL */
    struct gv_cdi_host *direct;
    char core_policy[16];
    char libcuda_log_level[8];
    char resource_name[128];
    struct gv_modes *modes;     /* the modes' states (borrowed from cfg, or own_modes) */
    struct gv_modes *own_modes; /* made here when the caller gave none (tests) */
    /* the writer thread: progress annotations, retried through API outages */
    pthread_t writer_thread;
    bool writer_running, quit;
    struct gv_allocator_stats stats;
};

static bool cached(json_t *pods, const char *uid);
static void observe(struct gv_allocator *a, json_t *pod);

/* ---- small helpers ------------------------------------------------------ */

/* o[k1][k2] when it is a string, else NULL (pod fields are at most two levels deep here). */
static const char *jstr2(json_t *o, const char *k1, const char *k2)
{
    json_t *v = json_object_get(json_object_get(o, k1), k2);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The uid of a cached pod, whichever form the cache keeps it in (gv_allocator_cache_pod). */
static const char *cached_uid(json_t *form)
{
    return json_is_string(form) ? json_string_value(form) : jstr2(form, "metadata", "uid");
}

/* uids and container names become path components: allow only what Kubernetes allows. */
static bool safe_component(const char *s)
{
    if (s == NULL || *s == '\0' || strlen(s) > 127 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
              (*p >= 'A' && *p <= 'Z') || *p == '_'))
            return false;
    return true;
}

static bool in_list(const char *list, const char *name)
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

static struct pod_state *find_pod(struct gv_allocator *a, const char *uid)
{
    for (struct pod_state *p = a->pods; p; p = p->next)
        if (strcmp(p->uid, uid) == 0)
            return p;
    return NULL;
}

static void pod_free(struct pod_state *p)
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
static bool pod_set_name(struct pod_state *p, const char *ns, const char *name)
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
static struct pod_state *get_pod(struct gv_allocator *a, const char *uid, const char *ns,
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

static bool pod_has(const struct pod_state *p, const char *ctr)
{
    return in_list(p->done, ctr) || strcmp(p->inflight, ctr) == 0;
}

/* Records container ctr as served; false when full or out of memory. */
static bool pod_add_done(struct pod_state *p, const char *ctr)
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

static struct ctr_rec *find_rec(const struct pod_state *p, const char *ctr)
{
    for (struct ctr_rec *r = p ? p->recs : NULL; r; r = r->next)
        if (strcmp(r->ctr, ctr) == 0)
            return r;
    return NULL;
}

/* Sets (replaces) container ctr's record; false when out of memory. */
static bool set_rec(struct pod_state *p, const char *ctr, const char *ids, bool answered)
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
static char *ids_key(const char *const *ids, size_t n)
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
static bool taken_elsewhere(struct gv_allocator *a, json_t *pods, const char *id, const char *uid,
                            const char *ctr)
{
    for (struct pod_state *p = a->pods; p; p = p->next)
        for (struct ctr_rec *r = p->recs; r; r = r->next)
            if (!p->ended && p->gone_since == 0 && in_list(r->ids, id) && cached(pods, p->uid) &&
                !(strcmp(p->uid, uid) == 0 && strcmp(r->ctr, ctr) == 0))
                return true;
    return false;
}

static const struct gv_allocator_gpu *find_gpu(const struct gv_allocator *a, const char *uuid)
{
    for (size_t i = 0; i < a->n_gpus; i++)
        if (strcmp(a->gpus[i].gpu.uuid, uuid) == 0)
            return &a->gpus[i];
    return NULL;
}

/* ---- the answer's visible devices (answer.c builds the rest) ---------------- */

/*
 * Visible devices: CDI names when configured, else NVIDIA_VISIBLE_DEVICES;
 * without the NVIDIA runtime, device nodes and driver mounts (gv_direct.h).
 * False with why when the direct answer cannot be given.
 */
static bool add_visible(struct gv_allocator *a, struct gv_mode_answer *b, char uuids[][GV_ALLOC_UUID_MAX],
                        size_t n, char *why, size_t why_cap)
{
    if (n == 0)
        return true;
    pthread_mutex_lock(&a->mu);
    if (a->direct) {
        bool ok = gv_direct_answer(a->direct, a->gpus, a->n_gpus, uuids, n, b, why, why_cap);
        pthread_mutex_unlock(&a->mu);
        return ok;
    }
    bool cdi = a->cdi;
    char kind[128];
    snprintf(kind, sizeof(kind), "%s", a->cdi_kind);
    pthread_mutex_unlock(&a->mu);
    if (cdi) {
        for (size_t i = 0; i < n; i++)
            gv_answer_cdi(b, kind, uuids[i]);
        return true;
    }
    char list[GV_ALLOC_MAX_DEVICES * GV_ALLOC_UUID_MAX + 16] = "";
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(list, ",");
        strcat(list, uuids[i]);
    }
    gv_answer_env(b, "NVIDIA_VISIBLE_DEVICES", list, false);
    return true;
}

/* ---- annotations ---------------------------------------------------------- */

/*
 * Progress annotations are written by one writer thread, off Allocate's
 * path: the kubelet waits for Allocate, nobody waits for the annotation.
 * What a restarted agent must know (which containers were served) is on
 * disk first: the per-container directory is created before the reply.
 */
static void record(struct gv_allocator *a, struct pod_state *p, const char *state,
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

static void *writer_main(void *arg)
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

/* ---- choosing the pod ----------------------------------------------------- */

struct candidate {
    json_t *pod;
    struct gv_alloc_assignment asg;
    size_t next; /* container index in asg */
};

struct choice {
    struct candidate best;
    bool found;
    bool by_promise;        /* matched by the IDs GetPreferredAllocation promised */
    size_t n_mismatch;      /* pods whose next container wants another device count */
    char mismatch[256];
    size_t n_bad;
    json_t *bad[8];         /* malformed pods (new references) */
    char bad_msg[8][GV_ERROR_MSG_MAX];
};

static const char *order_key(json_t *pod)
{
    const char *k = gv_podspec_annotation(pod, ANN_ASSIGNED_AT);
    return k ? k : jstr2(pod, "metadata", "creationTimestamp");
}

static bool earlier(json_t *x, const char *kx, json_t *y, const char *ky)
{
    int c = strcmp(kx ? kx : "", ky ? ky : "");
    if (c != 0)
        return c < 0;
    c = strcmp(jstr2(x, "metadata", "namespace") ? jstr2(x, "metadata", "namespace") : "",
               jstr2(y, "metadata", "namespace") ? jstr2(y, "metadata", "namespace") : "");
    if (c != 0)
        return c < 0;
    return strcmp(jstr2(x, "metadata", "name"), jstr2(y, "metadata", "name")) < 0;
}

/*
 * What the pod says about itself: it has an assignment and is not deleted,
 * finished, or done with allocation.  Only such a pod can be the one being
 * admitted, so only such a pod needs more than its identity in the cache.
 */
static bool may_be_admitted(json_t *pod)
{
    const char *phase = jstr2(pod, "status", "phase");
    const char *progress = gv_podspec_annotation(pod, ANN_ALLOCATION);
    if (!gv_podspec_annotation(pod, ANN_ASSIGNMENT) ||
        json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"))
        return false;
    if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
        return false;
    return !(progress && (strcmp(progress, "success") == 0 || strcmp(progress, "failed") == 0));
}

struct light {
    json_t *pod;
    struct pod_state *state; /* NULL: not served yet */
    const char *order;
};

static int light_cmp(const void *x, const void *y)
{
    const struct light *a = x, *b = y;
    if (a->pod == b->pod)
        return 0;
    return earlier(a->pod, a->order, b->pod, b->order) ? -1 : 1;
}

/* Decodes the pod's assignment into c and checks it against this node. */
static gv_status decode_cand(struct gv_allocator *a, json_t *pod, struct candidate *c,
                             struct gv_error *err)
{
    const char *uid = jstr2(pod, "metadata", "uid");
    const char *text = gv_podspec_annotation(pod, ANN_ASSIGNMENT);
    memset(c, 0, sizeof(*c));
    c->pod = pod;
    gv_status st = gv_alloc_assignment_decode(text, strlen(text), &c->asg, err);
    if (st == GV_OK && strcmp(c->asg.node, a->node) != 0)
        st = gv_error_set(err, GV_EINVAL, "assignment is for node '%s', not '%s'", c->asg.node,
                          a->node);
    if (st == GV_OK) /* only placements gpuvisor wrote, opt-outs the admin allows */
        st = gv_placement_admit(a->cfg.placement, pod, err);
    for (size_t k = 0; st == GV_OK && k < c->asg.n_containers; k++) {
        if (!safe_component(c->asg.containers[k].name))
            st = gv_error_set(err, GV_EINVAL, "container name '%s' is not valid",
                              c->asg.containers[k].name);
        for (size_t d = 0; st == GV_OK && d < c->asg.containers[k].n_devices; d++)
            if (!find_gpu(a, c->asg.containers[k].devices[d].uuid))
                st = gv_error_set(err, GV_ENOTFOUND,
                                  "assigned GPU %s is not advertised on node %s "
                                  "(absent, excluded or MIG-enabled)",
                                  c->asg.containers[k].devices[d].uuid, a->node);
    }
    if (st == GV_OK && !safe_component(uid))
        st = gv_error_set(err, GV_EINVAL, "pod uid '%s' is not valid", uid);
    return st;
}

/* Index of the container to serve in c (want: that one, else the first not yet served); n when none. */
static size_t pending_index(json_t *pod, const struct pod_state *ps, const struct candidate *c,
                            const char *want)
{
    const char *listed = gv_podspec_annotation(pod, ANN_CONTAINERS);
    for (size_t k = 0; k < c->asg.n_containers; k++) {
        const char *cn = c->asg.containers[k].name;
        bool served = in_list(listed, cn) || (ps && pod_has(ps, cn));
        if (want ? strcmp(cn, want) == 0 && !served : !served)
            return k;
        if (want && strcmp(cn, want) == 0)
            break;
    }
    return c->asg.n_containers;
}

/*
 * When ctr's live promise was made (0: recovered), -1 when it has none;
 * -2 when the kubelet holds its IDs (some are missing from avail, the
 * kubelet's available list: a preference it took, Allocate on its way).
 */
static int64_t live_promise(const struct pod_state *ps, const char *ctr, const char *const *avail,
                            size_t n_avail)
{
    const struct ctr_rec *r = find_rec(ps, ctr);
    if (r == NULL || r->answered)
        return -1;
    for (const char *c = avail ? r->ids : NULL; c && *c;) {
        const char *e = strchr(c, ',');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        bool in = false;
        for (size_t i = 0; i < n_avail && !in; i++)
            in = strlen(avail[i]) == len && strncmp(avail[i], c, len) == 0;
        if (!in)
            return -2;
        c = e ? e + 1 : NULL;
    }
    return r->since;
}

/*
 * Caller holds a->mu.  Scans the cache snapshot for the pod being admitted:
 * cheap filters first, then assignments decoded oldest first.  key (the
 * request's IDs, NULL from GetPreferredAllocation): the container these IDs
 * were promised to wins; otherwise the oldest pending container asking
 * n_ids GPUs that no other request was promised, else the one promised
 * longest ago.  avail (GetPreferredAllocation: the kubelet's available
 * IDs): a container whose promised IDs the kubelet holds is not chosen
 * again.  A call costs one decode in the common case however many pods the
 * node has.
 */
static void choose(struct gv_allocator *a, json_t *pods, size_t n_ids, const char *key,
                   const char *const *avail, size_t n_avail, struct choice *ch)
{
    size_t i, n = 0;
    json_t *pod;
    struct light *cand = malloc((json_array_size(pods) + 1) * sizeof(*cand));
    if (cand == NULL)
        return;
    json_array_foreach(pods, i, pod) {
        const char *uid = jstr2(pod, "metadata", "uid");
        const char *node = jstr2(pod, "spec", "nodeName");
        if (!uid || !jstr2(pod, "metadata", "namespace") || !jstr2(pod, "metadata", "name") || !node ||
            strcmp(node, a->node) != 0 || !may_be_admitted(pod))
            continue;
        struct pod_state *ps = find_pod(a, uid);
        if (ps && (ps->all_done || strcmp(ps->state, "failed") == 0))
            continue;
        cand[n++] = (struct light){pod, ps, order_key(pod)};
    }
    qsort(cand, n, sizeof(*cand), light_cmp);
    /* the container these exact IDs were promised to */
    const struct pod_state *promised = NULL;
    const char *promised_ctr = NULL;
    for (struct pod_state *p = a->pods; key && p && !promised; p = p->next)
        for (struct ctr_rec *r = p->recs; r && !promised; r = r->next)
            if (!r->answered && !p->ended && strcmp(r->ids, key) == 0) {
                promised = p;
                promised_ctr = r->ctr;
            }
    /*
     * Else the fitting container promised longest ago: a promise the
     * kubelet never used (its admission was cut short) is the likeliest to
     * be asked for again, a fresh one is about to be used.
     */
    ssize_t fallback = -1;
    int64_t fallback_since = INT64_MAX;
    struct candidate *c = &ch->best;
    for (int pass = promised ? 0 : 1; pass < 3 && !ch->found; pass++) {
        for (size_t j = 0; j < n && !ch->found; j++) {
            pod = cand[j].pod;
            struct pod_state *ps = cand[j].state;
            if (pass == 0 && ps != promised)
                continue;
            if (pass == 2 && (ssize_t)j != fallback)
                continue;
            struct gv_error err;
            if (decode_cand(a, pod, c, &err) != GV_OK) {
                if (pass == 1 && ch->n_bad < 8) {
                    ch->bad[ch->n_bad] = json_incref(pod);
                    snprintf(ch->bad_msg[ch->n_bad], sizeof(ch->bad_msg[0]), "%s", err.msg);
                    ch->n_bad++;
                }
                continue;
            }
            c->next = pending_index(pod, ps, c, pass == 0 ? promised_ctr : NULL);
            if (c->next == c->asg.n_containers)
                continue;
            if (c->asg.containers[c->next].n_devices != n_ids) {
                if (pass == 1 && ch->n_mismatch++ == 0)
                    snprintf(ch->mismatch, sizeof(ch->mismatch),
                             "pod %s/%s container %s is assigned %u GPU(s)",
                             jstr2(pod, "metadata", "namespace"), jstr2(pod, "metadata", "name"),
                             c->asg.containers[c->next].name, c->asg.containers[c->next].n_devices);
                continue;
            }
            int64_t since =
                pass == 1 ? live_promise(ps, c->asg.containers[c->next].name, avail, n_avail) : -1;
            if (since == -2)
                continue; /* the kubelet is admitting it with the promised IDs */
            if (since >= 0) {
                if (since < fallback_since) {
                    fallback = (ssize_t)j;
                    fallback_since = since;
                }
                continue;
            }
            ch->found = true;
            ch->by_promise = pass == 0;
        }
        if (pass == 1 && fallback < 0)
            break;
    }
    free(cand);
}

static void choice_release(struct choice *ch)
{
    for (size_t i = 0; i < ch->n_bad; i++)
        json_decref(ch->bad[i]);
    ch->n_bad = 0;
}

/* ---- Allocate ----------------------------------------------------------------- */

/* IDs are "<gpu uuid>::<slice>" (or the bare uuid in exclusive mode). */
static bool id_to_uuid(const char *id, char *uuid, size_t cap)
{
    const char *sep = strstr(id, "::");
    size_t n = sep ? (size_t)(sep - id) : strlen(id);
    if (n == 0 || n >= cap)
        return false;
    memcpy(uuid, id, n);
    uuid[n] = '\0';
    return true;
}

static int fail(char *msg, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *msg, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, cap, "gpuvisor: ");
    vsnprintf(msg + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
    gv_warn("Allocate refused: %s", msg);
    return code;
}

/*
 * CUDA_TASK_PRIORITY set as a literal in the container's env (HAMi's
 * documented way to ask for a priority), -1 when absent or not a number.
 * The limits file is the interposer's only source once it exists, so the
 * agent must carry this over or the pod silently loses its priority.
 */
static int env_priority(json_t *pod, const char *ctr)
{
    json_t *c, *e;
    size_t i, j;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c) {
        if (!json_is_string(json_object_get(c, "name")) ||
            strcmp(json_string_value(json_object_get(c, "name")), ctr) != 0)
            continue;
        json_array_foreach(json_object_get(c, "env"), j, e) {
            json_t *n = json_object_get(e, "name"), *v = json_object_get(e, "value");
            if (!json_is_string(n) || strcmp(json_string_value(n), "CUDA_TASK_PRIORITY") != 0)
                continue;
            const char *s = json_string_value(v);
            char *end;
            errno = 0;
            long p = s ? strtol(s, &end, 10) : -1;
            if (!s || end == s || *end || errno || p < 0) {
                gv_warn("pod %s container %s: env CUDA_TASK_PRIORITY=\"%s\" is not an integer >= 0;"
                        " ignored", jstr2(pod, "metadata", "name"), ctr, s ? s : "(not a literal)");
                return -1;
            }
            return p > INT32_MAX ? INT32_MAX : (int)p;
        }
    }
    return -1;
}

/*
 * The container's priority (HAMi: 0 high, 1 low), -1 when unset:
 * nvidia.com/priority, else a literal CUDA_TASK_PRIORITY in its env.
 * Levels past the interposer's lowest are that lowest level: the
 * interposer refuses to start on an out-of-range value.
 */
static int container_priority(struct gv_allocator *a, json_t *pod, const char *ctr)
{
    int prio = -1;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    char res[128];
    pthread_mutex_lock(&a->mu);
    snprintf(res, sizeof(res), "%s", a->resource_name);
    pthread_mutex_unlock(&a->mu);
    cfg.res.gpu = res;
    struct gv_alloc_request *req = NULL;
    struct gv_error err;
    if (gv_podspec_request(&cfg, pod, &req, &err) != GV_OK) {
        gv_warn("pod %s: cannot read container resources (%s): no CUDA_TASK_PRIORITY",
                jstr2(pod, "metadata", "name"), err.msg);
        return -1;
    }
    for (uint32_t i = 0; i < req->n_containers; i++)
        if (strcmp(req->containers[i].name, ctr) == 0)
            prio = req->containers[i].priority;
    gv_alloc_request_free(req);
    if (prio < 0)
        prio = env_priority(pod, ctr);
    if (prio > GV_IPCFG_MAX_PRIORITY) {
        gv_warn("pod %s container %s: priority %d is past the lowest level; using %d",
                jstr2(pod, "metadata", "name"), ctr, prio, GV_IPCFG_MAX_PRIORITY);
        prio = GV_IPCFG_MAX_PRIORITY;
    }
    return prio;
}

/* ALIYUN_COM_GPU_MEM_* for a container asking for aliyun.com/gpu-mem. */
static void add_gpushare_env(struct gv_allocator *a, struct gv_mode_answer *b, json_t *pod,
                             const struct gv_alloc_container_assign *c)
{
    unsigned idx[GV_ALLOC_MAX_DEVICES];
    uint64_t dev_mib = 0;
    pthread_mutex_lock(&a->mu);
    for (uint32_t i = 0; i < c->n_devices; i++) {
        const struct gv_allocator_gpu *g = find_gpu(a, c->devices[i].uuid);
        idx[i] = g ? g->gpu.index : 0;
        if (i == 0 && g)
            dev_mib = g->gpu.memory_mib;
    }
    pthread_mutex_unlock(&a->mu);
    struct gv_gpushare_env env[GV_GPUSHARE_ENV_COUNT];
    size_t n = gv_gpushare_env(pod, c->name, idx, c->n_devices, dev_mib, env);
    for (size_t i = 0; i < n; i++)
        gv_answer_env(b, env[i].key, env[i].value, false);
}

/* Whether a unit's mode can answer pods gpuvisor did not schedule (from the IDs). */
static bool plain_unit(const struct gv_allocator_gpu *g)
{
    const struct gv_mode *m = gv_mode_get(g->settings.mode);
    return m && (!(m->flags & GV_MODE_NEEDS_ASSIGNMENT) || g->from_ids);
}

/* Whether a unit is a device for VMs (GV_MODE_NO_ASSIGNMENT): never matched to a pod. */
static bool vm_unit(const struct gv_allocator_gpu *g)
{
    const struct gv_mode *m = gv_mode_get(g->settings.mode);
    return m && (m->flags & GV_MODE_NO_ASSIGNMENT);
}

/*
 * The interposer's part of an answer (a mode asked for it): library,
 * preload, runtime and node directories, the limits file, priority and
 * core policy.  Two host directories: what the container may write
 * (runtime dir) and what it may only read (limits file); one directory for
 * both let the tenant rewrite its limits through the writable mount.
 */
static void add_interposer(struct gv_allocator *a, struct gv_mode_answer *b, json_t *pod,
                           const char *uid, const char *ctr)
{
    char val[64];
    gv_answer_env(b, "CUDA_DEVICE_MEMORY_SHARED_CACHE", GV_NODE_CONTAINER_PATH "/shared.cache", true);
    int prio = container_priority(a, pod, ctr);
    if (prio >= 0) {
        snprintf(val, sizeof(val), "%d", prio);
        gv_answer_env(b, "CUDA_TASK_PRIORITY", val, true);
    }
    pthread_mutex_lock(&a->mu);
    char policy[16], loglevel[8];
    snprintf(policy, sizeof(policy), "%s", a->core_policy);
    snprintf(loglevel, sizeof(loglevel), "%s", a->libcuda_log_level);
    pthread_mutex_unlock(&a->mu);
    if (policy[0])
        gv_answer_env(b, "GPU_CORE_UTILIZATION_POLICY", policy, true);
    if (loglevel[0]) /* HAMi's libcudaloglevel (node config) */
        gv_answer_env(b, "LIBCUDA_LOG_LEVEL", loglevel, false); /* not a limit */
    char host[4096], host_file[4200], lib[4096], preload[4096];
    snprintf(host, sizeof(host), "%s/containers/%s/%s", a->host_state_dir, uid, ctr);
    snprintf(host_file, sizeof(host_file), "%s/limits/%s/%s/limits.env", a->host_state_dir, uid,
             ctr);
    snprintf(lib, sizeof(lib), "%s/lib/libgpuvisor.so", a->install_dir);
    snprintf(preload, sizeof(preload), "%s/ld.so.preload", a->install_dir);
    gv_answer_mount(b, lib, GV_NODE_LIB_PATH, true);
    const char *opt = gv_podspec_annotation(pod, ANN_PRELOAD);
    if (!(opt && strcmp(opt, "false") == 0))
        gv_answer_mount(b, preload, GV_NODE_PRELOAD_PATH, true);
    gv_answer_mount(b, host, GV_NODE_CONTAINER_PATH, false);
    /* the region as a mount of its own: writable, but it cannot be unlinked
     * or renamed inside the container (make_region) */
    char region[4300];
    snprintf(region, sizeof(region), "%s/shared.cache", host);
    gv_answer_mount(b, region, GV_NODE_CONTAINER_PATH "/shared.cache", false);
    gv_answer_mount(b, host_file, GV_NODE_LIMITS_PATH, true);
    gv_answer_mount(b, a->host_node_dir, GV_PRIO_DEFAULT_DIR, false);
}

/*
 * Builds the response for container c of the chosen pod, or (pod and c
 * NULL) for a pod gpuvisor did not schedule, from the kubelet's IDs alone.
 * The container's units are grouped by mode and each mode adds its part
 * (gv_mode.h); the visible devices and the interposer are common.
 */
static int build(struct gv_allocator *a, json_t *pod, const struct gv_alloc_container_assign *c,
                 char uuids[][GV_ALLOC_UUID_MAX], size_t n_ids,
                 V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap)
{
    const char *uid = pod ? jstr2(pod, "metadata", "uid") : "";
    const char *ctr = c ? c->name : "";
    size_t n = c ? c->n_devices : n_ids;
    struct gv_mode_alloc *grp = calloc(GV_INVENTORY_MODE_COUNT, sizeof(*grp));
    if (grp == NULL)
        return fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    int code = GV_GRPC_OK;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n && code == GV_GRPC_OK; i++) {
        const char *u = c ? c->devices[i].uuid : uuids[i];
        const struct gv_allocator_gpu *g = find_gpu(a, u);
        if (g == NULL || gv_mode_get(g->settings.mode) == NULL || (c && !g->gpu.healthy)) {
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                        "GPU %s assigned to container %s is not healthy on this node", u, ctr);
            break;
        }
        struct gv_mode_alloc *m = &grp[g->settings.mode];
        size_t k = c ? m->n : 0; /* with an assignment every device is its own entry */
        while (k < m->n && strcmp(m->units[k].gpu.uuid, u) != 0)
            k++;
        if (k < m->n) { /* more replicas of a unit already listed (no assignment) */
            m->ids[k]++;
            continue;
        }
        m->units[m->n] = *g;
        m->idx[m->n] = (unsigned)i;
        m->ids[m->n++] = 1;
    }
    pthread_mutex_unlock(&a->mu);
    struct gv_mode_answer *b = calloc(1, sizeof(*b));
    if (code == GV_GRPC_OK && b == NULL)
        code = fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    if (b) {
        b->r = resp;
    }
    size_t n_units = 0;
    for (int id = 0; id < GV_INVENTORY_MODE_COUNT; id++)
        n_units += grp[id].n;
    for (int id = 0; id < GV_INVENTORY_MODE_COUNT && code == GV_GRPC_OK; id++) {
        struct gv_mode_alloc *m = &grp[id];
        if (m->n == 0)
            continue;
        m->n_request = n;
        m->n_units = n_units;
        const struct gv_mode *md = gv_mode_get((enum gv_inventory_mode)id);
        m->env = gv_modes_env(a->modes);
        m->pod = pod;
        m->c = c;
        m->uid = uid;
        m->ctr = ctr;
        m->answer = b;
        char why[512] = "";
        int mc = md->allocate(gv_modes_state(a->modes, (enum gv_inventory_mode)id), m, why,
                              sizeof(why));
        if (mc != GV_GRPC_OK)
            code = fail(msg, cap, mc, "container %s: %s", ctr[0] ? ctr : "(no assignment)", why);
    }
    free(grp);
    if (code == GV_GRPC_OK && b->interposer && pod == NULL)
        code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                    "the interposer needs a pod scheduled by gpuvisor-scheduler");
    if (code == GV_GRPC_OK) {
        char why[512] = "";
        if (!add_visible(a, b, b->visible, b->n_visible, why, sizeof(why)))
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION, "%s", why);
        if (pod && c)
            add_gpushare_env(a, b, pod, c); /* Aliyun gpushare's env, when asked for */
        if (b->interposer)
            add_interposer(a, b, pod, uid, ctr);
        if (b->oom)
            code = fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (code == GV_GRPC_OK && pod) {
        struct gv_error err;
        gv_status st = gv_ctr_prepare(a->state_dir, a->node_dir, uid, ctr, b->interposer, b->limits, b->limits_len, &err);
        if (st == GV_OK) /* on /metrics from now on, before its first CUDA call */
            gv_monitor_note_allocate(a->state_dir, pod, c, b->interposer, b->limits,
                                     b->limits_len);
        else
            code = fail(msg, cap, GV_GRPC_INTERNAL, "container %s: %s", ctr, err.msg);
    }
    if (b)
        free(b->limits);
    free(b);
    return code;
}

static void mark_bad(struct gv_allocator *a, struct choice *ch)
{
    for (size_t i = 0; i < ch->n_bad; i++) {
        const char *uid = jstr2(ch->bad[i], "metadata", "uid");
        pthread_mutex_lock(&a->mu);
        struct pod_state *p = get_pod(a, uid, jstr2(ch->bad[i], "metadata", "namespace"),
                                      jstr2(ch->bad[i], "metadata", "name"));
        pthread_mutex_unlock(&a->mu);
        if (p)
            record(a, p, "failed", ch->bad_msg[i]);
    }
}

/* A device ID as we advertise them: <uuid> or <uuid>::<slice>; nothing else reaches a record. */
static bool id_wellformed(const char *id)
{
    if (!gv_ctr_value_ok(id, "-_.:/") || strlen(id) >= 64)
        return false;
    const char *sep = strstr(id, "::");
    return sep == NULL ? strchr(id, ':') == NULL
                       : sep[2] && strspn(sep + 2, "0123456789") == strlen(sep + 2) &&
                             memchr(id, ':', (size_t)(sep - id)) == NULL;
}

/*
 * A repeat of a request already answered (the kubelet, or a kubelet
 * restarted with the agent, asks again after the reply was lost): the same
 * IDs, a pod still alive and a container not created yet.  Caller holds
 * a->mu; copies the pod's uid and the container's name out.
 */
static bool find_replay(struct gv_allocator *a, json_t *pods, const char *key, char *uid,
                        size_t ucap, char *ctr, size_t ccap)
{
    for (struct pod_state *p = a->pods; p; p = p->next)
        for (struct ctr_rec *r = p->recs; r; r = r->next)
            if (r->answered && !r->started && !p->ended && p->gone_since == 0 &&
                strcmp(r->ids, key) == 0 && cached(pods, p->uid)) {
                snprintf(uid, ucap, "%s", p->uid);
                snprintf(ctr, ccap, "%s", r->ctr);
                return true;
            }
    return false;
}

static int replay(struct gv_allocator *a, const char *uid, const char *ctr,
                  V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap)
{
    char *text;
    struct gv_ctr_rec r;
    struct gv_error err;
    if (!gv_ctr_read_rec(a->state_dir, uid, ctr, "answer", &text, &r))
        return fail(msg, cap, GV_GRPC_INTERNAL, "pod %s container %s: the answer record is gone",
                    uid, ctr);
    gv_status st = gv_ctr_load_answer(&r, resp, &err);
    char path[4200];
    /* the mount sources must exist again (someone may have removed them) */
    if (st == GV_OK && resp->n_mounts)
        st = gv_ctr_dir(a->state_dir, "containers", uid, ctr, path, sizeof(path), &err);
    if (st == GV_OK && resp->n_mounts)
        st = gv_ctr_shared_dir(a->node_dir, &err);
    if (st != GV_OK) {
        free(text);
        return fail(msg, cap, GV_GRPC_INTERNAL, "pod %s/%s container %s: %s", r.ns, r.name, ctr,
                    err.msg);
    }
    pthread_mutex_lock(&a->mu);
    a->stats.replays++;
    pthread_mutex_unlock(&a->mu);
    gv_info("Allocate: repeated request for pod %s/%s container %s (%s): the same answer again",
            r.ns, r.name, ctr, r.ids);
    free(text);
    return GV_GRPC_OK;
}

/* Whether the kubelet's IDs name exactly the GPUs of the assignment (as a multiset). */
static bool ids_match_assignment(char uuids[][GV_ALLOC_UUID_MAX], size_t n,
                                 const struct gv_alloc_container_assign *c)
{
    bool used[GV_ALLOC_MAX_DEVICES] = {false};
    for (uint32_t d = 0; d < c->n_devices; d++) {
        bool hit = false;
        for (size_t i = 0; i < n && !hit; i++)
            if (!used[i] && strcmp(uuids[i], c->devices[d].uuid) == 0)
                hit = used[i] = true;
        if (!hit)
            return false;
    }
    return true;
}

/*
 * When waiting for the cache ends (monotonic ms): none for plain GPUs (pods
 * gpuvisor did not schedule are answered at once) or fixed pod lists; else
 * --allocate-wait-ms, after waiting for the first list.
 */
static int64_t cache_deadline(struct gv_allocator *a, bool plain)
{
    int64_t deadline = gv_loop_now_ms() + (plain || a->fixed_pods ? 0 : a->cfg.wait_ms);
    if (!plain && a->pods_inf)
        gv_informer_wait_synced(a->pods_inf, a->cfg.wait_ms);
    return deadline;
}

/* The pods as the cache shows them now (new reference; NULL when out of memory). */
static json_t *snapshot(struct gv_allocator *a)
{
    return a->fixed_pods ? json_incref(a->fixed_pods) : gv_informer_list(a->pods_inf);
}

/*
 * Caller holds a->mu.  Sleeps until the pod cache changes (the generation
 * moves on from gen) or the deadline (monotonic ms); false when there is no
 * time left to wait.  The kubelet can be a few ms ahead of our watch.
 */
static bool wait_for_cache(struct gv_allocator *a, uint64_t gen, int64_t deadline)
{
    int64_t left = deadline - gv_loop_now_ms();
    if (left <= 0 || a->quit)
        return false;
    struct timespec ts;
    gv_loop_abstime(&ts, left);
    while (a->generation == gen && !a->quit)
        if (pthread_cond_timedwait(&a->changed, &a->mu, &ts) != 0)
            break;
    return true;
}

static int allocate(struct gv_allocator *a, const char *const *ids, size_t n_ids,
                    V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap,
                    struct choice *ch, char *key)
{
    int64_t t_start = gv_loop_now_us();
    char uuids[GV_ALLOC_MAX_DEVICES][GV_ALLOC_UUID_MAX];
    if (n_ids == 0 || n_ids > GV_ALLOC_MAX_DEVICES)
        return fail(msg, cap, GV_GRPC_INVALID_ARGUMENT, "Allocate asks for %zu devices (1..%d)",
                    n_ids, GV_ALLOC_MAX_DEVICES);
    bool all_plain = true, all_vm = true;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n_ids; i++) {
        const struct gv_allocator_gpu *g =
            id_wellformed(ids[i]) && id_to_uuid(ids[i], uuids[i], sizeof(uuids[i]))
                ? find_gpu(a, uuids[i])
                : NULL;
        if (g == NULL) {
            pthread_mutex_unlock(&a->mu);
            return fail(msg, cap, GV_GRPC_INVALID_ARGUMENT, "unknown device ID '%s'", ids[i]);
        }
        all_plain &= plain_unit(g);
        all_vm &= vm_unit(g);
    }
    pthread_mutex_unlock(&a->mu);
    /* a VM's devices: a gpuvisor pod waiting for as many GPUs must not take this call */
    if (all_vm)
        return build(a, NULL, NULL, uuids, n_ids, resp, msg, cap);
    if (a->kube == NULL && a->fixed_pods == NULL) {
        if (all_plain)
            return build(a, NULL, NULL, uuids, n_ids, resp, msg, cap);
        return fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                    "no API server connection: cannot read the pod's assignment");
    }

    /* Find the pod; wait a little for the cache when the kubelet is ahead of it. */
    int64_t deadline = cache_deadline(a, all_plain);
    struct pod_state *ps = NULL;
    char r_uid[128], r_ctr[GV_ALLOC_CNAME_MAX];
    bool again = false;
    for (;;) {
        memset(ch, 0, sizeof(*ch));
        json_t *pods = snapshot(a);
        pthread_mutex_lock(&a->mu);
        uint64_t gen = a->generation;
        if (pods)
            again = find_replay(a, pods, key, r_uid, sizeof(r_uid), r_ctr, sizeof(r_ctr));
        if (pods && !again)
            choose(a, pods, n_ids, key, NULL, 0, ch);
        if (ch->found) {
            const char *uid = jstr2(ch->best.pod, "metadata", "uid");
            ps = get_pod(a, uid, jstr2(ch->best.pod, "metadata", "namespace"),
                         jstr2(ch->best.pod, "metadata", "name"));
            if (ps)
                snprintf(ps->inflight, sizeof(ps->inflight), "%s",
                         ch->best.asg.containers[ch->best.next].name);
            json_incref(ch->best.pod);
        }
        if (!again && !ch->found && ch->n_bad == 0 && wait_for_cache(a, gen, deadline)) {
            pthread_mutex_unlock(&a->mu);
            json_decref(pods);
            choice_release(ch);
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        json_decref(pods);
        break;
    }
    if (again)
        return replay(a, r_uid, r_ctr, resp, msg, cap);
    if (!ch->found) {
        if (all_plain && ch->n_bad == 0)
            return build(a, NULL, NULL, uuids, n_ids, resp, msg, cap);
        int code;
        if (ch->n_bad) {
            char names[512] = "";
            for (size_t i = 0; i < ch->n_bad; i++) {
                size_t l = strlen(names);
                snprintf(names + l, sizeof(names) - l, "%spod %s/%s: %s", i ? "; " : "",
                         jstr2(ch->bad[i], "metadata", "namespace"), jstr2(ch->bad[i], "metadata", "name"),
                         ch->bad_msg[i]);
            }
            code = fail(msg, cap, GV_GRPC_INVALID_ARGUMENT,
                        "the GPU assignment of the pod being admitted is unusable: %s", names);
            mark_bad(a, ch);
        } else if (ch->n_mismatch) {
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                        "no pending pod on node %s has a container assigned %zu GPU(s) (%s)",
                        a->node, n_ids, ch->mismatch);
        } else {
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                        "no pending pod on node %s has an unallocated gpuvisor.io/assignment "
                        "for %zu GPU(s): was the pod scheduled by gpuvisor-scheduler?",
                        a->node, n_ids);
        }
        choice_release(ch);
        return code;
    }
    choice_release(ch);
    if (ps == NULL) {
        json_decref(ch->best.pod);
        return fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    const struct gv_alloc_container_assign *c = &ch->best.asg.containers[ch->best.next];
    const char *uid = jstr2(ch->best.pod, "metadata", "uid");
    bool same_gpus = ids_match_assignment(uuids, n_ids, c);
    if (!same_gpus) {
        /*
         * The kubelet ignored (or never asked) our preference: the
         * container still gets the GPUs and limits of its assignment, but
         * the kubelet's checkpoint and PodResources name other devices.
         */
        char want[GV_ALLOC_MAX_DEVICES * GV_ALLOC_UUID_MAX + 16] = "";
        for (uint32_t d = 0; d < c->n_devices; d++) {
            if (d)
                strcat(want, ",");
            strcat(want, c->devices[d].uuid);
        }
        gv_warn("Allocate: pod %s/%s container %s: the kubelet handed device IDs %s, on other "
                "GPUs than assigned (%s): the container gets the assigned GPUs and limits; the "
                "kubelet's checkpoint and PodResources will name the IDs it handed",
                ps->ns, ps->name, c->name, key, want);
    }
    int64_t t_chosen = gv_loop_now_us();
    int code = build(a, ch->best.pod, c, NULL, 0, resp, msg, cap);
    if (code == GV_GRPC_OK) {
        /* Durable before the reply: a repeat of this request gets these bytes back. */
        struct gv_error err;
        if (gv_ctr_write_answer(a->state_dir, uid, ps->ns, ps->name, c->name, ch->best.asg.n_containers, key, resp,
                         &err) != GV_OK)
            code = fail(msg, cap, GV_GRPC_INTERNAL, "container %s: cannot record the answer: %s",
                        c->name, err.msg);
    }
    int64_t t_built = gv_loop_now_us();

    /* Progress: this container done; the pod is a success once all are. */
    const char *listed = gv_podspec_annotation(ch->best.pod, ANN_CONTAINERS);
    pthread_mutex_lock(&a->mu);
    ps->inflight[0] = '\0';
    if (code == GV_GRPC_OK) {
        /* carry over what an earlier run of the agent recorded */
        for (size_t k = 0; k < ch->best.asg.n_containers; k++) {
            const char *cn = ch->best.asg.containers[k].name;
            if (in_list(listed, cn) && !pod_has(ps, cn))
                pod_add_done(ps, cn);
        }
        if (!pod_add_done(ps, c->name) || !set_rec(ps, c->name, key, true))
            gv_warn("pod %s/%s: cannot record container %s as served (out of memory)", ps->ns,
                    ps->name, c->name);
        ps->n_total = ch->best.asg.n_containers;
        ps->all_done = ps->n_done >= ch->best.asg.n_containers;
        a->stats.answered++;
        a->stats.by_promise += ch->by_promise;
        a->stats.id_mismatches += !same_gpus;
    }
    bool all = ps->all_done;
    pthread_mutex_unlock(&a->mu);
    if (code == GV_GRPC_OK) {
        record(a, ps, all ? "success" : "allocating", NULL);
        gv_info("Allocate: pod %s/%s container %s -> %u GPU(s)%s (find %lld us, build %lld us, "
                "record %lld us)",
                ps->ns, ps->name, c->name, c->n_devices, ch->by_promise ? ", the IDs we preferred" : "",
                (long long)(t_chosen - t_start), (long long)(t_built - t_chosen),
                (long long)(gv_loop_now_us() - t_built));
    } else {
        record(a, ps, "failed", msg);
    }
    json_decref(ch->best.pod);
    return code;
}

int gv_allocator_allocate(void *ud, const char *const *ids, size_t n_ids,
                          V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap)
{
    /*
     * A choice holds a decoded assignment (~35 KiB).  On the heap its pages
     * go back after the call; on a worker's stack they would stay resident
     * for good, in each of the 4 workers.
     */
    struct choice *ch = malloc(sizeof(*ch));
    char *key = n_ids ? ids_key(ids, n_ids) : strdup("");
    int code;
    if (ch == NULL || key == NULL)
        code = fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    else
        code = allocate(ud, ids, n_ids, resp, msg, cap, ch, key);
    free(ch);
    free(key);
    return code;
}

void gv_allocator_get_stats(struct gv_allocator *a, struct gv_allocator_stats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->stats;
    pthread_mutex_unlock(&a->mu);
}

/*
 * Caller holds a->mu.  One device on each GPU of the chosen container, from
 * the kubelet's must-include IDs first, then its available ones not
 * promised to another container; records the promise.  *key: the promised
 * request's identity (to free), NULL when it cannot be honoured.
 */
static bool pick_preferred(struct gv_allocator *a, json_t *pods, const struct choice *ch,
                           const char *const *avail, size_t n_avail, const char *const *must,
                           size_t n_must, const char **pick, char **key)
{
    const struct gv_alloc_container_assign *c = &ch->best.asg.containers[ch->best.next];
    const char *uid = jstr2(ch->best.pod, "metadata", "uid");
    const char *ns = jstr2(ch->best.pod, "metadata", "namespace");
    const char *name = jstr2(ch->best.pod, "metadata", "name");
    *key = NULL;
    for (uint32_t d = 0; d < c->n_devices; d++) {
        const char *id = NULL;
        char u[GV_ALLOC_UUID_MAX];
        for (size_t pass = 0; pass < 2 && !id; pass++) {
            const char *const *list = pass ? avail : must;
            size_t nl = pass ? n_avail : n_must;
            for (size_t i = 0; i < nl && !id; i++) {
                bool taken = false;
                for (uint32_t k = 0; k < d; k++)
                    taken |= strcmp(pick[k], list[i]) == 0;
                if (!taken && id_wellformed(list[i]) && id_to_uuid(list[i], u, sizeof(u)) &&
                    strcmp(u, c->devices[d].uuid) == 0 &&
                    (pass == 0 || !taken_elsewhere(a, pods, list[i], uid, c->name)))
                    id = list[i];
            }
        }
        if (id == NULL) {
            gv_warn("GetPreferredAllocation: pod %s/%s container %s is assigned GPU %s, which has "
                    "no device left in the kubelet's available list", ns, name, c->name,
                    c->devices[d].uuid);
            return false;
        }
        pick[d] = id;
    }
    /* a must-include device on another GPU: the kubelet insists, we cannot honour both */
    for (size_t i = 0; i < n_must; i++) {
        bool in = false;
        for (uint32_t k = 0; k < c->n_devices; k++)
            in |= strcmp(pick[k], must[i]) == 0;
        if (!in)
            return false;
    }
    *key = ids_key(pick, c->n_devices);
    struct pod_state *ps = *key ? get_pod(a, uid, ns, name) : NULL;
    if (ps == NULL || !set_rec(ps, c->name, *key, false)) {
        free(*key);
        *key = NULL;
        return false;
    }
    return true;
}

bool gv_allocator_prefer(void *ud, const char *const *avail, size_t n_avail,
                         const char *const *must, size_t n_must, size_t size, const char **out,
                         size_t *n_out)
{
    struct gv_allocator *a = ud;
    *n_out = 0;
    if (size == 0 || size > GV_ALLOC_MAX_DEVICES || (a->kube == NULL && a->fixed_pods == NULL))
        return false;
    /* like Allocate: the kubelet may be a few ms ahead of our watch; no wait for plain GPUs */
    bool plain = true, vm = n_avail > 0;
    enum gv_inventory_mode vm_mode = GV_INVENTORY_MODE_COUNT;
    char u[GV_ALLOC_UUID_MAX];
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n_avail; i++) {
        const struct gv_allocator_gpu *g =
            id_wellformed(avail[i]) && id_to_uuid(avail[i], u, sizeof(u)) ? find_gpu(a, u) : NULL;
        plain &= g == NULL || plain_unit(g);
        vm &= g != NULL && vm_unit(g) && (i == 0 || g->settings.mode == vm_mode);
        if (g != NULL)
            vm_mode = g->settings.mode;
    }
    pthread_mutex_unlock(&a->mu);
    if (vm) { /* no pod to promise to: the mode's own preference, else the generic one */
        const struct gv_mode *md = gv_mode_get(vm_mode);
        if (md == NULL || md->prefer == NULL)
            return false;
        *n_out = md->prefer(gv_modes_state(a->modes, vm_mode), avail, n_avail, must, n_must, size,
                            out);
        return *n_out == size;
    }
    int64_t deadline = cache_deadline(a, plain);
    struct choice *ch = malloc(sizeof(*ch));
    if (ch == NULL)
        return false;
    const char *pick[GV_ALLOC_MAX_DEVICES];
    char uid[128] = "", ns[128] = "", name[256] = "", ctr[GV_ALLOC_CNAME_MAX] = "", *key = NULL;
    bool ok = false;
    for (;;) {
        memset(ch, 0, sizeof(*ch));
        json_t *pods = snapshot(a);
        pthread_mutex_lock(&a->mu);
        uint64_t gen = a->generation;
        if (pods)
            choose(a, pods, size, NULL, avail, n_avail, ch);
        if (ch->found) {
            ok = pick_preferred(a, pods, ch, avail, n_avail, must, n_must, pick, &key);
            snprintf(uid, sizeof(uid), "%s", jstr2(ch->best.pod, "metadata", "uid"));
            snprintf(ns, sizeof(ns), "%s", jstr2(ch->best.pod, "metadata", "namespace"));
            snprintf(name, sizeof(name), "%s", jstr2(ch->best.pod, "metadata", "name"));
            snprintf(ctr, sizeof(ctr), "%s", ch->best.asg.containers[ch->best.next].name);
        }
        if (!ch->found && wait_for_cache(a, gen, deadline)) {
            pthread_mutex_unlock(&a->mu);
            json_decref(pods);
            choice_release(ch);
            continue;
        }
        a->stats.preferred += ok;
        a->stats.preferred_generic += !ok;
        pthread_mutex_unlock(&a->mu);
        json_decref(pods);
        choice_release(ch);
        break;
    }
    if (ok) {
        memcpy(out, pick, size * sizeof(*out));
        *n_out = size;
        gv_ctr_write_promise(a->state_dir, uid, ns, name, ctr, key);
        gv_debug("GetPreferredAllocation: pod %s/%s container %s -> %s", ns, name, ctr, key);
    }
    free(key);
    free(ch);
    return ok;
}

/* ---- cache events, GC, lifecycle ----------------------------------------- */

static void bump(struct gv_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    a->generation++;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
}

static void on_add(void *ud, json_t *obj)
{
    struct gv_allocator *a = ud;
    const char *uid = cached_uid(obj);
    pthread_mutex_lock(&a->mu);
    struct pod_state *p = uid ? find_pod(a, uid) : NULL;
    if (p)
        p->gone_since = 0;
    pthread_mutex_unlock(&a->mu);
    bump(a);
}

static void on_update(void *ud, json_t *old_obj, json_t *new_obj)
{
    (void)old_obj;
    on_add(ud, new_obj);
}

static void on_delete(void *ud, json_t *obj)
{
    struct gv_allocator *a = ud;
    const char *uid = cached_uid(obj);
    pthread_mutex_lock(&a->mu);
    struct pod_state *p = uid ? find_pod(a, uid) : NULL;
    if (p && p->gone_since == 0)
        p->gone_since = gv_loop_now_ms();
    pthread_mutex_unlock(&a->mu);
    bump(a);
}

/*
 * Copies src[key] into dst when present.  A copy, not a reference: the
 * cached form must not keep parts of the decoded event alive, or they stay
 * behind in the heap, scattered among what was freed with the event.
 */
static void keep(json_t *dst, json_t *src, const char *key)
{
    json_t *v = json_object_get(src, key);
    if (v)
        json_object_set_new(dst, key, json_deep_copy(v));
}

/*
 * The annotations the agent reads.  Every other one (HAMi's, the
 * scheduler's other gpuvisor.io/ keys, kubectl's last-applied-configuration)
 * stays out of the cache.
 */
static const char *const read_annotations[] = {ANN_ASSIGNMENT, ANN_ASSIGNED_AT, ANN_ALLOCATION,
                                               ANN_CONTAINERS, ANN_PRELOAD,
                                               GV_PLACEMENT_NODE_ANNOTATION,
                                               GV_PLACEMENT_SIG_ANNOTATION};

/*
 * A pod that can no longer be admitted is cached as its uid alone, a JSON
 * string: GC and the cache callbacks need only to know it still exists.
 * The informer then compares a pod's versions by content, and a new
 * resourceVersion of a served pod is no change at all.  Such a form reads
 * as a pod without an assignment, so Allocate skips it as it would the
 * whole pod.
 *
 * A pod that may still be admitted (may_be_admitted) keeps what choose()
 * and build() read: uid, resourceVersion, name, namespace, node,
 * creationTimestamp when it has no assigned-at (the order key), the
 * annotations above, and per container its name, resources
 * (container_priority) and a CUDA_TASK_PRIORITY env entry (env_priority).
 * Its deletion and phase need no copy: they are known to be unset and not
 * final.  jansson spends ~220 bytes per object and ~170 per string member:
 * a small pending pod costs ~3.5 KiB, any other pod ~100 bytes.
 */
static json_t *cache_form(json_t *pod, bool admissible)
{
    json_t *m = json_object_get(pod, "metadata");
    if (!admissible) {
        const char *uid = jstr2(pod, "metadata", "uid");
        return uid ? json_string(uid) : NULL; /* no uid: nothing on disk to collect */
    }
    /* json_object_set_new takes its value even when it fails (NULL parent included) */
    json_t *out = json_object(), *meta = json_object();
    if (json_object_set_new(out, "metadata", meta) != 0) {
        json_decref(out);
        return json_incref(pod); /* out of memory: cache it whole rather than lose it */
    }
    keep(meta, m, "uid");
    keep(meta, m, "resourceVersion");
    keep(meta, m, "name");
    keep(meta, m, "namespace");
    json_t *anns = json_object(), *spec = json_object(), *ctrs = json_array(), *c;
    int bad = json_object_set_new(meta, "annotations", anns);
    bad |= json_object_set_new(spec, "containers", ctrs); /* before spec can be freed */
    bad |= json_object_set_new(out, "spec", spec);
    if (bad) {
        json_decref(out);
        return json_incref(pod);
    }
    for (size_t i = 0; i < sizeof(read_annotations) / sizeof(read_annotations[0]); i++)
        keep(anns, json_object_get(m, "annotations"), read_annotations[i]);
    if (!gv_podspec_annotation(pod, ANN_ASSIGNED_AT))
        keep(meta, m, "creationTimestamp");
    json_t *sp = json_object_get(pod, "spec");
    size_t i;
    keep(spec, sp, "nodeName");
    json_array_foreach(json_object_get(sp, "containers"), i, c) {
        json_t *tc = json_object(), *e;
        if (tc == NULL || json_array_append_new(ctrs, tc) != 0) {
            json_decref(out);
            return json_incref(pod);
        }
        keep(tc, c, "name");
        keep(tc, c, "resources");
        size_t j;
        json_array_foreach(json_object_get(c, "env"), j, e) {
            json_t *n = json_object_get(e, "name");
            if (json_is_string(n) && strcmp(json_string_value(n), "CUDA_TASK_PRIORITY") == 0) {
                json_object_set_new(tc, "env", json_pack("[o]", json_deep_copy(e)));
                break;
            }
        }
    }
    return out;
}

json_t *gv_allocator_cache_pod(json_t *pod)
{
    return cache_form(pod, may_be_admitted(pod));
}

/*
 * The informer's transform.  A form that may still be admitted is built in
 * the pending zone: such forms are the largest the cache holds (~3.5 KiB
 * each) and are all replaced by small ones as their pods are served.  From
 * the heap, the small forms, the cache's keys and the per-pod state
 * allocated meanwhile landed among them and pinned their pages: 500 served
 * pods left ~1.3 MiB of the heap free but resident.  In their own pages
 * they go back to the kernel as they die.
 */
static json_t *trim_pod(void *ud, json_t *pod)
{
    struct gv_allocator *a = ud;
    observe(a, pod);
    bool admissible = may_be_admitted(pod), zoned = admissible && a->pending_zone != NULL;
    if (zoned)
        gv_jzone_enter(a->pending_zone);
    json_t *out = cache_form(pod, admissible);
    if (zoned)
        gv_jalloc_leave();
    return out;
}

static int rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return unlink(path);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(sub);
        else
            unlink(sub);
    }
    closedir(d);
    return rmdir(path);
}

/* Whether the cache snapshot pods holds the pod with this uid. */
static bool cached(json_t *pods, const char *uid)
{
    size_t i;
    json_t *pod;
    json_array_foreach(pods, i, pod) {
        const char *u = cached_uid(pod);
        if (u && strcmp(u, uid) == 0)
            return true;
    }
    return false;
}

size_t gv_allocator_gc(struct gv_allocator *a)
{
    if (a->pods_inf == NULL || !gv_informer_has_synced(a->pods_inf))
        return 0; /* an empty cache would look like "every pod is gone" */
    json_t *pods = gv_informer_list(a->pods_inf);
    size_t removed = 0;
    int64_t now = gv_loop_now_ms();
    /* both trees of a pod: its runtime directories and its limits and records */
    const char *tops[] = {"containers", "limits"};
    for (size_t t = 0; t < 2; t++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/%s", a->state_dir, tops[t]);
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            bool live = cached(pods, e->d_name);
            pthread_mutex_lock(&a->mu);
            struct pod_state *p = find_pod(a, e->d_name);
            if (!live && p && p->gone_since == 0)
                p->gone_since = now; /* gone from the cache: its grace period starts */
            if (!live && p && (now - p->gone_since < a->cfg.gc_grace_ms || p->writing))
                live = true;
            if (!live && p) {
                /* forget it: unlink from the list */
                for (struct pod_state **pp = &a->pods; *pp; pp = &(*pp)->next) {
                    if (*pp == p) {
                        *pp = p->next;
                        break;
                    }
                }
            }
            pthread_mutex_unlock(&a->mu);
            if (live)
                continue;
            pod_free(p); /* unlinked and not being written: nobody else can reach it */
            char path[4400], other[4400];
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            snprintf(other, sizeof(other), "%s/limits/%s", a->state_dir, e->d_name);
            bool counted_later = t == 0 && access(other, F_OK) == 0; /* one count per pod */
            if (rm_tree(path) == 0) {
                removed += !counted_later;
                gv_info("removed the %s directories of vanished pod %s", tops[t], e->d_name);
            } else {
                gv_warn("cannot remove %s: %s", path, strerror(errno));
            }
        }
        if (d)
            closedir(d);
    }
    /* Pods known only in memory (failed ones have no directory): forget them too. */
    pthread_mutex_lock(&a->mu);
    for (struct pod_state **pp = &a->pods; *pp;) {
        struct pod_state *p = *pp;
        bool live = cached(pods, p->uid);
        if (!live && p->gone_since == 0)
            p->gone_since = now;
        if (!live && !p->writing && now - p->gone_since >= a->cfg.gc_grace_ms) {
            *pp = p->next;
            pod_free(p);
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&a->mu);
    json_decref(pods);
    return removed;
}

gv_status gv_allocator_set_gpus(struct gv_allocator *a, const struct gv_node_config *cfg,
                                const struct gv_allocator_gpu *gpus, size_t n,
                                struct gv_error *err)
{
    struct gv_allocator_gpu *copy = calloc(n + 1, sizeof(*copy));
    if (copy == NULL)
        return gv_error_set(err, GV_ENOMEM, "allocator: out of memory");
    if (n)
        memcpy(copy, gpus, n * sizeof(*copy));
    pthread_mutex_lock(&a->mu);
    free(a->gpus);
    a->gpus = copy;
    a->n_gpus = n;
    a->cdi = cfg->cdi;
    snprintf(a->cdi_kind, sizeof(a->cdi_kind), "%s", cfg->cdi_kind);
    snprintf(a->core_policy, sizeof(a->core_policy), "%s", cfg->core_policy);
    snprintf(a->libcuda_log_level, sizeof(a->libcuda_log_level), "%s", cfg->libcuda_log_level);
    snprintf(a->resource_name, sizeof(a->resource_name), "%s", cfg->resource_name);
    a->generation++;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
    return GV_OK;
}

void gv_allocator_set_pods(struct gv_allocator *a, json_t *pods)
{
    size_t i;
    json_t *pod, *cached = json_array();
    json_array_foreach(pods, i, pod) /* exactly what the informer would cache */
        json_array_append_new(cached, gv_allocator_cache_pod(pod));
    json_decref(a->fixed_pods);
    a->fixed_pods = cached;
}

bool gv_allocator_synced(struct gv_allocator *a)
{
    return a->pods_inf && gv_informer_has_synced(a->pods_inf);
}

bool gv_allocator_wait_synced(struct gv_allocator *a, int64_t ms)
{
    return a->pods_inf == NULL || gv_informer_wait_synced(a->pods_inf, ms);
}

size_t gv_allocator_pending_writes(struct gv_allocator *a)
{
    size_t n = 0;
    pthread_mutex_lock(&a->mu);
    for (struct pod_state *p = a->pods; p; p = p->next)
        n += p->version != p->written && p->gone_since == 0;
    pthread_mutex_unlock(&a->mu);
    return n;
}

/*
 * A restarted agent learns which containers it already answered, and what
 * it promised, from <state>/limits/<uid>/<ctr>/ (written before each reply
 * and each preference), in case the progress annotation had not reached
 * the API server yet.  Nothing the container can write counts: its runtime
 * directory is not read.
 */
static void recover(struct gv_allocator *a)
{
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/limits", a->state_dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !safe_component(e->d_name))
            continue;
        char sub[4600];
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        DIR *cd = opendir(sub);
        if (cd == NULL)
            continue;
        struct dirent *ce;
        while ((ce = readdir(cd)) != NULL) {
            if (ce->d_name[0] == '.' || !safe_component(ce->d_name))
                continue;
            gv_ctr_sweep_tmp(a->state_dir, e->d_name, ce->d_name);
            char *text = NULL;
            struct gv_ctr_rec r;
            bool answered = gv_ctr_read_rec(a->state_dir, e->d_name, ce->d_name, "answer", &text, &r);
            bool promised = !answered && gv_ctr_read_rec(a->state_dir, e->d_name, ce->d_name, "promise", &text, &r);
            struct pod_state *p = answered || promised ? get_pod(a, e->d_name, r.ns, r.name) : NULL;
            if (p && answered && !pod_has(p, ce->d_name))
                pod_add_done(p, ce->d_name);
            if (p && set_rec(p, ce->d_name, r.ids, answered))
                find_rec(p, ce->d_name)->since = 0; /* before anything this run promises */
            if (p && answered) {
                if (r.containers > 0)
                    p->n_total = (unsigned)r.containers;
                p->recovered = true;
                p->all_done = p->n_total && p->n_done >= p->n_total;
                snprintf(p->state, sizeof(p->state), "%s", p->all_done ? "success" : "allocating");
            }
            free(text);
        }
        closedir(cd);
    }
    if (d)
        closedir(d);
}

/*
 * The informer's view of a pod this agent has records of (called from the
 * transform, with the whole pod): whether it ended, which containers the
 * kubelet created (their answer reached it: no more repeats), and, once
 * after a restart, whether the annotations show what was answered.
 */
static void observe(struct gv_allocator *a, json_t *pod)
{
    const char *uid = jstr2(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    struct pod_state *p = find_pod(a, uid);
    if (p == NULL) {
        pthread_mutex_unlock(&a->mu);
        return;
    }
    const char *phase = jstr2(pod, "status", "phase");
    p->ended = json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") ||
               (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0));
    size_t i;
    json_t *cs;
    json_array_foreach(json_object_get(json_object_get(pod, "status"), "containerStatuses"), i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *cid = json_string_value(json_object_get(cs, "containerID"));
        struct ctr_rec *r = name ? find_rec(p, name) : NULL;
        if (r && cid && *cid)
            r->started = true;
    }
    if (p->recovered) {
        p->recovered = false;
        if (p->ns == NULL)
            pod_set_name(p, jstr2(pod, "metadata", "namespace") ? jstr2(pod, "metadata", "namespace") : "",
                         jstr2(pod, "metadata", "name") ? jstr2(pod, "metadata", "name") : "");
        const char *listed = gv_podspec_annotation(pod, ANN_CONTAINERS);
        const char *progress = gv_podspec_annotation(pod, ANN_ALLOCATION);
        bool shown = !(p->all_done && !(progress && strcmp(progress, "success") == 0));
        for (const char *c = p->done; shown && c && *c;) {
            const char *e = strchr(c, ',');
            char one[GV_ALLOC_CNAME_MAX];
            snprintf(one, sizeof(one), "%.*s", (int)(e ? e - c : (ptrdiff_t)strlen(c)), c);
            shown = in_list(listed, one);
            c = e ? e + 1 : NULL;
        }
        if (!shown) { /* answered before the crash, never recorded: write it now */
            for (const char *c = listed; c && *c;) { /* keep what an earlier run recorded */
                const char *e = strchr(c, ',');
                char one[GV_ALLOC_CNAME_MAX];
                snprintf(one, sizeof(one), "%.*s", (int)(e ? e - c : (ptrdiff_t)strlen(c)), c);
                if (safe_component(one) && !pod_has(p, one))
                    pod_add_done(p, one);
                c = e ? e + 1 : NULL;
            }
            p->all_done = p->n_total && p->n_done >= p->n_total;
            snprintf(p->state, sizeof(p->state), "%s", p->all_done ? "success" : "allocating");
            p->version++;
            p->next_try = 0;
            pthread_cond_broadcast(&a->changed);
        }
    }
    pthread_mutex_unlock(&a->mu);
}

gv_status gv_allocator_new(const struct gv_allocator_config *cfg, struct gv_kube_client *kube,
                           struct gv_kube_client *writer, struct gv_allocator **out,
                           struct gv_error *err)
{
    struct gv_allocator *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return gv_error_set(err, GV_ENOMEM, "allocator: out of memory");
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->changed, NULL);
    a->cfg = *cfg;
    a->cfg.wait_ms = cfg->wait_ms > 0 ? cfg->wait_ms : 5000;
    a->cfg.gc_grace_ms = cfg->gc_grace_ms > 0 ? cfg->gc_grace_ms : 60000;
    a->node = strdup(cfg->node);
    a->state_dir = strdup(cfg->state_dir);
    a->host_state_dir = strdup(cfg->host_state_dir ? cfg->host_state_dir : cfg->state_dir);
    a->install_dir = strdup(cfg->install_dir);
    a->kube = kube;
    a->writer = writer ? writer : kube;
    if (!a->node || !a->state_dir || !a->host_state_dir || !a->install_dir) {
        gv_error_set(err, GV_ENOMEM, "allocator: out of memory");
        goto fail;
    }
    snprintf(a->node_dir, sizeof(a->node_dir), "%s/node", a->state_dir);
    snprintf(a->host_node_dir, sizeof(a->host_node_dir), "%s/node", a->host_state_dir);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/containers", a->state_dir);
    if ((mkdir(a->state_dir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(dir, 0755) != 0 && errno != EEXIST)) {
        gv_error_set(err, GV_EIO, "allocator: cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (gv_ctr_shared_dir(a->node_dir, err) != GV_OK) {
        gv_error_prefix(err, "allocator: node priority directory: ");
        goto fail;
    }
    a->modes = cfg->modes;
    if (a->modes == NULL) {
        struct gv_mode_env env = {.state_dir = a->state_dir, .host_state_dir = a->host_state_dir,
                                  .install_dir = a->install_dir};
        if (gv_modes_new(&env, &a->own_modes, err) != GV_OK)
            goto fail;
        a->modes = a->own_modes;
    }
    recover(a);
    if (kube) {
        char selector[600];
        snprintf(selector, sizeof(selector), "spec.nodeName=%s", a->node);
        /* Address space only: ~16,000 forms; past that they come from malloc. */
        if (gv_jzone_new((size_t)64 << 20, &a->pending_zone, err) != GV_OK)
            goto fail;
        struct gv_informer_opts io = {.field_selector = selector, .transform = trim_pod,
                                      .transform_ud = a};
        struct gv_informer_callbacks cb = {on_add, on_update, on_delete, a};
        if (gv_informer_new(kube, "/api/v1/pods", &io, &cb, &a->pods_inf, err) != GV_OK ||
            gv_informer_start(a->pods_inf, err) != GV_OK)
            goto fail;
        if (pthread_create(&a->writer_thread, NULL, writer_main, a) != 0) {
            gv_error_set(err, GV_EINTERNAL, "allocator: cannot start the retry thread");
            goto fail;
        }
        a->writer_running = true;
    }
    *out = a;
    return GV_OK;
fail:
    gv_allocator_free(a);
    return err ? err->code : GV_EINTERNAL;
}

void gv_allocator_free(struct gv_allocator *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    a->quit = true;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
    if (a->writer_running)
        pthread_join(a->writer_thread, NULL);
    gv_informer_free(a->pods_inf); /* the last holder of pending forms */
    gv_jzone_free(a->pending_zone);
    json_decref(a->fixed_pods);
    while (a->pods) {
        struct pod_state *p = a->pods;
        a->pods = p->next;
        pod_free(p);
    }
    gv_cdi_host_free(a->direct);
    free(a->gpus);
    gv_modes_free(a->own_modes);
    free(a->node);
    free(a->state_dir);
    free(a->host_state_dir);
    free(a->install_dir);
    pthread_cond_destroy(&a->changed);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* nvidiaRuntime false: Allocate mounts what h lists (taken over; NULL: back to the runtime). */
void gv_allocator_set_direct(struct gv_allocator *a, struct gv_cdi_host *h)
{
    pthread_mutex_lock(&a->mu);
    struct gv_cdi_host *old = a->direct;
    a->direct = h;
    pthread_mutex_unlock(&a->mu);
    gv_cdi_host_free(old);
}
