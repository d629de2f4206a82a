/* `gpuvisor simulate --defrag-every` (cmd_simulate_churn.c). */
#ifndef GV_CMD_SIMULATE_CHURN_H
#define GV_CMD_SIMULATE_CHURN_H

#include "sim/gv_sim.h"

/* Runs every policy and seed without and with defragmentation and prints
 * the comparison; returns the exit code (0, 1 out of memory, 2 bad input). */
int gv_simulate_churn(const struct gv_sim_trace *t, const char *title,
                      const gv_alloc_policy *policies, uint32_t n_policies, uint64_t seed_lo,
                      uint64_t seed_hi, const struct gv_sim_churn_opts *o);

#endif
