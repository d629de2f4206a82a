/*
 * Kubernetes API client and informer cache shared by gpuvisor's daemons
 * (gpuvisor-scheduler and gpuvisor-node).  Our HTTP/1.1 transport over
 * mbedTLS (src/kube/kube_http.h), jansson for JSON.  See docs/kube-client.md for the design.
 *
 * Paths are API paths ("/api/v1/namespaces/default/pods/p1"); the client
 * prepends the server URL and adds the query string built from the options.
 *
 * Errors: every call returns a gv_status and fills struct gv_error with a
 * message that names the method, the path, the HTTP status and the API's
 * Status message.  HTTP statuses map to codes as follows:
 *
 *   404 NotFound                 GV_ENOTFOUND
 *   409 AlreadyExists            GV_EEXIST
 *   409 Conflict (stale resourceVersion, pod already bound)   GV_ECONFLICT
 *   410 Gone / Expired (resourceVersion or continue too old)  GV_ERANGE
 *   400, 422                     GV_EINVAL
 *   415                          GV_EUNSUPPORTED
 *   401, 403, other 4xx          GV_EIO
 *   429, 5xx, connection errors  retried with jittered exponential backoff,
 *                                then GV_EUNAVAILABLE (GV_ETIMEOUT when the
 *                                request timed out)
 *   malformed JSON from server   GV_EPROTO
 *
 * Lifetimes: free informers (and end watches) before their client.
 *
 * Thread safety: a client may be used from any number of threads at once.
 * Calls share a small pool of keep-alive connections; watches get their own
 * connection.  JSON objects returned to the caller
 * are new references the caller owns (json_decref).  Objects handed to
 * informer callbacks, and those returned by gv_informer_get/gv_informer_list,
 * are shared with the cache: treat them as read-only (since jansson 2.11
 * reference counts are atomic and json_dumps is thread-safe, so reading one
 * object from several threads is safe; modifying it is not).
 */
#ifndef GV_KUBE_H
#define GV_KUBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/gv_error.h"

/* ------------------------------------------------------------------------
 * Configuration
 */

/* All strings are owned by the config and released by gv_kube_config_free.
 * Loaders fill them; callers may change the numeric fields afterwards. */
struct gv_kube_config {
    char *server;           /* "https://10.0.0.1:443", "http://127.0.0.1:8080" */
    char *token;            /* bearer token, or NULL */
    char *token_file;       /* re-read every 60 s and after a 401 (rotation), or NULL */
    char *ca_file;          /* PEM CA bundle path, or NULL (system store) */
    char *ca_data;          /* PEM CA bundle contents, or NULL */
    char *client_cert_file; /* PEM client certificate path, or NULL */
    char *client_cert_data; /* PEM client certificate contents, or NULL */
    char *client_key_file;  /* PEM client key path, or NULL */
    char *client_key_data;  /* PEM client key contents, or NULL */
    char *unix_socket;      /* connect through this unix socket, or NULL */
    char *namespace_;       /* default namespace (in-cluster / context), or NULL */
    bool insecure_skip_tls_verify;

    long timeout_ms;         /* whole request, non-watch (default 30000) */
    long connect_timeout_ms; /* TCP + TLS connect (default 5000) */
    int max_retries;         /* retries after the first attempt (default 5) */
    long backoff_initial_ms; /* first retry delay (default 200) */
    long backoff_max_ms;     /* delay cap (default 5000) */
};

/* Empty config with the defaults above and server = url ("http://host:port"). */
gv_status gv_kube_config_from_url(const char *url, struct gv_kube_config **out,
                                  struct gv_error *err);

/*
 * In-cluster config: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT, the
 * service-account token, CA and namespace under dir (NULL:
 * /var/run/secrets/kubernetes.io/serviceaccount).
 */
gv_status gv_kube_config_in_cluster(const char *dir, struct gv_kube_config **out,
                                    struct gv_error *err);

/*
 * Kubeconfig file (YAML, read with libyaml): context (NULL: current-context),
 * its cluster (server, certificate-authority[-data], insecure-skip-tls-verify)
 * and user (token, tokenFile, client-certificate[-data], client-key[-data]).
 * Relative file paths are resolved against the kubeconfig's directory.
 * Exec and auth-provider plugins are not supported (clear error).
 */
gv_status gv_kube_config_from_kubeconfig(const char *path, const char *context,
                                         struct gv_kube_config **out, struct gv_error *err);

/*
 * A YAML document as JSON (every scalar a string; depth and node count
 * bounded, so aliases cannot blow up), for other YAML files the daemons read
 * (HAMi's device ConfigMap).  name prefixes errors.
 */
