/*
 * Fake libcuda.so.1, execution half: streams, events, modules with named
 * kernels, kernel and graph launches, on a VIRTUAL CLOCK.
 *
 * The GPU is modelled as one engine per device that runs commands one at a
 * time in submission order (a compute-bound kernel fills every SM).  Finish
 * times are computed when work is submitted, so nothing runs in the
 * background: waiting (stream/event/context synchronize, a full launch queue,
 * gvfake_sleep_ns) is the only thing that moves time.
 *
 * Several processes share one timeline when GV_FAKE_GPU_STATE names the
 * shared fake-GPU state file (tests/fakes/README.md): engines and the clock
 * live in a MAP_SHARED file beside it, "<GV_FAKE_GPU_STATE>.clock".  Time advances only when
 * every registered thread ("actor") is blocked, to the earliest wake-up among
 * them (a conservative discrete-event simulation), so two tenants see the same
 * GPU and the same clock, and a test of minutes of GPU time takes seconds.
 * GV_FAKE_ACTORS=n holds the clock until n threads have joined, so tenants
 * started one after the other still begin at virtual time 0.
 *
 * Kernel run time is chosen by the test through the kernel's name: a name
 * ending in _<N>ns, _<N>us or _<N>ms runs for that long per launch (e.g.
 * "spin_1000us"); other names run GV_FAKE_KERNEL_NS (default 10 us).
 * GV_FAKE_KERNEL_JITTER=j varies each launch by up to +-j percent;
 * GV_FAKE_SLEEP_SLACK_NS makes every gvfake_sleep_ns oversleep that much.
 *
 * Test seam: gvfake_clock_ns() and gvfake_sleep_ns() let libgpuvisor's
 * throttle run on this clock; the real driver has no such symbols.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_cuda.h"
#include "fake_cuda.h"

#define VT_MAGIC 0x656d69746b616667ULL /* "gfaketime" */
#define VT_VERSION 1u
#define VT_MAX_ACTORS 128
#define VT_MAX_DEVICES 16
#define OBJ_STREAM 0x5354524du
#define OBJ_EVENT 0x45564e54u
#define OBJ_MODULE 0x4d4f4455u
#define OBJ_FUNC 0x46554e43u
#define OBJ_GRAPH 0x47524150u
#define OBJ_EXEC 0x47455845u
/* Consecutive NOT_READY polls after which a poller is charged 1 us, so a
 * program spinning on cuEventQuery lets time advance instead of livelocking. */
#define POLL_SPIN_LIMIT 64
#define POLL_STEP_NS 1000ull

_Static_assert(VT_MAX_DEVICES >= FAKE_MAX_GPUS, "one engine per fake GPU");

enum { ACTOR_FREE = 0, ACTOR_RUNNING, ACTOR_BLOCKED };

struct vt_actor {
    int32_t pid;
    int32_t tid;
    int32_t state;
    int32_t reserved;
    uint64_t wake_at;
};

struct vt_engine {
    uint64_t free_at; /* when the engine finishes everything submitted so far */
    uint64_t busy_ns; /* total kernel time ever submitted */
    uint64_t kernels;
};

struct vt_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t size;
    pthread_mutex_t mu; /* process-shared, robust */
    pthread_cond_t cv;  /* process-shared */
    uint64_t now;
    uint32_t expected;
    uint32_t joined;
    struct vt_actor actors[VT_MAX_ACTORS];
    struct vt_engine eng[VT_MAX_DEVICES];
};

struct CUstream_st {
    uint32_t magic;
    int dev; /* physical GPU: the engine it runs on */
    struct CUctx_st *ctx;
    uint64_t tail;     /* when everything queued on the stream is done */
    uint64_t *pending; /* ring of finish times of queued launches */
    unsigned head, count;
    struct CUgraph_st *capture;
};

struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    bool recorded;
    uint64_t at;
};

struct CUfunc_st {
    uint32_t magic;
    uint64_t ns;
    struct CUfunc_st *next;
    char name[];
};

