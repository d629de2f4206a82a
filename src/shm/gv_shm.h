/*
 * The per-container shared region: one file, mmapped by every process of a
 * container (through libgpuvisor.so) and read by `gpuvisor ps` and the node
 * agent's monitor.  docs/shared-region.md describes the layout and the
 * crash-safety rules; this header is the single definition of both.
 *
 * Accounting model: each process owns one slot; the per-process slot usage
 * is the truth, and each device's mem_used is a cache of the sum over
 * slots.  Writers change both under the region lock (a futex word naming
 * its owner thread), so a process killed at any instant leaves at worst a
 * stale cache, which the next locker -- finding the owner gone -- recomputes
 * from the slots.  Readers never lock: every field they read is a naturally
 * aligned atomic.  No glibc mutex lives in the region: glibc aborts on some
 * corrupted mutex states, and the region is writable by the container.
 *
 * The region is writable by every process of the container, so nothing in
 * it is trusted to raise a limit: each process keeps the limits it derived
 * from its own configuration (the read-only limits file) and its own
 * charges privately, and every reservation is checked against those
 * (docs/shared-region.md, "A hostile container").
 */
#ifndef GV_SHM_H
#define GV_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

#define GV_SHM_MAGIC 0x3147455248535647ULL /* "GVSHREG1" little-endian */
/* 2: devices[].ctx_bytes; regions are built aside and linked into place. */
#define GV_SHM_VERSION 2u
#define GV_SHM_MAX_DEVICES 16
#define GV_SHM_MAX_PROCS 1024
#define GV_SHM_UUID_LEN 64
/* Bytes reserved for the compute-share / priority module (throttle.c,
 * priority.c): region-wide and per process.  Their layout belongs to that
 * module (docs/compute-share.md); this module only zeroes them. */
#define GV_SHM_SCHED_REGION_BYTES 1024
#define GV_SHM_SCHED_PROC_BYTES 256

/* Device flags. */
#define GV_SHM_DEV_OVERSUBSCRIBE 0x1u

struct gv_shm_device {
    char uuid[GV_SHM_UUID_LEN];          /* NVML form, "GPU-..." (or "MIG-...") */
    uint64_t mem_limit;                  /* bytes; 0 = unlimited */
    uint64_t mem_physical;               /* the card's total bytes */
    _Atomic uint64_t mem_used;           /* sum of slots' mem_used (cache) */
    uint32_t sm_limit;                   /* percent 1..100; 0 = unlimited */
    uint32_t flags;                      /* GV_SHM_DEV_* */
    uint64_t mem_share;                  /* oversubscription: device-resident bytes allowed */
    _Atomic uint64_t mem_managed;        /* of mem_used, served as managed memory (cache) */
    _Atomic uint64_t ctx_bytes;          /* a context's size on this card, measured once (0 = not yet) */
    /* Allocations the interposer refused on this device because the limit
     * would be passed (CUDA_ERROR_OUT_OF_MEMORY), counted by every process
     * of the container.  Was reserved (zero) in earlier version-2 builds, so
     * an older writer just leaves it at 0: no version change. */
    _Atomic uint64_t oom_count;
};
_Static_assert(sizeof(struct gv_shm_device) == 128, "gv_shm_device layout");
_Static_assert(offsetof(struct gv_shm_device, mem_managed) == 104, "gv_shm_device layout");
_Static_assert(offsetof(struct gv_shm_device, ctx_bytes) == 112, "gv_shm_device layout");
_Static_assert(offsetof(struct gv_shm_device, oom_count) == 120, "gv_shm_device layout");

struct gv_shm_proc {
    _Atomic int32_t pid;                 /* pid in the container; 0 = free slot */
    int32_t hostpid;                     /* pid on the host (as NVML names it); 0 = unknown */
    uint64_t start_time;                 /* /proc/<pid>/stat starttime: detects pid reuse */
    _Atomic uint64_t heartbeat_ns;       /* CLOCK_REALTIME of the last activity */
    int32_t priority;                    /* CUDA_TASK_PRIORITY (0 = highest) */
    uint32_t flags;
    _Atomic uint64_t mem_used[GV_SHM_MAX_DEVICES];    /* device bytes charged */
    _Atomic uint64_t managed_used[GV_SHM_MAX_DEVICES]; /* of which oversubscribed (managed) */
    _Atomic uint32_t util[GV_SHM_MAX_DEVICES];         /* recent SM utilisation, percent */
    uint8_t sched[GV_SHM_SCHED_PROC_BYTES];            /* owned by throttle/priority */
    uint8_t reserved[96];
};
_Static_assert(sizeof(struct gv_shm_proc) == 704, "gv_shm_proc layout");
_Static_assert(offsetof(struct gv_shm_proc, mem_used) == 32, "gv_shm_proc layout");

