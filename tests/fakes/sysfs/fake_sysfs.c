/*
 * Fake sysfs tree generator and fake PCI-core writes (see fake_sysfs.h).
 *
 * JSON description:
 * {
 *   "devices": [{"bdf": "0000:41:00.0", "vendor": "10de", "device": "2331",
 *                "class": "030200", "driver": "vfio-pci" | null, "group": 17,
 *                "numa": 0, "host_driver": "nvidia", "physfn": "0000:81:00.0"}],
 *   "mdev_types": [{"parent": "0000:81:00.4", "id": "nvidia-558",
 *                   "name": "NVIDIA A2-4Q", "available": 2}],
 *   "mdevs": [{"uuid": "...", "parent": "0000:81:00.4", "type": "nvidia-558", "group": 90}],
 *   "no_dev_nodes": [17]   // groups whose /dev/vfio node is missing
 * }
 * /dev/vfio/vfio always exists; /dev/vfio/<group> exists for each group with
 * a vfio-pci member or an mdev, as the kernel creates it.
 */
#define _XOPEN_SOURCE 700
#include "fake_sysfs.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PCI_DIR "sys/devices/pci0000:00"

static int mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* root/rel into p, its parent directories made. */
static int parent_made(const char *root, const char *rel, char p[PATH_MAX])
{
    snprintf(p, PATH_MAX, "%s/%s", root, rel);
    char *slash = strrchr(p, '/');
    *slash = '\0';
    int rc = mkdirs(p);
    *slash = '/';
    return rc;
}

static int put(const char *root, const char *rel, const char *text)
{
    char p[PATH_MAX];
    if (parent_made(root, rel, p) != 0)
        return -1;
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static int link_to(const char *root, const char *rel, const char *target)
{
    char p[PATH_MAX];
    if (parent_made(root, rel, p) != 0)
        return -1;
    unlink(p);
    return symlink(target, p);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int rm_rf(const char *path)
{
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *jstr(json_t *o, const char *k, const char *def)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : def;
}

static int bind_driver(const char *root, const char *bdf, const char *drv)
{
    char rel[PATH_MAX], target[PATH_MAX];
    snprintf(rel, sizeof rel, "sys/bus/pci/drivers/%s/unbind", drv);
    if (put(root, rel, "") != 0)
        return -1;
    snprintf(rel, sizeof rel, "sys/bus/pci/drivers/%s/bind", drv);
    if (put(root, rel, "") != 0)
        return -1;
    snprintf(rel, sizeof rel, PCI_DIR "/%s/driver", bdf);
    snprintf(target, sizeof target, "../../../bus/pci/drivers/%s", drv);
    return link_to(root, rel, target);
}

static int dev_node(const char *root, const char *group)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "dev/vfio/%s", group);
    return put(root, rel, "");
}

