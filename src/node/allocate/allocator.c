/* Allocate from the scheduler's assignment: see gv_allocator.h. */
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

static void mark_bad(struct gv_allocator *a, struct choice *ch)
{
    for (size_t i = 0; i < ch->n_bad; i++) {
        const char *uid = jstr2(ch->bad[i], "metadata", "uid");
        pthread_mutex_lock(&a->mu);
        struct pod_state *p = get_pod(a, uid, jstr2(ch->bad[i], "metadata", "namespace"),
                                      jstr2(ch->bad[i], "metadata", "name"));
        pthread_mutex_unlock(&a->mu);
        if (p)
            record(a, p, "failed", ch->bad_msg[i]);
    }
}

/* A device ID as we advertise them: <uuid> or <uuid>::<slice>; nothing else reaches a record. */
static bool id_wellformed(const char *id)
{
    if (!gv_ctr_value_ok(id, "-_.:/") || strlen(id) >= 64)
        return false;
    const char *sep = strstr(id, "::");
    return sep == NULL ? strchr(id, ':') == NULL
                       : sep[2] && strspn(sep + 2, "0123456789") == strlen(sep + 2) &&
                             memchr(id, ':', (size_t)(sep - id)) == NULL;
}

/* An answer the kubelet may still be asking for: the container answered,
 * not created yet, its pod alive (in the cache, not ended).  Caller holds
 * a->mu. */
static bool answer_pending(const struct pod_state *p, const struct ctr_rec *r, json_t *pods)
{
    return r->answered && !r->started && !p->ended && p->gone_since == 0 && cached(pods, p->uid);
}

/*
 * A repeat of a request already answered (the kubelet, or a kubelet
 * restarted with the agent, asks again after the reply was lost): the same
 * IDs, a pod still alive and a container not created yet.  Caller holds
 * a->mu; copies the pod's uid and the container's name out.
 */
static bool find_replay(struct gv_allocator *a, json_t *pods, const char *key, char *uid,
                        size_t ucap, char *ctr, size_t ccap)
{
    for (struct pod_state *p = a->pods; p; p = p->next)
        for (struct ctr_rec *r = p->recs; r; r = r->next)
            if (strcmp(r->ids, key) == 0 && answer_pending(p, r, pods)) {
                snprintf(uid, ucap, "%s", p->uid);
                snprintf(ctr, ccap, "%s", r->ctr);
                return true;
            }
    return false;
}

/* How many device IDs a comma-joined key names. */
static size_t key_count(const char *key)
{
    size_t n = key[0] != '\0';
    for (const char *c = key; *c; c++)
        n += *c == ',';
    return n;
}

/*
 * The kubelet admitting again, with other IDs, a container it was already
 * answered for: kubelet 1.20 drops a pod's devices when it races with
 * another pod's admission (its device manager forgets the allocation of a
 * pod it tears down, re-allocates it from the pod worker, and the two
 * Allocate calls cross; docs/node-agent.md "Allocate state machine").
 * Allocate names no pod, so the torn-down pod's call may take the answer
 * of the pod being admitted, whose own admission then has nothing to find.
 * Once the cache wait found no pod with an unanswered assignment, the
 * candidates are the containers answered but not created, of live pods,
 * asking as many GPUs, that the kubelet's checkpoint holds no devices for
 * (one it holds devices for was admitted: this call is some other pod's,
 * one nobody assigned, say, which must not share its slice).  No
 * checkpoint to read: no candidates.  Caller holds a->mu; returns how many
 * there are and copies the first one's uid and container out.
 */
