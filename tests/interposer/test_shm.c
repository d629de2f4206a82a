/* Shared region: creation, validation, limits, slots, crash recovery. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/gv_shm.h"

static char dir[256];
static char path[300];

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("GV_TEST_TMP");
    snprintf(dir, sizeof(dir), "%s/shm.XXXXXX", base ? base : "/tmp");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/region.cache", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

static struct gv_shm *open_rw(void)
{
    struct gv_shm *shm = NULL;
    struct gv_error err;
    gv_status rc = gv_shm_open(path, GV_SHM_CREATE, &shm, &err);
    if (rc != GV_OK)
        fail_msg("open: %s", err.msg);
    return shm;
}

static void test_create_and_reopen(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    const struct gv_shm_region *r = gv_shm_region(a);
    assert_int_equal(r->magic, GV_SHM_MAGIC);
    assert_int_equal(r->version, GV_SHM_VERSION);
    assert_int_equal(r->total_size, sizeof(struct gv_shm_region));
    int idx;
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 30, 0}, &idx, NULL), GV_OK);
    assert_int_equal(idx, 0);
    gv_shm_close(a);

    struct gv_shm *ro = NULL;
    assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &ro, NULL), GV_OK);
    assert_int_equal(gv_shm_device_find(ro, "GPU-a"), 0);
    assert_int_equal(gv_shm_region(ro)->devices[0].mem_limit, 1000);
    assert_int_equal(gv_shm_region(ro)->devices[0].sm_limit, 30);
    gv_shm_close(ro);
}

static void test_limit_and_conflict(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    int idx, idx2;
    struct gv_error err;
    assert_int_equal(gv_shm_proc_attach(a, getpid(), 1, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 600, GV_SHM_DEVICE, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 401, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 400, GV_SHM_DEVICE, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_used(a, idx), 1000);
    gv_shm_mem_release(a, idx, 1000, false);
    assert_int_equal(gv_shm_mem_used(a, idx), 0);
    /* A later process bringing other limits keeps the first ones. */
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){9999, 5000, 0, 0, 0}, &idx2, &err), GV_ECONFLICT);
    assert_int_equal(idx2, idx);
    assert_non_null(strstr(err.msg, "limits already fixed"));
    assert_int_equal(gv_shm_region(a)->devices[idx].mem_limit, 1000);
    gv_shm_close(a);
}

static void test_rejects_foreign_and_corrupt(void **state)
{
    (void)state;
    struct gv_error err;
    struct gv_shm *shm = NULL;
    /* Wrong size, random content. */
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    assert_true(fd >= 0);
    char junk[100];
    memset(junk, 'x', sizeof(junk));
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "not a gpuvisor shared region"));
    unlink(path);

    /* A valid region from a future layout version. */
    shm = open_rw();
    gv_shm_close(shm);
    fd = open(path, O_RDWR);
    uint32_t v = GV_SHM_VERSION + 1;
    assert_int_equal(pwrite(fd, &v, sizeof(v), offsetof(struct gv_shm_region, version)),
                     (ssize_t)sizeof(v));
    close(fd);
    assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "layout version"));

    /* Right size and version, wrong magic. */
    fd = open(path, O_RDWR);
    uint64_t m = 42;
    v = GV_SHM_VERSION;
    assert_int_equal(pwrite(fd, &v, sizeof(v), offsetof(struct gv_shm_region, version)),
                     (ssize_t)sizeof(v));
    assert_int_equal(pwrite(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m));
    close(fd);
    assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &shm, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "magic"));
}

/* Child: attach, charge bytes, then die without cleaning up. */
static pid_t child_charges(uint64_t bytes, bool die_holding_lock)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct gv_shm *c = NULL;
        int idx;
        if (gv_shm_open(path, GV_SHM_CREATE, &c, NULL) != GV_OK ||
            gv_shm_proc_attach(c, getpid(), 0, NULL) != GV_OK ||
            gv_shm_device_attach(c, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx, NULL) != GV_OK ||
            gv_shm_mem_reserve(c, idx, bytes, GV_SHM_DEVICE, NULL) != GV_OK)
            _exit(1);
        if (die_holding_lock) {
            /* Take the lock and get killed inside it. */
            pthread_mutex_lock(&((struct gv_shm_region *)gv_shm_region(c))->lock.mutex);
            ((struct gv_shm_region *)gv_shm_region(c))->devices[idx].mem_used = 999;
            raise(SIGKILL);
        }
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return pid;
}

