/* Admission webhook decisions: AdmissionReview v1 in, patch/denial out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <gnutls/gnutls.h>
#include <jansson.h>

#include "scheduler/gv_webhook.h"

static struct gv_alloc_config cfg;
static struct gv_webhook_limits cluster = {81559, 8};

static void limits(void *ud, struct gv_webhook_limits *out)
{
    (void)ud;
    *out = cluster;
}

/* The scheduler's answer: nodes list a VFIO GPU under this name (stand-in). */
static bool whole(void *ud, const char *resource)
{
    (void)ud;
    return strcmp(resource, "nvidia.com/GH100_H100_PCIE") == 0;
}

static struct gv_webhook_env env = {&cfg,  "gpuvisor-scheduler", limits, NULL, NULL, NULL,
                                    false, NULL,                 whole};

/* Wraps a pod JSON in an AdmissionReview request. */
static char *review_of(const char *pod, const char *op)
{
#define REVIEW_FMT                                                                                 \
    "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","                        \
    "\"request\":{\"uid\":\"rev-1\",\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"}" \
    ","                                                                                            \
    "\"operation\":\"%s\",\"namespace\":\"default\",\"object\":%s}}"
    size_t n = sizeof(REVIEW_FMT) + strlen(pod) + 16;
    char *s = malloc(n);
    snprintf(s, n, REVIEW_FMT, op, pod);
    return s;
}

/* Runs a review; returns the response object (caller decrefs). */
static json_t *run(const char *pod, const char *op)
{
    char *req = review_of(pod, op);
    char *out = NULL;
    struct gv_error err = {0};
    gv_status st = gv_webhook_review(&env, req, strlen(req), &out, &err);
    free(req);
    if (st != GV_OK)
        fail_msg("review failed: %s", err.msg);
    json_t *root = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "apiVersion")),
                        "admission.k8s.io/v1");
    assert_string_equal(json_string_value(json_object_get(root, "kind")), "AdmissionReview");
    json_t *resp = json_incref(json_object_get(root, "response"));
    json_decref(root);
    assert_string_equal(json_string_value(json_object_get(resp, "uid")), "rev-1");
    return resp;
}

/* Decodes the base64 JSON Patch of a response. */
static json_t *patch_of(json_t *resp)
{
    const char *b64 = json_string_value(json_object_get(resp, "patch"));
    if (b64 == NULL)
        return NULL;
    assert_string_equal(json_string_value(json_object_get(resp, "patchType")), "JSONPatch");
    gnutls_datum_t in = {(unsigned char *)b64, (unsigned)strlen(b64)}, out = {NULL, 0};
    assert_true(gnutls_base64_decode2(&in, &out) >= 0);
    json_t *p = json_loadb((const char *)out.data, out.size, 0, NULL);
    gnutls_free(out.data);
    assert_non_null(p);
    return p;
}

static json_t *find_op(json_t *patch, const char *path)
{
    size_t i;
    json_t *op;
    json_array_foreach(patch, i, op)
    {
        if (strcmp(json_string_value(json_object_get(op, "path")), path) == 0)
            return op;
    }
    return NULL;
}

/* Asserts the patch has an op on path whose value is the string value. */
static void expect_op(json_t *patch, const char *path, const char *value)
{
    json_t *op = find_op(patch, path);
    if (op == NULL)
        fail_msg("no patch op on %s", path);
    assert_string_equal(json_string_value(json_object_get(op, "op")), "add");
    assert_string_equal(json_string_value(json_object_get(op, "value")), value);
}

static const char *denial(json_t *resp)
{
    assert_false(json_is_true(json_object_get(resp, "allowed")));
    return json_string_value(json_object_get(json_object_get(resp, "status"), "message"));
}

static void test_gpu_pod_is_routed_and_defaulted(void **state)
{
    (void)state;
    json_t *resp =
        run("{\"metadata\":{\"name\":\"p\",\"uid\":\"u\"},\"spec\":{"
            "\"schedulerName\":\"default-scheduler\",\"containers\":["
            "{\"name\":\"plain\"},"
            "{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/gpumem\":\"3000\"}}},"
            "{\"name\":\"b\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"2\","
            "\"nvidia.com/gpucores\":\"30\"}}},"
            "{\"name\":\"c\",\"resources\":{\"requests\":{\"aliyun.com/gpu-mem\":\"4\"}}}]}}",
            "CREATE");
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    json_t *patch = patch_of(resp);
    assert_non_null(patch);
    expect_op(patch, "/spec/schedulerName", "gpuvisor-scheduler");
    /* Container a has limits: one op adds the GPU count inside them. */
    expect_op(patch, "/spec/containers/1/resources/limits/nvidia.com~1gpu", "1");
    /* Container b already has a count: untouched. */
    assert_null(find_op(patch, "/spec/containers/2/resources/limits/nvidia.com~1gpu"));
    /* Container c has no limits object: it is added whole. */
    json_t *op = find_op(patch, "/spec/containers/3/resources/limits");
    assert_non_null(op);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(op, "value"), "nvidia.com/gpu")), "1");
    /* The plain container gets nothing. */
    assert_null(find_op(patch, "/spec/containers/0/resources"));
    assert_null(find_op(patch, "/spec/containers/0/resources/limits"));
    json_decref(patch);
    json_decref(resp);
}

