/*
 * Incremental HTTP/1.1 response parser (RFC 9112): status line, headers,
 * and a body framed by Content-Length, chunked transfer coding or the
 * connection's close.  Pure: no I/O, no allocation, so it is fuzzed as is
 * (tests/kube/fuzz_kube_http_response.c).
 *
 * It accepts only what the client needs from kube-apiserver and refuses
 * everything ambiguous instead of guessing: conflicting Content-Length
 * values, Content-Length next to Transfer-Encoding (request-smuggling
 * shape), obsolete header folding, oversized lines.
 */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "kube/kube_http.h"

void gv_http_parser_init(struct gv_http_parser *p)
{
    memset(p, 0, offsetof(struct gv_http_parser, line));
    p->state = GV_HTTP_STATUS;
    p->retry_after_s = -1;
}

static gv_status bad(struct gv_error *err, const char *what)
{
    return gv_error_set(err, GV_EPROTO, "malformed HTTP response: %s", what);
}

/* "HTTP/1.x NNN reason" */
static gv_status parse_status(struct gv_http_parser *p, const char *l, size_t n,
                              struct gv_error *err)
{
    if (n < 12 || memcmp(l, "HTTP/1.", 7) != 0 || (l[7] != '0' && l[7] != '1') || l[8] != ' ' ||
        !isdigit((unsigned char)l[9]) || !isdigit((unsigned char)l[10]) ||
        !isdigit((unsigned char)l[11]) || (n > 12 && l[12] != ' '))
        return bad(err, "bad status line");
    p->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    if (p->status < 100)
        return bad(err, "status code below 100");
    /* HTTP/1.1 keeps the connection unless told otherwise; 1.0 closes. */
    p->keep_alive = l[7] == '1';
    p->chunked = false;
    p->have_length = false;
    p->remaining = 0;
    return GV_OK;
}

/* Does the comma-separated list v contain token tok (case-insensitive)? */
static bool has_token(const char *v, size_t n, const char *tok, bool last_only)
{
    size_t tl = strlen(tok);
    bool found = false;
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e == s)
            continue;
        found = e - s == tl && strncasecmp(v + s, tok, tl) == 0;
        if (found && !last_only)
            return true;
    }
    return found;
}

static gv_status parse_header(struct gv_http_parser *p, const char *l, size_t n,
                              struct gv_error *err)
{
    if (l[0] == ' ' || l[0] == '\t')
        return bad(err, "obsolete header line folding");
    const char *colon = memchr(l, ':', n);
    if (colon == NULL || colon == l)
        return bad(err, "header line without a name");
    size_t nl = (size_t)(colon - l);
    for (size_t i = 0; i < nl; i++)
        if (l[i] == ' ' || l[i] == '\t')
            return bad(err, "whitespace in a header name");
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }
    while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;

    if (nl == 14 && strncasecmp(l, "Content-Length", 14) == 0) {
        if (vl == 0 || vl > 18)
            return bad(err, "bad Content-Length");
        uint64_t x = 0;
        for (size_t i = 0; i < vl; i++) {
            if (!isdigit((unsigned char)v[i]))
                return bad(err, "bad Content-Length");
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        if (p->have_length && p->remaining != x)
            return bad(err, "conflicting Content-Length headers");
        p->have_length = true;
        p->remaining = x;
    } else if (nl == 17 && strncasecmp(l, "Transfer-Encoding", 17) == 0) {
        /* Only a final "chunked" frames the body; anything else (or no
         * coding we know) is read until close, as RFC 9112 6.3 says. */
        p->chunked = has_token(v, vl, "chunked", true);
        if (!p->chunked)
            p->keep_alive = false;
    } else if (nl == 10 && strncasecmp(l, "Connection", 10) == 0) {
        if (has_token(v, vl, "close", false))
            p->keep_alive = false;
        else if (has_token(v, vl, "keep-alive", false))
            p->keep_alive = true;
    } else if (nl == 11 && strncasecmp(l, "Retry-After", 11) == 0) {
        /* delta-seconds only; an HTTP-date is left to the backoff. */
        long s = 0;
        size_t i = 0;
        for (; i < vl && isdigit((unsigned char)v[i]) && s < 86400; i++)
            s = s * 10 + (v[i] - '0');
        if (i > 0 && i == vl)
            p->retry_after_s = s;
    }
    return GV_OK;
}

/* Headers are complete: decide how the body is framed. */
static gv_status end_of_headers(struct gv_http_parser *p, struct gv_error *err)
{
    if (p->status < 200 && p->status != 101) {
        /* Interim 1xx response: the real one follows. */
        p->state = GV_HTTP_STATUS;
        return GV_OK;
    }
    if (p->chunked && p->have_length)
        return bad(err, "both Content-Length and Transfer-Encoding");
    if (p->status == 204 || p->status == 304 || p->status == 101) {
        p->state = GV_HTTP_DONE;
        if (p->status == 101)
            p->keep_alive = false; /* we never asked to switch protocols */
    } else if (p->chunked) {
        p->state = GV_HTTP_CHUNK_SIZE;
    } else if (p->have_length) {
        p->state = p->remaining == 0 ? GV_HTTP_DONE : GV_HTTP_BODY_LEN;
    } else {
        p->state = GV_HTTP_BODY_EOF;
        p->keep_alive = false;
    }
    return GV_OK;
}

