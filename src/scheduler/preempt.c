/*
 * GPU-aware preemption: the extender's preempt verb and the holds that keep
 * what it freed for the preemptor (docs/scheduler.md, "Preemption").
 *
 * kube-scheduler cannot see GPU slices (they are ignoredByScheduler), so its
 * dry run proposes nodes where a GPU-starved pod "fits" after evicting
 * nobody.  It sends those candidates with the victims it found; this verb
 * answers with the one node where the fewest, lowest-priority pods free
 * enough on specific GPUs (the engine's gv_alloc_victims), its victims
 * being kube-scheduler's own plus the GPU pods chosen here.  kube-scheduler
 * resolves every returned UID among the pods it has on that node and
 * evicts them (pkg/scheduler/core/extender.go, convertPodUIDToPod), so only
 * pods bound there are offered as victims.
 *
 * The hold: the GPUs promised to the preemptor stay unusable to pods of a
 * priority no higher than its own until its next filter reserves them (or
 * the reservation TTL passes).  It is an exclusion, never accounting: the
 * engine's usage is still exactly what the API says (the invariant).  Each
 * hold is also written on the preemptor (hold_store.c, signed like a
 * placement) before the answer goes out, so a restarted scheduler takes it
 * back from the pod informer until it expires; a write that fails costs at
 * worst a second preemption after a restart, never an over-commit.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
#include "scheduler/events.h"
#include "scheduler/hold_store.h"
#include "scheduler/pdb_sched.h"
#include "scheduler/preempt.h"
#include "scheduler/sched_internal.h"

struct hold {
    char *uid;
    int32_t prio;
    char *node;
    char *encoded; /* the GPUs promised: an assignment text */
    char *uuids;   /* the same GPUs, comma-separated (a nouse-gpuuuid list) */
    double deadline; /* monotonic seconds: it lapses then (reservation TTL) */
    time_t until;    /* the same in wall time: what the pod's annotation says */
    bool consumed;   /* became the pod's reservation: kept (not excluding,
                      * not offered) only so the informer does not take the
                      * annotation back while it lasts */
};

/* Holds at once, at most: each filter scans them and matches every GPU it
 * checks against their uuids, and a tenant may create many high-priority
 * pods.  Preemptions in flight together are few; past the cap a preemption
 * still answers, only without a hold (as after a restart). */
#define MAX_HOLDS 128

struct gv_sched_preempt {
    struct hold *holds;
    size_t n_holds, cap_holds;
    uint64_t calls_victims, calls_none, calls_skipped;
    json_t *victims_by_prio; /* "priority" -> victims returned */
    /* Event threads still posting (they use the API client, which the
     * caller frees after gv_sched_free): gv_sched_preempt_free waits. */
    pthread_mutex_t ev_mu;
    pthread_cond_t ev_cv;
    unsigned ev_threads;
};

struct gv_sched_preempt *gv_sched_preempt_new(void)
{
    struct gv_sched_preempt *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->ev_mu, NULL);
    pthread_cond_init(&p->ev_cv, NULL);
    p->victims_by_prio = json_object();
    if (p->victims_by_prio == NULL) {
        gv_sched_preempt_free(p);
        return NULL;
    }
    return p;
}

static void hold_clear(struct hold *h)
{
    free(h->uid);
    free(h->node);
    free(h->encoded);
    free(h->uuids);
    memset(h, 0, sizeof(*h));
}

void gv_sched_preempt_free(struct gv_sched_preempt *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->ev_mu);
    while (p->ev_threads > 0)
        pthread_cond_wait(&p->ev_cv, &p->ev_mu);
    pthread_mutex_unlock(&p->ev_mu);
    pthread_mutex_destroy(&p->ev_mu);
    pthread_cond_destroy(&p->ev_cv);
    for (size_t i = 0; i < p->n_holds; i++)
        hold_clear(&p->holds[i]);
    free(p->holds);
    json_decref(p->victims_by_prio);
    free(p);
}

int32_t gv_sched_pod_priority(const json_t *pod)
{
    json_t *v = json_object_get(json_object_get(pod, "spec"), "priority");
    json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
    return n > INT32_MAX ? INT32_MAX : n < INT32_MIN ? INT32_MIN : (int32_t)n;
}

static const char *pod_uid(const json_t *pod)
{
    return json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
}

/* ---- holds ------------------------------------------------------------- */

static void hold_drop_at(struct gv_sched_preempt *p, size_t i)
{
    hold_clear(&p->holds[i]);
    p->holds[i] = p->holds[--p->n_holds];
}

