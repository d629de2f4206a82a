/*
 * Private to the monitor's own files (monitor.c: lifecycle; nvml_sample.c:
 * the GPUs; sample.c: cgroups, records and regions; render.c: the
 * exposition; backstop.c: the enforcement backstop): the monitor's state and
 * the helpers they share.  Tests use monitor_internal.h, not this.
 * Imports run one way: monitor.c -> backstop.c -> sample.c -> nvml_sample.c,
 * render.c -> sample.c.
 */
#ifndef GV_NODE_MONITOR_STATE_H
#define GV_NODE_MONITOR_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/gv_nvml.h"
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
    /* slots whose process never learned its host pid: the pid it has in its
     * own namespace (the slot's pid), matched through /proc/<pid>/status */
    int32_t nspids[MAX_HOSTPIDS];
    uint64_t nspid_bytes[MAX_HOSTPIDS][GV_MONITOR_MAX_GPUS];
    unsigned n_nspids;
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

/* backstop.c */
void *backstop_main(void *arg);

/* nvml_sample.c */
void sample_gpu(struct gv_monitor *m, struct gpu *g);
void drain_xids(struct gv_monitor *m);
void nvml_open(struct gv_monitor *m);
int gpu_by_uuid(const struct gv_monitor *m, const char *uuid);

/* sample.c */
uint64_t now_ns(clockid_t c);
void *grow(void *p, size_t *cap, size_t need, size_t size);
bool pid_cgroup(const struct gv_monitor *m, unsigned pid, char *uid, char *cid);
/* The pid host process pid has in its innermost pid namespace (NSpid). */
bool pid_nspid(const struct gv_monitor *m, unsigned pid, int32_t *nspid);
void ensure_region(struct gv_monitor *m, struct ctr *c);
void sample_release(struct gv_monitor *m);
void sample(struct gv_monitor *m, bool regions);
int ctr_dev(const struct ctr *c, int gpu);

#endif
