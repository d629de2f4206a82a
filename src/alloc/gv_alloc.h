/*
 * gpuvisor allocation engine: the one brain that decides where GPU slices go.
 *
 * Used by the scheduler extender (filter / prioritize / bind), the node agent
 * (assignment decoding), the admission webhook (request validation) and
 * `gpuvisor simulate`.  Pure C: no I/O, no globals, no JSON.  Callers turn
 * their inputs (Kubernetes objects, trace rows) into the neutral structs
 * below; src/contracts/podspec.h does that for Pod and Node JSON.
 *
 * Not thread-safe: one gv_alloc_cluster belongs to one thread at a time (the
 * scheduler guards its cluster with a lock).  See docs/alloc.md.
 */
#ifndef GV_ALLOC_H
#define GV_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

/* ------------------------------------------------------------------------ */
/* Limits (part of the stable ABI between scheduler and node agent).        */

#define GV_ALLOC_MILLI 1000          /* compute of one whole GPU */
#define GV_ALLOC_MAX_CONTAINERS 16   /* GPU-requesting containers per pod */
#define GV_ALLOC_MAX_DEVICES 16      /* GPUs per container */
#define GV_ALLOC_MAX_NODE_GPUS 64    /* GPUs per node */
#define GV_ALLOC_UUID_MAX 96         /* GPU or MIG uuid, with NUL */
#define GV_ALLOC_NODE_MAX 254        /* node name (DNS subdomain), with NUL */
#define GV_ALLOC_CNAME_MAX 64        /* container name (DNS label), with NUL */
#define GV_ALLOC_MODEL_MAX 96        /* GPU model name, with NUL */
#define GV_ALLOC_UID_MAX 128         /* pod uid, with NUL */
#define GV_ALLOC_REASON_MAX 256      /* filter reason, with NUL */
/* Upper bound of an encoded assignment (annotation value), with NUL. */
#define GV_ALLOC_ASSIGNMENT_MAX                                                \
    (16 + GV_ALLOC_NODE_MAX +                                                  \
     GV_ALLOC_MAX_CONTAINERS * (GV_ALLOC_CNAME_MAX + 2 +                       \
                                GV_ALLOC_MAX_DEVICES * (GV_ALLOC_UUID_MAX + 32)))

/* ------------------------------------------------------------------------ */
/* Kubernetes quantities ("100k", "4Gi", "1500m", "2e3").                    */

/*
 * Parses a Kubernetes quantity and returns ceil(value * mul / div) in *out
 * (mul, div > 0), the way resource.Quantity's Value()/MilliValue() round.
 * *exact (may be NULL) tells whether no rounding happened.  Negative values,
 * malformed text and results above INT64_MAX are errors (GV_EPARSE /
 * GV_ERANGE) with a message quoting the text.
 */
gv_status gv_quantity_parse(const char *text, int64_t mul, int64_t div, int64_t *out,
                            bool *exact, struct gv_error *err);
/* Whole units, rounded up: "1500m" -> 2, "2e3" -> 2000, "4Gi" -> 4294967296. */
gv_status gv_quantity_value(const char *text, int64_t *out, struct gv_error *err);
/* Thousandths: "1500m" -> 1500, "2" -> 2000. */
gv_status gv_quantity_milli(const char *text, int64_t *out, struct gv_error *err);
/* Whole units that must be an integer (extended resources): "1500m" fails. */
gv_status gv_quantity_integer(const char *text, int64_t *out, struct gv_error *err);

/* ------------------------------------------------------------------------ */
/* Configuration.                                                           */

typedef enum {
    GV_ALLOC_POLICY_BINPACK = 0, /* fill the fullest node that fits */
    GV_ALLOC_POLICY_SPREAD,      /* use the emptiest node */
    GV_ALLOC_POLICY_BESTFIT,     /* least weighted free resources left */
    GV_ALLOC_POLICY_FGD,         /* fragmentation gradient descent */
    GV_ALLOC_POLICY_COUNT
} gv_alloc_policy;

typedef enum {
    GV_ALLOC_GPU_BINPACK = 0, /* fullest GPUs of the node first */
    GV_ALLOC_GPU_SPREAD,      /* emptiest GPUs first */
    GV_ALLOC_GPU_POLICY_COUNT
} gv_alloc_gpu_policy;

