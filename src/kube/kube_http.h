/*
 * The kube client's transport: HTTP/1.1 over TCP, TLS (mbedTLS) or a unix
 * socket, with a small keep-alive pool.  Internal to src/kube; the design
 * and the reason it is not libcurl are in docs/kube-client.md ("Transport").
 *
 * Three layers, one file each, and the line for a connection:
 *   http_response.c  incremental response parser (pure, fuzzed)
 *   tls.c            mbedTLS configuration and sessions
 *   http.c           connections, the pool, one request/response exchange
 *   conn_slots.c     at most 32 requests on connections, the rest in line
 */
#ifndef GV_KUBE_HTTP_H
#define GV_KUBE_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

/* ------------------------------------------------------------------------
 * Response parser
 */

/* Limits that keep a hostile or broken server from exhausting memory. */
#define GV_HTTP_MAX_LINE 8192u          /* one status, header or chunk-size line */
#define GV_HTTP_MAX_HEAD (64u << 10)    /* status line + all headers */

enum gv_http_parse_state {
    GV_HTTP_STATUS,     /* reading the status line */
    GV_HTTP_HEADERS,    /* reading header lines */
    GV_HTTP_BODY_LEN,   /* Content-Length body */
    GV_HTTP_BODY_EOF,   /* body delimited by connection close */
    GV_HTTP_CHUNK_SIZE, /* chunked: size line */
    GV_HTTP_CHUNK_DATA, /* chunked: data */
    GV_HTTP_CHUNK_END,  /* chunked: CRLF after data */
    GV_HTTP_TRAILERS,   /* chunked: trailer lines after the last chunk */
    GV_HTTP_DONE,       /* message complete */
};

/* Receives the (de-chunked) body as it arrives; false stops the parser. */
typedef bool (*gv_http_body_fn)(void *ud, const char *data, size_t len);

struct gv_http_parser {
    enum gv_http_parse_state state;
    long status;          /* final (non-1xx) status code, once headers are read */
    bool keep_alive;      /* the connection may carry another request */
    bool chunked;
    bool have_length;
    uint64_t remaining;   /* bytes left in the body or the current chunk */
    long retry_after_s;   /* Retry-After delta-seconds, or -1 */
    bool stopped;         /* the body callback returned false */
    bool got_bytes;       /* any byte of a response arrived */
    size_t head_bytes;    /* bytes of status + headers so far */
    size_t line_len;
    char line[GV_HTTP_MAX_LINE];
};

void gv_http_parser_init(struct gv_http_parser *p);

/*
 * Consumes up to len bytes; *used says how many (fewer when the message
 * completes or the callback stops it).  GV_EPROTO with a message naming what
 * was malformed.  Body bytes go to fn once the final status is known.
 */
gv_status gv_http_parser_feed(struct gv_http_parser *p, const char *data, size_t len,
                              size_t *used, gv_http_body_fn fn, void *ud, struct gv_error *err);

/* The peer closed the connection: completes a close-delimited body, else an
 * error (GV_EUNAVAILABLE: truncated response). */
gv_status gv_http_parser_eof(struct gv_http_parser *p, struct gv_error *err);

/* ------------------------------------------------------------------------
 * TLS
 */

struct gv_tls_opts {
    const char *ca_file, *ca_data;     /* PEM; neither: the system bundle */
    const char *cert_file, *cert_data; /* client certificate, PEM */
    const char *key_file, *key_data;   /* its key, PEM (RSA or EC) */
    bool insecure;                     /* skip server verification */
};

struct gv_tls;
struct gv_tls_session;

gv_status gv_tls_new(const struct gv_tls_opts *o, struct gv_tls **out, struct gv_error *err);
void gv_tls_free(struct gv_tls *t);

/* Outcome of a non-blocking TLS step. */
enum gv_tls_io { GV_TLS_DONE, GV_TLS_WANT_READ, GV_TLS_WANT_WRITE, GV_TLS_EOF, GV_TLS_ERROR };

/* A session over the connected, non-blocking fd (not owned); host is the
 * name or IP literal the certificate must match. */
gv_status gv_tls_session_new(struct gv_tls *t, int fd, const char *host,
                             struct gv_tls_session **out, struct gv_error *err);
/* Frees the session (sends close_notify when the handshake had completed). */
void gv_tls_session_free(struct gv_tls_session *s);

