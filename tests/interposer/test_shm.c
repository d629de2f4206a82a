/* Shared region: creation, validation, limits, slots, crash recovery. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/gv_shm.h"
#include "tests/interposer/shm_testdir.h"


/*
 * Every child a test forks is registered here and killed by teardown, which
 * cmocka runs after a failed assertion too: a failing test leaves no paused
 * children behind.
 */
#define MAX_KIDS 64
static pid_t kids_alive[MAX_KIDS];
static int nkids;

static pid_t spawn(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid > 0 && nkids < MAX_KIDS)
        kids_alive[nkids++] = pid;
    return pid;
}

static void reap_all(void)
{
    for (int k = 0; k < nkids; k++) {
        kill(kids_alive[k], SIGKILL);
        waitpid(kids_alive[k], NULL, 0);
    }
    nkids = 0;
}

static int setup(void **state)
{
    (void)state;
    return shm_testdir_make();
}

static int teardown(void **state)
{
    (void)state;
    reap_all();
    shm_testdir_remove();
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
    /* A reader goes by the region: device 0 is known, the next one is not. */
    uint64_t lim = 0;
    assert_true(gv_shm_limit(ro, 0, &lim, NULL, NULL));
    assert_int_equal(lim, 1000);
    assert_false(gv_shm_limit(ro, 1, &lim, NULL, NULL));
    /* and registers nothing */
    assert_int_equal(gv_shm_proc_attach(ro, getpid(), 0, NULL), GV_EINVAL);
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
    /* A uuid that is missing, empty or too long to store whole is refused:
     * cut short, it could name another device's entry. */
    char longid[GV_SHM_UUID_LEN + 1];
    memset(longid, 'G', GV_SHM_UUID_LEN);
    longid[GV_SHM_UUID_LEN] = '\0';
    const char *bad[] = {NULL, "", longid};
    for (size_t i = 0; i < 3; i++) {
        idx2 = -7;
        assert_int_equal(gv_shm_device_attach(a, bad[i], &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx2, &err), GV_EINVAL);
        assert_non_null(strstr(err.msg, "invalid device uuid"));
        assert_int_equal(idx2, -7);
    }
    assert_int_equal(gv_shm_region(a)->ndevices, 1);
    /* The region holds GV_SHM_MAX_DEVICES devices; one more is refused,
     * not written past the table. */
    for (int d = 1; d < GV_SHM_MAX_DEVICES; d++) {
        char id[32];
        snprintf(id, sizeof(id), "GPU-%d", d);
        assert_int_equal(gv_shm_device_attach(a, id, &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx2, NULL), GV_OK);
        assert_int_equal(idx2, d);
    }
    assert_int_equal(gv_shm_device_attach(a, "GPU-more", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx2, &err), GV_ENOFIT);
    assert_int_equal(gv_shm_region(a)->ndevices, GV_SHM_MAX_DEVICES);
    assert_int_equal(gv_shm_device_find(a, "GPU-more"), -1);
    uint64_t lim = 7;
    assert_false(gv_shm_limit(a, GV_SHM_MAX_DEVICES, &lim, NULL, NULL));
    assert_false(gv_shm_limit(a, -1, &lim, NULL, NULL));
    assert_int_equal(lim, 7);
    gv_shm_close(a);
    /* A read-only opener attaches nothing (its mapping cannot be written). */
    struct gv_shm *ro = NULL;
    assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &ro, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(ro, "GPU-ro", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx2, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "read-only"));
    gv_shm_close(ro);
}

/* The refused-allocation counter: counted by writers, ignored from a
 * read-only mapping and for a device index out of range; readers of a fresh
 * region (or one an older build made, where these bytes were reserved) see 0. */
