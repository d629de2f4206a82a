/*
 * The self-check (src/scheduler/self_check.c) against what the API says,
 * in the cases a sweep found no test of (docs/contributing.md, "Sweeps"):
 *  - a container on two GPUs and a pod of two containers are summed device
 *    by device, so a clean state reads as clean (a sum that stopped at the
 *    first device saw drift on the second GPU every pass, and "repaired" it);
 *  - a record that says other than the API is replaced by the API's word;
 *  - a placement the API shows and no record holds is counted again;
 *  - pods seen before their node are counted as soon as its inventory
 *    arrives, not a self-check later;
 *  - a bind still computing its placement is left alone, and a not-bound
 *    placement the API does not show (no unknown bind of ours) released;
 *  - a truth-table entry whose name fills its buffer is unreadable, never
 *    copied past it.
 * Driven by hand, no API server, as test_self_check_fields.
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

#include "scheduler/gv_scheduler.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_pods.h"
#include "tests/scheduler/sched_handfed.h"

static const struct gpu_desc two_t4[] = {{"Tesla T4", 15360, 10}, {"Tesla T4", 15360, 10}};

/* Each test gets a fresh hand-fed scheduler (no API server). */
static int setup(void **state)
{
    return (*state = st_handfed_new(NULL)) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    st_handfed_free(*state);
    return 0;
}

static void add_node(struct gv_sched *s, const char *name)
{
    st_feed_node(s, name, two_t4, 2);
}

/* A running pod bound to node with the given assignment text; containers
 * c (and d when two) each ask for gpus GPUs. */
static void add_pod(struct gv_sched *s, const char *uid, const char *node, const char *text,
                    int containers, const char *gpus)
{
    json_t *ctrs = json_array();
    for (int i = 0; i < containers; i++)
        json_array_append_new(ctrs, json_pack("{s:s,s:{s:{s:s}}}", "name", i ? "d" : "c",
                                              "resources", "limits", "nvidia.com/gpu", gpus));
    json_t *pod = json_pack("{s:{s:s,s:s,s:s,s:{s:s,s:s}},s:{s:s,s:o},s:{s:s}}", "metadata",
                            "uid", uid, "name", uid, "namespace", "default", "annotations",
                            "gpuvisor.io/assignment", text, "gpuvisor.io/assigned-at",
                            "2026-01-01T00:00:00Z", "spec", "nodeName", node, "containers", ctrs,
                            "status", "phase", "Running");
    gv_sched_pod_update(s, pod);
    json_decref(pod);
}

static uint64_t mem_at(struct gv_sched *s, const char *node, uint32_t g)
{
    struct gv_alloc_gpu_usage u;
    pthread_mutex_lock(&s->lock);
    gv_status st = gv_alloc_gpu_usage_at(s->cluster, node, g, &u, NULL);
    pthread_mutex_unlock(&s->lock);
    assert_int_equal(st, GV_OK);
    return u.mem_mib;
}

static bool placed(struct gv_sched *s, const char *uid)
{
    pthread_mutex_lock(&s->lock);
    bool p = gv_alloc_is_placed(s->cluster, uid);
    pthread_mutex_unlock(&s->lock);
    return p;
}

static void test_multi_device_pods_read_clean(void **state)
{
    struct gv_sched *s = ((struct st_handfed *)*state)->s;
    add_node(s, "mg-0");
    add_node(s, "mg-1");
    add_pod(s, "uid-two-gpus", "mg-0",
            "v1;node=mg-0;c=GPU-mg-0-0:1000:0,GPU-mg-0-1:2000:0", 1, "2");
    add_pod(s, "uid-two-ctrs", "mg-1", "v1;node=mg-1;c=GPU-mg-1-0:500:0;d=GPU-mg-1-1:700:0", 2,
            "1");
    assert_int_equal(mem_at(s, "mg-0", 0), 1000);
    assert_int_equal(mem_at(s, "mg-0", 1), 2000);
    assert_int_equal(mem_at(s, "mg-1", 0), 500);
    assert_int_equal(mem_at(s, "mg-1", 1), 700);
    for (int pass = 0; pass < 2; pass++)
        assert_int_equal(gv_sched_self_check(s), 0);
    assert_int_equal(gv_sched_drift_repairs(s), 0);
}

