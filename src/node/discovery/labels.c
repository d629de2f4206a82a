/*
 * NVIDIA gpu-feature-discovery's node labels, same names and meanings
 * (docs/mig-cdi.md, "GFD labels", lists each and the deliberate
 * differences).  Computed per node from the inventory the agent publishes.
 */
#include <stdio.h>
#include <string.h>

#include "node/discovery/gv_gpus.h"
#include "node/discovery/gv_publisher.h"

static bool alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Label values: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends.
 * The API server refuses a whole node update for one bad value, so a name
 * NVML gives with a space or bracket first ("(Tesla) ...") loses its
 * leading non-alphanumerics rather than the node all its labels. */
static void label_value(char *out, size_t cap, const char *in)
{
    size_t n = 0;
    while (*in && !alnum(*in))
        in++;
    for (const char *p = in; *p && n + 1 < cap && n < 63; p++) {
        char c = *p;
        out[n++] = alnum(c) || c == '-' || c == '_' || c == '.' ? c : '-';
    }
    while (n > 0 && !alnum(out[n - 1]))
        n--;
    out[n] = '\0';
}

static void set_str(json_t *o, const char *key, const char *v)
{
    char clean[64];
    label_value(clean, sizeof(clean), v);
    json_object_set_new(o, key, json_string(clean));
}

static void set_num(json_t *o, const char *key, long long v)
{
    char s[32];
    snprintf(s, sizeof(s), "%lld", v);
    json_object_set_new(o, key, json_string(s));
}

/* GFD's getArchFamily, by compute capability. */
static const char *arch_family(int major, int minor)
{
    switch (major) {
    case 1: return "tesla";
    case 2: return "fermi";
    case 3: return "kepler";
    case 5: return "maxwell";
    case 6: return "pascal";
    case 7: return minor < 5 ? "volta" : "turing";
    case 8: return "ampere";
    case 9: return "hopper";
    }
    return "undefined";
}

/*
 * Driver "535.129.03" -> cuda.driver-version.{major,minor,revision,full} and
 * the deprecated cuda.driver.{major,minor,rev}.  GFD fails on a version that
 * is not X.Y[.Z]; we leave the version labels out instead (logged by none:
 * the inventory still carries the text).
 */
static void driver_labels(json_t *o, const char *version)
{
    char part[3][32] = {"", "", ""};
    int n = 0;
    const char *p = version;
    while (n < 4 && *p) {
        size_t len = strcspn(p, ".");
        if (n == 3 || len == 0 || len >= sizeof(part[0]))
            return;
        memcpy(part[n], p, len);
        part[n][len] = '\0';
        n++;
        p += len;
        if (*p == '.' && *++p == '\0')
            return; /* trailing dot */
    }
    if (n < 2)
        return;
    set_str(o, "nvidia.com/cuda.driver.major", part[0]);
    set_str(o, "nvidia.com/cuda.driver.minor", part[1]);
    json_object_set_new(o, "nvidia.com/cuda.driver.rev", json_string(""));
    set_str(o, "nvidia.com/cuda.driver-version.major", part[0]);
    set_str(o, "nvidia.com/cuda.driver-version.minor", part[1]);
    json_object_set_new(o, "nvidia.com/cuda.driver-version.revision", json_string(""));
    if (n == 3) {
        set_str(o, "nvidia.com/cuda.driver.rev", part[2]);
        set_str(o, "nvidia.com/cuda.driver-version.revision", part[2]);
    }
    set_str(o, "nvidia.com/cuda.driver-version.full", version);
}

/* CUDA driver API version "12.4" -> cuda.runtime-version.* and cuda.runtime.*. */
static void cuda_labels(json_t *o, const char *version)
{
    int major, minor, used = 0;
    if (sscanf(version, "%d.%d%n", &major, &minor, &used) != 2 || version[used] != '\0' ||
        major < 0 || minor < 0)
        return;
    set_num(o, "nvidia.com/cuda.runtime.major", major);
    set_num(o, "nvidia.com/cuda.runtime.minor", minor);
    set_num(o, "nvidia.com/cuda.runtime-version.major", major);
    set_num(o, "nvidia.com/cuda.runtime-version.minor", minor);
    char full[32];
    snprintf(full, sizeof(full), "%d.%d", major, minor);
    json_object_set_new(o, "nvidia.com/cuda.runtime-version.full", json_string(full));
}

