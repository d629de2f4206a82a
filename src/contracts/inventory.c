/* Node GPU inventory codec: see inventory.h and docs/contracts.md. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contracts/inventory.h"

static const char *const mode_names[] = {
#define GV_X_IMODE(id, name, whole) name,
    GV_INVENTORY_MODE_LIST(GV_X_IMODE)
#undef GV_X_IMODE
};

const char *gv_inventory_mode_name(enum gv_inventory_mode m)
{
    return (unsigned)m < GV_INVENTORY_MODE_COUNT ? mode_names[m] : "unknown";
}

bool gv_inventory_mode_whole(enum gv_inventory_mode m)
{
    static const bool whole[] = {
#define GV_X_IMODE(id, name, w) w,
        GV_INVENTORY_MODE_LIST(GV_X_IMODE)
#undef GV_X_IMODE
    };
    return (unsigned)m < GV_INVENTORY_MODE_COUNT && whole[m];
}

int gv_inventory_mode_parse(const char *name)
{
    for (int i = 0; i < GV_INVENTORY_MODE_COUNT; i++)
        if (strcmp(name, mode_names[i]) == 0)
            return i;
    return -1;
}

/* The optional "wholeDevices" list: definitions at the end of this file. */
static gv_status whole_encode(const struct gv_inventory_whole_list *l, json_t *root,
                                           struct gv_error *err);
static gv_status whole_decode(json_t *root, struct gv_inventory_whole_list *l,
                                           struct gv_error *err);

gv_status gv_inventory_encode(const struct gv_inventory *inv, char **out, struct gv_error *err)
{
    json_t *gpus = json_array();
    json_t *root = json_pack("{s:i, s:s, s:s, s:o}", "version", (json_int_t)GV_INVENTORY_VERSION,
                             "driverVersion", inv->driver_version, "cudaVersion",
                             inv->cuda_version, "gpus", gpus);
    if (root == NULL)
        return gv_error_set(err, GV_ENOMEM, "inventory: cannot build JSON");
    for (uint32_t i = 0; i < inv->n_gpus && i < GV_INVENTORY_MAX_GPUS; i++) {
        const struct gv_inventory_gpu *g = &inv->gpus[i];
        json_t *o = json_pack("{s:s, s:I, s:s, s:I, s:f, s:I, s:I, s:I, s:b, s:s, s:b, s:s}",
                              "uuid", g->uuid, "index", (json_int_t)g->index, "model", g->model,
                              "memoryMiB", (json_int_t)g->memory_mib, "memoryScaling",
                              g->memory_scaling, "cores", (json_int_t)g->cores, "split",
                              (json_int_t)g->split, "numa", (json_int_t)g->numa, "healthy",
                              g->healthy, "mode", gv_inventory_mode_name(g->mode), "mig",
                              g->mig, "pciBusId", g->pci_bus_id);
        if (o != NULL && g->nvlink_group > 0)
            json_object_set_new(o, "nvlinkIsland", json_integer(g->nvlink_group - 1));
        if (o != NULL && g->pcie_group > 0)
            json_object_set_new(o, "pcieSwitch", json_integer(g->pcie_group - 1));
        if (o && g->resource[0] &&
            json_object_set_new(o, "resource", json_string(g->resource)) != 0) {
            json_decref(o);
            o = NULL;
        }
        if (o == NULL || json_array_append_new(gpus, o) != 0) {
            json_decref(root);
            return gv_error_set(err, GV_EINVAL, "inventory: GPU %u has a field JSON cannot hold",
                                i);
        }
    }
    gv_status wst = whole_encode(&inv->whole, root, err);
    if (wst != GV_OK) {
        json_decref(root);
        return wst;
    }
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (*out == NULL)
        return gv_error_set(err, GV_ENOMEM, "inventory: cannot encode JSON");
    return GV_OK;
}

