/*
 * Device-memory accounting: every allocation path charges the shared
 * region BEFORE the driver is asked (so processes racing for the last bytes
 * can never together pass the limit) and rolls the charge back when the
 * driver fails.  Each successful allocation is remembered (address or
 * handle -> region device, bytes) so its release returns exactly what was
 * charged; releasing something we never saw goes to the driver untouched.
 *
 * Memory imported from another CUDA process (cuIpcOpenMemHandle) is not
 * hooked: its owner was charged when it allocated, and charging importers
 * too would count one buffer several times.  External memory
 * (cuImportExternalMemory) comes from a graphics API we do not see
 * (Vulkan, D3D, NvSciBuf): nobody charged it, so the import is charged.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "interposer/interposer.h"

/* --- what we charged, by address / handle ------------------------------- */

enum track_kind { T_MEM = 1, T_VMM, T_ARRAY, T_MIPMAP, T_POOL, T_EXTERNAL };

struct track {
    uint64_t key;    /* 0 = empty */
    uint8_t kind;    /* enum track_kind; with key identifies the entry */
    bool managed;
    int16_t rdev;    /* region device */
    uint64_t bytes;  /* charged; for T_POOL: the pool's cache */
    uint64_t pool;   /* T_MEM from a stream-ordered pool: that pool */
};

static struct track *table;
static size_t table_cap, table_used; /* table_used counts live + tombstones */
static size_t table_live;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
#define TOMBSTONE_KIND 0xff

