/* Internal: ordering a container's candidate GPUs within a node (fit.c). */
#ifndef GV_ALLOC_GPU_ORDER_H
#define GV_ALLOC_GPU_ORDER_H

#include "alloc/alloc_internal.h"

struct alloc_cand {
    uint32_t gpu; /* index in the node's gpus */
    double share; /* free share, when the policy order needs it */
};

/* Applies HAMi's "numa" sort key (gv_alloc_request.gpu_numa) to c[0..nc). */
void alloc_order_numa(const struct node *n, struct alloc_cand *c, uint32_t nc, uint8_t numa);

/*
 * Moves the best-connected k of c[0..nc) to the front (NVLink over one PCIe
 * switch over one NUMA node), keeping the policy order among equals; no
 * change when the node publishes no interconnect groups or k < 2.
 */
void alloc_order_topology(const struct node *n, struct alloc_cand *c, uint32_t nc, uint32_t k);

#endif
