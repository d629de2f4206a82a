/*
 * Private to the scheduler's cluster state: sched.c (nodes, life cycle),
 * sched_pods.c (pods and the truth table) and self_check.c (the engine's
 * accounting checked against the caches) share these helpers.  Imports run
 * one way: sched.c -> self_check.c -> sched_pods.c, all down to
 * sched_state.c (the tables), with observe.c, whole.c and quota_sched.c
 * below sched_pods.c.
 */
#ifndef GV_SCHED_PODS_H
#define GV_SCHED_PODS_H

#include "scheduler/sched_internal.h"

#define ANN_ASSIGNMENT GV_ALLOC_ASSIGNMENT_ANNOTATION
#define ANN_ASSIGNED_NODE "gpuvisor.io/assigned-node"
#define ANN_ASSIGNED_AT "gpuvisor.io/assigned-at"

/*
 * A truth-table entry is packed in one JSON string, "B\tAT\tRV\tNS\tNAME\tTEXT"
 * (B: 1 when bound; AT: assigned-at, epoch seconds; TEXT: the assignment):
 * ~250 bytes a pod, where a JSON object of the same fields cost ~800.
 */
struct truth {
    bool bound;
    time_t at;
    char rv[32];
    char ns[GV_ALLOC_NODE_MAX], name[GV_ALLOC_NODE_MAX];
    const char *text; /* into the entry */
};

/* truth.c */
json_t *truth_make(bool bound, time_t at, const char *rv, const char *ns, const char *name,
                   const char *text);
bool truth_get(json_t *t, struct truth *o);

/* sched_pods.c */
const char *truth_live(struct gv_sched *s, json_t *t, time_t wall);
void expire_locked(struct gv_sched *s, double now, time_t wall);
const char *str_at(json_t *obj, const char *a, const char *b);
const char *annotation(json_t *obj, const char *key);
uint64_t hash_text(const char *s);

/* self_check.c */
void node_replace(struct gv_sched *s, const char *node);

#endif
