/*
 * Cost of a decision on a cluster 10x the openb trace (12,130 nodes, 62,120
 * GPUs): one fgd replay of the openb default pod list per seed with the
 * node index, and the same seed scoring every node (the engine before the
 * index), side by side; the placements must be identical (same hash of
 * every decision).  Both are exact FGD (gv_sim_trace_set_exact): the score
 * budget the engine applies beyond 5,000 nodes by default is measured on its
 * own line ("budgeted"; docs/alloc.md, "Score budget").  Reads the trace from
 * ../shared/data/openb (GV_OPENB_DIR overrides); says SKIPPED when it is
 * absent.  Target: <= 5 s per seed.
 * Usage: bench_index [seeds (default 1)] [--no-exhaustive]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "common/gv_file.h"
#include "sim/gv_sim.h"

#define COPIES 10

/* CPU seconds of this process: on a shared machine wall time measures the
 * neighbours; both are printed. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The node list with every row repeated COPIES times, names suffixed. */
static char *multiply(const char *csv, size_t len, size_t *out_len)
{
    size_t cap = len * (COPIES + 1) + 64 * 1024, o = 0;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    const char *nl = memchr(csv, '\n', len);
    if (nl == NULL) {
        free(out);
        return NULL;
    }
    size_t head = (size_t)(nl - csv) + 1;
    memcpy(out, csv, head);
    o = head;
    for (int k = 0; k < COPIES; k++) {
        for (const char *p = csv + head; p < csv + len;) {
            const char *e = memchr(p, '\n', (size_t)(csv + len - p));
            if (e == NULL)
                e = csv + len;
            const char *comma = memchr(p, ',', (size_t)(e - p));
            if (comma != NULL && o + (size_t)(e - p) + 16 < cap)
                o += (size_t)snprintf(out + o, cap - o, "%.*s-x%d%.*s\n", (int)(comma - p), p, k,
                                      (int)(e - comma), comma);
            p = e + 1;
        }
    }
    *out_len = o;
    return out;
}

int main(int argc, char **argv)
{
    int seeds = argc > 1 ? atoi(argv[1]) : 1;
    bool exhaustive = !(argc > 2 && strcmp(argv[2], "--no-exhaustive") == 0);
    const char *dir = getenv("GV_OPENB_DIR");
    char nodes_path[1024], pods_path[1024];
    snprintf(nodes_path, sizeof(nodes_path), "%s/openb_node_list_gpu_node.csv",
             dir ? dir : "../shared/data/openb");
    snprintf(pods_path, sizeof(pods_path), "%s/openb_pod_list_default.csv",
             dir ? dir : "../shared/data/openb");
    struct gv_error err = {0};
    char *buf = NULL;
    size_t len = 0;
    if (gv_file_read_all(nodes_path, &buf, &len, &err) != GV_OK) {
        printf("SKIPPED: %s\n", err.msg);
        return 0;
    }
    size_t big_len = 0;
    char *big = multiply(buf, len, &big_len);
    free(buf);
    struct gv_sim_trace *t = NULL;
    if (big == NULL || gv_sim_trace_new(&t, &err) != GV_OK ||
        gv_sim_parse_openb_nodes(t, "nodes x10", big, big_len, &err) != GV_OK ||
        gv_sim_load_pods(t, pods_path, &err) != GV_OK) {
        fprintf(stderr, "bench_index: %s\n", err.msg);
        free(big);
        gv_sim_trace_free(t);
        return 1;
    }
    free(big);
    gv_sim_trace_set_exact(t, true);
    printf("openb default pods on the openb GPU nodes x%d: %zu nodes, %llu GPUs, fgd, inflate 1.3\n",
           COPIES, gv_sim_trace_nodes(t),
           (unsigned long long)(gv_sim_trace_gpu_milli(t) / 1000));
    int status = 0;
    for (int s = 0; s < seeds; s++) {
        uint64_t seed = 42 + (uint64_t)s;
        struct gv_sim_curve a = {0}, b = {0};
        double c0 = cpu_now();
        gv_status rc = gv_sim_run(t, GV_ALLOC_POLICY_FGD, seed, 1.3, &a, &err);
        double ca = cpu_now() - c0;
        if (rc != GV_OK) {
            fprintf(stderr, "bench_index: %s\n", err.msg);
            status = 1;
            break;
        }
        printf("seed %llu  indexed     cpu %7.2f s  wall %7.2f s  %llu decisions  "
               "unallocated@100%% %.2f  hash %016llx%s\n",
               (unsigned long long)seed, ca, a.seconds, (unsigned long long)a.arrivals,
               100.0 - a.allocated[100], (unsigned long long)a.placement_hash,
               ca <= 5.0 ? "  (cpu meets 5 s)" : "  (cpu misses 5 s)");
        if (exhaustive) {
            c0 = cpu_now();
            rc = gv_sim_run_exhaustive(t, GV_ALLOC_POLICY_FGD, seed, 1.3, &b, &err);
            double cb = cpu_now() - c0;
            if (rc != GV_OK) {
                fprintf(stderr, "bench_index: %s\n", err.msg);
                gv_sim_curve_free(&a);
                status = 1;
                break;
            }
            bool same = a.placement_hash == b.placement_hash;
            printf("seed %llu  exhaustive  cpu %7.2f s  wall %7.2f s  %llu decisions  "
                   "unallocated@100%% %.2f  hash %016llx  placements %s\n",
                   (unsigned long long)seed, cb, b.seconds, (unsigned long long)b.arrivals,
                   100.0 - b.allocated[100], (unsigned long long)b.placement_hash,
                   same ? "IDENTICAL" : "DIFFER");
            if (!same)
                status = 1;
        }
        gv_sim_curve_free(&b);
        memset(&b, 0, sizeof(b));
        gv_sim_trace_set_exact(t, false);
        c0 = cpu_now();
        rc = gv_sim_run(t, GV_ALLOC_POLICY_FGD, seed, 1.3, &b, &err);
        double cc = cpu_now() - c0;
        gv_sim_trace_set_exact(t, true);
        if (rc != GV_OK) {
            fprintf(stderr, "bench_index: %s\n", err.msg);
            gv_sim_curve_free(&a);
            status = 1;
            break;
        }
        printf("seed %llu  budgeted    cpu %7.2f s  wall %7.2f s  %llu decisions  "
               "unallocated@100%% %.2f  hash %016llx\n",
               (unsigned long long)seed, cc, b.seconds, (unsigned long long)b.arrivals,
               100.0 - b.allocated[100], (unsigned long long)b.placement_hash);
        gv_sim_curve_free(&a);
        gv_sim_curve_free(&b);
    }
    gv_sim_trace_free(t);
    return status;
}
