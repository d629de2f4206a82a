/*
 * Compute share: a token bucket on measured GPU time, per device.
 *
 * Why not count blocks (HAMi): a block's cost depends on the kernel, so a
 * block budget maps to GPU time only by accident (10% vs 90% came out 1:6-8).
 * Timing events measure what the container really used, whatever the kernel,
 * graph or launch API.  Each bracketed launch is charged an estimate at
 * launch (so the amount of work queued ahead of the measurement stays bounded)
 * and corrected to the measured time when its end event completes; the bucket
 * refills at p% of wall time, so over any horizon the measured busy time is p%
 * of it, give or take one window of burst credit.
 *
 * Why the start event too: on a shared GPU a kernel may wait behind another
 * tenant's work, and the time from our previous kernel's end includes that
 * wait.  Recording a start event right before the kernel measures from when
 * the GPU reached our work, so a tenant is not charged for its neighbour.
 */
#include "interposer/throttle.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/gv_cuda.h"
#include "common/gv_log.h"
#include "interposer/priority.h"

#define RING 256u        /* bracketed launches in flight per device */
#define POOL (2u * RING) /* spare events kept per device */
#define EST_SLOTS 256u   /* duration estimates (direct-mapped by key) */
#define POLL_NS 50000ull /* re-check period while waiting for a measurement */
#define MAX_SLEEP_NS 10000000ull
#define DEFAULT_WINDOW_NS 50000000ull
#define FORCE_WINDOW_NS 1000000ull
/* While a higher-priority tenant is around, keep at most this much queued. */
#define LOW_INFLIGHT_NS 1000000ull
/* A tenant below level 0 keeps at most this much queued even alone: a
 * higher-priority tenant arriving unannounced then waits behind no more than
 * this, not behind a ring of RING kernels (on an H200 that backlog cost a
 * newly started level-0 tenant 127 ms, whatever its run's length: 96.1% of
 * its solo throughput over 3 s; bench/results/gpu_h200.txt).  Small kernels
 * still queue hundreds deep under it. */
#define LOW_ALONE_INFLIGHT_NS 5000000ull
/* While held by that cap, sleep a quarter of what is queued (at most 1 ms):
 * the queue never runs dry, even when concurrent streams drain it faster
 * than the estimates add up, and an idle waiter does not spin at POLL_NS. */
#define LOW_ALONE_SLEEP_MAX_NS 1000000ull

enum { B_LAUNCHING = 1, B_ENDED, B_CANCELLED };

struct bracket {
    void *start;
    void *end;
    const void *key;
    uint64_t est;
    int state;
};

struct est_slot {
    const void *key;
    uint64_t ns;
};

struct dev_state {
    pthread_mutex_t mu;
    bool active;
    bool started;
    bool warned;  /* said once that a launch could not be timed */
    unsigned pct; /* 0: no share limit on this device */
    int64_t cap;
    struct gv_throttle_pool *pool; /* shared, or &own */
    struct gv_throttle_pool own;
    _Atomic uint32_t *util;
    uint64_t util_start, util_busy; /* current utilisation window */
    struct bracket ring[RING];
    unsigned head, count;
    void *spare[POOL]; /* recorded-and-done events kept for reuse */
    unsigned nspare;
    uint64_t inflight_est;
    uint64_t busy_until;
    struct est_slot est[EST_SLOTS];
    struct gv_prio_board *prio;
    struct gv_throttle_stats st;
};

struct gv_throttle {
    struct gv_throttle_ops ops;
    int priority;
    char *node_dir;
    uint64_t window_ns;
    struct dev_state dev[GV_THROTTLE_MAX_DEVICES];
};

gv_status gv_throttle_new(const struct gv_throttle_config *cfg, const struct gv_throttle_ops *ops,
                          struct gv_throttle **out, struct gv_error *err)
{
    struct gv_throttle *t = NULL;
    bool any = false;

