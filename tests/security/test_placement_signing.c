/*
 * Placements only from gpuvisor (issue 14, docs/isolation.md): the HMAC
 * codec (contracts/placement.h) and the node agent's Allocate refusing
 * forged, altered or moved placements and opt-outs outside the admin's
 * namespaces.  The allocator runs without an API server, on a fixed pod
 * list, as in tests/node/test_node_podcache.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "contracts/placement.h"
#include "deviceplugin.pb-c.h"
#include "node/allocate/gv_allocator.h"

#define G0 "GPU-11111111-2222-4333-8444-000000000000"
#define KEY_A "key-a-0123456789abcdef0123456789abcdef"
#define KEY_B "key-b-0123456789abcdef0123456789abcdef"
#define AT "2026-11-26T06:00:00.000000Z"

static struct gv_placement_key *key_of(const char *text)
{
    struct gv_placement_key *k = NULL;
    struct gv_error err = {0};
    if (gv_placement_key_parse(text, strlen(text), &k, &err) != GV_OK)
        fail_msg("key: %s", err.msg);
    return k;
}

static json_t *pod_of(const char *uid, const char *ns, const char *assignment)
{
    return json_pack("{s:{s:s,s:s,s:s,s:{s:s,s:s,s:s}},s:{s:s,s:[{s:s,s:{s:{s:s}}}]},s:{s:s}}",
                     "metadata", "uid", uid, "name", uid, "namespace", ns, "annotations",
                     "gpuvisor.io/assignment", assignment, "gpuvisor.io/assigned-node", "node1",
                     "gpuvisor.io/assigned-at", AT, "spec", "nodeName", "node1", "containers",
                     "name", "main", "resources", "limits", "nvidia.com/gpu", "1", "status",
                     "phase", "Pending");
}

static void set_ann(json_t *pod, const char *k, const char *v)
{
    json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"), k,
                        json_string(v));
}

static void sign(const struct gv_placement_key *k, json_t *pod)
{
    char sig[GV_PLACEMENT_SIG_MAX];
    json_t *a = json_object_get(json_object_get(pod, "metadata"), "annotations");
    struct gv_error err = {0};
    assert_int_equal(
        gv_placement_sign(k, json_string_value(json_object_get(json_object_get(pod, "metadata"),
                                                               "uid")),
                          json_string_value(json_object_get(a, "gpuvisor.io/assigned-node")),
                          json_string_value(json_object_get(a, "gpuvisor.io/assigned-at")),
                          json_string_value(json_object_get(a, "gpuvisor.io/assignment")), sig,
                          sizeof(sig), &err),
        GV_OK);
    set_ann(pod, GV_PLACEMENT_SIG_ANNOTATION, sig);
}

/* ---- the codec ---------------------------------------------------------- */

static void test_key_file_rules(void **state)
{
    (void)state;
    struct gv_placement_key *k = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_placement_key_parse("short\n", 6, &k, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "at least 32"));
    assert_int_equal(gv_placement_key_parse("# only a comment\n\n", 18, &k, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "empty"));
    assert_null(k);
    const char two[] = "  " KEY_A "  \r\n \t \r\n# old one, verify only\n" KEY_B "\n";
    assert_int_equal(gv_placement_key_parse(two, strlen(two), &k, &err), GV_OK);
    gv_placement_key_free(k);
    assert_int_equal(gv_placement_key_load("/nonexistent/gpuvisor.key", &k, &err), GV_EIO);
}

