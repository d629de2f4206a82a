/*
 * Metrics settings and the container record Allocate leaves for the monitor
 * (see gv_monitor.h and docs/observability.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc/gv_alloc.h"
#include "common/gv_file.h"
#include "common/gv_log.h"
#include "node/monitor/gv_monitor.h"
#include "node/monitor/monitor_internal.h"

void gv_metrics_settings_default(struct gv_metrics_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->hami_names = true;
    s->dcgm_names = true;
    s->backstop = GV_BACKSTOP_REPORT;
    s->grace_ms = 10000;
    s->period_ms = 2000;
}

static gv_status want_int(json_t *v, const char *where, int64_t lo, int64_t hi, int64_t *out,
                          struct gv_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return gv_error_set(err, GV_EINVAL, "node config: %s must be an integer in [%lld, %lld]",
                            where, (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return GV_OK;
}

gv_status gv_metrics_settings_parse(json_t *obj, const char *path, struct gv_metrics_settings *s,
                                    struct gv_error *err)
{
    if (!json_is_object(obj))
        return gv_error_set(err, GV_EINVAL, "node config: %smetrics must be an object", path);
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        char where[256];
        int64_t n;
        snprintf(where, sizeof(where), "%smetrics.%s", path, k);
        if (strcasecmp(k, "listen") == 0) {
            if (!json_is_string(v) || json_string_length(v) >= sizeof(s->listen))
                return gv_error_set(err, GV_EINVAL, "node config: %s must be a string \"ADDR:PORT\"",
                                    where);
            const char *colon = strrchr(json_string_value(v), ':');
            if (json_string_length(v) > 0 && colon == NULL)
                return gv_error_set(err, GV_EINVAL, "node config: %s = '%s' has no :PORT", where,
                                    json_string_value(v));
            snprintf(s->listen, sizeof(s->listen), "%s", json_string_value(v));
        } else if (strcasecmp(k, "hamiNames") == 0 || strcasecmp(k, "dcgmNames") == 0) {
            if (!json_is_boolean(v))
                return gv_error_set(err, GV_EINVAL, "node config: %s must be true or false", where);
            if (strcasecmp(k, "hamiNames") == 0)
                s->hami_names = json_is_true(v);
            else
                s->dcgm_names = json_is_true(v);
        } else if (strcasecmp(k, "backstop") == 0) {
            const char *a = json_string_value(v);
            if (a && strcmp(a, "off") == 0)
                s->backstop = GV_BACKSTOP_OFF;
            else if (a && strcmp(a, "report") == 0)
                s->backstop = GV_BACKSTOP_REPORT;
            else if (a && strcmp(a, "kill") == 0)
                s->backstop = GV_BACKSTOP_KILL;
            else
                return gv_error_set(err, GV_EINVAL,
                                    "node config: %s must be \"off\", \"report\" or \"kill\"", where);
        } else if (strcasecmp(k, "backstopGraceMs") == 0) {
            if (want_int(v, where, 0, 3600000, &n, err) != GV_OK)
                return err->code;
            s->grace_ms = n;
        } else if (strcasecmp(k, "backstopPeriodMs") == 0) {
            if (want_int(v, where, 50, 600000, &n, err) != GV_OK)
                return err->code;
            s->period_ms = n;
        } else if (strcasecmp(k, "backstopMarginMiB") == 0) {
            if (want_int(v, where, 0, 1 << 20, &n, err) != GV_OK)
                return err->code;
            s->margin_bytes = (uint64_t)n << 20;
        } else {
            return gv_error_set(err, GV_EINVAL, "node config: %s is not a known key", where);
        }
    }
    return GV_OK;
}

/* ---- the container record ------------------------------------------------- */

static bool safe_name(const char *s)
{
    if (s == NULL || *s == '\0' || strlen(s) > 253 || s[0] == '.')
        return false;
    for (; *s; s++)
        if (*s == '/' || (unsigned char)*s < 0x20)
            return false;
    return true;
}

static const char *meta(json_t *pod, const char *key)
{
    return json_string_value(json_object_get(json_object_get(pod, "metadata"), key));
}

