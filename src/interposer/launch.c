/*
 * Kernel-launch hooks: forward to the driver through the launch gate
 * (launch_gate.h), the one call site the compute-share module plugs into.
 */
#include "interposer/interposer.h"
#include "interposer/launch_gate.h"

/* Runs call between enter and exit of the gate for one stream; key is the
 * kernel or graph, pt whether this is the per-thread-stream flavour. */
#define GV_GATED(kind, stream, key, pt, call)                                                      \
    do {                                                                                           \
        struct gv_throttle_launch gate_l_;                                                         \
        CUresult gate_rc_ = gv_launch_gate_enter(&gate_l_, (kind), (stream), (key), (pt));         \
        if (gate_rc_ != CUDA_SUCCESS)                                                              \
            return gate_rc_;                                                                       \
        CUresult rc_ = (call);                                                                     \
        gv_launch_gate_exit(&gate_l_, rc_);                                                        \
        return rc_;                                                                                \
    } while (0)

#define GV_LAUNCH_KERNEL_HOOK(sym, pt)                                                             \
    GV_EXPORT CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,        \
                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,  \
                           CUstream s, void **params, void **extra)                                \
    {                                                                                              \
        GV_NEED_CU(sym);                                                                           \
        GV_GATED(GV_LAUNCH_KERNEL, s, f, pt,                                                       \
                 gv_cu.sym(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));                   \
    }

#define GV_LAUNCH_EX_HOOK(sym, pt)                                                                 \
    GV_EXPORT CUresult sym(const CUlaunchConfig *config, CUfunction f, void **params,              \
                           void **extra)                                                           \
    {                                                                                              \
        GV_NEED_CU(sym);                                                                           \
        GV_GATED(GV_LAUNCH_KERNEL_EX, config != NULL ? config->hStream : NULL, f, pt,              \
                 gv_cu.sym(config, f, params, extra));                                             \
    }

#define GV_LAUNCH_COOP_HOOK(sym, pt)                                                               \
    GV_EXPORT CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,        \
                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,  \
                           CUstream s, void **params)                                              \
    {                                                                                              \
        GV_NEED_CU(sym);                                                                           \
        GV_GATED(GV_LAUNCH_COOPERATIVE, s, f, pt,                                                  \
                 gv_cu.sym(f, gx, gy, gz, bx, by, bz, shmem, s, params));                          \
    }

#define GV_GRAPH_HOOK(sym, pt)                                                                     \
    GV_EXPORT CUresult sym(CUgraphExec g, CUstream s)                                              \
    {                                                                                              \
        GV_NEED_CU(sym);                                                                           \
        GV_GATED(GV_LAUNCH_GRAPH, s, g, pt, gv_cu.sym(g, s));                                      \
    }

GV_LAUNCH_KERNEL_HOOK(cuLaunchKernel, false)
GV_LAUNCH_KERNEL_HOOK(cuLaunchKernel_ptsz, true)
GV_LAUNCH_EX_HOOK(cuLaunchKernelEx, false)
GV_LAUNCH_EX_HOOK(cuLaunchKernelEx_ptsz, true)
GV_LAUNCH_COOP_HOOK(cuLaunchCooperativeKernel, false)
GV_LAUNCH_COOP_HOOK(cuLaunchCooperativeKernel_ptsz, true)
GV_GRAPH_HOOK(cuGraphLaunch, false)
GV_GRAPH_HOOK(cuGraphLaunch_ptsz, true)

GV_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list,
                                                        unsigned int numDevices, unsigned int flags)
{
    GV_NEED_CU(cuLaunchCooperativeKernelMultiDevice);
    /* One gate per device's stream (a launch spans at most one per GPU). */
    struct gv_throttle_launch gl[GV_THROTTLE_MAX_DEVICES];
    unsigned entered = 0;
    CUresult rc = CUDA_SUCCESS;
    for (; list != NULL && entered < numDevices && entered < GV_THROTTLE_MAX_DEVICES; entered++) {
        rc = gv_launch_gate_enter(&gl[entered], GV_LAUNCH_COOPERATIVE_MULTI, list[entered].hStream,
                                  list[entered].function, false);
        if (rc != CUDA_SUCCESS)
            break;
    }
    if (rc == CUDA_SUCCESS)
        rc = gv_cu.cuLaunchCooperativeKernelMultiDevice(list, numDevices, flags);
    for (unsigned i = 0; i < entered; i++)
        gv_launch_gate_exit(&gl[i], rc);
    return rc;
}