static gv_status get_str(json_t *o, const char *key, const char *where, char *dst, size_t cap,
                         bool required, struct gv_error *err)
{
    json_t *v = json_object_get(o, key);
    if (v == NULL && !required) {
        dst[0] = '\0';
        return GV_OK;
    }
    if (!json_is_string(v))
        return gv_error_set(err, GV_EPARSE, "inventory: %s%s must be a string", where, key);
    if (json_string_length(v) >= cap || strlen(json_string_value(v)) != json_string_length(v))
        return gv_error_set(err, GV_ERANGE,
                            "inventory: %s%s is longer than %zu characters or holds NUL", where,
                            key, cap - 1);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return GV_OK;
}

static gv_status get_int(json_t *o, const char *key, const char *where, int64_t lo, int64_t hi,
                         int64_t *out, struct gv_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return gv_error_set(err, GV_EPARSE, "inventory: %s%s must be an integer", where, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return gv_error_set(err, GV_ERANGE, "inventory: %s%s = %lld is outside [%lld, %lld]",
                            where, key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return GV_OK;
}

static gv_status get_bool(json_t *o, const char *key, const char *where, bool *out,
                          struct gv_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_boolean(v))
        return gv_error_set(err, GV_EPARSE, "inventory: %s%s must be true or false", where, key);
    *out = json_is_true(v);
    return GV_OK;
}

static gv_status decode_gpu(json_t *o, const char *where, struct gv_inventory_gpu *g,
                            struct gv_error *err)
{
    int64_t x;
    char mode[32];
    if (!json_is_object(o))
        return gv_error_set(err, GV_EPARSE, "inventory: %s must be an object", where);
    if (get_str(o, "uuid", where, g->uuid, sizeof(g->uuid), true, err) ||
        get_str(o, "model", where, g->model, sizeof(g->model), true, err) ||
        get_str(o, "pciBusId", where, g->pci_bus_id, sizeof(g->pci_bus_id), false, err) ||
        get_str(o, "resource", where, g->resource, sizeof(g->resource), false, err) ||
        get_str(o, "mode", where, mode, sizeof(mode), true, err))
        return err->code;
    if (g->uuid[0] == '\0')
        return gv_error_set(err, GV_EPARSE, "inventory: %suuid is empty", where);
    int m = gv_inventory_mode_parse(mode);
    if (m < 0)
        return gv_error_set(err, GV_EPARSE, "inventory: %smode '%s' is not vgpu, exclusive or "
                            "timeslicing", where, mode);
    g->mode = (enum gv_inventory_mode)m;
    if (get_int(o, "index", where, 0, 1023, &x, err))
        return err->code;
    g->index = (uint32_t)x;
    if (get_int(o, "memoryMiB", where, 0, INT64_C(1) << 40, &x, err))
        return err->code;
    g->memory_mib = (uint64_t)x;
    if (get_int(o, "cores", where, 0, 10000, &x, err))
        return err->code;
    g->cores = (uint32_t)x;
    if (get_int(o, "split", where, 1, 1024, &x, err))
        return err->code;
    g->split = (uint32_t)x;
    if (get_int(o, "numa", where, -1, 1023, &x, err))
        return err->code;
    g->numa = (int32_t)x;
    if (get_bool(o, "healthy", where, &g->healthy, err) || get_bool(o, "mig", where, &g->mig, err))
        return err->code;
    /* optional: agents before topology publish none */
    const char *groups[] = {"nvlinkIsland", "pcieSwitch"};
    uint32_t *slots[] = {&g->nvlink_group, &g->pcie_group};
    for (int k = 0; k < 2; k++) {
        *slots[k] = 0;
        if (json_object_get(o, groups[k]) == NULL)
            continue;
        if (get_int(o, groups[k], where, 0, 1023, &x, err))
            return err->code;
        *slots[k] = (uint32_t)x + 1;
    }
    json_t *s = json_object_get(o, "memoryScaling");
    if (!json_is_number(s) || !(json_number_value(s) > 0 && json_number_value(s) <= 100))
        return gv_error_set(err, GV_EPARSE, "inventory: %smemoryScaling must be a number in "
                            "(0, 100]", where);
    g->memory_scaling = json_number_value(s);
    return GV_OK;
}

gv_status gv_inventory_decode(const char *text, size_t len, struct gv_inventory *out,
                              struct gv_error *err)
{
    struct gv_error local;
    if (err == NULL)
        err = &local; /* the helpers below report through err */
    json_error_t je;
    gv_status st = GV_OK;
    memset(out, 0, sizeof(*out));
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return gv_error_set(err, GV_EPARSE, "inventory: not JSON (column %d: %s)", je.column,
                            je.text);
    int64_t ver;
    if (!json_is_object(root)) {
        st = gv_error_set(err, GV_EPARSE, "inventory: must be a JSON object");
        goto out;
    }
    if ((st = get_int(root, "version", "", 1, 1000, &ver, err)) != GV_OK)
        goto out;
    if (ver != GV_INVENTORY_VERSION) {
        st = gv_error_set(err, GV_EUNSUPPORTED, "inventory: version %lld is not supported (want %d)",
                          (long long)ver, GV_INVENTORY_VERSION);
        goto out;
    }
    out->version = (uint32_t)ver;
    if ((st = get_str(root, "driverVersion", "", out->driver_version, sizeof(out->driver_version),
                      false, err)) != GV_OK ||
        (st = get_str(root, "cudaVersion", "", out->cuda_version, sizeof(out->cuda_version), false,
                      err)) != GV_OK)
        goto out;
    json_t *gpus = json_object_get(root, "gpus");
    if (!json_is_array(gpus)) {
        st = gv_error_set(err, GV_EPARSE, "inventory: gpus must be a list");
        goto out;
    }
    if (json_array_size(gpus) > GV_INVENTORY_MAX_GPUS) {
        st = gv_error_set(err, GV_ERANGE, "inventory: %zu GPUs, more than the %d supported",
                          json_array_size(gpus), GV_INVENTORY_MAX_GPUS);
        goto out;
    }
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g) {
        char where[32];
        snprintf(where, sizeof(where), "gpus[%zu].", i);
        if ((st = decode_gpu(g, where, &out->gpus[i], err)) != GV_OK)
            goto out;
        for (size_t k = 0; k < i; k++) {
            if (strcmp(out->gpus[k].uuid, out->gpus[i].uuid) == 0) {
                st = gv_error_set(err, GV_EPARSE, "inventory: gpus[%zu] repeats uuid %s", i,
                                  out->gpus[i].uuid);
                goto out;
            }
        }
        out->n_gpus = (uint32_t)(i + 1);
    }
    st = whole_decode(root, &out->whole, err);
out:
    json_decref(root);
    if (st != GV_OK)
        memset(out, 0, sizeof(*out));
    return st;
}

