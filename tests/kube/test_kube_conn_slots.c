/*
 * The transport's connection slots (src/kube/conn_slots.c) and the cap they
 * put on connections (src/kube/http.c):
 *   - never more holders than slots, under many threads taking and giving;
 *   - first come, first served: waiters get the slot in arrival order;
 *   - a waiter gives up at its deadline, leaves the line, and the slot it
 *     was not given goes to the next waiter (none lost, none doubled);
 *   - 200 concurrent requests through the real transport against a loopback
 *     server open at most 32 connections (before: every request that waited
 *     2 s opened its own, a TLS handshake each against kube-apiserver).
 * Randomised sleeps take their seed from GV_TEST_SEED (else the clock) and
 * print it.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/gv_buf.h"
#include "kube/kube_http.h"

static unsigned seed;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* *most = max(*most, v), lock-free */
static void atomic_max(atomic_int *most, int v)
{
    int m = atomic_load(most);
    while (v > m && !atomic_compare_exchange_weak(most, &m, v))
        ;
}

static void wait_waiting(struct gv_slots *q, int n)
{
    for (int i = 0; i < 5000; i++) {
        struct gv_slots_stats st;
        int waiting = 0;
        gv_slots_get_stats(q, &st, NULL, &waiting);
        if (waiting == n)
            return;
        usleep(1000);
    }
    fail_msg("never %d waiters", n);
}

/* ------------------------------------------------------------------ bound */

struct bound_ctx {
    struct gv_slots *q;
    atomic_int holders, most, done;
};

struct bound_arg {
    struct bound_ctx *c;
    unsigned seed;
};

static void *bound_worker(void *ud)
{
    struct bound_arg *a = ud;
    struct bound_ctx *c = a->c;
    unsigned r = a->seed;
    for (int i = 0; i < 20; i++) {
        if (!gv_slots_take(c->q, 0))
            return NULL;
        atomic_max(&c->most, atomic_fetch_add(&c->holders, 1) + 1);
        usleep((useconds_t)(rand_r(&r) % 300));
        atomic_fetch_sub(&c->holders, 1);
        gv_slots_give(c->q);
        atomic_fetch_add(&c->done, 1);
    }
    return NULL;
}

static void test_never_more_holders_than_slots(void **state)
{
    (void)state;
    struct gv_slots q;
    gv_slots_init(&q, 4);
    struct bound_ctx c = {.q = &q};
    pthread_t t[64];
    struct bound_arg a[64];
    for (int i = 0; i < 64; i++) {
        a[i] = (struct bound_arg){&c, seed + (unsigned)i};
        assert_int_equal(pthread_create(&t[i], NULL, bound_worker, &a[i]), 0);
    }
    for (int i = 0; i < 64; i++)
        pthread_join(t[i], NULL);
    struct gv_slots_stats st;
    int busy = -1, waiting = -1;
    gv_slots_get_stats(&q, &st, &busy, &waiting);
    if (atomic_load(&c.most) > 4 || atomic_load(&c.done) != 64 * 20)
        fail_msg("seed %u: most holders %d (cap 4), done %d of %d", seed, atomic_load(&c.most),
                 atomic_load(&c.done), 64 * 20);
    assert_int_equal(busy, 0);
    assert_int_equal(waiting, 0);
    assert_int_equal(st.taken, 64 * 20);
    assert_true(st.queued > 0); /* 64 threads on 4 slots did wait */
    assert_int_equal(st.timed_out, 0);
    gv_slots_destroy(&q);
}

/* ------------------------------------------------------------------- FIFO */

struct fifo_ctx {
    struct gv_slots *q;
    int id;
    int64_t deadline;
    bool got;
    pthread_mutex_t *mu;
    int *order, *norder;
};

static void *fifo_worker(void *ud)
{
    struct fifo_ctx *c = ud;
    c->got = gv_slots_take(c->q, c->deadline);
    if (c->got) {
        pthread_mutex_lock(c->mu);
        c->order[(*c->norder)++] = c->id;
        pthread_mutex_unlock(c->mu);
        gv_slots_give(c->q);
    }
    return NULL;
}

/* A line of waiters: one slot, held by the test while they queue. */
struct line {
    struct gv_slots q;
    pthread_mutex_t mu;
    int order[8], norder;
    pthread_t t[8];
    struct fifo_ctx c[8];
};

