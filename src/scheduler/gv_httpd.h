/*
 * Small HTTP(S) server for gpuvisor-scheduler, on libmicrohttpd.
 *
 * One server per listener (the extender, the admission webhook).  Routes are
 * exact (method, path) pairs; a handler gets the whole request body (capped)
 * and fills a response.  Each route keeps a latency histogram and a count of
 * answers per status code, rendered in Prometheus text by
 * gv_httpd_write_metrics().
 *
 * TLS, when cert and key files are given, is served through GnuTLS's
 * certificate callback: the files are re-read when their modification time
 * changes, so a rotated certificate (cert-manager, a renewed Secret) takes
 * effect on the next handshake without a restart or a dropped connection.
 */
#ifndef GV_HTTPD_H
#define GV_HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/gv_error.h"

struct gv_httpd;

struct gv_http_request {
    const char *method;
    const char *path; /* without the query string */
    /* NUL-terminated; body_len excludes the NUL.  The request's own
     * buffer, freed after the answer went out: a handler may write into it
     * (the filter's parser ends node names in place). */
    char *body;
    size_t body_len;
};

/* Fills buf with up to max bytes of a streamed body; returns the count, 0 at
 * the end. */
typedef size_t (*gv_http_stream_fn)(void *cls, char *buf, size_t max);

struct gv_http_response {
    unsigned status;          /* 200 unless the handler sets it */
    const char *content_type; /* static string; "application/json" default */
    char *body;               /* heap; the server frees it */
    size_t body_len;
    /* Instead of body: a body produced piece by piece as the client reads
     * (large answers without a large buffer); stream_free(stream_cls) runs
     * when the response is done. */
    gv_http_stream_fn stream;
    void *stream_cls;
    void (*stream_free)(void *cls);
};

typedef void (*gv_httpd_handler)(void *ctx, const struct gv_http_request *req,
                                 struct gv_http_response *resp);

struct gv_httpd_options {
    const char *name;      /* label in metrics and logs: "extender", "webhook" */
    const char *address;   /* "127.0.0.1", "0.0.0.0", "::"; NULL = any */
    uint16_t port;         /* 0 = pick a free port (see gv_httpd_port) */
    const char *cert_file; /* both set = HTTPS; both NULL = plain HTTP */
    const char *key_file;
    size_t max_body;          /* bytes; larger requests get 413 */
    unsigned timeout_seconds; /* idle connection timeout (0: 60) */
    /* Abuse limits (docs/isolation.md, "Control plane"): open connections
     * in all (0: 256) and from one client address (0: 32); request body
     * bytes buffered across all connections at once (0: 4 x max_body).  A
     * body whose Content-Length is over max_body gets 413 before any of it
     * is read; one that passes max_body or the shared budget while it
     * arrives ends its connection at once (libmicrohttpd cannot answer
     * mid-body).  Nothing past either bound is ever buffered. */
    unsigned max_connections;
    unsigned max_per_ip;
    size_t max_buffered;
    const char *tls_priorities; /* GnuTLS priority string; NULL: GV_HTTPD_TLS_PRIORITIES */
};

/* TLS 1.3 and 1.2 only, AEAD suites with forward secrecy only. */
#define GV_HTTPD_TLS_PRIORITIES                                                                    \
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"         \
    "+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:%SERVER_PRECEDENCE"

gv_status gv_httpd_new(const struct gv_httpd_options *opts, struct gv_httpd **out,
                       struct gv_error *err);
/* Routes must be added before gv_httpd_start.  path is matched exactly. */
gv_status gv_httpd_route(struct gv_httpd *h, const char *method, const char *path,
                         gv_httpd_handler fn, void *ctx, struct gv_error *err);
gv_status gv_httpd_start(struct gv_httpd *h, struct gv_error *err);
/* The bound port (useful when the options asked for port 0). */
uint16_t gv_httpd_port(const struct gv_httpd *h);
/* Stops serving (waits for in-flight handlers) and frees everything. */
void gv_httpd_free(struct gv_httpd *h);

/* Appends this server's request metrics in Prometheus text format. */
void gv_httpd_write_metrics(struct gv_httpd *h, FILE *out);
/* Writes the HELP/TYPE header lines the metrics of every server share. */
void gv_httpd_write_metrics_header(FILE *out);

/* Helpers for handlers: set a body (copied) / a JSON error body. */
void gv_http_respond(struct gv_http_response *resp, unsigned status, const char *content_type,
                     const char *body);
void gv_http_respond_error(struct gv_http_response *resp, unsigned status, const char *message);

#endif
