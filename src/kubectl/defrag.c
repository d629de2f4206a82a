/*
 * `kubectl gpuvisor defrag [--max-moves N] [--apply]` (docs/observability.md,
 * "kubectl gpuvisor defrag").
 *
 * Plans with the scheduler's own engine (src/alloc/gv_defrag.h) on the
 * cluster as the scheduler sees it (cluster.c): which controller-owned pods
 * to evict so that their replacements, placed again by the scheduler, free
 * the most whole GPUs or let pending pods fit, within --max-moves and every
 * PodDisruptionBudget's disruptionsAllowed.  Prints the plan and its gain.
 *
 * --apply carries it out one move at a time, and stops at the first
 * surprise (exit 5), because a plan is a prediction of where the scheduler
 * will put each replacement:
 *   1. the pod is read again: same uid, node and assignment as planned;
 *   2. it is evicted through the Eviction API (policy/v1 or v1beta1, as
 *      served), with its uid as precondition and without retries: a 429 is
 *      a PodDisruptionBudget saying no, which is a stop, not a retry;
 *   3. the old pod must be gone and its controller's replacement placed on
 *      the planned node and GPUs within --timeout;
 *   4. the cluster is read again and the planned gain checked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc/gv_defrag.h"
#include "contracts/podspec.h"
#include "kubectl/kc_defrag.h"

/* Drains measured in the first round (gv_defrag_input.max_drains), the
 * cheapest first: each costs a few engine decisions, about 2 ms each on a
 * fragmented 5,000-node cluster, so this bounds a plan there to about 2 s
 * (bench/results/defrag.txt). */
#define KC_DEFRAG_MAX_DRAINS 256

static const char *meta(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(json_object_get(o, "metadata"), k));
}

/* The owner reference with controller: true, NULL when none; why says
 * what keeps the pod from moving otherwise. */
static const json_t *controller_of(const json_t *pod, const char **why)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(json_object_get(pod, "metadata"), "ownerReferences"), i, r)
    {
        if (!json_is_true(json_object_get(r, "controller")))
            continue;
        const char *kind = json_string_value(json_object_get(r, "kind"));
        /* a DaemonSet's (or a mirror pod's) replacement comes back to the same node */
        if (kind != NULL && (strcmp(kind, "DaemonSet") == 0 || strcmp(kind, "Node") == 0)) {
            *why = "daemonset";
            return NULL;
        }
        return r;
    }
    *why = "no controller";
    return NULL;
}

struct kc_plan_ctx {
    struct kc_cluster c;
    struct kc_pdbs pdbs;
    struct gv_defrag_pod *pods;
    struct gv_alloc_request **pending;
    size_t n_pending;
    uint32_t *budget;
    struct gv_defrag_plan plan;
    size_t n_movable, no_controller, daemonset, several_pdbs;
};

static void ctx_free(struct kc_plan_ctx *x)
{
    for (size_t i = 0; i < x->n_pending; i++)
        gv_alloc_request_free(x->pending[i]);
    free(x->pending);
    free(x->pods);
    free(x->budget);
    gv_defrag_plan_free(&x->plan);
    kc_pdb_free(&x->pdbs);
    kc_cluster_clear(&x->c);
}

/* Pending pods' requests (GPU pods only), observed as the scheduler does. */
static int load_pending(struct kc_plan_ctx *x, struct gv_error *err)
{
    struct gv_alloc_config cfg;
    gv_alloc_config_default(&cfg);
    x->pending = calloc(json_array_size(x->c.pending) + 1, sizeof(*x->pending));
    if (x->pending == NULL) {
        gv_error_set(err, GV_ENOMEM, "out of memory");
        return KC_ERR;
    }
    size_t i;
    json_t *p;
    json_array_foreach(x->c.pending, i, p)
    {
        struct gv_alloc_request *r = NULL;
        if (gv_podspec_request(&cfg, p, &r, NULL) != GV_OK || r->n_containers == 0) {
            gv_alloc_request_free(r);
            continue;
        }
        snprintf(r->uid, sizeof(r->uid), "%s", meta(p, "uid"));
        gv_alloc_observe(x->c.engine, r);
        x->pending[x->n_pending++] = r;
    }
    return KC_OK;
}

