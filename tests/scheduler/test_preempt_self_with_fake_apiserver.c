/*
 * The extender's own preemption for kube-scheduler versions that never call
 * the preempt verb (src/scheduler/preempt_self.c; 1.20.0-1.20.9 and
 * 1.21.0-1.21.3, kubernetes#102971), against the kube-apiserver stand-in
 * (tests/fakes/apiserver: the real kube-scheduler cannot run here; make e2e
 * runs the real one).  The scheduler library in this process, its informers
 * fed by hand: a high-priority pod nominated to a full node with no promise
 * gets the victims the verb would name deleted from the API and a hold;
 * once kube-scheduler has called the verb, nothing is evicted by the
 * extender; a pod with preemptionPolicy Never evicts nothing; a pod holding
 * its promise is not preempted for twice, and a second preemptor beside it
 * still is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/gv_scheduler.h"
#include "scheduler/preempt.h"
#include "scheduler/preempt_self.h"
#include "tests/scheduler/sched_testlib.h"

#define GPU_MIB 16000

struct env {
    struct fake_apiserver fa;
    struct gv_kube_client *kube;
    struct gv_sched *s;
    char *low[2]; /* uids the API server gave the two low pods */
};

/* n1: two GPUs, each full with one pod of priority 1 (in the API too). */
static void env_start(struct env *e)
{
    memset(e, 0, sizeof(*e));
    assert_int_equal(fake_apiserver_start(&e->fa, NULL), 0);
    assert_non_null(e->kube = st_kube(e->fa.url));
    const char *cfg_text = "{\"reservationTimeoutSeconds\":600,\"insecureUnsignedPlacements\":true}";
    struct gv_sched_config cfg;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&cfg, &err), GV_OK);
    assert_int_equal(gv_sched_config_parse(cfg_text, strlen(cfg_text), &cfg, &err), GV_OK);
    assert_int_equal(gv_sched_new(&cfg, e->kube, &e->s, &err), GV_OK);
    gv_sched_config_clear(&cfg);
    struct gpu_desc g[2] = {{"NVIDIA A100-SXM4-80GB", GPU_MIB, 4},
                            {"NVIDIA A100-SXM4-80GB", GPU_MIB, 4}};
    char *inv = st_inventory("n1", g, 2, true);
    json_t *node = st_node("n1", inv, 0);
    gv_sched_node_update(e->s, node);
    json_decref(node);
    free(inv);
    for (int i = 0; i < 2; i++) {
        char name[16], assign[128], url[sizeof(e->fa.url) + 64];
        snprintf(name, sizeof(name), "low%d", i);
        snprintf(assign, sizeof(assign), "v1;node=n1;main=GPU-n1-%d:%d:0", i, GPU_MIB);
        json_t *p = st_gpu_pod(name, 1, GPU_MIB, "n1", assign);
        char *body = json_dumps(p, JSON_COMPACT), *out = NULL;
        snprintf(url, sizeof(url), "%s/api/v1/namespaces/default/pods", e->fa.url);
        assert_int_equal(st_http("POST", url, body, &out), 201);
        json_t *created = json_loads(out, 0, NULL);
        assert_non_null(created);
        e->low[i] = strdup(json_string_value(
            json_object_get(json_object_get(created, "metadata"), "uid")));
        gv_sched_pod_update(e->s, created); /* as the pod informer */
        json_decref(created);
        json_decref(p);
        free(body);
        free(out);
    }
}

static void env_stop(struct env *e)
{
    gv_sched_free(e->s);
    gv_kube_client_free(e->kube);
    fake_apiserver_stop(&e->fa);
    free(e->low[0]);
    free(e->low[1]);
}

/* A pod as the informer shows it after kube-scheduler's preemption
 * nominated n1 (evicting nobody: GPUs are ignored there); "hi" and the
 * others of priority 100 outrank the two pods on n1. */
static void nominated_pod(struct env *e, const char *name, int prio, const char *bound,
                          const char *policy)
{
    json_t *hi = st_gpu_pod(name, prio, GPU_MIB, NULL, NULL);
    if (bound != NULL) /* bound by someone else: no gpuvisor assignment */
        json_object_set_new(json_object_get(hi, "spec"), "nodeName", json_string(bound));
    json_object_set_new(json_object_get(hi, "status"), "nominatedNodeName", json_string("n1"));
    if (policy != NULL)
        json_object_set_new(json_object_get(hi, "spec"), "preemptionPolicy", json_string(policy));
    gv_sched_pod_update(e->s, hi);
    json_decref(hi);
}

static void nominated_as(struct env *e, const char *name, const char *policy)
{
    nominated_pod(e, name, 100, NULL, policy);
}

static void nominated(struct env *e, const char *policy)
{
    nominated_as(e, "hi", policy);
}

static int pods_left(struct env *e)
{
    char url[sizeof(e->fa.url) + 64], *out = NULL;
    snprintf(url, sizeof(url), "%s/api/v1/namespaces/default/pods", e->fa.url);
    st_http("GET", url, NULL, &out);
    json_t *l = json_loads(out ? out : "", 0, NULL);
    int n = (int)json_array_size(json_object_get(l, "items"));
    json_decref(l);
    free(out);
    return n;
}

static bool one_left(void *ud)
{
    return pods_left(ud) == 1;
}

