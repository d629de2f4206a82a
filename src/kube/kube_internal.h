/*
 * Internals of the kube component shared between its files and its fuzz
 * targets.  Not part of the public API (gv_kube.h).
 */
#ifndef GV_KUBE_INTERNAL_H
#define GV_KUBE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "common/gv_buf.h"
#include "common/gv_error.h"
#include "kube/gv_kube.h"

/*
 * Error for a non-2xx answer: parses the API's Status body when there is one
 * (kind Status: code, reason, message) and maps code + reason to a gv_status
 * (table in gv_kube.h).  what names the request ("GET /api/v1/nodes").
 */
gv_status gv_kube_http_error(long http_code, const char *body, size_t len, const char *what,
                             struct gv_error *err);

/* gv_status for an HTTP status code and Status reason (may be NULL). */
gv_status gv_kube_status_code(long http_code, const char *reason);

/*
 * Decoder for a watch response body: newline-delimited WatchEvent objects
 * ({"type": ..., "object": {...}}), fed in arbitrary chunks as they arrive.
 * Lines are bounded (GV_KUBE_STREAM_MAX_LINE) so a hostile server cannot
 * exhaust memory.
 */
#define GV_KUBE_STREAM_MAX_LINE (64u << 20)

struct gv_kube_stream {
    struct gv_buf line; /* a partial line carried to the next chunk */
    size_t max_line;
    gv_kube_watch_fn fn;
    void *ud;
    char *last_rv;  /* resourceVersion of the last event (heap) or NULL */
    bool stopped;   /* fn returned false */
    size_t events;  /* events delivered */
};

void gv_kube_stream_init(struct gv_kube_stream *s, gv_kube_watch_fn fn, void *ud);
void gv_kube_stream_release(struct gv_kube_stream *s);
/*
 * Consumes len bytes.  Returns GV_OK, GV_EPROTO for a malformed event,
 * GV_ERANGE for an ERROR event with code 410 (resourceVersion too old),
 * the mapped code for other ERROR events.  Stops delivering once fn
 * returned false (s->stopped).
 */
gv_status gv_kube_stream_feed(struct gv_kube_stream *s, const char *data, size_t len,
                              struct gv_error *err);
/* End of stream: a trailing partial event is an error (GV_EPROTO). */
gv_status gv_kube_stream_finish(struct gv_kube_stream *s, struct gv_error *err);

/* CLOCK_MONOTONIC time ms milliseconds from now (for timed waits). */
void gv_kube_deadline(struct timespec *ts, long ms);

/* Sleeps up to ms unless cancel fires first (cancel may be NULL); true if fired. */
bool gv_kube_cancel_sleep(struct gv_kube_cancel *cancel, long ms);

/* Jittered exponential backoff: a delay in [d/2, d] with d = min(max, initial * 2^attempt). */
long gv_kube_backoff_ms(long initial_ms, long max_ms, unsigned attempt);

#endif
