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

/* Drops the devices on GPUs a->node does not list now (one missing from
 * its agent's inventory: fell off the bus, NVML failed to read it) and
 * returns how many are left.  The pod still runs on the others, which must
 * stay counted: a running scheduler's engine keeps a pod's other devices
 * when one of its GPUs vanishes (gv_alloc_node_upsert), and a restarted one
 * must count the same; node_replace counts the rest when the GPU is back. */
static uint32_t keep_listed(struct gv_sched *s, struct gv_alloc_assignment *a)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < a->n_containers; i++) {
        struct gv_alloc_container_assign *ca = &a->containers[i];
        uint32_t k = 0;
        for (uint32_t d = 0; d < ca->n_devices; d++) {
            struct gv_alloc_gpu_usage u;
            if (gv_alloc_gpu_usage_get(s->cluster, a->node, ca->devices[d].uuid, &u, NULL) !=
                GV_OK)
                continue;
            ca->devices[k++] = ca->devices[d];
        }
        ca->n_devices = k;
        kept += k;
    }
    return kept;
}

/* Can text be placed now: its node known and at least one of its GPUs
 * listed (the others wait: keep_listed)?  A placement none of whose GPUs
 * the inventory lists waits on record. */
bool encoded_placeable(struct gv_sched *s, const char *text)
{
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    bool ok = a != NULL && gv_alloc_assignment_decode(text, strlen(text), a, NULL) == GV_OK &&
              gv_alloc_node_exists(s->cluster, a->node) && keep_listed(s, a) > 0;
    free(a);
    return ok;
}

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
    /* the quota is charged the whole assignment; the engine what is listed */
    struct gv_alloc_assignment *listed = malloc(sizeof(*listed));
    if (listed == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    *listed = *a;
    if (gv_alloc_node_exists(s->cluster, a->node) && keep_listed(s, listed) == 0) {
        free(listed);
        st = gv_error_set(err, GV_ENOTFOUND, "node %s lists none of the assignment's GPUs",
                          a->node);
        goto out;
    }
    /* The engine accounts GPUs by the assignment's devices; the request
     * only has to name the same containers with the same GPU counts. */
    snprintf(req->uid, sizeof(req->uid), "%s", uid);
    snprintf(req->ns, sizeof(req->ns), "%s", ns ? ns : "");
    snprintf(req->name, sizeof(req->name), "%s", name ? name : "");
    req->n_containers = listed->n_containers;
    for (uint32_t i = 0; i < listed->n_containers; i++) {
        memcpy(req->containers[i].name, listed->containers[i].name,
               sizeof(req->containers[i].name));
        req->containers[i].num_gpu = listed->containers[i].n_devices;
    }
    st = gv_alloc_place(s->cluster, req, listed, err);
    free(listed);
    if (st != GV_OK)
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
