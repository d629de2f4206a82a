/* Internal to the monitor (monitor.c, monitor_record.c) and its tests. */
#ifndef GV_NODE_MONITOR_INTERNAL_H
#define GV_NODE_MONITOR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "node/monitor/gv_monitor.h"

/* <state>/containers/<uid>/.ctr-<container>.json: the leading dot keeps it
 * out of the allocator's directory scan (recover()). */
#define GV_MONITOR_RECORD_PREFIX ".ctr-"

struct gv_monitor_record {
    char uid[64];
    char ns[64];   /* a namespace is a DNS label: 63 characters */
    char pod[256];
    char ctr[64];  /* so is a container name */
    int priority; /* -1: none */
    bool limited; /* the interposer enforces limits (vgpu mode) */
    unsigned n_dev;
    struct {
        char uuid[96];
        uint64_t mem_limit; /* bytes; 0 = none */
        unsigned cores;     /* percent; 0 = unlimited */
    } dev[GV_MONITOR_MAX_GPUS];
};

gv_status gv_monitor_record_parse(const char *text, size_t len, struct gv_monitor_record *r,
                                  struct gv_error *err);

#endif
