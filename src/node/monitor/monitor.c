/*
 * The monitor: container records + shared regions + NVML -> Prometheus text,
 * and the NVML enforcement backstop.  See gv_monitor.h for the sources and
 * docs/observability.md for every series.
 *
 * One mutex guards the sample and the state kept between samples (rates,
 * backstop episodes); API calls (events) are made outside it.  Regions are
 * opened read-only for the duration of one sample and closed again, so
 * the agent keeps no region pages resident between scrapes.
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

#define MON_NVML_FUNCS(X)                                                                          \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlShutdown)                                                                                \
    X(nvmlDeviceGetCount_v2)                                                                       \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetName)                                                                           \
    X(nvmlDeviceGetMemoryInfo)
/* Optional: a driver without one loses that series only. */
#define MON_NVML_OPTIONAL(X)                                                                       \
    X(nvmlDeviceGetMinorNumber)                                                                    \
    X(nvmlDeviceGetUtilizationRates)                                                               \
    X(nvmlDeviceGetTemperature)                                                                    \
    X(nvmlDeviceGetPowerUsage)                                                                     \
    X(nvmlDeviceGetClockInfo)                                                                      \
    X(nvmlDeviceGetComputeRunningProcesses_v3)                                                     \
    X(nvmlDeviceGetComputeRunningProcesses_v2)                                                     \
    X(nvmlDeviceGetProcessUtilization)                                                             \
    X(nvmlEventSetCreate)                                                                          \
    X(nvmlDeviceRegisterEvents)                                                                    \
    X(nvmlEventSetWait_v2)                                                                         \
    X(nvmlEventSetFree)

struct mon_nvml {
#define GV_X_FN(name) __typeof__(&name) name;
    MON_NVML_FUNCS(GV_X_FN)
    MON_NVML_OPTIONAL(GV_X_FN)
#undef GV_X_FN
};

#define MAX_PROCS_PER_GPU 512
/* host pids remembered per container (more processes still count, and map by cgroup) */
#define MAX_HOSTPIDS 16

struct nvproc {
    unsigned pid;
    uint64_t bytes;
    unsigned sm; /* percent, from process utilisation samples */
    int ctr;     /* index into the sample's containers, -1: not mapped */
};

struct gpu {
    nvmlDevice_t h;
    unsigned index, minor;
    char uuid[96], name[96];
    /* persistent */
    unsigned long long last_xid;
    unsigned long long util_seen; /* lastSeenTimeStamp for process samples */
    bool healthy_known, healthy;
    unsigned slices;
    char reason[128];
    /* per sample */
    bool ok, have_util, have_temp, have_power, have_clock;
    uint64_t total, used;
    unsigned util, temp, power_mw, sm_clock;
    struct nvproc *procs;
    unsigned n_procs;
};

/* What one container uses on one of its GPUs. */
struct cdev {
    int gpu;                /* index into m->gpus, -1: not on this node */
    int rdev;               /* region device index, -1: not registered yet */
    uint64_t region_used, region_managed, region_limit;
    uint64_t busy_ns;       /* throttle pool: GPU time measured so far */
    uint64_t throttled_ns;  /* throttle pool: time launches waited in the gate */
    uint64_t oom;           /* region device: allocations refused at the limit */
    int64_t tokens;
    unsigned region_util;   /* sum of slot util[] (percent) */
    uint64_t real_bytes;    /* NVML: sum over its processes */
    unsigned real_sm;       /* NVML: sum of its processes' SM percent */
    unsigned nv_procs;
    int keep;               /* index into m->keep for this sample, -1: none */
};

struct ctr {
    struct gv_monitor_record rec;
    bool region_read;       /* read_region ran this sample */
    bool region;            /* and found one */
    unsigned procs;         /* region slots in use */
    int32_t hostpids[MAX_HOSTPIDS];
    uint64_t hostpid_bytes[MAX_HOSTPIDS][GV_MONITOR_MAX_GPUS];
    unsigned n_hostpids;
    struct cdev d[GV_MONITOR_MAX_GPUS];
};

/* State kept between samples, per container and GPU. */
struct keep {
    char key[384]; /* uid/ctr/uuid */
    uint64_t busy_ns, at_ns;
    double achieved; /* ratio, -1: unknown */
    int64_t over_since_ms; /* backstop: 0 = within the limit */
    bool reported;   /* this episode got its event */
    uint64_t n_report, n_kill;
    unsigned gen;
};

/* container id -> container name, learned from processes found in regions */
struct cid_map {
    char cid[80];
    char uid[64];
    char ctr[64];
    unsigned gen;
};

struct gv_monitor {
    struct gv_monitor_config cfg;
    char *node, *state_dir, *proc_root;
    void *dl;
    struct mon_nvml f;
    bool nvml_ok;
    nvmlEventSet_t events;
    pthread_mutex_t mu;
    struct gv_metrics_settings s;
    struct gpu gpus[GV_MONITOR_MAX_GPUS];
    unsigned n_gpus;
    struct ctr *ctrs;
    size_t n_ctrs, cap_ctrs;
    struct keep *keep;
    size_t n_keep, cap_keep;
    struct cid_map *cids;
    size_t n_cids, cap_cids;
    unsigned gen;
    /* processes the backstop killed lately: the driver may list one for a
     * while as it tears it down; it is neither killed nor reported twice */
    struct {
        unsigned pid;
        int64_t at_ms;
    } killed[16];
    unsigned n_killed;
    uint64_t scrapes;
    uint64_t backstop_passes; /* passes run with the backstop on, light or not */
    double last_sample_s;
    /* backstop thread */
    pthread_t thread;
    bool running, quit;
    pthread_cond_t cv;
};

static uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(p, n * size);
    if (q != NULL)
        *cap = n;
    return q;
}

/* ---- NVML -------------------------------------------------------------------- */

