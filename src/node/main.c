/*
 * gpuvisor-node: the kubelet device plugin of gpuvisor (docs/node-agent.md).
 *
 * Wiring only: options, the event loop and the reactions to its events
 * (signals, config file changes, GPU health changes, GC timer).  The parts
 * live in their own files: gpus.c (NVML), plugin.c + grpc_*.c (the
 * device-plugin API), registrar.c (kubelet registration), allocator.c
 * (Allocate), publisher.c (node annotations and labels), config.c.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/gv_file.h"
#include "common/gv_jalloc.h"
#include "common/gv_log.h"
#include "common/gv_version.h"
#include "contracts/inventory.h"
#include "node/allocate/gv_allocator.h"
#include "node/config/gv_config.h"
#include "node/allocate/gv_direct.h"
#include "node/discovery/gv_gpus.h"
#include "node/monitor/gv_metrics.h"
#include "node/modes/gv_mode.h"
#include "node/passthrough/gv_passthrough.h"
#include "node/monitor/gv_monitor.h"
#include "node/kubelet/gv_plugin.h"
#include "node/discovery/gv_publisher.h"
#include "node/kubelet/gv_registrar.h"

struct options {
    const char *node;
    const char *config;
    const char *plugin_dir;
    const char *socket_name;
    const char *kubelet_socket;
    const char *state_dir;
    const char *host_state_dir;
    const char *install_dir;
    const char *nvml_lib;
    const char *sys_root;
    const char *kube_url;
    const char *kubeconfig;
    bool no_kube;
    long heartbeat_s;
    long probe_ms;
    long recover_ms;
    long allocate_wait_ms;
    long gc_s;
    long gc_grace_ms;
    const char *placement_key_file;
    bool insecure_unsigned;
    const char *opt_out_namespaces; /* comma list */
    const char *metrics_listen; /* overrides the config's metrics.listen */
    const char *proc_root;
    const char *mps_control; /* nvidia-cuda-mps-control (tests: a fake) */
    long mps_probe_ms;
    const char *vfio_bind, *vfio_unbind; /* one-off binding helper runs (docs/passthrough.md) */
};

/*
 * One device plugin per resource name (a mode may advertise several:
 * NVIDIA's renamed shared resources, MIG profiles, passthrough devices):
 * each has its own socket and kubelet registration.
 */
struct endpoint {
    char resource[128];
    char socket[256]; /* file name in the plugin directory */
    struct gv_plugin *plugin;
    struct gv_registrar *reg;
};

struct agent {
    struct options o;
    struct gv_loop *loop;
    struct gv_node_config *cfg;
    char *cfg_text; /* last loaded config file content, to skip no-op reloads */
    struct gv_placement_key *placement_key;
    char *opt_out_text; /* storage of opt_out[] */
    const char *opt_out[65];
    struct gv_placement_policy placement;
    struct gv_gpus *gpus;
    struct gv_kube_config *kcfg;
    struct gv_kube_client *kube;
    struct gv_kube_client *kube_writer; /* few retries: for Allocate's annotation writes */
    struct gv_allocator *alloc;
    struct gv_publisher *pub;
    struct gv_modes *modes;
    struct endpoint **eps; /* eps[0]: the configured resourceName, always served */
    size_t n_eps;
    bool serving; /* endpoints listen and register as they are made */
    struct gv_monitor *mon;       /* /metrics and the NVML backstop (docs/observability.md) */
    struct gv_metrics_http *http;
    int sigfd;
    int cfg_ino;
    uint64_t reload_timer;
    bool stopping;
    int exit_code;
};

/* ---- device list, allocator table and inventory from GPUs + config ------- */

/* The socket file name for a resource: gpuvisor.sock (--socket-name) for the configured one. */
static void endpoint_socket(const struct agent *ag, const char *resource, char *out, size_t cap)
{
    if (strcmp(resource, ag->cfg->resource_name) == 0) {
        snprintf(out, cap, "%s", ag->o.socket_name);
        return;
    }
    snprintf(out, cap, "gpuvisor-%s.sock", resource);
    for (char *c = out; *c; c++)
        if (*c == '/')
            *c = '_';
}

static gv_status endpoint_serve(struct agent *ag, struct endpoint *ep, struct gv_error *err)
{
    if (gv_plugin_listen(ep->plugin, err) != GV_OK)
        return err->code;
    struct gv_registrar_config rc = {.plugin_dir = ag->o.plugin_dir,
                                     .kubelet_socket = ag->o.kubelet_socket,
                                     .endpoint = ep->socket,
                                     .resource_name = ep->resource};
    return gv_registrar_new(ag->loop, ep->plugin, &rc, &ep->reg, err);
}

/*
 * Another spec of the same kind (nvidia-ctk's nvidia.com/gpu above all)
 * makes consumers resolve neither: said at every write, since the other
 * spec may appear after the agent started.
 */
