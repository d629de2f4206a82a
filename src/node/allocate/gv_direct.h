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

/* allocator.c: answer without the NVIDIA runtime from h (owned from now; NULL: with it). */
struct gv_allocator;
void gv_allocator_set_direct(struct gv_allocator *a, struct gv_cdi_host *h);

/*
 * After each rebuild (loop thread): discovers the driver's files when the
 * config wants CDI or no NVIDIA runtime, writes the CDI spec (cdi: true)
 * and hands the files to the allocator (nvidiaRuntime: false).
 */
void gv_direct_sync(struct gv_allocator *a, const struct gv_node_config *cfg, const char *version,
                    const char *install_dir, const struct gv_gpu *gpus, size_t n);

#endif