static int add_device(const char *root, json_t *d)
{
    const char *bdf = jstr(d, "bdf", NULL);
    char rel[PATH_MAX], target[PATH_MAX], buf[64];
    if (!bdf || strchr(bdf, '/')) {
        fprintf(stderr, "fake_sysfs: device without a valid bdf\n");
        return -1;
    }
    const char *attrs[][2] = {{"vendor", jstr(d, "vendor", "10de")},
                              {"device", jstr(d, "device", "2331")},
                              {"class", jstr(d, "class", "030200")}};
    for (size_t i = 0; i < 3; i++) {
        snprintf(rel, sizeof rel, PCI_DIR "/%s/%s", bdf, attrs[i][0]);
        snprintf(buf, sizeof buf, "0x%s\n", attrs[i][1]);
        if (put(root, rel, buf) != 0)
            return -1;
    }
    json_t *numa = json_object_get(d, "numa");
    snprintf(rel, sizeof rel, PCI_DIR "/%s/numa_node", bdf);
    snprintf(buf, sizeof buf, "%lld\n", json_is_integer(numa) ? json_integer_value(numa) : -1LL);
    if (put(root, rel, buf) != 0)
        return -1;
    snprintf(rel, sizeof rel, PCI_DIR "/%s/driver_override", bdf);
    if (put(root, rel, "(null)\n") != 0)
        return -1;
    /* the driver drivers_probe picks without an override (the fake kernel's memory) */
    snprintf(rel, sizeof rel, PCI_DIR "/%s/.fake_host_driver", bdf);
    if (put(root, rel, jstr(d, "host_driver", "nvidia")) != 0)
        return -1;
    snprintf(rel, sizeof rel, "sys/bus/pci/devices/%s", bdf);
    snprintf(target, sizeof target, "../../../devices/pci0000:00/%s", bdf);
    if (link_to(root, rel, target) != 0)
        return -1;
    const char *pf = jstr(d, "physfn", NULL); /* an SR-IOV VF names its PF */
    if (pf) {
        snprintf(rel, sizeof rel, PCI_DIR "/%s/physfn", bdf);
        snprintf(target, sizeof target, "../%s", pf);
        if (link_to(root, rel, target) != 0)
            return -1;
    }
    const char *drv = jstr(d, "driver", NULL);
    if (drv && bind_driver(root, bdf, drv) != 0)
        return -1;
    json_t *grp = json_object_get(d, "group");
    if (json_is_integer(grp)) {
        char g[16];
        snprintf(g, sizeof g, "%lld", json_integer_value(grp));
        snprintf(rel, sizeof rel, PCI_DIR "/%s/iommu_group", bdf);
        snprintf(target, sizeof target, "../../../kernel/iommu_groups/%s", g);
        if (link_to(root, rel, target) != 0)
            return -1;
        snprintf(rel, sizeof rel, "sys/kernel/iommu_groups/%s/devices/%s", g, bdf);
        snprintf(target, sizeof target, "../../../../devices/pci0000:00/%s", bdf);
        if (link_to(root, rel, target) != 0)
            return -1;
        if (drv && strcmp(drv, "vfio-pci") == 0 && dev_node(root, g) != 0)
            return -1;
    }
    return 0;
}

static int add_mdev_type(const char *root, json_t *t)
{
    const char *parent = jstr(t, "parent", NULL), *id = jstr(t, "id", NULL);
    char rel[PATH_MAX], buf[32];
    if (!parent || !id)
        return -1;
    snprintf(rel, sizeof rel, PCI_DIR "/%s/mdev_supported_types/%s/name", parent, id);
    json_t *name = json_object_get(t, "name");
    /* the kernel's attribute ends with a newline; a type may lack a name */
    if (json_is_string(name)) {
        snprintf(buf, sizeof buf, "%s", "");
        char text[128];
        snprintf(text, sizeof text, "%s\n", json_string_value(name));
        if (put(root, rel, text) != 0)
            return -1;
    }
    snprintf(rel, sizeof rel, PCI_DIR "/%s/mdev_supported_types/%s/available_instances", parent,
             id);
    json_t *av = json_object_get(t, "available");
    snprintf(buf, sizeof buf, "%lld\n", json_is_integer(av) ? json_integer_value(av) : 0LL);
    if (put(root, rel, buf) != 0)
        return -1;
    snprintf(rel, sizeof rel, PCI_DIR "/%s/mdev_supported_types/%s/device_api", parent, id);
    if (put(root, rel, "vfio-pci\n") != 0)
        return -1;
    snprintf(rel, sizeof rel, PCI_DIR "/%s/mdev_supported_types/%s/create", parent, id);
    return put(root, rel, "");
}

