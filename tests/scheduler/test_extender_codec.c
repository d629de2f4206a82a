/* Extender wire codec: Go field-name keys, both node modes, strict errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "scheduler/gv_extender.h"

static const char *names_req =
    "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"default\",\"uid\":\"u1\"},"
    "\"spec\":{}},\"Nodes\":null,\"NodeNames\":[\"n1\",\"n2\",\"n3\"]}";

static json_t *parse(const char *s)
{
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    return j;
}

static void test_names_mode_roundtrip(void **state)
{
    (void)state;
    struct gv_ext_args a;
    struct gv_error err = {0};
    assert_int_equal(gv_ext_args_parse(names_req, strlen(names_req), &a, &err), GV_OK);
    assert_int_equal(a.n_names, 3);
    assert_string_equal(a.names[1], "n2");
    assert_null(a.node_items);
    enum gv_ext_verdict v[3] = {GV_EXT_FIT, GV_EXT_FAILED, GV_EXT_UNRESOLVABLE};
    const char *reasons[3] = {NULL, "gpu 0/8 free", "agent stale"};
    char *out = gv_ext_filter_result_encode(&a, v, reasons, NULL);
    assert_non_null(out);
    json_t *r = parse(out);
    assert_true(json_is_null(json_object_get(r, "Nodes")));
    json_t *nn = json_object_get(r, "NodeNames");
    assert_int_equal(json_array_size(nn), 1);
    assert_string_equal(json_string_value(json_array_get(nn, 0)), "n1");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "FailedNodes"), "n2")),
                        "gpu 0/8 free");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "FailedAndUnresolvableNodes"), "n3")),
        "agent stale");
    assert_string_equal(json_string_value(json_object_get(r, "Error")), "");
    json_decref(r);
    free(out);
    gv_ext_args_clear(&a);
}

/* The parse runs on a scratch region that is unmapped before it returns:
 * everything args hold must have been copied out, including when tiny
 * names overflow the region and spill to malloc. */
static void test_large_names_outlive_parse_scratch(void **state)
{
    (void)state;
    enum { N = 20000 };
    size_t cap = (size_t)N * 16 + 256, len = 0;
    char *req = malloc(cap);
    assert_non_null(req);
    len += (size_t)snprintf(req, cap,
                            "{\"Pod\":{\"metadata\":{\"name\":\"big\",\"uid\":\"u-big\"},"
                            "\"spec\":{\"containers\":[{\"name\":\"c\"}]}},\"NodeNames\":[");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(req + len, cap - len, "%s\"%c\"", i ? "," : "", 'a' + i % 26);
    len += (size_t)snprintf(req + len, cap - len, "]}");
    struct gv_ext_args a;
    struct gv_error err = {0};
    assert_int_equal(gv_ext_args_parse(req, len, &a, &err), GV_OK);
    free(req);
    assert_int_equal(a.n_names, N);
    for (int i = 0; i < N; i += 997) {
        char want[2] = {(char)('a' + i % 26), '\0'};
        assert_string_equal(a.names[i], want);
    }
    assert_string_equal(a.names[N - 1], "f");
    json_t *md = json_object_get(a.pod, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "uid")), "u-big");
    /* Objects made after the parse are ordinary heap objects. */
    json_object_set_new(md, "resourceVersion", json_string("7"));
    assert_string_equal(json_string_value(json_object_get(md, "resourceVersion")), "7");
    gv_ext_args_clear(&a);
}

