/*
 * `kubectl gpuvisor top [pods|nodes|gpus]`: live usage read from every node
 * agent's /metrics through the API server's pod proxy (so it works from a
 * laptop as in-cluster, with the user's own credentials).  Names: the
 * agent's gpuvisor_container_gpu_* series (memory used / limit from the
 * shared regions, compute share achieved / target) and dcgm-exporter's
 * per-GPU fields; HAMi's hami_vgpu_* / hami_host_* when only those are on.
 */
#include <stdlib.h>
#include <string.h>

#include "contracts/agent_usage.h"
#include "kubectl/gv_kubectl.h"

#define MIB 1048576.0

struct scrape {
    struct gv_usage u;
};

/* Scrapes every agent; returns the number scraped, -1 after a fatal error. */
static int scrape_all(struct gv_kube_client *kube, const struct kc_opts *o, struct scrape *sc,
                      int *rc)
{
    json_t *agents = NULL;
    struct gv_error err = {0};
    struct gv_kube_list_opts lo = {.label_selector = o->agent_selector};
    /* the agents' namespace only: a tenant can give a pod of its own the
     * agents' label, and its /metrics would then be read as an agent's */
    char list_path[128];
    snprintf(list_path, sizeof(list_path), "/api/v1/namespaces/%s/pods", o->agent_namespace);
    if (gv_kube_list(kube, list_path, &lo, &agents, &err) != GV_OK) {
        *rc = kc_kube_failure(&err);
        fprintf(stderr, "kubectl-gpuvisor: %s\n", err.msg);
        if (*rc == KC_FORBIDDEN)
            fprintf(stderr, "kubectl-gpuvisor: top needs list on pods in all namespaces and get on "
                            "pods/proxy for the gpuvisor-node pods (ClusterRole gpuvisor-viewer "
                            "in deploy/monitoring)\n");
        return -1;
    }
    int ok = 0, seen = 0;
    size_t i;
    json_t *pod;
    json_array_foreach(json_object_get(agents, "items"), i, pod)
    {
        const char *ns =
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "namespace"));
        const char *name =
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
        const char *node =
            json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        if (ns == NULL || name == NULL)
            continue;
        seen++;
        long port = gv_usage_agent_port(pod, o->agent_port);
        if (port <= 0 || port > 65535) {
            fprintf(stderr, "kubectl-gpuvisor: warning: agent %s/%s has no port \"%s\"; skipped\n",
                    ns, name, o->agent_port ? o->agent_port : "metrics");
            continue;
        }
        char path[1024], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s:%ld/proxy/metrics", ns, name,
                 port);
        if (gv_kube_get_text(kube, path, &text, &len, &err) != GV_OK) {
            if (kc_kube_failure(&err) == KC_FORBIDDEN) {
                fprintf(stderr,
                        "kubectl-gpuvisor: %s\nkubectl-gpuvisor: top needs get on "
                        "pods/proxy for the gpuvisor-node pods\n",
                        err.msg);
                *rc = KC_FORBIDDEN;
                json_decref(agents);
                return -1;
            }
            fprintf(stderr, "kubectl-gpuvisor: warning: node %s: %s\n", node ? node : "?", err.msg);
            continue;
        }
        size_t bad = gv_usage_add_text(&sc->u, text, len, node);
        if (bad > 0)
            fprintf(stderr,
                    "kubectl-gpuvisor: warning: node %s: %zu malformed metric line(s) skipped\n",
                    node ? node : "?", bad);
        free(text);
        ok++;
    }
    json_decref(agents);
    if (seen == 0) {
        fprintf(stderr,
                "kubectl-gpuvisor: no gpuvisor-node agent pods found in namespace %s (label "
                "selector %s): is gpuvisor installed? (docs/install.md; --agent-namespace)\n",
                o->agent_namespace, o->agent_selector);
        *rc = KC_NOT_INSTALLED;
        return -1;
    }
    if (ok == 0) {
        fprintf(stderr, "kubectl-gpuvisor: none of the %d agent(s) answered\n", seen);
        *rc = KC_ERR;
        return -1;
    }
    return ok;
}

