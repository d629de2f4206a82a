/*
 * Internal to the node agent's Allocate (allocator.c) and the pieces that
 * build its answer (answer.c; modes add through gv_mode_answer_* in
 * gv_mode.h).  Not a public interface.
 */
#ifndef GV_NODE_ANSWER_INTERNAL_H
#define GV_NODE_ANSWER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc/gv_alloc.h"
#include "common/gv_error.h"
#include "deviceplugin.pb-c.h"

/* The answer being built (gv_mode.h: modes add to it through gv_mode_answer_*). */
struct gv_mode_answer {
    V1beta1__ContainerAllocateResponse *r;
    char *limits; /* KEY=VALUE lines for limits.env */
    size_t limits_len;
    bool oom;
    bool interposer; /* a mode asked for the interposer */
    /* GPUs for NVIDIA_VISIBLE_DEVICES (or CDI names), in the container's order */
    char visible[GV_ALLOC_MAX_DEVICES][GV_ALLOC_UUID_MAX];
    size_t n_visible;
};

/* An env entry; limit: also a line of the limits file.  Out of memory sets b->oom. */
void gv_answer_env(struct gv_mode_answer *b, const char *key, const char *value, bool limit);
void gv_answer_mount(struct gv_mode_answer *b, const char *host, const char *ctr, bool ro);
/* The CDI device "<kind>=<uuid>". */
void gv_answer_cdi(struct gv_mode_answer *b, const char *kind, const char *uuid);

/*
 * Per-container state on disk (ctr_state.c; docs/node-agent.md, "Allocate
 * state machine"): <state>/containers/<uid>/<ctr>/ (the container's
 * writable runtime directory) and <state>/limits/<uid>/<ctr>/ (the limits
 * file and the Allocate records, the agent's own).
 */

/* A directory any container user writes into (sticky 1777, like /tmp). */
gv_status gv_ctr_shared_dir(const char *path, struct gv_error *err);
/* Creates <state_dir>/<top>/<uid>/<ctr>/ into path (top: "containers" or "limits"). */
gv_status gv_ctr_dir(const char *state_dir, const char *top, const char *uid, const char *ctr,
                     char *path, size_t cap, struct gv_error *err);
/*
 * The runtime directory <state_dir>/containers/<uid>/<ctr>/ and its shared
 * region, as an answer mounts them: a region already there is left as it is
 * (its charges are live), a missing one is made (a replayed answer mounts it
 * as a file of its own, and the runtime fails a container whose mount
 * source is missing).
 */
gv_status gv_ctr_runtime(const char *state_dir, const char *uid, const char *ctr,
                         struct gv_error *err);
/*
 * With limits (the interposer is injected): the runtime directory with its
 * shared region, the node-wide priority directory node_dir, and the limits
 * file holding limits.  Nothing without.
 */
gv_status gv_ctr_prepare(const char *state_dir, const char *node_dir, const char *uid,
                         const char *ctr, bool with_limits, const char *limits, size_t len,
                         struct gv_error *err);
/* The answer record (atomic, fsync'ed; supersedes the promise). */
gv_status gv_ctr_write_answer(const char *state_dir, const char *uid, const char *ns,
                              const char *name, const char *ctr, unsigned n_total,
                              const char *key, const V1beta1__ContainerAllocateResponse *resp,
                              struct gv_error *err);
/* The promise record (IDs GetPreferredAllocation chose); failures only logged. */
void gv_ctr_write_promise(const char *state_dir, const char *uid, const char *ns,
                          const char *name, const char *ctr, const char *key);

/* Removes the temporary files a killed writer left in <state>/limits/<uid>/<ctr>/
 * (start-up only: any found is a dead writer's); returns how many. */
unsigned gv_ctr_sweep_tmp(const char *state_dir, const char *uid, const char *ctr);

/* A value a record may hold: non-empty, ASCII letters and digits and the bytes of extra. */
bool gv_ctr_value_ok(const char *v, const char *extra);

/* A record read back: fields point into the file's text. */
struct gv_ctr_rec {
    const char *ns, *name, *ids, *resp;
    long containers;
};

/* Reads the record <file> ("answer", "promise"); *text to free; false when absent or torn. */
bool gv_ctr_read_rec(const char *state_dir, const char *uid, const char *ctr, const char *file,
                     char **text, struct gv_ctr_rec *r);
/* Fills resp (empty, initialised) with the answer stored in the record. */
gv_status gv_ctr_load_answer(const struct gv_ctr_rec *r, V1beta1__ContainerAllocateResponse *resp,
                             struct gv_error *err);

#endif