static void test_full_nodes_mode_returns_objects(void **state)
{
    (void)state;
    const char *req = "{\"Pod\":{\"metadata\":{\"name\":\"p\"}},\"Nodes\":{\"metadata\":{},"
                      "\"items\":[{\"metadata\":{\"name\":\"a\",\"labels\":{\"x\":\"1\"}}},"
                      "{\"metadata\":{\"name\":\"b\"}}]}}";
    struct gv_ext_args a;
    struct gv_error err = {0};
    assert_int_equal(gv_ext_args_parse(req, strlen(req), &a, &err), GV_OK);
    assert_int_equal(a.n_names, 2);
    assert_non_null(a.node_items);
    enum gv_ext_verdict v[2] = {GV_EXT_FIT, GV_EXT_FAILED};
    char *out = gv_ext_filter_result_encode(&a, v, NULL, NULL);
    json_t *r = parse(out);
    json_t *items = json_object_get(json_object_get(r, "Nodes"), "items");
    assert_int_equal(json_array_size(items), 1);
    /* The whole Node object comes back, not just its name. */
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_object_get(json_array_get(items, 0), "metadata"), "labels"), "x")),
        "1");
    assert_true(json_is_null(json_object_get(r, "NodeNames")));
    assert_non_null(json_object_get(json_object_get(r, "FailedNodes"), "b"));
    json_decref(r);
    free(out);
    gv_ext_args_clear(&a);
}

/* The body as jansson reads it, whole: what the parser must agree with
 * (names from the text without a JSON value per name, docs/alloc.md). */
/* Parses text (copied or in place, as the daemon does) and checks the
 * answer against jansson's reading of it; returns whether the names came
 * from the fast scanner. */
static bool same_as_jansson(const char *text, bool inplace)
{
    struct gv_ext_args a;
    struct gv_error err = {0};
    /* a copy of exactly the body's bytes, no terminator: a read past the
     * end is the sanitizer's to catch (the scan reads words) */
    size_t len = strlen(text);
    char *body = malloc(len ? len : 1);
    assert_non_null(body);
    memcpy(body, text, len);
    json_t *ref = json_loadb(text, len, 0, NULL);
    gv_status st = inplace ? gv_ext_args_parse_inplace(body, len, &a, &err)
                           : gv_ext_args_parse(body, len, &a, &err);
    json_t *names = NULL;
    if (ref != NULL) {
        const char *k;
        json_t *v;
        json_object_foreach(ref, k, v) if (strcasecmp(k, "NodeNames") == 0) names = v;
    }
    bool ok = ref != NULL && json_is_array(names);
    for (size_t i = 0; ok && i < json_array_size(names); i++) {
        const char *n = json_string_value(json_array_get(names, i));
        ok = n != NULL && *n != '\0';
    }
    if (!ok) {
        assert_int_not_equal(st, GV_OK);
        /* refused: the body is as it came, whatever the scan had ended */
        assert_memory_equal(body, text, len);
        json_decref(ref);
        free(body);
        return false;
    }
    if (st != GV_OK)
        fail_msg("%s: %s", text, err.msg);
    assert_int_equal(a.n_names, json_array_size(names));
    for (size_t i = 0; i < a.n_names; i++)
        assert_string_equal(a.names[i], json_string_value(json_array_get(names, i)));
    assert_string_equal(json_string_value(json_object_get(json_object_get(a.pod, "metadata"),
                                                           "uid")),
                        "u1");
    bool scanned = a.scanned;
    if (!scanned) /* jansson read it: from the body as it came */
        assert_memory_equal(body, text, len);
    gv_ext_args_clear(&a);
    json_decref(ref);
    free(body);
    return scanned;
}

static bool expect_same_as_jansson(const char *text)
{
    bool scanned = same_as_jansson(text, false);
    assert_true(same_as_jansson(text, true) == scanned);
    return scanned;
}

