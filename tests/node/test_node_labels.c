/*
 * Golden test of NVIDIA gpu-feature-discovery's labels (labels.c): for each
 * fake node, the complete label set, compared as a whole so a label too
 * many fails as much as a wrong one.  Expected values follow GFD's source
 * (internal/lm of NVIDIA/k8s-device-plugin), the deliberate differences as
 * docs/mig-cdi.md lists them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <regex.h>

#include "node/discovery/gv_gpus.h"
#include "node/discovery/gv_publisher.h"

struct fake_gpu {
    const char *model;
    uint64_t mib;
    int cc_major, cc_minor;
    bool mig_capable, mig;
    enum gv_inventory_mode mode;
    uint32_t split;
    uint32_t pci_class;
    bool renamed;
};

struct fake_node {
    const char *name;
    const char *driver, *cuda, *mig_strategy;
    struct fake_gpu gpus[4];
    size_t n;
    const char *want; /* JSON object of every label */
    const char *migs; /* MIG devices of GPU 0 (profiles, comma-separated); NULL: none */
};

#define H100 "NVIDIA H100 80GB HBM3", 81559, 9, 0, true
#define A100 "NVIDIA A100-SXM4-40GB", 40960, 8, 0, true
#define A10 "NVIDIA A10", 23028, 8, 6, false
#define VERSIONS                                                                                   \
    "\"nvidia.com/cuda.driver.major\":\"550\",\"nvidia.com/cuda.driver.minor\":\"54\","          \
    "\"nvidia.com/cuda.driver.rev\":\"15\",\"nvidia.com/cuda.driver-version.major\":\"550\","    \
    "\"nvidia.com/cuda.driver-version.minor\":\"54\","                                           \
    "\"nvidia.com/cuda.driver-version.revision\":\"15\","                                        \
    "\"nvidia.com/cuda.driver-version.full\":\"550.54.15\","                                     \
    "\"nvidia.com/cuda.runtime.major\":\"12\",\"nvidia.com/cuda.runtime.minor\":\"4\","          \
    "\"nvidia.com/cuda.runtime-version.major\":\"12\","                                          \
    "\"nvidia.com/cuda.runtime-version.minor\":\"4\","                                           \
    "\"nvidia.com/cuda.runtime-version.full\":\"12.4\","
/* GFD's MIG resource labels of a 1g.5gb device under prefix p (fake attributes below). */
#define MIG1G(p, product, count)                                                                   \
    "\"" p ".product\":\"" product "\",\"" p ".count\":\"" count "\",\"" p ".replicas\":\"1\","        \
    "\"" p ".memory\":\"4864\",\"" p ".multiprocessors\":\"14\",\"" p ".slices.gi\":\"1\","          \
    "\"" p ".slices.ci\":\"1\",\"" p ".engines.copy\":\"1\",\"" p ".engines.decoder\":\"0\","          \
    "\"" p ".engines.encoder\":\"0\",\"" p ".engines.jpeg\":\"0\",\"" p ".engines.ofa\":\"0\""
#define COMMON "\"nvidia.com/gfd.timestamp\":\"1700000000\",\"nvidia.com/gpu.present\":\"true\","

