/*
 * HAMi's own example pod specs (tests/data/hami/pods, unchanged) under HAMi's
 * own default device ConfigMap (tests/data/hami/device-config.yaml): each
 * through the admission webhook (allowed with the routing patch, or refused
 * saying what to write instead) and the allocation engine the extender's
 * filter runs (node and GPUs chosen with HAMi's meaning).  Stand-in cluster:
 * node "a100" with 4 A100 40GB (two of them with the uuids HAMi's examples
 * name; NUMA 0,0,1,1) and node "t4" with 2 T4.
 */
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

#include "common/gv_file.h"
#include "contracts/podspec.h"
#include "kube/gv_kube.h"
#include "scheduler/gv_scheduler.h"
#include "scheduler/gv_webhook.h"

#define U67D "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
#define U67E "GPU-03f69c50-207a-2038-9b45-23cac89cb67e"

static struct gv_sched_config cfg;

static void limits(void *ud, struct gv_webhook_limits *out)
{
    (void)ud;
    out->largest_gpu_mib = 40960;
    out->most_gpus = 4;
}

static struct gv_alloc_cluster *cluster(void)
{
    static const char *const a_uuid[] = {U67D, U67E, "GPU-a100-2", "GPU-a100-3"};
    struct gv_alloc_gpu_spec a[4], t[2];
    for (uint32_t i = 0; i < 4; i++)
        a[i] = (struct gv_alloc_gpu_spec){a_uuid[i], i, "NVIDIA A100-SXM4-40GB", 40960, 10,
                                          (int32_t)(i / 2), true, GV_ALLOC_GPU_SHARED};
    static const char *const t_uuid[] = {"GPU-t4-0", "GPU-t4-1"};
    for (uint32_t i = 0; i < 2; i++)
        t[i] = (struct gv_alloc_gpu_spec){t_uuid[i], i, "Tesla T4", 15360, 10, 0, true,
                                          GV_ALLOC_GPU_SHARED};
    struct gv_alloc_node_spec na = {"a100", 0, 0, NULL, 0, a, 4};
    struct gv_alloc_node_spec nt = {"t4", 0, 0, NULL, 0, t, 2};
    struct gv_alloc_cluster *c = NULL;
    assert_int_equal(gv_alloc_cluster_new(&cfg.alloc, &c, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_upsert(c, &na, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_upsert(c, &nt, NULL), GV_OK);
    return c;
}

/* The pods of a multi-document manifest: Pods as they are, Deployments as
 * the pod their template makes. */
static size_t load_pods(const char *file, json_t **pods, size_t cap)
{
    char path[256], *text = NULL;
    size_t len = 0, n = 0;
    snprintf(path, sizeof(path), "tests/data/hami/pods/%s", file);
    struct gv_error err = {0};
    if (gv_file_read_all(path, &text, &len, &err) != GV_OK)
        fail_msg("%s", err.msg);
    char *doc = text;
    while (doc != NULL && n < cap) {
        char *next = strstr(doc, "\n---");
        if (next != NULL)
            *next = '\0';
        json_t *obj = NULL;
        if (strspn(doc, " \n") < strlen(doc)) {
            if (gv_kube_yaml_load(doc, strlen(doc), file, &obj, &err) != GV_OK)
                fail_msg("%s", err.msg);
            const char *kind = json_string_value(json_object_get(obj, "kind"));
            if (kind != NULL && strcmp(kind, "Pod") == 0) {
                pods[n++] = json_incref(obj);
            } else if (kind != NULL && strcmp(kind, "Deployment") == 0) {
                json_t *tpl = json_object_get(json_object_get(obj, "spec"), "template");
                json_t *md = json_deep_copy(json_object_get(tpl, "metadata"));
                if (md == NULL)
                    md = json_object();
                json_object_set(md, "name", json_object_get(json_object_get(obj, "metadata"), "name"));
                pods[n++] = json_pack("{s:o,s:O}", "metadata", md, "spec",
                                      json_object_get(tpl, "spec"));
            }
            json_decref(obj);
        }
        doc = next != NULL ? next + 4 : NULL;
    }
    free(text);
    return n;
}

/* Webhook verdict: NULL when allowed (and the patch routes the pod to
 * gpuvisor's scheduler), else the denial message (static buffer). */
static const char *admit(json_t *pod)
{
    static char msg[1024];
    struct gv_webhook_env env = {&cfg.alloc, cfg.scheduler_name, limits, NULL,
                                 NULL, cfg.runtime_class, cfg.hide_gpus_from_others, NULL,
                                 NULL};
    json_t *review = json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:s,s:s,s:O}}", "apiVersion",
                               "admission.k8s.io/v1", "kind", "AdmissionReview", "request", "uid",
                               "r1", "kind", "kind", "Pod", "operation", "CREATE", "namespace",
                               "default", "object", pod);
    char *body = json_dumps(review, JSON_COMPACT), *out = NULL;
    json_decref(review);
    struct gv_error err = {0};
    if (gv_webhook_review(&env, body, strlen(body), &out, &err) != GV_OK)
        fail_msg("review: %s", err.msg);
    free(body);
    json_t *root = json_loads(out, 0, NULL);
    json_t *resp = json_object_get(root, "response");
    free(out);
    const char *ret = NULL;
    if (!json_is_true(json_object_get(resp, "allowed"))) {
        snprintf(msg, sizeof(msg), "%s",
                 json_string_value(json_object_get(json_object_get(resp, "status"), "message")));
        ret = msg;
    } else {
        const char *b64 = json_string_value(json_object_get(resp, "patch"));
        assert_non_null(b64);
        gnutls_datum_t in = {(unsigned char *)b64, (unsigned)strlen(b64)}, dec = {NULL, 0};
        assert_true(gnutls_base64_decode2(&in, &dec) >= 0);
        if (strstr((const char *)dec.data, "\"/spec/schedulerName\"") == NULL ||
            strstr((const char *)dec.data, "gpuvisor-scheduler") == NULL)
            fail_msg("no routing to gpuvisor-scheduler in %.*s", (int)dec.size, dec.data);
        gnutls_free(dec.data);
    }
    json_decref(root);
    return ret;
}