static void warn_kind_claimed(const struct gv_node_config *cfg, const char *file)
{
    char own[600], others[1024];
    snprintf(own, sizeof(own), "%s/%s", cfg->cdi_spec_dir, file);
    const char *dirs[4] = {cfg->cdi_spec_dir, NULL, NULL, NULL};
    size_t nd = 1;
    static const char *const standard[] = {"/etc/cdi", "/var/run/cdi"};
    for (size_t i = 0; i < 2; i++)
        if (strcmp(standard[i], cfg->cdi_spec_dir) != 0)
            dirs[nd++] = standard[i];
    if (gv_cdi_kind_claimed(dirs, cfg->cdi_kind, own, others, sizeof(others)) > 0)
        gv_error("CDI kind %s is also claimed by %s: container runtimes resolve no device of "
                 "a kind two specs claim, so no GPU reaches a container; set cdiKind to a kind "
                 "of gpuvisor's own (default gpuvisor.io/gpu)",
                 cfg->cdi_kind, others);
}

/*
 * After each rebuild (loop thread): discovers the driver's files when the
 * config wants CDI or no NVIDIA runtime, writes the CDI spec (cdi: true)
 * and hands the files to the allocator (nvidiaRuntime: false).
 */
static void gv_direct_sync(struct gv_allocator *a, const struct gv_node_config *cfg,
                           const char *version, const char *install_dir,
                           const struct gv_gpu *gpus, size_t n)
{
    if (!cfg->cdi && cfg->nvidia_runtime) {
        gv_allocator_set_direct(a, NULL);
        return;
    }
    struct gv_cdi_host *h = NULL;
    struct gv_error err;
    const char *seen = cfg->container_driver_root[0] ? cfg->container_driver_root : cfg->driver_root;
    if (gv_cdi_discover(seen, cfg->driver_root, version, &h, &err) != GV_OK) {
        gv_error("driver files not found, %s: %s",
                 cfg->nvidia_runtime ? "no CDI spec written" : "Allocate refuses GPUs", err.msg);
        if (cfg->nvidia_runtime)
            return;
        h = calloc(1, sizeof(*h));
        if (h)
            snprintf(h->broken, sizeof(h->broken), "%.250s", err.msg);
        gv_allocator_set_direct(a, h);
        return;
    }
    if (cfg->cdi) {
        char lib[600], preload[600], file[200];
        snprintf(lib, sizeof(lib), "%s/lib/libgpuvisor.so", install_dir);
        snprintf(preload, sizeof(preload), "%s/ld.so.preload", install_dir);
        struct gv_cdi_interposer ip = {.lib = lib, .preload = preload};
        /* "gpuvisor-nvidia.com_gpu.json": not nvidia-ctk's file name, so both cannot clobber */
        snprintf(file, sizeof(file), "gpuvisor-%s.json", cfg->cdi_kind);
        for (char *p = file; *p; p++)
            if (*p == '/')
                *p = '_';
        warn_kind_claimed(cfg, file);
        json_t *spec = gv_cdi_spec(cfg->cdi_kind, h, gpus, n, &ip, &err);
        if (spec == NULL || gv_cdi_write(cfg->cdi_spec_dir, file, spec, &err) != GV_OK)
            gv_error("CDI spec not written: %s", err.msg);
        json_decref(spec);
    }
    if (cfg->nvidia_runtime) {
        gv_cdi_host_free(h);
        h = NULL;
    }
    gv_allocator_set_direct(a, h);
}

/* The endpoint of a resource, made (and, once serving, registered) on first use. */
static struct endpoint *endpoint_get(struct agent *ag, const char *resource)
{
    for (size_t i = 0; i < ag->n_eps; i++)
        if (strcmp(ag->eps[i]->resource, resource) == 0)
            return ag->eps[i];
    struct gv_error err;
    struct endpoint *ep = calloc(1, sizeof(*ep));
    void *p = realloc(ag->eps, (ag->n_eps + 1) * sizeof(*ag->eps));
    if (p)
        ag->eps = p;
    if (ep == NULL || p == NULL) {
        free(ep);
        gv_error("resource %s: out of memory", resource);
        return NULL;
    }
    snprintf(ep->resource, sizeof(ep->resource), "%s", resource);
    endpoint_socket(ag, resource, ep->socket, sizeof(ep->socket));
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", ag->o.plugin_dir, ep->socket);
    struct gv_plugin_config pc = {.socket_path = path, .allocate = gv_allocator_allocate,
                                  .allocate_ud = ag->alloc, .prefer = gv_allocator_prefer,
                                  .prefer_ud = ag->alloc};
    if (gv_plugin_new(ag->loop, &pc, &ep->plugin, &err) != GV_OK ||
        (ag->serving && endpoint_serve(ag, ep, &err) != GV_OK)) {
        gv_error("resource %s: cannot serve it: %s", resource, err.msg);
        gv_registrar_free(ep->reg);
        gv_plugin_free(ep->plugin);
        free(ep);
        return NULL;
    }
    ag->eps[ag->n_eps++] = ep;
    if (ag->serving)
        gv_info("serving %s on %s/%s", resource, ag->o.plugin_dir, ep->socket);
    return ep;
}

