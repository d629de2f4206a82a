/*
 * Exclusive mode: whole GPUs, one container each, no interposer (NVIDIA's
 * device plugin without sharing).  Device ID = the GPU's UUID.
 */
#include "node/kubelet/gv_grpc.h"
#include "node/modes/gv_mode.h"

static size_t discover(void *st, const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                       struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap)
{
    (void)st;
    size_t n = gv_mode_discover_gpu(g, s, out, cap, why, why_cap);
    if (n)
        out->settings.split = 1; /* a GPU goes to one container */
    return n;
}

static void advertise(void *st, const struct gv_node_config *cfg, const struct gv_allocator_gpu *u,
                      struct gv_mode_adv *adv)
{
    (void)st;
    gv_mode_advertise_replicas(adv, gv_mode_resource(cfg, u), u, 1, true);
}

static int allocate(void *st, const struct gv_mode_alloc *a, char *msg, size_t cap)
{
    (void)st, (void)msg, (void)cap;
    for (size_t i = 0; i < a->n; i++)
        gv_mode_answer_visible(a->answer, a->units[i].gpu.uuid);
    return GV_GRPC_OK;
}

const struct gv_mode gv_mode_EXCLUSIVE = {
    .id = GV_INVENTORY_MODE_EXCLUSIVE,
    .discover = discover,
    .advertise = advertise,
    .allocate = allocate,
};
