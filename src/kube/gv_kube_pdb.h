/*
 * PodDisruptionBudgets, read the same way by every gpuvisor component that
 * evicts pods or chooses whom to evict: `kubectl gpuvisor defrag` (which
 * budgets a move spends) and gpuvisor-scheduler's preempt verb (which
 * victims violate one, docs/scheduler.md "Preemption").
 *
 * policy/v1 is served from Kubernetes 1.21, policy/v1beta1 up to 1.24; 1.20
 * serves only v1beta1.  The versions differ on one point: an empty selector
 * ({}) selects every pod of the namespace in v1 (the Eviction API's view)
 * and none in v1beta1.  kube-scheduler's preemption counts neither a nil
 * nor an empty selector as matching, whatever the version; the callers say
 * which rule they follow.
 */
#ifndef GV_KUBE_PDB_H
#define GV_KUBE_PDB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kube/gv_kube.h"

/*
 * The budgets' API: LISTs /apis/policy/v1/poddisruptionbudgets, else (404)
 * policy/v1beta1.  *version gets "v1" or "v1beta1" (static); *list the
 * List when list is not NULL (else a one-item probe).  Neither served:
 * GV_ENOTFOUND.  Other failures (403 without RBAC, network) as the client
 * reports them.
 */
gv_status gv_kube_pdb_version(struct gv_kube_client *c, const char **version, json_t **list,
                              struct gv_error *err);

/* A LabelSelector (matchLabels, matchExpressions) against a label set; an
 * empty one selects all or nothing as told, a missing or malformed one
 * nothing, an operator not known nothing (never act on a guess). */
bool gv_kube_selector_match(const json_t *sel, const json_t *labels, bool empty_selects_all);

/* Whether budget pdb covers a pod of namespace ns with these labels. */
bool gv_kube_pdb_selects(const json_t *pdb, const char *ns, const json_t *labels,
                         bool empty_selects_all);

/* status.disruptionsAllowed (negative or absent read as 0). */
int32_t gv_kube_pdb_allowed(const json_t *pdb);

/* Whether the pod named name is in status.disruptedPods: an eviction the
 * API server already processed, which no longer spends the budget. */
bool gv_kube_pdb_disrupted(const json_t *pdb, const char *name);

#endif