static void rebuild(struct agent *ag)
{
    struct gv_gpu *gpus = NULL;
    size_t n = 0, n_units = 0;
    struct gv_error err;
    struct gv_allocator_gpu *units = NULL;
    struct gv_mode_adv *adv = gv_mode_adv_new();
    struct gv_inventory *inv = calloc(1, sizeof(*inv));
    if (inv == NULL || adv == NULL || gv_gpus_snapshot(ag->gpus, &gpus, &n, &err) != GV_OK) {
        gv_error("cannot rebuild the device list: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (gpus[i].memory_mib == 0) /* HAMi's preconfigureddevicememory */
            gpus[i].memory_mib = ag->cfg->preconfigured_mem_mib;
    snprintf(inv->driver_version, sizeof(inv->driver_version), "%s",
             gv_gpus_driver_version(ag->gpus));
    snprintf(inv->cuda_version, sizeof(inv->cuda_version), "%s", gv_gpus_cuda_version(ag->gpus));
    snprintf(inv->mig_strategy, sizeof(inv->mig_strategy), "%s", ag->cfg->mig_strategy);
    for (size_t i = 0; i < n; i++) {
        const struct gv_gpu *g = &gpus[i];
        struct gv_node_gpu_settings s;
        if (!gv_node_config_gpu(ag->cfg, g->uuid, g->index, &s))
            continue; /* excluded: not ours at all */
        if (inv->n_gpus < GV_INVENTORY_MAX_GPUS) {
            struct gv_inventory_gpu *ig = &inv->gpus[inv->n_gpus++];
            snprintf(ig->uuid, sizeof(ig->uuid), "%s", g->uuid);
            snprintf(ig->model, sizeof(ig->model), "%s", g->model);
            snprintf(ig->pci_bus_id, sizeof(ig->pci_bus_id), "%s", g->pci_bus_id);
            ig->index = g->index;
            ig->memory_mib = g->memory_mib;
            ig->memory_scaling = s.mem_scaling;
            ig->cores = (uint32_t)(100.0 * s.core_scaling + 0.5);
            ig->split = s.split;
            ig->numa = g->numa;
            ig->healthy = g->healthy;
            ig->mode = s.mode;
            ig->mig = g->mig;
            ig->mig_capable = g->mig_capable;
            ig->cc_major = g->cc_major;
            ig->cc_minor = g->cc_minor;
            ig->pci_class = g->pci_class;
            ig->renamed = s.resource[0] && strcmp(s.resource, ag->cfg->resource_name) != 0;
            gv_labels_add_migs(inv, g);
            ig->nvlink_group = g->nvlink_island >= 0 ? (uint32_t)g->nvlink_island + 1 : 0;
            ig->pcie_group = g->pcie_switch >= 0 ? (uint32_t)g->pcie_switch + 1 : 0;
            if (s.resource[0] && strcmp(s.resource, ag->cfg->resource_name) != 0)
                snprintf(ig->resource, sizeof(ig->resource), "%s", s.resource);
        }
    }
    if (ag->cfg->hide_numa) /* HAMi's enablenumatopology: false: no NUMA node to the kubelet */
        for (size_t i = 0; i < n; i++)
            gpus[i].numa = -1;
    /* what each GPU's mode serves and advertises (gv_mode.h) */
    if (gv_modes_build(ag->modes, ag->cfg, gpus, n, &units, &n_units, adv, &err) != GV_OK) {
        gv_error("device list not updated: %s", err.msg);
        goto out;
    }
    for (size_t i = 0; i < n_units; i++) {
        const struct gv_allocator_gpu *u = &units[i];
        /* a mode may find a unit unusable (its helper is down): the inventory says so */
        for (uint32_t k = 0; k < inv->n_gpus; k++)
            if (strcmp(inv->gpus[k].uuid, u->gpu.uuid) == 0)
                inv->gpus[k].healthy &= u->gpu.healthy;
        if (ag->mon)
            gv_monitor_set_gpu_info(ag->mon, u->gpu.uuid, u->gpu.healthy, u->settings.split,
                                    u->gpu.reason);
    }
    if (gv_allocator_set_gpus(ag->alloc, ag->cfg, units, n_units, &err) != GV_OK)
        gv_error("device list not updated: %s", err.msg);
    /* CDI spec and the runtime-independent answer (docs/mig-cdi.md) */
    gv_direct_sync(ag->alloc, ag->cfg, gv_gpus_driver_version(ag->gpus), ag->o.install_dir, gpus, n);
    for (size_t r = 0; r < gv_mode_adv_resources(adv); r++)
        endpoint_get(ag, gv_mode_adv_resource(adv, r));
    /* every endpoint gets its list; one no mode advertises now gets an empty one */
    for (size_t e = 0; e < ag->n_eps; e++) {
        const struct gv_plugin_device *devs = NULL;
        size_t nd = 0;
        for (size_t r = 0; r < gv_mode_adv_resources(adv); r++)
            if (strcmp(gv_mode_adv_resource(adv, r), ag->eps[e]->resource) == 0)
                devs = gv_mode_adv_devices(adv, r, &nd);
        if (gv_plugin_set_devices(ag->eps[e]->plugin, devs, nd, &err) != GV_OK)
            gv_error("%s: device list not updated: %s", ag->eps[e]->resource, err.msg);
    }
    gv_mode_mig_gpu_inventory(inv, units, n_units); /* docs/mig-cdi.md: MIG devices as GPUs */
    gv_mode_passthrough_inventory(ag->modes, inv); /* docs/passthrough.md */
    gv_mode_mig_inventory(adv, gpus, n, inv); /* docs/mig-cdi.md: MIG for the scheduler */
    if (ag->pub && gv_publisher_update(ag->pub, inv, &err) != GV_OK)
        gv_error("inventory not published: %s", err.msg);
out:
    gv_mode_adv_free(adv);
    free(inv);
    free(gpus);
    free(units);
}

static void health_changed_on_loop(struct gv_loop *loop, void *ud)
{
    (void)loop;
    rebuild(ud);
}

static void health_changed(void *ud)
{
    struct agent *ag = ud;
    gv_loop_post(ag->loop, health_changed_on_loop, ag);
}

/* ---- configuration reload ------------------------------------------------ */

static void reload(struct agent *ag, bool forced)
{
    char *text = NULL;
    size_t len = 0;
    struct gv_error err;
    struct gv_node_config *cfg = NULL;
    if (access(ag->o.config, F_OK) == 0 &&
        gv_file_read_all(ag->o.config, &text, &len, &err) != GV_OK) {
        gv_error("config reload: %s (keeping the current configuration)", err.msg);
        return;
    }
    if (!forced && ((text == NULL && ag->cfg_text == NULL) ||
                    (text && ag->cfg_text && strcmp(text, ag->cfg_text) == 0))) {
        free(text);
        return;
    }
    gv_status st = text ? gv_node_config_parse(text, len, ag->o.node, &cfg, &err)
                        : gv_node_config_default(&cfg, &err);
    if (st != GV_OK) {
        gv_error("config reload: %s: %s (keeping the current configuration)", ag->o.config,
                 err.msg);
        free(text);
        return;
    }
    if (strcmp(cfg->resource_name, ag->cfg->resource_name) != 0) {
        gv_warn("config reload: resourceName changes from %s to %s only after a restart",
                ag->cfg->resource_name, cfg->resource_name);
        snprintf(cfg->resource_name, sizeof(cfg->resource_name), "%s", ag->cfg->resource_name);
    }
    gv_node_config_free(ag->cfg);
    free(ag->cfg_text);
    if (ag->mon)
        gv_monitor_set_settings(ag->mon, &cfg->metrics);
    ag->cfg = cfg;
    ag->cfg_text = text;
    gv_info("configuration %s loaded", ag->o.config);
    if (cfg->warnings[0])
        gv_warn("configuration %s: %s", ag->o.config, cfg->warnings);
    rebuild(ag);
}

static void reload_timer(struct gv_loop *loop, void *ud)
{
    (void)loop;
    struct agent *ag = ud;
    ag->reload_timer = 0;
    reload(ag, false);
}

/* ConfigMap volumes swap a ..data symlink: watch the directory, debounce, compare content. */
static void on_config_dir(struct gv_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)events;
    struct agent *ag = ud;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    if (ag->reload_timer == 0)
        ag->reload_timer = gv_loop_timer(loop, 100, reload_timer, ag);
}

/* ---- signals, GC, shutdown ------------------------------------------------ */

static void drain_check(struct gv_loop *loop, void *ud)
{
    struct agent *ag = ud;
    bool drained = true;
    for (size_t i = 0; i < ag->n_eps; i++)
        drained &= gv_plugin_drained(ag->eps[i]->plugin);
    if (drained)
        gv_loop_stop(loop);
    else
        gv_loop_timer(loop, 20, drain_check, ag);
}

static void on_signal(struct gv_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)events;
    struct agent *ag = ud;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP) {
            gv_info("SIGHUP: reloading %s", ag->o.config);
            reload(ag, true);
        } else if (!ag->stopping) {
            gv_info("signal %u: shutting down", si.ssi_signo);
            ag->stopping = true;
            for (size_t i = 0; i < ag->n_eps; i++)
                gv_plugin_shutdown(ag->eps[i]->plugin, 2000);
            drain_check(loop, ag);
        }
    }
}

