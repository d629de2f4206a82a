/*
 * What the extender's verb handlers share (filter.c, handlers.c,
 * health_metrics.c): JSON replies, a pod's metadata, marking a pod pending,
 * the pending reasons' metric labels.  Calls none of them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
#include "scheduler/gv_extender.h"
#include "scheduler/gv_webhook.h"
#include "scheduler/placement_guard.h"
#include "scheduler/quota.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "scheduler/whole.h"
#include "scheduler/handlers_internal.h"

const char *const pending_labels[PENDING_COUNT] = {
#define X_LABEL(code, label) label,
    GV_SCHED_PENDING_LIST(X_LABEL)
#undef X_LABEL
};

bool verb_ready(struct gv_sched *s, const char *verb, struct gv_http_response *resp)
{
    if (gv_sched_wait_ready(s, VERB_SYNC_WAIT_MS))
        return true;
    /* kube-scheduler takes an error as "try the pod again later"; placing
     * from a cache without the bound pods would hand out their GPUs. */
    gv_warn_limited("%s: node/pod caches not synced after %d s; answered 503", verb,
                    VERB_SYNC_WAIT_MS / 1000);
    gv_http_respond_error(resp, 503,
                          "gpuvisor-scheduler is starting: its node and pod caches are not "
                          "synced yet; try again");
    return false;
}

void respond_json(struct gv_http_response *resp, char *text)
{
    if (text == NULL) {
        gv_http_respond_error(resp, 500, "out of memory");
        return;
    }
    free(resp->body);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = text;
    resp->body_len = strlen(text);
}

const char *meta(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

/* Marks a pod pending (metrics) unless it holds a placement (lock held). */
void note_pending(struct gv_sched *s, json_t *pod, enum pending_reason why)
{
    const char *uid = meta(pod, "uid");
    if (uid == NULL)
        return;
    s->filters_nofit++;
    struct srec *r = gv_sched_rec_find(s, uid);
    if (r != NULL && gv_sched_phase_placed(r->phase))
        return; /* its placement stands; only what frees GPUs may end it */
    r = gv_sched_rec_get(s, uid, meta(pod, "namespace"), meta(pod, "name"));
    if (r != NULL) {
        gv_sched_rec_set(r, REC_PENDING, NULL, NULL, NULL);
        r->pending = why;
    }
}

/* ---- bind -------------------------------------------------------------- */
