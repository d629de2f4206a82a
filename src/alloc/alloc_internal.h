/* Internal structures of the allocation engine (not part of the API). */
#ifndef GV_ALLOC_INTERNAL_H
#define GV_ALLOC_INTERNAL_H

#include "alloc/gv_alloc.h"

/* --- string-keyed hash map (open addressing, values are uint32 ids) ------ */
/* A slot is 8 bytes: the key's hash tag and its value.  The key itself is
 * read from the object the value names (key_of): a key pointer per slot
 * was 8 more bytes, 1 MiB of the node map at 50,000 nodes (131,072 slots
 * at most 75% full). */
struct strmap_slot {
    uint32_t tag; /* high half of the key's hash */
    uint32_t ref; /* value + 2; 0 = empty, 1 = deleted */
};
struct strmap {
    struct strmap_slot *slots;
    uint32_t cap, used, tombs;
    /* the key of value v, read from the object it names (never NULL for a
     * value in the map) */
    const char *(*key_of)(const void *ctx, uint32_t v);
    const void *ctx;
};
/* An empty map whose values name objects keyed by key_of(ctx, value);
 * values must stay below UINT32_MAX - 2. */
void strmap_init(struct strmap *m, const char *(*key_of)(const void *ctx, uint32_t v),
                 const void *ctx);
void strmap_free(struct strmap *m);
/* UINT32_MAX when absent. */
uint32_t strmap_get(const struct strmap *m, const char *key);
/* key_of(val) must be key from the first lookup after this on (the map
 * compares against it); the objects of the values already in the map must
 * still hold their keys (a put may rehash them). */
gv_status strmap_put(struct strmap *m, const char *key, uint32_t val);
/* Before the object of key's value gives up its key. */
void strmap_del(struct strmap *m, const char *key);
/* out[i] = strmap_get(m, keys[i]), the lookups' memory accesses overlapped. */
void strmap_get_many(const struct strmap *m, const char *const *keys, size_t n, uint32_t *out);

/* --- cluster state ------------------------------------------------------- */
struct gpu {
    /* 48 bytes: read for every GPU of every node scored, so a node's eight
     * take six cache lines (64 bytes a GPU was 3 MiB more at 50,000 nodes
     * of 8, when the scheduler's RSS target is 60 MiB in all). */
    uint64_t used_mem;
    uint64_t mem_mib;
    uint32_t used_milli;
    uint32_t tasks;
    uint32_t whole; /* tasks holding the GPU exclusively */
    uint32_t model_id; /* interned lower-cased model */
    /* The node's spec is checked to fit these (cluster.c, check_spec); the
     * inventory contract allows split 1..1024, index and numa up to 1023. */
    uint16_t split;
    int16_t numa;
    bool healthy;
    uint8_t mode; /* gv_alloc_gpu_mode (checked <= GV_ALLOC_GPU_MPS) */
    uint16_t model_name; /* the model as given: c->model_names[model_name] */
    /* The uuid's text, (const char *)this + uuid_off (gpu_uuid): in the
     * same block as the node's gpus array, after it (fixed 96-byte arrays
     * cost 190 of the 250 bytes of a GPU at 40,000 GPUs).  An offset, not
     * a pointer (8 bytes a GPU).  The block is at most 64 GPUs and 64
     * uuids of < 96 bytes, so the offset fits 16 bits.  Copies of a struct
     * gpu (the "after" states of fit.c, fgd.c, policy.c) have no uuid:
     * only the block's are read.  The model's text is the cluster's (a
     * pointer per GPU was 8 of its 72 bytes, for a handful of models). */
    uint16_t uuid_off;
    uint16_t index;
    /* interconnect groups (gv_alloc_node_set_links): 0 = none; 16 bits
     * hold 1 + any GPU index. */
    uint16_t nvlink_group, pcie_group;
};

static inline const char *gpu_uuid(const struct gpu *g)
{
    return (const char *)g + g->uuid_off;
}

struct pod_dev {
    uint32_t gpu;  /* index in the node's gpus, UINT32_MAX once the GPU vanished */
    uint64_t mem;
    uint32_t milli;
    bool whole;
};

