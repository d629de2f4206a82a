/*
 * The preempt verb end to end over HTTP (src/scheduler/preempt.c): the
 * scheduler library in this process, its state fed as the informers would
 * (gv_sched_node_update / gv_sched_pod_update), requests with the exact JSON
 * kube-scheduler 1.20+ sends (both NodeNameToMetaVictims, nodeCacheCapable,
 * and NodeNameToVictims with full Pods), the hold on the freed GPUs, a
 * restart between preemption and binding, metrics, and a randomized run of
 * preemptions, deletions and restarts (GV_PREEMPT_SEED, GV_PREEMPT_ROUNDS;
 * seed printed on failure) checking capacity and that every eviction let
 * its preemptor fit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "contracts/placement.h"
#include "scheduler/gv_scheduler.h"
#include "scheduler/hold_store.h"
#include "scheduler/preempt.h"
#include "tests/scheduler/sched_testlib.h"

#define GPU_MIB 16000

struct env {
    struct gv_sched *s;
    struct gv_httpd *h;
    char base[128];
    char metrics[128];
};

/* When set, the scheduler signs and verifies with it (the test owns it),
 * and unsigned placements of pods created before now count (the upgrade
 * window: the bound pods fed here are unsigned, created in 2020). */
static struct gv_placement_key *test_key;

static void env_start_kube(struct env *e, const char *const *nodes, size_t n_nodes,
                           unsigned gpus, struct gv_kube_client *kube)
{
    const char *cfg_text = "{\"reservationTimeoutSeconds\":600,\"insecureUnsignedPlacements\":true,"
                           "\"nodePolicy\":\"binpack\"}";
    struct gv_sched_config cfg;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&cfg, &err), GV_OK);
    assert_int_equal(gv_sched_config_parse(cfg_text, strlen(cfg_text), &cfg, &err), GV_OK);
    if (test_key != NULL) {
        cfg.placement_key = test_key;
        cfg.insecure_unsigned = false;
        cfg.unsigned_before = time(NULL) + 3600;
    }
    assert_int_equal(gv_sched_new(&cfg, kube, &e->s, &err), GV_OK);
    gv_sched_feed_by_hand(e->s); /* the informers are fed by hand */
    cfg.placement_key = NULL; /* borrowed by the scheduler, owned by the test */
    gv_sched_config_clear(&cfg);
    for (size_t i = 0; i < n_nodes; i++) {
        json_t *node = st_uniform_node(nodes[i], "NVIDIA A100-SXM4-80GB", GPU_MIB, 4, gpus);
        gv_sched_node_update(e->s, node);
        json_decref(node);
    }
    struct gv_httpd_options o = {.name = "extender", .address = "127.0.0.1",
                                 .max_body = 64u << 20, .max_connections = 16};
    assert_int_equal(gv_httpd_new(&o, &e->h, &err), GV_OK);
    assert_int_equal(gv_sched_serve_extender(e->s, e->h, "/gpuvisor", &err), GV_OK);
    assert_int_equal(gv_sched_serve_health(e->s, e->h, &err), GV_OK);
    assert_int_equal(gv_httpd_start(e->h, &err), GV_OK);
    snprintf(e->base, sizeof(e->base), "http://127.0.0.1:%u/gpuvisor", gv_httpd_port(e->h));
    snprintf(e->metrics, sizeof(e->metrics), "http://127.0.0.1:%u/metrics", gv_httpd_port(e->h));
}

static void env_start(struct env *e, const char *const *nodes, size_t n_nodes, unsigned gpus)
{
    env_start_kube(e, nodes, n_nodes, gpus, NULL);
}

static void env_stop(struct env *e)
{
    gv_httpd_free(e->h);
    gv_sched_free(e->s);
    memset(e, 0, sizeof(*e));
}

/* The API server stand-in and a client of it. */
static struct gv_kube_client *api_start(struct fake_apiserver *fa)
{
    assert_int_equal(fake_apiserver_start(fa, NULL), 0);
    struct gv_kube_client *kube = st_kube(fa->url);
    assert_non_null(kube);
    return kube;
}

static void api_stop(struct fake_apiserver *fa, struct gv_kube_client *kube)
{
    gv_kube_client_free(kube);
    fake_apiserver_stop(fa);
}

static void bound(struct gv_sched *s, const char *uid, int prio, const char *node, unsigned gpu,
                  uint64_t mem)
{
    char assign[256];
    snprintf(assign, sizeof(assign), "v1;node=%s;main=GPU-%s-%u:%llu:0", node, node, gpu,
             (unsigned long long)mem);
    json_t *p = st_gpu_pod(uid, prio, mem, node, assign);
    json_object_set_new(json_object_get(p, "metadata"), "creationTimestamp",
                        json_string("2020-01-01T00:00:00Z"));
    gv_sched_pod_update(s, p);
    json_decref(p);
}

static void deleted(struct gv_sched *s, const char *uid)
{
    json_t *p = st_gpu_pod(uid, 0, 0, NULL, NULL);
    gv_sched_pod_delete(s, p);
    json_decref(p);
}

/* POSTs body text to verb; returns the answer's text (heap) and status. */
static char *post(const struct env *e, const char *verb, const char *body, long *status)
{
    char url[256], *out = NULL;
    snprintf(url, sizeof(url), "%s/%s", e->base, verb);
    *status = st_http("POST", url, body, &out);
    return out;
}

/* POSTs the preempt verb the JSON args (taken); returns the answer's text. */
static char *post_args(const struct env *e, json_t *args, long *status)
{
    char *body = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    assert_non_null(body);
    char *out = post(e, "preempt", body, status);
    free(body);
    return out;
}

static void assert_json_eq(const char *got, const char *want)
{
    json_t *g = json_loads(got ? got : "", 0, NULL), *w = json_loads(want, 0, NULL);
    assert_non_null(w);
    if (g == NULL || !json_equal(g, w))
        fail_msg("got %s\nwant %s", got ? got : "(null)", want);
    json_decref(g);
    json_decref(w);
}

/* The preempt body kube-scheduler 1.20 sends a nodeCacheCapable extender:
 * NodeNameToVictims is a nil map (null), victims as MetaPods. */
static char *meta_body(json_t *pod, const char *const *nodes, size_t n)
{
    json_t *m = json_object();
    for (size_t i = 0; i < n; i++)
        json_object_set_new(m, nodes[i], json_pack("{s:[],s:i}", "Pods", "NumPDBViolations", 0));
    json_t *args = json_pack("{s:O,s:n,s:o}", "Pod", pod, "NodeNameToVictims",
                             "NodeNameToMetaVictims", m);
    char *text = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    return text;
}

/* n1: g0 a (16000), g1 b + c (8000 each); n2: g0 d, g1 e (priority 1000). */
static void fill(struct gv_sched *s, bool with_a)
{
    if (with_a)
        bound(s, "a", 1, "n1", 0, 16000);
    bound(s, "b", 1, "n1", 1, 8000);
    bound(s, "c", 1, "n1", 1, 8000);
    bound(s, "d", 1000, "n2", 0, 16000);
    bound(s, "e", 1000, "n2", 1, 16000);
}

static const char *const NODES[] = {"n1", "n2"};

/* n1 and n2 of 2 GPUs filled as above (kube may be NULL); returns the
 * preemptor "hi" (priority 100) asking mem MiB of one GPU. */
static json_t *start_filled(struct env *e, struct gv_kube_client *kube, unsigned long long mem)
{
    env_start_kube(e, NODES, 2, 2, kube);
    fill(e->s, true);
    return st_gpu_pod("hi", 100, mem, NULL, NULL);
}

/* ExtenderPreemptionArgs as kube-scheduler's Go encoder writes them (nil
 * maps and slices as null; a NumPDBViolations left out or null counts 0),
 * and what is not one: a clear error, nothing half-parsed. */
