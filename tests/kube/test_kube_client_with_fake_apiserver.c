/*
 * The kube client's request/response operations against fake_apiserver (a
 * stand-in for kube-apiserver speaking its HTTP/JSON semantics): GET, LIST
 * with selectors and pagination, create, replace, merge and JSON patches
 * with resourceVersion preconditions, delete, Binding, error mapping,
 * retries and malformed answers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>

#include "common/gv_file.h"
#include "kube/kube_internal.h"
#include "kube_testlib.h"

#define FX ((struct kube_fixture *)*state)

static void test_get_and_not_found(void **state)
{
    json_t *created = kube_create_pod(FX->client, "default", "p1", NULL, NULL, NULL);
    json_t *got = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/namespaces/default/pods/p1", &got, &err),
                     GV_OK);
    assert_string_equal(json_string_value(json_object_get(json_object_get(got, "metadata"),
                                                          "name")),
                        "p1");
    assert_string_equal(kube_rv(got), kube_rv(created));
    json_decref(got);
    json_decref(created);

    got = (json_t *)1;
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/namespaces/default/pods/nope", &got, &err),
                     GV_ENOTFOUND);
    assert_null(got);
    /* The message carries the method, path, HTTP status and API message. */
    assert_non_null(strstr(err.msg, "GET /api/v1/namespaces/default/pods/nope"));
    assert_non_null(strstr(err.msg, "HTTP 404"));
    assert_non_null(strstr(err.msg, "pods \"nope\" not found"));
    /* 404 is not retried (and not reported as if it had been). */
    assert_int_equal(kube_fake_count(FX, "GET /api/v1/namespaces/default/pods/nope"), 1);
    assert_null(strstr(err.msg, "attempts"));

    /* A body of many reads (a 200 KB annotation) arrives whole. */
    size_t n = 200 << 10;
    char *big = malloc(n + 1);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    big[n] = '\0';
    const char *keys[] = {"big"};
    const char *vals[] = {big};
    assert_int_equal(gv_kube_patch_annotations(FX->client, "/api/v1/namespaces/default/pods/p1",
                                               NULL, keys, vals, 1, NULL, &err),
                     GV_OK);
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/namespaces/default/pods/p1", &got, &err),
                     GV_OK);
    const char *back = json_string_value(json_object_get(
        json_object_get(json_object_get(got, "metadata"), "annotations"), "big"));
    assert_non_null(back);
    assert_int_equal(strlen(back), n);
    assert_memory_equal(back, big, n);
    json_decref(got);
    free(big);
}

static void test_create_already_exists(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "dup", NULL, NULL, NULL));
    json_t *pod = json_pack("{s:{s:s}}", "metadata", "name", "dup");
    struct gv_error err;
    json_t *out = NULL;
    assert_int_equal(gv_kube_create(FX->client, "/api/v1/namespaces/default/pods", pod, &out,
                                    &err),
                     GV_EEXIST);
    assert_null(out);
    assert_non_null(strstr(err.msg, "HTTP 409"));
    assert_non_null(strstr(err.msg, "AlreadyExists"));
    assert_non_null(strstr(err.msg, "already exists"));
    json_decref(pod);
}

