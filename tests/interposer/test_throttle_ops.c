/*
 * The compute-share throttle's edges that the share tests (test_throttle.c)
 * never reach: the driver operations it builds from the driver's symbols
 * (what it refuses to run without, the capture mode it must hand back to the
 * application, the driver's failures), and launches it must leave alone
 * (a capturing stream, a device it does not govern, an index outside its
 * table).  Stand-in CUDA entry points replace the fake driver's where a test
 * needs to see or steer what the throttle calls; the rest come from the
 * fake libcuda.so.1, loaded as the interposer loads a driver.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/gv_cuda.h"
#include "interposer/priority.h"
#include "interposer/throttle.h"
#include "throttle_stub.h"

static void *g_handle;
static char g_dir[256];

/* ---- stand-in driver entry points ---------------------------------------- */

static const char *g_hide[4]; /* names the "driver" does not export */
static bool g_stubs;          /* the stand-ins below replace the fake's */

/* The calling thread's capture mode, as the driver keeps it per thread. */
static CUstreamCaptureMode g_mode;
static CUstreamCaptureMode g_mode_seen; /* the mode a query or timing ran under */
static CUresult g_exchange_rc, g_query_rc, g_elapsed_rc, g_capturing_rc;
static float g_ms;
static CUstreamCaptureStatus g_cap_status;

static CUresult stub_exchange(CUstreamCaptureMode *mode)
{
    if (g_exchange_rc != CUDA_SUCCESS)
        return g_exchange_rc;
    CUstreamCaptureMode old = g_mode;
    g_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

static CUresult stub_query(CUevent ev)
{
    (void)ev;
    g_mode_seen = g_mode;
    return g_query_rc;
}

static CUresult stub_elapsed(float *ms, CUevent a, CUevent b)
{
    (void)a;
    (void)b;
    g_mode_seen = g_mode;
    *ms = g_ms;
    return g_elapsed_rc;
}

static CUresult stub_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    (void)s;
    *st = g_cap_status;
    return g_capturing_rc;
}

static void *sym(void *arg, const char *name)
{
    (void)arg;
    for (size_t i = 0; i < sizeof(g_hide) / sizeof(g_hide[0]); i++)
        if (g_hide[i] != NULL && strcmp(g_hide[i], name) == 0)
            return NULL;
    if (g_stubs) {
        static const struct {
            const char *name;
            void *fn;
        } stubs[] = {
            {"cuThreadExchangeStreamCaptureMode", (void *)stub_exchange},
            {"cuEventQuery", (void *)stub_query},
            {"cuEventElapsedTime_v2", (void *)stub_elapsed},
            {"cuEventElapsedTime", (void *)stub_elapsed},
            {"cuStreamIsCapturing", (void *)stub_capturing},
        };
        for (size_t i = 0; i < sizeof(stubs) / sizeof(stubs[0]); i++)
            if (strcmp(stubs[i].name, name) == 0)
                return stubs[i].fn;
    }
    return dlsym(g_handle, name);
}

static void driver_reset(void)
{
    memset(g_hide, 0, sizeof(g_hide));
    g_stubs = false;
    g_mode = g_mode_seen = CU_STREAM_CAPTURE_MODE_GLOBAL;
    g_exchange_rc = g_query_rc = g_elapsed_rc = g_capturing_rc = CUDA_SUCCESS;
    g_ms = 0;
    g_cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
}

/* gv_throttle_driver_ops with the names given hidden: its status, and the
 * error's text in msg. */
static gv_status ops_without(const char *a, const char *b, char *msg, size_t cap)
{
    driver_reset();
    g_hide[0] = a;
    g_hide[1] = b;
    struct gv_throttle_ops ops;
    struct gv_error err = {0};
    gv_status rc = gv_throttle_driver_ops(sym, NULL, &ops, &err);
    snprintf(msg, cap, "%s", err.msg);
    return rc;
}

/* The throttle calls every operation it resolved, so one it could not
 * resolve must refuse the whole set: a driver without cuEventElapsedTime
 * (both names) or cuDeviceGetUuid gives no throttle, never a NULL call. */