/* Holds older than the reservation TTL lapse, as a reservation would. */
static void holds_expire(struct gv_sched *s)
{
    struct gv_sched_preempt *p = s->preempt;
    double now = gv_sched_now();
    for (size_t i = p->n_holds; i-- > 0;)
        if (now > p->holds[i].deadline)
            hold_drop_at(p, i);
}

static struct hold *hold_find(struct gv_sched_preempt *p, const char *uid)
{
    for (size_t i = 0; i < p->n_holds; i++)
        if (strcmp(p->holds[i].uid, uid) == 0)
            return &p->holds[i];
    return NULL;
}

bool gv_sched_preempt_has_hold(struct gv_sched *s, const char *uid)
{
    if (s->preempt == NULL || s->preempt->n_holds == 0)
        return false;
    holds_expire(s);
    return hold_find(s->preempt, uid) != NULL;
}

void gv_sched_preempt_release(struct gv_sched *s, const char *uid)
{
    struct gv_sched_preempt *p = s->preempt;
    for (size_t i = 0; p != NULL && uid != NULL && i < p->n_holds; i++)
        if (strcmp(p->holds[i].uid, uid) == 0) {
            hold_drop_at(p, i);
            return;
        }
}

/* The distinct GPUs of an assignment, comma-separated (heap). */
static char *assignment_uuids(const struct gv_alloc_assignment *a)
{
    size_t cap = 1;
    for (uint32_t c = 0; c < a->n_containers; c++)
        cap += a->containers[c].n_devices * GV_ALLOC_UUID_MAX;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    size_t len = 0;
    for (uint32_t c = 0; c < a->n_containers; c++)
        for (uint32_t d = 0; d < a->containers[c].n_devices; d++) {
            const char *u = a->containers[c].devices[d].uuid;
            bool seen = false;
            for (uint32_t c2 = 0; c2 <= c && !seen; c2++)
                for (uint32_t d2 = 0; d2 < a->containers[c2].n_devices && !seen; d2++) {
                    if (c2 == c && d2 == d)
                        break;
                    seen = strcmp(a->containers[c2].devices[d2].uuid, u) == 0;
                }
            if (!seen)
                len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? "," : "", u);
        }
    return out;
}

