/*
 * CDI: the spec gv_cdi_spec builds for GPUs and MIG devices on a fake
 * driver root (stand-in host: tests/fakes/make-driver-root.sh), read back by
 * a strict CDI 0.5.0 reader written from the spec (SPEC.md of
 * cncf-tags/container-device-interface): every field must be one the
 * version defines, with its type; names and kinds as the spec allows;
 * every host path present on the fake host; device names resolve.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "node/discovery/gv_cdi.h"

static char root[512];

/* ---- a CDI 0.5.0 reader -------------------------------------------------- */

static bool only_keys(json_t *o, const char *const *keys, size_t n, const char *where)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        bool known = false;
        for (size_t i = 0; i < n; i++)
            known |= strcmp(k, keys[i]) == 0;
        if (!known) {
            print_error("%s: field '%s' is not in CDI " GV_CDI_VERSION "\n", where, k);
            return false;
        }
    }
    return true;
}
#define ONLY(o, where, ...)                                                                        \
    only_keys(o, (const char *const[]){__VA_ARGS__},                                               \
              sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *), where)

/*
 * CDI names: alphanumeric at both ends, [A-Za-z0-9_.-] between; device
 * names may also hold ':' between (the reference parser's
 * ValidateDeviceName; nvidia-ctk's MIG names "<gpu>:<mig>").
 */
static bool name_ok(const char *s, bool colon)
{
    size_t n = strlen(s);
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && ((i == 0 || i == n - 1) ||
                       (c != '-' && c != '_' && c != '.' && !(colon && c == ':'))))
            return false;
    }
    return true;
}

static bool abs_string(json_t *v) { return json_is_string(v) && json_string_value(v)[0] == '/'; }

static bool host_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

static bool check_edits(json_t *e, const char *where)
{
    if (!json_is_object(e) || !ONLY(e, where, "env", "deviceNodes", "hooks", "mounts"))
        return false;
    size_t i;
    json_t *x;
    json_t *env = json_object_get(e, "env");
    if (env && !json_is_array(env))
        return false;
    json_array_foreach(env, i, x) if (!json_is_string(x) || !strchr(json_string_value(x), '='))
        return false;
    json_t *nodes = json_object_get(e, "deviceNodes");
    if (nodes && !json_is_array(nodes))
        return false;
    json_array_foreach(nodes, i, x) {
        if (!json_is_object(x) ||
            !ONLY(x, where, "path", "hostPath", "type", "major", "minor", "fileMode",
                  "permissions", "uid", "gid") ||
            !abs_string(json_object_get(x, "path")))
            return false;
        json_t *hp = json_object_get(x, "hostPath");
        const char *host = hp ? json_string_value(hp) : json_string_value(json_object_get(x, "path"));
        if ((hp && !abs_string(hp)) || !host_exists(host)) {
            print_error("%s: device node %s missing on the host\n", where, host ? host : "?");
            return false;
        }
        json_t *perm = json_object_get(x, "permissions");
        if (perm && (!json_is_string(perm) ||
                     strspn(json_string_value(perm), "rwm") != strlen(json_string_value(perm))))
            return false;
        for (const char *const *k = (const char *const[]){"major", "minor", "fileMode", "uid", "gid", NULL}; *k; k++)
            if (json_object_get(x, *k) && !json_is_integer(json_object_get(x, *k)))
                return false;
    }
    json_t *mounts = json_object_get(e, "mounts");
    if (mounts && !json_is_array(mounts))
        return false;
    json_array_foreach(mounts, i, x) {
        if (!json_is_object(x) || !ONLY(x, where, "hostPath", "containerPath", "type", "options") ||
            !abs_string(json_object_get(x, "hostPath")) ||
            !abs_string(json_object_get(x, "containerPath")))
            return false;
        if (!host_exists(json_string_value(json_object_get(x, "hostPath")))) {
            print_error("%s: mount source %s missing on the host\n", where,
                        json_string_value(json_object_get(x, "hostPath")));
            return false;
        }
        json_t *opts = json_object_get(x, "options"), *o;
        size_t j;
        if (opts && !json_is_array(opts))
            return false;
        json_array_foreach(opts, j, o) if (!json_is_string(o)) return false;
    }
    json_t *hooks = json_object_get(e, "hooks");
    if (hooks && !json_is_array(hooks))
        return false;
    json_array_foreach(hooks, i, x) {
        static const char *const names[] = {"prestart", "createRuntime", "createContainer",
                                            "startContainer", "poststart", "poststop"};
        const char *hn = json_string_value(json_object_get(x, "hookName"));
        bool ok = false;
        for (size_t k = 0; hn && k < sizeof(names) / sizeof(names[0]); k++)
            ok |= strcmp(hn, names[k]) == 0;
        if (!ok || !ONLY(x, where, "hookName", "path", "args", "env", "timeout") ||
            !abs_string(json_object_get(x, "path")))
            return false;
    }
    return true;
}

