#include "scheduler/gv_webhook.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <gnutls/gnutls.h>

#include "common/gv_log.h"
#include "contracts/placement.h"
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

/* ---- security checks (docs/isolation.md) --------------------------------- */

const char *const gv_webhook_default_writers[] = {
    "system:serviceaccount:gpuvisor-system:gpuvisor-scheduler",
    "system:serviceaccount:gpuvisor-system:gpuvisor-node", NULL};

/* Placement keys: written by gpuvisor only (the signature makes a forged one
 * useless to every reader; this refuses it at the door as well). */
static const char *const placement_annotations[] = {
    GV_ALLOC_ASSIGNMENT_ANNOTATION, "gpuvisor.io/assignment-sig", "gpuvisor.io/assigned-node",
    "gpuvisor.io/assigned-at",      "gpuvisor.io/allocation",     "gpuvisor.io/allocation-message",
    "gpuvisor.io/allocated-containers", GV_HOLD_ANNOTATION};
#define PLACEMENT_LABEL "gpuvisor.io/assigned"
#define PRELOAD_ANNOTATION "gpuvisor.io/preload"

/* Container paths the node agent mounts (docs/contracts.md); /run twins
 * because images often make /var/run a link to /run. */
static const char *const protected_container_paths[] = {
    "/etc/gpuvisor",          "/var/run/gpuvisor", "/var/run/gpuvisor-node", "/run/gpuvisor",
    "/run/gpuvisor-node",     "/etc/ld.so.preload", "/usr/local/gpuvisor"};
/* Host paths holding every tenant's limits and regions, and the interposer. */
static const char *const protected_host_paths[] = {"/var/lib/gpuvisor", "/usr/local/gpuvisor"};
/* Capabilities that undo the mounts (umount, mount over) or reach the
 * driver / kernel memory beside the interposer. */
static const char *const forbidden_caps[] = {"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO"};
/* Environment that runs GPUs without gpuvisor's limits: HAMi's switch, and
 * the NVIDIA container runtime's device selection (all GPUs, no Allocate). */
static const char *const opt_out_env[] = {"CUDA_DISABLE_CONTROL", "NVIDIA_VISIBLE_DEVICES"};

