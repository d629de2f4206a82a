/*
 * The score budget (docs/alloc.md, "Score budget"): on a search over more
 * than gv_alloc_config.score_all_nodes nodes, fgd evaluates node states in
 * the index's order until score_budget evaluations fit, then only states
 * of GPU-model sets below a quarter of the budget.
 *
 * Known answers on clusters whose FGD scores all tie (no workload observed:
 * every score is 0, so the smallest name among the states evaluated wins,
 * and which states were evaluated is visible in the answer), and a property
 * test that what is evaluated does not depend on the order nodes were added
 * in or the history that led to their states.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/gv_alloc.h"
#include "tests/alloc/alloc_testlib.h"

#define T4 "Tesla T4"
#define V100 "Tesla V100-SXM2-32GB"

static struct gv_alloc_cluster *cluster(uint32_t all_nodes, uint32_t budget)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    cfg.node_policy = GV_ALLOC_POLICY_FGD;
    cfg.score_all_nodes = all_nodes;
    cfg.score_budget = budget;
    struct gv_alloc_cluster *c = NULL;
    assert_int_equal(gv_alloc_cluster_new(&cfg, &c, NULL), GV_OK);
    return c;
}

/* A node of n_gpus GPUs of mem MiB, GPU-<name>-<i>, and host CPU (milli)
 * and memory (MiB), 0 = not accounted. */
static void add_node_full(struct gv_alloc_cluster *c, const char *name, const char *model,
                          uint32_t n_gpus, uint64_t mem, int64_t cpu, int64_t host_mem)
{
    char uuid[2][64];
    struct gv_alloc_gpu_spec g[2];
    for (uint32_t i = 0; i < n_gpus && i < 2; i++) {
        snprintf(uuid[i], sizeof(uuid[i]), "GPU-%s-%u", name, i);
        g[i] = (struct gv_alloc_gpu_spec){uuid[i], i, model, mem, 0, 0, true, GV_ALLOC_GPU_SHARED};
    }
    struct gv_alloc_node_spec s = {name, cpu, host_mem, NULL, 0, g, n_gpus};
    struct gv_error err = {0};
    if (gv_alloc_node_upsert(c, &s, &err) != GV_OK)
        fail_msg("upsert %s: %s", name, err.msg);
}

static void add_node_mem(struct gv_alloc_cluster *c, const char *name, const char *model,
                         uint64_t mem)
{
    add_node_full(c, name, model, 1, mem, 0, 0);
}

static void add_node(struct gv_alloc_cluster *c, const char *name, const char *model)
{
    add_node_mem(c, name, model, 16384);
}

/* Places a task of milli on GPU gpu of node (a candidate list of one:
 * exact). */
static void use_gpu(struct gv_alloc_cluster *c, const char *node, uint32_t gpu, uint32_t milli)
{
    static uint32_t seq;
    char uid[32], uuid[80];
    snprintf(uid, sizeof(uid), "use-%u", seq++);
    snprintf(uuid, sizeof(uuid), "GPU-%s-%u", node, gpu);
    struct gv_alloc_request *r = simple_req(uid, 1, 0, milli);
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_UUID, uuid, NULL), GV_OK);
    struct gv_alloc_assignment a;
    const char *cand[1] = {node};
    struct gv_error err = {0};
    if (gv_alloc_pick(c, r, cand, 1, &a, &err) != GV_OK || gv_alloc_place(c, r, &a, &err) != GV_OK)
        fail_msg("place on %s: %s", node, err.msg);
    gv_alloc_request_free(r);
}

static void use(struct gv_alloc_cluster *c, const char *node, uint32_t milli)
{
    use_gpu(c, node, 0, milli);
}

/* r picks want, over the candidate list nodes (NULL: the whole cluster);
 * frees r. */
static void req_picks(struct gv_alloc_cluster *c, struct gv_alloc_request *r,
                      const char *const *nodes, size_t n, const char *want)
{
    struct gv_alloc_assignment a;
    struct gv_error err = {0};
    if (gv_alloc_pick(c, r, nodes, n, &a, &err) != GV_OK)
        fail_msg("pick: %s", err.msg);
    if (strcmp(a.node, want) != 0)
        fail_msg("picked %s, want %s", a.node, want);
    gv_alloc_request_free(r);
}

