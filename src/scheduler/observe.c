/*
 * Observability of gpuvisor-scheduler beyond its request counters:
 *
 *  - HAMi's scheduler series (hami_gpu_*, hami_node_gpu_*, hami_vgpu_*), with
 *    HAMi's names, labels and units (bytes, 0-100 core ratios, zone="vGPU"),
 *    so existing HAMi dashboards and alerts keep working; per GPU and per
 *    container, so only with metrics_per_gpu (--metrics-per-gpu);
 *  - filter latency histograms by outcome, pending pods with their top
 *    failure reason, cluster fragmentation (src/alloc's FGD measure);
 *  - the dashboard's JSON state (docs/observability.md, "Dashboard") and a
 *    small ring buffer of cluster samples for its fragmentation chart.
 *
 * The scheduler's informer caches keep only uids (docs/scheduler.md), so who
 * holds a slice is recorded here from the same pod events: namespace, name
 * and the containers' names in spec order (HAMi's container_index).  The
 * slices themselves are the engine's record of the pod's placement, shown
 * only while the engine has it placed: never the assignment annotation as
 * last written, which its tenant may patch (the engine keeps the verified
 * one, sched_pods.c), and never past the placement they describe.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/gv_defrag.h"
#include "common/gv_log.h"
#include "common/gv_version.h"
#include "contracts/agent_usage.h"
#include "contracts/podspec.h"
#include "dashboard/gv_dashboard.h"
#include "scheduler/sched_observe.h"

/* Upper bounds of the filter latency buckets, seconds. */
static const double filter_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                        0.01,   0.025,   0.05,   0.1,   0.25,   1.0};
#define N_BUCKETS (sizeof(filter_buckets) / sizeof(filter_buckets[0]))

#define FILTER_RESULTS(X)                                                                          \
    X(FIT, "fit") X(NOFIT, "nofit") X(INVALID, "invalid") X(SKIPPED, "not_gpu")
enum filter_result {
#define X_ENUM(id, label) FR_##id,
    FILTER_RESULTS(X_ENUM)
#undef X_ENUM
        FR_COUNT
};
static const char *const filter_result_labels[FR_COUNT] = {
#define X_LABEL(id, label) label,
    FILTER_RESULTS(X_LABEL)
#undef X_LABEL
};

/* History: one sample per interval, 720 kept (6 h at 30 s). */
#define HISTORY_LEN 720
#define HISTORY_INTERVAL_S 30.0
/* Live usage: every agent's /metrics read this often (dashboard only). */
#define USAGE_INTERVAL_S 15.0
#define AGENT_SELECTOR "app.kubernetes.io/name=gpuvisor-node"
#define AGENT_PORT_NAME "metrics"

struct sample {
    time_t t;
    float frag_ratio; /* fragmented share of the free GPU share */
    float mem_used;   /* allocated / schedulable memory */
    float cores_used; /* allocated / total compute */
    uint32_t pending;
};

struct gv_sched_obs {
    pthread_mutex_t lock;
    json_t *pods;    /* uid -> [ns, name, [container names in spec order]] */
    json_t *reasons; /* uid -> top failure reason of its last unsuccessful filter */
    uint64_t buckets[FR_COUNT][N_BUCKETS];
    uint64_t count[FR_COUNT];
    double sum[FR_COUNT];
    struct sample ring[HISTORY_LEN];
    size_t ring_head, ring_n;
    /* the sampler thread (started with the dashboard) */
    pthread_t sampler;
    bool sampler_running, stopping;
    pthread_cond_t wake;
    /* live usage from the node agents, replaced whole at each round */
    struct gv_usage usage;
    time_t usage_time; /* 0 = never read */
    uint32_t agents_ok, agents_failed;
    bool hami_off; /* --hami-metrics=off: HAMi's names left out */
};

static const char *meta_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

gv_status gv_sched_obs_new(struct gv_sched *s)
{
    struct gv_sched_obs *o = calloc(1, sizeof(*o));
    if (o == NULL || (o->pods = json_object()) == NULL || (o->reasons = json_object()) == NULL) {
        if (o != NULL)
            json_decref(o->pods);
        free(o);
        return GV_ENOMEM;
    }
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->wake, NULL);
    s->obs = o;
    return GV_OK;
}

void gv_sched_obs_free(struct gv_sched *s)
{
    struct gv_sched_obs *o = s->obs;
    if (o == NULL)
        return;
    if (o->sampler_running) {
        pthread_mutex_lock(&o->lock);
        o->stopping = true;
        pthread_cond_broadcast(&o->wake);
        pthread_mutex_unlock(&o->lock);
        pthread_join(o->sampler, NULL);
    }
    pthread_cond_destroy(&o->wake);
    gv_usage_free(&o->usage);
    json_decref(o->pods);
    json_decref(o->reasons);
    pthread_mutex_destroy(&o->lock);
    free(o);
    s->obs = NULL;
}

/* ---- inputs -------------------------------------------------------------- */

