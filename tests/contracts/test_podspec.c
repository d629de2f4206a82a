/* Tests for src/contracts/podspec: Pod and Node JSON -> engine inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contracts/inventory.h"
#include "contracts/podspec.h"

static json_t *load(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (j == NULL)
        fail_msg("%s: %s", path, je.text);
    return j;
}

static void test_pod_with_hami_resources(void **state)
{
    (void)state;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    json_t *pod = load("tests/contracts/data/pod-hami.json");
    struct gv_alloc_request *r = NULL;
    struct gv_error err = {0};
    if (gv_podspec_request(&cfg, pod, &r, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(r->uid, "6f1c2b8e-2d7a-4c1e-9b1a-0c5e2f3a4b5c");
    assert_string_equal(r->ns, "ml");
    assert_string_equal(r->name, "train-0");
    assert_int_equal(r->n_containers, 2); /* init container and logger ignored */
    assert_string_equal(r->containers[0].name, "trainer");
    assert_int_equal(r->containers[0].num_gpu, 2);
    assert_int_equal(r->containers[0].mem, 20000);
    assert_int_equal(r->containers[0].milli, 500);
    assert_string_equal(r->containers[1].name, "infer");
    assert_int_equal(r->containers[1].mem_kind, GV_ALLOC_MEM_PCT);
    assert_int_equal(r->containers[1].mem, 25); /* JSON number accepted */
    assert_int_equal(r->containers[1].priority, 1);
    assert_int_equal(r->cpu_milli, 2100);        /* requests win for host resources */
    assert_int_equal(r->mem_mib, 8192 + 64);
    assert_string_equal(r->constraint[GV_ALLOC_USE_TYPE], "a100,h100");
    assert_int_equal(r->node_policy, GV_ALLOC_POLICY_SPREAD);
    assert_string_equal(gv_podspec_annotation(pod, "nvidia.com/use-gputype"), "A100,H100");
    assert_null(gv_podspec_annotation(pod, "missing"));
    gv_alloc_request_free(r);
    json_decref(pod);
}

static void expect_error(const char *json, const char *needle)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_alloc_request *r = NULL;
    struct gv_error err = {0};
    if (gv_podspec_request_text(&cfg, json, strlen(json), &r, &err) == GV_OK)
        fail_msg("accepted %s", json);
    assert_null(r);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
}

static void test_pod_errors_name_the_field(void **state)
{
    (void)state;
    expect_error("{", "pod JSON: line 1");
    expect_error("[]", "expected a JSON object");
    expect_error("{\"metadata\":{},\"spec\":{}}", "spec.containers");
    expect_error("{\"metadata\":{},\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":"
                 "{\"limits\":{\"nvidia.com/gpu\":true}}}]}}",
                 "spec.containers[0].resources.limits[\"nvidia.com/gpu\"]");
    expect_error("{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\"},\"spec\":{\"containers\":"
                 "[{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/gpucores\":\"101\"}}}]}}",
                 "pod n/p: container \"a\": nvidia.com/gpucores");
    expect_error("{\"metadata\":{\"annotations\":{\"x\":1}},\"spec\":{\"containers\":[]}}",
                 "metadata.annotations[\"x\"]");
    expect_error("{\"metadata\":{},\"spec\":{\"containers\":[{\"resources\":{}}]}}",
                 "spec.containers[0].name");
    expect_error("{\"metadata\":{},\"metadata\":{},\"spec\":{\"containers\":[]}}", "duplicate");
}

static void test_pod_without_gpus(void **state)
{
    (void)state;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    const char *json = "{\"metadata\":{\"uid\":\"u\"},\"spec\":{\"containers\":[{\"name\":\"a\","
                       "\"resources\":{\"requests\":{\"cpu\":\"250m\"}}}]}}";
    struct gv_alloc_request *r = NULL;
    assert_int_equal(gv_podspec_request_text(&cfg, json, strlen(json), &r, NULL), GV_OK);
    assert_int_equal(r->n_containers, 0);
    assert_int_equal(r->cpu_milli, 250);
    gv_alloc_request_free(r);
}

