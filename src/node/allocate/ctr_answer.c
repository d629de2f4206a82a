/*
 * One container's answer to Allocate: the visible devices, the limits and
 * priority environment, the interposer's mounts; the sharing mode adds its
 * part (gv_mode.h) and answer.c holds the fields.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc/gv_alloc.h"
#include "common/gv_jalloc.h"
#include "contracts/gpushare.h"
#include "contracts/podspec.h"
#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "interposer/priority.h" /* the node directory's container path, priority range */
#include "node/modes/answer_internal.h"
#include "node/allocate/gv_allocator.h"
#include "node/allocate/gv_direct.h"
#include "node/modes/gv_mode.h"
#include "node/monitor/gv_monitor.h"
#include "node/kubelet/gv_grpc.h"
#include "node/loop/gv_loop.h"
#include "shm/gv_shm.h" /* the region's file name */
#include "node/allocate/allocate_internal.h"

/* ---- the answer's visible devices (answer.c builds the rest) ---------------- */

/*
 * Visible devices: CDI names when configured, else NVIDIA_VISIBLE_DEVICES;
 * without the NVIDIA runtime, device nodes and driver mounts (gv_direct.h).
 * False with why when the direct answer cannot be given.
 */
static bool add_visible(struct gv_allocator *a, struct gv_mode_answer *b, char uuids[][GV_ALLOC_UUID_MAX],
                        size_t n, char *why, size_t why_cap)
{
    if (n == 0)
        return true;
    pthread_mutex_lock(&a->mu);
    if (a->direct) {
        bool ok = gv_direct_answer(a->direct, a->gpus, a->n_gpus, uuids, n, b, why, why_cap);
        pthread_mutex_unlock(&a->mu);
        return ok;
    }
    bool cdi = a->cdi;
    char kind[128];
    snprintf(kind, sizeof(kind), "%s", a->cdi_kind);
    pthread_mutex_unlock(&a->mu);
    if (cdi) {
        for (size_t i = 0; i < n; i++)
            gv_answer_cdi(b, kind, uuids[i]);
        return true;
    }
    char list[GV_ALLOC_MAX_DEVICES * GV_ALLOC_UUID_MAX + 16] = "";
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(list, ",");
        strcat(list, uuids[i]);
    }
    gv_answer_env(b, "NVIDIA_VISIBLE_DEVICES", list, false);
    return true;
}

/* ---- Allocate ----------------------------------------------------------------- */

/* IDs are "<gpu uuid>::<slice>" (or the bare uuid in exclusive mode). */
bool id_to_uuid(const char *id, char *uuid, size_t cap)
{
    const char *sep = strstr(id, "::");
    size_t n = sep ? (size_t)(sep - id) : strlen(id);
    if (n == 0 || n >= cap)
        return false;
    memcpy(uuid, id, n);
    uuid[n] = '\0';
    return true;
}

int fail(char *msg, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, cap, "gpuvisor: ");
    vsnprintf(msg + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
    gv_warn("Allocate refused: %s", msg);
    return code;
}

/*
 * CUDA_TASK_PRIORITY set as a literal in the container's env (HAMi's
 * documented way to ask for a priority), -1 when absent or not a number.
 * The limits file is the interposer's only source once it exists, so the
 * agent must carry this over or the pod silently loses its priority.
 */
static int env_priority(json_t *pod, const char *ctr)
{
    json_t *c, *e;
    size_t i, j;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c) {
        if (!json_is_string(json_object_get(c, "name")) ||
            strcmp(json_string_value(json_object_get(c, "name")), ctr) != 0)
            continue;
        json_array_foreach(json_object_get(c, "env"), j, e) {
            json_t *n = json_object_get(e, "name"), *v = json_object_get(e, "value");
            if (!json_is_string(n) || strcmp(json_string_value(n), "CUDA_TASK_PRIORITY") != 0)
                continue;
            const char *s = json_string_value(v);
            char *end;
            errno = 0;
            long p = s ? strtol(s, &end, 10) : -1;
            if (!s || end == s || *end || errno || p < 0) {
                gv_warn("pod %s container %s: env CUDA_TASK_PRIORITY=\"%s\" is not an integer >= 0;"
                        " ignored", jstr2(pod, "metadata", "name"), ctr, s ? s : "(not a literal)");
                return -1;
            }
            return p > INT32_MAX ? INT32_MAX : (int)p;
        }
    }
    return -1;
}

/*
 * The container's priority (HAMi: 0 high, 1 low), -1 when unset:
 * nvidia.com/priority, else a literal CUDA_TASK_PRIORITY in its env.
 * Levels past the interposer's lowest are that lowest level: the
 * interposer refuses to start on an out-of-range value.
 */
