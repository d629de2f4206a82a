/*
 * Victim choice and what-if (src/alloc/victims.c): tables of nodes with
 * pods placed by assignment text, the preemptor's request, and the victims
 * and GPUs expected; plus a randomized check of one-GPU requests against
 * brute force (seed printed on failure, GV_VICTIMS_SEED to replay).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "alloc/gv_alloc.h"
#include "tests/alloc/alloc_testlib.h"

/* Puts node <name> (again): n GPUs of mem MiB taking up to split tasks,
 * uuids <name>-g<i>, cpu milli of the host (0: not checked). */
static void node_put(struct gv_alloc_cluster *c, const char *name, uint32_t n, uint64_t mem,
                     uint32_t split, int64_t cpu)
{
    struct gv_alloc_gpu_spec g[8];
    char uuids[8][64];
    for (uint32_t i = 0; i < n; i++) {
        snprintf(uuids[i], sizeof(uuids[i]), "%s-g%u", name, i);
        g[i] = (struct gv_alloc_gpu_spec){uuids[i], i, "NVIDIA A100", mem, split, 0, true,
                                          GV_ALLOC_GPU_SHARED};
    }
    struct gv_alloc_node_spec s = {name, cpu, 0, NULL, 0, g, n};
    assert_int_equal(gv_alloc_node_upsert(c, &s, NULL), GV_OK);
}

/* A cluster of that one node. */
static struct gv_alloc_cluster *cluster_of(const char *name, uint32_t n, uint64_t mem,
                                           uint32_t split, int64_t cpu)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    cfg.workload_half_life = 0;
    struct gv_alloc_cluster *c;
    assert_int_equal(gv_alloc_cluster_new(&cfg, &c, NULL), GV_OK);
    node_put(c, name, n, mem, split, cpu);
    return c;
}

/* Node <name>: n GPUs of mem MiB, split 4. */
static struct gv_alloc_cluster *cluster_with(const char *name, uint32_t n, uint64_t mem)
{
    return cluster_of(name, n, mem, 4, 0);
}

/* Places uid with the assignment text "v1;node=...;main=...", holding cpu
 * milli of the host. */
static void place_cpu(struct gv_alloc_cluster *c, const char *uid, const char *text, int64_t cpu)
{
    struct gv_alloc_assignment a;
    struct gv_error err = {0};
    if (gv_alloc_assignment_decode(text, strlen(text), &a, &err) != GV_OK)
        fail_msg("decode %s: %s", text, err.msg);
    struct gv_alloc_request *r = simple_req(uid, a.containers[0].n_devices, 0, 0);
    r->cpu_milli = cpu;
    if (gv_alloc_place(c, r, &a, &err) != GV_OK)
        fail_msg("place %s: %s", uid, err.msg);
    gv_alloc_request_free(r);
}

static void place(struct gv_alloc_cluster *c, const char *uid, const char *text)
{
    place_cpu(c, uid, text, 0);
}

struct usage_snap {
    uint64_t mem[8];
    uint32_t milli[8], tasks[8];
};

static void snap(struct gv_alloc_cluster *c, const char *node, uint32_t n, struct usage_snap *u)
{
    memset(u, 0, sizeof(*u));
    for (uint32_t i = 0; i < n; i++) {
        struct gv_alloc_gpu_usage g;
        assert_int_equal(gv_alloc_gpu_usage_at(c, node, i, &g, NULL), GV_OK);
        u->mem[i] = g.mem_mib;
        u->milli[i] = g.milli;
        u->tasks[i] = g.tasks;
    }
}

/* Runs the search; returns the chosen uids joined by ',' in candidate
 * order ("" for none, "NOFIT" when no set works) and checks the cluster
 * came back unchanged.  a (may be NULL) gets the GPUs. */
static const char *victims(struct gv_alloc_cluster *c, const struct gv_alloc_request *r,
                           int32_t prio, const struct gv_alloc_victim *v, size_t n,
                           struct gv_alloc_assignment *a, struct gv_alloc_victim_plan *plan)
{
    static char out[512];
    struct usage_snap before, after;
    snap(c, "n1", gv_alloc_node_gpu_count(c, "n1"), &before);
    uint32_t chosen[32];
    struct gv_alloc_victim_plan p;
    struct gv_error err = {0};
    if (gv_alloc_victims(c, r, prio, "n1", v, n, chosen, &p, a, &err) != GV_OK)
        fail_msg("victims: %s", err.msg);
    snap(c, "n1", gv_alloc_node_gpu_count(c, "n1"), &after);
    assert_memory_equal(&before, &after, sizeof(before));
    if (plan != NULL)
        *plan = p;
    if (!p.fits)
        return "NOFIT";
    out[0] = '\0';
    for (uint32_t i = 0; i < p.n; i++) {
        assert_true(chosen[i] < n);
        /* never a pod of equal or higher priority unless forced */
        assert_true(v[chosen[i]].forced || v[chosen[i]].priority < prio);
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "",
                 v[chosen[i]].uid);
    }
    return out;
}

