/* Tests for src/common: error codes and messages, log levels, atomic files. */
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

#include "common/gv_error.h"
#include "common/gv_file.h"
#include "common/gv_log.h"

static void test_status_names_match_list(void **state)
{
    (void)state;
    assert_string_equal(gv_status_name(GV_OK), "GV_OK");
    assert_string_equal(gv_status_name(GV_EPARSE), "GV_EPARSE");
    assert_string_equal(gv_strerror(GV_ENOFIT), "does not fit");
    assert_string_equal(gv_strerror((gv_status)9999), "unknown error");
    for (int i = 0; i < GV_STATUS_COUNT; i++)
        assert_non_null(strstr(gv_status_name((gv_status)i), "GV_"));
}

static void test_error_set_and_prefix(void **state)
{
    (void)state;
    struct gv_error err;
    gv_error_clear(&err);
    assert_int_equal(gv_error_set(&err, GV_EPARSE, "field %s: bad value '%d'", "cpu", 7),
                     GV_EPARSE);
    assert_int_equal(err.code, GV_EPARSE);
    assert_string_equal(err.msg, "field cpu: bad value '7'");
    gv_error_prefix(&err, "%s:%d", "nodes.csv", 3);
    assert_string_equal(err.msg, "nodes.csv:3: field cpu: bad value '7'");
    /* NULL error pointer is allowed everywhere and still returns the code. */
    assert_int_equal(gv_error_set(NULL, GV_EIO, "x"), GV_EIO);
}

static void test_log_levels(void **state)
{
    (void)state;
    assert_int_equal(gv_log_parse_level("debug"), GV_LOG_DEBUG);
    assert_int_equal(gv_log_parse_level("WARN"), GV_LOG_WARN);
    assert_int_equal(gv_log_parse_level("3"), 3);
    /* the ends of the numeric range, the alias, and what lies just past them */
    assert_int_equal(gv_log_parse_level("0"), GV_LOG_ERROR);
    assert_int_equal(gv_log_parse_level("4"), GV_LOG_TRACE);
    assert_int_equal(gv_log_parse_level("5"), -1);
    assert_int_equal(gv_log_parse_level("/"), -1);
    assert_int_equal(gv_log_parse_level("40"), -1);
    assert_int_equal(gv_log_parse_level("Warning"), GV_LOG_WARN);
    assert_int_equal(gv_log_parse_level("warnings"), -1);
    assert_int_equal(gv_log_parse_level("verbose"), -1);
    assert_int_equal(gv_log_parse_level(""), -1);
    assert_int_equal(gv_log_parse_level(NULL), -1);
    setenv("GPUVISOR_LOG_LEVEL", "bogus", 1);
    gv_log_init("test", GV_LOG_INFO);
    assert_int_equal(gv_log_get_level(), GV_LOG_INFO);
    setenv("GPUVISOR_LOG_LEVEL", "error", 1);
    gv_log_init("test", GV_LOG_INFO);
    assert_int_equal(gv_log_get_level(), GV_LOG_ERROR);
}

static void test_log_goes_to_fd_not_stdout(void **state)
{
    (void)state;
    char path[] = "/tmp/gv-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    gv_log_set_fd(fd);
    gv_log_set_level(GV_LOG_INFO);
    gv_info("hello %d", 42);
    gv_debug("hidden");
    gv_log_set_fd(2);
    char *text = NULL;
    assert_int_equal(gv_file_read_all(path, &text, NULL, NULL), GV_OK);
    assert_non_null(strstr(text, "hello 42"));
    assert_null(strstr(text, "hidden"));
    assert_non_null(strstr(text, " info "));
    free(text);
    close(fd);
    unlink(path);
}

/* A client-caused message floods no log: 10 a minute per call site, then
 * one line saying how many were dropped when the next window opens. */
