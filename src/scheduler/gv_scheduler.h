/*
 * gpuvisor-scheduler: the kube-scheduler extender (filter / prioritize /
 * bind) and the admission webhook, over the allocation engine (src/alloc)
 * and cluster state kept from Kubernetes informers (src/kube).
 *
 * Thread model: HTTP handlers run on libmicrohttpd's threads, informer
 * callbacks on the informers' threads, reservation expiry on a sweeper
 * thread.  One mutex guards the engine and the tables beside it and is never
 * held across an API round trip.  See docs/scheduler.md.
 */
#ifndef GV_SCHEDULER_H
#define GV_SCHEDULER_H

#include <jansson.h>
#include <stdbool.h>
#include <time.h>

#include "alloc/gv_alloc.h"
#include "common/gv_error.h"
#include "kube/gv_kube.h"
#include "scheduler/gv_httpd.h"
#include "scheduler/gv_webhook.h"

struct gv_placement_key;

/* Label that versions before the placement invariant (docs/scheduler.md,
 * "Life of a placement") put on bound pods.  No longer written: a label
 * change made kube-scheduler filter the assumed pod again, and a tenant can
 * remove a label from its own pod.  A failed bind still removes it. */
#define GV_SCHED_ASSIGNED_LABEL "gpuvisor.io/assigned"

struct gv_sched_config {
    /* Resource names, defaults and the cluster's default policies.  The
     * name strings point into names_storage (or static defaults). */
    struct gv_alloc_config alloc;
    char *scheduler_name;      /* spec.schedulerName the webhook sets */
    bool filter_feasible;      /* filter returns every fitting node (prioritize configured) */
    long reservation_ttl_s;    /* reservation / unbound assignment lifetime */
    /* A preemption's hold lifetime (preemptionHoldSeconds).  It must outlast
     * kube-scheduler's retry of the preemptor: 1.20 moves an unschedulable
     * pod back to its active queue at the latest every 60 s, then backs off
     * up to 10 s, so a hold of the reservation's 60 s could lapse before the
     * pod it protects was even tried again, and a lower-priority pod take
     * the GPUs (tests/e2e/preempt_e2e.py saw it at 94 s). */
    long hold_ttl_s;
    long heartbeat_timeout_s;  /* agent heartbeat older than this = stale */
    long self_check_s;         /* accounting self-check period */
    char *node_label_selector; /* nodes the scheduler watches (NULL = all) */
    char *names_storage[6];
    /* NVIDIA container runtime (docs/install.md, "GPU Operator"): the
     * runtimeClassName the webhook gives GPU pods ("" = none), and whether
     * containers asking for no GPU get NVIDIA_VISIBLE_DEVICES=none. */
    char runtime_class[254];
    bool hide_gpus_from_others;
    /* /metrics: per-GPU and per-container series (gpuvisor_gpu_*, HAMi's
     * hami_gpu_*, hami_node_gpu_*, hami_vgpu_*) as well as the per-node and
     * cluster aggregates.  Off by default: at 5,000 nodes they are tens of
     * MB per scrape, and the node agents export per-GPU series themselves
     * (docs/observability.md).  metricsPerGpu / --metrics-per-gpu. */
    bool metrics_per_gpu;
    /* The namespace of the node agents' pods, the only place the dashboard
     * reads usage from (agentNamespace): anyone who can create a pod can
     * give it the agents' label, and a tenant's pod posing as an agent
     * would feed the dashboard its own figures.  DNS-1123 label. */
    char agent_namespace[64];
    /* Why keys of a HAMi device ConfigMap change nothing (also logged). */
    unsigned n_notes;
    char notes[24][200];
    /* Security (docs/isolation.md).  placementKeyFile: the HMAC key that
     * signs every bind and authenticates every placement the informer
     * counts; loaded by gv_sched_config_load_key (owned here, borrowed by
     * gv_sched: free the scheduler first).  NULL key: placements are not
     * authenticated, allowed only with insecure_unsigned (the daemon
     * refuses to start otherwise). */
    char *placement_key_file;
    struct gv_placement_key *placement_key;
    /* Bindings in flight are journaled here (one file each) so that a
     * restarted scheduler holds the GPUs of those its predecessor sent
     * (bind_inflight.h).  NULL: no journal. */
    char *bind_journal_dir;
    bool insecure_unsigned;
    /* Upgrade window: unsigned placements of pods the API server created
     * before this time still count (0 = none). */
    time_t unsigned_before;
    /* Admission policy: identities that may write placement keys,
     * namespaces where running without limits is allowed. */
    struct gv_webhook_policy admission;
    char **writers_storage, **opt_out_storage; /* NULL-terminated; what admission points into */
};

