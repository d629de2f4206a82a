/* /healthz, /readyz and the scheduler's /metrics (docs/observability.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
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

/* ---- health and metrics ------------------------------------------------ */

void handle_healthz(void *ctx, const struct gv_http_request *hreq,
                           struct gv_http_response *resp)
{
    (void)ctx;
    (void)hreq;
    gv_http_respond(resp, 200, "text/plain", "ok\n");
}

void handle_readyz(void *ctx, const struct gv_http_request *hreq,
                          struct gv_http_response *resp)
{
    (void)hreq;
    if (gv_sched_ready(ctx))
        gv_http_respond(resp, 200, "text/plain", "ok\n");
    else
        gv_http_respond(resp, 503, "text/plain", "node/pod caches not synced yet\n");
}

static void write_cluster_sums(struct gv_sched *s, FILE *f); /* below, with the node sums */


/* The API client's connections (src/kube, "Connection slots"): binds that
 * waited for one of its kept connections, and connections opened (each a
 * TLS handshake for the API server).  Says where a bind's time goes
 * (docs/scheduler.md). */
static void write_kube_transport(struct gv_sched *s, FILE *f)
{
    if (s->kube == NULL)
        return;
    struct gv_kube_transport_stats t;
    gv_kube_transport_stats(s->kube, &t);
    fprintf(f,
            "# HELP gpuvisor_kube_connections_opened_total Connections opened to the API server "
            "(TCP + TLS), watches included.\n"
            "# TYPE gpuvisor_kube_connections_opened_total counter\n"
            "gpuvisor_kube_connections_opened_total %" PRIu64 "\n"
            "# HELP gpuvisor_kube_requests_total API requests other than watches.\n"
            "# TYPE gpuvisor_kube_requests_total counter\n"
            "gpuvisor_kube_requests_total %" PRIu64 "\n"
            "# HELP gpuvisor_kube_requests_queued_total API requests that waited for one of the "
            "client's kept connections.\n"
            "# TYPE gpuvisor_kube_requests_queued_total counter\n"
            "gpuvisor_kube_requests_queued_total %" PRIu64 "\n"
            "# HELP gpuvisor_kube_queue_timeouts_total API requests whose deadline came while "
            "they waited for a connection.\n"
            "# TYPE gpuvisor_kube_queue_timeouts_total counter\n"
            "gpuvisor_kube_queue_timeouts_total %" PRIu64 "\n"
            "# HELP gpuvisor_kube_queue_wait_seconds_total Time API requests waited for a "
            "connection, all together.\n"
            "# TYPE gpuvisor_kube_queue_wait_seconds_total counter\n"
            "gpuvisor_kube_queue_wait_seconds_total %.6f\n"
            "# HELP gpuvisor_kube_requests_waiting API requests waiting for a connection now.\n"
            "# TYPE gpuvisor_kube_requests_waiting gauge\n"
            "gpuvisor_kube_requests_waiting %d\n"
            "# HELP gpuvisor_kube_connections_busy Kept connections carrying a request now.\n"
            "# TYPE gpuvisor_kube_connections_busy gauge\n"
            "gpuvisor_kube_connections_busy %d\n",
            t.connections_opened, t.requests, t.requests_queued, t.queue_timeouts,
            t.queue_wait_seconds, t.requests_waiting, t.connections_busy);
}

