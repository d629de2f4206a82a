/*
 * jansson's allocator hook: scratch regions and zones (gv_jalloc.h).
 *
 * A zone is one reservation of address space.  Its first pages hold the
 * stack of free page numbers; the rest are object pages.  Objects are
 * bump-allocated into the zone's current page; each page counts its live
 * objects plus one while it is the current page, and whoever drops that
 * count to zero (a free on any thread, or the switch to a new current
 * page) gives the page back with MADV_DONTNEED and pushes it on the stack.
 * Space freed on a page is not reused before the whole page is free: the
 * objects a zone is for die together, so a page is either filling or
 * draining, and this keeps the hot path a bump and an atomic increment.
 */
#include "common/gv_jalloc.h"
#include "common/gv_sanitizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALIGN 16u

/* Under AddressSanitizer a released page is poisoned until it is taken
 * again, so a use after free of a zone object is caught, as it would be
 * for malloc'd memory (ASan does not see inside the zone otherwise). */
#if GV_ASAN
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

/* size rounded up to ALIGN; 0 when that overflows. */
static size_t aligned(size_t size)
{
    size_t need = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    return need < size ? 0 : need;
}

struct page_head {
    _Atomic uint32_t refs; /* live objects, +1 while the zone's current page */
    uint32_t unused[3];    /* keeps objects 16-byte aligned */
};
_Static_assert(sizeof(struct page_head) == ALIGN, "objects follow the head at 16-byte alignment");

struct gv_jzone {
    uintptr_t base, end; /* the whole reservation */
    uintptr_t pages;     /* first object page */
    size_t page_size;
    pthread_mutex_t mu; /* guards everything below */
    uintptr_t cur_page; /* 0: none yet */
    uintptr_t cur, fresh; /* bump pointer in cur_page; first page never used */
    uint32_t *free_stack; /* in the reservation's first pages */
    size_t n_free, in_use;
};

struct placement {
    struct gv_jscratch *scratch;
    struct gv_jzone *zone;
};

static _Thread_local struct placement tl;
static struct gv_jzone *_Atomic zones[GV_JZONE_MAX];
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;

/* ---- zones ------------------------------------------------------------- */

/* Caller holds z->mu.  0 when the zone is full. */
static uintptr_t take_page(struct gv_jzone *z)
{
    uintptr_t p;
    if (z->n_free > 0)
        p = z->pages + (uintptr_t)z->free_stack[--z->n_free] * z->page_size;
    else if (z->fresh < z->end)
        p = z->fresh, z->fresh += z->page_size;
    else
        return 0;
    ASAN_UNPOISON_MEMORY_REGION((void *)p, z->page_size);
    atomic_store_explicit(&((struct page_head *)p)->refs, 1, memory_order_relaxed);
    z->in_use++;
    return p;
}

static void release_page(struct gv_jzone *z, uintptr_t page)
{
    /* Content is dropped, the address stays reserved: the next use faults in a zero page. */
    madvise((void *)page, z->page_size, MADV_DONTNEED);
    ASAN_POISON_MEMORY_REGION((void *)page, z->page_size);
    pthread_mutex_lock(&z->mu);
    z->free_stack[z->n_free++] = (uint32_t)((page - z->pages) / z->page_size);
    z->in_use--;
    pthread_mutex_unlock(&z->mu);
}

static void unref_page(struct gv_jzone *z, uintptr_t page)
{
    struct page_head *h = (struct page_head *)page;
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1)
        release_page(z, page);
}

static void *zone_alloc(struct gv_jzone *z, size_t size)
{
    size_t need = aligned(size);
    if (need == 0 || need > z->page_size - sizeof(struct page_head))
        return NULL;
    uintptr_t retired = 0;
    void *p = NULL;
    pthread_mutex_lock(&z->mu);
    if (z->cur_page == 0 || z->cur_page + z->page_size - z->cur < need) {
        uintptr_t page = take_page(z);
        if (page != 0) {
            retired = z->cur_page;
            z->cur_page = page;
            z->cur = page + sizeof(struct page_head);
        }
    }
    if (z->cur_page != 0 && z->cur_page + z->page_size - z->cur >= need) {
        p = (void *)z->cur;
        z->cur += need;
        atomic_fetch_add_explicit(&((struct page_head *)z->cur_page)->refs, 1,
                                  memory_order_relaxed);
    }
    pthread_mutex_unlock(&z->mu);
    if (retired != 0)
        unref_page(z, retired); /* no longer current: free once its objects are */
    return p;
}