/* Defaults: engine defaults, "gpuvisor-scheduler", filter returns one node,
 * 60 s reservations, 90 s heartbeat timeout. */
gv_status gv_sched_config_default(struct gv_sched_config *cfg, struct gv_error *err);
/* Parses the JSON config file format (docs/scheduler.md) over the defaults;
 * unknown keys and bad values are errors naming the key. */
gv_status gv_sched_config_parse(const char *text, size_t len, struct gv_sched_config *cfg,
                                struct gv_error *err);
gv_status gv_sched_config_load(const char *path, struct gv_sched_config *cfg, struct gv_error *err);
void gv_sched_config_clear(struct gv_sched_config *cfg);
/* Loads cfg->placement_key from path (or cfg->placement_key_file when path
 * is NULL); GV_OK and no key when neither names a file. */
gv_status gv_sched_config_load_key(struct gv_sched_config *cfg, const char *path,
                                   struct gv_error *err);

struct gv_sched;

/*
 * kube may be NULL: then no informer runs and no API call is made (bind
 * fails with a clear error), which unit tests use to drive the state by
 * hand through gv_sched_node_update / gv_sched_pod_update.  The scheduler
 * borrows kube; free it after gv_sched_free.
 */
gv_status gv_sched_new(const struct gv_sched_config *cfg, struct gv_kube_client *kube,
                       struct gv_sched **out, struct gv_error *err);
/* Starts the informers (nodes first, then pods) and the expiry sweeper. */
gv_status gv_sched_start(struct gv_sched *s, struct gv_error *err);
void gv_sched_free(struct gv_sched *s);
/* True once the node and pod caches are synced (always true without kube). */
bool gv_sched_ready(struct gv_sched *s);
/* Waits up to timeout_ms for gv_sched_ready; returns it.  The extender's
 * verbs wait for it: kube-scheduler calls a restarted extender at once. */
bool gv_sched_wait_ready(struct gv_sched *s, long timeout_ms);
/* For a caller that feeds the state by hand (gv_sched_node_update and
 * gv_sched_pod_update) and gives kube for writes only (Bindings, events,
 * evictions): gv_sched_start is never called, so the caches count as
 * synced at once.  Before anything is served. */
void gv_sched_feed_by_hand(struct gv_sched *s);

/* State inputs (what the informers call); objects are borrowed. */
void gv_sched_node_update(struct gv_sched *s, json_t *node);
void gv_sched_node_delete(struct gv_sched *s, json_t *node);
void gv_sched_pod_update(struct gv_sched *s, json_t *pod);
void gv_sched_pod_delete(struct gv_sched *s, json_t *pod);
/* PodDisruptionBudgets (policy/v1 or v1beta1 objects), for preemption. */
void gv_sched_pdb_update(struct gv_sched *s, json_t *pdb);
void gv_sched_pdb_delete(struct gv_sched *s, json_t *pdb);
/* Releases reservations older than the TTL now (the sweeper does it every second). */
void gv_sched_expire(struct gv_sched *s);
/*
 * One accounting self-check now (the sweeper runs one every self_check_s):
 * recomputes per-GPU usage from the pod informer's pods (assignments of
 * pods not terminated) plus live reservations and compares it with the
 * engine's incremental accounting.  A mismatch seen by two consecutive
 * checks is repaired, logged (pod and GPU) and counted in
 * gpuvisor_accounting_drift_repairs_total.  Returns the repairs made (0
 * without a pod informer).
 */
unsigned gv_sched_self_check(struct gv_sched *s);
/* Total repairs so far (the metric's value). */
uint64_t gv_sched_drift_repairs(struct gv_sched *s);

/* Routes: <prefix>/filter, <prefix>/prioritize, <prefix>/bind. */
gv_status gv_sched_serve_extender(struct gv_sched *s, struct gv_httpd *h, const char *prefix,
                                  struct gv_error *err);
/* Route: /mutate (AdmissionReview v1). */
gv_status gv_sched_serve_webhook(struct gv_sched *s, struct gv_httpd *h, struct gv_error *err);
/* Routes: /healthz, /readyz, /metrics (metrics cover every server registered here). */
gv_status gv_sched_serve_health(struct gv_sched *s, struct gv_httpd *h, struct gv_error *err);
/* Routes: the read-only web dashboard (/, its assets) and its JSON
 * (/api/state); see docs/observability.md, "Dashboard". */
gv_status gv_sched_serve_dashboard(struct gv_sched *s, struct gv_httpd *h, struct gv_error *err);
/* HAMi's series names on /metrics (default on): the quota series, and with
 * metrics_per_gpu the per-GPU and per-container ones (off saves ~80% of
 * such a scrape's text: HAMi repeats every GPU in 7 families). */
void gv_sched_obs_set_hami(struct gv_sched *s, bool on);

#endif
