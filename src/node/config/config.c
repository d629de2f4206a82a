/* Node configuration file: see gv_config.h. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/gv_file.h"
#include "common/gv_log.h"
#include "node/config/gv_config.h"
#include "node/discovery/gv_cdi.h"

static int mode_parse(const char *s)
{
    char lower[32];
    size_t i = 0;
    for (; s[i] && i + 1 < sizeof(lower); i++)
        lower[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    lower[i] = '\0';
    int m = gv_inventory_mode_parse(lower);
    if (m >= 0)
        return m;
    /* the spellings NVIDIA's plugin and HAMi use */
    if (strcasecmp(s, "time-slicing") == 0)
        return GV_NODE_MODE_TIMESLICING;
    if (strcasecmp(s, "hami-core") == 0)
        return GV_NODE_MODE_VGPU;
    return -1;
}

/* "vgpu, exclusive, ..." from the one list of modes. */
static const char *mode_names(void)
{
    static char buf[256];
    if (buf[0] == '\0') {
        size_t l = 0;
        for (int i = 0; i < GV_INVENTORY_MODE_COUNT; i++)
            l += (size_t)snprintf(buf + l, sizeof(buf) - l, "%s%s", i ? ", " : "",
                                  gv_inventory_mode_name((enum gv_inventory_mode)i));
    }
    return buf;
}

static void sharing_free(struct gv_node_sharing *sh)
{
    for (size_t i = 0; i < sh->n_res; i++)
        free(sh->res[i].list);
    free(sh->res);
    memset(sh, 0, sizeof(*sh));
}

gv_status gv_node_config_default(struct gv_node_config **out, struct gv_error *err)
{
    struct gv_node_config *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return gv_error_set(err, GV_ENOMEM, "node config: out of memory");
    snprintf(c->resource_name, sizeof(c->resource_name), "nvidia.com/gpu");
    /* not nvidia.com/gpu: nvidia-ctk's spec on the same node claims that kind,
     * and two specs of one kind resolve no device at all (cdi_kind.c) */
    snprintf(c->cdi_kind, sizeof(c->cdi_kind), "gpuvisor.io/gpu");
    snprintf(c->mig_strategy, sizeof(c->mig_strategy), "none");
    snprintf(c->cdi_spec_dir, sizeof(c->cdi_spec_dir), "/var/run/cdi");
    snprintf(c->driver_root, sizeof(c->driver_root), "/");
    c->nvidia_runtime = true;
    c->defaults.mode = GV_NODE_MODE_VGPU;
    c->defaults.split = 10;
    c->defaults.mem_scaling = 1.0;
    c->defaults.core_scaling = 1.0;
    gv_metrics_settings_default(&c->metrics);
    *out = c;
    return GV_OK;
}

void gv_node_config_free(struct gv_node_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->exclude_uuids);
    free(cfg->exclude_indexes);
    free(cfg->rules);
    free(cfg->notes);
    sharing_free(&cfg->sharing);
    free(cfg);
}

/* ---- parsing ------------------------------------------------------------- */

struct settings_mask {
    bool mode, split, mem, core, mig;
};

static gv_status want_string(json_t *v, const char *where, size_t max, struct gv_error *err)
{
    if (!json_is_string(v))
        return gv_error_set(err, GV_EINVAL, "node config: %s must be a string", where);
    if (json_string_length(v) >= max)
        return gv_error_set(err, GV_ERANGE, "node config: %s is longer than %zu characters",
                            where, max - 1);
    return GV_OK;
}

static gv_status want_number(json_t *v, const char *where, double lo, double hi, double *out,
                             struct gv_error *err)
{
    if (!json_is_number(v))
        return gv_error_set(err, GV_EINVAL, "node config: %s must be a number", where);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return gv_error_set(err, GV_ERANGE, "node config: %s = %g is outside [%g, %g]", where, d,
                            lo, hi);
    *out = d;
    return GV_OK;
}

