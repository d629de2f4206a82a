/*
 * THE LAUNCH GATE: the single place where kernel launches meet the
 * compute-share / priority module (throttle.c, priority.c).
 *
 * Every launch hook in launch.c (cuLaunchKernel, cuLaunchKernelEx,
 * cuLaunchCooperativeKernel, cuLaunchCooperativeKernelMultiDevice,
 * cuGraphLaunch and their _ptsz flavours) calls gv_launch_gate_enter()
 * right before the driver and gv_launch_gate_exit() right after it, once
 * per stream the launch uses.  enter() may delay the caller (pacing) or
 * refuse the launch by returning an error, which the hook returns without
 * calling the driver.
 *
 * Cost rule: with no SM limit and no priority configured, both must stay
 * inline, lock-free and syscall-free (target <= 50 ns per launch in total,
 * bench/ measures it).
 */
#ifndef GV_LAUNCH_GATE_H
#define GV_LAUNCH_GATE_H

#include "common/gv_cuda.h"

enum gv_launch_kind {
    GV_LAUNCH_KERNEL,
    GV_LAUNCH_KERNEL_EX,
    GV_LAUNCH_COOPERATIVE,
    GV_LAUNCH_COOPERATIVE_MULTI,
    GV_LAUNCH_GRAPH,
};

static inline CUresult gv_launch_gate_enter(enum gv_launch_kind kind, CUstream stream)
{
    (void)kind;
    (void)stream;
    return CUDA_SUCCESS;
}

static inline void gv_launch_gate_exit(enum gv_launch_kind kind, CUstream stream, CUresult rc)
{
    (void)kind;
    (void)stream;
    (void)rc;
}

#endif