/* A 100-milli task over the whole cluster picks want. */
static void pick_is(struct gv_alloc_cluster *c, const char *want)
{
    req_picks(c, simple_req("probe", 1, 0, 100), NULL, 0, want);
}

/*
 * Forty T4 nodes n00..n39, node i with 100 + 20 i milli in use: n39 is the
 * fullest (120 milli free), n00 the emptiest.  A 100-milli task ties
 * everywhere, so exact FGD takes the smallest name, n00.  The index walks
 * the fullest first (largest free share in tenths: n36..n39 have 1xx
 * free), so a budget of 4 evaluates n36..n39 and takes n36.  up: the
 * order the states were made in.
 */
static struct gv_alloc_cluster *ladder_mem(uint32_t all_nodes, uint32_t budget, bool up,
                                           uint64_t fullest_mem)
{
    struct gv_alloc_cluster *c = cluster(all_nodes, budget);
    char name[8];
    for (int j = 0; j < 40; j++) {
        int i = up ? j : 39 - j;
        snprintf(name, sizeof(name), "n%02d", i);
        add_node_mem(c, name, T4, i >= 36 ? fullest_mem : 16384);
    }
    for (int j = 0; j < 40; j++) {
        int i = up ? j : 39 - j;
        snprintf(name, sizeof(name), "n%02d", i);
        use(c, name, 100 + 20 * (uint32_t)i);
    }
    return c;
}

static struct gv_alloc_cluster *ladder(uint32_t all_nodes, uint32_t budget, bool up)
{
    return ladder_mem(all_nodes, budget, up, 16384);
}

static void test_small_search_is_exact(void **state)
{
    (void)state;
    for (int up = 0; up < 2; up++) {
        struct gv_alloc_cluster *c = ladder(40, 4, up); /* 40 nodes: not over 40 */
        pick_is(c, "n00");
        gv_alloc_cluster_free(c);
        c = ladder(0, 4, up); /* 0: never budgeted */
        pick_is(c, "n00");
        gv_alloc_cluster_free(c);
        c = ladder(1, 0, up); /* no budget */
        pick_is(c, "n00");
        gv_alloc_cluster_free(c);
        c = ladder(1, 40, up); /* a budget every state fits in */
        pick_is(c, "n00");
        gv_alloc_cluster_free(c);
    }
}

static void test_budget_evaluates_fullest_first(void **state)
{
    (void)state;
    for (int up = 0; up < 2; up++) {
        struct gv_alloc_cluster *c = ladder(39, 4, up);
        pick_is(c, "n36");
        gv_alloc_cluster_free(c);
        /* a budget that cuts one list (n36..n39 share a bucket): its
         * fullest two, whatever order their states were made in */
        c = ladder(39, 2, up);
        pick_is(c, "n38");
        gv_alloc_cluster_free(c);
        /* the next bucket (n31..n35, 2xx free) holds the fifth and sixth */
        c = ladder(39, 6, up);
        pick_is(c, "n34");
        gv_alloc_cluster_free(c);
    }
}

/* A model set beyond the budget still gets a quarter of it: two V100 nodes
 * (named to win a tie) as empty as n00, so visited last, are evaluated
 * after the T4s used the budget up. */
static void test_every_model_gets_a_floor(void **state)
{
    (void)state;
    for (int up = 0; up < 2; up++) {
        struct gv_alloc_cluster *c = ladder(39, 4, up);
        add_node(c, "a-v0", V100);
        add_node(c, "a-v1", V100);
        use(c, "a-v0", 100);
        use(c, "a-v1", 100);
        pick_is(c, "a-v0"); /* budget 4, floor 1: n36..n39 and a-v0 */
        gv_alloc_cluster_free(c);
    }
    /* a model the request may not use gets nothing: typed to T4 */
    struct gv_alloc_cluster *c = ladder(39, 4, true);
    add_node(c, "a-v0", V100);
    use(c, "a-v0", 100);
    struct gv_alloc_request *r = simple_req("typed", 1, 0, 100);
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, "t4", NULL), GV_OK);
    req_picks(c, r, NULL, 0, "n36");
    gv_alloc_cluster_free(c);
}

