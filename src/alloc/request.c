/*
 * HAMi-compatible request parsing: per-container extended resources and
 * per-pod annotations -> struct gv_alloc_request.  The resource names are
 * configurable; the annotation names are fixed by docs/contracts.md, and
 * the gpuvisor.io/ spelling of each wins over the HAMi one.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc/alloc_internal.h"

#define CONSTRAINT_MAX 4096
/* nvidia.com/gpumem is MiB; anything above 16 TiB is a unit mistake. */
#define MEM_MIB_MAX (UINT64_C(1) << 24)

void gv_alloc_config_default(struct gv_alloc_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->res.gpu = "nvidia.com/gpu";
    cfg->res.mem = "nvidia.com/gpumem";
    cfg->res.mem_pct = "nvidia.com/gpumem-percentage";
    cfg->res.cores = "nvidia.com/gpucores";
    cfg->res.priority = "nvidia.com/priority";
    cfg->res.mem_gib = "aliyun.com/gpu-mem";
    cfg->default_mem_mib = 0;
    cfg->default_cores = 0;
    cfg->default_gpu_num = 1;
    cfg->default_split = 10;
    cfg->node_policy = GV_ALLOC_POLICY_FGD;
    cfg->gpu_policy = GV_ALLOC_GPU_BINPACK;
    cfg->workload_half_life = 5000.0;
    cfg->fgd_score_step = 40.0;
    cfg->score_all_nodes = 5000;
    cfg->score_budget = 16;
}

static const char *const policy_names[GV_ALLOC_POLICY_COUNT] = {"binpack", "spread", "bestfit",
                                                                "fgd"};
/* Aliyun gpushare's GPUs-per-container resource (beside cfg->res.mem_gib). */
#define GPUSHARE_COUNT "aliyun.com/gpu-count"

static const char *const gpu_policy_names[GV_ALLOC_GPU_POLICY_COUNT] = {"binpack", "spread"};

const char *gv_alloc_policy_name(gv_alloc_policy p)
{
    return (unsigned)p < GV_ALLOC_POLICY_COUNT ? policy_names[p] : "unknown";
}

const char *gv_alloc_gpu_policy_name(gv_alloc_gpu_policy p)
{
    return (unsigned)p < GV_ALLOC_GPU_POLICY_COUNT ? gpu_policy_names[p] : "unknown";
}

int gv_alloc_policy_parse(const char *text)
{
    for (int i = 0; text != NULL && i < GV_ALLOC_POLICY_COUNT; i++)
        if (strcasecmp(text, policy_names[i]) == 0)
            return i;
    return -1;
}

int gv_alloc_gpu_policy_parse(const char *text)
{
    for (int i = 0; text != NULL && i < GV_ALLOC_GPU_POLICY_COUNT; i++)
        if (strcasecmp(text, gpu_policy_names[i]) == 0)
            return i;
    return -1;
}

gv_status gv_alloc_request_new(struct gv_alloc_request **out, struct gv_error *err)
{
    struct gv_alloc_request *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    r->node_policy = -1;
    r->gpu_policy = -1;
    *out = r;
    return GV_OK;
}

void gv_alloc_request_free(struct gv_alloc_request *req)
{
    if (req == NULL)
        return;
    for (int i = 0; i < GV_ALLOC_CONSTRAINT_COUNT; i++)
        free(req->constraint[i]);
    free(req);
}

uint32_t gv_alloc_request_gpus(const struct gv_alloc_request *req)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < req->n_containers; i++)
        n += req->containers[i].num_gpu;
    return n;
}

static const char *const constraint_names[GV_ALLOC_CONSTRAINT_COUNT] = {
    "use-gputype", "nouse-gputype", "use-gpuuuid", "nouse-gpuuuid"};

