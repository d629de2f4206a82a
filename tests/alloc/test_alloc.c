/* Tests for src/alloc: quantities, requests, filter, place/release, codec. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/gv_alloc.h"
#include "tests/alloc/alloc_testlib.h"

/* --- helpers ------------------------------------------------------------- */

struct pod_builder {
    struct gv_alloc_kv limits[8][8];
    size_t n_limits[8];
    struct gv_alloc_container_in cont[8];
    struct gv_alloc_kv ann[16];
    struct gv_alloc_pod_in in;
};

static void pb_init(struct pod_builder *b, const char *uid)
{
    memset(b, 0, sizeof(*b));
    b->in.uid = uid;
    b->in.ns = "default";
    b->in.name = uid;
    b->in.containers = b->cont;
    b->in.annotations = b->ann;
}

static size_t pb_container(struct pod_builder *b, const char *name)
{
    size_t i = b->in.n_containers++;
    b->cont[i].name = name;
    b->cont[i].limits = b->limits[i];
    return i;
}

static void pb_limit(struct pod_builder *b, size_t c, const char *k, const char *v)
{
    b->limits[c][b->n_limits[c]++] = (struct gv_alloc_kv){k, v};
    b->cont[c].n_limits = b->n_limits[c];
}

static void pb_ann(struct pod_builder *b, const char *k, const char *v)
{
    b->ann[b->in.n_annotations++] = (struct gv_alloc_kv){k, v};
}

static struct gv_alloc_request *parse_ok(struct pod_builder *b)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_alloc_request *r = NULL;
    struct gv_error err = {0};
    gv_status rc = gv_alloc_request_parse(&cfg, &b->in, &r, &err);
    if (rc != GV_OK)
        fail_msg("parse failed: %s", err.msg);
    return r;
}

static gv_status parse_err(struct pod_builder *b, struct gv_error *err)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_alloc_request *r = NULL;
    gv_status rc = gv_alloc_request_parse(&cfg, &b->in, &r, err);
    assert_null(r);
    return rc;
}

static void parse_fails(struct pod_builder *b, const char *want)
{
    struct gv_error err = {0};
    assert_int_not_equal(parse_err(b, &err), GV_OK);
    if (strstr(err.msg, want) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.msg, want);
}

/* One-container request: n GPUs, mem MiB (0 = none), milli each. */
/* Adds node <name> with n GPUs of model, mem MiB each, uuids <name>-g<i>. */
static void add_node(struct gv_alloc_cluster *c, const char *name, uint32_t n, const char *model,
                     uint64_t mem, int64_t cpu)
{
    struct gv_alloc_gpu_spec g[16];
    char uuids[16][64];
    for (uint32_t i = 0; i < n; i++) {
        snprintf(uuids[i], sizeof(uuids[i]), "%s-g%u", name, i);
        g[i] = (struct gv_alloc_gpu_spec){uuids[i], i, model, mem, 0, (int32_t)(i / 4), true,
                                          GV_ALLOC_GPU_SHARED};
    }
    struct gv_alloc_node_spec s = {name, cpu, 0, NULL, 0, g, n};
    struct gv_error err = {0};
    if (gv_alloc_node_upsert(c, &s, &err) != GV_OK)
        fail_msg("upsert: %s", err.msg);
}

static struct gv_alloc_cluster *new_cluster(gv_alloc_policy p)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    cfg.node_policy = p;
    cfg.workload_half_life = 0; /* exact weights; decay has its own test */
    struct gv_alloc_cluster *c;
    assert_int_equal(gv_alloc_cluster_new(&cfg, &c, NULL), GV_OK);
    return c;
}

static void pick_place(struct gv_alloc_cluster *c, struct gv_alloc_request *r,
                       struct gv_alloc_assignment *a)
{
    struct gv_error err = {0};
    if (gv_alloc_pick(c, r, NULL, 0, a, &err) != GV_OK)
        fail_msg("pick: %s", err.msg);
    if (gv_alloc_place(c, r, a, &err) != GV_OK)
        fail_msg("place: %s", err.msg);
}

/* --- quantities ---------------------------------------------------------- */

static void test_quantity_canonical_forms(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(gv_quantity_value("100k", &v, NULL), GV_OK);
    assert_int_equal(v, 100000);
    assert_int_equal(gv_quantity_value("4Gi", &v, NULL), GV_OK);
    assert_int_equal(v, INT64_C(4) << 30);
    assert_int_equal(gv_quantity_milli("1500m", &v, NULL), GV_OK);
    assert_int_equal(v, 1500);
    assert_int_equal(gv_quantity_value("1500m", &v, NULL), GV_OK);
    assert_int_equal(v, 2); /* rounds up like Quantity.Value() */
    assert_int_equal(gv_quantity_value("2e3", &v, NULL), GV_OK);
    assert_int_equal(v, 2000);
    assert_int_equal(gv_quantity_value("2E3", &v, NULL), GV_OK);
    assert_int_equal(v, 2000);
    assert_int_equal(gv_quantity_value("1E", &v, NULL), GV_OK);
    assert_int_equal(v, INT64_C(1000000000000000000));
    assert_int_equal(gv_quantity_value("1Ei", &v, NULL), GV_OK);
    assert_int_equal(v, INT64_C(1) << 60);
    assert_int_equal(gv_quantity_milli("0.5", &v, NULL), GV_OK);
    assert_int_equal(v, 500);
    assert_int_equal(gv_quantity_milli(".5", &v, NULL), GV_OK);
    assert_int_equal(v, 500);
    assert_int_equal(gv_quantity_milli("+2.", &v, NULL), GV_OK);
    assert_int_equal(v, 2000);
    assert_int_equal(gv_quantity_value("0", &v, NULL), GV_OK);
    assert_int_equal(v, 0);
    assert_int_equal(gv_quantity_parse("0.1Gi", 1, 1 << 20, &v, NULL, NULL), GV_OK);
    assert_int_equal(v, 103); /* 102.4 MiB rounds up */
    assert_int_equal(gv_quantity_parse("1536Mi", 1, 1 << 20, &v, NULL, NULL), GV_OK);
    assert_int_equal(v, 1536);
    assert_int_equal(gv_quantity_milli("100n", &v, NULL), GV_OK);
    assert_int_equal(v, 1); /* 1e-4 milli rounds up to 1 */
    assert_int_equal(gv_quantity_value("1e-3", &v, NULL), GV_OK);
    assert_int_equal(v, 1);
    assert_int_equal(gv_quantity_value("12345678901234567890123e-5", &v, NULL), GV_OK);
    assert_int_equal(v, INT64_C(123456789012345679)); /* 123456789012345678.9 -> up */
    bool exact = true;
    assert_int_equal(gv_quantity_parse("3", 1, 1, &v, &exact, NULL), GV_OK);
    assert_true(exact);
    assert_int_equal(gv_quantity_parse("3500m", 1, 1, &v, &exact, NULL), GV_OK);
    assert_false(exact);
    assert_int_equal(v, 4);
}

static void test_quantity_rejects_bad_input(void **state)
{
    (void)state;
    int64_t v = 77;
    struct gv_error err = {0};
    const char *bad[] = {"", "-1", "-0.5", "abc", "1.2.3", ".", "1Ki ", " 1", "1x", "1Zi",
                         "1e", "1e+", "1ee3", "1KiB", "1mi", "e3", "1i"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gv_status rc = gv_quantity_value(bad[i], &v, &err);
        if (rc == GV_OK)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_non_null(strstr(err.msg, "quantity"));
    }
    assert_int_equal(gv_quantity_value("-1", &v, &err), GV_ERANGE);
    assert_non_null(strstr(err.msg, "negative"));
    assert_int_equal(gv_quantity_value("10E", &v, &err), GV_ERANGE);
    assert_int_equal(gv_quantity_value("9223372036854775808", &v, &err), GV_ERANGE);
    assert_int_equal(gv_quantity_value("9223372036854775807", &v, &err), GV_OK);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(gv_quantity_value("1e99999999", &v, &err), GV_ERANGE);
    assert_int_equal(gv_quantity_milli("8Ei", &v, &err), GV_ERANGE);
    assert_int_equal(gv_quantity_integer("1500m", &v, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "whole number"));
}

/*
 * The scanner's corners (a sweep of quantity.c left these unheld): what
 * follows a suffix or an exponent, digits past the 19 a mantissa keeps,
 * values that wrap 128 bits before the range check, and arguments.
 */
static void test_quantity_scan_corners(void **state)
{
    (void)state;
    int64_t v = 77;
    struct gv_error err = {0};
    /* an exponent of 0 is a digit like any other */
    assert_int_equal(gv_quantity_value("2e0", &v, &err), GV_OK);
    assert_int_equal(v, 2);
    assert_int_equal(gv_quantity_value("3e-0", &v, &err), GV_OK);
    assert_int_equal(v, 3);
    /* nothing may follow a suffix or an exponent */
    const char *junk[] = {"1e3x", "1e3 ", "5Gb", "1mx", "2kk", "1Ei0", "1Zi", "1zi"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        v = 77;
        if (gv_quantity_value(junk[i], &v, &err) != GV_EPARSE)
            fail_msg("\"%s\" not refused as malformed", junk[i]);
        assert_int_equal(v, 77);
    }
    /* 20 significant digits: the 20th must not wrap the mantissa */
    assert_int_equal(gv_quantity_value("99999999999999999999", &v, &err), GV_ERANGE);
    assert_int_equal(gv_quantity_value("18446744073709551617", &v, &err), GV_ERANGE);
    /* a nonzero digit past the 19th makes the value inexact: rounded up */
    assert_int_equal(gv_quantity_integer("1.0000000000000000001", &v, &err), GV_EINVAL);
    assert_int_equal(gv_quantity_value("1.0000000000000000001", &v, &err), GV_OK);
    assert_int_equal(v, 2);
    assert_int_equal(gv_quantity_integer("1.0000000000000000000", &v, &err), GV_OK);
    assert_int_equal(v, 1);
    /* exactly one unit written with a fraction digit is exact */
    assert_int_equal(gv_quantity_integer("1.0", &v, &err), GV_OK);
    assert_int_equal(v, 1);
    assert_int_equal(gv_quantity_integer("1000m", &v, &err), GV_OK);
    assert_int_equal(v, 1);
    /* mant * mul * 2^60 is 0 modulo 2^128: refused, not read as 0 */
    v = 77;
    assert_int_equal(gv_quantity_parse("281474976710656Ei", 1 << 20, 1, &v, NULL, &err), GV_ERANGE);
    assert_int_equal(v, 77);
    assert_int_equal(gv_quantity_milli("9999999999999999999Ei", &v, &err), GV_ERANGE);
    /* the scale must be positive */
    assert_int_equal(gv_quantity_parse("1", 0, 1, &v, NULL, &err), GV_EINVAL);
    assert_int_equal(gv_quantity_parse("1", -1000, 1, &v, NULL, &err), GV_EINVAL);
    assert_int_equal(gv_quantity_parse("1", 1, 0, &v, NULL, &err), GV_EINVAL);
    assert_int_equal(gv_quantity_parse("1", 1, -1, &v, NULL, &err), GV_EINVAL);
    assert_int_equal(gv_quantity_parse(NULL, 1, 1, &v, NULL, &err), GV_EINVAL);
    assert_int_equal(v, 77);
}

/* --- requests ------------------------------------------------------------ */

