/*
 * MIG devices in the published inventory (docs/mig-cdi.md, "MIG in the
 * scheduler").  Two forms, one per way a MIG device reaches pods:
 *
 * - A GPU entry of its own (gv_mode_mig_gpu_inventory) when pods ask it as
 *   a GPU: slices of it ("migMode": "vgpu") or, under migStrategy single,
 *   the whole instance under nvidia.com/gpu.  The scheduler's GPU
 *   placement then works unchanged: vgpu entries are sliced, mig entries
 *   are exclusive (one container at a time, GV_INVENTORY_MODE_LIST).
 * - A "wholeDevices" entry of kind mig (gv_mode_mig_inventory) when pods ask
 *   it by a resource of its own (migStrategy mixed: nvidia.com/mig-<profile>),
 *   placed by count.  The resource and health are read back from what was
 *   advertised, so the inventory says exactly what the kubelet was told.
 */
#include <stdio.h>
#include <string.h>

#include "common/gv_log.h"
#include "node/modes/gv_mode.h"
#include "node/kubelet/gv_plugin.h"

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

/* Whether unit u is a MIG device the inventory lists as a GPU entry (see above). */
static bool mig_gpu_entry(const struct gv_inventory *inv, const struct gv_allocator_gpu *u)
{
    /* a MIG device's unit carries its parent's MIG flag (gv_mode_discover_migs) */
    if (!u->gpu.mig)
        return false;
    if (u->settings.mode == GV_INVENTORY_MODE_VGPU)
        return true;
    return u->settings.mode == GV_INVENTORY_MODE_MIG && strcmp(inv->mig_strategy, "single") == 0;
}

void gv_mode_mig_gpu_inventory(struct gv_inventory *inv, const struct gv_allocator_gpu *units,
                               size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct gv_allocator_gpu *u = &units[i];
        if (!mig_gpu_entry(inv, u))
            continue;
        /* the parent's entry, or one of its MIG devices already written: same physical index */
        struct gv_inventory_gpu *t = NULL;
        bool parent = false;
        for (uint32_t k = 0; k < inv->n_gpus && !parent; k++)
            if (inv->gpus[k].index == u->gpu.index) {
                t = &inv->gpus[k];
                parent = strncmp(t->uuid, "MIG-", 4) != 0;
            }
        if (t == NULL)
            continue; /* not in the inventory (over GV_INVENTORY_MAX_GPUS) */
        if (!parent) {
            if (inv->n_gpus >= GV_INVENTORY_MAX_GPUS) {
                gv_warn("inventory: more than %d GPUs; MIG device %s not listed (not placed)",
                        GV_INVENTORY_MAX_GPUS, u->gpu.uuid);
                continue;
            }
            inv->gpus[inv->n_gpus] = *t;
            t = &inv->gpus[inv->n_gpus++];
        }
        /*
         * A GPU of its own to the scheduler: the instance's memory, 100% of
         * the instance's compute (cores from the parent's core scaling), its
         * devices (vgpu: the slices; mig: 1), its own health.  mig false:
         * the parent's MIG flag would make the scheduler set it aside
         * (gv_inventory_gpu_taken).  Index, PCI address, NUMA node and model
         * stay the parent's.
         */
        snprintf(t->uuid, sizeof(t->uuid), "%s", u->gpu.uuid);
        t->memory_mib = u->gpu.memory_mib;
        t->split = u->settings.split;
        t->healthy = u->gpu.healthy;
        t->mode = u->settings.mode;
        t->mig = false;
    }
}

void gv_mode_mig_inventory(const struct gv_mode_adv *adv, const struct gv_gpu *gpus, size_t n,
                           struct gv_inventory *inv)
{
    if (strcmp(inv->mig_strategy, "single") == 0)
        return; /* its MIG devices are GPU entries (gv_mode_mig_gpu_inventory), not whole devices */
    for (size_t i = 0; i < n; i++) {
        const struct gv_gpu *g = &gpus[i];
        for (unsigned k = 0; g->mig && k < g->n_migs; k++) {
            const struct gv_mig *m = &g->migs[k];
            bool healthy = false;
            const char *res = advertised(adv, m->uuid, &healthy);
            if (res == NULL)
                continue; /* not served (strategy none, excluded GPU) or served as slices */
            /* NVML's buffer is 96 bytes, the inventory's id 64; real MIG uuids
             * ("MIG-<uuid>", 40 bytes; before driver 470 "MIG-GPU-<uuid>/<gi>/<ci>",
             * at most 56) fit, and a longer one is left out rather than listed
             * cut short, an id no device has. */
            size_t id_len = strnlen(m->uuid, sizeof(m->uuid));
            if (id_len >= sizeof(inv->whole.dev[0].id)) {
                gv_warn("inventory: MIG device id %.*s is longer than %zu bytes; not listed",
                        (int)id_len, m->uuid, sizeof(inv->whole.dev[0].id) - 1);
                continue;
            }
            if (inv->whole.n >= GV_INVENTORY_MAX_WHOLE) {
                gv_warn("inventory: more than %d whole devices; MIG device %s not listed",
                        GV_INVENTORY_MAX_WHOLE, m->uuid);
                return;
            }
            struct gv_inventory_whole *w = &inv->whole.dev[inv->whole.n++];
            memset(w, 0, sizeof(*w));
            w->kind = GV_INVENTORY_WHOLE_MIG;
            snprintf(w->resource, sizeof(w->resource), "%s", res);
            memcpy(w->id, m->uuid, id_len);
            w->id[id_len] = '\0';
            snprintf(w->pci_bus_id, sizeof(w->pci_bus_id), "%s", g->pci_bus_id);
            snprintf(w->gpu_uuid, sizeof(w->gpu_uuid), "%s", g->uuid);
            snprintf(w->profile, sizeof(w->profile), "%s", m->profile);
            w->memory_mib = m->memory_mib;
            w->healthy = healthy && g->healthy;
        }
    }
}
