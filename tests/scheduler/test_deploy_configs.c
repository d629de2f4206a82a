/* The config files deploy/ ships are read by the real parsers of the daemons
 * that mount them: a typo in a ConfigMap must fail here, not on a node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gv_file.h"
#include "node/config/gv_config.h"
#include "scheduler/gv_scheduler.h"

static void test_node_config_parses(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    struct gv_error err = {0};
    assert_int_equal(gv_file_read_all("deploy/base/config/node-config.json", &text, &len, &err), GV_OK);
    struct gv_node_config *cfg = NULL;
    if (gv_node_config_parse(text, len, "gpu-node-1", &cfg, &err) != GV_OK)
        fail_msg("deploy/base/config/node-config.json: %s", err.msg);
    assert_string_equal(cfg->resource_name, "nvidia.com/gpu");
    gv_node_config_free(cfg);
    free(text);
}

static void test_scheduler_config_matches_node(void **state)
{
    (void)state;
    struct gv_sched_config sc;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&sc, &err), GV_OK);
    if (gv_sched_config_load("deploy/base/config/scheduler.json", &sc, &err) != GV_OK)
        fail_msg("%s", err.msg);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gv_file_read_all("deploy/base/config/node-config.json", &text, &len, &err), GV_OK);
    struct gv_node_config *nc = NULL;
    assert_int_equal(gv_node_config_parse(text, len, NULL, &nc, &err), GV_OK);
    /* The resource the agent advertises is the GPU count the scheduler reads. */
    assert_string_equal(nc->resource_name, sc.alloc.res.gpu);
    gv_node_config_free(nc);
    free(text);
    gv_sched_config_clear(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_config_parses),
        cmocka_unit_test(test_scheduler_config_matches_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
