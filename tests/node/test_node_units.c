/*
 * Unit tests of gpuvisor-node's pure parts: the node config file, the
 * inventory codec (src/contracts/inventory), GFD labels, sysfs NUMA lookup,
 * the gRPC framer and grpc-timeout parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contracts/inventory.h"
#include "node/config/gv_config.h"
#include "node/modes/gv_mode.h"
#include "node/discovery/gv_gpus.h"
#include "node/kubelet/gv_grpc.h"
#include "node/kubelet/gv_plugin.h"
#include "node/discovery/gv_publisher.h"

#define U0 "GPU-11111111-2222-4333-8444-000000000000"

static struct gv_node_config *parse_ok(const char *text, const char *node)
{
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    gv_status st = gv_node_config_parse(text, strlen(text), node, &c, &err);
    if (st != GV_OK)
        fail_msg("unexpected error: %s", err.msg);
    return c;
}

static void parse_fails(const char *text, const char *want)
{
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    assert_int_not_equal(gv_node_config_parse(text, strlen(text), "node1", &c, &err), GV_OK);
    assert_null(c);
    if (strstr(err.msg, want) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.msg, want);
}

static void test_config_defaults(void **state)
{
    (void)state;
    struct gv_node_config *c = parse_ok("{}", "node1");
    struct gv_node_gpu_settings s;
    assert_string_equal(c->resource_name, "nvidia.com/gpu");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_VGPU);
    assert_int_equal(s.split, 10);
    assert_true(s.mem_scaling == 1.0 && s.core_scaling == 1.0);
    gv_node_config_free(c);
}

static void test_config_layers(void **state)
{
    (void)state;
    const char *text =
        "{\"deviceSplitCount\": 8, \"deviceMemoryScaling\": 1.5,"
        " \"gpus\": [{\"index\": 1, \"mode\": \"timeslicing\"}],"
        " \"nodeConfig\": [{\"name\": \"node1\", \"deviceSplitCount\": 4,"
        "   \"filterDevices\": {\"index\": [3]},"
        "   \"gpus\": [{\"uuid\": \"" U0 "\", \"mode\": \"exclusive\"}]},"
        "  {\"name\": \"node2\", \"deviceSplitCount\": 2}]}";
    struct gv_node_config *c = parse_ok(text, "node1");
    struct gv_node_gpu_settings s;
    assert_true(gv_node_config_gpu(c, U0, 0, &s)); /* node rule: exclusive -> split 1 */
    assert_int_equal(s.mode, GV_NODE_MODE_EXCLUSIVE);
    assert_int_equal(s.split, 1);
    assert_true(gv_node_config_gpu(c, "GPU-other", 1, &s)); /* node list replaces top rules */
    assert_int_equal(s.mode, GV_NODE_MODE_VGPU);
    assert_int_equal(s.split, 4);
    assert_true(s.mem_scaling == 1.5);
    assert_false(gv_node_config_gpu(c, "GPU-x", 3, &s)); /* excluded by index */
    gv_node_config_free(c);
    c = parse_ok(text, "node9"); /* no section: top level and its rules */
    assert_true(gv_node_config_gpu(c, "GPU-other", 1, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_TIMESLICING);
    assert_int_equal(s.split, 8);
    gv_node_config_free(c);
}

static void test_config_hami_keys(void **state)
{
    (void)state;
    struct gv_node_config *c = parse_ok(
        "{\"nodeconfig\": [{\"name\": \"node1\", \"operatingmode\": \"hami-core\","
        " \"devicememoryscaling\": 1.8, \"devicesplitcount\": 7, \"migstrategy\": \"none\","
        " \"filterdevices\": {\"uuid\": [\"" U0 "\"], \"index\": []}}]}",
        "node1");
    struct gv_node_gpu_settings s;
    assert_false(gv_node_config_gpu(c, U0, 0, &s));
    assert_true(gv_node_config_gpu(c, "GPU-b", 1, &s));
    assert_int_equal(s.split, 7);
    assert_true(s.mem_scaling == 1.8);
    gv_node_config_free(c);
}

/* HAMi's chart default (tests/data/hami/node-config.json) loads as it is,
 * on the node it names and on any other node. */
static void test_config_hami_chart_default(void **state)
{
    (void)state;
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    const char *path = "tests/data/hami/node-config.json";
    assert_int_equal(gv_node_config_load(path, "your-node-name", &c, &err), GV_OK);
    struct gv_node_gpu_settings s;
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_VGPU); /* operatingmode hami-core */
    assert_int_equal(s.split, 10);
    assert_true(s.mem_scaling == 1.0);
    assert_true(c->hide_numa); /* enablenumatopology: false, HAMi's meaning */
    assert_int_equal(c->preconfigured_mem_mib, 0);
    /* migstrategy: NVIDIA's strategy (docs/mig-cdi.md); enablegetpreferredallocation: noted */
    assert_string_equal(c->mig_strategy, "none");
    assert_int_equal(c->n_notes, 1);
    assert_non_null(strstr(c->notes[0], "GetPreferredAllocation"));
    gv_node_config_free(c);
    assert_int_equal(gv_node_config_load(path, "another-node", &c, &err), GV_OK);
    assert_false(c->hide_numa); /* no section for this node: gpuvisor's default */
    assert_int_equal(c->n_notes, 0);
    gv_node_config_free(c);
}

