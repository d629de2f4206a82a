/*
 * Property test of the LP bound (src/sim/lpbound.c, docs/simulate.md "LP
 * bound"): on random small clusters (2-4 nodes, 1-4 GPUs each, two GPU
 * models, typed pods, CPU that binds), the arrivals up to 100 % of capacity
 * are placed exactly by brute force (every pod placed or not, on every
 * node and GPU, identical GPUs of a node tried once), and
 *
 *     LP bound <= exact optimum <= oracle, fgd, binpack, bestfit, spread
 *
 * in unallocated % at 100 % arrived.  A second case pins known answers of
 * the packing cuts.  Seeds: GV_TEST_SEED (default: the clock), printed on
 * failure; GV_TEST_CASES sets the number of random clusters (default 150).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/sim_internal.h"
#include "trace_text.h"

#define MAX_NODES 4
#define MAX_GPUS 4
#define MAX_ARR 16

struct bf_node {
    int64_t cpu, mem;
    int model; /* 0 or 1 */
    uint32_t n_gpus;
    uint32_t used[MAX_GPUS]; /* milli */
    uint32_t tasks[MAX_GPUS];
};

struct bf_pod {
    int64_t cpu, mem;
    uint32_t k, milli;
    int allowed; /* bit mask of models */
    uint64_t value;
};

struct bf {
    struct bf_node node[MAX_NODES];
    size_t n_nodes;
    struct bf_pod pod[MAX_ARR];
    size_t n_pods;
    uint64_t rest[MAX_ARR + 1]; /* value of pods i.. */
    uint64_t cap, used, best, cur;
    uint64_t visits;
    size_t at[MAX_ARR]; /* node of pod i, n_nodes when left out */
};

static bool same_pod(const struct bf_pod *a, const struct bf_pod *b)
{
    return a->cpu == b->cpu && a->mem == b->mem && a->k == b->k && a->milli == b->milli &&
           a->allowed == b->allowed;
}

static bool gpu_fits(const struct bf_node *n, uint32_t g, uint32_t milli)
{
    if (milli >= 1000)
        return n->tasks[g] == 0;
    return n->used[g] < 1000 && n->used[g] + milli <= 1000;
}

static void bf_search(struct bf *b, size_t i)
{
    b->visits++;
    if (b->cur > b->best)
        b->best = b->cur;
    if (i == b->n_pods)
        return;
    uint64_t room = b->cap - b->used;
    if (b->cur + (b->rest[i] < room ? b->rest[i] : room) <= b->best)
        return;
    const struct bf_pod *p = &b->pod[i];
    /* Identical pods are interchangeable: among them, the placed ones come
     * first and on non-decreasing nodes (any solution can be relabelled so). */
    size_t first = 0;
    if (i > 0 && same_pod(p, &b->pod[i - 1]))
        first = b->at[i - 1];
    for (size_t ni = first; ni < b->n_nodes; ni++) {
        b->at[i] = ni;
        struct bf_node *n = &b->node[ni];
        if (!(p->allowed & (1 << n->model)) || n->cpu < p->cpu || n->mem < p->mem)
            continue;
        n->cpu -= p->cpu;
        n->mem -= p->mem;
        b->cur += p->value;
        b->used += (uint64_t)p->k * p->milli;
        if (p->k == 1) {
            for (uint32_t g = 0; g < n->n_gpus; g++) {
                bool dup = false; /* a GPU in the same state as an earlier one */
                for (uint32_t h = 0; h < g && !dup; h++)
                    dup = n->used[h] == n->used[g] && n->tasks[h] == n->tasks[g];
                if (dup || !gpu_fits(n, g, p->milli))
                    continue;
                n->used[g] += p->milli;
                n->tasks[g]++;
                bf_search(b, i + 1);
                n->used[g] -= p->milli;
                n->tasks[g]--;
            }
        } else {
            /* whole GPUs (the trace's multi-GPU pods ask 1000 each): every
             * idle GPU of a node is alike, take the first k */
            uint32_t got[MAX_GPUS], ng = 0;
            for (uint32_t g = 0; g < n->n_gpus && ng < p->k; g++)
                if (n->tasks[g] == 0)
                    got[ng++] = g;
            if (ng == p->k) {
                for (uint32_t j = 0; j < ng; j++) {
                    n->used[got[j]] = 1000;
                    n->tasks[got[j]] = 1;
                }
                bf_search(b, i + 1);
                for (uint32_t j = 0; j < ng; j++)
                    n->used[got[j]] = n->tasks[got[j]] = 0;
            }
        }
        b->used -= (uint64_t)p->k * p->milli;
        b->cur -= p->value;
        n->cpu += p->cpu;
        n->mem += p->mem;
    }
    b->at[i] = b->n_nodes;
    bf_search(b, i + 1); /* this pod left out */
}

