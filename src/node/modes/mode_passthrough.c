/*
 * Passthrough mode: whole GPUs on vfio-pci and mediated devices for VMs
 * (KubeVirt, Kata), discovered from sysfs (passthrough.c) rather than NVML.
 * docs/passthrough.md.
 *
 * Units come from discover_host (each rescan); an NVML GPU the config sets
 * to mode "passthrough" is still on its host driver: it is not served (and
 * is bound to vfio-pci first when passthrough.bindAtStart says so).  Device
 * IDs: the PCI address with '_' for ':' (the kubelet IDs of this agent carry
 * no ':'), the mdev UUID.  A thread watches /dev/vfio and rescans every few
 * seconds so hot removal shows as Unhealthy.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"
#include "node/modes/gv_mode.h"
#include "node/passthrough/gv_passthrough.h"

#define RESCAN_MS 5000

struct pt_state {
    const struct gv_mode_env *env;
    char root[1024];
    pthread_mutex_t mu;
    struct gv_pt_scan *scan; /* the last one (Allocate reads it from worker threads) */
    bool bound_once;         /* bindAtStart ran (once per process, never on a reload) */
    bool bind_at_start;      /* the config's, as of the last discover_host */
    size_t n_tried;          /* NVML GPUs in mode passthrough the helper was run for */
    char tried[GV_PT_MAX_BIND * 4][GV_PT_BDF_MAX];
    int ino, stop_pipe[2];
    pthread_t watcher;
    bool watching;
};

static void id_of_bdf(const char *bdf, char *out, size_t cap)
{
    snprintf(out, cap, "%s", bdf);
    for (char *c = out; *c; c++)
        if (*c == ':')
            *c = '_';
}

static void *watch_main(void *arg)
{
    struct pt_state *st = arg;
    char buf[4096];
    for (;;) {
        struct pollfd p[2] = {{.fd = st->stop_pipe[0], .events = POLLIN},
                              {.fd = st->ino, .events = POLLIN}};
        int r = poll(p, st->ino >= 0 ? 2 : 1, RESCAN_MS);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && (p[0].revents & POLLIN))
            break;
        if (r > 0 && (p[1].revents & POLLIN) && read(st->ino, buf, sizeof buf) < 0)
            (void)0; /* drained or not, a rescan follows */
        if (st->env->changed)
            st->env->changed(st->env->changed_ud);
    }
    return NULL;
}

static gv_status pt_open(const struct gv_mode_env *env, void **state, struct gv_error *err)
{
    struct pt_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return gv_error_set(err, GV_ENOMEM, "passthrough: out of memory");
    st->env = env;
    snprintf(st->root, sizeof(st->root), "%s", env->sys_root && *env->sys_root ? env->sys_root : "/");
    pthread_mutex_init(&st->mu, NULL);
    st->ino = -1;
    st->stop_pipe[0] = st->stop_pipe[1] = -1;
    *state = st;
    return GV_OK;
}