static void test_list_selectors(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "a1", "app", "a", "n1"));
    json_decref(kube_create_pod(FX->client, "default", "a2", "app", "a", "n2"));
    json_decref(kube_create_pod(FX->client, "other", "b1", "app", "b", "n1"));
    json_decref(kube_create_pod(FX->client, "other", "b2", NULL, NULL, NULL));
    struct gv_error err;
    json_t *list = NULL;

    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", NULL, &list, &err), GV_OK);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 4);
    assert_string_equal(json_string_value(json_object_get(list, "kind")), "PodList");
    assert_non_null(kube_rv(list));
    json_decref(list);

    struct gv_kube_list_opts lo = {.label_selector = "app=a"};
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", &lo, &list, &err), GV_OK);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 2);
    json_decref(list);

    struct gv_kube_list_opts fo = {.field_selector = "spec.nodeName=n1"};
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", &fo, &list, &err), GV_OK);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 2);
    json_decref(list);

    struct gv_kube_list_opts both = {.label_selector = "app!=b", .field_selector =
                                                                     "spec.nodeName=n1"};
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", &both, &list, &err), GV_OK);
    json_t *items = json_object_get(list, "items");
    assert_int_equal(json_array_size(items), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(items, 0), "metadata"), "name")),
                        "a1");
    json_decref(list);

    assert_int_equal(gv_kube_list(FX->client, "/api/v1/namespaces/other/pods", NULL, &list, &err),
                     GV_OK);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 2);
    json_decref(list);

    /* A selector reaches the server as one value, escaped: its '&' and '='
     * add no parameters, its spaces break no request line. */
    struct gv_kube_list_opts inj = {.field_selector = "spec.nodeName=n1&labelSelector=app=b"};
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", &inj, &list, &err), GV_OK);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 0);
    json_decref(list);
    struct gv_kube_list_opts sp = {.label_selector = " app = a ", .field_selector =
                                                                      "spec.nodeName=n1"};
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", &sp, &list, &err), GV_OK);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 1);
    json_decref(list);

    /* An unsupported field selector is the API's 400 with its message. */
    struct gv_kube_list_opts bad = {.field_selector = "spec.bogus=1"};
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", &bad, &list, &err), GV_EINVAL);
    assert_null(list);
    assert_non_null(strstr(err.msg, "HTTP 400"));
    assert_non_null(strstr(err.msg, "spec.bogus"));
}

static void test_list_pagination(void **state)
{
    for (int i = 0; i < 7; i++) {
        char name[32];
        snprintf(name, sizeof(name), "n%02d", i);
        json_decref(kube_create_node(FX->client, name, NULL, NULL));
    }
    struct gv_kube_list_opts lo = {.limit = 3};
    json_t *list = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/nodes", &lo, &list, &err), GV_OK);
    json_t *items = json_object_get(list, "items");
    assert_int_equal(json_array_size(items), 7);
    for (size_t i = 0; i < 7; i++) {
        char name[32];
        snprintf(name, sizeof(name), "n%02zu", i);
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(json_array_get(items, i), "metadata"), "name")),
                            name);
    }
    /* Three pages were fetched; the merged list has no continue token. */
    assert_int_equal(kube_fake_count(FX, "GET /api/v1/nodes"), 3);
    assert_null(json_object_get(json_object_get(list, "metadata"), "continue"));
    json_decref(list);
}

static void test_merge_patch_precondition(void **state)
{
    json_t *pod = kube_create_pod(FX->client, "default", "p", NULL, NULL, NULL);
    const char *path = "/api/v1/namespaces/default/pods/p";
    const char *keys[] = {"gpuvisor.io/assignment", "gpuvisor.io/assigned-node"};
    const char *vals[] = {"v1:x", "node-a"};
    json_t *out = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_patch_annotations(FX->client, path, kube_rv(pod), keys, vals, 2,
                                               &out, &err),
                     GV_OK);
    json_t *ann = json_object_get(json_object_get(out, "metadata"), "annotations");
    assert_string_equal(json_string_value(json_object_get(ann, "gpuvisor.io/assignment")),
                        "v1:x");
    assert_string_not_equal(kube_rv(out), kube_rv(pod));

    /* Same precondition again: the object moved on → conflict with the API's words. */
    json_t *out2 = (json_t *)1;
    assert_int_equal(gv_kube_patch_annotations(FX->client, path, kube_rv(pod), keys, vals, 2,
                                               &out2, &err),
                     GV_ECONFLICT);
    assert_null(out2);
    assert_non_null(strstr(err.msg, "HTTP 409"));
    assert_non_null(strstr(err.msg, "the object has been modified"));
    assert_int_equal(kube_fake_count(FX, "PATCH /api/v1/namespaces/default/pods/p"), 2);

    /* NULL value removes a key; no precondition → always applies. */
    const char *rm[] = {NULL};
    assert_int_equal(gv_kube_patch_annotations(FX->client, path, NULL, keys, rm, 1, &out2, &err),
                     GV_OK);
    ann = json_object_get(json_object_get(out2, "metadata"), "annotations");
    assert_null(json_object_get(ann, "gpuvisor.io/assignment"));
    assert_non_null(json_object_get(ann, "gpuvisor.io/assigned-node"));
    json_decref(out2);
    json_decref(out);
    json_decref(pod);
}

