/* libFuzzer target: openb CSV readers.  The input is split at the first
 * NUL-free "\n\n" into a node list and a pod list. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/gv_sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    size_t split = size;
    for (size_t i = 0; i + 1 < size; i++)
        if (s[i] == '\n' && s[i + 1] == '\n') {
            split = i + 1;
            break;
        }
    struct gv_sim_trace *t;
    struct gv_error err;
    if (gv_sim_trace_new(&t, &err) != GV_OK)
        return 0;
    if (gv_sim_parse_openb_nodes(t, "nodes", s, split, &err) == GV_OK) {
        size_t n = gv_sim_trace_nodes(t);
        if (n == 0)
            abort();
        size_t rest = split < size ? size - split - 1 : 0;
        gv_status rc = gv_sim_parse_openb_pods(t, "pods", s + size - rest, rest, &err);
        if (rc != GV_OK && gv_sim_trace_pods(t) != 0)
            abort(); /* a failed read must leave nothing behind */
        if (rc == GV_OK && gv_sim_trace_gpu_milli(t) > 0 && gv_sim_trace_pods(t) < 50) {
            struct gv_sim_curve cv;
            if (gv_sim_run(t, GV_ALLOC_POLICY_FGD, 1, 1.3, &cv, &err) == GV_OK)
                gv_sim_curve_free(&cv);
        }
    } else if (gv_sim_trace_nodes(t) != 0) {
        abort();
    }
    gv_sim_trace_free(t);
    return 0;
}
