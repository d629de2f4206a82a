/*
 * Priorities and preemption in the replay (docs/simulate.md, "Priorities
 * and preemption"): a synthetic high-priority share of the pods, and the
 * scheduler's preempt verb applied to a pod that does not fit — the same
 * engine search (gv_alloc_victims) over a sample of nodes as kube-scheduler
 * samples its candidates, the cheapest node's victims evicted, the pod
 * placed on the GPUs the search promised.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

#define HIGH_PRIORITY 1000

static uint64_t mix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

gv_status gv_sim_set_high_priority(struct gv_sim_trace *t, double pct, struct gv_error *err)
{
    if (!(pct >= 0 && pct <= 100))
        return gv_error_set(err, GV_EINVAL, "high-priority share %.3g outside [0, 100]", pct);
    free(t->prio);
    t->prio = NULL;
    t->n_prio = 0;
    if (pct == 0)
        return GV_OK;
    if ((t->prio = calloc(t->n_pods ? t->n_pods : 1, sizeof(*t->prio))) == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    t->n_prio = t->n_pods;
    uint64_t cut = (uint64_t)(pct * 100.0 + 0.5); /* of 10,000 */
    for (size_t i = 0; i < t->n_pods; i++)
        t->prio[i] = mix(i) % 10000 < cut ? HIGH_PRIORITY : 0;
    return GV_OK;
}

gv_status sim_set_priority(struct gv_sim_trace *t, size_t i, int32_t prio, struct gv_error *err)
{
    if (i >= t->n_prio) {
        size_t n = t->n_pods > i ? t->n_pods : i + 1;
        int32_t *pr = realloc(t->prio, n * sizeof(*pr));
        if (pr == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        memset(pr + t->n_prio, 0, (n - t->n_prio) * sizeof(*pr));
        t->prio = pr;
        t->n_prio = n;
    }
    t->prio[i] = prio;
    return GV_OK;
}

bool sim_preempt(struct gv_alloc_cluster *c, struct gv_alloc_request *r, int32_t prio,
                 char *const *names, size_t n_nodes, uint64_t k, struct gv_alloc_assignment *a,
                 void (*evicted)(void *ud, const char *uid), void *ud)
{
    if (n_nodes == 0)
        return false;
    /* kube-scheduler's sample: 10 % of the nodes, at least 100, from an
     * offset that moves with each attempt */
    size_t want = n_nodes / 10 > 100 ? n_nodes / 10 : 100;
    want = want < n_nodes ? want : n_nodes;
    size_t cap = 256;
    struct gv_alloc_victim *cands = malloc(cap * sizeof(*cands));
    uint32_t *chosen = malloc(cap * sizeof(*chosen));
    char **best_uids = NULL;
    size_t best_n = 0, best_node = SIZE_MAX;
    struct gv_alloc_victim_plan best = {.fits = false}, plan;
    struct gv_alloc_assignment *trial = malloc(sizeof(*trial));
    bool placed = false;
    if (cands == NULL || chosen == NULL || trial == NULL)
        goto out;
    for (size_t j = 0; j < want; j++) {
        size_t ni = (size_t)((k + j) % n_nodes);
        size_t n = gv_alloc_node_victims(c, names[ni], cands, cap);
        if (n > cap) {
            struct gv_alloc_victim *nc = realloc(cands, n * sizeof(*cands));
            uint32_t *nch = nc ? realloc(chosen, n * sizeof(*chosen)) : NULL;
            if (nc != NULL)
                cands = nc;
            if (nch == NULL)
                goto out;
            chosen = nch;
            cap = n;
            n = gv_alloc_node_victims(c, names[ni], cands, cap);
        }
        if (gv_alloc_victims(c, r, prio, names[ni], cands, n, chosen, &plan, trial, NULL) !=
                GV_OK ||
            !plan.fits || (best.fits && gv_alloc_victim_plan_cmp(&plan, &best) >= 0))
            continue;
        /* the engine's uids are valid until the cluster changes: copy */
        for (size_t v = 0; v < best_n; v++)
            free(best_uids[v]);
        free(best_uids);
        best_uids = calloc(plan.n + 1, sizeof(*best_uids));
        best_n = 0;
        if (best_uids == NULL)
            goto out;
        for (uint32_t v = 0; v < plan.n; v++)
            if ((best_uids[best_n++] = strdup(cands[chosen[v]].uid)) == NULL)
                goto out;
        best = plan;
        best_node = ni;
        *a = *trial;
    }
    if (best_node == SIZE_MAX)
        goto out;
    for (size_t v = 0; v < best_n; v++)
        if (gv_alloc_release(c, best_uids[v], NULL) == GV_OK)
            evicted(ud, best_uids[v]);
    placed = gv_alloc_place(c, r, a, NULL) == GV_OK;
out:
    for (size_t v = 0; v < best_n; v++)
        free(best_uids[v]);
    free(best_uids);
    free(cands);
    free(chosen);
    free(trial);
    return placed;
}
