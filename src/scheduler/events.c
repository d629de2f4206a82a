/* Kubernetes Events on pods: see events.h. */
#include "scheduler/events.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "common/gv_log.h"
#include "scheduler/sched_internal.h"

/* Token bucket for events: 5 a second, bursts of 20. */
static bool event_allowed(void)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static double tokens = 20, last;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    pthread_mutex_lock(&mu);
    tokens += (t - last) * 5;
    if (tokens > 20)
        tokens = 20;
    last = t;
    bool ok = tokens >= 1;
    if (ok)
        tokens -= 1;
    pthread_mutex_unlock(&mu);
    return ok;
}

void gv_sched_pod_event(struct gv_kube_client *kube, const char *ns, const char *name,
                        const char *uid, const char *type, const char *reason,
                        const char *message, const char *suffix)
{
    if (kube == NULL || ns == NULL || name == NULL || uid == NULL || !event_allowed())
        return;
    char ev_name[300], path[512], now[48];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    gv_sched_format_time(&ts, now, sizeof(now));
    snprintf(ev_name, sizeof(ev_name), "%.200s.%.13s.%.60s", name, uid, suffix);
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
    json_t *ev = json_pack(
        "{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:s,s:{s:s},s:s,s:s,s:i}",
        "apiVersion", "v1", "kind", "Event", "metadata", "name", ev_name, "namespace", ns,
        "involvedObject", "apiVersion", "v1", "kind", "Pod", "namespace", ns, "name", name, "uid",
        uid, "type", type, "reason", reason, "message", message, "source",
        "component", "gpuvisor-scheduler", "firstTimestamp", now, "lastTimestamp", now, "count",
        1);
    struct gv_error err = {0};
    /* An existing event (409) means this was reported already. */
    if (ev != NULL && gv_kube_create(kube, path, ev, NULL, &err) != GV_OK &&
        err.code != GV_ECONFLICT && err.code != GV_EEXIST)
        gv_debug("event on pod %s/%s: %s", ns, name, err.msg);
    json_decref(ev);
}