/* "binpack" etc. <-> enum; parse is case-insensitive, returns -1 if unknown. */
const char *gv_alloc_policy_name(gv_alloc_policy p);
int gv_alloc_policy_parse(const char *text);
const char *gv_alloc_gpu_policy_name(gv_alloc_gpu_policy p);
int gv_alloc_gpu_policy_parse(const char *text);

/* Extended-resource names the request parser reads (HAMi names by default). */
struct gv_alloc_resource_names {
    const char *gpu;          /* "nvidia.com/gpu": GPUs per container */
    const char *mem;          /* "nvidia.com/gpumem": MiB per GPU */
    const char *mem_pct;      /* "nvidia.com/gpumem-percentage": 1..100 */
    const char *cores;        /* "nvidia.com/gpucores": percent per GPU */
    const char *priority;     /* "nvidia.com/priority" */
    const char *mem_gib;      /* "aliyun.com/gpu-mem": GiB per container */
};

struct gv_alloc_config {
    struct gv_alloc_resource_names res;
    uint64_t default_mem_mib;       /* memory when none asked; 0 = whole GPU */
    uint32_t default_cores;         /* percent when none asked (0 = unlimited share) */
    uint32_t default_gpu_num;       /* GPUs when only mem/cores are asked */
    uint32_t default_split;         /* max tasks per GPU when a spec says 0; <= 65535 */
    gv_alloc_policy node_policy;    /* unless the pod's annotation says */
    gv_alloc_gpu_policy gpu_policy; /* unless the pod's annotation says */
    /*
     * FGD's workload model: each observed request adds weight 1 to its task
     * class, and older observations decay with this half-life (counted in
     * requests).  0 disables decay.
     */
    double workload_half_life;
    /*
     * FGD scores (fragmentation decrease, milli-GPU) are quantised to
     * steps of this size (default 40); placements in the best step tie:
     * a sharing task (one GPU, under a whole one) goes to the node that
     * keeps the fewest idle GPUs, anything else to the first node by name
     * (first fit).  0 = exact scores, ties by name only.
     */
    double fgd_score_step;
    /*
     * Score every node instead of the indexed search (docs/alloc.md, "Cost
     * of a decision"); the choice is the same, only slower.  For tests and
     * benchmarks that compare the two.
     */
    bool exhaustive;
    /*
     * Score budget (docs/alloc.md, "Score budget"): under fgd, a search
     * over more than score_all_nodes nodes (the cluster, or the candidate
     * list) scores the node states that may fit in the index's order until
     * score_budget of them fit, then only states whose GPU models have
     * fewer than score_budget / 4 fitting.  A search over fewer nodes
     * scores every state (exact FGD).  Either 0: always exact.  Defaults
     * 5000 and 16.
     */
    uint32_t score_all_nodes;
    uint32_t score_budget;
};

/* HAMi defaults: names above, whole-GPU memory, 0 cores, 1 GPU, split 10,
 * binpack/binpack... except node policy FGD; half-life 5000 requests. */
void gv_alloc_config_default(struct gv_alloc_config *cfg);

/* ------------------------------------------------------------------------ */
/* Requests.                                                                */

typedef enum {
    GV_ALLOC_MEM_MIB = 0, /* mem is MiB per GPU (0 = no memory accounted) */
    GV_ALLOC_MEM_PCT,     /* mem is percent of each GPU's memory (100 = whole) */
} gv_alloc_mem_kind;

struct gv_alloc_container_req {
    char name[GV_ALLOC_CNAME_MAX];
    uint32_t num_gpu;           /* >= 1 */
    gv_alloc_mem_kind mem_kind;
    uint64_t mem;               /* MiB or percent, per GPU */
    uint32_t milli;             /* compute per GPU, 0..1000 (gpucores x 10) */
    int32_t priority;           /* nvidia.com/priority, -1 when unset */
};

/* Which comma-separated constraint list of a request. */
typedef enum {
    GV_ALLOC_USE_TYPE = 0,   /* GPU model must contain one entry */
    GV_ALLOC_NOUSE_TYPE,     /* GPU model must contain none */
    GV_ALLOC_USE_UUID,       /* GPU uuid must equal one entry */
    GV_ALLOC_NOUSE_UUID,     /* GPU uuid must equal none */
    GV_ALLOC_CONSTRAINT_COUNT
} gv_alloc_constraint;

/*
 * One pod's GPU request.  Only containers that ask for GPUs are listed, in
 * pod order.  cpu_milli / mem_mib are the pod's host requests, checked only
 * against nodes that declare a capacity (the simulator); the real scheduler
 * leaves host resources to kube-scheduler.
 */