/*
 * The GPU whose model the nvidia.com/gpu.* labels describe.  GFD labels
 * one model per node: MIG-enabled models first, whole GPUs overriding
 * them, and among several models whichever Go's map order gives last.
 * We keep "whole GPUs win" and make the rest deterministic: the model with
 * the most GPUs, ties to the one holding the lowest index.
 */
/*
 * Whether entry k is another entry of a physical GPU listed earlier: with
 * "migMode": "vgpu" each MIG device is an entry of its own, with its GPU's
 * index (GFD counts physical GPUs).
 */
static bool same_gpu_as_earlier(const struct gv_inventory *inv, uint32_t k)
{
    for (uint32_t j = 0; j < k; j++)
        if (inv->gpus[j].index == inv->gpus[k].index)
            return true;
    return false;
}

/*
 * Whether entry g stands for a MIG-enabled GPU: the GPU itself (mig), or
 * one of its MIG devices listed as a GPU of its own under migStrategy
 * single (mode mig, mig false for the scheduler; src/node/modes/mig_inventory.c),
 * labelled as its parent, as GFD does.
 */
static bool mig_enabled(const struct gv_inventory_gpu *g)
{
    return g->mig || g->mode == GV_INVENTORY_MODE_MIG;
}

static const struct gv_inventory_gpu *label_model(const struct gv_inventory *inv, uint32_t *count)
{
    const struct gv_inventory_gpu *best = NULL;
    uint32_t best_n = 0;
    bool best_whole = false;
    for (uint32_t i = 0; i < inv->n_gpus; i++) {
        const struct gv_inventory_gpu *g = &inv->gpus[i];
        uint32_t n = 0, lowest = g->index;
        bool seen = false;
        for (uint32_t k = 0; k < inv->n_gpus; k++) {
            const struct gv_inventory_gpu *h = &inv->gpus[k];
            if (strcmp(h->model, g->model) != 0 || mig_enabled(h) != mig_enabled(g) ||
                same_gpu_as_earlier(inv, k))
                continue;
            if (k < i)
                seen = true;
            n++;
            if (h->index < lowest)
                lowest = h->index;
        }
        if (seen)
            continue; /* model counted at its first GPU */
        bool whole = !mig_enabled(g);
        if (best == NULL || whole > best_whole ||
            (whole == best_whole &&
             (n > best_n || (n == best_n && lowest < best->index)))) {
            best = g;
            best_n = n;
            best_whole = whole;
        }
    }
    /* MIG-enabled and whole GPUs of one model are counted together, as GFD does */
    *count = 0;
    for (uint32_t k = 0; best && k < inv->n_gpus; k++)
        *count += strcmp(inv->gpus[k].model, best->model) == 0 && !same_gpu_as_earlier(inv, k);
    return best;
}

void gv_labels_add_migs(struct gv_inventory *inv, const struct gv_gpu *g)
{
    if (!g->mig)
        return;
    inv->mig_empty |= g->n_migs == 0;
    for (unsigned k = 0; k < g->n_migs; k++) {
        const struct gv_mig *m = &g->migs[k];
        uint32_t i = 0;
        while (i < inv->n_migs && strcmp(inv->migs[i].profile, m->profile) != 0)
            i++;
        if (i == inv->n_migs) {
            if (inv->n_migs == sizeof(inv->migs) / sizeof(inv->migs[0]))
                continue; /* more profiles than MIG allows: not labelled */
            struct gv_inventory_mig *p = &inv->migs[inv->n_migs++];
            memset(p, 0, sizeof(*p));
            snprintf(p->profile, sizeof(p->profile), "%s", m->profile);
            snprintf(p->model, sizeof(p->model), "%s", g->model);
            p->sms = m->sms;
            p->gi_slices = m->gi_slices;
            p->ci_slices = m->ci_slices;
            p->copy = m->copy;
            p->decoder = m->decoder;
            p->encoder = m->encoder;
            p->jpeg = m->jpeg;
            p->ofa = m->ofa;
            p->memory_mib = m->memory_mib;
        }
        inv->migs[i].count++;
    }
}

