/* Nominated holds on the pod (hold_store.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contracts/placement.h"
#include "scheduler/hold_store.h"
#include "scheduler/sched_internal.h"

char *gv_sched_hold_encode(const struct gv_sched_config *cfg, const char *uid, const char *node,
                           time_t until, const char *assignment)
{
    char at[48], sig[GV_PLACEMENT_SIG_MAX] = "";
    struct timespec ts = {.tv_sec = until};
    gv_sched_format_time(&ts, at, sizeof(at));
    if (cfg->placement_key != NULL &&
        gv_hold_sign(cfg->placement_key, uid, node, at, assignment, sig, sizeof(sig), NULL) !=
            GV_OK)
        return NULL;
    json_t *v = json_pack("{s:s,s:s,s:s,s:s}", "node", node, "until", at, "assignment", assignment,
                          "sig", sig);
    char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(v);
    return text;
}

gv_status gv_sched_hold_decode(const struct gv_sched_config *cfg, const json_t *pod, char **node,
                               time_t *until, char **assignment, struct gv_error *err)
{
    *node = *assignment = NULL;
    const json_t *md = json_object_get(pod, "metadata");
    const char *uid = json_string_value(json_object_get(md, "uid"));
    const char *text =
        json_string_value(json_object_get(json_object_get(md, "annotations"), GV_HOLD_ANNOTATION));
    if (text == NULL)
        return gv_error_set(err, GV_ENOTFOUND, "no %s", GV_HOLD_ANNOTATION);
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    const char *n = json_string_value(json_object_get(v, "node"));
    const char *at = json_string_value(json_object_get(v, "until"));
    const char *a = json_string_value(json_object_get(v, "assignment"));
    const char *sig = json_string_value(json_object_get(v, "sig"));
    gv_status st = GV_OK;
    if (uid == NULL || n == NULL || at == NULL || a == NULL || !*n || !*a ||
        gv_sched_parse_time(at, until) != 0)
        st = gv_error_set(err, GV_EINVAL, "%s malformed", GV_HOLD_ANNOTATION);
    else if (cfg->placement_key != NULL)
        st = gv_hold_verify(cfg->placement_key, uid, n, at, a, sig, err);
    if (st == GV_OK && ((*node = strdup(n)) == NULL || (*assignment = strdup(a)) == NULL)) {
        free(*node);
        *node = NULL;
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    json_decref(v);
    return st;
}

gv_status gv_sched_hold_write(struct gv_kube_client *kube, const char *ns, const char *name,
                              const char *uid, const char *value, struct gv_error *err)
{
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%.250s/pods/%.300s", ns, name);
    json_t *patch =
        json_pack("{s:{s:s,s:{s:s}}}", "metadata", "uid", uid, "annotations", GV_HOLD_ANNOTATION,
                  value);
    if (patch == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    gv_status st = gv_kube_patch(kube, path, GV_KUBE_PATCH_MERGE, patch, NULL, err);
    json_decref(patch);
    return st;
}