static void test_request_hami_resources(void **state)
{
    (void)state;
    struct pod_builder b;
    pb_init(&b, "u1");
    size_t c = pb_container(&b, "train");
    pb_limit(&b, c, "nvidia.com/gpu", "2");
    pb_limit(&b, c, "nvidia.com/gpumem", "20000");
    pb_limit(&b, c, "nvidia.com/gpucores", "30");
    pb_limit(&b, c, "nvidia.com/priority", "1");
    pb_limit(&b, c, "cpu", "1500m");
    pb_limit(&b, c, "memory", "2Gi");
    size_t d = pb_container(&b, "sidecar");
    pb_limit(&b, d, "cpu", "500m");
    size_t e = pb_container(&b, "infer");
    pb_limit(&b, e, "nvidia.com/gpumem-percentage", "50");
    struct gv_alloc_request *r = parse_ok(&b);
    assert_string_equal(r->uid, "u1");
    assert_int_equal(r->n_containers, 2); /* sidecar asks for no GPU */
    assert_string_equal(r->containers[0].name, "train");
    assert_int_equal(r->containers[0].num_gpu, 2);
    assert_int_equal(r->containers[0].mem_kind, GV_ALLOC_MEM_MIB);
    assert_int_equal(r->containers[0].mem, 20000);
    assert_int_equal(r->containers[0].milli, 300);
    assert_int_equal(r->containers[0].priority, 1);
    assert_string_equal(r->containers[1].name, "infer");
    assert_int_equal(r->containers[1].num_gpu, 1); /* default count */
    assert_int_equal(r->containers[1].mem_kind, GV_ALLOC_MEM_PCT);
    assert_int_equal(r->containers[1].mem, 50);
    assert_int_equal(r->containers[1].priority, -1);
    assert_int_equal(r->cpu_milli, 2000);
    assert_int_equal(r->mem_mib, 2048);
    assert_int_equal(gv_alloc_request_gpus(r), 3);
    gv_alloc_request_free(r);
}

static void test_request_defaults_and_alias(void **state)
{
    (void)state;
    struct pod_builder b;
    pb_init(&b, "u2");
    size_t c = pb_container(&b, "a");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    size_t d = pb_container(&b, "b");
    pb_limit(&b, d, "aliyun.com/gpu-mem", "4");
    size_t e = pb_container(&b, "c");
    pb_limit(&b, e, "nvidia.com/gpucores", "100");
    struct gv_alloc_request *r = parse_ok(&b);
    assert_int_equal(r->n_containers, 3);
    /* whole GPU memory when nothing asked (default_mem_mib = 0) */
    assert_int_equal(r->containers[0].mem_kind, GV_ALLOC_MEM_PCT);
    assert_int_equal(r->containers[0].mem, 100);
    assert_int_equal(r->containers[0].milli, 0);
    assert_int_equal(r->containers[1].num_gpu, 1);
    assert_int_equal(r->containers[1].mem_kind, GV_ALLOC_MEM_MIB);
    assert_int_equal(r->containers[1].mem, 4096);
    assert_int_equal(r->containers[2].milli, 1000);
    gv_alloc_request_free(r);

    /* configurable defaults */
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    cfg.default_mem_mib = 1024;
    cfg.default_cores = 20;
    cfg.default_gpu_num = 2;
    cfg.res.gpu = "example.com/vgpu";
    pb_init(&b, "u3");
    c = pb_container(&b, "x");
    pb_limit(&b, c, "nvidia.com/gpucores", "10");
    d = pb_container(&b, "y");
    pb_limit(&b, d, "example.com/vgpu", "1");
    assert_int_equal(gv_alloc_request_parse(&cfg, &b.in, &r, NULL), GV_OK);
    assert_int_equal(r->containers[0].num_gpu, 2);
    assert_int_equal(r->containers[0].mem, 1024);
    assert_int_equal(r->containers[0].milli, 100);
    assert_int_equal(r->containers[1].milli, 200);
    gv_alloc_request_free(r);
}

static void test_request_requests_used_when_no_limits(void **state)
{
    (void)state;
    struct gv_alloc_kv reqs[] = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}};
    struct gv_alloc_container_in ci = {"m", NULL, 0, reqs, 2};
    struct gv_alloc_pod_in in = {"u", "ns", "p", &ci, 1, NULL, 0};
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_alloc_request *r;
    assert_int_equal(gv_alloc_request_parse(&cfg, &in, &r, NULL), GV_OK);
    assert_int_equal(r->containers[0].mem, 3000);
    gv_alloc_request_free(r);
}

static void test_request_conflicts(void **state)
{
    (void)state;
    struct pod_builder b;
    struct gv_error err = {0};
    pb_init(&b, "c1");
    size_t c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpumem", "1000");
    pb_limit(&b, c, "nvidia.com/gpumem-percentage", "10");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "mutually exclusive"));
    assert_non_null(strstr(err.msg, "main"));

    pb_init(&b, "c2");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpucores", "150");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "nvidia.com/gpucores"));
    assert_non_null(strstr(err.msg, "0..100"));

    pb_init(&b, "c3");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "1500m");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "whole number"));

    pb_init(&b, "c4");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpumem-percentage", "0");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);

    pb_init(&b, "c5");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "0");
    pb_limit(&b, c, "nvidia.com/gpumem", "10");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "is 0"));

    pb_init(&b, "c6");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    pb_ann(&b, "hami.io/node-scheduler-policy", "fgd"); /* HAMi key: binpack|spread only */
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "hami.io/node-scheduler-policy"));

    pb_init(&b, "c7");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    pb_ann(&b, "nvidia.com/numa-bind", "maybe");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);

    pb_init(&b, "c8");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "-1");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "negative"));

    pb_init(&b, "c9");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "17");
    assert_int_equal(parse_err(&b, &err), GV_EINVAL);
}

static void test_request_annotations(void **state)
{
    (void)state;
    struct pod_builder b;
    pb_init(&b, "a1");
    size_t c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    pb_ann(&b, "nvidia.com/use-gputype", " A100 , H100,");
    pb_ann(&b, "nvidia.com/nouse-gputype", "mig");
    pb_ann(&b, "gpuvisor.io/use-gputype", "H200"); /* ours wins */
    pb_ann(&b, "nvidia.com/use-gpuuuid", "GPU-AAA,GPU-BBB");
    pb_ann(&b, "nvidia.com/nouse-gpuuuid", "GPU-CCC");
    pb_ann(&b, "nvidia.com/numa-bind", "true");
    pb_ann(&b, "hami.io/node-scheduler-policy", "spread");
    pb_ann(&b, "hami.io/gpu-scheduler-policy", "spread");
    pb_ann(&b, "gpuvisor.io/gpu-policy", "binpack");
    struct gv_alloc_request *r = parse_ok(&b);
    assert_string_equal(r->constraint[GV_ALLOC_USE_TYPE], "h200");
    assert_string_equal(r->constraint[GV_ALLOC_NOUSE_TYPE], "mig");
    assert_string_equal(r->constraint[GV_ALLOC_USE_UUID], "gpu-aaa,gpu-bbb");
    assert_string_equal(r->constraint[GV_ALLOC_NOUSE_UUID], "gpu-ccc");
    assert_true(r->numa_bind);
    assert_int_equal(r->node_policy, GV_ALLOC_POLICY_SPREAD);
    assert_int_equal(r->gpu_policy, GV_ALLOC_GPU_BINPACK);
    gv_alloc_request_free(r);

    pb_init(&b, "a2");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    pb_ann(&b, "nvidia.com/use-gputype", "a100, h100");
    pb_ann(&b, "gpuvisor.io/node-policy", "FGD");
    pb_ann(&b, "hami.io/gpu-scheduler-policy", "topology-aware");
    r = parse_ok(&b);
    assert_string_equal(r->constraint[GV_ALLOC_USE_TYPE], "a100,h100");
    assert_int_equal(r->node_policy, GV_ALLOC_POLICY_FGD);
    /* HAMi: topology-aware is a filter; with no sort key GPUs go by spread */
    assert_int_equal(r->gpu_policy, GV_ALLOC_GPU_SPREAD);
    assert_true(r->gpu_topology);
    assert_false(r->gpu_mutex);
    assert_int_equal(r->gpu_numa, 0);
    assert_false(r->numa_bind);
    gv_alloc_request_free(r);
}

/* HAMi's comma chains: sort keys in order, filters anywhere. */
static void test_request_hami_policy_chains(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int policy;
        uint8_t numa;
        bool mutex, topo;
    } cases[] = {
        {"binpack", GV_ALLOC_GPU_BINPACK, 0, false, false},
        {"spread", GV_ALLOC_GPU_SPREAD, 0, false, false},
        {"numa", GV_ALLOC_GPU_SPREAD, 1, false, false},
        {"mutex", GV_ALLOC_GPU_SPREAD, 0, true, false},
        {"binpack,numa", GV_ALLOC_GPU_BINPACK, 2, false, false},
        {" numa , binpack ", GV_ALLOC_GPU_BINPACK, 1, false, false},
        {"mutex,topology-aware", GV_ALLOC_GPU_SPREAD, 0, true, true},
        {"spread,binpack,mutex", GV_ALLOC_GPU_SPREAD, 0, true, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pod_builder b;
        pb_init(&b, "chain");
        size_t c = pb_container(&b, "main");
        pb_limit(&b, c, "nvidia.com/gpu", "1");
        pb_ann(&b, "hami.io/gpu-scheduler-policy", cases[i].text);
        struct gv_alloc_request *r = parse_ok(&b);
        if (r->gpu_policy != cases[i].policy || r->gpu_numa != cases[i].numa ||
            r->gpu_mutex != cases[i].mutex || r->gpu_topology != cases[i].topo)
            fail_msg("'%s': policy %d numa %u mutex %d topo %d", cases[i].text, r->gpu_policy,
                     r->gpu_numa, r->gpu_mutex, r->gpu_topology);
        gv_alloc_request_free(r);
    }
    static const char *const bad[] = {"binpak", "binpack,,numa", ",spread", "numa;mutex"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct pod_builder b;
        pb_init(&b, "chain");
        size_t c = pb_container(&b, "main");
        pb_limit(&b, c, "nvidia.com/gpu", "1");
        pb_ann(&b, "hami.io/gpu-scheduler-policy", bad[i]);
        parse_fails(&b, "binpack, spread, numa, mutex, topology-aware");
    }
    /* nvidia.com/vgpu-mode: hami-core is what gpuvisor does, the rest is refused */
    struct pod_builder b;
    pb_init(&b, "mode");
    size_t c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    pb_ann(&b, "nvidia.com/vgpu-mode", "hami-core");
    gv_alloc_request_free(parse_ok(&b));
    pb_init(&b, "mode");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    pb_ann(&b, "nvidia.com/vgpu-mode", "mig");
    parse_fails(&b, "remove the annotation or write \"hami-core\"");
    /* aliyun.com/gpu-count: GPUs of a gpushare container */
    pb_init(&b, "share");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "aliyun.com/gpu-mem", "8");
    pb_limit(&b, c, "aliyun.com/gpu-count", "2");
    struct gv_alloc_request *r = parse_ok(&b);
    assert_int_equal(r->containers[0].num_gpu, 2);
    assert_int_equal(r->containers[0].mem, 4096); /* 8 GiB over 2 GPUs */
    gv_alloc_request_free(r);
    pb_init(&b, "share");
    c = pb_container(&b, "main");
    pb_limit(&b, c, "aliyun.com/gpu-mem", "8");
    pb_limit(&b, c, "aliyun.com/gpu-count", "2");
    pb_limit(&b, c, "nvidia.com/gpu", "1");
    parse_fails(&b, "aliyun.com/gpu-count 2 and nvidia.com/gpu 1 disagree");
}

/* --- filter -------------------------------------------------------------- */