    *out = NULL;
    if (cfg->priority < -1 || cfg->priority >= GV_PRIO_LEVELS)
        return gv_error_set(err, GV_ERANGE, "CUDA_TASK_PRIORITY %d outside 0..%d", cfg->priority,
                            GV_PRIO_LEVELS - 1);
    if ((unsigned)cfg->policy > GV_POLICY_DISABLE)
        return gv_error_set(err, GV_EINVAL, "bad core utilization policy %d", (int)cfg->policy);
    for (int i = 0; i < GV_THROTTLE_MAX_DEVICES; i++) {
        unsigned p = cfg->sm_limit[i];
        if (cfg->priority >= 0 || (cfg->policy != GV_POLICY_DISABLE && p > 0 && p < 100))
            any = true;
    }
    if (!any)
        return GV_OK;
    if (!ops->clock_ns || !ops->sleep_ns || !ops->event_create || !ops->event_record ||
        !ops->event_query || !ops->event_elapsed_ns || !ops->event_destroy ||
        !ops->stream_capturing || !ops->device_key)
        return gv_error_set(err, GV_EINVAL, "throttle: incomplete driver operations");

    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return gv_error_set(err, GV_ENOMEM, "throttle: out of memory");
    t->ops = *ops;
    t->priority = cfg->priority;
    t->window_ns = cfg->window_ns ? cfg->window_ns : DEFAULT_WINDOW_NS;
    t->node_dir = strdup(cfg->node_dir ? cfg->node_dir : GV_PRIO_DEFAULT_DIR);
    if (t->node_dir == NULL) {
        free(t);
        return gv_error_set(err, GV_ENOMEM, "throttle: out of memory");
    }
    for (int i = 0; i < GV_THROTTLE_MAX_DEVICES; i++) {
        struct dev_state *d = &t->dev[i];
        unsigned p = cfg->sm_limit[i];
        pthread_mutex_init(&d->mu, NULL);
        d->pct = (cfg->policy != GV_POLICY_DISABLE && p > 0 && p < 100) ? p : 0;
        d->active = d->pct > 0 || cfg->priority >= 0;
        /* force keeps 1 ms of credit: only enough to absorb a sleep that
         * overshoots (timer slack is 50 us by default), so short kernels are
         * not paced below their share. */
        uint64_t window = cfg->policy == GV_POLICY_FORCE ? FORCE_WINDOW_NS : t->window_ns;
        d->cap = (int64_t)(window / 100 * d->pct);
        d->pool = cfg->pool[i] ? cfg->pool[i] : &d->own;
        d->util = cfg->util[i];
        if (d->pct)
            atomic_store(&d->pool->pct, d->pct);
    }
    *out = t;
    return GV_OK;
}

static void spare_put(struct gv_throttle *t, struct dev_state *d, void *ev)
{
    if (ev == NULL)
        return;
    if (d->nspare < POOL)
        d->spare[d->nspare++] = ev;
    else
        t->ops.event_destroy(t->ops.ctx, ev);
}

void gv_throttle_free(struct gv_throttle *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < GV_THROTTLE_MAX_DEVICES; i++) {
        struct dev_state *d = &t->dev[i];
        for (unsigned n = 0; n < d->count; n++) {
            struct bracket *b = &d->ring[(d->head + n) % RING];
            if (b->start)
                t->ops.event_destroy(t->ops.ctx, b->start);
            if (b->end)
                t->ops.event_destroy(t->ops.ctx, b->end);
        }
        for (unsigned n = 0; n < d->nspare; n++)
            t->ops.event_destroy(t->ops.ctx, d->spare[n]);
        gv_prio_close(d->prio);
        pthread_mutex_destroy(&d->mu);
    }
    free(t->node_dir);
    free(t);
}

static struct est_slot *est_slot(struct dev_state *d, const void *key)
{
    uintptr_t h = (uintptr_t)key;
    h ^= h >> 17;
    h *= 0x9e3779b1u;
    return &d->est[(h >> 8) % EST_SLOTS];
}

static uint64_t est_get(struct dev_state *d, const void *key)
{
    struct est_slot *s = est_slot(d, key);
    return s->key == key ? s->ns : 0;
}

static void est_update(struct dev_state *d, const void *key, uint64_t actual)
{
    struct est_slot *s = est_slot(d, key);
    if (actual == 0)
        actual = 1; /* 0 means "never measured" */
    if (s->key != key || s->ns == 0) {
        s->key = key;
        s->ns = actual;
    } else {
        s->ns = (s->ns * 7 + actual) / 8;
    }
}

/* Records ev on stream, recreating the event once (it may belong to another
 * context); returns the recorded event or NULL. */