static int container_priority(struct gv_allocator *a, json_t *pod, const char *ctr)
{
    int prio = -1;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    char res[128];
    pthread_mutex_lock(&a->mu);
    snprintf(res, sizeof(res), "%s", a->resource_name);
    pthread_mutex_unlock(&a->mu);
    cfg.res.gpu = res;
    struct gv_alloc_request *req = NULL;
    struct gv_error err;
    if (gv_podspec_request(&cfg, pod, &req, &err) != GV_OK) {
        gv_warn("pod %s: cannot read container resources (%s): no CUDA_TASK_PRIORITY",
                jstr2(pod, "metadata", "name"), err.msg);
        return -1;
    }
    for (uint32_t i = 0; i < req->n_containers; i++)
        if (strcmp(req->containers[i].name, ctr) == 0)
            prio = req->containers[i].priority;
    gv_alloc_request_free(req);
    if (prio < 0)
        prio = env_priority(pod, ctr);
    if (prio > GV_IPCFG_MAX_PRIORITY) {
        gv_warn("pod %s container %s: priority %d is past the lowest level; using %d",
                jstr2(pod, "metadata", "name"), ctr, prio, GV_IPCFG_MAX_PRIORITY);
        prio = GV_IPCFG_MAX_PRIORITY;
    }
    return prio;
}

/* ALIYUN_COM_GPU_MEM_* for a container asking for aliyun.com/gpu-mem. */
static void add_gpushare_env(struct gv_allocator *a, struct gv_mode_answer *b, json_t *pod,
                             const struct gv_alloc_container_assign *c)
{
    unsigned idx[GV_ALLOC_MAX_DEVICES];
    uint64_t dev_mib = 0;
    pthread_mutex_lock(&a->mu);
    for (uint32_t i = 0; i < c->n_devices; i++) {
        const struct gv_allocator_gpu *g = find_gpu(a, c->devices[i].uuid);
        idx[i] = g ? g->gpu.index : 0;
        if (i == 0 && g)
            dev_mib = g->gpu.memory_mib;
    }
    pthread_mutex_unlock(&a->mu);
    struct gv_gpushare_env env[GV_GPUSHARE_ENV_COUNT];
    size_t n = gv_gpushare_env(pod, c->name, idx, c->n_devices, dev_mib, env);
    for (size_t i = 0; i < n; i++)
        gv_answer_env(b, env[i].key, env[i].value, false);
}

/* Whether a unit's mode can answer pods gpuvisor did not schedule (from the IDs). */
bool plain_unit(const struct gv_allocator_gpu *g)
{
    const struct gv_mode *m = gv_mode_get(g->settings.mode);
    return m && (!(m->flags & GV_MODE_NEEDS_ASSIGNMENT) || g->from_ids);
}

/* Whether a unit is a device for VMs (GV_MODE_NO_ASSIGNMENT): never matched to a pod. */
bool vm_unit(const struct gv_allocator_gpu *g)
{
    const struct gv_mode *m = gv_mode_get(g->settings.mode);
    return m && (m->flags & GV_MODE_NO_ASSIGNMENT);
}

/*
 * The interposer's part of an answer (a mode asked for it): library,
 * preload, runtime and node directories, the limits file, priority and
 * core policy.  Two host directories: what the container may write
 * (runtime dir) and what it may only read (limits file); one directory for
 * both let the tenant rewrite its limits through the writable mount.
 */
static void add_interposer(struct gv_allocator *a, struct gv_mode_answer *b, json_t *pod,
                           const char *uid, const char *ctr)
{
    char val[64];
    gv_answer_env(b, "CUDA_DEVICE_MEMORY_SHARED_CACHE", GV_NODE_CONTAINER_PATH "/" GV_SHM_REGION_FILE, true);
    int prio = container_priority(a, pod, ctr);
    if (prio >= 0) {
        snprintf(val, sizeof(val), "%d", prio);
        gv_answer_env(b, "CUDA_TASK_PRIORITY", val, true);
    }
    pthread_mutex_lock(&a->mu);
    char policy[16], loglevel[8];
    snprintf(policy, sizeof(policy), "%s", a->core_policy);
    snprintf(loglevel, sizeof(loglevel), "%s", a->libcuda_log_level);
    pthread_mutex_unlock(&a->mu);
    if (policy[0])
        gv_answer_env(b, "GPU_CORE_UTILIZATION_POLICY", policy, true);
    if (loglevel[0]) /* HAMi's libcudaloglevel (node config) */
        gv_answer_env(b, "LIBCUDA_LOG_LEVEL", loglevel, false); /* not a limit */
    char host[4096], host_file[4200], lib[4096], preload[4096];
    snprintf(host, sizeof(host), "%s/containers/%s/%s", a->host_state_dir, uid, ctr);
    snprintf(host_file, sizeof(host_file), "%s/limits/%s/%s/limits.env", a->host_state_dir, uid,
             ctr);
    snprintf(lib, sizeof(lib), "%s/lib/libgpuvisor.so", a->install_dir);
    snprintf(preload, sizeof(preload), "%s/ld.so.preload", a->install_dir);
    gv_answer_mount(b, lib, GV_NODE_LIB_PATH, true);
    const char *opt = gv_podspec_annotation(pod, ANN_PRELOAD);
    if (!(opt && strcmp(opt, "false") == 0))
        gv_answer_mount(b, preload, GV_NODE_PRELOAD_PATH, true);
    gv_answer_mount(b, host, GV_NODE_CONTAINER_PATH, false);
    /* the region as a mount of its own: writable, but it cannot be unlinked
     * or renamed inside the container (make_region) */
    char region[4300];
    snprintf(region, sizeof(region), "%s/" GV_SHM_REGION_FILE, host);
    gv_answer_mount(b, region, GV_NODE_CONTAINER_PATH "/" GV_SHM_REGION_FILE, false);
    gv_answer_mount(b, host_file, GV_NODE_LIMITS_PATH, true);
    gv_answer_mount(b, a->host_node_dir, GV_PRIO_DEFAULT_DIR, false);
}

