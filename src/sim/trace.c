/*
 * Trace storage and readers (openb CSV, Kubernetes JSON).  Readers parse
 * into a scratch trace and move it into place only when the whole input is
 * good, so a bad file leaves nothing half-loaded.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/gv_file.h"
#include "common/gv_hash.h"
#include "contracts/podspec.h"
#include "sim/sim_internal.h"

gv_status gv_sim_trace_new(struct gv_sim_trace **out, struct gv_error *err)
{
    *out = calloc(1, sizeof(**out));
    return *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
}

static void node_free(struct sim_node *n)
{
    for (size_t i = 0; i < n->spec.n_gpus; i++) {
        free((char *)n->spec.gpus[i].uuid);
        free((char *)n->spec.gpus[i].model);
    }
    free((struct gv_alloc_gpu_spec *)n->spec.gpus);
    free((char *)n->spec.name);
    free(n->whole);
}

void sim_trace_clear(struct gv_sim_trace *t)
{
    for (size_t i = 0; i < t->n_nodes; i++)
        node_free(&t->nodes[i]);
    free(t->nodes);
    for (size_t i = 0; i < t->n_pods; i++) {
        gv_alloc_request_free(t->pods[i]);
        free(t->wreq ? t->wreq[i] : NULL);
    }
    free(t->pods);
    free(t->wreq);
    free(t->prio);
    free(t->name_set);
    memset(t, 0, sizeof(*t));
}

void gv_sim_trace_free(struct gv_sim_trace *t)
{
    if (t == NULL)
        return;
    sim_trace_clear(t);
    free(t);
}

size_t gv_sim_trace_nodes(const struct gv_sim_trace *t) { return t->n_nodes; }
size_t gv_sim_trace_pods(const struct gv_sim_trace *t) { return t->n_pods; }

uint64_t gv_sim_trace_gpu_milli(const struct gv_sim_trace *t)
{
    uint64_t m = 0;
    for (size_t i = 0; i < t->n_nodes; i++)
        m += (uint64_t)t->nodes[i].spec.n_gpus * GV_ALLOC_MILLI;
    return m;
}

uint64_t sim_pod_milli(const struct gv_alloc_request *r)
{
    uint64_t m = 0;
    for (uint32_t i = 0; i < r->n_containers; i++) {
        /* a request without a compute share still occupies its GPUs'
         * memory: count it as a whole GPU when it takes all the memory */
        uint32_t milli = r->containers[i].milli;
        if (milli == 0 && r->containers[i].mem_kind == GV_ALLOC_MEM_PCT &&
            r->containers[i].mem >= 100)
            milli = GV_ALLOC_MILLI;
        m += (uint64_t)r->containers[i].num_gpu * milli;
    }
    return m;
}

uint64_t gv_sim_trace_request_milli(const struct gv_sim_trace *t)
{
    uint64_t m = 0;
    for (size_t i = 0; i < t->n_pods; i++)
        m += sim_pod_milli(t->pods[i]);
    return m;
}

/* Trace GPUs have no task limit: compute share is the only bound. */
#define SIM_SPLIT GV_ALLOC_MILLI

/* --- building blocks ----------------------------------------------------- */