static void test_filter_reasons(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n1", 8, "NVIDIA A100-SXM4-40GB", 40960, 0);
    add_node(c, "cpu", 0, "", 0, 0);
    /* occupy 6 GPUs with 30000 MiB each */
    for (int i = 0; i < 6; i++) {
        char uid[16];
        snprintf(uid, sizeof(uid), "p%d", i);
        struct gv_alloc_request *r = simple_req(uid, 1, 30000, 0);
        struct gv_alloc_assignment a;
        pick_place(c, r, &a);
        gv_alloc_request_free(r);
    }
    struct gv_alloc_request *r = simple_req("big", 4, 20000, 0);
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, r, "n1", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_string_equal(fit.reason, "gpu 2/8 free but need 4 with 20000 MiB each");
    assert_int_equal(gv_alloc_filter(c, r, "cpu", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_string_equal(fit.reason, "node has no GPUs");
    assert_int_equal(gv_alloc_filter(c, r, "ghost", &fit, NULL), GV_ENOTFOUND);
    assert_false(fit.fits);
    assert_non_null(strstr(fit.reason, "ghost"));
    r->containers[0].num_gpu = 2;
    r->containers[0].milli = 455;
    assert_int_equal(gv_alloc_filter(c, r, "n1", &fit, NULL), GV_OK);
    assert_true(fit.fits);
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, "h100", NULL), GV_OK);
    assert_int_equal(gv_alloc_filter(c, r, "n1", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_non_null(strstr(fit.reason, "type/uuid"));
    assert_non_null(strstr(fit.reason, "NVIDIA A100-SXM4-40GB"));
    /* case-insensitive substring match on the model */
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, "a100-sxm4", NULL),
                     GV_OK);
    assert_int_equal(gv_alloc_filter(c, r, "n1", &fit, NULL), GV_OK);
    assert_true(fit.fits);
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_NOUSE_TYPE, "40GB", NULL), GV_OK);
    assert_int_equal(gv_alloc_filter(c, r, "n1", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    gv_alloc_request_free(r);

    /* pick's summary names a node and its reason */
    r = simple_req("huge", 9, 0, 0);
    struct gv_alloc_assignment a;
    struct gv_error err = {0};
    assert_int_equal(gv_alloc_pick(c, r, NULL, 0, &a, &err), GV_ENOFIT);
    assert_non_null(strstr(err.msg, "0/2 nodes fit"));
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

static void test_filter_host_resources_and_numa(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n1", 8, "T4", 16384, 8000); /* numa = gpu index / 4 */
    struct gv_alloc_request *r = simple_req("p", 1, 0, 100);
    r->cpu_milli = 9000;
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, r, "n1", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_string_equal(fit.reason, "insufficient cpu: 8000m free, need 9000m");
    r->cpu_milli = 1000;
    /* take GPUs 0,1,4,5 so each NUMA node has 2 free GPUs */
    struct gv_alloc_assignment a = {0};
    snprintf(a.node, sizeof(a.node), "n1");
    a.n_containers = 1;
    snprintf(a.containers[0].name, sizeof(a.containers[0].name), "main");
    a.containers[0].n_devices = 4;
    const char *taken[] = {"n1-g0", "n1-g1", "n1-g4", "n1-g5"};
    for (int i = 0; i < 4; i++) {
        snprintf(a.containers[0].devices[i].uuid, GV_ALLOC_UUID_MAX, "%s", taken[i]);
        a.containers[0].devices[i].milli = 1000;
    }
    struct gv_alloc_request *w = simple_req("whole4", 4, 0, 1000);
    assert_int_equal(gv_alloc_place(c, w, &a, NULL), GV_OK);
    struct gv_alloc_request *n3 = simple_req("n3", 3, 0, 1000);
    n3->numa_bind = true;
    assert_int_equal(gv_alloc_filter(c, n3, "n1", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_non_null(strstr(fit.reason, "one NUMA node"));
    n3->containers[0].num_gpu = 2;
    assert_int_equal(gv_alloc_pick(c, n3, NULL, 0, &a, NULL), GV_OK);
    assert_int_equal(a.containers[0].n_devices, 2);
    /* both on NUMA 0 (g2,g3) or both on NUMA 1 (g6,g7) */
    const char *u0 = a.containers[0].devices[0].uuid, *u1 = a.containers[0].devices[1].uuid;
    bool numa0 = (strcmp(u0, "n1-g2") == 0 || strcmp(u0, "n1-g3") == 0) &&
                 (strcmp(u1, "n1-g2") == 0 || strcmp(u1, "n1-g3") == 0);
    bool numa1 = (strcmp(u0, "n1-g6") == 0 || strcmp(u0, "n1-g7") == 0) &&
                 (strcmp(u1, "n1-g6") == 0 || strcmp(u1, "n1-g7") == 0);
    assert_true(numa0 || numa1);
    gv_alloc_request_free(n3);
    gv_alloc_request_free(w);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

static void test_multi_container_distinct_gpus(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n1", 3, "A10", 24576, 0);
    struct gv_alloc_request *r = simple_req("mc", 2, 1000, 100);
    r->n_containers = 2;
    r->containers[1] = r->containers[0];
    snprintf(r->containers[1].name, sizeof(r->containers[1].name), "second");
    r->containers[1].num_gpu = 3;
    struct gv_alloc_assignment a;
    pick_place(c, r, &a);
    for (uint32_t ci = 0; ci < 2; ci++)
        for (uint32_t i = 0; i < a.containers[ci].n_devices; i++)
            for (uint32_t j = 0; j < i; j++)
                assert_string_not_equal(a.containers[ci].devices[i].uuid,
                                        a.containers[ci].devices[j].uuid);
    assert_int_equal(a.containers[1].n_devices, 3);
    /* GPUs shared by both containers carry both slices */
    struct gv_alloc_gpu_usage u;
    assert_int_equal(gv_alloc_gpu_usage_get(c, "n1", a.containers[0].devices[0].uuid, &u, NULL),
                     GV_OK);
    assert_int_equal(u.tasks, 2);
    assert_int_equal(u.mem_mib, 2000);
    /* a container asking for more GPUs than the node has does not fit */
    struct gv_alloc_request *r2 = simple_req("mc2", 4, 1, 0);
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, r2, "n1", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    gv_alloc_request_free(r2);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* --- place / release / node updates -------------------------------------- */

static void test_place_release_restores_usage(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n1", 2, "T4", 16384, 0);
    struct gv_alloc_totals t0, t1;
    gv_alloc_cluster_totals(c, &t0);
    struct gv_alloc_request *r1 = simple_req("p1", 1, 4000, 250);
    struct gv_alloc_request *r2 = simple_req("p2", 2, 1000, 1000);
    struct gv_alloc_request *r3 = simple_req("p3", 1, 100, 100);
    struct gv_alloc_assignment a1, a2, a3;
    pick_place(c, r1, &a1);
    pick_place(c, r3, &a3);
    /* binpack on GPUs: p3 joins p1's GPU */
    assert_string_equal(a1.containers[0].devices[0].uuid, a3.containers[0].devices[0].uuid);
    struct gv_error err = {0};
    assert_int_equal(gv_alloc_pick(c, r2, NULL, 0, &a2, &err), GV_ENOFIT);
    assert_int_equal(gv_alloc_place(c, r1, &a1, &err), GV_EEXIST);
    gv_alloc_cluster_totals(c, &t1);
    assert_int_equal(t1.milli_used, 350);
    assert_int_equal(t1.mem_used_mib, 4100);
    assert_int_equal(t1.pods, 2);
    assert_true(gv_alloc_is_placed(c, "p1"));
    assert_int_equal(gv_alloc_release(c, "p1", NULL), GV_OK);
    assert_int_equal(gv_alloc_release(c, "p1", &err), GV_ENOTFOUND);
    assert_int_equal(gv_alloc_release(c, "p3", NULL), GV_OK);
    gv_alloc_cluster_totals(c, &t1);
    assert_memory_equal(&t0, &t1, sizeof(t0));
    pick_place(c, r2, &a2); /* both GPUs whole now */
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, r3, "n1", &fit, NULL), GV_OK);
    assert_false(fit.fits); /* whole-GPU tasks are exclusive */
    gv_alloc_request_free(r1);
    gv_alloc_request_free(r2);
    gv_alloc_request_free(r3);
    gv_alloc_cluster_free(c);
}

static void test_node_update_and_remove(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n1", 2, "T4", 16384, 0);
    struct gv_alloc_request *r = simple_req("p1", 1, 4000, 250);
    struct gv_alloc_assignment a;
    pick_place(c, r, &a);
    const char *uuid = a.containers[0].devices[0].uuid;
    /* re-announce the node with one more GPU: usage stays on the same uuid */
    add_node(c, "n1", 3, "T4", 16384, 0);
    struct gv_alloc_gpu_usage u;
    assert_int_equal(gv_alloc_gpu_usage_get(c, "n1", uuid, &u, NULL), GV_OK);
    assert_int_equal(u.mem_mib, 4000);
    assert_int_equal(u.milli, 250);
    struct gv_alloc_totals t;
    gv_alloc_cluster_totals(c, &t);
    assert_int_equal(t.gpus, 3);
    assert_int_equal(t.milli_used, 250);
    /* a bad spec changes nothing */
    struct gv_alloc_gpu_spec dup[2] = {{"x", 0, "T4", 1, 0, -1, true, GV_ALLOC_GPU_SHARED},
                                       {"x", 1, "T4", 1, 0, -1, true, GV_ALLOC_GPU_SHARED}};
    struct gv_alloc_node_spec s = {"n1", 0, 0, NULL, 0, dup, 2};
    struct gv_error err = {0};
    assert_int_equal(gv_alloc_node_upsert(c, &s, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "twice"));
    gv_alloc_cluster_totals(c, &t);
    assert_int_equal(t.gpus, 3);
    assert_int_equal(gv_alloc_node_remove(c, "n1", NULL), GV_OK);
    assert_false(gv_alloc_is_placed(c, "p1"));
    assert_false(gv_alloc_node_exists(c, "n1"));
    assert_int_equal(gv_alloc_node_remove(c, "n1", &err), GV_ENOTFOUND);
    gv_alloc_cluster_totals(c, &t);
    assert_int_equal(t.nodes, 0);
    assert_int_equal(t.pods, 0);
    /* the uid can be placed again on a new node */
    add_node(c, "n2", 1, "T4", 16384, 0);
    pick_place(c, r, &a);
    assert_string_equal(a.node, "n2");
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

static void test_place_validates_assignment(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n1", 2, "T4", 16384, 0);
    struct gv_alloc_request *r = simple_req("p1", 2, 4000, 250);
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_pick(c, r, NULL, 0, &a, NULL), GV_OK);
    struct gv_alloc_assignment bad = a;
    snprintf(bad.containers[0].devices[1].uuid, GV_ALLOC_UUID_MAX, "%s",
             a.containers[0].devices[0].uuid);
    struct gv_error err = {0};
    assert_int_equal(gv_alloc_place(c, r, &bad, &err), GV_EINVAL);
    bad = a;
    bad.containers[0].devices[1].mem_mib = 20000;
    assert_int_equal(gv_alloc_place(c, r, &bad, &err), GV_ENOFIT);
    /* failed places left nothing behind */
    struct gv_alloc_totals t;
    gv_alloc_cluster_totals(c, &t);
    assert_int_equal(t.milli_used, 0);
    assert_int_equal(t.mem_used_mib, 0);
    assert_int_equal(gv_alloc_place(c, r, &a, &err), GV_OK);
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* gv_alloc_place is the last check before usage is committed (a recovered or replayed
 * placement, a bind): it holds the node's CPU and memory and the GPUs' rules on its own,
 * whatever assignment it is handed. */
static void test_place_refuses_what_the_node_cannot_hold(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    struct gv_alloc_gpu_spec g[2] = {{"n1-g0", 0, "T4", 16384, 0, 0, true, GV_ALLOC_GPU_SHARED},
                                     {"n1-g1", 1, "T4", 16384, 0, 0, true, GV_ALLOC_GPU_SHARED}};
    struct gv_alloc_node_spec s = {"n1", 4000, 8192, NULL, 0, g, 2};
    assert_int_equal(gv_alloc_node_upsert(c, &s, NULL), GV_OK);
    struct gv_alloc_request *r1 = simple_req("p1", 1, 1000, 100);
    r1->cpu_milli = 3000;
    r1->mem_mib = 6000;
    struct gv_alloc_assignment a;
    pick_place(c, r1, &a);
    /* a second pod on the other GPU: the GPU has room, the node's CPU does not */
    struct gv_alloc_request *r2 = simple_req("p2", 1, 1000, 100);
    r2->cpu_milli = 2000;
    r2->mem_mib = 1000;
    struct gv_alloc_assignment a2 = a;
    snprintf(a2.containers[0].devices[0].uuid, GV_ALLOC_UUID_MAX, "%s",
             strcmp(a.containers[0].devices[0].uuid, "n1-g0") == 0 ? "n1-g1" : "n1-g0");
    struct gv_error err = {0};
    assert_int_equal(gv_alloc_place(c, r2, &a2, &err), GV_ENOFIT);
    assert_non_null(strstr(err.msg, "insufficient cpu"));
    r2->cpu_milli = 1000;
    r2->mem_mib = 3000; /* 6000 + 3000 > 8192 */
    assert_int_equal(gv_alloc_place(c, r2, &a2, &err), GV_ENOFIT);
    assert_non_null(strstr(err.msg, "insufficient memory"));
    struct gv_alloc_gpu_usage u;
    assert_int_equal(gv_alloc_gpu_usage_get(c, "n1", a2.containers[0].devices[0].uuid, &u, NULL),
                     GV_OK);
    assert_int_equal(u.tasks, 0); /* refused places left nothing */
    r2->mem_mib = 2192;           /* exactly the rest */
    assert_int_equal(gv_alloc_place(c, r2, &a2, &err), GV_OK);
    /* a pod without a uid could never be released */
    struct gv_alloc_request *r0 = simple_req("", 1, 1, 1);
    assert_int_equal(gv_alloc_place(c, r0, &a2, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "no uid"));
    gv_alloc_request_free(r0);
    gv_alloc_request_free(r1);
    gv_alloc_request_free(r2);
    gv_alloc_cluster_free(c);

    /* a task of exactly one whole GPU holds it whole: not even a slice asking no compute
     * shares it (the milli sum alone would let one in) */
    c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "w", 1, "A100", 40960, 0);
    struct gv_alloc_request *whole = simple_req("whole", 1, 1000, GV_ALLOC_MILLI);
    pick_place(c, whole, &a);
    struct gv_alloc_request *slice = simple_req("slice", 1, 100, 0);
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, slice, "w", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_int_equal(gv_alloc_place(c, slice, &a, &err), GV_ENOFIT);
    assert_int_equal(gv_alloc_release(c, "whole", NULL), GV_OK);
    assert_int_equal(gv_alloc_filter(c, slice, "w", &fit, NULL), GV_OK);
    assert_true(fit.fits);
    gv_alloc_request_free(whole);
    gv_alloc_request_free(slice);
    gv_alloc_cluster_free(c);
}

/* What a node spec and a config may say: a GPU record keeps its uuid and model in fixed
 * room and its mode in a byte, so each is checked before anything is stored. */
static void test_specs_and_config_bounds(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_FGD);
    struct gv_error err = {0};
    char long_uuid[GV_ALLOC_UUID_MAX + 1], most_uuid[GV_ALLOC_UUID_MAX];
    char long_model[GV_ALLOC_MODEL_MAX + 1];
    memset(long_uuid, 'u', GV_ALLOC_UUID_MAX);
    long_uuid[GV_ALLOC_UUID_MAX] = '\0';
    memset(most_uuid, 'm', GV_ALLOC_UUID_MAX - 1);
    most_uuid[GV_ALLOC_UUID_MAX - 1] = '\0';
    memset(long_model, 'A', GV_ALLOC_MODEL_MAX);
    long_model[GV_ALLOC_MODEL_MAX] = '\0';
    static const char *const why[] = {"uuid empty or too long", "uuid empty or too long",
                                      "uuid empty or too long", "model name too long",
                                      "bad mode"};
    for (int k = 0; k < 5; k++) {
        struct gv_alloc_gpu_spec g = {"GPU-ok", 0, "A100", 1000, 0, 0, true, GV_ALLOC_GPU_SHARED};
        if (k == 0)
            g.uuid = NULL;
        else if (k == 1)
            g.uuid = "";
        else if (k == 2)
            g.uuid = long_uuid;
        else if (k == 3)
            g.model = long_model;
        else
            g.mode = (gv_alloc_gpu_mode)(GV_ALLOC_GPU_MPS + 1);
        struct gv_alloc_node_spec s = {"bad", 0, 0, NULL, 0, &g, 1};
        assert_int_equal(gv_alloc_node_upsert(c, &s, &err), GV_EINVAL);
        if (strstr(err.msg, why[k]) == NULL)
            fail_msg("case %d: \"%s\" lacks \"%s\"", k, err.msg, why[k]);
        assert_false(gv_alloc_node_exists(c, "bad"));
    }
    /* the longest uuid that fits is kept whole */
    struct gv_alloc_gpu_spec g = {most_uuid, 0, "A100", 1000, 0, 0, true, GV_ALLOC_GPU_MPS};
    struct gv_alloc_node_spec s = {"ok", 0, 0, NULL, 0, &g, 1};
    assert_int_equal(gv_alloc_node_upsert(c, &s, &err), GV_OK);
    struct gv_alloc_gpu_usage u;
    assert_int_equal(gv_alloc_gpu_usage_get(c, "ok", most_uuid, &u, NULL), GV_OK);
    gv_alloc_cluster_free(c);

    struct gv_alloc_config cfg;
    for (int k = 0; k < 2; k++) {
        gv_alloc_config_default(&cfg);
        if (k == 0)
            cfg.node_policy = GV_ALLOC_POLICY_COUNT;
        else
            cfg.gpu_policy = GV_ALLOC_GPU_POLICY_COUNT;
        c = NULL;
        assert_int_equal(gv_alloc_cluster_new(&cfg, &c, &err), GV_EINVAL);
        assert_null(c);
    }
    /* an MPS GPU serves a container asking one GPU, never one asking two */
    c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    struct gv_alloc_gpu_spec m[2] = {{"m0", 0, "A100", 40960, 0, 0, true, GV_ALLOC_GPU_MPS},
                                     {"m1", 1, "A100", 40960, 0, 0, true, GV_ALLOC_GPU_MPS}};
    struct gv_alloc_node_spec ms = {"mps", 0, 0, NULL, 0, m, 2};
    assert_int_equal(gv_alloc_node_upsert(c, &ms, NULL), GV_OK);
    struct gv_alloc_request *one = simple_req("one", 1, 1000, 300);
    struct gv_alloc_request *two = simple_req("two", 2, 1000, 300);
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, one, "mps", &fit, NULL), GV_OK);
    assert_true(fit.fits);
    assert_int_equal(gv_alloc_filter(c, two, "mps", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_non_null(strstr(fit.reason, "MPS GPUs serve containers asking one GPU only"));
    gv_alloc_request_free(one);
    gv_alloc_request_free(two);
    gv_alloc_cluster_free(c);

    /* names the placement text could not carry back are refused when written */
    struct gv_alloc_assignment a;
    memset(&a, 0, sizeof(a));
    char buf[512];
    snprintf(a.node, sizeof(a.node), "Node-Z.1_a");
    a.n_containers = 1;
    a.containers[0].n_devices = 1;
    snprintf(a.containers[0].devices[0].uuid, GV_ALLOC_UUID_MAX, "GPU-Z/1");
    a.containers[0].devices[0].milli = 1000;
    snprintf(a.containers[0].name, GV_ALLOC_CNAME_MAX, "Zed");
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), NULL, &err), GV_OK);
    assert_string_equal(buf, "v1;node=Node-Z.1_a;Zed=GPU-Z/1:0:1000");
    a.containers[0].name[0] = '\0';
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), NULL, &err), GV_EINVAL);
    snprintf(a.containers[0].name, GV_ALLOC_CNAME_MAX, "a b");
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), NULL, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "bad container name"));
    /* a buffer one byte short of the text is refused, not cut */
    snprintf(a.containers[0].name, GV_ALLOC_CNAME_MAX, "Zed");
    size_t len = 0;
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), &len, &err), GV_OK);
    for (size_t cap = 1; cap <= len; cap++)
        assert_int_equal(gv_alloc_assignment_encode(&a, buf, cap, NULL, &err), GV_ERANGE);
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, len + 1, NULL, &err), GV_OK);
}

