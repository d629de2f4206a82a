/*
 * gpuvisor-node's HTTP listener: /metrics, /healthz, /readyz (gv_metrics.h).
 *
 * Why not libmicrohttpd (which gpuvisor-scheduler uses): Debian's
 * libmicrohttpd12 links GnuTLS, and loading it (GnuTLS, p11-kit, nettle,
 * hogweed, gmp, tasn1, idn2, unistring) took the idle agent from 2.7 to
 * 5.5 MiB VmRSS (measured, docs/observability.md), past the agent's 5 MiB
 * budget (docs/node-agent.md) before a single pod.  What a scrape endpoint
 * needs is small: GET of three fixed paths, HTTP/1.1 with
 * "Connection: close", no bodies, no TLS (the pod network and a
 * NetworkPolicy guard it; Prometheus' default).  So this is a
 * deliberately small server, ~250 lines, on a thread of its own (a scrape
 * must not stall the device-plugin loop):
 *  - at most max_conns connections, at most PER_PEER from one address (one
 *    pod cannot take every slot; the kubelet's probes come from the node's
 *    address); past the total the listening socket is not polled, so the
 *    kernel's backlog holds the rest;
 *  - a request head of at most 8 KiB, else 431, within HEAD_MS (slow
 *    loris), then timeout_s in all to take the answer, else closed;
 *  - GET and HEAD only (405), a body is refused (400), unknown paths 404.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/monitor/gv_metrics.h"

#define HEAD_MAX 8192
#define HEAD_MS 2000
#define PER_PEER 4

struct conn {
    int fd;
    struct sockaddr_storage peer; /* address only (port zeroed) */
    size_t n;          /* bytes of the request head read */
    char *out;         /* response being written */
    size_t out_len, out_off;
    int64_t deadline_ms;
    char head[HEAD_MAX + 1]; /* NUL-terminated after each read */
};

struct gv_metrics_http {
    struct gv_metrics_http_config cfg;
    int fd;            /* listening socket */
    int wake;          /* eventfd: stop */
    unsigned port;
    pthread_t thread;
    _Atomic int64_t beat_ms;
    pthread_mutex_t mu; /* ready, why */
    bool ready;
    char why[256];
    struct conn **conns;
    size_t n_conns;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *status_text(unsigned code)
{
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    default: return "Service Unavailable";
    }
}

/* Takes body (malloc'd, may be NULL for an empty one) into c's output. */
static void respond(struct conn *c, unsigned code, const char *ctype, char *body, size_t len,
                    bool head_only)
{
    char hdr[512];
    int hl = snprintf(hdr, sizeof(hdr),
                      "HTTP/1.1 %u %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                      code, status_text(code), ctype, len,
                      code == 405 ? "Allow: GET, HEAD\r\n" : "");
    size_t blen = head_only ? 0 : len;
    c->out = malloc((size_t)hl + blen);
    if (c->out == NULL) {
        free(body);
        c->out_len = 0;
        return;
    }
    memcpy(c->out, hdr, (size_t)hl);
    if (blen)
        memcpy(c->out + hl, body, blen);
    free(body);
    c->out_len = (size_t)hl + blen;
    c->out_off = 0;
}

static void respond_text(struct conn *c, unsigned code, const char *msg, bool head_only)
{
    respond(c, code, "text/plain; charset=utf-8", strdup(msg), strlen(msg), head_only);
}

