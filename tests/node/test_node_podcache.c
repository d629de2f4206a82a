/*
 * The node agent's pod cache (gv_allocator_cache_pod, the informer's
 * transform): what it keeps of a pod, and that Allocate gives the same
 * answers from the trimmed pods as a kubelet would expect from the whole
 * ones (pods as the API server returns them: labels, managedFields,
 * kubectl's last-applied-configuration, HAMi annotations, volumes, env,
 * status conditions).
 */
/* before cmocka.h: cmocka defines a macro named fail, the allocator a function */
#include "node/allocate/allocate_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>

#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "node/allocate/gv_allocator.h"
#include "node/kubelet/gv_grpc.h"

#define G0 "GPU-11111111-2222-4333-8444-000000000000"
#define G1 "GPU-11111111-2222-4333-8444-000000000001"

/* A pod as the API server returns it; assignment NULL: none. */
static json_t *make_pod(const char *name, const char *assignment, const char *assigned_at)
{
    json_t *pod = json_pack(
        "{s:s, s:s,"
        " s:{s:s, s:s, s:s, s:s, s:s, s:{s:s, s:s},"
        "    s:{s:s, s:s, s:s, s:s, s:s},"
        "    s:[{s:s, s:s, s:s, s:{}}], s:[{s:s, s:s, s:s}]},"
        " s:{s:s, s:s, s:s, s:[{s:s}],"
        "    s:[{s:s, s:s, s:[{s:s, s:s}, {s:s, s:s}],"
        "        s:{s:{s:s, s:s, s:s}, s:{s:s, s:s}}, s:[{s:s, s:s}]},"
        "       {s:s, s:s, s:{s:{s:s}}}]},"
        " s:{s:s, s:[{s:s, s:s}], s:s}}",
        "apiVersion", "v1", "kind", "Pod",
        "metadata", "name", name, "namespace", "team-a", "uid", name /* unique enough */,
        "resourceVersion", "4711", "creationTimestamp", "2026-01-01T00:00:00Z",
        "labels", "app", "trainer", "pod-template-hash", "5d9f",
        "annotations", "kubectl.kubernetes.io/last-applied-configuration",
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\"},\"spec\":{}}",
        "hami.io/vgpu-node", "node1", "nvidia.com/use-gputype", "A100",
        "gpuvisor.io/assigned-node", "node1", "gpuvisor.io/node-policy", "binpack",
        "managedFields", "manager", "kubectl", "operation", "Update", "apiVersion", "v1",
        "fieldsV1", "ownerReferences", "kind", "ReplicaSet", "name", "trainer-5d9f", "uid", "rs-1",
        "spec", "nodeName", "node1", "schedulerName", "gpuvisor-scheduler",
        "serviceAccountName", "default", "volumes", "name", "data",
        "containers", "name", "main", "image", "cuda:12", "env", "name", "CUDA_TASK_PRIORITY",
        "value", "1", "name", "HOME", "value", "/root", "resources", "limits", "nvidia.com/gpu",
        "1", "nvidia.com/gpumem", "1000", "cpu", "2", "requests", "cpu", "1", "memory", "1Gi",
        "volumeMounts", "name", "data", "mountPath", "/data", "name", "sidecar", "image", "busybox",
        "resources", "limits", "cpu", "100m",
        "status", "phase", "Pending", "conditions", "type", "PodScheduled", "status", "True",
        "qosClass", "Burstable");
    assert_non_null(pod);
    json_t *anns = json_object_get(json_object_get(pod, "metadata"), "annotations");
    if (assignment)
        json_object_set_new(anns, "gpuvisor.io/assignment", json_string(assignment));
    if (assigned_at)
        json_object_set_new(anns, "gpuvisor.io/assigned-at", json_string(assigned_at));
    return pod;
}

static void set_annotation(json_t *pod, const char *key, const char *value)
{
    json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"), key,
                        json_string(value));
}

/* Sorted, comma-joined keys of obj. */
static void keys_of(json_t *obj, char *out, size_t cap)
{
    const char *keys[64];
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
        if (n < 64)
            keys[n++] = k;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(keys[j], keys[i]) < 0) {
                const char *t = keys[i];
                keys[i] = keys[j];
                keys[j] = t;
            }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", keys[i]);
}

