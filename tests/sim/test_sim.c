/* Tests for src/sim: trace readers, synthetic generator, replay protocol, reports. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/gv_sim.h"
#include "trace_text.h"

static const char nodes_csv[] = "sn,cpu_milli,memory_mib,gpu,model\n"
                                "n0,32000,131072,2,T4\n"
                                "n1,96000,393216,8,V100M32\r\n"
                                "cpu0,16000,65536,0,\n";

static const char pods5_csv[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                "p0,4000,8192,1,1000\n"
                                "p1,2000,4096,1,500\n"
                                "\n"
                                "p2,8000,16384,2,1000\n"
                                "p3,1000,1024,0,0\n";

static const char pods11_csv[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,4000,8192,1,460,T4|V100M32,LS,Running,0,10,0\n"
    "p1,4000,8192,1,1000,,BE,Running,0,10,0\n";

static struct gv_sim_trace *trace_with_nodes(void)
{
    struct gv_sim_trace *t;
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    struct gv_error err = {0};
    if (gv_sim_parse_openb_nodes(t, "nodes.csv", nodes_csv, strlen(nodes_csv), &err) != GV_OK)
        fail_msg("%s", err.msg);
    return t;
}

static void test_openb_readers(void **state)
{
    (void)state;
    struct gv_sim_trace *t = trace_with_nodes();
    assert_int_equal(gv_sim_trace_nodes(t), 3);
    assert_int_equal(gv_sim_trace_gpu_milli(t), 10000);
    struct gv_error err = {0};
    assert_int_equal(gv_sim_parse_openb_pods(t, "pods.csv", pods5_csv, strlen(pods5_csv), &err),
                     GV_OK);
    assert_int_equal(gv_sim_trace_pods(t), 4);
    assert_int_equal(gv_sim_trace_request_milli(t), 1000 + 500 + 2000);
    assert_int_equal(gv_sim_parse_openb_pods(t, "p11.csv", pods11_csv, strlen(pods11_csv), &err),
                     GV_OK);
    assert_int_equal(gv_sim_trace_pods(t), 6);
    assert_int_equal(gv_sim_trace_request_milli(t), 3500 + 460 + 1000);
    gv_sim_trace_free(t);
}

static void expect_bad_pods_n(const char *csv, size_t len, const char *needle)
{
    struct gv_sim_trace *t = trace_with_nodes();
    struct gv_error err = {0};
    if (gv_sim_parse_openb_pods(t, "bad.csv", csv, len, &err) == GV_OK)
        fail_msg("accepted: %s", csv);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    assert_int_equal(gv_sim_trace_pods(t), 0); /* nothing half-loaded */
    gv_sim_trace_free(t);
}

static void expect_bad_pods(const char *csv, const char *needle)
{
    expect_bad_pods_n(csv, strlen(csv), needle);
}

static void test_openb_broken_files(void **state)
{
    (void)state;
    const char *h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    char buf[512];
    expect_bad_pods("", "bad.csv: empty file");
    expect_bad_pods(h, "bad.csv: no pods");
    expect_bad_pods("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n", "missing column \"gpu_milli\"");
    snprintf(buf, sizeof(buf), "%sp,abc,1,1,1000\n", h);
    expect_bad_pods(buf, "bad.csv:2: field cpu_milli: \"abc\" is not a number");
    snprintf(buf, sizeof(buf), "%sp,1,1,1,1000\nq,1,-5,1,1000\n", h);
    expect_bad_pods(buf, "bad.csv:3: field memory_mib: negative");
    snprintf(buf, sizeof(buf), "%sp,1,1,1\n", h);
    expect_bad_pods(buf, "bad.csv:2: 4 fields, header has 5");
    snprintf(buf, sizeof(buf), "%sp,1,1,1,1200\n", h);
    expect_bad_pods(buf, "field gpu_milli");
    snprintf(buf, sizeof(buf), "%sp,1,1,2,500\n", h);
    expect_bad_pods(buf, "multi-GPU");
    snprintf(buf, sizeof(buf), "%sp,1,1,0,500\n", h);
    expect_bad_pods(buf, "field gpu_milli: 500 with num_gpu 0");
    snprintf(buf, sizeof(buf), "%sp,1,1,1,\n", h);
    expect_bad_pods(buf, "field gpu_milli: empty");
    expect_bad_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,500,A100\n",
                    "bad.csv:2: field gpu_spec: unknown GPU model \"A100\"");
    expect_bad_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,500,T4|\n",
                    "field gpu_spec");
    /* the line buffer (4096 bytes with its NUL), the field table (32), NUL
     * bytes, a column named twice (the first one too) */
    {
        static char lng[2 * 4096 + 128];
        for (size_t len = 4095; len <= 4096; len++) {
            size_t o = (size_t)snprintf(lng, sizeof(lng), "%sp,1,1,1,", h);
            memset(lng + o, '1', len - 8); /* the row: len bytes before its newline */
            lng[o + len - 8] = '\n';
            lng[o + len - 7] = '\0';
            struct gv_sim_trace *t = trace_with_nodes();
            struct gv_error err = {0};
            assert_int_not_equal(gv_sim_parse_openb_pods(t, "bad.csv", lng, strlen(lng), &err),
                                 GV_OK); /* a 4087-digit number is bad either way */
            if ((strstr(err.msg, "bad.csv:2: line longer than 4095 bytes") != NULL) != (len == 4096))
                fail_msg("a line of %zu bytes: %s", len, err.msg);
            gv_sim_trace_free(t);
        }
        size_t o = (size_t)snprintf(lng, sizeof(lng), "%sp", h);
        for (int f = 1; f < 32; f++)
            o += (size_t)snprintf(lng + o, sizeof(lng) - o, ",1");
        snprintf(lng + o, sizeof(lng) - o, "\n");
        expect_bad_pods(lng, "bad.csv:2: 32 fields, header has 5");
        snprintf(lng + o, sizeof(lng) - o, ",1\n");
        expect_bad_pods(lng, "bad.csv:2: more than 32 fields");
    }
    /* bytes outside printable ASCII are written escaped, DEL too */
    expect_bad_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1\x7f,1,1,500\n",
                    "\"1\\x7f\" is not a number");
    static const char nul_row[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1\0,1,500\n";
    expect_bad_pods_n(nul_row, sizeof(nul_row) - 1, "bad.csv:2: NUL byte in line");
    static const char nul_head[] = "name,cpu_milli,memory_mib,num\0_gpu,gpu_milli\np,1,1,1,500\n";
    expect_bad_pods_n(nul_head, sizeof(nul_head) - 1, "bad.csv:1: NUL byte in line");
    expect_bad_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,name\np,1,1,1,500,q\n",
                    "bad.csv:1: column \"name\" appears twice (columns 1 and 6)");

    struct gv_sim_trace *t;
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    struct gv_error err = {0};
    const char *dup = "sn,cpu_milli,memory_mib,gpu,model\na,1,1,1,T4\na,1,1,1,T4\n";
    assert_int_not_equal(gv_sim_parse_openb_nodes(t, "n.csv", dup, strlen(dup), &err), GV_OK);
    assert_non_null(strstr(err.msg, "n.csv:3: field sn: duplicate node"));
    /* the check spans a long list (its name set grows while rows are read)
     * and the nodes of files loaded before */
    {
        static char big[300 * 32 + 128];
        size_t o = (size_t)snprintf(big, sizeof(big), "sn,cpu_milli,memory_mib,gpu,model\n");
        for (int i = 0; i < 300; i++)
            o += (size_t)snprintf(big + o, sizeof(big) - o, "node-%d,1,1,1,T4\n", i);
        snprintf(big + o, sizeof(big) - o, "node-207,1,1,1,T4\n");
        assert_int_not_equal(gv_sim_parse_openb_nodes(t, "n.csv", big, strlen(big), &err), GV_OK);
        assert_non_null(strstr(err.msg, "n.csv:302: field sn: duplicate node \"node-207\""));
        big[o] = '\0'; /* without the repeat: all 300 load */
        assert_int_equal(gv_sim_parse_openb_nodes(t, "n.csv", big, strlen(big), &err), GV_OK);
        const char *again = "sn,cpu_milli,memory_mib,gpu,model\nother,1,1,1,T4\nnode-3,1,1,1,T4\n";
        assert_int_not_equal(gv_sim_parse_openb_nodes(t, "m.csv", again, strlen(again), &err),
                             GV_OK);
        assert_non_null(strstr(err.msg, "m.csv:3: field sn: duplicate node \"node-3\""));
        gv_sim_trace_free(t);
        assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    }
    const char *nomodel = "sn,cpu_milli,memory_mib,gpu,model\na,1,1,1,\n";
    assert_int_not_equal(gv_sim_parse_openb_nodes(t, "n.csv", nomodel, strlen(nomodel), &err),
                         GV_OK);
    assert_non_null(strstr(err.msg, "n.csv:2: field model: empty"));
    const char *many = "sn,cpu_milli,memory_mib,gpu,model\na,1,1,65,T4\n";
    assert_int_not_equal(gv_sim_parse_openb_nodes(t, "n.csv", many, strlen(many), &err), GV_OK);
    assert_non_null(strstr(err.msg, "field gpu"));
    assert_int_equal(gv_sim_trace_nodes(t), 0);
    gv_sim_trace_free(t);
}

