/*
 * Scoring and node choice.
 *
 * Every policy turns (node, GPUs chosen on it) into one number, higher is
 * better; gv_alloc_pick keeps the best node and breaks exact ties (within a
 * relative 1e-9) by the smallest node name, so the choice never depends on
 * the order nodes were added in.  Nodes in identical states (same
 * signature, see alloc_node_resign) get identical scores, so each distinct
 * state is scored once per call: on a large cluster most empty or full
 * nodes are alike.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"

/* Free GPU share (milli) the placement removes from the node. */
static double share_taken(const struct node *n, const struct pick *p)
{
    struct gpu after[GV_ALLOC_MAX_NODE_GPUS];
    uint8_t idx[GV_ALLOC_MAX_NODE_GPUS];
    uint32_t nch = alloc_pick_apply(n, p, idx, after);
    double d = 0;
    for (uint32_t j = 0; j < nch; j++)
        d += alloc_gpu_free_share(&n->gpus[idx[j]]) - alloc_gpu_free_share(&after[j]);
    return d;
}

static bool same_state(const struct gpu *a, const struct gpu *b)
{
    return a->used_milli == b->used_milli && a->used_mem == b->used_mem &&
           a->tasks == b->tasks && a->whole == b->whole && a->model_id == b->model_id &&
           a->mem_mib == b->mem_mib && a->split == b->split && a->mode == b->mode &&
           a->healthy == b->healthy;
}

/*
 * FGD's GPU choice for a one-container, one-GPU request: try every GPU
 * that can host it (one per distinct GPU state) and keep the smallest
 * fragmentation increase; ties keep the GPU policy's order.
 */
static double fgd_best_single(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t node,
                              struct pick *p)
{
    const struct node *n = &c->nodes[node];
    const struct gv_alloc_container_req *cr = &v->req->containers[0];
    struct fgd_before before;
    before.valid = false;
    double best = fgd_delta_memo(c, node, v->req, p, &before);
    uint8_t tried[GV_ALLOC_MAX_NODE_GPUS];
    uint32_t ntried = 0;
    tried[ntried++] = p->gpu[0];
    struct pick alt = *p;
    for (uint32_t g = 0; g < n->n_gpus; g++) {
        const struct gpu *gp = &n->gpus[g];
        if (!alloc_gpu_allowed(v, gp))
            continue;
        bool dup = false; /* a GPU in the same state gives the same delta */
        for (uint32_t t = 0; t < ntried && !dup; t++)
            dup = same_state(&n->gpus[tried[t]], gp);
        uint64_t need = alloc_gpu_mem_need(gp, cr->mem_kind, cr->mem);
        if (dup || !alloc_gpu_can_host(gp, cr->milli, need))
            continue;
        tried[ntried++] = (uint8_t)g;
        alt.gpu[0] = (uint8_t)g;
        alt.mem[0] = need;
        double d = fgd_delta_memo(c, node, v->req, &alt, &before);
        if (d < best - 1e-9 * fmax(1.0, fabs(best))) {
            best = d;
            p->gpu[0] = (uint8_t)g;
            p->mem[0] = need;
        }
    }
    return best;
}

/*
 * Tie-break of quantised FGD scores for a sharing task (one GPU, under a
 * whole one), in [0, 1): the fewer GPUs no task uses the node keeps after
 * the placement, the higher.  Among placements that fragment alike, a
 * slice goes where it opens no idle GPU another node would have to give
 * up, so idle GPUs (and nodes of them) stay together for whole-GPU and
 * multi-GPU tasks (docs/alloc.md, "Ties").
 */
static double fgd_share_tie(const struct node *n, const struct gv_alloc_request *req,
                            const struct pick *p)
{
    if (req->n_containers != 1 || req->containers[0].num_gpu != 1 ||
        req->containers[0].milli >= GV_ALLOC_MILLI)
        return 0;
    uint32_t idle = 0;
    for (uint32_t g = 0; g < n->n_gpus; g++)
        if (n->gpus[g].healthy && n->gpus[g].tasks == 0 && g != p->gpu[0])
            idle++;
    return (double)(GV_ALLOC_MAX_NODE_GPUS - idle) / (GV_ALLOC_MAX_NODE_GPUS + 1);
}

