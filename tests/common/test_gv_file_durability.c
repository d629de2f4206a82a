/*
 * gv_file_write_atomic's durability: the data is synced before the rename
 * and the directory after it (issue 28; mutants gv-file-no-fsync,
 * gv-file-no-dir-fsync).  A crash or power loss cannot be staged here, so the
 * test watches the calls that make the write durable instead: this program
 * defines fsync() and rename() itself, and the static linker binds
 * libgvcommon's calls to them (symbol interposition, as an LD_PRELOAD shim
 * would, without a second library); each records what it was called on and
 * then does the real work through the system call, so the files are real.
 * No test can see a missing fsync from the files alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/gv_error.h"
#include "common/gv_file.h"

enum op { OP_FSYNC, OP_RENAME };
struct call {
    enum op op;
    char path[PATH_MAX]; /* fsync: what the fd is open on; rename: the target */
};
static struct call calls[16];
static size_t n_calls;
static int fail_dir_fsync; /* errno for an fsync on a directory, 0: none */
static int fail_file_fsync;

int fsync(int fd)
{
    char link[64];
    struct call *c = n_calls < 16 ? &calls[n_calls++] : &calls[15];
    c->op = OP_FSYNC;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, c->path, sizeof(c->path) - 1);
    c->path[n > 0 ? n : 0] = '\0';
    struct stat st;
    if (fstat(fd, &st) == 0) {
        int e = S_ISDIR(st.st_mode) ? fail_dir_fsync : fail_file_fsync;
        if (e != 0) {
            errno = e;
            return -1;
        }
    }
    return (int)syscall(SYS_fsync, fd);
}

int rename(const char *from, const char *to)
{
    struct call *c = n_calls < 16 ? &calls[n_calls++] : &calls[15];
    c->op = OP_RENAME;
    snprintf(c->path, sizeof(c->path), "%s", to);
    return renameat(AT_FDCWD, from, AT_FDCWD, to);
}

static char dir[PATH_MAX - 128];

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("GV_TEST_TMP");
    char tmp[PATH_MAX], real[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s/gvfile-sync.XXXXXX", base != NULL ? base : "/tmp");
    if (mkdtemp(tmp) == NULL || realpath(tmp, real) == NULL || strlen(real) >= sizeof(dir))
        return -1;
    memcpy(dir, real, strlen(real) + 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void reset(void)
{
    n_calls = 0;
    fail_dir_fsync = fail_file_fsync = 0;
}

static void dump(void)
{
    for (size_t i = 0; i < n_calls; i++)
        print_message("# call %zu: %s %s\n", i, calls[i].op == OP_FSYNC ? "fsync" : "rename",
                      calls[i].path);
}

/* Index of the first call op on a path (prefix when prefix is set), or -1. */
static int find(enum op op, const char *path, int prefix)
{
    for (size_t i = 0; i < n_calls; i++)
        if (calls[i].op == op && (prefix ? strncmp(calls[i].path, path, strlen(path)) == 0
                                         : strcmp(calls[i].path, path) == 0))
            return (int)i;
    return -1;
}

static void read_back(const char *path, const char *want)
{
    char *got = NULL;
    assert_int_equal(gv_file_read_all(path, &got, NULL, NULL), GV_OK);
    assert_string_equal(got, want);
    free(got);
}

/* temp file synced, then renamed, then its directory synced: in that order. */
static void test_data_then_rename_then_directory(void **state)
{
    (void)state;
    char path[PATH_MAX - 32], tmp[PATH_MAX];
    snprintf(path, sizeof(path), "%s/answer", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp.", path);
    reset();
    struct gv_error err = {0};
    assert_int_equal(gv_file_write_atomic(path, "v1", 2, 0644, &err), GV_OK);
    int data = find(OP_FSYNC, tmp, 1), mv = find(OP_RENAME, path, 0),
        parent = find(OP_FSYNC, dir, 0);
    dump();
    assert_true(data >= 0);   /* the temp file's content was synced */
    assert_true(mv > data);   /* ... before it replaced the old file */
    assert_true(parent > mv); /* and the directory entry after */
    read_back(path, "v1");
}

/* A path without a directory part syncs the current directory. */
static void test_relative_path_syncs_cwd(void **state)
{
    (void)state;
    char old[PATH_MAX];
    assert_non_null(getcwd(old, sizeof(old)));
    assert_int_equal(chdir(dir), 0);
    reset();
    gv_status st = gv_file_write_atomic("rel", "x", 1, 0644, NULL);
    assert_int_equal(chdir(old), 0);
    dump();
    assert_int_equal(st, GV_OK);
    assert_true(find(OP_FSYNC, dir, 0) > find(OP_RENAME, "rel", 0));
}

/* The directory sync failing is reported: the caller must not take the
 * write as durable.  EINVAL (a filesystem that cannot sync directories)
 * is not a failure. */
static void test_directory_sync_failure_is_reported(void **state)
{
    (void)state;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/limits.env", dir);
    reset();
    fail_dir_fsync = EIO;
    struct gv_error err = {0};
    assert_int_equal(gv_file_write_atomic(path, "A=1\n", 4, 0644, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "syncing its directory"));
    assert_non_null(strstr(err.msg, path));
    reset();
    fail_dir_fsync = EINVAL;
    assert_int_equal(gv_file_write_atomic(path, "A=2\n", 4, 0644, &err), GV_OK);
    read_back(path, "A=2\n");
}

/* The data sync failing fails the write before the rename: the old file
 * stays, and no temporary file is left. */
static void test_data_sync_failure_keeps_old_file(void **state)
{
    (void)state;
    char path[PATH_MAX - 32], tmp[PATH_MAX];
    snprintf(path, sizeof(path), "%s/keep", dir);
    assert_int_equal(gv_file_write_atomic(path, "old", 3, 0644, NULL), GV_OK);
    reset();
    fail_file_fsync = EIO;
    struct gv_error err = {0};
    assert_int_equal(gv_file_write_atomic(path, "new", 3, 0644, &err), GV_EIO);
    assert_int_equal(find(OP_RENAME, path, 0), -1);
    read_back(path, "old");
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    assert_int_equal(access(tmp, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_then_rename_then_directory),
        cmocka_unit_test(test_relative_path_syncs_cwd),
        cmocka_unit_test(test_directory_sync_failure_is_reported),
        cmocka_unit_test(test_data_sync_failure_keeps_old_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