gv_status sim_add_node_spec(struct gv_sim_trace *t, const struct gv_alloc_node_spec *spec,
                            struct gv_error *err)
{
    if (t->n_nodes == t->cap_nodes) {
        size_t ncap = t->cap_nodes ? t->cap_nodes * 2 : 256;
        struct sim_node *nn = realloc(t->nodes, ncap * sizeof(*nn));
        if (nn == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        t->nodes = nn;
        t->cap_nodes = ncap;
    }
    struct sim_node *n = &t->nodes[t->n_nodes];
    memset(n, 0, sizeof(*n));
    struct gv_alloc_gpu_spec *g = calloc(spec->n_gpus ? spec->n_gpus : 1, sizeof(*g));
    char *nm = strdup(spec->name);
    if (g == NULL || nm == NULL) {
        free(g);
        free(nm);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    n->spec = (struct gv_alloc_node_spec){nm, spec->cpu_milli, spec->mem_mib, NULL, 0, g, 0};
    for (size_t i = 0; i < spec->n_gpus; i++) {
        g[i] = spec->gpus[i];
        g[i].uuid = strdup(spec->gpus[i].uuid);
        g[i].model = strdup(spec->gpus[i].model ? spec->gpus[i].model : "");
        n->spec.n_gpus = i + 1;
        if (g[i].uuid == NULL || g[i].model == NULL) {
            node_free(n);
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        }
    }
    t->n_nodes++;
    return GV_OK;
}

gv_status sim_add_node(struct gv_sim_trace *t, const char *name, int64_t cpu, int64_t mem,
                       uint32_t n_gpus, const char *model, uint64_t gpu_mem,
                       struct gv_error *err)
{
    struct gv_alloc_gpu_spec g[GV_ALLOC_MAX_NODE_GPUS];
    char uuids[GV_ALLOC_MAX_NODE_GPUS][GV_ALLOC_UUID_MAX];
    if (n_gpus > GV_ALLOC_MAX_NODE_GPUS)
        return gv_error_set(err, GV_EINVAL, "node %s: too many GPUs", name);
    for (uint32_t i = 0; i < n_gpus; i++) {
        snprintf(uuids[i], sizeof(uuids[i]), "%.80s-gpu%u", name, i);
        g[i] = (struct gv_alloc_gpu_spec){uuids[i], i, model, gpu_mem, SIM_SPLIT,
                                          (int32_t)(i * 2 / n_gpus), true, GV_ALLOC_GPU_SHARED};
    }
    struct gv_alloc_node_spec spec = {name, cpu, mem, NULL, 0, g, n_gpus};
    return sim_add_node_spec(t, &spec, err);
}

gv_status sim_node_set_links(struct gv_sim_trace *t, size_t i, const uint32_t *nvlink,
                             const uint32_t *pcie, size_t n, struct gv_error *err)
{
    struct sim_node *nd = &t->nodes[i];
    if (n != nd->spec.n_gpus)
        return gv_error_set(err, GV_EINVAL, "node %s: %zu link entries for %zu GPUs",
                            nd->spec.name, n, nd->spec.n_gpus);
    for (size_t g = 0; g < n; g++)
        if ((nvlink != NULL && nvlink[g] > UINT16_MAX) || (pcie != NULL && pcie[g] > UINT16_MAX))
            return gv_error_set(err, GV_ERANGE, "node %s: GPU %zu: group id out of range",
                                nd->spec.name, g);
    bool any = false;
    for (size_t g = 0; g < n; g++) {
        nd->nvlink[g] = (uint16_t)(nvlink != NULL ? nvlink[g] : 0);
        nd->pcie[g] = (uint16_t)(pcie != NULL ? pcie[g] : 0);
        any = any || nd->nvlink[g] != 0 || nd->pcie[g] != 0;
    }
    nd->links = any;
    return GV_OK;
}

gv_status gv_sim_set_topology(struct gv_sim_trace *t, const char *spec, struct gv_error *err)
{
    uint64_t nv = 0, pc = 0;
    bool seen_nv = false, seen_pc = false;
    const struct sim_kv keys[] = {{"nvlink", &nv, GV_ALLOC_MAX_NODE_GPUS, &seen_nv},
                                  {"pcie", &pc, GV_ALLOC_MAX_NODE_GPUS, &seen_pc}};
    if (sim_parse_kv("topology", spec, keys, 2, err) != GV_OK) {
        if (err != NULL) {
            size_t l = strlen(err->msg);
            snprintf(err->msg + l, sizeof(err->msg) - l,
                     "; want nvlink=N,pcie=M with N, M in 0..%d, each at most once (e.g. "
                     "nvlink=2,pcie=4)",
                     GV_ALLOC_MAX_NODE_GPUS);
        }
        return GV_EINVAL;
    }
    if (!seen_nv && !seen_pc)
        return gv_error_set(err, GV_EINVAL, "topology \"%.80s\": empty (e.g. nvlink=2,pcie=4)",
                            spec);
    for (size_t i = 0; i < t->n_nodes; i++) {
        struct sim_node *nd = &t->nodes[i];
        if (nd->links)
            continue; /* the agent's own inventory wins */
        bool any = false;
        for (size_t g = 0; g < nd->spec.n_gpus; g++) {
            nd->nvlink[g] = (uint16_t)(nv > 1 ? 1 + g / nv * nv : 0);
            nd->pcie[g] = (uint16_t)(pc > 1 ? 1 + g / pc * pc : 0);
            any = any || nd->nvlink[g] != 0 || nd->pcie[g] != 0;
        }
        nd->links = any;
    }
    return GV_OK;
}

bool gv_sim_trace_has_topology(const struct gv_sim_trace *t)
{
    for (size_t i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].links)
            return true;
    return false;
}

gv_status sim_add_pod(struct gv_sim_trace *t, struct gv_alloc_request *r, struct gv_error *err)
{
    if (t->n_pods == t->cap_pods) {
        size_t ncap = t->cap_pods ? t->cap_pods * 2 : 1024;
        struct gv_alloc_request **np = realloc(t->pods, ncap * sizeof(*np));
        if (np != NULL)
            t->pods = np;
        struct gv_podspec_whole_req **nw = np ? realloc(t->wreq, ncap * sizeof(*nw)) : NULL;
        if (nw == NULL) {
            gv_alloc_request_free(r);
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        }
        t->wreq = nw;
        t->cap_pods = ncap;
    }
    t->wreq[t->n_pods] = NULL;
    t->pods[t->n_pods++] = r;
    return GV_OK;
}

gv_status sim_add_whole_pod(struct gv_sim_trace *t, struct gv_alloc_request *r,
                            const struct gv_podspec_whole_req *w, struct gv_error *err)
{
    struct gv_podspec_whole_req *copy = malloc(sizeof(*copy));
    if (copy == NULL) {
        gv_alloc_request_free(r);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    *copy = *w;
    gv_status rc = sim_add_pod(t, r, err);
    if (rc != GV_OK) {
        free(copy);
        return rc;
    }
    t->wreq[t->n_pods - 1] = copy;
    return GV_OK;
}

bool sim_whole_known(const struct gv_sim_trace *t, const char *name)
{
    if (gv_podspec_whole_by_name(name))
        return true;
    for (size_t i = 0; i < t->n_nodes; i++)
        for (uint32_t k = 0; k < t->nodes[i].n_whole; k++)
            if (strcmp(t->nodes[i].whole[k].resource, name) == 0)
                return true;
    return false;
}

size_t sim_whole_pods(const struct gv_sim_trace *t)
{
    size_t n = 0;
    for (size_t i = 0; t->wreq != NULL && i < t->n_pods; i++)
        n += t->wreq[i] != NULL;
    return n;
}

/* Appends src's nodes and pods to dst (src is left empty). */
static gv_status trace_move(struct gv_sim_trace *dst, struct gv_sim_trace *src,
                            struct gv_error *err)
{
    if (dst->n_nodes == 0 && dst->n_pods == 0) {
        *dst = *src;
        memset(src, 0, sizeof(*src));
        return GV_OK;
    }
    size_t nn = dst->n_nodes + src->n_nodes, np = dst->n_pods + src->n_pods;
    if (nn > dst->cap_nodes) {
        struct sim_node *x = realloc(dst->nodes, nn * sizeof(*x));
        if (x == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        dst->nodes = x;
        dst->cap_nodes = nn;
    }
    if (np > dst->cap_pods) {
        struct gv_alloc_request **x = realloc(dst->pods, np * sizeof(*x));
        if (x == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        dst->pods = x;
        struct gv_podspec_whole_req **w = realloc(dst->wreq, np * sizeof(*w));
        if (w == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        dst->wreq = w;
        dst->cap_pods = np;
    }
    if (src->n_nodes > 0)
        memcpy(dst->nodes + dst->n_nodes, src->nodes, src->n_nodes * sizeof(*src->nodes));
    if (src->prio != NULL || dst->prio != NULL) {
        /* priorities (priority.c) follow their pods; pods without one are 0 */
        int32_t *pr = calloc(np ? np : 1, sizeof(*pr));
        if (pr == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        if (dst->prio != NULL)
            memcpy(pr, dst->prio, dst->n_prio * sizeof(*pr));
        if (src->prio != NULL)
            memcpy(pr + dst->n_pods, src->prio, src->n_prio * sizeof(*pr));
        free(dst->prio);
        dst->prio = pr;
        dst->n_prio = np;
    }
    if (src->n_pods > 0) {
        memcpy(dst->pods + dst->n_pods, src->pods, src->n_pods * sizeof(*src->pods));
        memcpy(dst->wreq + dst->n_pods, src->wreq, src->n_pods * sizeof(*src->wreq));
    }
    dst->n_nodes = nn;
    dst->n_pods = np;
    src->n_nodes = src->n_pods = 0;
    sim_trace_clear(src);
    return GV_OK;
}

static bool model_known(const struct gv_sim_trace *t, const char *model, size_t len)
{
    for (size_t i = 0; i < t->n_nodes; i++)
        for (size_t g = 0; g < t->nodes[i].spec.n_gpus; g++) {
            const char *m = t->nodes[i].spec.gpus[g].model;
            if (strlen(m) == len && strncasecmp(m, model, len) == 0)
                return true;
        }
    return false;
}

/* First entry of a normalised type list that no node's model contains. */
static const char *unknown_type(const struct gv_sim_trace *t, const char *list)
{
    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < t->n_nodes && !found; i++)
            for (size_t g = 0; g < t->nodes[i].spec.n_gpus && !found; g++) {
                const char *m = t->nodes[i].spec.gpus[g].model;
                for (size_t k = 0; m[k] != '\0' && !found; k++)
                    found = strncasecmp(m + k, p, n) == 0 && strlen(m + k) >= n;
            }
        if (!found)
            return p;
        p += n;
        if (*p == ',')
            p++;
    }
    return NULL;
}

/* --- openb CSV ----------------------------------------------------------- */

/* Copies at most n bytes of s into out for an error message, control and
 * non-ASCII bytes written as \xNN, so a hostile file cannot drive the
 * terminal that shows the message.  Cut short (with "...") to fit cap. */
static const char *esc(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && s[i] != '\0'; i++) {
        unsigned char ch = (unsigned char)s[i];
        bool plain = ch >= 0x20 && ch < 0x7f && ch != '\\';
        size_t need = plain ? 1 : ch == '\\' ? 2 : 4;
        if (o + need + 4 > cap) {
            memcpy(out + o, "...", 4);
            return out;
        }
        if (plain)
            out[o++] = (char)ch;
        else if (ch == '\\')
            out[o++] = '\\', out[o++] = '\\';
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
    }
    out[o] = '\0';
    return out;
}

#define ESC_MAX 160

#define CSV_MAX_FIELDS 32

struct csv {
    const char *name;
    const char *p, *end;
    size_t line;
    char buf[4096];
    char *f[CSV_MAX_FIELDS];
    size_t nf;
};

/* Next non-empty line split on commas; false at end of input. */
static gv_status csv_next(struct csv *c, bool *more, struct gv_error *err)
{
    for (;;) {
        if (c->p >= c->end) {
            *more = false;
            return GV_OK;
        }
        const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
        const char *e = nl != NULL ? nl : c->end;
        size_t len = (size_t)(e - c->p);
        c->line++;
        if (len > 0 && c->p[len - 1] == '\r')
            len--;
        if (len >= sizeof(c->buf))
            return gv_error_set(err, GV_EPARSE, "%s:%zu: line longer than %zu bytes", c->name,
                                c->line, sizeof(c->buf) - 1);
        memcpy(c->buf, c->p, len);
        c->buf[len] = '\0';
        c->p = nl != NULL ? nl + 1 : c->end;
        if (memchr(c->buf, '\0', len) != NULL)
            return gv_error_set(err, GV_EPARSE, "%s:%zu: NUL byte in line", c->name, c->line);
        if (len == 0)
            continue;
        c->nf = 0;
        char *s = c->buf;
        for (;;) {
            if (c->nf == CSV_MAX_FIELDS)
                return gv_error_set(err, GV_EPARSE, "%s:%zu: more than %d fields", c->name,
                                    c->line, CSV_MAX_FIELDS);
            c->f[c->nf++] = s;
            char *comma = strchr(s, ',');
            if (comma == NULL)
                break;
            *comma = '\0';
            s = comma + 1;
        }
        *more = true;
        return GV_OK;
    }
}

/* Column index of each wanted header name (-1 if optional and absent). */
static gv_status csv_header(struct csv *c, const char *const *want, size_t n_want,
                            size_t n_required, int *idx, size_t *ncols, struct gv_error *err)
{
    bool more;
    gv_status rc = csv_next(c, &more, err);
    if (rc != GV_OK)
        return rc;
    if (!more)
        return gv_error_set(err, GV_EPARSE, "%s: empty file (expected a header line)", c->name);
    for (size_t w = 0; w < n_want; w++) {
        idx[w] = -1;
        for (size_t i = 0; i < c->nf; i++) {
            if (strcmp(c->f[i], want[w]) != 0)
                continue;
            /* Two columns of one name: which one holds the data is a guess,
             * and guessing wrong silently changes the workload. */
            if (idx[w] >= 0)
                return gv_error_set(err, GV_EPARSE,
                                    "%s:%zu: column \"%s\" appears twice (columns %d and %zu)",
                                    c->name, c->line, want[w], idx[w] + 1, i + 1);
            idx[w] = (int)i;
        }
        if (idx[w] < 0 && w < n_required)
            return gv_error_set(err, GV_EPARSE, "%s:%zu: missing column \"%s\"", c->name,
                                c->line, want[w]);
    }
    *ncols = c->nf;
    return GV_OK;
}

static gv_status csv_uint(const struct csv *c, int col, const char *field, uint64_t max,
                          uint64_t *out, struct gv_error *err)
{
    const char *s = c->f[col];
    uint64_t v = 0;
    char e[ESC_MAX];
    if (*s == '\0')
        return gv_error_set(err, GV_EPARSE, "%s:%zu: field %s: empty", c->name, c->line, field);
    if (*s == '-')
        return gv_error_set(err, GV_EPARSE, "%s:%zu: field %s: negative value \"%s\"",
                            c->name, c->line, field, esc(s, 32, e, sizeof(e)));
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return gv_error_set(err, GV_EPARSE, "%s:%zu: field %s: \"%s\" is not a number",
                                c->name, c->line, field, esc(s, 32, e, sizeof(e)));
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > max)
            return gv_error_set(err, GV_EPARSE, "%s:%zu: field %s: %s is above %llu",
                                c->name, c->line, field, esc(s, 32, e, sizeof(e)),
                                (unsigned long long)max);
    }
    *out = v;
    return GV_OK;
}

static gv_status csv_fields(const struct csv *c, size_t ncols, struct gv_error *err)
{
    if (c->nf != ncols)
        return gv_error_set(err, GV_EPARSE, "%s:%zu: %zu fields, header has %zu", c->name,
                            c->line, c->nf, ncols);
    return GV_OK;
}

#define CPU_MAX (UINT64_C(1) << 40)
#define MEM_MAX (UINT64_C(1) << 40)

/* Adds one data row to tmp (t: what was loaded before, for cross-checks). */
typedef gv_status (*csv_row_fn)(const struct gv_sim_trace *t, struct gv_sim_trace *tmp,
                                const struct csv *c, const int *idx, struct gv_error *err);

/* The openb CSV frame shared by node and pod lists: header, then every
 * row through row() into a scratch trace, moved into t only when all rows
 * were good.  what names the rows for the "only a header" error. */
static gv_status csv_parse(struct gv_sim_trace *t, const char *name, const char *buf, size_t len,
                           const char *const *cols, size_t n_cols, size_t n_required,
                           csv_row_fn row, const char *what, struct gv_error *err)
{
    struct csv *c = calloc(1, sizeof(*c));
    struct gv_sim_trace tmp = {0};
    int idx[CSV_MAX_FIELDS];
    size_t ncols = 0;
    bool more = true;
    if (c == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    /* A UTF-8 byte order mark (spreadsheet exports write one) is not part
     * of the first column's name. */
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0) {
        buf += 3;
        len -= 3;
    }
    *c = (struct csv){.name = name, .p = buf, .end = buf + len};
    gv_status rc = csv_header(c, cols, n_cols, n_required, idx, &ncols, err);
    while (rc == GV_OK && (rc = csv_next(c, &more, err)) == GV_OK && more)
        if ((rc = csv_fields(c, ncols, err)) == GV_OK)
            rc = row(t, &tmp, c, idx, err);
    free(tmp.name_set); /* the rows' duplicate check is done */
    tmp.name_set = NULL;
    tmp.name_set_cap = 0;
    if (rc == GV_OK && tmp.n_nodes == 0 && tmp.n_pods == 0)
        rc = gv_error_set(err, GV_EPARSE, "%s: no %s (only a header)", name, what);
    if (rc == GV_OK)
        rc = trace_move(t, &tmp, err);
    sim_trace_clear(&tmp);
    free(c);
    return rc;
}

static const char *const node_cols[] = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};

