/*
 * Fuzz target: a hostile process of the container writing arbitrary bytes
 * into its shared region while a process holds charges in it.  Whatever is
 * written, the process must not crash or hang, and must never be allowed
 * to hold more than its own configured limit (docs/shared-region.md, "A
 * hostile container").
 *
 * Input: records of [offset: 3 bytes little-endian, taken modulo the region
 * size][length: 1 byte, at most 64][length bytes], applied to the region
 * after the process registered a device (limit LIMIT) and charged 300
 * bytes; the last input byte picks the oversubscription flags.  Then
 * reservations of several sizes and kinds, releases and conversions run.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/gv_shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIMIT 1000u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_shm *shm = NULL;
    if (gv_shm_open(NULL, 0, &shm, NULL) != GV_OK)
        return 0;
    gv_shm_set_lock_timeout(shm, 1); /* a forged live owner costs 1 ms, not 10 s */
    int idx = -1;
    bool over = size > 0 && (data[size - 1] & 1);
    struct gv_shm_limits lim = {LIMIT, 5000, over ? 400 : 0, 50,
                                over ? GV_SHM_DEV_OVERSUBSCRIBE : 0};
    if (gv_shm_proc_attach(shm, getpid(), 0, NULL) != GV_OK ||
        gv_shm_device_attach(shm, "GPU-fuzz", &lim, &idx, NULL) != GV_OK ||
        gv_shm_mem_reserve(shm, idx, 300, GV_SHM_DEVICE, NULL) != GV_OK)
        abort(); /* a fresh private region always works */

    uint8_t *r = (uint8_t *)gv_shm_region(shm);
    const size_t rsize = sizeof(struct gv_shm_region);
    size_t i = 0;
    while (i + 4 <= size) {
        size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8 | (size_t)data[i + 2] << 16) % rsize;
        size_t len = data[i + 3] % 65;
        i += 4;
        if (len > size - i)
            len = size - i;
        if (len > rsize - off)
            len = rsize - off;
        memcpy(r + off, data + i, len);
        i += len;
    }

    static const uint64_t sizes[] = {1, 99, 300, 701, 1000, 1001, UINT64_MAX};
    static const enum gv_shm_kind kinds[] = {GV_SHM_DEVICE, GV_SHM_MANAGED, GV_SHM_ANY};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        bool managed = false;
        enum gv_shm_kind kind = kinds[k % 3];
        if (gv_shm_mem_reserve(shm, idx, sizes[k], kind, &managed) == GV_OK &&
            gv_shm_mem_held(shm, idx) > LIMIT)
            abort(); /* the region raised what this process may hold */
        uint64_t limit;
        if (gv_shm_limit(shm, idx, &limit, NULL, NULL) && (limit == 0 || limit > LIMIT))
            abort();
        (void)gv_shm_mem_used(shm, idx);
        if (k % 2 == 1)
            gv_shm_mem_release(shm, idx, sizes[k - 1], managed);
        (void)gv_shm_mem_to_managed(shm, idx, 50);
    }
    (void)gv_shm_device_find(shm, "GPU-fuzz");
    (void)gv_shm_reclaim(shm);
    gv_shm_close(shm);
    return 0;
}
