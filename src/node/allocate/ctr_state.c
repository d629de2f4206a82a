/*
 * A container's state on disk (see answer_internal.h; docs/node-agent.md,
 * "Allocate state machine"): its runtime directory and shared region, the
 * limits file, and the Allocate records (answer, promise) that make a
 * repeated Allocate get the same bytes back and let a restarted agent know
 * what it served.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/gv_file.h"
#include "common/gv_log.h"
#include "node/modes/answer_internal.h"
#include "shm/gv_shm.h"

/*
 * A directory the interposer writes into as whatever user the container
 * runs as (sticky, like /tmp: nobody removes another tenant's files).
 */
gv_status gv_ctr_shared_dir(const char *path, struct gv_error *err)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return gv_error_set(err, GV_EIO, "cannot create %s: %s", path, strerror(errno));
    if (chmod(path, 01777) != 0)
        return gv_error_set(err, GV_EIO, "cannot chmod %s: %s", path, strerror(errno));
    return GV_OK;
}

/*
 * Creates <state>/<top>/<uid>/<ctr>/ (parents 0755) into path: under
 * "containers" the container's writable runtime directory (sticky 1777,
 * the interposer creates its shared region there as whatever user the
 * container runs as), under "limits" the agent's own directory (0755:
 * limits file and Allocate records, never mounted writable).
 */
gv_status gv_ctr_dir(const char *state_dir, const char *top, const char *uid, const char *ctr,
                     char *path, size_t cap, struct gv_error *err)
{
    const char *parts[] = {top, uid, ctr};
    snprintf(path, cap, "%s", state_dir);
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(path);
        snprintf(path + l, cap - l, "/%s", parts[i]);
        if (i == 2 && strcmp(top, "containers") == 0)
            return gv_ctr_shared_dir(path, err);
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return gv_error_set(err, GV_EIO, "cannot create %s: %s", path, strerror(errno));
    }
    return GV_OK;
}

/*
 * The container's shared region, made here (initialised, world-writable:
 * the container's processes of any uid account in it) and bind-mounted as a
 * file of its own (add_interposer), so a tenant can write it but never
 * unlink or replace it: a region deleted inside the container let processes
 * started later begin with a fresh, full limit (docs/isolation.md).
 * An existing region (a repeated Allocate) is kept.
 */
static gv_status make_region(const char *dir, struct gv_error *err)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/" GV_SHM_REGION_FILE, dir);
    struct gv_shm *shm = NULL;
    gv_status st = gv_shm_open(path, GV_SHM_CREATE, &shm, err);
    if (st != GV_OK)
        return st;
    gv_shm_close(shm);
    if (chmod(path, 0666) != 0)
        return gv_error_set(err, GV_EIO, "cannot make %s writable for the container: %s", path,
                            strerror(errno));
    return GV_OK;
}

gv_status gv_ctr_runtime(const char *state_dir, const char *uid, const char *ctr,
                         struct gv_error *err)
{
    char path[4200], region[4300];
    struct stat st;
    gv_status rc = gv_ctr_dir(state_dir, "containers", uid, ctr, path, sizeof(path), err);
    if (rc != GV_OK)
        return rc;
    /* an existing region holds live charges: kept as it is, never
     * reopened (lstat: a name there of any kind is not replaced) */
    snprintf(region, sizeof(region), "%s/" GV_SHM_REGION_FILE, path);
    if (lstat(region, &st) == 0)
        return GV_OK;
    return make_region(path, err);
}

/*
 * Creates the runtime directory and the limits file.  With limits (the
 * interposer is injected) also makes sure the node-wide priority directory
 * exists: the container runtime fails the container if a mount source is
 * missing, and someone may have removed it since the agent started.
 */
gv_status gv_ctr_prepare(const char *state_dir, const char *node_dir, const char *uid,
                         const char *ctr, bool with_limits, const char *limits, size_t len,
                         struct gv_error *err)
{
    char path[4200];
    if (!with_limits)
        return GV_OK; /* nothing mounted: only the answer record (gv_ctr_write_answer) */
    gv_status st = gv_ctr_dir(state_dir, "containers", uid, ctr, path, sizeof(path), err);
    if (st == GV_OK)
        st = make_region(path, err);
    if (st == GV_OK)
        st = gv_ctr_shared_dir(node_dir, err);
    if (st == GV_OK)
        st = gv_ctr_dir(state_dir, "limits", uid, ctr, path, sizeof(path), err);
    if (st != GV_OK)
        return st;
    size_t l = strlen(path);
    snprintf(path + l, sizeof(path) - l, "/limits.env");
    return gv_file_write_atomic(path, limits ? limits : "", len, 0644, err);
}