/* The budget counts evaluations that fit: n36..n39 (the fullest, visited
 * first) have 8 GiB GPUs, too small for a 10 GiB task, and use none of it;
 * the four after them (n32..n35) do: n32.  Counting every evaluation would
 * stop at the floor's one fit, n35. */
static void test_budget_counts_fits(void **state)
{
    (void)state;
    for (int up = 0; up < 2; up++) {
        struct gv_alloc_cluster *c = ladder_mem(39, 4, up, 8192);
        req_picks(c, simple_req("big", 1, 10240, 100), NULL, 0, "n32");
        gv_alloc_cluster_free(c);
    }
}

/* A candidate list (the extender's) is budgeted by the distinct known nodes
 * it names, not by its length: 60 empty T4 nodes beside the ladder (so the
 * index serves the list: states are shared), threshold 99.  All 100 names:
 * budgeted, n36.  50 names each given twice, and an unknown one: exact,
 * the smallest name, n00. */
static void test_candidate_list_counts_distinct_nodes(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = ladder(99, 4, true);
    static char names[100][8];
    const char *all[100], *twice[101];
    for (int i = 0; i < 100; i++) {
        if (i < 40)
            snprintf(names[i], sizeof(names[i]), "n%02d", i);
        else
            snprintf(names[i], sizeof(names[i]), "z%02d", i - 40);
        if (i >= 40)
            add_node(c, names[i], T4);
        all[i] = names[i];
    }
    for (int i = 0; i < 100; i++)
        twice[i] = names[i / 2]; /* n00..n39 and z00..z09, each twice */
    twice[100] = "no-such-node";
    req_picks(c, simple_req("listed", 1, 0, 100), all, 100, "n36");
    req_picks(c, simple_req("listed", 1, 0, 100), twice, 101, "n00");
    gv_alloc_cluster_free(c);
}

/* Evaluations shared between states that differ only where the score does
 * not look (host memory here: score_group.c) cost nothing and are not
 * counted: n36..n39 each have two twins (same GPU use, host memory of
 * their own, names that lose), and a budget of 4 still reaches n36. */
static void test_shared_scores_not_counted(void **state)
{
    (void)state;
    for (int up = 0; up < 2; up++) {
        struct gv_alloc_cluster *c = ladder(39, 4, up);
        for (int i = 36; i < 40; i++)
            for (int t = 0; t < 2; t++) {
                char name[16];
                snprintf(name, sizeof(name), "z%02d-%d", i, t);
                add_node_full(c, name, T4, 1, 16384, 0, 100000 * (t + 1));
                use(c, name, 100 + 20 * (uint32_t)i);
            }
        pick_is(c, "n36");
        gv_alloc_cluster_free(c);
    }
}

/* Past the budget a model set's floor can still cut a list: one V100 state
 * (b-v0, 500 milli free) was evaluated, the floor of 2 leaves room for one
 * more, and the next V100 list holds two (a-v1 970 free, a-v2 940 free):
 * the fuller, a-v2, whatever order the states were made in. */
static void test_floor_cuts_a_list_fullest_first(void **state)
{
    (void)state;
    for (int up = 0; up < 2; up++) {
        struct gv_alloc_cluster *c = ladder(39, 8, up);
        add_node(c, "b-v0", V100);
        use(c, "b-v0", 500);
        const char *late[2] = {"a-v1", "a-v2"};
        uint32_t milli[2] = {30, 60};
        for (int j = 0; j < 2; j++) {
            int i = up ? j : 1 - j;
            add_node(c, late[i], V100);
            use(c, late[i], milli[i]);
        }
        pick_is(c, "a-v2");
        gv_alloc_cluster_free(c);
    }
}

