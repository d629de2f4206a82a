/*
 * The node agent's monitor (docs/observability.md): what each container on
 * this node is given and uses, per GPU, for the Prometheus exposition on
 * /metrics, and the enforcement backstop (docs/isolation.md) that watches
 * real per-process GPU memory through NVML because the interposer is
 * cooperative.
 *
 * Sources, in order of trust:
 *  - the container record, written by Allocate into the pod's directory
 *    (<state>/containers/<uid>/.ctr-<container>.json; root-owned, not
 *    mounted into any container): namespace, pod, container, GPUs with
 *    their memory and compute limits, priority.  So a container is on
 *    /metrics from Allocate on, before its first CUDA call, and the limits
 *    the backstop enforces are not ones a tenant can write.
 *  - the container's shared region (read-only, through gv_shm.h): exact
 *    memory in use on every allocation path, processes, the throttle's
 *    measured GPU time.  Tenant-writable, so it is reported, never trusted
 *    for enforcement.
 *  - NVML: per-GPU counters, per-process memory and SM utilisation, Xids;
 *    processes are mapped to containers through the region's host pids and
 *    /proc/<pid>/cgroup.
 */
#ifndef GV_NODE_MONITOR_H
#define GV_NODE_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/gv_buf.h"
#include "common/gv_error.h"
#include "kube/gv_kube.h"
#include "node/monitor/gv_metrics.h"

struct gv_alloc_container_assign;

#define GV_MONITOR_MAX_GPUS 16

/*
 * Allocate's hook: records the container it just served (namespace, pod,
 * container, GPUs and limits; priority from the limits text).  Failures are
 * logged, never fatal: metrics must not fail a container.
 */
void gv_monitor_note_allocate(const char *state_dir, json_t *pod,
                              const struct gv_alloc_container_assign *c, bool limited,
                              const char *limits, size_t limits_len);

struct gv_monitor_config {
    const char *node;
    const char *state_dir;   /* <state>/containers/<uid>/... */
    const char *proc_root;   /* NULL: "/proc" (tests point it at a fake tree) */
    const char *nvml_lib;    /* NULL: "libnvidia-ml.so.1" */
    struct gv_kube_client *kube; /* events on pods (NULL: none) */
    struct gv_metrics_settings settings;
};

struct gv_monitor;

gv_status gv_monitor_new(const struct gv_monitor_config *cfg, struct gv_monitor **out,
                         struct gv_error *err);
/* Stops the backstop thread and unloads NVML. */
void gv_monitor_free(struct gv_monitor *m);
/* Starts the backstop thread (when the settings ask for one). */
gv_status gv_monitor_start(struct gv_monitor *m, struct gv_error *err);
/* Settings changed on config reload (listen address changes need a restart). */
void gv_monitor_set_settings(struct gv_monitor *m, const struct gv_metrics_settings *s);
/* Marks whether GPU uuid is healthy and which slices the node advertises (for metrics). */
void gv_monitor_set_gpu_info(struct gv_monitor *m, const char *uuid, bool healthy, unsigned slices,
                             const char *reason);

/* Samples now and appends the Prometheus text exposition (format 0.0.4) to out. */
gv_status gv_monitor_render(struct gv_monitor *m, struct gv_buf *out, struct gv_error *err);
/* One backstop pass now (tests; the thread calls it every period). */
void gv_monitor_backstop_once(struct gv_monitor *m);

/*
 * Pod uid and container id from the text of /proc/<pid>/cgroup (cgroup v1
 * or v2, cgroupfs or systemd drivers, containerd / CRI-O / docker).  False
 * when the process is not in a pod.  Public for tests and fuzzing.
 */
bool gv_monitor_parse_cgroup(const char *text, char *uid, size_t uid_cap, char *cid,
                             size_t cid_cap);

#endif