/* Every other key of HAMi's node config, with HAMi's meaning. */
static void test_config_hami_node_keys(void **state)
{
    (void)state;
    struct gv_node_config *c = parse_ok(
        "{\"nodeconfig\": [{\"name\": \"node1\", \"devicecorescaling\": 2,"
        " \"preconfigureddevicememory\": 131072, \"libcudaloglevel\": \"4\","
        " \"enablenumatopology\": true}]}",
        "node1");
    struct gv_node_gpu_settings s;
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_true(s.core_scaling == 2.0);
    assert_int_equal(c->preconfigured_mem_mib, 131072);
    assert_string_equal(c->libcuda_log_level, "4");
    assert_false(c->hide_numa);
    gv_node_config_free(c);
    c = parse_ok("{\"libcudaloglevel\": 1}", "node1"); /* an integer, as in HAMi's YAML */
    assert_string_equal(c->libcuda_log_level, "1");
    gv_node_config_free(c);
    c = parse_ok("{\"disablecorelimit\": \"true\"}", "node1"); /* a string in HAMi's chart */
    assert_string_equal(c->core_policy, "disable");
    gv_node_config_free(c);
    c = parse_ok("{\"disablecorelimit\": false}", "node1");
    assert_string_equal(c->core_policy, "");
    gv_node_config_free(c);
    /* what gpuvisor cannot do is refused, saying what to write instead */
    parse_fails("{\"nodeconfig\": [{\"name\": \"node1\", \"operatingmode\": \"mig\"}]}",
                "write \"operatingmode\": \"hami-core\"");
    parse_fails("{\"operatingmode\": \"mps\"}", "no mps partitioning");
    parse_fails("{\"migstrategy\": \"all\"}", "is not none, single or mixed");
    parse_fails("{\"libcudaloglevel\": \"9\"}", "libcudaloglevel must be");
    parse_fails("{\"preconfigureddevicememory\": -1}", "preconfigureddevicememory must be");
    /* a typo in another node's entry fails on every node */
    parse_fails("{\"nodeconfig\": [{\"name\": \"other\", \"devicesplitcont\": 4}]}",
                "nodeConfig[other].devicesplitcont is not a known key");
}

static void test_config_errors(void **state)
{
    (void)state;
    parse_fails("{\"deviceSplitCount\": 0}", "deviceSplitCount = 0 is outside");
    parse_fails("{\"deviceSplitCount\": 2.5}", "deviceSplitCount must be an integer");
    parse_fails("{\"mode\": \"bogus\"}", "mode = 'bogus' is not one of vgpu, exclusive");
    parse_fails("{\"deviceSplitCont\": 4}", "deviceSplitCont is not a known key");
    parse_fails("{\"gpus\": [{\"index\": 1, \"uuid\": \"x\"}]}", "exactly one of uuid or index");
    parse_fails("{\"nodeConfig\": [{\"name\": \"node1\", \"deviceMemoryScaling\": -1}]}",
                "nodeConfig[node1].deviceMemoryScaling");
    parse_fails("{\"resourceName\": \"gpu\"}", "not a domain/name resource");
    parse_fails("{\"version\": 2}", "version must be 1");
    parse_fails("{\"a\": 1, \"a\": 2}", "line 1");
    parse_fails("[1]", "must be a JSON object");
}

/*
 * A value of the wrong type is refused with the key's name, never read as a
 * NULL string (a crash of the agent at start) or taken as a default.
 */
static void test_config_wrong_types_refused(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"{\"mode\": 5}", "mode must be a string"},
        {"{\"gpus\": [{\"index\": 0, \"sharingMode\": true}]}", "sharingMode must be a string"},
        {"{\"filterDevices\": {\"uuid\": \"GPU-x\"}}", "filterDevices.uuid must be a list"},
        {"{\"filterDevices\": {\"uuid\": [7]}}", "filterDevices.uuid[0] must be a string"},
        {"{\"sharing\": 5}", "sharing must be an object"},
        {"{\"sharing\": {\"timeSlicing\": {\"renameByDefault\": \"yes\", \"resources\": "
         "[{\"name\": \"nvidia.com/gpu\", \"replicas\": 2}]}}}",
         "renameByDefault must be true or false"},
        {"{\"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": 5, \"replicas\": 2}]}}}",
         "name must be a string"},
        {"{\"cdi\": \"yes\"}", "cdi must be true or false"},
        {"{\"cdiKind\": 5}", "cdiKind must be a string"},
        {"{\"coreUtilizationPolicy\": 5}", "coreUtilizationPolicy must be a string"},
        {"{\"migStrategy\": [\"mixed\"]}", "migStrategy must be a string"},
        {"{\"metrics\": 5}", "metrics must be an object"},
        {"{\"passthrough\": 5}", "passthrough must be an object"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        parse_fails(cases[i][0], cases[i][1]);
}

/* Keys after these are still read: each one's check passes on a good value and goes on. */
static void test_config_keys_after_each_applied(void **state)
{
    (void)state;
    static const char *const first[] = {
        "\"coreUtilizationPolicy\": \"force\"", "\"migStrategy\": \"mixed\"",
        "\"metrics\": {}", "\"passthrough\": {}", "\"cdiKind\": \"example.com/gpu\"",
        "\"cdi\": true", "\"mode\": \"vgpu\"", "\"mode\": \"HAMi-core\"",
        "\"mode\": \"time-slicing\""};
    for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{%s, \"deviceSplitCount\": 7}", first[i]);
        struct gv_node_config *c = parse_ok(text, "node1");
        struct gv_node_gpu_settings s;
        assert_true(gv_node_config_gpu(c, U0, 0, &s));
        if (s.split != 7)
            fail_msg("%s: deviceSplitCount after it not applied (split %u)", text, s.split);
        if (i == 0)
            assert_string_equal(c->core_policy, "force");
        if (i == 1)
            assert_string_equal(c->mig_strategy, "mixed");
        if (i == 4)
            assert_string_equal(c->cdi_kind, "example.com/gpu");
        if (i >= 6) /* HAMi's and NVIDIA's spellings of the modes */
            assert_int_equal(s.mode, i == 8 ? GV_NODE_MODE_TIMESLICING : GV_NODE_MODE_VGPU);
        gv_node_config_free(c);
    }
    /* a sharing resource's device count: 1..1024 */