/* Node i of t's nodes followed by tmp's. */
static const char *node_name_at(const struct gv_sim_trace *t, const struct gv_sim_trace *tmp,
                                size_t i)
{
    return i < t->n_nodes ? t->nodes[i].spec.name : tmp->nodes[i - t->n_nodes].spec.name;
}

/* Whether a node named sn was loaded before (t) or read earlier (tmp); with
 * add, files the name of tmp's last node instead.  A hash set in tmp: a scan
 * of every earlier name per row made reading n nodes O(n^2) (74 million
 * comparisons for openb x10).  False with *oom when the set cannot grow. */
static bool node_seen(const struct gv_sim_trace *t, struct gv_sim_trace *tmp, const char *sn,
                      bool add, bool *oom)
{
    size_t n = t->n_nodes + tmp->n_nodes;
    *oom = false;
    if (2 * (n + 1) > tmp->name_set_cap) {
        size_t cap = 64;
        while (cap < 4 * (n + 1))
            cap *= 2;
        uint32_t *set = calloc(cap, sizeof(*set));
        if (set == NULL || n >= UINT32_MAX) {
            free(set);
            *oom = true;
            return false;
        }
        free(tmp->name_set);
        tmp->name_set = set;
        tmp->name_set_cap = cap;
        for (size_t i = 0; i + (add ? 1 : 0) < n; i++) { /* refile; add files the last below */
            size_t j = (size_t)gv_hash_str(node_name_at(t, tmp, i)) & (cap - 1);
            while (set[j] != 0)
                j = (j + 1) & (cap - 1);
            set[j] = (uint32_t)(i + 1);
        }
    }
    const char *key = add ? node_name_at(t, tmp, n - 1) : sn;
    size_t mask = tmp->name_set_cap - 1, j = (size_t)gv_hash_str(key) & mask;
    for (; tmp->name_set[j] != 0; j = (j + 1) & mask)
        if (!add && strcmp(node_name_at(t, tmp, tmp->name_set[j] - 1), key) == 0)
            return true;
    if (add)
        tmp->name_set[j] = (uint32_t)n;
    return false;
}

