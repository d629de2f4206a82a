/*
 * A first-come, first-served queue for the transport's connection slots
 * (kube_http.h, "Connection slots").
 *
 * Why a queue: the scheduler's binds arrive in bursts of hundreds (kube-
 * scheduler binds each pod in a goroutine of its own) while the API server
 * is served best by a few dozen kept-alive connections.  A condition
 * variable shared by all waiters wakes an arbitrary one per freed slot, so
 * an unlucky request could wait without bound; the transport then let it
 * open a connection of its own after 2 s, and in a burst of 1,000 binds
 * hundreds did: each a TCP + TLS handshake the API server paid for with the
 * CPU the binds needed.  Here each waiter has its own condition variable in
 * a FIFO list and a freed slot is handed to the oldest waiter directly (one
 * wake-up per slot, no thundering herd, no overtaking by a newcomer), and a
 * waiter gives up only at its request's own deadline.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "kube/kube_http.h"

struct gv_slot_waiter {
    pthread_cond_t cond;
    bool granted;
    struct gv_slot_waiter *next;
};

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void gv_slots_init(struct gv_slots *q, int max)
{
    pthread_mutex_init(&q->mu, NULL);
    q->max = max > 0 ? max : 1;
    q->busy = 0;
    q->head = q->tail = NULL;
    q->waiting = 0;
    q->stats = (struct gv_slots_stats){0};
}

void gv_slots_destroy(struct gv_slots *q)
{
    pthread_mutex_destroy(&q->mu);
}

/* Unlinks w, which is in the queue (a waiter that timed out). */
static void unlink_waiter(struct gv_slots *q, struct gv_slot_waiter *w)
{
    struct gv_slot_waiter **pp = &q->head, *prev = NULL;
    while (*pp != NULL && *pp != w) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == NULL)
        return;
    *pp = w->next;
    if (q->tail == w)
        q->tail = prev;
}

bool gv_slots_take(struct gv_slots *q, int64_t deadline_ms)
{
    pthread_mutex_lock(&q->mu);
    q->stats.taken++;
    if (q->busy < q->max && q->head == NULL) {
        q->busy++;
        pthread_mutex_unlock(&q->mu);
        return true;
    }
    struct gv_slot_waiter w = {.granted = false, .next = NULL};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cond, &ca);
    pthread_condattr_destroy(&ca);
    if (q->tail != NULL)
        q->tail->next = &w;
    else
        q->head = &w;
    q->tail = &w;
    q->waiting++;
    q->stats.queued++;
    if ((uint64_t)q->waiting > q->stats.most_waiting)
        q->stats.most_waiting = (uint64_t)q->waiting;
    int64_t t0 = mono_us();
    struct timespec until = {.tv_sec = deadline_ms / 1000,
                             .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
    while (!w.granted) {
        int rc = deadline_ms > 0 ? pthread_cond_timedwait(&w.cond, &q->mu, &until)
                                 : pthread_cond_wait(&w.cond, &q->mu);
        if (rc == ETIMEDOUT && !w.granted) {
            unlink_waiter(q, &w);
            q->stats.timed_out++;
            break;
        }
    }
    q->waiting--;
    q->stats.wait_us += (uint64_t)(mono_us() - t0);
    bool ok = w.granted;
    pthread_mutex_unlock(&q->mu);
    pthread_cond_destroy(&w.cond);
    return ok;
}

void gv_slots_give(struct gv_slots *q)
{
    pthread_mutex_lock(&q->mu);
    struct gv_slot_waiter *w = q->head;
    if (w != NULL) {
        /* The slot passes to the oldest waiter: busy stays as it is. */
        q->head = w->next;
        if (q->head == NULL)
            q->tail = NULL;
        w->granted = true;
        pthread_cond_signal(&w->cond);
    } else if (q->busy > 0) {
        q->busy--;
    }
    pthread_mutex_unlock(&q->mu);
}

void gv_slots_get_stats(struct gv_slots *q, struct gv_slots_stats *out, int *busy, int *waiting)
{
    pthread_mutex_lock(&q->mu);
    *out = q->stats;
    if (busy != NULL)
        *busy = q->busy;
    if (waiting != NULL)
        *waiting = q->waiting;
    pthread_mutex_unlock(&q->mu);
}