static void test_names_scan_agrees_with_jansson(void **state)
{
    (void)state;
    static const char *pod = "{\"metadata\":{\"uid\":\"u1\"},\"spec\":{\"x\":\"]\\\"[\"}}";
    static const char *tails[] = {
        "\"NodeNames\":[\"a\",\"b-1\",\"c.2\"]}",
        "\"NodeNames\" : [ \"a\" , \"b\" ] , \"Nodes\" : null }",
        "\"NodeNames\":[]}",
        "\"NodeNames\":[\"n\\u002d1\",\"x\\\"y\"]}",   /* escapes: jansson decodes them */
        "\"NodeNames\":[\"\xc3\xa9t\xc3\xa9\"]}",      /* UTF-8 */
        "\"NodeNames\":[\"a\"],\"NodeNames\":[\"b\"]}", /* duplicate key */
        "\"nodenames\":[\"a\",\"b\"]}",
        "\"NodeNames\":[\"a\"],\"extra\":{\"k\":[1,2,{\"z\":\"}\"}]}}",
        "\"NodeNames\":[\"a\"],\"extra\":tru}",          /* not JSON */
        "\"NodeNames\":[\"a\",]}",
        "\"NodeNames\":[\"a\" \"b\"]}",
        "\"NodeNames\":[\"a\"]} x",
        "\"NodeNames\":[\"a\"]",
        "\"NodeNames\":[\"a\",1]}",
        "\"NodeNames\":[\"a\"],\"Nodes\":{\"items\":[]}}",
        "\"NodeNames\":[\"a\\u0000b\"]}",
        "\"NodeNames\":[xa\",\"b\"]}",                 /* a name without its opening quote */
        "\"NodeNames\":[\"a\",xb\"]}",
        "\"NodeNames\":[\"a\"x\"b\"]}",                 /* no comma between names */
    };
    char body[512];
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        snprintf(body, sizeof(body), "{\"Pod\":%s,%s", pod, tails[i]);
        /* plain names with the keys spelled once, as Go writes them, are
         * the scanner's (an ignored member, too); the rest jansson's or
         * errors */
        assert_true(expect_same_as_jansson(body) == (i < 3 || i == 7));
    }
    /* one structural character missing or replaced: refused, as jansson does */
    static const char *whole[] = {
        "x\"Pod\":{\"metadata\":{\"uid\":\"u1\"}},\"NodeNames\":[\"a\"]}",
        "{xPod\":{\"metadata\":{\"uid\":\"u1\"}},\"NodeNames\":[\"a\"]}",
        "{\"Pod\"x{\"metadata\":{\"uid\":\"u1\"}},\"NodeNames\":[\"a\"]}",
        "{\"Pod\":{\"metadata\":{\"uid\":\"u1\"}}x\"NodeNames\":[\"a\"]}",
        "{\"Pod\":{\"metadata\":{\"uid\":\"u1\"}},\"NodeNames\":[\"a\"]x",
    };
    for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++)
        if (expect_same_as_jansson(whole[i]))
            fail_msg("%s: scanned", whole[i]);
}

/* The fast scan checks names eight bytes at a time: every byte value at
 * every offset of a 20-byte name (inside a word, at its edges, in the
 * tail) is taken, refused or decoded exactly as jansson does. */
static void test_names_scan_every_byte_at_every_offset(void **state)
{
    (void)state;
    char body[256];
    for (int off = 0; off < 20; off++) {
        for (int v = 1; v < 256; v++) {
            if (v == '"')
                continue;
            char name[21];
            memset(name, 'a', 20);
            name[20] = '\0';
            name[off] = (char)v;
            snprintf(body, sizeof(body),
                     "{\"Pod\":{\"metadata\":{\"uid\":\"u1\"}},\"NodeNames\":[\"b\",\"%s\"]}", name);
            bool plain = v >= 0x20 && v <= 0x7e && v != '\\';
            assert_true(expect_same_as_jansson(body) == plain);
        }
    }
}

/* The keys of the members the scan skips are checked too: every byte value
 * at every offset of such a key (raw control bytes and invalid UTF-8, which
 * jansson refuses; escapes and UTF-8, which it decodes) is taken or left to
 * jansson exactly as jansson reads the body. */