#define DEVICES(n)                                                                                 \
    "{\"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"nvidia.com/gpu\", "                   \
    "\"replicas\": 2, \"devices\": " n "}]}}}"
    gv_node_config_free(parse_ok(DEVICES("1024"), "node1"));
    parse_fails(DEVICES("1025"), "a count of devices must be 1..1024");
#undef DEVICES
}

/* A file that does not parse: the error names the file. */
static void test_config_load_error_names_file(void **state)
{
    (void)state;
    char path[] = "/tmp/gv-node-config.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "{\"deviceSplitCount\": 0}", 23), 23);
    close(fd);
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    assert_int_not_equal(gv_node_config_load(path, "node1", &c, &err), GV_OK);
    unlink(path);
    assert_null(c);
    if (strstr(err.msg, path) == NULL || strstr(err.msg, "deviceSplitCount") == NULL)
        fail_msg("error '%s' names neither the file nor the key", err.msg);
}

/* migMode (docs/mig-cdi.md, "vGPU slices inside MIG instances"): default whole, per node and per GPU. */
static void test_config_mig_mode(void **state)
{
    (void)state;
    struct gv_node_gpu_settings s;
    struct gv_node_config *c = parse_ok(
        "{\"migMode\": \"vgpu\", \"nodeConfig\": [{\"name\": \"node2\", \"migMode\": \"whole\"}],"
        " \"gpus\": [{\"index\": 1, \"migMode\": \"whole\"}]}",
        "node1");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_true(s.mig_vgpu);
    assert_true(gv_node_config_gpu(c, "GPU-other", 1, &s));
    assert_false(s.mig_vgpu); /* the GPU rule wins */
    gv_node_config_free(c);
    c = parse_ok("{\"migMode\": \"vgpu\", \"nodeConfig\": [{\"name\": \"node2\", \"migMode\": "
                 "\"whole\"}]}",
                 "node2");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_false(s.mig_vgpu); /* the node's entry wins over the top level */
    gv_node_config_free(c);
    c = parse_ok("{}", "node1");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_false(s.mig_vgpu); /* default: MIG devices whole, as before */
    gv_node_config_free(c);
    parse_fails("{\"migMode\": \"mps\"}", "migMode = 'mps' is not whole or vgpu");
    parse_fails("{\"gpus\": [{\"index\": 0, \"migMode\": true}]}", "migMode must be a string");
}

/* deploy/mps/node-config-mps.json, the MPS component's config snippet, loads: GPU 0 in mps mode. */
static void test_config_deploy_mps_snippet(void **state)
{
    (void)state;
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_node_config_load("deploy/mps/node-config-mps.json", "node1", &c, &err), GV_OK);
    struct gv_node_gpu_settings s;
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_MPS);
    assert_int_equal(s.split, 4);
    assert_true(gv_node_config_gpu(c, "GPU-other", 1, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_VGPU);
    gv_node_config_free(c);
}

/* deploy/cdi/node-config-cdi.json loads: CDI on, the spec and driver paths the component mounts. */
static void test_config_deploy_cdi_snippet(void **state)
{
    (void)state;
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_node_config_load("deploy/cdi/node-config-cdi.json", "node1", &c, &err), GV_OK);
    assert_true(c->cdi);
    assert_string_equal(c->cdi_spec_dir, "/var/run/cdi");
    assert_string_equal(c->driver_root, "/");
    assert_string_equal(c->container_driver_root, "/driver-root");
    gv_node_config_free(c);
}

