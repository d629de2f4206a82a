/*
 * Fake sysfs (and /dev/vfio) tree for the passthrough tests: a stand-in for
 * the kernel's PCI, IOMMU-group and mdev views, built from a JSON
 * description.  See tests/fakes/README.md ("fake sysfs").
 *
 * The tree has the kernel's shape, symlinks included: devices live under
 * sys/devices/pci0000:00/<bdf>, sys/bus/pci/devices/<bdf> links to them,
 * driver and iommu_group are links whose last component names the driver
 * and the group, and mdev instances sit under their parent with
 * mdev_type -> ../mdev_supported_types/<type>.
 *
 * The fake kernel (fake_sysfs_kernel_write) answers the binding helper's
 * writes as the PCI core does: unbind drops the driver link (ENODEV when
 * none), drivers_probe binds driver_override or else the device's host
 * driver, and the first vfio-pci member of a group makes /dev/vfio/<group>.
 */
#ifndef GV_FAKE_SYSFS_H
#define GV_FAKE_SYSFS_H

#include <stdbool.h>

/* Builds the tree under root (sys/ and dev/) from JSON text; 0 or -1 (msg on stderr). */
int fake_sysfs_build(const char *root, const char *json);
/* Hot removal of a PCI function (device, links, and its group's node once no vfio member is left). */
int fake_sysfs_remove(const char *root, const char *bdf);
/* Removal of a mediated device instance. */
int fake_sysfs_remove_mdev(const char *root, const char *uuid);

struct fake_sysfs_kernel {
    const char *root;
    bool vfio_loaded;      /* false: drivers_probe cannot bind vfio-pci (module missing) */
    const char *fail_path; /* a write whose path ends so fails with fail_errno */
    int fail_errno;
    int writes;            /* count of writes seen */
    char log[4096];        /* "path<-text;" per write, for assertions */
};
/* gv_pt_bind_ops.write for the fake kernel (ud: struct fake_sysfs_kernel *). */
int fake_sysfs_kernel_write(void *ud, const char *path, const char *text);

#endif