/* Largest value first (pruning); identical pods next to each other. */
static int by_value_desc(const void *x, const void *y)
{
    const struct bf_pod *a = x, *b = y;
    if (a->value != b->value)
        return a->value > b->value ? -1 : 1;
    if (a->cpu != b->cpu)
        return a->cpu < b->cpu ? -1 : 1;
    if (a->mem != b->mem)
        return a->mem < b->mem ? -1 : 1;
    if (a->k != b->k)
        return a->k < b->k ? -1 : 1;
    return a->allowed - b->allowed;
}

static const char *const models[2] = {"T4", "V100"};

struct instance {
    char nodes[1024], pods[2048];
};

static uint64_t rnd(struct gv_sim_rng *r, uint64_t n)
{
    return gv_sim_rng_below(r, n);
}

/* A random cluster and pod list as openb CSV text. */
static void make_instance(struct gv_sim_rng *r, struct instance *in)
{
    size_t nn = 2 + rnd(r, 3), off = 0;
    off += (size_t)snprintf(in->nodes + off, sizeof(in->nodes) - off,
                            "sn,cpu_milli,memory_mib,gpu,model\n");
    for (size_t i = 0; i < nn; i++)
        off += (size_t)snprintf(in->nodes + off, sizeof(in->nodes) - off,
                                "n%zu,%llu,%llu,%llu,%s\n", i,
                                (unsigned long long)(4000 + 2000 * rnd(r, 5)),
                                (unsigned long long)(16384 * (1 + rnd(r, 3))),
                                (unsigned long long)(1 + rnd(r, 3)),
                                models[i < 2 ? i : (rnd(r, 4) == 0)]); /* both exist */
    size_t np = 2 + rnd(r, 6);
    off = 0;
    off += (size_t)snprintf(in->pods + off, sizeof(in->pods) - off,
                            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n");
    static const uint32_t sizes[] = {250, 300, 400, 500, 600, 700, 810, 1000, 1000, 1000};
    for (size_t i = 0; i < np; i++) {
        uint64_t kind = rnd(r, 10);
        uint32_t k = kind < 8 ? 1 : (uint32_t)(2 + rnd(r, 2));
        uint32_t milli = k > 1 ? 1000 : sizes[rnd(r, sizeof(sizes) / sizeof(sizes[0]))];
        const char *spec = rnd(r, 5) == 0 ? models[rnd(r, 2)] : "";
        off += (size_t)snprintf(in->pods + off, sizeof(in->pods) - off,
                                "p%zu,%llu,%llu,%u,%u,%s\n", i,
                                (unsigned long long)(1000 * (1 + rnd(r, 4))),
                                (unsigned long long)(4096 * (1 + rnd(r, 4))), k, milli, spec);
    }
}

static int model_index(const char *m)
{
    return strcmp(m, "T4") == 0 ? 0 : 1;
}

/* Exact optimum (allocated milli) of the arrivals of seed up to 100 %. */
static uint64_t exact_alloc(const struct gv_sim_trace *t, uint64_t seed, size_t *n_arr,
                            uint64_t *visits)
{
    static struct bf b;
    memset(&b, 0, sizeof(b));
    b.n_nodes = t->n_nodes;
    for (size_t i = 0; i < t->n_nodes; i++) {
        const struct gv_alloc_node_spec *s = &t->nodes[i].spec;
        b.node[i] = (struct bf_node){.cpu = s->cpu_milli, .mem = s->mem_mib,
                                     .model = model_index(s->gpus[0].model),
                                     .n_gpus = (uint32_t)s->n_gpus};
        b.cap += s->n_gpus * 1000;
    }
    struct sim_arrivals a;
    struct gv_error err = {0};
    assert_int_equal(sim_arrivals_init(&a, t, seed, &err), GV_OK);
    for (uint64_t arrived = 0; arrived < b.cap;) {
        if (b.n_pods == MAX_ARR) {
            sim_arrivals_fini(&a);
            return UINT64_MAX; /* too many arrivals to search */
        }
        const struct gv_alloc_request *r = t->pods[sim_arrivals_next(&a)];
        struct bf_pod *p = &b.pod[b.n_pods++];
        *p = (struct bf_pod){r->cpu_milli, r->mem_mib, 0, 0, 3, sim_pod_milli(r)};
        if (r->n_containers > 0) {
            p->k = r->containers[0].num_gpu;
            p->milli = r->containers[0].milli;
        }
        const char *spec = r->constraint[GV_ALLOC_USE_TYPE];
        if (spec != NULL)
            p->allowed = 1 << model_index(strcmp(spec, "t4") == 0 ? "T4" : "V100");
        arrived += p->value;
    }
    sim_arrivals_fini(&a);
    qsort(b.pod, b.n_pods, sizeof(b.pod[0]), by_value_desc);
    for (size_t i = b.n_pods; i-- > 0;)
        b.rest[i] = b.rest[i + 1] + b.pod[i].value;
    bf_search(&b, 0);
    *n_arr = b.n_pods;
    *visits = b.visits;
    return b.best;
}

static void test_lp_below_exact_below_every_placement(void **state)
{
    (void)state;
    const char *env = getenv("GV_TEST_SEED");
    uint64_t seed0 = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    const char *ce = getenv("GV_TEST_CASES");
    int cases = ce ? atoi(ce) : 150;
    struct gv_sim_rng rng;
    gv_sim_rng_seed(&rng, seed0);
    int tight = 0, runs = 0, skipped = 0;
    double gap = 0;
    for (int c = 0; c < cases; c++) {
        struct instance in;
        make_instance(&rng, &in);
        struct gv_sim_trace *t;
        struct gv_error err = {0};
        assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
        if (gv_sim_parse_openb_nodes(t, "n.csv", in.nodes, strlen(in.nodes), &err) != GV_OK ||
            gv_sim_parse_openb_pods(t, "p.csv", in.pods, strlen(in.pods), &err) != GV_OK)
            fail_msg("GV_TEST_SEED=%llu case %d: %s", (unsigned long long)seed0, c, err.msg);
        double cap = (double)gv_sim_trace_gpu_milli(t);
        for (uint64_t seed = 1; seed <= 2; seed++) {
            struct gv_sim_reference ref;
            if (gv_sim_reference(t, seed, &ref, &err) != GV_OK)
                fail_msg("GV_TEST_SEED=%llu case %d: %s", (unsigned long long)seed0, c, err.msg);
            size_t n_arr;
            uint64_t visits;
            uint64_t best = exact_alloc(t, seed, &n_arr, &visits);
            if (best == UINT64_MAX) {
                skipped++;
                continue;
            }
            double exact = 100.0 - 100.0 * (double)best / cap;
            if (ref.bound_unalloc_pct > exact + 1e-6)
                fail_msg("GV_TEST_SEED=%llu case %d seed %llu: LP bound %.4f above the exact "
                         "optimum %.4f (%zu arrivals)\nnodes:\n%spods:\n%s",
                         (unsigned long long)seed0, c, (unsigned long long)seed,
                         ref.bound_unalloc_pct, exact, n_arr, in.nodes, in.pods);
            if (exact > ref.oracle_unalloc_pct + 1e-6)
                fail_msg("GV_TEST_SEED=%llu case %d seed %llu: exact %.4f above the oracle %.4f",
                         (unsigned long long)seed0, c, (unsigned long long)seed, exact,
                         ref.oracle_unalloc_pct);
            for (int p = 0; p < GV_ALLOC_POLICY_COUNT; p++) {
                struct gv_sim_curve cv;
                assert_int_equal(gv_sim_run(t, (gv_alloc_policy)p, seed, 1.0, &cv, &err), GV_OK);
                double got = 100.0 - cv.allocated[100];
                gv_sim_curve_free(&cv);
                if (exact > got + 1e-6)
                    fail_msg("GV_TEST_SEED=%llu case %d seed %llu: exact %.4f above policy %d's "
                             "%.4f", (unsigned long long)seed0, c, (unsigned long long)seed,
                             exact, p, got);
            }
            runs++;
            tight += exact - ref.bound_unalloc_pct < 1e-6;
            gap += exact - ref.bound_unalloc_pct;
        }
        gv_sim_trace_free(t);
    }
    printf("# GV_TEST_SEED=%llu: %d instances (%d with over %d arrivals skipped), LP bound "
           "exact on %d, mean gap %.2f points\n",
           (unsigned long long)seed0, runs, skipped, MAX_ARR, tight, runs ? gap / runs : 0.0);
    assert_true(runs >= cases / 2); /* the generator mostly makes searchable instances */
}

/* sim_test_trace, with every GPU of every node given gpu_mem MiB when that
 * is not 0 (openb lists carry no GPU memory). */
static struct gv_sim_trace *trace_of(const char *nodes, const char *pods, uint64_t gpu_mem)
{
    struct gv_sim_trace *t = sim_test_trace(nodes, pods);
    for (size_t i = 0; gpu_mem != 0 && i < t->n_nodes; i++)
        for (size_t g = 0; g < t->nodes[i].spec.n_gpus; g++)
            ((struct gv_alloc_gpu_spec *)t->nodes[i].spec.gpus)[g].mem_mib = gpu_mem;
    return t;
}

/* The LP's optimum (allocated milli) with every pod of the list arriving
 * once, in list order. */
static double lp_alloc_all(const struct gv_sim_trace *t)
{
    size_t arr[64];
    assert_true(t->n_pods <= 64);
    for (size_t i = 0; i < t->n_pods; i++)
        arr[i] = i;
    struct sim_lp lp;
    struct gv_error err = {0};
    if (sim_lp_bound(t, arr, t->n_pods, &lp, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_true(lp.ok);
    return lp.alloc_milli;
}

/* Known answers of the packing cuts: without them the LP would allocate
 * everything. */
static void test_lp_packing_cuts_known(void **state)
{
    (void)state;
    struct {
        const char *pods;
        double unalloc; /* exact, and what the cuts give */
    } cases[] = {
        /* 600-milli tasks only: one per GPU, 40 % of every GPU idle */
        {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,600\n", 40.0},
        /* 2-GPU pods on 3-GPU nodes: one per node, a third idle */
        {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,2,1000\n", 100.0 / 3},
        /* CPU: 9 of a node's 16 cores per whole-GPU pod, one pod per node */
        {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,9000,1024,1,1000\n", 200.0 / 3},
    };
    const char *nodes = "sn,cpu_milli,memory_mib,gpu,model\n"
                        "n0,16000,65536,3,T4\nn1,16000,65536,3,T4\n";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gv_sim_trace *t = trace_of(nodes, cases[i].pods, 0);
        struct gv_error err = {0};
        struct gv_sim_reference ref;
        assert_int_equal(gv_sim_reference(t, 42, &ref, &err), GV_OK);
        if (ref.bound_unalloc_pct < cases[i].unalloc - 1e-6 ||
            ref.bound_unalloc_pct > cases[i].unalloc + 1e-6)
            fail_msg("case %zu: bound %.4f, want %.4f", i, ref.bound_unalloc_pct,
                     cases[i].unalloc);
        /* what the capacity bound alone cannot see */
        assert_true(ref.capacity_bound_unalloc_pct < cases[i].unalloc - 1);
        gv_sim_trace_free(t);
    }
}

#define PODS_HDR "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"

/*
 * Pods that differ in one field are different LP classes, and nodes that
 * differ in one field different types: merged, the first one's request (or
 * node) would stand for all of them and the bound would claim less than
 * every pod placed (here each case's pods all fit, so the LP must allocate
 * all of them).  One case for each field the class and type keys
 * compare.
 */
static void test_lp_classes_and_types_kept_apart(void **state)
{
    (void)state;
    const char *two3 = "sn,cpu_milli,memory_mib,gpu,model\n"
                       "n0,16000,65536,3,T4\nn1,16000,65536,3,T4\n";
    /* CPU: one 9-core pod per node (two do not fit), then 1-core ones */
    struct gv_sim_trace *t = trace_of(two3,
                                      PODS_HDR "b0,9000,1024,1,1000,\nb1,9000,1024,1,1000,\n"
                                               "s0,1000,1024,1,1000,\ns1,1000,1024,1,1000,\n"
                                               "s2,1000,1024,1,1000,\ns3,1000,1024,1,1000,\n",
                                      0);
    assert_float_equal(lp_alloc_all(t), 6000, 1e-3);
    gv_sim_trace_free(t);
    /* host memory: the same with 40 GiB pods and 4 GiB ones */
    t = trace_of(two3,
                 PODS_HDR "b0,1000,40000,1,1000,\nb1,1000,40000,1,1000,\n"
                          "s0,1000,4000,1,1000,\ns1,1000,4000,1,1000,\n"
                          "s2,1000,4000,1,1000,\ns3,1000,4000,1,1000,\n",
                 0);
    assert_float_equal(lp_alloc_all(t), 6000, 1e-3);
    gv_sim_trace_free(t);
    /* GPU type: two T4 GPUs and two V100 GPUs, two pods typed to each */
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,2,T4\nn1,16000,65536,2,V100\n",
                 PODS_HDR "t0,1000,1024,1,1000,T4\nt1,1000,1024,1,1000,T4\n"
                          "v0,1000,1024,1,1000,V100\nv1,1000,1024,1,1000,V100\n",
                 0);
    assert_float_equal(lp_alloc_all(t), 4000, 1e-3);
    gv_sim_trace_free(t);
    /* GPU memory per container, in MiB: one 12 GiB pod and two of 2 GiB,
     * 300 milli each, on two GPUs of 16 GiB (three 12 GiB pods do not fit) */
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,2,T4\n",
                 PODS_HDR "g0,1000,1024,1,300,\ng1,1000,1024,1,300,\ng2,1000,1024,1,300,\n",
                 16384);
    t->pods[0]->containers[0].mem = 12000;
    t->pods[1]->containers[0].mem = 2000;
    t->pods[2]->containers[0].mem = 2000;
    assert_float_equal(lp_alloc_all(t), 900, 1e-3);
    gv_sim_trace_free(t);
    /* ... and in percent against MiB: 60 % of a 16 GiB GPU, then three of
     * 60 MiB (four 60 % pods do not fit on two GPUs) */
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,2,T4\n",
                 PODS_HDR "g0,1000,1024,1,300,\ng1,1000,1024,1,300,\ng2,1000,1024,1,300,\n"
                          "g3,1000,1024,1,300,\n",
                 16384);
    t->pods[0]->containers[0].mem_kind = GV_ALLOC_MEM_PCT;
    t->pods[0]->containers[0].mem = 60;
    for (size_t i = 1; i < 4; i++)
        t->pods[i]->containers[0].mem = 60;
    assert_float_equal(lp_alloc_all(t), 1200, 1e-3);
    gv_sim_trace_free(t);
    /* node types by GPU memory: a 1 GiB GPU, then a 16 GiB one; an 8 GiB
     * pod fits only the second */
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,1,T4\nn1,16000,65536,1,T4\n",
                 PODS_HDR "g0,1000,1024,1,1000,\ng1,1000,1024,1,1000,\n", 16384);
    ((struct gv_alloc_gpu_spec *)t->nodes[0].spec.gpus)[0].mem_mib = 1024;
    t->pods[0]->containers[0].mem = 8000;
    t->pods[1]->containers[0].mem = 8000;
    assert_float_equal(lp_alloc_all(t), 1000, 1e-3);
    gv_sim_trace_free(t);
    /* a node that does not count CPU (capacity 0) takes any number of pods
     * for its CPU: its node-level CPU rows must weigh nothing */
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,3,T4\n",
                 PODS_HDR "c0,5000,1024,1,1000,\nc1,5000,1024,1,1000,\nc2,5000,1024,1,1000,\n", 0);
    t->nodes[0].spec.cpu_milli = 0;
    assert_float_equal(lp_alloc_all(t), 3000, 1e-3);
    gv_sim_trace_free(t);
}

