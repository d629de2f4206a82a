/*
 * Placements verified as the scheduler verifies them.
 *
 * A tenant can patch its own pod's annotations, so gpuvisor.io/assignment
 * is what the scheduler wrote only when its signature verifies under the
 * placement key (src/contracts/placement.h).  The scheduler and the node
 * agents ignore a placement that does not; the plugin must too, or a
 * forged one would count in `inspect`'s figures and in the cluster `defrag`
 * plans on and evicts from.
 *
 * The key is read from --placement-key-file, else from the Secret the
 * scheduler mounts (--placement-key-secret, gpuvisor-system/
 * gpuvisor-placement-key, data "key"), which a cluster admin may read and a
 * viewer may not.  Without it the plugin says so on stderr and reads
 * placements as written; `defrag --apply` then refuses to evict unless told
 * --trust-annotations.  The key also signs, so it is never granted to the
 * viewer or defrag roles (deploy/monitoring).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/base64.h>
#include <mbedtls/platform_util.h>

#include "contracts/placement.h"
#include "kubectl/gv_kubectl.h"

/* NAMESPACE/NAME as the API names them (DNS-1123: a label, then a
 * subdomain of at most 253 characters): nothing a request path could
 * misread. */
static bool secret_ref_ok(const char *ref)
{
    const char *slash = strchr(ref, '/');
    char ns[64];
    if (slash == NULL || (size_t)(slash - ref) >= sizeof(ns))
        return false;
    memcpy(ns, ref, (size_t)(slash - ref));
    ns[slash - ref] = '\0';
    size_t n = strlen(slash + 1);
    return gv_kube_dns_label(ns) && n > 0 && n <= 253 &&
           strspn(slash + 1, "abcdefghijklmnopqrstuvwxyz0123456789-.") == n;
}

/* The Secret's data.key, base64 as the API sends it, decoded and parsed. */
static gv_status key_from_secret(struct gv_kube_client *kube, const char *ref,
                                 struct gv_placement_key **out, struct gv_error *err)
{
    const char *slash = strchr(ref, '/');
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%.*s/secrets/%s", (int)(slash - ref), ref,
             slash + 1);
    json_t *secret = NULL;
    gv_status st = gv_kube_get(kube, path, &secret, err);
    if (st != GV_OK)
        return st;
    const char *b64 =
        json_string_value(json_object_get(json_object_get(secret, "data"), "key"));
    size_t blen = b64 != NULL ? strlen(b64) : 0, olen = 0;
    unsigned char *raw = blen > 0 && blen <= 65536 ? malloc(blen) : NULL;
    if (b64 == NULL || blen == 0) {
        st = gv_error_set(err, GV_EINVAL, "Secret %s has no data \"key\"", ref);
    } else if (raw == NULL) {
        st = gv_error_set(err, blen > 65536 ? GV_EINVAL : GV_ENOMEM,
                          "Secret %s: data \"key\" %s", ref,
                          blen > 65536 ? "is over 64 KiB" : "cannot be read: out of memory");
    } else if (mbedtls_base64_decode(raw, blen, &olen, (const unsigned char *)b64, blen) != 0) {
        st = gv_error_set(err, GV_EINVAL, "Secret %s: data \"key\" is not base64", ref);
    } else {
        struct gv_error e = {0};
        st = gv_placement_key_parse((const char *)raw, olen, out, &e);
        if (st != GV_OK)
            gv_error_set(err, st, "Secret %s: %s", ref, e.msg);
    }
    if (raw != NULL) {
        mbedtls_platform_zeroize(raw, blen);
        free(raw);
    }
    json_decref(secret);
    return st;
}

int kc_placement_key_find(struct gv_kube_client *kube, const struct kc_opts *o,
                          struct gv_placement_key **key, char *note, size_t cap,
                          struct gv_error *err)
{
    *key = NULL;
    note[0] = '\0';
    if (o->placement_key_file != NULL) {
        if (gv_placement_key_load(o->placement_key_file, key, err) != GV_OK)
            return KC_USAGE;
        snprintf(note, cap, "file %s", o->placement_key_file);
        return KC_OK;
    }
    if (o->placement_key_secret == NULL || o->placement_key_secret[0] == '\0') {
        snprintf(note, cap, "no key asked for (--placement-key-secret \"\")");
        return KC_OK;
    }
    if (!secret_ref_ok(o->placement_key_secret)) {
        gv_error_set(err, GV_EINVAL, "--placement-key-secret %s: not NAMESPACE/NAME",
                     o->placement_key_secret);
        return KC_USAGE;
    }
    struct gv_error e = {0};
    if (key_from_secret(kube, o->placement_key_secret, key, &e) == GV_OK) {
        snprintf(note, cap, "Secret %s", o->placement_key_secret);
        return KC_OK;
    }
    /* Forbidden (a viewer), not found (an insecure deployment), unreadable:
     * the commands still run, on placements as written, and say so. */
    snprintf(note, cap, "cannot read Secret %s: %s", o->placement_key_secret, e.msg);
    return KC_OK;
}

bool kc_placement_counts(const struct kc_opts *o, const json_t *pod, char *why, size_t cap)
{
    if (o->placement_key == NULL)
        return true;
    struct gv_error e = {0};
    if (gv_placement_check_pod(o->placement_key, o->unsigned_before, pod, &e) == GV_OK)
        return true;
    snprintf(why, cap, "%s", e.msg);
    return false;
}

void kc_placement_warn(const struct kc_opts *o)
{
    if (o->placement_key != NULL || o->trust_annotations)
        return;
    fprintf(stderr,
            "kubectl-gpuvisor: warning: placements are read as written, not verified (%s): a "
            "placement a tenant forged on its own pod would count here; give "
            "--placement-key-file (the gpuvisor-placement-key Secret's key) to verify them\n",
            o->placement_key_note != NULL ? o->placement_key_note : "no placement key");
}