static int make_plan(struct gv_kube_client *kube, const struct kc_opts *o, struct kc_plan_ctx *x,
                     struct gv_error *err)
{
    int rc = kc_cluster_load(kube, o, &x->c, err);
    if (rc != KC_OK)
        return rc;
    if ((rc = kc_pdb_load(kube, &x->pdbs, err)) != KC_OK)
        return rc;
    if ((rc = load_pending(x, err)) != KC_OK)
        return rc;
    x->pods = calloc(x->c.n_pods + 1, sizeof(*x->pods));
    x->budget = calloc(kc_pdb_count(&x->pdbs) + 1, sizeof(*x->budget));
    if (x->pods == NULL || x->budget == NULL) {
        gv_error_set(err, GV_ENOMEM, "out of memory");
        return KC_ERR;
    }
    for (size_t i = 0; i < kc_pdb_count(&x->pdbs); i++)
        x->budget[i] = kc_pdb_allowed(&x->pdbs, i);
    for (size_t i = 0; i < x->c.n_pods; i++) {
        struct kc_pod *p = &x->c.pods[i];
        const char *why = NULL;
        bool several = false;
        int32_t group = kc_pdb_group(&x->pdbs, p->obj, &several);
        bool movable = p->bound && controller_of(p->obj, &why) != NULL && !several &&
                       json_object_get(json_object_get(p->obj, "metadata"),
                                       "deletionTimestamp") == NULL;
        if (!movable && why != NULL && strcmp(why, "daemonset") == 0)
            x->daemonset++;
        else if (!movable && why != NULL)
            x->no_controller++;
        else if (!movable && several)
            x->several_pdbs++;
        x->n_movable += movable;
        x->pods[i] = (struct gv_defrag_pod){p->req, p->a, movable, group};
    }
    struct gv_defrag_input in = {x->pods,
                                 x->c.n_pods,
                                 x->budget,
                                 kc_pdb_count(&x->pdbs),
                                 (const struct gv_alloc_request *const *)x->pending,
                                 x->n_pending,
                                 (uint32_t)o->max_moves,
                                 KC_DEFRAG_MAX_DRAINS};
    if (gv_defrag_plan(x->c.engine, &in, &x->plan, err) != GV_OK)
        return KC_ERR;
    return KC_OK;
}

/* "node GPU-a,GPU-b" of an assignment, into buf. */
static void where(const struct gv_alloc_assignment *a, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "%s", a->node);
    const char *sep = " ";
    for (uint32_t k = 0; k < a->n_containers; k++)
        for (uint32_t d = 0; d < a->containers[k].n_devices && n < cap; d++) {
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", sep, a->containers[k].devices[d].uuid);
            sep = ",";
        }
}

static json_t *gpus_json(const struct gv_alloc_assignment *a)
{
    json_t *arr = json_array();
    for (uint32_t k = 0; k < a->n_containers; k++)
        for (uint32_t d = 0; d < a->containers[k].n_devices; d++)
            json_array_append_new(arr, json_string(a->containers[k].devices[d].uuid));
    return arr;
}

static json_t *state_json(const struct gv_defrag_state *s, size_t n_pending)
{
    return json_pack("{s:i,s:i,s:i,s:{s:f,s:f,s:f}}", "idleGPUs", (int)s->idle_gpus,
                     "pendingFit", (int)s->pending_fit, "pending", (int)n_pending,
                     "fragmentation", "fragmentedGPUs", s->frag.frag_milli / 1000.0, "freeGPUs",
                     s->frag.free_milli / 1000.0, "ratio", s->frag.ratio);
}

