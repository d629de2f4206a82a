/*
 * Opening a region (src/shm/open.c) at its edges: what an opener that may
 * not create leaves behind, a directory that is not there, files left
 * aside by creators that died, the mappings of a refused open, and closing
 * nothing.  The region's contents, slots and crash recovery: test_shm.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/gv_shm.h"
#include "tests/interposer/shm_testdir.h"

static int setup(void **state)
{
    (void)state;
    return shm_testdir_make();
}

static int teardown(void **state)
{
    (void)state;
    shm_testdir_remove();
    return 0;
}

static bool exists(const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void touch(const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    assert_true(fd >= 0);
    close(fd);
}

/* Without GV_SHM_CREATE (a reader, or the interposer told not to create),
 * a missing region is an error and nothing is created, read-write or not. */
static void test_open_without_create_makes_nothing(void **state)
{
    (void)state;
    struct gv_shm *shm = NULL;
    struct gv_error err;
    const unsigned flags[] = {0, GV_SHM_READONLY, GV_SHM_READONLY | GV_SHM_CREATE};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        assert_int_equal(gv_shm_open(path, flags[i], &shm, &err), GV_ENOTFOUND);
        assert_null(shm);
        assert_non_null(strstr(err.msg, "cannot open"));
        assert_false(exists("region.cache"));
    }
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d)) != NULL)
        files += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(files, 0); /* nothing built aside either */
}

/* A region in a directory that does not exist: a clear error, with or
 * without an error record to fill, and no crash. */
static void test_create_in_missing_directory(void **state)
{
    (void)state;
    char missing[400];
    snprintf(missing, sizeof(missing), "%s/gone/region.cache", dir);
    struct gv_shm *shm = NULL;
    struct gv_error err;
    assert_int_equal(gv_shm_open(missing, GV_SHM_CREATE, &shm, &err), GV_EIO);
    assert_null(shm);
    assert_non_null(strstr(err.msg, "cannot create"));
    assert_non_null(strstr(err.msg, "gone/region.cache.tmp."));
    assert_int_equal(gv_shm_open(missing, GV_SHM_CREATE, &shm, NULL), GV_EIO);
    assert_null(shm);
}

/*
 * Files built aside by creators that died (<base>.tmp.<pid>.<n>) are removed
 * by the next creator; nothing else is: a live creator's, names that are not
 * of that form, another region's.  INT32_MAX is above every kernel's
 * pid_max, so no process has it; one above it is no pid at all.
 */
static void test_stale_aside_files_removed(void **state)
{
    (void)state;
    char live[128];
    snprintf(live, sizeof(live), "region.cache.tmp.%d.0", (int)getpid());
    const char *dead[] = {"region.cache.tmp.2147483647.0", "region.cache.tmp.2147483647.17"};
    const char *kept[] = {
        live,
        "region.cache.tmp.2147483647",    /* no ".<n>" after the pid */
        "region.cache.tmp.2147483647x0",  /* not a '.' after the pid */
        "region.cache.tmp..0",            /* no pid */
        "region.cache.tmp.0.0",           /* pid 0 */
        "region.cache.tmp.-5.0",          /* negative */
        "region.cache.tmp.2147483648.0",  /* above any pid */
        "other.cache.tmp.2147483647.0",   /* another region's */
        "region.cache.tmq.2147483647.0",  /* not the prefix */
    };
    for (size_t i = 0; i < sizeof(dead) / sizeof(dead[0]); i++)
        touch(dead[i]);
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        touch(kept[i]);
    struct gv_shm *shm = NULL;
    struct gv_error err;
    assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_OK);
    gv_shm_close(shm);
    for (size_t i = 0; i < sizeof(dead) / sizeof(dead[0]); i++)
        if (exists(dead[i]))
            fail_msg("%s (a dead creator's) was not removed", dead[i]);
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        if (!exists(kept[i]))
            fail_msg("%s was removed", kept[i]);
    assert_true(exists("region.cache"));
}

/* A region path without a directory part is in the working directory: the
 * stale files looked for are there too. */
static void test_stale_aside_in_working_directory(void **state)
{
    (void)state;
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(dir), 0);
    touch("region.cache.tmp.2147483647.3");
    struct gv_shm *shm = NULL;
    struct gv_error err;
    gv_status rc = gv_shm_open("region.cache", GV_SHM_CREATE, &shm, &err);
    bool stale_left = exists("region.cache.tmp.2147483647.3");
    bool made = exists("region.cache");
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rc, GV_OK);
    gv_shm_close(shm);
    assert_false(stale_left);
    assert_true(made);
}