gv_status gv_jzone_new(size_t reserve_bytes, struct gv_jzone **out, struct gv_error *err)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    size_t n_pages = (reserve_bytes + ps - 1) / ps;
    if (n_pages < 2 || n_pages > UINT32_MAX)
        return gv_error_set(err, GV_EINVAL, "zone: %zu bytes is not a usable reservation",
                            reserve_bytes);
    /* The stack needs one slot per object page; it takes whole pages. */
    size_t stack_pages = (n_pages * sizeof(uint32_t) + ps - 1) / ps;
    if (stack_pages >= n_pages)
        return gv_error_set(err, GV_EINVAL, "zone: reservation too small");
    struct gv_jzone *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return gv_error_set(err, GV_ENOMEM, "zone: out of memory");
    void *m = mmap(NULL, n_pages * ps, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        free(z);
        return gv_error_set(err, GV_ENOMEM, "zone: cannot reserve %zu bytes", n_pages * ps);
    }
    z->base = (uintptr_t)m;
    z->end = z->base + n_pages * ps;
    z->pages = z->fresh = z->base + stack_pages * ps;
    z->page_size = ps;
    z->free_stack = m;
    pthread_mutex_init(&z->mu, NULL);
    for (size_t i = 0; i < GV_JZONE_MAX; i++) {
        struct gv_jzone *expected = NULL;
        if (atomic_compare_exchange_strong(&zones[i], &expected, z)) {
            *out = z;
            return GV_OK;
        }
    }
    pthread_mutex_destroy(&z->mu);
    munmap(m, n_pages * ps);
    free(z);
    return gv_error_set(err, GV_EUNAVAILABLE, "zone: %d zones exist already", GV_JZONE_MAX);
}

void gv_jzone_free(struct gv_jzone *z)
{
    if (z == NULL)
        return;
    for (size_t i = 0; i < GV_JZONE_MAX; i++) {
        struct gv_jzone *expected = z;
        atomic_compare_exchange_strong(&zones[i], &expected, NULL);
    }
    /* the address range may be mapped again for something else */
    ASAN_UNPOISON_MEMORY_REGION((void *)z->base, z->end - z->base);
    munmap((void *)z->base, z->end - z->base);
    pthread_mutex_destroy(&z->mu);
    free(z);
}

void gv_jzone_enter(struct gv_jzone *z)
{
    tl.scratch = NULL;
    tl.zone = z;
}

size_t gv_jzone_pages_in_use(struct gv_jzone *z)
{
    pthread_mutex_lock(&z->mu);
    size_t n = z->in_use;
    pthread_mutex_unlock(&z->mu);
    return n;
}

bool gv_jzone_owns(const struct gv_jzone *z, const void *p)
{
    return (uintptr_t)p >= z->pages && (uintptr_t)p < z->end;
}

/* ---- scratch regions --------------------------------------------------- */

void gv_jscratch_open(struct gv_jscratch *s, size_t cap)
{
    void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        memset(s, 0, sizeof(*s));
        return;
    }
    s->base = s->cur = (uintptr_t)p;
    s->end = s->base + cap;
}

void gv_jscratch_close(struct gv_jscratch *s)
{
    if (s->base != 0)
        munmap((void *)s->base, s->end - s->base);
    memset(s, 0, sizeof(*s));
}

void gv_jscratch_enter(struct gv_jscratch *s)
{
    tl.zone = NULL;
    tl.scratch = s->base != 0 ? s : NULL;
}

static void *scratch_alloc(struct gv_jscratch *s, size_t size)
{
    size_t need = aligned(size);
    if (need == 0 || s->end - s->cur < need)
        return NULL;
    void *p = (void *)s->cur;
    s->cur += need;
    return p;
}

/* ---- the hook ---------------------------------------------------------- */

void gv_jalloc_leave(void)
{
    tl.scratch = NULL;
    tl.zone = NULL;
}

static void *hook_malloc(size_t size)
{
    void *p = NULL;
    if (tl.scratch != NULL)
        p = scratch_alloc(tl.scratch, size);
    else if (tl.zone != NULL)
        p = zone_alloc(tl.zone, size);
    return p != NULL ? p : malloc(size);
}

static void hook_free(void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (p == NULL)
        return;
    /* Scratch objects die with their region; only the thread that placed
     * them there frees them (the region is private to one call). */
    if (tl.scratch != NULL && a >= tl.scratch->base && a < tl.scratch->end)
        return;
    for (size_t i = 0; i < GV_JZONE_MAX; i++) {
        struct gv_jzone *z = atomic_load_explicit(&zones[i], memory_order_acquire);
        if (z != NULL && gv_jzone_owns(z, p)) {
            unref_page(z, a - (a - z->pages) % z->page_size);
            return;
        }
    }
    free(p);
}

static void install(void)
{
    json_set_alloc_funcs(hook_malloc, hook_free);
}

void gv_jalloc_init(void)
{
    pthread_once(&hook_once, install);
}
