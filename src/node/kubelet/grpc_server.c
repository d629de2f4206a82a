/*
 * gRPC server on nghttp2: see gv_grpc.h.
 *
 * Each connection is an nghttp2 server session fed through mem_recv /
 * mem_send from a non-blocking unix socket watched by gv_loop.  Responses
 * use one deferred data provider per stream: queued messages are drained as
 * flow control allows, and the trailers (grpc-status) are submitted from the
 * provider once the call is finished and its queue is empty.
 */
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/gv_buf.h"
#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"

struct conn;

struct gv_grpc_call {
    uint64_t id;
    int32_t stream_id;
    struct conn *conn;
    const struct gv_grpc_method *method;
    char path[256];
    bool bad_content_type, bad_method;
    int64_t timeout_ms; /* -1: none */
    uint64_t deadline_timer;
    struct gv_grpc_framer framer;
    uint8_t *req;
    size_t req_len;
    size_t n_req;
    bool dispatched;
    /* response state */
    struct gv_buf out; /* framed messages not yet handed to nghttp2 */
    size_t out_off;
    bool headers_sent;  /* response headers + data provider submitted */
    bool finished;      /* status decided */
    bool trailers_sent; /* trailers submitted (or trailers-only response) */
    int status;
    char *status_msg;
    gv_grpc_close_cb on_close;
    void *on_close_ud;
    struct gv_grpc_call *next;
};

struct conn {
    struct gv_grpc_server *srv;
    int fd;
    nghttp2_session *session;
    uint8_t *wbuf;
    size_t wlen, woff;
    int hold; /* >0: inside nghttp2 callbacks or a multi-step update; flush later */
    bool want_out;
    bool closing;
    bool goaway_sent;
    bool lingering;         /* all sent, write side shut: waiting for the peer's EOF */
    uint64_t linger_timer;
    uint64_t idle_timer;
    int64_t last_active_ms; /* monotonic: last bytes received */
    struct gv_grpc_call *calls;
    struct conn *next;
};

struct gv_grpc_server {
    struct gv_loop *loop;
    char *path;
    const struct gv_grpc_method *methods;
    size_t n_methods;
    void *ud;
    size_t max_recv, max_send;
    int listen_fd;
    dev_t sock_dev;
    ino_t sock_ino;
    struct conn *conns;
    size_t n_conns, max_conns;
    int64_t idle_ms;
    uint64_t next_call_id;
    bool draining;
    uint64_t grace_timer;
};

static bool conn_flush(struct conn *c);
static void conn_close(struct conn *c);

/* A connection without calls that stayed silent idle_ms is closed: idle
 * connections cost an HTTP/2 session each (~13 KiB) and a slot under the
 * cap.  One with a call open (ListAndWatch) is never idle. */
static void idle_check(struct gv_loop *loop, void *ud)
{
    struct conn *c = ud;
    struct gv_grpc_server *srv = c->srv;
    c->idle_timer = 0;
    int64_t quiet = gv_loop_now_ms() - c->last_active_ms;
    if (c->calls == NULL && quiet >= srv->idle_ms) {
        gv_debug("grpc: closing a connection idle for %lld ms", (long long)quiet);
        conn_close(c);
        return;
    }
    int64_t wait = c->calls ? srv->idle_ms : srv->idle_ms - quiet;
    c->idle_timer = gv_loop_timer(loop, wait > 0 ? wait : 1, idle_check, c);
}

static void linger_expired(struct gv_loop *loop, void *ud)
{
    (void)loop;
    struct conn *c = ud;
    c->linger_timer = 0;
    conn_close(c);
}

/* ---- helpers ------------------------------------------------------------ */

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME     \
    }

/* grpc-message is percent-encoded: printable ASCII except '%' passes as is. */
static char *percent_encode(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1);
    if (out == NULL)
        return NULL;
    char *p = out;
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        if (*q >= 0x20 && *q <= 0x7e && *q != '%') {
            *p++ = (char)*q;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            *p++ = '%';
            *p++ = hex[*q >> 4];
            *p++ = hex[*q & 15];
        }
    }
    *p = '\0';
    return out;
}

