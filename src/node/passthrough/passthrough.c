/*
 * VFIO passthrough and mediated devices from sysfs (see gv_passthrough.h and
 * docs/passthrough.md).  Everything is read through <sys-root> so tests run
 * against the fake tree of tests/fakes/sysfs.
 */
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

const char *root_or_slash(const char *r) { return r && *r ? r : "/"; }

/* Bounded copy; a name too long for its field is cut (it then matches nothing). */
void copy_str(char *out, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(out, src, n);
    out[n] = '\0';
}

/* Reads a small sysfs attribute, trailing whitespace removed; false when absent. */
static bool read_attr(const char *path, char *out, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, out, size - 1);
    close(fd);
    if (n < 0)
        return false;
    out[n] = '\0';
    while (n > 0 && isspace((unsigned char)out[n - 1]))
        out[--n] = '\0';
    return true;
}

static bool read_hex(const char *path, unsigned long *v)
{
    char buf[32], *end;
    if (!read_attr(path, buf, sizeof buf) || !buf[0])
        return false;
    errno = 0;
    *v = strtoul(buf, &end, 16);
    return errno == 0 && *end == '\0';
}

/* The last component of a symlink's target ("" when it is not a link). */
bool link_base(const char *path, char *out, size_t size)
{
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) {
        out[0] = '\0';
        return false;
    }
    target[n] = '\0';
    const char *b = strrchr(target, '/');
    copy_str(out, size, b ? b + 1 : target);
    return out[0] != '\0';
}

/* True for the kernel's PCI address form "dddd:bb:dd.f" (also guards paths). */
bool valid_bdf(const char *s)
{
    static const char shape[] = "xxxx:xx:xx.x";
    if (strlen(s) != sizeof shape - 1)
        return false;
    for (size_t i = 0; shape[i]; i++)
        if (shape[i] == 'x' ? !isxdigit((unsigned char)s[i]) : s[i] != shape[i])
            return false;
    return true;
}

