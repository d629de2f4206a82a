/*
 * Whole devices in the contracts (docs/contracts.md, "wholeDevices";
 * docs/scheduler.md, "Whole devices"): MIG devices in the node inventory
 * (kind mig), the scheduler's per-node view of them, a pod's device counts
 * and the count fit.
 */
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

#define MIG1 "MIG-5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01"
#define MIG2 "MIG-5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b02"
#define MIG3 "MIG-5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b03"

static void fill(struct gv_inventory *inv)
{
    memset(inv, 0, sizeof(*inv));
    inv->version = GV_INVENTORY_VERSION;
    inv->n_gpus = 2;
    for (uint32_t i = 0; i < 2; i++) {
        struct gv_inventory_gpu *g = &inv->gpus[i];
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%u", i);
        g->index = i;
        snprintf(g->model, sizeof(g->model), "NVIDIA H100 PCIe");
        g->memory_mib = 81559;
        g->memory_scaling = 1.0;
        g->cores = 100;
        g->split = 10;
        g->healthy = true;
        g->mode = GV_INVENTORY_MODE_VGPU;
        snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "00000000:%02X:00.0", 0x81 + i);
    }
    inv->gpus[0].mig = true;
    const char *ids[3] = {MIG1, MIG2, MIG3};
    const char *prof[3] = {"3g.40gb", "1g.10gb", "1g.10gb"};
    for (uint32_t k = 0; k < 3; k++) {
        struct gv_inventory_whole *w = &inv->whole.dev[inv->whole.n++];
        w->kind = GV_INVENTORY_WHOLE_MIG;
        snprintf(w->resource, sizeof(w->resource), "nvidia.com/mig-%s", prof[k]);
        snprintf(w->id, sizeof(w->id), "%s", ids[k]);
        snprintf(w->pci_bus_id, sizeof(w->pci_bus_id), "00000000:81:00.0");
        snprintf(w->gpu_uuid, sizeof(w->gpu_uuid), "GPU-0");
        snprintf(w->profile, sizeof(w->profile), "%s", prof[k]);
        w->memory_mib = k == 0 ? 40192 : 9856;
        w->healthy = k != 2;
    }
}

