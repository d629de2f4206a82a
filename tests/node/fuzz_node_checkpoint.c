/*
 * Fuzz target: the kubelet's device manager checkpoint as Allocate reads it
 * (src/node/allocate/kubelet_checkpoint.c).  Whatever parses is a list whose
 * lookups never crash, and an entry built from the input's own first
 * PodDeviceEntry is found in it.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "node/allocate/allocate_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *entries = kubelet_checkpoint_parse((const char *)data, size);
    if (entries == NULL)
        return 0;
    if (!json_is_array(entries))
        abort();
    (void)kubelet_checkpoint_holds(entries, "uid", "main", "nvidia.com/gpu");
    json_t *e = json_array_get(entries, 0);
    const char *uid = json_string_value(json_object_get(e, "PodUID"));
    const char *ctr = json_string_value(json_object_get(e, "ContainerName"));
    const char *res = json_string_value(json_object_get(e, "ResourceName"));
    json_t *ids = json_object_get(e, "DeviceIDs");
    if (uid && ctr && res && json_is_array(ids) && json_array_size(ids) > 0 &&
        !kubelet_checkpoint_holds(entries, uid, ctr, res))
        abort();
    json_decref(entries);
    return 0;
}