static struct gv_grpc_call *find_call(struct gv_grpc_server *srv, uint64_t id)
{
    for (struct conn *c = srv->conns; c; c = c->next)
        for (struct gv_grpc_call *call = c->calls; call; call = call->next)
            if (call->id == id)
                return call;
    return NULL;
}

static void call_free(struct gv_grpc_call *call)
{
    struct conn *c = call->conn;
    for (struct gv_grpc_call **pp = &c->calls; *pp; pp = &(*pp)->next) {
        if (*pp == call) {
            *pp = call->next;
            break;
        }
    }
    if (call->deadline_timer)
        gv_loop_timer_cancel(c->srv->loop, call->deadline_timer);
    if (call->on_close) {
        gv_grpc_close_cb cb = call->on_close;
        call->on_close = NULL;
        cb(call, call->on_close_ud);
    }
    gv_grpc_framer_clear(&call->framer);
    free(call->req);
    gv_buf_free(&call->out);
    free(call->status_msg);
    free(call);
}

/* ---- response path ------------------------------------------------------ */

static ssize_t data_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                            size_t length, uint32_t *data_flags, nghttp2_data_source *source,
                            void *user_data)
{
    (void)user_data;
    struct gv_grpc_call *call = source->ptr;
    size_t avail = call->out.len - call->out_off;
    if (avail > 0) {
        size_t n = avail < length ? avail : length;
        memcpy(buf, call->out.data + call->out_off, n);
        call->out_off += n;
        if (call->out_off == call->out.len) {
            call->out_off = 0;
            gv_buf_reset(&call->out);
        }
        return (ssize_t)n;
    }
    if (!call->finished)
        return NGHTTP2_ERR_DEFERRED;
    *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    char code[16];
    snprintf(code, sizeof(code), "%d", call->status);
    nghttp2_nv tr[2] = {NV("grpc-status", code), NV("grpc-message", "")};
    size_t ntr = 1;
    if (call->status_msg) {
        tr[1].value = (uint8_t *)call->status_msg;
        tr[1].valuelen = strlen(call->status_msg);
        ntr = 2;
    }
    int rv = nghttp2_submit_trailer(session, stream_id, tr, ntr);
    if (rv != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    call->trailers_sent = true;
    return 0;
}

static int submit_headers(struct gv_grpc_call *call)
{
    nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = call, .read_callback = data_read_cb};
    int rv = nghttp2_submit_response(call->conn->session, call->stream_id, hdrs, 2, &prd);
    if (rv == 0)
        call->headers_sent = true;
    return rv;
}

/* Queues raw bytes (already framed) for the data provider. */
static gv_status queue_out(struct gv_grpc_call *call, const uint8_t *hdr, const uint8_t *msg,
                           size_t len, struct gv_error *err)
{
    /* Reserve first so a frame is queued whole or not at all. */
    if (gv_buf_reserve(&call->out, 5 + len) != GV_OK)
        return gv_error_set(err, GV_ENOMEM, "grpc: out of memory queueing %zu bytes", len);
    gv_buf_append(&call->out, hdr, 5);
    gv_buf_append(&call->out, msg, len);
    return GV_OK;
}

uint64_t gv_grpc_call_id(const struct gv_grpc_call *call)
{
    return call->id;
}

const char *gv_grpc_call_path(const struct gv_grpc_call *call)
{
    return call->path;
}

void gv_grpc_call_on_close(struct gv_grpc_call *call, gv_grpc_close_cb cb, void *ud)
{
    call->on_close = cb;
    call->on_close_ud = ud;
}

gv_status gv_grpc_call_send(struct gv_grpc_call *call, const uint8_t *msg, size_t len,
                            struct gv_error *err)
{
    struct conn *c = call->conn;
    if (call->finished)
        return gv_error_set(err, GV_EINVAL, "grpc: %s: send after finish", call->path);
    if (len > c->srv->max_send)
        return gv_error_set(err, GV_ERANGE,
                            "grpc: %s: response of %zu bytes exceeds the limit of %zu", call->path,
                            len, c->srv->max_send);
    uint8_t hdr[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                      (uint8_t)len};
    gv_status st = queue_out(call, hdr, msg, len, err);
    if (st != GV_OK)
        return st;
    if (!call->headers_sent) {
        if (submit_headers(call) != 0)
            return gv_error_set(err, GV_EIO, "grpc: %s: cannot submit response", call->path);
    } else {
        nghttp2_session_resume_data(c->session, call->stream_id);
    }
    conn_flush(c);
    return GV_OK;
}