/* Whole-spec validation; false with a message printed. */
static bool cdi_valid(json_t *spec)
{
    if (!json_is_object(spec) || !ONLY(spec, "spec", "cdiVersion", "kind", "devices", "containerEdits"))
        return false;
    if (!json_is_string(json_object_get(spec, "cdiVersion")) ||
        strcmp(json_string_value(json_object_get(spec, "cdiVersion")), GV_CDI_VERSION) != 0)
        return false;
    const char *kind = json_string_value(json_object_get(spec, "kind"));
    const char *slash = kind ? strchr(kind, '/') : NULL;
    /* vendor (DNS subdomain) / class (a CDI name without dots before 0.6.0) */
    if (!slash || slash == kind || strchr(slash + 1, '/') || !name_ok(slash + 1, false) ||
        strchr(slash + 1, '.'))
        return false;
    json_t *devs = json_object_get(spec, "devices");
    if (!json_is_array(devs) || json_array_size(devs) == 0)
        return false;
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        if (!json_is_object(d) || !ONLY(d, "device", "name", "containerEdits") || !name ||
            !name_ok(name, true)) {
            print_error("device %zu: bad name or fields\n", i);
            return false;
        }
        for (size_t k = 0; k < i; k++)
            if (strcmp(name, json_string_value(json_object_get(json_array_get(devs, k), "name"))) == 0)
                return false; /* duplicate device name */
        json_t *e = json_object_get(d, "containerEdits");
        if (!e || !check_edits(e, name)) /* required by the reference parser */
            return false;
    }
    json_t *e = json_object_get(spec, "containerEdits");
    return e == NULL || check_edits(e, "containerEdits");
}

/* "vendor/class=name" -> the device's edits, or NULL. */
static json_t *resolve(json_t *spec, const char *qualified)
{
    const char *eq = strchr(qualified, '=');
    const char *kind = json_string_value(json_object_get(spec, "kind"));
    if (!eq || !kind || strlen(kind) != (size_t)(eq - qualified) || strncmp(kind, qualified, (size_t)(eq - qualified)))
        return NULL;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(spec, "devices"), i, d)
        if (strcmp(json_string_value(json_object_get(d, "name")), eq + 1) == 0)
            return json_object_get(d, "containerEdits");
    return NULL;
}

/* ---- fixtures ------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("GV_TEST_TMP");
    snprintf(root, sizeof(root), "%s/gv-cdi-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(root) == NULL)
        return -1;
    char cmd[1200];
    /* GPU 0 (minor 0) with MIG GI 1/CI 0 and GI 2/CI 0; GPU 1 whole */
    snprintf(cmd, sizeof(cmd),
             "tests/fakes/make-driver-root.sh %s 550.54.15 2 'config 1' 'monitor 2' "
             "'gpu0/gi1/access 21' 'gpu0/gi1/ci0/access 22' 'gpu0/gi2/access 30' "
             "'gpu0/gi2/ci0/access 31'",
             root);
    return system(cmd) == 0 ? 0 : -1;
}

static void gpus(struct gv_gpu g[2])
{
    memset(g, 0, 2 * sizeof(*g));
    for (unsigned i = 0; i < 2; i++) {
        g[i].index = g[i].minor = i;
        snprintf(g[i].uuid, sizeof(g[i].uuid), "GPU-0000000%u-0000-4000-8000-000000000000", i);
    }
    g[0].mig = true;
    g[0].n_migs = 2;
    snprintf(g[0].migs[0].uuid, 96, "MIG-aaaaaaaa-0000-4000-8000-000000000001");
    snprintf(g[0].migs[0].profile, 32, "1g.5gb");
    g[0].migs[0].gi = 1;
    snprintf(g[0].migs[1].uuid, 96, "MIG-aaaaaaaa-0000-4000-8000-000000000002");
    snprintf(g[0].migs[1].profile, 32, "3g.20gb");
    g[0].migs[1].gi = 2;
}

static bool has_mount(json_t *edits, const char *ctr_suffix)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(edits, "mounts"), i, m) {
        const char *c = json_string_value(json_object_get(m, "containerPath"));
        size_t n = strlen(c), s = strlen(ctr_suffix);
        if (n >= s && strcmp(c + n - s, ctr_suffix) == 0)
            return true;
    }
    return false;
}

static bool has_node(json_t *edits, const char *path)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(edits, "deviceNodes"), i, m)
        if (strcmp(json_string_value(json_object_get(m, "path")), path) == 0)
            return true;
    return false;
}

