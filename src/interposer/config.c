/*
 * Configuration parsing for libgpuvisor.so.
 *
 * Sizes follow the HAMi environment contract (CUDA_DEVICE_MEMORY_LIMIT=4g
 * means 4 GiB: k/m/g/t are powers of 1024, an optional "i" and "b" are
 * accepted), which differs from Kubernetes quantities ("4G" = 4e9 there),
 * so this is not the CLI's quantity parser.
 */
#include "interposer/config.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIMITS_FILE_MAX (64 * 1024)

void gv_ipcfg_init(struct gv_ipcfg *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->source, sizeof(c->source), "defaults");
}

gv_status gv_ipcfg_parse_bytes(const char *text, uint64_t *out)
{
    const char *p = text;
    if (p == NULL || *p < '0' || *p > '9')
        return GV_EPARSE;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return GV_ERANGE;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (shift != 0 && (*p == 'i' || *p == 'I'))
        p++;
    if (*p == 'b' || *p == 'B')
        p++;
    if (*p != '\0')
        return GV_EPARSE;
    if (shift != 0 && v > (UINT64_MAX >> shift))
        return GV_ERANGE;
    *out = v << shift;
    return GV_OK;
}

static gv_status parse_uint(const char *text, unsigned long max, unsigned long *out)
{
    if (text == NULL || *text < '0' || *text > '9' || strlen(text) > 9)
        return GV_EPARSE;
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (*end != '\0')
        return GV_EPARSE;
    if (errno != 0 || v > max)
        return GV_ERANGE;
    *out = v;
    return GV_OK;
}

/* "_<i>" suffix after a key prefix: -1 for none, -2 for a bad one. */
static int index_suffix(const char *key, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(key, prefix, n) != 0)
        return -3;
    if (key[n] == '\0')
        return -1;
    if (key[n] != '_')
        return -3;
    unsigned long idx;
    if (parse_uint(key + n + 1, GV_IPCFG_MAX_DEVICES - 1, &idx) != GV_OK ||
        (key[n + 1] == '0' && key[n + 2] != '\0'))
        return -2;
    return (int)idx;
}

/* The KEY / KEY_<i> families of the contract. */
static const struct indexed_key {
    const char *prefix;
    size_t offset;
    bool percent;     /* 0..100, else bytes */
    bool zero_at_100; /* 100 means "no limit" */
} indexed_keys[] = {
    {"CUDA_DEVICE_MEMORY_LIMIT", offsetof(struct gv_ipcfg, mem), false, false},
    {"GPUVISOR_DEVICE_MEMORY_PERCENT", offsetof(struct gv_ipcfg, mem_pct), true, false},
    {"GPUVISOR_DEVICE_MEMORY_SHARE", offsetof(struct gv_ipcfg, mem_share), false, false},
    {"CUDA_DEVICE_SM_LIMIT", offsetof(struct gv_ipcfg, sm), true, true},
    {"GPUVISOR_CONTEXT_RESERVE", offsetof(struct gv_ipcfg, ctx), false, false},
};

static uint64_t pick(const struct gv_ipcfg_indexed *x, int dev)
{
    return dev >= 0 && dev < GV_IPCFG_MAX_DEVICES && x->has[dev] ? x->dev[dev] : x->all;
}

static bool any_set(const struct gv_ipcfg_indexed *x, uint64_t unlimited_from)
{
    if (x->all != 0 && x->all < unlimited_from)
        return true;
    for (int i = 0; i < GV_IPCFG_MAX_DEVICES; i++)
        if (x->has[i] && x->dev[i] != 0 && x->dev[i] < unlimited_from)
            return true;
    return false;
}

gv_status gv_ipcfg_set(struct gv_ipcfg *c, const char *key, const char *value,
                       struct gv_error *err)
{
    gv_status rc;
    int idx;
    unsigned long u;
    if (key == NULL || value == NULL)
        return gv_error_set(err, GV_EINVAL, "missing key or value");

