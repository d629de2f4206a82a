/*
 * Property test of the node index (src/alloc/index.c): on random clusters,
 * under every policy, the indexed search returns the same node and GPUs as
 * scoring every node (gv_alloc_config.exhaustive), decision after decision,
 * while pods are placed and released and nodes change or go.  Two clusters
 * get the same operations; only the search differs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "alloc/gv_alloc.h"
#include "tests/alloc/alloc_testlib.h"

static uint64_t rng_state;

static uint64_t rnd(void) { return at_xorshift(&rng_state); }

static uint32_t below(uint32_t n) { return (uint32_t)(rnd() % n); }

static const char *const models[] = {"NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "Tesla T4",
                                     "NVIDIA A100-PCIE-40GB"};
static const uint64_t model_mem[] = {81920, 32768, 15360, 40960};

struct pair {
    struct gv_alloc_cluster *idx, *all;
};

/* Nodes all alike (8 GPUs, one model, same CPU and memory): states are
 * shared, as in a real fleet, so candidate lists take the index. */
static bool uniform_nodes;

/* Nodes with the same GPUs but CPU and memory of their own, under fgd:
 * classes that differ only in free CPU and memory, which share one score
 * within a decision when the CPU levels they cover agree (score_group.c).
 * Requests' CPU straddles node sizes so that the levels do matter. */
static bool cpu_mix;

static void both_upsert(struct pair *p, uint32_t id, bool variant)
{
    char name[32], uuids[8][48];
    snprintf(name, sizeof(name), "node-%03u", id);
    struct gv_alloc_gpu_spec g[8];
    uint32_t n = uniform_nodes ? 8 : cpu_mix ? 4 : below(9);
    uint32_t m = uniform_nodes || cpu_mix ? 0 : below(4);
    for (uint32_t i = 0; i < n; i++) {
        snprintf(uuids[i], sizeof(uuids[i]), "GPU-%03u-%u", id, i);
        /* mostly uniform nodes, now and then a mixed one */
        uint32_t mi = uniform_nodes || cpu_mix ? m : below(10) == 0 ? below(4) : m;
        g[i] = (struct gv_alloc_gpu_spec){uuids[i], i, models[mi], model_mem[mi],
                                          uniform_nodes ? 0 : below(4) == 0 ? 1 + below(10) : 0,
                                          (int32_t)(i * 2 / (n ? n : 1)),
                                          variant ? below(8) != 0 : true,
                                          uniform_nodes ? GV_ALLOC_GPU_SHARED
                                          : below(12) == 0 ? GV_ALLOC_GPU_EXCLUSIVE
                                                           : GV_ALLOC_GPU_SHARED};
    }
    struct gv_alloc_node_spec s = {
        name,
        cpu_mix         ? 4000 * (1 + below(12))
        : uniform_nodes ? 96000
        : below(3) == 0 ? 0
                        : 16000 + 8000 * below(12),
        cpu_mix         ? 16384 * (1 + below(6))
        : uniform_nodes ? 65536 * 8
        : below(3) == 0 ? 0
                        : 65536 * (1 + below(8)),
        NULL, 0, g, n};
    struct gv_error err = {0};
    if (gv_alloc_node_upsert(p->idx, &s, &err) != GV_OK ||
        gv_alloc_node_upsert(p->all, &s, &err) != GV_OK)
        fail_msg("upsert: %s", err.msg);
}

static struct gv_alloc_request *random_req(uint64_t k)
{
    struct gv_alloc_request *r;
    assert_int_equal(gv_alloc_request_new(&r, NULL), GV_OK);
    snprintf(r->uid, sizeof(r->uid), "pod-%llu", (unsigned long long)k);
    r->cpu_milli = below(4) == 0 ? 0 : cpu_mix ? 500 * (1 + below(24)) : 1000 * (1 + below(24));
    r->mem_mib = below(4) == 0 ? 0 : cpu_mix ? 2048 * (1 + below(8)) : 4096 * (1 + below(32));
    uint32_t nc = below(8) == 0 ? 0 : below(6) == 0 ? 2 : 1;
    static const uint32_t shares[] = {0, 100, 250, 300, 470, 500, 650, 810, 1000, 1000, 1000};
    for (uint32_t i = 0; i < nc; i++) {
        struct gv_alloc_container_req *c = &r->containers[i];
        snprintf(c->name, sizeof(c->name), "c%u", i);
        c->milli = shares[below(11)];
        c->num_gpu = c->milli >= 1000 && below(4) == 0 ? 1 + below(8) : below(10) == 0 ? 2 : 1;
        c->mem_kind = below(5) == 0 ? GV_ALLOC_MEM_PCT : GV_ALLOC_MEM_MIB;
        c->mem = c->mem_kind == GV_ALLOC_MEM_PCT ? 10 * (1 + below(10))
                                                 : (below(3) == 0 ? 0 : 1024 * (1 + below(30)));
        c->priority = -1;
    }
    r->n_containers = nc;
    if (cpu_mix)
        return r; /* one model, no constraints: the GPUs never tell nodes apart */
    if (below(6) == 0)
        gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, below(2) ? "a100" : "t4,v100", NULL);
    if (below(20) == 0)
        gv_alloc_request_set_constraint(r, GV_ALLOC_NOUSE_TYPE, "pcie", NULL);
    if (below(25) == 0)
        gv_alloc_request_set_constraint(r, GV_ALLOC_USE_UUID, "GPU-001-0,GPU-002-1", NULL);
    r->numa_bind = below(15) == 0;
    r->gpu_policy = below(5) == 0 ? (int)below(GV_ALLOC_GPU_POLICY_COUNT) : -1;
    return r;
}

