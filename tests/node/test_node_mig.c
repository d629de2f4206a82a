/*
 * MIG discovery through the fake NVML (stand-in for a MIG-partitioned
 * A100): MIG devices with holes in NVML's MIG device indexes, their UUIDs,
 * GPU/compute instance ids, profiles and memory, MIG capability apart from
 * MIG mode, and a geometry change while the agent runs (the operator
 * re-partitions; docs/mig-cdi.md, "Static MIG procedure").
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "node/config/gv_config.h"
#include "node/discovery/gv_gpus.h"

static char dir[512], gpu_cfg[600], mig_cfg[600], lib[600];

static void write_file(const char *path, const char *text)
{
    char tmp[700];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0); /* a new inode: the fake sees the change */
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("GV_TEST_TMP");
    snprintf(dir, sizeof(dir), "%s/gv-mig-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(gpu_cfg, sizeof(gpu_cfg), "%s/gpus", dir);
    snprintf(mig_cfg, sizeof(mig_cfg), "%s/mig", dir);
    const char *build = getenv("BUILD");
    snprintf(lib, sizeof(lib), "%s/tests/fakes/libnvidia-ml.so.1", build && *build ? build : "build");
    FILE *f = fopen(gpu_cfg, "w");
    if (f == NULL)
        return -1;
    fputs("name=\"NVIDIA A100-SXM4-40GB\" memory=40g cc=8.0 sms=98\n"
          "name=\"NVIDIA A10\" memory=24g cc=8.6\n",
          f);
    fclose(f);
    setenv("GV_FAKE_GPU_CONFIG", gpu_cfg, 1);
    setenv("GV_FAKE_MIG_CONFIG", mig_cfg, 1);
    return 0;
}

static void test_fake_nvml_mig_discovery(void **state)
{
    (void)state;
    /* MIG device index 1 unused: NVML's indexes have holes */
    write_file(mig_cfg, "0 1g.5gb,-,3g.20gb\n");
    struct gv_gpus_config cfg = {.library = lib, .sys_root = dir};
    struct gv_gpus *g = NULL;
    struct gv_error err;
    assert_int_equal(gv_gpus_open(&cfg, &g, &err), GV_OK);
    struct gv_gpu *gpus = NULL;
    size_t n = 0;
    assert_int_equal(gv_gpus_snapshot(g, &gpus, &n, &err), GV_OK);
    assert_int_equal(n, 2);
    assert_true(gpus[0].mig && gpus[0].mig_capable);
    assert_int_equal(gpus[0].cc_major, 8);
    assert_int_equal(gpus[0].n_migs, 2);
    assert_string_equal(gpus[0].migs[0].profile, "1g.5gb");
    assert_int_equal(gpus[0].migs[0].memory_mib, 4864);
    assert_int_equal(gpus[0].migs[0].gi, 1);
    assert_string_equal(gpus[0].migs[1].profile, "3g.20gb");
    assert_int_equal(gpus[0].migs[1].gi, 3);
    assert_int_equal(gpus[0].migs[1].sms, 42);
    assert_true(strncmp(gpus[0].migs[0].uuid, "MIG-", 4) == 0);
    assert_string_not_equal(gpus[0].migs[0].uuid, gpus[0].migs[1].uuid);
    /* an A10 has no MIG: NVML says NOT_SUPPORTED, so not capable */
    assert_false(gpus[1].mig || gpus[1].mig_capable);
    assert_int_equal(gpus[1].n_migs, 0);
    free(gpus);
    gv_gpus_free(g);
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int changes;

static void on_change(void *ud)
{
    (void)ud;
    pthread_mutex_lock(&mu);
    changes++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Waits for the health thread to report the geometry: event-driven, the deadline only guards a hang. */
static bool wait_geometry(struct gv_gpus *g, unsigned want_n, const char *want_profile,
                          char *uuid_out)
{
    time_t give_up = time(NULL) + 60;
    for (;;) {
        struct gv_gpu *gpus = NULL;
        size_t n = 0;
        struct gv_error err;
        if (gv_gpus_snapshot(g, &gpus, &n, &err) != GV_OK)
            return false;
        bool ok = n > 0 && gpus[0].n_migs == want_n &&
                  (want_n == 0 || strcmp(gpus[0].migs[0].profile, want_profile) == 0);
        if (ok && uuid_out)
            snprintf(uuid_out, 96, "%s", want_n ? gpus[0].migs[0].uuid : "");
        free(gpus);
        if (ok)
            return true;
        pthread_mutex_lock(&mu);
        int seen = changes;
        while (changes == seen && time(NULL) < give_up) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&cv, &mu, &ts);
        }
        pthread_mutex_unlock(&mu);
        if (time(NULL) >= give_up)
            return false;
    }
}