static const char k8s_nodes[] =
    "{\"kind\":\"List\",\"items\":[{\"metadata\":{\"name\":\"g1\",\"labels\":"
    "{\"nvidia.com/gpu.product\":\"Tesla-T4\",\"nvidia.com/gpu.memory\":\"15360\"}},"
    "\"status\":{\"capacity\":{\"cpu\":\"16\",\"memory\":\"64Gi\",\"nvidia.com/gpu\":\"4\"}}},"
    "{\"metadata\":{\"name\":\"c1\"},\"status\":{\"capacity\":{\"cpu\":\"8\"}}}]}";

static const char k8s_pods[] =
    "{\"kind\":\"List\",\"items\":["
    "{\"metadata\":{\"name\":\"a\",\"uid\":\"1\",\"annotations\":{\"nvidia.com/use-gputype\":\"t4\"}},"
    "\"spec\":{\"containers\":[{\"name\":\"m\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
    "\"nvidia.com/gpucores\":\"50\",\"nvidia.com/gpumem\":\"4000\"}}}]},\"status\":{\"phase\":\"Running\"}},"
    "{\"metadata\":{\"name\":\"done\",\"uid\":\"2\"},\"spec\":{\"containers\":[{\"name\":\"m\","
    "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"4\"}}}]},\"status\":{\"phase\":\"Succeeded\"}},"
    "{\"metadata\":{\"name\":\"b\",\"uid\":\"3\"},\"spec\":{\"containers\":[{\"name\":\"m\","
    "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"2\"}}}]}}]}";

static void test_k8s_readers(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    struct gv_error err = {0};
    if (gv_sim_parse_k8s_nodes(t, "nodes.json", k8s_nodes, strlen(k8s_nodes), &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_trace_nodes(t), 2);
    assert_int_equal(gv_sim_trace_gpu_milli(t), 4000);
    if (gv_sim_parse_k8s_pods(t, "pods.json", k8s_pods, strlen(k8s_pods), &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_trace_pods(t), 2); /* the Succeeded pod is skipped */
    /* 500 milli + 2 whole GPUs (whole memory) */
    assert_int_equal(gv_sim_trace_request_milli(t), 2500);
    struct gv_sim_curve cv;
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 1, 1.0, &cv, &err), GV_OK);
    assert_true(cv.placed > 0);
    gv_sim_curve_free(&cv);

    const char *bad = "{\"items\":[{\"metadata\":{\"name\":\"x\"},\"spec\":{\"containers\":[{\"name\":"
                      "\"m\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]},\"metadata\":"
                      "{\"name\":\"x\",\"annotations\":{\"nvidia.com/use-gputype\":\"H100\"}}}]}";
    assert_int_not_equal(gv_sim_parse_k8s_pods(t, "p.json", bad, strlen(bad), &err), GV_OK);
    assert_non_null(strstr(err.msg, "p.json: items[0]: use-gputype"));
    assert_non_null(strstr(err.msg, "h100"));
    const char *notlist = "{\"kind\":\"Pod\"}";
    assert_int_not_equal(gv_sim_parse_k8s_pods(t, "p.json", notlist, strlen(notlist), &err), GV_OK);
    assert_non_null(strstr(err.msg, "p.json: field items"));
    const char *broken = "{\"items\": [";
    assert_int_not_equal(gv_sim_parse_k8s_nodes(t, "n.json", broken, strlen(broken), &err), GV_OK);
    assert_non_null(strstr(err.msg, "n.json:1"));
    const char *badpod = "{\"items\":[{\"metadata\":{},\"spec\":{\"containers\":[{\"name\":\"m\","
                         "\"resources\":{\"limits\":{\"nvidia.com/gpucores\":\"300\"}}}]}}]}";
    assert_int_not_equal(gv_sim_parse_k8s_pods(t, "p.json", badpod, strlen(badpod), &err), GV_OK);
    assert_non_null(strstr(err.msg, "p.json: items[0]"));
    assert_non_null(strstr(err.msg, "nvidia.com/gpucores"));
    assert_int_equal(gv_sim_trace_pods(t), 2);
    gv_sim_trace_free(t);
}

/* Input as users have it: spreadsheet exports, hand-edited headers, bytes
 * that must not reach a terminal raw. */