struct gv_alloc_request {
    char uid[GV_ALLOC_UID_MAX];
    char ns[GV_ALLOC_NODE_MAX];
    char name[GV_ALLOC_NODE_MAX];
    int64_t cpu_milli;
    int64_t mem_mib;
    uint32_t n_containers;
    struct gv_alloc_container_req containers[GV_ALLOC_MAX_CONTAINERS];
    /* lower-cased, trimmed, comma-separated; NULL = no constraint */
    char *constraint[GV_ALLOC_CONSTRAINT_COUNT];
    bool numa_bind;     /* all GPUs of a container on one NUMA node */
    int node_policy;    /* gv_alloc_policy, or -1 for the cluster default */
    int gpu_policy;     /* gv_alloc_gpu_policy, or -1 */
    /* The rest of HAMi's gpu-scheduler-policy chain (docs/alloc.md). */
    bool gpu_mutex;     /* "mutex": only GPUs no task uses */
    uint8_t gpu_numa;   /* "numa": 0 absent, 1 sort key before binpack/spread, 2 after */
    bool gpu_topology;  /* "topology-aware": a container's GPUs best connected */
};

/* Key/value pair: a resource quantity, an annotation or a label. */
struct gv_alloc_kv {
    const char *key;
    const char *value;
};

struct gv_alloc_container_in {
    const char *name;
    const struct gv_alloc_kv *limits;
    size_t n_limits;
    const struct gv_alloc_kv *requests;
    size_t n_requests;
};

struct gv_alloc_pod_in {
    const char *uid, *ns, *name; /* may be NULL */
    const struct gv_alloc_container_in *containers;
    size_t n_containers;
    const struct gv_alloc_kv *annotations;
    size_t n_annotations;
};

/* A zeroed request (no containers, no constraints, default policies). */
gv_status gv_alloc_request_new(struct gv_alloc_request **out, struct gv_error *err);
void gv_alloc_request_free(struct gv_alloc_request *req);
/*
 * Parses a pod's resources and annotations (see docs/contracts.md, "Requests")
 * into a new request.  Limits win over requests for GPU resources, as in
 * HAMi.  A pod asking for no GPU gives a request with n_containers == 0.
 * Conflicts (gpumem with gpumem-percentage, gpucores > 100, fractional GPU
 * counts, unknown policies, ...) fail with GV_EINVAL naming container,
 * resource and value.
 */
gv_status gv_alloc_request_parse(const struct gv_alloc_config *cfg, const struct gv_alloc_pod_in *in,
                                 struct gv_alloc_request **out, struct gv_error *err);
/* Sets (or clears, with NULL/"") one constraint list, normalising it. */
gv_status gv_alloc_request_set_constraint(struct gv_alloc_request *req, gv_alloc_constraint which,
                                          const char *list, struct gv_error *err);
/* Total GPUs the request asks for over all containers. */
uint32_t gv_alloc_request_gpus(const struct gv_alloc_request *req);

/* ------------------------------------------------------------------------ */
/* Cluster model.                                                           */

typedef enum {
    GV_ALLOC_GPU_SHARED = 0, /* many tasks, up to split */
    GV_ALLOC_GPU_EXCLUSIVE,  /* one task at a time, whole GPU */
    GV_ALLOC_GPU_MPS,        /* shared as SHARED, but only by containers asking one GPU
                              * (the node agent refuses an MPS GPU to a 2+ GPU container) */
} gv_alloc_gpu_mode;

struct gv_alloc_gpu_spec {
    const char *uuid;       /* unique within the cluster */
    uint32_t index;         /* device index on the node, <= 65535 */
    const char *model;      /* e.g. "NVIDIA A100-SXM4-80GB" */
    uint64_t mem_mib;
    uint32_t split;         /* max concurrent tasks (0 = config default), <= 65535 */
    int32_t numa;           /* NUMA node, -1 unknown; within int16_t */
    bool healthy;
    gv_alloc_gpu_mode mode;
};

struct gv_alloc_node_spec {
    const char *name;
    int64_t cpu_milli;      /* capacity; 0 = not checked */
    int64_t mem_mib;        /* capacity; 0 = not checked */
    const struct gv_alloc_kv *labels; /* accepted, not kept: nothing matches on them */
    size_t n_labels;
    const struct gv_alloc_gpu_spec *gpus;
    size_t n_gpus;
};

