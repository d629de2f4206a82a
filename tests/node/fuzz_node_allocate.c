/*
 * Fuzz target: pods as the API server returns them, fed to Allocate.
 *
 * The input is a JSON array of pods (or one pod): any annotation values,
 * uids, names, phases, resources.  The allocator picks the pod being
 * admitted and builds the answer, exactly as for the informer's cache.  Its
 * state directory is a scratch directory removed at exit.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "node/allocate/gv_allocator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gv_allocator *alloc;

static char scratch[] = "/tmp/gv-fuzz-allocate-XXXXXX";

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup(void)
{
    gv_allocator_free(alloc);
    nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void set_gpus(void);

static void setup(void)
{
    gv_log_set_level(GV_LOG_ERROR);
    if (mkdtemp(scratch) == NULL)
        abort();
    struct gv_allocator_config cfg = {.node = "node1", .state_dir = scratch,
                                      .install_dir = "/usr/local/gpuvisor", .wait_ms = 1};
    if (gv_allocator_new(&cfg, NULL, NULL, &alloc, NULL) != GV_OK)
        abort();
    atexit(cleanup);
    set_gpus();
}

static void set_gpus(void)
{
    struct gv_node_config *nc;
    if (gv_node_config_default(&nc, NULL) != GV_OK)
        abort();
    struct gv_allocator_gpu g[2] = {0};
    for (int i = 0; i < 2; i++) {
        snprintf(g[i].gpu.uuid, sizeof(g[i].gpu.uuid), "GPU-%d", i);
        g[i].gpu.index = (unsigned)i;
        g[i].gpu.healthy = true;
        g[i].gpu.numa = -1;
        g[i].settings = nc->defaults;
    }
    g[1].settings.mode = GV_NODE_MODE_EXCLUSIVE;
    gv_allocator_set_gpus(alloc, nc, g, 2, NULL);
    gv_node_config_free(nc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned runs;
    if (alloc == NULL)
        setup();
    if (++runs % 512 == 0) { /* bounded memory: per-pod state only goes away through GC */
        gv_allocator_free(alloc);
        nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (mkdir(scratch, 0700) != 0)
            abort();
        struct gv_allocator_config cfg = {.node = "node1", .state_dir = scratch,
                                          .install_dir = "/usr/local/gpuvisor", .wait_ms = 1};
        if (gv_allocator_new(&cfg, NULL, NULL, &alloc, NULL) != GV_OK)
            abort();
        set_gpus();
    }
    json_t *doc = json_loadb((const char *)data, size, 0, NULL);
    if (doc == NULL)
        return 0;
    json_t *pods = json_is_array(doc) ? json_incref(doc) : json_pack("[O]", doc);
    json_decref(doc);
    if (pods == NULL)
        return 0;
    gv_allocator_set_pods(alloc, pods);
    /* GetPreferredAllocation from the same pods, then Allocates (its promise may match) */
    static const char *const avail[] = {"GPU-0::0", "GPU-0::1", "GPU-0::2", "GPU-1", "GPU-0::3"};
    const char *pref[5];
    size_t n_pref;
    for (size_t n = 1; n <= 2; n++)
        gv_allocator_prefer(alloc, avail, 5, avail + 4, n - 1, n, pref, &n_pref);
    static const char *const ids[][2] = {{"GPU-0::1", "GPU-1"}, {"GPU-1", "GPU-0::3"}};
    for (size_t n = 1; n <= 2; n++) {
        V1beta1__ContainerAllocateResponse *resp = malloc(sizeof(*resp));
        v1beta1__container_allocate_response__init(resp);
        char msg[512];
        gv_allocator_allocate(alloc, ids[n - 1], n, resp, msg, sizeof(msg));
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    json_decref(pods);
    return 0;
}
