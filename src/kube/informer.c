/*
 * Informer: keeps a local copy of one resource collection current with
 * LIST + WATCH on a background thread, like client-go's reflector + store.
 *
 * Loop: LIST (paged) → replace the cache, reporting the difference as
 * add/update/delete → WATCH from the list's resourceVersion with bookmarks
 * → on a clean end (server timeout) watch again from the last version seen;
 * on 410 Gone relist at once; on any other failure wait a jittered,
 * growing delay and watch again (relisting only if the server says the
 * version is gone).  The cache is guarded by a rwlock so daemons can read
 * it from request threads while the informer writes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/gv_log.h"
#include "kube/kube_internal.h"

#define DEFAULT_PAGE_SIZE 500
#define DEFAULT_BACKOFF_INITIAL_MS 200
#define DEFAULT_BACKOFF_MAX_MS 30000
/* Re-watch period, jittered in [T, 2T) like client-go so that many
 * informers do not reconnect in lockstep. */
#define DEFAULT_WATCH_TIMEOUT_S 300
/* A watch that ends cleanly this fast with no events counts as a failure
 * (backoff), so a server that closes at once cannot make us spin. */
#define MIN_HEALTHY_WATCH_MS 1000

struct gv_informer {
    struct gv_kube_client *client;
    char *path;
    char *label_selector, *field_selector;
    long page_size, watch_timeout_s, backoff_initial_ms, backoff_max_ms;
    struct gv_informer_callbacks cb;
    json_t *(*transform)(void *ud, json_t *obj);
    void *transform_ud;
    void (*on_delete_key)(void *ud, const char *key, json_t *obj);

    pthread_rwlock_t lock; /* guards cache and rv */
    json_t *cache;         /* key → object */
    char *rv;

    pthread_mutex_t sync_mu; /* guards synced and generation */
    pthread_cond_t sync_cond;
    bool synced;
    uint64_t generation;

    struct gv_kube_cancel *cancel;
    pthread_t thread;
    bool running;
};

static char *dup_or_null(const char *s, bool *ok)
{
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        *ok = false;
    return d;
}

gv_status gv_informer_new(struct gv_kube_client *c, const char *path,
                          const struct gv_informer_opts *opts,
                          const struct gv_informer_callbacks *cb, struct gv_informer **out,
                          struct gv_error *err)
{
    *out = NULL;
    if (c == NULL || path == NULL || path[0] != '/')
        return gv_error_set(err, GV_EINVAL, "informer: client and an API path are required");
    struct gv_informer *inf = calloc(1, sizeof(*inf));
    if (inf == NULL)
        return gv_error_set(err, GV_ENOMEM, "informer %s: out of memory", path);
    bool ok = true;
    inf->client = c;
    inf->path = dup_or_null(path, &ok);
    if (opts != NULL) {
        inf->label_selector = dup_or_null(opts->label_selector, &ok);
        inf->field_selector = dup_or_null(opts->field_selector, &ok);
    }
    inf->page_size = opts && opts->page_size > 0 ? opts->page_size : DEFAULT_PAGE_SIZE;
    inf->watch_timeout_s =
        opts && opts->watch_timeout_seconds > 0 ? opts->watch_timeout_seconds : 0;
    inf->backoff_initial_ms = opts && opts->backoff_initial_ms > 0 ? opts->backoff_initial_ms
                                                                   : DEFAULT_BACKOFF_INITIAL_MS;
    inf->backoff_max_ms =
        opts && opts->backoff_max_ms > 0 ? opts->backoff_max_ms : DEFAULT_BACKOFF_MAX_MS;
    if (cb != NULL)
        inf->cb = *cb;
    if (opts != NULL) {
        inf->transform = opts->transform;
        inf->transform_ud = opts->transform_ud;
        inf->on_delete_key = opts->on_delete_key;
    }
    inf->cache = json_object();
    inf->rv = strdup("");
    pthread_rwlock_init(&inf->lock, NULL);
    pthread_mutex_init(&inf->sync_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&inf->sync_cond, &ca);
    pthread_condattr_destroy(&ca);
    gv_status st = gv_kube_cancel_new(&inf->cancel, err);
    if (st == GV_OK && (!ok || inf->cache == NULL || inf->rv == NULL))
        st = gv_error_set(err, GV_ENOMEM, "informer %s: out of memory", path);
    if (st != GV_OK) {
        gv_informer_free(inf);
        return st;
    }
    *out = inf;
    return GV_OK;
}