/*
 * Builds the response for container c of the chosen pod, or (pod and c
 * NULL) for a pod gpuvisor did not schedule, from the kubelet's IDs alone.
 * The container's units are grouped by mode and each mode adds its part
 * (gv_mode.h); the visible devices and the interposer are common.
 */
int build(struct gv_allocator *a, json_t *pod, const struct gv_alloc_container_assign *c,
                 char uuids[][GV_ALLOC_UUID_MAX], size_t n_ids,
                 V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap)
{
    const char *uid = pod ? jstr2(pod, "metadata", "uid") : "";
    const char *ctr = c ? c->name : "";
    size_t n = c ? c->n_devices : n_ids;
    struct gv_mode_alloc *grp = calloc(GV_INVENTORY_MODE_COUNT, sizeof(*grp));
    if (grp == NULL)
        return fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    int code = GV_GRPC_OK;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n && code == GV_GRPC_OK; i++) {
        const char *u = c ? c->devices[i].uuid : uuids[i];
        const struct gv_allocator_gpu *g = find_gpu(a, u);
        if (g == NULL || gv_mode_get(g->settings.mode) == NULL || (c && !g->gpu.healthy)) {
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                        "GPU %s assigned to container %s is not healthy on this node", u, ctr);
            break;
        }
        struct gv_mode_alloc *m = &grp[g->settings.mode];
        size_t k = c ? m->n : 0; /* with an assignment every device is its own entry */
        while (k < m->n && strcmp(m->units[k].gpu.uuid, u) != 0)
            k++;
        if (k < m->n) { /* more replicas of a unit already listed (no assignment) */
            m->ids[k]++;
            continue;
        }
        m->units[m->n] = *g;
        m->idx[m->n] = (unsigned)i;
        m->ids[m->n++] = 1;
    }
    pthread_mutex_unlock(&a->mu);
    struct gv_mode_answer *b = calloc(1, sizeof(*b));
    if (code == GV_GRPC_OK && b == NULL)
        code = fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    if (b) {
        b->r = resp;
    }
    size_t n_units = 0;
    for (int id = 0; id < GV_INVENTORY_MODE_COUNT; id++)
        n_units += grp[id].n;
    for (int id = 0; id < GV_INVENTORY_MODE_COUNT && code == GV_GRPC_OK; id++) {
        struct gv_mode_alloc *m = &grp[id];
        if (m->n == 0)
            continue;
        m->n_request = n;
        m->n_units = n_units;
        const struct gv_mode *md = gv_mode_get((enum gv_inventory_mode)id);
        m->env = gv_modes_env(a->modes);
        m->pod = pod;
        m->c = c;
        m->uid = uid;
        m->ctr = ctr;
        m->answer = b;
        char why[512] = "";
        int mc = md->allocate(gv_modes_state(a->modes, (enum gv_inventory_mode)id), m, why,
                              sizeof(why));
        if (mc != GV_GRPC_OK)
            code = fail(msg, cap, mc, "container %s: %s", ctr[0] ? ctr : "(no assignment)", why);
    }
    free(grp);
    if (code == GV_GRPC_OK && b->interposer && pod == NULL)
        code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                    "the interposer needs a pod scheduled by gpuvisor-scheduler");
    if (code == GV_GRPC_OK) {
        char why[512] = "";
        if (!add_visible(a, b, b->visible, b->n_visible, why, sizeof(why)))
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION, "%s", why);
        if (pod && c)
            add_gpushare_env(a, b, pod, c); /* Aliyun gpushare's env, when asked for */
        if (b->interposer)
            add_interposer(a, b, pod, uid, ctr);
        if (b->oom)
            code = fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (code == GV_GRPC_OK && pod) {
        struct gv_error err;
        gv_status st = gv_ctr_prepare(a->state_dir, a->node_dir, uid, ctr, b->interposer, b->limits, b->limits_len, &err);
        if (st == GV_OK) /* on /metrics from now on, before its first CUDA call */
            gv_monitor_note_allocate(a->state_dir, pod, c, b->interposer, b->limits,
                                     b->limits_len);
        else
            code = fail(msg, cap, GV_GRPC_INTERNAL, "container %s: %s", ctr, err.msg);
    }
    if (b)
        free(b->limits);
    free(b);
    return code;
}
