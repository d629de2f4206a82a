/*
 * Kubernetes resource quantities (k8s.io/apimachinery resource.Quantity):
 *
 *   quantity = [sign] number suffix
 *   number   = digits | digits "." [digits] | "." digits
 *   suffix   = "" | n u m k M G T P E | Ki Mi Gi Ti Pi Ei | (e|E) [sign] digits
 *
 * The value is kept exact as M * 10^E * 2^B (128-bit integers), so "0.1Gi"
 * in MiB or "1500m" in whole units round exactly once, upwards, like
 * Quantity.Value().  Digits beyond 19 significant ones are folded into a
 * sticky "something was lost" bit that still rounds up correctly.
 */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "alloc/gv_alloc.h"

__extension__ typedef unsigned __int128 u128;

#define QTY_SHOW 64 /* how much of a bad input an error message quotes */

static gv_status qty_fail(struct gv_error *err, gv_status code, const char *text, const char *why)
{
    return gv_error_set(err, code, "quantity \"%.*s\": %s", QTY_SHOW, text, why);
}

struct qty {
    uint64_t mant;  /* significant digits */
    int64_t exp10;  /* decimal exponent */
    unsigned exp2;  /* binary exponent (Ki..Ei) */
    bool sticky;    /* nonzero digits were dropped */
};

static gv_status qty_scan(const char *text, struct qty *q, struct gv_error *err)
{
    const char *p = text;
    memset(q, 0, sizeof(*q));
    if (*p == '+') {
        p++;
    } else if (*p == '-') {
        return qty_fail(err, GV_ERANGE, text, "negative quantities are not allowed");
    }
    int ndigits = 0, nsig = 0;
    bool seen_point = false;
    for (;; p++) {
        if (*p == '.' && !seen_point) {
            seen_point = true;
            continue;
        }
        if (*p < '0' || *p > '9')
            break;
        int d = *p - '0';
        ndigits++;
        if (nsig == 0 && d == 0) {
            if (seen_point)
                q->exp10--;
            continue;
        }
        if (nsig < 19) {
            q->mant = q->mant * 10 + (uint64_t)d;
            nsig++;
            if (seen_point)
                q->exp10--;
        } else {
            if (d != 0)
                q->sticky = true;
            if (!seen_point)
                q->exp10++;
        }
    }
    if (ndigits == 0)
        return qty_fail(err, GV_EPARSE, text, "expected a number");
    if (*p != '\0' && p[1] == 'i' && p[2] == '\0') {
        static const char bin[] = "KMGTPE";
        const char *b = strchr(bin, *p);
        if (b == NULL)
            return qty_fail(err, GV_EPARSE, text, "unknown suffix");
        q->exp2 = 10u * (unsigned)(b - bin + 1);
        return GV_OK;
    }
    switch (*p) {
    case '\0':
        return GV_OK;
    case 'n': q->exp10 -= 9; break;
    case 'u': q->exp10 -= 6; break;
    case 'm': q->exp10 -= 3; break;
    case 'k': q->exp10 += 3; break;
    case 'M': q->exp10 += 6; break;
    case 'G': q->exp10 += 9; break;
    case 'T': q->exp10 += 12; break;
    case 'P': q->exp10 += 15; break;
    case 'E':
    case 'e':
        if (p[1] == '\0' && *p == 'E') {
            q->exp10 += 18;
            break;
        }
        {
            const char *e = p + 1;
            bool neg = false;
            if (*e == '+' || *e == '-')
                neg = *e++ == '-';
            if (*e < '0' || *e > '9')
                return qty_fail(err, GV_EPARSE, text, "malformed exponent");
            int64_t v = 0;
            for (; *e >= '0' && *e <= '9'; e++) {
                if (v < 100000)
                    v = v * 10 + (*e - '0');
            }
            if (*e != '\0')
                return qty_fail(err, GV_EPARSE, text, "trailing characters after exponent");
            q->exp10 += neg ? -v : v;
            return GV_OK;
        }
    default:
        return qty_fail(err, GV_EPARSE, text, "unknown suffix");
    }
    if (p[1] != '\0')
        return qty_fail(err, GV_EPARSE, text, "unknown suffix");
    return GV_OK;
}

gv_status gv_quantity_parse(const char *text, int64_t mul, int64_t div, int64_t *out, bool *exact,
                            struct gv_error *err)
{
    if (text == NULL || out == NULL || mul <= 0 || div <= 0)
        return gv_error_set(err, GV_EINVAL, "quantity: bad arguments");
    struct qty q;
    gv_status rc = qty_scan(text, &q, err);
    if (rc != GV_OK)
        return rc;
    if (q.mant == 0) {
        *out = 0;
        if (exact != NULL)
            *exact = true;
        return GV_OK;
    }
    /* Results above this are out of range; products below 2^126 cannot
     * overflow 128 bits when multiplied by 2 or 10 once more. */
    const u128 cap = (u128)1 << 126;
    u128 num = (u128)q.mant * (u128)mul;
    u128 den = (u128)div;
    for (unsigned i = 0; i < q.exp2; i++) {
        num <<= 1;
        if (num > cap)
            return qty_fail(err, GV_ERANGE, text, "value too large");
    }
    for (int64_t i = 0; i < q.exp10; i++) {
        num *= 10;
        if (num > cap)
            return qty_fail(err, GV_ERANGE, text, "value too large");
    }
    bool tiny = false;
    for (int64_t i = 0; i > q.exp10; i--) {
        if (den > num / 10) {
            /* The value is below one unit: it rounds up to 1. */
            tiny = true;
            break;
        }
        den *= 10;
    }
    u128 quot, rem;
    if (tiny) {
        quot = 0;
        rem = 1;
    } else {
        quot = num / den;
        rem = num % den;
    }
    bool is_exact = rem == 0 && !q.sticky;
    if (!is_exact)
        quot++;
    if (quot > (u128)INT64_MAX)
        return qty_fail(err, GV_ERANGE, text, "value too large");
    *out = (int64_t)quot;
    if (exact != NULL)
        *exact = is_exact;
    return GV_OK;
}

gv_status gv_quantity_value(const char *text, int64_t *out, struct gv_error *err)
{
    return gv_quantity_parse(text, 1, 1, out, NULL, err);
}

gv_status gv_quantity_milli(const char *text, int64_t *out, struct gv_error *err)
{
    return gv_quantity_parse(text, 1000, 1, out, NULL, err);
}

gv_status gv_quantity_integer(const char *text, int64_t *out, struct gv_error *err)
{
    bool exact = false;
    gv_status rc = gv_quantity_parse(text, 1, 1, out, &exact, err);
    if (rc == GV_OK && !exact)
        return qty_fail(err, GV_EINVAL, text, "must be a whole number");
    return rc;
}