/* Cache key: "namespace/name", or "name" for cluster-scoped objects. */
static char *make_key(const char *ns, const char *name)
{
    if (name == NULL || name[0] == '\0')
        return NULL;
    size_t n = strlen(name) + (ns ? strlen(ns) : 0) + 2;
    char *k = malloc(n);
    if (k == NULL)
        return NULL;
    if (ns != NULL && ns[0] != '\0')
        snprintf(k, n, "%s/%s", ns, name);
    else
        snprintf(k, n, "%s", name);
    return k;
}

/* NULL when the object has no name. */
static char *object_key(json_t *obj)
{
    json_t *md = json_object_get(obj, "metadata");
    return make_key(json_string_value(json_object_get(md, "namespace")),
                    json_string_value(json_object_get(md, "name")));
}

/* What the cache keeps for obj (new reference), or NULL to leave it out.
 * obj belongs to this thread (a list page or a decoded event), so dropping
 * managedFields in place is safe. */
static json_t *prepare(struct gv_informer *inf, json_t *obj)
{
    json_t *md = json_object_get(obj, "metadata");
    if (json_is_object(md))
        json_object_del(md, "managedFields");
    if (inf->transform == NULL)
        return json_incref(obj);
    return inf->transform(inf->transform_ud, obj);
}

/* Publishes a cache change to gv_informer_wait_change/wait_synced. */
static void bump_generation(struct gv_informer *inf, bool synced)
{
    pthread_mutex_lock(&inf->sync_mu);
    inf->generation++;
    if (synced)
        inf->synced = true;
    pthread_cond_broadcast(&inf->sync_cond);
    pthread_mutex_unlock(&inf->sync_mu);
}

static const char *object_rv(json_t *obj)
{
    const char *rv =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    return rv != NULL ? rv : "";
}

static void set_rv_locked(struct gv_informer *inf, const char *rv)
{
    if (rv == NULL || rv[0] == '\0')
        return;
    char *d = strdup(rv);
    if (d == NULL)
        return; /* keep the older version: a later relist is harmless */
    free(inf->rv);
    inf->rv = d;
}

static bool object_changed(json_t *prev, json_t *obj)
{
    const char *a = object_rv(prev), *b = object_rv(obj);
    /* A transform may have dropped the version: compare contents then. */
    if (a[0] == '\0' && b[0] == '\0')
        return !json_equal(prev, obj);
    return strcmp(a, b) != 0;
}

struct relist {
    struct gv_informer *inf;
    json_t *fresh; /* key → prepared object */
    char *rv;      /* the first page's version: the snapshot */
    char kind[128];
    char api[64];
};

/* Adds one LIST page to the fresh map; only this page and the prepared
 * objects are in memory, never the whole raw list. */