static void test_preempt_args_wire(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        size_t n_nodes, n_victims; /* of the one node, when n_nodes is 1 */
        int64_t pdb;
        bool meta;
    } ok[] = {
        {"{\"Pod\":{},\"NodeNameToVictims\":null,\"NodeNameToMetaVictims\":null}", 0, 0, 0, false},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":null}}", 1, 0, 0, true},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":null,\"NumPDBViolations\":2}}}", 1,
         0, 2, true},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"u\"}]}}}", 1, 1, 0,
         true},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[],\"NumPDBViolations\":null}}}",
         1, 0, 0, true},
        {"{\"Pod\":{},\"NodeNameToVictims\":{\"n1\":{\"Pods\":[{\"metadata\":{\"uid\":\"u\"}},"
         "{\"metadata\":{\"uid\":\"w\"}}],\"NumPDBViolations\":1}},\"NodeNameToMetaVictims\":{}}",
         1, 2, 1, false},
        /* the meta form wins when kube-scheduler fills it */
        {"{\"Pod\":{},\"NodeNameToVictims\":{\"a\":null,\"b\":null},"
         "\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"u\"}]}}}",
         1, 1, 0, true},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct gv_ext_preempt_args a;
        struct gv_error err = {0};
        if (gv_ext_preempt_args_parse(ok[i].body, strlen(ok[i].body), &a, &err) != GV_OK)
            fail_msg("%s: %s", ok[i].body, err.msg);
        assert_int_equal(a.n_nodes, ok[i].n_nodes);
        assert_int_equal(a.meta, ok[i].meta);
        if (a.n_nodes == 1) {
            assert_string_equal(a.nodes[0].name, "n1");
            assert_int_equal(a.nodes[0].n_victims, ok[i].n_victims);
            assert_int_equal(a.nodes[0].pdb_violations, ok[i].pdb);
            if (ok[i].n_victims > 0)
                assert_string_equal(a.nodes[0].victims[0], "u");
        }
        gv_ext_preempt_args_clear(&a);
    }
    static const struct {
        const char *body, *says;
    } bad[] = {
        {"{\"Pod\":", "invalid JSON"},
        {"[]", "not an object"},
        {"{\"NodeNameToMetaVictims\":{}}", "Pod missing"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":[]}", "is not an object"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":7}}", "victims of node n1: not an object"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":[]}}", "victims of node n1: not an object"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"NumPDBViolations\":-1}}}", "not a count"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"NumPDBViolations\":\"1\"}}}",
         "not a count"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":{}}}}", "Pods is not an array"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"\"}]}}}", "has no UID"},
        {"{\"Pod\":{},\"NodeNameToVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"u\"}]}}}",
         "has no metadata.uid"},
        {"{\"Pod\":{},\"NodeNameToMetaVictims\":{\"\":null}}", "empty node name"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gv_ext_preempt_args a;
        struct gv_error err = {0};
        if (gv_ext_preempt_args_parse(bad[i].body, strlen(bad[i].body), &a, &err) == GV_OK)
            fail_msg("%s: accepted", bad[i].body);
        if (strstr(err.msg, bad[i].says) == NULL)
            fail_msg("%s: error '%s' does not say '%s'", bad[i].body, err.msg, bad[i].says);
        assert_null(a.root);
        assert_null(a.nodes);
        assert_int_equal(a.n_nodes, 0);
    }
}

static void test_meta_round_trip_and_hold(void **state)
{
    (void)state;
    struct env e;
    json_t *hi = start_filled(&e, NULL, 16000);
    long st;
    char *body = meta_body(hi, NODES, 2);
    char *out = post(&e, "preempt", body, &st);
    assert_int_equal(st, 200);
    /* one victim on one GPU of n1; n2's pods outrank the preemptor */
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],"
                        "\"NumPDBViolations\":0}}}");
    free(out);
    /* the same call again (kube-scheduler repeats): the same answer */
    out = post(&e, "preempt", body, &st);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],"
                        "\"NumPDBViolations\":0}}}");
    free(out);
    free(body);
    /* victim still there: the preemptor does not fit yet (no over-commit) */
    json_t *res = st_filter(e.base, hi, (const char *[]){"n1", "n2"}, 2, &st);
    assert_int_equal(st, 200);
    assert_null(st_chosen(res));
    json_decref(res);
    deleted(e.s, "a");
    /* a lower-priority pod arriving now cannot take the freed GPU */
    json_t *lo = st_gpu_pod("lo", 50, 8000, NULL, NULL);
    res = st_filter(e.base, lo, (const char *[]){"n1", "n2"}, 2, &st);
    assert_null(st_chosen(res));
    json_decref(res);
    /* a higher-priority one can (the hold protects against lower only) */
    json_t *top = st_gpu_pod("top", 500, 8000, NULL, NULL);
    res = st_filter(e.base, top, (const char *[]){"n1"}, 1, &st);
    assert_non_null(st_chosen(res));
    json_decref(res);
    deleted(e.s, "top"); /* its reservation goes with it */
    /* the preemptor lands on the GPU it was promised */
    res = st_filter(e.base, hi, (const char *[]){"n2", "n1"}, 2, &st);
    assert_string_equal(st_chosen(res), "n1");
    json_decref(res);
    /* the hold became the reservation: the low pod still finds no room */
    res = st_filter(e.base, lo, (const char *[]){"n1", "n2"}, 2, &st);
    assert_null(st_chosen(res));
    json_decref(res);
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_preemptions_total",
                          "result=\"victims\"") == 2);
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_preemption_victims_total",
                          "priority=\"1\"") == 2);
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_nominated_holds", "") == 0);
    json_decref(hi);
    json_decref(lo);
    json_decref(top);
    env_stop(&e);
}

static void test_full_pods_form_and_refusals(void **state)
{
    (void)state;
    struct env e;
    json_t *hi = start_filled(&e, NULL, 8000);
    /* kube-scheduler's own victim (a CPU pod gpuvisor never placed) goes
     * too, with its PDB count; the GPU victim is added beside it.  8000
     * MiB: b or c alone frees enough on g1; of equals the one placed last
     * goes (kube-scheduler too evicts the most recently started first). */
    json_t *cpu = json_pack("{s:{s:s,s:s,s:s}}", "metadata", "uid", "cpuhog", "name", "cpuhog",
                            "namespace", "default");
    json_t *args = json_pack("{s:O,s:{s:{s:[o],s:i}},s:n}", "Pod", hi, "NodeNameToVictims", "n1",
                             "Pods", cpu, "NumPDBViolations", 1, "NodeNameToMetaVictims");
    long st;
    char *out = post_args(&e, args, &st);
    assert_int_equal(st, 200);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"cpuhog\"},"
                        "{\"UID\":\"c\"}],\"NumPDBViolations\":1}}}");
    free(out);
    /* preemptionPolicy: Never: no node */
    json_object_set_new(json_object_get(hi, "spec"), "preemptionPolicy", json_string("Never"));
    char *body = meta_body(hi, NODES, 2);
    out = post(&e, "preempt", body, &st);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{}}");
    free(out);
    free(body);
    /* equal priority: nobody on either node may go */
    json_t *eq = st_gpu_pod("eq", 1, 16000, NULL, NULL);
    body = meta_body(eq, NODES, 2);
    out = post(&e, "preempt", body, &st);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{}}");
    free(out);
    free(body);
    /* a pod asking no GPU: kube-scheduler's map comes back as it was */
    json_t *plain = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:i,s:[{s:s}]}}", "metadata", "uid", "p",
                              "name", "p", "namespace", "default", "spec", "schedulerName",
                              "gpuvisor-scheduler", "priority", 5, "containers", "name", "c");
    body = meta_body(plain, NODES, 1);
    out = post(&e, "preempt", body, &st);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[],\"NumPDBViolations\":0}}}");
    free(out);
    free(body);
    /* malformed bodies: 400 with a reason, nothing held */
    const char *bad[] = {"{", "[]", "{\"Pod\":1}", "{\"Pod\":{},\"NodeNameToMetaVictims\":[]}",
                         "{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{}]}}}",
                         "{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n1\":{\"NumPDBViolations\":-1}}}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        out = post(&e, "preempt", bad[i], &st);
        if (st != 400)
            fail_msg("%s: status %ld", bad[i], st);
        free(out);
    }
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_nominated_holds", "") == 1);
    json_decref(hi);
    json_decref(eq);
    json_decref(plain);
    env_stop(&e);
}

/* The victims' node of a preempt answer ("" for none; heap). */
static char *answered_node(const char *out)
{
    json_t *j = json_loads(out != NULL ? out : "", 0, NULL);
    json_t *m = json_object_get(j, "NodeNameToMetaVictims");
    assert_true(json_is_object(m));
    assert_true(json_object_size(m) <= 1);
    const char *k = "";
    json_t *v;
    json_object_foreach(m, k, v)
        break;
    char *name = strdup(json_object_size(m) ? k : "");
    json_decref(j);
    return name;
}

