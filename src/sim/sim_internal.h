/* Internal structures of the simulator (not part of the API). */
#ifndef GV_SIM_INTERNAL_H
#define GV_SIM_INTERNAL_H

#include "contracts/podspec.h"
#include "sim/gv_sim.h"

struct sim_node {
    struct gv_alloc_node_spec spec; /* owns name, gpus and their strings */
    /* whole devices (MIG, passthrough, mdev) per resource, placed by count */
    struct gv_podspec_whole *whole;
    uint32_t n_whole;
    /* interconnect groups per GPU index (gv_alloc_node_set_links): 0 = none;
     * all zero when the node has no topology */
    uint16_t nvlink[GV_ALLOC_MAX_NODE_GPUS], pcie[GV_ALLOC_MAX_NODE_GPUS];
    bool links;
};

struct gv_sim_trace {
    struct sim_node *nodes;
    size_t n_nodes, cap_nodes;
    struct gv_alloc_request **pods; /* templates; uid set per arrival */
    /* parallel to pods: the whole-device counts of pods asking some, else NULL */
    struct gv_podspec_whole_req **wreq;
    size_t n_pods, cap_pods;
    bool shuffle_names; /* gv_sim_trace_set_shuffle_names */
    bool exact;         /* gv_sim_trace_set_exact */
    int32_t *prio;      /* PriorityClass values of pods[0..n_prio) (priority.c); NULL = none */
    size_t n_prio;
    /* the CSV reader's scratch set of node names (trace.c, node_seen):
     * open addressing, a slot holds 1 + the node's index, 0 = empty */
    uint32_t *name_set;
    size_t name_set_cap;
};

/* priority.c: with priorities set, a pod that does not fit preempts lower
 * ones as the scheduler's preempt verb would (docs/simulate.md,
 * "Priorities and preemption").  The pods placed so far carry their
 * priority as the engine's victim mark; k moves kube-scheduler's sample
 * of nodes from attempt to attempt.  Each victim is released from the
 * engine, then passed to evicted(ud, uid) (the replay's bookkeeping).  True
 * when r got placed (a filled). */
bool sim_preempt(struct gv_alloc_cluster *c, struct gv_alloc_request *r, int32_t prio,
                 char *const *names, size_t n_nodes, uint64_t k, struct gv_alloc_assignment *a,
                 void (*evicted)(void *ud, const char *uid), void *ud);
/* Pod i's priority (priority.c), growing t->prio to the pods loaded. */
gv_status sim_set_priority(struct gv_sim_trace *t, size_t i, int32_t prio, struct gv_error *err);

/* Deep copy of a node spec (labels dropped). */
gv_status sim_add_node_spec(struct gv_sim_trace *t, const struct gv_alloc_node_spec *spec,
                            struct gv_error *err);
/* A uniform node: n_gpus of one model, uuids "<name>-gpu<i>", no task limit. */
gv_status sim_add_node(struct gv_sim_trace *t, const char *name, int64_t cpu, int64_t mem,
                       uint32_t n_gpus, const char *model, uint64_t gpu_mem,
                       struct gv_error *err);
/* Takes ownership of r (freed on failure). */
gv_status sim_add_pod(struct gv_sim_trace *t, struct gv_alloc_request *r, struct gv_error *err);
/* The same for a pod asking whole devices (w copied; r may ask GPU shares too, then it never fits). */
gv_status sim_add_whole_pod(struct gv_sim_trace *t, struct gv_alloc_request *r,
                            const struct gv_podspec_whole_req *w, struct gv_error *err);
/* Whether name is a whole-device resource here: by its form or listed by a node of t. */
bool sim_whole_known(const struct gv_sim_trace *t, const char *name);
/* Pods asking whole devices. */
size_t sim_whole_pods(const struct gv_sim_trace *t);
/* Sets node i's interconnect groups (n entries, NULL arrays = none). */
gv_status sim_node_set_links(struct gv_sim_trace *t, size_t i, const uint32_t *nvlink,
                             const uint32_t *pcie, size_t n, struct gv_error *err);
/*
 * One key of a "key=N,key=N" list (kv.c): its value goes to *dst, at most
 * max.  With seen set, the key may appear once and the list may not end in
 * a comma; without, the last value wins (--synthetic's behaviour).
 */
struct sim_kv {
    const char *key;
    uint64_t *dst;
    uint64_t max;
    bool *seen;
};
/* Parses spec; errors start with what and name the item. */
gv_status sim_parse_kv(const char *what, const char *spec, const struct sim_kv *keys, size_t n_keys,
                       struct gv_error *err);
/* Frees every node and pod (the trace becomes empty). */
void sim_trace_clear(struct gv_sim_trace *t);
/* GPU request of a pod in milli (GPUs x share). */
uint64_t sim_pod_milli(const struct gv_alloc_request *r);
/* The engine's defaults, exact when the trace says so (run.c). */
void sim_engine_config(const struct gv_sim_trace *t, struct gv_alloc_config *cfg);

/* Adds t's nodes to c (names[i] instead of their own when names is not
 * NULL), with their interconnect groups. */
gv_status sim_engine_nodes(const struct gv_sim_trace *t, const char *const *names,
                           struct gv_alloc_cluster *c, struct gv_error *err);

/* The protocol's arrival sequence for a seed: the trace shuffled, then
 * uniform resamples with replacement (indices into t->pods). */
struct sim_arrivals {
    const struct gv_sim_trace *t;
    struct gv_sim_rng rng;
    size_t *order;
    uint64_t k;
};
gv_status sim_arrivals_init(struct sim_arrivals *a, const struct gv_sim_trace *t, uint64_t seed,
                            struct gv_error *err);
size_t sim_arrivals_next(struct sim_arrivals *a);
void sim_arrivals_fini(struct sim_arrivals *a);

/*
 * LP bound (lpbound.c, docs/simulate.md "LP bound"): the most GPU request,
 * in milli, that any placement of the pods arr[0..n) (indices into t->pods,
 * repeats allowed) can allocate on t's empty cluster, from GLPK's optimum
 * of the relaxation.  ok is false only with an error.
 */
struct sim_lp {
    double alloc_milli;
    double seconds;
    size_t classes, types, columns, rows;
    bool ok;
};
gv_status sim_lp_bound(const struct gv_sim_trace *t, const size_t *arr, size_t n,
                       struct sim_lp *out, struct gv_error *err);

#endif