void gv_sched_obs_pod_update(struct gv_sched *s, json_t *pod)
{
    struct gv_sched_obs *o = s->obs;
    const char *uid = meta_str(pod, "uid");
    if (o == NULL || uid == NULL)
        return;
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    bool done = phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
    /* Who the pod is and its containers' names in spec order (HAMi's
     * container_index is a position there).  Not its assignment: the
     * annotation is the tenant's to patch, and a bound pod keeps the
     * verified placement it had (sched_pods.c, truth_note), so the slices
     * shown are the engine's record of it (each_slice).  Kept for pods with
     * an assignment or a placement of record: the GPU pods, not all pods. */
    json_t *rec = NULL;
    if (!done) {
        pthread_mutex_lock(&s->lock);
        const struct srec *r = gv_sched_rec_find(s, uid);
        bool placed = r != NULL && gv_sched_phase_placed(r->phase);
        pthread_mutex_unlock(&s->lock);
        if (placed || gv_podspec_annotation(pod, GV_ALLOC_ASSIGNMENT_ANNOTATION) != NULL) {
            json_t *names = json_array();
            json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
            size_t k;
            json_t *v;
            json_array_foreach(containers, k, v)
            {
                const char *nm = json_string_value(json_object_get(v, "name"));
                json_array_append_new(names, json_string(nm != NULL ? nm : ""));
            }
            rec = names != NULL ? json_pack("[s?s?o]", meta_str(pod, "namespace"),
                                            meta_str(pod, "name"), names)
                                : NULL;
        }
    }
    pthread_mutex_lock(&o->lock);
    if (rec != NULL)
        json_object_set_new(o->pods, uid, rec);
    else
        json_object_del(o->pods, uid);
    json_object_del(o->reasons, uid); /* assigned: no longer pending */
    pthread_mutex_unlock(&o->lock);
}

void gv_sched_obs_pod_delete(struct gv_sched *s, json_t *pod)
{
    const char *uid = meta_str(pod, "uid");
    if (s->obs == NULL || uid == NULL)
        return;
    pthread_mutex_lock(&s->obs->lock);
    json_object_del(s->obs->pods, uid);
    json_object_del(s->obs->reasons, uid);
    pthread_mutex_unlock(&s->obs->lock);
}

/* Groups reasons that differ only in their numbers ("gpu 2/8 free ..." on
 * one node, "gpu 1/8 free ..." on another). */
static void reason_key(const char *r, char *key, size_t cap)
{
    size_t o = 0;
    for (; *r != '\0' && o + 1 < cap; r++) {
        if (isdigit((unsigned char)*r)) {
            if (o == 0 || key[o - 1] != '#')
                key[o++] = '#';
        } else {
            key[o++] = *r;
        }
    }
    key[o] = '\0';
}

/* "5/12 nodes: <most common reason>" over the candidates' reasons. */
static char *top_reason(size_t n, const char *const *reasons)
{
    json_t *counts = json_object();
    const char *best = NULL;
    json_int_t best_n = 0;
    for (size_t i = 0; counts != NULL && i < n; i++) {
        if (reasons[i] == NULL)
            continue;
        char key[GV_ALLOC_REASON_MAX + GV_ERROR_MSG_MAX];
        reason_key(reasons[i], key, sizeof(key));
        json_int_t c = json_integer_value(json_object_get(counts, key)) + 1;
        json_object_set_new(counts, key, json_integer(c));
        if (c > best_n) {
            best_n = c;
            best = reasons[i];
        }
    }
    char *out = NULL;
    if (best != NULL) {
        size_t cap = strlen(best) + 64;
        out = malloc(cap);
        if (out != NULL)
            snprintf(out, cap, "%" JSON_INTEGER_FORMAT "/%zu nodes: %s", best_n, n, best);
    } else if (n == 0) {
        out = strdup("no candidate nodes");
    }
    json_decref(counts);
    return out;
}

/* Drops reasons of pods no longer pending (placed, deleted, lapsed): pending
 * pods are not watched, so this is where their reasons go (both locks held). */
static void prune_reasons(struct gv_sched *s)
{
    const char *uid;
    json_t *v, *tmp;
    json_object_foreach_safe(s->obs->reasons, tmp, uid, v)
    {
        const struct srec *r = gv_sched_rec_find(s, uid);
        if (r == NULL || r->phase != REC_PENDING)
            json_object_del(s->obs->reasons, uid);
    }
}

void gv_sched_obs_filter(struct gv_sched *s, const struct gv_ext_args *args, int gpu_containers,
                         const enum gv_ext_verdict *verdicts, const char *const *reasons,
                         double seconds)
{
    struct gv_sched_obs *o = s->obs;
    if (o == NULL || verdicts == NULL)
        return;
    size_t n = args->n_names;
    bool any_fit = false;
    for (size_t i = 0; i < n; i++)
        any_fit = any_fit || verdicts[i] == GV_EXT_FIT;
    enum filter_result fr = gpu_containers < 0    ? FR_INVALID
                            : gpu_containers == 0 ? FR_SKIPPED
                            : any_fit             ? FR_FIT
                                                  : FR_NOFIT;
    if (fr == FR_SKIPPED)
        any_fit = true; /* nothing pending about it */
    const char *uid = meta_str(args->pod, "uid");
    char *top = !any_fit && reasons != NULL ? top_reason(n, reasons) : NULL;
    size_t b = 0;
    while (b < N_BUCKETS && seconds > filter_buckets[b])
        b++;
    pthread_mutex_lock(&o->lock);
    if (b < N_BUCKETS)
        o->buckets[fr][b]++;
    o->count[fr]++;
    o->sum[fr] += seconds;
    if (uid != NULL) {
        if (top != NULL)
            json_object_set_new(o->reasons, uid, json_string(top));
        else if (any_fit)
            json_object_del(o->reasons, uid);
    }
    bool crowded = json_object_size(o->reasons) > 1024;
    pthread_mutex_unlock(&o->lock);
    free(top);
    if (crowded) {
        pthread_mutex_lock(&s->lock);
        pthread_mutex_lock(&o->lock);
        prune_reasons(s);
        pthread_mutex_unlock(&o->lock);
        pthread_mutex_unlock(&s->lock);
    }
}

