/*
 * Private to the allocate room: the allocator's state (struct gv_allocator,
 * the per-pod records) and the helpers its files share.  allocator.c answers
 * Allocate and GetPreferredAllocation; pod_state.c keeps what this agent knows
 * of each pod and writes it back as annotations; choose.c picks the pod being
 * admitted; ctr_answer.c builds one container's answer; pod_cache.c follows
 * the pod informer, recovers from disk and collects garbage.  Imports run
 * one way: allocator.c -> pod_cache.c, choose.c, ctr_answer.c -> pod_state.c,
 * and ctr_answer.c -> direct.c; ctr_state.c (the on-disk records) is below all.
 */
#ifndef GV_NODE_ALLOCATE_INTERNAL_H
#define GV_NODE_ALLOCATE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc/gv_alloc.h"
#include "common/gv_jalloc.h"
#include "deviceplugin.pb-c.h"
#include "node/allocate/gv_allocator.h"
#include "node/modes/gv_mode.h"

#define ANN_ASSIGNMENT GV_ALLOC_ASSIGNMENT_ANNOTATION
#define ANN_ASSIGNED_AT "gpuvisor.io/assigned-at"
#define ANN_ALLOCATION "gpuvisor.io/allocation"
#define ANN_MESSAGE "gpuvisor.io/allocation-message"
#define ANN_CONTAINERS "gpuvisor.io/allocated-containers"
#define ANN_PRELOAD "gpuvisor.io/preload"

/*
 * What this agent knows about a pod beyond the (possibly lagging) cache.
 * One per pod served since its last GC, so strings are sized to their
 * content rather than to their maximum (a fixed-size record was 2.3 KiB).
 */
/*
 * One container's Allocate record (docs/node-agent.md, "Allocate state
 * machine"): promised (GetPreferredAllocation chose these IDs for it) or
 * answered (the answer is on disk and a repeat of the same IDs gets it
 * again, until the pod's status shows the container created).
 */
struct ctr_rec {
    struct ctr_rec *next;
    char *ids;     /* the device IDs, sorted, comma-joined (ids_key) */
    bool answered; /* false: promised */
    int64_t since; /* monotonic ms of the promise; 0: recovered from disk (older than any) */
    bool started;  /* the kubelet created the container: it had the answer */
    char ctr[];
};

struct pod_state {
    struct pod_state *next;
    char *ns, *name;           /* NULL until known (recovered from disk) */
    char *done;                /* containers served, comma-separated; NULL: none */
    size_t n_done;
    char inflight[GV_ALLOC_CNAME_MAX];
    bool all_done;
    struct ctr_rec *recs;      /* promises and answers of its containers */
    unsigned n_total;          /* containers in its assignment (0: not known yet) */
    bool ended;                /* deleted or finished, as the pod cache last showed it */
    bool recovered;            /* answers read from disk: compare with the annotations once */
    uint64_t version, written; /* progress changes / the last one the API took */
    bool writing;              /* the writer thread is sending it (GC must wait) */
    unsigned attempts;         /* failed writes in a row */
    int64_t next_try;          /* monotonic ms of the next attempt */
    char state[16];
    char *message;             /* NULL when none */
    int64_t gone_since;        /* monotonic ms the cache stopped showing it; 0 while present */
    char uid[];
};

struct gv_allocator {
    struct gv_allocator_config cfg;
    char *node, *state_dir, *host_state_dir, *install_dir;
    char node_dir[4096], host_node_dir[4096]; /* the node-wide priority directory, both views */
    struct gv_kube_client *kube;
    struct gv_kube_client *writer;
    struct gv_informer *pods_inf;
    struct gv_jzone *pending_zone; /* the cache's forms of pods that may be admitted */
    json_t *fixed_pods; /* tests/fuzzing: the pod list instead of the informer's */
    pthread_mutex_t mu; /* guards everything below; never held across I/O */
    pthread_cond_t changed;
    uint64_t generation; /* bumped by every cache event */
    struct pod_state *pods;
    struct gv_allocator_gpu *gpus;
    size_t n_gpus;
    bool cdi;
    char cdi_kind[128];
    /* nvidiaRuntime false: the driver's files found on the host (gv_direct.h); else NULL */
    struct gv_cdi_host *direct;
    char core_policy[16];
    char libcuda_log_level[8];
    char resource_name[128];
    char *checkpoint; /* the kubelet's device manager checkpoint; NULL: none */
    struct gv_modes *modes;     /* the modes' states (borrowed from cfg, or own_modes) */
    struct gv_modes *own_modes; /* made here when the caller gave none (tests) */
    /* the writer thread: progress annotations, retried through API outages */
    pthread_t writer_thread;
    bool writer_running, quit;
    struct gv_allocator_stats stats;
};

