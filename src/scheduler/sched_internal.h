/* Internal structures of gpuvisor-scheduler (not part of the API). */
#ifndef GV_SCHED_INTERNAL_H
#define GV_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "scheduler/gv_scheduler.h"

/* Why a pod is pending, as the metrics count it (one list: enum + labels). */
#define GV_SCHED_PENDING_LIST(X)                                                                   \
    X(PENDING_INVALID_REQUEST, "invalid_request")                                                  \
    X(PENDING_NO_GPU_NODE, "no_gpu_node")                                                          \
    X(PENDING_INSUFFICIENT_GPU, "insufficient_gpu")                                                \
    X(PENDING_BIND_FAILED, "bind_failed")

enum pending_reason {
#define X_ENUM(code, label) code,
    GV_SCHED_PENDING_LIST(X_ENUM)
#undef X_ENUM
        PENDING_COUNT
};

/* What the scheduler knows about a node beside the engine's model. */
enum node_state {
    NODE_OK = 0,
    NODE_NO_INVENTORY, /* no gpuvisor.io/node-gpus annotation: no agent */
    NODE_MALFORMED,    /* annotation present but unreadable */
};

struct snode {
    char *reason;      /* NODE_MALFORMED: what was wrong */
    uint64_t inv_hash; /* hash of the last inventory text applied */
    uint32_t n_gpus;
    uint32_t n_whole; /* passthrough GPUs and mdevs the agent lists (kubelet-counted) */
    uint64_t max_gpu_mib;
    /* Hot: what a filter reads and writes for each candidate, right before
     * the name it confirms the hash match on, so that a candidate costs one
     * cache line of its record, not two (at 50,000 candidates the second
     * line was a fifth of the filter). */
    time_t heartbeat;      /* 0 = none */
    uint32_t filter_stamp; /* last filter that found it usable (handlers.c) */
    uint32_t filter_pos;   /* that filter's first candidate naming it */
    enum node_state state;
    bool in_engine; /* the engine has a model of this node */
    bool stale_logged;
    char name[];
};

/* Every pod the scheduler knows: pending ones (for metrics), and every pod
 * that holds a placement in the engine, whatever its stage.  Invariant
 * (under the lock): the engine has uid placed <=> its record is RESERVED,
 * BINDING, UNBOUND or BOUND, and the record's `encoded` is that placement.
 * A placement leaves only through gv_sched_forget_pod, called when the pod
 * is deleted or terminates, its bind definitively fails, a reservation or
 * unbound assignment lapses, or the self-check finds the API disagreeing. */
enum rec_phase {
    REC_PENDING,  /* last filter found no place */
    REC_RESERVED, /* filter placed it; waiting for bind */
    REC_BINDING,  /* bind in progress (owns the placement) */
    REC_UNBOUND,  /* assignment annotation written, pod not bound yet */
    REC_BOUND,    /* bound with its assignment: counted until it ends */
    REC_INFLIGHT, /* a hold, not a pod: GPUs a Binding may still claim
                   * (bind_inflight.h); assigned_at is its deadline */
};

struct srec {
    char *uid;
    char *ns, *name;
    enum rec_phase phase;
    enum pending_reason pending;
    char *node;         /* RESERVED / BINDING / UNBOUND */
    char *encoded;      /* placed phases: the assignment text (what the engine holds) */
    char *rv;           /* RESERVED: the pod's resourceVersion at filter time;
                         * BOUND by our bind: the version our annotation wrote */
    double since;       /* monotonic seconds: when the phase began */
    time_t assigned_at; /* UNBOUND: wall time from gpuvisor.io/assigned-at */
    bool gone;          /* BINDING: the pod was deleted or ended meanwhile */
    bool bound_here;    /* BOUND by this process's bind (the informer may lag) */
    bool bind_unknown;  /* UNBOUND because this process's bind could not learn whether its
                         * Binding took: the informer may not show our annotation yet */
};

static inline bool gv_sched_phase_placed(enum rec_phase p)
{
    return p != REC_PENDING;
}

struct gv_sched {
    struct gv_sched_config cfg;
    struct gv_kube_client *kube;
    struct gv_informer *node_inf, *pod_inf;
    bool hand_fed; /* gv_sched_feed_by_hand: the informers never start */

    pthread_mutex_t lock; /* guards everything below (but servers and the sweeper) */
    struct gv_alloc_cluster *cluster;
    struct snode **nodes; /* sorted by (gv_hash_str(name), name) */
    uint64_t *node_hash;  /* parallel to nodes: gv_hash_str of each name */
    size_t n_nodes, cap_nodes;
    uint32_t *node_dir;   /* node_dir[b]: first node whose hash's top dir_bits are >= b */
    unsigned dir_bits;
    bool dir_dirty;       /* nodes added or removed since it was built */
    uint32_t filter_stamp; /* current filter's mark on its usable nodes */
    struct srec **recs; /* sorted by uid */
    size_t n_recs, cap_recs;
    json_t *truth;   /* uid -> the API's assignment of a pod (sched.c, truth_note) */
    uint64_t binds_ok, binds_failed, bind_conflicts, filters_nofit;
    time_t inflight_pruned; /* last prune of the bind journal (bind_inflight.c) */
    uint64_t drift_repairs;  /* self-check repairs (pods or GPUs corrected) */
    uint64_t self_checks;    /* self-check runs completed */
    double last_self_check;  /* monotonic seconds */

