/*
 * Defragmentation planner (gv_defrag.h, docs/alloc.md "Defragmentation").
 *
 * The unit of work is a drain: every pod holding one GPU (or, when pods are
 * pending, every GPU pod of one node) is evicted and re-placed where
 * gv_alloc_pick then puts it.  A GPU becomes whole again only when all its
 * pods leave, so single pod moves are the wrong unit: moving one of two
 * pods off a GPU frees nothing, and a greedy search over single moves never
 * sees the second one coming.
 *
 * Value of a state: pending pods that fit (placed in order) first, idle
 * GPUs second, as one number (pending × (GPUs + 1) + idle).  The search is
 * the greedy rule for a budget: take the drain with the largest gain per
 * move, re-measured on the state the earlier drains left; repeat while a
 * drain gains and the move budget allows.  Gains are re-measured lazily
 * (the drain whose last measured ratio is highest is measured again, and
 * taken when it still beats every other drain's last figure), which is
 * exact as long as a drain's gain does not grow because of other drains;
 * a drain measured at zero gain is not measured again.  Ratio greedy can
 * lose to one expensive drain that fits the budget alone, so the best
 * single drain of the first round is kept as the alternative and wins when
 * it gains more (the classic fix for budgeted greedy).  Tests compare the
 * plans with exhaustive search on small clusters (tests/alloc/test_defrag.c).
 *
 * Every trial is undone by releasing the re-placed pods and placing them
 * back at their recorded assignments, newest first, so the engine's state
 * (usage, signatures, index) is restored exactly.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "alloc/gv_defrag.h"

/* One drain: the pods on one GPU of a node, or every GPU pod of the node. */
struct cand {
    uint32_t node;
    uint32_t gpu;   /* UINT32_MAX: the whole node */
    double ratio;   /* last measured gain per move; <= 0: dropped */
    uint64_t key;   /* cheapness: pods x 1000 + GPU share used */
    double gain;
    uint32_t moves;
};

struct step {
    size_t pod;
    struct gv_alloc_assignment from, to;
    /* the pod's marks where it was (gv_alloc_pod_set_victim): a release
     * drops them with the pod, so a trial's undo puts them back too */
    int32_t priority;
    bool victim;
};

struct planner {
    struct gv_alloc_cluster *c;
    const struct gv_defrag_input *in;
    struct strmap uid_map; /* uid -> index into in->pods */
    bool *moved;
    uint32_t *group_used;
    struct step *steps; /* applied + trial moves, a stack */
    size_t n_steps, cap_steps;
    uint32_t idle;      /* idle GPUs of the current state */
    uint32_t total_gpus;
    /* every pending pod fits already: no drain can make one fit, so they
     * are only checked (a drain must not take their room) when a drain
     * frees GPUs, and node drains are not measured */
    bool all_fit;
    uint32_t fit0;
    size_t *buf;        /* pods of the drain being measured */
    size_t buf_cap;
};

static const char *pod_key(const void *ctx, uint32_t v)
{
    const struct gv_defrag_input *in = ctx;
    return in->pods[v].req->uid;
}

static uint32_t node_idle(const struct node *n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n->n_gpus; i++)
        k += n->gpus[i].healthy && n->gpus[i].tasks == 0;
    return k;
}

static uint32_t pod_node(const struct gv_alloc_cluster *c, const char *uid)
{
    uint32_t slot = strmap_get(&c->pod_map, uid);
    return slot == UINT32_MAX ? UINT32_MAX : c->pods[slot]->node;
}

/* Release / place with the idle count kept up to date. */
static gv_status tracked_release(struct planner *p, const char *uid, struct gv_error *err)
{
    uint32_t ni = pod_node(p->c, uid);
    if (ni == UINT32_MAX)
        return gv_error_set(err, GV_EINVAL, "pod %s: not placed", uid);
    uint32_t before = node_idle(&p->c->nodes[ni]);
    gv_status st = gv_alloc_release(p->c, uid, err);
    if (st == GV_OK)
        p->idle += node_idle(&p->c->nodes[ni]) - before;
    return st;
}