/* Sets one sharing key; returns GV_ENOTFOUND when key is not a sharing key. */
static gv_status settings_key(const char *key, json_t *v, const char *path,
                              struct gv_node_gpu_settings *s, struct settings_mask *m,
                              struct gv_error *err)
{
    char where[256];
    snprintf(where, sizeof(where), "%s%s", path, key);
    double d;
    if (strcasecmp(key, "mode") == 0 || strcasecmp(key, "sharingMode") == 0) {
        if (want_string(v, where, 32, err) != GV_OK)
            return err->code;
        int md = mode_parse(json_string_value(v));
        if (md < 0)
            return gv_error_set(err, GV_EINVAL,
                                "node config: %s = '%s' is not one of %s", where,
                                json_string_value(v), mode_names());
        s->mode = (gv_node_mode)md;
        m->mode = true;
    } else if (strcasecmp(key, "operatingmode") == 0) {
        /* HAMi: hami-core (its interposer), mig or mps */
        if (want_string(v, where, 32, err) != GV_OK)
            return err->code;
        const char *om = json_string_value(v);
        if (strcasecmp(om, "hami-core") != 0)
            return gv_error_set(err, GV_EUNSUPPORTED,
                                "node config: %s = '%s': gpuvisor slices GPUs with its own "
                                "interposer only (no %s partitioning); write \"operatingmode\": "
                                "\"hami-core\" (memory and compute limits) or \"mode\": "
                                "\"exclusive\" (whole GPUs)",
                                where, om, strcasecmp(om, "mig") == 0 ? "MIG" : om);
        s->mode = GV_NODE_MODE_VGPU;
        m->mode = true;
    } else if (strcasecmp(key, "deviceSplitCount") == 0 || strcasecmp(key, "replicas") == 0) {
        if (!json_is_integer(v))
            return gv_error_set(err, GV_EINVAL, "node config: %s must be an integer", where);
        if (want_number(v, where, 1, GV_NODE_MAX_SPLIT, &d, err) != GV_OK)
            return err->code;
        s->split = (unsigned)d;
        m->split = true;
    } else if (strcasecmp(key, "deviceMemoryScaling") == 0) {
        if (want_number(v, where, 0.01, 100, &d, err) != GV_OK)
            return err->code;
        s->mem_scaling = d;
        m->mem = true;
    } else if (strcasecmp(key, "deviceCoreScaling") == 0) {
        if (want_number(v, where, 0.01, 100, &d, err) != GV_OK)
            return err->code;
        s->core_scaling = d;
        m->core = true;
    } else if (strcasecmp(key, "migMode") == 0) {
        if (want_string(v, where, 16, err) != GV_OK)
            return err->code;
        const char *mm = json_string_value(v);
        if (strcmp(mm, "whole") != 0 && strcmp(mm, "vgpu") != 0)
            return gv_error_set(err, GV_EINVAL, "node config: %s = '%s' is not whole or vgpu",
                                where, mm);
        s->mig_vgpu = strcmp(mm, "vgpu") == 0;
        m->mig = true;
    } else {
        return GV_ENOTFOUND;
    }
    return GV_OK;
}

static gv_status parse_filter(struct gv_node_config *c, json_t *v, const char *path,
                              struct gv_error *err)
{
    if (!json_is_object(v))
        return gv_error_set(err, GV_EINVAL, "node config: %sfilterDevices must be an object",
                            path);
    const char *k;
    json_t *arr;
    json_object_foreach(v, k, arr) {
        bool uuid = strcasecmp(k, "uuid") == 0;
        if (!uuid && strcasecmp(k, "index") != 0)
            return gv_error_set(err, GV_EINVAL,
                                "node config: %sfilterDevices.%s is not a known key (uuid, index)",
                                path, k);
        if (!json_is_array(arr))
            return gv_error_set(err, GV_EINVAL, "node config: %sfilterDevices.%s must be a list",
                                path, k);
        size_t i, n = json_array_size(arr);
        json_t *e;
        if (uuid) {
            void *p = realloc(c->exclude_uuids, (c->n_exclude_uuids + n + 1) * sizeof(*c->exclude_uuids));
            if (p == NULL)
                return gv_error_set(err, GV_ENOMEM, "node config: out of memory");
            c->exclude_uuids = p;
        } else {
            void *p = realloc(c->exclude_indexes, (c->n_exclude_indexes + n + 1) * sizeof(int));
            if (p == NULL)
                return gv_error_set(err, GV_ENOMEM, "node config: out of memory");
            c->exclude_indexes = p;
        }
        json_array_foreach(arr, i, e) {
            char where[256];
            snprintf(where, sizeof(where), "%sfilterDevices.%s[%zu]", path, k, i);
            if (uuid) {
                if (want_string(e, where, 96, err) != GV_OK)
                    return err->code;
                snprintf(c->exclude_uuids[c->n_exclude_uuids++], 96, "%s", json_string_value(e));
            } else {
                double d;
                if (!json_is_integer(e) || want_number(e, where, 0, 1023, &d, err) != GV_OK)
                    return gv_error_set(err, GV_EINVAL,
                                        "node config: %s must be a GPU index 0..1023", where);
                c->exclude_indexes[c->n_exclude_indexes++] = (int)d;
            }
        }
    }
    return GV_OK;
}