static void test_sign_verify_and_tamper(void **state)
{
    (void)state;
    struct gv_placement_key *a = key_of(KEY_A), *b = key_of(KEY_B),
                            *rotated = key_of(KEY_B "\n" KEY_A "\n");
    json_t *pod = pod_of("uid-1", "tenant", "v1;node=node1;main=" G0 ":500:100");
    struct gv_error err = {0};
    assert_int_equal(gv_placement_verify_pod(a, pod, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "not signed"));
    sign(a, pod);
    /* Known answer, computed independently (Python hmac, the message layout
     * of placement.c): the format is a contract, not an implementation detail. */
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_object_get(pod, "metadata"),
                                                          "annotations"),
                                          GV_PLACEMENT_SIG_ANNOTATION)),
        "v1.969e28c6918a61b096ff14711b983bc1b2119aaa1e14c5eb7c26c5f066084571");
    assert_int_equal(gv_placement_verify_pod(a, pod, &err), GV_OK);
    assert_int_equal(gv_placement_verify_pod(rotated, pod, &err), GV_OK); /* old key still verifies */
    assert_int_equal(gv_placement_verify_pod(b, pod, &err), GV_EINVAL);   /* another key */
    /* Each signed field, altered alone, breaks the signature. */
    static const char *const fields[][2] = {
        {"gpuvisor.io/assignment", "v1;node=node1;main=" G0 ":0:0"},
        {"gpuvisor.io/assigned-node", "node2"},
        {"gpuvisor.io/assigned-at", "2099-01-01T00:00:00.000000Z"},
    };
    for (size_t i = 0; i < 3; i++) {
        json_t *t = json_deep_copy(pod);
        set_ann(t, fields[i][0], fields[i][1]);
        assert_int_equal(gv_placement_verify_pod(a, t, &err), GV_EINVAL);
        assert_non_null(strstr(err.msg, "does not match"));
        json_decref(t);
    }
    json_t *moved = json_deep_copy(pod); /* the signature copied onto another pod */
    json_object_set_new(json_object_get(moved, "metadata"), "uid", json_string("uid-2"));
    assert_int_equal(gv_placement_verify_pod(a, moved, &err), GV_EINVAL);
    json_t *odd = json_deep_copy(pod);
    set_ann(odd, GV_PLACEMENT_SIG_ANNOTATION, "v2.00");
    assert_int_equal(gv_placement_verify_pod(a, odd, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "unknown format"));
    json_decref(odd);
    json_decref(moved);
    json_decref(pod);
    gv_placement_key_free(a);
    gv_placement_key_free(b);
    gv_placement_key_free(rotated);
}

/* The one rule every key holder applies (gv_placement_check_pod: the
 * scheduler's accounting and kubectl gpuvisor): a signature that verifies,
 * or, inside the upgrade window, none at all on a pod the API server
 * created before the cutoff; never a wrong signature, whatever its age. */
static void test_check_pod_rule(void **state)
{
    (void)state;
    struct gv_placement_key *a = key_of(KEY_A), *b = key_of(KEY_B);
    time_t cutoff = 1764151200; /* 2025-11-26T10:00:00Z */
    json_t *pod = pod_of("uid-1", "tenant", "v1;node=node1;main=" G0 ":500:100");
    json_t *md = json_object_get(pod, "metadata");
    struct gv_error err = {0};
    json_object_set_new(md, "creationTimestamp", json_string("2025-11-26T09:59:59Z"));
    assert_int_equal(gv_placement_check_pod(a, 0, pod, &err), GV_EINVAL); /* no window */
    assert_non_null(strstr(err.msg, "not signed"));
    assert_int_equal(gv_placement_check_pod(a, cutoff, pod, &err), GV_OK);
    json_object_set_new(md, "creationTimestamp", json_string("2025-11-26T10:00:00Z"));
    assert_int_equal(gv_placement_check_pod(a, cutoff, pod, &err), GV_EINVAL); /* at the cutoff */
    json_object_set_new(md, "creationTimestamp", json_string("2025-11-26T09:00:00+02:00"));
    assert_int_equal(gv_placement_check_pod(a, cutoff, pod, &err), GV_EINVAL); /* not the API's form */
    json_object_set_new(md, "creationTimestamp", json_string("2025-11-26T09:00:00.5Z"));
    assert_int_equal(gv_placement_check_pod(a, cutoff, pod, &err), GV_OK);
    sign(b, pod); /* old enough, but signed with a key that is not ours */
    assert_int_equal(gv_placement_check_pod(a, cutoff, pod, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "does not match"));
    assert_int_equal(gv_placement_check_pod(b, 0, pod, &err), GV_OK);
    json_decref(pod);
    gv_placement_key_free(a);
    gv_placement_key_free(b);
}