static bool valid_name(const char *s)
{
    if (!*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    return strchr(s, '/') == NULL;
}

void read_function(const char *sys, const char *bdf, struct gv_pt_function *f)
{
    char p[PATH_MAX];
    unsigned long v = 0;
    memset(f, 0, sizeof *f);
    snprintf(f->bdf, sizeof f->bdf, "%s", bdf);
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/vendor", sys, bdf);
    if (read_hex(p, &v))
        f->vendor = (uint16_t)v;
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/device", sys, bdf);
    if (read_hex(p, &v))
        f->device = (uint16_t)v;
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/class", sys, bdf);
    if (read_hex(p, &v))
        f->class_code = (uint32_t)v;
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver", sys, bdf);
    link_base(p, f->driver, sizeof f->driver);
}

bool is_bridge(const struct gv_pt_function *f)
{
    return (f->class_code >> 8) == PCI_CLASS_BRIDGE_PCI;
}

/* ---- names ---- */

void gv_pt_mangle_pci_name(const char *in, char *out, size_t size)
{
    size_t o = 0;
    bool space = false;
    if (size == 0)
        return;
    while (isspace((unsigned char)*in))
        in++;
    for (; *in && o + 1 < size; in++) {
        unsigned char c = (unsigned char)*in;
        if (isspace(c)) {
            space = true;
            continue;
        }
        if (space && o > 0 && o + 1 < size)
            out[o++] = '_';
        space = false;
        if (c == '/' || c == '.')
            c = '_';
        if (isalnum(c) || c == '_')
            out[o++] = (char)toupper(c);
        /* anything else (brackets, commas, '+', '-') is dropped, as NVIDIA's plugin does */
    }
    out[o] = '\0';
}

void gv_pt_mangle_mdev_name(const char *in, char *out, size_t size)
{
    size_t o = 0;
    bool space = false;
    if (size == 0)
        return;
    /* NVIDIA's plugin trims newlines only; a leading space would become '_', kept so. */
    for (; *in && o + 1 < size; in++) {
        unsigned char c = (unsigned char)*in;
        if (isspace(c)) {
            space = true;
            continue;
        }
        if (space && o + 1 < size)
            out[o++] = '_';
        space = false;
        /* '/' would break the resource name; the kubelet refuses it anyway */
        out[o++] = c == '/' ? '_' : (char)c;
    }
    out[o] = '\0';
}

void gv_pt_env_name(const char *prefix, const char *resource, char *out, size_t size)
{
    int n = snprintf(out, size, "%s_", prefix);
    if (n < 0 || (size_t)n >= size)
        return;
    size_t o = (size_t)n;
    for (; *resource && o + 1 < size; resource++) {
        char c = *resource;
        out[o++] = (c == '.' || c == '/') ? '_' : (char)toupper((unsigned char)c);
    }
    out[o] = '\0';
}

gv_status gv_pt_pci_name(const char *pci_ids, uint16_t vendor, uint16_t device, char *out,
                         size_t size, struct gv_error *err)
{
    const char *path = pci_ids && *pci_ids ? pci_ids : GV_PT_PCI_IDS_DEFAULT;
    char line[512], ven[8], dev[8];
    bool in_vendor = false;
    gv_status st = GV_ENOTFOUND;
    snprintf(out, size, "%04x", device);
    FILE *f = fopen(path, "re");
    if (!f)
        return gv_error_set(err, GV_ENOTFOUND, "PCI IDs database %s: %s", path, strerror(errno));
    snprintf(ven, sizeof ven, "%04x", vendor);
    snprintf(dev, sizeof dev, "%04x", device);
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (!in_vendor) {
            in_vendor = strncasecmp(line, ven, 4) == 0 && isspace((unsigned char)line[4]);
            continue;
        }
        if (line[0] != '\t')
            break; /* the next vendor: not listed */
        if (line[1] == '\t')
            continue; /* subsystem line */
        if (strncasecmp(line + 1, dev, 4) == 0 && isspace((unsigned char)line[5])) {
            line[strcspn(line, "\r\n")] = '\0';
            gv_pt_mangle_pci_name(line + 5, out, size);
            st = out[0] ? GV_OK : GV_ENOTFOUND;
            break;
        }
    }
    fclose(f);
    if (st != GV_OK) {
        snprintf(out, size, "%04x", device);
        return gv_error_set(err, GV_ENOTFOUND, "%04x:%04x not in %s", vendor, device, path);
    }
    return GV_OK;
}

/* ---- scan ---- */