struct CUmod_st {
    uint32_t magic;
    struct CUfunc_st *funcs;
};

struct CUgraph_st {
    uint32_t magic;
    uint64_t ns;
    unsigned kernels;
    bool global;           /* captured in CU_STREAM_CAPTURE_MODE_GLOBAL */
    unsigned unsafe_epoch; /* g_unsafe_epoch when the capture began */
};

struct CUgraphExec_st {
    uint32_t magic;
    uint64_t ns;
    unsigned kernels;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct vt_shared *g_vt;
static unsigned g_depth = 1024;
static uint64_t g_default_ns = 10000;
static unsigned g_jitter;       /* percent: each launch runs ns * (1 +- jitter) */
static uint64_t g_slack;        /* every gvfake_sleep_ns oversleeps this much */
static uint64_t g_jitter_state; /* per-process LCG: runs are reproducible */
static struct CUstream_st g_default_stream[VT_MAX_DEVICES];
static uint64_t g_proc_tail[VT_MAX_DEVICES]; /* for cuCtxSynchronize */
static uint64_t g_proc_busy;                 /* kernel time this process submitted */
static __thread int t_actor = -1;
static __thread int t_spins;
/*
 * Stream-capture safety, as the driver enforces it: while a capture in
 * global mode is under way, a "potentially unsafe" call (here: event queries)
 * from a thread not in relaxed mode invalidates it.
 */
static __thread CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static _Atomic int g_global_captures;
static _Atomic unsigned g_unsafe_epoch;

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    char *end;
    if (v == NULL || *v == '\0')
        return def;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end != '\0') {
        fprintf(stderr, "fake libcuda: ignoring bad %s='%s'\n", name, v);
        return def;
    }
    return x;
}

static void vt_init_locked(struct vt_shared *vt)
{
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    memset(vt, 0, sizeof(*vt));
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&vt->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&vt->cv, &ca);
    pthread_condattr_destroy(&ca);
    vt->version = VT_VERSION;
    vt->size = sizeof(*vt);
    vt->magic = VT_MAGIC;
}

static void vt_release_process(void);

static void vt_open(void)
{
    const char *state = getenv("GV_FAKE_GPU_STATE");
    struct vt_shared *vt = MAP_FAILED;
    char path[4096];

    g_depth = (unsigned)env_u64("GV_FAKE_QUEUE_DEPTH", 1024);
    if (g_depth == 0 || g_depth > 65536)
        g_depth = 1024;
    g_default_ns = env_u64("GV_FAKE_KERNEL_NS", 10000);
    g_jitter = (unsigned)env_u64("GV_FAKE_KERNEL_JITTER", 0);
    g_slack = env_u64("GV_FAKE_SLEEP_SLACK_NS", 0);
    if (g_jitter > 100)
        g_jitter = 100;
    g_jitter_state = 0x9e3779b97f4a7c15ull;
    if (state && *state && (size_t)snprintf(path, sizeof(path), "%s.clock", state) < sizeof(path)) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        struct stat st;
        if (fd >= 0 && flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0) {
            if (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(*vt)) != 0)
                st.st_size = -1;
            if (st.st_size == 0 || st.st_size == (off_t)sizeof(*vt))
                vt = mmap(NULL, sizeof(*vt), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (vt != MAP_FAILED && st.st_size == 0)
                vt_init_locked(vt);
            if (vt != MAP_FAILED && (vt->magic != VT_MAGIC || vt->version != VT_VERSION)) {
                munmap(vt, sizeof(*vt));
                vt = MAP_FAILED;
            }
        }
        if (fd >= 0) {
            /* Explicitly: the mapping keeps the open file (and a flock) alive. */
            (void)flock(fd, LOCK_UN);
            close(fd);
        }
        if (vt == MAP_FAILED)
            fprintf(stderr, "fake libcuda: cannot share GPU state file %s; using a private one\n",
                    path);
    }
    if (vt == MAP_FAILED) {
        vt = mmap(NULL, sizeof(*vt), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (vt == MAP_FAILED)
            abort(); /* a test double with no memory cannot model anything */
        vt_init_locked(vt);
    }
    vt->expected = (uint32_t)env_u64("GV_FAKE_ACTORS", 1);
    g_vt = vt;
    atexit(vt_release_process);
}

