/*
 * A small epoll event loop for gpuvisor-node.
 *
 * One thread owns the loop and runs every fd callback and timer; other
 * threads (Allocate workers, the health watcher, the registrar) hand work to
 * it with gv_loop_post(), which is the only thread-safe entry point.  The
 * loop sleeps in epoll_wait until an fd, a timer or a post wakes it, so an
 * idle agent uses no CPU.
 */
#ifndef GV_NODE_LOOP_H
#define GV_NODE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "common/gv_error.h"

struct gv_loop;

/* events: EPOLLIN/EPOLLOUT bits as reported by epoll. */
typedef void (*gv_loop_fd_cb)(struct gv_loop *loop, int fd, uint32_t events, void *ud);
typedef void (*gv_loop_fn)(struct gv_loop *loop, void *ud);

gv_status gv_loop_new(struct gv_loop **out, struct gv_error *err);
/* Drops pending posts and timers without running them; fds stay open. */
void gv_loop_free(struct gv_loop *loop);

gv_status gv_loop_add_fd(struct gv_loop *loop, int fd, uint32_t events, gv_loop_fd_cb cb, void *ud,
                         struct gv_error *err);
gv_status gv_loop_mod_fd(struct gv_loop *loop, int fd, uint32_t events, struct gv_error *err);
/* Safe to call from within the fd's own callback. */
void gv_loop_del_fd(struct gv_loop *loop, int fd);

/* One-shot timer after ms milliseconds; returns an id for cancel (never 0). */
uint64_t gv_loop_timer(struct gv_loop *loop, int64_t ms, gv_loop_fn fn, void *ud);
void gv_loop_timer_cancel(struct gv_loop *loop, uint64_t id);

/* Thread-safe: runs fn(ud) on the loop thread soon.  Returns false on ENOMEM. */
bool gv_loop_post(struct gv_loop *loop, gv_loop_fn fn, void *ud);

/* Runs until gv_loop_stop(); returns GV_OK or the epoll error. */
gv_status gv_loop_run(struct gv_loop *loop, struct gv_error *err);
/* Thread-safe. */
void gv_loop_stop(struct gv_loop *loop);
/* One round: waits up to timeout_ms for events, runs them and due timers (tests, fuzzing). */
gv_status gv_loop_run_once(struct gv_loop *loop, int timeout_ms, struct gv_error *err);

/* Monotonic milliseconds / microseconds. */
int64_t gv_loop_now_ms(void);
int64_t gv_loop_now_us(void);

struct timespec;
/* CLOCK_REALTIME time ms from now, for pthread_cond_timedwait. */
void gv_loop_abstime(struct timespec *ts, int64_t ms);

#endif