static void test_json_patch_precondition(void **state)
{
    json_t *node = kube_create_node(FX->client, "jn", NULL, NULL);
    const char *path = "/api/v1/nodes/jn";
    json_t *ops = json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:{s:s}}]", "op", "replace", "path",
                            "/metadata/resourceVersion", "value", kube_rv(node), "op", "add",
                            "path", "/metadata/annotations", "value", "gpuvisor.io/node-gpus",
                            "[]");
    json_t *out = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_patch(FX->client, path, GV_KUBE_PATCH_JSON, ops, &out, &err),
                     GV_OK);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(out, "metadata"), "annotations"),
                            "gpuvisor.io/node-gpus")),
                        "[]");
    json_decref(out);
    /* The version in the patch is stale now: the server refuses to store. */
    assert_int_equal(gv_kube_patch(FX->client, path, GV_KUBE_PATCH_JSON, ops, &out, &err),
                     GV_ECONFLICT);
    assert_non_null(strstr(err.msg, "HTTP 409"));
    assert_non_null(strstr(err.msg, "the object has been modified"));
    json_decref(ops);

    /* A failing "test" op is the server's 422, not a conflict. */
    json_t *test = json_pack("[{s:s, s:s, s:s}]", "op", "test", "path",
                             "/metadata/resourceVersion", "value", "1");
    assert_int_equal(gv_kube_patch(FX->client, path, GV_KUBE_PATCH_JSON, test, &out, &err),
                     GV_EINVAL);
    assert_non_null(strstr(err.msg, "HTTP 422"));
    json_decref(test);

    /* A JSON patch on a missing path is the API's 422 → GV_EINVAL. */
    json_t *bad = json_pack("[{s:s, s:s}]", "op", "remove", "path", "/metadata/nothere");
    assert_int_equal(gv_kube_patch(FX->client, path, GV_KUBE_PATCH_JSON, bad, &out, &err),
                     GV_EINVAL);
    assert_non_null(strstr(err.msg, "HTTP 422"));
    json_decref(bad);
    json_decref(node);
}

static void test_replace_and_delete(void **state)
{
    json_t *node = kube_create_node(FX->client, "rn", "zone", "a");
    json_t *upd = json_deep_copy(node);
    json_object_set_new(json_object_get(json_object_get(upd, "metadata"), "labels"), "zone",
                        json_string("b"));
    json_t *out = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_replace(FX->client, "/api/v1/nodes/rn", upd, &out, &err), GV_OK);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(out, "metadata"), "labels"), "zone")),
                        "b");
    json_decref(out);
    /* upd still carries the old resourceVersion: a second PUT conflicts. */
    assert_int_equal(gv_kube_replace(FX->client, "/api/v1/nodes/rn", upd, &out, &err),
                     GV_ECONFLICT);
    json_decref(upd);

    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/nodes/rn", NULL, &err), GV_OK);
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/nodes/rn", &out, &err), GV_ENOTFOUND);
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/nodes/rn", NULL, &err), GV_ENOTFOUND);
    json_decref(node);
}

