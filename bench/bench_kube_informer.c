/*
 * Kube client figures the daemons' targets depend on, against
 * fake_apiserver (a Python kube-apiserver stand-in, so request rates are
 * bounded by it, not by the client):
 *   - informer sync time and cache memory for N nodes (default 5000) that
 *     carry a gpuvisor inventory annotation, with and without a trimming
 *     transform;
 *   - GET latency p50/p99 (sequential);
 *   - conditional annotation patches per second from 8 threads.
 * N from GV_BENCH_NODES.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_proc.h"
#include "kube/gv_kube.h"
#include "tests/fakes/apiserver/fake_apiserver.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, struct gv_error *err)
{
    fprintf(stderr, "bench_kube_informer: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

/* A node shaped like a real one: labels, an inventory annotation for 8
 * GPUs, capacity/allocatable, conditions. */
static json_t *make_node(int i)
{
    char name[64], inv[2048];
    snprintf(name, sizeof(name), "gpu-node-%05d", i);
    size_t off = (size_t)snprintf(inv, sizeof(inv), "{\"version\":1,\"gpus\":[");
    for (int g = 0; g < 8; g++)
        off += (size_t)snprintf(inv + off, sizeof(inv) - off,
                                "%s{\"uuid\":\"GPU-%08d-%04d-0000-0000-000000000000\","
                                "\"index\":%d,\"model\":\"NVIDIA A100-SXM4-80GB\","
                                "\"memory\":81920,\"cores\":100,\"split\":10,\"numa\":%d,"
                                "\"health\":\"Healthy\",\"mode\":\"vgpu\"}",
                                g ? "," : "", i, g, g, g / 4);
    snprintf(inv + off, sizeof(inv) - off, "]}");
    return json_pack(
        "{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s}}, s:{s:{s:s, s:s, s:s}, "
        "s:{s:s, s:s, s:s}, s:[{s:s, s:s}, {s:s, s:s}]}}",
        "apiVersion", "v1", "kind", "Node", "metadata", "name", name, "labels",
        "kubernetes.io/hostname", name, "nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB",
        "gpuvisor.io/node", "true", "annotations", "gpuvisor.io/node-gpus", inv,
        "gpuvisor.io/node-heartbeat", "2026-01-01T00:00:00Z", "status", "capacity", "cpu",
        "128", "memory", "1056000000Ki", "nvidia.com/gpu", "80", "allocatable", "cpu", "127",
        "memory", "1050000000Ki", "nvidia.com/gpu", "80", "conditions", "type", "Ready",
        "status", "True", "type", "MemoryPressure", "status", "False");
}

/* What the scheduler needs from a node: name, version, labels, annotations. */
static json_t *trim_node(void *ud, json_t *obj)
{
    (void)ud;
    json_t *md = json_object_get(obj, "metadata");
    json_t *m = json_object();
    const char *keep[] = {"name", "resourceVersion", "labels", "annotations"};
    for (size_t i = 0; i < 4; i++)
        if (json_object_get(md, keep[i]) != NULL)
            json_object_set(m, keep[i], json_object_get(md, keep[i]));
    return json_pack("{s:o}", "metadata", m);
}

/* Heap bytes in use (what the cache retains, unlike RSS which also keeps
 * the freed LIST pages). */
static size_t heap_used(void)
{
    return mallinfo2().uordblks;
}

static void sync_informer(struct gv_kube_client *c, int n, bool trim)
{
    long before = bench_rss_kib(0);
    size_t heap0 = heap_used();
    struct gv_informer_opts o = {.transform = trim ? trim_node : NULL};
    struct gv_informer *inf = NULL;
    struct gv_error err;
    double t0 = now_s();
    if (gv_informer_new(c, "/api/v1/nodes", &o, NULL, &inf, &err) != GV_OK ||
        gv_informer_start(inf, &err) != GV_OK)
        die("informer", &err);
    if (!gv_informer_wait_synced(inf, 600000))
        die("informer sync timed out", NULL);
    double t = now_s() - t0;
    if ((int)gv_informer_size(inf) != n)
        die("informer size mismatch", NULL);
    long after = bench_rss_kib(0);
    double heap = (double)(heap_used() - heap0);
    printf("informer_sync_%s nodes=%d seconds=%.3f cache_heap_kib=%.0f (%.2f KiB/node) "
           "rss_growth_kib=%ld\n",
           trim ? "trimmed" : "full", n, t, heap / 1024, heap / 1024 / n, after - before);
    gv_informer_free(inf);
}

