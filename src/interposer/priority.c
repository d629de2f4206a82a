/*
 * Priority board: one small file per physical GPU, shared by the tenants of
 * every container on the node (layout in docs/compute-share.md).
 *
 * Why a file and not the node agent: a launch must decide in nanoseconds
 * whether to yield, so the state has to be in memory the tenant maps; a file
 * in a host directory bind-mounted into each tenant gives exactly that, with
 * no daemon on the launch path.  Slots are claimed with compare-and-swap of a
 * random owner token (PIDs mean nothing across PID namespaces), and every
 * published time is bounded on read (at most GV_PRIO_MAX_AHEAD_NS past the
 * publisher's heartbeat and past now; times from before a clock restart are
 * ignored), so a dead tenant stops delaying others by itself and a
 * misbehaving one has to keep rewriting its slot to do so.
 */
#include "interposer/priority.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_log.h"

#define PRIO_MAGIC 0x676f697270766700ULL /* "\0gvprio g" little-endian tag */
#define PRIO_VERSION 1u
#define PRIO_SLOTS 64u

/* A slot not refreshed for this long is free for another tenant. */
#define PRIO_STALE_NS (60ull * 1000000000ull)
/* A higher-priority tenant seen this recently makes us keep little in flight. */
#define PRIO_PRESENT_NS (1000ull * 1000000ull)
/* Published busy times further ahead than this are clamped when read. */
#define GV_PRIO_MAX_AHEAD_NS (1000ull * 1000000ull)
/* Idle time a higher-priority tenant must show before lower ones resume. */
#define PRIO_GRACE_NS (2ull * 1000000ull)
#define PRIO_PACED 1u
/* Longest single wait, so waiters notice a tenant that went idle early. */
#define PRIO_RECHECK_NS (5ull * 1000000ull)

struct prio_slot {
    _Atomic uint64_t owner; /* random token; 0 = free */
    _Atomic uint64_t heartbeat_ns;
    _Atomic uint64_t busy_until_ns;
    _Atomic uint32_t level;
    /* PRIO_PACED: busy_until is where the publisher's own share limit stops
     * it, not a pause between kernels: no grace after it.  Was reserved (0)
     * before, so older publishers read as unpaced and older readers ignore it. */
    _Atomic uint32_t flags;
};

struct prio_file {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    uint64_t size;
    uint64_t reserved[5];
    struct prio_slot slots[PRIO_SLOTS];
};

_Static_assert(sizeof(struct prio_slot) == 32, "priority slot layout is part of the node contract");
_Static_assert(offsetof(struct prio_file, slots) == 64, "priority header layout changed");
_Static_assert(sizeof(struct prio_file) == 64 + 32 * PRIO_SLOTS, "priority file layout changed");

struct gv_prio_board {
    struct prio_file *file;
    uint64_t token;
    uint32_t level;
    struct prio_slot *mine; /* NULL when every slot was taken */
};

