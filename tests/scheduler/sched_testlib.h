/*
 * Fixtures for scheduler tests: the kube-apiserver stand-in
 * (tests/fakes/apiserver), nodes carrying an agent inventory and heartbeat,
 * pods as kube-scheduler presents them, and an HTTP client for the
 * extender's verbs.  Shared by the integration tests and the bench.
 */
#ifndef GV_SCHED_TESTLIB_H
#define GV_SCHED_TESTLIB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kube/gv_kube.h"
#include "tests/fakes/apiserver/fake_apiserver.h"

struct gpu_desc {
    const char *model;
    uint64_t mem_mib;
    unsigned split;
};

/* The inventory annotation text an agent with these GPUs would publish;
 * uuids are "GPU-<node>-<i>".  Caller frees. */
char *st_inventory(const char *node, const struct gpu_desc *gpus, unsigned n, bool healthy);
/* Node object with inventory (NULL = none) and a heartbeat age_s seconds old
 * (< 0 = no heartbeat). */
json_t *st_node(const char *name, const char *inventory, long heartbeat_age_s);
/* Creates (or replaces, keeping nothing) a node on the API server. */
void st_put_node(struct gv_kube_client *c, json_t *node);

/*
 * Creates a pod in namespace "default" whose containers ask for GPUs:
 * containers is a JSON array text of {"name":..., "limits":{...}} objects;
 * annotations a JSON object text or NULL.  Returns the created pod (with
 * uid and resourceVersion), as kube-scheduler would present it.
 */
json_t *st_create_pod(struct gv_kube_client *c, const char *name, const char *containers,
                      const char *annotations);
/* The same with spec.priority (as admission sets it from a PriorityClass;
 * prio < 0: none). */
json_t *st_create_pod_prio(struct gv_kube_client *c, const char *name, const char *containers,
                           const char *annotations, int prio);

/* A pod of the gpuvisor profile as the pod informer delivers it, asking one
 * GPU of mem MiB at priority prio: bound to node with the assignment text
 * assign when node is not NULL, pending otherwise. */
json_t *st_gpu_pod(const char *uid, int prio, unsigned long long mem, const char *node,
                   const char *assign);

/* HTTP POST/GET; returns the status (0 on transport error), body in *out. */
long st_http(const char *method, const char *url, const char *body, char **out);
/* POSTs args (consumed) as JSON to base/verb; returns the parsed answer
 * (NULL on non-200); *status (if not NULL) gets the HTTP status. */
json_t *st_post(const char *base, const char *verb, json_t *args, long *status);
/* POSTs {"Pod": pod, "NodeNames": names} to base/filter; returns the
 * parsed result (NULL on non-200); *status gets the HTTP status. */
json_t *st_filter(const char *base, json_t *pod, const char *const *names, size_t n, long *status);
/* POSTs ExtenderBindingArgs; returns the "Error" text (heap; "" on success). */
char *st_bind(const char *base, json_t *pod, const char *node);
/* The single node a filter result kept, or NULL. */
const char *st_chosen(json_t *result);

/* Sum of a metric's samples whose label set contains the given substring
 * (e.g. "node=\"n1\"") in the /metrics text at url; -1 on error. */
double st_metric(const char *url, const char *name, const char *label_substring);

/* Runs fn(ctx + i * size) for i < n, all on threads at once; returns when all end. */
void st_race(size_t n, void *(*fn)(void *), void *ctx, size_t size);

/* A client of the stand-in at url with quick retries (2, from 10 ms); NULL on error. */
struct gv_kube_client *st_kube(const char *url);

/* Polls cond(ud) every 20 ms for up to timeout_ms; returns its last value. */
bool st_wait(bool (*cond)(void *ud), void *ud, long timeout_ms);

#endif
