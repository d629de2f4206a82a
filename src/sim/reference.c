/*
 * What is achievable: an offline oracle and a lower bound on unallocated
 * GPU share at 100 % arrived, for the same arrivals as the online replays
 * (docs/simulate.md, "Offline reference").
 *
 * Oracle: sees every pod that arrives until the arrived GPU request
 * reaches the cluster's capacity and places them through the engine three
 * ways: in arrival order under fgd with the whole workload observed first,
 * and sorted by GPU demand (largest first, then CPU) under binpack (best
 * fit decreasing) and under fgd.  The best of the three counts.  It is a
 * heuristic that knows the future, not an optimum: an online policy may
 * beat it on a trace, which the report then shows.
 *
 * Bound: no placement can allocate more than the arrived pods that fit on
 * some empty node, nor, for any set S of GPU models, more on S than its
 * capacity: allocated <= min over S of (capacity(S) + demand of the pods
 * that may use a model outside S).  That is the max-flow of a transport
 * relaxation (GPU shares split freely), so it ignores CPU, packing and
 * multi-GPU shape: a floor, often far below what any placement reaches.
 * The same for CPU and for memory: summed over nodes, the arrivals' GPU
 * share per unit of the resource taken greedily (a fractional knapsack)
 * bounds what any placement allocates when that resource binds.  The
 * reported bound is the LP relaxation of lpbound.c, which implies all of
 * these and adds per-node-type resources and packing cuts; the capacity
 * bound stays beside it for comparison.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sim/sim_internal.h"

#define REF_MAX_MODELS 16

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Models of the trace's GPUs (case-insensitive), at most REF_MAX_MODELS. */
struct models {
    const char *name[REF_MAX_MODELS];
    uint64_t cap[REF_MAX_MODELS]; /* milli */
    uint32_t n;
    bool too_many;
};

static int model_of(struct models *m, const char *name)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (strcasecmp(m->name[i], name) == 0)
            return (int)i;
    if (m->n == REF_MAX_MODELS) {
        m->too_many = true;
        return -1;
    }
    m->name[m->n] = name;
    return (int)m->n++;
}

static gv_status cluster_of(const struct gv_sim_trace *t, gv_alloc_policy policy,
                            struct gv_alloc_cluster **c, struct gv_error *err)
{
    struct gv_alloc_config cfg;
    sim_engine_config(t, &cfg);
    cfg.node_policy = policy;
    cfg.gpu_policy = GV_ALLOC_GPU_BINPACK;
    gv_status rc = gv_alloc_cluster_new(&cfg, c, err);
    for (size_t i = 0; rc == GV_OK && i < t->n_nodes; i++)
        rc = gv_alloc_node_upsert(*c, &t->nodes[i].spec, err);
    return rc;
}

