/*
 * vGPU mode: `split` slices of each GPU, memory and compute limits from
 * the scheduler's assignment enforced by the interposer (HAMi's model).
 * Device IDs "<uuid>::<k>".  Pods gpuvisor did not schedule are refused:
 * without an assignment there are no limits to enforce.
 */
#include <stdio.h>
#include <string.h>

#include "node/kubelet/gv_grpc.h"
#include "node/modes/gv_mode.h"

static int allocate(void *st, const struct gv_mode_alloc *a, char *msg, size_t cap)
{
    (void)st;
    if (a->c == NULL) {
        snprintf(msg, cap, "vgpu GPUs serve only pods scheduled by gpuvisor-scheduler");
        return GV_GRPC_FAILED_PRECONDITION;
    }
    char key[64], val[64];
    bool oversub = false, same_sm = true;
    unsigned sm0 = a->c->devices[a->idx[0]].milli;
    for (size_t i = 0; i < a->n; i++) {
        const struct gv_alloc_device *d = &a->c->devices[a->idx[i]];
        gv_mode_answer_visible(a->answer, a->units[i].gpu.uuid);
        oversub |= a->units[i].settings.mem_scaling > 1.0;
        if (d->mem_mib) {
            snprintf(key, sizeof(key), "CUDA_DEVICE_MEMORY_LIMIT_%u", a->idx[i]);
            snprintf(val, sizeof(val), "%llum", (unsigned long long)d->mem_mib);
            gv_mode_answer_limit(a->answer, key, val);
        }
        if (d->milli) {
            snprintf(key, sizeof(key), "CUDA_DEVICE_SM_LIMIT_%u", a->idx[i]);
            snprintf(val, sizeof(val), "%u", (d->milli + 9) / 10);
            gv_mode_answer_limit(a->answer, key, val);
        }
        same_sm &= d->milli == sm0;
    }
    if (same_sm && sm0) {
        snprintf(val, sizeof(val), "%u", (sm0 + 9) / 10);
        gv_mode_answer_limit(a->answer, "CUDA_DEVICE_SM_LIMIT", val);
    }
    if (oversub)
        gv_mode_answer_limit(a->answer, "CUDA_OVERSUBSCRIBE", "true");
    gv_mode_answer_interposer(a->answer);
    return GV_GRPC_OK;
}

/*
 * The GPU, or with "migMode": "vgpu" each MIG device of a MIG-enabled GPU
 * as a GPU of its own: `split` slices of the instance, keyed by its MIG
 * UUID, memory the instance's (docs/mig-cdi.md, "vGPU slices inside MIG
 * instances").  The answer is then the same as for a GPU: the MIG UUID as
 * the visible device, the limits relative to the instance.
 */
static size_t discover(void *st, const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                       struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap)
{
    if (g->mig && s->mig_vgpu)
        return gv_mode_discover_migs(g, s, GV_INVENTORY_MODE_VGPU, s->split, out, cap, why,
                                     why_cap);
    return gv_mode_discover_whole(st, g, s, out, cap, why, why_cap);
}

const struct gv_mode gv_mode_VGPU = {
    .id = GV_INVENTORY_MODE_VGPU,
    .flags = GV_MODE_NEEDS_ASSIGNMENT,
    .discover = discover,
    .advertise = gv_mode_advertise_split,
    .allocate = allocate,
};