static void test_bind(void **state)
{
    json_t *pod = kube_create_pod(FX->client, "ns1", "web", NULL, NULL, NULL);
    const char *uid =
        json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
    struct gv_error err;
    assert_int_equal(gv_kube_bind_pod(FX->client, "ns1", "web", uid, "node-7", &err), GV_OK);
    json_t *got = NULL;
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/namespaces/ns1/pods/web", &got, &err),
                     GV_OK);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(got, "spec"), "nodeName")), "node-7");
    json_decref(got);
    /* Binding elsewhere is the API's conflict, with its message. */
    assert_int_equal(gv_kube_bind_pod(FX->client, "ns1", "web", uid, "node-8", &err),
                     GV_ECONFLICT);
    assert_non_null(strstr(err.msg, "HTTP 409"));
    assert_non_null(strstr(err.msg, "already assigned to node"));
    /* The same bind again (a retry whose first answer was lost) succeeds. */
    assert_int_equal(gv_kube_bind_pod(FX->client, "ns1", "web", uid, "node-7", &err), GV_OK);
    /* ... but not for another pod that reused the name (uid differs). */
    assert_int_equal(gv_kube_bind_pod(FX->client, "ns1", "web", "other-uid", "node-7", &err),
                     GV_ECONFLICT);
    assert_non_null(strstr(err.msg, "UID in precondition"));
    assert_int_equal(gv_kube_bind_pod(FX->client, "ns1", "ghost", NULL, "node-8", &err),
                     GV_ENOTFOUND);
    json_decref(pod);

    /* A Binding that carries the resourceVersion the caller read binds only
     * the pod as it was read: one changed since is refused, unbound, and its
     * annotations are not applied. */
    pod = kube_create_pod(FX->client, "ns1", "rv", NULL, NULL, NULL);
    uid = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
    const char *rv =
        json_string_value(json_object_get(json_object_get(pod, "metadata"), "resourceVersion"));
    json_t *ann = json_pack("{s:s}", "gpuvisor.io/test", "1");
    char stale[64];
    snprintf(stale, sizeof(stale), "%s0", rv);
    assert_int_equal(
        gv_kube_bind_pod_annotated(FX->client, "ns1", "rv", uid, stale, "node-7", ann, &err),
        GV_ECONFLICT);
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/namespaces/ns1/pods/rv", &got, &err), GV_OK);
    assert_null(json_object_get(json_object_get(got, "spec"), "nodeName"));
    assert_null(json_object_get(json_object_get(got, "metadata"), "annotations"));
    json_decref(got);
    assert_int_equal(
        gv_kube_bind_pod_annotated(FX->client, "ns1", "rv", uid, rv, "node-7", ann, &err), GV_OK);
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/namespaces/ns1/pods/rv", &got, &err), GV_OK);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(got, "spec"), "nodeName")), "node-7");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(got, "metadata"), "annotations"),
                            "gpuvisor.io/test")),
                        "1");
    json_decref(got);
    json_decref(ann);
    json_decref(pod);
}

/* A delete with a uid precondition removes only the pod it read: one
 * recreated under the same name answers 409 and stays. */
static void test_delete_uid_precondition(void **state)
{
    json_t *old = kube_create_pod(FX->client, "ns1", "victim", NULL, NULL, NULL);
    char *old_uid = strdup(
        json_string_value(json_object_get(json_object_get(old, "metadata"), "uid")));
    json_decref(old);
    struct gv_error err;
    const char *path = "/api/v1/namespaces/ns1/pods/victim";
    assert_int_equal(gv_kube_delete(FX->client, path, NULL, &err), GV_OK);
    json_t *now = kube_create_pod(FX->client, "ns1", "victim", NULL, NULL, NULL);
    const char *new_uid =
        json_string_value(json_object_get(json_object_get(now, "metadata"), "uid"));
    assert_string_not_equal(old_uid, new_uid);
    assert_int_equal(gv_kube_delete_uid(FX->client, path, old_uid, NULL, &err), GV_ECONFLICT);
    assert_non_null(strstr(err.msg, "UID in precondition"));
    json_t *got = NULL;
    assert_int_equal(gv_kube_get(FX->client, path, &got, &err), GV_OK);
    json_decref(got);
    assert_int_equal(gv_kube_delete_uid(FX->client, path, "", NULL, &err), GV_EINVAL);
    assert_int_equal(gv_kube_delete_uid(FX->client, path, new_uid, NULL, &err), GV_OK);
    assert_int_equal(gv_kube_get(FX->client, path, &got, &err), GV_ENOTFOUND);
    json_decref(now);
    free(old_uid);
}

static void test_retry_on_503_then_success(void **state)
{
    json_decref(kube_create_node(FX->client, "r1", NULL, NULL));
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "fail?code=503&count=2", NULL), 200);
    json_t *got = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/nodes/r1", &got, &err), GV_OK);
    json_decref(got);
    /* Two injected failures, then the answer: three attempts. */
    assert_int_equal(kube_fake_count(FX, "GET /api/v1/nodes/r1"), 3);
    /* 500 (an etcd error behind the API server) is retried too */
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "fail?code=500&count=1", NULL), 200);
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/nodes/r1", &got, &err), GV_OK);
    json_decref(got);
    assert_int_equal(kube_fake_count(FX, "GET /api/v1/nodes/r1"), 5);
}