/* One GPU: one big pod beats two small ones; lower priority beats higher. */
static void test_single_gpu_fewest_then_lowest(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_with("n1", 1, 16000);
    place(c, "a", "v1;node=n1;main=n1-g0:8000:0");
    place(c, "b", "v1;node=n1;main=n1-g0:4000:0");
    place(c, "c", "v1;node=n1;main=n1-g0:4000:0");
    struct gv_alloc_request *r = simple_req("hi", 1, 8000, 0);
    struct gv_alloc_victim v[] = {{"a", 1, false, false, NULL}, {"b", 1, false, false, NULL},
                                  {"c", 1, false, false, NULL}};
    struct gv_alloc_assignment a;
    assert_string_equal(victims(c, r, 10, v, 3, &a, NULL), "a");
    assert_string_equal(a.containers[0].devices[0].uuid, "n1-g0");
    /* a is more important now: b and c (two victims) ... still fewer first */
    v[0].priority = 5;
    assert_string_equal(victims(c, r, 10, v, 3, NULL, NULL), "a");
    /* two single victims: the lower priority one */
    struct gv_alloc_cluster *c2 = cluster_with("n1", 1, 16000);
    place(c2, "x", "v1;node=n1;main=n1-g0:8000:0");
    place(c2, "y", "v1;node=n1;main=n1-g0:8000:0");
    struct gv_alloc_victim w[] = {{"x", 5, false, false, NULL}, {"y", 1, false, false, NULL}};
    assert_string_equal(victims(c2, r, 10, w, 2, NULL, NULL), "y");
    /* equal priorities are never chosen */
    w[1].priority = 10;
    assert_string_equal(victims(c2, r, 10, w, 2, NULL, NULL), "x");
    w[0].priority = 10;
    struct gv_alloc_victim_plan p;
    assert_string_equal(victims(c2, r, 10, w, 2, NULL, &p), "NOFIT");
    assert_non_null(strstr(p.reason, "no eviction of lower-priority pods makes room"));
    /* room already: nobody */
    struct gv_alloc_request *small = simple_req("hi", 1, 0, 0);
    w[0].priority = w[1].priority = 1;
    assert_string_equal(victims(c, small, 10, v, 3, NULL, NULL), "");
    gv_alloc_request_free(small);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
    gv_alloc_cluster_free(c2);
}

