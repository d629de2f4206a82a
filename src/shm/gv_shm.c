/*
 * Shared region: slots, limits, accounting (creation and validation: open.c;
 * the robust lock: lock.c).
 * See gv_shm.h for the model and docs/shared-region.md for the layout.
 *
 * Nothing here may call exit/abort or print: this code runs inside
 * arbitrary applications through libgpuvisor.so.
 */
#include "shm/gv_shm.h"

/* F_OFD_SETLK and gettid need _GNU_SOURCE (set by the build). */
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

void (*gv_shm_crash_hook)(int step);

void crash_point(int step)
{
    if (gv_shm_crash_hook != NULL)
        gv_shm_crash_hook(step);
}

uint64_t shm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Reads state and starttime (field 22) of /proc/<pid>/stat.  Returns false
 * when the file cannot be read (no /proc, other namespace).
 */
static bool proc_stat(int32_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* comm may contain spaces and parentheses: fields restart after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return false;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return false;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return true;
}

bool gv_shm_proc_alive(const struct gv_shm_proc *p)
{
    int32_t pid = atomic_load(&p->pid);
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char state;
    uint64_t start;
    if (proc_stat(pid, &state, &start)) {
        if (state == 'Z' || state == 'X')
            return false;
        if (p->start_time != 0 && start != p->start_time)
            return false; /* the pid was reused by another process */
    }
    return true;
}

/*
 * How many slots to scan: those up to the high-water mark that attaching
 * processes raise (slots are taken lowest first).  A mark lowered by a
 * hostile write hides only slots beyond it, as zeroing them would; a
 * process rewrites its own mark (own_slot_locked), so it is never hidden.
 */
static int scan_limit(const struct gv_shm_region *r)
{
    uint32_t hw = atomic_load(&r->slots_hw);
    return hw < GV_SHM_MAX_PROCS ? (int)hw : GV_SHM_MAX_PROCS;
}

/* Raises the high-water mark to cover slot i. */
static void cover_slot(struct gv_shm_region *r, int i)
{
    if (atomic_load(&r->slots_hw) < (uint32_t)i + 1)
        atomic_store(&r->slots_hw, (uint32_t)i + 1);
}

/*
 * Sums device d over the slots in use (the truth), with each slot's managed
 * part clamped to its total: a slot edited to claim more managed than it
 * holds must not make device-resident room appear.
 */
static void sum_slots(const struct gv_shm_region *r, uint32_t d, uint64_t *used, uint64_t *managed)
{
    uint64_t sum = 0, man = 0;
    for (int i = 0; i < scan_limit(r); i++) {
        if (atomic_load(&r->procs[i].pid) == 0)
            continue;
        uint64_t u = atomic_load(&r->procs[i].mem_used[d]);
        uint64_t m = atomic_load(&r->procs[i].managed_used[d]);
        sum = u > UINT64_MAX - sum ? UINT64_MAX : sum + u;
        man += m < u ? m : u;
    }
    *used = sum;
    *managed = man;
}

/* Recomputes device d's cached totals from the slots (the truth). */
static void recompute_device(struct gv_shm_region *r, uint32_t d)
{
    uint64_t sum, managed;
    sum_slots(r, d, &sum, &managed);
    atomic_store(&r->devices[d].mem_used, sum);
    atomic_store(&r->devices[d].mem_managed, managed);
}

/* Recomputes every device's cached totals. */
void recompute_totals(struct gv_shm_region *r)
{
    uint32_t nd = atomic_load(&r->ndevices);
    for (uint32_t d = 0; d < nd && d < GV_SHM_MAX_DEVICES; d++)
        recompute_device(r, d);
}


void clear_slot(struct gv_shm_proc *p)
{
    for (int d = 0; d < GV_SHM_MAX_DEVICES; d++) {
        atomic_store(&p->mem_used[d], 0);
        atomic_store(&p->managed_used[d], 0);
        atomic_store(&p->util[d], 0);
    }
    memset(p->sched, 0, sizeof(p->sched));
    p->hostpid = 0;
    p->start_time = 0;
    p->priority = 0;
    p->flags = 0;
    atomic_store(&p->heartbeat_ns, 0);
}

static int reclaim_locked(struct gv_shm *shm)
{
    int freed = 0;
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
        struct gv_shm_proc *p = &shm->r->procs[i];
        int32_t pid = atomic_load(&p->pid);
        if (pid == 0 || i == shm->slot || (shm->pid != 0 && pid == shm->pid) ||
            gv_shm_proc_alive(p))
            continue;
        clear_slot(p);
        atomic_store(&p->pid, 0);
        freed++;
    }
    if (freed > 0)
        recompute_totals(shm->r);
    return freed;
}