/*
 * /healthz: the loop is alive as long as this timer runs.  /readyz, decided
 * here on the loop (which owns the plugin's state): serving the kubelet,
 * registered, and (with an API server) the pod cache listed.
 */
static void beat_tick(struct gv_loop *loop, void *ud)
{
    struct agent *ag = ud;
    bool sockets = true, registered = true;
    for (size_t i = 0; i < ag->n_eps; i++) {
        sockets &= gv_plugin_socket_present(ag->eps[i]->plugin);
        registered &= ag->eps[i]->reg && gv_registrar_count(ag->eps[i]->reg) > 0;
    }
    const char *no = ag->stopping ? "shutting down"
                     : !sockets   ? "device-plugin socket missing"
                     : !registered ? "not registered with the kubelet yet"
                     : !ag->o.no_kube && !gv_allocator_synced(ag->alloc) ? "pod cache not synced yet"
                                                                      : NULL;
    gv_metrics_http_beat(ag->http, no == NULL, no);
    gv_loop_timer(loop, 1000, beat_tick, ag);
}

static gv_status metrics_render(void *ud, struct gv_buf *out, struct gv_error *err)
{
    return gv_monitor_render(((struct agent *)ud)->mon, out, err);
}

static void gc_tick(struct gv_loop *loop, void *ud)
{
    struct agent *ag = ud;
    gv_allocator_gc(ag->alloc);
    malloc_trim(0); /* give freed cache and Allocate memory back: idle RSS stays small */
    gv_loop_timer(loop, ag->o.gc_s * 1000, gc_tick, ag);
}