/* Within a list, equal GPU use goes by free CPU, less first: x-b (250 +
 * 150 milli on two GPUs, 64 cores) before x-a (200 + 200, 65 cores), with
 * a budget of one. */
static void test_cut_list_less_cpu_first(void **state)
{
    (void)state;
    for (int up = 0; up < 2; up++) {
        struct gv_alloc_cluster *c = cluster(1, 1);
        const char *names[2] = {"x-a", "x-b"};
        for (int j = 0; j < 2; j++) {
            int i = up ? j : 1 - j;
            add_node_full(c, names[i], T4, 2, 16384, i == 0 ? 65000 : 64000, 0);
            use_gpu(c, names[i], 0, i == 0 ? 200 : 250);
            use_gpu(c, names[i], 1, i == 0 ? 200 : 150);
        }
        pick_is(c, "x-b");
        gv_alloc_cluster_free(c);
    }
}

/*
 * Property: with a small budget, two clusters holding the same nodes in the
 * same states pick alike, though one added its nodes in reverse order and
 * reached its states through other placements (each node's tasks placed in
 * another order, with detours released again).  Random one-GPU and
 * multi-GPU nodes of two models, random requests.
 */
static uint64_t rng;

static uint32_t below(uint32_t n)
{
    return (uint32_t)(at_xorshift(&rng) % n);
}