static bool same_list(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/*
 * Per pod template: the set of models it can run on alone on an empty node
 * (bit i = model i), 0 when it fits nowhere.  Decided by the engine on an
 * empty cluster, one candidate list per model, so CPU, memory, GPU count
 * and type constraints count exactly as in the replays.
 */
static gv_status template_masks(const struct gv_sim_trace *t, const struct models *m,
                                const int *node_model, uint32_t *mask, struct gv_error *err)
{
    struct gv_alloc_cluster *c = NULL;
    const char **cand = calloc(t->n_nodes ? t->n_nodes : 1, sizeof(*cand));
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    gv_status rc = cand && a ? cluster_of(t, GV_ALLOC_POLICY_BINPACK, &c, err)
                             : gv_error_set(err, GV_ENOMEM, "out of memory");
    for (size_t p = 0; rc == GV_OK && p < t->n_pods; p++) {
        mask[p] = 0;
        /* identical templates (most of a trace) share the answer */
        for (size_t q = 0; q < p; q++) {
            const struct gv_alloc_request *x = t->pods[p], *y = t->pods[q];
            if (x->cpu_milli == y->cpu_milli && x->mem_mib == y->mem_mib &&
                x->n_containers == y->n_containers && x->n_containers <= 1 &&
                (x->n_containers == 0 ||
                 (x->containers[0].num_gpu == y->containers[0].num_gpu &&
                  x->containers[0].milli == y->containers[0].milli &&
                  x->containers[0].mem == y->containers[0].mem &&
                  x->containers[0].mem_kind == y->containers[0].mem_kind)) &&
                same_list(x->constraint[GV_ALLOC_USE_TYPE], y->constraint[GV_ALLOC_USE_TYPE]) &&
                same_list(x->constraint[GV_ALLOC_NOUSE_TYPE], y->constraint[GV_ALLOC_NOUSE_TYPE])) {
                mask[p] = mask[q] | 0x80000000u;
                break;
            }
        }
        if (mask[p] != 0)
            continue;
        for (uint32_t mi = 0; mi < m->n; mi++) {
            size_t n = 0;
            for (size_t i = 0; i < t->n_nodes; i++)
                if (node_model[i] == (int)mi)
                    cand[n++] = t->nodes[i].spec.name;
            if (n > 0 && gv_alloc_pick(c, t->pods[p], cand, n, a, NULL) == GV_OK)
                mask[p] |= 1u << mi;
        }
        mask[p] |= 0x80000000u; /* computed */
    }
    for (size_t p = 0; p < t->n_pods; p++)
        mask[p] &= ~0x80000000u;
    gv_alloc_cluster_free(c);
    free(cand);
    free(a);
    return rc;
}

struct arrival {
    size_t pod;
    uint64_t milli;
    int64_t cpu;
    uint64_t seq;
    double ratio; /* GPU milli per unit of the host resource being bounded */
};

static int by_ratio(const void *x, const void *y)
{
    const struct arrival *a = x, *b = y;
    return a->ratio > b->ratio ? -1 : a->ratio < b->ratio;
}

/*
 * Most GPU share the arrivals can take when all they share is one host
 * resource of the cluster (CPU or memory, summed over nodes): a fractional
 * knapsack, filled by GPU share per unit of the resource.  need(i) is pod
 * i's request; pods that fit nowhere (mask 0) are left out.
 */
static double host_bound(const struct gv_sim_trace *t, struct arrival *arr, size_t n,
                         const uint32_t *mask, bool cpu)
{
    double total = 0;
    for (size_t i = 0; i < t->n_nodes; i++) {
        int64_t cap = cpu ? t->nodes[i].spec.cpu_milli : t->nodes[i].spec.mem_mib;
        if (cap <= 0)
            return INFINITY; /* a node that does not count this resource */
        total += (double)cap;
    }
    for (size_t i = 0; i < n; i++) {
        const struct gv_alloc_request *r = t->pods[arr[i].pod];
        double need = (double)(cpu ? r->cpu_milli : r->mem_mib);
        arr[i].ratio = mask[arr[i].pod] == 0 || arr[i].milli == 0 ? -1.0
                       : need <= 0                               ? INFINITY
                                                                 : (double)arr[i].milli / need;
    }
    qsort(arr, n, sizeof(*arr), by_ratio);
    double got = 0;
    for (size_t i = 0; i < n && arr[i].ratio >= 0; i++) {
        const struct gv_alloc_request *r = t->pods[arr[i].pod];
        double need = (double)(cpu ? r->cpu_milli : r->mem_mib);
        if (need <= total) {
            total -= need;
            got += (double)arr[i].milli;
        } else {
            got += (double)arr[i].milli * total / need;
            break;
        }
    }
    return got;
}

static int by_seq(const void *x, const void *y)
{
    const struct arrival *a = x, *b = y;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int by_demand(const void *x, const void *y)
{
    const struct arrival *a = x, *b = y;
    if (a->milli != b->milli)
        return a->milli > b->milli ? -1 : 1;
    if (a->cpu != b->cpu)
        return a->cpu > b->cpu ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}


/* Allocated milli of placing arrivals in their (sorted) order. */
static gv_status place_all(const struct gv_sim_trace *t, gv_alloc_policy policy,
                           const struct arrival *arr, size_t n, uint64_t *allocated,
                           struct gv_error *err)
{
    struct gv_alloc_cluster *c = NULL;
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    gv_status rc = a ? cluster_of(t, policy, &c, err)
                     : gv_error_set(err, GV_ENOMEM, "out of memory");
    *allocated = 0;
    if (rc == GV_OK && policy == GV_ALLOC_POLICY_FGD)
        for (size_t i = 0; i < n; i++) /* it knows the whole workload */
            gv_alloc_observe(c, t->pods[arr[i].pod]);
    for (size_t i = 0; rc == GV_OK && i < n; i++) {
        struct gv_alloc_request *r = t->pods[arr[i].pod];
        snprintf(r->uid, sizeof(r->uid), "o%zu", i);
        if (gv_alloc_pick(c, r, NULL, 0, a, NULL) == GV_OK && gv_alloc_place(c, r, a, NULL) == GV_OK)
            *allocated += arr[i].milli;
    }
    gv_alloc_cluster_free(c);
    free(a);
    return rc;
}

/* The LP bound for the arrivals, never weaker than the capacity bound. */
static gv_status lp_of(const struct gv_sim_trace *t, const struct arrival *arr, size_t n,
                       uint64_t cap, struct gv_sim_reference *out, struct gv_error *err)
{
    size_t *pods = malloc((n ? n : 1) * sizeof(*pods));
    if (pods == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        pods[i] = arr[i].pod;
    struct sim_lp lp;
    gv_status rc = sim_lp_bound(t, pods, n, &lp, err);
    free(pods);
    if (rc == GV_EINTERNAL) {
        /* GLPK gave no optimum (its time limit): the capacity bound stands */
        out->bound_unalloc_pct = out->capacity_bound_unalloc_pct;
        return GV_OK;
    }
    if (rc != GV_OK)
        return rc;
    double b = 100.0 - 100.0 * fmin(lp.alloc_milli, (double)cap) / (double)cap;
    out->bound_unalloc_pct = fmax(b, out->capacity_bound_unalloc_pct);
    out->lp_seconds = lp.seconds;
    return GV_OK;
}

static gv_status reference(const struct gv_sim_trace *t, uint64_t seed, bool oracle,
                           struct gv_sim_reference *out, struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    double t0 = now();
    uint64_t cap = gv_sim_trace_gpu_milli(t);
    if (cap == 0 || gv_sim_trace_request_milli(t) == 0)
        return gv_error_set(err, GV_EINVAL, "the cluster has no GPUs or the workload none");
    struct models m = {0};
    int *node_model = calloc(t->n_nodes, sizeof(*node_model));
    uint32_t *mask = calloc(t->n_pods, sizeof(*mask));
    struct arrival *arr = NULL;
    size_t n = 0, cap_arr = 0;
    struct sim_arrivals seq = {0};
    gv_status rc = GV_OK;
    if (node_model == NULL || mask == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < t->n_nodes; i++) {
        node_model[i] = -1;
        const struct gv_alloc_node_spec *s = &t->nodes[i].spec;
        if (s->n_gpus == 0)
            continue;
        /* a node of mixed models counts under its first GPU's model */
        node_model[i] = model_of(&m, s->gpus[0].model ? s->gpus[0].model : "");
        if (node_model[i] >= 0)
            m.cap[node_model[i]] += (uint64_t)s->n_gpus * GV_ALLOC_MILLI;
    }
    if ((rc = template_masks(t, &m, node_model, mask, err)) != GV_OK)
        goto done;
    /* The arrivals of the online replays up to 100 % arrived. */
    if ((rc = sim_arrivals_init(&seq, t, seed, err)) != GV_OK)
        goto done;
    for (uint64_t arrived = 0; arrived < cap;) {
        if (n == cap_arr) {
            size_t nc = cap_arr ? cap_arr * 2 : 4096;
            struct arrival *x = realloc(arr, nc * sizeof(*x));
            if (x == NULL) {
                rc = gv_error_set(err, GV_ENOMEM, "out of memory");
                goto done;
            }
            arr = x;
            cap_arr = nc;
        }
        size_t p = sim_arrivals_next(&seq);
        arr[n] = (struct arrival){p, sim_pod_milli(t->pods[p]), t->pods[p]->cpu_milli, n, 0};
        arrived += arr[n++].milli;
    }
    /* Bound (Hall / min-cut over model sets; all sets when few models). */
    double best = (double)cap;
    uint32_t full = (1u << m.n) - 1;
    for (uint32_t s = m.too_many ? full : 0; s <= full; s++) {
        double v = 0;
        for (uint32_t i = 0; i < m.n; i++)
            if (s & (1u << i))
                v += (double)m.cap[i];
        for (size_t i = 0; i < n; i++)
            if ((mask[arr[i].pod] & ~s) != 0)
                v += (double)arr[i].milli;
        if (v < best)
            best = v;
    }
    /* CPU and memory: the same, one host resource at a time */
    best = fmin(best, host_bound(t, arr, n, mask, true));
    best = fmin(best, host_bound(t, arr, n, mask, false));
    out->capacity_bound_unalloc_pct = 100.0 - 100.0 * fmin(best, (double)cap) / (double)cap;
    /* The LP relaxation (lpbound.c) holds every constraint above and more. */
    if ((rc = lp_of(t, arr, n, cap, out, err)) != GV_OK)
        goto done;
    if (!oracle) {
        out->oracle_unalloc_pct = NAN;
        out->seconds = now() - t0;
        goto done;
    }
    /* restore arrival order for the oracle */
    qsort(arr, n, sizeof(*arr), by_seq);
    /* Oracle. */
    /* arrival order with the whole workload known, then largest GPU demand
     * first under best fit and under FGD */
    uint64_t alloc = 0, got;
    for (int variant = 0; variant < 3; variant++) {
        if (variant == 1)
            qsort(arr, n, sizeof(*arr), by_demand);
        rc = place_all(t, variant == 1 ? GV_ALLOC_POLICY_BINPACK : GV_ALLOC_POLICY_FGD, arr, n,
                       &got, err);
        if (rc != GV_OK)
            goto done;
        if (got > alloc)
            alloc = got;
    }
    out->oracle_unalloc_pct = 100.0 - 100.0 * (double)alloc / (double)cap;
    out->seconds = now() - t0;
done:
    sim_arrivals_fini(&seq);
    free(arr);
    free(mask);
    free(node_model);
    return rc;
}

gv_status gv_sim_reference(const struct gv_sim_trace *t, uint64_t seed,
                           struct gv_sim_reference *out, struct gv_error *err)
{
    return reference(t, seed, true, out, err);
}

gv_status gv_sim_reference_bounds(const struct gv_sim_trace *t, uint64_t seed,
                                  struct gv_sim_reference *out, struct gv_error *err)
{
    return reference(t, seed, false, out, err);
}