static void pt_close(void *state)
{
    struct pt_state *st = state;
    if (st->watching) {
        if (write(st->stop_pipe[1], "x", 1) < 0)
            gv_warn("passthrough: cannot stop the watcher: %s", strerror(errno));
        pthread_join(st->watcher, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (st->stop_pipe[i] >= 0)
            close(st->stop_pipe[i]);
    if (st->ino >= 0)
        close(st->ino);
    gv_pt_scan_free(st->scan);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* The watcher starts with the first enabled scan (agents without passthrough run none). */
static void start_watcher(struct pt_state *st)
{
    char dir[1100];
    if (st->watching || pipe(st->stop_pipe) != 0)
        return;
    snprintf(dir, sizeof(dir), "%s/dev/vfio", st->root);
    st->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (st->ino >= 0 &&
        inotify_add_watch(st->ino, dir, IN_CREATE | IN_DELETE | IN_ATTRIB) < 0) {
        gv_warn("passthrough: cannot watch %s (%s): rescanning every %d ms only", dir,
                strerror(errno), RESCAN_MS);
        close(st->ino);
        st->ino = -1;
    }
    st->watching = pthread_create(&st->watcher, NULL, watch_main, st) == 0;
}

static void bind_marked(struct pt_state *st, const struct gv_pt_settings *ps)
{
    for (size_t i = 0; i < ps->n_bind; i++) {
        struct gv_error err = {0};
        if (gv_pt_bind(st->root, ps->bind[i], gv_pt_bind_ops_sysfs(), &err) == GV_OK)
            gv_info("passthrough: %s bound to " GV_PT_VFIO_DRIVER, ps->bind[i]);
        else
            gv_error("passthrough: %s not bound: %s", ps->bind[i], err.msg);
    }
}

static void unit_common(struct gv_allocator_gpu *u, const char *id, const char *resource,
                        const char *pci, int numa, bool healthy, const char *reason, unsigned idx)
{
    memset(u, 0, sizeof(*u));
    snprintf(u->gpu.uuid, sizeof(u->gpu.uuid), "%s", id);
    snprintf(u->gpu.model, sizeof(u->gpu.model), "%s", resource); /* advertise reads it */
    snprintf(u->gpu.pci_bus_id, sizeof(u->gpu.pci_bus_id), "%s", pci);
    snprintf(u->gpu.reason, sizeof(u->gpu.reason), "%s", reason);
    u->gpu.index = idx; /* past NVML's indexes: the device's topology slot only */
    u->gpu.numa = numa;
    u->gpu.healthy = healthy;
    u->settings.mode = GV_INVENTORY_MODE_PASSTHROUGH;
    u->settings.split = 1;
    u->settings.mem_scaling = u->settings.core_scaling = 1.0;
}

static size_t pt_discover_host(void *state, const struct gv_node_config *cfg,
                               struct gv_allocator_gpu *out, size_t cap)
{
    struct pt_state *st = state;
    const struct gv_pt_settings *ps = &cfg->passthrough;
    if (!ps->enabled) {
        pthread_mutex_lock(&st->mu);
        gv_pt_scan_free(st->scan);
        st->scan = NULL;
        pthread_mutex_unlock(&st->mu);
        return 0;
    }
    st->bind_at_start = ps->bind_at_start;
    if (ps->bind_at_start && !st->bound_once) {
        st->bound_once = true;
        bind_marked(st, ps);
    }
    start_watcher(st);
    struct gv_pt_config pc = {.sys_root = st->root, .dev_root = st->root,
                              .pci_ids = ps->pci_ids[0] ? ps->pci_ids : NULL,
                              .resource_override = ps->resource_override};
    struct gv_pt_scan *scan = NULL;
    struct gv_error err = {0};
    if (gv_pt_scan_new(&pc, &scan, &err) != GV_OK) {
        gv_error("passthrough: sysfs scan failed, keeping the last one: %s", err.msg);
        pthread_mutex_lock(&st->mu);
        scan = st->scan;
        st->scan = NULL;
        pthread_mutex_unlock(&st->mu);
        if (scan == NULL)
            return 0;
    }
    pthread_mutex_lock(&st->mu);
    if (st->scan && scan != st->scan && gv_pt_scan_carry(scan, st->scan, &err) != GV_OK)
        gv_error("passthrough: %s", err.msg);
    if (scan != st->scan)
        gv_pt_scan_free(st->scan);
    st->scan = scan;
    size_t n = 0;
    char id[64];
    for (size_t i = 0; i < scan->n_gpus && n < cap; i++) {
        const struct gv_pt_gpu *g = &scan->gpus[i];
        id_of_bdf(g->bdf, id, sizeof(id));
        unit_common(&out[n], id, g->resource, g->bdf, g->numa, g->healthy, g->reason,
                    1000 + (unsigned)n);
        n++;
    }
    for (size_t i = 0; i < scan->n_mdevs && n < cap; i++) {
        const struct gv_pt_mdev *m = &scan->mdevs[i];
        unit_common(&out[n], m->uuid, m->resource, m->gpu, -1, m->healthy, m->reason,
                    1000 + (unsigned)n);
        n++;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

/*
 * An NVML GPU set to "passthrough" is still on its host driver: nothing to
 * serve.  With bindAtStart the helper binds it, once per process; the GPU
 * then leaves NVML and comes back from sysfs at the next rescan.
 */
static size_t pt_discover(void *state, const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                          struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap)
{
    struct pt_state *st = state;
    (void)s, (void)out, (void)cap;
    size_t len = strlen(g->pci_bus_id);
    /* NVML's "00000000:3B:00.0" is sysfs's "0000:3b:00.0" */
    char bdf[GV_PT_BDF_MAX] = "";
    if (len >= 12) {
        snprintf(bdf, sizeof(bdf), "%s", g->pci_bus_id + len - 12);
        for (char *c = bdf; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'F' ? *c - 'A' + 'a' : *c);
    }
    bool tried = false;
    for (size_t i = 0; i < st->n_tried; i++)
        tried |= strcmp(st->tried[i], bdf) == 0;
    if (st->bind_at_start && bdf[0] && !tried &&
        st->n_tried < sizeof(st->tried) / sizeof(st->tried[0])) {
        struct gv_error err = {0};
        snprintf(st->tried[st->n_tried++], GV_PT_BDF_MAX, "%s", bdf);
        if (gv_pt_bind(st->root, bdf, gv_pt_bind_ops_sysfs(), &err) == GV_OK) {
            gv_info("passthrough: GPU %u (%s) bound to " GV_PT_VFIO_DRIVER, g->index, bdf);
            if (st->env->changed)
                st->env->changed(st->env->changed_ud);
        } else {
            gv_error("passthrough: GPU %u (%s) not bound: %s", g->index, bdf, err.msg);
        }
    }
    snprintf(why, why_cap,
             "mode passthrough, but %s is bound to the host driver: bind it to " GV_PT_VFIO_DRIVER
             " (passthrough.bind with bindAtStart) to pass it through; not sliced meanwhile",
             g->pci_bus_id);
    return 0;
}

static void pt_advertise(void *state, const struct gv_node_config *cfg,
                         const struct gv_allocator_gpu *u, struct gv_mode_adv *adv)
{
    (void)state, (void)cfg;
    gv_mode_adv_add(adv, u->gpu.model, u->gpu.uuid, &u->gpu);
}

static int pt_allocate(void *state, const struct gv_mode_alloc *a, char *msg, size_t cap)
{
    struct pt_state *st = state;
    const char *ids[GV_ALLOC_MAX_DEVICES];
    char bdfs[GV_ALLOC_MAX_DEVICES][GV_PT_BDF_MAX];
    bool mdev = false, gpu = false;
    struct gv_pt_answer ans;
    struct gv_error err = {0};
    gv_status rc;
    pthread_mutex_lock(&st->mu);
    if (st->scan == NULL) {
        pthread_mutex_unlock(&st->mu);
        snprintf(msg, cap, "passthrough is disabled on this node");
        return GV_GRPC_FAILED_PRECONDITION;
    }
    for (size_t i = 0; i < a->n; i++) {
        const struct gv_allocator_gpu *u = &a->units[i];
        if (gv_pt_scan_mdev(st->scan, u->gpu.uuid)) {
            mdev = true;
            ids[i] = u->gpu.uuid;
        } else {
            gpu = true;
            /* a passthrough unit's address is the scan's sysfs BDF, which fits;
             * anything longer is no such address, never one cut short */
            size_t l = strnlen(u->gpu.pci_bus_id, sizeof(u->gpu.pci_bus_id));
            if (l >= sizeof(bdfs[i])) {
                pthread_mutex_unlock(&st->mu);
                snprintf(msg, cap, "device %s has no PCI address (dddd:bb:dd.f)", u->gpu.uuid);
                return GV_GRPC_FAILED_PRECONDITION;
            }
            memcpy(bdfs[i], u->gpu.pci_bus_id, l);
            bdfs[i][l] = '\0';
            ids[i] = bdfs[i];
        }
    }
    if (mdev && gpu) {
        pthread_mutex_unlock(&st->mu);
        snprintf(msg, cap, "one request mixes passthrough GPUs and mediated devices");
        return GV_GRPC_INVALID_ARGUMENT;
    }
    rc = mdev ? gv_pt_allocate_mdevs(st->scan, a->units[0].gpu.model, ids, a->n, &ans, &err)
              : gv_pt_allocate_gpus(st->scan, a->units[0].gpu.model, ids, a->n, &ans, &err);
    pthread_mutex_unlock(&st->mu);
    if (rc != GV_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return rc == GV_EUNAVAILABLE ? GV_GRPC_FAILED_PRECONDITION : GV_GRPC_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < ans.n_specs; i++)
        gv_mode_answer_device(a->answer, ans.specs[i], ans.specs[i], "rw");
    gv_mode_answer_env(a->answer, ans.env_key, ans.env_value);
    return GV_GRPC_OK;
}

/* Whole IOMMU groups first (gv_pt_preferred), on the kubelet's IDs. */
static size_t pt_prefer(void *state, const char *const *avail, size_t n_avail,
                        const char *const *must, size_t n_must, size_t size, const char **out)
{
    struct pt_state *st = state;
    if (n_avail > GV_ALLOC_MAX_DEVICES * 4 || n_must > GV_ALLOC_MAX_DEVICES ||
        size > GV_ALLOC_MAX_DEVICES)
        return 0;
    char a_bdf[GV_ALLOC_MAX_DEVICES * 4][GV_PT_UUID_MAX], m_bdf[GV_ALLOC_MAX_DEVICES][GV_PT_UUID_MAX];
    const char *a_ptr[GV_ALLOC_MAX_DEVICES * 4], *m_ptr[GV_ALLOC_MAX_DEVICES], *pick[GV_ALLOC_MAX_DEVICES];
    /* the IDs are addresses with '_' for ':' (mdevs: UUIDs, which gv_pt_preferred passes through) */
    for (size_t i = 0; i < n_avail; i++) {
        snprintf(a_bdf[i], sizeof(a_bdf[i]), "%s", avail[i]);
        for (char *c = a_bdf[i]; *c; c++)
            *c = *c == '_' ? ':' : *c;
        a_ptr[i] = a_bdf[i];
    }
    for (size_t i = 0; i < n_must; i++) {
        snprintf(m_bdf[i], sizeof(m_bdf[i]), "%s", must[i]);
        for (char *c = m_bdf[i]; *c; c++)
            *c = *c == '_' ? ':' : *c;
        m_ptr[i] = m_bdf[i];
    }
    pthread_mutex_lock(&st->mu);
    size_t n = st->scan ? gv_pt_preferred(st->scan, a_ptr, n_avail, m_ptr, n_must, size, pick) : 0;
    pthread_mutex_unlock(&st->mu);
    /* back to the kubelet's own strings */
    for (size_t k = 0; k < n; k++) {
        out[k] = NULL;
        for (size_t i = 0; i < n_avail && !out[k]; i++)
            if (pick[k] == a_ptr[i])
                out[k] = avail[i];
        for (size_t i = 0; i < n_must && !out[k]; i++)
            if (pick[k] == m_ptr[i])
                out[k] = must[i];
        if (!out[k])
            return 0;
    }
    return n;
}

void gv_mode_passthrough_inventory(struct gv_modes *m, struct gv_inventory *inv)
{
    struct pt_state *st = gv_modes_state(m, GV_INVENTORY_MODE_PASSTHROUGH);
    inv->whole.n = 0;
    if (st == NULL)
        return;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; st->scan && i < st->scan->n_gpus && inv->whole.n < GV_INVENTORY_MAX_WHOLE;
         i++) {
        const struct gv_pt_gpu *g = &st->scan->gpus[i];
        struct gv_inventory_whole *w = &inv->whole.dev[inv->whole.n++];
        memset(w, 0, sizeof(*w));
        w->kind = GV_INVENTORY_WHOLE_PASSTHROUGH;
        snprintf(w->resource, sizeof(w->resource), "%s", g->resource);
        id_of_bdf(g->bdf, w->id, sizeof(w->id));
        snprintf(w->pci_bus_id, sizeof(w->pci_bus_id), "%s", g->bdf);
        snprintf(w->iommu_group, sizeof(w->iommu_group), "%s", g->group);
        w->healthy = g->healthy;
    }
    for (size_t i = 0; st->scan && i < st->scan->n_mdevs && inv->whole.n < GV_INVENTORY_MAX_WHOLE;
         i++) {
        const struct gv_pt_mdev *md = &st->scan->mdevs[i];
        struct gv_inventory_whole *w = &inv->whole.dev[inv->whole.n++];
        memset(w, 0, sizeof(*w));
        w->kind = GV_INVENTORY_WHOLE_MDEV;
        snprintf(w->resource, sizeof(w->resource), "%s", md->resource);
        snprintf(w->id, sizeof(w->id), "%s", md->uuid);
        snprintf(w->pci_bus_id, sizeof(w->pci_bus_id), "%s", md->gpu);
        snprintf(w->iommu_group, sizeof(w->iommu_group), "%s", md->group);
        w->healthy = md->healthy;
    }
    pthread_mutex_unlock(&st->mu);
}

const struct gv_mode gv_mode_PASSTHROUGH = {
    .id = GV_INVENTORY_MODE_PASSTHROUGH,
    .flags = GV_MODE_NO_ASSIGNMENT,
    .open = pt_open,
    .close = pt_close,
    .discover_host = pt_discover_host,
    .discover = pt_discover,
    .advertise = pt_advertise,
    .allocate = pt_allocate,
    .prefer = pt_prefer,
};
