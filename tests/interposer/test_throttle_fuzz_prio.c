/*
 * Fuzz target: the node priority board.  Its file is writable by every
 * tenant on the node, so its content is untrusted: any bytes must either be
 * refused at open or be read without a crash, and a wait must stay bounded.
 * The input becomes the file's content; the first 8 bytes also give "now".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interposer/priority.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void remove_dir(void)
{
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[128];
    struct gv_prio_board *b = NULL;
    struct gv_error err;
    uint64_t now = 0;

    if (dir[0] == '\0') {
        snprintf(dir, sizeof(dir), "/tmp/gv-fuzz-prio-XXXXXX");
        if (mkdtemp(dir) == NULL)
            abort();
        atexit(remove_dir); /* every input's file is unlinked; the folder goes last */
    }
    snprintf(path, sizeof(path), "%s/gpu-GPU-fuzz.prio", dir);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    if (size >= 8)
        memcpy(&now, data, 8);
    for (int level = 0; level < 3; level++) {
        if (gv_prio_open(dir, "GPU-fuzz", level, now, &b, &err) != GV_OK)
            continue;
        /* Waits are bounded whatever the others published. */
        if (gv_prio_wait_ns(b, now) > 5000000ull)
            abort();
        (void)gv_prio_higher_present(b, now);
        gv_prio_publish(b, now, now + 1000);
        gv_prio_close(b);
    }
    unlink(path);
    return 0;
}
