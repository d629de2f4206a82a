/*
 * What the scheduler's observer shows (src/scheduler/observe.c).  Who holds
 * which slice (HAMi's per-container series on /metrics and the dashboard's
 * state), under
 * a tenant that patches its own bound pod.  With signed placements the
 * engine keeps the verified assignment of a bound pod whose annotation is
 * altered (sched_pods.c, truth_note); what is shown must be that one too,
 * not the tenant's text: other GPUs, more memory, another node; nor does
 * it vanish when the tenant deletes the annotation.
 * Also: HAMi's container_index is the container's position in the spec,
 * whatever order the assignment lists containers in; a finished pod's
 * slices go; a reservation whose annotation the informer already shows is
 * one slice, not two; a filter slower than the last latency bucket counts
 * in +Inf alone; a GPU of unknown memory has no memory ratio (no "nan").
 * Driven by hand, no API server, as test_self_check_records.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gv_log.h"
#include "contracts/placement.h"
#include "scheduler/gv_extender.h"
#include "scheduler/gv_scheduler.h"
#include "scheduler/placement_guard.h"
#include "scheduler/sched_internal.h"
#include "scheduler/sched_observe.h"
#include "tests/scheduler/sched_handfed.h"

#define KEY "obs-key-0123456789abcdef0123456789abcdef"
#define AT "2026-11-30T06:00:00.000000Z"

static const struct gpu_desc two_t4[] = {{"Tesla T4", 15360, 10}, {"Tesla T4", 15360, 10}};

/* Signed placements, HAMi's per-GPU and per-container series on. */
static bool signed_per_gpu(struct gv_sched_config *cfg)
{
    cfg->metrics_per_gpu = true;
    return gv_placement_key_parse(KEY, strlen(KEY), &cfg->placement_key, NULL) == GV_OK;
}

static int setup(void **state)
{
    gv_log_set_level(GV_LOG_ERROR);
    return (*state = st_handfed_new(signed_per_gpu)) != NULL ? 0 : -1;
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

/* A running pod bound to node, containers named in spec order, with the
 * assignment text; signed with the scheduler's key when sign, else carrying
 * the signature sig_of (a tenant's copy of an old one) or none. */
static json_t *pod_of(struct st_handfed *f, const char *uid, const char *node, const char *text,
                      const char *const *ctrs, int n_ctrs, bool sign, const char *sig_of)
{
    json_t *cs = json_array();
    for (int i = 0; i < n_ctrs; i++)
        json_array_append_new(cs, json_pack("{s:s,s:{s:{s:s}}}", "name", ctrs[i], "resources",
                                            "limits", "nvidia.com/gpu", "1"));
    char sig[GV_PLACEMENT_SIG_MAX] = "";
    if (sign)
        assert_int_equal(
            gv_sched_placement_sign(&f->cfg, uid, node, AT, text, sig, sizeof(sig), NULL), GV_OK);
    json_t *pod = json_pack("{s:{s:s,s:s,s:s,s:{s:s,s:s,s:s}},s:{s:s,s:o},s:{s:s}}", "metadata",
                            "uid", uid, "name", uid, "namespace", "tenant", "annotations",
                            "gpuvisor.io/assignment", text, "gpuvisor.io/assigned-at", AT,
                            "gpuvisor.io/assigned-node", node, "spec", "nodeName", node,
                            "containers", cs, "status", "phase", "Running");
    const char *use = sign ? sig : sig_of;
    if (use != NULL)
        json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                            GV_PLACEMENT_SIG_ANNOTATION, json_string(use));
    return pod;
}

/* As the pod informer's transform feeds both (sched.c, pod_transform). */
static void deliver(struct gv_sched *s, json_t *pod)
{
    gv_sched_pod_update(s, pod);
    gv_sched_obs_pod_update(s, pod);
}

static char *metrics(struct gv_sched *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    gv_sched_obs_write_metrics(s, m);
    fclose(m);
    return buf;
}

/* The hami_vgpu_memory_allocated_bytes lines of pod (label text as written). */
static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Every slice on the dashboard's GPUs (its JSON state, as the page reads
 * it), each with the uuid of its GPU under "gpu"; the caller frees. */
static json_t *dash_slices(struct gv_sched *s)
{
    char *js = gv_sched_obs_state_json(s);
    assert_non_null(js);
    json_t *st = json_loads(js, 0, NULL);
    free(js);
    assert_non_null(st);
    json_t *out = json_array();
    size_t ni, gi, k;
    json_t *node, *gpu, *sl;
    json_array_foreach(json_object_get(st, "nodes"), ni, node)
    {
        json_array_foreach(json_object_get(node, "gpus"), gi, gpu)
        {
            json_array_foreach(json_object_get(gpu, "slices"), k, sl)
            {
                json_t *x = json_deep_copy(sl);
                json_object_set(x, "gpu", json_object_get(gpu, "uuid"));
                json_array_append_new(out, x);
            }
        }
    }
    json_decref(st);
    return out;
}

