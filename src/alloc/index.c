/*
 * Node index: nodes grouped by state, states filed by what they can still
 * host, so a decision scores each distinct state once and never looks at
 * states that cannot take the request (docs/alloc.md, "Cost of a decision").
 *
 * A state class holds every node with one signature (alloc_node_resign:
 * CPU, memory and the multiset of GPU states; names, labels and uuids do
 * not count).  Nodes of one class fit the same requests and get the same
 * score under every policy, so only the class's smallest name can win a
 * tie-break: each class keeps its nodes in a min-heap by name.
 *
 * Classes are filed in buckets by (free whole GPUs, clamped to 8) x
 * (largest free share of one GPU, in tenths), and within a bucket by a band
 * of free CPU.  A request needing w whole GPUs or a share r visits only
 * buckets that can hold it, and only the bands that can hold its CPU; a
 * full node costs nothing.  (On a large cluster most states differ in free
 * CPU, and most of those a pod without GPUs would otherwise look at have
 * too little of it: at openb x10 the bands spare about 300 of the 410
 * classes a decision visited.)  Every check here is a necessary condition of alloc_fit_node, so
 * skipping a class never skips a node that fits: the choice is the one
 * exhaustive scoring makes (tests/alloc, property test).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"

#define NONE UINT32_MAX

static uint32_t bucket_of(const struct sclass *k)
{
    uint32_t w = k->free_whole > IDX_WHOLE_MAX ? IDX_WHOLE_MAX : k->free_whole;
    return w * IDX_FRAC_BUCKETS + k->max_free / 100;
}

/* Half-octaves of 500 milli: band 0 below 500, then [2^b, 1.5 * 2^b) and
 * [1.5 * 2^b, 2^(b+1)) units of 500 in turn, the last band open-ended.
 * Monotone, so cpu_free >= request implies band(cpu_free) >= band(request). */
uint32_t index_cpu_band(int64_t cpu_milli)
{
    if (cpu_milli < 500)
        return 0;
    uint64_t u = (uint64_t)cpu_milli / 500;
    uint32_t lb = 63u - (uint32_t)__builtin_clzll(u); /* u >= 1 */
    uint32_t half = lb > 0 ? (uint32_t)(u >> (lb - 1)) & 1u : 0;
    uint32_t b = 1 + 2 * lb + half;
    return b < IDX_CPU_BANDS ? b : IDX_CPU_BANDS - 1;
}

/* What a node in this state can still host. */
static void summarize(const struct node *n, struct sclass *k)
{
    double used = n->n_gpus ? 1.0 - n->free_share / ((double)n->n_gpus * GV_ALLOC_MILLI) : 1.0;
    double pm = floor(used * 1000.0);
    k->used_pm = pm < 0 ? 0 : pm > 1000 ? 1000 : (uint32_t)pm;
    k->free_whole = 0;
    k->open = 0;
    k->max_free = 0;
    k->model_mask = 0;
    k->cpu_free = n->cpu_cap > 0 ? n->cpu_cap - n->cpu_used : INT64_MAX;
    k->mem_free = n->mem_cap > 0 ? n->mem_cap - n->mem_used : INT64_MAX;
    k->n_gpus = n->n_gpus;
    for (uint32_t i = 0; i < n->n_gpus; i++) {
        const struct gpu *g = &n->gpus[i];
        k->model_mask |= g->model_id < 64 ? UINT64_C(1) << g->model_id : ~UINT64_C(0);
        if (!g->healthy || g->whole > 0 || g->tasks >= g->split)
            continue;
        k->open++;
        if (g->mode == GV_ALLOC_GPU_EXCLUSIVE && g->tasks > 0)
            continue;
        uint32_t f = g->used_milli >= GV_ALLOC_MILLI ? 0 : GV_ALLOC_MILLI - g->used_milli;
        if (f > k->max_free)
            k->max_free = f;
        if (g->tasks == 0 && g->used_milli == 0)
            k->free_whole++;
    }
}

/* --- min-heap of node indices by name ------------------------------------ */

static bool name_less(const struct gv_alloc_cluster *c, uint32_t a, uint32_t b)
{
    return strcmp(c->nodes[a].name, c->nodes[b].name) < 0;
}

static void heap_set(struct gv_alloc_cluster *c, struct sclass *k, uint32_t pos, uint32_t node)
{
    k->heap[pos] = node;
    c->nodes[node].hpos = pos;
}

static void heap_up(struct gv_alloc_cluster *c, struct sclass *k, uint32_t pos)
{
    uint32_t x = k->heap[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (!name_less(c, x, k->heap[parent]))
            break;
        heap_set(c, k, pos, k->heap[parent]);
        pos = parent;
    }
    heap_set(c, k, pos, x);
}

