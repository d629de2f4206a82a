/*
 * GPU preemption when kube-scheduler does not call the preempt verb
 * (docs/scheduler.md, "Preemption", "kube-scheduler versions that never
 * call the verb").
 *
 * kube-scheduler 1.20.0 to 1.20.9 and 1.21.0 to 1.21.3 never hand their
 * extenders to the preemption plugin (kubernetes/kubernetes#102971, fixed
 * in 1.20.10, 1.21.4 and 1.22): a pod that fails the extender's filter is
 * "preempted" with GPU slices ignored, so kube-scheduler nominates a node
 * and evicts nobody, and the pod waits forever - what `make e2e` saw on
 * the loopback 1.20.2.  On such a version the extender finishes the job
 * itself: when the pod informer shows a GPU-slice pod nominated to a node
 * (status.nominatedNodeName, written by kube-scheduler's preemption) while
 * the verb has never been called in this process and the pod holds no
 * promise, a thread runs the verb's own decision for that one node (the
 * same victims, hold, events and metrics as a call from kube-scheduler)
 * and deletes the victims, as kube-scheduler would have.
 *
 * The same check runs when the extender's filter finds no room for a pod
 * that is nominated already: kube-scheduler retries a pending pod on
 * cluster events, so a preemption that found nothing to evict (the GPUs
 * promised to other preemptors) is tried again as they are placed.  One
 * run per pod at a time.  Once kube-scheduler calls the verb (a fixed
 * version), this never runs again in the process.  As kube-scheduler does (PodEligibleToPreemptOthers),
 * nothing is evicted while a lower-priority pod on the node is still
 * terminating: its GPUs are about to be freed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/gv_log.h"
#include "scheduler/preempt.h"
#include "scheduler/preempt_self.h"
#include "scheduler/sched_internal.h"

/* Preemptions running at once, at most (one per pod). */
#define INFLIGHT 64

struct gv_sched_preempt_self {
    atomic_bool verb_seen;
    atomic_uint_fast64_t started, evicted;
    atomic_int running; /* threads still using the scheduler */
    pthread_mutex_t mu; /* guards inflight */
    char *inflight[INFLIGHT]; /* uids of the pods a preemption runs for */
};

