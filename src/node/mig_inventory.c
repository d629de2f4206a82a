/*
 * MIG devices in the published inventory (docs/mig-cdi.md, "MIG in the
 * scheduler"): one "wholeDevices" entry of kind mig per MIG device the
 * agent advertises bare (one device per MIG device, as NVIDIA's single and
 * mixed strategies do), under the resource it is advertised under, so the
 * scheduler places MIG requests by count and never slices the parent GPU.
 * The resource and health are read back from what was advertised, so the
 * inventory says exactly what the kubelet was told.
 */
#include <stdio.h>
#include <string.h>

#include "common/gv_log.h"
#include "node/gv_mode.h"
#include "node/gv_plugin.h"

/* The resource under which id is advertised bare, and its health; NULL when it is not. */
static const char *advertised(const struct gv_mode_adv *adv, const char *id, bool *healthy)
{
    for (size_t r = 0; r < gv_mode_adv_resources(adv); r++) {
        size_t nd = 0;
        const struct gv_plugin_device *d = gv_mode_adv_devices(adv, r, &nd);
        for (size_t k = 0; k < nd; k++)
            if (strcmp(d[k].id, id) == 0) {
                *healthy = d[k].healthy;
                return gv_mode_adv_resource(adv, r);
            }
    }
    return NULL;
}

void gv_mode_mig_inventory(const struct gv_mode_adv *adv, const struct gv_gpu *gpus, size_t n,
                           struct gv_inventory *inv)
{
    for (size_t i = 0; i < n; i++) {
        const struct gv_gpu *g = &gpus[i];
        for (unsigned k = 0; g->mig && k < g->n_migs; k++) {
            const struct gv_mig *m = &g->migs[k];
            bool healthy = false;
            const char *res = advertised(adv, m->uuid, &healthy);
            if (res == NULL)
                continue; /* not served (strategy none, excluded GPU) or served as slices */
            if (inv->whole.n >= GV_INVENTORY_MAX_WHOLE) {
                gv_warn("inventory: more than %d whole devices; MIG device %s not listed",
                        GV_INVENTORY_MAX_WHOLE, m->uuid);
                return;
            }
            struct gv_inventory_whole *w = &inv->whole.dev[inv->whole.n++];
            memset(w, 0, sizeof(*w));
            w->kind = GV_INVENTORY_WHOLE_MIG;
            snprintf(w->resource, sizeof(w->resource), "%s", res);
            snprintf(w->id, sizeof(w->id), "%s", m->uuid);
            snprintf(w->pci_bus_id, sizeof(w->pci_bus_id), "%s", g->pci_bus_id);
            snprintf(w->gpu_uuid, sizeof(w->gpu_uuid), "%s", g->uuid);
            snprintf(w->profile, sizeof(w->profile), "%s", m->profile);
            w->memory_mib = m->memory_mib;
            w->healthy = healthy && g->healthy;
        }
    }
}
