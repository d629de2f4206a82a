/*
 * A scheduler fed by hand (no API server, gv_sched_feed_by_hand's way):
 * the node events the node informer would deliver.  Beside sched_testlib,
 * which the benchmarks link without the scheduler library.
 */
#ifndef GV_SCHED_HANDFED_H
#define GV_SCHED_HANDFED_H

#include <stdbool.h>

#include "scheduler/gv_scheduler.h"
#include "tests/scheduler/sched_testlib.h"

/* A scheduler with the default configuration, changed by tweak when given
 * (false from it fails the set-up), and no API client: a cmocka fixture. */
struct st_handfed {
    struct gv_sched_config cfg;
    struct gv_sched *s;
};
struct st_handfed *st_handfed_new(bool (*tweak)(struct gv_sched_config *cfg));
void st_handfed_free(struct st_handfed *h);

/* Node name with these GPUs (uuids "GPU-<name>-<i>"), healthy, with a fresh
 * heartbeat, handed to s as the node informer would. */
void st_feed_node(struct gv_sched *s, const char *name, const struct gpu_desc *gpus, unsigned n);

#endif
