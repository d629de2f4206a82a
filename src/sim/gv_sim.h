/*
 * gpuvisor simulate: replays a cluster trace through the allocation engine
 * (docs/simulate.md).
 *
 * A trace is a node list plus a pod list.  Readers: the Alibaba GPU
 * cluster trace v2023 ("openb") CSVs, Kubernetes JSON dumps (`kubectl get
 * nodes|pods -o json`), and a seeded synthetic generator.  gv_sim_run
 * applies the openb protocol of the FGD artifact (seeded shuffle, inflation
 * by resampling to a target share of GPU capacity, one attempt per pod, no
 * departures) and records allocated vs arrived GPU share.
 */
#ifndef GV_SIM_H
#define GV_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/gv_alloc.h"
#include "common/gv_error.h"

struct gv_sim_trace;

gv_status gv_sim_trace_new(struct gv_sim_trace **out, struct gv_error *err);
void gv_sim_trace_free(struct gv_sim_trace *t);
size_t gv_sim_trace_nodes(const struct gv_sim_trace *t);
size_t gv_sim_trace_pods(const struct gv_sim_trace *t);
/*
 * Replays (gv_sim_run) prefix node names with a per-seed random permutation,
 * as the FGD paper's artifact does, so score ties (smallest name) do not
 * favour the same nodes in every seed.  Off by default; the offline
 * reference keeps the given names.
 */
void gv_sim_trace_set_shuffle_names(struct gv_sim_trace *t, bool on);
/*
 * Replays and the offline reference score every node state however large
 * the cluster (exact FGD), instead of the engine's score budget beyond
 * 5,000 nodes (gv_alloc_config.score_all_nodes; docs/alloc.md, "Score
 * budget").  Off by default: the simulator predicts what the scheduler,
 * with the same defaults, does.
 */
void gv_sim_trace_set_exact(struct gv_sim_trace *t, bool on);
/* Sum over nodes of GPUs x 1000. */
uint64_t gv_sim_trace_gpu_milli(const struct gv_sim_trace *t);
/* Sum over pods of GPUs x milli per GPU. */
uint64_t gv_sim_trace_request_milli(const struct gv_sim_trace *t);

/*
 * openb CSVs, from memory (name is used in messages) or a file.  Node
 * columns sn,cpu_milli,memory_mib,gpu,model; pod columns
 * name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...] (matched by
 * header name; extra columns ignored).  Errors name file, line and field;
 * on error the trace is unchanged.  Pods must be read after nodes: a
 * gpu_spec naming a model no node has is an error.
 */
gv_status gv_sim_parse_openb_nodes(struct gv_sim_trace *t, const char *name, const char *buf,
                                   size_t len, struct gv_error *err);
gv_status gv_sim_parse_openb_pods(struct gv_sim_trace *t, const char *name, const char *buf,
                                  size_t len, struct gv_error *err);
/* Kubernetes List JSON (items[] of Node / Pod objects). */
gv_status gv_sim_parse_k8s_nodes(struct gv_sim_trace *t, const char *name, const char *buf,
                                 size_t len, struct gv_error *err);
gv_status gv_sim_parse_k8s_pods(struct gv_sim_trace *t, const char *name, const char *buf,
                                size_t len, struct gv_error *err);
/*
 * A live cluster in one dump: `kubectl get nodes,pods -A -o json` (a List
 * whose items say kind Node or Pod; other kinds are ignored).  Nodes as in
 * gv_sim_parse_k8s_nodes (gpuvisor's gpuvisor.io/node-gpus inventory when
 * present), running and pending pods as in gv_sim_parse_k8s_pods.
 */
gv_status gv_sim_parse_k8s_cluster(struct gv_sim_trace *t, const char *name, const char *buf,
                                   size_t len, struct gv_error *err);
gv_status gv_sim_load_cluster(struct gv_sim_trace *t, const char *path, struct gv_error *err);
/* Reads path and picks the format: JSON when it starts with '{', else CSV. */
gv_status gv_sim_load_nodes(struct gv_sim_trace *t, const char *path, struct gv_error *err);
gv_status gv_sim_load_pods(struct gv_sim_trace *t, const char *path, struct gv_error *err);

/*
 * Interconnect layout for the nodes that have none of their own (openb CSVs
 * carry none; a cluster dump carries each agent's inventory, which wins).
 * spec is a comma list of nvlink=N and pcie=M: GPUs 0..N-1 of a node form
 * one NVLink island, N..2N-1 the next, and so on; likewise PCIe switches of
 * M GPUs (0 or absent = none).  "nvlink=2,pcie=4" is an 8-GPU PCIe box with
 * NVLink bridges in pairs; "nvlink=8" an NVSwitch box.  On error the trace
 * is unchanged.
 */
