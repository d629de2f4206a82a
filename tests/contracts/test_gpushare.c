/*
 * Aliyun gpushare's container environment (src/contracts/gpushare.c): the
 * values a container gets, which containers get none, and sums a tenant's
 * pod spec can make as large as it likes (saturated, never wrapped: signed
 * overflow is undefined behaviour, and a sanitizer build stops on it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "contracts/gpushare.h"

static json_t *pod_of(const char *containers)
{
    char text[2048];
    snprintf(text, sizeof(text), "{\"spec\": {\"containers\": %s}}", containers);
    json_error_t e;
    json_t *p = json_loads(text, 0, &e);
    if (p == NULL)
        fail_msg("bad pod JSON: %s", e.text);
    return p;
}

static const char *value_of(const struct gv_gpushare_env *env, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(env[i].key, key) == 0)
            return env[i].value;
    return "(absent)";
}

#define MEM(x) "{\"aliyun.com/gpu-mem\": " x "}"

static void test_values_and_who_gets_none(void **state)
{
    (void)state;
    json_t *pod = pod_of("[{\"name\": \"a\", \"resources\": {\"limits\": " MEM("\"2\"") "}},"
                         " {\"name\": \"b\", \"resources\": {\"limits\": " MEM("3") "}},"
                         " {\"name\": \"c\", \"resources\": {\"requests\": " MEM("\"1\"") "}},"
                         " {\"name\": \"d\", \"resources\": {\"limits\": " MEM("\"1Gi\"") "}},"
                         " {\"name\": \"e\", \"resources\": {\"limits\": " MEM("-4") "}},"
                         " {\"name\": \"f\"}]");
    struct gv_gpushare_env env[GV_GPUSHARE_ENV_COUNT];
    unsigned idx[] = {3, 5};
    size_t n = gv_gpushare_env(pod, "b", idx, 2, 16384, env);
    assert_int_equal(n, GV_GPUSHARE_ENV_COUNT);
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_IDX"), "3,5");
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_DEV"), "16");
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_CONTAINER"), "3");
    /* a, b and c (requests when no limit); not "1Gi", not a negative one */
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_POD"), "6");
    n = gv_gpushare_env(pod, "c", idx, 1, 16384, env);
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_CONTAINER"), "1");
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_IDX"), "3");
    /* no whole, positive gpu-mem, no GPU, no such container: no environment */
    assert_int_equal(gv_gpushare_env(pod, "d", idx, 1, 16384, env), 0);
    assert_int_equal(gv_gpushare_env(pod, "e", idx, 1, 16384, env), 0);
    assert_int_equal(gv_gpushare_env(pod, "f", idx, 1, 16384, env), 0);
    assert_int_equal(gv_gpushare_env(pod, "a", idx, 0, 16384, env), 0);
    assert_int_equal(gv_gpushare_env(pod, "zz", idx, 1, 16384, env), 0);
    json_decref(pod);
}

static void test_huge_sums_saturate(void **state)
{
    (void)state;
    json_t *pod = pod_of("[{\"name\": \"a\", \"resources\": {\"limits\": "
                         MEM("\"9223372036854775807\"") "}},"
                         " {\"name\": \"b\", \"resources\": {\"limits\": "
                         MEM("9223372036854775807") "}},"
                         " {\"name\": \"c\", \"resources\": {\"limits\": " MEM("5") "}}]");
    struct gv_gpushare_env env[GV_GPUSHARE_ENV_COUNT];
    unsigned idx[] = {0};
    size_t n = gv_gpushare_env(pod, "c", idx, 1, 1024, env);
    assert_int_equal(n, GV_GPUSHARE_ENV_COUNT);
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_POD"), "9223372036854775807");
    assert_string_equal(value_of(env, n, "ALIYUN_COM_GPU_MEM_CONTAINER"), "5");
    json_decref(pod);
}

/* Many GPUs: the index list stops whole, within its room. */
static void test_many_indexes_fit(void **state)
{
    (void)state;
    json_t *pod = pod_of("[{\"name\": \"a\", \"resources\": {\"limits\": " MEM("1") "}}]");
    unsigned idx[200];
    for (unsigned i = 0; i < 200; i++)
        idx[i] = 4000000000u + i;
    struct gv_gpushare_env env[GV_GPUSHARE_ENV_COUNT];
    size_t n = gv_gpushare_env(pod, "a", idx, 200, 1024, env);
    const char *v = value_of(env, n, "ALIYUN_COM_GPU_MEM_IDX");
    assert_true(strlen(v) < sizeof(env[0].value));
    assert_int_equal(strncmp(v, "4000000000,4000000001,", 22), 0);
    assert_true(v[strlen(v) - 1] != ',');
    json_decref(pod);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_who_gets_none),
        cmocka_unit_test(test_huge_sums_saturate),
        cmocka_unit_test(test_many_indexes_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