static void test_configured_defaults_are_written(void **state)
{
    (void)state;
    cfg.default_mem_mib = 2048;
    cfg.default_cores = 25;
    json_t *resp = run("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"a\","
                       "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}",
                       "CREATE");
    cfg.default_mem_mib = 0;
    cfg.default_cores = 0;
    json_t *patch = patch_of(resp);
    expect_op(patch, "/spec/containers/0/resources/limits/nvidia.com~1gpumem", "2048");
    expect_op(patch, "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "25");
    /* schedulerName absent from the object: added. */
    assert_non_null(find_op(patch, "/spec/schedulerName"));
    json_decref(patch);
    json_decref(resp);
}

static void test_non_gpu_and_other_ops_pass_untouched(void **state)
{
    (void)state;
    static const struct {
        const char *pod, *op;
    } cases[] = {
        /* no GPU resource */
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"a\","
         "\"resources\":{\"limits\":{\"cpu\":\"1\"}}}]}}",
         "CREATE"},
        /* not a creation (nodeName would be refused on CREATE) */
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"nodeName\":\"n\",\"containers\":[{"
         "\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}",
         "UPDATE"},
        /* names its own scheduler, already has a GPU count: nothing to add */
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"schedulerName\":\"mine\","
         "\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":{"
         "\"nvidia.com/gpu\":\"1\"}}}]}}",
         "CREATE"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *resp = run(cases[i].pod, cases[i].op);
        assert_true(json_is_true(json_object_get(resp, "allowed")));
        assert_null(json_object_get(resp, "patch"));
        json_decref(resp);
    }
}

/* A pod with as many annotations as meshes and operators put on real pods (over 64) is
 * an ordinary pod: admitted untouched without GPUs, routed and defaulted with them. */
static void test_many_annotations_admitted(void **state)
{
    (void)state;
    for (int gpu = 0; gpu < 2; gpu++) {
        char *pod = malloc(16384);
        size_t o = (size_t)snprintf(pod, 16384, "{\"metadata\":{\"name\":\"p\",\"annotations\":{");
        for (int i = 0; i < 100; i++)
            o += (size_t)snprintf(pod + o, 16384 - o, "%s\"sidecar.example.com/opt-%d\":\"on\"",
                                  i ? "," : "", i);
        snprintf(pod + o, 16384 - o,
                 "}},\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                 "{%s}}}]}}",
                 gpu ? "\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem\":\"1000\"" : "\"cpu\":\"1\"");
        json_t *resp = run(pod, "CREATE");
        free(pod);
        if (!json_is_true(json_object_get(resp, "allowed")))
            fail_msg("gpu=%d denied: %s", gpu, denial(resp));
        if (gpu) {
            json_t *patch = patch_of(resp);
            expect_op(patch, "/spec/schedulerName", "gpuvisor-scheduler");
            json_decref(patch);
        } else {
            assert_null(json_object_get(resp, "patch"));
        }
        json_decref(resp);
    }
}

#define GPU_C(name, extra) \
    "{\"name\":\"" name "\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}" extra "}"
#define CPU_C(name, extra) "{\"name\":\"" name "\"" extra "}"

/* The admin lets namespace "default" opt out (a container setting its own
 * NVIDIA_VISIBLE_DEVICES or CUDA_DISABLE_CONTROL is refused elsewhere). */
static const char *const optout_default[] = {"default", NULL};
static const struct gv_webhook_policy optout_policy = {.writers = NULL,
                                                       .opt_out_namespaces = optout_default};

