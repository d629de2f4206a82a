/*
 * Time-slicing mode: `split` replicas of each GPU, no limits (NVIDIA's
 * sharing.timeSlicing); containers share the GPU through the driver's
 * time slices.  Device IDs "<uuid>::<k>".
 */
#include "node/kubelet/gv_grpc.h"
#include "node/modes/gv_mode.h"

static int allocate(void *st, const struct gv_mode_alloc *a, char *msg, size_t cap)
{
    (void)st;
    int code = gv_mode_check_replicas(a, msg, cap);
    if (code != GV_GRPC_OK)
        return code;
    for (size_t i = 0; i < a->n; i++)
        gv_mode_answer_visible(a->answer, a->units[i].gpu.uuid);
    return GV_GRPC_OK;
}

const struct gv_mode gv_mode_TIMESLICING = {
    .id = GV_INVENTORY_MODE_TIMESLICING,
    .discover = gv_mode_discover_whole,
    .advertise = gv_mode_advertise_split,
    .allocate = allocate,
};
