/* Fuzz target: the extender request parsers (ExtenderArgs, ExtenderBindingArgs)
 * and the encoders fed from whatever parsed, as the daemon would do; and the
 * RFC 3339 parser that reads the agents' heartbeat annotations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/gv_extender.h"
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