gv_status gv_kube_yaml_load(const char *text, size_t len, const char *name, json_t **out,
                            struct gv_error *err);

/* Same, from an in-memory document; base_dir resolves relative paths. */
gv_status gv_kube_config_parse_kubeconfig(const char *text, size_t len, const char *base_dir,
                                          const char *context, struct gv_kube_config **out,
                                          struct gv_error *err);

/*
 * The usual resolution order: url if non-NULL; else in-cluster when
 * KUBERNETES_SERVICE_HOST is set; else kubeconfig (non-NULL path, else
 * $KUBECONFIG's first entry, else ~/.kube/config).
 */
gv_status gv_kube_config_load(const char *url, const char *kubeconfig,
                              struct gv_kube_config **out, struct gv_error *err);

void gv_kube_config_free(struct gv_kube_config *cfg);

/* ------------------------------------------------------------------------
 * Client
 */

struct gv_kube_client;

/* Copies what it needs from cfg (cfg may be freed afterwards). */
gv_status gv_kube_client_new(const struct gv_kube_config *cfg, struct gv_kube_client **out,
                             struct gv_error *err);
void gv_kube_client_free(struct gv_kube_client *c);

/* What the client's connections have done so far: how many it opened (each
 * a TCP + TLS handshake for the API server), how many requests waited for
 * one of its kept connections and for how long.  Shown on the scheduler's
 * /metrics (docs/scheduler.md, "Where a bind's time goes"). */
struct gv_kube_transport_stats {
    uint64_t connections_opened;
    uint64_t requests;        /* ordinary requests (watches have their own connections) */
    uint64_t requests_queued; /* ... that waited for a connection */
    uint64_t queue_timeouts;  /* ... that reached their deadline waiting */
    double queue_wait_seconds; /* all waits together */
    uint64_t most_queued;     /* the longest line seen */
    int connections_busy;     /* now */
    int requests_waiting;     /* now */
};
void gv_kube_transport_stats(struct gv_kube_client *c, struct gv_kube_transport_stats *out);

/* Selectors and paging for LIST and WATCH.  NULL fields are omitted. */
struct gv_kube_list_opts {
    const char *label_selector; /* "app=x,tier!=db" */
    const char *field_selector; /* "spec.nodeName=node1" */
    long limit;                 /* page size; 0 = server default (unpaged) */
};

/* GET path → *out (new reference). */
gv_status gv_kube_get(struct gv_kube_client *c, const char *path, json_t **out,
                      struct gv_error *err);

/* GET path whose answer is not JSON (a pod's /metrics through the API
 * server's proxy: ".../pods/<name>:<port>/proxy/metrics") → *out, a
 * NUL-terminated heap copy of the body (caller frees); *len (may be NULL)
 * its length.  Errors and retries as gv_kube_get. */
gv_status gv_kube_get_text(struct gv_kube_client *c, const char *path, char **out, size_t *len,
                           struct gv_error *err);

/* Whether s is a DNS-1123 label, as a namespace's name must be: 1-63 of
 * a-z, 0-9 and '-', neither end a '-' (names.c). */
bool gv_kube_dns_label(const char *s);

/*
 * LIST path, following "continue" tokens until the last page.  *out is the
 * list object of the first page with "items" holding every page's items and
 * metadata.resourceVersion the snapshot's (use it to start a watch).
 */
gv_status gv_kube_list(struct gv_kube_client *c, const char *path,
                       const struct gv_kube_list_opts *opts, json_t **out, struct gv_error *err);

/*
 * LIST path page by page (opts->limit per page), calling fn with each page
 * (borrowed; "items" always an array, no "continue" left in it).  Keeps one
 * page in memory at a time: what an informer over thousands of objects
 * needs.  An error from fn stops the listing and is returned.  A continue
 * token that expired mid-way gives GV_ERANGE: start over.
 */
typedef gv_status (*gv_kube_page_fn)(void *ud, json_t *page, struct gv_error *err);
gv_status gv_kube_list_pages(struct gv_kube_client *c, const char *path,
                             const struct gv_kube_list_opts *opts, gv_kube_page_fn fn, void *ud,
                             struct gv_error *err);

/* POST body to path (create; pods/<name>/binding for a Binding).  out may be NULL. */
gv_status gv_kube_create(struct gv_kube_client *c, const char *path, const json_t *body,
                         json_t **out, struct gv_error *err);

/* PUT body to path (replace; metadata.resourceVersion in body is a precondition). */
gv_status gv_kube_replace(struct gv_kube_client *c, const char *path, const json_t *body,
                          json_t **out, struct gv_error *err);