static void nvml_open(struct gv_monitor *m)
{
    const char *lib = m->cfg.nvml_lib ? m->cfg.nvml_lib : "libnvidia-ml.so.1";
    m->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (m->dl == NULL) {
        gv_warn("monitor: cannot load %s (%s): no per-GPU or per-process series", lib, dlerror());
        return;
    }
#define GV_X_FN(name) *(void **)&m->f.name = dlsym(m->dl, #name);
    MON_NVML_FUNCS(GV_X_FN)
    MON_NVML_OPTIONAL(GV_X_FN)
#undef GV_X_FN
#define GV_X_FN(name) || m->f.name == NULL
    if (0 MON_NVML_FUNCS(GV_X_FN)) {
        gv_warn("monitor: %s lacks a required NVML function: no per-GPU series", lib);
        return;
    }
#undef GV_X_FN
    if (m->f.nvmlInit_v2() != NVML_SUCCESS) {
        gv_warn("monitor: nvmlInit failed: no per-GPU series");
        return;
    }
    m->nvml_ok = true;
    unsigned n = 0;
    if (m->f.nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS)
        n = 0;
    if (m->f.nvmlEventSetCreate && m->f.nvmlEventSetCreate(&m->events) != NVML_SUCCESS)
        m->events = NULL;
    for (unsigned i = 0; i < n && m->n_gpus < GV_MONITOR_MAX_GPUS; i++) {
        struct gpu *g = &m->gpus[m->n_gpus];
        if (m->f.nvmlDeviceGetHandleByIndex_v2(i, &g->h) != NVML_SUCCESS ||
            m->f.nvmlDeviceGetUUID(g->h, g->uuid, sizeof(g->uuid)) != NVML_SUCCESS)
            continue;
        if (m->f.nvmlDeviceGetName(g->h, g->name, sizeof(g->name)) != NVML_SUCCESS)
            snprintf(g->name, sizeof(g->name), "unknown");
        g->index = i;
        g->minor = i;
        if (m->f.nvmlDeviceGetMinorNumber)
            m->f.nvmlDeviceGetMinorNumber(g->h, &g->minor);
        if (m->events && m->f.nvmlDeviceRegisterEvents)
            m->f.nvmlDeviceRegisterEvents(g->h, nvmlEventTypeXidCriticalError, m->events);
        m->n_gpus++;
    }
}

static int gpu_by_uuid(const struct gv_monitor *m, const char *uuid)
{
    for (unsigned i = 0; i < m->n_gpus; i++)
        if (strcmp(m->gpus[i].uuid, uuid) == 0)
            return (int)i;
    return -1;
}

static void sample_gpu(struct gv_monitor *m, struct gpu *g)
{
    g->ok = g->have_util = g->have_temp = g->have_power = g->have_clock = false;
    g->n_procs = 0;
    nvmlMemory_t mem;
    if (m->f.nvmlDeviceGetMemoryInfo(g->h, &mem) == NVML_SUCCESS) {
        g->ok = true;
        g->total = mem.total;
        g->used = mem.used;
    }
    nvmlUtilization_t u;
    if (m->f.nvmlDeviceGetUtilizationRates && m->f.nvmlDeviceGetUtilizationRates(g->h, &u) == NVML_SUCCESS) {
        g->have_util = true;
        g->util = u.gpu;
    }
    g->have_temp = m->f.nvmlDeviceGetTemperature &&
                   m->f.nvmlDeviceGetTemperature(g->h, NVML_TEMPERATURE_GPU, &g->temp) == NVML_SUCCESS;
    g->have_power = m->f.nvmlDeviceGetPowerUsage &&
                    m->f.nvmlDeviceGetPowerUsage(g->h, &g->power_mw) == NVML_SUCCESS;
    g->have_clock = m->f.nvmlDeviceGetClockInfo &&
                    m->f.nvmlDeviceGetClockInfo(g->h, NVML_CLOCK_SM, &g->sm_clock) == NVML_SUCCESS;
    /* Processes: the size query first, then the list (it may grow in between:
     * retry once with the new size). */
    __typeof__(m->f.nvmlDeviceGetComputeRunningProcesses_v3) list =
        m->f.nvmlDeviceGetComputeRunningProcesses_v3 ? m->f.nvmlDeviceGetComputeRunningProcesses_v3
                                                      : m->f.nvmlDeviceGetComputeRunningProcesses_v2;
    if (list == NULL)
        return;
    nvmlProcessInfo_t *infos = NULL;
    unsigned n = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        unsigned cap = n;
        nvmlReturn_t r = list(g->h, &n, infos);
        if (r == NVML_SUCCESS && (infos != NULL || n == 0))
            break;
        if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE) {
            n = 0;
            break;
        }
        if (n > MAX_PROCS_PER_GPU)
            n = MAX_PROCS_PER_GPU;
        if (n <= cap && infos != NULL) {
            n = 0;
            break;
        }
        free(infos);
        infos = calloc(n + 8, sizeof(*infos));
        if (infos == NULL) {
            n = 0;
            break;
        }
        n += 8;
    }
    if (n > 0 && infos != NULL) {
        g->procs = calloc(n, sizeof(*g->procs));
        for (unsigned i = 0; g->procs && i < n; i++) {
            g->procs[i].pid = infos[i].pid;
            g->procs[i].bytes = infos[i].usedGpuMemory == (unsigned long long)-1 ? 0 : infos[i].usedGpuMemory;
            g->procs[i].ctr = -1;
        }
        g->n_procs = g->procs ? n : 0;
    }
    free(infos);
    if (g->n_procs == 0 || m->f.nvmlDeviceGetProcessUtilization == NULL)
        return;
    unsigned ns = 0;
    if (m->f.nvmlDeviceGetProcessUtilization(g->h, NULL, &ns, g->util_seen) !=
            NVML_ERROR_INSUFFICIENT_SIZE || ns == 0)
        return;
    ns += 8;
    nvmlProcessUtilizationSample_t *sm = calloc(ns, sizeof(*sm));
    if (sm && m->f.nvmlDeviceGetProcessUtilization(g->h, sm, &ns, g->util_seen) == NVML_SUCCESS) {
        for (unsigned i = 0; i < ns; i++) {
            if (sm[i].timeStamp > g->util_seen)
                g->util_seen = sm[i].timeStamp;
            for (unsigned k = 0; k < g->n_procs; k++)
                if (g->procs[k].pid == sm[i].pid)
                    g->procs[k].sm = sm[i].smUtil;
        }
    }
    free(sm);
}

static void drain_xids(struct gv_monitor *m)
{
    if (m->events == NULL || m->f.nvmlEventSetWait_v2 == NULL)
        return;
    nvmlEventData_t ev;
    for (int i = 0; i < 256 && m->f.nvmlEventSetWait_v2(m->events, &ev, 0) == NVML_SUCCESS; i++) {
        if (!(ev.eventType & nvmlEventTypeXidCriticalError))
            continue;
        for (unsigned k = 0; k < m->n_gpus; k++)
            if (m->gpus[k].h == ev.device)
                m->gpus[k].last_xid = ev.eventData;
    }
}

