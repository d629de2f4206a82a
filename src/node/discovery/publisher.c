/* Node inventory, heartbeat and labels: see gv_publisher.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/gv_log.h"
#include "node/loop/gv_loop.h"
#include "node/discovery/gv_publisher.h"

struct gv_publisher {
    struct gv_kube_client *kube;
    char *path;
    int64_t heartbeat_ms;
    pthread_t thread;
    bool running;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool quit;
    char *want;        /* inventory JSON to publish */
    char *published;   /* last inventory JSON the API accepted */
    json_t *labels;    /* labels for `want` */
    uint64_t writes;
};

json_t *gv_publisher_labels(const struct gv_inventory *inv)
{
    return gv_labels_gfd(inv, (long long)time(NULL));
}

static void rfc3339_now(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void *publisher_main(void *arg)
{
    struct gv_publisher *p = arg;
    int64_t next_beat = 0, backoff = 0;
    pthread_mutex_lock(&p->lock);
    while (!p->quit) {
        bool dirty = p->want && (!p->published || strcmp(p->want, p->published) != 0);
        int64_t now = gv_loop_now_ms();
        if (!dirty && now < next_beat) {
            struct timespec ts;
            gv_loop_abstime(&ts, next_beat - now);
            pthread_cond_timedwait(&p->cond, &p->lock, &ts);
            continue;
        }
        if (p->want == NULL) { /* nothing discovered yet: no heartbeat without an inventory */
            pthread_cond_wait(&p->cond, &p->lock);
            continue;
        }
        char beat[32];
        rfc3339_now(beat, sizeof(beat));
        char *sent = dirty ? strdup(p->want) : NULL;
        json_t *ann = json_pack("{s:s}", GV_INVENTORY_HEARTBEAT_ANNOTATION, beat);
        json_t *meta = json_pack("{s:o}", "annotations", ann);
        if (sent) {
            json_object_set_new(ann, GV_INVENTORY_ANNOTATION, json_string(sent));
            json_object_set(meta, "labels", p->labels);
        }
        json_t *body = json_pack("{s:o}", "metadata", meta);
        pthread_mutex_unlock(&p->lock);
        struct gv_error err;
        gv_status st = body ? gv_kube_patch(p->kube, p->path, GV_KUBE_PATCH_MERGE, body, NULL, &err)
                            : gv_error_set(&err, GV_ENOMEM, "out of memory");
        json_decref(body);
        pthread_mutex_lock(&p->lock);
        if (st == GV_OK) {
            if (sent) {
                free(p->published);
                p->published = sent;
                sent = NULL;
                p->writes++;
                gv_info("published the GPU inventory on %s", p->path);
            }
            if (backoff)
                gv_info("API server reachable again: node annotations up to date");
            backoff = 0;
            next_beat = gv_loop_now_ms() + p->heartbeat_ms;
        } else {
            backoff = backoff ? (backoff * 2 > 30000 ? 30000 : backoff * 2) : 500;
            gv_warn("cannot update %s (retrying in %lld ms): %s", p->path, (long long)backoff,
                    err.msg);
            struct timespec ts;
            gv_loop_abstime(&ts, backoff);
            while (!p->quit && pthread_cond_timedwait(&p->cond, &p->lock, &ts) == 0)
                ;
        }
        free(sent);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

gv_status gv_publisher_new(struct gv_kube_client *kube, const char *node, int64_t heartbeat_ms,
                           struct gv_publisher **out, struct gv_error *err)
{
    struct gv_publisher *p = calloc(1, sizeof(*p));
    if (p == NULL || asprintf(&p->path, "/api/v1/nodes/%s", node) < 0) {
        free(p);
        return gv_error_set(err, GV_ENOMEM, "publisher: out of memory");
    }
    p->kube = kube;
    p->heartbeat_ms = heartbeat_ms > 0 ? heartbeat_ms : 30000;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    if (pthread_create(&p->thread, NULL, publisher_main, p) != 0) {
        gv_publisher_free(p);
        return gv_error_set(err, GV_EINTERNAL, "publisher: cannot start thread");
    }
    p->running = true;
    *out = p;
    return GV_OK;
}

void gv_publisher_free(struct gv_publisher *p)
{
    if (p == NULL)
        return;
    if (p->running) {
        pthread_mutex_lock(&p->lock);
        p->quit = true;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->thread, NULL);
    }
    free(p->want);
    free(p->published);
    json_decref(p->labels);
    free(p->path);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

gv_status gv_publisher_update(struct gv_publisher *p, const struct gv_inventory *inv,
                              struct gv_error *err)
{
    char *text;
    if (gv_inventory_encode(inv, &text, err) != GV_OK)
        return err ? err->code : GV_EINVAL;
    json_t *labels = gv_publisher_labels(inv);
    if (labels == NULL) {
        free(text);
        return gv_error_set(err, GV_ENOMEM, "publisher: out of memory");
    }
    pthread_mutex_lock(&p->lock);
    bool same = p->want && strcmp(p->want, text) == 0;
    if (same) {
        free(text);
        json_decref(labels);
    } else {
        free(p->want);
        json_decref(p->labels);
        p->want = text;
        p->labels = labels;
        pthread_cond_broadcast(&p->cond);
    }
    pthread_mutex_unlock(&p->lock);
    return GV_OK;
}

uint64_t gv_publisher_writes(struct gv_publisher *p)
{
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->writes;
    pthread_mutex_unlock(&p->lock);
    return n;
}