struct pod {
    char uid[GV_ALLOC_UID_MAX];
    uint32_t node;
    int32_t priority; /* PriorityClass value (gv_alloc_pod_set_victim); in padding */
    int64_t cpu, mem;
    struct pod *prev, *next; /* node's pod list */
    uint32_t n_devs;
    bool victim; /* may be evicted for a preemptor: bound where placed; in padding */
    struct pod_dev devs[];
};

struct node {
    char *name;      /* NULL for a free slot */
    int64_t cpu_cap, cpu_used, mem_cap, mem_used;
    struct gpu *gpus;
    struct pod *pods;
    uint64_t sig;    /* order-independent hash of the free-resource state */
    double free_share; /* sum of the GPUs' free shares (milli) */
    uint32_t n_gpus; /* beside prof_gen: no padding (112 bytes a node, not 120) */
    /* FGD per-shape profile cache (see fgd.c) */
    uint32_t prof_gen;     /* shapes generation the profile was built for; 0 = stale */
    /* free share of GPUs unable to host each shape, then (node_prof_cnt)
     * how many GPUs can host it: one block, prof_cap of each (a pointer
     * of its own for the counts was 8 bytes a node, 0.4 MB at 50,000) */
    double *prof_frag;
    uint32_t prof_cap;
    uint32_t cand_stamp;   /* candidate-list pass that named it (policy.c) */
    double prof_total;     /* free share of healthy GPUs */
    uint64_t gsig;         /* the GPUs' states in order, GPU count, CPU checked (score_group.c) */
    uint32_t cls;          /* state class (index.c), UINT32_MAX when none */
    uint32_t hpos;         /* position in the class's heap */
};

/* GPUs of n able to host each shape (fgd.c), after prof_frag's doubles. */
static inline uint8_t *node_prof_cnt(const struct node *n)
{
    return (uint8_t *)(n->prof_frag + n->prof_cap);
}

/* Nodes in one state and what that state can still host (index.c). */
struct sclass {
    uint64_t sig;
    uint32_t *heap;        /* node indices, min-heap by name */
    uint32_t n, cap;
    uint32_t hnext;        /* signature hash chain */
    uint32_t bucket, prev, next; /* bucket: list in bucket_head (what it can host, CPU band) */
    int64_t cpu_free, mem_free; /* INT64_MAX when not checked */
    uint64_t model_mask;   /* bit per model id < 64; all bits for later ones */
    uint32_t n_gpus;
    uint32_t free_whole;   /* GPUs with no task and no share used */
    uint32_t open;         /* GPUs that can take one more task */
    uint32_t max_free;     /* largest free share of one open GPU, milli */
    uint32_t used_pm;      /* GPU share in use, permille (floor), as eval_node counts it */
    uint32_t pm_prev, pm_next; /* list of classes with this used_pm and CPU band */
    uint32_t cpu_band;     /* index_cpu_band(cpu_free) */
    /* score memo of the current pass over a candidate list (policy.c) */
    uint32_t memo_stamp;   /* also marks a class holding candidates (policy.c) */
    bool memo_fits;
    union {
        double memo_score;
        uint32_t cand_n;   /* candidates in it, during an indexed list pick */
    };
};

#define IDX_WHOLE_MAX 8
#define IDX_FRAC_BUCKETS 11 /* max_free / 100: 0..10 */
#define IDX_BUCKETS ((IDX_WHOLE_MAX + 1) * IDX_FRAC_BUCKETS)
#define IDX_CPU_BANDS 32 /* free CPU, half-octaves of 500 milli (index_cpu_band) */
#define IDX_PM_LEVELS 1001 /* used_pm 0..1000 */

struct idx_need {
    uint32_t whole;  /* whole GPUs over all containers */
    uint32_t frac;   /* largest share of a fractional container */
    uint32_t spread; /* most GPUs of one container */
};

struct wl_level {
    int64_t cpu;
    double w;
    double cum; /* sum of w over this and lower levels (valid unless dirty) */
};

#define WL_MAX_SHAPES 128
#define WL_MAX_LEVELS 64