struct expect {
    const char *file;
    size_t pod;        /* which pod of the file */
    const char *deny;  /* substring of the denial, or NULL */
    const char *node;  /* chosen node */
    uint32_t n_gpus;
    uint64_t mem_mib;  /* per GPU */
    uint32_t milli;    /* per GPU */
    const char *uuid0; /* first GPU, or NULL */
};

/* Node binpack (HAMi's default) prefers the node the pod fills most: the
 * small T4 node; the example asking for node spread gets the empty A100
 * node, the ones naming A100s or their uuids get those. */
static const struct expect cases[] = {
    {"default_use.yaml", 0, NULL, "t4", 1, 3000, 300, "GPU-t4-0"},
    {"default_use_legacy.yaml", 0, NULL, "t4", 2, 15360, 0, "GPU-t4-0"},
    {"dynamic_mig_example.yaml", 0, "nvidia.com/vgpu-mode: \"mig\" is not offered", NULL, 0, 0, 0,
     NULL},
    {"example.yaml", 0, NULL, "t4", 1, 3000, 0, "GPU-t4-0"},
    /* MIG instances (migStrategy mixed): admitted and routed, placed by count (no engine node) */
    {"mig_example.yaml", 0, NULL, NULL, 0, 0, 0, NULL},
    {"specify_card_type_not_use.yaml", 0, NULL, "t4", 2, 15360, 0, "GPU-t4-0"},
    {"specify_card_type_to_use.yaml", 0, NULL, "a100", 2, 40960, 0, U67D},
    {"specify_scheduling_policy.yaml", 0, NULL, "a100", 1, 40960, 0, U67D},
    {"specify_uuid_not_use.yaml", 0, NULL, "t4", 2, 15360, 0, "GPU-t4-0"},
    {"specify_uuid_to_use.yaml", 0, NULL, "a100", 1, 40960, 0, U67D},
    {"use_as_normal.yaml", 1, NULL, "t4", 1, 15360, 0, "GPU-t4-0"},
    {"use_exclusive_card.yaml", 0, NULL, "t4", 2, 15360, 1000, "GPU-t4-0"},
    {"use_memory_fraction.yaml", 0, NULL, "t4", 2, 7680, 300, "GPU-t4-0"},
    {"use_sharing_card.yaml", 0, NULL, "t4", 1, 6144, 600, "GPU-t4-0"},
    {"vllm_cross_vgpu.yaml", 0, NULL, "t4", 2, 4608, 300, "GPU-t4-0"},
};