static size_t slot_of(uint64_t key, uint8_t kind, size_t cap)
{
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

/* Rehashes without tombstones, doubling only when live entries need it. */
static bool table_grow(void)
{
    size_t ncap = table_cap == 0 ? 1024 : table_live * 4 >= table_cap ? table_cap * 2 : table_cap;
    struct track *n = calloc(ncap, sizeof(*n));
    if (n == NULL)
        return false;
    size_t live = 0;
    for (size_t i = 0; i < table_cap; i++) {
        struct track *t = &table[i];
        if (t->key == 0 || t->kind == TOMBSTONE_KIND)
            continue;
        size_t s = slot_of(t->key, t->kind, ncap);
        while (n[s].key != 0)
            s = (s + 1) & (ncap - 1);
        n[s] = *t;
        live++;
    }
    free(table);
    table = n;
    table_cap = ncap;
    table_used = live;
    table_live = live;
    return true;
}

static bool track_add_pool(enum track_kind kind, uint64_t key, int rdev, uint64_t bytes,
                           bool managed, uint64_t pool)
{
    pthread_mutex_lock(&table_lock);
    bool ok = true;
    if ((table_used + 1) * 4 > table_cap * 3)
        ok = table_grow();
    if (ok) {
        size_t s = slot_of(key, (uint8_t)kind, table_cap);
        while (table[s].key != 0 && table[s].kind != TOMBSTONE_KIND &&
               !(table[s].key == key && table[s].kind == kind))
            s = (s + 1) & (table_cap - 1);
        if (table[s].key == 0)
            table_used++;
        if (table[s].key == 0 || table[s].kind == TOMBSTONE_KIND)
            table_live++;
        table[s] = (struct track){key, (uint8_t)kind, managed, (int16_t)rdev, bytes, pool};
    }
    pthread_mutex_unlock(&table_lock);
    return ok;
}

static bool track_add(enum track_kind kind, uint64_t key, int rdev, uint64_t bytes, bool managed)
{
    return track_add_pool(kind, key, rdev, bytes, managed, 0);
}

static bool track_find_locked(enum track_kind kind, uint64_t key, size_t *slot)
{
    if (table_cap == 0)
        return false;
    size_t s = slot_of(key, (uint8_t)kind, table_cap);
    while (table[s].key != 0) {
        if (table[s].key == key && table[s].kind == kind) {
            *slot = s;
            return true;
        }
        s = (s + 1) & (table_cap - 1);
    }
    return false;
}

/* Removes and returns the entry for (kind, key); false if untracked. */
static bool track_take(enum track_kind kind, uint64_t key, struct track *out)
{
    pthread_mutex_lock(&table_lock);
    size_t s;
    bool found = track_find_locked(kind, key, &s);
    if (found) {
        *out = table[s];
        table[s].kind = TOMBSTONE_KIND;
        table_live--;
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

static bool track_get(enum track_kind kind, uint64_t key, struct track *out)
{
    pthread_mutex_lock(&table_lock);
    size_t s;
    bool found = track_find_locked(kind, key, &s);
    if (found)
        *out = table[s];
    pthread_mutex_unlock(&table_lock);
    return found;
}

/* --- charging ------------------------------------------------------------ */

static bool trim_pools(int rdev);

struct charge {
    int rdev;
    uint64_t bytes;
    bool managed;
};

/*
 * Reserves bytes on region device rdev.  CUDA_SUCCESS with c->rdev < 0
 * means "not accounted, just call the driver".
 */
static CUresult charge_begin_kind(struct charge *c, int rdev, uint64_t bytes,
                                  enum gv_shm_kind kind)
{
    c->rdev = rdev;
    c->bytes = bytes;
    c->managed = kind == GV_SHM_MANAGED;
    if (rdev == GV_DEV_DENY)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rdev < 0 || bytes == 0) {
        c->rdev = GV_DEV_UNTRACKED;
        return CUDA_SUCCESS;
    }
    if (gv_shm_mem_reserve(gv_ip.shm, rdev, bytes, kind, &c->managed) != GV_OK &&
        (!trim_pools(rdev) ||
         gv_shm_mem_reserve(gv_ip.shm, rdev, bytes, kind, &c->managed) != GV_OK)) {
        gv_shm_note_oom(gv_ip.shm, rdev);
        const struct gv_shm_device *d = gv_ip_dev_info(rdev);
        uint64_t limit = 0;
        gv_shm_limit(gv_ip.shm, rdev, &limit, NULL, NULL);
        const char *why = gv_shm_lock_error(gv_ip.shm);
        gv_info("out of memory: %llu bytes requested on %.64s, %llu of %llu in use%s%s",
                (unsigned long long)bytes, d ? d->uuid : "?",
                (unsigned long long)gv_shm_mem_used(gv_ip.shm, rdev), (unsigned long long)limit,
                why[0] ? ": " : "", why);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* Device memory: within the limit and, when oversubscribed, the share. */
static CUresult charge_begin(struct charge *c, int rdev, uint64_t bytes)
{
    return charge_begin_kind(c, rdev, bytes, GV_SHM_DEVICE);
}

/* Records a successful allocation, or returns the reservation on failure. */
static void charge_end(struct charge *c, CUresult rc, enum track_kind kind, uint64_t key)
{
    if (c->rdev < 0)
        return;
    if (rc == CUDA_SUCCESS && track_add(kind, key, c->rdev, c->bytes, c->managed))
        return;
    if (rc == CUDA_SUCCESS)
        gv_warn("cannot remember allocation 0x%llx: its release will not be credited",
                (unsigned long long)key);
    else
        gv_shm_mem_release(gv_ip.shm, c->rdev, c->bytes, c->managed);
}

/* Credits what an entry charged, after the driver released it. */
static void uncharge(const struct track *t)
{
    gv_shm_mem_release(gv_ip.shm, t->rdev, t->bytes, t->managed);
}

/*
 * Releases (kind, key) through the driver call: an untracked one is passed
 * through untouched; a tracked one is credited only when the driver
 * succeeded (else it stays tracked, still charged).
 */
#define GV_RELEASE(kind, key, call)                                                                \
    do {                                                                                           \
        struct track t_;                                                                           \
        if (!track_take((kind), (key), &t_))                                                       \
            return (call);                                                                         \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            track_add_pool((kind), (key), t_.rdev, t_.bytes, t_.managed, t_.pool);                 \
        else if (t_.pool != 0)                                                                     \
            pool_freed(&t_);                                                                       \
        else                                                                                       \
            uncharge(&t_);                                                                         \
        return rc_;                                                                                \
    } while (0)

/*
 * Charges bytes on rdev, runs the driver call, then records (kind, key) or
 * rolls the charge back.  key is evaluated only after a successful call.
 */
#define GV_CHARGED(rdev, bytes, kind, call, key)                                                   \
    GV_CHARGED_AS(rdev, bytes, GV_SHM_DEVICE, kind, call, key)
#define GV_CHARGED_AS(rdev, bytes, shm_kind, kind, call, key)                                      \
    do {                                                                                           \
        struct charge c_;                                                                          \
        CUresult rc_ = charge_begin_kind(&c_, (rdev), (bytes), (shm_kind));                        \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            return rc_;                                                                            \
        rc_ = (call);                                                                              \
        charge_end(&c_, rc_, (kind), rc_ == CUDA_SUCCESS ? (uint64_t)(key) : 0);                   \
        return rc_;                                                                                \
    } while (0)

static void pool_freed(const struct track *t);

/* Saturating a*b (a size we cannot represent is "more than any limit"). */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* --- plain, pitched, managed -------------------------------------------- */

/*
 * Oversubscription: device memory while the slice's device-resident share
 * and the card allow, else managed memory (host-backed, migrated on use),
 * always within the slice's (virtual) limit.  The container's managed bytes
 * never exceed what the card really has free: asking UVM for more than the
 * card can take in would make every access evict, which can stall the GPU.
 */
static bool oversubscribed(int rdev)
{
    uint32_t flags = 0;
    return gv_ip_dev_info(rdev) != NULL && gv_shm_limit(gv_ip.shm, rdev, NULL, NULL, &flags) &&
           (flags & GV_SHM_DEV_OVERSUBSCRIBE) != 0;
}

/* Reserves c->bytes as device memory while the share allows, else as managed. */
static CUresult os_reserve(struct charge *c, int rdev, uint64_t bytes)
{
    *c = (struct charge){rdev, bytes, false};
    if (gv_shm_mem_reserve(gv_ip.shm, rdev, bytes, GV_SHM_ANY, &c->managed) != GV_OK) {
        gv_shm_note_oom(gv_ip.shm, rdev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/*
 * The card itself is full: turns a device reservation into a managed one,
 * in one step (releasing and reserving again would let another tenant take
 * the bytes in between).  On failure the device reservation is returned.
 */
static CUresult os_to_managed(struct charge *c)
{
    if (gv_shm_mem_to_managed(gv_ip.shm, c->rdev, c->bytes) != GV_OK) {
        gv_shm_mem_release(gv_ip.shm, c->rdev, c->bytes, false);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->managed = true;
    return CUDA_SUCCESS;
}

/*
 * Allocates the managed memory a managed reservation stands for, within the
 * cap.  The caller records or rolls back the reservation (charge_end).
 */
static CUresult os_alloc_managed(const struct charge *c, CUdeviceptr *dptr)
{
    size_t card_free = 0, card_total = 0;
    const struct gv_shm_device *d = gv_ip_dev_info(c->rdev);
    if (gv_cu.cuMemAllocManaged == NULL || gv_cu.cuMemGetInfo_v2 == NULL ||
        gv_cu.cuMemGetInfo_v2(&card_free, &card_total) != CUDA_SUCCESS ||
        atomic_load(&d->mem_managed) > card_free) {
        gv_info("oversubscription: %llu managed bytes would exceed the %zu the card has free",
                (unsigned long long)atomic_load(&d->mem_managed), card_free);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return gv_cu.cuMemAllocManaged(dptr, c->bytes, CU_MEM_ATTACH_GLOBAL);
}

static CUresult alloc_oversubscribed(int rdev, CUdeviceptr *dptr, size_t bytesize)
{
    struct charge c;
    if (os_reserve(&c, rdev, bytesize) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc;
    if (!c.managed) {
        rc = gv_cu.cuMemAlloc_v2(dptr, bytesize);
        if (rc != CUDA_ERROR_OUT_OF_MEMORY) {
            charge_end(&c, rc, T_MEM, rc == CUDA_SUCCESS ? *dptr : 0);
            return rc;
        }
        if (os_to_managed(&c) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    rc = os_alloc_managed(&c, dptr);
    charge_end(&c, rc, T_MEM, rc == CUDA_SUCCESS ? *dptr : 0);
    return rc;
}

GV_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    GV_NEED_CU(cuMemAlloc_v2);
    int rdev = gv_ip_current_dev();
    if (oversubscribed(rdev) && dptr != NULL && bytesize != 0)
        return alloc_oversubscribed(rdev, dptr, bytesize);
    GV_CHARGED(rdev, bytesize, T_MEM, gv_cu.cuMemAlloc_v2(dptr, bytesize), *dptr);
}

/* The driver's pitch alignment is not queryable; 512 bytes is what current
 * GPUs use.  The charge is corrected to the returned pitch afterwards. */
#define PITCH_GUESS 512u

static uint64_t pitch_round(uint64_t width)
{
    return width > UINT64_MAX - PITCH_GUESS ? UINT64_MAX
                                            : (width + PITCH_GUESS - 1) / PITCH_GUESS * PITCH_GUESS;
}

/* After the driver's pitched allocation: charge the returned pitch x height. */
static CUresult pitch_charged(struct charge *c, CUresult rc, CUdeviceptr *dptr, size_t *pPitch,
                              size_t Height)
{
    if (rc == CUDA_SUCCESS && c->rdev >= 0 && pPitch != NULL) {
        uint64_t real = mul_sat(*pPitch, Height);
        if (real > c->bytes) {
            if (gv_shm_mem_reserve(gv_ip.shm, c->rdev, real - c->bytes, GV_SHM_DEVICE, NULL) !=
                GV_OK) {
                gv_shm_note_oom(gv_ip.shm, c->rdev);
                gv_cu.cuMemFree_v2(*dptr);
                gv_shm_mem_release(gv_ip.shm, c->rdev, c->bytes, false);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else if (real < c->bytes) {
            gv_shm_mem_release(gv_ip.shm, c->rdev, c->bytes - real, false);
        }
        c->bytes = real;
    }
    charge_end(c, rc, T_MEM, rc == CUDA_SUCCESS ? *dptr : 0);
    return rc;
}

/*
 * Oversubscribed pitched allocation: pitched memory is plain linear memory
 * with a row stride, so beyond the share it is served from managed memory
 * with the pitch the driver would choose (width rounded up to 512 bytes,
 * which also meets the texture pitch alignment).  The driver's argument
 * checks are repeated first, so a bad request fails as it would without us.
 */
static CUresult pitch_oversubscribed(int rdev, CUdeviceptr *dptr, size_t *pPitch,
                                     size_t WidthInBytes, size_t Height, unsigned ElementSizeBytes)
{
    if (WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t row = pitch_round(WidthInBytes);
    struct charge c;
    if (os_reserve(&c, rdev, mul_sat(row, Height)) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc;
    if (!c.managed) {
        rc = gv_cu.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
        if (rc != CUDA_ERROR_OUT_OF_MEMORY)
            return pitch_charged(&c, rc, dptr, pPitch, Height);
        if (os_to_managed(&c) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    rc = os_alloc_managed(&c, dptr);
    if (rc == CUDA_SUCCESS)
        *pPitch = (size_t)row;
    charge_end(&c, rc, T_MEM, rc == CUDA_SUCCESS ? *dptr : 0);
    return rc;
}

GV_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                      size_t Height, unsigned int ElementSizeBytes)
{
    GV_NEED_CU(cuMemAllocPitch_v2);
    int rdev = gv_ip_current_dev();
    if (oversubscribed(rdev) && dptr != NULL && pPitch != NULL)
        return pitch_oversubscribed(rdev, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    struct charge c;
    CUresult rc = charge_begin(&c, rdev, mul_sat(pitch_round(WidthInBytes), Height));
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = gv_cu.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    return pitch_charged(&c, rc, dptr, pPitch, Height);
}

GV_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    GV_NEED_CU(cuMemAllocManaged);
    /* Managed memory may live on the device: it counts against the slice. */
    GV_CHARGED_AS(gv_ip_current_dev(), bytesize, GV_SHM_MANAGED, T_MEM,
                  gv_cu.cuMemAllocManaged(dptr, bytesize, flags), *dptr);
}

GV_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    GV_NEED_CU(cuMemFree_v2);
    GV_RELEASE(T_MEM, dptr, gv_cu.cuMemFree_v2(dptr));
}

/* --- virtual memory management ----------------------------------------- */

GV_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    GV_NEED_CU(cuMemCreate);
    int rdev = GV_DEV_UNTRACKED;
    if (prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        rdev = gv_ip_cuda_dev(prop->location.id);
    GV_CHARGED(rdev, size, T_VMM, gv_cu.cuMemCreate(handle, size, prop, flags), *handle);
}

GV_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    GV_NEED_CU(cuMemRelease);
    GV_RELEASE(T_VMM, handle, gv_cu.cuMemRelease(handle));
}

/* --- stream-ordered allocator ------------------------------------------ */

/*
 * Stream-ordered pools keep freed memory cached (up to their release
 * threshold, until trimmed): that cache is the slice's memory too.  Each
 * pool's cache -- reserved minus used, as the driver reports them -- is
 * charged to the pool's T_POOL entry and reconciled after every operation
 * on the pool.  A free moves the allocation's charge into the pool's cache
 * and an allocation draws on it first, so memory moving between an
 * allocation and the cache is never charged twice or left uncharged.  A
 * cache that no longer fits the slice is trimmed back to the driver.
 */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static bool pool_usage(CUmemoryPool pool, uint64_t *cached, uint64_t *used)
{
    cuuint64_t reserved = 0, in_use = 0;
    if (gv_cu.cuMemPoolGetAttribute == NULL ||
        gv_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
            CUDA_SUCCESS ||
        gv_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &in_use) !=
            CUDA_SUCCESS)
        return false;
    *cached = reserved > in_use ? reserved - in_use : 0;
    *used = in_use;
    return true;
}

/* Moves up to want bytes of the pool's charged cache to the caller (locked). */
static uint64_t pool_take_credit_locked(CUmemoryPool pool, uint64_t want)
{
    struct track p;
    if (!track_get(T_POOL, (uint64_t)(uintptr_t)pool, &p) || p.bytes == 0)
        return 0;
    uint64_t got = p.bytes < want ? p.bytes : want;
    track_add(T_POOL, p.key, p.rdev, p.bytes - got, false);
    return got;
}

static void pool_give_credit_locked(CUmemoryPool pool, int rdev, uint64_t bytes)
{
    struct track p;
    bool have = track_get(T_POOL, (uint64_t)(uintptr_t)pool, &p);
    track_add(T_POOL, (uint64_t)(uintptr_t)pool, have ? p.rdev : rdev, (have ? p.bytes : 0) + bytes,
              false);
}

/* Charges exactly the pool's current cache (locked). */
static void pool_reconcile_locked(CUmemoryPool pool, int rdev)
{
    uint64_t cached = 0, used = 0;
    struct track p;
    if (rdev < 0 || pool == NULL)
        return;
    bool usable = pool_usage(pool, &cached, &used);
    bool have = track_get(T_POOL, (uint64_t)(uintptr_t)pool, &p);
    uint64_t charged = have ? p.bytes : 0;
    if (have)
        rdev = p.rdev;
    if (!usable) {
        /* A pool the driver no longer knows (destroyed) caches nothing. */
        if (have && track_take(T_POOL, p.key, &p))
            uncharge(&p);
        return;
    }
    if (cached > charged &&
        gv_shm_mem_reserve(gv_ip.shm, rdev, cached - charged, GV_SHM_DEVICE, NULL) != GV_OK) {
        /* The cache would pass the slice: hand it back to the driver. */
        if (gv_cu.cuMemPoolTrimTo != NULL)
            gv_cu.cuMemPoolTrimTo(pool, 0);
        if (!pool_usage(pool, &cached, &used))
            cached = charged;
        if (cached > charged &&
            gv_shm_mem_reserve(gv_ip.shm, rdev, cached - charged, GV_SHM_DEVICE, NULL) != GV_OK) {
            gv_warn("pool %p caches %llu bytes beyond the slice", (void *)pool,
                    (unsigned long long)(cached - charged));
            cached = charged;
        }
    } else if (cached < charged) {
        gv_shm_mem_release(gv_ip.shm, rdev, charged - cached, false);
    }
    track_add(T_POOL, (uint64_t)(uintptr_t)pool, rdev, cached, false);
}

static void pool_reconcile(CUmemoryPool pool, int rdev)
{
    pthread_mutex_lock(&pool_lock);
    pool_reconcile_locked(pool, rdev);
    pthread_mutex_unlock(&pool_lock);
}

/*
 * Out of memory while pools on rdev cache memory: give the caches back to
 * the driver (as it would do for its own allocations) so the slice can use
 * them.  Returns whether anything was released.
 */
static bool trim_pools(int rdev)
{
    uint64_t pools[64];
    size_t n = 0;
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_cap && n < 64; i++)
        if (table[i].key != 0 && table[i].kind == T_POOL && table[i].rdev == rdev &&
            table[i].bytes != 0)
            pools[n++] = table[i].key;
    pthread_mutex_unlock(&table_lock);
    if (n == 0 || gv_cu.cuMemPoolTrimTo == NULL)
        return false;
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < n; i++) {
        gv_cu.cuMemPoolTrimTo((CUmemoryPool)(uintptr_t)pools[i], 0);
        pool_reconcile_locked((CUmemoryPool)(uintptr_t)pools[i], rdev);
    }
    pthread_mutex_unlock(&pool_lock);
    return true;
}

/* The pool cuMemAllocAsync draws from on the current device, or NULL. */
static CUmemoryPool current_pool(void)
{
    CUdevice dev;
    CUmemoryPool pool = NULL;
    if (gv_cu.cuCtxGetDevice == NULL || gv_cu.cuDeviceGetMemPool == NULL ||
        gv_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        gv_cu.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS)
        return NULL;
    return pool;
}

/*
 * An allocation from pool: draws on the pool's charged cache, charges the
 * rest, then reconciles the cache.  GV_POOLED(call) runs the driver call.
 */
#define GV_POOLED(rdev, pool, bytesize, dptr, call)                                                \
    do {                                                                                           \
        if ((rdev) == GV_DEV_DENY)                                                                 \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                       \
        if ((rdev) < 0 || (pool) == NULL || (dptr) == NULL || (bytesize) == 0)                     \
            GV_CHARGED(rdev, bytesize, T_MEM, call, *(dptr));                                      \
        pthread_mutex_lock(&pool_lock);                                                            \
        uint64_t credit_ = pool_take_credit_locked((pool), (bytesize));                            \
        uint64_t need_ = (bytesize) - credit_;                                                     \
        if (need_ > 0 &&                                                                           \
            gv_shm_mem_reserve(gv_ip.shm, (rdev), need_, GV_SHM_DEVICE, NULL) != GV_OK) {         \
            pool_give_credit_locked((pool), (rdev), credit_);                                      \
            pthread_mutex_unlock(&pool_lock);                                                      \
            gv_shm_note_oom(gv_ip.shm, (rdev));                                                    \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                       \
        }                                                                                          \
        CUresult rc_ = (call);                                                                     \
        if (rc_ == CUDA_SUCCESS) {                                                                 \
            if (!track_add_pool(T_MEM, *(dptr), (rdev), (bytesize), false,                         \
                                (uint64_t)(uintptr_t)(pool)))                                      \
                gv_warn("cannot remember allocation 0x%llx", (unsigned long long)*(dptr));         \
        } else {                                                                                   \
            if (need_ > 0)                                                                         \
                gv_shm_mem_release(gv_ip.shm, (rdev), need_, false);                               \
            pool_give_credit_locked((pool), (rdev), credit_);                                      \
        }                                                                                          \
        pool_reconcile_locked((pool), (rdev));                                                     \
        pthread_mutex_unlock(&pool_lock);                                                          \
        return rc_;                                                                                \
    } while (0)

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*alloc_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*stream_sync_fn)(CUstream);

static CUresult pooled_async(alloc_async_fn real, int rdev, CUmemoryPool pool, CUdeviceptr *dptr,
                             size_t bytesize, CUstream hStream)
{
    GV_POOLED(rdev, pool, bytesize, dptr, real(dptr, bytesize, hStream));
}

static CUresult pooled_from_pool(alloc_pool_fn real, int rdev, CUdeviceptr *dptr, size_t bytesize,
                                 CUmemoryPool pool, CUstream hStream)
{
    GV_POOLED(rdev, pool, bytesize, dptr, real(dptr, bytesize, pool, hStream));
}

/*
 * Oversubscription of stream-ordered allocations: when the device's share
 * (or the card) cannot hold an allocation from the device's *default* pool,
 * it is served from managed memory instead, which any stream may use at
 * once.  Pools the application created keep their properties (IPC export
 * handle types, location, access) that managed memory cannot honour: their
 * allocations stay within the share and fail with out of memory.  A managed
 * one is freed by cuMemFreeAsync after its stream's earlier work (free_async).
 */
static CUresult async_fallback(CUresult rc, int rdev, CUmemoryPool pool, CUdeviceptr *dptr,
                               size_t bytesize)
{
    CUdevice dev;
    CUmemoryPool def = NULL;
    if (rc != CUDA_ERROR_OUT_OF_MEMORY || !oversubscribed(rdev) || dptr == NULL ||
        bytesize == 0 || gv_cu.cuCtxGetDevice == NULL || gv_cu.cuDeviceGetDefaultMemPool == NULL ||
        gv_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        gv_cu.cuDeviceGetDefaultMemPool(&def, dev) != CUDA_SUCCESS || pool != def)
        return rc;
    struct charge c;
    if (charge_begin_kind(&c, rdev, bytesize, GV_SHM_MANAGED) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = os_alloc_managed(&c, dptr);
    charge_end(&c, rc, T_MEM, rc == CUDA_SUCCESS ? *dptr : 0);
    return rc;
}

static CUresult alloc_async(alloc_async_fn real, CUdeviceptr *dptr, size_t bytesize,
                            CUstream hStream)
{
    int rdev = gv_ip_current_dev();
    CUmemoryPool pool = current_pool();
    CUresult rc = pooled_async(real, rdev, pool, dptr, bytesize, hStream);
    return async_fallback(rc, rdev, pool, dptr, bytesize);
}

static CUresult alloc_from_pool(alloc_pool_fn real, CUdeviceptr *dptr, size_t bytesize,
                                CUmemoryPool pool, CUstream hStream)
{
    struct track p;
    int rdev = track_get(T_POOL, (uint64_t)(uintptr_t)pool, &p) ? p.rdev : gv_ip_current_dev();
    CUresult rc = pooled_from_pool(real, rdev, dptr, bytesize, pool, hStream);
    return async_fallback(rc, rdev, pool, dptr, bytesize);
}

/* A pooled allocation went back to its pool: its charge becomes cache. */
static void pool_freed(const struct track *t)
{
    CUmemoryPool pool = (CUmemoryPool)(uintptr_t)t->pool;
    pthread_mutex_lock(&pool_lock);
    pool_give_credit_locked(pool, t->rdev, t->bytes);
    pool_reconcile_locked(pool, t->rdev);
    pthread_mutex_unlock(&pool_lock);
}

/*
 * A stream-ordered free.  Memory that oversubscription served from managed
 * memory belongs to no pool: once the work queued on the stream before the
 * free is done, it is freed with cuMemFree (slower, but only on that path).
 */
static CUresult free_async(free_async_fn real, stream_sync_fn sync, CUdeviceptr dptr,
                           CUstream hStream)
{
    struct track t;
    if (track_get(T_MEM, dptr, &t) && t.managed && t.pool == 0 && oversubscribed(t.rdev) &&
        sync != NULL && gv_cu.cuMemFree_v2 != NULL) {
        CUresult rc = sync(hStream);
        if (rc != CUDA_SUCCESS)
            return rc;
        GV_RELEASE(T_MEM, dptr, gv_cu.cuMemFree_v2(dptr));
    }
    GV_RELEASE(T_MEM, dptr, real(dptr, hStream));
}

GV_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    GV_NEED_CU(cuMemAllocAsync);
    return alloc_async(gv_cu.cuMemAllocAsync, dptr, bytesize, hStream);
}

GV_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    GV_NEED_CU(cuMemAllocAsync_ptsz);
    return alloc_async(gv_cu.cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
}

GV_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream)
{
    GV_NEED_CU(cuMemAllocFromPoolAsync);
    return alloc_from_pool(gv_cu.cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
}

GV_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream)
{
    GV_NEED_CU(cuMemAllocFromPoolAsync_ptsz);
    return alloc_from_pool(gv_cu.cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
}

GV_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    GV_NEED_CU(cuMemFreeAsync);
    return free_async(gv_cu.cuMemFreeAsync, gv_cu.cuStreamSynchronize, dptr, hStream);
}

GV_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    GV_NEED_CU(cuMemFreeAsync_ptsz);
    return free_async(gv_cu.cuMemFreeAsync_ptsz, gv_cu.cuStreamSynchronize_ptsz, dptr, hStream);
}

GV_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    GV_NEED_CU(cuMemPoolCreate);
    CUresult rc = gv_cu.cuMemPoolCreate(pool, poolProps);
    if (rc == CUDA_SUCCESS && poolProps != NULL &&
        poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        int rdev = gv_ip_cuda_dev(poolProps->location.id);
        /* Remember the pool's device: its allocations are charged there. */
        if (rdev >= 0)
            track_add(T_POOL, (uint64_t)(uintptr_t)*pool, rdev, 0, false);
    }
    return rc;
}

GV_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    GV_NEED_CU(cuMemPoolDestroy);
    CUresult rc = gv_cu.cuMemPoolDestroy(pool);
    struct track t;
    pthread_mutex_lock(&pool_lock);
    if (rc == CUDA_SUCCESS && track_take(T_POOL, (uint64_t)(uintptr_t)pool, &t))
        uncharge(&t); /* the pool's cache goes back to the driver with it */
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

GV_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    GV_NEED_CU(cuMemPoolTrimTo);
    CUresult rc = gv_cu.cuMemPoolTrimTo(pool, minBytesToKeep);
    struct track p;
    if (rc == CUDA_SUCCESS && track_get(T_POOL, (uint64_t)(uintptr_t)pool, &p))
        pool_reconcile(pool, p.rdev);
    return rc;
}

/* --- arrays ------------------------------------------------------------- */

/* Bytes of a w x h x d array: rows padded to the pitch alignment. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch)
{
    size_t eb = gv_cuda_format_bytes(f);
    /* Formats newer than our list: assume 4 bytes per channel. */
    uint64_t row = pitch_round(mul_sat(mul_sat(w, eb ? eb : 4), ch ? ch : 1));
    return mul_sat(mul_sat(row, h ? h : 1), d ? d : 1);
}

GV_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    GV_NEED_CU(cuArrayCreate_v2);
    uint64_t bytes = d ? array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels) : 0;
    GV_CHARGED(gv_ip_current_dev(), bytes, T_ARRAY, gv_cu.cuArrayCreate_v2(pHandle, d),
               (uintptr_t)*pHandle);
}

GV_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    GV_NEED_CU(cuArray3DCreate_v2);
    uint64_t bytes = d ? array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels) : 0;
    GV_CHARGED(gv_ip_current_dev(), bytes, T_ARRAY, gv_cu.cuArray3DCreate_v2(pHandle, d),
               (uintptr_t)*pHandle);
}

GV_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    GV_NEED_CU(cuArrayDestroy);
    GV_RELEASE(T_ARRAY, (uint64_t)(uintptr_t)hArray, gv_cu.cuArrayDestroy(hArray));
}