static bool none_left(void *ud)
{
    return pods_left(ud) == 0;
}

/* The scheduler's preemption metrics, as one string (heap). */
static char *metrics(struct env *e)
{
    char *m = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&m, &len);
    gv_sched_preempt_metrics(e->s, f);
    gv_sched_preempt_self_metrics(e->s, f);
    fclose(f);
    return m;
}

/* "hi" nominated to n1: exactly one victim goes, the other stays (a hold
 * keeps its GPU for hi). */
static void first_preemption(struct env *e)
{
    nominated(e, NULL);
    if (!st_wait(one_left, e, 5000))
        fail_msg("pods left in the API: %d (want 1: one victim evicted)", pods_left(e));
    usleep(300 * 1000);
    assert_int_equal(pods_left(e), 1);
}

static void test_nominated_without_verb_evicts_one_gpu(void **state)
{
    (void)state;
    struct env e;
    env_start(&e);
    first_preemption(&e);
    char *m = metrics(&e); /* the thread is done: it deletes last */
    assert_non_null(strstr(m, "gpuvisor_scheduler_preempt_verb_called 0"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_preemptions_without_verb_total 1"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_preemption_evictions_total 1"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_nominated_holds 1"));
    free(m);
    env_stop(&e);
}

/* A pod that holds its promise already is not preempted for again when the
 * informer repeats it; a second preemptor, without a hold of its own while
 * the first holds one, still gets its victim (the other GPU). */
static void test_second_preemptor_beside_a_hold(void **state)
{
    (void)state;
    struct env e;
    env_start(&e);
    first_preemption(&e);
    nominated(&e, NULL); /* the informer again: a resync, a status write */
    usleep(500 * 1000);
    assert_int_equal(pods_left(&e), 1);
    char *m = metrics(&e);
    assert_non_null(strstr(m, "gpuvisor_scheduler_preemptions_without_verb_total 1\n"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_nominated_holds 1\n"));
    free(m);
    nominated_as(&e, "hi2", NULL);
    if (!st_wait(none_left, &e, 5000))
        fail_msg("pods left in the API: %d (want 0: hi2's victim evicted too)", pods_left(&e));
    usleep(300 * 1000);
    m = metrics(&e);
    assert_non_null(strstr(m, "gpuvisor_scheduler_preemptions_without_verb_total 2\n"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_preemption_evictions_total 2\n"));
    assert_non_null(strstr(m, "gpuvisor_scheduler_nominated_holds 2\n"));
    free(m);
    env_stop(&e);
}

/* At most 64 of these preemptions run at once (one per pod): with the API
 * server slow to answer their LISTs, the 65th nominated pod and later ones
 * start none until a slot is free. */
static void test_inflight_bounded(void **state)
{
    (void)state;
    struct env e;
    env_start(&e);
    char url[sizeof(e.fa.url) + 64];
    snprintf(url, sizeof(url), "%s/_fake/list-delay?resource=pods&ms=1500", e.fa.url);
    assert_int_equal(st_http("POST", url, "", NULL), 200);
    for (int i = 0; i < 70; i++) {
        char name[16];
        snprintf(name, sizeof(name), "hi%d", i);
        nominated_as(&e, name, NULL);
    }
    char *m = metrics(&e);
    assert_non_null(strstr(m, "gpuvisor_scheduler_preemptions_without_verb_total 64\n"));
    free(m);
    env_stop(&e); /* waits for the 64 */
}

static void test_verb_called_or_never_policy_evicts_nothing(void **state)
{
    (void)state;
    struct env e;
    env_start(&e);
    /* kube-scheduler called the verb once (any body): a fixed version */
    char body[] = "{}";
    struct gv_http_request rq = {.method = "POST", .path = "/gpuvisor/preempt", .body = body,
                                 .body_len = 2};
    struct gv_http_response rs = {.status = 200};
    gv_sched_preempt_self_verb(e.s, &rq, &rs);
    free(rs.body);
    nominated(&e, NULL);
    usleep(1000 * 1000);
    assert_int_equal(pods_left(&e), 2);
    env_stop(&e);

    env_start(&e);
    nominated(&e, "Never");
    usleep(1000 * 1000);
    assert_int_equal(pods_left(&e), 2);
    env_stop(&e);
}

/* No run at all (no thread, no API call) for a nominated pod of the same
 * priority as every pod on the node (kube-scheduler nominates those beside
 * each other all the time), nor for one already bound to a node, however
 * its status still reads. */
static void test_no_run_without_lower_pods_or_when_bound(void **state)
{
    (void)state;
    struct env e;
    env_start(&e);
    nominated_pod(&e, "peer", 1, NULL, NULL);
    nominated_pod(&e, "elsewhere", 100, "n1", NULL);
    usleep(1000 * 1000);
    assert_int_equal(pods_left(&e), 2);
    char *m = metrics(&e);
    assert_non_null(strstr(m, "gpuvisor_scheduler_preemptions_without_verb_total 0\n"));
    free(m);
    env_stop(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nominated_without_verb_evicts_one_gpu),
        cmocka_unit_test(test_second_preemptor_beside_a_hold),
        cmocka_unit_test(test_verb_called_or_never_policy_evicts_nothing),
        cmocka_unit_test(test_no_run_without_lower_pods_or_when_bound),
        cmocka_unit_test(test_inflight_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