/* NVIDIA's sharing block, as NVIDIA's plugin reads it (docs/node-agent.md, "Configuration file"). */
static void test_config_sharing(void **state)
{
    (void)state;
    struct gv_node_gpu_settings s;
    /* timeSlicing: a device list by index and UUID; others keep the defaults */
    struct gv_node_config *c = parse_ok(
        "{\"sharing\": {\"timeSlicing\": {\"failRequestsGreaterThanOne\": true, \"resources\": ["
        " {\"name\": \"nvidia.com/gpu\", \"replicas\": 3, \"devices\": [1, \"" U0 "\"],"
        "  \"rename\": \"x.com/y\"}, {\"name\": \"nvidia.com/mig-1g.5gb\", \"replicas\": 2}]}},"
        " \"gpus\": [{\"index\": 2, \"mode\": \"exclusive\"}]}",
        "node1");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_TIMESLICING);
    assert_int_equal(s.split, 3);
    assert_true(s.fail_gt_one);
    assert_string_equal(s.resource, "nvidia.com/gpu"); /* no renameByDefault; rename ignored */
    assert_non_null(strstr(c->warnings, "'rename'"));
    assert_true(gv_node_config_gpu(c, "GPU-b", 1, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_TIMESLICING);
    assert_true(gv_node_config_gpu(c, "GPU-c", 3, &s)); /* not listed: the defaults */
    assert_int_equal(s.mode, GV_NODE_MODE_VGPU);
    assert_string_equal(s.resource, "");
    gv_node_config_free(c);
    /* mps wins over timeSlicing; failRequestsGreaterThanOne defaults to true; count selects by index */
    c = parse_ok("{\"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"nvidia.com/gpu\","
                 " \"replicas\": 2}]}, \"mps\": {\"renameByDefault\": true, \"resources\": ["
                 " {\"name\": \"nvidia.com/gpu\", \"replicas\": 4, \"devices\": 1}]}},"
                 " \"gpus\": [{\"index\": 0, \"deviceSplitCount\": 8}]}",
                 "node1");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_MPS);
    assert_int_equal(s.split, 8); /* the GPU rule is more specific */
    assert_true(s.fail_gt_one);
    assert_string_equal(s.resource, "nvidia.com/gpu.shared");
    assert_true(gv_node_config_gpu(c, "GPU-b", 1, &s)); /* devices: 1 -> GPU 0 only */
    assert_int_equal(s.mode, GV_NODE_MODE_VGPU);
    assert_string_equal(s.resource, "");
    gv_node_config_free(c);
    /* a GPU rule taking the GPU out of the sharing mode drops the shared resource */
    c = parse_ok("{\"sharing\": {\"timeSlicing\": {\"renameByDefault\": true, \"resources\": ["
                 " {\"name\": \"nvidia.com/gpu\", \"replicas\": 2}]}},"
                 " \"gpus\": [{\"index\": 0, \"mode\": \"exclusive\"}]}",
                 "node1");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_EXCLUSIVE);
    assert_string_equal(s.resource, "");
    assert_true(gv_node_config_gpu(c, "GPU-b", 1, &s));
    assert_string_equal(s.resource, "nvidia.com/gpu.shared");
    gv_node_config_free(c);
    /* NVIDIA's default config (timeSlicing: {}) shares nothing */
    c = parse_ok("{\"sharing\": {\"timeSlicing\": {}}}", "node1");
    assert_true(gv_node_config_gpu(c, U0, 0, &s));
    assert_int_equal(s.mode, GV_NODE_MODE_VGPU);
    gv_node_config_free(c);
    parse_fails("{\"sharing\": {\"timeSlicing\": {\"resources\": []}}}", "no resources specified");
    parse_fails("{\"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"nvidia.com/gpu\"}]}}}",
                "no replicas specified");
    parse_fails("{\"sharing\": {\"mps\": {\"resources\": [{\"replicas\": 2}]}}}",
                "no resource name specified");
    parse_fails("{\"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"nvidia.com/gpu\","
                " \"replicas\": 1}]}}}",
                "number of replicas must be 2");
    parse_fails("{\"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"nvidia.com/gpu\","
                " \"replicas\": 2, \"devices\": \"some\"}]}}}",
                "the only string accepted is 'all'");
    parse_fails("{\"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"nvidia.com/gpu\","
                " \"replicas\": 2, \"devices\": [\"MIG-1\"]}]}}}",
                "must be a GPU index or a GPU-... UUID");
    parse_fails("{\"sharing\": {\"timeslicing\": {}}}", "not a known key (timeSlicing, mps)");
}

/* The mode table: every mode of the one list has its file, with the required hooks. */
static void test_mode_table(void **state)
{
    (void)state;
    for (int i = 0; i < GV_INVENTORY_MODE_COUNT; i++) {
        const struct gv_mode *m = gv_mode_get((enum gv_inventory_mode)i);
        assert_non_null(m);
        assert_int_equal(m->id, i);
        assert_non_null(m->discover);
        assert_non_null(m->advertise);
        assert_non_null(m->allocate);
        assert_true((m->open == NULL) == (m->close == NULL));
    }
    assert_null(gv_mode_get(GV_INVENTORY_MODE_COUNT));
    assert_true(gv_inventory_mode_whole(GV_INVENTORY_MODE_EXCLUSIVE));
    assert_false(gv_inventory_mode_whole(GV_INVENTORY_MODE_MPS));
}

/* What a rebuild advertises (modes_common.c): a device ID is refused, never
 * cut, when it does not fit the kubelet-facing 63 characters (a cut ID would
 * name another device, or none), and so is a resource name longer than 127
 * (its devices would go out under a name nobody asked for). */
static void test_mode_adv_limits(void **state)
{
    (void)state;
    gv_mode_adv_free(NULL); /* like free(NULL): error paths call it unconditionally */
    struct gv_mode_adv *adv = gv_mode_adv_new();
    assert_non_null(adv);
    struct gv_gpu g = {.healthy = true, .numa = 1, .index = 3};
    snprintf(g.uuid, sizeof(g.uuid), "%s", U0);
    char id[80], id63[64], res[160];
    memset(id, 'a', 64);
    id[63] = '\0';
    memcpy(id63, id, sizeof(id63));
    assert_true(gv_mode_adv_add(adv, "nvidia.com/gpu", id, &g));
    id[63] = 'b';
    id[64] = '\0';
    assert_false(gv_mode_adv_add(adv, "nvidia.com/gpu", id, &g));
    memset(res, 'r', 128);
    res[127] = '\0';
    assert_true(gv_mode_adv_add(adv, res, "x", &g));
    res[127] = 'r';
    res[128] = '\0';
    assert_false(gv_mode_adv_add(adv, res, "y", &g));
    assert_int_equal(gv_mode_adv_resources(adv), 2);
    size_t n = 9;
    const struct gv_plugin_device *d = gv_mode_adv_devices(adv, 0, &n);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].id, id63);
    assert_true(d[0].healthy);
    assert_int_equal(d[0].numa, 1);
    assert_int_equal(d[0].gpu, 3);
    assert_string_equal(gv_mode_adv_resource(adv, 0), "nvidia.com/gpu");
    d = gv_mode_adv_devices(adv, 1, &n);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].id, "x");
    assert_int_equal(strlen(gv_mode_adv_resource(adv, 1)), 127);
    assert_null(gv_mode_adv_resource(adv, 2));
    assert_null(gv_mode_adv_devices(adv, 2, &n));
    assert_int_equal(n, 0);
    gv_mode_adv_free(adv);
}