/*
 * Known answers of the capacity bound (reference.c), each where one of its
 * parts decides: a pod that fits nowhere must not make another template
 * that differs from it in one field count as fitting nowhere too (then
 * the bound reads 100 % unallocated); typed demand beyond its model
 * (Hall's bound over model sets); a node that does not count CPU.
 */
static void test_capacity_bound_known(void **state)
{
    (void)state;
    const char *nodes = "sn,cpu_milli,memory_mib,gpu,model\n"
                        "n0,16000,65536,4,T4\nn1,16000,65536,8,V100\n";
    struct {
        const char *pods;
        uint64_t first_gpu_mem; /* MiB per GPU of the first template, 0 = none */
    } apart[] = {
        /* CPU */
        {PODS_HDR "a,100000,1024,1,1000,\nb,1000,1024,1,1000,\nc,1000,1024,1,1000,\n", 0},
        /* host memory */
        {PODS_HDR "a,1000,10000000,1,1000,\nb,1000,1024,1,1000,\nc,1000,1024,1,1000,\n", 0},
        /* GPU count */
        {PODS_HDR "a,1000,1024,9,1000,\nb,1000,1024,1,1000,\nc,1000,1024,1,1000,\n", 0},
        /* GPU memory */
        {PODS_HDR "a,1000,1024,1,1000,\nb,1000,1024,1,1000,\nc,1000,1024,1,1000,\n", 1000000},
        /* GPU type: four T4 GPUs on a node of four cannot take a 5-GPU pod */
        {PODS_HDR "a,1000,1024,5,1000,T4\nb,1000,1024,5,1000,V100\nc,1000,1024,1,1000,\n", 0},
    };
    for (size_t i = 0; i < sizeof(apart) / sizeof(apart[0]); i++) {
        struct gv_sim_trace *t = trace_of(nodes, apart[i].pods, 16384);
        if (apart[i].first_gpu_mem)
            t->pods[0]->containers[0].mem = apart[i].first_gpu_mem;
        struct gv_sim_reference ref;
        struct gv_error err = {0};
        assert_int_equal(gv_sim_reference_bounds(t, 42, &ref, &err), GV_OK);
        /* b and c fit: at least 2000 of the 12000 milli is placeable (with b and c
         * counted as fitting nowhere, 100 %) */
        if (!(ref.capacity_bound_unalloc_pct < 90))
            fail_msg("case %zu: capacity bound %.2f %% unallocated", i,
                     ref.capacity_bound_unalloc_pct);
        gv_sim_trace_free(t);
    }
    /* V100-typed demand on one T4 GPU and eight V100: the T4 stays idle */
    struct gv_sim_trace *t =
        trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,1,T4\nn1,96000,65536,8,V100\n",
                 PODS_HDR "v,1000,1024,1,1000,V100\n", 0);
    struct gv_sim_reference ref;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_reference_bounds(t, 42, &ref, &err), GV_OK);
    assert_float_equal(ref.capacity_bound_unalloc_pct, 100.0 / 9, 1e-6);
    gv_sim_trace_free(t);
    /* CPU: n0 does not count it, so the 10-core pods all fit */
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,8,T4\nn1,16000,65536,1,T4\n",
                 PODS_HDR "c,10000,1024,1,1000,\n", 0);
    t->nodes[0].spec.cpu_milli = 0;
    assert_int_equal(gv_sim_reference_bounds(t, 42, &ref, &err), GV_OK);
    assert_float_equal(ref.capacity_bound_unalloc_pct, 0, 1e-6);
    gv_sim_trace_free(t);
    /* nothing to bound: no GPU, or no GPU demand, is an error */
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,0,\n",
                 PODS_HDR "c,1000,1024,1,1000,\n", 0);
    assert_int_equal(gv_sim_reference_bounds(t, 42, &ref, &err), GV_EINVAL);
    gv_sim_trace_free(t);
    t = trace_of("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,1,T4\n",
                 PODS_HDR "c,1000,1024,0,0,\n", 0);
    assert_int_equal(gv_sim_reference_bounds(t, 42, &ref, &err), GV_EINVAL);
    gv_sim_trace_free(t);
}