/* runtimeClassName and NVIDIA_VISIBLE_DEVICES=none: both off by default, on by config. */
static void test_nvidia_runtime_switches(void **state)
{
    (void)state;
    env.policy = &optout_policy;
    const char *gpu_pod = "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":["
        GPU_C("a", "") "," CPU_C("side", "") "," CPU_C("own", ",\"env\":[{\"name\":"
        "\"NVIDIA_VISIBLE_DEVICES\",\"value\":\"void\"}]") "],\"initContainers\":["
        CPU_C("init", ",\"env\":[{\"name\":\"X\",\"value\":\"1\"}]") "]}}";
    const char *cpu_pod = "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":["
        CPU_C("a", "") "]}}";
    json_t *resp = run(gpu_pod, "CREATE");
    json_t *patch = patch_of(resp);
    assert_null(find_op(patch, "/spec/runtimeClassName"));
    assert_null(find_op(patch, "/spec/containers/1/env"));
    json_decref(patch);
    json_decref(resp);
    resp = run(cpu_pod, "CREATE");
    assert_null(json_object_get(resp, "patch"));
    json_decref(resp);

    env.runtime_class = "nvidia";
    env.hide_gpus_from_others = true;
    resp = run(gpu_pod, "CREATE");
    patch = patch_of(resp);
    expect_op(patch, "/spec/runtimeClassName", "nvidia");
    json_t *op = find_op(patch, "/spec/containers/1/env"); /* sidecar: hidden */
    assert_non_null(op);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(op, "value"), 0), "value")),
                        "none");
    assert_null(find_op(patch, "/spec/containers/0/env")); /* the GPU container */
    assert_null(find_op(patch, "/spec/containers/2/env")); /* sets its own */
    assert_non_null(find_op(patch, "/spec/initContainers/0/env/-")); /* appended */
    json_decref(patch);
    json_decref(resp);
    resp = run(cpu_pod, "CREATE");
    patch = patch_of(resp);
    assert_non_null(find_op(patch, "/spec/containers/0/env"));
    assert_null(find_op(patch, "/spec/runtimeClassName")); /* GPU pods only */
    json_decref(patch);
    json_decref(resp);
    /* hami.io/webhook: ignore does not let a tenant's non-GPU pod see every GPU */
    resp = run("{\"metadata\":{\"name\":\"p\",\"annotations\":{\"hami.io/webhook\":"
               "\"ignore\"}},\"spec\":{\"containers\":[" CPU_C("a", "") "]}}",
               "CREATE");
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    patch = patch_of(resp);
    assert_non_null(find_op(patch, "/spec/containers/0/env"));
    json_decref(patch);
    json_decref(resp);
    /* a runtimeClassName of the user's own is kept */
    resp = run("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"runtimeClassName\":\"kata\","
               "\"containers\":[" GPU_C("a", "") "]}}",
               "CREATE");
    patch = patch_of(resp);
    assert_null(find_op(patch, "/spec/runtimeClassName"));
    json_decref(patch);
    json_decref(resp);
    env.runtime_class = NULL;
    env.hide_gpus_from_others = false;
    env.policy = NULL;
}

/* Pods asking whole devices (MIG instances, VFIO GPUs): admitted, routed to
 * gpuvisor's scheduler (which places them by count), never hidden from
 * their GPUs; the NVIDIA runtime class for MIG only. */