static void test_openb_input_defects(void **state)
{
    (void)state;
    /* a duplicated column is refused, naming both occurrences (the old
     * reader silently used the last one) */
    expect_bad_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,cpu_milli\np,1,1,1,500,9\n",
                    "bad.csv:1: column \"cpu_milli\" appears twice (columns 2 and 6)");
    /* control bytes in a field come back escaped */
    struct gv_sim_trace *t = trace_with_nodes();
    struct gv_error err = {0};
    const char *ctl = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,\x1b[2J\x07,1,1,500\n";
    assert_int_not_equal(gv_sim_parse_openb_pods(t, "c.csv", ctl, strlen(ctl), &err), GV_OK);
    assert_non_null(strstr(err.msg, "field cpu_milli: \"\\x1b[2J\\x07\" is not a number"));
    for (const char *p = err.msg; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            fail_msg("raw control byte 0x%02x in \"%s\"", (unsigned char)*p, err.msg);
    const char *spec = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,500,\x1bX\n";
    assert_int_not_equal(gv_sim_parse_openb_pods(t, "c.csv", spec, strlen(spec), &err), GV_OK);
    assert_non_null(strstr(err.msg, "unknown GPU model \"\\x1bX\""));
    /* a UTF-8 byte order mark is accepted (it used to read as part of
     * the first column's name: "missing column") */
    const char *bom = "\xef\xbb\xbfname,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,500\n";
    if (gv_sim_parse_openb_pods(t, "bom.csv", bom, strlen(bom), &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_trace_pods(t), 1);
    const char *nbom = "\xef\xbb\xbfsn,cpu_milli,memory_mib,gpu,model\nz,1,1,1,T4\n";
    if (gv_sim_parse_openb_nodes(t, "bom.csv", nbom, strlen(nbom), &err) != GV_OK)
        fail_msg("%s", err.msg);
    gv_sim_trace_free(t);
}

/* `kubectl get nodes,pods -A -o json`: one List, kinds mixed, pods may
 * come before the nodes, node GPUs from gpuvisor's inventory annotation. */
static const char k8s_cluster[] =
    "{\"kind\":\"List\",\"items\":["
    "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"uid\":\"1\",\"annotations\":"
    "{\"nvidia.com/use-gputype\":\"a100\"}},\"spec\":{\"containers\":[{\"name\":\"m\","
    "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpucores\":\"50\"}}}]},"
    "\"status\":{\"phase\":\"Running\"}},"
    "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"old\",\"uid\":\"2\"},\"spec\":{\"containers\":"
    "[{\"name\":\"m\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"2\"}}}]},"
    "\"status\":{\"phase\":\"Failed\"}},"
    "{\"kind\":\"Service\",\"metadata\":{\"name\":\"svc\"}},"
    "{\"kind\":\"Node\",\"metadata\":{\"name\":\"g1\",\"annotations\":{\"gpuvisor.io/node-gpus\":"
    "\"{\\\"version\\\":1,\\\"gpus\\\":[{\\\"uuid\\\":\\\"GPU-a\\\",\\\"index\\\":0,"
    "\\\"model\\\":\\\"NVIDIA A100-SXM4-40GB\\\",\\\"memoryMiB\\\":40960,\\\"memoryScaling\\\":1.0,\\\"cores\\\":100,\\\"split\\\":4,\\\"numa\\\":0,\\\"mig\\\":false,"
    "\\\"healthy\\\":true,\\\"mode\\\":\\\"vgpu\\\"},{\\\"uuid\\\":\\\"GPU-b\\\",\\\"index\\\":1,"
    "\\\"model\\\":\\\"NVIDIA A100-SXM4-40GB\\\",\\\"memoryMiB\\\":40960,\\\"memoryScaling\\\":1.0,\\\"cores\\\":100,\\\"split\\\":4,\\\"numa\\\":0,\\\"mig\\\":false,"
    "\\\"healthy\\\":true,\\\"mode\\\":\\\"vgpu\\\"}]}\"}},"
    "\"status\":{\"allocatable\":{\"cpu\":\"32\",\"memory\":\"128Gi\"}}}]}";

static void test_k8s_cluster_dump(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    struct gv_error err = {0};
    if (gv_sim_parse_k8s_cluster(t, "dump.json", k8s_cluster, strlen(k8s_cluster), &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_trace_nodes(t), 1);
    assert_int_equal(gv_sim_trace_gpu_milli(t), 2000); /* from the inventory */
    assert_int_equal(gv_sim_trace_pods(t), 1);         /* the Failed pod holds nothing */
    assert_int_equal(gv_sim_trace_request_milli(t), 500);
    /* a dump without nodes (e.g. `kubectl get pods -o json`) says what to run */
    assert_int_not_equal(gv_sim_parse_k8s_cluster(t, "pods.json", k8s_pods, strlen(k8s_pods), &err),
                         GV_OK);
    assert_non_null(strstr(err.msg, "pods.json: no Node items"));
    assert_int_equal(gv_sim_trace_nodes(t), 1); /* nothing half-loaded */
    gv_sim_trace_free(t);
}

/* The offline reference on a trace whose answer is known: every pod needs
 * a T4, the cluster has 2 T4 and 8 V100, so at 100 % arrived at most 2 of
 * 10 GPUs can be allocated, by any placement. */
static void test_reference_known_answer(void **state)
{
    (void)state;
    struct gv_sim_trace *t = trace_with_nodes();
    struct gv_error err = {0};
    const char *pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                       "a,1000,1024,1,1000,T4\nb,1000,1024,1,500,T4\n";
    if (gv_sim_parse_openb_pods(t, "t4.csv", pods, strlen(pods), &err) != GV_OK)
        fail_msg("%s", err.msg);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        struct gv_sim_reference ref;
        assert_int_equal(gv_sim_reference(t, seed, &ref, &err), GV_OK);
        assert_float_equal(ref.bound_unalloc_pct, 80.0, 1e-9);
        assert_float_equal(ref.oracle_unalloc_pct, 80.0, 1e-9);
        /* the online replay of the same arrivals cannot beat the bound */
        struct gv_sim_curve cv;
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, seed, 1.0, &cv, &err), GV_OK);
        assert_true(100.0 - cv.allocated[100] >= ref.bound_unalloc_pct - 1e-9);
        gv_sim_curve_free(&cv);
    }
    /* without the constraint the bound drops to 0 and the oracle packs all */
    struct gv_sim_trace *u = trace_with_nodes();
    const char *free_pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,1000\n";
    assert_int_equal(gv_sim_parse_openb_pods(u, "any.csv", free_pods, strlen(free_pods), &err),
                     GV_OK);
    struct gv_sim_reference ref;
    assert_int_equal(gv_sim_reference(u, 42, &ref, &err), GV_OK);
    assert_float_equal(ref.bound_unalloc_pct, 0.0, 1e-9);
    assert_float_equal(ref.oracle_unalloc_pct, 0.0, 1e-9);
    gv_sim_trace_free(u);
    gv_sim_trace_free(t);
}

/* The indexed search decides exactly as scoring every node: same placement
 * hash for every policy over whole replays. */
static void test_index_replays_identically(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    if (gv_sim_synthetic(t, "nodes=120,typed=20", 7, &err) != GV_OK)
        fail_msg("%s", err.msg);
    for (int p = 0; p < GV_ALLOC_POLICY_COUNT; p++) {
        for (uint64_t seed = 1; seed <= 2; seed++) {
            struct gv_sim_curve a, b;
            assert_int_equal(gv_sim_run(t, (gv_alloc_policy)p, seed, 1.3, &a, &err), GV_OK);
            assert_int_equal(gv_sim_run_exhaustive(t, (gv_alloc_policy)p, seed, 1.3, &b, &err),
                             GV_OK);
            assert_true(a.placed > 100);
            assert_int_equal(a.placed, b.placed);
            if (a.placement_hash != b.placement_hash)
                fail_msg("policy %s seed %llu: indexed and exhaustive replays differ",
                         gv_alloc_policy_name((gv_alloc_policy)p), (unsigned long long)seed);
            gv_sim_curve_free(&a);
            gv_sim_curve_free(&b);
        }
    }
    gv_sim_trace_free(t);
}

static void test_synthetic_is_seeded(void **state)
{
    (void)state;
    struct gv_sim_trace *a, *b, *c;
    assert_int_equal(gv_sim_trace_new(&a, NULL), GV_OK);
    assert_int_equal(gv_sim_trace_new(&b, NULL), GV_OK);
    assert_int_equal(gv_sim_trace_new(&c, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(a, "default", 7, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(b, "default", 7, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(c, "nodes=50,frac=80,multi=0,cpu=0", 8, NULL), GV_OK);
    assert_int_equal(gv_sim_trace_nodes(a), 200);
    assert_int_equal(gv_sim_trace_gpu_milli(a), gv_sim_trace_gpu_milli(b));
    assert_int_equal(gv_sim_trace_request_milli(a), gv_sim_trace_request_milli(b));
    assert_int_equal(gv_sim_trace_nodes(c), 50);
    /* 80 % fractional pods: well under one GPU per pod on average */
    assert_true(gv_sim_trace_request_milli(c) < 700 * gv_sim_trace_pods(c));
    struct gv_error err = {0};
    struct gv_sim_trace *d;
    assert_int_equal(gv_sim_trace_new(&d, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(d, "nodes=0", 1, &err), GV_EINVAL);
    assert_int_equal(gv_sim_synthetic(d, "gpus=3", 1, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "unknown key \"gpus\""));
    assert_int_equal(gv_sim_synthetic(d, "frac=70,multi=20,cpu=20", 1, &err), GV_EINVAL);
    assert_int_equal(gv_sim_synthetic(d, "nodes=-1", 1, &err), GV_EINVAL);
    assert_int_equal(gv_sim_trace_nodes(d), 0);
    gv_sim_trace_free(a);
    gv_sim_trace_free(b);
    gv_sim_trace_free(c);
    gv_sim_trace_free(d);
}

/* Hand-built replay: 1 node with 2 GPUs, only whole-GPU pods: every pod
 * fits until the GPUs are gone, so allocated follows arrived to 100 %. */
static void test_protocol_on_known_trace(void **state)
{
    (void)state;
    const char *n = "sn,cpu_milli,memory_mib,gpu,model\nn,64000,65536,2,T4\n";
    const char *p = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,1000\n";
    struct gv_sim_trace *t = sim_test_trace(n, p);
    struct gv_sim_curve cv;
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, 42, 1.5, &cv, NULL), GV_OK);
    assert_int_equal(cv.n, 151);
    assert_int_equal(cv.arrivals, 3); /* 50 %, 100 %, 150 % */
    assert_int_equal(cv.placed, 2);
    assert_int_equal(cv.failed, 1);
    assert_true(cv.allocated[0] == 0.0);
    assert_true(cv.allocated[50] == 50.0);
    assert_true(cv.allocated[51] == 100.0);
    assert_true(cv.allocated[100] == 100.0);
    assert_true(cv.allocated[150] == 100.0);
    gv_sim_curve_free(&cv);
    struct gv_error err = {0};
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 1, 0.0, &cv, &err), GV_EINVAL);
    gv_sim_trace_free(t);
}