static void write_state_metrics(struct gv_sched *s, FILE *f)
{
    gv_sched_placement_metrics(&s->cfg, f);
    size_t pending[PENDING_COUNT] = {0};
    size_t reserved = 0, unbound = 0, inflight = 0, nodes_ok = 0, nodes_bad = 0, nodes_stale = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_recs; i++) {
        const struct srec *r = s->recs[i];
        if (r->phase == REC_PENDING)
            pending[r->pending]++;
        else if (r->phase == REC_UNBOUND)
            unbound++;
        else if (r->phase == REC_RESERVED || r->phase == REC_BINDING)
            reserved++;
        else if (r->phase == REC_INFLIGHT)
            inflight++;
    }
    time_t now = time(NULL);
    for (size_t i = 0; i < s->n_nodes; i++) {
        const struct snode *n = s->nodes[i];
        if (n->state != NODE_OK)
            nodes_bad++;
        else if (n->heartbeat == 0 || now - n->heartbeat > s->cfg.heartbeat_timeout_s)
            nodes_stale++;
        else
            nodes_ok++;
    }
    fputs("# HELP gpuvisor_scheduler_pods_pending GPU pods the last filter could not place, by "
          "reason.\n# TYPE gpuvisor_scheduler_pods_pending gauge\n",
          f);
    for (int i = 0; i < PENDING_COUNT; i++)
        fprintf(f, "gpuvisor_scheduler_pods_pending{reason=\"%s\"} %zu\n", pending_labels[i],
                pending[i]);
    fprintf(f,
            "# HELP gpuvisor_scheduler_reservations Placements held for pods not bound yet.\n"
            "# TYPE gpuvisor_scheduler_reservations gauge\n"
            "gpuvisor_scheduler_reservations{state=\"reserved\"} %zu\n"
            "gpuvisor_scheduler_reservations{state=\"annotated_unbound\"} %zu\n"
            "gpuvisor_scheduler_reservations{state=\"binding_may_land\"} %zu\n"
            "# HELP gpuvisor_scheduler_nodes Nodes by gpuvisor agent state.\n"
            "# TYPE gpuvisor_scheduler_nodes gauge\n"
            "gpuvisor_scheduler_nodes{state=\"ready\"} %zu\n"
            "gpuvisor_scheduler_nodes{state=\"stale\"} %zu\n"
            "gpuvisor_scheduler_nodes{state=\"unusable\"} %zu\n"
            "# HELP gpuvisor_scheduler_binds_total Bind calls by outcome.\n"
            "# TYPE gpuvisor_scheduler_binds_total counter\n"
            "gpuvisor_scheduler_binds_total{result=\"ok\"} %" PRIu64 "\n"
            "gpuvisor_scheduler_binds_total{result=\"failed\"} %" PRIu64 "\n"
            "# HELP gpuvisor_scheduler_bind_conflicts_total Pod changed during bind "
            "(409), placement recomputed.\n"
            "# TYPE gpuvisor_scheduler_bind_conflicts_total counter\n"
            "gpuvisor_scheduler_bind_conflicts_total %" PRIu64 "\n"
            "# HELP gpuvisor_accounting_drift_repairs_total Differences between the GPU "
            "accounting and the pods in the API that the self-check repaired (a bug: stays 0).\n"
            "# TYPE gpuvisor_accounting_drift_repairs_total counter\n"
            "gpuvisor_accounting_drift_repairs_total %" PRIu64 "\n"
            "# HELP gpuvisor_accounting_self_checks_total Accounting self-checks run.\n"
            "# TYPE gpuvisor_accounting_self_checks_total counter\n"
            "gpuvisor_accounting_self_checks_total %" PRIu64 "\n",
            reserved, unbound, inflight, nodes_ok, nodes_stale, nodes_bad, s->binds_ok, s->binds_failed,
            s->bind_conflicts, s->drift_repairs, s->self_checks);
    write_cluster_sums(s, f);
    write_kube_transport(s, f);
    gv_sched_preempt_metrics(s, f);
    gv_sched_preempt_self_metrics(s, f);
    pthread_mutex_unlock(&s->lock);
    gv_sched_quota_metrics(s, f); /* hami_resource_quota_used / _limit */
}

/*
 * Per-node (and, opted in, per-GPU) series are streamed: at 5,000 nodes they
 * are megabytes of text, which a single buffer would hold (and glibc keep)
 * at every scrape.  Prometheus wants each family's samples together, so the
 * node table is walked once per family, a batch of nodes per read, resuming
 * after the last node name written (nodes may come and go between batches).
 *
 * By default the families are per node (one series per node and family);
 * the per-GPU ones (gpuvisor_gpu_* and HAMi's hami_gpu_*, hami_node_gpu_*)
 * follow only with metrics_per_gpu: they made a 5,000-node scrape 53 MB,
 * and each node agent exports its own GPUs already (docs/observability.md).
 */
#define NODE_FAMILIES 6
#define GPU_FAMILIES_OWN 3
#define FIRST_GPU_FAMILY NODE_FAMILIES
#define FIRST_HAMI_FAMILY (FIRST_GPU_FAMILY + GPU_FAMILIES_OWN)
#define ALL_FAMILIES (FIRST_HAMI_FAMILY + GV_SCHED_OBS_GPU_FAMILIES)
#define NODES_PER_BATCH 64

/* gpuvisor_node_<x>{node} and gpuvisor_cluster_<x>: the same sums, per node
 * and over all nodes (whole names: docs and dashboards grep for them) */
