/*
 * Filter: does a request fit on a node, which GPUs would it get under the
 * GPU policy, and if not, why (the reason users read in kubectl describe).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "alloc/gpu_order.h"

gv_status alloc_view_init(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                          struct req_view *v, struct gv_error *err)
{
    memset(v, 0, sizeof(*v));
    v->req = req;
    v->model_ok = c->n_models <= sizeof(v->model_buf) ? v->model_buf : calloc(c->n_models, 1);
    if (v->model_ok == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    const char *use = req->constraint[GV_ALLOC_USE_TYPE];
    const char *nouse = req->constraint[GV_ALLOC_NOUSE_TYPE];
    for (uint32_t i = 0; i < c->n_models; i++) {
        bool ok = use == NULL || alloc_list_match(use, c->models[i], true);
        if (ok && nouse != NULL && alloc_list_match(nouse, c->models[i], true))
            ok = false;
        v->model_ok[i] = ok;
    }
    v->policy = req->node_policy >= 0 ? (gv_alloc_policy)req->node_policy : c->cfg.node_policy;
    v->gpu_policy =
        req->gpu_policy >= 0 ? (gv_alloc_gpu_policy)req->gpu_policy : c->cfg.gpu_policy;
    return GV_OK;
}

void alloc_view_fini(struct req_view *v)
{
    if (v->model_ok != v->model_buf)
        free(v->model_ok);
    v->model_ok = NULL;
}

bool alloc_gpu_allowed(const struct req_view *v, const struct gpu *g)
{
    const struct gv_alloc_request *r = v->req;
    if (!v->model_ok[g->model_id])
        return false;
    if (r->constraint[GV_ALLOC_USE_UUID] != NULL &&
        !alloc_list_match(r->constraint[GV_ALLOC_USE_UUID], gpu_uuid(g), false))
        return false;
    if (r->constraint[GV_ALLOC_NOUSE_UUID] != NULL &&
        alloc_list_match(r->constraint[GV_ALLOC_NOUSE_UUID], gpu_uuid(g), false))
        return false;
    return true;
}

/* Candidates in GPU-policy order (fewest free first for binpack, most for
 * spread; then by index).  At most 64 entries: insertion sort beats qsort's
 * indirect calls on the hot path. */
