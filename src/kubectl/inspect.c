/*
 * `kubectl gpuvisor inspect [NODE]`: per node and GPU, allocated vs total
 * memory and compute, tasks, and with -d the pods holding each GPU; cluster
 * totals and the fragmentation figure (the engine's FGD measure over the
 * workload of the pods placed now).  The table users know from `kubectl
 * inspect gpushare`, one GPU per row so an 8-GPU node stays readable.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "contracts/placement.h"
#include "kubectl/gv_kubectl.h"

static bool ns_selected(const struct kc_opts *o, const char *ns)
{
    return o->all_namespaces || o->namespace_ == NULL || strcmp(o->namespace_, ns) == 0;
}

/* Slices on (node, uuid), as JSON objects. */
static json_t *gpu_pods(const struct kc_cluster *c, const struct kc_opts *o, const char *node,
                        const char *uuid)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < c->n_pods; i++) {
        const struct kc_pod *p = &c->pods[i];
        if (strcmp(p->node, node) != 0 || !ns_selected(o, p->ns))
            continue;
        for (uint32_t k = 0; k < p->a->n_containers; k++)
            for (uint32_t d = 0; d < p->a->containers[k].n_devices; d++) {
                const struct gv_alloc_device *dv = &p->a->containers[k].devices[d];
                if (strcmp(dv->uuid, uuid) == 0)
                    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:I,s:f,s:b}", "namespace",
                                                         p->ns, "pod", p->name, "container",
                                                         p->a->containers[k].name, "memMiB",
                                                         (json_int_t)dv->mem_mib, "cores",
                                                         dv->milli / 10.0, "bound", p->bound));
            }
    }
    return arr;
}

/*
 * Nominated holds: GPUs a preemption promised a pending pod, as the
 * scheduler wrote them on the pod (gpuvisor.io/nominated-hold) and honours
 * them until they lapse.  Read from the pods, not from the scheduler.  With
 * the placement key (verify.c) each is checked as the scheduler checks it
 * ("verified"); without it a pod carrying a forged one is listed as it
 * claims ("signed" says only whether a signature is there; the scheduler
 * ignores holds whose signature does not verify).
 */
static json_t *nominated(const struct kc_cluster *c, const struct kc_opts *o, const char *only)
{
    json_t *arr = json_array();
    time_t now = time(NULL);
    size_t i;
    json_t *pod;
    json_array_foreach(c->pending, i, pod)
    {
        const json_t *md = json_object_get(pod, "metadata");
        const char *ns = json_string_value(json_object_get(md, "namespace"));
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *text = json_string_value(
            json_object_get(json_object_get(md, "annotations"), GV_HOLD_ANNOTATION));
        json_t *h = text != NULL ? json_loads(text, 0, NULL) : NULL;
        const char *node = json_string_value(json_object_get(h, "node"));
        const char *until = json_string_value(json_object_get(h, "until"));
        const char *asg = json_string_value(json_object_get(h, "assignment"));
        const char *sig = json_string_value(json_object_get(h, "sig"));
        time_t t = 0;
        if (kc_parse_time(until, &t) != 0)
            t = 0;
        struct gv_alloc_assignment *a = malloc(sizeof(*a));
        if (ns != NULL && name != NULL && ns_selected(o, ns) && node != NULL && asg != NULL &&
            t > now && (only == NULL || strcmp(only, node) == 0) && a != NULL &&
            gv_alloc_assignment_decode(asg, strlen(asg), a, NULL) == GV_OK) {
            json_t *gpus = json_array();
            for (uint32_t k = 0; k < a->n_containers; k++)
                for (uint32_t d = 0; d < a->containers[k].n_devices; d++)
                    json_array_append_new(
                        gpus, json_pack("{s:s,s:s,s:I,s:f}", "container", a->containers[k].name,
                                        "uuid", a->containers[k].devices[d].uuid, "memMiB",
                                        (json_int_t)a->containers[k].devices[d].mem_mib, "cores",
                                        a->containers[k].devices[d].milli / 10.0));
            json_t *hj = json_pack("{s:s,s:s,s:s,s:o,s:s,s:I,s:b}", "namespace", ns, "pod", name,
                                   "node", node, "gpus", gpus, "until", until,
                                   "expiresInSeconds", (json_int_t)(t - now), "signed",
                                   sig != NULL && *sig != '\0');
            if (hj != NULL && o->placement_key != NULL)
                json_object_set_new(
                    hj, "verified",
                    json_boolean(gv_hold_verify(o->placement_key,
                                                json_string_value(json_object_get(md, "uid")),
                                                node, until, asg, sig, NULL) == GV_OK));
            json_array_append_new(arr, hj);
        }
        free(a);
        json_decref(h);
    }
    return arr;
}