/* Keeps a hold for uid (replacing any), lapsing at deadline / until. */
static gv_status hold_add(struct gv_sched *s, const char *uid, int32_t prio,
                          const struct gv_alloc_assignment *a, double deadline, time_t until,
                          struct gv_error *err)
{
    struct gv_sched_preempt *p = s->preempt;
    struct hold h = {.uid = strdup(uid), .prio = prio, .node = strdup(a->node),
                     .encoded = malloc(GV_ALLOC_ASSIGNMENT_MAX), .uuids = assignment_uuids(a),
                     .deadline = deadline, .until = until};
    if (h.uid == NULL || h.node == NULL || h.encoded == NULL || h.uuids == NULL ||
        gv_alloc_assignment_encode(a, h.encoded, GV_ALLOC_ASSIGNMENT_MAX, NULL, err) != GV_OK) {
        hold_clear(&h);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    gv_sched_preempt_release(s, uid);
    if (p->n_holds >= MAX_HOLDS) {
        hold_clear(&h);
        gv_warn("preempt: pod %s: %d holds already, none kept for it", uid, MAX_HOLDS);
        return GV_OK;
    }
    if (p->n_holds == p->cap_holds) {
        size_t ncap = p->cap_holds ? p->cap_holds * 2 : 16;
        struct hold *nh = realloc(p->holds, ncap * sizeof(*nh));
        if (nh == NULL) {
            hold_clear(&h);
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        }
        p->holds = nh;
        p->cap_holds = ncap;
    }
    p->holds[p->n_holds++] = h;
    return GV_OK;
}

/* A new hold from a preemption, for the hold TTL (preemptionHoldSeconds);
 * *hold_text gets what to write on the pod (heap; NULL when no hold was
 * kept). */
static gv_status hold_set(struct gv_sched *s, const char *uid, int32_t prio,
                          const struct gv_alloc_assignment *a, char **hold_text,
                          struct gv_error *err)
{
    *hold_text = NULL;
    time_t until = time(NULL) + (time_t)s->cfg.hold_ttl_s;
    gv_status st = hold_add(s, uid, prio, a, gv_sched_now() + (double)s->cfg.hold_ttl_s, until,
                            err);
    struct hold *h = st == GV_OK ? hold_find(s->preempt, uid) : NULL;
    if (h != NULL &&
        (*hold_text = gv_sched_hold_encode(&s->cfg, uid, h->node, until, h->encoded)) == NULL)
        gv_warn("preempt: pod %s: hold not written on the pod (out of memory)", uid);
    return st;
}

/* After a restart: the hold the pod carries, when gpuvisor wrote it for
 * this pod and it has not lapsed (lock held). */
static void hold_restore(struct gv_sched *s, const json_t *pod, const char *uid)
{
    char *node = NULL, *encoded = NULL;
    time_t until = 0;
    struct gv_error err = {0};
    gv_status st = gv_sched_hold_decode(&s->cfg, pod, &node, &until, &encoded, &err);
    if (st == GV_ENOTFOUND)
        return;
    time_t now = time(NULL);
    struct gv_alloc_assignment *a = st == GV_OK ? malloc(sizeof(*a)) : NULL;
    if (st != GV_OK)
        gv_warn_limited("preempt: pod %s: hold ignored: %s", uid, err.msg); /* tenant-written */
    else if (until <= now)
        gv_debug("preempt: pod %s: hold lapsed at %lld", uid, (long long)until);
    else if (a == NULL ||
             gv_alloc_assignment_decode(encoded, strlen(encoded), a, &err) != GV_OK ||
             strcmp(a->node, node) != 0)
        gv_warn_limited("preempt: pod %s: hold ignored: assignment %s", uid,
                        a == NULL ? "out of memory" : "unreadable or on another node");
    else {
        /* never longer than a fresh hold would last */
        double left = (double)(until - now);
        if (left > (double)s->cfg.hold_ttl_s)
            left = (double)s->cfg.hold_ttl_s;
        if (hold_add(s, uid, gv_sched_pod_priority(pod), a, gv_sched_now() + left, until, &err) ==
            GV_OK)
            gv_info("preempt: pod %s: hold on %s taken back from the pod (%.0f s left)", uid,
                    node, left);
    }
    free(a);
    free(node);
    free(encoded);
}

/* Whether hold h keeps its GPUs from pod uid of priority prio: another
 * pod's live hold, of a priority at least prio. */
static bool excludes(const struct hold *h, const char *uid, int32_t prio)
{
    return !h->consumed && h->prio >= prio && (uid == NULL || strcmp(h->uid, uid) != 0);
}

/* The GPUs held for preemptors other than uid whose priority is at least
 * prio, appended to req's nouse-gpuuuid list. */
static gv_status exclude_for(struct gv_sched *s, const char *uid, int32_t prio,
                             struct gv_alloc_request *req, struct gv_error *err)
{
    struct gv_sched_preempt *p = s->preempt;
    holds_expire(s);
    size_t len = 0;
    const char *own = req->constraint[GV_ALLOC_NOUSE_UUID];
    for (size_t i = 0; i < p->n_holds; i++)
        if (excludes(&p->holds[i], uid, prio))
            len += strlen(p->holds[i].uuids) + 1;
    if (len == 0)
        return GV_OK;
    len += own != NULL ? strlen(own) + 1 : 0;
    char *list = malloc(len + 1);
    if (list == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    size_t o = 0;
    if (own != NULL && *own != '\0')
        o += (size_t)snprintf(list, len + 1, "%s", own);
    for (size_t i = 0; i < p->n_holds; i++)
        if (excludes(&p->holds[i], uid, prio))
            o += (size_t)snprintf(list + o, len + 1 - o, "%s%s", o ? "," : "",
                                  p->holds[i].uuids);
    gv_status st = gv_alloc_request_set_constraint(req, GV_ALLOC_NOUSE_UUID, list, err);
    free(list);
    return st;
}

gv_status gv_sched_preempt_exclude(struct gv_sched *s, json_t *pod, struct gv_alloc_request *req,
                                   struct gv_error *err)
{
    if (s->preempt == NULL || s->preempt->n_holds == 0)
        return GV_OK;
    return exclude_for(s, pod_uid(pod), gv_sched_pod_priority(pod), req, err);
}

bool gv_sched_preempt_held(struct gv_sched *s, const char *uid, struct gv_alloc_assignment *a)
{
    if (s->preempt == NULL || s->preempt->n_holds == 0)
        return false;
    holds_expire(s);
    struct hold *h = hold_find(s->preempt, uid);
    if (h == NULL || h->consumed)
        return false;
    /* only on a node this filter found usable among its candidates */
    const struct snode *sn = gv_sched_node_find(s, h->node);
    if (sn == NULL || sn->filter_stamp != s->filter_stamp)
        return false;
    return gv_alloc_assignment_decode(h->encoded, strlen(h->encoded), a, NULL) == GV_OK;
}

/* ---- pod informer ------------------------------------------------------ */

void gv_sched_preempt_pod(struct gv_sched *s, json_t *pod, bool finished)
{
    const char *uid = pod_uid(pod);
    if (s->preempt == NULL || uid == NULL)
        return;
    const char *bound = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    bool is_bound = !finished && bound != NULL && *bound != '\0';
    /* A victim must be bound where gpuvisor counts it: kube-scheduler
     * resolves victims among the pods it has on the node.  The mark lives
     * with the engine's placement (after this event's accounting). */
    bool placed = gv_alloc_is_placed(s->cluster, uid);
    if (placed)
        gv_alloc_pod_set_victim(s->cluster, uid, is_bound ? bound : NULL,
                                gv_sched_pod_priority(pod), NULL);
    gv_sched_pdb_pod(s, pod, placed && is_bound); /* labels, where a budget may need them */
    if (finished || is_bound)
        gv_sched_preempt_release(s, uid); /* placed or ended: nothing left to hold */
    else if (hold_find(s->preempt, uid) == NULL)
        hold_restore(s, pod, uid); /* a hold written before a restart */
}

void gv_sched_preempt_consume(struct gv_sched *s, const char *uid)
{
    struct hold *h = s->preempt != NULL && uid != NULL ? hold_find(s->preempt, uid) : NULL;
    if (h != NULL)
        h->consumed = true;
}

void gv_sched_preempt_pod_gone(struct gv_sched *s, const char *uid)
{
    if (s->preempt != NULL && uid != NULL)
        gv_sched_preempt_release(s, uid);
    gv_sched_pdb_pod_gone(s, uid);
}

/* ---- events ------------------------------------------------------------ */

/* Events to post once the answer is out: API round trips never run under
 * the lock nor delay the verb (a detached thread posts them). */
struct ev {
    char *ns, *name, *uid, *reason, *message, *suffix;
};
struct ev_batch {
    struct gv_kube_client *kube;
    struct gv_sched_preempt *owner; /* counts the thread (gv_sched_preempt_free waits) */
    size_t n;
    struct ev ev[];
};

static void *ev_post_all(void *arg)
{
    struct ev_batch *b = arg;
    for (size_t i = 0; i < b->n; i++) {
        struct ev *e = &b->ev[i];
        if (e->ns != NULL && e->name != NULL && e->uid != NULL && e->message != NULL)
            gv_sched_pod_event(b->kube, e->ns, e->name, e->uid, "Normal", e->reason, e->message,
                               e->suffix);
        free(e->ns);
        free(e->name);
        free(e->uid);
        free(e->message);
        free(e->suffix);
    }
    struct gv_sched_preempt *owner = b->owner;
    free(b);
    pthread_mutex_lock(&owner->ev_mu);
    owner->ev_threads--;
    pthread_cond_broadcast(&owner->ev_cv);
    pthread_mutex_unlock(&owner->ev_mu);
    return NULL;
}

static void ev_set(struct ev *e, const char *ns, const char *name, const char *uid,
                   const char *reason, char *message, const char *suffix)
{
    e->ns = ns ? strdup(ns) : NULL;
    e->name = name ? strdup(name) : NULL;
    e->uid = uid ? strdup(uid) : NULL;
    e->reason = (char *)reason; /* static */
    e->message = message;
    e->suffix = strdup(suffix);
}

/* Lock held: the events of an answer, on the preemptor (which node, which
 * GPUs it is promised, how much its victims free) and on each victim
 * gpuvisor placed (for whom, and the GPU share it held).  NULL without an
 * API connection or memory. */
static struct ev_batch *events_of(struct gv_sched *s, const json_t *pod, const char *node,
                                  const struct hold *h, const struct gv_alloc_victim_plan *plan,
                                  char *const *victims, size_t n, int32_t prio)
{
    if (s->kube == NULL || h == NULL)
        return NULL;
    struct ev_batch *b = calloc(1, sizeof(*b) + (n + 1) * sizeof(b->ev[0]));
    if (b == NULL)
        return NULL;
    b->kube = s->kube;
    b->owner = s->preempt;
    const json_t *md = json_object_get(pod, "metadata");
    const char *pns = json_string_value(json_object_get(md, "namespace"));
    const char *pname = json_string_value(json_object_get(md, "name"));
    char *msg = NULL;
    char suffix[300];
    if (asprintf(&msg,
                 "gpuvisor preemption on node %s: %zu victim(s) free %llu MiB and %llu.%llu "
                 "percent of a GPU's cores; this pod is promised GPU(s) %s",
                 node, n, (unsigned long long)plan->mem_mib,
                 (unsigned long long)(plan->milli / 10), (unsigned long long)(plan->milli % 10),
                 h->uuids) < 0)
        msg = NULL;
    snprintf(suffix, sizeof(suffix), "preempt-%.200s", node);
    ev_set(&b->ev[b->n++], pns, pname, h->uid, "GPUPreemption", msg, suffix);
    for (size_t k = 0; k < n; k++) {
        const struct srec *r = gv_sched_rec_find(s, victims[k]);
        if (r == NULL || r->encoded == NULL)
            continue; /* kube-scheduler's own victim: its event says why */
        char *vm = NULL;
        if (asprintf(&vm,
                     "evicted by gpuvisor for %s/%s (priority %d) on node %s; this pod held %s",
                     pns ? pns : "", pname ? pname : "", (int)prio, node, r->encoded) < 0)
            vm = NULL;
        ev_set(&b->ev[b->n++], r->ns, r->name, r->uid, "GPUPreempted", vm, "gpu-preempted");
    }
    return b;
}

static void events_post(struct ev_batch *b)
{
    if (b == NULL)
        return;
    pthread_mutex_lock(&b->owner->ev_mu);
    b->owner->ev_threads++; /* ev_post_all counts it down, on either path */
    pthread_mutex_unlock(&b->owner->ev_mu);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, ev_post_all, b) != 0) {
        b->kube = NULL; /* no thread: free without posting */
        ev_post_all(b);
    }
    pthread_attr_destroy(&attr);
}