static gv_status node_row(const struct gv_sim_trace *t, struct gv_sim_trace *tmp,
                          const struct csv *c, const int *idx, struct gv_error *err)
{
    uint64_t cpu, mem, gpus;
    gv_status rc;
    if ((rc = csv_uint(c, idx[1], node_cols[1], CPU_MAX, &cpu, err)) ||
        (rc = csv_uint(c, idx[2], node_cols[2], MEM_MAX, &mem, err)) ||
        (rc = csv_uint(c, idx[3], node_cols[3], GV_ALLOC_MAX_NODE_GPUS, &gpus, err)))
        return rc;
    const char *sn = c->f[idx[0]], *model = c->f[idx[4]];
    if (*sn == '\0' || strlen(sn) >= 200)
        return gv_error_set(err, GV_EPARSE, "%s:%zu: field sn: empty or too long", c->name,
                            c->line);
    if (gpus > 0 && (*model == '\0' || strlen(model) >= GV_ALLOC_MODEL_MAX))
        return gv_error_set(err, GV_EPARSE, "%s:%zu: field model: %s for a GPU node", c->name,
                            c->line, *model ? "too long" : "empty");
    bool oom;
    if (node_seen(t, tmp, sn, false, &oom)) {
        char e[ESC_MAX];
        return gv_error_set(err, GV_EPARSE, "%s:%zu: field sn: duplicate node \"%s\"", c->name,
                            c->line, esc(sn, 200, e, sizeof(e)));
    }
    if (oom || (rc = sim_add_node(tmp, sn, (int64_t)cpu, (int64_t)mem, (uint32_t)gpus, model, 0,
                                  err)) != GV_OK)
        return oom ? gv_error_set(err, GV_ENOMEM, "out of memory") : rc;
    node_seen(t, tmp, NULL, true, &oom); /* room was made by the lookup above */
    return GV_OK;
}

