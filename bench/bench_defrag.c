/*
 * Defragmentation planning at 5,000 nodes x 8 GPUs (docs/alloc.md,
 * "Defragmentation"; goal: a plan in under 2 s).  The cluster is filled by
 * fgd to about 90 % of its GPU share with the synthetic mix (45 % fractional,
 * 3 % multi-GPU, the rest one whole GPU), then a random 30 % of the pods
 * leave: the fragmentation that arrivals and departures leave behind.  Then
 * gv_defrag_plan with budgets of 10 and 50 moves, and with 8 pending
 * 8-GPU pods.  Usage: bench_defrag [nodes] [seed]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/gv_alloc.h"
#include "alloc/gv_defrag.h"

static uint64_t rs = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct gv_alloc_request *req_new(uint64_t k, bool pending)
{
    struct gv_alloc_request *r;
    if (gv_alloc_request_new(&r, NULL) != GV_OK)
        exit(1);
    snprintf(r->uid, sizeof(r->uid), "%s-%llu", pending ? "pend" : "pod", (unsigned long long)k);
    r->n_containers = 1;
    snprintf(r->containers[0].name, sizeof(r->containers[0].name), "main");
    r->containers[0].priority = -1;
    uint32_t x = (uint32_t)(rnd() % 100);
    if (pending || x >= 48) {
        r->containers[0].num_gpu = 1;
        r->containers[0].milli = 1000;
    } else if (x < 45) {
        r->containers[0].num_gpu = 1;
        static const uint32_t pop[] = {100, 200, 250, 250, 300, 500, 500, 500};
        r->containers[0].milli =
            rnd() % 2 ? pop[rnd() % 8] : (uint32_t)(50 + 50 * (rnd() % 19));
    } else {
        static const uint32_t k2[] = {2, 4, 8};
        r->containers[0].num_gpu = k2[rnd() % 3];
        r->containers[0].milli = 1000;
    }
    return r;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint32_t nodes = argc > 1 ? (uint32_t)atoi(argv[1]) : 5000;
    rs += argc > 2 ? (uint64_t)atoll(argv[2]) : 0;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_alloc_cluster *c;
    struct gv_error err = {0};
    if (gv_alloc_cluster_new(&cfg, &c, &err) != GV_OK)
        return 1;
    for (uint32_t i = 0; i < nodes; i++) {
        char name[32], uu[8][48];
        struct gv_alloc_gpu_spec g[8];
        snprintf(name, sizeof(name), "node-%05u", i);
        for (uint32_t k = 0; k < 8; k++) {
            snprintf(uu[k], sizeof(uu[k]), "GPU-%05u-%u", i, k);
            g[k] = (struct gv_alloc_gpu_spec){uu[k], k, "NVIDIA A100-SXM4-80GB", 81920, 0,
                                              (int32_t)(k / 4), true, GV_ALLOC_GPU_SHARED};
        }
        struct gv_alloc_node_spec s = {name, 0, 0, NULL, 0, g, 8};
        if (gv_alloc_node_upsert(c, &s, &err) != GV_OK)
            return 1;
    }
    size_t cap = (size_t)nodes * 16, n = 0;
    struct gv_alloc_request **reqs = calloc(cap, sizeof(*reqs));
    struct gv_alloc_assignment *at = calloc(cap, sizeof(*at));
    uint64_t target = (uint64_t)nodes * 8 * 1000 * 9 / 10, asked = 0;
    double t0 = now_s();
    for (uint64_t k = 0; asked < target && n < cap; k++) {
        struct gv_alloc_request *r = req_new(k, false);
        asked += (uint64_t)r->containers[0].num_gpu * r->containers[0].milli;
        gv_alloc_observe(c, r);
        if (gv_alloc_pick(c, r, NULL, 0, &at[n], NULL) == GV_OK &&
            gv_alloc_place(c, r, &at[n], NULL) == GV_OK)
            reqs[n++] = r;
        else
            gv_alloc_request_free(r);
    }
    /* departures: a random 30 % */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (rnd() % 10 < 3) {
            gv_alloc_release(c, reqs[i]->uid, NULL);
            gv_alloc_request_free(reqs[i]);
            continue;
        }
        reqs[kept] = reqs[i];
        at[kept++] = at[i];
    }
    n = kept;
    printf("cluster: %u nodes x 8 GPUs, %zu pods after 30 %% departed (filled in %.1f s)\n",
           nodes, n, now_s() - t0);
    struct gv_defrag_pod *pods = calloc(n, sizeof(*pods));
    for (size_t i = 0; i < n; i++)
        pods[i] = (struct gv_defrag_pod){reqs[i], &at[i], true, -1};
    struct gv_alloc_request *pend[20];
    /* 20 pending one-GPU pods (all fit), then 8 pending 8-GPU pods (few do) */
    for (int i = 0; i < 20; i++) {
        pend[i] = req_new((uint64_t)i, true);
        if (i < 8)
            pend[i]->containers[0].num_gpu = 8;
    }
    /* drains measured in the first round: 256 is what kubectl gpuvisor
     * defrag uses (KC_DEFRAG_MAX_DRAINS); 1500 shows what more buys */
    const struct {
        uint32_t moves;
        size_t pending;
        uint32_t drains;
    } runs[] = {{10, 0, 256}, {50, 0, 256}, {10, 8, 256}, {10, 0, 1500}};
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        struct gv_defrag_input in = {pods, n, NULL, 0,
                                     (const struct gv_alloc_request *const *)pend,
                                     runs[r].pending, runs[r].moves, runs[r].drains};
        struct gv_defrag_plan plan;
        double t = now_s();
        clock_t cpu = clock();
        if (gv_defrag_plan(c, &in, &plan, &err) != GV_OK) {
            fprintf(stderr, "plan: %s\n", err.msg);
            return 1;
        }
        double wall = now_s() - t, cs = (double)(clock() - cpu) / CLOCKS_PER_SEC;
        printf("max-moves %2u pending %2zu drains %4u: plan %5.2f s wall %5.2f s cpu (cpu %s 2 s)  "
               "%zu moves  "
               "idle GPUs %u -> %u  pending fit %u -> %u  fragmentation %.1f%% -> %.1f%%  "
               "drains measured %u\n",
               runs[r].moves, runs[r].pending, runs[r].drains, wall, cs,
               cs < 2.0 ? "meets" : "MISSES",
               plan.n_moves, plan.before.idle_gpus, plan.after.idle_gpus,
               plan.before.pending_fit, plan.after.pending_fit, 100 * plan.before.frag.ratio,
               100 * plan.after.frag.ratio, plan.evaluated);
        gv_defrag_plan_free(&plan);
    }
    for (int i = 0; i < 20; i++)
        gv_alloc_request_free(pend[i]);
    for (size_t i = 0; i < n; i++)
        gv_alloc_request_free(reqs[i]);
    free(reqs);
    free(at);
    free(pods);
    gv_alloc_cluster_free(c);
    return 0;
}
