/*
 * Pod / Node JSON -> allocation-engine inputs (see podspec.h).  The JSON is
 * only walked here; every rule about what the fields mean lives in the
 * engine (gv_alloc_request_parse), so the scheduler, webhook and simulator
 * agree by construction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contracts/inventory.h"
#include "contracts/podspec.h"

#define PS_MAX_CONTAINERS 64

/* Quantity text of a JSON string or number (numbers formatted into buf). */
static const char *qty_text(const json_t *v, char *buf, size_t cap)
{
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_integer(v)) {
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
        return buf;
    }
    if (json_is_real(v)) {
        snprintf(buf, cap, "%.17g", json_real_value(v));
        return buf;
    }
    return NULL;
}

/* One map's entries (labels, annotations, a container's limits or
 * requests), as many as the object has: real nodes carry hundreds of labels
 * (node-feature-discovery alone adds dozens) and pods as many annotations;
 * the API server's object size limit bounds them.  A fixed table refused
 * such a node or pod outright. */
struct kv_store {
    struct gv_alloc_kv *kv;
    char (*num)[40]; /* a JSON number's text (quantities) */
    size_t n;
};

static void kv_free(struct kv_store *st)
{
    free(st->kv);
    free(st->num);
    memset(st, 0, sizeof(*st));
}

static gv_status collect(const json_t *obj, const char *path, struct kv_store *st,
                         bool quantities, struct gv_error *err)
{
    kv_free(st);
    if (obj == NULL || json_is_null(obj))
        return GV_OK;
    if (!json_is_object(obj))
        return gv_error_set(err, GV_EPARSE, "%s: expected an object", path);
    size_t cap = json_object_size(obj);
    st->kv = calloc(cap ? cap : 1, sizeof(*st->kv));
    st->num = quantities ? calloc(cap ? cap : 1, sizeof(*st->num)) : NULL;
    if (st->kv == NULL || (quantities && st->num == NULL)) {
        kv_free(st);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        if (st->n == cap) /* never: the object's own count */
            return gv_error_set(err, GV_EINTERNAL, "%s: more entries than counted", path);
        const char *text = quantities ? qty_text(val, st->num[st->n], sizeof(st->num[0]))
                                      : json_string_value(val);
        if (text == NULL)
            return gv_error_set(err, GV_EPARSE, "%s[\"%.100s\"]: expected a %s", path, key,
                                quantities ? "quantity string" : "string");
        st->kv[st->n++] = (struct gv_alloc_kv){key, text};
    }
    return GV_OK;
}