/*
 * The answer is the one node where the eviction costs least, whatever order
 * kube-scheduler lists the candidates in (a Go map: any order), and of
 * equal costs the smallest name.  n1 frees a GPU with two victims, n2 with
 * one of priority 1, n3 with one of priority 2; n0 is n2's twin.
 */
static void test_cheapest_node_any_order(void **state)
{
    (void)state;
    static const char *const nodes[] = {"n0", "n1", "n2", "n3"};
    struct env e;
    env_start(&e, nodes, 4, 2);
    for (unsigned g = 0; g < 2; g++) {
        char u[16];
        snprintf(u, sizeof(u), "a%ux", g);
        bound(e.s, u, 1, "n1", g, 8000);
        snprintf(u, sizeof(u), "a%uy", g);
        bound(e.s, u, 1, "n1", g, 8000);
        snprintf(u, sizeof(u), "b%u", g);
        bound(e.s, u, 1, "n2", g, 16000);
        snprintf(u, sizeof(u), "c%u", g);
        bound(e.s, u, 2, "n3", g, 16000);
        snprintf(u, sizeof(u), "z%u", g);
        bound(e.s, u, 1, "n0", g, 16000);
    }
    json_t *hi = st_gpu_pod("hi", 100, 16000, NULL, NULL);
    static const char *const orders[][3] = {
        {"n1", "n2", "n3"}, {"n3", "n2", "n1"}, {"n2", "n3", "n1"}, {"n1", "n3", "n2"}};
    long st;
    for (size_t o = 0; o < sizeof(orders) / sizeof(orders[0]); o++) {
        char *body = meta_body(hi, orders[o], 3);
        char *out = post(&e, "preempt", body, &st);
        assert_int_equal(st, 200);
        assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n2\":{\"Pods\":[{\"UID\":\"b0\"}],"
                            "\"NumPDBViolations\":0}}}");
        free(out);
        free(body);
    }
    /* equal costs: the smallest name, listed first or last */
    static const char *const twins[][2] = {{"n2", "n0"}, {"n0", "n2"}};
    for (size_t o = 0; o < 2; o++) {
        char *body = meta_body(hi, twins[o], 2);
        char *out = post(&e, "preempt", body, &st);
        char *node = answered_node(out);
        if (strcmp(node, "n0") != 0)
            fail_msg("candidates %s,%s: answered %s", twins[o][0], twins[o][1], node);
        free(node);
        free(out);
        free(body);
    }
    /* the hold is on n0; its victim gone, a filter that does not list n0
     * among its candidates never answers n0 */
    deleted(e.s, "z0");
    json_t *res = st_filter(e.base, hi, (const char *[]){"n1", "n3"}, 2, &st);
    assert_int_equal(st, 200);
    assert_null(st_chosen(res));
    json_decref(res);
    /* nor reserved it there: a more important pod may still take n0 */
    json_t *top = st_gpu_pod("top", 500, 16000, NULL, NULL);
    res = st_filter(e.base, top, (const char *[]){"n0"}, 1, &st);
    assert_string_equal(st_chosen(res), "n0");
    json_decref(res);
    json_decref(top);
    deleted(e.s, "top");
    res = st_filter(e.base, hi, (const char *[]){"n1", "n0"}, 2, &st);
    assert_string_equal(st_chosen(res), "n0");
    json_decref(res);
    json_decref(hi);
    env_stop(&e);
}

/* A GPU pod without a uid (kube-scheduler never sends one; a malformed or
 * hostile body may): no victims anywhere, and the scheduler stays up. */
/* kube-scheduler names victims of its own on every node (pods it preempts
 * for CPU or memory); when gpuvisor placed them, their priorities are the
 * marks', and they decide between nodes as they do in kube-scheduler's own
 * choice: the node whose most important victim matters least. */
static void test_own_victims_keep_their_priority(void **state)
{
    (void)state;
    static const char *const nodes[] = {"n0", "n1"};
    struct env e;
    env_start(&e, nodes, 2, 1);
    bound(e.s, "k0", 50, "n0", 0, 16000);
    bound(e.s, "k1", 10, "n1", 0, 16000);
    json_t *hi = st_gpu_pod("hi", 100, 16000, NULL, NULL);
    static const char *const orders[][2] = {{"n0", "n1"}, {"n1", "n0"}};
    for (size_t o = 0; o < 2; o++) {
        json_t *m = json_object();
        for (size_t i = 0; i < 2; i++)
            json_object_set_new(m, orders[o][i],
                                json_pack("{s:[{s:s}],s:i}", "Pods", "UID",
                                          strcmp(orders[o][i], "n0") == 0 ? "k0" : "k1",
                                          "NumPDBViolations", 0));
        json_t *args = json_pack("{s:O,s:n,s:o}", "Pod", hi, "NodeNameToVictims",
                                 "NodeNameToMetaVictims", m);
        long st;
        char *out = post_args(&e, args, &st);
        assert_int_equal(st, 200);
        assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"k1\"}],"
                            "\"NumPDBViolations\":0}}}");
        free(out);
    }
    json_decref(hi);
    env_stop(&e);
}

static void test_preemptor_without_uid(void **state)
{
    (void)state;
    struct env e;
    json_t *hi = start_filled(&e, NULL, 16000);
    json_object_del(json_object_get(hi, "metadata"), "uid");
    long st;
    char *body = meta_body(hi, NODES, 2);
    char *out = post(&e, "preempt", body, &st);
    assert_int_equal(st, 200);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{}}");
    free(out);
    free(body);
    json_object_set_new(json_object_get(hi, "metadata"), "uid", json_string(""));
    body = meta_body(hi, NODES, 2);
    out = post(&e, "preempt", body, &st);
    assert_int_equal(st, 200);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{}}");
    free(out);
    free(body);
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_nominated_holds", "") == 0);
    json_decref(hi);
    env_stop(&e);
}

/* Events (posted through the API stand-in; the informers are not started,
 * the state is fed by hand): the preemptor hears which node, which GPU and
 * how much is freed, the victim for whom and what it held. */
struct ev_wait {
    const char *url;
    char *text;
};

static bool two_events(void *ud)
{
    struct ev_wait *w = ud;
    free(w->text);
    w->text = NULL;
    char url[600];
    snprintf(url, sizeof(url), "%s/api/v1/namespaces/default/events", w->url);
    st_http("GET", url, NULL, &w->text);
    return w->text != NULL && strstr(w->text, "GPUPreemption") != NULL &&
           strstr(w->text, "GPUPreempted") != NULL;
}

static void test_events_with_fake_apiserver(void **state)
{
    (void)state;
    struct fake_apiserver fa;
    struct gv_kube_client *kube = api_start(&fa);
    struct env e;
    json_t *hi = start_filled(&e, kube, 16000);
    char *body = meta_body(hi, NODES, 2);
    long st;
    free(post(&e, "preempt", body, &st));
    assert_int_equal(st, 200);
    struct ev_wait w = {fa.url, NULL};
    if (!st_wait(two_events, &w, 5000))
        fail_msg("events: %s", w.text ? w.text : "(none)");
    assert_non_null(strstr(w.text, "gpuvisor preemption on node n1: 1 victim(s) free 16000 MiB"));
    assert_non_null(strstr(w.text, "promised GPU(s) GPU-n1-0"));
    assert_non_null(strstr(w.text, "evicted by gpuvisor for default/hi (priority 100) on node n1"));
    free(w.text);
    free(body);
    json_decref(hi);
    env_stop(&e);
    api_stop(&fa, kube);
}

/* A reservation or a bind in flight is never a victim: kube-scheduler
 * rejects the whole answer when a victim is not among the pods it has on
 * the node, and evicting a pod it has not bound frees nothing. */
