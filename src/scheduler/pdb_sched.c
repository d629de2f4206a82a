/*
 * PodDisruptionBudgets in gpuvisor-scheduler (pdb_sched.h): which GPU
 * victims of a preemption violate a budget, decided as kube-scheduler
 * decides it for the pods it evicts for CPU and memory.
 *
 * The budgets come from an informer (a handful of objects; a change costs a
 * map update).  The pod cache keeps no labels (memory per pod at 50,000
 * pods), so the labels a budget's selector needs are kept here only for the
 * pods gpuvisor counts as bound in a namespace that has a budget: zero
 * memory in clusters without budgets.  When a namespace gets its first
 * budget, its pods' labels are read once with one LIST (outside the lock);
 * from then on the pod informer keeps them current.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "kube/gv_kube_pdb.h"
#include "scheduler/pdb_sched.h"
#include "scheduler/sched_internal.h"

struct gv_sched_pdb {
    const char *version;     /* "v1" / "v1beta1"; NULL: budgets not read */
    struct gv_informer *inf; /* NULL without API or permission */
    json_t *budgets;         /* "ns/name" -> the budget object */
    json_t *ns_count;        /* namespace -> budgets there */
    /* pod uid -> [labels, gen, [budget positions]] (pods in those
     * namespaces): which budgets select the pod, as positions in `budgets`,
     * worked out once per `gen` (bumped when a budget is added, removed,
     * or its selector or disruptedPods change; a status update of
     * disruptionsAllowed alone keeps positions and memberships). */
    json_t *labels;
    json_int_t gen;
};

struct gv_sched_pdb *gv_sched_pdb_new(void)
{
    struct gv_sched_pdb *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->budgets = json_object();
    p->ns_count = json_object();
    p->labels = json_object();
    if (p->budgets == NULL || p->ns_count == NULL || p->labels == NULL) {
        gv_sched_pdb_free(p);
        return NULL;
    }
    return p;
}

void gv_sched_pdb_free(struct gv_sched_pdb *p)
{
    if (p == NULL)
        return;
    gv_informer_free(p->inf);
    json_decref(p->budgets);
    json_decref(p->ns_count);
    json_decref(p->labels);
    free(p);
}

static const char *meta(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(json_object_get(o, "metadata"), k));
}

/* ---- pods' labels ------------------------------------------------------ */

static void store_labels(struct gv_sched_pdb *p, const json_t *pod, const char *uid)
{
    const json_t *l = json_object_get(json_object_get(pod, "metadata"), "labels");
    json_t *cur = json_object_get(p->labels, uid);
    if (cur != NULL && json_equal(json_array_get(cur, 0), l))
        return; /* same labels: the memberships stand */
    json_t *copy = json_is_object(l) ? json_deep_copy(l) : json_object();
    json_t *e = copy != NULL ? json_pack("[o,I,[]]", copy, (json_int_t)-1) : NULL;
    if (e == NULL || json_object_set_new(p->labels, uid, e) != 0)
        gv_warn("pdb: out of memory keeping the labels of pod %s", uid);
}

void gv_sched_pdb_pod(struct gv_sched *s, const json_t *pod, bool bound)
{
    struct gv_sched_pdb *p = s->pdb;
    const char *uid = meta(pod, "uid"), *ns = meta(pod, "namespace");
    if (p == NULL || uid == NULL)
        return;
    if (bound && ns != NULL && json_object_get(p->ns_count, ns) != NULL)
        store_labels(p, pod, uid);
    else
        json_object_del(p->labels, uid);
}

void gv_sched_pdb_pod_gone(struct gv_sched *s, const char *uid)
{
    if (s->pdb != NULL && uid != NULL)
        json_object_del(s->pdb->labels, uid);
}

/* A namespace's first budget: its bound pods' labels, read once.  Outside
 * the lock; a pod the informer updated meanwhile keeps the newer labels. */
