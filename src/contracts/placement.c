/* Placement signatures (HMAC-SHA256, mbedTLS): see placement.h. */
#include "contracts/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>

#include "alloc/gv_alloc.h"
#include "common/gv_file.h"

/* Domain separation: a MAC made for something else under the same key can
 * never pass for a placement. */
static const char sig_domain[] = "gpuvisor.io/placement/v1";
/* Nominated holds: the same key and MAC, a domain of their own, so a hold
 * signature never verifies as a placement nor the reverse. */
static const char hold_domain[] = "gpuvisor.io/nominated-hold/v1";

struct gv_placement_key {
    size_t n;
    size_t len[GV_PLACEMENT_KEYS_MAX];
    unsigned char *key[GV_PLACEMENT_KEYS_MAX];
};

void gv_placement_key_free(struct gv_placement_key *k)
{
    if (k == NULL)
        return;
    for (size_t i = 0; i < k->n; i++) {
        mbedtls_platform_zeroize(k->key[i], k->len[i]);
        free(k->key[i]);
    }
    free(k);
}

gv_status gv_placement_key_parse(const char *text, size_t len, struct gv_placement_key **out,
                                 struct gv_error *err)
{
    struct gv_placement_key *k = calloc(1, sizeof(*k));
    gv_status st = GV_OK;
    size_t lineno = 0;
    *out = NULL;
    if (k == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t a = pos, b = end;
        lineno++;
        pos = end + 1;
        while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r'))
            a++;
        while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r'))
            b--;
        if (a == b || text[a] == '#')
            continue;
        if (memchr(text + a, '\0', b - a) != NULL) {
            st = gv_error_set(err, GV_EINVAL, "placement key line %zu holds a NUL byte", lineno);
            goto fail;
        }
        if (b - a < GV_PLACEMENT_KEY_MIN) {
            st = gv_error_set(err, GV_EINVAL,
                              "placement key line %zu is %zu bytes; at least %d are needed "
                              "(e.g. `openssl rand -hex 32`)",
                              lineno, b - a, GV_PLACEMENT_KEY_MIN);
            goto fail;
        }
        if (k->n == GV_PLACEMENT_KEYS_MAX) {
            st = gv_error_set(err, GV_EINVAL, "more than %d placement keys", GV_PLACEMENT_KEYS_MAX);
            goto fail;
        }
        if ((k->key[k->n] = malloc(b - a)) == NULL) {
            st = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto fail;
        }
        memcpy(k->key[k->n], text + a, b - a);
        k->len[k->n++] = b - a;
    }
    if (k->n == 0) {
        st = gv_error_set(err, GV_EINVAL, "no placement key (the file is empty)");
        goto fail;
    }
    *out = k;
    return GV_OK;
fail:
    gv_placement_key_free(k);
    return st;
}

gv_status gv_placement_key_load(const char *path, struct gv_placement_key **out,
                                struct gv_error *err)
{
    char *text = NULL;
    size_t len = 0;
    gv_status st = gv_file_read_all(path, &text, &len, err);
    if (st != GV_OK)
        return st;
    st = gv_placement_key_parse(text, len, out, err);
    mbedtls_platform_zeroize(text, len);
    free(text);
    if (st != GV_OK)
        gv_error_prefix(err, "%s", path);
    return st;
}

/* HMAC over the NUL-separated fields: no field can hold a NUL, so no two
 * different tuples give the same message. */
static int mac(const char *domain, const unsigned char *key, size_t key_len,
               const char *const fields[4], unsigned char out[32])
{
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    mbedtls_md_context_t ctx;
    mbedtls_md_init(&ctx);
    int rc = md == NULL ? -1 : mbedtls_md_setup(&ctx, md, 1);
    if (rc == 0)
        rc = mbedtls_md_hmac_starts(&ctx, key, key_len);
    if (rc == 0)
        rc = mbedtls_md_hmac_update(&ctx, (const unsigned char *)domain, strlen(domain) + 1);
    for (size_t i = 0; rc == 0 && i < 4; i++)
        rc = mbedtls_md_hmac_update(&ctx, (const unsigned char *)fields[i], strlen(fields[i]) + 1);
    if (rc == 0)
        rc = mbedtls_md_hmac_finish(&ctx, out);
    mbedtls_md_free(&ctx);
    return rc;
}