/* Every hex digit of the MAC counts: each of the 64, changed alone (to
 * each of the other 15 hex digits), is refused.  A compare that checks
 * part of the MAC (mutants placement-sig-half, placement-sig-last-digit)
 * lets a forger search the rest. */
static void test_every_mac_digit_is_checked(void **state)
{
    (void)state;
    struct gv_placement_key *a = key_of(KEY_A);
    json_t *pod = pod_of("uid-1", "tenant", "v1;node=node1;main=" G0 ":500:100");
    sign(a, pod);
    const char *good = json_string_value(json_object_get(
        json_object_get(json_object_get(pod, "metadata"), "annotations"),
        GV_PLACEMENT_SIG_ANNOTATION));
    char sig[GV_PLACEMENT_SIG_MAX];
    snprintf(sig, sizeof(sig), "%s", good);
    assert_int_equal(strlen(sig), 3 + 64);
    static const char digits[] = "0123456789abcdef";
    struct gv_error err = {0};
    unsigned refused = 0, tried = 0;
    for (size_t j = 3; j < 3 + 64; j++) {
        for (const char *d = digits; *d; d++) {
            if (*d == good[j])
                continue;
            json_t *t = json_deep_copy(pod);
            sig[j] = *d;
            set_ann(t, GV_PLACEMENT_SIG_ANNOTATION, sig);
            tried++;
            if (gv_placement_verify_pod(a, t, &err) == GV_EINVAL)
                refused++;
            else
                print_message("# digit %zu changed to %c: accepted\n", j - 3, *d);
            json_decref(t);
        }
        sig[j] = good[j];
    }
    assert_int_equal(tried, 64 * 15);
    assert_int_equal(refused, tried);
    json_decref(pod);
    gv_placement_key_free(a);
}

/* The codec's refusals, each on its own: a key of fewer than 32 bytes, a
 * file's errors naming the file, signing without a key or with an empty
 * field, a signature with anything after its 64 digits or one digit short,
 * and hold signatures (their own domain: never a placement, nor the
 * reverse), refused when unsigned, incomplete or altered. */