static json_t *build(struct kc_cluster *c, const struct kc_opts *o, const char *only)
{
    json_t *nodes = json_array();
    uint64_t mem = 0, mem_used = 0, gpus = 0;
    double cores = 0, cores_used = 0;
    for (size_t i = 0; i < c->n_nodes; i++) {
        const struct kc_node *n = &c->nodes[i];
        if (only != NULL && strcmp(n->name, only) != 0)
            continue;
        json_t *ga = json_array();
        uint32_t ng = n->in_engine ? gv_alloc_node_gpu_count(c->engine, n->name) : 0;
        for (uint32_t g = 0; g < ng; g++) {
            struct gv_alloc_gpu_info gi;
            if (gv_alloc_gpu_info_at(c->engine, n->name, g, &gi, NULL) != GV_OK)
                continue;
            gpus++;
            if (gi.healthy) {
                mem += gi.mem_mib;
                mem_used += gi.used_mem_mib;
                cores += 100;
                cores_used += gi.used_milli / 10.0;
            }
            json_array_append_new(
                ga, json_pack("{s:I,s:s,s:s,s:I,s:I,s:i,s:f,s:I,s:I,s:b,s:s,s:o}", "index",
                              (json_int_t)gi.index, "uuid", gi.uuid, "model",
                              gi.model ? gi.model : "", "memMiB", (json_int_t)gi.mem_mib,
                              "usedMemMiB", (json_int_t)gi.used_mem_mib, "cores", 100, "usedCores",
                              gi.used_milli / 10.0, "tasks", (json_int_t)gi.tasks, "split",
                              (json_int_t)gi.split, "healthy", gi.healthy, "mode",
                              gi.mode == GV_ALLOC_GPU_EXCLUSIVE ? "exclusive"
                                : gi.mode == GV_ALLOC_GPU_MPS ? "mps" : "shared", "pods",
                              gpu_pods(c, o, n->name, gi.uuid)));
        }
        double nf = 0;
        if (n->in_engine)
            gv_alloc_node_fragmentation(c->engine, n->name, &nf, NULL);
        json_array_append_new(nodes, json_pack("{s:s,s:s,s:s?,s:f,s:o,s:O?,s:O?}", "name",
                                               n->name, "state", n->state, "reason", n->reason,
                                               "fragmentedGPUs", nf / 1000.0, "gpus", ga,
                                               "wholeDevices", n->whole, "wholeResources",
                                               n->whole_res));
    }
    struct gv_alloc_frag fr;
    gv_alloc_cluster_fragmentation(c->engine, &fr);
    size_t pods = 0;
    for (size_t i = 0; i < c->n_pods; i++)
        pods += only == NULL || strcmp(c->pods[i].node, only) == 0;
    json_t *unv = json_array();
    size_t k;
    json_t *u;
    json_array_foreach(c->unverified, k, u)
    {
        const char *un = json_string_value(json_object_get(u, "node"));
        if (ns_selected(o, json_string_value(json_object_get(u, "namespace"))) &&
            (only == NULL || (un != NULL && strcmp(un, only) == 0)))
            json_array_append(unv, u);
    }
    return json_pack("{s:o,s:{s:b,s:s},s:o,s:o,s:{s:I,s:I,s:I,s:I,s:f,s:f,s:I},s:{s:f,s:f,s:f}}",
                     "nodes", nodes, "placements", "verified", o->placement_key != NULL, "key",
                     o->placement_key_note ? o->placement_key_note : "", "unverified", unv,
                     "nominated", nominated(c, o, only),
                     "totals", "nodes", (json_int_t)json_array_size(nodes), "gpus",
                     (json_int_t)gpus, "memMiB", (json_int_t)mem, "usedMemMiB",
                     (json_int_t)mem_used, "cores", cores, "usedCores", cores_used, "pods",
                     (json_int_t)pods, "fragmentation", "ratio", fr.ratio, "fragmentedGPUs",
                     fr.frag_milli / 1000.0, "freeGPUs", fr.free_milli / 1000.0);
}

