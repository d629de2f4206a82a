/*
 * The HTTP/1.1 response parser (src/kube/http_response.c) without a
 * network: every framing the API server uses, fed whole and in every chunk
 * size (as TCP may deliver it), and the malformed shapes it must refuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gv_buf.h"
#include "kube/kube_http.h"

struct parsed {
    gv_status st;
    long status;
    bool done, keep_alive;
    long retry_after;
    size_t used; /* bytes consumed in all */
    char body[512];
    size_t body_len;
};

static bool collect(void *ud, const char *data, size_t len)
{
    struct parsed *p = ud;
    assert_true(p->body_len + len < sizeof(p->body));
    memcpy(p->body + p->body_len, data, len);
    p->body_len += len;
    return true;
}

/* Feeds msg in chunks of `chunk` bytes; eof: then signal connection close. */
static struct parsed parse(const char *msg, size_t chunk, bool eof)
{
    struct parsed out;
    memset(&out, 0, sizeof(out));
    struct gv_http_parser *p = malloc(sizeof(*p));
    assert_non_null(p);
    gv_http_parser_init(p);
    struct gv_error err;
    size_t len = strlen(msg);
    for (size_t off = 0; off < len && p->state != GV_HTTP_DONE; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        size_t used = 0;
        out.st = gv_http_parser_feed(p, msg + off, n, &used, collect, &out, &err);
        out.used += used;
        if (out.st != GV_OK)
            break;
    }
    if (out.st == GV_OK && eof)
        out.st = gv_http_parser_eof(p, &err);
    out.status = p->status;
    out.done = p->state == GV_HTTP_DONE;
    out.keep_alive = p->keep_alive;
    out.retry_after = p->retry_after_s;
    free(p);
    return out;
}

/* The same result for every chunk size. */
static void expect(const char *msg, bool eof, long status, const char *body, bool keep_alive,
                   size_t used)
{
    for (size_t chunk = 1; chunk <= strlen(msg); chunk++) {
        struct parsed r = parse(msg, chunk, eof);
        assert_int_equal(r.st, GV_OK);
        assert_true(r.done);
        assert_int_equal(r.status, status);
        assert_int_equal(r.body_len, strlen(body));
        assert_memory_equal(r.body, body, r.body_len);
        assert_int_equal(r.keep_alive, keep_alive);
        assert_int_equal(r.used, used);
    }
}

static void test_content_length(void **state)
{
    (void)state;
    const char *m = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "Content-Length: 7\r\n\r\n{\"a\":1}";
    expect(m, false, 200, "{\"a\":1}", true, strlen(m));
    /* the connection closing after a complete response is no error */
    expect(m, true, 200, "{\"a\":1}", true, strlen(m));
    /* no reason phrase; a value's surrounding whitespace; 18 digits */
    m = "HTTP/1.1 200\r\nContent-Length: \t 000000000000000002 \t\r\n\r\nok";
    expect(m, false, 200, "ok", true, strlen(m));
}

static void test_chunked_with_extensions_and_trailers(void **state)
{
    (void)state;
    const char *m = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "4;ext=1\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nX-Trailer: y\r\n\r\n";
    expect(m, false, 200, "{\"a\":1}", true, strlen(m));
}

static void test_stops_at_message_end(void **state)
{
    (void)state;
    /* Bytes after the response are not consumed: the caller must not
     * trust the connection for another request. */
    const char *m = "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n";
    struct parsed r = parse(m, strlen(m), false);
    assert_int_equal(r.st, GV_OK);
    assert_true(r.done);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.used, strlen("HTTP/1.1 204 No Content\r\n\r\n"));
}

static void test_close_delimited_and_http10(void **state)
{
    (void)state;
    expect("HTTP/1.0 200 OK\r\n\r\nhello", true, 200, "hello", false,
           strlen("HTTP/1.0 200 OK\r\n\r\nhello"));
    expect("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false, 200,
           "ok", false, strlen("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"));
    expect("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", false, 200,
           "", true, strlen("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n"));
}