static gv_status parse_chunk_size(struct gv_http_parser *p, const char *l, size_t n,
                                  struct gv_error *err)
{
    uint64_t x = 0;
    size_t i = 0;
    for (; i < n && isxdigit((unsigned char)l[i]); i++) {
        if (i >= 15)
            return bad(err, "chunk size too large");
        int d = isdigit((unsigned char)l[i]) ? l[i] - '0' : (tolower((unsigned char)l[i]) - 'a' + 10);
        x = x * 16 + (uint64_t)d;
    }
    if (i == 0)
        return bad(err, "bad chunk size");
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    if (i < n && l[i] != ';')
        return bad(err, "bad chunk size");
    p->remaining = x;
    p->state = x == 0 ? GV_HTTP_TRAILERS : GV_HTTP_CHUNK_DATA;
    return GV_OK;
}

/* A complete line (CR LF or bare LF stripped) in the current state. */
static gv_status on_line(struct gv_http_parser *p, struct gv_error *err)
{
    const char *l = p->line;
    size_t n = p->line_len;
    switch (p->state) {
    case GV_HTTP_STATUS:
        p->state = GV_HTTP_HEADERS;
        return parse_status(p, l, n, err);
    case GV_HTTP_HEADERS:
        return n == 0 ? end_of_headers(p, err) : parse_header(p, l, n, err);
    case GV_HTTP_CHUNK_SIZE:
        return parse_chunk_size(p, l, n, err);
    case GV_HTTP_CHUNK_END:
        if (n != 0)
            return bad(err, "chunk data longer than its size");
        p->state = GV_HTTP_CHUNK_SIZE;
        return GV_OK;
    case GV_HTTP_TRAILERS:
        if (n == 0)
            p->state = GV_HTTP_DONE;
        return GV_OK; /* trailer fields carry nothing we use */
    default:
        return bad(err, "internal parser state");
    }
}

static bool line_state(enum gv_http_parse_state s)
{
    return s == GV_HTTP_STATUS || s == GV_HTTP_HEADERS || s == GV_HTTP_CHUNK_SIZE ||
           s == GV_HTTP_CHUNK_END || s == GV_HTTP_TRAILERS;
}

gv_status gv_http_parser_feed(struct gv_http_parser *p, const char *data, size_t len,
                              size_t *used, gv_http_body_fn fn, void *ud, struct gv_error *err)
{
    size_t i = 0;
    gv_status st = GV_OK;
    if (len > 0)
        p->got_bytes = true;
    while (i < len && p->state != GV_HTTP_DONE && !p->stopped) {
        if (line_state(p->state)) {
            const char *nlp = memchr(data + i, '\n', len - i);
            size_t take = nlp != NULL ? (size_t)(nlp - (data + i)) : len - i;
            bool in_head = p->state == GV_HTTP_STATUS || p->state == GV_HTTP_HEADERS;
            if (p->line_len + take >= GV_HTTP_MAX_LINE) {
                st = bad(err, "line too long");
                break;
            }
            /* the LF counts once, when it arrives: the limit must not
             * depend on how the bytes were split */
            if (in_head && (p->head_bytes += take + (nlp != NULL)) > GV_HTTP_MAX_HEAD) {
                st = bad(err, "headers too large");
                break;
            }
            memcpy(p->line + p->line_len, data + i, take);
            p->line_len += take;
            i += take;
            if (nlp == NULL)
                break;
            i++; /* the LF */
            if (p->line_len > 0 && p->line[p->line_len - 1] == '\r')
                p->line_len--;
            if (memchr(p->line, '\r', p->line_len) != NULL || memchr(p->line, '\0', p->line_len)) {
                st = bad(err, "stray CR or NUL in a line");
                break;
            }
            st = on_line(p, err);
            p->line_len = 0;
            if (st != GV_OK)
                break;
            continue;
        }
        size_t take = len - i;
        if (p->state != GV_HTTP_BODY_EOF && take > p->remaining)
            take = (size_t)p->remaining;
        if (fn != NULL && take > 0 && !fn(ud, data + i, take))
            p->stopped = true;
        i += take;
        if (p->state != GV_HTTP_BODY_EOF) {
            p->remaining -= take;
            if (p->remaining == 0)
                p->state = p->state == GV_HTTP_BODY_LEN ? GV_HTTP_DONE : GV_HTTP_CHUNK_END;
        }
    }
    if (used != NULL)
        *used = i;
    return st;
}

gv_status gv_http_parser_eof(struct gv_http_parser *p, struct gv_error *err)
{
    if (p->state == GV_HTTP_BODY_EOF) {
        p->state = GV_HTTP_DONE;
        return GV_OK;
    }
    if (p->state == GV_HTTP_DONE)
        return GV_OK;
    return gv_error_set(err, GV_EUNAVAILABLE, "%s",
                        p->got_bytes ? "connection closed in the middle of the response"
                                     : "connection closed before any response");
}
