/*
 * The NVML enforcement backstop: processes NVML shows above their
 * container's limit are reported, or killed, once per episode.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_file.h"
#include "common/gv_log.h"
#include "common/gv_nvml.h"
#include "interposer/throttle.h"
#include "node/monitor/gv_monitor.h"
#include "node/monitor/monitor_internal.h"
#include "shm/gv_shm.h"
#include "node/monitor/monitor_state.h"

/* ---- backstop -------------------------------------------------------------------- */

struct action {
    char ns[64], pod[256], uid[64], ctr[64], uuid[96];
    bool kill;
    unsigned pid;
    uint64_t real, limit;
    bool done; /* the signal was delivered */
};

static int pidfd_open_(unsigned pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/*
 * SIGKILL pid if it still belongs to pod uid.  Through a pidfd, so the
 * process checked is the one signalled even if the pid is reused in between.
 */
static bool kill_checked(const struct gv_monitor *m, unsigned pid, const char *uid)
{
    int fd = pidfd_open_(pid);
    char u[64], cid[80];
    if (!pid_cgroup(m, pid, u, cid) || strcmp(u, uid) != 0) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    bool ok;
#ifdef SYS_pidfd_send_signal
    if (fd >= 0) {
        ok = syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0;
        close(fd);
        return ok;
    }
#endif
    if (fd >= 0)
        close(fd);
    ok = kill((pid_t)pid, SIGKILL) == 0;
    return ok;
}

/*
 * What container c's region accounts for NVML process pid on its device i: by
 * the host pid the process learned (its first context's NVML entry), else, for
 * a process that never learned it (its first context took no memory, or others
 * appeared with it), by the pid its slot names inside the container, which the
 * host's /proc tells for NVML's pid (NSpid).  The slot is the tenant's word, but
 * only its own container's processes are ever looked up (the cgroup decided).
 */
static uint64_t region_charge(const struct gv_monitor *m, const struct ctr *c, unsigned i,
                              unsigned pid)
{
    uint64_t charged = 0;
    bool known = false;
    for (unsigned h = 0; h < c->n_hostpids; h++)
        if ((unsigned)c->hostpids[h] == pid) {
            charged = c->hostpid_bytes[h][i];
            known = true;
        }
    int32_t ns;
    if (!known && c->n_nspids > 0 && pid_nspid(m, pid, &ns))
        for (unsigned h = 0; h < c->n_nspids; h++)
            if (c->nspids[h] == ns)
                charged = c->nspid_bytes[h][i];
    return charged;
}

/* Decides under the lock; returns actions to finish (events) outside it. */
static size_t backstop_decide(struct gv_monitor *m, struct action **out)
{
    size_t n = 0, cap = 0;
    struct action *acts = NULL;
    int64_t now_ms = (int64_t)(now_ns(CLOCK_MONOTONIC) / 1000000);
    for (size_t k = 0; k < m->n_ctrs; k++) {
        struct ctr *c = &m->ctrs[k];
        for (unsigned i = 0; i < c->rec.n_dev; i++) {
            struct cdev *d = &c->d[i];
            uint64_t limit = c->rec.dev[i].mem_limit;
            struct keep *kp = d->keep >= 0 ? &m->keep[d->keep] : NULL;
            /* only limits gpuvisor enforces: not exclusive or time-sliced GPUs,
             * whose assignment figures are the scheduler's bookkeeping */
            if (kp == NULL || d->gpu < 0 || limit == 0 || !c->rec.limited)
                continue;
            if (d->real_bytes <= limit + m->s.margin_bytes) {
                kp->over_since_ms = 0;
                kp->reported = false;
                continue;
            }
            if (kp->over_since_ms == 0)
                kp->over_since_ms = now_ms;
            if (now_ms - kp->over_since_ms < m->s.grace_ms)
                continue;
            if (m->s.backstop == GV_BACKSTOP_REPORT && kp->reported)
                continue;
            struct gpu *gp = &m->gpus[d->gpu];
            /* kill mode: the container's processes on this GPU, most memory the
             * region does not account for first, until back within the limit */
            uint64_t real = d->real_bytes;
            bool any = false;
            for (unsigned p = 0; p < gp->n_procs; p++)
                for (unsigned x = 0; x < 16 && gp->procs[p].ctr == (int)k; x++)
                    if (m->killed[x].pid == gp->procs[p].pid && m->killed[x].at_ms != 0 &&
                        now_ms - m->killed[x].at_ms < 30000) {
                        real -= real >= gp->procs[p].bytes ? gp->procs[p].bytes : real;
                        gp->procs[p].bytes = 0;
                        any = true; /* still going away: nothing new to do or say */
                    }
            if (any && real <= limit + m->s.margin_bytes)
                continue;
            any = false;
            /* what each candidate holds that the region does not account for,
             * looked up once (the lookup may read /proc) */
            uint64_t un[MAX_PROCS_PER_GPU] = {0};
            if (m->s.backstop == GV_BACKSTOP_KILL) {
                ensure_region(m, c);
                for (unsigned p = 0; p < gp->n_procs && p < MAX_PROCS_PER_GPU; p++)
                    if (gp->procs[p].ctr == (int)k && gp->procs[p].bytes != 0) {
                        uint64_t ch = region_charge(m, c, i, gp->procs[p].pid);
                        un[p] = gp->procs[p].bytes > ch ? gp->procs[p].bytes - ch : 0;
                    }
            }
            while (m->s.backstop == GV_BACKSTOP_KILL && real > limit + m->s.margin_bytes) {
                int best = -1;
                uint64_t best_un = 0;
                for (unsigned p = 0; p < gp->n_procs && p < MAX_PROCS_PER_GPU; p++) {
                    if (gp->procs[p].ctr != (int)k || gp->procs[p].bytes == 0)
                        continue;
                    if (best < 0 || un[p] > best_un ||
                        (un[p] == best_un && gp->procs[p].bytes > gp->procs[best].bytes)) {
                        best = (int)p;
                        best_un = un[p];
                    }
                }
                if (best < 0)
                    break;
                struct action *a = grow(acts, &cap, n + 1, sizeof(*a));
                if (a == NULL)
                    break;
                acts = a;
                a = &acts[n++];
                memset(a, 0, sizeof(*a));
                a->kill = true;
                a->pid = gp->procs[best].pid;
                a->real = d->real_bytes;
                a->limit = limit;
                snprintf(a->uid, sizeof(a->uid), "%s", c->rec.uid);
                a->done = kill_checked(m, a->pid, c->rec.uid);
                if (a->done) {
                    kp->n_kill++;
                    m->killed[m->n_killed % 16].pid = a->pid;
                    m->killed[m->n_killed % 16].at_ms = now_ms;
                    m->n_killed++;
                }
                real -= gp->procs[best].bytes;
                gp->procs[best].bytes = 0; /* not chosen twice */
                any = true;
            }
            if (!any) {
                struct action *a = grow(acts, &cap, n + 1, sizeof(*a));
                if (a == NULL)
                    continue;
                acts = a;
                a = &acts[n++];
                memset(a, 0, sizeof(*a));
                a->real = d->real_bytes;
                a->limit = limit;
                kp->n_report++;
                kp->reported = true;
            }
            /* names for the event */
            for (size_t x = n; x > 0 && acts[x - 1].ns[0] == '\0'; x--) {
                struct action *a = &acts[x - 1];
                snprintf(a->ns, sizeof(a->ns), "%s", c->rec.ns);
                snprintf(a->pod, sizeof(a->pod), "%s", c->rec.pod);
                snprintf(a->uid, sizeof(a->uid), "%s", c->rec.uid);
                snprintf(a->ctr, sizeof(a->ctr), "%s", c->rec.ctr);
                snprintf(a->uuid, sizeof(a->uuid), "%s", c->rec.dev[i].uuid);
            }
        }
    }
    *out = acts;
    return n;
}

static void post_event(struct gv_monitor *m, const struct action *a)
{
    char msg[1024], name[320];
    if (a->kill)
        snprintf(msg, sizeof(msg),
                 "container %s uses %llu MiB on GPU %s, above its limit of %llu MiB (NVML): "
                 "process %u %s",
                 a->ctr, (unsigned long long)(a->real >> 20), a->uuid,
                 (unsigned long long)(a->limit >> 20), a->pid,
                 a->done ? "killed" : "could not be killed (gone or not in this pod)");
    else
        snprintf(msg, sizeof(msg),
                 "container %s uses %llu MiB on GPU %s, above its limit of %llu MiB (NVML); "
                 "a process may bypass the interposer",
                 a->ctr, (unsigned long long)(a->real >> 20), a->uuid,
                 (unsigned long long)(a->limit >> 20));
    gv_warn("backstop: pod %s/%s: %s", a->ns, a->pod, msg);
    if (m->cfg.kube == NULL)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(name, sizeof(name), "%.200s.gv%llx", a->pod,
             (unsigned long long)now_ns(CLOCK_REALTIME));
    json_t *ev = json_pack(
        "{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s}, s:s, s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:i}",
        "apiVersion", "v1", "kind", "Event", "metadata", "name", name, "namespace", a->ns,
        "involvedObject", "apiVersion", "v1", "kind", "Pod", "namespace", a->ns, "name", a->pod,
        "uid", a->uid, "reason", a->kill ? "GPUMemoryOverLimitKilled" : "GPUMemoryOverLimit",
        "message", msg, "type", "Warning", "source", "component", "gpuvisor-node", "host",
        m->node, "firstTimestamp", when, "lastTimestamp", when, "count", 1);
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", a->ns);
    struct gv_error err;
    if (ev == NULL || gv_kube_create(m->cfg.kube, path, ev, NULL, &err) != GV_OK)
        gv_warn("backstop: event on pod %s/%s not recorded: %s", a->ns, a->pod,
                ev ? err.msg : "out of memory");
    json_decref(ev);
}

/*
 * Whether any GPU runs a process, from NVML alone (called with m->mu held).
 * Without one no container can be over its limit, so the pass ends here:
 * an idle node costs a few NVML calls per period, not a read of every
 * container's record (0.65 % of a core with 500 pods cached before,
 * bench/results/node_agent.txt).  Open episodes end as they would in a
 * full pass (every container back under its limit).
 */
static bool backstop_any_process(struct gv_monitor *m)
{
    bool any = false;
    for (unsigned i = 0; i < m->n_gpus; i++) {
        free(m->gpus[i].procs);
        m->gpus[i].procs = NULL;
        m->gpus[i].n_procs = 0;
        sample_gpu(m, &m->gpus[i]);
        any = any || m->gpus[i].n_procs > 0;
    }
    drain_xids(m);
    if (!any)
        for (size_t k = 0; k < m->n_keep; k++) {
            m->keep[k].over_since_ms = 0;
            m->keep[k].reported = false;
        }
    sample_release(m);
    return any;
}

void gv_monitor_backstop_once(struct gv_monitor *m)
{
    struct action *acts = NULL;
    size_t n = 0;
    pthread_mutex_lock(&m->mu);
    if (m->s.backstop != GV_BACKSTOP_OFF && m->nvml_ok) {
        if (backstop_any_process(m)) {
            sample(m, false); /* light: regions only where a process needs them */
            n = backstop_decide(m, &acts);
            sample_release(m);
        }
        m->backstop_passes++;
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < n; i++)
        post_event(m, &acts[i]);
    free(acts);
}

void *backstop_main(void *arg)
{
    struct gv_monitor *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->quit) {
        int64_t period = m->s.period_ms > 0 ? m->s.period_ms : 2000;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += period / 1000;
        ts.tv_nsec += (period % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        /* backstop off or no NVML: nothing to sample, sleep until settings change */
        if (m->s.backstop == GV_BACKSTOP_OFF || !m->nvml_ok) {
            pthread_cond_wait(&m->cv, &m->mu);
            continue;
        }
        while (!m->quit && pthread_cond_timedwait(&m->cv, &m->mu, &ts) != ETIMEDOUT)
            ;
        if (m->quit)
            break;
        pthread_mutex_unlock(&m->mu);
        gv_monitor_backstop_once(m);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}