int gv_shm_reclaim(struct gv_shm *shm)
{
    if (shm == NULL || shm->readonly || region_lock(shm) != 0)
        return 0;
    int freed = reclaim_locked(shm);
    region_unlock(shm);
    return freed;
}


const struct gv_shm_region *gv_shm_region(const struct gv_shm *shm) { return shm->r; }

uint8_t *gv_shm_sched_region(struct gv_shm *shm) { return shm->r->sched; }

int gv_shm_device_find(const struct gv_shm *shm, const char *uuid)
{
    uint32_t nd = atomic_load(&shm->r->ndevices);
    for (uint32_t i = 0; i < nd && i < GV_SHM_MAX_DEVICES; i++) {
        if (strncmp(shm->r->devices[i].uuid, uuid, GV_SHM_UUID_LEN) == 0)
            return (int)i;
    }
    return -1;
}

gv_status gv_shm_device_attach(struct gv_shm *shm, const char *uuid,
                               const struct gv_shm_limits *lim, int *idx, struct gv_error *err)
{
    uint64_t share = lim->mem_share != 0 && lim->mem_share < lim->mem_limit ? lim->mem_share : 0;
    if (shm->readonly)
        return gv_error_set(err, GV_EINVAL, "shared region is open read-only");
    if (uuid == NULL || uuid[0] == '\0' || strlen(uuid) >= GV_SHM_UUID_LEN)
        return gv_error_set(err, GV_EINVAL, "invalid device uuid");
    if (region_lock(shm) != 0)
        return gv_error_set(err, GV_EIO, "cannot lock shared region: %s", shm->lock_error);
    gv_status rc = GV_OK;
    int i = gv_shm_device_find(shm, uuid);
    if (i >= 0) {
        struct gv_shm_device *d = &shm->r->devices[i];
        if (d->mem_physical == 0)
            d->mem_physical = lim->mem_physical;
        if (d->mem_limit != lim->mem_limit || d->sm_limit != lim->sm_limit ||
            d->flags != lim->flags || d->mem_share != share)
            rc = gv_error_set(err, GV_ECONFLICT,
                              "device %s: limits already fixed by the first process "
                              "(memory %llu bytes, share %llu, sm %u%%, flags 0x%x); this process "
                              "asked for memory %llu bytes, share %llu, sm %u%%, flags 0x%x: "
                              "keeping the first",
                              uuid, (unsigned long long)d->mem_limit,
                              (unsigned long long)d->mem_share, d->sm_limit, d->flags,
                              (unsigned long long)lim->mem_limit, (unsigned long long)share,
                              lim->sm_limit, lim->flags);
        *idx = i;
        goto trust;
    }
    uint32_t nd = atomic_load(&shm->r->ndevices);
    if (nd >= GV_SHM_MAX_DEVICES) {
        rc = gv_error_set(err, GV_ENOFIT, "shared region already holds %d devices",
                          GV_SHM_MAX_DEVICES);
        goto out;
    }
    struct gv_shm_device *d = &shm->r->devices[nd];
    memset(d, 0, sizeof(*d));
    snprintf(d->uuid, sizeof(d->uuid), "%s", uuid);
    d->mem_limit = lim->mem_limit;
    d->mem_physical = lim->mem_physical;
    d->mem_share = share;
    d->sm_limit = lim->sm_limit;
    d->flags = lim->flags;
    atomic_store(&shm->r->ndevices, nd + 1);
    *idx = (int)nd;
trust:
    shm->trusted[*idx] = (struct trusted_dev){true, lim->mem_limit, share, lim->flags};
out:
    region_unlock(shm);
    return rc;
}

/* The smaller of two limits where 0 means unlimited. */
static uint64_t min_limit(uint64_t a, uint64_t b)
{
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return a < b ? a : b;
}