static void test_interim_1xx_skipped_and_bare_lf(void **state)
{
    (void)state;
    const char *m = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 409 Conflict\nContent-Length: 1\n\nx";
    expect(m, false, 409, "x", true, strlen(m));
}

static void test_retry_after(void **state)
{
    (void)state;
    struct parsed r =
        parse("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n",
              1000, false);
    assert_int_equal(r.st, GV_OK);
    assert_int_equal(r.status, 429);
    assert_int_equal(r.retry_after, 3);
    /* An HTTP-date is not a delay we use. */
    r = parse("HTTP/1.1 503 x\r\nRetry-After: Fri, 31 Dec 1999 23:59:59 GMT\r\n"
              "Content-Length: 0\r\n\r\n",
              1000, false);
    assert_int_equal(r.retry_after, -1);
}

static void test_truncated_is_unavailable(void **state)
{
    (void)state;
    struct parsed r = parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1000, true);
    assert_int_equal(r.st, GV_EUNAVAILABLE);
    r = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 1000, true);
    assert_int_equal(r.st, GV_EUNAVAILABLE);
    r = parse("", 1000, true);
    assert_int_equal(r.st, GV_EUNAVAILABLE);
}

static void test_malformed_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "ICY 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: a\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
        "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
        "HTTP/1.1 099 Early\r\n\r\n",
        "HTTP/1.1 000\r\n\r\n",
        "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0000000000000000002\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct parsed r = parse(bad[i], 1000, true);
        if (r.st != GV_EPROTO)
            fail_msg("case %zu accepted: %s", i, bad[i]);
    }
}

static void test_limits(void **state)
{
    (void)state;
    /* One header line past GV_HTTP_MAX_LINE. */
    struct gv_buf b = {0};
    const char *head = "HTTP/1.1 200 OK\r\nX-Big: ";
    assert_int_equal(gv_buf_append(&b, head, strlen(head)), GV_OK);
    for (size_t i = 0; i < GV_HTTP_MAX_LINE; i++)
        assert_int_equal(gv_buf_append(&b, "a", 1), GV_OK);
    assert_int_equal(gv_buf_append(&b, "\r\n\r\n", 4), GV_OK);
    assert_int_equal(parse(b.data, 4096, false).st, GV_EPROTO);
    /* Many small headers past GV_HTTP_MAX_HEAD. */
    gv_buf_reset(&b);
    assert_int_equal(gv_buf_append(&b, "HTTP/1.1 200 OK\r\n", 17), GV_OK);
    for (size_t i = 0; i < GV_HTTP_MAX_HEAD / 16 + 1; i++)
        assert_int_equal(gv_buf_append(&b, "X-Header: 12345\r\n", 17), GV_OK);
    assert_int_equal(gv_buf_append(&b, "\r\n", 2), GV_OK);
    assert_int_equal(parse(b.data, 4096, false).st, GV_EPROTO);
    gv_buf_free(&b);
}

/* What head_of() puts around its filler lines. */
#define HEAD_STATUS "HTTP/1.1 200 OK\r\n"
#define HEAD_END "Content-Length: 0\r\n\r\n"
#define HEAD_FIXED (sizeof(HEAD_STATUS) - 1 + sizeof(HEAD_END) - 1)

/* A head of exactly `total` bytes: status line, filler header lines of at
 * most line_max bytes each (CR LF included), Content-Length and blank line. */