static void assert_keys(json_t *obj, const char *want)
{
    char got[1024];
    keys_of(obj, got, sizeof(got));
    if (strcmp(got, want) != 0)
        fail_msg("keys '%s', want '%s'", got, want);
}

static void test_pending_pod_keeps_what_allocate_reads(void **state)
{
    (void)state;
    json_t *pod = make_pod("p1", "v1;node=node1;main=" G0 ":1000:300", "2026-01-01T00:00:01.000000Z");
    set_annotation(pod, "gpuvisor.io/preload", "false");
    set_annotation(pod, "gpuvisor.io/allocated-containers", "");
    json_t *c = gv_allocator_cache_pod(pod);
    assert_non_null(c);
    assert_keys(c, "metadata,spec");
    json_t *m = json_object_get(c, "metadata");
    assert_keys(m, "annotations,name,namespace,resourceVersion,uid");
    assert_string_equal(json_string_value(json_object_get(m, "resourceVersion")), "4711");
    assert_keys(json_object_get(m, "annotations"),
                "gpuvisor.io/allocated-containers,gpuvisor.io/assigned-at,gpuvisor.io/assigned-node,"
                "gpuvisor.io/assignment,"
                "gpuvisor.io/preload");
    json_t *spec = json_object_get(c, "spec");
    assert_keys(spec, "containers,nodeName");
    json_t *ctrs = json_object_get(spec, "containers");
    assert_int_equal(json_array_size(ctrs), 2);
    json_t *main_c = json_array_get(ctrs, 0);
    assert_keys(main_c, "env,name,resources");
    assert_int_equal(json_array_size(json_object_get(main_c, "env")), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(main_c, "env"), 0),
                                                          "name")),
                        "CUDA_TASK_PRIORITY");
    assert_true(json_equal(json_object_get(main_c, "resources"),
                           json_object_get(json_array_get(json_object_get(json_object_get(pod, "spec"),
                                                                          "containers"), 0),
                                           "resources")));
    assert_keys(json_array_get(ctrs, 1), "name,resources");
    /* the point of it all */
    char *whole = json_dumps(pod, JSON_COMPACT), *kept = json_dumps(c, JSON_COMPACT);
    assert_true(strlen(kept) * 2 < strlen(whole));
    free(whole);
    free(kept);
    /* A copy: no value of the decoded pod is shared (and so kept alive) by the form. */
    json_t *anns = json_object_get(json_object_get(pod, "metadata"), "annotations");
    assert_int_equal(json_object_get(anns, "gpuvisor.io/assignment")->refcount, 1);
    assert_int_equal(json_object_get(json_object_get(pod, "metadata"), "uid")->refcount, 1);
    assert_int_equal(json_object_get(json_array_get(json_object_get(json_object_get(pod, "spec"),
                                                                    "containers"), 0),
                                     "resources")->refcount, 1);
    json_decref(c);
    json_decref(pod);
}

static void test_order_key_fallback(void **state)
{
    (void)state;
    json_t *pod = make_pod("p1", "v1;node=node1;main=" G0 ":1000:300", NULL);
    json_t *c = gv_allocator_cache_pod(pod);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "metadata"),
                                                          "creationTimestamp")),
                        "2026-01-01T00:00:00Z");
    json_decref(c);
    json_decref(pod);
}

/* Pods Allocate can no longer pick are cached as their uid alone (for GC). */
static void test_other_pods_keep_identity(void **state)
{
    (void)state;
    json_t *pods[5];
    pods[0] = make_pod("none", NULL, NULL);
    pods[1] = make_pod("served", "v1;node=node1;main=" G0 ":1000:300", "2026-01-01T00:00:01Z");
    set_annotation(pods[1], "gpuvisor.io/allocation", "success");
    pods[2] = make_pod("failed", "v1;node=node1;main=" G0 ":1000:300", "2026-01-01T00:00:01Z");
    set_annotation(pods[2], "gpuvisor.io/allocation", "failed");
    pods[3] = make_pod("deleting", "v1;node=node1;main=" G0 ":1000:300", "2026-01-01T00:00:01Z");
    json_object_set_new(json_object_get(pods[3], "metadata"), "deletionTimestamp",
                        json_string("2026-01-01T00:01:00Z"));
    pods[4] = make_pod("done", "v1;node=node1;main=" G0 ":1000:300", "2026-01-01T00:00:01Z");
    json_object_set_new(json_object_get(pods[4], "status"), "phase", json_string("Succeeded"));
    for (size_t i = 0; i < 5; i++) {
        json_t *c = gv_allocator_cache_pod(pods[i]);
        assert_true(json_is_string(c));
        assert_string_equal(json_string_value(c),
                            json_string_value(json_object_get(json_object_get(pods[i], "metadata"),
                                                              "uid")));
        json_decref(c);
        /* without a uid there is nothing to find it by: not cached at all */
        json_object_del(json_object_get(pods[i], "metadata"), "uid");
        assert_null(gv_allocator_cache_pod(pods[i]));
        json_decref(pods[i]);
    }
}