static void heap_down(struct gv_alloc_cluster *c, struct sclass *k, uint32_t pos)
{
    uint32_t x = k->heap[pos];
    for (;;) {
        uint32_t l = 2 * pos + 1, m = pos;
        uint32_t best = x;
        if (l < k->n && name_less(c, k->heap[l], best)) {
            m = l;
            best = k->heap[l];
        }
        if (l + 1 < k->n && name_less(c, k->heap[l + 1], best))
            m = l + 1;
        if (m == pos)
            break;
        heap_set(c, k, pos, k->heap[m]);
        pos = m;
    }
    heap_set(c, k, pos, x);
}

/* --- classes ---------------------------------------------------------- */

static void bucket_link(struct gv_alloc_cluster *c, uint32_t ki)
{
    struct sclass *k = &c->cls[ki];
    k->cpu_band = index_cpu_band(k->cpu_free);
    uint32_t pl = k->used_pm * IDX_CPU_BANDS + k->cpu_band;
    k->pm_prev = NONE;
    k->pm_next = c->pm_head[pl];
    if (k->pm_next != NONE)
        c->cls[k->pm_next].pm_prev = ki;
    c->pm_head[pl] = ki;
    c->pm_bands[k->used_pm] |= UINT32_C(1) << k->cpu_band;
    uint32_t b = bucket_of(k);
    k->bucket = b * IDX_CPU_BANDS + k->cpu_band;
    k->prev = NONE;
    k->next = c->bucket_head[k->bucket];
    if (k->next != NONE)
        c->cls[k->next].prev = ki;
    c->bucket_head[k->bucket] = ki;
    c->bucket_bands[b] |= UINT32_C(1) << k->cpu_band;
}

static void bucket_unlink(struct gv_alloc_cluster *c, uint32_t ki)
{
    struct sclass *k = &c->cls[ki];
    uint32_t pl = k->used_pm * IDX_CPU_BANDS + k->cpu_band;
    if (k->pm_prev != NONE)
        c->cls[k->pm_prev].pm_next = k->pm_next;
    else
        c->pm_head[pl] = k->pm_next;
    if (k->pm_next != NONE)
        c->cls[k->pm_next].pm_prev = k->pm_prev;
    if (c->pm_head[pl] == NONE)
        c->pm_bands[k->used_pm] &= ~(UINT32_C(1) << k->cpu_band);
    if (k->prev != NONE)
        c->cls[k->prev].next = k->next;
    else
        c->bucket_head[k->bucket] = k->next;
    if (k->next != NONE)
        c->cls[k->next].prev = k->prev;
    if (c->bucket_head[k->bucket] == NONE)
        c->bucket_bands[k->bucket / IDX_CPU_BANDS] &= ~(UINT32_C(1) << k->cpu_band);
}

static gv_status hash_grow(struct gv_alloc_cluster *c)
{
    uint32_t ncap = c->chash_cap ? c->chash_cap * 2 : 256;
    uint32_t *h = malloc(ncap * sizeof(*h));
    if (h == NULL)
        return GV_ENOMEM;
    for (uint32_t i = 0; i < ncap; i++)
        h[i] = NONE;
    for (uint32_t i = 0; i < c->n_cls; i++) {
        struct sclass *k = &c->cls[i];
        if (k->n == 0)
            continue; /* free slot */
        uint32_t b = (uint32_t)(k->sig & (ncap - 1));
        k->hnext = h[b];
        h[b] = i;
    }
    free(c->chash);
    c->chash = h;
    c->chash_cap = ncap;
    return GV_OK;
}

static uint32_t class_find(const struct gv_alloc_cluster *c, uint64_t sig)
{
    if (c->chash_cap == 0)
        return NONE;
    for (uint32_t i = c->chash[sig & (c->chash_cap - 1)]; i != NONE; i = c->cls[i].hnext)
        if (c->cls[i].sig == sig)
            return i;
    return NONE;
}

static uint32_t class_new(struct gv_alloc_cluster *c, const struct node *n)
{
    uint32_t ki;
    if ((c->live_cls + 1) * 2 > c->chash_cap && hash_grow(c) != GV_OK)
        return NONE;
    if (c->n_free_cls > 0) {
        ki = c->free_cls[--c->n_free_cls];
    } else {
        if (c->n_cls == c->cap_cls) {
            uint32_t ncap = c->cap_cls ? c->cap_cls * 2 : 64;
            struct sclass *x = realloc(c->cls, ncap * sizeof(*x));
            uint32_t *f = realloc(c->free_cls, ncap * sizeof(*f));
            if (x != NULL)
                c->cls = x;
            if (f != NULL)
                c->free_cls = f;
            if (x == NULL || f == NULL)
                return NONE;
            c->cap_cls = ncap;
        }
        ki = c->n_cls++;
    }
    struct sclass *k = &c->cls[ki];
    memset(k, 0, sizeof(*k));
    k->sig = n->sig;
    summarize(n, k);
    uint32_t b = (uint32_t)(k->sig & (c->chash_cap - 1));
    k->hnext = c->chash[b];
    c->chash[b] = ki;
    bucket_link(c, ki);
    c->live_cls++;
    return ki;
}