static int print_plan(const struct kc_opts *o, struct kc_plan_ctx *x)
{
    const struct gv_defrag_plan *pl = &x->plan;
    if (o->output == KC_OUT_JSON || o->output == KC_OUT_YAML) {
        json_t *moves = json_array();
        for (size_t m = 0; m < pl->n_moves; m++) {
            const struct kc_pod *p = &x->c.pods[pl->moves[m].pod];
            json_array_append_new(
                moves, json_pack("{s:s,s:s,s:s,s:{s:s,s:o},s:{s:s,s:o},s:i,s:i}", "namespace",
                                 p->ns, "pod", p->name, "uid", p->req->uid, "from", "node",
                                 p->a->node, "gpus", gpus_json(p->a), "to", "node",
                                 pl->moves[m].to.node, "gpus", gpus_json(&pl->moves[m].to),
                                 "idleGPUsAfter", (int)pl->moves[m].idle_gpus, "pendingFitAfter",
                                 (int)pl->moves[m].pending_fit));
        }
        json_t *doc = json_pack(
            "{s:o,s:o,s:o,s:i,s:{s:i,s:i,s:i,s:i,s:i},s:s,s:{s:b,s:s},s:O}", "moves", moves,
            "before", state_json(&pl->before, x->n_pending), "after",
            state_json(&pl->after, x->n_pending), "maxMoves", (int)o->max_moves, "pods", "total",
            (int)x->c.n_pods, "movable", (int)x->n_movable, "noController", (int)x->no_controller,
            "daemonSet", (int)x->daemonset, "severalBudgets", (int)x->several_pdbs,
            "disruptionBudgetAPI", x->pdbs.version, "placements", "verified",
            o->placement_key != NULL, "key", o->placement_key_note ? o->placement_key_note : "",
            "unverified", x->c.unverified);
        int rc = kc_emit(doc, o->output, o->out);
        json_decref(doc);
        return rc;
    }
    struct kc_table t;
    kc_table_init(&t, 4);
    kc_table_row(&t, "MOVE", "POD", "FROM", "TO (where the scheduler will place it)");
    for (size_t m = 0; m < pl->n_moves; m++) {
        const struct kc_pod *p = &x->c.pods[pl->moves[m].pod];
        char n[24], pod[600], from[2048], to[2048];
        snprintf(n, sizeof(n), "%zu", m + 1);
        snprintf(pod, sizeof(pod), "%s/%s", p->ns, p->name);
        where(p->a, from, sizeof(from));
        where(&pl->moves[m].to, to, sizeof(to));
        kc_table_row(&t, n, pod, from, to);
    }
    if (pl->n_moves > 0)
        kc_table_print(&t, o->out);
    else
        fprintf(o->out, "No move gains anything: nothing to do.\n");
    kc_table_free(&t);
    fprintf(o->out, "\nidle GPUs:            %u -> %u\n", pl->before.idle_gpus,
            pl->after.idle_gpus);
    fprintf(o->out, "fragmentation:        %.1f%% -> %.1f%% of the free GPU share\n",
            100 * pl->before.frag.ratio, 100 * pl->after.frag.ratio);
    fprintf(o->out, "pending pods that fit: %u -> %u of %zu\n", pl->before.pending_fit,
            pl->after.pending_fit, x->n_pending);
    fprintf(o->out,
            "moves: %zu (max %ld); pods: %zu placed, %zu movable (not movable: %zu without a "
            "controller, %zu DaemonSet, %zu under several disruption budgets; budgets read "
            "through policy/%s)\n",
            pl->n_moves, o->max_moves, x->c.n_pods, x->n_movable, x->no_controller, x->daemonset,
            x->several_pdbs, x->pdbs.version);
    size_t i;
    json_t *u;
    json_array_foreach(x->c.unverified, i, u)
    {
        char line[1400];
        snprintf(line, sizeof(line), "%s/%s: %s", json_string_value(json_object_get(u, "namespace")),
                 json_string_value(json_object_get(u, "pod")),
                 json_string_value(json_object_get(u, "reason")));
        kc_printable(line);
        fprintf(o->out, "%s%s\n",
                i == 0 ? "placements that do not verify (not counted, never moved):\n  " : "  ",
                line);
    }
    return KC_OK;
}

/* ---- --apply ------------------------------------------------------------ */

