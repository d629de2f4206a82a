/* Fuzz target: ResourceQuota objects (whoever may create one writes them)
 * through the quota table, then a check and the metrics. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "scheduler/quota.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *obj = json_loadb((const char *)data, size, 0, NULL);
    if (obj == NULL)
        return 0;
    struct gv_quota *q = gv_quota_new("nvidia.com/gpumem", "nvidia.com/gpucores");
    if (q == NULL)
        abort();
    gv_quota_charge(q, "p1", "default", 1000, 10);
    gv_quota_object(q, obj, false);
    char why[256];
    gv_quota_fits(q, "default", "p2", UINT64_MAX / 2, 100, NULL, NULL, why, sizeof(why));
    FILE *devnull = fopen("/dev/null", "w");
    if (devnull != NULL) {
        gv_quota_metrics(q, devnull, NULL, NULL);
        fclose(devnull);
    }
    gv_quota_object(q, obj, true);
    gv_quota_free(q);
    json_decref(obj);
    return 0;
}
