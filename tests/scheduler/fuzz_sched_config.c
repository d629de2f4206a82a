/* Fuzz target: the scheduler's JSON config parser. */
#include <stdint.h>
#include <stdlib.h>

#include "scheduler/gv_scheduler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_sched_config c;
    struct gv_error err;
    if (gv_sched_config_default(&c, &err) != GV_OK)
        abort();
    gv_sched_config_parse((const char *)data, size, &c, &err);
    gv_sched_config_clear(&c);
    return 0;
}
