/*
 * Fuzz target: reading a shared region file, which the container's
 * processes can write and the node agent's monitor and `gpuvisor ps` read.
 * The input is laid over a zeroed region-sized file; whatever gv_shm_open
 * accepts is then walked the way readers walk it.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/gv_shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *buf;
    if (path[0] == '\0') {
        snprintf(path, sizeof(path), "/tmp/gv-fuzz-shm.XXXXXX");
        int fd = mkstemp(path);
        if (fd < 0)
            return 0;
        close(fd);
        atexit(remove_file);
        buf = malloc(sizeof(struct gv_shm_region));
        if (buf == NULL)
            return 0;
    }
    memset(buf, 0, sizeof(struct gv_shm_region));
    memcpy(buf, data, size < sizeof(struct gv_shm_region) ? size : sizeof(struct gv_shm_region));
    /* Odd-length inputs also exercise files of the wrong size. */
    size_t len = (size & 1) ? size : sizeof(struct gv_shm_region);
    if (len > sizeof(struct gv_shm_region))
        len = sizeof(struct gv_shm_region);
    int fd = open(path, O_WRONLY | O_TRUNC);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    close(fd);
    struct gv_shm *shm = NULL;
    struct gv_error err;
    if (gv_shm_open(path, GV_SHM_READONLY, &shm, &err) != GV_OK)
        return 0;
    const struct gv_shm_region *r = gv_shm_region(shm);
    uint32_t nd = atomic_load(&r->ndevices);
    if (nd > GV_SHM_MAX_DEVICES)
        abort(); /* validation must have refused it */
    size_t sum = 0;
    for (uint32_t d = 0; d < nd; d++)
        sum += strnlen(r->devices[d].uuid, GV_SHM_UUID_LEN) + gv_shm_mem_used(shm, (int)d);
    (void)gv_shm_device_find(shm, "GPU-fuzz");
    for (int i = 0; i < 8; i++)
        sum += gv_shm_proc_alive(&r->procs[i]);
    (void)sum;
    gv_shm_close(shm);
    return 0;
}
