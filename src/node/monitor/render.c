/* The monitor's Prometheus exposition (docs/observability.md names every series). */
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