    for (size_t k = 0; k < sizeof(indexed_keys) / sizeof(indexed_keys[0]); k++) {
        const struct indexed_key *ik = &indexed_keys[k];
        if ((idx = index_suffix(key, ik->prefix)) == -3)
            continue;
        if (idx == -2)
            return gv_error_set(err, GV_ERANGE, "%s: device index must be 0..%d", key,
                                GV_IPCFG_MAX_DEVICES - 1);
        uint64_t v;
        if (ik->percent) {
            rc = parse_uint(value, 100, &u);
            v = u;
        } else {
            rc = gv_ipcfg_parse_bytes(value, &v);
        }
        if (rc != GV_OK)
            return gv_error_set(err, rc, "%s=\"%s\": expected %s", key, value,
                                ik->percent ? "a percentage 0..100"
                                            : "bytes with an optional k/m/g/t suffix (e.g. 4096m, 4g)");
        /* 100% of the SMs is the whole GPU: the same as no limit. */
        if (ik->zero_at_100 && v >= 100)
            v = 0;
        struct gv_ipcfg_indexed *slot = (struct gv_ipcfg_indexed *)((char *)c + ik->offset);
        if (idx == -1)
            slot->all = v;
        else {
            slot->dev[idx] = v;
            slot->has[idx] = true;
        }
        return GV_OK;
    }
    if (strcmp(key, "CUDA_DEVICE_MEMORY_SHARED_CACHE") == 0 ||
        strcmp(key, "GPUVISOR_NODE_DIR") == 0) {
        char *dst = key[0] == 'C' ? c->shared_cache : c->node_dir;
        size_t n = strlen(value);
        if (n == 0 || n >= PATH_MAX || value[0] != '/' || strpbrk(value, "\n\r") != NULL)
            return gv_error_set(err, GV_EPARSE, "%s=\"%s\": expected an absolute path", key,
                                value);
        memcpy(dst, value, n + 1);
        return GV_OK;
    }
    if (strcmp(key, "CUDA_TASK_PRIORITY") == 0) {
        if ((rc = parse_uint(value, GV_IPCFG_MAX_PRIORITY, &u)) != GV_OK)
            return gv_error_set(err, rc, "%s=\"%s\": expected a priority 0..%d (0 = highest)",
                                key, value, GV_IPCFG_MAX_PRIORITY);
        c->priority = (int)u;
        c->has_priority = true;
        return GV_OK;
    }
    if (strcmp(key, "GPU_CORE_UTILIZATION_POLICY") == 0) {
        if (strcasecmp(value, "default") == 0)
            c->policy = GV_POLICY_DEFAULT;
        else if (strcasecmp(value, "force") == 0)
            c->policy = GV_POLICY_FORCE;
        else if (strcasecmp(value, "disable") == 0)
            c->policy = GV_POLICY_DISABLE;
        else
            return gv_error_set(err, GV_EPARSE, "%s=\"%s\": expected default, force or disable",
                                key, value);
        return GV_OK;
    }
    if (strcmp(key, "CUDA_OVERSUBSCRIBE") == 0) {
        if (strcasecmp(value, "true") == 0 || strcmp(value, "1") == 0 ||
            strcasecmp(value, "yes") == 0)
            c->oversubscribe = true;
        else if (strcasecmp(value, "false") == 0 || strcmp(value, "0") == 0 ||
                 strcasecmp(value, "no") == 0)
            c->oversubscribe = false;
        else
            return gv_error_set(err, GV_EPARSE, "%s=\"%s\": expected true or false", key, value);
        return GV_OK;
    }
    return GV_ENOTFOUND;
}

gv_status gv_ipcfg_parse_text(struct gv_ipcfg *c, const char *text, size_t len,
                              const char *origin, struct gv_error *err)
{
    struct gv_ipcfg tmp = *c;
    char line[PATH_MAX + 128];
    size_t pos = 0;
    int lineno = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        lineno++;
        size_t n = end - pos;
        if (n >= sizeof(line))
            return gv_error_set(err, GV_EPARSE, "%s:%d: line too long", origin, lineno);
        memcpy(line, text + pos, n);
        line[n] = '\0';
        pos = end + 1;
        if (memchr(line, '\0', n) != NULL)
            return gv_error_set(err, GV_EPARSE, "%s:%d: NUL byte in line", origin, lineno);
        /* Trim. */
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        char *e = s + strlen(s);
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            *--e = '\0';
        if (*s == '\0' || *s == '#')
            continue;
        if (strncmp(s, "export ", 7) == 0)
            s += 7;
        char *eq = strchr(s, '=');
        if (eq == NULL || eq == s)
            return gv_error_set(err, GV_EPARSE, "%s:%d: expected KEY=VALUE, got \"%s\"", origin,
                                lineno, s);
        char *kend = eq;
        while (kend > s && (kend[-1] == ' ' || kend[-1] == '\t'))
            kend--;
        *kend = '\0';
        char *val = eq + 1;
        while (*val == ' ' || *val == '\t')
            val++;
        size_t vl = strlen(val);
        if (vl >= 2 && (val[0] == '"' || val[0] == '\'') && val[vl - 1] == val[0]) {
            val[vl - 1] = '\0';
            val++;
        }
        gv_status rc = gv_ipcfg_set(&tmp, s, val, err);
        if (rc == GV_ENOTFOUND)
            continue;
        if (rc != GV_OK) {
            gv_error_prefix(err, "%s:%d", origin, lineno);
            return rc;
        }
    }
    *c = tmp;
    return GV_OK;
}

