/*
 * What the sharing modes share, below them all: the devices a rebuild
 * advertises per resource name, the discover and advertise steps most modes
 * reuse, and a mode's state by id.  modes.c (the mode table, one rebuild)
 * calls the modes and this file; the modes call only this file, so imports
 * run one way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"
#include "node/modes/gv_mode.h"
#include "node/kubelet/gv_plugin.h"
#include "node/modes/modes_internal.h"

void *gv_modes_state(const struct gv_modes *m, enum gv_inventory_mode id)
{
    return m && (unsigned)id < GV_INVENTORY_MODE_COUNT ? m->state[id] : NULL;
}

const struct gv_mode_env *gv_modes_env(const struct gv_modes *m)
{
    return m ? &m->env : NULL;
}

/* ---- advertised devices per resource name ------------------------------------ */

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