static int add_mdev(const char *root, json_t *m)
{
    const char *uuid = jstr(m, "uuid", NULL), *parent = jstr(m, "parent", NULL),
               *type = jstr(m, "type", NULL);
    char rel[PATH_MAX], target[PATH_MAX], g[16];
    if (!uuid || !parent || !type || strchr(uuid, '/'))
        return -1;
    snprintf(rel, sizeof rel, PCI_DIR "/%s/%s/mdev_type", parent, uuid);
    snprintf(target, sizeof target, "../mdev_supported_types/%s", type);
    if (link_to(root, rel, target) != 0)
        return -1;
    snprintf(rel, sizeof rel, PCI_DIR "/%s/%s/remove", parent, uuid);
    if (put(root, rel, "") != 0)
        return -1;
    snprintf(rel, sizeof rel, "sys/bus/mdev/devices/%s", uuid);
    snprintf(target, sizeof target, "../../../devices/pci0000:00/%s/%s", parent, uuid);
    if (link_to(root, rel, target) != 0)
        return -1;
    json_t *grp = json_object_get(m, "group");
    if (!json_is_integer(grp))
        return 0;
    snprintf(g, sizeof g, "%lld", json_integer_value(grp));
    snprintf(rel, sizeof rel, PCI_DIR "/%s/%s/iommu_group", parent, uuid);
    snprintf(target, sizeof target, "../../../../kernel/iommu_groups/%s", g);
    if (link_to(root, rel, target) != 0)
        return -1;
    snprintf(rel, sizeof rel, "sys/kernel/iommu_groups/%s/devices/%s", g, uuid);
    snprintf(target, sizeof target, "../../../../devices/pci0000:00/%s/%s", parent, uuid);
    if (link_to(root, rel, target) != 0)
        return -1;
    return dev_node(root, g);
}

int fake_sysfs_build(const char *root, const char *text)
{
    json_error_t jerr;
    json_t *spec = json_loads(text, 0, &jerr);
    int rc = -1;
    size_t i;
    json_t *v;
    char p[PATH_MAX];
    if (!json_is_object(spec)) {
        fprintf(stderr, "fake_sysfs: bad description: %s\n", jerr.text);
        goto out;
    }
    /* the directories a real system always has */
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices", root);
    if (mkdirs(p) != 0 || put(root, "sys/bus/pci/drivers_probe", "") != 0 ||
        put(root, "dev/vfio/vfio", "") != 0)
        goto out;
    snprintf(p, sizeof p, "%s/sys/kernel/iommu_groups", root);
    if (mkdirs(p) != 0)
        goto out;
    json_array_foreach(json_object_get(spec, "devices"), i, v) if (add_device(root, v) != 0) goto out;
    json_array_foreach(json_object_get(spec, "mdev_types"), i, v) if (add_mdev_type(root, v) != 0)
        goto out;
    json_array_foreach(json_object_get(spec, "mdevs"), i, v) if (add_mdev(root, v) != 0) goto out;
    json_array_foreach(json_object_get(spec, "no_dev_nodes"), i, v)
    {
        snprintf(p, sizeof p, "%s/dev/vfio/%lld", root, json_integer_value(v));
        unlink(p);
    }
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "fake_sysfs: building %s failed: %s\n", root, strerror(errno));
    json_decref(spec);
    return rc;
}

static void base_of_link(const char *path, char *out, size_t size)
{
    char t[PATH_MAX];
    ssize_t n = readlink(path, t, sizeof t - 1);
    out[0] = '\0';
    if (n <= 0)
        return;
    t[n] = '\0';
    const char *b = strrchr(t, '/');
    b = b ? b + 1 : t;
    size_t len = strnlen(b, size - 1);
    memcpy(out, b, len);
    out[len] = '\0';
}

/* Drops /dev/vfio/<group> once no member of the group is bound to vfio-pci. */
static void settle_group(const char *root, const char *group)
{
    char p[PATH_MAX], q[PATH_MAX + 300], drv[64];
    snprintf(p, sizeof p, "%s/sys/kernel/iommu_groups/%s/devices", root, group);
    DIR *d = opendir(p);
    bool any = false;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(q, sizeof q, "%s/%s/driver", p, e->d_name);
            base_of_link(q, drv, sizeof drv);
            /* an mdev keeps its group's node */
            snprintf(q, sizeof q, "%s/%s/mdev_type", p, e->d_name);
            struct stat st;
            if (strcmp(drv, "vfio-pci") == 0 || lstat(q, &st) == 0)
                any = true;
        }
        closedir(d);
    }
    snprintf(p, sizeof p, "%s/dev/vfio/%s", root, group);
    if (any)
        put(root, p + strlen(root) + 1, "");
    else
        unlink(p);
}