static gv_status tracked_place(struct planner *p, const struct gv_alloc_request *req,
                               const struct gv_alloc_assignment *a, struct gv_error *err)
{
    uint32_t ni = strmap_get(&p->c->node_map, a->node);
    if (ni == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", a->node);
    uint32_t before = node_idle(&p->c->nodes[ni]);
    gv_status st = gv_alloc_place(p->c, req, a, err);
    if (st == GV_OK)
        p->idle = p->idle - before + node_idle(&p->c->nodes[ni]);
    return st;
}

/* Pending pods that fit on the current state, placed in order, then undone. */
static uint32_t pending_fit(struct gv_alloc_cluster *c, const struct gv_alloc_request *const *pend,
                            size_t n, struct gv_error *err)
{
    uint32_t fit = 0;
    bool *placed = n > 0 ? calloc(n, sizeof(*placed)) : NULL;
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    if ((n > 0 && placed == NULL) || a == NULL) {
        free(placed);
        free(a);
        gv_error_set(err, GV_ENOMEM, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (gv_alloc_pick(c, pend[i], NULL, 0, a, NULL) == GV_OK &&
            gv_alloc_place(c, pend[i], a, NULL) == GV_OK) {
            placed[i] = true;
            fit++;
        }
    }
    for (size_t i = n; i-- > 0;)
        if (placed[i])
            gv_alloc_release(c, pend[i]->uid, NULL);
    free(placed);
    free(a);
    return fit;
}

static double value(const struct planner *p, uint32_t idle, uint32_t fit)
{
    return (double)fit * (double)(p->total_gpus + 1) + (double)idle;
}

static gv_status push_step(struct planner *p, size_t pod, struct gv_error *err)
{
    if (p->n_steps == p->cap_steps) {
        size_t ncap = p->cap_steps ? p->cap_steps * 2 : 16;
        struct step *ns = realloc(p->steps, ncap * sizeof(*ns));
        if (ns == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        p->steps = ns;
        p->cap_steps = ncap;
    }
    p->steps[p->n_steps++].pod = pod;
    return GV_OK;
}

/* Back where step s took it from, with the marks it had there.  Without
 * the marks a plan left every pod it tried to move unable to be preempted
 * (the churn replay's victims check found half of them gone). */
static void put_back(struct planner *p, const struct step *s)
{
    const struct gv_defrag_pod *dp = &p->in->pods[s->pod];
    if (tracked_place(p, dp->req, &s->from, NULL) == GV_OK)
        gv_alloc_pod_set_victim(p->c, dp->req->uid, s->victim ? s->from.node : NULL, s->priority,
                                NULL);
}

/* Moves pod i: release, ask the engine where it goes, place it there. */
static gv_status move_pod(struct planner *p, size_t i, struct gv_error *err)
{
    const struct gv_defrag_pod *dp = &p->in->pods[i];
    gv_status st = push_step(p, i, err);
    if (st != GV_OK)
        return st;
    struct step *s = &p->steps[p->n_steps - 1];
    /* where it is now: its input assignment, or where an earlier move put it */
    s->from = *dp->at;
    for (size_t k = p->n_steps - 1; k-- > 0;)
        if (p->steps[k].pod == i) {
            s->from = p->steps[k].to;
            break;
        }
    uint32_t slot = strmap_get(&p->c->pod_map, dp->req->uid);
    s->victim = slot != UINT32_MAX && p->c->pods[slot]->victim;
    s->priority = slot != UINT32_MAX ? p->c->pods[slot]->priority : 0;
    if ((st = tracked_release(p, dp->req->uid, err)) != GV_OK) {
        p->n_steps--;
        return st;
    }
    st = gv_alloc_pick(p->c, dp->req, NULL, 0, &s->to, err);
    if (st == GV_OK)
        st = tracked_place(p, dp->req, &s->to, err);
    if (st != GV_OK) {
        /* it fitted where it was a moment ago: put it back */
        put_back(p, s);
        p->n_steps--;
    }
    return st;
}

/* Undoes the moves above depth, newest first. */
static void undo_to(struct planner *p, size_t depth)
{
    while (p->n_steps > depth) {
        struct step *s = &p->steps[--p->n_steps];
        tracked_release(p, p->in->pods[s->pod].req->uid, NULL);
        put_back(p, s);
    }
}

/* The pods a drain would move, into p->buf; false when it cannot be done
 * (a pod that may not move, moved already, budgets). */
static bool drain_pods(struct planner *p, const struct cand *k, uint32_t budget, size_t *n_out)
{
    const struct node *n = &p->c->nodes[k->node];
    size_t n_pods = 0;
    bool any_gpu = false;
    for (const struct pod *q = n->pods; q != NULL; q = q->next) {
        bool on = false;
        for (uint32_t d = 0; d < q->n_devs && !on; d++)
            on = q->devs[d].gpu != UINT32_MAX && (k->gpu == UINT32_MAX || q->devs[d].gpu == k->gpu);
        if (!on)
            continue;
        any_gpu = true;
        uint32_t i = strmap_get(&p->uid_map, q->uid);
        if (i == UINT32_MAX || !p->in->pods[i].movable || p->moved[i] || n_pods >= budget)
            return false;
        if (n_pods == p->buf_cap)
            return false; /* sized for the largest node's pods at start */
        p->buf[n_pods++] = i;
    }
    if (!any_gpu)
        return false;
    /* disruption budgets */
    for (size_t a = 0; a < n_pods; a++) {
        int32_t g = p->in->pods[p->buf[a]].group;
        if (g < 0)
            continue;
        uint32_t want = p->group_used[g];
        for (size_t b = 0; b < n_pods; b++)
            want += p->in->pods[p->buf[b]].group == g;
        if (want > p->in->group_budget[g])
            return false;
    }
    /* deterministic order: by uid */
    for (size_t a = 1; a < n_pods; a++)
        for (size_t b = a; b > 0 && strcmp(p->in->pods[p->buf[b - 1]].req->uid,
                                           p->in->pods[p->buf[b]].req->uid) > 0; b--) {
            size_t t = p->buf[b];
            p->buf[b] = p->buf[b - 1];
            p->buf[b - 1] = t;
        }
    *n_out = n_pods;
    return true;
}

/* Performs drain k on the current state (keeping it when keep, else
 * undoing it) and returns its gain; -1 when it cannot be done. */
static double drain(struct planner *p, struct cand *k, uint32_t budget, double base, bool keep,
                    struct gv_error *err)
{
    size_t n_pods = 0;
    if (!drain_pods(p, k, budget, &n_pods))
        return -1;
    size_t depth = p->n_steps;
    for (size_t a = 0; a < n_pods; a++) {
        if (move_pod(p, p->buf[a], err) != GV_OK) {
            undo_to(p, depth);
            return -1;
        }
    }
    const struct gv_defrag_input *in = p->in;
    uint32_t fit = p->fit0;
    if (in->n_pending > 0 && (!p->all_fit || (keep && value(p, p->idle, fit) > base)))
        fit = pending_fit(p->c, in->pending, in->n_pending, err);
    double gain = value(p, p->idle, fit) - base;
    k->moves = (uint32_t)n_pods;
    k->gain = gain;
    k->ratio = gain / (double)n_pods;
    if (!keep)
        undo_to(p, depth);
    return gain;
}

static void mark_kept(struct planner *p, size_t from)
{
    for (size_t s = from; s < p->n_steps; s++) {
        size_t i = p->steps[s].pod;
        if (!p->moved[i]) {
            p->moved[i] = true;
            if (p->in->pods[i].group >= 0)
                p->group_used[p->in->pods[i].group]++;
        }
    }
}

gv_status gv_defrag_measure(struct gv_alloc_cluster *c,
                            const struct gv_alloc_request *const *pending, size_t n_pending,
                            struct gv_defrag_state *out, struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].name != NULL)
            out->idle_gpus += node_idle(&c->nodes[i]);
    struct gv_error e = {0};
    out->pending_fit = pending_fit(c, pending, n_pending, &e);
    if (e.code != GV_OK)
        return gv_error_set(err, e.code, "%s", e.msg);
    gv_alloc_cluster_fragmentation(c, &out->frag);
    return GV_OK;
}

static gv_status check_input(const struct gv_alloc_cluster *c, const struct gv_defrag_input *in,
                             struct gv_error *err)
{
    for (size_t i = 0; i < in->n_pods; i++) {
        const struct gv_defrag_pod *dp = &in->pods[i];
        if (dp->req == NULL || dp->at == NULL)
            return gv_error_set(err, GV_EINVAL, "defrag: pod %zu has no request or assignment", i);
        if (!gv_alloc_is_placed(c, dp->req->uid))
            return gv_error_set(err, GV_EINVAL, "defrag: pod %s is not placed", dp->req->uid);
        if (dp->group >= 0 && (size_t)dp->group >= in->n_groups)
            return gv_error_set(err, GV_EINVAL, "defrag: pod %s: budget group %d out of range",
                                dp->req->uid, dp->group);
    }
    for (size_t i = 0; i < in->n_pending; i++)
        if (gv_alloc_is_placed(c, in->pending[i]->uid))
            return gv_error_set(err, GV_EINVAL, "defrag: pending pod %s is placed",
                                in->pending[i]->uid);
    return GV_OK;
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return x->gpu < y->gpu ? -1 : x->gpu > y->gpu;
}

/* The drains worth measuring: each GPU some task holds (unless one whole-GPU
 * task does, and nothing is pending: moving it takes an idle GPU for the
 * one it frees), and each node with GPU pods when pods are pending. */
static gv_status build_cands(struct planner *p, struct cand **out, size_t *n_out,
                             struct gv_error *err)
{
    struct gv_alloc_cluster *c = p->c;
    size_t cap = 0, n = 0, max_pods = 1;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i].name == NULL)
            continue;
        cap += c->nodes[i].n_gpus + 1;
        size_t k = 0;
        for (const struct pod *q = c->nodes[i].pods; q != NULL; q = q->next)
            k++;
        if (k > max_pods)
            max_pods = k;
    }
    struct cand *v = calloc(cap + 1, sizeof(*v));
    p->buf = calloc(max_pods, sizeof(*p->buf));
    p->buf_cap = max_pods;
    if (v == NULL || p->buf == NULL) {
        free(v);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        const struct node *nd = &c->nodes[i];
        if (nd->name == NULL)
            continue;
        p->total_gpus += nd->n_gpus;
        bool any = false;
        for (uint32_t g = 0; g < nd->n_gpus; g++) {
            const struct gpu *gp = &nd->gpus[g];
            if (gp->tasks == 0)
                continue;
            any = true;
            if (gp->whole > 0 && (p->in->n_pending == 0 || p->all_fit))
                continue;
            v[n++] = (struct cand){.node = i, .gpu = g, .ratio = 1,
                                   .key = (uint64_t)gp->tasks * 1000 + gp->used_milli};
        }
        if (any && p->in->n_pending > 0 && !p->all_fit) {
            uint64_t key = 0;
            for (uint32_t g = 0; g < nd->n_gpus; g++)
                key += (uint64_t)nd->gpus[g].tasks * 1000 + nd->gpus[g].used_milli;
            v[n++] = (struct cand){.node = i, .gpu = UINT32_MAX, .ratio = 1, .key = key};
        }
    }
    /* cheapest first; ties by node then GPU (insertion order), so plans are
     * reproducible */
    qsort(v, n, sizeof(*v), cand_cmp);
    *out = v;
    *n_out = n;
    return GV_OK;
}