static size_t find_readmission(struct gv_allocator *a, json_t *pods, json_t *held, size_t n_ids,
                               char *uid, size_t ucap, char *ctr, size_t ccap)
{
    size_t n = 0;
    for (struct pod_state *p = a->pods; held && p; p = p->next)
        for (struct ctr_rec *r = p->recs; r; r = r->next)
            if (key_count(r->ids) == n_ids && answer_pending(p, r, pods) &&
                !kubelet_checkpoint_holds(held, p->uid, r->ctr, a->resource_name) && n++ == 0) {
                snprintf(uid, ucap, "%s", p->uid);
                snprintf(ctr, ccap, "%s", r->ctr);
            }
    return n;
}

static int replay(struct gv_allocator *a, const char *uid, const char *ctr,
                  V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap)
{
    char *text;
    struct gv_ctr_rec r;
    struct gv_error err;
    if (!gv_ctr_read_rec(a->state_dir, uid, ctr, "answer", &text, &r))
        return fail(msg, cap, GV_GRPC_INTERNAL, "pod %s container %s: the answer record is gone",
                    uid, ctr);
    gv_status st = gv_ctr_load_answer(&r, resp, &err);
    /* the mount sources must exist again (someone may have removed them):
     * the runtime directory, the region in it (a mount of its own) and the
     * node's priority directory */
    if (st == GV_OK && resp->n_mounts)
        st = gv_ctr_runtime(a->state_dir, uid, ctr, &err);
    if (st == GV_OK && resp->n_mounts)
        st = gv_ctr_shared_dir(a->node_dir, &err);
    if (st != GV_OK) {
        free(text);
        return fail(msg, cap, GV_GRPC_INTERNAL, "pod %s/%s container %s: %s", r.ns, r.name, ctr,
                    err.msg);
    }
    pthread_mutex_lock(&a->mu);
    a->stats.replays++;
    pthread_mutex_unlock(&a->mu);
    gv_info("Allocate: repeated request for pod %s/%s container %s (%s): the same answer again",
            r.ns, r.name, ctr, r.ids);
    free(text);
    return GV_GRPC_OK;
}

/* Whether the kubelet's IDs name exactly the GPUs of the assignment (as a multiset). */
static bool ids_match_assignment(char uuids[][GV_ALLOC_UUID_MAX], size_t n,
                                 const struct gv_alloc_container_assign *c)
{
    bool used[GV_ALLOC_MAX_DEVICES] = {false};
    for (uint32_t d = 0; d < c->n_devices; d++) {
        bool hit = false;
        for (size_t i = 0; i < n && !hit; i++)
            if (!used[i] && strcmp(uuids[i], c->devices[d].uuid) == 0)
                hit = used[i] = true;
        if (!hit)
            return false;
    }
    return true;
}

/*
 * When waiting for the cache ends (monotonic ms): none for plain GPUs (pods
 * gpuvisor did not schedule are answered at once) or fixed pod lists; else
 * --allocate-wait-ms, after waiting for the first list.
 */
static int64_t cache_deadline(struct gv_allocator *a, bool plain)
{
    int64_t deadline = gv_loop_now_ms() + (plain || a->fixed_pods ? 0 : a->cfg.wait_ms);
    if (!plain && a->pods_inf)
        gv_informer_wait_synced(a->pods_inf, a->cfg.wait_ms);
    return deadline;
}

/* The pods as the cache shows them now (new reference; NULL when out of memory). */
static json_t *snapshot(struct gv_allocator *a)
{
    return a->fixed_pods ? json_incref(a->fixed_pods) : gv_informer_list(a->pods_inf);
}

/*
 * Caller holds a->mu.  Sleeps until the pod cache changes (the generation
 * moves on from gen) or the deadline (monotonic ms); false when there is no
 * time left to wait.  The kubelet can be a few ms ahead of our watch.
 */
static bool wait_for_cache(struct gv_allocator *a, uint64_t gen, int64_t deadline)
{
    int64_t left = deadline - gv_loop_now_ms();
    if (left <= 0 || a->quit)
        return false;
    struct timespec ts;
    gv_loop_abstime(&ts, left);
    while (a->generation == gen && !a->quit)
        if (pthread_cond_timedwait(&a->changed, &a->mu, &ts) != 0)
            break;
    return true;
}

