/* epoll event loop: see gv_loop.h. */
#include "node/loop/gv_loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct watch {
    int fd;
    gv_loop_fd_cb cb;
    void *ud;
    bool dead;
    struct watch *next;
};

struct timer {
    uint64_t id;
    int64_t due;
    gv_loop_fn fn;
    void *ud;
    struct timer *next;
};

struct post {
    gv_loop_fn fn;
    void *ud;
    struct post *next;
};

struct gv_loop {
    int epfd;
    int wakefd;
    struct watch *watches;
    struct timer *timers; /* sorted by due time */
    uint64_t next_timer_id;
    pthread_mutex_t lock; /* guards posts and stop */
    struct post *posts, *posts_tail;
    bool stop;
};

int64_t gv_loop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t gv_loop_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void gv_loop_abstime(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static void wake(struct gv_loop *loop)
{
    uint64_t one = 1;
    /* EAGAIN means the counter is already non-zero: the loop will wake. */
    ssize_t r = write(loop->wakefd, &one, sizeof(one));
    (void)r;
}

gv_status gv_loop_new(struct gv_loop **out, struct gv_error *err)
{
    struct gv_loop *loop = calloc(1, sizeof(*loop));
    if (loop == NULL)
        return gv_error_set(err, GV_ENOMEM, "event loop: out of memory");
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&loop->lock, NULL);
    loop->next_timer_id = 1;
    if (loop->epfd < 0 || loop->wakefd < 0) {
        gv_error_set(err, GV_EIO, "event loop: %s", strerror(errno));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wakefd, &ev) != 0) {
        gv_error_set(err, GV_EIO, "event loop: epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    *out = loop;
    return GV_OK;
fail:
    gv_loop_free(loop);
    return err ? err->code : GV_EIO;
}

void gv_loop_free(struct gv_loop *loop)
{
    if (loop == NULL)
        return;
    while (loop->watches) {
        struct watch *w = loop->watches;
        loop->watches = w->next;
        free(w);
    }
    while (loop->timers) {
        struct timer *t = loop->timers;
        loop->timers = t->next;
        free(t);
    }
    while (loop->posts) {
        struct post *p = loop->posts;
        loop->posts = p->next;
        free(p);
    }
    if (loop->epfd >= 0)
        close(loop->epfd);
    if (loop->wakefd >= 0)
        close(loop->wakefd);
    pthread_mutex_destroy(&loop->lock);
    free(loop);
}

gv_status gv_loop_add_fd(struct gv_loop *loop, int fd, uint32_t events, gv_loop_fd_cb cb, void *ud,
                         struct gv_error *err)
{
    struct watch *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return gv_error_set(err, GV_ENOMEM, "event loop: out of memory");
    w->fd = fd;
    w->cb = cb;
    w->ud = ud;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        free(w);
        return gv_error_set(err, GV_EIO, "event loop: watch fd %d: %s", fd, strerror(e));
    }
    w->next = loop->watches;
    loop->watches = w;
    return GV_OK;
}

static struct watch *find_watch(struct gv_loop *loop, int fd)
{
    for (struct watch *w = loop->watches; w; w = w->next)
        if (w->fd == fd && !w->dead)
            return w;
    return NULL;
}

gv_status gv_loop_mod_fd(struct gv_loop *loop, int fd, uint32_t events, struct gv_error *err)
{
    struct watch *w = find_watch(loop, fd);
    if (w == NULL)
        return gv_error_set(err, GV_ENOTFOUND, "event loop: fd %d is not watched", fd);
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
        return gv_error_set(err, GV_EIO, "event loop: modify fd %d: %s", fd, strerror(errno));
    return GV_OK;
}

void gv_loop_del_fd(struct gv_loop *loop, int fd)
{
    struct watch *w = find_watch(loop, fd);
    if (w == NULL)
        return;
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    /* Freed after the current epoll batch: a pending event may still point at it. */
    w->dead = true;
}

static void reap_watches(struct gv_loop *loop)
{
    struct watch **pp = &loop->watches;
    while (*pp) {
        struct watch *w = *pp;
        if (w->dead) {
            *pp = w->next;
            free(w);
        } else {
            pp = &w->next;
        }
    }
}

