/* Scheduler config file: defaults, overrides, errors naming the key. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/gv_scheduler.h"
#include "scheduler/hami_config.h"

static void test_defaults_and_overrides(void **state)
{
    (void)state;
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    assert_string_equal(c.scheduler_name, "gpuvisor-scheduler");
    assert_false(c.filter_feasible);
    assert_string_equal(c.alloc.res.gpu, "nvidia.com/gpu");
    assert_int_equal(c.alloc.score_all_nodes, 5000);
    assert_int_equal(c.alloc.score_budget, 16);
    const char *text =
        "{\"schedulerName\":\"s2\",\"nodePolicy\":\"spread\",\"gpuPolicy\":\"spread\","
        "\"scoreAllNodes\":0,\"scoreBudget\":64,"
        "\"filterReturns\":\"feasible\",\"reservationTimeoutSeconds\":5,"
        "\"heartbeatTimeoutSeconds\":7,\"nodeLabelSelector\":\"gpu=yes\","
        "\"resources\":{\"gpu\":\"example.com/vgpu\",\"gpumem\":\"example.com/vmem\"},"
        "\"defaults\":{\"gpumemMiB\":1024,\"gpucores\":20,\"gpuCount\":2,\"splitCount\":4}}";
    assert_int_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_string_equal(c.scheduler_name, "s2");
    assert_int_equal(c.alloc.node_policy, GV_ALLOC_POLICY_SPREAD);
    assert_int_equal(c.alloc.gpu_policy, GV_ALLOC_GPU_SPREAD);
    assert_int_equal(c.alloc.score_all_nodes, 0);
    assert_int_equal(c.alloc.score_budget, 64);
    assert_true(c.filter_feasible);
    assert_int_equal(c.reservation_ttl_s, 5);
    assert_int_equal(c.heartbeat_timeout_s, 7);
    assert_string_equal(c.node_label_selector, "gpu=yes");
    assert_string_equal(c.alloc.res.gpu, "example.com/vgpu");
    assert_string_equal(c.alloc.res.mem, "example.com/vmem");
    assert_string_equal(c.alloc.res.cores, "nvidia.com/gpucores"); /* untouched */
    assert_int_equal(c.alloc.default_mem_mib, 1024);
    assert_int_equal(c.alloc.default_cores, 20);
    assert_int_equal(c.alloc.default_gpu_num, 2);
    assert_int_equal(c.alloc.default_split, 4);
    gv_sched_config_clear(&c);
}

static void test_errors_name_the_key(void **state)
{
    (void)state;
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"{\"nodePolicy\":\"random\"}", "nodePolicy"},
        {"{\"filterReturns\":1}", "filterReturns"},
        {"{\"scoreAllNodes\":-1}", "scoreAllNodes"},
        {"{\"scoreBudget\":\"16\"}", "scoreBudget"},
        {"{\"reservationTimeoutSeconds\":0}", "reservationTimeoutSeconds"},
        {"{\"bogus\":1}", "unknown key \"bogus\""},
        {"{\"resources\":{\"gpux\":\"a\"}}", "resources.gpux"},
        {"{\"resources\":{\"gpu\":\"\"}}", "resources.gpu"},
        {"{\"defaults\":{\"gpucores\":101}}", "defaults.gpucores"},
        {"{\"schedulerName\":\"a\",\"schedulerName\":\"b\"}", "line"},
        {"[1]", "object"},
        {"{", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gv_sched_config c;
        struct gv_error err = {0};
        assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
        assert_int_not_equal(gv_sched_config_parse(cases[i].text, strlen(cases[i].text), &c, &err),
                             GV_OK);
        if (strstr(err.msg, cases[i].needle) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].needle);
        gv_sched_config_clear(&c);
    }
}