static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* An open refused after the file was mapped (a region of another layout)
 * unmaps it: a process that retries keeps no mapping per try. */
static void test_refused_open_unmaps(void **state)
{
    (void)state;
    struct gv_shm *shm = NULL;
    struct gv_error err;
    assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_OK);
    gv_shm_close(shm);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint32_t bad = GV_SHM_MAX_DEVICES + 1; /* ndevices past the table: corrupt header */
    assert_int_equal(pwrite(fd, &bad, sizeof(bad),
                            (off_t)offsetof(struct gv_shm_region, ndevices)),
                     (ssize_t)sizeof(bad));
    close(fd);
    int before = count_maps();
    for (int i = 0; i < 50; i++) {
        shm = NULL;
        assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_EPROTO);
        assert_null(shm);
    }
    assert_non_null(strstr(err.msg, "corrupt shared region header"));
    assert_true(count_maps() <= before + 2); /* stdio may map a buffer, never 50 */
}

/*
 * Closing returns this process's charges and slot at once (an application
 * that closes and reopens, or a library unloaded, must not leave its usage
 * to the dead-process sweep): whichever slot it held, slot 0 included.  A
 * reader's close frees nothing.
 */
static void test_close_returns_charges(void **state)
{
    (void)state;
    struct gv_shm *a = NULL, *b = NULL, *ro = NULL;
    struct gv_error err;
    const struct gv_shm_limits lim = {1000, 5000, 0, 0, 0};
    int idx = -1;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &a, &err), GV_OK);
        assert_int_equal(gv_shm_proc_attach(a, getpid(), 0, &err), GV_OK);
        assert_int_equal(gv_shm_device_attach(a, "GPU-a", &lim, &idx, &err), GV_OK);
        assert_int_equal(gv_shm_mem_reserve(a, idx, 700, GV_SHM_DEVICE, NULL), GV_OK);
        /* round 0: this is slot 0; round 1: another handle holds slot 0 */
        struct gv_shm *mine = a;
        if (round == 1) {
            assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &b, &err), GV_OK);
            /* a second opener in the same process is the same process: pid
             * + 1 stands in for another process's slot (never checked alive
             * before it reserves) */
            assert_int_equal(gv_shm_proc_attach(b, getpid() + 1, 0, &err), GV_OK);
            mine = b;
        }
        assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &ro, &err), GV_OK);
        uint64_t before = gv_shm_mem_used(ro, idx);
        gv_shm_close(ro);
        assert_int_equal(gv_shm_mem_used(a, idx), before);
        gv_shm_close(mine == b ? b : a);
        struct gv_shm *check = NULL;
        assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &check, &err), GV_OK);
        if (round == 0) {
            assert_int_equal(gv_shm_mem_used(check, idx), 0);
            int used = 0;
            for (int i = 0; i < GV_SHM_MAX_PROCS; i++)
                used += atomic_load(&gv_shm_region(check)->procs[i].pid) != 0;
            assert_int_equal(used, 0);
        } else {
            assert_int_equal(gv_shm_mem_used(check, idx), 700); /* a's charges stay */
            gv_shm_close(a);
            assert_int_equal(gv_shm_mem_used(check, idx), 0);
        }
        gv_shm_close(check);
        unlink(path);
    }
}

/* A file of the wrong size that starts with the magic is named by its
 * layout version, down to a file holding just the magic and version. */
static void test_bad_size_names_version(void **state)
{
    (void)state;
    const size_t sizes[] = {16, 17, 4096};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
        assert_true(fd >= 0);
        struct {
            uint64_t magic;
            uint32_t version;
            uint32_t pad;
        } head = {GV_SHM_MAGIC, GV_SHM_VERSION + 7, 0};
        _Static_assert(sizeof(head) == 16, "magic, version, padding");
        assert_int_equal(ftruncate(fd, (off_t)sizes[i]), 0);
        assert_int_equal(pwrite(fd, &head, 12, 0), 12);
        close(fd);
        struct gv_shm *shm = NULL;
        struct gv_error err;
        assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_EPROTO);
        char want[64];
        snprintf(want, sizeof(want), "layout version %u", GV_SHM_VERSION + 7);
        if (strstr(err.msg, want) == NULL)
            fail_msg("size %zu: %s", sizes[i], err.msg);
    }
}

static void test_close_null(void **state)
{
    (void)state;
    gv_shm_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_without_create_makes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_in_missing_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_aside_files_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_aside_in_working_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_open_unmaps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_returns_charges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_size_names_version, setup, teardown),
        cmocka_unit_test(test_close_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
