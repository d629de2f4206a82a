/*
 * Fragmentation Gradient Descent (Weng et al., USENIX ATC'23), see
 * docs/alloc.md for the definitions this file implements.
 *
 * Workload model: task classes m = (GPU shape s, CPU request) where a shape
 * is (k GPUs, r milli per GPU, memory per GPU, GPU-type constraint).  Each
 * observed container adds weight to its class; weights decay geometrically
 * (half-life in requests) by growing the weight of new observations instead
 * of shrinking the old ones, which keeps observe() O(1).
 *
 * Fragmentation of node n for class m, F_n(m), in milli-GPU:
 *   - the node cannot run m (CPU, not enough GPUs able to host r): every
 *     free share on the node is a fragment;
 *   - otherwise: the free share of each GPU that cannot host one r-slice of
 *     m (too little left, wrong model, task limit) is a fragment.
 * F_n = sum_m p(m) F_n(m).  FGD places a task where F_n grows least.
 *
 * Supply: a class whose GPU-type constraint leaves it a fraction of the
 * cluster's free GPU share weighs p(m) x (free share of all GPUs / free
 * share of the GPUs it may use).  Its tasks compete for that free share
 * only, so each unit of it matters that much more to it; FGD's plain p(m)
 * sends untyped tasks to the models the fewest classes ask for, however
 * few GPUs those models have.  Free share, not installed GPUs: a model
 * that stays idle while the others fill needs less protection, one that
 * fills up more (docs/alloc.md, "Supply").
 *
 * Per node we cache, for each shape, how many GPUs can host it (cnt) and
 * the free share of those that cannot (frag); the CPU dimension folds in
 * through per-shape cumulative weights over CPU levels.  A candidate
 * placement changes a few GPUs, so its delta costs O(shapes x GPUs changed).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"

void fgd_free_shapes(struct gv_alloc_cluster *c)
{
    for (uint32_t i = 0; i < c->n_shapes; i++) {
        free(c->shapes[i].types);
        free(c->shapes[i].notypes);
        free(c->shapes[i].model_ok);
    }
    c->n_shapes = 0;
    c->wl_total_valid = false;
}

void fgd_node_invalidate(struct node *n)
{
    n->prof_gen = 0;
}

static bool str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static bool shape_model_ok_grow(struct gv_alloc_cluster *c, struct wl_shape *s, uint32_t model)
{
    if (model >= s->model_ok_n) {
        uint8_t *m = realloc(s->model_ok, c->n_models);
        if (m == NULL)
            return true; /* degrade to "any model" rather than fail */
        s->model_ok = m;
        for (uint32_t i = s->model_ok_n; i < c->n_models; i++) {
            bool ok = s->types == NULL || alloc_list_match(s->types, c->models[i], true);
            if (ok && s->notypes != NULL && alloc_list_match(s->notypes, c->models[i], true))
                ok = false;
            m[i] = ok;
        }
        s->model_ok_n = c->n_models;
    }
    return s->model_ok[model];
}

/* Whether the shape may use GPUs of model (its type constraints): a table
 * lookup inline, the table grown out of line when the cluster interned more
 * models since. */
static inline bool shape_model_ok(struct gv_alloc_cluster *c, struct wl_shape *s, uint32_t model)
{
    return model < s->model_ok_n ? s->model_ok[model] : shape_model_ok_grow(c, s, model);
}

bool fgd_supply_account(struct gv_alloc_cluster *c, const struct node *n, int sign)
{
    if (c->supply_broken)
        return false;
    if (c->model_gpus_n < c->n_models) {
        uint32_t *m = realloc(c->model_gpus, c->n_models * sizeof(*m));
        if (m != NULL)
            c->model_gpus = m;
        double *f = m != NULL ? realloc(c->model_free, c->n_models * sizeof(*f)) : NULL;
        if (f == NULL) {
            c->supply_broken = true;
            c->supply_gen = c->supply_gen + 1 ? c->supply_gen + 1 : 1;
            return false;
        }
        c->model_free = f;
        for (uint32_t i = c->model_gpus_n; i < c->n_models; i++) {
            m[i] = 0;
            f[i] = 0;
        }
        c->model_gpus_n = c->n_models;
    }
    for (uint32_t g = 0; g < n->n_gpus; g++) {
        if (!n->gpus[g].healthy)
            continue;
        c->model_gpus[n->gpus[g].model_id] += (uint32_t)sign;
        c->supply_gpus += (uint64_t)(int64_t)sign;
    }
    c->supply_gen = c->supply_gen + 1 ? c->supply_gen + 1 : 1;
    return true;
}

