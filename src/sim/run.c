/*
 * The openb replay protocol (as in the FGD paper's artifact):
 *   1. shuffle the trace's pods with the seed;
 *   2. keep drawing pods - the shuffled trace first, then uniform resamples
 *      with replacement - until the arrived GPU request reaches
 *      inflate x capacity;
 *   3. each pod gets one scheduling attempt, nothing ever departs;
 *   4. after every arrival record allocated vs arrived GPU share.
 * The engine learns the workload online: every arrival is observed before
 * it is placed, exactly as the scheduler does with a new pod.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/sim_internal.h"

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void gv_sim_rng_seed(struct gv_sim_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t gv_sim_rng_next(struct gv_sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t gv_sim_rng_below(struct gv_sim_rng *r, uint64_t n)
{
    /* rejection sampling: no modulo bias */
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = gv_sim_rng_next(r);
    while (x >= lim);
    return x % n;
}

void gv_sim_curve_free(struct gv_sim_curve *c)
{
    free(c->allocated);
    memset(c, 0, sizeof(*c));
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* a = 0..n-1 in the order of a Fisher-Yates shuffle drawn from r. */
static void identity_shuffled(struct gv_sim_rng *r, size_t *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)gv_sim_rng_below(r, i);
        size_t x = a[i - 1];
        a[i - 1] = a[j];
        a[j] = x;
    }
}

