/*
 * The launch gate's slow path: builds the compute-share module from the
 * interposer's configuration on the first launch and passes each launch
 * through it.  Kept apart from throttle.c so that module stays testable
 * without the rest of libgpuvisor.
 */
#include <pthread.h>

#include "interposer/interposer.h"
#include "interposer/launch_gate.h"
#include "interposer/priority.h"
#include "interposer/throttle.h"

_Static_assert(GV_SHM_SCHED_REGION_BYTES >= GV_SHM_MAX_DEVICES * sizeof(struct gv_throttle_pool),
               "a budget per region device fits the region's sched block");

_Atomic int gv_gate_state;

static pthread_once_t gate_once = PTHREAD_ONCE_INIT;
static struct gv_throttle *gate;
static __typeof__(&cuStreamGetDevice) stream_device;

static void *cuda_sym(void *arg, const char *name)
{
    (void)arg;
    return gv_ip_cuda_sym(name);
}

/*
 * A forked child cannot use its parent's CUDA context (the driver refuses),
 * and the module's locks may have been held by another thread at fork time:
 * the child's launches pass straight to the driver, which reports the error.
 */
static void gate_after_fork(void)
{
    atomic_store(&gv_gate_state, GV_GATE_OFF);
}

static void gate_setup(void)
{
    struct gv_throttle_config cfg = {.priority = -1};
    struct gv_throttle_ops ops;
    struct gv_error err = {0};
    bool any = false;

    gv_ip_setup();
    if (!gv_ip.cfg_ok) {
        /* A malformed limit: memory fails closed elsewhere; compute cannot
         * be enforced from a value we could not read. */
        gv_warn("compute share: configuration unreadable; SM limits and priority not applied");
        goto off;
    }
    cfg.policy = gv_ip.cfg.policy;
    cfg.priority = gv_ip.cfg.has_priority ? gv_ip.cfg.priority : -1;
    cfg.node_dir = gv_ip.cfg.node_dir[0] ? gv_ip.cfg.node_dir : NULL;
    int ndev = 0;
    if (gv_cu.cuDeviceGetCount == NULL || gv_cu.cuDeviceGetCount(&ndev) != CUDA_SUCCESS)
        ndev = 0;
    for (int i = 0; i < ndev && i < GV_THROTTLE_MAX_DEVICES && i < GV_IPCFG_MAX_DEVICES; i++) {
        cfg.sm_limit[i] = gv_ipcfg_sm_limit(&gv_ip.cfg, i);
        /* One budget per container and GPU, in its shared region, under the
         * limit the container's first process registered. */
        int rdev = gv_ip_cuda_dev(i);
        const struct gv_shm_device *info = gv_ip_dev_info(rdev);
        if (info != NULL) {
            /* The region may lower this process's SM limit, never raise it. */
            if (info->sm_limit != 0 && (cfg.sm_limit[i] == 0 || info->sm_limit < cfg.sm_limit[i]))
                cfg.sm_limit[i] = info->sm_limit;
            cfg.pool[i] = (struct gv_throttle_pool *)(void *)gv_shm_sched_region(gv_ip.shm) + rdev;
            struct gv_shm_proc *self = gv_shm_self(gv_ip.shm);
            if (self != NULL)
                cfg.util[i] = &self->util[rdev];
        }
        any = any || cfg.sm_limit[i] != 0;
    }
    if (!any && cfg.priority < 0)
        goto off;
    if (gv_throttle_driver_ops(cuda_sym, NULL, &ops, &err) != GV_OK ||
        gv_throttle_new(&cfg, &ops, &gate, &err) != GV_OK) {
        gv_error("compute share disabled: %s", err.msg);
        goto off;
    }
    if (gate == NULL)
        goto off;
    stream_device = (__typeof__(stream_device))gv_ip_cuda_sym("cuStreamGetDevice");
    gv_info("compute share: policy %d, priority %d", (int)cfg.policy, cfg.priority);
    pthread_atfork(NULL, NULL, gate_after_fork);
    atomic_store(&gv_gate_state, GV_GATE_ON);
    return;
off:
    atomic_store(&gv_gate_state, GV_GATE_OFF);
}

/* The launch's device: its stream's (multi-device launches span several
 * contexts), else the current context's. */
static int launch_device(enum gv_launch_kind kind, CUstream stream)
{
    CUdevice dev;
    if (kind == GV_LAUNCH_COOPERATIVE_MULTI && stream_device != NULL &&
        stream_device(stream, &dev) == CUDA_SUCCESS)
        return dev;
    if (gv_cu.cuCtxGetDevice == NULL || gv_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

CUresult gv_launch_gate_enter_slow(struct gv_throttle_launch *l, enum gv_launch_kind kind,
                                   CUstream stream, const void *key, bool per_thread)
{
    pthread_once(&gate_once, gate_setup);
    if (gate == NULL)
        return CUDA_SUCCESS;
    l->dev = launch_device(kind, stream);
    /* Our events must go on the stream the application meant. */
    l->stream = (stream == NULL && per_thread) ? (void *)CU_STREAM_PER_THREAD : (void *)stream;
    l->key = key;
    gv_throttle_before(gate, l);
    return CUDA_SUCCESS;
}

void gv_launch_gate_exit_slow(struct gv_throttle_launch *l, CUresult rc)
{
    gv_throttle_after(gate, l, rc == CUDA_SUCCESS);
}
