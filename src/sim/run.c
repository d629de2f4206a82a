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

/* A preemption's victims, counted off the replay's totals: amilli[k] is
 * arrival k's GPU share (uids "a<k>"). */
struct evictions {
    const uint64_t *amilli;
    struct gv_sim_curve *out;
    uint64_t milli;
};

static void count_eviction(void *ud, const char *uid)
{
    struct evictions *e = ud;
    uint64_t m = e->amilli[strtoull(uid + 1, NULL, 10)];
    e->out->evicted++;
    e->out->evicted_milli += m;
    e->milli += m;
}

static bool whole_known(void *ud, const char *name)
{
    return sim_whole_known(ud, name);
}

/*
 * Count placement of a pod asking whole devices, as the scheduler's
 * extender does (src/scheduler/whole.c): the fitting node with the fewest
 * of the asked devices left over, first in trace order on ties.  held[i]
 * is what earlier pods hold of node i's whole devices.  Node index, or -1.
 */
static long whole_place(const struct gv_sim_trace *t, uint32_t **held,
                        const struct gv_podspec_whole_req *w)
{
    long best = -1;
    uint64_t best_slack = UINT64_MAX;
    char why[256];
    for (size_t i = 0; i < t->n_nodes; i++) {
        const struct sim_node *n = &t->nodes[i];
        uint64_t slack;
        if (!gv_podspec_whole_fits(n->whole, n->n_whole, held[i], w, whole_known, (void *)t,
                                   &slack, why, sizeof(why)))
            continue;
        if (slack < best_slack) {
            best = (long)i;
            best_slack = slack;
        }
    }
    if (best >= 0) {
        const struct sim_node *n = &t->nodes[best];
        for (uint32_t k = 0; k < w->n; k++)
            for (uint32_t r = 0; r < n->n_whole; r++)
                if (strcmp(n->whole[r].resource, w->r[k].resource) == 0)
                    held[best][r] += w->r[k].count;
    }
    return best;
}

static void whole_free(uint32_t **held, size_t n)
{
    for (size_t i = 0; held != NULL && i < n; i++)
        free(held[i]);
    free(held);
}

/* The nodes sorted by name, to find a decision's node (topology only). */
struct named {
    const char *name;
    const struct sim_node *node;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

static const struct sim_node *node_named(const struct gv_sim_trace *t, const struct named *sorted,
                                         const char *name)
{
    size_t lo = 0, hi = t->n_nodes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(sorted[mid].name, name);
        if (c == 0)
            return sorted[mid].node;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Distinct groups among the GPUs gi[0..k) (group 0 = a group of its own). */
static uint32_t groups_touched(const uint16_t *grp, const uint32_t *gi, uint32_t k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < k; i++) {
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = grp[gi[i]] != 0 && grp[gi[j]] == grp[gi[i]];
        n += !seen;
    }
    return n;
}

/* The fewest groups of the node's layout that hold k GPUs (largest first). */
static uint32_t groups_needed(const uint16_t *grp, uint32_t n_gpus, uint32_t k)
{
    uint32_t size[GV_ALLOC_MAX_NODE_GPUS], n = 0;
    for (uint32_t g = 0; g < n_gpus; g++) {
        bool seen = false;
        for (uint32_t h = 0; h < g && !seen; h++)
            seen = grp[g] != 0 && grp[h] == grp[g];
        if (seen)
            continue;
        size[n] = 1;
        for (uint32_t h = g + 1; grp[g] != 0 && h < n_gpus; h++)
            size[n] += grp[h] == grp[g];
        n++;
    }
    uint32_t used = 0, have = 0;
    while (have < k && used < n) {
        uint32_t best = used;
        for (uint32_t i = used + 1; i < n; i++)
            if (size[i] > size[best])
                best = i;
        uint32_t x = size[best];
        size[best] = size[used];
        size[used++] = x;
        have += x;
    }
    return used;
}

/* Counts how the GPUs of each multi-GPU container of a are joined. */
static void count_links(const struct gv_sim_trace *t, const struct named *sorted,
                        const struct gv_alloc_assignment *a, struct gv_sim_curve *out)
{
    const struct sim_node *n = node_named(t, sorted, a->node);
    if (n == NULL || !n->links)
        return;
    uint32_t ng = (uint32_t)n->spec.n_gpus;
    for (uint32_t i = 0; i < a->n_containers; i++) {
        const struct gv_alloc_container_assign *ca = &a->containers[i];
        uint32_t gi[GV_ALLOC_MAX_DEVICES], k = 0;
        for (uint32_t d = 0; d < ca->n_devices; d++) {
            uint32_t g = 0;
            while (g < ng && strcmp(n->spec.gpus[g].uuid, ca->devices[d].uuid) != 0)
                g++;
            if (g < ng)
                gi[k++] = g;
        }
        if (k < 2)
            continue;
        uint32_t nv = groups_touched(n->nvlink, gi, k), pc = groups_touched(n->pcie, gi, k);
        bool one_nv = nv == 1 && n->nvlink[gi[0]] != 0, one_pc = pc == 1 && n->pcie[gi[0]] != 0;
        out->multi_gpu++;
        if (one_nv)
            out->multi_nvlink++;
        else if (one_pc)
            out->multi_pcie++;
        else
            out->multi_spanning++;
        if (nv == groups_needed(n->nvlink, ng, k) && pc == groups_needed(n->pcie, ng, k))
            out->multi_tight++;
    }
}

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

void gv_sim_trace_set_exact(struct gv_sim_trace *t, bool on)
{
    t->exact = on;
}

void sim_engine_config(const struct gv_sim_trace *t, struct gv_alloc_config *cfg)
{
    gv_alloc_config_default(cfg);
    if (t->exact)
        cfg->score_all_nodes = 0;
}

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; names != NULL && i < n; i++)
        free(names[i]);
    free(names);
}