gv_status gv_alloc_request_set_constraint(struct gv_alloc_request *req, gv_alloc_constraint which,
                                          const char *list, struct gv_error *err)
{
    if ((unsigned)which >= GV_ALLOC_CONSTRAINT_COUNT)
        return gv_error_set(err, GV_EINVAL, "unknown constraint %d", (int)which);
    size_t len = list != NULL ? strlen(list) : 0;
    if (len > CONSTRAINT_MAX)
        return gv_error_set(err, GV_EINVAL, "%s: list longer than %d characters",
                            constraint_names[which], CONSTRAINT_MAX);
    char *norm = malloc(len + 1);
    if (norm == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    size_t o = 0;
    const char *p = list;
    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (b > a) {
            if (o > 0)
                norm[o++] = ',';
            for (; a < b; a++) {
                unsigned char ch = (unsigned char)*a;
                if (ch < 0x20 || ch == 0x7f) {
                    free(norm);
                    return gv_error_set(err, GV_EINVAL, "%s: control character in list",
                                        constraint_names[which]);
                }
                norm[o++] = (char)tolower(ch);
            }
        }
        p = *end == ',' ? end + 1 : end;
    }
    norm[o] = '\0';
    free(req->constraint[which]);
    if (o == 0) {
        free(norm);
        norm = NULL;
    }
    req->constraint[which] = norm;
    return GV_OK;
}

