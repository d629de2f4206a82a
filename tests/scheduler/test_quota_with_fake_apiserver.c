/*
 * ResourceQuota on GPU memory and cores (src/scheduler/quota.c) against the
 * kube-apiserver stand-in: limits read from ResourceQuota objects (HAMi's
 * keys), concurrent pods racing through filter + bind never overrun the
 * quota, the webhook refuses early with the reason, metrics show usage,
 * deletions and quota changes take effect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/gv_scheduler.h"
#include "scheduler/quota.h"
#include "tests/scheduler/sched_testlib.h"

struct fx {
    struct fake_apiserver fa;
    struct gv_kube_client *kube;
    struct gv_sched_config cfg;
    struct gv_sched *s;
    struct gv_httpd *h;
    char base[128], metrics[128], mutate[128];
};

static const struct gpu_desc a100x2[] = {{"NVIDIA A100-SXM4-80GB", 81559, 4},
                                         {"NVIDIA A100-SXM4-80GB", 81559, 4}};

#define RQ_PATH "/api/v1/namespaces/default/resourcequotas"

static void put_quota(struct fx *f, const char *name, const char *mem, const char *cores)
{
    json_t *hard = json_object();
    if (mem != NULL)
        json_object_set_new(hard, "limits.nvidia.com/gpumem", json_string(mem));
    if (cores != NULL)
        json_object_set_new(hard, "requests.nvidia.com/gpucores", json_string(cores));
    json_object_set_new(hard, "pods", json_string("100")); /* not ours: Kubernetes' */
    json_t *rq = json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:o}}", "apiVersion", "v1", "kind",
                           "ResourceQuota", "metadata", "name", name, "namespace", "default",
                           "spec", "hard", hard);
    char path[256];
    snprintf(path, sizeof(path), RQ_PATH "/%s", name);
    json_t *old = NULL;
    struct gv_error err = {0};
    if (gv_kube_get(f->kube, path, &old, NULL) == GV_OK) {
        json_object_set(json_object_get(rq, "metadata"), "resourceVersion",
                        json_object_get(json_object_get(old, "metadata"), "resourceVersion"));
        if (gv_kube_replace(f->kube, path, rq, NULL, &err) != GV_OK)
            fail_msg("replace quota: %s", err.msg);
    } else if (gv_kube_create(f->kube, RQ_PATH, rq, NULL, &err) != GV_OK) {
        fail_msg("create quota: %s", err.msg);
    }
    json_decref(old);
    json_decref(rq);
}

/* Starts a scheduler (extender, webhook, health) on the fake API server. */
static bool start_sched(struct fx *f)
{
    struct gv_error err = {0};
    assert_int_equal(gv_sched_new(&f->cfg, f->kube, &f->s, &err), GV_OK);
    struct gv_httpd_options o = {.name = "extender", .address = "127.0.0.1"};
    assert_int_equal(gv_httpd_new(&o, &f->h, &err), GV_OK);
    assert_int_equal(gv_sched_serve_extender(f->s, f->h, "/gpuvisor", &err), GV_OK);
    assert_int_equal(gv_sched_serve_webhook(f->s, f->h, &err), GV_OK);
    assert_int_equal(gv_sched_serve_health(f->s, f->h, &err), GV_OK);
    assert_int_equal(gv_httpd_start(f->h, &err), GV_OK);
    assert_int_equal(gv_sched_start(f->s, &err), GV_OK);
    unsigned port = gv_httpd_port(f->h);
    snprintf(f->base, sizeof(f->base), "http://127.0.0.1:%u/gpuvisor", port);
    snprintf(f->metrics, sizeof(f->metrics), "http://127.0.0.1:%u/metrics", port);
    snprintf(f->mutate, sizeof(f->mutate), "http://127.0.0.1:%u/mutate", port);
    for (int i = 0; i < 500 && !gv_sched_ready(f->s); i++)
        usleep(10000);
    return gv_sched_ready(f->s);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct gv_error err = {0};
    if (fake_apiserver_start(&f->fa, NULL) != 0 || (f->kube = st_kube(f->fa.url)) == NULL)
        return -1;
    gv_sched_config_default(&f->cfg, &err);
    f->cfg.alloc.node_policy = GV_ALLOC_POLICY_BINPACK;
    char *inv = st_inventory("gpu-a", a100x2, 2, true);
    json_t *node = st_node("gpu-a", inv, 0);
    st_put_node(f->kube, node);
    json_decref(node);
    free(inv);
    /* 100000 MiB and 60% of a GPU for the namespace */
    put_quota(f, "gpu-quota", "100000", "60");
    if (!start_sched(f))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    gv_httpd_free(f->h);
    gv_sched_free(f->s);
    gv_kube_client_free(f->kube);
    fake_apiserver_stop(&f->fa);
    gv_sched_config_clear(&f->cfg);
    free(f);
    return 0;
}