/*
 * The names a replay gives the trace's nodes: *out = NULL (the trace's own)
 * unless shuffle_names, then each name gets a prefix from a permutation
 * drawn from the seed (its own stream: the arrivals stay those of the
 * seed), as the FGD paper's artifact renames its nodes: score ties go to
 * the smallest name there and here, so the nodes that win ties change from
 * seed to seed instead of always being the trace's first ones.
 */
static gv_status replay_names(const struct gv_sim_trace *t, uint64_t seed, char ***out,
                              struct gv_error *err)
{
    *out = NULL;
    if (!t->shuffle_names || t->n_nodes == 0)
        return GV_OK;
    size_t *perm = malloc(t->n_nodes * sizeof(*perm));
    char **names = calloc(t->n_nodes, sizeof(*names));
    if (perm == NULL || names == NULL) {
        free(perm);
        free(names);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    struct gv_sim_rng r;
    gv_sim_rng_seed(&r, seed ^ UINT64_C(0x6e6f646573)); /* "nodes" */
    identity_shuffled(&r, perm, t->n_nodes);
    gv_status rc = GV_OK;
    for (size_t i = 0; rc == GV_OK && i < t->n_nodes; i++) {
        const char *name = t->nodes[i].spec.name;
        size_t len = strlen(name) + 8; /* "NNNNNN-" and NUL */
        if (len > GV_ALLOC_NODE_MAX)
            rc = gv_error_set(err, GV_EINVAL, "node %.200s: name too long to shuffle", name);
        else if ((names[i] = malloc(len)) == NULL)
            rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        else
            snprintf(names[i], len, "%06zu-%s", perm[i] % 1000000, name);
    }
    free(perm);
    if (rc != GV_OK) {
        names_free(names, t->n_nodes);
        return rc;
    }
    *out = names;
    return GV_OK;
}

gv_status sim_engine_nodes(const struct gv_sim_trace *t, const char *const *names,
                           struct gv_alloc_cluster *c, struct gv_error *err)
{
    for (size_t i = 0; i < t->n_nodes; i++) {
        const struct sim_node *n = &t->nodes[i];
        struct gv_alloc_node_spec spec = n->spec;
        if (names != NULL)
            spec.name = names[i];
        gv_status rc = gv_alloc_node_upsert(c, &spec, err);
        if (rc != GV_OK)
            return rc;
        if (n->links) {
            uint32_t nv[GV_ALLOC_MAX_NODE_GPUS], pc[GV_ALLOC_MAX_NODE_GPUS];
            for (size_t g = 0; g < n->spec.n_gpus; g++) {
                nv[g] = n->nvlink[g];
                pc[g] = n->pcie[g];
            }
            if ((rc = gv_alloc_node_set_links(c, spec.name, nv, pc, n->spec.n_gpus, err)) !=
                GV_OK)
                return rc;
        }
    }
    return GV_OK;
}

static gv_status run(const struct gv_sim_trace *t, gv_alloc_policy policy, uint64_t seed,
                     double inflate, bool exhaustive, struct gv_sim_curve *out,
                     struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    uint64_t cap = gv_sim_trace_gpu_milli(t);
    /* A workload of whole devices only (a MIG cluster) has no GPU-share
     * protocol: every pod arrives once, in the seed's order. */
    bool once = sim_whole_pods(t) > 0 && (cap == 0 || gv_sim_trace_request_milli(t) == 0);
    if (cap == 0 && !once)
        return gv_error_set(err, GV_EINVAL, "the cluster has no GPUs");
    if (gv_sim_trace_request_milli(t) == 0 && !once)
        return gv_error_set(err, GV_EINVAL, "the workload requests no GPUs");
    if (!(inflate > 0 && inflate <= 10))
        return gv_error_set(err, GV_EINVAL, "inflate %.3g outside (0, 10]", inflate);
    double t0 = now();
    gv_status rc;
    struct gv_alloc_config cfg;
    sim_engine_config(t, &cfg);
    cfg.node_policy = policy;
    cfg.gpu_policy = gpu_policy_for(policy);
    cfg.exhaustive = exhaustive;
    out->placement_hash = UINT64_C(0xcbf29ce484222325);
    struct gv_alloc_cluster *c = NULL;
    struct sim_arrivals arr = {0};
    struct named *sorted = NULL;
    char **names = NULL;
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    uint32_t **held = calloc(t->n_nodes + 1, sizeof(*held));
    out->n = (uint32_t)floor(inflate * 100.0 + 1e-9) + 1;
    out->allocated = calloc(out->n, sizeof(*out->allocated));
    for (size_t i = 0; held != NULL && i < t->n_nodes; i++)
        if (t->nodes[i].n_whole > 0 &&
            (held[i] = calloc(t->nodes[i].n_whole, sizeof(**held))) == NULL) {
            whole_free(held, t->n_nodes);
            held = NULL;
        }
    if (a == NULL || out->allocated == NULL || held == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = gv_alloc_cluster_new(&cfg, &c, err)) != GV_OK)
        goto fail;
    bool topology = gv_sim_trace_has_topology(t);
    if ((rc = replay_names(t, seed, &names, err)) != GV_OK)
        goto fail;
    if ((rc = sim_engine_nodes(t, (const char *const *)names, c, err)) != GV_OK)
        goto fail;
    if (topology) {
        if ((sorted = malloc(t->n_nodes * sizeof(*sorted))) == NULL) {
            rc = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < t->n_nodes; i++)
            sorted[i] = (struct named){names != NULL ? names[i] : t->nodes[i].spec.name,
                                       &t->nodes[i]};
        qsort(sorted, t->n_nodes, sizeof(*sorted), by_name);
    }
    if ((rc = sim_arrivals_init(&arr, t, seed, err)) != GV_OK)
        goto fail;
    /* With priorities: each arrival's GPU share (evictions come off the
     * allocated total) and the engine's node names (preemption samples). */
    bool prio = t->prio != NULL;
    uint64_t *amilli = NULL;
    size_t amilli_cap = 0;
    char **pnames = NULL;
    if (prio) {
        pnames = malloc((t->n_nodes + 1) * sizeof(*pnames));
        if (pnames == NULL) {
            rc = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < t->n_nodes; i++)
            pnames[i] = names != NULL ? names[i] : (char *)(uintptr_t)t->nodes[i].spec.name;
    }
    double target = inflate * (double)cap;
    uint64_t arrived = 0, allocated = 0;
    uint32_t next = 0;
    out->allocated[next++] = 0.0;
    for (uint64_t k = 0; once ? k < t->n_pods : (double)arrived < target; k++) {
        size_t pi = sim_arrivals_next(&arr);
        struct gv_alloc_request *r = t->pods[pi];
        const struct gv_podspec_whole_req *w = t->wreq[pi];
        snprintf(r->uid, sizeof(r->uid), "a%llu", (unsigned long long)k);
        uint64_t milli = sim_pod_milli(r);
        out->arrivals++;
        if (w != NULL) {
            /* whole devices by count; a pod asking GPU shares as well is
             * refused by the scheduler, so it never fits here either */
            long ni = r->n_containers == 0 ? whole_place(t, held, w) : -1;
            out->whole_arrivals++;
            if (ni >= 0) {
                out->placed++;
                out->whole_placed++;
                uint64_t x = out->placement_hash ^ k;
                for (const char *p = t->nodes[ni].spec.name; *p != '\0'; p++)
                    x = (x ^ (unsigned char)*p) * UINT64_C(0x100000001b3);
                out->placement_hash = x;
            } else {
                out->failed++;
                out->whole_failed++;
            }
        } else {
            gv_alloc_observe(c, r);
            int32_t pp = prio && pi < t->n_prio ? t->prio[pi] : 0;
            bool ok = gv_alloc_pick(c, r, NULL, 0, a, NULL) == GV_OK &&
                      gv_alloc_place(c, r, a, NULL) == GV_OK;
            if (prio) {
                if (k >= amilli_cap) {
                    size_t ncap = amilli_cap ? amilli_cap * 2 : 4096;
                    uint64_t *na = realloc(amilli, ncap * sizeof(*na));
                    if (na == NULL) {
                        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
                        free(amilli);
                        free(pnames);
                        goto fail;
                    }
                    amilli = na;
                    amilli_cap = ncap;
                }
                amilli[k] = milli;
                out->high_arrivals += pp > 0;
                out->high_placed += pp > 0 && ok;
                struct evictions ev = {amilli, out, 0};
                if (!ok && pp > 0 &&
                    sim_preempt(c, r, pp, pnames, t->n_nodes, k, a, count_eviction, &ev)) {
                    ok = true;
                    out->high_preempted++;
                }
                allocated -= ev.milli;
                out->high_failed += pp > 0 && !ok;
                if (ok)
                    gv_alloc_pod_set_victim(c, r->uid, a->node, pp, NULL);
            }
            if (ok) {
                out->placed++;
                allocated += milli;
                out->placement_hash = hash_decision(out->placement_hash, k, a);
                if (sorted != NULL)
                    count_links(t, sorted, a, out);
            } else {
                out->failed++;
            }
        }
        arrived += milli;
        if (cap == 0)
            continue;
        double pct = (double)arrived * 100.0 / (double)cap;
        while (next < out->n && (double)next <= pct + 1e-9)
            out->allocated[next++] = (double)allocated * 100.0 / (double)cap;
    }
    while (next < out->n)
        out->allocated[next++] = cap ? (double)allocated * 100.0 / (double)cap : 0.0;
    out->seconds = now() - t0;
    free(amilli);
    free(pnames);
    gv_alloc_cluster_free(c);
    sim_arrivals_fini(&arr);
    whole_free(held, t->n_nodes);
    free(sorted);
    names_free(names, t->n_nodes);
    free(a);
    return GV_OK;
fail:
    whole_free(held, t->n_nodes);
    gv_alloc_cluster_free(c);
    sim_arrivals_fini(&arr);
    free(sorted);
    names_free(names, t->n_nodes);
    free(a);
    gv_sim_curve_free(out);
    return rc;
}