/* Whole GPUs and pods spanning GPUs: the GPU emptied by the fewest. */
static void test_whole_gpus_and_multi_gpu_pods(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_with("n1", 4, 16000);
    place(c, "m", "v1;node=n1;main=n1-g0:2000:100,n1-g1:2000:100");
    place(c, "s0", "v1;node=n1;main=n1-g0:2000:100");
    place(c, "s1", "v1;node=n1;main=n1-g1:2000:100");
    place(c, "s2", "v1;node=n1;main=n1-g1:2000:100");
    place(c, "t2", "v1;node=n1;main=n1-g2:2000:100");
    place(c, "t3", "v1;node=n1;main=n1-g3:2000:100");
    place(c, "u3", "v1;node=n1;main=n1-g3:2000:100");
    place(c, "w3", "v1;node=n1;main=n1-g3:2000:100");
    struct gv_alloc_victim v[] = {{"m", 1, false, false, NULL},  {"s0", 1, false, false, NULL},
                                  {"s1", 1, false, false, NULL}, {"s2", 1, false, false, NULL},
                                  {"t2", 1, false, false, NULL}, {"t3", 1, false, false, NULL},
                                  {"u3", 1, false, false, NULL}, {"w3", 1, false, false, NULL}};
    /* one whole GPU: g2 holds a single pod */
    struct gv_alloc_request *r = simple_req("hi", 1, 16000, 1000);
    struct gv_alloc_assignment a;
    assert_string_equal(victims(c, r, 10, v, 8, &a, NULL), "t2");
    assert_string_equal(a.containers[0].devices[0].uuid, "n1-g2");
    /* two whole GPUs: g2 (t2) and g0 (m, s0) = 3; g1 would be m,s1,s2 */
    r->containers[0].num_gpu = 2;
    assert_string_equal(victims(c, r, 10, v, 8, &a, NULL), "m,s0,t2");
    /* t2 protected by priority: g0 + g1 share m: m,s0,s1,s2 (4) vs g0+g3 (5) */
    v[4].priority = 10;
    assert_string_equal(victims(c, r, 10, v, 8, &a, NULL), "m,s0,s1,s2");
    /* three whole GPUs with g2 protected: impossible without t2 ... g0,g1,g3 */
    r->containers[0].num_gpu = 3;
    assert_string_equal(victims(c, r, 10, v, 8, NULL, NULL), "m,s0,s1,s2,t3,u3,w3");
    r->containers[0].num_gpu = 4;
    assert_string_equal(victims(c, r, 10, v, 8, NULL, NULL), "NOFIT");
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* PodDisruptionBudgets: a violating victim only when nothing else works. */
static void test_pdb_preferred_and_forced(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_with("n1", 1, 16000);
    place(c, "x", "v1;node=n1;main=n1-g0:8000:0");
    place(c, "y", "v1;node=n1;main=n1-g0:4000:0");
    place(c, "z", "v1;node=n1;main=n1-g0:4000:0");
    struct gv_alloc_request *r = simple_req("hi", 1, 8000, 0);
    struct gv_alloc_victim v[] = {{"x", 1, true, false, NULL}, {"y", 5, false, false, NULL},
                                  {"z", 5, false, false, NULL}};
    struct gv_alloc_victim_plan p;
    assert_string_equal(victims(c, r, 10, v, 3, NULL, &p), "y,z");
    assert_int_equal(p.pdb_violations, 0);
    v[1].pdb_violation = true;
    assert_string_equal(victims(c, r, 10, v, 3, NULL, &p), "x");
    assert_int_equal(p.pdb_violations, 1);
    /* forced victims (kube-scheduler's own) always go and count, even of
     * a priority the search itself would never pick */
    struct gv_alloc_victim f[] = {{"x", 50, false, true, NULL}, {"y", 1, false, false, NULL},
                                  {"z", 1, false, false, NULL}};
    assert_string_equal(victims(c, r, 10, f, 3, NULL, &p), "x");
    /* what-if: without x and y, a 12000 MiB pod fits on g0 */
    const char *without[] = {"x", "y", "nobody"};
    struct gv_alloc_fit fit;
    struct gv_alloc_assignment a;
    r->containers[0].mem = 12000;
    assert_int_equal(gv_alloc_fit_without(c, r, "n1", without, 3, &a, &fit, NULL), GV_OK);
    assert_true(fit.fits);
    assert_string_equal(a.containers[0].devices[0].uuid, "n1-g0");
    assert_int_equal(gv_alloc_fit_without(c, r, "n1", without, 1, &a, &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_int_equal(gv_alloc_fit_without(c, r, "nope", without, 1, &a, &fit, NULL),
                     GV_ENOTFOUND);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* Constraints no eviction can satisfy: the node is dropped with why. */
static void test_constraints_no_eviction_helps(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_with("n1", 2, 16000);
    place(c, "a", "v1;node=n1;main=n1-g0:16000:0");
    place(c, "b", "v1;node=n1;main=n1-g1:16000:0");
    struct gv_alloc_victim v[] = {{"a", 1, false, false, NULL}, {"b", 1, false, false, NULL}};
    struct gv_alloc_request *r = simple_req("hi", 1, 8000, 0);
    struct gv_alloc_victim_plan p;
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, "H100", NULL), GV_OK);
    assert_string_equal(victims(c, r, 10, v, 2, NULL, &p), "NOFIT");
    assert_non_null(strstr(p.reason, "no GPU matches"));
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, NULL, NULL), GV_OK);
    /* only g1 allowed: b, not the cheaper-named a */
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_UUID, "n1-g1", NULL), GV_OK);
    assert_string_equal(victims(c, r, 10, v, 2, NULL, NULL), "b");
    /* larger than any GPU */
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_UUID, NULL, NULL), GV_OK);
    r->containers[0].mem = 20000;
    assert_string_equal(victims(c, r, 10, v, 2, NULL, NULL), "NOFIT");
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* One-GPU requests: the plan's cost equals the brute-force optimum (the
 * request lands on one GPU, whose cheapest set the search finds exactly). */