static void test_oom_counter(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw();
    int idx;
    assert_int_equal(gv_shm_proc_attach(a, getpid(), 1, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx, NULL), GV_OK);
    assert_int_equal(atomic_load(&gv_shm_region(a)->devices[idx].oom_count), 0);
    gv_shm_note_oom(a, idx);
    gv_shm_note_oom(a, idx);
    gv_shm_note_oom(a, -1);
    gv_shm_note_oom(a, GV_SHM_MAX_DEVICES);
    gv_shm_note_oom(NULL, idx);
    struct gv_shm *ro = NULL;
    assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &ro, NULL), GV_OK);
    gv_shm_note_oom(ro, idx); /* a reader never writes */
    assert_int_equal(atomic_load(&gv_shm_region(ro)->devices[idx].oom_count), 2);
    gv_shm_close(ro);
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

/* Leaves the cache half-updated and dies holding the lock. */
static void die_inside(struct gv_shm_region *r, void *arg)
{
    r->devices[*(int *)arg].mem_used = 999;
    raise(SIGKILL);
}

/* Child: attach, charge bytes, then die without cleaning up. */
static pid_t child_charges(uint64_t bytes, bool die_holding_lock)
{
    pid_t pid = spawn();
    if (pid == 0) {
        struct gv_shm *c = NULL;
        int idx;
        if (gv_shm_open(path, GV_SHM_CREATE, &c, NULL) != GV_OK ||
            gv_shm_proc_attach(c, getpid(), 0, NULL) != GV_OK ||
            gv_shm_device_attach(c, "GPU-a", &(struct gv_shm_limits){1000, 5000, 0, 0, 0}, &idx, NULL) != GV_OK ||
            gv_shm_mem_reserve(c, idx, bytes, GV_SHM_DEVICE, NULL) != GV_OK)
            _exit(1);
        if (die_holding_lock) /* take the lock and get killed inside it */
            gv_shm_with_lock(c, die_inside, &idx);
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
        kids[k] = spawn();
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

/* --- creation: concurrent first starts, crashes, half-made files ---------- */

static const struct gv_shm_limits lim1000 = {1000, 5000, 0, 0, 0};

/* This process attached to the region, GPU-a registered (limit 1000), charged bytes. */
static struct gv_shm *attached(int *idx, uint64_t bytes)
{
    struct gv_shm *a = open_rw();
    assert_int_equal(gv_shm_proc_attach(a, getpid(), 0, NULL), GV_OK);
    assert_int_equal(gv_shm_device_attach(a, "GPU-a", &lim1000, idx, NULL), GV_OK);
    if (bytes != 0)
        assert_int_equal(gv_shm_mem_reserve(a, *idx, bytes, GV_SHM_DEVICE, NULL), GV_OK);
    return a;
}

/* What a process of the container does first: open, attach, register, charge. */
static int first_start(uint64_t bytes)
{
    struct gv_shm *c = NULL;
    struct gv_error err;
    int idx;
    if (gv_shm_open(path, GV_SHM_CREATE, &c, &err) != GV_OK)
        return 10 + (int)err.code;
    if (gv_shm_proc_attach(c, getpid(), 0, NULL) != GV_OK)
        return 2;
    if (gv_shm_device_attach(c, "GPU-a", &lim1000, &idx, NULL) != GV_OK)
        return 3;
    if (gv_shm_mem_reserve(c, idx, bytes, GV_SHM_DEVICE, NULL) != GV_OK)
        return 4;
    return 0;
}

static int env_count(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v != NULL && atoi(v) > 0 ? atoi(v) : dflt;
}

/*
 * Eight processes start at once on a fresh region (torchrun), released
 * together by closing a pipe.  Every one must open, attach and charge, and
 * the charges must all land in one region.  GV_SHM_STRESS_TRIALS sets the
 * number of trials (make test runs 300; 1,000 reported in the docs).
 */
static void test_concurrent_first_starts(void **state)
{
    (void)state;
    int trials = env_count("GV_SHM_STRESS_TRIALS", 300), failures = 0;
    enum { N = 8 };
    for (int t = 0; t < trials; t++) {
        empty_dir();
        int go[2], done[2];
        assert_int_equal(pipe(go), 0);
        assert_int_equal(pipe(done), 0);
        pid_t pids[N];
        for (int k = 0; k < N; k++) {
            pids[k] = spawn();
            assert_true(pids[k] >= 0);
            if (pids[k] == 0) {
                char c;
                close(go[1]);
                if (read(go[0], &c, 1) != 0)
                    _exit(90);
                int rc = first_start(100);
                /* Hold the charge until everyone has been counted. */
                if (write(done[1], &rc, sizeof(rc)) != sizeof(rc))
                    _exit(91);
                pause();
                _exit(0);
            }
        }
        close(go[0]);
        close(go[1]); /* go */
        for (int k = 0; k < N; k++) {
            int rc = -1;
            assert_int_equal(read(done[0], &rc, sizeof(rc)), (ssize_t)sizeof(rc));
            if (rc != 0 && failures++ < 5)
                print_message("trial %d: a first start failed with %d\n", t, rc);
        }
        struct gv_shm *ro = NULL;
        assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &ro, NULL), GV_OK);
        uint64_t used = gv_shm_mem_used(ro, 0);
        gv_shm_close(ro);
        if (used != N * 100 && failures++ < 5)
            print_message("trial %d: %llu bytes charged in the region, expected %d\n", t,
                          (unsigned long long)used, N * 100);
        reap_all();
        close(done[0]);
        close(done[1]);
    }
    assert_int_equal(failures, 0);
}