/* What a tenant writes into its pod is bounded before it is stored: container counts and
 * names, ids, policy words and constraint lists each have fixed room in the request, and
 * host totals must not wrap. */
static void test_request_bounds_tenant_input(void **state)
{
    (void)state;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_error err = {0};
    struct gv_alloc_request *r = NULL;
    /* GPU containers: GV_ALLOC_MAX_CONTAINERS fit, one more is refused */
    struct gv_alloc_container_in cin[GV_ALLOC_MAX_CONTAINERS + 1];
    struct gv_alloc_kv one_gpu = {"nvidia.com/gpu", "1"};
    char names[GV_ALLOC_MAX_CONTAINERS + 1][16];
    for (int i = 0; i <= GV_ALLOC_MAX_CONTAINERS; i++) {
        snprintf(names[i], sizeof(names[i]), "c%d", i);
        cin[i] = (struct gv_alloc_container_in){names[i], &one_gpu, 1, NULL, 0};
    }
    struct gv_alloc_pod_in in = {"u", "ns", "p", cin, GV_ALLOC_MAX_CONTAINERS, NULL, 0};
    assert_int_equal(gv_alloc_request_parse(&cfg, &in, &r, &err), GV_OK);
    assert_int_equal(r->n_containers, GV_ALLOC_MAX_CONTAINERS);
    gv_alloc_request_free(r);
    r = NULL;
    in.n_containers = GV_ALLOC_MAX_CONTAINERS + 1;
    assert_int_not_equal(gv_alloc_request_parse(&cfg, &in, &r, &err), GV_OK);
    assert_null(r);
    assert_non_null(strstr(err.msg, "containers ask for GPUs"));
    /* a container name with no room left for its NUL */
    char long_name[GV_ALLOC_CNAME_MAX + 1];
    memset(long_name, 'n', GV_ALLOC_CNAME_MAX);
    long_name[GV_ALLOC_CNAME_MAX] = '\0';
    cin[0].name = long_name;
    in.n_containers = 1;
    assert_int_not_equal(gv_alloc_request_parse(&cfg, &in, &r, &err), GV_OK);
    assert_non_null(strstr(err.msg, "empty or too long"));
    long_name[GV_ALLOC_CNAME_MAX - 1] = '\0'; /* the longest that fits */
    assert_int_equal(gv_alloc_request_parse(&cfg, &in, &r, &err), GV_OK);
    assert_string_equal(r->containers[0].name, long_name);
    gv_alloc_request_free(r);
    r = NULL;
    cin[0].name = names[0];
    /* a uid exactly as long as its room is refused (no room for the NUL) */
    char uid[GV_ALLOC_UID_MAX + 1];
    memset(uid, 'x', GV_ALLOC_UID_MAX);
    uid[GV_ALLOC_UID_MAX] = '\0';
    in.uid = uid;
    assert_int_not_equal(gv_alloc_request_parse(&cfg, &in, &r, &err), GV_OK);
    assert_non_null(strstr(err.msg, "too long"));
    uid[GV_ALLOC_UID_MAX - 1] = '\0';
    assert_int_equal(gv_alloc_request_parse(&cfg, &in, &r, &err), GV_OK);
    assert_string_equal(r->uid, uid);
    gv_alloc_request_free(r);
    r = NULL;
    in.uid = "u";
    /* host totals over containers that would wrap past INT64_MAX */
    static const char *const host[2] = {"cpu", "memory"};
    static const char *const huge[2] = {"4611686018427387904m", "4611686018427387904Mi"};
    for (int k = 0; k < 2; k++) {
        struct gv_alloc_kv req = {host[k], huge[k]};
        struct gv_alloc_container_in two[2] = {{"a", &one_gpu, 1, &req, 1},
                                               {"b", NULL, 0, &req, 1}};
        struct gv_alloc_pod_in hin = {"u", "ns", "p", two, 2, NULL, 0};
        assert_int_not_equal(gv_alloc_request_parse(&cfg, &hin, &r, &err), GV_OK);
        assert_null(r);
        if (strstr(err.msg, "container \"b\": ") == NULL || strstr(err.msg, "total too large") == NULL)
            fail_msg("%s: \"%s\"", host[k], err.msg);
    }
    /* policy words: one longer than the parser's token room is refused, not copied */
    struct pod_builder b;
    pb_init(&b, "pol");
    pb_limit(&b, pb_container(&b, "main"), "nvidia.com/gpu", "1");
    pb_ann(&b, "hami.io/gpu-scheduler-policy", "binpack,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    parse_fails(&b, "hami.io/gpu-scheduler-policy");
    /* the first sort key decides, whichever it is */
    pb_init(&b, "pol2");
    pb_limit(&b, pb_container(&b, "main"), "nvidia.com/gpu", "1");
    pb_ann(&b, "hami.io/gpu-scheduler-policy", "binpack,spread");
    pb_ann(&b, "gpuvisor.io/node-policy", "binpack");
    r = parse_ok(&b);
    assert_int_equal(r->gpu_policy, GV_ALLOC_GPU_BINPACK);
    assert_int_equal(r->node_policy, GV_ALLOC_POLICY_BINPACK);
    gv_alloc_request_free(r);
    /* gpushare's GiB beside HAMi's MiB is a conflict, not a choice */
    pb_init(&b, "gib");
    size_t c0 = pb_container(&b, "main");
    pb_limit(&b, c0, "aliyun.com/gpu-mem", "4");
    pb_limit(&b, c0, "nvidia.com/gpumem", "4096");
    parse_fails(&b, "cannot be combined");
    /* a constraint list past its room */
    r = simple_req("c", 1, 1, 1);
    char *list = malloc(4098);
    memset(list, 'a', 4097);
    list[4097] = '\0';
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, list, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "longer than"));
    assert_null(r->constraint[GV_ALLOC_USE_TYPE]);
    free(list);
    gv_alloc_request_free(r);
}

