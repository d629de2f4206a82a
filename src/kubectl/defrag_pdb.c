/*
 * PodDisruptionBudgets for `kubectl gpuvisor defrag`: which budget each pod
 * counts against and how many evictions it still allows.  policy/v1 where
 * the API server serves it (1.21+), else policy/v1beta1 (1.20 serves only
 * that).  The two differ on one point that matters here: an empty selector
 * ({}) selects every pod of the namespace in v1 and none in v1beta1.
 *
 * The reading itself (versions, selectors, budgets) is src/kube/pdb.c,
 * shared with the scheduler's preempt verb.
 *
 * A pod under two budgets is not movable: the Eviction API refuses such a
 * pod outright ("This pod has more than one PodDisruptionBudget...").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/gv_kube_pdb.h"
#include "kubectl/kc_defrag.h"

static const char *meta_str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(json_object_get(o, "metadata"), k));
}

int kc_pdb_load(struct gv_kube_client *kube, struct kc_pdbs *out, struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    struct gv_error e = {0};
    if (gv_kube_pdb_version(kube, &out->version, &out->list, &e) == GV_OK)
        return KC_OK;
    if (e.code != GV_ENOTFOUND) {
        gv_error_set(err, e.code, "%s", e.msg);
        return kc_kube_failure(err);
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
        /* the Eviction API's view: an empty selector is all pods in v1 */
        if (!gv_kube_pdb_selects(b, ns, labels, strcmp(p->version, "v1") == 0))
            continue;
        if (found >= 0)
            *several = true;
        found = (int32_t)i;
    }
    return found;
}

uint32_t kc_pdb_allowed(const struct kc_pdbs *p, size_t i)
{
    return (uint32_t)gv_kube_pdb_allowed(json_array_get(json_object_get(p->list, "items"), i));
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
