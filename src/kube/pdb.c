/* PodDisruptionBudgets: version discovery, selectors, budgets (see
 * gv_kube_pdb.h). */
#include <stdio.h>
#include <string.h>

#include "kube/gv_kube_pdb.h"

gv_status gv_kube_pdb_version(struct gv_kube_client *c, const char **version, json_t **list,
                              struct gv_error *err)
{
    static const char *const versions[] = {"v1", "v1beta1"};
    for (size_t i = 0; i < 2; i++) {
        char path[80];
        snprintf(path, sizeof(path), "/apis/policy/%s/poddisruptionbudgets%s", versions[i],
                 list != NULL ? "" : "?limit=1");
        json_t *got = NULL;
        struct gv_error e = {0};
        /* the probe is one page of one item: a GET, not a paged LIST */
        gv_status st = list != NULL ? gv_kube_list(c, path, NULL, &got, &e)
                                    : gv_kube_get(c, path, &got, &e);
        if (st == GV_OK) {
            *version = versions[i];
            if (list != NULL)
                *list = got;
            else
                json_decref(got);
            return GV_OK;
        }
        if (e.code != GV_ENOTFOUND)
            return gv_error_set(err, e.code, "%s", e.msg);
    }
    return gv_error_set(err, GV_ENOTFOUND, "neither policy/v1 nor policy/v1beta1 "
                                           "poddisruptionbudgets is served");
}

/* One matchExpressions term against the labels. */
static bool expr_match(const json_t *labels, const json_t *e)
{
    const char *key = json_string_value(json_object_get(e, "key"));
    const char *op = json_string_value(json_object_get(e, "operator"));
    if (key == NULL || op == NULL)
        return false;
    const char *have = json_string_value(json_object_get(labels, key));
    bool in = false;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(e, "values"), i, v)
    {
        const char *want = json_string_value(v);
        in = in || (have != NULL && want != NULL && strcmp(have, want) == 0);
    }
    if (strcmp(op, "In") == 0)
        return in;
    if (strcmp(op, "NotIn") == 0)
        return !in;
    if (strcmp(op, "Exists") == 0)
        return have != NULL;
    if (strcmp(op, "DoesNotExist") == 0)
        return have == NULL;
    return false;
}

bool gv_kube_selector_match(const json_t *sel, const json_t *labels, bool empty_selects_all)
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

bool gv_kube_pdb_selects(const json_t *pdb, const char *ns, const json_t *labels,
                         bool empty_selects_all)
{
    const char *bns =
        json_string_value(json_object_get(json_object_get(pdb, "metadata"), "namespace"));
    if (ns == NULL || bns == NULL || strcmp(ns, bns) != 0)
        return false;
    return gv_kube_selector_match(json_object_get(json_object_get(pdb, "spec"), "selector"),
                                  labels, empty_selects_all);
}

int32_t gv_kube_pdb_allowed(const json_t *pdb)
{
    json_int_t n = json_integer_value(
        json_object_get(json_object_get(pdb, "status"), "disruptionsAllowed"));
    return n > 0 ? (n > INT32_MAX ? INT32_MAX : (int32_t)n) : 0;
}

bool gv_kube_pdb_disrupted(const json_t *pdb, const char *name)
{
    const json_t *d = json_object_get(json_object_get(pdb, "status"), "disruptedPods");
    return name != NULL && json_is_object(d) && json_object_get(d, name) != NULL;
}
