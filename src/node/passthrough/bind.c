/*
 * Binding a GPU (and its IOMMU group) to vfio-pci and back through sysfs
 * (docs/passthrough.md, "Binding"), refused while NVML shows it busy.
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

/* ---- binding helper ---- */

static int sysfs_write(void *ud, const char *path, const char *text)
{
    (void)ud;
    /* O_TRUNC: sysfs ignores it; a plain file (a test tree) then holds just this text */
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
        return errno;
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    int e = n < 0 ? errno : (size_t)n != len ? EIO : 0;
    if (close(fd) != 0 && e == 0)
        e = errno;
    return e;
}

/*
 * NVML through the host driver the GPU is still bound to.  Any doubt (no
 * NVML, no handle, a failed query) counts as busy: binding pulls the GPU from
 * under whatever runs on it.
 */
static bool nvml_busy(void *ud, const char *bdf, char *why, size_t size)
{
    (void)ud;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, size, "NVML not loadable, cannot tell whether %s runs processes", bdf);
        return true;
    }
    typedef nvmlReturn_t (*init_fn)(void);
    typedef nvmlReturn_t (*handle_fn)(const char *, nvmlDevice_t *);
    typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2");
    init_fn shutdown = (init_fn)dlsym(lib, "nvmlShutdown");
    handle_fn handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    procs_fn kinds[2] = {(procs_fn)dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"),
                         (procs_fn)dlsym(lib, "nvmlDeviceGetGraphicsRunningProcesses_v3")};
    bool busy = true;
    nvmlDevice_t dev;
    if (!init || !shutdown || !handle || !kinds[0] || !kinds[1] || init() != NVML_SUCCESS) {
        snprintf(why, size, "NVML unusable, cannot tell whether %s runs processes", bdf);
        goto out;
    }
    if (handle(bdf, &dev) != NVML_SUCCESS) {
        snprintf(why, size, "NVML does not know %s", bdf);
        shutdown();
        goto out;
    }
    busy = false;
    for (int k = 0; k < 2 && !busy; k++) {
        unsigned int count = 0;
        nvmlReturn_t r = kinds[k](dev, &count, NULL);
        if (r == NVML_ERROR_INSUFFICIENT_SIZE || (r == NVML_SUCCESS && count > 0)) {
            snprintf(why, size, "%s runs %u process(es)", bdf, count);
            busy = true;
        } else if (r != NVML_SUCCESS) {
            snprintf(why, size, "NVML cannot list the processes of %s (error %d)", bdf, (int)r);
            busy = true;
        }
    }
    shutdown();
out:
    dlclose(lib);
    return busy;
}

const struct gv_pt_bind_ops *gv_pt_bind_ops_sysfs(void)
{
    static const struct gv_pt_bind_ops ops = {sysfs_write, nvml_busy, NULL};
    return &ops;
}

static gv_status op_write(const struct gv_pt_bind_ops *ops, const char *path, const char *text,
                          struct gv_error *err)
{
    int e = ops->write(ops->ud, path, text);
    if (e != 0)
        return gv_error_set(err, GV_EIO, "writing '%s' to %s: %s", text, path, strerror(e));
    return GV_OK;
}

/* driver_override = drv ("\n" clears), unbind from the current driver, probe. */
static gv_status rebind_one(const char *sys, const char *bdf, const char *override,
                            const struct gv_pt_bind_ops *ops, struct gv_error *err)
{
    char p[PATH_MAX], drv[32];
    gv_status st;
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver_override", sys, bdf);
    if ((st = op_write(ops, p, override, err)) != GV_OK)
        return st;
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver", sys, bdf);
    if (link_base(p, drv, sizeof drv)) {
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver/unbind", sys, bdf);
        if ((st = op_write(ops, p, bdf, err)) != GV_OK)
            return st;
    }
    snprintf(p, sizeof p, "%s/sys/bus/pci/drivers_probe", sys);
    return op_write(ops, p, bdf, err);
}

static gv_status group_of(const char *sys, const char *bdf, struct gv_pt_group *g,
                          struct gv_error *err)
{
    char p[PATH_MAX], id[GV_PT_GROUP_ID_MAX];
    memset(g, 0, sizeof *g);
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/iommu_group", sys, bdf);
    if (!link_base(p, id, sizeof id))
        return gv_error_set(err, GV_EUNSUPPORTED, "%s has no IOMMU group (is the IOMMU enabled?)",
                            bdf);
    return scan_group(sys, id, g, err);
}