/* discovery refused with code and a message holding text, nothing handed back */
static void refused(const char *r, const char *host, const char *version, gv_status code,
                    const char *text)
{
    struct gv_cdi_host *h = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_cdi_discover(r, host, version, &h, &err), code);
    assert_null(h);
    if (text != NULL && strstr(err.msg, text) == NULL)
        fail_msg("\"%s\" not in \"%s\"", text, err.msg);
}

static void test_cdi_discovery_fake_driver_root(void **state)
{
    (void)state;
    struct gv_cdi_host *h = NULL;
    struct gv_error err;
    assert_int_equal(gv_cdi_discover(root, NULL, "550.54.15", &h, &err), GV_OK);
    /* 7 libraries x (versioned + soname); the old driver's, the 32-bit and the graphics one skipped */
    assert_int_equal(h->n_libs, 14);
    for (size_t i = 0; i < h->n_libs; i++) {
        assert_null(strstr(h->libs[i].host, "470.00.01"));
        assert_null(strstr(h->libs[i].host, "i386"));
        assert_null(strstr(h->libs[i].host, "glcore"));
    }
    assert_int_equal(h->n_bins, 5);
    assert_int_equal(h->n_ctl, 4);
    gv_cdi_host_free(h);
    /* a version with no libcuda: refused with the reason, nothing returned */
    refused(root, NULL, "999.1", GV_ENOTFOUND, "libcuda.so.999.1");
    /* an older driver's leftover libcuda alone: no NVML beside it, refused as well */
    refused(root, NULL, "470.00.01", GV_ENOTFOUND, "libnvidia-ml.so.470.00.01");
}

/* The version (NVML's driver version) becomes part of every library path: none, an empty
 * one or one with a '/' ("550.54.15/../../x" would look outside the library directories)
 * is refused before any lookup; a driver root that cannot fit its buffer is refused whole,
 * not cut (a cut root names other files), as the agent's or the host's. */
static void test_cdi_discovery_refuses_bad_input(void **state)
{
    (void)state;
    struct gv_cdi_host *h = NULL;
    struct gv_error err;
    static const char *const versions[] = {"", "550.54.15/../../../x", "/550.54.15"};
    refused(root, NULL, NULL, GV_EINVAL, "driver version");
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
        refused(root, NULL, versions[i], GV_EINVAL, "driver version");
    char lng[sizeof(h->root) + 2];
    memset(lng, 'r', sizeof(lng) - 1);
    lng[0] = '/';
    lng[sizeof(lng) - 1] = '\0';
    for (size_t len = sizeof(h->root); len <= sizeof(h->root) + 1; len++) {
        lng[len] = '\0';
        refused(lng, NULL, "550.54.15", GV_EINVAL, "longer than 255");
        refused(root, lng, "550.54.15", GV_EINVAL, "longer than 255");
        refused(lng, root, "550.54.15", GV_EINVAL, "longer than 255");
        lng[len] = 'r';
    }
    /* the longest that fits is taken (and, naming nothing, finds no driver) */
    lng[sizeof(h->root) - 1] = '\0';
    assert_int_equal(gv_cdi_discover(root, lng, "550.54.15", &h, &err), GV_OK);
    assert_string_equal(h->host_root, lng);
    gv_cdi_host_free(h);
    refused(lng, NULL, "550.54.15", GV_ENOTFOUND, NULL);
}

