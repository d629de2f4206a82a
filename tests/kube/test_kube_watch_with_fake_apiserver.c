/*
 * WATCH and the informer against fake_apiserver (kube-apiserver stand-in):
 * event delivery, resume from resourceVersion, bookmarks, 410 both ways,
 * selectors, cancel, malformed streams, dropped connections; informer
 * callbacks, relist after 410, recovery after an outage, clean stop.
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

#include "kube/kube_internal.h"
#include "kube_testlib.h"

#define FX ((struct kube_fixture *)*state)
/* Generous bound for asynchronous effects; never reached when things work. */
#define WAIT_MS 15000

/* ---- event recorder shared by watch and informer tests */

struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    char log[64][160]; /* "TYPE name rv" */
    int n;
    int adds, updates, deletes, bookmarks;
    int stop_after; /* watch: return false after this many events (0: never) */
};

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cond, NULL);
}

static void rec_free(struct rec *r)
{
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cond);
}

static const char *obj_name(json_t *o)
{
    const char *n = json_string_value(json_object_get(json_object_get(o, "metadata"), "name"));
    return n != NULL ? n : "-";
}

static void rec_add(struct rec *r, const char *what, json_t *o)
{
    pthread_mutex_lock(&r->mu);
    if (r->n < 64)
        snprintf(r->log[r->n], sizeof(r->log[0]), "%s %s", what, obj_name(o));
    r->n++;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mu);
}

/* Waits until pred(r) or WAIT_MS; returns pred's final value. */
static bool rec_wait(struct rec *r, bool (*pred)(struct rec *, void *), void *arg)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&r->mu);
    while (!pred(r, arg))
        if (pthread_cond_timedwait(&r->cond, &r->mu, &dl) != 0)
            break;
    bool ok = pred(r, arg);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static bool rec_has(struct rec *r, const char *line)
{
    pthread_mutex_lock(&r->mu);
    bool found = false;
    for (int i = 0; i < r->n && i < 64; i++)
        if (strcmp(r->log[i], line) == 0)
            found = true;
    pthread_mutex_unlock(&r->mu);
    return found;
}

static bool has_line(struct rec *r, void *arg)
{
    for (int i = 0; i < r->n && i < 64; i++)
        if (strcmp(r->log[i], arg) == 0)
            return true;
    return false;
}

static bool watch_cb(void *ud, gv_kube_event_type type, json_t *obj)
{
    struct rec *r = ud;
    if (type == GV_KUBE_EVENT_BOOKMARK) {
        pthread_mutex_lock(&r->mu);
        r->bookmarks++;
        pthread_mutex_unlock(&r->mu);
    }
    rec_add(r, gv_kube_event_name(type), obj);
    pthread_mutex_lock(&r->mu);
    bool go_on = r->stop_after == 0 || r->n < r->stop_after;
    pthread_mutex_unlock(&r->mu);
    return go_on;
}

/* ---- watch in a thread */

struct bg_watch {
    pthread_t th;
    struct kube_fixture *fx;
    const char *path;
    struct gv_kube_watch_opts opts;
    struct rec *rec;
    gv_status st;
    struct gv_error err;
    char *last_rv;
};

static void *bg_watch_main(void *p)
{
    struct bg_watch *w = p;
    w->st = gv_kube_watch(w->fx->client, w->path, &w->opts, watch_cb, w->rec, &w->last_rv,
                          &w->err);
    return NULL;
}

static long open_watches(struct kube_fixture *fx)
{
    char *body = NULL;
    long n = -1;
    if (fake_apiserver_ctl(&fx->fa, "GET watches", &body) == 200) {
        json_t *j = json_loads(body, 0, NULL);
        n = (long)json_integer_value(json_object_get(j, "watches"));
        json_decref(j);
    }
    free(body);
    return n;
}

static void wait_watches(struct kube_fixture *fx, long n)
{
    for (int i = 0; i < WAIT_MS / 10 && open_watches(fx) != n; i++)
        gv_kube_cancel_sleep(NULL, 10);
    assert_int_equal(open_watches(fx), n);
}

static char *list_rv(struct kube_fixture *fx, const char *path)
{
    json_t *list = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_list(fx->client, path, NULL, &list, &err), GV_OK);
    char *rv = strdup(kube_rv(list));
    json_decref(list);
    return rv;
}

