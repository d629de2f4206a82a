/* Interposer configuration: values, precedence, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
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

/* Whether any limit is set decides whether a device the region cannot track fails closed
 * (devices.c): every way of setting one must count, and only real limits. */
static void test_has_limits_counts_every_form(void **state)
{
    (void)state;
    static const struct {
        const char *key, *value;
        bool limited;
    } cases[] = {
        {"CUDA_DEVICE_MEMORY_LIMIT", "1g", true},
        {"CUDA_DEVICE_MEMORY_LIMIT_0", "1g", true},
        {"CUDA_DEVICE_MEMORY_LIMIT_15", "1", true},
        {"GPUVISOR_DEVICE_MEMORY_PERCENT", "99", true},
        {"GPUVISOR_DEVICE_MEMORY_PERCENT_3", "1", true},
        {"GPUVISOR_DEVICE_MEMORY_PERCENT", "100", false}, /* the whole GPU */
        {"GPUVISOR_DEVICE_MEMORY_PERCENT_3", "100", false},
        {"CUDA_DEVICE_SM_LIMIT", "99", true},
        {"CUDA_DEVICE_SM_LIMIT_2", "1", true},
        {"CUDA_DEVICE_SM_LIMIT", "100", false},
        {"CUDA_DEVICE_MEMORY_LIMIT", "0", false},   /* 0 = none */
        {"CUDA_DEVICE_MEMORY_LIMIT_4", "0", false},
        {"CUDA_DEVICE_SM_LIMIT_1", "0", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gv_ipcfg c;
        struct gv_error err = {0};
        gv_ipcfg_init(&c);
        assert_int_equal(gv_ipcfg_set(&c, cases[i].key, cases[i].value, &err), GV_OK);
        if (gv_ipcfg_has_limits(&c) != cases[i].limited)
            fail_msg("%s=%s: has_limits %d", cases[i].key, cases[i].value, !cases[i].limited);
    }
}

/* Device indices at and past the table's ends read the all-devices value, never beside
 * the table; device 0 has its own values like any other. */
static void test_device_index_edges(void **state)
{
    (void)state;
    struct gv_ipcfg c;
    struct gv_error err = {0};
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_SM_LIMIT", "50", &err), GV_OK);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_SM_LIMIT_0", "30", &err), GV_OK);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_MEMORY_LIMIT", "3g", &err), GV_OK);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_MEMORY_LIMIT_0", "1g", &err), GV_OK);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_MEMORY_LIMIT_15", "2g", &err), GV_OK);
    assert_int_equal(gv_ipcfg_sm_limit(&c, 0), 30);
    assert_int_equal(gv_ipcfg_sm_limit(&c, 1), 50);
    assert_int_equal(gv_ipcfg_sm_limit(&c, GV_IPCFG_MAX_DEVICES), 50);
    assert_int_equal(gv_ipcfg_sm_limit(&c, -1), 50);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 1ull << 30);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 15, 0), 2ull << 30);
    assert_int_equal(gv_ipcfg_mem_limit(&c, GV_IPCFG_MAX_DEVICES, 0), 3ull << 30);
    assert_int_equal(gv_ipcfg_mem_limit(&c, -1, 0), 3ull << 30);
    /* percent: 100 is the whole GPU, i.e. no limit */
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_set(&c, "GPUVISOR_DEVICE_MEMORY_PERCENT", "100", &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 16ull << 30), 0);
    assert_int_equal(gv_ipcfg_set(&c, "GPUVISOR_DEVICE_MEMORY_PERCENT", "50", &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 16ull << 30), 8ull << 30);
    /* names that only start like a key are other variables */
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_SM_LIMITED", "5", &err), GV_ENOTFOUND);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_MEMORY_LIMITX_1", "5", &err), GV_ENOTFOUND);
    assert_false(gv_ipcfg_has_limits(&c));
    assert_int_equal(gv_ipcfg_set(&c, NULL, "1", &err), GV_EINVAL);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_DEVICE_SM_LIMIT", NULL, &err), GV_EINVAL);
}

/* Numbers at their edges: the largest values parse, one more does not, and 0 is a number. */
static void test_number_edges(void **state)
{
    (void)state;
    uint64_t v = 1;
    assert_int_equal(gv_ipcfg_parse_bytes("0", &v), GV_OK);
    assert_int_equal(v, 0);
    assert_int_equal(gv_ipcfg_parse_bytes("18446744073709551615", &v), GV_OK);
    assert_true(v == UINT64_MAX);
    assert_int_equal(gv_ipcfg_parse_bytes("18446744073709551616", &v), GV_ERANGE);
    assert_int_equal(gv_ipcfg_parse_bytes("16777215t", &v), GV_OK);
    assert_true(v == UINT64_C(16777215) << 40);
    assert_int_equal(gv_ipcfg_parse_bytes("16777216t", &v), GV_ERANGE);
    struct gv_ipcfg c;
    struct gv_error err = {0};
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_TASK_PRIORITY", "9", &err), GV_OK);
    assert_int_equal(c.priority, 9);
    assert_int_equal(gv_ipcfg_set(&c, "CUDA_TASK_PRIORITY", "000000015", &err), GV_OK);
    assert_int_equal(c.priority, 15);
    assert_int_not_equal(gv_ipcfg_set(&c, "CUDA_TASK_PRIORITY", "0000000015", &err), GV_OK);
}

