/*
 * Cluster state: nodes, their GPUs and the pods placed on them.
 *
 * Nodes live in an array (slots of removed nodes are reused) indexed by a
 * name map; pods in a uid map.  Placing or releasing a pod touches only the
 * GPUs it uses and its node's cached summaries, so both are O(GPUs used).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"

/* The maps' keys, read from what their values name (strmap_init). */
static const char *node_key(const void *ctx, uint32_t v)
{
    return ((const struct gv_alloc_cluster *)ctx)->nodes[v].name;
}

static const char *pod_key(const void *ctx, uint32_t v)
{
    return ((const struct gv_alloc_cluster *)ctx)->pods[v]->uid;
}

gv_status gv_alloc_cluster_new(const struct gv_alloc_config *cfg, struct gv_alloc_cluster **out,
                               struct gv_error *err)
{
    struct gv_alloc_cluster *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    strmap_init(&c->node_map, node_key, c);
    strmap_init(&c->pod_map, pod_key, c);
    if (cfg != NULL)
        c->cfg = *cfg;
    else
        gv_alloc_config_default(&c->cfg);
    if ((unsigned)c->cfg.node_policy >= GV_ALLOC_POLICY_COUNT ||
        (unsigned)c->cfg.gpu_policy >= GV_ALLOC_GPU_POLICY_COUNT || c->cfg.workload_half_life < 0) {
        free(c);
        return gv_error_set(err, GV_EINVAL, "allocation config: bad policy or half-life");
    }
    if (c->cfg.default_split > UINT16_MAX) { /* struct gpu's split */
        unsigned split = c->cfg.default_split;
        free(c);
        return gv_error_set(err, GV_EINVAL, "allocation config: default split %u above %u", split,
                            (unsigned)UINT16_MAX);
    }
    if (c->cfg.default_split == 0)
        c->cfg.default_split = 1;
    c->wl_scale = 1.0;
    c->wl_growth = c->cfg.workload_half_life > 0 ? exp2(1.0 / c->cfg.workload_half_life) : 1.0;
    c->shapes_gen = 1;
    c->supply_gen = 1;
    index_init(c);
    *out = c;
    return GV_OK;
}

static void node_clear(struct node *n)
{
    free(n->gpus); /* the name too */
    free(n->prof_frag); /* the counts too */
    memset(n, 0, sizeof(*n));
}

void gv_alloc_cluster_free(struct gv_alloc_cluster *c)
{
    if (c == NULL)
        return;
    for (uint32_t i = 0; i < c->n_pods; i++)
        free(c->pods[i]);
    free(c->pods);
    free(c->free_pod_slots);
    for (uint32_t i = 0; i < c->n_nodes; i++)
        node_clear(&c->nodes[i]);
    free(c->nodes);
    strmap_free(&c->node_map);
    strmap_free(&c->pod_map);
    for (uint32_t i = 0; i < c->n_models; i++)
        free(c->models[i]);
    free(c->models);
    for (uint32_t i = 0; i < c->n_model_names; i++)
        free(c->model_names[i]);
    free(c->model_names);
    fgd_free_shapes(c);
    free(c->model_gpus);
    free(c->model_free);
    free(c->memo);
    group_free(c);
    index_free(c);
    free(c->bud);
    free(c);
}

/* Index of text in the string set (*v, *n, *cap), added if new; at most
 * limit strings. */