static void test_watch_replay_and_resume(void **state)
{
    char *rv0 = list_rv(FX, "/api/v1/pods");
    json_t *a = kube_create_pod(FX->client, "default", "a", NULL, NULL, NULL);
    const char *keys[] = {"x"};
    const char *vals[] = {"1"};
    struct gv_error err;
    assert_int_equal(gv_kube_patch_annotations(FX->client, "/api/v1/namespaces/default/pods/a",
                                               NULL, keys, vals, 1, NULL, &err),
                     GV_OK);
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/a", NULL, &err),
                     GV_OK);

    struct rec r;
    rec_init(&r);
    r.stop_after = 3;
    struct gv_kube_watch_opts o = {.resource_version = rv0, .timeout_seconds = 10};
    char *last = NULL;
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/pods", &o, watch_cb, &r, &last, &err),
                     GV_OK);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.log[0], "ADDED a");
    assert_string_equal(r.log[1], "MODIFIED a");
    assert_string_equal(r.log[2], "DELETED a");
    assert_non_null(last);
    assert_true(atol(last) > atol(rv0));

    /* Resume from the last version: only what happened since. */
    json_decref(kube_create_pod(FX->client, "default", "b", NULL, NULL, NULL));
    rec_free(&r);
    rec_init(&r);
    r.stop_after = 1;
    o.resource_version = last;
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/pods", &o, watch_cb, &r, &last, &err),
                     GV_OK);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.log[0], "ADDED b");

    /* Nothing new: the server's timeoutSeconds ends the watch cleanly. */
    rec_free(&r);
    rec_init(&r);
    o.resource_version = last;
    o.timeout_seconds = 1;
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/pods", &o, watch_cb, &r, &last, &err),
                     GV_OK);
    assert_int_equal(r.n, 0);
    rec_free(&r);
    free(last);
    free(rv0);
    json_decref(a);
}

struct rv_rec {
    int n;
    char rv[4][32];
    long prio[4];
};

static bool rv_cb(void *ud, gv_kube_event_type type, json_t *obj)
{
    (void)type;
    struct rv_rec *r = ud;
    if (r->n < 4) {
        snprintf(r->rv[r->n], sizeof(r->rv[0]), "%s", kube_rv(obj));
        r->prio[r->n] = (long)json_integer_value(
            json_object_get(json_object_get(obj, "spec"), "priority"));
    }
    return ++r->n < 3;
}

static void test_watch_history_keeps_each_version(void **state)
{
    /* Patches that leave metadata alone must still replay, on resume, as
     * the versions they were: each event its own resourceVersion and body. */
    json_t *pod = kube_create_pod(FX->client, "default", "v", NULL, NULL, NULL);
    char *rv0 = strdup(kube_rv(pod));
    json_decref(pod);
    char want[2][32];
    struct gv_error err;
    for (int i = 0; i < 2; i++) {
        json_t *patch = json_pack("{s:{s:i}}", "spec", "priority", i + 1);
        json_t *out = NULL;
        assert_int_equal(gv_kube_patch(FX->client, "/api/v1/namespaces/default/pods/v",
                                       GV_KUBE_PATCH_MERGE, patch, &out, &err),
                         GV_OK);
        snprintf(want[i], sizeof(want[i]), "%s", kube_rv(out));
        json_decref(out);
        json_decref(patch);
    }
    json_decref(kube_create_pod(FX->client, "default", "w", NULL, NULL, NULL));
    struct rv_rec r = {0};
    struct gv_kube_watch_opts o = {.resource_version = rv0, .timeout_seconds = 10};
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/pods", &o, rv_cb, &r, NULL, &err),
                     GV_OK);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.rv[0], want[0]);
    assert_int_equal(r.prio[0], 1);
    assert_string_equal(r.rv[1], want[1]);
    assert_int_equal(r.prio[1], 2);
    free(rv0);
}

static void test_watch_from_now_lists_current(void **state)
{
    json_decref(kube_create_node(FX->client, "n1", NULL, NULL));
    json_decref(kube_create_node(FX->client, "n2", NULL, NULL));
    struct rec r;
    rec_init(&r);
    r.stop_after = 2;
    struct gv_kube_watch_opts o = {.timeout_seconds = 10};
    struct gv_error err;
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/nodes", &o, watch_cb, &r, NULL, &err),
                     GV_OK);
    assert_true(rec_has(&r, "ADDED n1"));
    assert_true(rec_has(&r, "ADDED n2"));
    rec_free(&r);
}

static int setup_fast_bookmarks(void **state)
{
    static const char *const args[] = {"--bookmark-interval", "0.2", NULL};
    return kube_fixture_setup_args(state, args);
}

static void test_watch_bookmarks(void **state)
{
    char *rv0 = list_rv(FX, "/api/v1/nodes");
    /* Changes to pods move the global version; a nodes watch learns of it
     * only through bookmarks. */
    json_decref(kube_create_pod(FX->client, "default", "p", NULL, NULL, NULL));
    char *now = list_rv(FX, "/api/v1/pods");
    struct rec r;
    rec_init(&r);
    r.stop_after = 1;
    struct gv_kube_watch_opts o = {.resource_version = rv0, .bookmarks = true,
                                   .timeout_seconds = 10};
    char *last = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/nodes", &o, watch_cb, &r, &last, &err),
                     GV_OK);
    assert_int_equal(r.bookmarks, 1);
    assert_string_equal(last, now);

    /* Without allowWatchBookmarks: none. */
    rec_free(&r);
    rec_init(&r);
    o.bookmarks = false;
    o.timeout_seconds = 1;
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/nodes", &o, watch_cb, &r, NULL, &err),
                     GV_OK);
    assert_int_equal(r.bookmarks, 0);
    rec_free(&r);
    free(last);
    free(now);
    free(rv0);
}

