/*
 * Fuzz target: the scheduler's annotation glue (src/scheduler/sched.c, sched_pods.c) on
 * what tenants write into pods.  The input is a JSON array of objects fed
 * in order to a scheduler without an API server: {"kind":"Node",...} to
 * gv_sched_node_update, {"deleted":true,...} to gv_sched_pod_delete, any
 * other object to gv_sched_pod_update; then expiry runs.  Half the inputs
 * (by the first byte) run with a placement key, so forged signatures go
 * through the verify path too.  Property: no crash, no leak, no
 * oversubscription: the engine's own checks abort on a corrupt model.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "contracts/placement.h"
#include "scheduler/gv_scheduler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    gv_log_set_level(GV_LOG_ERROR);
    json_t *items = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (!json_is_array(items)) {
        json_decref(items);
        return 0;
    }
    struct gv_sched_config cfg;
    struct gv_sched *s = NULL;
    if (gv_sched_config_default(&cfg, NULL) != GV_OK)
        abort();
    if (data[0] & 1) {
        static const char k[] = "fuzz-key-0123456789abcdef0123456789abcdef";
        if (gv_placement_key_parse(k, sizeof(k) - 1, &cfg.placement_key, NULL) != GV_OK)
            abort();
    }
    if (gv_sched_new(&cfg, NULL, &s, NULL) != GV_OK)
        abort();
    size_t i;
    json_t *o;
    json_array_foreach(items, i, o)
    {
        if (!json_is_object(o))
            continue;
        const char *kind = json_string_value(json_object_get(o, "kind"));
        if (kind != NULL && strcmp(kind, "Node") == 0)
            gv_sched_node_update(s, o);
        else if (json_is_true(json_object_get(o, "deleted")))
            gv_sched_pod_delete(s, o);
        else
            gv_sched_pod_update(s, o);
    }
    gv_sched_expire(s);
    gv_sched_free(s);
    gv_sched_config_clear(&cfg);
    json_decref(items);
    return 0;
}