struct gv_sched_preempt_self *gv_sched_preempt_self_new(void)
{
    struct gv_sched_preempt_self *p = calloc(1, sizeof(*p));
    if (p != NULL && pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* Claims uid's slot; false when a preemption for it runs already or
 * INFLIGHT run. */
static bool claim(struct gv_sched_preempt_self *p, const char *uid)
{
    bool ok = false;
    pthread_mutex_lock(&p->mu);
    size_t free_at = INFLIGHT;
    for (size_t i = 0; i < INFLIGHT; i++) {
        if (p->inflight[i] == NULL) {
            free_at = free_at < i ? free_at : i;
        } else if (strcmp(p->inflight[i], uid) == 0) {
            free_at = INFLIGHT;
            break;
        }
    }
    if (free_at < INFLIGHT && (p->inflight[free_at] = strdup(uid)) != NULL)
        ok = true;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

static void unclaim(struct gv_sched_preempt_self *p, const char *uid)
{
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < INFLIGHT; i++)
        if (p->inflight[i] != NULL && strcmp(p->inflight[i], uid) == 0) {
            free(p->inflight[i]);
            p->inflight[i] = NULL;
            break;
        }
    pthread_mutex_unlock(&p->mu);
}

void gv_sched_preempt_self_free(struct gv_sched_preempt_self *p)
{
    if (p == NULL)
        return;
    /* the threads use the scheduler: they end within their API calls'
     * timeouts */
    for (int i = 0; i < 3000 && atomic_load(&p->running) > 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    for (size_t i = 0; i < INFLIGHT; i++)
        free(p->inflight[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void gv_sched_preempt_self_verb(void *ctx, const struct gv_http_request *hreq,
                                struct gv_http_response *resp)
{
    struct gv_sched *s = ctx;
    if (s->preempt_self != NULL)
        atomic_store(&s->preempt_self->verb_seen, true);
    gv_sched_handle_preempt(ctx, hreq, resp);
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    return json_string_value(json_object_get(json_object_get(o, a), b));
}

struct job {
    struct gv_sched *s;
    json_t *pod;
    char *node;
};

/* A lower-priority pod on the node still terminating? (kube-scheduler's
 * own rule: its GPUs are on their way; evicting more would be too many.) */
static bool terminating_below(const json_t *items, int32_t prio)
{
    size_t i;
    json_t *p;
    json_array_foreach(items, i, p)
    {
        const json_t *md = json_object_get(p, "metadata");
        if (json_object_get(md, "deletionTimestamp") != NULL &&
            !json_is_null(json_object_get(md, "deletionTimestamp")) &&
            gv_sched_pod_priority(p) < prio)
            return true;
    }
    return false;
}

static void *run(void *arg)
{
    struct job *j = arg;
    struct gv_sched *s = j->s;
    const char *ns = str_at(j->pod, "metadata", "namespace"),
               *name = str_at(j->pod, "metadata", "name");
    char path[512];
    json_t *list = NULL, *answer = NULL, *args = NULL;
    char *body = NULL;
    struct gv_error err = {0};
    snprintf(path, sizeof(path), "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s", j->node);
    if (gv_kube_get(s->kube, path, &list, &err) != GV_OK) {
        gv_warn("preempt: %s/%s nominated to %s: listing its pods: %s", ns, name, j->node,
                err.msg);
        goto out;
    }
    json_t *items = json_object_get(list, "items");
    if (terminating_below(items, gv_sched_pod_priority(j->pod))) {
        gv_info("preempt: %s/%s nominated to %s: lower-priority pods still terminating there; "
                "nothing more evicted",
                ns, name, j->node);
        goto out;
    }
    /* the verb's own decision, for the nominated node, kube-scheduler's
     * nodeCacheCapable body with no victims of its own (as it finds them) */
    args = json_pack("{s:O,s:n,s:{s:{s:[],s:i}}}", "Pod", j->pod, "NodeNameToVictims",
                     "NodeNameToMetaVictims", j->node, "Pods", "NumPDBViolations", 0);
    body = args ? json_dumps(args, JSON_COMPACT) : NULL;
    if (body == NULL)
        goto out;
    struct gv_http_request rq = {.method = "POST", .path = "preempt", .body = body,
                                 .body_len = strlen(body)};
    struct gv_http_response rs = {.status = 200};
    gv_sched_handle_preempt(s, &rq, &rs);
    answer = rs.status == 200 && rs.body ? json_loads(rs.body, 0, NULL) : NULL;
    free(rs.body);
    json_t *victims = json_object_get(
        json_object_get(json_object_get(answer, "NodeNameToMetaVictims"), j->node), "Pods");
    size_t k, i;
    json_t *v, *p;
    json_array_foreach(victims, k, v)
    {
        const char *uid = json_string_value(json_object_get(v, "UID"));
        /* only a pod bound there, as kube-scheduler resolves victims */
        json_array_foreach(items, i, p)
        {
            if (uid == NULL || str_at(p, "metadata", "uid") == NULL ||
                strcmp(uid, str_at(p, "metadata", "uid")) != 0)
                continue;
            const char *vns = str_at(p, "metadata", "namespace"),
                       *vname = str_at(p, "metadata", "name");
            snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", vns, vname);
            /* uid precondition: a pod recreated under the victim's name
             * since the LIST (a StatefulSet's) is not the victim */
            if (gv_kube_delete_uid(s->kube, path, uid, NULL, &err) == GV_OK ||
                err.code == GV_ENOTFOUND) {
                atomic_fetch_add(&s->preempt_self->evicted, 1);
                gv_info("preempt: %s/%s evicted for %s/%s on %s (kube-scheduler did not call "
                        "the preempt verb)",
                        vns, vname, ns, name, j->node);
            } else {
                gv_warn("preempt: evicting %s/%s for %s/%s: %s", vns, vname, ns, name, err.msg);
            }
        }
    }
out:
    free(body);
    json_decref(args);
    json_decref(answer);
    json_decref(list);
    unclaim(s->preempt_self, str_at(j->pod, "metadata", "uid"));
    json_decref(j->pod);
    free(j->node);
    free(j);
    atomic_fetch_sub(&s->preempt_self->running, 1);
    return NULL;
}

/* Does node hold a pod gpuvisor placed with a priority below prio?  (Pods
 * of equal priority are never victims: kube-scheduler nominates pods of
 * priority 0 beside others of 0 all the time, and those need no run.) */
static bool lower_on(struct gv_sched *s, const char *node, int32_t prio)
{
    struct gv_alloc_victim c[256];
    size_t n = gv_alloc_node_victims(s->cluster, node, c, 256);
    for (size_t i = 0; i < n && i < 256; i++)
        if (c[i].priority < prio)
            return true;
    return n > 256; /* more than looked at: let the verb decide */
}

void gv_sched_preempt_self_pod(struct gv_sched *s, json_t *pod, bool finished)
{
    struct gv_sched_preempt_self *p = s->preempt_self;
    if (p == NULL || s->kube == NULL || finished || atomic_load(&p->verb_seen))
        return;
    const char *uid = str_at(pod, "metadata", "uid"), *bound = str_at(pod, "spec", "nodeName"),
               *nominated = str_at(pod, "status", "nominatedNodeName"),
               *policy = str_at(pod, "spec", "preemptionPolicy");
    if (uid == NULL || (bound != NULL && *bound != '\0') || nominated == NULL ||
        *nominated == '\0' || (policy != NULL && strcmp(policy, "Never") == 0) ||
        gv_sched_preempt_has_hold(s, uid))
        return;
    const struct srec *r = gv_sched_rec_find(s, uid);
    if (r != NULL && gv_sched_phase_placed(r->phase))
        return; /* it has GPUs already */
    if (!lower_on(s, nominated, gv_sched_pod_priority(pod)))
        return; /* nobody it may evict there: no API call, no thread */
    struct job *j = calloc(1, sizeof(*j));
    if (j == NULL || (j->node = strdup(nominated)) == NULL || !claim(p, uid)) {
        if (j != NULL)
            free(j->node);
        free(j);
        return;
    }
    j->s = s;
    j->pod = json_deep_copy(pod);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&p->running, 1);
    if (j->pod == NULL || pthread_create(&t, &attr, run, j) != 0) {
        atomic_fetch_sub(&p->running, 1);
        unclaim(p, uid);
        json_decref(j->pod);
        free(j->node);
        free(j);
    } else {
        atomic_fetch_add(&p->started, 1);
    }
    pthread_attr_destroy(&attr);
}

void gv_sched_preempt_self_metrics(struct gv_sched *s, FILE *f)
{
    struct gv_sched_preempt_self *p = s->preempt_self;
    if (p == NULL)
        return;
    fprintf(f,
            "# HELP gpuvisor_scheduler_preempt_verb_called Whether kube-scheduler has called the "
            "preempt verb since this process started (0 on kube-scheduler 1.20.0-1.20.9 and "
            "1.21.0-1.21.3, which never do).\n"
            "# TYPE gpuvisor_scheduler_preempt_verb_called gauge\n"
            "gpuvisor_scheduler_preempt_verb_called %d\n"
            "# HELP gpuvisor_scheduler_preemptions_without_verb_total Preemptions the extender "
            "ran itself for a pod kube-scheduler nominated without calling the verb.\n"
            "# TYPE gpuvisor_scheduler_preemptions_without_verb_total counter\n"
            "gpuvisor_scheduler_preemptions_without_verb_total %llu\n"
            "# HELP gpuvisor_scheduler_preemption_evictions_total Victims the extender deleted "
            "itself (preemptions without the verb).\n"
            "# TYPE gpuvisor_scheduler_preemption_evictions_total counter\n"
            "gpuvisor_scheduler_preemption_evictions_total %llu\n",
            atomic_load(&p->verb_seen) ? 1 : 0, (unsigned long long)atomic_load(&p->started),
            (unsigned long long)atomic_load(&p->evicted));
}