static void load_namespace(struct gv_sched *s, const char *ns)
{
    char path[400], fsel[300];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%.250s/pods", ns);
    snprintf(fsel, sizeof(fsel), "spec.schedulerName=%s", s->cfg.scheduler_name);
    struct gv_kube_list_opts o = {.field_selector = fsel, .limit = 500};
    json_t *list = NULL;
    struct gv_error err = {0};
    if (gv_kube_list(s->kube, path, &o, &list, &err) != GV_OK) {
        gv_warn("pdb: cannot list pods of namespace %s: %s (their budgets count from their "
                "next update)", ns, err.msg);
        return;
    }
    pthread_mutex_lock(&s->lock);
    size_t i;
    json_t *pod;
    json_array_foreach(json_object_get(list, "items"), i, pod)
    {
        const char *uid = meta(pod, "uid");
        if (uid != NULL && json_object_get(s->pdb->labels, uid) == NULL &&
            json_object_get(s->pdb->ns_count, ns) != NULL && gv_alloc_is_placed(s->cluster, uid))
            store_labels(s->pdb, pod, uid);
    }
    pthread_mutex_unlock(&s->lock);
    json_decref(list);
}

/* ---- budgets ----------------------------------------------------------- */

/* Lock held.  Returns true when ns just got its first budget. */
static bool apply(struct gv_sched_pdb *p, const json_t *pdb, bool deleted)
{
    const char *ns = meta(pdb, "namespace"), *name = meta(pdb, "name");
    if (ns == NULL || name == NULL)
        return false;
    char key[600];
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    json_t *old = json_object_get(p->budgets, key);
    bool had = old != NULL;
    json_int_t n = json_integer_value(json_object_get(p->ns_count, ns));
    if (deleted) {
        if (!had)
            return false;
        json_object_del(p->budgets, key);
        p->gen++;
        if (n <= 1)
            json_object_del(p->ns_count, ns); /* its pods' labels go with their next event */
        else
            json_object_set_new(p->ns_count, ns, json_integer(n - 1));
        return false;
    }
    const json_t *sel = json_object_get(json_object_get(pdb, "spec"), "selector");
    const json_t *status = json_object_get(pdb, "status");
    const json_t *allowed = json_object_get(status, "disruptionsAllowed");
    const json_t *disrupted = json_object_get(status, "disruptedPods");
    json_t *old_status = json_object_get(old, "status");
    if (had && json_equal(json_object_get(json_object_get(old, "spec"), "selector"), sel) &&
        json_equal(json_object_get(old_status, "disruptedPods"), disrupted)) {
        /* the budget's count moved (the usual status update): in place */
        if (allowed != NULL)
            json_object_set(old_status, "disruptionsAllowed", (json_t *)allowed);
        else
            json_object_del(old_status, "disruptionsAllowed");
        return false;
    }
    p->gen++;
    /* only what the rule reads: namespace, selector, budget, disrupted pods */
    json_t *keep = json_pack("{s:{s:s,s:s},s:{s:O*},s:{s:O*,s:O*}}", "metadata", "namespace", ns,
                             "name", name, "spec", "selector",
                             json_object_get(json_object_get(pdb, "spec"), "selector"), "status",
                             "disruptionsAllowed",
                             json_object_get(json_object_get(pdb, "status"), "disruptionsAllowed"),
                             "disruptedPods",
                             json_object_get(json_object_get(pdb, "status"), "disruptedPods"));
    if (keep == NULL || json_object_set_new(p->budgets, key, keep) != 0) {
        gv_warn("pdb: out of memory keeping budget %s", key);
        return false;
    }
    if (!had)
        json_object_set_new(p->ns_count, ns, json_integer(n + 1));
    return !had && n == 0;
}

