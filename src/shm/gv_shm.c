/*
 * Shared region: creation, validation, robust locking, slots, accounting.
 * See gv_shm.h for the model and docs/shared-region.md for the layout.
 *
 * Nothing here may call exit/abort or print: this code runs inside
 * arbitrary applications through libgpuvisor.so.
 */
#include "shm/gv_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct gv_shm {
    struct gv_shm_region *r;
    int fd;
    bool readonly;
    int slot; /* this process's slot, -1 before attach */
};

static uint64_t now_ns(void)
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

/* Recomputes every device's cached total from the slots (the truth). */
static void recompute_totals(struct gv_shm_region *r)
{
    uint32_t nd = atomic_load(&r->ndevices);
    for (uint32_t d = 0; d < nd && d < GV_SHM_MAX_DEVICES; d++) {
        uint64_t sum = 0, managed = 0;
        for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
            if (atomic_load(&r->procs[i].pid) != 0) {
                sum += atomic_load(&r->procs[i].mem_used[d]);
                managed += atomic_load(&r->procs[i].managed_used[d]);
            }
        }
        atomic_store(&r->devices[d].mem_used, sum);
        atomic_store(&r->devices[d].mem_managed, managed);
    }
}

static int region_lock(struct gv_shm *shm)
{
    int rc = pthread_mutex_lock(&shm->r->lock.mutex);
    if (rc == EOWNERDEAD) {
        /* The previous holder died mid-update: totals may be stale. */
        recompute_totals(shm->r);
        pthread_mutex_consistent(&shm->r->lock.mutex);
        rc = 0;
    }
    return rc;
}

static void region_unlock(struct gv_shm *shm) { pthread_mutex_unlock(&shm->r->lock.mutex); }

static void clear_slot(struct gv_shm_proc *p)
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
        if (atomic_load(&p->pid) == 0 || i == shm->slot || gv_shm_proc_alive(p))
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

static gv_status init_region(struct gv_shm_region *r, struct gv_error *err)
{
    memset(r, 0, sizeof(*r));
    r->version = GV_SHM_VERSION;
    r->header_size = (uint32_t)offsetof(struct gv_shm_region, devices);
    r->total_size = sizeof(*r);
    r->max_devices = GV_SHM_MAX_DEVICES;
    r->max_procs = GV_SHM_MAX_PROCS;
    r->created_ns = now_ns();
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(&r->lock.mutex, &a);
    pthread_mutexattr_destroy(&a);
    if (rc != 0)
        return gv_error_set(err, GV_EIO, "cannot initialise region lock: %s", strerror(rc));
    /* Readers treat a region without magic as not yet initialised. */
    __atomic_store_n(&r->magic, GV_SHM_MAGIC, __ATOMIC_RELEASE);
    return GV_OK;
}

static gv_status validate(const char *path, const struct gv_shm_region *r, struct gv_error *err)
{
    uint64_t magic = __atomic_load_n(&r->magic, __ATOMIC_ACQUIRE);
    if (magic != GV_SHM_MAGIC)
        return gv_error_set(err, GV_EPROTO,
                            "%s: not a gpuvisor shared region (magic 0x%016llx, expected 0x%016llx)",
                            path, (unsigned long long)magic, (unsigned long long)GV_SHM_MAGIC);
    if (r->version != GV_SHM_VERSION)
        return gv_error_set(err, GV_EPROTO,
                            "%s: shared region layout version %u, this build speaks %u", path,
                            r->version, GV_SHM_VERSION);
    if (r->header_size != offsetof(struct gv_shm_region, devices) ||
        r->total_size != sizeof(struct gv_shm_region) || r->max_devices != GV_SHM_MAX_DEVICES ||
        r->max_procs != GV_SHM_MAX_PROCS || atomic_load(&r->ndevices) > GV_SHM_MAX_DEVICES)
        return gv_error_set(err, GV_EPROTO,
                            "%s: corrupt shared region header (size %llu, devices %u/%u, "
                            "procs %u)",
                            path, (unsigned long long)r->total_size, atomic_load(&r->ndevices),
                            r->max_devices, r->max_procs);
    return GV_OK;
}