/* Over 5,000 nodes the engine's score budget applies (docs/alloc.md, "Score
 * budget") and --exact (gv_sim_trace_set_exact) turns it off: on 5,001 nodes
 * in states of their own (CPU and shares of many sizes) the two replays
 * place differently, each the same again when repeated, and the replay
 * follows the setting back. */
static void test_exact_turns_the_budget_off(void **state)
{
    (void)state;
    size_t cap = 64 * 5100, o = 0;
    char *n = malloc(cap);
    assert_non_null(n);
    o += (size_t)snprintf(n + o, cap - o, "sn,cpu_milli,memory_mib,gpu,model\n");
    for (int i = 0; i < 5001; i++)
        o += (size_t)snprintf(n + o, cap - o, "n%04d,%d,262144,%d,%s\n", i,
                              16000 + 1000 * (i % 48), 1 + i % 4, i % 5 == 0 ? "V100" : "T4");
    const char *p = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                    "a,1000,1024,1,100\nb,3000,1024,1,250\nc,5000,1024,1,300\n"
                    "d,2000,1024,1,470\ne,7000,1024,1,650\nf,4000,1024,1,810\n"
                    "g,9000,1024,1,1000\nh,6000,1024,2,1000\n";
    struct gv_sim_trace *t = sim_test_trace(n, p);
    free(n);
    struct gv_sim_curve budget, exact, again;
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 42, 0.6, &budget, NULL), GV_OK);
    gv_sim_trace_set_exact(t, true);
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 42, 0.6, &exact, NULL), GV_OK);
    assert_int_equal(exact.arrivals, budget.arrivals);
    assert_true(exact.placement_hash != budget.placement_hash);
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 42, 0.6, &again, NULL), GV_OK);
    assert_true(again.placement_hash == exact.placement_hash);
    gv_sim_curve_free(&again);
    gv_sim_trace_set_exact(t, false);
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 42, 0.6, &again, NULL), GV_OK);
    assert_true(again.placement_hash == budget.placement_hash);
    gv_sim_curve_free(&again);
    gv_sim_curve_free(&budget);
    gv_sim_curve_free(&exact);
    gv_sim_trace_free(t);
}

/* Ties go to the smallest node name.  Node a has 2 cores, b 64; a half-GPU
 * pod (1 core) ties between the empty nodes, a whole-GPU pod needs 32 cores
 * (b only).  With the given names the half pod always takes a and the whole
 * pod fits on b: 75 % allocated at 75 % arrived in every seed.  Shuffled
 * names (the paper's artifact) put b first in some seeds: when the half pod
 * arrives first it takes b and the whole pod fails (25 %). */
static void test_shuffled_node_names(void **state)
{
    (void)state;
    const char *n = "sn,cpu_milli,memory_mib,gpu,model\na,2000,65536,1,T4\nb,64000,65536,1,T4\n";
    const char *p = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                    "s,1000,1024,1,500\nw,32000,1024,1,1000\n";
    struct gv_sim_trace *t = sim_test_trace(n, p);
    int lost = 0, kept = 0;
    for (uint64_t seed = 1; seed <= 64; seed++) {
        struct gv_sim_curve cv, again;
        gv_sim_trace_set_shuffle_names(t, false);
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, seed, 1.0, &cv, NULL), GV_OK);
        assert_true(cv.allocated[75] == 75.0);
        gv_sim_curve_free(&cv);
        gv_sim_trace_set_shuffle_names(t, true);
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, seed, 1.0, &cv, NULL), GV_OK);
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, seed, 1.0, &again, NULL), GV_OK);
        assert_memory_equal(cv.allocated, again.allocated, cv.n * sizeof(double));
        assert_true(cv.allocated[75] == 75.0 || cv.allocated[75] == 25.0);
        if (cv.allocated[75] == 25.0)
            lost++;
        else
            kept++;
        gv_sim_curve_free(&cv);
        gv_sim_curve_free(&again);
    }
    /* b sorts first in about half the seeds, the half pod arrives first in
     * about half: about 16 of 64 */
    assert_true(lost >= 4);
    assert_true(kept >= 4);
    gv_sim_trace_free(t);
}

static void test_protocol_is_deterministic(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=40", 3, NULL), GV_OK);
    for (int p = 0; p < GV_ALLOC_POLICY_COUNT; p++) {
        struct gv_sim_curve a, b, c;
        assert_int_equal(gv_sim_run(t, (gv_alloc_policy)p, 5, 1.3, &a, NULL), GV_OK);
        assert_int_equal(gv_sim_run(t, (gv_alloc_policy)p, 5, 1.3, &b, NULL), GV_OK);
        assert_int_equal(gv_sim_run(t, (gv_alloc_policy)p, 6, 1.3, &c, NULL), GV_OK);
        assert_int_equal(a.n, 131);
        assert_memory_equal(a.allocated, b.allocated, a.n * sizeof(double));
        assert_int_equal(a.placed, b.placed);
        bool differs = a.arrivals != c.arrivals ||
                       memcmp(a.allocated, c.allocated, a.n * sizeof(double)) != 0;
        assert_true(differs);
        for (uint32_t i = 1; i < a.n; i++) {
            assert_true(a.allocated[i] >= a.allocated[i - 1]); /* nothing departs */
            assert_true(a.allocated[i] <= 100.0 + 1e-9);
        }
        gv_sim_curve_free(&a);
        gv_sim_curve_free(&b);
        gv_sim_curve_free(&c);
    }
    gv_sim_trace_free(t);
}

/* Priorities: high pods preempt lower ones when they do not fit; every
 * high arrival is accounted once; no priorities (or 0 %) = the same replay
 * as before. */
static void test_high_priority_preemption(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=40", 3, NULL), GV_OK);
    struct gv_sim_curve base, zero, hi, hi2;
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 5, 1.3, &base, NULL), GV_OK);
    assert_int_equal(gv_sim_set_high_priority(t, 0, NULL), GV_OK);
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 5, 1.3, &zero, NULL), GV_OK);
    assert_true(base.placement_hash == zero.placement_hash);
    assert_int_equal(zero.high_arrivals, 0);
    assert_int_equal(gv_sim_set_high_priority(t, 101, &err), GV_EINVAL);
    assert_int_equal(gv_sim_set_high_priority(t, 100, NULL), GV_OK); /* the top of the range */
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 5, 1.3, &hi, NULL), GV_OK);
    assert_int_equal(hi.high_arrivals, hi.arrivals - hi.whole_arrivals);
    gv_sim_curve_free(&hi);
    assert_int_equal(gv_sim_set_high_priority(t, 20, NULL), GV_OK);
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 5, 1.3, &hi, NULL), GV_OK);
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 5, 1.3, &hi2, NULL), GV_OK);
    assert_true(hi.placement_hash == hi2.placement_hash); /* deterministic */
    assert_true(hi.high_arrivals > hi.arrivals / 10 && hi.high_arrivals < hi.arrivals / 3);
    assert_int_equal(hi.high_placed + hi.high_preempted + hi.high_failed, hi.high_arrivals);
    /* past saturation high pods get in by preempting: each evicts someone */
    assert_true(hi.high_preempted > 0);
    assert_true(hi.evicted >= hi.high_preempted);
    assert_true(hi.evicted_milli > 0);
    /* and fail far less often than without priorities */
    assert_true(hi.high_failed * 4 < hi.high_arrivals);
    for (uint32_t i = 0; i < hi.n; i++)
        assert_true(hi.allocated[i] >= 0.0 && hi.allocated[i] <= 100.0 + 1e-9);
    gv_sim_curve_free(&base);
    gv_sim_curve_free(&zero);
    gv_sim_curve_free(&hi);
    gv_sim_curve_free(&hi2);
    gv_sim_trace_free(t);
}