static void test_whole_device_pods(void **state)
{
    (void)state;
    env.runtime_class = "nvidia";
    env.hide_gpus_from_others = true;
#define RES_C(name, res, n)                                                                        \
    "{\"name\":\"" name "\",\"resources\":{\"limits\":{\"" res "\":\"" n "\"}}}"
    const char *mig_pod = "{\"metadata\":{\"name\":\"m\"},\"spec\":{\"containers\":["
        RES_C("a", "nvidia.com/mig-3g.40gb", "1") "]}}";
    json_t *resp = run(mig_pod, "CREATE");
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    json_t *patch = patch_of(resp);
    assert_non_null(patch);
    expect_op(patch, "/spec/schedulerName", "gpuvisor-scheduler");
    expect_op(patch, "/spec/runtimeClassName", "nvidia");
    assert_null(find_op(patch, "/spec/containers/0/env")); /* its MIG device stays visible */
    json_decref(patch);
    json_decref(resp);
    /* a VFIO GPU some node lists: routed, no NVIDIA runtime class (the VM's is the pod's) */
    const char *vm_pod = "{\"metadata\":{\"name\":\"v\"},\"spec\":{\"runtimeClassName\":"
        "\"kata\",\"containers\":[" RES_C("vm", "nvidia.com/GH100_H100_PCIE", "2") "]}}";
    resp = run(vm_pod, "CREATE");
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    patch = patch_of(resp);
    expect_op(patch, "/spec/schedulerName", "gpuvisor-scheduler");
    assert_null(find_op(patch, "/spec/runtimeClassName"));
    assert_null(find_op(patch, "/spec/containers/0/env"));
    json_decref(patch);
    json_decref(resp);
    /* a name no node lists is another plugin's: the pod is a plain one */
    resp = run("{\"metadata\":{\"name\":\"o\"},\"spec\":{\"containers\":["
               RES_C("a", "example.com/fpga", "1") "]}}", "CREATE");
    patch = patch_of(resp);
    assert_null(find_op(patch, "/spec/schedulerName"));
    assert_non_null(find_op(patch, "/spec/containers/0/env")); /* hidden from the GPUs */
    json_decref(patch);
    json_decref(resp);
    /* NVIDIA's renamed shared replicas (sharing block, renameByDefault) are a GPU too:
     * never hidden, though gpuvisor neither places nor counts them */
    resp = run("{\"metadata\":{\"name\":\"r\"},\"spec\":{\"containers\":["
               RES_C("a", "nvidia.com/gpu.shared", "1") "," CPU_C("side", "") "]}}", "CREATE");
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    patch = patch_of(resp);
    assert_null(find_op(patch, "/spec/containers/0/env"));
    assert_non_null(find_op(patch, "/spec/containers/1/env")); /* its sidecar still is */
    json_decref(patch);
    json_decref(resp);
    /* a MIG count that is not a whole number is the user's error, named */
    resp = run("{\"metadata\":{\"name\":\"b\"},\"spec\":{\"containers\":["
               RES_C("a", "nvidia.com/mig-1g.10gb", "1.5") "]}}", "CREATE");
    assert_non_null(strstr(denial(resp), "nvidia.com/mig-1g.10gb"));
    json_decref(resp);
    /* a pod naming another scheduler keeps it */
    resp = run("{\"metadata\":{\"name\":\"s\"},\"spec\":{\"schedulerName\":\"volcano\","
               "\"containers\":[" RES_C("a", "nvidia.com/mig-1g.10gb", "1") "]}}", "CREATE");
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    patch = patch_of(resp);
    assert_null(find_op(patch, "/spec/schedulerName"));
    json_decref(patch);
    json_decref(resp);
#undef RES_C
    env.runtime_class = NULL;
    env.hide_gpus_from_others = false;
}

/* HAMi's opt-outs: ignore on a GPU pod, CUDA_DISABLE_CONTROL. */
static void test_hami_opt_outs(void **state)
{
    (void)state;
    /* hami.io/webhook: ignore leaves a non-GPU pod alone (switches off) */
    json_t *plain = run("{\"metadata\":{\"name\":\"p\",\"annotations\":{\"hami.io/webhook\":"
                        "\"ignore\"}},\"spec\":{\"containers\":[" CPU_C("a", "") "]}}",
                        "CREATE");
    assert_true(json_is_true(json_object_get(plain, "allowed")));
    assert_null(json_object_get(plain, "patch"));
    json_decref(plain);
    json_t *resp = run("{\"metadata\":{\"name\":\"p\",\"annotations\":{\"hami.io/webhook\":"
                       "\"ignore\"}},\"spec\":{\"containers\":[" GPU_C("a", "") "]}}",
                       "CREATE");
    assert_non_null(strstr(denial(resp), "remove the annotation"));
    json_decref(resp);
#define OFF ",\"env\":[{\"name\":\"CUDA_DISABLE_CONTROL\",\"value\":\"true\"}]"
    /* outside the admin's opt-out namespaces the security policy refuses it */
    resp = run("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[" GPU_C("a", OFF) "]}}",
               "CREATE");
    assert_non_null(strstr(denial(resp), "CUDA_DISABLE_CONTROL"));
    json_decref(resp);
    env.policy = &optout_policy;
    /* every GPU container off: the pod-wide opt-out annotation */
    resp = run("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":["
               GPU_C("a", OFF) "," GPU_C("b", OFF) "," CPU_C("c", "") "]}}",
               "CREATE");
    json_t *patch = patch_of(resp);
    json_t *op = find_op(patch, "/metadata/annotations");
    assert_non_null(op);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(op, "value"), "gpuvisor.io/preload")),
        "false");
    json_decref(patch);
    json_decref(resp);
    resp = run("{\"metadata\":{\"name\":\"p\",\"annotations\":{\"x\":\"y\"}},\"spec\":{"
               "\"containers\":[" GPU_C("a", OFF) "]}}",
               "CREATE");
    patch = patch_of(resp);
    expect_op(patch, "/metadata/annotations/gpuvisor.io~1preload", "false");
    json_decref(patch);
    json_decref(resp);
    /* only some: refused, saying what to write */
    resp = run("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":["
               GPU_C("a", OFF) "," GPU_C("b", "") "]}}",
               "CREATE");
    assert_non_null(strstr(denial(resp), "set it on every GPU container"));
    json_decref(resp);
    env.policy = NULL;
#undef OFF
}

