/*
 * HTTP/1.1 exchanges with one API server: connect (TCP with keepalive, or a
 * unix socket), optional TLS, write the request, parse the response as it
 * arrives, and keep the connection for the next request when the response
 * allows it.
 *
 * Every wait is a poll() on the socket plus the caller's cancel fd, bounded
 * by the exchange's deadline, so a watch is woken at once by a cancel and a
 * stuck server costs at most the timeout.  Idle connections wait in a small
 * pool; one the server has closed meanwhile shows up readable and is
 * dropped, and a request whose reused connection dies before any response
 * byte is sent again once on a fresh connection (the server cannot have
 * seen it complete), as browsers and libcurl do.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_buf.h"
#include "common/gv_version.h"
#include "kube/kube_http.h"

/* Connections for ordinary requests (watches have their own): at most
 * CONN_MAX busy at once, and every one kept for the next request.  The
 * scheduler's binds come in bursts (kube-scheduler binds each pod in a
 * goroutine of its own: a burst of 1,000 pods is 1,000 Bindings at once).
 * With 4 connections kept, every write beyond the 4th opened a new TCP +
 * TLS connection and closed it after one request: the API server spent its
 * CPU on handshakes and the binds queued behind them.  A request that finds
 * CONN_MAX busy waits in line (conn_slots.c: first come, first served) until
 * its own deadline, and never opens a connection beyond the cap: the API
 * server could not serve it sooner, and each extra connection would cost
 * it a handshake (bench/results/e2e_bind.txt, docs/scheduler.md "Where a
 * bind's time goes").  No request waits for a slot while holding one (a
 * response body callback never calls the client), so the cap cannot
 * deadlock. */
#ifndef GV_KUBE_CONN_MAX /* -D for a measurement against other caps */
#define GV_KUBE_CONN_MAX 32
#endif
#define POOL_MAX GV_KUBE_CONN_MAX
#define CONN_MAX GV_KUBE_CONN_MAX
/* TCP keepalive: notice a dead peer on a quiet watch within ~1 min. */
#define KEEPIDLE_S 30
#define KEEPINTVL_S 10
#define KEEPCNT 3
#define READ_CHUNK 16384

struct conn {
    int fd;
    struct gv_tls_session *tls; /* NULL for plain HTTP */
    struct conn *next;
};

struct gv_http {
    char *host;   /* name or IP literal, brackets stripped */
    char *port;   /* decimal */
    char *prefix; /* path prefix of the server URL ("" or "/k8s") */
    char *host_header;
    char *unix_socket;
    struct gv_tls *tls; /* NULL for http:// */
    long connect_timeout_ms;