gv_status gv_pt_bind(const char *sys_root, const char *bdf, const struct gv_pt_bind_ops *ops,
                     struct gv_error *err)
{
    const char *sys = root_or_slash(sys_root);
    struct gv_pt_group g;
    struct gv_pt_function self;
    gv_status st;
    size_t moved = 0;
    if (!valid_bdf(bdf))
        return gv_error_set(err, GV_EINVAL, "'%s' is not a PCI address (dddd:bb:dd.f)", bdf);
    read_function(sys, bdf, &self);
    if (self.vendor == 0)
        return gv_error_set(err, GV_ENOTFOUND, "no PCI device %s", bdf);
    if (self.vendor != GV_PT_VENDOR_NVIDIA || (self.class_code >> 16) != PCI_BASE_CLASS_DISPLAY)
        return gv_error_set(err, GV_EINVAL, "%s (%04x:%04x) is not an NVIDIA GPU", bdf,
                            self.vendor, self.device);
    if ((st = group_of(sys, bdf, &g, err)) != GV_OK)
        return st;
    /* refuse before touching anything */
    for (size_t i = 0; i < g.n_funcs; i++) {
        const struct gv_pt_function *f = &g.funcs[i];
        char why[GV_PT_REASON_MAX] = "";
        if (is_bridge(f) || strcmp(f->driver, GV_PT_VFIO_DRIVER) == 0)
            continue;
        /* Only PCI-to-PCI bridges are mere plumbing (is_bridge).  Another bridge
         * function with a driver, an NVSwitch (class 0680) on nvidia above all,
         * serves every GPU on its fabric: moving it to vfio-pci takes NVLink
         * away from GPUs outside this group. */
        if ((f->class_code >> 16) == PCI_BASE_CLASS_BRIDGE && f->driver[0]) {
            st = gv_error_set(err, GV_ECONFLICT,
                              "IOMMU group %s also holds %s (%04x:%04x, class %04x, driver %s), "
                              "a bridge function other than a PCI bridge (an NVSwitch?): moving "
                              "it off its driver can cut other GPUs off their fabric; not binding",
                              g.id, f->bdf, f->vendor, f->device, f->class_code >> 8, f->driver);
            goto out;
        }
        if (f->vendor != GV_PT_VENDOR_NVIDIA) {
            st = gv_error_set(err, GV_ECONFLICT,
                              "IOMMU group %s also holds %s (%04x:%04x, driver %s), which is not "
                              "an NVIDIA function: not binding",
                              g.id, f->bdf, f->vendor, f->device,
                              f->driver[0] ? f->driver : "none");
            goto out;
        }
        if ((f->class_code >> 16) == PCI_BASE_CLASS_DISPLAY && f->driver[0] && ops->busy &&
            ops->busy(ops->ud, f->bdf, why, sizeof why)) {
            st = gv_error_set(err, GV_ECONFLICT, "refusing to bind %s to " GV_PT_VFIO_DRIVER ": %s",
                              f->bdf, why);
            goto out;
        }
    }
    for (size_t i = 0; i < g.n_funcs; i++) {
        struct gv_pt_function *f = &g.funcs[i];
        char p[PATH_MAX], drv[32] = "";
        if (is_bridge(f) || strcmp(f->driver, GV_PT_VFIO_DRIVER) == 0)
            continue;
        st = rebind_one(sys, f->bdf, GV_PT_VFIO_DRIVER, ops, err);
        moved = i + 1;
        if (st != GV_OK)
            goto rollback;
        snprintf(p, sizeof p, "%s/sys/bus/pci/devices/%s/driver", sys, f->bdf);
        link_base(p, drv, sizeof drv);
        if (strcmp(drv, GV_PT_VFIO_DRIVER) != 0) {
            st = gv_error_set(err, GV_EUNAVAILABLE,
                              "%s is bound to %s after drivers_probe, not " GV_PT_VFIO_DRIVER
                              " (is the vfio-pci module loaded?)",
                              f->bdf, drv[0] ? drv : "nothing");
            goto rollback;
        }
    }
    st = GV_OK;
    goto out;
rollback:
    /* hand back what we moved; the first error is the one reported */
    for (size_t i = 0; i < moved; i++) {
        const struct gv_pt_function *f = &g.funcs[i];
        if (is_bridge(f) || strcmp(f->driver, GV_PT_VFIO_DRIVER) == 0)
            continue;
        rebind_one(sys, f->bdf, "\n", ops, NULL);
    }
out:
    free(g.funcs);
    return st;
}

gv_status gv_pt_unbind(const char *sys_root, const char *bdf, const struct gv_pt_bind_ops *ops,
                       struct gv_error *err)
{
    const char *sys = root_or_slash(sys_root);
    struct gv_pt_group g;
    gv_status st;
    if (!valid_bdf(bdf))
        return gv_error_set(err, GV_EINVAL, "'%s' is not a PCI address (dddd:bb:dd.f)", bdf);
    struct gv_pt_function self;
    read_function(sys, bdf, &self);
    if (self.vendor == 0)
        return gv_error_set(err, GV_ENOTFOUND, "no PCI device %s", bdf);
    if ((st = group_of(sys, bdf, &g, err)) != GV_OK)
        return st;
    for (size_t i = 0; i < g.n_funcs && st == GV_OK; i++) {
        const struct gv_pt_function *f = &g.funcs[i];
        if (f->vendor == GV_PT_VENDOR_NVIDIA && strcmp(f->driver, GV_PT_VFIO_DRIVER) == 0)
            st = rebind_one(sys, f->bdf, "\n", ops, err);
    }
    free(g.funcs);
    return st;
}
