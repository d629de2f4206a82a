/*
 * The sharing-mode table and what runs every mode the same way: see
 * gv_mode.h and docs/node-agent.md ("Sharing modes").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"
#include "node/modes/gv_mode.h"
#include "node/kubelet/gv_plugin.h"
#include "node/modes/modes_internal.h"

static const struct gv_mode *const table[GV_INVENTORY_MODE_COUNT] = {
#define GV_X_MODE_ENTRY(id, name, whole) [GV_INVENTORY_MODE_##id] = &gv_mode_##id,
    GV_INVENTORY_MODE_LIST(GV_X_MODE_ENTRY)
#undef GV_X_MODE_ENTRY
};

const struct gv_mode *gv_mode_get(enum gv_inventory_mode id)
{
    return (unsigned)id < GV_INVENTORY_MODE_COUNT ? table[id] : NULL;
}


gv_status gv_modes_new(const struct gv_mode_env *env, struct gv_modes **out, struct gv_error *err)
{
    struct gv_modes *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return gv_error_set(err, GV_ENOMEM, "modes: out of memory");
    m->env = *env;
    for (int i = 0; i < GV_INVENTORY_MODE_COUNT; i++) {
        if (table[i]->open == NULL)
            continue;
        if (table[i]->open(&m->env, &m->state[i], err) != GV_OK) {
            gv_error_prefix(err, "mode %s", gv_inventory_mode_name((enum gv_inventory_mode)i));
            gv_modes_free(m);
            return err ? err->code : GV_EINVAL;
        }
    }
    *out = m;
    return GV_OK;
}

void gv_modes_free(struct gv_modes *m)
{
    if (m == NULL)
        return;
    for (int i = GV_INVENTORY_MODE_COUNT - 1; i >= 0; i--)
        if (table[i]->close && m->state[i])
            table[i]->close(m->state[i]);
    free(m);
}

/* ---- one rebuild ------------------------------------------------------------------ */

gv_status gv_modes_build(struct gv_modes *m, const struct gv_node_config *cfg,
                         const struct gv_gpu *gpus, size_t n, struct gv_allocator_gpu **units_out,
                         size_t *n_units, struct gv_mode_adv *adv, struct gv_error *err)
{
    /* a unit per GPU for most modes; MIG may make up to 7 of one GPU */
    size_t cap = 8 * n + 1 + GV_MODE_HOST_UNITS, nu = 0;
    struct gv_allocator_gpu *units = calloc(cap, sizeof(*units));
    enum gv_inventory_mode *owner = calloc(cap, sizeof(*owner));
    if (units == NULL || owner == NULL) {
        free(units);
        free(owner);
        return gv_error_set(err, GV_ENOMEM, "modes: out of memory");
    }
    for (int id = 0; id < GV_INVENTORY_MODE_COUNT; id++) {
        if (table[id]->discover_host == NULL || nu >= GV_MODE_HOST_UNITS)
            continue;
        size_t got = table[id]->discover_host(gv_modes_state(m, (enum gv_inventory_mode)id), cfg,
                                              units + nu, GV_MODE_HOST_UNITS - nu);
        for (size_t k = 0; k < got; k++)
            owner[nu + k] = (enum gv_inventory_mode)id;
        nu += got;
    }
    for (size_t i = 0; i < n; i++) {
        struct gv_node_gpu_settings s;
        if (!gv_node_config_gpu(cfg, gpus[i].uuid, gpus[i].index, &s))
            continue; /* excluded */
        if (gpus[i].mig && s.mig_vgpu)
            s.mode = GV_INVENTORY_MODE_VGPU; /* each MIG device sliced (mode_vgpu.c) */
        else if (gpus[i].mig && strcmp(cfg->mig_strategy, "none") != 0)
            s.mode = GV_INVENTORY_MODE_MIG; /* its MIG devices are served (mode_mig.c) */
        const struct gv_mode *md = gv_mode_get(s.mode);
        char why[256] = "";
        size_t got = md ? md->discover(gv_modes_state(m, s.mode), &gpus[i], &s, units + nu,
                                       cap - nu, why, sizeof(why))
                        : 0;
        if (got == 0) {
            gv_warn("GPU %u (%s): not advertised: %s", gpus[i].index, gpus[i].uuid,
                    md ? why : "unknown sharing mode");
            continue;
        }
        for (size_t k = 0; k < got; k++)
            owner[nu + k] = s.mode;
        nu += got;
    }
    /* sync every mode with its units (also with none: a mode stops its helpers) */
    struct gv_allocator_gpu *mine = calloc(nu + 1, sizeof(*mine));
    if (mine == NULL) {
        free(units);
        free(owner);
        return gv_error_set(err, GV_ENOMEM, "modes: out of memory");
    }
    for (int id = 0; id < GV_INVENTORY_MODE_COUNT; id++) {
        size_t k = 0;
        for (size_t i = 0; i < nu; i++)
            if (owner[i] == (enum gv_inventory_mode)id)
                mine[k++] = units[i];
        if (table[id]->sync)
            table[id]->sync(gv_modes_state(m, (enum gv_inventory_mode)id), mine, k);
    }
    free(mine);
    for (size_t i = 0; i < nu; i++) {
        const struct gv_mode *md = table[owner[i]];
        void *st = gv_modes_state(m, owner[i]);
        char why[128] = "";
        if (units[i].gpu.healthy && md->health && !md->health(st, &units[i], why, sizeof(why))) {
            units[i].gpu.healthy = false;
            snprintf(units[i].gpu.reason, sizeof(units[i].gpu.reason), "%s", why);
        }
        if (adv)
            md->advertise(st, cfg, &units[i], adv);
    }
    free(owner);
    if (adv && adv->oom) {
        free(units);
        return gv_error_set(err, GV_ENOMEM, "modes: out of memory building the device list");
    }
    *units_out = units;
    *n_units = nu;
    return GV_OK;
}