/* Fits the request on node and scores it; false (with reason) if no fit. */
static bool eval_node(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t node,
                      struct pick *p, double *score, char *reason, size_t cap)
{
    if (!alloc_fit_node(c, v, node, p, reason, cap))
        return false;
    const struct node *n = &c->nodes[node];
    switch (v->policy) {
    case GV_ALLOC_POLICY_BINPACK:
    case GV_ALLOC_POLICY_SPREAD: {
        /* GPU utilisation of the node once the pod is there. */
        double used = n->n_gpus ? 1.0 - (n->free_share - share_taken(n, p)) /
                                            ((double)n->n_gpus * GV_ALLOC_MILLI)
                                : 0.0;
        *score = v->policy == GV_ALLOC_POLICY_BINPACK ? used : -used;
        break;
    }
    case GV_ALLOC_POLICY_BESTFIT: {
        /* Least weighted free resources left (CPU and GPU, half each),
         * normalised by the largest node. */
        double gpu_left = n->free_share - share_taken(n, p);
        double s = c->max_gpus ? 0.5 * gpu_left / ((double)c->max_gpus * GV_ALLOC_MILLI) : 0;
        if (n->cpu_cap > 0 && c->max_cpu > 0)
            s += 0.5 * (double)(n->cpu_cap - n->cpu_used - v->req->cpu_milli) /
                 (double)c->max_cpu;
        *score = -s;
        break;
    }
    case GV_ALLOC_POLICY_FGD:
    default:
        if (v->req->n_containers == 1 && v->req->containers[0].num_gpu == 1)
            *score = -fgd_best_single(c, v, node, p);
        else
            *score = -fgd_delta(c, node, v->req, p);
        /* Quantised: near-equal deltas tie; inside a step a sharing task
         * goes where the fewest idle GPUs stay (fgd_share_tie), the rest
         * to the first node by name (docs/alloc.md, "Ties"). */
        if (c->cfg.fgd_score_step > 0)
            *score = floor(*score / c->cfg.fgd_score_step) + fgd_share_tie(n, v->req, p);
        /* A pod without GPUs only takes CPU and memory: put it where the
         * GPUs are most used (its CPU is worth least to GPU tasks there),
         * nodes without GPUs first; the fragmentation delta breaks ties. */
        if (v->req->n_containers == 0) {
            double used = n->n_gpus ? 1.0 - n->free_share / ((double)n->n_gpus * GV_ALLOC_MILLI)
                                    : 1.0;
            *score = floor(used * 1000.0) + fmax(-999.0, fmin(999.0, *score)) * 1e-4;
        }
        break;
    }
    return true;
}

static double spread_bound(const struct node *n)
{
    return n->n_gpus ? -(1.0 - n->free_share / ((double)n->n_gpus * GV_ALLOC_MILLI)) : 0.0;
}

static bool better(double s, const char *name, double best, const char *best_name)
{
    double tol = 1e-9 * fmax(1.0, fabs(best));
    if (s > best + tol)
        return true;
    if (s < best - tol)
        return false;
    return strcmp(name, best_name) < 0;
}

static gv_status memo_prepare(struct gv_alloc_cluster *c)
{
    void *tab = c->memo;
    bool ok = alloc_stamp_table(&tab, &c->memo_cap, &c->memo_stamp, sizeof(*c->memo),
                                c->live_nodes);
    c->memo = tab;
    return ok ? GV_OK : GV_ENOMEM;
}

static struct memo_slot *memo_slot(struct gv_alloc_cluster *c, uint64_t sig, bool *hit)
{
    uint32_t mask = c->memo_cap - 1;
    for (uint32_t i = (uint32_t)(sig & mask);; i = (i + 1) & mask) {
        struct memo_slot *m = &c->memo[i];
        if (m->stamp != c->memo_stamp) {
            m->stamp = c->memo_stamp;
            m->sig = sig;
            *hit = false;
            return m;
        }
        if (m->sig == sig) {
            *hit = true;
            return m;
        }
    }
}

static bool memo_allowed(const struct gv_alloc_request *req)
{
    /* Signatures ignore uuids, so uuid constraints must see every node. */
    return req->constraint[GV_ALLOC_USE_UUID] == NULL &&
           req->constraint[GV_ALLOC_NOUSE_UUID] == NULL;
}