void fgd_free_account(struct gv_alloc_cluster *c, const struct node *n, int sign)
{
    if (c->supply_broken)
        return;
    for (uint32_t g = 0; g < n->n_gpus; g++) {
        const struct gpu *x = &n->gpus[g];
        if (!x->healthy || x->model_id >= c->model_gpus_n)
            continue;
        double f = sign * alloc_gpu_free_share(x);
        c->model_free[x->model_id] += f;
        c->supply_free += f;
    }
    c->supply_gen = c->supply_gen + 1 ? c->supply_gen + 1 : 1;
}

/* The shape's supply factor (see the top of this file): the cluster's free
 * share over the free share of the models the shape may use; 1 for a shape
 * any GPU may host, and when no GPU it may use has any share free (no node
 * can run it now: its fragments are every node's free share).  O(models)
 * after each change of the cluster's GPUs or their usage. */
static double shape_supply(struct gv_alloc_cluster *c, struct wl_shape *s)
{
    if (s->supply_gen == c->supply_gen)
        return s->supply;
    double ok = 0;
    for (uint32_t i = 0; !c->supply_broken && i < c->model_gpus_n; i++)
        if (shape_model_ok(c, s, i))
            ok += c->model_free[i];
    /* sums of adds and subtracts: below half a milli is nothing free */
    s->supply = ok >= 0.5 && !c->supply_broken ? fmax(1.0, c->supply_free / ok) : 1.0;
    s->supply_gen = c->supply_gen;
    return s->supply;
}

static inline bool shape_host(struct gv_alloc_cluster *c, struct wl_shape *s, const struct gpu *g)
{
    return shape_model_ok(c, s, g->model_id) &&
           alloc_gpu_can_host(g, s->r, alloc_gpu_mem_need(g, s->mem_kind, s->mem));
}

static void shape_add_level(struct gv_alloc_cluster *c, struct wl_shape *s, int64_t cpu, double w)
{
    uint32_t i = 0;
    while (i < s->n_levels && s->levels[i].cpu < cpu)
        i++;
    if (i < s->n_levels && s->levels[i].cpu == cpu) {
        s->levels[i].w += w;
    } else if (s->n_levels < WL_MAX_LEVELS) {
        memmove(&s->levels[i + 1], &s->levels[i], (s->n_levels - i) * sizeof(s->levels[0]));
        s->levels[i] = (struct wl_level){cpu, w, 0};
        s->n_levels++;
        c->levels_gen++;
    } else {
        /* Full: fold into the next larger level (or the largest), which
         * only ever overstates the CPU a class needs. */
        s->levels[i < s->n_levels ? i : s->n_levels - 1].w += w;
    }
    s->w += w;
    s->dirty = true;
}

static struct wl_shape *shape_find(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                                   const struct gv_alloc_container_req *cr)
{
    const char *types = req->constraint[GV_ALLOC_USE_TYPE];
    const char *notypes = req->constraint[GV_ALLOC_NOUSE_TYPE];
    for (uint32_t i = 0; i < c->n_shapes; i++) {
        struct wl_shape *s = &c->shapes[i];
        if (s->k == cr->num_gpu && s->r == cr->milli && s->mem_kind == cr->mem_kind &&
            s->mem == cr->mem && str_eq(s->types, types) && str_eq(s->notypes, notypes))
            return s;
    }
    struct wl_shape *s;
    if (c->n_shapes < WL_MAX_SHAPES) {
        s = &c->shapes[c->n_shapes++];
    } else {
        /* Evict the lightest shape: the model keeps the popular ones. */
        s = &c->shapes[0];
        for (uint32_t i = 1; i < c->n_shapes; i++)
            if (c->shapes[i].w < s->w)
                s = &c->shapes[i];
        free(s->types);
        free(s->notypes);
        free(s->model_ok);
    }
    memset(s, 0, sizeof(*s));
    s->k = cr->num_gpu;
    s->r = cr->milli;
    s->mem_kind = cr->mem_kind;
    s->mem = cr->mem;
    s->types = types != NULL ? strdup(types) : NULL;
    s->notypes = notypes != NULL ? strdup(notypes) : NULL;
    if ((types != NULL && s->types == NULL) || (notypes != NULL && s->notypes == NULL)) {
        /* Out of memory: drop the constraint rather than the observation. */
        free(s->types);
        free(s->notypes);
        s->types = s->notypes = NULL;
    }
    c->shapes_gen++;
    return s;
}