/* ---- options ------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpuvisor-node [options]\n"
            "  --node-name NAME         this node (default: $NODE_NAME)\n"
            "  --config PATH            node config file (default " GV_NODE_CONFIG_PATH ")\n"
            "  --plugin-dir DIR         kubelet device-plugin dir (default "
            "/var/lib/kubelet/device-plugins)\n"
            "  --socket-name NAME       our socket in it (default gpuvisor.sock)\n"
            "  --kubelet-socket NAME    the kubelet's (default kubelet.sock)\n"
            "  --state-dir DIR          per-container dirs (default /var/lib/gpuvisor)\n"
            "  --host-state-dir DIR     the same dir as the host sees it (default: state dir)\n"
            "  --install-dir DIR        host dir of lib/libgpuvisor.so and ld.so.preload\n"
            "                           (default /usr/local/gpuvisor)\n"
            "  --nvml-lib PATH          NVML library (default libnvidia-ml.so.1)\n"
            "  --sys-root DIR           root of /sys for NUMA lookups (default /)\n"
            "  --kube-url URL | --kubeconfig PATH | --no-kube\n"
            "                           API server (default: in-cluster, then kubeconfig)\n"
            "  --heartbeat-seconds N    node heartbeat period (default 30)\n"
            "  --health-probe-ms N      GPU reachability probe period (default 10000)\n"
            "  --health-recover-ms N    quiet time after a critical Xid (default 60000)\n"
            "  --allocate-wait-ms N     wait for the pod cache in Allocate (default 5000)\n"
            "  --gc-seconds N           GC period for container dirs (default 60)\n"
            "  --gc-grace-ms N          keep a vanished pod's dir this long (default 60000)\n"
            "  --placement-key-file F   HMAC key authenticating the scheduler's placements\n"
            "  --insecure-unsigned-placements  serve placements without authenticating them\n"
            "  --preload-opt-out-namespaces NS,NS  namespaces whose pods may run without the\n"
            "                           interposer (gpuvisor.io/preload: \"false\"; default none)\n"
            "  --metrics-listen ADDR:PORT  serve /metrics, /healthz, /readyz (default: the\n"
            "                           config's metrics.listen; none when both are empty)\n"
            "  --proc-root DIR          where /proc is, for process cgroups (default /proc)\n"
            "  --mps-control PATH       nvidia-cuda-mps-control for MPS GPUs\n"
            "                           (default /usr/bin/nvidia-cuda-mps-control)\n"
            "  --mps-probe-ms N         how often each MPS daemon is probed (default 10000)\n"
            "  --vfio-bind BDF          bind the GPU's IOMMU group to vfio-pci and exit (refuses a\n"
            "                           busy GPU; docs/passthrough.md)\n"
            "  --vfio-unbind BDF        hand the group back to its host drivers and exit\n"
            "  --version, --help\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
    enum {
        O_NODE = 256, O_CONFIG, O_PLUGIN_DIR, O_SOCKET, O_KUBELET, O_STATE, O_HOST_STATE,
        O_INSTALL, O_NVML, O_SYS, O_URL, O_KUBECONFIG, O_NO_KUBE, O_HB, O_PROBE, O_RECOVER,
        O_WAIT, O_GC, O_GC_GRACE, O_VERSION, O_HELP, O_KEY_FILE, O_INSECURE, O_OPT_OUT, O_METRICS,
        O_PROC, O_MPS, O_MPS_PROBE, O_VFIO_BIND, O_VFIO_UNBIND
    };
    static const struct option opts[] = {
        {"node-name", 1, 0, O_NODE},         {"config", 1, 0, O_CONFIG},
        {"plugin-dir", 1, 0, O_PLUGIN_DIR},  {"socket-name", 1, 0, O_SOCKET},
        {"kubelet-socket", 1, 0, O_KUBELET}, {"state-dir", 1, 0, O_STATE},
        {"host-state-dir", 1, 0, O_HOST_STATE}, {"install-dir", 1, 0, O_INSTALL},
        {"nvml-lib", 1, 0, O_NVML},          {"sys-root", 1, 0, O_SYS},
        {"kube-url", 1, 0, O_URL},           {"kubeconfig", 1, 0, O_KUBECONFIG},
        {"no-kube", 0, 0, O_NO_KUBE},        {"heartbeat-seconds", 1, 0, O_HB},
        {"health-probe-ms", 1, 0, O_PROBE},  {"health-recover-ms", 1, 0, O_RECOVER},
        {"allocate-wait-ms", 1, 0, O_WAIT},  {"gc-seconds", 1, 0, O_GC},
        {"gc-grace-ms", 1, 0, O_GC_GRACE},   {"version", 0, 0, O_VERSION},
        {"help", 0, 0, O_HELP},              {"placement-key-file", 1, 0, O_KEY_FILE},
        {"insecure-unsigned-placements", 0, 0, O_INSECURE},
        {"preload-opt-out-namespaces", 1, 0, O_OPT_OUT},
        {"metrics-listen", 1, 0, O_METRICS}, {"proc-root", 1, 0, O_PROC},
        {"mps-control", 1, 0, O_MPS},        {"mps-probe-ms", 1, 0, O_MPS_PROBE},
        {"vfio-bind", 1, 0, O_VFIO_BIND},    {"vfio-unbind", 1, 0, O_VFIO_UNBIND},
        {0, 0, 0, 0},
    };
    *o = (struct options){
        .node = getenv("NODE_NAME"),
        .config = GV_NODE_CONFIG_PATH,
        .plugin_dir = "/var/lib/kubelet/device-plugins",
        .socket_name = "gpuvisor.sock",
        .kubelet_socket = "kubelet.sock",
        .state_dir = "/var/lib/gpuvisor",
        .install_dir = "/usr/local/gpuvisor",
        .sys_root = "/",
        .heartbeat_s = 30,
        .probe_ms = 10000,
        .recover_ms = 60000,
        .allocate_wait_ms = 5000,
        .gc_s = 60,
        .gc_grace_ms = 60000,
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *num = NULL;
        switch (c) {
        case O_NODE: o->node = optarg; break;
        case O_CONFIG: o->config = optarg; break;
        case O_PLUGIN_DIR: o->plugin_dir = optarg; break;
        case O_SOCKET: o->socket_name = optarg; break;
        case O_KUBELET: o->kubelet_socket = optarg; break;
        case O_STATE: o->state_dir = optarg; break;
        case O_HOST_STATE: o->host_state_dir = optarg; break;
        case O_INSTALL: o->install_dir = optarg; break;
        case O_NVML: o->nvml_lib = optarg; break;
        case O_SYS: o->sys_root = optarg; break;
        case O_URL: o->kube_url = optarg; break;
        case O_KUBECONFIG: o->kubeconfig = optarg; break;
        case O_KEY_FILE: o->placement_key_file = optarg; break;
        case O_INSECURE: o->insecure_unsigned = true; break;
        case O_OPT_OUT: o->opt_out_namespaces = optarg; break;
        case O_NO_KUBE: o->no_kube = true; break;
        case O_HB: num = &o->heartbeat_s; break;
        case O_PROBE: num = &o->probe_ms; break;
        case O_RECOVER: num = &o->recover_ms; break;
        case O_WAIT: num = &o->allocate_wait_ms; break;
        case O_GC: num = &o->gc_s; break;
        case O_GC_GRACE: num = &o->gc_grace_ms; break;
        case O_VERSION: printf("gpuvisor-node %s\n", GV_VERSION); exit(0);
        case O_HELP: usage(stdout); exit(0);
        case O_METRICS: o->metrics_listen = optarg; break;
        case O_PROC: o->proc_root = optarg; break;
        case O_MPS: o->mps_control = optarg; break;
        case O_MPS_PROBE: num = &o->mps_probe_ms; break;
        case O_VFIO_BIND: o->vfio_bind = optarg; break;
        case O_VFIO_UNBIND: o->vfio_unbind = optarg; break;
        default: usage(stderr); return 2;
        }
        if (num) {
            char *end;
            errno = 0;
            *num = strtol(optarg, &end, 10);
            if (errno || *end || *num <= 0) {
                const char *name = "?";
                for (const struct option *op = opts; op->name; op++)
                    if (op->val == c)
                        name = op->name;
                fprintf(stderr, "gpuvisor-node: --%s needs a positive integer, not '%s'\n",
                        name, optarg);
                return 2;
            }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpuvisor-node: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (o->vfio_bind || o->vfio_unbind)
        return 0; /* a one-off helper run: no API server, no key */
    if (!o->no_kube && o->placement_key_file == NULL && !o->insecure_unsigned) {
        /* Fail closed: without a key any pod could hand itself GPUs. */
        fprintf(stderr, "gpuvisor-node: no placement key: give --placement-key-file the file of "
                        "the gpuvisor-placement-key Secret; --insecure-unsigned-placements "
                        "serves placements without authenticating them (docs/isolation.md)\n");
        return 2;
    }
    if (!o->no_kube && (o->node == NULL || *o->node == '\0')) {
        fprintf(stderr, "gpuvisor-node: the node name is needed (--node-name or $NODE_NAME), "
                        "or run with --no-kube\n");
        return 2;
    }
    if (o->host_state_dir == NULL)
        o->host_state_dir = o->state_dir;
    return 0;
}