/* One GPU-shape of the workload: k GPUs with r milli and given memory. */
struct wl_shape {
    uint32_t k, r;
    gv_alloc_mem_kind mem_kind;
    uint64_t mem;
    char *types, *notypes; /* normalized constraint lists or NULL */
    uint8_t *model_ok;     /* per model id; sized cluster->model_cap */
    uint32_t model_ok_n;   /* models evaluated so far */
    double w;              /* sum of level weights */
    struct wl_level levels[WL_MAX_LEVELS]; /* by ascending cpu */
    uint32_t n_levels;
    bool dirty;            /* cum needs recomputing */
    /* the cluster's free share / the free share of the models the shape
     * may use (fgd.c, shape_supply); valid while supply_gen matches */
    double supply;
    uint32_t supply_gen;
};

/* Per-call memo of scores by node signature (policy.c). */
struct memo_slot {
    uint64_t sig;
    uint32_t stamp;
    bool fits;
    double score;
};

/* One score shared by the classes of a decision that agree on what the
 * score reads (score_group.c). */
struct group_slot {
    uint64_t gsig;
    uint32_t before, after; /* CPU levels covered without and with the pod */
    uint32_t stamp;
    bool fits;
    double score;
};

struct gv_alloc_cluster {
    struct gv_alloc_config cfg;
    struct node *nodes;
    uint32_t n_nodes, cap_nodes, live_nodes;
    struct strmap node_map;
    struct strmap pod_map; /* uid -> index into pods[] */
    struct pod **pods;
    uint32_t n_pods, cap_pods, live_pods;
    uint32_t *free_pod_slots;
    uint32_t n_free_pod_slots;
    /* interned lower-cased GPU models */
    char **models;
    uint32_t n_models, model_cap;
    /* interned GPU models as given (display, reasons): struct gpu.model_name */
    char **model_names;
    uint32_t n_model_names, model_names_cap;
    /* FGD workload model */
    struct wl_shape shapes[WL_MAX_SHAPES];
    uint32_t n_shapes;
    uint32_t shapes_gen;   /* bumps whenever the shape set changes */
    uint32_t levels_gen;   /* bumps whenever a shape gains a CPU level */
    double wl_scale;       /* weight of the next observation (decay) */
    double wl_total;       /* sum of the shapes' w x supply, when wl_total_valid (fgd.c) */
    bool wl_total_valid;
    uint32_t wl_total_supply_gen; /* the supply_gen wl_total was summed under */
    double wl_growth;
    /* healthy GPUs per interned model and in all, and their free share
     * (milli, alloc_gpu_free_share) per model and in all, for FGD's supply
     * factor; supply_gen bumps whenever either changes (never 0) */
    uint32_t *model_gpus;
    double *model_free;
    uint32_t model_gpus_n;
    uint64_t supply_gpus;
    double supply_free;
    uint32_t supply_gen;
    bool supply_broken; /* out of memory once: every factor is 1 */
    int64_t max_cpu;       /* largest node CPU capacity (bestfit) */
    uint32_t max_gpus;     /* largest node GPU count (bestfit) */
    struct memo_slot *memo;
    uint32_t memo_cap, memo_stamp;
    /* node index (index.c) */
    struct sclass *cls;
    uint32_t n_cls, cap_cls, live_cls;
    uint32_t *free_cls;
    uint32_t n_free_cls;
    uint32_t *chash;
    uint32_t chash_cap;
    /* Each list holds one CPU band; the masks say which bands of a bucket
     * or level hold classes, so a search skips CPU that cannot serve the
     * request without visiting its classes. */
    uint32_t bucket_head[IDX_BUCKETS * IDX_CPU_BANDS];
    uint32_t bucket_bands[IDX_BUCKETS];
    uint32_t pm_head[IDX_PM_LEVELS * IDX_CPU_BANDS]; /* by used_pm (pods without GPUs, fgd) */
    uint32_t pm_bands[IDX_PM_LEVELS];
    bool index_broken; /* an allocation failed: score exhaustively */
    uint32_t cls_stamp; /* current candidate-list pass */
    bool cand_pass;     /* pick_indexed looks only at stamped nodes */
    struct budget_item *bud; /* a list's classes under a score budget (policy.c) */
    uint32_t bud_cap;
    /* FGD scores shared within a decision (score_group.c) */
    struct group_slot *grp;
    uint32_t grp_cap, grp_stamp, grp_used;
    int64_t *thr;          /* the shapes' distinct CPU levels, ascending */
    uint32_t n_thr, thr_cap, thr_levels_gen, thr_shapes_gen;
    bool thr_valid;

};