static int crash_step;
static void kill_at(int step)
{
    if (step == crash_step)
        raise(SIGKILL);
}

/*
 * A creator killed at any point of creation, at each step of it in turn and
 * at random moments, never leaves a region the next process cannot use.
 * GV_SHM_CRASH_TRIALS sets the count (make test runs 300).
 */
static void test_killed_during_creation(void **state)
{
    (void)state;
    int trials = env_count("GV_SHM_CRASH_TRIALS", 300), failures = 0;
    srand(12345);
    for (int t = 0; t < trials; t++) {
        empty_dir();
        pid_t pid = spawn();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (t % 2 == 0) {
                crash_step = 1 + (t / 2) % 6; /* every step of creation in turn */
                gv_shm_crash_hook = kill_at;
            }
            _exit(first_start(100) == 0 ? 0 : 1);
        }
        if (t % 2 == 1) {
            /* A random moment: creation takes some tens of microseconds. */
            struct timespec ts = {0, (long)(rand() % 400) * 1000L};
            nanosleep(&ts, NULL);
            kill(pid, SIGKILL);
        }
        int st;
        waitpid(pid, &st, 0);
        nkids = 0;
        /* The next process always starts (in a child: the crash hook and
         * slots stay out of this process). */
        pid_t next = spawn();
        if (next == 0)
            _exit(first_start(200));
        waitpid(next, &st, 0);
        nkids = 0;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && failures++ < 5)
            print_message("trial %d: the next process failed (status 0x%x)\n", t, st);
    }
    assert_int_equal(failures, 0);
}

/* Files older builds left when killed mid-creation are replaced, not refused. */
static void test_half_made_file_replaced(void **state)
{
    (void)state;
    struct gv_shm *shm = NULL;
    struct gv_error err;
    for (int kind = 0; kind < 2; kind++) {
        int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
        assert_true(fd >= 0);
        if (kind == 1) /* full size, never given its magic */
            assert_int_equal(ftruncate(fd, sizeof(struct gv_shm_region)), 0);
        close(fd);
        assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &shm, &err), GV_EUNAVAILABLE);
        assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_OK);
        assert_int_equal(gv_shm_region(shm)->magic, GV_SHM_MAGIC);
        gv_shm_close(shm);
        unlink(path);
    }
    /* A region of this version whose magic was wiped was edited, not left
     * half-made (this build never writes one in place): refused, not reset. */
    struct gv_shm *a = open_rw();
    gv_shm_close(a);
    int fd = open(path, O_RDWR);
    uint64_t zero = 0;
    assert_int_equal(pwrite(fd, &zero, sizeof(zero), 0), (ssize_t)sizeof(zero));
    close(fd);
    assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "not a gpuvisor shared region"));
}