static void test_budget_ignores_history(void **state)
{
    (void)state;
    rng = 0x5851f42d4c957f2dULL;
    static const uint32_t shares[] = {100, 200, 250, 300, 400, 500, 600, 700, 750, 800};
    uint64_t decisions = 0, differ_from_exact = 0;
    for (int trial = 0; trial < 12; trial++) {
        struct gv_alloc_cluster *a = cluster(1, 2 + (uint32_t)trial % 5);
        struct gv_alloc_cluster *b = cluster(1, 2 + (uint32_t)trial % 5);
        struct gv_alloc_cluster *x = cluster(0, 0); /* exact, for the count below */
        uint32_t n = 30 + below(40);
        uint32_t gpus[80], mdl[80];
        for (uint32_t k = 0; k < 2 * n; k++) {
            /* a: nodes in order; b: in reverse; x: in order */
            uint32_t i = k < n ? k : 2 * n - 1 - k;
            if (k < n) {
                gpus[i] = below(3) == 0 ? 1 + below(4) : 1;
                mdl[i] = below(4) == 0;
            }
            struct gv_alloc_cluster *to[2] = {k < n ? a : b, k < n ? x : NULL};
            for (int t = 0; t < 2 && to[t] != NULL; t++) {
                char name[16], uuid[4][32];
                snprintf(name, sizeof(name), "node-%02u", i);
                struct gv_alloc_gpu_spec g[4];
                for (uint32_t j = 0; j < gpus[i]; j++) {
                    snprintf(uuid[j], sizeof(uuid[j]), "GPU-%02u-%u", i, j);
                    g[j] = (struct gv_alloc_gpu_spec){uuid[j], j,    mdl[i] ? V100 : T4, 16384, 0,
                                                      0,       true, GV_ALLOC_GPU_SHARED};
                }
                struct gv_alloc_node_spec s = {name, 64000, 262144, NULL, 0, g, gpus[i]};
                assert_int_equal(gv_alloc_node_upsert(to[t], &s, NULL), GV_OK);
            }
        }
        /* the same tasks on the same GPUs, in another order in b, with
         * detours there: a task placed and released again */
        struct task {
            char node[16];
            uint32_t gpu, milli;
        } tasks[160];
        uint32_t used[80][4] = {{0}}, count[80][4] = {{0}}, n_tasks = 0;
        for (uint32_t t = 0; t < 2 * n; t++) {
            /* at most 1000 milli and 10 tasks a GPU: every task fits in any
             * order, so the clusters end in the same states */
            uint32_t i = below(n), gi = below(gpus[i]), m = shares[below(10)] / 2;
            if (used[i][gi] + m > 1000 || count[i][gi] == 10)
                continue;
            used[i][gi] += m;
            count[i][gi]++;
            snprintf(tasks[n_tasks].node, sizeof(tasks[n_tasks].node), "node-%02u", i);
            tasks[n_tasks].gpu = gi;
            tasks[n_tasks++].milli = m;
        }
        for (int pass = 0; pass < 3; pass++)
            for (uint32_t k = 0; k < n_tasks; k++) {
                struct gv_alloc_cluster *c = pass == 0 ? a : pass == 1 ? b : x;
                uint32_t t = pass == 1 ? n_tasks - 1 - k : k;
                char uid[32], uuid[32];
                snprintf(uid, sizeof(uid), "t%u", t);
                snprintf(uuid, sizeof(uuid), "GPU-%s-%u", tasks[t].node + 5, tasks[t].gpu);
                if (pass == 1 && below(3) == 0) {
                    /* detour: a task on another node, gone again */
                    struct gv_alloc_request *d = simple_req("detour", 1, 0, 300);
                    struct gv_alloc_assignment da;
                    if (gv_alloc_pick(c, d, NULL, 0, &da, NULL) == GV_OK &&
                        gv_alloc_place(c, d, &da, NULL) == GV_OK)
                        assert_int_equal(gv_alloc_release(c, "detour", NULL), GV_OK);
                    gv_alloc_request_free(d);
                }
                struct gv_alloc_request *r = simple_req(uid, 1, 0, tasks[t].milli);
                assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_UUID, uuid, NULL),
                                 GV_OK);
                struct gv_alloc_assignment as;
                const char *cand[1] = {tasks[t].node};
                if (gv_alloc_pick(c, r, cand, 1, &as, NULL) == GV_OK)
                    assert_int_equal(gv_alloc_place(c, r, &as, NULL), GV_OK);
                gv_alloc_request_free(r);
            }
        for (int q = 0; q < 60; q++) {
            uint32_t milli = below(4) == 0 ? 1000 : shares[below(10)];
            struct gv_alloc_request *r =
                simple_req("q", milli == 1000 ? 1 + below(2) : 1, 0, milli);
            if (below(5) == 0)
                assert_int_equal(
                    gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, "v100", NULL), GV_OK);
            /* a workload to score against, the same in all three */
            gv_alloc_observe(a, r);
            gv_alloc_observe(b, r);
            gv_alloc_observe(x, r);
            struct gv_alloc_assignment pa, pb, px;
            gv_status ra = gv_alloc_pick(a, r, NULL, 0, &pa, NULL);
            gv_status rb = gv_alloc_pick(b, r, NULL, 0, &pb, NULL);
            gv_status rx = gv_alloc_pick(x, r, NULL, 0, &px, NULL);
            assert_int_equal(ra, rb);
            assert_int_equal(ra, rx); /* the budget never turns a fit into a misfit */
            if (ra == GV_OK) {
                if (strcmp(pa.node, pb.node) != 0)
                    fail_msg("trial %d query %d: %s in one order, %s in the other", trial, q,
                             pa.node, pb.node);
                differ_from_exact += strcmp(pa.node, px.node) != 0;
            }
            decisions++;
            gv_alloc_request_free(r);
        }
        gv_alloc_cluster_free(a);
        gv_alloc_cluster_free(b);
        gv_alloc_cluster_free(x);
    }
    print_message("%llu decisions alike in both orders; %llu differ from exact FGD\n",
                  (unsigned long long)decisions, (unsigned long long)differ_from_exact);
    /* the budget did cut: otherwise this test would not test it */
    assert_true(differ_from_exact > decisions / 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_search_is_exact),
        cmocka_unit_test(test_budget_evaluates_fullest_first),
        cmocka_unit_test(test_every_model_gets_a_floor),
        cmocka_unit_test(test_budget_counts_fits),
        cmocka_unit_test(test_candidate_list_counts_distinct_nodes),
        cmocka_unit_test(test_shared_scores_not_counted),
        cmocka_unit_test(test_floor_cuts_a_list_fullest_first),
        cmocka_unit_test(test_cut_list_less_cpu_first),
        cmocka_unit_test(test_budget_ignores_history),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