int gv_metrics_http_parse_head(const char *head, size_t len, struct gv_metrics_http_head *out)
{
    char line[512], method[16], version[16];
    memset(out, 0, sizeof(*out));
    const char *eol = memchr(head, '\r', len);
    size_t ll = eol ? (size_t)(eol - head) : 0;
    if (ll == 0 || ll >= sizeof(line))
        return 400;
    memcpy(line, head, ll);
    line[ll] = '\0';
    if (sscanf(line, "%15s %255s %15s", method, out->path, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0)
        return 400;
    out->head_only = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") != 0 && !out->head_only)
        return 405;
    /* a body is not expected: Content-Length other than 0 or chunked is refused */
    for (const char *p = head; p && p < head + len; p = strchr(p, '\n')) {
        p += *p == '\n';
        if ((strncasecmp(p, "Content-Length:", 15) == 0 && atol(p + 15) != 0) ||
            strncasecmp(p, "Transfer-Encoding:", 18) == 0)
            return 400;
    }
    char *q = strchr(out->path, '?');
    if (q)
        *q = '\0';
    return 0;
}

/* The request head is complete: answer it. */
static void handle(struct gv_metrics_http *h, struct conn *c, size_t head_len)
{
    struct gv_metrics_http_head rq;
    int bad = gv_metrics_http_parse_head(c->head, head_len, &rq);
    bool head_only = rq.head_only;
    const char *path = rq.path;
    if (bad) {
        respond_text(c, (unsigned)bad,
                     bad == 405 ? "GET only\n" : "malformed request or unexpected body\n", false);
        return;
    }
    if (strcmp(path, "/metrics") == 0) {
        struct gv_buf b;
        struct gv_error err;
        gv_buf_init(&b, 16u << 20);
        if (h->cfg.render(h->cfg.ud, &b, &err) != GV_OK) {
            gv_buf_free(&b);
            char msg[sizeof(err.msg) + 32];
            snprintf(msg, sizeof(msg), "metrics unavailable: %s\n", err.msg);
            respond_text(c, 500, msg, head_only);
            return;
        }
        size_t len = b.len;
        respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, len, head_only);
    } else if (strcmp(path, "/healthz") == 0 || strcmp(path, "/livez") == 0) {
        int64_t age = mono_ms() - atomic_load(&h->beat_ms);
        if (age > h->cfg.stale_ms) {
            char msg[200];
            snprintf(msg, sizeof(msg), "event loop silent for %lld ms\n", (long long)age);
            respond_text(c, 503, msg, head_only);
        } else {
            respond_text(c, 200, "ok\n", head_only);
        }
    } else if (strcmp(path, "/readyz") == 0) {
        char msg[300];
        pthread_mutex_lock(&h->mu);
        bool ready = h->ready;
        snprintf(msg, sizeof(msg), "not ready: %s\n", h->why);
        pthread_mutex_unlock(&h->mu);
        if (!ready) {
            respond_text(c, 503, msg, head_only);
        } else {
            respond_text(c, 200, "ready\n", head_only);
        }
    } else {
        respond_text(c, 404, "not found: /metrics, /healthz, /readyz\n", head_only);
    }
}

static void conn_close(struct gv_metrics_http *h, size_t i)
{
    struct conn *c = h->conns[i];
    if (c->out != NULL && c->out_off == c->out_len) {
        /* Answered.  What the peer sent past the head (the rest of a head
         * over 8 KiB, answered 431) is read away first: closing with unread
         * data resets the connection, and the reset can reach the peer
         * before it has read the answer.  Only what is already here. */
        char sink[4096];
        (void)shutdown(c->fd, SHUT_WR);
        for (int k = 0; k < 16 && read(c->fd, sink, sizeof(sink)) > 0; k++)
            ;
    }
    close(c->fd);
    free(c->out);
    free(c);
    h->conns[i] = h->conns[--h->n_conns];
}

/* Reads what is there; true when the connection should be closed. */
static bool on_readable(struct gv_metrics_http *h, struct conn *c)
{
    for (;;) {
        if (c->n == HEAD_MAX) {
            respond_text(c, 431, "request head too large\n", false);
            return c->out == NULL;
        }
        ssize_t r = read(c->fd, c->head + c->n, HEAD_MAX - c->n);
        if (r == 0)
            return true;
        if (r < 0)
            return errno != EAGAIN && errno != EINTR;
        size_t from = c->n >= 3 ? c->n - 3 : 0;
        c->n += (size_t)r;
        c->head[c->n] = '\0';
        for (size_t i = from; i + 3 < c->n; i++)
            if (memcmp(c->head + i, "\r\n\r\n", 4) == 0) {
                handle(h, c, i + 4);
                return c->out == NULL;
            }
    }
}

