/*
 * Cluster state from the API (nodes with the agent's inventory, pods with
 * assignments) and the life cycle of a placement:
 *
 *   filter: pick + place in the engine under the lock  -> REC_RESERVED
 *   bind:   annotate the pod (resourceVersion precondition), create Binding
 *           -> record dropped, placement kept (the pod's annotation backs it)
 *   expiry: RESERVED older than the TTL, or annotated-but-unbound pods whose
 *           gpuvisor.io/assigned-at is older than the TTL -> released
 *   pod finished / deleted -> released
 *
 * The lock covers only in-memory work; API round trips happen outside it,
 * so a bind never serialises other binds or filters on the same node.
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
#include "scheduler/preempt.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/whole.h"

#define ANN_ASSIGNMENT GV_ALLOC_ASSIGNMENT_ANNOTATION
#define ANN_ASSIGNED_NODE "gpuvisor.io/assigned-node"
#define ANN_ASSIGNED_AT "gpuvisor.io/assigned-at"
/* A PENDING record (metrics only) outlives its last filter by this long:
 * kube-scheduler retries unschedulable pods at least every 5 minutes, and we
 * never see pending pods being deleted (the pod informer watches assigned
 * pods only). */
#define PENDING_TTL_S 600.0


static const char *str_at(json_t *obj, const char *a, const char *b)
{
    json_t *v = json_object_get(obj, a);
    if (b != NULL)
        v = json_object_get(v, b);
    return json_string_value(v);
}

static const char *annotation(json_t *obj, const char *key)
{
    return gv_podspec_annotation(obj, key);
}

static uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* ---- nodes ----------------------------------------------------------- */

static void node_set_malformed(struct snode *n, const char *why)
{
    if (n->state != NODE_MALFORMED || n->reason == NULL || strcmp(n->reason, why) != 0)
        gv_warn("node %s skipped: %s", n->name, why);
    free(n->reason);
    n->reason = strdup(why);
    n->state = NODE_MALFORMED;
}

/* Applies the node's inventory annotation to the engine (called with the
 * lock), through the shared Node -> engine codec (src/contracts/podspec.h).
 * An unreadable one leaves the last good model in place (pods on the node
 * keep their usage) and marks the node unusable with the reason. */
static void node_apply_inventory(struct gv_sched *s, struct snode *n, json_t *node)
{
    struct gv_podspec_node *pn = NULL;
    struct gv_error err = {0};
    if (gv_podspec_node(node, &pn, &err) != GV_OK) {
        char why[GV_ERROR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "malformed inventory: %s", err.msg);
        node_set_malformed(n, why);
        return;
    }
    /* Host CPU and memory are kube-scheduler's to check, against every pod;
     * the engine here sees GPU pods only. */
    pn->spec.cpu_milli = 0;
    pn->spec.mem_mib = 0;
    size_t ng = pn->spec.n_gpus;
    uint64_t max_mib = 0;
    for (size_t i = 0; i < ng; i++) {
        const struct gv_alloc_gpu_spec *g = &pn->spec.gpus[i];
        if (g->healthy && g->mem_mib > max_mib)
            max_mib = g->mem_mib;
    }
    if (gv_alloc_node_upsert(s->cluster, &pn->spec, &err) != GV_OK) {
        char why[GV_ERROR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "inventory rejected: %s", err.msg);
        node_set_malformed(n, why);
        goto out;
    }
    /* NVLink / PCIe switch groups for multi-GPU choices (alloc/topology.c) */
    gv_alloc_node_set_links(s->cluster, pn->spec.name, pn->nvlink_group, pn->pcie_group, ng,
                            NULL);
    if (n->state != NODE_OK)
        gv_info("node %s: %zu GPU(s) from the agent's inventory", n->name, ng);
    n->n_gpus = (uint32_t)ng;
    n->n_whole = pn->n_whole;
    gv_sched_whole_node(s, n->name, pn); /* MIG, passthrough, mdev: placed by count */
    n->max_gpu_mib = max_mib;
    n->in_engine = true;
    n->state = NODE_OK;
    free(n->reason);
    n->reason = NULL;
out:
    gv_podspec_node_free(pn);
}

