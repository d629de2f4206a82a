/*
 * The node agent's gRPC socket under abuse (issue 14): idle connections are
 * capped and time out.  Before, 2,000 idle connections were all kept (26.5
 * MiB of HTTP/2 sessions).  The server runs on a gv_loop driven by this
 * thread (gv_loop_run_once), so every step is deterministic; the waits are
 * bounded loops, never timing assertions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"
#include "node/loop/gv_loop.h"

static char dir[] = "/tmp/gv-test-grpccap-XXXXXX";
static char path[96];

static void nop(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)req, (void)len, (void)ud;
    gv_grpc_call_finish(call, GV_GRPC_OK, NULL);
}

static const struct gv_grpc_method methods[] = {{"/t.T/Nop", nop}};

static int dial(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static struct gv_grpc_server *serve(struct gv_loop *loop, size_t max_conns, int64_t idle_ms)
{
    struct gv_grpc_server_config cfg = {.socket_path = path, .methods = methods, .n_methods = 1};
    cfg.max_conns = max_conns;
    cfg.idle_ms = idle_ms;
    struct gv_grpc_server *srv = NULL;
    struct gv_error err = {0};
    if (gv_grpc_server_new(loop, &cfg, &srv, &err) != GV_OK ||
        gv_grpc_server_listen(srv, &err) != GV_OK)
        fail_msg("server: %s", err.msg);
    return srv;
}

static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void test_idle_connections_capped(void **state)
{
    (void)state;
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    struct gv_grpc_server *srv = serve(loop, 0, 0); /* defaults: 64 connections, 60 s idle */
    size_t heap0 = heap_in_use();
    enum { N = 2000 };
    static int fds[N];
    size_t dialed = 0;
    /* Dial in batches the listen backlog can hold, accepting in between. */
    for (size_t i = 0; i < N; i++) {
        fds[i] = dial();
        dialed += fds[i] >= 0;
        if (i % 64 == 63)
            for (int k = 0; k < 4; k++)
                gv_loop_run_once(loop, 0, NULL);
    }
    for (int k = 0; k < 50; k++)
        gv_loop_run_once(loop, 0, NULL);
    size_t held = gv_grpc_server_connections(srv);
    size_t grown = heap_in_use() - heap0;
    print_message("# %zu idle connections dialed: the server holds %zu, heap +%zu KiB\n", dialed,
                  held, grown >> 10);
    assert_true(dialed >= 1000);
    assert_true(held <= 64);
    assert_true(grown < (4u << 20));
    /* A fresh connection still gets served (the longest-idle one made room). */
    int fresh = dial();
    assert_true(fresh >= 0);
    for (int k = 0; k < 10; k++)
        gv_loop_run_once(loop, 0, NULL);
    assert_true(gv_grpc_server_connections(srv) <= 64);
    close(fresh);
    for (size_t i = 0; i < N; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    gv_grpc_server_free(srv);
    gv_loop_free(loop);
}

static void test_idle_connections_time_out(void **state)
{
    (void)state;
    struct gv_loop *loop = NULL;
    assert_int_equal(gv_loop_new(&loop, NULL), GV_OK);
    struct gv_grpc_server *srv = serve(loop, 8, 50);
    int fds[5];
    for (int i = 0; i < 5; i++)
        assert_true((fds[i] = dial()) >= 0);
    for (int k = 0; k < 5; k++)
        gv_loop_run_once(loop, 0, NULL);
    assert_int_equal(gv_grpc_server_connections(srv), 5);
    /* Bounded: at most 200 rounds of up to 50 ms each. */
    for (int k = 0; k < 200 && gv_grpc_server_connections(srv) > 0; k++)
        gv_loop_run_once(loop, 50, NULL);
    assert_int_equal(gv_grpc_server_connections(srv), 0);
    for (int i = 0; i < 5; i++) {
        char b;
        /* the server closed its end (after its SETTINGS frame) */
        ssize_t r;
        while ((r = read(fds[i], &b, 1)) > 0)
            ;
        assert_int_equal(r, 0);
        close(fds[i]);
    }
    gv_grpc_server_free(srv);
    gv_loop_free(loop);
}

static int setup(void **state)
{
    (void)state;
    gv_log_set_level(GV_LOG_ERROR);
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/gv.sock", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_connections_capped),
        cmocka_unit_test(test_idle_connections_time_out),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