bool gv_shm_limit(const struct gv_shm *shm, int dev, uint64_t *limit, uint64_t *share,
                  uint32_t *flags)
{
    if (shm == NULL || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return false;
    const struct gv_shm_device *d = &shm->r->devices[dev];
    const struct trusted_dev *t = &shm->trusted[dev];
    /* A process that never registered dev (a reader) goes by the region. */
    uint64_t lim = t->set ? min_limit(t->limit, d->mem_limit) : d->mem_limit;
    uint32_t fl = t->set ? t->flags : d->flags;
    uint64_t sh = 0;
    if (fl & GV_SHM_DEV_OVERSUBSCRIBE)
        sh = t->set ? min_limit(t->share, d->mem_share) : d->mem_share;
    if (limit != NULL)
        *limit = lim;
    if (share != NULL)
        *share = sh;
    if (flags != NULL)
        *flags = fl;
    return dev < (int)atomic_load(&shm->r->ndevices) || t->set;
}

/*
 * This process's slot, checked under the lock: a slot another process
 * freed or took from us (only a hostile write can) is replaced by a new
 * one.  Either way the slot is rewritten from our private record, so what
 * the container sees of us is never less than what we hold.  NULL when no
 * slot is free.
 */
static struct gv_shm_proc *own_slot_locked(struct gv_shm *shm)
{
    struct gv_shm_proc *p = &shm->r->procs[shm->slot];
    if (atomic_load(&p->pid) != shm->pid) {
        p = NULL;
        for (int i = 0; i < GV_SHM_MAX_PROCS && p == NULL; i++) {
            if (atomic_load(&shm->r->procs[i].pid) != 0)
                continue;
            p = &shm->r->procs[i];
            clear_slot(p);
            p->start_time = shm->start;
            atomic_store(&p->pid, shm->pid);
            shm->slot = i;
        }
        if (p == NULL)
            return NULL;
    }
    cover_slot(shm->r, shm->slot);
    for (int d = 0; d < GV_SHM_MAX_DEVICES; d++) {
        if (atomic_load(&p->mem_used[d]) != shm->held[d])
            atomic_store(&p->mem_used[d], shm->held[d]);
        if (atomic_load(&p->managed_used[d]) != shm->held_managed[d])
            atomic_store(&p->managed_used[d], shm->held_managed[d]);
    }
    return p;
}

gv_status gv_shm_proc_attach(struct gv_shm *shm, int32_t pid, int32_t priority,
                             struct gv_error *err)
{
    if (shm->readonly)
        return gv_error_set(err, GV_EINVAL, "shared region is open read-only");
    char state;
    uint64_t start = 0;
    if (!proc_stat(pid, &state, &start))
        start = 0;
    if (region_lock(shm) != 0)
        return gv_error_set(err, GV_EIO, "cannot lock shared region: %s", shm->lock_error);
    gv_status rc = GV_OK;
    if (shm->slot >= 0 && shm->pid == pid && atomic_load(&shm->r->procs[shm->slot].pid) == pid) {
        shm->r->procs[shm->slot].priority = priority;
        goto out;
    }
    /* A new process (or a forked child): nothing held yet. */
    shm->slot = -1;
    shm->pid = pid;
    shm->start = start;
    memset(shm->held, 0, sizeof(shm->held));
    memset(shm->peak, 0, sizeof(shm->peak));
    memset(shm->held_managed, 0, sizeof(shm->held_managed));
    reclaim_locked(shm);
    /* A slot already holding this very process is one it had before an
     * exec: the old image's device memory died with it, so start afresh. */
    int mine = -1;
    for (int i = 0; i < GV_SHM_MAX_PROCS && mine < 0; i++)
        if (atomic_load(&shm->r->procs[i].pid) == pid && shm->r->procs[i].start_time == start)
            mine = i;
    if (mine >= 0) {
        struct gv_shm_proc *p = &shm->r->procs[mine];
        clear_slot(p);
        p->start_time = start;
        p->priority = priority;
        atomic_store(&p->heartbeat_ns, shm_now_ns());
        recompute_totals(shm->r);
        shm->slot = mine;
        cover_slot(shm->r, mine);
        goto out;
    }
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
        struct gv_shm_proc *p = &shm->r->procs[i];
        if (atomic_load(&p->pid) != 0)
            continue;
        clear_slot(p);
        p->start_time = start;
        p->priority = priority;
        atomic_store(&p->heartbeat_ns, shm_now_ns());
        atomic_store(&p->pid, pid);
        shm->slot = i;
        cover_slot(shm->r, i);
        goto out;
    }
    rc = gv_error_set(err, GV_ENOFIT, "all %d process slots of the shared region are in use",
                      GV_SHM_MAX_PROCS);
out:
    region_unlock(shm);
    return rc;
}

void gv_shm_after_fork(struct gv_shm *shm)
{
    if (shm != NULL) {
        shm->slot = -1;
        /* The parent's allocations are not the child's to hold or free. */
        memset(shm->held, 0, sizeof(shm->held));
        memset(shm->peak, 0, sizeof(shm->peak));
        memset(shm->held_managed, 0, sizeof(shm->held_managed));
        /* OFD locks are shared with the parent's descriptor: not ours. */
        shm->ctx_held = false;
    }
}

