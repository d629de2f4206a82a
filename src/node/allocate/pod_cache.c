/*
 * The allocator's pod cache: informer events, the trimmed form a pod is kept
 * in, garbage collection of vanished pods' directories, and recovery of
 * answers and promises from disk after a restart.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

/* ---- cache events, GC, lifecycle ----------------------------------------- */

static void bump(struct gv_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    a->generation++;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
}

void on_add(void *ud, json_t *obj)
{
    struct gv_allocator *a = ud;
    const char *uid = cached_uid(obj);
    pthread_mutex_lock(&a->mu);
    struct pod_state *p = uid ? find_pod(a, uid) : NULL;
    if (p)
        p->gone_since = 0;
    pthread_mutex_unlock(&a->mu);
    bump(a);
}

void on_update(void *ud, json_t *old_obj, json_t *new_obj)
{
    (void)old_obj;
    on_add(ud, new_obj);
}

void on_delete(void *ud, json_t *obj)
{
    struct gv_allocator *a = ud;
    const char *uid = cached_uid(obj);
    pthread_mutex_lock(&a->mu);
    struct pod_state *p = uid ? find_pod(a, uid) : NULL;
    if (p && p->gone_since == 0)
        p->gone_since = gv_loop_now_ms();
    pthread_mutex_unlock(&a->mu);
    bump(a);
}

/*
 * Copies src[key] into dst when present.  A copy, not a reference: the
 * cached form must not keep parts of the decoded event alive, or they stay
 * behind in the heap, scattered among what was freed with the event.
 */
static void keep(json_t *dst, json_t *src, const char *key)
{
    json_t *v = json_object_get(src, key);
    if (v)
        json_object_set_new(dst, key, json_deep_copy(v));
}

/*
 * The annotations the agent reads.  Every other one (HAMi's, the
 * scheduler's other gpuvisor.io/ keys, kubectl's last-applied-configuration)
 * stays out of the cache.
 */
static const char *const read_annotations[] = {ANN_ASSIGNMENT, ANN_ASSIGNED_AT, ANN_ALLOCATION,
                                               ANN_CONTAINERS, ANN_PRELOAD,
                                               GV_PLACEMENT_NODE_ANNOTATION,
                                               GV_PLACEMENT_SIG_ANNOTATION};

/*
 * A pod that can no longer be admitted is cached as its uid alone, a JSON
 * string: GC and the cache callbacks need only to know it still exists.
 * The informer then compares a pod's versions by content, and a new
 * resourceVersion of a served pod is no change at all.  Such a form reads
 * as a pod without an assignment, so Allocate skips it as it would the
 * whole pod.
 *
 * A pod that may still be admitted (may_be_admitted) keeps what choose()
 * and build() read: uid, resourceVersion, name, namespace, node,
 * creationTimestamp when it has no assigned-at (the order key), the
 * annotations above, and per container its name, resources
 * (container_priority) and a CUDA_TASK_PRIORITY env entry (env_priority).
 * Its deletion and phase need no copy: they are known to be unset and not
 * final.  jansson spends ~220 bytes per object and ~170 per string member:
 * a small pending pod costs ~3.5 KiB, any other pod ~100 bytes.
 */
static json_t *cache_form(json_t *pod, bool admissible)
{
    json_t *m = json_object_get(pod, "metadata");
    if (!admissible) {
        const char *uid = jstr2(pod, "metadata", "uid");
        return uid ? json_string(uid) : NULL; /* no uid: nothing on disk to collect */
    }
    /* json_object_set_new takes its value even when it fails (NULL parent included) */
    json_t *out = json_object(), *meta = json_object();
    if (json_object_set_new(out, "metadata", meta) != 0) {
        json_decref(out);
        return json_incref(pod); /* out of memory: cache it whole rather than lose it */
    }
    keep(meta, m, "uid");
    keep(meta, m, "resourceVersion");
    keep(meta, m, "name");
    keep(meta, m, "namespace");
    json_t *anns = json_object(), *spec = json_object(), *ctrs = json_array(), *c;
    int bad = json_object_set_new(meta, "annotations", anns);
    bad |= json_object_set_new(spec, "containers", ctrs); /* before spec can be freed */
    bad |= json_object_set_new(out, "spec", spec);
    if (bad) {
        json_decref(out);
        return json_incref(pod);
    }
    for (size_t i = 0; i < sizeof(read_annotations) / sizeof(read_annotations[0]); i++)
        keep(anns, json_object_get(m, "annotations"), read_annotations[i]);
    if (!gv_podspec_annotation(pod, ANN_ASSIGNED_AT))
        keep(meta, m, "creationTimestamp");
    json_t *sp = json_object_get(pod, "spec");
    size_t i;
    keep(spec, sp, "nodeName");
    json_array_foreach(json_object_get(sp, "containers"), i, c) {
        json_t *tc = json_object(), *e;
        if (tc == NULL || json_array_append_new(ctrs, tc) != 0) {
            json_decref(out);
            return json_incref(pod);
        }
        keep(tc, c, "name");
        keep(tc, c, "resources");
        size_t j;
        json_array_foreach(json_object_get(c, "env"), j, e) {
            json_t *n = json_object_get(e, "name");
            if (json_is_string(n) && strcmp(json_string_value(n), "CUDA_TASK_PRIORITY") == 0) {
                json_object_set_new(tc, "env", json_pack("[o]", json_deep_copy(e)));
                break;
            }
        }
    }
    return out;
}