static void fill_plan(struct planner *p, struct gv_defrag_plan *out, size_t from, size_t to,
                      const uint32_t *idle_after, const uint32_t *fit_after)
{
    for (size_t s = from; s < to; s++) {
        struct gv_defrag_move *m = &out->moves[out->n_moves++];
        m->pod = p->steps[s].pod;
        m->to = p->steps[s].to;
        m->idle_gpus = idle_after[s];
        m->pending_fit = fit_after[s];
    }
}

gv_status gv_defrag_plan(struct gv_alloc_cluster *c, const struct gv_defrag_input *in,
                         struct gv_defrag_plan *out, struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    gv_status st = check_input(c, in, err);
    if (st != GV_OK)
        return st;
    if ((st = gv_defrag_measure(c, in->pending, in->n_pending, &out->before, err)) != GV_OK)
        return st;
    struct planner p = {.c = c, .in = in, .idle = out->before.idle_gpus,
                        .fit0 = out->before.pending_fit,
                        .all_fit = out->before.pending_fit == in->n_pending};
    struct cand *cands = NULL;
    size_t n_cands = 0;
    uint32_t *idle_after = NULL, *fit_after = NULL;
    strmap_init(&p.uid_map, pod_key, in);
    p.moved = calloc(in->n_pods + 1, sizeof(*p.moved));
    p.group_used = calloc(in->n_groups + 1, sizeof(*p.group_used));
    if (p.moved == NULL || p.group_used == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < in->n_pods; i++)
        if ((st = strmap_put(&p.uid_map, in->pods[i].req->uid, (uint32_t)i)) != GV_OK) {
            gv_error_set(err, st, "out of memory");
            goto out;
        }
    if ((st = build_cands(&p, &cands, &n_cands, err)) != GV_OK)
        goto out;

    double base = value(&p, out->before.idle_gpus, out->before.pending_fit);
    uint32_t used = 0;
    /* first round: every drain once; remember the best single one */
    size_t best_single = SIZE_MAX;
    size_t first = in->max_drains > 0 && in->max_drains < n_cands ? in->max_drains : n_cands;
    for (size_t k = first; k < n_cands; k++)
        cands[k].ratio = 0; /* not measured: beyond the first round's budget */
    for (size_t k = 0; k < first && in->max_moves > 0; k++) {
        double g = drain(&p, &cands[k], in->max_moves, base, false, err);
        out->evaluated++;
        if (g <= 0) {
            cands[k].ratio = 0;
            continue;
        }
        if (best_single == SIZE_MAX || g > cands[best_single].gain ||
            (g == cands[best_single].gain && cands[k].moves < cands[best_single].moves))
            best_single = k;
    }
    /* greedy rounds, lazily re-measured */
    for (;;) {
        size_t top = SIZE_MAX;
        for (size_t k = 0; k < n_cands; k++)
            if (cands[k].ratio > 0 && (top == SIZE_MAX || cands[k].ratio > cands[top].ratio))
                top = k;
        if (top == SIZE_MAX || used >= in->max_moves)
            break;
        /* measure it again on today's state, keeping its moves */
        size_t depth = p.n_steps;
        double g = drain(&p, &cands[top], in->max_moves - used, base, true, err);
        out->evaluated++;
        if (g <= 0) {
            undo_to(&p, depth); /* kept moves that gained nothing */
            cands[top].ratio = 0;
            continue;
        }
        double next = 0;
        for (size_t k = 0; k < n_cands; k++)
            if (k != top && cands[k].ratio > next)
                next = cands[k].ratio;
        if (cands[top].ratio < next) {
            undo_to(&p, depth); /* fell behind another drain's last figure: measure that one */
            continue;
        }
        mark_kept(&p, depth);
        used += cands[top].moves;
        base += g;
        cands[top].ratio = 0;
    }
    double greedy_gain = base - value(&p, out->before.idle_gpus, out->before.pending_fit);
    if (best_single != SIZE_MAX && cands[best_single].gain > greedy_gain) {
        undo_to(&p, 0);
        memset(p.moved, 0, (in->n_pods + 1) * sizeof(*p.moved));
        memset(p.group_used, 0, (in->n_groups + 1) * sizeof(*p.group_used));
        drain(&p, &cands[best_single], in->max_moves,
              value(&p, out->before.idle_gpus, out->before.pending_fit), true, err);
    }
    /* record the plan, with the measures after each move */
    size_t n = p.n_steps;
    out->moves = calloc(n + 1, sizeof(*out->moves));
    idle_after = calloc(n + 1, sizeof(*idle_after));
    fit_after = calloc(n + 1, sizeof(*fit_after));
    if (out->moves == NULL || idle_after == NULL || fit_after == NULL) {
        undo_to(&p, 0);
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    if ((st = gv_defrag_measure(c, in->pending, in->n_pending, &out->after, err)) != GV_OK) {
        undo_to(&p, 0);
        goto out;
    }
    /* walk back, measuring each intermediate state */
    for (size_t s = n; s-- > 0;) {
        idle_after[s] = p.idle;
        fit_after[s] = in->n_pending > 0 ? pending_fit(c, in->pending, in->n_pending, err) : 0;
        undo_to(&p, s);
    }
    fill_plan(&p, out, 0, n, idle_after, fit_after);
    st = GV_OK;
out:
    undo_to(&p, 0);
    free(idle_after);
    free(fit_after);
    free(cands);
    free(p.buf);
    free(p.steps);
    free(p.moved);
    free(p.group_used);
    strmap_free(&p.uid_map);
    if (st != GV_OK)
        gv_defrag_plan_free(out);
    return st;
}

void gv_defrag_plan_free(struct gv_defrag_plan *p)
{
    free(p->moves);
    p->moves = NULL;
    p->n_moves = 0;
}