static int cmp_gpu(const void *a, const void *b)
{
    return strcmp(((const struct gv_pt_gpu *)a)->bdf, ((const struct gv_pt_gpu *)b)->bdf);
}
static int cmp_mdev(const void *a, const void *b)
{
    return strcmp(((const struct gv_pt_mdev *)a)->uuid, ((const struct gv_pt_mdev *)b)->uuid);
}
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted entry names of a directory (skips dot entries); NULL list when absent. */
static gv_status list_dir(const char *path, char ***names, size_t *n, bool *absent)
{
    *names = NULL;
    *n = 0;
    *absent = false;
    DIR *d = opendir(path);
    if (!d) {
        *absent = errno == ENOENT;
        return *absent ? GV_OK : GV_EIO;
    }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nn = realloc(*names, nc * sizeof *nn);
            if (!nn)
                goto fail;
            *names = nn;
            cap = nc;
        }
        if (!((*names)[*n] = strdup(e->d_name)))
            goto fail;
        (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(*names, *n, sizeof **names, cmp_str);
    return GV_OK;
fail:
    closedir(d);
    for (size_t i = 0; i < *n; i++)
        free((*names)[i]);
    free(*names);
    *names = NULL;
    *n = 0;
    return GV_ENOMEM;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

gv_status scan_group(const char *sys, const char *id, struct gv_pt_group *g,
                            struct gv_error *err)
{
    char p[PATH_MAX];
    char **names;
    size_t n;
    bool absent;
    snprintf(g->id, sizeof g->id, "%s", id);
    snprintf(p, sizeof p, "%s/sys/kernel/iommu_groups/%s/devices", sys, id);
    if (list_dir(p, &names, &n, &absent) != GV_OK)
        return gv_error_set(err, GV_EIO, "%s: %s", p, strerror(errno));
    g->viable = true;
    if (absent || n == 0) {
        g->viable = false;
        snprintf(g->reason, sizeof g->reason, "IOMMU group %s has no device list", id);
        free_names(names, n);
        return GV_OK;
    }
    g->funcs = calloc(n, sizeof *g->funcs);
    if (!g->funcs) {
        free_names(names, n);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (!valid_name(names[i]))
            continue;
        struct gv_pt_function *f = &g->funcs[g->n_funcs++];
        read_function(sys, names[i], f);
        if (!g->viable || strcmp(f->driver, GV_PT_VFIO_DRIVER) == 0 || is_bridge(f))
            continue;
        /* The kernel refuses /dev/vfio/<group> to a VM while any member can DMA on its own. */
        g->viable = false;
        if (f->driver[0])
            snprintf(g->reason, sizeof g->reason,
                     "IOMMU group %s: %s (%04x:%04x) is bound to %s, not " GV_PT_VFIO_DRIVER, id,
                     f->bdf, f->vendor, f->device, f->driver);
        else
            snprintf(g->reason, sizeof g->reason,
                     "IOMMU group %s: %s (%04x:%04x) is not bound to " GV_PT_VFIO_DRIVER, id,
                     f->bdf, f->vendor, f->device);
    }
    free_names(names, n);
    return GV_OK;
}

static bool dev_node_present(const char *dev_root, const char *group)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/dev/vfio/%s", dev_root, group);
    return stat(p, &st) == 0;
}

static gv_status scan_gpus(const struct gv_pt_config *cfg, struct gv_pt_scan *s,
                           struct gv_error *err)
{
    const char *sys = root_or_slash(cfg->sys_root);
    char p[PATH_MAX];
    char **names;
    size_t n;
    bool absent;
    gv_status st = GV_OK;
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices", sys);
    if (list_dir(p, &names, &n, &absent) != GV_OK)
        return gv_error_set(err, GV_EIO, "cannot list %s: %s", p, strerror(errno));
    if (absent)
        return gv_error_set(err, GV_ENOTFOUND, "%s does not exist", p);
    s->gpus = calloc(n ? n : 1, sizeof *s->gpus);
    s->groups = calloc(n ? n : 1, sizeof *s->groups);
    if (!s->gpus || !s->groups) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    /* a tiny cache: one pci.ids lookup per device ID */
    struct {
        uint16_t device;
        char name[GV_PT_RESOURCE_MAX];
    } names_seen[16];
    size_t n_seen = 0;
    for (size_t i = 0; i < n; i++) {
        struct gv_pt_function f;
        if (!valid_bdf(names[i]))
            continue;
        read_function(sys, names[i], &f);
        /* vanished mid-scan devices read as vendor 0 and are skipped */
        if (f.vendor != GV_PT_VENDOR_NVIDIA || (f.class_code >> 16) != PCI_BASE_CLASS_DISPLAY ||
            strcmp(f.driver, GV_PT_VFIO_DRIVER) != 0)
            continue;
        struct gv_pt_gpu *g = &s->gpus[s->n_gpus++];
        snprintf(g->bdf, sizeof g->bdf, "%s", f.bdf);
        g->device = f.device;
        g->numa = -1;
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/numa_node", sys, f.bdf);
        char num[16];
        if (read_attr(p, num, sizeof num))
            g->numa = atoi(num) < 0 ? -1 : atoi(num);
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/iommu_group", sys, f.bdf);
        link_base(p, g->group, sizeof g->group);

        if (cfg->resource_override && *cfg->resource_override) {
            snprintf(g->resource, sizeof g->resource, "%s", cfg->resource_override);
        } else {
            const char *nm = NULL;
            for (size_t k = 0; k < n_seen; k++)
                if (names_seen[k].device == f.device)
                    nm = names_seen[k].name;
            char buf[GV_PT_RESOURCE_MAX];
            if (!nm) {
                /* not in the database: the hex device ID, as NVIDIA's plugin falls back */
                gv_pt_pci_name(cfg->pci_ids, f.vendor, f.device, buf, sizeof buf, NULL);
                if (n_seen < sizeof names_seen / sizeof names_seen[0]) {
                    names_seen[n_seen].device = f.device;
                    snprintf(names_seen[n_seen].name, sizeof names_seen[n_seen].name, "%s", buf);
                    n_seen++;
                }
                nm = buf;
            }
            snprintf(g->resource, sizeof g->resource, GV_PT_NAMESPACE "/%.100s", nm);
        }

        if (!g->group[0]) {
            snprintf(g->reason, sizeof g->reason,
                     "%s has no IOMMU group (is the IOMMU enabled?)", g->bdf);
            continue;
        }
        const struct gv_pt_group *grp = gv_pt_scan_group(s, g->group);
        if (!grp) {
            st = scan_group(sys, g->group, &s->groups[s->n_groups], err);
            if (st != GV_OK)
                goto out;
            grp = &s->groups[s->n_groups++];
        }
        if (!grp->viable) {
            snprintf(g->reason, sizeof g->reason, "%s", grp->reason);
        } else if (!dev_node_present(root_or_slash(cfg->dev_root), g->group)) {
            snprintf(g->reason, sizeof g->reason, "/dev/vfio/%s is missing", g->group);
        } else {
            g->healthy = true;
        }
    }
    qsort(s->gpus, s->n_gpus, sizeof *s->gpus, cmp_gpu);
out:
    free_names(names, n);
    return st;
}