bool alloc_list_match(const char *list, const char *s, bool substring)
{
    /* list is normalised (lower case, no blanks); s is any case */
    char low[GV_ALLOC_UUID_MAX > GV_ALLOC_MODEL_MAX ? GV_ALLOC_UUID_MAX : GV_ALLOC_MODEL_MAX];
    size_t n = 0;
    for (; s[n] != '\0' && n + 1 < sizeof(low); n++)
        low[n] = (char)tolower((unsigned char)s[n]);
    low[n] = '\0';
    const char *p = list;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (substring) {
            for (size_t i = 0; i + len <= n; i++) {
                if (memcmp(low + i, p, len) == 0)
                    return true;
            }
        } else if (len == n && memcmp(low, p, len) == 0) {
            return true;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    return false;
}

/* --- parsing ------------------------------------------------------------ */

static const char *kv_find(const struct gv_alloc_kv *kv, size_t n, const char *key)
{
    if (key == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (kv[i].key != NULL && strcmp(kv[i].key, key) == 0)
            return kv[i].value != NULL ? kv[i].value : "";
    return NULL;
}

/* GPU resources: limits first, then requests (extended resources must be
 * equal in both when both are given; limits are what HAMi reads). */
static const char *res_find(const struct gv_alloc_container_in *ci, const char *key)
{
    const char *v = kv_find(ci->limits, ci->n_limits, key);
    return v != NULL ? v : kv_find(ci->requests, ci->n_requests, key);
}

static gv_status res_int(const struct gv_alloc_container_in *ci, const char *cname, const char *key,
                         int64_t lo, int64_t hi, int64_t *out, bool *present, struct gv_error *err)
{
    const char *v = res_find(ci, key);
    *present = v != NULL;
    if (v == NULL)
        return GV_OK;
    gv_status rc = gv_quantity_integer(v, out, err);
    if (rc == GV_OK && (*out < lo || *out > hi))
        rc = gv_error_set(err, GV_EINVAL, "value %lld outside %lld..%lld", (long long)*out,
                          (long long)lo, (long long)hi);
    if (rc != GV_OK) {
        gv_error_prefix(err, "container \"%s\": %s", cname, key);
        return GV_EINVAL;
    }
    return GV_OK;
}

static gv_status parse_container(const struct gv_alloc_config *cfg,
                                 const struct gv_alloc_container_in *ci,
                                 struct gv_alloc_request *r, struct gv_error *err)
{
    const char *cname = ci->name != NULL ? ci->name : "";
    int64_t gpus = 0, mem = 0, pct = 0, cores = 0, prio = -1, gib = 0;
    bool has_gpus, has_mem, has_pct, has_cores, has_prio, has_gib;
    gv_status rc;
    if ((rc = res_int(ci, cname, cfg->res.gpu, 0, GV_ALLOC_MAX_DEVICES, &gpus, &has_gpus, err)) ||
        (rc = res_int(ci, cname, cfg->res.mem, 1, (int64_t)MEM_MIB_MAX, &mem, &has_mem, err)) ||
        (rc = res_int(ci, cname, cfg->res.mem_pct, 1, 100, &pct, &has_pct, err)) ||
        (rc = res_int(ci, cname, cfg->res.cores, 0, 100, &cores, &has_cores, err)) ||
        (rc = res_int(ci, cname, cfg->res.priority, 0, 1000, &prio, &has_prio, err)) ||
        (rc = res_int(ci, cname, cfg->res.mem_gib, 1, (int64_t)(MEM_MIB_MAX >> 10), &gib, &has_gib,
                      err)))
        return rc;
    if (has_mem && has_pct)
        return gv_error_set(err, GV_EINVAL,
                            "container \"%s\": %s and %s are mutually exclusive; set one", cname,
                            cfg->res.mem, cfg->res.mem_pct);
    if (has_gib && (has_mem || has_pct))
        return gv_error_set(err, GV_EINVAL,
                            "container \"%s\": %s cannot be combined with %s or %s", cname,
                            cfg->res.mem_gib, cfg->res.mem, cfg->res.mem_pct);
    bool extras = has_mem || has_pct || has_cores || has_gib || has_prio;
    /* Aliyun gpushare's GPU count beside aliyun.com/gpu-mem */
    int64_t share_n = 0;
    bool has_share_n;
    if ((rc = res_int(ci, cname, GPUSHARE_COUNT, 0, GV_ALLOC_MAX_DEVICES, &share_n, &has_share_n,
                      err)))
        return rc;
    if (has_share_n && has_gpus && share_n != gpus)
        return gv_error_set(err, GV_EINVAL,
                            "container \"%s\": %s %lld and %s %lld disagree; set one", cname,
                            GPUSHARE_COUNT, (long long)share_n, cfg->res.gpu, (long long)gpus);
    if (has_share_n && !has_gpus) {
        gpus = share_n;
        has_gpus = true;
    }
    if (has_gpus && gpus == 0) {
        if (extras)
            return gv_error_set(err, GV_EINVAL,
                                "container \"%s\": asks for GPU memory/cores but %s is 0", cname,
                                cfg->res.gpu);
        return GV_OK;
    }
    if (!has_gpus) {
        if (!extras)
            return GV_OK;
        gpus = cfg->default_gpu_num > 0 ? cfg->default_gpu_num : 1;
    }
    if (r->n_containers >= GV_ALLOC_MAX_CONTAINERS)
        return gv_error_set(err, GV_EINVAL, "more than %d containers ask for GPUs",
                            GV_ALLOC_MAX_CONTAINERS);
    if (strlen(cname) >= GV_ALLOC_CNAME_MAX || cname[0] == '\0')
        return gv_error_set(err, GV_EINVAL, "container name \"%.64s\" is empty or too long", cname);
    struct gv_alloc_container_req *c = &r->containers[r->n_containers];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", cname);
    c->num_gpu = (uint32_t)gpus;
    if (has_gib) {
        c->mem_kind = GV_ALLOC_MEM_MIB;
        c->mem = (uint64_t)gib * 1024u / (uint64_t)gpus; /* gpushare: per container */
        if (c->mem == 0)
            c->mem = 1;
    } else if (has_mem) {
        c->mem_kind = GV_ALLOC_MEM_MIB;
        c->mem = (uint64_t)mem;
    } else if (has_pct) {
        c->mem_kind = GV_ALLOC_MEM_PCT;
        c->mem = (uint64_t)pct;
    } else if (cfg->default_mem_mib > 0) {
        c->mem_kind = GV_ALLOC_MEM_MIB;
        c->mem = cfg->default_mem_mib;
    } else {
        c->mem_kind = GV_ALLOC_MEM_PCT;
        c->mem = 100;
    }
    if (!has_cores)
        cores = cfg->default_cores > 100 ? 100 : cfg->default_cores;
    c->milli = (uint32_t)cores * 10u;
    c->priority = has_prio ? (int32_t)prio : -1;
    r->n_containers++;
    return GV_OK;
}

/* Host requests (cpu, memory) summed over containers: requests, else limits. */
static gv_status add_host(const struct gv_alloc_container_in *ci, struct gv_alloc_request *r,
                          struct gv_error *err)
{
    const char *cname = ci->name != NULL ? ci->name : "";
    const char *cpu = kv_find(ci->requests, ci->n_requests, "cpu");
    if (cpu == NULL)
        cpu = kv_find(ci->limits, ci->n_limits, "cpu");
    const char *mem = kv_find(ci->requests, ci->n_requests, "memory");
    if (mem == NULL)
        mem = kv_find(ci->limits, ci->n_limits, "memory");
    int64_t v;
    if (cpu != NULL) {
        if (gv_quantity_milli(cpu, &v, err) != GV_OK) {
            gv_error_prefix(err, "container \"%s\": cpu", cname);
            return GV_EINVAL;
        }
        if (v > INT64_MAX - r->cpu_milli)
            return gv_error_set(err, GV_ERANGE, "container \"%s\": cpu total too large", cname);
        r->cpu_milli += v;
    }
    if (mem != NULL) {
        if (gv_quantity_parse(mem, 1, 1 << 20, &v, NULL, err) != GV_OK) {
            gv_error_prefix(err, "container \"%s\": memory", cname);
            return GV_EINVAL;
        }
        if (v > INT64_MAX - r->mem_mib)
            return gv_error_set(err, GV_ERANGE, "container \"%s\": memory total too large", cname);
        r->mem_mib += v;
    }
    return GV_OK;
}

/* Annotation lookup: gpuvisor.io/<name> wins over the HAMi key. */
static const char *ann_find(const struct gv_alloc_pod_in *in, const char *ours, const char *hami,
                            const char **key)
{
    const char *v = kv_find(in->annotations, in->n_annotations, ours);
    *key = ours;
    if (v == NULL && hami != NULL) {
        v = kv_find(in->annotations, in->n_annotations, hami);
        *key = hami;
    }
    return v;
}

/*
 * HAMi's gpu-scheduler-policy: a comma chain of binpack / spread / numa
 * (sort keys, in the order written) and mutex / topology-aware (filters).
 * With no binpack or spread in it, HAMi orders GPUs by spread.
 */
static gv_status parse_gpu_policy(const char *v, const char *key, struct gv_alloc_request *r,
                                  struct gv_error *err)
{
    int order = -1;
    bool numa = false, numa_first = false;
    const char *p = v;
    while (*p != '\0') {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ",");
        size_t m = n;
        while (m > 0 && (p[m - 1] == ' ' || p[m - 1] == '\t'))
            m--;
        char tok[32];
        if (m == 0 || m >= sizeof(tok))
            goto bad;
        memcpy(tok, p, m);
        tok[m] = '\0';
        int pol = gv_alloc_gpu_policy_parse(tok);
        if (pol >= 0) {
            if (order < 0)
                order = pol; /* the first sort key decides; a later one never differs */
        } else if (strcasecmp(tok, "numa") == 0) {
            if (!numa)
                numa_first = order < 0;
            numa = true;
        } else if (strcasecmp(tok, "mutex") == 0) {
            r->gpu_mutex = true;
        } else if (strcasecmp(tok, "topology-aware") == 0) {
            r->gpu_topology = true;
        } else {
            goto bad;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    r->gpu_policy = order >= 0 ? order : GV_ALLOC_GPU_SPREAD;
    r->gpu_numa = numa ? (numa_first ? 1 : 2) : 0;
    return GV_OK;
bad:
    return gv_error_set(err, GV_EINVAL,
                        "annotation %s: unknown GPU policy \"%.64s\" (a comma list of binpack, "
                        "spread, numa, mutex, topology-aware)",
                        key, v);
}

static gv_status parse_annotations(const struct gv_alloc_pod_in *in, struct gv_alloc_request *r,
                                   struct gv_error *err)
{
    static const char *const ours[GV_ALLOC_CONSTRAINT_COUNT] = {
        "gpuvisor.io/use-gputype", "gpuvisor.io/nouse-gputype", "gpuvisor.io/use-gpuuuid",
        "gpuvisor.io/nouse-gpuuuid"};
    static const char *const hami[GV_ALLOC_CONSTRAINT_COUNT] = {
        "nvidia.com/use-gputype", "nvidia.com/nouse-gputype", "nvidia.com/use-gpuuuid",
        "nvidia.com/nouse-gpuuuid"};
    const char *key;
    for (int i = 0; i < GV_ALLOC_CONSTRAINT_COUNT; i++) {
        const char *v = ann_find(in, ours[i], hami[i], &key);
        if (v != NULL && gv_alloc_request_set_constraint(r, (gv_alloc_constraint)i, v, err)) {
            gv_error_prefix(err, "annotation %s", key);
            return GV_EINVAL;
        }
    }
    const char *v = ann_find(in, "gpuvisor.io/numa-bind", "nvidia.com/numa-bind", &key);
    if (v != NULL) {
        if (strcasecmp(v, "true") == 0)
            r->numa_bind = true;
        else if (strcasecmp(v, "false") == 0 || *v == '\0')
            r->numa_bind = false;
        else
            return gv_error_set(err, GV_EINVAL, "annotation %s: \"%.64s\" is not true or false",
                                key, v);
    }
    /* The HAMi keys only know binpack/spread; ours also take bestfit/fgd. */
    v = ann_find(in, "gpuvisor.io/node-policy", "hami.io/node-scheduler-policy", &key);
    if (v != NULL && *v != '\0') {
        int p = gv_alloc_policy_parse(v);
        bool hami_key = strncmp(key, "hami.io/", 8) == 0;
        if (p < 0 || (hami_key && p != GV_ALLOC_POLICY_BINPACK && p != GV_ALLOC_POLICY_SPREAD))
            return gv_error_set(err, GV_EINVAL, "annotation %s: unknown policy \"%.64s\" (%s)", key,
                                v, hami_key ? "binpack or spread" : "binpack, spread, bestfit or fgd");
        r->node_policy = p;
    }
    v = ann_find(in, "gpuvisor.io/gpu-policy", "hami.io/gpu-scheduler-policy", &key);
    if (v != NULL && *v != '\0' && parse_gpu_policy(v, key, r, err) != GV_OK)
        return GV_EINVAL;
    /* HAMi's device mode: its hami-core is what gpuvisor does */
    v = kv_find(in->annotations, in->n_annotations, "nvidia.com/vgpu-mode");
    if (v != NULL && *v != '\0' && strcasecmp(v, "hami-core") != 0)
        return gv_error_set(err, GV_EINVAL,
                            "annotation nvidia.com/vgpu-mode: \"%.32s\" is not offered: gpuvisor "
                            "shares GPUs through its interposer only (no MIG or MPS); remove the "
                            "annotation or write \"hami-core\"",
                            v);
    return GV_OK;
}

static gv_status copy_id(char *dst, size_t cap, const char *src, const char *what,
                         struct gv_error *err)
{
    if (src == NULL)
        src = "";
    if (strlen(src) >= cap)
        return gv_error_set(err, GV_EINVAL, "pod %s \"%.64s...\" is too long", what, src);
    memcpy(dst, src, strlen(src) + 1);
    return GV_OK;
}

gv_status gv_alloc_request_parse(const struct gv_alloc_config *cfg, const struct gv_alloc_pod_in *in,
                                 struct gv_alloc_request **out, struct gv_error *err)
{
    struct gv_alloc_request *r = NULL;
    gv_status rc = gv_alloc_request_new(&r, err);
    if (rc != GV_OK)
        return rc;
    if ((rc = copy_id(r->uid, sizeof(r->uid), in->uid, "uid", err)) ||
        (rc = copy_id(r->ns, sizeof(r->ns), in->ns, "namespace", err)) ||
        (rc = copy_id(r->name, sizeof(r->name), in->name, "name", err)))
        goto fail;
    for (size_t i = 0; i < in->n_containers; i++) {
        if ((rc = parse_container(cfg, &in->containers[i], r, err)) != GV_OK ||
            (rc = add_host(&in->containers[i], r, err)) != GV_OK)
            goto fail;
    }
    for (size_t i = 0; i < r->n_containers; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->containers[i].name, r->containers[j].name) == 0) {
                rc = gv_error_set(err, GV_EINVAL, "container name \"%s\" appears twice",
                                  r->containers[i].name);
                goto fail;
            }
    if ((rc = parse_annotations(in, r, err)) != GV_OK)
        goto fail;
    *out = r;
    return GV_OK;
fail:
    gv_alloc_request_free(r);
    return rc;
}