gv_status gv_sim_parse_openb_nodes(struct gv_sim_trace *t, const char *name, const char *buf,
                                   size_t len, struct gv_error *err)
{
    return csv_parse(t, name, buf, len, node_cols, 5, 5, node_row, "nodes", err);
}

/* Converts "A|B" into the engine's use-gputype list after checking each
 * model exists in the cluster. */
static gv_status openb_spec(const struct gv_sim_trace *t, const struct csv *c, const char *spec,
                            struct gv_alloc_request *r, struct gv_error *err)
{
    char list[1024];
    size_t o = 0;
    const char *p = spec;
    while (*p != '\0') {
        const char *bar = strchr(p, '|');
        size_t n = bar != NULL ? (size_t)(bar - p) : strlen(p);
        if (n == 0 || !model_known(t, p, n)) {
            char e[ESC_MAX];
            return gv_error_set(err, GV_EPARSE,
                                "%s:%zu: field gpu_spec: unknown GPU model \"%s\" (no node has it)",
                                c->name, c->line, esc(p, n > 64 ? 64 : n, e, sizeof(e)));
        }
        if (o + n + 2 >= sizeof(list))
            return gv_error_set(err, GV_EPARSE, "%s:%zu: field gpu_spec: too long", c->name,
                                c->line);
        if (o > 0)
            list[o++] = ',';
        memcpy(list + o, p, n);
        o += n;
        p = bar != NULL ? bar + 1 : p + n;
        if (bar != NULL && *p == '\0')
            return gv_error_set(err, GV_EPARSE, "%s:%zu: field gpu_spec: empty model after '|'",
                                c->name, c->line);
    }
    list[o] = '\0';
    return gv_alloc_request_set_constraint(r, GV_ALLOC_USE_TYPE, list, err);
}