struct gv_shm_region {
    uint64_t magic;                      /* GV_SHM_MAGIC, written last at creation */
    uint32_t version;                    /* GV_SHM_VERSION */
    uint32_t header_size;                /* offsetof(devices) */
    uint64_t total_size;                 /* sizeof(struct gv_shm_region) */
    uint32_t max_devices;
    uint32_t max_procs;
    _Atomic uint32_t ndevices;           /* devices[0..ndevices) are in use */
    uint32_t sm_policy;                  /* GPU_CORE_UTILIZATION_POLICY: 0 default, 1 force, 2 disable */
    uint64_t created_ns;
    union {
        _Atomic uint32_t word;           /* 0 free, else owner tid | GV_SHM_LOCK_WAITERS */
        uint8_t bytes[64];
    } lock;
    uint8_t sched[GV_SHM_SCHED_REGION_BYTES]; /* owned by throttle/priority */
    _Atomic uint32_t slots_hw;           /* slots [slots_hw, max_procs) have never been used */
    uint8_t reserved[908];
    struct gv_shm_device devices[GV_SHM_MAX_DEVICES];
    struct gv_shm_proc procs[GV_SHM_MAX_PROCS];
};
/* Set in the lock word while a process waits for it (futex protocol). */
#define GV_SHM_LOCK_WAITERS 0x80000000u
#define GV_SHM_LOCK_TID_MASK 0x3fffffffu
_Static_assert(offsetof(struct gv_shm_region, lock) == 48, "gv_shm_region layout");
_Static_assert(offsetof(struct gv_shm_region, sched) == 112, "gv_shm_region layout");
_Static_assert(offsetof(struct gv_shm_region, slots_hw) == 1136, "gv_shm_region layout");
_Static_assert(offsetof(struct gv_shm_region, devices) == 2048, "gv_shm_region layout");
_Static_assert(offsetof(struct gv_shm_region, procs) == 2048 + 16 * 128, "gv_shm_region layout");
_Static_assert(sizeof(struct gv_shm_region) == 4096 + 1024 * 704, "gv_shm_region layout");

/* Open flags. */
#define GV_SHM_CREATE 0x1u   /* create and initialise the file if missing or empty */
#define GV_SHM_READONLY 0x2u /* map read-only (readers); no locking, no slots */

struct gv_shm;

/*
 * Opens (and with GV_SHM_CREATE creates) the region at path.  A new region
 * is built aside (<path>.tmp.<pid>.<n>) and linked into place complete, so
 * no process ever sees a half-made one, however many start at once or die
 * while creating.  A file left half-made by an older build (empty, or
 * full-sized without magic) is replaced the same way.  A file with a wrong
 * magic, version or size is refused with GV_EPROTO and a message; it is
 * never reinitialised or trusted.  path NULL maps an anonymous,
 * process-private region (a process with no shared-cache configured).
 */
gv_status gv_shm_open(const char *path, unsigned flags, struct gv_shm **out, struct gv_error *err);
/*
 * How long a region-lock wait may take before the call fails closed (GV_EIO
 * from reserve; default GV_SHM_LOCK_TIMEOUT_MS).  A lock whose owner is
 * dead, or that names no thread at all (a corrupted lock word), is taken
 * over; a live owner that keeps it past the timeout (stopped, or hostile)
 * makes the call fail closed with the reason in gv_shm_lock_error.
 */
#define GV_SHM_LOCK_TIMEOUT_MS 10000
void gv_shm_set_lock_timeout(struct gv_shm *shm, int ms);
/* Why the last lock wait failed ("" when it did not). */
const char *gv_shm_lock_error(const struct gv_shm *shm);
/*
 * Test seam: called with a step number at each step of region creation
 * (a crash test kills the process there).  NULL in production.
 */
extern void (*gv_shm_crash_hook)(int step);
/* Releases this process's slot (if any) and unmaps. */
void gv_shm_close(struct gv_shm *shm);
/* The raw mapping, for readers (`gpuvisor ps`, the node agent's monitor). */
const struct gv_shm_region *gv_shm_region(const struct gv_shm *shm);
/* The region-wide bytes owned by the compute-share module (writable). */
uint8_t *gv_shm_sched_region(struct gv_shm *shm);

/*
 * Finds the device with this uuid, or registers it with the given limits.
 * When the device is already registered with different limits (a later
 * process brought other values), the registered ones stay in force, *idx is
 * still set, and GV_ECONFLICT is returned with a message saying both.
 * Either way this process remembers lim as its trusted limits for *idx:
 * what it may reserve there is never more than they allow, whatever the
 * region says (gv_shm_limit).
 */
struct gv_shm_limits {
    uint64_t mem_limit;    /* bytes; 0 = unlimited */
    uint64_t mem_physical; /* the card's size */
    uint64_t mem_share;    /* with GV_SHM_DEV_OVERSUBSCRIBE: device-resident bytes (0 = mem_limit) */
    uint32_t sm_limit;
    uint32_t flags;
};
gv_status gv_shm_device_attach(struct gv_shm *shm, const char *uuid,
                               const struct gv_shm_limits *lim, int *idx, struct gv_error *err);