/* --- the region lock: corrupt words and stuck owners never hang ----------- */

static void write_lock_word(struct gv_shm *shm, uint32_t word, uint8_t fill)
{
    struct gv_shm_region *r = (struct gv_shm_region *)gv_shm_region(shm);
    memset(r->lock.bytes, fill, sizeof(r->lock.bytes));
    memcpy(r->lock.bytes, &word, sizeof(word));
}

static void test_corrupt_lock_word_recovered(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 100);
    gv_shm_set_lock_timeout(a, 200);
    /* Owned by a thread that is gone, without the kernel's owner-died mark. */
    pid_t gone = spawn();
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0);
    nkids = 0;
    write_lock_word(a, (uint32_t)gone, 0);
    gv_status st_ = gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL);
    if (st_ != GV_OK)
        print_message("lock: %s\n", gv_shm_lock_error(a));
    assert_int_equal(st_, GV_OK);
    /* Garbage everywhere (kind, owner, counters). */
    write_lock_word(a, 0xffffffffu, 0xff);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    write_lock_word(a, 0x12345678u, 0x5a);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_used(a, idx), 400);
    gv_shm_close(a);
}

static void stop_inside(struct gv_shm_region *r, void *arg)
{
    (void)r;
    (void)arg;
    raise(SIGSTOP);
}

static void test_stuck_lock_holder_fails_closed(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 0);
    gv_shm_set_lock_timeout(a, 200);
    pid_t holder = spawn();
    if (holder == 0) {
        struct gv_shm *c = NULL;
        if (gv_shm_open(path, 0, &c, NULL) != GV_OK)
            _exit(1);
        gv_shm_with_lock(c, stop_inside, NULL);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(holder, &st, WUNTRACED), holder);
    assert_true(WIFSTOPPED(st));
    /* A live holder that never lets go: a clear error, in bounded time. */
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_EIO);
    assert_non_null(strstr(gv_shm_lock_error(a), "held by live thread"));
    /* So does attaching another device: nothing written without the lock. */
    int idx2 = -1;
    struct gv_error err;
    assert_int_equal(gv_shm_device_attach(a, "GPU-b", &lim1000, &idx2, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "cannot lock"));
    assert_int_equal(gv_shm_device_find(a, "GPU-b"), -1);
    /* Killed, it hands the lock over (EOWNERDEAD). */
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    nkids = 0;
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    gv_shm_close(a);
}

/* --- dead-process reclaim and pid reuse ------------------------------------ */

/* A child that attaches, charges bytes, reports, and then stays alive
 * (stay) or exits without being reaped (a zombie until the test ends). */
static pid_t charging_child(uint64_t bytes, bool stay)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = spawn();
    if (pid == 0) {
        struct gv_shm *c = NULL;
        int idx, ok = gv_shm_open(path, 0, &c, NULL) == GV_OK &&
                      gv_shm_proc_attach(c, getpid(), 0, NULL) == GV_OK &&
                      gv_shm_device_attach(c, "GPU-a", &lim1000, &idx, NULL) == GV_OK &&
                      gv_shm_mem_reserve(c, idx, bytes, GV_SHM_DEVICE, NULL) == GV_OK;
        if (write(p[1], &ok, sizeof(ok)) != sizeof(ok))
            _exit(1);
        if (stay)
            pause();
        _exit(0);
    }
    int ok = 0;
    assert_int_equal(read(p[0], &ok, sizeof(ok)), (ssize_t)sizeof(ok));
    assert_true(ok);
    close(p[0]);
    close(p[1]);
    return pid;
}

static struct gv_shm_proc *slot_of_pid(struct gv_shm *shm, pid_t pid)
{
    struct gv_shm_region *r = (struct gv_shm_region *)gv_shm_region(shm);
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++)
        if (atomic_load(&r->procs[i].pid) == pid)
            return &r->procs[i];
    return NULL;
}

/*
 * A process that exited but was not reaped yet (a zombie: its parent, the
 * container's shell, waits later or never) holds nothing: its charges come
 * back although its pid still answers kill(0).  Only a writer reclaims, and
 * a read-only opener changes nothing.
 */