static void *record(struct gv_throttle *t, struct dev_state *d, void *stream)
{
    void *ev = d->nspare ? d->spare[--d->nspare] : NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (ev == NULL && t->ops.event_create(t->ops.ctx, &ev) != 0)
            return NULL;
        if (t->ops.event_record(t->ops.ctx, ev, stream) == 0)
            return ev;
        t->ops.event_destroy(t->ops.ctx, ev);
        ev = NULL;
    }
    return NULL;
}

/* Adds delta to the budget, never above the cap (credit is bounded). */
static void pool_add(struct dev_state *d, int64_t delta)
{
    int64_t t = atomic_fetch_add(&d->pool->tokens, delta) + delta;
    while (t > d->cap && !atomic_compare_exchange_weak(&d->pool->tokens, &t, d->cap))
        ;
}

/* Refills the budget at pct% of the time since the last refill by any
 * process sharing it (the compare-and-swap on last_ns hands each interval to
 * exactly one of them). */
static void refill(struct dev_state *d, uint64_t now)
{
    if (d->pct == 0)
        return;
    /* Stored as time + 1 so that 0 means "never" even on a clock at 0. */
    uint64_t stamp = now + 1, last = atomic_load(&d->pool->last_ns);
    /* A refill time ahead of now: the clock restarted (the host rebooted under
     * a surviving shared region).  Start over rather than wait for it. */
    if (last > stamp + 1000000000ull &&
        atomic_compare_exchange_strong(&d->pool->last_ns, &last, 0)) {
        atomic_store(&d->pool->tokens, 0);
        last = 0;
    }
    while (stamp > last) {
        if (atomic_compare_exchange_weak(&d->pool->last_ns, &last, stamp)) {
            if (last == 0)
                return; /* the budget starts empty, at the first launch */
            uint64_t dt = stamp - last;
            if (dt > 1000000000ull)
                dt = 1000000000ull;
            pool_add(d, (int64_t)(dt * d->pct / 100));
            return;
        }
    }
}

/* Publishes this process's utilisation of the device once per second. */
static void util_account(struct dev_state *d, uint64_t now)
{
    if (d->util == NULL)
        return;
    if (d->util_start == 0 || now < d->util_start) {
        d->util_start = now;
        d->util_busy = 0;
    } else if (now - d->util_start >= 1000000000ull) {
        uint64_t pct = d->util_busy * 100 / (now - d->util_start);
        atomic_store_explicit(d->util, (uint32_t)(pct > 100 ? 100 : pct), memory_order_relaxed);
        d->util_start = now;
        d->util_busy = 0;
    }
}

/* Charges every completed bracket, oldest first. */
static void reap(struct gv_throttle *t, struct dev_state *d)
{
    while (d->count > 0) {
        struct bracket *b = &d->ring[d->head];
        uint64_t actual = b->est;
        bool measured = false;
        if (b->state == B_LAUNCHING)
            break; /* another thread is between before() and after() */
        if (b->state == B_ENDED && b->start && b->end) {
            int q = t->ops.event_query(t->ops.ctx, b->end);
            if (q == 0)
                break;
            measured = q > 0 && t->ops.event_elapsed_ns(t->ops.ctx, b->start, b->end, &actual) == 0;
            if (!measured)
                actual = b->est; /* keep the estimate as the charge */
        }
        if (b->state == B_ENDED) {
            if (d->pct)
                pool_add(d, (int64_t)b->est - (int64_t)actual);
            atomic_fetch_add_explicit(&d->pool->busy_ns, actual, memory_order_relaxed);
            d->util_busy += actual;
            d->inflight_est -= b->est;
            d->st.busy_ns += actual;
            if (measured) {
                est_update(d, b->key, actual);
                d->st.measured++;
            } else if (!d->warned) {
                d->warned = true;
                gv_warn("compute share: a launch could not be timed (event record/query "
                        "failed); it is charged its estimate");
            }
        }
        spare_put(t, d, b->start);
        spare_put(t, d, b->end);
        memset(b, 0, sizeof(*b));
        d->head = (d->head + 1) % RING;
        d->count--;
    }
}