    pthread_mutex_t pool_mu;
    struct conn *idle;
    int nidle;
    uint64_t opened; /* connections opened (under pool_mu) */
    struct gv_slots slots; /* ordinary requests holding a connection */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* ------------------------------------------------------------------------
 * Client
 */

/* Splits the server URL into host, port, Host header and path prefix;
 * *https says whether it asks for TLS. */
static gv_status parse_server(struct gv_http *h, const char *url, bool *https,
                              struct gv_error *err)
{
    *https = strncmp(url, "https://", 8) == 0;
    if (!*https && strncmp(url, "http://", 7) != 0)
        return gv_error_set(err, GV_EINVAL, "server \"%s\" is not an http:// or https:// URL",
                            url);
    const char *a = url + (*https ? 8 : 7);
    const char *slash = strchr(a, '/');
    const char *auth_end = slash != NULL ? slash : a + strlen(a);
    if (memchr(a, '@', (size_t)(auth_end - a)) != NULL || memchr(a, '?', (size_t)(auth_end - a)))
        return gv_error_set(err, GV_EINVAL, "server \"%s\": user info or query not supported",
                            url);
    const char *host = a, *host_end, *port = NULL;
    if (*a == '[') {
        host = a + 1;
        host_end = memchr(host, ']', (size_t)(auth_end - host));
        if (host_end == NULL)
            return gv_error_set(err, GV_EINVAL, "server \"%s\": unterminated [IPv6] host", url);
        if (host_end + 1 < auth_end) {
            if (host_end[1] != ':')
                return gv_error_set(err, GV_EINVAL, "server \"%s\": junk after ]", url);
            port = host_end + 2;
        }
    } else {
        const char *colon = memchr(a, ':', (size_t)(auth_end - a));
        host_end = colon != NULL ? colon : auth_end;
        if (colon != NULL)
            port = colon + 1;
    }
    if (host_end == host)
        return gv_error_set(err, GV_EINVAL, "server \"%s\": no host", url);
    if (port != NULL) {
        size_t pl = (size_t)(auth_end - port);
        long v = 0;
        for (size_t i = 0; i < pl; i++) {
            if (port[i] < '0' || port[i] > '9' || (v = v * 10 + (port[i] - '0')) > 65535)
                return gv_error_set(err, GV_EINVAL, "server \"%s\": bad port", url);
        }
        if (pl == 0 || v == 0)
            return gv_error_set(err, GV_EINVAL, "server \"%s\": bad port", url);
        h->port = dup_range(port, pl);
    } else {
        h->port = strdup(*https ? "443" : "80");
    }
    h->host = dup_range(host, (size_t)(host_end - host));
    h->host_header = dup_range(a, (size_t)(auth_end - a));
    /* The prefix keeps no trailing slash so prefix + "/api/..." is exact. */
    size_t pl = slash != NULL ? strlen(slash) : 0;
    while (pl > 0 && slash[pl - 1] == '/')
        pl--;
    h->prefix = dup_range(slash != NULL ? slash : "", pl);
    if (h->port == NULL || h->host == NULL || h->host_header == NULL || h->prefix == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    return GV_OK;
}

gv_status gv_http_new(const struct gv_http_opts *o, struct gv_http **out, struct gv_error *err)
{
    *out = NULL;
    struct gv_http *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    pthread_mutex_init(&h->pool_mu, NULL);
    gv_slots_init(&h->slots, CONN_MAX);
    h->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
    bool https = false;
    gv_status st = parse_server(h, o->server != NULL ? o->server : "", &https, err);
    if (st != GV_OK)
        goto fail;
    if (o->unix_socket != NULL) {
        if (strlen(o->unix_socket) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            st = gv_error_set(err, GV_EINVAL, "unix socket path too long: %s", o->unix_socket);
            goto fail;
        }
        if ((h->unix_socket = strdup(o->unix_socket)) == NULL) {
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (https && (st = gv_tls_new(&o->tls, &h->tls, err)) != GV_OK)
        goto fail;
    *out = h;
    return GV_OK;
fail:
    gv_http_free(h);
    return st;
}

static void conn_close(struct conn *c)
{
    if (c == NULL)
        return;
    gv_tls_session_free(c->tls);
    close(c->fd);
    free(c);
}

void gv_http_free(struct gv_http *h)
{
    if (h == NULL)
        return;
    while (h->idle != NULL) {
        struct conn *c = h->idle;
        h->idle = c->next;
        conn_close(c);
    }
    gv_tls_free(h->tls);
    pthread_mutex_destroy(&h->pool_mu);
    gv_slots_destroy(&h->slots);
    free(h->host);
    free(h->port);
    free(h->prefix);
    free(h->host_header);
    free(h->unix_socket);
    free(h);
}

/* ------------------------------------------------------------------------
 * Waiting
 */

enum wait_result { WAIT_READY, WAIT_TIMEOUT, WAIT_CANCELLED, WAIT_ERROR };

/* Waits for events on fd until deadline (0: none) or cancel_fd fires. */
static enum wait_result wait_fd(int fd, short events, int64_t deadline, int cancel_fd)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = cancel_fd, .events = POLLIN}};
        int timeout = -1;
        if (deadline > 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0)
                return WAIT_TIMEOUT;
            timeout = left > 60000 ? 60000 : (int)left;
        }
        int n = poll(p, cancel_fd >= 0 ? 2 : 1, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return WAIT_ERROR;
        }
        if (cancel_fd >= 0 && (p[1].revents & POLLIN))
            return WAIT_CANCELLED;
        if (n > 0 && p[0].revents != 0)
            return WAIT_READY; /* errors and hangups surface in the next I/O call */
    }
}

