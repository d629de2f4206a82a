/*
 * The agent's event loop (src/node/loop/loop.c) on its own: which callback
 * an fd's events reach after others are added, modified and removed
 * (removal from inside a callback included), timers in due order (equal
 * ones in the order set) and cancelled, posts from another thread, a run
 * that lasts until stopped, and a wait a signal interrupts.  The gRPC server, the
 * registrar and the agent's signal and config watches all share one loop,
 * so an fd's events going to another fd's callback would be silent chaos
 * (a sweep found no test holding it: docs/contributing.md, "Sweeps").
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cmocka.h>

#include "node/loop/gv_loop.h"

#define N 4

struct rec {
    int fd;         /* the fd this watch was added for */
    int calls;      /* callbacks it got */
    int wrong;      /* callbacks for another fd */
    uint32_t last;  /* events of the last one */
    bool drain;     /* read what is there */
    bool self_del;  /* remove its own watch on the first call */
};

static void on_fd(struct gv_loop *loop, int fd, uint32_t events, void *ud)
{
    struct rec *r = ud;
    r->calls++;
    r->last = events;
    if (fd != r->fd)
        r->wrong++;
    if (r->drain) {
        char buf[64];
        while (read(fd, buf, sizeof(buf)) > 0) {
        }
    }
    if (r->self_del)
        gv_loop_del_fd(loop, fd);
}

static int fcntl_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void make_pipes(int p[N][2])
{
    for (int i = 0; i < N; i++) {
        assert_int_equal(pipe(p[i]), 0);
        /* non-blocking reads: drain stops at empty */
        assert_int_equal(fcntl_nonblock(p[i][0]), 0);
    }
}

static void close_pipes(int p[N][2])
{
    for (int i = 0; i < N; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
}

/* N pipes, their read ends watched for EPOLLIN, each with its record;
 * self_del_even: the even ones remove themselves on their first event
 * (unread), the others drain what they get. */
static void watch_pipes(struct gv_loop *loop, int p[N][2], struct rec r[N], bool self_del_even)
{
    make_pipes(p);
    memset(r, 0, N * sizeof(r[0]));
    for (int i = 0; i < N; i++) {
        r[i].fd = p[i][0];
        r[i].self_del = self_del_even && i % 2 == 0;
        r[i].drain = !r[i].self_del;
        assert_int_equal(gv_loop_add_fd(loop, p[i][0], EPOLLIN, on_fd, &r[i], NULL), GV_OK);
    }
}

/* A byte into every pipe, then a few rounds of the loop without waiting. */
static void ping_and_run(struct gv_loop *loop, int p[N][2])
{
    for (int i = 0; i < N; i++)
        assert_int_equal(write(p[i][1], "x", 1), 1);
    for (int round = 0; round < 3; round++)
        assert_int_equal(gv_loop_run_once(loop, 0, NULL), GV_OK);
}

static void test_fd_events_reach_their_own_callback(void **state)
{
    (void)state;
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    int p[N][2];
    struct rec r[N];
    watch_pipes(loop, p, r, false);
    ping_and_run(loop, p);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].calls, 1);
        assert_int_equal(r[i].wrong, 0);
    }
    /* remove one in the middle of the list: the others keep theirs */
    gv_loop_del_fd(loop, p[1][0]);
    gv_loop_del_fd(loop, p[1][0]); /* twice: a no-op */
    ping_and_run(loop, p);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].calls, i == 1 ? 1 : 2);
        assert_int_equal(r[i].wrong, 0);
    }
    /* watch the write end of pipe 2 with no events, then for EPOLLOUT: only
     * its own record hears of it, and with EPOLLOUT */
    struct rec w = {.fd = p[2][1]};
    assert_int_equal(gv_loop_add_fd(loop, p[2][1], 0, on_fd, &w, NULL), GV_OK);
    assert_int_equal(gv_loop_run_once(loop, 0, NULL), GV_OK);
    assert_int_equal(w.calls, 0);
    assert_int_equal(gv_loop_mod_fd(loop, p[2][1], EPOLLOUT, NULL), GV_OK);
    assert_int_equal(gv_loop_run_once(loop, 0, NULL), GV_OK);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.wrong, 0);
    assert_true(w.last & EPOLLOUT);
    for (int i = 0; i < N; i++)
        assert_int_equal(r[i].wrong, 0);
    /* an fd the loop does not watch (or no longer) */
    struct gv_error err = {0};
    assert_int_equal(gv_loop_mod_fd(loop, p[1][0], EPOLLIN, &err), GV_ENOTFOUND);
    gv_loop_free(loop);
    close_pipes(p);
}

static void test_delete_from_own_callback(void **state)
{
    (void)state;
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    int p[N][2];
    struct rec r[N];
    watch_pipes(loop, p, r, true); /* 0 and 2 leave on their first event, unread */
    ping_and_run(loop, p);
    ping_and_run(loop, p);
    /* level-triggered and still unread: a watch still there would fire again */
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].calls, r[i].self_del ? 1 : 2);
        assert_int_equal(r[i].wrong, 0);
    }
    gv_loop_free(loop);
    close_pipes(p);
}