static void test_rng(void **state)
{
    (void)state;
    struct gv_sim_rng a, b;
    gv_sim_rng_seed(&a, 42);
    gv_sim_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        assert_true(gv_sim_rng_next(&a) == gv_sim_rng_next(&b));
    unsigned hist[7] = {0};
    for (int i = 0; i < 7000; i++) {
        uint64_t x = gv_sim_rng_below(&a, 7);
        assert_true(x < 7);
        hist[x]++;
    }
    for (int i = 0; i < 7; i++)
        assert_true(hist[i] > 800 && hist[i] < 1200);
}

static void test_reports(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=20", 1, NULL), GV_OK);
    struct gv_sim_report r = {0};
    uint64_t seeds[2] = {1, 2};
    struct gv_sim_curve curves[4];
    r.n_policies = 2;
    r.policies[0] = GV_ALLOC_POLICY_BESTFIT;
    r.policies[1] = GV_ALLOC_POLICY_FGD;
    r.n_seeds = 2;
    r.seeds = seeds;
    r.curves = curves;
    for (int i = 0; i < 4; i++)
        assert_int_equal(gv_sim_run(t, r.policies[i / 2], seeds[i % 2], 1.3, &curves[i], NULL),
                         GV_OK);
    r.max_pct = curves[0].n - 1;
    struct gv_sim_buf b = {0};
    gv_sim_report_table(&r, "title <x>", &b);
    assert_false(b.oom);
    assert_non_null(strstr(b.data, "title <x>\n"));
    assert_non_null(strstr(b.data, "bestfit"));
    const char *last = b.data + b.len - 1;
    while (last > b.data && last[-1] != '\n')
        last--;
    double m, sd;
    gv_sim_headline(&r, 1, &m, &sd);
    char want[128];
    snprintf(want, sizeof(want), "unallocated_pct_at_100 policy=fgd mean=%.2f sd=%.2f seeds=2\n", m,
             sd);
    assert_string_equal(last, want);
    assert_true(m >= 0 && m <= 100);
    gv_sim_buf_free(&b);
    gv_sim_report_csv(&r, &b);
    assert_true(strncmp(b.data, "policy,seed,arrived_pct,allocated_pct\n", 38) == 0);
    size_t lines = 0;
    for (size_t i = 0; i < b.len; i++)
        lines += b.data[i] == '\n';
    assert_int_equal(lines, 1 + 4 * 131);
    gv_sim_buf_free(&b);
    gv_sim_report_svg(&r, "title <x>", &b);
    assert_true(strncmp(b.data, "<?xml", 5) == 0);
    assert_non_null(strstr(b.data, "title &lt;x&gt;"));
    assert_non_null(strstr(b.data, "</svg>\n"));
    size_t polylines = 0;
    for (const char *s = b.data; (s = strstr(s, "<polyline")) != NULL; s++)
        polylines++;
    assert_int_equal(polylines, 6); /* two panels: ideal + one per policy */
    gv_sim_buf_free(&b);
    for (int i = 0; i < 4; i++)
        gv_sim_curve_free(&curves[i]);
    gv_sim_trace_free(t);
}

/* --topology: the layout spec, what the report counts, and a cluster dump's
 * own groups winning over the spec. */
/* Churn replay (gv_sim_churn): deterministic per seed; a defrag pass that
 * moves pods frees GPUs (the planner keeps only drains that gain); with a
 * budget of 0 moves the replay is the one without defragmentation. */
static void test_churn_defrag(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=30", 2023, &err), GV_OK);
    struct gv_sim_churn_opts none = {.load = 0.9, .lifetimes = 3, .max_moves = 10};
    struct gv_sim_churn_opts every = none, zero = none;
    every.defrag_every = 50;
    zero.defrag_every = 50;
    zero.max_moves = 0;
    struct gv_sim_churn_result a, b, d, z;
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &none, &a, &err), GV_OK);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &none, &b, &err), GV_OK);
    assert_true(a.arrivals > 0 && a.arrivals == b.arrivals && a.failed == b.failed);
    assert_true(a.alloc_pct == b.alloc_pct && a.frag_pct == b.frag_pct);
    assert_true(a.alloc_pct > 30 && a.alloc_pct <= 100);
    assert_int_equal(a.passes, 0);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &zero, &z, &err), GV_OK);
    assert_true(z.failed == a.failed && z.alloc_pct == a.alloc_pct && z.moves == 0);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &every, &d, &err), GV_OK);
    assert_true(d.passes > 0 && d.arrivals == a.arrivals);
    /* a pass every 50 arrivals, counted after the warm-up like arrivals */
    if (d.passes * 50 > d.arrivals + 50 || d.passes * 50 + 50 < d.arrivals)
        fail_msg("%llu passes in %llu arrivals, one per 50 expected",
                 (unsigned long long)d.passes, (unsigned long long)d.arrivals);
    assert_true(d.moves <= d.passes * every.max_moves);
    assert_true(d.moves > 0);          /* departures leave GPUs worth draining */
    assert_true(d.idle_recovered > 0); /* every kept drain frees a GPU */
    struct gv_sim_churn_opts bad = none;
    bad.load = 0;
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &bad, &d, &err), GV_EINVAL);
    bad.load = 3.01;
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &bad, &d, &err), GV_EINVAL);
    bad.load = 3; /* the top of the range */
    bad.lifetimes = 1;
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &bad, &d, &err), GV_OK);
    assert_true(d.failed > 0); /* three times the capacity offered */
    struct gv_sim_churn_opts parsed = none;
    assert_int_equal(gv_sim_churn_parse("load=80,moves=3", &parsed, &err), GV_OK);
    assert_true(parsed.load > 0.79 && parsed.load < 0.81 && parsed.max_moves == 3 &&
                parsed.lifetimes == 3);
    assert_int_equal(gv_sim_churn_parse("speed=3", &parsed, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "speed"));
    assert_int_equal(gv_sim_churn_parse("load=0", &parsed, &err), GV_EINVAL);
    assert_int_equal(gv_sim_churn_parse("lifetimes=0", &parsed, &err), GV_EINVAL);
    assert_true(parsed.max_moves == 3); /* unchanged by the refusals */
    gv_sim_trace_free(t);
    /* a cluster without GPUs has nothing to churn */
    const char *cn = "sn,cpu_milli,memory_mib,gpu,model\nn,64000,65536,0,\n";
    const char *cp = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\n";
    t = sim_test_trace(cn, cp);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &none, &d, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "no GPUs"));
    gv_sim_trace_free(t);
}

/* Churn replay with priorities: every high-priority arrival ends in one
 * bucket (at once, by preemption, after waiting, not placed); the waits
 * respond to the inputs: more of the load high priority means fewer low
 * pods to evict and longer waits; no priorities means no waits and the
 * replay without them. */
