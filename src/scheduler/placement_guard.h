/*
 * Placement authentication inside gpuvisor-scheduler (docs/isolation.md,
 * "Placements"): bind signs what it writes, the pod informer counts only
 * what verifies.  Internal to the scheduler library.
 */
#ifndef GV_SCHED_PLACEMENT_GUARD_H
#define GV_SCHED_PLACEMENT_GUARD_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "contracts/placement.h"
#include "scheduler/gv_scheduler.h"

/* Signs a bind into out (>= GV_PLACEMENT_SIG_MAX); "" when no key is configured. */
gv_status gv_sched_placement_sign(const struct gv_sched_config *cfg, const char *uid,
                                  const char *node, const char *assigned_at,
                                  const char *assignment, char *out, size_t cap,
                                  struct gv_error *err);

/*
 * Whether the pod's placement annotations may be counted: signed by a key
 * of cfg, or (upgrade window) unsigned on a pod the API server created
 * before cfg->unsigned_before, or no key configured at all (the daemon
 * refuses to start keyless unless insecure_unsigned says so; library users
 * such as unit tests get unauthenticated placements).  A rejection is
 * logged with the reason and counted.
 */
bool gv_sched_placement_trusted(const struct gv_sched_config *cfg, const json_t *pod);

/*
 * The informer's hook: gv_sched_placement_trusted, and for a rejected pod a
 * Warning event PlacementRejected on it (one per pod: the event's name is
 * derived from the pod's uid; at most a few a second, so a flood of forged
 * pods cannot turn the scheduler into an event cannon).
 */
struct gv_sched;
bool gv_sched_placement_admit(struct gv_sched *s, const json_t *pod);

/* Placements rejected so far by this process (metrics). */
unsigned long long gv_sched_placements_rejected(void);
void gv_sched_placement_metrics(const struct gv_sched_config *cfg, FILE *out);

#endif