GV_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    GV_NEED_CU(cuMipmappedArrayCreate);
    uint64_t bytes = 0;
    for (unsigned l = 0; d != NULL && l < levels && l < 64; l++) {
        uint64_t w = d->Width >> l, h = d->Height >> l, z = d->Depth >> l;
        uint64_t b = array_bytes(w ? w : 1, d->Height ? (h ? h : 1) : 0,
                                 d->Depth ? (z ? z : 1) : 0, d->Format, d->NumChannels);
        bytes = bytes > UINT64_MAX - b ? UINT64_MAX : bytes + b;
    }
    GV_CHARGED(gv_ip_current_dev(), bytes, T_MIPMAP, gv_cu.cuMipmappedArrayCreate(pHandle, d, levels),
               (uintptr_t)*pHandle);
}

GV_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    GV_NEED_CU(cuMipmappedArrayDestroy);
    GV_RELEASE(T_MIPMAP, (uint64_t)(uintptr_t)h, gv_cu.cuMipmappedArrayDestroy(h));
}

/* --- external memory ---------------------------------------------------- */

/*
 * Device memory a graphics API allocated (Vulkan, D3D, NvSciBuf) and this
 * process imports: the interposer never saw its allocation, so the import
 * is charged (its whole size, on the current context's device) and the
 * destroy credits it.  Buffers mapped from it (cuExternalMemoryGetMappedBuffer)
 * add nothing; their cuMemFree passes through untracked.
 */