/* ---- main ------------------------------------------------------------------- */

static int start(struct agent *ag, struct gv_error *err)
{
    const struct options *o = &ag->o;
    char path[4096];
    if (gv_loop_new(&ag->loop, err) != GV_OK)
        return 1;
    if (access(o->config, F_OK) == 0) {
        size_t len;
        if (gv_file_read_all(o->config, &ag->cfg_text, &len, err) != GV_OK ||
            gv_node_config_parse(ag->cfg_text, len, o->node, &ag->cfg, err) != GV_OK) {
            gv_error_prefix(err, "%s", o->config);
            return 2;
        }
    } else if (gv_node_config_default(&ag->cfg, err) != GV_OK) {
        return 1;
    }
    if (ag->cfg->warnings[0])
        gv_warn("configuration %s: %s", o->config, ag->cfg->warnings);
    struct gv_gpus_config gc = {.library = o->nvml_lib, .sys_root = o->sys_root,
                                .probe_interval_ms = o->probe_ms,
                                .recover_after_ms = o->recover_ms};
    if (gv_gpus_open(&gc, &ag->gpus, err) != GV_OK)
        return 1;
    if (!o->no_kube) {
        if (gv_kube_config_load(o->kube_url, o->kubeconfig, &ag->kcfg, err) != GV_OK ||
            gv_kube_client_new(ag->kcfg, &ag->kube, err) != GV_OK) {
            gv_error_prefix(err, "API server configuration");
            return 1;
        }
        long retries = ag->kcfg->max_retries, timeout = ag->kcfg->timeout_ms;
        ag->kcfg->max_retries = 1;
        ag->kcfg->timeout_ms = 3000;
        gv_status st = gv_kube_client_new(ag->kcfg, &ag->kube_writer, err);
        ag->kcfg->max_retries = (int)retries;
        ag->kcfg->timeout_ms = timeout;
        if (st != GV_OK)
            return 1;
        if (gv_publisher_new(ag->kube, o->node, o->heartbeat_s * 1000, &ag->pub, err) != GV_OK)
            return 1;
    }
    if (o->placement_key_file != NULL &&
        gv_placement_key_load(o->placement_key_file, &ag->placement_key, err) != GV_OK)
        return 2;
    if (ag->placement_key == NULL && !o->no_kube)
        gv_warn("INSECURE: no placement key; Allocate serves placement annotations without "
                "authenticating them (docs/isolation.md)");
    if (o->opt_out_namespaces != NULL && (ag->opt_out_text = strdup(o->opt_out_namespaces))) {
        size_t n = 0;
        for (char *save = NULL, *t = strtok_r(ag->opt_out_text, ",", &save); t && n < 64;
             t = strtok_r(NULL, ",", &save))
            ag->opt_out[n++] = t;
    }
    ag->placement = (struct gv_placement_policy){.key = ag->placement_key,
                                                 .opt_out_namespaces = ag->opt_out};
    /* the kubelet's device manager writes it next to the plugin sockets */
    char checkpoint[4200];
    snprintf(checkpoint, sizeof(checkpoint), "%s/kubelet_internal_checkpoint", o->plugin_dir);
    struct gv_allocator_config ac = {.node = o->node ? o->node : "",
                                     .state_dir = o->state_dir,
                                     .host_state_dir = o->host_state_dir,
                                     .install_dir = o->install_dir,
                                     .wait_ms = o->allocate_wait_ms,
                                     .gc_grace_ms = o->gc_grace_ms,
                                     .kubelet_checkpoint = checkpoint,
                                     .placement = &ag->placement};
    struct gv_mode_env env = {.state_dir = o->state_dir, .host_state_dir = o->host_state_dir,
                              .install_dir = o->install_dir, .changed = health_changed,
                              .changed_ud = ag, .mps_control = o->mps_control,
                              .mps_probe_ms = o->mps_probe_ms, .sys_root = o->sys_root};
    if (gv_modes_new(&env, &ag->modes, err) != GV_OK)
        return 1;
    ac.modes = ag->modes;
    if (gv_allocator_new(&ac, ag->kube, ag->kube_writer, &ag->alloc, err) != GV_OK)
        return 1;
    struct gv_monitor_config mc = {.node = o->node ? o->node : "", .state_dir = o->state_dir,
                                   .proc_root = o->proc_root, .nvml_lib = o->nvml_lib,
                                   .kube = ag->kube_writer, .settings = ag->cfg->metrics};
    if (gv_monitor_new(&mc, &ag->mon, err) != GV_OK)
        return 1;
    /* the configured resource is always served, even with no GPU */
    if (endpoint_get(ag, ag->cfg->resource_name) == NULL) {
        gv_error_set(err, GV_EINTERNAL, "cannot serve %s", ag->cfg->resource_name);
        return 1;
    }
    rebuild(ag);
    /*
     * Register once the pod cache has its first list (bounded: an API
     * outage must not keep the GPUs off the node): the kubelet asks
     * GetPreferredAllocation right after, and only the cache knows which
     * assignment the answer must come from.
     */
    if (!gv_allocator_wait_synced(ag->alloc, o->allocate_wait_ms > 0 ? o->allocate_wait_ms : 5000))
        gv_warn("pod cache not synced yet: registering anyway (preferences stay generic until it is)");
    for (size_t i = 0; i < ag->n_eps; i++)
        if (endpoint_serve(ag, ag->eps[i], err) != GV_OK)
            return 1;
    ag->serving = true;
    if (gv_gpus_watch(ag->gpus, health_changed, ag, err) != GV_OK)
        return 1;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    ag->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (ag->sigfd < 0 || gv_loop_add_fd(ag->loop, ag->sigfd, EPOLLIN, on_signal, ag, err) != GV_OK)
        return 1;
    snprintf(path, sizeof(path), "%s", o->config);
    ag->cfg_ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ag->cfg_ino >= 0 &&
        inotify_add_watch(ag->cfg_ino, dirname(path),
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE) >= 0)
        gv_loop_add_fd(ag->loop, ag->cfg_ino, EPOLLIN, on_config_dir, ag, NULL);
    else
        gv_warn("cannot watch %s for changes (%s): reload with SIGHUP", path, strerror(errno));
    gv_loop_timer(ag->loop, o->gc_s * 1000, gc_tick, ag);
    const char *listen = o->metrics_listen ? o->metrics_listen : ag->cfg->metrics.listen;
    if (listen[0] != '\0') {
        struct gv_metrics_http_config hc = {.listen = listen, .render = metrics_render, .ud = ag};
        if (gv_metrics_http_new(&hc, &ag->http, err) != GV_OK)
            return 1;
        beat_tick(ag->loop, ag);
    }
    if (gv_monitor_start(ag->mon, err) != GV_OK)
        return 1;
    for (size_t i = 0; i < ag->n_eps; i++)
        gv_info("gpuvisor-node %s serving %s on %s/%s", GV_VERSION, ag->eps[i]->resource,
                o->plugin_dir, ag->eps[i]->socket);
    return 0;
}