static const char *const node_family_name[NODE_FAMILIES] = {
    "gpuvisor_node_gpus",
    "gpuvisor_node_gpu_memory_mib",
    "gpuvisor_node_gpu_memory_allocated_mib",
    "gpuvisor_node_gpu_cores_allocated_percent",
    "gpuvisor_node_gpu_tasks",
    "gpuvisor_node_gpus_shared",
};
static const char *const cluster_family_name[NODE_FAMILIES] = {
    "gpuvisor_cluster_gpus",
    "gpuvisor_cluster_gpu_memory_mib",
    "gpuvisor_cluster_gpu_memory_allocated_mib",
    "gpuvisor_cluster_gpu_cores_allocated_percent",
    "gpuvisor_cluster_gpu_tasks",
    "gpuvisor_cluster_gpus_shared",
};
static const char *const node_family_help[NODE_FAMILIES] = {
    "GPUs in the scheduler's model (healthy or not)",
    "Schedulable GPU memory of the healthy GPUs",
    "GPU memory assigned to pods",
    "GPU compute assigned to pods (100 = one whole GPU)",
    "Containers served on the GPUs (one per container and GPU)",
    "GPUs more than one container shares",
};

static const char *const gpu_family_head[GPU_FAMILIES_OWN] = {
    "# HELP gpuvisor_gpu_memory_allocated_mib GPU memory assigned to pods, per GPU.\n"
    "# TYPE gpuvisor_gpu_memory_allocated_mib gauge\n",
    "# HELP gpuvisor_gpu_cores_allocated_percent GPU compute assigned to pods, per GPU "
    "(100 = one whole GPU).\n"
    "# TYPE gpuvisor_gpu_cores_allocated_percent gauge\n",
    "# HELP gpuvisor_gpu_tasks Containers sharing each GPU.\n"
    "# TYPE gpuvisor_gpu_tasks gauge\n",
};

struct metrics_stream {
    struct gv_sched *s;
    char *text; /* pending bytes */
    size_t len, off;
    int family; /* families: ALL_FAMILIES = finished */
    int last;   /* NODE_FAMILIES, or ALL_FAMILIES with metrics_per_gpu */
    bool family_started;
    char after[GV_ALLOC_NODE_MAX]; /* last node written in this family */
};

static void gpu_sample(FILE *f, int family, const char *node, const char *uuid,
                       const struct gv_alloc_gpu_usage *u)
{
    switch (family) {
    case 0:
        fprintf(f, "gpuvisor_gpu_memory_allocated_mib{node=\"%s\",gpu=\"%s\"} %" PRIu64 "\n", node,
                uuid, u->mem_mib);
        break;
    case 1:
        fprintf(f, "gpuvisor_gpu_cores_allocated_percent{node=\"%s\",gpu=\"%s\"} %.1f\n", node,
                uuid, u->milli / 10.0);
        break;
    default:
        fprintf(f, "gpuvisor_gpu_tasks{node=\"%s\",gpu=\"%s\"} %" PRIu32 "\n", node, uuid,
                u->tasks);
        break;
    }
}

/* A node's sums, one per node family (s->lock held): capacity over healthy
 * GPUs, what pods hold over all of them (an unhealthy GPU's pods still hold
 * it).  Summed again for the cluster families, so the two always agree. */
static void node_sums(struct gv_sched *s, const char *node, uint32_t n_gpus,
                      uint64_t out[NODE_FAMILIES])
{
    memset(out, 0, NODE_FAMILIES * sizeof(out[0]));
    for (uint32_t g = 0; g < n_gpus; g++) {
        struct gv_alloc_gpu_info i;
        if (gv_alloc_gpu_info_at(s->cluster, node, g, &i, NULL) != GV_OK)
            continue;
        out[0]++;
        out[1] += i.healthy ? i.mem_mib : 0;
        out[2] += i.used_mem_mib;
        out[3] += i.used_milli;
        out[4] += i.tasks;
        out[5] += i.tasks > 1;
    }
}

/* v of family fam, after its name and labels (milli-GPU shown in percent) */
static void put_sum(FILE *f, int fam, uint64_t v)
{
    if (fam == 3)
        fprintf(f, " %.1f\n", (double)v / 10.0);
    else
        fprintf(f, " %" PRIu64 "\n", v);
}

static void node_sample(struct gv_sched *s, FILE *f, int fam, const char *node, uint32_t n_gpus)
{
    uint64_t v[NODE_FAMILIES];
    node_sums(s, node, n_gpus, v);
    fprintf(f, "%s{node=\"%s\"}", node_family_name[fam], node);
    put_sum(f, fam, v[fam]);
}