static void test_node_from_gfd_labels(void **state)
{
    (void)state;
    json_t *node = load("tests/contracts/data/node-gfd.json");
    struct gv_podspec_node *n = NULL;
    struct gv_error err = {0};
    if (gv_podspec_node(node, &n, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(n->spec.name, "gpu-node-1");
    assert_int_equal(n->spec.cpu_milli, 127500);
    assert_int_equal(n->spec.mem_mib, 1055000000 / 1024 + 1); /* Ki -> MiB, rounded up */
    assert_int_equal(n->spec.n_gpus, 8);
    assert_int_equal(n->spec.n_labels, 4);
    assert_string_equal(n->spec.gpus[7].uuid, "gpu-node-1-gpu7");
    assert_string_equal(n->spec.gpus[0].model, "NVIDIA-A100-SXM4-80GB");
    assert_int_equal(n->spec.gpus[3].mem_mib, 81920);
    /* the spec feeds the engine as is */
    struct gv_alloc_cluster *c;
    assert_int_equal(gv_alloc_cluster_new(NULL, &c, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_upsert(c, &n->spec, NULL), GV_OK);
    struct gv_alloc_totals t;
    gv_alloc_cluster_totals(c, &t);
    assert_int_equal(t.gpus, 8);
    assert_int_equal(t.mem_capacity_mib, 8 * 81920);
    gv_alloc_cluster_free(c);
    gv_podspec_node_free(n);
    json_decref(node);

    node = json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "name", "cpu-only", "status",
                     "capacity", "cpu", "8");
    assert_int_equal(gv_podspec_node(node, &n, NULL), GV_OK);
    assert_int_equal(n->spec.n_gpus, 0);
    assert_int_equal(n->spec.cpu_milli, 8000);
    gv_podspec_node_free(n);
    json_decref(node);

    node = json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "name", "bad", "status", "capacity",
                     "nvidia.com/gpu", "-2");
    assert_int_not_equal(gv_podspec_node(node, &n, &err), GV_OK);
    assert_non_null(strstr(err.msg, "node bad: status resource nvidia.com/gpu"));
    json_decref(node);
}

static void test_node_from_agent_inventory(void **state)
{
    (void)state;
    struct gv_inventory inv;
    memset(&inv, 0, sizeof(inv));
    inv.version = GV_INVENTORY_VERSION;
    snprintf(inv.driver_version, sizeof(inv.driver_version), "550.54.15");
    snprintf(inv.cuda_version, sizeof(inv.cuda_version), "12.4");
    inv.n_gpus = 2;
    for (uint32_t i = 0; i < 2; i++) {
        struct gv_inventory_gpu *g = &inv.gpus[i];
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%u0000000-1111-2222-3333-444444444444", i);
        g->index = i;
        snprintf(g->model, sizeof(g->model), i ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-40GB");
        g->memory_mib = i ? 81920 : 40960;
        g->memory_scaling = i ? 1.0 : 1.5;
        g->cores = 100;
        g->split = i ? 1 : 10;
        g->numa = (int32_t)i;
        g->healthy = i == 0;
        g->mode = i ? GV_INVENTORY_MODE_EXCLUSIVE : GV_INVENTORY_MODE_VGPU;
        snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "00000000:3B:00.0");
    }
    inv.gpus[0].nvlink_group = 1; /* GPU 0's island; GPU 1 in none */
    inv.gpus[1].pcie_group = 2;
    char *text = NULL;
    struct gv_error err = {0};
    if (gv_inventory_encode(&inv, &text, &err) != GV_OK)
        fail_msg("%s", err.msg);
    /* JSON carries the lowest GPU index of the group, absent for none */
    assert_non_null(strstr(text, "\"nvlinkIsland\":0"));
    assert_non_null(strstr(text, "\"pcieSwitch\":1"));
    assert_null(strstr(text, "\"pcieSwitch\":-1"));
    json_t *node = json_pack("{s:{s:s,s:{s:s}},s:{s:{s:s,s:s,s:s}}}", "metadata", "name", "gpu-7",
                             "annotations", GV_INVENTORY_ANNOTATION, text, "status", "capacity",
                             "cpu", "64", "memory", "256Gi", "nvidia.com/gpu", "20");
    free(text);
    struct gv_podspec_node *n = NULL;
    if (gv_podspec_node(node, &n, &err) != GV_OK)
        fail_msg("%s", err.msg);
    /* the inventory wins over the device plugin's count (20 virtual devices) */
    assert_int_equal(n->spec.n_gpus, 2);
    assert_string_equal(n->spec.gpus[0].uuid, "GPU-00000000-1111-2222-3333-444444444444");
    assert_string_equal(n->spec.gpus[1].model, "NVIDIA H100 80GB HBM3");
    assert_int_equal(n->spec.gpus[0].mem_mib, 61440); /* 40960 x 1.5 */
    assert_int_equal(n->spec.gpus[0].split, 10);
    assert_int_equal(n->spec.gpus[0].mode, GV_ALLOC_GPU_SHARED);
    assert_int_equal(n->spec.gpus[1].mode, GV_ALLOC_GPU_EXCLUSIVE);
    assert_false(n->spec.gpus[1].healthy);
    assert_int_equal(n->spec.gpus[1].numa, 1);
    assert_int_equal(n->spec.cpu_milli, 64000);
    assert_int_equal(n->nvlink_group[0], 1);
    assert_int_equal(n->nvlink_group[1], 0);
    assert_int_equal(n->pcie_group[0], 0);
    assert_int_equal(n->pcie_group[1], 2);
    struct gv_alloc_cluster *c;
    assert_int_equal(gv_alloc_cluster_new(NULL, &c, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_upsert(c, &n->spec, NULL), GV_OK);
    assert_int_equal(gv_alloc_node_set_links(c, "gpu-7", n->nvlink_group, n->pcie_group,
                                             n->spec.n_gpus, NULL),
                     GV_OK);
    gv_alloc_cluster_free(c);
    gv_podspec_node_free(n);
    json_decref(node);

    node = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name", "gpu-8", "annotations",
                     GV_INVENTORY_ANNOTATION, "{\"version\":2}");
    assert_int_not_equal(gv_podspec_node(node, &n, &err), GV_OK);
    assert_non_null(strstr(err.msg, "node gpu-8: annotation gpuvisor.io/node-gpus"));
    json_decref(node);
}

/* Real objects carry many entries: node-feature-discovery puts dozens of labels on a node,
 * meshes and operators as many annotations on a pod.  Every entry is read, however many. */
static void test_many_labels_and_annotations(void **state)
{
    (void)state;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    json_t *ann = json_object(), *lim = json_object();
    for (int i = 0; i < 150; i++) {
        char k[64];
        snprintf(k, sizeof(k), "feature.node.kubernetes.io/x-%d", i);
        json_object_set_new(ann, k, json_string("true"));
        snprintf(k, sizeof(k), "example.com/r%d", i);
        json_object_set_new(lim, k, json_string("1"));
    }
    json_object_set_new(ann, "nvidia.com/use-gputype", json_string("H100"));
    json_object_set_new(lim, "nvidia.com/gpu", json_string("1"));
    json_object_set_new(lim, "nvidia.com/gpumem", json_string("3000"));
    json_t *pod = json_pack("{s:{s:s,s:s,s:s,s:O},s:{s:[{s:s,s:{s:O}}]}}", "metadata", "uid", "u",
                            "name", "p", "namespace", "n", "annotations", ann, "spec",
                            "containers", "name", "a", "resources", "limits", lim);
    assert_non_null(pod);
    struct gv_alloc_request *r = NULL;
    struct gv_error err = {0};
    if (gv_podspec_request(&cfg, pod, &r, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(r->n_containers, 1);
    assert_int_equal(r->containers[0].mem, 3000);
    assert_string_equal(r->constraint[GV_ALLOC_USE_TYPE], "h100");
    gv_alloc_request_free(r);
    json_decref(pod);

    json_t *labels = json_object();
    for (int i = 0; i < 150; i++) {
        char k[64];
        snprintf(k, sizeof(k), "feature.node.kubernetes.io/cpu-%d", i);
        json_object_set_new(labels, k, json_string("true"));
    }
    json_object_set_new(labels, "nvidia.com/gpu.product", json_string("NVIDIA-H100"));
    json_t *node = json_pack("{s:{s:s,s:O},s:{s:{s:s}}}", "metadata", "name", "nfd-1", "labels",
                             labels, "status", "capacity", "nvidia.com/gpu", "4");
    struct gv_podspec_node *n = NULL;
    if (gv_podspec_node(node, &n, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(n->spec.n_labels, 151);
    assert_int_equal(n->spec.n_gpus, 4);
    assert_string_equal(n->spec.gpus[3].model, "NVIDIA-H100");
    gv_podspec_node_free(n);
    json_decref(node);
    json_decref(labels);
    json_decref(ann);
    json_decref(lim);
}

/* The JSON's shape: each wrong type is an error naming its field, never an empty map or
 * a table written past its end. */
static void test_pod_shape_errors(void **state)
{
    (void)state;
    expect_error("{\"metadata\":\"m\",\"spec\":{\"containers\":[]}}", "pod: metadata: expected an object");
    expect_error("{\"metadata\":{},\"spec\":[]}", "pod: spec: expected an object");
    expect_error("{\"metadata\":{},\"spec\":{\"containers\":[\"a\"]}}",
                 "spec.containers[0]: expected an object");
    expect_error("{\"metadata\":{},\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":[]}]}}",
                 "spec.containers[0].resources: expected an object");
    expect_error("{\"metadata\":{},\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":"
                 "{\"limits\":[\"nvidia.com/gpu\"]}}]}}",
                 "spec.containers[0].resources.limits: expected an object");
    expect_error("{\"metadata\":{\"annotations\":[]},\"spec\":{\"containers\":[]}}",
                 "metadata.annotations: expected an object");
    /* at most 64 containers: the 65th is refused before any table is filled */
    static char text[8192];
    for (int n = 64; n <= 65; n++) {
        size_t o = (size_t)snprintf(text, sizeof(text), "{\"metadata\":{},\"spec\":{\"containers\":[");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(text + o, sizeof(text) - o,
                                  "%s{\"name\":\"c%d\",\"resources\":{\"requests\":{\"cpu\":\"1\"}}}",
                                  i ? "," : "", i);
        o += (size_t)snprintf(text + o, sizeof(text) - o, "]}}");
        assert_true(o < sizeof(text));
        struct gv_alloc_config cfg;
        gv_alloc_config_default(&cfg);
        struct gv_alloc_request *r = NULL;
        struct gv_error err = {0};
        gv_status rc = gv_podspec_request_text(&cfg, text, o, &r, &err);
        if (n == 64) {
            if (rc != GV_OK)
                fail_msg("64 containers: %s", err.msg);
            assert_int_equal(r->cpu_milli, 64000);
            gv_alloc_request_free(r);
        } else {
            assert_int_not_equal(rc, GV_OK);
            assert_null(r);
            assert_non_null(strstr(err.msg, "more than 64 containers"));
        }
    }
}

static void expect_node_error(json_t *node, const char *needle)
{
    struct gv_podspec_node *n = NULL;
    struct gv_error err = {0};
    if (gv_podspec_node(node, &n, &err) == GV_OK)
        fail_msg("accepted a node (wanted \"%s\")", needle);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    json_decref(node);
}

static void test_node_edges(void **state)
{
    (void)state;
    gv_podspec_node_free(NULL);
    expect_node_error(json_string("n"), "node: expected a JSON object");
    expect_node_error(json_pack("{s:{s:s}}", "metadata", "name", ""), "metadata.name");
    expect_node_error(json_pack("{s:{}}", "metadata"), "metadata.name");
    expect_node_error(json_pack("{s:{s:s},s:{s:{s:{}}}}", "metadata", "name", "x", "status",
                                "capacity", "cpu"),
                      "node x: status resource cpu: expected a quantity");
    expect_node_error(json_pack("{s:{s:s,s:[]}}", "metadata", "name", "x", "labels"),
                      "node x: metadata.labels: expected an object");
    /* the engine's table holds GV_ALLOC_MAX_NODE_GPUS a node: as many are taken, one
     * more refused */
    char most[16], over[16], last[32], why[64];
    snprintf(most, sizeof(most), "%d", GV_ALLOC_MAX_NODE_GPUS);
    snprintf(over, sizeof(over), "%d", GV_ALLOC_MAX_NODE_GPUS + 1);
    snprintf(last, sizeof(last), "big-gpu%d", GV_ALLOC_MAX_NODE_GPUS - 1);
    snprintf(why, sizeof(why), "node big: %d GPUs (at most %d)", GV_ALLOC_MAX_NODE_GPUS + 1,
             GV_ALLOC_MAX_NODE_GPUS);
    json_t *node = json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "name", "big", "status",
                             "capacity", "nvidia.com/gpu", most);
    struct gv_podspec_node *n = NULL;
    assert_int_equal(gv_podspec_node(node, &n, NULL), GV_OK);
    assert_int_equal(n->spec.n_gpus, GV_ALLOC_MAX_NODE_GPUS);
    assert_string_equal(n->spec.gpus[GV_ALLOC_MAX_NODE_GPUS - 1].uuid, last);
    gv_podspec_node_free(n);
    json_decref(node);
    expect_node_error(json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "name", "big", "status",
                                "capacity", "nvidia.com/gpu", over),
                      why);
    /* a memory scaling the agent left unset (0) or nonsensical is no scaling */
    struct gv_inventory_gpu g;
    memset(&g, 0, sizeof(g));
    g.memory_mib = 1000;
    g.split = 1;
    g.healthy = true;
    struct gv_alloc_gpu_spec out;
    for (int i = 0; i < 3; i++) {
        g.memory_scaling = i == 0 ? 0.0 : i == 1 ? -2.0 : 2.0;
        gv_podspec_gpu_from_inventory(&g, &out);
        assert_int_equal(out.mem_mib, i == 2 ? 2000 : 1000);
        assert_true(out.healthy);
    }
    snprintf(g.resource, sizeof(g.resource), "nvidia.com/gpu.shared");
    gv_podspec_gpu_from_inventory(&g, &out);
    assert_false(out.healthy); /* advertised under another name: not ours to place */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_with_hami_resources),
        cmocka_unit_test(test_pod_errors_name_the_field),
        cmocka_unit_test(test_pod_without_gpus),
        cmocka_unit_test(test_node_from_gfd_labels),
        cmocka_unit_test(test_node_from_agent_inventory),
        cmocka_unit_test(test_many_labels_and_annotations),
        cmocka_unit_test(test_pod_shape_errors),
        cmocka_unit_test(test_node_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
