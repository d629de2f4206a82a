/*
 * gpuvisor-node's HTTP listener: /metrics, /healthz, /readyz (gv_metrics.h).
 *
 * libmicrohttpd on a listening socket we bind ourselves (so ":0" gives the
 * port back), one internal polling thread, at most max_conns connections
 * (MHD refuses more at accept), an idle timeout, GET/HEAD only, no request
 * bodies.  Scrapes are serialised by the monitor's own lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/gv_metrics.h"

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result mhd_result;
#else
typedef int mhd_result;
#endif

struct gv_metrics_http {
    struct gv_metrics_http_config cfg;
    struct MHD_Daemon *d;
    int fd;
    unsigned port;
    _Atomic int64_t beat_ms;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static mhd_result reply(struct MHD_Connection *c, unsigned code, const char *ctype, void *body,
                        size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (r == NULL) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    mhd_result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static mhd_result text(struct MHD_Connection *c, unsigned code, const char *msg)
{
    return reply(c, code, "text/plain; charset=utf-8", (void *)msg, strlen(msg),
                 MHD_RESPMEM_MUST_COPY);
}

static mhd_result on_request(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *data,
                             size_t *data_size, void **state)
{
    (void)version;
    (void)data;
    struct gv_metrics_http *h = cls;
    static char had_body; /* *state marker: the request carried a body */
    if (*state == NULL) {
        /* first call, headers only: refuse other methods before any body is read */
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
            return text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET only\n");
        *state = h;
        return MHD_YES;
    }
    if (*data_size != 0) {
        *data_size = 0; /* dropped: nothing here takes a body */
        *state = &had_body;
        return MHD_YES;
    }
    if (*state == &had_body)
        return text(c, MHD_HTTP_BAD_REQUEST, "no request body expected\n");
    if (strcmp(url, "/metrics") == 0) {
        struct gv_buf b;
        struct gv_error err;
        gv_buf_init(&b, 16u << 20);
        if (h->cfg.render(h->cfg.ud, &b, &err) != GV_OK) {
            gv_buf_free(&b);
            char msg[sizeof(err.msg) + 32];
            snprintf(msg, sizeof(msg), "metrics unavailable: %s\n", err.msg);
            return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, msg);
        }
        size_t len = b.len;
        char *body = b.data ? b.data : strdup("");
        return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
                     MHD_RESPMEM_MUST_FREE);
    }
    if (strcmp(url, "/healthz") == 0 || strcmp(url, "/livez") == 0) {
        int64_t age = mono_ms() - atomic_load(&h->beat_ms);
        if (age > h->cfg.stale_ms) {
            char msg[200];
            snprintf(msg, sizeof(msg), "event loop silent for %lld ms\n", (long long)age);
            return text(c, MHD_HTTP_SERVICE_UNAVAILABLE, msg);
        }
        return text(c, MHD_HTTP_OK, "ok\n");
    }
    if (strcmp(url, "/readyz") == 0) {
        char why[256] = "";
        if (h->cfg.ready && !h->cfg.ready(h->cfg.ud, why, sizeof(why))) {
            char msg[300];
            snprintf(msg, sizeof(msg), "not ready: %s\n", why);
            return text(c, MHD_HTTP_SERVICE_UNAVAILABLE, msg);
        }
        return text(c, MHD_HTTP_OK, "ready\n");
    }
    return text(c, MHD_HTTP_NOT_FOUND, "not found: /metrics, /healthz, /readyz\n");
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    gv_debug("metrics listener: %s", msg);
}

/* "ADDR:PORT", "[ADDR]:PORT", ":PORT" -> a bound, listening socket. */
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
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
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
    h->fd = -1;
    atomic_store(&h->beat_ms, mono_ms());
    gv_status st = bind_listen(cfg->listen, &h->fd, &h->port, err);
    if (st != GV_OK) {
        free(h);
        return st;
    }
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            on_request, h, MHD_OPTION_LISTEN_SOCKET, h->fd,
                            MHD_OPTION_CONNECTION_LIMIT, h->cfg.max_conns,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, h->cfg.max_conns / 2 + 1,
                            MHD_OPTION_CONNECTION_TIMEOUT, h->cfg.timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768,
                            MHD_OPTION_EXTERNAL_LOGGER, on_log, h, MHD_OPTION_END);
    if (h->d == NULL) {
        close(h->fd);
        free(h);
        return gv_error_set(err, GV_EIO, "metrics: cannot start the HTTP listener on %s",
                            cfg->listen);
    }
    gv_info("metrics: listening on %s (port %u): /metrics /healthz /readyz", cfg->listen, h->port);
    *out = h;
    return GV_OK;
}

unsigned gv_metrics_http_port(const struct gv_metrics_http *h) { return h->port; }

void gv_metrics_http_beat(struct gv_metrics_http *h)
{
    if (h != NULL)
        atomic_store(&h->beat_ms, mono_ms());
}

void gv_metrics_http_free(struct gv_metrics_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->d); /* closes the listening socket it was given */
    free(h);
}