/* ---- sorting ----------------------------------------------------------- */

static const char *g_sort;

static double mem_pct(const struct gv_usage_row *r)
{
    return r->limit > 0 ? r->used / r->limit : 0;
}

static int cmp_rows(const void *a, const void *b)
{
    const struct gv_usage_row *x = a, *y = b;
    double dx = 0, dy = 0;
    if (strcmp(g_sort, "memory") == 0) {
        dx = x->pod[0] ? x->used : x->fb_used;
        dy = y->pod[0] ? y->used : y->fb_used;
    } else if (strcmp(g_sort, "memory%") == 0) {
        dx = mem_pct(x);
        dy = mem_pct(y);
    } else if (strcmp(g_sort, "share") == 0) {
        dx = x->share;
        dy = y->share;
    } else if (strcmp(g_sort, "util") == 0) {
        dx = x->util;
        dy = y->util;
    }
    if (dx != dy)
        return dx < dy ? 1 : -1; /* largest first */
    int c = strcmp(x->node, y->node);
    if (c == 0)
        c = strcmp(x->ns, y->ns);
    if (c == 0)
        c = strcmp(x->pod, y->pod);
    if (c == 0)
        c = strcmp(x->ctr, y->ctr);
    if (c == 0)
        c = x->index < y->index ? -1 : x->index > y->index;
    return c ? c : strcmp(x->uuid, y->uuid);
}

static const char *const sort_keys[] = {"memory", "memory%", "share", "util", "name", NULL};

/* ---- rendering ------------------------------------------------------------ */

static void fmt_pct(char *b, size_t cap, bool have, double v)
{
    if (have)
        snprintf(b, cap, "%.0f%%", 100 * v);
    else
        snprintf(b, cap, "-");
}

static long gpu_index(struct gv_usage_rows *gpus, const char *uuid)
{
    const struct gv_usage_row *g = gv_usage_row_find(gpus, "", "", "", uuid);
    return g != NULL ? g->index : -1;
}

static int top_pods(const struct kc_opts *o, struct scrape *sc)
{
    const char *ns = o->all_namespaces ? NULL : (o->namespace_ ? o->namespace_ : "default");
    json_t *doc = json_array();
    struct kc_table t;
    bool wide = o->output == KC_OUT_WIDE;
    kc_table_init(&t, 9);
    kc_table_row(&t, "NAMESPACE", "POD", "CONTAINER", "NODE", "GPU", "MEMORY(USED/LIMIT)", "MEM%",
                 "SHARE(ACHIEVED/TARGET)", wide ? "UUID" : "");
    size_t shown = 0;
    for (size_t i = 0; i < sc->u.ctrs.n; i++) {
        const struct gv_usage_row *r = &sc->u.ctrs.v[i];
        if (ns != NULL && strcmp(r->ns, ns) != 0)
            continue;
        shown++;
        char gpu[32], mem[64], u[24], l[24], pct[16], share[64], a[16], tg[16];
        long gi = gpu_index(&sc->u.gpus, r->uuid);
        if (gi >= 0)
            snprintf(gpu, sizeof(gpu), "%ld", gi);
        else
            snprintf(gpu, sizeof(gpu), "%.12s", r->uuid);
        kc_fmt_mib(u, sizeof(u), r->used / MIB);
        if (r->have_limit && r->limit > 0)
            kc_fmt_mib(l, sizeof(l), r->limit / MIB);
        else
            snprintf(l, sizeof(l), "none");
        snprintf(mem, sizeof(mem), "%s/%s", r->have_used ? u : "-", l);
        fmt_pct(pct, sizeof(pct), r->have_used && r->limit > 0, mem_pct(r));
        fmt_pct(a, sizeof(a), r->have_share, r->share);
        if (!r->have_target)
            snprintf(tg, sizeof(tg), "-");
        else if (r->target >= 1)
            snprintf(tg, sizeof(tg), "100%%"); /* the agent's 1: whole GPU or no limit */
        else
            fmt_pct(tg, sizeof(tg), true, r->target);
        snprintf(share, sizeof(share), "%s/%s", a, tg);
        kc_table_row(&t, r->ns, r->pod, r->ctr, r->node, gpu, mem, pct, share, wide ? r->uuid : "");
        json_t *j =
            json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "namespace", r->ns, "pod", r->pod, "container",
                      r->ctr, "node", r->node, "uuid", r->uuid, "gpu", (json_int_t)gi);
        if (r->have_used)
            json_object_set_new(j, "memoryUsedBytes", json_real(r->used));
        if (r->have_limit)
            json_object_set_new(j, "memoryLimitBytes", json_real(r->limit));
        if (r->have_share)
            json_object_set_new(j, "shareAchieved", json_real(r->share));
        if (r->have_target)
            json_object_set_new(j, "shareTarget", json_real(r->target));
        json_array_append_new(doc, j);
    }
    int rc = KC_OK;
    if (o->output == KC_OUT_JSON || o->output == KC_OUT_YAML)
        rc = kc_emit(doc, o->output, o->out) == 0 ? KC_OK : KC_ERR;
    else if (shown == 0)
        fprintf(o->out, "No GPU containers found in %s%s.\n", ns ? "namespace " : "all namespaces",
                ns ? ns : "");
    else
        kc_table_print(&t, o->out);
    kc_table_free(&t);
    json_decref(doc);
    return rc;
}

