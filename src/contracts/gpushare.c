/* Aliyun gpushare's container environment: see gpushare.h. */
#include "contracts/gpushare.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A container's aliyun.com/gpu-mem (limits, else requests) in GiB; -1 if none. */
static long long gib_of(const json_t *c)
{
    const json_t *res = json_object_get(c, "resources");
    const char *lists[] = {"limits", "requests"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(json_object_get(res, lists[i]), GV_GPUSHARE_RESOURCE);
        const char *s = json_string_value(v);
        if (json_is_integer(v))
            return json_integer_value(v) >= 0 ? (long long)json_integer_value(v) : -1;
        if (s != NULL) {
            char *end = NULL;
            long long x = strtoll(s, &end, 10);
            return end != s && *end == '\0' && x >= 0 ? x : -1;
        }
    }
    return -1;
}

size_t gv_gpushare_env(const json_t *pod, const char *container, const unsigned *indexes,
                       size_t n, uint64_t dev_mib, struct gv_gpushare_env out[GV_GPUSHARE_ENV_COUNT])
{
    const json_t *cs = json_object_get(json_object_get(pod, "spec"), "containers");
    long long mine = -1, total = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(cs, i, c)
    {
        long long g = gib_of(c);
        const char *name = json_string_value(json_object_get(c, "name"));
        if (g > 0) /* saturated: the spec's numbers are the tenant's, and can be huge */
            total = g > LLONG_MAX - total ? LLONG_MAX : total + g;
        if (name != NULL && container != NULL && strcmp(name, container) == 0)
            mine = g;
    }
    if (mine <= 0 || n == 0)
        return 0;
    out[0].key = "ALIYUN_COM_GPU_MEM_IDX";
    size_t o = 0;
    out[0].value[0] = '\0';
    for (size_t k = 0; k < n && o + 12 < sizeof(out[0].value); k++)
        o += (size_t)snprintf(out[0].value + o, sizeof(out[0].value) - o, "%s%u", k ? "," : "",
                              indexes[k]);
    out[1].key = "ALIYUN_COM_GPU_MEM_DEV";
    snprintf(out[1].value, sizeof(out[1].value), "%llu", (unsigned long long)(dev_mib >> 10));
    out[2].key = "ALIYUN_COM_GPU_MEM_CONTAINER";
    snprintf(out[2].value, sizeof(out[2].value), "%lld", mine);
    out[3].key = "ALIYUN_COM_GPU_MEM_POD";
    snprintf(out[3].value, sizeof(out[3].value), "%lld", total);
    return GV_GPUSHARE_ENV_COUNT;
}
