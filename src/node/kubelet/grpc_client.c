/*
 * Blocking unary gRPC client on nghttp2 (see gv_grpc.h): one connection per
 * call.  It is only used for Registration.Register, once per kubelet start,
 * so connection reuse would buy nothing and add state to get wrong.
 */
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "node/kubelet/gv_grpc.h"

struct client {
    int32_t stream_id;
    const uint8_t *req;
    size_t req_len, req_off;
    struct gv_grpc_framer framer;
    struct gv_grpc_reply *reply;
    int http_status;
    bool closed;
    uint32_t rst_code;
    struct gv_error frame_err;
    bool frame_failed;
};

static ssize_t req_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                        uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)source;
    struct client *cl = user_data;
    size_t n = cl->req_len - cl->req_off;
    if (n > length)
        n = length;
    memcpy(buf, cl->req + cl->req_off, n);
    cl->req_off += n;
    if (cl->req_off == cl->req_len)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static char *percent_decode(const uint8_t *v, size_t len)
{
    char *out = malloc(len + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] == '%' && i + 2 < len && hexval(v[i + 1]) >= 0 &&
            hexval(v[i + 2]) >= 0) {
            out[o++] = (char)(hexval(v[i + 1]) << 4 | hexval(v[i + 2]));
            i += 2;
        } else {
            out[o++] = (char)v[i];
        }
    }
    out[o] = '\0';
    return out;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    (void)session;
    (void)frame;
    (void)flags;
    struct client *cl = user_data;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        cl->http_status = atoi((const char *)value);
    } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        char tmp[16] = {0};
        memcpy(tmp, value, valuelen < 15 ? valuelen : 15);
        cl->reply->status = atoi(tmp);
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        free(cl->reply->message);
        cl->reply->message = percent_decode(value, valuelen);
    }
    return 0;
}

static gv_status keep_msg(const uint8_t *msg, size_t len, void *ud, struct gv_error *err)
{
    struct gv_grpc_reply *r = ud;
    if (r->body != NULL)
        return gv_error_set(err, GV_EPROTO, "grpc: unary reply carried more than one message");
    r->body = malloc(len + 1);
    if (r->body == NULL)
        return gv_error_set(err, GV_ENOMEM, "grpc: out of memory");
    memcpy(r->body, msg, len);
    r->len = len;
    return GV_OK;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                   size_t len, void *user_data)
{
    (void)session;
    (void)flags;
    (void)stream_id;
    struct client *cl = user_data;
    if (!cl->frame_failed &&
        gv_grpc_framer_feed(&cl->framer, data, len, keep_msg, cl->reply, &cl->frame_err) != GV_OK)
        cl->frame_failed = true;
    return 0;
}

static int on_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                    void *user_data)
{
    (void)session;
    struct client *cl = user_data;
    if (stream_id == cl->stream_id) {
        cl->closed = true;
        cl->rst_code = error_code;
    }
    return 0;
}

void gv_grpc_reply_clear(struct gv_grpc_reply *reply)
{
    free(reply->message);
    free(reply->body);
    memset(reply, 0, sizeof(*reply));
    reply->status = -1;
}

static int64_t now_ms(void)
{
    return gv_loop_now_ms();
}

gv_status gv_grpc_client_unary(const char *socket_path, const char *path, const uint8_t *req,
                               size_t len, int timeout_ms, int cancel_fd,
                               struct gv_grpc_reply *reply, struct gv_error *err)
{
    struct client cl = {.reply = reply, .stream_id = -1};
    nghttp2_session *session = NULL;
    nghttp2_session_callbacks *cbs = NULL;
    uint8_t *framed = NULL;
    int fd = -1;
    gv_status st = GV_OK;
    memset(reply, 0, sizeof(*reply));
    reply->status = -1;
    gv_grpc_framer_init(&cl.framer, GV_GRPC_DEFAULT_MAX_MSG);

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof(sa.sun_path)) {
        st = gv_error_set(err, GV_EINVAL, "grpc: socket path '%s' too long", socket_path);
        goto out;
    }
    memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        st = gv_error_set(err, GV_EUNAVAILABLE, "grpc: connect %s: %s", socket_path,
                          strerror(errno));
        goto out;
    }
    framed = malloc(len + 5);
    if (framed == NULL || nghttp2_session_callbacks_new(&cbs) != 0) {
        st = gv_error_set(err, GV_ENOMEM, "grpc: out of memory");
        goto out;
    }
    framed[0] = 0;
    framed[1] = (uint8_t)(len >> 24);
    framed[2] = (uint8_t)(len >> 16);
    framed[3] = (uint8_t)(len >> 8);
    framed[4] = (uint8_t)len;
    if (len)
        memcpy(framed + 5, req, len);
    cl.req = framed;
    cl.req_len = len + 5;
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    if (nghttp2_session_client_new(&session, cbs, &cl) != 0 ||
        nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, NULL, 0) != 0) {
        st = gv_error_set(err, GV_ENOMEM, "grpc: cannot create HTTP/2 session");
        goto out;
    }
    char timeout[32];
    snprintf(timeout, sizeof(timeout), "%dm", timeout_ms);
