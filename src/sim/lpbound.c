/*
 * A lower bound on the unallocated GPU share that ANY placement of a given
 * set of pods must leave: the linear-programming relaxation of the offline
 * packing, solved with GLPK (docs/simulate.md, "LP bound", which proves it).
 *
 * Placing pods is an integer program over (pod, node, GPUs).  Relaxed here:
 *
 *   - Pods are grouped into classes (identical requests) and nodes into
 *     types (identical CPU, memory and GPUs).  x[c][t] >= 0 is how many pods
 *     of class c go to nodes of type t, in any fraction.  Averaging any
 *     per-node solution over the nodes of a type gives one of these, so the
 *     aggregation loses nothing against the per-node relaxation.
 *   - Each type's resources are summed over its nodes and GPUs: CPU, memory,
 *     GPU compute (1000 milli per GPU), GPU memory, task slots.
 *   - x[c][t] exists only where a pod of c fits on an empty node of t (the
 *     engine decides: model constraints, GPU count, CPU, memory).
 *   - Integrality, where it is cheap: dual feasible functions (Fekete and
 *     Schepers 2001).  A function u on [0,1] with "sum x_i <= 1 implies sum
 *     u(x_i) <= 1" turns every GPU's (and every node's) capacity into one
 *     more valid row: sum over the pods on a GPU of u(milli / 1000) <= 1,
 *     so per type sum_c k_c u(r_c) x[c][t] <= GPUs of t.  With u = 1 above
 *     1 - e, x in between and 0 below e, an 810-milli task counts as a
 *     whole GPU unless tasks of at most 190 milli fill the rest.  The same on
 *     nodes for GPU share, CPU and memory.
 *
 * Objective: maximise the allocated GPU request (the metric's milli).  Its
 * optimum bounds from above what any placement (online or offline)
 * allocates; 100 - that in % of capacity bounds the unallocated share from
 * below.  Pods asking no GPU are left out: dropping pods only relaxes.
 * UUID constraints, NUMA binding and mutex are relaxed away too.
 */
#include <glpk.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sim/sim_internal.h"

/* Thresholds of the dual feasible functions per dimension. */
#define LP_MAX_EPS 24
#define LP_FS_K 4 /* Fekete-Schepers u^(k), k = 1..LP_FS_K */

static double lp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct lp_type {
    size_t node;      /* representative */
    double count;     /* nodes */
    double gpus;      /* usable GPUs per node (healthy) */
    double tasks;     /* task slots per node */
    double gpu_mem;   /* GPU memory per node, MiB */
    uint64_t min_gpu_mem;
};

struct lp_class {
    size_t pod;   /* representative template */
    double count; /* arrivals */
};