/* ---- the verb ---------------------------------------------------------- */

/* The best node found so far: its victims (copies: the engine's uids are
 * valid only under the lock) with their priorities, and its cost. */
struct best {
    size_t node; /* index into args.nodes; SIZE_MAX: none */
    struct gv_alloc_victim_plan plan;
    char **victims;
    int64_t *prios; /* INT64_MIN: not a pod gpuvisor placed */
    size_t n_victims;
    int64_t pdb;
    struct gv_alloc_assignment a;
};

static void best_clear_victims(struct best *b)
{
    for (size_t k = 0; b->victims != NULL && k < b->n_victims; k++)
        free(b->victims[k]);
    free(b->victims);
    free(b->prios);
    b->victims = NULL;
    b->prios = NULL;
    b->n_victims = 0;
}

/* The candidates of one node: kube-scheduler's victims first (forced),
 * then the pods the engine has marked as possible victims there (bound on
 * it, with their priorities: gv_sched_preempt_pod).  Heap array in *out. */
static gv_status node_candidates(struct gv_sched *s, const struct gv_ext_preempt_node *nd,
                                 const char *self, struct gv_alloc_victim **out, size_t *n,
                                 struct gv_error *err)
{
    /* one walk of the node's pods in the usual case: room for 128 */
    size_t cap = 128, marked;
    struct gv_alloc_victim *c = NULL;
    for (;;) {
        struct gv_alloc_victim *nc = realloc(c, (cap + nd->n_victims + 1) * sizeof(*c));
        if (nc == NULL) {
            free(c);
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        }
        c = nc;
        marked = gv_alloc_node_victims(s->cluster, nd->name, c + nd->n_victims, cap);
        if (marked <= cap)
            break;
        cap = marked;
    }
    for (size_t i = 0; i < nd->n_victims; i++)
        c[i] = (struct gv_alloc_victim){.uid = nd->victims[i], .forced = true};
    /* the preemptor itself is never among them: a placed pod does not
     * preempt (gv_sched_handle_preempt), and the lock is held throughout */
    (void)self;
    size_t k = nd->n_victims + marked;
    /* kube-scheduler's victims that gpuvisor placed: their priorities */
    for (size_t i = 0; i < nd->n_victims; i++)
        for (size_t j = nd->n_victims; j < k; j++)
            if (strcmp(c[j].uid, c[i].uid) == 0)
                c[i].priority = c[j].priority;
    *out = c;
    *n = k;
    return GV_OK;
}