static void test_fake_nvml_mig_geometry_change_reread(void **state)
{
    (void)state;
    write_file(mig_cfg, "0 1g.5gb,1g.5gb\n");
    struct gv_gpus_config cfg = {.library = lib, .sys_root = dir, .probe_interval_ms = 20};
    struct gv_gpus *g = NULL;
    struct gv_error err;
    assert_int_equal(gv_gpus_open(&cfg, &g, &err), GV_OK);
    assert_int_equal(gv_gpus_watch(g, on_change, NULL, &err), GV_OK);
    char before[96], after[96];
    assert_true(wait_geometry(g, 2, "1g.5gb", before));
    /* the operator re-partitions GPU 0 into one 7g.40gb instance */
    write_file(mig_cfg, "0 7g.40gb\n");
    assert_true(wait_geometry(g, 1, "7g.40gb", after));
    assert_string_not_equal(before, after); /* recreated instances have new UUIDs */
    /* ... and disables MIG: the GPU is whole again */
    write_file(mig_cfg, "");
    assert_true(wait_geometry(g, 0, "", NULL));
    struct gv_gpu *gpus = NULL;
    size_t n = 0;
    assert_int_equal(gv_gpus_snapshot(g, &gpus, &n, &err), GV_OK);
    assert_false(gpus[0].mig);
    assert_true(gpus[0].mig_capable);
    free(gpus);
    gv_gpus_free(g);
}

static void test_mig_profile_names(void **state)
{
    (void)state;
    char p[32];
    gv_gpus_mig_profile(1, 1, 9984, p, sizeof(p));
    assert_string_equal(p, "1g.10gb");
    gv_gpus_mig_profile(3, 3, 19968, p, sizeof(p));
    assert_string_equal(p, "3g.20gb");
    gv_gpus_mig_profile(2, 1, 19968, p, sizeof(p)); /* a CI smaller than its GI */
    assert_string_equal(p, "1c.2g.20gb");
}

static void config_fails(const char *text, const char *want)
{
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    assert_int_not_equal(gv_node_config_parse(text, strlen(text), "n", &c, &err), GV_OK);
    assert_null(c);
    if (strstr(err.msg, want) == NULL)
        fail_msg("error '%s' does not mention '%s'", err.msg, want);
}

/* migStrategy (HAMi's migstrategy spelling too) and the driver/CDI paths of the node config. */
static void test_config_mig_strategy_and_paths(void **state)
{
    (void)state;
    struct gv_node_config *c = NULL;
    struct gv_error err;
    const char *ok = "{\"migstrategy\":\"mixed\",\"nvidiaRuntime\":false,"
                     "\"driverRoot\":\"/run/nvidia/driver\",\"cdiSpecDir\":\"/etc/cdi\"}";
    assert_int_equal(gv_node_config_parse(ok, strlen(ok), "n", &c, &err), GV_OK);
    assert_string_equal(c->mig_strategy, "mixed");
    assert_false(c->nvidia_runtime);
    assert_string_equal(c->driver_root, "/run/nvidia/driver");
    assert_string_equal(c->cdi_spec_dir, "/etc/cdi");
    gv_node_config_free(c);
    assert_int_equal(gv_node_config_parse("{}", 2, "n", &c, &err), GV_OK);
    assert_string_equal(c->mig_strategy, "none"); /* NVIDIA's default */
    assert_true(c->nvidia_runtime);
    assert_string_equal(c->cdi_spec_dir, "/var/run/cdi");
    gv_node_config_free(c);
    config_fails("{\"migStrategy\":\"all\"}", "not none, single or mixed");
    config_fails("{\"migStrategy\":1}", "must be a string");
    config_fails("{\"driverRoot\":\"relative\"}", "not an absolute path");
    config_fails("{\"cdiSpecDir\":\"/var/../etc\"}", "not an absolute path");
    config_fails("{\"nvidiaRuntime\":\"no\"}", "must be true or false");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mig_profile_names),
        cmocka_unit_test(test_config_mig_strategy_and_paths),
        cmocka_unit_test(test_fake_nvml_mig_discovery),
        cmocka_unit_test(test_fake_nvml_mig_geometry_change_reread),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