/* The text form: quotes of either kind, a line exactly one byte too long for the line
 * buffer, NUL bytes, and a length that ends before the text's NUL. */
static void test_text_edges(void **state)
{
    (void)state;
    struct gv_ipcfg c;
    struct gv_error err = {0};
    gv_ipcfg_init(&c);
    const char *q = "CUDA_DEVICE_MEMORY_LIMIT_0='2g'\nCUDA_DEVICE_MEMORY_LIMIT_1=\"3g\"\n";
    assert_int_equal(gv_ipcfg_parse_text(&c, q, strlen(q), "f", &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 2ull << 30);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 1, 0), 3ull << 30);
    /* only the bytes given are read */
    const char *cut = "CUDA_DEVICE_SM_LIMIT=30";
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_parse_text(&c, cut, strlen(cut) - 1, "f", &err), GV_OK);
    assert_int_equal(gv_ipcfg_sm_limit(&c, 0), 3);
    /* NUL inside a line */
    const char nul[] = "CUDA_DEVICE_SM_LIMIT=3\0000\n";
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_parse_text(&c, nul, sizeof(nul) - 1, "f", &err), GV_EPARSE);
    assert_non_null(strstr(err.msg, "NUL"));
    /* a comment line as long as the line buffer: refused whole (no room for its NUL);
     * one byte shorter is a comment */
    size_t room = PATH_MAX + 128;
    char *big = malloc(room + 2);
    assert_non_null(big);
    memset(big, 'x', room);
    big[0] = '#';
    assert_int_equal(gv_ipcfg_parse_text(&c, big, room, "f", &err), GV_EPARSE);
    assert_non_null(strstr(err.msg, "line too long"));
    assert_int_equal(gv_ipcfg_parse_text(&c, big, room - 1, "f", &err), GV_OK);
    free(big);
    /* a path with no room for its NUL */
    char *path = malloc(PATH_MAX + 1);
    assert_non_null(path);
    memset(path, 'p', PATH_MAX);
    path[0] = '/';
    path[PATH_MAX] = '\0';
    assert_int_equal(gv_ipcfg_set(&c, "GPUVISOR_NODE_DIR", path, &err), GV_EPARSE);
    path[PATH_MAX - 1] = '\0';
    assert_int_equal(gv_ipcfg_set(&c, "GPUVISOR_NODE_DIR", path, &err), GV_OK);
    assert_string_equal(c.node_dir, path);
    free(path);
    /* the environment: other variables pass by, every limit is read */
    char *env[] = {"PATH=/bin", "=odd", "noequals", "CUDA_DEVICE_MEMORY_LIMIT=1g",
                   "HOME=/root", "CUDA_DEVICE_SM_LIMIT_1=40", NULL};
    gv_ipcfg_init(&c);
    assert_int_equal(gv_ipcfg_parse_env(&c, env, &err), GV_OK);
    assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 1ull << 30);
    assert_int_equal(gv_ipcfg_sm_limit(&c, 1), 40);
}

/* A limits file of exactly the largest size is read; one byte more is refused. */
static void test_limits_file_size(void **state)
{
    (void)state;
    struct stat st;
    if (stat(GV_IPCFG_DEFAULT_LIMITS_FILE, &st) == 0)
        skip();
    char file[256];
    const char *tmp = getenv("GV_TEST_TMP");
    snprintf(file, sizeof(file), "%s/limits.XXXXXX", tmp ? tmp : "/tmp");
    const size_t max = 64 * 1024;
    char *text = malloc(max + 1);
    assert_non_null(text);
    const char *head = "CUDA_DEVICE_MEMORY_LIMIT=1g\n";
    size_t o = strlen(head);
    memcpy(text, head, o);
    while (o < max) { /* comment lines fill the rest */
        size_t line = max - o < 100 ? max - o : 100;
        memset(text + o, '#', line - 1);
        text[o + line - 1] = '\n';
        o += line;
    }
    for (size_t size = max; size <= max + 1; size++) {
        int fd = mkstemp(file);
        assert_true(fd >= 0);
        if (size > max)
            text[max] = '\n';
        assert_int_equal(write(fd, text, size), (ssize_t)size);
        close(fd);
        char env[300];
        snprintf(env, sizeof(env), "GPUVISOR_LIMITS_FILE=%s", file);
        char *envp[] = {env, NULL};
        struct gv_ipcfg c;
        struct gv_error err = {0};
        gv_status rc = gv_ipcfg_load(&c, envp, &err);
        unlink(file);
        snprintf(file, sizeof(file), "%s/limits.XXXXXX", tmp ? tmp : "/tmp");
        if (size == max) {
            if (rc != GV_OK)
                fail_msg("%zu bytes: %s", size, err.msg);
            assert_int_equal(gv_ipcfg_mem_limit(&c, 0, 0), 1ull << 30);
        } else {
            assert_int_equal(rc, GV_ERANGE);
            assert_non_null(strstr(err.msg, "larger than"));
        }
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_bad_values_name_key_and_keep_state),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_has_limits_counts_every_form),
        cmocka_unit_test(test_device_index_edges),
        cmocka_unit_test(test_number_edges),
        cmocka_unit_test(test_text_edges),
        cmocka_unit_test(test_limits_file_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
