/*
 * The truth table's entry codec: one packed string per pod with an
 * assignment (format in sched_pods.h, struct truth).  Its own file so that
 * what reads the table without applying it (bind_inflight.c) does not
 * import the pod accounting (sched_pods.c), which calls back into it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_pods.h"

json_t *truth_make(bool bound, time_t at, const char *rv, const char *ns, const char *name,
                   const char *text)
{
    char *buf = NULL;
    if (asprintf(&buf, "%d\t%lld\t%s\t%s\t%s\t%s", bound ? 1 : 0, (long long)at, rv ? rv : "",
                 ns ? ns : "", name ? name : "", text) < 0)
        return NULL;
    json_t *j = json_string(buf);
    free(buf);
    return j;
}

/* Copies the field at *p (up to a tab) into buf; false when absent or long. */
static bool truth_field(const char **p, char *buf, size_t cap)
{
    const char *tab = strchr(*p, '\t');
    size_t n = tab ? (size_t)(tab - *p) : 0;
    if (tab == NULL || n >= cap)
        return false;
    memcpy(buf, *p, n);
    buf[n] = '\0';
    *p = tab + 1;
    return true;
}

bool truth_get(json_t *t, struct truth *o)
{
    const char *p = json_string_value(t);
    char num[32];
    if (p == NULL || !truth_field(&p, num, sizeof(num)))
        return false;
    o->bound = num[0] == '1';
    if (!truth_field(&p, num, sizeof(num)))
        return false;
    o->at = (time_t)strtoll(num, NULL, 10);
    if (!truth_field(&p, o->rv, sizeof(o->rv)) || !truth_field(&p, o->ns, sizeof(o->ns)) ||
        !truth_field(&p, o->name, sizeof(o->name)))
        return false;
    o->text = p;
    return true;
}

bool gv_sched_truth_bound(struct gv_sched *s, const char *uid)
{
    struct truth o;
    return truth_get(json_object_get(s->truth, uid), &o) && o.bound;
}