/* GV_TLS_DONE once the handshake completed; *retryable is false when the
 * server's certificate was refused (a retry cannot help). */
enum gv_tls_io gv_tls_handshake(struct gv_tls_session *s, bool *retryable,
                                struct gv_error *err);
/* *n bytes moved when GV_TLS_DONE. */
enum gv_tls_io gv_tls_read(struct gv_tls_session *s, char *buf, size_t cap, size_t *n,
                           struct gv_error *err);
enum gv_tls_io gv_tls_write(struct gv_tls_session *s, const char *buf, size_t len, size_t *n,
                            struct gv_error *err);
/* Decrypted bytes buffered inside the session (poll cannot see them). */
size_t gv_tls_pending(const struct gv_tls_session *s);

/* ------------------------------------------------------------------------
 * Transport
 */

struct gv_http_opts {
    const char *server;      /* "https://host:port[/prefix]" or "http://..." */
    const char *unix_socket; /* connect here instead of host:port, or NULL */
    struct gv_tls_opts tls;
    long connect_timeout_ms; /* TCP connect + TLS handshake */
};

/* ------------------------------------------------------------------------
 * Connection slots (conn_slots.c): at most max ordinary requests hold a
 * connection at once; the others wait in arrival order, each handed the
 * slot the oldest holder gives back, until their own deadline.
 */

struct gv_slots_stats {
    uint64_t taken;        /* requests that asked for a slot */
    uint64_t queued;       /* ... of which had to wait */
    uint64_t timed_out;    /* ... of which reached their deadline waiting */
    uint64_t wait_us;      /* time spent waiting, all requests together */
    uint64_t most_waiting; /* the longest queue seen */
};

struct gv_slot_waiter;

struct gv_slots {
    pthread_mutex_t mu;
    int max, busy, waiting;
    struct gv_slot_waiter *head, *tail; /* FIFO of waiters */
    struct gv_slots_stats stats;
};

void gv_slots_init(struct gv_slots *q, int max);
void gv_slots_destroy(struct gv_slots *q);
/* A slot, waiting in line for it until deadline_ms (CLOCK_MONOTONIC
 * milliseconds; 0: no limit).  false: the deadline came first (the request
 * is not in the queue any more). */
bool gv_slots_take(struct gv_slots *q, int64_t deadline_ms);
/* Gives a slot back: to the oldest waiter if there is one. */
void gv_slots_give(struct gv_slots *q);
void gv_slots_get_stats(struct gv_slots *q, struct gv_slots_stats *out, int *busy, int *waiting);

/* ------------------------------------------------------------------------
 * Transport statistics (the scheduler's /metrics shows them: where a bind's
 * time goes, docs/scheduler.md)
 */

struct gv_http_stats {
    uint64_t connections_opened; /* TCP (+ TLS) connections, watches included */
    struct gv_slots_stats slots;
    int busy, waiting; /* now */
};

struct gv_http;

void gv_http_get_stats(struct gv_http *h, struct gv_http_stats *out);

gv_status gv_http_new(const struct gv_http_opts *o, struct gv_http **out, struct gv_error *err);
void gv_http_free(struct gv_http *h);

struct gv_http_request {
    const char *method;
    const char *target;  /* path + escaped query, appended to the server prefix */
    const char *headers; /* extra header lines, each ending in "\r\n", or NULL */
    const char *body;
    size_t body_len;
    long timeout_ms;     /* the whole exchange; <= 0: no limit */
    int cancel_fd;       /* readable = abandon the exchange; -1: none */
    bool dedicated;      /* own connection, closed afterwards (long watches) */
};

struct gv_http_result {
    long status;        /* HTTP status, 0 when no response arrived */
    long retry_after_s; /* Retry-After, or -1 */
    bool retryable;     /* a transport failure another attempt may cure */
    bool cancelled;     /* cancel_fd fired */
};

/*
 * One request and its response; the body is streamed to fn (status is in
 * res->status by then).  GV_OK when a complete response arrived (any status)
 * or fn stopped it or it was cancelled; GV_ETIMEOUT, GV_EUNAVAILABLE (I/O,
 * connect, TLS) or GV_EPROTO (malformed response) otherwise.
 */
gv_status gv_http_exchange(struct gv_http *h, const struct gv_http_request *r, gv_http_body_fn fn,
                           void *ud, struct gv_http_result *res, struct gv_error *err);

#endif