json_t *gv_allocator_cache_pod(json_t *pod)
{
    return cache_form(pod, may_be_admitted(pod));
}

/*
 * The informer's transform.  A form that may still be admitted is built in
 * the pending zone: such forms are the largest the cache holds (~3.5 KiB
 * each) and are all replaced by small ones as their pods are served.  From
 * the heap, the small forms, the cache's keys and the per-pod state
 * allocated meanwhile landed among them and pinned their pages: 500 served
 * pods left ~1.3 MiB of the heap free but resident.  In their own pages
 * they go back to the kernel as they die.
 */
json_t *trim_pod(void *ud, json_t *pod)
{
    struct gv_allocator *a = ud;
    observe(a, pod);
    bool admissible = may_be_admitted(pod), zoned = admissible && a->pending_zone != NULL;
    if (zoned)
        gv_jzone_enter(a->pending_zone);
    json_t *out = cache_form(pod, admissible);
    if (zoned)
        gv_jalloc_leave();
    return out;
}

/*
 * Removes name under dirfd, a directory with everything in it.  The runtime
 * directory is the tenant's (mounted writable): the agent, root, removes
 * what the tenant left there by handle, never by a path a link can
 * redirect: a link (to a directory or not) is unlinked as a link
 * (O_NOFOLLOW), and no entry is looked up by a path built from names.
 * Depth is bounded (each level holds a descriptor); what lies deeper stays
 * and the removal of the top reports it.
 */
#define RM_MAX_DEPTH 128

static int rm_at(int dirfd, const char *name, unsigned depth)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) /* not a directory: a file, a link, a socket */
        return unlinkat(dirfd, name, 0);
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && depth < RM_MAX_DEPTH)
            rm_at(fd, e->d_name, depth + 1);
    closedir(d);
    return unlinkat(dirfd, name, AT_REMOVEDIR);
}

static int rm_tree(const char *path)
{
    return rm_at(AT_FDCWD, path, 0);
}

size_t gv_allocator_gc(struct gv_allocator *a)
{
    if (a->pods_inf == NULL || !gv_informer_has_synced(a->pods_inf))
        return 0; /* an empty cache would look like "every pod is gone" */
    json_t *pods = gv_informer_list(a->pods_inf);
    size_t removed = 0;
    int64_t now = gv_loop_now_ms();
    /* both trees of a pod: its runtime directories and its limits and records */
    const char *tops[] = {"containers", "limits"};
    for (size_t t = 0; t < 2; t++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/%s", a->state_dir, tops[t]);
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            bool live = cached(pods, e->d_name);
            pthread_mutex_lock(&a->mu);
            struct pod_state *p = find_pod(a, e->d_name);
            if (!live && p && p->gone_since == 0)
                p->gone_since = now; /* gone from the cache: its grace period starts */
            if (!live && p && (now - p->gone_since < a->cfg.gc_grace_ms || p->writing))
                live = true;
            if (!live && p) {
                /* forget it: unlink from the list */
                for (struct pod_state **pp = &a->pods; *pp; pp = &(*pp)->next) {
                    if (*pp == p) {
                        *pp = p->next;
                        break;
                    }
                }
            }
            pthread_mutex_unlock(&a->mu);
            if (live)
                continue;
            pod_free(p); /* unlinked and not being written: nobody else can reach it */
            char path[4400], other[4400];
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            snprintf(other, sizeof(other), "%s/limits/%s", a->state_dir, e->d_name);
            bool counted_later = t == 0 && access(other, F_OK) == 0; /* one count per pod */
            if (rm_tree(path) == 0) {
                removed += !counted_later;
                gv_info("removed the %s directories of vanished pod %s", tops[t], e->d_name);
            } else {
                gv_warn("cannot remove %s: %s", path, strerror(errno));
            }
        }
        if (d)
            closedir(d);
    }
    /* Pods known only in memory (failed ones have no directory): forget them too. */
    pthread_mutex_lock(&a->mu);
    for (struct pod_state **pp = &a->pods; *pp;) {
        struct pod_state *p = *pp;
        bool live = cached(pods, p->uid);
        if (!live && p->gone_since == 0)
            p->gone_since = now;
        if (!live && !p->writing && now - p->gone_since >= a->cfg.gc_grace_ms) {
            *pp = p->next;
            pod_free(p);
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&a->mu);
    json_decref(pods);
    return removed;
}

