/* CDI spec and driver discovery: see gv_cdi.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/gv_file.h"
#include "node/discovery/gv_cdi.h"

/*
 * libnvidia-container's compute and utility libraries (graphics, video and
 * display ones are not needed for CUDA and are left out, as with its default
 * NVIDIA_DRIVER_CAPABILITIES=compute,utility).
 */
static const char *const driver_libs[] = {
    "libcuda",          "libcudadebugger",       "libnvidia-ml",      "libnvidia-cfg",
    "libnvidia-opencl", "libnvidia-ptxjitcompiler", "libnvidia-fatbinaryloader",
    "libnvidia-allocator", "libnvidia-compiler", "libnvidia-nvvm",   "libnvidia-gpucomp",
    "libnvidia-pkcs11", "libnvidia-pkcs11-openssl3",
};
static const char *const driver_bins[] = {
    "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
};
/* 64-bit library directories, searched in this order (first match wins). */
static const char *const lib_dirs[] = {
    "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/lib64",     "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu", "/usr/lib",
};
static const char *const bin_dirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin"};
static const char *const ctl_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                        "nvidia-modeset"};

static bool is_file(const char *path, bool exec)
{
    struct stat st;
    if (stat(path, &st) != 0 || S_ISDIR(st.st_mode))
        return false;
    return !exec || (st.st_mode & 0111);
}

static bool add(struct gv_cdi_file **v, size_t *n, const char *host, const char *ctr)
{
    struct gv_cdi_file *nv = realloc(*v, (*n + 1) * sizeof(**v));
    if (nv == NULL)
        return false;
    *v = nv;
    snprintf(nv[*n].host, sizeof(nv[*n].host), "%s", host);
    snprintf(nv[*n].ctr, sizeof(nv[*n].ctr), "%s", ctr);
    (*n)++;
    return true;
}

void gv_cdi_host_free(struct gv_cdi_host *h)
{
    if (h == NULL)
        return;
    free(h->libs);
    free(h->bins);
    free(h);
}

void gv_cdi_host_path(const struct gv_cdi_host *h, const char *found, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s", h->host_root, found + strlen(h->root));
}

gv_status gv_cdi_discover(const char *driver_root, const char *host_driver_root,
                          const char *version, struct gv_cdi_host **out, struct gv_error *err)
{
    if (version == NULL || *version == '\0' || strchr(version, '/'))
        return gv_error_set(err, GV_EINVAL, "CDI: no driver version to match libraries with");
    struct gv_cdi_host *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return gv_error_set(err, GV_ENOMEM, "CDI: out of memory");
    if (host_driver_root == NULL)
        host_driver_root = driver_root;
    if ((driver_root && strlen(driver_root) >= sizeof(h->root)) ||
        (host_driver_root && strlen(host_driver_root) >= sizeof(h->root))) {
        free(h);
        return gv_error_set(err, GV_EINVAL, "CDI: driver root longer than %zu characters",
                            sizeof(h->root) - 1);
    }
    if (driver_root && strcmp(driver_root, "/") != 0)
        snprintf(h->root, sizeof(h->root), "%s", driver_root);
    if (host_driver_root && strcmp(host_driver_root, "/") != 0)
        snprintf(h->host_root, sizeof(h->host_root), "%s", host_driver_root);
    bool cuda = false, nvml = false;
    char path[480], ctr[480];
    for (size_t i = 0; i < sizeof(driver_libs) / sizeof(driver_libs[0]); i++)
        for (size_t d = 0; d < sizeof(lib_dirs) / sizeof(lib_dirs[0]); d++) {
            snprintf(path, sizeof(path), "%s%s/%s.so.%s", h->root, lib_dirs[d], driver_libs[i],
                     version);
            if (!is_file(path, false))
                continue;
            /* the versioned file, and its soname: no ldconfig hook needed in the container */
            snprintf(ctr, sizeof(ctr), GV_CDI_CTR_LIB "/%s.so.%s", driver_libs[i], version);
            bool ok = add(&h->libs, &h->n_libs, path, ctr);
            snprintf(ctr, sizeof(ctr), GV_CDI_CTR_LIB "/%s.so.1", driver_libs[i]);
            if (!ok || !add(&h->libs, &h->n_libs, path, ctr)) {
                gv_cdi_host_free(h);
                return gv_error_set(err, GV_ENOMEM, "CDI: out of memory");
            }
            cuda |= strcmp(driver_libs[i], "libcuda") == 0;
            nvml |= strcmp(driver_libs[i], "libnvidia-ml") == 0;
            break;
        }
    for (size_t i = 0; i < sizeof(driver_bins) / sizeof(driver_bins[0]); i++)
        for (size_t d = 0; d < sizeof(bin_dirs) / sizeof(bin_dirs[0]); d++) {
            snprintf(path, sizeof(path), "%s%s/%s", h->root, bin_dirs[d], driver_bins[i]);
            if (!is_file(path, true))
                continue;
            snprintf(ctr, sizeof(ctr), GV_CDI_CTR_BIN "/%s", driver_bins[i]);
            if (!add(&h->bins, &h->n_bins, path, ctr)) {
                gv_cdi_host_free(h);
                return gv_error_set(err, GV_ENOMEM, "CDI: out of memory");
            }
            break;
        }
    for (size_t i = 0; i < sizeof(ctl_nodes) / sizeof(ctl_nodes[0]); i++) {
        snprintf(path, sizeof(path), "%s/dev/%s", h->root, ctl_nodes[i]);
        if (access(path, F_OK) == 0)
            snprintf(h->ctl_nodes[h->n_ctl++], sizeof(h->ctl_nodes[0]), "%s", path);
    }
    if (!cuda || !nvml) {
        gv_error_set(err, GV_ENOTFOUND,
                     "CDI: %s.so.%.40s not found under %.200s (driver root or version wrong?)",
                     cuda ? "libnvidia-ml" : "libcuda", version, h->root[0] ? h->root : "/");
        gv_cdi_host_free(h);
        return err->code;
    }
    *out = h;
    return GV_OK;
}

