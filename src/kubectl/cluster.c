/*
 * The cluster as the scheduler sees it, read once: nodes with the agent's
 * inventory become the engine's node models (the same codec and engine as
 * gpuvisor-scheduler), assigned pods are placed from their
 * gpuvisor.io/assignment and fed to the workload model, so the
 * fragmentation figure is the scheduler's own measure over today's pods.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "contracts/inventory.h"
#include "contracts/placement.h"
#include "contracts/podspec.h"
#include "kubectl/gv_kubectl.h"

/* An assignment whose Binding never came stops counting after this long
 * (the scheduler's default reservation lifetime). */
#define UNBOUND_TTL_S 60

int kc_kube_failure(const struct gv_error *err)
{
    return strstr(err->msg, "HTTP 403") != NULL ? KC_FORBIDDEN : KC_ERR;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    return json_string_value(json_object_get(json_object_get(o, a), b));
}

int kc_parse_time(const char *s, time_t *out)
{
    struct tm tm = {0};
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (end == NULL)
        return -1;
    *out = timegm(&tm);
    return 0;
}

static int cmp_node(const void *a, const void *b)
{
    return strcmp(((const struct kc_node *)a)->name, ((const struct kc_node *)b)->name);
}

static int cmp_pod(const void *a, const void *b)
{
    const struct kc_pod *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    return c ? c : strcmp(x->name, y->name);
}

/* The inventory's whole devices for display (docs/passthrough.md); NULL when none or unreadable. */
static json_t *whole_devices(const char *text)
{
    struct gv_inventory *inv = malloc(sizeof(*inv));
    json_t *arr = NULL;
    if (inv != NULL && gv_inventory_decode(text, strlen(text), inv, NULL) == GV_OK &&
        inv->whole.n > 0) {
        arr = json_array();
        for (uint32_t i = 0; arr != NULL && i < inv->whole.n; i++) {
            const struct gv_inventory_whole *w = &inv->whole.dev[i];
            json_array_append_new(
                arr, json_pack("{s:s,s:s,s:s,s:s,s:b}", "kind",
                               gv_inventory_whole_kind_name(w->kind),
                               "resource", w->resource, "id", w->id, "pciBusId", w->pci_bus_id,
                               "healthy", w->healthy));
        }
    }
    free(inv);
    return arr;
}

static void add_node(const struct kc_opts *o, struct kc_cluster *c, json_t *node, time_t now)
{
    struct kc_node *n = &c->nodes[c->n_nodes++];
    memset(n, 0, sizeof(*n));
    n->name = strdup(str_at(node, "metadata", "name") ? str_at(node, "metadata", "name") : "");
    const char *inv = gv_podspec_annotation(node, GV_INVENTORY_ANNOTATION);
    if (inv == NULL) {
        n->state = "no_agent";
        return;
    }
    c->n_inventories++;
    n->whole = whole_devices(inv);
    struct gv_podspec_node *pn = NULL;
    struct gv_error err = {0};
    if (gv_podspec_node(node, &pn, &err) == GV_OK) {
        /* Host CPU and memory are kube-scheduler's; the engine sees GPUs only,
         * as in gpuvisor-scheduler. */
        pn->spec.cpu_milli = 0;
        pn->spec.mem_mib = 0;
    }
    if (pn == NULL || gv_alloc_node_upsert(c->engine, &pn->spec, &err) != GV_OK) {
        n->state = "unusable";
        n->reason = strdup(err.msg);
        gv_podspec_node_free(pn);
        return;
    }
    for (uint32_t k = 0; k < pn->n_whole_res; k++) {
        const struct gv_podspec_whole *w = &pn->whole[k];
        if (n->whole_res == NULL)
            n->whole_res = json_array();
        json_array_append_new(n->whole_res,
                              json_pack("{s:s,s:s,s:i,s:i,s:i,s:i}", "resource", w->resource,
                                        "kind", gv_inventory_whole_kind_name(w->kind), "total",
                                        (int)w->total, "healthy", (int)w->healthy, "used", 0,
                                        "free", (int)w->healthy));
    }
    gv_podspec_node_free(pn);
    n->in_engine = true;
    time_t hb = 0;
    const char *hbs = gv_podspec_annotation(node, GV_INVENTORY_HEARTBEAT_ANNOTATION);
    if (hbs == NULL || kc_parse_time(hbs, &hb) != 0 || now - hb > o->heartbeat_timeout_s) {
        n->state = "stale";
        char why[96];
        if (hbs == NULL || hb == 0)
            snprintf(why, sizeof(why), "no agent heartbeat");
        else
            snprintf(why, sizeof(why), "agent heartbeat %lds old", (long)(now - hb));
        n->reason = strdup(why);
    } else {
        n->state = "ready";
    }
}