static double num(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

/* One row per whole device (passthrough GPU, mdev): the resource in MODEL, the ID in UUID. */
static void print_whole(struct kc_table *t, json_t *n)
{
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(n, "wholeDevices"), i, w)
    {
        bool healthy = json_is_true(json_object_get(w, "healthy"));
        kc_table_row(t, "", "", json_string_value(json_object_get(w, "kind")),
                     json_string_value(json_object_get(w, "resource")), "whole", "", "", "",
                     json_string_value(json_object_get(w, "id")),
                     healthy ? "healthy" : "unhealthy");
    }
}

/* Whole devices per node and resource: free/total and health (placed by count). */
static void print_whole_resources(json_t *doc, const struct kc_opts *o)
{
    struct kc_table t;
    bool any = false;
    size_t i, k;
    json_t *n, *w;
    kc_table_init(&t, 5);
    kc_table_row(&t, "NODE", "KIND", "RESOURCE", "FREE/TOTAL", "HEALTHY");
    json_array_foreach(json_object_get(doc, "nodes"), i, n)
    {
        json_array_foreach(json_object_get(n, "wholeResources"), k, w)
        {
            char fr[48], he[48];
            snprintf(fr, sizeof(fr), "%.0f/%.0f", num(w, "free"), num(w, "total"));
            snprintf(he, sizeof(he), "%.0f/%.0f", num(w, "healthy"), num(w, "total"));
            kc_table_row(&t, k == 0 ? json_string_value(json_object_get(n, "name")) : "",
                         json_string_value(json_object_get(w, "kind")),
                         json_string_value(json_object_get(w, "resource")), fr, he);
            any = true;
        }
    }
    if (any) {
        fprintf(o->out, "\nWhole devices (MIG, passthrough, mdev; placed by count):\n");
        kc_table_print(&t, o->out);
    }
    kc_table_free(&t);
}

/* Holds: which pod, node, GPUs and until when (only when there are some). */
static void print_nominated(json_t *doc, const struct kc_opts *o)
{
    json_t *arr = json_object_get(doc, "nominated");
    if (json_array_size(arr) == 0)
        return;
    struct kc_table t;
    kc_table_init(&t, 5);
    kc_table_row(&t, "POD", "NODE", "GPUS (MiB, cores %)", "EXPIRES", "SIGNED");
    size_t i, k;
    json_t *h, *g;
    json_array_foreach(arr, i, h)
    {
        char who[600], gpus[1024] = "", exp[96];
        size_t len = 0;
        snprintf(who, sizeof(who), "%s/%s", json_string_value(json_object_get(h, "namespace")),
                 json_string_value(json_object_get(h, "pod")));
        json_array_foreach(json_object_get(h, "gpus"), k, g)
        {
            int w = snprintf(gpus + len, sizeof(gpus) - len, "%s%s (%.0f, %g)", k ? ", " : "",
                             json_string_value(json_object_get(g, "uuid")), num(g, "memMiB"),
                             num(g, "cores"));
            if (w < 0 || (size_t)w >= sizeof(gpus) - len)
                break;
            len += (size_t)w;
        }
        snprintf(exp, sizeof(exp), "%s (in %.0fs)", json_string_value(json_object_get(h, "until")),
                 num(h, "expiresInSeconds"));
        json_t *ver = json_object_get(h, "verified");
        bool sg = json_is_true(json_object_get(h, "signed"));
        kc_table_row(&t, who, json_string_value(json_object_get(h, "node")), gpus, exp,
                     !sg ? "no" : ver == NULL ? "yes" : json_is_true(ver) ? "verified" : "invalid");
    }
    fprintf(o->out, "\nNominated (GPUs a preemption holds for a pending pod until its next "
                    "filter; the scheduler honours only holds whose signature verifies):\n");
    kc_table_print(&t, o->out);
    kc_table_free(&t);
}