void gv_cdi_gpu_node(const struct gv_cdi_host *h, const struct gv_gpu *g, char *out, size_t cap)
{
    snprintf(out, cap, "%s/dev/nvidia%u", h->root, g->minor);
}

/* The nvidia-caps minor of "gpu<minor>/gi<gi>[/ci<ci>]/access" in mig-minors; -1 none. */
static long cap_minor(const struct gv_cdi_host *h, const char *want)
{
    char path[700], line[256];
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia-caps/mig-minors", h->root);
    FILE *f = fopen(path, "r");
    long found = -1;
    while (f && found < 0 && fgets(line, sizeof(line), f)) {
        char name[200];
        long minor;
        if (sscanf(line, "%199s %ld", name, &minor) == 2 && strcmp(name, want) == 0 && minor >= 0)
            found = minor;
    }
    if (f)
        fclose(f);
    return found;
}

size_t gv_cdi_mig_nodes(const struct gv_cdi_host *h, const struct gv_gpu *g,
                        const struct gv_mig *m, char out[2][512])
{
    char want[128];
    size_t n = 0;
    snprintf(want, sizeof(want), "gpu%u/gi%u/access", g->minor, m->gi);
    long gi = cap_minor(h, want);
    snprintf(want, sizeof(want), "gpu%u/gi%u/ci%u/access", g->minor, m->gi, m->ci);
    long ci = cap_minor(h, want);
    if (gi >= 0)
        snprintf(out[n++], 512, "%.255s/dev/nvidia-caps/nvidia-cap%ld", h->root, gi);
    if (ci >= 0)
        snprintf(out[n++], 512, "%.255s/dev/nvidia-caps/nvidia-cap%ld", h->root, ci);
    return n;
}

/* A deviceNodes entry: path as the container sees it, hostPath when the driver root moves it. */
static json_t *node(const struct gv_cdi_host *h, const char *found)
{
    const char *ctr = found + strlen(h->root);
    char host[600];
    gv_cdi_host_path(h, found, host, sizeof(host));
    json_t *o = json_pack("{s:s}", "path", ctr);
    if (o && strcmp(host, ctr) != 0)
        json_object_set_new(o, "hostPath", json_string(host));
    return o;
}

static json_t *mount_host(const char *host, const char *ctr)
{
    return json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", host, "containerPath", ctr, "options",
                     "ro", "nosuid", "nodev", "bind");
}

/* A driver file found under h->root, mounted read-only. */
static json_t *mount(const struct gv_cdi_host *h, const char *found, const char *ctr)
{
    char host[600];
    gv_cdi_host_path(h, found, host, sizeof(host));
    return mount_host(host, ctr);
}

static json_t *device(const char *name, json_t *nodes)
{
    return json_pack("{s:s,s:{s:o}}", "name", name, "containerEdits", "deviceNodes", nodes);
}

