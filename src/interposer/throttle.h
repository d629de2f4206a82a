/*
 * Compute share and priority for libgpuvisor's kernel-launch gate.
 *
 * Mechanism (docs/compute-share.md): every throttled launch is bracketed by
 * two timing events, so the module learns how much GPU time the container's
 * kernels really took; a per-device token bucket refilled at p% of wall time
 * is charged with those measurements, and a launch waits (the launching thread
 * sleeps) while the bucket is in debt.  An estimate per kernel is charged at
 * launch and corrected when the events complete, which bounds how much work
 * can be queued ahead of the measurement.  Priority uses a per-GPU board
 * shared between containers (interposer/priority.h).
 *
 * The module talks to the GPU only through struct gv_throttle_ops, so it runs
 * unchanged against the real driver, the fake driver's virtual clock, or a
 * test double.  When nothing is configured gv_throttle_new() returns no
 * object and the launch gate costs one pointer test.
 */
#ifndef GV_THROTTLE_H
#define GV_THROTTLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "interposer/config.h"

#define GV_THROTTLE_MAX_DEVICES 16

/*
 * What the module needs from the GPU.  Streams and events are opaque
 * (CUstream / CUevent for the real driver).  Functions returning int return 0
 * on success and non-zero on failure unless noted.
 */
struct gv_throttle_ops {
    void *ctx;
    uint64_t (*clock_ns)(void *ctx);          /* monotonic, same clock as other tenants */
    void (*sleep_ns)(void *ctx, uint64_t ns); /* may return early */
    int (*event_create)(void *ctx, void **ev);
    int (*event_record)(void *ctx, void *ev, void *stream);
    int (*event_query)(void *ctx, void *ev); /* 1 complete, 0 pending, -1 error */
    int (*event_elapsed_ns)(void *ctx, void *start, void *end, uint64_t *ns);
    void (*event_destroy)(void *ctx, void *ev);
    int (*stream_capturing)(void *ctx, void *stream); /* 1 capturing, 0 not, -1 error */
    /* Stable name of device dev for the priority board (GPU UUID text). */
    int (*device_key)(void *ctx, int dev, char *buf, unsigned len);
};

/*
 * One device's GPU-time budget.  Private to the process by default; the
 * interposer places it in the container's shared region (the region-wide
 * `sched` block, 64 bytes per region device) so that all processes of a
 * container draw on one budget.  Lock-free: every field is an atomic, and
 * every process uses the same clock (CLOCK_MONOTONIC, or the fake's).
 */
struct gv_throttle_pool {
    _Atomic int64_t tokens;   /* ns of GPU time that may still be used */
    _Atomic uint64_t last_ns; /* last refill time + 1; 0 = never */
    _Atomic uint64_t busy_ns; /* GPU time measured so far (for monitors) */
    _Atomic uint32_t pct;     /* the share in force */
    uint32_t reserved0;
    /* time launches waited in the gate (share or priority), summed over the
     * container's processes (for monitors; reserved, so zero, in older builds) */
    _Atomic uint64_t throttled_ns;
    uint8_t reserved[24];
};
_Static_assert(sizeof(struct gv_throttle_pool) == 64, "pool layout is in the shared region");
_Static_assert(offsetof(struct gv_throttle_pool, busy_ns) == 16, "pool layout is in the shared region");
_Static_assert(offsetof(struct gv_throttle_pool, throttled_ns) == 32, "pool layout is in the shared region");

struct gv_throttle_config {
    unsigned sm_limit[GV_THROTTLE_MAX_DEVICES]; /* percent; 0 or >= 100: no limit */
    enum gv_ipcfg_policy policy; /* GPU_CORE_UTILIZATION_POLICY (see docs/compute-share.md) */
    int priority;                /* -1: not configured; 0 (highest) .. GV_PRIO_LEVELS-1 */
    const char *node_dir;        /* priority board directory; NULL: GV_PRIO_DEFAULT_DIR */
    uint64_t window_ns;          /* credit window for the default policy; 0: 50 ms */
    /* Optional: the container-wide budget of each device (NULL: private). */
    struct gv_throttle_pool *pool[GV_THROTTLE_MAX_DEVICES];
    /* Optional: where to publish this process's recent utilisation (percent). */
    _Atomic uint32_t *util[GV_THROTTLE_MAX_DEVICES];
};

struct gv_throttle;

/*
 * Creates the module, or sets *out to NULL (and returns GV_OK) when the
 * configuration asks for nothing, so the launch gate can stay a pointer test.
 */
gv_status gv_throttle_new(const struct gv_throttle_config *cfg, const struct gv_throttle_ops *ops,
                          struct gv_throttle **out, struct gv_error *err);
void gv_throttle_free(struct gv_throttle *t);

/* One launch through the gate; the caller keeps it on its stack. */
struct gv_throttle_launch {
    int dev;         /* application-visible device ordinal */
    void *stream;    /* the launch's stream (NULL: default stream) */
    const void *key; /* CUfunction / CUgraphExec: key of the duration estimate */
    /* private */
    int slot;
};

/* Waits as the share and priority demand, then records the start event. */
void gv_throttle_before(struct gv_throttle *t, struct gv_throttle_launch *l);
/* Records the end event; launched=false when the driver refused the launch. */
void gv_throttle_after(struct gv_throttle *t, struct gv_throttle_launch *l, bool launched);

/* Looks up a driver symbol; the interposer passes its real-function lookup. */
typedef void *(*gv_throttle_sym_fn)(void *arg, const char *name);

/*
 * Fills ops for a CUDA driver, real or fake: events, capture status and
 * device UUIDs through sym.  Time comes from gvfake_clock_ns/gvfake_sleep_ns
 * when sym finds them (only the fake driver exports them), else from
 * CLOCK_MONOTONIC and nanosleep.  One driver per process: ops share state.
 */
gv_status gv_throttle_driver_ops(gv_throttle_sym_fn sym, void *arg, struct gv_throttle_ops *ops,
                                 struct gv_error *err);

/* Counters for tests, benchmarks and the monitor. */
struct gv_throttle_stats {
    uint64_t launches;   /* launches through the gate on this device */
    uint64_t measured;   /* launches whose events completed and were charged */
    uint64_t busy_ns;    /* measured GPU time */
    uint64_t waited_ns;  /* time launches spent waiting for share or priority */
    uint64_t yielded_ns; /* part of waited_ns spent yielding to priority */
};
void gv_throttle_get_stats(struct gv_throttle *t, int dev, struct gv_throttle_stats *out);

#endif
