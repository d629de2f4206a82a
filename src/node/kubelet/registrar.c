/* Kubelet registration and restart detection: see gv_registrar.h. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "node/kubelet/gv_grpc.h"
#include "node/kubelet/gv_registrar.h"

/* Backstop for what inotify cannot see (the directory itself recreated). */
#define RECHECK_MS 10000
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 5000
#define REGISTER_TIMEOUT_MS 5000

struct gv_registrar {
    struct gv_loop *loop;
    struct gv_plugin *plugin;
    char *dir, *kubelet_path, *endpoint, *resource;
    int ino_fd, ino_wd;
    int cancel_fd; /* eventfd: a kick aborts the Register call in flight */
    uint64_t recheck_timer;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool pending, quit;
    uint64_t count;
};

gv_status gv_registrar_register_once(const char *kubelet_socket_path, const char *endpoint,
                                     const char *resource_name, int timeout_ms, int cancel_fd,
                                     struct gv_error *err)
{
    V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
    V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    opts.get_preferred_allocation_available = true;
    req.version = "v1beta1";
    req.endpoint = (char *)endpoint;
    req.resource_name = (char *)resource_name;
    req.options = &opts;
    size_t len = v1beta1__register_request__get_packed_size(&req);
    uint8_t buf[1024];
    if (len > sizeof(buf))
        return gv_error_set(err, GV_EINVAL, "register: endpoint/resource name too long");
    v1beta1__register_request__pack(&req, buf);
    struct gv_grpc_reply reply;
    gv_status st = gv_grpc_client_unary(kubelet_socket_path, "/v1beta1.Registration/Register",
                                        buf, len, timeout_ms, cancel_fd, &reply, err);
    if (st != GV_OK)
        return st;
    if (reply.status != GV_GRPC_OK)
        st = gv_error_set(err, GV_EUNAVAILABLE, "kubelet refused registration of %s: %s: %s",
                          resource_name, gv_grpc_status_name(reply.status),
                          reply.message ? reply.message : "");
    gv_grpc_reply_clear(&reply);
    return st;
}

static void *registrar_main(void *arg)
{
    struct gv_registrar *r = arg;
    int64_t backoff = BACKOFF_MIN_MS;
    unsigned failures = 0;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->pending && !r->quit)
            pthread_cond_wait(&r->cond, &r->lock);
        if (r->quit)
            break;
        r->pending = false;
        uint64_t drained;
        while (read(r->cancel_fd, &drained, sizeof(drained)) > 0)
            ;
        pthread_mutex_unlock(&r->lock);
        struct gv_error err;
        /* A kick while this runs (kubelet.sock recreated) cancels it: it talks to a dead kubelet. */
        gv_status st = gv_registrar_register_once(r->kubelet_path, r->endpoint, r->resource,
                                                  REGISTER_TIMEOUT_MS, r->cancel_fd, &err);
        pthread_mutex_lock(&r->lock);
        if (st == GV_OK) {
            r->count++;
            gv_info("registered %s with the kubelet (%s) after %u failed attempt(s)",
                    r->resource, r->endpoint, failures);
            backoff = BACKOFF_MIN_MS;
            failures = 0;
            continue;
        }
        /* A kubelet that is not up yet is normal: say so once, then quietly retry. */
        if (failures++ == 0)
            gv_warn("registration failed, retrying (backoff up to %d ms): %s", BACKOFF_MAX_MS,
                    err.msg);
        else
            gv_debug("registration attempt %u failed: %s", failures, err.msg);
        /* Retry after the backoff unless a newer request or stop arrives first. */
        struct timespec ts;
        gv_loop_abstime(&ts, backoff);
        while (!r->pending && !r->quit)
            if (pthread_cond_timedwait(&r->cond, &r->lock, &ts) == ETIMEDOUT)
                break;
        r->pending = true;
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