static void test_record_replaced_by_the_api(void **state)
{
    struct gv_sched *s = ((struct st_handfed *)*state)->s;
    add_node(s, "rc-0");
    const char *api = "v1;node=rc-0;c=GPU-rc-0-0:3000:0";
    add_pod(s, "uid-q", "rc-0", api, 1, "1");
    assert_int_equal(gv_sched_self_check(s), 0);
    /* Behind its back, the record and the engine both say 9000 MiB: no GPU
     * sum differs from its records, only the record from the API. */
    pthread_mutex_lock(&s->lock);
    struct srec *r = gv_sched_rec_find(s, "uid-q");
    assert_non_null(r);
    enum rec_phase ph = r->phase;
    assert_int_equal(gv_alloc_release(s->cluster, "uid-q", NULL), GV_OK);
    assert_int_equal(gv_sched_place_encoded(s, "uid-q", "default", "uid-q",
                                            "v1;node=rc-0;c=GPU-rc-0-0:9000:0", ph, NULL),
                     GV_OK);
    pthread_mutex_unlock(&s->lock);
    assert_int_equal(mem_at(s, "rc-0", 0), 9000);

    assert_int_equal(gv_sched_self_check(s), 1);
    assert_int_equal(mem_at(s, "rc-0", 0), 3000);
    pthread_mutex_lock(&s->lock);
    r = gv_sched_rec_find(s, "uid-q");
    assert_non_null(r);
    assert_string_equal(r->encoded, api);
    pthread_mutex_unlock(&s->lock);
    assert_int_equal(gv_sched_self_check(s), 0);
}

static void test_api_placement_without_record_counted(void **state)
{
    struct gv_sched *s = ((struct st_handfed *)*state)->s;
    add_node(s, "nr-0");
    add_pod(s, "uid-a", "nr-0", "v1;node=nr-0;c=GPU-nr-0-0:3000:0", 1, "1");
    add_pod(s, "uid-b", "nr-0", "v1;node=nr-0;c=GPU-nr-0-1:4000:0", 1, "1");
    /* the record and the engine's placement of uid-b gone, the API's word kept */
    pthread_mutex_lock(&s->lock);
    gv_sched_forget_pod(s, "uid-b");
    pthread_mutex_unlock(&s->lock);
    assert_false(placed(s, "uid-b"));
    assert_int_equal(mem_at(s, "nr-0", 1), 0);
    assert_int_equal(gv_sched_self_check(s), 1);
    assert_true(placed(s, "uid-b"));
    assert_int_equal(mem_at(s, "nr-0", 1), 4000);
    assert_int_equal(mem_at(s, "nr-0", 0), 3000);
    assert_int_equal(gv_sched_self_check(s), 0);
}

static void test_pods_before_their_node_counted_when_it_comes(void **state)
{
    struct gv_sched *s = ((struct st_handfed *)*state)->s;
    add_node(s, "early-0");
    add_pod(s, "uid-early", "early-0", "v1;node=early-0;c=GPU-early-0-0:100:0", 1, "1");
    add_pod(s, "uid-late", "late-0", "v1;node=late-0;c=GPU-late-0-1:2500:0", 1, "1");
    assert_false(placed(s, "uid-late"));
    add_node(s, "late-0");
    /* counted by the node's arrival itself, before any self-check */
    assert_true(placed(s, "uid-late"));
    assert_int_equal(mem_at(s, "late-0", 1), 2500);
    assert_int_equal(mem_at(s, "late-0", 0), 0);
    assert_int_equal(mem_at(s, "early-0", 0), 100);
    assert_int_equal(gv_sched_self_check(s), 0);
}