static const struct fake_node nodes[] = {
    {"no GPUs", "550.54.15", "12.4", "none", {{0}}, 0,
     "{\"nvidia.com/gfd.timestamp\":\"1700000000\",\"nvidia.com/gpu.present\":\"false\"}", NULL},
    {"two H100, gpuvisor vgpu split 10", "550.54.15", "12.4", "none",
     {{H100, false, GV_INVENTORY_MODE_VGPU, 10, 0x030200, false},
      {H100, false, GV_INVENTORY_MODE_VGPU, 10, 0x030200, false}},
     2,
     "{" COMMON VERSIONS "\"nvidia.com/mig.capable\":\"true\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/gpu.mode\":\"compute\",\"nvidia.com/gpu.product\":\"NVIDIA-H100-80GB-HBM3-SHARED\","
     "\"nvidia.com/gpu.count\":\"2\",\"nvidia.com/gpu.replicas\":\"10\","
     "\"nvidia.com/gpu.memory\":\"81559\",\"nvidia.com/gpu.family\":\"hopper\","
     "\"nvidia.com/gpu.compute.major\":\"9\",\"nvidia.com/gpu.compute.minor\":\"0\","
     "\"nvidia.com/gpu.sharing-strategy\":\"none\",\"gpuvisor.io/gpu.sharing-mode\":\"vgpu\"}", NULL},
    {"mixed models: the larger group (two A10) labels the node, one A100 makes it MIG-capable",
     "550.54.15", "12.4", "none",
     {{A100, false, GV_INVENTORY_MODE_TIMESLICING, 4, 0x030200, false},
      {A10, false, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030000, false},
      {A10, false, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030000, false}},
     3,
     "{" COMMON VERSIONS "\"nvidia.com/mig.capable\":\"true\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/gpu.mode\":\"compute\",\"nvidia.com/gpu.product\":\"NVIDIA-A10\","
     "\"nvidia.com/gpu.count\":\"2\",\"nvidia.com/gpu.replicas\":\"1\","
     "\"nvidia.com/gpu.memory\":\"23028\",\"nvidia.com/gpu.family\":\"ampere\","
     "\"nvidia.com/gpu.compute.major\":\"8\",\"nvidia.com/gpu.compute.minor\":\"6\","
     "\"nvidia.com/gpu.sharing-strategy\":\"none\",\"gpuvisor.io/gpu.sharing-mode\":\"exclusive\"}", NULL},
    {"one A10 time-sliced 4 ways, graphics class", "550.54.15", "12.4", "none",
     {{A10, false, GV_INVENTORY_MODE_TIMESLICING, 4, 0x030000, false}},
     1,
     "{" COMMON VERSIONS "\"nvidia.com/mig.capable\":\"false\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/gpu.mode\":\"graphics\",\"nvidia.com/gpu.product\":\"NVIDIA-A10-SHARED\","
     "\"nvidia.com/gpu.count\":\"1\",\"nvidia.com/gpu.replicas\":\"4\","
     "\"nvidia.com/gpu.memory\":\"23028\",\"nvidia.com/gpu.family\":\"ampere\","
     "\"nvidia.com/gpu.compute.major\":\"8\",\"nvidia.com/gpu.compute.minor\":\"6\","
     "\"nvidia.com/gpu.sharing-strategy\":\"time-slicing\","
     "\"gpuvisor.io/gpu.sharing-mode\":\"timeslicing\"}", NULL},
    {"H100 under MPS, renamed resource (no -SHARED)", "550.54.15", "12.4", "none",
     {{H100, false, GV_INVENTORY_MODE_MPS, 4, 0x030200, true}},
     1,
     "{" COMMON VERSIONS "\"nvidia.com/mig.capable\":\"true\",\"nvidia.com/mps.capable\":\"true\","
     "\"nvidia.com/gpu.mode\":\"compute\",\"nvidia.com/gpu.product\":\"NVIDIA-H100-80GB-HBM3\","
     "\"nvidia.com/gpu.count\":\"1\",\"nvidia.com/gpu.replicas\":\"4\","
     "\"nvidia.com/gpu.memory\":\"81559\",\"nvidia.com/gpu.family\":\"hopper\","
     "\"nvidia.com/gpu.compute.major\":\"9\",\"nvidia.com/gpu.compute.minor\":\"0\","
     "\"nvidia.com/gpu.sharing-strategy\":\"mps\",\"gpuvisor.io/gpu.sharing-mode\":\"mps\"}", NULL},
    {"A100 MIG-enabled beside a whole A100, mixed strategy: whole GPU labels, both counted",
     "550.54.15", "12.4", "mixed",
     {{A100, true, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false},
      {A100, false, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false}},
     2,
     "{" COMMON VERSIONS "\"nvidia.com/mig.capable\":\"true\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/mig.strategy\":\"mixed\","
     "\"nvidia.com/gpu.mode\":\"compute\",\"nvidia.com/gpu.product\":\"NVIDIA-A100-SXM4-40GB\","
     "\"nvidia.com/gpu.count\":\"2\",\"nvidia.com/gpu.replicas\":\"1\","
     "\"nvidia.com/gpu.memory\":\"40960\",\"nvidia.com/gpu.family\":\"ampere\","
     "\"nvidia.com/gpu.compute.major\":\"8\",\"nvidia.com/gpu.compute.minor\":\"0\","
     "\"nvidia.com/gpu.sharing-strategy\":\"none\",\"gpuvisor.io/gpu.sharing-mode\":\"exclusive\"}", NULL},
    {"single, MIG enabled but empty (GFD: -MIG-INVALID, counts 0); MPS not capable on MIG; X.Y driver",
     "535.104", "12.2", "single",
     {{A100, true, GV_INVENTORY_MODE_MPS, 2, 0, false}},
     1,
     "{" COMMON "\"nvidia.com/cuda.driver.major\":\"535\",\"nvidia.com/cuda.driver.minor\":\"104\","
     "\"nvidia.com/cuda.driver.rev\":\"\",\"nvidia.com/cuda.driver-version.major\":\"535\","
     "\"nvidia.com/cuda.driver-version.minor\":\"104\","
     "\"nvidia.com/cuda.driver-version.revision\":\"\","
     "\"nvidia.com/cuda.driver-version.full\":\"535.104\","
     "\"nvidia.com/cuda.runtime.major\":\"12\",\"nvidia.com/cuda.runtime.minor\":\"2\","
     "\"nvidia.com/cuda.runtime-version.major\":\"12\","
     "\"nvidia.com/cuda.runtime-version.minor\":\"2\","
     "\"nvidia.com/cuda.runtime-version.full\":\"12.2\","
     "\"nvidia.com/mig.capable\":\"true\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/mig.strategy\":\"single\","
     "\"nvidia.com/gpu.mode\":\"unknown\","
     "\"nvidia.com/gpu.product\":\"NVIDIA-A100-SXM4-40GB-MIG-INVALID\","
     "\"nvidia.com/gpu.count\":\"0\",\"nvidia.com/gpu.replicas\":\"0\","
     "\"nvidia.com/gpu.memory\":\"0\",\"nvidia.com/gpu.family\":\"ampere\","
     "\"nvidia.com/gpu.compute.major\":\"8\",\"nvidia.com/gpu.compute.minor\":\"0\","
     "\"nvidia.com/gpu.sharing-strategy\":\"none\",\"gpuvisor.io/gpu.sharing-mode\":\"mps\"}", NULL},
    {"mixed: one label set per MIG profile", "550.54.15", "12.4", "mixed",
     {{A100, true, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false}},
     1,
     "{" COMMON VERSIONS "\"nvidia.com/mig.capable\":\"true\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/mig.strategy\":\"mixed\","
     "\"nvidia.com/gpu.mode\":\"compute\",\"nvidia.com/gpu.product\":\"NVIDIA-A100-SXM4-40GB\","
     "\"nvidia.com/gpu.count\":\"1\",\"nvidia.com/gpu.replicas\":\"0\","
     "\"nvidia.com/gpu.memory\":\"40960\",\"nvidia.com/gpu.family\":\"ampere\","
     "\"nvidia.com/gpu.compute.major\":\"8\",\"nvidia.com/gpu.compute.minor\":\"0\","
     "\"nvidia.com/gpu.sharing-strategy\":\"none\",\"gpuvisor.io/gpu.sharing-mode\":\"exclusive\","
     MIG1G("nvidia.com/mig-1g.5gb", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "2") ","
     "\"nvidia.com/mig-3g.20gb.product\":\"NVIDIA-A100-SXM4-40GB-MIG-3g.20gb\","
     "\"nvidia.com/mig-3g.20gb.count\":\"1\",\"nvidia.com/mig-3g.20gb.replicas\":\"1\","
     "\"nvidia.com/mig-3g.20gb.memory\":\"20224\",\"nvidia.com/mig-3g.20gb.multiprocessors\":\"42\","
     "\"nvidia.com/mig-3g.20gb.slices.gi\":\"3\",\"nvidia.com/mig-3g.20gb.slices.ci\":\"3\","
     "\"nvidia.com/mig-3g.20gb.engines.copy\":\"3\",\"nvidia.com/mig-3g.20gb.engines.decoder\":\"1\","
     "\"nvidia.com/mig-3g.20gb.engines.encoder\":\"0\",\"nvidia.com/mig-3g.20gb.engines.jpeg\":\"0\","
     "\"nvidia.com/mig-3g.20gb.engines.ofa\":\"0\"}",
     "1g.5gb,1g.5gb,3g.20gb"},
    {"single, one profile: nvidia.com/gpu.* describe the MIG devices", "550.54.15", "12.4", "single",
     {{A100, true, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false}},
     1,
     "{" COMMON VERSIONS "\"nvidia.com/mig.capable\":\"true\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/mig.strategy\":\"single\",\"nvidia.com/gpu.mode\":\"compute\","
     "\"nvidia.com/gpu.family\":\"ampere\","
     "\"nvidia.com/gpu.compute.major\":\"8\",\"nvidia.com/gpu.compute.minor\":\"0\","
     "\"nvidia.com/gpu.sharing-strategy\":\"none\",\"gpuvisor.io/gpu.sharing-mode\":\"exclusive\","
     MIG1G("nvidia.com/gpu", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "2") "}",
     "1g.5gb,1g.5gb"},
    {"malformed driver and CUDA versions: no version labels (GFD would fail the whole run)",
     "abc", "x", "none",
     {{A10, false, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false}},
     1,
     "{" COMMON "\"nvidia.com/mig.capable\":\"false\",\"nvidia.com/mps.capable\":\"false\","
     "\"nvidia.com/gpu.mode\":\"compute\",\"nvidia.com/gpu.product\":\"NVIDIA-A10\","
     "\"nvidia.com/gpu.count\":\"1\",\"nvidia.com/gpu.replicas\":\"1\","
     "\"nvidia.com/gpu.memory\":\"23028\",\"nvidia.com/gpu.family\":\"ampere\","
     "\"nvidia.com/gpu.compute.major\":\"8\",\"nvidia.com/gpu.compute.minor\":\"6\","
     "\"nvidia.com/gpu.sharing-strategy\":\"none\",\"gpuvisor.io/gpu.sharing-mode\":\"exclusive\"}", NULL},
};