/* Describes a file of the wrong size without mapping more than it holds. */
static gv_status describe_bad_size(const char *path, int fd, off_t size, struct gv_error *err)
{
    struct {
        uint64_t magic;
        uint32_t version;
    } head = {0, 0};
    if (size >= (off_t)sizeof(head) && pread(fd, &head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
        head.magic == GV_SHM_MAGIC && head.version != GV_SHM_VERSION)
        return gv_error_set(err, GV_EPROTO,
                            "%s: shared region layout version %u, this build speaks %u", path,
                            head.version, GV_SHM_VERSION);
    return gv_error_set(err, GV_EPROTO,
                        "%s: not a gpuvisor shared region (size %lld, expected %zu)", path,
                        (long long)size, sizeof(struct gv_shm_region));
}

gv_status gv_shm_open(const char *path, unsigned flags, struct gv_shm **out, struct gv_error *err)
{
    gv_status rc = GV_OK;
    struct gv_shm *shm = calloc(1, sizeof(*shm));
    if (shm == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    shm->fd = -1;
    shm->slot = -1;
    shm->readonly = (flags & GV_SHM_READONLY) != 0;
    const size_t size = sizeof(struct gv_shm_region);
    int prot = shm->readonly ? PROT_READ : PROT_READ | PROT_WRITE;

    if (path == NULL) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            rc = gv_error_set(err, GV_ENOMEM, "cannot map private region: %s", strerror(errno));
            goto fail;
        }
        shm->r = m;
        if ((rc = init_region(shm->r, err)) != GV_OK)
            goto fail;
        *out = shm;
        return GV_OK;
    }

    int oflags = O_CLOEXEC | (shm->readonly ? O_RDONLY : O_RDWR);
    if ((flags & GV_SHM_CREATE) && !shm->readonly)
        oflags |= O_CREAT;
    shm->fd = open(path, oflags, 0666);
    if (shm->fd < 0) {
        rc = gv_error_set(err, errno == ENOENT ? GV_ENOTFOUND : GV_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
        goto fail;
    }
    /* flock serialises creation against concurrent openers; it is released
     * by the kernel if we die, unlike anything stored in the file. */
    if (flock(shm->fd, shm->readonly ? LOCK_SH : LOCK_EX) != 0) {
        rc = gv_error_set(err, GV_EIO, "%s: cannot lock: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(shm->fd, &st) != 0) {
        rc = gv_error_set(err, GV_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail_unlock;
    }
    bool fresh = false;
    if (st.st_size == 0 && !shm->readonly && (flags & GV_SHM_CREATE)) {
        if (ftruncate(shm->fd, (off_t)size) != 0) {
            rc = gv_error_set(err, GV_EIO, "%s: cannot size region: %s", path, strerror(errno));
            goto fail_unlock;
        }
        fresh = true;
    } else if (st.st_size != (off_t)size) {
        rc = st.st_size == 0 ? gv_error_set(err, GV_EUNAVAILABLE,
                                            "%s: shared region is empty (not initialised yet)", path)
                             : describe_bad_size(path, shm->fd, st.st_size, err);
        goto fail_unlock;
    }
    void *m = mmap(NULL, size, prot, MAP_SHARED, shm->fd, 0);
    if (m == MAP_FAILED) {
        rc = gv_error_set(err, GV_EIO, "%s: cannot map: %s", path, strerror(errno));
        goto fail_unlock;
    }
    shm->r = m;
    rc = fresh ? init_region(shm->r, err) : validate(path, shm->r, err);
    if (rc != GV_OK)
        goto fail_unlock;
    flock(shm->fd, LOCK_UN);
    *out = shm;
    return GV_OK;

fail_unlock:
    flock(shm->fd, LOCK_UN);
fail:
    if (shm->r != NULL)
        munmap(shm->r, size);
    if (shm->fd >= 0)
        close(shm->fd);
    free(shm);
    return rc;
}

void gv_shm_close(struct gv_shm *shm)
{
    if (shm == NULL)
        return;
    if (!shm->readonly && shm->slot >= 0 && region_lock(shm) == 0) {
        struct gv_shm_proc *p = &shm->r->procs[shm->slot];
        clear_slot(p);
        atomic_store(&p->pid, 0);
        recompute_totals(shm->r);
        region_unlock(shm);
    }
    munmap(shm->r, sizeof(struct gv_shm_region));
    if (shm->fd >= 0)
        close(shm->fd);
    free(shm);
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
        return gv_error_set(err, GV_EIO, "cannot lock shared region");
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
        goto out;
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
out:
    region_unlock(shm);
    return rc;
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
        return gv_error_set(err, GV_EIO, "cannot lock shared region");
    gv_status rc = GV_OK;
    if (shm->slot >= 0 && atomic_load(&shm->r->procs[shm->slot].pid) == pid) {
        shm->r->procs[shm->slot].priority = priority;
        goto out;
    }
    shm->slot = -1;
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
        atomic_store(&p->heartbeat_ns, now_ns());
        recompute_totals(shm->r);
        shm->slot = mine;
        goto out;
    }
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
        struct gv_shm_proc *p = &shm->r->procs[i];
        if (atomic_load(&p->pid) != 0)
            continue;
        clear_slot(p);
        p->start_time = start;
        p->priority = priority;
        atomic_store(&p->heartbeat_ns, now_ns());
        atomic_store(&p->pid, pid);
        shm->slot = i;
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
    if (shm != NULL)
        shm->slot = -1;
}

struct gv_shm_proc *gv_shm_self(struct gv_shm *shm)
{
    return shm->slot >= 0 ? &shm->r->procs[shm->slot] : NULL;
}

/*
 * Whether bytes more device-resident memory stay within an oversubscribed
 * device's share (always true for other devices, where the limit decides).
 */
static bool within_share(const struct gv_shm_device *d, uint64_t used, uint64_t bytes)
{
    if (!(d->flags & GV_SHM_DEV_OVERSUBSCRIBE) || d->mem_share == 0)
        return true;
    uint64_t managed = atomic_load(&d->mem_managed);
    uint64_t resident = used > managed ? used - managed : 0;
    return bytes <= d->mem_share && resident <= d->mem_share - bytes;
}

gv_status gv_shm_mem_reserve(struct gv_shm *shm, int dev, uint64_t bytes, enum gv_shm_kind kind,
                             bool *managed_out)
{
    if (shm->readonly || shm->slot < 0 || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return GV_EINVAL;
    struct gv_shm_device *d = &shm->r->devices[dev];
    struct gv_shm_proc *p = &shm->r->procs[shm->slot];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (region_lock(shm) != 0)
            return GV_EIO;
        uint64_t used = atomic_load(&d->mem_used);
        uint64_t limit = d->mem_limit;
        if (limit != 0 && (bytes > limit || used > limit - bytes)) {
            /* Dead processes may still hold charges: free them, try once more. */
            int freed = reclaim_locked(shm);
            region_unlock(shm);
            if (freed > 0)
                continue;
            return GV_ENOFIT;
        }
        bool managed = kind == GV_SHM_MANAGED;
        if (!managed && !within_share(d, used, bytes)) {
            if (kind == GV_SHM_DEVICE) {
                region_unlock(shm);
                return GV_ENOFIT;
            }
            managed = true;
        }
        atomic_store(&d->mem_used, used + bytes);
        atomic_fetch_add(&p->mem_used[dev], bytes);
        if (managed) {
            atomic_fetch_add(&p->managed_used[dev], bytes);
            atomic_fetch_add(&d->mem_managed, bytes);
        }
        if (managed_out != NULL)
            *managed_out = managed;
        region_unlock(shm);
        atomic_store(&p->heartbeat_ns, now_ns());
        return GV_OK;
    }
    return GV_ENOFIT;
}

static uint64_t sub_clamped(_Atomic uint64_t *v, uint64_t bytes)
{
    uint64_t cur = atomic_load(v);
    uint64_t next = cur > bytes ? cur - bytes : 0;
    atomic_store(v, next);
    return cur - next;
}

void gv_shm_mem_release(struct gv_shm *shm, int dev, uint64_t bytes, bool managed)
{
    if (shm->readonly || shm->slot < 0 || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return;
    struct gv_shm_proc *p = &shm->r->procs[shm->slot];
    if (region_lock(shm) != 0)
        return;
    uint64_t taken = sub_clamped(&p->mem_used[dev], bytes);
    sub_clamped(&shm->r->devices[dev].mem_used, taken);
    if (managed)
        sub_clamped(&shm->r->devices[dev].mem_managed, sub_clamped(&p->managed_used[dev], bytes));
    region_unlock(shm);
}

gv_status gv_shm_mem_to_managed(struct gv_shm *shm, int dev, uint64_t bytes)
{
    if (shm->readonly || shm->slot < 0 || dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return GV_EINVAL;
    struct gv_shm_device *d = &shm->r->devices[dev];
    struct gv_shm_proc *p = &shm->r->procs[shm->slot];
    if (region_lock(shm) != 0)
        return GV_EIO;
    uint64_t held = atomic_load(&p->mem_used[dev]), managed = atomic_load(&p->managed_used[dev]);
    gv_status st = GV_EINVAL;
    if (managed <= held && bytes <= held - managed) {
        atomic_fetch_add(&p->managed_used[dev], bytes);
        atomic_fetch_add(&d->mem_managed, bytes);
        st = GV_OK;
    }
    region_unlock(shm);
    return st;
}

uint64_t gv_shm_mem_used(const struct gv_shm *shm, int dev)
{
    if (dev < 0 || dev >= GV_SHM_MAX_DEVICES)
        return 0;
    return atomic_load(&shm->r->devices[dev].mem_used);
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
