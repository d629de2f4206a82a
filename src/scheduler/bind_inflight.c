/* Bindings that may still land: journal and holds (bind_inflight.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/gv_log.h"
#include "scheduler/bind_inflight.h"

#define PREFIX_LEN (sizeof(GV_INFLIGHT_PREFIX) - 1)

bool gv_sched_inflight_key(const char *uid)
{
    return uid != NULL && strncmp(uid, GV_INFLIGHT_PREFIX, PREFIX_LEN) == 0;
}

bool gv_sched_inflight_ambiguous(gv_status st)
{
    switch (st) {
    case GV_ETIMEOUT:
    case GV_EUNAVAILABLE:
    case GV_EIO:
    case GV_EPROTO:
    case GV_EPARSE:
    case GV_EINTERNAL:
        return true;
    default:
        return false;
    }
}

/* A pod uid usable as a file name: what the API server issues (a UUID);
 * anything else is not journaled (a caller's PodUID is input). */
static bool uid_ok(const char *uid)
{
    size_t n = uid != NULL ? strlen(uid) : 0;
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((uid[i] >= '0' && uid[i] <= '9') || (uid[i] >= 'a' && uid[i] <= 'z') ||
              (uid[i] >= 'A' && uid[i] <= 'Z') || uid[i] == '-'))
            return false;
    return true;
}

static bool entry_path(const struct gv_sched *s, const char *uid, const char *suffix, char *buf,
                       size_t cap)
{
    const char *dir = s->cfg.bind_journal_dir;
    if (dir == NULL || !uid_ok(uid))
        return false;
    int n = snprintf(buf, cap, "%s/%s%s", dir, uid, suffix);
    return n > 0 && (size_t)n < cap;
}

bool gv_sched_inflight_journal(struct gv_sched *s, const char *uid, const char *ns,
                               const char *name, const char *node, const char *encoded)
{
    char path[1024];
    if (!entry_path(s, uid, "", path, sizeof(path)))
        return false;
    json_t *e = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "uid", uid, "namespace", ns ? ns : "",
                          "name", name ? name : "", "node", node, "assignment", encoded,
                          "deadline", (json_int_t)(time(NULL) + GV_INFLIGHT_S));
    char *text = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    bool ok = false;
    if (text != NULL) {
        /* One write, in place: no rename (a metadata operation per bind
         * that cost measurably on a disk).  An entry cut short (the process
         * died while writing it) does not parse and is dropped at restore,
         * rightly: its Binding was not sent yet; only a 409, a definite
         * refusal, makes a bind write its entry again. */
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        size_t len = strlen(text);
        ok = fd >= 0 && write(fd, text, len) == (ssize_t)len;
        if (fd >= 0 && close(fd) != 0)
            ok = false;
        if (!ok) {
            gv_warn_limited("bind journal %s: %s (a restart meanwhile would not know this "
                            "Binding)",
                            path, strerror(errno));
            unlink(path);
        }
    }
    free(text);
    return ok;
}

void gv_sched_inflight_unjournal(struct gv_sched *s, const char *uid)
{
    char path[1024];
    if (entry_path(s, uid, "", path, sizeof(path)))
        unlink(path);
}

/* The record key of pod uid's hold, into key; false when it does not fit. */
static bool hold_key(const char *uid, char key[GV_ALLOC_UID_MAX])
{
    return uid != NULL &&
           (size_t)snprintf(key, GV_ALLOC_UID_MAX, GV_INFLIGHT_PREFIX "%s", uid) < GV_ALLOC_UID_MAX;
}

void gv_sched_inflight_hold(struct gv_sched *s, const char *uid, const char *ns,
                            const char *name, const char *encoded, time_t deadline)
{
    char key[GV_ALLOC_UID_MAX];
    if (encoded == NULL || !hold_key(uid, key))
        return;
    if (gv_alloc_is_placed(s->cluster, key))
        gv_alloc_release(s->cluster, key, NULL);
    struct gv_error err = {0};
    gv_status st = gv_sched_place_encoded(s, key, ns, name, encoded, REC_INFLIGHT, &err);
    struct srec *r = gv_sched_rec_find(s, key);
    if (st != GV_OK) {
        /* The GPUs are gone or taken (the API over-commits already):
         * nothing to hold the engine to.  The journal entry stays, the
         * record goes. */
        gv_warn("pod %s/%s: a Binding to %s may still land, but its GPUs cannot be held: %s",
                ns ? ns : "-", name ? name : "-", encoded, err.msg);
        if (r != NULL)
            gv_sched_rec_drop(s, key);
        return;
    }
    if (r != NULL)
        r->assigned_at = deadline;
    gv_info("pod %s/%s: its Binding may still land; %s held until %lds from now or until the "
            "pod shows its outcome",
            ns ? ns : "-", name ? name : "-", encoded, (long)(deadline - time(NULL)));
}

static void hold_drop(struct gv_sched *s, const char *key, const char *why)
{
    struct srec *r = gv_sched_rec_find(s, key);
    if (r == NULL || r->phase != REC_INFLIGHT)
        return;
    gv_info("pod %s/%s: in-flight Binding settled (%s); its hold released", r->ns, r->name, why);
    gv_sched_inflight_unjournal(s, key + PREFIX_LEN);
    gv_sched_forget_pod(s, key);
}

void gv_sched_inflight_pod(struct gv_sched *s, const char *uid, bool settled)
{
    char key[GV_ALLOC_UID_MAX];
    if (settled && hold_key(uid, key))
        hold_drop(s, key, "the pod is bound, finished or gone");
}