int fake_sysfs_remove(const char *root, const char *bdf)
{
    char p[PATH_MAX], group[16];
    snprintf(p, sizeof p, "%s/" PCI_DIR "/%s/iommu_group", root, bdf);
    base_of_link(p, group, sizeof group);
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s", root, bdf);
    if (unlink(p) != 0)
        return -1;
    if (group[0]) {
        snprintf(p, sizeof p, "%s/sys/kernel/iommu_groups/%s/devices/%s", root, group, bdf);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/" PCI_DIR "/%s", root, bdf);
    rm_rf(p);
    if (group[0])
        settle_group(root, group);
    return 0;
}

int fake_sysfs_remove_mdev(const char *root, const char *uuid)
{
    char p[PATH_MAX], t[PATH_MAX], group[16];
    snprintf(p, sizeof p, "%s/sys/bus/mdev/devices/%s/iommu_group", root, uuid);
    base_of_link(p, group, sizeof group);
    snprintf(p, sizeof p, "%s/sys/bus/mdev/devices/%s", root, uuid);
    ssize_t n = readlink(p, t, sizeof t - 1);
    if (n <= 0 || unlink(p) != 0)
        return -1;
    t[n] = '\0';
    /* the link is relative to sys/bus/mdev/devices */
    char dir[PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s/sys/bus/mdev/devices/%s", root, t);
    rm_rf(dir);
    if (group[0]) {
        snprintf(p, sizeof p, "%s/sys/kernel/iommu_groups/%s/devices/%s", root, group, uuid);
        unlink(p);
        settle_group(root, group);
    }
    return 0;
}

/* ---- fake PCI core ---- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void read_text(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(out, (int)size, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

int fake_sysfs_kernel_write(void *ud, const char *path, const char *text)
{
    struct fake_sysfs_kernel *k = ud;
    char p[PATH_MAX], drv[64], group[16];
    size_t used = strlen(k->log);
    k->writes++;
    snprintf(k->log + used, sizeof k->log - used, "%s<-%s;",
             path + strlen(k->root), strcmp(text, "\n") == 0 ? "\\n" : text);
    if (k->fail_path && ends_with(path, k->fail_path))
        return k->fail_errno;
    if (strncmp(path, k->root, strlen(k->root)) != 0)
        return EACCES; /* outside the fake tree: never touch the real one */
    if (ends_with(path, "/driver_override")) {
        /* the kernel stores the name; a lone newline clears it */
        FILE *f = fopen(path, "w");
        if (!f)
            return errno;
        fputs(strcmp(text, "\n") == 0 ? "(null)\n" : text, f);
        fputc('\n', f);
        fclose(f);
        return 0;
    }
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver", k->root, text);
    if (ends_with(path, "/unbind")) {
        base_of_link(p, drv, sizeof drv);
        if (!drv[0])
            return ENODEV;
        unlink(p);
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/iommu_group", k->root, text);
        base_of_link(p, group, sizeof group);
        if (group[0])
            settle_group(k->root, group);
        return 0;
    }
    if (ends_with(path, "/drivers_probe")) {
        char over[64], host[64];
        base_of_link(p, drv, sizeof drv);
        if (drv[0])
            return 0; /* already bound: probing does nothing */
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver_override", k->root, text);
        read_text(p, over, sizeof over);
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/.fake_host_driver", k->root, text);
        read_text(p, host, sizeof host);
        if (!host[0] && !over[0])
            return ENODEV; /* no such device */
        const char *want = over[0] && strcmp(over, "(null)") != 0 ? over : host;
        if (strcmp(want, "vfio-pci") == 0 && !k->vfio_loaded)
            return 0; /* nothing claims it: the write succeeds, the device stays unbound */
        if (bind_driver(k->root, text, want) != 0)
            return EIO;
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/iommu_group", k->root, text);
        base_of_link(p, group, sizeof group);
        if (group[0])
            settle_group(k->root, group);
        return 0;
    }
    return EPERM;
}