static void test_only_bound_pods_are_victims(void **state)
{
    (void)state;
    struct env e;
    env_start(&e, (const char *[]){"n3"}, 1, 1);
    json_t *lo = st_gpu_pod("lo", 1, 16000, NULL, NULL);
    long st;
    json_t *res = st_filter(e.base, lo, (const char *[]){"n3"}, 1, &st);
    assert_string_equal(st_chosen(res), "n3"); /* reserved, not bound */
    json_decref(res);
    gv_sched_pod_update(e.s, lo); /* the informer sees it, still pending */
    json_t *hi = st_gpu_pod("hi", 100, 16000, NULL, NULL);
    char *body = meta_body(hi, (const char *[]){"n3"}, 1);
    char *out = post(&e, "preempt", body, &st);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{}}");
    free(out);
    /* bound now (as the API shows after the bind): a victim */
    bound(e.s, "lo", 1, "n3", 0, 16000);
    out = post(&e, "preempt", body, &st);
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n3\":{\"Pods\":[{\"UID\":\"lo\"}],"
                        "\"NumPDBViolations\":0}}}");
    free(out);
    free(body);
    json_decref(lo);
    json_decref(hi);
    env_stop(&e);
}

/* The scheduler restarts between the preemption and the preemptor's
 * filter: the hold is gone with it, nothing is over-committed, and the
 * preemptor still gets the GPU its victim freed. */
static void test_restart_between_preempt_and_bind(void **state)
{
    (void)state;
    struct env e;
    json_t *hi = start_filled(&e, NULL, 16000);
    long st;
    char *body = meta_body(hi, NODES, 2);
    free(post(&e, "preempt", body, &st));
    assert_int_equal(st, 200);
    free(body);
    env_stop(&e);
    env_start(&e, NODES, 2, 2);
    fill(e.s, false); /* the victim was deleted meanwhile */
    json_t *res = st_filter(e.base, hi, (const char *[]){"n1", "n2"}, 2, &st);
    assert_string_equal(st_chosen(res), "n1");
    json_decref(res);
    char *err = st_bind(e.base, hi, "n1");
    /* no API here: the bind itself cannot complete, the GPUs stay held */
    free(err);
    json_t *lo = st_gpu_pod("lo", 50, 8000, NULL, NULL);
    res = st_filter(e.base, lo, (const char *[]){"n1", "n2"}, 2, &st);
    assert_null(st_chosen(res));
    json_decref(res);
    json_decref(hi);
    json_decref(lo);
    env_stop(&e);
}

/*
 * Random rounds over 3 nodes x 2 GPUs: low pods fill, a preemptor of a
 * random priority asks, the victims are deleted, the preemptor must then
 * fit on the promised node; random deletions and restarts (state replayed
 * from the model of the API).  After every round no GPU is over its memory
 * by the bound pods alone.
 */
struct mpod {
    char uid[16];
    int prio;
    char node[8];
    unsigned gpu;
    uint64_t mem;
    bool live;
};

static void replay(struct env *e, const struct mpod *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].live)
            bound(e->s, m[i].uid, m[i].prio, m[i].node, m[i].gpu, m[i].mem);
}

static void check_capacity(const struct mpod *m, size_t n, unsigned seed, int round)
{
    const char *nodes[] = {"n1", "n2", "n3"};
    for (int ni = 0; ni < 3; ni++)
        for (unsigned g = 0; g < 2; g++) {
            uint64_t used = 0;
            for (size_t i = 0; i < n; i++)
                if (m[i].live && strcmp(m[i].node, nodes[ni]) == 0 && m[i].gpu == g)
                    used += m[i].mem;
            if (used > GPU_MIB)
                fail_msg("seed %u round %d: %s GPU %u over capacity: %llu MiB "
                         "(GV_PREEMPT_SEED=%u to replay)",
                         seed, round, nodes[ni], g, (unsigned long long)used, seed);
        }
}

static void test_random_preemptions_with_restarts(void **state)
{
    (void)state;
    const char *env_seed = getenv("GV_PREEMPT_SEED");
    const char *env_rounds = getenv("GV_PREEMPT_ROUNDS");
    unsigned seed = env_seed ? (unsigned)strtoul(env_seed, NULL, 10) : (unsigned)time(NULL);
    int rounds = env_rounds ? atoi(env_rounds) : 500;
    srand(seed);
    const char *const nodes[] = {"n1", "n2", "n3"};
    struct env e;
    env_start(&e, nodes, 3, 2);
    static struct mpod m[4096];
    size_t nm = 0;
    unsigned evicted = 0, preemptions = 0;
    for (int round = 0; round < rounds && nm + 8 < 4096; round++) {
        /* fill with low pods where they fit (bound directly, as the API shows) */
        for (int k = 0; k < 3; k++) {
            struct mpod *p = &m[nm];
            snprintf(p->uid, sizeof(p->uid), "r%d-%d", round, k);
            p->prio = rand() % 3;
            p->mem = 4000u * (uint64_t)(1 + rand() % 4);
            snprintf(p->node, sizeof(p->node), "%s", nodes[rand() % 3]);
            p->gpu = (unsigned)(rand() % 2);
            uint64_t used = 0;
            for (size_t i = 0; i < nm; i++)
                if (m[i].live && strcmp(m[i].node, p->node) == 0 && m[i].gpu == p->gpu)
                    used += m[i].mem;
            if (used + p->mem > GPU_MIB)
                continue;
            p->live = true;
            bound(e.s, p->uid, p->prio, p->node, p->gpu, p->mem);
            nm++;
        }
        /* a preemptor */
        char uid[16];
        snprintf(uid, sizeof(uid), "hp%d", round);
        int hprio = 1 + rand() % 4;
        uint64_t hmem = 4000u * (uint64_t)(1 + rand() % 4);
        json_t *hp = st_gpu_pod(uid, hprio, hmem, NULL, NULL);
        char *body = meta_body(hp, nodes, 3);
        long st;
        char *out = post(&e, "preempt", body, &st);
        free(body);
        if (st != 200)
            fail_msg("seed %u round %d: preempt status %ld", seed, round, st);
        json_t *ans = json_loads(out, 0, NULL);
        free(out);
        json_t *map = json_object_get(ans, "NodeNameToMetaVictims");
        assert_true(json_object_size(map) <= 1);
        const char *node;
        json_t *v;
        char chosen_node[8] = "";
        json_object_foreach(map, node, v)
        {
            snprintf(chosen_node, sizeof(chosen_node), "%s", node);
            json_t *pods = json_object_get(v, "Pods");
            for (size_t k = 0; k < json_array_size(pods); k++) {
                const char *vu =
                    json_string_value(json_object_get(json_array_get(pods, k), "UID"));
                bool found = false;
                for (size_t i = 0; i < nm; i++)
                    if (m[i].live && strcmp(m[i].uid, vu) == 0) {
                        if (m[i].prio >= hprio || strcmp(m[i].node, node) != 0)
                            fail_msg("seed %u round %d: victim %s (priority %d on %s) for a "
                                     "pod of priority %d on %s",
                                     seed, round, vu, m[i].prio, m[i].node, hprio, node);
                        m[i].live = false;
                        deleted(e.s, vu);
                        found = true;
                        evicted++;
                    }
                if (!found)
                    fail_msg("seed %u round %d: victim %s is no live pod", seed, round, vu);
            }
        }
        json_decref(ans);
        /* a pod of lower priority arrives between the preemption and the
         * preemptor's filter: whatever it gets, not the promised GPUs */
        json_t *sneak = st_gpu_pod("sneak", hprio - 1, 4000u * (uint64_t)(1 + rand() % 4), NULL, NULL);
        json_decref(st_filter(e.base, sneak, nodes, 3, &st));
        bool restarted = false;
        if (rand() % 20 == 0) { /* restart between preemption and filter */
            restarted = true;
            env_stop(&e);
            env_start(&e, nodes, 3, 2);
            replay(&e, m, nm);
        }
        if (chosen_node[0] != '\0') {
            preemptions++;
            json_t *res = st_filter(e.base, hp, nodes, 3, &st);
            const char *got = st_chosen(res);
            if (got == NULL || (!restarted && strcmp(got, chosen_node) != 0))
                fail_msg("seed %u round %d: pods evicted on %s but preemptor %s got %s "
                         "(GV_PREEMPT_SEED=%u)",
                         seed, round, chosen_node, uid, got ? got : "no node", seed);
            /* it binds: read its GPU back from a fresh filter's reservation */
            struct mpod *p = &m[nm];
            snprintf(p->uid, sizeof(p->uid), "%s", uid);
            p->prio = hprio;
            p->mem = hmem;
            snprintf(p->node, sizeof(p->node), "%s", got);
            /* which GPU: the one with room for it on that node, as the
             * reservation chose; the bound pod then holds it */
            p->gpu = 2;
            for (unsigned g = 0; g < 2 && p->gpu == 2; g++) {
                uint64_t used = 0;
                for (size_t i = 0; i < nm; i++)
                    if (m[i].live && strcmp(m[i].node, p->node) == 0 && m[i].gpu == g)
                        used += m[i].mem;
                if (used + hmem <= GPU_MIB)
                    p->gpu = g;
            }
            if (p->gpu >= 2)
                fail_msg("seed %u round %d: %s placed on %s (%llu MiB), where the pods bound "
                         "leave no GPU that much room", seed, round, uid, got,
                         (unsigned long long)hmem);
            json_decref(res);
            deleted(e.s, "sneak"); /* it never binds */
            deleted(e.s, uid); /* drop the reservation, then show it bound */
            p->live = true;
            bound(e.s, p->uid, p->prio, p->node, p->gpu, p->mem);
            nm++;
        } else {
            deleted(e.s, uid);
        }
        json_decref(hp);
        deleted(e.s, "sneak");
        json_decref(sneak);
        /* random deletions */
        for (size_t i = 0; i < nm; i++)
            if (m[i].live && rand() % 10 == 0) {
                m[i].live = false;
                deleted(e.s, m[i].uid);
            }
        check_capacity(m, nm, seed, round);
    }
    assert_true(st_metric(e.metrics, "gpuvisor_accounting_drift_repairs_total", "") == 0);
    printf("random preemptions: seed %u, %d rounds, %u preemptions, %u victims\n", seed, rounds,
           preemptions, evicted);
    assert_true(preemptions > 0);
    env_stop(&e);
}