/* ---- "wholeDevices": passthrough GPUs and mediated devices (docs/passthrough.md) ---- */

static const char *const kind_names[] = {
#define GV_X_WKIND(id, name) name,
    GV_INVENTORY_WHOLE_KIND_LIST(GV_X_WKIND)
#undef GV_X_WKIND
};

const char *gv_inventory_whole_kind_name(enum gv_inventory_whole_kind k)
{
    return (unsigned)k < GV_INVENTORY_WHOLE_KIND_COUNT ? kind_names[k] : "unknown";
}

static gv_status whole_encode(const struct gv_inventory_whole_list *l, json_t *root,
                                           struct gv_error *err)
{
    if (l->n == 0)
        return GV_OK;
    json_t *arr = json_array();
    if (arr == NULL || json_object_set_new(root, "wholeDevices", arr) != 0)
        return gv_error_set(err, GV_ENOMEM, "inventory: cannot build JSON");
    for (uint32_t i = 0; i < l->n && i < GV_INVENTORY_MAX_WHOLE; i++) {
        const struct gv_inventory_whole *w = &l->dev[i];
        if ((unsigned)w->kind >= GV_INVENTORY_WHOLE_KIND_COUNT)
            return gv_error_set(err, GV_EINVAL, "inventory: wholeDevices[%u]: bad kind", i);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "kind", kind_names[w->kind],
                              "resource", w->resource, "id", w->id, "pciBusId", w->pci_bus_id,
                              "iommuGroup", w->iommu_group, "healthy", w->healthy);
        /* additive fields: only when set, so older texts stay byte-identical */
        if (o != NULL && w->gpu_uuid[0] &&
            json_object_set_new(o, "gpuUuid", json_string(w->gpu_uuid)) != 0)
            o = (json_decref(o), NULL);
        if (o != NULL && w->profile[0] &&
            json_object_set_new(o, "profile", json_string(w->profile)) != 0)
            o = (json_decref(o), NULL);
        if (o != NULL && w->memory_mib > 0 &&
            json_object_set_new(o, "memoryMiB", json_integer((json_int_t)w->memory_mib)) != 0)
            o = (json_decref(o), NULL);
        if (o == NULL || json_array_append_new(arr, o) != 0)
            return gv_error_set(err, GV_EINVAL,
                                "inventory: wholeDevices[%u] has a field JSON cannot hold", i);
    }
    return GV_OK;
}

