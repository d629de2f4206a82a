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

static const struct gv_mode *const table[GV_INVENTORY_MODE_COUNT] = {
#define GV_X_MODE_ENTRY(id, name, whole) [GV_INVENTORY_MODE_##id] = &gv_mode_##id,
    GV_INVENTORY_MODE_LIST(GV_X_MODE_ENTRY)
#undef GV_X_MODE_ENTRY
};

const struct gv_mode *gv_mode_get(enum gv_inventory_mode id)
{
    return (unsigned)id < GV_INVENTORY_MODE_COUNT ? table[id] : NULL;
}

struct gv_modes {
    struct gv_mode_env env;
    void *state[GV_INVENTORY_MODE_COUNT];
};

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

void *gv_modes_state(const struct gv_modes *m, enum gv_inventory_mode id)
{
    return m && (unsigned)id < GV_INVENTORY_MODE_COUNT ? m->state[id] : NULL;
}

const struct gv_mode_env *gv_modes_env(const struct gv_modes *m)
{
    return m ? &m->env : NULL;
}

/* ---- advertised devices per resource name ------------------------------------ */

struct adv_res {
    char name[128];
    struct gv_plugin_device *devs;
    size_t n, cap;
};

struct gv_mode_adv {
    struct adv_res *res;
    size_t n;
    bool oom;
};

struct gv_mode_adv *gv_mode_adv_new(void)
{
    return calloc(1, sizeof(struct gv_mode_adv));
}

void gv_mode_adv_free(struct gv_mode_adv *adv)
{
    if (adv == NULL)
        return;
    for (size_t i = 0; i < adv->n; i++)
        free(adv->res[i].devs);
    free(adv->res);
    free(adv);
}

static struct adv_res *adv_res(struct gv_mode_adv *adv, const char *resource)
{
    for (size_t i = 0; i < adv->n; i++)
        if (strcmp(adv->res[i].name, resource) == 0)
            return &adv->res[i];
    if (strlen(resource) >= sizeof(adv->res[0].name))
        return NULL;
    void *p = realloc(adv->res, (adv->n + 1) * sizeof(*adv->res));
    if (p == NULL)
        return NULL;
    adv->res = p;
    struct adv_res *r = &adv->res[adv->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", resource);
    return r;
}

bool gv_mode_adv_add(struct gv_mode_adv *adv, const char *resource, const char *id,
                     const struct gv_gpu *g)
{
    struct gv_plugin_device d = {.healthy = g->healthy, .numa = g->numa, .gpu = (int)g->index};
    int len = snprintf(d.id, sizeof(d.id), "%s", id);
    if (len <= 0 || (size_t)len >= sizeof(d.id)) {
        gv_error("GPU %s: device ID %s would exceed 63 characters: not advertised", g->uuid, id);
        return false;
    }
    struct adv_res *r = adv_res(adv, resource);
    if (r && r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        void *p = realloc(r->devs, cap * sizeof(*r->devs));
        if (p) {
            r->devs = p;
            r->cap = cap;
        }
    }
    if (r == NULL || r->n == r->cap) {
        adv->oom = true;
        gv_error("GPU %s: cannot advertise %s under %s (out of memory or bad name)", g->uuid, id,
                 resource);
        return false;
    }
    r->devs[r->n++] = d;
    return true;
}

size_t gv_mode_adv_resources(const struct gv_mode_adv *adv)
{
    return adv->n;
}

const char *gv_mode_adv_resource(const struct gv_mode_adv *adv, size_t i)
{
    return i < adv->n ? adv->res[i].name : NULL;
}

const struct gv_plugin_device *gv_mode_adv_devices(const struct gv_mode_adv *adv, size_t i,
                                                   size_t *n)
{
    *n = i < adv->n ? adv->res[i].n : 0;
    return i < adv->n ? adv->res[i].devs : NULL;
}

void gv_mode_advertise_replicas(struct gv_mode_adv *adv, const char *resource,
                                const struct gv_allocator_gpu *u, unsigned replicas, bool bare)
{
    char id[128];
    for (unsigned k = 0; k < (bare ? 1 : replicas); k++) {
        if (bare)
            snprintf(id, sizeof(id), "%s", u->gpu.uuid);
        else
            snprintf(id, sizeof(id), "%s::%u", u->gpu.uuid, k);
        if (!gv_mode_adv_add(adv, resource, id, &u->gpu))
            return;
    }
}

const char *gv_mode_resource(const struct gv_node_config *cfg, const struct gv_allocator_gpu *u)
{
    return u->settings.resource[0] ? u->settings.resource : cfg->resource_name;
}

int gv_mode_check_replicas(const struct gv_mode_alloc *a, char *msg, size_t cap)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->units[i].settings.fail_gt_one && a->n_request > 1) {
            /* NVIDIA's words (rm.ValidateRequest) */
            snprintf(msg, cap, "maximum request size for shared resources is 1; found %zu",
                     a->n_request);
            return GV_GRPC_INVALID_ARGUMENT;
        }
    return GV_GRPC_OK;
}

size_t gv_mode_discover_gpu(const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                            struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap)
{
    if (g->mig) {
        /* the instances are what can be shared; the whole GPU is not usable as one */
        snprintf(why, why_cap, "MIG is enabled (not supported in mode %s)",
                 gv_inventory_mode_name(s->mode));
        return 0;
    }
    if (cap == 0) {
        snprintf(why, why_cap, "too many units");
        return 0;
    }
    out->gpu = *g;
    out->settings = *s;
    return 1;
}

size_t gv_mode_discover_whole(void *state, const struct gv_gpu *g,
                              const struct gv_node_gpu_settings *s, struct gv_allocator_gpu *out,
                              size_t cap, char *why, size_t why_cap)
{
    (void)state;
    return gv_mode_discover_gpu(g, s, out, cap, why, why_cap);
}

void gv_mode_advertise_split(void *state, const struct gv_node_config *cfg,
                             const struct gv_allocator_gpu *u, struct gv_mode_adv *adv)
{
    (void)state;
    gv_mode_advertise_replicas(adv, gv_mode_resource(cfg, u), u, u->settings.split, false);
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