/*
 * The oracle takes the best of its orders: two one-GPU nodes, pods of 600,
 * 600 and 800 milli arriving with the 800 last.  In arrival order the two
 * 600s take both GPUs and the 800 fails (1200 placed); largest first places
 * 800 and 600 (1400, the optimum): 30 % unallocated.
 */
static void test_oracle_sorts_largest_first(void **state)
{
    (void)state;
    struct gv_sim_trace *t = trace_of(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,1,T4\nn1,16000,65536,1,T4\n",
        PODS_HDR "a,1000,1024,1,600,\nb,1000,1024,1,600,\nc,1000,1024,1,800,\n", 0);
    uint64_t seed = 1;
    for (;; seed++) { /* a seed whose arrivals end with the 800 */
        struct sim_arrivals a;
        struct gv_error err = {0};
        assert_int_equal(sim_arrivals_init(&a, t, seed, &err), GV_OK);
        size_t last = 0;
        for (int i = 0; i < 3; i++)
            last = sim_arrivals_next(&a);
        sim_arrivals_fini(&a);
        if (last == 2)
            break;
        assert_true(seed < 1000);
    }
    struct gv_sim_reference ref;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_reference(t, seed, &ref, &err), GV_OK);
    assert_float_equal(ref.oracle_unalloc_pct, 30.0, 1e-6);
    gv_sim_trace_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lp_packing_cuts_known),
        cmocka_unit_test(test_lp_below_exact_below_every_placement),
        cmocka_unit_test(test_lp_classes_and_types_kept_apart),
        cmocka_unit_test(test_capacity_bound_known),
        cmocka_unit_test(test_oracle_sorts_largest_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
