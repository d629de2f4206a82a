/*
 * The region's cached totals recomputed from its slots (the truth): after a
 * lock taken over from a dead owner, at open, and at every change of a slot.
 * The lowest file of the shared region: it calls nothing else here.
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
void cover_slot(struct gv_shm_region *r, int i)
{
    if (atomic_load(&r->slots_hw) < (uint32_t)i + 1)
        atomic_store(&r->slots_hw, (uint32_t)i + 1);
}

/*
 * Sums device d over the slots in use (the truth), with each slot's managed
 * part clamped to its total: a slot edited to claim more managed than it
 * holds must not make device-resident room appear.
 */
void sum_slots(const struct gv_shm_region *r, uint32_t d, uint64_t *used, uint64_t *managed)
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
void recompute_device(struct gv_shm_region *r, uint32_t d)
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
