#include "scheduler/gv_webhook.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/gnutls.h>

#include "common/gv_log.h"
#include "contracts/podspec.h"
#include "scheduler/webhook_hami.h"

/* JSON Pointer escaping (RFC 6901): resource names contain '/'. */
static void pointer_escape(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    for (; *in != '\0' && o + 3 < cap; in++) {
        if (*in == '~' || *in == '/') {
            out[o++] = '~';
            out[o++] = *in == '~' ? '0' : '1';
        } else {
            out[o++] = *in;
        }
    }
    out[o] = '\0';
}

static bool has_key(const json_t *obj, const char *key)
{
    return key != NULL && *key != '\0' && json_is_object(obj) && json_object_get(obj, key) != NULL;
}

static json_t *find_container(json_t *containers, const char *name, size_t *index)
{
    size_t i;
    json_t *c;
    json_array_foreach(containers, i, c)
    {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (n != NULL && strcmp(n, name) == 0) {
            *index = i;
            return c;
        }
    }
    return NULL;
}

static bool is_privileged(const json_t *container)
{
    json_t *sc = json_object_get(container, "securityContext");
    return json_is_true(json_object_get(sc, "privileged"));
}

/* Adds to ops the defaults one GPU container lacks: a GPU count (the
 * kubelet only calls Allocate for resources the plugin advertises), and the
 * configured default memory / cores when set. */
static gv_status container_defaults(const struct gv_alloc_config *cfg, json_t *container,
                                    size_t index, json_t *ops)
{
    json_t *res = json_object_get(container, "resources");
    json_t *limits = json_is_object(res) ? json_object_get(res, "limits") : NULL;
    json_t *requests = json_is_object(res) ? json_object_get(res, "requests") : NULL;
    json_t *add = json_object();
    char num[32];
    if (add == NULL)
        return GV_ENOMEM;
    if (!has_key(limits, cfg->res.gpu) && !has_key(requests, cfg->res.gpu)) {
        snprintf(num, sizeof(num), "%" PRIu32, cfg->default_gpu_num);
        json_object_set_new(add, cfg->res.gpu, json_string(num));
    }
    bool has_mem = has_key(limits, cfg->res.mem) || has_key(limits, cfg->res.mem_pct) ||
                   has_key(limits, cfg->res.mem_gib) || has_key(requests, cfg->res.mem) ||
                   has_key(requests, cfg->res.mem_pct) || has_key(requests, cfg->res.mem_gib);
    if (cfg->default_mem_mib > 0 && !has_mem && cfg->res.mem != NULL) {
        snprintf(num, sizeof(num), "%" PRIu64, cfg->default_mem_mib);
        json_object_set_new(add, cfg->res.mem, json_string(num));
    }
    if (cfg->default_cores > 0 && cfg->res.cores != NULL && !has_key(limits, cfg->res.cores) &&
        !has_key(requests, cfg->res.cores)) {
        snprintf(num, sizeof(num), "%" PRIu32, cfg->default_cores);
        json_object_set_new(add, cfg->res.cores, json_string(num));
    }
    gv_status st = GV_OK;
    char base[64];
    snprintf(base, sizeof(base), "/spec/containers/%zu/resources", index);
    if (json_object_size(add) == 0) {
        json_decref(add);
    } else if (!json_is_object(res)) {
        st = json_array_append_new(ops, json_pack("{s:s,s:s,s:{s:o}}", "op", "add", "path", base,
                                                  "value", "limits", add)) == 0
                 ? GV_OK
                 : GV_ENOMEM;
    } else if (!json_is_object(limits)) {
        char path[96];
        snprintf(path, sizeof(path), "%s/limits", base);
        st = json_array_append_new(
                 ops, json_pack("{s:s,s:s,s:o}", "op", "add", "path", path, "value", add)) == 0
                 ? GV_OK
                 : GV_ENOMEM;
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(add, k, v)
        {
            char esc[256], path[384];
            pointer_escape(k, esc, sizeof(esc));
            snprintf(path, sizeof(path), "%s/limits/%s", base, esc);
            if (json_array_append_new(
                    ops, json_pack("{s:s,s:s,s:O}", "op", "add", "path", path, "value", v)) != 0)
                st = GV_ENOMEM;
        }
        json_decref(add);
    }
    return st;
}