static bool same_assignment(const struct gv_alloc_assignment *a, const struct gv_alloc_assignment *b)
{
    if (strcmp(a->node, b->node) != 0 || a->n_containers != b->n_containers)
        return false;
    for (uint32_t k = 0; k < a->n_containers; k++) {
        if (a->containers[k].n_devices != b->containers[k].n_devices)
            return false;
        for (uint32_t d = 0; d < a->containers[k].n_devices; d++)
            if (strcmp(a->containers[k].devices[d].uuid, b->containers[k].devices[d].uuid) != 0)
                return false;
    }
    return true;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Step 1: the pod is still the one planned. NULL when it is, else why not. */
static const char *still_as_planned(struct gv_kube_client *kube, const struct kc_pod *p,
                                    char *why, size_t cap)
{
    char path[700];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", p->ns, p->name);
    json_t *now = NULL;
    struct gv_error e = {0};
    if (gv_kube_get(kube, path, &now, &e) != GV_OK) {
        snprintf(why, cap, "cannot read it again: %s", e.msg);
        return why;
    }
    const char *uid = meta(now, "uid");
    const char *node = json_string_value(json_object_get(json_object_get(now, "spec"), "nodeName"));
    const char *text = gv_podspec_annotation(now, GV_ALLOC_ASSIGNMENT_ANNOTATION);
    const char *was = gv_podspec_annotation(p->obj, GV_ALLOC_ASSIGNMENT_ANNOTATION);
    if (uid == NULL || strcmp(uid, p->req->uid) != 0)
        snprintf(why, cap, "it is another pod now (uid %s, planned %s)", uid ? uid : "none",
                 p->req->uid);
    else if (node == NULL || strcmp(node, p->node) != 0)
        snprintf(why, cap, "it runs on %s now, planned on %s", node ? node : "no node", p->node);
    else if (text == NULL || was == NULL || strcmp(text, was) != 0)
        snprintf(why, cap, "its GPU assignment changed");
    else if (json_object_get(json_object_get(now, "metadata"), "deletionTimestamp") != NULL)
        snprintf(why, cap, "it is being deleted already");
    else
        why = NULL;
    json_decref(now);
    return why;
}

/* Step 2. KC_OK, or KC_STOPPED with why. */
static int evict(struct gv_kube_client *once, const struct kc_pdbs *pdbs, const struct kc_pod *p,
                 char *why, size_t cap)
{
    char path[700], api[32];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/eviction", p->ns, p->name);
    snprintf(api, sizeof(api), "policy/%s", pdbs->version);
    json_t *body = json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:{s:s}}}", "apiVersion", api, "kind",
                             "Eviction", "metadata", "name", p->name, "namespace", p->ns,
                             "deleteOptions", "preconditions", "uid", p->req->uid);
    struct gv_error e = {0};
    gv_status st = body != NULL ? gv_kube_create(once, path, body, NULL, &e) : GV_ENOMEM;
    json_decref(body);
    if (st == GV_OK)
        return KC_OK;
    if (strstr(e.msg, "HTTP 429") != NULL)
        snprintf(why, cap, "eviction refused by a PodDisruptionBudget (HTTP 429): %s", e.msg);
    else
        snprintf(why, cap, "eviction failed: %s", e.msg);
    return KC_STOPPED;
}

/* Step 3: waits for the old pod to go and its replacement to be placed;
 * KC_OK when it landed as planned, else KC_STOPPED with why. */
