/*
 * Seeded synthetic cluster and workload, shaped after the production GPU
 * cluster behind the openb trace (Alibaba, 2023) and published fleet
 * mixes: a few large 8-GPU training nodes, many small 1-2 GPU inference
 * nodes; most GPU pods ask for a fraction of one GPU, a large minority for
 * one whole GPU, a few for 2-8 GPUs, and some pods need no GPU at all.
 * The exact tables are documented in docs/simulate.md; keep them in sync.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

struct node_type {
    const char *model;
    uint32_t gpus;
    int64_t cpu_milli, mem_mib;
    uint64_t gpu_mem_mib;
    uint32_t weight; /* percent of nodes */
};

static const struct node_type node_types[] = {
    {"A100-SXM4-80GB", 8, 128000, 1048576, 81920, 10},
    {"V100-SXM2-32GB", 8, 96000, 393216, 32768, 25},
    {"T4", 2, 64000, 262144, 15360, 35},
    {"A10", 1, 32000, 131072, 24576, 15},
    {"P100", 4, 48000, 262144, 16384, 15},
};

/* Fractional shares: half the time a popular size, else any 5 % step. */
static const uint32_t popular_milli[] = {100, 200, 250, 300, 500, 500, 500, 250};

struct synth_spec {
    uint64_t nodes, pods, frac, multi, cpu, typed, seed;
};

static gv_status parse_spec(const char *spec, struct synth_spec *s, struct gv_error *err)
{
    *s = (struct synth_spec){200, 0, 45, 3, 13, 8, 2023};
    if (spec == NULL || *spec == '\0' || strcmp(spec, "default") == 0)
        return GV_OK;
    const struct sim_kv keys[] = {
        {"nodes", &s->nodes, 100000, NULL}, {"pods", &s->pods, 10000000, NULL},
        {"frac", &s->frac, 100, NULL},      {"multi", &s->multi, 100, NULL},
        {"cpu", &s->cpu, 100, NULL},        {"typed", &s->typed, 100, NULL},
        {"seed", &s->seed, UINT64_MAX, NULL}};
    gv_status rc = sim_parse_kv("--synthetic", spec, keys, sizeof(keys) / sizeof(keys[0]), err);
    if (rc != GV_OK)
        return rc;
    if (s->frac + s->multi + s->cpu > 100)
        return gv_error_set(err, GV_EINVAL, "--synthetic: frac + multi + cpu exceed 100%%");
    if (s->nodes == 0)
        return gv_error_set(err, GV_EINVAL, "--synthetic: nodes must be at least 1");
    return GV_OK;
}

static uint64_t pick_weighted(struct gv_sim_rng *r, const uint32_t *w, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += w[i];
    uint64_t x = gv_sim_rng_below(r, total);
    for (size_t i = 0; i < n; i++) {
        if (x < w[i])
            return i;
        x -= w[i];
    }
    return n - 1;
}

gv_status gv_sim_synthetic(struct gv_sim_trace *t, const char *spec, uint64_t seed,
                           struct gv_error *err)
{
    struct synth_spec s;
    gv_status rc = parse_spec(spec, &s, err);
    if (rc != GV_OK)
        return rc;
    if (strstr(spec != NULL ? spec : "", "seed=") == NULL)
        s.seed = seed;
    if (t->n_nodes != 0 || t->n_pods != 0)
        return gv_error_set(err, GV_EINVAL, "synthetic trace needs an empty trace");
    struct gv_sim_rng rng;
    gv_sim_rng_seed(&rng, s.seed);
    enum { NT = sizeof(node_types) / sizeof(node_types[0]) };
    uint32_t w[NT];
    for (size_t i = 0; i < NT; i++)
        w[i] = node_types[i].weight;
    uint64_t gpus = 0;
    for (uint64_t i = 0; i < s.nodes; i++) {
        const struct node_type *nt = &node_types[pick_weighted(&rng, w, NT)];
        char name[32];
        snprintf(name, sizeof(name), "syn-node-%05llu", (unsigned long long)i);
        if ((rc = sim_add_node(t, name, nt->cpu_milli, nt->mem_mib, nt->gpus, nt->model,
                               nt->gpu_mem_mib, err)) != GV_OK)
            goto fail;
        gpus += nt->gpus;
    }
    /* enough templates to cover the cluster about once */
    uint64_t pods = s.pods ? s.pods : gpus * 2;
    static const uint32_t multi_w[] = {40, 35, 25};
    static const uint32_t multi_n[] = {2, 4, 8};
    static const char *const typed_models[] = {"V100", "T4", "A100"};
    for (uint64_t i = 0; i < pods; i++) {
        struct gv_alloc_request *r;
        if ((rc = gv_alloc_request_new(&r, err)) != GV_OK)
            goto fail;
        snprintf(r->name, sizeof(r->name), "syn-pod-%06llu", (unsigned long long)i);
        uint64_t kind = gv_sim_rng_below(&rng, 100);
        uint32_t num = 1, milli = GV_ALLOC_MILLI;
        int64_t cores;
        if (kind < s.cpu) {
            num = 0;
            cores = 2 << gv_sim_rng_below(&rng, 4); /* 2..16 cores */
        } else if (kind < s.cpu + s.frac) {
            milli = gv_sim_rng_below(&rng, 2) == 0
                        ? popular_milli[gv_sim_rng_below(&rng, sizeof(popular_milli) /
                                                                  sizeof(popular_milli[0]))]
                        : (uint32_t)(50 + 5 * gv_sim_rng_below(&rng, 181)); /* 50..950 */
            cores = 1 + (int64_t)gv_sim_rng_below(&rng, 8);
        } else if (kind < s.cpu + s.frac + s.multi) {
            num = multi_n[pick_weighted(&rng, multi_w, 3)];
            cores = 8 * num;
        } else {
            cores = 4 + (int64_t)gv_sim_rng_below(&rng, 13);
        }
        r->cpu_milli = cores * 1000;
        r->mem_mib = cores * 4096;
        if (num > 0) {
            r->n_containers = 1;
            snprintf(r->containers[0].name, sizeof(r->containers[0].name), "main");
            r->containers[0].num_gpu = num;
            r->containers[0].mem_kind = GV_ALLOC_MEM_MIB;
            r->containers[0].mem = 0;
            r->containers[0].milli = milli;
            r->containers[0].priority = -1;
            if (gv_sim_rng_below(&rng, 100) < s.typed) {
                const char *m = typed_models[gv_sim_rng_below(&rng, 3)];
                if ((rc = gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, m, err))) {
                    gv_alloc_request_free(r);
                    goto fail;
                }
            }
        }
        if ((rc = sim_add_pod(t, r, err)) != GV_OK)
            goto fail;
    }
    return GV_OK;
fail:
    sim_trace_clear(t);
    return rc;
}