/* ---- cgroups ------------------------------------------------------------------ */

/* Copies a pod uid found after "pod" in s (dashes or the systemd driver's
 * underscores), normalised to dashes. */
static bool take_uid(const char *s, char *uid, size_t cap)
{
    size_t n = 0;
    for (; s[n] && n < 36; n++) {
        char c = s[n];
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        bool sep = n == 8 || n == 13 || n == 18 || n == 23;
        if (sep ? (c != '-' && c != '_') : !hex)
            return false;
    }
    if (n != 36 || cap < 37)
        return false;
    for (size_t i = 0; i < 36; i++)
        uid[i] = s[i] == '_' ? '-' : s[i];
    uid[36] = '\0';
    return true;
}

bool gv_monitor_parse_cgroup(const char *text, char *uid, size_t uid_cap, char *cid,
                             size_t cid_cap)
{
    bool found = false;
    if (cid_cap)
        cid[0] = '\0';
    const char *line = text;
    while (line && *line && !found) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[1024];
        if (len < sizeof(buf)) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            /* hierarchy-ID:controllers:path; the path is after the 2nd colon */
            char *path = strchr(buf, ':');
            path = path ? strchr(path + 1, ':') : NULL;
            if (path && strstr(path, "kubepods")) {
                char *p = path;
                while ((p = strstr(p, "pod")) != NULL) {
                    if (take_uid(p + 3, uid, uid_cap)) {
                        found = true;
                        break;
                    }
                    p += 3;
                }
                if (found) {
                    /* the container: last component, minus a runtime prefix and ".scope" */
                    char *last = strrchr(path, '/');
                    last = last ? last + 1 : path;
                    char *dash = strrchr(last, '-');
                    char *id = strstr(last, "pod") == last ? NULL : (dash ? dash + 1 : last);
                    if (id) {
                        char *dot = strstr(id, ".scope");
                        if (dot)
                            *dot = '\0';
                        size_t l = strlen(id);
                        bool hex = l >= 12;
                        for (size_t i = 0; i < l && hex; i++)
                            hex = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
                        if (hex && l < cid_cap)
                            snprintf(cid, cid_cap, "%s", id);
                    }
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return found;
}

static bool pid_cgroup(const struct gv_monitor *m, unsigned pid, char *uid, char *cid)
{
    char path[4200], *text = NULL;
    size_t len;
    snprintf(path, sizeof(path), "%s/%u/cgroup", m->proc_root, pid);
    if (gv_file_read_all(path, &text, &len, NULL) != GV_OK)
        return false;
    bool ok = gv_monitor_parse_cgroup(text, uid, 64, cid, 80);
    free(text);
    return ok;
}

static void learn_cid(struct gv_monitor *m, const char *cid, const struct ctr *c)
{
    if (cid[0] == '\0')
        return;
    for (size_t i = 0; i < m->n_cids; i++)
        if (strcmp(m->cids[i].cid, cid) == 0) {
            m->cids[i].gen = m->gen;
            return;
        }
    struct cid_map *p = grow(m->cids, &m->cap_cids, m->n_cids + 1, sizeof(*p));
    if (p == NULL)
        return;
    m->cids = p;
    struct cid_map *e = &m->cids[m->n_cids++];
    snprintf(e->cid, sizeof(e->cid), "%s", cid);
    snprintf(e->uid, sizeof(e->uid), "%s", c->rec.uid);
    snprintf(e->ctr, sizeof(e->ctr), "%s", c->rec.ctr);
    e->gen = m->gen;
}

/* ---- containers: records and regions -------------------------------------------- */

static void read_region(struct gv_monitor *m, struct ctr *c)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/containers/%s/%s/shared.cache", m->state_dir, c->rec.uid,
             c->rec.ctr);
    struct gv_shm *shm = NULL;
    struct gv_error err;
    if (gv_shm_open(path, GV_SHM_READONLY, &shm, &err) != GV_OK) {
        if (err.code != GV_ENOTFOUND && err.code != GV_EUNAVAILABLE)
            gv_debug("monitor: %s", err.msg);
        return;
    }
    const struct gv_shm_region *r = gv_shm_region(shm);
    const struct gv_throttle_pool *pools = (const struct gv_throttle_pool *)(const void *)r->sched;
    c->region = true;
    for (unsigned i = 0; i < c->rec.n_dev; i++) {
        struct cdev *d = &c->d[i];
        d->rdev = gv_shm_device_find(shm, c->rec.dev[i].uuid);
        if (d->rdev < 0)
            continue;
        const struct gv_shm_device *rd = &r->devices[d->rdev];
        d->region_used = atomic_load(&((struct gv_shm_device *)rd)->mem_used);
        d->region_managed = atomic_load(&((struct gv_shm_device *)rd)->mem_managed);
        d->region_limit = rd->mem_limit;
        d->oom = atomic_load(&((struct gv_shm_device *)rd)->oom_count);
        if ((size_t)d->rdev < GV_SHM_SCHED_REGION_BYTES / sizeof(struct gv_throttle_pool)) {
            struct gv_throttle_pool *pl = (struct gv_throttle_pool *)&pools[d->rdev];
            d->busy_ns = atomic_load(&pl->busy_ns);
            d->tokens = atomic_load(&pl->tokens);
            d->throttled_ns = atomic_load(&pl->throttled_ns);
        }
    }
    for (int s = 0; s < GV_SHM_MAX_PROCS; s++) {
        struct gv_shm_proc *p = (struct gv_shm_proc *)&r->procs[s];
        if (atomic_load(&p->pid) == 0)
            continue;
        c->procs++;
        if (p->hostpid > 0 && c->n_hostpids < MAX_HOSTPIDS) {
            unsigned k = c->n_hostpids++;
            c->hostpids[k] = p->hostpid;
            for (unsigned i = 0; i < c->rec.n_dev; i++)
                c->hostpid_bytes[k][i] =
                    c->d[i].rdev >= 0 ? atomic_load(&p->mem_used[c->d[i].rdev]) : 0;
        }
        for (unsigned i = 0; i < c->rec.n_dev; i++)
            if (c->d[i].rdev >= 0)
                c->d[i].region_util += atomic_load(&p->util[c->d[i].rdev]);
    }
    gv_shm_close(shm);
}

