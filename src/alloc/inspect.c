/*
 * Read-only views of the cluster model for observers (scheduler metrics and
 * dashboard, `kubectl gpuvisor inspect`): a GPU's capacity beside its usage,
 * and the cluster's fragmentation under the learned workload.  Nothing here
 * changes the model, so observers can share the decision makers' numbers
 * instead of recomputing them.
 */
#include <string.h>

#include "alloc/alloc_internal.h"

gv_status gv_alloc_gpu_info_at(const struct gv_alloc_cluster *c, const char *node, uint32_t i,
                               struct gv_alloc_gpu_info *out, struct gv_error *err)
{
    /* the usage call checks node and index (and says what is wrong) */
    struct gv_alloc_gpu_usage u;
    gv_status st = gv_alloc_gpu_usage_at(c, node, i, &u, err);
    if (st != GV_OK)
        return st;
    const struct gpu *g = &c->nodes[strmap_get(&c->node_map, node)].gpus[i];
    memset(out, 0, sizeof(*out));
    out->uuid = gpu_uuid(g);
    out->model = alloc_gpu_model(c, g);
    out->index = g->index;
    out->mem_mib = g->mem_mib;
    out->split = g->split;
    out->healthy = g->healthy;
    out->mode = g->mode;
    out->used_mem_mib = u.mem_mib;
    out->used_milli = u.milli;
    out->tasks = u.tasks;
    return GV_OK;
}

uint32_t gv_alloc_node_gpu_count(const struct gv_alloc_cluster *c, const char *node)
{
    uint32_t idx = strmap_get(&c->node_map, node);
    return idx == UINT32_MAX ? 0 : c->nodes[idx].n_gpus;
}

void gv_alloc_cluster_fragmentation(struct gv_alloc_cluster *c, struct gv_alloc_frag *out)
{
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i].name == NULL)
            continue;
        out->free_milli += c->nodes[i].free_share;
        out->frag_milli += fgd_node_frag(c, i);
    }
    out->ratio = out->free_milli > 0 ? out->frag_milli / out->free_milli : 0;
}