static void test_retry_429_and_give_up(void **state)
{
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "fail?code=429&count=-1&retry_after=0", NULL),
                     200);
    json_t *got = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/nodes/x", &got, &err), GV_EUNAVAILABLE);
    assert_non_null(strstr(err.msg, "HTTP 429"));
    assert_non_null(strstr(err.msg, "after 4 attempts"));
    /* max_retries = 3 → 4 attempts. */
    assert_int_equal(kube_fake_count(FX, "GET /api/v1/nodes/x"), 4);

    /* A 4xx other than 429 is final: one attempt. */
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "fail?code=403&count=1", NULL), 200);
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/nodes/y", &got, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 403"));
    assert_int_equal(kube_fake_count(FX, "GET /api/v1/nodes/y"), 1);
}

static void test_malformed_json(void **state)
{
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "garbage?count=1", NULL), 200);
    json_t *list = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", NULL, &list, &err), GV_EPROTO);
    assert_null(list);
    assert_non_null(strstr(err.msg, "malformed JSON"));
    /* The client is still usable. */
    assert_int_equal(gv_kube_list(FX->client, "/api/v1/pods", NULL, &list, &err), GV_OK);
    json_decref(list);
}

static void test_connection_refused(void **state)
{
    fake_apiserver_stop(&FX->fa);
    json_t *got = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/nodes", &got, &err), GV_EUNAVAILABLE);
    assert_non_null(strstr(err.msg, "after 4 attempts"));
    assert_non_null(strstr(err.msg, "GET /api/v1/nodes"));
}

static void test_bad_arguments(void **state)
{
    json_t *out = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_get(FX->client, "api/v1/nodes", &out, &err), GV_EINVAL);
    assert_int_equal(gv_kube_create(FX->client, "/api/v1/nodes", NULL, &out, &err), GV_EINVAL);
    json_t *node = json_pack("{s:{s:s}}", "metadata", "name", "rel");
    assert_int_equal(gv_kube_create(FX->client, "api/v1/nodes", node, &out, &err), GV_EINVAL);
    assert_int_equal(gv_kube_replace(FX->client, "api/v1/nodes/rel", node, &out, &err), GV_EINVAL);
    assert_null(out);
    json_decref(node);
    assert_int_equal(kube_fake_count(FX, "POST /api/v1/nodes"), 0);
    assert_int_equal(gv_kube_delete(FX->client, "api/v1/nodes/rel", &out, &err), GV_EINVAL);
    assert_int_equal(gv_kube_delete_uid(FX->client, "api/v1/nodes/rel", "u-1", &out, &err),
                     GV_EINVAL);
    assert_int_equal(gv_kube_delete_uid(FX->client, "/api/v1/nodes/rel", "", &out, &err),
                     GV_EINVAL);
    /* a Binding needs its pod and node; a name past the path's room is refused, not cut */
    assert_int_equal(gv_kube_bind_pod(FX->client, NULL, "p", "u", "n1", &err), GV_EINVAL);
    assert_int_equal(gv_kube_bind_pod(FX->client, "default", NULL, "u", "n1", &err), GV_EINVAL);
    assert_int_equal(gv_kube_bind_pod(FX->client, "default", "p", "u", NULL, &err), GV_EINVAL);
    char longname[1100];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(gv_kube_bind_pod(FX->client, "default", longname, "u", "n1", &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "too long"));
    assert_int_equal(gv_kube_watch(FX->client, "api/v1/pods", NULL, NULL, NULL, NULL, &err),
                     GV_EINVAL);
    json_t *empty = json_object();
    assert_int_equal(gv_kube_patch(FX->client, "/api/v1/nodes/x", (gv_kube_patch_type)42, empty,
                                   &out, &err),
                     GV_EINVAL);
    json_decref(empty);
    struct gv_kube_client *c = NULL;
    struct gv_kube_config cfg = {.server = "ftp://x"};
    assert_int_equal(gv_kube_client_new(&cfg, &c, &err), GV_EINVAL);
    assert_null(c);
    struct gv_kube_config *bad = NULL;
    assert_int_equal(gv_kube_config_from_url("localhost:80", &bad, &err), GV_EINVAL);
    assert_null(bad);
}