static int allocate(struct gv_allocator *a, const char *const *ids, size_t n_ids,
                    V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap,
                    struct choice *ch, char *key)
{
    int64_t t_start = gv_loop_now_us();
    char uuids[GV_ALLOC_MAX_DEVICES][GV_ALLOC_UUID_MAX];
    if (n_ids == 0 || n_ids > GV_ALLOC_MAX_DEVICES)
        return fail(msg, cap, GV_GRPC_INVALID_ARGUMENT, "Allocate asks for %zu devices (1..%d)",
                    n_ids, GV_ALLOC_MAX_DEVICES);
    bool all_plain = true, all_vm = true;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n_ids; i++) {
        const struct gv_allocator_gpu *g =
            id_wellformed(ids[i]) && id_to_uuid(ids[i], uuids[i], sizeof(uuids[i]))
                ? find_gpu(a, uuids[i])
                : NULL;
        if (g == NULL) {
            pthread_mutex_unlock(&a->mu);
            return fail(msg, cap, GV_GRPC_INVALID_ARGUMENT, "unknown device ID '%s'", ids[i]);
        }
        all_plain &= plain_unit(g);
        all_vm &= vm_unit(g);
    }
    pthread_mutex_unlock(&a->mu);
    /* a VM's devices: a gpuvisor pod waiting for as many GPUs must not take this call */
    if (all_vm)
        return build(a, NULL, NULL, uuids, n_ids, resp, msg, cap);
    if (a->kube == NULL && a->fixed_pods == NULL) {
        if (all_plain)
            return build(a, NULL, NULL, uuids, n_ids, resp, msg, cap);
        return fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                    "no API server connection: cannot read the pod's assignment");
    }

    /* Find the pod; wait a little for the cache when the kubelet is ahead of it. */
    int64_t deadline = cache_deadline(a, all_plain);
    struct pod_state *ps = NULL;
    char r_uid[128], r_ctr[GV_ALLOC_CNAME_MAX];
    bool again = false;
    for (;;) {
        memset(ch, 0, sizeof(*ch));
        json_t *pods = snapshot(a);
        pthread_mutex_lock(&a->mu);
        uint64_t gen = a->generation;
        if (pods)
            again = find_replay(a, pods, key, r_uid, sizeof(r_uid), r_ctr, sizeof(r_ctr));
        if (pods && !again)
            choose(a, pods, n_ids, key, NULL, 0, ch);
        if (ch->found) {
            const char *uid = jstr2(ch->best.pod, "metadata", "uid");
            ps = get_pod(a, uid, jstr2(ch->best.pod, "metadata", "namespace"),
                         jstr2(ch->best.pod, "metadata", "name"));
            if (ps)
                snprintf(ps->inflight, sizeof(ps->inflight), "%s",
                         ch->best.asg.containers[ch->best.next].name);
            json_incref(ch->best.pod);
        }
        if (!again && !ch->found && ch->n_bad == 0 && wait_for_cache(a, gen, deadline)) {
            pthread_mutex_unlock(&a->mu);
            json_decref(pods);
            choice_release(ch);
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        json_decref(pods);
        break;
    }
    if (again)
        return replay(a, r_uid, r_ctr, resp, msg, cap);
    if (!ch->found && !all_plain && ch->n_bad == 0) {
        json_t *pods = snapshot(a);
        json_t *held = kubelet_checkpoint_load(a->checkpoint);
        pthread_mutex_lock(&a->mu);
        size_t n_re = pods ? find_readmission(a, pods, held, n_ids, r_uid, sizeof(r_uid), r_ctr,
                                              sizeof(r_ctr))
                           : 0;
        pthread_mutex_unlock(&a->mu);
        json_decref(held);
        json_decref(pods);
        if (n_re == 1) {
            gv_info("Allocate: IDs %s asked again for pod %s container %s, answered before, not "
                    "created, no devices in the kubelet's checkpoint (the kubelet admits it "
                    "again): its answer",
                    key, r_uid, r_ctr);
            choice_release(ch);
            return replay(a, r_uid, r_ctr, resp, msg, cap);
        }
        if (n_re > 1) {
            choice_release(ch);
            return fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                        "no pending pod on node %s has an unallocated gpuvisor.io/assignment for "
                        "%zu GPU(s), and %zu containers answered but not created could be the one "
                        "admitted again: refused rather than guessed",
                        a->node, n_ids, n_re);
        }
    }
    if (!ch->found) {
        if (all_plain && ch->n_bad == 0)
            return build(a, NULL, NULL, uuids, n_ids, resp, msg, cap);
        int code;
        if (ch->n_bad) {
            char names[512] = "";
            for (size_t i = 0; i < ch->n_bad; i++) {
                size_t l = strlen(names);
                snprintf(names + l, sizeof(names) - l, "%spod %s/%s: %s", i ? "; " : "",
                         jstr2(ch->bad[i], "metadata", "namespace"), jstr2(ch->bad[i], "metadata", "name"),
                         ch->bad_msg[i]);
            }
            code = fail(msg, cap, GV_GRPC_INVALID_ARGUMENT,
                        "the GPU assignment of the pod being admitted is unusable: %s", names);
            mark_bad(a, ch);
        } else if (ch->n_mismatch) {
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                        "no pending pod on node %s has a container assigned %zu GPU(s) (%s)",
                        a->node, n_ids, ch->mismatch);
        } else {
            code = fail(msg, cap, GV_GRPC_FAILED_PRECONDITION,
                        "no pending pod on node %s has an unallocated gpuvisor.io/assignment "
                        "for %zu GPU(s): was the pod scheduled by gpuvisor-scheduler?",
                        a->node, n_ids);
        }
        choice_release(ch);
        return code;
    }
    choice_release(ch);
    if (ps == NULL) {
        json_decref(ch->best.pod);
        return fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    const struct gv_alloc_container_assign *c = &ch->best.asg.containers[ch->best.next];
    const char *uid = jstr2(ch->best.pod, "metadata", "uid");
    bool same_gpus = ids_match_assignment(uuids, n_ids, c);
    if (!same_gpus) {
        /*
         * The kubelet ignored (or never asked) our preference: the
         * container still gets the GPUs and limits of its assignment, but
         * the kubelet's checkpoint and PodResources name other devices.
         */
        char want[GV_ALLOC_MAX_DEVICES * GV_ALLOC_UUID_MAX + 16] = "";
        for (uint32_t d = 0; d < c->n_devices; d++) {
            if (d)
                strcat(want, ",");
            strcat(want, c->devices[d].uuid);
        }
        gv_warn("Allocate: pod %s/%s container %s: the kubelet handed device IDs %s, on other "
                "GPUs than assigned (%s): the container gets the assigned GPUs and limits; the "
                "kubelet's checkpoint and PodResources will name the IDs it handed",
                ps->ns, ps->name, c->name, key, want);
    }
    int64_t t_chosen = gv_loop_now_us();
    int code = build(a, ch->best.pod, c, NULL, 0, resp, msg, cap);
    if (code == GV_GRPC_OK) {
        /* Durable before the reply: a repeat of this request gets these bytes back. */
        struct gv_error err;
        if (gv_ctr_write_answer(a->state_dir, uid, ps->ns, ps->name, c->name, ch->best.asg.n_containers, key, resp,
                         &err) != GV_OK)
            code = fail(msg, cap, GV_GRPC_INTERNAL, "container %s: cannot record the answer: %s",
                        c->name, err.msg);
    }
    int64_t t_built = gv_loop_now_us();

    /* Progress: this container done; the pod is a success once all are. */
    const char *listed = gv_podspec_annotation(ch->best.pod, ANN_CONTAINERS);
    pthread_mutex_lock(&a->mu);
    ps->inflight[0] = '\0';
    if (code == GV_GRPC_OK) {
        /* carry over what an earlier run of the agent recorded */
        for (size_t k = 0; k < ch->best.asg.n_containers; k++) {
            const char *cn = ch->best.asg.containers[k].name;
            if (in_list(listed, cn) && !pod_has(ps, cn))
                pod_add_done(ps, cn);
        }
        if (!pod_add_done(ps, c->name) || !set_rec(ps, c->name, key, true))
            gv_warn("pod %s/%s: cannot record container %s as served (out of memory)", ps->ns,
                    ps->name, c->name);
        ps->n_total = ch->best.asg.n_containers;
        ps->all_done = ps->n_done >= ch->best.asg.n_containers;
        a->stats.answered++;
        a->stats.by_promise += ch->by_promise;
        a->stats.id_mismatches += !same_gpus;
    }
    bool all = ps->all_done;
    pthread_mutex_unlock(&a->mu);
    if (code == GV_GRPC_OK) {
        record(a, ps, all ? "success" : "allocating", NULL);
        gv_info("Allocate: pod %s/%s container %s -> %u GPU(s)%s (find %lld us, build %lld us, "
                "record %lld us)",
                ps->ns, ps->name, c->name, c->n_devices, ch->by_promise ? ", the IDs we preferred" : "",
                (long long)(t_chosen - t_start), (long long)(t_built - t_chosen),
                (long long)(gv_loop_now_us() - t_built));
    } else {
        record(a, ps, "failed", msg);
    }
    json_decref(ch->best.pod);
    return code;
}