/* Per-call state of a scoring pass over a candidate list: with a healthy
 * index, a node's state class is its memo slot (no hashing), and a class
 * that cannot fit is known without scoring. */
struct pass {
    bool use_memo, use_cls;
    struct idx_need need;
    uint64_t allowed;
};

/* A fresh pass stamp (score memo, candidate marks); marks of the previous
 * 2^32 passes are cleared when it wraps. */
static uint32_t next_stamp(struct gv_alloc_cluster *c)
{
    if (++c->cls_stamp == 0) {
        for (uint32_t i = 0; i < c->n_cls; i++)
            c->cls[i].memo_stamp = 0;
        for (uint32_t i = 0; i < c->n_nodes; i++)
            c->nodes[i].cand_stamp = 0;
        c->cls_stamp = 1;
    }
    return c->cls_stamp;
}

static void pass_init(struct gv_alloc_cluster *c, const struct req_view *v, struct pass *ps)
{
    memset(ps, 0, sizeof(*ps));
    if (!memo_allowed(v->req))
        return;
    if (!c->index_broken && !c->cfg.exhaustive) {
        ps->use_memo = ps->use_cls = true;
        index_need(v->req, &ps->need);
        for (uint32_t i = 0; i < c->n_models; i++)
            if (v->model_ok[i])
                ps->allowed |= i < 64 ? UINT64_C(1) << i : ~UINT64_C(0);
        next_stamp(c);
        return;
    }
    ps->use_memo = memo_prepare(c) == GV_OK;
}

/* Scores node through the memo; reason only filled on a fresh misfit. */
static bool score_node(struct gv_alloc_cluster *c, const struct req_view *v,
                       const struct pass *ps, uint32_t node, double *score, char *reason,
                       size_t cap)
{
    uint32_t ki = c->nodes[node].cls;
    if (ps->use_cls && ki != UINT32_MAX) {
        struct sclass *k = &c->cls[ki];
        if (k->memo_stamp == c->cls_stamp) {
            *score = k->memo_score;
            if (!k->memo_fits && reason != NULL)
                snprintf(reason, cap, "same state as another node that does not fit");
            return k->memo_fits;
        }
        k->memo_stamp = c->cls_stamp;
        struct pick p;
        bool fits = (reason != NULL || index_may_fit(k, v->req, &ps->need, ps->allowed)) &&
                    eval_node(c, v, node, &p, score, reason, cap);
        k->memo_fits = fits;
        k->memo_score = fits ? *score : 0;
        return fits;
    }
    bool use_memo = ps->use_memo && !ps->use_cls;
    bool hit = false;
    struct memo_slot *m = use_memo ? memo_slot(c, c->nodes[node].sig, &hit) : NULL;
    if (hit) {
        *score = m->score;
        if (!m->fits && reason != NULL)
            snprintf(reason, cap, "same state as another node that does not fit");
        return m->fits;
    }
    struct pick p;
    bool fits = eval_node(c, v, node, &p, score, reason, cap);
    if (m != NULL) {
        m->fits = fits;
        m->score = fits ? *score : 0;
    }
    return fits;
}

/* The smallest-named candidate of a class: a candidate heads its subtree
 * of the name heap, so the walk stops there and at any subtree whose head
 * already loses; with most members named it touches a few entries. */
static uint32_t class_first_candidate(const struct gv_alloc_cluster *c, const struct sclass *k)
{
    if (k->cand_n == k->n)
        return k->heap[0];
    uint32_t stack[128], top = 0, best = UINT32_MAX;
    stack[top++] = 0;
    while (top > 0) {
        uint32_t pos = stack[--top], idx = k->heap[pos];
        if (best != UINT32_MAX && strcmp(c->nodes[idx].name, c->nodes[best].name) >= 0)
            continue;
        if (c->nodes[idx].cand_stamp == c->cls_stamp) {
            best = idx;
            continue;
        }
        for (uint32_t ch = 2 * pos + 1; ch <= 2 * pos + 2 && ch < k->n; ch++) {
            if (top == sizeof(stack) / sizeof(stack[0])) {
                /* deeper than any heap of 2^32 nodes needs; scan instead */
                for (uint32_t i = 0; i < k->n; i++) {
                    uint32_t x = k->heap[i];
                    if (c->nodes[x].cand_stamp == c->cls_stamp &&
                        (best == UINT32_MAX || strcmp(c->nodes[x].name, c->nodes[best].name) < 0))
                        best = x;
                }
                return best;
            }
            stack[top++] = ch;
        }
    }
    return best;
}