gv_status gv_sim_set_topology(struct gv_sim_trace *t, const char *spec, struct gv_error *err);
/* Whether any node has interconnect groups. */
bool gv_sim_trace_has_topology(const struct gv_sim_trace *t);

/*
 * Synthetic cluster and workload (shape in docs/simulate.md).  spec is
 * "default" or a comma list of key=value overriding it: nodes=N, pods=N,
 * frac=P (share of fractional-GPU pods, percent), multi=P (multi-GPU),
 * cpu=P (CPU-only); whole-GPU single pods take the rest.
 */
gv_status gv_sim_synthetic(struct gv_sim_trace *t, const char *spec, uint64_t seed,
                           struct gv_error *err);

/*
 * Priorities for a trace without any (openb lists carry none): a seeded-free,
 * fixed share of the pods loaded so far is high priority (1000), the rest 0,
 * by a hash of each pod's position, so every policy and seed sees the same
 * pods as high.  pct in [0, 100]; 0 clears.  Call after loading the pods.
 */
gv_status gv_sim_set_high_priority(struct gv_sim_trace *t, double pct, struct gv_error *err);

/* One replay's curve: allocated GPU share at arrived share 0,1,..,max %. */
struct gv_sim_curve {
    uint32_t n;            /* points: index i = arrived i % */
    double *allocated;     /* % of GPU capacity allocated when arrived first reached i % */
    uint64_t arrivals, placed, failed;
    double seconds;        /* wall time of the replay */
    uint64_t placement_hash; /* of every decision (arrival, node, GPUs): equal = same replay */
    /* arrivals asking whole devices (MIG, passthrough, mdev), placed by
     * count as the scheduler does (docs/simulate.md, "Whole devices") */
    uint64_t whole_arrivals, whole_placed, whole_failed;
    /* Containers given 2+ GPUs on nodes with a known interconnect, by how
     * their GPUs are joined: all on one NVLink island, else all under one
     * PCIe switch, else spanning; and "tight" when they touch as few NVLink
     * islands and PCIe switches as the node's layout allows for that many
     * GPUs (docs/simulate.md, "Topology"). */
    uint64_t multi_gpu, multi_nvlink, multi_pcie, multi_spanning, multi_tight;
    /* With priorities (gv_sim_set_high_priority): high-priority arrivals,
     * placed as they arrived, placed by preempting, not placed; lower
     * pods evicted and the GPU share (milli) they held. */
    uint64_t high_arrivals, high_placed, high_preempted, high_failed;
    uint64_t evicted, evicted_milli;
};

void gv_sim_curve_free(struct gv_sim_curve *c);

/* Replays t under policy with the openb protocol; inflate is the target
 * arrived share (1.3 = 130 %). */
gv_status gv_sim_run(const struct gv_sim_trace *t, gv_alloc_policy policy, uint64_t seed,
                     double inflate, struct gv_sim_curve *out, struct gv_error *err);
/* The same with the engine scoring every node (gv_alloc_config.exhaustive):
 * identical decisions, for benchmarks of the index. */
gv_status gv_sim_run_exhaustive(const struct gv_sim_trace *t, gv_alloc_policy policy,
                                uint64_t seed, double inflate, struct gv_sim_curve *out,
                                struct gv_error *err);

/*
 * Offline reference for one seed (docs/simulate.md): the same arrivals as
 * gv_sim_run up to 100 % arrived, seen all at once.  oracle: unallocated %
 * when they are placed largest GPU demand first (better of best fit and FGD
 * knowing the whole workload); bound: the LP relaxation's lower bound on
 * the unallocated % of any placement (online or offline) of those pods.
 */
struct gv_sim_reference {
    double oracle_unalloc_pct;
    /* the LP bound (docs/simulate.md, "LP bound"), never below the next */
    double bound_unalloc_pct;
    /* the capacity bound alone: GPU model sets, total CPU, total memory */
    double capacity_bound_unalloc_pct;
    double seconds;    /* all of it */
    double lp_seconds; /* the LP's share */
};
gv_status gv_sim_reference(const struct gv_sim_trace *t, uint64_t seed,
                           struct gv_sim_reference *out, struct gv_error *err);
/* The bounds alone (LP and capacity), without the oracle's three replays:
 * oracle_unalloc_pct is NAN (`gpuvisor simulate --reference bounds`). */
gv_status gv_sim_reference_bounds(const struct gv_sim_trace *t, uint64_t seed,
                                  struct gv_sim_reference *out, struct gv_error *err);