void gv_grpc_call_finish(struct gv_grpc_call *call, int status, const char *message)
{
    if (call->finished)
        return;
    struct conn *c = call->conn;
    call->finished = true;
    call->status = status;
    if (message && *message)
        call->status_msg = percent_encode(message);
    if (status != GV_GRPC_OK)
        gv_debug("grpc: %s -> %s: %s", call->path, gv_grpc_status_name(status),
                 message ? message : "");
    if (!call->headers_sent) {
        /* Trailers-Only response: one HEADERS frame carrying the status. */
        char code[16];
        snprintf(code, sizeof(code), "%d", status);
        nghttp2_nv hdrs[4] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                              NV("grpc-status", code), NV("grpc-message", "")};
        size_t n = 3;
        if (call->status_msg) {
            hdrs[3].value = (uint8_t *)call->status_msg;
            hdrs[3].valuelen = strlen(call->status_msg);
            n = 4;
        }
        call->headers_sent = true;
        call->trailers_sent = true;
        if (nghttp2_submit_response(c->session, call->stream_id, hdrs, n, NULL) != 0)
            nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, call->stream_id,
                                      NGHTTP2_INTERNAL_ERROR);
    } else {
        nghttp2_session_resume_data(c->session, call->stream_id);
    }
    /* The client may not have half-closed yet: once our side is done, stop reading. */
    conn_flush(c);
}

/* ---- request path ------------------------------------------------------- */