static void build(const struct fake_node *n, struct gv_inventory *inv)
{
    memset(inv, 0, sizeof(*inv));
    snprintf(inv->driver_version, sizeof(inv->driver_version), "%s", n->driver);
    snprintf(inv->cuda_version, sizeof(inv->cuda_version), "%s", n->cuda);
    snprintf(inv->mig_strategy, sizeof(inv->mig_strategy), "%s", n->mig_strategy);
    inv->n_gpus = (uint32_t)n->n;
    for (size_t i = 0; i < n->n; i++) {
        const struct fake_gpu *f = &n->gpus[i];
        struct gv_inventory_gpu *g = &inv->gpus[i];
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%zu", i);
        snprintf(g->model, sizeof(g->model), "%s", f->model);
        g->index = (uint32_t)i;
        g->memory_mib = f->mib;
        g->cc_major = f->cc_major;
        g->cc_minor = f->cc_minor;
        g->mig_capable = f->mig_capable;
        g->mig = f->mig;
        g->mode = f->mode;
        g->split = f->split;
        g->pci_class = f->pci_class;
        g->renamed = f->renamed;
        g->healthy = true;
        if (!f->mig)
            continue;
        /* MIG devices as NVML gives them (the fake NVML's attributes for an A100, 98 SMs) */
        struct gv_gpu gpu;
        memset(&gpu, 0, sizeof(gpu));
        snprintf(gpu.model, sizeof(gpu.model), "%s", f->model);
        gpu.mig = true;
        const char *p = i == 0 && n->migs ? n->migs : "";
        while (*p && gpu.n_migs < GV_GPU_MAX_MIGS) {
            struct gv_mig *m = &gpu.migs[gpu.n_migs++];
            unsigned gs = 0, gb = 0;
            sscanf(p, "%ug.%ugb", &gs, &gb);
            gv_gpus_mig_profile(gs, gs, gb * 1024ull - 256, m->profile, sizeof(m->profile));
            m->gi_slices = m->ci_slices = gs;
            m->sms = 98 * gs / 7;
            m->copy = gs;
            m->decoder = gs / 2;
            m->memory_mib = gb * 1024ull - 256;
            p += strcspn(p, ",");
            p += *p == ',';
        }
        gv_labels_add_migs(inv, &gpu);
    }
}