static gv_status parse_rules(struct gv_node_config *c, json_t *v, const char *path,
                             struct gv_error *err)
{
    if (!json_is_array(v))
        return gv_error_set(err, GV_EINVAL, "node config: %sgpus must be a list", path);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        char where[256];
        snprintf(where, sizeof(where), "%sgpus[%zu].", path, i);
        if (!json_is_object(e))
            return gv_error_set(err, GV_EINVAL, "node config: %sgpus[%zu] must be an object", path,
                                i);
        void *p = realloc(c->rules, (c->n_rules + 1) * sizeof(*c->rules));
        if (p == NULL)
            return gv_error_set(err, GV_ENOMEM, "node config: out of memory");
        c->rules = p;
        struct gv_node_gpu_rule *r = &c->rules[c->n_rules++];
        memset(r, 0, sizeof(*r));
        r->index = -1;
        r->s = c->defaults;
        struct settings_mask m = {0};
        const char *k;
        json_t *val;
        json_object_foreach(e, k, val) {
            char w[300];
            snprintf(w, sizeof(w), "%s%s", where, k);
            if (strcasecmp(k, "uuid") == 0) {
                if (want_string(val, w, sizeof(r->uuid), err) != GV_OK)
                    return err->code;
                snprintf(r->uuid, sizeof(r->uuid), "%s", json_string_value(val));
            } else if (strcasecmp(k, "index") == 0) {
                double d;
                if (!json_is_integer(val) || want_number(val, w, 0, 1023, &d, err) != GV_OK)
                    return gv_error_set(err, GV_EINVAL,
                                        "node config: %s must be a GPU index 0..1023", w);
                r->index = (int)d;
            } else {
                gv_status st = settings_key(k, val, where, &r->s, &m, err);
                if (st == GV_ENOTFOUND)
                    return gv_error_set(err, GV_EINVAL, "node config: %s is not a known key", w);
                if (st != GV_OK)
                    return st;
            }
        }
        if ((r->uuid[0] != '\0') == (r->index >= 0))
            return gv_error_set(err, GV_EINVAL,
                                "node config: %sgpus[%zu] needs exactly one of uuid or index",
                                path, i);
        r->has_mode = m.mode;
        r->has_split = m.split;
        r->has_mem = m.mem;
        r->has_core = m.core;
        r->has_mig = m.mig;
    }
    return GV_OK;
}

static gv_status add_note(struct gv_node_config *c, struct gv_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records (and logs) why a HAMi key that was read changes nothing. */
static gv_status add_note(struct gv_node_config *c, struct gv_error *err, const char *fmt, ...)
{
    void *p = realloc(c->notes, (c->n_notes + 1) * sizeof(*c->notes));
    if (p == NULL)
        return gv_error_set(err, GV_ENOMEM, "node config: out of memory");
    c->notes = p;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->notes[c->n_notes], sizeof(c->notes[0]), fmt, ap);
    va_end(ap);
    gv_info("node config: %s", c->notes[c->n_notes]);
    c->n_notes++; /* not inside gv_info: its arguments are evaluated only when logging */
    return GV_OK;
}

/* HAMi's node keys (its chart's nodeconfig[] and device-config defaults):
 * GV_ENOTFOUND when key is none of them. */