int gv_allocator_allocate(void *ud, const char *const *ids, size_t n_ids,
                          V1beta1__ContainerAllocateResponse *resp, char *msg, size_t cap)
{
    /*
     * A choice holds a decoded assignment (~35 KiB).  On the heap its pages
     * go back after the call; on a worker's stack they would stay resident
     * for good, in each of the 4 workers.
     */
    struct choice *ch = malloc(sizeof(*ch));
    char *key = n_ids ? ids_key(ids, n_ids) : strdup("");
    int code;
    if (ch == NULL || key == NULL)
        code = fail(msg, cap, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    else
        code = allocate(ud, ids, n_ids, resp, msg, cap, ch, key);
    free(ch);
    free(key);
    return code;
}

void gv_allocator_get_stats(struct gv_allocator *a, struct gv_allocator_stats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->stats;
    pthread_mutex_unlock(&a->mu);
}

/*
 * Caller holds a->mu.  One device on each GPU of the chosen container, from
 * the kubelet's must-include IDs first, then its available ones not
 * promised to another container; records the promise.  *key: the promised
 * request's identity (to free), NULL when it cannot be honoured.
 */
static bool pick_preferred(struct gv_allocator *a, json_t *pods, const struct choice *ch,
                           const char *const *avail, size_t n_avail, const char *const *must,
                           size_t n_must, const char **pick, char **key)
{
    const struct gv_alloc_container_assign *c = &ch->best.asg.containers[ch->best.next];
    const char *uid = jstr2(ch->best.pod, "metadata", "uid");
    const char *ns = jstr2(ch->best.pod, "metadata", "namespace");
    const char *name = jstr2(ch->best.pod, "metadata", "name");
    *key = NULL;
    for (uint32_t d = 0; d < c->n_devices; d++) {
        const char *id = NULL;
        char u[GV_ALLOC_UUID_MAX];
        for (size_t pass = 0; pass < 2 && !id; pass++) {
            const char *const *list = pass ? avail : must;
            size_t nl = pass ? n_avail : n_must;
            for (size_t i = 0; i < nl && !id; i++) {
                bool taken = false;
                for (uint32_t k = 0; k < d; k++)
                    taken |= strcmp(pick[k], list[i]) == 0;
                if (!taken && id_wellformed(list[i]) && id_to_uuid(list[i], u, sizeof(u)) &&
                    strcmp(u, c->devices[d].uuid) == 0 &&
                    (pass == 0 || !taken_elsewhere(a, pods, list[i], uid, c->name)))
                    id = list[i];
            }
        }
        if (id == NULL) {
            gv_warn("GetPreferredAllocation: pod %s/%s container %s is assigned GPU %s, which has "
                    "no device left in the kubelet's available list", ns, name, c->name,
                    c->devices[d].uuid);
            return false;
        }
        pick[d] = id;
    }
    /* a must-include device on another GPU: the kubelet insists, we cannot honour both */
    for (size_t i = 0; i < n_must; i++) {
        bool in = false;
        for (uint32_t k = 0; k < c->n_devices; k++)
            in |= strcmp(pick[k], must[i]) == 0;
        if (!in)
            return false;
    }
    *key = ids_key(pick, c->n_devices);
    struct pod_state *ps = *key ? get_pod(a, uid, ns, name) : NULL;
    if (ps == NULL || !set_rec(ps, c->name, *key, false)) {
        free(*key);
        *key = NULL;
        return false;
    }
    return true;
}

bool gv_allocator_prefer(void *ud, const char *const *avail, size_t n_avail,
                         const char *const *must, size_t n_must, size_t size, const char **out,
                         size_t *n_out)
{
    struct gv_allocator *a = ud;
    *n_out = 0;
    if (size == 0 || size > GV_ALLOC_MAX_DEVICES || (a->kube == NULL && a->fixed_pods == NULL))
        return false;
    /* like Allocate: the kubelet may be a few ms ahead of our watch; no wait for plain GPUs */
    bool plain = true, vm = n_avail > 0;
    enum gv_inventory_mode vm_mode = GV_INVENTORY_MODE_COUNT;
    char u[GV_ALLOC_UUID_MAX];
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n_avail; i++) {
        const struct gv_allocator_gpu *g =
            id_wellformed(avail[i]) && id_to_uuid(avail[i], u, sizeof(u)) ? find_gpu(a, u) : NULL;
        plain &= g == NULL || plain_unit(g);
        vm &= g != NULL && vm_unit(g) && (i == 0 || g->settings.mode == vm_mode);
        if (g != NULL)
            vm_mode = g->settings.mode;
    }
    pthread_mutex_unlock(&a->mu);
    if (vm) { /* no pod to promise to: the mode's own preference, else the generic one */
        const struct gv_mode *md = gv_mode_get(vm_mode);
        if (md == NULL || md->prefer == NULL)
            return false;
        *n_out = md->prefer(gv_modes_state(a->modes, vm_mode), avail, n_avail, must, n_must, size,
                            out);
        return *n_out == size;
    }
    int64_t deadline = cache_deadline(a, plain);
    struct choice *ch = malloc(sizeof(*ch));
    if (ch == NULL)
        return false;
    const char *pick[GV_ALLOC_MAX_DEVICES];
    char uid[128] = "", ns[128] = "", name[256] = "", ctr[GV_ALLOC_CNAME_MAX] = "", *key = NULL;
    bool ok = false;
    for (;;) {
        memset(ch, 0, sizeof(*ch));
        json_t *pods = snapshot(a);
        pthread_mutex_lock(&a->mu);
        uint64_t gen = a->generation;
        if (pods)
            choose(a, pods, size, NULL, avail, n_avail, ch);
        if (ch->found) {
            ok = pick_preferred(a, pods, ch, avail, n_avail, must, n_must, pick, &key);
            snprintf(uid, sizeof(uid), "%s", jstr2(ch->best.pod, "metadata", "uid"));
            snprintf(ns, sizeof(ns), "%s", jstr2(ch->best.pod, "metadata", "namespace"));
            snprintf(name, sizeof(name), "%s", jstr2(ch->best.pod, "metadata", "name"));
            snprintf(ctr, sizeof(ctr), "%s", ch->best.asg.containers[ch->best.next].name);
        }
        if (!ch->found && wait_for_cache(a, gen, deadline)) {
            pthread_mutex_unlock(&a->mu);
            json_decref(pods);
            choice_release(ch);
            continue;
        }
        a->stats.preferred += ok;
        a->stats.preferred_generic += !ok;
        pthread_mutex_unlock(&a->mu);
        json_decref(pods);
        choice_release(ch);
        break;
    }
    if (ok) {
        memcpy(out, pick, size * sizeof(*out));
        *n_out = size;
        gv_ctr_write_promise(a->state_dir, uid, ns, name, ctr, key);
        gv_debug("GetPreferredAllocation: pod %s/%s container %s -> %s", ns, name, ctr, key);
    }
    free(key);
    free(ch);
    return ok;
}

