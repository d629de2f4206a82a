/* libFuzzer target: openb CSV readers.  The input is split at the first
 * NUL-free "\n\n" into a node list and a pod list.  The whole input also
 * goes to the cluster-dump reader (kubectl get nodes,pods -o json).  Error
 * messages must never carry raw control bytes (they reach terminals). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/gv_sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_msg(const struct gv_error *err)
{
    for (const char *p = err->msg; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t')
            abort();
}

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
        if (rc != GV_OK)
            check_msg(&err);
        if (rc == GV_OK && gv_sim_trace_gpu_milli(t) > 0 && gv_sim_trace_pods(t) < 50) {
            struct gv_sim_curve cv;
            if (gv_sim_run(t, GV_ALLOC_POLICY_FGD, 1, 1.3, &cv, &err) == GV_OK)
                gv_sim_curve_free(&cv);
            struct gv_sim_reference ref;
            if (gv_sim_trace_request_milli(t) > 0 && gv_sim_reference(t, 1, &ref, &err) == GV_OK &&
                ref.bound_unalloc_pct > ref.oracle_unalloc_pct + 1e-9)
                abort(); /* the bound holds for every placement, the oracle's too */
        }
    } else {
        if (gv_sim_trace_nodes(t) != 0)
            abort();
        check_msg(&err);
    }
    gv_sim_trace_free(t);
    if (gv_sim_trace_new(&t, &err) != GV_OK)
        return 0;
    if (gv_sim_parse_k8s_cluster(t, "dump", s, size, &err) != GV_OK &&
        (gv_sim_trace_nodes(t) != 0 || gv_sim_trace_pods(t) != 0))
        abort();
    gv_sim_trace_free(t);
    return 0;
}
