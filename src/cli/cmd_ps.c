/*
 * gpuvisor ps: list the live tenants of this machine's shared regions —
 * `gpuvisor run` slices (gv_shm_local_dir) and, when readable, the node
 * agent's containers (GV_SHM_NODE_DIR/<pod-uid>/<container>/shared.cache) —
 * or of the region files given as arguments.  One line per live process and
 * device: memory used / limit, of it managed (oversubscribed slices), the SM
 * limit and the recent utilisation the compute-share module records.  A region that cannot be trusted is reported on stderr and skipped.
 * Exit codes: 0 ok, 1 when a named region cannot be read, 2 bad usage.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "shm/gv_shm.h"

static void print_header(void)
{
    printf("%-28s %8s %8s %4s  %-40s %21s %8s %4s %5s\n", "NAME", "PID", "HOSTPID", "PRIO", "GPU",
           "MEMORY(MiB used/limit)", "MANAGED", "SM%", "UTIL%");
}

static void limit_text(char *buf, size_t n, uint64_t limit)
{
    if (limit == 0)
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%llu", (unsigned long long)(limit >> 20));
}

/*
 * Whether the process in a slot is alive, seen from here: regions of the
 * node agent's containers hold pids of other pid namespaces, so there only
 * the host pid (when known) can be checked.
 */
static bool alive_here(const struct gv_shm_proc *p, bool other_ns)
{
    if (!other_ns)
        return gv_shm_proc_alive(p);
    return atomic_load(&p->pid) != 0 && p->hostpid > 0 &&
           !(kill(p->hostpid, 0) != 0 && errno == ESRCH);
}

/* Prints a region's live processes; returns 0, or 1 when it cannot be read. */
static int show_region(const char *path, const char *name, bool other_ns)
{
    struct gv_shm *shm = NULL;
    struct gv_error err;
    if (gv_shm_open(path, GV_SHM_READONLY, &shm, &err) != GV_OK) {
        fprintf(stderr, "gpuvisor ps: %s\n", err.msg);
        return 1;
    }
    const struct gv_shm_region *r = gv_shm_region(shm);
    uint32_t nd = atomic_load(&r->ndevices);
    for (int i = 0; i < GV_SHM_MAX_PROCS; i++) {
        const struct gv_shm_proc *p = &r->procs[i];
        if (!alive_here(p, other_ns))
            continue;
        int32_t pid = atomic_load(&p->pid);
        bool any = false;
        for (uint32_t d = 0; d < nd && d < GV_SHM_MAX_DEVICES; d++) {
            const struct gv_shm_device *dev = &r->devices[d];
            uint64_t used = atomic_load(&p->mem_used[d]);
            char lim[24], mem[48], sm[16], managed[24];
            limit_text(lim, sizeof(lim), dev->mem_limit);
            snprintf(mem, sizeof(mem), "%llu/%s", (unsigned long long)(used >> 20), lim);
            if (dev->sm_limit)
                snprintf(sm, sizeof(sm), "%u", dev->sm_limit);
            else
                snprintf(sm, sizeof(sm), "-");
            /* Of the memory, how much oversubscription served from host-backed managed memory. */
            if (dev->flags & GV_SHM_DEV_OVERSUBSCRIBE)
                snprintf(managed, sizeof(managed), "%llu",
                         (unsigned long long)(atomic_load(&p->managed_used[d]) >> 20));
            else
                snprintf(managed, sizeof(managed), "-");
            /* The file is the container's to write: bound every string and number. */
            uint32_t util = atomic_load(&p->util[d]);
            printf("%-28s %8d %8d %4d  %-40.*s %21s %8s %4s %5u\n", name, (int)pid,
                   (int)p->hostpid, p->priority, (int)strnlen(dev->uuid, GV_SHM_UUID_LEN),
                   dev->uuid, mem, managed, sm, util > 100 ? 100 : util);
            any = true;
        }
        if (!any) {
            printf("%-28s %8d %8d %4d  %-40s %21s %8s %4s %5s\n", name, (int)pid,
                   (int)p->hostpid, p->priority, "-", "-", "-", "-", "-");
        }
    }
    gv_shm_close(shm);
    return 0;
}

static void scan_local(void)
{
    char dir[PATH_MAX];
    gv_shm_local_dir(dir, sizeof(dir));
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= 6 || strcmp(e->d_name + len - 6, ".cache") != 0)
            continue;
        char path[PATH_MAX + 300], name[300];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        snprintf(name, sizeof(name), "%.*s", (int)(len - 6), e->d_name);
        show_region(path, name, false);
    }
    closedir(d);
}

static void scan_node(void)
{
    DIR *pods = opendir(GV_SHM_NODE_DIR);
    if (pods == NULL)
        return;
    struct dirent *pe;
    while ((pe = readdir(pods)) != NULL) {
        if (pe->d_name[0] == '.')
            continue;
        char pdir[PATH_MAX];
        snprintf(pdir, sizeof(pdir), "%s/%s", GV_SHM_NODE_DIR, pe->d_name);
        DIR *ctrs = opendir(pdir);
        if (ctrs == NULL)
            continue;
        struct dirent *ce;
        while ((ce = readdir(ctrs)) != NULL) {
            if (ce->d_name[0] == '.')
                continue;
            char path[PATH_MAX + 600], name[600];
            snprintf(path, sizeof(path), "%s/%s/" GV_SHM_REGION_FILE, pdir, ce->d_name);
            snprintf(name, sizeof(name), "%s/%s", pe->d_name, ce->d_name);
            FILE *f = fopen(path, "rb");
            if (f == NULL)
                continue;
            fclose(f);
            show_region(path, name, true);
        }
        closedir(ctrs);
    }
    closedir(pods);
}

int gv_cmd_ps(int argc, char **argv)
{
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: gpuvisor ps [REGION-FILE...]\n\n"
                   "Lists live GPU tenants: processes of `gpuvisor run` slices and of\n"
                   "gpuvisor containers on this machine, or of the given region files.\n");
            return 0;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "gpuvisor ps: unknown option \"%s\"\n", argv[i]);
            return 2;
        }
    }
    print_header();
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            rc |= show_region(argv[i], argv[i], false);
        return rc;
    }
    scan_local();
    scan_node();
    return 0;
}