static gv_status hami_node_key(struct gv_node_config *c, const char *key, json_t *v,
                               const char *where, struct gv_error *err)
{
    double d;
    if (strcasecmp(key, "preconfigureddevicememory") == 0) {
        /* MiB for GPUs whose memory NVML cannot report (unified memory) */
        if (!json_is_integer(v) || want_number(v, where, 0, (double)(UINT64_C(1) << 30), &d,
                                               err) != GV_OK)
            return gv_error_set(err, GV_EINVAL,
                                "node config: %s must be an integer number of MiB (0 = query "
                                "NVML)",
                                where);
        c->preconfigured_mem_mib = (uint64_t)d;
    } else if (strcasecmp(key, "libcudaloglevel") == 0) {
        /* HAMi: "0" errors, "1" warnings, "3" infos, "4" debug; a string in its chart */
        char lvl[8];
        if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 4)
            snprintf(lvl, sizeof(lvl), "%d", (int)json_integer_value(v));
        else if (json_is_string(v) && json_string_length(v) == 1 &&
                 strchr("01234", json_string_value(v)[0]) != NULL)
            snprintf(lvl, sizeof(lvl), "%s", json_string_value(v));
        else if (json_is_string(v) && json_string_length(v) == 0)
            lvl[0] = '\0';
        else
            return gv_error_set(err, GV_EINVAL, "node config: %s must be \"0\" .. \"4\"",
                                where);
        snprintf(c->libcuda_log_level, sizeof(c->libcuda_log_level), "%s", lvl);
    } else if (strcasecmp(key, "disablecorelimit") == 0) {
        /* HAMi's device-plugin switch (a string in its chart): the same as
         * coreUtilizationPolicy "disable" */
        const char *t = json_string_value(v);
        bool on = json_is_true(v) || (t != NULL && strcasecmp(t, "true") == 0);
        if (!json_is_boolean(v) &&
            !(t != NULL && (strcasecmp(t, "true") == 0 || strcasecmp(t, "false") == 0)))
            return gv_error_set(err, GV_EINVAL, "node config: %s must be true or false", where);
        if (on)
            snprintf(c->core_policy, sizeof(c->core_policy), "disable");
    } else if (strcasecmp(key, "enablenumatopology") == 0) {
        if (!json_is_boolean(v))
            return gv_error_set(err, GV_EINVAL, "node config: %s must be true or false", where);
        c->hide_numa = !json_is_true(v);
    } else if (strcasecmp(key, "migstrategy") == 0) {
        /* HAMi's key, NVIDIA's values; any case, so also migStrategy (docs/mig-cdi.md) */
        if (want_string(v, where, sizeof(c->mig_strategy), err) != GV_OK)
            return err->code;
        const char *p = json_string_value(v);
        if (strcmp(p, "none") != 0 && strcmp(p, "single") != 0 && strcmp(p, "mixed") != 0)
            return gv_error_set(err, GV_EINVAL,
                                "node config: %s = '%s' is not none, single or mixed", where, p);
        snprintf(c->mig_strategy, sizeof(c->mig_strategy), "%s", p);
    } else if (strcasecmp(key, "enablegetpreferredallocation") == 0) {
        if (!json_is_boolean(v))
            return gv_error_set(err, GV_EINVAL, "node config: %s must be true or false", where);
        return add_note(c, err,
                        "%s: no effect, gpuvisor always answers GetPreferredAllocation with "
                        "the GPUs its scheduler assigned",
                        where);
    } else {
        return GV_ENOTFOUND;
    }
    return GV_OK;
}

static void note(struct gv_node_config *c, const char *text)
{
    size_t l = strlen(c->warnings);
    if (strstr(c->warnings, text) == NULL)
        snprintf(c->warnings + l, sizeof(c->warnings) - l, "%s%s", l ? "; " : "", text);
}

/* sharing.<strategy>.resources[i].devices: "all", a count > 0, or a list of indexes/UUIDs. */
static gv_status parse_devices(struct gv_node_shared_resource *r, json_t *v, const char *where,
                               struct gv_error *err)
{
    if (json_is_string(v)) {
        if (strcmp(json_string_value(v), "all") != 0)
            return gv_error_set(err, GV_EINVAL,
                                "node config: %s = '%s': the only string accepted is 'all'", where,
                                json_string_value(v));
        return GV_OK;
    }
    if (json_is_integer(v)) {
        if (json_integer_value(v) <= 0 || json_integer_value(v) > 1024)
            return gv_error_set(err, GV_ERANGE, "node config: %s: a count of devices must be 1..1024",
                                where);
        r->count = (unsigned)json_integer_value(v);
        return GV_OK;
    }
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 1024)
        return gv_error_set(err, GV_EINVAL,
                            "node config: %s must be \"all\", a count or a non-empty list", where);
    r->list = calloc(json_array_size(v), sizeof(*r->list));
    if (r->list == NULL)
        return gv_error_set(err, GV_ENOMEM, "node config: out of memory");
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) <= 1023) {
            snprintf(r->list[r->n_list++], 96, "%d", (int)json_integer_value(e));
        } else if (json_is_string(e) && json_string_length(e) < 96 &&
                   (strncmp(json_string_value(e), "GPU-", 4) == 0 ||
                    strspn(json_string_value(e), "0123456789") == json_string_length(e)) &&
                   json_string_length(e) > 0) {
            snprintf(r->list[r->n_list++], 96, "%s", json_string_value(e));
        } else {
            return gv_error_set(err, GV_EINVAL,
                                "node config: %s[%zu] must be a GPU index or a GPU-... UUID (MIG "
                                "devices are not shared this way)",
                                where, i);
        }
    }
    return GV_OK;
}

