/*
 * Scores shared between state classes within one decision
 * (docs/alloc.md, "Cost of a decision").
 *
 * A state class is keyed by everything a node's fit reads, free memory
 * included.  FGD's score reads less: the GPUs (the fit's GPU choice, the
 * fragmentation profile, the sharing tie) and the node's free CPU only
 * through which of the workload's CPU levels it covers before and after
 * the pod (fgd.c, shape_cpu_weight).  Free memory and the host CPU check
 * are index_may_fit's, done for every class on its own.  On a large
 * cluster free CPU and memory differ on nearly every busy node while the
 * GPU states repeat, so classes that passed index_may_fit and agree on
 *   (GPU states in order, levels covered by free CPU, levels covered by
 *    free CPU minus the pod's CPU)
 * get the same fit and bit for bit the same score: the decision scores
 * the first and copies the result to the others.  In order, because the
 * fit breaks ties between GPUs by index: a class is keyed by the multiset
 * of its GPU states, and is scored on its smallest name's order, so the
 * key is that node's (alloc_node_resign, gsig).  The node still chosen
 * is the one the exhaustive search chooses (tests/alloc/test_alloc_index).
 *
 * Binpack's and spread's scores read the GPUs alone (GPU use after the
 * pod), so under them the key is the GPU states in order; bestfit's reads
 * free CPU exactly and shares nothing.
 *
 * The GPU signature is a 64-bit hash, trusted as the class signature is.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The distinct CPU levels of all shapes, ascending; rebuilt only when a
 * level or a shape was added (weights alone do not move them). */
static bool thresholds(struct gv_alloc_cluster *c)
{
    if (c->thr_valid && c->thr_levels_gen == c->levels_gen &&
        c->thr_shapes_gen == c->shapes_gen)
        return true;
    c->thr_valid = false;
    size_t total = 0;
    for (uint32_t i = 0; i < c->n_shapes; i++)
        total += c->shapes[i].n_levels;
    if (total > c->thr_cap) {
        int64_t *t = realloc(c->thr, total * sizeof(*t));
        if (t == NULL)
            return false;
        c->thr = t;
        c->thr_cap = (uint32_t)total;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < c->n_shapes; i++)
        for (uint32_t j = 0; j < c->shapes[i].n_levels; j++)
            c->thr[n++] = c->shapes[i].levels[j].cpu;
    if (n > 1)
        qsort(c->thr, n, sizeof(*c->thr), cmp_i64);
    uint32_t u = 0;
    for (uint32_t i = 0; i < n; i++)
        if (u == 0 || c->thr[u - 1] != c->thr[i])
            c->thr[u++] = c->thr[i];
    c->n_thr = u;
    c->thr_levels_gen = c->levels_gen;
    c->thr_shapes_gen = c->shapes_gen;
    c->thr_valid = true;
    return true;
}

/* How many levels a node with cpu free CPU covers (cpu >= level). */
static uint32_t covered(const struct gv_alloc_cluster *c, int64_t cpu)
{
    uint32_t lo = 0, hi = c->n_thr;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (c->thr[mid] <= cpu)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool alloc_stamp_table(void **tab, uint32_t *cap, uint32_t *stamp, size_t size, uint32_t entries)
{
    uint32_t want = 64;
    while (want < 2 * entries)
        want *= 2;
    if (*cap < want) {
        void *t = calloc(want, size);
        if (t == NULL)
            return false;
        free(*tab);
        *tab = t;
        *cap = want;
        *stamp = 0;
    }
    if (++*stamp == 0) {
        memset(*tab, 0, *cap * size);
        *stamp = 1;
    }
    return true;
}

bool group_begin(struct gv_alloc_cluster *c)
{
    void *tab = c->grp;
    bool ok = thresholds(c) &&
              alloc_stamp_table(&tab, &c->grp_cap, &c->grp_stamp, sizeof(*c->grp), c->live_cls);
    c->grp = tab;
    c->grp_used = 0;
    return ok;
}

struct group_slot *group_get(struct gv_alloc_cluster *c, const struct sclass *k, uint64_t gsig,
                             bool by_cpu, int64_t cpu, bool *hit)
{
    /* at most one slot per class of the decision: never full */
    if (2 * (c->grp_used + 1) > c->grp_cap)
        return NULL;
    uint32_t before, after;
    if (!by_cpu) {
        before = after = 0; /* binpack, spread: a score of the GPUs alone */
    } else if (k->cpu_free == INT64_MAX) {
        before = after = c->n_thr; /* CPU not checked: every level fits */
    } else {
        before = covered(c, k->cpu_free);
        after = covered(c, k->cpu_free - cpu);
    }
    uint64_t h = gsig ^ ((uint64_t)before * UINT64_C(0x9e3779b97f4a7c15)) ^
                 ((uint64_t)after * UINT64_C(0xc2b2ae3d27d4eb4f));
    h ^= h >> 29;
    uint32_t mask = c->grp_cap - 1;
    for (uint32_t i = (uint32_t)(h & mask);; i = (i + 1) & mask) {
        struct group_slot *g = &c->grp[i];
        if (g->stamp != c->grp_stamp) {
            g->stamp = c->grp_stamp;
            g->gsig = gsig;
            g->before = before;
            g->after = after;
            c->grp_used++;
            *hit = false;
            return g;
        }
        if (g->gsig == gsig && g->before == before && g->after == after) {
            *hit = true;
            return g;
        }
    }
}

void group_free(struct gv_alloc_cluster *c)
{
    free(c->grp);
    free(c->thr);
}