/*
 * Scores one state class that may fit, on its smallest (candidate) name idx,
 * and keeps it if it beats *best.  SCORED when it fits and was evaluated
 * (what a score budget counts), SHARED when it fits and took another
 * class's evaluation, 0 when it does not fit.  Same result as the
 * exhaustive loop below.
 */
enum { SCORED = 1, SHARED = 2 };

static int score_class(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t ki,
                        uint32_t idx, bool cpu_only_fgd, bool group, uint32_t *best,
                        double *best_score)
{
    const struct sclass *k = &c->cls[ki];
    if (v->policy == GV_ALLOC_POLICY_SPREAD && *best != UINT32_MAX &&
        spread_bound(&c->nodes[idx]) < *best_score - 1e-9 * fmax(1.0, fabs(*best_score)))
        return 0;
    if (cpu_only_fgd && *best != UINT32_MAX &&
        /* a node scoring its bound, named so, could not win either */
        !better(k->used_pm + 999.0 * 1e-4, c->nodes[idx].name, *best_score,
                c->nodes[*best].name))
        return 0;
    struct pick p;
    double sc;
    int how = SCORED;
    if (cpu_only_fgd && c->nodes[idx].free_share == 0.0) {
        /* No free GPU share (or no GPUs): every fragment is 0 before and
         * after, so the score is exactly 1000 (eval_node) and only the
         * name can decide; the CPU and memory checks of the fit are
         * index_may_fit's.  On a large cluster most nodes such a pod goes
         * to are of this kind, each in a state of its own. */
        sc = 1000.0;
        how = SHARED; /* nothing evaluated */
    } else {
        /* Classes that differ only where the score does not look share
         * one evaluation (score_group.c). */
        bool hit = false;
        struct group_slot *g =
            group ? group_get(c, k, c->nodes[idx].gsig, v->policy == GV_ALLOC_POLICY_FGD,
                              v->req->cpu_milli, &hit)
                  : NULL;
        if (hit) {
            if (!g->fits)
                return 0;
            sc = g->score;
            how = SHARED;
        } else {
            bool fits = eval_node(c, v, idx, &p, &sc, NULL, 0);
            if (g != NULL) {
                g->fits = fits;
                g->score = fits ? sc : 0;
            }
            if (!fits)
                return 0;
        }
    }
    if (*best == UINT32_MAX || better(sc, c->nodes[idx].name, *best_score, c->nodes[*best].name)) {
        *best = idx;
        *best_score = sc;
    }
    return how;
}

/* The class's node a search looks at: its smallest name, or its smallest
 * candidate's; UINT32_MAX when the class cannot take the request (no
 * candidate in it, or index_may_fit says no). */
static uint32_t class_head(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t ki,
                           const struct idx_need *need, uint64_t allowed)
{
    const struct sclass *k = &c->cls[ki];
    if (c->cand_pass && k->memo_stamp != c->cls_stamp)
        return UINT32_MAX; /* no candidate in this class */
    if (!index_may_fit(k, v->req, need, allowed))
        return UINT32_MAX;
    return c->cand_pass ? class_first_candidate(c, k) : k->heap[0];
}

/*
 * The indexed search over all nodes: each state class that may fit is
 * scored once, on its smallest name (docs/alloc.md, "Cost of a decision").
 * Same result as the exhaustive loop below; *best stays UINT32_MAX when
 * nothing fits.
 */
static void visit_class(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t ki,
                        const struct idx_need *need, uint64_t allowed, bool cpu_only_fgd,
                        bool group, uint32_t *best, double *best_score)
{
    uint32_t idx = class_head(c, v, ki, need, allowed);
    if (idx != UINT32_MAX)
        score_class(c, v, ki, idx, cpu_only_fgd, group, best, best_score);
}