static bool same_assignment(const struct gv_alloc_assignment *a, const struct gv_alloc_assignment *b)
{
    if (strcmp(a->node, b->node) != 0 || a->n_containers != b->n_containers)
        return false;
    for (uint32_t i = 0; i < a->n_containers; i++) {
        if (a->containers[i].n_devices != b->containers[i].n_devices)
            return false;
        for (uint32_t d = 0; d < a->containers[i].n_devices; d++)
            if (strcmp(a->containers[i].devices[d].uuid, b->containers[i].devices[d].uuid) != 0 ||
                a->containers[i].devices[d].mem_mib != b->containers[i].devices[d].mem_mib)
                return false;
    }
    return true;
}

/* trials random clusters of step decisions each, indexed == exhaustive;
 * the counts of decisions, placements and misfits out. */
static void run_trials(uint64_t seed, int trials, uint64_t *decisions_out, uint64_t *placed_out,
                       uint64_t *nofit_out)
{
    rng_state = seed;
    uint64_t decisions = 0, placed = 0, nofit = 0;
    static struct gv_alloc_assignment a, b;
    for (int trial = 0; trial < trials; trial++) {
        struct gv_alloc_config cfg;
        gv_alloc_config_default(&cfg);
        cfg.node_policy =
            cpu_mix ? GV_ALLOC_POLICY_FGD : (gv_alloc_policy)(trial % GV_ALLOC_POLICY_COUNT);
        cfg.gpu_policy = (gv_alloc_gpu_policy)below(GV_ALLOC_GPU_POLICY_COUNT);
        if (cpu_mix ? trial % 2 == 1 : trial % 7 == 3)
            cfg.fgd_score_step = 0; /* exact FGD scores: more distinct values */
        struct pair p;
        assert_int_equal(gv_alloc_cluster_new(&cfg, &p.idx, NULL), GV_OK);
        cfg.exhaustive = true;
        assert_int_equal(gv_alloc_cluster_new(&cfg, &p.all, NULL), GV_OK);
        uniform_nodes = !cpu_mix && trial % 3 == 1;
        uint32_t n_nodes = 10 + below(150);
        for (uint32_t i = 0; i < n_nodes; i++)
            both_upsert(&p, below(n_nodes * 2), false); /* repeats replace a node */
        char live[512][GV_ALLOC_UID_MAX];
        uint32_t n_live = 0;
        for (int step = 0; step < 260; step++) {
            struct gv_alloc_request *r = random_req((uint64_t)trial * 1000 + (uint64_t)step);
            gv_alloc_observe(p.idx, r);
            gv_alloc_observe(p.all, r);
            struct gv_error ea = {0}, eb = {0};
            /* every third decision over a candidate list (the extender's
             * path): a random subset of node names, some unknown */
            const char *cand[400];
            char names[400][32];
            size_t nc = 0;
            bool listed = step % 3 == 2;
            if (listed) {
                /* most names, or a few (classes partly named), in either
                 * order, some twice */
                bool few = step % 6 == 5, down = trial % 2 == 1;
                for (uint32_t j = 0; j < n_nodes * 2 && nc < 399; j++) {
                    uint32_t i = down ? n_nodes * 2 - 1 - j : j;
                    if (few ? below(5) != 0 : below(3) == 0)
                        continue;
                    snprintf(names[nc], sizeof(names[nc]), "node-%03u", i);
                    cand[nc] = names[nc];
                    nc++;
                    if (below(8) == 0) {
                        cand[nc] = cand[nc - 1];
                        nc++;
                    }
                }
            }
            gv_status ra = gv_alloc_pick(p.idx, r, listed ? cand : NULL, nc, &a, &ea);
            gv_status rb = gv_alloc_pick(p.all, r, listed ? cand : NULL, nc, &b, &eb);
            if (listed && ra == rb) {
                /* prioritize: the same 0..100 scores both ways */
                int32_t sa[400], sb[400];
                assert_int_equal(gv_alloc_score_nodes(p.idx, r, cand, nc, sa, NULL), GV_OK);
                assert_int_equal(gv_alloc_score_nodes(p.all, r, cand, nc, sb, NULL), GV_OK);
                assert_memory_equal(sa, sb, nc * sizeof(sa[0]));
            }
            decisions++;
            if (ra != rb)
                fail_msg("trial %d step %d: indexed %d (%s), exhaustive %d (%s)", trial, step, ra,
                         ea.msg, rb, eb.msg);
            if (ra == GV_OK) {
                if (!same_assignment(&a, &b))
                    fail_msg("trial %d step %d policy %s: indexed chose %s, exhaustive %s", trial,
                             step, gv_alloc_policy_name(cfg.node_policy), a.node, b.node);
                assert_int_equal(gv_alloc_place(p.idx, r, &a, NULL), GV_OK);
                assert_int_equal(gv_alloc_place(p.all, r, &b, NULL), GV_OK);
                placed++;
                if (n_live < 512)
                    snprintf(live[n_live++], GV_ALLOC_UID_MAX, "%s", r->uid);
            } else {
                /* the same first reason, word for word */
                assert_string_equal(ea.msg, eb.msg);
                nofit++;
            }
            gv_alloc_request_free(r);
            uint32_t ev = below(20);
            if (ev < 3 && n_live > 0) { /* a pod ends */
                uint32_t k = below(n_live);
                gv_alloc_release(p.idx, live[k], NULL);
                gv_alloc_release(p.all, live[k], NULL);
                memcpy(live[k], live[--n_live], GV_ALLOC_UID_MAX);
            } else if (ev == 3) { /* a node changes (GPU health, size) */
                both_upsert(&p, below(n_nodes * 2), true);
            } else if (ev == 4) { /* a node goes, with its pods */
                char name[32];
                snprintf(name, sizeof(name), "node-%03u", below(n_nodes * 2));
                gv_alloc_node_remove(p.idx, name, NULL);
                gv_alloc_node_remove(p.all, name, NULL);
                uint32_t o = 0;
                for (uint32_t k = 0; k < n_live; k++)
                    if (gv_alloc_is_placed(p.idx, live[k]))
                        memcpy(live[o++], live[k], GV_ALLOC_UID_MAX);
                n_live = o;
            }
        }
        gv_alloc_cluster_free(p.idx);
        gv_alloc_cluster_free(p.all);
    }
    print_message("%llu decisions (%llu placed, %llu no fit): indexed == exhaustive\n",
                  (unsigned long long)decisions, (unsigned long long)placed,
                  (unsigned long long)nofit);
    *decisions_out = decisions;
    *placed_out = placed;
    *nofit_out = nofit;
}

