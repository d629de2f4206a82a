/*
 * Bench helper: creates shared regions as the interposer would (through the
 * shm API), one per argument "PATH:UUID:LIMIT_BYTES:USED_BYTES", each with
 * one process slot charged USED_BYTES, and exits without releasing them (the
 * slots stay, as after a crash).  So the monitor bench reads real regions
 * without 110 CUDA processes on a shared machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/gv_shm.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char *spec = argv[i], *c3 = strrchr(spec, ':');
        if (c3 == NULL)
            return 2;
        *c3 = '\0';
        char *c2 = strrchr(spec, ':');
        if (c2 == NULL)
            return 2;
        *c2 = '\0';
        char *c1 = strrchr(spec, ':');
        if (c1 == NULL)
            return 2;
        *c1 = '\0';
        struct gv_shm *shm;
        struct gv_error err;
        int idx;
        struct gv_shm_limits lim = {.mem_limit = strtoull(c2 + 1, NULL, 10), .mem_physical = 80ull << 30};
        if (gv_shm_open(spec, GV_SHM_CREATE, &shm, &err) != GV_OK ||
            gv_shm_device_attach(shm, c1 + 1, &lim, &idx, &err) != GV_OK ||
            gv_shm_proc_attach(shm, getpid(), 0, &err) != GV_OK) {
            fprintf(stderr, "%s: %s\n", spec, err.msg);
            return 1;
        }
        if (gv_shm_mem_reserve(shm, idx, strtoull(c3 + 1, NULL, 10), GV_SHM_DEVICE, NULL) != GV_OK)
            return 1;
        /* not closed: the slot stays charged */
    }
    return 0;
}