static int top_gpus(const struct kc_opts *o, struct scrape *sc, bool by_node)
{
    json_t *doc = json_array();
    struct kc_table t;
    kc_table_init(&t, by_node ? 5 : 7);
    if (by_node)
        kc_table_row(&t, "NODE", "GPUS", "UTIL", "MEMORY(USED/TOTAL)", "CONTAINERS");
    else
        kc_table_row(&t, "NODE", "GPU", "MODEL", "UTIL", "MEMORY(USED/TOTAL)", "CONTAINERS",
                     o->output == KC_OUT_WIDE ? "UUID" : "");
    struct gv_usage_rows nodes = {0};
    json_t *per_gpu = json_object(); /* uuid (40 characters) -> containers on it */
    for (size_t k = 0; per_gpu != NULL && k < sc->u.ctrs.n; k++) {
        char u[41];
        snprintf(u, sizeof(u), "%s", sc->u.ctrs.v[k].uuid);
        json_object_set_new(per_gpu, u,
                            json_integer(json_integer_value(json_object_get(per_gpu, u)) + 1));
    }
    for (size_t i = 0; i < sc->u.gpus.n; i++) {
        struct gv_usage_row *g = &sc->u.gpus.v[i];
        char u[41];
        snprintf(u, sizeof(u), "%s", g->uuid);
        size_t nctr = (size_t)json_integer_value(json_object_get(per_gpu, u));
        if (by_node) {
            struct gv_usage_row *n = gv_usage_row_get(&nodes, "", "", "", g->node);
            if (n == NULL)
                continue;
            gv_usage_row_set_node(n, g->node);
            n->index++; /* GPUs (starts at -1) */
            n->util += g->util;
            n->fb_used += g->fb_used;
            n->fb_total += g->fb_total;
            n->used += (double)nctr;
            continue;
        }
        char gi[24], util[16], mem[64], a[24], b[24], c[16];
        snprintf(gi, sizeof(gi), "%ld", g->index);
        snprintf(util, sizeof(util), g->have_util ? "%.0f%%" : "-", g->util);
        kc_fmt_mib(a, sizeof(a), g->fb_used);
        kc_fmt_mib(b, sizeof(b), g->fb_total);
        snprintf(mem, sizeof(mem), "%s/%s", g->have_fb ? a : "-", g->fb_total > 0 ? b : "-");
        snprintf(c, sizeof(c), "%zu", nctr);
        kc_table_row(&t, g->node, gi, g->model, util, mem, c,
                     o->output == KC_OUT_WIDE ? g->uuid : "");
        json_array_append_new(doc, json_pack("{s:s,s:I,s:s,s:s,s:f,s:f,s:f,s:I}", "node", g->node,
                                             "index", (json_int_t)g->index, "uuid", g->uuid,
                                             "model", g->model, "utilPercent", g->util,
                                             "memoryUsedMiB", g->fb_used, "memoryTotalMiB",
                                             g->fb_total, "containers", (json_int_t)nctr));
    }
    if (by_node) {
        for (size_t i = 0; i < nodes.n; i++) {
            struct gv_usage_row *n = &nodes.v[i];
            n->util /= (double)(n->index + 1); /* mean over the node's GPUs */
        }
        if (nodes.n > 0)
            qsort(nodes.v, nodes.n, sizeof(*nodes.v), cmp_rows);
        for (size_t i = 0; i < nodes.n; i++) {
            struct gv_usage_row *n = &nodes.v[i];
            char gi[24], util[16], mem[64], a[24], b[24], c[16];
            snprintf(gi, sizeof(gi), "%ld", n->index + 1);
            snprintf(util, sizeof(util), "%.0f%%", n->util);
            kc_fmt_mib(a, sizeof(a), n->fb_used);
            kc_fmt_mib(b, sizeof(b), n->fb_total);
            snprintf(mem, sizeof(mem), "%s/%s", a, n->fb_total > 0 ? b : "-");
            snprintf(c, sizeof(c), "%.0f", n->used);
            kc_table_row(&t, n->node, gi, util, mem, c);
            json_array_append_new(doc,
                                  json_pack("{s:s,s:I,s:f,s:f,s:f,s:I}", "node", n->node, "gpus",
                                            (json_int_t)(n->index + 1), "utilPercent", n->util,
                                            "memoryUsedMiB", n->fb_used, "memoryTotalMiB",
                                            n->fb_total, "containers", (json_int_t)n->used));
        }
    }
    gv_usage_rows_free(&nodes);
    json_decref(per_gpu);
    int rc = KC_OK;
    if (o->output == KC_OUT_JSON || o->output == KC_OUT_YAML)
        rc = kc_emit(doc, o->output, o->out) == 0 ? KC_OK : KC_ERR;
    else
        kc_table_print(&t, o->out);
    kc_table_free(&t);
    json_decref(doc);
    return rc;
}