/* HAMi's chart-default device ConfigMap (tests/data/hami) loads as it is. */
static void test_hami_device_config_loads(void **state)
{
    (void)state;
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    assert_int_equal(c.alloc.gpu_policy, GV_ALLOC_GPU_BINPACK); /* gpuvisor's own default */
    if (gv_sched_config_load("tests/data/hami/device-config.yaml", &c, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(c.alloc.res.gpu, "nvidia.com/gpu");
    assert_string_equal(c.alloc.res.mem, "nvidia.com/gpumem");
    assert_string_equal(c.alloc.res.mem_pct, "nvidia.com/gpumem-percentage");
    assert_string_equal(c.alloc.res.cores, "nvidia.com/gpucores");
    assert_string_equal(c.alloc.res.priority, "nvidia.com/priority");
    assert_int_equal(c.alloc.default_mem_mib, 0);
    assert_int_equal(c.alloc.default_cores, 0);
    assert_int_equal(c.alloc.default_gpu_num, 1);
    assert_int_equal(c.alloc.default_split, 10);
    assert_false(c.hide_gpus_from_others); /* overwriteEnv: false */
    assert_string_equal(c.runtime_class, "");
    /* HAMi's defaults within and across nodes */
    assert_int_equal(c.alloc.gpu_policy, GV_ALLOC_GPU_SPREAD);
    assert_int_equal(c.alloc.node_policy, GV_ALLOC_POLICY_BINPACK);
    /* every key that changes nothing here says why */
    const char *want[] = {"deviceMemoryScaling: no effect in the scheduler",
                          "libCudaLogLevel: no effect", "migProfileAllowlist: no effect",
                          "cambricon: no effect, gpuvisor manages NVIDIA GPUs only",
                          "vnpus: no effect", "HAMi's default policies"};
    for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
        bool found = false;
        for (unsigned i = 0; i < c.n_notes; i++)
            found |= strstr(c.notes[i], want[w]) != NULL;
        if (!found)
            fail_msg("no note says '%s'", want[w]);
    }
    gv_sched_config_clear(&c);
}

static void hami_fails(const char *text, const char *want)
{
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    assert_true(gv_sched_config_is_hami(text, strlen(text)));
    assert_int_not_equal(gv_sched_hami_config_parse(text, strlen(text), &c, &err), GV_OK);
    if (strstr(err.msg, want) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.msg, want);
    gv_sched_config_clear(&c);
}

static void test_hami_device_config_keys(void **state)
{
    (void)state;
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    const char *text = "nvidia:\n  resourceCountName: example.com/vgpu\n"
                       "  defaultMemory: 2048\n  defaultCores: 25\n  defaultGPUNum: 2\n"
                       "  overwriteEnv: true\n  runtimeClassName: nvidia\n";
    if (gv_sched_hami_config_parse(text, strlen(text), &c, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(c.alloc.res.gpu, "example.com/vgpu");
    assert_int_equal(c.alloc.default_mem_mib, 2048);
    assert_int_equal(c.alloc.default_cores, 25);
    assert_int_equal(c.alloc.default_gpu_num, 2);
    assert_true(c.hide_gpus_from_others);
    assert_string_equal(c.runtime_class, "nvidia");
    gv_sched_config_clear(&c);
    hami_fails("nvidia:\n  resourceCountNme: x/y\n", "unknown key \"nvidia.resourceCountNme\"");
    hami_fails("nvidia: {}\nnvidai: {}\n", "unknown section \"nvidai\"");
    hami_fails("nvidia:\n  memoryFactor: 4\n", "write the requests in MiB and memoryFactor: 1");
    hami_fails("nvidia:\n  defaultCores: 120\n", "nvidia.defaultCores must be an integer");
    hami_fails("nvidia:\n  deviceMemoryScaling: lots\n", "nvidia.deviceMemoryScaling must be");
    hami_fails("cambricon: {}\n", "\"nvidia\" section");
    hami_fails("nvidia: [1\n", "line");
}

static void test_runtime_switches(void **state)
{
    (void)state;
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    assert_string_equal(c.runtime_class, ""); /* both off by default */
    assert_false(c.hide_gpus_from_others);
    const char *text = "{\"runtimeClassName\":\"nvidia\",\"nonGpuVisibleDevicesNone\":true}";
    assert_int_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_string_equal(c.runtime_class, "nvidia");
    assert_true(c.hide_gpus_from_others);
    text = "{\"nonGpuVisibleDevicesNone\":\"yes\"}";
    assert_int_not_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_non_null(strstr(err.msg, "nonGpuVisibleDevicesNone"));
    /* /metrics per GPU: opt-in (docs/observability.md) */
    assert_false(c.metrics_per_gpu);
    text = "{\"metricsPerGpu\":true}";
    assert_int_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_true(c.metrics_per_gpu);
    text = "{\"metricsPerGpu\":1}";
    assert_int_not_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_non_null(strstr(err.msg, "metricsPerGpu"));
    /* a preemption's hold outlasts kube-scheduler's retry (120 s), whatever the reservations' */
    assert_int_equal(c.hold_ttl_s, 120);
    text = "{\"preemptionHoldSeconds\":300}";
    assert_int_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_int_equal(c.hold_ttl_s, 300);
    text = "{\"preemptionHoldSeconds\":0}";
    assert_int_not_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_non_null(strstr(err.msg, "preemptionHoldSeconds"));
    /* where the dashboard reads the agents: a namespace's name, the deploy's by default */
    assert_string_equal(c.agent_namespace, "gpuvisor-system");
    static const char *const good[] = {"a", "gpu-0z", "0-9",
                                       "n23456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char buf[160];
        snprintf(buf, sizeof(buf), "{\"agentNamespace\":\"%s\"}", good[i]);
        assert_int_equal(gv_sched_config_parse(buf, strlen(buf), &c, &err), GV_OK);
        assert_string_equal(c.agent_namespace, good[i]);
    }
    static const char *const bad[] = {"\"\"", "\"-a\"", "\"a-\"", "\"A\"", "\"a_b\"", "\"a/b\"",
                                      "\"a.b\"", "1", "null",
                                      "\"n234567890123456789012345678901234567890123456789012345678901234\""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char buf[160];
        snprintf(buf, sizeof(buf), "{\"agentNamespace\":%s}", bad[i]);
        assert_int_not_equal(gv_sched_config_parse(buf, strlen(buf), &c, &err), GV_OK);
        assert_non_null(strstr(err.msg, "agentNamespace"));
        assert_string_equal(c.agent_namespace, good[3]); /* the last good one kept */
    }
    gv_sched_config_clear(&c);
}

static void test_shipped_config_parses(void **state)
{
    (void)state;
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    if (gv_sched_config_load("deploy/base/config/scheduler.json", &c, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(c.scheduler_name, "gpuvisor-scheduler");
    gv_sched_config_clear(&c);
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    assert_int_not_equal(gv_sched_config_load("/nonexistent.json", &c, &err), GV_OK);
    assert_non_null(strstr(err.msg, "/nonexistent.json"));
    gv_sched_config_clear(&c);
}

/* What a sweep of config.c and hami_config.c found no test of
 * (docs/contributing.md, "Sweeps"): keys no case set, section types, the
 * ends of each range, and a file's errors naming the file. */
static gv_status parse_one(const char *text, struct gv_sched_config *c, struct gv_error *err)
{
    assert_int_equal(gv_sched_config_default(c, err), GV_OK);
    return gv_sched_config_is_hami(text, strlen(text))
               ? gv_sched_hami_config_parse(text, strlen(text), c, err)
               : gv_sched_config_parse(text, strlen(text), c, err);
}

static void expect_fail(const char *text, const char *needle)
{
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_not_equal(parse_one(text, &c, &err), GV_OK);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("'%s': error '%s' lacks '%s'", text, err.msg, needle);
    gv_sched_config_clear(&c);
}

static void test_sweep_found_keys_and_ranges(void **state)
{
    (void)state;
    struct gv_sched_config c;
    struct gv_error err = {0};
    const char *text = "{\"selfCheckSeconds\":86400,\"nodePolicy\":\"binpack\","
                       "\"reservationTimeoutSeconds\":86400}";
    assert_int_equal(parse_one(text, &c, &err), GV_OK);
    assert_int_equal(c.self_check_s, 86400);
    assert_int_equal(c.reservation_ttl_s, 86400);
    assert_int_equal(c.alloc.node_policy, GV_ALLOC_POLICY_BINPACK);
    gv_sched_config_clear(&c);
    expect_fail("{\"selfCheckSeconds\":86401}", "selfCheckSeconds");
    /* a section of the wrong type is an error, not an empty section */
    expect_fail("{\"resources\":5}", "\"resources\" must be an object");
    expect_fail("{\"defaults\":[1]}", "\"defaults\" must be an object");
    /* lists: up to 1024 entries */
    char big[16 * 1100];
    for (int n = 1024; n <= 1025; n++) {
        size_t o = (size_t)snprintf(big, sizeof(big), "{\"optOutNamespaces\":[");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(big + o, sizeof(big) - o, "%s\"ns%d\"", i ? "," : "", i);
        snprintf(big + o, sizeof(big) - o, "]}");
        gv_status st = parse_one(big, &c, &err);
        if (n == 1024) {
            assert_int_equal(st, GV_OK);
            assert_string_equal(c.admission.opt_out_namespaces[1023], "ns1023");
        } else {
            assert_int_not_equal(st, GV_OK);
            assert_non_null(strstr(err.msg, "optOutNamespaces"));
        }
        gv_sched_config_clear(&c);
    }
    /* a file's parse error names the file */
    char path[] = "/tmp/gv-sched-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char bad[] = "{\"nodePolicy\":\"random\"}";
    assert_int_equal(write(fd, bad, sizeof(bad) - 1), (ssize_t)(sizeof(bad) - 1));
    close(fd);
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    assert_int_not_equal(gv_sched_config_load(path, &c, &err), GV_OK);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "nodePolicy"));
    gv_sched_config_clear(&c);
    unlink(path);

    /* HAMi's keys: deviceSplitCount sets the split of nodes whose inventory
     * gives none, 1..1024 */
    assert_int_equal(parse_one("nvidia:\n  deviceSplitCount: 7\n", &c, &err), GV_OK);
    assert_int_equal(c.alloc.default_split, 7);
    gv_sched_config_clear(&c);
    assert_int_equal(parse_one("nvidia:\n  deviceSplitCount: 1024\n", &c, &err), GV_OK);
    assert_int_equal(c.alloc.default_split, 1024);
    gv_sched_config_clear(&c);
    expect_fail("nvidia:\n  deviceSplitCount: 1025\n", "nvidia.deviceSplitCount must be");
    expect_fail("nvidia:\n  deviceSplitCount: 0\n", "nvidia.deviceSplitCount must be");
    /* runtimeClassName must be a name: not a mapping, not past its size */
    expect_fail("nvidia:\n  runtimeClassName: {a: b}\n", "nvidia.runtimeClassName must be a name");
    char longname[400];
    snprintf(longname, sizeof(longname), "nvidia:\n  runtimeClassName: %0300d\n", 7);
    expect_fail(longname, "nvidia.runtimeClassName must be a name");
    /* scaling factors: (0, 100] */
    assert_int_equal(parse_one("nvidia:\n  deviceCoreScaling: 100\n", &c, &err), GV_OK);
    gv_sched_config_clear(&c);
    expect_fail("nvidia:\n  deviceCoreScaling: 150\n", "must be a number in (0, 100]");
    expect_fail("nvidia:\n  deviceCoreScaling: 0\n", "must be a number in (0, 100]");
    expect_fail("nvidia:\n  deviceMemoryScaling: -5\n", "must be a number in (0, 100]");
    /* resource names must be domain/name */
    expect_fail("nvidia:\n  resourceMemoryName: gpumem\n", "must be a domain/name resource");
}

static void test_security_keys(void **state)
{
    (void)state;
    struct gv_sched_config c;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&c, &err), GV_OK);
    assert_null(c.admission.writers);
    assert_null(c.admission.opt_out_namespaces);
    const char *text = "{\"placementKeyFile\":\"/k\",\"insecureUnsignedPlacements\":true,"
                       "\"acceptUnsignedPlacementsBefore\":\"2026-11-26T00:00:00Z\","
                       "\"placementWriters\":[\"system:serviceaccount:x:y\"],"
                       "\"optOutNamespaces\":[\"ml-admin\",\"bench\"]}";
    assert_int_equal(gv_sched_config_parse(text, strlen(text), &c, &err), GV_OK);
    assert_string_equal(c.placement_key_file, "/k");
    assert_true(c.insecure_unsigned);
    assert_int_equal(c.unsigned_before, 1795651200); /* date -d 2026-11-26T00:00:00Z +%s */
    assert_string_equal(c.admission.writers[0], "system:serviceaccount:x:y");
    assert_null(c.admission.writers[1]);
    assert_string_equal(c.admission.opt_out_namespaces[1], "bench");
    assert_null(c.admission.opt_out_namespaces[2]);
    /* A missing key file is an error naming it, and leaves no key. */
    assert_int_equal(gv_sched_config_load_key(&c, NULL, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "/k"));
    assert_null(c.placement_key);
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"{\"acceptUnsignedPlacementsBefore\":\"yesterday\"}", "RFC 3339"},
        {"{\"acceptUnsignedPlacementsBefore\":\"2026-11-26T00:00:00+01:00\"}", "RFC 3339"},
        {"{\"optOutNamespaces\":\"ml-admin\"}", "array of strings"},
        {"{\"optOutNamespaces\":[\"\"]}", "optOutNamespaces[0]"},
        {"{\"placementWriters\":[1]}", "placementWriters[0]"},
        {"{\"insecureUnsignedPlacements\":\"yes\"}", "true or false"},
        {"{\"placementKeyFile\":\"\"}", "non-empty"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(gv_sched_config_parse(bad[i].text, strlen(bad[i].text), &c, &err),
                         GV_EINVAL);
        if (strstr(err.msg, bad[i].needle) == NULL)
            fail_msg("%s: '%s' lacks '%s'", bad[i].text, err.msg, bad[i].needle);
    }
    gv_sched_config_clear(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_security_keys),
        cmocka_unit_test(test_defaults_and_overrides),
        cmocka_unit_test(test_errors_name_the_key),
        cmocka_unit_test(test_shipped_config_parses),
        cmocka_unit_test(test_hami_device_config_loads),
        cmocka_unit_test(test_hami_device_config_keys),
        cmocka_unit_test(test_runtime_switches),
        cmocka_unit_test(test_sweep_found_keys_and_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
