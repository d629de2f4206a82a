/*
 * Internal interface between the parts of libgpuvisor.so (loader.c,
 * devices.c, memory.c, nvml_hooks.c, launch.c).  Nothing here is exported:
 * the library is built with -fvisibility=hidden and a version script
 * generated from hooks.h; only GV_EXPORT functions are visible.
 */
#ifndef GV_INTERPOSER_H
#define GV_INTERPOSER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/gv_cuda.h"
#include "common/gv_log.h"
#include "common/gv_nvml.h"
#include "interposer/config.h"
#include "interposer/hooks.h"
#include "shm/gv_shm.h"

#define GV_EXPORT __attribute__((visibility("default")))

/* Typed pointers to the real driver / NVML functions (NULL when absent). */
struct gv_cuda_real {
#define GV_X_HOOK(sym, base, ver, pt) __typeof__(&sym) sym;
#define GV_X_USED(sym) __typeof__(&sym) sym;
    GV_CUDA_HOOKS(GV_X_HOOK)
    GV_CUDA_USED(GV_X_USED)
#undef GV_X_HOOK
#undef GV_X_USED
};

struct gv_nvml_real {
#define GV_X(sym) __typeof__(&sym) sym;
    GV_NVML_HOOKS(GV_X)
    GV_NVML_USED(GV_X)
#undef GV_X
};

extern struct gv_cuda_real gv_cu;
extern struct gv_nvml_real gv_nv;

/* Process-wide state, set up once by gv_ip_setup(). */
struct gv_ip_state {
    struct gv_ipcfg cfg;
    bool cfg_ok;         /* false: a malformed value; enforcement fails closed */
    struct gv_shm *shm;  /* NULL: the region could not be opened or trusted */
};
extern struct gv_ip_state gv_ip;

/* Loads configuration and attaches to the shared region (once). */
void gv_ip_setup(void);
/* Loads libcuda.so.1 and resolves gv_cu (once); false if it is absent. */
bool gv_ip_cuda_ready(void);
/* Any symbol of the real libcuda.so.1 (NULL when absent), e.g. for throttle ops. */
void *gv_ip_cuda_sym(const char *name);
/* Same for libnvidia-ml.so.1 and gv_nv. */
bool gv_ip_nvml_ready(void);

/* Returns CUDA_ERROR_NOT_SUPPORTED from the hook when the real function is missing. */
#define GV_NEED_CU(sym)                                                                            \
    do {                                                                                           \
        if (!gv_ip_cuda_ready() || gv_cu.sym == NULL)                                              \
            return CUDA_ERROR_NOT_SUPPORTED;                                                       \
    } while (0)
#define GV_NEED_NVML(sym)                                                                          \
    do {                                                                                           \
        if (!gv_ip_nvml_ready() || gv_nv.sym == NULL)                                              \
            return NVML_ERROR_FUNCTION_NOT_FOUND;                                                  \
    } while (0)

/*
 * Device mapping (devices.c).  A "region device" is an index into the
 * shared region's device table (keyed by GPU uuid, so every process of the
 * container agrees whatever its CUDA_VISIBLE_DEVICES).
 */
#define GV_DEV_UNTRACKED (-1) /* no accounting for this device: pass through */
#define GV_DEV_DENY (-2)      /* limits configured but unenforceable: fail closed */
/* Region device of CUDA ordinal dev (the index the application sees). */
int gv_ip_cuda_dev(CUdevice dev);
/* Region device of the current context's device (or GV_DEV_UNTRACKED). */
int gv_ip_current_dev(void);
/* Region device of an NVML handle (GV_DEV_UNTRACKED when not ours to limit). */
int gv_ip_nvml_dev(nvmlDevice_t dev);
/* The region's view of a device (limit, physical size), or NULL. */
const struct gv_shm_device *gv_ip_dev_info(int rdev);

/* Memory view shared by cuMemGetInfo and NVML: false when unlimited. */
bool gv_ip_mem_view(int rdev, uint64_t real_free, uint64_t *free_out, uint64_t *total_out,
                    uint64_t *used_out);

#endif