static void test_churn_high_priority_waits(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=30", 2023, &err), GV_OK);
    struct gv_sim_churn_opts o = {.load = 1.5, .lifetimes = 3, .max_moves = 10};
    struct gv_sim_churn_result plain, none, few, many, again;
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &o, &plain, &err), GV_OK);
    assert_int_equal(gv_sim_set_high_priority(t, 0, NULL), GV_OK);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &o, &none, &err), GV_OK);
    assert_true(none.high_arrivals == 0 && none.wait_mean == 0 && none.low_evicted == 0);
    assert_true(none.failed == plain.failed && none.alloc_pct == plain.alloc_pct);
    assert_int_equal(gv_sim_set_high_priority(t, 5, NULL), GV_OK);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &o, &few, &err), GV_OK);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &o, &again, &err), GV_OK);
    assert_true(few.wait_mean == again.wait_mean && few.low_evicted == again.low_evicted);
    assert_int_equal(gv_sim_set_high_priority(t, 70, NULL), GV_OK);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &o, &many, &err), GV_OK);
    const struct gv_sim_churn_result *rs[] = {&few, &many};
    for (int i = 0; i < 2; i++) {
        const struct gv_sim_churn_result *r = rs[i];
        assert_true(r->high_arrivals > 0);
        assert_int_equal(r->high_at_once + r->high_preempted + r->high_waited + r->high_unplaced,
                         r->high_arrivals);
        assert_true(r->wait_p95 >= r->wait_mean && r->lifetime_mean > 0);
    }
    /* at 150 % load a few high pods find low ones to evict ... */
    assert_true(few.high_preempted > 0 && few.low_evicted > 0);
    /* ... while with most of the load high, many wait, and longer */
    assert_true(many.high_waited > 0);
    assert_true(many.wait_mean > few.wait_mean);
    assert_true((double)many.high_waited / (double)many.high_arrivals >
                (double)few.high_waited / (double)few.high_arrivals);
    gv_sim_trace_free(t);
}

/* Churn with priorities and periodic defragmentation together: moved pods
 * stay possible victims where they land (a moved low pod keeps its victim
 * mark on its new node, never on the old one), so preemption and the
 * planner share one engine without losing a pod: every high arrival ends in
 * one bucket, both mechanisms act, and the run repeats exactly. */
static void test_churn_priorities_with_defrag(void **state)
{
    (void)state;
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=30", 2023, &err), GV_OK);
    assert_int_equal(gv_sim_set_high_priority(t, 20, NULL), GV_OK);
    struct gv_sim_churn_opts o = {.load = 1.3, .lifetimes = 3, .defrag_every = 10, .max_moves = 20};
    struct gv_sim_churn_result a, b, plain;
    if (gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &o, &a, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &o, &b, &err), GV_OK);
    assert_true(a.passes > 0 && a.moves > 0);
    assert_true(a.high_arrivals > 0 && a.high_preempted > 0 && a.low_evicted > 0);
    assert_int_equal(a.high_at_once + a.high_preempted + a.high_waited + a.high_unplaced,
                     a.high_arrivals);
    assert_true(a.moves == b.moves && a.low_evicted == b.low_evicted &&
                a.high_preempted == b.high_preempted && a.failed == b.failed &&
                a.wait_mean == b.wait_mean);
    /* the moves change what preemption meets: the same replay without
     * defragmentation evicts a different set */
    struct gv_sim_churn_opts off = o;
    off.defrag_every = 0;
    assert_int_equal(gv_sim_churn(t, GV_ALLOC_POLICY_FGD, 42, &off, &plain, &err), GV_OK);
    assert_int_equal(plain.moves, 0);
    assert_int_equal(plain.high_arrivals, a.high_arrivals);
    assert_true(plain.low_evicted != a.low_evicted || plain.failed != a.failed ||
                plain.high_preempted != a.high_preempted);
    gv_sim_trace_free(t);
}

static void test_topology_report(void **state)
{
    (void)state;
    const char *n = "sn,cpu_milli,memory_mib,gpu,model\nn4,64000,65536,4,T4\nn3,64000,65536,3,T4\n";
    const char *p = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nd,1000,1024,2,1000\n";
    struct gv_error err = {0};
    struct gv_sim_trace *t = sim_test_trace(n, p);
    assert_false(gv_sim_trace_has_topology(t));
    /* bad specs are refused and change nothing */
    const char *bad[] = {"", "nvlink", "nvlink=", "nvlink=2,nvlink=4", "nvlink=65", "pcie=-1",
                         "nvlink=2,", "nvswitch=8", "nvlink=2;pcie=4", "nvlink=1x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (gv_sim_set_topology(t, bad[i], &err) == GV_OK)
            fail_msg("topology \"%s\" accepted", bad[i]);
        assert_non_null(strstr(err.msg, "topology"));
        assert_false(gv_sim_trace_has_topology(t));
    }
    /* without a layout nothing is counted */
    struct gv_sim_curve cv;
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, 42, 1.0, &cv, NULL), GV_OK);
    assert_int_equal(cv.placed, 3);
    assert_int_equal(cv.multi_gpu, 0);
    gv_sim_curve_free(&cv);
    /* NVLink pairs: n4 = {0,1} {2,3}, n3 = {0,1} {2}; 7 GPUs, 2-GPU pods:
     * 3 placed (n3 keeps one GPU), each on one island, each tight */
    if (gv_sim_set_topology(t, "nvlink=2", &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_true(gv_sim_trace_has_topology(t));
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, 42, 1.0, &cv, NULL), GV_OK);
    assert_int_equal(cv.placed, 3);
    assert_int_equal(cv.multi_gpu, 3);
    assert_int_equal(cv.multi_nvlink, 3);
    assert_int_equal(cv.multi_pcie + cv.multi_spanning, 0);
    assert_int_equal(cv.multi_tight, 3);
    gv_sim_curve_free(&cv);
    /* replayed under shuffled names, the links and the report follow them */
    gv_sim_trace_set_shuffle_names(t, true);
    for (uint64_t s = 1; s <= 8; s++) {
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, s, 1.0, &cv, NULL), GV_OK);
        assert_int_equal(cv.placed, 3);
        assert_int_equal(cv.multi_nvlink, 3);
        assert_int_equal(cv.multi_tight, 3);
        gv_sim_curve_free(&cv);
    }
    gv_sim_trace_set_shuffle_names(t, false);
    /* the report shows the section only when asked to */
    struct gv_sim_report rep = {0};
    uint64_t seed = 42;
    rep.n_policies = 1;
    rep.policies[0] = GV_ALLOC_POLICY_BINPACK;
    rep.n_seeds = 1;
    rep.seeds = &seed;
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, 42, 1.0, &cv, NULL), GV_OK);
    rep.curves = &cv;
    rep.max_pct = cv.n - 1;
    struct gv_sim_buf b = {0};
    gv_sim_report_table(&rep, "t", &b);
    assert_null(strstr(b.data, "one NVLink island"));
    gv_sim_buf_free(&b);
    rep.topology = true;
    gv_sim_report_table(&rep, "t", &b);
    assert_non_null(strstr(b.data, "one NVLink island"));
    assert_non_null(strstr(b.data, "multi_gpu_tightest_set_pct policy=binpack pct=100.0 "
                                   "containers=3.0"));
    gv_sim_buf_free(&b);
    gv_sim_curve_free(&cv);
    gv_sim_trace_free(t);

    /* 3-GPU pods on n3 with pairs: they must span two islands (tight: the
     * layout allows no better); a PCIe switch of 4 holds them on n4 */
    const char *p3 = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt,1000,1024,3,1000\n";
    const char *n1 = "sn,cpu_milli,memory_mib,gpu,model\nn3,64000,65536,3,T4\n";
    t = sim_test_trace(n1, p3);
    assert_int_equal(gv_sim_set_topology(t, "nvlink=2,pcie=4", NULL), GV_OK);
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 1, 1.0, &cv, NULL), GV_OK);
    assert_int_equal(cv.multi_gpu, 1);
    assert_int_equal(cv.multi_nvlink, 0);
    assert_int_equal(cv.multi_pcie, 1);
    assert_int_equal(cv.multi_tight, 1);
    gv_sim_curve_free(&cv);
    assert_int_equal(gv_sim_set_topology(t, "nvlink=2,pcie=0", NULL), GV_OK); /* node keeps its own */
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, 1, 1.0, &cv, NULL), GV_OK);
    assert_int_equal(cv.multi_pcie, 1);
    gv_sim_curve_free(&cv);
    gv_sim_trace_free(t);

    /* a cluster dump's inventory carries the agent's groups */
    static const char gpu_fmt[] =
        "{\\\"uuid\\\":\\\"GPU-%d\\\",\\\"index\\\":%d,\\\"model\\\":\\\"NVIDIA A100-SXM4-40GB\\\","
        "\\\"memoryMiB\\\":40960,\\\"memoryScaling\\\":1.0,\\\"cores\\\":100,\\\"split\\\":4,"
        "\\\"numa\\\":0,\\\"mig\\\":false,\\\"healthy\\\":true,\\\"mode\\\":\\\"vgpu\\\","
        "\\\"nvlinkIsland\\\":%d}";
    char gpus[2048] = "", one[512], dump[4096];
    for (int i = 0; i < 4; i++) {
        snprintf(one, sizeof(one), gpu_fmt, i, i, i < 2 ? 1 : 3);
        if (i > 0)
            strcat(gpus, ",");
        strcat(gpus, one);
    }
    /* a 2-GPU pod and node g with the inventory above, then %s: more items */
    static const char dump_fmt[] =
        "{\"kind\":\"List\",\"items\":[{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\","
        "\"uid\":\"1\"},\"spec\":{\"containers\":[{\"name\":\"m\",\"resources\":{\"limits\":"
        "{\"nvidia.com/gpu\":\"2\"}}}]},\"status\":{\"phase\":\"Pending\"}},"
        "{\"kind\":\"Node\",\"metadata\":{\"name\":\"g\",\"annotations\":"
        "{\"gpuvisor.io/node-gpus\":\"{\\\"version\\\":1,\\\"gpus\\\":[%s]}\"}},"
        "\"status\":{\"allocatable\":{\"cpu\":\"32\",\"memory\":\"128Gi\"}}}%s]}";
    snprintf(dump, sizeof(dump), dump_fmt, gpus, "");
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    if (gv_sim_parse_k8s_cluster(t, "dump.json", dump, strlen(dump), &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_true(gv_sim_trace_has_topology(t));
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_SPREAD, 7, 1.0, &cv, NULL), GV_OK);
    assert_int_equal(cv.placed, 2);
    assert_int_equal(cv.multi_nvlink, 2); /* spread alone would take GPUs 0 and 2 */
    gv_sim_curve_free(&cv);
    gv_sim_trace_free(t);
    /* a node without a layout beside one with it: only the latter's
     * containers are counted (8 GPUs, four 2-GPU pods, two on each) */
    snprintf(dump, sizeof(dump), dump_fmt, gpus,
             ",{\"kind\":\"Node\",\"metadata\":{\"name\":\"h\",\"labels\":"
             "{\"nvidia.com/gpu.product\":\"Tesla-T4\",\"nvidia.com/gpu.memory\":\"15360\"}},"
             "\"status\":{\"capacity\":{\"cpu\":\"32\",\"memory\":\"128Gi\","
             "\"nvidia.com/gpu\":\"4\"}}}");
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    if (gv_sim_parse_k8s_cluster(t, "dump.json", dump, strlen(dump), &err) != GV_OK)
        fail_msg("%s", err.msg);
    for (int pol = 0; pol < GV_ALLOC_POLICY_COUNT; pol++) {
        assert_int_equal(gv_sim_run(t, (gv_alloc_policy)pol, 7, 1.0, &cv, NULL), GV_OK);
        assert_int_equal(cv.placed, 4);
        assert_int_equal(cv.multi_gpu, 2);
        assert_int_equal(cv.multi_nvlink, 2);
        gv_sim_curve_free(&cv);
    }
    gv_sim_trace_free(t);
    /* islands or switches of one GPU (or none) are no layout at all */
    const char *flat[] = {"nvlink=1", "nvlink=0", "pcie=1", "pcie=0", "nvlink=1,pcie=1"};
    for (size_t i = 0; i < sizeof(flat) / sizeof(flat[0]); i++) {
        t = sim_test_trace(n, NULL);
        assert_int_equal(gv_sim_set_topology(t, flat[i], NULL), GV_OK);
        if (gv_sim_trace_has_topology(t))
            fail_msg("\"%s\" makes a layout", flat[i]);
        gv_sim_trace_free(t);
    }
    /* each key's maximum (64 GPUs) is allowed */
    t = sim_test_trace(n, NULL);
    assert_int_equal(gv_sim_set_topology(t, "nvlink=64,pcie=64", NULL), GV_OK);
    assert_true(gv_sim_trace_has_topology(t));
    gv_sim_trace_free(t);
}