static gv_status relist_page(void *ud, json_t *page, struct gv_error *err)
{
    struct relist *rl = ud;
    if (rl->rv == NULL) {
        const char *rv = json_string_value(
            json_object_get(json_object_get(page, "metadata"), "resourceVersion"));
        rl->rv = strdup(rv != NULL ? rv : "");
        if (rl->rv == NULL)
            return gv_error_set(err, GV_ENOMEM, "informer: out of memory");
        /* List items carry no kind/apiVersion; watch objects do.  Fill them
         * in so consumers see one shape whichever path delivered them. */
        const char *lkind = json_string_value(json_object_get(page, "kind"));
        size_t kl = lkind != NULL ? strlen(lkind) : 0;
        if (kl > 4 && kl < sizeof(rl->kind) && strcmp(lkind + kl - 4, "List") == 0)
            snprintf(rl->kind, sizeof(rl->kind), "%.*s", (int)(kl - 4), lkind);
        const char *api = json_string_value(json_object_get(page, "apiVersion"));
        if (api != NULL && strlen(api) < sizeof(rl->api))
            snprintf(rl->api, sizeof(rl->api), "%s", api);
    }
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(page, "items"), i, it)
    {
        char *key = object_key(it);
        if (key == NULL) {
            gv_warn("informer %s: list item without metadata.name; skipped", rl->inf->path);
            continue;
        }
        if (rl->kind[0] != '\0' && json_object_get(it, "kind") == NULL)
            json_object_set_new(it, "kind", json_string(rl->kind));
        if (rl->api[0] != '\0' && json_object_get(it, "apiVersion") == NULL)
            json_object_set_new(it, "apiVersion", json_string(rl->api));
        json_t *v = prepare(rl->inf, it);
        if (v != NULL && json_object_set_new(rl->fresh, key, v) != 0) {
            free(key);
            return gv_error_set(err, GV_ENOMEM, "informer: out of memory");
        }
        free(key);
    }
    if (gv_kube_cancel_fired(rl->inf->cancel))
        return gv_error_set(err, GV_ETIMEOUT, "informer stopped during LIST");
    return GV_OK;
}

/* LISTs the collection, replaces the cache and reports the difference. */
static gv_status relist(struct gv_informer *inf, struct gv_error *err)
{
    struct relist rl = {.inf = inf, .fresh = json_object()};
    if (rl.fresh == NULL)
        return gv_error_set(err, GV_ENOMEM, "informer: out of memory");
    struct gv_kube_list_opts lo = {inf->label_selector, inf->field_selector, inf->page_size};
    gv_status st = gv_kube_list_pages(inf->client, inf->path, &lo, relist_page, &rl, err);
    if (st != GV_OK) {
        json_decref(rl.fresh);
        free(rl.rv);
        return st;
    }
    pthread_rwlock_wrlock(&inf->lock);
    json_t *old = inf->cache;
    inf->cache = rl.fresh;
    set_rv_locked(inf, rl.rv);
    pthread_rwlock_unlock(&inf->lock);
    free(rl.rv);

    /* Callbacks run unlocked: the maps are private to this thread now
     * (readers hold references to objects, never to the maps). */
    const char *key;
    json_t *obj;
    json_object_foreach(rl.fresh, key, obj)
    {
        if (gv_kube_cancel_fired(inf->cancel))
            break;
        json_t *prev = json_object_get(old, key);
        if (prev == NULL) {
            if (inf->cb.on_add)
                inf->cb.on_add(inf->cb.ud, obj);
        } else if (object_changed(prev, obj)) {
            if (inf->cb.on_update)
                inf->cb.on_update(inf->cb.ud, prev, obj);
        }
    }
    json_object_foreach(old, key, obj)
    {
        if (gv_kube_cancel_fired(inf->cancel))
            break;
        if (json_object_get(rl.fresh, key) != NULL)
            continue;
        if (inf->on_delete_key)
            inf->on_delete_key(inf->cb.ud, key, obj);
        else if (inf->cb.on_delete)
            inf->cb.on_delete(inf->cb.ud, obj);
    }
    json_decref(old);
    return GV_OK;
}