static gv_status scan_mdevs(const struct gv_pt_config *cfg, struct gv_pt_scan *s,
                            struct gv_error *err)
{
    const char *sys = root_or_slash(cfg->sys_root);
    char p[PATH_MAX], target[PATH_MAX];
    char **names;
    size_t n;
    bool absent;
    snprintf(p, sizeof p, "%s/sys/bus/mdev/devices", sys);
    if (list_dir(p, &names, &n, &absent) != GV_OK)
        return gv_error_set(err, GV_EIO, "cannot list %s: %s", p, strerror(errno));
    if (n == 0)
        return GV_OK;
    s->mdevs = calloc(n, sizeof *s->mdevs);
    if (!s->mdevs) {
        free_names(names, n);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (!valid_name(names[i]) || strlen(names[i]) >= GV_PT_UUID_MAX)
            continue;
        struct gv_pt_mdev *m = &s->mdevs[s->n_mdevs];
        memset(m, 0, sizeof *m);
        snprintf(m->uuid, sizeof m->uuid, "%s", names[i]);
        /* .../devices/<...>/<parent bdf>/<uuid>: the parent is the component before */
        snprintf(p, sizeof p, "%s/sys/bus/mdev/devices/%s", sys, m->uuid);
        ssize_t tl = readlink(p, target, sizeof target - 1);
        if (tl <= 0)
            continue; /* removed while we looked */
        target[tl] = '\0';
        char *last = strrchr(target, '/');
        if (last) {
            *last = '\0';
            const char *par = strrchr(target, '/');
            copy_str(m->parent, sizeof m->parent, par ? par + 1 : target);
        }
        /* vGPU on SR-IOV (Ampere and later): the parent is a VF; NVML names its PF */
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/physfn", sys, m->parent);
        if (!valid_bdf(m->parent) || !link_base(p, m->gpu, sizeof m->gpu))
            copy_str(m->gpu, sizeof m->gpu, m->parent);
        snprintf(p, sizeof p, "%s/sys/bus/mdev/devices/%s/mdev_type", sys, m->uuid);
        link_base(p, m->type_id, sizeof m->type_id);
        char tname[96] = "", mangled[96];
        snprintf(p, sizeof p, "%s/sys/bus/mdev/devices/%s/mdev_type/name", sys, m->uuid);
        if (!read_attr(p, tname, sizeof tname) || !tname[0])
            snprintf(tname, sizeof tname, "%s", m->type_id);
        gv_pt_mangle_mdev_name(tname, mangled, sizeof mangled);
        snprintf(m->resource, sizeof m->resource, GV_PT_NAMESPACE "/%.100s", mangled);
        snprintf(p, sizeof p, "%s/sys/bus/mdev/devices/%s/iommu_group", sys, m->uuid);
        link_base(p, m->group, sizeof m->group);
        if (!m->type_id[0] || !mangled[0])
            snprintf(m->reason, sizeof m->reason, "mdev %s has no type", m->uuid);
        else if (!m->group[0])
            snprintf(m->reason, sizeof m->reason, "mdev %s has no IOMMU group", m->uuid);
        else if (!dev_node_present(root_or_slash(cfg->dev_root), m->group))
            snprintf(m->reason, sizeof m->reason, "/dev/vfio/%s is missing", m->group);
        else
            m->healthy = true;
        s->n_mdevs++;
    }
    free_names(names, n);
    qsort(s->mdevs, s->n_mdevs, sizeof *s->mdevs, cmp_mdev);
    return GV_OK;
}