/* Why the pod can never be placed, or "" when it can (as far as we know). */
static void impossible_reason(const struct gv_webhook_env *env, const struct gv_alloc_request *req,
                              json_t *pod, char *why, size_t cap)
{
    why[0] = '\0';
    json_t *spec = json_object_get(pod, "spec");
    const char *node_name = json_string_value(json_object_get(spec, "nodeName"));
    if (node_name != NULL && *node_name != '\0') {
        snprintf(why, cap,
                 "pod sets spec.nodeName (%s), but pods asking for GPU slices must be placed by "
                 "%s, which chooses the GPUs; use a nodeSelector or node affinity to pin the node",
                 node_name, env->scheduler_name);
        return;
    }
    json_t *containers = json_object_get(spec, "containers");
    for (uint32_t i = 0; i < req->n_containers; i++) {
        size_t idx = 0;
        json_t *c = find_container(containers, req->containers[i].name, &idx);
        if (c != NULL && is_privileged(c)) {
            snprintf(why, cap,
                     "container %s is privileged and asks for GPU slices: a privileged "
                     "container can use every GPU on the node, so its slice cannot be enforced "
                     "(drop securityContext.privileged)",
                     req->containers[i].name);
            return;
        }
    }
    struct gv_webhook_limits lim = {0, 0};
    if (env->limits != NULL)
        env->limits(env->ud, &lim);
    for (uint32_t i = 0; i < req->n_containers; i++) {
        const struct gv_alloc_container_req *c = &req->containers[i];
        if (lim.largest_gpu_mib > 0 && c->mem_kind == GV_ALLOC_MEM_MIB &&
            c->mem > lim.largest_gpu_mib) {
            snprintf(why, cap,
                     "container %s: %s %" PRIu64 " exceeds the largest GPU in the cluster "
                     "(%" PRIu64 " MiB)",
                     c->name, env->alloc->res.mem, c->mem, lim.largest_gpu_mib);
            return;
        }
        if (lim.most_gpus > 0 && c->num_gpu > lim.most_gpus) {
            snprintf(why, cap,
                     "container %s: %s %" PRIu32 " exceeds the most GPUs on any node (%" PRIu32 ")",
                     c->name, env->alloc->res.gpu, c->num_gpu, lim.most_gpus);
            return;
        }
    }
}

static char *base64(const char *text)
{
    gnutls_datum_t in = {(unsigned char *)text, (unsigned)strlen(text)};
    gnutls_datum_t out = {NULL, 0};
    if (gnutls_base64_encode2(&in, &out) < 0)
        return NULL;
    char *s = malloc(out.size + 1);
    if (s != NULL) {
        memcpy(s, out.data, out.size);
        s[out.size] = '\0';
    }
    gnutls_free(out.data);
    return s;
}

static char *review_response(const char *uid, bool allowed, const char *message, json_t *ops)
{
    json_t *resp = json_pack("{s:s,s:b}", "uid", uid, "allowed", allowed);
    char *patch_text = NULL, *patch_b64 = NULL, *out = NULL;
    if (resp == NULL)
        goto done;
    if (!allowed) {
        json_object_set_new(resp, "status",
                            json_pack("{s:s,s:s,s:s,s:i}", "status", "Failure", "reason",
                                      "BadRequest", "message", message, "code", 400));
    } else if (ops != NULL && json_array_size(ops) > 0) {
        patch_text = json_dumps(ops, JSON_COMPACT);
        patch_b64 = patch_text ? base64(patch_text) : NULL;
        if (patch_b64 == NULL)
            goto done;
        json_object_set_new(resp, "patchType", json_string("JSONPatch"));
        json_object_set_new(resp, "patch", json_string(patch_b64));
    }
    json_t *review = json_pack("{s:s,s:s,s:o}", "apiVersion", "admission.k8s.io/v1", "kind",
                               "AdmissionReview", "response", resp);
    resp = NULL;
    if (review != NULL)
        out = json_dumps(review, JSON_COMPACT);
    json_decref(review);
done:
    json_decref(resp);
    free(patch_text);
    free(patch_b64);
    return out;
}