GV_EXPORT CUresult cuImportExternalMemory(CUexternalMemory *extMem_out,
                                          const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *memHandleDesc)
{
    GV_NEED_CU(cuImportExternalMemory);
    uint64_t bytes = memHandleDesc != NULL && extMem_out != NULL ? memHandleDesc->size : 0;
    GV_CHARGED(gv_ip_current_dev(), bytes, T_EXTERNAL,
               gv_cu.cuImportExternalMemory(extMem_out, memHandleDesc), (uintptr_t)*extMem_out);
}

GV_EXPORT CUresult cuDestroyExternalMemory(CUexternalMemory extMem)
{
    GV_NEED_CU(cuDestroyExternalMemory);
    GV_RELEASE(T_EXTERNAL, (uint64_t)(uintptr_t)extMem, gv_cu.cuDestroyExternalMemory(extMem));
}

/* --- views --------------------------------------------------------------- */

GV_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    GV_NEED_CU(cuMemGetInfo_v2);
    CUresult rc = gv_cu.cuMemGetInfo_v2(free_bytes, total);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t f, t;
    if (gv_ip_mem_view(gv_ip_current_dev(), *free_bytes, &f, &t, NULL)) {
        *free_bytes = (size_t)f;
        *total = (size_t)t;
    }
    return rc;
}

GV_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    GV_NEED_CU(cuDeviceTotalMem_v2);
    CUresult rc = gv_cu.cuDeviceTotalMem_v2(bytes, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t f, t;
    if (gv_ip_mem_view(gv_ip_cuda_dev(dev), UINT64_MAX, &f, &t, NULL))
        *bytes = (size_t)t;
    return rc;
}
