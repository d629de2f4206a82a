/*
 * The region lock: a futex word in the shared region that survives its
 * holder's death (the owner's tid is stored, a dead owner's lock is taken
 * over), with a timeout so no process can hang the others.
 *
 * Nothing here may call exit/abort or print: this code runs inside
 * arbitrary applications through libgpuvisor.so.
 */
#include "shm/gv_shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm/shm_internal.h"

/* This thread's id, cached (gettid is a system call); reset in a forked child. */
static _Thread_local uint32_t cached_tid;
static pthread_once_t tid_once = PTHREAD_ONCE_INIT;
static void forget_tid(void) { cached_tid = 0; }
static void tid_atfork(void) { pthread_atfork(NULL, NULL, forget_tid); }

static uint32_t my_tid(void)
{
    if (cached_tid == 0) {
        pthread_once(&tid_once, tid_atfork);
        cached_tid = (uint32_t)gettid() & GV_SHM_LOCK_TID_MASK;
    }
    return cached_tid;
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Nanoseconds from now until ts (0 when past). */
static int64_t ns_until(const struct timespec *ts)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t d = (int64_t)(ts->tv_sec - now.tv_sec) * 1000000000LL + (ts->tv_nsec - now.tv_nsec);
    return d > 0 ? d : 0;
}

/*
 * Whether the lock word names no live owner other than us: no thread, bits
 * no thread id has, our own thread (we never lock recursively, so that was
 * written by someone else), or a thread that does not exist.
 */
static bool owner_gone(uint32_t owner, uint32_t me)
{
    if (owner == 0 || owner > GV_SHM_LOCK_TID_MASK || owner == me)
        return true;
    return kill((pid_t)owner, 0) != 0 && errno == ESRCH;
}

/*
 * Takes the region lock within the lock timeout.  The word holds the owner's
 * thread id (and GV_SHM_LOCK_WAITERS while someone sleeps on it).  A waiter
 * that slept a full slice without being woken checks the owner: one that
 * died (killed inside the lock) or that is not a thread at all (a corrupted
 * word) is taken over, and the totals it may have left half-updated are
 * recomputed from the slots.  A live owner that keeps the lock past the
 * timeout (stopped, or hostile) makes the call fail closed, with the reason
 * in shm->lock_error.  Never waits unboundedly, never trusts the word.
 */
int region_lock(struct gv_shm *shm)
{
    _Atomic uint32_t *w = &shm->r->lock.word;
    uint32_t me = my_tid();
    struct timespec dl;
    deadline_in(&dl, shm->lock_timeout_ms);
    bool contended = false, slept_long = false;
    for (;;) {
        uint32_t cur = 0;
        /* After sleeping, take it as "contended" so our unlock wakes the next. */
        if (atomic_compare_exchange_strong(w, &cur, contended ? me | GV_SHM_LOCK_WAITERS : me)) {
            shm->lock_error[0] = '\0';
            return 0;
        }
        uint32_t owner = cur & ~GV_SHM_LOCK_WAITERS;
        bool suspect = owner == 0 || owner > GV_SHM_LOCK_TID_MASK || owner == me;
        if ((suspect || slept_long) && owner_gone(owner, me)) {
            if (atomic_compare_exchange_strong(w, &cur, me | GV_SHM_LOCK_WAITERS)) {
                /* The previous holder died mid-update: totals may be stale. */
                recompute_totals(shm->r);
                shm->lock_error[0] = '\0';
                return 0;
            }
            continue;
        }
        int64_t left = ns_until(&dl);
        if (left == 0) {
            snprintf(shm->lock_error, sizeof(shm->lock_error),
                     "shared region lock held by live thread %u for more than %d ms", owner,
                     shm->lock_timeout_ms);
            return ETIMEDOUT;
        }
        if (!(cur & GV_SHM_LOCK_WAITERS) &&
            !atomic_compare_exchange_strong(w, &cur, cur | GV_SHM_LOCK_WAITERS))
            continue;
        contended = true;
        /* Sleep in slices: a holder that dies cannot wake us. */
        int64_t slice = left < 10000000LL ? left : 10000000LL;
        struct timespec rel = {0, (long)slice};
        slept_long = futex(w, FUTEX_WAIT, cur | GV_SHM_LOCK_WAITERS, &rel) != 0 &&
                     errno == ETIMEDOUT;
    }
}

void region_unlock(struct gv_shm *shm)
{
    _Atomic uint32_t *w = &shm->r->lock.word;
    if (atomic_exchange(w, 0) & GV_SHM_LOCK_WAITERS)
        futex(w, FUTEX_WAKE, 1, NULL);
}

void gv_shm_set_lock_timeout(struct gv_shm *shm, int ms)
{
    if (shm != NULL)
        shm->lock_timeout_ms = ms > 0 ? ms : GV_SHM_LOCK_TIMEOUT_MS;
}

const char *gv_shm_lock_error(const struct gv_shm *shm) { return shm->lock_error; }