/* CUDA_TASK_PRIORITY from the limits text (KEY=VALUE lines); -1 when absent. */
static int limits_priority(const char *text, size_t len)
{
    static const char key[] = "CUDA_TASK_PRIORITY=";
    const char *p = text, *end = text ? text + len : NULL;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (l > sizeof(key) - 1 && memcmp(p, key, sizeof(key) - 1) == 0) {
            char v[16];
            size_t vl = l - (sizeof(key) - 1);
            if (vl < sizeof(v)) {
                memcpy(v, p + sizeof(key) - 1, vl);
                v[vl] = '\0';
                char *e;
                long n = strtol(v, &e, 10);
                if (*e == '\0' && n >= 0 && n < 1000)
                    return (int)n;
            }
        }
        p = nl ? nl + 1 : end;
    }
    return -1;
}

void gv_monitor_note_allocate(const char *state_dir, json_t *pod,
                              const struct gv_alloc_container_assign *c, bool limited,
                              const char *limits, size_t limits_len)
{
    const char *uid = meta(pod, "uid"), *ns = meta(pod, "namespace"), *name = meta(pod, "name");
    if (!safe_name(uid) || !safe_name(c->name) || ns == NULL || name == NULL)
        return;
    json_t *devs = json_array();
    for (uint32_t i = 0; devs && i < c->n_devices; i++)
        json_array_append_new(devs, json_pack("{s:s, s:I, s:i}", "uuid", c->devices[i].uuid,
                                              "memory", (json_int_t)(c->devices[i].mem_mib << 20),
                                              "cores", (int)((c->devices[i].milli + 9) / 10)));
    json_t *rec = json_pack("{s:i, s:s, s:s, s:s, s:s, s:o, s:i, s:b}", "version", 1, "uid", uid,
                            "namespace", ns, "pod", name, "container", c->name, "devices", devs,
                            "priority", limits_priority(limits, limits_len), "limited", limited);
    char *text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/containers/%s/" GV_MONITOR_RECORD_PREFIX "%s.json", state_dir,
             uid, c->name);
    struct gv_error err;
    if (text == NULL)
        gv_warn("container %s/%s %s: no metrics record: out of memory", ns, name, c->name);
    else if (gv_file_write_atomic(path, text, strlen(text), 0644, &err) != GV_OK)
        gv_warn("container %s/%s %s: no metrics record: %s", ns, name, c->name, err.msg);
    free(text);
    json_decref(rec);
}

gv_status gv_monitor_record_parse(const char *text, size_t len, struct gv_monitor_record *r,
                                  struct gv_error *err)
{
    json_error_t je;
    memset(r, 0, sizeof(*r));
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    gv_status st = GV_OK;
    json_t *devs = json_object_get(root, "devices");
    const char *uid = json_string_value(json_object_get(root, "uid"));
    const char *ns = json_string_value(json_object_get(root, "namespace"));
    const char *pod = json_string_value(json_object_get(root, "pod"));
    const char *ctr = json_string_value(json_object_get(root, "container"));
    if (root == NULL || !json_is_array(devs) || !uid || !ns || !pod || !ctr ||
        strlen(uid) >= sizeof(r->uid) || strlen(ns) >= sizeof(r->ns) ||
        strlen(pod) >= sizeof(r->pod) || strlen(ctr) >= sizeof(r->ctr) ||
        json_array_size(devs) > GV_MONITOR_MAX_GPUS) {
        st = gv_error_set(err, GV_EPARSE, "not a container record");
        goto out;
    }
    snprintf(r->uid, sizeof(r->uid), "%s", uid);
    snprintf(r->ns, sizeof(r->ns), "%s", ns);
    snprintf(r->pod, sizeof(r->pod), "%s", pod);
    snprintf(r->ctr, sizeof(r->ctr), "%s", ctr);
    json_t *p = json_object_get(root, "priority");
    r->priority = json_is_integer(p) ? (int)json_integer_value(p) : -1;
    r->limited = json_is_true(json_object_get(root, "limited"));
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d) {
        const char *u = json_string_value(json_object_get(d, "uuid"));
        json_t *mem = json_object_get(d, "memory"), *cores = json_object_get(d, "cores");
        if (!u || strlen(u) >= sizeof(r->dev[0].uuid) || !json_is_integer(mem) ||
            json_integer_value(mem) < 0 || !json_is_integer(cores) ||
            json_integer_value(cores) < 0 || json_integer_value(cores) > 100) {
            st = gv_error_set(err, GV_EPARSE, "container record: bad device %zu", i);
            goto out;
        }
        snprintf(r->dev[i].uuid, sizeof(r->dev[i].uuid), "%s", u);
        r->dev[i].mem_limit = (uint64_t)json_integer_value(mem);
        r->dev[i].cores = (unsigned)json_integer_value(cores);
        r->n_dev++;
    }
out:
    json_decref(root);
    return st;
}