static void test_watch_410_error_event_and_status(void **state)
{
    char *rv0 = list_rv(FX, "/api/v1/pods");
    json_decref(kube_create_pod(FX->client, "default", "a", NULL, NULL, NULL));
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "compact", NULL), 200);
    struct rec r;
    rec_init(&r);
    struct gv_kube_watch_opts o = {.resource_version = rv0, .timeout_seconds = 10};
    struct gv_error err;
    /* The real server's usual way: 200, then an ERROR event with 410. */
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/pods", &o, watch_cb, &r, NULL, &err),
                     GV_ERANGE);
    assert_non_null(strstr(err.msg, "too old resource version"));
    assert_non_null(strstr(err.msg, "410"));
    assert_int_equal(r.n, 0);
    /* The other way: HTTP 410 on the watch request itself. */
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "watch-410-status?on=1", NULL), 200);
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/pods", &o, watch_cb, &r, NULL, &err),
                     GV_ERANGE);
    assert_non_null(strstr(err.msg, "HTTP 410"));
    rec_free(&r);
    free(rv0);
}

static void test_watch_field_selector_enter_leave(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "p", NULL, NULL, NULL));
    char *rv0 = list_rv(FX, "/api/v1/pods");
    struct gv_error err;
    assert_int_equal(gv_kube_bind_pod(FX->client, "default", "p", NULL, "n1", &err), GV_OK);
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/p", NULL, &err),
                     GV_OK);
    struct rec r;
    rec_init(&r);
    r.stop_after = 2;
    struct gv_kube_watch_opts o = {.resource_version = rv0,
                                   .field_selector = "spec.nodeName=n1",
                                   .timeout_seconds = 10};
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/pods", &o, watch_cb, &r, NULL, &err),
                     GV_OK);
    /* The pod entered the selection when bound: ADDED, not MODIFIED. */
    assert_string_equal(r.log[0], "ADDED p");
    assert_string_equal(r.log[1], "DELETED p");
    rec_free(&r);
    free(rv0);
}

static void test_watch_cancel(void **state)
{
    struct rec r;
    rec_init(&r);
    struct gv_kube_cancel *cancel = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_cancel_new(&cancel, &err), GV_OK);
    struct bg_watch w = {.fx = FX, .path = "/api/v1/pods", .rec = &r};
    w.opts.timeout_seconds = 300;
    w.opts.cancel = cancel;
    time_t t0 = time(NULL);
    assert_int_equal(pthread_create(&w.th, NULL, bg_watch_main, &w), 0);
    wait_watches(FX, 1);
    gv_kube_cancel_fire(cancel);
    pthread_join(w.th, NULL);
    assert_int_equal(w.st, GV_OK);
    /* Returned because of the cancel, far before the 300 s server timeout. */
    assert_true(time(NULL) - t0 < 60);
    assert_true(gv_kube_cancel_fired(cancel));
    gv_kube_cancel_free(cancel);
    free(w.last_rv);
    rec_free(&r);
}

/* Starts a watch, applies a fake control while it streams, checks the result. */
static void watch_under_fault(struct kube_fixture *fx, const char *ctl, gv_status want,
                              const char *needle)
{
    struct rec r;
    rec_init(&r);
    struct bg_watch w = {.fx = fx, .path = "/api/v1/pods", .rec = &r};
    w.opts.timeout_seconds = 30;
    assert_int_equal(pthread_create(&w.th, NULL, bg_watch_main, &w), 0);
    wait_watches(fx, 1);
    assert_int_equal(fake_apiserver_ctl(&fx->fa, ctl, NULL), 200);
    pthread_join(w.th, NULL);
    assert_int_equal(w.st, want);
    assert_non_null(strstr(w.err.msg, "WATCH /api/v1/pods"));
    if (strstr(w.err.msg, needle) == NULL)
        fail_msg("\"%s\" does not mention \"%s\"", w.err.msg, needle);
    free(w.last_rv);
    rec_free(&r);
}

static void test_watch_malformed_stream(void **state)
{
    watch_under_fault(FX, "watch-garbage", GV_EPROTO, "invalid JSON");
}

static void test_watch_dropped_connection(void **state)
{
    watch_under_fault(FX, "drop-watches", GV_EUNAVAILABLE, "WATCH");
}

static void test_watch_unknown_resource(void **state)
{
    struct rec r;
    rec_init(&r);
    struct gv_error err;
    assert_int_equal(gv_kube_watch(FX->client, "/api/v1/gizmos", NULL, watch_cb, &r, NULL, &err),
                     GV_ENOTFOUND);
    assert_non_null(strstr(err.msg, "HTTP 404"));
    rec_free(&r);
}

/* ---- informer */

static void inf_add(void *ud, json_t *o)
{
    struct rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->adds++;
    pthread_mutex_unlock(&r->mu);
    rec_add(r, "add", o);
}