static void test_ignored_key_every_byte(void **state)
{
    (void)state;
    char body[256];
    for (int off = 0; off < 10; off++) {
        for (int v = 1; v < 256; v++) {
            if (v == '"')
                continue;
            char key[11];
            memset(key, 'k', 10);
            key[10] = '\0';
            key[off] = (char)v;
            snprintf(body, sizeof(body),
                     "{\"Pod\":{\"metadata\":{\"uid\":\"u1\"}},\"%s\":1,\"NodeNames\":[\"b\"]}",
                     key);
            bool plain = v >= 0x20 && v <= 0x7e && v != '\\';
            if (expect_same_as_jansson(body) != plain)
                fail_msg("byte 0x%02x at %d of an ignored key: %s", v, off,
                         plain ? "not scanned" : "scanned");
        }
    }
}

/* Names of every length up to three words as the body's last, and every
 * cut of such a body: the word-at-a-time copy meets the body's end (and
 * the closing quote at every place in a word) as jansson does. */
static void test_names_scan_at_body_end(void **state)
{
    (void)state;
    char body[256], name[32];
    for (int len = 1; len <= 24; len++) {
        for (int i = 0; i < len; i++)
            name[i] = (char)('a' + i % 26);
        name[len] = '\0';
        snprintf(body, sizeof(body),
                 "{\"Pod\":{\"metadata\":{\"uid\":\"u1\"}},\"NodeNames\":[\"b\",\"%s\"]}", name);
        size_t full = strlen(body);
        for (size_t cut = 0; cut <= (size_t)len + 4; cut++) {
            body[full - cut] = '\0';
            /* whole, the body is the scanner's: not a jansson fallback */
            assert_true(expect_same_as_jansson(body) || cut > 0);
            snprintf(body, sizeof(body),
                     "{\"Pod\":{\"metadata\":{\"uid\":\"u1\"}},\"NodeNames\":[\"b\",\"%s\"]}",
                     name);
        }
    }
}

static void test_keys_case_insensitive_like_go(void **state)
{
    (void)state;
    const char *req = "{\"pod\":{\"metadata\":{}},\"nodenames\":[\"x\"]}";
    struct gv_ext_args a;
    struct gv_error err = {0};
    assert_int_equal(gv_ext_args_parse(req, strlen(req), &a, &err), GV_OK);
    assert_int_equal(a.n_names, 1);
    gv_ext_args_clear(&a);
}

static void expect_parse_error(const char *req, const char *needle)
{
    struct gv_ext_args a;
    struct gv_error err = {0};
    assert_int_not_equal(gv_ext_args_parse(req, strlen(req), &a, &err), GV_OK);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.msg, needle);
    assert_null(a.root);
    assert_null(a.names);
}

/* Every cut of a body the scan takes whole (whitespace, an ignored member,
 * the names): each prefix ends at another place of the scan, and none may
 * be read past its end (the copy has no terminator: the sanitizer's) or
 * taken where jansson refuses it. */
static void test_every_prefix_of_a_body(void **state)
{
    (void)state;
    static const char full[] =
        " { \"Pod\" : {\"metadata\":{\"uid\":\"u1\"}} , \"extra\" : [1, {\"k\":\"v\"}] ,"
        " \"NodeNames\" : [ \"a\" , \"bb\" ] , \"Nodes\" : null } ";
    char buf[sizeof(full)];
    assert_true(expect_same_as_jansson(full));
    for (size_t cut = 0; cut < sizeof(full) - 1; cut++) {
        memcpy(buf, full, cut);
        buf[cut] = '\0';
        bool whole = strspn(full + cut, " ") == strlen(full + cut);
        if (expect_same_as_jansson(buf) != whole)
            fail_msg("prefix of %zu bytes: %s", cut, whole ? "not scanned" : "scanned");
    }
}

/* Go encodes a NodeList without items as "items":null: no nodes, not an
 * error. */