static struct vt_shared *vt(void)
{
    pthread_once(&g_once, vt_open);
    return g_vt;
}

static void vt_lock(struct vt_shared *v)
{
    if (pthread_mutex_lock(&v->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&v->mu);
}

static int32_t my_tid(void)
{
    return (int32_t)syscall(SYS_gettid);
}

/* A thread that is gone or a zombie (exited, not yet reaped by its parent). */
static bool actor_dead(const struct vt_actor *a)
{
    char path[64], buf[256];
    if (syscall(SYS_tgkill, a->pid, a->tid, 0) != 0 && errno == ESRCH)
        return true;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", a->pid, a->tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* Frees actors whose thread is gone (killed tenants must not stop time). */
static void vt_reap_dead_locked(struct vt_shared *v)
{
    for (int i = 0; i < VT_MAX_ACTORS; i++) {
        struct vt_actor *a = &v->actors[i];
        if (a->state != ACTOR_FREE && actor_dead(a))
            a->state = ACTOR_FREE;
    }
}

static struct vt_actor *vt_self_locked(struct vt_shared *v)
{
    if (t_actor >= 0 && v->actors[t_actor].state != ACTOR_FREE &&
        v->actors[t_actor].tid == my_tid())
        return &v->actors[t_actor];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < VT_MAX_ACTORS; i++) {
            if (v->actors[i].state == ACTOR_FREE) {
                v->actors[i] =
                    (struct vt_actor){.pid = getpid(), .tid = my_tid(), .state = ACTOR_RUNNING};
                v->joined++;
                t_actor = i;
                return &v->actors[i];
            }
        }
        vt_reap_dead_locked(v);
    }
    return NULL;
}

/* Moves time to the earliest wake-up once every actor is blocked. */
static void vt_try_advance_locked(struct vt_shared *v)
{
    uint64_t next = UINT64_MAX;
    if (v->joined < v->expected)
        return;
    for (int i = 0; i < VT_MAX_ACTORS; i++) {
        struct vt_actor *a = &v->actors[i];
        if (a->state == ACTOR_RUNNING)
            return;
        if (a->state == ACTOR_BLOCKED && a->wake_at < next)
            next = a->wake_at;
    }
    if (next != UINT64_MAX && next > v->now) {
        v->now = next;
        pthread_cond_broadcast(&v->cv);
    }
}

/* Blocks the calling thread until virtual time `until`. */
static void vt_wait_until_locked(struct vt_shared *v, uint64_t until)
{
    struct vt_actor *self = vt_self_locked(v);
    t_spins = 0;
    if (self == NULL) {
        /* Table full: cannot take part in the barrier; jump (best effort). */
        if (until > v->now)
            v->now = until;
        return;
    }
    self->state = ACTOR_BLOCKED;
    self->wake_at = until;
    int idle = 0; /* consecutive 50 ms waits without progress */
    while (v->now < until) {
        vt_try_advance_locked(v);
        if (v->now >= until)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        int rc = pthread_cond_timedwait(&v->cv, &v->mu, &ts);
        if (rc == EOWNERDEAD) {
            pthread_mutex_consistent(&v->mu);
        } else if (rc == ETIMEDOUT) {
            vt_reap_dead_locked(v);
            /* A tenant that died before joining must not hang the others. */
            if (v->joined < v->expected && ++idle >= 200) {
                fprintf(stderr, "fake libcuda: %u of %u GV_FAKE_ACTORS joined in 10 s; "
                                "starting the clock without the rest\n",
                        v->joined, v->expected);
                v->expected = v->joined;
            }
        }
    }
    self->state = ACTOR_RUNNING;
}

