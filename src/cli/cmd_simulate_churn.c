/*
 * `gpuvisor simulate --defrag-every N [--churn SPEC]`: the churn replay
 * (gv_sim_churn, docs/simulate.md "Pods departing and defragmentation") with
 * and without periodic defragmentation, same seeds, side by side.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cmd_simulate_churn.h"

static void mean_sd(const double *v, uint32_t n, double *mean, double *sd)
{
    double s = 0, q = 0;
    for (uint32_t i = 0; i < n; i++)
        s += v[i];
    *mean = n ? s / n : 0;
    for (uint32_t i = 0; i < n; i++)
        q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* With priorities: how the high-priority pods fared, summed over the
 * seeds (waits: the mean over seeds of each seed's mean and p95). */
static void print_high(const struct gv_sim_churn_result *r, uint32_t n_seeds, const char *policy,
                       const char *defrag)
{
    double arr = 0, once = 0, pre = 0, waited = 0, unplaced = 0, evicted = 0, mean = 0, p95 = 0,
           p99 = 0, life = 0;
    for (uint32_t s = 0; s < n_seeds; s++) {
        arr += (double)r[s].high_arrivals;
        once += (double)r[s].high_at_once;
        pre += (double)r[s].high_preempted;
        waited += (double)r[s].high_waited;
        unplaced += (double)r[s].high_unplaced;
        evicted += (double)r[s].low_evicted;
        mean += r[s].wait_mean / n_seeds;
        p95 += r[s].wait_p95 / n_seeds;
        p99 += r[s].wait_p99 / n_seeds;
        life += (double)r[s].lifetime_mean / n_seeds;
    }
    if (arr == 0)
        return;
    printf("  high priority: %.0f arrived; %.1f %% at once, %.1f %% by preemption, %.1f %% after "
           "waiting, %.1f %% not placed; wait mean %.1f, p95 %.1f, p99 %.1f arrivals (a mean "
           "lifetime is %.0f); %.0f low-priority pods evicted\n",
           arr, 100 * once / arr, 100 * pre / arr, 100 * waited / arr, 100 * unplaced / arr, mean,
           p95, p99, life, evicted);
    printf("high_wait policy=%s defrag=%s mean=%.2f p95=%.2f p99=%.2f not_placed_pct=%.2f "
           "evicted=%.0f\n",
           policy, defrag, mean, p95, p99, 100 * unplaced / arr, evicted);
}

int gv_simulate_churn(const struct gv_sim_trace *t, const char *title,
                      const gv_alloc_policy *policies, uint32_t n_policies, uint64_t seed_lo,
                      uint64_t seed_hi, const struct gv_sim_churn_opts *o)
{
    uint32_t n_seeds = (uint32_t)(seed_hi - seed_lo + 1);
    struct gv_sim_churn_result *r = calloc((size_t)n_seeds * 2, sizeof(*r));
    double *v = calloc((size_t)n_seeds * 2, sizeof(*v));
    if (r == NULL || v == NULL) {
        free(r);
        free(v);
        fprintf(stderr, "gpuvisor simulate: out of memory\n");
        return 1;
    }
    printf("%s\nchurn replay: each pod departs after 1..2L arrivals (L for an offered GPU demand of "
           "%.0f %% of capacity), %llu lifetimes after a warm-up of 2; defragmentation every "
           "%llu arrivals, at most %u moves a pass; seeds %llu-%llu (mean +- sd)\n\n",
           title, 100 * o->load, (unsigned long long)o->lifetimes,
           (unsigned long long)o->defrag_every, o->max_moves, (unsigned long long)seed_lo,
           (unsigned long long)seed_hi);
    printf("%-8s %-9s %-14s %-14s %-16s %-10s %-11s %-15s %s\n", "policy", "defrag", "failed %",
           "allocated %", "fragmentation %", "idle GPUs", "moves/pass", "frag -/pass pts",
           "plan s/pass");
    int status = 0;
    for (uint32_t p = 0; p < n_policies && status == 0; p++) {
        double fail[2] = {0}, frag[2] = {0};
        for (int d = 0; d < 2 && status == 0; d++) {
            struct gv_sim_churn_opts oo = *o;
            if (d == 0)
                oo.defrag_every = 0;
            for (uint32_t s = 0; s < n_seeds; s++) {
                struct gv_error err = {0};
                if (gv_sim_churn(t, policies[p], seed_lo + s, &oo, &r[s], &err) != GV_OK) {
                    fprintf(stderr, "gpuvisor simulate: %s\n", err.msg);
                    status = 2;
                    break;
                }
            }
            if (status != 0)
                break;
            double m[4], sd[4];
            for (uint32_t s = 0; s < n_seeds; s++)
                v[s] = r[s].failed_pct;
            mean_sd(v, n_seeds, &m[0], &sd[0]);
            for (uint32_t s = 0; s < n_seeds; s++)
                v[s] = r[s].alloc_pct;
            mean_sd(v, n_seeds, &m[1], &sd[1]);
            for (uint32_t s = 0; s < n_seeds; s++)
                v[s] = r[s].frag_pct;
            mean_sd(v, n_seeds, &m[2], &sd[2]);
            double idle = 0, moves = 0, passes = 0, rec = 0, plan = 0;
            for (uint32_t s = 0; s < n_seeds; s++) {
                idle += r[s].idle_gpus / n_seeds;
                moves += (double)r[s].moves;
                passes += (double)r[s].passes;
                rec += r[s].frag_recovered_pct * (double)r[s].passes;
                plan += r[s].plan_seconds;
            }
            char fs[32], as[32], gs[32], ds[16];
            snprintf(fs, sizeof(fs), "%.2f +- %.2f", m[0], sd[0]);
            snprintf(as, sizeof(as), "%.2f +- %.2f", m[1], sd[1]);
            snprintf(gs, sizeof(gs), "%.2f +- %.2f", m[2], sd[2]);
            snprintf(ds, sizeof(ds), "%s", d == 0 ? "none" : "periodic");
            printf("%-8s %-9s %-14s %-14s %-16s %-10.1f %-11.2f %-15.2f %.4f\n",
                   gv_alloc_policy_name(policies[p]), ds, fs, as, gs, idle,
                   passes ? moves / passes : 0, passes ? rec / passes : 0,
                   passes ? plan / passes : 0);
            print_high(r, n_seeds, gv_alloc_policy_name(policies[p]), ds);
            fail[d] = m[0];
            frag[d] = m[2];
        }
        if (status == 0)
            printf("defrag_gain policy=%s failed_pct=%.2f->%.2f fragmentation_pct=%.2f->%.2f\n",
                   gv_alloc_policy_name(policies[p]), fail[0], fail[1], frag[0], frag[1]);
    }
    free(r);
    free(v);
    return status;
}