struct gv_alloc_gpu_usage {
    uint64_t mem_mib;
    uint32_t milli;
    uint32_t tasks;
    const char *uuid; /* the cluster's copy: valid until the node is next changed */
};

struct gv_alloc_totals {
    uint32_t nodes, gpus;
    uint64_t milli_capacity, milli_used; /* over healthy GPUs */
    uint64_t mem_capacity_mib, mem_used_mib;
    uint32_t pods;
};

struct gv_alloc_cluster;

gv_status gv_alloc_cluster_new(const struct gv_alloc_config *cfg, struct gv_alloc_cluster **out,
                               struct gv_error *err);
void gv_alloc_cluster_free(struct gv_alloc_cluster *c);

/*
 * Adds a node or replaces its spec.  Pods already placed on it keep their
 * usage on the GPUs that still exist (matched by uuid); usage on GPUs that
 * vanished is dropped.  Fails without changing anything on bad specs
 * (duplicate uuids, too many GPUs, ...).
 */
gv_status gv_alloc_node_upsert(struct gv_alloc_cluster *c, const struct gv_alloc_node_spec *spec,
                               struct gv_error *err);
/*
 * Interconnect of a node's GPUs (spec order, n = its GPU count): GPUs with
 * the same nonzero nvlink_group are joined by NVLink, the same nonzero
 * pcie_group sit under one PCIe switch (0 = in none; NULL = all 0).  A
 * container asking for several GPUs gets the best-connected set among those
 * its policy allows (docs/alloc.md, "Topology").  gv_alloc_node_upsert
 * forgets them: set them again after each upsert.
 */
gv_status gv_alloc_node_set_links(struct gv_alloc_cluster *c, const char *node,
                                  const uint32_t *nvlink_group, const uint32_t *pcie_group,
                                  size_t n, struct gv_error *err);
/* Removes a node and every pod placed on it. */
gv_status gv_alloc_node_remove(struct gv_alloc_cluster *c, const char *name, struct gv_error *err);
bool gv_alloc_node_exists(const struct gv_alloc_cluster *c, const char *name);
/* Usage of one GPU, by node name and uuid. */
gv_status gv_alloc_gpu_usage_get(const struct gv_alloc_cluster *c, const char *node,
                                 const char *uuid, struct gv_alloc_gpu_usage *out,
                                 struct gv_error *err);
/* Usage of a node's i-th GPU (its spec order), so a walk over every GPU
 * needs no uuid list of its own. */
gv_status gv_alloc_gpu_usage_at(const struct gv_alloc_cluster *c, const char *node, uint32_t i,
                                struct gv_alloc_gpu_usage *out, struct gv_error *err);
void gv_alloc_cluster_totals(const struct gv_alloc_cluster *c, struct gv_alloc_totals *out);
/* Nodes in the cluster, O(1): a caller whose candidate list names every
 * node can pick with nodes == NULL (the index, no per-name work). */
uint32_t gv_alloc_node_count(const struct gv_alloc_cluster *c);

/* ------------------------------------------------------------------------ */
/* Decisions.                                                               */

struct gv_alloc_device {
    char uuid[GV_ALLOC_UUID_MAX];
    uint64_t mem_mib;   /* memory limit on this GPU */
    uint32_t milli;     /* compute share on this GPU, 0..1000 (0 = unlimited) */
};

struct gv_alloc_container_assign {
    char name[GV_ALLOC_CNAME_MAX];
    uint32_t n_devices;
    struct gv_alloc_device devices[GV_ALLOC_MAX_DEVICES];
};

struct gv_alloc_assignment {
    char node[GV_ALLOC_NODE_MAX];
    uint32_t n_containers;
    struct gv_alloc_container_assign containers[GV_ALLOC_MAX_CONTAINERS];
};

struct gv_alloc_fit {
    bool fits;
    char reason[GV_ALLOC_REASON_MAX]; /* why not, for kubectl describe */
};

/*
 * Does the request fit on the node?  A human-readable reason when it does
 * not.  Returns GV_ENOTFOUND for an unknown node (fit->fits false, reason
 * says so); GV_OK otherwise.
 */
gv_status gv_alloc_filter(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                          const char *node, struct gv_alloc_fit *fit, struct gv_error *err);
/*
 * Scores nodes for the request under its policy: scores[i] in 0..100
 * (higher = better), -1 for a node that does not fit or is unknown.
 * Scores are normalised over the fitting nodes of this call.
 */