static void vt_release_thread_locked(struct vt_shared *v)
{
    if (t_actor >= 0 && v->actors[t_actor].tid == my_tid()) {
        v->actors[t_actor].state = ACTOR_FREE;
        t_actor = -1;
        vt_try_advance_locked(v);
    }
}

/* A process leaving must not hold the clock for the others. */
static void vt_release_process(void)
{
    struct vt_shared *v = g_vt;
    if (v == NULL)
        return;
    vt_lock(v);
    for (int i = 0; i < VT_MAX_ACTORS; i++)
        if (v->actors[i].state != ACTOR_FREE && v->actors[i].pid == getpid())
            v->actors[i].state = ACTOR_FREE;
    t_actor = -1;
    vt_try_advance_locked(v);
    pthread_cond_broadcast(&v->cv);
    pthread_mutex_unlock(&v->mu);
}

/* True (and the captures invalidated) when an unsafe call is not allowed now. */
static bool unsafe_during_capture(void)
{
    if (atomic_load(&g_global_captures) == 0 || t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return false;
    atomic_fetch_add(&g_unsafe_epoch, 1);
    return true;
}

uint64_t gvfake_clock_ns(void)
{
    struct vt_shared *v = vt();
    vt_lock(v);
    uint64_t now = v->now;
    pthread_mutex_unlock(&v->mu);
    return now;
}

void gvfake_sleep_ns(uint64_t ns)
{
    struct vt_shared *v = vt();
    vt_lock(v);
    /* Real sleeps overshoot (timer slack, scheduling): so may these. */
    vt_wait_until_locked(v, v->now + ns + g_slack);
    pthread_mutex_unlock(&v->mu);
}

void gvfake_actor_leave(void)
{
    struct vt_shared *v = vt();
    vt_lock(v);
    vt_release_thread_locked(v);
    pthread_mutex_unlock(&v->mu);
}

uint64_t gvfake_device_busy_ns(int dev)
{
    struct vt_shared *v = vt();
    if (dev < 0 || dev >= VT_MAX_DEVICES)
        return 0;
    vt_lock(v);
    uint64_t busy = v->eng[dev].busy_ns;
    /* Only the part that has run by now. */
    if (v->eng[dev].free_at > v->now) {
        uint64_t ahead = v->eng[dev].free_at - v->now;
        busy = busy > ahead ? busy - ahead : 0;
    }
    pthread_mutex_unlock(&v->mu);
    return busy;
}

/* Every fake handle starts with its magic, so a wrong or destroyed handle is
 * refused instead of used. */
static void *obj_new(size_t size, uint32_t magic)
{
    uint32_t *o = calloc(1, size);
    if (o != NULL)
        *o = magic;
    return o;
}

static CUresult obj_free(void *obj, uint32_t magic)
{
    uint32_t *o = obj;
    if (o == NULL || *o != magic)
        return CUDA_ERROR_INVALID_HANDLE;
    *o = 0;
    free(o);
    return CUDA_SUCCESS;
}

/*
 * Both flavours of a stream-taking entry point.  The fake keeps one default
 * stream per device, so the per-thread-default-stream flavour (_ptsz)
 * behaves as the legacy one.
 */
#define FAKE_BOTH(name, impl, params, args)                                                        \
    CUresult name params                                                                           \
    {                                                                                              \
        return impl args;                                                                          \
    }                                                                                              \
    CUresult name##_ptsz params                                                                    \
    {                                                                                              \
        return impl args;                                                                          \
    }

uint64_t gvfake_process_busy_ns(void)
{
    struct vt_shared *v = vt();
    vt_lock(v);
    uint64_t busy = g_proc_busy;
    pthread_mutex_unlock(&v->mu);
    return busy;
}

/* ---- streams ----------------------------------------------------------- */

/* The calling thread's current context, or NULL. */
static struct CUctx_st *current_ctx(void)
{
    struct CUctx_st *c = fake_cuda_current();
    return fake_cuda_ctx_valid(c) && c->phys >= 0 && c->phys < VT_MAX_DEVICES ? c : NULL;
}

/* Default stream of the current context's GPU, created on first use. */
static struct CUstream_st *default_stream(void)
{
    struct CUctx_st *c = current_ctx();
    if (c == NULL)
        return NULL;
    struct CUstream_st *d = &g_default_stream[c->phys];
    d->magic = OBJ_STREAM;
    d->dev = c->phys;
    d->ctx = c;
    return d;
}

/*
 * Resolves a stream handle.  NULL / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD
 * are the device's default stream (one per device: the fake does not model
 * the legacy stream's implicit synchronisation with other streams).  *rc
 * says why when NULL is returned.
 */
static struct CUstream_st *stream_get(CUstream s, CUresult *rc)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        struct CUstream_st *d = default_stream();
        *rc = d ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
        return d;
    }
    *rc = s->magic == OBJ_STREAM ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    return *rc == CUDA_SUCCESS ? s : NULL;
}