static gv_status intern(char ***v, uint32_t *n, uint32_t *cap, uint32_t limit, const char *text,
                        uint32_t *id, struct gv_error *err)
{
    for (uint32_t i = 0; i < *n; i++) {
        if (strcmp((*v)[i], text) == 0) {
            *id = i;
            return GV_OK;
        }
    }
    if (*n >= limit)
        return gv_error_set(err, GV_ERANGE, "more than %u distinct GPU models", limit);
    if (*n == *cap) {
        uint32_t ncap = *cap ? *cap * 2 : 8;
        char **nv = realloc(*v, ncap * sizeof(*nv));
        if (nv == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        *v = nv;
        *cap = ncap;
    }
    if (((*v)[*n] = strdup(text)) == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    *id = (*n)++;
    return GV_OK;
}

gv_status alloc_model_intern(struct gv_alloc_cluster *c, const char *model, uint32_t *id,
                             struct gv_error *err)
{
    char low[GV_ALLOC_MODEL_MAX];
    size_t n = 0;
    for (; model[n] != '\0' && n + 1 < sizeof(low); n++)
        low[n] = (char)tolower((unsigned char)model[n]);
    low[n] = '\0';
    return intern(&c->models, &c->n_models, &c->model_cap, UINT32_MAX, low, id, err);
}

/* The model text as given, interned (few distinct models in a cluster);
 * kept until the cluster is freed. */
static gv_status model_name_intern(struct gv_alloc_cluster *c, const char *model, uint16_t *id,
                                   struct gv_error *err)
{
    uint32_t i = 0;
    gv_status st = intern(&c->model_names, &c->n_model_names, &c->model_names_cap,
                          (uint32_t)UINT16_MAX + 1, model, &i, err);
    *id = (uint16_t)i;
    return st;
}

/* --- node signatures (the per-GPU arithmetic is inline, alloc_internal.h) --- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

/* Signature of everything placement decisions depend on, independent of the
 * order of GPUs, so identical nodes are scored once (policy.c). */
void alloc_node_resign(struct node *n)
{
    /* A capacity of 0 means "not checked", which fits what a full node
     * does not: the two must not share a signature. */
    uint64_t h = mix64((uint64_t)(n->cpu_cap - n->cpu_used) ^ ((uint64_t)n->n_gpus << 56) ^
                       ((uint64_t)(n->cpu_cap > 0) << 63));
    h ^= mix64((uint64_t)(n->mem_cap - n->mem_used) + 0x9e3779b97f4a7c15u +
               ((uint64_t)(n->mem_cap > 0) << 62));
    uint64_t sum = 0, seq = mix64(((uint64_t)n->n_gpus << 56) ^ ((uint64_t)(n->cpu_cap > 0) << 63));
    n->free_share = 0;
    for (uint32_t i = 0; i < n->n_gpus; i++) {
        const struct gpu *g = &n->gpus[i];
        n->free_share += alloc_gpu_free_share(g);
        uint64_t x = mix64(((uint64_t)g->model_id << 40) ^ ((uint64_t)g->used_milli << 20) ^
                           ((uint64_t)g->tasks << 8) ^ ((uint64_t)g->whole << 4) ^
                           ((uint64_t)g->healthy << 1) ^ (uint64_t)g->mode);
        x = mix64(x ^ g->used_mem ^ (g->mem_mib << 32) ^ ((uint64_t)g->split << 52) ^
                  ((uint64_t)(uint32_t)g->numa << 24));
        sum += x;
        seq = mix64(seq + x);
    }
    n->sig = mix64(h ^ sum);
    /* The same GPU states in order (the fit's GPU choice breaks ties by
     * index): what an FGD score reads of the node but its free CPU. */
    n->gsig = seq;
    fgd_node_invalidate(n);
}

/* --- nodes --------------------------------------------------------------- */

static gv_status check_spec(const struct gv_alloc_node_spec *s, struct gv_error *err)
{
    if (s->name == NULL || s->name[0] == '\0' || strlen(s->name) >= GV_ALLOC_NODE_MAX)
        return gv_error_set(err, GV_EINVAL, "node name is empty or longer than %d",
                            GV_ALLOC_NODE_MAX - 1);
    if (s->n_gpus > GV_ALLOC_MAX_NODE_GPUS)
        return gv_error_set(err, GV_EINVAL, "node %s: %zu GPUs (at most %d)", s->name, s->n_gpus,
                            GV_ALLOC_MAX_NODE_GPUS);
    if (s->cpu_milli < 0 || s->mem_mib < 0)
        return gv_error_set(err, GV_EINVAL, "node %s: negative capacity", s->name);
    for (size_t i = 0; i < s->n_gpus; i++) {
        const struct gv_alloc_gpu_spec *g = &s->gpus[i];
        if (g->uuid == NULL || g->uuid[0] == '\0' || strlen(g->uuid) >= GV_ALLOC_UUID_MAX)
            return gv_error_set(err, GV_EINVAL, "node %s: GPU %zu: uuid empty or too long",
                                s->name, i);
        if (g->model != NULL && strlen(g->model) >= GV_ALLOC_MODEL_MAX)
            return gv_error_set(err, GV_EINVAL, "node %s: GPU %s: model name too long", s->name,
                                g->uuid);
        if ((unsigned)g->mode > GV_ALLOC_GPU_MPS)
            return gv_error_set(err, GV_EINVAL, "node %s: GPU %s: bad mode", s->name, g->uuid);
        /* what struct gpu holds (alloc_internal.h); the inventory contract
         * is far narrower */
        if (g->index > UINT16_MAX || g->split > UINT16_MAX || g->numa < INT16_MIN ||
            g->numa > INT16_MAX)
            return gv_error_set(err, GV_EINVAL,
                                "node %s: GPU %s: index %u, split %u or NUMA node %d out of range",
                                s->name, g->uuid, g->index, g->split, (int)g->numa);
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->gpus[j].uuid, g->uuid) == 0)
                return gv_error_set(err, GV_EINVAL, "node %s: GPU uuid %s appears twice", s->name,
                                    g->uuid);
    }
    return GV_OK;
}

