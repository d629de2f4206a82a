/*
 * The reader of the node agents' /metrics (src/contracts/agent_usage.c,
 * gv_expfmt_parse), and the usage model built from it: text another process
 * sends, so every line shape the
 * Prometheus text format 0.0.4 allows is read, and every other one is counted
 * as malformed and skipped without hiding the lines around it.  Bodies are
 * parsed from heap copies of exactly their length, so under
 * SAN=address,undefined a read one byte past a line or the body is seen.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "contracts/agent_usage.h"

/* What the callback saw, flattened: "name{l=v,l=v} value;" per sample. */
struct seen {
    char text[4096];
    size_t n;
};

static void collect(void *ud, const struct gv_expfmt_sample *s)
{
    struct seen *x = ud;
    size_t room = sizeof(x->text) - strlen(x->text);
    char *out = x->text + strlen(x->text);
    int w = snprintf(out, room, "%s{", s->name);
    for (size_t i = 0; i < s->n_labels && w >= 0 && (size_t)w < room; i++)
        w += snprintf(out + w, room - (size_t)w, "%s%s=%s", i ? "," : "", s->label_names[i],
                      s->label_values[i]);
    if (w >= 0 && (size_t)w < room)
        snprintf(out + w, room - (size_t)w, "} %g;", s->value);
    x->n++;
}

/* Parses a heap copy of exactly len bytes (no terminator after it). */
static size_t parse(const char *body, size_t len, struct seen *x)
{
    memset(x, 0, sizeof(*x));
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, body, len);
    size_t bad = gv_expfmt_parse(copy, len, collect, x);
    free(copy);
    return bad;
}

static void well_formed_lines(void **state)
{
    (void)state;
    static const struct {
        const char *line, *want;
    } cases[] = {
        {"a 1", "a{} 1;"},
        {"Ab_:9z 2.5", "Ab_:9z{} 2.5;"},
        {"Z 1", "Z{} 1;"},
        {"_a 0", "_a{} 0;"},
        {":a 0", ":a{} 0;"},
        {"a\t7", "a{} 7;"},
        {"  \ta 7", "a{} 7;"},
        {"a 7 1700000000000", "a{} 7;"},  /* a timestamp is ignored */
        {"a 7\t1700000000000", "a{} 7;"}, /* after a tab too */
        {"a{} 3", "a{} 3;"},
        {"a{ } 3", "a{} 3;"},
        {"a{x=\"1\"} 3", "a{x=1} 3;"},
        {"a{x=\"1\",} 3", "a{x=1} 3;"},     /* a trailing comma is allowed */
        {"a{ x =\"1\" , y=\"2\" } 3", "a{x=1,y=2} 3;"},
        {"a{x=\"\"} 3", "a{x=} 3;"},
        {"a{x=\"a\\\"b\\\\c\\nd\"} 3", "a{x=a\"b\\c\nd} 3;"},
        {"a{X9_=\"}{,= \"} -1.5e3", "a{X9_=}{,= } -1500;"},
        {"a +Inf", "a{} inf;"},
        {"a NaN", "a{} nan;"},
        {"a{x=\"1\"}\t3", "a{x=1} 3;"},
        {"a 1\r", "a{} 1;"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct seen x;
        size_t bad = parse(cases[i].line, strlen(cases[i].line), &x);
        if (bad != 0 || strcmp(x.text, cases[i].want) != 0)
            fail_msg("'%s': %zu malformed, read '%s', want '%s'", cases[i].line, bad, x.text,
                     cases[i].want);
    }
}

static void malformed_lines(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "9a 1",                        /* a name starts with a letter, '_' or ':' */
        "-a 1",
        "a",                           /* no value */
        "a ",
        "a\t",
        "a1",                          /* the name runs into no blank */
        "a-b 1",                       /* '-' is not a name character */
        "a 1x",                        /* not a number */
        "a x",
        "a {x=\"1\"} 1",               /* labels glued to the name only */
        "a{",
        "a{x",
        "a{x=",
        "a{x=\"",
        "a{x=\"1",
        "a{x=\"1\"",
        "a{x=\"1\"}",                  /* labels, no value */
        "a{x=\"1\"} ",
        "a{x} 1",
        "a{x=1} 1",                    /* unquoted value */
        "a{x =1} 1",
        "a{9x=\"1\"} 1",
        "a{x=\"1\"y=\"2\"} 1",         /* no comma */
        "a{x=\"1\" y=\"2\"} 1",
        "a{x=\"1\",,} 1",
        "a{,} 1",
        "a{x=\"1\\",                   /* an escape at the end of the line */
        "a{x=\"1\\\"} 1",              /* the quote is escaped: never closed */
        "a{x=\"1\"}} 1",
        "a{x=\"1\"};1",
        "a{x!!\"} 1",                  /* no '=' before the quote */
        "a-1",                          /* a value glued to the name */
        "a.5 1",
        ("a{a=\"1\",b=\"2\",c=\"3\",d=\"4\",e=\"5\",f=\"6\",g=\"7\",h=\"8\",i=\"9\",j=\"10\","
         "k=\"11\",l=\"12\",m=\"13\",n=\"14\",o=\"15\",p=\"16\",q=\"17\"} 1"), /* 17 labels */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct seen x;
        size_t n = parse(bad[i], strlen(bad[i]), &x);
        if (n != 1 || x.n != 0)
            fail_msg("'%s': %zu malformed (want 1), %zu samples read ('%s')", bad[i], n, x.n, x.text);
    }
    /* sixteen labels are the most, and fine */
    const char *sixteen = "a{a=\"1\",b=\"2\",c=\"3\",d=\"4\",e=\"5\",f=\"6\",g=\"7\",h=\"8\",i=\"9\","
                          "j=\"10\",k=\"11\",l=\"12\",m=\"13\",n=\"14\",o=\"15\",p=\"16\"} 1";
    struct seen x;
    assert_int_equal(parse(sixteen, strlen(sixteen), &x), 0);
    assert_int_equal(x.n, 1);
}

