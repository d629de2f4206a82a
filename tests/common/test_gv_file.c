/*
 * gv_file's failure paths: every failure names the path and why, leaves the
 * previous file intact and no temporary file behind ("no partial output").
 * The happy paths are in test_common.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/gv_error.h"
#include "common/gv_file.h"

static char dir[512];

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("GV_TEST_TMP");
    snprintf(dir, sizeof(dir), "%s/gvfile.XXXXXX", base != NULL ? base : "/tmp");
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Entries in dir other than the given name (a leftover temp file). */
static int others_in_dir(const char *keep)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            strcmp(e->d_name, keep) != 0)
            n++;
    closedir(d);
    return n;
}

/* A file larger than the first buffer (64 KiB) is read whole and exact. */
static void test_read_grows_buffer(void **state)
{
    (void)state;
    size_t n = 200 * 1024 + 7;
    char *data = malloc(n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)('a' + i % 23);
    char path[600];
    snprintf(path, sizeof(path), "%s/big", dir);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(path, data, n, 0600, &err), GV_OK);
    char *got = NULL;
    size_t len = 0;
    assert_int_equal(gv_file_read_all(path, &got, &len, &err), GV_OK);
    assert_int_equal(len, n);
    assert_memory_equal(got, data, n);
    assert_int_equal(got[n], '\0');
    free(got);
    free(data);
    unlink(path);
}

/* Reading a directory: open succeeds, read fails; an error, nothing returned. */
static void test_read_directory_fails(void **state)
{
    (void)state;
    struct gv_error err;
    char *out = (char *)"untouched";
    assert_int_equal(gv_file_read_all(dir, &out, NULL, &err), GV_EIO);
    assert_non_null(strstr(err.msg, dir));
    assert_non_null(strstr(err.msg, "read failed"));
    assert_string_equal(out, "untouched");
}

/* A path whose temp name cannot be formed is refused before touching disk. */
static void test_write_path_too_long(void **state)
{
    (void)state;
    char path[PATH_MAX + 16];
    memset(path, 'x', sizeof(path) - 1);
    path[sizeof(path) - 1] = '\0';
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(path, "a", 1, 0644, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "path too long"));

    /* At the edge: a temporary name (path.tmp.<pid>) of exactly PATH_MAX
     * bytes has no room for its NUL and would be cut, one byte less fits
     * (and fails at open: its one long component is more than a filesystem
     * name may hold). */
    char suffix[32];
    size_t sl = (size_t)snprintf(suffix, sizeof(suffix), ".tmp.%d", (int)getpid());
    memset(path, 'x', sizeof(path));
    path[0] = '/';
    path[PATH_MAX - sl] = '\0';
    assert_int_equal(gv_file_write_atomic(path, "a", 1, 0644, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "path too long"));
    path[PATH_MAX - sl - 1] = '\0';
    assert_int_equal(gv_file_write_atomic(path, "a", 1, 0644, &err), GV_EIO);
    assert_null(strstr(err.msg, "path too long"));
}

/* Renaming over a directory fails: the directory stays, no temp file left. */
static void test_write_over_directory(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof(path), "%s/target", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(path, "abc", 3, 0644, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "cannot rename into place"));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(others_in_dir("target"), 0);
    rmdir(path);
}

/*
 * A write that fails half way (file size limit: EFBIG, as a full disk gives
 * ENOSPC) leaves the previous content whole and no temp file.
 */
static void test_failed_write_keeps_old_file(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof(path), "%s/keep", dir);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(path, "old\n", 4, 0644, &err), GV_OK);

    char big[8192];
    memset(big, 'n', sizeof(big));
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit small = {.rlim_cur = 4096, .rlim_max = old.rlim_max};
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    gv_status st = gv_file_write_atomic(path, big, sizeof(big), 0644, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);

    assert_int_equal(st, GV_EIO);
    assert_non_null(strstr(err.msg, "write failed"));
    assert_non_null(strstr(err.msg, path));
    char *text = NULL;
    assert_int_equal(gv_file_read_all(path, &text, NULL, &err), GV_OK);
    assert_string_equal(text, "old\n");
    free(text);
    assert_int_equal(others_in_dir("keep"), 0);
    unlink(path);
}

/* The mode asked for, exactly: a strict umask does not take readers' bits away. */
static void test_write_mode_ignores_umask(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof(path), "%s/spec.json", dir);
    struct gv_error err;
    mode_t old = umask(077);
    gv_status st = gv_file_write_atomic(path, "{}", 2, 0644, &err);
    umask(old);
    assert_int_equal(st, GV_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0644);
    unlink(path);
}

/*
 * A link planted at the temporary name (path.tmp.<pid>) by whoever can write
 * the directory is never written through: the file it names keeps its
 * content, a dangling one creates nothing, and the path ends up a regular
 * file of its own with the new content, no temporary left.
 */
static void test_write_through_planted_link_refused(void **state)
{
    (void)state;
    char path[600], tmp[700], victim[600], absent[600];
    snprintf(path, sizeof(path), "%s/limits.env", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    snprintf(absent, sizeof(absent), "%s/absent", dir);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(victim, "precious\n", 9, 0600, &err), GV_OK);

    const char *targets[] = {victim, absent};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(symlink(targets[i], tmp), 0);
        assert_int_equal(gv_file_write_atomic(path, "LIMIT=1\n", 8, 0644, &err), GV_OK);
        struct stat sb;
        assert_int_equal(lstat(path, &sb), 0);
        assert_true(S_ISREG(sb.st_mode));
        char *text = NULL;
        assert_int_equal(gv_file_read_all(path, &text, NULL, &err), GV_OK);
        assert_string_equal(text, "LIMIT=1\n");
        free(text);
        assert_int_equal(gv_file_read_all(victim, &text, NULL, &err), GV_OK);
        assert_string_equal(text, "precious\n");
        free(text);
        assert_int_equal(lstat(absent, &sb), -1);
        assert_int_equal(lstat(tmp, &sb), -1);
        assert_int_equal(unlink(path), 0);
    }
    unlink(victim);
}

/* A temporary left by an earlier writer of the same pid (a crash) is replaced. */
static void test_write_over_stale_temporary(void **state)
{
    (void)state;
    char path[600], tmp[700];
    snprintf(path, sizeof(path), "%s/answer", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs("half an old answer that is longer than the new one", f);
    fclose(f);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(path, "new", 3, 0600, &err), GV_OK);
    char *text = NULL;
    assert_int_equal(gv_file_read_all(path, &text, NULL, &err), GV_OK);
    assert_string_equal(text, "new");
    free(text);
    struct stat sb;
    assert_int_equal(lstat(tmp, &sb), -1);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_grows_buffer),
        cmocka_unit_test(test_read_directory_fails),
        cmocka_unit_test(test_write_path_too_long),
        cmocka_unit_test(test_write_over_directory),
        cmocka_unit_test(test_failed_write_keeps_old_file),
        cmocka_unit_test(test_write_mode_ignores_umask),
        cmocka_unit_test(test_write_through_planted_link_refused),
        cmocka_unit_test(test_write_over_stale_temporary),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