static void pdb_changed(struct gv_sched *s, const json_t *pdb, bool deleted)
{
    if (s->pdb == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    bool first = apply(s->pdb, pdb, deleted);
    pthread_mutex_unlock(&s->lock);
    if (first && s->kube != NULL)
        load_namespace(s, meta(pdb, "namespace"));
}

void gv_sched_pdb_update(struct gv_sched *s, json_t *pdb)
{
    pdb_changed(s, pdb, false);
}

void gv_sched_pdb_delete(struct gv_sched *s, json_t *pdb)
{
    pdb_changed(s, pdb, true);
}

static void inf_add(void *ud, json_t *obj)
{
    pdb_changed(ud, obj, false);
}

static void inf_update(void *ud, json_t *old_obj, json_t *new_obj)
{
    (void)old_obj;
    pdb_changed(ud, new_obj, false);
}

static void inf_delete(void *ud, json_t *obj)
{
    pdb_changed(ud, obj, true);
}

gv_status gv_sched_pdb_start(struct gv_sched *s, struct gv_error *err)
{
    struct gv_sched_pdb *p = s->pdb;
    if (p == NULL || s->kube == NULL)
        return GV_OK;
    struct gv_error e = {0};
    if (gv_kube_pdb_version(s->kube, &p->version, NULL, &e) != GV_OK) {
        p->version = NULL;
        gv_warn("pdb: PodDisruptionBudgets not read (%s): preemption counts no victim as "
                "violating one", e.msg);
        return e.code == GV_ENOMEM ? gv_error_set(err, GV_ENOMEM, "out of memory") : GV_OK;
    }
    char path[64];
    snprintf(path, sizeof(path), "/apis/policy/%s/poddisruptionbudgets", p->version);
    struct gv_informer_callbacks cb = {inf_add, inf_update, inf_delete, s};
    gv_status st = gv_informer_new(s->kube, path, NULL, &cb, &p->inf, err);
    if (st == GV_OK)
        st = gv_informer_start(p->inf, err);
    if (st != GV_OK)
        return st;
    if (!gv_informer_wait_synced(p->inf, 30000))
        gv_warn("pdb: PodDisruptionBudget cache not synced after 30 s; continuing");
    gv_info("pdb: reading PodDisruptionBudgets through policy/%s", p->version);
    return GV_OK;
}

void gv_sched_pdb_stop(struct gv_sched *s)
{
    if (s->pdb != NULL)
        gv_informer_stop(s->pdb->inf);
}

/* ---- kube-scheduler's count -------------------------------------------- */

struct budget {
    const json_t *pdb;
    int64_t allowed, left;
};

struct gv_sched_pdb_walk {
    json_int_t gen; /* of the positions below */
    size_t n;
    struct budget b[];
};

struct gv_sched_pdb_walk *gv_sched_pdb_walk_new(struct gv_sched *s)
{
    struct gv_sched_pdb *p = s->pdb;
    size_t n = p != NULL ? json_object_size(p->budgets) : 0;
    if (n == 0)
        return NULL;
    struct gv_sched_pdb_walk *w = malloc(sizeof(*w) + n * sizeof(w->b[0]));
    if (w == NULL)
        return NULL; /* no memory: counted as violating none, as before budgets were read */
    w->n = 0;
    w->gen = p->gen;
    const char *key;
    json_t *b;
    json_object_foreach(p->budgets, key, b)
        w->b[w->n++] = (struct budget){.pdb = b, .allowed = gv_kube_pdb_allowed(b)};
    gv_sched_pdb_walk_reset(w);
    return w;
}

void gv_sched_pdb_walk_reset(struct gv_sched_pdb_walk *w)
{
    for (size_t i = 0; w != NULL && i < w->n; i++)
        w->b[i].left = w->b[i].allowed;
}

bool gv_sched_pdb_walk_step(struct gv_sched_pdb_walk *w, struct gv_sched *s, const char *uid)
{
    if (w == NULL)
        return false;
    json_t *e = json_object_get(s->pdb->labels, uid);
    const json_t *labels = json_array_get(e, 0);
    if (json_object_size(labels) == 0)
        return false;
    json_t *members = json_array_get(e, 2);
    if (json_integer_value(json_array_get(e, 1)) != w->gen) {
        /* the budgets that select it, worked out once per generation */
        const struct srec *r = gv_sched_rec_find(s, uid);
        json_t *m = json_array();
        for (size_t i = 0; m != NULL && r != NULL && r->ns != NULL && i < w->n; i++)
            /* kube-scheduler: a nil or empty selector matches nothing here;
             * a pod already in disruptedPods spends nothing */
            if (gv_kube_pdb_selects(w->b[i].pdb, r->ns, labels, false) &&
                !gv_kube_pdb_disrupted(w->b[i].pdb, r->name))
                json_array_append_new(m, json_integer((json_int_t)i));
        if (m == NULL || json_array_set_new(e, 2, m) != 0)
            return false;
        json_array_set_new(e, 1, json_integer(w->gen));
        members = m;
    }
    bool violates = false;
    size_t k;
    json_t *v;
    json_array_foreach(members, k, v)
    {
        json_int_t i = json_integer_value(v);
        if (i >= 0 && (size_t)i < w->n && --w->b[i].left < 0)
            violates = true;
    }
    return violates;
}

void gv_sched_pdb_walk_free(struct gv_sched_pdb_walk *w)
{
    free(w);
}