/* The report buffer: a line that exactly fills what is left is kept whole
 * (vsnprintf needs room for its NUL too). */
static void test_report_buffer_exact_fill(void **state)
{
    (void)state;
    struct gv_sim_buf b = {0};
    gv_sim_buf_printf(&b, "%s", "");
    assert_false(b.oom);
    assert_int_equal(b.len, 0);
    char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    gv_sim_buf_printf(&b, "%.*s", 1000, big); /* the first 4096 bytes */
    assert_int_equal(b.cap, 4096);
    size_t left = b.cap - b.len;
    gv_sim_buf_printf(&b, "%.*sy", (int)left - 1, big); /* exactly what is left */
    assert_false(b.oom);
    assert_int_equal(b.len, 4096);
    assert_int_equal(strlen(b.data), 4096);
    assert_int_equal(b.data[4095], 'y');
    gv_sim_buf_free(&b);
}

/* One seed: every "+-" is 0.00, never nan (no n - 1 = 0 division), with the
 * offline reference rows; the interconnect section of a workload without
 * multi-GPU containers reads 0.0 %, not nan. */
static void test_report_one_seed_no_nan(void **state)
{
    (void)state;
    const char *n = "sn,cpu_milli,memory_mib,gpu,model\nn4,64000,65536,4,T4\n";
    const char *p = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\n"
                    "b,1000,1024,1,300\n";
    struct gv_sim_trace *t = sim_test_trace(n, p);
    assert_int_equal(gv_sim_set_topology(t, "nvlink=2", NULL), GV_OK);
    struct gv_sim_report r = {0};
    uint64_t seed = 42;
    struct gv_sim_curve cv;
    struct gv_sim_reference ref;
    r.n_policies = 1;
    r.policies[0] = GV_ALLOC_POLICY_FGD;
    r.n_seeds = 1;
    r.seeds = &seed;
    assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_FGD, seed, 1.0, &cv, NULL), GV_OK);
    assert_int_equal(gv_sim_reference(t, seed, &ref, NULL), GV_OK);
    r.curves = &cv;
    r.refs = &ref;
    r.max_pct = cv.n - 1;
    r.topology = true;
    struct gv_sim_buf b = {0};
    gv_sim_report_table(&r, "t", &b);
    assert_false(b.oom);
    if (strstr(b.data, "nan") != NULL)
        fail_msg("nan in the report:\n%s", b.data);
    assert_non_null(strstr(b.data, "one NVLink island"));
    size_t n_sd = 0;
    for (const char *s = b.data; (s = strstr(s, "+- ")) != NULL; s += 3)
        if (strncmp(s, "+- sd", 5) != 0) { /* the table's heading */
            if (strncmp(s, "+- 0.00", 7) != 0)
                fail_msg("a spread over one seed: %.20s\n%s", s, b.data);
            n_sd++;
        }
    assert_true(n_sd >= 4); /* the policy's cells, oracle, bound, capacity */
    gv_sim_buf_free(&b);
    gv_sim_curve_free(&cv);
    gv_sim_trace_free(t);
}

/* "key=N" lists: an item of 63 characters is read, one of 64 refused (the
 * item buffer), and so is an empty item. */
