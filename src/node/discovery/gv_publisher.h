/*
 * Publishes this node's GPU inventory (annotation gpuvisor.io/node-gpus,
 * rewritten only when it changes), a heartbeat (gpuvisor.io/node-heartbeat)
 * and GFD-style labels (nvidia.com/gpu.product, ...) on the Node object,
 * from a thread of its own that rides out API outages with backoff.
 */
#ifndef GV_NODE_PUBLISHER_H
#define GV_NODE_PUBLISHER_H

#include <jansson.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "contracts/inventory.h"
#include "kube/gv_kube.h"

struct gv_publisher;

gv_status gv_publisher_new(struct gv_kube_client *kube, const char *node, int64_t heartbeat_ms,
                           struct gv_publisher **out, struct gv_error *err);
void gv_publisher_free(struct gv_publisher *p);

/* New inventory (any thread); written at once when it differs from the last one. */
gv_status gv_publisher_update(struct gv_publisher *p, const struct gv_inventory *inv,
                              struct gv_error *err);
/* Inventory writes that reached the API server so far. */
uint64_t gv_publisher_writes(struct gv_publisher *p);

/* NVIDIA GFD's labels for an inventory, stamped now: a new JSON object of strings. */
json_t *gv_publisher_labels(const struct gv_inventory *inv);
/* Adds a GPU's MIG devices to inv's per-profile summary (labels.c). */
struct gv_gpu;
void gv_labels_add_migs(struct gv_inventory *inv, const struct gv_gpu *g);
/* The same with a given gfd.timestamp (Unix seconds): labels.c. */
json_t *gv_labels_gfd(const struct gv_inventory *inv, long long timestamp);

#endif