static const char *const pod_cols[] = {"name",    "cpu_milli", "memory_mib", "num_gpu",
                                       "gpu_milli", "gpu_spec", "priority"};

static gv_status pod_row(const struct gv_sim_trace *t, struct gv_sim_trace *tmp,
                         const struct csv *c, const int *idx, struct gv_error *err)
{
    uint64_t cpu, mem, ngpu, milli;
    gv_status rc;
    if ((rc = csv_uint(c, idx[1], pod_cols[1], CPU_MAX, &cpu, err)) ||
        (rc = csv_uint(c, idx[2], pod_cols[2], MEM_MAX, &mem, err)) ||
        (rc = csv_uint(c, idx[3], pod_cols[3], GV_ALLOC_MAX_DEVICES, &ngpu, err)) ||
        (rc = csv_uint(c, idx[4], pod_cols[4], GV_ALLOC_MILLI, &milli, err)))
        return rc;
    if ((ngpu == 0) != (milli == 0))
        return gv_error_set(err, GV_EPARSE, "%s:%zu: field gpu_milli: %llu with num_gpu %llu",
                            c->name, c->line, (unsigned long long)milli,
                            (unsigned long long)ngpu);
    if (ngpu > 1 && milli != GV_ALLOC_MILLI)
        return gv_error_set(err, GV_EPARSE,
                            "%s:%zu: field gpu_milli: multi-GPU pods take whole GPUs (1000), got %llu",
                            c->name, c->line, (unsigned long long)milli);
    struct gv_alloc_request *r;
    if ((rc = gv_alloc_request_new(&r, err)) != GV_OK)
        return rc;
    snprintf(r->name, sizeof(r->name), "%s", c->f[idx[0]]);
    r->cpu_milli = (int64_t)cpu;
    r->mem_mib = (int64_t)mem;
    if (ngpu > 0) {
        r->n_containers = 1;
        snprintf(r->containers[0].name, sizeof(r->containers[0].name), "main");
        r->containers[0].num_gpu = (uint32_t)ngpu;
        r->containers[0].mem_kind = GV_ALLOC_MEM_MIB;
        r->containers[0].mem = 0;
        r->containers[0].milli = (uint32_t)milli;
        r->containers[0].priority = -1;
    }
    const char *spec = idx[5] >= 0 ? c->f[idx[5]] : "";
    if (*spec != '\0' && (rc = openb_spec(t, c, spec, r, err)) != GV_OK) {
        gv_alloc_request_free(r);
        return rc;
    }
    /* optional: the pod's PriorityClass value (docs/simulate.md) */
    uint64_t prio = 0;
    if (idx[6] >= 0 && *c->f[idx[6]] != '\0' &&
        (rc = csv_uint(c, idx[6], pod_cols[6], INT32_MAX, &prio, err)) != GV_OK) {
        gv_alloc_request_free(r);
        return rc;
    }
    if ((rc = sim_add_pod(tmp, r, err)) != GV_OK)
        return rc;
    return prio > 0 ? sim_set_priority(tmp, tmp->n_pods - 1, (int32_t)prio, err) : GV_OK;
}