static void test_kv_item_lengths(void **state)
{
    (void)state;
    char spec[128] = "nodes=";
    while (strlen(spec) < 61)
        strcat(spec, "0");
    strcat(spec, "20"); /* 63 characters: nodes=20 */
    assert_int_equal(strlen(spec), 63);
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    if (gv_sim_synthetic(t, spec, 1, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_trace_nodes(t), 20);
    gv_sim_trace_free(t);
    char longer[128] = "nodes=0";
    strcat(longer, spec + 6); /* 64 characters */
    assert_int_equal(strlen(longer), 64);
    const char *bad[] = {longer, "nodes=20,,typed=10", ",nodes=20"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
        if (gv_sim_synthetic(t, bad[i], 1, &err) == GV_OK)
            fail_msg("\"%s\" accepted", bad[i]);
        assert_non_null(strstr(err.msg, "bad item"));
        gv_sim_trace_free(t);
    }
}

/*
 * gv_sim_run: a cluster without GPUs or a workload asking none is refused
 * (nothing to measure); and the GPU policy follows the node policy:
 * binpack fills a GPU before opening another, spread spreads.  One node of
 * two GPUs, pods of 500, 500 and 1000 milli: packed, every order places
 * all three; spread, an order with the 1000 last places only the 500s.
 */
static void test_run_inputs_and_gpu_policy(void **state)
{
    (void)state;
    const char *pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\n"
                       "b,1000,1024,1,500\nc,1000,1024,1,1000\n";
    const char *cpu_pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,0,0\n";
    const char *gpu_node = "sn,cpu_milli,memory_mib,gpu,model\nn,64000,65536,2,T4\n";
    const char *cpu_node = "sn,cpu_milli,memory_mib,gpu,model\nn,64000,65536,0,\n";
    struct {
        const char *nodes, *pods, *why;
    } bad[] = {
        {cpu_node, pods, "no GPUs"},
        {gpu_node, cpu_pods, "requests no GPUs"},
    };
    struct gv_sim_trace *t;
    struct gv_sim_curve cv;
    struct gv_error err = {0};
    for (size_t i = 0; i < 2; i++) {
        t = sim_test_trace(bad[i].nodes, bad[i].pods);
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, 1, 1.0, &cv, &err), GV_EINVAL);
        assert_non_null(strstr(err.msg, bad[i].why));
        gv_sim_trace_free(t);
    }
    t = sim_test_trace(gpu_node, pods);
    int spread_lost = 0;
    for (uint64_t seed = 1; seed <= 24; seed++) {
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_BINPACK, seed, 1.0, &cv, NULL), GV_OK);
        assert_true(cv.n > 100);
        if (cv.allocated[100] < 100.0 - 1e-9)
            fail_msg("binpack, seed %llu: %.1f %% allocated", (unsigned long long)seed,
                     cv.allocated[100]);
        gv_sim_curve_free(&cv);
        assert_int_equal(gv_sim_run(t, GV_ALLOC_POLICY_SPREAD, seed, 1.0, &cv, NULL), GV_OK);
        spread_lost += cv.allocated[100] < 100.0 - 1e-9;
        gv_sim_curve_free(&cv);
    }
    assert_true(spread_lost > 0); /* a third of the orders end with the 1000 */
    gv_sim_trace_free(t);
}

/* More limits of the readers, each at its edge: node and model names, a
 * 64-GPU node, a gpu_spec list past its buffer, a file that is only a
 * byte order mark, optional columns given first, the synthetic spec's
 * sums and a trace that is not empty. */
static void test_reader_edges(void **state)
{
    (void)state;
    const char *nh = "sn,cpu_milli,memory_mib,gpu,model\n";
    static char csv[8192];
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    /* a node name of 199 characters is read, one of 200 refused */
    for (size_t n = 199; n <= 200; n++) {
        size_t o = (size_t)snprintf(csv, sizeof(csv), "%s", nh);
        memset(csv + o, 'n', n);
        snprintf(csv + o + n, sizeof(csv) - o - n, ",1,1,1,T4\n");
        assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
        gv_status rc = gv_sim_parse_openb_nodes(t, "n.csv", csv, strlen(csv), &err);
        if ((rc == GV_OK) != (n == 199) || (rc != GV_OK && strstr(err.msg, "field sn") == NULL))
            fail_msg("node name of %zu: %s", n, rc == GV_OK ? "accepted" : err.msg);
        gv_sim_trace_free(t);
    }
    /* a model name must leave room for its NUL */
    for (size_t n = GV_ALLOC_MODEL_MAX - 1; n <= GV_ALLOC_MODEL_MAX; n++) {
        size_t o = (size_t)snprintf(csv, sizeof(csv), "%sa,1,1,1,", nh);
        memset(csv + o, 'M', n);
        snprintf(csv + o + n, sizeof(csv) - o - n, "\n");
        assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
        gv_status rc = gv_sim_parse_openb_nodes(t, "n.csv", csv, strlen(csv), &err);
        if ((rc == GV_OK) != (n < GV_ALLOC_MODEL_MAX) ||
            (rc != GV_OK && strstr(err.msg, "field model") == NULL))
            fail_msg("model name of %zu: %s", n, rc == GV_OK ? "accepted" : err.msg);
        gv_sim_trace_free(t);
    }
    /* 64 GPUs on a node is the most a node has */
    snprintf(csv, sizeof(csv), "%sa,1,1,64,T4\n", nh);
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    if (gv_sim_parse_openb_nodes(t, "n.csv", csv, strlen(csv), &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_trace_gpu_milli(t), 64000);
    gv_sim_trace_free(t);
    /* gpu_spec: a list of known models longer than its 1 KiB buffer */
    size_t o = (size_t)snprintf(csv, sizeof(csv),
                                "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,500,T4");
    for (int i = 0; i < 400; i++)
        o += (size_t)snprintf(csv + o, sizeof(csv) - o, "|T4");
    snprintf(csv + o, sizeof(csv) - o, "\n");
    expect_bad_pods(csv, "bad.csv:2: field gpu_spec: too long");
    /* a file that is only a byte order mark is empty */
    expect_bad_pods("\xef\xbb\xbf", "bad.csv: empty file");
    /* optional columns given first are read like any other */
    expect_bad_pods("gpu_spec,name,cpu_milli,memory_mib,num_gpu,gpu_milli\nA100,p,1,1,1,500\n",
                    "field gpu_spec: unknown GPU model \"A100\"");
    expect_bad_pods("priority,name,cpu_milli,memory_mib,num_gpu,gpu_milli\nhigh,p,1,1,1,500\n",
                    "field priority");
    /* --synthetic: shares summing to exactly 100 % are fine, and the
     * generator fills only an empty trace */
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    if (gv_sim_synthetic(t, "nodes=10,frac=50,multi=20,cpu=30", 1, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gv_sim_synthetic(t, "nodes=10", 1, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "empty trace"));
    gv_sim_trace_free(t);
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=10,frac=50,multi=20,cpu=31", 1, &err), GV_EINVAL);
    snprintf(csv, sizeof(csv), "%sa,1,1,1,T4\n", nh);
    assert_int_equal(gv_sim_parse_openb_nodes(t, "n.csv", csv, strlen(csv), NULL), GV_OK);
    assert_int_equal(gv_sim_synthetic(t, "nodes=10", 1, &err), GV_EINVAL);
    gv_sim_trace_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openb_readers),
        cmocka_unit_test(test_report_buffer_exact_fill),
        cmocka_unit_test(test_report_one_seed_no_nan),
        cmocka_unit_test(test_kv_item_lengths),
        cmocka_unit_test(test_run_inputs_and_gpu_policy),
        cmocka_unit_test(test_reader_edges),
        cmocka_unit_test(test_openb_broken_files),
        cmocka_unit_test(test_k8s_readers),
        cmocka_unit_test(test_openb_input_defects),
        cmocka_unit_test(test_k8s_cluster_dump),
        cmocka_unit_test(test_reference_known_answer),
        cmocka_unit_test(test_index_replays_identically),
        cmocka_unit_test(test_synthetic_is_seeded),
        cmocka_unit_test(test_protocol_on_known_trace),
        cmocka_unit_test(test_shuffled_node_names),
        cmocka_unit_test(test_exact_turns_the_budget_off),
        cmocka_unit_test(test_protocol_is_deterministic),
        cmocka_unit_test(test_high_priority_preemption),
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_reports),
        cmocka_unit_test(test_topology_report),
        cmocka_unit_test(test_churn_defrag),
        cmocka_unit_test(test_churn_high_priority_waits),
        cmocka_unit_test(test_churn_priorities_with_defrag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