static void inf_update(void *ud, json_t *old, json_t *o)
{
    struct rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->updates++;
    pthread_mutex_unlock(&r->mu);
    /* An update always moves the version forward (checked by the test
     * thread: cmocka asserts must not run on the informer's thread). */
    const char *a = kube_rv(old), *b = kube_rv(o); /* NULL: transformed away */
    rec_add(r, strcmp(a ? a : "", b ? b : "") != 0 ? "update" : "update-same-rv", o);
}

static void inf_delete(void *ud, json_t *o)
{
    struct rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->deletes++;
    pthread_mutex_unlock(&r->mu);
    rec_add(r, "delete", o);
}

static struct gv_informer *start_informer_k(struct kube_fixture *fx, const char *path,
                                            const char *field_selector, struct rec *r,
                                            json_t *(*transform)(void *, json_t *),
                                            void (*on_delete_key)(void *, const char *, json_t *))
{
    struct gv_informer_callbacks cb = {inf_add, inf_update, inf_delete, r};
    struct gv_informer_opts o = {.field_selector = field_selector,
                                 .page_size = 2,
                                 .backoff_initial_ms = 10,
                                 .backoff_max_ms = 50,
                                 .transform = transform,
                                 .on_delete_key = on_delete_key};
    struct gv_informer *inf = NULL;
    struct gv_error err;
    assert_int_equal(gv_informer_new(fx->client, path, &o, &cb, &inf, &err), GV_OK);
    assert_int_equal(gv_informer_start(inf, &err), GV_OK);
    return inf;
}

static struct gv_informer *start_informer_t(struct kube_fixture *fx, const char *path,
                                            const char *field_selector, struct rec *r,
                                            json_t *(*transform)(void *, json_t *))
{
    return start_informer_k(fx, path, field_selector, r, transform, NULL);
}

static struct gv_informer *start_informer(struct kube_fixture *fx, const char *path,
                                          const char *field_selector, struct rec *r)
{
    return start_informer_t(fx, path, field_selector, r, NULL);
}

static void test_informer_callbacks_and_cache(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "p1", NULL, NULL, NULL));
    json_decref(kube_create_pod(FX->client, "default", "p2", NULL, NULL, NULL));
    json_decref(kube_create_pod(FX->client, "kube-system", "p3", NULL, NULL, NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer(FX, "/api/v1/pods", NULL, &r);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    assert_true(gv_informer_has_synced(inf));
    /* Initial list (3 items over pages of 2) → 3 adds. */
    assert_int_equal(r.adds, 3);
    assert_int_equal(gv_informer_size(inf), 3);
    json_t *p3 = gv_informer_get(inf, "kube-system", "p3");
    assert_non_null(p3);
    /* List items get kind/apiVersion like watch objects. */
    assert_string_equal(json_string_value(json_object_get(p3, "kind")), "Pod");
    json_decref(p3);
    assert_null(gv_informer_get(inf, "default", "p3"));

    json_decref(kube_create_pod(FX->client, "default", "p4", NULL, NULL, NULL));
    assert_true(rec_wait(&r, has_line, "add p4"));
    const char *keys[] = {"gpuvisor.io/allocation"};
    const char *vals[] = {"success"};
    struct gv_error err;
    assert_int_equal(gv_kube_patch_annotations(FX->client, "/api/v1/namespaces/default/pods/p1",
                                               NULL, keys, vals, 1, NULL, &err),
                     GV_OK);
    assert_true(rec_wait(&r, has_line, "update p1"));
    json_t *p1 = gv_informer_get(inf, "default", "p1");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(p1, "metadata"), "annotations"),
                            "gpuvisor.io/allocation")),
                        "success");
    json_decref(p1);
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/p2", NULL, &err),
                     GV_OK);
    assert_true(rec_wait(&r, has_line, "delete p2"));
    assert_null(gv_informer_get(inf, "default", "p2"));

    json_t *all = gv_informer_list(inf);
    assert_int_equal(json_array_size(all), 3);
    json_decref(all);
    char *rv = gv_informer_resource_version(inf);
    char *server_rv = list_rv(FX, "/api/v1/pods");
    assert_string_equal(rv, server_rv);
    free(rv);
    free(server_rv);

    gv_informer_stop(inf);
    int n = r.n;
    /* Stopped: no callback after stop returns. */
    json_decref(kube_create_pod(FX->client, "default", "p5", NULL, NULL, NULL));
    gv_kube_cancel_sleep(NULL, 200);
    assert_int_equal(r.n, n);
    gv_informer_free(inf);
    rec_free(&r);
}

