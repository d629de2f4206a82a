/*
 * Fuzz target: the node annotation gpuvisor.io/node-gpus as another process
 * wrote it.  Whatever decodes must encode and decode back to the same
 * inventory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "contracts/inventory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gv_inventory a, b;
    if (gv_inventory_decode((const char *)data, size, &a, NULL) != GV_OK)
        return 0;
    char *text = NULL;
    if (gv_inventory_encode(&a, &text, NULL) != GV_OK)
        abort();
    if (gv_inventory_decode(text, strlen(text), &b, NULL) != GV_OK)
        abort();
    if (a.n_gpus != b.n_gpus || strcmp(a.driver_version, b.driver_version) != 0)
        abort();
    for (uint32_t i = 0; i < a.n_gpus; i++)
        if (strcmp(a.gpus[i].uuid, b.gpus[i].uuid) != 0 || a.gpus[i].split != b.gpus[i].split ||
            a.gpus[i].healthy != b.gpus[i].healthy || a.gpus[i].numa != b.gpus[i].numa ||
            a.gpus[i].memory_mib != b.gpus[i].memory_mib)
            abort();
    /* whole devices (MIG, passthrough, mdev) round-trip field for field */
    if (memcmp(&a.whole, &b.whole, sizeof(a.whole)) != 0)
        abort();
    free(text);
    return 0;
}
