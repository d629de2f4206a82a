/*
 * What the kubelet's device manager has on record: its checkpoint file
 * (<device-plugins dir>/kubelet_internal_checkpoint, written by the kubelet
 * after every allocation).  Allocate asks one question of it: does the
 * kubelet hold devices of our resource for this container?  A container
 * the kubelet holds devices for cannot be the one it is admitting again
 * (allocator.c, find_readmission).
 *
 * The file is the kubelet's (root on the host; no tenant writes it), but it
 * is still parsed defensively: any shape other than the one below reads as
 * "unknown", and unknown never lets an answer be handed out again.
 *
 *   {"Data": {"PodDeviceEntries": [{"PodUID": "...", "ContainerName": "...",
 *             "ResourceName": "...", "DeviceIDs": <list, or NUMA node ->
 *             list since 1.20>, "AllocResp": "<base64>"}, ...],
 *             "RegisteredDevices": {...}},
 *    "Checksum": n}
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/gv_file.h"
#include "node/allocate/allocate_internal.h"

/* The kubelet's checkpoint stays far below this even on large nodes. */
#define CHECKPOINT_MAX_BYTES (32u << 20)

static bool str_is(json_t *o, const char *key, const char *want)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v != NULL && strcmp(v, want) == 0;
}

/* Whether DeviceIDs names at least one device (either form). */
static bool has_ids(json_t *ids)
{
    if (json_is_array(ids))
        return json_array_size(ids) > 0;
    const char *k;
    json_t *v;
    json_object_foreach(ids, k, v)
        if (json_is_array(v) && json_array_size(v) > 0)
            return true;
    return false;
}

json_t *kubelet_checkpoint_parse(const char *text, size_t len)
{
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *entries = json_object_get(json_object_get(root, "Data"), "PodDeviceEntries");
    json_t *out = NULL;
    if (json_is_array(entries))
        out = json_incref(entries);
    else if (json_is_null(entries)) /* Go writes an empty list as null */
        out = json_array();
    json_decref(root);
    return out;
}

bool kubelet_checkpoint_holds(json_t *entries, const char *uid, const char *ctr,
                              const char *resource)
{
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
        if (str_is(e, "PodUID", uid) && str_is(e, "ContainerName", ctr) &&
            str_is(e, "ResourceName", resource) && has_ids(json_object_get(e, "DeviceIDs")))
            return true;
    return false;
}

json_t *kubelet_checkpoint_load(const char *path)
{
    if (path == NULL || path[0] == '\0')
        return NULL;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)CHECKPOINT_MAX_BYTES)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    struct gv_error err;
    if (gv_file_read_all(path, &text, &len, &err) != GV_OK)
        return NULL;
    json_t *entries = kubelet_checkpoint_parse(text, len);
    free(text);
    return entries;
}