/* The raw-text GET (agents' /metrics, kubectl gpuvisor top): the body as
 * sent, its length optional, nothing on a refusal. */
static void test_get_text(void **state)
{
    json_decref(kube_create_node(FX->client, "t1", NULL, NULL));
    struct gv_error err;
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gv_kube_get_text(FX->client, "/api/v1/nodes/t1", &text, &len, &err), GV_OK);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    json_t *j = json_loads(text, 0, NULL);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(j, "metadata"), "name")), "t1");
    json_decref(j);
    free(text);
    assert_int_equal(gv_kube_get_text(FX->client, "/api/v1/nodes/t1", &text, NULL, &err), GV_OK);
    assert_non_null(text);
    free(text);
    text = (char *)1;
    assert_int_equal(gv_kube_get_text(FX->client, "api/v1/nodes/t1", &text, &len, &err), GV_EINVAL);
    assert_null(text);
    text = (char *)1;
    assert_int_equal(gv_kube_get_text(FX->client, "/api/v1/nodes/none", &text, &len, &err),
                     GV_ENOTFOUND);
    assert_null(text);
    json_t *list = (json_t *)1;
    assert_int_equal(gv_kube_list(FX->client, "api/v1/pods", NULL, &list, &err), GV_EINVAL);
}

/* Zero means what the config says: no retries; default timeout and cap
 * (not a request that times out at once); no server is no client. */
static void test_zero_options(void **state)
{
    struct gv_error err;
    struct gv_kube_config *cfg = NULL;
    assert_int_equal(gv_kube_config_from_url(FX->fa.url, &cfg, &err), GV_OK);
    cfg->max_retries = 0;
    cfg->timeout_ms = 0;
    cfg->backoff_max_ms = 0;
    struct gv_kube_client *c = NULL;
    assert_int_equal(gv_kube_client_new(cfg, &c, &err), GV_OK);
    json_decref(kube_create_node(FX->client, "z1", NULL, NULL));
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "fail?code=503&count=1", NULL), 200);
    json_t *got = NULL;
    assert_int_equal(gv_kube_get(c, "/api/v1/nodes/z1", &got, &err), GV_EUNAVAILABLE);
    assert_int_equal(kube_fake_count(FX, "GET /api/v1/nodes/z1"), 1);
    assert_int_equal(gv_kube_get(c, "/api/v1/nodes/z1", &got, &err), GV_OK);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(got, "metadata"), "name")), "z1");
    json_decref(got);
    gv_kube_client_free(c);
    gv_kube_config_free(cfg);

    struct gv_kube_config none = {.server = NULL};
    c = (struct gv_kube_client *)&err;
    assert_int_equal(gv_kube_client_new(&none, &c, &err), GV_EINVAL);
    assert_null(c);
    struct gv_kube_config empty = {.server = ""};
    assert_int_equal(gv_kube_client_new(&empty, &c, &err), GV_EINVAL);
    assert_int_equal(gv_kube_client_new(NULL, &c, &err), GV_EINVAL);
}

static void test_status_code_mapping(void **state)
{
    (void)state;
    /* Status codes the fake does not produce on these paths, via the mapper. */
    assert_int_equal(gv_kube_status_code(415, "UnsupportedMediaType"), GV_EUNSUPPORTED);
    assert_int_equal(gv_kube_status_code(409, "AlreadyExists"), GV_EEXIST);
    assert_int_equal(gv_kube_status_code(409, "Conflict"), GV_ECONFLICT);
    assert_int_equal(gv_kube_status_code(410, "Expired"), GV_ERANGE);
    assert_int_equal(gv_kube_status_code(500, NULL), GV_EUNAVAILABLE);
    assert_int_equal(gv_kube_status_code(504, NULL), GV_ETIMEOUT);
    assert_int_equal(gv_kube_status_code(401, NULL), GV_EIO);
}

struct race_arg {
    struct gv_kube_client *c;
    const char *rv;
    char value[16];
    gv_status st;
};

static void *race_writer(void *p)
{
    struct race_arg *a = p;
    const char *keys[] = {"gpuvisor.io/assignment"};
    const char *vals[] = {a->value};
    struct gv_error err;
    a->st = gv_kube_patch_annotations(a->c, "/api/v1/namespaces/default/pods/race", a->rv, keys,
                                      vals, 1, NULL, &err);
    return NULL;
}