/* Placements that do not verify: not counted above (only with the key). */
static void print_unverified(json_t *doc, const struct kc_opts *o)
{
    json_t *arr = json_object_get(doc, "unverified");
    if (json_array_size(arr) == 0)
        return;
    struct kc_table t;
    kc_table_init(&t, 3);
    kc_table_row(&t, "POD", "NODE", "WHY");
    size_t i;
    json_t *u;
    json_array_foreach(arr, i, u)
    {
        char who[600];
        snprintf(who, sizeof(who), "%s/%s", json_string_value(json_object_get(u, "namespace")),
                 json_string_value(json_object_get(u, "pod")));
        const char *node = json_string_value(json_object_get(u, "node"));
        kc_table_row(&t, who, node ? node : "-", json_string_value(json_object_get(u, "reason")));
    }
    fprintf(o->out, "\nPlacements that do not verify (not counted above; the scheduler and the "
                    "node agents ignore them too):\n");
    kc_table_print(&t, o->out);
    kc_table_free(&t);
}

static void print_table(json_t *doc, const struct kc_opts *o)
{
    bool wide = o->output == KC_OUT_WIDE;
    struct kc_table t;
    kc_table_init(&t, wide ? 10 : 8);
    if (wide)
        kc_table_row(&t, "NODE", "STATE", "GPU", "MODEL", "MEMORY(MiB)", "MEM%", "CORES(%)",
                     "TASKS", "UUID", "HEALTH");
    else
        kc_table_row(&t, "NODE", "STATE", "GPU", "MODEL", "MEMORY(MiB)", "MEM%", "CORES(%)",
                     "TASKS");
    size_t i, j, k;
    json_t *n, *g, *p;
    json_array_foreach(json_object_get(doc, "nodes"), i, n)
    {
        const char *name = json_string_value(json_object_get(n, "name"));
        const char *state = json_string_value(json_object_get(n, "state"));
        json_t *gpus = json_object_get(n, "gpus");
        if (json_array_size(gpus) == 0) {
            kc_table_row(&t, name, state, "-", "", "", "", "", "", "", "");
            print_whole(&t, n);
            continue;
        }
        double nm = 0, nu = 0, nc = 0, ncu = 0, nt = 0;
        json_array_foreach(gpus, j, g)
        {
            char gi[16], mem[48], pct[16], cores[32], tasks[32];
            snprintf(gi, sizeof(gi), "%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(g, "index")));
            snprintf(mem, sizeof(mem), "%.0f/%.0f", num(g, "usedMemMiB"), num(g, "memMiB"));
            snprintf(pct, sizeof(pct), "%.0f%%",
                     num(g, "memMiB") > 0 ? 100 * num(g, "usedMemMiB") / num(g, "memMiB") : 0);
            snprintf(cores, sizeof(cores), "%g/%g", num(g, "usedCores"), num(g, "cores"));
            snprintf(tasks, sizeof(tasks), "%.0f/%.0f", num(g, "tasks"), num(g, "split"));
            bool healthy = json_is_true(json_object_get(g, "healthy"));
            kc_table_row(&t, j == 0 ? name : "", j == 0 ? state : "", gi,
                         json_string_value(json_object_get(g, "model")), mem, pct, cores, tasks,
                         json_string_value(json_object_get(g, "uuid")),
                         healthy ? "healthy" : "unhealthy");
            if (healthy) {
                nm += num(g, "memMiB");
                nu += num(g, "usedMemMiB");
                nc += num(g, "cores");
                ncu += num(g, "usedCores");
            }
            nt += num(g, "tasks");
            if (!o->details)
                continue;
            json_array_foreach(json_object_get(g, "pods"), k, p)
            {
                char who[600], pm[32], pc[32];
                snprintf(who, sizeof(who), "  %s/%s [%s]%s",
                         json_string_value(json_object_get(p, "namespace")),
                         json_string_value(json_object_get(p, "pod")),
                         json_string_value(json_object_get(p, "container")),
                         json_is_true(json_object_get(p, "bound")) ? "" : " (binding)");
                snprintf(pm, sizeof(pm), "%.0f", num(p, "memMiB"));
                if (num(p, "cores") > 0)
                    snprintf(pc, sizeof(pc), "%g", num(p, "cores"));
                else
                    snprintf(pc, sizeof(pc), "any");
                kc_table_row(&t, "", "", "", who, pm, "", pc, "", "", "");
            }
        }
        char mem[48], pct[16], cores[32], tasks[32];
        snprintf(mem, sizeof(mem), "%.0f/%.0f", nu, nm);
        snprintf(pct, sizeof(pct), "%.0f%%", nm > 0 ? 100 * nu / nm : 0);
        snprintf(cores, sizeof(cores), "%g/%g", ncu, nc);
        snprintf(tasks, sizeof(tasks), "%.0f", nt);
        kc_table_row(&t, "", "", "all", "", mem, pct, cores, tasks, "", "");
        print_whole(&t, n);
    }
    kc_table_print(&t, o->out);
    kc_table_free(&t);
    print_whole_resources(doc, o);
    print_nominated(doc, o);
    print_unverified(doc, o);
    json_t *tot = json_object_get(doc, "totals"), *fr = json_object_get(doc, "fragmentation");
    double m = num(tot, "memMiB"), c = num(tot, "cores");
    fprintf(o->out, "--------------------------------------------------------------\n");
    fprintf(o->out, "Allocated/Total GPU memory: %.0f/%.0f MiB (%.0f%%)\n", num(tot, "usedMemMiB"),
            m, m > 0 ? 100 * num(tot, "usedMemMiB") / m : 0);
    fprintf(o->out, "Allocated/Total GPU compute: %g/%g %% (%.0f%%)\n", num(tot, "usedCores"), c,
            c > 0 ? 100 * num(tot, "usedCores") / c : 0);
    fprintf(o->out, "GPU pods: %.0f on %.0f node(s), %.0f GPU(s)\n", num(tot, "pods"),
            num(tot, "nodes"), num(tot, "gpus"));
    fprintf(o->out,
            "Cluster fragmentation: %.2f of %.2f free GPUs unusable by the current workload "
            "(%.1f%%)\n",
            num(fr, "fragmentedGPUs"), num(fr, "freeGPUs"), 100 * num(fr, "ratio"));
}

int kc_inspect(struct gv_kube_client *kube, const struct kc_opts *o, const char *node)
{
    struct kc_cluster c;
    struct gv_error err = {0};
    int rc = kc_cluster_load(kube, o, &c, &err);
    if (rc != KC_OK) {
        fprintf(stderr, "kubectl-gpuvisor: %s\n", err.msg);
        if (rc == KC_FORBIDDEN)
            fprintf(stderr, "kubectl-gpuvisor: inspect needs get/list on nodes and on pods in "
                            "all namespaces (ClusterRole gpuvisor-viewer in deploy/monitoring)\n");
        kc_cluster_clear(&c);
        return rc;
    }
    if (node != NULL) {
        bool found = false;
        for (size_t i = 0; i < c.n_nodes && !found; i++)
            found = strcmp(c.nodes[i].name, node) == 0;
        if (!found) {
            fprintf(stderr, "kubectl-gpuvisor: node \"%s\" not found\n", node);
            kc_cluster_clear(&c);
            return KC_ERR;
        }
    }
    json_t *doc = build(&c, o, node);
    if (doc == NULL) {
        fprintf(stderr, "kubectl-gpuvisor: out of memory\n");
        rc = KC_ERR;
    } else if (o->output == KC_OUT_JSON || o->output == KC_OUT_YAML) {
        rc = kc_emit(doc, o->output, o->out) == 0 ? KC_OK : KC_ERR;
    } else {
        print_table(doc, o);
    }
    json_decref(doc);
    kc_cluster_clear(&c);
    return rc;
}