static void head_of(struct gv_buf *b, size_t total, size_t line_max)
{
    gv_buf_reset(b);
    const char *status = HEAD_STATUS, *end = HEAD_END;
    assert_int_equal(gv_buf_append(b, status, strlen(status)), GV_OK);
    size_t left = total - HEAD_FIXED;
    while (left > 0) {
        /* "X: " + n bytes + CRLF, n >= 1 */
        size_t line = left < line_max ? left : line_max;
        if (left - line != 0 && left - line < 6)
            line = left - 6; /* leave room for one more whole line */
        assert_true(line >= 6);
        assert_int_equal(gv_buf_append(b, "X: ", 3), GV_OK);
        for (size_t i = 0; i < line - 5; i++)
            assert_int_equal(gv_buf_append(b, "a", 1), GV_OK);
        assert_int_equal(gv_buf_append(b, "\r\n", 2), GV_OK);
        left -= line;
    }
    assert_int_equal(gv_buf_append(b, end, strlen(end)), GV_OK);
    assert_int_equal(b->len, total);
}

static void test_limit_boundaries(void **state)
{
    (void)state;
    struct gv_buf b = {0};
    /* A line of GV_HTTP_MAX_LINE - 1 bytes before its LF fits; one more does not. */
    head_of(&b, HEAD_FIXED + GV_HTTP_MAX_LINE, GV_HTTP_MAX_LINE);
    assert_int_equal(parse(b.data, 4096, false).st, GV_OK);
    head_of(&b, HEAD_FIXED + GV_HTTP_MAX_LINE + 1, GV_HTTP_MAX_LINE + 1);
    assert_int_equal(parse(b.data, 4096, false).st, GV_EPROTO);
    /* A head of GV_HTTP_MAX_HEAD bytes in all fits; one more does not,
     * however the bytes arrive (each LF counted once, not once a read). */
    static const size_t reads[] = {1, 7, 4096, GV_HTTP_MAX_HEAD + 1};
    for (size_t k = 0; k < sizeof(reads) / sizeof(reads[0]); k++) {
        head_of(&b, GV_HTTP_MAX_HEAD, 4000);
        struct parsed r = parse(b.data, reads[k], false);
        if (r.st != GV_OK || !r.done)
            fail_msg("a head of exactly the limit refused in reads of %zu bytes", reads[k]);
        head_of(&b, GV_HTTP_MAX_HEAD + 1, 4000);
        if (parse(b.data, reads[k], false).st != GV_EPROTO)
            fail_msg("a head one byte past the limit accepted in reads of %zu bytes", reads[k]);
    }
    /* The head's limit is the head's: a watch's chunk-size lines are body
     * framing, however many (here 40,000 of them, ~200 KB of framing). */
    gv_buf_reset(&b);
    const char *h = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_int_equal(gv_buf_append(&b, h, strlen(h)), GV_OK);
    for (int i = 0; i < 40000; i++)
        assert_int_equal(gv_buf_append(&b, "1;e=1\r\nx\r\n", 10), GV_OK);
    assert_int_equal(gv_buf_append(&b, "0\r\n\r\n", 5), GV_OK);
    struct gv_http_parser *p = malloc(sizeof(*p));
    assert_non_null(p);
    gv_http_parser_init(p);
    struct gv_error err;
    size_t used = 0;
    assert_int_equal(gv_http_parser_feed(p, b.data, b.len, &used, NULL, NULL, &err), GV_OK);
    assert_int_equal(p->state, GV_HTTP_DONE);
    assert_int_equal(used, b.len);
    free(p);
    gv_buf_free(&b);
}

/* Only the headers named: others of the same length are not read as them. */
static void test_header_names_exact(void **state)
{
    (void)state;
    const char *m = "HTTP/1.1 200 OK\r\nTransfer-Encodinx: chunked\r\nConnectiox: close\r\n"
                    "Retry-Aftex: 7\r\nContent-Lengtx: zz\r\nContent-Length: 2\r\n\r\nok";
    expect(m, false, 200, "ok", true, strlen(m));
    assert_int_equal(parse(m, 1000, false).retry_after, -1);
    /* names are case-insensitive */
    m = "HTTP/1.1 200 OK\r\ntransfer-encoding: CHUNKED\r\nCONNECTION: Close\r\n\r\n"
        "2\r\nok\r\n0\r\n\r\n";
    expect(m, false, 200, "ok", false, strlen(m));
    /* a list's tokens are trimmed: "close " is close */
    m = "HTTP/1.1 200 OK\r\nConnection: foo ,close \t, bar\r\nContent-Length: 2\r\n\r\nok";
    expect(m, false, 200, "ok", false, strlen(m));
}

