/*
 * The gpuvisor.io/assignment annotation (docs/alloc.md, "Assignment
 * encoding"):
 *
 *   assignment = "v1" ";node=" NODE *( ";" CONTAINER "=" DEV *( "," DEV ) )
 *   DEV        = UUID ":" MEM_MIB ":" MILLI
 *
 * NODE and CONTAINER use [A-Za-z0-9._-], UUID also '/', numbers are plain
 * decimals without sign or leading zeros.  The parser is strict: anything
 * else, duplicates, or values out of range are errors naming the offset.
 */
#include <stdio.h>
#include <string.h>

#include "alloc/alloc_internal.h"

#define MEM_MAX (UINT64_C(1) << 40)

static bool name_char(char ch, bool uuid)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-' || (uuid && ch == '/');
}

static bool valid_name(const char *s, size_t max, bool uuid)
{
    size_t n = 0;
    for (; s[n] != '\0'; n++)
        if (!name_char(s[n], uuid))
            return false;
    return n > 0 && n < max;
}

gv_status gv_alloc_assignment_encode(const struct gv_alloc_assignment *a, char *buf, size_t cap,
                                     size_t *len, struct gv_error *err)
{
    if (!valid_name(a->node, GV_ALLOC_NODE_MAX, false))
        return gv_error_set(err, GV_EINVAL, "assignment: bad node name \"%.64s\"", a->node);
    if (a->n_containers > GV_ALLOC_MAX_CONTAINERS)
        return gv_error_set(err, GV_EINVAL, "assignment: too many containers");
    size_t o = 0;
    int w = snprintf(buf, cap, "v1;node=%s", a->node);
    if (w < 0 || (size_t)w >= cap)
        goto small;
    o = (size_t)w;
    for (uint32_t i = 0; i < a->n_containers; i++) {
        const struct gv_alloc_container_assign *ca = &a->containers[i];
        if (!valid_name(ca->name, GV_ALLOC_CNAME_MAX, false))
            return gv_error_set(err, GV_EINVAL, "assignment: bad container name \"%.64s\"",
                                ca->name);
        if (ca->n_devices == 0 || ca->n_devices > GV_ALLOC_MAX_DEVICES)
            return gv_error_set(err, GV_EINVAL, "assignment: container %s has %u devices",
                                ca->name, ca->n_devices);
        w = snprintf(buf + o, cap - o, ";%s=", ca->name);
        if (w < 0 || (size_t)w >= cap - o)
            goto small;
        o += (size_t)w;
        for (uint32_t j = 0; j < ca->n_devices; j++) {
            const struct gv_alloc_device *d = &ca->devices[j];
            if (!valid_name(d->uuid, GV_ALLOC_UUID_MAX, true) || d->milli > GV_ALLOC_MILLI ||
                d->mem_mib > MEM_MAX)
                return gv_error_set(err, GV_EINVAL, "assignment: container %s: bad device %.96s",
                                    ca->name, d->uuid);
            w = snprintf(buf + o, cap - o, "%s%s:%llu:%u", j ? "," : "", d->uuid,
                         (unsigned long long)d->mem_mib, d->milli);
            if (w < 0 || (size_t)w >= cap - o)
                goto small;
            o += (size_t)w;
        }
    }
    if (len != NULL)
        *len = o;
    return GV_OK;
small:
    return gv_error_set(err, GV_ERANGE, "assignment: buffer of %zu bytes too small", cap);
}

struct cursor {
    const char *s;
    size_t len, pos;
};

static gv_status bad(struct gv_error *err, const struct cursor *c, const char *what)
{
    return gv_error_set(err, GV_EPARSE, "assignment: %s at offset %zu", what, c->pos);
}

/* Copies a token of name characters into dst (cap bytes). */
static gv_status take_name(struct cursor *c, char *dst, size_t cap, bool uuid, const char *what,
                           struct gv_error *err)
{
    size_t start = c->pos;
    while (c->pos < c->len && name_char(c->s[c->pos], uuid))
        c->pos++;
    size_t n = c->pos - start;
    if (n == 0 || n >= cap) {
        c->pos = start;
        char msg[64];
        snprintf(msg, sizeof(msg), n == 0 ? "expected %s" : "%s too long", what);
        return bad(err, c, msg);
    }
    memcpy(dst, c->s + start, n);
    dst[n] = '\0';
    return GV_OK;
}