typedef enum {
    GV_KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    GV_KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902) */
    GV_KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json */
} gv_kube_patch_type;

/*
 * PATCH path with body.  The API server applies the patch, then refuses to
 * store a result whose metadata.resourceVersion differs from the object's:
 * so a merge patch carrying metadata.resourceVersion, or a JSON patch with
 * {"op":"replace","path":"/metadata/resourceVersion","value":rv}, applies
 * only if the object is still at rv, else GV_ECONFLICT (HTTP 409).  (A JSON
 * patch "test" op that fails is HTTP 422, GV_EINVAL.)  out may be NULL.
 */
gv_status gv_kube_patch(struct gv_kube_client *c, const char *path, gv_kube_patch_type type,
                        const json_t *body, json_t **out, struct gv_error *err);

/*
 * Merge patch of metadata.annotations (value NULL removes the key) with
 * resourceVersion as precondition when non-NULL.  keys/values have n entries.
 */
gv_status gv_kube_patch_annotations(struct gv_kube_client *c, const char *path,
                                    const char *resource_version, const char *const *keys,
                                    const char *const *values, size_t n, json_t **out,
                                    struct gv_error *err);

/* DELETE path.  out (the deleted object or Status) may be NULL. */
gv_status gv_kube_delete(struct gv_kube_client *c, const char *path, json_t **out,
                         struct gv_error *err);

/* DELETE path only if the object there still has this uid (DeleteOptions
 * preconditions): a pod deleted and recreated under the same name since it
 * was read answers GV_ECONFLICT and is left alone. */
gv_status gv_kube_delete_uid(struct gv_kube_client *c, const char *path, const char *uid,
                             json_t **out, struct gv_error *err);

/*
 * POST a Binding of pod namespace/name to node (the scheduler's bind), with
 * uid (if non-NULL) as precondition.  Idempotent: a pod already bound to
 * this node is success (a retried bind whose first answer was lost);
 * bound elsewhere is GV_ECONFLICT with the API's message.
 */
gv_status gv_kube_bind_pod(struct gv_kube_client *c, const char *namespace_, const char *name,
                           const char *uid, const char *node, struct gv_error *err);
/*
 * The same Binding carrying annotations (an object of strings), which the
 * API server writes onto the pod in the same update that binds it (every
 * release since 1.x: BindingREST copies the Binding's annotations), and rv
 * (if non-NULL) as resourceVersion precondition.  Recent servers check
 * the uid and resourceVersion preconditions (409 Conflict); 1.20's does
 * neither (read in its source), so a caller must not rely on them for safety.
 */
gv_status gv_kube_bind_pod_annotated(struct gv_kube_client *c, const char *namespace_,
                                     const char *name, const char *uid, const char *rv,
                                     const char *node, json_t *annotations, struct gv_error *err);

/* ------------------------------------------------------------------------
 * Watch
 */

/* Cancels a running watch (or informer sleep) from another thread. */
struct gv_kube_cancel;
gv_status gv_kube_cancel_new(struct gv_kube_cancel **out, struct gv_error *err);
/* Idempotent; wakes the watch at once. */
void gv_kube_cancel_fire(struct gv_kube_cancel *cancel);
bool gv_kube_cancel_fired(const struct gv_kube_cancel *cancel);
void gv_kube_cancel_free(struct gv_kube_cancel *cancel);

typedef enum {
    GV_KUBE_EVENT_ADDED,
    GV_KUBE_EVENT_MODIFIED,
    GV_KUBE_EVENT_DELETED,
    GV_KUBE_EVENT_BOOKMARK,
} gv_kube_event_type;

const char *gv_kube_event_name(gv_kube_event_type type);

/* Called for each event; object is borrowed.  Return false to stop the watch. */
typedef bool (*gv_kube_watch_fn)(void *ud, gv_kube_event_type type, json_t *object);

struct gv_kube_watch_opts {
    const char *label_selector;
    const char *field_selector;
    const char *resource_version; /* resume point; NULL/"" = from now with ADDED for all */
    bool bookmarks;               /* allowWatchBookmarks=true */
    long timeout_seconds;         /* server-side timeoutSeconds; 0 = server default */
    struct gv_kube_cancel *cancel; /* optional */
};

/*
 * WATCH path: streams events to fn until the server ends the stream (GV_OK),
 * fn returns false or cancel fires (GV_OK), or an error.  A resourceVersion
 * too old for the server (HTTP 410 or an ERROR event with code 410) gives
 * GV_ERANGE: relist.  *last_rv (if non-NULL; caller frees) receives the
 * resourceVersion of the last event seen, bookmarks included, to resume
 * from; it is left unchanged when no event carried one.  Watches are not
 * retried here: the informer owns reconnection.
 */
