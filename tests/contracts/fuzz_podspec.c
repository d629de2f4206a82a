/* libFuzzer target: Pod JSON -> allocation request (untrusted API input). */
#include <stdint.h>
#include <stdlib.h>

#include "contracts/podspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    struct gv_alloc_request *r = NULL;
    struct gv_error err;
    if (gv_podspec_request_text(&cfg, (const char *)data, size, &r, &err) == GV_OK) {
        if (r->n_containers > GV_ALLOC_MAX_CONTAINERS)
            abort();
        for (uint32_t i = 0; i < r->n_containers; i++)
            if (r->containers[i].num_gpu == 0 || r->containers[i].milli > GV_ALLOC_MILLI)
                abort();
        gv_alloc_request_free(r);
    } else if (r != NULL) {
        abort();
    }
    return 0;
}