/* GPU modes, task limits, percentage memory, vanished GPUs. */
static void test_gpu_modes_split_and_vanishing(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    struct gv_alloc_gpu_spec g[2] = {
        {"ex", 0, "A100", 40960, 0, 0, true, GV_ALLOC_GPU_EXCLUSIVE},
        {"sh", 1, "A100-80", 81920, 2, 0, true, GV_ALLOC_GPU_SHARED}};
    struct gv_alloc_node_spec s = {"n", 0, 0, NULL, 0, g, 2};
    assert_int_equal(gv_alloc_node_upsert(c, &s, NULL), GV_OK);
    /* 25 % of memory resolves per GPU: 10240 on "ex", 20480 on "sh" */
    struct gv_alloc_request *r1 = simple_req("p1", 2, 0, 100);
    r1->containers[0].mem_kind = GV_ALLOC_MEM_PCT;
    r1->containers[0].mem = 25;
    struct gv_alloc_assignment a;
    pick_place(c, r1, &a);
    for (uint32_t i = 0; i < 2; i++) {
        const struct gv_alloc_device *d = &a.containers[0].devices[i];
        assert_int_equal(d->mem_mib, strcmp(d->uuid, "ex") == 0 ? 10240 : 20480);
    }
    struct gv_alloc_gpu_usage u;
    /* the exclusive GPU is now held whole, whatever the slice asked */
    struct gv_alloc_request *r2 = simple_req("p2", 1, 1, 1);
    assert_int_equal(gv_alloc_pick(c, r2, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.containers[0].devices[0].uuid, "sh");
    assert_int_equal(gv_alloc_place(c, r2, &a, NULL), GV_OK);
    /* "sh" has split 2: a third task does not fit anywhere */
    struct gv_alloc_request *r3 = simple_req("p3", 1, 1, 1);
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, r3, "n", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_string_equal(fit.reason, "gpu 0/2 free but need 1 with 1 MiB and 0.1% cores each");
    /* the node comes back without "sh": its usage goes, "ex" keeps p1's */
    struct gv_alloc_node_spec s2 = {"n", 0, 0, NULL, 0, g, 1};
    assert_int_equal(gv_alloc_node_upsert(c, &s2, NULL), GV_OK);
    assert_int_equal(gv_alloc_gpu_usage_get(c, "n", "ex", &u, NULL), GV_OK);
    assert_int_equal(u.tasks, 1);
    assert_int_equal(u.mem_mib, 10240);
    assert_int_equal(gv_alloc_gpu_usage_get(c, "n", "sh", &u, NULL), GV_ENOTFOUND);
    /* by position: the node's new GPU list, uuid included */
    assert_int_equal(gv_alloc_gpu_usage_at(c, "n", 0, &u, NULL), GV_OK);
    assert_string_equal(u.uuid, "ex");
    assert_int_equal(u.tasks, 1);
    assert_int_equal(gv_alloc_gpu_usage_at(c, "n", 1, &u, NULL), GV_ENOTFOUND);
    assert_int_equal(gv_alloc_gpu_usage_at(c, "nope", 0, &u, NULL), GV_ENOTFOUND);
    /* releasing pods whose GPU vanished is exact too */
    assert_int_equal(gv_alloc_release(c, "p2", NULL), GV_OK);
    assert_int_equal(gv_alloc_release(c, "p1", NULL), GV_OK);
    assert_int_equal(gv_alloc_gpu_usage_get(c, "n", "ex", &u, NULL), GV_OK);
    assert_int_equal(u.tasks, 0);
    assert_int_equal(u.mem_mib, 0);
    /* an unhealthy GPU hosts nothing */
    g[0].healthy = false;
    assert_int_equal(gv_alloc_node_upsert(c, &s2, NULL), GV_OK);
    assert_int_equal(gv_alloc_filter(c, r3, "n", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    gv_alloc_request_free(r1);
    gv_alloc_request_free(r2);
    gv_alloc_request_free(r3);
    gv_alloc_cluster_free(c);
}

static void test_bad_specs_and_lists(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_FGD);
    struct gv_error err = {0};
    struct gv_alloc_node_spec s = {"", 0, 0, NULL, 0, NULL, 0};
    assert_int_equal(gv_alloc_node_upsert(c, &s, &err), GV_EINVAL);
    struct gv_alloc_gpu_spec many[GV_ALLOC_MAX_NODE_GPUS + 1];
    memset(many, 0, sizeof(many));
    struct gv_alloc_node_spec s2 = {"n", 0, 0, NULL, 0, many, GV_ALLOC_MAX_NODE_GPUS + 1};
    assert_int_equal(gv_alloc_node_upsert(c, &s2, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "at most 64"));
    struct gv_alloc_node_spec s3 = {"n", -1, 0, NULL, 0, NULL, 0};
    assert_int_equal(gv_alloc_node_upsert(c, &s3, &err), GV_EINVAL);
    /* what a GPU record holds in 16 bits: refused whole, not truncated,
     * and the node is not half there; the largest values fit */
    static const struct {
        uint32_t index, split;
        int32_t numa;
        bool ok;
    } wide[] = {
        {65536, 4, 0, false}, {0, 65536, 0, false}, {0, 4, 32768, false}, {0, 4, -32769, false},
        {65535, 4, 0, true},  {0, 65535, 0, true},  {0, 4, 32767, true},  {0, 4, -32768, true},
    };
    for (size_t k = 0; k < sizeof(wide) / sizeof(wide[0]); k++) {
        struct gv_alloc_gpu_spec g = {"GPU-w", wide[k].index, "A100", 1000, wide[k].split,
                                      wide[k].numa, true, GV_ALLOC_GPU_SHARED};
        struct gv_alloc_node_spec w = {"wide", 0, 0, NULL, 0, &g, 1};
        if (!wide[k].ok) {
            assert_int_equal(gv_alloc_node_upsert(c, &w, &err), GV_EINVAL);
            assert_non_null(strstr(err.msg, "out of range"));
            assert_false(gv_alloc_node_exists(c, "wide"));
            continue;
        }
        assert_int_equal(gv_alloc_node_upsert(c, &w, &err), GV_OK);
        struct gv_alloc_gpu_info info;
        assert_int_equal(gv_alloc_gpu_info_at(c, "wide", 0, &info, &err), GV_OK);
        assert_int_equal(info.index, wide[k].index);
        assert_int_equal(info.split, wide[k].split);
        assert_int_equal(gv_alloc_node_remove(c, "wide", &err), GV_OK);
    }
    struct gv_alloc_config big;
    gv_alloc_config_default(&big);
    big.default_split = 65536;
    struct gv_alloc_cluster *c2 = NULL;
    assert_int_equal(gv_alloc_cluster_new(&big, &c2, &err), GV_EINVAL);
    assert_null(c2);
    struct gv_alloc_request *r = simple_req("x", 1, 0, 0);
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, "a\x01b", &err),
                     GV_EINVAL);
    assert_int_equal(gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, " , ,", NULL), GV_OK);
    assert_null(r->constraint[GV_ALLOC_USE_TYPE]); /* empty list = no constraint */
    assert_int_equal(gv_alloc_request_set_constraint(r, (gv_alloc_constraint)9, "a", &err),
                     GV_EINVAL);
    /* encode refuses names it could not decode */
    struct gv_alloc_assignment a = {0};
    char buf[256];
    snprintf(a.node, sizeof(a.node), "bad node");
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), NULL, &err), GV_EINVAL);
    snprintf(a.node, sizeof(a.node), "n");
    a.n_containers = 1;
    snprintf(a.containers[0].name, GV_ALLOC_CNAME_MAX, "c");
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), NULL, &err), GV_EINVAL);
    a.containers[0].n_devices = 1;
    snprintf(a.containers[0].devices[0].uuid, GV_ALLOC_UUID_MAX, "u");
    a.containers[0].devices[0].milli = 1001;
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), NULL, &err), GV_EINVAL);
    /* pick on an empty cluster says so */
    assert_int_equal(gv_alloc_pick(c, r, NULL, 0, &a, &err), GV_ENOFIT);
    assert_non_null(strstr(err.msg, "no GPU node"));
    assert_int_equal(gv_alloc_policy_parse("BestFit"), GV_ALLOC_POLICY_BESTFIT);
    assert_int_equal(gv_alloc_policy_parse("random"), -1);
    assert_string_equal(gv_alloc_policy_name(GV_ALLOC_POLICY_FGD), "fgd");
    assert_string_equal(gv_alloc_gpu_policy_name(GV_ALLOC_GPU_SPREAD), "spread");
    assert_string_equal(gv_alloc_gpu_policy_name(GV_ALLOC_GPU_POLICY_COUNT), "unknown");
    assert_string_equal(gv_alloc_policy_name(GV_ALLOC_POLICY_COUNT), "unknown");
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/* --- policies ------------------------------------------------------------ */