static void test_codec_refusals(void **state)
{
    (void)state;
    struct gv_placement_key *k = NULL;
    struct gv_error err = {0};
    char key32[33], key31[32];
    memset(key32, 'k', 32);
    key32[32] = '\0';
    memset(key31, 'k', 31);
    key31[31] = '\0';
    assert_int_equal(gv_placement_key_parse(key32, 32, &k, &err), GV_OK);
    gv_placement_key_free(k);
    k = NULL;
    assert_int_equal(gv_placement_key_parse(key31, 31, &k, &err), GV_EINVAL);
    assert_null(k);
    gv_placement_key_free(NULL);

    char path[] = "/tmp/gv-test-key-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "short\n", 6), 6);
    close(fd);
    assert_int_equal(gv_placement_key_load(path, &k, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "at least 32"));
    unlink(path);

    struct gv_placement_key *a = key_of(KEY_A);
    char sig[GV_PLACEMENT_SIG_MAX], hold[GV_PLACEMENT_SIG_MAX];
    const char *asg = "v1;node=node1;main=" G0 ":500:100";
    assert_int_equal(gv_placement_sign(NULL, "uid-1", "node1", AT, asg, sig, sizeof(sig), &err),
                     GV_EINVAL);
    assert_non_null(strstr(err.msg, "no placement key"));
    static const char *const four[4] = {"uid-1", "node1", AT, "v1;node=node1;main=" G0 ":500:100"};
    for (int i = 0; i < 4; i++) {
        const char *f[4] = {four[0], four[1], four[2], four[3]};
        f[i] = "";
        assert_int_equal(gv_placement_sign(a, f[0], f[1], f[2], f[3], sig, sizeof(sig), &err),
                         GV_EINVAL);
        assert_non_null(strstr(err.msg, "empty field"));
        assert_int_equal(gv_hold_sign(a, f[0], f[1], f[2], f[3], hold, sizeof(hold), &err),
                         GV_EINVAL);
    }
    assert_int_equal(gv_placement_sign(a, "uid-1", "node1", AT, asg, sig, 8, &err), GV_ERANGE);

    json_t *pod = pod_of("uid-1", "tenant", asg);
    sign(a, pod);
    assert_int_equal(gv_placement_verify_pod(NULL, pod, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "no placement key"));
    snprintf(sig, sizeof(sig), "%s",
             json_string_value(json_object_get(json_object_get(json_object_get(pod, "metadata"),
                                                               "annotations"),
                                               GV_PLACEMENT_SIG_ANNOTATION)));
    char longer[GV_PLACEMENT_SIG_MAX + 2];
    snprintf(longer, sizeof(longer), "%s0", sig);
    set_ann(pod, GV_PLACEMENT_SIG_ANNOTATION, longer);
    assert_int_equal(gv_placement_verify_pod(a, pod, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "unknown format"));
    sig[strlen(sig) - 1] = '\0';
    set_ann(pod, GV_PLACEMENT_SIG_ANNOTATION, sig);
    assert_int_equal(gv_placement_verify_pod(a, pod, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "unknown format"));
    json_decref(pod);

    const char *until = "2026-11-26T06:05:00.000000Z";
    assert_int_equal(gv_hold_sign(a, "uid-1", "node1", until, asg, hold, sizeof(hold), &err), GV_OK);
    assert_int_equal(gv_hold_verify(a, "uid-1", "node1", until, asg, hold, &err), GV_OK);
    assert_int_equal(gv_hold_verify(NULL, "uid-1", "node1", until, asg, hold, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "no placement key"));
    assert_int_equal(gv_hold_verify(a, "uid-1", "node1", until, asg, NULL, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "not signed"));
    for (int i = 0; i < 4; i++) {
        const char *f[4] = {"uid-1", "node1", until, asg};
        f[i] = i % 2 ? "" : NULL;
        assert_int_equal(gv_hold_verify(a, f[0], f[1], f[2], f[3], hold, &err), GV_EINVAL);
        assert_non_null(strstr(err.msg, "incomplete"));
    }
    assert_int_equal(gv_hold_verify(a, "uid-1", "node1", "2099-01-01T00:00:00.000000Z", asg, hold,
                                    &err),
                     GV_EINVAL);
    assert_non_null(strstr(err.msg, "does not match"));
    /* Domain separation: the same four fields signed as a placement never
     * pass as a hold, nor the reverse. */
    assert_int_equal(gv_placement_sign(a, "uid-1", "node1", until, asg, sig, sizeof(sig), &err),
                     GV_OK);
    assert_int_equal(gv_hold_verify(a, "uid-1", "node1", until, asg, sig, &err), GV_EINVAL);
    json_t *p2 = pod_of("uid-1", "tenant", asg);
    set_ann(p2, "gpuvisor.io/assigned-at", until);
    set_ann(p2, GV_PLACEMENT_SIG_ANNOTATION, hold);
    assert_int_equal(gv_placement_verify_pod(a, p2, &err), GV_EINVAL);
    set_ann(p2, GV_PLACEMENT_SIG_ANNOTATION, sig);
    assert_int_equal(gv_placement_verify_pod(a, p2, &err), GV_OK);
    json_decref(p2);
    gv_placement_key_free(a);
}

/* ---- the node agent's Allocate ---------------------------------------------- */