/* Whether c[k] (k >= nf) is also one of kube-scheduler's own victims
 * c[0..nf): such a pod is listed twice (node_candidates). */
static bool also_forced(const struct gv_alloc_victim *c, size_t nf, size_t k)
{
    for (size_t j = 0; j < nf && k >= nf; j++)
        if (strcmp(c[j].uid, c[k].uid) == 0)
            return true;
    return false;
}

/* The indices k of c[0..nc) with take[k], in kube-scheduler's order of
 * importance (MoreImportantPod): highest priority first, then the oldest
 * (the engine lists the most recently placed first).  A pod listed twice
 * once (as forced, c[0..nf)).  Returns how many. */
static size_t importance_order(const struct gv_alloc_victim *c, size_t nc, size_t nf,
                               const bool *take, size_t *ord)
{
    size_t n = 0;
    for (size_t k = nc; k-- > 0;) {
        if (!take[k] || also_forced(c, nf, k))
            continue;
        size_t j = n++;
        for (; j > 0 && c[ord[j - 1]].priority < c[k].priority; j--)
            ord[j] = ord[j - 1];
        ord[j] = k;
    }
    return n;
}

/* Which candidates violate a PodDisruptionBudget, as kube-scheduler marks
 * its potential victims: every pod of lower priority (and its own victims),
 * walked most important first.  The engine prefers sets without them. */