static gv_status wait_error(enum wait_result w, const char *what, long timeout_ms,
                            struct gv_http_result *res, struct gv_error *err)
{
    switch (w) {
    case WAIT_TIMEOUT:
        res->retryable = true;
        return gv_error_set(err, GV_ETIMEOUT, "%s: timed out after %ld ms", what, timeout_ms);
    case WAIT_CANCELLED:
        res->cancelled = true;
        return GV_OK;
    default:
        res->retryable = true;
        return gv_error_set(err, GV_EUNAVAILABLE, "%s: poll: %s", what, strerror(errno));
    }
}

/* ------------------------------------------------------------------------
 * Connecting
 */

static void tune_tcp(int fd)
{
    int one = 1, idle = KEEPIDLE_S, intvl = KEEPINTVL_S, cnt = KEEPCNT;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* Non-blocking connect to one address; >= 0 fd, -1 failed (errno), -2 timeout, -3 cancelled. */
static int connect_addr(const struct sockaddr *sa, socklen_t salen, int family, int64_t deadline,
                        int cancel_fd)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, sa, salen) == 0)
        return fd;
    if (errno != EINPROGRESS && errno != EAGAIN) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    enum wait_result w = wait_fd(fd, POLLOUT, deadline, cancel_fd);
    if (w != WAIT_READY) {
        close(fd);
        return w == WAIT_TIMEOUT ? -2 : w == WAIT_CANCELLED ? -3 : -1;
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
        close(fd);
        errno = soerr != 0 ? soerr : errno;
        return -1;
    }
    return fd;
}

static int open_socket(struct gv_http *h, int64_t deadline, int cancel_fd, struct gv_error *err)
{
    if (h->unix_socket != NULL) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, h->unix_socket, strlen(h->unix_socket) + 1);
        int fd = connect_addr((struct sockaddr *)&sa, sizeof(sa), AF_UNIX, deadline, cancel_fd);
        if (fd == -1)
            gv_error_set(err, GV_EUNAVAILABLE, "connect to unix socket %s: %s", h->unix_socket,
                         strerror(errno));
        return fd;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(h->host, h->port, &hints, &ai);
    if (rc != 0) {
        gv_error_set(err, GV_EUNAVAILABLE, "cannot resolve %s: %s", h->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, last_errno = 0;
    for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
        fd = connect_addr(a->ai_addr, a->ai_addrlen, a->ai_family, deadline, cancel_fd);
        if (fd >= 0 || fd == -2 || fd == -3)
            break;
        last_errno = errno;
    }
    freeaddrinfo(ai);
    if (fd >= 0)
        tune_tcp(fd);
    else if (fd == -1)
        gv_error_set(err, GV_EUNAVAILABLE, "connect to %s port %s: %s", h->host, h->port,
                     strerror(last_errno));
    return fd;
}

/* Runs the TLS handshake on c to completion, deadline or cancel. */
static gv_status handshake(struct gv_http *h, struct conn *c, int64_t deadline, int cancel_fd,
                           long timeout_ms, struct gv_http_result *res, struct gv_error *err)
{
    gv_status st = gv_tls_session_new(h->tls, c->fd, h->host, &c->tls, err);
    if (st != GV_OK)
        return st;
    for (;;) {
        bool retryable = true;
        enum gv_tls_io io = gv_tls_handshake(c->tls, &retryable, err);
        if (io == GV_TLS_DONE)
            return GV_OK;
        if (io == GV_TLS_ERROR || io == GV_TLS_EOF) {
            res->retryable = retryable;
            if (io == GV_TLS_EOF)
                gv_error_set(err, GV_EUNAVAILABLE, "TLS handshake: connection closed");
            gv_error_prefix(err, "%s port %s", h->host, h->port);
            return GV_EUNAVAILABLE;
        }
        enum wait_result w =
            wait_fd(c->fd, io == GV_TLS_WANT_READ ? POLLIN : POLLOUT, deadline, cancel_fd);
        if (w != WAIT_READY)
            return wait_error(w, "TLS handshake", timeout_ms, res, err);
    }
}