json_t *gv_cdi_spec(const char *kind, const struct gv_cdi_host *h, const struct gv_gpu *gpus,
                    size_t n, const struct gv_cdi_interposer *ip, struct gv_error *err)
{
    json_t *devs = json_array(), *all = json_array(), *common_nodes = json_array(),
           *mounts = json_array();
    json_t *spec = NULL;
    char path[600], caps[2][512], name[160];
    if (!devs || !all || !common_nodes || !mounts)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        const struct gv_gpu *g = &gpus[i];
        gv_cdi_gpu_node(h, g, path, sizeof(path));
        /* by index and by UUID, as nvidia-ctk's default device-name strategies */
        snprintf(name, sizeof(name), "%u", g->index);
        if (json_array_append_new(devs, device(name, json_pack("[o]", node(h, path)))) ||
            json_array_append_new(devs, device(g->uuid, json_pack("[o]", node(h, path)))) ||
            json_array_append_new(all, node(h, path)))
            goto nomem;
        for (unsigned k = 0; k < g->n_migs; k++) {
            const struct gv_mig *m = &g->migs[k];
            json_t *nodes = json_pack("[o]", node(h, path));
            size_t nc = gv_cdi_mig_nodes(h, g, m, caps);
            for (size_t c = 0; nodes && c < nc; c++) {
                json_array_append_new(nodes, node(h, caps[c]));
                json_array_append_new(all, node(h, caps[c]));
            }
            snprintf(name, sizeof(name), "%u:%u", g->index, k);
            if (nodes == NULL ||
                json_array_append_new(devs, device(name, json_deep_copy(nodes))) ||
                json_array_append_new(devs, device(m->uuid, nodes)))
                goto nomem;
        }
    }
    if (json_array_append_new(devs, device("all", all)))
        goto nomem;
    all = NULL;
    if (ip && ip->lib) {
        json_t *im = json_array();
        if (im == NULL || json_array_append_new(im, mount_host(ip->lib, GV_NODE_LIB_PATH)) ||
            (ip->preload && json_array_append_new(im, mount_host(ip->preload, GV_NODE_PRELOAD_PATH))) ||
            json_array_append_new(devs, json_pack("{s:s,s:{s:o}}", "name", "gpuvisor",
                                                  "containerEdits", "mounts", im)))
            goto nomem;
    }
    for (size_t i = 0; i < h->n_ctl; i++)
        if (json_array_append_new(common_nodes, node(h, h->ctl_nodes[i])))
            goto nomem;
    for (size_t i = 0; i < h->n_libs; i++)
        if (json_array_append_new(mounts, mount(h, h->libs[i].host, h->libs[i].ctr)))
            goto nomem;
    for (size_t i = 0; i < h->n_bins; i++)
        if (json_array_append_new(mounts, mount(h, h->bins[i].host, h->bins[i].ctr)))
            goto nomem;
    spec = json_pack("{s:s,s:s,s:o,s:{s:[s],s:o,s:o}}", "cdiVersion", GV_CDI_VERSION, "kind",
                     kind, "devices", devs, "containerEdits", "env", "NVIDIA_VISIBLE_DEVICES=void",
                     "deviceNodes", common_nodes, "mounts", mounts);
    if (spec == NULL) {
        gv_error_set(err, GV_ENOMEM, "CDI: out of memory");
        json_decref(all);
        return NULL;
    }
    return spec;
nomem:
    json_decref(devs);
    json_decref(all);
    json_decref(common_nodes);
    json_decref(mounts);
    gv_error_set(err, GV_ENOMEM, "CDI: out of memory");
    return NULL;
}

gv_status gv_cdi_write(const char *dir, const char *file, const json_t *spec,
                       struct gv_error *err)
{
    if (strchr(file, '/') || file[0] == '.' || file[0] == '\0')
        return gv_error_set(err, GV_EINVAL, "CDI: bad spec file name '%s'", file);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return gv_error_set(err, GV_EIO, "CDI: cannot create %s: %s", dir, strerror(errno));
    char dst[1100];
    snprintf(dst, sizeof(dst), "%s/%s", dir, file);
    char *text = json_dumps(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text == NULL)
        return gv_error_set(err, GV_ENOMEM, "CDI: out of memory");
    /*
     * The common atomic write (temp file beside it, fsync, rename, fsync of
     * the directory): runtimes never read half a spec and a spec written
     * survives a crash.  Its temporary name ends in ".tmp.<pid>", which CDI
     * readers (*.json, *.yaml only) skip.  0644 exactly: runtimes read specs
     * as any user may.
     */
    gv_status st = gv_file_write_atomic(dst, text, strlen(text), 0644, err);
    free(text);
    if (st != GV_OK)
        gv_error_prefix(err, "CDI");
    return st;
}