static void to_hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Signs the four fields under domain with the first key. */
static gv_status sign_fields(const struct gv_placement_key *k, const char *domain,
                             const char *const fields[4], char *out, size_t cap,
                             struct gv_error *err)
{
    unsigned char m[32];
    if (k == NULL || k->n == 0)
        return gv_error_set(err, GV_EINVAL, "no placement key loaded");
    for (size_t i = 0; i < 4; i++)
        if (fields[i] == NULL || fields[i][0] == '\0')
            return gv_error_set(err, GV_EINVAL, "placement signature: empty field %zu", i);
    if (cap < GV_PLACEMENT_SIG_MAX)
        return gv_error_set(err, GV_ERANGE, "placement signature buffer too small");
    if (mac(domain, k->key[0], k->len[0], fields, m) != 0)
        return gv_error_set(err, GV_EINTERNAL, "HMAC-SHA256 failed");
    memcpy(out, "v1.", 3);
    to_hex(m, sizeof(m), out + 3);
    return GV_OK;
}

/* GV_OK when some key signed the four fields under domain as sig; what
 * names the signature in errors.  Constant time in the signature. */
static gv_status verify_fields(const struct gv_placement_key *k, const char *domain,
                               const char *const fields[4], const char *sig, const char *what,
                               struct gv_error *err)
{
    if (strncmp(sig, "v1.", 3) != 0 || strlen(sig) != 3 + 64)
        return gv_error_set(err, GV_EINVAL, "%s has an unknown format", what);
    for (size_t i = 0; i < k->n; i++) {
        unsigned char m[32];
        char hex[65];
        if (mac(domain, k->key[i], k->len[i], fields, m) != 0)
            return gv_error_set(err, GV_EINTERNAL, "HMAC-SHA256 failed");
        to_hex(m, sizeof(m), hex);
        unsigned char diff = 0;
        for (size_t j = 0; j < 64; j++)
            diff |= (unsigned char)(hex[j] ^ sig[3 + j]);
        if (diff == 0)
            return GV_OK;
    }
    return gv_error_set(err, GV_EINVAL, "%s does not match (not written by gpuvisor, or uid, "
                                        "node, time or assignment altered since)", what);
}

gv_status gv_placement_sign(const struct gv_placement_key *k, const char *uid, const char *node,
                            const char *assigned_at, const char *assignment, char *out,
                            size_t cap, struct gv_error *err)
{
    const char *fields[4] = {uid, node, assigned_at, assignment};
    return sign_fields(k, sig_domain, fields, out, cap, err);
}

gv_status gv_hold_sign(const struct gv_placement_key *k, const char *uid, const char *node,
                       const char *until, const char *assignment, char *out, size_t cap,
                       struct gv_error *err)
{
    const char *fields[4] = {uid, node, until, assignment};
    return sign_fields(k, hold_domain, fields, out, cap, err);
}

gv_status gv_hold_verify(const struct gv_placement_key *k, const char *uid, const char *node,
                         const char *until, const char *assignment, const char *sig,
                         struct gv_error *err)
{
    if (k == NULL || k->n == 0)
        return gv_error_set(err, GV_EINVAL, "no placement key loaded");
    const char *fields[4] = {uid, node, until, assignment};
    for (size_t i = 0; i < 4; i++)
        if (fields[i] == NULL || fields[i][0] == '\0')
            return gv_error_set(err, GV_EINVAL, "hold incomplete: uid, node, until and "
                                                "assignment are all signed");
    if (sig == NULL)
        return gv_error_set(err, GV_EINVAL, "hold is not signed");
    return verify_fields(k, hold_domain, fields, sig, GV_HOLD_ANNOTATION " signature", err);
}