/* choose.c's answer: the pod (and container) an Allocate or a preference is for. */
struct candidate {
    json_t *pod;
    struct gv_alloc_assignment asg;
    size_t next; /* container index in asg */
};

struct choice {
    struct candidate best;
    bool found;
    bool by_promise;        /* matched by the IDs GetPreferredAllocation promised */
    size_t n_mismatch;      /* pods whose next container wants another device count */
    char mismatch[256];
    size_t n_bad;
    json_t *bad[8];         /* malformed pods (new references) */
    char bad_msg[8][GV_ERROR_MSG_MAX];
};

/* choose.c */
void choose(struct gv_allocator *a, json_t *pods, size_t n_ids, const char *key,
            const char *const *avail, size_t n_avail, struct choice *ch);
void choice_release(struct choice *ch);

/* ctr_answer.c */
int fail(char *msg, size_t cap, int code, const char *fmt, ...)
         __attribute__((format(printf, 4, 5)));
bool id_to_uuid(const char *id, char *uuid, size_t cap);
bool plain_unit(const struct gv_allocator_gpu *g);
bool vm_unit(const struct gv_allocator_gpu *g);
int build(struct gv_allocator *a, json_t *pod, const struct gv_alloc_container_assign *c,
          char uuids[][GV_ALLOC_UUID_MAX], size_t n_ids,
          V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap);

/* pod_cache.c */
void recover(struct gv_allocator *a);
json_t *trim_pod(void *ud, json_t *pod);
void on_add(void *ud, json_t *obj);
void on_update(void *ud, json_t *old_obj, json_t *new_obj);
void on_delete(void *ud, json_t *obj);
void observe(struct gv_allocator *a, json_t *pod);

/* pod_state.c */
bool may_be_admitted(json_t *pod);
bool cached(json_t *pods, const char *uid);
const char *jstr2(json_t *o, const char *k1, const char *k2);
struct pod_state *get_pod(struct gv_allocator *a, const char *uid, const char *ns,
                          const char *name);
void record(struct gv_allocator *a, struct pod_state *p, const char *state,
            const char *message);
const struct gv_allocator_gpu *find_gpu(const struct gv_allocator *a, const char *uuid);
bool in_list(const char *list, const char *name);
bool pod_has(const struct pod_state *p, const char *ctr);
bool pod_add_done(struct pod_state *p, const char *ctr);
bool set_rec(struct pod_state *p, const char *ctr, const char *ids, bool answered);
char *ids_key(const char *const *ids, size_t n);
bool taken_elsewhere(struct gv_allocator *a, json_t *pods, const char *id, const char *uid,
                     const char *ctr);
void *writer_main(void *arg);
void pod_free(struct pod_state *p);
bool safe_component(const char *s);
struct ctr_rec *find_rec(const struct pod_state *p, const char *ctr);
struct pod_state *find_pod(struct gv_allocator *a, const char *uid);
const char *cached_uid(json_t *form);
bool pod_set_name(struct pod_state *p, const char *ns, const char *name);

/* kubelet_checkpoint.c: the kubelet's device manager checkpoint.  _parse
 * and _load give its PodDeviceEntries (new reference; an empty array for
 * none), NULL when unknown (no file, too big, not the kubelet's shape);
 * _holds: does an entry give devices of resource to this container? */
json_t *kubelet_checkpoint_parse(const char *text, size_t len);
json_t *kubelet_checkpoint_load(const char *path);
bool kubelet_checkpoint_holds(json_t *entries, const char *uid, const char *ctr,
                              const char *resource);

#endif