static void test_mig_kind_round_trip(void **state)
{
    (void)state;
    struct gv_inventory *inv = malloc(sizeof(*inv)), *back = malloc(sizeof(*back));
    struct gv_error err = {0};
    char *text = NULL;
    fill(inv);
    assert_int_equal(gv_inventory_encode(inv, &text, &err), GV_OK);
    assert_non_null(strstr(text, "{\"kind\":\"mig\",\"resource\":\"nvidia.com/mig-3g.40gb\",\"id\":\"" MIG1
                                 "\",\"pciBusId\":\"00000000:81:00.0\",\"iommuGroup\":\"\","
                                 "\"healthy\":true,\"gpuUuid\":\"GPU-0\",\"profile\":\"3g.40gb\","
                                 "\"memoryMiB\":40192}"));
    if (gv_inventory_decode(text, strlen(text), back, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(back->whole.n, 3);
    assert_int_equal(back->whole.dev[1].kind, GV_INVENTORY_WHOLE_MIG);
    assert_string_equal(back->whole.dev[1].gpu_uuid, "GPU-0");
    assert_string_equal(back->whole.dev[1].profile, "1g.10gb");
    assert_int_equal(back->whole.dev[1].memory_mib, 9856);
    assert_false(back->whole.dev[2].healthy);
    assert_string_equal(gv_inventory_whole_kind_name(GV_INVENTORY_WHOLE_MIG), "mig");
    /* the MIG parent is never sliced; its neighbour is */
    assert_true(gv_inventory_gpu_taken(back, &back->gpus[0]));
    assert_false(gv_inventory_gpu_taken(back, &back->gpus[1]));
    /* MIG enabled alone (strategy none: no MIG device listed) is enough */
    back->whole.n = 0;
    assert_true(gv_inventory_gpu_taken(back, &back->gpus[0]));
    free(text);

    /* passthrough and mdev entries keep the text older agents wrote (no new keys) */
    inv->whole.n = 1;
    inv->whole.dev[0] = (struct gv_inventory_whole){.kind = GV_INVENTORY_WHOLE_PASSTHROUGH,
                                                    .resource = "nvidia.com/GH100_H100_PCIE",
                                                    .id = "0000_41_00.0",
                                                    .pci_bus_id = "0000:41:00.0",
                                                    .iommu_group = "17",
                                                    .healthy = true};
    assert_int_equal(gv_inventory_encode(inv, &text, &err), GV_OK);
    assert_null(strstr(text, "gpuUuid"));
    assert_null(strstr(text, "profile"));
    assert_null(strstr(text, "\"memoryMiB\":0"));
    free(text);
    free(inv);
    free(back);
}

static void test_mig_kind_strict(void **state)
{
    (void)state;
    struct gv_inventory *inv = malloc(sizeof(*inv));
    static const char *bad[][2] = {
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":[{\"kind\":\"mig\",\"resource\":\"r\","
         "\"id\":\"i\",\"pciBusId\":\"p\",\"iommuGroup\":\"\",\"healthy\":true}]}",
         "gpuUuid: required for kind mig"},
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":[{\"kind\":\"mig\",\"resource\":\"r\","
         "\"id\":\"i\",\"pciBusId\":\"p\",\"iommuGroup\":\"\",\"healthy\":true,\"gpuUuid\":7}]}",
         "gpuUuid: expected a string"},
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":[{\"kind\":\"mig\",\"resource\":\"r\","
         "\"id\":\"i\",\"pciBusId\":\"p\",\"iommuGroup\":\"\",\"healthy\":true,\"gpuUuid\":\"G\","
         "\"memoryMiB\":-1}]}",
         "memoryMiB"},
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":[{\"kind\":\"mig\",\"resource\":\"r\","
         "\"id\":\"i\",\"pciBusId\":\"p\",\"iommuGroup\":\"\",\"healthy\":true,\"gpuUuid\":\"G\","
         "\"profile\":\"0123456789012345678901234567890123456789\"}]}",
         "profile: longer than"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gv_error err = {0};
        assert_int_not_equal(gv_inventory_decode(bad[i][0], strlen(bad[i][0]), inv, &err), GV_OK);
        if (strstr(err.msg, bad[i][1]) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i][1]);
        assert_int_equal(inv->whole.n, 0); /* nothing half-decoded */
    }
    free(inv);
}

