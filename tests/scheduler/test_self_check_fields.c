/*
 * The scheduler's self-check compares every field of a GPU's usage (memory,
 * cores, tasks) with the sum of its pods' records, not memory alone: drift
 * planted in one field, the other two equal, is found, repaired and counted
 * (issue 28; mutants drift-memory-only, drift-no-tasks).  Driven by hand, no
 * API server, as test_self_check_slices_cover_everything.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/gv_log.h"
#include "scheduler/gv_scheduler.h"
#include "scheduler/sched_internal.h"
#include "tests/scheduler/sched_handfed.h"

#define NODE "drift-0"
#define GPU "GPU-" NODE "-0"

/* One node with one T4 and one pod "uid-p" recorded as c=GPU:6000:250. */
static struct gv_sched *sched_with_one_pod(struct gv_sched_config *cfg)
{
    struct gv_sched *s = NULL;
    assert_int_equal(gv_sched_config_default(cfg, NULL), GV_OK);
    assert_int_equal(gv_sched_new(cfg, NULL, &s, NULL), GV_OK);
    static const struct gpu_desc g1[] = {{"Tesla T4", 15360, 10}};
    st_feed_node(s, NODE, g1, 1);
    json_t *pod = json_pack(
        "{s:{s:s,s:s,s:s,s:{s:s,s:s}},s:{s:s,s:[{s:s,s:{s:{s:s,s:s}}}]},s:{s:s}}", "metadata",
        "uid", "uid-p", "name", "p", "namespace", "default", "annotations",
        "gpuvisor.io/assignment", "v1;node=" NODE ";c=" GPU ":6000:250",
        "gpuvisor.io/assigned-at", "2026-01-01T00:00:00Z", "spec", "nodeName", NODE,
        "containers", "name", "c", "resources", "limits", "nvidia.com/gpumem", "6000",
        "nvidia.com/gpucores", "25", "status", "phase", "Running");
    gv_sched_pod_update(s, pod);
    json_decref(pod);
    assert_int_equal(gv_sched_self_check(s), 0);
    return s;
}

/* Behind the scheduler's back, the engine's placement of uid-p becomes
 * `planted` (containers c and d, as the assignment text names them). */
static void plant(struct gv_sched *s, const char *planted, unsigned containers)
{
    struct gv_alloc_request *req = NULL;
    struct gv_alloc_assignment a;
    assert_int_equal(gv_alloc_assignment_decode(planted, strlen(planted), &a, NULL), GV_OK);
    assert_int_equal(gv_alloc_request_new(&req, NULL), GV_OK);
    snprintf(req->uid, sizeof(req->uid), "uid-p");
    req->n_containers = containers;
    for (unsigned i = 0; i < containers; i++) {
        snprintf(req->containers[i].name, sizeof(req->containers[i].name), "%c", 'c' + i);
        req->containers[i].num_gpu = 1;
    }
    pthread_mutex_lock(&s->lock);
    assert_int_equal(gv_alloc_release(s->cluster, "uid-p", NULL), GV_OK);
    assert_int_equal(gv_alloc_place(s->cluster, req, &a, NULL), GV_OK);
    pthread_mutex_unlock(&s->lock);
    gv_alloc_request_free(req);
}

static struct gv_alloc_gpu_usage usage(struct gv_sched *s)
{
    struct gv_alloc_gpu_usage u;
    pthread_mutex_lock(&s->lock);
    assert_int_equal(gv_alloc_gpu_usage_at(s->cluster, NODE, 0, &u, NULL), GV_OK);
    pthread_mutex_unlock(&s->lock);
    return u;
}

/* Plants `planted`, checks that only the field named differs, then that one
 * self-check repairs it back to the record (6000 MiB, 250 milli, 1 task). */
static void check_planted(const char *planted, unsigned containers, const char *field)
{
    struct gv_sched_config cfg;
    struct gv_sched *s = sched_with_one_pod(&cfg);
    plant(s, planted, containers);
    struct gv_alloc_gpu_usage u = usage(s);
    unsigned differ = (u.mem_mib != 6000) + (u.milli != 250) + (u.tasks != 1);
    if (differ != 1)
        fail_msg("%s: planted %s differs in %u fields (%llu MiB, %u milli, %u tasks)", field,
                 planted, differ, (unsigned long long)u.mem_mib, u.milli, u.tasks);
    assert_int_equal(gv_sched_self_check(s), 1);
    assert_int_equal(gv_sched_drift_repairs(s), 1);
    u = usage(s);
    assert_int_equal(u.mem_mib, 6000);
    assert_int_equal(u.milli, 250);
    assert_int_equal(u.tasks, 1);
    assert_int_equal(gv_sched_self_check(s), 0);
    gv_sched_free(s);
    gv_sched_config_clear(&cfg);
}

static void test_drift_in_memory_alone(void **state)
{
    (void)state;
    check_planted("v1;node=" NODE ";c=" GPU ":4000:250", 1, "memory");
}

static void test_drift_in_cores_alone(void **state)
{
    (void)state;
    check_planted("v1;node=" NODE ";c=" GPU ":6000:700", 1, "cores");
}

/* Same memory and cores, split over two containers: one task more. */
static void test_drift_in_task_count_alone(void **state)
{
    (void)state;
    check_planted("v1;node=" NODE ";c=" GPU ":3000:125;d=" GPU ":3000:125", 2, "tasks");
}

int main(void)
{
    gv_log_set_level(GV_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drift_in_memory_alone),
        cmocka_unit_test(test_drift_in_cores_alone),
        cmocka_unit_test(test_drift_in_task_count_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