gv_status gv_webhook_review(const struct gv_webhook_env *env, const char *body, size_t len,
                            char **out, struct gv_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    struct gv_alloc_request *req = NULL;
    json_t *ops = NULL;
    gv_status st;
    *out = NULL;
    if (root == NULL)
        return gv_error_set(err, GV_EINVAL, "AdmissionReview: invalid JSON at line %d: %s",
                            jerr.line, jerr.text);
    const char *api = json_string_value(json_object_get(root, "apiVersion"));
    const char *kind = json_string_value(json_object_get(root, "kind"));
    json_t *request = json_object_get(root, "request");
    const char *uid = json_string_value(json_object_get(request, "uid"));
    if (api == NULL || strcmp(api, "admission.k8s.io/v1") != 0 || kind == NULL ||
        strcmp(kind, "AdmissionReview") != 0) {
        st = gv_error_set(err, GV_EINVAL,
                          "expected apiVersion admission.k8s.io/v1, kind AdmissionReview");
        goto fail;
    }
    if (!json_is_object(request) || uid == NULL || *uid == '\0') {
        st = gv_error_set(err, GV_EINVAL, "AdmissionReview: request.uid missing");
        goto fail;
    }
    const char *op = json_string_value(json_object_get(request, "operation"));
    const char *rkind =
        json_string_value(json_object_get(json_object_get(request, "kind"), "kind"));
    json_t *pod = json_object_get(request, "object");
    if (op == NULL || strcmp(op, "CREATE") != 0 || rkind == NULL || strcmp(rkind, "Pod") != 0 ||
        !json_is_object(pod)) {
        /* Only pod creation is ours to look at; anything else passes. */
        *out = review_response(uid, true, NULL, NULL);
        st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    struct gv_error perr = {0};
    if (gv_podspec_request(env->alloc, pod, &req, &perr) != GV_OK) {
        /* The user's own spec is wrong: say so in the denial. */
        *out = review_response(uid, false, perr.msg, NULL);
        st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    char why[GV_ERROR_MSG_MAX];
    if (req->n_containers == 0) {
        ops = json_array();
        if (ops == NULL || gv_webhook_hami_other(env, pod, ops, why, sizeof(why)) != GV_OK) {
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
        *out = review_response(uid, why[0] == '\0', why, ops);
        st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    impossible_reason(env, req, pod, why, sizeof(why));
    if (why[0] == '\0' && env->quota != NULL) {
        const char *ns = json_string_value(json_object_get(request, "namespace"));
        if (ns == NULL)
            ns = json_string_value(json_object_get(json_object_get(pod, "metadata"), "namespace"));
        if (!env->quota(env->ud, ns ? ns : "default", req, why, sizeof(why)) && why[0] == '\0')
            snprintf(why, sizeof(why), "over the namespace's GPU ResourceQuota");
    }
    if (why[0] != '\0') {
        *out = review_response(uid, false, why, NULL);
        st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    ops = json_array();
    json_t *spec = json_object_get(pod, "spec");
    const char *sched = json_string_value(json_object_get(spec, "schedulerName"));
    if (sched == NULL || *sched == '\0' || strcmp(sched, "default-scheduler") == 0) {
        json_array_append_new(ops, json_pack("{s:s,s:s,s:s}", "op", "add", "path",
                                             "/spec/schedulerName", "value", env->scheduler_name));
    } else if (strcmp(sched, env->scheduler_name) != 0) {
        gv_info("webhook: pod %s keeps its own schedulerName %s",
                json_string_value(json_object_get(json_object_get(pod, "metadata"), "name")),
                sched);
    }
    json_t *containers = json_object_get(spec, "containers");
    for (uint32_t i = 0; i < req->n_containers; i++) {
        size_t idx = 0;
        json_t *c = find_container(containers, req->containers[i].name, &idx);
        if (c != NULL && container_defaults(env->alloc, c, idx, ops) != GV_OK) {
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (gv_webhook_hami_gpu(env, pod, req, ops, why, sizeof(why)) != GV_OK) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    *out = review_response(uid, why[0] == '\0', why, ops);
    st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
fail:
    json_decref(ops);
    gv_alloc_request_free(req);
    json_decref(root);
    return st;
}