struct gv_shm_proc *gv_shm_self(struct gv_shm *shm)
{
    return shm->slot >= 0 ? &shm->r->procs[shm->slot] : NULL;
}

bool gv_shm_replaced(struct gv_shm *shm)
{
    struct stat st;
    if (shm == NULL || shm->path == NULL)
        return false;
    bool gone;
    if (stat(shm->path, &st) != 0)
        gone = errno == ENOENT || errno == ENOTDIR;
    else
        gone = st.st_dev != shm->st_dev || st.st_ino != shm->st_ino;
    if (gone)
        atomic_store(&shm->gone, true);
    return gone || atomic_load(&shm->gone);
}

/*
 * gv_shm_replaced for the allocation path, where a system call costs more
 * than the rest of a reservation.  Unlinking or renaming over the file
 * drops our inode's link count to 0, which fstat tells: asked whenever the
 * process is about to hold more than it ever held on the device (so a
 * process cannot grow after a delete, while steady alloc/free cycles pay
 * nothing).  The path itself (a hard link kept elsewhere, then a new file
 * at the path) is looked up at most every 100 ms.  Once replaced, always.
 */
static bool replaced_lately(struct gv_shm *shm, bool growing)
{
    if (shm->path == NULL)
        return false;
    if (atomic_load(&shm->gone))
        return true;
    struct stat st;
    if (growing && fstat(shm->fd, &st) == 0 && st.st_nlink == 0) {
        atomic_store(&shm->gone, true);
        return true;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (atomic_load(&shm->checked_ms) != 0 && ms - atomic_load(&shm->checked_ms) < 100)
        return false;
    atomic_store(&shm->checked_ms, ms);
    return gv_shm_replaced(shm);
}

gv_status gv_shm_mem_reserve(struct gv_shm *shm, int dev, uint64_t bytes, enum gv_shm_kind kind,
                             bool *managed_out)
{
    if (shm->readonly || shm->slot < 0 || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return GV_EINVAL;
    /*
     * A region deleted or replaced under us (a tenant resetting its usage)
     * no longer tells what the container holds: reserve nothing more.
     */
    if (replaced_lately(shm, shm->held[dev] + bytes > shm->peak[dev])) {
        snprintf(shm->lock_error, sizeof(shm->lock_error),
                 "%s was deleted or replaced while in use: refusing further allocations",
                 shm->path);
        return GV_EIO;
    }
    struct gv_shm_device *d = &shm->r->devices[dev];
    uint64_t limit, share;
    uint32_t flags;
    gv_shm_limit(shm, dev, &limit, &share, &flags);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (region_lock(shm) != 0)
            return GV_EIO;
        struct gv_shm_proc *p = own_slot_locked(shm);
        if (p == NULL) {
            region_unlock(shm);
            return GV_ENOFIT;
        }
        /* The slots are the truth (ours rewritten from our record above);
         * the cached totals are rewritten from them, never believed. */
        uint64_t used, managed;
        sum_slots(shm->r, (uint32_t)dev, &used, &managed);
        if (limit != 0 && (bytes > limit || used > limit - bytes)) {
            /* Dead processes may still hold charges: free them, try once more. */
            int freed = reclaim_locked(shm);
            region_unlock(shm);
            if (freed > 0)
                continue;
            return GV_ENOFIT;
        }
        bool as_managed = kind == GV_SHM_MANAGED;
        if (!as_managed && (flags & GV_SHM_DEV_OVERSUBSCRIBE) && share != 0) {
            uint64_t resident = used - managed;
            if (bytes > share || resident > share - bytes) {
                if (kind == GV_SHM_DEVICE) {
                    region_unlock(shm);
                    return GV_ENOFIT;
                }
                as_managed = true;
            }
        }
        shm->held[dev] += bytes;
        if (shm->held[dev] > shm->peak[dev])
            shm->peak[dev] = shm->held[dev];
        atomic_store(&p->mem_used[dev], shm->held[dev]);
        if (as_managed) {
            shm->held_managed[dev] += bytes;
            atomic_store(&p->managed_used[dev], shm->held_managed[dev]);
            managed += bytes;
        }
        atomic_store(&d->mem_used, used + bytes);
        atomic_store(&d->mem_managed, managed);
        if (managed_out != NULL)
            *managed_out = as_managed;
        region_unlock(shm);
        atomic_store(&p->heartbeat_ns, shm_now_ns());
        return GV_OK;
    }
    return GV_ENOFIT;
}

void gv_shm_mem_release(struct gv_shm *shm, int dev, uint64_t bytes, bool managed)
{
    if (shm->readonly || shm->slot < 0 || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return;
    if (region_lock(shm) != 0)
        return;
    uint64_t taken = bytes < shm->held[dev] ? bytes : shm->held[dev];
    shm->held[dev] -= taken;
    if (managed) {
        uint64_t m = bytes < shm->held_managed[dev] ? bytes : shm->held_managed[dev];
        shm->held_managed[dev] -= m;
    }
    if (shm->held_managed[dev] > shm->held[dev])
        shm->held_managed[dev] = shm->held[dev];
    if (own_slot_locked(shm) != NULL)
        recompute_device(shm->r, (uint32_t)dev);
    region_unlock(shm);
}

gv_status gv_shm_mem_to_managed(struct gv_shm *shm, int dev, uint64_t bytes)
{
    if (shm->readonly || shm->slot < 0 || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return GV_EINVAL;
    if (region_lock(shm) != 0)
        return GV_EIO;
    uint64_t held = shm->held[dev], managed = shm->held_managed[dev];
    gv_status st = GV_EINVAL;
    if (managed <= held && bytes <= held - managed) {
        shm->held_managed[dev] += bytes;
        st = GV_OK;
    }
    if (own_slot_locked(shm) != NULL)
        recompute_device(shm->r, (uint32_t)dev);
    region_unlock(shm);
    return st;
}

uint64_t gv_shm_mem_used(const struct gv_shm *shm, int dev)
{
    if (dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return 0;
    uint64_t used = atomic_load(&shm->r->devices[dev].mem_used);
    /* Never report less than this process alone holds. */
    return used > shm->held[dev] ? used : shm->held[dev];
}

void gv_shm_note_oom(struct gv_shm *shm, int dev)
{
    if (shm == NULL || shm->readonly || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return;
    /* a statistic for monitors, never read back for a decision */
    atomic_fetch_add_explicit(&shm->r->devices[dev].oom_count, 1, memory_order_relaxed);
}

uint64_t gv_shm_mem_held(const struct gv_shm *shm, int dev)
{
    if (shm == NULL || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return 0;
    return shm->held[dev];
}

gv_status gv_shm_with_lock(struct gv_shm *shm, void (*fn)(struct gv_shm_region *r, void *arg),
                           void *arg)
{
    if (shm->readonly)
        return GV_EINVAL;
    if (region_lock(shm) != 0)
        return GV_EIO;
    fn(shm->r, arg);
    region_unlock(shm);
    return GV_OK;
}

/* Byte 0 of the file, locked with an open-file-description lock. */
static int ctx_lock_op(struct gv_shm *shm, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(shm->fd, F_OFD_SETLK, &fl);
}

gv_status gv_shm_ctx_serialize(struct gv_shm *shm)
{
    if (shm == NULL || shm->fd < 0 || shm->readonly)
        return GV_OK;
    /* Polled, not F_OFD_SETLKW: the wait must stay bounded, and context
     * creation is rare enough that a millisecond's latency costs nothing. */
    struct timespec dl, now;
    deadline_in(&dl, shm->lock_timeout_ms < GV_SHM_CTX_WAIT_MS ? shm->lock_timeout_ms
                                                               : GV_SHM_CTX_WAIT_MS);
    for (;;) {
        if (ctx_lock_op(shm, F_WRLCK) == 0) {
            shm->ctx_held = true;
            return GV_OK;
        }
        if (errno != EAGAIN && errno != EACCES)
            return GV_EIO;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec))
            return GV_EIO;
        struct timespec pause = {0, 1000000L};
        nanosleep(&pause, NULL);
    }
}

void gv_shm_ctx_unserialize(struct gv_shm *shm)
{
    if (shm != NULL && shm->fd >= 0 && shm->ctx_held) {
        ctx_lock_op(shm, F_UNLCK);
        shm->ctx_held = false;
    }
}

void gv_shm_local_dir(char *buf, size_t n)
{
    const char *dir = getenv("GPUVISOR_RUN_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (dir != NULL && dir[0] == '/')
        snprintf(buf, n, "%s", dir);
    else if (geteuid() == 0)
        snprintf(buf, n, "/run/gpuvisor");
    else if (xdg != NULL && xdg[0] == '/')
        snprintf(buf, n, "%s/gpuvisor", xdg);
    else
        snprintf(buf, n, "/tmp/gpuvisor-%u", (unsigned)geteuid());
}
