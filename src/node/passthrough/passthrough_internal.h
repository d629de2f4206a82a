/*
 * Private to the passthrough room: the sysfs helpers passthrough.c (scan,
 * names, Allocate), bind.c (vfio-pci binding) and settings.c (the node
 * config's "passthrough" block) share.
 */
#ifndef GV_NODE_PASSTHROUGH_INTERNAL_H
#define GV_NODE_PASSTHROUGH_INTERNAL_H

/* passthrough.c */
#include <stdbool.h>
#include <stddef.h>

#include "node/passthrough/gv_passthrough.h"

#define PCI_CLASS_BRIDGE_PCI 0x0604 /* class >> 8 */
#define PCI_BASE_CLASS_DISPLAY 0x03 /* class >> 16 */
#define PCI_BASE_CLASS_BRIDGE 0x06  /* class >> 16 */

/* passthrough.c: sysfs reads and the scan */
bool link_base(const char *path, char *out, size_t size);
gv_status scan_group(const char *sys, const char *id, struct gv_pt_group *g,
                     struct gv_error *err);
const char *root_or_slash(const char *r);
bool valid_bdf(const char *s);
void read_function(const char *sys, const char *bdf, struct gv_pt_function *f);
bool is_bridge(const struct gv_pt_function *f);
void copy_str(char *out, size_t size, const char *src);

#endif