/* NVIDIA's ReplicatedResources: {renameByDefault, failRequestsGreaterThanOne, resources}. */
static gv_status parse_replicated(struct gv_node_config *c, struct gv_node_sharing *sh, json_t *v,
                                  const char *where, struct gv_error *err)
{
    if (!json_is_object(v))
        return gv_error_set(err, GV_EINVAL, "node config: %s must be an object", where);
    const char *k;
    json_t *e;
    json_t *resources = NULL;
    json_object_foreach(v, k, e) {
        char w[300];
        snprintf(w, sizeof(w), "%s.%s", where, k);
        if (strcmp(k, "renameByDefault") == 0 || strcmp(k, "failRequestsGreaterThanOne") == 0) {
            if (!json_is_boolean(e))
                return gv_error_set(err, GV_EINVAL, "node config: %s must be true or false", w);
            if (k[0] == 'r')
                sh->rename_by_default = json_is_true(e);
            else
                sh->fail_gt_one = json_is_true(e);
        } else if (strcmp(k, "resources") == 0) {
            resources = e;
        } else {
            return gv_error_set(err, GV_EINVAL, "node config: %s is not a known key", w);
        }
    }
    if (!json_is_array(resources) || json_array_size(resources) == 0)
        return gv_error_set(err, GV_EINVAL, "node config: %s: no resources specified", where);
    sh->res = calloc(json_array_size(resources), sizeof(*sh->res));
    if (sh->res == NULL)
        return gv_error_set(err, GV_ENOMEM, "node config: out of memory");
    size_t i;
    json_array_foreach(resources, i, e) {
        char w[300];
        snprintf(w, sizeof(w), "%s.resources[%zu]", where, i);
        if (!json_is_object(e))
            return gv_error_set(err, GV_EINVAL, "node config: %s must be an object", w);
        struct gv_node_shared_resource *r = &sh->res[sh->n_res++];
        json_t *name = json_object_get(e, "name"), *rep = json_object_get(e, "replicas");
        char wn[320];
        snprintf(wn, sizeof(wn), "%s.name", w);
        if (name == NULL)
            return gv_error_set(err, GV_EINVAL, "node config: %s: no resource name specified", w);
        /* room for ".shared" (renameByDefault) */
        if (want_string(name, wn, sizeof(r->name) - 7, err) != GV_OK)
            return err->code;
        snprintf(r->name, sizeof(r->name), "%s", json_string_value(name));
        if (rep == NULL)
            return gv_error_set(err, GV_EINVAL, "node config: %s: no replicas specified", w);
        if (!json_is_integer(rep) || json_integer_value(rep) < 2 ||
            json_integer_value(rep) > GV_NODE_MAX_SPLIT)
            return gv_error_set(err, GV_ERANGE,
                                "node config: %s.replicas: number of replicas must be 2..%d", w,
                                GV_NODE_MAX_SPLIT);
        r->replicas = (unsigned)json_integer_value(rep);
        const char *rk;
        json_t *rv;
        json_object_foreach(e, rk, rv) {
            snprintf(wn, sizeof(wn), "%s.%s", w, rk);
            if (strcmp(rk, "devices") == 0) {
                if (parse_devices(r, rv, wn, err) != GV_OK)
                    return err->code;
            } else if (strcmp(rk, "rename") == 0) {
                /* NVIDIA's plugin parses it and ignores it with a warning (renaming disabled) */
                if (want_string(rv, wn, 128, err) != GV_OK)
                    return err->code;
                note(c, "'rename' in sharing resources is ignored, as NVIDIA's plugin does");
            } else if (strcmp(rk, "name") != 0 && strcmp(rk, "replicas") != 0) {
                return gv_error_set(err, GV_EINVAL, "node config: %s is not a known key", wn);
            }
        }
    }
    return GV_OK;
}

