/*
 * Which pod is being admitted: the kubelet names device IDs but no pod, so
 * Allocate and GetPreferredAllocation pick among the cached pods with a
 * pending assignment (oldest first, promises first).
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc/gv_alloc.h"
#include "common/gv_jalloc.h"
#include "contracts/gpushare.h"
#include "contracts/podspec.h"
#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "interposer/priority.h" /* the node directory's container path, priority range */
#include "node/modes/answer_internal.h"
#include "node/allocate/gv_allocator.h"
#include "node/allocate/gv_direct.h"
#include "node/modes/gv_mode.h"
#include "node/monitor/gv_monitor.h"
#include "node/kubelet/gv_grpc.h"
#include "node/loop/gv_loop.h"
#include "node/allocate/allocate_internal.h"

/* ---- choosing the pod ----------------------------------------------------- */

static const char *order_key(json_t *pod)
{
    const char *k = gv_podspec_annotation(pod, ANN_ASSIGNED_AT);
    return k ? k : jstr2(pod, "metadata", "creationTimestamp");
}

static bool earlier(json_t *x, const char *kx, json_t *y, const char *ky)
{
    int c = strcmp(kx ? kx : "", ky ? ky : "");
    if (c != 0)
        return c < 0;
    c = strcmp(jstr2(x, "metadata", "namespace") ? jstr2(x, "metadata", "namespace") : "",
               jstr2(y, "metadata", "namespace") ? jstr2(y, "metadata", "namespace") : "");
    if (c != 0)
        return c < 0;
    return strcmp(jstr2(x, "metadata", "name"), jstr2(y, "metadata", "name")) < 0;
}

/*
 * What the pod says about itself: it has an assignment and is not deleted,
 * finished, or done with allocation.  Only such a pod can be the one being
 * admitted, so only such a pod needs more than its identity in the cache.
 */
