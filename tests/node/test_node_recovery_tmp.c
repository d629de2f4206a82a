/*
 * A node agent killed between writing a record's temporary file and
 * renaming it leaves "<record>.tmp.<pid>" (answer, limits.env) or
 * "promise.tmp" in a live pod's <state>/limits/<uid>/<ctr>/; the restarted
 * agent's recovery removes them and nothing else (issue 28; mutant
 * node-recovery-keeps-tmp).  The allocator runs without an API server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/allocate/gv_allocator.h"

static char scratch[512];

static void put(const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", scratch, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static bool exists(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", scratch, rel);
    return access(p, F_OK) == 0;
}

static void test_recovery_removes_dead_writers_tmp_files(void **state)
{
    (void)state;
    const char *tmp = getenv("GV_TEST_TMP");
    snprintf(scratch, sizeof(scratch), "%s/gv-recover-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(scratch));
    char d[1024];
    const char *dirs[] = {"limits", "limits/uid-1", "limits/uid-1/main", "limits/uid-1/side"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(d, sizeof(d), "%s/%s", scratch, dirs[i]);
        assert_int_equal(mkdir(d, 0755), 0);
    }
    static const char *const stale[] = {"limits/uid-1/main/answer.tmp.4242",
                                        "limits/uid-1/main/limits.env.tmp.77",
                                        "limits/uid-1/side/promise.tmp",
                                        "limits/uid-1/side/limits.env.tmp.1"};
    static const char *const kept[] = {"limits/uid-1/main/limits.env",
                                       "limits/uid-1/main/answer.tmp.x",
                                       "limits/uid-1/main/notes.tmp.5",
                                       "limits/uid-1/side/promise.tmpl"};
    for (size_t i = 0; i < 4; i++) {
        put(stale[i], "half");
        put(kept[i], "CUDA_DEVICE_MEMORY_LIMIT_0=1000m\n");
    }
    struct gv_allocator_config cfg = {.node = "node1", .state_dir = scratch,
                                      .install_dir = "/usr/local/gpuvisor", .wait_ms = 1};
    struct gv_allocator *a = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_allocator_new(&cfg, NULL, NULL, &a, &err), GV_OK);
    for (size_t i = 0; i < 4; i++) {
        if (exists(stale[i]))
            fail_msg("%s survived recovery", stale[i]);
        if (!exists(kept[i]))
            fail_msg("%s was removed", kept[i]);
    }
    gv_allocator_free(a);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    gv_log_set_level(GV_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recovery_removes_dead_writers_tmp_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