/* NVIDIA's sharing block: {timeSlicing: {...}, mps: {...}}; MPS wins when both replicate. */
static gv_status parse_sharing(struct gv_node_config *c, json_t *v, const char *path,
                               struct gv_error *err)
{
    if (!json_is_object(v))
        return gv_error_set(err, GV_EINVAL, "node config: %ssharing must be an object", path);
    struct gv_node_sharing ts = {.mode = GV_NODE_MODE_TIMESLICING},
                           mps = {.mode = GV_NODE_MODE_MPS, .fail_gt_one = true};
    const char *k;
    json_t *e;
    gv_status st = GV_OK;
    json_object_foreach(v, k, e) {
        char w[300];
        snprintf(w, sizeof(w), "%ssharing.%s", path, k);
        if (strcmp(k, "timeSlicing") == 0) {
            if (json_object_size(e) == 0) /* NVIDIA's default config: `timeSlicing: {}` */
                continue;
            st = parse_replicated(c, &ts, e, w, err);
            ts.active = st == GV_OK;
        } else if (strcmp(k, "mps") == 0) {
            if (json_is_null(e))
                continue;
            st = parse_replicated(c, &mps, e, w, err);
            mps.active = st == GV_OK;
        } else {
            st = gv_error_set(err, GV_EINVAL, "node config: %s is not a known key (timeSlicing, mps)",
                              w);
        }
        if (st != GV_OK)
            break;
    }
    if (st != GV_OK) {
        sharing_free(&ts);
        sharing_free(&mps);
        return st;
    }
    sharing_free(&c->sharing);
    if (mps.active) {
        c->sharing = mps;
        sharing_free(&ts);
    } else {
        c->sharing = ts;
        sharing_free(&mps);
    }
    return GV_OK;
}

/* Keys we accept and ignore: they name the document or the entry. */
static bool ignored_key(const char *k)
{
    static const char *const keys[] = {"name", "version"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcasecmp(k, keys[i]) == 0)
            return true;
    return false;
}