static void test_node_whole_summary(void **state)
{
    (void)state;
    struct gv_inventory *inv = malloc(sizeof(*inv));
    struct gv_error err = {0};
    char *text = NULL;
    fill(inv);
    assert_int_equal(gv_inventory_encode(inv, &text, &err), GV_OK);
    json_t *node = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name", "mig-1", "annotations",
                             GV_INVENTORY_ANNOTATION, text);
    struct gv_podspec_node *pn = NULL;
    if (gv_podspec_node(node, &pn, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_false(pn->gpus[0].healthy); /* MIG parent: not for slices */
    assert_true(pn->gpus[1].healthy);
    assert_int_equal(pn->n_whole, 3);
    assert_int_equal(pn->n_whole_res, 2);
    assert_string_equal(pn->whole[0].resource, "nvidia.com/mig-3g.40gb");
    assert_int_equal(pn->whole[0].total, 1);
    assert_int_equal(pn->whole[0].healthy, 1);
    assert_string_equal(pn->whole[1].resource, "nvidia.com/mig-1g.10gb");
    assert_int_equal(pn->whole[1].kind, GV_INVENTORY_WHOLE_MIG);
    assert_int_equal(pn->whole[1].total, 2);
    assert_int_equal(pn->whole[1].healthy, 1);
    gv_podspec_node_free(pn);
    json_decref(node);
    free(text);
    free(inv);
}

/* Decodes the inventory root (a JSON object) edited by the caller; returns the status. */
static gv_status decode_json(json_t *root, struct gv_inventory *out, struct gv_error *err)
{
    char *text = json_dumps(root, JSON_COMPACT);
    assert_non_null(text);
    gv_status st = gv_inventory_decode(text, strlen(text), out, err);
    free(text);
    return st;
}

/* Distinct copies of a list's entry: a whole device by its id, a GPU by uuid, index, PCI address. */
static void vary_whole(json_t *o, int k)
{
    char id[64];
    snprintf(id, sizeof(id), "MIG-%04d", k);
    json_object_set_new(o, "id", json_string(id));
}

static void vary_gpu(json_t *o, int k)
{
    char id[32], pci[32];
    snprintf(id, sizeof(id), "GPU-%d", k);
    snprintf(pci, sizeof(pci), "00000000:%02X:00.0", k);
    json_object_set_new(o, "uuid", json_string(id));
    json_object_set_new(o, "index", json_integer(k));
    json_object_set_new(o, "pciBusId", json_string(pci));
}

/* root's list key refilled with most distinct copies of its second entry decodes whole;
 * with one more it is refused (ERANGE, "more than"), never decoded past the table. */
static void list_edge(json_t *root, const char *key, int most, void (*vary)(json_t *, int))
{
    json_t *arr = json_object_get(root, key);
    json_t *proto = json_deep_copy(json_array_get(arr, 1));
    struct gv_inventory *out = malloc(sizeof(*out));
    struct gv_error err = {0};
    assert_non_null(proto);
    assert_non_null(out);
    json_array_clear(arr);
    for (int k = 0; k <= most; k++) {
        json_t *o = json_deep_copy(proto);
        vary(o, k);
        json_array_append_new(arr, o);
    }
    assert_int_equal(decode_json(root, out, &err), GV_ERANGE);
    assert_non_null(strstr(err.msg, "more than"));
    json_array_remove(arr, (size_t)most);
    if (decode_json(root, out, &err) != GV_OK)
        fail_msg("%d %s: %s", most, key, err.msg);
    assert_int_equal(strcmp(key, "gpus") == 0 ? out->n_gpus : out->whole.n, (uint32_t)most);
    json_decref(proto);
    free(out);
}

/* What the decoder holds at its edges: strings as long as their fields (one more is
 * refused, never copied past them), the most GPUs and whole devices a node lists (one more
 * is refused), memory scaling in (0, 100]; and which GPUs are taken from slicing. */
static void test_inventory_bounds_and_taken(void **state)
{
    (void)state;
    struct gv_inventory *inv = malloc(sizeof(*inv)), *out = malloc(sizeof(*out));
    assert_non_null(inv);
    assert_non_null(out);
    fill(inv);
    /* taken: MIG enabled (GPU 0); set aside for passthrough; a whole device on its PCI address */
    assert_true(gv_inventory_gpu_taken(inv, &inv->gpus[0]));
    assert_false(gv_inventory_gpu_taken(inv, &inv->gpus[1]));
    inv->gpus[1].mode = GV_INVENTORY_MODE_PASSTHROUGH;
    assert_true(gv_inventory_gpu_taken(inv, &inv->gpus[1]));
    inv->gpus[1].mode = GV_INVENTORY_MODE_VGPU;
    char *text = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_inventory_encode(inv, &text, &err), GV_OK);
    json_t *root = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(root);
    json_t *g1 = json_array_get(json_object_get(root, "gpus"), 1);
    /* a uuid exactly as long as its field allows, then one longer */
    char uuid[GV_INVENTORY_UUID_MAX + 1];
    memset(uuid, 'u', GV_INVENTORY_UUID_MAX);
    uuid[GV_INVENTORY_UUID_MAX - 1] = '\0';
    json_object_set_new(g1, "uuid", json_string(uuid));
    if (decode_json(root, out, &err) != GV_OK)
        fail_msg("uuid of %d: %s", GV_INVENTORY_UUID_MAX - 1, err.msg);
    assert_string_equal(out->gpus[1].uuid, uuid);
    uuid[GV_INVENTORY_UUID_MAX - 1] = 'u';
    uuid[GV_INVENTORY_UUID_MAX] = '\0';
    json_object_set_new(g1, "uuid", json_string(uuid));
    assert_int_equal(decode_json(root, out, &err), GV_ERANGE);
    assert_non_null(strstr(err.msg, "longer than"));
    json_object_set_new(g1, "uuid", json_string("GPU-1"));
    /* memory scaling */
    static const struct {
        double v;
        bool ok;
    } sc[] = {{0.0, false}, {-1.0, false}, {100.0, true}, {100.5, false}, {0.5, true}};
    for (size_t k = 0; k < sizeof(sc) / sizeof(sc[0]); k++) {
        json_object_set_new(g1, "memoryScaling", json_real(sc[k].v));
        gv_status st = decode_json(root, out, &err);
        if ((st == GV_OK) != sc[k].ok)
            fail_msg("memoryScaling %g: %s", sc[k].v, st == GV_OK ? "accepted" : err.msg);
    }
    json_object_set_new(g1, "memoryScaling", json_real(1.0));
    /* the most whole devices and GPUs a node lists, then one more */
    list_edge(root, "wholeDevices", GV_INVENTORY_MAX_WHOLE, vary_whole);
    json_object_del(root, "wholeDevices");
    list_edge(root, "gpus", GV_INVENTORY_MAX_GPUS, vary_gpu);
    json_decref(root);
    free(inv);
    free(out);
}