/* ---- PodDisruptionBudgets ---------------------------------------------- */

/* A bound pod with labels ("k=v,k2=v2", "" none) in namespace ns. */
static void bound_labeled(struct gv_sched *s, const char *uid, int prio, const char *node,
                          unsigned gpu, uint64_t mem, const char *ns, const char *labels)
{
    char assign[256];
    snprintf(assign, sizeof(assign), "v1;node=%s;main=GPU-%s-%u:%llu:0", node, node, gpu,
             (unsigned long long)mem);
    json_t *p = st_gpu_pod(uid, prio, mem, node, assign);
    json_t *md = json_object_get(p, "metadata");
    json_object_set_new(md, "namespace", json_string(ns));
    json_t *l = json_object();
    char buf[200];
    snprintf(buf, sizeof(buf), "%s", labels);
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        *eq = '\0';
        json_object_set_new(l, kv, json_string(eq + 1));
    }
    json_object_set_new(md, "labels", l);
    gv_sched_pod_update(s, p);
    json_decref(p);
}

/* A budget: selector JSON text, disruptionsAllowed, disruptedPods (JSON). */
static void budget(struct gv_sched *s, const char *name, const char *ns, const char *selector,
                   int allowed, const char *disrupted)
{
    char text[1000];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"policy/v1\",\"kind\":\"PodDisruptionBudget\",\"metadata\":"
             "{\"name\":\"%s\",\"namespace\":\"%s\"},\"spec\":{\"selector\":%s},\"status\":"
             "{\"disruptionsAllowed\":%d,\"disruptedPods\":%s}}",
             name, ns, selector, allowed, disrupted);
    json_t *b = json_loads(text, 0, NULL);
    assert_non_null(b);
    gv_sched_pdb_update(s, b);
    json_decref(b);
}

/* One node, two GPUs: g0 "a" (app=x), g1 "b" (app=y), both whole GPUs of
 * priority 1 in namespace "t" (without budgets a goes: equal costs, the
 * engine's order). */
struct pdb_case {
    const char *what;
    const char *bns, *selector; /* NULL: no budget */
    int allowed;
    const char *disrupted;
    const char *want; /* the answer's NodeNameToMetaVictims */
};

static void test_pdb_tables(void **state)
{
    (void)state;
    static const struct pdb_case cases[] = {
        {"no budget", NULL, NULL, 0, "{}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":0}}"},
        {"a's budget allows 0: b goes instead", "t", "{\"matchLabels\":{\"app\":\"x\"}}", 0, "{}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"b\"}],\"NumPDBViolations\":0}}"},
        {"a's budget allows 1: a goes, no violation", "t", "{\"matchLabels\":{\"app\":\"x\"}}", 1,
         "{}", "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":0}}"},
        {"both under a budget allowing 0: one violation", "t",
         "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"In\",\"values\":[\"x\",\"y\"]}]}",
         0, "{}", "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":1}}"},
        {"budget of another namespace: no effect", "u", "{\"matchLabels\":{\"app\":\"x\"}}", 0,
         "{}", "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":0}}"},
        {"empty selector matches nothing (as kube-scheduler)", "t", "{}", 0, "{}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":0}}"},
        {"NotIn y selects a: b goes", "t",
         "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"NotIn\",\"values\":[\"y\"]}]}", 0,
         "{}", "{\"n1\":{\"Pods\":[{\"UID\":\"b\"}],\"NumPDBViolations\":0}}"},
        {"Exists app selects both, allowing 0: one violation", "t",
         "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"Exists\"}]}", 0, "{}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":1}}"},
        {"DoesNotExist of a label neither has selects both: one violation", "t",
         "{\"matchExpressions\":[{\"key\":\"tier\",\"operator\":\"DoesNotExist\"}]}", 0, "{}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":1}}"},
        /* the API server refuses these; a budget that has them selects nothing, and never crashes */
        {"an expression without an operator selects nothing", "t",
         "{\"matchExpressions\":[{\"key\":\"app\",\"values\":[\"x\"]}]}", 0, "{}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":0}}"},
        {"an expression without a key selects nothing", "t",
         "{\"matchExpressions\":[{\"operator\":\"DoesNotExist\"}]}", 0, "{}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":0}}"},
        {"a already disrupted: spends nothing", "t", "{\"matchLabels\":{\"app\":\"x\"}}", 0,
         "{\"a\":\"2026-01-01T00:00:00Z\"}",
         "{\"n1\":{\"Pods\":[{\"UID\":\"a\"}],\"NumPDBViolations\":0}}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct pdb_case *k = &cases[i];
        struct env e;
        env_start(&e, (const char *[]){"n1"}, 1, 2);
        if (k->bns != NULL) /* before the pods: their labels are kept as they arrive */
            budget(e.s, "pdb", k->bns, k->selector, k->allowed, k->disrupted);
        bound_labeled(e.s, "a", 1, "n1", 0, GPU_MIB, "t", "app=x");
        bound_labeled(e.s, "b", 1, "n1", 1, GPU_MIB, "t", "app=y");
        json_t *hi = st_gpu_pod("hi", 100, GPU_MIB, NULL, NULL);
        char *body = meta_body(hi, (const char *[]){"n1"}, 1);
        long st;
        char *out = post(&e, "preempt", body, &st);
        char want[600];
        snprintf(want, sizeof(want), "{\"NodeNameToMetaVictims\":%s}", k->want);
        json_t *g = json_loads(out ? out : "", 0, NULL), *w = json_loads(want, 0, NULL);
        if (st != 200 || g == NULL || !json_equal(g, w))
            fail_msg("%s: got %ld %s\nwant %s", k->what, st, out ? out : "(null)", want);
        json_decref(g);
        json_decref(w);
        free(out);
        free(body);
        json_decref(hi);
        env_stop(&e);
    }
}

/* A budget allowing 1 over two pods: evicting both violates it once (the
 * second, less important one), so a set outside the budget is preferred;
 * when no such set exists the answer says 1.  Deleting the budget and a
 * budget arriving after the pods are seen too. */