void gv_alloc_observe(struct gv_alloc_cluster *c, const struct gv_alloc_request *req)
{
    if (req->n_containers == 0)
        return;
    int64_t cpu = req->cpu_milli / (int64_t)req->n_containers;
    c->wl_total_valid = false; /* every weight change below comes through here */
    for (uint32_t i = 0; i < req->n_containers; i++)
        shape_add_level(c, shape_find(c, req, &req->containers[i]), cpu, c->wl_scale);
    c->wl_scale *= c->wl_growth;
    if (c->wl_scale > 1e100) {
        for (uint32_t i = 0; i < c->n_shapes; i++) {
            struct wl_shape *s = &c->shapes[i];
            s->w /= c->wl_scale;
            for (uint32_t j = 0; j < s->n_levels; j++)
                s->levels[j].w /= c->wl_scale;
            s->dirty = true;
        }
        c->wl_scale = 1.0;
    }
}

/* Weight of the shape's classes whose CPU request fits in cpu_free. */
static double shape_cpu_weight(struct wl_shape *s, int64_t cpu_free)
{
    if (s->dirty) {
        double cum = 0;
        for (uint32_t i = 0; i < s->n_levels; i++) {
            cum += s->levels[i].w;
            s->levels[i].cum = cum;
        }
        s->dirty = false;
    }
    uint32_t lo = 0, hi = s->n_levels; /* first level with cpu > cpu_free */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (s->levels[mid].cpu <= cpu_free)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? 0.0 : s->levels[lo - 1].cum;
}

/* Sum of the shapes' supply-weighted weights, summed as always (same order,
 * same value) once per change of the workload model or of the cluster's
 * supply instead of once per score: the loop read a cache line of each of up
 * to 128 shapes (1.6 KB apart) for every node scored. */
static double total_weight(struct gv_alloc_cluster *c)
{
    if (!c->wl_total_valid || c->wl_total_supply_gen != c->supply_gen) {
        double w = 0;
        for (uint32_t i = 0; i < c->n_shapes; i++)
            w += c->shapes[i].w * shape_supply(c, &c->shapes[i]);
        c->wl_total = w;
        c->wl_total_valid = true;
        c->wl_total_supply_gen = c->supply_gen;
    }
    return c->wl_total;
}

static bool profile(struct gv_alloc_cluster *c, struct node *n)
{
    if (n->prof_gen == c->shapes_gen)
        return true;
    if (n->prof_cap < c->n_shapes) {
        /* everything below is recomputed: nothing to move */
        double *pf = realloc(n->prof_frag, c->n_shapes * (sizeof(double) + sizeof(uint8_t)));
        if (pf == NULL)
            return false;
        n->prof_frag = pf;
        n->prof_cap = c->n_shapes;
    }
    uint8_t *prof_cnt = node_prof_cnt(n);
    double share[GV_ALLOC_MAX_NODE_GPUS];
    double total = 0;
    for (uint32_t g = 0; g < n->n_gpus; g++) {
        share[g] = alloc_gpu_free_share(&n->gpus[g]);
        total += share[g];
    }
    n->prof_total = total;
    for (uint32_t i = 0; i < c->n_shapes; i++) {
        struct wl_shape *s = &c->shapes[i];
        uint32_t cnt = 0;
        double frag = 0;
        for (uint32_t g = 0; g < n->n_gpus; g++) {
            if (shape_host(c, s, &n->gpus[g]))
                cnt++;
            else
                frag += share[g];
        }
        prof_cnt[i] = (uint8_t)cnt;
        n->prof_frag[i] = frag;
    }
    n->prof_gen = c->shapes_gen;
    return true;
}

static int64_t cpu_free_of(const struct node *n, int64_t extra)
{
    return n->cpu_cap > 0 ? n->cpu_cap - n->cpu_used - extra : INT64_MAX;
}

/* A shape's contribution to a node's fragmentation, given its CPU weight p
 * at the node's free CPU (shape_cpu_weight; unused when the node cannot
 * host the shape at all): one node's candidates share p (fgd_delta_memo). */