static json_t *pod(const char *containers, const char *init)
{
    char buf[2048];
    snprintf(buf, sizeof(buf), "{\"metadata\":{\"uid\":\"u\",\"name\":\"p\",\"namespace\":\"n\"},"
             "\"spec\":{\"containers\":%s%s%s}}", containers, init ? ",\"initContainers\":" : "",
             init ? init : "");
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    if (j == NULL)
        fail_msg("%s: %s", buf, je.text);
    return j;
}

static void test_pod_whole_request(void **state)
{
    (void)state;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_podspec_whole_req r;
    struct gv_error err = {0};
    /* app containers add up, init containers take the largest, limits before requests,
     * gpuvisor's own names and kubernetes.io names are not whole devices */
    json_t *p = pod("[{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/mig-1g.10gb\":\"1\","
                    "\"nvidia.com/gpu\":\"1\",\"cpu\":\"2\"},\"requests\":{\"nvidia.com/mig-1g.10gb\":"
                    "\"5\"}}},{\"name\":\"b\",\"resources\":{\"requests\":{\"nvidia.com/mig-1g.10gb\":2,"
                    "\"example.com/fpga\":\"0\"}}}]",
                    "[{\"name\":\"i\",\"resources\":{\"limits\":{\"nvidia.com/mig-1g.10gb\":\"4\","
                    "\"nvidia.com/GH100_H100_PCIE\":\"1\",\"hugepages-2Mi\":\"1Gi\"}}}]");
    if (gv_podspec_whole_request(&cfg, p, &r, &err) != GV_OK)
        fail_msg("%s", err.msg);
    json_decref(p);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.r[0].resource, "nvidia.com/mig-1g.10gb");
    assert_int_equal(r.r[0].count, 4); /* max(1 + 2, 4) */
    assert_string_equal(r.r[1].resource, "nvidia.com/GH100_H100_PCIE");
    assert_int_equal(r.r[1].count, 1);

    p = pod("[{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/mig-1g.10gb\":\"500m\"}}}]",
            NULL);
    assert_int_not_equal(gv_podspec_whole_request(&cfg, p, &r, &err), GV_OK);
    assert_non_null(strstr(err.msg, "spec.containers[0].resources.limits[\"nvidia.com/mig-1g.10gb\"]"));
    assert_int_equal(r.n, 0);
    json_decref(p);
    /* any other extended resource may hold what its owner likes: left out, not an error */
    p = pod("[{\"name\":\"a\",\"resources\":{\"limits\":{\"example.com/bandwidth\":\"5000\","
            "\"example.com/frac\":\"500m\",\"nvidia.com/mig-1g.10gb\":\"1\"}}}]",
            NULL);
    if (gv_podspec_whole_request(&cfg, p, &r, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.r[0].resource, "nvidia.com/mig-1g.10gb");
    json_decref(p);

    assert_true(gv_podspec_whole_by_name("nvidia.com/mig-2g.20gb"));
    assert_false(gv_podspec_whole_by_name("nvidia.com/mig-"));
    assert_false(gv_podspec_whole_by_name("nvidia.com/gpu"));
}

