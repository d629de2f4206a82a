/*
 * Passthrough and mediated devices (src/node/passthrough/passthrough.c) against the
 * fake sysfs tree (tests/fakes/sysfs): names from a pci.ids excerpt, IOMMU
 * group integrity, Allocate device specs and environment, hot removal, and
 * the binding helper driven through the fake PCI core.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "contracts/inventory.h"
#include "contracts/podspec.h"
#include "node/config/gv_config.h"
#include "fake_sysfs.h"
#include "node/passthrough/gv_passthrough.h"
#include "node/passthrough/passthrough_internal.h"

#define PCI_IDS "tests/fakes/sysfs/pci.ids"
#define H100 "nvidia.com/GH100_H100_PCIE"
#define A100 "nvidia.com/GA100_A100_PCIE_80GB"
#define T4 "nvidia.com/TU104GL_TESLA_T4"
#define A10Q "nvidia.com/NVIDIA_A10-4Q"
#define MDEV1 "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01"
#define MDEV2 "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b02"

/*
 * The node: single-GPU group 17; group 18 = GPU + its audio function + a
 * bridge (viable); group 19 = T4 whose audio function is still on
 * snd_hda_intel; group 20 = two A100s sharing a group; an H100 left on
 * nvidia (not passthrough); group 22 without its /dev/vfio node; two vGPU
 * instances on an A10 VF.
 */
static const char NODE[] =
    "{\"devices\": ["
    "{\"bdf\":\"0000:41:00.0\",\"device\":\"2331\",\"driver\":\"vfio-pci\",\"group\":17,\"numa\":0},"
    "{\"bdf\":\"0000:40:01.0\",\"vendor\":\"8086\",\"device\":\"1901\",\"class\":\"060400\","
    "\"driver\":\"pcieport\",\"group\":18},"
    "{\"bdf\":\"0000:42:00.0\",\"device\":\"2331\",\"driver\":\"vfio-pci\",\"group\":18,\"numa\":1},"
    "{\"bdf\":\"0000:42:00.1\",\"device\":\"10f8\",\"class\":\"040300\",\"driver\":\"vfio-pci\","
    "\"group\":18},"
    "{\"bdf\":\"0000:43:00.0\",\"device\":\"1eb8\",\"driver\":\"vfio-pci\",\"group\":19},"
    "{\"bdf\":\"0000:43:00.1\",\"device\":\"10f8\",\"class\":\"040300\",\"driver\":\"snd_hda_intel\","
    "\"group\":19},"
    "{\"bdf\":\"0000:44:00.0\",\"device\":\"20b5\",\"driver\":\"vfio-pci\",\"group\":20},"
    "{\"bdf\":\"0000:45:00.0\",\"device\":\"20b5\",\"driver\":\"vfio-pci\",\"group\":20},"
    "{\"bdf\":\"0000:46:00.0\",\"device\":\"2331\",\"driver\":\"nvidia\",\"group\":21},"
    "{\"bdf\":\"0000:47:00.0\",\"device\":\"2331\",\"driver\":\"vfio-pci\",\"group\":22},"
    "{\"bdf\":\"0000:81:00.0\",\"device\":\"2236\",\"driver\":\"nvidia\",\"group\":29},"
    "{\"bdf\":\"0000:81:00.4\",\"device\":\"2236\",\"driver\":\"nvidia\",\"group\":30,"
    "\"physfn\":\"0000:81:00.0\"},"
    "{\"bdf\":\"0000:03:00.0\",\"vendor\":\"8086\",\"device\":\"1533\",\"class\":\"020000\","
    "\"driver\":\"igb\",\"group\":3}"
    "],"
    "\"mdev_types\":[{\"parent\":\"0000:81:00.4\",\"id\":\"nvidia-592\",\"name\":\"NVIDIA A10-4Q\","
    "\"available\":4}],"
    "\"mdevs\":[{\"uuid\":\"" MDEV1 "\",\"parent\":\"0000:81:00.4\",\"type\":\"nvidia-592\","
    "\"group\":90},"
    "{\"uuid\":\"" MDEV2 "\",\"parent\":\"0000:81:00.4\",\"type\":\"nvidia-592\",\"group\":91}],"
    "\"no_dev_nodes\":[22]}";

struct fixture {
    char root[512];
    struct gv_pt_config cfg;
};

static int setup_with(void **state, const char *spec)
{
    struct fixture *f = calloc(1, sizeof *f);
    const char *tmp = getenv("GV_TEST_TMP");
    snprintf(f->root, sizeof f->root, "%s/ptXXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(f->root) || fake_sysfs_build(f->root, spec) != 0) {
        free(f);
        return -1;
    }
    f->cfg.sys_root = f->root;
    f->cfg.dev_root = f->root;
    f->cfg.pci_ids = PCI_IDS;
    *state = f;
    return 0;
}