static void cand_sort(struct alloc_cand *c, uint32_t n, bool spread)
{
    for (uint32_t i = 1; i < n; i++) {
        struct alloc_cand x = c[i];
        uint32_t j = i;
        while (j > 0 && (spread ? c[j - 1].share < x.share : c[j - 1].share > x.share)) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

static void describe_need(const struct gv_alloc_container_req *cr, char *buf, size_t cap)
{
    int o = 0;
    if (cr->mem_kind == GV_ALLOC_MEM_PCT)
        o = snprintf(buf, cap, "%llu%% memory", (unsigned long long)cr->mem);
    else if (cr->mem > 0)
        o = snprintf(buf, cap, "%llu MiB", (unsigned long long)cr->mem);
    if (o < 0 || (size_t)o >= cap)
        return;
    if (cr->milli > 0) {
        const char *sep = o > 0 ? " and " : "";
        if (cr->milli % 10 == 0)
            snprintf(buf + o, cap - (size_t)o, "%s%u%% cores", sep, cr->milli / 10);
        else
            snprintf(buf + o, cap - (size_t)o, "%s%u.%u%% cores", sep, cr->milli / 10,
                     cr->milli % 10);
    } else if (o == 0) {
        snprintf(buf, cap, "any share");
    }
}

bool alloc_fit_node(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t node,
                    struct pick *p, char *reason, size_t reason_cap)
{
    const struct node *n = &c->nodes[node];
    const struct gv_alloc_request *r = v->req;
/* Formatting reasons costs more than the fit itself: only when asked. */
#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (reason != NULL)                                                                        \
            snprintf(reason, reason_cap, __VA_ARGS__);                                             \
    } while (0)
    if (n->cpu_cap > 0 && r->cpu_milli > n->cpu_cap - n->cpu_used) {
        WHY("insufficient cpu: %lldm free, need %lldm",
                 (long long)(n->cpu_cap - n->cpu_used), (long long)r->cpu_milli);
        return false;
    }
    if (n->mem_cap > 0 && r->mem_mib > n->mem_cap - n->mem_used) {
        WHY("insufficient memory: %lld MiB free, need %lld MiB",
                 (long long)(n->mem_cap - n->mem_used), (long long)r->mem_mib);
        return false;
    }
    p->n = 0;
    if (r->n_containers > 0 && n->n_gpus == 0) {
        WHY("node has no GPUs");
        return false;
    }
    struct gpu_load load[GV_ALLOC_MAX_NODE_GPUS];
    for (uint32_t i = 0; i < n->n_gpus; i++) {
        load[i] = own_load(&n->gpus[i]);
    }
    for (uint32_t ci = 0; ci < r->n_containers; ci++) {
        const struct gv_alloc_container_req *cr = &r->containers[ci];
        struct alloc_cand cands[GV_ALLOC_MAX_NODE_GPUS];
        uint32_t nc = 0, allowed = 0, mps = 0;
        for (uint32_t i = 0; i < n->n_gpus; i++) {
            const struct gpu *g = &n->gpus[i];
            if (!alloc_gpu_allowed(v, g))
                continue;
            allowed++;
            if (g->mode == GV_ALLOC_GPU_MPS && cr->num_gpu > 1) {
                mps++; /* one MPS client sees one GPU: the agent refuses more */
                continue;
            }
            uint64_t need = alloc_gpu_mem_need(g, cr->mem_kind, cr->mem);
            if (!load_can_host(g, &load[i], cr->milli, need))
                continue;
            if (r->gpu_mutex && load[i].tasks > 0)
                continue; /* HAMi's mutex: idle GPUs only */
            cands[nc].gpu = i;
            cands[nc].share = 0;
            nc++;
        }
        const char *pfx = r->n_containers > 1 ? "container " : "";
        const char *cn = r->n_containers > 1 ? cr->name : "";
        const char *colon = r->n_containers > 1 ? ": " : "";
        if (allowed == 0) {
            WHY("%s%s%sno GPU matches the pod's GPU type/uuid "
                     "constraints (node has %.48s)", pfx, cn, colon,
                n->n_gpus ? alloc_gpu_model(c, &n->gpus[0]) : "no GPU");
            return false;
        }
        char need[96] = "";
        if (nc < cr->num_gpu || r->numa_bind)
            if (reason != NULL)
                describe_need(cr, need, sizeof(need));
        if (nc < cr->num_gpu) {
            WHY("%s%s%sgpu %u/%u free but need %u with %s each%s%s", pfx, cn,
                     colon, nc, n->n_gpus, cr->num_gpu, need,
                     r->gpu_mutex ? " (mutex: idle GPUs only)" : "",
                     mps ? " (MPS GPUs serve containers asking one GPU only)" : "");
            return false;
        }
        if (nc > cr->num_gpu || (r->numa_bind && cr->num_gpu > 1)) {
            for (uint32_t k = 0; k < nc; k++)
                cands[k].share = load_free_share(&n->gpus[cands[k].gpu], &load[cands[k].gpu]);
            cand_sort(cands, nc, v->gpu_policy == GV_ALLOC_GPU_SPREAD);
            alloc_order_numa(n, cands, nc, r->gpu_numa);
        }
        if (r->numa_bind && cr->num_gpu > 1) {
            /* First NUMA node in policy order that has enough candidates. */
            bool found = false;
            for (uint32_t s = 0; s < nc && !found; s++) {
                uint32_t cnt = 0;
                for (uint32_t t = 0; t < nc; t++)
                    cnt += n->gpus[cands[t].gpu].numa == n->gpus[cands[s].gpu].numa;
                if (cnt >= cr->num_gpu) {
                    int32_t numa = n->gpus[cands[s].gpu].numa;
                    uint32_t o = 0;
                    for (uint32_t t = 0; t < nc; t++)
                        if (n->gpus[cands[t].gpu].numa == numa)
                            cands[o++] = cands[t];
                    nc = o;
                    found = true;
                }
            }
            if (!found) {
                WHY(
                         "%s%s%sgpu %u/%u free but need %u with %s each on one NUMA node", pfx,
                         cn, colon, nc, n->n_gpus, cr->num_gpu, need);
                return false;
            }
        }
        alloc_order_topology(n, cands, nc, cr->num_gpu);
        for (uint32_t k = 0; k < cr->num_gpu; k++) {
            uint32_t gi = cands[k].gpu;
            const struct gpu *g = &n->gpus[gi];
            uint64_t mem = alloc_gpu_mem_need(g, cr->mem_kind, cr->mem);
            p->gpu[p->n] = (uint8_t)gi;
            p->mem[p->n] = mem;
            p->milli[p->n++] = cr->milli;
            load[gi].mem += mem;
            load[gi].milli += cr->milli;
            load[gi].tasks++;
            load[gi].whole += cr->milli >= GV_ALLOC_MILLI || g->mode == GV_ALLOC_GPU_EXCLUSIVE;
        }
    }
    return true;
#undef WHY
}

uint32_t alloc_pick_apply(const struct node *n, const struct pick *p, uint8_t *idx,
                          struct gpu *after)
{
    uint32_t nch = 0;
    for (uint32_t k = 0; k < p->n; k++) {
        uint8_t gi = p->gpu[k];
        uint32_t j = 0;
        while (j < nch && idx[j] != gi)
            j++;
        if (j == nch) {
            idx[nch] = gi;
            after[nch++] = n->gpus[gi];
        }
        after[j].used_mem += p->mem[k];
        after[j].used_milli += p->milli[k];
        after[j].tasks++;
        after[j].whole += p->milli[k] >= GV_ALLOC_MILLI || after[j].mode == GV_ALLOC_GPU_EXCLUSIVE;
    }
    return nch;
}

void alloc_pick_assignment(const struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                           uint32_t node, const struct pick *p, struct gv_alloc_assignment *a)
{
    const struct node *n = &c->nodes[node];
    memcpy(a->node, n->name, strlen(n->name) + 1);
    a->n_containers = req->n_containers;
    uint32_t k = 0;
    for (uint32_t ci = 0; ci < req->n_containers; ci++) {
        struct gv_alloc_container_assign *ca = &a->containers[ci];
        memcpy(ca->name, req->containers[ci].name, sizeof(ca->name));
        ca->n_devices = req->containers[ci].num_gpu;
        for (uint32_t d = 0; d < ca->n_devices; d++, k++) {
            /* check_spec bounded it by GV_ALLOC_UUID_MAX */
            strcpy(ca->devices[d].uuid, gpu_uuid(&n->gpus[p->gpu[k]]));
            ca->devices[d].mem_mib = p->mem[k];
            ca->devices[d].milli = p->milli[k];
        }
    }
}

gv_status gv_alloc_filter(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                          const char *node, struct gv_alloc_fit *fit, struct gv_error *err)
{
    fit->fits = false;
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX) {
        snprintf(fit->reason, sizeof(fit->reason), "node %.200s is not known to gpuvisor", node);
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", node);
    }
    struct req_view v;
    gv_status rc = alloc_view_init(c, req, &v, err);
    if (rc != GV_OK)
        return rc;
    struct pick p;
    fit->reason[0] = '\0';
    fit->fits = alloc_fit_node(c, &v, idx, &p, fit->reason, sizeof(fit->reason));
    alloc_view_fini(&v);
    return GV_OK;
}
