/*
 * PodDisruptionBudgets in gpuvisor-scheduler, for the preempt verb
 * (docs/scheduler.md, "Preemption"): an informer over the budgets
 * (policy/v1, or policy/v1beta1 on 1.20), the labels of the pods they may
 * cover, and kube-scheduler's own rule for which victims violate one.
 * Lock: the scheduler's.
 */
#ifndef GV_SCHED_PDB_H
#define GV_SCHED_PDB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/gv_error.h"

struct gv_sched;
struct gv_sched_pdb;

struct gv_sched_pdb *gv_sched_pdb_new(void);
void gv_sched_pdb_free(struct gv_sched_pdb *p);
/* Finds the served policy version and starts the budgets' informer (waits
 * for its first list, as for ResourceQuotas).  No API or no permission:
 * logged, and no victim counts as violating a budget.  Never fails the
 * start but for memory. */
gv_status gv_sched_pdb_start(struct gv_sched *s, struct gv_error *err);
void gv_sched_pdb_stop(struct gv_sched *s);

/* Pod informer, lock held: keeps the labels of a pod bound where gpuvisor
 * counts it when its namespace has a budget (bound false: forgets them). */
void gv_sched_pdb_pod(struct gv_sched *s, const json_t *pod, bool bound);
void gv_sched_pdb_pod_gone(struct gv_sched *s, const char *uid);

/*
 * kube-scheduler's count (filterPodsWithPDBViolation, 1.20): walk pods
 * from the most important (highest priority, then the oldest); each budget
 * that selects a pod (same namespace, non-empty selector, pod not already
 * in status.disruptedPods) spends one allowed disruption; a pod violates
 * when one of its budgets goes below zero.  Pods without labels match none.
 * A walk is one preempt call's snapshot of the budgets; NULL when there are
 * none (the fast path: nothing violates).  Lock held throughout.
 */
struct gv_sched_pdb_walk;
struct gv_sched_pdb_walk *gv_sched_pdb_walk_new(struct gv_sched *s);
/* Every budget back to its allowed disruptions (a new node, a new count). */
void gv_sched_pdb_walk_reset(struct gv_sched_pdb_walk *w);
/* Spends uid's budgets; true when evicting it violates one.  Unknown pods
 * (not placed by gpuvisor, no labels kept) spend nothing. */
bool gv_sched_pdb_walk_step(struct gv_sched_pdb_walk *w, struct gv_sched *s, const char *uid);
void gv_sched_pdb_walk_free(struct gv_sched_pdb_walk *w);

#endif