gv_status gv_allocator_set_gpus(struct gv_allocator *a, const struct gv_node_config *cfg,
                                const struct gv_allocator_gpu *gpus, size_t n,
                                struct gv_error *err)
{
    struct gv_allocator_gpu *copy = calloc(n + 1, sizeof(*copy));
    if (copy == NULL)
        return gv_error_set(err, GV_ENOMEM, "allocator: out of memory");
    if (n)
        memcpy(copy, gpus, n * sizeof(*copy));
    pthread_mutex_lock(&a->mu);
    free(a->gpus);
    a->gpus = copy;
    a->n_gpus = n;
    a->cdi = cfg->cdi;
    snprintf(a->cdi_kind, sizeof(a->cdi_kind), "%s", cfg->cdi_kind);
    snprintf(a->core_policy, sizeof(a->core_policy), "%s", cfg->core_policy);
    snprintf(a->libcuda_log_level, sizeof(a->libcuda_log_level), "%s", cfg->libcuda_log_level);
    snprintf(a->resource_name, sizeof(a->resource_name), "%s", cfg->resource_name);
    a->generation++;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
    return GV_OK;
}

void gv_allocator_set_pods(struct gv_allocator *a, json_t *pods)
{
    size_t i;
    json_t *pod, *cached = json_array();
    json_array_foreach(pods, i, pod) /* exactly what the informer would cache */
        json_array_append_new(cached, gv_allocator_cache_pod(pod));
    json_decref(a->fixed_pods);
    a->fixed_pods = cached;
}

