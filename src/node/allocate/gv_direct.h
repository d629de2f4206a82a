/*
 * The runtime-independent Allocate answer (docs/mig-cdi.md, "Without the
 * NVIDIA container runtime"): device nodes and driver mounts for the
 * visible GPUs and MIG devices.
 */
#ifndef GV_NODE_DIRECT_H
#define GV_NODE_DIRECT_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc/gv_alloc.h"
#include "node/allocate/gv_allocator.h"
#include "node/discovery/gv_cdi.h"

struct gv_mode_answer;
/* False with why when a UUID is unknown or a MIG device's caps nodes are missing. */
bool gv_direct_answer(const struct gv_cdi_host *h, const struct gv_allocator_gpu *units,
                      size_t n_units, char uuids[][GV_ALLOC_UUID_MAX], size_t n,
                      struct gv_mode_answer *b, char *why, size_t why_cap);

#endif