static void test_driver_ops_refuse_missing_entry_points(void **state)
{
    (void)state;
    char msg[sizeof(((struct gv_error *)0)->msg)];
    assert_int_equal(ops_without(NULL, NULL, msg, sizeof(msg)), GV_OK);
    assert_int_equal(ops_without("cuEventElapsedTime_v2", "cuEventElapsedTime", msg, sizeof(msg)),
                     GV_EUNSUPPORTED);
    assert_non_null(strstr(msg, "cuEventElapsedTime"));
    assert_int_equal(ops_without("cuDeviceGetUuid_v2", "cuDeviceGetUuid", msg, sizeof(msg)),
                     GV_EUNSUPPORTED);
    assert_non_null(strstr(msg, "cuDeviceGetUuid"));
    /* an older driver with only the first names is enough */
    assert_int_equal(ops_without("cuEventElapsedTime_v2", "cuDeviceGetUuid_v2", msg, sizeof(msg)),
                     GV_OK);
    assert_int_equal(ops_without("cuEventCreate", NULL, msg, sizeof(msg)), GV_EUNSUPPORTED);
    assert_non_null(strstr(msg, "cuEventCreate"));
    assert_int_equal(ops_without("cuStreamIsCapturing", NULL, msg, sizeof(msg)), GV_EUNSUPPORTED);
    /* the optional capture-mode call may be missing */
    assert_int_equal(ops_without("cuThreadExchangeStreamCaptureMode", NULL, msg, sizeof(msg)),
                     GV_OK);
    /* the test seam comes as a pair: one clock without its sleep would
     * wait on a clock that never moves */
    assert_int_equal(ops_without("gvfake_sleep_ns", NULL, msg, sizeof(msg)), GV_EUNSUPPORTED);
    assert_non_null(strstr(msg, "only one of"));
    assert_int_equal(ops_without("gvfake_clock_ns", NULL, msg, sizeof(msg)), GV_EUNSUPPORTED);
}

static struct gv_throttle_ops stub_ops(void)
{
    driver_reset();
    g_stubs = true;
    struct gv_throttle_ops ops;
    struct gv_error err = {0};
    assert_int_equal(gv_throttle_driver_ops(sym, NULL, &ops, &err), GV_OK);
    return ops;
}

/*
 * Querying or timing an event is "potentially unsafe" while a thread of the
 * application captures a graph in global mode, so the throttle switches its
 * thread to relaxed mode around each call and must give the application's
 * mode back afterwards: a thread left relaxed no longer protects the
 * application's own capture.
 */
