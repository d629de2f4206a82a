/*
 * Allocate without the NVIDIA container runtime (config nvidiaRuntime:
 * false; docs/mig-cdi.md): the container gets the device nodes of its GPUs
 * (and MIG devices), the control nodes, and read-only mounts of the host
 * driver's libraries and tools, from the same discovery as the CDI spec,
 * so plain runc starts it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "node/discovery/gv_cdi.h"
#include "node/allocate/gv_direct.h"
#include "node/modes/gv_mode.h"

static void node(struct gv_mode_answer *b, const struct gv_cdi_host *h, const char *found)
{
    char host[600];
    gv_cdi_host_path(h, found, host, sizeof(host));
    gv_mode_answer_device(b, host, found + strlen(h->root), "rw");
}

static void mount(struct gv_mode_answer *b, const struct gv_cdi_host *h, const struct gv_cdi_file *f)
{
    char host[600];
    gv_cdi_host_path(h, f->host, host, sizeof(host));
    gv_mode_answer_mount(b, host, f->ctr, true);
}

/* The GPU (and MIG device) a visible UUID names, from the units' GPUs. */
static bool find(const struct gv_allocator_gpu *units, size_t n, const char *uuid,
                 const struct gv_gpu **g, const struct gv_mig **m)
{
    for (size_t i = 0; i < n; i++) {
        *g = &units[i].gpu;
        *m = NULL;
        if (strcmp((*g)->uuid, uuid) == 0)
            return true;
        for (unsigned k = 0; k < (*g)->n_migs; k++)
            if (strcmp((*g)->migs[k].uuid, uuid) == 0) {
                *m = &(*g)->migs[k];
                return true;
            }
    }
    return false;
}

bool gv_direct_answer(const struct gv_cdi_host *h, const struct gv_allocator_gpu *units,
                      size_t n_units, char uuids[][GV_ALLOC_UUID_MAX], size_t n,
                      struct gv_mode_answer *b, char *why, size_t why_cap)
{
    char path[600], caps[2][512];
    if (h->broken[0]) { /* fail closed: a pod without the driver's files would not see its GPU */
        snprintf(why, why_cap, "nvidiaRuntime is false and %s", h->broken);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const struct gv_gpu *g;
        const struct gv_mig *m;
        if (!find(units, n_units, uuids[i], &g, &m)) {
            snprintf(why, why_cap, "device %s is not on this node any more", uuids[i]);
            return false;
        }
        gv_cdi_gpu_node(h, g, path, sizeof(path));
        node(b, h, path);
        size_t nc = m ? gv_cdi_mig_nodes(h, g, m, caps) : 0;
        if (m && nc < 2) {
            /* without its nvidia-caps nodes a MIG device cannot be opened: refuse, say why */
            snprintf(why, why_cap, "MIG device %s: no nvidia-caps minors for gpu%u/gi%u/ci%u",
                     m->uuid, g->minor, m->gi, m->ci);
            return false;
        }
        for (size_t c = 0; c < nc; c++)
            node(b, h, caps[c]);
    }
    for (size_t i = 0; i < h->n_ctl; i++)
        node(b, h, h->ctl_nodes[i]);
    for (size_t i = 0; i < h->n_libs; i++)
        mount(b, h, &h->libs[i]);
    for (size_t i = 0; i < h->n_bins; i++)
        mount(b, h, &h->bins[i]);
    /* as nvidia-ctk's CDI spec: an NVIDIA runtime that is still installed must not inject again */
    gv_mode_answer_env(b, "NVIDIA_VISIBLE_DEVICES", "void");
    return true;
}