static void node_replace(struct gv_sched *s, const char *node);

void gv_sched_node_update(struct gv_sched *s, json_t *node)
{
    const char *name = str_at(node, "metadata", "name");
    if (name == NULL)
        return;
    const char *inv = annotation(node, GV_INVENTORY_ANNOTATION);
    const char *hb = annotation(node, GV_INVENTORY_HEARTBEAT_ANNOTATION);
    pthread_mutex_lock(&s->lock);
    struct snode *n = gv_sched_node_add(s, name);
    if (n == NULL) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    time_t t = 0;
    if (hb == NULL)
        n->heartbeat = 0;
    else if (gv_sched_parse_time(hb, &t) == 0)
        n->heartbeat = t;
    else
        n->heartbeat = 0; /* unreadable heartbeat: treated as stale */
    if (hb != NULL && t == 0)
        gv_warn("node %s: unreadable %s annotation '%.40s'", name,
                GV_INVENTORY_HEARTBEAT_ANNOTATION, hb);
    if (inv == NULL) {
        if (n->state != NODE_NO_INVENTORY)
            gv_info("node %s has no %s annotation (no gpuvisor-node agent)", name,
                    GV_INVENTORY_ANNOTATION);
        n->state = NODE_NO_INVENTORY;
        n->inv_hash = 0;
    } else {
        uint64_t h = hash_text(inv);
        /* Heartbeats rewrite the node every few seconds; the inventory
         * rarely changes, so only a different text is parsed again. */
        if (h != n->inv_hash || n->state == NODE_NO_INVENTORY) {
            n->inv_hash = h;
            node_apply_inventory(s, n, node);
            /* New or changed inventory: recorded pods on this node are
             * placed again (a GPU that vanished and came back has no usage
             * in the engine; pods seen before their node wait for it). */
            if (n->state == NODE_OK && n->in_engine)
                node_replace(s, name);
        }
    }
    pthread_mutex_unlock(&s->lock);
}