/* Applies one level (top or a nodeConfig entry) of keys. */
static gv_status parse_level(struct gv_node_config *c, json_t *obj, const char *path,
                             const char *node, bool top, struct gv_error *err)
{
    const char *k;
    json_t *v;
    struct settings_mask m = {0};
    json_object_foreach(obj, k, v) {
        char where[256];
        snprintf(where, sizeof(where), "%s%s", path, k);
        gv_status st = settings_key(k, v, path, &c->defaults, &m, err);
        if (st == GV_ENOTFOUND)
            st = hami_node_key(c, k, v, where, err);
        if (st == GV_OK)
            continue;
        if (st != GV_ENOTFOUND)
            return st;
        if (strcasecmp(k, "resourceName") == 0) {
            if (want_string(v, where, sizeof(c->resource_name), err) != GV_OK)
                return err->code;
            if (strchr(json_string_value(v), '/') == NULL)
                return gv_error_set(err, GV_EINVAL,
                                    "node config: %s = '%s' is not a domain/name resource", where,
                                    json_string_value(v));
            snprintf(c->resource_name, sizeof(c->resource_name), "%s", json_string_value(v));
        } else if (strcasecmp(k, "cdi") == 0) {
            if (!json_is_boolean(v))
                return gv_error_set(err, GV_EINVAL, "node config: %s must be true or false",
                                    where);
            c->cdi = json_is_true(v);
        } else if (strcasecmp(k, "cdiKind") == 0) {
            if (want_string(v, where, sizeof(c->cdi_kind), err) != GV_OK)
                return err->code;
            if (gv_cdi_kind_check(json_string_value(v), err) != GV_OK) {
                gv_error_prefix(err, "node config: %s: ", where);
                return err->code;
            }
            snprintf(c->cdi_kind, sizeof(c->cdi_kind), "%s", json_string_value(v));
        } else if (strcasecmp(k, "coreUtilizationPolicy") == 0) {
            if (want_string(v, where, sizeof(c->core_policy), err) != GV_OK)
                return err->code;
            const char *p = json_string_value(v);
            if (strcmp(p, "default") != 0 && strcmp(p, "force") != 0 &&
                strcmp(p, "disable") != 0)
                return gv_error_set(err, GV_EINVAL,
                                    "node config: %s = '%s' is not default, force or disable",
                                    where, p);
            snprintf(c->core_policy, sizeof(c->core_policy), "%s", p);
        } else if (strcasecmp(k, "cdiSpecDir") == 0 || strcasecmp(k, "driverRoot") == 0 ||
                   strcasecmp(k, "containerDriverRoot") == 0) {
            char *dst = strcasecmp(k, "cdiSpecDir") == 0   ? c->cdi_spec_dir
                        : strcasecmp(k, "driverRoot") == 0 ? c->driver_root
                                                           : c->container_driver_root;
            if (want_string(v, where, sizeof(c->cdi_spec_dir), err) != GV_OK)
                return err->code;
            if (json_string_value(v)[0] != '/' || strstr(json_string_value(v), "/../") ||
                strstr(json_string_value(v), "/.."))
                return gv_error_set(err, GV_EINVAL, "node config: %s = '%s' is not an absolute path",
                                    where, json_string_value(v));
            snprintf(dst, sizeof(c->cdi_spec_dir), "%s", json_string_value(v));
        } else if (strcasecmp(k, "nvidiaRuntime") == 0) {
            if (!json_is_boolean(v))
                return gv_error_set(err, GV_EINVAL, "node config: %s must be true or false",
                                    where);
            c->nvidia_runtime = json_is_true(v);
        } else if (strcasecmp(k, "filterDevices") == 0) {
            if (parse_filter(c, v, path, err) != GV_OK)
                return err->code;
        } else if (strcasecmp(k, "sharing") == 0) {
            if (parse_sharing(c, v, path, err) != GV_OK)
                return err->code;
        } else if (strcasecmp(k, "metrics") == 0) {
            if (gv_metrics_settings_parse(v, path, &c->metrics, err) != GV_OK)
                return err->code;
        } else if (strcasecmp(k, "passthrough") == 0) {
            if (gv_pt_settings_parse(v, path, &c->passthrough, err) != GV_OK)
                return err->code;
        } else if (strcasecmp(k, "gpus") == 0) {
            /* after the node-level defaults, so rules inherit them */
        } else if (top && strcasecmp(k, "nodeConfig") == 0) {
            if (!json_is_array(v))
                return gv_error_set(err, GV_EINVAL, "node config: nodeConfig must be a list");
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                json_t *name = json_is_object(e) ? json_object_get(e, "name") : NULL;
                if (!json_is_string(name))
                    return gv_error_set(err, GV_EINVAL,
                                        "node config: nodeConfig[%zu] needs a string name", i);
            }
        } else if (!ignored_key(k)) {
            return gv_error_set(err, GV_EINVAL, "node config: %s is not a known key", where);
        }
    }
    (void)node;
    return GV_OK;
}

static json_t *get_ci(json_t *obj, const char *key)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        if (strcasecmp(k, key) == 0)
            return v;
    }
    return NULL;
}

gv_status gv_node_config_parse(const char *text, size_t len, const char *node,
                               struct gv_node_config **out, struct gv_error *err)
{
    struct gv_error local;
    if (err == NULL)
        err = &local; /* the helpers below report through err */
    struct gv_node_config *c = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return gv_error_set(err, GV_EPARSE, "node config: line %d column %d: %s", je.line,
                            je.column, je.text);
    if (!json_is_object(root)) {
        gv_error_set(err, GV_EPARSE, "node config: the document must be a JSON object");
        goto fail;
    }
    json_t *ver = get_ci(root, "version");
    if (ver != NULL && !(json_is_integer(ver) && json_integer_value(ver) == 1)) {
        gv_error_set(err, GV_EUNSUPPORTED, "node config: version must be 1");
        goto fail;
    }
    if (gv_node_config_default(&c, err) != GV_OK)
        goto fail;
    if (parse_level(c, root, "", node, true, err) != GV_OK)
        goto fail;
    json_t *mine = NULL, *list = get_ci(root, "nodeConfig");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        if (node && strcmp(json_string_value(json_object_get(e, "name")), node) == 0)
            mine = e;
    }
    /* Other nodes' entries: checked too, so a typo fails on every node. */
    json_array_foreach(list, i, e) {
        if (e == mine)
            continue;
        struct gv_node_config *scratch = NULL;
        char other[300];
        snprintf(other, sizeof(other), "nodeConfig[%s].",
                 json_string_value(json_object_get(e, "name")));
        if (gv_node_config_default(&scratch, err) != GV_OK)
            goto fail;
        gv_status st = parse_level(scratch, e, other, NULL, false, err);
        gv_node_config_free(scratch);
        if (st != GV_OK)
            goto fail;
    }
    char path[300] = "";
    if (mine) {
        snprintf(path, sizeof(path), "nodeConfig[%s].", node);
        if (parse_level(c, mine, path, node, false, err) != GV_OK)
            goto fail;
    }
    /* GPU rules: the node's own list replaces the top-level one */
    json_t *rules = mine && get_ci(mine, "gpus") ? get_ci(mine, "gpus") : get_ci(root, "gpus");
    if (rules && parse_rules(c, rules, mine && get_ci(mine, "gpus") ? path : "", err) != GV_OK)
        goto fail;
    json_decref(root);
    *out = c;
    return GV_OK;
