/* ResourceQuota on GPU memory and cores: see quota.h. */
#include "scheduler/quota.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"

struct quota_obj {
    char *ns, *name;
    int64_t mem, cores; /* -1: no limit from this object */
};

struct charge {
    char *uid, *ns;
    uint64_t mem, cores;
};

struct gv_quota {
    pthread_mutex_t mu;
    char *mem_res, *cores_res;
    struct quota_obj *objs;
    size_t n_objs;
    struct charge *ch;
    size_t n_ch;
};

struct gv_quota *gv_quota_new(const char *mem_resource, const char *cores_resource)
{
    struct gv_quota *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    pthread_mutex_init(&q->mu, NULL);
    q->mem_res = strdup(mem_resource ? mem_resource : "nvidia.com/gpumem");
    q->cores_res = strdup(cores_resource ? cores_resource : "nvidia.com/gpucores");
    if (q->mem_res == NULL || q->cores_res == NULL) {
        gv_quota_free(q);
        return NULL;
    }
    return q;
}

void gv_quota_free(struct gv_quota *q)
{
    if (q == NULL)
        return;
    for (size_t i = 0; i < q->n_objs; i++) {
        free(q->objs[i].ns);
        free(q->objs[i].name);
    }
    for (size_t i = 0; i < q->n_ch; i++) {
        free(q->ch[i].uid);
        free(q->ch[i].ns);
    }
    free(q->objs);
    free(q->ch);
    free(q->mem_res);
    free(q->cores_res);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static const char *md(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

/* "limits.<res>" / "requests.<res>": the smaller when both are set; a
 * fraction rounds down, an unreadable value counts as 0. */
static int64_t hard_limit(json_t *hard, const char *res, const char *ns, const char *name)
{
    int64_t best = -1;
    const char *prefixes[] = {"limits.", "requests."};
    for (size_t p = 0; p < 2; p++) {
        char key[256];
        snprintf(key, sizeof(key), "%s%s", prefixes[p], res);
        json_t *v = json_object_get(hard, key);
        if (v == NULL)
            continue;
        int64_t x = 0;
        bool exact = true;
        struct gv_error err = {0};
        if (!json_is_string(v) ||
            gv_quantity_parse(json_string_value(v), 1, 1, &x, &exact, &err) != GV_OK) {
            /* fail closed: a limit we cannot read admits nothing */
            gv_error("ResourceQuota %s/%s: %s: %s; treated as 0", ns, name, key,
                     json_is_string(v) ? err.msg : "not a quantity string");
            x = 0;
        } else if (!exact) {
            x--; /* parse rounds up; a limit rounds down ("1500m" -> 1) */
        }
        if (best < 0 || x < best)
            best = x;
    }
    return best;
}

void gv_quota_object(struct gv_quota *q, json_t *rq, bool deleted)
{
    const char *ns = md(rq, "namespace"), *name = md(rq, "name");
    if (ns == NULL || name == NULL)
        return;
    json_t *hard = json_object_get(json_object_get(rq, "spec"), "hard");
    pthread_mutex_lock(&q->mu);
    size_t i = 0;
    while (i < q->n_objs && !(strcmp(q->objs[i].ns, ns) == 0 && strcmp(q->objs[i].name, name) == 0))
        i++;
    int64_t mem = deleted ? -1 : hard_limit(hard, q->mem_res, ns, name);
    int64_t cores = deleted ? -1 : hard_limit(hard, q->cores_res, ns, name);
    if (mem < 0 && cores < 0) { /* nothing of ours (any more) */
        if (i < q->n_objs) {
            free(q->objs[i].ns);
            free(q->objs[i].name);
            q->objs[i] = q->objs[--q->n_objs];
        }
    } else {
        if (i == q->n_objs) {
            struct quota_obj *p = realloc(q->objs, (q->n_objs + 1) * sizeof(*p));
            char *n1 = strdup(ns), *n2 = strdup(name);
            if (p == NULL || n1 == NULL || n2 == NULL) {
                /* keep what we had: failing open here would lift a limit */
                if (p != NULL)
                    q->objs = p;
                free(n1);
                free(n2);
                gv_error("ResourceQuota %s/%s: out of memory; not applied", ns, name);
                pthread_mutex_unlock(&q->mu);
                return;
            }
            q->objs = p;
            q->objs[i] = (struct quota_obj){n1, n2, -1, -1};
            q->n_objs++;
        }
        q->objs[i].mem = mem;
        q->objs[i].cores = cores;
    }
    pthread_mutex_unlock(&q->mu);
}

static void drop_charge(struct gv_quota *q, size_t i)
{
    free(q->ch[i].uid);
    free(q->ch[i].ns);
    q->ch[i] = q->ch[--q->n_ch];
}

void gv_quota_charge(struct gv_quota *q, const char *uid, const char *ns, uint64_t mem_mib,
                     uint64_t cores)
{
    pthread_mutex_lock(&q->mu);
    size_t i = 0;
    while (i < q->n_ch && strcmp(q->ch[i].uid, uid) != 0)
        i++;
    if (i == q->n_ch) {
        struct charge *p = realloc(q->ch, (q->n_ch + 1) * sizeof(*p));
        char *u = strdup(uid), *n = strdup(ns);
        if (p == NULL || u == NULL || n == NULL) {
            if (p != NULL)
                q->ch = p;
            free(u);
            free(n);
            gv_error("quota: out of memory recording pod %s", uid);
            pthread_mutex_unlock(&q->mu);
            return;
        }
        q->ch = p;
        q->ch[i] = (struct charge){u, n, 0, 0};
        q->n_ch++;
    }
    q->ch[i].mem = mem_mib;
    q->ch[i].cores = cores;
    pthread_mutex_unlock(&q->mu);
}

/* Usage of ns by pods still placed, uid excluded (lock held). */
static void used_locked(struct gv_quota *q, const char *ns, const char *uid, uint64_t *mem,
                        uint64_t *cores, gv_quota_placed_fn placed, void *ud)
{
    *mem = *cores = 0;
    for (size_t i = 0; i < q->n_ch;) {
        if (placed != NULL && !placed(ud, q->ch[i].uid)) {
            drop_charge(q, i); /* released: its GPUs went back */
            continue;
        }
        if (strcmp(q->ch[i].ns, ns) == 0 && (uid == NULL || strcmp(q->ch[i].uid, uid) != 0)) {
            *mem += q->ch[i].mem;
            *cores += q->ch[i].cores;
        }
        i++;
    }
}

bool gv_quota_fits(struct gv_quota *q, const char *ns, const char *uid, uint64_t mem_mib,
                   uint64_t cores, gv_quota_placed_fn placed, void *ud, char *why, size_t cap)
{
    bool ok = true;
    pthread_mutex_lock(&q->mu);
    uint64_t um, uc;
    used_locked(q, ns, uid, &um, &uc, placed, ud);
    for (size_t i = 0; ok && i < q->n_objs; i++) {
        const struct quota_obj *o = &q->objs[i];
        if (strcmp(o->ns, ns) != 0)
            continue;
        if (o->mem >= 0 && um + mem_mib > (uint64_t)o->mem) {
            snprintf(why, cap,
                     "exceeded quota %s: %s used %" PRIu64 " + asked %" PRIu64 " > limit %" PRId64
                     " (namespace %s)",
                     o->name, q->mem_res, um, mem_mib, o->mem, ns);
            ok = false;
        } else if (o->cores >= 0 && uc + cores > (uint64_t)o->cores) {
            snprintf(why, cap,
                     "exceeded quota %s: %s used %" PRIu64 " + asked %" PRIu64 " > limit %" PRId64
                     " (namespace %s)",
                     o->name, q->cores_res, uc, cores, o->cores, ns);
            ok = false;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

void gv_quota_metrics(struct gv_quota *q, FILE *out, gv_quota_placed_fn placed, void *ud)
{
    pthread_mutex_lock(&q->mu);
    fputs("# HELP hami_resource_quota_used GPU resource used in a namespace with a "
          "ResourceQuota on it (HAMi's name).\n# TYPE hami_resource_quota_used gauge\n"
          "# HELP hami_resource_quota_limit The namespace's ResourceQuota limit (HAMi's name).\n"
          "# TYPE hami_resource_quota_limit gauge\n",
          out);
    for (size_t i = 0; i < q->n_objs; i++) {
        const struct quota_obj *o = &q->objs[i];
        uint64_t um, uc;
        used_locked(q, o->ns, NULL, &um, &uc, placed, ud);
        const char *res[2] = {q->mem_res, q->cores_res};
        int64_t lim[2] = {o->mem, o->cores};
        uint64_t used[2] = {um, uc};
        for (int k = 0; k < 2; k++) {
            if (lim[k] < 0)
                continue;
            fprintf(out,
                    "hami_resource_quota_used{namespace=\"%s\",quota_name=\"%s\",limit=\"%" PRId64
                    "\"} %" PRIu64 "\nhami_resource_quota_limit{namespace=\"%s\",quota_name=\"%s\"} "
                    "%" PRId64 "\n",
                    o->ns, res[k], lim[k], used[k], o->ns, res[k], lim[k]);
        }
    }
    pthread_mutex_unlock(&q->mu);
}

void gv_quota_of_assignment(const struct gv_alloc_assignment *a, uint64_t *mem_mib,
                            uint64_t *cores)
{
    *mem_mib = *cores = 0;
    for (uint32_t c = 0; c < a->n_containers; c++)
        for (uint32_t d = 0; d < a->containers[c].n_devices; d++) {
            *mem_mib += a->containers[c].devices[d].mem_mib;
            *cores += (a->containers[c].devices[d].milli + 9) / 10;
        }
}