void gv_registrar_kick(struct gv_registrar *r)
{
    pthread_mutex_lock(&r->lock);
    r->pending = true;
    uint64_t one = 1;
    ssize_t w = write(r->cancel_fd, &one, sizeof(one));
    (void)w;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

uint64_t gv_registrar_count(struct gv_registrar *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t n = r->count;
    pthread_mutex_unlock(&r->lock);
    return n;
}

static void add_watch(struct gv_registrar *r)
{
    if (r->ino_wd >= 0)
        return;
    r->ino_wd = inotify_add_watch(r->ino_fd, r->dir,
                                  IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                      IN_DELETE_SELF | IN_MOVE_SELF);
    if (r->ino_wd < 0)
        gv_warn("cannot watch %s: %s (retrying every %d s)", r->dir, strerror(errno),
                RECHECK_MS / 1000);
}

/* Our socket gone means the kubelet restarted (or someone cleaned up): start over. */
static void check_socket(struct gv_registrar *r, bool kubelet_appeared)
{
    if (gv_plugin_stopping(r->plugin))
        return; /* our own shutdown removed it */
    if (!gv_plugin_socket_present(r->plugin)) {
        struct gv_error err;
        if (gv_plugin_listen(r->plugin, &err) != GV_OK) {
            gv_error("cannot recreate the plugin socket: %s", err.msg);
            return;
        }
        gv_info("plugin socket was removed (kubelet restart?): recreated, re-registering");
        gv_registrar_kick(r);
    } else if (kubelet_appeared) {
        gv_info("kubelet socket appeared: re-registering");
        gv_registrar_kick(r);
    }
}

static void on_inotify(struct gv_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)loop;
    (void)events;
    struct gv_registrar *r = ud;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool kubelet_appeared = false;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF))
                r->ino_wd = -1; /* the directory went away: the recheck timer re-adds it */
            if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && ev->len &&
                strcmp(ev->name, strrchr(r->kubelet_path, '/') + 1) == 0)
                kubelet_appeared = true;
            p += sizeof(*ev) + ev->len;
        }
    }
    check_socket(r, kubelet_appeared);
}

static void recheck(struct gv_loop *loop, void *ud)
{
    struct gv_registrar *r = ud;
    bool rewatched = r->ino_wd < 0;
    add_watch(r);
    check_socket(r, rewatched && r->ino_wd >= 0);
    r->recheck_timer = gv_loop_timer(loop, RECHECK_MS, recheck, r);
}

static char *join(const char *dir, const char *name)
{
    char *s = NULL;
    if (asprintf(&s, "%s/%s", dir, name) < 0)
        return NULL;
    return s;
}

gv_status gv_registrar_new(struct gv_loop *loop, struct gv_plugin *plugin,
                           const struct gv_registrar_config *cfg, struct gv_registrar **out,
                           struct gv_error *err)
{
    struct gv_registrar *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return gv_error_set(err, GV_ENOMEM, "registrar: out of memory");
    r->loop = loop;
    r->plugin = plugin;
    r->ino_fd = r->ino_wd = -1;
    r->cancel_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->dir = strdup(cfg->plugin_dir);
    r->kubelet_path = join(cfg->plugin_dir, cfg->kubelet_socket);
    r->endpoint = strdup(cfg->endpoint);
    r->resource = strdup(cfg->resource_name);
    if (!r->dir || !r->kubelet_path || !r->endpoint || !r->resource || r->cancel_fd < 0) {
        gv_error_set(err, GV_ENOMEM, "registrar: out of memory");
        goto fail;
    }
    r->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (r->ino_fd < 0) {
        gv_error_set(err, GV_EIO, "registrar: inotify: %s", strerror(errno));
        goto fail;
    }
    add_watch(r);
    if (gv_loop_add_fd(loop, r->ino_fd, EPOLLIN, on_inotify, r, err) != GV_OK)
        goto fail;
    if (pthread_create(&r->thread, NULL, registrar_main, r) != 0) {
        gv_error_set(err, GV_EINTERNAL, "registrar: cannot start thread");
        goto fail;
    }
    r->thread_started = true;
    r->recheck_timer = gv_loop_timer(loop, RECHECK_MS, recheck, r);
    gv_registrar_kick(r);
    *out = r;
    return GV_OK;
fail:
    gv_registrar_free(r);
    return err ? err->code : GV_EINTERNAL;
}

void gv_registrar_free(struct gv_registrar *r)
{
    if (r == NULL)
        return;
    if (r->thread_started) {
        pthread_mutex_lock(&r->lock);
        r->quit = true;
        uint64_t one = 1;
        ssize_t w = write(r->cancel_fd, &one, sizeof(one));
        (void)w;
        pthread_cond_signal(&r->cond);
        pthread_mutex_unlock(&r->lock);
        pthread_join(r->thread, NULL);
    }
    if (r->recheck_timer)
        gv_loop_timer_cancel(r->loop, r->recheck_timer);
    if (r->ino_fd >= 0) {
        gv_loop_del_fd(r->loop, r->ino_fd);
        close(r->ino_fd);
    }
    if (r->cancel_fd >= 0)
        close(r->cancel_fd);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cond);
    free(r->dir);
    free(r->kubelet_path);
    free(r->endpoint);
    free(r->resource);
    free(r);
}
