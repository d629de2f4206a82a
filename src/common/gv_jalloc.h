/*
 * Where jansson allocates (docs/common-jalloc.md).
 *
 * jansson has one process-wide allocator hook.  This module owns it so
 * that a thread can choose where the JSON it builds is placed:
 *
 *   - a scratch region: bump allocation in one mapping that is returned
 *     whole; frees inside it do nothing.  For a parse tree that dies with
 *     the request (the scheduler's ExtenderArgs) so that its ~10,000 small
 *     allocations never mix with longer-lived heap objects.
 *   - a zone: pages of its own, each returned to the kernel as soon as the
 *     last object on it is freed.  For objects that are built together and
 *     die together but outlive the call (the node agent's cached forms of
 *     pods waiting for Allocate), so that freeing them leaves no holes
 *     between long-lived heap objects.
 *
 * With no placement on the calling thread (the default) the hook is plain
 * malloc/free.  Allocations a placement cannot take (too large, region or
 * zone full) fall back to malloc; frees are routed by address, so any
 * thread may free any object.
 */
#ifndef GV_JALLOC_H
#define GV_JALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

/* Installs the hook (once; later calls do nothing).  Call before any
 * jansson use: an object allocated before must not be freed through it. */
void gv_jalloc_init(void);

/* ---- scratch regions --------------------------------------------------- */

struct gv_jscratch {
    uintptr_t base, cur, end;
};

/* Maps cap bytes of address space (pages cost memory only once touched);
 * on failure the region is empty and every allocation falls back to malloc. */
void gv_jscratch_open(struct gv_jscratch *s, size_t cap);
/* Unmaps the region: every object in it is gone. */
void gv_jscratch_close(struct gv_jscratch *s);
/* Places this thread's jansson allocations in s until gv_jalloc_leave(). */
void gv_jscratch_enter(struct gv_jscratch *s);

/* ---- zones ------------------------------------------------------------- */

struct gv_jzone;

/* Reserves reserve_bytes of address space (rounded to pages).  At most
 * GV_JZONE_MAX zones exist at once. */
#define GV_JZONE_MAX 4
gv_status gv_jzone_new(size_t reserve_bytes, struct gv_jzone **out, struct gv_error *err);
/* Only once every object allocated in the zone has been freed. */
void gv_jzone_free(struct gv_jzone *z);
/* Places this thread's jansson allocations in z until gv_jalloc_leave(). */
void gv_jzone_enter(struct gv_jzone *z);
/* Pages holding live objects (or being filled). */
size_t gv_jzone_pages_in_use(struct gv_jzone *z);
bool gv_jzone_owns(const struct gv_jzone *z, const void *p);

/* Ends this thread's scratch or zone placement. */
void gv_jalloc_leave(void);

#endif
