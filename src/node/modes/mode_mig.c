/*
 * MIG: the MIG devices of a MIG-enabled GPU, one container each, no
 * interposer (NVIDIA's device plugin with migStrategy single or mixed;
 * docs/mig-cdi.md, "MIG").  A unit per MIG device, keyed by its MIG UUID;
 * the container sees it as NVIDIA_VISIBLE_DEVICES=MIG-<uuid>, as the CDI
 * device of that UUID, or (nvidiaRuntime false) as the parent GPU's node
 * plus the instance's nvidia-caps nodes.  GPUs with MIG enabled are routed
 * here by gv_modes_build when migStrategy is single or mixed.
 */
#include <stdio.h>
#include <string.h>

#include "node/kubelet/gv_grpc.h"
#include "node/modes/gv_mode.h"

size_t gv_mode_discover_migs(const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                             enum gv_inventory_mode mode, unsigned split,
                             struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap)
{
    if (!g->mig) {
        snprintf(why, why_cap, "MIG is not enabled on this GPU");
        return 0;
    }
    if (g->n_migs == 0) {
        /* NVIDIA's single strategy calls this invalid; mixed ignores such GPUs: nothing to serve */
        snprintf(why, why_cap, "MIG is enabled but no MIG device exists (set the geometry)");
        return 0;
    }
    size_t n = 0;
    for (unsigned k = 0; k < g->n_migs && n < cap; k++, n++) {
        const struct gv_mig *m = &g->migs[k];
        struct gv_allocator_gpu *u = &out[n];
        memset(u, 0, sizeof(*u));
        u->gpu = *g; /* health, NUMA, index, minor and the MIG list come from the parent */
        snprintf(u->gpu.uuid, sizeof(u->gpu.uuid), "%s", m->uuid);
        snprintf(u->gpu.model, sizeof(u->gpu.model), "%.60s MIG %.30s", g->model, m->profile);
        u->gpu.memory_mib = m->memory_mib;
        if (u->gpu.healthy && m->unhealthy) {
            /* an Xid of this instance alone (gpus.c): its siblings keep serving */
            u->gpu.healthy = false;
            snprintf(u->gpu.reason, sizeof(u->gpu.reason), "%s", m->reason);
        }
        u->settings = *s;
        u->settings.mode = mode;
        u->settings.split = split;
    }
    if (n < g->n_migs)
        snprintf(why, why_cap, "too many units");
    return n;
}

static size_t discover(void *st, const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                       struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap)
{
    (void)st;
    /* a MIG device goes to one container */
    return gv_mode_discover_migs(g, s, GV_INVENTORY_MODE_MIG, 1, out, cap, why, why_cap);
}

static void advertise(void *st, const struct gv_node_config *cfg, const struct gv_allocator_gpu *u,
                      struct gv_mode_adv *adv)
{
    (void)st;
    /* the profile is what follows " MIG " in the unit's model (discover above) */
    const char *p = strstr(u->gpu.model, " MIG ");
    char resource[160];
    if (strcmp(cfg->mig_strategy, "mixed") == 0 && p)
        snprintf(resource, sizeof(resource), "nvidia.com/mig-%s", p + 5);
    else
        snprintf(resource, sizeof(resource), "%s", gv_mode_resource(cfg, u));
    gv_mode_advertise_replicas(adv, resource, u, 1, true);
}

static int allocate(void *st, const struct gv_mode_alloc *a, char *msg, size_t cap)
{
    (void)st, (void)msg, (void)cap;
    for (size_t i = 0; i < a->n; i++)
        gv_mode_answer_visible(a->answer, a->units[i].gpu.uuid);
    return GV_GRPC_OK;
}

const struct gv_mode gv_mode_MIG = {
    .id = GV_INVENTORY_MODE_MIG,
    .discover = discover,
    .advertise = advertise,
    .allocate = allocate,
};
