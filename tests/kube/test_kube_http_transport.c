/*
 * The kube client's transport (src/kube/http.c) against a scripted
 * loopback server in a thread: keep-alive reuse, a request a reused
 * connection lost (sent again on a fresh one), a server
 * that never answers (timeout; cancel), and the Host/target it sends.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/gv_buf.h"
#include "kube/kube_http.h"

enum mode {
    KEEP_ALIVE,      /* answer every request on the connection */
    DROP_SECOND,     /* answer one request, drop the next one unanswered: a
                        server whose idle timeout fires as a request arrives */
    NEVER_ANSWER,    /* read the request, say nothing */
};

struct server {
    int lfd;
    int port;
    enum mode mode;
    int requests_to_serve;
    int accepted;
    int served;
    char last_request[1024];
    pthread_t thread;
};

/* Reads one request head (no bodies in these tests). */
static bool read_request(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            return false;
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL)
            return true;
    }
    return false;
}

static void *serve(void *ud)
{
    struct server *s = ud;
    while (s->served < s->requests_to_serve) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            break;
        s->accepted++;
        char req[1024];
        while (s->served < s->requests_to_serve && read_request(fd, req, sizeof(req))) {
            memcpy(s->last_request, req, sizeof(req));
            if (s->mode == NEVER_ANSWER) {
                s->served++;
                char b;
                (void)recv(fd, &b, 1, 0); /* until the client gives up */
                break;
            }
            char resp[128];
            int n = snprintf(resp, sizeof(resp),
                             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n%02d", s->served);
            (void)send(fd, resp, (size_t)n, MSG_NOSIGNAL);
            s->served++;
            if (s->mode == DROP_SECOND) {
                (void)read_request(fd, req, sizeof(req));
                break;
            }
        }
        close(fd);
    }
    return NULL;
}

static void server_start(struct server *s, enum mode mode, int requests)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
    s->requests_to_serve = requests;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(s->lfd, 8), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&sa, &sl), 0);
    s->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_stop(struct server *s)
{
    shutdown(s->lfd, SHUT_RDWR);
    pthread_join(s->thread, NULL);
    close(s->lfd);
}

static struct gv_http *client(const struct server *s, const char *prefix)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", s->port, prefix);
    struct gv_http_opts o = {.server = url, .connect_timeout_ms = 2000};
    struct gv_http *h = NULL;
    struct gv_error err;
    assert_int_equal(gv_http_new(&o, &h, &err), GV_OK);
    return h;
}

static bool collect(void *ud, const char *data, size_t len)
{
    return gv_buf_append(ud, data, len) == GV_OK;
}

static gv_status get(struct gv_http *h, long timeout_ms, int cancel_fd, struct gv_buf *body,
                     struct gv_http_result *res, struct gv_error *err)
{
    struct gv_http_request r = {
        .method = "GET", .target = "/api/v1/nodes?limit=1", .timeout_ms = timeout_ms,
        .cancel_fd = cancel_fd};
    gv_buf_reset(body);
    return gv_http_exchange(h, &r, collect, body, res, err);
}

static void test_keep_alive_reuses_one_connection(void **state)
{
    (void)state;
    struct server s;
    server_start(&s, KEEP_ALIVE, 3);
    struct gv_http *h = client(&s, "/prefix/");
    struct gv_buf body = {0};
    struct gv_http_result res;
    struct gv_error err;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(get(h, 5000, -1, &body, &res, &err), GV_OK);
        assert_int_equal(res.status, 200);
        char want[3];
        snprintf(want, sizeof(want), "%02d", i);
        assert_string_equal(body.data, want);
    }
    gv_http_free(h);
    server_stop(&s);
    assert_int_equal(s.accepted, 1);
    /* The server URL's path is a prefix; the Host header names the server. */
    assert_non_null(strstr(s.last_request, "GET /prefix/api/v1/nodes?limit=1 HTTP/1.1\r\n"));
    char host[64];
    snprintf(host, sizeof(host), "\r\nHost: 127.0.0.1:%d\r\n", s.port);
    assert_non_null(strstr(s.last_request, host));
    gv_buf_free(&body);
}

/*
 * A target with a line break, a space or another control character (a name
 * someone else wrote, relayed into a path) is refused before anything is
 * sent: it would end the request line and add headers of its choosing.
 */