static void test_random_single_gpu_optimal(void **state)
{
    (void)state;
    const char *env = getenv("GV_VICTIMS_SEED");
    unsigned seed = env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL);
    srand(seed);
    for (int round = 0; round < 300; round++) {
        struct gv_alloc_cluster *c = cluster_with("n1", 3, 16000);
        struct gv_alloc_victim v[10];
        char uids[10][8];
        size_t n = 0;
        for (int i = 0; i < 10; i++) {
            snprintf(uids[i], sizeof(uids[i]), "p%d", i);
            char text[128];
            snprintf(text, sizeof(text), "v1;node=n1;main=n1-g%d:%d:%d", rand() % 3,
                     1000 * (1 + rand() % 6), 100 * (rand() % 4));
            struct gv_alloc_assignment a;
            gv_alloc_assignment_decode(text, strlen(text), &a, NULL);
            struct gv_alloc_request *pr = simple_req(uids[i], 1, 0, 0);
            if (gv_alloc_place(c, pr, &a, NULL) == GV_OK)
            {
                v[n] = (struct gv_alloc_victim){uids[i], rand() % 4, false, false, NULL};
                n++;
            }
            gv_alloc_request_free(pr);
        }
        struct gv_alloc_request *r =
            simple_req("hi", 1, 1000 * (uint64_t)(1 + rand() % 16), 100 * (uint32_t)(rand() % 11));
        int32_t prio = 2 + rand() % 2;
        struct gv_alloc_victim_plan p;
        victims(c, r, prio, v, n, NULL, &p);
        /* brute force over every subset of eligible pods */
        struct gv_alloc_victim_plan best = {.fits = false};
        for (unsigned mask = 0; mask < (1u << n); mask++) {
            const char *without[10];
            size_t k = 0;
            bool ok = true;
            struct gv_alloc_victim_plan q = {.fits = true, .max_priority = INT32_MIN};
            for (size_t i = 0; i < n; i++)
                if (mask & (1u << i)) {
                    ok = ok && v[i].priority < prio;
                    without[k++] = v[i].uid;
                    q.n++;
                    q.priority_sum += v[i].priority;
                    if (v[i].priority > q.max_priority)
                        q.max_priority = v[i].priority;
                }
            if (!ok)
                continue;
            struct gv_alloc_fit fit;
            gv_alloc_fit_without(c, r, "n1", without, k, NULL, &fit, NULL);
            if (!fit.fits)
                continue;
            /* compare on (count, max priority, priority sum) only: the
             * slice tie-breaks need the pods' shares */
            if (!best.fits || q.n < best.n ||
                (q.n == best.n && (q.max_priority < best.max_priority ||
                                   (q.max_priority == best.max_priority &&
                                    q.priority_sum < best.priority_sum))))
                best = q;
        }
        if (p.fits != best.fits || (p.fits && (p.n != best.n || p.max_priority != best.max_priority ||
                                               p.priority_sum != best.priority_sum)))
            fail_msg("seed %u round %d: plan fits=%d n=%u max=%d sum=%lld, brute fits=%d n=%u "
                     "max=%d sum=%lld (GV_VICTIMS_SEED=%u to replay)",
                     seed, round, p.fits, p.n, p.max_priority, (long long)p.priority_sum,
                     best.fits, best.n, best.max_priority, (long long)best.priority_sum, seed);
        gv_alloc_request_free(r);
        gv_alloc_cluster_free(c);
    }
}

/*
 * When the GPU-by-GPU search does not apply (here: a request for host CPU
 * alone), every eligible pod goes out and they are given back in
 * kube-scheduler's reprieve order while the request still fits: a pod
 * whose eviction would violate a PodDisruptionBudget first, then the most
 * important, then the smallest GPU share (so that more pods stay).  Two pods
 * of 4000 milli CPU on 8000, a request for 4000: one is reprieved, the other
 * is the victim.  The candidate lists put the pod to reprieve last, so that
 * list order alone would pick the wrong one.
 */