/* Writes what it can; true when done (or failed): close. */
static bool on_writable(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0)
            return errno != EAGAIN && errno != EINTR;
        c->out_off += (size_t)w;
    }
    return true;
}

static void *serve(void *arg)
{
    struct gv_metrics_http *h = arg;
    struct pollfd *pfd = calloc(h->cfg.max_conns + 2, sizeof(*pfd));
    if (pfd == NULL)
        return NULL;
    for (;;) {
        size_t n = 0;
        pfd[n++] = (struct pollfd){.fd = h->wake, .events = POLLIN};
        bool accepting = h->n_conns < h->cfg.max_conns;
        pfd[n++] = (struct pollfd){.fd = accepting ? h->fd : -1, .events = POLLIN};
        int64_t now = mono_ms(), next = now + 1000;
        for (size_t i = 0; i < h->n_conns; i++) {
            struct conn *c = h->conns[i];
            pfd[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
            if (c->deadline_ms < next)
                next = c->deadline_ms;
        }
        int rc = poll(pfd, n, (int)(next > now ? next - now : 0));
        if (rc < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            break;
        now = mono_ms();
        /* connections first (indexes match pfd[2..]); closing swaps the last one
         * in, so walk backwards */
        for (size_t i = h->n_conns; i-- > 0;) {
            struct conn *c = h->conns[i];
            short ev = pfd[2 + i].revents;
            bool done = false;
            if (ev & (POLLERR | POLLNVAL))
                done = true;
            else if (c->out == NULL && (ev & (POLLIN | POLLHUP))) {
                done = on_readable(h, c);
                if (c->out != NULL) /* head complete: the answer gets the full time */
                    c->deadline_ms = now + (int64_t)h->cfg.timeout_s * 1000;
            }
            if (!done && c->out != NULL && ((ev & POLLOUT) || c->out_off == 0))
                done = on_writable(c);
            if (!done && now >= c->deadline_ms)
                done = true; /* slow peer: its time is up */
            if (done)
                conn_close(h, i);
        }
        if (accepting && (pfd[1].revents & POLLIN)) {
            while (h->n_conns < h->cfg.max_conns) {
                struct sockaddr_storage peer;
                socklen_t pl = sizeof(peer);
                memset(&peer, 0, sizeof(peer));
                int fd = accept4(h->fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break;
                if (peer.ss_family == AF_INET)
                    ((struct sockaddr_in *)&peer)->sin_port = 0;
                else if (peer.ss_family == AF_INET6)
                    ((struct sockaddr_in6 *)&peer)->sin6_port = 0;
                unsigned same = 0;
                for (size_t i = 0; i < h->n_conns; i++)
                    same += memcmp(&h->conns[i]->peer, &peer, sizeof(peer)) == 0;
                struct conn *c = same < PER_PEER ? malloc(sizeof(*c)) : NULL;
                if (c == NULL) {
                    close(fd); /* this peer holds its share already */
                    continue;
                }
                c->fd = fd;
                c->peer = peer;
                c->n = 0;
                c->out = NULL;
                c->out_len = c->out_off = 0;
                c->deadline_ms = now + HEAD_MS;
                h->conns[h->n_conns++] = c;
            }
        }
    }
    while (h->n_conns > 0)
        conn_close(h, h->n_conns - 1);
    free(pfd);
    return NULL;
}

/* "ADDR:PORT", "[ADDR]:PORT", ":PORT" -> a bound, listening, non-blocking socket. */
static gv_status bind_listen(const char *spec, int *fd_out, unsigned *port_out,
                             struct gv_error *err)
{
    char host[128] = "", port[16];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(port))
        return gv_error_set(err, GV_EINVAL, "metrics listen address '%s': expected ADDR:PORT", spec);
    snprintf(port, sizeof(port), "%s", colon + 1);
    size_t hl = (size_t)(colon - spec);
    if (hl >= sizeof(host))
        return gv_error_set(err, GV_EINVAL, "metrics listen address '%s': host too long", spec);
    memcpy(host, spec, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    for (const char *p = port; *p; p++)
        if (*p < '0' || *p > '9')
            return gv_error_set(err, GV_EINVAL, "metrics listen address '%s': bad port", spec);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0)
        return gv_error_set(err, GV_EINVAL, "metrics listen address '%s': %s", spec,
                            gai_strerror(rc));
    gv_status st = GV_EIO;
    int fd = -1, e = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            getsockname(fd, (struct sockaddr *)&ss, &sl);
            *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                       : ((struct sockaddr_in *)&ss)->sin_port);
            st = GV_OK;
            break;
        }
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (st != GV_OK)
        return gv_error_set(err, GV_EIO, "metrics: cannot listen on %s: %s", spec, strerror(e));
    *fd_out = fd;
    return GV_OK;
}