static void test_cdi_spec_valid_and_resolves(void **state)
{
    (void)state;
    struct gv_cdi_host *h = NULL;
    struct gv_error err;
    assert_int_equal(gv_cdi_discover(root, NULL, "550.54.15", &h, &err), GV_OK);
    struct gv_gpu g[2];
    gpus(g);
    char lib[700], preload[700];
    snprintf(lib, sizeof(lib), "%s/usr/bin/nvidia-smi", root); /* any existing file stands in */
    snprintf(preload, sizeof(preload), "%s/dev/nvidiactl", root);
    struct gv_cdi_interposer ip = {.lib = lib, .preload = preload};
    json_t *spec = gv_cdi_spec("nvidia.com/gpu", h, g, 2, &ip, &err);
    assert_non_null(spec);
    assert_true(cdi_valid(spec));
    /* GPU by index and UUID: its node; MIG by uuid and gpu:mig index: parent node + caps */
    json_t *e = resolve(spec, "nvidia.com/gpu=GPU-00000001-0000-4000-8000-000000000000");
    assert_non_null(e);
    assert_true(has_node(e, "/dev/nvidia1"));
    assert_non_null(resolve(spec, "nvidia.com/gpu=1"));
    e = resolve(spec, "nvidia.com/gpu=MIG-aaaaaaaa-0000-4000-8000-000000000002");
    assert_non_null(e);
    assert_true(has_node(e, "/dev/nvidia0"));
    assert_true(has_node(e, "/dev/nvidia-caps/nvidia-cap30"));
    assert_true(has_node(e, "/dev/nvidia-caps/nvidia-cap31"));
    assert_false(has_node(e, "/dev/nvidia-caps/nvidia-cap21"));
    assert_non_null(resolve(spec, "nvidia.com/gpu=0:0"));
    assert_non_null(resolve(spec, "nvidia.com/gpu=all"));
    assert_null(resolve(spec, "nvidia.com/gpu=7"));
    assert_null(resolve(spec, "other.com/gpu=0"));
    e = resolve(spec, "nvidia.com/gpu=gpuvisor");
    assert_true(has_mount(e, "/etc/ld.so.preload") && has_mount(e, "libgpuvisor.so"));
    /* common edits: control nodes, libraries under their soname, tools */
    json_t *c = json_object_get(spec, "containerEdits");
    assert_true(has_node(c, "/dev/nvidiactl") && has_node(c, "/dev/nvidia-uvm") &&
                has_node(c, "/dev/nvidia-uvm-tools"));
    assert_true(has_mount(c, "/libcuda.so.1") && has_mount(c, "/libcuda.so.550.54.15") &&
                has_mount(c, "/libnvidia-ml.so.1") &&
                has_mount(c, "/libnvidia-ptxjitcompiler.so.1") && has_mount(c, "/nvidia-smi"));
    /* without the interposer (none given, or no library): no "gpuvisor" device */
    struct gv_cdi_interposer none = {.lib = NULL, .preload = preload};
    for (int k = 0; k < 2; k++) {
        json_t *bare = gv_cdi_spec("nvidia.com/gpu", h, g, 2, k ? &none : NULL, &err);
        assert_non_null(bare);
        assert_true(cdi_valid(bare));
        assert_null(resolve(bare, "nvidia.com/gpu=gpuvisor"));
        assert_non_null(resolve(bare, "nvidia.com/gpu=0:0"));
        json_decref(bare);
    }
    /* the reader is strict: a field from a later CDI version is refused */
    json_object_set_new(spec, "annotations", json_object());
    assert_false(cdi_valid(spec));
    json_decref(spec);
    gv_cdi_host_free(h);
}

static void test_cdi_write_atomic(void **state)
{
    (void)state;
    char dir[700], path[800];
    snprintf(dir, sizeof(dir), "%s/var-run-cdi", root);
    json_t *spec = json_pack("{s:s}", "cdiVersion", GV_CDI_VERSION);
    struct gv_error err;
    /* 0644 whatever the agent's umask: the runtime reads the spec as any user */
    mode_t old_mask = umask(077);
    assert_int_equal(gv_cdi_write(dir, "gpuvisor-gpu.json", spec, &err), GV_OK);
    umask(old_mask);
    snprintf(path, sizeof(path), "%s/gpuvisor-gpu.json", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    json_t *back = json_load_file(path, 0, NULL);
    assert_true(json_equal(back, spec));
    json_decref(back);
    /* a bad name is refused; an unwritable directory leaves the old spec whole */
    assert_int_equal(gv_cdi_write(dir, "../x.json", spec, &err), GV_EINVAL);
    if (geteuid() != 0) {
        chmod(dir, 0555);
        json_t *other = json_pack("{s:s}", "cdiVersion", "9.9.9");
        assert_int_equal(gv_cdi_write(dir, "gpuvisor-gpu.json", other, &err), GV_EIO);
        json_decref(other);
        chmod(dir, 0755);
        back = json_load_file(path, 0, NULL);
        assert_true(json_equal(back, spec));
        json_decref(back);
    }
    /* the directory exists (the runtime's /var/run/cdi, a restarted agent's own): written
     * over, as any user */
    json_t *next = json_pack("{s:s,s:s}", "cdiVersion", GV_CDI_VERSION, "kind", "a/b");
    assert_int_equal(gv_cdi_write(dir, "gpuvisor-gpu.json", next, &err), GV_OK);
    back = json_load_file(path, 0, NULL);
    assert_true(json_equal(back, next));
    json_decref(back);
    /* a failed write says it was the CDI spec (root too: a directory where the file goes) */
    char sub[900];
    snprintf(sub, sizeof(sub), "%s/taken.json", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_not_equal(gv_cdi_write(dir, "taken.json", next, &err), GV_OK);
    assert_true(strncmp(err.msg, "CDI", 3) == 0);
    assert_int_equal(rmdir(sub), 0);
    /* a directory that cannot be made: EIO, naming it */
    snprintf(sub, sizeof(sub), "%s/gpuvisor-gpu.json/cdi", dir);
    assert_int_equal(gv_cdi_write(sub, "x.json", next, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "cannot create"));
    json_decref(next);
    json_decref(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cdi_discovery_fake_driver_root),
        cmocka_unit_test(test_cdi_discovery_refuses_bad_input),
        cmocka_unit_test(test_cdi_spec_valid_and_resolves),
        cmocka_unit_test(test_cdi_write_atomic),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