static void test_dead_process_usage_reclaimed(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    int idx;
    assert_int_equal(gv_shm_proc_attach(a, getpid(), 0, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx, NULL), GV_OK);
    child_charges(700, false);
    assert_int_equal(gv_shm_mem_used(a, idx), 700);
    /* The dead child's 700 bytes come back when we need them. */
    assert_int_equal(gv_shm_mem_reserve(a, idx, 900, GV_SHM_DEVICE, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_used(a, idx), 900);
    gv_shm_close(a);
}

static void test_owner_dead_holding_lock(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    int idx;
    assert_int_equal(gv_shm_proc_attach(a, getpid(), 0, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    child_charges(200, true);
    /* No deadlock; the corrupted cache is recomputed from the slots
     * (ours 100 + the dead child's 200, until it is reclaimed). */
    assert_int_equal(gv_shm_mem_reserve(a, idx, 10, GV_SHM_DEVICE, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_used(a, idx), 310);
    assert_int_equal(gv_shm_reclaim(a), 1);
    assert_int_equal(gv_shm_mem_used(a, idx), 110);
    gv_shm_close(a);
}

static void test_concurrent_reservations_never_exceed(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    int idx;
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx, NULL), GV_OK);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    enum { KIDS = 6 };
    pid_t kids[KIDS];
    for (int k = 0; k < KIDS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            struct gv_shm *c = NULL;
            int got = 0;
            if (gv_shm_open(path, 0, &c, NULL) == GV_OK &&
                gv_shm_proc_attach(c, getpid(), 0, NULL) == GV_OK)
                while (gv_shm_mem_reserve(c, idx, 7, GV_SHM_DEVICE, NULL) == GV_OK)
                    got++;
            /* Keep the charge until the parent has counted everyone. */
            if (write(pipefd[1], &got, sizeof(got)) != sizeof(got))
                _exit(1);
            pause();
            _exit(0);
        }
    }
    int total = 0;
    for (int k = 0; k < KIDS; k++) {
        int got;
        assert_int_equal(read(pipefd[0], &got, sizeof(got)), (ssize_t)sizeof(got));
        total += got;
    }
    assert_int_equal(total, 1000 / 7);
    assert_true(gv_shm_mem_used(a, idx) <= 1000);
    for (int k = 0; k < KIDS; k++) {
        kill(kids[k], SIGKILL);
        waitpid(kids[k], NULL, 0);
    }
    close(pipefd[0]);
    close(pipefd[1]);
    gv_shm_reclaim(a);
    assert_int_equal(gv_shm_mem_used(a, idx), 0);
    gv_shm_close(a);
}

static void test_private_region(void **state)
{
    (void)state;
    struct gv_shm *p = NULL;
    int idx;
    assert_int_equal(gv_shm_open(NULL, 0, &p, NULL), GV_OK);
    assert_int_equal(gv_shm_proc_attach(p, getpid(), 0, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(p, "GPU-x", &(struct gv_shm_limits){10, 0, 0, 0, 0}, &idx, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_reserve(p, idx, 11, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_reserve(p, idx, 10, GV_SHM_DEVICE, NULL), GV_OK);
    gv_shm_close(p);
}

static void test_oversubscribed_share(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    int idx;
    bool managed = true;
    assert_int_equal(gv_shm_proc_attach(a, getpid(), 0, NULL), GV_OK);
    /* Limit 1000, of which 400 may be device-resident. */
    assert_int_equal(gv_shm_device_attach(a, "GPU-o",
                                          &(struct gv_shm_limits){1000, 5000, 400, 0,
                                                                  GV_SHM_DEV_OVERSUBSCRIBE},
                                          &idx, NULL),
                     GV_OK);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 300, GV_SHM_ANY, &managed), GV_OK);
    assert_false(managed);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 200, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 200, GV_SHM_ANY, &managed), GV_OK);
    assert_true(managed);
    assert_int_equal(gv_shm_region(a)->devices[idx].mem_managed, 200);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 501, GV_SHM_ANY, &managed), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    gv_shm_mem_release(a, idx, 200, true);
    assert_int_equal(gv_shm_region(a)->devices[idx].mem_managed, 0);
    assert_int_equal(gv_shm_mem_used(a, idx), 400);
    /* The card was full for 100 device bytes: recharged as managed in place,
     * the total unchanged, which frees that much of the share. */
    assert_int_equal(gv_shm_mem_to_managed(a, idx, 100), GV_OK);
    assert_int_equal(gv_shm_mem_used(a, idx), 400);
    assert_int_equal(gv_shm_region(a)->devices[idx].mem_managed, 100);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    /* Only device bytes this process holds can be converted. */
    assert_int_equal(gv_shm_mem_to_managed(a, idx, 401), GV_EINVAL);
    assert_int_equal(gv_shm_region(a)->devices[idx].mem_managed, 100);
    gv_shm_mem_release(a, idx, 100, true);
    assert_int_equal(gv_shm_region(a)->devices[idx].mem_managed, 0);
    assert_int_equal(gv_shm_mem_used(a, idx), 400);
    gv_shm_close(a);
}

static void test_reattach_after_exec_reuses_slot(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    int idx;
    assert_int_equal(gv_shm_proc_attach(a, getpid(), 0, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0},
                                          &idx, NULL),
                     GV_OK);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 300, GV_SHM_DEVICE, NULL), GV_OK);
    /* The same process maps the region again, as after an exec. */
    struct gv_shm *b = open_rw();
    assert_int_equal(gv_shm_proc_attach(b, getpid(), 0, NULL), GV_OK);
    assert_int_equal((char *)gv_shm_self(b) - (char *)gv_shm_region(b),
                     (char *)gv_shm_self(a) - (char *)gv_shm_region(a));
    assert_int_equal(gv_shm_mem_used(b, idx), 0);
    int live = 0;
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++)
        live += atomic_load(&gv_shm_region(b)->procs[i].pid) == getpid();
    assert_int_equal(live, 1);
    gv_shm_close(b);
    gv_shm_close(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_and_conflict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rejects_foreign_and_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_process_usage_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_dead_holding_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reservations_never_exceed, setup, teardown),
        cmocka_unit_test(test_private_region),
        cmocka_unit_test_setup_teardown(test_oversubscribed_share, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reattach_after_exec_reuses_slot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
