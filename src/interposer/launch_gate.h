/*
 * THE LAUNCH GATE: the single place where kernel launches meet the
 * compute-share / priority module (throttle.c, priority.c, throttle_gate.c).
 *
 * Every launch hook in launch.c (cuLaunchKernel, cuLaunchKernelEx,
 * cuLaunchCooperativeKernel, cuLaunchCooperativeKernelMultiDevice,
 * cuGraphLaunch and their _ptsz flavours) calls gv_launch_gate_enter()
 * right before the driver and gv_launch_gate_exit() right after it, once
 * per stream the launch uses, with a struct gv_throttle_launch on its stack.
 * enter() may delay the caller (pacing, priority); it never refuses a launch.
 *
 * Cost rule: with no SM limit and no priority configured, both stay inline,
 * lock-free and syscall-free: one relaxed load and one compare each
 * (bench/bench_launch.c measures the total against the bare driver).
 */
#ifndef GV_LAUNCH_GATE_H
#define GV_LAUNCH_GATE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "common/gv_cuda.h"
#include "interposer/throttle.h"

enum gv_launch_kind {
    GV_LAUNCH_KERNEL,
    GV_LAUNCH_KERNEL_EX,
    GV_LAUNCH_COOPERATIVE,
    GV_LAUNCH_COOPERATIVE_MULTI,
    GV_LAUNCH_GRAPH,
};

/* GV_GATE_UNKNOWN until the first launch reads the configuration. */
enum { GV_GATE_UNKNOWN = 0, GV_GATE_OFF, GV_GATE_ON };
extern _Atomic int gv_gate_state;

CUresult gv_launch_gate_enter_slow(struct gv_throttle_launch *l, enum gv_launch_kind kind,
                                   CUstream stream, const void *key, bool per_thread);
void gv_launch_gate_exit_slow(struct gv_throttle_launch *l, CUresult rc);

/*
 * key: the CUfunction or CUgraphExec (duration estimates are kept per key).
 * per_thread: the _ptsz flavour, where a NULL stream is the per-thread one.
 */
static inline CUresult gv_launch_gate_enter(struct gv_throttle_launch *l, enum gv_launch_kind kind,
                                            CUstream stream, const void *key, bool per_thread)
{
    l->slot = -1;
    if (__builtin_expect(atomic_load_explicit(&gv_gate_state, memory_order_relaxed) == GV_GATE_OFF,
                         1))
        return CUDA_SUCCESS;
    return gv_launch_gate_enter_slow(l, kind, stream, key, per_thread);
}

static inline void gv_launch_gate_exit(struct gv_throttle_launch *l, CUresult rc)
{
    if (__builtin_expect(l->slot < 0, 1))
        return;
    gv_launch_gate_exit_slow(l, rc);
}

#endif
