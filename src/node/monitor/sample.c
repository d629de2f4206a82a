/*
 * One sample of the containers: which container a process belongs to (its
 * cgroup), the records Allocate left and the shared regions, read-only.
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

uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void *grow(void *p, size_t *cap, size_t need, size_t size)
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

bool pid_cgroup(const struct gv_monitor *m, unsigned pid, char *uid, char *cid)
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

bool pid_nspid(const struct gv_monitor *m, unsigned pid, int32_t *nspid)
{
    char path[4200], *text = NULL;
    size_t len;
    snprintf(path, sizeof(path), "%s/%u/status", m->proc_root, pid);
    if (gv_file_read_all(path, &text, &len, NULL) != GV_OK)
        return false;
    /* "NSpid:\t<host>\t...\t<innermost>": the last number of the line */
    bool ok = false;
    const char *l = strstr(text, "\nNSpid:");
    if (l != NULL || strncmp(text, "NSpid:", 6) == 0) {
        const char *p = l != NULL ? l + 7 : text + 6;
        long last = -1;
        while (*p != '\0' && *p != '\n') {
            while (*p == ' ' || *p == '\t')
                p++;
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            last = v;
            p = end;
        }
        if (last > 0 && last <= INT32_MAX && (*p == '\n' || *p == '\0')) {
            *nspid = (int32_t)last;
            ok = true;
        }
    }
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
    snprintf(path, sizeof(path), "%s/containers/%s/%s/" GV_SHM_REGION_FILE, m->state_dir, c->rec.uid,
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
        } else if (p->hostpid <= 0 && c->n_nspids < MAX_HOSTPIDS) {
            unsigned k = c->n_nspids++;
            c->nspids[k] = atomic_load(&p->pid);
            for (unsigned i = 0; i < c->rec.n_dev; i++)
                c->nspid_bytes[k][i] =
                    c->d[i].rdev >= 0 ? atomic_load(&p->mem_used[c->d[i].rdev]) : 0;
        }
        for (unsigned i = 0; i < c->rec.n_dev; i++)
            if (c->d[i].rdev >= 0)
                c->d[i].region_util += atomic_load(&p->util[c->d[i].rdev]);
    }
    gv_shm_close(shm);
}

/* Reads a container's region once per sample, when first needed. */
void ensure_region(struct gv_monitor *m, struct ctr *c)
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

int ctr_dev(const struct ctr *c, int gpu)
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
void sample_release(struct gv_monitor *m)
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
void sample(struct gv_monitor *m, bool regions)
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
