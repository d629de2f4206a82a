/*
 * HAMi's pod-level switches at admission (docs/migrate-from-hami.md):
 * hami.io/webhook: ignore, CUDA_DISABLE_CONTROL, and the NVIDIA container
 * runtime settings (runtimeClassName for GPU pods, NVIDIA_VISIBLE_DEVICES=none
 * for containers asking for no GPU).  webhook.c calls these; they only add
 * JSON Patch operations or say why a pod is refused.
 */
#include "scheduler/webhook_hami.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define PRELOAD_ANNOTATION "gpuvisor.io/preload"

static json_t *annotations(json_t *pod)
{
    return json_object_get(json_object_get(pod, "metadata"), "annotations");
}

bool gv_webhook_hami_ignored(json_t *pod)
{
    const char *v = json_string_value(json_object_get(annotations(pod), "hami.io/webhook"));
    return v != NULL && strcmp(v, "ignore") == 0;
}

static const char *env_value(json_t *container, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(container, "env"), i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n != NULL && strcmp(n, name) == 0) {
            const char *v = json_string_value(json_object_get(e, "value"));
            return v != NULL ? v : "";
        }
    }
    return NULL;
}

static bool is_gpu_container(const struct gv_alloc_request *req, const char *name)
{
    for (uint32_t i = 0; req != NULL && name != NULL && i < req->n_containers; i++)
        if (strcmp(req->containers[i].name, name) == 0)
            return true;
    return false;
}

static int add_op(json_t *ops, const char *path, json_t *value)
{
    return json_array_append_new(ops, json_pack("{s:s,s:s,s:o}", "op", "add", "path", path,
                                                 "value", value));
}

/* Whether a container asks any nvidia.com/ resource (a GPU under another
 * name: NVIDIA's renamed shared replicas such as nvidia.com/gpu.shared,
 * MIG instances, VFIO GPUs): the device plugin sets its visible devices. */
static bool asks_nvidia_resource(json_t *container)
{
    json_t *res = json_object_get(container, "resources");
    const char *lists[] = {"limits", "requests"};
    for (size_t l = 0; l < 2; l++) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(res, lists[l]), k, v)
        {
            if (strncmp(k, "nvidia.com/", 11) == 0)
                return true;
        }
    }
    return false;
}

/* NVIDIA_VISIBLE_DEVICES=none on every container of list that asks for no
 * GPU and sets no NVIDIA_VISIBLE_DEVICES itself (the pod's env would win
 * over the device plugin's, so a GPU container must never get it). */
static gv_status hide_gpus(const struct gv_alloc_request *req, json_t *spec, const char *list,
                           json_t *ops)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(spec, list), i, c)
    {
        if (is_gpu_container(req, json_string_value(json_object_get(c, "name"))) ||
            asks_nvidia_resource(c) || env_value(c, "NVIDIA_VISIBLE_DEVICES") != NULL)
            continue;
        char path[96];
        json_t *var = json_pack("{s:s,s:s}", "name", "NVIDIA_VISIBLE_DEVICES", "value", "none");
        int rc;
        if (json_is_array(json_object_get(c, "env"))) {
            snprintf(path, sizeof(path), "/spec/%s/%zu/env/-", list, i);
            rc = add_op(ops, path, var);
        } else {
            snprintf(path, sizeof(path), "/spec/%s/%zu/env", list, i);
            rc = add_op(ops, path, json_pack("[o]", var));
        }
        if (rc != 0)
            return GV_ENOMEM;
    }
    return GV_OK;
}

gv_status gv_webhook_hami_other(const struct gv_webhook_env *env, json_t *pod, json_t *ops,
                                char *why, size_t cap)
{
    (void)cap;
    why[0] = '\0';
    /* Not skipped for hami.io/webhook: ignore: hiding the GPUs protects the
     * node's other tenants, and a tenant's annotation must not undo that. */
    if (!env->hide_gpus_from_others)
        return GV_OK;
    json_t *spec = json_object_get(pod, "spec");
    gv_status st = hide_gpus(NULL, spec, "initContainers", ops);
    return st == GV_OK ? hide_gpus(NULL, spec, "containers", ops) : st;
}

gv_status gv_webhook_hami_whole(const struct gv_webhook_env *env, json_t *pod, bool mig,
                                json_t *ops)
{
    json_t *spec = json_object_get(pod, "spec");
    const char *rc_name = env->runtime_class;
    if (mig && rc_name != NULL && *rc_name != '\0' &&
        json_object_get(spec, "runtimeClassName") == NULL &&
        add_op(ops, "/spec/runtimeClassName", json_string(rc_name)) != 0)
        return GV_ENOMEM;
    return GV_OK;
}

gv_status gv_webhook_hami_gpu(const struct gv_webhook_env *env, json_t *pod,
                              const struct gv_alloc_request *req, json_t *ops, char *why,
                              size_t cap)
{
    why[0] = '\0';
    if (gv_webhook_hami_ignored(pod)) {
        snprintf(why, cap,
                 "hami.io/webhook: ignore on a pod asking for GPU slices: gpuvisor's node agent "
                 "serves only pods its scheduler placed, so the pod could never start; remove "
                 "the annotation");
        return GV_OK;
    }
    json_t *spec = json_object_get(pod, "spec");
    /* HAMi's per-container switch off, applied pod-wide: the node agent's
     * unit is the pod (gpuvisor.io/preload), so all GPU containers must agree. */
    uint32_t off = 0;
    const char *on_name = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(spec, "containers"), i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        if (!is_gpu_container(req, name))
            continue;
        const char *v = env_value(c, "CUDA_DISABLE_CONTROL");
        if (v != NULL && strcasecmp(v, "true") == 0)
            off++;
        else
            on_name = name;
    }
    if (off > 0 && on_name != NULL) {
        snprintf(why, cap,
                 "CUDA_DISABLE_CONTROL=true on some GPU containers but not on %s: gpuvisor "
                 "turns limits off per pod; set it on every GPU container, or use the "
                 "annotation %s: \"false\"",
                 on_name, PRELOAD_ANNOTATION);
        return GV_OK;
    }
    json_t *anns = annotations(pod);
    if (off > 0 && json_object_get(anns, PRELOAD_ANNOTATION) == NULL) {
        /* Who may opt out is the admin's namespace list (docs/isolation.md),
         * checked for this annotation at admission and on the node. */
        int rc = json_is_object(anns)
                     ? add_op(ops, "/metadata/annotations/gpuvisor.io~1preload", json_string("false"))
                     : add_op(ops, "/metadata/annotations",
                              json_pack("{s:s}", PRELOAD_ANNOTATION, "false"));
        if (rc != 0)
            return GV_ENOMEM;
    }
    const char *rc_name = env->runtime_class;
    if (rc_name != NULL && *rc_name != '\0' && json_object_get(spec, "runtimeClassName") == NULL &&
        add_op(ops, "/spec/runtimeClassName", json_string(rc_name)) != 0)
        return GV_ENOMEM;
    if (!env->hide_gpus_from_others)
        return GV_OK;
    gv_status st = hide_gpus(req, spec, "initContainers", ops);
    return st == GV_OK ? hide_gpus(req, spec, "containers", ops) : st;
}
