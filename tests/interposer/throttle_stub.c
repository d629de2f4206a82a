/* The throttle tests' driver stand-in (throttle_stub.h). */
#include "throttle_stub.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

struct throttle_stub g_stub = {.key_prefix = "GPU-stub"};

static uint64_t s_clock(void *ctx)
{
    (void)ctx;
    return g_stub.now;
}
static void s_sleep(void *ctx, uint64_t ns)
{
    (void)ctx;
    g_stub.now += ns;
}
static int s_create(void *ctx, void **ev)
{
    (void)ctx;
    static int events[64];
    static unsigned next;
    if (g_stub.events_fail)
        return -1;
    *ev = &events[next++ % 64];
    return 0;
}
static int s_record(void *ctx, void *ev, void *stream)
{
    (void)ctx;
    (void)ev;
    (void)stream;
    if (g_stub.events_fail)
        return -1;
    g_stub.records++;
    return 0;
}
static int s_query(void *ctx, void *ev)
{
    (void)ctx;
    (void)ev;
    return g_stub.events_fail ? -1 : 1;
}
static int s_elapsed(void *ctx, void *a, void *b, uint64_t *ns)
{
    (void)ctx;
    (void)a;
    (void)b;
    if (g_stub.events_fail)
        return -1;
    *ns = 1000;
    return 0;
}
static void s_destroy(void *ctx, void *ev)
{
    (void)ctx;
    (void)ev;
}
static int s_capturing(void *ctx, void *stream)
{
    (void)ctx;
    (void)stream;
    return g_stub.capturing;
}
static int s_key(void *ctx, int dev, char *buf, unsigned len)
{
    (void)ctx;
    return snprintf(buf, len, "%s-%d", g_stub.key_prefix, dev) > 0 ? 0 : -1;
}

struct gv_throttle_ops throttle_stub_ops(void)
{
    return (struct gv_throttle_ops){.clock_ns = s_clock,
                                    .sleep_ns = s_sleep,
                                    .event_create = s_create,
                                    .event_record = s_record,
                                    .event_query = s_query,
                                    .event_elapsed_ns = s_elapsed,
                                    .event_destroy = s_destroy,
                                    .stream_capturing = s_capturing,
                                    .device_key = s_key};
}

int throttle_stub_setup(const char *name, char *dir, size_t cap, void **driver)
{
    const char *tmp = getenv("GV_TEST_TMP");
    snprintf(dir, cap, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    const char *build = getenv("BUILD");
    char lib[512];
    snprintf(lib, sizeof(lib), "%s/tests/fakes/libcuda.so.1", build && *build ? build : "build");
    *driver = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (*driver == NULL) {
        fprintf(stderr, "cannot load the fake driver %s: %s\n", lib, dlerror());
        return -1;
    }
    return 0;
}

void throttle_stub_teardown(const char *dir, void *driver)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (driver != NULL)
        dlclose(driver);
}