    struct gv_httpd *servers[4]; /* for /metrics */
    struct gv_sched_obs *obs;    /* observe.c: HAMi series, dashboard state */
    size_t n_servers;

    pthread_t sweeper;
    bool sweeper_running;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping;

    struct gv_sched_whole *whole;      /* whole devices by count (whole.c) */
    struct gv_quota *quota;            /* ResourceQuota limits and charges (quota.c) */
    struct gv_informer *quota_inf;     /* ResourceQuota objects (NULL without kube) */
    struct gv_sched_preempt *preempt;  /* priorities and nominated holds (preempt.c) */
    struct gv_sched_pdb *pdb;          /* PodDisruptionBudgets for preemption (pdb_sched.c) */
    struct gv_sched_preempt_self *preempt_self; /* without the verb (preempt_self.c) */
};

/* sched_state.c */
double gv_sched_now(void);
struct snode *gv_sched_node_find(struct gv_sched *s, const char *name);
/* out[i] = gv_sched_node_find(s, names[i]), the lookups overlapped. */
void gv_sched_nodes_find(struct gv_sched *s, const char *const *names, size_t n,
                         struct snode **out);
/* Index of the first node ordered after name (which need not exist):
 * resumes a walk over s->nodes after its lock was dropped. */
size_t gv_sched_node_after(struct gv_sched *s, const char *name);
struct srec *gv_sched_rec_find(struct gv_sched *s, const char *uid);
/* Index of the first record ordered after uid (which need not exist). */
size_t gv_sched_rec_after(struct gv_sched *s, const char *uid);

/* Adds (or returns the existing) node entry; NULL on OOM. */
struct snode *gv_sched_node_add(struct gv_sched *s, const char *name);
void gv_sched_node_remove(struct gv_sched *s, const char *name);
/* Frees every node entry and pod record. */
void gv_sched_tables_free(struct gv_sched *s);
/* Creates (or returns the existing) record for uid. */
struct srec *gv_sched_rec_get(struct gv_sched *s, const char *uid, const char *ns,
                              const char *name);
void gv_sched_rec_drop(struct gv_sched *s, const char *uid);
/* Releases the engine placement of uid (if any) and drops its record. */
void gv_sched_forget_pod(struct gv_sched *s, const char *uid);
gv_status gv_sched_rec_set(struct srec *r, enum rec_phase phase, const char *node,
                           const char *encoded, const char *rv);

/* place.c: places an assignment text for uid (phase must be a placed one)
 * and records it (the whole text); the request is rebuilt from the
 * assignment, so only what the engine accounts is needed.  Devices on GPUs
 * the node does not list now are left out of the engine (counted when the
 * GPU is back: node_replace); GV_ENOTFOUND when it lists none of them.
 * Lock held.  GV_EEXIST when placed. */
gv_status gv_sched_place_encoded(struct gv_sched *s, const char *uid, const char *ns,
                                 const char *name, const char *encoded, enum rec_phase phase,
                                 struct gv_error *err);
/* place.c: its node known and at least one of its GPUs listed.  Lock held. */
bool encoded_placeable(struct gv_sched *s, const char *text);

/* Settles uid's accounting with what the API says of it (the truth table),
 * unless a reservation or bind of ours owns it.  Lock held. */
void gv_sched_apply_truth(struct gv_sched *s, const char *uid, time_t wall);
/* Does the truth table show uid bound (with a verified assignment)?  Lock held. */
bool gv_sched_truth_bound(struct gv_sched *s, const char *uid);

/* time helpers */
int gv_sched_parse_time(const char *text, time_t *out);
void gv_sched_format_time(const struct timespec *ts, char *buf, size_t cap);

/* Is the node usable at wall time now?  NULL when yes, else why not (a
 * static string or buf). */
const char *gv_sched_node_unusable(struct gv_sched *s, const struct snode *n, time_t now, char *buf,
                                   size_t cap);
/* The same test without the reason, inline for a filter's every candidate:
 * true exactly when gv_sched_node_unusable returns NULL. */
static inline bool gv_sched_node_usable(const struct gv_sched *s, const struct snode *n, time_t now)
{
    return n != NULL && n->state == NODE_OK && n->heartbeat != 0 &&
           now - n->heartbeat <= s->cfg.heartbeat_timeout_s;
}

#endif