/* A stream for a call that writes through out: *rc says why when NULL. */
static struct CUstream_st *stream_query_target(CUstream hStream, const void *out, CUresult *rc)
{
    if (out == NULL) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    return stream_get(hStream, rc);
}

static CUresult stream_new(CUstream *out)
{
    CUresult rc = fake_cuda_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = current_ctx();
    if (c == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUstream_st *s = obj_new(sizeof(*s), OBJ_STREAM);
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->dev = c->phys;
    s->ctx = c;
    *out = s;
    return CUDA_SUCCESS;
}

/* As on current NVIDIA GPUs: 0 is the lowest stream priority, -5 the highest
 * (the fake runs every stream alike). */
CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    if (current_ctx() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    (void)Flags;
    return stream_new(phStream);
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    (void)flags;
    (void)priority;
    return stream_new(phStream);
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        hStream->magic != OBJ_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    if (hStream->capture) {
        if (hStream->capture->global)
            atomic_fetch_sub(&g_global_captures, 1);
        obj_free(hStream->capture, OBJ_GRAPH);
        hStream->capture = NULL;
    }
    /* Queued work still completes (its finish times are already fixed). */
    hStream->magic = 0;
    free(hStream->pending);
    free(hStream);
    return CUDA_SUCCESS;
}

static CUresult stream_query(CUstream hStream)
{
    CUresult rc;
    struct CUstream_st *s = stream_get(hStream, &rc);
    if (s == NULL)
        return rc;
    struct vt_shared *v = vt();
    vt_lock(v);
    bool done = s->tail <= v->now;
    if (!done && ++t_spins >= POLL_SPIN_LIMIT)
        vt_wait_until_locked(v, v->now + POLL_STEP_NS);
    pthread_mutex_unlock(&v->mu);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult stream_sync(CUstream hStream)
{
    CUresult rc;
    struct CUstream_st *s = stream_get(hStream, &rc);
    if (s == NULL)
        return rc;
    struct vt_shared *v = vt();
    vt_lock(v);
    vt_wait_until_locked(v, s->tail);
    pthread_mutex_unlock(&v->mu);
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuStreamQuery, stream_query, (CUstream hStream), (hStream))
FAKE_BOTH(cuStreamSynchronize, stream_sync, (CUstream hStream), (hStream))

CUresult cuCtxSynchronize(void)
{
    struct CUctx_st *c = current_ctx();
    if (c == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct vt_shared *v = vt();
    int dev = c->phys;
    vt_lock(v);
    vt_wait_until_locked(v, g_proc_tail[dev]);
    pthread_mutex_unlock(&v->mu);
    return CUDA_SUCCESS;
}

static CUresult stream_wait_event(CUstream hStream, CUevent hEvent, unsigned int flags)
{
    (void)flags;
    CUresult rc;
    struct CUstream_st *s = stream_get(hStream, &rc);
    if (s == NULL)
        return rc;
    if (hEvent == NULL || hEvent->magic != OBJ_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    struct vt_shared *v = vt();
    vt_lock(v);
    if (hEvent->recorded && hEvent->at > s->tail)
        s->tail = hEvent->at;
    pthread_mutex_unlock(&v->mu);
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuStreamWaitEvent, stream_wait_event,
          (CUstream hStream, CUevent hEvent, unsigned int Flags), (hStream, hEvent, Flags))

/*
 * Queues `ns` of kernel time on a stream: the engine runs it after everything
 * submitted before (by any process) and after the stream's earlier work.
 * Blocks, like the real driver, while the stream's launch queue is full.
 */
static CUresult submit(CUstream hStream, uint64_t ns, unsigned kernels)
{
    CUresult rc;
    struct CUstream_st *s = stream_get(hStream, &rc);
    if (s == NULL)
        return rc;
    struct vt_shared *v = vt();
    vt_lock(v);
    if (s->capture) {
        s->capture->ns += ns;
        s->capture->kernels += kernels;
        pthread_mutex_unlock(&v->mu);
        return CUDA_SUCCESS;
    }
    if (s->pending == NULL && (s->pending = calloc(g_depth, sizeof(uint64_t))) == NULL) {
        pthread_mutex_unlock(&v->mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (;;) {
        while (s->count > 0 && s->pending[s->head] <= v->now) {
            s->head = (s->head + 1) % g_depth;
            s->count--;
        }
        if (s->count < g_depth)
            break;
        vt_wait_until_locked(v, s->pending[s->head]);
    }
    if (g_jitter) {
        /* Real kernels vary run to run; the throttle must not rely on a
         * kernel always taking what it took last time. */
        g_jitter_state = g_jitter_state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(g_jitter_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
        ns = (uint64_t)((double)ns * (1.0 + u * g_jitter / 100.0));
    }
    struct vt_engine *e = &v->eng[s->dev];
    uint64_t start = v->now;
    if (s->tail > start)
        start = s->tail;
    if (e->free_at > start)
        start = e->free_at;
    uint64_t end = start + ns;
    e->free_at = end;
    e->busy_ns += ns;
    g_proc_busy += ns;
    e->kernels += kernels;
    s->tail = end;
    s->pending[(s->head + s->count) % g_depth] = end;
    s->count++;
    if (end > g_proc_tail[s->dev])
        g_proc_tail[s->dev] = end;
    t_spins = 0;
    pthread_mutex_unlock(&v->mu);
    return CUDA_SUCCESS;
}

/* ---- events ------------------------------------------------------------ */

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    if (phEvent == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = obj_new(sizeof(*e), OBJ_EVENT);
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->flags = Flags;
    *phEvent = e;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
    return obj_free(hEvent, OBJ_EVENT);
}

/* An event is a zero-length command: it completes when the engine reaches
 * it, so an event recorded just before a kernel stamps the kernel's start. */
static CUresult event_record(CUevent hEvent, CUstream hStream)
{
    CUresult rc;
    struct CUstream_st *s = stream_get(hStream, &rc);
    if (s == NULL)
        return rc;
    if (hEvent == NULL || hEvent->magic != OBJ_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    struct vt_shared *v = vt();
    vt_lock(v);
    if (s->capture == NULL) {
        uint64_t at = v->now;
        if (s->tail > at)
            at = s->tail;
        if (v->eng[s->dev].free_at > at)
            at = v->eng[s->dev].free_at;
        s->tail = at;
        hEvent->at = at;
        hEvent->recorded = true;
    }
    pthread_mutex_unlock(&v->mu);
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuEventRecord, event_record, (CUevent hEvent, CUstream hStream), (hEvent, hStream))
CUresult cuEventQuery(CUevent hEvent)
{
    if (hEvent == NULL || hEvent->magic != OBJ_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    if (unsafe_during_capture())
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct vt_shared *v = vt();
    vt_lock(v);
    bool done = !hEvent->recorded || hEvent->at <= v->now;
    if (!done && ++t_spins >= POLL_SPIN_LIMIT)
        vt_wait_until_locked(v, v->now + POLL_STEP_NS);
    pthread_mutex_unlock(&v->mu);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    if (hEvent == NULL || hEvent->magic != OBJ_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    struct vt_shared *v = vt();
    vt_lock(v);
    if (hEvent->recorded)
        vt_wait_until_locked(v, hEvent->at);
    pthread_mutex_unlock(&v->mu);
    return CUDA_SUCCESS;
}

static CUresult elapsed(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    if (pMilliseconds == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (hStart == NULL || hEnd == NULL || hStart->magic != OBJ_EVENT || hEnd->magic != OBJ_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    if (unsafe_during_capture())
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!hStart->recorded || !hEnd->recorded ||
        ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    struct vt_shared *v = vt();
    vt_lock(v);
    bool done = hStart->at <= v->now && hEnd->at <= v->now;
    pthread_mutex_unlock(&v->mu);
    if (!done)
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)((double)((int64_t)hEnd->at - (int64_t)hStart->at) / 1e6);
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

/* ---- modules and kernels ----------------------------------------------- */

static CUresult module_new(CUmodule *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmod_st *m = obj_new(sizeof(*m), OBJ_MODULE);
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (fname == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK) != 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return module_new(module);
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    if (image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}

CUresult cuModuleUnload(CUmodule hmod)
{
    if (hmod == NULL || hmod->magic != OBJ_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    for (struct CUfunc_st *f = hmod->funcs, *next; f; f = next) {
        next = f->next;
        f->magic = 0;
        free(f);
    }
    hmod->magic = 0;
    free(hmod);
    return CUDA_SUCCESS;
}

/* "<anything>_<N><unit>" -> true and N in ns; false when the name carries no
 * run time ("_0ns" is a kernel that takes no time at all). */
static bool name_duration(const char *name, uint64_t *ns)
{
    const char *us = strrchr(name, '_');
    static const struct {
        const char *unit;
        uint64_t mul;
    } units[] = {{"ns", 1}, {"us", 1000}, {"ms", 1000000}};
    if (us == NULL || us[1] < '0' || us[1] > '9')
        return false;
    char *end;
    unsigned long long n = strtoull(us + 1, &end, 10);
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0 && n <= UINT64_MAX / units[i].mul) {
            *ns = n * units[i].mul;
            return true;
        }
    }
    return false;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    if (hfunc == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (hmod == NULL || hmod->magic != OBJ_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    for (struct CUfunc_st *f = hmod->funcs; f; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            *hfunc = f;
            return CUDA_SUCCESS;
        }
    }
    size_t len = strlen(name);
    struct CUfunc_st *f = calloc(1, sizeof(*f) + len + 1);
    if (f == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->magic = OBJ_FUNC;
    memcpy(f->name, name, len + 1);
    if (!name_duration(name, &f->ns))
        f->ns = g_default_ns;
    f->next = hmod->funcs;
    hmod->funcs = f;
    *hfunc = f;
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, CUstream hStream)
{
    if (f == NULL || f->magic != OBJ_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return submit(hStream, f->ns, 1);
}

static CUresult launch_kernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                              CUstream hStream, void **params, void **extra)
{
    (void)shmem;
    (void)params;
    (void)extra;
    return launch(f, gx, gy, gz, bx, by, bz, hStream);
}

static CUresult launch_coop(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                            CUstream hStream, void **params)
{
    return launch_kernel(f, gx, gy, gz, bx, by, bz, shmem, hStream, params, NULL);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    (void)params;
    (void)extra;
    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                  c->blockDimZ, c->hStream);
}

FAKE_BOTH(cuLaunchKernel, launch_kernel,
          (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
           unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream, void **params,
           void **extra),
          (f, gx, gy, gz, bx, by, bz, shmem, hStream, params, extra))
FAKE_BOTH(cuLaunchKernelEx, launch_ex,
          (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
          (config, f, params, extra))

FAKE_BOTH(cuLaunchCooperativeKernel, launch_coop,
          (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
           unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream, void **params),
          (f, gx, gy, gz, bx, by, bz, shmem, hStream, params))

CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                              unsigned int numDevices, unsigned int flags)
{
    (void)flags;
    if (launchParamsList == NULL || numDevices == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numDevices; i++) {
        const CUDA_LAUNCH_PARAMS *p = &launchParamsList[i];
        CUresult rc = launch(p->function, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX,
                             p->blockDimY, p->blockDimZ, p->hStream);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* ---- graphs (stream capture) ------------------------------------------- */

static CUresult begin_capture(CUstream hStream, int mode)
{
    CUresult rc;
    struct CUstream_st *s = stream_get(hStream, &rc);
    if (s == NULL)
        return rc;
    if (s == &g_default_stream[s->dev])
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* as the real legacy stream */
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    struct CUgraph_st *g = obj_new(sizeof(*g), OBJ_GRAPH);
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    g->unsafe_epoch = atomic_load(&g_unsafe_epoch);
    if (g->global)
        atomic_fetch_add(&g_global_captures, 1);
    s->capture = g;
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuStreamBeginCapture_v2, begin_capture, (CUstream hStream, int mode), (hStream, mode))

static CUresult end_capture(CUstream hStream, CUgraph *phGraph)
{
    CUresult rc;
    struct CUstream_st *s = stream_query_target(hStream, phGraph, &rc);
    if (s == NULL)
        return rc;
    struct CUgraph_st *g = s->capture;
    if (g == NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    s->capture = NULL;
    if (g->global)
        atomic_fetch_sub(&g_global_captures, 1);
    if (g->global && g->unsafe_epoch != atomic_load(&g_unsafe_epoch)) {
        obj_free(g, OBJ_GRAPH);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *phGraph = g;
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuStreamEndCapture, end_capture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))

static CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus *status)
{
    CUresult rc;
    struct CUstream_st *s = stream_query_target(hStream, status, &rc);
    if (s == NULL)
        return rc;
    *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuStreamIsCapturing, is_capturing,
          (CUstream hStream, CUstreamCaptureStatus *captureStatus), (hStream, captureStatus))

static CUresult stream_ctx(CUstream hStream, CUcontext *pctx)
{
    CUresult rc;
    struct CUstream_st *s = stream_query_target(hStream, pctx, &rc);
    if (s == NULL)
        return rc;
    *pctx = s->ctx;
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuStreamGetCtx, stream_ctx, (CUstream hStream, CUcontext *pctx), (hStream, pctx))

static CUresult stream_device(CUstream hStream, CUdevice *device)
{
    CUresult rc;
    struct CUstream_st *s = stream_query_target(hStream, device, &rc);
    if (s == NULL)
        return rc;
    *device = s->ctx->device;
    return CUDA_SUCCESS;
}

FAKE_BOTH(cuStreamGetDevice, stream_device, (CUstream hStream, CUdevice *device), (hStream, device))

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (mode == NULL || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = t_capture_mode;
    t_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    if (phGraph == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = obj_new(sizeof(*g), OBJ_GRAPH);
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = g;
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
    return obj_free(hGraph, OBJ_GRAPH);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags)
{
    (void)flags;
    if (phGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (hGraph == NULL || hGraph->magic != OBJ_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUgraphExec_st *x = obj_new(sizeof(*x), OBJ_EXEC);
    if (x == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->ns = hGraph->ns;
    x->kernels = hGraph->kernels;
    *phGraphExec = x;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    return obj_free(hGraphExec, OBJ_EXEC);
}

static CUresult graph_launch(CUgraphExec x, CUstream hStream)
{
    if (x == NULL || x->magic != OBJ_EXEC)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Nodes of a captured chain run back to back: one command of their sum. */
    return submit(hStream, x->ns, x->kernels);
}

FAKE_BOTH(cuGraphLaunch, graph_launch, (CUgraphExec hGraphExec, CUstream hStream),
          (hGraphExec, hStream))
