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
    enum node_state state;
    char *reason;      /* NODE_MALFORMED: what was wrong */
    time_t heartbeat;  /* 0 = none */
    uint64_t inv_hash; /* hash of the last inventory text applied */
    bool in_engine;    /* the engine has a model of this node */
    uint32_t n_gpus;
    uint64_t max_gpu_mib;
    bool stale_logged;
    /* Inline: a filter confirms each candidate's hash match here, on the
     * cache line it reads next anyway. */
    char name[];
};

/* Pods the scheduler tracks outside the engine's placements: pending ones
 * (for metrics), and assignments not yet backed by a bound pod. */
enum rec_phase {
    REC_PENDING,  /* last filter found no place */
    REC_RESERVED, /* filter placed it; waiting for bind */
    REC_BINDING,  /* bind in progress */
    REC_UNBOUND,  /* assignment annotation written, pod not bound yet */
};

struct srec {
    char *uid;
    char *ns, *name;
    enum rec_phase phase;
    enum pending_reason pending;
    char *node;         /* RESERVED / BINDING / UNBOUND */
    char *encoded;      /* RESERVED / BINDING: the assignment text */
    char *rv;           /* RESERVED: the pod's resourceVersion at filter time */
    double since;       /* monotonic seconds: when the phase began */
    time_t assigned_at; /* UNBOUND: wall time from gpuvisor.io/assigned-at */
};

struct gv_sched {
    struct gv_sched_config cfg;
    struct gv_kube_client *kube;
    struct gv_informer *node_inf, *pod_inf;

    pthread_mutex_t lock; /* guards everything below (but servers and the sweeper) */
    struct gv_alloc_cluster *cluster;
    struct snode **nodes; /* sorted by (gv_hash_str(name), name) */
    uint64_t *node_hash;  /* parallel to nodes: gv_hash_str of each name */
    size_t n_nodes, cap_nodes;
    struct srec **recs; /* sorted by uid */
    size_t n_recs, cap_recs;
    json_t *orphans; /* uid -> trimmed pod whose assigned node is not known yet */
    uint64_t binds_ok, binds_failed, bind_conflicts, filters_nofit;

    struct gv_httpd *servers[4]; /* for /metrics */
    struct gv_sched_obs *obs;    /* observe.c: HAMi series, dashboard state */
    size_t n_servers;

    pthread_t sweeper;
    bool sweeper_running;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping;
};

/* sched_state.c */
double gv_sched_now(void);
struct snode *gv_sched_node_find(struct gv_sched *s, const char *name);
/* Index of the first node ordered after name (which need not exist):
 * resumes a walk over s->nodes after its lock was dropped. */
size_t gv_sched_node_after(struct gv_sched *s, const char *name);
struct srec *gv_sched_rec_find(struct gv_sched *s, const char *uid);
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

/* time helpers */
int gv_sched_parse_time(const char *text, time_t *out);
void gv_sched_format_time(const struct timespec *ts, char *buf, size_t cap);

/* Is the node usable at wall time now?  NULL when yes, else why not (a
 * static string or buf). */
const char *gv_sched_node_unusable(struct gv_sched *s, const struct snode *n, time_t now, char *buf,
                                   size_t cap);

#endif
