/* gpuvisor-scheduler's configuration file (JSON; docs/scheduler.md). */
#include <inttypes.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_file.h"
#include "contracts/placement.h"
#include "kube/gv_kube.h"
#include "scheduler/gv_scheduler.h"
#include "scheduler/hami_config.h"

gv_status gv_sched_config_default(struct gv_sched_config *cfg, struct gv_error *err)
{
    memset(cfg, 0, sizeof(*cfg));
    gv_alloc_config_default(&cfg->alloc);
    cfg->scheduler_name = strdup("gpuvisor-scheduler");
    if (cfg->scheduler_name == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    cfg->filter_feasible = false;
    cfg->reservation_ttl_s = 60;
    cfg->hold_ttl_s = 120;
    cfg->heartbeat_timeout_s = 90;
    cfg->self_check_s = 30;
    snprintf(cfg->agent_namespace, sizeof(cfg->agent_namespace), "gpuvisor-system");
    return GV_OK;
}

void gv_sched_config_clear(struct gv_sched_config *cfg)
{
    free(cfg->scheduler_name);
    free(cfg->node_label_selector);
    free(cfg->placement_key_file);
    free(cfg->bind_journal_dir);
    gv_placement_key_free(cfg->placement_key);
    for (char **p = cfg->writers_storage; p && *p; p++)
        free(*p);
    free(cfg->writers_storage);
    for (char **p = cfg->opt_out_storage; p && *p; p++)
        free(*p);
    free(cfg->opt_out_storage);
    for (size_t i = 0; i < sizeof(cfg->names_storage) / sizeof(cfg->names_storage[0]); i++)
        free(cfg->names_storage[i]);
    memset(cfg, 0, sizeof(*cfg));
}

static gv_status get_int(json_t *v, const char *key, int64_t lo, int64_t hi, int64_t *out,
                         struct gv_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return gv_error_set(err, GV_EINVAL,
                            "config: \"%s\" must be an integer in %" PRId64 "..%" PRId64, key, lo,
                            hi);
    *out = json_integer_value(v);
    return GV_OK;
}

static gv_status set_string(json_t *v, const char *key, char **slot, struct gv_error *err)
{
    const char *s = json_string_value(v);
    if (s == NULL || *s == '\0' || strlen(s) != json_string_length(v))
        return gv_error_set(err, GV_EINVAL, "config: \"%s\" must be a non-empty string", key);
    char *copy = strdup(s);
    if (copy == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    free(*slot);
    *slot = copy;
    return GV_OK;
}

/* A JSON array of non-empty strings -> NULL-terminated copy (replacing *slot). */
static gv_status set_string_list(json_t *v, const char *key, char ***slot, struct gv_error *err)
{
    if (!json_is_array(v) || json_array_size(v) > 1024)
        return gv_error_set(err, GV_EINVAL, "config: \"%s\" must be an array of strings", key);
    char **list = calloc(json_array_size(v) + 1, sizeof(*list));
    if (list == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *s = json_string_value(e);
        if (s == NULL || *s == '\0' || strlen(s) != json_string_length(e) ||
            (list[i] = strdup(s)) == NULL) {
            for (size_t j = 0; j < i; j++)
                free(list[j]);
            free(list);
            return gv_error_set(err, GV_EINVAL, "config: \"%s[%zu]\" must be a non-empty string",
                                key, i);
        }
    }
    for (char **p = *slot; p && *p; p++)
        free(*p);
    free(*slot);
    *slot = list;
    return GV_OK;
}

/* RFC 3339 UTC, whole seconds ("2026-11-26T00:00:00Z"). */
static gv_status get_utc_time(json_t *v, const char *key, time_t *out, struct gv_error *err)
{
    const char *s = json_string_value(v);
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm) : NULL;
    if (end == NULL || *end != '\0')
        return gv_error_set(err, GV_EINVAL,
                            "config: \"%s\" must be an RFC 3339 UTC time like "
                            "2026-11-26T00:00:00Z",
                            key);
    *out = timegm(&tm);
    return GV_OK;
}

gv_status gv_sched_config_load_key(struct gv_sched_config *cfg, const char *path,
                                   struct gv_error *err)
{
    const char *p = path ? path : cfg->placement_key_file;
    if (p == NULL)
        return GV_OK;
    struct gv_placement_key *k = NULL;
    gv_status st = gv_placement_key_load(p, &k, err);
    if (st != GV_OK)
        return st;
    gv_placement_key_free(cfg->placement_key);
    cfg->placement_key = k;
    return GV_OK;
}

/* Keys of "resources", in the order of names_storage. */
static const char *const resource_keys[] = {"gpu",      "gpumem",   "gpumemPercentage",
                                            "gpucores", "priority", "gpumemGiB"};

static const char **resource_slot(struct gv_alloc_resource_names *r, size_t i)
{
    const char **slots[] = {&r->gpu, &r->mem, &r->mem_pct, &r->cores, &r->priority, &r->mem_gib};
    return slots[i];
}

static gv_status parse_resources(json_t *obj, struct gv_sched_config *cfg, struct gv_error *err)
{
    if (!json_is_object(obj))
        return gv_error_set(err, GV_EINVAL, "config: \"resources\" must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        size_t i = 0;
        while (i < 6 && strcmp(k, resource_keys[i]) != 0)
            i++;
        if (i == 6)
            return gv_error_set(err, GV_EINVAL, "config: unknown key \"resources.%s\"", k);
        char key[64];
        snprintf(key, sizeof(key), "resources.%s", k);
        gv_status st = set_string(v, key, &cfg->names_storage[i], err);
        if (st != GV_OK)
            return st;
        *resource_slot(&cfg->alloc.res, i) = cfg->names_storage[i];
    }
    return GV_OK;
}

static gv_status parse_defaults(json_t *obj, struct gv_sched_config *cfg, struct gv_error *err)
{
    if (!json_is_object(obj))
        return gv_error_set(err, GV_EINVAL, "config: \"defaults\" must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        int64_t x = 0;
        gv_status st;
        if (strcmp(k, "gpumemMiB") == 0) {
            if ((st = get_int(v, "defaults.gpumemMiB", 0, INT64_C(1) << 24, &x, err)) != GV_OK)
                return st;
            cfg->alloc.default_mem_mib = (uint64_t)x;
        } else if (strcmp(k, "gpucores") == 0) {
            if ((st = get_int(v, "defaults.gpucores", 0, 100, &x, err)) != GV_OK)
                return st;
            cfg->alloc.default_cores = (uint32_t)x;
        } else if (strcmp(k, "gpuCount") == 0) {
            if ((st = get_int(v, "defaults.gpuCount", 1, GV_ALLOC_MAX_DEVICES, &x, err)) != GV_OK)
                return st;
            cfg->alloc.default_gpu_num = (uint32_t)x;
        } else if (strcmp(k, "splitCount") == 0) {
            if ((st = get_int(v, "defaults.splitCount", 1, 1024, &x, err)) != GV_OK)
                return st;
            cfg->alloc.default_split = (uint32_t)x;
        } else {
            return gv_error_set(err, GV_EINVAL, "config: unknown key \"defaults.%s\"", k);
        }
    }
    return GV_OK;
}

gv_status gv_sched_config_parse(const char *text, size_t len, struct gv_sched_config *cfg,
                                struct gv_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    gv_status st = GV_OK;
    if (root == NULL)
        return gv_error_set(err, GV_EPARSE, "config: invalid JSON at line %d column %d: %s",
                            jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        st = gv_error_set(err, GV_EPARSE, "config: expected a JSON object");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        int64_t x = 0;
        if (strcmp(k, "schedulerName") == 0) {
            st = set_string(v, k, &cfg->scheduler_name, err);
        } else if (strcmp(k, "nodePolicy") == 0) {
            int p = gv_alloc_policy_parse(json_string_value(v));
            if (p < 0)
                st = gv_error_set(err, GV_EINVAL,
                                  "config: \"nodePolicy\" must be binpack, spread, bestfit or fgd");
            else
                cfg->alloc.node_policy = (gv_alloc_policy)p;
        } else if (strcmp(k, "gpuPolicy") == 0) {
            int p = gv_alloc_gpu_policy_parse(json_string_value(v));
            if (p < 0)
                st =
                    gv_error_set(err, GV_EINVAL, "config: \"gpuPolicy\" must be binpack or spread");
            else
                cfg->alloc.gpu_policy = (gv_alloc_gpu_policy)p;
        } else if (strcmp(k, "filterReturns") == 0) {
            const char *s = json_string_value(v);
            if (s != NULL && strcmp(s, "node") == 0)
                cfg->filter_feasible = false;
            else if (s != NULL && strcmp(s, "feasible") == 0)
                cfg->filter_feasible = true;
            else
                st = gv_error_set(err, GV_EINVAL,
                                  "config: \"filterReturns\" must be \"node\" or \"feasible\"");
        } else if (strcmp(k, "scoreAllNodes") == 0) {
            if ((st = get_int(v, k, 0, UINT32_MAX, &x, err)) == GV_OK)
                cfg->alloc.score_all_nodes = (uint32_t)x;
        } else if (strcmp(k, "scoreBudget") == 0) {
            if ((st = get_int(v, k, 0, 100000, &x, err)) == GV_OK)
                cfg->alloc.score_budget = (uint32_t)x;
        } else if (strcmp(k, "reservationTimeoutSeconds") == 0) {
            if ((st = get_int(v, k, 1, 86400, &x, err)) == GV_OK)
                cfg->reservation_ttl_s = (long)x;
        } else if (strcmp(k, "preemptionHoldSeconds") == 0) {
            if ((st = get_int(v, k, 1, 86400, &x, err)) == GV_OK)
                cfg->hold_ttl_s = (long)x;
        } else if (strcmp(k, "heartbeatTimeoutSeconds") == 0) {
            if ((st = get_int(v, k, 1, 86400, &x, err)) == GV_OK)
                cfg->heartbeat_timeout_s = (long)x;
        } else if (strcmp(k, "selfCheckSeconds") == 0) {
            if ((st = get_int(v, k, 1, 86400, &x, err)) == GV_OK)
                cfg->self_check_s = (long)x;
        } else if (strcmp(k, "nodeLabelSelector") == 0) {
            st = set_string(v, k, &cfg->node_label_selector, err);
        } else if (strcmp(k, "runtimeClassName") == 0) {
            const char *rc = json_string_value(v);
            if (rc == NULL || strlen(rc) >= sizeof(cfg->runtime_class))
                st = gv_error_set(err, GV_EINVAL, "config: \"runtimeClassName\" must be a name");
            else
                snprintf(cfg->runtime_class, sizeof(cfg->runtime_class), "%s", rc);
        } else if (strcmp(k, "nonGpuVisibleDevicesNone") == 0) {
            if (!json_is_boolean(v))
                st = gv_error_set(err, GV_EINVAL,
                                  "config: \"nonGpuVisibleDevicesNone\" must be true or false");
            else
                cfg->hide_gpus_from_others = json_is_true(v);
        } else if (strcmp(k, "metricsPerGpu") == 0) {
            if (!json_is_boolean(v))
                st = gv_error_set(err, GV_EINVAL, "config: \"%s\" must be true or false", k);
            else
                cfg->metrics_per_gpu = json_is_true(v);
        } else if (strcmp(k, "agentNamespace") == 0) {
            if (!gv_kube_dns_label(json_string_value(v)))
                st = gv_error_set(err, GV_EINVAL,
                                  "config: \"agentNamespace\" must be a namespace name "
                                  "(1-63 of a-z, 0-9, '-')");
            else
                snprintf(cfg->agent_namespace, sizeof(cfg->agent_namespace), "%s",
                         json_string_value(v));
        } else if (strcmp(k, "placementKeyFile") == 0) {
            st = set_string(v, k, &cfg->placement_key_file, err);
        } else if (strcmp(k, "bindJournalDir") == 0) {
            st = set_string(v, k, &cfg->bind_journal_dir, err);
        } else if (strcmp(k, "insecureUnsignedPlacements") == 0) {
            if (!json_is_boolean(v))
                st = gv_error_set(err, GV_EINVAL, "config: \"%s\" must be true or false", k);
            else
                cfg->insecure_unsigned = json_is_true(v);
        } else if (strcmp(k, "acceptUnsignedPlacementsBefore") == 0) {
            st = get_utc_time(v, k, &cfg->unsigned_before, err);
        } else if (strcmp(k, "placementWriters") == 0) {
            if ((st = set_string_list(v, k, &cfg->writers_storage, err)) == GV_OK)
                cfg->admission.writers = (const char *const *)cfg->writers_storage;
        } else if (strcmp(k, "optOutNamespaces") == 0) {
            if ((st = set_string_list(v, k, &cfg->opt_out_storage, err)) == GV_OK)
                cfg->admission.opt_out_namespaces = (const char *const *)cfg->opt_out_storage;
        } else if (strcmp(k, "resources") == 0) {
            st = parse_resources(v, cfg, err);
        } else if (strcmp(k, "defaults") == 0) {
            st = parse_defaults(v, cfg, err);
        } else {
            st = gv_error_set(err, GV_EINVAL, "config: unknown key \"%s\"", k);
        }
        if (st != GV_OK)
            break;
    }
out:
    json_decref(root);
    return st;
}

gv_status gv_sched_config_load(const char *path, struct gv_sched_config *cfg, struct gv_error *err)
{
    char *text = NULL;
    size_t len = 0;
    gv_status st = gv_file_read_all(path, &text, &len, err);
    if (st != GV_OK)
        return st;
    st = gv_sched_config_is_hami(text, len) ? gv_sched_hami_config_parse(text, len, cfg, err)
                                              : gv_sched_config_parse(text, len, cfg, err);
    if (st != GV_OK)
        gv_error_prefix(err, "%s", path);
    free(text);
    return st;
}
