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
#include "node/monitor/monitor_state.h"
#include "shm/gv_shm.h"

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
