/*
 * kubectl-gpuvisor: the `kubectl gpuvisor` plugin (docs/observability.md,
 * "kubectl gpuvisor").  It reads the cluster the way the scheduler does —
 * nodes with the agent's inventory (src/contracts), pods with their
 * assignments — into the allocation engine (src/alloc) through the shared
 * kube client (src/kube), and live usage from the node agents' /metrics
 * through the API server's pod proxy.  Placements count only when their
 * signature verifies under the placement key, where one is at hand
 * (verify.c).  Read-only, except `defrag --apply`, which evicts pods
 * through the Eviction API.
 */
#ifndef GV_KUBECTL_H
#define GV_KUBECTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "alloc/gv_alloc.h"
#include "contracts/placement.h"
#include "common/gv_error.h"
#include "kube/gv_kube.h"

/* Exit codes: 0 ok, 1 error talking to the cluster, 2 usage, 3 gpuvisor not
 * installed, 4 forbidden (RBAC). */
enum { KC_OK = 0, KC_ERR = 1, KC_USAGE = 2, KC_NOT_INSTALLED = 3, KC_FORBIDDEN = 4,
       KC_STOPPED = 5 };

enum kc_output { KC_OUT_TABLE = 0, KC_OUT_WIDE, KC_OUT_JSON, KC_OUT_YAML };

struct kc_opts {
    const char *kubeconfig, *context, *server, *namespace_;
    bool all_namespaces, details;
    enum kc_output output;
    const char *sort;           /* top: column to sort by */
    const char *agent_selector; /* label selector of the node agents' pods */
    const char *agent_namespace; /* ... in this namespace only */
    const char *agent_port;     /* port (name or number) of their /metrics; NULL: "metrics" */
    const char *scheduler_name; /* spec.schedulerName of the pods gpuvisor places */
    long heartbeat_timeout_s;
    long max_moves;             /* defrag: move budget */
    bool apply;                 /* defrag: carry the plan out */
    long move_timeout_s;        /* defrag --apply: wait for each replacement */
    /* placement verification (verify.c) */
    const char *placement_key_file;   /* --placement-key-file */
    const char *placement_key_secret; /* NS/NAME of the key's Secret; "" none */
    bool trust_annotations;           /* defrag --apply without a key */
    time_t unsigned_before; /* --accept-unsigned-placements-before (0: none) */
    const struct gv_placement_key *placement_key; /* found by main; NULL: unverified */
    const char *placement_key_note; /* where the key came from, or why none */
    FILE *out;
};

/* ---- cluster model (cluster.c) ---------------------------------------- */

struct kc_node {
    char *name;
    const char *state; /* "ready", "stale", "no_agent", "unusable" */
    char *reason;
    bool in_engine;
    json_t *whole; /* the inventory's wholeDevices (MIG, passthrough GPUs, mdevs), NULL when none */
    /* per resource: {resource, kind, total, healthy, used, free}; used = what
     * pods bound here ask (count placement, docs/scheduler.md); NULL when none */
    json_t *whole_res;
};

struct kc_pod {
    char *ns, *name, *node;
    bool bound;
    struct gv_alloc_assignment *a;
    size_t cidx[GV_ALLOC_MAX_CONTAINERS]; /* each assigned container's index in the spec */
    struct gv_alloc_request *req; /* as parsed (uid set): what defrag re-places */
    json_t *obj;                  /* the Pod (owner references, labels) */
};

struct kc_cluster {
    struct gv_alloc_cluster *engine;
    struct kc_node *nodes; /* sorted by name */
    size_t n_nodes;
    struct kc_pod *pods; /* sorted by namespace, name */
    size_t n_pods;
    size_t n_inventories;
    json_t *pending; /* Pods of gpuvisor's scheduler not yet placed (array) */
    /* placements that do not verify, not counted: {namespace, pod, node, reason} */
    json_t *unverified;
};

/* An RFC 3339 time as the API writes it (UTC; a fraction is ignored): 0, or
 * -1 when unreadable. */
int kc_parse_time(const char *s, time_t *out);

/* Reads nodes and assigned pods.  Returns a KC_* code; msg says why. */
int kc_cluster_load(struct gv_kube_client *kube, const struct kc_opts *o, struct kc_cluster *c,
                    struct gv_error *err);
void kc_cluster_clear(struct kc_cluster *c);
/* Classifies a kube error: KC_FORBIDDEN for HTTP 403, else KC_ERR. */
int kc_kube_failure(const struct gv_error *err);

/* The kubeconfig as kubectl finds it (kubeconfig.c): 0, or -1 with err. */
int load_config(const struct kc_opts *o, struct gv_kube_config **cfg, struct gv_error *err);
/* A second client to the same server that never retries (kubeconfig.c): an
 * Eviction answered 429 is a disruption budget's no, not a busy server.
 * 0 ok, -1 with err. */
int kc_kube_client_once(const struct kc_opts *o, struct gv_kube_client **out,
                        struct gv_kube_config **cfg, struct gv_error *err);

/* ---- placement verification (verify.c) --------------------------------- */

/* The placement key: --placement-key-file, else the Secret.  KC_OK with
 * *key set and note saying where from, or with *key NULL and note saying
 * why (forbidden, not found: the commands run unverified); KC_USAGE when
 * --placement-key-file or --placement-key-secret is unusable (err). */
int kc_placement_key_find(struct gv_kube_client *kube, const struct kc_opts *o,
                          struct gv_placement_key **key, char *note, size_t cap,
                          struct gv_error *err);
/* Whether the pod's placement counts: always without a key; with one, as
 * the scheduler decides (gv_placement_check_pod); why says why not. */
bool kc_placement_counts(const struct kc_opts *o, const json_t *pod, char *why, size_t cap);
/* Says on stderr that placements are not verified, when they are not. */
void kc_placement_warn(const struct kc_opts *o);

/* ---- commands ---------------------------------------------------------- */

int kc_inspect(struct gv_kube_client *kube, const struct kc_opts *o, const char *node);
int kc_top(struct gv_kube_client *kube, const struct kc_opts *o, const char *what);
/* defrag.c: plan (and with o->apply carry out) pod moves; KC_STOPPED when
 * --apply stopped at a surprise. */
int kc_defrag(struct gv_kube_client *kube, const struct kc_opts *o);

/* ---- output (output.c) ------------------------------------------------- */

/* A table printed with columns aligned, kubectl style. */
struct kc_table {
    size_t ncol, nrow, cap;
    char **cells; /* nrow x ncol; row 0 is the header */
};
void kc_table_init(struct kc_table *t, size_t ncol);
/* Adds a row of ncol printf-formatted cells ("" for empty). */
void kc_table_row(struct kc_table *t, ...);
void kc_table_print(struct kc_table *t, FILE *out);
void kc_table_free(struct kc_table *t);
/* Replaces every control character (C0, DEL, C1) with '?' in place: text a
 * tenant wrote reaches the terminal with no escape sequence in it. */
void kc_printable(char *s);
/* Writes a JSON value as JSON (indented) or YAML (libyaml's emitter). */
int kc_emit(json_t *doc, enum kc_output fmt, FILE *out);
/* "81920" MiB -> "80.0Gi" style for tables. */
void kc_fmt_mib(char *buf, size_t cap, double mib);

#endif