static void test_zombie_usage_reclaimed(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 0);
    pid_t pid = charging_child(700, false);
    /* exited, not reaped: wait until /proc shows it a zombie */
    char st = 0;
    for (int i = 0; i < 2000 && st != 'Z'; i++) {
        char f[64], buf[512];
        snprintf(f, sizeof(f), "/proc/%d/stat", (int)pid);
        FILE *fp = fopen(f, "r");
        if (fp != NULL) {
            if (fgets(buf, sizeof(buf), fp) != NULL && strrchr(buf, ')') != NULL)
                st = strrchr(buf, ')')[2];
            fclose(fp);
        }
        if (st != 'Z')
            usleep(1000);
    }
    assert_int_equal(st, 'Z');
    assert_int_equal(kill(pid, 0), 0);
    assert_int_equal(gv_shm_mem_used(a, idx), 700);
    struct gv_shm *ro = NULL;
    assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &ro, NULL), GV_OK);
    assert_int_equal(gv_shm_reclaim(ro), 0);
    assert_int_equal(gv_shm_reclaim(NULL), 0);
    gv_shm_close(ro);
    assert_int_equal(gv_shm_mem_used(a, idx), 700);
    assert_int_equal(gv_shm_reclaim(a), 1);
    assert_int_equal(gv_shm_mem_used(a, idx), 0);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 1000, GV_SHM_DEVICE, NULL), GV_OK);
    gv_shm_close(a);
}

/*
 * A region a second user can open: moved out of the suite's scratch space
 * (0700) into a fresh /tmp directory (tmpl, "...XXXXXX") both can reach,
 * created with the given limit and left 0666.  Skips the test without root
 * (running a process as nobody needs it).
 */
static struct gv_shm *attached_for_two_users(const char *tmpl, int *idx, uint64_t limit)
{
    if (geteuid() != 0) {
        print_message("# needs root (a process of another user)\n");
        skip();
    }
    assert_int_equal(rmdir(dir), 0);
    snprintf(dir, sizeof(dir), "%s", tmpl);
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/region.cache", dir);
    assert_int_equal(chmod(dir, 0755), 0);
    struct gv_shm *a = attached(idx, limit);
    assert_int_equal(chmod(path, 0666), 0);
    return a;
}

/*
 * A live process of another user: kill(pid, 0) answers EPERM, not ESRCH,
 * and that is alive.  A container may run its processes as several users
 * (root and an application user); one of them taking the region's reclaim
 * for a death would free the other's charges and over-commit the GPU.
 * Needs root to run the second process as nobody.
 */