uint64_t gv_loop_timer(struct gv_loop *loop, int64_t ms, gv_loop_fn fn, void *ud)
{
    struct timer *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return 0;
    t->id = loop->next_timer_id++;
    t->due = gv_loop_now_ms() + (ms < 0 ? 0 : ms);
    t->fn = fn;
    t->ud = ud;
    struct timer **pp = &loop->timers;
    while (*pp && (*pp)->due <= t->due)
        pp = &(*pp)->next;
    t->next = *pp;
    *pp = t;
    return t->id;
}

void gv_loop_timer_cancel(struct gv_loop *loop, uint64_t id)
{
    for (struct timer **pp = &loop->timers; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            struct timer *t = *pp;
            *pp = t->next;
            free(t);
            return;
        }
    }
}

bool gv_loop_post(struct gv_loop *loop, gv_loop_fn fn, void *ud)
{
    struct post *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return false;
    p->fn = fn;
    p->ud = ud;
    pthread_mutex_lock(&loop->lock);
    if (loop->posts_tail)
        loop->posts_tail->next = p;
    else
        loop->posts = p;
    loop->posts_tail = p;
    pthread_mutex_unlock(&loop->lock);
    wake(loop);
    return true;
}

void gv_loop_stop(struct gv_loop *loop)
{
    pthread_mutex_lock(&loop->lock);
    loop->stop = true;
    pthread_mutex_unlock(&loop->lock);
    wake(loop);
}

static void run_posts(struct gv_loop *loop)
{
    uint64_t n;
    ssize_t r = read(loop->wakefd, &n, sizeof(n));
    (void)r;
    pthread_mutex_lock(&loop->lock);
    struct post *p = loop->posts;
    loop->posts = loop->posts_tail = NULL;
    pthread_mutex_unlock(&loop->lock);
    while (p) {
        struct post *next = p->next;
        p->fn(loop, p->ud);
        free(p);
        p = next;
    }
}

static void run_timers(struct gv_loop *loop)
{
    int64_t now = gv_loop_now_ms();
    while (loop->timers && loop->timers->due <= now) {
        struct timer *t = loop->timers;
        loop->timers = t->next;
        t->fn(loop, t->ud);
        free(t);
    }
}

static bool stopping(struct gv_loop *loop)
{
    pthread_mutex_lock(&loop->lock);
    bool s = loop->stop;
    pthread_mutex_unlock(&loop->lock);
    return s;
}

/* Waits for and runs one batch; max_wait_ms < 0: until the next timer. */
static gv_status run_batch(struct gv_loop *loop, int max_wait_ms, struct gv_error *err)
{
    struct epoll_event evs[32];
    int timeout = max_wait_ms;
    if (loop->timers) {
        int64_t d = loop->timers->due - gv_loop_now_ms();
        int t = d < 0 ? 0 : (d > 3600000 ? 3600000 : (int)d);
        if (timeout < 0 || t < timeout)
            timeout = t;
    }
    int n = epoll_wait(loop->epfd, evs, 32, timeout);
    if (n < 0) {
        if (errno == EINTR)
            return GV_OK;
        return gv_error_set(err, GV_EIO, "event loop: epoll_wait: %s", strerror(errno));
    }
    for (int i = 0; i < n; i++) {
        struct watch *w = evs[i].data.ptr;
        if (w == NULL)
            run_posts(loop);
        else if (!w->dead)
            w->cb(loop, w->fd, evs[i].events, w->ud);
    }
    reap_watches(loop);
    run_timers(loop);
    return GV_OK;
}

gv_status gv_loop_run_once(struct gv_loop *loop, int timeout_ms, struct gv_error *err)
{
    return run_batch(loop, timeout_ms < 0 ? 0 : timeout_ms, err);
}

gv_status gv_loop_run(struct gv_loop *loop, struct gv_error *err)
{
    while (!stopping(loop)) {
        gv_status st = run_batch(loop, -1, err);
        if (st != GV_OK)
            return st;
    }
    pthread_mutex_lock(&loop->lock);
    loop->stop = false;
    pthread_mutex_unlock(&loop->lock);
    return GV_OK;
}
