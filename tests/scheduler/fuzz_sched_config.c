/* Fuzz target: the scheduler's config parsers, JSON and HAMi's device
 * ConfigMap YAML (chosen the way gv_sched_config_load chooses). */
#include <stdint.h>
#include <stdlib.h>

#include "scheduler/gv_scheduler.h"
#include "scheduler/hami_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_sched_config c;
    struct gv_error err;
    if (gv_sched_config_default(&c, &err) != GV_OK)
        abort();
    if (gv_sched_config_is_hami((const char *)data, size))
        gv_sched_hami_config_parse((const char *)data, size, &c, &err);
    else
        gv_sched_config_parse((const char *)data, size, &c, &err);
    gv_sched_config_clear(&c);
    return 0;
}