/* Applies one watch event; runs on the informer thread. */
static bool on_event(void *ud, gv_kube_event_type type, json_t *obj)
{
    struct gv_informer *inf = ud;
    if (type == GV_KUBE_EVENT_BOOKMARK) {
        pthread_rwlock_wrlock(&inf->lock);
        set_rv_locked(inf, object_rv(obj));
        pthread_rwlock_unlock(&inf->lock);
        return true;
    }
    char *key = object_key(obj);
    if (key == NULL) {
        gv_warn("informer %s: %s event without metadata.name; ignored", inf->path,
                gv_kube_event_name(type));
        return true;
    }
    json_t *v = prepare(inf, obj);
    bool gone = type == GV_KUBE_EVENT_DELETED || v == NULL;
    pthread_rwlock_wrlock(&inf->lock);
    json_t *prev = json_incref(json_object_get(inf->cache, key));
    if (gone)
        json_object_del(inf->cache, key);
    else
        json_object_set(inf->cache, key, v);
    set_rv_locked(inf, object_rv(obj));
    pthread_rwlock_unlock(&inf->lock);
    bump_generation(inf, false);

    if (gone) {
        /* Unknown objects were never reported: nothing to take back. */
        if (prev != NULL && inf->on_delete_key)
            inf->on_delete_key(inf->cb.ud, key, v != NULL ? v : prev);
        else if (prev != NULL && inf->cb.on_delete)
            inf->cb.on_delete(inf->cb.ud, v != NULL ? v : prev);
    } else if (prev == NULL) {
        if (inf->cb.on_add)
            inf->cb.on_add(inf->cb.ud, v);
    } else if (inf->cb.on_update) {
        inf->cb.on_update(inf->cb.ud, prev, v);
    }
    json_decref(v);
    json_decref(prev);
    free(key);
    return !gv_kube_cancel_fired(inf->cancel);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* The informer whose thread this is (callbacks run here), or NULL. */
static _Thread_local struct gv_informer *current_informer;

static void *informer_main(void *arg)
{
    struct gv_informer *inf = arg;
    current_informer = inf;
    bool need_list = true;
    unsigned failures = 0;
    while (!gv_kube_cancel_fired(inf->cancel)) {
        struct gv_error err;
        gv_error_clear(&err);
        gv_status st;
        if (need_list) {
            st = relist(inf, &err);
            if (gv_kube_cancel_fired(inf->cancel))
                break;
            if (st == GV_OK) {
                need_list = false;
                failures = 0;
                bump_generation(inf, true);
                continue;
            }
        } else {
            char *rv = gv_informer_resource_version(inf);
            long t = inf->watch_timeout_s;
            if (t <= 0)
                t = gv_kube_backoff_ms(2 * DEFAULT_WATCH_TIMEOUT_S, 2 * DEFAULT_WATCH_TIMEOUT_S, 0);
            struct gv_kube_watch_opts wo = {
                .label_selector = inf->label_selector,
                .field_selector = inf->field_selector,
                .resource_version = rv,
                .bookmarks = true,
                .timeout_seconds = t,
                .cancel = inf->cancel,
            };
            long start = now_ms();
            st = gv_kube_watch(inf->client, inf->path, &wo, on_event, inf, NULL, &err);
            free(rv);
            if (st == GV_OK) {
                long took = now_ms() - start;
                if (took >= MIN_HEALTHY_WATCH_MS || gv_kube_cancel_fired(inf->cancel)) {
                    failures = 0;
                    continue;
                }
                st = gv_error_set(&err, GV_EUNAVAILABLE, "watch ended after %ld ms", took);
            }
            if (st == GV_ERANGE) {
                gv_info("informer %s: %s; relisting", inf->path, err.msg);
                need_list = true;
                continue;
            }
        }
        long delay = gv_kube_backoff_ms(inf->backoff_initial_ms, inf->backoff_max_ms, failures);
        failures++;
        gv_warn("informer %s: %s; retrying in %ld ms", inf->path, err.msg, delay);
        gv_kube_cancel_sleep(inf->cancel, delay);
    }
    return NULL;
}

gv_status gv_informer_start(struct gv_informer *inf, struct gv_error *err)
{
    if (inf->running)
        return gv_error_set(err, GV_EINVAL, "informer %s: already started", inf->path);
    if (gv_kube_cancel_fired(inf->cancel))
        return gv_error_set(err, GV_EINVAL, "informer %s: stopped informers cannot restart",
                            inf->path);
    /* Set before the thread exists: its callbacks may call stop at once. */
    inf->running = true;
    int rc = pthread_create(&inf->thread, NULL, informer_main, inf);
    if (rc != 0) {
        inf->running = false;
        return gv_error_set(err, GV_EINTERNAL, "informer %s: pthread_create: %s", inf->path,
                            strerror(rc));
    }
    return GV_OK;
}

void gv_informer_stop(struct gv_informer *inf)
{
    if (inf == NULL)
        return;
    gv_kube_cancel_fire(inf->cancel);
    /* From a callback (the informer's own thread) we cannot join ourselves:
     * the loop sees the cancel and ends; gv_informer_free joins later. */
    if (current_informer == inf)
        return;
    if (inf->running) {
        pthread_join(inf->thread, NULL);
        inf->running = false;
    }
    /* Wake waiters: they see has_synced as it is. */
    pthread_mutex_lock(&inf->sync_mu);
    pthread_cond_broadcast(&inf->sync_cond);
    pthread_mutex_unlock(&inf->sync_mu);
}

void gv_informer_free(struct gv_informer *inf)
{
    if (inf == NULL)
        return;
    if (inf->cancel != NULL)
        gv_informer_stop(inf);
    gv_kube_cancel_free(inf->cancel);
    json_decref(inf->cache);
    pthread_rwlock_destroy(&inf->lock);
    pthread_cond_destroy(&inf->sync_cond);
    pthread_mutex_destroy(&inf->sync_mu);
    free(inf->rv);
    free(inf->path);
    free(inf->label_selector);
    free(inf->field_selector);
    free(inf);
}

bool gv_informer_has_synced(struct gv_informer *inf)
{
    pthread_mutex_lock(&inf->sync_mu);
    bool s = inf->synced;
    pthread_mutex_unlock(&inf->sync_mu);
    return s;
}

bool gv_informer_wait_synced(struct gv_informer *inf, long timeout_ms)
{
    struct timespec deadline;
    gv_kube_deadline(&deadline, timeout_ms);
    pthread_mutex_lock(&inf->sync_mu);
    while (!inf->synced && !gv_kube_cancel_fired(inf->cancel)) {
        if (pthread_cond_timedwait(&inf->sync_cond, &inf->sync_mu, &deadline) == ETIMEDOUT)
            break;
    }
    bool s = inf->synced;
    pthread_mutex_unlock(&inf->sync_mu);
    return s;
}

uint64_t gv_informer_generation(struct gv_informer *inf)
{
    pthread_mutex_lock(&inf->sync_mu);
    uint64_t g = inf->generation;
    pthread_mutex_unlock(&inf->sync_mu);
    return g;
}

uint64_t gv_informer_wait_change(struct gv_informer *inf, uint64_t seen, long timeout_ms)
{
    struct timespec deadline;
    gv_kube_deadline(&deadline, timeout_ms);
    pthread_mutex_lock(&inf->sync_mu);
    while (inf->generation == seen && !gv_kube_cancel_fired(inf->cancel)) {
        if (pthread_cond_timedwait(&inf->sync_cond, &inf->sync_mu, &deadline) == ETIMEDOUT)
            break;
    }
    uint64_t g = inf->generation;
    pthread_mutex_unlock(&inf->sync_mu);
    return g;
}

json_t *gv_informer_get(struct gv_informer *inf, const char *namespace_, const char *name)
{
    char *key = make_key(namespace_, name);
    if (key == NULL)
        return NULL;
    pthread_rwlock_rdlock(&inf->lock);
    json_t *o = json_incref(json_object_get(inf->cache, key));
    pthread_rwlock_unlock(&inf->lock);
    free(key);
    return o;
}

json_t *gv_informer_list(struct gv_informer *inf)
{
    json_t *arr = json_array();
    if (arr == NULL)
        return NULL;
    pthread_rwlock_rdlock(&inf->lock);
    const char *key;
    json_t *obj;
    json_object_foreach(inf->cache, key, obj)
    {
        if (json_array_append(arr, obj) != 0) {
            pthread_rwlock_unlock(&inf->lock);
            json_decref(arr);
            return NULL;
        }
    }
    pthread_rwlock_unlock(&inf->lock);
    return arr;
}

size_t gv_informer_size(struct gv_informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = json_object_size(inf->cache);
    pthread_rwlock_unlock(&inf->lock);
    return n;
}

char *gv_informer_resource_version(struct gv_informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    char *rv = strdup(inf->rv != NULL ? inf->rv : "");
    pthread_rwlock_unlock(&inf->lock);
    return rv;
}