void gv_sched_inflight_expire(struct gv_sched *s, struct srec *r, time_t wall)
{
    if (r->phase != REC_INFLIGHT || wall <= r->assigned_at)
        return;
    char key[GV_ALLOC_UID_MAX]; /* r goes with the drop */
    snprintf(key, sizeof(key), "%s", r->uid);
    hold_drop(s, key, "past the API server's request timeout");
}

/* One journal entry (file name is uid) into a hold, or removed. */
static void restore_one(struct gv_sched *s, const char *dir, const char *file, time_t now)
{
    char path[1024];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
        return;
    json_error_t jerr;
    memset(&jerr, 0, sizeof(jerr));
    json_t *e = json_load_file(path, 0, &jerr);
    const char *uid = json_string_value(json_object_get(e, "uid"));
    const char *ns = json_string_value(json_object_get(e, "namespace"));
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *enc = json_string_value(json_object_get(e, "assignment"));
    json_int_t deadline = json_integer_value(json_object_get(e, "deadline"));
    if (uid == NULL || ns == NULL || name == NULL || enc == NULL || strcmp(uid, file) != 0) {
        /* cut short by a crash while it was written: never sent */
        gv_warn("bind journal %s: unreadable entry removed (%s)", path, jerr.text);
        unlink(path);
    } else if (deadline <= now) {
        unlink(path);
    } else if (deadline > now + GV_INFLIGHT_S) {
        gv_warn("bind journal %s: deadline in the future by more than %ds; held %ds", path,
                GV_INFLIGHT_S, GV_INFLIGHT_S);
        gv_sched_inflight_hold(s, uid, ns, name, enc, now + GV_INFLIGHT_S);
    } else {
        gv_sched_inflight_hold(s, uid, ns, name, enc, (time_t)deadline);
    }
    json_decref(e);
}

void gv_sched_inflight_restore(struct gv_sched *s)
{
    const char *dir = s->cfg.bind_journal_dir;
    if (dir == NULL)
        return;
    DIR *d = opendir(dir);
    if (d == NULL && errno == ENOENT && mkdir(dir, 0700) == 0)
        return; /* first start: nothing in flight */
    if (d == NULL) {
        gv_warn("bind journal %s: %s (Bindings in flight are not journaled)", dir,
                strerror(errno));
        return;
    }
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            restore_one(s, dir, de->d_name, now);
    closedir(d);
}

/* Entries past their deadline that no hold removed (a Binding whose outcome
 * stayed unknown and settled through the informer instead). */
static void prune(struct gv_sched *s, time_t now)
{
    const char *dir = s->cfg.bind_journal_dir;
    DIR *d = dir != NULL ? opendir(dir) : NULL;
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[1024];
        if (de->d_name[0] == '.' ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path))
            continue;
        json_t *e = json_load_file(path, 0, NULL);
        json_int_t deadline = json_integer_value(json_object_get(e, "deadline"));
        json_decref(e);
        if (e != NULL && deadline < now)
            unlink(path);
    }
    closedir(d);
}

struct held {
    char key[GV_ALLOC_UID_MAX];
    char ns[GV_ALLOC_NODE_MAX], name[GV_ALLOC_NODE_MAX];
};

void gv_sched_inflight_settle(struct gv_sched *s)
{
    time_t now = time(NULL);
    if (now - s->inflight_pruned >= 60) {
        s->inflight_pruned = now;
        prune(s, now);
    }
    if (s->pod_inf == NULL)
        return;
    struct held *h = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    /* Records are sorted by key: the holds are the run of keys with the
     * prefix, found by one search (not a walk of every pod's record each
     * second).  A hold whose pod the informer has meanwhile shown bound
     * (its event came before the hold was taken) settles here too, unless
     * a bind of ours for the pod is running: that bind settles it when it
     * knows which placement the pod is bound with (gv_sched_pod_update). */
    for (size_t i = gv_sched_rec_after(s, GV_INFLIGHT_PREFIX);
         i < s->n_recs && gv_sched_inflight_key(s->recs[i]->uid);) {
        const struct srec *r = s->recs[i];
        if (r->phase != REC_INFLIGHT) {
            i++;
            continue;
        }
        const struct srec *own = gv_sched_rec_find(s, r->uid + PREFIX_LEN);
        if (gv_sched_truth_bound(s, r->uid + PREFIX_LEN) &&
            (own == NULL || own->phase != REC_BINDING)) {
            char key[GV_ALLOC_UID_MAX]; /* r goes with the drop */
            snprintf(key, sizeof(key), "%s", r->uid);
            hold_drop(s, key, "the pod is bound");
            continue; /* the next record is at i now */
        }
        i++;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct held *nh = realloc(h, nc * sizeof(*nh));
            if (nh == NULL)
                break;
            h = nh;
            cap = nc;
        }
        snprintf(h[n].key, sizeof(h[n].key), "%s", r->uid);
        snprintf(h[n].ns, sizeof(h[n].ns), "%s", r->ns ? r->ns : "");
        snprintf(h[n].name, sizeof(h[n].name), "%s", r->name ? r->name : "");
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    /* The pod cache, without the lock (its callbacks take it).  It keeps
     * each pod's uid (sched.c, pod_transform). */
    for (size_t i = 0; i < n; i++) {
        json_t *v = gv_informer_get(s->pod_inf, h[i].ns, h[i].name);
        const char *uid = json_string_value(v);
        bool there = uid != NULL && strcmp(uid, h[i].key + PREFIX_LEN) == 0;
        json_decref(v);
        if (!there) {
            pthread_mutex_lock(&s->lock);
            hold_drop(s, h[i].key, "the pod is gone");
            pthread_mutex_unlock(&s->lock);
        }
    }
    free(h);
}
