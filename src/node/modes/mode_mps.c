/*
 * MPS mode (docs/node-agent.md, "MPS"): containers share a GPU through
 * CUDA MPS, one control daemon per GPU run and supervised by the agent,
 * with per-client limits the driver enforces (active-thread percentage
 * from nvidia.com/gpucores, pinned device memory from nvidia.com/gpumem).
 * The interposer stays preloaded for the views, the cross-process
 * accounting and priority; it re-exports the MPS limits from the limits
 * file so that a tenant's own environment cannot raise them.
 *
 * Each daemon: `nvidia-cuda-mps-control -d` with CUDA_VISIBLE_DEVICES=<uuid>,
 * CUDA_MPS_PIPE_DIRECTORY=<state>/mps/<uuid>/pipe and
 * CUDA_MPS_LOG_DIRECTORY=<state>/mps/<uuid>/log.  A supervisor thread
 * probes each daemon (`get_default_active_thread_percentage`, as NVIDIA's
 * plugin does), restarts a dead one with backoff, and sends `quit` when a
 * GPU leaves MPS mode or the agent stops.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"
#include "node/loop/gv_loop.h"
#include "node/modes/gv_mode.h"

/*
 * Where containers see the pipe directory: CUDA's default, so a client
 * that drops CUDA_MPS_PIPE_DIRECTORY from its environment still finds the
 * daemon instead of running outside MPS.
 */
#define MPS_CTR_PIPE "/tmp/nvidia-mps"
#define MPS_CMD_TIMEOUT_MS 10000
#define MPS_BACKOFF_MIN_MS 500
#define MPS_BACKOFF_MAX_MS 60000

struct mps_gpu {
    char uuid[96];
    unsigned replicas; /* NVIDIA's defaults: 100/replicas threads, memory/replicas */
    uint64_t mem_mib;
    bool nvidia_defaults; /* from sharing.mps: daemon-wide defaults as NVIDIA sets them */
    bool wanted;
    bool started; /* we (or an earlier agent) started it and it answered */
    bool up;      /* the last probe answered */
    unsigned failures;
    int64_t next_try, next_probe;
    char why[128]; /* why it is down */
};

struct mps {
    struct gv_mode_env env;
    char control[4096];
    char state[3800]; /* <state>/mps (room for /<uuid>/pipe in a path) */
    int64_t probe_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool running, quit;
    struct mps_gpu *g;
    size_t n;
};

/* ---- running nvidia-cuda-mps-control ------------------------------------------------ */

static void gpu_dir(const struct mps *m, const char *uuid, const char *leaf, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%.95s/%.8s", m->state, uuid, leaf);
}

static int64_t now_ms(void)
{
    return gv_loop_now_ms();
}

/*
 * Runs the control program for one GPU: with arg ("-d") and no input, or
 * in client mode with a command on stdin (output into out).  Returns its
 * exit status, -1 when it could not run or was killed after the timeout.
 */