void alloc_pod_apply(struct node *n, const struct pod *p, int sign)
{
    n->cpu_used += sign * p->cpu;
    n->mem_used += sign * p->mem;
    for (uint32_t i = 0; i < p->n_devs; i++) {
        const struct pod_dev *d = &p->devs[i];
        if (d->gpu == UINT32_MAX)
            continue;
        struct gpu *g = &n->gpus[d->gpu];
        if (sign > 0) {
            g->used_mem += d->mem;
            g->used_milli += d->milli;
            g->tasks++;
            g->whole += d->whole;
        } else {
            g->used_mem -= d->mem;
            g->used_milli -= d->milli;
            g->tasks--;
            g->whole -= d->whole;
        }
    }
}

static const char *model_of(const struct gv_alloc_gpu_spec *g)
{
    return g->model ? g->model : "";
}

static bool same_model(const struct gv_alloc_node_spec *s, size_t i)
{
    return i > 0 && strcmp(model_of(&s->gpus[i]), model_of(&s->gpus[i - 1])) == 0;
}

/* struct gpu's uuid_off reaches the last uuid of the largest block. */
_Static_assert(GV_ALLOC_MAX_NODE_GPUS * (sizeof(struct gpu) + GV_ALLOC_UUID_MAX) <= UINT16_MAX,
               "a GPU block's uuid offsets must fit 16 bits");

