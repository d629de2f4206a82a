/*
 * JSON codec for the kube-scheduler extender protocol
 * (k8s.io/kube-scheduler/extender/v1).
 *
 * The Go types carry no JSON tags, so the wire keys are the Go field names
 * ("Pod", "NodeNames", "FailedNodes", ...).  Go's decoder matches keys
 * case-insensitively; so does this parser, so a client that lower-cases them
 * is understood the same way kube-scheduler's own peers would understand it.
 * Every parser here reads untrusted bytes: it rejects what it cannot use
 * with a message naming the field, and never keeps partial results.
 */
#ifndef GV_EXTENDER_H
#define GV_EXTENDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/gv_error.h"

/* The score range kube-scheduler accepts from an extender (MaxExtenderPriority). */
#define GV_EXT_MAX_SCORE 10

/* ExtenderArgs: the body of filter and prioritize calls. */
struct gv_ext_args {
    json_t *root;       /* owns everything below */
    json_t *pod;        /* the v1.Pod object */
    const char **names; /* candidate node names, in request order */
    size_t n_names;
    json_t *node_items; /* Nodes.items when full Node objects were sent, else NULL */
    bool scanned;       /* the names were taken by the fast scanner, not jansson (tests) */
};

/* Per-candidate verdict of a filter call. */
enum gv_ext_verdict {
    GV_EXT_FIT = 0,
    GV_EXT_FAILED,       /* FailedNodes: preemption could help */
    GV_EXT_UNRESOLVABLE, /* FailedAndUnresolvableNodes: preemption cannot help */
    GV_EXT_DROPPED,      /* left out without a reason (kube-scheduler just drops it) */
};

/* ExtenderBindingArgs. */
struct gv_ext_bind_args {
    char *pod_name;
    char *pod_namespace;
    char *pod_uid;
    char *node;
};

gv_status gv_ext_args_parse(const char *body, size_t len, struct gv_ext_args *out,
                            struct gv_error *err);
/* The same, but plain names may stay in body: each is ended in place (its
 * closing quote becomes a NUL), so body must outlive out and is no longer
 * the text it was.  On failure body is as it was.  A 50,000-name filter
 * copied 0.65 MB of names into fresh pages. */
gv_status gv_ext_args_parse_inplace(char *body, size_t len, struct gv_ext_args *out,
                                    struct gv_error *err);
void gv_ext_args_clear(struct gv_ext_args *args);

/*
 * ExtenderFilterResult for args: candidates whose verdict is GV_EXT_FIT are
 * returned in the same form they came in (NodeNames or full Nodes), the
 * others in FailedNodes / FailedAndUnresolvableNodes with reasons[i].
 * error, when non-NULL, fills "Error".  Returns a heap string or NULL (OOM).
 */
char *gv_ext_filter_result_encode(const struct gv_ext_args *args,
                                  const enum gv_ext_verdict *verdicts, const char *const *reasons,
                                  const char *error);

/*
 * A failure reason as users will read it, with no '%' (heap; NULL on OOM):
 * kube-scheduler passes extender reasons to its event recorder as a
 * format string, so "100% cores" reached events as "100%!c(MISSING)ores".
 * "%" becomes "percent", so the text arrives verbatim through any printf.
 * The filter and bind encoders apply it to every reason and error.
 */
char *gv_ext_reason_text(const char *in);

/* HostPriorityList: [{"Host": names[i], "Score": scores[i]}, ...]. */
char *gv_ext_priorities_encode(const char *const *names, const long *scores, size_t n);

gv_status gv_ext_bind_args_parse(const char *body, size_t len, struct gv_ext_bind_args *out,
                                 struct gv_error *err);
void gv_ext_bind_args_clear(struct gv_ext_bind_args *args);
/* ExtenderBindingResult; error NULL or "" means success. */
char *gv_ext_bind_result_encode(const char *error);

/* Looks a key up the way Go's encoding/json does: exact match first, then
 * case-insensitively.  Shared by the webhook's AdmissionReview parser. */
json_t *gv_ext_json_get(const json_t *object, const char *key);

#endif