/* Index of the device with this uuid, or -1. */
int gv_shm_device_find(const struct gv_shm *shm, const char *uuid);

/* Takes a slot for pid (reclaiming dead slots first); idempotent per process. */
gv_status gv_shm_proc_attach(struct gv_shm *shm, int32_t pid, int32_t priority,
                             struct gv_error *err);
/* In a forked child: forget the parent's slot (the child attaches its own). */
void gv_shm_after_fork(struct gv_shm *shm);
/* This process's slot, or NULL before gv_shm_proc_attach. */
struct gv_shm_proc *gv_shm_self(struct gv_shm *shm);

/* What a reservation may be served as. */
enum gv_shm_kind {
    GV_SHM_DEVICE,  /* device memory: within the limit and (oversubscribed) the share */
    GV_SHM_MANAGED, /* managed memory: within the limit only */
    GV_SHM_ANY,     /* device memory while the share allows, else managed */
};

/*
 * Charges bytes on device dev to this process, atomically with the
 * container-wide limit check: GV_ENOFIT when it would exceed the limit
 * (after reclaiming dead processes' usage once).  *managed (may be NULL
 * for GV_SHM_DEVICE) tells how the bytes were charged.
 */
gv_status gv_shm_mem_reserve(struct gv_shm *shm, int dev, uint64_t bytes, enum gv_shm_kind kind,
                             bool *managed);
/* Counts one allocation refused on device dev (a relaxed atomic add; no lock). */
void gv_shm_note_oom(struct gv_shm *shm, int dev);
/* Returns bytes on device dev charged by gv_shm_mem_reserve. */
void gv_shm_mem_release(struct gv_shm *shm, int dev, uint64_t bytes, bool managed);
/*
 * Recharges bytes this process holds as device memory on dev as managed
 * memory (the card itself was full).  One step under the region lock: the
 * container's total never dips, so no other process can take the bytes in
 * between.  GV_EIO when the lock cannot be taken, GV_EINVAL when this
 * process does not hold that many device bytes.
 */
gv_status gv_shm_mem_to_managed(struct gv_shm *shm, int dev, uint64_t bytes);
/* Container-wide bytes charged on dev. */
uint64_t gv_shm_mem_used(const struct gv_shm *shm, int dev);
/* Bytes this process holds on dev, from its private record (not the region). */
uint64_t gv_shm_mem_held(const struct gv_shm *shm, int dev);
/*
 * The limit in force for this process on dev: the smaller of its trusted
 * limit and the region's (0 = unlimited), likewise the oversubscription
 * share; flags are this process's own.  False when dev is not registered.
 */
bool gv_shm_limit(const struct gv_shm *shm, int dev, uint64_t *limit, uint64_t *share,
                  uint32_t *flags);
/*
 * Whether the file at the region's path is no longer the region this
 * process mapped (deleted or replaced: nothing in gpuvisor does that while
 * a container runs).  Such a process reserves nothing more; reservations
 * look the path up at most every 100 ms, this call always does.  Sticky.
 */
bool gv_shm_replaced(struct gv_shm *shm);

/*
 * Container-wide serialisation of context creation (an OFD lock on the
 * region file, released by the kernel if the holder dies): a process
 * measuring what its new context took sees no sibling's context appear in
 * the same window.  Waits at most GV_SHM_CTX_WAIT_MS (or the lock timeout,
 * if shorter), then returns GV_EIO (the caller measures unserialised).
 * No-ops on a private region.
 */
#define GV_SHM_CTX_WAIT_MS 2000
gv_status gv_shm_ctx_serialize(struct gv_shm *shm);
void gv_shm_ctx_unserialize(struct gv_shm *shm);

/* Frees the slots of dead processes (and their usage); returns how many. */
int gv_shm_reclaim(struct gv_shm *shm);
/* Whether the process in a slot is alive (pid present and not reused). */
bool gv_shm_proc_alive(const struct gv_shm_proc *p);

/*
 * Where `gpuvisor run` keeps its regions (one "<name>.cache" per run):
 * $GPUVISOR_RUN_DIR, else /run/gpuvisor for root, else
 * $XDG_RUNTIME_DIR/gpuvisor, else /tmp/gpuvisor-<uid>.  Not created here.
 */
void gv_shm_local_dir(char *buf, size_t n);
/* Where the node agent keeps containers' regions: <dir>/<pod-uid>/<container>/shared.cache. */
#define GV_SHM_NODE_DIR "/var/lib/gpuvisor/containers"
/* The region's file name in a container's runtime directory (the agent makes
 * it, the answer mounts it, the monitor and `gpuvisor ps` read it). */
#define GV_SHM_REGION_FILE "shared.cache"

/* Runs fn(arg) with the region lock held (for throttle/priority state). */
gv_status gv_shm_with_lock(struct gv_shm *shm, void (*fn)(struct gv_shm_region *r, void *arg),
                           void *arg);

#endif