static void test_retry_after_delta_seconds_only(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        long want;
    } cases[] = {{"0", 0}, {"120", 120}, {"5x", -1}, {"", -1}, {"x5", -1}, {"-5", -1}, {"5 5", -1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char m[200];
        snprintf(m, sizeof(m), "HTTP/1.1 503 x\r\nRetry-After: %s\r\nContent-Length: 0\r\n\r\n",
                 cases[i].value);
        struct parsed r = parse(m, 1000, false);
        assert_int_equal(r.st, GV_OK);
        if (r.retry_after != cases[i].want)
            fail_msg("Retry-After \"%s\": %ld, want %ld", cases[i].value, r.retry_after,
                     cases[i].want);
    }
}

/* Bodiless answers: 204 and 304 keep the connection, 101 ends it. */
static void test_bodiless_statuses(void **state)
{
    (void)state;
    expect("HTTP/1.1 204 No Content\r\n\r\n", false, 204, "", true, 27);
    expect("HTTP/1.1 304 Not Modified\r\n\r\n", false, 304, "", true, 29);
    expect("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", false, 101, "",
           false, 56);
}

/* Chunk-size lines: hex digits, optional whitespace, optional extensions,
 * nothing else; at most 15 digits. */
static void test_chunk_size_lines(void **state)
{
    (void)state;
    static const char *const ok[] = {"2", "2 ", "2\t", "2 \t ;a=b", "2;a", "02", "0002"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char m[200];
        snprintf(m, sizeof(m),
                 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\nok\r\n0\r\n\r\n",
                 ok[i]);
        expect(m, false, 200, "ok", true, strlen(m));
    }
    static const char *const bad[] = {"", ";a=b", " 2", "2x", "2 x", "2\tx", "x2",
                                      "1000000000000000", "ffffffffffffffff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char m[200];
        snprintf(m, sizeof(m),
                 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\nok\r\n0\r\n\r\n",
                 bad[i]);
        struct parsed r = parse(m, 1000, true);
        if (r.st != GV_EPROTO)
            fail_msg("chunk-size line \"%s\" accepted", bad[i]);
    }
    /* 15 digits are allowed (a size too large for any body we read, but framing) */
    struct parsed r = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "100000000000000\r\nok",
                            1000, false);
    assert_int_equal(r.st, GV_OK);
    assert_false(r.done);
}

static bool stop_after_first(void *ud, const char *data, size_t len)
{
    (void)data;
    (void)len;
    int *calls = ud;
    (*calls)++;
    return false;
}

static void test_callback_stops(void **state)
{
    (void)state;
    struct gv_http_parser *p = malloc(sizeof(*p));
    assert_non_null(p);
    gv_http_parser_init(p);
    const char *m = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
    int calls = 0;
    size_t used = 0;
    struct gv_error err;
    assert_int_equal(gv_http_parser_feed(p, m, strlen(m), &used, stop_after_first, &calls, &err),
                     GV_OK);
    assert_true(p->stopped);
    assert_int_equal(calls, 1);
    assert_int_not_equal(p->state, GV_HTTP_DONE);
    assert_true(used < strlen(m)); /* the rest is left unread */
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_chunked_with_extensions_and_trailers),
        cmocka_unit_test(test_stops_at_message_end),
        cmocka_unit_test(test_close_delimited_and_http10),
        cmocka_unit_test(test_interim_1xx_skipped_and_bare_lf),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_truncated_is_unavailable),
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_limit_boundaries),
        cmocka_unit_test(test_header_names_exact),
        cmocka_unit_test(test_retry_after_delta_seconds_only),
        cmocka_unit_test(test_bodiless_statuses),
        cmocka_unit_test(test_chunk_size_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
