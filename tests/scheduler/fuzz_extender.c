/* Fuzz target: the extender request parsers (ExtenderArgs, ExtenderBindingArgs,
 * ExtenderPreemptionArgs)
 * and the encoders fed from whatever parsed, as the daemon would do; and the
 * RFC 3339 parser that reads the agents' heartbeat annotations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/gv_extender.h"
#include "scheduler/preempt.h"
#include "scheduler/sched_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_error err;
    struct gv_ext_args args;
    if (gv_ext_args_parse((const char *)data, size, &args, &err) == GV_OK) {
        /* Names taken from the text must be what jansson reads whole. */
        json_t *ref = args.node_items == NULL ? json_loadb((const char *)data, size, 0, NULL) : NULL;
        json_t *rn = ref != NULL ? gv_ext_json_get(ref, "NodeNames") : NULL;
        if (args.node_items == NULL && (rn == NULL || json_array_size(rn) != args.n_names))
            abort();
        for (size_t i = 0; rn != NULL && i < args.n_names; i++)
            if (strcmp(json_string_value(json_array_get(rn, i)), args.names[i]) != 0)
                abort();
        json_decref(ref);
        enum gv_ext_verdict *v = calloc(args.n_names ? args.n_names : 1, sizeof(*v));
        long *scores = calloc(args.n_names ? args.n_names : 1, sizeof(*scores));
        if (v != NULL && scores != NULL) {
            for (size_t i = 0; i < args.n_names; i++) {
                v[i] = (enum gv_ext_verdict)(i % 4);
                scores[i] = (long)i - 3;
            }
            free(gv_ext_filter_result_encode(&args, v, NULL, NULL));
            /* Reasons carry user text (node names here): made format-safe. */
            free(gv_ext_filter_result_encode(&args, v, (const char *const *)args.names,
                                             args.n_names ? args.names[0] : NULL));
            free(gv_ext_priorities_encode(args.names, scores, args.n_names));
        }
        free(v);
        free(scores);
        gv_ext_args_clear(&args);
    }
    /* In place: the same answer; refused or read by jansson, the body is
     * as it came. */
    char *mut = malloc(size ? size : 1);
    if (mut != NULL) {
        memcpy(mut, data, size);
        struct gv_ext_args ref_args, in;
        gv_status rs = gv_ext_args_parse((const char *)data, size, &ref_args, &err);
        gv_status is = gv_ext_args_parse_inplace(mut, size, &in, &err);
        if (rs != is)
            abort();
        if (is == GV_OK) {
            if (in.n_names != ref_args.n_names || in.scanned != ref_args.scanned)
                abort();
            for (size_t i = 0; i < in.n_names; i++)
                if (strcmp(in.names[i], ref_args.names[i]) != 0)
                    abort();
        }
        if ((is != GV_OK || !in.scanned) && memcmp(mut, data, size) != 0)
            abort();
        if (rs == GV_OK)
            gv_ext_args_clear(&ref_args);
        if (is == GV_OK)
            gv_ext_args_clear(&in);
        free(mut);
    }
    /* Preempt: whatever parsed encodes back (the victims kube-scheduler
     * sent, as the verb does for a pod asking no GPU slice). */
    struct gv_ext_preempt_args pa;
    if (gv_ext_preempt_args_parse((const char *)data, size, &pa, &err) == GV_OK) {
        if (pa.pod == NULL)
            abort();
        char *text = gv_ext_preempt_result_encode(pa.nodes, pa.n_nodes);
        json_t *back = text != NULL ? json_loads(text, 0, NULL) : NULL;
        if (text != NULL && (back == NULL ||
                             json_object_size(json_object_get(back, "NodeNameToMetaVictims")) >
                                 pa.n_nodes))
            abort();
        json_decref(back);
        free(text);
        gv_ext_preempt_args_clear(&pa);
    }
    struct gv_ext_bind_args b;
    if (gv_ext_bind_args_parse((const char *)data, size, &b, &err) == GV_OK) {
        free(gv_ext_bind_result_encode(b.node));
        gv_ext_bind_args_clear(&b);
    }
    char *text = malloc(size + 1);
    if (text != NULL) {
        memcpy(text, data, size);
        text[size] = '\0';
        time_t t;
        gv_sched_parse_time(text, &t);
        char *safe = gv_ext_reason_text(text);
        if (safe != NULL && strchr(safe, '%') != NULL)
            abort(); /* a '%' survived: kube-scheduler would mangle it */
        free(safe);
        free(text);
    }
    return 0;
}