static gv_status whole_field(json_t *o, const char *key, size_t i, char *dst, size_t cap,
                       struct gv_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return gv_error_set(err, GV_EPARSE, "inventory: wholeDevices[%zu].%s: expected a string",
                            i, key);
    size_t len = json_string_length(v);
    if (len >= cap || strlen(json_string_value(v)) != len)
        return gv_error_set(err, GV_ERANGE,
                            "inventory: wholeDevices[%zu].%s: longer than %zu bytes or holds NUL",
                            i, key, cap - 1);
    memcpy(dst, json_string_value(v), len + 1);
    return GV_OK;
}

/* "gpuUuid", "profile", "memoryMiB": optional, strictly typed when present. */
static gv_status whole_optional(json_t *o, size_t i, struct gv_inventory_whole *w,
                                struct gv_error *err)
{
    gv_status st;
    if (json_object_get(o, "gpuUuid") != NULL &&
        (st = whole_field(o, "gpuUuid", i, w->gpu_uuid, sizeof w->gpu_uuid, err)) != GV_OK)
        return st;
    if (json_object_get(o, "profile") != NULL &&
        (st = whole_field(o, "profile", i, w->profile, sizeof w->profile, err)) != GV_OK)
        return st;
    json_t *m = json_object_get(o, "memoryMiB");
    if (m != NULL) {
        if (!json_is_integer(m) || json_integer_value(m) < 0 ||
            json_integer_value(m) > (INT64_C(1) << 40))
            return gv_error_set(err, GV_EPARSE,
                                "inventory: wholeDevices[%zu].memoryMiB: expected an integer in "
                                "[0, 2^40]", i);
        w->memory_mib = (uint64_t)json_integer_value(m);
    }
    /* a MIG device names the GPU it is carved from: the scheduler's way to
     * keep that GPU from being sliced does not depend on a PCI address alone */
    if (w->kind == GV_INVENTORY_WHOLE_MIG && w->gpu_uuid[0] == '\0')
        return gv_error_set(err, GV_EPARSE,
                            "inventory: wholeDevices[%zu].gpuUuid: required for kind mig", i);
    return GV_OK;
}

