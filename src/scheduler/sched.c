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
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"

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
    if (n->state != NODE_OK)
        gv_info("node %s: %zu GPU(s) from the agent's inventory", n->name, ng);
    n->n_gpus = (uint32_t)ng;
    n->max_gpu_mib = max_mib;
    n->in_engine = true;
    n->state = NODE_OK;
    free(n->reason);
    n->reason = NULL;
out:
    gv_podspec_node_free(pn);
}

static bool place_from_annotation(struct gv_sched *s, json_t *pod);

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
    bool was_in_engine = n->in_engine;
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
        }
    }
    bool added = !was_in_engine && n->in_engine;
    pthread_mutex_unlock(&s->lock);

    /* Pods that were seen before their node carry usage we could not place
     * then: place them now. */
    if (!added)
        return;
    json_t *waiting = json_array();
    pthread_mutex_lock(&s->lock);
    const char *uid;
    json_t *p;
    json_object_foreach(s->orphans, uid, p)
    {
        const char *an = annotation(p, ANN_ASSIGNED_NODE);
        if (an != NULL && strcmp(an, name) == 0)
            json_array_append(waiting, p);
    }
    pthread_mutex_unlock(&s->lock);
    size_t i;
    json_array_foreach(waiting, i, p)
    {
        gv_sched_pod_update(s, p);
    }
    json_decref(waiting);
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
    gv_sched_node_remove(s, name);
    pthread_mutex_unlock(&s->lock);
    gv_info("node %s deleted", name);
}

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

/* Places a pod's recorded assignment in the engine unless already there
 * (restart, or an assignment another instance wrote).  Takes the lock.
 * True when the assignment's node is not known yet (place it later). */
static bool place_from_annotation(struct gv_sched *s, json_t *pod)
{
    bool orphan = false;
    const char *uid = str_at(pod, "metadata", "uid");
    const char *ns = str_at(pod, "metadata", "namespace");
    const char *name = str_at(pod, "metadata", "name");
    const char *text = annotation(pod, ANN_ASSIGNMENT);
    const char *bound = str_at(pod, "spec", "nodeName");
    if (uid == NULL || text == NULL)
        return false;
    struct gv_alloc_request *req = NULL;
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    struct gv_error err = {0};
    if (a == NULL)
        return false;
    if (gv_alloc_assignment_decode(text, strlen(text), a, &err) != GV_OK) {
        gv_warn("pod %s/%s: ignoring malformed %s: %s", ns, name, ANN_ASSIGNMENT, err.msg);
        goto out;
    }
    if (bound != NULL && *bound != '\0' && strcmp(bound, a->node) != 0) {
        gv_warn("pod %s/%s: bound to %s but its assignment is for %s; ignoring it", ns, name, bound,
                a->node);
        goto out;
    }
    if (gv_podspec_request(&s->cfg.alloc, pod, &req, &err) != GV_OK) {
        gv_warn("pod %s/%s: cannot read its request: %s", ns, name, err.msg);
        goto out;
    }
    snprintf(req->uid, sizeof(req->uid), "%s", uid);
    bool unbound = bound == NULL || *bound == '\0';
    time_t assigned_at = 0;
    if (unbound) {
        const char *at = annotation(pod, ANN_ASSIGNED_AT);
        if (at == NULL || gv_sched_parse_time(at, &assigned_at) != 0 ||
            time(NULL) - assigned_at > s->cfg.reservation_ttl_s) {
            /* Its bind never completed and the reservation lapsed. */
            gv_debug("pod %s/%s: unbound assignment expired; not counted", ns, name);
            goto out;
        }
    }
    pthread_mutex_lock(&s->lock);
    struct srec *r = gv_sched_rec_find(s, uid);
    if (r != NULL && (r->phase == REC_BINDING || r->phase == REC_RESERVED)) {
        /* Our own bind is under way; it owns the placement. */
    } else if (gv_alloc_is_placed(s->cluster, uid)) {
        if (!unbound && r != NULL && r->phase == REC_UNBOUND)
            gv_sched_rec_drop(s, uid); /* now bound: the annotation backs it */
    } else if (!gv_alloc_node_exists(s->cluster, a->node)) {
        gv_debug("pod %s/%s: node %s not known yet; placed when it appears", ns, name, a->node);
        orphan = true;
    } else if (gv_alloc_place(s->cluster, req, a, &err) != GV_OK) {
        gv_error("pod %s/%s: recorded assignment on %s does not fit the node's current "
                 "inventory: %s",
                 ns, name, a->node, err.msg);
    } else if (unbound) {
        struct srec *nr = gv_sched_rec_get(s, uid, ns, name);
        if (nr != NULL) {
            gv_sched_rec_set(nr, REC_UNBOUND, a->node, NULL, NULL);
            nr->assigned_at = assigned_at;
        }
    } else if (r != NULL) {
        gv_sched_rec_drop(s, uid);
    }
    pthread_mutex_unlock(&s->lock);
out:
    gv_alloc_request_free(req);
    free(a);
    return orphan;
}

