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

static void write_state_metrics(struct gv_sched *s, FILE *f)
{
    gv_sched_placement_metrics(&s->cfg, f);
    size_t pending[PENDING_COUNT] = {0};
    size_t reserved = 0, unbound = 0, nodes_ok = 0, nodes_bad = 0, nodes_stale = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_recs; i++) {
        const struct srec *r = s->recs[i];
        if (r->phase == REC_PENDING)
            pending[r->pending]++;
        else if (r->phase == REC_UNBOUND)
            unbound++;
        else if (r->phase == REC_RESERVED || r->phase == REC_BINDING)
            reserved++;
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
            reserved, unbound, nodes_ok, nodes_stale, nodes_bad, s->binds_ok, s->binds_failed,
            s->bind_conflicts, s->drift_repairs, s->self_checks);
    pthread_mutex_unlock(&s->lock);
    gv_sched_quota_metrics(s, f); /* hami_resource_quota_used / _limit */
}

/*
 * Per-GPU series are streamed: at 5,000 nodes x 8 GPUs they are megabytes of
 * text, which a single buffer would hold (and glibc keep) at every scrape.
 * Prometheus wants each family's samples together, so the node table is
 * walked once per family, a batch of nodes per read, resuming after the
 * last node name written (nodes may come and go between batches).
 */
#define GPU_FAMILIES_OWN 3
#define GPU_FAMILIES (GPU_FAMILIES_OWN + GV_SCHED_OBS_GPU_FAMILIES) /* + HAMi's */
#define NODES_PER_BATCH 64

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
    int family; /* GPU_FAMILIES = finished */
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

/* Formats the next batch into ms->text; false when everything is written. */
static bool metrics_next_batch(struct metrics_stream *ms)
{
    struct gv_sched *s = ms->s;
    free(ms->text);
    ms->text = NULL;
    ms->len = ms->off = 0;
    while (ms->family < GPU_FAMILIES) {
        FILE *f = open_memstream(&ms->text, &ms->len);
        if (f == NULL)
            return false;
        if (!ms->family_started) {
            fputs(ms->family < GPU_FAMILIES_OWN
                      ? gpu_family_head[ms->family]
                      : gv_sched_obs_gpu_family_head(s, ms->family - GPU_FAMILIES_OWN),
                  f);
            ms->family_started = true;
        }
        size_t written = 0;
        pthread_mutex_lock(&s->lock);
        size_t i;
        for (i = ms->after[0] != '\0' ? gv_sched_node_after(s, ms->after) : 0;
             i < s->n_nodes && written < NODES_PER_BATCH;
             i++, written++) {
            const struct snode *n = s->nodes[i];
            for (uint32_t g = 0; n->state == NODE_OK && g < n->n_gpus; g++) {
                struct gv_alloc_gpu_usage u;
                if (ms->family >= GPU_FAMILIES_OWN)
                    gv_sched_obs_gpu_sample(s, f, ms->family - GPU_FAMILIES_OWN, n->name, g);
                else if (gv_alloc_gpu_usage_at(s->cluster, n->name, g, &u, NULL) == GV_OK)
                    gpu_sample(f, ms->family, n->name, u.uuid, &u);
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
