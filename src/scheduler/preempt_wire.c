/*
 * Wire codec of the extender's preempt verb (k8s.io/kube-scheduler/extender/v1
 * ExtenderPreemptionArgs / ExtenderPreemptionResult).  kube-scheduler sends
 * the node -> victims map its own dry run found, as full Pods
 * (NodeNameToVictims) or, when the extender is nodeCacheCapable, as MetaPods
 * carrying only the UID (NodeNameToMetaVictims); it always reads the answer
 * as NodeNameToMetaVictims.  Keys are Go field names, matched like Go's
 * decoder (exact, then any case: gv_ext_json_get).  Untrusted input: every
 * field is checked, nothing partial is kept.
 */
#include <stdlib.h>
#include <string.h>

#include "scheduler/gv_extender.h"
#include "scheduler/preempt.h"

void gv_ext_preempt_args_clear(struct gv_ext_preempt_args *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; a->nodes != NULL && i < a->n_nodes; i++)
        free(a->nodes[i].victims);
    free(a->nodes);
    json_decref(a->root);
    memset(a, 0, sizeof(*a));
}

/* The victims of one node: {"Pods":[...], "NumPDBViolations":n}; Pods are
 * v1.Pod objects (uid at metadata.uid) or MetaPods ({"UID":...}). */
static gv_status parse_victims(const char *node, json_t *v, bool meta,
                               struct gv_ext_preempt_node *out, struct gv_error *err)
{
    out->name = node;
    if (json_is_null(v))
        return GV_OK;
    if (!json_is_object(v))
        return gv_error_set(err, GV_EPARSE, "victims of node %.200s: not an object", node);
    json_t *pods = gv_ext_json_get(v, "Pods");
    json_t *pdb = gv_ext_json_get(v, "NumPDBViolations");
    if (pdb != NULL && !json_is_null(pdb)) {
        if (!json_is_integer(pdb) || json_integer_value(pdb) < 0)
            return gv_error_set(err, GV_EPARSE,
                                "victims of node %.200s: NumPDBViolations is not a count", node);
        out->pdb_violations = json_integer_value(pdb);
    }
    if (pods == NULL || json_is_null(pods))
        return GV_OK;
    if (!json_is_array(pods))
        return gv_error_set(err, GV_EPARSE, "victims of node %.200s: Pods is not an array", node);
    size_t n = json_array_size(pods);
    out->victims = calloc(n ? n : 1, sizeof(*out->victims));
    if (out->victims == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(pods, i);
        json_t *uid = meta ? gv_ext_json_get(p, "UID")
                           : json_object_get(json_object_get(p, "metadata"), "uid");
        const char *u = json_string_value(uid);
        if (u == NULL || *u == '\0')
            return gv_error_set(err, GV_EPARSE, "victims of node %.200s: pod %zu has no %s", node,
                                i, meta ? "UID" : "metadata.uid");
        out->victims[out->n_victims++] = u;
    }
    return GV_OK;
}

gv_status gv_ext_preempt_args_parse(const char *body, size_t len, struct gv_ext_preempt_args *out,
                                    struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (root == NULL)
        return gv_error_set(err, GV_EPARSE, "ExtenderPreemptionArgs: invalid JSON: %s", jerr.text);
    out->root = root;
    gv_status st = GV_OK;
    if (!json_is_object(root)) {
        st = gv_error_set(err, GV_EPARSE, "ExtenderPreemptionArgs: not an object");
        goto fail;
    }
    out->pod = gv_ext_json_get(root, "Pod");
    if (!json_is_object(out->pod)) {
        st = gv_error_set(err, GV_EPARSE, "ExtenderPreemptionArgs: Pod missing or not an object");
        goto fail;
    }
    json_t *full = gv_ext_json_get(root, "NodeNameToVictims");
    json_t *meta = gv_ext_json_get(root, "NodeNameToMetaVictims");
    if (full != NULL && json_is_null(full))
        full = NULL;
    if (meta != NULL && json_is_null(meta))
        meta = NULL;
    if ((full != NULL && !json_is_object(full)) || (meta != NULL && !json_is_object(meta))) {
        st = gv_error_set(err, GV_EPARSE,
                          "ExtenderPreemptionArgs: NodeNameTo(Meta)Victims is not an object");
        goto fail;
    }
    /* kube-scheduler fills one of them (meta when nodeCacheCapable). */
    out->meta = meta != NULL && json_object_size(meta) > 0;
    json_t *map = out->meta ? meta : full;
    size_t n = map != NULL ? json_object_size(map) : 0;
    out->nodes = calloc(n ? n : 1, sizeof(*out->nodes));
    if (out->nodes == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    const char *key;
    json_t *v;
    if (map != NULL)
        json_object_foreach(map, key, v)
        {
            if (*key == '\0') {
                st = gv_error_set(err, GV_EPARSE, "ExtenderPreemptionArgs: empty node name");
                goto fail;
            }
            st = parse_victims(key, v, out->meta, &out->nodes[out->n_nodes++], err);
            if (st != GV_OK)
                goto fail;
        }
    return GV_OK;
fail:
    gv_ext_preempt_args_clear(out);
    return st;
}

char *gv_ext_preempt_result_encode(const struct gv_ext_preempt_node *nodes, size_t n)
{
    json_t *map = json_object();
    bool ok = map != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *pods = json_array();
        ok = pods != NULL;
        for (size_t k = 0; ok && k < nodes[i].n_victims; k++)
            ok = json_array_append_new(pods, json_pack("{s:s}", "UID", nodes[i].victims[k])) == 0;
        json_t *v = ok ? json_pack("{s:O,s:I}", "Pods", pods, "NumPDBViolations",
                                   (json_int_t)nodes[i].pdb_violations)
                       : NULL;
        json_decref(pods);
        ok = v != NULL && json_object_set_new(map, nodes[i].name, v) == 0;
    }
    json_t *root = ok ? json_pack("{s:O}", "NodeNameToMetaVictims", map) : NULL;
    char *text = root != NULL ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    json_decref(map);
    return text;
}