/* Reads a container's region once per sample, when first needed. */
static void ensure_region(struct gv_monitor *m, struct ctr *c)
{
    if (!c->region_read) {
        c->region_read = true;
        read_region(m, c);
    }
}

static void load_containers(struct gv_monitor *m, bool regions)
{
    m->n_ctrs = 0;
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/containers", m->state_dir);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4500];
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        DIR *pd = opendir(sub);
        if (pd == NULL)
            continue;
        struct dirent *f;
        while ((f = readdir(pd)) != NULL) {
            size_t l = strlen(f->d_name);
            if (strncmp(f->d_name, GV_MONITOR_RECORD_PREFIX, strlen(GV_MONITOR_RECORD_PREFIX)) != 0 ||
                l < 5 || strcmp(f->d_name + l - 5, ".json") != 0)
                continue;
            char path[4800], *text = NULL;
            size_t len;
            snprintf(path, sizeof(path), "%s/%s", sub, f->d_name);
            if (gv_file_read_all(path, &text, &len, NULL) != GV_OK)
                continue;
            struct ctr *cs = grow(m->ctrs, &m->cap_ctrs, m->n_ctrs + 1, sizeof(*cs));
            if (cs == NULL) {
                free(text);
                continue;
            }
            m->ctrs = cs;
            struct ctr *c = &m->ctrs[m->n_ctrs];
            memset(c, 0, sizeof(*c));
            struct gv_error err;
            /* the record must describe the directory it is in */
            if (gv_monitor_record_parse(text, len, &c->rec, &err) == GV_OK &&
                strcmp(c->rec.uid, e->d_name) == 0) {
                for (unsigned i = 0; i < c->rec.n_dev; i++) {
                    c->d[i].gpu = gpu_by_uuid(m, c->rec.dev[i].uuid);
                    c->d[i].rdev = -1;
                    c->d[i].keep = -1;
                }
                if (regions)
                    ensure_region(m, c);
                m->n_ctrs++;
            } else {
                gv_debug("monitor: %s: ignored (%s)", path, err.msg);
            }
            free(text);
        }
        closedir(pd);
    }
    closedir(d);
}

static int ctr_dev(const struct ctr *c, int gpu)
{
    for (unsigned i = 0; i < c->rec.n_dev; i++)
        if (c->d[i].gpu == gpu)
            return (int)i;
    return -1;
}

/* Which container (index) runs NVML process pid on GPU gi; -1 when none. */
/* Container k's region names host pid pid. */
static bool claims(struct gv_monitor *m, size_t k, unsigned pid)
{
    ensure_region(m, &m->ctrs[k]);
    for (unsigned h = 0; h < m->ctrs[k].n_hostpids; h++)
        if ((unsigned)m->ctrs[k].hostpids[h] == pid)
            return true;
    return false;
}

/*
 * Which container (index) runs NVML process pid on GPU gi; -1 when none.
 * The cgroup names the pod; a pod with one container on that GPU settles
 * it without reading any region (the backstop's light samples).  Otherwise
 * the container id learned earlier, else the host pids the container's
 * processes wrote into their region.  A host pid in a region is the
 * tenant's word (the region is writable from the container): it counts
 * only among the containers of the process's own pod, or for a process
 * whose cgroup names no pod at all (no Kubernetes, tests).
 */
static int map_process(struct gv_monitor *m, unsigned pid, int gi)
{
    char uid[64], cid[80];
    if (!pid_cgroup(m, pid, uid, cid)) {
        for (size_t k = 0; k < m->n_ctrs; k++)
            if (ctr_dev(&m->ctrs[k], gi) >= 0 && claims(m, k, pid))
                return (int)k;
        return -1;
    }
    int only = -1, n = 0;
    for (size_t k = 0; k < m->n_ctrs; k++)
        if (strcmp(m->ctrs[k].rec.uid, uid) == 0 && ctr_dev(&m->ctrs[k], gi) >= 0) {
            only = (int)k;
            n++;
        }
    if (n <= 1)
        return only;
    for (size_t i = 0; cid[0] && i < m->n_cids; i++)
        if (strcmp(m->cids[i].cid, cid) == 0 && strcmp(m->cids[i].uid, uid) == 0)
            for (size_t k = 0; k < m->n_ctrs; k++)
                if (strcmp(m->ctrs[k].rec.uid, uid) == 0 &&
                    strcmp(m->ctrs[k].rec.ctr, m->cids[i].ctr) == 0) {
                    m->cids[i].gen = m->gen;
                    return (int)k;
                }
    for (size_t k = 0; k < m->n_ctrs; k++)
        if (strcmp(m->ctrs[k].rec.uid, uid) == 0 && ctr_dev(&m->ctrs[k], gi) >= 0 &&
            claims(m, k, pid)) {
            learn_cid(m, cid, &m->ctrs[k]);
            return (int)k;
        }
    return -1;
}

static struct keep *keep_get(struct gv_monitor *m, const struct ctr *c, unsigned i)
{
    char key[384];
    snprintf(key, sizeof(key), "%s/%s/%s", c->rec.uid, c->rec.ctr, c->rec.dev[i].uuid);
    for (size_t k = 0; k < m->n_keep; k++)
        if (strcmp(m->keep[k].key, key) == 0) {
            m->keep[k].gen = m->gen;
            return &m->keep[k];
        }
    struct keep *p = grow(m->keep, &m->cap_keep, m->n_keep + 1, sizeof(*p));
    if (p == NULL)
        return NULL;
    m->keep = p;
    struct keep *e = &m->keep[m->n_keep++];
    memset(e, 0, sizeof(*e));
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->achieved = -1;
    e->gen = m->gen;
    return e;
}

/*
 * Drops what one sample holds (called with m->mu held): ~3 KiB per
 * container, so between scrapes the agent keeps only the small state of
 * struct keep (the 5 MiB idle budget, docs/node-agent.md).
 */
static void sample_release(struct gv_monitor *m)
{
    for (unsigned i = 0; i < m->n_gpus; i++) {
        free(m->gpus[i].procs);
        m->gpus[i].procs = NULL;
        m->gpus[i].n_procs = 0;
    }
    free(m->ctrs);
    m->ctrs = NULL;
    m->n_ctrs = m->cap_ctrs = 0;
}