static void test_concurrent_patches_one_winner(void **state)
{
    /* Optimistic concurrency as the scheduler uses it: N threads share one
     * client and patch with the same precondition; exactly one wins. */
    json_t *pod = kube_create_pod(FX->client, "default", "race", NULL, NULL, NULL);
    enum { N = 8 };
    pthread_t th[N];
    struct race_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (struct race_arg){.c = FX->client, .rv = kube_rv(pod)};
        snprintf(args[i].value, sizeof(args[i].value), "w%d", i);
        assert_int_equal(pthread_create(&th[i], NULL, race_writer, &args[i]), 0);
    }
    int ok = 0, conflicts = 0, winner = -1;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (args[i].st == GV_OK) {
            ok++;
            winner = i;
        } else if (args[i].st == GV_ECONFLICT) {
            conflicts++;
        }
    }
    assert_int_equal(ok, 1);
    assert_int_equal(conflicts, N - 1);
    json_t *got = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_get(FX->client, "/api/v1/namespaces/default/pods/race", &got, &err),
                     GV_OK);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(got, "metadata"), "annotations"),
                            "gpuvisor.io/assignment")),
                        args[winner].value);
    json_decref(got);
    json_decref(pod);
}

static void test_unix_socket_and_token_file(void **state)
{
    (void)state;
    const char *tmp = getenv("GV_TEST_TMP");
    char dir[512], sock[600], tok[600];
    snprintf(dir, sizeof(dir), "%s/kubeunix.XXXXXX", tmp != NULL ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(sock, sizeof(sock), "%s/apiserver.sock", dir);
    snprintf(tok, sizeof(tok), "%s/token", dir);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(tok, "old-token\n", 10, 0600, &err), GV_OK);
    const char *args[] = {"--unix", sock, "--token", "tok-123", NULL};
    struct fake_apiserver fa;
    assert_int_equal(fake_apiserver_start(&fa, args), 0);
    assert_memory_equal(fa.url, "unix:", 5);

    struct gv_kube_config *cfg = NULL;
    assert_int_equal(gv_kube_config_from_url("http://localhost", &cfg, &err), GV_OK);
    cfg->unix_socket = strdup(sock);
    cfg->token_file = strdup(tok); /* read on first use */
    cfg->max_retries = 0;
    struct gv_kube_client *c = NULL;
    assert_int_equal(gv_kube_client_new(cfg, &c, &err), GV_OK);
    json_t *list = NULL;
    /* Stale token: 401, re-read once, still stale → the 401 is returned. */
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &list, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 401"));
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &list, &err), GV_EIO);
    /* The kubelet rotates the token file: the next 401 picks it up at once. */
    assert_int_equal(gv_file_write_atomic(tok, "tok-123\n", 8, 0600, &err), GV_OK);
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &list, &err), GV_OK);
    assert_string_equal(json_string_value(json_object_get(list, "kind")), "NodeList");
    json_decref(list);
    gv_kube_client_free(c);

    /* A watch's 401 re-reads the token file too (watches are most of a
     * daemon's calls): the next watch uses the rotated token. */
    assert_int_equal(gv_file_write_atomic(tok, "old-token\n", 10, 0600, &err), GV_OK);
    assert_int_equal(gv_kube_client_new(cfg, &c, &err), GV_OK);
    struct gv_kube_watch_opts wo = {.timeout_seconds = 1};
    assert_int_equal(gv_kube_watch(c, "/api/v1/nodes", &wo, NULL, NULL, NULL, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 401"));
    assert_int_equal(gv_file_write_atomic(tok, "tok-123\n", 8, 0600, &err), GV_OK);
    assert_int_equal(gv_kube_watch(c, "/api/v1/nodes", &wo, NULL, NULL, NULL, &err), GV_EIO);
    assert_int_equal(gv_kube_watch(c, "/api/v1/nodes", &wo, NULL, NULL, NULL, &err), GV_OK);
    gv_kube_client_free(c);
    /* a token file never readable: the calls go without a token (a file
     * briefly unreadable during rotation keeps the old one) and the
     * server's 401 is the answer */
    free(cfg->token_file);
    cfg->token_file = strdup("/nonexistent/gpuvisor-token");
    assert_int_equal(gv_kube_client_new(cfg, &c, &err), GV_OK);
    assert_int_equal(gv_kube_watch(c, "/api/v1/nodes", &wo, NULL, NULL, NULL, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 401"));
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &list, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 401"));
    gv_kube_client_free(c);

    /* Without the token the stand-in answers 401 like the real server. */
    free(cfg->token_file);
    cfg->token_file = NULL;
    assert_int_equal(gv_kube_client_new(cfg, &c, &err), GV_OK);
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &list, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 401"));
    gv_kube_client_free(c);
    gv_kube_config_free(cfg);
    fake_apiserver_stop(&fa);
    unlink(sock);
    unlink(tok);
    rmdir(dir);
}

static void test_seed_and_graceful_pod_deletion(void **state)
{
    (void)state;
    const char *tmp = getenv("GV_TEST_TMP");
    char seed[512];
    snprintf(seed, sizeof(seed), "%s/kube-seed-%d.json", tmp != NULL ? tmp : "/tmp",
             (int)getpid());
    const char *doc = "{\"kind\":\"List\",\"items\":["
                      "{\"kind\":\"Node\",\"metadata\":{\"name\":\"s1\"}},"
                      "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"sp\",\"namespace\":\"ns\"},"
                      "\"spec\":{\"nodeName\":\"s1\"}}]}";
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(seed, doc, strlen(doc), 0600, &err), GV_OK);
    const char *args[] = {"--seed", seed, "--graceful-pod-deletion", NULL};
    struct kube_fixture *fx = NULL;
    assert_int_equal(kube_fixture_setup_args((void **)&fx, args), 0);
    json_t *o = NULL;
    assert_int_equal(gv_kube_get(fx->client, "/api/v1/nodes/s1", &o, &err), GV_OK);
    json_decref(o);
    const char *path = "/api/v1/namespaces/ns/pods/sp";
    assert_int_equal(gv_kube_get(fx->client, path, &o, &err), GV_OK);
    assert_non_null(json_object_get(json_object_get(o, "metadata"), "uid"));
    json_decref(o);

    /* A bound pod is only marked terminating until "its kubelet" confirms. */
    assert_int_equal(gv_kube_delete(fx->client, path, &o, &err), GV_OK);
    assert_non_null(json_object_get(json_object_get(o, "metadata"), "deletionTimestamp"));
    json_decref(o);
    assert_int_equal(gv_kube_get(fx->client, path, &o, &err), GV_OK);
    json_decref(o);
    assert_int_equal(fake_apiserver_ctl(&fx->fa, "finish-deletions", NULL), 200);
    assert_int_equal(gv_kube_get(fx->client, path, &o, &err), GV_ENOTFOUND);

    /* An unbound pod goes at once. */
    json_decref(kube_create_pod(fx->client, "ns", "free", NULL, NULL, NULL));
    assert_int_equal(gv_kube_delete(fx->client, "/api/v1/namespaces/ns/pods/free", NULL, &err),
                     GV_OK);
    assert_int_equal(gv_kube_get(fx->client, "/api/v1/namespaces/ns/pods/free", &o, &err),
                     GV_ENOTFOUND);
    kube_fixture_teardown((void **)&fx);
    unlink(seed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, kube_fixture_setup, kube_fixture_teardown)
        T(test_get_and_not_found),
        T(test_create_already_exists),
        T(test_list_selectors),
        T(test_list_pagination),
        T(test_merge_patch_precondition),
        T(test_json_patch_precondition),
        T(test_replace_and_delete),
        T(test_bind),
        T(test_delete_uid_precondition),
        T(test_retry_on_503_then_success),
        T(test_retry_429_and_give_up),
        T(test_malformed_json),
        T(test_connection_refused),
        T(test_bad_arguments),
        T(test_zero_options),
        T(test_get_text),
    T(test_zero_options),
        cmocka_unit_test(test_status_code_mapping),
        T(test_concurrent_patches_one_winner),
        cmocka_unit_test(test_unix_socket_and_token_file),
        cmocka_unit_test(test_seed_and_graceful_pod_deletion),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