gv_status sim_arrivals_init(struct sim_arrivals *a, const struct gv_sim_trace *t, uint64_t seed,
                            struct gv_error *err)
{
    memset(a, 0, sizeof(*a));
    a->t = t;
    a->order = malloc((t->n_pods ? t->n_pods : 1) * sizeof(*a->order));
    if (a->order == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    gv_sim_rng_seed(&a->rng, seed);
    identity_shuffled(&a->rng, a->order, t->n_pods);
    return GV_OK;
}

size_t sim_arrivals_next(struct sim_arrivals *a)
{
    uint64_t k = a->k++;
    return k < a->t->n_pods ? a->order[k] : (size_t)gv_sim_rng_below(&a->rng, a->t->n_pods);
}

void sim_arrivals_fini(struct sim_arrivals *a)
{
    free(a->order);
    a->order = NULL;
}

static gv_alloc_gpu_policy gpu_policy_for(gv_alloc_policy p)
{
    return p == GV_ALLOC_POLICY_SPREAD ? GV_ALLOC_GPU_SPREAD : GV_ALLOC_GPU_BINPACK;
}

/* FNV-1a over the decision, chained. */
static uint64_t hash_decision(uint64_t h, uint64_t k, const struct gv_alloc_assignment *a)
{
    uint64_t x = h ^ k;
    x *= UINT64_C(0x100000001b3);
    for (const char *p = a->node; *p != '\0'; p++)
        x = (x ^ (unsigned char)*p) * UINT64_C(0x100000001b3);
    for (uint32_t i = 0; i < a->n_containers; i++)
        for (uint32_t d = 0; d < a->containers[i].n_devices; d++)
            for (const char *p = a->containers[i].devices[d].uuid; *p != '\0'; p++)
                x = (x ^ (unsigned char)*p) * UINT64_C(0x100000001b3);
    return x;
}

static gv_status run(const struct gv_sim_trace *t, gv_alloc_policy policy, uint64_t seed,
                     double inflate, bool exhaustive, struct gv_sim_curve *out,
                     struct gv_error *err);

gv_status gv_sim_run(const struct gv_sim_trace *t, gv_alloc_policy policy, uint64_t seed,
                     double inflate, struct gv_sim_curve *out, struct gv_error *err)
{
    return run(t, policy, seed, inflate, false, out, err);
}

gv_status gv_sim_run_exhaustive(const struct gv_sim_trace *t, gv_alloc_policy policy,
                                uint64_t seed, double inflate, struct gv_sim_curve *out,
                                struct gv_error *err)
{
    return run(t, policy, seed, inflate, true, out, err);
}

void gv_sim_trace_set_shuffle_names(struct gv_sim_trace *t, bool on)
{
    t->shuffle_names = on;
}

/*
 * The trace's nodes into c.  With shuffle_names each name gets a prefix
 * from a permutation drawn from the seed (its own stream: the arrivals stay
 * those of the seed), as the FGD paper's artifact renames its nodes: score
 * ties go to the smallest name there and here, so the nodes that win ties
 * change from seed to seed instead of always being the trace's first ones.
 */
static gv_status upsert_nodes(struct gv_alloc_cluster *c, const struct gv_sim_trace *t,
                              uint64_t seed, struct gv_error *err)
{
    if (!t->shuffle_names) {
        for (size_t i = 0; i < t->n_nodes; i++) {
            gv_status rc = gv_alloc_node_upsert(c, &t->nodes[i].spec, err);
            if (rc != GV_OK)
                return rc;
        }
        return GV_OK;
    }
    size_t *perm = malloc((t->n_nodes ? t->n_nodes : 1) * sizeof(*perm));
    if (perm == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    struct gv_sim_rng r;
    gv_sim_rng_seed(&r, seed ^ UINT64_C(0x6e6f646573)); /* "nodes" */
    identity_shuffled(&r, perm, t->n_nodes);
    gv_status rc = GV_OK;
    for (size_t i = 0; rc == GV_OK && i < t->n_nodes; i++) {
        char name[GV_ALLOC_NODE_MAX + 8];
        int len = snprintf(name, sizeof(name), "%06zu-%s", perm[i], t->nodes[i].spec.name);
        if (len < 0 || (size_t)len >= GV_ALLOC_NODE_MAX) {
            rc = gv_error_set(err, GV_EINVAL, "node %.200s: name too long to shuffle",
                              t->nodes[i].spec.name);
            break;
        }
        struct gv_alloc_node_spec spec = t->nodes[i].spec;
        spec.name = name;
        rc = gv_alloc_node_upsert(c, &spec, err);
    }
    free(perm);
    return rc;
}

static gv_status run(const struct gv_sim_trace *t, gv_alloc_policy policy, uint64_t seed,
                     double inflate, bool exhaustive, struct gv_sim_curve *out,
                     struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    uint64_t cap = gv_sim_trace_gpu_milli(t);
    if (cap == 0)
        return gv_error_set(err, GV_EINVAL, "the cluster has no GPUs");
    if (gv_sim_trace_request_milli(t) == 0)
        return gv_error_set(err, GV_EINVAL, "the workload requests no GPUs");
    if (!(inflate > 0 && inflate <= 10))
        return gv_error_set(err, GV_EINVAL, "inflate %.3g outside (0, 10]", inflate);
    double t0 = now();
    gv_status rc;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    cfg.node_policy = policy;
    cfg.gpu_policy = gpu_policy_for(policy);
    cfg.exhaustive = exhaustive;
    out->placement_hash = UINT64_C(0xcbf29ce484222325);
    struct gv_alloc_cluster *c = NULL;
    struct sim_arrivals arr = {0};
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    out->n = (uint32_t)floor(inflate * 100.0 + 1e-9) + 1;
    out->allocated = calloc(out->n, sizeof(*out->allocated));
    if (a == NULL || out->allocated == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = gv_alloc_cluster_new(&cfg, &c, err)) != GV_OK)
        goto fail;
    if ((rc = upsert_nodes(c, t, seed, err)) != GV_OK)
        goto fail;
    if ((rc = sim_arrivals_init(&arr, t, seed, err)) != GV_OK)
        goto fail;
    double target = inflate * (double)cap;
    uint64_t arrived = 0, allocated = 0;
    uint32_t next = 0;
    out->allocated[next++] = 0.0;
    for (uint64_t k = 0; (double)arrived < target; k++) {
        struct gv_alloc_request *r = t->pods[sim_arrivals_next(&arr)];
        snprintf(r->uid, sizeof(r->uid), "a%llu", (unsigned long long)k);
        gv_alloc_observe(c, r);
        uint64_t milli = sim_pod_milli(r);
        out->arrivals++;
        if (gv_alloc_pick(c, r, NULL, 0, a, NULL) == GV_OK &&
            gv_alloc_place(c, r, a, NULL) == GV_OK) {
            out->placed++;
            allocated += milli;
            out->placement_hash = hash_decision(out->placement_hash, k, a);
        } else {
            out->failed++;
        }
        arrived += milli;
        double pct = (double)arrived * 100.0 / (double)cap;
        while (next < out->n && (double)next <= pct + 1e-9)
            out->allocated[next++] = (double)allocated * 100.0 / (double)cap;
    }
    while (next < out->n)
        out->allocated[next++] = (double)allocated * 100.0 / (double)cap;
    out->seconds = now() - t0;
    gv_alloc_cluster_free(c);
    sim_arrivals_fini(&arr);
    free(a);
    return GV_OK;
fail:
    gv_alloc_cluster_free(c);
    sim_arrivals_fini(&arr);
    free(a);
    gv_sim_curve_free(out);
    return rc;
}