static void line_open(struct line *l)
{
    memset(l, 0, sizeof(*l));
    gv_slots_init(&l->q, 1);
    assert_true(gv_slots_take(&l->q, 0)); /* held: everyone queues */
    pthread_mutex_init(&l->mu, NULL);
}

/* Waiter id joins the line (deadline 0: none); returns once waiting
 * waiters are in line, so arrival order is the order of the calls. */
static void line_join(struct line *l, int id, int64_t deadline, int waiting)
{
    l->c[id] = (struct fifo_ctx){.q = &l->q, .id = id, .deadline = deadline, .mu = &l->mu,
                                 .order = l->order, .norder = &l->norder};
    assert_int_equal(pthread_create(&l->t[id], NULL, fifo_worker, &l->c[id]), 0);
    wait_waiting(&l->q, waiting);
}

static void test_waiters_served_in_arrival_order(void **state)
{
    (void)state;
    struct line l;
    line_open(&l);
    for (int i = 0; i < 8; i++)
        line_join(&l, i, 0, i + 1); /* i is in line before i + 1 comes */
    gv_slots_give(&l.q);
    for (int i = 0; i < 8; i++)
        pthread_join(l.t[i], NULL);
    assert_int_equal(l.norder, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(l.order[i], i);
    struct gv_slots_stats st;
    int busy = -1;
    gv_slots_get_stats(&l.q, &st, &busy, NULL);
    assert_int_equal(busy, 0);
    assert_int_equal(st.queued, 8);
    assert_int_equal(st.most_waiting, 8);
    gv_slots_destroy(&l.q);
}

/* A waiter whose deadline comes leaves the line; the one behind it is
 * served next and the slot count stays right. */
static void test_deadline_leaves_the_line(void **state)
{
    (void)state;
    struct line l;
    line_open(&l);
    for (int i = 0; i < 3; i++)
        line_join(&l, i, i == 1 ? mono_ms() + 80 : 0, i + 1);
    int64_t t0 = mono_ms();
    pthread_join(l.t[1], NULL); /* gives up at its deadline */
    assert_false(l.c[1].got);
    assert_true(mono_ms() - t0 >= 40);
    wait_waiting(&l.q, 2);
    gv_slots_give(&l.q);
    pthread_join(l.t[0], NULL);
    pthread_join(l.t[2], NULL);
    assert_int_equal(l.norder, 2);
    assert_int_equal(l.order[0], 0);
    assert_int_equal(l.order[1], 2);
    struct gv_slots_stats st;
    int busy = -1, waiting = -1;
    gv_slots_get_stats(&l.q, &st, &busy, &waiting);
    assert_int_equal(st.timed_out, 1);
    assert_int_equal(busy, 0);
    assert_int_equal(waiting, 0);
    /* the slot is free again: a take does not wait */
    assert_true(gv_slots_take(&l.q, mono_ms() + 1));
    gv_slots_give(&l.q);
    gv_slots_destroy(&l.q);
}

/* The last in line leaves at its deadline: the line's end moves back to the one before it,
 * so the next to come is linked behind a live waiter and served (not behind the one that
 * left, whose stack frame is gone).  A cap of 0 or less is one slot. */
static void test_tail_leaves_the_line(void **state)
{
    (void)state;
    struct line l;
    line_open(&l);
    line_join(&l, 0, 0, 1);
    line_join(&l, 1, mono_ms() + 60, 2);
    pthread_join(l.t[1], NULL); /* the tail gives up */
    assert_false(l.c[1].got);
    wait_waiting(&l.q, 1);
    line_join(&l, 2, mono_ms() + 5000, 2);
    gv_slots_give(&l.q);
    pthread_join(l.t[0], NULL);
    pthread_join(l.t[2], NULL);
    assert_true(l.c[2].got); /* served, not left to its deadline */
    assert_int_equal(l.norder, 2);
    assert_int_equal(l.order[0], 0);
    assert_int_equal(l.order[1], 2);
    gv_slots_destroy(&l.q);

    struct gv_slots q;
    for (int max = -1; max <= 0; max++) {
        gv_slots_init(&q, max);
        assert_true(gv_slots_take(&q, mono_ms() + 1000));
        assert_false(gv_slots_take(&q, mono_ms() + 1));
        gv_slots_give(&q);
        gv_slots_destroy(&q);
    }
}

/* -------------------------------------------- the transport's connection cap */

struct server {
    int lfd, port;
    atomic_int accepted, open, most_open, served;
    pthread_t thread;
};

struct conn_arg {
    struct server *s;
    int fd;
};

static void *serve_conn(void *ud)
{
    struct conn_arg *a = ud;
    struct server *s = a->s;
    int fd = a->fd;
    free(a);
    atomic_max(&s->most_open, atomic_fetch_add(&s->open, 1) + 1);
    char buf[2048];
    size_t len = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        char *end;
        while ((end = strstr(buf, "\r\n\r\n")) != NULL) {
            usleep(500000); /* an API server taking its time: the line waits > 2 s */
            static const char resp[] = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}";
            (void)send(fd, resp, sizeof(resp) - 1, MSG_NOSIGNAL);
            atomic_fetch_add(&s->served, 1);
            size_t used = (size_t)(end + 4 - buf);
            memmove(buf, buf + used, len - used + 1);
            len -= used;
        }
        if (len >= sizeof(buf) - 1)
            break;
    }
    atomic_fetch_sub(&s->open, 1);
    close(fd);
    return NULL;
}

