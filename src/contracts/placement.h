/*
 * Placement signatures: a placement annotation counts only if gpuvisor
 * wrote it (docs/isolation.md, "Placements").
 *
 * The scheduler signs each bind with HMAC-SHA256 over the pod uid, the
 * node, the bind time and the assignment text, under a key only the
 * scheduler and the node agents can read (a Secret mounted as a file).  The
 * signature goes into the annotation gpuvisor.io/assignment-sig beside the
 * others.  Every reader (the scheduler's pod informer for accounting, the
 * node agent's Allocate) verifies it and ignores the placement when it does
 * not match: a tenant that can patch its own pod can neither forge a
 * placement nor move a real one to another pod (the uid is signed), another
 * node, another time or other GPUs.  This holds while the admission webhook
 * is down, which the webhook's own checks cannot promise.
 *
 * Key file: one or more keys, one a line, each at least 32 bytes of text
 * (e.g. `openssl rand -hex 32`); surrounding spaces ignored, `#` lines are
 * comments.  The first key signs; every key verifies (rotation: add the new
 * key second, roll out, move it first, roll out, drop the old one).
 */
#ifndef GV_CONTRACTS_PLACEMENT_H
#define GV_CONTRACTS_PLACEMENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "common/gv_error.h"

#define GV_PLACEMENT_SIG_ANNOTATION "gpuvisor.io/assignment-sig"
#define GV_PLACEMENT_NODE_ANNOTATION "gpuvisor.io/assigned-node"
#define GV_PLACEMENT_AT_ANNOTATION "gpuvisor.io/assigned-at"
/* "v1." + 64 hex digits + NUL */
#define GV_PLACEMENT_SIG_MAX 72
#define GV_PLACEMENT_KEY_MIN 32
#define GV_PLACEMENT_KEYS_MAX 4

struct gv_placement_key;

/* Loads the key file; errors name the file and what is wrong with it. */
gv_status gv_placement_key_load(const char *path, struct gv_placement_key **out,
                                struct gv_error *err);
/* Same from text (tests, fuzzing). */
gv_status gv_placement_key_parse(const char *text, size_t len, struct gv_placement_key **out,
                                 struct gv_error *err);
void gv_placement_key_free(struct gv_placement_key *k);

/* Signs with the first key: out gets "v1.<hex>" (cap >= GV_PLACEMENT_SIG_MAX). */
gv_status gv_placement_sign(const struct gv_placement_key *k, const char *uid, const char *node,
                            const char *assigned_at, const char *assignment, char *out,
                            size_t cap, struct gv_error *err);

/*
 * Verifies the placement annotations of a Pod object (metadata.uid,
 * gpuvisor.io/assignment, -node, -at, -sig).  GV_OK when a key signed
 * exactly these values; GV_EINVAL with the reason otherwise (missing
 * signature, unknown version, mismatch).  Constant time in the signature.
 */
gv_status gv_placement_verify_pod(const struct gv_placement_key *k, const json_t *pod,
                                  struct gv_error *err);

/*
 * Whether a pod's placement counts, the one rule every reader that holds
 * the key applies (the scheduler's accounting, `kubectl gpuvisor`): GV_OK
 * when a key signed it (gv_placement_verify_pod), or, in an upgrade window,
 * when it carries no signature at all and the API server created the pod
 * before unsigned_before (0: no window; creationTimestamp is the one clock
 * a tenant cannot choose, and only in the form the API server writes it).
 * GV_EINVAL with the signature's reason otherwise.
 */
gv_status gv_placement_check_pod(const struct gv_placement_key *k, time_t unsigned_before,
                                 const json_t *pod, struct gv_error *err);

/*
 * What a node agent checks before it hands a pod's placement out
 * (Allocate): the signature when key is set, and that a pod opting out of
 * the interposer (gpuvisor.io/preload: "false") sits in a namespace the
 * admin listed (opt_out_namespaces, NULL-terminated; NULL = none).
 */
struct gv_placement_policy {
    const struct gv_placement_key *key; /* NULL: placements unauthenticated (insecure) */
    const char *const *opt_out_namespaces;
};

/* GV_OK when the pod may be served; GV_EINVAL with the reason otherwise. */
gv_status gv_placement_admit(const struct gv_placement_policy *pol, const json_t *pod,
                             struct gv_error *err);

/*
 * Nominated holds (docs/scheduler.md, "Preemption"): the GPUs a preemption
 * promised a pod, kept on the pod itself so they survive a scheduler
 * restart.  The annotation's value is JSON {"node","until","assignment",
 * "sig"}; sig is the same HMAC as a placement's over (pod uid, node, until,
 * assignment) under a domain of its own: a tenant can neither forge a hold,
 * nor copy one to another pod (the uid is signed), nor extend one (until
 * is signed), nor pass a hold off as a placement or the reverse.
 */
#define GV_HOLD_ANNOTATION "gpuvisor.io/nominated-hold"
gv_status gv_hold_sign(const struct gv_placement_key *k, const char *uid, const char *node,
                       const char *until, const char *assignment, char *out, size_t cap,
                       struct gv_error *err);
/* GV_OK when a key signed exactly these values; GV_EINVAL with why not. */
gv_status gv_hold_verify(const struct gv_placement_key *k, const char *uid, const char *node,
                         const char *until, const char *assignment, const char *sig,
                         struct gv_error *err);

#endif