static bool key_ok(const char *key)
{
    if (key == NULL || key[0] == '\0' || strlen(key) > 96)
        return false;
    for (const char *p = key; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-'))
            return false;
    return true;
}

static uint64_t new_token(void)
{
    uint64_t t = 0;
    if (getrandom(&t, sizeof(t), GRND_NONBLOCK) != (ssize_t)sizeof(t)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    return t ? t : 1;
}

static struct prio_slot *claim(struct gv_prio_board *b, uint64_t now)
{
    struct prio_file *f = b->file;
    for (unsigned i = 0; i < PRIO_SLOTS; i++) {
        struct prio_slot *s = &f->slots[i];
        uint64_t owner = atomic_load(&s->owner);
        if (owner != 0) {
            uint64_t hb = atomic_load(&s->heartbeat_ns);
            /* Stale, or from before the clock restarted (a reboot). */
            bool fresh = hb <= now ? now - hb < PRIO_STALE_NS : hb - now <= GV_PRIO_MAX_AHEAD_NS;
            if (fresh)
                continue;
        }
        /* Publish "idle, fresh" before taking the slot so nobody sees a
         * stale busy time under our token. */
        if (atomic_compare_exchange_strong(&s->owner, &owner, b->token)) {
            atomic_store(&s->busy_until_ns, 0);
            atomic_store(&s->flags, 0);
            atomic_store(&s->level, b->level);
            atomic_store(&s->heartbeat_ns, now);
            return s;
        }
    }
    return NULL;
}

gv_status gv_prio_open(const char *dir, const char *device_key, int level, uint64_t now_ns,
                       struct gv_prio_board **out, struct gv_error *err)
{
    char path[4096];
    int fd = -1;
    struct prio_file *map = MAP_FAILED;
    struct gv_prio_board *b = NULL;
    struct stat st;
    gv_status rc;

    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return gv_error_set(err, GV_EINVAL, "priority: empty node directory");
    if (!key_ok(device_key))
        return gv_error_set(err, GV_EINVAL, "priority: bad device key '%s'",
                            device_key ? device_key : "(null)");
    if (level < 0 || level >= GV_PRIO_LEVELS)
        return gv_error_set(err, GV_ERANGE, "priority: level %d outside 0..%d", level,
                            GV_PRIO_LEVELS - 1);
    if ((size_t)snprintf(path, sizeof(path), "%s/gpu-%s.prio", dir, device_key) >= sizeof(path))
        return gv_error_set(err, GV_EINVAL, "priority: path too long under '%s'", dir);

    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        rc = gv_error_set(err, GV_EIO, "priority: open %s: %s", path, strerror(errno));
        goto fail;
    }
    /* Tenants of other containers may run as other users. */
    (void)fchmod(fd, 0666);
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
        rc = gv_error_set(err, GV_EIO, "priority: lock %s: %s", path, strerror(errno));
        goto fail;
    }
    if (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(struct prio_file)) != 0) {
        rc = gv_error_set(err, GV_EIO, "priority: size %s: %s", path, strerror(errno));
        goto fail;
    }
    if (st.st_size != 0 && st.st_size != (off_t)sizeof(struct prio_file)) {
        rc = gv_error_set(err, GV_EPROTO, "priority: %s has size %lld, expected %zu (foreign file)",
                          path, (long long)st.st_size, sizeof(struct prio_file));
        goto fail;
    }
    map = mmap(NULL, sizeof(*map), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        rc = gv_error_set(err, GV_EIO, "priority: mmap %s: %s", path, strerror(errno));
        goto fail;
    }
    if (st.st_size == 0) {
        map->version = PRIO_VERSION;
        map->nslots = PRIO_SLOTS;
        map->size = sizeof(*map);
        atomic_thread_fence(memory_order_release);
        map->magic = PRIO_MAGIC;
    } else if (map->magic != PRIO_MAGIC || map->version != PRIO_VERSION ||
               map->nslots != PRIO_SLOTS || map->size != sizeof(*map)) {
        rc = gv_error_set(err, GV_EPROTO,
                          "priority: %s is not a version %u priority board (magic %#llx, "
                          "version %u)",
                          path, PRIO_VERSION, (unsigned long long)map->magic, map->version);
        goto fail;
    }
    (void)flock(fd, LOCK_UN);
    close(fd);
    fd = -1;

    b = calloc(1, sizeof(*b));
    if (b == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "priority: out of memory");
        goto fail;
    }
    b->file = map;
    b->token = new_token();
    b->level = (uint32_t)level;
    b->mine = claim(b, now_ns);
    if (b->mine == NULL)
        gv_warn("priority: all %u slots of %s are taken; this process yields but does not "
                "make others yield",
                PRIO_SLOTS, path);
    *out = b;
    return GV_OK;

fail:
    if (map != MAP_FAILED)
        munmap(map, sizeof(*map));
    if (fd >= 0)
        close(fd);
    return rc;
}

