/*
 * Topology-aware choice of a container's GPUs within the chosen node
 * (docs/alloc.md, "Topology"): the node agent publishes which GPUs share
 * NVLink or a PCIe switch (from NVML); a multi-GPU container gets the set
 * whose pairs are best connected.
 */
#include <string.h>

#include "alloc/gpu_order.h"
#include "common/gv_error.h"

gv_status gv_alloc_node_set_links(struct gv_alloc_cluster *c, const char *node,
                                  const uint32_t *nvlink_group, const uint32_t *pcie_group,
                                  size_t n, struct gv_error *err)
{
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "node %s: unknown", node);
    struct node *nd = &c->nodes[idx];
    if (n != nd->n_gpus)
        return gv_error_set(err, GV_EINVAL, "node %s: %zu link entries for %u GPUs", node, n,
                            nd->n_gpus);
    for (uint32_t i = 0; i < nd->n_gpus; i++) {
        uint32_t nv = nvlink_group ? nvlink_group[i] : 0, pc = pcie_group ? pcie_group[i] : 0;
        if (nv > UINT16_MAX || pc > UINT16_MAX)
            return gv_error_set(err, GV_ERANGE, "node %s: GPU %u: group id out of range", node,
                                i);
    }
    for (uint32_t i = 0; i < nd->n_gpus; i++) {
        nd->gpus[i].nvlink_group = (uint16_t)(nvlink_group ? nvlink_group[i] : 0);
        nd->gpus[i].pcie_group = (uint16_t)(pcie_group ? pcie_group[i] : 0);
    }
    return GV_OK;
}

/* How well two GPUs talk: NVLink 4, one PCIe switch 2, one NUMA node 1. */
static int pair_score(const struct gpu *a, const struct gpu *b)
{
    if (a->nvlink_group != 0 && a->nvlink_group == b->nvlink_group)
        return 4;
    if (a->pcie_group != 0 && a->pcie_group == b->pcie_group)
        return 2;
    return a->numa >= 0 && a->numa == b->numa ? 1 : 0;
}

/*
 * Greedy from each seed in policy order: add the candidate that raises the
 * set's pair score most (earliest in policy order on ties); keep the best
 * set, the earliest seed on ties.  Exact for groups that nest (an NVLink
 * island inside a switch inside a NUMA node), which is how machines are
 * built; cost nc^2 * k with nc <= 64.
 */
void alloc_order_topology(const struct node *n, struct alloc_cand *c, uint32_t nc, uint32_t k)
{
    if (k < 2 || nc <= k)
        return;
    bool any = false;
    for (uint32_t i = 0; i < nc && !any; i++)
        any = n->gpus[c[i].gpu].nvlink_group != 0 || n->gpus[c[i].gpu].pcie_group != 0;
    if (!any)
        return;
    uint8_t best[GV_ALLOC_MAX_NODE_GPUS], cur[GV_ALLOC_MAX_NODE_GPUS];
    int best_score = -1;
    for (uint32_t seed = 0; seed < nc; seed++) {
        bool in[GV_ALLOC_MAX_NODE_GPUS] = {false};
        uint32_t m = 0;
        int score = 0;
        cur[m++] = (uint8_t)seed;
        in[seed] = true;
        while (m < k) {
            int gain_best = -1;
            uint32_t pick = 0;
            for (uint32_t t = 0; t < nc; t++) {
                if (in[t])
                    continue;
                int gain = 0;
                for (uint32_t s = 0; s < m; s++)
                    gain += pair_score(&n->gpus[c[t].gpu], &n->gpus[c[cur[s]].gpu]);
                if (gain > gain_best) {
                    gain_best = gain;
                    pick = t;
                }
            }
            cur[m++] = (uint8_t)pick;
            in[pick] = true;
            score += gain_best;
        }
        if (score > best_score) {
            best_score = score;
            memcpy(best, cur, k);
        }
    }
    /* the chosen ones first, each group in policy order */
    struct alloc_cand out[GV_ALLOC_MAX_NODE_GPUS];
    bool chosen[GV_ALLOC_MAX_NODE_GPUS] = {false};
    for (uint32_t i = 0; i < k; i++)
        chosen[best[i]] = true;
    uint32_t o = 0;
    for (uint32_t i = 0; i < nc; i++)
        if (chosen[i])
            out[o++] = c[i];
    for (uint32_t i = 0; i < nc; i++)
        if (!chosen[i])
            out[o++] = c[i];
    memcpy(c, out, nc * sizeof(*c));
}