/* GFD's MIG resource labels under prefix ("nvidia.com/gpu" or "nvidia.com/mig-<profile>"). */
static void mig_labels(json_t *o, const char *prefix, const struct gv_inventory_mig *p)
{
    char key[200], product[200];
    snprintf(product, sizeof(product), "%s-MIG-%s", p->model, p->profile);
    for (char *c = product; *c; c++)
        if (*c == ' ')
            *c = '-';
#define MIG_LABEL(suffix, set, value)                                                              \
    do {                                                                                           \
        snprintf(key, sizeof(key), "%s." suffix, prefix);                                          \
        set(o, key, value);                                                                        \
    } while (0)
    MIG_LABEL("product", set_str, product);
    MIG_LABEL("count", set_num, p->count);
    MIG_LABEL("replicas", set_num, 1);
    MIG_LABEL("memory", set_num, (long long)p->memory_mib);
    MIG_LABEL("multiprocessors", set_num, p->sms);
    MIG_LABEL("slices.gi", set_num, p->gi_slices);
    MIG_LABEL("slices.ci", set_num, p->ci_slices);
    MIG_LABEL("engines.copy", set_num, p->copy);
    MIG_LABEL("engines.decoder", set_num, p->decoder);
    MIG_LABEL("engines.encoder", set_num, p->encoder);
    MIG_LABEL("engines.jpeg", set_num, p->jpeg);
    MIG_LABEL("engines.ofa", set_num, p->ofa);
#undef MIG_LABEL
}

/*
 * migStrategy single/mixed (GFD's mig-strategy labelers): mixed labels each
 * profile as nvidia.com/mig-<profile>.*; single relabels nvidia.com/gpu.*
 * with the one profile, or as <model>-MIG-INVALID with count/replicas/memory
 * 0 when a MIG-enabled GPU is empty, MIG-enabled and disabled GPUs are
 * mixed, or several profiles exist.
 */
static void strategy_labels(json_t *o, const struct gv_inventory *inv, const char *strategy)
{
    bool any_mig = false, any_whole = false;
    const char *mig_model = NULL;
    for (uint32_t i = 0; i < inv->n_gpus; i++) {
        any_mig |= mig_enabled(&inv->gpus[i]);
        any_whole |= !mig_enabled(&inv->gpus[i]);
        if (mig_enabled(&inv->gpus[i]) && mig_model == NULL)
            mig_model = inv->gpus[i].model;
    }
    if (strcmp(strategy, "mixed") == 0) {
        for (uint32_t i = 0; i < inv->n_migs; i++) {
            char prefix[80];
            snprintf(prefix, sizeof(prefix), "nvidia.com/mig-%s", inv->migs[i].profile);
            mig_labels(o, prefix, &inv->migs[i]);
        }
        return;
    }
    if (strcmp(strategy, "single") != 0 || !any_mig)
        return; /* single without MIG-enabled GPUs is `none` (GFD) */
    if (inv->mig_empty || any_whole || inv->n_migs != 1) {
        char product[200];
        snprintf(product, sizeof(product), "%s-MIG-INVALID", mig_model);
        for (char *c = product; *c; c++)
            if (*c == ' ')
                *c = '-';
        set_str(o, "nvidia.com/gpu.product", product);
        set_num(o, "nvidia.com/gpu.count", 0);
        set_num(o, "nvidia.com/gpu.replicas", 0);
        set_num(o, "nvidia.com/gpu.memory", 0);
        return;
    }
    mig_labels(o, "nvidia.com/gpu", &inv->migs[0]);
}