gv_status gv_metrics_http_new(const struct gv_metrics_http_config *cfg,
                              struct gv_metrics_http **out, struct gv_error *err)
{
    struct gv_metrics_http *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return gv_error_set(err, GV_ENOMEM, "metrics: out of memory");
    h->cfg = *cfg;
    h->cfg.stale_ms = cfg->stale_ms > 0 ? cfg->stale_ms : 30000;
    h->cfg.max_conns = cfg->max_conns ? cfg->max_conns : 32;
    h->cfg.timeout_s = cfg->timeout_s ? cfg->timeout_s : 10;
    h->fd = h->wake = -1;
    atomic_store(&h->beat_ms, mono_ms());
    pthread_mutex_init(&h->mu, NULL);
    snprintf(h->why, sizeof(h->why), "starting");
    gv_status st = bind_listen(cfg->listen, &h->fd, &h->port, err);
    if (st != GV_OK)
        goto fail;
    h->conns = calloc(h->cfg.max_conns, sizeof(*h->conns));
    h->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->conns == NULL || h->wake < 0) {
        st = gv_error_set(err, GV_ENOMEM, "metrics: out of memory");
        goto fail;
    }
    int rc = pthread_create(&h->thread, NULL, serve, h);
    if (rc != 0) {
        st = gv_error_set(err, GV_EIO, "metrics: cannot start the listener thread: %s", strerror(rc));
        goto fail;
    }
    gv_info("metrics: listening on %s (port %u): /metrics /healthz /readyz", cfg->listen, h->port);
    *out = h;
    return GV_OK;
fail:
    if (h->fd >= 0)
        close(h->fd);
    if (h->wake >= 0)
        close(h->wake);
    free(h->conns);
    free(h);
    return st;
}

unsigned gv_metrics_http_port(const struct gv_metrics_http *h) { return h->port; }

void gv_metrics_http_beat(struct gv_metrics_http *h, bool ready, const char *why)
{
    if (h == NULL)
        return;
    atomic_store(&h->beat_ms, mono_ms());
    pthread_mutex_lock(&h->mu);
    h->ready = ready;
    snprintf(h->why, sizeof(h->why), "%s", why ? why : "");
    pthread_mutex_unlock(&h->mu);
}

void gv_metrics_http_free(struct gv_metrics_http *h)
{
    if (h == NULL)
        return;
    uint64_t one = 1;
    if (write(h->wake, &one, sizeof(one)) != (ssize_t)sizeof(one))
        gv_warn("metrics: cannot wake the listener thread");
    pthread_join(h->thread, NULL);
    close(h->fd);
    close(h->wake);
    pthread_mutex_destroy(&h->mu);
    free(h->conns);
    free(h);
}