gv_status gv_sim_parse_openb_pods(struct gv_sim_trace *t, const char *name, const char *buf,
                                  size_t len, struct gv_error *err)
{
    /* gpu_spec and priority are optional: the first five columns are required */
    return csv_parse(t, name, buf, len, pod_cols, 7, 5, pod_row, "pods", err);
}

/* --- Kubernetes JSON ----------------------------------------------------- */

static gv_status k8s_items(const char *name, const char *buf, size_t len, json_t **root,
                           json_t **items, struct gv_error *err)
{
    json_error_t je;
    *root = json_loadb(buf, len, 0, &je);
    if (*root == NULL)
        return gv_error_set(err, GV_EPARSE, "%s:%d: column %d: %s", name, je.line, je.column,
                            je.text);
    *items = json_object_get(*root, "items");
    if (!json_is_array(*items)) {
        json_decref(*root);
        return gv_error_set(err, GV_EPARSE, "%s: field items: expected an array (a List)", name);
    }
    if (json_array_size(*items) == 0) {
        json_decref(*root);
        return gv_error_set(err, GV_EPARSE, "%s: field items: empty list", name);
    }
    return GV_OK;
}

/* kind of a List item; NULL when the item does not say (plain
 * `kubectl get nodes -o json` items do say, but hand-made lists may not). */
static const char *item_kind(json_t *item)
{
    return json_string_value(json_object_get(item, "kind"));
}

/* Adds the Node items of a List to tmp (every item when only_kind). */
static gv_status k8s_add_nodes(struct gv_sim_trace *tmp, const char *name, json_t *items,
                               bool only_kind, struct gv_error *err)
{
    gv_status rc = GV_OK;
    for (size_t i = 0; i < json_array_size(items) && rc == GV_OK; i++) {
        json_t *item = json_array_get(items, i);
        const char *kind = item_kind(item);
        if (only_kind && (kind == NULL || strcmp(kind, "Node") != 0))
            continue;
        struct gv_podspec_node *n = NULL;
        rc = gv_podspec_node(item, &n, err);
        if (rc != GV_OK) {
            gv_error_prefix(err, "%s: items[%zu]", name, i);
            break;
        }
        rc = sim_add_node_spec(tmp, &n->spec, err);
        if (rc == GV_OK && n->n_whole_res > 0) { /* MIG, passthrough, mdev: counted */
            struct sim_node *sn = &tmp->nodes[tmp->n_nodes - 1];
            sn->whole = malloc(n->n_whole_res * sizeof(*sn->whole));
            if (sn->whole == NULL)
                rc = gv_error_set(err, GV_ENOMEM, "out of memory");
            else
                memcpy(sn->whole, n->whole, n->n_whole_res * sizeof(*sn->whole));
            sn->n_whole = sn->whole ? n->n_whole_res : 0;
        }
        if (rc == GV_OK && (n->nvlink_group != NULL || n->pcie_group != NULL))
            rc = sim_node_set_links(tmp, tmp->n_nodes - 1, n->nvlink_group, n->pcie_group,
                                    n->spec.n_gpus, err);
        gv_podspec_node_free(n);
    }
    return rc;
}

/* Adds the running and pending Pod items of a List to tmp (t holds the
 * nodes their GPU-type constraints are checked against). */
static gv_status k8s_add_pods(const struct gv_sim_trace *t, struct gv_sim_trace *tmp,
                              const char *name, json_t *items, bool only_kind,
                              struct gv_error *err)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    gv_status rc = GV_OK;
    for (size_t i = 0; i < json_array_size(items) && rc == GV_OK; i++) {
        json_t *pod = json_array_get(items, i);
        const char *kind = item_kind(pod);
        if (only_kind && (kind == NULL || strcmp(kind, "Pod") != 0))
            continue;
        const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"),
                                                              "phase"));
        /* finished pods hold nothing */
        if (phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
            continue;
        struct gv_alloc_request *r = NULL;
        rc = gv_podspec_request(&cfg, pod, &r, err);
        if (rc != GV_OK) {
            gv_error_prefix(err, "%s: items[%zu]", name, i);
            break;
        }
        const char *bad = unknown_type(t, r->constraint[GV_ALLOC_USE_TYPE]);
        if (bad != NULL) {
            char e[ESC_MAX];
            rc = gv_error_set(err, GV_EPARSE,
                              "%s: items[%zu]: use-gputype: no node has a GPU model matching "
                              "\"%s\"",
                              name, i, esc(bad, strcspn(bad, ","), e, sizeof(e)));
            gv_alloc_request_free(r);
            break;
        }
        /* whole devices (MIG, passthrough, mdev): placed by count, as the scheduler does */
        struct gv_podspec_whole_req w;
        if ((rc = gv_podspec_whole_request(&cfg, pod, &w, err)) != GV_OK) {
            gv_error_prefix(err, "%s: items[%zu]", name, i);
            gv_alloc_request_free(r);
            break;
        }
        bool whole = false;
        for (uint32_t k = 0; k < w.n && !whole; k++)
            whole = sim_whole_known(t, w.r[k].resource);
        rc = whole ? sim_add_whole_pod(tmp, r, &w, err) : sim_add_pod(tmp, r, err);
    }
    return rc;
}