gv_status gv_alloc_node_upsert(struct gv_alloc_cluster *c, const struct gv_alloc_node_spec *s,
                               struct gv_error *err)
{
    gv_status rc = check_spec(s, err);
    if (rc != GV_OK)
        return rc;
    /* One block: the GPU array, then their uuid strings, then the node's
     * name (models are the cluster's, interned; a block of its own for the
     * name cost ~20 bytes a node in malloc overhead). */
    size_t n_slots = s->n_gpus ? s->n_gpus : 1, text = strlen(s->name) + 1;
    for (size_t i = 0; i < s->n_gpus; i++)
        text += strlen(s->gpus[i].uuid) + 1;
    struct gpu *gpus = calloc(1, n_slots * sizeof(*gpus) + text);
    char *strings = NULL;
    /* The node's labels are not kept: nothing in the engine matches on
     * them (node affinity is kube-scheduler's), and a real node's 30-odd
     * labels (GFD's included) would cost kilobytes per node. */
    if (gpus == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    strings = (char *)(gpus + n_slots);
    char *name = strings + text - (strlen(s->name) + 1);
    memcpy(name, s->name, strlen(s->name) + 1);
    for (size_t i = 0; i < s->n_gpus; i++) {
        const struct gv_alloc_gpu_spec *gs = &s->gpus[i];
        struct gpu *g = &gpus[i];
        size_t ul = strlen(gs->uuid) + 1;
        memcpy(strings, gs->uuid, ul);
        g->uuid_off = (uint16_t)(strings - (char *)g);
        strings += ul;
        g->index = (uint16_t)gs->index;
        g->mem_mib = gs->mem_mib;
        g->split = (uint16_t)(gs->split ? gs->split : c->cfg.default_split);
        g->numa = (int16_t)gs->numa;
        g->healthy = gs->healthy;
        g->mode = (uint8_t)gs->mode;
        if (same_model(s, i)) {
            g->model_name = gpus[i - 1].model_name;
            g->model_id = gpus[i - 1].model_id;
        } else if ((rc = model_name_intern(c, model_of(gs), &g->model_name, err)) != GV_OK ||
                   (rc = alloc_model_intern(c, model_of(gs), &g->model_id, err)) != GV_OK) {
            goto fail;
        }
    }
    uint32_t idx = strmap_get(&c->node_map, s->name);
    struct node *n;
    if (idx == UINT32_MAX) {
        /* reuse a free slot to keep the array dense (only when there is
         * one: scanning for none made adding n nodes O(n^2)) */
        idx = c->live_nodes < c->n_nodes ? 0 : c->n_nodes;
        for (; idx < c->n_nodes && c->nodes[idx].name != NULL; idx++)
            ;
        if (idx == c->n_nodes) {
            if (c->n_nodes == c->cap_nodes) {
                uint32_t ncap = c->cap_nodes ? c->cap_nodes * 2 : 64;
                struct node *nn = realloc(c->nodes, ncap * sizeof(*nn));
                if (nn == NULL) {
                    rc = gv_error_set(err, GV_ENOMEM, "out of memory");
                    goto fail;
                }
                c->nodes = nn;
                c->cap_nodes = ncap;
            }
            memset(&c->nodes[idx], 0, sizeof(c->nodes[idx]));
        }
        if (strmap_put(&c->node_map, name, idx) != GV_OK) {
            rc = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
        if (idx == c->n_nodes)
            c->n_nodes++;
        c->live_nodes++;
        n = &c->nodes[idx];
        n->name = name;
        n->cls = UINT32_MAX;
    } else {
        n = &c->nodes[idx];
        fgd_free_account(c, n, -1);
        /* Move placed pods onto the new GPU list by uuid. */
        for (struct pod *p = n->pods; p != NULL; p = p->next) {
            alloc_pod_apply(n, p, -1);
            for (uint32_t i = 0; i < p->n_devs; i++) {
                struct pod_dev *d = &p->devs[i];
                if (d->gpu == UINT32_MAX)
                    continue;
                const char *uuid = gpu_uuid(&n->gpus[d->gpu]);
                d->gpu = UINT32_MAX;
                for (uint32_t j = 0; j < s->n_gpus; j++)
                    if (strcmp(gpu_uuid(&gpus[j]), uuid) == 0)
                        d->gpu = j;
            }
        }
        fgd_supply_account(c, n, -1);
        strmap_del(&c->node_map, n->name); /* the old name: in the old block, freed below */
        n->name = name;
        strmap_put(&c->node_map, name, idx); /* cannot grow: same count */
        free(n->gpus);
    }
    n->cpu_cap = s->cpu_milli;
    n->mem_cap = s->mem_mib;
    n->gpus = gpus;
    n->n_gpus = (uint32_t)s->n_gpus;
    fgd_supply_account(c, n, +1);
    for (struct pod *p = n->pods; p != NULL; p = p->next)
        alloc_pod_apply(n, p, +1);
    fgd_free_account(c, n, +1);
    if (n->cpu_cap > c->max_cpu)
        c->max_cpu = n->cpu_cap;
    if (n->n_gpus > c->max_gpus)
        c->max_gpus = n->n_gpus;
    alloc_node_resign(n);
    index_node_update(c, idx);
    return GV_OK;
fail:
    free(gpus);
    return rc;
}

static void pod_forget(struct gv_alloc_cluster *c, struct pod *p)
{
    uint32_t slot = strmap_get(&c->pod_map, p->uid);
    strmap_del(&c->pod_map, p->uid);
    if (slot != UINT32_MAX) {
        c->pods[slot] = NULL;
        c->free_pod_slots[c->n_free_pod_slots++] = slot;
    }
    c->live_pods--;
    free(p);
}

gv_status gv_alloc_node_remove(struct gv_alloc_cluster *c, const char *name, struct gv_error *err)
{
    uint32_t idx = strmap_get(&c->node_map, name);
    if (idx == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", name);
    struct node *n = &c->nodes[idx];
    while (n->pods != NULL) {
        struct pod *p = n->pods;
        n->pods = p->next;
        pod_forget(c, p);
    }
    index_node_remove(c, idx);
    fgd_free_account(c, n, -1);
    fgd_supply_account(c, n, -1);
    strmap_del(&c->node_map, n->name);
    node_clear(n);
    c->live_nodes--;
    return GV_OK;
}

bool gv_alloc_node_exists(const struct gv_alloc_cluster *c, const char *name)
{
    return strmap_get(&c->node_map, name) != UINT32_MAX;
}

static void usage_fill(const struct gpu *g, struct gv_alloc_gpu_usage *out)
{
    out->mem_mib = g->used_mem;
    out->milli = g->used_milli;
    out->tasks = g->tasks;
    out->uuid = gpu_uuid(g);
}

gv_status gv_alloc_gpu_usage_get(const struct gv_alloc_cluster *c, const char *node,
                                 const char *uuid, struct gv_alloc_gpu_usage *out,
                                 struct gv_error *err)
{
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", node);
    const struct node *n = &c->nodes[idx];
    for (uint32_t i = 0; i < n->n_gpus; i++) {
        if (strcmp(gpu_uuid(&n->gpus[i]), uuid) == 0) {
            usage_fill(&n->gpus[i], out);
            return GV_OK;
        }
    }
    return gv_error_set(err, GV_ENOTFOUND, "node %s: no GPU %s", node, uuid);
}

gv_status gv_alloc_gpu_usage_at(const struct gv_alloc_cluster *c, const char *node, uint32_t i,
                                struct gv_alloc_gpu_usage *out, struct gv_error *err)
{
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", node);
    const struct node *n = &c->nodes[idx];
    if (i >= n->n_gpus)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: no GPU #%u (it has %u)", node, i,
                            n->n_gpus);
    usage_fill(&n->gpus[i], out);
    return GV_OK;
}

void gv_alloc_cluster_totals(const struct gv_alloc_cluster *c, struct gv_alloc_totals *t)
{
    memset(t, 0, sizeof(*t));
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        const struct node *n = &c->nodes[i];
        if (n->name == NULL)
            continue;
        t->nodes++;
        for (uint32_t j = 0; j < n->n_gpus; j++) {
            const struct gpu *g = &n->gpus[j];
            t->gpus++;
            if (!g->healthy)
                continue;
            t->milli_capacity += GV_ALLOC_MILLI;
            t->milli_used += g->used_milli;
            t->mem_capacity_mib += g->mem_mib;
            t->mem_used_mib += g->used_mem;
        }
    }
    t->pods = c->live_pods;
}

uint32_t gv_alloc_node_count(const struct gv_alloc_cluster *c)
{
    return c->live_nodes;
}

bool gv_alloc_is_placed(const struct gv_alloc_cluster *c, const char *uid)
{
    return strmap_get(&c->pod_map, uid) != UINT32_MAX;
}

/* --- place / release ----------------------------------------------------- */

gv_status gv_alloc_place(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                         const struct gv_alloc_assignment *a, struct gv_error *err)
{
    if (req->uid[0] == '\0')
        return gv_error_set(err, GV_EINVAL, "pod %s/%s: no uid", req->ns, req->name);
    if (gv_alloc_is_placed(c, req->uid))
        return gv_error_set(err, GV_EEXIST, "pod %s: already placed", req->uid);
    uint32_t idx = strmap_get(&c->node_map, a->node);
    if (idx == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", a->node);
    struct node *n = &c->nodes[idx];
    if (a->n_containers != req->n_containers)
        return gv_error_set(err, GV_EINVAL, "pod %s: assignment has %u containers, request %u",
                            req->uid, a->n_containers, req->n_containers);
    uint32_t ndev = 0;
    for (uint32_t i = 0; i < a->n_containers; i++) {
        const struct gv_alloc_container_assign *ca = &a->containers[i];
        if (strcmp(ca->name, req->containers[i].name) != 0 ||
            ca->n_devices != req->containers[i].num_gpu || ca->n_devices > GV_ALLOC_MAX_DEVICES)
            return gv_error_set(err, GV_EINVAL,
                                "pod %s: assignment for container \"%s\" does not match the "
                                "request (container \"%s\", %u GPUs)",
                                req->uid, ca->name, req->containers[i].name,
                                req->containers[i].num_gpu);
        ndev += ca->n_devices;
    }
    if (n->cpu_cap > 0 && n->cpu_used + req->cpu_milli > n->cpu_cap)
        return gv_error_set(err, GV_ENOFIT, "node %s: insufficient cpu", n->name);
    if (n->mem_cap > 0 && n->mem_used + req->mem_mib > n->mem_cap)
        return gv_error_set(err, GV_ENOFIT, "node %s: insufficient memory", n->name);
    struct pod *p = calloc(1, sizeof(*p) + ndev * sizeof(p->devs[0]));
    if (p == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    snprintf(p->uid, sizeof(p->uid), "%s", req->uid);
    p->node = idx;
    p->cpu = req->cpu_milli;
    p->mem = req->mem_mib;
    gv_status rc = GV_OK;
    fgd_free_account(c, n, -1);
    /* Apply device by device so that two containers sharing a GPU are
     * checked against each other; roll back on the first misfit. */
    for (uint32_t i = 0; i < a->n_containers && rc == GV_OK; i++) {
        const struct gv_alloc_container_assign *ca = &a->containers[i];
        for (uint32_t j = 0; j < ca->n_devices; j++) {
            const struct gv_alloc_device *dv = &ca->devices[j];
            uint32_t gi = UINT32_MAX;
            for (uint32_t k = 0; k < n->n_gpus; k++)
                if (strcmp(gpu_uuid(&n->gpus[k]), dv->uuid) == 0)
                    gi = k;
            for (uint32_t k = 0; k < j; k++)
                if (strcmp(ca->devices[k].uuid, dv->uuid) == 0)
                    gi = UINT32_MAX - 1;
            if (gi == UINT32_MAX || gi == UINT32_MAX - 1) {
                rc = gv_error_set(err, GV_EINVAL, "pod %s: container \"%s\": GPU %s %s", req->uid,
                                  ca->name, dv->uuid,
                                  gi == UINT32_MAX ? "is not on the node" : "listed twice");
                break;
            }
            struct gpu *g = &n->gpus[gi];
            if (dv->milli > GV_ALLOC_MILLI || !alloc_gpu_can_host(g, dv->milli, dv->mem_mib)) {
                rc = gv_error_set(err, GV_ENOFIT,
                                  "pod %s: container \"%s\": GPU %s cannot host %llu MiB / %u milli",
                                  req->uid, ca->name, dv->uuid, (unsigned long long)dv->mem_mib,
                                  dv->milli);
                break;
            }
            struct pod_dev *d = &p->devs[p->n_devs++];
            d->gpu = gi;
            d->mem = dv->mem_mib;
            d->milli = dv->milli;
            d->whole = dv->milli >= GV_ALLOC_MILLI || g->mode == GV_ALLOC_GPU_EXCLUSIVE;
            g->used_mem += d->mem;
            g->used_milli += d->milli;
            g->tasks++;
            g->whole += d->whole;
        }
    }
    if (rc == GV_OK) {
        uint32_t slot;
        if (c->n_free_pod_slots > 0) {
            slot = c->free_pod_slots[--c->n_free_pod_slots];
        } else {
            if (c->n_pods == c->cap_pods) {
                uint32_t ncap = c->cap_pods ? c->cap_pods * 2 : 256;
                struct pod **np = realloc(c->pods, ncap * sizeof(*np));
                uint32_t *nf = realloc(c->free_pod_slots, ncap * sizeof(*nf));
                if (np != NULL)
                    c->pods = np;
                if (nf != NULL)
                    c->free_pod_slots = nf;
                if (np == NULL || nf == NULL) {
                    rc = gv_error_set(err, GV_ENOMEM, "out of memory");
                    goto undo;
                }
                c->cap_pods = ncap;
            }
            slot = c->n_pods++;
        }
        c->pods[slot] = p;
        if (strmap_put(&c->pod_map, p->uid, slot) != GV_OK) {
            c->pods[slot] = NULL;
            c->free_pod_slots[c->n_free_pod_slots++] = slot;
            rc = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto undo;
        }
        n->cpu_used += p->cpu;
        n->mem_used += p->mem;
        p->next = n->pods;
        if (n->pods != NULL)
            n->pods->prev = p;
        n->pods = p;
        c->live_pods++;
        fgd_free_account(c, n, +1);
        alloc_node_resign(n);
        index_node_update(c, idx);
        return GV_OK;
    }
undo:
    for (uint32_t i = 0; i < p->n_devs; i++) {
        struct gpu *g = &n->gpus[p->devs[i].gpu];
        g->used_mem -= p->devs[i].mem;
        g->used_milli -= p->devs[i].milli;
        g->tasks--;
        g->whole -= p->devs[i].whole;
    }
    fgd_free_account(c, n, +1);
    free(p);
    return rc;
}

gv_status gv_alloc_release(struct gv_alloc_cluster *c, const char *uid, struct gv_error *err)
{
    uint32_t slot = strmap_get(&c->pod_map, uid);
    if (slot == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "pod %s: not placed", uid);
    struct pod *p = c->pods[slot];
    struct node *n = &c->nodes[p->node];
    fgd_free_account(c, n, -1);
    alloc_pod_apply(n, p, -1);
    fgd_free_account(c, n, +1);
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        n->pods = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    uint32_t idx = p->node;
    pod_forget(c, p);
    alloc_node_resign(n);
    index_node_update(c, idx);
    return GV_OK;
}