static void deadline_cb(struct gv_loop *loop, void *ud)
{
    (void)loop;
    struct gv_grpc_call *call = ud;
    call->deadline_timer = 0;
    gv_grpc_call_finish(call, GV_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
}

static gv_status collect_msg(const uint8_t *msg, size_t len, void *ud, struct gv_error *err)
{
    struct gv_grpc_call *call = ud;
    if (++call->n_req > 1)
        return gv_error_set(err, GV_EPROTO, "grpc: %s: more than one request message",
                            call->path);
    call->req = malloc(len + 1);
    if (call->req == NULL)
        return gv_error_set(err, GV_ENOMEM, "grpc: out of memory");
    memcpy(call->req, msg, len);
    call->req_len = len;
    return GV_OK;
}

/* Whole request received: answer a rejected call, or run the handler. */
static void dispatch(struct gv_grpc_call *call)
{
    if (call->dispatched || call->finished)
        return;
    call->dispatched = true;
    if (call->bad_method || call->bad_content_type) {
        nghttp2_nv hdrs[] = {NV(":status", "415"), NV("content-type", "text/plain")};
        if (call->bad_method)
            hdrs[0].value = (uint8_t *)"405";
        call->headers_sent = call->trailers_sent = call->finished = true;
        nghttp2_submit_response(call->conn->session, call->stream_id, hdrs, 2, NULL);
        return;
    }
    if (call->method == NULL) {
        char msg[300];
        snprintf(msg, sizeof(msg), "unknown method %s", call->path);
        gv_grpc_call_finish(call, GV_GRPC_UNIMPLEMENTED, msg);
        return;
    }
    if (call->n_req != 1 || !gv_grpc_framer_idle(&call->framer)) {
        gv_grpc_call_finish(call, GV_GRPC_INTERNAL,
                            "request stream ended without exactly one complete message");
        return;
    }
    call->method->handler(call, call->req, call->req_len, call->conn->srv->ud);
}

/*
 * Request headers complete: route and arm the deadline.  A call that cannot
 * be served is answered once the client has sent its whole request: some
 * clients (curl 7.88) never finish a stream whose response came first.
 */
static void begin_call(struct gv_grpc_call *call)
{
    struct gv_grpc_server *srv = call->conn->srv;
    if (call->bad_method || call->bad_content_type)
        return;
    for (size_t i = 0; i < srv->n_methods; i++)
        if (strcmp(srv->methods[i].path, call->path) == 0)
            call->method = &srv->methods[i];
    if (call->method != NULL && call->timeout_ms >= 0)
        call->deadline_timer = gv_loop_timer(srv->loop, call->timeout_ms, deadline_cb, call);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    struct conn *c = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct gv_grpc_call *call = calloc(1, sizeof(*call));
    if (call == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    call->id = ++c->srv->next_call_id;
    call->stream_id = frame->hd.stream_id;
    call->conn = c;
    call->timeout_ms = -1;
    call->bad_content_type = true; /* until the headers prove otherwise */
    call->bad_method = true;
    gv_grpc_framer_init(&call->framer, c->srv->max_recv);
    call->next = c->calls;
    c->calls = call;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
    return 0;
}

static bool header_is(const uint8_t *name, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    (void)flags;
    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct gv_grpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    if (header_is(name, namelen, ":path")) {
        size_t n = valuelen < sizeof(call->path) - 1 ? valuelen : sizeof(call->path) - 1;
        memcpy(call->path, value, n);
        call->path[n] = '\0';
    } else if (header_is(name, namelen, ":method")) {
        call->bad_method = !(valuelen == 4 && memcmp(value, "POST", 4) == 0);
    } else if (header_is(name, namelen, "content-type")) {
        /* "application/grpc" optionally followed by "+proto" or ";..." */
        call->bad_content_type =
            !(valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
              (valuelen == 16 || value[16] == '+' || value[16] == ';'));
    } else if (header_is(name, namelen, "grpc-timeout")) {
        int64_t ms;
        struct gv_error e;
        if (gv_grpc_parse_timeout((const char *)value, valuelen, &ms, &e) == GV_OK)
            call->timeout_ms = ms;
        else
            gv_debug("%s", e.msg); /* like grpc-go: a bad timeout is ignored */
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    struct gv_grpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        begin_call(call);
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !call->finished)
        dispatch(call);
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user_data)
{
    (void)flags;
    (void)user_data;
    struct gv_grpc_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (call == NULL || call->finished || call->dispatched || call->method == NULL)
        return 0; /* rejected calls discard their body */
    struct gv_error e;
    gv_status st = gv_grpc_framer_feed(&call->framer, data, len, collect_msg, call, &e);
    if (st != GV_OK) {
        int code = st == GV_ERANGE           ? GV_GRPC_RESOURCE_EXHAUSTED
                   : st == GV_EUNSUPPORTED ? GV_GRPC_UNIMPLEMENTED
                                           : GV_GRPC_INTERNAL;
        gv_grpc_call_finish(call, code, e.msg);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user_data)
{
    (void)error_code;
    (void)user_data;
    struct gv_grpc_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (call == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    if (!call->finished)
        gv_debug("grpc: %s cancelled by the client", call->path);
    call->finished = true; /* nothing may be submitted on a closed stream */
    call_free(call);
    return 0;
}

/*
 * A response can end before the request did (unknown method, deadline,
 * oversized message).  Like grpc-go, follow the final HEADERS with
 * RST_STREAM(NO_ERROR) so the client stops sending (RFC 9113 section 8.1);
 * curl, for one, otherwise waits for a stream close that never comes.
 */
static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    (void)user_data;
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

/* ---- connection I/O ------------------------------------------------------ */

static void conn_update_events(struct conn *c)
{
    bool want = c->wlen > c->woff;
    if (want != c->want_out) {
        c->want_out = want;
        gv_loop_mod_fd(c->srv->loop, c->fd, EPOLLIN | (want ? EPOLLOUT : 0u), NULL);
    }
}

static bool conn_write_pending(struct conn *c)
{
    while (c->woff < c->wlen) {
        ssize_t n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return true;
            return false;
        }
        c->woff += (size_t)n;
    }
    c->woff = c->wlen = 0;
    return true;
}

static void maybe_goaway(struct conn *c)
{
    if (c->srv->draining && c->calls == NULL && !c->goaway_sent) {
        c->goaway_sent = true;
        nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
    }
}

/*
 * Moves nghttp2's output to the socket; closes the connection when done.
 * Returns false when the connection is gone (c is freed: do not touch it).
 */
static bool conn_flush(struct conn *c)
{
    if (c->closing)
        return false;
    if (c->hold > 0)
        return true;
    maybe_goaway(c);
    for (;;) {
        if (!conn_write_pending(c)) {
            conn_close(c);
            return false;
        }
        if (c->wlen > 0)
            break; /* socket full: wait for EPOLLOUT */
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0) {
            gv_warn("grpc: connection error: %s", nghttp2_strerror((int)n));
            conn_close(c);
            return false;
        }
        if (n == 0)
            break;
        uint8_t *p = realloc(c->wbuf, (size_t)n);
        if (p == NULL) {
            conn_close(c);
            return false;
        }
        c->wbuf = p;
        memcpy(c->wbuf, data, (size_t)n);
        c->wlen = (size_t)n;
        c->woff = 0;
    }
    if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session) &&
        c->wlen == 0) {
        /*
         * Lingering close: a peer that still writes (a WINDOW_UPDATE, a PING
         * ack) into a closed socket gets EPIPE and may fail streams whose
         * trailers it has not processed yet.  Shut our side, wait for its EOF.
         */
        if (!c->lingering) {
            c->lingering = true;
            /* An EPOLLOUT left armed by the last partial write would spin the loop. */
            conn_update_events(c);
            shutdown(c->fd, SHUT_WR);
            c->linger_timer = gv_loop_timer(c->srv->loop, 1000, linger_expired, c);
        }
        return true;
    }
    conn_update_events(c);
    return true;
}