gv_status gv_pt_scan_new(const struct gv_pt_config *cfg, struct gv_pt_scan **out,
                         struct gv_error *err)
{
    static const struct gv_pt_config defaults = {0};
    *out = NULL;
    struct gv_pt_scan *s = calloc(1, sizeof *s);
    if (!s)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    if (!cfg)
        cfg = &defaults;
    gv_status st = scan_gpus(cfg, s, err);
    if (st == GV_OK)
        st = scan_mdevs(cfg, s, err);
    if (st != GV_OK) {
        gv_pt_scan_free(s);
        return st;
    }
    *out = s;
    return GV_OK;
}

void gv_pt_scan_free(struct gv_pt_scan *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_groups; i++)
        free(s->groups[i].funcs);
    free(s->groups);
    free(s->gpus);
    free(s->mdevs);
    free(s);
}

gv_status gv_pt_scan_carry(struct gv_pt_scan *now, const struct gv_pt_scan *prev,
                           struct gv_error *err)
{
    size_t gone_g = 0, gone_m = 0;
    for (size_t i = 0; prev && i < prev->n_gpus; i++)
        gone_g += gv_pt_scan_gpu(now, prev->gpus[i].bdf) == NULL;
    for (size_t i = 0; prev && i < prev->n_mdevs; i++)
        gone_m += gv_pt_scan_mdev(now, prev->mdevs[i].uuid) == NULL;
    if (gone_g == 0 && gone_m == 0)
        return GV_OK;
    struct gv_pt_gpu *g = realloc(now->gpus, (now->n_gpus + gone_g) * sizeof *g);
    if (!g)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    now->gpus = g;
    struct gv_pt_mdev *m = realloc(now->mdevs, (now->n_mdevs + gone_m + 1) * sizeof *m);
    if (!m)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    now->mdevs = m;
    size_t ng = now->n_gpus, nm = now->n_mdevs;
    for (size_t i = 0; i < prev->n_gpus; i++) {
        if (gv_pt_scan_gpu(now, prev->gpus[i].bdf))
            continue;
        g[ng] = prev->gpus[i];
        g[ng].healthy = false;
        if (strncmp(g[ng].reason, "removed", 7) != 0)
            snprintf(g[ng].reason, sizeof g[ng].reason, "removed from the PCI bus");
        ng++;
    }
    for (size_t i = 0; i < prev->n_mdevs; i++) {
        if (gv_pt_scan_mdev(now, prev->mdevs[i].uuid))
            continue;
        m[nm] = prev->mdevs[i];
        m[nm].healthy = false;
        snprintf(m[nm].reason, sizeof m[nm].reason, "removed");
        nm++;
    }
    now->n_gpus = ng;
    now->n_mdevs = nm;
    qsort(now->gpus, now->n_gpus, sizeof *now->gpus, cmp_gpu);
    qsort(now->mdevs, now->n_mdevs, sizeof *now->mdevs, cmp_mdev);
    return GV_OK;
}