static gv_status conn_open(struct gv_http *h, struct conn **out, int64_t deadline, int cancel_fd,
                           struct gv_http_result *res, struct gv_error *err)
{
    *out = NULL;
    int64_t cdl = now_ms() + h->connect_timeout_ms;
    if (deadline > 0 && deadline < cdl)
        cdl = deadline;
    int fd = open_socket(h, cdl, cancel_fd, err);
    if (fd == -2 || fd == -3)
        return wait_error(fd == -2 ? WAIT_TIMEOUT : WAIT_CANCELLED, "connect",
                          h->connect_timeout_ms, res, err);
    if (fd < 0) {
        res->retryable = true;
        return GV_EUNAVAILABLE;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    c->fd = fd;
    if (h->tls != NULL) {
        gv_status st = handshake(h, c, cdl, cancel_fd, h->connect_timeout_ms, res, err);
        if (st != GV_OK || res->cancelled) {
            conn_close(c);
            return st;
        }
    }
    pthread_mutex_lock(&h->pool_mu);
    h->opened++;
    pthread_mutex_unlock(&h->pool_mu);
    *out = c;
    return GV_OK;
}

/* An idle connection is fit for reuse when nothing is readable on it: a
 * server that closed it (FIN, TLS close_notify) makes it readable. */
static bool conn_idle_ok(struct conn *c)
{
    if (c->tls != NULL && gv_tls_pending(c->tls) > 0)
        return false;
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

void gv_http_get_stats(struct gv_http *h, struct gv_http_stats *out)
{
    pthread_mutex_lock(&h->pool_mu);
    out->connections_opened = h->opened;
    pthread_mutex_unlock(&h->pool_mu);
    gv_slots_get_stats(&h->slots, &out->slots, &out->busy, &out->waiting);
}

static struct conn *pool_take(struct gv_http *h)
{
    for (;;) {
        pthread_mutex_lock(&h->pool_mu);
        struct conn *c = h->idle;
        if (c != NULL) {
            h->idle = c->next;
            h->nidle--;
        }
        pthread_mutex_unlock(&h->pool_mu);
        if (c == NULL || conn_idle_ok(c))
            return c;
        conn_close(c);
    }
}

static void pool_put(struct gv_http *h, struct conn *c)
{
    pthread_mutex_lock(&h->pool_mu);
    if (h->nidle < POOL_MAX) {
        c->next = h->idle;
        h->idle = c;
        h->nidle++;
        c = NULL;
    }
    pthread_mutex_unlock(&h->pool_mu);
    conn_close(c);
}

/* ------------------------------------------------------------------------
 * I/O with deadline and cancel
 */

static gv_status conn_write_all(struct conn *c, const char *p, size_t len, int64_t deadline,
                                int cancel_fd, long timeout_ms, struct gv_http_result *res,
                                struct gv_error *err)
{
    while (len > 0) {
        short ev = POLLOUT;
        size_t n = 0;
        if (c->tls != NULL) {
            enum gv_tls_io io = gv_tls_write(c->tls, p, len, &n, err);
            if (io == GV_TLS_ERROR || io == GV_TLS_EOF) {
                res->retryable = true;
                return io == GV_TLS_EOF ? gv_error_set(err, GV_EUNAVAILABLE, "send: closed")
                                        : GV_EUNAVAILABLE;
            }
            if (io == GV_TLS_WANT_READ)
                ev = POLLIN;
        } else {
            ssize_t w = send(c->fd, p, len, MSG_NOSIGNAL);
            if (w > 0) {
                n = (size_t)w;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                res->retryable = true;
                return gv_error_set(err, GV_EUNAVAILABLE, "send: %s", strerror(errno));
            }
        }
        p += n;
        len -= n;
        if (len > 0 && n == 0) {
            enum wait_result w = wait_fd(c->fd, ev, deadline, cancel_fd);
            if (w != WAIT_READY)
                return wait_error(w, "send", timeout_ms, res, err);
        }
    }
    return GV_OK;
}

/* Reads what is available (waiting for at least one byte); *n == 0 is EOF. */
static gv_status conn_read(struct conn *c, char *buf, size_t cap, size_t *n, int64_t deadline,
                           int cancel_fd, long timeout_ms, struct gv_http_result *res,
                           struct gv_error *err)
{
    for (;;) {
        short ev = POLLIN;
        if (c->tls != NULL) {
            enum gv_tls_io io = gv_tls_read(c->tls, buf, cap, n, err);
            if (io == GV_TLS_DONE)
                return GV_OK;
            if (io == GV_TLS_EOF) {
                *n = 0;
                return GV_OK;
            }
            if (io == GV_TLS_ERROR) {
                res->retryable = true;
                return GV_EUNAVAILABLE;
            }
            if (io == GV_TLS_WANT_WRITE)
                ev = POLLOUT;
        } else {
            ssize_t r = recv(c->fd, buf, cap, 0);
            if (r >= 0) {
                *n = (size_t)r;
                return GV_OK;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                res->retryable = true;
                return gv_error_set(err, GV_EUNAVAILABLE, "recv: %s", strerror(errno));
            }
        }
        enum wait_result w = wait_fd(c->fd, ev, deadline, cancel_fd);
        if (w != WAIT_READY)
            return wait_error(w, "waiting for the response", timeout_ms, res, err);
    }
}

/* ------------------------------------------------------------------------
 * Exchange
 */

static gv_status build_request(struct gv_http *h, const struct gv_http_request *r,
                               struct gv_buf *out)
{
    char line[256];
    gv_status st = GV_OK;
#define PUT(s, n) (st == GV_OK ? (st = gv_buf_append(out, (s), (n))) : st)
#define PUTS(s) PUT((s), strlen(s))
    PUTS(r->method);
    PUTS(" ");
    PUTS(h->prefix);
    PUTS(r->target);
    PUTS(" HTTP/1.1\r\nHost: ");
    PUTS(h->host_header);
    PUTS("\r\nUser-Agent: gpuvisor/" GV_VERSION "\r\n");
    if (r->headers != NULL)
        PUTS(r->headers);
    if (r->body != NULL || strcmp(r->method, "POST") == 0 || strcmp(r->method, "PUT") == 0 ||
        strcmp(r->method, "PATCH") == 0) {
        snprintf(line, sizeof(line), "Content-Length: %zu\r\n", r->body != NULL ? r->body_len : 0);
        PUTS(line);
    }
    PUTS("\r\n");
    if (r->body != NULL)
        PUT(r->body, r->body_len);
#undef PUTS
#undef PUT
    return st;
}

/* Hands body bytes on with the response status already in res. */
struct body_relay {
    gv_http_body_fn fn;
    void *ud;
    struct gv_http_result *res;
    const struct gv_http_parser *p;
};

static bool relay_body(void *ud, const char *data, size_t len)
{
    struct body_relay *b = ud;
    b->res->status = b->p->status;
    return b->fn == NULL || b->fn(b->ud, data, len);
}

/* One attempt on connection c; *reusable says c may serve another request. */
static gv_status exchange_on(struct conn *c, const char *req, size_t req_len,
                             const struct gv_http_request *r, int64_t deadline,
                             struct gv_http_parser *p, gv_http_body_fn fn, void *ud,
                             struct gv_http_result *res, bool *reusable, struct gv_error *err)
{
    *reusable = false;
    gv_status st = conn_write_all(c, req, req_len, deadline, r->cancel_fd, r->timeout_ms, res, err);
    if (st != GV_OK || res->cancelled)
        return st;
    struct body_relay relay = {fn, ud, res, p};
    char *buf = malloc(READ_CHUNK);
    if (buf == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    while (p->state != GV_HTTP_DONE && !p->stopped) {
        size_t n = 0;
        st = conn_read(c, buf, READ_CHUNK, &n, deadline, r->cancel_fd, r->timeout_ms, res, err);
        if (st != GV_OK || res->cancelled)
            break;
        if (n == 0) {
            st = gv_http_parser_eof(p, err);
            res->retryable = st != GV_OK;
            break;
        }
        size_t used = 0;
        st = gv_http_parser_feed(p, buf, n, &used, relay_body, &relay, err);
        if (st != GV_OK)
            break;
        /* Bytes past the end of the response: nothing should follow, so the
         * connection is not trusted for another request. */
        if (p->state == GV_HTTP_DONE && used == n)
            *reusable = p->keep_alive;
    }
    free(buf);
    res->status = p->status >= 200 || p->status == 101 ? p->status : res->status;
    res->retry_after_s = p->retry_after_s;
    return st;
}

/*
 * A request line holds no space or control character except its two
 * separators: a target built from text someone else wrote (a name from an
 * object, a request a caller relayed) with "\r\n" in it would otherwise
 * end the line and add headers, or a whole request, of that text's choosing
 * to what this client sends with its credentials.  Names the API validates
 * never have them, so this refuses only what was never a name.
 */
static bool request_line_clean(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= 0x20 || *p == 0x7f)
            return false;
    return true;
}

gv_status gv_http_exchange(struct gv_http *h, const struct gv_http_request *r, gv_http_body_fn fn,
                           void *ud, struct gv_http_result *res, struct gv_error *err)
{
    memset(res, 0, sizeof(*res));
    res->retry_after_s = -1;
    if (!request_line_clean(r->method) || !request_line_clean(r->target))
        return gv_error_set(err, GV_EINVAL,
                            "request not sent: its method or target holds a space or control "
                            "character");
    int64_t deadline = r->timeout_ms > 0 ? now_ms() + r->timeout_ms : 0;
    struct gv_buf req = {0};
    struct gv_http_parser *p = malloc(sizeof(*p));
    gv_status st = p == NULL ? GV_ENOMEM : build_request(h, r, &req);
    if (st != GV_OK) {
        free(p);
        gv_buf_free(&req);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    if (!r->dedicated && !gv_slots_take(&h->slots, deadline)) {
        free(p);
        gv_buf_free(&req);
        res->retryable = true;
        return gv_error_set(err, GV_ETIMEOUT,
                            "timed out after %ld ms waiting for one of the %d connections",
                            r->timeout_ms, CONN_MAX);
    }
    for (int attempt = 0;; attempt++) {
        struct conn *c = r->dedicated ? NULL : pool_take(h);
        bool reused = c != NULL;
        if (c == NULL) {
            st = conn_open(h, &c, deadline, r->cancel_fd, res, err);
            if (st != GV_OK || res->cancelled)
                break;
        }
        gv_http_parser_init(p);
        bool reusable = false;
        st = exchange_on(c, req.data, req.len, r, deadline, p, fn, ud, res, &reusable, err);
        if (st == GV_OK && reusable && !r->dedicated && !res->cancelled)
            pool_put(h, c);
        else
            conn_close(c);
        if (st != GV_OK && reused && !p->got_bytes && !res->cancelled && attempt == 0) {
            gv_error_clear(err);
            memset(res, 0, sizeof(*res));
            res->retry_after_s = -1;
            continue;
        }
        break;
    }
    if (!r->dedicated)
        gv_slots_give(&h->slots);
    free(p);
    gv_buf_free(&req);
    if (res->cancelled)
        return GV_OK;
    return st;
}
