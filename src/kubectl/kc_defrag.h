/*
 * Internals of `kubectl gpuvisor defrag` (defrag.c, defrag_pdb.c): the
 * PodDisruptionBudgets and owner rules that decide which pods may move.
 */
#ifndef KC_DEFRAG_H
#define KC_DEFRAG_H

#include "kubectl/gv_kubectl.h"

struct kc_pdbs {
    json_t *list;        /* the List: items[i] is budget group i */
    const char *version; /* "v1" or "v1beta1": also the Eviction's apiVersion */
};

/* Lists the budgets through policy/v1, else policy/v1beta1 (neither served:
 * none, and evictions use v1).  A KC_* code. */
int kc_pdb_load(struct gv_kube_client *kube, struct kc_pdbs *out, struct gv_error *err);
/* The budget (index) whose selector picks the pod in its namespace, -1 when
 * none; *several when more than one does (the Eviction API refuses those). */
int32_t kc_pdb_group(const struct kc_pdbs *p, const json_t *pod, bool *several);
/* status.disruptionsAllowed of budget i (0 when absent or negative). */
uint32_t kc_pdb_allowed(const struct kc_pdbs *p, size_t i);
size_t kc_pdb_count(const struct kc_pdbs *p);
const char *kc_pdb_name(const struct kc_pdbs *p, size_t i);
void kc_pdb_free(struct kc_pdbs *p);

#endif
