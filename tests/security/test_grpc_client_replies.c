/*
 * The node agent's gRPC client (src/node/kubelet/grpc_client.c, used for
 * Registration.Register) reading replies a real grpcio kubelet never sends
 * in these forms: a peer on a unix socket answers with HTTP/2 frames built
 * here, HPACK by nghttp2's deflater.  Unlike the fuzzing peer it answers
 * only once the whole request is in (the DATA frame that ends the stream)
 * and closes only after the client has: a close with the request unread
 * would reset the connection under the client, whatever the machine's load.  What is checked: the
 * status and message come from exactly the grpc-status and grpc-message
 * trailers (other headers of the same length do not count), the message's
 * percent-encoding is undone in both hex cases and left alone where it is
 * not one, and a stream that ends without a gRPC status names the HTTP
 * status it had.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"

struct wire {
    uint8_t b[8192];
    size_t n;
};

static void frame(struct wire *w, uint8_t type, uint8_t flags, uint32_t stream, const uint8_t *p,
                  size_t len)
{
    assert_true(w->n + 9 + len <= sizeof(w->b));
    uint8_t *h = w->b + w->n;
    h[0] = (uint8_t)(len >> 16);
    h[1] = (uint8_t)(len >> 8);
    h[2] = (uint8_t)len;
    h[3] = type;
    h[4] = flags;
    h[5] = (uint8_t)(stream >> 24);
    h[6] = (uint8_t)(stream >> 16);
    h[7] = (uint8_t)(stream >> 8);
    h[8] = (uint8_t)stream;
    if (len)
        memcpy(h + 9, p, len);
    w->n += 9 + len;
}

/* A HEADERS frame on stream 1 from name/value pairs (NULL-terminated). */
static void headers(struct wire *w, nghttp2_hd_deflater *d, int end_stream, ...)
{
    nghttp2_nv nv[16];
    size_t n = 0;
    va_list ap;
    va_start(ap, end_stream);
    for (const char *k; (k = va_arg(ap, const char *)) != NULL && n < 16; n++) {
        const char *v = va_arg(ap, const char *);
        nv[n] = (nghttp2_nv){(uint8_t *)k, (uint8_t *)v, strlen(k), strlen(v),
                             NGHTTP2_NV_FLAG_NONE};
    }
    va_end(ap);
    uint8_t block[2048];
    ssize_t len = nghttp2_hd_deflate_hd(d, block, sizeof(block), nv, n);
    assert_true(len > 0);
    frame(w, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | (end_stream ? NGHTTP2_FLAG_END_STREAM : 0),
          1, block, (size_t)len);
}

struct peer {
    int fd;
    const struct wire *w;
    bool whole_request; /* the request's END_STREAM DATA frame was read */
};

/* Whether buf (the client's bytes so far) holds the DATA frame that ends
 * the request: the 24-byte preface, then 9-byte frame headers. */
static bool request_ended(const uint8_t *buf, size_t n)
{
    for (size_t off = 24; off + 9 <= n;) {
        size_t len = (size_t)buf[off] << 16 | (size_t)buf[off + 1] << 8 | buf[off + 2];
        if (buf[off + 3] == NGHTTP2_DATA && (buf[off + 4] & NGHTTP2_FLAG_END_STREAM))
            return true;
        off += 9 + len;
    }
    return false;
}

static void *peer_run(void *ud)
{
    struct peer *p = ud;
    int c = accept(p->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    static uint8_t buf[65536];
    size_t n = 0;
    struct pollfd pfd = {.fd = c, .events = POLLIN};
    while (!p->whole_request && n < sizeof(buf) && poll(&pfd, 1, 10000) > 0) {
        ssize_t r = recv(c, buf + n, sizeof(buf) - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
        p->whole_request = request_ended(buf, n);
    }
    for (size_t off = 0; off < p->w->n;) {
        ssize_t s = send(c, p->w->b + off, p->w->n - off, MSG_NOSIGNAL);
        if (s <= 0)
            break;
        off += (size_t)s;
    }
    /* until the client closes (its SETTINGS acknowledgement read and dropped) */
    while (poll(&pfd, 1, 10000) > 0 && recv(c, buf, sizeof(buf), 0) > 0)
        ;
    close(c);
    return NULL;
}

/* Serves wire to one call and returns what the client made of it. */
static gv_status call(const struct wire *w, struct gv_grpc_reply *reply, struct gv_error *err)
{
    struct peer p = {.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), .w = w};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/gv-grpc-replies-%d.sock", (int)getpid());
    unlink(sa.sun_path);
    assert_true(p.fd >= 0);
    assert_int_equal(bind(p.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(p.fd, 1), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, peer_run, &p), 0);
    static const uint8_t req[] = {0x0a, 0x02, 'v', '1'};
    gv_status st = gv_grpc_client_unary(sa.sun_path, "/v1beta1.Registration/Register", req,
                                        sizeof(req), 20000, -1, reply, err);
    shutdown(p.fd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(p.fd);
    unlink(sa.sun_path);
    assert_true(p.whole_request);
    return st;
}

static void test_status_and_message_from_their_trailers(void **state)
{
    (void)state;
    nghttp2_hd_deflater *d = NULL;
    assert_int_equal(nghttp2_hd_deflate_new(&d, 4096), 0);
    struct wire w = {.n = 0};
    frame(&w, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
    /* content-type is 12 characters like grpc-message, x-grpc-stat 11 like
     * grpc-status: only the names themselves count */
    headers(&w, d, 0, ":status", "200", "content-type", "application/grpc", NULL);
    const uint8_t msg[] = {0, 0, 0, 0, 2, 'o', 'k'};
    frame(&w, NGHTTP2_DATA, 0, 1, msg, sizeof(msg));
    headers(&w, d, 1, "grpc-status", "3", "x-grpc-stat", "9", "grpc-message",
            "bad%20name%2a%2A%0A%3a%3A 100%25 %zz%4", "x-grpc-mess", "no", "x-grpc-messa", "no",
            NULL);
    nghttp2_hd_deflate_del(d);
    struct gv_grpc_reply reply;
    struct gv_error err = {0};
    assert_int_equal(call(&w, &reply, &err), GV_OK);
    assert_int_equal(reply.status, 3);
    assert_non_null(reply.message);
    assert_string_equal(reply.message, "bad name**\n:: 100% %zz%4");
    assert_int_equal(reply.len, 2);
    assert_memory_equal(reply.body, "ok", 2);
    gv_grpc_reply_clear(&reply);
}

static void test_no_grpc_status_names_the_http_status(void **state)
{
    (void)state;
    nghttp2_hd_deflater *d = NULL;
    assert_int_equal(nghttp2_hd_deflate_new(&d, 4096), 0);
    struct wire w = {.n = 0};
    frame(&w, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
    /* a proxy's answer: HTTP 503, no gRPC trailers; x-proxy is 7
     * characters like :status */
    headers(&w, d, 1, ":status", "503", "x-proxy", "404", "content-type", "text/plain", NULL);
    nghttp2_hd_deflate_del(d);
    struct gv_grpc_reply reply;
    struct gv_error err = {0};
    assert_int_equal(call(&w, &reply, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "without grpc-status (HTTP 503"));
    assert_int_equal(reply.status, -1);
    assert_null(reply.message);
    gv_grpc_reply_clear(&reply);
}

int main(void)
{
    gv_log_set_level(GV_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_and_message_from_their_trailers),
        cmocka_unit_test(test_no_grpc_status_names_the_http_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