static void test_event_calls_relax_and_restore_capture_mode(void **state)
{
    (void)state;
    struct gv_throttle_ops ops = stub_ops();
    uint64_t ns = 7;
    int ev;

    g_query_rc = CUDA_SUCCESS;
    assert_int_equal(ops.event_query(ops.ctx, &ev), 1);
    assert_int_equal(g_mode_seen, CU_STREAM_CAPTURE_MODE_RELAXED);
    assert_int_equal(g_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);

    g_mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    g_ms = 2.5f;
    assert_int_equal(ops.event_elapsed_ns(ops.ctx, &ev, &ev, &ns), 0);
    assert_int_equal(ns, 2500000);
    assert_int_equal(g_mode_seen, CU_STREAM_CAPTURE_MODE_RELAXED);
    assert_int_equal(g_mode, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);

    /* already relaxed: stays so */
    g_mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    g_query_rc = CUDA_ERROR_NOT_READY;
    assert_int_equal(ops.event_query(ops.ctx, &ev), 0);
    assert_int_equal(g_mode, CU_STREAM_CAPTURE_MODE_RELAXED);

    /* the exchange refused: the query still runs, nothing is "restored" */
    g_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    g_exchange_rc = CUDA_ERROR_INVALID_VALUE;
    g_query_rc = CUDA_ERROR_INVALID_HANDLE;
    assert_int_equal(ops.event_query(ops.ctx, &ev), -1);
    assert_int_equal(g_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* A timing the driver refuses, or a negative one, is no measurement: the
 * launch keeps its estimate as its charge (throttle.c, reap).  A zero is. */
static void test_event_timing_failures(void **state)
{
    (void)state;
    struct gv_throttle_ops ops = stub_ops();
    int ev;
    uint64_t ns = 7;
    g_elapsed_rc = CUDA_ERROR_INVALID_HANDLE;
    g_ms = 0;
    assert_int_equal(ops.event_elapsed_ns(ops.ctx, &ev, &ev, &ns), -1);
    assert_int_equal(ns, 7);
    g_elapsed_rc = CUDA_SUCCESS;
    g_ms = -1.0f;
    assert_int_equal(ops.event_elapsed_ns(ops.ctx, &ev, &ev, &ns), -1);
    assert_int_equal(ns, 7);
    g_ms = 0;
    assert_int_equal(ops.event_elapsed_ns(ops.ctx, &ev, &ev, &ns), 0);
    assert_int_equal(ns, 0);
}

static void test_stream_capturing_answers(void **state)
{
    (void)state;
    struct gv_throttle_ops ops = stub_ops();
    int s;
    g_cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
    assert_int_equal(ops.stream_capturing(ops.ctx, &s), 0);
    g_cap_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    assert_int_equal(ops.stream_capturing(ops.ctx, &s), 1);
    g_cap_status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    assert_int_equal(ops.stream_capturing(ops.ctx, &s), 1);
    g_capturing_rc = CUDA_ERROR_INVALID_HANDLE;
    assert_int_equal(ops.stream_capturing(ops.ctx, &s), -1);
}

/* ---- launches the throttle leaves alone ----------------------------------- */

static struct gv_throttle *ops_throttle(int priority, unsigned pct0, struct gv_throttle_pool *pool)
{
    struct gv_throttle_ops ops = throttle_stub_ops();
    struct gv_throttle_config cfg = {.priority = priority, .node_dir = g_dir};
    cfg.sm_limit[0] = pct0;
    cfg.pool[0] = pool;
    struct gv_throttle *t = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_throttle_new(&cfg, &ops, &t, &err), GV_OK);
    assert_non_null(t);
    return t;
}

/* Launches into a capturing stream only record a graph: the throttle must
 * neither charge them nor record its events into the capture (an event
 * record there becomes a node of the application's graph). */
static void test_capturing_launch_untouched(void **state)
{
    (void)state;
    struct gv_throttle_pool pool = {0};
    struct gv_throttle *t = ops_throttle(-1, 30, &pool);
    struct gv_throttle_stats st;
    int key;
    g_stub.records = 0;
    g_stub.capturing = 1;
    for (int i = 0; i < 10; i++) {
        struct gv_throttle_launch l = {.dev = 0, .key = &key};
        gv_throttle_before(t, &l);
        assert_int_equal(l.slot, -1);
        gv_throttle_after(t, &l, true);
    }
    assert_int_equal(g_stub.records, 0);
    gv_throttle_get_stats(t, 0, &st);
    assert_int_equal(st.launches, 0);
    /* the same launches outside a capture are governed */
    g_stub.capturing = 0;
    struct gv_throttle_launch l = {.dev = 0, .key = &key};
    gv_throttle_before(t, &l);
    assert_true(l.slot >= 0);
    gv_throttle_after(t, &l, true);
    assert_int_equal(g_stub.records, 2);
    gv_throttle_get_stats(t, 0, &st);
    assert_int_equal(st.launches, 1);
    /* Seconds later: a throttle given no utilisation field (no shared
     * region) has nowhere to publish and must not try. */
    g_stub.now += 3000000000ull;
    gv_throttle_before(t, &l);
    assert_true(l.slot >= 0);
    gv_throttle_after(t, &l, true);
    gv_throttle_get_stats(t, 0, &st);
    assert_int_equal(st.launches, 2);
    gv_throttle_free(t);
}

/* A device without a limit, and ordinals outside the table, are passed
 * through: no slot, nothing counted, no memory outside the table touched;
 * asking for their statistics (or a NULL throttle's) gives zeros. */
static void test_ungoverned_devices(void **state)
{
    (void)state;
    struct gv_throttle *t = ops_throttle(-1, 30, NULL);
    struct gv_throttle_stats st;
    int key;
    const int devs[] = {1, GV_THROTTLE_MAX_DEVICES - 1, GV_THROTTLE_MAX_DEVICES, -1, 1 << 20};
    g_stub.capturing = 0;
    g_stub.records = 0;
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++) {
        struct gv_throttle_launch l = {.dev = devs[i], .key = &key};
        gv_throttle_before(t, &l);
        assert_int_equal(l.slot, -1);
        gv_throttle_after(t, &l, true);
        gv_throttle_get_stats(t, devs[i], &st);
        assert_int_equal(st.launches, 0);
        assert_int_equal(st.busy_ns, 0);
    }
    assert_int_equal(g_stub.records, 0);
    for (int d = 0; d < GV_THROTTLE_MAX_DEVICES; d++) {
        gv_throttle_get_stats(t, d, &st);
        assert_int_equal(st.launches, 0);
    }
    memset(&st, 0xff, sizeof(st));
    gv_throttle_get_stats(NULL, 0, &st);
    assert_int_equal(st.launches, 0);
    assert_int_equal(st.waited_ns, 0);
    gv_throttle_free(t);
}

static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Without a priority the node's board is never opened: a process with only
 * a compute share takes none of the GPU's 64 board slots.  With one, it is. */
static void test_board_only_with_priority(void **state)
{
    (void)state;
    int key;
    assert_int_equal(dir_entries(g_dir), 0);
    struct gv_throttle *t = ops_throttle(-1, 30, NULL);
    struct gv_throttle_launch l = {.dev = 0, .key = &key};
    gv_throttle_before(t, &l);
    gv_throttle_after(t, &l, true);
    assert_int_equal(dir_entries(g_dir), 0);
    gv_throttle_free(t);

    t = ops_throttle(1, 30, NULL);
    gv_throttle_before(t, &l);
    gv_throttle_after(t, &l, true);
    assert_true(dir_entries(g_dir) > 0);
    gv_throttle_free(t);
}

int main(void)
{
    if (throttle_stub_setup("throttle-ops", g_dir, sizeof(g_dir), &g_handle) != 0)
        return 1;
    g_stub = (struct throttle_stub){.now = 1000, .key_prefix = "GPU-ops"};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_driver_ops_refuse_missing_entry_points),
        cmocka_unit_test(test_event_calls_relax_and_restore_capture_mode),
        cmocka_unit_test(test_event_timing_failures),
        cmocka_unit_test(test_stream_capturing_answers),
        cmocka_unit_test(test_capturing_launch_untouched),
        cmocka_unit_test(test_ungoverned_devices),
        cmocka_unit_test(test_board_only_with_priority),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    throttle_stub_teardown(g_dir, g_handle);
    return rc;
}