static void test_informer_field_selector_node_agent(void **state)
{
    /* The node agent's view: only pods bound to its node. */
    json_decref(kube_create_pod(FX->client, "default", "mine", NULL, NULL, "node-a"));
    json_decref(kube_create_pod(FX->client, "default", "theirs", NULL, NULL, "node-b"));
    json_decref(kube_create_pod(FX->client, "default", "pending", NULL, NULL, NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer(FX, "/api/v1/pods", "spec.nodeName=node-a", &r);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    assert_int_equal(gv_informer_size(inf), 1);
    struct gv_error err;
    /* The scheduler binds "pending" to node-a: it enters the selection. */
    assert_int_equal(gv_kube_bind_pod(FX->client, "default", "pending", NULL, "node-a", &err),
                     GV_OK);
    assert_true(rec_wait(&r, has_line, "add pending"));
    assert_int_equal(gv_informer_size(inf), 2);

    /* Allocate's pattern: object not there yet → wait for the next change. */
    uint64_t g = gv_informer_generation(inf);
    assert_true(g > 0);
    assert_int_equal(gv_informer_wait_change(inf, g, 50), g); /* nothing happens */
    json_decref(kube_create_pod(FX->client, "default", "late", NULL, NULL, "node-a"));
    json_t *late = NULL;
    while ((late = gv_informer_get(inf, "default", "late")) == NULL) {
        uint64_t g2 = gv_informer_wait_change(inf, g, WAIT_MS);
        assert_true(g2 != g);
        g = g2;
    }
    json_decref(late);
    assert_null(gv_informer_get(inf, "default", "theirs"));
    gv_informer_free(inf);
    rec_free(&r);
}

/* Cuts every watch and keeps new ones failing (503): what the informer
 * sees of an API server outage. */
static void watches_cut_off(struct kube_fixture *fx)
{
    assert_int_equal(fake_apiserver_ctl(&fx->fa, "fail?code=503&count=-1&only=watch", NULL), 200);
    assert_int_equal(fake_apiserver_ctl(&fx->fa, "drop-watches", NULL), 200);
}

/* Ends the outage with the history compacted: the informer's version is
 * too old (410) and it must relist. */
static void expire_and_heal(struct kube_fixture *fx)
{
    assert_int_equal(fake_apiserver_ctl(&fx->fa, "compact", NULL), 200);
    assert_int_equal(fake_apiserver_ctl(&fx->fa, "heal", NULL), 200);
}

/* Annotates default/changed (k=v): a change the informer must catch up on. */
static void annotate_changed(struct kube_fixture *fx)
{
    struct gv_error err;
    const char *keys[] = {"k"};
    const char *vals[] = {"v"};
    assert_int_equal(gv_kube_patch_annotations(fx->client,
                                               "/api/v1/namespaces/default/pods/changed", NULL,
                                               keys, vals, 1, NULL, &err),
                     GV_OK);
}

static void test_informer_relist_after_410(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "keep", NULL, NULL, NULL));
    json_decref(kube_create_pod(FX->client, "default", "gone", NULL, NULL, NULL));
    json_decref(kube_create_pod(FX->client, "default", "changed", NULL, NULL, NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer(FX, "/api/v1/pods", NULL, &r);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    wait_watches(FX, 1);
    long lists_before = kube_fake_count(FX, "GET /api/v1/pods");

    /* Cut the informer off from watches, change things it cannot see, and
     * compact so its version is too old when it comes back. */
    watches_cut_off(FX);
    struct gv_error err;
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/gone", NULL,
                                    &err),
                     GV_OK);
    annotate_changed(FX);
    json_decref(kube_create_pod(FX->client, "default", "new", NULL, NULL, NULL));
    expire_and_heal(FX);

    /* Watch → 410 → relist → the differences as callbacks. */
    assert_true(rec_wait(&r, has_line, "delete gone"));
    assert_true(rec_wait(&r, has_line, "update changed"));
    assert_true(rec_wait(&r, has_line, "add new"));
    assert_false(rec_has(&r, "update keep"));
    assert_false(rec_has(&r, "update-same-rv keep"));
    assert_true(kube_fake_count(FX, "GET /api/v1/pods") > lists_before);
    assert_int_equal(gv_informer_size(inf), 3);
    assert_true(gv_informer_has_synced(inf));
    gv_informer_free(inf);
    rec_free(&r);
}

static void test_informer_outage_recovery(void **state)
{
    struct rec r;
    rec_init(&r);
    /* Down from the start: the informer keeps trying, never synced. */
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "fail?code=503&count=-1", NULL), 200);
    struct gv_informer *inf = start_informer(FX, "/api/v1/nodes", NULL, &r);
    for (int i = 0; i < WAIT_MS / 10 && kube_fake_count(FX, "GET /api/v1/nodes") < 8; i++)
        gv_kube_cancel_sleep(NULL, 10);
    assert_true(kube_fake_count(FX, "GET /api/v1/nodes") >= 8);
    assert_false(gv_informer_has_synced(inf));
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "heal", NULL), 200);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));

    /* Outage while watching: it comes back and sees later changes. */
    wait_watches(FX, 1);
    watches_cut_off(FX);
    json_decref(kube_create_node(FX->client, "late", NULL, NULL));
    gv_kube_cancel_sleep(NULL, 100);
    assert_int_equal(fake_apiserver_ctl(&FX->fa, "heal", NULL), 200);
    assert_true(rec_wait(&r, has_line, "add late"));
    json_t *late = gv_informer_get(inf, NULL, "late");
    assert_non_null(late);
    json_decref(late);
    gv_informer_free(inf);
    rec_free(&r);
}