static void test_nodes_items_null(void **state)
{
    (void)state;
    const char *req = "{\"Pod\":{\"metadata\":{}},\"Nodes\":{\"items\":null}}";
    struct gv_ext_args a;
    struct gv_error err = {0};
    if (gv_ext_args_parse(req, strlen(req), &a, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(a.n_names, 0);
    gv_ext_args_clear(&a);
}

static void test_malformed_args(void **state)
{
    (void)state;
    expect_parse_error("{\"Pod\":", "invalid JSON");
    expect_parse_error("[]", "expected a JSON object");
    expect_parse_error("{\"NodeNames\":[\"a\"]}", "\"Pod\"");
    expect_parse_error("{\"Pod\":{}, \"NodeNames\":[\"a\"]}", "metadata");
    expect_parse_error("{\"Pod\":{\"metadata\":{}}}", "neither");
    expect_parse_error("{\"Pod\":{\"metadata\":{}},\"NodeNames\":[\"a\",7]}", "NodeNames[1]");
    expect_parse_error("{\"Pod\":{\"metadata\":{}},\"NodeNames\":\"a\"}", "must be an array");
    expect_parse_error("{\"Pod\":{\"metadata\":{}},\"Nodes\":{\"items\":[{}]}}", "Nodes.items[0]");
    expect_parse_error("{\"Pod\":{\"metadata\":{}},\"Nodes\":[]}", "NodeList");
}

static void test_priorities_clamped(void **state)
{
    (void)state;
    const char *names[3] = {"a", "b", "c"};
    long scores[3] = {-4, 7, 99};
    char *out = gv_ext_priorities_encode(names, scores, 3);
    json_t *r = parse(out);
    assert_int_equal(json_array_size(r), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(r, 1), "Host")), "b");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 0), "Score")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 1), "Score")), 7);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 2), "Score")),
                     GV_EXT_MAX_SCORE);
    json_decref(r);
    free(out);
}

static void test_bind_args(void **state)
{
    (void)state;
    const char *ok = "{\"PodName\":\"p\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n\"}";
    struct gv_ext_bind_args b;
    struct gv_error err = {0};
    assert_int_equal(gv_ext_bind_args_parse(ok, strlen(ok), &b, &err), GV_OK);
    assert_string_equal(b.pod_name, "p");
    assert_string_equal(b.pod_namespace, "ns");
    assert_string_equal(b.pod_uid, "u");
    assert_string_equal(b.node, "n");
    gv_ext_bind_args_clear(&b);

    const char *nons = "{\"PodName\":\"p\",\"Node\":\"n\"}";
    assert_int_equal(gv_ext_bind_args_parse(nons, strlen(nons), &b, &err), GV_OK);
    assert_string_equal(b.pod_namespace, "default");
    gv_ext_bind_args_clear(&b);

    const char *bad[] = {"{\"PodName\":\"p\"}", "{\"PodName\":1,\"Node\":\"n\"}",
                         "{\"PodName\":\"\",\"Node\":\"n\"}", "nope"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_not_equal(gv_ext_bind_args_parse(bad[i], strlen(bad[i]), &b, &err), GV_OK);
        assert_null(b.pod_name);
        assert_true(strlen(err.msg) > 0);
    }
    char *res = gv_ext_bind_result_encode(NULL);
    assert_string_equal(res, "{\"Error\":\"\"}");
    free(res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_mode_roundtrip),
        cmocka_unit_test(test_large_names_outlive_parse_scratch),
        cmocka_unit_test(test_full_nodes_mode_returns_objects),
        cmocka_unit_test(test_keys_case_insensitive_like_go),
        cmocka_unit_test(test_names_scan_agrees_with_jansson),
        cmocka_unit_test(test_names_scan_every_byte_at_every_offset),
        cmocka_unit_test(test_names_scan_at_body_end),
        cmocka_unit_test(test_ignored_key_every_byte),
        cmocka_unit_test(test_every_prefix_of_a_body),
        cmocka_unit_test(test_nodes_items_null),
        cmocka_unit_test(test_malformed_args),
        cmocka_unit_test(test_priorities_clamped),
        cmocka_unit_test(test_bind_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
