/*
 * PodDisruptionBudgets for `kubectl gpuvisor defrag`: which budget each pod
 * counts against and how many evictions it still allows.  policy/v1 where
 * the API server serves it (1.21+), else policy/v1beta1 (1.20 serves only
 * that).  The two differ on one point that matters here: an empty selector
 * ({}) selects every pod of the namespace in v1 and none in v1beta1.
 *
 * A pod under two budgets is not movable: the Eviction API refuses such a
 * pod outright ("This pod has more than one PodDisruptionBudget...").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubectl/kc_defrag.h"

static const char *meta_str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(json_object_get(o, "metadata"), k));
}

/* One matchExpressions term against the pod's labels. */
static bool expr_match(const json_t *labels, const json_t *e)
{
    const char *key = json_string_value(json_object_get(e, "key"));
    const char *op = json_string_value(json_object_get(e, "operator"));
    const json_t *vals = json_object_get(e, "values");
    if (key == NULL || op == NULL)
        return false;
    const char *have = json_string_value(json_object_get(labels, key));
    bool in = false;
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v) if (have != NULL && json_string_value(v) != NULL &&
                                       strcmp(have, json_string_value(v)) == 0) in = true;
    if (strcmp(op, "In") == 0)
        return in;
    if (strcmp(op, "NotIn") == 0)
        return !in;
    if (strcmp(op, "Exists") == 0)
        return have != NULL;
    if (strcmp(op, "DoesNotExist") == 0)
        return have == NULL;
    return false; /* an operator we do not know selects nothing: never move on a guess */
}

bool kc_selector_match(const json_t *sel, const json_t *labels, bool empty_selects_all)
{
    if (!json_is_object(sel))
        return false;
    const json_t *ml = json_object_get(sel, "matchLabels");
    const json_t *me = json_object_get(sel, "matchExpressions");
    if (json_object_size(ml) == 0 && json_array_size(me) == 0)
        return empty_selects_all;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)ml, k, v)
    {
        const char *have = json_string_value(json_object_get(labels, k));
        if (have == NULL || json_string_value(v) == NULL || strcmp(have, json_string_value(v)))
            return false;
    }
    size_t i;
    json_t *e;
    json_array_foreach(me, i, e) if (!expr_match(labels, e)) return false;
    return true;
}

int kc_pdb_load(struct gv_kube_client *kube, struct kc_pdbs *out, struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    static const char *const versions[] = {"v1", "v1beta1"};
    for (size_t i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/apis/policy/%s/poddisruptionbudgets", versions[i]);
        struct gv_error e = {0};
        if (gv_kube_list(kube, path, NULL, &out->list, &e) == GV_OK) {
            out->version = versions[i];
            return KC_OK;
        }
        if (e.code != GV_ENOTFOUND) {
            gv_error_set(err, e.code, "%s", e.msg);
            return kc_kube_failure(err);
        }
    }
    /* neither served: no budgets to respect; evictions go through policy/v1 */
    out->version = "v1";
    out->list = json_pack("{s:[]}", "items");
    return out->list != NULL ? KC_OK : KC_ERR;
}

int32_t kc_pdb_group(const struct kc_pdbs *p, const json_t *pod, bool *several)
{
    const char *ns = meta_str(pod, "namespace");
    const json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    int32_t found = -1;
    *several = false;
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(p->list, "items"), i, b)
    {
        const char *bns = meta_str(b, "namespace");
        if (ns == NULL || bns == NULL || strcmp(ns, bns) != 0)
            continue;
        if (!kc_selector_match(json_object_get(json_object_get(b, "spec"), "selector"), labels,
                               strcmp(p->version, "v1") == 0))
            continue;
        if (found >= 0)
            *several = true;
        found = (int32_t)i;
    }
    return found;
}

uint32_t kc_pdb_allowed(const struct kc_pdbs *p, size_t i)
{
    json_t *b = json_array_get(json_object_get(p->list, "items"), i);
    json_int_t n = json_integer_value(
        json_object_get(json_object_get(b, "status"), "disruptionsAllowed"));
    return n > 0 ? (uint32_t)n : 0;
}

size_t kc_pdb_count(const struct kc_pdbs *p)
{
    return json_array_size(json_object_get(p->list, "items"));
}

const char *kc_pdb_name(const struct kc_pdbs *p, size_t i)
{
    return meta_str(json_array_get(json_object_get(p->list, "items"), i), "name");
}

void kc_pdb_free(struct kc_pdbs *p)
{
    json_decref(p->list);
    memset(p, 0, sizeof(*p));
}