static bool same_str(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

static bool same_request(const struct gv_alloc_request *x, const struct gv_alloc_request *y)
{
    if (x->cpu_milli != y->cpu_milli || x->mem_mib != y->mem_mib ||
        x->n_containers != y->n_containers)
        return false;
    for (uint32_t i = 0; i < x->n_containers; i++) {
        const struct gv_alloc_container_req *a = &x->containers[i], *b = &y->containers[i];
        if (a->num_gpu != b->num_gpu || a->milli != b->milli || a->mem != b->mem ||
            a->mem_kind != b->mem_kind)
            return false;
    }
    return same_str(x->constraint[GV_ALLOC_USE_TYPE], y->constraint[GV_ALLOC_USE_TYPE]) &&
           same_str(x->constraint[GV_ALLOC_NOUSE_TYPE], y->constraint[GV_ALLOC_NOUSE_TYPE]);
}

static bool same_node(const struct gv_alloc_node_spec *a, const struct gv_alloc_node_spec *b)
{
    if (a->cpu_milli != b->cpu_milli || a->mem_mib != b->mem_mib || a->n_gpus != b->n_gpus)
        return false;
    for (size_t g = 0; g < a->n_gpus; g++) {
        const struct gv_alloc_gpu_spec *x = &a->gpus[g], *y = &b->gpus[g];
        if (x->mem_mib != y->mem_mib || x->split != y->split || x->healthy != y->healthy ||
            x->mode != y->mode || strcasecmp(x->model ? x->model : "", y->model ? y->model : ""))
            return false;
    }
    return true;
}

/* Growable GLPK sparse matrix (1-based, as glp_load_matrix wants). */
struct lp_mat {
    int *ia, *ja;
    double *ar;
    size_t n, cap;
    bool oom;
};

static void mat_add(struct lp_mat *m, int row, int col, double v)
{
    if (v == 0 || m->oom)
        return;
    if (m->n + 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 4096;
        int *ia = realloc(m->ia, nc * sizeof(*ia));
        int *ja = ia ? realloc(m->ja, nc * sizeof(*ja)) : NULL;
        double *ar = ja ? realloc(m->ar, nc * sizeof(*ar)) : NULL;
        if (ia)
            m->ia = ia;
        if (ja)
            m->ja = ja;
        if (ar == NULL) {
            m->oom = true;
            return;
        }
        m->ar = ar;
        m->cap = nc;
    }
    m->n++;
    m->ia[m->n] = row;
    m->ja[m->n] = col;
    m->ar[m->n] = v;
}

/*
 * The dual feasible functions, on an item of size num/den of a capacity
 * (0 <= num <= den), exact in integers where a threshold is compared.
 * kind 0: u_e (e = eps/1000 <= 1/2): 1 above 1 - e, x from e to 1 - e, 0
 * below e.  kind 1: Fekete-Schepers u^(k): x when (k+1)x is an integer,
 * else floor((k+1)x)/k.
 */
static double dff(int kind, uint64_t param, uint64_t num, uint64_t den)
{
    if (den == 0)
        return 0;
    if (num >= den)
        return 1.0;
    double x = (double)num / (double)den;
    if (kind == 0) {
        if (num * 1000 > (1000 - param) * den)
            return 1.0;
        return num * 1000 < param * den ? 0.0 : x;
    }
    uint64_t k = param;
    if (((k + 1) * num) % den == 0)
        return x;
    return (double)(((k + 1) * num) / den) / (double)k;
}

/* Thresholds e (in 1/1000) for u_e from the sizes that occur: e = a size
 * and e = 1000 - a size, each at most 500; at most LP_MAX_EPS of them,
 * evenly spread when there are more. */
static size_t eps_from_sizes(const uint8_t *seen, uint64_t *eps)
{
    uint64_t all[501];
    size_t n = 0;
    for (uint64_t e = 1; e <= 500; e++)
        if (seen[e] || seen[1000 - e])
            all[n++] = e;
    if (n <= LP_MAX_EPS) {
        memcpy(eps, all, n * sizeof(*eps));
        return n;
    }
    for (size_t i = 0; i < LP_MAX_EPS; i++)
        eps[i] = all[i * n / LP_MAX_EPS];
    return LP_MAX_EPS;
}

gv_status sim_lp_bound(const struct gv_sim_trace *t, const size_t *arr, size_t n,
                       struct sim_lp *out, struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    double t0 = lp_now();
    struct lp_type *ty = calloc(t->n_nodes ? t->n_nodes : 1, sizeof(*ty));
    struct lp_class *cl = calloc(n ? n : 1, sizeof(*cl));
    size_t *tmpl_class = malloc((t->n_pods ? t->n_pods : 1) * sizeof(*tmpl_class));
    int *col_of = NULL;
    struct lp_mat m = {0};
    struct gv_alloc_cluster *c = NULL;
    struct gv_alloc_assignment *a = malloc(sizeof(*a));
    const char **names = NULL;
    glp_prob *lp = NULL;
    size_t nt = 0, nc = 0;
    gv_status rc = GV_OK;
    if (ty == NULL || cl == NULL || tmpl_class == NULL || a == NULL)
        goto oom;
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    /* Node types. */
    for (size_t i = 0; i < t->n_nodes; i++) {
        const struct gv_alloc_node_spec *s = &t->nodes[i].spec;
        size_t k = 0;
        while (k < nt && !same_node(&t->nodes[ty[k].node].spec, s))
            k++;
        if (k == nt) {
            ty[nt] = (struct lp_type){.node = i, .min_gpu_mem = UINT64_MAX};
            for (size_t g = 0; g < s->n_gpus; g++) {
                if (!s->gpus[g].healthy)
                    continue;
                ty[nt].gpus += 1;
                ty[nt].tasks += s->gpus[g].split ? s->gpus[g].split : cfg.default_split;
                ty[nt].gpu_mem += (double)s->gpus[g].mem_mib;
                if (s->gpus[g].mem_mib < ty[nt].min_gpu_mem)
                    ty[nt].min_gpu_mem = s->gpus[g].mem_mib;
            }
            nt++;
        }
        ty[k].count += 1;
    }
    /* Pod classes (GPU pods only). */
    for (size_t p = 0; p < t->n_pods; p++)
        tmpl_class[p] = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t p = arr[i];
        const struct gv_alloc_request *r = t->pods[p];
        if (t->wreq[p] != NULL || sim_pod_milli(r) == 0)
            continue;
        if (tmpl_class[p] == SIZE_MAX) {
            size_t k = 0;
            while (k < nc && !same_request(t->pods[cl[k].pod], r))
                k++;
            if (k == nc)
                cl[nc++] = (struct lp_class){p, 0};
            tmpl_class[p] = k;
        }
        cl[tmpl_class[p]].count += 1;
    }
    out->classes = nc;
    out->types = nt;
    if (nc == 0 || nt == 0)
        goto solved; /* nothing to allocate: the bound is 0 milli */
    /* Which class fits on an empty node of which type: one node per type
     * in an engine cluster, one candidate list each. */
    cfg.node_policy = GV_ALLOC_POLICY_BINPACK;
    if ((rc = gv_alloc_cluster_new(&cfg, &c, err)) != GV_OK)
        goto done;
    if ((names = calloc(nt, sizeof(*names))) == NULL ||
        (col_of = malloc(nc * nt * sizeof(*col_of))) == NULL)
        goto oom;
    for (size_t k = 0; k < nt; k++) {
        names[k] = t->nodes[ty[k].node].spec.name;
        if ((rc = gv_alloc_node_upsert(c, &t->nodes[ty[k].node].spec, err)) != GV_OK)
            goto done;
    }
    int cols = 0;
    uint8_t seen[1001] = {0}; /* per-GPU compute sizes that occur */
    for (size_t j = 0; j < nc; j++) {
        struct gv_alloc_request q = *t->pods[cl[j].pod]; /* relaxed copy */
        q.constraint[GV_ALLOC_USE_UUID] = q.constraint[GV_ALLOC_NOUSE_UUID] = NULL;
        q.numa_bind = false;
        q.gpu_mutex = false;
        snprintf(q.uid, sizeof(q.uid), "lp%zu", j);
        for (uint32_t i = 0; i < q.n_containers; i++)
            seen[q.containers[i].milli > 1000 ? 1000 : q.containers[i].milli] = 1;
        for (size_t k = 0; k < nt; k++)
            col_of[j * nt + k] =
                gv_alloc_pick(c, &q, &names[k], 1, a, NULL) == GV_OK ? ++cols : 0;
    }
    out->columns = (size_t)cols;
    if (cols == 0)
        goto solved;
    uint64_t eps[LP_MAX_EPS];
    size_t n_eps = eps_from_sizes(seen, eps);
    uint64_t node_eps[] = {100, 125, 167, 200, 250, 334, 400, 500};
    size_t n_node_eps = sizeof(node_eps) / sizeof(node_eps[0]);
    lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MAX);
    glp_add_cols(lp, cols);
    int row = 0;
    /* one row per class: no more pods than arrived */
    glp_add_rows(lp, (int)nc);
    for (size_t j = 0; j < nc; j++) {
        glp_set_row_bnds(lp, ++row, GLP_UP, 0, cl[j].count);
        const struct gv_alloc_request *r = t->pods[cl[j].pod];
        for (size_t k = 0; k < nt; k++) {
            int col = col_of[j * nt + k];
            if (col == 0)
                continue;
            glp_set_col_bnds(lp, col, GLP_LO, 0, 0);
            glp_set_obj_coef(lp, col, (double)sim_pod_milli(r));
            mat_add(&m, row, col, 1);
        }
    }
    /* per type: resources, then the dual-feasible-function rows */
    for (size_t k = 0; k < nt; k++) {
        const struct gv_alloc_node_spec *s = &t->nodes[ty[k].node].spec;
        double N = ty[k].count;
        /* dims 0 CPU, 1 memory, 2 GPU compute, 3 GPU memory, 4 tasks */
        int base = row;
        int per = 5 + (int)(n_eps + LP_FS_K) + 3 * (int)(n_node_eps + LP_FS_K);
        glp_add_rows(lp, per);
        glp_set_row_bnds(lp, ++row, GLP_UP, 0, N * (double)s->cpu_milli);
        glp_set_row_bnds(lp, ++row, GLP_UP, 0, N * (double)s->mem_mib);
        glp_set_row_bnds(lp, ++row, GLP_UP, 0, N * ty[k].gpus * GV_ALLOC_MILLI);
        glp_set_row_bnds(lp, ++row, GLP_UP, 0, N * ty[k].gpu_mem);
        glp_set_row_bnds(lp, ++row, GLP_UP, 0, N * ty[k].tasks);
        for (size_t e = 0; e < n_eps + LP_FS_K; e++) /* per GPU */
            glp_set_row_bnds(lp, ++row, GLP_UP, 0, N * ty[k].gpus);
        for (size_t e = 0; e < 3 * (n_node_eps + LP_FS_K); e++) /* per node */
            glp_set_row_bnds(lp, ++row, GLP_UP, 0, N);
        for (size_t j = 0; j < nc; j++) {
            int col = col_of[j * nt + k];
            if (col == 0)
                continue;
            const struct gv_alloc_request *r = t->pods[cl[j].pod];
            int rr = base;
            /* host CPU and memory are checked only where declared */
            mat_add(&m, ++rr, col, s->cpu_milli > 0 ? (double)r->cpu_milli : 0);
            mat_add(&m, ++rr, col, s->mem_mib > 0 ? (double)r->mem_mib : 0);
            double milli = 0, gmem = 0, tasks = 0, gu[LP_MAX_EPS + LP_FS_K] = {0};
            for (uint32_t i = 0; i < r->n_containers; i++) {
                const struct gv_alloc_container_req *x = &r->containers[i];
                uint64_t mi = x->milli > 1000 ? 1000 : x->milli;
                milli += (double)x->num_gpu * (double)mi;
                gmem += (double)x->num_gpu *
                        (double)(x->mem_kind == GV_ALLOC_MEM_PCT
                                     ? ty[k].min_gpu_mem * (x->mem > 100 ? 100 : x->mem) / 100
                                     : x->mem);
                tasks += x->num_gpu;
                for (size_t e = 0; e < n_eps; e++)
                    gu[e] += x->num_gpu * dff(0, eps[e], mi, 1000);
                for (size_t e = 0; e < LP_FS_K; e++)
                    gu[n_eps + e] += x->num_gpu * dff(1, e + 1, mi, 1000);
            }
            mat_add(&m, ++rr, col, milli);
            mat_add(&m, ++rr, col, gmem);
            mat_add(&m, ++rr, col, tasks);
            for (size_t e = 0; e < n_eps + LP_FS_K; e++)
                mat_add(&m, ++rr, col, gu[e]);
            /* node level: the pod's share of the node's GPU compute, CPU
             * and memory (a dimension the node does not declare weighs 0) */
            uint64_t num[3] = {(uint64_t)milli, (uint64_t)r->cpu_milli, (uint64_t)r->mem_mib};
            uint64_t den[3] = {(uint64_t)(ty[k].gpus * GV_ALLOC_MILLI),
                               s->cpu_milli > 0 ? (uint64_t)s->cpu_milli : 0,
                               s->mem_mib > 0 ? (uint64_t)s->mem_mib : 0};
            for (int d = 0; d < 3; d++) {
                for (size_t e = 0; e < n_node_eps; e++)
                    mat_add(&m, ++rr, col, dff(0, node_eps[e], num[d], den[d]));
                for (size_t e = 0; e < LP_FS_K; e++)
                    mat_add(&m, ++rr, col, dff(1, e + 1, num[d], den[d]));
            }
        }
    }
    out->rows = (size_t)row;
    if (m.oom)
        goto oom;
    glp_load_matrix(lp, (int)m.n, m.ia, m.ja, m.ar);
    glp_smcp parm;
    glp_init_smcp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF; /* 4-5 times faster here than with it: the
                               * problem is small and sparse already */
    parm.tm_lim = 60000;
    if (glp_simplex(lp, &parm) != 0 || glp_get_status(lp) != GLP_OPT) {
        rc = gv_error_set(err, GV_EINTERNAL, "LP bound: GLPK found no optimum");
        goto done;
    }
    /* a hair looser than GLPK's optimum: its tolerances must not make the
     * bound claim more than is true */
    out->alloc_milli = glp_get_obj_val(lp) * (1 + 1e-9) + 1e-6;
solved:
    out->ok = true;
    out->seconds = lp_now() - t0;
    goto done;
oom:
    rc = gv_error_set(err, GV_ENOMEM, "out of memory");
done:
    if (lp != NULL) {
        glp_delete_prob(lp);
        glp_free_env(); /* GLPK's per-thread environment, so nothing leaks */
    }
    gv_alloc_cluster_free(c);
    free(m.ia);
    free(m.ja);
    free(m.ar);
    free(names);
    free(col_of);
    free(a);
    free(tmpl_class);
    free(cl);
    free(ty);
    return rc;
}