static int await_replacement(struct gv_kube_client *kube, const struct kc_opts *o,
                             const struct kc_plan_ctx *x, const struct kc_pod *p,
                             const struct gv_alloc_assignment *to, json_t *known, char *repl,
                             size_t repl_cap, char *why, size_t cap)
{
    const char *dummy = NULL;
    const json_t *owner = controller_of(p->obj, &dummy);
    const char *owner_uid = json_string_value(json_object_get(owner, "uid"));
    char path[700], fsel[300];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", p->ns);
    snprintf(fsel, sizeof(fsel), "spec.schedulerName=%s", o->scheduler_name);
    struct gv_kube_list_opts lo = {.field_selector = fsel};
    double deadline = now_s() + (double)o->move_timeout_s;
    /* the replacement may be placed while the old pod still terminates:
     * remember it landed, and wait for the old one to go */
    bool gone = false, landed = false;
    (void)x;
    for (;;) {
        json_t *list = NULL;
        struct gv_error e = {0};
        if (gv_kube_list(kube, path, &lo, &list, &e) != GV_OK) {
            snprintf(why, cap, "cannot list pods: %s", e.msg);
            return KC_STOPPED;
        }
        gone = true;
        const json_t *found = NULL;
        size_t i;
        json_t *q;
        json_array_foreach(json_object_get(list, "items"), i, q)
        {
            const char *uid = meta(q, "uid");
            if (uid == NULL)
                continue;
            if (strcmp(uid, p->req->uid) == 0) {
                gone = false;
                continue;
            }
            if (json_object_get(known, uid) != NULL)
                continue;
            const json_t *qo = controller_of(q, &dummy);
            const char *qu = json_string_value(json_object_get(qo, "uid"));
            if (qu != NULL && owner_uid != NULL && strcmp(qu, owner_uid) == 0 &&
                gv_podspec_annotation(q, GV_ALLOC_ASSIGNMENT_ANNOTATION) != NULL)
                found = q;
        }
        if (found != NULL) {
            const char *text = gv_podspec_annotation(found, GV_ALLOC_ASSIGNMENT_ANNOTATION);
            struct gv_alloc_assignment *got = malloc(sizeof(*got));
            char bad[GV_ERROR_MSG_MAX];
            snprintf(repl, repl_cap, "%s/%s", p->ns, meta(found, "name"));
            if (!kc_placement_counts(o, found, bad, sizeof(bad))) {
                /* the scheduler did not write it: a tenant's pod posing as the replacement */
                snprintf(why, cap, "replacement %s carries a placement that does not verify: %s",
                         repl, bad);
                free(got);
                json_decref(list);
                return KC_STOPPED;
            }
            bool ok = got != NULL &&
                      gv_alloc_assignment_decode(text, strlen(text), got, NULL) == GV_OK &&
                      same_assignment(got, to);
            if (!ok) {
                char at[2048], plan[2048];
                if (got != NULL && gv_alloc_assignment_decode(text, strlen(text), got, NULL) == GV_OK)
                    where(got, at, sizeof(at));
                else
                    snprintf(at, sizeof(at), "an unreadable assignment");
                where(to, plan, sizeof(plan));
                snprintf(why, cap, "replacement %s was placed on %s, the plan said %s", repl, at,
                         plan);
            }
            json_object_set_new(known, meta(found, "uid"), json_true());
            free(got);
            if (!ok) {
                json_decref(list);
                return KC_STOPPED;
            }
            landed = true;
        }
        json_decref(list);
        if (landed && gone)
            return KC_OK;
        if (now_s() > deadline) {
            snprintf(why, cap, "%s within %lds",
                     !gone ? "the evicted pod did not go" : "no replacement was placed",
                     o->move_timeout_s);
            return KC_STOPPED;
        }
        usleep(300000);
    }
}

/* Step 4: the planned figures on the cluster as it is now. */
static int verify_gain(struct gv_kube_client *kube, const struct kc_opts *o,
                       const struct kc_plan_ctx *x, const struct gv_defrag_move *m, char *why,
                       size_t cap, uint32_t *idle_now)
{
    struct kc_plan_ctx y;
    memset(&y, 0, sizeof(y));
    struct gv_error e = {0};
    int rc = kc_cluster_load(kube, o, &y.c, &e);
    if (rc == KC_OK)
        rc = load_pending(&y, &e);
    struct gv_defrag_state s = {0};
    if (rc == KC_OK && gv_defrag_measure(y.c.engine,
                                         (const struct gv_alloc_request *const *)y.pending,
                                         y.n_pending, &s, &e) != GV_OK)
        rc = KC_ERR;
    if (rc != KC_OK) {
        snprintf(why, cap, "cannot read the cluster again: %s", e.msg);
        ctx_free(&y);
        return KC_STOPPED;
    }
    /* pending pods of the plan that have been placed since count as fitting */
    uint32_t placed = 0;
    for (size_t i = 0; i < x->n_pending; i++) {
        bool still = false;
        for (size_t k = 0; k < y.n_pending && !still; k++)
            still = strcmp(x->pending[i]->uid, y.pending[k]->uid) == 0;
        placed += !still;
    }
    *idle_now = s.idle_gpus;
    rc = KC_OK;
    if (x->n_pending > 0 && placed + s.pending_fit < m->pending_fit) {
        snprintf(why, cap, "%u pending pods fit or were placed, the plan said %u",
                 placed + s.pending_fit, m->pending_fit);
        rc = KC_STOPPED;
    } else if (x->n_pending == 0 && s.idle_gpus < m->idle_gpus) {
        snprintf(why, cap, "%u GPUs are idle, the plan said %u", s.idle_gpus, m->idle_gpus);
        rc = KC_STOPPED;
    }
    ctx_free(&y);
    return rc;
}