/* The cluster families: the node sums over every usable node (s->lock held). */
static void write_cluster_sums(struct gv_sched *s, FILE *f)
{
    uint64_t sum[NODE_FAMILIES] = {0}, v[NODE_FAMILIES];
    for (size_t k = 0; k < s->n_nodes; k++) {
        const struct snode *n = s->nodes[k];
        if (n->state != NODE_OK)
            continue;
        node_sums(s, n->name, n->n_gpus, v);
        for (int fam = 0; fam < NODE_FAMILIES; fam++)
            sum[fam] += v[fam];
    }
    for (int fam = 0; fam < NODE_FAMILIES; fam++) {
        const char *name = cluster_family_name[fam];
        fprintf(f, "# HELP %s %s, over all nodes.\n# TYPE %s gauge\n%s", name,
                node_family_help[fam], name, name);
        put_sum(f, fam, sum[fam]);
    }
}

static void family_head(struct gv_sched *s, FILE *f, int fam)
{
    if (fam < NODE_FAMILIES)
        fprintf(f, "# HELP %s %s, on a node.\n# TYPE %s gauge\n", node_family_name[fam],
                node_family_help[fam], node_family_name[fam]);
    else if (fam < FIRST_HAMI_FAMILY)
        fputs(gpu_family_head[fam - FIRST_GPU_FAMILY], f);
    else
        fputs(gv_sched_obs_gpu_family_head(s, fam - FIRST_HAMI_FAMILY), f);
}

/* Formats the next batch into ms->text; false when everything is written. */
static bool metrics_next_batch(struct metrics_stream *ms)
{
    struct gv_sched *s = ms->s;
    free(ms->text);
    ms->text = NULL;
    ms->len = ms->off = 0;
    while (ms->family < ms->last) {
        FILE *f = open_memstream(&ms->text, &ms->len);
        if (f == NULL)
            return false;
        if (!ms->family_started) {
            family_head(s, f, ms->family);
            ms->family_started = true;
        }
        size_t written = 0;
        pthread_mutex_lock(&s->lock);
        size_t i;
        for (i = ms->after[0] != '\0' ? gv_sched_node_after(s, ms->after) : 0;
             i < s->n_nodes && written < NODES_PER_BATCH;
             i++, written++) {
            const struct snode *n = s->nodes[i];
            if (n->state == NODE_OK && ms->family < NODE_FAMILIES)
                node_sample(s, f, ms->family, n->name, n->n_gpus);
            for (uint32_t g = 0; n->state == NODE_OK && ms->family >= NODE_FAMILIES &&
                                 g < n->n_gpus;
                 g++) {
                struct gv_alloc_gpu_usage u;
                if (ms->family >= FIRST_HAMI_FAMILY)
                    gv_sched_obs_gpu_sample(s, f, ms->family - FIRST_HAMI_FAMILY, n->name, g);
                else if (gv_alloc_gpu_usage_at(s->cluster, n->name, g, &u, NULL) == GV_OK)
                    gpu_sample(f, ms->family - FIRST_GPU_FAMILY, n->name, u.uuid, &u);
            }
            snprintf(ms->after, sizeof(ms->after), "%s", n->name);
        }
        bool family_done = i >= s->n_nodes;
        pthread_mutex_unlock(&s->lock);
        fclose(f);
        if (family_done) {
            ms->family++;
            ms->family_started = false;
            ms->after[0] = '\0';
        }
        if (ms->len > 0)
            return true;
        free(ms->text);
        ms->text = NULL;
    }
    return false;
}

static size_t metrics_read(void *cls, char *buf, size_t max)
{
    struct metrics_stream *ms = cls;
    if (ms->off == ms->len && !metrics_next_batch(ms))
        return 0;
    size_t n = ms->len - ms->off < max ? ms->len - ms->off : max;
    memcpy(buf, ms->text + ms->off, n);
    ms->off += n;
    return n;
}

static void metrics_free(void *cls)
{
    struct metrics_stream *ms = cls;
    free(ms->text);
    free(ms);
}

void handle_metrics(void *ctx, const struct gv_http_request *hreq,
                           struct gv_http_response *resp)
{
    (void)hreq;
    struct gv_sched *s = ctx;
    struct metrics_stream *ms = calloc(1, sizeof(*ms));
    FILE *f = ms ? open_memstream(&ms->text, &ms->len) : NULL;
    if (f == NULL) {
        free(ms);
        gv_http_respond_error(resp, 500, "out of memory");
        return;
    }
    ms->s = s;
    ms->last = s->cfg.metrics_per_gpu ? ALL_FAMILIES : NODE_FAMILIES;
    /* The small families first, in one piece. */
    gv_httpd_write_metrics_header(f);
    for (size_t i = 0; i < s->n_servers; i++)
        gv_httpd_write_metrics(s->servers[i], f);
    write_state_metrics(s, f);
    gv_sched_obs_write_metrics(s, f);
    fclose(f);
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->stream = metrics_read;
    resp->stream_cls = ms;
    resp->stream_free = metrics_free;
}