static void start_device(struct gv_throttle *t, struct dev_state *d, int dev, uint64_t now)
{
    d->started = true;
    if (t->priority < 0)
        return;
    char key[128];
    struct gv_error err = {0};
    if (t->ops.device_key(t->ops.ctx, dev, key, sizeof(key)) != 0) {
        gv_warn("priority: no identity for device %d; priority disabled on it", dev);
        return;
    }
    if (gv_prio_open(t->node_dir, key, t->priority, now, &d->prio, &err) != GV_OK)
        gv_warn("priority disabled on device %d: %s", dev, err.msg);
}

void gv_throttle_before(struct gv_throttle *t, struct gv_throttle_launch *l)
{
    l->slot = -1;
    if (l->dev < 0 || l->dev >= GV_THROTTLE_MAX_DEVICES || !t->dev[l->dev].active)
        return;
    /* Launches into a capturing stream only record a graph; the graph's own
     * launch is what runs, and is charged then. */
    if (t->ops.stream_capturing(t->ops.ctx, l->stream) == 1)
        return;

    struct dev_state *d = &t->dev[l->dev];
    pthread_mutex_lock(&d->mu);
    uint64_t now = t->ops.clock_ns(t->ops.ctx);
    if (!d->started)
        start_device(t, d, l->dev, now);
    uint64_t est;
    for (;;) {
        reap(t, d);
        refill(d, now);
        util_account(d, now);
        est = est_get(d, l->key);
        uint64_t yield = d->prio ? gv_prio_wait_ns(d->prio, now) : 0;
        uint64_t wait = yield;
        int64_t tokens = atomic_load(&d->pool->tokens);
        bool paced = false;
        if (d->pct && tokens < 0) {
            uint64_t w = ((uint64_t)-tokens * 100 + d->pct - 1) / d->pct;
            /* A debt of a few ns (refills round down) would ask for sleeps
             * of a few ns: on a virtual clock shared by two processes of one
             * budget they crawled forward 3 ns per turn.  Sleeping at least
             * POLL_NS costs no share: the bucket keeps the credit. */
            w = w < POLL_NS ? POLL_NS : w;
            wait = w > wait ? w : wait;
            paced = yield == 0;
        }
        /* A kernel never measured is let through alone, so a burst of unknown
         * work cannot queue up ahead of the first measurement. */
        bool held = d->count == RING || (est == 0 && d->count > 0) ||
                    (d->prio && d->count > 0 && d->inflight_est >= LOW_INFLIGHT_NS &&
                     gv_prio_higher_present(d->prio, now));
        if (held && wait < POLL_NS)
            wait = POLL_NS;
        /* Below level 0: a bounded queue even with nobody above us yet. */
        if (!held && d->prio && t->priority > 0 && d->count > 0 &&
            d->inflight_est >= LOW_ALONE_INFLIGHT_NS) {
            uint64_t w = d->inflight_est / 4;
            w = w > LOW_ALONE_SLEEP_MAX_NS ? LOW_ALONE_SLEEP_MAX_NS : w;
            wait = w > wait ? w : wait;
        }
        if (wait == 0)
            break;
        /* A waiting tenant is present: lower ones keep little queued.  One
         * waiting for its own share will launch nothing before the wait
         * ends, so lower ones may fill the gap (no grace). */
        if (d->prio && paced)
            gv_prio_publish_paced(d->prio, now, d->busy_until);
        else if (d->prio)
            gv_prio_publish(d->prio, now, d->busy_until);
        pthread_mutex_unlock(&d->mu);
        t->ops.sleep_ns(t->ops.ctx, wait > MAX_SLEEP_NS ? MAX_SLEEP_NS : wait);
        pthread_mutex_lock(&d->mu);
        uint64_t after = t->ops.clock_ns(t->ops.ctx);
        d->st.waited_ns += after - now;
        /* only on the waiting path: the launch fast path never gets here */
        atomic_fetch_add_explicit(&d->pool->throttled_ns, after - now, memory_order_relaxed);
        if (yield)
            d->st.yielded_ns += after - now;
        now = after;
    }
    if (d->pct)
        atomic_fetch_sub(&d->pool->tokens, (int64_t)est);
    d->inflight_est += est;
    /* Announce the work before it is queued, so a lower-priority tenant
     * deciding at the same moment already sees it. */
    if (d->prio) {
        uint64_t base = d->busy_until > now ? d->busy_until : now;
        d->busy_until = base + (est ? est : POLL_NS);
        gv_prio_publish(d->prio, now, d->busy_until);
    }
    unsigned slot = (d->head + d->count) % RING;
    d->count++;
    struct bracket *b = &d->ring[slot];
    b->key = l->key;
    b->est = est;
    b->state = B_LAUNCHING;
    b->start = record(t, d, l->stream);
    l->slot = (int)slot;
    pthread_mutex_unlock(&d->mu);
}