static void conn_close(struct conn *c)
{
    struct gv_grpc_server *srv = c->srv;
    if (c->closing)
        return;
    c->closing = true;
    if (c->linger_timer)
        gv_loop_timer_cancel(srv->loop, c->linger_timer);
    if (c->idle_timer)
        gv_loop_timer_cancel(srv->loop, c->idle_timer);
    /* nghttp2_session_del() does not report the open streams: close them here. */
    while (c->calls) {
        c->calls->finished = true;
        call_free(c->calls);
    }
    gv_loop_del_fd(srv->loop, c->fd);
    close(c->fd);
    nghttp2_session_del(c->session);
    for (struct conn **pp = &srv->conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            srv->n_conns--;
            break;
        }
    }
    free(c->wbuf);
    free(c);
}

static void conn_io(struct gv_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)loop;
    struct conn *c = ud;
    if (c->lingering) {
        uint8_t sink[4096];
        ssize_t n;
        while ((n = recv(fd, sink, sizeof(sink), 0)) > 0)
            ;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            conn_close(c);
        return;
    }
    if (events & EPOLLIN) {
        uint8_t buf[16384];
        for (;;) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (n <= 0) {
                conn_close(c);
                return;
            }
            c->last_active_ms = gv_loop_now_ms();
            c->hold++;
            ssize_t rv = nghttp2_session_mem_recv(c->session, buf, (size_t)n);
            c->hold--;
            if (rv < 0) {
                gv_debug("grpc: bad HTTP/2 input: %s", nghttp2_strerror((int)rv));
                /* nghttp2 queued a GOAWAY for protocol errors: send it, then close. */
                if (conn_flush(c))
                    conn_close(c);
                return;
            }
            if (!conn_flush(c))
                return;
            if ((size_t)n < sizeof(buf))
                break;
        }
    } else if (events & (EPOLLHUP | EPOLLERR)) {
        conn_close(c);
        return;
    }
    if (events & EPOLLOUT)
        conn_flush(c);
}

/* Room for one more connection: closes the longest-idle one without calls
 * when at the cap; false when every connection has a call open. */
static bool make_room(struct gv_grpc_server *srv)
{
    if (srv->n_conns < srv->max_conns)
        return true;
    struct conn *victim = NULL;
    for (struct conn *c = srv->conns; c; c = c->next)
        if (c->calls == NULL && !c->closing &&
            (victim == NULL || c->last_active_ms < victim->last_active_ms))
            victim = c;
    if (victim == NULL)
        return false;
    gv_debug("grpc: %zu connections (the cap): closing the longest idle one", srv->n_conns);
    conn_close(victim);
    return true;
}