static void test_other_users_live_process_kept(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached_for_two_users("/tmp/gv-shm-users.XXXXXX", &idx, 700);
    pid_t pid = spawn();
    if (pid == 0) {
        struct gv_shm *c = NULL;
        int ci;
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(10);
        if (kill(getppid(), 0) == 0 || errno != EPERM)
            _exit(11); /* the case this test is about */
        if (gv_shm_open(path, 0, &c, NULL) != GV_OK ||
            gv_shm_proc_attach(c, getpid(), 0, NULL) != GV_OK ||
            gv_shm_device_attach(c, "GPU-a", &lim1000, &ci, NULL) != GV_OK)
            _exit(12);
        if (gv_shm_reclaim(c) != 0)
            _exit(13);
        if (gv_shm_mem_reserve(c, ci, 400, GV_SHM_DEVICE, NULL) != GV_ENOFIT)
            _exit(14);
        _exit(gv_shm_mem_reserve(c, ci, 300, GV_SHM_DEVICE, NULL) == GV_OK ? 0 : 15);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(gv_shm_mem_held(a, idx), 700);
    gv_shm_close(a);
}

/*
 * The same for the region lock: a live holder of another user (kill(tid, 0)
 * answers EPERM to the waiter) is alive, and a waiter that took EPERM for a
 * death would take the lock over and update the totals beside it.  The
 * waiter fails closed instead.  Needs root for the second user.
 */
static void test_other_users_lock_holder_kept(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached_for_two_users("/tmp/gv-shm-lock.XXXXXX", &idx, 0);
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t waiter = spawn();
    if (waiter == 0) {
        struct gv_shm *c = NULL;
        char b = 0;
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(10);
        if (gv_shm_open(path, 0, &c, NULL) != GV_OK)
            _exit(12);
        gv_shm_set_lock_timeout(c, 300);
        pid_t hp; /* the go: the holder's pid, once it holds the lock */
        if (write(ready[1], &b, 1) != 1 || read(go[0], &hp, sizeof(hp)) != (ssize_t)sizeof(hp))
            _exit(13);
        if (kill(hp, 0) == 0 || errno != EPERM)
            _exit(11); /* the case this test is about */
        int ci = -1;
        struct gv_error err = {0};
        gv_status rc = gv_shm_device_attach(c, "GPU-b", &lim1000, &ci, &err);
        if (rc == GV_OK)
            _exit(14); /* took the lock of a live holder */
        _exit(strstr(gv_shm_lock_error(c), "held by live thread") != NULL ? 0 : 15);
    }
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    pid_t holder = spawn();
    if (holder == 0) {
        struct gv_shm *c = NULL;
        if (gv_shm_open(path, 0, &c, NULL) != GV_OK)
            _exit(1);
        gv_shm_with_lock(c, stop_inside, NULL);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(holder, &st, WUNTRACED), holder);
    assert_true(WIFSTOPPED(st));
    assert_int_equal(write(go[1], &holder, sizeof(holder)), (ssize_t)sizeof(holder));
    assert_int_equal(waitpid(waiter, &st, 0), waiter);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) != 0)
        fail_msg("waiter of another user: exit %d", WEXITSTATUS(st));
    assert_int_equal(gv_shm_device_find(a, "GPU-b"), -1); /* nothing written beside it */
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    nkids = 0;
    for (int k = 0; k < 2; k++) {
        close(ready[k]);
        close(go[k]);
    }
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    gv_shm_close(a);
}

/*
 * A slot whose pid is alive but belongs to a process with another start
 * time (the pid was reused after the slot's owner died) is reclaimed; the
 * same pid with its own start time is not.
 */
static void test_pid_reuse_detected_by_start_time(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 0);
    pid_t live = charging_child(700, true);
    /* Alive, its own start time: its charge stands. */
    assert_int_equal(gv_shm_mem_reserve(a, idx, 900, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_reclaim(a), 0);
    /* The slot now claims a start time the live process does not have. */
    struct gv_shm_proc *p = slot_of_pid(a, live);
    assert_non_null(p);
    p->start_time += 1;
    assert_int_equal(gv_shm_mem_reserve(a, idx, 900, GV_SHM_DEVICE, NULL), GV_OK);
    assert_null(slot_of_pid(a, live));
    assert_int_equal(gv_shm_mem_used(a, idx), 900);
    gv_shm_close(a);
}

/* --- a hostile container writing its region ------------------------------- */

static void test_region_limit_edit_never_raises_limit(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 600);
    struct gv_shm_region *r = (struct gv_shm_region *)gv_shm_region(a);
    uint64_t edits[] = {0, UINT64_MAX, 1ull << 40};
    for (size_t e = 0; e < sizeof(edits) / sizeof(edits[0]); e++) {
        r->devices[idx].mem_limit = edits[e];
        atomic_store(&r->devices[idx].mem_used, 0);
        atomic_store(&gv_shm_self(a)->mem_used[idx], 0); /* our own slot, too */
        uint64_t limit;
        assert_true(gv_shm_limit(a, idx, &limit, NULL, NULL));
        assert_int_equal(limit, edits[e] == 0 || edits[e] > 1000 ? 1000 : edits[e]);
        assert_int_equal(gv_shm_mem_reserve(a, idx, 401, GV_SHM_DEVICE, NULL), GV_ENOFIT);
        assert_int_equal(gv_shm_mem_used(a, idx), 600);
    }
    /* A lower limit in the region is honoured (min of both). */
    r->devices[idx].mem_limit = 650;
    assert_int_equal(gv_shm_mem_reserve(a, idx, 51, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 50, GV_SHM_DEVICE, NULL), GV_OK);
    gv_shm_close(a);
}

