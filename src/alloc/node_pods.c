/*
 * Which pods the engine holds on a node: lets a caller that keeps its own
 * record of placements (the scheduler's accounting self-check) find
 * placements it has no record of, and the preempt verb its candidate
 * victims without a lookup per pod of its own.  Reads (and marks) the
 * node's pod list only.
 */
#include <string.h>

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

gv_status gv_alloc_pod_set_victim(struct gv_alloc_cluster *c, const char *uid,
                                  const char *bound_node, int32_t priority, struct gv_error *err)
{
    uint32_t slot = strmap_get(&c->pod_map, uid);
    if (slot == UINT32_MAX)
        return gv_error_set(err, GV_ENOTFOUND, "pod %s: not placed", uid);
    struct pod *p = c->pods[slot];
    p->victim = bound_node != NULL && strcmp(c->nodes[p->node].name, bound_node) == 0;
    p->priority = priority;
    return GV_OK;
}

size_t gv_alloc_node_victims(const struct gv_alloc_cluster *c, const char *node,
                             struct gv_alloc_victim *out, size_t cap)
{
    uint32_t idx = strmap_get(&c->node_map, node);
    if (idx == UINT32_MAX)
        return 0;
    size_t n = 0;
    for (const struct pod *p = c->nodes[idx].pods; p != NULL; p = p->next)
        if (p->victim) {
            if (n < cap)
                out[n] = (struct gv_alloc_victim){.uid = p->uid, .priority = p->priority,
                                                  .ref = p};
            n++;
        }
    return n;
}
