/*
 * HAMi's gpu-scheduler-policy keys beside binpack / spread (docs/alloc.md,
 * "GPU policy chains"): the order of a container's candidate GPUs within the
 * chosen node.  fit.c sorts by free share first; this refines it.
 */
#include "alloc/gpu_order.h"

/*
 * numa 1: NUMA node first (lowest id), the policy order within it.
 * numa 2: the policy order, ties in free share broken by NUMA node.
 * Insertion sort: stable, and at most 64 candidates.
 */
void alloc_order_numa(const struct node *n, struct alloc_cand *c, uint32_t nc, uint8_t numa)
{
    if (numa == 0)
        return;
    for (uint32_t i = 1; i < nc; i++) {
        struct alloc_cand x = c[i];
        int32_t xn = n->gpus[x.gpu].numa;
        uint32_t j = i;
        while (j > 0) {
            const struct alloc_cand *y = &c[j - 1];
            int32_t yn = n->gpus[y->gpu].numa;
            bool after = numa == 1 ? yn > xn : (y->share == x.share && yn > xn);
            if (!after)
                break;
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}