/* GPUs chosen for a request on one node, flattened in container order
 * (container i owns the next containers[i].num_gpu entries). */
#define PICK_MAX (GV_ALLOC_MAX_CONTAINERS * GV_ALLOC_MAX_DEVICES)
struct pick {
    uint32_t n;
    uint8_t gpu[PICK_MAX];
    uint32_t milli[PICK_MAX];
    uint64_t mem[PICK_MAX];
};

/* Per-call view of a request on the cluster (models allowed, resolved). */
struct req_view {
    const struct gv_alloc_request *req;
    uint8_t *model_ok; /* per model id: model_buf, or heap beyond 64 models */
    uint8_t model_buf[64];
    gv_alloc_policy policy;
    gv_alloc_gpu_policy gpu_policy;
};

/* fit.c */
gv_status alloc_view_init(struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                          struct req_view *v, struct gv_error *err);
void alloc_view_fini(struct req_view *v);
/*
 * Per-GPU arithmetic, inline: FGD scores every task shape against every GPU
 * a placement touches (fgd.c), so these sit in its innermost loop.
 */
static inline uint64_t alloc_gpu_mem_need(const struct gpu *g, gv_alloc_mem_kind kind,
                                          uint64_t mem)
{
    if (kind == GV_ALLOC_MEM_PCT)
        return g->mem_mib * (mem > 100 ? 100 : mem) / 100;
    return mem;
}

/* A GPU's usage plus what earlier containers of the same pod would add. */
struct gpu_load {
    uint64_t mem;
    uint32_t milli, tasks, whole;
};

static inline bool load_can_host(const struct gpu *g, const struct gpu_load *l, uint32_t milli,
                          uint64_t need)
{
    if (!g->healthy || l->whole > 0 || l->tasks >= g->split)
        return false;
    if ((milli >= GV_ALLOC_MILLI || g->mode == GV_ALLOC_GPU_EXCLUSIVE) && l->tasks > 0)
        return false;
    if (l->milli + milli > GV_ALLOC_MILLI)
        return false;
    return need <= g->mem_mib && l->mem <= g->mem_mib - need;
}

static inline double load_free_share(const struct gpu *g, const struct gpu_load *l)
{
    if (!g->healthy || l->whole > 0 || l->tasks >= g->split)
        return 0.0;
    double s = (double)(GV_ALLOC_MILLI - (l->milli > GV_ALLOC_MILLI ? GV_ALLOC_MILLI : l->milli));
    if (g->mem_mib > 0) {
        double m = (double)(g->mem_mib - (l->mem > g->mem_mib ? g->mem_mib : l->mem)) *
                   GV_ALLOC_MILLI / (double)g->mem_mib;
        if (m < s)
            s = m;
    }
    return s;
}

static inline struct gpu_load own_load(const struct gpu *g)
{
    return (struct gpu_load){g->used_mem, g->used_milli, g->tasks, g->whole};
}

static inline bool alloc_gpu_can_host(const struct gpu *g, uint32_t milli, uint64_t mem_need)
{
    struct gpu_load l = own_load(g);
    return load_can_host(g, &l, milli, mem_need);
}

static inline double alloc_gpu_free_share(const struct gpu *g)
{
    struct gpu_load l = own_load(g);
    return load_free_share(g, &l);
}

/* Chooses GPUs for the whole request on a node following the GPU policy;
 * true if it fits (then a->containers filled, a->node set). */
bool alloc_fit_node(struct gv_alloc_cluster *c, const struct req_view *v, uint32_t node,
                    struct pick *p, char *reason, size_t reason_cap);
/* Distinct GPUs a pick touches (idx) and their states once it is applied
 * (after); returns how many. */
uint32_t alloc_pick_apply(const struct node *n, const struct pick *p, uint8_t *idx,
                          struct gpu *after);
/* The assignment (names, uuids) of a pick. */
void alloc_pick_assignment(const struct gv_alloc_cluster *c, const struct gv_alloc_request *req,
                           uint32_t node, const struct pick *p, struct gv_alloc_assignment *a);
void alloc_node_resign(struct node *n);
/* cluster.c: adds (sign +1) or removes (-1) a placed pod's usage on its
 * node's GPUs and host resources; nothing else (signature, index) moves.
 * victims.c hides pods with it for a what-if and restores them exactly. */