/*
 * A restarted agent learns which containers it already answered, and what
 * it promised, from <state>/limits/<uid>/<ctr>/ (written before each reply
 * and each preference), in case the progress annotation had not reached
 * the API server yet.  Nothing the container can write counts: its runtime
 * directory is not read.
 */
void recover(struct gv_allocator *a)
{
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/limits", a->state_dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !safe_component(e->d_name))
            continue;
        char sub[4600];
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        DIR *cd = opendir(sub);
        if (cd == NULL)
            continue;
        struct dirent *ce;
        while ((ce = readdir(cd)) != NULL) {
            if (ce->d_name[0] == '.' || !safe_component(ce->d_name))
                continue;
            gv_ctr_sweep_tmp(a->state_dir, e->d_name, ce->d_name);
            char *text = NULL;
            struct gv_ctr_rec r;
            bool answered = gv_ctr_read_rec(a->state_dir, e->d_name, ce->d_name, "answer", &text, &r);
            bool promised = !answered && gv_ctr_read_rec(a->state_dir, e->d_name, ce->d_name, "promise", &text, &r);
            struct pod_state *p = answered || promised ? get_pod(a, e->d_name, r.ns, r.name) : NULL;
            if (p && answered && !pod_has(p, ce->d_name))
                pod_add_done(p, ce->d_name);
            if (p && set_rec(p, ce->d_name, r.ids, answered))
                find_rec(p, ce->d_name)->since = 0; /* before anything this run promises */
            if (p && answered) {
                if (r.containers > 0)
                    p->n_total = (unsigned)r.containers;
                p->recovered = true;
                p->all_done = p->n_total && p->n_done >= p->n_total;
                snprintf(p->state, sizeof(p->state), "%s", p->all_done ? "success" : "allocating");
            }
            free(text);
        }
        closedir(cd);
    }
    if (d)
        closedir(d);
}

/*
 * The informer's view of a pod this agent has records of (called from the
 * transform, with the whole pod): whether it ended, which containers the
 * kubelet created (their answer reached it: no more repeats), and, once
 * after a restart, whether the annotations show what was answered.
 */
void observe(struct gv_allocator *a, json_t *pod)
{
    const char *uid = jstr2(pod, "metadata", "uid");
    if (uid == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    struct pod_state *p = find_pod(a, uid);
    if (p == NULL) {
        pthread_mutex_unlock(&a->mu);
        return;
    }
    const char *phase = jstr2(pod, "status", "phase");
    p->ended = json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") ||
               (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0));
    size_t i;
    json_t *cs;
    json_array_foreach(json_object_get(json_object_get(pod, "status"), "containerStatuses"), i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *cid = json_string_value(json_object_get(cs, "containerID"));
        struct ctr_rec *r = name ? find_rec(p, name) : NULL;
        if (r && cid && *cid)
            r->started = true;
    }
    if (p->recovered) {
        p->recovered = false;
        if (p->ns == NULL)
            pod_set_name(p, jstr2(pod, "metadata", "namespace") ? jstr2(pod, "metadata", "namespace") : "",
                         jstr2(pod, "metadata", "name") ? jstr2(pod, "metadata", "name") : "");
        const char *listed = gv_podspec_annotation(pod, ANN_CONTAINERS);
        const char *progress = gv_podspec_annotation(pod, ANN_ALLOCATION);
        bool shown = !(p->all_done && !(progress && strcmp(progress, "success") == 0));
        for (const char *c = p->done; shown && c && *c;) {
            const char *e = strchr(c, ',');
            char one[GV_ALLOC_CNAME_MAX];
            snprintf(one, sizeof(one), "%.*s", (int)(e ? e - c : (ptrdiff_t)strlen(c)), c);
            shown = in_list(listed, one);
            c = e ? e + 1 : NULL;
        }
        if (!shown) { /* answered before the crash, never recorded: write it now */
            for (const char *c = listed; c && *c;) { /* keep what an earlier run recorded */
                const char *e = strchr(c, ',');
                char one[GV_ALLOC_CNAME_MAX];
                snprintf(one, sizeof(one), "%.*s", (int)(e ? e - c : (ptrdiff_t)strlen(c)), c);
                if (safe_component(one) && !pod_has(p, one))
                    pod_add_done(p, one);
                c = e ? e + 1 : NULL;
            }
            p->all_done = p->n_total && p->n_done >= p->n_total;
            snprintf(p->state, sizeof(p->state), "%s", p->all_done ? "success" : "allocating");
            p->version++;
            p->next_try = 0;
            pthread_cond_broadcast(&a->changed);
        }
    }
    pthread_mutex_unlock(&a->mu);
}