/*
 * A process of the container started without a limit (its configuration
 * edited, a variable unset) attaches after the first one fixed the device's
 * limit: refused as a conflict, and it is held to the region's limit all
 * the same, for the whole limit and for the device-resident share.  0 means
 * "no limit" in both places, so the smaller of the two must never be 0.
 */
/* Opens the region as a new process of the container and attaches GPU-u
 * with the given memory limit and share (oversubscribed). */
static gv_status open_with_limit(struct gv_shm **s, uint64_t limit, uint64_t share, int *idx)
{
    *s = open_rw();
    assert_int_equal(gv_shm_proc_attach(*s, getpid(), 0, NULL), GV_OK);
    struct gv_shm_limits l = {limit, 5000, share, 0, GV_SHM_DEV_OVERSUBSCRIBE};
    return gv_shm_device_attach(*s, "GPU-u", &l, idx, NULL);
}

static void test_unlimited_process_gets_region_limit(void **state)
{
    (void)state;
    int idx, idx2;
    struct gv_shm *a, *b;
    assert_int_equal(open_with_limit(&a, 1000, 400, &idx), GV_OK);
    gv_shm_close(a);
    assert_int_equal(open_with_limit(&b, 0, 0, &idx2), GV_ECONFLICT);
    assert_int_equal(idx2, idx);
    uint64_t limit = 0, share = 0;
    assert_true(gv_shm_limit(b, idx2, &limit, &share, NULL));
    assert_int_equal(limit, 1000);
    assert_int_equal(share, 400);
    assert_int_equal(gv_shm_mem_reserve(b, idx2, 401, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_reserve(b, idx2, 1001, GV_SHM_ANY, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_used(b, idx2), 0);
    gv_shm_close(b);
}

/*
 * Our slot freed behind our back and taken by another process: our charges
 * still count (we take a new slot and rewrite it from our own record).
 */
static void test_slot_stolen_keeps_our_charges(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 600);
    atomic_store(&gv_shm_self(a)->pid, 0);
    charging_child(300, true); /* takes the freed slot, clearing it */
    assert_int_equal(gv_shm_mem_reserve(a, idx, 200, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 100, GV_SHM_DEVICE, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_used(a, idx), 1000);
    gv_shm_close(a);
}

/*
 * Every slot taken by a hostile write (ours included) with live pids that
 * are not ours: no slot to charge to, so a reservation is refused, a
 * release and a conversion change nothing, and nothing crashes.
 */
static void test_all_slots_taken_fails_closed(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 600);
    struct gv_shm_region *r = (struct gv_shm_region *)gv_shm_region(a);
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
        r->procs[i].start_time = 0;
        atomic_store(&r->procs[i].mem_used[idx], 0);
        atomic_store(&r->procs[i].pid, (int32_t)getppid());
    }
    assert_int_equal(gv_shm_mem_reserve(a, idx, 1, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    gv_shm_mem_release(a, idx, 100, false);
    assert_int_equal(gv_shm_mem_held(a, idx), 500);
    assert_int_equal(gv_shm_mem_to_managed(a, idx, 100), GV_OK);
    /* One slot free again: ours is rewritten from our record. */
    atomic_store(&r->procs[7].pid, 0);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 500, GV_SHM_DEVICE, NULL), GV_OK);
    assert_int_equal(gv_shm_mem_reserve(a, idx, 1, GV_SHM_DEVICE, NULL), GV_ENOFIT);
    assert_int_equal(atomic_load(&r->procs[7].mem_used[idx]), 1000);
    gv_shm_close(a);
}

/* A device index at or past the table, or negative, is refused by every
 * call that takes one, and reads as nothing: the interposer derives it
 * from a CUDA ordinal, and a wrong one must not reach past the arrays. */
