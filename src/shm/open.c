/*
 * Opening a region: creating it complete or not at all (built aside, then
 * renamed in), validating one found on disk, and mapping it.
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

/*
 * Initialises a region that is all zeroes (a new file or anonymous
 * mapping); the magic goes last, so a region with magic is complete.
 */
static void init_region(struct gv_shm_region *r)
{
    r->version = GV_SHM_VERSION;
    r->header_size = (uint32_t)offsetof(struct gv_shm_region, devices);
    r->total_size = sizeof(*r);
    r->max_devices = GV_SHM_MAX_DEVICES;
    r->max_procs = GV_SHM_MAX_PROCS;
    r->created_ns = shm_now_ns();
    atomic_store(&r->lock.word, 0);
    crash_point(3);
    __atomic_store_n(&r->magic, GV_SHM_MAGIC, __ATOMIC_RELEASE);
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

/*
 * Whether the file open at fd is a region someone began and never finished:
 * empty, or region-sized with no magic and not this layout's version (what
 * older builds, which created in place, left when killed).  This build
 * never leaves one at the path, so a file of this version without magic was
 * edited: it is refused (fail closed), not replaced -- replacing it would
 * reset the container's usage.
 */
static bool half_made(int fd, const struct stat *st)
{
    if (st->st_size == 0)
        return true;
    struct {
        uint64_t magic;
        uint32_t version;
    } head = {1, 0};
    return st->st_size == (off_t)sizeof(struct gv_shm_region) &&
           pread(fd, &head, sizeof(head), 0) == (ssize_t)sizeof(head) && head.magic == 0 &&
           head.version != GV_SHM_VERSION;
}

/* "<dir>/" and "<base>.tmp." of path, for the files built aside. */
static void aside_names(const char *path, char *dir, size_t dn, char *prefix, size_t pn)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, dn, ".");
    else
        snprintf(dir, dn, "%.*s", (int)(slash - path) > 0 ? (int)(slash - path) : 1, path);
    snprintf(prefix, pn, "%s.tmp.", slash != NULL ? slash + 1 : path);
}

/*
 * Removes files built aside by creators that died before finishing
 * (<base>.tmp.<pid>.<n> whose pid is gone).  Best effort.
 */
static void remove_stale_aside(const char *path)
{
    char dir[4096], prefix[512];
    aside_names(path, dir, sizeof(dir), prefix, sizeof(prefix));
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    size_t pl = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, pl) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + pl, &end, 10);
        if (end == e->d_name + pl || *end != '.' || pid <= 0 || pid > INT32_MAX)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/*
 * Builds a complete region in a new file beside path.  Returns its fd (the
 * file's name in *aside) or -1 with err set.
 */
static int build_aside(const char *path, char *aside, size_t an, struct gv_error *err)
{
    static _Atomic unsigned counter;
    snprintf(aside, an, "%s.tmp.%d.%u", path, (int)getpid(), atomic_fetch_add(&counter, 1));
    int fd = open(aside, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        gv_error_set(err, GV_EIO, "%s: cannot create: %s", aside, strerror(errno));
        return -1;
    }
    crash_point(1);
    const size_t size = sizeof(struct gv_shm_region);
    void *m = MAP_FAILED;
    if (ftruncate(fd, (off_t)size) != 0) {
        gv_error_set(err, GV_EIO, "%s: cannot size region: %s", aside, strerror(errno));
        goto fail;
    }
    crash_point(2);
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        gv_error_set(err, GV_EIO, "%s: cannot map: %s", aside, strerror(errno));
        goto fail;
    }
    init_region(m); /* the new file is all zeroes */
    munmap(m, size);
    crash_point(4);
    return fd;
fail:
    close(fd);
    unlink(aside);
    return -1;
}

/*
 * Puts a new region at path: linked in when nothing is there (link fails
 * rather than replace a region another process just made), or renamed over
 * the half-made file open at old_fd, which we hold flock'ed.
 * GV_OK: path now names a complete region (ours or a racing creator's).
 */
static gv_status install_region(const char *path, int old_fd, struct gv_error *err)
{
    char aside[4200];
    remove_stale_aside(path);
    int fd = build_aside(path, aside, sizeof(aside), err);
    if (fd < 0)
        return err != NULL ? err->code : GV_EIO;
    gv_status rc = GV_OK;
    if (old_fd < 0) {
        /* EEXIST: another creator won; ENOENT: our file was taken for a
         * dead creator's by one in another pid namespace.  Both: look again. */
        if (link(aside, path) != 0 && errno != EEXIST && errno != ENOENT)
            rc = gv_error_set(err, GV_EIO, "%s: cannot link new region into place: %s", path,
                              strerror(errno));
        crash_point(5);
        unlink(aside);
    } else if (rename(aside, path) != 0) {
        rc = gv_error_set(err, GV_EIO, "%s: cannot replace half-made region: %s", path,
                          strerror(errno));
        unlink(aside);
    }
    crash_point(6);
    close(fd);
    return rc;
}