static void test_node_policies(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        struct gv_alloc_cluster *c = new_cluster(p == 0 ? GV_ALLOC_POLICY_BINPACK
                                                        : GV_ALLOC_POLICY_SPREAD);
        add_node(c, "a", 2, "T4", 16384, 0);
        add_node(c, "b", 2, "T4", 16384, 0);
        add_node(c, "c", 2, "T4", 16384, 0);
        /* b is half used */
        struct gv_alloc_request *r0 = simple_req("seed", 1, 0, 1000);
        const char *only_b[] = {"b"};
        struct gv_alloc_assignment a;
        assert_int_equal(gv_alloc_pick(c, r0, only_b, 1, &a, NULL), GV_OK);
        assert_int_equal(gv_alloc_place(c, r0, &a, NULL), GV_OK);
        struct gv_alloc_request *r = simple_req("x", 1, 1000, 100);
        assert_int_equal(gv_alloc_pick(c, r, NULL, 0, &a, NULL), GV_OK);
        /* binpack -> the used node; spread -> an empty one, ties by name */
        assert_string_equal(a.node, p == 0 ? "b" : "a");
        int32_t scores[4];
        const char *names[] = {"a", "b", "c", "zz"};
        assert_int_equal(gv_alloc_score_nodes(c, r, names, 4, scores, NULL), GV_OK);
        assert_int_equal(scores[3], -1);
        assert_int_equal(scores[0], scores[2]);
        assert_true(p == 0 ? scores[1] > scores[0] : scores[1] < scores[0]);
        assert_int_equal(p == 0 ? scores[1] : scores[0], 100);
        gv_alloc_request_free(r);
        gv_alloc_request_free(r0);
        gv_alloc_cluster_free(c);
    }
}

static void test_gpu_policies(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n", 3, "T4", 10000, 0);
    struct gv_alloc_request *r = simple_req("a", 1, 6000, 0);
    struct gv_alloc_assignment a;
    pick_place(c, r, &a); /* g0 */
    assert_string_equal(a.containers[0].devices[0].uuid, "n-g0");
    struct gv_alloc_request *s = simple_req("b", 1, 2000, 0);
    pick_place(c, s, &a);
    assert_string_equal(a.containers[0].devices[0].uuid, "n-g0"); /* fullest first */
    struct gv_alloc_request *t = simple_req("c", 1, 1000, 0);
    t->gpu_policy = GV_ALLOC_GPU_SPREAD;
    assert_int_equal(gv_alloc_pick(c, t, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.containers[0].devices[0].uuid, "n-g1"); /* emptiest, lowest index */
    gv_alloc_request_free(r);
    gv_alloc_request_free(s);
    gv_alloc_request_free(t);
    gv_alloc_cluster_free(c);
}

/* Golden placements for HAMi's mutex and numa keys (GPUs 0-3 on NUMA 0, 4-7 on 1). */
static void test_gpu_policy_mutex_and_numa(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n", 8, "A100", 10000, 0);
    struct gv_alloc_assignment a;
    struct gv_alloc_request *fill[4];
    for (int i = 0; i < 4; i++) { /* a little on each GPU of NUMA 0 */
        char uid[8];
        snprintf(uid, sizeof(uid), "f%d", i);
        fill[i] = simple_req(uid, 1, 1000, 0);
        fill[i]->gpu_policy = GV_ALLOC_GPU_SPREAD;
        char uuid[16];
        snprintf(uuid, sizeof(uuid), "n-g%d", i);
        assert_int_equal(gv_alloc_request_set_constraint(fill[i], GV_ALLOC_USE_UUID, uuid, NULL),
                         GV_OK);
        pick_place(c, fill[i], &a);
    }
    struct {
        int policy;
        uint8_t numa;
        bool mutex;
        const char *want0, *want1;
    } cases[] = {
        {GV_ALLOC_GPU_BINPACK, 0, false, "n-g0", "n-g1"}, /* fullest first */
        {GV_ALLOC_GPU_BINPACK, 0, true, "n-g4", "n-g5"},  /* mutex: idle ones only */
        {GV_ALLOC_GPU_SPREAD, 0, false, "n-g4", "n-g5"},  /* emptiest first */
        {GV_ALLOC_GPU_SPREAD, 1, false, "n-g0", "n-g1"},  /* "numa,spread": NUMA 0 first */
        {GV_ALLOC_GPU_SPREAD, 2, false, "n-g4", "n-g5"},  /* "spread,numa": share first */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gv_alloc_request *r = simple_req("x", 2, 1000, 0);
        r->gpu_policy = cases[i].policy;
        r->gpu_numa = cases[i].numa;
        r->gpu_mutex = cases[i].mutex;
        struct gv_error err = {0};
        if (gv_alloc_pick(c, r, NULL, 0, &a, &err) != GV_OK)
            fail_msg("case %zu: %s", i, err.msg);
        if (strcmp(a.containers[0].devices[0].uuid, cases[i].want0) != 0 ||
            strcmp(a.containers[0].devices[1].uuid, cases[i].want1) != 0)
            fail_msg("case %zu: got %s,%s want %s,%s", i, a.containers[0].devices[0].uuid,
                     a.containers[0].devices[1].uuid, cases[i].want0, cases[i].want1);
        gv_alloc_request_free(r);
    }
    /* mutex with 4 idle GPUs left: a 5-GPU container does not fit, and says why */
    struct gv_alloc_request *r = simple_req("y", 5, 1000, 0);
    r->gpu_mutex = true;
    struct gv_alloc_fit fit;
    assert_int_equal(gv_alloc_filter(c, r, "n", &fit, NULL), GV_OK);
    assert_false(fit.fits);
    assert_non_null(strstr(fit.reason, "mutex: idle GPUs only"));
    r->gpu_mutex = false;
    assert_int_equal(gv_alloc_filter(c, r, "n", &fit, NULL), GV_OK);
    assert_true(fit.fits);
    gv_alloc_request_free(r);
    for (int i = 0; i < 4; i++)
        gv_alloc_request_free(fill[i]);
    gv_alloc_cluster_free(c);
}

/*
 * Golden topology choices on an 8-GPU PCIe box: NVLink bridges 0-1, 2-3,
 * 4-5, 6-7; PCIe switch A over 0-3, B over 4-7; NUMA 0 = 0-3, 1 = 4-7.
 */
static void test_topology_choice(void **state)
{
    (void)state;
    static const uint32_t nvlink[8] = {1, 1, 3, 3, 5, 5, 7, 7};
    static const uint32_t pcie[8] = {1, 1, 1, 1, 5, 5, 5, 5};
    static const struct {
        uint32_t busy;   /* GPU given a little load first */
        uint32_t k;      /* GPUs asked */
        bool topo;       /* node publishes its groups */
        const char *want; /* chosen GPU indexes, sorted */
    } cases[] = {
        /* spread alone takes g0,g2 (emptiest, by index; g1 is loaded) */
        {1, 2, false, "0,2"},
        {1, 2, true, "0,1"}, /* the NVLink pair beats the emptier PCIe peer */
        /* spread alone: g0,g1,g3,g4 crosses NUMA nodes */
        {2, 4, false, "0,1,3,4"},
        {2, 4, true, "0,1,2,3"}, /* two NVLink pairs under one switch */
        /* whole node: nothing to choose */
        {0, 8, true, "0,1,2,3,4,5,6,7"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
        add_node(c, "n", 8, "A100", 10000, 0);
        if (cases[i].topo)
            assert_int_equal(gv_alloc_node_set_links(c, "n", nvlink, pcie, 8, NULL), GV_OK);
        struct gv_alloc_assignment a;
        struct gv_alloc_request *load = simple_req("load", 1, 1000, 0);
        char uuid[16];
        snprintf(uuid, sizeof(uuid), "n-g%u", cases[i].busy);
        assert_int_equal(gv_alloc_request_set_constraint(load, GV_ALLOC_USE_UUID, uuid, NULL),
                         GV_OK);
        pick_place(c, load, &a);
        struct gv_alloc_request *r = simple_req("x", cases[i].k, 1000, 0);
        r->gpu_policy = GV_ALLOC_GPU_SPREAD;
        struct gv_error err = {0};
        if (gv_alloc_pick(c, r, NULL, 0, &a, &err) != GV_OK)
            fail_msg("case %zu: %s", i, err.msg);
        bool got[8] = {false};
        for (uint32_t d = 0; d < a.containers[0].n_devices; d++)
            got[atoi(strrchr(a.containers[0].devices[d].uuid, 'g') + 1)] = true;
        char text[32] = "";
        for (int g = 0; g < 8; g++)
            if (got[g])
                snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s%d",
                         text[0] ? "," : "", g);
        if (strcmp(text, cases[i].want) != 0)
            fail_msg("case %zu: chose %s, want %s", i, text, cases[i].want);
        gv_alloc_request_free(r);
        gv_alloc_request_free(load);
        gv_alloc_cluster_free(c);
    }
    /* bad input: unknown node, wrong count */
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BINPACK);
    add_node(c, "n", 8, "A100", 10000, 0);
    assert_int_equal(gv_alloc_node_set_links(c, "zz", nvlink, pcie, 8, NULL), GV_ENOTFOUND);
    assert_int_equal(gv_alloc_node_set_links(c, "n", nvlink, pcie, 4, NULL), GV_EINVAL);
    gv_alloc_cluster_free(c);
}

static void test_bestfit_prefers_least_left(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_BESTFIT);
    add_node(c, "big", 8, "T4", 16384, 64000);
    add_node(c, "small", 2, "T4", 16384, 16000);
    struct gv_alloc_request *r = simple_req("p", 1, 0, 500);
    r->cpu_milli = 4000;
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_pick(c, r, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "small");
    gv_alloc_request_free(r);
    gv_alloc_cluster_free(c);
}

/*
 * FGD worked example.  Workload: only 1 x 500m tasks.  Node "a": GPUs free
 * 1000 and 300 (a 700m task on g1).  Fragmentation for the class: GPUs
 * that cannot host 500m count: g1's 300 -> F = 300.  Placing a 200m task
 * on g1 leaves 100 (F = 100, delta -200); on g0 leaves 800 (still hosts
 * 500m) -> F = 300 (delta 0).  FGD must pick g1.
 */