static int order[8], n_order;

static void on_timer(struct gv_loop *loop, void *ud)
{
    (void)loop;
    order[n_order++] = (int)(intptr_t)ud;
}

static void test_timers_in_due_order_and_cancelled(void **state)
{
    (void)state;
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    n_order = 0;
    uint64_t a = gv_loop_timer(loop, 30, on_timer, (void *)(intptr_t)3);
    uint64_t b = gv_loop_timer(loop, 10, on_timer, (void *)(intptr_t)1);
    uint64_t c = gv_loop_timer(loop, 20, on_timer, (void *)(intptr_t)2);
    uint64_t d = gv_loop_timer(loop, 15, on_timer, (void *)(intptr_t)9);
    assert_true(a != 0 && b != 0 && c != 0 && d != 0 && a != b && b != c && c != d);
    gv_loop_timer_cancel(loop, d);
    int64_t until = gv_loop_now_ms() + 5000;
    while (n_order < 3 && gv_loop_now_ms() < until)
        assert_int_equal(gv_loop_run_once(loop, 50, NULL), GV_OK);
    assert_int_equal(n_order, 3);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 3);
    gv_loop_free(loop);
}

struct poster {
    struct gv_loop *loop;
    int ran;
};

static void on_post(struct gv_loop *loop, void *ud)
{
    (void)loop;
    ((struct poster *)ud)->ran++;
}

static void *post_thread(void *ud)
{
    struct poster *p = ud;
    for (int i = 0; i < 5; i++)
        if (!gv_loop_post(p->loop, on_post, p))
            return NULL;
    return NULL;
}

static void test_posts_from_another_thread(void **state)
{
    (void)state;
    struct poster p = {0};
    assert_int_equal(gv_loop_new(&p.loop, NULL), GV_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, post_thread, &p), 0);
    pthread_join(t, NULL);
    int64_t until = gv_loop_now_ms() + 5000;
    while (p.ran < 5 && gv_loop_now_ms() < until)
        assert_int_equal(gv_loop_run_once(p.loop, 50, NULL), GV_OK);
    assert_int_equal(p.ran, 5);
    gv_loop_free(p.loop);
}

/* Timers set for the same time run in the order they were set. */
static void test_equal_timers_in_set_order(void **state)
{
    (void)state;
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    n_order = 0;
    for (int i = 1; i <= 4; i++)
        gv_loop_timer(loop, 0, on_timer, (void *)(intptr_t)i);
    int64_t until = gv_loop_now_ms() + 5000;
    while (n_order < 4 && gv_loop_now_ms() < until)
        assert_int_equal(gv_loop_run_once(loop, 10, NULL), GV_OK);
    assert_int_equal(n_order, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(order[i], i + 1);
    gv_loop_free(loop);
}

static void on_stop(struct gv_loop *loop, void *ud)
{
    *(int *)ud += 1;
    gv_loop_stop(loop);
}

/* gv_loop_run keeps going until gv_loop_stop (here from a timer), and can
 * run again afterwards. */
static void test_run_until_stopped(void **state)
{
    (void)state;
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    for (int round = 0; round < 2; round++) {
        int stopped = 0;
        n_order = 0;
        gv_loop_timer(loop, 5, on_timer, (void *)(intptr_t)1);
        gv_loop_timer(loop, 40, on_stop, &stopped);
        assert_int_equal(gv_loop_run(loop, NULL), GV_OK);
        assert_int_equal(n_order, 1);
        assert_int_equal(stopped, 1);
    }
    gv_loop_free(loop);
}

static void on_usr1(int sig)
{
    (void)sig;
}

struct interrupter {
    pthread_t target;
};

static void *interrupt_thread(void *ud)
{
    struct interrupter *in = ud;
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    pthread_kill(in->target, SIGUSR1);
    return NULL;
}

/* A signal landing while the loop waits (EINTR: a handler without
 * SA_RESTART, or a stop and continue) is no error: the loop goes on. */
static void test_interrupted_wait_is_no_error(void **state)
{
    (void)state;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1; /* no SA_RESTART: epoll_wait fails with EINTR */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    struct interrupter in = {pthread_self()};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, interrupt_thread, &in), 0);
    struct gv_error err = {0};
    assert_int_equal(gv_loop_run_once(loop, 2000, &err), GV_OK);
    pthread_join(t, NULL);
    gv_loop_free(loop);
    sigaction(SIGUSR1, &old, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_events_reach_their_own_callback),
        cmocka_unit_test(test_delete_from_own_callback),
        cmocka_unit_test(test_timers_in_due_order_and_cancelled),
        cmocka_unit_test(test_posts_from_another_thread),
        cmocka_unit_test(test_equal_timers_in_set_order),
        cmocka_unit_test(test_run_until_stopped),
        cmocka_unit_test(test_interrupted_wait_is_no_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