static gv_status take_num(struct cursor *c, uint64_t max, uint64_t *out, const char *what,
                          struct gv_error *err)
{
    size_t start = c->pos;
    uint64_t v = 0;
    while (c->pos < c->len && c->s[c->pos] >= '0' && c->s[c->pos] <= '9') {
        v = v * 10 + (uint64_t)(c->s[c->pos] - '0');
        c->pos++;
        if (v > max) {
            c->pos = start;
            char msg[64];
            snprintf(msg, sizeof(msg), "%s out of range", what);
            return bad(err, c, msg);
        }
    }
    size_t n = c->pos - start;
    if (n == 0 || (n > 1 && c->s[start] == '0')) {
        c->pos = start;
        char msg[64];
        snprintf(msg, sizeof(msg), "expected %s (decimal)", what);
        return bad(err, c, msg);
    }
    *out = v;
    return GV_OK;
}

static bool take_lit(struct cursor *c, const char *lit)
{
    size_t n = strlen(lit);
    if (c->len - c->pos < n || memcmp(c->s + c->pos, lit, n) != 0)
        return false;
    c->pos += n;
    return true;
}

gv_status gv_alloc_assignment_decode(const char *text, size_t len, struct gv_alloc_assignment *out,
                                     struct gv_error *err)
{
    struct cursor c = {text, len, 0};
    gv_status rc;
    memset(out, 0, sizeof(*out));
    if (!take_lit(&c, "v")) {
        rc = bad(err, &c, "expected version \"v1\"");
        goto fail;
    }
    if (!take_lit(&c, "1;")) {
        rc = gv_error_set(err, GV_EUNSUPPORTED, "assignment: unsupported version (want v1)");
        goto fail;
    }
    if (!take_lit(&c, "node=")) {
        rc = bad(err, &c, "expected \"node=\"");
        goto fail;
    }
    if ((rc = take_name(&c, out->node, sizeof(out->node), false, "node name", err)) != GV_OK)
        goto fail;
    while (c.pos < c.len) {
        if (!take_lit(&c, ";")) {
            rc = bad(err, &c, "expected ';'");
            goto fail;
        }
        if (out->n_containers == GV_ALLOC_MAX_CONTAINERS) {
            rc = bad(err, &c, "too many containers");
            goto fail;
        }
        struct gv_alloc_container_assign *ca = &out->containers[out->n_containers];
        if ((rc = take_name(&c, ca->name, sizeof(ca->name), false, "container name", err)))
            goto fail;
        for (uint32_t i = 0; i < out->n_containers; i++)
            if (strcmp(out->containers[i].name, ca->name) == 0) {
                rc = bad(err, &c, "duplicate container");
                goto fail;
            }
        if (!take_lit(&c, "=")) {
            rc = bad(err, &c, "expected '='");
            goto fail;
        }
        do {
            if (ca->n_devices == GV_ALLOC_MAX_DEVICES) {
                rc = bad(err, &c, "too many devices");
                goto fail;
            }
            struct gv_alloc_device *d = &ca->devices[ca->n_devices];
            uint64_t mem, milli;
            if ((rc = take_name(&c, d->uuid, sizeof(d->uuid), true, "GPU uuid", err)))
                goto fail;
            for (uint32_t i = 0; i < ca->n_devices; i++)
                if (strcmp(ca->devices[i].uuid, d->uuid) == 0) {
                    rc = bad(err, &c, "GPU listed twice in a container");
                    goto fail;
                }
            if (!take_lit(&c, ":") || (rc = take_num(&c, MEM_MAX, &mem, "memory MiB", err)) ||
                !take_lit(&c, ":") || (rc = take_num(&c, GV_ALLOC_MILLI, &milli, "milli", err))) {
                if (rc == GV_OK)
                    rc = bad(err, &c, "expected ':'");
                goto fail;
            }
            d->mem_mib = mem;
            d->milli = (uint32_t)milli;
            ca->n_devices++;
        } while (take_lit(&c, ","));
        out->n_containers++;
    }
    return GV_OK;
fail:
    memset(out, 0, sizeof(*out));
    return rc;
}