/* What the driver grants for an active-thread percentage q, as measured on an
 * H200 (tests/gpu/mps_sweep.sh, docs/compute-share.md): floor(q x TPCs / 100) TPCs. */
static unsigned driver_tpcs(unsigned q, unsigned tpcs)
{
    return q * tpcs / 100;
}

static void test_mps_thread_percentage(void **state)
{
    (void)state;
    /* H200 / H100 SXM (132 SMs): 30/70 becomes 19 + 47 of 66 TPCs */
    assert_int_equal(gv_mps_thread_percentage(300, 132), 29);
    assert_int_equal(gv_mps_thread_percentage(700, 132), 72);
    assert_int_equal(gv_mps_thread_percentage(500, 132), 50);
    assert_int_equal(gv_mps_thread_percentage(1000, 132), 100);
    /* A100 (108 SMs): 16 + 38 of 54 */
    assert_int_equal(gv_mps_thread_percentage(300, 108), 30);
    assert_int_equal(gv_mps_thread_percentage(700, 108), 71);
    /* SM count unknown (or odd): the share rounded up to a whole percent */
    assert_int_equal(gv_mps_thread_percentage(300, 0), 30);
    assert_int_equal(gv_mps_thread_percentage(301, 0), 31);
    assert_int_equal(gv_mps_thread_percentage(1, 0), 1);
    assert_int_equal(gv_mps_thread_percentage(700, 131), 70);
    /* a tiny share still gets one TPC */
    assert_int_equal(driver_tpcs(gv_mps_thread_percentage(1, 132), 66), 1);
    for (unsigned tpcs = 2; tpcs <= 100; tpcs++) {
        unsigned sms = 2 * tpcs;
        for (unsigned m = 1; m <= 1000; m++) {
            unsigned q = gv_mps_thread_percentage(m, sms);
            assert_true(q >= 1 && q <= 100);
            /* the share in whole TPCs: down, or up above half the GPU */
            unsigned want = m > 500 ? (m * tpcs + 999) / 1000 : m * tpcs / 1000;
            if (want == 0)
                want = 1;
            assert_int_equal(driver_tpcs(q, tpcs), want);
            /* two clients splitting the GPU: every TPC handed out, none twice
             * (unless one holds less than a TPC's worth: it still gets one; or
             * both hold exactly half of an odd count: neither rounds up) */
            if (m < 1000 && m != 500 && (m * tpcs) % 1000 != 0 && m * tpcs >= 1000 &&
                (1000 - m) * tpcs >= 1000) {
                unsigned q2 = gv_mps_thread_percentage(1000 - m, sms);
                assert_int_equal(driver_tpcs(q, tpcs) + driver_tpcs(q2, tpcs), tpcs);
            }
        }
    }
    /* any set of clients within the GPU: never more TPCs than it has */
    srand(17);
    for (int round = 0; round < 20000; round++) {
        unsigned tpcs = 2 + (unsigned)rand() % 99, left = 1000, total = 0, n = 0;
        while (left > 0 && n < 8) {
            unsigned m = 1 + (unsigned)rand() % left;
            if (m * tpcs < 1000)
                m = (1000 + tpcs - 1) / tpcs; /* at least one TPC's worth (else the floor of 1) */
            if (m > left)
                break;
            total += driver_tpcs(gv_mps_thread_percentage(m, 2 * tpcs), tpcs);
            left -= m;
            n++;
        }
        assert_true(total <= tpcs);
    }
    /* more than 100 TPCs: a percent is more than a TPC; never above the share's */
    for (unsigned m = 1; m <= 1000; m++) {
        unsigned q = gv_mps_thread_percentage(m, 300);
        unsigned want = m > 500 ? (m * 150 + 999) / 1000 : m * 150 / 1000;
        assert_true(driver_tpcs(q, 150) <= (want ? want : 1));
    }
}