static void test_informer_bookmarks_advance_version(void **state)
{
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer(FX, "/api/v1/nodes", NULL, &r);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    json_decref(kube_create_pod(FX->client, "default", "p", NULL, NULL, NULL));
    char *want = list_rv(FX, "/api/v1/pods");
    char *rv = NULL;
    for (int i = 0; i < WAIT_MS / 20; i++) {
        free(rv);
        rv = gv_informer_resource_version(inf);
        if (strcmp(rv, want) == 0)
            break;
        gv_kube_cancel_sleep(NULL, 20);
    }
    /* No node changed, yet the informer's version caught up: bookmarks. */
    assert_string_equal(rv, want);
    assert_int_equal(r.n, 0);
    free(rv);
    free(want);
    gv_informer_free(inf);
    rec_free(&r);
}

/* Keeps only metadata name/namespace/resourceVersion/annotations; leaves
 * out pods labelled skip=1. */
static json_t *trim(void *ud, json_t *obj)
{
    (void)ud;
    json_t *md = json_object_get(obj, "metadata");
    const char *skip = json_string_value(json_object_get(json_object_get(md, "labels"), "skip"));
    if (skip != NULL && strcmp(skip, "1") == 0)
        return NULL;
    json_t *out = json_object();
    json_t *m = json_object();
    const char *keep[] = {"name", "namespace", "resourceVersion", "annotations"};
    for (size_t i = 0; i < 4; i++) {
        json_t *v = json_object_get(md, keep[i]);
        if (v != NULL)
            json_object_set(m, keep[i], v);
    }
    json_object_set_new(out, "metadata", m);
    return out;
}

/* After the first LIST the informer watches from the list's version (not
 * from "now": events between the two would be lost), and list items carry
 * the kind and apiVersion that watch objects carry. */
static void test_informer_list_version_and_kinds(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "p1", NULL, NULL, NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer(FX, "/api/v1/pods", NULL, &r);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    char *want = list_rv(FX, "/api/v1/pods");
    char *rv = gv_informer_resource_version(inf);
    assert_string_equal(rv, want);
    free(rv);
    free(want);
    /* a watch from "" would replay every object as a synthetic ADDED:
     * nothing but the new pod is reported */
    wait_watches(FX, 1);
    json_decref(kube_create_pod(FX->client, "default", "p2", NULL, NULL, NULL));
    assert_true(rec_wait(&r, has_line, "add p2"));
    assert_int_equal(r.updates, 0);
    assert_int_equal(r.adds, 2);
    json_t *p1 = gv_informer_get(inf, "default", "p1");
    assert_non_null(p1);
    assert_string_equal(json_string_value(json_object_get(p1, "kind")), "Pod");
    assert_string_equal(json_string_value(json_object_get(p1, "apiVersion")), "v1");
    json_decref(p1);
    /* a second start is refused; freeing nothing is nothing; a path must
     * be an absolute API path */
    struct gv_error err;
    struct gv_informer *bad = (struct gv_informer *)&err;
    assert_int_equal(gv_informer_new(FX->client, "api/v1/pods", NULL, NULL, &bad, &err), GV_EINVAL);
    assert_null(bad);
    assert_int_equal(gv_informer_new(FX->client, NULL, NULL, NULL, &bad, &err), GV_EINVAL);
    assert_int_equal(gv_informer_new(NULL, "/api/v1/pods", NULL, NULL, &bad, &err), GV_EINVAL);
    assert_int_equal(gv_informer_start(inf, &err), GV_EINVAL);
    gv_informer_free(inf);
    gv_informer_free(NULL);
    rec_free(&r);
}

/* An object the cache never held (its transform left it out) is not
 * reported deleted when it goes. */
static void test_informer_unknown_delete_unreported(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "kept", NULL, NULL, NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer_t(FX, "/api/v1/pods", NULL, &r, trim);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    json_decref(kube_create_pod(FX->client, "default", "skipped", "skip", "1", NULL));
    struct gv_error err;
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/skipped", NULL,
                                    &err),
                     GV_OK);
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/kept", NULL,
                                    &err),
                     GV_OK);
    assert_true(rec_wait(&r, has_line, "delete kept"));
    assert_false(rec_has(&r, "delete skipped"));
    assert_int_equal(r.deletes, 1);
    gv_informer_free(inf);
    rec_free(&r);
}

/* A watch the server ends on time (timeoutSeconds) is healthy: the next
 * one starts at once, not after a failure's backoff (here 3-6 s). */