static void test_indexed_equals_exhaustive(void **state)
{
    (void)state;
    uint64_t decisions, placed, nofit;
    cpu_mix = false;
    run_trials(0x9e3779b97f4a7c15u, 48, &decisions, &placed, &nofit);
    assert_true(decisions >= 10000);
    assert_true(placed > 3000 && nofit > 300); /* both outcomes exercised */
}

/* fgd on nodes told apart only by CPU and memory: the scores shared
 * between their classes (score_group.c) pick what scoring each node does. */
static void test_fgd_shared_scores_exact(void **state)
{
    (void)state;
    uint64_t decisions, placed, nofit;
    cpu_mix = true;
    run_trials(0x2545f4914f6cdd1du, 24, &decisions, &placed, &nofit);
    cpu_mix = false;
    assert_true(decisions >= 5000);
    assert_true(placed > 2000 && nofit > 100);
}

/* The search skips the CPU bands below a request's: sound only while the
 * band never falls as free CPU grows, and while every band is a list. */
static void test_cpu_band_monotone(void **state)
{
    (void)state;
    uint32_t prev = index_cpu_band(INT64_MIN);
    assert_int_equal(prev, 0);
    assert_int_equal(index_cpu_band(-1), 0);
    assert_int_equal(index_cpu_band(499), 0);
    assert_int_equal(index_cpu_band(500), 1);
    uint32_t seen = 0;
    for (int64_t x = 0; x < INT64_MAX / 4; x = x < 4096 ? x + 1 : x + x / 1024) {
        uint32_t b = index_cpu_band(x);
        assert_true(b >= prev);
        assert_true(b < IDX_CPU_BANDS);
        seen |= UINT32_C(1) << b;
        prev = b;
    }
    assert_int_equal(index_cpu_band(INT64_MAX), IDX_CPU_BANDS - 1); /* CPU not checked */
    /* Half-octaves: 32 and 48 cores start bands of their own. */
    assert_true(index_cpu_band(31999) < index_cpu_band(32000));
    assert_true(index_cpu_band(47999) < index_cpu_band(48000));
    assert_int_equal(index_cpu_band(48000), index_cpu_band(63999));
    assert_true(__builtin_popcount(seen) >= 30);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indexed_equals_exhaustive),
        cmocka_unit_test(test_fgd_shared_scores_exact),
        cmocka_unit_test(test_cpu_band_monotone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
