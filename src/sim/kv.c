/*
 * "key=N,key=N" option lists of the simulator (--synthetic, --topology): one
 * parser so both refuse the same malformed input the same way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

gv_status sim_parse_kv(const char *what, const char *spec, const struct sim_kv *keys, size_t n_keys,
                       struct gv_error *err)
{
    const char *p = spec;
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        char item[64];
        if (n == 0 || n >= sizeof(item))
            return gv_error_set(err, GV_EINVAL, "%s: bad item in \"%.64s\"", what, spec);
        memcpy(item, p, n);
        item[n] = '\0';
        char *eq = strchr(item, '=');
        char *end = NULL;
        unsigned long long v = eq != NULL && eq[1] != '\0' ? strtoull(eq + 1, &end, 10) : 0;
        if (eq == NULL || end == NULL || *end != '\0' || eq[1] == '-')
            return gv_error_set(err, GV_EINVAL, "%s: \"%s\" is not key=<non-negative integer>",
                                what, item);
        *eq = '\0';
        size_t k = 0;
        while (k < n_keys && strcmp(item, keys[k].key) != 0)
            k++;
        if (k == n_keys) {
            char names[256] = "";
            for (size_t i = 0; i < n_keys; i++)
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                         i ? ", " : "", keys[i].key);
            return gv_error_set(err, GV_EINVAL, "%s: unknown key \"%s\" (%s)", what, item, names);
        }
        if (v > keys[k].max)
            return gv_error_set(err, GV_EINVAL, "%s: %s=%llu is above %llu", what, item, v,
                                (unsigned long long)keys[k].max);
        if (keys[k].seen != NULL) {
            if (*keys[k].seen)
                return gv_error_set(err, GV_EINVAL, "%s: %s given twice", what, item);
            *keys[k].seen = true;
        }
        *keys[k].dst = v;
        p += n;
        if (*p == ',' && *++p == '\0' && keys[k].seen != NULL)
            return gv_error_set(err, GV_EINVAL, "%s: trailing comma in \"%.64s\"", what, spec);
    }
    return GV_OK;
}