static void test_fgd_worked_example(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_FGD);
    add_node(c, "a", 2, "T4", 0, 0);
    struct gv_alloc_request *w = simple_req("w", 1, 0, 500);
    gv_alloc_observe(c, w);
    struct gv_alloc_request *big = simple_req("big", 1, 0, 700);
    big->gpu_policy = GV_ALLOC_GPU_SPREAD;
    struct gv_alloc_assignment a;
    const char *only[] = {"a"};
    assert_int_equal(gv_alloc_pick(c, big, only, 1, &a, NULL), GV_OK);
    snprintf(a.containers[0].devices[0].uuid, GV_ALLOC_UUID_MAX, "a-g1");
    assert_int_equal(gv_alloc_place(c, big, &a, NULL), GV_OK);
    double f;
    assert_int_equal(gv_alloc_node_fragmentation(c, "a", &f, NULL), GV_OK);
    assert_true(f > 299.999 && f < 300.001);
    struct gv_alloc_request *small = simple_req("small", 1, 0, 200);
    small->gpu_policy = GV_ALLOC_GPU_SPREAD; /* spread alone would take g0 */
    assert_int_equal(gv_alloc_pick(c, small, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.containers[0].devices[0].uuid, "a-g1");
    assert_int_equal(gv_alloc_place(c, small, &a, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_fragmentation(c, "a", &f, NULL), GV_OK);
    assert_true(f > 99.999 && f < 100.001);
    /*
     * Second example, two nodes, workload 50% 1x1000m and 50% 1x500m.
     * Node "x" is empty (2 GPUs), node "y" has one GPU half used.  A 500m
     * task on y's half GPU fills it: y's F goes from 0.5*500 (whole class
     * cannot use the 500 left) to 0 -> delta -250.  On x it would turn a
     * full GPU into a half: delta +250.  FGD picks y.
     */
    struct gv_alloc_cluster *c2 = new_cluster(GV_ALLOC_POLICY_FGD);
    add_node(c2, "x", 2, "T4", 0, 0);
    add_node(c2, "y", 2, "T4", 0, 0);
    struct gv_alloc_request *whole = simple_req("whole", 1, 0, 1000);
    struct gv_alloc_request *half = simple_req("half", 1, 0, 500);
    gv_alloc_observe(c2, whole);
    gv_alloc_observe(c2, half);
    const char *only_y[] = {"y"};
    assert_int_equal(gv_alloc_pick(c2, half, only_y, 1, &a, NULL), GV_OK);
    assert_int_equal(gv_alloc_place(c2, half, &a, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_fragmentation(c2, "y", &f, NULL), GV_OK);
    if (!(f > 249.999 && f < 250.001))
        fail_msg("F(y) = %f", f);
    assert_int_equal(gv_alloc_node_fragmentation(c2, "x", &f, NULL), GV_OK);
    assert_true(f < 1e-9);
    struct gv_alloc_request *half2 = simple_req("half2", 1, 0, 500);
    assert_int_equal(gv_alloc_pick(c2, half2, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "y");
    int32_t scores[2];
    const char *names[] = {"x", "y"};
    assert_int_equal(gv_alloc_score_nodes(c2, half2, names, 2, scores, NULL), GV_OK);
    assert_int_equal(scores[0], 0);
    assert_int_equal(scores[1], 100);
    gv_alloc_request_free(half2);
    gv_alloc_request_free(whole);
    gv_alloc_request_free(half);
    gv_alloc_cluster_free(c2);
    gv_alloc_request_free(w);
    gv_alloc_request_free(big);
    gv_alloc_request_free(small);
    gv_alloc_cluster_free(c);
}

/* With a half-life of one request, each observation weighs twice the last. */
static void test_fgd_workload_decay(void **state)
{
    (void)state;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    cfg.workload_half_life = 1;
    struct gv_alloc_cluster *c;
    assert_int_equal(gv_alloc_cluster_new(&cfg, &c, NULL), GV_OK);
    add_node(c, "y", 2, "T4", 0, 0);
    struct gv_alloc_request *whole = simple_req("whole", 1, 0, 1000);
    struct gv_alloc_request *half = simple_req("half", 1, 0, 500);
    gv_alloc_observe(c, whole);
    gv_alloc_observe(c, half);
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_pick(c, half, NULL, 0, &a, NULL), GV_OK);
    assert_int_equal(gv_alloc_place(c, half, &a, NULL), GV_OK);
    double f;
    assert_int_equal(gv_alloc_node_fragmentation(c, "y", &f, NULL), GV_OK);
    /* p(whole) = 1/3: the 500m left is a fragment for it */
    if (!(f > 166.666 && f < 166.667))
        fail_msg("F = %f", f);
    /* many more half requests: whole tasks fade away */
    for (int i = 0; i < 40; i++)
        gv_alloc_observe(c, half);
    assert_int_equal(gv_alloc_node_fragmentation(c, "y", &f, NULL), GV_OK);
    assert_true(f < 1e-6);
    gv_alloc_request_free(whole);
    gv_alloc_request_free(half);
    gv_alloc_cluster_free(c);
}

/* CPU matters: a class whose CPU does not fit sees the whole node as fragment. */
static void test_fgd_cpu_dimension(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_FGD);
    add_node(c, "n", 1, "T4", 0, 8000);
    struct gv_alloc_request *w = simple_req("w", 1, 0, 500);
    w->cpu_milli = 4000;
    gv_alloc_observe(c, w);
    double f;
    assert_int_equal(gv_alloc_node_fragmentation(c, "n", &f, NULL), GV_OK);
    assert_true(f < 1e-9);
    /* a CPU-only pod taking 6000m leaves 2000m: the class no longer fits */
    struct gv_alloc_request *cpu;
    assert_int_equal(gv_alloc_request_new(&cpu, NULL), GV_OK);
    snprintf(cpu->uid, sizeof(cpu->uid), "cpu");
    cpu->cpu_milli = 6000;
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_pick(c, cpu, NULL, 0, &a, NULL), GV_OK);
    assert_int_equal(a.n_containers, 0);
    assert_int_equal(gv_alloc_place(c, cpu, &a, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_fragmentation(c, "n", &f, NULL), GV_OK);
    assert_true(f > 999.999 && f < 1000.001);
    gv_alloc_request_free(cpu);
    gv_alloc_request_free(w);
    gv_alloc_cluster_free(c);
}

/* Under FGD a pod without GPUs goes where GPUs are most used: a node
 * without GPUs first, then the fuller GPU node, never the empty one. */
static void test_fgd_cpu_only_pods_avoid_free_gpus(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_FGD);
    add_node(c, "a-empty", 2, "T4", 0, 32000);
    add_node(c, "b-half", 2, "T4", 0, 32000);
    struct gv_alloc_request *w = simple_req("w", 1, 0, 1000);
    const char *only_b[] = {"b-half"};
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_pick(c, w, only_b, 1, &a, NULL), GV_OK);
    assert_int_equal(gv_alloc_place(c, w, &a, NULL), GV_OK);
    struct gv_alloc_request *cpu;
    assert_int_equal(gv_alloc_request_new(&cpu, NULL), GV_OK);
    snprintf(cpu->uid, sizeof(cpu->uid), "cpu");
    cpu->cpu_milli = 8000;
    assert_int_equal(gv_alloc_pick(c, cpu, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "b-half");
    add_node(c, "z-cpu", 0, "", 0, 32000);
    assert_int_equal(gv_alloc_pick(c, cpu, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "z-cpu");
    gv_alloc_request_free(cpu);
    gv_alloc_request_free(w);
    gv_alloc_cluster_free(c);
}

/* Places r on node (a one-name candidate list). */
static void place_on(struct gv_alloc_cluster *c, struct gv_alloc_request *r, const char *node)
{
    const char *only[] = {node};
    struct gv_alloc_assignment a;
    struct gv_error err = {0};
    if (gv_alloc_pick(c, r, only, 1, &a, &err) != GV_OK ||
        gv_alloc_place(c, r, &a, &err) != GV_OK)
        fail_msg("place on %s: %s", node, err.msg);
}

/* FGD cluster of two nodes with gpus T4s each; one task of busy_milli on
 * the node named busy. */
static struct gv_alloc_cluster *pair_with_busy(const char *idle, const char *busy, uint32_t gpus,
                                               uint32_t busy_milli)
{
    struct gv_alloc_cluster *c = new_cluster(GV_ALLOC_POLICY_FGD);
    add_node(c, idle, gpus, "T4", 0, 0);
    add_node(c, busy, gpus, "T4", 0, 0);
    struct gv_alloc_request *r = simple_req("busy", 1, 0, busy_milli);
    place_on(c, r, busy);
    gv_alloc_request_free(r);
    return c;
}

/* A request confined to GPU models matching types (a comma list). */
static struct gv_alloc_request *typed_req(const char *uid, uint32_t milli, const char *types)
{
    struct gv_alloc_request *r = simple_req(uid, 1, 0, milli);
    r->constraint[GV_ALLOC_USE_TYPE] = strdup(types);
    assert_non_null(r->constraint[GV_ALLOC_USE_TYPE]);
    return r;
}

/*
 * Supply: a class confined to some GPU models weighs p(m) x (cluster GPUs /
 * GPUs it may use).  Cluster: "a-scarce" with 2 A100, "b-1".."b-4" with 8
 * T4 each (34 GPUs).  Workload: one A100 task, one T4 task, one untyped
 * task, 1 GPU each.  Plain FGD: an untyped task on a-scarce frees the
 * T4 class of 1000 of fragment (p 1/3), on b-1 the A100 class (p 1/3):
 * a tie, and the name sends it to the scarce A100s.  With supply the A100
 * class weighs 17 (34/2), the T4 class 34/32: b-1 wins by far.
 */
/* The supply tests' cluster: node a_name with 2 A100, n_b nodes "b-<i>"
 * with b_gpus T4 each; workload one A100 task, one T4 task, one untyped
 * task of one whole GPU each (ta, tt, any). */
struct supply_case {
    struct gv_alloc_cluster *c;
    struct gv_alloc_request *ta, *tt, *any;
};

static struct supply_case supply_case_new(const char *a_name, int n_b, uint32_t b_gpus)
{
    struct supply_case k = {new_cluster(GV_ALLOC_POLICY_FGD), NULL, NULL, NULL};
    add_node(k.c, a_name, 2, "NVIDIA A100", 0, 0);
    for (int i = 1; i <= n_b; i++) {
        char name[16];
        snprintf(name, sizeof(name), "b-%d", i);
        add_node(k.c, name, b_gpus, "Tesla T4", 0, 0);
    }
    k.ta = typed_req("ta", 1000, "a100");
    k.tt = typed_req("tt", 1000, "t4");
    k.any = simple_req("any", 1, 0, 1000);
    gv_alloc_observe(k.c, k.ta);
    gv_alloc_observe(k.c, k.tt);
    gv_alloc_observe(k.c, k.any);
    return k;
}

static void supply_case_free(struct supply_case *k)
{
    gv_alloc_request_free(k->ta);
    gv_alloc_request_free(k->tt);
    gv_alloc_request_free(k->any);
    gv_alloc_cluster_free(k->c);
}

static void test_fgd_supply_weights_typed_classes(void **state)
{
    (void)state;
    struct supply_case k = supply_case_new("a-scarce", 4, 8);
    struct gv_alloc_cluster *c = k.c;
    struct gv_alloc_request *ta = k.ta, *any = k.any;
    /* F(b-1): the A100 class cannot run there, all 8000 free is its
     * fragment: 17 x 8000 / (17 + 34/32 + 1) */
    double f, want = 17.0 * 8000.0 / (17.0 + 34.0 / 32.0 + 1.0);
    assert_int_equal(gv_alloc_node_fragmentation(c, "b-1", &f, NULL), GV_OK);
    if (fabs(f - want) > 1e-6)
        fail_msg("F(b-1) = %f, want %f", f, want);
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_pick(c, any, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "b-1");
    assert_int_equal(gv_alloc_pick(c, ta, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "a-scarce");
    /* The factors follow the cluster: without the A100 node the A100 class
     * may use no GPU (factor 1) and the T4 class every GPU (factor 1). */
    assert_int_equal(gv_alloc_node_remove(c, "a-scarce", NULL), GV_OK);
    assert_int_equal(gv_alloc_node_fragmentation(c, "b-1", &f, NULL), GV_OK);
    if (fabs(f - 8000.0 / 3.0) > 1e-6)
        fail_msg("F(b-1) after removal = %f", f);
    /* and come back with it */
    add_node(c, "a-scarce", 2, "NVIDIA A100", 0, 0);
    assert_int_equal(gv_alloc_node_fragmentation(c, "b-1", &f, NULL), GV_OK);
    if (fabs(f - want) > 1e-6)
        fail_msg("F(b-1) after re-adding = %f, want %f", f, want);
    supply_case_free(&k);
}

/*
 * The supply factor counts free share, not installed GPUs (first
 * principles: a GPU already taken serves no class, so what a confined class
 * competes for is the free share of its models).  Cluster: "a" with 2 A100,
 * "b-1" and "b-2" with 4 T4 (10 GPUs).  Workload: one A100 task, one T4
 * task, one untyped task, 1 GPU each.  Empty, the A100 class weighs 10/2 =
 * 5, the T4 class 10/8: an untyped task goes to a T4 node (its free share
 * is a fragment of the heavier A100 class).  With 7 of the 8 T4 taken,
 * 3000 milli are free, 2000 of them A100: the A100 class weighs 1.5, the T4
 * class 3000/1000 = 3, and the untyped task goes to "a" (placing it on
 * b-2 would take the last free T4: F falls by 1.5 x 1000 there, by
 * 3 x 1000 on "a").  With installed GPUs (5 and 1.25) it would take the last
 * T4 and a T4 task arriving next would find none.  Releasing restores the
 * factors.
 */
static void test_fgd_supply_follows_free_share(void **state)
{
    (void)state;
    struct supply_case k = supply_case_new("a", 2, 4);
    struct gv_alloc_cluster *c = k.c;
    struct gv_alloc_request *any = k.any;
    double f;
    /* empty: F(a) = the T4 class's fragment 2000 x 10/8 over 5 + 10/8 + 1 */
    assert_int_equal(gv_alloc_node_fragmentation(c, "a", &f, NULL), GV_OK);
    if (fabs(f - 2000.0 * 1.25 / 7.25) > 1e-6)
        fail_msg("F(a) empty = %f", f);
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_pick(c, any, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "b-1");
    struct gv_alloc_request *t4[7];
    for (int i = 0; i < 7; i++) {
        char uid[16];
        snprintf(uid, sizeof(uid), "t%d", i);
        t4[i] = typed_req(uid, 1000, "t4");
        place_on(c, t4[i], i < 4 ? "b-1" : "b-2");
    }
    assert_int_equal(gv_alloc_node_fragmentation(c, "a", &f, NULL), GV_OK);
    if (fabs(f - 2000.0 * 3.0 / 5.5) > 1e-6)
        fail_msg("F(a) with 7 T4 taken = %f, want %f", f, 2000.0 * 3.0 / 5.5);
    assert_int_equal(gv_alloc_pick(c, any, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "a");
    for (int i = 0; i < 7; i++) {
        assert_int_equal(gv_alloc_release(c, t4[i]->uid, NULL), GV_OK);
        gv_alloc_request_free(t4[i]);
    }
    assert_int_equal(gv_alloc_node_fragmentation(c, "a", &f, NULL), GV_OK);
    if (fabs(f - 2000.0 * 1.25 / 7.25) > 1e-6)
        fail_msg("F(a) after the releases = %f", f);
    assert_int_equal(gv_alloc_pick(c, any, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "b-1");
    supply_case_free(&k);
}

/*
 * Ties of a sharing task go to the node that keeps the fewest idle GPUs:
 * "n1" has 2 idle GPUs, "n2" one idle and one busy with a whole task.  A
 * 500m slice fragments nothing on either (workload: 500m tasks only), so
 * the name would pick n1 and take one of its two idle GPUs; the slice goes
 * to n2.  A whole-GPU task still ties by name (n1).
 */
static void test_fgd_sharing_tie_keeps_idle_gpus(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = pair_with_busy("n1", "n2", 2, 1000);
    struct gv_alloc_assignment a;
    struct gv_alloc_request *half = simple_req("half", 1, 0, 500);
    gv_alloc_observe(c, half);
    assert_int_equal(gv_alloc_pick(c, half, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "n2");
    assert_string_equal(a.containers[0].devices[0].uuid, "n2-g1");
    struct gv_alloc_request *whole2 = simple_req("whole2", 1, 0, 1000);
    assert_int_equal(gv_alloc_pick(c, whole2, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "n1");
    gv_alloc_request_free(whole2);
    gv_alloc_request_free(half);
    gv_alloc_cluster_free(c);
}

/*
 * Score step 40 milli: workload 500m and 700m tasks, one each.  "p" has an
 * idle GPU, "q" a GPU with 400m used.  A 100m task on p fragments nothing
 * (900 left hosts both); on q it turns the 600 left (a fragment for the
 * 700m class: 300 weighted) into 500 (250): 50 milli less.  Steps of 160
 * tied the two (p by name); steps of 40 tell them apart.
 */
static void test_fgd_score_step_resolves_50_milli(void **state)
{
    (void)state;
    struct gv_alloc_cluster *c = pair_with_busy("p", "q", 1, 400);
    struct gv_alloc_assignment a;
    struct gv_alloc_request *w5 = simple_req("w5", 1, 0, 500);
    struct gv_alloc_request *w7 = simple_req("w7", 1, 0, 700);
    gv_alloc_observe(c, w5);
    gv_alloc_observe(c, w7);
    struct gv_alloc_request *small = simple_req("small", 1, 0, 100);
    assert_int_equal(gv_alloc_pick(c, small, NULL, 0, &a, NULL), GV_OK);
    assert_string_equal(a.node, "q");
    gv_alloc_request_free(w5);
    gv_alloc_request_free(w7);
    gv_alloc_request_free(small);
    gv_alloc_cluster_free(c);
}

/* --- assignment codec ---------------------------------------------------- */

static void test_assignment_roundtrip(void **state)
{
    (void)state;
    struct gv_alloc_assignment a = {0}, b;
    snprintf(a.node, sizeof(a.node), "gpu-node-7.example");
    a.n_containers = 2;
    snprintf(a.containers[0].name, GV_ALLOC_CNAME_MAX, "main");
    a.containers[0].n_devices = 2;
    snprintf(a.containers[0].devices[0].uuid, GV_ALLOC_UUID_MAX, "GPU-8f2c1a3e-0b1d-4c5e-9f00-1234567890ab");
    a.containers[0].devices[0].mem_mib = 20000;
    a.containers[0].devices[0].milli = 300;
    snprintf(a.containers[0].devices[1].uuid, GV_ALLOC_UUID_MAX, "MIG-GPU-1/2/0");
    a.containers[0].devices[1].mem_mib = 0;
    a.containers[0].devices[1].milli = 1000;
    snprintf(a.containers[1].name, GV_ALLOC_CNAME_MAX, "side-car");
    a.containers[1].n_devices = 1;
    snprintf(a.containers[1].devices[0].uuid, GV_ALLOC_UUID_MAX, "GPU-aa");
    char buf[GV_ALLOC_ASSIGNMENT_MAX];
    size_t len;
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, sizeof(buf), &len, NULL), GV_OK);
    assert_string_equal(buf, "v1;node=gpu-node-7.example;main=GPU-8f2c1a3e-0b1d-4c5e-9f00-"
                             "1234567890ab:20000:300,MIG-GPU-1/2/0:0:1000;side-car=GPU-aa:0:0");
    assert_int_equal(len, strlen(buf));
    assert_int_equal(gv_alloc_assignment_decode(buf, len, &b, NULL), GV_OK);
    assert_memory_equal(&a, &b, sizeof(a));
    /* too small a buffer */
    struct gv_error err = {0};
    assert_int_equal(gv_alloc_assignment_encode(&a, buf, 20, &len, &err), GV_ERANGE);
    /* empty pod */
    struct gv_alloc_assignment e = {0};
    snprintf(e.node, sizeof(e.node), "n");
    assert_int_equal(gv_alloc_assignment_encode(&e, buf, sizeof(buf), &len, NULL), GV_OK);
    assert_string_equal(buf, "v1;node=n");
    assert_int_equal(gv_alloc_assignment_decode(buf, len, &b, NULL), GV_OK);
    assert_int_equal(b.n_containers, 0);
}

static void test_assignment_strict_parser(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "v1",
        "v2;node=n",
        "v1;node=",
        "v1;nodes=n",
        "v1;node=n;",
        "v1;node=n;c=",
        "v1;node=n;c=u",
        "v1;node=n;c=u:1",
        "v1;node=n;c=u:1:",
        "v1;node=n;c=u:01:0",
        "v1;node=n;c=u:1:1001",
        "v1;node=n;c=u:-1:0",
        "v1;node=n;c=u:1:0,",
        "v1;node=n;c=u:1:0,u:2:0",
        "v1;node=n;c=u:1:0;c=v:1:0",
        "v1;node=n;c=u:1:0 ",
        "v1;node=n m;c=u:1:0",
        "v1;node=n;c=u:99999999999999999999:0",
        "V1;node=n",
        "v1;node=n;c/x=u:1:0",
    };
    struct gv_alloc_assignment b;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gv_error err = {0};
        if (gv_alloc_assignment_decode(bad[i], strlen(bad[i]), &b, &err) == GV_OK)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_non_null(strstr(err.msg, "assignment"));
        assert_int_equal(b.n_containers, 0);
    }
    struct gv_error err = {0};
    assert_int_equal(gv_alloc_assignment_decode("v2;node=n", 9, &b, &err), GV_EUNSUPPORTED);
    /* length-bounded: bytes after len are ignored */
    assert_int_equal(gv_alloc_assignment_decode("v1;node=nXXX", 9, &b, NULL), GV_OK);
    assert_string_equal(b.node, "n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantity_canonical_forms),
        cmocka_unit_test(test_quantity_rejects_bad_input),
        cmocka_unit_test(test_quantity_scan_corners),
        cmocka_unit_test(test_request_hami_resources),
        cmocka_unit_test(test_request_defaults_and_alias),
        cmocka_unit_test(test_request_requests_used_when_no_limits),
        cmocka_unit_test(test_request_conflicts),
        cmocka_unit_test(test_request_annotations),
        cmocka_unit_test(test_request_hami_policy_chains),
        cmocka_unit_test(test_gpu_policy_mutex_and_numa),
        cmocka_unit_test(test_topology_choice),
        cmocka_unit_test(test_filter_reasons),
        cmocka_unit_test(test_filter_host_resources_and_numa),
        cmocka_unit_test(test_multi_container_distinct_gpus),
        cmocka_unit_test(test_place_release_restores_usage),
        cmocka_unit_test(test_node_update_and_remove),
        cmocka_unit_test(test_place_validates_assignment),
        cmocka_unit_test(test_place_refuses_what_the_node_cannot_hold),
        cmocka_unit_test(test_specs_and_config_bounds),
        cmocka_unit_test(test_request_bounds_tenant_input),
        cmocka_unit_test(test_gpu_modes_split_and_vanishing),
        cmocka_unit_test(test_bad_specs_and_lists),
        cmocka_unit_test(test_node_policies),
        cmocka_unit_test(test_gpu_policies),
        cmocka_unit_test(test_bestfit_prefers_least_left),
        cmocka_unit_test(test_fgd_worked_example),
        cmocka_unit_test(test_fgd_workload_decay),
        cmocka_unit_test(test_fgd_cpu_dimension),
        cmocka_unit_test(test_fgd_cpu_only_pods_avoid_free_gpus),
        cmocka_unit_test(test_fgd_supply_weights_typed_classes),
        cmocka_unit_test(test_fgd_supply_follows_free_share),
        cmocka_unit_test(test_fgd_sharing_tie_keeps_idle_gpus),
        cmocka_unit_test(test_fgd_score_step_resolves_50_milli),
        cmocka_unit_test(test_assignment_roundtrip),
        cmocka_unit_test(test_assignment_strict_parser),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
