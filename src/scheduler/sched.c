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
#include "scheduler/sched_pods.h"

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

bool truth_get(json_t *t, struct truth *o)
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
const char *truth_live(struct gv_sched *s, json_t *t, time_t wall)
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
bool encoded_placeable(struct gv_sched *s, const char *text)
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
void expire_locked(struct gv_sched *s, double now, time_t wall)
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