int kc_top(struct gv_kube_client *kube, const struct kc_opts *o, const char *what)
{
    if (what == NULL)
        what = "pods";
    bool pods = strcmp(what, "pods") == 0 || strcmp(what, "pod") == 0;
    bool gpus = strcmp(what, "gpus") == 0 || strcmp(what, "gpu") == 0;
    bool nodes = strcmp(what, "nodes") == 0 || strcmp(what, "node") == 0;
    if (!pods && !gpus && !nodes) {
        fprintf(stderr, "kubectl-gpuvisor: top: unknown resource \"%s\" (pods, nodes or gpus)\n",
                what);
        return KC_USAGE;
    }
    g_sort = o->sort ? o->sort : (pods ? "memory" : "util");
    bool known = false;
    for (size_t i = 0; sort_keys[i] != NULL; i++)
        known = known || strcmp(g_sort, sort_keys[i]) == 0;
    if (!known) {
        fprintf(stderr, "kubectl-gpuvisor: --sort %s: use memory, memory%%, share, util or name\n",
                g_sort);
        return KC_USAGE;
    }
    struct scrape sc = {0};
    int rc = KC_OK;
    if (scrape_all(kube, o, &sc, &rc) >= 0) {
        if (sc.u.ctrs.n > 0)
            qsort(sc.u.ctrs.v, sc.u.ctrs.n, sizeof(*sc.u.ctrs.v), cmp_rows);
        if (sc.u.gpus.n > 0)
            qsort(sc.u.gpus.v, sc.u.gpus.n, sizeof(*sc.u.gpus.v), cmp_rows);
        /* the rows moved: their index follows */
        if (gv_usage_rows_reindex(&sc.u.ctrs) != 0 || gv_usage_rows_reindex(&sc.u.gpus) != 0) {
            fprintf(stderr, "kubectl-gpuvisor: out of memory\n");
            gv_usage_free(&sc.u);
            return KC_ERR;
        }
        rc = pods ? top_pods(o, &sc) : top_gpus(o, &sc, nodes);
    }
    gv_usage_free(&sc.u);
    return rc;
}
