/*
 * The preempt verb's latency (issue 26's goal: p99 <= 10 ms with 100
 * candidate nodes of 8 GPUs and 50 pods each).  The scheduler library runs
 * in this process with the nodes and bound pods fed as its informers would;
 * each call is kube-scheduler's nodeCacheCapable body (NodeNameToMetaVictims,
 * every node with no victims of its own, as its dry run finds when GPUs are
 * ignoredByScheduler) POSTed over loopback HTTP, timed at the client (so the
 * figures include HTTP and JSON both ways).  Three preemptor shapes in turn:
 * a 9000 MiB slice, a whole GPU, two whole GPUs.  Each call's hold is
 * dropped (the preemptor deleted) so every call sees the same cluster.
 * Run twice: without PodDisruptionBudgets, and with 10 budgets covering
 * every pod (app=job-0..9, half allowing no disruption, half one), so each
 * call walks kube-scheduler's PDB rule over every candidate of every node.
 * No API server: the hold's write on the pod (one PATCH per answer with
 * victims, outside the lock) is not in these figures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler/gv_scheduler.h"
#include "tests/scheduler/sched_testlib.h"

#define NODES 100
#define GPUS 8
#define PODS_PER_NODE 50
#define GPU_MIB 16000
#define CALLS 300

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *ms, int n)
{
    qsort(ms, (size_t)n, sizeof(*ms), dbl_cmp);
    printf("%-26s calls %4d  p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms\n", what, n, ms[n / 2],
           ms[(n * 99 + 99) / 100 - 1], ms[n - 1]);
}

static int run(bool budgets)
{
    const char *cfg_text = "{\"reservationTimeoutSeconds\":600,\"insecureUnsignedPlacements\":true}";
    struct gv_sched_config cfg;
    struct gv_error err = {0};
    struct gv_sched *s = NULL;
    struct gv_httpd *h = NULL;
    if (gv_sched_config_default(&cfg, &err) != GV_OK ||
        gv_sched_config_parse(cfg_text, strlen(cfg_text), &cfg, &err) != GV_OK ||
        gv_sched_new(&cfg, NULL, &s, &err) != GV_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    gv_sched_config_clear(&cfg);
    srand(26);
    for (int j = 0; budgets && j < 10; j++) {
        /* before the pods: their labels are kept as they arrive */
        char text[300];
        snprintf(text, sizeof(text),
                 "{\"metadata\":{\"name\":\"job-%d\",\"namespace\":\"default\"},\"spec\":"
                 "{\"selector\":{\"matchLabels\":{\"app\":\"job-%d\"}}},\"status\":"
                 "{\"disruptionsAllowed\":%d}}",
                 j, j, j % 2);
        json_t *b = json_loads(text, 0, NULL);
        gv_sched_pdb_update(s, b);
        json_decref(b);
    }
    struct gpu_desc g[GPUS];
    for (int i = 0; i < GPUS; i++)
        g[i] = (struct gpu_desc){"NVIDIA A100-SXM4-80GB", GPU_MIB, 10};
    json_t *names = json_array();
    for (int n = 0; n < NODES; n++) {
        char name[32];
        snprintf(name, sizeof(name), "node-%03d", n);
        char *inv = st_inventory(name, g, GPUS, true);
        json_t *node = st_node(name, inv, 0);
        gv_sched_node_update(s, node);
        json_decref(node);
        free(inv);
        json_array_append_new(names, json_string(name));
        /* 50 pods over 8 GPUs (7 on two, 6 on the rest), 2200 MiB each,
         * priorities 0..9: every GPU is too full for the preemptors */
        for (int k = 0; k < PODS_PER_NODE; k++) {
            char uid[48], assign[160];
            int gpu = k < 14 ? k / 7 : 2 + (k - 14) / 6;
            snprintf(uid, sizeof(uid), "%s-p%02d", name, k);
            snprintf(assign, sizeof(assign), "v1;node=%s;main=GPU-%s-%d:2200:100", name, name, gpu);
            json_t *p = st_gpu_pod(uid, rand() % 10, 2200, name, assign);
            char app[16];
            snprintf(app, sizeof(app), "job-%d", k % 10);
            json_object_set_new(json_object_get(p, "metadata"), "labels",
                                json_pack("{s:s}", "app", app));
            gv_sched_pod_update(s, p);
            json_decref(p);
        }
    }
    struct gv_httpd_options o = {.name = "extender", .address = "127.0.0.1",
                                 .max_body = 64u << 20, .max_connections = 16};
    if (gv_httpd_new(&o, &h, &err) != GV_OK ||
        gv_sched_serve_extender(s, h, "/gpuvisor", &err) != GV_OK ||
        gv_httpd_start(h, &err) != GV_OK) {
        fprintf(stderr, "extender: %s\n", err.msg);
        return 1;
    }
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/gpuvisor/preempt", gv_httpd_port(h));
    static const struct {
        const char *what;
        unsigned long long mem;
        const char *gpus;
    } shapes[] = {{"1 GPU, 9000 MiB", 9000, "1"},
                  {"1 whole GPU", 16000, "1"},
                  {"2 whole GPUs", 16000, "2"}};
    static double ms[3][CALLS / 3], all[CALLS], cpu[CALLS];
    unsigned long victims = 0, answered = 0, violations = 0;
    for (int i = 0; i < CALLS; i++) {
        int k = i % 3;
        char uid[32];
        snprintf(uid, sizeof(uid), "hi-%d", i);
        json_t *pod = st_gpu_pod(uid, 100, shapes[k].mem, NULL, NULL);
        json_t *limits = json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0),
                "resources"),
            "limits");
        json_object_set_new(limits, "nvidia.com/gpu", json_string(shapes[k].gpus));
        json_t *m = json_object();
        size_t ni;
        json_t *nv;
        json_array_foreach(names, ni, nv)
            json_object_set_new(m, json_string_value(nv),
                                json_pack("{s:[],s:i}", "Pods", "NumPDBViolations", 0));
        json_t *args = json_pack("{s:O,s:n,s:o}", "Pod", pod, "NodeNameToVictims",
                                 "NodeNameToMetaVictims", m);
        char *body = json_dumps(args, JSON_COMPACT);
        json_decref(args);
        char *out = NULL;
        double t0 = now_ms(), c0 = cpu_ms();
        long code = st_http("POST", url, body, &out);
        double dt = now_ms() - t0;
        cpu[i] = cpu_ms() - c0;
        free(body);
        if (code != 200) {
            fprintf(stderr, "preempt: HTTP %ld: %s\n", code, out ? out : "");
            return 1;
        }
        json_t *ans = json_loads(out, 0, NULL);
        free(out);
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(ans, "NodeNameToMetaVictims"), key, v)
        {
            answered++;
            victims += json_array_size(json_object_get(v, "Pods"));
            violations += (unsigned long)json_integer_value(json_object_get(v, "NumPDBViolations"));
        }
        json_decref(ans);
        gv_sched_pod_delete(s, pod); /* drops the hold: the next call sees the same cluster */
        json_decref(pod);
        ms[k][i / 3] = dt;
        all[i] = dt;
    }
    printf("\n%s\n", budgets ? "with 10 PodDisruptionBudgets covering every pod (app=job-0..9; "
                                "disruptionsAllowed 0 for half, 1 for the others)"
                              : "without PodDisruptionBudgets");
    printf("preempt verb, in-process scheduler over loopback HTTP, client-side time per call\n");
    printf("cluster: %d nodes x %d GPUs (%d MiB, split 10), %d bound pods per node "
           "(2200 MiB, priority 0-9); preemptor priority 100; %d candidate nodes per call\n",
           NODES, GPUS, GPU_MIB, PODS_PER_NODE, NODES);
    for (int k = 0; k < 3; k++)
        report(shapes[k].what, ms[k], CALLS / 3);
    report("all", all, CALLS);
    report("all, CPU of the process", cpu, CALLS);
    printf("answers with a node: %lu of %d; victims per answer: %.2f; PDB violations per "
           "answer: %.2f\n",
           answered, CALLS, answered ? (double)victims / (double)answered : 0.0,
           answered ? (double)violations / (double)answered : 0.0);
    double load[3] = {0};
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("load average at the end: %.2f (other jobs on the machine)\n", load[0]);
    /* the wall clock includes waiting for a core: with other jobs on a
     * small machine only the CPU figure is this code's own */
    printf("target: p99 <= 10 ms -> wall %s, process CPU %s\n",
           all[(CALLS * 99 + 99) / 100 - 1] <= 10.0 ? "met" : "MISSED",
           cpu[(CALLS * 99 + 99) / 100 - 1] <= 10.0 ? "met" : "MISSED");
    json_decref(names);
    gv_httpd_free(h);
    gv_sched_free(s);
    return 0;
}

int main(void)
{
    return run(false) != 0 || run(true) != 0;
}
