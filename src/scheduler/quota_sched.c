/* ResourceQuota in the scheduler: informer, filter/bind/webhook checks,
 * metrics (see quota.h; the table itself is quota.c). */
#include <pthread.h>

#include "common/gv_log.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"

static bool placed_cb(void *ud, const char *uid)
{
    struct gv_sched *s = ud;
    return gv_alloc_is_placed(s->cluster, uid);
}

static void rq_add(void *ud, json_t *obj)
{
    gv_quota_object(((struct gv_sched *)ud)->quota, obj, false);
}

static void rq_update(void *ud, json_t *old_obj, json_t *new_obj)
{
    (void)old_obj;
    gv_quota_object(((struct gv_sched *)ud)->quota, new_obj, false);
}

static void rq_delete(void *ud, json_t *obj)
{
    gv_quota_object(((struct gv_sched *)ud)->quota, obj, true);
}

gv_status gv_sched_quota_init(struct gv_sched *s, struct gv_kube_client *kube,
                              struct gv_error *err)
{
    s->quota = gv_quota_new(s->cfg.alloc.res.mem, s->cfg.alloc.res.cores);
    if (s->quota == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    if (kube == NULL)
        return GV_OK;
    struct gv_informer_callbacks cb = {rq_add, rq_update, rq_delete, s};
    return gv_informer_new(kube, "/api/v1/resourcequotas", NULL, &cb, &s->quota_inf, err);
}

gv_status gv_sched_quota_start(struct gv_sched *s, struct gv_error *err)
{
    if (s->quota_inf == NULL)
        return GV_OK;
    gv_status st = gv_informer_start(s->quota_inf, err);
    if (st == GV_OK && !gv_informer_wait_synced(s->quota_inf, 30000))
        gv_warn("ResourceQuota cache not synced after 30 s; continuing");
    return st;
}

void gv_sched_quota_fini(struct gv_sched *s)
{
    gv_informer_free(s->quota_inf);
    s->quota_inf = NULL;
    gv_quota_free(s->quota);
    s->quota = NULL;
}

void gv_sched_quota_placed(struct gv_sched *s, const char *uid, const char *ns,
                           const struct gv_alloc_assignment *a)
{
    uint64_t mem, cores;
    gv_quota_of_assignment(a, &mem, &cores);
    if (s->quota != NULL && uid != NULL && ns != NULL)
        gv_quota_charge(s->quota, uid, ns, mem, cores);
}

bool gv_sched_quota_admit(struct gv_sched *s, const char *uid, const char *ns,
                          const struct gv_alloc_assignment *a, char *why, size_t cap)
{
    uint64_t mem, cores;
    gv_quota_of_assignment(a, &mem, &cores);
    if (s->quota == NULL || ns == NULL)
        return true;
    if (!gv_quota_fits(s->quota, ns, uid, mem, cores, placed_cb, s, why, cap))
        return false;
    gv_quota_charge(s->quota, uid, ns, mem, cores);
    return true;
}

bool gv_sched_quota_webhook(void *sched, const char *ns, const struct gv_alloc_request *req,
                            char *why, size_t cap)
{
    struct gv_sched *s = sched;
    uint64_t mem = 0, cores = 0;
    for (uint32_t i = 0; i < req->n_containers; i++) {
        const struct gv_alloc_container_req *c = &req->containers[i];
        if (c->mem_kind == GV_ALLOC_MEM_MIB) /* a percentage is known once placed */
            mem += c->mem * c->num_gpu;
        cores += (uint64_t)(c->milli + 9) / 10 * c->num_gpu;
    }
    if (s == NULL || s->quota == NULL || ns == NULL)
        return true;
    pthread_mutex_lock(&s->lock);
    bool ok = gv_quota_fits(s->quota, ns, NULL, mem, cores, placed_cb, s, why, cap);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void gv_sched_quota_metrics(struct gv_sched *s, FILE *out)
{
    /* HAMi's names are left out with --hami-metrics off */
    if (s->quota == NULL || !gv_sched_obs_hami(s))
        return;
    pthread_mutex_lock(&s->lock);
    gv_quota_metrics(s->quota, out, placed_cb, s);
    pthread_mutex_unlock(&s->lock);
}