const struct gv_pt_gpu *gv_pt_scan_gpu(const struct gv_pt_scan *s, const char *bdf)
{
    for (size_t i = 0; s && i < s->n_gpus; i++)
        if (strcmp(s->gpus[i].bdf, bdf) == 0)
            return &s->gpus[i];
    return NULL;
}

const struct gv_pt_mdev *gv_pt_scan_mdev(const struct gv_pt_scan *s, const char *uuid)
{
    for (size_t i = 0; s && i < s->n_mdevs; i++)
        if (strcmp(s->mdevs[i].uuid, uuid) == 0)
            return &s->mdevs[i];
    return NULL;
}

const struct gv_pt_group *gv_pt_scan_group(const struct gv_pt_scan *s, const char *id)
{
    for (size_t i = 0; s && i < s->n_groups; i++)
        if (strcmp(s->groups[i].id, id) == 0)
            return &s->groups[i];
    return NULL;
}

/* ---- Allocate ---- */

static gv_status answer_add_group(struct gv_pt_answer *a, const char *group, struct gv_error *err)
{
    char path[64];
    snprintf(path, sizeof path, "/dev/vfio/%s", group);
    for (size_t i = 0; i < a->n_specs; i++)
        if (strcmp(a->specs[i], path) == 0)
            return GV_OK;
    if (a->n_specs == GV_PT_MAX_SPECS)
        return gv_error_set(err, GV_ERANGE, "more than %d IOMMU groups in one request",
                            GV_PT_MAX_SPECS - 1);
    snprintf(a->specs[a->n_specs++], sizeof a->specs[0], "%s", path);
    return GV_OK;
}

static gv_status answer_add_id(struct gv_pt_answer *a, const char *id, struct gv_error *err)
{
    size_t len = strlen(a->env_value);
    int n = snprintf(a->env_value + len, sizeof a->env_value - len, "%s%s", len ? "," : "", id);
    if (n < 0 || (size_t)n >= sizeof a->env_value - len)
        return gv_error_set(err, GV_ERANGE, "too many devices in one request");
    return GV_OK;
}

static gv_status check_ids(const char *const *ids, size_t n, struct gv_error *err)
{
    if (n == 0)
        return gv_error_set(err, GV_EINVAL, "no device IDs in the request");
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(ids[i], ids[j]) == 0)
                return gv_error_set(err, GV_EINVAL, "device %s requested twice", ids[i]);
    return GV_OK;
}

static bool listed(const char *const *ids, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ids[i], id) == 0)
            return true;
    return false;
}

/* The checks every requested device passes: known, of this resource, healthy. */
static gv_status check_device(const char *what, const char *id, bool known, const char *have,
                              const char *resource, bool healthy, const char *reason,
                              struct gv_error *err)
{
    if (!known)
        return gv_error_set(err, GV_ENOTFOUND, "unknown %s %s", what, id);
    if (strcmp(have, resource) != 0)
        return gv_error_set(err, GV_EINVAL, "%s %s is %s, not %s", what, id, have, resource);
    if (!healthy)
        return gv_error_set(err, GV_EUNAVAILABLE, "%s %s is unhealthy: %s", what, id, reason);
    return GV_OK;
}

static gv_status answer_begin(const char *const *ids, size_t n, struct gv_pt_answer *out,
                              struct gv_error *err)
{
    memset(out, 0, sizeof *out);
    gv_status st = check_ids(ids, n, err);
    if (st == GV_OK)
        snprintf(out->specs[out->n_specs++], sizeof out->specs[0], "/dev/vfio/vfio");
    return st;
}