static const char *str_at(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

const char *gv_podspec_annotation(const json_t *obj, const char *key)
{
    const json_t *meta = json_object_get(obj, "metadata");
    return json_string_value(json_object_get(json_object_get(meta, "annotations"), key));
}

gv_status gv_podspec_request(const struct gv_alloc_config *cfg, const json_t *pod,
                             struct gv_alloc_request **out, struct gv_error *err)
{
    gv_status rc = GV_OK;
    struct kv_store *lim = NULL, *req = NULL, ann = {0};
    struct gv_alloc_container_in cin[PS_MAX_CONTAINERS];
    if (!json_is_object(pod))
        return gv_error_set(err, GV_EPARSE, "pod: expected a JSON object");
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *spec = json_object_get(pod, "spec");
    if (!json_is_object(meta))
        return gv_error_set(err, GV_EPARSE, "pod: metadata: expected an object");
    if (!json_is_object(spec))
        return gv_error_set(err, GV_EPARSE, "pod: spec: expected an object");
    const json_t *conts = json_object_get(spec, "containers");
    if (!json_is_array(conts))
        return gv_error_set(err, GV_EPARSE, "pod: spec.containers: expected an array");
    size_t nc = json_array_size(conts);
    if (nc > PS_MAX_CONTAINERS)
        return gv_error_set(err, GV_EPARSE, "pod: spec.containers: more than %d containers",
                            PS_MAX_CONTAINERS);
    lim = calloc(nc ? nc : 1, sizeof(*lim));
    req = calloc(nc ? nc : 1, sizeof(*req));
    if (lim == NULL || req == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nc; i++) {
        const json_t *c = json_array_get(conts, i);
        char path[96];
        if (!json_is_object(c)) {
            rc = gv_error_set(err, GV_EPARSE, "pod: spec.containers[%zu]: expected an object", i);
            goto done;
        }
        const char *name = str_at(c, "name");
        if (name == NULL) {
            rc = gv_error_set(err, GV_EPARSE, "pod: spec.containers[%zu].name: expected a string",
                              i);
            goto done;
        }
        const json_t *res = json_object_get(c, "resources");
        if (res != NULL && !json_is_object(res)) {
            rc = gv_error_set(err, GV_EPARSE,
                              "pod: spec.containers[%zu].resources: expected an object", i);
            goto done;
        }
        snprintf(path, sizeof(path), "pod: spec.containers[%zu].resources.limits", i);
        if ((rc = collect(json_object_get(res, "limits"), path, &lim[i], true, err)) != GV_OK)
            goto done;
        snprintf(path, sizeof(path), "pod: spec.containers[%zu].resources.requests", i);
        if ((rc = collect(json_object_get(res, "requests"), path, &req[i], true, err)) != GV_OK)
            goto done;
        cin[i] = (struct gv_alloc_container_in){name, lim[i].kv, lim[i].n, req[i].kv, req[i].n};
    }
    if ((rc = collect(json_object_get(meta, "annotations"), "pod: metadata.annotations", &ann,
                      false, err)) != GV_OK)
        goto done;
    struct gv_alloc_pod_in in = {str_at(meta, "uid"), str_at(meta, "namespace"),
                                 str_at(meta, "name"), cin, nc, ann.kv, ann.n};
    rc = gv_alloc_request_parse(cfg, &in, out, err);
    if (rc != GV_OK)
        gv_error_prefix(err, "pod %s/%s", in.ns ? in.ns : "", in.name ? in.name : "");
done:
    for (size_t i = 0; lim != NULL && req != NULL && i < nc; i++) {
        kv_free(&lim[i]);
        kv_free(&req[i]);
    }
    kv_free(&ann);
    free(lim);
    free(req);
    return rc;
}

gv_status gv_podspec_request_text(const struct gv_alloc_config *cfg, const char *text, size_t len,
                                  struct gv_alloc_request **out, struct gv_error *err)
{
    json_error_t je;
    json_t *pod = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (pod == NULL)
        return gv_error_set(err, GV_EPARSE, "pod JSON: line %d column %d: %s", je.line,
                            je.column, je.text);
    gv_status rc = gv_podspec_request(cfg, pod, out, err);
    json_decref(pod);
    return rc;
}

/* --- nodes --------------------------------------------------------------- */

void gv_podspec_node_free(struct gv_podspec_node *n)
{
    if (n == NULL)
        return;
    free(n->gpus);
    free(n->labels);
    free(n->strings);
    free(n->nvlink_group);
    free(n->pcie_group);
    free(n->whole);
    free(n);
}

void gv_podspec_gpu_from_inventory(const struct gv_inventory_gpu *g, struct gv_alloc_gpu_spec *out)
{
    double scale = g->memory_scaling > 0 ? g->memory_scaling : 1.0;
    *out = (struct gv_alloc_gpu_spec){
        .uuid = g->uuid,
        .index = g->index,
        .model = g->model,
        .mem_mib = (uint64_t)((double)g->memory_mib * scale),
        .split = g->split,
        .numa = g->numa,
        /* a GPU advertised under another resource (NVIDIA's renamed sharing) is not ours to place */
        .healthy = g->healthy && g->resource[0] == '\0',
        .mode = gv_inventory_mode_whole(g->mode) ? GV_ALLOC_GPU_EXCLUSIVE
                : g->mode == GV_INVENTORY_MODE_MPS ? GV_ALLOC_GPU_MPS
                                                   : GV_ALLOC_GPU_SHARED,
    };
}

/* The inventory's whole devices per resource name (count placement). */
static gv_status whole_summary(const struct gv_inventory *inv, struct gv_podspec_node *n,
                               struct gv_error *err)
{
    n->n_whole_res = 0;
    if (inv->whole.n == 0)
        return GV_OK;
    n->whole = calloc(inv->whole.n, sizeof(*n->whole));
    if (n->whole == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < inv->whole.n; i++) {
        const struct gv_inventory_whole *w = &inv->whole.dev[i];
        uint32_t k = 0;
        while (k < n->n_whole_res && strcmp(n->whole[k].resource, w->resource) != 0)
            k++;
        if (k == n->n_whole_res) {
            snprintf(n->whole[k].resource, sizeof(n->whole[k].resource), "%s", w->resource);
            n->whole[k].kind = (int)w->kind;
            n->n_whole_res++;
        }
        n->whole[k].total++;
        n->whole[k].healthy += w->healthy;
    }
    return GV_OK;
}

/* GPUs from the agent's inventory; the strings are copied into n->strings. */
static gv_status node_gpus_from_inventory(const char *name, const char *text,
                                          struct gv_podspec_node *n, struct gv_error *err)
{
    struct gv_inventory *inv = malloc(sizeof(*inv));
    gv_status rc = GV_OK;
    if (inv == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    if ((rc = gv_inventory_decode(text, strlen(text), inv, err)) != GV_OK) {
        gv_error_prefix(err, "node %s: annotation %s", name, GV_INVENTORY_ANNOTATION);
        rc = GV_EPARSE;
        goto done;
    }
    size_t bytes = 1;
    for (uint32_t i = 0; i < inv->n_gpus; i++)
        bytes += strlen(inv->gpus[i].uuid) + strlen(inv->gpus[i].model) + 2;
    n->strings = malloc(bytes);
    n->gpus = calloc(inv->n_gpus ? inv->n_gpus : 1, sizeof(*n->gpus));
    if (n->strings == NULL || n->gpus == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto done;
    }
    char *o = n->strings;
    for (uint32_t i = 0; i < inv->n_gpus; i++) {
        gv_podspec_gpu_from_inventory(&inv->gpus[i], &n->gpus[i]);
        /* passed through to a VM or hosting mediated devices: never sliced as well */
        if (gv_inventory_gpu_taken(inv, &inv->gpus[i]))
            n->gpus[i].healthy = false;
        size_t lu = strlen(inv->gpus[i].uuid) + 1, lm = strlen(inv->gpus[i].model) + 1;
        memcpy(o, inv->gpus[i].uuid, lu);
        n->gpus[i].uuid = o;
        memcpy(o + lu, inv->gpus[i].model, lm);
        n->gpus[i].model = o + lu;
        o += lu + lm;
    }
    n->spec.n_gpus = inv->n_gpus;
    n->nvlink_group = calloc(inv->n_gpus + 1, sizeof(uint32_t));
    n->pcie_group = calloc(inv->n_gpus + 1, sizeof(uint32_t));
    if (n->nvlink_group == NULL || n->pcie_group == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < inv->n_gpus; i++) {
        n->nvlink_group[i] = inv->gpus[i].nvlink_group;
        n->pcie_group[i] = inv->gpus[i].pcie_group;
    }
    n->n_whole = inv->whole.n;
    rc = whole_summary(inv, n, err);
done:
    free(inv);
    return rc;
}

/* status.allocatable[key], else status.capacity[key]. */
static const json_t *node_res(const json_t *status, const char *key, bool capacity_first)
{
    const char *order[2] = {"allocatable", "capacity"};
    if (capacity_first) {
        order[0] = "capacity";
        order[1] = "allocatable";
    }
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(json_object_get(status, order[i]), key);
        if (v != NULL)
            return v;
    }
    return NULL;
}

static gv_status node_qty(const json_t *status, const char *name, const char *key, int64_t mul,
                          int64_t div, bool capacity_first, int64_t *out, struct gv_error *err)
{
    *out = 0;
    const json_t *v = node_res(status, key, capacity_first);
    if (v == NULL)
        return GV_OK;
    char buf[40];
    const char *text = qty_text(v, buf, sizeof(buf));
    if (text == NULL)
        return gv_error_set(err, GV_EPARSE, "node %s: status resource %s: expected a quantity",
                            name, key);
    if (gv_quantity_parse(text, mul, div, out, NULL, err) != GV_OK) {
        gv_error_prefix(err, "node %s: status resource %s", name, key);
        return GV_EPARSE;
    }
    return GV_OK;
}

/* GPUs from the device plugin's capacity and the GFD labels. */
static gv_status node_gpus_from_labels(const char *name, const json_t *status,
                                       const struct kv_store *labels, struct gv_podspec_node *n,
                                       int64_t *gpus_out, struct gv_error *err)
{
    int64_t gpus, gpu_mem = 0;
    gv_status rc = node_qty(status, name, "nvidia.com/gpu", 1, 1, true, &gpus, err);
    if (rc != GV_OK)
        return rc;
    if (gpus > GV_ALLOC_MAX_NODE_GPUS)
        return gv_error_set(err, GV_EPARSE, "node %s: %lld GPUs (at most %d)", name,
                            (long long)gpus, GV_ALLOC_MAX_NODE_GPUS);
    const char *model = "unknown";
    for (size_t i = 0; i < labels->n; i++) {
        if (strcmp(labels->kv[i].key, "nvidia.com/gpu.product") == 0)
            model = labels->kv[i].value;
        if (strcmp(labels->kv[i].key, "nvidia.com/gpu.memory") == 0 &&
            gv_quantity_integer(labels->kv[i].value, &gpu_mem, err) != GV_OK) {
            gv_error_prefix(err, "node %s: label nvidia.com/gpu.memory", name);
            return GV_EPARSE;
        }
    }
    /* One block for uuids and the model: "<node>-gpu<i>\0"... "model\0". */
    size_t uuid_len = strlen(name) + 8;
    size_t model_len = strlen(model) + 1;
    n->strings = malloc((size_t)gpus * uuid_len + model_len);
    n->gpus = calloc(gpus ? (size_t)gpus : 1, sizeof(*n->gpus));
    if (n->strings == NULL || n->gpus == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    char *model_copy = n->strings + (size_t)gpus * uuid_len;
    memcpy(model_copy, model, model_len);
    for (int64_t i = 0; i < gpus; i++) {
        char *u = n->strings + (size_t)i * uuid_len;
        snprintf(u, uuid_len, "%s-gpu%d", name, (int)i);
        n->gpus[i] = (struct gv_alloc_gpu_spec){u, (uint32_t)i, model_copy, (uint64_t)gpu_mem,
                                                0, -1, true, GV_ALLOC_GPU_SHARED};
    }
    *gpus_out = gpus;
    return GV_OK;
}

gv_status gv_podspec_node(const json_t *node, struct gv_podspec_node **out, struct gv_error *err)
{
    if (!json_is_object(node))
        return gv_error_set(err, GV_EPARSE, "node: expected a JSON object");
    const json_t *meta = json_object_get(node, "metadata");
    const json_t *status = json_object_get(node, "status");
    const char *name = str_at(meta, "name");
    if (name == NULL || name[0] == '\0')
        return gv_error_set(err, GV_EPARSE, "node: metadata.name: expected a string");
    struct kv_store *labels = calloc(1, sizeof(*labels));
    struct gv_podspec_node *n = calloc(1, sizeof(*n));
    gv_status rc = GV_OK;
    if (labels == NULL || n == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    char path[320];
    snprintf(path, sizeof(path), "node %s: metadata.labels", name);
    if ((rc = collect(json_object_get(meta, "labels"), path, labels, false, err)) != GV_OK)
        goto fail;
    int64_t cpu, mem, gpus = 0;
    if ((rc = node_qty(status, name, "cpu", 1000, 1, false, &cpu, err)) ||
        (rc = node_qty(status, name, "memory", 1, 1 << 20, false, &mem, err)))
        goto fail;
    const char *inventory = gv_podspec_annotation(node, GV_INVENTORY_ANNOTATION);
    if (inventory != NULL) {
        if ((rc = node_gpus_from_inventory(name, inventory, n, err)) != GV_OK)
            goto fail;
        gpus = (int64_t)n->spec.n_gpus;
    } else if ((rc = node_gpus_from_labels(name, status, labels, n, &gpus, err)) !=
               GV_OK) {
        goto fail;
    }
    n->labels = calloc(labels->n ? labels->n : 1, sizeof(*n->labels));
    if (n->labels == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    /* Label keys/values point into the JSON, which the caller keeps. */
    if (labels->n > 0) /* no labels: no table at all (memcpy from NULL is undefined) */
        memcpy(n->labels, labels->kv, labels->n * sizeof(*n->labels));
    n->spec = (struct gv_alloc_node_spec){name, cpu, mem, n->labels, labels->n, n->gpus,
                                          (size_t)gpus};
    kv_free(labels);
    free(labels);
    *out = n;
    return GV_OK;
fail:
    if (labels != NULL)
        kv_free(labels);
    free(labels);
    gv_podspec_node_free(n);
    return rc;
}

/* --- whole devices (docs/scheduler.md, "Whole devices") ------------------ */

bool gv_podspec_whole_by_name(const char *resource)
{
    return strncmp(resource, "nvidia.com/mig-", 15) == 0 && resource[15] != '\0';
}

/* An extended resource the engine does not own: "<domain>/<name>", not *kubernetes.io
 * (cpu, memory, hugepages-* have no domain). */
static bool foreign_extended(const struct gv_alloc_config *cfg, const char *key)
{
    const char *slash = strchr(key, '/');
    if (slash == NULL || slash == key || slash[1] == '\0')
        return false;
    size_t dl = (size_t)(slash - key);
    if (dl >= 13 && memcmp(slash - 13, "kubernetes.io", 13) == 0)
        return false;
    const char *own[] = {cfg->res.gpu, cfg->res.mem, cfg->res.mem_pct, cfg->res.cores,
                         cfg->res.priority, cfg->res.mem_gib};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (own[i] != NULL && strcmp(own[i], key) == 0)
            return false;
    return true;
}

/* Adds container c's foreign extended resources into counts (slot per name in out). */
static gv_status whole_container(const struct gv_alloc_config *cfg, const json_t *c,
                                 const char *where, struct gv_podspec_whole_req *out,
                                 uint32_t *counts, struct gv_error *err)
{
    const json_t *res = json_object_get(c, "resources");
    if (res != NULL && !json_is_object(res))
        return gv_error_set(err, GV_EPARSE, "pod: %s.resources: expected an object", where);
    const json_t *lim = json_object_get(res, "limits"), *req = json_object_get(res, "requests");
    const json_t *maps[2] = {lim, req};
    for (int m = 0; m < 2; m++) {
        if (maps[m] == NULL || json_is_null(maps[m]))
            continue;
        if (!json_is_object(maps[m]))
            return gv_error_set(err, GV_EPARSE, "pod: %s.resources.%s: expected an object",
                                where, m ? "requests" : "limits");
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)maps[m], key, val) {
            if (!foreign_extended(cfg, key))
                continue;
            if (m == 1 && json_object_get(lim, key) != NULL)
                continue; /* limits first: the kubelet allocates the limit */
            /* Strict only for names that are whole devices by their form: any
             * other extended resource may hold what its owner likes (kube-scheduler
             * checks it); one this cannot count is left out, not an error. */
            bool mine = gv_podspec_whole_by_name(key);
            char buf[40];
            const char *text = qty_text(val, buf, sizeof(buf));
            int64_t v = 0;
            if (text == NULL || gv_quantity_integer(text, &v, err) != GV_OK || v < 0 ||
                v > 1024 || strlen(key) >= GV_PODSPEC_WHOLE_NAME_MAX) {
                if (!mine)
                    continue;
                return gv_error_set(err, GV_EPARSE,
                                    "pod: %s.resources.%s[\"%.100s\"]: expected a whole count "
                                    "in [0, 1024]",
                                    where, m ? "requests" : "limits", key);
            }
            uint32_t k = 0;
            while (k < out->n && strcmp(out->r[k].resource, key) != 0)
                k++;
            if (k == out->n) {
                if (out->n == GV_PODSPEC_WHOLE_REQ_MAX && !mine)
                    continue;
                if (out->n == GV_PODSPEC_WHOLE_REQ_MAX)
                    return gv_error_set(err, GV_EPARSE, "pod: more than %d extended resources",
                                        GV_PODSPEC_WHOLE_REQ_MAX);
                snprintf(out->r[k].resource, sizeof(out->r[k].resource), "%s", key);
                out->r[k].count = 0;
                counts[k] = 0;
                out->n++;
            }
            counts[k] += (uint32_t)v;
        }
    }
    return GV_OK;
}

gv_status gv_podspec_whole_request(const struct gv_alloc_config *cfg, const json_t *pod,
                                   struct gv_podspec_whole_req *out, struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    const json_t *spec = json_object_get(pod, "spec");
    if (!json_is_object(spec))
        return gv_error_set(err, GV_EPARSE, "pod: spec: expected an object");
    static const char *const lists[2] = {"containers", "initContainers"};
    for (int l = 0; l < 2; l++) {
        const json_t *arr = json_object_get(spec, lists[l]);
        if (arr == NULL && l == 1)
            continue;
        if (!json_is_array(arr))
            return gv_error_set(err, GV_EPARSE, "pod: spec.%s: expected an array", lists[l]);
        size_t i;
        const json_t *c;
        uint32_t sum[GV_PODSPEC_WHOLE_REQ_MAX] = {0};
        json_array_foreach(arr, i, c) {
            char where[64];
            uint32_t one[GV_PODSPEC_WHOLE_REQ_MAX] = {0};
            snprintf(where, sizeof(where), "spec.%s[%zu]", lists[l], i);
            if (!json_is_object(c))
                return gv_error_set(err, GV_EPARSE, "pod: %s: expected an object", where);
            gv_status st = whole_container(cfg, c, where, out, one, err);
            if (st != GV_OK) {
                memset(out, 0, sizeof(*out));
                return st;
            }
            for (uint32_t k = 0; k < out->n; k++) {
                if (l == 0)
                    sum[k] += one[k]; /* app containers run together: their devices add up */
                else if (one[k] > out->r[k].count)
                    out->r[k].count = one[k]; /* init containers run one at a time */
            }
        }
        for (uint32_t k = 0; l == 0 && k < out->n; k++)
            out->r[k].count = sum[k];
    }
    /* names asked as 0 only ask nothing */
    uint32_t w = 0;
    for (uint32_t k = 0; k < out->n; k++)
        if (out->r[k].count > 0)
            out->r[w++] = out->r[k];
    out->n = w;
    return GV_OK;
}

bool gv_podspec_whole_fits(const struct gv_podspec_whole *res, size_t n, const uint32_t *held,
                           const struct gv_podspec_whole_req *req,
                           bool (*is_whole)(void *ud, const char *name), void *ud,
                           uint64_t *slack, char *why, size_t why_cap)
{
    uint64_t left = 0;
    for (uint32_t k = 0; k < req->n; k++) {
        const char *name = req->r[k].resource;
        size_t i = 0;
        while (i < n && strcmp(res[i].resource, name) != 0)
            i++;
        if (i == n) {
            if (!gv_podspec_whole_by_name(name) && (is_whole == NULL || !is_whole(ud, name)))
                continue; /* not a whole device anywhere: kube-scheduler's to check */
            snprintf(why, why_cap, "node has no %s devices", name);
            return false;
        }
        uint32_t h = held != NULL ? held[i] : 0;
        uint32_t free_n = res[i].healthy > h ? res[i].healthy - h : 0;
        if (free_n < req->r[k].count) {
            snprintf(why, why_cap, "%s: %u free of %u healthy (%u listed), pod asks %u", name,
                     free_n, res[i].healthy, res[i].total, req->r[k].count);
            return false;
        }
        left += free_n - req->r[k].count;
    }
    if (slack != NULL)
        *slack = left;
    return true;
}
