/*
 * Compute share and priority on the fake driver's virtual clock.
 *
 * Each tenant is a forked process with its own throttle (as each container
 * has its own libgpuvisor) that launches a compute-bound stream of kernels;
 * tenants share one fake GPU through GV_FAKE_GPU_STATE.  Achieved share is
 * the tenant's kernel time over the virtual time its run took, so results do
 * not depend on how fast this machine is.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/gv_cuda.h"
#include "interposer/priority.h"
#include "interposer/throttle.h"
#include "throttle_stub.h"

#define MS 1000000ull
#define HORIZON (2000 * MS)
#define KERNEL_NS (1 * MS)

enum api { API_KERNEL, API_EX, API_COOP, API_MULTI, API_GRAPH };

struct tenant {
    unsigned pct;
    int prio;
    enum gv_ipcfg_policy policy;
    enum api api;
    uint64_t horizon; /* stop launching at this virtual time */
    uint64_t mark;    /* count launches made at or after this time too */
    uint64_t idle;    /* after the first launch, sleep this long (virtual) */
    uint64_t start;   /* before the first launch, sleep this long (arrive late) */
    bool steps;       /* a training-like loop: 20 x 50 us kernels, sync, 2 ms on the CPU */
};

struct result {
    uint64_t kernels;
    uint64_t kernels_after_mark;
    uint64_t first_after_mark; /* virtual time the first of those was let through */
    uint64_t end_ns;
    uint64_t busy_ns; /* measured by the throttle */
    uint64_t waited_ns; /* launches waited in the gate (this process) */
    uint64_t gpu_ns;  /* what the fake GPU ran for this tenant */
    uint32_t util;    /* utilisation the throttle last published */
    int ok;
};

static char g_dir[256];
/* Per run: board times are on the fake's clock, which restarts with each GPU. */
static char g_node[300];
static int g_run;

static void *(*g_dl)(void *, const char *);
static void *g_handle;

static void *sym(void *arg, const char *name)
{
    (void)arg;
    return g_dl(g_handle, name);
}

/* Resolved fake-driver entry points (the test calls the driver as an
 * application would, by symbol). */
static struct {
    __typeof__(&cuInit) init;
    __typeof__(&cuDevicePrimaryCtxRetain) retain;
    __typeof__(&cuCtxSetCurrent) set_current;
    void (*sleep)(uint64_t);
    __typeof__(&cuModuleLoadData) mod_load;
    __typeof__(&cuModuleGetFunction) get_fn;
    __typeof__(&cuStreamCreate) stream_create;
    __typeof__(&cuStreamSynchronize) stream_sync;
    __typeof__(&cuLaunchKernel) launch;
    __typeof__(&cuLaunchKernelEx) launch_ex;
    __typeof__(&cuLaunchCooperativeKernel) launch_coop;
    __typeof__(&cuLaunchCooperativeKernelMultiDevice) launch_multi;
    __typeof__(&cuStreamBeginCapture_v2) begin_capture;
    __typeof__(&cuStreamEndCapture) end_capture;
    __typeof__(&cuGraphInstantiateWithFlags) instantiate;
    __typeof__(&cuGraphLaunch) graph_launch;
    uint64_t (*clock)(void);
    uint64_t (*busy)(void);
} F;

static void resolve(void)
{
#define R(field, name)                                                                             \
    do {                                                                                           \
        void *p = sym(NULL, name);                                                                 \
        assert_non_null(p);                                                                        \
        memcpy(&F.field, &p, sizeof(p));                                                           \
    } while (0)
    R(init, "cuInit");
    R(retain, "cuDevicePrimaryCtxRetain");
    R(set_current, "cuCtxSetCurrent");
    R(sleep, "gvfake_sleep_ns");
    R(mod_load, "cuModuleLoadData");
    R(get_fn, "cuModuleGetFunction");
    R(stream_create, "cuStreamCreate");
    R(stream_sync, "cuStreamSynchronize");
    R(launch, "cuLaunchKernel");
    R(launch_ex, "cuLaunchKernelEx");
    R(launch_coop, "cuLaunchCooperativeKernel");
    R(launch_multi, "cuLaunchCooperativeKernelMultiDevice");
    R(begin_capture, "cuStreamBeginCapture_v2");
    R(end_capture, "cuStreamEndCapture");
    R(instantiate, "cuGraphInstantiateWithFlags");
    R(graph_launch, "cuGraphLaunch");
    R(clock, "gvfake_clock_ns");
    R(busy, "gvfake_process_busy_ns");
#undef R
}

/* Set by a test: a budget shared by every tenant of the run, as processes of
 * one container share the one in their shared region. */
static struct gv_throttle_pool *g_pool;
/* Each tenant's published utilisation (the shared region's util field). */
static _Atomic uint32_t g_util;

static struct gv_throttle *make_throttle(const struct tenant *tn)
{
    struct gv_throttle_ops ops;
    struct gv_throttle_config cfg = {
        .policy = tn->policy, .priority = tn->prio, .node_dir = g_node};
    struct gv_throttle *t = NULL;
    struct gv_error err = {0};
    if (gv_throttle_driver_ops(sym, NULL, &ops, &err) != GV_OK) {
        fprintf(stderr, "driver ops: %s\n", err.msg);
        return NULL;
    }
    cfg.sm_limit[0] = tn->pct;
    cfg.pool[0] = g_pool;
    cfg.util[0] = &g_util;
    if (gv_throttle_new(&cfg, &ops, &t, &err) != GV_OK)
        fprintf(stderr, "throttle: %s\n", err.msg);
    return t;
}

