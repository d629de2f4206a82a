/*
 * Which pods the engine holds on a node: lets a caller that keeps its own
 * record of placements (the scheduler's accounting self-check) find
 * placements it has no record of.  Additive; reads the node's pod list only.
 */
#include "alloc/alloc_internal.h"

size_t gv_alloc_node_pods(const struct gv_alloc_cluster *c, const char *node, const char **uids,
                          size_t cap)
{
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX)
        return 0;
    size_t n = 0;
    for (const struct pod *p = c->nodes[idx].pods; p != NULL; p = p->next, n++)
        if (n < cap)
            uids[n] = p->uid;
    return n;
}