/* SMs from NVML's core count: the cores per SM of each architecture. */
static void test_sm_count(void **state)
{
    (void)state;
    assert_int_equal(gv_gpus_sm_count(16896, 9, 0), 132); /* H100 SXM / H200 */
    assert_int_equal(gv_gpus_sm_count(14592, 9, 0), 114); /* H100 PCIe */
    assert_int_equal(gv_gpus_sm_count(6912, 8, 0), 108);  /* A100 */
    assert_int_equal(gv_gpus_sm_count(9216, 8, 6), 72);   /* A10 */
    assert_int_equal(gv_gpus_sm_count(7424, 8, 9), 58);   /* L4 */
    assert_int_equal(gv_gpus_sm_count(5120, 7, 0), 80);   /* V100 */
    assert_int_equal(gv_gpus_sm_count(2560, 7, 5), 40);   /* T4 */
    assert_int_equal(gv_gpus_sm_count(18944, 10, 0), 148); /* B200 */
    assert_int_equal(gv_gpus_sm_count(3584, 6, 0), 0);    /* Pascal: no MPS limits */
    assert_int_equal(gv_gpus_sm_count(3584, 6, 1), 0);    /* GP102: Pascal whatever the minor */
    assert_int_equal(gv_gpus_sm_count(21760, 12, 0), 170); /* RTX 5090: the table's last major */
    assert_int_equal(gv_gpus_sm_count(16896, 13, 0), 0);  /* newer than the table */
    assert_int_equal(gv_gpus_sm_count(16900, 9, 0), 0);   /* not whole SMs */
    assert_int_equal(gv_gpus_sm_count(0, 9, 0), 0);
}

static void test_config_missing_file_is_default(void **state)
{
    (void)state;
    struct gv_node_config *c = NULL;
    assert_int_equal(gv_node_config_load("/nonexistent/node-config.json", "n", &c, NULL), GV_OK);
    assert_int_equal(c->defaults.split, 10);
    gv_node_config_free(c);
}

static void fill(struct gv_inventory *inv)
{
    memset(inv, 0, sizeof(*inv));
    snprintf(inv->driver_version, sizeof(inv->driver_version), "550.54.15");
    snprintf(inv->cuda_version, sizeof(inv->cuda_version), "12.4");
    inv->n_gpus = 2;
    for (int i = 0; i < 2; i++) {
        struct gv_inventory_gpu *g = &inv->gpus[i];
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%d", i);
        snprintf(g->model, sizeof(g->model), "NVIDIA H100 80GB HBM3");
        g->index = (uint32_t)i;
        g->memory_mib = 81559;
        g->memory_scaling = i ? 2.0 : 1.0;
        g->cores = 100;
        g->split = 10;
        g->numa = i ? -1 : 0;
        g->healthy = i == 0;
        g->mode = i ? GV_INVENTORY_MODE_TIMESLICING : GV_INVENTORY_MODE_VGPU;
    }
    snprintf(inv->gpus[1].resource, sizeof(inv->gpus[1].resource), "nvidia.com/gpu.shared");
}

static void test_inventory_round_trip(void **state)
{
    (void)state;
    struct gv_inventory a, b;
    fill(&a);
    char *text = NULL;
    assert_int_equal(gv_inventory_encode(&a, &text, NULL), GV_OK);
    assert_non_null(strstr(text, "\"version\":1"));
    assert_int_equal(gv_inventory_decode(text, strlen(text), &b, NULL), GV_OK);
    assert_int_equal(b.n_gpus, 2);
    assert_string_equal(b.gpus[1].uuid, "GPU-1");
    assert_string_equal(b.gpus[1].resource, "nvidia.com/gpu.shared"); /* optional field */
    assert_string_equal(b.gpus[0].resource, "");
    assert_int_equal(b.gpus[1].mode, GV_INVENTORY_MODE_TIMESLICING);
    assert_int_equal(b.gpus[1].numa, -1);
    assert_false(b.gpus[1].healthy);
    assert_true(b.gpus[1].memory_scaling == 2.0);
    assert_string_equal(b.cuda_version, "12.4");
    /* stable text: the agent compares it to skip needless writes */
    char *again = NULL;
    assert_int_equal(gv_inventory_encode(&b, &again, NULL), GV_OK);
    assert_string_equal(text, again);
    free(text);
    free(again);
}

static void decode_fails(const char *text, const char *want)
{
    struct gv_inventory inv;
    struct gv_error err = {0};
    assert_int_not_equal(gv_inventory_decode(text, strlen(text), &inv, &err), GV_OK);
    assert_int_equal(inv.n_gpus, 0);
    if (strstr(err.msg, want) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.msg, want);
}

static void test_inventory_errors(void **state)
{
    (void)state;
    decode_fails("{\"version\":2,\"gpus\":[]}", "version 2 is not supported");
    decode_fails("{\"version\":1}", "gpus must be a list");
    decode_fails("{\"version\":1,\"gpus\":[{\"uuid\":\"a\"}]}", "gpus[0].model must be a string");
    decode_fails("{\"version\":1,\"gpus\":[{\"uuid\":\"a\",\"model\":\"m\",\"mode\":\"quantum\"}]}",
                 "gpus[0].mode 'quantum'");
    decode_fails("not json", "not JSON");
#define GPU_FMT                                                                                    \
    "{\"uuid\":\"a\",\"index\":0,\"model\":\"m\",\"memoryMiB\":1,\"memoryScaling\":1,"             \
    "\"cores\":100,\"split\":%d,\"numa\":0,\"healthy\":true,\"mode\":\"vgpu\",\"mig\":false}"
    char text[1024], one[400];
    snprintf(one, sizeof(one), GPU_FMT, 0);
    snprintf(text, sizeof(text), "{\"version\":1,\"gpus\":[%s]}", one);
    decode_fails(text, "gpus[0].split = 0 is outside");
    snprintf(one, sizeof(one), GPU_FMT, 1);
    snprintf(text, sizeof(text), "{\"version\":1,\"gpus\":[%s,%s]}", one, one);
    decode_fails(text, "repeats uuid a");
}