gv_status gv_kube_watch(struct gv_kube_client *c, const char *path,
                        const struct gv_kube_watch_opts *opts, gv_kube_watch_fn fn, void *ud,
                        char **last_rv, struct gv_error *err);

/* ------------------------------------------------------------------------
 * Informer: LIST + WATCH of one resource in a background thread, keeping a
 * cache keyed by "namespace/name" (or "name" for cluster-scoped objects).
 */

struct gv_informer;

/*
 * Callbacks run on the informer's thread, after the cache was updated, with
 * no lock held (they may call gv_informer_get/list).  Objects are borrowed.
 * After a relist (410 or reconnect), objects that changed are reported as
 * updates, vanished ones as deletes, new ones as adds.
 */
struct gv_informer_callbacks {
    void (*on_add)(void *ud, json_t *obj);
    void (*on_update)(void *ud, json_t *old_obj, json_t *new_obj);
    void (*on_delete)(void *ud, json_t *obj);
    void *ud;
};

struct gv_informer_opts {
    const char *label_selector;
    const char *field_selector; /* e.g. "spec.nodeName=node1" */
    long page_size;             /* LIST page size (default 500) */
    long watch_timeout_seconds; /* re-watch period (default 300..600 s, jittered) */
    long backoff_initial_ms;    /* reconnect delay after a failure (default 200) */
    long backoff_max_ms;        /* reconnect delay cap (default 30000) */
    /*
     * Optional: returns what to cache for obj (a new reference; may be a
     * trimmed copy keeping only the fields the daemon reads, which bounds
     * memory on large clusters), or NULL to leave the object out of the
     * cache.  Runs on the informer thread before caching and callbacks.
     * metadata.managedFields is always dropped (nobody here reads it and it
     * is often the largest part of an object).
     */
    json_t *(*transform)(void *ud, json_t *obj);
    void *transform_ud;
    /* Optional, called instead of the callbacks' on_delete (with their ud):
     * also gets the object's cache key ("namespace/name", or "name" for
     * cluster-scoped objects), so a transform may cache a shared constant
     * (json_true(): no memory per object) when the key is all a delete
     * needs. */
    void (*on_delete_key)(void *ud, const char *key, json_t *obj);
};

/* path is a collection ("/api/v1/nodes", "/api/v1/pods"); opts may be NULL. */
gv_status gv_informer_new(struct gv_kube_client *c, const char *path,
                          const struct gv_informer_opts *opts,
                          const struct gv_informer_callbacks *cb, struct gv_informer **out,
                          struct gv_error *err);
/* Starts the background thread. */
gv_status gv_informer_start(struct gv_informer *inf, struct gv_error *err);
/* Stops and joins the thread (idempotent); no callback runs after it
 * returns.  Called from a callback it only asks the thread to end (no
 * further callback runs after that one); gv_informer_free joins. */
void gv_informer_stop(struct gv_informer *inf);
/* Stops if needed and frees the cache. */
void gv_informer_free(struct gv_informer *inf);

/* True once the first LIST has been applied. */
bool gv_informer_has_synced(struct gv_informer *inf);
/* Waits up to timeout_ms for has_synced; returns it. */
bool gv_informer_wait_synced(struct gv_informer *inf, long timeout_ms);

/*
 * A counter bumped after every change applied to the cache (watch event or
 * relist).  A reader that misses an object it expects (the kubelet calls
 * Allocate before the agent's watch delivered the bound pod) takes the
 * generation, looks, and if needed waits for the next change:
 *     uint64_t g = gv_informer_generation(inf);
 *     while ((pod = find(inf)) == NULL && (g2 = gv_informer_wait_change(inf, g, ms)) != g)
 *         g = g2;
 */
uint64_t gv_informer_generation(struct gv_informer *inf);
/* Waits up to timeout_ms for the generation to move past seen; returns the
 * current generation (== seen on timeout or when stopped). */
uint64_t gv_informer_wait_change(struct gv_informer *inf, uint64_t seen, long timeout_ms);

/* Cached object (new reference) or NULL; namespace_ NULL for cluster-scoped. */
json_t *gv_informer_get(struct gv_informer *inf, const char *namespace_, const char *name);
/* New JSON array referencing every cached object (a consistent snapshot). */
json_t *gv_informer_list(struct gv_informer *inf);
/* Number of cached objects. */
size_t gv_informer_size(struct gv_informer *inf);
/* resourceVersion the cache reflects ("" before the first sync; caller frees). */
char *gv_informer_resource_version(struct gv_informer *inf);

#endif
