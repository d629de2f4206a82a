/*
 * What-if and preemption victims: which placed pods, once gone, let a
 * request fit on a node, and on which GPUs (docs/alloc.md, "What-if and
 * victims"; the extender's preempt verb, docs/scheduler.md, "Preemption").
 *
 * Pods are hidden by taking their usage off the node's GPUs
 * (alloc_pod_apply) and put back exactly before returning, under the
 * caller's lock like every engine call.  Only usage moves: the node's
 * signature and index entry are not touched, since nothing that reads them
 * runs in between and the usage is restored to the same values.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"

/* Pods on one GPU whose removal sets are searched exactly (by size, so at
 * worst 2^12 sets); a GPU carrying more lower-priority pods is emptied
 * greedily, cheapest pods first. */
#define GPU_EXACT_MAX 12

struct vctx {
    struct gv_alloc_cluster *c;
    struct node *n;
    uint32_t idx;
    struct req_view v;
    bool view;
    const struct gv_alloc_victim *cands;
    size_t nc;
    int32_t prio;
    struct pod **pods; /* per candidate: its placement on this node, or NULL */
    bool *hidden;      /* per candidate: its usage is off the node now */
    void *block;       /* one allocation for pods, hidden and the sets */
};

static void hide(struct vctx *x, size_t i, bool on)
{
    if (x->pods[i] == NULL || x->hidden[i] == on)
        return;
    alloc_pod_apply(x->n, x->pods[i], on ? -1 : +1);
    x->hidden[i] = on;
}

static void restore_all(struct vctx *x)
{
    for (size_t i = 0; i < x->nc; i++)
        hide(x, i, false);
}

/* May candidate i be chosen?  Never a pod of equal or higher priority
 * (unless kube-scheduler evicts it anyway: forced). */
static bool eligible(const struct vctx *x, size_t i)
{
    return x->pods[i] != NULL && (x->cands[i].forced || x->cands[i].priority < x->prio);
}

static bool fits(struct vctx *x, struct pick *p, char *reason, size_t cap)
{
    struct pick scratch;
    return alloc_fit_node(x->c, &x->v, x->idx, p ? p : &scratch, reason, cap);
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct pod *const *)a)[0];
    uintptr_t y = (uintptr_t)((const struct pod *const *)b)[0];
    return x < y ? -1 : x > y;
}

/* Resolves the candidates to their placements on the node; a uid listed
 * twice counts once (hiding it twice would free its GPUs twice). */