void gv_throttle_after(struct gv_throttle *t, struct gv_throttle_launch *l, bool launched)
{
    if (l->slot < 0)
        return;
    struct dev_state *d = &t->dev[l->dev];
    pthread_mutex_lock(&d->mu);
    struct bracket *b = &d->ring[l->slot];
    if (!launched) {
        if (d->pct)
            pool_add(d, (int64_t)b->est);
        d->inflight_est -= b->est;
        b->state = B_CANCELLED;
    } else {
        b->end = record(t, d, l->stream);
        b->state = B_ENDED;
        d->st.launches++;
    }
    pthread_mutex_unlock(&d->mu);
    l->slot = -1;
}

void gv_throttle_get_stats(struct gv_throttle *t, int dev, struct gv_throttle_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (t == NULL || dev < 0 || dev >= GV_THROTTLE_MAX_DEVICES)
        return;
    struct dev_state *d = &t->dev[dev];
    pthread_mutex_lock(&d->mu);
    reap(t, d);
    *out = d->st;
    pthread_mutex_unlock(&d->mu);
}

/* ---- operations on a CUDA driver (real or fake) -------------------------- */

static struct {
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_query)(CUevent);
    CUresult (*event_elapsed)(float *, CUevent, CUevent);
    CUresult (*event_destroy)(CUevent);
    CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_uuid)(CUuuid *, CUdevice);
    CUresult (*exchange_capture_mode)(CUstreamCaptureMode *);
    uint64_t (*fake_clock)(void);
    void (*fake_sleep)(uint64_t);
} g_drv;