/* One List of Nodes (nodes) or Pods into t, all or nothing. */
static gv_status k8s_parse(struct gv_sim_trace *t, const char *name, const char *buf, size_t len,
                           bool nodes, struct gv_error *err)
{
    json_t *root, *items;
    gv_status rc = k8s_items(name, buf, len, &root, &items, err);
    if (rc != GV_OK)
        return rc;
    struct gv_sim_trace tmp = {0};
    rc = nodes ? k8s_add_nodes(&tmp, name, items, false, err)
               : k8s_add_pods(t, &tmp, name, items, false, err);
    if (rc == GV_OK && !nodes && tmp.n_pods == 0)
        rc = gv_error_set(err, GV_EPARSE, "%s: no running or pending pods", name);
    if (rc == GV_OK)
        rc = trace_move(t, &tmp, err);
    sim_trace_clear(&tmp);
    json_decref(root);
    return rc;
}

gv_status gv_sim_parse_k8s_nodes(struct gv_sim_trace *t, const char *name, const char *buf,
                                 size_t len, struct gv_error *err)
{
    return k8s_parse(t, name, buf, len, true, err);
}

gv_status gv_sim_parse_k8s_pods(struct gv_sim_trace *t, const char *name, const char *buf,
                                size_t len, struct gv_error *err)
{
    return k8s_parse(t, name, buf, len, false, err);
}

gv_status gv_sim_parse_k8s_cluster(struct gv_sim_trace *t, const char *name, const char *buf,
                                   size_t len, struct gv_error *err)
{
    json_t *root, *items;
    gv_status rc = k8s_items(name, buf, len, &root, &items, err);
    if (rc != GV_OK)
        return rc;
    /* Nodes first, whatever the order of the items: pods' GPU-type
     * constraints are checked against the cluster's models. */
    struct gv_sim_trace nodes = {0}, pods = {0};
    rc = k8s_add_nodes(&nodes, name, items, true, err);
    if (rc == GV_OK && nodes.n_nodes == 0)
        rc = gv_error_set(err, GV_EPARSE, "%s: no Node items (dump with `kubectl get "
                                          "nodes,pods -A -o json`)", name);
    if (rc == GV_OK)
        rc = k8s_add_pods(&nodes, &pods, name, items, true, err);
    if (rc == GV_OK && pods.n_pods == 0)
        rc = gv_error_set(err, GV_EPARSE, "%s: no running or pending Pod items", name);
    if (rc == GV_OK)
        rc = trace_move(&nodes, &pods, err);
    if (rc == GV_OK)
        rc = trace_move(t, &nodes, err);
    sim_trace_clear(&nodes);
    sim_trace_clear(&pods);
    json_decref(root);
    return rc;
}

static gv_status load(struct gv_sim_trace *t, const char *path, bool nodes, struct gv_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    gv_status rc = gv_file_read_all(path, &buf, &len, err);
    if (rc != GV_OK)
        return rc;
    size_t i = 0;
    while (i < len && isspace((unsigned char)buf[i]))
        i++;
    bool json = i < len && buf[i] == '{';
    if (json)
        rc = nodes ? gv_sim_parse_k8s_nodes(t, path, buf, len, err)
                   : gv_sim_parse_k8s_pods(t, path, buf, len, err);
    else
        rc = nodes ? gv_sim_parse_openb_nodes(t, path, buf, len, err)
                   : gv_sim_parse_openb_pods(t, path, buf, len, err);
    free(buf);
    return rc;
}

gv_status gv_sim_load_nodes(struct gv_sim_trace *t, const char *path, struct gv_error *err)
{
    return load(t, path, true, err);
}

gv_status gv_sim_load_pods(struct gv_sim_trace *t, const char *path, struct gv_error *err)
{
    return load(t, path, false, err);
}

gv_status gv_sim_load_cluster(struct gv_sim_trace *t, const char *path, struct gv_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    gv_status rc = gv_file_read_all(path, &buf, &len, err);
    if (rc != GV_OK)
        return rc;
    rc = gv_sim_parse_k8s_cluster(t, path, buf, len, err);
    free(buf);
    return rc;
}