struct conc {
    struct fx *f;
    int idx;
    bool bound;
};

static json_t *mem_pod(struct fx *f, const char *name, unsigned mib, unsigned cores)
{
    char containers[160];
    snprintf(containers, sizeof(containers),
             "[{\"name\":\"w\",\"limits\":{\"nvidia.com/gpumem\":\"%u\","
             "\"nvidia.com/gpucores\":\"%u\"}}]",
             mib, cores);
    return st_create_pod(f->kube, name, containers, NULL);
}

static void *conc_main(void *arg)
{
    struct conc *c = arg;
    char name[32];
    snprintf(name, sizeof(name), "q%d", c->idx);
    json_t *pod = mem_pod(c->f, name, 30000, 10);
    const char *one[] = {"gpu-a"};
    json_t *r = st_filter(c->f->base, pod, one, 1, NULL);
    const char *chosen = st_chosen(r);
    if (chosen != NULL) {
        char *e = st_bind(c->f->base, pod, chosen);
        c->bound = e[0] == '\0';
        free(e);
    }
    json_decref(r);
    json_decref(pod);
    return NULL;
}

/* Sum of the memory the API's pods of the namespace were assigned. */
static uint64_t assigned_mib(struct fx *f)
{
    json_t *list = NULL;
    assert_int_equal(gv_kube_list(f->kube, "/api/v1/namespaces/default/pods", NULL, &list, NULL),
                     GV_OK);
    uint64_t sum = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(list, "items"), i, p)
    {
        const char *a = json_string_value(json_object_get(
            json_object_get(json_object_get(p, "metadata"), "annotations"), "gpuvisor.io/assignment"));
        struct gv_alloc_assignment as;
        if (a != NULL && gv_alloc_assignment_decode(a, strlen(a), &as, NULL) == GV_OK) {
            uint64_t m, c;
            gv_quota_of_assignment(&as, &m, &c);
            sum += m;
        }
    }
    json_decref(list);
    return sum;
}

static const char *review_verdict(struct fx *f, unsigned mib, char *msg, size_t cap)
{
    char body[768];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
             "\"uid\":\"r\",\"kind\":{\"kind\":\"Pod\"},\"operation\":\"CREATE\",\"namespace\":"
             "\"default\",\"object\":{\"metadata\":{\"name\":\"w\"},\"spec\":{\"containers\":[{"
             "\"name\":\"w\",\"resources\":{\"limits\":{\"nvidia.com/gpumem\":\"%u\"}}}]}}}}",
             mib);
    char *out = NULL;
    assert_int_equal(st_http("POST", f->mutate, body, &out), 200);
    json_t *root = json_loads(out, 0, NULL);
    json_t *resp = json_object_get(root, "response");
    bool allowed = json_is_true(json_object_get(resp, "allowed"));
    const char *m = json_string_value(json_object_get(json_object_get(resp, "status"), "message"));
    snprintf(msg, cap, "%s", allowed || m == NULL ? "" : m);
    json_decref(root);
    free(out);
    return allowed ? NULL : msg;
}

struct wait_ctx {
    struct fx *f;
    double want;
};

static bool used_is(void *ud)
{
    struct wait_ctx *w = ud;
    return st_metric(w->f->metrics, "hami_resource_quota_used", "nvidia.com/gpumem") == w->want;
}

/*
 * 12 pods of 30000 MiB race for gpu-a, whose GPUs would hold 4 of them;
 * the namespace's 100000 MiB lets exactly 3 through, whatever the order.
 */