static uint64_t drv_clock(void *ctx)
{
    (void)ctx;
    if (g_drv.fake_clock)
        return g_drv.fake_clock();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void drv_sleep(void *ctx, uint64_t ns)
{
    (void)ctx;
    if (g_drv.fake_sleep) {
        g_drv.fake_sleep(ns);
        return;
    }
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

static int drv_event_create(void *ctx, void **ev)
{
    (void)ctx;
    CUevent e = NULL;
    if (g_drv.event_create(&e, 0) != CUDA_SUCCESS)
        return -1;
    *ev = e;
    return 0;
}

static int drv_event_record(void *ctx, void *ev, void *stream)
{
    (void)ctx;
    return g_drv.event_record((CUevent)ev, (CUstream)stream) == CUDA_SUCCESS ? 0 : -1;
}

/*
 * Querying an event is a "potentially unsafe" call while any thread captures
 * a graph in global mode: it would invalidate the application's capture.
 * Our events are never recorded in a capture, so this thread switches to the
 * relaxed mode around each query, as the driver documentation intends for
 * libraries.
 */
static CUstreamCaptureMode relax_capture(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (g_drv.exchange_capture_mode == NULL || g_drv.exchange_capture_mode(&mode) != CUDA_SUCCESS)
        mode = CU_STREAM_CAPTURE_MODE_RELAXED; /* nothing to restore */
    return mode;
}

static void restore_capture(CUstreamCaptureMode mode)
{
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED && g_drv.exchange_capture_mode != NULL)
        g_drv.exchange_capture_mode(&mode);
}

static int drv_event_query(void *ctx, void *ev)
{
    (void)ctx;
    CUstreamCaptureMode mode = relax_capture();
    CUresult rc = g_drv.event_query((CUevent)ev);
    restore_capture(mode);
    return rc == CUDA_SUCCESS ? 1 : rc == CUDA_ERROR_NOT_READY ? 0 : -1;
}

static int drv_event_elapsed(void *ctx, void *start, void *end, uint64_t *ns)
{
    (void)ctx;
    float ms = 0;
    CUstreamCaptureMode mode = relax_capture();
    CUresult rc = g_drv.event_elapsed(&ms, (CUevent)start, (CUevent)end);
    restore_capture(mode);
    if (rc != CUDA_SUCCESS || ms < 0)
        return -1;
    *ns = (uint64_t)((double)ms * 1e6 + 0.5);
    return 0;
}

static void drv_event_destroy(void *ctx, void *ev)
{
    (void)ctx;
    g_drv.event_destroy((CUevent)ev);
}

static int drv_capturing(void *ctx, void *stream)
{
    (void)ctx;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (g_drv.is_capturing((CUstream)stream, &st) != CUDA_SUCCESS)
        return -1;
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static int drv_device_key(void *ctx, int dev, char *buf, unsigned len)
{
    (void)ctx;
    CUdevice d;
    CUuuid u;
    if (g_drv.device_get(&d, dev) != CUDA_SUCCESS || g_drv.device_uuid(&u, d) != CUDA_SUCCESS)
        return -1;
    return gv_cuda_uuid_text(&u, "GPU-", buf, len) ? 0 : -1;
}

gv_status gv_throttle_driver_ops(gv_throttle_sym_fn sym, void *arg, struct gv_throttle_ops *ops,
                                 struct gv_error *err)
{
    /* Newest names first: CUDA 13 renamed cuEventElapsedTime to _v2. */
    static const char *const elapsed_names[] = {"cuEventElapsedTime_v2", "cuEventElapsedTime"};
    static const char *const uuid_names[] = {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"};
    void *p;

    memset(&g_drv, 0, sizeof(g_drv));
#define GV_RESOLVE(field, name)                                                                    \
    do {                                                                                           \
        if ((p = sym(arg, name)) == NULL)                                                          \
            return gv_error_set(err, GV_EUNSUPPORTED, "throttle: driver lacks %s", name);          \
        memcpy(&g_drv.field, &p, sizeof(p));                                                       \
    } while (0)
    GV_RESOLVE(event_create, "cuEventCreate");
    GV_RESOLVE(event_record, "cuEventRecord");
    GV_RESOLVE(event_query, "cuEventQuery");
    GV_RESOLVE(event_destroy, "cuEventDestroy_v2");
    GV_RESOLVE(is_capturing, "cuStreamIsCapturing");
    GV_RESOLVE(device_get, "cuDeviceGet");
#undef GV_RESOLVE
    for (size_t i = 0; i < 2 && g_drv.event_elapsed == NULL; i++)
        if ((p = sym(arg, elapsed_names[i])) != NULL)
            memcpy(&g_drv.event_elapsed, &p, sizeof(p));
    for (size_t i = 0; i < 2 && g_drv.device_uuid == NULL; i++)
        if ((p = sym(arg, uuid_names[i])) != NULL)
            memcpy(&g_drv.device_uuid, &p, sizeof(p));
    if (g_drv.event_elapsed == NULL || g_drv.device_uuid == NULL)
        return gv_error_set(err, GV_EUNSUPPORTED, "throttle: driver lacks %s",
                            g_drv.event_elapsed ? "cuDeviceGetUuid" : "cuEventElapsedTime");
    /* Optional (CUDA 10.1+): relaxed capture mode around our queries. */
    if ((p = sym(arg, "cuThreadExchangeStreamCaptureMode")) != NULL)
        memcpy(&g_drv.exchange_capture_mode, &p, sizeof(p));
    /* Test seam: only the fake driver exports these. */
    if ((p = sym(arg, "gvfake_clock_ns")) != NULL)
        memcpy(&g_drv.fake_clock, &p, sizeof(p));
    if ((p = sym(arg, "gvfake_sleep_ns")) != NULL)
        memcpy(&g_drv.fake_sleep, &p, sizeof(p));
    if ((g_drv.fake_clock == NULL) != (g_drv.fake_sleep == NULL))
        return gv_error_set(err, GV_EUNSUPPORTED,
                            "throttle: driver exports only one of "
                            "gvfake_clock_ns/gvfake_sleep_ns");

    *ops = (struct gv_throttle_ops){
        .ctx = NULL,
        .clock_ns = drv_clock,
        .sleep_ns = drv_sleep,
        .event_create = drv_event_create,
        .event_record = drv_event_record,
        .event_query = drv_event_query,
        .event_elapsed_ns = drv_event_elapsed,
        .event_destroy = drv_event_destroy,
        .stream_capturing = drv_capturing,
        .device_key = drv_device_key,
    };
    return GV_OK;
}