/* ---- Allocate from the trimmed pods ------------------------------------------- */

static char scratch[] = "/tmp/gv-test-podcache-XXXXXX";

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup_alloc(void **state)
{
    gv_log_set_level(GV_LOG_ERROR);
    memcpy(scratch + strlen(scratch) - 6, "XXXXXX", 6);
    if (mkdtemp(scratch) == NULL)
        return -1;
    struct gv_allocator_config cfg = {.node = "node1", .state_dir = scratch,
                                      .install_dir = "/usr/local/gpuvisor", .wait_ms = 1};
    struct gv_allocator *a;
    if (gv_allocator_new(&cfg, NULL, NULL, &a, NULL) != GV_OK)
        return -1;
    struct gv_node_config *nc;
    if (gv_node_config_default(&nc, NULL) != GV_OK)
        return -1;
    struct gv_allocator_gpu g[2] = {0};
    const char *uuids[2] = {G0, G1};
    for (int i = 0; i < 2; i++) {
        snprintf(g[i].gpu.uuid, sizeof(g[i].gpu.uuid), "%s", uuids[i]);
        g[i].gpu.index = (unsigned)i;
        g[i].gpu.healthy = true;
        g[i].gpu.numa = -1;
        g[i].settings = nc->defaults;
    }
    gv_status st = gv_allocator_set_gpus(a, nc, g, 2, NULL);
    gv_node_config_free(nc);
    *state = a;
    return st == GV_OK ? 0 : -1;
}