static void test_log_limit_per_window(void **state)
{
    (void)state;
    struct gv_log_limit l = {0};
    unsigned dropped = 99, passed = 0;
    for (int i = 0; i < 1000; i++)
        passed += (unsigned)gv_log_limit_pass(&l, 1000, 10, 60, &dropped);
    assert_int_equal(passed, 10);
    assert_int_equal(dropped, 0); /* the first ones dropped nothing before them */
    assert_false(gv_log_limit_pass(&l, 1059, 10, 60, &dropped)); /* same window */
    assert_true(gv_log_limit_pass(&l, 1060, 10, 60, &dropped));
    assert_int_equal(dropped, 991);
    assert_true(gv_log_limit_pass(&l, 1061, 10, 60, &dropped));
    assert_int_equal(dropped, 0);
    /* a clock stepped back opens a new window, never a stuck one */
    for (int i = 0; i < 20; i++)
        gv_log_limit_pass(&l, 1062, 10, 60, &dropped);
    assert_true(gv_log_limit_pass(&l, 500, 10, 60, &dropped));
    assert_int_equal(dropped, 12);

    /* through the macro: 10 lines of 50 reach the log */
    char path[] = "/tmp/gv-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    gv_log_set_fd(fd);
    gv_log_set_level(GV_LOG_INFO);
    for (int i = 0; i < 50; i++)
        gv_warn_limited("forged %d", i);
    gv_log_set_fd(2);
    char *text = NULL;
    assert_int_equal(gv_file_read_all(path, &text, NULL, NULL), GV_OK);
    unsigned lines = 0;
    for (const char *p = text; (p = strstr(p, "forged ")) != NULL; p++)
        lines++;
    assert_int_equal(lines, 10);
    assert_null(strstr(text, "forged 10"));
    free(text);
    close(fd);
    unlink(path);
}

/* A message longer than the line buffer (a pod's reason quoted whole) is cut
 * to one line of at most 2048 bytes that still ends in a newline; the next
 * line starts clean. */
static void test_log_long_line(void **state)
{
    (void)state;
    char path[] = "/tmp/gv-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *big = malloc(5001);
    assert_non_null(big);
    memset(big, 'x', 5000);
    big[5000] = '\0';
    gv_log_set_fd(fd);
    gv_log_set_level(GV_LOG_INFO);
    gv_warn("%s", big);
    gv_warn("after");
    gv_log_set_fd(2);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gv_file_read_all(path, &text, &len, NULL), GV_OK);
    const char *nl = strchr(text, '\n');
    assert_non_null(nl);
    assert_true((size_t)(nl - text) + 1 <= 2048);
    assert_true((size_t)(nl - text) + 1 >= 2040); /* cut, not dropped */
    assert_non_null(strstr(text, "xxxxxxxx\n"));
    assert_non_null(strstr(nl + 1, ": after\n"));
    assert_int_equal(text[len - 1], '\n');
    free(text);
    free(big);
    close(fd);
    unlink(path);
}

static void test_atomic_write_roundtrip(void **state)
{
    (void)state;
    char dir[] = "/tmp/gv-file-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof(path), "%s/out.txt", dir);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(path, "abc\n", 4, 0644, &err), GV_OK);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gv_file_read_all(path, &text, &len, &err), GV_OK);
    assert_int_equal(len, 4);
    assert_string_equal(text, "abc\n");
    free(text);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    unlink(path);
    rmdir(dir);
}

static void test_atomic_write_missing_dir_leaves_nothing(void **state)
{
    (void)state;
    struct gv_error err;
    gv_error_clear(&err);
    assert_int_equal(gv_file_write_atomic("/nonexistent-dir/x/out.txt", "a", 1, 0644, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x/out.txt"));
    assert_int_equal(gv_file_read_all("/nonexistent-file", &(char *){NULL}, NULL, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "cannot open"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names_match_list),
        cmocka_unit_test(test_error_set_and_prefix),
        cmocka_unit_test(test_log_levels),
        cmocka_unit_test(test_log_goes_to_fd_not_stdout),
        cmocka_unit_test(test_log_limit_per_window),
        cmocka_unit_test(test_log_long_line),
        cmocka_unit_test(test_atomic_write_roundtrip),
        cmocka_unit_test(test_atomic_write_missing_dir_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