static char scratch[] = "/tmp/gv-test-sign-XXXXXX";
static struct gv_placement_key *node_key;
static const char *const opt_out_ns[] = {"ml-admin", NULL};
static struct gv_placement_policy policy;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static struct gv_allocator *new_allocator(const struct gv_placement_policy *pol)
{
    struct gv_allocator_config cfg = {.node = "node1", .state_dir = scratch,
                                      .install_dir = "/usr/local/gpuvisor", .wait_ms = 1,
                                      .placement = pol};
    struct gv_allocator *a = NULL;
    struct gv_node_config *nc = NULL;
    assert_int_equal(gv_allocator_new(&cfg, NULL, NULL, &a, NULL), GV_OK);
    assert_int_equal(gv_node_config_default(&nc, NULL), GV_OK);
    struct gv_allocator_gpu g = {0};
    snprintf(g.gpu.uuid, sizeof(g.gpu.uuid), "%s", G0);
    g.gpu.healthy = true;
    g.gpu.numa = -1;
    g.settings = nc->defaults;
    assert_int_equal(gv_allocator_set_gpus(a, nc, &g, 1, NULL), GV_OK);
    gv_node_config_free(nc);
    return a;
}

static int setup(void **state)
{
    (void)state;
    gv_log_set_level(GV_LOG_ERROR);
    memcpy(scratch + strlen(scratch) - 6, "XXXXXX", 6);
    if (mkdtemp(scratch) == NULL)
        return -1;
    node_key = key_of(KEY_A);
    policy = (struct gv_placement_policy){.key = node_key, .opt_out_namespaces = opt_out_ns};
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    gv_placement_key_free(node_key);
    return nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

struct answer {
    int code;
    char msg[512];
    V1beta1__ContainerAllocateResponse *r;
};

/* Allocate of one GPU with only pod in the cache; answer_free() after. */
static void allocate_one(const struct gv_placement_policy *pol, json_t *pod, struct answer *ans)
{
    struct gv_allocator *a = new_allocator(pol);
    json_t *pods = json_pack("[O]", pod);
    gv_allocator_set_pods(a, pods);
    json_decref(pods);
    const char *ids[1] = {G0 "::1"};
    memset(ans, 0, sizeof(*ans));
    ans->r = malloc(sizeof(*ans->r));
    assert_non_null(ans->r);
    v1beta1__container_allocate_response__init(ans->r);
    ans->code = gv_allocator_allocate(a, ids, 1, ans->r, ans->msg, sizeof(ans->msg));
    gv_allocator_free(a);
}

static void answer_free(struct answer *ans)
{
    protobuf_c_message_free_unpacked(&ans->r->base, NULL);
    ans->r = NULL;
}

/* The answer's value of env key, or NULL. */
static const char *env_of(const struct answer *ans, const char *key)
{
    for (size_t i = 0; i < ans->r->n_envs; i++)
        if (strcmp(ans->r->envs[i]->key, key) == 0)
            return ans->r->envs[i]->value;
    return NULL;
}

static bool mounts_at(const struct answer *ans, const char *container_path)
{
    for (size_t i = 0; i < ans->r->n_mounts; i++)
        if (strcmp(ans->r->mounts[i]->container_path, container_path) == 0)
            return true;
    return false;
}

static void test_allocate_serves_signed_placement(void **state)
{
    (void)state;
    json_t *pod = pod_of("ok-1", "tenant", "v1;node=node1;main=" G0 ":500:100");
    sign(node_key, pod);
    struct answer ans;
    allocate_one(&policy, pod, &ans);
    assert_int_equal(ans.code, 0);
    assert_string_equal(env_of(&ans, "CUDA_DEVICE_MEMORY_LIMIT_0"), "500m");
    assert_true(mounts_at(&ans, GV_NODE_PRELOAD_PATH));
    answer_free(&ans);
    json_decref(pod);
}

static void test_allocate_refuses_forged_altered_moved(void **state)
{
    (void)state;
    struct answer ans;
    /* Forged: the tenant wrote an unsigned assignment (or a made-up signature). */
    json_t *forged = pod_of("forged-1", "tenant", "v1;node=node1;main=" G0 ":0:0");
    allocate_one(&policy, forged, &ans);
    assert_int_not_equal(ans.code, 0);
    assert_non_null(strstr(ans.msg, "not signed"));
    assert_null(env_of(&ans, "NVIDIA_VISIBLE_DEVICES"));
    answer_free(&ans);
    set_ann(forged, GV_PLACEMENT_SIG_ANNOTATION,
            "v1.0000000000000000000000000000000000000000000000000000000000000000");
    json_object_set_new(json_object_get(forged, "metadata"), "uid", json_string("forged-2"));
    allocate_one(&policy, forged, &ans);
    assert_int_not_equal(ans.code, 0);
    assert_non_null(strstr(ans.msg, "does not match"));
    answer_free(&ans);
    /* Altered: signed for 500 MiB, patched by the tenant to 0 (no memory limit). */
    json_t *altered = pod_of("altered-1", "tenant", "v1;node=node1;main=" G0 ":500:100");
    sign(node_key, altered);
    set_ann(altered, "gpuvisor.io/assignment", "v1;node=node1;main=" G0 ":0:0");
    allocate_one(&policy, altered, &ans);
    assert_int_not_equal(ans.code, 0);
    assert_non_null(strstr(ans.msg, "does not match"));
    answer_free(&ans);
    /* Moved: a real signature copied onto another pod. */
    json_t *moved = json_deep_copy(altered);
    set_ann(moved, "gpuvisor.io/assignment", "v1;node=node1;main=" G0 ":500:100");
    json_object_set_new(json_object_get(moved, "metadata"), "uid", json_string("moved-1"));
    allocate_one(&policy, moved, &ans);
    assert_int_not_equal(ans.code, 0);
    answer_free(&ans);
    /* Without a policy (what an agent before issue 14 did, and what
     * --insecure-unsigned-placements does) the forged pod is served
     * without a memory limit: the attack the signature stops. */
    json_object_set_new(json_object_get(forged, "metadata"), "uid", json_string("forged-3"));
    allocate_one(NULL, forged, &ans);
    assert_int_equal(ans.code, 0);
    assert_null(env_of(&ans, "CUDA_DEVICE_MEMORY_LIMIT_0"));
    answer_free(&ans);
    json_decref(moved);
    json_decref(altered);
    json_decref(forged);
}

static void test_preload_opt_out_only_where_listed(void **state)
{
    (void)state;
    struct answer ans;
    json_t *pod = pod_of("optout-1", "tenant", "v1;node=node1;main=" G0 ":500:100");
    set_ann(pod, "gpuvisor.io/preload", "false");
    sign(node_key, pod);
    allocate_one(&policy, pod, &ans);
    assert_int_not_equal(ans.code, 0);
    assert_non_null(strstr(ans.msg, "preloadOptOutNamespaces (namespace tenant is not)"));
    answer_free(&ans);
    json_t *admin = pod_of("optout-2", "ml-admin", "v1;node=node1;main=" G0 ":500:100");
    set_ann(admin, "gpuvisor.io/preload", "false");
    sign(node_key, admin);
    allocate_one(&policy, admin, &ans);
    assert_int_equal(ans.code, 0);
    assert_false(mounts_at(&ans, GV_NODE_PRELOAD_PATH));
    answer_free(&ans);
    json_decref(admin);
    json_decref(pod);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_file_rules),
        cmocka_unit_test(test_sign_verify_and_tamper),
        cmocka_unit_test(test_every_mac_digit_is_checked),
        cmocka_unit_test(test_check_pod_rule),
        cmocka_unit_test(test_codec_refusals),
        cmocka_unit_test(test_allocate_serves_signed_placement),
        cmocka_unit_test(test_allocate_refuses_forged_altered_moved),
        cmocka_unit_test(test_preload_opt_out_only_where_listed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