/* ---- cluster samples ----------------------------------------------------- */

/* Counts pending records (s->lock held). */
static uint32_t pending_count(struct gv_sched *s)
{
    uint32_t n = 0;
    for (size_t i = 0; i < s->n_recs; i++)
        n += s->recs[i]->phase == REC_PENDING;
    return n;
}

/* Takes a sample now (s->lock held). */
static struct sample take_sample(struct gv_sched *s, struct gv_alloc_frag *frag,
                                 struct gv_alloc_totals *tot)
{
    gv_alloc_cluster_fragmentation(s->cluster, frag);
    gv_alloc_cluster_totals(s->cluster, tot);
    struct sample x = {.t = time(NULL), .frag_ratio = (float)frag->ratio};
    x.mem_used =
        tot->mem_capacity_mib ? (float)tot->mem_used_mib / (float)tot->mem_capacity_mib : 0;
    x.cores_used = tot->milli_capacity ? (float)tot->milli_used / (float)tot->milli_capacity : 0;
    x.pending = pending_count(s);
    return x;
}

static bool stopping(struct gv_sched_obs *o)
{
    pthread_mutex_lock(&o->lock);
    bool st = o->stopping;
    pthread_mutex_unlock(&o->lock);
    return st;
}

/* Reads every node agent's /metrics (pod IP, port "metrics", plain HTTP as
 * Prometheus scrapes it) into a new usage table and swaps it in.  No lock
 * is held across the network.  Agents are the labelled pods of the agents'
 * namespace only: a tenant can label a pod of its own like them. */
static void read_usage(struct gv_sched *s)
{
    struct gv_sched_obs *o = s->obs;
    json_t *agents = NULL;
    struct gv_error err = {0};
    struct gv_kube_list_opts lo = {.label_selector = AGENT_SELECTOR};
    char path[128];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", s->cfg.agent_namespace);
    if (s->kube == NULL || gv_kube_list(s->kube, path, &lo, &agents, &err) != GV_OK) {
        if (s->kube != NULL)
            gv_warn("dashboard: cannot list the node agents: %s", err.msg);
        return;
    }
    struct gv_usage u = {0};
    uint32_t ok = 0, failed = 0;
    size_t i;
    json_t *pod;
    json_array_foreach(json_object_get(agents, "items"), i, pod)
    {
        const char *ip =
            json_string_value(json_object_get(json_object_get(pod, "status"), "podIP"));
        const char *node =
            json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        long port = gv_usage_agent_port(pod, AGENT_PORT_NAME);
        if (ip == NULL || port <= 0 || port > 65535 || stopping(o))
            continue;
        char url[128], *text = NULL;
        size_t len = 0;
        /* an IPv6 pod IP needs brackets in a URL */
        snprintf(url, sizeof(url), strchr(ip, ':') ? "http://[%s]:%ld" : "http://%s:%ld", ip, port);
        struct gv_kube_config *cfg = NULL;
        struct gv_kube_client *c = NULL;
        if (gv_kube_config_from_url(url, &cfg, &err) == GV_OK) {
            /* one round every USAGE_INTERVAL_S: a slow agent is skipped, not waited for */
            cfg->max_retries = 0;
            cfg->timeout_ms = 3000;
            cfg->connect_timeout_ms = 2000;
        }
        if (cfg != NULL && gv_kube_client_new(cfg, &c, &err) == GV_OK &&
            gv_kube_get_text(c, "/metrics", &text, &len, &err) == GV_OK) {
            gv_usage_add_text(&u, text, len, node);
            ok++;
        } else {
            gv_debug("dashboard: agent on %s: %s", node ? node : ip, err.msg);
            failed++;
        }
        free(text);
        gv_kube_client_free(c);
        gv_kube_config_free(cfg);
    }
    json_decref(agents);
    pthread_mutex_lock(&o->lock);
    gv_usage_free(&o->usage);
    o->usage = u;
    o->usage_time = time(NULL);
    o->agents_ok = ok;
    o->agents_failed = failed;
    pthread_mutex_unlock(&o->lock);
}

/* Samples the cluster every HISTORY_INTERVAL_S and reads the agents every
 * USAGE_INTERVAL_S once the caches are synced (checked every second until
 * then). */