static void test_gfd_labels_golden_fake_nodes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        struct gv_inventory inv;
        build(&nodes[i], &inv);
        json_t *got = gv_labels_gfd(&inv, 1700000000);
        json_error_t je;
        json_t *want = json_loads(nodes[i].want, 0, &je);
        if (want == NULL)
            fail_msg("node '%s': bad expected JSON: %s", nodes[i].name, je.text);
        if (!json_equal(got, want)) {
            /* the labels that differ, one per line (a whole dump would be cut short) */
            const char *k;
            json_t *v;
            json_object_foreach(got, k, v) {
                const char *w = json_string_value(json_object_get(want, k));
                if (w == NULL || strcmp(w, json_string_value(v)) != 0)
                    print_error("node '%s': %s = '%s', want '%s'\n", nodes[i].name, k,
                                json_string_value(v), w ? w : "(absent)");
            }
            json_object_foreach(want, k, v) if (json_object_get(got, k) == NULL)
                print_error("node '%s': %s absent, want '%s'\n", nodes[i].name, k,
                            json_string_value(v));
            fail();
        }
        json_decref(got);
        json_decref(want);
    }
}

/* The node is labelled by one model, whichever order the GPUs come in. */
/*
 * Every value is a valid Kubernetes label value whatever NVML calls the GPU
 * (at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends): the
 * API server refuses the whole node update for one bad value, and the node
 * would then carry none of the labels.
 */