static void class_drop(struct gv_alloc_cluster *c, uint32_t ki)
{
    struct sclass *k = &c->cls[ki];
    bucket_unlink(c, ki);
    uint32_t *p = &c->chash[k->sig & (c->chash_cap - 1)];
    while (*p != ki)
        p = &c->cls[*p].hnext;
    *p = k->hnext;
    free(k->heap);
    memset(k, 0, sizeof(*k));
    c->free_cls[c->n_free_cls++] = ki;
    c->live_cls--;
}

void index_node_remove(struct gv_alloc_cluster *c, uint32_t node)
{
    struct node *n = &c->nodes[node];
    if (n->cls == NONE || c->cls == NULL)
        return;
    struct sclass *k = &c->cls[n->cls];
    uint32_t pos = n->hpos, last = k->heap[--k->n];
    if (pos < k->n) {
        heap_set(c, k, pos, last);
        heap_up(c, k, pos);
        heap_down(c, k, c->nodes[last].hpos);
    }
    uint32_t ki = n->cls;
    n->cls = NONE;
    if (k->n == 0)
        class_drop(c, ki);
}

void index_node_update(struct gv_alloc_cluster *c, uint32_t node)
{
    struct node *n = &c->nodes[node];
    if (n->cls != NONE && n->cls < c->n_cls && c->cls[n->cls].sig == n->sig)
        return; /* same state as before (e.g. a spec replaced by itself) */
    index_node_remove(c, node);
    uint32_t ki = class_find(c, n->sig);
    if (ki == NONE)
        ki = class_new(c, n);
    if (ki == NONE) {
        c->index_broken = true; /* out of memory: exhaustive scoring from now on */
        return;
    }
    struct sclass *k = &c->cls[ki];
    if (k->n == k->cap) {
        uint32_t ncap = k->cap ? k->cap * 2 : 4;
        uint32_t *h = realloc(k->heap, ncap * sizeof(*h));
        if (h == NULL) {
            if (k->n == 0)
                class_drop(c, ki);
            c->index_broken = true;
            return;
        }
        k->heap = h;
        k->cap = ncap;
    }
    n->cls = ki;
    heap_set(c, k, k->n++, node);
    heap_up(c, k, k->n - 1);
}

void index_free(struct gv_alloc_cluster *c)
{
    for (uint32_t i = 0; i < c->n_cls; i++)
        free(c->cls[i].heap);
    free(c->cls);
    free(c->free_cls);
    free(c->chash);
}

void index_init(struct gv_alloc_cluster *c)
{
    for (uint32_t b = 0; b < IDX_BUCKETS * IDX_CPU_BANDS; b++)
        c->bucket_head[b] = NONE;
    for (uint32_t b = 0; b < IDX_PM_LEVELS * IDX_CPU_BANDS; b++)
        c->pm_head[b] = NONE;
    memset(c->bucket_bands, 0, sizeof(c->bucket_bands));
    memset(c->pm_bands, 0, sizeof(c->pm_bands));
}

/* What a request needs at least: whole GPUs (summed over containers, which
 * never share one), the largest share one fractional container takes, and
 * the most GPUs one container spreads over. */
void index_need(const struct gv_alloc_request *r, struct idx_need *need)
{
    memset(need, 0, sizeof(*need));
    for (uint32_t i = 0; i < r->n_containers; i++) {
        const struct gv_alloc_container_req *cr = &r->containers[i];
        if (cr->milli >= GV_ALLOC_MILLI)
            need->whole += cr->num_gpu;
        else if (cr->milli > need->frac)
            need->frac = cr->milli;
        if (cr->num_gpu > need->spread)
            need->spread = cr->num_gpu;
    }
}

bool index_may_fit(const struct sclass *k, const struct gv_alloc_request *r,
                   const struct idx_need *need, uint64_t allowed_models)
{
    if (r->cpu_milli > k->cpu_free || r->mem_mib > k->mem_free)
        return false;
    if (r->n_containers == 0)
        return true;
    if (k->n_gpus == 0 || (k->model_mask & allowed_models) == 0)
        return false;
    return k->free_whole >= need->whole && k->max_free >= need->frac && k->open >= need->spread;
}

uint32_t index_first_bucket(const struct idx_need *need, uint32_t *min_frac_bucket)
{
    uint32_t w = need->whole > IDX_WHOLE_MAX ? IDX_WHOLE_MAX : need->whole;
    *min_frac_bucket = need->whole > 0 ? IDX_FRAC_BUCKETS - 1 : need->frac / 100;
    return w;
}