/* One bad line hides nothing around it; comments and blank lines are
 * neither samples nor malformed; CRLF endings and a last line without a
 * newline read like the others. */
static void a_body(void **state)
{
    (void)state;
    const char body[] = "# HELP a help text with \"quotes\" and {braces}\n"
                        "# TYPE a gauge\n"
                        "\n"
                        "   \n"
                        "a{x=\"1\"} 1\n"
                        "a{x=\"2\" 2\n"
                        "b 3\r\n"
                        "#c 4\n"
                        "c{y=\"q\\\"\"} 5";
    struct seen x;
    assert_int_equal(parse(body, strlen(body), &x), 1);
    assert_string_equal(x.text, "a{x=1} 1;b{} 3;c{y=q\"} 5;");
    /* the same with a final newline */
    char nl[sizeof(body) + 1];
    snprintf(nl, sizeof(nl), "%s\n", body);
    assert_int_equal(parse(nl, strlen(nl), &x), 1);
    assert_string_equal(x.text, "a{x=1} 1;b{} 3;c{y=q\"} 5;");
    assert_int_equal(parse("", 0, &x), 0);
    assert_int_equal(x.n, 0);
}

/* Every prefix of a body is a body: whatever is cut, the parse stays inside
 * it (ASan sees a read past the copy) and reads only whole samples. */
static void every_prefix_of_a_body(void **state)
{
    (void)state;
    const char body[] = "a{x=\"1\",y=\"a\\\\b\\\"\"} 1 17\n"
                        "gpuvisor_container_gpu_memory_used_bytes{node=\"n\",pod=\"p\"}\t314572800\r\n"
                        "b 2";
    size_t full = strlen(body);
    for (size_t n = 0; n <= full; n++) {
        struct seen x;
        size_t bad = parse(body, n, &x);
        assert_true(bad + x.n <= 3);
        /* a cut inside a line's value may still leave a number ("1" of "17"),
         * but a name or label value is never cut short into a sample */
        for (const char *s = x.text; (s = strstr(s, "y=")) != NULL; s += 2)
            assert_true(strncmp(s, "y=a\\b\"}", 7) == 0);
    }
    struct seen x;
    assert_int_equal(parse(body, full, &x), 0);
    assert_string_equal(x.text, "a{x=1,y=a\\b\"} 1;gpuvisor_container_gpu_memory_used_bytes{node=n,"
                                "pod=p} 3.14573e+08;b{} 2;");
}

/* The usage model keeps what it reads, and only that. */
static void usage_from_an_agent(void **state)
{
    (void)state;
    struct gv_usage u;
    memset(&u, 0, sizeof(u));
    char text[] =
        /* a GPU series nobody reads: the GPU is known, nothing else about it */
        "DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-a\",modelName=\"H100\","
        "device_type=\"NVIDIA-A100\",Hostname=\"n1\"} 1980\n"
        /* HAMi's host memory alone: memory, no utilisation */
        "hami_host_gpu_memory_used_bytes{device_uuid=\"GPU-b\",device_index=\"9\","
        "device_type=\"NVIDIA-A100\"} 1048576\n"
        /* other series of the exposition are not GPUs */
        "process_cpu_seconds_total 12\n"
        "gpuvisor_node_info{node=\"n1\"} 1\n";
    assert_int_equal(gv_usage_add_text(&u, text, strlen(text), "n1"), 0);
    assert_int_equal(u.gpus.n, 2);
    assert_int_equal(u.ctrs.n, 0);
    struct gv_usage_row *a = gv_usage_row_find(&u.gpus, "", "", "", "GPU-a");
    assert_non_null(a);
    assert_false(a->have_util);
    assert_false(a->have_fb);
    assert_int_equal(a->index, 0);
    assert_string_equal(a->model, "H100"); /* modelName wins over device_type */
    assert_string_equal(a->node, "n1");
    struct gv_usage_row *b = gv_usage_row_find(&u.gpus, "", "", "", "GPU-b");
    assert_non_null(b);
    assert_true(b->have_fb);
    assert_true(b->fb_used == 1.0);
    assert_false(b->have_util);
    assert_int_equal(b->index, 9);
    assert_string_equal(b->model, "A100");
    gv_usage_free(&u);
}

/* An agent's metrics port: a number as given, else the port of that name. */
static void agent_port(void **state)
{
    (void)state;
    json_t *pod = json_loads("{\"spec\":{\"containers\":[{\"ports\":["
                             "{\"name\":\"grpc\",\"containerPort\":1},"
                             "{\"name\":\"metrics\",\"containerPort\":9400}]}]}}",
                             0, NULL);
    assert_non_null(pod);
    assert_int_equal(gv_usage_agent_port(pod, "9401"), 9401);
    assert_int_equal(gv_usage_agent_port(pod, "0"), 0);
    assert_int_equal(gv_usage_agent_port(pod, NULL), 9400);
    assert_int_equal(gv_usage_agent_port(pod, "grpc"), 1);
    assert_int_equal(gv_usage_agent_port(pod, "web"), -1);
    json_decref(pod);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(well_formed_lines),
        cmocka_unit_test(malformed_lines),
        cmocka_unit_test(a_body),
        cmocka_unit_test(every_prefix_of_a_body),
        cmocka_unit_test(usage_from_an_agent),
        cmocka_unit_test(agent_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