#define HDR(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv hdrs[] = {
        HDR(":method", "POST"),       HDR(":scheme", "http"),
        HDR(":path", path),           HDR(":authority", "localhost"),
        HDR("content-type", "application/grpc"), HDR("te", "trailers"),
        HDR("grpc-timeout", timeout), HDR("user-agent", "gpuvisor-node"),
    };
#undef HDR
    nghttp2_data_provider prd = {.read_callback = req_read};
    cl.stream_id = nghttp2_submit_request(session, NULL, hdrs, sizeof(hdrs) / sizeof(hdrs[0]),
                                          &prd, NULL);
    if (cl.stream_id < 0) {
        st = gv_error_set(err, GV_EIO, "grpc: submit %s: %s", path,
                          nghttp2_strerror(cl.stream_id));
        goto out;
    }
    int64_t deadline = now_ms() + timeout_ms;
    while (!cl.closed) {
        const uint8_t *data;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(session, &data)) > 0) {
            size_t off = 0;
            while (off < (size_t)n) {
                ssize_t w = send(fd, data + off, (size_t)n - off, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w < 0) {
                    st = gv_error_set(err, GV_EUNAVAILABLE, "grpc: %s: write: %s", path,
                                      strerror(errno));
                    goto out;
                }
                off += (size_t)w;
            }
        }
        if (n < 0) {
            st = gv_error_set(err, GV_EPROTO, "grpc: %s: %s", path, nghttp2_strerror((int)n));
            goto out;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            st = gv_error_set(err, GV_ETIMEOUT, "grpc: %s on %s: no reply within %d ms", path,
                              socket_path, timeout_ms);
            goto out;
        }
        struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = cancel_fd, .events = POLLIN}};
        int pr = poll(pfd, cancel_fd >= 0 ? 2 : 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        if (cancel_fd >= 0 && (pfd[1].revents & POLLIN)) {
            st = gv_error_set(err, GV_EUNAVAILABLE, "grpc: %s on %s: cancelled", path, socket_path);
            goto out;
        }
        if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        uint8_t buf[16384];
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0) {
            st = gv_error_set(err, GV_EUNAVAILABLE, "grpc: %s: connection closed by %s", path,
                              socket_path);
            goto out;
        }
        ssize_t rv = nghttp2_session_mem_recv(session, buf, (size_t)r);
        if (rv < 0) {
            st = gv_error_set(err, GV_EPROTO, "grpc: %s: bad HTTP/2 from peer: %s", path,
                              nghttp2_strerror((int)rv));
            goto out;
        }
    }
    if (cl.frame_failed) {
        st = gv_error_set(err, GV_EPROTO, "%s", cl.frame_err.msg);
        goto out;
    }
    if (reply->status < 0) {
        st = gv_error_set(err, GV_EPROTO,
                          "grpc: %s: stream ended without grpc-status (HTTP %d, reset code %u)",
                          path, cl.http_status, cl.rst_code);
        goto out;
    }
out:
    if (st != GV_OK)
        gv_grpc_reply_clear(reply);
    gv_grpc_framer_clear(&cl.framer);
    if (session)
        nghttp2_session_del(session);
    if (cbs)
        nghttp2_session_callbacks_del(cbs);
    free(framed);
    if (fd >= 0)
        close(fd);
    return st;
}