void gv_sched_node_delete(struct gv_sched *s, json_t *node)
{
    const char *name = str_at(node, "metadata", "name");
    if (name == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    struct snode *n = gv_sched_node_find(s, name);
    if (n != NULL && n->in_engine)
        gv_alloc_node_remove(s->cluster, name, NULL);
    gv_sched_whole_node(s, name, NULL);
    gv_sched_node_remove(s, name);
    pthread_mutex_unlock(&s->lock);
    gv_info("node %s deleted", name);
}

/* Keep in step with gv_sched_node_usable (sched_internal.h). */
const char *gv_sched_node_unusable(struct gv_sched *s, const struct snode *n, time_t now, char *buf,
                                   size_t cap)
{
    if (n == NULL)
        return "no gpuvisor inventory for this node (gpuvisor-node not running here?)";
    switch (n->state) {
    case NODE_NO_INVENTORY:
        return "no gpuvisor inventory for this node (gpuvisor-node not running here?)";
    case NODE_MALFORMED:
        snprintf(buf, cap, "gpuvisor-node inventory unusable: %s", n->reason ? n->reason : "?");
        return buf;
    case NODE_OK:
        break;
    }
    if (n->heartbeat == 0) {
        snprintf(buf, cap, "gpuvisor-node agent stale: no readable %s",
                 GV_INVENTORY_HEARTBEAT_ANNOTATION);
        return buf;
    }
    if (now - n->heartbeat > s->cfg.heartbeat_timeout_s) {
        snprintf(buf, cap, "gpuvisor-node agent stale: last heartbeat %lds ago (limit %lds)",
                 (long)(now - n->heartbeat), s->cfg.heartbeat_timeout_s);
        return buf;
    }
    return NULL;
}

/* ---- pods ------------------------------------------------------------ */

static bool pod_finished(json_t *pod)
{
    const char *phase = str_at(pod, "status", "phase");
    return phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

gv_status gv_sched_place_encoded(struct gv_sched *s, const char *uid, const char *ns,
                                 const char *name, const char *encoded, enum rec_phase phase,
                                 struct gv_error *err)
{
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    struct gv_alloc_request *req = NULL;
    gv_status st;
    if (a == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    if ((st = gv_alloc_assignment_decode(encoded, strlen(encoded), a, err)) != GV_OK ||
        (st = gv_alloc_request_new(&req, err)) != GV_OK)
        goto out;
    /* The engine accounts GPUs by the assignment's devices; the request
     * only has to name the same containers with the same GPU counts. */
    snprintf(req->uid, sizeof(req->uid), "%s", uid);
    snprintf(req->ns, sizeof(req->ns), "%s", ns ? ns : "");
    snprintf(req->name, sizeof(req->name), "%s", name ? name : "");
    req->n_containers = a->n_containers;
    for (uint32_t i = 0; i < a->n_containers; i++) {
        memcpy(req->containers[i].name, a->containers[i].name, sizeof(req->containers[i].name));
        req->containers[i].num_gpu = a->containers[i].n_devices;
    }
    if ((st = gv_alloc_place(s->cluster, req, a, err)) != GV_OK)
        goto out;
    struct srec *r = gv_sched_rec_get(s, uid, ns, name);
    if (r == NULL || gv_sched_rec_set(r, phase, a->node, encoded, NULL) != GV_OK) {
        gv_alloc_release(s->cluster, uid, NULL);
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    if (st == GV_OK) /* charged to its namespace's quota */
        gv_sched_quota_placed(s, uid, ns, a);
out:
    gv_alloc_request_free(req);
    free(a);
    return st;
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
 * A truth-table entry is packed in one JSON string, "B\tAT\tRV\tNS\tNAME\tTEXT"
 * (B: 1 when bound; AT: assigned-at, epoch seconds; TEXT: the assignment):
 * ~250 bytes a pod, where a JSON object of the same fields cost ~800.
 */
struct truth {
    bool bound;
    time_t at;
    char rv[32];
    char ns[GV_ALLOC_NODE_MAX], name[GV_ALLOC_NODE_MAX];
    const char *text; /* into the entry */
};

static json_t *truth_make(bool bound, time_t at, const char *rv, const char *ns, const char *name,
                          const char *text)
{
    char *buf = NULL;
    if (asprintf(&buf, "%d\t%lld\t%s\t%s\t%s\t%s", bound ? 1 : 0, (long long)at, rv ? rv : "",
                 ns ? ns : "", name ? name : "", text) < 0)
        return NULL;
    json_t *j = json_string(buf);
    free(buf);
    return j;
}

/* Copies the field at *p (up to a tab) into buf; false when absent or long. */
static bool truth_field(const char **p, char *buf, size_t cap)
{
    const char *tab = strchr(*p, '\t');
    size_t n = tab ? (size_t)(tab - *p) : 0;
    if (tab == NULL || n >= cap)
        return false;
    memcpy(buf, *p, n);
    buf[n] = '\0';
    *p = tab + 1;
    return true;
}

static bool truth_get(json_t *t, struct truth *o)
{
    const char *p = json_string_value(t);
    char num[32];
    if (p == NULL || !truth_field(&p, num, sizeof(num)))
        return false;
    o->bound = num[0] == '1';
    if (!truth_field(&p, num, sizeof(num)))
        return false;
    o->at = (time_t)strtoll(num, NULL, 10);
    if (!truth_field(&p, o->rv, sizeof(o->rv)) || !truth_field(&p, o->ns, sizeof(o->ns)) ||
        !truth_field(&p, o->name, sizeof(o->name)))
        return false;
    o->text = p;
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
static const char *truth_live(struct gv_sched *s, json_t *t, time_t wall)
{
    struct truth o;
    if (!truth_get(t, &o))
        return NULL;
    if (!o.bound && (o.at == 0 || wall - o.at > s->cfg.reservation_ttl_s))
        return NULL;
    return o.text;
}

/* Have all GPUs of an assignment a model in the engine (its node and each
 * uuid)?  A placement on a GPU the inventory does not list waits. */
static bool encoded_placeable(struct gv_sched *s, const char *text)
{
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    bool ok = a != NULL && gv_alloc_assignment_decode(text, strlen(text), a, NULL) == GV_OK &&
              gv_alloc_node_exists(s->cluster, a->node);
    for (uint32_t i = 0; ok && i < a->n_containers; i++)
        for (uint32_t d = 0; ok && d < a->containers[i].n_devices; d++) {
            struct gv_alloc_gpu_usage u;
            ok = gv_alloc_gpu_usage_get(s->cluster, a->node, a->containers[i].devices[d].uuid, &u,
                                        NULL) == GV_OK;
        }
    free(a);
    return ok;
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
    if (r != NULL && (r->phase == REC_RESERVED || r->phase == REC_BINDING))
        return;
    json_t *t = json_object_get(s->truth, uid);
    const char *text = truth_live(s, t, wall);
    struct truth o;
    bool bound = truth_get(t, &o) && o.bound;
    if (text == NULL) {
        if (r != NULL && r->phase == REC_UNBOUND)
            gv_sched_forget_pod(s, uid); /* bind failed elsewhere, or lapsed */
        return;
    }
    enum rec_phase want = bound ? REC_BOUND : REC_UNBOUND;
    if (r != NULL && gv_sched_phase_placed(r->phase) && r->encoded != NULL &&
        strcmp(r->encoded, text) == 0) {
        if (r->phase == REC_UNBOUND && bound)
            r->phase = REC_BOUND;
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
    if (pod_finished(pod)) {
        pod_gone(s, uid);
    } else {
        truth_note(s, pod);
        gv_sched_apply_truth(s, uid, time(NULL));
    }
    gv_sched_whole_pod(s, pod, pod_finished(pod));
    gv_sched_preempt_pod(s, pod, pod_finished(pod));
    pthread_mutex_unlock(&s->lock);
}

void gv_sched_pod_delete(struct gv_sched *s, json_t *pod)
{
    const char *uid = str_at(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    pod_gone(s, uid);
    gv_sched_whole_pod_gone(s, uid);
    gv_sched_preempt_pod_gone(s, uid);
    pthread_mutex_unlock(&s->lock);
}

/* Expiry at (now, wall); lock held. */
static void expire_locked(struct gv_sched *s, double now, time_t wall)
{
    gv_sched_whole_expire(s, now);
    for (size_t i = s->n_recs; i-- > 0;) {
        struct srec *r = s->recs[i];
        bool expired = false;
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

/* ---- self-check ------------------------------------------------------ */

/* Is the truth behind a BOUND record of our own bind not delivered yet?
 * Our bind created the Binding; until the pod informer shows the pod bound
 * (it may still be at a version before our annotation, or before the
 * Binding), the record stands: only deletion or termination, which the
 * informer does deliver, frees a pod we bound. */
static bool truth_lags(const struct srec *r, json_t *t)
{
    struct truth o;
    return r->phase == REC_BOUND && r->bound_here && !(truth_get(t, &o) && o.bound);
}

/* What uid's placement should be per the API (or our own live reservation
 * or bind), or NULL for none. */
static const char *expected_text(struct gv_sched *s, const struct srec *r, const char *uid,
                                 time_t wall)
{
    if (r != NULL && (r->phase == REC_RESERVED || r->phase == REC_BINDING))
        return r->encoded;
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
    bool here = r->bound_here;
    gv_status st = gv_error_set(err, GV_ENOMEM, "out of memory");
    if (text != NULL && ns != NULL && name != NULL && uid != NULL) {
        if (gv_alloc_is_placed(s->cluster, uid))
            gv_alloc_release(s->cluster, uid, NULL);
        st = gv_sched_place_encoded(s, uid, ns, name, text, ph, err);
        struct srec *nr = gv_sched_rec_find(s, uid);
        if (nr != NULL) {
            nr->assigned_at = at;
            nr->bound_here = here;
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
static void node_replace(struct gv_sched *s, const char *node)
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

/* ---- life cycle ------------------------------------------------------ */

/*
 * Informer transforms: what the caches keep.  Nodes and pods are applied to
 * the engine here, from the full objects, and the caches keep only what a
 * later delete needs: for pods the uid as a JSON string; for nodes nothing
 * but the cache's key, which is the node's name (the value is the shared
 * json_true(); a string was 80 of the ~180 bytes a node cost the cache).
 * At 5,000 nodes the inventories, and at thousands of GPU pods their specs,
 * would otherwise cost tens of MiB for nothing.  What the accounting needs
 * of a pod (its assignment, node, phase) goes to the truth table (s->truth).
 */
static json_t *node_transform(void *ud, json_t *node)
{
    gv_sched_node_update(ud, node);
    return json_true();
}

static json_t *pod_transform(void *ud, json_t *pod)
{
    gv_sched_pod_update(ud, pod);
    gv_sched_obs_pod_update(ud, pod);
    const char *uid = str_at(pod, "metadata", "uid");
    return uid != NULL ? json_string(uid) : NULL;
}

static void inf_node_delete(void *ud, const char *name, json_t *cached)
{
    (void)cached;
    json_t *node = json_pack("{s:{s:s}}", "metadata", "name", name);
    if (node != NULL)
        gv_sched_node_delete(ud, node);
    json_decref(node);
}

/* The cache is keyed by namespace/name: a pod deleted and created again
 * under the same name while the watch was down arrives as an update. */
static void inf_pod_update(void *ud, json_t *old_uid, json_t *new_uid)
{
    if (json_equal(old_uid, new_uid))
        return;
    json_t *pod = json_pack("{s:{s:O}}", "metadata", "uid", old_uid);
    if (pod != NULL)
        gv_sched_pod_delete(ud, pod);
    json_decref(pod);
}

static void inf_pod_delete(void *ud, json_t *uid)
{
    json_t *pod = json_pack("{s:{s:O}}", "metadata", "uid", uid);
    if (pod != NULL) {
        gv_sched_pod_delete(ud, pod);
        gv_sched_obs_pod_delete(ud, pod);
    }
    json_decref(pod);
}

gv_status gv_sched_new(const struct gv_sched_config *cfg, struct gv_kube_client *kube,
                       struct gv_sched **out, struct gv_error *err)
{
    gv_jalloc_init(); /* before the informers' threads parse JSON (gv_ext_args_parse places its parse) */
    struct gv_sched *s = calloc(1, sizeof(*s));
    gv_status st;
    if (s == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->stop_lock, NULL);
    pthread_cond_init(&s->stop_cond, NULL);
    if (gv_sched_obs_new(s) != GV_OK) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    /* The config's strings are copied so the caller may clear its own. */
    s->cfg = *cfg;
    memset(s->cfg.names_storage, 0, sizeof(s->cfg.names_storage));
    s->cfg.scheduler_name = strdup(cfg->scheduler_name);
    s->cfg.node_label_selector = cfg->node_label_selector ? strdup(cfg->node_label_selector) : NULL;
    const char **res[6] = {&s->cfg.alloc.res.gpu,      &s->cfg.alloc.res.mem,
                           &s->cfg.alloc.res.mem_pct,  &s->cfg.alloc.res.cores,
                           &s->cfg.alloc.res.priority, &s->cfg.alloc.res.mem_gib};
    for (size_t i = 0; i < 6; i++) {
        if (*res[i] == NULL)
            continue;
        s->cfg.names_storage[i] = strdup(*res[i]);
        if (s->cfg.names_storage[i] == NULL) {
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
        *res[i] = s->cfg.names_storage[i];
    }
    if (s->cfg.scheduler_name == NULL || (s->truth = json_object()) == NULL ||
        (s->preempt = gv_sched_preempt_new()) == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    if ((st = gv_alloc_cluster_new(&s->cfg.alloc, &s->cluster, err)) != GV_OK ||
        (st = gv_sched_whole_new(&s->whole, err)) != GV_OK ||
        (st = gv_sched_quota_init(s, kube, err)) != GV_OK)
        goto fail;
    s->kube = kube;
    if (kube != NULL) {
        /* Nodes are applied in their transform (see above). */
        struct gv_informer_callbacks ncb = {NULL, NULL, NULL, s};
        struct gv_informer_callbacks pcb = {NULL, inf_pod_update, inf_pod_delete, s};
        struct gv_informer_opts nopts = {.label_selector = s->cfg.node_label_selector,
                                         .transform = node_transform,
                                         .transform_ud = s,
                                         .on_delete_key = inf_node_delete};
        /* Pods of our scheduler name: every pod the extender can place,
         * by a field the API server sets at creation and never lets
         * anyone change (a label would be the tenant's to remove). */
        char fsel[300];
        snprintf(fsel, sizeof(fsel), "spec.schedulerName=%s", s->cfg.scheduler_name);
        struct gv_informer_opts popts = {
            .field_selector = fsel, .transform = pod_transform, .transform_ud = s};
        if ((st = gv_informer_new(kube, "/api/v1/nodes", &nopts, &ncb, &s->node_inf, err)) !=
                GV_OK ||
            (st = gv_informer_new(kube, "/api/v1/pods", &popts, &pcb, &s->pod_inf, err)) != GV_OK)
            goto fail;
    }
    *out = s;
    return GV_OK;
fail:
    gv_sched_free(s);
    return st;
}

static void *sweeper_main(void *arg)
{
    struct gv_sched *s = arg;
    bool trimmed = false;
    pthread_mutex_lock(&s->stop_lock);
    while (!s->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->stop_cond, &s->stop_lock, &ts);
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->stop_lock);
        gv_sched_expire(s);
        if (gv_sched_ready(s) && gv_sched_now() - s->last_self_check >= (double)s->cfg.self_check_s) {
            gv_sched_self_check(s);
            s->last_self_check = gv_sched_now();
        }
        if (!trimmed && gv_sched_ready(s)) {
            /* The initial LISTs (every node, every GPU pod) were parsed and
             * dropped; hand those pages back to the system once. */
            malloc_trim(0);
            trimmed = true;
        }
        pthread_mutex_lock(&s->stop_lock);
    }
    pthread_mutex_unlock(&s->stop_lock);
    return NULL;
}

gv_status gv_sched_start(struct gv_sched *s, struct gv_error *err)
{
    gv_status st;
    if ((st = gv_sched_quota_start(s, err)) != GV_OK) /* limits before the first filter */
        return st;
    if (s->node_inf != NULL) {
        /* Nodes first, so pods replayed at start find their node. */
        if ((st = gv_informer_start(s->node_inf, err)) != GV_OK)
            return st;
        if (!gv_informer_wait_synced(s->node_inf, 30000))
            gv_warn("node cache not synced after 30 s; continuing (readyz stays false)");
        if ((st = gv_informer_start(s->pod_inf, err)) != GV_OK)
            return st;
    }
    if (pthread_create(&s->sweeper, NULL, sweeper_main, s) != 0)
        return gv_error_set(err, GV_EINTERNAL, "cannot start the expiry thread");
    s->sweeper_running = true;
    return GV_OK;
}

bool gv_sched_ready(struct gv_sched *s)
{
    if (s->node_inf == NULL)
        return true;
    return gv_informer_has_synced(s->node_inf) && gv_informer_has_synced(s->pod_inf);
}

void gv_sched_free(struct gv_sched *s)
{
    if (s == NULL)
        return;
    if (s->sweeper_running) {
        pthread_mutex_lock(&s->stop_lock);
        s->stopping = true;
        pthread_cond_broadcast(&s->stop_cond);
        pthread_mutex_unlock(&s->stop_lock);
        pthread_join(s->sweeper, NULL);
    }
    gv_sched_quota_fini(s);
    gv_informer_free(s->pod_inf);
    gv_informer_free(s->node_inf);
    gv_sched_obs_free(s); /* joins its sampler before the tables go */
    gv_sched_tables_free(s);
    json_decref(s->truth);
    gv_sched_whole_free(s->whole);
    gv_sched_preempt_free(s->preempt);
    gv_alloc_cluster_free(s->cluster);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->stop_lock);
    pthread_cond_destroy(&s->stop_cond);
    free(s->cfg.scheduler_name);
    free(s->cfg.node_label_selector);
    for (size_t i = 0; i < 6; i++)
        free(s->cfg.names_storage[i]);
    free(s);
}