/* Takes a full sample into m (called with m->mu held). */
static void sample(struct gv_monitor *m, bool regions)
{
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    m->gen++;
    for (unsigned i = 0; i < m->n_gpus; i++) {
        free(m->gpus[i].procs);
        m->gpus[i].procs = NULL;
        m->gpus[i].n_procs = 0;
        if (m->nvml_ok)
            sample_gpu(m, &m->gpus[i]);
    }
    if (m->nvml_ok)
        drain_xids(m);
    load_containers(m, regions);
    for (unsigned g = 0; g < m->n_gpus; g++) {
        struct gpu *gp = &m->gpus[g];
        for (unsigned p = 0; p < gp->n_procs; p++) {
            int k = map_process(m, gp->procs[p].pid, (int)g);
            int i = k >= 0 ? ctr_dev(&m->ctrs[k], (int)g) : -1;
            if (i < 0)
                continue;
            gp->procs[p].ctr = k;
            m->ctrs[k].d[i].real_bytes += gp->procs[p].bytes;
            m->ctrs[k].d[i].real_sm += gp->procs[p].sm;
            m->ctrs[k].d[i].nv_procs++;
        }
    }
    /* forget containers and container ids gone for good (before
     * indexes into m->keep are handed out for this sample) */
    size_t w = 0;
    for (size_t k = 0; k < m->n_keep; k++)
        if (m->gen - m->keep[k].gen < 100)
            m->keep[w++] = m->keep[k];
    m->n_keep = w;
    w = 0;
    for (size_t k = 0; k < m->n_cids; k++)
        if (m->gen - m->cids[k].gen < 100)
            m->cids[w++] = m->cids[k];
    m->n_cids = w;
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    for (size_t k = 0; k < m->n_ctrs; k++) {
        struct ctr *c = &m->ctrs[k];
        for (unsigned i = 0; i < c->rec.n_dev; i++) {
            struct keep *kp = keep_get(m, c, i);
            c->d[i].keep = kp ? (int)(kp - m->keep) : -1;
            if (kp == NULL || !c->region_read || c->d[i].rdev < 0)
                continue;
            /* achieved share: GPU time the throttle measured per wall time, over
             * at least a second (closer scrapes keep the last figure) */
            if (kp->at_ns != 0 && c->d[i].busy_ns >= kp->busy_ns && now - kp->at_ns >= 1000000000ull) {
                kp->achieved = (double)(c->d[i].busy_ns - kp->busy_ns) / (double)(now - kp->at_ns);
                kp->busy_ns = c->d[i].busy_ns;
                kp->at_ns = now;
            } else if (kp->at_ns == 0 || c->d[i].busy_ns < kp->busy_ns) {
                kp->busy_ns = c->d[i].busy_ns;
                kp->at_ns = now;
            }
        }
    }
    m->last_sample_s = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
}

/* ---- exposition --------------------------------------------------------------- */

struct out {
    struct gv_buf *b;
    bool failed;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    char tmp[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp) || gv_buf_append(o->b, tmp, (size_t)n) != GV_OK)
        o->failed = true;
}

/* Label value escaped per the text format (backslash, quote, newline). */
static const char *esc(const char *s, char *buf, size_t cap)
{
    size_t j = 0;
    for (; *s && j + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            buf[j++] = '\\';
            buf[j++] = *s;
        } else if (*s == '\n') {
            buf[j++] = '\\';
            buf[j++] = 'n';
        } else {
            buf[j++] = *s;
        }
    }
    buf[j] = '\0';
    return buf;
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* node, namespace, pod, container, uuid */
static void ctr_labels(const struct gv_monitor *m, const struct ctr *c, int i, char *buf, size_t cap)
{
    char a[300], b[600], d[600], e[600], f[200];
    int n = snprintf(buf, cap, "node=\"%s\",namespace=\"%s\",pod=\"%s\",container=\"%s\"",
                     esc(m->node, a, sizeof(a)), esc(c->rec.ns, b, sizeof(b)),
                     esc(c->rec.pod, d, sizeof(d)), esc(c->rec.ctr, e, sizeof(e)));
    if (i >= 0 && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ",uuid=\"%s\"", esc(c->rec.dev[i].uuid, f, sizeof(f)));
}

typedef bool (*cdev_value)(const struct gv_monitor *m, const struct ctr *c, unsigned i, double *v);

static void per_cdev(struct out *o, const struct gv_monitor *m, const char *name, const char *type,
                     const char *help, cdev_value fn)
{
    family(o, name, type, help);
    for (size_t k = 0; k < m->n_ctrs; k++) {
        const struct ctr *c = &m->ctrs[k];
        for (unsigned i = 0; i < c->rec.n_dev; i++) {
            double v;
            if (!fn(m, c, i, &v))
                continue;
            char l[2400];
            ctr_labels(m, c, (int)i, l, sizeof(l));
            put(o, "%s{%s} %.17g\n", name, l, v);
        }
    }
}

static const struct keep *keep_find(const struct gv_monitor *m, const struct ctr *c, unsigned i)
{
    return c->d[i].keep >= 0 ? &m->keep[c->d[i].keep] : NULL;
}

#define CDEV_FN(fname, cond, expr)                                                                 \
    static bool fname(const struct gv_monitor *m, const struct ctr *c, unsigned i, double *v)      \
    {                                                                                              \
        (void)m;                                                                                   \
        const struct cdev *d = &c->d[i];                                                           \
        (void)d;                                                                                   \
        if (!(cond))                                                                               \
            return false;                                                                          \
        *v = (double)(expr);                                                                       \
        return true;                                                                               \
    }
CDEV_FN(v_mem_limit, c->rec.limited && c->rec.dev[i].mem_limit > 0, c->rec.dev[i].mem_limit)
CDEV_FN(v_mem_used, true, d->region_used)
CDEV_FN(v_mem_managed, d->rdev >= 0, d->region_managed)
CDEV_FN(v_mem_real, m->nvml_ok && d->gpu >= 0, d->real_bytes)
CDEV_FN(v_share_limit, true,
        c->rec.limited && c->rec.dev[i].cores ? c->rec.dev[i].cores / 100.0 : 1.0)
