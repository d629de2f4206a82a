/*
 * gpuvisor-node's metrics settings (the node config's "metrics" object) and
 * its HTTP listener for /metrics, /healthz and /readyz
 * (docs/observability.md).  The listener is a small HTTP/1.1 GET server on
 * its own thread, with a connection cap and a per-connection time limit
 * (metrics_http.c says why not libmicrohttpd).
 */
#ifndef GV_NODE_METRICS_H
#define GV_NODE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/gv_buf.h"
#include "common/gv_error.h"

enum gv_backstop_action {
    GV_BACKSTOP_OFF,    /* NVML per-process memory is reported only */
    GV_BACKSTOP_REPORT, /* over limit past the grace: event + metric */
    GV_BACKSTOP_KILL,   /* and SIGKILL the processes that make it exceed (HAMi's active OOM killer) */
};

/* The node config's "metrics" object (docs/observability.md). */
struct gv_metrics_settings {
    char listen[128];   /* "ADDR:PORT"; "" = no listener */
    bool hami_names;    /* also HAMi's series (default true) */
    bool dcgm_names;    /* also dcgm-exporter's per-GPU series (default true) */
    enum gv_backstop_action backstop;
    int64_t grace_ms;   /* over limit this long before acting (default 10000) */
    int64_t period_ms;  /* backstop sampling period (default 2000) */
    uint64_t margin_bytes; /* allowed above the limit (driver overhead; default 0) */
};

void gv_metrics_settings_default(struct gv_metrics_settings *s);
/* Parses the "metrics" object; unknown keys and bad values name the key path. */
gv_status gv_metrics_settings_parse(json_t *obj, const char *path, struct gv_metrics_settings *s,
                                    struct gv_error *err);

/*
 * The listener.  render(ud, out, err) fills /metrics (on the listener's
 * thread).  /healthz is 200 while the agent's event loop beats
 * (gv_metrics_http_beat) at least every stale_ms; /readyz answers what the
 * last beat said (computed on the loop thread, which owns that state).
 */
struct gv_metrics_http_config {
    const char *listen; /* "ADDR:PORT", "[ADDR]:PORT" or ":PORT" (all addresses); port 0: any */
    gv_status (*render)(void *ud, struct gv_buf *out, struct gv_error *err);
    void *ud;
    int64_t stale_ms;     /* 0: 30000 */
    unsigned max_conns;   /* 0: 32, at most 4 from one peer address */
    unsigned timeout_s;   /* to take an answer once asked, 0: 10 (the head: 2 s) */
};

struct gv_metrics_http;

gv_status gv_metrics_http_new(const struct gv_metrics_http_config *cfg,
                              struct gv_metrics_http **out, struct gv_error *err);
/* The port bound (useful with port 0). */
unsigned gv_metrics_http_port(const struct gv_metrics_http *h);
/* The event loop is alive (call from a loop timer); ready, else why not. */
void gv_metrics_http_beat(struct gv_metrics_http *h, bool ready, const char *why);
void gv_metrics_http_free(struct gv_metrics_http *h);

/*
 * The listener's request-head parser (public for tests and fuzzing): head
 * is len bytes ending with the blank line, NUL-terminated after them.
 * Returns 0 (a GET or HEAD of out->path, query cut off), 400 (malformed, or
 * a request announcing a body) or 405 (another method).
 */
struct gv_metrics_http_head {
    char path[256];
    bool head_only;
};
int gv_metrics_http_parse_head(const char *head, size_t len, struct gv_metrics_http_head *out);

#endif