static inline double contrib_p(const struct wl_shape *s, uint32_t cnt, double frag, double total,
                               double p)
{
    if (s->w <= 0)
        return 0;
    if (cnt < s->k)
        return s->w * total;
    return p * frag + (s->w - p) * total;
}

static inline double contrib(struct wl_shape *s, uint32_t cnt, double frag, double total,
                             int64_t cpu_free)
{
    double p = s->w > 0 && cnt >= s->k ? shape_cpu_weight(s, cpu_free) : 0;
    return contrib_p(s, cnt, frag, total, p);
}

double fgd_node_frag(struct gv_alloc_cluster *c, uint32_t node)
{
    struct node *n = &c->nodes[node];
    double tw = total_weight(c);
    if (tw <= 0 || !profile(c, n))
        return 0;
    int64_t cpu = cpu_free_of(n, 0);
    double f = 0;
    for (uint32_t i = 0; i < c->n_shapes; i++)
        f += contrib(&c->shapes[i], node_prof_cnt(n)[i], n->prof_frag[i], n->prof_total, cpu) *
             shape_supply(c, &c->shapes[i]);
    return f / tw;
}

gv_status gv_alloc_node_fragmentation(struct gv_alloc_cluster *c, const char *node, double *out,
                                      struct gv_error *err)
{
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", node);
    *out = fgd_node_frag(c, idx);
    return GV_OK;
}

double fgd_delta(struct gv_alloc_cluster *c, uint32_t node, const struct gv_alloc_request *req,
                 const struct pick *p)
{
    return fgd_delta_memo(c, node, req, p, NULL);
}

double fgd_delta_memo(struct gv_alloc_cluster *c, uint32_t node,
                      const struct gv_alloc_request *req, const struct pick *p,
                      struct fgd_before *before)
{
    struct node *n = &c->nodes[node];
    double tw = total_weight(c);
    if (tw <= 0 || !profile(c, n))
        return 0;
    /* The GPUs the placement touches, before and after. */
    struct gpu after[GV_ALLOC_MAX_NODE_GPUS];
    uint8_t idx[GV_ALLOC_MAX_NODE_GPUS];
    uint32_t nch = alloc_pick_apply(n, p, idx, after);
    double share_old[GV_ALLOC_MAX_NODE_GPUS];
    double share_new[GV_ALLOC_MAX_NODE_GPUS];
    double total_new = n->prof_total;
    for (uint32_t j = 0; j < nch; j++) {
        share_old[j] = alloc_gpu_free_share(&n->gpus[idx[j]]);
        share_new[j] = alloc_gpu_free_share(&after[j]);
        total_new += share_new[j] - share_old[j];
    }
    int64_t cpu_old = cpu_free_of(n, 0), cpu_new = cpu_free_of(n, req->cpu_milli);
    /* The node's own contributions do not depend on the candidate: one
     * node's candidates (fgd_best_single) share them. */
    bool have = before != NULL && before->valid;
    double delta = 0;
    for (uint32_t i = 0; i < c->n_shapes; i++) {
        struct wl_shape *s = &c->shapes[i];
        if (s->w <= 0)
            continue;
        int32_t cnt = node_prof_cnt(n)[i];
        double frag = n->prof_frag[i];
        for (uint32_t j = 0; j < nch; j++) {
            if (shape_host(c, s, &n->gpus[idx[j]]))
                cnt--;
            else
                frag -= share_old[j];
            if (shape_host(c, s, &after[j]))
                cnt++;
            else
                frag += share_new[j];
        }
        double old, p_new = -1; /* CPU weights are >= 0: -1 = not computed yet */
        if (have) {
            old = before->contrib[i];
            p_new = before->p_new[i];
        } else {
            old = contrib(s, node_prof_cnt(n)[i], n->prof_frag[i], n->prof_total, cpu_old);
            if (before != NULL) {
                before->contrib[i] = old;
                before->p_new[i] = -1;
            }
        }
        if ((uint32_t)cnt >= s->k && p_new < 0) {
            p_new = shape_cpu_weight(s, cpu_new);
            if (before != NULL)
                before->p_new[i] = p_new;
        }
        delta += (contrib_p(s, (uint32_t)cnt, frag, total_new, p_new) - old) * shape_supply(c, s);
    }
    if (before != NULL)
        before->valid = true;
    return delta / tw;
}