static void test_gfd_label_values_valid_for_odd_names(void **state)
{
    (void)state;
    static const char *const models[] = {
        " (Tesla) V100-PCIE ", "-leading-dash", "_x_", "....", "",
        "NVIDIA Graphics Device with a very long product name that goes on past sixty-three chars",
        "Ärger GPU", "NVIDIA H100.", "[MIG] A100"};
    regex_t re;
    assert_int_equal(regcomp(&re, "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", REG_EXTENDED),
                     0);
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        struct fake_node n = nodes[1]; /* two H100, vgpu: the product gets -SHARED */
        n.gpus[0].model = n.gpus[1].model = models[m];
        struct gv_inventory inv;
        build(&n, &inv);
        json_t *got = gv_labels_gfd(&inv, 1700000000);
        assert_non_null(got);
        assert_non_null(json_object_get(got, "nvidia.com/gpu.product"));
        const char *k;
        json_t *v;
        json_object_foreach(got, k, v) {
            const char *s = json_string_value(v);
            assert_non_null(s);
            if (strlen(s) > 63 || regexec(&re, s, 0, NULL, 0) != 0)
                fail_msg("model '%s': %s = '%s' is no label value", models[m], k, s);
        }
        json_decref(got);
    }
    regfree(&re);
}

static char *label_of(const struct fake_node *n, const char *key, bool swap01)
{
    struct gv_inventory inv;
    build(n, &inv);
    if (swap01) { /* the same GPUs listed in another order (indices kept) */
        struct gv_inventory_gpu t = inv.gpus[0];
        inv.gpus[0] = inv.gpus[1];
        inv.gpus[1] = t;
    }
    json_t *got = gv_labels_gfd(&inv, 1);
    assert_non_null(got);
    const char *v = json_string_value(json_object_get(got, key));
    char *r = strdup(v != NULL ? v : "(absent)");
    json_decref(got);
    return r;
}