static int setup(void **state) { return setup_with(state, NODE); }

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->root);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static struct gv_pt_scan *scan(struct fixture *f)
{
    struct gv_pt_scan *s = NULL;
    struct gv_error err = {0};
    if (gv_pt_scan_new(&f->cfg, &s, &err) != GV_OK)
        fail_msg("scan failed: %s", err.msg);
    return s;
}

static void assert_contains(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("'%s' does not contain '%s'", text, want);
}

static void test_names_like_nvidia_plugin(void **state)
{
    (void)state;
    char out[128];
    struct gv_error err = {0};
    gv_pt_mangle_pci_name("GH100 [H100 PCIe]", out, sizeof out);
    assert_string_equal(out, "GH100_H100_PCIE");
    gv_pt_mangle_pci_name("  GA100 [A100 PCIe 80GB]\t", out, sizeof out);
    assert_string_equal(out, "GA100_A100_PCIE_80GB");
    gv_pt_mangle_pci_name("GP104GL [Quadro P4000/P5000 Mobile] v1.0", out, sizeof out);
    assert_string_equal(out, "GP104GL_QUADRO_P4000_P5000_MOBILE_V1_0");
    assert_int_equal(gv_pt_pci_name(PCI_IDS, 0x10de, 0x1eb8, out, sizeof out, &err), GV_OK);
    assert_string_equal(out, "TU104GL_TESLA_T4");
    /* device 2331 also appears under the next vendor; the NVIDIA one is taken */
    assert_int_equal(gv_pt_pci_name(PCI_IDS, 0x10de, 0x2331, out, sizeof out, &err), GV_OK);
    assert_string_equal(out, "GH100_H100_PCIE");
    /* not listed: the hex device ID, and an error saying so */
    assert_int_equal(gv_pt_pci_name(PCI_IDS, 0x10de, 0xabcd, out, sizeof out, &err), GV_ENOTFOUND);
    assert_string_equal(out, "abcd");
    assert_contains(err.msg, "10de:abcd");
    assert_int_equal(gv_pt_pci_name("/nonexistent/pci.ids", 0x10de, 0x2331, out, sizeof out, &err),
                     GV_ENOTFOUND);
    assert_string_equal(out, "2331");
    gv_pt_mangle_mdev_name("NVIDIA A2-4Q\n", out, sizeof out);
    assert_string_equal(out, "NVIDIA_A2-4Q");
    gv_pt_env_name(GV_PT_ENV_PCI, H100, out, sizeof out);
    assert_string_equal(out, "PCI_RESOURCE_NVIDIA_COM_GH100_H100_PCIE");
    gv_pt_env_name(GV_PT_ENV_MDEV, "nvidia.com/NVIDIA_A2-4Q", out, sizeof out);
    assert_string_equal(out, "MDEV_PCI_RESOURCE_NVIDIA_COM_NVIDIA_A2-4Q");
}

static void test_fake_sysfs_scan(void **state)
{
    struct fixture *f = *state;
    struct gv_pt_scan *s = scan(f);
    const struct gv_pt_gpu *g;
    /* 41, 42, 43, 44, 45, 47: the one on nvidia and the audio functions are not GPUs here */
    assert_int_equal(s->n_gpus, 6);
    assert_null(gv_pt_scan_gpu(s, "0000:46:00.0"));
    assert_null(gv_pt_scan_gpu(s, "0000:42:00.1"));
    g = gv_pt_scan_gpu(s, "0000:41:00.0");
    assert_non_null(g);
    assert_string_equal(g->resource, H100);
    assert_string_equal(g->group, "17");
    assert_int_equal(g->numa, 0);
    assert_true(g->healthy);
    /* audio function on vfio-pci and a bridge in the group: viable */
    assert_true(gv_pt_scan_gpu(s, "0000:42:00.0")->healthy);
    assert_int_equal(gv_pt_scan_group(s, "18")->n_funcs, 3);
    g = gv_pt_scan_gpu(s, "0000:43:00.0");
    assert_string_equal(g->resource, T4);
    assert_false(g->healthy);
    assert_contains(g->reason, "0000:43:00.1");
    assert_contains(g->reason, "snd_hda_intel");
    assert_false(gv_pt_scan_group(s, "19")->viable);
    g = gv_pt_scan_gpu(s, "0000:44:00.0");
    assert_string_equal(g->resource, A100);
    assert_true(g->healthy);
    g = gv_pt_scan_gpu(s, "0000:47:00.0");
    assert_false(g->healthy);
    assert_contains(g->reason, "/dev/vfio/22 is missing");

    assert_int_equal(s->n_mdevs, 2);
    const struct gv_pt_mdev *m = gv_pt_scan_mdev(s, MDEV1);
    assert_non_null(m);
    assert_string_equal(m->resource, A10Q);
    assert_string_equal(m->parent, "0000:81:00.4");
    assert_string_equal(m->gpu, "0000:81:00.0");
    assert_string_equal(m->type_id, "nvidia-592");
    assert_string_equal(m->group, "90");
    assert_true(m->healthy);
    gv_pt_scan_free(s);

    /* the override names every passthrough GPU alike */
    f->cfg.resource_override = "nvidia.com/passthrough";
    s = scan(f);
    assert_string_equal(gv_pt_scan_gpu(s, "0000:44:00.0")->resource, "nvidia.com/passthrough");
    gv_pt_scan_free(s);
}