static bool in_list(const char *const *list, const char *s)
{
    for (; s != NULL && list != NULL && *list != NULL; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

static json_t *meta_of(json_t *obj, const char *what)
{
    return json_object_get(json_object_get(obj, "metadata"), what);
}

/* Path a with "." / empty components and repeated '/' removed; false when
 * it is relative or climbs with "..". */
static bool clean_path(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    if (in == NULL || in[0] != '/' || cap < 2)
        return false;
    for (const char *p = in; *p != '\0';) {
        while (*p == '/')
            p++;
        const char *e = p;
        while (*e != '\0' && *e != '/')
            e++;
        size_t n = (size_t)(e - p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return false;
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (o + n + 2 > cap)
                return false;
            out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p = e;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return true;
}

/* One path contains the other (whole components): mounting either hides or
 * replaces the other. */
static bool overlaps(const char *clean, const char *prot)
{
    size_t a = strlen(clean), b = strlen(prot);
    if (a == 1)
        return true; /* "/" */
    size_t n = a < b ? a : b;
    if (strncmp(clean, prot, n) != 0)
        return false;
    return a == b || (a < b ? prot[a] == '/' : clean[b] == '/');
}

static const char *overlapping(const char *path, const char *const *prot, size_t n_prot)
{
    char clean[4096];
    if (!clean_path(path, clean, sizeof(clean)))
        return "a path that is relative, uses .. or is too long";
    for (size_t i = 0; i < n_prot; i++)
        if (overlaps(clean, prot[i]))
            return prot[i];
    return NULL;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define DENY(...) (snprintf(why, cap, __VA_ARGS__), true)

/* Every container of the pod, of each kind. */
static const char *const container_lists[] = {"initContainers", "containers",
                                              "ephemeralContainers"};
static const char *const container_kinds[] = {"init container", "container",
                                              "ephemeral container"};

/* Placement keys set or changed by someone other than gpuvisor. */
static bool placement_forged(json_t *pod, json_t *old, const char *user, char *why, size_t cap)
{
    json_t *anns = meta_of(pod, "annotations"), *old_anns = meta_of(old, "annotations");
    for (size_t i = 0; i < N_OF(placement_annotations); i++) {
        json_t *v = json_object_get(anns, placement_annotations[i]);
        json_t *was = json_object_get(old_anns, placement_annotations[i]);
        if (old == NULL ? v != NULL : !((v == NULL && was == NULL) || json_equal(v, was)))
            return DENY("annotation %s is written only by gpuvisor's service accounts; %s may "
                        "not %s it",
                        placement_annotations[i], user ? user : "this user",
                        old == NULL ? "set" : "change or remove");
    }
    json_t *l = json_object_get(meta_of(pod, "labels"), PLACEMENT_LABEL);
    json_t *was = json_object_get(meta_of(old, "labels"), PLACEMENT_LABEL);
    if (old == NULL ? l != NULL : !((l == NULL && was == NULL) || json_equal(l, was)))
        return DENY("label %s is written only by gpuvisor's service accounts; %s may not %s it",
                    PLACEMENT_LABEL, user ? user : "this user",
                    old == NULL ? "set" : "change or remove");
    return false;
}

/* Ways to run GPUs without limits, unless the namespace is on the admin's list. */
static bool opts_out(const struct gv_webhook_policy *pol, json_t *pod, json_t *old,
                     const char *ns, char *why, size_t cap)
{
    if (in_list(pol ? pol->opt_out_namespaces : NULL, ns))
        return false;
    const char *pre = json_string_value(json_object_get(meta_of(pod, "annotations"),
                                                        PRELOAD_ANNOTATION));
    const char *old_pre = json_string_value(json_object_get(meta_of(old, "annotations"),
                                                            PRELOAD_ANNOTATION));
    if (pre != NULL && strcmp(pre, "false") == 0 &&
        (old == NULL || old_pre == NULL || strcmp(old_pre, "false") != 0))
        return DENY("%s: \"false\" runs the pod's GPU work without gpuvisor's limits; only "
                    "namespaces the cluster admin lists in optOutNamespaces may (namespace %s "
                    "is not listed)",
                    PRELOAD_ANNOTATION, ns ? ns : "?");
    json_t *spec = json_object_get(pod, "spec");
    for (size_t l = 0; l < N_OF(container_lists); l++) {
        size_t i, j;
        json_t *c, *e;
        json_array_foreach(json_object_get(spec, container_lists[l]), i, c)
        {
            json_array_foreach(json_object_get(c, "env"), j, e)
            {
                const char *name = json_string_value(json_object_get(e, "name"));
                for (size_t k = 0; k < N_OF(opt_out_env); k++)
                    if (name != NULL && strcmp(name, opt_out_env[k]) == 0)
                        return DENY("container %s sets %s, which runs GPUs without gpuvisor's "
                                    "limits; only namespaces the cluster admin lists in "
                                    "optOutNamespaces may (namespace %s is not listed)",
                                    json_string_value(json_object_get(c, "name")), name,
                                    ns ? ns : "?");
            }
        }
    }
    return false;
}

/* hostPath volumes over the agent's host directories: every tenant's limits. */
static bool host_mounts(json_t *pod, char *why, size_t cap)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "volumes"), i, v)
    {
        json_t *hp = json_object_get(v, "hostPath");
        if (hp == NULL)
            continue;
        const char *path = json_string_value(json_object_get(hp, "path"));
        const char *hit = overlapping(path, protected_host_paths, N_OF(protected_host_paths));
        if (hit != NULL)
            return DENY("volume %s: hostPath %.256s overlaps %s, gpuvisor's node state (every "
                        "tenant's limits); not allowed",
                        json_string_value(json_object_get(v, "name")), path ? path : "?", hit);
    }
    return false;
}

/* What would let a container of a GPU pod undo its limits. */
static bool container_escapes(json_t *pod, char *why, size_t cap)
{
    json_t *spec = json_object_get(pod, "spec");
    for (size_t l = 0; l < N_OF(container_lists); l++) {
        size_t i, j;
        json_t *c, *e;
        json_array_foreach(json_object_get(spec, container_lists[l]), i, c)
        {
            const char *cname = json_string_value(json_object_get(c, "name"));
            json_t *sc = json_object_get(c, "securityContext");
            if (json_is_true(json_object_get(sc, "privileged")))
                return DENY("%s %s is privileged in a pod with GPU slices: a privileged "
                            "container can use every GPU on the node, so the slice cannot be "
                            "enforced (drop securityContext.privileged)",
                            container_kinds[l], cname ? cname : "?");
            json_array_foreach(json_object_get(json_object_get(sc, "capabilities"), "add"), j, e)
            {
                const char *cap_name = json_string_value(e);
                if (cap_name != NULL && strncmp(cap_name, "CAP_", 4) == 0)
                    cap_name += 4;
                for (size_t k = 0; cap_name != NULL && k < N_OF(forbidden_caps); k++)
                    if (strcasecmp(cap_name, forbidden_caps[k]) == 0)
                        return DENY("%s %s adds capability %s in a pod with GPU slices: it "
                                    "could remove gpuvisor's read-only mounts or reach the "
                                    "driver directly",
                                    container_kinds[l], cname ? cname : "?",
                                    json_string_value(e));
            }
            json_array_foreach(json_object_get(c, "volumeMounts"), j, e)
            {
                const char *mp = json_string_value(json_object_get(e, "mountPath"));
                const char *hit = overlapping(mp, protected_container_paths,
                                              N_OF(protected_container_paths));
                if (hit != NULL)
                    return DENY("%s %s mounts a volume at %.256s, over %s where gpuvisor puts the "
                                "container's limits; not allowed in a pod with GPU slices",
                                container_kinds[l], cname ? cname : "?", mp ? mp : "?", hit);
            }
        }
    }
    return false;
}

/* UPDATE (incl. resize) changing a GPU container's resources. */
static bool gpu_resources_changed(json_t *pod, json_t *old, char *why, size_t cap)
{
    json_t *a = json_object_get(json_object_get(pod, "spec"), "containers");
    json_t *b = json_object_get(json_object_get(old, "spec"), "containers");
    size_t i;
    json_t *c;
    json_array_foreach(a, i, c)
    {
        json_t *o = json_array_get(b, i);
        json_t *ra = json_object_get(c, "resources"), *rb = json_object_get(o, "resources");
        if (!((ra == NULL && rb == NULL) || json_equal(ra, rb)))
            return DENY("container %s: the resources of a pod with GPU slices cannot change "
                        "after creation (its GPUs were placed for the old ones)",
                        json_string_value(json_object_get(c, "name")));
    }
    return json_array_size(a) != json_array_size(b)
               ? DENY("the containers of a pod with GPU slices cannot change after creation")
               : false;
}

/* schedulerName: gpuvisor's, unless the pod names another scheduler. */
static gv_status route(const struct gv_webhook_env *env, json_t *pod, json_t *ops)
{
    json_t *spec = json_object_get(pod, "spec");
    const char *sched = json_string_value(json_object_get(spec, "schedulerName"));
    if (sched == NULL || *sched == '\0' || strcmp(sched, "default-scheduler") == 0) {
        if (json_array_append_new(ops, json_pack("{s:s,s:s,s:s}", "op", "add", "path",
                                                 "/spec/schedulerName", "value",
                                                 env->scheduler_name)) != 0)
            return GV_ENOMEM;
    } else if (strcmp(sched, env->scheduler_name) != 0) {
        gv_info("webhook: pod %s keeps its own schedulerName %s",
                json_string_value(json_object_get(json_object_get(pod, "metadata"), "name")),
                sched);
    }
    return GV_OK;
}

/* Does the pod ask a whole device (*mig: a MIG instance among them)? */
static bool asks_whole(const struct gv_webhook_env *env, const struct gv_podspec_whole_req *req,
                       bool *mig)
{
    bool any = false;
    *mig = false;
    for (uint32_t k = 0; k < req->n; k++) {
        if (req->r[k].count == 0)
            continue;
        bool by_name = gv_podspec_whole_by_name(req->r[k].resource);
        *mig = *mig || by_name;
        any = any || by_name || (env->whole != NULL && env->whole(env->ud, req->r[k].resource));
    }
    return any;
}

/*
 * Does an init container ask for a GPU slice (gpumem, gpucores, a shared
 * nvidia.com/gpu)?  The placement and the node agent's Allocate cover app
 * containers only, so such a pod would start with an unplaced, unlimited
 * slice: it is refused (the reason in why), and counts as a GPU pod for the
 * security checks.  Read with the same parser as app containers (the init
 * containers presented as a pod's containers), so the resource names and
 * their rules cannot drift apart; an unreadable request counts as asking.
 */
static bool init_asks_slice(const struct gv_webhook_env *env, json_t *pod, char *why, size_t cap)
{
    json_t *inits = json_object_get(json_object_get(pod, "spec"), "initContainers");
    if (json_array_size(inits) == 0)
        return false;
    json_t *as_pod = json_pack("{s:O,s:{s:O}}", "metadata", json_object_get(pod, "metadata"),
                               "spec", "containers", inits);
    struct gv_alloc_request *req = NULL;
    struct gv_error perr = {0};
    bool asks = true;
    if (as_pod == NULL)
        snprintf(why, cap, "out of memory reading the init containers");
    else if (gv_podspec_request(env->alloc, as_pod, &req, &perr) != GV_OK)
        snprintf(why, cap, "init containers: %.400s", perr.msg);
    else if ((asks = req->n_containers > 0))
        snprintf(why, cap,
                 "init container %s asks for a GPU slice (gpumem, gpucores or a shared GPU): "
                 "gpuvisor places and limits slices for app containers only; give the slice to "
                 "an app container, or ask a whole device",
                 req->containers[0].name);
    gv_alloc_request_free(req);
    json_decref(as_pod);
    return asks;
}

static bool is_gpu_pod(const struct gv_webhook_env *env, json_t *pod)
{
    struct gv_alloc_request *req = NULL;
    struct gv_error err = {0};
    if (pod == NULL)
        return false;
    /* An unreadable request counts as GPU: the stricter checks apply. */
    bool gpu = gv_podspec_request(env->alloc, pod, &req, &err) != GV_OK || req->n_containers > 0;
    gv_alloc_request_free(req);
    char why[GV_ERROR_MSG_MAX];
    return gpu || init_asks_slice(env, pod, why, sizeof(why));
}

/*
 * The security verdict for a CREATE or UPDATE of a pod (sub: the
 * subresource, "" for the pod itself): true with the reason in why when it
 * must be refused.
 */
static bool security_denied(const struct gv_webhook_env *env, json_t *request, json_t *pod,
                            json_t *old, char *why, size_t cap)
{
    const struct gv_webhook_policy *pol = env->policy;
    const char *user =
        json_string_value(json_object_get(json_object_get(request, "userInfo"), "username"));
    const char *ns = json_string_value(json_object_get(request, "namespace"));
    if (ns == NULL)
        ns = json_string_value(meta_of(pod, "namespace"));
    const char *const *writers = pol && pol->writers ? pol->writers : gv_webhook_default_writers;
    if (in_list(writers, user))
        return false; /* gpuvisor itself: bind annotations, allocation progress */
    if (placement_forged(pod, old, user, why, cap) || opts_out(pol, pod, old, ns, why, cap) ||
        host_mounts(pod, why, cap))
        return true;
    bool gpu = is_gpu_pod(env, pod) || is_gpu_pod(env, old);
    if (!gpu)
        return false;
    if (container_escapes(pod, why, cap))
        return true;
    return old != NULL && gpu_resources_changed(pod, old, why, cap);
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
    json_t *old = json_object_get(request, "oldObject");
    bool create = op != NULL && strcmp(op, "CREATE") == 0;
    bool update = op != NULL && strcmp(op, "UPDATE") == 0;
    if (!(create || update) || rkind == NULL || strcmp(rkind, "Pod") != 0 ||
        !json_is_object(pod) || (update && !json_is_object(old))) {
        /* Only pods being created or changed are ours to look at. */
        *out = review_response(uid, true, NULL, NULL);
        st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    char why[GV_ERROR_MSG_MAX];
    if (security_denied(env, request, pod, update ? old : NULL, why, sizeof(why))) {
        const char *rns = json_string_value(json_object_get(request, "namespace"));
        const char *rname = json_string_value(meta_of(pod, "name"));
        const char *ruser =
            json_string_value(json_object_get(json_object_get(request, "userInfo"), "username"));
        gv_info("webhook: refused %s of pod %s/%s by %s: %s", op, rns ? rns : "-",
                rname ? rname : "-", ruser ? ruser : "-", why);
        *out = review_response(uid, false, why, NULL);
        st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    if (create && init_asks_slice(env, pod, why, sizeof(why))) {
        *out = review_response(uid, false, why, NULL);
        st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    if (update) {
        /* Changes are checked, never mutated. */
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
    if (req->n_containers == 0) {
        ops = json_array();
        struct gv_podspec_whole_req wreq;
        bool mig = false;
        if (gv_podspec_whole_request(env->alloc, pod, &wreq, &perr) != GV_OK) {
            *out = review_response(uid, false, perr.msg, NULL);
            st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
        if (ops != NULL && asks_whole(env, &wreq, &mig)) {
            /* MIG instances, VFIO GPUs, mdevs: placed by count on gpuvisor's
             * scheduler, whose informer then sees what they hold */
            if (route(env, pod, ops) != GV_OK || gv_webhook_hami_whole(env, pod, mig, ops) != GV_OK) {
                st = gv_error_set(err, GV_ENOMEM, "out of memory");
                goto fail;
            }
            *out = review_response(uid, true, NULL, ops);
            st = *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
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
    if (ops == NULL || route(env, pod, ops) != GV_OK) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    json_t *spec = json_object_get(pod, "spec");
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
