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

void gv_direct_sync(struct gv_allocator *a, const struct gv_node_config *cfg, const char *version,
                    const char *install_dir, const struct gv_gpu *gpus, size_t n)
{
    if (!cfg->cdi && cfg->nvidia_runtime) {
        gv_allocator_set_direct(a, NULL);
        return;
    }
    struct gv_cdi_host *h = NULL;
    struct gv_error err;
    const char *seen = cfg->container_driver_root[0] ? cfg->container_driver_root : cfg->driver_root;
    if (gv_cdi_discover(seen, cfg->driver_root, version, &h, &err) != GV_OK) {
        gv_error("driver files not found, %s: %s",
                 cfg->nvidia_runtime ? "no CDI spec written" : "Allocate refuses GPUs", err.msg);
        if (cfg->nvidia_runtime)
            return;
        h = calloc(1, sizeof(*h));
        if (h)
            snprintf(h->broken, sizeof(h->broken), "%.250s", err.msg);
        gv_allocator_set_direct(a, h);
        return;
    }
    if (cfg->cdi) {
        char lib[600], preload[600], file[200];
        snprintf(lib, sizeof(lib), "%s/lib/libgpuvisor.so", install_dir);
        snprintf(preload, sizeof(preload), "%s/ld.so.preload", install_dir);
        struct gv_cdi_interposer ip = {.lib = lib, .preload = preload};
        /* "gpuvisor-nvidia.com_gpu.json": not nvidia-ctk's file name, so both cannot clobber */
        snprintf(file, sizeof(file), "gpuvisor-%s.json", cfg->cdi_kind);
        for (char *p = file; *p; p++)
            if (*p == '/')
                *p = '_';
        json_t *spec = gv_cdi_spec(cfg->cdi_kind, h, gpus, n, &ip, &err);
        if (spec == NULL || gv_cdi_write(cfg->cdi_spec_dir, file, spec, &err) != GV_OK)
            gv_error("CDI spec not written: %s", err.msg);
        json_decref(spec);
    }
    if (cfg->nvidia_runtime) {
        gv_cdi_host_free(h);
        h = NULL;
    }
    gv_allocator_set_direct(a, h);
}
