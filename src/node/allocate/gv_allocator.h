/*
 * Allocate: turns the scheduler's assignment for the pod being admitted
 * into the container's devices, limits and mounts (docs/node-agent.md,
 * "Allocate").
 *
 * The kubelet's Allocate names device IDs but no pod, so the allocator
 * finds the pod: among pods bound to this node (an informer cache, never a
 * LIST per call) it takes those with a gpuvisor assignment whose containers
 * are not all allocated yet, oldest assignment first, and hands out the
 * next container's GPUs.  Progress goes back into the pod's annotations.
 * Locks are per pod and never held across an API round trip that another
 * pod waits on.
 */
#ifndef GV_NODE_ALLOCATOR_H
#define GV_NODE_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "contracts/placement.h"
#include "kube/gv_kube.h"
#include "node/config/gv_config.h"
#include "node/discovery/gv_cdi.h"
#include "node/discovery/gv_gpus.h"
#include "node/modes/gv_mode.h"

struct V1beta1__ContainerAllocateResponse;
struct gv_modes;

struct gv_allocator_config {
    const char *node;           /* this node's name */
    /*
     * agent's view: <state_dir>/containers/<uid>/<container>/ (the
     * container's writable runtime dir) and <state_dir>/limits/<uid>/<container>/
     * (limits file and Allocate records; never mounted writable)
     */
    const char *state_dir;
    const char *host_state_dir; /* the same directory as the host sees it (mount sources) */
    const char *install_dir;    /* host: <install_dir>/lib/libgpuvisor.so, <install_dir>/ld.so.preload */
    int64_t wait_ms;            /* how long to wait for the cache to show the pod (0: 5000) */
    int64_t gc_grace_ms;        /* keep a vanished pod's directory this long (0: 60000) */
    /* The kubelet's device manager checkpoint (<device-plugins dir>/
     * kubelet_internal_checkpoint): read only to tell a container the
     * kubelet admits again from one it holds devices for; NULL: none (an
     * answer is then never handed out again under other IDs). */
    const char *kubelet_checkpoint;
    /* Placement signature and opt-out checks before a pod is served
     * (contracts/placement.h); borrowed, NULL = none (tests). */
    const struct gv_placement_policy *placement;
    /* The sharing modes' states (gv_mode.h); borrowed, NULL = the allocator makes its own. */
    struct gv_modes *modes;
};

struct gv_allocator;

/*
 * Starts a pod informer for this node on kube; progress annotations go
 * through writer (a client with few retries: Allocate must not wait out an
 * API outage, the allocator's own retry thread catches up later).  Both
 * stay owned by the caller and must outlive the allocator; NULL kube: no
 * API server (only modes without limits can be served).
 */
gv_status gv_allocator_new(const struct gv_allocator_config *cfg, struct gv_kube_client *kube,
                           struct gv_kube_client *writer, struct gv_allocator **out,
                           struct gv_error *err);
void gv_allocator_free(struct gv_allocator *a);

/* Replaces the GPU table and node settings (config reload, health change). */
gv_status gv_allocator_set_gpus(struct gv_allocator *a, const struct gv_node_config *cfg,
                                const struct gv_allocator_gpu *gpus, size_t n,
                                struct gv_error *err);

/* The gv_plugin_allocate_fn: ud is the allocator. */
int gv_allocator_allocate(void *ud, const char *const *ids, size_t n_ids,
                          struct V1beta1__ContainerAllocateResponse *resp, char *msg,
                          size_t msg_size);

/*
 * The gv_plugin_prefer_fn (GetPreferredAllocation): picks, for the next
 * pending container that asks `size` GPUs, one device on each GPU of its
 * assignment from the kubelet's available (and must-include) IDs, and
 * remembers that promise (in memory and on disk) so that the Allocate
 * carrying exactly these IDs is matched to that container.  Like Allocate
 * it waits up to wait_ms for the cache to show a pending assignment.  Writes up to
 * size pointers into out (pointing into available/must); false when no
 * pending assignment can be honoured (the caller then prefers generically).
 */
bool gv_allocator_prefer(void *ud, const char *const *available, size_t n_available,
                         const char *const *must, size_t n_must, size_t size, const char **out,
                         size_t *n_out);

/*
 * Counters since start (docs/node-agent.md, "Allocate"); for metrics.
 * id_mismatches: Allocates whose device IDs named other GPUs than the
 * assignment (the kubelet ignored or never asked our preference): the
 * container still gets its assigned GPUs, but the kubelet's checkpoint and
 * PodResources name the IDs it sent.
 */
struct gv_allocator_stats {
    uint64_t answered;        /* containers answered (first answers) */
    uint64_t replays;         /* repeated Allocates answered from the durable record */
    uint64_t by_promise;      /* Allocates matched to a container by our preferred IDs */
    uint64_t id_mismatches;   /* device IDs on other GPUs than the assignment */
    uint64_t preferred;       /* GetPreferredAllocation answered from an assignment */
    uint64_t preferred_generic; /* ... answered without one (no pending assignment fits) */
};
void gv_allocator_get_stats(struct gv_allocator *a, struct gv_allocator_stats *out);

/* Removes per-container directories of pods gone for longer than the grace; returns how many. */
size_t gv_allocator_gc(struct gv_allocator *a);

/*
 * Tests and fuzzing: an allocator made without an API server answers from
 * this pod list (a JSON array, not referenced) as if it were the cache,
 * each pod passed through gv_allocator_cache_pod.
 */
void gv_allocator_set_pods(struct gv_allocator *a, json_t *pods);

/*
 * What the pod cache keeps of a pod (new reference): what Allocate reads
 * while the pod may still be admitted, else its uid alone as a JSON string;
 * NULL for a pod that cannot be admitted and has no uid (docs/node-agent.md,
 * "Memory").  The informer's transform; public for tests.
 */
json_t *gv_allocator_cache_pod(json_t *pod);

/* Answer without the NVIDIA runtime from h (owned from now; NULL: with it); gv_direct.h. */
struct gv_cdi_host;
void gv_allocator_set_direct(struct gv_allocator *a, struct gv_cdi_host *h);

/* True once the pod cache has its first list. */
bool gv_allocator_synced(struct gv_allocator *a);
/* Waits up to ms for the first list; true when synced (no API server: true at once). */
bool gv_allocator_wait_synced(struct gv_allocator *a, int64_t ms);
/* Annotation writes waiting for the API server to come back. */
size_t gv_allocator_pending_writes(struct gv_allocator *a);

#endif