static void *sampler_main(void *arg)
{
    struct gv_sched *s = arg;
    struct gv_sched_obs *o = s->obs;
    double next_sample = 0, next_usage = 0;
    pthread_mutex_lock(&o->lock);
    while (!o->stopping) {
        double now = gv_sched_now(), wait = 1.0;
        if (gv_sched_ready(s)) {
            pthread_mutex_unlock(&o->lock);
            if (now >= next_sample) {
                struct gv_alloc_frag frag;
                struct gv_alloc_totals tot;
                pthread_mutex_lock(&s->lock);
                struct sample x = take_sample(s, &frag, &tot);
                pthread_mutex_unlock(&s->lock);
                pthread_mutex_lock(&o->lock);
                o->ring[o->ring_head] = x;
                o->ring_head = (o->ring_head + 1) % HISTORY_LEN;
                if (o->ring_n < HISTORY_LEN)
                    o->ring_n++;
                pthread_mutex_unlock(&o->lock);
                next_sample = now + HISTORY_INTERVAL_S;
            }
            if (now >= next_usage) {
                read_usage(s);
                next_usage = gv_sched_now() + USAGE_INTERVAL_S;
            }
            now = gv_sched_now();
            wait = (next_sample < next_usage ? next_sample : next_usage) - now;
            if (wait < 0.05)
                wait = 0.05;
            pthread_mutex_lock(&o->lock);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double frac = wait - (double)(time_t)wait;
        ts.tv_sec += (time_t)wait;
        ts.tv_nsec += (long)(frac * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!o->stopping && pthread_cond_timedwait(&o->wake, &o->lock, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&o->lock);
    return NULL;
}

static gv_status sampler_start(struct gv_sched *s)
{
    struct gv_sched_obs *o = s->obs;
    if (o == NULL || o->sampler_running)
        return GV_OK;
    if (pthread_create(&o->sampler, NULL, sampler_main, s) != 0)
        return GV_EINTERNAL;
    o->sampler_running = true;
    return GV_OK;
}

/* ---- metrics --------------------------------------------------------------- */

/* A label value in exposition syntax: \, " and newline escaped. */
static void put_label(FILE *f, const char *name, const char *v)
{
    fprintf(f, "%s=\"", name);
    for (; v != NULL && *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', f), fputc(*v, f);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
    fputc('"', f);
}

static const char *const hami_gpu_head[GV_SCHED_OBS_GPU_FAMILIES] = {
    "# HELP hami_gpu_memory_limit_bytes Device memory limit for a certain GPU (HAMi name).\n"
    "# TYPE hami_gpu_memory_limit_bytes gauge\n",
    "# HELP hami_gpu_core_limit_ratio Device core limit for a certain GPU, 100 = whole GPU "
    "(HAMi name).\n# TYPE hami_gpu_core_limit_ratio gauge\n",
    "# HELP hami_gpu_memory_allocated_bytes Device memory allocated for a certain GPU (HAMi "
    "name).\n# TYPE hami_gpu_memory_allocated_bytes gauge\n",
    "# HELP hami_gpu_shared_count Number of containers sharing this GPU (HAMi name).\n"
    "# TYPE hami_gpu_shared_count gauge\n",
    "# HELP hami_gpu_core_allocated_ratio Device core allocated for a certain GPU, 0-100 (HAMi "
    "name).\n# TYPE hami_gpu_core_allocated_ratio gauge\n",
    "# HELP hami_node_gpu_overview GPU overview on a certain node: allocated memory in bytes, "
    "capacity in labels (HAMi name).\n# TYPE hami_node_gpu_overview gauge\n",
    "# HELP hami_node_gpu_memory_allocated_ratio GPU memory allocated fraction 0-1 on a certain "
    "GPU (HAMi name).\n# TYPE hami_node_gpu_memory_allocated_ratio gauge\n",
};

void gv_sched_obs_set_hami(struct gv_sched *s, bool on)
{
    if (s->obs != NULL)
        s->obs->hami_off = !on;
}

bool gv_sched_obs_hami(struct gv_sched *s)
{
    return s->obs != NULL && !s->obs->hami_off;
}

const char *gv_sched_obs_gpu_family_head(struct gv_sched *s, int fam)
{
    if (s->obs == NULL || s->obs->hami_off)
        return "";
    return fam >= 0 && fam < GV_SCHED_OBS_GPU_FAMILIES ? hami_gpu_head[fam] : "";
}

#define MIB 1048576.0

void gv_sched_obs_gpu_sample(struct gv_sched *s, FILE *f, int fam, const char *node, uint32_t i)
{
    static const char *const names[GV_SCHED_OBS_GPU_FAMILIES] = {
        "hami_gpu_memory_limit_bytes",         "hami_gpu_core_limit_ratio",
        "hami_gpu_memory_allocated_bytes",     "hami_gpu_shared_count",
        "hami_gpu_core_allocated_ratio",       "hami_node_gpu_overview",
        "hami_node_gpu_memory_allocated_ratio"};
    struct gv_alloc_gpu_info g;
    if (fam < 0 || fam >= GV_SCHED_OBS_GPU_FAMILIES || s->obs == NULL || s->obs->hami_off ||
        gv_alloc_gpu_info_at(s->cluster, node, i, &g, NULL) != GV_OK)
        return;
    if (fam == 6 && g.mem_mib == 0)
        return; /* as HAMi: no ratio without a total */
    char idx[16], type[GV_ALLOC_MODEL_MAX + 8], mib[24];
    snprintf(idx, sizeof(idx), "%" PRIu32, g.index);
    snprintf(type, sizeof(type), "NVIDIA-%s", g.model ? g.model : "");
    snprintf(mib, sizeof(mib), "%" PRIu64, g.mem_mib);
    fprintf(f, "%s{", names[fam]);
    put_label(f, "node", node);
    fputc(',', f);
    put_label(f, "device_uuid", g.uuid);
    fputc(',', f);
    put_label(f, "device_index", idx);
    if (fam == 2 || fam == 5) {
        fputc(',', f);
        put_label(f, "device_cores", "100");
    }
    if (fam == 5) {
        fputc(',', f);
        put_label(f, "device_memory_limit", mib);
    }
    if (fam != 6) {
        fputc(',', f);
        put_label(f, "device_type", type);
    }
    fputs(",zone=\"vGPU\"} ", f);
    switch (fam) {
    case 0:
        fprintf(f, "%.0f\n", (double)g.mem_mib * MIB);
        break;
    case 1:
        fputs("100\n", f);
        break;
    case 2:
    case 5:
        fprintf(f, "%.0f\n", (double)g.used_mem_mib * MIB);
        break;
    case 3:
        fprintf(f, "%" PRIu32 "\n", g.tasks);
        break;
    case 4:
        fprintf(f, "%g\n", g.used_milli / 10.0);
        break;
    default:
        fprintf(f, "%g\n", (double)g.used_mem_mib / (double)g.mem_mib);
        break;
    }
}

/* Calls fn for every slice of every placed pod (both locks held). */
typedef void (*slice_fn)(void *ud, const char *ns, const char *pod, const char *node,
                         const char *container, size_t cidx, const struct gv_alloc_device *d);

/* The position of container name in the pod's spec (rec's name list);
 * 0 when the spec does not list it. */
static size_t container_index(const json_t *names, const char *name)
{
    size_t k;
    json_t *v;
    json_array_foreach(names, k, v)
    {
        const char *nm = json_string_value(v);
        if (nm != NULL && strcmp(nm, name) == 0)
            return k;
    }
    return 0;
}

/* The slices of bound (or annotated, not yet bound) pods as the engine
 * holds them: the record's assignment text, never the pod's annotation as
 * last written (a tenant's patch of it is not counted, so not shown
 * either).  Reservations and binds in progress are reserved_slices'. */
static void each_slice(struct gv_sched *s, const char *only_node, slice_fn fn, void *ud)
{
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    if (a == NULL)
        return;
    const char *uid;
    json_t *rec;
    json_object_foreach(s->obs->pods, uid, rec)
    {
        const struct srec *r = gv_sched_rec_find(s, uid);
        if (r == NULL || (r->phase != REC_BOUND && r->phase != REC_UNBOUND) ||
            r->encoded == NULL || !gv_alloc_is_placed(s->cluster, uid) ||
            gv_alloc_assignment_decode(r->encoded, strlen(r->encoded), a, NULL) != GV_OK ||
            (only_node && strcmp(a->node, only_node) != 0))
            continue;
        const json_t *names = json_array_get(rec, 2);
        for (uint32_t c = 0; c < a->n_containers; c++) {
            size_t ci = container_index(names, a->containers[c].name);
            for (uint32_t d = 0; d < a->containers[c].n_devices; d++)
                fn(ud, json_string_value(json_array_get(rec, 0)),
                   json_string_value(json_array_get(rec, 1)), a->node, a->containers[c].name, ci,
                   &a->containers[c].devices[d]);
        }
    }
    free(a);
}

struct vgpu_out {
    FILE *f;
    int fam;
};

static void vgpu_sample(void *ud, const char *ns, const char *pod, const char *node,
                        const char *container, size_t cidx, const struct gv_alloc_device *d)
{
    (void)container;
    struct vgpu_out *v = ud;
    char ci[24];
    snprintf(ci, sizeof(ci), "%zu", cidx);
    fputs(v->fam == 0 ? "hami_vgpu_memory_allocated_bytes{" : "hami_vgpu_core_allocated_ratio{",
          v->f);
    put_label(v->f, "namespace", ns);
    fputc(',', v->f);
    put_label(v->f, "node", node);
    fputc(',', v->f);
    put_label(v->f, "pod", pod);
    fputc(',', v->f);
    put_label(v->f, "container_index", ci);
    fputc(',', v->f);
    put_label(v->f, "device_uuid", d->uuid);
    if (v->fam == 0)
        fprintf(v->f, ",zone=\"vGPU\"} %.0f\n", (double)d->mem_mib * MIB);
    else
        fprintf(v->f, ",zone=\"vGPU\"} %g\n", d->milli / 10.0);
}

/* Pending records with their reasons (s->lock and the observer's lock held). */
static void write_pending(struct gv_sched *s, FILE *f)
{
    static const char *const kinds[] = {
#define X_LABEL(code, label) label,
        GV_SCHED_PENDING_LIST(X_LABEL)
#undef X_LABEL
    };
    fputs("# HELP gpuvisor_scheduler_pending_pod A GPU pod the scheduler could not place, with "
          "its top failure reason (1 per pod).\n"
          "# TYPE gpuvisor_scheduler_pending_pod gauge\n",
          f);
    double now = gv_sched_now();
    for (size_t i = 0; i < s->n_recs; i++) {
        const struct srec *r = s->recs[i];
        if (r->phase != REC_PENDING)
            continue;
        const char *why = json_string_value(json_object_get(s->obs->reasons, r->uid));
        fputs("gpuvisor_scheduler_pending_pod{", f);
        put_label(f, "namespace", r->ns);
        fputc(',', f);
        put_label(f, "pod", r->name);
        fputc(',', f);
        put_label(f, "reason", kinds[r->pending]);
        fputc(',', f);
        put_label(f, "message", why ? why : "");
        fputs("} 1\n", f);
    }
    fputs("# HELP gpuvisor_scheduler_pending_pod_seconds Time since a pending pod's last "
          "unsuccessful filter.\n# TYPE gpuvisor_scheduler_pending_pod_seconds gauge\n",
          f);
    for (size_t i = 0; i < s->n_recs; i++) {
        const struct srec *r = s->recs[i];
        if (r->phase != REC_PENDING)
            continue;
        fputs("gpuvisor_scheduler_pending_pod_seconds{", f);
        put_label(f, "namespace", r->ns);
        fputc(',', f);
        put_label(f, "pod", r->name);
        fprintf(f, "} %.3f\n", now - r->since);
    }
}

void gv_sched_obs_write_metrics(struct gv_sched *s, FILE *f)
{
    struct gv_sched_obs *o = s->obs;
    if (o == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    /* fragmentation and idle GPUs: what kubectl gpuvisor defrag recovers */
    struct gv_defrag_state st;
    gv_defrag_measure(s->cluster, NULL, 0, &st, NULL);
    struct gv_alloc_frag frag = st.frag;
    pthread_mutex_lock(&o->lock);
    prune_reasons(s);
    fputs("# HELP gpuvisor_scheduler_filter_duration_seconds Time to answer a filter call, by "
          "outcome.\n# TYPE gpuvisor_scheduler_filter_duration_seconds histogram\n",
          f);
    for (int r = 0; r < FR_COUNT; r++) {
        uint64_t cum = 0;
        for (size_t b = 0; b < N_BUCKETS; b++) {
            cum += o->buckets[r][b];
            fprintf(f,
                    "gpuvisor_scheduler_filter_duration_seconds_bucket{result=\"%s\",le=\"%g\"} "
                    "%" PRIu64 "\n",
                    filter_result_labels[r], filter_buckets[b], cum);
        }
        fprintf(f,
                "gpuvisor_scheduler_filter_duration_seconds_bucket{result=\"%s\",le=\"+Inf\"} "
                "%" PRIu64 "\n"
                "gpuvisor_scheduler_filter_duration_seconds_sum{result=\"%s\"} %.9f\n"
                "gpuvisor_scheduler_filter_duration_seconds_count{result=\"%s\"} %" PRIu64 "\n",
                filter_result_labels[r], o->count[r], filter_result_labels[r], o->sum[r],
                filter_result_labels[r], o->count[r]);
    }
    write_pending(s, f);
    fprintf(f,
            "# HELP gpuvisor_cluster_fragmentation_ratio Share of the free GPU share that the "
            "learned workload cannot use (FGD measure, 0-1).\n"
            "# TYPE gpuvisor_cluster_fragmentation_ratio gauge\n"
            "gpuvisor_cluster_fragmentation_ratio %g\n"
            "# HELP gpuvisor_cluster_gpu_free_share Free GPU share over all nodes, in GPUs.\n"
            "# TYPE gpuvisor_cluster_gpu_free_share gauge\n"
            "gpuvisor_cluster_gpu_free_share %g\n"
            "# HELP gpuvisor_cluster_gpu_fragmented_share Free GPU share the workload cannot "
            "use, in GPUs.\n"
            "# TYPE gpuvisor_cluster_gpu_fragmented_share gauge\n"
            "gpuvisor_cluster_gpu_fragmented_share %g\n"
            "# HELP gpuvisor_cluster_idle_gpus Healthy GPUs no task holds (whole GPUs free; "
            "kubectl gpuvisor defrag raises it).\n"
            "# TYPE gpuvisor_cluster_idle_gpus gauge\n"
            "gpuvisor_cluster_idle_gpus %u\n",
            frag.ratio, frag.free_milli / 1000.0, frag.frag_milli / 1000.0, st.idle_gpus);
    /* per container: finer than per GPU, so behind the same opt-in (the node
     * agents export hami_vgpu_memory_limit_bytes per container) */
    if (!o->hami_off && s->cfg.metrics_per_gpu) {
        fputs("# HELP hami_vgpu_memory_allocated_bytes vGPU memory allocated from a container "
              "(HAMi name).\n# TYPE hami_vgpu_memory_allocated_bytes gauge\n",
              f);
        struct vgpu_out v = {f, 0};
        each_slice(s, NULL, vgpu_sample, &v);
        fputs("# HELP hami_vgpu_core_allocated_ratio vGPU core allocated from a container, 0-100 "
              "(HAMi name).\n# TYPE hami_vgpu_core_allocated_ratio gauge\n",
              f);
        v.fam = 1;
        each_slice(s, NULL, vgpu_sample, &v);
    }
    pthread_mutex_unlock(&o->lock);
    pthread_mutex_unlock(&s->lock);
}

/* ---- dashboard state ------------------------------------------------------ */

/* Adds the agents' live figures for this slice (observer lock held). */
static void slice_usage(struct gv_sched_obs *o, json_t *sl, const char *ns, const char *pod,
                        const char *container, const char *uuid)
{
    const struct gv_usage_row *r = gv_usage_row_find(&o->usage.ctrs, ns, pod, container, uuid);
    if (r == NULL)
        return;
    if (r->have_used)
        json_object_set_new(sl, "usedMemMiB", json_real(r->used / 1048576.0));
    if (r->have_share)
        json_object_set_new(sl, "achievedShare", json_real(r->share));
}

struct slice_ctx {
    struct gv_sched_obs *o;
    json_t *by_uuid;
};

static void slice_json(void *ud, const char *ns, const char *pod, const char *node,
                       const char *container, size_t cidx, const struct gv_alloc_device *d)
{
    (void)node;
    (void)cidx;
    struct slice_ctx *sc = ud;
    json_t *arr = json_object_get(sc->by_uuid, d->uuid);
    if (arr == NULL) {
        arr = json_array();
        json_object_set_new(sc->by_uuid, d->uuid, arr);
    }
    json_t *sl = json_pack("{s:s?,s:s?,s:s,s:I,s:f,s:s}", "namespace", ns, "pod", pod, "container",
                           container, "memMiB", (json_int_t)d->mem_mib, "cores", d->milli / 10.0,
                           "phase", "bound");
    if (sl != NULL)
        slice_usage(sc->o, sl, ns, pod, container, d->uuid);
    json_array_append_new(arr, sl);
}

static const char *node_state_name(struct gv_sched *s, const struct snode *n, time_t now)
{
    if (n->state == NODE_NO_INVENTORY)
        return "no_agent";
    if (n->state == NODE_MALFORMED)
        return "unusable";
    if (n->heartbeat == 0 || now - n->heartbeat > s->cfg.heartbeat_timeout_s)
        return "stale";
    return "ready";
}

/* Reservations (filter placed, bind not done) shown as slices too. */
static void reserved_slices(struct gv_sched *s, json_t *by_uuid)
{
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    for (size_t i = 0; a != NULL && i < s->n_recs; i++) {
        const struct srec *r = s->recs[i];
        if ((r->phase != REC_RESERVED && r->phase != REC_BINDING) || r->encoded == NULL ||
            gv_alloc_assignment_decode(r->encoded, strlen(r->encoded), a, NULL) != GV_OK)
            continue;
        for (uint32_t c = 0; c < a->n_containers; c++)
            for (uint32_t d = 0; d < a->containers[c].n_devices; d++) {
                const struct gv_alloc_device *dv = &a->containers[c].devices[d];
                json_t *arr = json_object_get(by_uuid, dv->uuid);
                if (arr == NULL) {
                    arr = json_array();
                    json_object_set_new(by_uuid, dv->uuid, arr);
                }
                json_array_append_new(arr,
                                      json_pack("{s:s?,s:s?,s:s,s:I,s:f,s:s}", "namespace", r->ns,
                                                "pod", r->name, "container", a->containers[c].name,
                                                "memMiB", (json_int_t)dv->mem_mib, "cores",
                                                dv->milli / 10.0, "phase", "reserved"));
            }
    }
    free(a);
}

char *gv_sched_obs_state_json(struct gv_sched *s)
{
    struct gv_sched_obs *o = s->obs;
    if (o == NULL)
        return NULL;
    json_t *root = json_object(), *nodes = json_array(), *pending = json_array();
    json_t *history = json_array(), *by_uuid = json_object();
    struct gv_alloc_frag frag;
    struct gv_alloc_totals tot;
    time_t now = time(NULL);
    pthread_mutex_lock(&s->lock);
    pthread_mutex_lock(&o->lock);
    struct sample cur = take_sample(s, &frag, &tot);
    prune_reasons(s);
    struct slice_ctx sctx = {o, by_uuid};
    each_slice(s, NULL, slice_json, &sctx);
    reserved_slices(s, by_uuid);
    for (size_t i = 0; i < s->n_nodes; i++) {
        const struct snode *n = s->nodes[i];
        json_t *gpus = json_array();
        uint32_t ng = n->in_engine ? gv_alloc_node_gpu_count(s->cluster, n->name) : 0;
        for (uint32_t g = 0; g < ng; g++) {
            struct gv_alloc_gpu_info gi;
            if (gv_alloc_gpu_info_at(s->cluster, n->name, g, &gi, NULL) != GV_OK)
                continue;
            json_t *sl = json_object_get(by_uuid, gi.uuid);
            json_array_append_new(
                gpus, json_pack("{s:s,s:I,s:s?,s:I,s:I,s:f,s:I,s:I,s:b,s:s,s:o}", "uuid", gi.uuid,
                                "index", (json_int_t)gi.index, "model", gi.model, "memMiB",
                                (json_int_t)gi.mem_mib, "usedMemMiB", (json_int_t)gi.used_mem_mib,
                                "usedCores", gi.used_milli / 10.0, "tasks", (json_int_t)gi.tasks,
                                "split", (json_int_t)gi.split, "healthy", gi.healthy, "mode",
                                gi.mode == GV_ALLOC_GPU_EXCLUSIVE ? "exclusive"
                                : gi.mode == GV_ALLOC_GPU_MPS ? "mps" : "shared",
                                "slices", sl ? json_incref(sl) : json_array()));
            const struct gv_usage_row *live =
                gv_usage_row_find(&o->usage.gpus, "", "", "", gi.uuid);
            json_t *gj = json_array_get(gpus, json_array_size(gpus) - 1);
            if (live != NULL && live->have_util)
                json_object_set_new(gj, "utilPercent", json_real(live->util));
            if (live != NULL && live->have_fb)
                json_object_set_new(gj, "fbUsedMiB", json_real(live->fb_used));
        }
        double nf = 0;
        if (n->in_engine)
            gv_alloc_node_fragmentation(s->cluster, n->name, &nf, NULL);
        json_t *nj = json_pack("{s:s,s:s,s:s?,s:f,s:o}", "name", n->name, "state",
                               node_state_name(s, n, now), "reason", n->reason, "fragMilli", nf,
                               "gpus", gpus);
        if (nj && n->n_whole) /* docs/passthrough.md: devices for VMs, counted by the kubelet */
            json_object_set_new(nj, "wholeDevices", json_integer(n->n_whole));
        json_array_append_new(nodes, nj);
    }
    double mono = gv_sched_now();
    for (size_t i = 0; i < s->n_recs; i++) {
        const struct srec *r = s->recs[i];
        if (r->phase != REC_PENDING)
            continue;
        static const char *const kinds[] = {
#define X_LABEL(code, label) label,
            GV_SCHED_PENDING_LIST(X_LABEL)
#undef X_LABEL
        };
        json_array_append_new(pending,
                              json_pack("{s:s?,s:s?,s:s,s:s?,s:f}", "namespace", r->ns, "pod",
                                        r->name, "reason", kinds[r->pending], "message",
                                        json_string_value(json_object_get(o->reasons, r->uid)),
                                        "seconds", mono - r->since));
    }
    for (size_t k = 0; k < o->ring_n; k++) {
        const struct sample *x =
            &o->ring[(o->ring_head + HISTORY_LEN - o->ring_n + k) % HISTORY_LEN];
        json_array_append_new(history, json_pack("[I,f,f,f,I]", (json_int_t)x->t,
                                                 (double)x->frag_ratio, (double)x->mem_used,
                                                 (double)x->cores_used, (json_int_t)x->pending));
    }
    json_array_append_new(history, json_pack("[I,f,f,f,I]", (json_int_t)cur.t,
                                             (double)cur.frag_ratio, (double)cur.mem_used,
                                             (double)cur.cores_used, (json_int_t)cur.pending));
    pthread_mutex_unlock(&o->lock);
    pthread_mutex_unlock(&s->lock);
    json_object_set_new(root, "version", json_string(GV_VERSION));
    json_object_set_new(root, "time", json_integer((json_int_t)now));
    json_object_set_new(root, "ready", json_boolean(gv_sched_ready(s)));
    json_object_set_new(root, "totals",
                        json_pack("{s:I,s:I,s:I,s:I,s:f,s:f,s:I,s:I}", "nodes",
                                  (json_int_t)tot.nodes, "gpus", (json_int_t)tot.gpus, "memMiB",
                                  (json_int_t)tot.mem_capacity_mib, "usedMemMiB",
                                  (json_int_t)tot.mem_used_mib, "cores", tot.milli_capacity / 10.0,
                                  "usedCores", tot.milli_used / 10.0, "pods", (json_int_t)tot.pods,
                                  "pending", (json_int_t)cur.pending));
    json_object_set_new(root, "fragmentation",
                        json_pack("{s:f,s:f,s:f}", "ratio", frag.ratio, "fragGPUs",
                                  frag.frag_milli / 1000.0, "freeGPUs", frag.free_milli / 1000.0));
    json_object_set_new(root, "historyIntervalSeconds", json_real(HISTORY_INTERVAL_S));
    pthread_mutex_lock(&o->lock);
    json_object_set_new(root, "usage",
                        json_pack("{s:I,s:I,s:I,s:f}", "time", (json_int_t)o->usage_time, "agents",
                                  (json_int_t)o->agents_ok, "agentsFailed",
                                  (json_int_t)o->agents_failed, "intervalSeconds",
                                  USAGE_INTERVAL_S));
    pthread_mutex_unlock(&o->lock);
    json_object_set_new(root, "history", history);
    json_object_set_new(root, "nodes", nodes);
    json_object_set_new(root, "pending", pending);
    json_decref(by_uuid);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

/* ---- dashboard routes ------------------------------------------------------ */

static void handle_asset(void *ctx, const struct gv_http_request *hreq,
                         struct gv_http_response *resp)
{
    (void)ctx;
    const struct gv_dashboard_asset *a = gv_dashboard_find(hreq->path);
    if (a == NULL) {
        gv_http_respond_error(resp, 404, "no such page");
        return;
    }
    gv_http_respond(resp, 200, a->content_type, (const char *)a->data);
}

static void handle_state(void *ctx, const struct gv_http_request *hreq,
                         struct gv_http_response *resp)
{
    (void)hreq;
    char *text = gv_sched_obs_state_json(ctx);
    if (text == NULL) {
        gv_http_respond_error(resp, 500, "out of memory");
        return;
    }
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = text;
    resp->body_len = strlen(text);
}

gv_status gv_sched_serve_dashboard(struct gv_sched *s, struct gv_httpd *h, struct gv_error *err)
{
    if (sampler_start(s) != GV_OK)
        return gv_error_set(err, GV_EINTERNAL, "cannot start the dashboard's sampler thread");
    gv_status st = gv_httpd_route(h, "GET", "/api/state", handle_state, s, err);
    if (st == GV_OK)
        st = gv_httpd_route(h, "GET", "/", handle_asset, s, err);
    for (const struct gv_dashboard_asset *a = gv_dashboard_assets; st == GV_OK && a->path; a++)
        st = gv_httpd_route(h, "GET", a->path, handle_asset, s, err);
    return st;
}