json_t *gv_labels_gfd(const struct gv_inventory *inv, long long timestamp)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    set_num(o, "nvidia.com/gfd.timestamp", timestamp);
    /* gpu.present is NFD's/GPU operator's; kept since selectors use it */
    json_object_set_new(o, "nvidia.com/gpu.present", json_string(inv->n_gpus ? "true" : "false"));
    if (inv->n_gpus == 0) /* GFD: no device, no device labels */
        return o;
    driver_labels(o, inv->driver_version);
    cuda_labels(o, inv->cuda_version);

    bool mig_capable = false, any_mig = false, mps = false;
    for (uint32_t i = 0; i < inv->n_gpus; i++) {
        mig_capable |= inv->gpus[i].mig_capable;
        any_mig |= mig_enabled(&inv->gpus[i]);
        mps |= inv->gpus[i].mode == GV_INVENTORY_MODE_MPS && inv->gpus[i].split > 1;
    }
    json_object_set_new(o, "nvidia.com/mig.capable", json_string(mig_capable ? "true" : "false"));
    /* GFD: false unless the MPS strategy is configured; MPS cannot run on MIG-enabled GPUs */
    json_object_set_new(o, "nvidia.com/mps.capable",
                        json_string(mps && !any_mig ? "true" : "false"));
    const char *strategy = inv->mig_strategy[0] ? inv->mig_strategy : "none";
    if (strcmp(strategy, "none") != 0)
        json_object_set_new(o, "nvidia.com/mig.strategy", json_string(strategy));

    /* gpu.mode: the first GPU's PCI class decides, as GFD's loop does */
    uint32_t cls = inv->gpus[0].pci_class;
    json_object_set_new(o, "nvidia.com/gpu.mode",
                        json_string(cls == 0x030200   ? "compute"
                                    : cls == 0x030000 ? "graphics"
                                                      : "unknown"));

    uint32_t count;
    const struct gv_inventory_gpu *g = label_model(inv, &count);
    /* sharing as NVIDIA defines it: time-slicing/mps replicas; vgpu is ours (gpuvisor.io label) */
    bool sharing = !mig_enabled(g); /* GFD labels MIG-enabled GPUs "without sharing": replicas 0 */
    unsigned replicas = sharing ? (g->split > 1 ? g->split : 1) : 0;
    const char *nv_strategy = "none";
    if (sharing && replicas > 1 && g->mode == GV_INVENTORY_MODE_TIMESLICING)
        nv_strategy = "time-slicing";
    else if (sharing && replicas > 1 && g->mode == GV_INVENTORY_MODE_MPS)
        nv_strategy = "mps";
    char product[160];
    snprintf(product, sizeof(product), "%s%s", g->model,
             replicas > 1 && !g->renamed ? "-SHARED" : "");
    for (char *p = product; *p; p++)
        if (*p == ' ')
            *p = '-';
    set_str(o, "nvidia.com/gpu.product", product);
    set_num(o, "nvidia.com/gpu.count", count);
    set_num(o, "nvidia.com/gpu.replicas", replicas);
    if (g->memory_mib)
        set_num(o, "nvidia.com/gpu.memory", (long long)g->memory_mib);
    if (g->cc_major) {
        json_object_set_new(o, "nvidia.com/gpu.family",
                            json_string(arch_family(g->cc_major, g->cc_minor)));
        set_num(o, "nvidia.com/gpu.compute.major", g->cc_major);
        set_num(o, "nvidia.com/gpu.compute.minor", g->cc_minor);
    }
    json_object_set_new(o, "nvidia.com/gpu.sharing-strategy", json_string(nv_strategy));
    json_object_set_new(o, "gpuvisor.io/gpu.sharing-mode",
                        json_string(gv_inventory_mode_name(g->mode)));
    strategy_labels(o, inv, strategy);
    return o;
}
