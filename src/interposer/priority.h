/*
 * Node-level priority board for one physical GPU.
 *
 * Tenants of different containers have different shared regions, so they
 * meet in a per-GPU file in a host directory mounted into every tenant (see
 * docs/compute-share.md, "Priority").  Each participating process owns one
 * slot in which it publishes its level and until when it expects to have
 * work in flight; a process yields while any higher-priority slot is busy.
 * All access is lock-free (64-bit atomics on a MAP_SHARED mapping), so a
 * tenant killed at any instant leaves at worst a slot whose busy time runs
 * out on its own.
 */
#ifndef GV_PRIORITY_H
#define GV_PRIORITY_H

#include <stdbool.h>
#include <stdint.h>

#include "common/gv_error.h"

#include "interposer/config.h"

/* Levels 0 (highest) .. GV_PRIO_LEVELS-1 (lowest): CUDA_TASK_PRIORITY's range. */
#define GV_PRIO_LEVELS (GV_IPCFG_MAX_PRIORITY + 1)
/* Default node directory inside a tenant (see docs/contracts.md). */
#define GV_PRIO_DEFAULT_DIR "/var/run/gpuvisor-node"

struct gv_prio_board;

/*
 * Opens (creating when absent) <dir>/gpu-<device_key>.prio and claims a slot
 * at `level`.  device_key must be made of [A-Za-z0-9-] (a GPU UUID).  now_ns
 * is the caller's clock (slots whose heartbeat is older than the stale limit
 * on that clock are reclaimed).
 */
gv_status gv_prio_open(const char *dir, const char *device_key, int level, uint64_t now_ns,
                       struct gv_prio_board **out, struct gv_error *err);
void gv_prio_close(struct gv_prio_board *b);

/*
 * Nanoseconds to wait before launching at time now_ns: 0 when no tenant of a
 * higher priority is busy.  Bounded so callers re-check periodically.
 */
uint64_t gv_prio_wait_ns(struct gv_prio_board *b, uint64_t now_ns);

/* Whether a higher-priority tenant was active recently (for in-flight caps). */
bool gv_prio_higher_present(struct gv_prio_board *b, uint64_t now_ns);

/* Publishes that this tenant has work in flight until busy_until_ns; lower
 * tenants wait a short grace past it (a pause between kernels keeps the GPU). */
void gv_prio_publish(struct gv_prio_board *b, uint64_t now_ns, uint64_t busy_until_ns);

/* The same while this tenant waits for its own share limit: it will launch
 * nothing before that wait ends, so lower tenants may use the GPU from
 * busy_until_ns on, with no grace (they keep little queued meanwhile). */
void gv_prio_publish_paced(struct gv_prio_board *b, uint64_t now_ns, uint64_t busy_until_ns);

#endif
