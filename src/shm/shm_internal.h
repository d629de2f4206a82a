/*
 * Private to the shared region's own files: gv_shm.c (slots, limits,
 * accounting), lock.c (the robust region lock) and open.c (creating,
 * validating and mapping a region) share the handle and these helpers.
 */
#ifndef GV_SHM_INTERNAL_H
#define GV_SHM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "shm/gv_shm.h"

/* What this process derived from its own configuration for one device. */
struct trusted_dev {
    bool set;
    uint64_t limit; /* 0 = unlimited */
    uint64_t share; /* 0 = none */
    uint32_t flags;
};

struct gv_shm {
    struct gv_shm_region *r;
    int fd;
    bool readonly;
    int slot;      /* this process's slot, -1 before attach */
    int32_t pid;   /* the pid the slot was taken for */
    uint64_t start;
    char *path;    /* NULL for a private region */
    dev_t st_dev;  /* the inode this process mapped */
    ino_t st_ino;
    int lock_timeout_ms;
    bool ctx_held;
    _Atomic bool gone;          /* the path no longer names our region (sticky) */
    _Atomic int64_t checked_ms; /* when that was last looked up */
    char lock_error[192];
    /*
     * Private truth, never read from the region: the limits this process
     * was configured with, and what it has charged itself.  Changed only
     * under the region lock (which also serialises this process's threads).
     */
    struct trusted_dev trusted[GV_SHM_MAX_DEVICES];
    uint64_t held[GV_SHM_MAX_DEVICES];
    uint64_t held_managed[GV_SHM_MAX_DEVICES];
    uint64_t peak[GV_SHM_MAX_DEVICES]; /* the most held at once */
};

/* gv_shm.c */
void recompute_totals(struct gv_shm_region *r);
uint64_t shm_now_ns(void);
void crash_point(int step);
void clear_slot(struct gv_shm_proc *p);

/* lock.c */
int region_lock(struct gv_shm *shm);
void region_unlock(struct gv_shm *shm);
void deadline_in(struct timespec *ts, int ms);

#endif