struct patch_arg {
    struct gv_kube_client *c;
    int id, count, ok, conflicts;
};

static void *patcher(void *p)
{
    struct patch_arg *a = p;
    char path[128], val[32];
    for (int i = 0; i < a->count; i++) {
        snprintf(path, sizeof(path), "/api/v1/nodes/gpu-node-%05d", (a->id * a->count + i));
        json_t *node = NULL;
        struct gv_error err;
        if (gv_kube_get(a->c, path, &node, &err) != GV_OK)
            die("get", &err);
        const char *rv = json_string_value(
            json_object_get(json_object_get(node, "metadata"), "resourceVersion"));
        const char *k[] = {"gpuvisor.io/bench"};
        snprintf(val, sizeof(val), "%d", i);
        const char *v[] = {val};
        gv_status st = gv_kube_patch_annotations(a->c, path, rv, k, v, 1, NULL, &err);
        if (st == GV_OK)
            a->ok++;
        else if (st == GV_ECONFLICT)
            a->conflicts++;
        else
            die("patch", &err);
        json_decref(node);
    }
    return NULL;
}

int main(void)
{
    const char *env = getenv("GV_BENCH_NODES");
    int n = env != NULL ? atoi(env) : 5000;
    if (n < 100)
        n = 100;
    struct fake_apiserver fa;
    if (fake_apiserver_start(&fa, NULL) != 0)
        die("cannot start fake_apiserver", NULL);
    struct gv_kube_config *cfg = NULL;
    struct gv_kube_client *c = NULL;
    struct gv_error err;
    if (gv_kube_config_from_url(fa.url, &cfg, &err) != GV_OK ||
        gv_kube_client_new(cfg, &c, &err) != GV_OK)
        die("client", &err);
    gv_kube_config_free(cfg);

    fprintf(stderr, "creating %d nodes...\n", n);
    for (int i = 0; i < n; i++) {
        json_t *node = make_node(i);
        if (gv_kube_create(c, "/api/v1/nodes", node, NULL, &err) != GV_OK)
            die("create", &err);
        json_decref(node);
    }
    json_t *one = NULL;
    if (gv_kube_get(c, "/api/v1/nodes/gpu-node-00000", &one, &err) != GV_OK)
        die("get", &err);
    char *text = json_dumps(one, JSON_COMPACT);
    printf("node_json_bytes=%zu\n", strlen(text));
    free(text);
    json_decref(one);

    /* Trimmed first: memory freed by one run is reused by the next, so the
     * later figure would read low. */
    sync_informer(c, n, true);
    sync_informer(c, n, false);

    enum { GETS = 1000 };
    static double lat[GETS];
    for (int i = 0; i < GETS; i++) {
        char path[128];
        snprintf(path, sizeof(path), "/api/v1/nodes/gpu-node-%05d", i % n);
        double t0 = now_s();
        if (gv_kube_get(c, path, &one, &err) != GV_OK)
            die("get", &err);
        lat[i] = (now_s() - t0) * 1e3;
        json_decref(one);
    }
    qsort(lat, GETS, sizeof(lat[0]), cmp_double);
    printf("get_latency_ms p50=%.3f p99=%.3f (n=%d, sequential, keep-alive)\n", lat[GETS / 2],
           lat[GETS * 99 / 100], GETS);

    enum { THREADS = 8 };
    pthread_t th[THREADS];
    struct patch_arg args[THREADS];
    int per = n / THREADS < 100 ? n / THREADS : 100;
    double t0 = now_s();
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct patch_arg){.c = c, .id = i, .count = per};
        pthread_create(&th[i], NULL, patcher, &args[i]);
    }
    int ok = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
    }
    double t = now_s() - t0;
    printf("get_then_conditional_patch threads=%d ops=%d seconds=%.3f ops_per_s=%.0f\n", THREADS,
           ok, t, ok / t);
    printf("note: request rates are bounded by the Python stand-in, not the client\n");
    gv_kube_client_free(c);
    fake_apiserver_stop(&fa);
    return 0;
}