/* A bind computing its placement (BINDING, no assignment yet) is no drift:
 * a self-check in that window leaves its record alone. */
static void test_bind_in_progress_left_alone(void **state)
{
    struct gv_sched *s = ((struct st_handfed *)*state)->s;
    add_node(s, "bp-0");
    pthread_mutex_lock(&s->lock);
    struct srec *r = gv_sched_rec_get(s, "uid-binding", "default", "binding");
    assert_non_null(r);
    assert_int_equal(gv_sched_rec_set(r, REC_BINDING, "bp-0", NULL, NULL), GV_OK);
    pthread_mutex_unlock(&s->lock);
    assert_int_equal(gv_sched_self_check(s), 0);
    pthread_mutex_lock(&s->lock);
    r = gv_sched_rec_find(s, "uid-binding");
    assert_non_null(r);
    assert_int_equal(r->phase, REC_BINDING);
    pthread_mutex_unlock(&s->lock);
}

/* An annotation-written, not-bound placement that the API does not show
 * (and that is not a bind of ours whose outcome is unknown) is released:
 * its GPUs go back. */
static void test_unbound_placement_the_api_lacks_released(void **state)
{
    struct gv_sched *s = ((struct st_handfed *)*state)->s;
    add_node(s, "ub-0");
    pthread_mutex_lock(&s->lock);
    assert_int_equal(gv_sched_place_encoded(s, "uid-ub", "default", "ub",
                                            "v1;node=ub-0;c=GPU-ub-0-0:5000:0", REC_UNBOUND, NULL),
                     GV_OK);
    /* written just now: not lapsed (sched_pods.c expires older ones first) */
    gv_sched_rec_find(s, "uid-ub")->assigned_at = time(NULL);
    pthread_mutex_unlock(&s->lock);
    assert_int_equal(mem_at(s, "ub-0", 0), 5000);
    assert_int_equal(gv_sched_self_check(s), 1);
    assert_false(placed(s, "uid-ub"));
    assert_int_equal(mem_at(s, "ub-0", 0), 0);
    pthread_mutex_lock(&s->lock);
    assert_null(gv_sched_rec_find(s, "uid-ub"));
    pthread_mutex_unlock(&s->lock);
}

/* The truth table's entries (truth.c): a namespace or name that fills its
 * buffer with no room for the NUL makes the entry unreadable, never one
 * written past the buffer; one byte shorter reads back whole. */
static void test_truth_entry_field_bounds(void **state)
{
    (void)state;
    char name[GV_ALLOC_NODE_MAX + 1];
    memset(name, 'p', sizeof(name));
    for (size_t len = GV_ALLOC_NODE_MAX - 1; len <= GV_ALLOC_NODE_MAX; len++) {
        name[len] = '\0';
        json_t *t = truth_make(true, 1234, "77", "default", name, "v1;node=n;c=GPU-x:1:0");
        assert_non_null(t);
        struct truth o;
        bool ok = truth_get(t, &o);
        if (len < GV_ALLOC_NODE_MAX) {
            assert_true(ok);
            assert_string_equal(o.name, name);
            assert_string_equal(o.ns, "default");
            assert_string_equal(o.rv, "77");
            assert_true(o.bound);
            assert_int_equal(o.at, 1234);
            assert_string_equal(o.text, "v1;node=n;c=GPU-x:1:0");
        } else {
            assert_false(ok);
        }
        json_decref(t);
        name[len] = 'p';
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_multi_device_pods_read_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_replaced_by_the_api, setup, teardown),
        cmocka_unit_test_setup_teardown(test_api_placement_without_record_counted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pods_before_their_node_counted_when_it_comes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bind_in_progress_left_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unbound_placement_the_api_lacks_released, setup,
                                        teardown),
        cmocka_unit_test(test_truth_entry_field_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
