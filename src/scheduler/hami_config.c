/* HAMi's device ConfigMap as the scheduler's configuration: see hami_config.h. */
#include "scheduler/hami_config.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/gv_log.h"
#include "kube/gv_kube.h"

/* Sections of other vendors' devices in HAMi's chart: gpuvisor manages
 * NVIDIA GPUs only, so they are read past with a note. */
static const char *const other_vendors[] = {
    "cambricon", "hygon", "metax",    "enflame", "mthreads", "iluvatars", "iluvatar",
    "kunlun",    "awsneuron", "amd",  "vastai",  "biren",    "vnpus",     "ascend"};

bool gv_sched_config_is_hami(const char *text, size_t len)
{
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i]))
        i++;
    return i < len && text[i] != '{';
}

static void note(struct gv_sched_config *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(struct gv_sched_config *cfg, const char *fmt, ...)
{
    char buf[sizeof(cfg->notes[0])];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    gv_info("HAMi device config: %s", buf);
    if (cfg->n_notes < sizeof(cfg->notes) / sizeof(cfg->notes[0]))
        snprintf(cfg->notes[cfg->n_notes++], sizeof(cfg->notes[0]), "%s", buf);
}

/* YAML scalars arrive as strings. */
static gv_status get_int(json_t *v, const char *key, int64_t lo, int64_t hi, int64_t *out,
                         struct gv_error *err)
{
    const char *s = json_string_value(v);
    char *end = NULL;
    long long x = s != NULL && *s != '\0' ? strtoll(s, &end, 10) : 0;
    if (s == NULL || end == NULL || *end != '\0' || x < lo || x > hi)
        return gv_error_set(err, GV_EINVAL,
                            "HAMi device config: nvidia.%s must be an integer in %" PRId64
                            "..%" PRId64,
                            key, lo, hi);
    *out = x;
    return GV_OK;
}

static gv_status get_bool(json_t *v, const char *key, bool *out, struct gv_error *err)
{
    const char *s = json_string_value(v);
    if (s != NULL && strcasecmp(s, "true") == 0)
        *out = true;
    else if (s != NULL && strcasecmp(s, "false") == 0)
        *out = false;
    else
        return gv_error_set(err, GV_EINVAL, "HAMi device config: nvidia.%s must be true or false",
                            key);
    return GV_OK;
}

static gv_status get_number(json_t *v, const char *key, double *out, struct gv_error *err)
{
    const char *s = json_string_value(v);
    char *end = NULL;
    double d = s != NULL && *s != '\0' ? strtod(s, &end) : 0;
    if (s == NULL || end == NULL || *end != '\0' || !(d > 0 && d <= 100))
        return gv_error_set(err, GV_EINVAL,
                            "HAMi device config: nvidia.%s must be a number in (0, 100]", key);
    *out = d;
    return GV_OK;
}

/* HAMi's resource-name keys, in the order of gv_sched_config.names_storage. */
static const char *const name_keys[] = {"resourceCountName", "resourceMemoryName",
                                        "resourceMemoryPercentageName", "resourceCoreName",
                                        "resourcePriorityName"};

static gv_status set_name(struct gv_sched_config *cfg, size_t i, json_t *v,
                          struct gv_error *err)
{
    const char *s = json_string_value(v);
    if (s == NULL || strchr(s, '/') == NULL)
        return gv_error_set(err, GV_EINVAL,
                            "HAMi device config: nvidia.%s must be a domain/name resource",
                            name_keys[i]);
    char *copy = strdup(s);
    if (copy == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    free(cfg->names_storage[i]);
    cfg->names_storage[i] = copy;
    const char **slots[] = {&cfg->alloc.res.gpu, &cfg->alloc.res.mem, &cfg->alloc.res.mem_pct,
                            &cfg->alloc.res.cores, &cfg->alloc.res.priority};
    *slots[i] = copy;
    return GV_OK;
}

/* Keys gpuvisor-node applies: the scheduler reads their effect per GPU
 * from the node inventory. */
static const struct {
    const char *key, *node_key;
} node_side[] = {
    {"deviceMemoryScaling", "devicememoryscaling"},
    {"deviceCoreScaling", "devicecorescaling"},
    {"preConfiguredDeviceMemory", "preconfigureddevicememory"},
    {"enableNumaTopology", "enablenumatopology"},
    {"libCudaLogLevel", "libcudaloglevel"},
    {"disableCoreLimit", "disablecorelimit"},
    {"gpuCorePolicy", "coreUtilizationPolicy"},
};

static gv_status nvidia_key(struct gv_sched_config *cfg, const char *k, json_t *v,
                            struct gv_error *err)
{
    int64_t x;
    gv_status st;
    for (size_t i = 0; i < sizeof(name_keys) / sizeof(name_keys[0]); i++)
        if (strcmp(k, name_keys[i]) == 0)
            return set_name(cfg, i, v, err);
    if (strcmp(k, "defaultMemory") == 0 || strcmp(k, "defaultMem") == 0) {
        if ((st = get_int(v, k, 0, INT64_C(1) << 24, &x, err)) != GV_OK)
            return st;
        cfg->alloc.default_mem_mib = (uint64_t)x; /* 0: the whole GPU, as in HAMi */
    } else if (strcmp(k, "defaultCores") == 0) {
        if ((st = get_int(v, k, 0, 100, &x, err)) != GV_OK)
            return st;
        cfg->alloc.default_cores = (uint32_t)x;
    } else if (strcmp(k, "defaultGPUNum") == 0) {
        if ((st = get_int(v, k, 1, GV_ALLOC_MAX_DEVICES, &x, err)) != GV_OK)
            return st;
        cfg->alloc.default_gpu_num = (uint32_t)x;
    } else if (strcmp(k, "deviceSplitCount") == 0) {
        if ((st = get_int(v, k, 1, 1024, &x, err)) != GV_OK)
            return st;
        cfg->alloc.default_split = (uint32_t)x; /* for nodes whose inventory gives none */
    } else if (strcmp(k, "overwriteEnv") == 0) {
        return get_bool(v, k, &cfg->hide_gpus_from_others, err);
    } else if (strcmp(k, "runtimeClassName") == 0) {
        const char *s = json_string_value(v);
        if (s == NULL || strlen(s) >= sizeof(cfg->runtime_class))
            return gv_error_set(err, GV_EINVAL,
                                "HAMi device config: nvidia.runtimeClassName must be a name");
        snprintf(cfg->runtime_class, sizeof(cfg->runtime_class), "%s", s);
    } else if (strcmp(k, "memoryFactor") == 0) {
        if ((st = get_int(v, k, 1, 1 << 20, &x, err)) != GV_OK)
            return st;
        if (x != 1)
            return gv_error_set(err, GV_EUNSUPPORTED,
                                "HAMi device config: nvidia.memoryFactor %" PRId64
                                ": gpuvisor reads %s in MiB only; write the requests in MiB "
                                "and memoryFactor: 1",
                                x, cfg->alloc.res.mem);
    } else if (strcmp(k, "migProfileAllowlist") == 0) {
        note(cfg, "nvidia.migProfileAllowlist: no effect, gpuvisor creates no MIG instances (it "
                  "follows the operator's MIG geometry)");
    } else {
        for (size_t i = 0; i < sizeof(node_side) / sizeof(node_side[0]); i++) {
            if (strcmp(k, node_side[i].key) != 0)
                continue;
            double d;
            bool b;
            /* still checked, so a typo'd value is not silently carried over */
            if (strcmp(k, "deviceMemoryScaling") == 0 || strcmp(k, "deviceCoreScaling") == 0)
                st = get_number(v, k, &d, err);
            else if (strcmp(k, "enableNumaTopology") == 0 || strcmp(k, "disableCoreLimit") == 0)
                st = get_bool(v, k, &b, err);
            else
                st = json_is_string(v) ? GV_OK
                                       : gv_error_set(err, GV_EINVAL,
                                                      "HAMi device config: nvidia.%s must be a "
                                                      "scalar",
                                                      k);
            if (st != GV_OK)
                return st;
            note(cfg,
                 "nvidia.%s: no effect in the scheduler; gpuvisor-node applies it (node config "
                 "key %s) and publishes the result per GPU",
                 k, node_side[i].node_key);
            return GV_OK;
        }
        return gv_error_set(err, GV_EINVAL, "HAMi device config: unknown key \"nvidia.%s\"", k);
    }
    return GV_OK;
}

gv_status gv_sched_hami_config_parse(const char *text, size_t len, struct gv_sched_config *cfg,
                                     struct gv_error *err)
{
    json_t *root = NULL;
    gv_status st = gv_kube_yaml_load(text, len, "HAMi device config", &root, err);
    if (st != GV_OK)
        return st;
    json_t *nv = json_object_get(root, "nvidia");
    if (!json_is_object(root) || !json_is_object(nv)) {
        st = gv_error_set(err, GV_EPARSE,
                          "HAMi device config: expected a mapping with an \"nvidia\" section "
                          "(HAMi's device-config.yaml) or a JSON object (gpuvisor's config)");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "nvidia") == 0)
            continue;
        size_t i = 0, n = sizeof(other_vendors) / sizeof(other_vendors[0]);
        while (i < n && strcmp(k, other_vendors[i]) != 0)
            i++;
        if (i == n) {
            st = gv_error_set(err, GV_EINVAL, "HAMi device config: unknown section \"%s\"", k);
            goto out;
        }
        note(cfg, "%s: no effect, gpuvisor manages NVIDIA GPUs only", k);
    }
    json_object_foreach(nv, k, v)
    {
        if ((st = nvidia_key(cfg, k, v, err)) != GV_OK)
            goto out;
    }
    /* HAMi's defaults (its chart: nodeSchedulerPolicy binpack, gpuSchedulerPolicy spread) */
    cfg->alloc.node_policy = GV_ALLOC_POLICY_BINPACK;
    cfg->alloc.gpu_policy = GV_ALLOC_GPU_SPREAD;
    note(cfg, "HAMi's default policies: nodes binpack, GPUs within a node spread");
out:
    json_decref(root);
    return st;
}