static void test_device_index_bounds(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 300); /* our peak and held are 300 */
    const int bad[] = {-1, GV_SHM_MAX_DEVICES, GV_SHM_MAX_DEVICES + 1};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int d = bad[i];
        assert_int_not_equal(gv_shm_mem_reserve(a, d, 1, GV_SHM_DEVICE, NULL), GV_OK);
        assert_int_equal(gv_shm_mem_to_managed(a, d, 1), GV_EINVAL);
        gv_shm_mem_release(a, d, 1, false);
        assert_int_equal(gv_shm_mem_used(a, d), 0);
        assert_int_equal(gv_shm_mem_held(a, d), 0);
    }
    assert_int_equal(gv_shm_mem_held(a, idx), 300);
    assert_int_equal(gv_shm_mem_used(a, idx), 300);
    gv_shm_close(a);
}

/* Context creation is serialized per region (gv_shm_ctx_serialize): a
 * second opener waits, and gives up with an error in bounded time while
 * the first holds it; once released, it gets it.  Read-only openers never
 * take it. */
static void test_ctx_serialize_excludes(void **state)
{
    (void)state;
    struct gv_shm *a = open_rw(), *b = open_rw(), *ro = NULL;
    assert_int_equal(gv_shm_ctx_serialize(a), GV_OK);
    gv_shm_set_lock_timeout(b, 50);
    assert_int_equal(gv_shm_ctx_serialize(b), GV_EIO);
    assert_int_equal(gv_shm_open(path, GV_SHM_READONLY, &ro, NULL), GV_OK);
    assert_int_equal(gv_shm_ctx_serialize(ro), GV_OK);
    gv_shm_ctx_unserialize(ro);
    assert_int_equal(gv_shm_ctx_serialize(b), GV_EIO);
    gv_shm_ctx_unserialize(a);
    assert_int_equal(gv_shm_ctx_serialize(b), GV_OK);
    gv_shm_set_lock_timeout(a, 50);
    assert_int_equal(gv_shm_ctx_serialize(a), GV_EIO);
    gv_shm_ctx_unserialize(b);
    gv_shm_close(ro);
    gv_shm_close(b);
    gv_shm_close(a);
}

/* A region deleted (or replaced) under a process: it reserves nothing more. */
static void test_deleted_region_stops_reservations(void **state)
{
    (void)state;
    int idx;
    struct gv_shm *a = attached(&idx, 600);
    assert_false(gv_shm_replaced(a));
    unlink(path);
    assert_true(gv_shm_replaced(a));
    assert_int_equal(gv_shm_mem_reserve(a, idx, 1, GV_SHM_DEVICE, NULL), GV_EIO);
    assert_non_null(strstr(gv_shm_lock_error(a), "deleted or replaced"));
    /* Recreated by someone else: still not ours. */
    struct gv_shm *b = open_rw();
    assert_true(gv_shm_replaced(a));
    assert_int_equal(gv_shm_mem_reserve(a, idx, 1, GV_SHM_DEVICE, NULL), GV_EIO);
    /* Releases still work (credited to the old region). */
    gv_shm_mem_release(a, idx, 600, false);
    assert_int_equal(gv_shm_mem_held(a, idx), 0);
    gv_shm_close(b);
    gv_shm_close(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_and_conflict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_counter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rejects_foreign_and_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_process_usage_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zombie_usage_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_dead_holding_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reservations_never_exceed, setup, teardown),
        cmocka_unit_test(test_private_region),
        cmocka_unit_test_setup_teardown(test_oversubscribed_share, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reattach_after_exec_reuses_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_first_starts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_during_creation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_made_file_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_lock_word_recovered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stuck_lock_holder_fails_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_users_live_process_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_users_lock_holder_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pid_reuse_detected_by_start_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_region_limit_edit_never_raises_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unlimited_process_gets_region_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slot_stolen_keeps_our_charges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_slots_taken_fails_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_index_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ctx_serialize_excludes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deleted_region_stops_reservations, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