gv_status gv_ipcfg_parse_env(struct gv_ipcfg *c, char *const *envp, struct gv_error *err)
{
    struct gv_ipcfg tmp = *c;
    char key[128];
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        size_t kl = eq ? (size_t)(eq - *e) : 0;
        if (eq == NULL || kl == 0 || kl >= sizeof(key))
            continue;
        memcpy(key, *e, kl);
        key[kl] = '\0';
        gv_status rc = gv_ipcfg_set(&tmp, key, eq + 1, err);
        if (rc == GV_ENOTFOUND)
            continue;
        if (rc != GV_OK) {
            gv_error_prefix(err, "environment");
            return rc;
        }
    }
    *c = tmp;
    return GV_OK;
}

static const char *env_get(char *const *envp, const char *key)
{
    size_t n = strlen(key);
    for (char *const *e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, key, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

gv_status gv_ipcfg_load(struct gv_ipcfg *c, char *const *envp, struct gv_error *err)
{
    gv_ipcfg_init(c);
    const char *path = GV_IPCFG_DEFAULT_LIMITS_FILE;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        /* Only where no limits file is deployed may the environment name
         * one (tests, `gpuvisor run`): a mounted file cannot be redirected. */
        const char *alt = env_get(envp, "GPUVISOR_LIMITS_FILE");
        if (alt == NULL || *alt == '\0') {
            snprintf(c->source, sizeof(c->source), "environment");
            return gv_ipcfg_parse_env(c, envp, err);
        }
        path = alt;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gv_error_set(err, GV_EIO, "limits file %s: cannot open: %s", path,
                            strerror(errno));
    char *buf = malloc(LIMITS_FILE_MAX + 1);
    gv_status rc = GV_OK;
    if (buf == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "limits file %s: out of memory", path);
        goto out;
    }
    size_t used = 0;
    for (;;) {
        ssize_t r = read(fd, buf + used, LIMITS_FILE_MAX + 1 - used);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = gv_error_set(err, GV_EIO, "limits file %s: read failed: %s", path,
                              strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        used += (size_t)r;
        if (used > LIMITS_FILE_MAX) {
            rc = gv_error_set(err, GV_ERANGE, "limits file %s: larger than %d bytes", path,
                              LIMITS_FILE_MAX);
            goto out;
        }
    }
    rc = gv_ipcfg_parse_text(c, buf, used, path, err);
    if (rc == GV_OK)
        snprintf(c->source, sizeof(c->source), "%s", path);
out:
    free(buf);
    close(fd);
    return rc;
}

uint64_t gv_ipcfg_mem_limit(const struct gv_ipcfg *c, int dev, uint64_t physical)
{
    bool in = dev >= 0 && dev < GV_IPCFG_MAX_DEVICES;
    /* Most specific first: bytes for this device, percent for this device,
     * bytes for all, percent for all. */
    if (in && c->mem.has[dev])
        return c->mem.dev[dev];
    uint64_t pct = in && c->mem_pct.has[dev] ? c->mem_pct.dev[dev] : 0;
    if (pct == 0 && c->mem.all != 0)
        return c->mem.all;
    if (pct == 0)
        pct = c->mem_pct.all;
    return pct == 0 || pct >= 100 ? 0 : physical / 100 * pct + physical % 100 * pct / 100;
}

uint32_t gv_ipcfg_sm_limit(const struct gv_ipcfg *c, int dev) { return (uint32_t)pick(&c->sm, dev); }

uint64_t gv_ipcfg_mem_share(const struct gv_ipcfg *c, int dev) { return pick(&c->mem_share, dev); }

uint64_t gv_ipcfg_ctx_reserve(const struct gv_ipcfg *c, int dev) { return pick(&c->ctx, dev); }

bool gv_ipcfg_has_limits(const struct gv_ipcfg *c)
{
    return any_set(&c->mem, UINT64_MAX) || any_set(&c->mem_pct, 100) || any_set(&c->sm, 100);
}