static gv_status resolve(struct vctx *x, struct gv_error *err)
{
    bool all_ref = true;
    for (size_t i = 0; i < x->nc; i++) {
        const char *uid = x->cands[i].uid;
        struct pod *p = (struct pod *)(uintptr_t)x->cands[i].ref;
        if (p != NULL && p->uid == uid) {
            x->pods[i] = p->node == x->idx ? p : NULL;
            continue; /* from gv_alloc_node_victims: the placement itself */
        }
        all_ref = false;
        uint32_t slot = uid != NULL ? strmap_get(&x->c->pod_map, uid) : UINT32_MAX;
        p = slot != UINT32_MAX ? x->c->pods[slot] : NULL;
        x->pods[i] = p != NULL && p->node == x->idx ? p : NULL;
    }
    if (all_ref)
        return GV_OK; /* one walk of the node's list: no pod twice */
    /* duplicates: sort (pointer, position) pairs, keep the first */
    struct pair {
        struct pod *p;
        size_t i;
    } *pr = malloc((x->nc ? x->nc : 1) * sizeof(*pr));
    if (pr == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    for (size_t i = 0; i < x->nc; i++)
        pr[i] = (struct pair){x->pods[i], i};
    qsort(pr, x->nc, sizeof(*pr), ptr_cmp);
    for (size_t k = 1; k < x->nc; k++)
        if (pr[k].p != NULL && pr[k].p == pr[k - 1].p) {
            size_t later = pr[k].i > pr[k - 1].i ? pr[k].i : pr[k - 1].i;
            size_t first = pr[k].i > pr[k - 1].i ? pr[k - 1].i : pr[k].i;
            x->pods[later] = NULL;
            pr[k].i = first;
        }
    free(pr);
    return GV_OK;
}

static void plan_reset(struct gv_alloc_victim_plan *pl)
{
    memset(pl, 0, sizeof(*pl));
    pl->max_priority = INT32_MIN;
}

/* The plan of the victim set `in` (per candidate). */
static void plan_of(const struct vctx *x, const uint8_t *in, bool ok,
                    struct gv_alloc_victim_plan *pl)
{
    plan_reset(pl);
    pl->fits = ok;
    for (size_t i = 0; i < x->nc; i++) {
        if (!in[i] || x->pods[i] == NULL)
            continue;
        const struct gv_alloc_victim *cv = &x->cands[i];
        pl->n++;
        pl->pdb_violations += cv->pdb_violation;
        if (cv->priority > pl->max_priority)
            pl->max_priority = cv->priority;
        pl->priority_sum += cv->priority;
        const struct pod *p = x->pods[i];
        for (uint32_t d = 0; d < p->n_devs; d++)
            if (p->devs[d].gpu != UINT32_MAX) {
                pl->milli += p->devs[d].milli;
                pl->mem_mib += p->devs[d].mem;
            }
    }
}

int gv_alloc_victim_plan_cmp(const struct gv_alloc_victim_plan *x,
                             const struct gv_alloc_victim_plan *y)
{
    if (x->fits != y->fits)
        return x->fits ? -1 : 1;
#define CMP(f)                                                                                     \
    if (x->f != y->f)                                                                              \
        return x->f < y->f ? -1 : 1;
    CMP(pdb_violations)
    CMP(n)
    CMP(max_priority)
    CMP(priority_sum)
    CMP(milli)
    CMP(mem_mib)
#undef CMP
    return 0;
}

/* Which candidates should be given back first: kube-scheduler reprieves
 * PDB-violating victims first and the most important first; among equals
 * the smallest share first, so that more pods are spared. */
static const struct vctx *sort_ctx;
static uint64_t share_of(const struct pod *p)
{
    uint64_t s = 0;
    for (uint32_t d = 0; d < p->n_devs; d++)
        s += p->devs[d].milli + p->devs[d].mem / 16;
    return s;
}

static int reprieve_cmp(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    const struct gv_alloc_victim *ci = &sort_ctx->cands[i], *cj = &sort_ctx->cands[j];
    if (ci->pdb_violation != cj->pdb_violation)
        return ci->pdb_violation ? -1 : 1;
    if (ci->priority != cj->priority)
        return ci->priority > cj->priority ? -1 : 1;
    uint64_t si = share_of(sort_ctx->pods[i]), sj = share_of(sort_ctx->pods[j]);
    if (si != sj)
        return si < sj ? -1 : 1;
    return i < j ? -1 : i > j;
}

/*
 * With the victims in `in` hidden (and the forced ones), gives back the
 * non-forced ones in reprieve order while the request still fits; `in`
 * ends as the victims still needed.  Hidden state follows `in`.
 */
static void reprieve(struct vctx *x, uint8_t *in, uint32_t *order)
{
    size_t no = 0;
    for (size_t i = 0; i < x->nc; i++)
        if (in[i] && x->pods[i] != NULL && !x->cands[i].forced)
            order[no++] = (uint32_t)i;
    sort_ctx = x;
    qsort(order, no, sizeof(*order), reprieve_cmp);
    sort_ctx = NULL;
    for (size_t k = 0; k < no; k++) {
        uint32_t i = order[k];
        hide(x, i, false);
        if (fits(x, NULL, NULL, 0)) {
            in[i] = 0;
        } else {
            hide(x, i, true);
        }
    }
}

/* One pod's usage on GPU gi. */
struct on_gpu {
    uint32_t cand;
    uint64_t mem;
    uint32_t milli, tasks, whole;
};

static void on_gpu_of(const struct pod *p, uint32_t gi, struct on_gpu *o)
{
    o->mem = 0;
    o->milli = o->tasks = o->whole = 0;
    for (uint32_t d = 0; d < p->n_devs; d++)
        if (p->devs[d].gpu == gi) {
            o->mem += p->devs[d].mem;
            o->milli += p->devs[d].milli;
            o->tasks++;
            o->whole += p->devs[d].whole;
        }
}

/* Is device d the pod's first on its GPU (two containers can share one)?
 * False for a GPU that vanished. */
static bool first_on_gpu(const struct pod *p, uint32_t d)
{
    uint32_t gi = p->devs[d].gpu;
    if (gi == UINT32_MAX)
        return false;
    for (uint32_t e = 0; e < d; e++)
        if (p->devs[e].gpu == gi)
            return false;
    return true;
}

/* What the request needs of each GPU it gets: the largest device of any
 * container (exact for the usual one-container pod). */
struct gpu_need {
    uint32_t milli;
    bool mutex;
    const struct gv_alloc_request *r;
};

static bool gpu_ok(const struct gpu *g, const struct gpu_load *l, const struct gpu_need *nd)
{
    if (nd->mutex && l->tasks > 0)
        return false;
    for (uint32_t ci = 0; ci < nd->r->n_containers; ci++) {
        const struct gv_alloc_container_req *cr = &nd->r->containers[ci];
        if (!load_can_host(g, l, cr->milli, alloc_gpu_mem_need(g, cr->mem_kind, cr->mem)))
            return false;
    }
    return true;
}

/* The cost of taking the pods in[] (of og) off one GPU. */
static void gpu_set_cost(const struct vctx *x, const struct on_gpu *og, uint32_t m,
                         const uint8_t *in, struct gv_alloc_victim_plan *pl)
{
    plan_reset(pl);
    pl->fits = true;
    for (uint32_t k = 0; k < m; k++) {
        if (!in[k])
            continue;
        const struct gv_alloc_victim *cv = &x->cands[og[k].cand];
        pl->n++;
        pl->pdb_violations += cv->pdb_violation;
        if (cv->priority > pl->max_priority)
            pl->max_priority = cv->priority;
        pl->priority_sum += cv->priority;
        pl->milli += og[k].milli;
        pl->mem_mib += og[k].mem;
    }
}

/* A lower bound on how many of the m pods must leave GPU g before it can
 * host the request: the largest ones first must cover what is missing in
 * memory, compute and task slots.  The exact search starts there. */
static uint32_t min_removals(const struct gpu *g, const struct gpu_load *base,
                             const struct on_gpu *og, uint32_t m, const struct gpu_need *nd)
{
    uint64_t need_mem = 0;
    uint32_t need_milli = 0;
    for (uint32_t ci = 0; ci < nd->r->n_containers; ci++) {
        const struct gv_alloc_container_req *cr = &nd->r->containers[ci];
        uint64_t mem = alloc_gpu_mem_need(g, cr->mem_kind, cr->mem);
        need_mem = mem > need_mem ? mem : need_mem;
        need_milli = cr->milli > need_milli ? cr->milli : need_milli;
    }
    uint64_t free_mem = g->mem_mib > base->mem ? g->mem_mib - base->mem : 0;
    uint32_t free_milli = base->milli < GV_ALLOC_MILLI ? GV_ALLOC_MILLI - base->milli : 0;
    uint64_t miss[3] = {need_mem > free_mem ? need_mem - free_mem : 0,
                        need_milli > free_milli ? need_milli - free_milli : 0,
                        base->tasks + 1u > g->split ? base->tasks + 1u - g->split : 0};
    uint32_t lo = 1;
    for (int dim = 0; dim < 3; dim++) {
        if (miss[dim] == 0)
            continue;
        uint64_t v[GPU_EXACT_MAX];
        for (uint32_t k = 0; k < m; k++)
            v[k] = dim == 0 ? og[k].mem : dim == 1 ? og[k].milli : og[k].tasks;
        /* largest first (m <= GPU_EXACT_MAX: insertion sort) */
        for (uint32_t k = 1; k < m; k++)
            for (uint32_t j = k; j > 0 && v[j - 1] < v[j]; j--) {
                uint64_t t = v[j];
                v[j] = v[j - 1];
                v[j - 1] = t;
            }
        uint64_t sum = 0;
        uint32_t cnt = 0;
        while (cnt < m && sum < miss[dim])
            sum += v[cnt++];
        lo = cnt > lo ? cnt : lo;
    }
    return lo;
}

/* The cheapest set of pods (of the m in og) to take off GPU g so that it
 * can host the request's device: by size, exact up to GPU_EXACT_MAX pods.
 * Returns false when even all of them do not free enough. */
static bool gpu_cheapest(const struct vctx *x, const struct gpu *g, const struct on_gpu *og,
                         uint32_t m, const struct gpu_need *nd, uint8_t *best_in,
                         struct gv_alloc_victim_plan *best)
{
    struct gpu_load base = own_load(g);
    plan_reset(best);
    if (gpu_ok(g, &base, nd)) {
        best->fits = true;
        memset(best_in, 0, m);
        return true;
    }
    struct gpu_load all = base;
    for (uint32_t k = 0; k < m; k++) {
        all.mem -= og[k].mem;
        all.milli -= og[k].milli;
        all.tasks -= og[k].tasks;
        all.whole -= og[k].whole;
    }
    if (!gpu_ok(g, &all, nd))
        return false;
    bool empty = nd->mutex || g->mode == GV_ALLOC_GPU_EXCLUSIVE;
    for (uint32_t ci = 0; ci < nd->r->n_containers; ci++)
        empty = empty || nd->r->containers[ci].milli >= GV_ALLOC_MILLI;
    if (m > GPU_EXACT_MAX || empty) {
        /* The request needs the GPU empty (a whole GPU, mutex): every pod
         * on it goes.  Or the search would be too wide: the greedy below. */
        memset(best_in, 1, m);
        if (!empty) {
            /* too many to search: give back the most important, then the
             * smallest, each one that still leaves room */
            uint32_t ord[GV_ALLOC_MAX_NODE_GPUS * 64];
            uint32_t no = m < sizeof(ord) / sizeof(ord[0]) ? m : (uint32_t)(sizeof(ord) / sizeof(ord[0]));
            for (uint32_t k = 0; k < no; k++) {
                uint32_t j = k;
                const struct gv_alloc_victim *ck = &x->cands[og[k].cand];
                while (j > 0) {
                    const struct gv_alloc_victim *cp = &x->cands[og[ord[j - 1]].cand];
                    bool before = ck->priority > cp->priority ||
                                  (ck->priority == cp->priority && og[k].milli < og[ord[j - 1]].milli);
                    if (!before)
                        break;
                    ord[j] = ord[j - 1];
                    j--;
                }
                ord[j] = k;
            }
            struct gpu_load l = all;
            for (uint32_t q = 0; q < no; q++) {
                uint32_t k = ord[q];
                struct gpu_load t = l;
                t.mem += og[k].mem;
                t.milli += og[k].milli;
                t.tasks += og[k].tasks;
                t.whole += og[k].whole;
                if (gpu_ok(g, &t, nd)) {
                    l = t;
                    best_in[k] = 0;
                }
            }
        }
        gpu_set_cost(x, og, m, best_in, best);
        return true;
    }
    /* Exact: the smallest size with a fitting set, cheapest among them;
     * with PDB-protected pods about, larger sets too (fewer violations
     * come before fewer victims). */
    uint8_t in[GPU_EXACT_MAX];
    bool any_pdb = false, found = false;
    for (uint32_t k = 0; k < m; k++)
        any_pdb = any_pdb || x->cands[og[k].cand].pdb_violation;
    for (uint32_t s = min_removals(g, &base, og, m, nd); s <= m; s++) {
        uint32_t mask = (1u << s) - 1, lim = 1u << m;
        while (mask < lim) {
            struct gpu_load l = base;
            for (uint32_t k = 0; k < m; k++) {
                in[k] = (uint8_t)((mask >> k) & 1u);
                if (in[k]) {
                    l.mem -= og[k].mem;
                    l.milli -= og[k].milli;
                    l.tasks -= og[k].tasks;
                    l.whole -= og[k].whole;
                }
            }
            if (gpu_ok(g, &l, nd)) {
                struct gv_alloc_victim_plan pl;
                gpu_set_cost(x, og, m, in, &pl);
                if (!found || gv_alloc_victim_plan_cmp(&pl, best) < 0) {
                    *best = pl;
                    memcpy(best_in, in, m);
                }
                found = true;
            }
            /* next mask with the same number of bits (Gosper) */
            uint32_t t = mask | (mask - 1);
            mask = (t + 1) | (((~t & -~t) - 1) >> (__builtin_ctz(mask) + 1));
        }
        if (found && (!any_pdb || best->pdb_violations == 0))
            return true;
    }
    return found;
}

struct gpu_choice {
    uint32_t gi;
    struct gv_alloc_victim_plan cost;
    uint32_t first, count; /* its victims in the shared list */
};

static int choice_cmp(const void *a, const void *b)
{
    const struct gpu_choice *x = a, *y = b;
    int r = gv_alloc_victim_plan_cmp(&x->cost, &y->cost);
    return r != 0 ? r : (x->gi < y->gi ? -1 : x->gi > y->gi);
}

/*
 * GPU by GPU: the cheapest set freeing each allowed GPU, then the union of
 * the cheapest GPUs' sets, as many GPUs as the request asks.  in[] gets
 * that union (forced victims not included); false when no such union is
 * found or it does not let the request fit.
 */
static bool plan_by_gpu(struct vctx *x, uint8_t *in, struct gv_error *err, bool *oom)
{
    struct node *n = x->n;
    const struct gv_alloc_request *r = x->v.req;
    uint32_t want = gv_alloc_request_gpus(r);
    if (want == 0 || n->n_gpus == 0)
        return false;
    struct gpu_need nd = {.mutex = r->gpu_mutex, .r = r};
    struct gpu_choice ch[GV_ALLOC_MAX_NODE_GPUS];
    uint32_t nch = 0;
    /* Each eligible pod's usage per GPU, bucketed by GPU in one pass
     * (counting sort): start[gi] .. start[gi + 1] in og. */
    uint32_t start[GV_ALLOC_MAX_NODE_GPUS + 1] = {0};
    size_t total = 0;
    for (size_t i = 0; i < x->nc; i++) {
        if (x->hidden[i] || !eligible(x, i))
            continue;
        const struct pod *p = x->pods[i];
        for (uint32_t d = 0; d < p->n_devs; d++)
            if (first_on_gpu(p, d)) {
                start[p->devs[d].gpu + 1]++;
                total++;
            }
    }
    for (uint32_t gi = 0; gi < n->n_gpus; gi++)
        start[gi + 1] += start[gi];
    /* one block: og, then list, then best_in */
    struct on_gpu *og = malloc((total + 1) * (sizeof(*og) + sizeof(uint32_t)) + x->nc + 1);
    uint32_t *list = og != NULL ? (uint32_t *)(og + total + 1) : NULL;
    uint8_t *best_in = og != NULL ? (uint8_t *)(list + total + 1) : NULL;
    uint32_t fill[GV_ALLOC_MAX_NODE_GPUS];
    uint32_t nlist = 0;
    bool ok = false;
    if (list == NULL || og == NULL || best_in == NULL) {
        gv_error_set(err, GV_ENOMEM, "out of memory");
        *oom = true;
        goto out;
    }
    memcpy(fill, start, sizeof(fill));
    for (size_t i = 0; i < x->nc; i++) {
        if (x->hidden[i] || !eligible(x, i))
            continue;
        const struct pod *p = x->pods[i];
        for (uint32_t d = 0; d < p->n_devs; d++) {
            if (!first_on_gpu(p, d))
                continue;
            uint32_t gi = p->devs[d].gpu;
            struct on_gpu *o = &og[fill[gi]++];
            on_gpu_of(p, gi, o);
            o->cand = (uint32_t)i;
        }
    }
    for (uint32_t gi = 0; gi < n->n_gpus; gi++) {
        const struct gpu *g = &n->gpus[gi];
        if (!g->healthy || !alloc_gpu_allowed(&x->v, g))
            continue;
        const struct on_gpu *og_g = og + start[gi];
        uint32_t m = start[gi + 1] - start[gi];
        struct gv_alloc_victim_plan cost;
        if (!gpu_cheapest(x, g, og_g, m, &nd, best_in, &cost))
            continue;
        ch[nch].gi = gi;
        ch[nch].cost = cost;
        ch[nch].first = nlist;
        for (uint32_t k = 0; k < m; k++)
            if (best_in[k])
                list[nlist++] = og_g[k].cand;
        ch[nch].count = nlist - ch[nch].first;
        nch++;
    }
    if (nch < want)
        goto out;
    qsort(ch, nch, sizeof(ch[0]), choice_cmp);
    memset(in, 0, x->nc);
    for (uint32_t k = 0; k < want; k++)
        for (uint32_t j = 0; j < ch[k].count; j++)
            in[list[ch[k].first + j]] = 1;
    for (size_t i = 0; i < x->nc; i++)
        if (in[i])
            hide(x, i, true);
    ok = fits(x, NULL, NULL, 0);
    for (size_t i = 0; i < x->nc; i++)
        if (in[i] && !x->cands[i].forced)
            hide(x, i, false);
out:
    free(og);
    return ok;
}

gv_status gv_alloc_fit_without(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                               const char *node, const char *const *without, size_t n,
                               struct gv_alloc_assignment *a, struct gv_alloc_fit *fit,
                               struct gv_error *err)
{
    struct gv_alloc_victim *cands = calloc(n ? n : 1, sizeof(*cands));
    uint32_t *chosen = calloc(n ? n : 1, sizeof(*chosen));
    struct gv_alloc_victim_plan plan;
    gv_status st;
    fit->fits = false;
    fit->reason[0] = '\0';
    if (cands == NULL || chosen == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        cands[i] = (struct gv_alloc_victim){.uid = without[i], .forced = true};
    /* every pod forced: nothing is chosen, all are gone */
    st = gv_alloc_victims(c, req, INT32_MIN, node, cands, n, chosen, &plan, a, err);
    if (st == GV_OK || st == GV_ENOTFOUND) {
        fit->fits = st == GV_OK && plan.fits;
        snprintf(fit->reason, sizeof(fit->reason), "%s", plan.reason);
    }
out:
    free(cands);
    free(chosen);
    return st;
}

gv_status gv_alloc_victims(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                           int32_t priority, const char *node, const struct gv_alloc_victim *cands,
                           size_t n, uint32_t *chosen, struct gv_alloc_victim_plan *plan,
                           struct gv_alloc_assignment *a, struct gv_error *err)
{
    plan_reset(plan);
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX) {
        snprintf(plan->reason, sizeof(plan->reason), "node %.200s is not known to gpuvisor", node);
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", node);
    }
    struct vctx x = {.c = c, .n = &c->nodes[idx], .idx = idx, .cands = cands, .nc = n,
                     .prio = priority};
    uint8_t *in_a = NULL, *in_b = NULL, *best = NULL;
    uint32_t *order = NULL;
    gv_status st = alloc_view_init(c, req, &x.v, err);
    if (st != GV_OK)
        return st;
    x.view = true;
    /* one block: pods, order (aligned), then hidden, in_a, in_b */
    x.block = calloc(1, (n + 1) * (sizeof(*x.pods) + sizeof(*order) + 3));
    if (x.block == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    x.pods = x.block;
    order = (uint32_t *)(x.pods + n + 1);
    x.hidden = (bool *)(order + n + 1);
    in_a = (uint8_t *)(x.hidden + n + 1);
    in_b = in_a + n + 1;
    if ((st = resolve(&x, err)) != GV_OK)
        goto out;
    /* Forced victims go whatever we decide. */
    for (size_t i = 0; i < n; i++)
        if (x.pods[i] != NULL && cands[i].forced) {
            hide(&x, i, true);
            in_a[i] = in_b[i] = 1;
        }
    struct gv_alloc_victim_plan pa;
    plan_reset(&pa);
    if (fits(&x, NULL, NULL, 0)) {
        /* Room already (forced victims aside): evict nothing more. */
        best = in_a;
        plan_of(&x, in_a, true, &pa);
        goto chosen;
    }
    /* GPU by GPU first, from the state with only the forced victims gone. */
    bool oom = false;
    bool have_a = plan_by_gpu(&x, in_a, err, &oom);
    if (oom) {
        st = GV_ENOMEM;
        goto out;
    }
    if (have_a) {
        for (size_t i = 0; i < n; i++)
            if (in_a[i])
                hide(&x, i, true);
        reprieve(&x, in_a, order);
        plan_of(&x, in_a, true, &pa);
        for (size_t i = 0; i < n; i++)
            if (in_a[i] && !cands[i].forced)
                hide(&x, i, false);
        best = in_a;
        goto chosen;
    }
    /* Otherwise kube-scheduler's way (NUMA binding, topology, containers
     * sharing GPUs defeat the search above): every eligible pod out; if
     * the request still does not fit, nothing on this node can make room;
     * else give back as many as still fit (a fit per eligible pod, where
     * the search above costs a few; for a one-GPU request it is exact). */
    size_t n_elig = 0;
    for (size_t i = 0; i < n; i++)
        if (eligible(&x, i) && !cands[i].forced) {
            hide(&x, i, true);
            in_b[i] = 1;
            n_elig++;
        }
    if (!fits(&x, NULL, plan->reason, sizeof(plan->reason))) {
        char why[GV_ALLOC_REASON_MAX];
        snprintf(why, sizeof(why), "%s", plan->reason);
        snprintf(plan->reason, sizeof(plan->reason),
                 "no eviction of lower-priority pods makes room (%zu evictable): %.180s", n_elig,
                 why);
        goto out;
    }
    reprieve(&x, in_b, order);
    plan_of(&x, in_b, true, &pa);
    for (size_t i = 0; i < n; i++)
        if (in_b[i] && !cands[i].forced)
            hide(&x, i, false);
    best = in_b;
chosen:
    /* Hide the chosen set, take the GPUs the request gets then. */
    for (size_t i = 0; i < n; i++)
        if (best[i])
            hide(&x, i, true);
    struct pick p;
    if (!fits(&x, &p, plan->reason, sizeof(plan->reason))) {
        /* cannot happen: every set above was checked to fit */
        snprintf(plan->reason, sizeof(plan->reason), "victim search lost its fit (a bug)");
        goto out;
    }
    if (a != NULL)
        alloc_pick_assignment(c, req, idx, &p, a);
    *plan = pa;
    plan->reason[0] = '\0';
    plan->n = 0;
    for (size_t i = 0; i < n; i++)
        if (best[i] && x.pods[i] != NULL)
            chosen[plan->n++] = (uint32_t)i;
out:
    if (x.pods != NULL && x.hidden != NULL)
        restore_all(&x);
    if (x.view)
        alloc_view_fini(&x.v);
    free(x.block);
    return st;
}
