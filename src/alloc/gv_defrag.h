/*
 * Defragmentation planning (docs/alloc.md, "Defragmentation"): which running
 * pods to move so that the fewest moves free the most whole GPUs, or let
 * pending pods fit.
 *
 * A move is not a migration: the pod is evicted, its controller creates a
 * replacement, and the scheduler places that one wherever the engine then
 * chooses.  So the planner never picks a destination: it releases the pod
 * in the engine and asks gv_alloc_pick where it would go, exactly as the
 * scheduler will.  A plan is only as good as that prediction; the callers
 * that carry it out (kubectl gpuvisor defrag --apply) check each move
 * against it and stop at the first difference.
 *
 * Same rules as the rest of the engine: pure C, no I/O, one thread.
 */
#ifndef GV_DEFRAG_H
#define GV_DEFRAG_H

#include "alloc/gv_alloc.h"

/* One placed pod the planner may consider. */
struct gv_defrag_pod {
    const struct gv_alloc_request *req;   /* uid = the placed pod's uid */
    const struct gv_alloc_assignment *at; /* where it is now (its annotation) */
    bool movable;  /* evictable: owned by a controller, not excluded by the caller */
    int32_t group; /* disruption budget it counts against (a PDB), -1 none */
};

struct gv_defrag_input {
    const struct gv_defrag_pod *pods;
    size_t n_pods;
    /* evictions each group still allows (a PDB's disruptionsAllowed) */
    const uint32_t *group_budget;
    size_t n_groups;
    /* pods waiting for GPUs, in the order they would be scheduled */
    const struct gv_alloc_request *const *pending;
    size_t n_pending;
    uint32_t max_moves; /* 0 = no moves (the plan only measures) */
    /* Drains measured in the first round, cheapest first (fewest pods, then
     * least GPU share); 0 = every one.  Bounds the planning time: each
     * measure is a few engine decisions (docs/alloc.md). */
    uint32_t max_drains;
};

struct gv_defrag_move {
    size_t pod;                    /* index into gv_defrag_input.pods */
    struct gv_alloc_assignment to; /* where the engine re-places it */
    /* the cluster after this move (and the ones before it) */
    uint32_t idle_gpus;
    uint32_t pending_fit;
};

/* Measures of one cluster state. */
struct gv_defrag_state {
    uint32_t idle_gpus;   /* healthy GPUs no task holds */
    uint32_t pending_fit; /* pending pods that fit, placed in order */
    struct gv_alloc_frag frag;
};

struct gv_defrag_plan {
    struct gv_defrag_move *moves; /* in the order to carry them out */
    size_t n_moves;
    struct gv_defrag_state before, after;
    uint32_t evaluated; /* candidate drains simulated (for benchmarks) */
};

/*
 * Plans moves on c, which must hold every pod of in->pods placed at its
 * assignment.  The cluster is back in its original state on return (each
 * trial is undone); the plan's moves replayed in order with
 * gv_alloc_release + gv_alloc_place(to) reproduce plan->after.  Nothing is
 * observed into the workload model.  GV_EINVAL on inconsistent input (a pod
 * not placed, a group out of range), GV_ENOMEM.
 */
gv_status gv_defrag_plan(struct gv_alloc_cluster *c, const struct gv_defrag_input *in,
                         struct gv_defrag_plan *out, struct gv_error *err);
void gv_defrag_plan_free(struct gv_defrag_plan *p);

/* The measures of the cluster as it is (pending pods tried and undone). */
gv_status gv_defrag_measure(struct gv_alloc_cluster *c,
                            const struct gv_alloc_request *const *pending, size_t n_pending,
                            struct gv_defrag_state *out, struct gv_error *err);

#endif