static void test_hami_examples(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct expect *e = &cases[i];
        json_t *pods[4] = {0};
        size_t n = load_pods(e->file, pods, 4);
        if (e->pod >= n)
            fail_msg("%s: %zu pods, want #%zu", e->file, n, e->pod);
        const char *why = admit(pods[e->pod]);
        if ((why == NULL) != (e->deny == NULL) || (why != NULL && strstr(why, e->deny) == NULL))
            fail_msg("%s: webhook said '%s', want %s", e->file, why ? why : "allowed",
                     e->deny ? e->deny : "allowed");
        if (e->deny == NULL && e->node != NULL) {
            struct gv_alloc_request *req = NULL;
            struct gv_error err = {0};
            if (gv_podspec_request(&cfg.alloc, pods[e->pod], &req, &err) != GV_OK)
                fail_msg("%s: %s", e->file, err.msg);
            struct gv_alloc_cluster *c = cluster();
            struct gv_alloc_assignment a;
            if (gv_alloc_pick(c, req, NULL, 0, &a, &err) != GV_OK)
                fail_msg("%s: %s", e->file, err.msg);
            const struct gv_alloc_container_assign *ca = &a.containers[0];
            if (strcmp(a.node, e->node) != 0 || ca->n_devices != e->n_gpus ||
                ca->devices[0].mem_mib != e->mem_mib || ca->devices[0].milli != e->milli ||
                (e->uuid0 != NULL && strcmp(ca->devices[0].uuid, e->uuid0) != 0))
                fail_msg("%s: placed on %s, %u GPUs, %llu MiB, %u milli, first %s", e->file,
                         a.node, ca->n_devices, (unsigned long long)ca->devices[0].mem_mib,
                         ca->devices[0].milli, ca->devices[0].uuid);
            /* the uuid lists hold */
            if (strcmp(e->file, "specify_uuid_not_use.yaml") == 0)
                for (uint32_t d = 0; d < ca->n_devices; d++)
                    assert_string_not_equal(ca->devices[d].uuid, U67D);
            gv_alloc_request_free(req);
            gv_alloc_cluster_free(c);
        }
        for (size_t k = 0; k < n; k++)
            json_decref(pods[k]);
    }
}

/* HAMi's default GPU policy is spread: its two sharing pods (40% + 60%)
 * land on two GPUs, where gpuvisor's own binpack default stacks them. */
static void test_hami_spread_default(void **state)
{
    (void)state;
    json_t *pods[4] = {0};
    assert_int_equal(load_pods("use_sharing_card.yaml", pods, 4), 2);
    for (int round = 0; round < 2; round++) {
        struct gv_alloc_cluster *c = cluster();
        const char *first = NULL;
        char uuids[2][GV_ALLOC_UUID_MAX];
        for (int p = 0; p < 2; p++) {
            struct gv_alloc_request *req = NULL;
            assert_int_equal(gv_podspec_request(&cfg.alloc, pods[p], &req, NULL), GV_OK);
            snprintf(req->uid, sizeof(req->uid), "uid-%d", p);
            if (round == 1)
                req->gpu_policy = GV_ALLOC_GPU_BINPACK;
            struct gv_alloc_assignment a;
            assert_int_equal(gv_alloc_pick(c, req, NULL, 0, &a, NULL), GV_OK);
            assert_int_equal(gv_alloc_place(c, req, &a, NULL), GV_OK);
            snprintf(uuids[p], sizeof(uuids[p]), "%s", a.containers[0].devices[0].uuid);
            gv_alloc_request_free(req);
        }
        first = uuids[0];
        if (round == 0)
            assert_string_not_equal(first, uuids[1]); /* spread: HAMi's default */
        else
            assert_string_equal(first, uuids[1]); /* binpack: both on one GPU */
        gv_alloc_cluster_free(c);
    }
    json_decref(pods[0]);
    json_decref(pods[1]);
}

static int setup(void **state)
{
    (void)state;
    struct gv_error err = {0};
    if (gv_sched_config_default(&cfg, &err) != GV_OK ||
        gv_sched_config_load("tests/data/hami/device-config.yaml", &cfg, &err) != GV_OK)
        fail_msg("%s", err.msg);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    gv_sched_config_clear(&cfg);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hami_examples),
        cmocka_unit_test(test_hami_spread_default),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