static void expect_label(const struct fake_node *n, const char *key, const char *want,
                         bool swap01)
{
    char *v = label_of(n, key, swap01);
    if (strcmp(v, want) != 0)
        fail_msg("node '%s'%s: %s = '%s', want '%s'", n->name, swap01 ? " (listed swapped)" : "",
                 key, v, want);
    free(v);
}

/*
 * Edges the golden nodes do not reach: letters and digits at the ends of a
 * value are kept; two models with as many GPUs each: the one of the lowest
 * GPU index labels the node, in whatever order they are listed; migStrategy
 * single over MIG GPUs of two models names the first MIG model invalid;
 * migStrategy none never labels MIG devices; MPS with one replica is no MPS
 * sharing.
 */
static void test_gfd_labels_edges(void **state)
{
    (void)state;
    struct fake_node n = {"one exclusive GPU", "550.54.15", "12.4", "none",
                          {{A10, false, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false}},
                          1, NULL, NULL};
    static const char *const names[][2] = {
        {"a GPU z", "a-GPU-z"}, {"Z 9", "Z-9"}, {"9a", "9a"}, {"zZ", "zZ"}, {"A0", "A0"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        n.gpus[0].model = names[i][0];
        expect_label(&n, "nvidia.com/gpu.product", names[i][1], false);
    }

    struct fake_node two = {"A10 and A100, one each", "550.54.15", "12.4", "none",
                            {{A10, false, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false},
                             {A100, false, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false}},
                            2, NULL, NULL};
    expect_label(&two, "nvidia.com/gpu.product", "NVIDIA-A10", false);
    expect_label(&two, "nvidia.com/gpu.product", "NVIDIA-A10", true);

    struct fake_node migs = {"single, MIG GPUs of two models", "550.54.15", "12.4", "single",
                             {{A100, true, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false},
                              {H100, true, GV_INVENTORY_MODE_EXCLUSIVE, 1, 0x030200, false}},
                             2, NULL, "1g.5gb"};
    expect_label(&migs, "nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-MIG-INVALID", false);
    migs.mig_strategy = "none";
    migs.n = 1;
    expect_label(&migs, "nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB", false);
    expect_label(&migs, "nvidia.com/gpu.count", "1", false);

    struct fake_node mps = {"MPS", "550.54.15", "12.4", "none",
                            {{A10, false, GV_INVENTORY_MODE_MPS, 1, 0x030200, false}},
                            1, NULL, NULL};
    expect_label(&mps, "nvidia.com/mps.capable", "false", false);
    expect_label(&mps, "nvidia.com/gpu.sharing-strategy", "none", false);
    mps.gpus[0].split = 2;
    expect_label(&mps, "nvidia.com/mps.capable", "true", false);
    expect_label(&mps, "nvidia.com/gpu.sharing-strategy", "mps", false);
    mps.gpus[0].mode = GV_INVENTORY_MODE_TIMESLICING;
    expect_label(&mps, "nvidia.com/gpu.sharing-strategy", "time-slicing", false);
    mps.gpus[0].split = 1;
    expect_label(&mps, "nvidia.com/gpu.sharing-strategy", "none", false);

    /* Turing is compute capability 7.5, Volta 7.0 and 7.2 */
    n.gpus[0].cc_major = 7;
    n.gpus[0].cc_minor = 5;
    expect_label(&n, "nvidia.com/gpu.family", "turing", false);
    n.gpus[0].cc_minor = 2;
    expect_label(&n, "nvidia.com/gpu.family", "volta", false);

    /* Driver versions: X.Y[.Z] with parts of at most 31 characters, else no version labels */
    char p31[32], p32[33], v[80];
    memset(p31, '7', 31);
    p31[31] = '\0';
    memset(p32, '7', 32);
    p32[32] = '\0';
    snprintf(v, sizeof(v), "550.%s", p31);
    n.driver = v;
    expect_label(&n, "nvidia.com/cuda.driver-version.minor", p31, false);
    const char *const bad[] = {"550.54.15.1", "550..15", ".54", "550", "550.54.", p32};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (bad[i] == p32)
            snprintf(v, sizeof(v), "550.%s", p32);
        n.driver = bad[i] == p32 ? v : bad[i];
        expect_label(&n, "nvidia.com/cuda.driver-version.full", "(absent)", false);
        expect_label(&n, "nvidia.com/cuda.driver.major", "(absent)", false);
    }
}