static void test_informer_rewatch_after_timeout_without_backoff(void **state)
{
    struct rec r;
    rec_init(&r);
    struct gv_informer_callbacks cb = {inf_add, inf_update, inf_delete, &r};
    struct gv_informer_opts o = {.watch_timeout_seconds = 1,
                                 .backoff_initial_ms = 6000,
                                 .backoff_max_ms = 6000};
    struct gv_informer *inf = NULL;
    struct gv_error err;
    assert_int_equal(gv_informer_new(FX->client, "/api/v1/nodes", &o, &cb, &inf, &err), GV_OK);
    assert_int_equal(gv_informer_start(inf, &err), GV_OK);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    wait_watches(FX, 1);
    long first = kube_fake_count(FX, "GET /api/v1/nodes");
    /* three 1-second watches end within ~3.5 s; waiting up to 10 s leaves a
     * loaded machine room, while with a 3-6 s backoff after each watch the
     * third new one could not start before 12 s */
    for (int i = 0; i < 100 && kube_fake_count(FX, "GET /api/v1/nodes") < first + 3; i++)
        gv_kube_cancel_sleep(NULL, 100);
    assert_true(kube_fake_count(FX, "GET /api/v1/nodes") >= first + 3);
    gv_informer_free(inf);
    rec_free(&r);
}

/* Keeps name, namespace and annotations: no resourceVersion (a cache of
 * the few fields a daemon reads, as the scheduler's). */
static json_t *trim_versionless(void *ud, json_t *obj)
{
    (void)ud;
    json_t *md = json_object_get(obj, "metadata");
    json_t *m = json_object();
    const char *keep[] = {"name", "namespace", "annotations"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(md, keep[i]);
        if (v != NULL)
            json_object_set(m, keep[i], v);
    }
    return json_pack("{s:o}", "metadata", m);
}

/* With the versions transformed away, a relist still reports what changed
 * while the informer was cut off (by content), and only that. */
static void test_informer_relist_without_versions(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "keep", NULL, NULL, NULL));
    json_decref(kube_create_pod(FX->client, "default", "changed", NULL, NULL, NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer_t(FX, "/api/v1/pods", NULL, &r, trim_versionless);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    wait_watches(FX, 1);
    watches_cut_off(FX);
    annotate_changed(FX);
    expire_and_heal(FX);
    /* both versions are empty: the update is known by its content */
    assert_true(rec_wait(&r, has_line, "update-same-rv changed"));
    assert_false(rec_has(&r, "update-same-rv keep"));
    assert_false(rec_has(&r, "update keep"));
    json_t *c = gv_informer_get(inf, "default", "changed");
    assert_non_null(c);
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_object_get(c, "metadata"), "annotations"), "k")),
        "v");
    json_decref(c);
    gv_informer_free(inf);
    rec_free(&r);
}

static void test_informer_transform_and_managed_fields(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "kept", NULL, NULL, "n1"));
    json_decref(kube_create_pod(FX->client, "default", "skipped", "skip", "1", NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf = start_informer_t(FX, "/api/v1/pods", NULL, &r, trim);
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    assert_int_equal(gv_informer_size(inf), 1);
    json_t *kept = gv_informer_get(inf, "default", "kept");
    assert_non_null(kept);
    assert_null(json_object_get(kept, "spec"));
    json_decref(kept);

    /* managedFields never reach the cache, with or without a transform. */
    json_t *pod = json_pack("{s:{s:s, s:[{s:s}]}}", "metadata", "name", "mf", "managedFields",
                            "manager", "kubectl");
    struct gv_error err;
    assert_int_equal(gv_kube_create(FX->client, "/api/v1/namespaces/default/pods", pod, NULL,
                                    &err),
                     GV_OK);
    json_decref(pod);
    struct rec r2;
    rec_init(&r2);
    struct gv_informer *plain = start_informer(FX, "/api/v1/pods", NULL, &r2);
    assert_true(gv_informer_wait_synced(plain, WAIT_MS));
    json_t *mf = gv_informer_get(plain, "default", "mf");
    assert_non_null(mf);
    assert_null(json_object_get(json_object_get(mf, "metadata"), "managedFields"));
    assert_non_null(json_object_get(mf, "spec"));
    json_decref(mf);
    gv_informer_free(plain);
    rec_free(&r2);

    /* An object the transform starts refusing is reported deleted. */
    assert_true(rec_wait(&r, has_line, "add mf"));
    json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "labels", "skip", "1");
    assert_int_equal(gv_kube_patch(FX->client, "/api/v1/namespaces/default/pods/kept",
                                   GV_KUBE_PATCH_MERGE, patch, NULL, &err),
                     GV_OK);
    json_decref(patch);
    assert_true(rec_wait(&r, has_line, "delete kept"));
    assert_null(gv_informer_get(inf, "default", "kept"));
    gv_informer_free(inf);
    rec_free(&r);
}

/* on_delete_key: a cache of one shared constant per object (the
 * scheduler's node informer) still says which object went, by its key,
 * both for a watch DELETED event and for an object gone at a relist; the
 * callbacks' on_delete is not called as well. */
static json_t *to_true(void *ud, json_t *o)
{
    (void)ud;
    (void)o;
    return json_true();
}

static void inf_delete_key(void *ud, const char *key, json_t *o)
{
    struct rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->deletes++;
    if (r->n < 64)
        snprintf(r->log[r->n], sizeof(r->log[0]), "delete-key %s %s", key,
                 json_is_true(o) ? "true" : "other");
    r->n++;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mu);
}