/*
 * Score budget (docs/alloc.md, "Score budget"): on a search over more than
 * cfg.score_all_nodes nodes, fgd evaluates classes in the index's order
 * until cfg.score_budget evaluations fit; after that, only classes of a
 * GPU-model set with fewer than a quarter of the budget.  Exact FGD scores
 * every distinct state that fits, and on a large cluster those grow with
 * the cluster; the budget keeps a decision's work flat.  The per-model
 * quarter keeps every model in the running: the supply factor's choice
 * between models is what typed workloads depend on.  A class that takes
 * another's evaluation (score_group.c) or whose score is known without one
 * costs nothing and is not counted.
 *
 * What is scored must not depend on the order classes were created in (a
 * decision never depends on the order nodes were added in; replicas
 * agree).  The lists are walked in the index's order (buckets, CPU bands,
 * or GPU-use levels), which depends on states only; a list the budget may
 * cut is scored fullest first (budget_item_cmp).  In a list scored whole
 * the order changes nothing: its evaluations are its distinct score keys.
 */
#define BUDGET_GROUPS 64

struct budget {
    uint32_t left;  /* fitting evaluations still to make before the floors */
    uint32_t floor; /* fitting evaluations every model set gets */
    uint32_t n_grp;
    uint64_t grp_mask[BUDGET_GROUPS];
    uint32_t grp_fit[BUDGET_GROUPS];
};

static bool budget_init(const struct gv_alloc_cluster *c, const struct req_view *v,
                        uint64_t searched, struct budget *b)
{
    if (v->policy != GV_ALLOC_POLICY_FGD || c->cfg.score_all_nodes == 0 ||
        c->cfg.score_budget == 0 || searched <= c->cfg.score_all_nodes)
        return false;
    b->n_grp = 0; /* the slots are set as groups appear (budget_group) */
    b->left = c->cfg.score_budget;
    b->floor = b->left / 4 ? b->left / 4 : 1;
    return true;
}

/* The slot of a class's model set; past BUDGET_GROUPS sets the last slot
 * is shared (those sets then share one floor, and which share it depends
 * on the walk: clusters with over 64 model sets are not known). */
static uint32_t budget_group(struct budget *b, uint64_t mask)
{
    for (uint32_t i = 0; i < b->n_grp; i++)
        if (b->grp_mask[i] == mask)
            return i;
    if (b->n_grp == BUDGET_GROUPS)
        return BUDGET_GROUPS - 1;
    b->grp_mask[b->n_grp] = mask;
    b->grp_fit[b->n_grp] = 0;
    return b->n_grp++;
}

static bool budget_allows(const struct budget *b, uint32_t grp)
{
    return b->left > 0 || b->grp_fit[grp] < b->floor;
}

static void budget_count(struct budget *b, uint32_t grp)
{
    if (b->left > 0)
        b->left--;
    b->grp_fit[grp]++;
}

struct budget_item {
    const char *name;
    uint32_t used_pm;
    int64_t cpu_free;
    uint32_t ki, idx, grp;
};

/* Fullest first, as the buckets go: GPU share in use (more first), free
 * CPU (less first), then the name, which is unique. */