/*
 * Churn replay with periodic defragmentation (docs/simulate.md, "Pods
 * departing and defragmentation"): the protocol's arrivals, but each pod
 * departs after a lifetime drawn uniformly in 1..2L arrivals, L chosen so
 * that the offered GPU demand averages `load` x capacity.  Every
 * defrag_every arrivals the engine's defragmentation planner
 * (src/alloc/gv_defrag.h) moves up to max_moves pods (every pod movable).
 * Figures are taken after a warm-up of 2L arrivals.  With priorities a
 * high-priority pod that does not fit preempts, and if nothing can be
 * evicted it waits (retried, oldest first, 4 a step; gives
 * up after 2L arrivals); its wait is counted in arrivals.
 */
struct gv_sim_churn_opts {
    double load;           /* offered GPU demand, share of capacity (0 < load <= 3) */
    uint64_t lifetimes;    /* arrivals replayed, in mean lifetimes after the warm-up (>= 1) */
    uint64_t defrag_every; /* arrivals between defrag passes; 0 = never */
    uint32_t max_moves;    /* moves per pass */
};
struct gv_sim_churn_result {
    uint64_t arrivals, failed; /* after the warm-up */
    double failed_pct;     /* GPU request of failed arrivals, % of GPU request arrived */
    double alloc_pct;      /* allocated GPU share, % of capacity, mean over samples */
    double frag_pct;       /* fragmented share of the free GPU share, %, mean over samples */
    double idle_gpus;      /* GPUs no task holds, mean over samples */
    uint64_t passes, moves;
    double frag_recovered_pct; /* mean over passes of fragmentation before - after, points of % */
    uint32_t idle_recovered;   /* GPUs freed by the passes, in all */
    double plan_seconds;   /* CPU time in the planner, in all */
    double seconds;
    /* With priorities (gv_sim_set_high_priority or the CSV column), after
     * the warm-up: high-priority arrivals placed at once, by preemption,
     * after waiting, or not (gave up after 2L arrivals, or still waiting
     * at the end); low-priority pods evicted; the waits of the placed high
     * pods in arrivals (the replay's clock: L arrivals = one mean
     * lifetime), 0 for those placed on arrival. */
    uint64_t high_arrivals, high_at_once, high_preempted, high_waited, high_unplaced;
    uint64_t low_evicted;
    double wait_mean, wait_p95, wait_p99;
    uint64_t lifetime_mean; /* L */
};
/* "load=90,lifetimes=10,moves=10" (load in percent) over the values in *o;
 * GV_EINVAL naming the item on a bad spec, *o unchanged then. */
gv_status gv_sim_churn_parse(const char *spec, struct gv_sim_churn_opts *o, struct gv_error *err);
gv_status gv_sim_churn(const struct gv_sim_trace *t, gv_alloc_policy policy, uint64_t seed,
                       const struct gv_sim_churn_opts *o, struct gv_sim_churn_result *out,
                       struct gv_error *err);

/* Seeded PRNG shared by the generator and the protocol (xoshiro256**). */
struct gv_sim_rng {
    uint64_t s[4];
};
void gv_sim_rng_seed(struct gv_sim_rng *r, uint64_t seed);
uint64_t gv_sim_rng_next(struct gv_sim_rng *r);
/* Uniform in [0, n). */
uint64_t gv_sim_rng_below(struct gv_sim_rng *r, uint64_t n);

/* --- reports ------------------------------------------------------------ */

/* Results of every (policy, seed) replay, for the table, CSV and plot. */
struct gv_sim_report {
    uint32_t n_policies, n_seeds;
    gv_alloc_policy policies[GV_ALLOC_POLICY_COUNT];
    uint64_t *seeds;
    struct gv_sim_curve *curves; /* [policy * n_seeds + seed] */
    uint32_t max_pct;            /* last arrived % on the grid */
    struct gv_sim_reference *refs; /* [seed], or NULL when not computed */
    bool topology;                 /* the trace has interconnect groups: report them */
};

/* Growable text buffer the report writers fill. */
struct gv_sim_buf {
    char *data;
    size_t len, cap;
    bool oom;
};
void gv_sim_buf_printf(struct gv_sim_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void gv_sim_buf_free(struct gv_sim_buf *b);

/* Mean and sample sd over seeds of the unallocated % at 100 % arrived. */
void gv_sim_headline(const struct gv_sim_report *r, uint32_t policy_idx, double *mean, double *sd);
/* Table (mean +- sd at arrived 80..max step 10) plus the summary line. */
void gv_sim_report_table(const struct gv_sim_report *r, const char *title, struct gv_sim_buf *b);
/* policy,seed,arrived_pct,allocated_pct rows. */
void gv_sim_report_csv(const struct gv_sim_report *r, struct gv_sim_buf *b);
/* SVG line chart: allocated % vs arrived %, one line per policy (seed mean). */
void gv_sim_report_svg(const struct gv_sim_report *r, const char *title, struct gv_sim_buf *b);

#endif
