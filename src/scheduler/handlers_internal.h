/*
 * Private to the extender's HTTP handlers: handlers.c (bind, the webhook,
 * registration of every route), filter.c (filter and prioritize),
 * health_metrics.c (/healthz, /readyz, /metrics) and handler_common.c (what
 * they share).  Imports run one way: handlers.c -> filter.c,
 * health_metrics.c -> handler_common.c.
 */
#ifndef GV_SCHED_HANDLERS_INTERNAL_H
#define GV_SCHED_HANDLERS_INTERNAL_H

#include "scheduler/sched_internal.h"

#define ANN_ASSIGNMENT GV_ALLOC_ASSIGNMENT_ANNOTATION
#define ANN_ASSIGNED_NODE "gpuvisor.io/assigned-node"
#define ANN_ASSIGNED_AT "gpuvisor.io/assigned-at"

/* filter.c */
char *encode_assignment(const struct gv_alloc_assignment *a);
void handle_filter(void *ctx, const struct gv_http_request *hreq,
                   struct gv_http_response *resp);
void handle_prioritize(void *ctx, const struct gv_http_request *hreq,
                       struct gv_http_response *resp);

/* handler_common.c */
/* How long a verb waits for the first lists of nodes and pods (a restarted
 * extender: kube-scheduler calls it at once, readiness or not). */
#define VERB_SYNC_WAIT_MS 10000
/* False (and resp answered 503) when the caches are not synced within
 * VERB_SYNC_WAIT_MS: an answer from them would count no pod's GPUs. */
bool verb_ready(struct gv_sched *s, const char *verb, struct gv_http_response *resp);
const char *meta(json_t *obj, const char *key);
void note_pending(struct gv_sched *s, json_t *pod, enum pending_reason why);
void respond_json(struct gv_http_response *resp, char *text);
extern const char *const pending_labels[PENDING_COUNT];

/* health_metrics.c */
void handle_healthz(void *ctx, const struct gv_http_request *hreq,
                    struct gv_http_response *resp);
void handle_readyz(void *ctx, const struct gv_http_request *hreq,
                   struct gv_http_response *resp);
void handle_metrics(void *ctx, const struct gv_http_request *hreq,
                    struct gv_http_response *resp);

#endif