static void test_target_with_control_characters_refused(void **state)
{
    (void)state;
    struct server s;
    server_start(&s, KEEP_ALIVE, 1);
    struct gv_http *h = client(&s, "");
    static const char *const bad[] = {
        "/api/v1/namespaces/a/pods/x HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /y",
        "/api/v1/nodes/a\nb", "/api/v1/nodes/a b", "/api/v1/nodes/a\tb", "/api/v1/nodes/a\x7f"};
    struct gv_buf body = {0};
    struct gv_http_result res;
    struct gv_error err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gv_http_request r = {.method = "GET", .target = bad[i], .timeout_ms = 2000,
                                    .cancel_fd = -1};
        assert_int_equal(gv_http_exchange(h, &r, collect, &body, &res, &err), GV_EINVAL);
        assert_non_null(strstr(err.msg, "not sent"));
        assert_int_equal(res.status, 0);
    }
    struct gv_http_request m = {.method = "GET /x HTTP/1.1\r\n", .target = "/api/v1/nodes",
                                .timeout_ms = 2000, .cancel_fd = -1};
    assert_int_equal(gv_http_exchange(h, &m, collect, &body, &res, &err), GV_EINVAL);
    /* a clean one still goes, and is the only request the server saw */
    assert_int_equal(get(h, 5000, -1, &body, &res, &err), GV_OK);
    assert_int_equal(res.status, 200);
    gv_http_free(h);
    server_stop(&s);
    assert_int_equal(s.accepted, 1);
    assert_int_equal(s.served, 1);
    assert_null(strstr(s.last_request, "X-Injected"));
    gv_buf_free(&body);
}

static void test_dropped_request_on_reused_connection_is_resent(void **state)
{
    (void)state;
    struct server s;
    server_start(&s, DROP_SECOND, 3);
    struct gv_http *h = client(&s, "");
    struct gv_buf body = {0};
    struct gv_http_result res;
    struct gv_error err;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(get(h, 5000, -1, &body, &res, &err), GV_OK);
        assert_int_equal(res.status, 200);
    }
    gv_http_free(h);
    server_stop(&s);
    /* Each reused connection lost one request, resent on a new one. */
    assert_int_equal(s.served, 3);
    assert_int_equal(s.accepted, 3);
    gv_buf_free(&body);
}

static void test_server_that_never_answers_times_out(void **state)
{
    (void)state;
    struct server s;
    server_start(&s, NEVER_ANSWER, 1);
    struct gv_http *h = client(&s, "");
    struct gv_buf body = {0};
    struct gv_http_result res;
    struct gv_error err;
    assert_int_equal(get(h, 200, -1, &body, &res, &err), GV_ETIMEOUT);
    assert_true(res.retryable);
    assert_non_null(strstr(err.msg, "timed out"));
    gv_http_free(h);
    server_stop(&s);
    gv_buf_free(&body);
}

struct fire {
    int fd;
};

static void *fire_later(void *ud)
{
    struct fire *f = ud;
    usleep(100 * 1000);
    uint64_t one = 1;
    (void)!write(f->fd, &one, sizeof(one));
    return NULL;
}

static void test_cancel_wakes_a_waiting_exchange(void **state)
{
    (void)state;
    struct server s;
    server_start(&s, NEVER_ANSWER, 1);
    struct gv_http *h = client(&s, "");
    struct fire f = {eventfd(0, EFD_CLOEXEC)};
    assert_true(f.fd >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fire_later, &f), 0);
    struct gv_buf body = {0};
    struct gv_http_result res;
    struct gv_error err;
    /* No timeout at all: only the cancel can end it. */
    assert_int_equal(get(h, 0, f.fd, &body, &res, &err), GV_OK);
    assert_true(res.cancelled);
    assert_int_equal(res.status, 0);
    pthread_join(t, NULL);
    close(f.fd);
    gv_http_free(h);
    server_stop(&s);
    gv_buf_free(&body);
}

static void test_bad_server_urls(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "ftp://x", "http://", "http://:80", "http://h:0", "http://h:65536", "http://h:8x",
        "http://user@h", "http://[::1", "http://[::1]x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gv_http_opts o = {.server = bad[i]};
        struct gv_http *h = NULL;
        struct gv_error err;
        if (gv_http_new(&o, &h, &err) != GV_EINVAL)
            fail_msg("accepted %s", bad[i]);
        assert_null(h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_alive_reuses_one_connection),
        cmocka_unit_test(test_target_with_control_characters_refused),
        cmocka_unit_test(test_dropped_request_on_reused_connection_is_resent),
        cmocka_unit_test(test_server_that_never_answers_times_out),
        cmocka_unit_test(test_cancel_wakes_a_waiting_exchange),
        cmocka_unit_test(test_bad_server_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