CDEV_FN(v_sm_util, m->nvml_ok && d->gpu >= 0, d->real_sm / 100.0)
CDEV_FN(v_region_util, d->rdev >= 0, d->region_util / 100.0)
CDEV_FN(v_debt, d->rdev >= 0, d->tokens < 0 ? (double)-d->tokens / 1e9 : 0.0)
CDEV_FN(v_throttled, d->rdev >= 0, d->throttled_ns / 1e9)
CDEV_FN(v_oom, d->rdev >= 0, d->oom)
CDEV_FN(v_nv_procs, m->nvml_ok && d->gpu >= 0, d->nv_procs)
CDEV_FN(v_over, m->nvml_ok && d->gpu >= 0 && c->rec.limited && c->rec.dev[i].mem_limit > 0,
        d->real_bytes > c->rec.dev[i].mem_limit + m->s.margin_bytes)

static bool v_achieved(const struct gv_monitor *m, const struct ctr *c, unsigned i, double *v)
{
    const struct keep *kp = keep_find(m, c, i);
    if (kp == NULL || kp->achieved < 0)
        return false;
    *v = kp->achieved;
    return true;
}

static bool v_busy(const struct gv_monitor *m, const struct ctr *c, unsigned i, double *v)
{
    (void)m;
    if (c->d[i].rdev < 0)
        return false;
    *v = (double)c->d[i].busy_ns / 1e9;
    return true;
}

/* The per-container-and-GPU families: one table, one loop. */
static const struct {
    const char *name, *type, *help;
    cdev_value fn;
} cdev_families[] = {
    {"gpuvisor_container_gpu_memory_limit_bytes", "gauge",
     "Memory the container may use on the GPU (from its assignment at Allocate).", v_mem_limit},
    {"gpuvisor_container_gpu_memory_used_bytes", "gauge",
     "Memory charged in the container's shared region on every allocation path (0 before the first CUDA call).",
     v_mem_used},
    {"gpuvisor_container_gpu_memory_managed_bytes", "gauge",
     "Of the memory used, bytes served as managed memory (oversubscription).", v_mem_managed},
    {"gpuvisor_container_gpu_memory_nvml_bytes", "gauge",
     "Memory NVML reports for the container's processes (mapped by host pid and cgroup).", v_mem_real},
    {"gpuvisor_container_gpu_compute_share_limit_ratio", "gauge",
     "Compute share the container is given (1 = unlimited).", v_share_limit},
    {"gpuvisor_container_gpu_compute_share_achieved_ratio", "gauge",
     "GPU time the throttle measured per wall time since the previous sample.", v_achieved},
    {"gpuvisor_container_gpu_busy_seconds_total", "counter",
     "GPU time the throttle measured for the container's kernels.", v_busy},
    {"gpuvisor_container_gpu_region_utilization_ratio", "gauge",
     "Sum of the utilisation each of the container's processes publishes in its region slot.",
     v_region_util},
    {"gpuvisor_container_gpu_sm_utilization_ratio", "gauge",
     "SM utilisation NVML attributes to the container's processes.", v_sm_util},
    {"gpuvisor_container_gpu_throttle_debt_seconds", "gauge",
     "GPU time the container is in debt to its share: it waits this long before its next launch.",
     v_debt},
    {"gpuvisor_container_gpu_throttled_seconds_total", "counter",
     "Time the container's launches waited in the throttle for its share or a higher priority.",
     v_throttled},
    {"gpuvisor_container_gpu_oom_total", "counter",
     "Allocations the interposer refused because the container's memory limit would be passed.",
     v_oom},
    {"gpuvisor_container_gpu_nvml_processes", "gauge",
     "Processes NVML lists on the GPU for the container.", v_nv_procs},
    {"gpuvisor_backstop_over_limit", "gauge",
     "1 while NVML shows the container above its memory limit (plus margin).", v_over},
};

static void render_containers(struct out *o, const struct gv_monitor *m)
{
    for (size_t f = 0; f < sizeof(cdev_families) / sizeof(cdev_families[0]); f++)
        per_cdev(o, m, cdev_families[f].name, cdev_families[f].type, cdev_families[f].help,
                 cdev_families[f].fn);
    family(o, "gpuvisor_backstop_actions_total", "counter",
           "Backstop actions on the container: report (event) or kill (a process SIGKILLed).");
    for (size_t k = 0; k < m->n_ctrs; k++) {
        const struct ctr *c = &m->ctrs[k];
        for (unsigned i = 0; i < c->rec.n_dev; i++) {
            const struct keep *kp = keep_find(m, c, i);
            char l[2400];
            ctr_labels(m, c, (int)i, l, sizeof(l));
            put(o, "gpuvisor_backstop_actions_total{%s,action=\"report\"} %llu\n", l,
                (unsigned long long)(kp ? kp->n_report : 0));
            put(o, "gpuvisor_backstop_actions_total{%s,action=\"kill\"} %llu\n", l,
                (unsigned long long)(kp ? kp->n_kill : 0));
        }
    }
    family(o, "gpuvisor_container_processes", "gauge",
           "Processes registered in the container's shared region.");
    for (size_t k = 0; k < m->n_ctrs; k++) {
        char l[2400];
        ctr_labels(m, &m->ctrs[k], -1, l, sizeof(l));
        put(o, "gpuvisor_container_processes{%s} %u\n", l, m->ctrs[k].procs);
    }
    family(o, "gpuvisor_container_priority", "gauge",
           "CUDA_TASK_PRIORITY of the container (0 = highest); absent when none is set.");
    for (size_t k = 0; k < m->n_ctrs; k++) {
        if (m->ctrs[k].rec.priority < 0)
            continue;
        char l[2400];
        ctr_labels(m, &m->ctrs[k], -1, l, sizeof(l));
        put(o, "gpuvisor_container_priority{%s} %d\n", l, m->ctrs[k].rec.priority);
    }
    family(o, "gpuvisor_container_region_present", "gauge",
           "1 once a process of the container created its shared region (first CUDA call).");
    for (size_t k = 0; k < m->n_ctrs; k++) {
        char l[2400];
        ctr_labels(m, &m->ctrs[k], -1, l, sizeof(l));
        put(o, "gpuvisor_container_region_present{%s,limited=\"%s\"} %d\n", l,
            m->ctrs[k].rec.limited ? "true" : "false", m->ctrs[k].region ? 1 : 0);
    }
}

/* The one container holding GPU g, or NULL (none, or shared). */
static const struct ctr *sole_owner(const struct gv_monitor *m, int g)
{
    const struct ctr *owner = NULL;
    for (size_t k = 0; k < m->n_ctrs; k++)
        if (ctr_dev(&m->ctrs[k], g) >= 0) {
            if (owner)
                return NULL;
            owner = &m->ctrs[k];
        }
    return owner;
}