static void test_allocate_specs_and_env(void **state)
{
    struct fixture *f = *state;
    struct gv_pt_scan *s = scan(f);
    struct gv_pt_answer a;
    struct gv_error err = {0};
    const char *one[] = {"0000:41:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(s, H100, one, 1, &a, &err), GV_OK);
    assert_int_equal(a.n_specs, 2);
    assert_string_equal(a.specs[0], "/dev/vfio/vfio");
    assert_string_equal(a.specs[1], "/dev/vfio/17");
    assert_string_equal(a.env_key, "PCI_RESOURCE_NVIDIA_COM_GH100_H100_PCIE");
    assert_string_equal(a.env_value, "0000:41:00.0");

    const char *two[] = {"0000:42:00.0", "0000:41:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(s, H100, two, 2, &a, &err), GV_OK);
    assert_int_equal(a.n_specs, 3);
    assert_string_equal(a.specs[1], "/dev/vfio/18");
    assert_string_equal(a.specs[2], "/dev/vfio/17");
    assert_string_equal(a.env_value, "0000:42:00.0,0000:41:00.0");

    /* a shared group is taken whole, with one node for both GPUs */
    const char *half[] = {"0000:44:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(s, A100, half, 1, &a, &err), GV_EINVAL);
    assert_contains(err.msg, "0000:45:00.0");
    assert_contains(err.msg, "whole group");
    const char *whole[] = {"0000:44:00.0", "0000:45:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(s, A100, whole, 2, &a, &err), GV_OK);
    assert_int_equal(a.n_specs, 2);
    assert_string_equal(a.specs[1], "/dev/vfio/20");
    assert_string_equal(a.env_value, "0000:44:00.0,0000:45:00.0");

    const char *broken[] = {"0000:43:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(s, T4, broken, 1, &a, &err), GV_EUNAVAILABLE);
    assert_contains(err.msg, "snd_hda_intel");
    assert_int_equal(gv_pt_allocate_gpus(s, A100, one, 1, &a, &err), GV_EINVAL);
    assert_contains(err.msg, H100);
    const char *dup[] = {"0000:41:00.0", "0000:41:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(s, H100, dup, 2, &a, &err), GV_EINVAL);
    const char *unknown[] = {"0000:46:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(s, H100, unknown, 1, &a, &err), GV_ENOTFOUND);
    assert_int_equal(gv_pt_allocate_gpus(s, H100, one, 0, &a, &err), GV_EINVAL);

    const char *vgpus[] = {MDEV2, MDEV1};
    assert_int_equal(gv_pt_allocate_mdevs(s, A10Q, vgpus, 2, &a, &err), GV_OK);
    assert_int_equal(a.n_specs, 3);
    assert_string_equal(a.specs[0], "/dev/vfio/vfio");
    assert_string_equal(a.specs[1], "/dev/vfio/91");
    assert_string_equal(a.specs[2], "/dev/vfio/90");
    assert_string_equal(a.env_key, "MDEV_PCI_RESOURCE_NVIDIA_COM_NVIDIA_A10-4Q");
    assert_string_equal(a.env_value, MDEV2 "," MDEV1);
    assert_int_equal(gv_pt_allocate_mdevs(s, A10Q, one, 1, &a, &err), GV_ENOTFOUND);
    gv_pt_scan_free(s);
}

static void test_preferred_whole_groups(void **state)
{
    struct fixture *f = *state;
    struct gv_pt_scan *s = scan(f);
    const char *avail[] = {"0000:44:00.0", "0000:41:00.0", "0000:45:00.0", "0000:42:00.0"};
    const char *out[4];
    size_t n = gv_pt_preferred(s, avail, 4, NULL, 0, 2, out);
    assert_int_equal(n, 2);
    assert_string_equal(out[0], "0000:44:00.0");
    assert_string_equal(out[1], "0000:45:00.0");
    n = gv_pt_preferred(s, avail, 4, NULL, 0, 1, out);
    assert_int_equal(n, 1);
    assert_string_equal(out[0], "0000:41:00.0");
    /* a must-include member pulls its group-mate in */
    const char *must[] = {"0000:45:00.0"};
    n = gv_pt_preferred(s, avail, 4, must, 1, 3, out);
    assert_int_equal(n, 3);
    assert_string_equal(out[0], "0000:45:00.0");
    assert_string_equal(out[1], "0000:44:00.0");
    gv_pt_scan_free(s);
}

static void test_hot_removal_unhealthy(void **state)
{
    struct fixture *f = *state;
    struct gv_pt_scan *before = scan(f);
    struct gv_error err = {0};
    struct gv_pt_answer a;
    assert_int_equal(fake_sysfs_remove(f->root, "0000:41:00.0"), 0);
    assert_int_equal(fake_sysfs_remove_mdev(f->root, MDEV1), 0);
    /* the audio function of group 18 goes: the GPU left behind stays viable */
    assert_int_equal(fake_sysfs_remove(f->root, "0000:42:00.1"), 0);
    struct gv_pt_scan *now = scan(f);
    assert_null(gv_pt_scan_gpu(now, "0000:41:00.0"));
    assert_int_equal(gv_pt_scan_carry(now, before, &err), GV_OK);
    const struct gv_pt_gpu *g = gv_pt_scan_gpu(now, "0000:41:00.0");
    assert_non_null(g);
    assert_false(g->healthy);
    assert_contains(g->reason, "removed");
    const struct gv_pt_mdev *m = gv_pt_scan_mdev(now, MDEV1);
    assert_non_null(m);
    assert_false(m->healthy);
    assert_true(gv_pt_scan_mdev(now, MDEV2)->healthy);
    assert_true(gv_pt_scan_gpu(now, "0000:42:00.0")->healthy);
    const char *one[] = {"0000:41:00.0"};
    assert_int_equal(gv_pt_allocate_gpus(now, H100, one, 1, &a, &err), GV_EUNAVAILABLE);
    /* carried again on the next scan */
    struct gv_pt_scan *later = scan(f);
    assert_int_equal(gv_pt_scan_carry(later, now, &err), GV_OK);
    assert_false(gv_pt_scan_gpu(later, "0000:41:00.0")->healthy);
    assert_int_equal(later->n_gpus, now->n_gpus);

    /* the group's device node vanishing (vfio-pci unloaded) makes the GPU unhealthy too */
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/dev/vfio/18", f->root);
    assert_int_equal(unlink(p), 0);
    struct gv_pt_scan *nonode = scan(f);
    assert_false(gv_pt_scan_gpu(nonode, "0000:42:00.0")->healthy);
    assert_contains(gv_pt_scan_gpu(nonode, "0000:42:00.0")->reason, "/dev/vfio/18");
    gv_pt_scan_free(nonode);
    gv_pt_scan_free(later);
    gv_pt_scan_free(now);
    gv_pt_scan_free(before);
}

/* Only mediated devices go (their GPU stays): they are carried as removed
 * and unhealthy all the same, as the kubelet must see them go unhealthy,
 * not vanish. */
static void test_mdev_only_removal_carried(void **state)
{
    struct fixture *f = *state;
    struct gv_pt_scan *before = scan(f);
    struct gv_error err = {0};
    assert_int_equal(fake_sysfs_remove_mdev(f->root, MDEV1), 0);
    assert_int_equal(fake_sysfs_remove_mdev(f->root, MDEV2), 0);
    struct gv_pt_scan *now = scan(f);
    assert_int_equal(now->n_mdevs, 0);
    assert_int_equal(gv_pt_scan_carry(now, before, &err), GV_OK);
    assert_int_equal(now->n_mdevs, 2);
    assert_int_equal(now->n_gpus, before->n_gpus);
    static const char *const gone[] = {MDEV1, MDEV2};
    for (size_t i = 0; i < 2; i++) {
        const struct gv_pt_mdev *m = gv_pt_scan_mdev(now, gone[i]);
        assert_non_null(m);
        assert_false(m->healthy);
        assert_contains(m->reason, "removed");
    }
    gv_pt_scan_free(now);
    gv_pt_scan_free(before);
}

/* An IOMMU group whose device list is empty (the kernel in the middle of
 * a change, or a tree not as it should be) is no group to hand out: the
 * GPU in it is unhealthy, with the reason. */
static void test_empty_iommu_group_not_viable(void **state)
{
    struct fixture *f = *state;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/sys/kernel/iommu_groups/17/devices/0000:41:00.0", f->root);
    assert_int_equal(unlink(p), 0);
    struct gv_pt_scan *s = scan(f);
    const struct gv_pt_gpu *g = gv_pt_scan_gpu(s, "0000:41:00.0");
    assert_non_null(g);
    assert_false(g->healthy);
    assert_contains(g->reason, "IOMMU group 17 has no device list");
    assert_true(gv_pt_scan_gpu(s, "0000:42:00.0")->healthy);
    gv_pt_scan_free(s);
}

/* Names read from sysfs become paths: only the kernel's PCI address form
 * passes, and a mediated device name longer than a UUID is not one. */
static void test_odd_names_ignored(void **state)
{
    (void)state;
    assert_true(valid_bdf("0000:41:00.0"));
    assert_true(valid_bdf("abcd:ef:1f.7"));
    static const char *const bad[] = {"",
                                      "0000:41:00.0/../../../etc",
                                      "0000:41:00.00",
                                      "0000:41:00.",
                                      "0000-41:00.0",
                                      "0000:41:00:0",
                                      "000g:41:00.0",
                                      "0000:41:00.0 "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (valid_bdf(bad[i]))
            fail_msg("'%s' taken for a PCI address", bad[i]);
    struct fixture *f = NULL;
    assert_int_equal(
        setup_with((void **)&f,
                   "{\"devices\":[{\"bdf\":\"0000:81:00.4\",\"device\":\"2236\",\"driver\":"
                   "\"nvidia\",\"group\":30}],\"mdev_types\":[{\"parent\":\"0000:81:00.4\",\"id\":"
                   "\"nvidia-592\",\"name\":\"NVIDIA A10-4Q\",\"available\":4}],\"mdevs\":["
                   "{\"uuid\":\"" MDEV1 "\",\"parent\":\"0000:81:00.4\",\"type\":\"nvidia-592\","
                   "\"group\":90},{\"uuid\":\"" MDEV2 "-and-then-some-more\",\"parent\":"
                   "\"0000:81:00.4\",\"type\":\"nvidia-592\",\"group\":91}]}"),
        0);
    struct gv_pt_scan *s = scan(f);
    assert_int_equal(s->n_mdevs, 1);
    assert_non_null(gv_pt_scan_mdev(s, MDEV1));
    gv_pt_scan_free(s);
    void *st = f;
    assert_int_equal(teardown(&st), 0);
}

static void test_scan_without_sysfs(void **state)
{
    (void)state;
    struct gv_pt_config cfg = {.sys_root = "/nonexistent-root"};
    struct gv_pt_scan *s = (void *)1;
    struct gv_error err = {0};
    assert_int_equal(gv_pt_scan_new(&cfg, &s, &err), GV_ENOTFOUND);
    assert_null(s);
    assert_contains(err.msg, "/sys/bus/pci/devices");
}

/* ---- binding helper ---- */

static const char HOST[] =
    "{\"devices\": ["
    "{\"bdf\":\"0000:41:00.0\",\"device\":\"2331\",\"driver\":\"nvidia\",\"group\":17},"
    "{\"bdf\":\"0000:41:00.1\",\"device\":\"10f8\",\"class\":\"040300\",\"driver\":\"snd_hda_intel\","
    "\"host_driver\":\"snd_hda_intel\",\"group\":17},"
    "{\"bdf\":\"0000:50:00.0\",\"device\":\"2331\",\"driver\":\"nvidia\",\"group\":25},"
    "{\"bdf\":\"0000:50:00.1\",\"vendor\":\"8086\",\"device\":\"1533\",\"class\":\"020000\","
    "\"driver\":\"igb\",\"host_driver\":\"igb\",\"group\":25}"
    "]}";

static int setup_host(void **state) { return setup_with(state, HOST); }

static bool busy_no(void *ud, const char *bdf, char *why, size_t size)
{
    (void)ud;
    (void)bdf;
    (void)why;
    (void)size;
    return false;
}

static bool busy_yes(void *ud, const char *bdf, char *why, size_t size)
{
    (void)ud;
    snprintf(why, size, "%s runs 2 process(es)", bdf);
    return true;
}

static void driver_is(struct fixture *f, const char *bdf, const char *want)
{
    char p[PATH_MAX], t[PATH_MAX];
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver", f->root, bdf);
    ssize_t n = readlink(p, t, sizeof t - 1);
    if (!want) {
        assert_true(n < 0);
        return;
    }
    assert_true(n > 0);
    t[n] = '\0';
    assert_string_equal(strrchr(t, '/') + 1, want);
}

static void test_bind_helper_fake_kernel(void **state)
{
    struct fixture *f = *state;
    struct fake_sysfs_kernel k = {.root = f->root, .vfio_loaded = true};
    struct gv_pt_bind_ops ops = {fake_sysfs_kernel_write, busy_no, &k};
    struct gv_error err = {0};
    char p[PATH_MAX];
    struct stat st;
    assert_int_equal(gv_pt_bind(f->root, "0000:41:00.0", &ops, &err), GV_OK);
    driver_is(f, "0000:41:00.0", "vfio-pci");
    driver_is(f, "0000:41:00.1", "vfio-pci"); /* the group's audio function goes along */
    snprintf(p, sizeof p, "%s/dev/vfio/17", f->root);
    assert_int_equal(stat(p, &st), 0);
    /* the steps operators do by hand, in order */
    assert_contains(k.log, "/sys/bus/pci/devices/0000:41:00.0/driver_override<-vfio-pci;"
                           "/sys/bus/pci/devices/0000:41:00.0/driver/unbind<-0000:41:00.0;"
                           "/sys/bus/pci/drivers_probe<-0000:41:00.0;");
    struct gv_pt_scan *s = scan(f);
    assert_true(gv_pt_scan_gpu(s, "0000:41:00.0")->healthy);
    gv_pt_scan_free(s);

    /* already bound: nothing to write */
    int before = k.writes;
    assert_int_equal(gv_pt_bind(f->root, "0000:41:00.0", &ops, &err), GV_OK);
    assert_int_equal(k.writes, before);

    /* unbind on request: the host drivers take the functions back, the node goes */
    assert_int_equal(gv_pt_unbind(f->root, "0000:41:00.0", &ops, &err), GV_OK);
    driver_is(f, "0000:41:00.0", "nvidia");
    driver_is(f, "0000:41:00.1", "snd_hda_intel");
    assert_int_not_equal(stat(p, &st), 0);
}

static void test_bind_helper_refusals(void **state)
{
    struct fixture *f = *state;
    struct fake_sysfs_kernel k = {.root = f->root, .vfio_loaded = true};
    struct gv_pt_bind_ops ops = {fake_sysfs_kernel_write, busy_yes, &k};
    struct gv_error err = {0};

    /* running processes: refused before anything is written */
    assert_int_equal(gv_pt_bind(f->root, "0000:41:00.0", &ops, &err), GV_ECONFLICT);
    assert_contains(err.msg, "runs 2 process");
    assert_int_equal(k.writes, 0);
    driver_is(f, "0000:41:00.0", "nvidia");

    /* a foreign NIC in the group would keep it unusable: refused, nothing written */
    ops.busy = busy_no;
    assert_int_equal(gv_pt_bind(f->root, "0000:50:00.0", &ops, &err), GV_ECONFLICT);
    assert_contains(err.msg, "0000:50:00.1");
    assert_int_equal(k.writes, 0);

    /* not a GPU, not an address */
    assert_int_equal(gv_pt_bind(f->root, "0000:41:00.1", &ops, &err), GV_EINVAL);
    assert_int_equal(gv_pt_bind(f->root, "../../etc", &ops, &err), GV_EINVAL);
    assert_int_equal(gv_pt_bind(f->root, "0000:99:00.0", &ops, &err), GV_ENOTFOUND);
    assert_int_equal(k.writes, 0);
    /* unbinding what the host drivers hold: nothing to hand back, nothing written (the
     * GPU and its audio function stay on their drivers); bad addresses as for bind */
    assert_int_equal(gv_pt_unbind(f->root, "0000:41:00.0", &ops, &err), GV_OK);
    assert_int_equal(k.writes, 0);
    driver_is(f, "0000:41:00.0", "nvidia");
    assert_int_equal(gv_pt_unbind(f->root, "../../etc", &ops, &err), GV_EINVAL);
    assert_int_equal(gv_pt_unbind(f->root, "0000:99:00.0", &ops, &err), GV_ENOTFOUND);
    assert_contains(err.msg, "no PCI device 0000:99:00.0");
    assert_int_equal(k.writes, 0);

    /* vfio-pci not loaded: the probe leaves the GPU unbound; rolled back to nvidia */
    k.vfio_loaded = false;
    assert_int_equal(gv_pt_bind(f->root, "0000:41:00.0", &ops, &err), GV_EUNAVAILABLE);
    assert_contains(err.msg, "vfio-pci module loaded");
    driver_is(f, "0000:41:00.0", "nvidia");
    driver_is(f, "0000:41:00.1", "snd_hda_intel");

    /* the kernel refuses the unbind (EBUSY): error names the file, nothing half-moved */
    k.vfio_loaded = true;
    k.fail_path = "0000:41:00.1/driver/unbind";
    k.fail_errno = 16;
    assert_int_equal(gv_pt_bind(f->root, "0000:41:00.0", &ops, &err), GV_EIO);
    assert_contains(err.msg, "0000:41:00.1/driver/unbind");
    driver_is(f, "0000:41:00.0", "nvidia");
    driver_is(f, "0000:41:00.1", "snd_hda_intel");
}

/* ---- inventory: the additive "wholeDevices" list, and the scheduler's view ---- */

static void fill_inventory(struct gv_inventory *inv)
{
    memset(inv, 0, sizeof *inv);
    inv->version = GV_INVENTORY_VERSION;
    inv->n_gpus = 2;
    for (uint32_t i = 0; i < 2; i++) {
        struct gv_inventory_gpu *g = &inv->gpus[i];
        snprintf(g->uuid, sizeof g->uuid, "GPU-%u0000000-1111-2222-3333-444444444444", i);
        g->index = i;
        snprintf(g->model, sizeof g->model, "NVIDIA A10");
        g->memory_mib = 24576;
        g->memory_scaling = 1.0;
        g->cores = 100;
        g->split = 10;
        g->numa = 0;
        g->healthy = true;
        g->mode = GV_INVENTORY_MODE_VGPU;
        /* NVML's 8-digit domain; the agent's whole devices carry sysfs's 4 digits */
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "0000000%u:81:00.0", 0);
        if (i)
            snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:82:00.0");
    }
    inv->whole.n = 2;
    inv->whole.dev[0] = (struct gv_inventory_whole){GV_INVENTORY_WHOLE_PASSTHROUGH, H100,
                                                    "0000:41:00.0", "0000:41:00.0", "17", true, "", "", 0};
    inv->whole.dev[1] = (struct gv_inventory_whole){GV_INVENTORY_WHOLE_MDEV, A10Q, MDEV1,
                                                    "0000:81:00.0", "90", false, "", "", 0};
}

static void test_inventory_whole_devices(void **state)
{
    (void)state;
    struct gv_inventory *inv = malloc(sizeof *inv), *back = malloc(sizeof *back);
    struct gv_error err = {0};
    char *text = NULL;
    fill_inventory(inv);
    assert_int_equal(gv_inventory_encode(inv, &text, &err), GV_OK);
    assert_contains(text, "\"wholeDevices\":[{\"kind\":\"passthrough\",\"resource\":\"" H100 "\"");
    assert_int_equal(gv_inventory_decode(text, strlen(text), back, &err), GV_OK);
    assert_int_equal(back->whole.n, 2);
    assert_int_equal(back->whole.dev[1].kind, GV_INVENTORY_WHOLE_MDEV);
    assert_string_equal(back->whole.dev[1].id, MDEV1);
    assert_string_equal(back->whole.dev[1].pci_bus_id, "0000:81:00.0");
    assert_false(back->whole.dev[1].healthy);
    assert_true(gv_inventory_gpu_taken(back, &back->gpus[0]));
    assert_false(gv_inventory_gpu_taken(back, &back->gpus[1]));
    assert_true(gv_inventory_same_pci("00000000:81:00.0", "0000:81:00.0"));
    assert_false(gv_inventory_same_pci("0000:81:00.4", "0000:81:00.0"));
    assert_false(gv_inventory_same_pci("garbage", "garbage"));

    /* the scheduler's node: the GPU hosting vGPUs is not offered for slicing */
    json_t *node = json_pack("{s:{s:s,s:{s:s}},s:{s:{s:s,s:s}}}", "metadata", "name", "gpu-1",
                             "annotations", GV_INVENTORY_ANNOTATION, text, "status", "capacity",
                             "cpu", "8", "memory", "64Gi");
    struct gv_podspec_node *pn = NULL;
    assert_int_equal(gv_podspec_node(node, &pn, &err), GV_OK);
    assert_int_equal(pn->spec.n_gpus, 2);
    assert_false(pn->gpus[0].healthy);
    assert_true(pn->gpus[1].healthy);
    assert_int_equal(pn->n_whole, 2); /* what the scheduler counts per node */
    gv_podspec_node_free(pn);
    json_decref(node);
    free(text);

    /* without whole devices the text is what older agents wrote (no new key) */
    inv->whole.n = 0;
    assert_int_equal(gv_inventory_encode(inv, &text, &err), GV_OK);
    assert_null(strstr(text, "wholeDevices"));
    free(text);

    /* strict when present */
    static const char *bad[][2] = {
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":{}}", "must be a list"},
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":[{\"kind\":\"sriov\",\"resource\":\"r\","
         "\"id\":\"i\",\"pciBusId\":\"p\",\"iommuGroup\":\"1\",\"healthy\":true}]}",
         "unknown 'sriov'"},
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":[{\"kind\":\"mdev\",\"resource\":\"r\","
         "\"id\":\"i\",\"pciBusId\":\"p\",\"iommuGroup\":\"1\"}]}",
         "healthy"},
        {"{\"version\":1,\"gpus\":[],\"wholeDevices\":[{\"kind\":\"mdev\",\"resource\":\"r\","
         "\"id\":\"i\",\"pciBusId\":\"p\",\"iommuGroup\":\"1\",\"healthy\":true},"
         "{\"kind\":\"mdev\",\"resource\":\"r\",\"id\":\"i\",\"pciBusId\":\"p\","
         "\"iommuGroup\":\"1\",\"healthy\":true}]}",
         "repeats"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_not_equal(gv_inventory_decode(bad[i][0], strlen(bad[i][0]), back, &err), GV_OK);
        assert_contains(err.msg, bad[i][1]);
        assert_int_equal(back->whole.n, 0);
    }
    free(inv);
    free(back);
}

static void test_node_config_passthrough(void **state)
{
    (void)state;
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    const char *ok = "{\"passthrough\": {\"enabled\": true, \"resourceName\": \"nvidia.com/pgpu\","
                     " \"pciIds\": \"/opt/pci.ids\", \"bindAtStart\": true,"
                     " \"bind\": [\"0000:41:00.0\", \"0000:42:00.0\"]},"
                     " \"nodeConfig\": [{\"name\": \"n2\", \"passthrough\": {\"enabled\": false}}]}";
    assert_int_equal(gv_node_config_parse(ok, strlen(ok), "n1", &c, &err), GV_OK);
    assert_true(c->passthrough.enabled);
    assert_true(c->passthrough.bind_at_start);
    assert_string_equal(c->passthrough.resource_override, "nvidia.com/pgpu");
    assert_string_equal(c->passthrough.pci_ids, "/opt/pci.ids");
    assert_int_equal(c->passthrough.n_bind, 2);
    assert_string_equal(c->passthrough.bind[1], "0000:42:00.0");
    gv_node_config_free(c);
    /* the node's own section replaces the top one */
    assert_int_equal(gv_node_config_parse(ok, strlen(ok), "n2", &c, &err), GV_OK);
    assert_false(c->passthrough.enabled);
    assert_int_equal(c->passthrough.n_bind, 0);
    gv_node_config_free(c);
    /* off by default */
    assert_int_equal(gv_node_config_parse("{}", 2, "n1", &c, &err), GV_OK);
    assert_false(c->passthrough.enabled);
    gv_node_config_free(c);
    static const char *bad[][2] = {
        {"{\"passthrough\": true}", "must be an object"},
        {"{\"passthrough\": {\"enabled\": 1}}", "passthrough.enabled"},
        {"{\"passthrough\": {\"bind\": [\"41:00.0\"]}}", "bind[0]"},
        {"{\"passthrough\": {\"bind\": [\"../../x/00.0\"]}}", "bind[0]"},
        {"{\"passthrough\": {\"resourceName\": \"pgpu\"}}", "not domain/name"},
        {"{\"passthrough\": {\"resourceName\": \"nvidia.com/a b\"}}", "not domain/name"},
        {"{\"passthrough\": {\"bindAll\": true}}", "unknown key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = NULL;
        assert_int_not_equal(gv_node_config_parse(bad[i][0], strlen(bad[i][0]), "n1", &c, &err),
                             GV_OK);
        assert_null(c);
        assert_contains(err.msg, bad[i][1]);
    }
}

/*
 * An NVSwitch (class 0680, a bridge function that is not a PCI-to-PCI
 * bridge) on nvidia in a GPU's group: the group is not viable (the kernel
 * refuses /dev/vfio/<group> while it can DMA), and binding the GPU is
 * refused without a write (moving the switch would take NVLink from GPUs
 * outside the group).  Only class 0604 counts as plumbing (mutant
 * passthrough-any-bridge-harmless).
 */
static const char NVSWITCH_NODE[] =
    "{\"devices\": ["
    "{\"bdf\":\"0000:61:00.0\",\"device\":\"2330\",\"driver\":\"vfio-pci\",\"group\":60},"
    "{\"bdf\":\"0000:60:00.0\",\"device\":\"22a3\",\"class\":\"068000\",\"driver\":\"nvidia\","
    "\"group\":60},"
    "{\"bdf\":\"0000:71:00.0\",\"device\":\"2330\",\"driver\":\"nvidia\",\"group\":70},"
    "{\"bdf\":\"0000:70:00.0\",\"device\":\"22a3\",\"class\":\"068000\",\"driver\":\"nvidia\","
    "\"group\":70},"
    "{\"bdf\":\"0000:72:00.0\",\"vendor\":\"8086\",\"device\":\"1901\",\"class\":\"060400\","
    "\"driver\":\"pcieport\",\"group\":70}"
    "]}";

static int setup_nvswitch(void **state) { return setup_with(state, NVSWITCH_NODE); }

static void test_nvswitch_in_group_is_not_harmless(void **state)
{
    struct fixture *f = *state;
    struct gv_pt_scan *s = scan(f);
    const struct gv_pt_gpu *g = gv_pt_scan_gpu(s, "0000:61:00.0");
    assert_non_null(g);
    assert_false(g->healthy);
    assert_false(gv_pt_scan_group(s, "60")->viable);
    assert_contains(g->reason, "0000:60:00.0");
    assert_contains(g->reason, "nvidia");
    gv_pt_scan_free(s);

    struct fake_sysfs_kernel k = {.root = f->root, .vfio_loaded = true};
    struct gv_pt_bind_ops ops = {fake_sysfs_kernel_write, busy_no, &k};
    struct gv_error err = {0};
    assert_int_equal(gv_pt_bind(f->root, "0000:71:00.0", &ops, &err), GV_ECONFLICT);
    assert_contains(err.msg, "0000:70:00.0");
    assert_contains(err.msg, "class 0680");
    assert_int_equal(k.writes, 0);
    driver_is(f, "0000:70:00.0", "nvidia");
    driver_is(f, "0000:71:00.0", "nvidia");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_like_nvidia_plugin),
        cmocka_unit_test_setup_teardown(test_fake_sysfs_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocate_specs_and_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preferred_whole_groups, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hot_removal_unhealthy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mdev_only_removal_carried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_iommu_group_not_viable, setup, teardown),
        cmocka_unit_test(test_odd_names_ignored),
        cmocka_unit_test(test_scan_without_sysfs),
        cmocka_unit_test_setup_teardown(test_bind_helper_fake_kernel, setup_host, teardown),
        cmocka_unit_test_setup_teardown(test_bind_helper_refusals, setup_host, teardown),
        cmocka_unit_test_setup_teardown(test_nvswitch_in_group_is_not_harmless, setup_nvswitch,
                                        teardown),
        cmocka_unit_test(test_inventory_whole_devices),
        cmocka_unit_test(test_node_config_passthrough),
    };
    return cmocka_run_group_tests_name("node passthrough (fake sysfs)", tests, NULL, NULL);
}