/* Places one assigned pod; false when it does not count (finished, expired,
 * malformed, node unknown). */
static bool add_pod(const struct kc_opts *o, struct kc_cluster *c, const struct gv_alloc_config *cfg,
                    json_t *pod, time_t now)
{
    const char *phase = str_at(pod, "status", "phase");
    if (phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
        return false;
    const char *text = gv_podspec_annotation(pod, GV_ALLOC_ASSIGNMENT_ANNOTATION);
    const char *uid = str_at(pod, "metadata", "uid");
    const char *bound = str_at(pod, "spec", "nodeName");
    bool unbound = bound == NULL || *bound == '\0';
    /* A placement that does not verify is ignored, as the scheduler and the
     * agents ignore it (verify.c): listed, never counted. */
    char why[GV_ERROR_MSG_MAX];
    bool counts = text == NULL || kc_placement_counts(o, pod, why, sizeof(why));
    if (!counts) {
        const char *at = unbound ? gv_podspec_annotation(pod, GV_PLACEMENT_NODE_ANNOTATION) : bound;
        json_array_append_new(
            c->unverified,
            json_pack("{s:s,s:s,s:s?,s:s}", "namespace",
                      str_at(pod, "metadata", "namespace") ? str_at(pod, "metadata", "namespace")
                                                           : "",
                      "pod", str_at(pod, "metadata", "name") ? str_at(pod, "metadata", "name") : "",
                      "node", at, "reason", why));
    }
    if ((text == NULL || !counts) && uid != NULL && unbound &&
        json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") == NULL)
        json_array_append(c->pending, pod); /* waiting to be placed: defrag may make room */
    if (text == NULL || uid == NULL || !counts)
        return false;
    struct kc_pod *p = &c->pods[c->n_pods];
    memset(p, 0, sizeof(*p));
    struct gv_alloc_request *req = NULL;
    p->a = malloc(sizeof(*p->a));
    if (p->a == NULL || gv_alloc_assignment_decode(text, strlen(text), p->a, NULL) != GV_OK)
        goto skip;
    if (bound != NULL && *bound != '\0' && strcmp(bound, p->a->node) != 0)
        goto skip;
    p->bound = bound != NULL && *bound != '\0';
    time_t at = 0;
    if (!p->bound && (kc_parse_time(gv_podspec_annotation(pod, "gpuvisor.io/assigned-at"), &at) != 0 ||
                      now - at > UNBOUND_TTL_S))
        goto skip;
    if (gv_podspec_request(cfg, pod, &req, NULL) != GV_OK)
        goto skip;
    snprintf(req->uid, sizeof(req->uid), "%s", uid);
    gv_alloc_observe(c->engine, req);
    if (!gv_alloc_node_exists(c->engine, p->a->node) ||
        gv_alloc_place(c->engine, req, p->a, NULL) != GV_OK)
        goto skip;
    p->req = req;
    p->obj = json_incref(pod);
    json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    for (uint32_t k = 0; k < p->a->n_containers; k++) {
        size_t i;
        json_t *v;
        p->cidx[k] = k;
        json_array_foreach(containers, i, v)
        {
            const char *nm = json_string_value(json_object_get(v, "name"));
            if (nm != NULL && strcmp(nm, p->a->containers[k].name) == 0) {
                p->cidx[k] = i;
                break;
            }
        }
    }
    p->ns =
        strdup(str_at(pod, "metadata", "namespace") ? str_at(pod, "metadata", "namespace") : "");
    p->name = strdup(str_at(pod, "metadata", "name") ? str_at(pod, "metadata", "name") : "");
    p->node = strdup(p->a->node);
    c->n_pods++;
    return true;
skip:
    gv_alloc_request_free(req);
    free(p->a);
    p->a = NULL;
    return false;
}

/* Adds what a bound, running pod asks of its node's whole devices to their "used". */
static void add_whole_pod(struct kc_cluster *c, const struct gv_alloc_config *cfg, json_t *pod)
{
    const char *phase = str_at(pod, "status", "phase");
    const char *node = str_at(pod, "spec", "nodeName");
    struct gv_podspec_whole_req r;
    if ((phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) ||
        node == NULL || *node == '\0' || gv_podspec_whole_request(cfg, pod, &r, NULL) != GV_OK)
        return;
    for (size_t i = 0; i < c->n_nodes; i++) {
        if (strcmp(c->nodes[i].name, node) != 0)
            continue;
        size_t k;
        json_t *w;
        json_array_foreach(c->nodes[i].whole_res, k, w) {
            for (uint32_t q = 0; q < r.n; q++) {
                if (strcmp(json_string_value(json_object_get(w, "resource")), r.r[q].resource))
                    continue;
                json_int_t used = json_integer_value(json_object_get(w, "used")) + r.r[q].count;
                json_int_t healthy = json_integer_value(json_object_get(w, "healthy"));
                json_object_set_new(w, "used", json_integer(used));
                json_object_set_new(w, "free", json_integer(healthy > used ? healthy - used : 0));
            }
        }
        return;
    }
}

int kc_cluster_load(struct gv_kube_client *kube, const struct kc_opts *o, struct kc_cluster *c,
                    struct gv_error *err)
{
    memset(c, 0, sizeof(*c));
    json_t *nodes = NULL, *pods = NULL;
    int rc = KC_ERR;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    if (gv_alloc_cluster_new(&cfg, &c->engine, err) != GV_OK)
        goto out;
    if (gv_kube_list(kube, "/api/v1/nodes", NULL, &nodes, err) != GV_OK) {
        rc = kc_kube_failure(err);
        goto out;
    }
    /* The pods gpuvisor places: by the scheduler name the webhook sets (a
     * field nobody can change after creation), as the scheduler watches
     * them; those without an assignment are left out below. */
    char fsel[300];
    snprintf(fsel, sizeof(fsel), "spec.schedulerName=%s", o->scheduler_name);
    struct gv_kube_list_opts lo = {.field_selector = fsel};
    if (gv_kube_list(kube, "/api/v1/pods", &lo, &pods, err) != GV_OK) {
        rc = kc_kube_failure(err);
        goto out;
    }
    json_t *ni = json_object_get(nodes, "items"), *pi = json_object_get(pods, "items");
    c->nodes = calloc(json_array_size(ni) + 1, sizeof(*c->nodes));
    c->pods = calloc(json_array_size(pi) + 1, sizeof(*c->pods));
    c->pending = json_array();
    c->unverified = json_array();
    if (c->nodes == NULL || c->pods == NULL || c->pending == NULL || c->unverified == NULL) {
        gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    time_t now = time(NULL);
    size_t i;
    json_t *v;
    json_array_foreach(ni, i, v) add_node(o, c, v, now);
    json_array_foreach(pi, i, v) add_pod(o, c, &cfg, v, now);
    json_array_foreach(pi, i, v) add_whole_pod(c, &cfg, v);
    if (c->n_nodes > 0)
        qsort(c->nodes, c->n_nodes, sizeof(*c->nodes), cmp_node);
    if (c->n_pods > 0)
        qsort(c->pods, c->n_pods, sizeof(*c->pods), cmp_pod);
    if (c->n_inventories == 0 && c->n_pods == 0) {
        gv_error_set(err, GV_ENOTFOUND,
                     "gpuvisor does not seem to be installed in this cluster: none of its %zu "
                     "node(s) carries the %s annotation of the gpuvisor-node agent and no pod "
                     "has a gpuvisor assignment (is the gpuvisor-node DaemonSet running? see "
                     "docs/install.md)",
                     c->n_nodes, GV_INVENTORY_ANNOTATION);
        rc = KC_NOT_INSTALLED;
        goto out;
    }
    rc = KC_OK;
out:
    json_decref(nodes);
    json_decref(pods);
    return rc;
}

void kc_cluster_clear(struct kc_cluster *c)
{
    for (size_t i = 0; i < c->n_nodes; i++) {
        free(c->nodes[i].name);
        free(c->nodes[i].reason);
        json_decref(c->nodes[i].whole);
        json_decref(c->nodes[i].whole_res);
    }
    for (size_t i = 0; i < c->n_pods; i++) {
        free(c->pods[i].ns);
        free(c->pods[i].name);
        free(c->pods[i].node);
        free(c->pods[i].a);
        gv_alloc_request_free(c->pods[i].req);
        json_decref(c->pods[i].obj);
    }
    json_decref(c->pending);
    json_decref(c->unverified);
    free(c->nodes);
    free(c->pods);
    gv_alloc_cluster_free(c->engine);
    memset(c, 0, sizeof(*c));
}