static void test_pdb_budget_spent_by_the_set(void **state)
{
    (void)state;
    for (int other_higher = 0; other_higher < 2; other_higher++) {
        struct env e;
        env_start(&e, (const char *[]){"n1"}, 1, 2);
        budget(e.s, "web", "t", "{\"matchLabels\":{\"app\":\"web\"}}", 1, "{}");
        /* g1: b1, b2 (no labels, priority 2: without the budget the cheaper
         * set is g0's); g0: w1, w2 (app=web, priority 1) */
        bound_labeled(e.s, "b1", other_higher ? 500 : 2, "n1", 1, GPU_MIB / 2, "t", "");
        bound_labeled(e.s, "b2", other_higher ? 500 : 2, "n1", 1, GPU_MIB / 2, "t", "");
        bound_labeled(e.s, "w1", 1, "n1", 0, GPU_MIB / 2, "t", "app=web");
        bound_labeled(e.s, "w2", 1, "n1", 0, GPU_MIB / 2, "t", "app=web");
        json_t *hi = st_gpu_pod("hi", 100, GPU_MIB, NULL, NULL);
        char *body = meta_body(hi, (const char *[]){"n1"}, 1);
        long st;
        char *out = post(&e, "preempt", body, &st);
        json_t *g = json_loads(out ? out : "", 0, NULL);
        json_t *n1 = json_object_get(json_object_get(g, "NodeNameToMetaVictims"), "n1");
        json_t *pods = json_object_get(n1, "Pods");
        assert_int_equal(json_array_size(pods), 2);
        const char *v0 = json_string_value(json_object_get(json_array_get(pods, 0), "UID"));
        if (other_higher) { /* only the budget's pods can go: one violation */
            assert_true(v0 != NULL && v0[0] == 'w');
            assert_int_equal(json_integer_value(json_object_get(n1, "NumPDBViolations")), 1);
        } else {
            if (v0 == NULL || v0[0] != 'b')
                fail_msg("budget ignored: %s", out);
            assert_int_equal(json_integer_value(json_object_get(n1, "NumPDBViolations")), 0);
        }
        json_decref(g);
        free(out);
        /* the budget deleted: g0's pods are the cheaper set again, no violation */
        json_t *del = json_pack("{s:{s:s,s:s}}", "metadata", "name", "web", "namespace", "t");
        gv_sched_pdb_delete(e.s, del);
        json_decref(del);
        out = post(&e, "preempt", body, &st);
        g = json_loads(out ? out : "", 0, NULL);
        n1 = json_object_get(json_object_get(g, "NodeNameToMetaVictims"), "n1");
        v0 = json_string_value(json_object_get(json_array_get(json_object_get(n1, "Pods"), 0), "UID"));
        assert_true(v0 != NULL && v0[0] == 'w');
        assert_int_equal(json_integer_value(json_object_get(n1, "NumPDBViolations")), 0);
        json_decref(g);
        free(out);
        free(body);
        json_decref(hi);
        env_stop(&e);
    }
}

/* The one node's victims in a preempt answer for "hi" (one whole GPU):
 * the first victim's uid (heap) and NumPDBViolations. */
static char *first_victim(struct env *e, int64_t *pdb)
{
    json_t *hi = st_gpu_pod("hi", 100, GPU_MIB, NULL, NULL);
    char *body = meta_body(hi, (const char *[]){"n1"}, 1);
    long st;
    char *out = post(e, "preempt", body, &st);
    assert_int_equal(st, 200);
    json_t *g = json_loads(out ? out : "", 0, NULL);
    json_t *n1 = json_object_get(json_object_get(g, "NodeNameToMetaVictims"), "n1");
    const char *v = json_string_value(
        json_object_get(json_array_get(json_object_get(n1, "Pods"), 0), "UID"));
    char *uid = strdup(v != NULL ? v : "(none)");
    *pdb = json_integer_value(json_object_get(n1, "NumPDBViolations"));
    json_decref(g);
    free(out);
    free(body);
    json_decref(hi);
    return uid;
}

static void expect_victim(struct env *e, const char *what, const char *uid, int64_t pdb)
{
    int64_t got_pdb = -1;
    char *got = first_victim(e, &got_pdb);
    if (strcmp(got, uid) != 0 || got_pdb != pdb)
        fail_msg("%s: victim %s with %lld violations (want %s with %lld)", what, got,
                 (long long)got_pdb, uid, (long long)pdb);
    free(got);
}

static void pdb_object(struct gv_sched *s, const char *text, bool deleted)
{
    json_t *b = json_loads(text, 0, NULL);
    assert_non_null(b);
    if (deleted)
        gv_sched_pdb_delete(s, b);
    else
        gv_sched_pdb_update(s, b);
    json_decref(b);
}

/* Budgets as the informer delivers them over time: a delete of a budget
 * never seen (a relist's) leaves the namespace's others in force; a status
 * update of disruptionsAllowed alone, both ways; a budget without a name is
 * no budget.  And kube-scheduler's rule that a pod without labels is under
 * no budget, not even one whose selector an empty label set matches. */
static void test_pdb_budget_changes(void **state)
{
    (void)state;
    struct env e;
    env_start(&e, (const char *[]){"n1"}, 1, 2);
    budget(e.s, "web", "t", "{\"matchLabels\":{\"app\":\"x\"}}", 0, "{}");
    pdb_object(e.s, "{\"metadata\":{\"name\":\"ghost\",\"namespace\":\"t\"}}", true);
    bound_labeled(e.s, "a", 1, "n1", 0, GPU_MIB, "t", "app=x");
    bound_labeled(e.s, "b", 1, "n1", 1, GPU_MIB, "t", "app=y");
    expect_victim(&e, "a protected after an unknown budget's delete", "b", 0);
    budget(e.s, "web", "t", "{\"matchLabels\":{\"app\":\"x\"}}", 1, "{}");
    expect_victim(&e, "the budget now allows 1", "a", 0);
    budget(e.s, "web", "t", "{\"matchLabels\":{\"app\":\"x\"}}", 0, "{}");
    expect_victim(&e, "the budget allows 0 again", "b", 0);
    env_stop(&e);

    env_start(&e, (const char *[]){"n1"}, 1, 2);
    pdb_object(e.s,
               "{\"metadata\":{\"namespace\":\"t\"},\"spec\":{\"selector\":{\"matchLabels\":"
               "{\"app\":\"x\"}}},\"status\":{\"disruptionsAllowed\":0}}",
               false);
    bound_labeled(e.s, "a", 1, "n1", 0, GPU_MIB, "t", "app=x");
    bound_labeled(e.s, "b", 1, "n1", 1, GPU_MIB, "t", "app=y");
    expect_victim(&e, "a budget without a name is none", "a", 0);
    env_stop(&e);

    env_start(&e, (const char *[]){"n1"}, 1, 2);
    budget(e.s, "noty", "t",
           "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"NotIn\",\"values\":[\"y\"]}]}",
           0, "{}");
    bound_labeled(e.s, "a", 1, "n1", 0, GPU_MIB, "t", "");
    bound_labeled(e.s, "b", 1, "n1", 1, GPU_MIB, "t", "app=y");
    expect_victim(&e, "a pod without labels is under no budget", "a", 0);
    env_stop(&e);
}

/* A namespace's first budget arrives after its pods were placed: their
 * labels are read from the API server then (one LIST), not only at each
 * pod's next update. */
static void test_pdb_budget_after_pods_with_fake_apiserver(void **state)
{
    (void)state;
    struct fake_apiserver fa;
    struct gv_kube_client *kube = api_start(&fa);
    struct env e;
    env_start_kube(&e, (const char *[]){"n1"}, 1, 2, kube);
    static const char *const pods[][2] = {{"a", "app=x"}, {"b", "app=y"}};
    char *uid[2];
    for (unsigned i = 0; i < 2; i++) {
        char assign[128], url[sizeof(fa.url) + 64];
        snprintf(assign, sizeof(assign), "v1;node=n1;main=GPU-n1-%u:%u:0", i, GPU_MIB);
        json_t *p = st_gpu_pod(pods[i][0], 1, GPU_MIB, "n1", assign);
        json_t *md = json_object_get(p, "metadata");
        json_object_del(md, "uid");
        json_object_del(md, "resourceVersion");
        json_object_set_new(md, "namespace", json_string("t"));
        json_object_set_new(md, "labels", json_pack("{s:s}", "app", pods[i][1] + 4));
        char *body = json_dumps(p, JSON_COMPACT), *out = NULL;
        snprintf(url, sizeof(url), "%s/api/v1/namespaces/t/pods", fa.url);
        assert_int_equal(st_http("POST", url, body, &out), 201);
        json_t *created = json_loads(out, 0, NULL);
        assert_non_null(created);
        uid[i] = strdup(json_string_value(json_object_get(json_object_get(created, "metadata"), "uid")));
        gv_sched_pod_update(e.s, created); /* as the pod informer, before any budget */
        json_decref(created);
        json_decref(p);
        free(body);
        free(out);
    }
    budget(e.s, "web", "t", "{\"matchLabels\":{\"app\":\"x\"}}", 0, "{}");
    expect_victim(&e, "a's budget came after a was placed", uid[1], 0);
    free(uid[0]);
    free(uid[1]);
    env_stop(&e);
    api_stop(&fa, kube);
}

