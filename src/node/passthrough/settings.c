/* The node config's "passthrough" block (docs/passthrough.md, "Configuration"). */
#include "node/passthrough/gv_passthrough.h"
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/gv_nvml.h"
#include "node/passthrough/passthrough_internal.h"

/* ---- node config ---- */

static bool valid_resource(const char *r)
{
    /* a kubelet extended resource: domain/name, name of [A-Za-z0-9_.-] */
    const char *slash = strchr(r, '/');
    if (!slash || slash == r || !slash[1] || strchr(slash + 1, '/'))
        return false;
    for (const char *c = slash + 1; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.' && *c != '-')
            return false;
    return true;
}

gv_status gv_pt_settings_parse(struct json_t *v, const char *path, struct gv_pt_settings *out,
                               struct gv_error *err)
{
    struct gv_pt_settings s = {0};
    const char *k;
    json_t *x;
    if (!json_is_object(v))
        return gv_error_set(err, GV_EINVAL, "node config: %s.passthrough must be an object", path);
    json_object_foreach(v, k, x) {
        if (strcasecmp(k, "enabled") == 0 || strcasecmp(k, "bindAtStart") == 0) {
            if (!json_is_boolean(x))
                return gv_error_set(err, GV_EINVAL,
                                    "node config: %s.passthrough.%s must be true or false", path, k);
            *(strcasecmp(k, "enabled") == 0 ? &s.enabled : &s.bind_at_start) = json_is_true(x);
        } else if (strcasecmp(k, "resourceName") == 0 || strcasecmp(k, "pciIds") == 0) {
            bool res = strcasecmp(k, "resourceName") == 0;
            char *dst = res ? s.resource_override : s.pci_ids;
            size_t cap = res ? sizeof s.resource_override : sizeof s.pci_ids;
            if (!json_is_string(x) || json_string_length(x) >= cap ||
                strlen(json_string_value(x)) != json_string_length(x))
                return gv_error_set(err, GV_EINVAL,
                                    "node config: %s.passthrough.%s must be a string under %zu bytes",
                                    path, k, cap);
            copy_str(dst, cap, json_string_value(x));
            if (res && dst[0] && !valid_resource(dst))
                return gv_error_set(err, GV_EINVAL,
                                    "node config: %s.passthrough.resourceName = '%s' is not "
                                    "domain/name",
                                    path, dst);
        } else if (strcasecmp(k, "bind") == 0) {
            size_t i;
            json_t *e;
            if (!json_is_array(x) || json_array_size(x) > GV_PT_MAX_BIND)
                return gv_error_set(err, GV_EINVAL,
                                    "node config: %s.passthrough.bind must be a list of at most "
                                    "%d PCI addresses",
                                    path, GV_PT_MAX_BIND);
            json_array_foreach(x, i, e) {
                if (!json_is_string(e) || !valid_bdf(json_string_value(e)))
                    return gv_error_set(err, GV_EINVAL,
                                        "node config: %s.passthrough.bind[%zu] is not a PCI "
                                        "address (dddd:bb:dd.f)",
                                        path, i);
                copy_str(s.bind[s.n_bind++], GV_PT_BDF_MAX, json_string_value(e));
            }
        } else {
            return gv_error_set(err, GV_EINVAL, "node config: %s.passthrough.%s: unknown key", path,
                                k);
        }
    }
    *out = s;
    return GV_OK;
}