static void test_concurrent_pods_never_overrun(void **state)
{
    struct fx *f = *state;
    enum { N = 12 };
    struct conc c[N];
    for (int i = 0; i < N; i++)
        c[i] = (struct conc){.f = f, .idx = i};
    st_race(N, conc_main, c, sizeof(c[0]));
    int bound = 0;
    for (int i = 0; i < N; i++)
        bound += c[i].bound;
    assert_int_equal(bound, 3);
    assert_int_equal(assigned_mib(f), 90000); /* the API's truth */
    struct wait_ctx w = {f, 90000};
    assert_true(st_wait(used_is, &w, 5000));
    assert_true(st_metric(f->metrics, "hami_resource_quota_limit", "nvidia.com/gpumem") ==
                100000);
    assert_true(st_metric(f->metrics, "hami_resource_quota_used", "nvidia.com/gpucores") == 30);

    /* the filter says why */
    json_t *pod = mem_pod(f, "over", 20000, 0);
    const char *one[] = {"gpu-a"};
    json_t *r = st_filter(f->base, pod, one, 1, NULL);
    assert_null(st_chosen(r));
    const char *why = json_string_value(
        json_object_get(json_object_get(r, "FailedNodes"), "gpu-a"));
    if (why == NULL || strstr(why, "exceeded quota gpu-quota: nvidia.com/gpumem used 90000 + "
                                   "asked 20000 > limit 100000") == NULL)
        fail_msg("filter reason: %s", why ? why : "(none)");
    json_decref(r);
    json_decref(pod);

    /* the webhook refuses early, with the same reason; a pod that fits passes */
    char msg[512];
    const char *v = review_verdict(f, 20000, msg, sizeof(msg));
    assert_non_null(v);
    assert_non_null(strstr(v, "exceeded quota gpu-quota"));
    assert_null(review_verdict(f, 10000, msg, sizeof(msg)));

    /* cores: 3 x 10% used of 60%; 40% more is refused */
    pod = mem_pod(f, "cores", 1000, 40);
    r = st_filter(f->base, pod, one, 1, NULL);
    assert_null(st_chosen(r));
    json_decref(r);
    json_decref(pod);

    /* a raised quota takes effect */
    put_quota(f, "gpu-quota", "130000", "100");
    pod = mem_pod(f, "after-raise", 30000, 10);
    bool placed = false;
    for (int i = 0; i < 250 && !placed; i++) { /* the informer delivers the change */
        r = st_filter(f->base, pod, one, 1, NULL);
        placed = st_chosen(r) != NULL;
        json_decref(r);
        if (!placed)
            usleep(20000);
    }
    assert_true(placed);
    json_decref(pod);

    /* a restarted scheduler charges the pods it finds placed: 90000 of 130000 stay used */
    gv_httpd_free(f->h);
    gv_sched_free(f->s);
    f->h = NULL;
    f->s = NULL;
    assert_true(start_sched(f));
    w.want = 90000;
    assert_true(st_wait(used_is, &w, 5000));
    pod = mem_pod(f, "after-restart", 40001, 0);
    r = st_filter(f->base, pod, one, 1, NULL);
    if (st_chosen(r) != NULL)
        fail_msg("40001 MiB more placed over a 130000 MiB quota with 90000 used");
    json_decref(r);
    json_decref(pod);

    /* A Binding with no filter before it in this process (kube-scheduler
     * filtered on the scheduler that was restarted) is held to the quota
     * as well: the bind's own check is the only one it meets. */
    pod = mem_pod(f, "bind-only-over", 40001, 0);
    char *e = st_bind(f->base, pod, "gpu-a");
    if (e[0] == '\0' || strstr(e, "exceeded quota gpu-quota") == NULL)
        fail_msg("a Binding of 40001 MiB over the quota (90000 of 130000 used): '%s'", e);
    free(e);
    json_decref(pod);
    assert_int_equal(assigned_mib(f), 90000);
    pod = mem_pod(f, "bind-only-fits", 30000, 0);
    e = st_bind(f->base, pod, "gpu-a");
    assert_string_equal(e, "");
    free(e);
    json_decref(pod);
    assert_int_equal(assigned_mib(f), 120000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_pods_never_overrun, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
