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
#include "scheduler/bind_inflight.h"
#include "scheduler/gv_extender.h"
#include "scheduler/pdb_sched.h"
#include "scheduler/placement_guard.h"
#include "scheduler/preempt.h"
#include "scheduler/preempt_self.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/whole.h"
#include "scheduler/sched_pods.h"


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
        (s->preempt = gv_sched_preempt_new()) == NULL || (s->pdb = gv_sched_pdb_new()) == NULL ||
        (s->preempt_self = gv_sched_preempt_self_new()) == NULL) {
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
        if (gv_sched_ready(s))
            gv_sched_inflight_settle(s); /* holds of pods deleted unseen */
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
    if ((st = gv_sched_pdb_start(s, err)) != GV_OK) /* budgets before the first preemption */
        return st;
    if (s->node_inf != NULL) {
        /* Nodes first, so pods replayed at start find their node. */
        if ((st = gv_informer_start(s->node_inf, err)) != GV_OK)
            return st;
        if (!gv_informer_wait_synced(s->node_inf, 30000))
            gv_warn("node cache not synced after 30 s; continuing (readyz stays false)");
        /* Before any pod is counted or served: the GPUs of Bindings a
         * predecessor sent and may not have seen applied (bind_inflight.h). */
        pthread_mutex_lock(&s->lock);
        gv_sched_inflight_restore(s);
        pthread_mutex_unlock(&s->lock);
        if ((st = gv_informer_start(s->pod_inf, err)) != GV_OK)
            return st;
    }
    if (pthread_create(&s->sweeper, NULL, sweeper_main, s) != 0)
        return gv_error_set(err, GV_EINTERNAL, "cannot start the expiry thread");
    s->sweeper_running = true;
    return GV_OK;
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
    gv_sched_pdb_stop(s); /* its callbacks take the lock: before the tables go */
    gv_informer_free(s->pod_inf);
    /* after the pod informer (which starts them): waits for the
     * preemptions the extender runs itself */
    gv_sched_preempt_self_free(s->preempt_self);
    gv_informer_free(s->node_inf);
    gv_sched_obs_free(s); /* joins its sampler before the tables go */
    gv_sched_tables_free(s);
    json_decref(s->truth);
    gv_sched_whole_free(s->whole);
    gv_sched_preempt_free(s->preempt);
    gv_sched_pdb_free(s->pdb);
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