static int teardown_alloc(void **state)
{
    gv_allocator_free(*state);
    return nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

struct answer {
    int code;
    char env[2048];   /* KEY=VALUE;... */
    char mounts[2048]; /* container path;... */
};

static void allocate(struct gv_allocator *a, const char *id0, const char *id1, struct answer *ans)
{
    const char *ids[2] = {id0, id1};
    V1beta1__ContainerAllocateResponse *r = malloc(sizeof(*r));
    assert_non_null(r);
    v1beta1__container_allocate_response__init(r);
    char msg[512];
    memset(ans, 0, sizeof(*ans));
    ans->code = gv_allocator_allocate(a, ids, id1 ? 2 : 1, r, msg, sizeof(msg));
    for (size_t i = 0; i < r->n_envs; i++)
        snprintf(ans->env + strlen(ans->env), sizeof(ans->env) - strlen(ans->env), "%s=%s;",
                 r->envs[i]->key, r->envs[i]->value);
    for (size_t i = 0; i < r->n_mounts; i++)
        snprintf(ans->mounts + strlen(ans->mounts), sizeof(ans->mounts) - strlen(ans->mounts),
                 "%s;", r->mounts[i]->container_path);
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void test_allocate_from_trimmed_pods(void **state)
{
    struct gv_allocator *a = *state;
    json_t *pods = json_array();
    json_array_append_new(pods, make_pod("plain", NULL, NULL));
    json_t *served = make_pod("served", "v1;node=node1;main=" G0 ":500:100", "2026-01-01T00:00:00Z");
    set_annotation(served, "gpuvisor.io/allocation", "success");
    json_array_append_new(pods, served);
    /* newer assignment: served second */
    json_t *late = make_pod("late", "v1;node=node1;main=" G1 ":700:0", "2026-01-01T00:00:09Z");
    set_annotation(late, "gpuvisor.io/preload", "false");
    json_array_append_new(pods, late);
    /* two GPU containers; the first (main) asks CUDA_TASK_PRIORITY=1 in its env */
    json_t *early = make_pod("early", "v1;node=node1;main=" G0 ":1000:300;sidecar=" G1 ":2000:0",
                             "2026-01-01T00:00:01Z");
    json_array_append_new(pods, early);
    gv_allocator_set_pods(a, pods);
    json_decref(pods);

    struct answer ans;
    allocate(a, G0 "::1", NULL, &ans);
    assert_int_equal(ans.code, 0);
    assert_non_null(strstr(ans.env, "NVIDIA_VISIBLE_DEVICES=" G0 ";"));
    assert_non_null(strstr(ans.env, "CUDA_DEVICE_MEMORY_LIMIT_0=1000m;"));
    assert_non_null(strstr(ans.env, "CUDA_DEVICE_SM_LIMIT=30;"));
    assert_non_null(strstr(ans.env, "CUDA_TASK_PRIORITY=1;")); /* from the kept env entry */
    assert_non_null(strstr(ans.mounts, GV_NODE_PRELOAD_PATH ";"));
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/limits/early/main/limits.env", scratch);
    assert_int_equal(access(dir, F_OK), 0);

    allocate(a, G1 "::2", NULL, &ans); /* the next container of the same pod */
    assert_int_equal(ans.code, 0);
    assert_non_null(strstr(ans.env, "NVIDIA_VISIBLE_DEVICES=" G1 ";"));
    assert_non_null(strstr(ans.env, "CUDA_DEVICE_MEMORY_LIMIT_0=2000m;"));
    assert_null(strstr(ans.env, "CUDA_TASK_PRIORITY")); /* the sidecar asked none */
    snprintf(dir, sizeof(dir), "%s/containers/early/sidecar", scratch);
    assert_int_equal(access(dir, F_OK), 0);

    allocate(a, G1 "::3", NULL, &ans); /* then the later pod, opted out of ld.so.preload */
    assert_int_equal(ans.code, 0);
    assert_non_null(strstr(ans.env, "CUDA_DEVICE_MEMORY_LIMIT_0=700m;"));
    assert_null(strstr(ans.mounts, GV_NODE_PRELOAD_PATH));
    assert_non_null(strstr(ans.mounts, GV_NODE_LIMITS_PATH));

    allocate(a, G0 "::4", NULL, &ans); /* nothing left: the served pod is not served again */
    assert_int_not_equal(ans.code, 0);
}

/* Two GPUs in one container, priority from the nvidia.com/priority resource. */
static void test_allocate_multi_gpu_priority_resource(void **state)
{
    struct gv_allocator *a = *state;
    json_t *pod = make_pod("multi", "v1;node=node1;main=" G0 ":1000:0," G1 ":1000:0",
                           "2026-01-01T00:00:01Z");
    json_t *main_c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
    json_object_del(main_c, "env");
    json_t *lim = json_object_get(json_object_get(main_c, "resources"), "limits");
    json_object_set_new(lim, "nvidia.com/gpu", json_string("2"));
    json_object_set_new(lim, "nvidia.com/priority", json_string("0"));
    json_t *pods = json_pack("[o]", pod);
    gv_allocator_set_pods(a, pods);
    json_decref(pods);
    struct answer ans;
    allocate(a, G0 "::1", G1 "::1", &ans);
    assert_int_equal(ans.code, 0);
    assert_non_null(strstr(ans.env, "NVIDIA_VISIBLE_DEVICES=" G0 "," G1 ";"));
    assert_non_null(strstr(ans.env, "CUDA_DEVICE_MEMORY_LIMIT_1=1000m;"));
    assert_non_null(strstr(ans.env, "CUDA_TASK_PRIORITY=0;"));
}

/* ---- answers per device, records, preferences (docs/node-agent.md "Allocate") ---- */

static V1beta1__ContainerAllocateResponse *alloc_raw(struct gv_allocator *a, const char *const *ids,
                                                     size_t n, int *code)
{
    V1beta1__ContainerAllocateResponse *r = malloc(sizeof(*r));
    assert_non_null(r);
    v1beta1__container_allocate_response__init(r);
    char msg[512];
    *code = gv_allocator_allocate(a, ids, n, r, msg, sizeof(msg));
    return r;
}

/* The kubelet passes on what the pod asked: a pod asking nvidia.com/gpu: 17
 * on a node advertising slices (8 GPUs x 10 slices: 80 IDs) makes one
 * Allocate of 17 IDs.  More than a container may hold, or none, or an ID we
 * never advertised (odd characters, a second "::", a bare ':', too long), is
 * refused before anything is looked up or written. */
static void test_allocate_refuses_bad_id_lists(void **state)
{
    struct gv_allocator *a = *state;
    const char *many[GV_ALLOC_MAX_DEVICES + 1];
    char slice[GV_ALLOC_MAX_DEVICES + 1][96];
    for (int i = 0; i <= GV_ALLOC_MAX_DEVICES; i++) {
        snprintf(slice[i], sizeof(slice[i]), "%s::%d", G0, i);
        many[i] = slice[i];
    }
    int code = 0;
    V1beta1__ContainerAllocateResponse *r = alloc_raw(a, many, GV_ALLOC_MAX_DEVICES + 1, &code);
    assert_int_equal(code, GV_GRPC_INVALID_ARGUMENT);
    assert_int_equal(r->n_envs, 0);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    r = alloc_raw(a, many, 0, &code);
    assert_int_equal(code, GV_GRPC_INVALID_ARGUMENT);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    char longid[96];
    snprintf(longid, sizeof(longid), "%s%s", G0, "-0123456789abcdef0123456789");
    const char *bad[] = {G0 "::1::2", G0 "::x", G0 ":1", G0 "::", G0 "\n", "../" G0, longid};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = alloc_raw(a, &bad[i], 1, &code);
        if (code != GV_GRPC_INVALID_ARGUMENT)
            fail_msg("ID '%s': code %d, expected INVALID_ARGUMENT", bad[i], code);
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
}

/* uids and container names become file names in the agent's state
 * directory: only what Kubernetes allows in them passes, every letter and
 * digit at the ends of its range included; nothing that climbs or nests. */
static void test_state_file_components(void **state)
{
    (void)state;
    static const char *const ok[] = {"a", "z", "A", "Z", "0", "9", "_", "-", "a.b",
                                     "0e8f4c1a-5b6d-4e2f-9a7b-3c2d1e0f9a8b", "main-ctr_2.x"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!safe_component(ok[i]))
            fail_msg("'%s' refused", ok[i]);
    char longest[129];
    memset(longest, 'a', 128);
    longest[128] = '\0';
    static const char *const bad[] = {"", ".", "..", "../x", "a/b", "/", "a b", "a\nb",
                                      "a\\b", "{", "`", "@", "[", "~", "a:b", "a*"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (safe_component(bad[i]))
            fail_msg("'%s' accepted", bad[i]);
    assert_false(safe_component(NULL));
    assert_false(safe_component(longest));
    longest[127] = '\0';
    assert_true(safe_component(longest));
}

static const char *env_of(const V1beta1__ContainerAllocateResponse *r, const char *key)
{
    for (size_t i = 0; i < r->n_envs; i++)
        if (strcmp(r->envs[i]->key, key) == 0)
            return r->envs[i]->value;
    return NULL;
}

static void free_resp(V1beta1__ContainerAllocateResponse *r)
{
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* A pod whose container "main" asks n GPUs (the rest of make_pod's shape). */
static json_t *pod_n(const char *name, const char *assignment, const char *at, const char *n)
{
    json_t *pod = make_pod(name, assignment, at);
    json_t *c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
    json_object_del(c, "env");
    json_object_set_new(json_object_get(json_object_get(c, "resources"), "limits"), "nvidia.com/gpu",
                        json_string(n));
    return pod;
}

static void set_fixed(struct gv_allocator *a, json_t *pods)
{
    gv_allocator_set_pods(a, pods);
    json_decref(pods);
}

/*
 * Per-device limits (planted bug 1 of issue 13: every index taking device
 * 0's memory): a 40 GiB and a 16 GiB card in one container at 50 % each
 * (what the scheduler writes for gpumem-percentage 50) give each index its
 * own limit.  SM limits round up (planted bug 4): 333 thousandths -> 34 %,
 * 1000 -> 100, and with different shares no container-wide SM limit.
 */
static void test_env_limits_per_device(void **state)
{
    struct gv_allocator *a = *state;
    set_fixed(a, json_pack("[o]", pod_n("mixed", "v1;node=node1;main=" G0 ":20480:333," G1 ":8192:1000",
                                        "2026-01-01T00:00:01Z", "2")));
    const char *ids[] = {G0 "::1", G1 "::1"};
    int code;
    V1beta1__ContainerAllocateResponse *r = alloc_raw(a, ids, 2, &code);
    assert_int_equal(code, 0);
    assert_string_equal(env_of(r, "CUDA_DEVICE_MEMORY_LIMIT_0"), "20480m");
    assert_string_equal(env_of(r, "CUDA_DEVICE_MEMORY_LIMIT_1"), "8192m");
    assert_string_equal(env_of(r, "CUDA_DEVICE_SM_LIMIT_0"), "34");
    assert_string_equal(env_of(r, "CUDA_DEVICE_SM_LIMIT_1"), "100");
    assert_null(env_of(r, "CUDA_DEVICE_SM_LIMIT"));
    free_resp(r);
    /* the limits file says the same */
    char path[512], buf[2048] = "";
    snprintf(path, sizeof(path), "%s/limits/mixed/main/limits.env", scratch);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    buf[fread(buf, 1, sizeof(buf) - 1, f)] = '\0';
    fclose(f);
    assert_non_null(strstr(buf, "CUDA_DEVICE_MEMORY_LIMIT_0=20480m\n"));
    assert_non_null(strstr(buf, "CUDA_DEVICE_MEMORY_LIMIT_1=8192m\n"));
    assert_non_null(strstr(buf, "CUDA_DEVICE_SM_LIMIT_0=34\n"));

    /* one share on every GPU, not a multiple of 10: the container-wide limit rounds up too */
    set_fixed(a, json_pack("[o]", pod_n("odd", "v1;node=node1;main=" G0 ":100:251," G1 ":300:251",
                                        "2026-01-01T00:00:02Z", "2")));
    const char *ids2[] = {G0 "::2", G1 "::2"};
    r = alloc_raw(a, ids2, 2, &code);
    assert_int_equal(code, 0);
    assert_string_equal(env_of(r, "CUDA_DEVICE_SM_LIMIT_0"), "26");
    assert_string_equal(env_of(r, "CUDA_DEVICE_SM_LIMIT_1"), "26");
    assert_string_equal(env_of(r, "CUDA_DEVICE_SM_LIMIT"), "26");
    assert_string_equal(env_of(r, "CUDA_DEVICE_MEMORY_LIMIT_0"), "100m");
    assert_string_equal(env_of(r, "CUDA_DEVICE_MEMORY_LIMIT_1"), "300m");
    free_resp(r);
}

/* Whether dir a is b or an ancestor of b (paths without trailing slashes). */
static bool dir_covers(const char *a, const char *b)
{
    size_t n = strlen(a);
    return strncmp(a, b, n) == 0 && (b[n] == '\0' || b[n] == '/');
}

/*
 * Issue 14 item 2: no writable mount reaches the limits file's host
 * directory, one of its parents or one of its children.
 */
static void test_limits_file_not_writable(void **state)
{
    struct gv_allocator *a = *state;
    set_fixed(a, json_pack("[o]", pod_n("ro", "v1;node=node1;main=" G0 ":100:0", "2026-01-01T00:00:01Z",
                                        "1")));
    const char *ids[] = {G0 "::3"};
    int code;
    V1beta1__ContainerAllocateResponse *r = alloc_raw(a, ids, 1, &code);
    assert_int_equal(code, 0);
    char limits_dir[4096] = "";
    size_t writable = 0;
    for (size_t i = 0; i < r->n_mounts; i++)
        if (strcmp(r->mounts[i]->container_path, GV_NODE_LIMITS_PATH) == 0) {
            assert_true(r->mounts[i]->read_only);
            snprintf(limits_dir, sizeof(limits_dir), "%s", r->mounts[i]->host_path);
            *strrchr(limits_dir, '/') = '\0';
        }
    assert_true(limits_dir[0] != '\0');
    for (size_t i = 0; i < r->n_mounts; i++) {
        if (r->mounts[i]->read_only)
            continue;
        writable++;
        const char *h = r->mounts[i]->host_path;
        assert_false(dir_covers(h, limits_dir)); /* the directory itself or a parent */
        assert_false(dir_covers(limits_dir, h)); /* a child */
    }
    /* the runtime dir, the region file mounted on its own (it cannot be
     * unlinked inside the container) and the node priority dir */
    assert_int_equal(writable, 3);
    free_resp(r);
}

/*
 * A repeated request (the reply was lost: agent or kubelet restarted) gets
 * the same answer, also from a new allocator on the same state directory
 * (the agent restarted); other IDs do not get it.
 */
static void test_repeat_gets_same_answer(void **state)
{
    struct gv_allocator *a = *state;
    json_t *pods = json_pack("[o,o]", pod_n("one", "v1;node=node1;main=" G0 ":1234:0", "2026-01-01T00:00:01Z", "1"),
                             pod_n("two", "v1;node=node1;main=" G1 ":777:0", "2026-01-01T00:00:02Z", "1"));
    gv_allocator_set_pods(a, pods);
    const char *ids[] = {G0 "::7"};
    int code;
    V1beta1__ContainerAllocateResponse *r1 = alloc_raw(a, ids, 1, &code);
    assert_int_equal(code, 0);
    V1beta1__ContainerAllocateResponse *r2 = alloc_raw(a, ids, 1, &code);
    assert_int_equal(code, 0);
    size_t n1 = v1beta1__container_allocate_response__get_packed_size(r1);
    uint8_t b1[4096], b2[4096];
    assert_true(n1 < sizeof(b1));
    v1beta1__container_allocate_response__pack(r1, b1);
    assert_int_equal(v1beta1__container_allocate_response__get_packed_size(r2), n1);
    v1beta1__container_allocate_response__pack(r2, b2);
    assert_memory_equal(b1, b2, n1);
    assert_string_equal(env_of(r2, "CUDA_DEVICE_MEMORY_LIMIT_0"), "1234m");
    free_resp(r1);
    free_resp(r2);
    struct gv_allocator_stats st;
    gv_allocator_get_stats(a, &st);
    assert_int_equal(st.answered, 1);
    assert_int_equal(st.replays, 1);

    /* the agent restarts: a new allocator on the same directory */
    gv_allocator_free(a);
    struct gv_allocator_config cfg = {.node = "node1", .state_dir = scratch,
                                      .install_dir = "/usr/local/gpuvisor", .wait_ms = 1};
    struct gv_node_config *nc;
    assert_int_equal(gv_allocator_new(&cfg, NULL, NULL, &a, NULL), GV_OK);
    *state = a;
    assert_int_equal(gv_node_config_default(&nc, NULL), GV_OK);
    struct gv_allocator_gpu g[2] = {0};
    const char *uuids[2] = {G0, G1};
    for (int i = 0; i < 2; i++) {
        snprintf(g[i].gpu.uuid, sizeof(g[i].gpu.uuid), "%s", uuids[i]);
        g[i].gpu.healthy = true;
        g[i].settings = nc->defaults;
    }
    assert_int_equal(gv_allocator_set_gpus(a, nc, g, 2, NULL), GV_OK);
    gv_node_config_free(nc);
    gv_allocator_set_pods(a, pods);
    json_decref(pods);
    r1 = alloc_raw(a, ids, 1, &code); /* the same request after the restart */
    assert_int_equal(code, 0);
    assert_int_equal(v1beta1__container_allocate_response__get_packed_size(r1), n1);
    v1beta1__container_allocate_response__pack(r1, b2);
    assert_memory_equal(b1, b2, n1);
    free_resp(r1);
    const char *other[] = {G1 "::7"};
    r1 = alloc_raw(a, other, 1, &code); /* other IDs: the next pod, not pod one again */
    assert_int_equal(code, 0);
    assert_string_equal(env_of(r1, "CUDA_DEVICE_MEMORY_LIMIT_0"), "777m");
    free_resp(r1);
    const char *third[] = {G0 "::8"};
    r1 = alloc_raw(a, third, 1, &code); /* nothing pending, no record of these IDs */
    assert_int_not_equal(code, 0);
    free_resp(r1);
}

/*
 * GetPreferredAllocation comes from the pending assignments, oldest first,
 * one promise per container; Allocate with promised IDs is matched to the
 * container they were promised to even out of order.  A kubelet that
 * ignores the preference still gets the assigned GPU, and the mismatch is
 * counted.
 */
static void test_prefer_then_allocate(void **state)
{
    struct gv_allocator *a = *state;
    set_fixed(a, json_pack("[o,o,o]",
                           pod_n("p1", "v1;node=node1;main=" G1 ":111:0", "2026-01-01T00:00:01Z", "1"),
                           pod_n("p2", "v1;node=node1;main=" G0 ":222:0", "2026-01-01T00:00:02Z", "1"),
                           pod_n("p3", "v1;node=node1;main=" G1 ":333:0", "2026-01-01T00:00:03Z", "1")));
    const char *avail[] = {G0 "::0", G0 "::1", G1 "::0", G1 "::1"};
    const char *out[4];
    size_t n;
    assert_true(gv_allocator_prefer(a, avail, 4, NULL, 0, 1, out, &n));
    assert_int_equal(n, 1);
    assert_string_equal(out[0], G1 "::0"); /* p1, the oldest */
    const char *p1 = out[0];
    assert_true(gv_allocator_prefer(a, avail, 4, NULL, 0, 1, out, &n));
    assert_string_equal(out[0], G0 "::0"); /* p2: p1 is promised */
    const char *p2 = out[0];
    assert_true(gv_allocator_prefer(a, avail, 4, NULL, 0, 1, out, &n));
    assert_string_equal(out[0], G1 "::1"); /* p3: same GPU as p1, another device */
    /* a two-GPU request: nobody asks two */
    assert_false(gv_allocator_prefer(a, avail, 4, NULL, 0, 2, out, &n));

    int code;
    V1beta1__ContainerAllocateResponse *r = alloc_raw(a, &p2, 1, &code); /* out of order */
    assert_int_equal(code, 0);
    assert_string_equal(env_of(r, "CUDA_DEVICE_MEMORY_LIMIT_0"), "222m");
    free_resp(r);
    r = alloc_raw(a, &p1, 1, &code);
    assert_int_equal(code, 0);
    assert_string_equal(env_of(r, "CUDA_DEVICE_MEMORY_LIMIT_0"), "111m");
    free_resp(r);
    /* p3's kubelet ignores the preference and hands a device of GPU 0 */
    const char *wrong = G0 "::1";
    r = alloc_raw(a, &wrong, 1, &code);
    assert_int_equal(code, 0);
    assert_string_equal(env_of(r, "NVIDIA_VISIBLE_DEVICES"), G1);
    assert_string_equal(env_of(r, "CUDA_DEVICE_MEMORY_LIMIT_0"), "333m");
    free_resp(r);
    struct gv_allocator_stats st;
    gv_allocator_get_stats(a, &st);
    assert_int_equal(st.preferred, 3);
    assert_int_equal(st.preferred_generic, 1);
    assert_int_equal(st.by_promise, 2);
    assert_int_equal(st.id_mismatches, 1);
    assert_int_equal(st.answered, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pending_pod_keeps_what_allocate_reads),
        cmocka_unit_test(test_order_key_fallback),
        cmocka_unit_test(test_state_file_components),
        cmocka_unit_test(test_other_pods_keep_identity),
        cmocka_unit_test_setup_teardown(test_allocate_from_trimmed_pods, setup_alloc, teardown_alloc),
        cmocka_unit_test_setup_teardown(test_allocate_multi_gpu_priority_resource, setup_alloc,
                                        teardown_alloc),
        cmocka_unit_test_setup_teardown(test_env_limits_per_device, setup_alloc, teardown_alloc),
        cmocka_unit_test_setup_teardown(test_limits_file_not_writable, setup_alloc, teardown_alloc),
        cmocka_unit_test_setup_teardown(test_repeat_gets_same_answer, setup_alloc, teardown_alloc),
        cmocka_unit_test_setup_teardown(test_prefer_then_allocate, setup_alloc, teardown_alloc),
        cmocka_unit_test_setup_teardown(test_allocate_refuses_bad_id_lists, setup_alloc, teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