static void test_impossible_requests_denied(void **state)
{
    (void)state;
    static const struct {
        const char *pod;
        const char *needle;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"big\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpumem\":\"200000\"}}}]}}",
         "nvidia.com/gpumem 200000 exceeds the largest GPU in the cluster (81559 MiB)"},
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"c\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\",\"nvidia.com/"
         "gpucores\":\"150\"}}}]}}",
         "0..100"},
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"root\","
         "\"securityContext\":{\"privileged\":true},"
         "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem\":\"1000\"}}}]}}",
         "container root is privileged"},
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"nodeName\":\"gpu-1\",\"containers\":[{"
         "\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}",
         "spec.nodeName (gpu-1)"},
        {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"many\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"12\"}}}]}}",
         "exceeds the most GPUs on any node (8)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *resp = run(cases[i].pod, "CREATE");
        const char *msg = denial(resp);
        assert_non_null(msg);
        if (strstr(msg, cases[i].needle) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, msg, cases[i].needle);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(resp, "status"), "code")), 400);
        assert_null(json_object_get(resp, "patch"));
        json_decref(resp);
    }
}

static void test_unknown_cluster_skips_size_checks(void **state)
{
    (void)state;
    struct gv_webhook_limits saved = cluster;
    cluster.largest_gpu_mib = 0;
    cluster.most_gpus = 0;
    json_t *resp = run("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"big\","
                       "\"resources\":{\"limits\":{\"nvidia.com/gpumem\":\"200000\"}}}]}}",
                       "CREATE");
    cluster = saved;
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    json_decref(resp);
}

static void test_malformed_reviews(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "{",
        "[]",
        "{\"apiVersion\":\"admission.k8s.io/v1beta1\",\"kind\":\"AdmissionReview\"}",
        "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}",
        "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = NULL;
        struct gv_error err = {0};
        assert_int_equal(gv_webhook_review(&env, bad[i], strlen(bad[i]), &out, &err), GV_EINVAL);
        assert_null(out);
        assert_true(strlen(err.msg) > 0);
        if (i < 2)
            assert_non_null(strstr(err.msg, "invalid JSON"));
    }
    /* A pod object that is not an object: allowed untouched (not ours to judge). */
    json_t *resp = run("\"x\"", "CREATE");
    assert_true(json_is_true(json_object_get(resp, "allowed")));
    json_decref(resp);
}


/* A review with userInfo, namespace and (UPDATE) oldObject. */
static json_t *run_as(const struct gv_webhook_env *e, const char *user, const char *ns,
                      const char *pod, const char *old)
{
    json_t *req = json_pack("{s:s,s:{s:s,s:s,s:s},s:s,s:s,s:{s:s},s:o}", "uid", "rev-1", "kind",
                            "group", "", "version", "v1", "kind", "Pod", "operation",
                            old ? "UPDATE" : "CREATE", "namespace", ns, "userInfo", "username",
                            user, "object", json_loads(pod, 0, NULL));
    assert_non_null(req);
    assert_non_null(json_object_get(req, "object"));
    if (old != NULL)
        json_object_set_new(req, "oldObject", json_loads(old, 0, NULL));
    json_t *root = json_pack("{s:s,s:s,s:o}", "apiVersion", "admission.k8s.io/v1", "kind",
                             "AdmissionReview", "request", req);
    char *text = json_dumps(root, JSON_COMPACT), *out = NULL;
    json_decref(root);
    struct gv_error err = {0};
    if (gv_webhook_review(e, text, strlen(text), &out, &err) != GV_OK)
        fail_msg("review failed: %s", err.msg);
    free(text);
    json_t *got = json_loads(out, 0, NULL);
    free(out);
    json_t *resp = json_incref(json_object_get(got, "response"));
    json_decref(got);
    return resp;
}

#define TENANT "system:serviceaccount:tenant:default"
#define SCHED_SA "system:serviceaccount:gpuvisor-system:gpuvisor-scheduler"
#define GPU_RES "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}"
#define GPU_POD(extra_meta, extra_ctr, extra_spec)                                                 \
    "{\"metadata\":{\"name\":\"p\"" extra_meta "},\"spec\":{" extra_spec                           \
    "\"containers\":[{\"name\":\"main\"," GPU_RES extra_ctr "}]}}"