void gv_prio_close(struct gv_prio_board *b)
{
    if (b == NULL)
        return;
    if (b->mine != NULL) {
        uint64_t tok = b->token;
        atomic_store(&b->mine->busy_until_ns, 0);
        atomic_compare_exchange_strong(&b->mine->owner, &tok, 0);
    }
    munmap(b->file, sizeof(*b->file));
    free(b);
}

uint64_t gv_prio_wait_ns(struct gv_prio_board *b, uint64_t now_ns)
{
    uint64_t wait = 0;
    for (unsigned i = 0; i < PRIO_SLOTS; i++) {
        struct prio_slot *s = &b->file->slots[i];
        uint64_t owner = atomic_load_explicit(&s->owner, memory_order_relaxed);
        if (owner == 0 || s == b->mine)
            continue;
        if (atomic_load_explicit(&s->level, memory_order_relaxed) >= b->level)
            continue;
        uint64_t until = atomic_load_explicit(&s->busy_until_ns, memory_order_acquire);
        uint64_t hb = atomic_load_explicit(&s->heartbeat_ns, memory_order_relaxed);
        if (until == 0 || hb > now_ns + GV_PRIO_MAX_AHEAD_NS)
            continue; /* idle, or written before the clock restarted */
        /* A tenant can announce work at most 1 s past its last publication,
         * so a dead one stops mattering by itself. */
        if (until > hb + GV_PRIO_MAX_AHEAD_NS)
            until = hb + GV_PRIO_MAX_AHEAD_NS;
        if (until > now_ns + GV_PRIO_MAX_AHEAD_NS)
            until = now_ns + GV_PRIO_MAX_AHEAD_NS;
        if (!(atomic_load_explicit(&s->flags, memory_order_relaxed) & PRIO_PACED))
            until += PRIO_GRACE_NS;
        if (until > now_ns && until - now_ns > wait)
            wait = until - now_ns;
    }
    return wait > PRIO_RECHECK_NS ? PRIO_RECHECK_NS : wait;
}

bool gv_prio_higher_present(struct gv_prio_board *b, uint64_t now_ns)
{
    for (unsigned i = 0; i < PRIO_SLOTS; i++) {
        struct prio_slot *s = &b->file->slots[i];
        if (s == b->mine || atomic_load_explicit(&s->owner, memory_order_relaxed) == 0)
            continue;
        if (atomic_load_explicit(&s->level, memory_order_relaxed) >= b->level)
            continue;
        uint64_t hb = atomic_load_explicit(&s->heartbeat_ns, memory_order_relaxed);
        if (hb > now_ns ? hb - now_ns <= GV_PRIO_MAX_AHEAD_NS : now_ns - hb < PRIO_PRESENT_NS)
            return true;
    }
    return false;
}

static void publish(struct gv_prio_board *b, uint64_t now_ns, uint64_t busy_until_ns,
                    uint32_t flags)
{
    if (b->mine == NULL ||
        atomic_load_explicit(&b->mine->owner, memory_order_relaxed) != b->token) {
        /* Lost the slot while idle for a long time (or never had one). */
        b->mine = claim(b, now_ns);
        if (b->mine == NULL)
            return;
    }
    /* Flags first: a reader pairing new flags with the old busy time at worst
     * adds or drops one grace, never waits on a time we did not publish. */
    atomic_store_explicit(&b->mine->flags, flags, memory_order_relaxed);
    atomic_store_explicit(&b->mine->busy_until_ns, busy_until_ns, memory_order_release);
    atomic_store_explicit(&b->mine->heartbeat_ns, now_ns, memory_order_relaxed);
}

void gv_prio_publish(struct gv_prio_board *b, uint64_t now_ns, uint64_t busy_until_ns)
{
    publish(b, now_ns, busy_until_ns, 0);
}

void gv_prio_publish_paced(struct gv_prio_board *b, uint64_t now_ns, uint64_t busy_until_ns)
{
    publish(b, now_ns, busy_until_ns, PRIO_PACED);
}