bool gv_allocator_synced(struct gv_allocator *a)
{
    return a->pods_inf && gv_informer_has_synced(a->pods_inf);
}

bool gv_allocator_wait_synced(struct gv_allocator *a, int64_t ms)
{
    return a->pods_inf == NULL || gv_informer_wait_synced(a->pods_inf, ms);
}

size_t gv_allocator_pending_writes(struct gv_allocator *a)
{
    size_t n = 0;
    pthread_mutex_lock(&a->mu);
    for (struct pod_state *p = a->pods; p; p = p->next)
        n += p->version != p->written && p->gone_since == 0;
    pthread_mutex_unlock(&a->mu);
    return n;
}

gv_status gv_allocator_new(const struct gv_allocator_config *cfg, struct gv_kube_client *kube,
                           struct gv_kube_client *writer, struct gv_allocator **out,
                           struct gv_error *err)
{
    struct gv_allocator *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return gv_error_set(err, GV_ENOMEM, "allocator: out of memory");
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->changed, NULL);
    a->cfg = *cfg;
    a->cfg.wait_ms = cfg->wait_ms > 0 ? cfg->wait_ms : 5000;
    a->cfg.gc_grace_ms = cfg->gc_grace_ms > 0 ? cfg->gc_grace_ms : 60000;
    a->node = strdup(cfg->node);
    a->state_dir = strdup(cfg->state_dir);
    a->host_state_dir = strdup(cfg->host_state_dir ? cfg->host_state_dir : cfg->state_dir);
    a->install_dir = strdup(cfg->install_dir);
    a->checkpoint = cfg->kubelet_checkpoint ? strdup(cfg->kubelet_checkpoint) : NULL;
    a->kube = kube;
    a->writer = writer ? writer : kube;
    if (!a->node || !a->state_dir || !a->host_state_dir || !a->install_dir ||
        (cfg->kubelet_checkpoint && !a->checkpoint)) {
        gv_error_set(err, GV_ENOMEM, "allocator: out of memory");
        goto fail;
    }
    snprintf(a->node_dir, sizeof(a->node_dir), "%s/node", a->state_dir);
    snprintf(a->host_node_dir, sizeof(a->host_node_dir), "%s/node", a->host_state_dir);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/containers", a->state_dir);
    if ((mkdir(a->state_dir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(dir, 0755) != 0 && errno != EEXIST)) {
        gv_error_set(err, GV_EIO, "allocator: cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (gv_ctr_shared_dir(a->node_dir, err) != GV_OK) {
        gv_error_prefix(err, "allocator: node priority directory: ");
        goto fail;
    }
    a->modes = cfg->modes;
    if (a->modes == NULL) {
        struct gv_mode_env env = {.state_dir = a->state_dir, .host_state_dir = a->host_state_dir,
                                  .install_dir = a->install_dir};
        if (gv_modes_new(&env, &a->own_modes, err) != GV_OK)
            goto fail;
        a->modes = a->own_modes;
    }
    recover(a);
    if (kube) {
        char selector[600];
        snprintf(selector, sizeof(selector), "spec.nodeName=%s", a->node);
        /* Address space only: ~16,000 forms; past that they come from malloc. */
        if (gv_jzone_new((size_t)64 << 20, &a->pending_zone, err) != GV_OK)
            goto fail;
        struct gv_informer_opts io = {.field_selector = selector, .transform = trim_pod,
                                      .transform_ud = a};
        struct gv_informer_callbacks cb = {on_add, on_update, on_delete, a};
        if (gv_informer_new(kube, "/api/v1/pods", &io, &cb, &a->pods_inf, err) != GV_OK ||
            gv_informer_start(a->pods_inf, err) != GV_OK)
            goto fail;
        if (pthread_create(&a->writer_thread, NULL, writer_main, a) != 0) {
            gv_error_set(err, GV_EINTERNAL, "allocator: cannot start the retry thread");
            goto fail;
        }
        a->writer_running = true;
    }
    *out = a;
    return GV_OK;
fail:
    gv_allocator_free(a);
    return err ? err->code : GV_EINTERNAL;
}

void gv_allocator_free(struct gv_allocator *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    a->quit = true;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
    if (a->writer_running)
        pthread_join(a->writer_thread, NULL);
    gv_informer_free(a->pods_inf); /* the last holder of pending forms */
    gv_jzone_free(a->pending_zone);
    json_decref(a->fixed_pods);
    while (a->pods) {
        struct pod_state *p = a->pods;
        a->pods = p->next;
        pod_free(p);
    }
    gv_cdi_host_free(a->direct);
    free(a->gpus);
    gv_modes_free(a->own_modes);
    free(a->node);
    free(a->state_dir);
    free(a->host_state_dir);
    free(a->checkpoint);
    free(a->install_dir);
    pthread_cond_destroy(&a->changed);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* nvidiaRuntime false: Allocate mounts what h lists (taken over; NULL: back to the runtime). */
void gv_allocator_set_direct(struct gv_allocator *a, struct gv_cdi_host *h)
{
    pthread_mutex_lock(&a->mu);
    struct gv_cdi_host *old = a->direct;
    a->direct = h;
    pthread_mutex_unlock(&a->mu);
    gv_cdi_host_free(old);
}