static void test_security_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *what, *user, *ns, *pod, *old, *needle; /* needle NULL: allowed */
    } cases[] = {
        {"tenant sets an assignment", TENANT, "tenant",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment\":\"v1;node=n;main=G:0:0\"}", "", ""),
         NULL, "annotation gpuvisor.io/assignment is written only by gpuvisor"},
        {"tenant sets assigned-at in 2099 on a pod without GPUs", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\",\"annotations\":{\"gpuvisor.io/assigned-at\":"
         "\"2099-01-01T00:00:00Z\"}},\"spec\":{\"containers\":[{\"name\":\"c\"}]}}",
         NULL, "gpuvisor.io/assigned-at is written only by gpuvisor"},
        {"tenant labels its pod gpuvisor.io/assigned", TENANT, "tenant",
         GPU_POD(",\"labels\":{\"gpuvisor.io/assigned\":\"true\"}", "", ""), NULL,
         "label gpuvisor.io/assigned"},
        {"tenant rewrites the assignment (UPDATE)", TENANT, "tenant",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment\":\"v1;node=n;main=G:0:0\"}", "", ""),
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment\":\"v1;node=n;main=G:500:0\"}", "",
                 ""),
         "may not change or remove it"},
        /* adding one where there was none is a change too (mutant webhook-add-placement) */
        {"tenant adds an assignment to a pod that had none (UPDATE)", TENANT, "tenant",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment\":\"v1;node=n;main=G:0:0\"}", "", ""),
         GPU_POD("", "", ""), "gpuvisor.io/assignment is written only by gpuvisor"},
        {"tenant adds assigned-node beside other annotations (UPDATE)", TENANT, "tenant",
         GPU_POD(",\"annotations\":{\"x\":\"1\",\"gpuvisor.io/assigned-node\":\"n2\"}", "", ""),
         GPU_POD(",\"annotations\":{\"x\":\"1\"}", "", ""), "gpuvisor.io/assigned-node"},
        {"tenant adds the assigned label (UPDATE)", TENANT, "tenant",
         GPU_POD(",\"labels\":{\"gpuvisor.io/assigned\":\"true\"}", "", ""), GPU_POD("", "", ""),
         "label gpuvisor.io/assigned"},
        {"tenant removes the signature (UPDATE)", TENANT, "tenant", GPU_POD("", "", ""),
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment-sig\":\"v1.x\"}", "", ""),
         "gpuvisor.io/assignment-sig"},
        {"tenant UPDATE leaving placement keys alone", TENANT, "tenant",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment\":\"a\",\"x\":\"2\"}", "", ""),
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment\":\"a\",\"x\":\"1\"}", "", ""),
         NULL},
        {"the scheduler writes the assignment", SCHED_SA, "tenant",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/assignment\":\"a\"}", "", ""),
         GPU_POD("", "", ""), NULL},
        {"preload opt-out in a tenant namespace", TENANT, "tenant",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/preload\":\"false\"}", "", ""), NULL,
         "only namespaces the cluster admin lists in optOutNamespaces may (namespace tenant"},
        {"preload opt-out added by UPDATE", TENANT, "tenant",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/preload\":\"false\"}", "", ""),
         GPU_POD("", "", ""), "optOutNamespaces"},
        {"preload opt-out in the admin's namespace", TENANT, "ml-admin",
         GPU_POD(",\"annotations\":{\"gpuvisor.io/preload\":\"false\"}", "", ""), NULL, NULL},
        {"HAMi's CUDA_DISABLE_CONTROL in an init container", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"initContainers\":[{\"name\":\"i\","
         "\"env\":[{\"name\":\"CUDA_DISABLE_CONTROL\",\"value\":\"true\"}]}],"
         "\"containers\":[{\"name\":\"main\"," GPU_RES "}]}}",
         NULL, "container i sets CUDA_DISABLE_CONTROL"},
        {"NVIDIA_VISIBLE_DEVICES=all on a pod without GPU resources", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"c\","
         "\"env\":[{\"name\":\"NVIDIA_VISIBLE_DEVICES\",\"value\":\"all\"}]}]}}",
         NULL, "NVIDIA_VISIBLE_DEVICES"},
        {"privileged init container beside a GPU container", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"initContainers\":[{\"name\":\"i\","
         "\"securityContext\":{\"privileged\":true}}],\"containers\":[{\"name\":\"main\"," GPU_RES
         "}]}}",
         NULL, "init container i is privileged"},
        /* the pod's only GPU request on an init container (issue 28) */
        {"privileged init container holding the pod's only GPU slice", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"initContainers\":[{\"name\":\"i\","
         "\"securityContext\":{\"privileged\":true}," GPU_RES "}],\"containers\":[{\"name\":"
         "\"main\"}]}}",
         NULL, "init container i is privileged"},
        {"a GPU slice on an init container only", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"initContainers\":[{\"name\":\"warm\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpumem\":\"4000\"}}}],\"containers\":[{"
         "\"name\":\"main\"}]}}",
         NULL, "init container warm asks for a GPU slice"},
        {"an impossible gpumem on an init container", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"initContainers\":[{\"name\":\"big\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpumem\":\"99999999\"}}}],\"containers\":[{"
         "\"name\":\"main\"," GPU_RES "}]}}",
         NULL, "init containers: "},
        {"an init container without GPUs beside a GPU container", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"initContainers\":[{\"name\":\"i\"}],"
         "\"containers\":[{\"name\":\"main\"," GPU_RES "}]}}",
         NULL, NULL},
        {"SYS_ADMIN on the GPU container", TENANT, "tenant",
         GPU_POD("", ",\"securityContext\":{\"capabilities\":{\"add\":[\"CAP_SYS_ADMIN\"]}}", ""),
         NULL, "adds capability CAP_SYS_ADMIN"},
        {"ALL capabilities (lower case)", TENANT, "tenant",
         GPU_POD("", ",\"securityContext\":{\"capabilities\":{\"add\":[\"all\"]}}", ""), NULL,
         "adds capability all"},
        {"a volume over /etc/gpuvisor", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"/etc/gpuvisor/\"}]", ""),
         NULL, "over /etc/gpuvisor"},
        {"a volume over /etc (hides /etc/ld.so.preload)", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"/etc\"}]", ""), NULL,
         "mounts a volume at /etc, over /etc/"},
        {"a volume at /etc/ld.so.preload through //./", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"//etc/./ld.so.preload\"}]",
                 ""),
         NULL, "over /etc/ld.so.preload"},
        {"a volume over /run/gpuvisor (/var/run links to it)", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"/run/gpuvisor/x\"}]", ""),
         NULL, "over /run/gpuvisor"},
        {"a mount path with ..", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"/data/../etc\"}]", ""),
         NULL, "relative, uses .."},
        {"a volume elsewhere is fine", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"/etc/gpuvisor-data\"}]",
                 ""),
         NULL, NULL},
        {"hostPath of the agent's state on any pod", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"volumes\":[{\"name\":\"h\",\"hostPath\":{"
         "\"path\":\"/var/lib\"}}],\"containers\":[{\"name\":\"c\"}]}}",
         NULL, "hostPath /var/lib overlaps /var/lib/gpuvisor"},
        {"ephemeral container with SYS_ADMIN added to a GPU pod", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\"," GPU_RES
         "}],\"ephemeralContainers\":[{\"name\":\"dbg\",\"securityContext\":{\"capabilities\":{"
         "\"add\":[\"SYS_ADMIN\"]}}}]}}",
         GPU_POD("", "", ""), "ephemeral container dbg adds capability SYS_ADMIN"},
        {"exactly the most GPUs on any node is fine", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"8\"}}}]}}",
         NULL, NULL},
        {"hostPath / (the whole host)", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"volumes\":[{\"name\":\"h\",\"hostPath\":{"
         "\"path\":\"/\"}}],\"containers\":[{\"name\":\"c\"}]}}",
         NULL, "hostPath / overlaps"},
        {"a volume at / (hides the image)", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"///\"}]", ""), NULL,
         "mounts a volume at ///"},
        {"a volume at a one-letter path is fine", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"/d\"}]", ""), NULL, NULL},
        {"a volume mount without a path", TENANT, "tenant",
         GPU_POD("", ",\"volumeMounts\":[{\"name\":\"v\"}]", ""), NULL, "relative"},
        {"a capability that grants nothing over the GPU is fine", TENANT, "tenant",
         GPU_POD("", ",\"securityContext\":{\"capabilities\":{\"add\":[\"NET_BIND_SERVICE\"]}}",
                 ""),
         NULL, NULL},
        {"resources added by UPDATE to a container that had none", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\"," GPU_RES
         "},{\"name\":\"side\"," GPU_RES "}]}}",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\"," GPU_RES
         "},{\"name\":\"side\"}]}}",
         "container side: the resources"},
        {"resources removed by UPDATE", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\"," GPU_RES
         "},{\"name\":\"side\"}]}}",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\"," GPU_RES
         "},{\"name\":\"side\"," GPU_RES "}]}}",
         "container side: the resources"},
        {"GPU resources changed by UPDATE (resize)", TENANT, "tenant",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem\":\"80000\"}}}]}}",
         "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"main\","
         "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem\":\"1000\"}}}]}}",
         "cannot change after creation"},
    };
    static const char *const opt_out[] = {"ml-admin", NULL};
    struct gv_webhook_policy pol = {.writers = NULL, .opt_out_namespaces = opt_out};
    struct gv_webhook_env e = env;
    e.policy = &pol;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *resp = run_as(&e, cases[i].user, cases[i].ns, cases[i].pod, cases[i].old);
        bool allowed = json_is_true(json_object_get(resp, "allowed"));
        const char *msg = allowed ? "" : denial(resp);
        if (cases[i].needle == NULL && !allowed)
            fail_msg("%s: refused: %s", cases[i].what, msg);
        if (cases[i].needle != NULL && (allowed || strstr(msg, cases[i].needle) == NULL))
            fail_msg("%s: %s, expected a refusal naming '%s'", cases[i].what,
                     allowed ? "allowed" : msg, cases[i].needle);
        json_decref(resp);
    }
    /* A mount path longer than any path the check can hold (4 KiB): refused
     * cleanly, never written past the buffer. */
    char *long_pod = malloc(12000);
    assert_non_null(long_pod);
    int off = snprintf(long_pod, 12000, "%s",
                       "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":"
                       "\"main\"," GPU_RES ",\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"");
    for (int i = 0; i < 1500; i++)
        off += snprintf(long_pod + off, 12000 - (size_t)off, "/abcdef");
    snprintf(long_pod + off, 12000 - (size_t)off, "\"}]}]}}");
    json_t *lr = run_as(&e, TENANT, "tenant", long_pod, NULL);
    assert_false(json_is_true(json_object_get(lr, "allowed")));
    assert_non_null(strstr(denial(lr), "too long"));
    json_decref(lr);
    free(long_pod);
    /* Default policy (none configured): no opt-out namespace at all. */
    json_t *resp = run_as(&env, TENANT, "ml-admin",
                          GPU_POD(",\"annotations\":{\"gpuvisor.io/preload\":\"false\"}", "", ""),
                          NULL);
    assert_false(json_is_true(json_object_get(resp, "allowed")));
    json_decref(resp);
}