static void test_patched_assignment_shows_the_verified_one(void **state)
{
    struct st_handfed *f = *state;
    struct gv_sched *s = f->s;
    add_node(s, "n-0");
    add_node(s, "n-1");
    static const char *const one[] = {"c"};
    const char *good = "v1;node=n-0;c=GPU-n-0-0:1024:200";
    json_t *pod = pod_of(f, "u-t", "n-0", good, one, 1, true, NULL);
    const char *sig = json_string_value(json_object_get(
        json_object_get(json_object_get(pod, "metadata"), "annotations"),
        GV_PLACEMENT_SIG_ANNOTATION));
    char *keep_sig = strdup(sig);
    deliver(s, pod);
    json_decref(pod);
    char *m = metrics(s);
    assert_non_null(strstr(m, "hami_vgpu_memory_allocated_bytes{namespace=\"tenant\",node=\"n-0\","
                              "pod=\"u-t\",container_index=\"0\",device_uuid=\"GPU-n-0-0\","
                              "zone=\"vGPU\"} 1073741824\n"));
    assert_non_null(strstr(m, "hami_vgpu_core_allocated_ratio{namespace=\"tenant\",node=\"n-0\","
                              "pod=\"u-t\",container_index=\"0\",device_uuid=\"GPU-n-0-0\","
                              "zone=\"vGPU\"} 20\n"));
    free(m);

    /* The tenant patches its bound pod: the other GPU, all its memory and
     * compute, with the old signature copied (and then with none). */
    const char *forged[] = {"v1;node=n-0;c=GPU-n-0-1:15360:1000",
                            "v1;node=n-0;c=GPU-n-0-0:15360:1000,GPU-n-0-1:15360:1000"};
    for (int i = 0; i < 4; i++) {
        json_t *p = pod_of(f, "u-t", "n-0", forged[i % 2], one, 1, false, i < 2 ? keep_sig : NULL);
        deliver(s, p);
        json_decref(p);
        m = metrics(s);
        assert_int_equal(count_lines(m, "hami_vgpu_memory_allocated_bytes{"), 1);
        assert_non_null(strstr(m, "device_uuid=\"GPU-n-0-0\",zone=\"vGPU\"} 1073741824\n"));
        assert_null(strstr(m, "GPU-n-0-1\""));
        assert_null(strstr(m, "} 16106127360\n"));
        free(m);
        /* the dashboard: one slice, on GPU-n-0-0, 1024 MiB, 20 % */
        json_t *sl = dash_slices(s);
        assert_int_equal(json_array_size(sl), 1);
        json_t *x = json_array_get(sl, 0);
        assert_string_equal(json_string_value(json_object_get(x, "gpu")), "GPU-n-0-0");
        assert_int_equal(json_integer_value(json_object_get(x, "memMiB")), 1024);
        assert_true(json_real_value(json_object_get(x, "cores")) == 20.0);
        json_decref(sl);
    }
    free(keep_sig);

    /* The tenant deletes the annotation: the pod keeps the GPU it was bound
     * with (truth_note), and the views keep showing it. */
    pod = pod_of(f, "u-t", "n-0", good, one, 1, false, NULL);
    json_object_del(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                    "gpuvisor.io/assignment");
    deliver(s, pod);
    json_decref(pod);
    m = metrics(s);
    assert_int_equal(count_lines(m, "hami_vgpu_memory_allocated_bytes{"), 1);
    assert_non_null(strstr(m, "device_uuid=\"GPU-n-0-0\",zone=\"vGPU\"} 1073741824\n"));
    free(m);

    /* The pod ends: its slices go from both views. */
    pod = pod_of(f, "u-t", "n-0", good, one, 1, true, NULL);
    json_object_set_new(json_object_get(pod, "status"), "phase", json_string("Succeeded"));
    deliver(s, pod);
    json_decref(pod);
    m = metrics(s);
    assert_int_equal(count_lines(m, "hami_vgpu_memory_allocated_bytes{"), 0);
    free(m);
}

static void test_container_index_is_the_spec_position(void **state)
{
    struct st_handfed *f = *state;
    struct gv_sched *s = f->s;
    add_node(s, "n-2");
    /* spec order: sidecar (no GPU), d, c; the assignment lists c then d */
    static const char *const ctrs[] = {"sidecar", "d", "c"};
    json_t *pod = pod_of(f, "u-idx", "n-2", "v1;node=n-2;c=GPU-n-2-0:100:0;d=GPU-n-2-1:200:0",
                         ctrs, 3, true, NULL);
    deliver(s, pod);
    json_decref(pod);
    char *m = metrics(s);
    assert_non_null(strstr(m, "pod=\"u-idx\",container_index=\"2\",device_uuid=\"GPU-n-2-0\","
                              "zone=\"vGPU\"} 104857600\n"));
    assert_non_null(strstr(m, "pod=\"u-idx\",container_index=\"1\",device_uuid=\"GPU-n-2-1\","
                              "zone=\"vGPU\"} 209715200\n"));
    free(m);
}