gv_status gv_pt_allocate_gpus(const struct gv_pt_scan *s, const char *resource,
                              const char *const *ids, size_t n, struct gv_pt_answer *out,
                              struct gv_error *err)
{
    gv_status st = answer_begin(ids, n, out, err);
    for (size_t i = 0; i < n && st == GV_OK; i++) {
        const struct gv_pt_gpu *g = gv_pt_scan_gpu(s, ids[i]);
        if ((st = check_device("device", ids[i], g != NULL, g ? g->resource : "", resource,
                               g && g->healthy, g ? g->reason : "", err)) != GV_OK)
            return st;
        /* whole groups: the group's node gives the VM every member, so all must be asked */
        for (size_t k = 0; k < s->n_gpus; k++)
            if (strcmp(s->gpus[k].group, g->group) == 0 && !listed(ids, n, s->gpus[k].bdf))
                return gv_error_set(err, GV_EINVAL,
                                    "device %s shares IOMMU group %s with %s: request the whole "
                                    "group",
                                    ids[i], g->group, s->gpus[k].bdf);
        if ((st = answer_add_group(out, g->group, err)) == GV_OK)
            st = answer_add_id(out, g->bdf, err);
    }
    if (st == GV_OK)
        gv_pt_env_name(GV_PT_ENV_PCI, resource, out->env_key, sizeof out->env_key);
    return st;
}

gv_status gv_pt_allocate_mdevs(const struct gv_pt_scan *s, const char *resource,
                               const char *const *ids, size_t n, struct gv_pt_answer *out,
                               struct gv_error *err)
{
    gv_status st = answer_begin(ids, n, out, err);
    for (size_t i = 0; i < n && st == GV_OK; i++) {
        const struct gv_pt_mdev *m = gv_pt_scan_mdev(s, ids[i]);
        if ((st = check_device("mediated device", ids[i], m != NULL, m ? m->resource : "",
                               resource, m && m->healthy, m ? m->reason : "", err)) != GV_OK)
            return st;
        if ((st = answer_add_group(out, m->group, err)) == GV_OK)
            st = answer_add_id(out, m->uuid, err);
    }
    if (st == GV_OK)
        gv_pt_env_name(GV_PT_ENV_MDEV, resource, out->env_key, sizeof out->env_key);
    return st;
}

size_t gv_pt_preferred(const struct gv_pt_scan *s, const char *const *available, size_t n_avail,
                       const char *const *must, size_t n_must, size_t size, const char **out)
{
    size_t n = 0;
    for (size_t i = 0; i < n_must && n < size; i++)
        if (!listed(out, n, must[i]))
            out[n++] = must[i];
    /*
     * then whole groups, largest that still fits first (members already chosen
     * count as free): two GPUs asked on a node with a two-GPU group and a
     * single get the group, not one of each.
     */
    for (size_t want = s->n_gpus; n < size && want >= 1; want--) {
        for (size_t i = 0; i < n_avail && n < size; i++) {
            const struct gv_pt_gpu *g = gv_pt_scan_gpu(s, available[i]);
            if (!g || !g->healthy || listed(out, n, available[i]))
                continue;
            size_t members = 0, free_members = 0;
            for (size_t k = 0; k < s->n_gpus; k++) {
                if (strcmp(s->gpus[k].group, g->group) != 0)
                    continue;
                members++;
                if (listed(available, n_avail, s->gpus[k].bdf) || listed(out, n, s->gpus[k].bdf))
                    free_members++;
            }
            if (members != want || free_members != members)
                continue;
            size_t missing = 0;
            for (size_t k = 0; k < s->n_gpus; k++)
                if (strcmp(s->gpus[k].group, g->group) == 0 && !listed(out, n, s->gpus[k].bdf))
                    missing++;
            if (n + missing > size)
                continue;
            for (size_t k = 0; k < s->n_gpus; k++) {
                if (strcmp(s->gpus[k].group, g->group) != 0 || listed(out, n, s->gpus[k].bdf))
                    continue;
                for (size_t a = 0; a < n_avail; a++)
                    if (strcmp(available[a], s->gpus[k].bdf) == 0)
                        out[n++] = available[a];
            }
        }
    }
    /* nothing whole fits: the kubelet's order (Allocate will say which group is split) */
    for (size_t i = 0; i < n_avail && n < size; i++)
        if (!listed(out, n, available[i]))
            out[n++] = available[i];
    return n;
}

