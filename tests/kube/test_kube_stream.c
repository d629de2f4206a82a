/*
 * The watch stream decoder and the small pure helpers (backoff bounds,
 * Status parsing), without a server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kube/kube_internal.h"

struct seen {
    int n;
    char types[16][16];
    char names[16][32];
    int stop_at;
};

static bool record(void *ud, gv_kube_event_type type, json_t *obj)
{
    struct seen *s = ud;
    if (s->n < 16) {
        snprintf(s->types[s->n], sizeof(s->types[0]), "%s", gv_kube_event_name(type));
        const char *name =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name ? name : "");
    }
    s->n++;
    return s->stop_at == 0 || s->n < s->stop_at;
}

static const char three[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\"}}}\r\n"
    "\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}\n";

static void test_any_chunking_same_events(void **state)
{
    (void)state;
    size_t len = strlen(three);
    for (size_t chunk = 1; chunk <= len; chunk++) {
        struct seen s = {0};
        struct gv_kube_stream st;
        gv_kube_stream_init(&st, record, &s);
        struct gv_error err;
        for (size_t off = 0; off < len; off += chunk) {
            size_t n = len - off < chunk ? len - off : chunk;
            assert_int_equal(gv_kube_stream_feed(&st, three + off, n, &err), GV_OK);
        }
        assert_int_equal(gv_kube_stream_finish(&st, &err), GV_OK);
        assert_int_equal(s.n, 3);
        assert_string_equal(s.types[0], "ADDED");
        assert_string_equal(s.types[1], "MODIFIED");
        assert_string_equal(s.types[2], "BOOKMARK");
        assert_string_equal(s.names[1], "a");
        assert_string_equal(st.last_rv, "9");
        gv_kube_stream_release(&st);
    }
}

static gv_status feed_all(const char *text, struct seen *s, struct gv_error *err)
{
    struct gv_kube_stream st;
    gv_kube_stream_init(&st, record, s);
    gv_status rc = gv_kube_stream_feed(&st, text, strlen(text), err);
    if (rc == GV_OK)
        rc = gv_kube_stream_finish(&st, err);
    gv_kube_stream_release(&st);
    return rc;
}

static void test_errors(void **state)
{
    (void)state;
    struct seen s = {0};
    struct gv_error err;
    assert_int_equal(feed_all("{\"type\":\"ADDED\",\"object\":{}}\n{nope}\n", &s, &err),
                     GV_EPROTO);
    assert_int_equal(s.n, 1); /* the good event before it was delivered */
    assert_non_null(strstr(err.msg, "watch event 2: invalid JSON"));

    memset(&s, 0, sizeof(s));
    assert_int_equal(feed_all("{\"type\":\"SOMETHING\",\"object\":{}}\n", &s, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "unknown type \"SOMETHING\""));
    assert_int_equal(feed_all("{\"object\":{}}\n", &s, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "missing string \"type\""));
    assert_int_equal(feed_all("{\"type\":\"ADDED\",\"object\":\"x\"}\n", &s, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "not an object"));
    assert_int_equal(feed_all("[1,2]\n", &s, &err), GV_EPROTO);

    /* ERROR events carry a Status: 410 means relist, others map by code. */
    assert_int_equal(feed_all("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                              "\"reason\":\"Expired\",\"message\":\"too old resource version: "
                              "5 (9)\"}}\n",
                              &s, &err),
                     GV_ERANGE);
    assert_non_null(strstr(err.msg, "too old resource version: 5 (9)"));
    assert_int_equal(feed_all("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":500,"
                              "\"message\":\"etcd down\"}}\n",
                              &s, &err),
                     GV_EUNAVAILABLE);
    assert_non_null(strstr(err.msg, "etcd down"));

    /* A stream cut inside an event is an error; a complete last event
     * without its newline is delivered. */
    memset(&s, 0, sizeof(s));
    assert_int_equal(feed_all("{\"type\":\"ADDED\",\"obj", &s, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "ended inside event 1"));
    assert_int_equal(feed_all("{\"type\":\"ADDED\",\"object\":{}}", &s, &err), GV_OK);
    assert_int_equal(s.n, 1);
}

/* An error is an error however the event arrives: an ERROR event (410:
 * relist) or bad JSON split over reads must end the stream just the same. */
static void test_errors_across_reads(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        gv_status want;
    } cases[] = {
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
         "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}}\n",
         GV_ERANGE},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n{\"type\":\"ADDED\",nope}\n",
         GV_EPROTO},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t len = strlen(cases[c].text);
        for (size_t cut = 1; cut < len; cut++) {
            struct seen s = {0};
            struct gv_kube_stream st;
            gv_kube_stream_init(&st, record, &s);
            struct gv_error err;
            gv_status rc = gv_kube_stream_feed(&st, cases[c].text, cut, &err);
            if (rc == GV_OK)
                rc = gv_kube_stream_feed(&st, cases[c].text + cut, len - cut, &err);
            if (rc == GV_OK)
                rc = gv_kube_stream_finish(&st, &err);
            if (rc != cases[c].want)
                fail_msg("case %zu cut at %zu: %s, want %s", c, cut, gv_status_name(rc),
                         gv_status_name(cases[c].want));
            assert_int_equal(s.n, 1);
            gv_kube_stream_release(&st);
        }
    }
    /* keep-alive padding: blank lines, with CR or spaces, between events */
    struct seen s = {0};
    struct gv_error err;
    assert_int_equal(feed_all("\r\n \r\n{\"type\":\"ADDED\",\"object\":{}}  \r\n  \n\r\n", &s, &err),
                     GV_OK);
    assert_int_equal(s.n, 1);
}