static const char *label(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static void test_labels(void **state)
{
    (void)state;
    struct gv_inventory inv;
    fill(&inv);
    json_t *l = gv_publisher_labels(&inv);
    assert_string_equal(label(l, "nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3-SHARED");
    assert_string_equal(label(l, "nvidia.com/gpu.count"), "2");
    assert_string_equal(label(l, "nvidia.com/gpu.memory"), "81559");
    assert_string_equal(label(l, "nvidia.com/gpu.replicas"), "10");
    /* NVIDIA's values only (none|time-slicing|mps); gpuvisor's mode under its own label */
    assert_string_equal(label(l, "nvidia.com/gpu.sharing-strategy"), "none");
    assert_string_equal(label(l, "gpuvisor.io/gpu.sharing-mode"), "vgpu");
    assert_string_equal(label(l, "nvidia.com/cuda.driver.major"), "550");
    assert_string_equal(label(l, "nvidia.com/cuda.driver.minor"), "54");
    assert_string_equal(label(l, "nvidia.com/cuda.driver.rev"), "15");
    assert_string_equal(label(l, "nvidia.com/cuda.runtime.major"), "12");
    assert_string_equal(label(l, "nvidia.com/cuda.runtime.minor"), "4");
    json_decref(l);
}

static void test_numa_from_sysfs(void **state)
{
    (void)state;
    char root[] = "/tmp/gv-numa-XXXXXX";
    assert_non_null(mkdtemp(root));
    char dir[256], file[300];
    snprintf(dir, sizeof(dir), "%s/sys/bus/pci/devices/0000:3b:00.0", root);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(file, sizeof(file), "%s/numa_node", dir);
    FILE *f = fopen(file, "w");
    fputs("1\n", f);
    fclose(f);
    assert_int_equal(gv_gpus_numa_node(root, "00000000:3B:00.0"), 1);
    assert_int_equal(gv_gpus_numa_node(root, "00000000:3C:00.0"), -1);
    assert_int_equal(gv_gpus_numa_node(root, "junk"), -1);
    f = fopen(file, "w");
    fputs("-1\n", f);
    fclose(f);
    assert_int_equal(gv_gpus_numa_node(root, "00000000:3B:00.0"), -1);
    /* the PCI class (GFD's gpu.mode): compute, graphics, the largest code,
     * and 0 for what is not a 24-bit class (missing, junk, too large) */
    static const struct {
        const char *text;
        unsigned want;
    } classes[] = {{"0x030200\n", 0x030200}, {"0x030000\n", 0x030000}, {"0xffffff\n", 0xffffff},
                   {"0x1000000\n", 0}, {"zz\n", 0}};
    snprintf(file, sizeof(file), "%s/class", dir);
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
        f = fopen(file, "w");
        fputs(classes[i].text, f);
        fclose(f);
        assert_int_equal(gv_gpus_pci_class(root, "00000000:3B:00.0"), classes[i].want);
    }
    assert_int_equal(gv_gpus_pci_class(root, "00000000:3C:00.0"), 0);
    /* NVML's upper-case hex, A to F, is sysfs's lower case */
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/sys/bus/pci/devices/0000:af:00.0", root);
    assert_int_equal(system(cmd), 0);
    snprintf(file, sizeof(file), "%s/sys/bus/pci/devices/0000:af:00.0/numa_node", root);
    f = fopen(file, "w");
    fputs("3\n", f);
    fclose(f);
    assert_int_equal(gv_gpus_numa_node(root, "00000000:AF:00.0"), 3);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

static gv_status collect(const uint8_t *msg, size_t len, void *ud, struct gv_error *err)
{
    (void)err;
    char *out = ud;
    strncat(out, (const char *)msg, len);
    strcat(out, "|");
    return GV_OK;
}

/* The kubelet's socket path must fit sockaddr_un with its NUL: 108 bytes
 * is one too many (refused by name), 107 fits (and fails to connect). */
static void test_grpc_client_socket_path_fits(void **state)
{
    (void)state;
    char path[200];
    memset(path, 'k', sizeof(path));
    path[0] = '/';
    struct gv_grpc_reply reply;
    struct gv_error err = {0};
    path[108] = '\0';
    assert_int_equal(gv_grpc_client_unary(path, "/v1beta1.Registration/Register",
                                           (const uint8_t *)"", 0, 1000, -1, &reply, &err),
                     GV_EINVAL);
    assert_non_null(strstr(err.msg, "too long"));
    gv_grpc_reply_clear(&reply);
    path[107] = '\0';
    assert_int_equal(gv_grpc_client_unary(path, "/v1beta1.Registration/Register",
                                           (const uint8_t *)"", 0, 1000, -1, &reply, &err),
                     GV_EUNAVAILABLE);
    assert_non_null(strstr(err.msg, "connect"));
    gv_grpc_reply_clear(&reply);
}

static void test_framer(void **state)
{
    (void)state;
    const uint8_t in[] = {0, 0, 0, 0, 2, 'h', 'i', 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'};
    for (size_t step = 1; step <= sizeof(in); step++) {
        struct gv_grpc_framer f;
        char out[64] = "";
        gv_grpc_framer_init(&f, 16);
        for (size_t off = 0; off < sizeof(in); off += step)
            assert_int_equal(gv_grpc_framer_feed(&f, in + off,
                                                 sizeof(in) - off < step ? sizeof(in) - off : step,
                                                 collect, out, NULL),
                             GV_OK);
        assert_string_equal(out, "hi||abc|");
        assert_true(gv_grpc_framer_idle(&f));
        gv_grpc_framer_clear(&f);
    }
    struct gv_grpc_framer f;
    struct gv_error err;
    char out[64] = "";
    gv_grpc_framer_init(&f, 16);
    const uint8_t big[] = {0, 0, 0, 0, 17};
    assert_int_equal(gv_grpc_framer_feed(&f, big, 5, collect, out, &err), GV_ERANGE);
    assert_non_null(strstr(err.msg, "17 bytes exceeds the limit of 16"));
    gv_grpc_framer_clear(&f);
    const uint8_t comp[] = {1, 0, 0, 0, 1, 'x'};
    assert_int_equal(gv_grpc_framer_feed(&f, comp, 6, collect, out, &err), GV_EUNSUPPORTED);
    gv_grpc_framer_clear(&f);
    const uint8_t half[] = {0, 0, 0, 0, 4, 'a'};
    assert_int_equal(gv_grpc_framer_feed(&f, half, 6, collect, out, NULL), GV_OK);
    assert_false(gv_grpc_framer_idle(&f));
    gv_grpc_framer_clear(&f);
    /* a message of exactly the limit is one message */
    uint8_t full[5 + 16] = {0, 0, 0, 0, 16};
    memset(full + 5, 'z', 16);
    out[0] = '\0';
    assert_int_equal(gv_grpc_framer_feed(&f, full, sizeof(full), collect, out, NULL), GV_OK);
    assert_string_equal(out, "zzzzzzzzzzzzzzzz|");
    gv_grpc_framer_clear(&f);
}

/* A message the handler refuses ends the feed with its status: what follows
 * it in the same bytes is never handed on. */
static gv_status refuse_b(const uint8_t *msg, size_t len, void *ud, struct gv_error *err)
{
    if (len == 1 && msg[0] == 'b')
        return gv_error_set(err, GV_EPARSE, "refused");
    return collect(msg, len, ud, err);
}

static void test_framer_stops_at_a_refused_message(void **state)
{
    (void)state;
    const uint8_t in[] = {0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b', 0, 0, 0, 0, 1, 'c'};
    struct gv_grpc_framer f;
    struct gv_error err;
    char out[16] = "";
    gv_grpc_framer_init(&f, 16);
    assert_int_equal(gv_grpc_framer_feed(&f, in, sizeof(in), refuse_b, out, &err), GV_EPARSE);
    assert_string_equal(out, "a|");
    gv_grpc_framer_clear(&f);
}

static void test_timeout(void **state)
{
    (void)state;
    int64_t ms;
    assert_int_equal(gv_grpc_parse_timeout("100m", 4, &ms, NULL), GV_OK);
    assert_int_equal(ms, 100);
    assert_int_equal(gv_grpc_parse_timeout("2S", 2, &ms, NULL), GV_OK);
    assert_int_equal(ms, 2000);
    assert_int_equal(gv_grpc_parse_timeout("1H", 2, &ms, NULL), GV_OK);
    assert_int_equal(ms, 3600000);
    assert_int_equal(gv_grpc_parse_timeout("1500u", 5, &ms, NULL), GV_OK);
    assert_int_equal(ms, 2);
    assert_int_equal(gv_grpc_parse_timeout("1n", 2, &ms, NULL), GV_OK);
    assert_int_equal(ms, 1);
    assert_int_equal(gv_grpc_parse_timeout("99999999m", 9, &ms, NULL), GV_OK); /* 8 digits */
    assert_int_equal(ms, 99999999);
    assert_int_equal(gv_grpc_parse_timeout("9S", 2, &ms, NULL), GV_OK);
    assert_int_equal(ms, 9000);
    assert_int_equal(gv_grpc_parse_timeout("123456789S", 10, &ms, NULL), GV_EPARSE);
    assert_int_equal(gv_grpc_parse_timeout("/S", 2, &ms, NULL), GV_EPARSE);
    assert_int_equal(gv_grpc_parse_timeout(":S", 2, &ms, NULL), GV_EPARSE);
    assert_int_equal(gv_grpc_parse_timeout("10x", 3, &ms, NULL), GV_EPARSE);
    assert_int_equal(gv_grpc_parse_timeout("m", 1, &ms, NULL), GV_EPARSE);
    assert_int_equal(gv_grpc_parse_timeout("1-m", 3, &ms, NULL), GV_EPARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_config_layers),
        cmocka_unit_test(test_config_hami_keys),
        cmocka_unit_test(test_config_hami_chart_default),
        cmocka_unit_test(test_config_hami_node_keys),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_config_wrong_types_refused),
        cmocka_unit_test(test_config_keys_after_each_applied),
        cmocka_unit_test(test_config_load_error_names_file),
        cmocka_unit_test(test_config_sharing),
        cmocka_unit_test(test_config_mig_mode),
        cmocka_unit_test(test_config_deploy_mps_snippet),
        cmocka_unit_test(test_config_deploy_cdi_snippet),
        cmocka_unit_test(test_mode_table),
        cmocka_unit_test(test_mode_adv_limits),
        cmocka_unit_test(test_mps_thread_percentage),
        cmocka_unit_test(test_sm_count),
        cmocka_unit_test(test_config_missing_file_is_default),
        cmocka_unit_test(test_inventory_round_trip),
        cmocka_unit_test(test_inventory_errors),
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_numa_from_sysfs),
        cmocka_unit_test(test_framer),
        cmocka_unit_test(test_grpc_client_socket_path_fits),
        cmocka_unit_test(test_framer_stops_at_a_refused_message),
        cmocka_unit_test(test_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