void alloc_pod_apply(struct node *n, const struct pod *p, int sign);
bool alloc_gpu_allowed(const struct req_view *v, const struct gpu *g);
bool alloc_list_match(const char *list, const char *s, bool substring);

/* score_group.c */
/* A table of at least 2 x entries slots (a power of two, 64 at least) whose
 * slots of earlier passes are told apart by *stamp, which it bumps (clearing
 * the table when it wraps); false, the table unchanged, when out of memory. */
bool alloc_stamp_table(void **tab, uint32_t *cap, uint32_t *stamp, size_t size, uint32_t entries);
/* false when out of memory (then every class is scored) */
bool group_begin(struct gv_alloc_cluster *c);
/* The slot of the score of class k, evaluated on a node of GPU signature
 * gsig, for a pod asking cpu (by_cpu: the score reads the CPU levels the
 * node covers, fgd); *hit when a class of this decision filled it.  NULL
 * when the table is full. */
struct group_slot *group_get(struct gv_alloc_cluster *c, const struct sclass *k, uint64_t gsig,
                             bool by_cpu, int64_t cpu, bool *hit);
void group_free(struct gv_alloc_cluster *c);

/* index.c */
void index_init(struct gv_alloc_cluster *c);
void index_free(struct gv_alloc_cluster *c);
/* After the node's signature changed (alloc_node_resign) / before it goes. */
void index_node_update(struct gv_alloc_cluster *c, uint32_t node);
void index_node_remove(struct gv_alloc_cluster *c, uint32_t node);
void index_need(const struct gv_alloc_request *r, struct idx_need *need);
/* false only when no node of the class can fit r (a necessary condition). */
bool index_may_fit(const struct sclass *k, const struct gv_alloc_request *r,
                   const struct idx_need *need, uint64_t allowed_models);
/* The band of free CPU (milli; INT64_MAX = unchecked), monotone: a class in
 * a lower band than a request's CPU cannot serve it. */
uint32_t index_cpu_band(int64_t cpu_milli);
/* Smallest whole-GPU bucket row and fraction bucket column worth visiting. */
uint32_t index_first_bucket(const struct idx_need *need, uint32_t *min_frac_bucket);

/* fgd.c */
double fgd_node_frag(struct gv_alloc_cluster *c, uint32_t node);
/* Expected fragmentation increase (milli-GPU) of placing a/p on node. */
double fgd_delta(struct gv_alloc_cluster *c, uint32_t node, const struct gv_alloc_request *req,
                 const struct pick *p);
/* The same, remembering the node's own per-shape terms in before (valid
 * false on the first call for a node) for its next candidates. */
struct fgd_before {
    bool valid;
    double contrib[WL_MAX_SHAPES]; /* each shape's contribution before the placement */
    double p_new[WL_MAX_SHAPES];   /* its CPU weight at the node's CPU after it; -1: not yet */
};
double fgd_delta_memo(struct gv_alloc_cluster *c, uint32_t node,
                      const struct gv_alloc_request *req, const struct pick *p,
                      struct fgd_before *before);
void fgd_free_shapes(struct gv_alloc_cluster *c);
void fgd_node_invalidate(struct node *n);
/* Adds (sign +1) or removes (-1) the node's healthy GPUs from the per-model
 * supply; false when out of memory (the factor then degrades to 1). */
bool fgd_supply_account(struct gv_alloc_cluster *c, const struct node *n, int sign);
/* Adds (+1) or removes (-1) the free share of the node's healthy GPUs in
 * their present state from the per-model free share: called with -1 before
 * anything changes a node's GPUs' usage and +1 after (place, release, node
 * upsert and removal). */
void fgd_free_account(struct gv_alloc_cluster *c, const struct node *n, int sign);
gv_status alloc_model_intern(struct gv_alloc_cluster *c, const char *model, uint32_t *id,
                             struct gv_error *err);
static inline const char *alloc_gpu_model(const struct gv_alloc_cluster *c, const struct gpu *g)
{
    /* "" for the zeroed slot of a node without GPUs */
    return g->model_name < c->n_model_names ? c->model_names[g->model_name] : "";
}

#endif