static void stop(struct agent *ag)
{
    /* Order: nothing may call into a part after it is freed. */
    gv_metrics_http_free(ag->http); /* its thread renders from the monitor */
    gv_monitor_free(ag->mon);
    gv_gpus_free(ag->gpus); /* joins the health thread, which posts to the loop */
    for (size_t i = 0; i < ag->n_eps; i++)
        gv_registrar_free(ag->eps[i]->reg);
    for (size_t i = 0; i < ag->n_eps; i++) {
        gv_plugin_free(ag->eps[i]->plugin); /* joins the Allocate workers */
        free(ag->eps[i]);
    }
    free(ag->eps);
    gv_allocator_free(ag->alloc);
    gv_modes_free(ag->modes); /* stops the modes' helpers (MPS daemons) */
    gv_publisher_free(ag->pub);
    gv_kube_client_free(ag->kube_writer);
    gv_kube_client_free(ag->kube);
    gv_kube_config_free(ag->kcfg);
    gv_node_config_free(ag->cfg);
    free(ag->cfg_text);
    gv_placement_key_free(ag->placement_key);
    free(ag->opt_out_text);
    if (ag->sigfd >= 0)
        close(ag->sigfd);
    if (ag->cfg_ino >= 0)
        close(ag->cfg_ino);
    gv_loop_free(ag->loop);
}