/* The quota callback records the namespace it is asked about. */
static char quota_ns[64];
static bool quota_rec(void *ud, const char *ns, const struct gv_alloc_request *req, char *why,
                      size_t cap)
{
    (void)ud;
    (void)req;
    snprintf(quota_ns, sizeof(quota_ns), "%s", ns);
    if (strcmp(ns, "tenant") == 0) {
        snprintf(why, cap, "namespace tenant is over its GPU quota");
        return false;
    }
    return true;
}

/* The namespace charged is the review's (the API server's), not the one the
 * object names (the tenant's to write, and empty on many CREATEs): a tenant
 * naming another namespace, or none, in its pod is still charged its own;
 * the object's only when the review has none. */
static void test_quota_charges_the_reviews_namespace(void **state)
{
    (void)state;
    struct gv_webhook_env e = env;
    e.quota = quota_rec;
    static const char *const objs[] = {
        GPU_POD("", "", ""),
        GPU_POD(",\"namespace\":\"rich\"", "", ""),
    };
    for (size_t i = 0; i < 2; i++) {
        quota_ns[0] = '\0';
        json_t *resp = run_as(&e, TENANT, "tenant", objs[i], NULL);
        assert_string_equal(quota_ns, "tenant");
        assert_false(json_is_true(json_object_get(resp, "allowed")));
        assert_non_null(strstr(denial(resp), "over its GPU quota"));
        json_decref(resp);
    }
    /* no namespace in the review: the object's, else "default" */
    const char *review =
        "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
        "\"uid\":\"rev-2\",\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},"
        "\"operation\":\"CREATE\",\"object\":" GPU_POD(",\"namespace\":\"rich\"", "", "") "}}";
    char *out = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_webhook_review(&e, review, strlen(review), &out, &err), GV_OK);
    assert_string_equal(quota_ns, "rich");
    assert_non_null(strstr(out, "\"allowed\":true"));
    free(out);
}

int main(void)
{
    gv_alloc_config_default(&cfg);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_pod_is_routed_and_defaulted),
        cmocka_unit_test(test_configured_defaults_are_written),
        cmocka_unit_test(test_non_gpu_and_other_ops_pass_untouched),
        cmocka_unit_test(test_many_annotations_admitted),
        cmocka_unit_test(test_impossible_requests_denied),
        cmocka_unit_test(test_unknown_cluster_skips_size_checks),
        cmocka_unit_test(test_malformed_reviews),
        cmocka_unit_test(test_nvidia_runtime_switches),
        cmocka_unit_test(test_whole_device_pods),
        cmocka_unit_test(test_hami_opt_outs),
        cmocka_unit_test(test_security_refusals),
        cmocka_unit_test(test_quota_charges_the_reviews_namespace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