gv_status gv_grpc_server_adopt(struct gv_grpc_server *srv, int fd, struct gv_error *err)
{
    if (!make_room(srv))
        return gv_error_set(err, GV_EUNAVAILABLE,
                            "grpc: %zu connections with calls open (the cap); refusing another",
                            srv->n_conns);
    struct conn *c = calloc(1, sizeof(*c));
    nghttp2_session_callbacks *cbs = NULL;
    if (c == NULL || nghttp2_session_callbacks_new(&cbs) != 0) {
        free(c);
        return gv_error_set(err, GV_ENOMEM, "grpc: out of memory");
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    c->srv = srv;
    c->fd = fd;
    /*
     * grpc-go (the kubelet) sends the socket path as :authority, which
     * nghttp2's HTTP messaging checks reject with PROTOCOL_ERROR; gRPC
     * routing needs only :path, :method and content-type, checked in
     * begin_call().
     */
    nghttp2_option *opt = NULL;
    int rv = nghttp2_option_new(&opt);
    if (rv == 0) {
        nghttp2_option_set_no_http_messaging(opt, 1);
        rv = nghttp2_session_server_new2(&c->session, cbs, c, opt);
        nghttp2_option_del(opt);
    }
    nghttp2_session_callbacks_del(cbs);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 128},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
    };
    gv_status st = GV_OK;
    if (rv != 0 || nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 2) != 0)
        st = gv_error_set(err, GV_ENOMEM, "grpc: cannot set up the HTTP/2 session");
    else
        st = gv_loop_add_fd(srv->loop, fd, EPOLLIN, conn_io, c, err);
    if (st != GV_OK) {
        if (c->session)
            nghttp2_session_del(c->session);
        free(c);
        return st;
    }
    c->next = srv->conns;
    srv->conns = c;
    srv->n_conns++;
    c->last_active_ms = gv_loop_now_ms();
    c->idle_timer = gv_loop_timer(srv->loop, srv->idle_ms, idle_check, c);
    if (srv->draining)
        nghttp2_submit_shutdown_notice(c->session);
    conn_flush(c);
    return GV_OK;
}

static void accept_cb(struct gv_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)loop;
    (void)events;
    struct gv_grpc_server *srv = ud;
    for (;;) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                gv_warn("grpc: accept on %s: %s", srv->path, strerror(errno));
            return;
        }
        struct gv_error err;
        if (gv_grpc_server_adopt(srv, cfd, &err) != GV_OK) {
            gv_warn("grpc: connection dropped: %s", err.msg);
            close(cfd);
        }
    }
}

/* ---- server lifecycle ---------------------------------------------------- */

gv_status gv_grpc_server_new(struct gv_loop *loop, const struct gv_grpc_server_config *cfg,
                             struct gv_grpc_server **out, struct gv_error *err)
{
    struct sockaddr_un sa;
    if (strlen(cfg->socket_path) >= sizeof(sa.sun_path))
        return gv_error_set(err, GV_EINVAL, "grpc: socket path '%s' longer than %zu bytes",
                            cfg->socket_path, sizeof(sa.sun_path) - 1);
    struct gv_grpc_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL || (srv->path = strdup(cfg->socket_path)) == NULL) {
        free(srv);
        return gv_error_set(err, GV_ENOMEM, "grpc: out of memory");
    }
    srv->loop = loop;
    srv->methods = cfg->methods;
    srv->n_methods = cfg->n_methods;
    srv->ud = cfg->ud;
    srv->max_recv = cfg->max_recv_msg ? cfg->max_recv_msg : GV_GRPC_DEFAULT_MAX_MSG;
    srv->max_send = cfg->max_send_msg ? cfg->max_send_msg : GV_GRPC_DEFAULT_MAX_MSG;
    srv->listen_fd = -1;
    srv->max_conns = cfg->max_conns ? cfg->max_conns : 64;
    srv->idle_ms = cfg->idle_ms > 0 ? cfg->idle_ms : 60000;
    *out = srv;
    return GV_OK;
}

static void close_listener(struct gv_grpc_server *srv)
{
    if (srv->listen_fd < 0)
        return;
    gv_loop_del_fd(srv->loop, srv->listen_fd);
    close(srv->listen_fd);
    srv->listen_fd = -1;
}