static void test_line_limit_and_stop(void **state)
{
    (void)state;
    struct seen s = {0};
    struct gv_kube_stream st;
    gv_kube_stream_init(&st, record, &s);
    st.max_line = 64;
    struct gv_error err;
    char big[100];
    memset(big, 'x', sizeof(big));
    assert_int_equal(gv_kube_stream_feed(&st, big, 40, &err), GV_OK);
    assert_int_equal(gv_kube_stream_feed(&st, big, 40, &err), GV_EPROTO);
    assert_non_null(strstr(err.msg, "exceeds 64 bytes"));
    gv_kube_stream_release(&st);
    /* exactly the limit fits, whole or in pieces */
    const char *ev64 = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"abcdefghijklmn\"}}}\n";
    assert_int_equal(strlen(ev64), 65);
    for (size_t cut = 0; cut <= 64; cut += 16) {
        memset(&s, 0, sizeof(s));
        gv_kube_stream_init(&st, record, &s);
        st.max_line = 64;
        assert_int_equal(gv_kube_stream_feed(&st, ev64, cut, &err), GV_OK);
        assert_int_equal(gv_kube_stream_feed(&st, ev64 + cut, 65 - cut, &err), GV_OK);
        assert_int_equal(s.n, 1);
        gv_kube_stream_release(&st);
    }

    /* The callback's "stop" ends delivery at once. */
    memset(&s, 0, sizeof(s));
    s.stop_at = 1;
    gv_kube_stream_init(&st, record, &s);
    assert_int_equal(gv_kube_stream_feed(&st, three, strlen(three), &err), GV_OK);
    assert_true(st.stopped);
    assert_int_equal(s.n, 1);
    gv_kube_stream_release(&st);
}

static void test_http_error_messages(void **state)
{
    (void)state;
    struct gv_error err;
    const char *st = "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"AlreadyExists\","
                     "\"message\":\"pods \\\"p\\\" already exists\",\"code\":409}";
    assert_int_equal(gv_kube_http_error(409, st, strlen(st), "POST /x", &err), GV_EEXIST);
    assert_string_equal(err.msg,
                        "POST /x: HTTP 409 Conflict (AlreadyExists): pods \"p\" already exists");
    /* Not a Status: the body (made printable, bounded) is the message. */
    const char *html = "<html>\n\x01" "bad gateway</html>";
    assert_int_equal(gv_kube_http_error(502, html, strlen(html), "GET /y", &err),
                     GV_EUNAVAILABLE);
    assert_string_equal(err.msg, "GET /y: HTTP 502 Bad Gateway: <html>  bad gateway</html>");
    assert_int_equal(gv_kube_http_error(404, NULL, 0, "GET /z", &err), GV_ENOTFOUND);
    assert_string_equal(err.msg, "GET /z: HTTP 404 Not Found");
    /* what retrying is for: throttling and server errors, not refusals */
    assert_int_equal(gv_kube_status_code(429, NULL), GV_EUNAVAILABLE);
    assert_int_equal(gv_kube_status_code(503, NULL), GV_EUNAVAILABLE);
    assert_int_equal(gv_kube_status_code(500, NULL), GV_EUNAVAILABLE);
    assert_int_equal(gv_kube_status_code(401, NULL), GV_EIO);
    assert_int_equal(gv_kube_status_code(403, NULL), GV_EIO);
    assert_int_equal(gv_kube_status_code(418, NULL), GV_EIO);
    assert_int_equal(gv_kube_status_code(410, NULL), GV_ERANGE);
    assert_int_equal(gv_kube_status_code(409, "AlreadyExists"), GV_EEXIST);
    assert_int_equal(gv_kube_status_code(409, "Conflict"), GV_ECONFLICT);
}

static void test_backoff_bounds(void **state)
{
    (void)state;
    for (unsigned attempt = 0; attempt < 12; attempt++) {
        long d = 100;
        for (unsigned i = 0; i < attempt && d < 5000; i++)
            d *= 2;
        if (d > 5000)
            d = 5000;
        long lo = d, hi = 0;
        for (int i = 0; i < 500; i++) {
            long v = gv_kube_backoff_ms(100, 5000, attempt);
            assert_true(v >= d / 2 && v <= d);
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        /* Jittered: not a constant. */
        assert_true(hi > lo);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_chunking_same_events),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_errors_across_reads),
        cmocka_unit_test(test_line_limit_and_stop),
        cmocka_unit_test(test_http_error_messages),
        cmocka_unit_test(test_backoff_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