gv_status gv_shm_open(const char *path, unsigned flags, struct gv_shm **out, struct gv_error *err)
{
    gv_status rc = GV_OK;
    struct gv_shm *shm = calloc(1, sizeof(*shm));
    if (shm == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    shm->fd = -1;
    shm->slot = -1;
    shm->lock_timeout_ms = GV_SHM_LOCK_TIMEOUT_MS;
    shm->readonly = (flags & GV_SHM_READONLY) != 0;
    const size_t size = sizeof(struct gv_shm_region);
    int prot = shm->readonly ? PROT_READ : PROT_READ | PROT_WRITE;
    bool create = (flags & GV_SHM_CREATE) && !shm->readonly;

    if (path == NULL) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            rc = gv_error_set(err, GV_ENOMEM, "cannot map private region: %s", strerror(errno));
            goto fail;
        }
        shm->r = m;
        init_region(shm->r);
        *out = shm;
        return GV_OK;
    }
    if ((shm->path = strdup(path)) == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }

    /*
     * Every pass either finds a complete region at path or puts one there
     * (ours or a racing creator's) and looks again; a few passes bound the
     * loop should files keep changing under us.
     */
    struct stat st;
    for (int pass = 0;; pass++) {
        if (pass == 8) {
            rc = gv_error_set(err, GV_EIO, "%s: the file keeps changing while being opened", path);
            goto fail;
        }
        shm->fd = open(path, O_CLOEXEC | (shm->readonly ? O_RDONLY : O_RDWR));
        if (shm->fd < 0) {
            if (errno != ENOENT || !create) {
                rc = gv_error_set(err, errno == ENOENT ? GV_ENOTFOUND : GV_EIO,
                                  "%s: cannot open: %s", path, strerror(errno));
                goto fail;
            }
            if ((rc = install_region(path, -1, err)) != GV_OK)
                goto fail;
            continue;
        }
        if (fstat(shm->fd, &st) != 0) {
            rc = gv_error_set(err, GV_EIO, "%s: cannot stat: %s", path, strerror(errno));
            goto fail;
        }
        if (st.st_size == (off_t)size && !half_made(shm->fd, &st))
            break;
        if (!half_made(shm->fd, &st)) {
            rc = describe_bad_size(path, shm->fd, st.st_size, err);
            goto fail;
        }
        if (!create) {
            rc = gv_error_set(err, GV_EUNAVAILABLE,
                              "%s: shared region is not initialised (left half-made)", path);
            goto fail;
        }
        /* Replace the half-made file, unless a racing opener already did. */
        struct stat now;
        if (flock(shm->fd, LOCK_EX) == 0 && stat(path, &now) == 0 && now.st_dev == st.st_dev &&
            now.st_ino == st.st_ino && fstat(shm->fd, &st) == 0 && half_made(shm->fd, &st)) {
            rc = install_region(path, shm->fd, err);
            if (rc != GV_OK)
                goto fail;
        }
        close(shm->fd); /* drops the flock */
        shm->fd = -1;
    }
    void *m = mmap(NULL, size, prot, MAP_SHARED, shm->fd, 0);
    if (m == MAP_FAILED) {
        rc = gv_error_set(err, GV_EIO, "%s: cannot map: %s", path, strerror(errno));
        goto fail;
    }
    shm->r = m;
    shm->st_dev = st.st_dev;
    shm->st_ino = st.st_ino;
    if ((rc = validate(path, shm->r, err)) != GV_OK)
        goto fail;
    *out = shm;
    return GV_OK;

fail:
    if (shm->r != NULL)
        munmap(shm->r, size);
    if (shm->fd >= 0)
        close(shm->fd);
    free(shm->path);
    free(shm);
    return rc;
}

void gv_shm_close(struct gv_shm *shm)
{
    if (shm == NULL)
        return;
    if (!shm->readonly && shm->slot >= 0 && region_lock(shm) == 0) {
        struct gv_shm_proc *p = &shm->r->procs[shm->slot];
        if (atomic_load(&p->pid) == shm->pid) {
            clear_slot(p);
            atomic_store(&p->pid, 0);
        }
        recompute_totals(shm->r);
        region_unlock(shm);
    }
    munmap(shm->r, sizeof(struct gv_shm_region));
    if (shm->fd >= 0)
        close(shm->fd);
    free(shm->path);
    free(shm);
}