/* ---- Allocate records ------------------------------------------------------- */

#define REC_MAGIC "gpuvisor-allocate v1\n"

/*
 * <state>/limits/<uid>/<ctr>/answer: written (atomically, fsync) after the
 * limits file and before the reply; it holds the packed answer, so a repeat
 * of the same request gets the same bytes back whatever changed since.
 */
gv_status gv_ctr_write_answer(const char *state_dir, const char *uid, const char *ns,
                              const char *name, const char *ctr, unsigned n_total,
                              const char *key, const V1beta1__ContainerAllocateResponse *resp,
                              struct gv_error *err)
{
    char path[4300];
    gv_status st = gv_ctr_dir(state_dir, "limits", uid, ctr, path, sizeof(path), err);
    if (st != GV_OK)
        return st;
    size_t n = v1beta1__container_allocate_response__get_packed_size(resp);
    uint8_t *bin = malloc(n + 1);
    size_t cap = strlen(ns) + strlen(name) + strlen(key) + 2 * n + 128;
    char *text = malloc(cap);
    if (bin == NULL || text == NULL) {
        free(bin);
        free(text);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    v1beta1__container_allocate_response__pack(resp, bin);
    int len = snprintf(text, cap, REC_MAGIC "ns=%s\nname=%s\ncontainers=%u\nids=%s\nresp=", ns,
                       name, n_total, key);
    for (size_t i = 0; i < n; i++)
        len += snprintf(text + len, cap - (size_t)len, "%02x", bin[i]);
    len += snprintf(text + len, cap - (size_t)len, "\n");
    free(bin);
    size_t l = strlen(path);
    snprintf(path + l, sizeof(path) - l, "/answer");
    st = gv_file_write_atomic(path, text, (size_t)len, 0600, err);
    free(text);
    if (st == GV_OK) { /* the answer supersedes the promise */
        snprintf(path + l, sizeof(path) - l, "/promise");
        unlink(path);
    }
    return st;
}

/*
 * <state>/limits/<uid>/<ctr>/promise: the IDs GetPreferredAllocation chose.
 * Written without fsync (GetPreferredAllocation should stay quick): what it protects against
 * is the agent being killed (the page cache survives), and after a node
 * crash the kubelet starts over too.
 */
void gv_ctr_write_promise(const char *state_dir, const char *uid, const char *ns,
                          const char *name, const char *ctr, const char *key)
{
    char path[4300], tmp[4400];
    struct gv_error err;
    if (gv_ctr_dir(state_dir, "limits", uid, ctr, path, sizeof(path), &err) != GV_OK) {
        gv_warn("GetPreferredAllocation: %s (the promise lives in memory only)", err.msg);
        return;
    }
    size_t l = strlen(path);
    snprintf(path + l, sizeof(path) - l, "/promise");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "we");
    bool ok = f && fprintf(f, REC_MAGIC "ns=%s\nname=%s\nids=%s\n", ns, name, key) > 0;
    ok = (f && fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        gv_warn("GetPreferredAllocation: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}


/* A temporary file of ours: "<record>.tmp" (the promise) or "<record>.tmp.<pid>"
 * (gv_file_write_atomic), record being one this file writes. */
static bool is_our_tmp(const char *name)
{
    static const char *const records[] = {"answer", "limits.env", "promise"};
    for (size_t i = 0; i < sizeof(records) / sizeof(records[0]); i++) {
        size_t l = strlen(records[i]);
        if (strncmp(name, records[i], l) != 0 || strncmp(name + l, ".tmp", 4) != 0)
            continue;
        const char *p = name + l + 4;
        if (*p == '\0')
            return true;
        if (*p++ != '.' || *p == '\0')
            continue;
        while (*p >= '0' && *p <= '9')
            p++;
        if (*p == '\0')
            return true;
    }
    return false;
}

/*
 * A writer killed between writing its temporary file and renaming it
 * (SIGKILL, OOM, a node crash) leaves the file behind; nothing else ever
 * removes it while the pod lives.  Called at start-up, before this process
 * writes anything, so every temporary file found is a dead writer's.
 */
unsigned gv_ctr_sweep_tmp(const char *state_dir, const char *uid, const char *ctr)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/limits/%s/%s", state_dir, uid, ctr);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_our_tmp(e->d_name))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            n++;
        else
            gv_warn("cannot remove %s/%s: %s", path, e->d_name, strerror(errno));
    }
    closedir(d);
    if (n > 0)
        gv_info("removed %u temporary file(s) a killed writer left in %s", n, path);
    return n;
}

bool gv_ctr_value_ok(const char *v, const char *extra)
{
    if (*v == '\0')
        return false;
    for (; *v; v++)
        if (!((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') || (*v >= '0' && *v <= '9') ||
              strchr(extra, *v)))
            return false;
    return true;
}

/* Parses a record in place; false when it is not a complete one (a torn or foreign file). */
static bool parse_rec(char *text, struct gv_ctr_rec *r)
{
    memset(r, 0, sizeof(*r));
    r->containers = -1;
    if (strncmp(text, REC_MAGIC, strlen(REC_MAGIC)) != 0)
        return false;
    for (char *line = text + strlen(REC_MAGIC); *line;) {
        char *nl = strchr(line, '\n'), *eq = strchr(line, '=');
        if (nl == NULL || eq == NULL || eq > nl)
            return false;
        *nl = *eq = '\0';
        const char *k = line, *v = eq + 1;
        if (strcmp(k, "ns") == 0 && gv_ctr_value_ok(v, "-."))
            r->ns = v;
        else if (strcmp(k, "name") == 0 && gv_ctr_value_ok(v, "-."))
            r->name = v;
        else if (strcmp(k, "ids") == 0 && gv_ctr_value_ok(v, "-_.:/,"))
            r->ids = v;
        else if (strcmp(k, "resp") == 0 && strlen(v) % 2 == 0 && strspn(v, "0123456789abcdef") == strlen(v))
            r->resp = v;
        else if (strcmp(k, "containers") == 0 && gv_ctr_value_ok(v, "") && strlen(v) < 4)
            r->containers = atol(v);
        else
            return false;
        line = nl + 1;
    }
    return r->ns && r->name && r->ids && strlen(r->ns) < 64 && strlen(r->name) < 254;
}

/* Reads <state>/limits/<uid>/<ctr>/<file>; *text to free; false when absent or not a record. */
bool gv_ctr_read_rec(const char *state_dir, const char *uid, const char *ctr, const char *file,
                     char **text, struct gv_ctr_rec *r)
{
    char path[4400];
    size_t len;
    struct gv_error err;
    snprintf(path, sizeof(path), "%s/limits/%s/%s/%s", state_dir, uid, ctr, file);
    *text = NULL;
    if (gv_file_read_all(path, text, &len, &err) != GV_OK)
        return false;
    if (len > (1u << 20) || strlen(*text) != len || !parse_rec(*text, r)) {
        gv_warn("ignoring %s: not a complete Allocate record", path);
        free(*text);
        *text = NULL;
        return false;
    }
    return true;
}

static int hexval(char c)
{
    return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* Fills resp (empty, initialised) with the answer stored in the record. */
gv_status gv_ctr_load_answer(const struct gv_ctr_rec *r, V1beta1__ContainerAllocateResponse *resp,
                             struct gv_error *err)
{
    size_t n = r->resp ? strlen(r->resp) / 2 : 0;
    uint8_t *bin = malloc(n + 1);
    if (r->resp == NULL || bin == NULL) {
        free(bin);
        return gv_error_set(err, r->resp ? GV_ENOMEM : GV_EINVAL,
                            r->resp ? "out of memory" : "the record holds no answer");
    }
    for (size_t i = 0; i < n; i++)
        bin[i] = (uint8_t)(hexval(r->resp[2 * i]) << 4 | hexval(r->resp[2 * i + 1]));
    V1beta1__ContainerAllocateResponse *m = v1beta1__container_allocate_response__unpack(NULL, n, bin);
    free(bin);
    if (m == NULL)
        return gv_error_set(err, GV_EINVAL, "the stored answer does not decode");
    /* unpack allocates each field separately (system allocator): move them over */
    *resp = *m;
    free(m);
    return GV_OK;
}