static void test_informer_delete_by_key(void **state)
{
    json_decref(kube_create_pod(FX->client, "default", "a", NULL, NULL, NULL));
    json_decref(kube_create_pod(FX->client, "default", "b", NULL, NULL, NULL));
    json_decref(kube_create_pod(FX->client, "default", "c", NULL, NULL, NULL));
    struct rec r;
    rec_init(&r);
    struct gv_informer *inf =
        start_informer_k(FX, "/api/v1/pods", NULL, &r, to_true, inf_delete_key);
    struct gv_error err;
    assert_true(gv_informer_wait_synced(inf, WAIT_MS));
    assert_int_equal(gv_informer_size(inf), 3);
    json_t *a = gv_informer_get(inf, "default", "a");
    assert_true(json_is_true(a));
    json_decref(a);
    wait_watches(FX, 1);
    /* watch: DELETED */
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/a", NULL, &err),
                     GV_OK);
    assert_true(rec_wait(&r, has_line, "delete-key default/a true"));
    /* relist: gone while the watch was down */
    watches_cut_off(FX);
    assert_int_equal(gv_kube_delete(FX->client, "/api/v1/namespaces/default/pods/b", NULL, &err),
                     GV_OK);
    expire_and_heal(FX);
    assert_true(rec_wait(&r, has_line, "delete-key default/b true"));
    assert_false(rec_has(&r, "delete-key default/c true"));
    assert_false(rec_has(&r, "delete -"));
    assert_int_equal(r.deletes, 2);
    assert_int_equal(gv_informer_size(inf), 1);
    gv_informer_free(inf);
    rec_free(&r);
}

struct self_stop {
    struct gv_informer *inf;
    int adds;
};

static void stop_on_add(void *ud, json_t *o)
{
    (void)o;
    struct self_stop *ss = ud;
    __atomic_add_fetch(&ss->adds, 1, __ATOMIC_SEQ_CST);
    gv_informer_stop(ss->inf); /* from the informer's own thread */
}

static void test_informer_stop_from_callback(void **state)
{
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof(name), "s%d", i);
        json_decref(kube_create_pod(FX->client, "default", name, NULL, NULL, NULL));
    }
    struct self_stop ss = {0};
    struct gv_informer_callbacks cb = {.on_add = stop_on_add, .ud = &ss};
    struct gv_error err;
    assert_int_equal(gv_informer_new(FX->client, "/api/v1/pods", NULL, &cb, &ss.inf, &err),
                     GV_OK);
    assert_int_equal(gv_informer_start(ss.inf, &err), GV_OK);
    /* The thread ends by itself; free joins it without deadlock. */
    for (int i = 0; i < WAIT_MS / 10 && __atomic_load_n(&ss.adds, __ATOMIC_SEQ_CST) == 0; i++)
        gv_kube_cancel_sleep(NULL, 10);
    gv_informer_free(ss.inf);
    assert_int_equal(ss.adds, 1);
}

static void test_informer_stop_while_down(void **state)
{
    struct rec r;
    rec_init(&r);
    fake_apiserver_stop(&FX->fa);
    struct gv_informer *inf = start_informer(FX, "/api/v1/pods", NULL, &r);
    assert_false(gv_informer_wait_synced(inf, 100));
    time_t t0 = time(NULL);
    gv_informer_stop(inf);
    assert_true(time(NULL) - t0 < 30);
    assert_false(gv_informer_wait_synced(inf, 10));
    gv_informer_stop(inf); /* idempotent */
    struct gv_error err;
    assert_int_equal(gv_informer_start(inf, &err), GV_EINVAL);
    gv_informer_free(inf);
    rec_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, kube_fixture_setup, kube_fixture_teardown)
#define TB(fn) cmocka_unit_test_setup_teardown(fn, setup_fast_bookmarks, kube_fixture_teardown)
        T(test_watch_replay_and_resume),
        T(test_watch_history_keeps_each_version),
        T(test_watch_from_now_lists_current),
        TB(test_watch_bookmarks),
        T(test_watch_410_error_event_and_status),
        T(test_watch_field_selector_enter_leave),
        T(test_watch_cancel),
        T(test_watch_malformed_stream),
        T(test_watch_dropped_connection),
        T(test_watch_unknown_resource),
        T(test_informer_callbacks_and_cache),
        T(test_informer_field_selector_node_agent),
        T(test_informer_relist_after_410),
        T(test_informer_outage_recovery),
        TB(test_informer_bookmarks_advance_version),
        T(test_informer_transform_and_managed_fields),
        T(test_informer_relist_without_versions),
        T(test_informer_list_version_and_kinds),
        T(test_informer_unknown_delete_unreported),
        T(test_informer_rewatch_after_timeout_without_backoff),
        T(test_informer_delete_by_key),
        T(test_informer_stop_from_callback),
        T(test_informer_stop_while_down),
#undef T
#undef TB
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