gv_status gv_alloc_score_nodes(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                               const char *const *nodes, size_t n, int32_t *scores,
                               struct gv_error *err);
/*
 * Chooses the best node (among nodes[0..n) or, when nodes is NULL, all
 * nodes) and the GPUs on it.  Ties go to the lexicographically smallest node
 * name.  Nothing fits -> GV_ENOFIT with a summary of the reasons.  Does not
 * change the cluster: call gv_alloc_place to commit.
 */
gv_status gv_alloc_pick(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                        const char *const *nodes, size_t n, struct gv_alloc_assignment *out,
                        struct gv_error *err);
/* Commits an assignment (from gv_alloc_pick or decoded from an annotation)
 * for req->uid.  Validates it against the current state; GV_EEXIST when the
 * uid is already placed, GV_ENOFIT when it no longer fits. */
gv_status gv_alloc_place(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                         const struct gv_alloc_assignment *a, struct gv_error *err);
/* Releases a placed pod, restoring usage exactly.  GV_ENOTFOUND if unknown. */
gv_status gv_alloc_release(struct gv_alloc_cluster *c, const char *uid, struct gv_error *err);
bool gv_alloc_is_placed(const struct gv_alloc_cluster *c, const char *uid);
/* The uids of the pods placed on node: the first cap go to uids[] (the
 * cluster's copies, valid until the next change); returns how many there
 * are (0 for an unknown node). */
size_t gv_alloc_node_pods(const struct gv_alloc_cluster *c, const char *node, const char **uids,
                          size_t cap);

/*
 * Feeds one request into the FGD workload model (call once per pod, when
 * it is first seen).  Requests without GPUs are ignored.
 */
void gv_alloc_observe(struct gv_alloc_cluster *c, const struct gv_alloc_request *req);
/*
 * Expected fragmentation of a node (milli-GPU) under the current workload
 * model: sum over task classes m of p(m) * F_n(m) (docs/alloc.md).
 */
gv_status gv_alloc_node_fragmentation(struct gv_alloc_cluster *c, const char *node, double *out,
                                      struct gv_error *err);

/* ------------------------------------------------------------------------ */
/* Observers (src/alloc/inspect.c): read-only views for metrics, dashboards  */
/* and `kubectl gpuvisor`.                                                   */

struct gv_alloc_gpu_info {
    const char *uuid, *model; /* the cluster's copies: uuid valid until the node is next
                               * changed, model until the cluster is freed */
    uint32_t index;
    uint64_t mem_mib;         /* schedulable memory */
    uint32_t split;
    bool healthy;
    gv_alloc_gpu_mode mode;
    uint64_t used_mem_mib;
    uint32_t used_milli, tasks;
};

/* Capacity and usage of a node's i-th GPU (spec order). */
gv_status gv_alloc_gpu_info_at(const struct gv_alloc_cluster *c, const char *node, uint32_t i,
                               struct gv_alloc_gpu_info *out, struct gv_error *err);
/* GPUs of a node (0 when unknown). */
uint32_t gv_alloc_node_gpu_count(const struct gv_alloc_cluster *c, const char *node);

struct gv_alloc_frag {
    double free_milli; /* free GPU share over every node (milli-GPU) */
    double frag_milli; /* of which fragmented: sum of gv_alloc_node_fragmentation */
    double ratio;      /* frag / free, 0 when nothing is free */
};
/* Cluster fragmentation under the current workload model (0 while the model
 * is empty: feed it with gv_alloc_observe). */
void gv_alloc_cluster_fragmentation(struct gv_alloc_cluster *c, struct gv_alloc_frag *out);

/* ------------------------------------------------------------------------ */
/* What-if and preemption victims (src/alloc/victims.c).  Used by the       */
/* extender's preempt verb; meant for any "remove these pods, does X fit    */
/* on which GPUs" question (defragmentation, simulation).  The cluster is   */
/* left exactly as it was: the pods are hidden for the question only.       */

/*
 * Would req fit on node once the pods without[0..n) are gone (uids not
 * placed on that node are ignored)?  a (may be NULL) gets the GPUs it
 * would get under its GPU policy; fit->reason says why not.  GV_ENOTFOUND
 * for an unknown node.
 */
gv_status gv_alloc_fit_without(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                               const char *node, const char *const *without, size_t n,
                               struct gv_alloc_assignment *a, struct gv_alloc_fit *fit,
                               struct gv_error *err);