/* ---- holds kept on the pod ----------------------------------------------- */

static const char KEY_TEXT[] = "0123456789abcdef0123456789abcdef-test-key\n";

/* A pending GPU pod of priority prio created in the API stand-in (its uid
 * is the API server's); annotations a JSON object text or NULL. */
static json_t *api_pod(struct gv_kube_client *kube, const char *name, int prio,
                       unsigned long long mem, const char *annotations)
{
    json_t *p = st_gpu_pod(name, prio, mem, NULL, NULL);
    json_t *md = json_object_get(p, "metadata");
    json_object_del(md, "uid");
    json_object_del(md, "resourceVersion");
    if (annotations != NULL)
        json_object_set_new(md, "annotations", json_loads(annotations, 0, NULL));
    json_t *out = NULL;
    struct gv_error err = {0};
    if (gv_kube_create(kube, "/api/v1/namespaces/default/pods", p, &out, &err) != GV_OK)
        fail_msg("create %s: %s", name, err.msg);
    json_decref(p);
    return out;
}

static json_t *api_get(struct gv_kube_client *kube, const char *name)
{
    char path[200];
    snprintf(path, sizeof(path), "/api/v1/namespaces/default/pods/%s", name);
    json_t *out = NULL;
    assert_int_equal(gv_kube_get(kube, path, &out, NULL), GV_OK);
    return out;
}

static const char *hold_of(const json_t *pod)
{
    return json_string_value(json_object_get(json_object_get(json_object_get(pod, "metadata"),
                                                             "annotations"),
                                             GV_HOLD_ANNOTATION));
}

/* The signature's checks on their own: a hold verifies only for the pod,
 * node, expiry and GPUs it was written for, and never as a placement. */
static void test_hold_signature(void **state)
{
    (void)state;
    struct gv_sched_config cfg;
    struct gv_error err = {0};
    assert_int_equal(gv_sched_config_default(&cfg, &err), GV_OK);
    assert_int_equal(gv_placement_key_parse(KEY_TEXT, strlen(KEY_TEXT), &cfg.placement_key, &err),
                     GV_OK);
    const char *asg = "v1;node=n1;main=GPU-n1-0:16000:0";
    char *v = gv_sched_hold_encode(&cfg, "uid-1", "n1", 2000000000, asg);
    assert_non_null(v);
    json_t *pod = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "uid", "uid-1", "annotations",
                            GV_HOLD_ANNOTATION, v);
    char *node = NULL, *a = NULL;
    time_t until = 0;
    assert_int_equal(gv_sched_hold_decode(&cfg, pod, &node, &until, &a, &err), GV_OK);
    assert_string_equal(node, "n1");
    assert_string_equal(a, asg);
    assert_true(until == 2000000000);
    free(node);
    free(a);
    /* copied to another pod: its uid is not the one signed */
    json_object_set_new(json_object_get(pod, "metadata"), "uid", json_string("uid-2"));
    assert_int_equal(gv_sched_hold_decode(&cfg, pod, &node, &until, &a, &err), GV_EINVAL);
    json_object_set_new(json_object_get(pod, "metadata"), "uid", json_string("uid-1"));
    /* each field altered: refused */
    static const char *const fields[] = {"node", "until", "assignment", "sig"};
    static const char *const forged[] = {"n2", "2100-01-01T00:00:00.000000Z",
                                         "v1;node=n1;main=GPU-n1-1:16000:0",
                                         ("v1.00000000000000000000000000000000000000000000000000"
                                          "00000000000000")};
    for (size_t i = 0; i < 4; i++) {
        json_t *h = json_loads(v, 0, NULL);
        json_object_set_new(h, fields[i], json_string(forged[i]));
        char *t = json_dumps(h, JSON_COMPACT);
        json_t *p2 = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "uid", "uid-1", "annotations",
                               GV_HOLD_ANNOTATION, t);
        if (gv_sched_hold_decode(&cfg, p2, &node, &until, &a, &err) != GV_EINVAL)
            fail_msg("%s altered: accepted", fields[i]);
        json_decref(p2);
        free(t);
        json_decref(h);
    }
    /* a placement's signature over the same values is no hold signature */
    json_t *h = json_loads(v, 0, NULL);
    json_t *hold_sig = json_incref(json_object_get(h, "sig"));
    char psig[GV_PLACEMENT_SIG_MAX];
    assert_int_equal(gv_placement_sign(cfg.placement_key, "uid-1", "n1",
                                       json_string_value(json_object_get(h, "until")), asg, psig,
                                       sizeof(psig), &err),
                     GV_OK);
    json_object_set_new(h, "sig", json_string(psig));
    char *t = json_dumps(h, JSON_COMPACT);
    json_t *p3 = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "uid", "uid-1", "annotations",
                           GV_HOLD_ANNOTATION, t);
    assert_int_equal(gv_sched_hold_decode(&cfg, p3, &node, &until, &a, &err), GV_EINVAL);
    /* and the reverse: the hold's signature is no placement signature */
    json_t *p4 = json_pack("{s:{s:s,s:{s:s,s:s,s:s,s:s}}}", "metadata", "uid", "uid-1",
                           "annotations", "gpuvisor.io/assignment", asg,
                           GV_PLACEMENT_NODE_ANNOTATION, "n1", GV_PLACEMENT_AT_ANNOTATION,
                           json_string_value(json_object_get(h, "until")),
                           GV_PLACEMENT_SIG_ANNOTATION, json_string_value(hold_sig));
    assert_int_equal(gv_placement_verify_pod(cfg.placement_key, p4, &err), GV_EINVAL);
    json_decref(p4);
    json_decref(hold_sig);
    json_decref(p3);
    free(t);
    json_decref(h);
    json_decref(pod);
    free(v);
    gv_sched_config_clear(&cfg);
}

/* The hold survives a restart between preemption and bind: written on the
 * preemptor (signed) before the answer, taken back by the restarted
 * scheduler from the pod as the informer delivers it, so a lower-priority
 * pod arriving after the restart still cannot take the promised GPU.
 * Tenant attacks on the annotation (copied to another pod, forged,
 * expired) give no hold.  The API is the stand-in; the informers are fed
 * by hand from what it stores. */
