/*
 * Test helper shared by the simulator's test programs: a trace from openb
 * node and pod lists given as text (pods may be NULL: nodes only).  A list
 * that does not parse fails the calling test with the reader's message.
 * Include it after cmocka.h.
 */
#ifndef GV_TESTS_SIM_TRACE_TEXT_H
#define GV_TESTS_SIM_TRACE_TEXT_H

#include <string.h>

#include "sim/gv_sim.h"

static inline struct gv_sim_trace *sim_test_trace(const char *nodes, const char *pods)
{
    struct gv_sim_trace *t;
    struct gv_error err = {0};
    assert_int_equal(gv_sim_trace_new(&t, NULL), GV_OK);
    if (gv_sim_parse_openb_nodes(t, "n.csv", nodes, strlen(nodes), &err) != GV_OK ||
        (pods != NULL && gv_sim_parse_openb_pods(t, "p.csv", pods, strlen(pods), &err) != GV_OK))
        fail_msg("%s", err.msg);
    return t;
}

#endif
