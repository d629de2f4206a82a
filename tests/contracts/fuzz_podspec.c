/* libFuzzer target: Pod JSON -> allocation request and whole-device counts (untrusted API input). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    /* the whole-device counts of the same pod (docs/scheduler.md, "Whole devices") */
    json_t *pod = json_loadb((const char *)data, size, 0, NULL);
    struct gv_podspec_whole_req w;
    if (json_is_object(pod) && gv_podspec_whole_request(&cfg, pod, &w, &err) == GV_OK) {
        if (w.n > GV_PODSPEC_WHOLE_REQ_MAX)
            abort();
        for (uint32_t i = 0; i < w.n; i++)
            if (w.r[i].count == 0 || strlen(w.r[i].resource) >= GV_PODSPEC_WHOLE_NAME_MAX)
                abort();
        char why[256];
        struct gv_podspec_whole res = {"nvidia.com/mig-1g.10gb", 2, 3, 2};
        uint32_t held = 1;
        gv_podspec_whole_fits(&res, 1, &held, &w, NULL, NULL, NULL, why, sizeof(why));
    }
    json_decref(pod);
    return 0;
}
