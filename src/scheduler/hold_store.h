/*
 * Nominated holds kept on the preemptor pod itself (docs/scheduler.md,
 * "Preemption", "The hold"): the annotation gpuvisor.io/nominated-hold,
 * signed like a placement (contracts/placement.h, gv_hold_sign), so a
 * restarted scheduler finds the GPUs it promised and a tenant, who can
 * patch its own pod, can neither forge, copy nor extend one.
 */
#ifndef GV_SCHED_HOLD_STORE_H
#define GV_SCHED_HOLD_STORE_H

#include <jansson.h>
#include <time.h>

#include "kube/gv_kube.h"
#include "scheduler/gv_scheduler.h"

/* The annotation's value for uid's hold (heap JSON text; NULL on no
 * memory): node, until (RFC 3339, UTC), assignment, and the signature when
 * a placement key is configured. */
char *gv_sched_hold_encode(const struct gv_sched_config *cfg, const char *uid, const char *node,
                           time_t until, const char *assignment);

/*
 * The pod's hold, when gpuvisor wrote it for this very pod: GV_OK with
 * *node and *assignment (heap) and *until; GV_ENOTFOUND without the
 * annotation; GV_EINVAL with why it is refused (malformed, not signed by a
 * key of cfg, another pod's).  Without a key configured holds are taken
 * unauthenticated, as placements are.  Expiry is the caller's to check.
 */
gv_status gv_sched_hold_decode(const struct gv_sched_config *cfg, const json_t *pod, char **node,
                               time_t *until, char **assignment, struct gv_error *err);

/* Writes value on pod ns/name (merge patch, the uid as precondition).
 * Outside the scheduler's lock: an API round trip. */
gv_status gv_sched_hold_write(struct gv_kube_client *kube, const char *ns, const char *name,
                              const char *uid, const char *value, struct gv_error *err);

#endif