/* A pod that could be evicted to make room. */
struct gv_alloc_victim {
    const char *uid;    /* a pod placed on the node (others are ignored) */
    int32_t priority;   /* its PriorityClass value (spec.priority, 0 when unset) */
    bool pdb_violation; /* evicting it would violate a PodDisruptionBudget */
    bool forced;        /* evicted anyway (kube-scheduler's own victims): always
                         * chosen, whatever its priority */
    const void *ref;    /* set by gv_alloc_node_victims (the placement itself,
                         * valid until the cluster next changes): spares the
                         * lookup by uid; NULL otherwise */
};

/* The eviction chosen on one node, and what it costs. */
struct gv_alloc_victim_plan {
    bool fits;               /* false: no set of eligible pods frees enough */
    uint32_t n;              /* victims: chosen[0..n), indices into the candidates */
    uint32_t pdb_violations; /* among them */
    int32_t max_priority;    /* highest priority among them (INT32_MIN when none) */
    int64_t priority_sum;
    uint64_t milli;          /* GPU compute they held, milli-GPU, summed over GPUs */
    uint64_t mem_mib;        /* GPU memory they held */
    char reason[GV_ALLOC_REASON_MAX]; /* why not, when !fits */
};

/*
 * The cheapest set of victims among cands[0..n) that lets req (a pod of
 * priority `priority`) fit on node, and the GPUs it would then get (a, may
 * be NULL).  A candidate is eligible when forced or of a priority strictly
 * below `priority`; pods of equal or higher priority are never chosen.
 * Cheapest is, in order: fewest PodDisruptionBudget violations, fewest
 * victims, lowest highest priority, lowest priority sum, least GPU share
 * (compute, then memory).  The search: the cheapest set of pods to remove
 * from each GPU alone (exact, by size), the best GPUs' sets together, and
 * kube-scheduler's own reprieve (evict every eligible pod, then give back
 * as many as still fit); the cheaper valid answer wins and is minimal (no
 * victim can be spared).  chosen must hold n entries.  GV_ENOTFOUND for an
 * unknown node.
 */
gv_status gv_alloc_victims(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                           int32_t priority, const char *node, const struct gv_alloc_victim *cands,
                           size_t n, uint32_t *chosen, struct gv_alloc_victim_plan *plan,
                           struct gv_alloc_assignment *a, struct gv_error *err);
/*
 * The caller's marks on placed pods, kept with the placement (and lost with
 * it: a pod placed again is no candidate until marked again): whether the
 * pod may be a victim at all, because it is bound on the node it is placed
 * on (bound_node, NULL = not evictable: reservations and binds in flight),
 * and its priority.  GV_ENOTFOUND when uid is not placed.
 */
gv_status gv_alloc_pod_set_victim(struct gv_alloc_cluster *c, const char *uid,
                                  const char *bound_node, int32_t priority, struct gv_error *err);
/* The node's pods marked as possible victims, as candidates (uid the
 * cluster's copy, valid until the next change; most recently placed
 * first): the first cap go to out; returns how many there are. */
size_t gv_alloc_node_victims(const struct gv_alloc_cluster *c, const char *node,
                             struct gv_alloc_victim *out, size_t cap);
/* Orders plans by the cost above: < 0 when x is cheaper than y (a plan
 * that fits is cheaper than one that does not). */
int gv_alloc_victim_plan_cmp(const struct gv_alloc_victim_plan *x,
                             const struct gv_alloc_victim_plan *y);

/* ------------------------------------------------------------------------ */
/* Assignment encoding (pod annotation gpuvisor.io/assignment).             */

#define GV_ALLOC_ASSIGNMENT_ANNOTATION "gpuvisor.io/assignment"

/*
 * Version 1 text form, e.g.
 *   v1;node=gpu-7;main=GPU-8f...:20000:300,GPU-1c...:20000:300;side=GPU-aa...:0:0
 * (node, then per container "name=uuid:memMiB:milli[,...]"), specified in
 * docs/alloc.md.  Writes a NUL-terminated string into buf; *len (may be
 * NULL) gets its length.  GV_ERANGE when cap is too small.
 */
gv_status gv_alloc_assignment_encode(const struct gv_alloc_assignment *a, char *buf, size_t cap,
                                     size_t *len, struct gv_error *err);
/* Strict parser of the above (len bytes, need not be NUL-terminated). */
gv_status gv_alloc_assignment_decode(const char *text, size_t len, struct gv_alloc_assignment *out,
                                     struct gv_error *err);

#endif