static bool kept_annotation(const char *key)
{
    static const char *const prefixes[] = {"gpuvisor.io/", "nvidia.com/", "hami.io/"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (strncmp(key, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

/* The fields of a pod the scheduler reads back (assignment annotations and
 * the GPU request): what an orphan keeps until its node appears. */
static json_t *pod_trim(json_t *pod)
{
    json_t *md = json_object_get(pod, "metadata");
    json_t *spec = json_object_get(pod, "spec");
    json_t *ann = json_object(), *containers = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(md, "annotations"), k, v)
    {
        if (kept_annotation(k))
            json_object_set(ann, k, v);
    }
    size_t i;
    json_array_foreach(json_object_get(spec, "containers"), i, v)
    {
        json_array_append_new(containers,
                              json_pack("{s:O?,s:O?}", "name", json_object_get(v, "name"),
                                        "resources", json_object_get(v, "resources")));
    }
    return json_pack("{s:{s:O?,s:O?,s:O?,s:o},s:{s:O?,s:o},s:{s:O?}}", "metadata", "name",
                     json_object_get(md, "name"), "namespace", json_object_get(md, "namespace"),
                     "uid", json_object_get(md, "uid"), "annotations", ann, "spec", "nodeName",
                     json_object_get(spec, "nodeName"), "containers", containers, "status", "phase",
                     json_object_get(json_object_get(pod, "status"), "phase"));
}

void gv_sched_pod_update(struct gv_sched *s, json_t *pod)
{
    const char *uid = str_at(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    bool orphan = false;
    if (!pod_finished(pod) && annotation(pod, ANN_ASSIGNMENT) != NULL)
        orphan = place_from_annotation(s, pod);
    json_t *keep = orphan ? pod_trim(pod) : NULL;
    pthread_mutex_lock(&s->lock);
    if (pod_finished(pod))
        gv_sched_forget_pod(s, uid);
    if (keep != NULL)
        json_object_set_new(s->orphans, uid, keep);
    else
        json_object_del(s->orphans, uid);
    pthread_mutex_unlock(&s->lock);
}

void gv_sched_pod_delete(struct gv_sched *s, json_t *pod)
{
    const char *uid = str_at(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    struct srec *r = gv_sched_rec_find(s, uid);
    /* A bind in flight cleans up after itself when the API says the pod is gone. */
    if (r == NULL || r->phase != REC_BINDING)
        gv_sched_forget_pod(s, uid);
    json_object_del(s->orphans, uid);
    pthread_mutex_unlock(&s->lock);
}

void gv_sched_expire(struct gv_sched *s)
{
    double now = gv_sched_now();
    time_t wall = time(NULL);
    pthread_mutex_lock(&s->lock);
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
    pthread_mutex_unlock(&s->lock);
}

/* ---- life cycle ------------------------------------------------------ */

/*
 * Informer transforms: what the caches keep.  Nodes and pods are applied to
 * the engine here, from the full objects, and the caches keep only the name
 * (nodes) or uid (pods) as a JSON string, all a later delete needs: at 5,000
 * nodes the inventories, and at thousands of GPU pods their specs, would
 * otherwise cost tens of MiB for nothing.  A pod whose node is not known yet
 * is kept, trimmed, in s->orphans until the node appears.
 */
static json_t *node_transform(void *ud, json_t *node)
{
    gv_sched_node_update(ud, node);
    return json_string(
        json_string_value(json_object_get(json_object_get(node, "metadata"), "name")));
}

static json_t *pod_transform(void *ud, json_t *pod)
{
    gv_sched_pod_update(ud, pod);
    gv_sched_obs_pod_update(ud, pod);
    const char *uid = str_at(pod, "metadata", "uid");
    return uid != NULL ? json_string(uid) : NULL;
}

static void inf_node_delete(void *ud, json_t *name)
{
    json_t *node = json_pack("{s:{s:O}}", "metadata", "name", name);
    if (node != NULL)
        gv_sched_node_delete(ud, node);
    json_decref(node);
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
    if (s->cfg.scheduler_name == NULL || (s->orphans = json_object()) == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    if ((st = gv_alloc_cluster_new(&s->cfg.alloc, &s->cluster, err)) != GV_OK)
        goto fail;
    s->kube = kube;
    if (kube != NULL) {
        /* Nodes are applied in their transform (see above). */
        struct gv_informer_callbacks ncb = {NULL, NULL, inf_node_delete, s};
        struct gv_informer_callbacks pcb = {NULL, NULL, inf_pod_delete, s};
        struct gv_informer_opts nopts = {.label_selector = s->cfg.node_label_selector,
                                         .transform = node_transform,
                                         .transform_ud = s};
        struct gv_informer_opts popts = {.label_selector = GV_SCHED_ASSIGNED_LABEL "=true",
                                         .transform = pod_transform,
                                         .transform_ud = s};
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
    gv_informer_free(s->pod_inf);
    gv_informer_free(s->node_inf);
    gv_sched_obs_free(s); /* joins its sampler before the tables go */
    gv_sched_tables_free(s);
    json_decref(s->orphans);
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