bool may_be_admitted(json_t *pod)
{
    const char *phase = jstr2(pod, "status", "phase");
    const char *progress = gv_podspec_annotation(pod, ANN_ALLOCATION);
    if (!gv_podspec_annotation(pod, ANN_ASSIGNMENT) ||
        json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"))
        return false;
    if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
        return false;
    return !(progress && (strcmp(progress, "success") == 0 || strcmp(progress, "failed") == 0));
}

struct light {
    json_t *pod;
    struct pod_state *state; /* NULL: not served yet */
    const char *order;
};

static int light_cmp(const void *x, const void *y)
{
    const struct light *a = x, *b = y;
    if (a->pod == b->pod)
        return 0;
    return earlier(a->pod, a->order, b->pod, b->order) ? -1 : 1;
}

/* Decodes the pod's assignment into c and checks it against this node. */
static gv_status decode_cand(struct gv_allocator *a, json_t *pod, struct candidate *c,
                             struct gv_error *err)
{
    const char *uid = jstr2(pod, "metadata", "uid");
    const char *text = gv_podspec_annotation(pod, ANN_ASSIGNMENT);
    memset(c, 0, sizeof(*c));
    c->pod = pod;
    gv_status st = gv_alloc_assignment_decode(text, strlen(text), &c->asg, err);
    if (st == GV_OK && strcmp(c->asg.node, a->node) != 0)
        st = gv_error_set(err, GV_EINVAL, "assignment is for node '%s', not '%s'", c->asg.node,
                          a->node);
    if (st == GV_OK) /* only placements gpuvisor wrote, opt-outs the admin allows */
        st = gv_placement_admit(a->cfg.placement, pod, err);
    for (size_t k = 0; st == GV_OK && k < c->asg.n_containers; k++) {
        if (!safe_component(c->asg.containers[k].name))
            st = gv_error_set(err, GV_EINVAL, "container name '%s' is not valid",
                              c->asg.containers[k].name);
        for (size_t d = 0; st == GV_OK && d < c->asg.containers[k].n_devices; d++)
            if (!find_gpu(a, c->asg.containers[k].devices[d].uuid))
                st = gv_error_set(err, GV_ENOTFOUND,
                                  "assigned GPU %s is not advertised on node %s "
                                  "(absent, excluded or MIG-enabled)",
                                  c->asg.containers[k].devices[d].uuid, a->node);
    }
    if (st == GV_OK && !safe_component(uid))
        st = gv_error_set(err, GV_EINVAL, "pod uid '%s' is not valid", uid);
    return st;
}

/* Index of the container to serve in c (want: that one, else the first not yet served); n when none. */
static size_t pending_index(json_t *pod, const struct pod_state *ps, const struct candidate *c,
                            const char *want)
{
    const char *listed = gv_podspec_annotation(pod, ANN_CONTAINERS);
    for (size_t k = 0; k < c->asg.n_containers; k++) {
        const char *cn = c->asg.containers[k].name;
        bool served = in_list(listed, cn) || (ps && pod_has(ps, cn));
        if (want ? strcmp(cn, want) == 0 && !served : !served)
            return k;
        if (want && strcmp(cn, want) == 0)
            break;
    }
    return c->asg.n_containers;
}

/*
 * When ctr's live promise was made (0: recovered), -1 when it has none;
 * -2 when the kubelet holds its IDs (some are missing from avail, the
 * kubelet's available list: a preference it took, Allocate on its way).
 */
static int64_t live_promise(const struct pod_state *ps, const char *ctr, const char *const *avail,
                            size_t n_avail)
{
    const struct ctr_rec *r = find_rec(ps, ctr);
    if (r == NULL || r->answered)
        return -1;
    for (const char *c = avail ? r->ids : NULL; c && *c;) {
        const char *e = strchr(c, ',');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        bool in = false;
        for (size_t i = 0; i < n_avail && !in; i++)
            in = strlen(avail[i]) == len && strncmp(avail[i], c, len) == 0;
        if (!in)
            return -2;
        c = e ? e + 1 : NULL;
    }
    return r->since;
}

/*
 * Caller holds a->mu.  Scans the cache snapshot for the pod being admitted:
 * cheap filters first, then assignments decoded oldest first.  key (the
 * request's IDs, NULL from GetPreferredAllocation): the container these IDs
 * were promised to wins; otherwise the oldest pending container asking
 * n_ids GPUs that no other request was promised, else the one promised
 * longest ago.  avail (GetPreferredAllocation: the kubelet's available
 * IDs): a container whose promised IDs the kubelet holds is not chosen
 * again.  A call costs one decode in the common case however many pods the
 * node has.
 */
void choose(struct gv_allocator *a, json_t *pods, size_t n_ids, const char *key,
                   const char *const *avail, size_t n_avail, struct choice *ch)
{
    size_t i, n = 0;
    json_t *pod;
    struct light *cand = malloc((json_array_size(pods) + 1) * sizeof(*cand));
    if (cand == NULL)
        return;
    json_array_foreach(pods, i, pod) {
        const char *uid = jstr2(pod, "metadata", "uid");
        const char *node = jstr2(pod, "spec", "nodeName");
        if (!uid || !jstr2(pod, "metadata", "namespace") || !jstr2(pod, "metadata", "name") || !node ||
            strcmp(node, a->node) != 0 || !may_be_admitted(pod))
            continue;
        struct pod_state *ps = find_pod(a, uid);
        if (ps && (ps->all_done || strcmp(ps->state, "failed") == 0))
            continue;
        cand[n++] = (struct light){pod, ps, order_key(pod)};
    }
    qsort(cand, n, sizeof(*cand), light_cmp);
    /* the container these exact IDs were promised to */
    const struct pod_state *promised = NULL;
    const char *promised_ctr = NULL;
    for (struct pod_state *p = a->pods; key && p && !promised; p = p->next)
        for (struct ctr_rec *r = p->recs; r && !promised; r = r->next)
            if (!r->answered && !p->ended && strcmp(r->ids, key) == 0) {
                promised = p;
                promised_ctr = r->ctr;
            }
    /*
     * Else the fitting container promised longest ago: a promise the
     * kubelet never used (its admission was cut short) is the likeliest to
     * be asked for again, a fresh one is about to be used.
     */
    ssize_t fallback = -1;
    int64_t fallback_since = INT64_MAX;
    struct candidate *c = &ch->best;
    for (int pass = promised ? 0 : 1; pass < 3 && !ch->found; pass++) {
        for (size_t j = 0; j < n && !ch->found; j++) {
            pod = cand[j].pod;
            struct pod_state *ps = cand[j].state;
            if (pass == 0 && ps != promised)
                continue;
            if (pass == 2 && (ssize_t)j != fallback)
                continue;
            struct gv_error err;
            if (decode_cand(a, pod, c, &err) != GV_OK) {
                if (pass == 1 && ch->n_bad < 8) {
                    ch->bad[ch->n_bad] = json_incref(pod);
                    snprintf(ch->bad_msg[ch->n_bad], sizeof(ch->bad_msg[0]), "%s", err.msg);
                    ch->n_bad++;
                }
                continue;
            }
            c->next = pending_index(pod, ps, c, pass == 0 ? promised_ctr : NULL);
            if (c->next == c->asg.n_containers)
                continue;
            if (c->asg.containers[c->next].n_devices != n_ids) {
                if (pass == 1 && ch->n_mismatch++ == 0)
                    snprintf(ch->mismatch, sizeof(ch->mismatch),
                             "pod %s/%s container %s is assigned %u GPU(s)",
                             jstr2(pod, "metadata", "namespace"), jstr2(pod, "metadata", "name"),
                             c->asg.containers[c->next].name, c->asg.containers[c->next].n_devices);
                continue;
            }
            int64_t since =
                pass == 1 ? live_promise(ps, c->asg.containers[c->next].name, avail, n_avail) : -1;
            if (since == -2)
                continue; /* the kubelet is admitting it with the promised IDs */
            if (since >= 0) {
                if (since < fallback_since) {
                    fallback = (ssize_t)j;
                    fallback_since = since;
                }
                continue;
            }
            ch->found = true;
            ch->by_promise = pass == 0;
        }
        if (pass == 1 && fallback < 0)
            break;
    }
    free(cand);
}

void choice_release(struct choice *ch)
{
    for (size_t i = 0; i < ch->n_bad; i++)
        json_decref(ch->bad[i]);
    ch->n_bad = 0;
}
