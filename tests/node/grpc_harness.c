/*
 * Test harness: the DevicePlugin gRPC service with a synthetic device list,
 * so the transport tests (tests/node/test_grpc_*.py) can drive it from real
 * gRPC peers without NVML or an API server.  Not a product binary.
 *
 * usage: grpc_harness DIR GPUS SPLIT [ALLOCATE_DELAY_MS]
 * Serves DIR/gpuvisor.sock and registers nvidia.com/gpu with DIR/kubelet.sock
 * (retrying until a kubelet stand-in listens there), like the agent.
 * stdin commands, one per line (answers on stdout):
 *   health GPU 0|1      mark every slice of GPU (un)healthy -> "ok"
 *   watchers            -> "watchers N"
 *   connections         -> "connections N"
 *   inflight_max        -> "inflight_max N": most Allocates ever inside the handler at once
 *   shutdown [MS]       graceful stop (grace MS, default 1000); exits once drained
 * Allocate answers env GV_TEST_IDS=<comma list of the requested IDs>.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "node/kubelet/gv_plugin.h"
#include "node/kubelet/gv_registrar.h"

static struct gv_plugin *plugin;
static struct gv_plugin_device *devs;
static size_t n_devs;
static long delay_ms;
static bool stopping;
static struct gv_registrar *registrar;
static atomic_int inflight, inflight_max;

static int fake_allocate(void *ud, const char *const *ids, size_t n,
                         V1beta1__ContainerAllocateResponse *resp, char *msg, size_t msg_size)
{
    (void)ud;
    int now = atomic_fetch_add(&inflight, 1) + 1, seen = atomic_load(&inflight_max);
    while (now > seen && !atomic_compare_exchange_weak(&inflight_max, &seen, now))
        ;
    if (delay_ms > 0) {
        struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_sub(&inflight, 1);
    if (n == 0) {
        snprintf(msg, msg_size, "no devices requested");
        return 9; /* FAILED_PRECONDITION */
    }
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(ids[i]) + 1;
    V1beta1__ContainerAllocateResponse__EnvsEntry *e = malloc(sizeof(*e));
    resp->envs = malloc(sizeof(*resp->envs));
    char *v = calloc(1, len);
    if (!e || !resp->envs || !v) {
        free(e);
        free(v);
        snprintf(msg, msg_size, "out of memory");
        return 8;
    }
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(v, ",");
        strcat(v, ids[i]);
    }
    v1beta1__container_allocate_response__envs_entry__init(e);
    e->key = strdup("GV_TEST_IDS");
    e->value = v;
    resp->envs[0] = e;
    resp->n_envs = 1;
    return 0;
}

static void drained_check(struct gv_loop *loop, void *ud)
{
    (void)ud;
    if (gv_plugin_drained(plugin))
        gv_loop_stop(loop);
    else
        gv_loop_timer(loop, 20, drained_check, NULL);
}

static void on_stdin(struct gv_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)events;
    (void)ud;
    char line[256];
    ssize_t n = read(fd, line, sizeof(line) - 1);
    if (n <= 0) {
        gv_loop_del_fd(loop, fd);
        if (!stopping) {
            stopping = true;
            gv_plugin_shutdown(plugin, 1000);
            drained_check(loop, NULL);
        }
        return;
    }
    line[n] = '\0';
    for (char *save = NULL, *l = strtok_r(line, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int gpu, h;
        struct gv_error err;
        if (sscanf(l, "health %d %d", &gpu, &h) == 2) {
            for (size_t i = 0; i < n_devs; i++)
                if (devs[i].gpu == gpu)
                    devs[i].healthy = h != 0;
            if (gv_plugin_set_devices(plugin, devs, n_devs, &err) != GV_OK)
                printf("error %s\n", err.msg);
            else
                printf("ok\n");
        } else if (strcmp(l, "registrations") == 0) {
            printf("registrations %llu\n", (unsigned long long)gv_registrar_count(registrar));
        } else if (strcmp(l, "inflight_max") == 0) {
            printf("inflight_max %d\n", atomic_load(&inflight_max));
        } else if (strcmp(l, "watchers") == 0) {
            printf("watchers %zu\n", gv_plugin_watchers(plugin));
        } else if (strncmp(l, "shutdown", 8) == 0 && (l[8] == '\0' || l[8] == ' ') &&
                   !stopping) {
            stopping = true;
            gv_plugin_shutdown(plugin, l[8] ? strtol(l + 9, NULL, 10) : 1000);
            drained_check(loop, NULL);
            printf("ok\n");
        } else {
            printf("error unknown command '%s'\n", l);
        }
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s DIR GPUS SPLIT [ALLOCATE_DELAY_MS]\n", argv[0]);
        return 2;
    }
    gv_log_init("grpc-harness", GV_LOG_ERROR);
    int gpus = atoi(argv[2]), split = atoi(argv[3]);
    delay_ms = argc > 4 ? atol(argv[4]) : 0;
    n_devs = (size_t)gpus * (size_t)split;
    devs = calloc(n_devs + 1, sizeof(*devs));
    for (int g = 0; g < gpus; g++)
        for (int s = 0; s < split; s++) {
            struct gv_plugin_device *d = &devs[g * split + s];
            snprintf(d->id, sizeof(d->id), "GPU-%08d-0000-0000-0000-000000000000::%d", g, s);
            d->healthy = true;
            d->numa = g % 2;
            d->gpu = g;
        }
    struct gv_loop *loop;
    struct gv_error err;
    char sock[4096];
    snprintf(sock, sizeof(sock), "%s/gpuvisor.sock", argv[1]);
    struct gv_plugin_config cfg = {.socket_path = sock, .allocate = fake_allocate};
    struct gv_registrar_config rc = {.plugin_dir = argv[1],
                                     .kubelet_socket = "kubelet.sock",
                                     .endpoint = "gpuvisor.sock",
                                     .resource_name = "nvidia.com/gpu"};
    if (gv_loop_new(&loop, &err) != GV_OK || gv_plugin_new(loop, &cfg, &plugin, &err) != GV_OK ||
        gv_plugin_set_devices(plugin, devs, n_devs, &err) != GV_OK ||
        gv_plugin_listen(plugin, &err) != GV_OK ||
        gv_registrar_new(loop, plugin, &rc, &registrar, &err) != GV_OK ||
        gv_loop_add_fd(loop, 0, EPOLLIN, on_stdin, NULL, &err) != GV_OK) {
        fprintf(stderr, "grpc_harness: %s\n", err.msg);
        return 1;
    }
    printf("ready %zu\n", gv_plugin_list_size(plugin));
    fflush(stdout);
    gv_status st = gv_loop_run(loop, &err);
    gv_registrar_free(registrar);
    gv_plugin_free(plugin);
    gv_loop_free(loop);
    free(devs);
    return st == GV_OK ? 0 : 1;
}