static gv_status mark_pdb(struct gv_sched *s, struct gv_sched_pdb_walk *w,
                          struct gv_alloc_victim *c, size_t nc, size_t nf, int32_t prio,
                          struct gv_error *err)
{
    bool *take = calloc(nc + 1, sizeof(*take));
    size_t *ord = calloc(nc + 1, sizeof(*ord));
    if (take == NULL || ord == NULL) {
        free(take);
        free(ord);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    for (size_t k = 0; k < nc; k++)
        take[k] = c[k].forced || c[k].priority < prio;
    size_t n = importance_order(c, nc, nf, take, ord);
    gv_sched_pdb_walk_reset(w);
    for (size_t j = 0; j < n; j++)
        c[ord[j]].pdb_violation = gv_sched_pdb_walk_step(w, s, c[ord[j]].uid);
    for (size_t k = nf; k < nc && nf > 0; k++) /* the second entry of a pod listed twice */
        for (size_t j = 0; j < nf; j++)
            if (strcmp(c[j].uid, c[k].uid) == 0)
                c[k].pdb_violation = c[j].pdb_violation;
    free(take);
    free(ord);
    return GV_OK;
}

/* NumPDBViolations of the answer: kube-scheduler's own count for its
 * victims, plus the GPU victims added here that violate a budget, counted
 * by its rule over the whole final set (its victims spend budgets too
 * where gpuvisor knows their labels).  UINT32_MAX on no memory. */
static uint32_t count_pdb(struct gv_sched *s, struct gv_sched_pdb_walk *w,
                          const struct gv_alloc_victim *c, size_t nc, size_t nf,
                          const uint32_t *chosen, uint32_t n_chosen, int64_t kube_count)
{
    uint32_t n = kube_count < 0 ? 0 : kube_count > UINT32_MAX / 2 ? UINT32_MAX / 2
                                                                  : (uint32_t)kube_count;
    if (w == NULL)
        return n;
    bool *take = calloc(nc + 1, sizeof(*take));
    size_t *ord = calloc(nc + 1, sizeof(*ord));
    if (take == NULL || ord == NULL) {
        free(take);
        free(ord);
        return UINT32_MAX;
    }
    for (size_t k = 0; k < nc; k++)
        take[k] = c[k].forced;
    for (uint32_t k = 0; k < n_chosen; k++)
        take[chosen[k]] = true;
    size_t m = importance_order(c, nc, nf, take, ord);
    gv_sched_pdb_walk_reset(w);
    for (size_t j = 0; j < m; j++) {
        bool v = gv_sched_pdb_walk_step(w, s, c[ord[j]].uid);
        n += v && !c[ord[j]].forced; /* kube-scheduler counted its own */
    }
    free(take);
    free(ord);
    return n;
}

/* Evaluates one candidate node; keeps it in *b when cheaper. */
static gv_status consider_node(struct gv_sched *s, const struct gv_ext_preempt_args *args, size_t i,
                               const struct gv_alloc_request *req, int32_t prio, const char *self,
                               struct gv_sched_pdb_walk *w, struct best *b, struct gv_error *err)
{
    const struct gv_ext_preempt_node *nd = &args->nodes[i];
    const struct snode *sn = gv_sched_node_find(s, nd->name);
    if (!gv_sched_node_usable(s, sn, time(NULL)) || !sn->in_engine)
        return GV_OK; /* no live agent: nothing to free there */
    struct gv_alloc_victim *c = NULL;
    size_t nc = 0;
    gv_status st = node_candidates(s, nd, self, &c, &nc, err);
    if (st != GV_OK)
        return st;
    uint32_t *chosen = calloc(nc + 1, sizeof(*chosen));
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    struct gv_alloc_victim_plan plan;
    if (chosen == NULL || a == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    if (w != NULL && (st = mark_pdb(s, w, c, nc, nd->n_victims, prio, err)) != GV_OK)
        goto out;
    st = gv_alloc_victims(s->cluster, req, prio, nd->name, c, nc, chosen, &plan, a, err);
    if (st != GV_OK || !plan.fits) {
        gv_debug("preempt: pod %s: node %s dropped: %s", self, nd->name, plan.reason);
        st = st == GV_ENOTFOUND ? GV_OK : st;
        goto out;
    }
    /* kube-scheduler's victims all go, placed by gpuvisor or not; they
     * count in the cost as they count in its own choice. */
    uint32_t extra = 0, n_chosen = plan.n;
    for (uint32_t k = 0; k < n_chosen; k++)
        extra += !c[chosen[k]].forced;
    size_t nv = nd->n_victims + extra;
    plan.n = (uint32_t)nv;
    plan.pdb_violations = count_pdb(s, w, c, nc, nd->n_victims, chosen, n_chosen, nd->pdb_violations);
    if (plan.pdb_violations == UINT32_MAX) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    int cmp = b->node == SIZE_MAX ? -1 : gv_alloc_victim_plan_cmp(&plan, &b->plan);
    if (cmp > 0 || (cmp == 0 && strcmp(nd->name, args->nodes[b->node].name) >= 0))
        goto out;
    best_clear_victims(b);
    b->victims = calloc(nv + 1, sizeof(*b->victims));
    b->prios = calloc(nv + 1, sizeof(*b->prios));
    if (b->victims == NULL || b->prios == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < nc && b->n_victims < nv; k++) {
        bool in = c[k].forced;
        for (uint32_t j = 0; j < n_chosen && !in; j++)
            in = chosen[j] == k;
        if (!in)
            continue;
        /* a forced victim gpuvisor placed has its priority from the mark */
        bool placed = !c[k].forced;
        for (size_t j = nd->n_victims; j < nc && !placed; j++)
            placed = strcmp(c[j].uid, c[k].uid) == 0;
        b->prios[b->n_victims] = placed ? c[k].priority : INT64_MIN;
        if ((b->victims[b->n_victims++] = strdup(c[k].uid)) == NULL) {
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto out;
        }
    }
    b->node = i;
    b->plan = plan;
    b->pdb = (int64_t)plan.pdb_violations;
    b->a = *a;
out:
    free(a);
    free(chosen);
    free(c);
    return st;
}

static void respond(struct gv_http_response *resp, char *text)
{
    if (text == NULL) {
        gv_http_respond_error(resp, 500, "out of memory");
        return;
    }
    gv_http_respond(resp, 200, "application/json", text);
    free(text);
}

static void count_victims(struct gv_sched *s, const struct best *b)
{
    for (size_t k = 0; k < b->n_victims; k++) {
        char key[24];
        if (b->prios[k] == INT64_MIN)
            snprintf(key, sizeof(key), "unknown"); /* kube-scheduler's own, not a GPU pod */
        else
            snprintf(key, sizeof(key), "%" PRId64, b->prios[k]);
        json_t *cur = json_object_get(s->preempt->victims_by_prio, key);
        json_object_set_new(s->preempt->victims_by_prio, key,
                            json_integer(json_integer_value(cur) + 1));
    }
}

void gv_sched_handle_preempt(void *ctx, const struct gv_http_request *hreq,
                             struct gv_http_response *resp)
{
    struct gv_sched *s = ctx;
    struct gv_ext_preempt_args args;
    struct gv_error err = {0};
    struct gv_alloc_request *req = NULL;
    struct best b = {.node = SIZE_MAX};
    if (gv_ext_preempt_args_parse(hreq->body, hreq->body_len, &args, &err) != GV_OK) {
        gv_http_respond_error(resp, err.code == GV_ENOMEM ? 500 : 400, err.msg);
        return;
    }
    const char *uid = pod_uid(args.pod);
    const char *policy = json_string_value(
        json_object_get(json_object_get(args.pod, "spec"), "preemptionPolicy"));
    if (gv_podspec_request(&s->cfg.alloc, args.pod, &req, &err) != GV_OK ||
        (req->n_containers > 0 && (uid == NULL || *uid == '\0'))) {
        /* an invalid request fits nowhere: evicting cannot help */
        respond(resp, gv_ext_preempt_result_encode(NULL, 0));
        goto out;
    }
    if (req->n_containers == 0) {
        /* not a GPU-slice pod: kube-scheduler's own choice stands */
        pthread_mutex_lock(&s->lock);
        s->preempt->calls_skipped++;
        pthread_mutex_unlock(&s->lock);
        respond(resp, gv_ext_preempt_result_encode(args.nodes, args.n_nodes));
        goto out;
    }
    snprintf(req->uid, sizeof(req->uid), "%s", uid);
    int32_t prio = gv_sched_pod_priority(args.pod);
    pthread_mutex_lock(&s->lock);
    const struct srec *r = gv_sched_rec_find(s, uid);
    bool skip = (policy != NULL && strcmp(policy, "Never") == 0) ||
                (r != NULL && gv_sched_phase_placed(r->phase));
    gv_status st = GV_OK;
    if (!skip)
        st = exclude_for(s, uid, prio, req, &err);
    /* the budgets as they are now, for every node of this call (NULL: none) */
    struct gv_sched_pdb_walk *w = skip ? NULL : gv_sched_pdb_walk_new(s);
    for (size_t i = 0; !skip && st == GV_OK && i < args.n_nodes; i++)
        st = consider_node(s, &args, i, req, prio, uid, w, &b, &err);
    gv_sched_pdb_walk_free(w);
    struct ev_batch *events = NULL;
    char *hold_text = NULL;
    if (st == GV_OK && b.node != SIZE_MAX)
        st = hold_set(s, uid, prio, &b.a, &hold_text, &err);
    if (st == GV_OK && b.node != SIZE_MAX)
        events = events_of(s, args.pod, args.nodes[b.node].name, hold_find(s->preempt, uid),
                           &b.plan, b.victims, b.n_victims, prio);
    if (st == GV_OK) {
        if (skip)
            s->preempt->calls_skipped++;
        else if (b.node == SIZE_MAX)
            s->preempt->calls_none++;
        else {
            s->preempt->calls_victims++;
            count_victims(s, &b);
        }
    }
    pthread_mutex_unlock(&s->lock);
    events_post(events);
    if (hold_text != NULL && s->kube != NULL) {
        /* on the pod before kube-scheduler evicts anyone: a restart from
         * here on finds the hold (outside the lock: an API round trip) */
        const json_t *md = json_object_get(args.pod, "metadata");
        struct gv_error werr = {0};
        if (gv_sched_hold_write(s->kube, json_string_value(json_object_get(md, "namespace")),
                                json_string_value(json_object_get(md, "name")), uid, hold_text,
                                &werr) != GV_OK)
            gv_warn("preempt: pod %s: hold not written on the pod (%s): a restart before its "
                    "next filter loses it", uid, werr.msg);
    }
    free(hold_text);
    if (st != GV_OK) {
        gv_http_respond_error(resp, 500, err.msg);
        goto out;
    }
    if (b.node == SIZE_MAX) {
        gv_info("preempt: pod %s: no candidate node can make room%s", uid,
                skip ? " (preemptionPolicy Never or already placed)" : "");
        respond(resp, gv_ext_preempt_result_encode(NULL, 0));
        goto out;
    }
    struct gv_ext_preempt_node ans = {.name = args.nodes[b.node].name,
                                      .victims = (const char **)b.victims,
                                      .n_victims = b.n_victims, .pdb_violations = b.pdb};
    gv_info("preempt: pod %s: node %s, %zu victim(s) free GPUs for it", uid, ans.name,
            b.n_victims);
    respond(resp, gv_ext_preempt_result_encode(&ans, 1));
out:
    best_clear_victims(&b);
    gv_alloc_request_free(req);
    gv_ext_preempt_args_clear(&args);
}

void gv_sched_preempt_metrics(struct gv_sched *s, FILE *f)
{
    struct gv_sched_preempt *p = s->preempt;
    if (p == NULL)
        return;
    holds_expire(s);
    size_t live = 0;
    for (size_t i = 0; i < p->n_holds; i++)
        live += !p->holds[i].consumed;
    fprintf(f,
            "# HELP gpuvisor_scheduler_preemptions_total Preempt calls by outcome: victims (a "
            "node and its victims returned), none (no candidate can make room), skipped (not a "
            "GPU-slice pod, preemptionPolicy Never, or already placed).\n"
            "# TYPE gpuvisor_scheduler_preemptions_total counter\n"
            "gpuvisor_scheduler_preemptions_total{result=\"victims\"} %" PRIu64 "\n"
            "gpuvisor_scheduler_preemptions_total{result=\"none\"} %" PRIu64 "\n"
            "gpuvisor_scheduler_preemptions_total{result=\"skipped\"} %" PRIu64 "\n",
            p->calls_victims, p->calls_none, p->calls_skipped);
    fprintf(f, "# HELP gpuvisor_scheduler_preemption_victims_total Victims returned to "
               "kube-scheduler, by the victim's priority.\n"
               "# TYPE gpuvisor_scheduler_preemption_victims_total counter\n");
    const char *key;
    json_t *v;
    json_object_foreach(p->victims_by_prio, key, v)
        fprintf(f, "gpuvisor_scheduler_preemption_victims_total{priority=\"%s\"} %" PRId64 "\n",
                key, (int64_t)json_integer_value(v));
    fprintf(f,
            "# HELP gpuvisor_scheduler_nominated_holds GPUs held for preemptors until their "
            "next filter.\n# TYPE gpuvisor_scheduler_nominated_holds gauge\n"
            "gpuvisor_scheduler_nominated_holds %zu\n",
            live);
}
