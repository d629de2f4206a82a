/* Interposer configuration: values, precedence, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interposer/config.h"

static void test_bytes(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(gv_ipcfg_parse_bytes("4096", &v), GV_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(gv_ipcfg_parse_bytes("3000m", &v), GV_OK);
    assert_int_equal(v, 3000ull << 20);
    assert_int_equal(gv_ipcfg_parse_bytes("4g", &v), GV_OK);
    assert_int_equal(v, 4ull << 30);
    assert_int_equal(gv_ipcfg_parse_bytes("4Gi", &v), GV_OK);
    assert_int_equal(v, 4ull << 30);
    assert_int_equal(gv_ipcfg_parse_bytes("512KiB", &v), GV_OK);
    assert_int_equal(v, 512ull << 10);
    assert_int_equal(gv_ipcfg_parse_bytes("", &v), GV_EPARSE);
    assert_int_equal(gv_ipcfg_parse_bytes("-1", &v), GV_EPARSE);
    assert_int_equal(gv_ipcfg_parse_bytes("1x", &v), GV_EPARSE);
    assert_int_equal(gv_ipcfg_parse_bytes("1 g", &v), GV_EPARSE);
    assert_int_equal(gv_ipcfg_parse_bytes("99999999999999999999", &v), GV_ERANGE);
    assert_int_equal(gv_ipcfg_parse_bytes("99999999999t", &v), GV_ERANGE);
}

static void test_keys(void **state)
{
    (void)state;
    struct gv_ipcfg c;
    struct gv_error err;
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_MEMORY_LIMIT", "2g", &err), GV_OK);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_MEMORY_LIMIT_1", "1g", &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 2ull << 30);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 1, 0), 1ull << 30);
    assert_int_equal(gv_ipcfg_set(&c, "GPUVISOR_DEVICE_MEMORY_PERCENT_3", "25", &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 3, 16ull << 30), 4ull << 30);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 4, 16ull << 30), 2ull << 30); /* bytes for all */
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_SM_LIMIT", "30", &err), GV_OK);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_SM_LIMIT_2", "100", &err), GV_OK);
    assert_int_equal(gv_ipcfg_sm_limit(&c, 0), 30);
    assert_int_equal(gv_ipcfg_sm_limit(&c, 2), 0); /* 100% = unlimited */
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_TASK_PRIORITY", "2", &err), GV_OK);
    assert_int_equal(c.priority, 2);
    assert_int_equal(gv_ipcfg_set(&c, "GPU_CORE_UTILIZATION_POLICY", "FORCE", &err), GV_OK);
    assert_int_equal(c.policy, GV_POLICY_FORCE);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_OVERSUBSCRIBE", "true", &err), GV_OK);
    assert_true(c.oversubscribe);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/x.cache", &err),
                     GV_OK);
    assert_string_equal(c.shared_cache, "/tmp/x.cache");
    assert_int_equal(gv_ipcfg_set(&c, "PATH", "/bin", &err), GV_ENOTFOUND);
    assert_true(gv_ipcfg_has_limits(&c));
}

static void test_bad_values_name_key_and_keep_state(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"CUDA_DEVICE_MEMORY_LIMIT", "lots"},   {"CUDA_DEVICE_MEMORY_LIMIT_16", "1g"},
        {"CUDA_DEVICE_MEMORY_LIMIT_01", "1g"},  {"CUDA_DEVICE_MEMORY_LIMIT_x", "1g"},
        {"CUDA_DEVICE_SM_LIMIT", "101"},        {"CUDA_DEVICE_SM_LIMIT", "-5"},
        {"CUDA_DEVICE_SM_LIMIT", "50%"},        {"CUDA_TASK_PRIORITY", "16"},
        {"GPU_CORE_UTILIZATION_POLICY", "on"},  {"CUDA_OVERSUBSCRIBE", "2"},
        {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "rel"}, {"GPUVISOR_DEVICE_MEMORY_PERCENT", "101"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gv_ipcfg c;
        struct gv_error err;
        gv_ipcfg_init(&c);
        gv_status rc = gv_ipcfg_set(&c, bad[i][0], bad[i][1], &err);
        assert_true(rc == GV_EPARSE || rc == GV_ERANGE);
        assert_non_null(strstr(err.msg, bad[i][0]));
        assert_false(gv_ipcfg_has_limits(&c));
    }
}

static void test_text(void **state)
{
    (void)state;
    struct gv_ipcfg c;
    struct gv_error err;
    gv_ipcfg_init(&c);
    const char *ok = "# limits\n\nexport CUDA_DEVICE_MEMORY_LIMIT_0=\"1g\"\r\n"
                     "  CUDA_DEVICE_SM_LIMIT = 20\nUNKNOWN_KEY=whatever\n";
    assert_int_equal(gv_ipcfg_parse_text(&c, ok, strlen(ok), "f", &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 1ull << 30);
    assert_int_equal(gv_ipcfg_sm_limit(&c, 0), 20);
    const char *bad = "CUDA_DEVICE_MEMORY_LIMIT=1g\nnonsense line\n";
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_parse_text(&c, bad, strlen(bad), "limits.env", &err), GV_EPARSE);
    assert_non_null(strstr(err.msg, "limits.env:2"));
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 0); /* nothing applied */
}

static void test_precedence(void **state)
{
    (void)state;
    struct stat st;
    if (stat(GV_IPCFG_DEFAULT_LIMITS_FILE, &st) == 0) {
        /* a deployed limits file wins over everything here */
        print_message("# %s exists on this machine\n", GV_IPCFG_DEFAULT_LIMITS_FILE);
        skip();
    }
    char file[256];
    const char *tmp = getenv("GV_TEST_TMP");
    snprintf(file, sizeof(file), "%s/limits.XXXXXX", tmp ? tmp : "/tmp");
    int fd = mkstemp(file);
    assert_true(fd >= 0);
    const char *text = "CUDA_DEVICE_MEMORY_LIMIT=1g\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char limits_env[300];
    snprintf(limits_env, sizeof(limits_env), "GPUVISOR_LIMITS_FILE=%s", file);
    char *with_file[] = {limits_env, "CUDA_DEVICE_MEMORY_LIMIT=8g",
                         "CUDA_DEVICE_MEMORY_LIMIT_0=8g", "CUDA_DEVICE_SM_LIMIT=10", NULL};
    struct gv_ipcfg c;
    struct gv_error err;
    assert_int_equal(gv_ipcfg_load(&c, with_file, &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 1ull << 30); /* the file wins ... */
    assert_int_equal(gv_ipcfg_sm_limit(&c, 0), 0);            /* ... and is the only source */
    assert_string_equal(c.source, file);
    char *env_only[] = {"CUDA_DEVICE_MEMORY_LIMIT=8g", "CUDA_DEVICE_MEMORY_LIMIT_0=2g", NULL};
    assert_int_equal(gv_ipcfg_load(&c, env_only, &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 2ull << 30);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 1, 0), 8ull << 30);
    unlink(file);
    assert_int_equal(gv_ipcfg_load(&c, with_file, &err), GV_EIO); /* named but missing */
    assert_non_null(strstr(err.msg, file));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_bad_values_name_key_and_keep_state),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_precedence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