static gv_status whole_decode(json_t *root, struct gv_inventory_whole_list *l,
                                           struct gv_error *err)
{
    json_t *arr = json_object_get(root, "wholeDevices");
    l->n = 0;
    if (arr == NULL)
        return GV_OK;
    if (!json_is_array(arr))
        return gv_error_set(err, GV_EPARSE, "inventory: wholeDevices must be a list");
    if (json_array_size(arr) > GV_INVENTORY_MAX_WHOLE)
        return gv_error_set(err, GV_ERANGE, "inventory: %zu whole devices, more than the %d supported",
                            json_array_size(arr), GV_INVENTORY_MAX_WHOLE);
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        struct gv_inventory_whole *w = &l->dev[i];
        char kind[16];
        gv_status st;
        memset(w, 0, sizeof *w);
        if (!json_is_object(o))
            return gv_error_set(err, GV_EPARSE, "inventory: wholeDevices[%zu] must be an object", i);
        if ((st = whole_field(o, "kind", i, kind, sizeof kind, err)) != GV_OK ||
            (st = whole_field(o, "resource", i, w->resource, sizeof w->resource, err)) != GV_OK ||
            (st = whole_field(o, "id", i, w->id, sizeof w->id, err)) != GV_OK ||
            (st = whole_field(o, "pciBusId", i, w->pci_bus_id, sizeof w->pci_bus_id, err)) != GV_OK ||
            (st = whole_field(o, "iommuGroup", i, w->iommu_group, sizeof w->iommu_group, err)) != GV_OK)
            return st;
        int k = -1;
        for (int j = 0; j < GV_INVENTORY_WHOLE_KIND_COUNT; j++)
            if (strcmp(kind, kind_names[j]) == 0)
                k = j;
        if (k < 0)
            return gv_error_set(err, GV_EPARSE, "inventory: wholeDevices[%zu].kind: unknown '%s'",
                                i, kind);
        w->kind = (enum gv_inventory_whole_kind)k;
        json_t *h = json_object_get(o, "healthy");
        if (!json_is_boolean(h))
            return gv_error_set(err, GV_EPARSE,
                                "inventory: wholeDevices[%zu].healthy: expected true or false", i);
        w->healthy = json_is_true(h);
        if ((st = whole_optional(o, i, w, err)) != GV_OK)
            return st;
        for (size_t j = 0; j < i; j++)
            if (strcmp(l->dev[j].resource, w->resource) == 0 && strcmp(l->dev[j].id, w->id) == 0)
                return gv_error_set(err, GV_EPARSE, "inventory: wholeDevices[%zu] repeats %s %s",
                                    i, w->resource, w->id);
        l->n = (uint32_t)(i + 1);
    }
    return GV_OK;
}

/* domain, bus, device, function of "dddd[dddd]:bb:dd.f"; false when it is not one. */
static bool parse_pci(const char *s, unsigned long out[4])
{
    char tail;
    unsigned long d, b, dev, f;
    if (s == NULL || sscanf(s, "%lx:%lx:%lx.%lx%c", &d, &b, &dev, &f, &tail) != 4)
        return false;
    out[0] = d, out[1] = b, out[2] = dev, out[3] = f;
    return true;
}

bool gv_inventory_same_pci(const char *a, const char *b)
{
    unsigned long x[4], y[4];
    return parse_pci(a, x) && parse_pci(b, y) && memcmp(x, y, sizeof x) == 0;
}

bool gv_inventory_gpu_taken(const struct gv_inventory *inv, const struct gv_inventory_gpu *g)
{
    /* set aside for passthrough, still on its host driver: not for slices either */
    if (g->mode == GV_INVENTORY_MODE_PASSTHROUGH)
        return true;
    /* MIG enabled: CUDA sees only its MIG devices; a slice of the GPU itself cannot run */
    if (g->mig)
        return true;
    for (uint32_t i = 0; i < inv->whole.n; i++) {
        const struct gv_inventory_whole *w = &inv->whole.dev[i];
        if (gv_inventory_same_pci(w->pci_bus_id, g->pci_bus_id) ||
            (w->gpu_uuid[0] && strcmp(w->gpu_uuid, g->uuid) == 0))
            return true;
    }
    return false;
}