int main(int argc, char **argv)
{
    struct agent ag = {.sigfd = -1, .cfg_ino = -1};
    /*
     * One malloc arena for all threads.  glibc gives each thread that
     * allocates its own arena (8 here: Allocate workers, informer, writer,
     * publisher, ...); each keeps touched but free pages, and malloc_trim
     * never shrinks a thread arena's top (only the main arena's).  Measured
     * with bench/bench_node_agent.py, anonymous KiB with / without: start
     * 504 / 564, 110 served pods 1112 / 1412, 500 pods 2640 / 3128.  The
     * threads allocate a few KiB per Allocate or watch event: the shared
     * lock costs nothing measurable (Allocate p99 unchanged).  Set before
     * any thread exists.
     */
    mallopt(M_ARENA_MAX, 1);
    /*
     * A fixed mmap threshold: glibc otherwise raises it to the size of each
     * mmapped block freed, so after the first /metrics answer (a few hundred
     * KiB, docs/observability.md) every later one came from the heap and
     * left it larger and fragmented.  Blocks this size and up are mapped and
     * unmapped, as they were before the first one.
     */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    gv_jalloc_init(); /* the allocator places pending pod forms in a zone (gv_jalloc.h) */
    /* Before any thread exists: every thread inherits the mask, the loop reads a signalfd. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    gv_log_init("gpuvisor-node", GV_LOG_INFO);
    int rc = parse_options(argc, argv, &ag.o);
    if (rc != 0)
        return rc;
    struct gv_error err = {0};
    if (ag.o.vfio_bind || ag.o.vfio_unbind) {
        const char *bdf = ag.o.vfio_bind ? ag.o.vfio_bind : ag.o.vfio_unbind;
        gv_status st = ag.o.vfio_bind ? gv_pt_bind(ag.o.sys_root, bdf, gv_pt_bind_ops_sysfs(), &err)
                                      : gv_pt_unbind(ag.o.sys_root, bdf, gv_pt_bind_ops_sysfs(), &err);
        if (st != GV_OK)
            gv_error("%s %s: %s", ag.o.vfio_bind ? "--vfio-bind" : "--vfio-unbind", bdf, err.msg);
        return st == GV_OK ? 0 : 1;
    }
    rc = start(&ag, &err);
    if (rc == 0 && gv_loop_run(ag.loop, &err) != GV_OK)
        rc = 1;
    if (rc != 0)
        gv_error("%s", err.msg);
    stop(&ag);
    return rc;
}
