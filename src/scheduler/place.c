/*
 * A placement from an assignment text (gv_sched_place_encoded): the one
 * way recorded placements enter the engine, for the pods the informer
 * shows (sched_pods.c), the self-check's repairs (self_check.c) and the
 * holds of Bindings that may still land (bind_inflight.c).  Below all
 * three, so none of them imports another to place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/gv_alloc.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"

gv_status gv_sched_place_encoded(struct gv_sched *s, const char *uid, const char *ns,
                                 const char *name, const char *encoded, enum rec_phase phase,
                                 struct gv_error *err)
{
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    struct gv_alloc_request *req = NULL;
    gv_status st;
    if (a == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    if ((st = gv_alloc_assignment_decode(encoded, strlen(encoded), a, err)) != GV_OK ||
        (st = gv_alloc_request_new(&req, err)) != GV_OK)
        goto out;
    /* The engine accounts GPUs by the assignment's devices; the request
     * only has to name the same containers with the same GPU counts. */
    snprintf(req->uid, sizeof(req->uid), "%s", uid);
    snprintf(req->ns, sizeof(req->ns), "%s", ns ? ns : "");
    snprintf(req->name, sizeof(req->name), "%s", name ? name : "");
    req->n_containers = a->n_containers;
    for (uint32_t i = 0; i < a->n_containers; i++) {
        memcpy(req->containers[i].name, a->containers[i].name, sizeof(req->containers[i].name));
        req->containers[i].num_gpu = a->containers[i].n_devices;
    }
    if ((st = gv_alloc_place(s->cluster, req, a, err)) != GV_OK)
        goto out;
    struct srec *r = gv_sched_rec_get(s, uid, ns, name);
    if (r == NULL || gv_sched_rec_set(r, phase, a->node, encoded, NULL) != GV_OK) {
        gv_alloc_release(s->cluster, uid, NULL);
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    if (st == GV_OK && phase != REC_INFLIGHT) /* charged to its namespace's quota; a hold
                                                 * is its pod's, never charged twice */
        gv_sched_quota_placed(s, uid, ns, a);
out:
    gv_alloc_request_free(req);
    free(a);
    return st;
}