static int budget_item_cmp(const void *a, const void *b)
{
    const struct budget_item *x = a, *y = b;
    if (x->used_pm != y->used_pm)
        return x->used_pm > y->used_pm ? -1 : 1;
    if (x->cpu_free != y->cpu_free)
        return x->cpu_free < y->cpu_free ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Whether scoring the list's n classes could run into the budget, so that
 * which of them are scored would depend on their order: only such a list
 * is sorted (most lists fit in what is left, or in their models' floor). */
static bool budget_may_cut(const struct budget *b, const struct budget_item *it, uint32_t n)
{
    if (n <= b->left)
        return false;
    if (b->left > 0)
        return true;
    uint32_t in_list[BUDGET_GROUPS];
    memset(in_list, 0, b->n_grp * sizeof(in_list[0]));
    for (uint32_t i = 0; i < n; i++)
        if (++in_list[it[i].grp] > b->floor - b->grp_fit[it[i].grp])
            return true;
    return false;
}

/* One list of the index (a bucket's or level's CPU band) under a budget. */
static void visit_list_budget(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t head,
                              bool pm_list, const struct idx_need *need, uint64_t allowed,
                              bool cpu_only_fgd, bool group, struct budget *b, uint32_t *best,
                              double *best_score)
{
    uint32_t n = 0;
    for (uint32_t ki = head; ki != UINT32_MAX;
         ki = pm_list ? c->cls[ki].pm_next : c->cls[ki].next) {
        uint32_t idx = class_head(c, v, ki, need, allowed);
        if (idx == UINT32_MAX)
            continue;
        uint32_t grp = budget_group(b, c->cls[ki].model_mask);
        if (!budget_allows(b, grp))
            continue; /* cut whatever the order */
        if (n == c->bud_cap) {
            uint32_t cap = c->bud_cap ? 2 * c->bud_cap : 64;
            struct budget_item *t = realloc(c->bud, cap * sizeof(*t));
            if (t == NULL) {
                /* out of memory: score this list whole, as exact FGD would */
                for (uint32_t i = 0; i < n; i++)
                    if (score_class(c, v, c->bud[i].ki, c->bud[i].idx, cpu_only_fgd, group, best,
                                    best_score) == SCORED)
                        budget_count(b, c->bud[i].grp);
                for (; ki != UINT32_MAX; ki = pm_list ? c->cls[ki].pm_next : c->cls[ki].next) {
                    uint32_t x = class_head(c, v, ki, need, allowed);
                    if (x != UINT32_MAX &&
                        score_class(c, v, ki, x, cpu_only_fgd, group, best, best_score) == SCORED)
                        budget_count(b, budget_group(b, c->cls[ki].model_mask));
                }
                return;
            }
            c->bud = t;
            c->bud_cap = cap;
        }
        const struct sclass *k = &c->cls[ki];
        c->bud[n++] = (struct budget_item){c->nodes[idx].name, k->used_pm, k->cpu_free, ki, idx,
                                           grp};
    }
    if (n > 1 && budget_may_cut(b, c->bud, n))
        qsort(c->bud, n, sizeof(*c->bud), budget_item_cmp);
    for (uint32_t i = 0; i < n; i++) {
        const struct budget_item *it = &c->bud[i];
        if (budget_allows(b, it->grp) &&
            score_class(c, v, it->ki, it->idx, cpu_only_fgd, group, best, best_score) == SCORED)
            budget_count(b, it->grp);
    }
}

static void pick_indexed(struct gv_alloc_cluster *c, const struct req_view *v, uint64_t searched,
                         uint32_t *best, double *best_score)
{
    struct idx_need need;
    index_need(v->req, &need);
    uint64_t allowed = 0;
    for (uint32_t i = 0; i < c->n_models; i++)
        if (v->model_ok[i])
            allowed |= i < 64 ? UINT64_C(1) << i : ~UINT64_C(0);
    uint32_t fmin;
    uint32_t wmin = index_first_bucket(&need, &fmin);
    bool cpu_only_fgd = v->policy == GV_ALLOC_POLICY_FGD && v->req->n_containers == 0;
    struct budget bud;
    bool budget = budget_init(c, v, searched, &bud);
    /* Bands below the request's cannot serve its CPU (index_cpu_band). */
    uint32_t bands = ~UINT32_C(0) << index_cpu_band(v->req->cpu_milli);
    if (cpu_only_fgd) {
        bool group = group_begin(c);
        /* Fullest GPUs first: once a level's best possible score loses,
         * every emptier level does too. */
        for (int pm = 1000; pm >= 0; pm--) {
            if (*best != UINT32_MAX && pm + 999.0 * 1e-4 < *best_score - 1e-9 * fmax(1.0, fabs(*best_score)))
                break;
            for (uint32_t m = c->pm_bands[pm] & bands; m != 0; m &= m - 1) {
                uint32_t head =
                    c->pm_head[(uint32_t)pm * IDX_CPU_BANDS + (uint32_t)__builtin_ctz(m)];
                if (budget) {
                    visit_list_budget(c, v, head, true, &need, allowed, true, group, &bud, best,
                                      best_score);
                    continue;
                }
                for (uint32_t ki = head; ki != UINT32_MAX; ki = c->cls[ki].pm_next)
                    visit_class(c, v, ki, &need, allowed, true, group, best, best_score);
            }
        }
        return;
    }
    /* Spread's bound prunes once a good (empty) node is found: emptiest
     * buckets first; the others fullest first.  The order changes nothing
     * but the work (ties go by name). */
    bool rev = v->policy == GV_ALLOC_POLICY_SPREAD;
    bool group = v->policy != GV_ALLOC_POLICY_BESTFIT && group_begin(c);
    for (uint32_t wi = wmin; wi <= IDX_WHOLE_MAX; wi++) {
        uint32_t w = rev ? IDX_WHOLE_MAX - (wi - wmin) : wi;
        for (uint32_t fi = fmin; fi < IDX_FRAC_BUCKETS; fi++) {
            uint32_t f = rev ? IDX_FRAC_BUCKETS - 1 - (fi - fmin) : fi;
            uint32_t b = w * IDX_FRAC_BUCKETS + f;
            for (uint32_t m = c->bucket_bands[b] & bands; m != 0; m &= m - 1) {
                uint32_t head = c->bucket_head[b * IDX_CPU_BANDS + (uint32_t)__builtin_ctz(m)];
                if (budget) {
                    visit_list_budget(c, v, head, false, &need, allowed, false, group, &bud, best,
                                      best_score);
                    continue;
                }
                for (uint32_t ki = head; ki != UINT32_MAX; ki = c->cls[ki].next)
                    visit_class(c, v, ki, &need, allowed, false, group, best, best_score);
            }
        }
    }
}

/* The chosen node's GPUs into out; ends the view. */
static gv_status pick_done(struct gv_alloc_cluster *c, struct req_view *v, uint32_t best,
                           struct gv_alloc_assignment *out)
{
    struct pick p;
    double s;
    eval_node(c, v, best, &p, &s, NULL, 0);
    alloc_pick_assignment(c, v->req, best, &p, out);
    alloc_view_fini(v);
    return GV_OK;
}

/* Stamps the named nodes and counts them per state class, for the indexed
 * search to look only at them (O(names) lookups, no scoring); *distinct: the
 * known nodes named, each once (what a score budget's threshold counts).
 * False when a named node has no class (the caller scores the list instead). */
static bool mark_candidates(struct gv_alloc_cluster *c, const char *const *nodes, size_t n,
                            uint64_t *distinct)
{
    *distinct = 0;
    uint32_t stamp = next_stamp(c);
    uint32_t *at = malloc((n ? n : 1) * sizeof(*at));
    if (at == NULL)
        return false;
    strmap_get_many(&c->node_map, nodes, n, at);
    for (size_t i = 0; i < n; i++) {
        if (i + 8 < n && at[i + 8] != UINT32_MAX)
            __builtin_prefetch(&c->nodes[at[i + 8]].cand_stamp);
        uint32_t idx = at[i];
        if (idx == UINT32_MAX || c->nodes[idx].cand_stamp == stamp)
            continue;
        c->nodes[idx].cand_stamp = stamp;
        (*distinct)++;
        uint32_t ki = c->nodes[idx].cls;
        if (ki == UINT32_MAX) {
            free(at);
            return false;
        }
        struct sclass *k = &c->cls[ki];
        if (k->memo_stamp != stamp) {
            k->memo_stamp = stamp;
            k->cand_n = 0;
        }
        k->cand_n++;
    }
    free(at);
    return true;
}

gv_status gv_alloc_pick(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                        const char *const *nodes, size_t n, struct gv_alloc_assignment *out,
                        struct gv_error *err)
{
    struct req_view v;
    gv_status rc = alloc_view_init(c, req, &v, err);
    if (rc != GV_OK)
        return rc;
    if (nodes == NULL && memo_allowed(req) && !c->cfg.exhaustive && !c->index_broken) {
        uint32_t best = UINT32_MAX;
        double best_score = 0;
        pick_indexed(c, &v, c->live_nodes, &best, &best_score);
        if (best != UINT32_MAX)
            return pick_done(c, &v, best, out);
        /* Nothing fits: the exhaustive loop would report the first live
         * node (none fits, so the first is the first misfit) and its
         * reason; say the same without visiting the rest. */
        uint32_t first = 0;
        while (first < c->n_nodes && c->nodes[first].name == NULL)
            first++;
        if (first < c->n_nodes) {
            char why[GV_ALLOC_REASON_MAX] = "";
            struct pick p;
            if (!alloc_fit_node(c, &v, first, &p, why, sizeof(why))) {
                rc = gv_error_set(err, GV_ENOFIT, "0/%u nodes fit; %.200s: %s", c->live_nodes,
                                  c->nodes[first].name, why);
                alloc_view_fini(&v);
                return rc;
            }
        }
        /* the first node fits after all (index out of step): score all */
    }
    /* The index pays off where nodes share states; where nearly every node
     * is in a state of its own it would visit as many classes as the list
     * has names, in a worse memory order than the list loop below. */
    uint64_t named = 0;
    if (nodes != NULL && memo_allowed(req) && !c->cfg.exhaustive && !c->index_broken &&
        (uint64_t)c->live_cls * 2 <= c->live_nodes && mark_candidates(c, nodes, n, &named)) {
        uint32_t best = UINT32_MAX;
        double best_score = 0;
        c->cand_pass = true;
        pick_indexed(c, &v, named, &best, &best_score);
        c->cand_pass = false;
        if (best != UINT32_MAX)
            return pick_done(c, &v, best, out);
        /* nothing fits: the loop below says why, as it always did */
    }
    struct pass ps;
    pass_init(c, &v, &ps);
    size_t total = nodes != NULL ? n : c->n_nodes;
    uint32_t best = UINT32_MAX, tried = 0, unknown = 0;
    double best_score = 0;
    char first_reason[GV_ALLOC_REASON_MAX] = "";
    const char *first_name = NULL;
    for (size_t i = 0; i < total; i++) {
        uint32_t idx;
        if (nodes != NULL) {
            idx = strmap_get(&c->node_map, nodes[i]);
            if (idx == UINT32_MAX) {
                unknown++;
                continue;
            }
        } else {
            idx = (uint32_t)i;
            if (c->nodes[idx].name == NULL)
                continue;
        }
        tried++;
        /* spread: taking GPUs only lowers a node's score, so a node whose
         * current utilisation already loses to the best cannot win */
        if (v.policy == GV_ALLOC_POLICY_SPREAD && best != UINT32_MAX &&
            spread_bound(&c->nodes[idx]) < best_score - 1e-9 * fmax(1.0, fabs(best_score)))
            continue;
        double s;
        bool need_reason = first_name == NULL;
        if (score_node(c, &v, &ps, idx, &s, need_reason ? first_reason : NULL,
                       sizeof(first_reason))) {
            if (best == UINT32_MAX || better(s, c->nodes[idx].name, best_score,
                                             c->nodes[best].name)) {
                best = idx;
                best_score = s;
            }
        } else if (need_reason) {
            first_name = c->nodes[idx].name;
        }
    }
    if (best == UINT32_MAX) {
        if (tried == 0)
            rc = gv_error_set(err, GV_ENOFIT, "no GPU node known to gpuvisor%s",
                              unknown ? " among the candidates" : "");
        else
            rc = gv_error_set(err, GV_ENOFIT, "0/%u nodes fit; %.200s: %s", tried, first_name,
                              first_reason);
        alloc_view_fini(&v);
        return rc;
    }
    return pick_done(c, &v, best, out);
}

gv_status gv_alloc_score_nodes(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                               const char *const *nodes, size_t n, int32_t *scores,
                               struct gv_error *err)
{
    struct req_view v;
    gv_status rc = alloc_view_init(c, req, &v, err);
    if (rc != GV_OK)
        return rc;
    double *raw = calloc(n ? n : 1, sizeof(*raw));
    if (raw == NULL) {
        alloc_view_fini(&v);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    struct pass ps;
    pass_init(c, &v, &ps);
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        uint32_t idx = strmap_get(&c->node_map, nodes[i]);
        scores[i] = -1;
        if (idx == UINT32_MAX || !score_node(c, &v, &ps, idx, &raw[i], NULL, 0))
            continue;
        scores[i] = 0;
        lo = fmin(lo, raw[i]);
        hi = fmax(hi, raw[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (scores[i] < 0)
            continue;
        double x = hi - lo > 1e-12 ? (raw[i] - lo) / (hi - lo) : 1.0;
        scores[i] = (int32_t)lround(x * 100.0);
    }
    free(raw);
    alloc_view_fini(&v);
    return GV_OK;
}