static const char *meta_str(const json_t *pod, const char *key)
{
    return json_string_value(json_object_get(json_object_get(pod, "metadata"), key));
}

static const char *annotation(const json_t *pod, const char *key)
{
    json_t *anns = json_object_get(json_object_get(pod, "metadata"), "annotations");
    return json_string_value(json_object_get(anns, key));
}

gv_status gv_placement_verify_pod(const struct gv_placement_key *k, const json_t *pod,
                                  struct gv_error *err)
{
    const char *uid = meta_str(pod, "uid");
    const char *assignment = annotation(pod, GV_ALLOC_ASSIGNMENT_ANNOTATION);
    const char *node = annotation(pod, GV_PLACEMENT_NODE_ANNOTATION);
    const char *at = annotation(pod, GV_PLACEMENT_AT_ANNOTATION);
    const char *sig = annotation(pod, GV_PLACEMENT_SIG_ANNOTATION);
    if (k == NULL || k->n == 0)
        return gv_error_set(err, GV_EINVAL, "no placement key loaded");
    if (sig == NULL)
        return gv_error_set(err, GV_EINVAL, "placement is not signed (no %s)",
                            GV_PLACEMENT_SIG_ANNOTATION);
    if (uid == NULL || assignment == NULL || node == NULL || at == NULL || !*uid || !*assignment ||
        !*node || !*at)
        return gv_error_set(err, GV_EINVAL,
                            "placement incomplete: uid, %s, %s and %s are all signed",
                            GV_ALLOC_ASSIGNMENT_ANNOTATION, GV_PLACEMENT_NODE_ANNOTATION,
                            GV_PLACEMENT_AT_ANNOTATION);
    const char *fields[4] = {uid, node, at, assignment};
    return verify_fields(k, sig_domain, fields, sig, GV_PLACEMENT_SIG_ANNOTATION, err);
}

/* metadata.creationTimestamp as the API server writes it (UTC, "Z", an
 * optional fraction) before cutoff. */
static bool created_before(const json_t *pod, time_t cutoff)
{
    const char *ts = meta_str(pod, "creationTimestamp");
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = ts ? strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (end == NULL || (*end != 'Z' && *end != '.'))
        return false;
    return timegm(&tm) < cutoff;
}

gv_status gv_placement_check_pod(const struct gv_placement_key *k, time_t unsigned_before,
                                 const json_t *pod, struct gv_error *err)
{
    struct gv_error why = {0};
    if (gv_placement_verify_pod(k, pod, &why) == GV_OK)
        return GV_OK;
    if (unsigned_before != 0 && annotation(pod, GV_PLACEMENT_SIG_ANNOTATION) == NULL &&
        created_before(pod, unsigned_before))
        return GV_OK;
    if (err != NULL)
        *err = why;
    return GV_EINVAL;
}

gv_status gv_placement_admit(const struct gv_placement_policy *pol, const json_t *pod,
                             struct gv_error *err)
{
    if (pol == NULL)
        return GV_OK;
    if (pol->key != NULL) {
        gv_status st = gv_placement_verify_pod(pol->key, pod, err);
        if (st != GV_OK)
            return st;
    }
    const char *pre = annotation(pod, "gpuvisor.io/preload");
    if (pre == NULL || strcmp(pre, "false") != 0)
        return GV_OK;
    const char *ns = meta_str(pod, "namespace");
    for (const char *const *p = pol->opt_out_namespaces; ns != NULL && p != NULL && *p != NULL;
         p++)
        if (strcmp(*p, ns) == 0)
            return GV_OK;
    return gv_error_set(err, GV_EINVAL,
                        "gpuvisor.io/preload: \"false\" would run the pod without gpuvisor's "
                        "limits; the node config allows it only in the namespaces listed in "
                        "preloadOptOutNamespaces (namespace %s is not)",
                        ns ? ns : "?");
}