static void *accept_loop(void *ud)
{
    struct server *s = ud;
    for (;;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            break;
        atomic_fetch_add(&s->accepted, 1);
        struct conn_arg *a = malloc(sizeof(*a));
        if (a == NULL) {
            close(fd);
            continue;
        }
        *a = (struct conn_arg){s, fd};
        pthread_t t;
        if (pthread_create(&t, NULL, serve_conn, a) != 0) {
            free(a);
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

struct req_ctx {
    struct gv_http *h;
    atomic_int ok;
};

static void *post_binding(void *ud)
{
    struct req_ctx *c = ud;
    static const char body[] = "{\"kind\":\"Binding\"}";
    struct gv_http_request r = {.method = "POST",
                                .target = "/api/v1/namespaces/ns/pods/p/binding",
                                .body = body,
                                .body_len = sizeof(body) - 1,
                                .timeout_ms = 30000,
                                .cancel_fd = -1};
    struct gv_http_result res;
    struct gv_error err = {0};
    if (gv_http_exchange(c->h, &r, NULL, NULL, &res, &err) == GV_OK && res.status == 201)
        atomic_fetch_add(&c->ok, 1);
    else
        fprintf(stderr, "# request failed: %s\n", err.msg);
    return NULL;
}

static void test_burst_of_requests_opens_at_most_32_connections(void **state)
{
    (void)state;
    struct server s;
    memset(&s, 0, sizeof(s));
    s.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s.lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(s.lfd, 512), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(s.lfd, (struct sockaddr *)&sa, &sl), 0);
    s.port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&s.thread, NULL, accept_loop, &s), 0);

    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", s.port);
    struct gv_http_opts o = {.server = url, .connect_timeout_ms = 5000};
    struct req_ctx c = {0};
    struct gv_error err;
    assert_int_equal(gv_http_new(&o, &c.h, &err), GV_OK);
    enum { N = 200 };
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&t[i], NULL, post_binding, &c), 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    struct gv_http_stats hs;
    gv_http_get_stats(c.h, &hs);
    fprintf(stderr, "# %d requests: %d connections accepted (most open %d), %llu waited\n", N,
            atomic_load(&s.accepted), atomic_load(&s.most_open),
            (unsigned long long)hs.slots.queued);
    assert_int_equal(atomic_load(&c.ok), N);
    assert_true(atomic_load(&s.accepted) <= 32);
    assert_true(hs.connections_opened <= 32);
    assert_int_equal(hs.connections_opened, (uint64_t)atomic_load(&s.accepted));
    assert_int_equal(hs.slots.taken, N);
    assert_true(hs.slots.queued > 0);
    assert_int_equal(hs.busy, 0);
    gv_http_free(c.h);
    shutdown(s.lfd, SHUT_RDWR);
    pthread_join(s.thread, NULL);
    close(s.lfd);
}

int main(void)
{
    const char *e = getenv("GV_TEST_SEED");
    seed = e != NULL ? (unsigned)strtoul(e, NULL, 10) : (unsigned)time(NULL);
    fprintf(stderr, "# seed %u (GV_TEST_SEED)\n", seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_more_holders_than_slots),
        cmocka_unit_test(test_waiters_served_in_arrival_order),
        cmocka_unit_test(test_deadline_leaves_the_line),
        cmocka_unit_test(test_tail_leaves_the_line),
        cmocka_unit_test(test_burst_of_requests_opens_at_most_32_connections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