static void test_hold_survives_restart_with_fake_apiserver(void **state)
{
    (void)state;
    struct fake_apiserver fa;
    struct gv_kube_client *kube = api_start(&fa);
    struct gv_error err = {0};
    assert_int_equal(gv_placement_key_parse(KEY_TEXT, strlen(KEY_TEXT), &test_key, &err), GV_OK);
    struct env e;
    env_start_kube(&e, NODES, 2, 2, kube);
    fill(e.s, true);
    json_t *hi = api_pod(kube, "hi", 100, 16000, NULL);
    const char *hi_uid = json_string_value(json_object_get(json_object_get(hi, "metadata"), "uid"));
    char *body = meta_body(hi, NODES, 2);
    long st;
    char *out = post(&e, "preempt", body, &st);
    assert_int_equal(st, 200);
    assert_non_null(strstr(out, "\"UID\":\"a\""));
    free(out);
    free(body);
    /* on the pod before the answer came back */
    json_t *stored = api_get(kube, "hi");
    const char *hv = hold_of(stored);
    assert_non_null(hv);
    assert_non_null(strstr(hv, "GPU-n1-0"));
    assert_non_null(strstr(hv, "\"sig\":\"v1."));
    /* it lasts preemptionHoldSeconds (120 s by default), not the reservation's
     * timeout (600 s here): longer than kube-scheduler's worst retry of an
     * unschedulable preemptor, so the hold is there when the pod comes back */
    {
        struct gv_sched_config hc;
        assert_int_equal(gv_sched_config_default(&hc, &err), GV_OK);
        hc.placement_key = test_key; /* borrowed */
        char *hnode = NULL, *hasg = NULL;
        time_t until = 0;
        assert_int_equal(gv_sched_hold_decode(&hc, stored, &hnode, &until, &hasg, &err), GV_OK);
        long left = (long)(until - time(NULL));
        assert_true(left >= 115 && left <= 121);
        free(hnode);
        free(hasg);
        hc.placement_key = NULL;
        gv_sched_config_clear(&hc);
    }
    /* the tenant copies it onto a pod of its own, and forges a second */
    char ann[2000];
    json_t *hvj = json_string(hv);
    char *hvq = json_dumps(hvj, JSON_ENCODE_ANY);
    snprintf(ann, sizeof(ann), "{\"%s\":%s}", GV_HOLD_ANNOTATION, hvq);
    json_t *thief = api_pod(kube, "thief", 100, 16000, ann);
    json_t *hobj = json_loads(hv, 0, NULL);
    json_object_set_new(hobj, "node", json_string("n2"));
    json_object_set_new(hobj, "assignment", json_string("v1;node=n2;main=GPU-n2-0:16000:0"));
    char *forged = json_dumps(hobj, JSON_COMPACT);
    json_t *fj = json_string(forged);
    char *fq = json_dumps(fj, JSON_ENCODE_ANY);
    snprintf(ann, sizeof(ann), "{\"%s\":%s}", GV_HOLD_ANNOTATION, fq);
    json_t *forger = api_pod(kube, "forger", 100, 16000, ann);
    /* and one validly signed for its own pod, but lapsed */
    json_t *old = api_pod(kube, "old", 100, 16000, NULL);
    struct gv_sched_config kc = {.placement_key = test_key};
    char *lapsed = gv_sched_hold_encode(
        &kc, json_string_value(json_object_get(json_object_get(old, "metadata"), "uid")), "n2",
        time(NULL) - 1, "v1;node=n2;main=GPU-n2-1:16000:0");
    json_t *old_md = json_object_get(old, "metadata");
    if (json_object_get(old_md, "annotations") == NULL)
        json_object_set_new(old_md, "annotations", json_object());
    json_object_set_new(json_object_get(old_md, "annotations"), GV_HOLD_ANNOTATION,
                        json_string(lapsed));
    /* the same hold, not lapsed, would be taken: the expiry alone refuses it */
    {
        char *fresh = gv_sched_hold_encode(&kc, json_string_value(json_object_get(old_md, "uid")),
                                           "n2", time(NULL) + 60,
                                           "v1;node=n2;main=GPU-n2-1:16000:0");
        json_t *probe = json_deep_copy(old);
        json_object_set_new(json_object_get(json_object_get(probe, "metadata"), "annotations"),
                            GV_HOLD_ANNOTATION, json_string(fresh));
        char *nn = NULL, *aa = NULL;
        time_t uu;
        assert_int_equal(gv_sched_hold_decode(&kc, probe, &nn, &uu, &aa, &err), GV_OK);
        free(nn);
        free(aa);
        assert_int_equal(gv_sched_hold_decode(&kc, old, &nn, &uu, &aa, &err), GV_OK);
        assert_true(uu < time(NULL));
        free(nn);
        free(aa);
        json_decref(probe);
        free(fresh);
    }
    /* the scheduler is killed; the victim goes meanwhile */
    env_stop(&e);
    env_start_kube(&e, NODES, 2, 2, kube);
    fill(e.s, false);
    gv_sched_pod_update(e.s, thief);
    gv_sched_pod_update(e.s, forger);
    gv_sched_pod_update(e.s, old);
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_nominated_holds", "") == 0);
    gv_sched_pod_update(e.s, stored);
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_nominated_holds", "") == 1);
    /* a lower-priority pod arriving now cannot take the freed GPU */
    json_t *lo = st_gpu_pod("lo", 50, 8000, NULL, NULL);
    json_t *res = st_filter(e.base, lo, (const char *[]){"n1", "n2"}, 2, &st);
    assert_null(st_chosen(res));
    json_decref(res);
    /* neither can the thief (its copy gave it nothing; equal priority) */
    res = st_filter(e.base, thief, (const char *[]){"n1", "n2"}, 2, &st);
    assert_null(st_chosen(res));
    json_decref(res);
    /* the preemptor lands on the GPU it was promised */
    res = st_filter(e.base, stored, (const char *[]){"n2", "n1"}, 2, &st);
    assert_string_equal(st_chosen(res), "n1");
    json_decref(res);
    (void)hi_uid;
    /* its informer event after the reservation does not bring the hold back */
    gv_sched_pod_update(e.s, stored);
    assert_true(st_metric(e.metrics, "gpuvisor_scheduler_nominated_holds", "") == 0);
    free(lapsed);
    free(fq);
    json_decref(fj);
    free(forged);
    json_decref(hobj);
    free(hvq);
    json_decref(hvj);
    json_decref(lo);
    json_decref(old);
    json_decref(forger);
    json_decref(thief);
    json_decref(stored);
    json_decref(hi);
    env_stop(&e);
    gv_placement_key_free(test_key);
    test_key = NULL;
    api_stop(&fa, kube);
}

/* The budgets reach the daemon's code path through its informer, on a 1.20
 * API server that serves only policy/v1beta1 (the stand-in told so), and the
 * answer in the full-Pods form adds the GPU victims' violations to
 * kube-scheduler's own count. */
static void test_pdb_informer_v1beta1_with_fake_apiserver(void **state)
{
    (void)state;
    struct fake_apiserver fa;
    struct gv_kube_client *kube = api_start(&fa);
    char url[700];
    snprintf(url, sizeof(url), "%s/_fake/policy-versions?v=v1beta1", fa.url);
    assert_int_equal(st_http("POST", url, "", NULL), 200);
    json_t *pdb = json_loads(
        "{\"apiVersion\":\"policy/v1beta1\",\"kind\":\"PodDisruptionBudget\",\"metadata\":"
        "{\"name\":\"web\",\"namespace\":\"t\"},\"spec\":{\"selector\":{\"matchExpressions\":"
        "[{\"key\":\"app\",\"operator\":\"Exists\"}]}},\"status\":{\"disruptionsAllowed\":0}}",
        0, NULL);
    struct gv_error err = {0};
    assert_int_equal(gv_kube_create(kube, "/apis/policy/v1beta1/namespaces/t/poddisruptionbudgets",
                                    pdb, NULL, &err),
                     GV_OK);
    json_decref(pdb);
    struct env e;
    env_start_kube(&e, (const char *[]){"n1"}, 1, 2, kube);
    assert_int_equal(gv_sched_start(e.s, &err), GV_OK); /* the informers, budgets among them */
    bound_labeled(e.s, "a", 1, "n1", 0, GPU_MIB, "t", "app=x");
    bound_labeled(e.s, "b", 1, "n1", 1, GPU_MIB, "t", "app=y");
    json_t *hi = st_gpu_pod("hi", 100, GPU_MIB, NULL, NULL);
    json_t *cpu = json_pack("{s:{s:s,s:s,s:s}}", "metadata", "uid", "cpuhog", "name", "cpuhog",
                            "namespace", "default");
    json_t *args = json_pack("{s:O,s:{s:{s:[o],s:i}},s:n}", "Pod", hi, "NodeNameToVictims", "n1",
                             "Pods", cpu, "NumPDBViolations", 1, "NodeNameToMetaVictims");
    long st;
    char *out = post_args(&e, args, &st);
    assert_int_equal(st, 200);
    /* both GPU pods are under the budget allowing none: one goes, violating it */
    assert_json_eq(out, "{\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":[{\"UID\":\"cpuhog\"},"
                        "{\"UID\":\"a\"}],\"NumPDBViolations\":2}}}");
    free(out);
    json_decref(hi);
    env_stop(&e);
    api_stop(&fa, kube);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preempt_args_wire),
        cmocka_unit_test(test_meta_round_trip_and_hold),
        cmocka_unit_test(test_full_pods_form_and_refusals),
        cmocka_unit_test(test_cheapest_node_any_order),
        cmocka_unit_test(test_own_victims_keep_their_priority),
        cmocka_unit_test(test_preemptor_without_uid),
        cmocka_unit_test(test_only_bound_pods_are_victims),
        cmocka_unit_test(test_events_with_fake_apiserver),
        cmocka_unit_test(test_restart_between_preempt_and_bind),
        cmocka_unit_test(test_random_preemptions_with_restarts),
        cmocka_unit_test(test_pdb_tables),
        cmocka_unit_test(test_pdb_budget_spent_by_the_set),
        cmocka_unit_test(test_pdb_budget_changes),
        cmocka_unit_test(test_pdb_budget_after_pods_with_fake_apiserver),
        cmocka_unit_test(test_pdb_informer_v1beta1_with_fake_apiserver),
        cmocka_unit_test(test_hold_signature),
        cmocka_unit_test(test_hold_survives_restart_with_fake_apiserver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