static int apply_plan(struct gv_kube_client *kube, const struct kc_opts *o, struct kc_plan_ctx *x)
{
    /* Evictions through a client that never retries: a 429 is an answer. */
    struct gv_kube_client *once = NULL;
    struct gv_kube_config *once_cfg = NULL;
    struct gv_error err = {0};
    if (kc_kube_client_once(o, &once, &once_cfg, &err) != 0) {
        fprintf(stderr, "kubectl-gpuvisor: %s\n", err.msg);
        gv_kube_client_free(once);
        gv_kube_config_free(once_cfg);
        return KC_ERR;
    }
    json_t *known = json_object(); /* uids seen: a replacement is a pod not in it */
    for (size_t i = 0; i < x->c.n_pods; i++)
        json_object_set_new(known, x->c.pods[i].req->uid, json_true());
    size_t i;
    json_t *pp;
    json_array_foreach(x->c.pending, i, pp) if (meta(pp, "uid") != NULL)
        json_object_set_new(known, meta(pp, "uid"), json_true());
    int rc = KC_OK;
    char why[8192], repl[600];
    /* progress on stdout beside a table, on stderr beside a document */
    FILE *log = o->output == KC_OUT_JSON || o->output == KC_OUT_YAML ? stderr : o->out;
    for (size_t m = 0; m < x->plan.n_moves && rc == KC_OK; m++) {
        const struct gv_defrag_move *mv = &x->plan.moves[m];
        const struct kc_pod *p = &x->c.pods[mv->pod];
        fprintf(log, "move %zu/%zu: %s/%s on %s: ", m + 1, x->plan.n_moves, p->ns, p->name,
                p->node);
        fflush(log);
        uint32_t idle = 0;
        if (still_as_planned(kube, p, why, sizeof(why)) != NULL ||
            evict(once, &x->pdbs, p, why, sizeof(why)) != KC_OK ||
            await_replacement(kube, o, x, p, &mv->to, known, repl, sizeof(repl), why,
                              sizeof(why)) != KC_OK ||
            verify_gain(kube, o, x, mv, why, sizeof(why), &idle) != KC_OK) {
            fprintf(log, "STOPPED: %s\n", why);
            fprintf(log, "stopped after %zu of %zu moves; nothing further was evicted\n", m,
                    x->plan.n_moves);
            rc = KC_STOPPED;
            break;
        }
        fprintf(log, "evicted; %s placed on %s as planned; %u GPUs idle (plan: %u)\n", repl,
                mv->to.node, idle, mv->idle_gpus);
    }
    if (rc == KC_OK)
        fprintf(log, "applied %zu moves\n", x->plan.n_moves);
    json_decref(known);
    gv_kube_client_free(once);
    gv_kube_config_free(once_cfg);
    return rc;
}

int kc_defrag(struct gv_kube_client *kube, const struct kc_opts *o)
{
    struct kc_plan_ctx x;
    memset(&x, 0, sizeof(x));
    struct gv_error err = {0};
    int rc = make_plan(kube, o, &x, &err);
    if (rc != KC_OK) {
        fprintf(stderr, "kubectl-gpuvisor: defrag: %s\n", err.msg);
        ctx_free(&x);
        return rc;
    }
    rc = print_plan(o, &x);
    if (rc == KC_OK && o->apply && x.plan.n_moves > 0)
        rc = apply_plan(kube, o, &x);
    ctx_free(&x);
    return rc;
}