static int run_control(const struct mps *m, const char *uuid, const char *arg, const char *input,
                       char *out, size_t cap)
{
    char pipe_env[4200], log_env[4200], dev_env[128], path_env[4200], pipe_dir[4096],
        log_dir[4096];
    gpu_dir(m, uuid, "pipe", pipe_dir, sizeof(pipe_dir));
    gpu_dir(m, uuid, "log", log_dir, sizeof(log_dir));
    snprintf(pipe_env, sizeof(pipe_env), "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir);
    snprintf(log_env, sizeof(log_env), "CUDA_MPS_LOG_DIRECTORY=%s", log_dir);
    snprintf(dev_env, sizeof(dev_env), "CUDA_VISIBLE_DEVICES=%s", uuid);
    const char *path = getenv("PATH");
    snprintf(path_env, sizeof(path_env), "PATH=%s", path ? path : "/usr/bin:/bin");
    /*
     * Where the host driver's libcuda is mounted for the server
     * (deploy/mps: /usr/local/nvidia/lib64, a directory of NVIDIA files
     * only); absent when the NVIDIA runtime put the driver in the loader's
     * default paths.
     */
    char ld_env[4200] = "";
    const char *ld = getenv("LD_LIBRARY_PATH");
    if (ld && *ld)
        snprintf(ld_env, sizeof(ld_env), "LD_LIBRARY_PATH=%s", ld);
    char *envp[] = {pipe_env, log_env, dev_env, path_env, ld_env[0] ? ld_env : NULL, NULL};
    char *argv[] = {(char *)m->control, (char *)arg, NULL};
    int in[2] = {-1, -1}, outp[2] = {-1, -1};
    if (input && (pipe2(in, O_CLOEXEC) != 0 || pipe2(outp, O_CLOEXEC) != 0)) {
        for (int i = 0; i < 2; i++) {
            if (in[i] >= 0)
                close(in[i]);
            if (outp[i] >= 0)
                close(outp[i]);
        }
        return -1;
    }
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) {
        /* child: only async-signal-safe calls */
        dup2(input ? in[0] : devnull, 0);
        dup2(input ? outp[1] : devnull, 1);
        dup2(devnull, 2);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* the agent blocks signals for its signalfd */
        closefrom(3);
        execve(m->control, argv, envp);
        _exit(127);
    }
    if (devnull >= 0)
        close(devnull);
    if (input) {
        close(in[0]);
        close(outp[1]);
    }
    if (pid < 0) {
        if (input) {
            close(in[1]);
            close(outp[0]);
        }
        return -1;
    }
    size_t used = 0;
    if (out && cap)
        out[0] = '\0';
    int64_t deadline = now_ms() + MPS_CMD_TIMEOUT_MS;
    bool timed_out = false;
    if (input) {
        /* one short line: fits the pipe buffer, the write does not block */
        char line[256];
        int len = snprintf(line, sizeof(line), "%s\n", input);
        if (write(in[1], line, (size_t)len) != len)
            gv_debug("MPS %s: writing '%s' failed: %s", uuid, input, strerror(errno));
        close(in[1]);
        for (;;) {
            int64_t left = deadline - now_ms();
            struct pollfd pfd = {.fd = outp[0], .events = POLLIN};
            if (left <= 0) {
                timed_out = true;
                break;
            }
            int r = poll(&pfd, 1, (int)left);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                timed_out = r == 0;
                break;
            }
            char tmp[512];
            ssize_t got = read(outp[0], tmp, sizeof(tmp));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break;
            if (out && used + 1 < cap) {
                size_t take = (size_t)got < cap - 1 - used ? (size_t)got : cap - 1 - used;
                memcpy(out + used, tmp, take);
                used += take;
                out[used] = '\0';
            }
        }
        close(outp[0]);
    }
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, timed_out ? 0 : WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return -1;
        if (w == 0) {
            if (now_ms() >= deadline) {
                timed_out = true;
                kill(pid, SIGKILL);
                continue;
            }
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (timed_out)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A daemon answers: get_default_active_thread_percentage prints a number. */
static bool probe(const struct mps *m, const char *uuid)
{
    char out[128];
    if (run_control(m, uuid, NULL, "get_default_active_thread_percentage", out, sizeof(out)) != 0)
        return false;
    char *end;
    double v = strtod(out, &end);
    return end != out && v > 0 && v <= 100;
}

static gv_status mkdirs(const char *path, struct gv_error *err)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return gv_error_set(err, GV_EIO, "cannot create %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return gv_error_set(err, GV_EIO, "cannot create %s: %s", tmp, strerror(errno));
    return GV_OK;
}

/*
 * Starts (or adopts: one an earlier agent left running answers the probe)
 * the daemon of one GPU.  Called without the lock; g is a copy.
 */
static bool start_daemon(const struct mps *m, const struct mps_gpu *g, char *why, size_t cap)
{
    char dir[4096];
    struct gv_error err;
    gpu_dir(m, g->uuid, "pipe", dir, sizeof(dir));
    if (mkdirs(dir, &err) != GV_OK) {
        snprintf(why, cap, "%.100s", err.msg);
        return false;
    }
    gpu_dir(m, g->uuid, "log", dir, sizeof(dir));
    if (mkdirs(dir, &err) != GV_OK) {
        snprintf(why, cap, "%.100s", err.msg);
        return false;
    }
    if (probe(m, g->uuid)) {
        gv_info("MPS: GPU %s: a control daemon is already running: adopted", g->uuid);
    } else {
        int rc = run_control(m, g->uuid, "-d", NULL, NULL, 0);
        if (rc != 0) {
            snprintf(why, cap, "%.60s -d exited with %d", m->control, rc);
            return false;
        }
        /* -d returns once it has forked; the daemon makes its pipe right after */
        bool ok = false;
        for (int i = 0; i < 50 && !ok; i++) {
            ok = probe(m, g->uuid);
            if (!ok) {
                struct timespec ts = {0, 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        if (!ok) {
            snprintf(why, cap, "the MPS control daemon does not answer after starting");
            return false;
        }
        gv_info("MPS: GPU %s: control daemon started", g->uuid);
    }
    if (g->nvidia_defaults && g->replicas > 1) {
        /* NVIDIA's plugin: every client's ceiling is an equal share of threads and memory */
        char cmd[128], out[128];
        snprintf(cmd, sizeof(cmd), "set_default_active_thread_percentage %u", 100 / g->replicas);
        int rc = run_control(m, g->uuid, NULL, cmd, out, sizeof(out));
        if (rc == 0 && g->mem_mib) {
            snprintf(cmd, sizeof(cmd), "set_default_device_pinned_mem_limit 0 %lluM",
                     (unsigned long long)(g->mem_mib / g->replicas));
            rc = run_control(m, g->uuid, NULL, cmd, out, sizeof(out));
        }
        if (rc != 0) {
            snprintf(why, cap, "'%.80s' failed (%d)", cmd, rc);
            return false;
        }
    }
    return true;
}

static void quit_daemon(const struct mps *m, const char *uuid)
{
    char out[128];
    int rc = run_control(m, uuid, NULL, "quit", out, sizeof(out));
    if (rc == 0)
        gv_info("MPS: GPU %s: control daemon stopped", uuid);
    else
        gv_warn("MPS: GPU %s: 'quit' failed (%d): the daemon may still run", uuid, rc);
}

/* ---- supervisor ---------------------------------------------------------------------- */

static void notify(struct mps *m)
{
    if (m->env.changed)
        m->env.changed(m->env.changed_ud);
}

static void *supervise(void *arg)
{
    struct mps *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->quit) {
        /*
         * `-d` daemonizes: when the agent is its container's PID 1 the daemon
         * becomes our child once its parent exits, and a daemon that quits or
         * dies would stay a zombie.  Only this thread starts processes (and
         * waits for each by pid), so reaping whatever else ended is safe here.
         */
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        int64_t now = now_ms(), wake = now + 60000;
        bool changed = false;
        for (size_t i = 0; i < m->n && !m->quit; i++) {
            struct mps_gpu *g = &m->g[i];
            if (!g->wanted) {
                struct mps_gpu copy = *g;
                m->g[i] = m->g[--m->n];
                i--;
                if (copy.started) {
                    pthread_mutex_unlock(&m->mu);
                    quit_daemon(m, copy.uuid);
                    pthread_mutex_lock(&m->mu);
                }
                continue;
            }
            if (!g->up && now >= g->next_try) {
                struct mps_gpu copy = *g;
                char why[128] = "";
                pthread_mutex_unlock(&m->mu);
                bool ok = start_daemon(m, &copy, why, sizeof(why));
                pthread_mutex_lock(&m->mu);
                g = NULL;
                for (size_t k = 0; k < m->n; k++)
                    if (strcmp(m->g[k].uuid, copy.uuid) == 0)
                        g = &m->g[k];
                if (g == NULL)
                    continue; /* removed meanwhile: next round quits it */
                now = now_ms();
                if (ok) {
                    g->up = g->started = true;
                    g->failures = 0;
                    g->why[0] = '\0';
                    g->next_probe = now + m->probe_ms;
                } else {
                    unsigned f = g->failures < 16 ? g->failures : 16;
                    int64_t backoff = (int64_t)MPS_BACKOFF_MIN_MS << f;
                    g->failures++;
                    g->next_try = now + (backoff < MPS_BACKOFF_MAX_MS ? backoff : MPS_BACKOFF_MAX_MS);
                    snprintf(g->why, sizeof(g->why), "MPS control daemon: %.100s", why);
                    gv_warn("MPS: GPU %s: %s (attempt %u; next in %lld ms)", g->uuid, why,
                            g->failures, (long long)(g->next_try - now));
                }
                changed = true;
            } else if (g->up && now >= g->next_probe) {
                char uuid[96];
                snprintf(uuid, sizeof(uuid), "%s", g->uuid);
                pthread_mutex_unlock(&m->mu);
                bool ok = probe(m, uuid);
                pthread_mutex_lock(&m->mu);
                g = NULL;
                for (size_t k = 0; k < m->n; k++)
                    if (strcmp(m->g[k].uuid, uuid) == 0)
                        g = &m->g[k];
                if (g == NULL)
                    continue;
                now = now_ms();
                g->next_probe = now + m->probe_ms;
                if (!ok) {
                    gv_warn("MPS: GPU %s: the control daemon stopped answering: restarting it",
                            uuid);
                    g->up = false;
                    g->next_try = now; /* the first restart at once, then backoff */
                    snprintf(g->why, sizeof(g->why), "MPS control daemon not running");
                    changed = true;
                }
            }
            if (g->wanted) {
                int64_t t = g->up ? g->next_probe : g->next_try;
                if (t < wake)
                    wake = t;
            }
        }
        if (changed) {
            pthread_mutex_unlock(&m->mu);
            notify(m);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        int64_t left = wake - now_ms();
        if (left > 0 && !m->quit) {
            struct timespec ts;
            gv_loop_abstime(&ts, left);
            pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- the mode ---------------------------------------------------------------------- */

static gv_status mps_open(const struct gv_mode_env *env, void **state, struct gv_error *err)
{
    struct mps *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    m->env = *env;
    snprintf(m->control, sizeof(m->control), "%s",
             env->mps_control ? env->mps_control : "/usr/bin/nvidia-cuda-mps-control");
    snprintf(m->state, sizeof(m->state), "%.3700s/mps", env->state_dir ? env->state_dir : ".");
    m->probe_ms = env->mps_probe_ms > 0 ? env->mps_probe_ms : 10000;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    *state = m;
    return GV_OK;
}

static void mps_close(void *state)
{
    struct mps *m = state;
    pthread_mutex_lock(&m->mu);
    m->quit = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->running)
        pthread_join(m->thread, NULL);
    /* clean shutdown, as NVIDIA's MPS daemon set does: quit every daemon we run */
    for (size_t i = 0; i < m->n; i++)
        if (m->g[i].started)
            quit_daemon(m, m->g[i].uuid);
    free(m->g);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/*
 * Per-client limits (active-thread percentage, pinned device memory) need
 * Volta's MPS (compute capability 7.0); an unknown capability (0) is not
 * held against a GPU.
 */
static bool pre_volta(const struct gv_gpu *g)
{
    return g->cc_major > 0 && g->cc_major < 7;
}

static size_t discover(void *st, const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                       struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap)
{
    (void)st;
    if (s->mem_scaling > 1.0) {
        snprintf(why, why_cap, "deviceMemoryScaling %.2f > 1 (oversubscription) is not possible "
                 "under MPS: the driver enforces the memory limit", s->mem_scaling);
        return 0;
    }
    size_t n = gv_mode_discover_gpu(g, s, out, cap, why, why_cap);
    /* NVIDIA's sharing.mps: pods it did not schedule get NVIDIA's equal shares */
    if (n)
        out->from_ids = s->resource[0] != '\0';
    if (n && pre_volta(g)) {
        /*
         * Advertised Unhealthy (kubelet, inventory and Allocate say why), no
         * daemon started: a pre-Volta MPS server would run its clients
         * without the limits the pods asked for.
         */
        out->gpu.healthy = false;
        snprintf(out->gpu.reason, sizeof(out->gpu.reason),
                 "MPS needs compute capability 7.0 (Volta) or newer; this GPU is %d.%d",
                 g->cc_major, g->cc_minor);
        gv_warn("GPU %u (%s): MPS unavailable: %s", g->index, g->uuid, out->gpu.reason);
    }
    return n;
}

static void sync_units(void *st, const struct gv_allocator_gpu *units, size_t n)
{
    struct mps *m = st;
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++)
        m->g[i].wanted = false;
    for (size_t i = 0; i < n; i++) {
        struct mps_gpu *g = NULL;
        if (pre_volta(&units[i].gpu))
            continue; /* refused in discover: no daemon (one running is told to quit) */
        for (size_t k = 0; k < m->n && !g; k++)
            if (strcmp(m->g[k].uuid, units[i].gpu.uuid) == 0)
                g = &m->g[k];
        if (g == NULL) {
            void *p = realloc(m->g, (m->n + 1) * sizeof(*m->g));
            if (p == NULL) {
                gv_error("MPS: GPU %s: out of memory", units[i].gpu.uuid);
                continue;
            }
            m->g = p;
            g = &m->g[m->n++];
            memset(g, 0, sizeof(*g));
            snprintf(g->uuid, sizeof(g->uuid), "%s", units[i].gpu.uuid);
            snprintf(g->why, sizeof(g->why), "MPS control daemon starting");
        }
        g->wanted = true;
        g->replicas = units[i].settings.split;
        g->mem_mib = units[i].gpu.memory_mib;
        g->nvidia_defaults = units[i].from_ids;
    }
    if (!m->running && m->n > 0) {
        /* the thread only exists once a GPU is in MPS mode: no idle cost otherwise */
        if (pthread_create(&m->thread, NULL, supervise, m) == 0)
            m->running = true;
        else
            gv_error("MPS: cannot start the supervisor thread");
    }
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static bool health(void *st, const struct gv_allocator_gpu *u, char *why, size_t why_cap)
{
    struct mps *m = st;
    if (m == NULL)
        return true;
    bool up = false;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->g[i].uuid, u->gpu.uuid) == 0) {
            up = m->g[i].up;
            snprintf(why, why_cap, "%s", m->g[i].why);
        }
    pthread_mutex_unlock(&m->mu);
    return up;
}

unsigned gv_mps_thread_percentage(unsigned milli, unsigned sms)
{
    if (milli >= 1000)
        return 100;
    unsigned tpcs = sms / 2;
    if (sms % 2 != 0 || tpcs < 2) {
        unsigned pct = (milli + 9) / 10;
        return pct ? pct : 1;
    }
    /* the share in TPCs, x1000: floor for a minority client, ceil above half */
    uint64_t share = (uint64_t)milli * tpcs;
    uint64_t k = milli > 500 ? (share + 999) / 1000 : share / 1000;
    if (k == 0)
        k = 1;
    if (k > tpcs)
        k = tpcs;
    unsigned q = (unsigned)((100 * k + tpcs - 1) / tpcs);
    /* more than 100 TPCs: one percent is more than a TPC; never grant more than k */
    while (q > 1 && (uint64_t)q * tpcs / 100 > k)
        q--;
    return q > 100 ? 100 : q;
}

static int allocate(void *st, const struct gv_mode_alloc *a, char *msg, size_t cap)
{
    struct mps *m = st;
    const struct gv_allocator_gpu *u = &a->units[0];
    if (a->n_units > 1) {
        snprintf(msg, cap, "an MPS GPU must be the container's only GPU: a CUDA client talks to "
                 "one MPS control daemon, and each GPU has its own");
        return GV_GRPC_FAILED_PRECONDITION;
    }
    int code = gv_mode_check_replicas(a, msg, cap);
    if (code != GV_GRPC_OK)
        return code;
    if (m && !health(m, u, msg, cap)) {
        size_t l = strlen(msg);
        snprintf(msg + l, cap - l, "%sGPU %s cannot take MPS clients now", l ? ": " : "",
                 u->gpu.uuid);
        return GV_GRPC_FAILED_PRECONDITION;
    }
    char host[4200];
    gv_mode_answer_visible(a->answer, u->gpu.uuid);
    snprintf(host, sizeof(host), "%s/mps/%s/pipe", a->env->host_state_dir, u->gpu.uuid);
    gv_mode_answer_mount(a->answer, host, MPS_CTR_PIPE, false);
    /* the MPS server and its clients share memory through /dev/shm (NVIDIA's plugin mounts it too) */
    snprintf(host, sizeof(host), "%s/mps/shm", a->env->host_state_dir);
    gv_mode_answer_mount(a->answer, host, "/dev/shm", false);
    if (a->c == NULL) {
        /* a pod gpuvisor did not schedule: the daemon's defaults (NVIDIA's equal shares) */
        gv_mode_answer_env(a->answer, "CUDA_MPS_PIPE_DIRECTORY", MPS_CTR_PIPE);
        return GV_GRPC_OK;
    }
    const struct gv_alloc_device *d = &a->c->devices[a->idx[0]];
    char val[64];
    gv_mode_answer_limit(a->answer, "CUDA_MPS_PIPE_DIRECTORY", MPS_CTR_PIPE);
    if (d->milli) {
        unsigned milli = d->milli > 1000 ? 1000 : (unsigned)d->milli;
        snprintf(val, sizeof(val), "%u", gv_mps_thread_percentage(milli, u->gpu.sms));
        gv_mode_answer_limit(a->answer, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", val);
    }
    if (d->mem_mib) {
        /* the container sees one GPU: its ordinal is 0 for the driver and the interposer */
        snprintf(val, sizeof(val), "0=%lluM", (unsigned long long)d->mem_mib);
        gv_mode_answer_limit(a->answer, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", val);
        snprintf(val, sizeof(val), "%llum", (unsigned long long)d->mem_mib);
        gv_mode_answer_limit(a->answer, "CUDA_DEVICE_MEMORY_LIMIT_0", val);
    }
    /* no CUDA_DEVICE_SM_LIMIT: MPS divides the SMs; the time limiter on top cost 6 points */
    gv_mode_answer_interposer(a->answer);
    return GV_GRPC_OK;
}

const struct gv_mode gv_mode_MPS = {
    .id = GV_INVENTORY_MODE_MPS,
    .flags = GV_MODE_NEEDS_ASSIGNMENT,
    .open = mps_open,
    .close = mps_close,
    .discover = discover,
    .sync = sync_units,
    .health = health,
    .advertise = gv_mode_advertise_split,
    .allocate = allocate,
};