static void test_unverified_pod_shows_nothing(void **state)
{
    struct st_handfed *f = *state;
    struct gv_sched *s = f->s;
    add_node(s, "n-3");
    static const char *const one[] = {"c"};
    /* never signed: not counted, so not shown */
    json_t *pod = pod_of(f, "u-forged", "n-3", "v1;node=n-3;c=GPU-n-3-0:15360:1000", one, 1, false,
                         NULL);
    deliver(s, pod);
    json_decref(pod);
    char *m = metrics(s);
    assert_int_equal(count_lines(m, "hami_vgpu_memory_allocated_bytes{"), 0);
    free(m);
}

/* A reservation (the filter placed the pod, the bind has not finished)
 * whose annotation the informer already shows is one slice, "reserved":
 * not also a bound one. */
static void test_reservation_shown_once(void **state)
{
    struct st_handfed *f = *state;
    struct gv_sched *s = f->s;
    add_node(s, "n-4");
    const char *text = "v1;node=n-4;c=GPU-n-4-0:2048:300";
    pthread_mutex_lock(&s->lock);
    assert_int_equal(gv_sched_place_encoded(s, "u-res", "tenant", "u-res", text, REC_RESERVED,
                                            NULL),
                     GV_OK);
    pthread_mutex_unlock(&s->lock);
    static const char *const one[] = {"c"};
    json_t *pod = pod_of(f, "u-res", "n-4", text, one, 1, true, NULL);
    /* the annotation is written, the Binding not yet: no nodeName */
    json_object_del(json_object_get(pod, "spec"), "nodeName");
    deliver(s, pod);
    json_decref(pod);
    json_t *sl = dash_slices(s);
    assert_int_equal(json_array_size(sl), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(sl, 0), "gpu")),
                        "GPU-n-4-0");
    assert_string_equal(json_string_value(json_object_get(json_array_get(sl, 0), "phase")),
                        "reserved");
    json_decref(sl);
}

/* A filter call slower than the last bucket (1 s) counts in +Inf only, and
 * in no other outcome's buckets: the bucket array ends at 1 s. */
static void test_filter_histogram_slow_call(void **state)
{
    struct st_handfed *f = *state;
    struct gv_sched *s = f->s;
    const char *names[] = {"n-9"};
    struct gv_ext_args args = {0};
    args.pod = json_pack("{s:{s:s,s:s,s:s}}", "metadata", "uid", "u-slow", "name", "slow",
                         "namespace", "tenant");
    args.names = names;
    args.n_names = 1;
    enum gv_ext_verdict fit[] = {GV_EXT_FIT};
    gv_sched_obs_filter(s, &args, 1, fit, NULL, 2.5);
    gv_sched_obs_filter(s, &args, 1, fit, NULL, 0.0002);
    json_decref(args.pod);
    char *m = metrics(s);
    assert_non_null(strstr(m, "gpuvisor_scheduler_filter_duration_seconds_bucket{result=\"fit\","
                              "le=\"1\"} 1\n"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_filter_duration_seconds_bucket{result=\"fit\","
                              "le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_filter_duration_seconds_count{result=\"fit\"} 2\n"));
    /* nothing spilled into the next outcome's first bucket */
    assert_non_null(strstr(m, "gpuvisor_scheduler_filter_duration_seconds_bucket{"
                              "result=\"nofit\",le=\"0.0001\"} 0\n"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_filter_duration_seconds_count{result=\"nofit\"} 0\n"));
    free(m);
}

/* A GPU whose memory the agent could not read (memoryMiB 0) has every
 * HAMi per-GPU series but the memory ratio: 0/0 would print "nan", which
 * is not Prometheus text ("NaN"), and the whole scrape would fail. */
static void test_zero_memory_gpu_has_no_ratio(void **state)
{
    struct st_handfed *f = *state;
    struct gv_sched *s = f->s;
    static const struct gpu_desc zero[] = {{"Tesla T4", 0, 10}};
    char *inv = st_inventory("n-z", zero, 1, true);
    json_t *n = st_node("n-z", inv, 0);
    gv_sched_node_update(s, n);
    json_decref(n);
    free(inv);
    for (int fam = 0; fam < GV_SCHED_OBS_GPU_FAMILIES; fam++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        assert_non_null(m);
        pthread_mutex_lock(&s->lock);
        gv_sched_obs_gpu_sample(s, m, fam, "n-z", 0);
        pthread_mutex_unlock(&s->lock);
        fclose(m);
        if (fam == 6) {
            assert_int_equal(len, 0);
        } else {
            assert_non_null(strstr(buf, "device_uuid=\"GPU-n-z-0\""));
            assert_null(strstr(buf, "nan"));
        }
        free(buf);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_patched_assignment_shows_the_verified_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_container_index_is_the_spec_position, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unverified_pod_shows_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reservation_shown_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter_histogram_slow_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_memory_gpu_has_no_ratio, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