static CUresult do_launch(const struct tenant *tn, CUfunction f, CUgraphExec g, CUstream s)
{
    CUlaunchConfig cfg = {.gridDimX = 132,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 256,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .hStream = s};
    CUDA_LAUNCH_PARAMS mp = {.function = f,
                             .gridDimX = 132,
                             .gridDimY = 1,
                             .gridDimZ = 1,
                             .blockDimX = 256,
                             .blockDimY = 1,
                             .blockDimZ = 1,
                             .hStream = s};
    switch (tn->api) {
    case API_KERNEL:
        return F.launch(f, 132, 1, 1, 256, 1, 1, 0, s, NULL, NULL);
    case API_EX:
        return F.launch_ex(&cfg, f, NULL, NULL);
    case API_COOP:
        return F.launch_coop(f, 132, 1, 1, 256, 1, 1, 0, s, NULL);
    case API_MULTI:
        return F.launch_multi(&mp, 1, 0);
    case API_GRAPH:
        return F.graph_launch(g, s);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Runs in the child: a compute-bound loop through the throttle gate. */
static struct result tenant_main(const struct tenant *tn)
{
    struct result r = {0};
    CUmodule m;
    CUfunction f;
    CUstream s;
    CUgraphExec g = NULL;
    struct gv_throttle *t = make_throttle(tn);
    bool want = tn->prio >= 0 || (tn->pct > 0 && tn->pct < 100 && tn->policy != GV_POLICY_DISABLE);

    CUcontext ctx;
    if ((t == NULL) == want)
        return r;
    if (F.init(0) || F.retain(&ctx, 0) || F.set_current(ctx))
        return r;
    if (F.mod_load(&m, "fake-image") || F.stream_create(&s, 0))
        return r;
    if (tn->api == API_GRAPH) {
        /* Four 250 us kernels captured into one graph: 1 ms per launch. */
        CUgraph graph;
        if (F.get_fn(&f, m, "step_250us") || F.begin_capture(s, 0 /* global */))
            return r;
        for (int i = 0; i < 4; i++) {
            /* Captured launches go through the gate too and must cost nothing. */
            struct gv_throttle_launch l = {.dev = 0, .stream = s, .key = f};
            if (t)
                gv_throttle_before(t, &l);
            CUresult rc = F.launch(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
            if (t)
                gv_throttle_after(t, &l, rc == CUDA_SUCCESS);
        }
        if (F.clock() != 0 || F.end_capture(s, &graph) || F.instantiate(&g, graph, 0))
            return r;
    } else if (F.get_fn(&f, m, tn->steps ? "step_50us" : "spin_1000us")) {
        return r;
    }
    if (tn->start)
        F.sleep(tn->start);
    uint64_t now;
    while ((now = F.clock()) < tn->horizon) {
        struct gv_throttle_launch l = {
            .dev = 0, .stream = s, .key = tn->api == API_GRAPH ? (const void *)g : f};
        if (t)
            gv_throttle_before(t, &l);
        uint64_t let = F.clock();
        bool late = let >= tn->mark;
        if (late && r.kernels_after_mark == 0)
            r.first_after_mark = let;
        CUresult rc = do_launch(tn, f, g, s);
        if (t)
            gv_throttle_after(t, &l, rc == CUDA_SUCCESS);
        if (rc != CUDA_SUCCESS)
            return r;
        r.kernels++;
        r.kernels_after_mark += late;
        if (r.kernels == 1 && tn->idle)
            F.sleep(tn->idle);
        if (tn->steps && r.kernels % 20 == 0) {
            F.stream_sync(s);
            F.sleep(2 * MS); /* data loading, host work */
        }
    }
    F.stream_sync(s);
    r.end_ns = F.clock();
    r.gpu_ns = F.busy();
    r.util = atomic_load(&g_util);
    if (t) {
        struct gv_throttle_stats st;
        gv_throttle_get_stats(t, 0, &st);
        r.busy_ns = st.busy_ns;
        r.waited_ns = st.waited_ns;
        gv_throttle_free(t);
    }
    r.ok = 1;
    return r;
}

/* Runs n tenants as processes on one fake GPU; fills res[]. */
static void run_tenants(const struct tenant *tn, int n, struct result *res)
{
    char state[512];
    char actors[16];
    int fds[8][2];
    pid_t pids[8];

    snprintf(state, sizeof(state), "%s/gpu-state-%d", g_dir, g_run);
    snprintf(g_node, sizeof(g_node), "%s/node-%d", g_dir, g_run++);
    assert_int_equal(mkdir(g_node, 0700), 0);
    snprintf(actors, sizeof(actors), "%d", n);
    setenv("GV_FAKE_GPU_STATE", state, 1);
    setenv("GV_FAKE_ACTORS", actors, 1);
    for (int i = 0; i < n; i++) {
        assert_int_equal(pipe(fds[i]), 0);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[i][0]);
            resolve();
            struct result r = tenant_main(&tn[i]);
            ssize_t w = write(fds[i][1], &r, sizeof(r));
            _exit(w == (ssize_t)sizeof(r) ? 0 : 1);
        }
        close(fds[i][1]);
    }
    for (int i = 0; i < n; i++) {
        int st;
        memset(&res[i], 0, sizeof(res[i]));
        assert_int_equal(read(fds[i][0], &res[i], sizeof(res[i])), (ssize_t)sizeof(res[i]));
        close(fds[i][0]);
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_int_equal(res[i].ok, 1);
    }
    unlink(state);
    strcat(state, ".clock");
    unlink(state);
}

/* Percent of the run's virtual time the fake GPU spent on this tenant. */
static double share(const struct result *r)
{
    return 100.0 * (double)r->gpu_ns / (double)r->end_ns;
}

static void check_share(const char *what, unsigned target, const struct result *r)
{
    double got = share(r);
    double measured = 100.0 * (double)r->busy_ns / (double)r->end_ns;
    printf("# %-28s target %2u%%  achieved %5.1f%%  (throttle measured %5.1f%%)\n", what, target,
           got, measured);
    assert_true(got >= target - 5.0 && got <= target + 5.0);
    /* The events saw what the GPU really ran for this tenant. */
    assert_true(measured >= got - 1.0 && measured <= got + 1.0);
}

static void test_share_alone(void **state)
{
    (void)state;
    for (unsigned p = 10; p <= 90; p += 10) {
        struct tenant tn = {.pct = p, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX};
        struct result r;
        run_tenants(&tn, 1, &r);
        check_share("alone", p, &r);
        /* What the monitor sees in the shared region agrees. */
        assert_true(r.util + 5 >= p && r.util <= p + 5);
    }
}

/* Teardown: later tests use private budgets again, whatever happened. */
static int drop_pool(void **state)
{
    (void)state;
    if (g_pool != NULL)
        munmap(g_pool, sizeof(*g_pool));
    g_pool = NULL;
    return 0;
}

/* Two processes of one container share its budget: together they get p%. */
static void test_share_pooled_per_container(void **state)
{
    (void)state;
    g_pool = mmap(NULL, sizeof(*g_pool), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g_pool != MAP_FAILED);
    memset(g_pool, 0, sizeof(*g_pool));
    struct tenant tn[2] = {
        {.pct = 40, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX},
        {.pct = 40, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX},
    };
    struct result r[2];
    run_tenants(tn, 2, r);
    uint64_t end = r[0].end_ns > r[1].end_ns ? r[0].end_ns : r[1].end_ns;
    double total = 100.0 * (double)(r[0].gpu_ns + r[1].gpu_ns) / (double)end;
    printf("# one container, two processes at 40%%: %.1f%% + %.1f%% = %.1f%%; pool says %u%%, "
           "measured %.1f s of GPU time\n",
           share(&r[0]), share(&r[1]), total, atomic_load(&g_pool->pct),
           (double)atomic_load(&g_pool->busy_ns) / 1e9);
    assert_true(total >= 35.0 && total <= 45.0);
    assert_int_equal(atomic_load(&g_pool->pct), 40);
    /* the container's throttled time (monitors read it from the region): both
     * processes' waits, summed in the shared pool */
    printf("# waited %.3f s + %.3f s; pool's throttled_ns says %.3f s\n", (double)r[0].waited_ns / 1e9,
           (double)r[1].waited_ns / 1e9, (double)atomic_load(&g_pool->throttled_ns) / 1e9);
    assert_true(r[0].waited_ns > 0 && r[1].waited_ns > 0);
    assert_int_equal(atomic_load(&g_pool->throttled_ns), r[0].waited_ns + r[1].waited_ns);
}

/* A budget whose last refill lies in the future (the clock restarted under a
 * surviving shared region) starts over instead of stalling the container. */
static void test_share_after_clock_restart(void **state)
{
    (void)state;
    g_pool = mmap(NULL, sizeof(*g_pool), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g_pool != MAP_FAILED);
    memset(g_pool, 0, sizeof(*g_pool));
    atomic_store(&g_pool->last_ns, 3600 * 1000 * MS);
    atomic_store(&g_pool->tokens, -1000 * (int64_t)MS);
    struct tenant tn = {.pct = 50, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX};
    struct result r;
    run_tenants(&tn, 1, &r);
    check_share("after a clock restart", 50, &r);
}

static void test_share_beside_second_tenant(void **state)
{
    (void)state;
    for (unsigned p = 10; p <= 90; p += 10) {
        struct tenant tn[2] = {
            {.pct = p, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX},
            {.pct = 100 - p, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX},
        };
        struct result r[2];
        run_tenants(tn, 2, r);
        check_share("beside a second tenant", p, &r[0]);
        check_share("  (the second tenant)", 100 - p, &r[1]);
    }
}

/* Kernels whose run time varies +-50% launch to launch (as real ones do with
 * input, clocks and caches): the share is still held, because the bucket is
 * charged what each launch measured, not what the estimate said. */
static void test_share_with_varying_kernels(void **state)
{
    (void)state;
    setenv("GV_FAKE_KERNEL_JITTER", "50", 1);
    for (unsigned p = 20; p <= 80; p += 30) {
        struct tenant tn = {.pct = p, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX};
        struct result r;
        run_tenants(&tn, 1, &r);
        check_share("alone, run time +-50%", p, &r);
    }
    struct tenant two[2] = {
        {.pct = 30, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX},
        {.pct = 70, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX},
    };
    struct result r[2];
    run_tenants(two, 2, r);
    check_share("beside 70%, run time +-50%", 30, &r[0]);
    check_share("  (the 70% one)", 70, &r[1]);
}

static int drop_jitter(void **state)
{
    (void)state;
    unsetenv("GV_FAKE_KERNEL_JITTER");
    return 0;
}

/*
 * A training-like loop (bursts of short kernels, a synchronize, host work)
 * uses a third of the GPU on its own: a 20% limit holds it to 20%, and a 50%
 * limit leaves it alone (the limit is a cap, not a target).
 */
static void test_share_of_a_step_loop(void **state)
{
    (void)state;
    struct result r;
    struct tenant tn = {
        .pct = 20, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX, .steps = true};
    run_tenants(&tn, 1, &r);
    check_share("step loop, limit 20%", 20, &r);
    tn.pct = 50;
    run_tenants(&tn, 1, &r);
    printf("# step loop, limit 50%%: %.1f%% (its own demand: 33.3%%)\n", share(&r));
    assert_true(share(&r) >= 32.0 && share(&r) <= 34.0);
}

static void test_share_every_launch_api(void **state)
{
    (void)state;
    static const struct {
        enum api api;
        const char *name;
    } apis[] = {{API_EX, "cuLaunchKernelEx"},
                {API_COOP, "cuLaunchCooperativeKernel"},
                {API_MULTI, "cuLaunchCoopKernelMultiDevice"},
                {API_GRAPH, "cuGraphLaunch (4 nodes)"}};
    for (size_t i = 0; i < sizeof(apis) / sizeof(apis[0]); i++) {
        struct tenant tn = {
            .pct = 30, .prio = -1, .api = apis[i].api, .horizon = HORIZON, .mark = UINT64_MAX};
        struct result r;
        run_tenants(&tn, 1, &r);
        check_share(apis[i].name, 30, &r);
    }
}

/*
 * The application captures a graph in global mode on one stream while it
 * launches throttled kernels on another: the throttle's event queries must
 * not invalidate the capture (they run in relaxed capture mode).
 */
static int capture_beside_throttled_launches(void)
{
    struct tenant tn = {.pct = 30, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX};
    struct gv_throttle *t = make_throttle(&tn);
    CUcontext ctx;
    CUmodule m;
    CUfunction f;
    CUstream cap, work;
    CUgraph graph;
    if (t == NULL || F.init(0) || F.retain(&ctx, 0) || F.set_current(ctx) ||
        F.mod_load(&m, "fake-image") || F.get_fn(&f, m, "spin_1000us") ||
        F.stream_create(&cap, 0) || F.stream_create(&work, 0))
        return 1;
    for (int i = 0; i < 40; i++) {
        if (i == 10 && F.begin_capture(cap, 0 /* global */))
            return 2;
        struct gv_throttle_launch l = {.dev = 0, .stream = work, .key = f};
        gv_throttle_before(t, &l);
        CUresult rc = F.launch(f, 1, 1, 1, 1, 1, 1, 0, work, NULL, NULL);
        gv_throttle_after(t, &l, rc == CUDA_SUCCESS);
        if (rc != CUDA_SUCCESS || (i >= 10 && F.launch(f, 1, 1, 1, 1, 1, 1, 0, cap, NULL, NULL)))
            return 3;
    }
    struct gv_throttle_stats st;
    gv_throttle_get_stats(t, 0, &st);
    if (st.measured < 20)
        return 4; /* the queries did run during the capture */
    return F.end_capture(cap, &graph) == CUDA_SUCCESS ? 0 : 5;
}

static void test_capture_survives_throttling(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof(path), "%s/gpu-capture", g_dir);
    setenv("GV_FAKE_GPU_STATE", path, 1);
    setenv("GV_FAKE_ACTORS", "1", 1);
    snprintf(g_node, sizeof(g_node), "%s", g_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        resolve();
        _exit(capture_beside_throttled_launches());
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_unlimited_and_disabled_run_free(void **state)
{
    (void)state;
    struct tenant tn[2] = {
        {.pct = 0, .prio = -1, .horizon = HORIZON, .mark = UINT64_MAX},
        {.pct = 30,
         .prio = -1,
         .policy = GV_POLICY_DISABLE,
         .horizon = HORIZON,
         .mark = UINT64_MAX},
    };
    for (int i = 0; i < 2; i++) {
        struct result r;
        run_tenants(&tn[i], 1, &r);
        printf("# %s: achieved %.1f%%\n", i ? "limit 30, policy disable" : "no limit", share(&r));
        assert_true(share(&r) >= 99.0);
    }
}

/*
 * After an idle spell the default policy lets a burst use up to one window
 * (50 ms) of credit; force does not.  Each tenant launches once, idles
 * 200 ms, then launches for 30 ms.
 */
static void test_force_has_no_burst_credit(void **state)
{
    (void)state;
    struct result r[2];
    for (int i = 0; i < 2; i++) {
        struct tenant tn = {.pct = 50,
                            .prio = -1,
                            .policy = i ? GV_POLICY_FORCE : GV_POLICY_DEFAULT,
                            .horizon = 230 * MS,
                            .mark = 200 * MS,
                            .idle = 200 * MS};
        run_tenants(&tn, 1, &r[i]);
    }
    printf("# 30 ms burst after 200 ms idle at 50%%: default launched %llu, force %llu\n",
           (unsigned long long)r[0].kernels_after_mark,
           (unsigned long long)r[1].kernels_after_mark);
    /* force: the duty cycle from the first launch on (15 +- 2 kernels) */
    assert_true(r[1].kernels_after_mark >= 13 && r[1].kernels_after_mark <= 18);
    /* default: the same plus about 25 ms of saved credit */
    assert_true(r[0].kernels_after_mark >= r[1].kernels_after_mark + 20);
    assert_true(r[0].kernels_after_mark <= r[1].kernels_after_mark + 30);
}

/* Runs high alone, then high beside low; returns high's kernels beside low
 * over its kernels alone. */
static double beside(struct tenant high, struct tenant low, struct result *solo,
                     struct result pair[2])
{
    struct tenant both[2] = {high, low};
    run_tenants(&high, 1, solo);
    run_tenants(both, 2, pair);
    return (double)pair[0].kernels / (double)solo->kernels;
}

static void test_priority(void **state)
{
    (void)state;
    struct result solo, pair[2], resume[2];
    struct tenant high = {.pct = 0, .prio = 0, .horizon = HORIZON, .mark = UINT64_MAX};
    struct tenant low = {.pct = 0, .prio = 2, .horizon = HORIZON, .mark = UINT64_MAX};

    double keep = beside(high, low, &solo, pair);
    printf("# high priority: solo %llu kernels, beside a low-priority hog %llu (%.1f%%); "
           "hog got %llu\n",
           (unsigned long long)solo.kernels, (unsigned long long)pair[0].kernels, 100 * keep,
           (unsigned long long)pair[1].kernels);
    assert_true(keep >= 0.90);

    /* The high tenant stops launching at half time; once its queued work is
     * done (its end_ns), the low one must take the GPU back. */
    struct tenant half[2] = {high, low};
    half[0].horizon = HORIZON / 2;
    half[1].mark = HORIZON / 2;
    run_tenants(half, 2, resume);
    uint64_t idle_at = resume[0].end_ns, back_at = resume[1].first_after_mark;
    double back =
        (double)(resume[1].kernels_after_mark * KERNEL_NS) / (double)(resume[1].end_ns - back_at);
    printf("# high idles at %.1f ms; low resumes at %.1f ms and then gets %.1f%% of the GPU\n",
           (double)idle_at / 1e6, (double)back_at / 1e6, 100 * back);
    assert_true(back_at + MS >= idle_at && back_at <= idle_at + 10 * MS);
    assert_true(back >= 0.90);
    /* And it had yielded while the high tenant was busy. */
    assert_true(resume[1].kernels - resume[1].kernels_after_mark <= 2);
}

/*
 * A high-priority tenant that arrives while a low-priority hog has been
 * running alone: it must not wait behind a deep queue the hog built while
 * nobody was above it (measured on an H200: 127 ms lost per arrival).  The
 * fake GPU runs commands in submission order, so any backlog is lost in full.
 */
static void test_priority_arrival_behind_a_hog(void **state)
{
    (void)state;
    struct result solo, pair[2], lone;
    const uint64_t arrive = 300 * MS;
    struct tenant high = {
        .pct = 0, .prio = 0, .horizon = HORIZON, .mark = UINT64_MAX, .start = arrive};
    struct tenant low = {.pct = 0, .prio = 2, .horizon = HORIZON, .mark = arrive};

    double keep = beside(high, low, &solo, pair);
    double before = (double)((pair[1].kernels - pair[1].kernels_after_mark) * KERNEL_NS) /
                    (double)arrive;
    printf("# high arrives at %.0f ms beside a level-2 hog: %llu kernels vs %llu solo (%.1f%%); "
           "the hog ran %.1f%% of the GPU before it\n",
           (double)arrive / 1e6, (unsigned long long)pair[0].kernels,
           (unsigned long long)solo.kernels, 100 * keep, 100 * before);
    assert_true(keep >= 0.99);
    /* The hog's bounded queue did not starve it while it was alone ... */
    assert_true(before >= 0.98);
    /* ... and a level-2 tenant alone keeps the whole GPU. */
    struct tenant alone = low;
    alone.mark = UINT64_MAX;
    run_tenants(&alone, 1, &lone);
    printf("# level-2 tenant alone: %.1f%% of the GPU\n", share(&lone));
    assert_true(share(&lone) >= 99.0);
}

/*
 * A high-priority tenant held to half the GPU by its own share limit leaves
 * the other half: a lower one fills it (its waits for its own budget are
 * announced as such, with no grace), and the high one still gets its share.
 */
static void test_priority_throttled_high_leaves_its_gaps(void **state)
{
    (void)state;
    struct result solo, pair[2];
    struct tenant high = {.pct = 50, .prio = 0, .horizon = HORIZON, .mark = UINT64_MAX};
    struct tenant low = {.pct = 0, .prio = 2, .horizon = HORIZON, .mark = UINT64_MAX};

    double keep = beside(high, low, &solo, pair);
    double left = 100.0 - share(&pair[0]);
    printf("# level 0 at gpucores 50 beside a level-2 hog: %.1f%% of the GPU (%.1f%% of its solo); "
           "the hog %.1f%% = %.1f%% of the %.1f%% left\n",
           share(&pair[0]), 100 * keep, share(&pair[1]), 100 * share(&pair[1]) / left, left);
    assert_true(keep >= 0.97);
    assert_true(share(&pair[1]) >= 0.9 * left);
}

static void test_three_levels(void **state)
{
    (void)state;
    struct tenant tn[3] = {
        {.pct = 0, .prio = 1, .horizon = HORIZON, .mark = UINT64_MAX},
        {.pct = 0, .prio = 2, .horizon = HORIZON, .mark = UINT64_MAX},
        {.pct = 0, .prio = 0, .horizon = HORIZON / 2, .mark = UINT64_MAX},
    };
    struct result r[3];
    tn[0].mark = HORIZON / 2;
    tn[1].mark = HORIZON / 2;
    run_tenants(tn, 3, r);
    double back = (double)(r[0].kernels_after_mark * KERNEL_NS) /
                  (double)(r[0].end_ns - r[0].first_after_mark);
    printf("# levels 0/1/2: level 0 ran %llu kernels and idled at %.1f ms; level 1 ran %llu "
           "before, resumed at %.1f ms and got %.1f%%; level 2 ran %llu\n",
           (unsigned long long)r[2].kernels, (double)r[2].end_ns / 1e6,
           (unsigned long long)(r[0].kernels - r[0].kernels_after_mark),
           (double)r[0].first_after_mark / 1e6, 100 * back, (unsigned long long)r[1].kernels);
    /* Level 0 owns the GPU while busy; then level 1; level 2 waits for both. */
    assert_true(r[2].kernels * KERNEL_NS >= (uint64_t)(0.9 * (double)(HORIZON / 2)));
    assert_true(r[0].kernels - r[0].kernels_after_mark <= 2);
    assert_true(r[0].first_after_mark <= r[2].end_ns + 10 * MS);
    assert_true(back >= 0.90);
    assert_true(r[1].kernels <= 5);
}

/* A driver whose events cannot be created: launches still go through, are
 * charged their (unknown, so zero) estimate, and nothing crashes or blocks. */
static void test_untimeable_launches_pass(void **state)
{
    (void)state;
    g_stub = (struct throttle_stub){.events_fail = true, .key_prefix = "GPU-unit"};
    struct gv_throttle_ops ops = throttle_stub_ops();
    struct gv_throttle_config cfg = {.priority = -1};
    struct gv_throttle *t = NULL;
    struct gv_error err = {0};
    struct gv_throttle_stats st;
    cfg.sm_limit[1] = 20;
    assert_int_equal(gv_throttle_new(&cfg, &ops, &t, &err), GV_OK);
    assert_non_null(t);
    for (int i = 0; i < 100; i++) {
        struct gv_throttle_launch l = {.dev = 1, .stream = NULL, .key = &cfg};
        gv_throttle_before(t, &l);
        /* every tenth launch is refused by the driver: its charge comes back */
        gv_throttle_after(t, &l, i % 10 != 0);
    }
    /* A device without a limit is not touched at all. */
    struct gv_throttle_launch other = {.dev = 0, .stream = NULL, .key = &cfg};
    gv_throttle_before(t, &other);
    assert_int_equal(other.slot, -1);
    gv_throttle_after(t, &other, true);
    gv_throttle_get_stats(t, 1, &st);
    assert_int_equal(st.launches, 90);
    assert_int_equal(st.measured, 0);
    assert_true(g_stub.now < 1000000); /* no debt built up from nothing */
    gv_throttle_free(t);
}

/* A container's budget a few ns in debt (refills round down, and another
 * process of the container may take the refill): the wait is at least the
 * poll period, never a few ns.  On the virtual clock two such processes once
 * crawled forward 3 ns per turn for 10 minutes. */
static void test_tiny_debt_waits_a_poll_period(void **state)
{
    (void)state;
    g_stub = (struct throttle_stub){.now = 1000000, .key_prefix = "GPU-unit"};
    struct gv_throttle_ops ops = throttle_stub_ops();
    struct gv_throttle_pool pool;
    memset(&pool, 0, sizeof(pool));
    struct gv_throttle_config cfg = {.priority = -1};
    struct gv_throttle *t = NULL;
    struct gv_error err = {0};
    cfg.sm_limit[0] = 40;
    cfg.pool[0] = &pool;
    assert_int_equal(gv_throttle_new(&cfg, &ops, &t, &err), GV_OK);
    atomic_store(&pool.tokens, -1);
    atomic_store(&pool.last_ns, g_stub.now + 1); /* refilled just now */
    struct gv_throttle_launch l = {.dev = 0, .stream = NULL, .key = &cfg};
    uint64_t t0 = g_stub.now;
    gv_throttle_before(t, &l);
    gv_throttle_after(t, &l, true);
    assert_true(g_stub.now - t0 >= 50000);
    assert_true(g_stub.now - t0 <= 100000);
    gv_throttle_free(t);
}

/* The board's 64 slots are shared by every tenant of the GPU, which may fill
 * them: a slot whose owner stopped publishing 60 s ago is free again, not a
 * nanosecond before; a slot stamped more than 1 s past now (from before a
 * clock restart) is free, one exactly 1 s ahead is not. */
static void fill_board(const char *dir, const char *key, uint64_t at, struct gv_prio_board **obs,
                       struct gv_prio_board **fill, struct gv_prio_board **hi)
{
    struct gv_error err = {0};
    assert_int_equal(gv_prio_open(dir, key, 1, at, obs, &err), GV_OK);
    for (int i = 0; i < 63; i++)
        assert_int_equal(gv_prio_open(dir, key, 2, at, &fill[i], &err), GV_OK);
    /* every slot taken: a 65th tenant, of the highest level, gets none yet */
    assert_int_equal(gv_prio_open(dir, key, 0, at, hi, &err), GV_OK);
}

static void close_board(struct gv_prio_board *obs, struct gv_prio_board **fill,
                        struct gv_prio_board *hi)
{
    gv_prio_close(obs);
    for (int i = 0; i < 63; i++)
        gv_prio_close(fill[i]);
    gv_prio_close(hi);
}

static void test_board_slots_stale_and_ahead(void **state)
{
    (void)state;
    const uint64_t S = 1000000000ull, T = 1000 * S, STALE = 60 * S, AHEAD = S;
    struct gv_prio_board *obs = NULL, *hi = NULL, *fill[63];

    fill_board(g_dir, "GPU-stale", T, &obs, fill, &hi);
    gv_prio_publish(obs, T + STALE - 1, 0); /* the observer keeps its own slot */
    gv_prio_publish(hi, T + STALE - 1, T + STALE + S / 2);
    assert_false(gv_prio_higher_present(obs, T + STALE - 1));
    gv_prio_publish(obs, T + STALE, 0);
    gv_prio_publish(hi, T + STALE, T + STALE + S / 2); /* the fillers' slots are stale now */
    assert_true(gv_prio_higher_present(obs, T + STALE));
    assert_true(gv_prio_wait_ns(obs, T + STALE) > 0);
    close_board(obs, fill, hi);

    fill_board(g_dir, "GPU-ahead", T, &obs, fill, &hi);
    gv_prio_publish(obs, T - AHEAD, 0);
    gv_prio_publish(hi, T - AHEAD, T - AHEAD + S / 2); /* stamps exactly 1 s ahead: fresh */
    assert_false(gv_prio_higher_present(obs, T - AHEAD));
    gv_prio_publish(obs, T - AHEAD - 1, 0);
    gv_prio_publish(hi, T - AHEAD - 1, T - AHEAD - 1 + S / 2); /* more: a clock restart */
    assert_true(gv_prio_higher_present(obs, T - AHEAD - 1));
    close_board(obs, fill, hi);
}

/* Who waits for whom on the board: only a lower level for a higher one; a
 * tenant that closes while busy frees its slot and stops delaying others at
 * once; a stamp exactly 1 s ahead of the reader's clock still counts. */
static void test_board_waits(void **state)
{
    (void)state;
    const uint64_t MSN = 1000000ull, T = 5000 * 1000 * MSN, AHEAD = 1000 * MSN;
    struct gv_prio_board *a = NULL, *b = NULL, *low = NULL, *obs = NULL, *hi = NULL, *fill[63];
    struct gv_error err = {0};

    /* the same level never waits for itself */
    assert_int_equal(gv_prio_open(g_dir, "GPU-waits", 1, T, &a, &err), GV_OK);
    assert_int_equal(gv_prio_open(g_dir, "GPU-waits", 1, T, &b, &err), GV_OK);
    assert_int_equal(gv_prio_open(g_dir, "GPU-waits", 2, T, &low, &err), GV_OK);
    gv_prio_publish(a, T, T + MSN);
    assert_int_equal(gv_prio_wait_ns(b, T), 0);
    assert_false(gv_prio_higher_present(b, T));
    assert_int_equal(gv_prio_wait_ns(low, T), 3 * MSN); /* 1 ms of work + 2 ms of grace */
    /* waiting for its own share: its work is all that counts, no grace; and
     * the next plain publication brings the grace back */
    gv_prio_publish_paced(a, T, T + MSN);
    assert_int_equal(gv_prio_wait_ns(low, T), MSN);
    assert_int_equal(gv_prio_wait_ns(low, T + MSN), 0);
    assert_true(gv_prio_higher_present(low, T + MSN)); /* still keeps little queued */
    gv_prio_publish(a, T, T + MSN);
    assert_int_equal(gv_prio_wait_ns(low, T), 3 * MSN);
    /* present for 1 s after its last publication, and while stamped at most 1 s ahead */
    assert_true(gv_prio_higher_present(low, T + 1000 * MSN - 1));
    assert_false(gv_prio_higher_present(low, T + 1000 * MSN));
    assert_true(gv_prio_higher_present(low, T - AHEAD));
    assert_false(gv_prio_higher_present(low, T - AHEAD - 1));
    /* closing while busy: nobody waits for it any more */
    gv_prio_close(a);
    assert_int_equal(gv_prio_wait_ns(low, T), 0);
    /* a stamp exactly 1 s ahead of the reader (its clock a little behind) counts */
    gv_prio_publish(b, T + AHEAD, T + AHEAD + MSN);
    assert_true(gv_prio_wait_ns(low, T) > 0);
    gv_prio_close(b);
    gv_prio_close(low);

    /* a tenant silent for 60 s loses its slot to a newcomer; publishing again it takes
     * another slot and never writes into the newcomer's */
    struct gv_prio_board *quiet = NULL, *thief = NULL, *lower = NULL;
    const uint64_t STALE = 60000 * MSN;
    assert_int_equal(gv_prio_open(g_dir, "GPU-thief", 0, T, &quiet, &err), GV_OK);
    assert_int_equal(gv_prio_open(g_dir, "GPU-thief", 0, T + STALE, &thief, &err), GV_OK);
    assert_int_equal(gv_prio_open(g_dir, "GPU-thief", 2, T + STALE, &lower, &err), GV_OK);
    gv_prio_publish(thief, T + STALE, T + STALE + MSN);
    gv_prio_publish(quiet, T + STALE, 0);
    assert_int_equal(gv_prio_wait_ns(lower, T + STALE), 3 * MSN);
    gv_prio_close(quiet);
    gv_prio_close(thief);
    gv_prio_close(lower);

    /* a closed tenant's slot is free for the next at once, not after 60 s */
    fill_board(g_dir, "GPU-reuse", T, &obs, fill, &hi);
    gv_prio_publish(hi, T, T + MSN);
    assert_false(gv_prio_higher_present(obs, T));
    gv_prio_close(fill[17]);
    fill[17] = NULL;
    gv_prio_publish(hi, T + 1, T + MSN);
    assert_true(gv_prio_higher_present(obs, T + 1));
    close_board(obs, fill, hi);
}

static void test_config_and_board_errors(void **state)
{
    (void)state;
    struct gv_throttle_ops ops = {0};
    struct gv_throttle_config cfg = {.priority = -1};
    struct gv_throttle *t = (struct gv_throttle *)&cfg;
    struct gv_error err = {0};
    struct gv_prio_board *b = NULL;
    char path[512];

    /* Nothing configured: no object, so the launch gate is one pointer test. */
    cfg.sm_limit[0] = 100;
    cfg.sm_limit[1] = 0;
    assert_int_equal(gv_throttle_new(&cfg, &ops, &t, &err), GV_OK);
    assert_null(t);
    cfg.sm_limit[0] = 40;
    cfg.policy = GV_POLICY_DISABLE;
    assert_int_equal(gv_throttle_new(&cfg, &ops, &t, &err), GV_OK);
    assert_null(t);
    /* Something configured but the driver operations are missing. */
    cfg.policy = GV_POLICY_DEFAULT;
    assert_int_equal(gv_throttle_new(&cfg, &ops, &t, &err), GV_EINVAL);
    cfg.priority = GV_PRIO_LEVELS;
    assert_int_equal(gv_throttle_new(&cfg, &ops, &t, &err), GV_ERANGE);
    assert_non_null(strstr(err.msg, "CUDA_TASK_PRIORITY"));

    assert_int_equal(gv_prio_open(g_dir, "../etc", 1, 0, &b, &err), GV_EINVAL);
    /* device keys: letters, digits and '-', at most 96 of them */
    char key[100];
    memset(key, 'k', 97);
    key[97] = '\0';
    assert_int_equal(gv_prio_open(g_dir, key, 1, 0, &b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "bad device key"));
    key[96] = '\0';
    assert_int_equal(gv_prio_open(g_dir, key, 1, 0, &b, &err), GV_OK);
    gv_prio_close(b);
    b = NULL;
    assert_int_equal(gv_prio_open(g_dir, "GPU-azAZ09-", 1, 0, &b, &err), GV_OK);
    gv_prio_close(b);
    b = NULL;
    assert_int_equal(gv_prio_open(g_dir, "GPU_x", 1, 0, &b, &err), GV_EINVAL);
    assert_int_equal(gv_prio_open("", "GPU-x", 1, 0, &b, &err), GV_EINVAL); /* not "/gpu-..." */
    assert_null(b);
    assert_int_equal(gv_prio_open(NULL, "GPU-x", 1, 0, &b, &err), GV_EINVAL);
    /* a path of exactly 4096 bytes has no room for its NUL: refused, never truncated */
    char *longdir = malloc(4096);
    assert_non_null(longdir);
    memset(longdir, 'd', 4081);
    longdir[0] = '/';
    longdir[4081] = '\0'; /* + "/gpu-GPU-x.prio" = 4096 */
    assert_int_equal(gv_prio_open(longdir, "GPU-x", 1, 0, &b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "too long"));
    longdir[4080] = '\0';
    assert_int_equal(gv_prio_open(longdir, "GPU-x", 1, 0, &b, &err), GV_EIO); /* fits: opened, absent */
    free(longdir);
    assert_int_equal(gv_prio_open(g_dir, "GPU-x", GV_PRIO_LEVELS, 0, &b, &err), GV_ERANGE);
    assert_int_equal(gv_prio_open("/nonexistent/gpuvisor", "GPU-x", 1, 0, &b, &err), GV_EIO);
    /* A foreign file is reported, never trusted. */
    snprintf(path, sizeof(path), "%s/gpu-GPU-foreign.prio", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a priority board", f);
    fclose(f);
    assert_int_equal(gv_prio_open(g_dir, "GPU-foreign", 1, 0, &b, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "foreign"));
    assert_null(b);

    /* Two boards on one GPU: only the lower priority waits, and only while the
     * higher one is busy (plus a short grace). */
    struct gv_prio_board *hi = NULL, *lo = NULL;
    assert_int_equal(gv_prio_open(g_dir, "GPU-unit", 0, 1000, &hi, &err), GV_OK);
    assert_int_equal(gv_prio_open(g_dir, "GPU-unit", 2, 1000, &lo, &err), GV_OK);
    assert_int_equal(gv_prio_wait_ns(lo, 1000), 0);
    gv_prio_publish(hi, 1000, 1000 + 3 * MS);
    assert_true(gv_prio_wait_ns(lo, 1000) > 0);
    assert_int_equal(gv_prio_wait_ns(hi, 1000), 0);
    assert_true(gv_prio_higher_present(lo, 2000));
    assert_false(gv_prio_higher_present(hi, 2000));
    assert_int_equal(gv_prio_wait_ns(lo, 1000 + 10 * MS), 0);
    /* A published time far in the future is clamped, not obeyed forever: at
     * most 1 s past the publisher's last heartbeat. */
    gv_prio_publish(hi, 1000, UINT64_MAX / 2);
    assert_true(gv_prio_wait_ns(lo, 1000) <= 10 * MS);
    assert_int_equal(gv_prio_wait_ns(lo, 1000 + 1010 * MS), 0);
    /* Times from before a clock restart (reboot) are ignored. */
    gv_prio_publish(hi, 500000 * MS, 500001 * MS);
    assert_int_equal(gv_prio_wait_ns(lo, 1000), 0);
    assert_false(gv_prio_higher_present(lo, 1000));
    gv_prio_close(hi);
    assert_int_equal(gv_prio_wait_ns(lo, 1000), 0);
    gv_prio_close(lo);
}

int main(void)
{
    /* The fake driver, loaded as the interposer loads a driver. */
    if (throttle_stub_setup("throttle", g_dir, sizeof(g_dir), &g_handle) != 0)
        return 1;
    g_dl = dlsym;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_board_slots_stale_and_ahead),
        cmocka_unit_test(test_board_waits),
        cmocka_unit_test(test_config_and_board_errors),
        cmocka_unit_test(test_untimeable_launches_pass),
        cmocka_unit_test(test_tiny_debt_waits_a_poll_period),
        cmocka_unit_test(test_share_alone),
        cmocka_unit_test(test_share_beside_second_tenant),
        cmocka_unit_test_teardown(test_share_pooled_per_container, drop_pool),
        cmocka_unit_test_teardown(test_share_after_clock_restart, drop_pool),
        cmocka_unit_test_teardown(test_share_with_varying_kernels, drop_jitter),
        cmocka_unit_test(test_share_of_a_step_loop),
        cmocka_unit_test(test_share_every_launch_api),
        cmocka_unit_test(test_capture_survives_throttling),
        cmocka_unit_test(test_unlimited_and_disabled_run_free),
        cmocka_unit_test(test_force_has_no_burst_credit),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_priority_arrival_behind_a_hog),
        cmocka_unit_test(test_priority_throttled_high_leaves_its_gaps),
        cmocka_unit_test(test_three_levels),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    throttle_stub_teardown(g_dir, NULL); /* the driver stays loaded, as before */
    return rc;
}