static void test_reprieve_order(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_of("n1", 1, 16000, 4, 8000);
    place_cpu(c, "big", "v1;node=n1;main=n1-g0:4000:600", 4000);
    place_cpu(c, "small", "v1;node=n1;main=n1-g0:2000:200", 4000);
    struct gv_alloc_request *r = simple_req("hi", 0, 0, 0);
    r->cpu_milli = 4000;
    struct gv_alloc_victim_plan p;
    /* priority: the more important one stays */
    struct gv_alloc_victim v1[] = {{"small", 1, false, false, NULL}, {"big", 5, false, false, NULL}};
    assert_string_equal(victims(c, r, 10, v1, 2, NULL, &p), "small");
    assert_int_equal(p.max_priority, 1);
    /* a PDB-protected pod stays, even over a more important one */
    struct gv_alloc_victim v2[] = {{"big", 5, false, false, NULL}, {"small", 1, true, false, NULL}};
    assert_string_equal(victims(c, r, 10, v2, 2, NULL, &p), "big");
    assert_int_equal(p.pdb_violations, 0);
    /* equals: the smaller GPU share stays */
    struct gv_alloc_victim v3[] = {{"big", 1, false, false, NULL}, {"small", 1, false, false, NULL}};
    assert_string_equal(victims(c, r, 10, v3, 2, NULL, &p), "big");
    /* a pod named twice is one pod: its first entry counts, once */
    struct gv_alloc_victim v4[] = {{"small", 1, false, false, NULL},
                                   {"big", 5, false, false, NULL},
                                   {"small", 1, false, false, NULL}};
    assert_string_equal(victims(c, r, 10, v4, 3, NULL, &p), "small");
    assert_int_equal(p.n, 1);
    assert_int_equal(p.priority_sum, 1);
    r->cpu_milli = 8000; /* both must go: each counted once */
    assert_string_equal(victims(c, r, 10, v4, 3, NULL, &p), "small,big");
    assert_int_equal(p.priority_sum, 6);
    r->cpu_milli = 4000;
    struct gv_alloc_request *g = simple_req("hg", 1, 14000, 0); /* GPU by GPU: the same */
    assert_string_equal(victims(c, g, 10, v4, 3, NULL, &p), "big");
    assert_int_equal(p.n, 1);
    gv_alloc_request_free(g);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/*
 * Up to 12 pods on a GPU the cheapest set is searched exactly; above, all
 * go and the most important, then the smallest, are given back while the
 * request still fits (a bounded greedy).  One GPU at 950 milli: a 400-milli
 * pod of priority 5 and small pods of priority 0; a 400-milli request.
 * Exact: the one big pod (fewest victims).  Greedy: the big one is given
 * back first and seven small ones go.  12 pods search exactly, 13 do not.
 */
static void test_exact_up_to_twelve_then_greedy(void **state)
{
    (void)state;
    for (uint32_t m = 12; m <= 13; m++) {
        struct gv_alloc_cluster *c = cluster_of("n1", 1, 16000, 32, 0);
        struct gv_alloc_victim v[13];
        char uids[13][8];
        place(c, "big", "v1;node=n1;main=n1-g0:1000:400");
        v[0] = (struct gv_alloc_victim){"big", 5, false, false, NULL};
        uint32_t small_milli = m == 12 ? 50 : 45; /* 11 x 50 or 12 x 45: 550 or 540 */
        for (uint32_t i = 1; i < m; i++) {
            snprintf(uids[i], sizeof(uids[i]), "s%02u", i);
            char text[96];
            snprintf(text, sizeof(text), "v1;node=n1;main=n1-g0:100:%u", small_milli);
            place(c, uids[i], text);
            v[i] = (struct gv_alloc_victim){uids[i], 0, false, false, NULL};
        }
        struct gv_alloc_request *r = simple_req("hi", 1, 1000, 400);
        struct gv_alloc_victim_plan p;
        const char *got = victims(c, r, 10, v, m, NULL, &p);
        if (m == 12) {
            assert_string_equal(got, "big");
        } else {
            /* 400 given back, then the smalls while 400 milli stay free:
             * 4 of 45 back (580 used), 8 victims */
            assert_int_equal(p.n, 8);
            assert_null(strstr(got, "big"));
        }
        gv_alloc_request_free(r);
        gv_alloc_cluster_free(c);
    }
}

/* The greedy's order among equals: the smallest is given back first, so
 * more pods stay (the list puts the large ones first). */
static void test_greedy_gives_back_smallest_first(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_of("n1", 1, 16000, 32, 0);
    struct gv_alloc_victim v[14];
    char uids[14][8];
    for (uint32_t i = 0; i < 14; i++) {
        snprintf(uids[i], sizeof(uids[i]), "p%02u", i);
        char text[96];
        snprintf(text, sizeof(text), "v1;node=n1;main=n1-g0:100:%u", i < 7 ? 100 : 40);
        place(c, uids[i], text);
        v[i] = (struct gv_alloc_victim){uids[i], 1, false, false, NULL};
    }
    /* 980 used; a 300-milli request: the seven 40s back (280), then four
     * 100s (680): three 100s go */
    struct gv_alloc_request *r = simple_req("hi", 1, 1000, 300);
    struct gv_alloc_victim_plan p;
    victims(c, r, 10, v, 14, NULL, &p);
    assert_int_equal(p.n, 3);
    assert_int_equal(p.milli, 300);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* A request for a GPU no task uses ("mutex") empties one GPU: every pod on
 * the cheapest GPU goes, however little it holds. */
static void test_mutex_request_empties_a_gpu(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_with("n1", 2, 16000);
    place(c, "a", "v1;node=n1;main=n1-g0:1000:100");
    place(c, "b", "v1;node=n1;main=n1-g0:1000:100");
    place(c, "d", "v1;node=n1;main=n1-g1:4000:200");
    struct gv_alloc_victim v[] = {{"a", 1, false, false, NULL}, {"b", 1, false, false, NULL},
                                  {"d", 1, false, false, NULL}};
    struct gv_alloc_request *r = simple_req("hi", 1, 1000, 100);
    struct gv_alloc_assignment a;
    assert_string_equal(victims(c, r, 10, v, 3, &a, NULL), ""); /* room already */
    r->gpu_mutex = true;
    assert_string_equal(victims(c, r, 10, v, 3, &a, NULL), "d"); /* g1: one pod */
    assert_string_equal(a.containers[0].devices[0].uuid, "n1-g1");
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* A pod whose GPU left the node (the node was updated without it) holds
 * nothing there: it is no victim, and the search over the other GPUs is
 * not disturbed by its device. */
static void test_vanished_gpu_pod(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = cluster_with("n1", 2, 16000);
    place(c, "gone", "v1;node=n1;main=n1-g1:8000:300");
    place(c, "a", "v1;node=n1;main=n1-g0:12000:300");
    place(c, "b", "v1;node=n1;main=n1-g0:2000:100");
    node_put(c, "n1", 1, 16000, 4, 0); /* g1 is gone */
    struct gv_alloc_victim v[] = {{"gone", 1, false, false, NULL}, {"a", 1, false, false, NULL},
                                  {"b", 1, false, false, NULL}};
    struct gv_alloc_request *r = simple_req("hi", 1, 4000, 0);
    struct gv_alloc_victim_plan p;
    assert_string_equal(victims(c, r, 10, v, 3, NULL, &p), "b");
    r->containers[0].mem = 10000;
    assert_string_equal(victims(c, r, 10, v, 3, NULL, &p), "a");
    assert_int_equal(p.mem_mib, 12000);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* Plans compare on fitting first: a plan that does not fit loses to any
 * that does, however cheap it looks; then PDB violations, count, the
 * highest priority, the priority sum, GPU compute, GPU memory. */
static void test_plan_order(void **state)
{
    (void)state;
    struct gv_alloc_victim_plan fit3 = {.fits = true, .n = 3, .max_priority = 1},
                                nofit = {.fits = false, .n = 0, .max_priority = INT32_MIN};
    assert_true(gv_alloc_victim_plan_cmp(&fit3, &nofit) < 0);
    assert_true(gv_alloc_victim_plan_cmp(&nofit, &fit3) > 0);
    assert_int_equal(gv_alloc_victim_plan_cmp(&fit3, &fit3), 0);
    struct gv_alloc_victim_plan a = fit3, b = fit3;
    b.pdb_violations = 1;
    b.n = 1;
    assert_true(gv_alloc_victim_plan_cmp(&a, &b) < 0);
    b = fit3;
    b.max_priority = 2;
    b.n = 2;
    assert_true(gv_alloc_victim_plan_cmp(&b, &a) < 0);
    b = fit3;
    b.mem_mib = 1;
    assert_true(gv_alloc_victim_plan_cmp(&a, &b) < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_gpu_fewest_then_lowest),
        cmocka_unit_test(test_whole_gpus_and_multi_gpu_pods),
        cmocka_unit_test(test_pdb_preferred_and_forced),
        cmocka_unit_test(test_constraints_no_eviction_helps),
        cmocka_unit_test(test_random_single_gpu_optimal),
        cmocka_unit_test(test_reprieve_order),
        cmocka_unit_test(test_plan_order),
        cmocka_unit_test(test_exact_up_to_twelve_then_greedy),
        cmocka_unit_test(test_greedy_gives_back_smallest_first),
        cmocka_unit_test(test_mutex_request_empties_a_gpu),
        cmocka_unit_test(test_vanished_gpu_pod),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