static void test_gfd_labels_independent_of_gpu_order(void **state)
{
    (void)state;
    struct gv_inventory a, b;
    build(&nodes[2], &a);
    build(&nodes[2], &b);
    struct gv_inventory_gpu t = b.gpus[0];
    b.gpus[0] = b.gpus[2];
    b.gpus[2] = t;
    json_t *la = gv_labels_gfd(&a, 1), *lb = gv_labels_gfd(&b, 1);
    /* gpu.mode follows the first GPU (as GFD's loop); everything else must agree */
    json_object_del(la, "nvidia.com/gpu.mode");
    json_object_del(lb, "nvidia.com/gpu.mode");
    assert_true(json_equal(la, lb));
    json_decref(la);
    json_decref(lb);
}

/*
 * migStrategy single as the agent publishes it (src/node/modes/mig_inventory.c):
 * the MIG-enabled GPU's entry replaced by one entry per MIG device, mode
 * mig, mig false, the parent's index and model.  GFD sees the parent: the
 * labels are those of the parent form, the gpuvisor mode label aside.
 */
static void test_gfd_labels_single_strategy_gpu_entries(void **state)
{
    (void)state;
    const struct fake_node *n = NULL;
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
        if (strncmp(nodes[i].name, "single, one profile", 19) == 0)
            n = &nodes[i];
    assert_non_null(n);
    struct gv_inventory parent, entries;
    build(n, &parent);
    build(n, &entries);
    assert_int_equal(entries.n_gpus, 1);
    for (uint32_t k = 0; k < 2; k++) { /* the two 1g.5gb devices */
        struct gv_inventory_gpu *g = &entries.gpus[k];
        *g = parent.gpus[0];
        snprintf(g->uuid, sizeof(g->uuid), "MIG-%u", k);
        g->memory_mib = 4864;
        g->mode = GV_INVENTORY_MODE_MIG;
        g->mig = false;
    }
    entries.n_gpus = 2;
    json_t *want = gv_labels_gfd(&parent, 1), *got = gv_labels_gfd(&entries, 1);
    assert_string_equal(json_string_value(json_object_get(got, "gpuvisor.io/gpu.sharing-mode")),
                        "mig");
    assert_string_equal(json_string_value(json_object_get(got, "nvidia.com/gpu.count")), "2");
    json_object_del(want, "gpuvisor.io/gpu.sharing-mode");
    json_object_del(got, "gpuvisor.io/gpu.sharing-mode");
    assert_true(json_equal(want, got));
    json_decref(want);
    json_decref(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gfd_labels_golden_fake_nodes),
        cmocka_unit_test(test_gfd_label_values_valid_for_odd_names),
        cmocka_unit_test(test_gfd_labels_edges),
        cmocka_unit_test(test_gfd_labels_independent_of_gpu_order),
        cmocka_unit_test(test_gfd_labels_single_strategy_gpu_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