fail:
    json_decref(root);
    gv_node_config_free(c);
    return err->code;
}

gv_status gv_node_config_load(const char *path, const char *node, struct gv_node_config **out,
                              struct gv_error *err)
{
    char *text;
    size_t len;
    FILE *f = fopen(path, "r");
    if (f == NULL && errno == ENOENT)
        return gv_node_config_default(out, err);
    if (f)
        fclose(f);
    if (gv_file_read_all(path, &text, &len, err) != GV_OK)
        return err ? err->code : GV_EIO;
    gv_status st = gv_node_config_parse(text, len, node, out, err);
    if (st != GV_OK)
        gv_error_prefix(err, "%s", path);
    free(text);
    return st;
}

bool gv_node_config_gpu(const struct gv_node_config *cfg, const char *uuid, unsigned index,
                        struct gv_node_gpu_settings *out)
{
    for (size_t i = 0; i < cfg->n_exclude_uuids; i++)
        if (strcasecmp(cfg->exclude_uuids[i], uuid) == 0)
            return false;
    for (size_t i = 0; i < cfg->n_exclude_indexes; i++)
        if (cfg->exclude_indexes[i] == (int)index)
            return false;
    *out = cfg->defaults;
    /* NVIDIA's sharing block: between the defaults and the (more specific) GPU rules */
    const struct gv_node_sharing *sh = &cfg->sharing;
    for (size_t i = 0; sh->active && i < sh->n_res; i++) {
        const struct gv_node_shared_resource *r = &sh->res[i];
        if (strcmp(r->name, cfg->resource_name) != 0)
            continue; /* another resource (MIG profiles): no GPU of ours has it */
        bool pick = r->count ? index < r->count : r->n_list == 0;
        for (size_t k = 0; k < r->n_list && !pick; k++) {
            char idx[16];
            snprintf(idx, sizeof(idx), "%u", index);
            pick = strcasecmp(r->list[k], uuid) == 0 || strcmp(r->list[k], idx) == 0;
        }
        if (!pick)
            continue;
        out->mode = sh->mode;
        out->split = r->replicas;
        out->fail_gt_one = sh->fail_gt_one;
        snprintf(out->resource, sizeof(out->resource), "%s", r->name);
        if (sh->rename_by_default) /* NVIDIA's DefaultSharedRename; names fit (parse checks) */
            strncat(out->resource, ".shared", sizeof(out->resource) - strlen(out->resource) - 1);
        break;
    }
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct gv_node_gpu_rule *r = &cfg->rules[i];
        bool match = r->uuid[0] ? strcasecmp(r->uuid, uuid) == 0 : r->index == (int)index;
        if (!match)
            continue;
        if (r->has_mode)
            out->mode = r->s.mode;
        if (r->has_split)
            out->split = r->s.split;
        if (r->has_mem)
            out->mem_scaling = r->s.mem_scaling;
        if (r->has_core)
            out->core_scaling = r->s.core_scaling;
        if (r->has_mig)
            out->mig_vgpu = r->s.mig_vgpu;
    }
    if (out->mode == GV_NODE_MODE_EXCLUSIVE)
        out->split = 1;
    if (out->resource[0] && !(sh->active && out->mode == sh->mode)) {
        /* a GPU rule took it out of the sharing block's mode: its resource goes too */
        out->resource[0] = '\0';
        out->fail_gt_one = false;
    }
    return true;
}