gv_status gv_grpc_server_listen(struct gv_grpc_server *srv, struct gv_error *err)
{
    close_listener(srv);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return gv_error_set(err, GV_EIO, "grpc: socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, srv->path, strlen(srv->path) + 1);
    if (unlink(srv->path) != 0 && errno != ENOENT) {
        gv_error_set(err, GV_EIO, "grpc: cannot remove stale %s: %s", srv->path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 64) != 0 ||
        stat(srv->path, &st) != 0) {
        gv_error_set(err, GV_EIO, "grpc: listen on %s: %s", srv->path, strerror(errno));
        goto fail;
    }
    if (gv_loop_add_fd(srv->loop, fd, EPOLLIN, accept_cb, srv, err) != GV_OK)
        goto fail;
    srv->listen_fd = fd;
    srv->sock_dev = st.st_dev;
    srv->sock_ino = st.st_ino;
    return GV_OK;
fail:
    close(fd);
    return err ? err->code : GV_EIO;
}

bool gv_grpc_server_socket_present(const struct gv_grpc_server *srv)
{
    struct stat st;
    return srv->listen_fd >= 0 && stat(srv->path, &st) == 0 && S_ISSOCK(st.st_mode) &&
           st.st_dev == srv->sock_dev && st.st_ino == srv->sock_ino;
}

static void grace_expired(struct gv_loop *loop, void *ud)
{
    (void)loop;
    struct gv_grpc_server *srv = ud;
    srv->grace_timer = 0;
    for (struct conn *c = srv->conns; c; c = c->next) {
        c->hold++; /* no flush (which may free calls) while walking the list */
        for (struct gv_grpc_call *call = c->calls; call; call = call->next)
            gv_grpc_call_finish(call, GV_GRPC_UNAVAILABLE, "server shutting down");
        c->hold--;
    }
    for (struct conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (!c->goaway_sent) {
            c->goaway_sent = true;
            nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
        }
        conn_flush(c);
    }
}

void gv_grpc_server_shutdown(struct gv_grpc_server *srv, int64_t grace_ms)
{
    if (srv->draining)
        return;
    srv->draining = true;
    if (gv_grpc_server_socket_present(srv))
        unlink(srv->path);
    close_listener(srv);
    for (struct conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        nghttp2_submit_shutdown_notice(c->session);
        conn_flush(c);
    }
    srv->grace_timer = gv_loop_timer(srv->loop, grace_ms, grace_expired, srv);
}

bool gv_grpc_server_drained(const struct gv_grpc_server *srv)
{
    return srv->conns == NULL;
}

size_t gv_grpc_server_connections(const struct gv_grpc_server *srv)
{
    size_t n = 0;
    for (struct conn *c = srv->conns; c; c = c->next)
        n++;
    return n;
}

void gv_grpc_server_free(struct gv_grpc_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->grace_timer)
        gv_loop_timer_cancel(srv->loop, srv->grace_timer);
    while (srv->conns)
        conn_close(srv->conns);
    close_listener(srv);
    free(srv->path);
    free(srv);
}

/* ---- completions from other threads ------------------------------------- */

struct completion {
    struct gv_grpc_server *srv;
    uint64_t id;
    int status;
    char *message;
    uint8_t *msg;
    size_t len;
};

static void complete_on_loop(struct gv_loop *loop, void *ud)
{
    (void)loop;
    struct completion *cp = ud;
    struct gv_grpc_call *call = find_call(cp->srv, cp->id);
    if (call != NULL) {
        struct conn *c = call->conn;
        c->hold++; /* a flush could close the connection (and free call) between steps */
        int status = cp->status;
        const char *message = cp->message;
        struct gv_error e;
        if (cp->msg != NULL && gv_grpc_call_send(call, cp->msg, cp->len, &e) != GV_OK) {
            status = GV_GRPC_RESOURCE_EXHAUSTED;
            message = e.msg;
        }
        gv_grpc_call_finish(call, status, message);
        c->hold--;
        conn_flush(c);
    }
    free(cp->message);
    free(cp->msg);
    free(cp);
}

void gv_grpc_server_complete(struct gv_grpc_server *srv, uint64_t id, int status,
                             const char *message, uint8_t *msg, size_t len)
{
    struct completion *cp = calloc(1, sizeof(*cp));
    if (cp == NULL) {
        free(msg);
        return;
    }
    cp->srv = srv;
    cp->id = id;
    cp->status = status;
    cp->message = message ? strdup(message) : NULL;
    cp->msg = msg;
    cp->len = len;
    if (!gv_loop_post(srv->loop, complete_on_loop, cp)) {
        free(cp->message);
        free(cp->msg);
        free(cp);
    }
}