/* whole_request on the shapes a tenant can write: more names than the table holds, a
 * count of 0, *kubernetes.io names at the domain's edge, and wrong JSON types */
static void test_pod_whole_request_edges(void **state)
{
    (void)state;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_podspec_whole_req r;
    struct gv_error err = {0};
    char limits[1600];
    size_t o = 0;
    /* more foreign names than the table holds: the rest are kube-scheduler's, no error */
    for (int i = 0; i < GV_PODSPEC_WHOLE_REQ_MAX + 4; i++)
        o += (size_t)snprintf(limits + o, sizeof(limits) - o, "%s\"example.com/r%d\":\"1\"",
                              i ? "," : "", i);
    char buf[2000];
    snprintf(buf, sizeof(buf), "[{\"name\":\"a\",\"resources\":{\"limits\":{%s}}}]", limits);
    json_t *p = pod(buf, NULL);
    if (gv_podspec_whole_request(&cfg, p, &r, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(r.n, GV_PODSPEC_WHOLE_REQ_MAX);
    json_decref(p);
    /* more whole-device names (MIG) than it holds: refused, never written past the table */
    o = 0;
    for (int i = 0; i < GV_PODSPEC_WHOLE_REQ_MAX + 1; i++)
        o += (size_t)snprintf(limits + o, sizeof(limits) - o,
                              "%s\"nvidia.com/mig-%dg.%dgb\":\"1\"", i ? "," : "", i + 1, i);
    snprintf(buf, sizeof(buf), "[{\"name\":\"a\",\"resources\":{\"limits\":{%s}}}]", limits);
    p = pod(buf, NULL);
    assert_int_not_equal(gv_podspec_whole_request(&cfg, p, &r, &err), GV_OK);
    assert_non_null(strstr(err.msg, "more than 16 extended resources"));
    assert_int_equal(r.n, 0);
    json_decref(p);
    /* a MIG name asked as 0 asks nothing; *kubernetes.io names are never devices, however
     * short the domain; a long foreign domain is counted */
    p = pod("[{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/mig-1g.10gb\":\"0\","
            "\"kubernetes.io/batch\":\"2\",\"storage.kubernetes.io/scratch\":\"3\","
            "\"accelerators.example.com/fpga\":\"2\"}}}]",
            NULL);
    if (gv_podspec_whole_request(&cfg, p, &r, &err) != GV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.r[0].resource, "accelerators.example.com/fpga");
    assert_int_equal(r.r[0].count, 2);
    json_decref(p);
    /* wrong types are errors naming the field, not an empty request */
    static const struct {
        const char *containers, *needle;
    } bad[] = {
        {"[{\"name\":\"a\",\"resources\":\"x\"}]", "spec.containers[0].resources: expected an object"},
        {"[{\"name\":\"a\",\"resources\":{\"limits\":[1]}}]",
         "spec.containers[0].resources.limits: expected an object"},
        {"[{\"name\":\"a\",\"resources\":{\"requests\":\"1\"}}]",
         "spec.containers[0].resources.requests: expected an object"},
        {"[7]", "spec.containers[0]: expected an object"},
        {"{}", "spec.containers: expected an array"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = pod(bad[i].containers, NULL);
        assert_int_not_equal(gv_podspec_whole_request(&cfg, p, &r, &err), GV_OK);
        if (strstr(err.msg, bad[i].needle) == NULL)
            fail_msg("%s: error \"%s\" lacks \"%s\"", bad[i].containers, err.msg, bad[i].needle);
        json_decref(p);
    }
    p = pod("[{\"name\":\"a\"}]", "[{\"name\":\"i\",\"resources\":{\"limits\":7}}]");
    assert_int_not_equal(gv_podspec_whole_request(&cfg, p, &r, &err), GV_OK);
    assert_non_null(strstr(err.msg, "spec.initContainers[0].resources.limits"));
    json_decref(p);
    p = json_pack("{s:{s:s},s:[]}", "metadata", "uid", "u", "spec");
    assert_int_not_equal(gv_podspec_whole_request(&cfg, p, &r, &err), GV_OK);
    assert_non_null(strstr(err.msg, "pod: spec: expected an object"));
    json_decref(p);
}

static bool known(void *ud, const char *name)
{
    return strcmp(name, (const char *)ud) == 0;
}

static void test_whole_fits(void **state)
{
    (void)state;
    struct gv_podspec_whole res[2] = {{"nvidia.com/mig-1g.10gb", GV_INVENTORY_WHOLE_MIG, 3, 2},
                                      {"nvidia.com/GH100_H100_PCIE", 0, 2, 2}};
    uint32_t held[2] = {1, 0};
    struct gv_podspec_whole_req r = {.n = 1};
    char why[256] = "";
    snprintf(r.r[0].resource, sizeof(r.r[0].resource), "nvidia.com/mig-1g.10gb");
    r.r[0].count = 1;
    uint64_t slack = 99;
    assert_true(gv_podspec_whole_fits(res, 2, held, &r, NULL, NULL, &slack, why, sizeof(why)));
    assert_int_equal(slack, 0); /* 2 healthy - 1 held - 1 asked */
    held[0] = 0;
    assert_true(gv_podspec_whole_fits(res, 2, held, &r, NULL, NULL, &slack, why, sizeof(why)));
    assert_int_equal(slack, 1);
    held[0] = 1;
    r.r[0].count = 2;
    assert_false(gv_podspec_whole_fits(res, 2, held, &r, NULL, NULL, NULL, why, sizeof(why)));
    assert_string_equal(why, "nvidia.com/mig-1g.10gb: 1 free of 2 healthy (3 listed), pod asks 2");
    /* a node without the name: refused for MIG names and names some node lists, */
    snprintf(r.r[0].resource, sizeof(r.r[0].resource), "nvidia.com/mig-7g.80gb");
    r.r[0].count = 1;
    assert_false(gv_podspec_whole_fits(res, 0, NULL, &r, NULL, NULL, NULL, why, sizeof(why)));
    assert_string_equal(why, "node has no nvidia.com/mig-7g.80gb devices");
    snprintf(r.r[0].resource, sizeof(r.r[0].resource), "nvidia.com/TU104GL_Tesla_T4");
    assert_false(gv_podspec_whole_fits(res, 2, held, &r, known, "nvidia.com/TU104GL_Tesla_T4",
                                       NULL, why, sizeof(why)));
    /* other extended resources are kube-scheduler's to check */
    assert_true(gv_podspec_whole_fits(res, 2, held, &r, known, "x", NULL, why, sizeof(why)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mig_kind_round_trip),
        cmocka_unit_test(test_mig_kind_strict),
        cmocka_unit_test(test_node_whole_summary),
        cmocka_unit_test(test_inventory_bounds_and_taken),
        cmocka_unit_test(test_pod_whole_request),
        cmocka_unit_test(test_pod_whole_request_edges),
        cmocka_unit_test(test_whole_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