static void render_gpus(struct out *o, const struct gv_monitor *m)
{
    char node[300];
    esc(m->node, node, sizeof(node));
    family(o, "gpuvisor_gpu_healthy", "gauge", "1 when the agent counts the GPU healthy.");
    for (unsigned g = 0; g < m->n_gpus; g++) {
        const struct gpu *gp = &m->gpus[g];
        char r[300];
        put(o, "gpuvisor_gpu_healthy{node=\"%s\",gpu=\"%u\",uuid=\"%s\",reason=\"%s\"} %d\n", node,
            gp->index, gp->uuid, esc(gp->reason, r, sizeof(r)),
            gp->healthy_known ? gp->healthy : gp->ok);
    }
    family(o, "gpuvisor_gpu_slices", "gauge", "Devices (slices) the node advertises for the GPU.");
    for (unsigned g = 0; g < m->n_gpus; g++)
        put(o, "gpuvisor_gpu_slices{node=\"%s\",gpu=\"%u\",uuid=\"%s\"} %u\n", node,
            m->gpus[g].index, m->gpus[g].uuid, m->gpus[g].slices);
    static const char *const fam[][2] = {
        {"gpuvisor_gpu_slices_in_use", "Containers served on the GPU."},
        {"gpuvisor_gpu_memory_allocated_bytes",
         "Sum of the memory limits of the containers served on the GPU."},
        {"gpuvisor_gpu_unattributed_memory_bytes",
         "Memory NVML reports for processes on the GPU that belong to no served container."},
    };
    for (int f = 0; f < 3; f++) {
        if (f == 2 && !m->nvml_ok)
            break;
        family(o, fam[f][0], "gauge", fam[f][1]);
        for (unsigned g = 0; g < m->n_gpus; g++) {
            uint64_t v = 0;
            for (size_t k = 0; f < 2 && k < m->n_ctrs; k++) {
                int i = ctr_dev(&m->ctrs[k], (int)g);
                if (i >= 0)
                    v += f == 0 ? 1 : m->ctrs[k].rec.dev[i].mem_limit;
            }
            for (unsigned p = 0; f == 2 && p < m->gpus[g].n_procs; p++)
                if (m->gpus[g].procs[p].ctr < 0)
                    v += m->gpus[g].procs[p].bytes;
            put(o, "%s{node=\"%s\",gpu=\"%u\",uuid=\"%s\"} %llu\n", fam[f][0], node,
                m->gpus[g].index, m->gpus[g].uuid, (unsigned long long)v);
        }
    }
    if (!m->nvml_ok)
        return;
    if (m->s.dcgm_names) {
        /* dcgm-exporter's names, units and labels (docs/observability.md) */
        static const struct {
            const char *name, *help;
        } fields[] = {
            {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
            {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
            {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."},
            {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."},
            {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."},
            {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."},
            {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."},
        };
        for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
            family(o, fields[f].name, "gauge", fields[f].help);
            for (unsigned g = 0; g < m->n_gpus; g++) {
                const struct gpu *gp = &m->gpus[g];
                double v;
                bool have = true;
                switch (f) {
                case 0: have = gp->have_util; v = gp->util; break;
                case 1: have = gp->ok; v = (double)(gp->used >> 20); break;
                case 2: have = gp->ok; v = (double)((gp->total - (gp->used < gp->total ? gp->used : gp->total)) >> 20); break;
                case 3: have = gp->have_temp; v = gp->temp; break;
                case 4: have = gp->have_power; v = gp->power_mw / 1000.0; break;
                case 5: have = gp->have_clock; v = gp->sm_clock; break;
                default: v = (double)gp->last_xid; break;
                }
                if (!have)
                    continue;
                char model[300], extra[2400] = "";
                const struct ctr *own = sole_owner(m, (int)g);
                if (own) {
                    char a[600], b[600], c[600];
                    snprintf(extra, sizeof(extra), ",pod=\"%s\",namespace=\"%s\",container=\"%s\"",
                             esc(own->rec.pod, a, sizeof(a)), esc(own->rec.ns, b, sizeof(b)),
                             esc(own->rec.ctr, c, sizeof(c)));
                }
                put(o, "%s{gpu=\"%u\",UUID=\"%s\",device=\"nvidia%u\",modelName=\"%s\",Hostname=\"%s\"%s} %.17g\n",
                    fields[f].name, gp->index, gp->uuid, gp->minor,
                    esc(gp->name, model, sizeof(model)), node, extra, v);
            }
        }
    }
    if (m->s.hami_names) {
        /* HAMi's vGPUmonitor names and labels; its registry adds zone="vGPU" */
        for (int f = 0; f < 2; f++) {
            const char *name = f == 0 ? "hami_host_gpu_memory_used_bytes" : "hami_host_gpu_utilization_ratio";
            family(o, name, "gauge",
                   f == 0 ? "GPU device memory usage in bytes" : "GPU core utilization ratio (0-100)");
            for (unsigned g = 0; g < m->n_gpus; g++) {
                const struct gpu *gp = &m->gpus[g];
                char model[300];
                if (f == 0 ? !gp->ok : !gp->have_util)
                    continue;
                put(o, "%s{node=\"%s\",device_index=\"%u\",device_uuid=\"%s\",device_type=\"NVIDIA-%s\",zone=\"vGPU\"} %llu\n",
                    name, node, gp->index, gp->uuid, esc(gp->name, model, sizeof(model)),
                    f == 0 ? (unsigned long long)gp->used : (unsigned long long)gp->util);
            }
        }
        /* the last two: HAMi's exporter has no such counters; same prefix and
         * labels, so they join its series on dashboards (docs/observability.md) */
        static const char *const hn[] = {"hami_vgpu_memory_used_bytes", "hami_vgpu_memory_limit_bytes",
                                         "hami_container_device_utilization_ratio",
                                         "hami_vgpu_throttled_seconds_total", "hami_vgpu_oom_total"};
        static const char *const hh[] = {"vGPU device memory usage in bytes",
                                         "vGPU device memory limit in bytes",
                                         "Container device SM utilization ratio",
                                         "Time the container's launches waited for their share",
                                         "Allocations refused at the vGPU memory limit"};
        for (int f = 0; f < 5; f++) {
            family(o, hn[f], f < 3 ? "gauge" : "counter", hh[f]);
            for (size_t k = 0; k < m->n_ctrs; k++) {
                const struct ctr *c = &m->ctrs[k];
                for (unsigned i = 0; i < c->rec.n_dev; i++) {
                    double v = f == 0   ? (double)c->d[i].region_used
                               : f == 1 ? (double)(c->rec.limited ? c->rec.dev[i].mem_limit : 0)
                               : f == 2 ? (double)c->d[i].real_sm
                               : f == 3 ? (double)c->d[i].throttled_ns / 1e9
                                        : (double)c->d[i].oom;
                    char a[600], b[600], d[600], u[64];
                    /* HAMi cuts the uuid to its first 40 characters */
                    snprintf(u, sizeof(u), "%.40s", c->rec.dev[i].uuid);
                    put(o, "%s{namespace=\"%s\",pod=\"%s\",container=\"%s\",vdevice_index=\"%u\",device_uuid=\"%s\",zone=\"vGPU\"} %.17g\n",
                        hn[f], esc(c->rec.ns, a, sizeof(a)), esc(c->rec.pod, b, sizeof(b)),
                        esc(c->rec.ctr, d, sizeof(d)), i, u, v);
                }
            }
        }
    }
}

gv_status gv_monitor_render(struct gv_monitor *m, struct gv_buf *b, struct gv_error *err)
{
    struct out o = {.b = b};
    pthread_mutex_lock(&m->mu);
    sample(m, true);
    m->scrapes++;
    render_containers(&o, m);
    render_gpus(&o, m);
    family(&o, "gpuvisor_node_monitor_containers", "gauge", "Containers with a record on this node.");
    put(&o, "gpuvisor_node_monitor_containers %zu\n", m->n_ctrs);
    family(&o, "gpuvisor_node_monitor_sample_seconds", "gauge", "Time the last sample took.");
    put(&o, "gpuvisor_node_monitor_sample_seconds %.9f\n", m->last_sample_s);
    family(&o, "gpuvisor_node_monitor_scrapes_total", "counter", "Scrapes of /metrics served.");
    put(&o, "gpuvisor_node_monitor_scrapes_total %llu\n", (unsigned long long)m->scrapes);
    family(&o, "gpuvisor_backstop_passes_total", "counter",
           "Backstop passes run (0 while the backstop is off or NVML is missing).");
    put(&o, "gpuvisor_backstop_passes_total %llu\n", (unsigned long long)m->backstop_passes);
    sample_release(m);
    pthread_mutex_unlock(&m->mu);
    if (o.failed)
        return gv_error_set(err, GV_ENOMEM, "metrics: exposition does not fit");
    return GV_OK;
}

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
            if (m->s.backstop == GV_BACKSTOP_KILL)
                ensure_region(m, c); /* what each process has charged there */
            while (m->s.backstop == GV_BACKSTOP_KILL && real > limit + m->s.margin_bytes) {
                int best = -1;
                uint64_t best_un = 0;
                for (unsigned p = 0; p < gp->n_procs; p++) {
                    if (gp->procs[p].ctr != (int)k || gp->procs[p].bytes == 0)
                        continue;
                    uint64_t charged = 0;
                    for (unsigned h = 0; h < c->n_hostpids; h++)
                        if ((unsigned)c->hostpids[h] == gp->procs[p].pid)
                            charged = c->hostpid_bytes[h][i];
                    uint64_t un = gp->procs[p].bytes > charged ? gp->procs[p].bytes - charged : 0;
                    if (best < 0 || un > best_un ||
                        (un == best_un && gp->procs[p].bytes > gp->procs[best].bytes)) {
                        best = (int)p;
                        best_un = un;
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

static void *backstop_main(void *arg)
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

/* ---- lifecycle ---------------------------------------------------------------------- */

gv_status gv_monitor_new(const struct gv_monitor_config *cfg, struct gv_monitor **out,
                         struct gv_error *err)
{
    struct gv_monitor *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return gv_error_set(err, GV_ENOMEM, "monitor: out of memory");
    m->cfg = *cfg;
    m->node = strdup(cfg->node ? cfg->node : "");
    m->state_dir = strdup(cfg->state_dir);
    m->proc_root = strdup(cfg->proc_root ? cfg->proc_root : "/proc");
    m->s = cfg->settings;
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!m->node || !m->state_dir || !m->proc_root) {
        gv_monitor_free(m);
        return gv_error_set(err, GV_ENOMEM, "monitor: out of memory");
    }
    nvml_open(m);
    *out = m;
    return GV_OK;
}

gv_status gv_monitor_start(struct gv_monitor *m, struct gv_error *err)
{
    if (m->running)
        return GV_OK;
    int rc = pthread_create(&m->thread, NULL, backstop_main, m);
    if (rc != 0)
        return gv_error_set(err, GV_EIO, "monitor: cannot start the backstop thread: %s",
                            strerror(rc));
    m->running = true;
    return GV_OK;
}

void gv_monitor_set_settings(struct gv_monitor *m, const struct gv_metrics_settings *s)
{
    pthread_mutex_lock(&m->mu);
    char listen[sizeof(m->s.listen)];
    memcpy(listen, m->s.listen, sizeof(listen));
    m->s = *s;
    memcpy(m->s.listen, listen, sizeof(listen));
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void gv_monitor_set_gpu_info(struct gv_monitor *m, const char *uuid, bool healthy, unsigned slices,
                             const char *reason)
{
    pthread_mutex_lock(&m->mu);
    int g = gpu_by_uuid(m, uuid);
    if (g >= 0) {
        m->gpus[g].healthy_known = true;
        m->gpus[g].healthy = healthy;
        m->gpus[g].slices = slices;
        snprintf(m->gpus[g].reason, sizeof(m->gpus[g].reason), "%s", reason ? reason : "");
    }
    pthread_mutex_unlock(&m->mu);
}

void gv_monitor_free(struct gv_monitor *m)
{
    if (m == NULL)
        return;
    if (m->running) {
        pthread_mutex_lock(&m->mu);
        m->quit = true;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    for (unsigned i = 0; i < m->n_gpus; i++)
        free(m->gpus[i].procs);
    if (m->events && m->f.nvmlEventSetFree)
        m->f.nvmlEventSetFree(m->events);
    if (m->nvml_ok)
        m->f.nvmlShutdown();
    if (m->dl)
        dlclose(m->dl);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m->ctrs);
    free(m->keep);
    free(m->cids);
    free(m->node);
    free(m->state_dir);
    free(m->proc_root);
    free(m);
}
