/*
 * gpuvisor simulate: replay a cluster trace (openb CSV, Kubernetes JSON
 * dump, or the built-in synthetic cluster) through the allocation engine
 * under each placement policy and compare (docs/simulate.md).
 * Exit codes: 0 ok, 1 runtime failure (writing outputs), 2 bad usage/input.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "common/gv_file.h"
#include "sim/gv_sim.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuvisor simulate [--nodes FILE --pods FILE | --synthetic SPEC]\n"
            "                         [--policy binpack|spread|bestfit|fgd|all]\n"
            "                         [--seed N | --seeds A-B] [--inflate X]\n"
            "                         [--csv OUT.csv] [--plot OUT.svg]\n\n"
            "Replays a trace through the allocation engine with the openb protocol and\n"
            "prints allocated vs arrived GPU share per policy (mean +- sd over seeds).\n"
            "  --nodes, --pods  openb CSV (node/pod lists) or `kubectl get ... -o json` dumps\n"
            "  --synthetic      built-in cluster and workload: \"default\" or key=value list\n"
            "                   (nodes, pods, frac, multi, cpu, typed, seed); the default\n"
            "                   when no trace is given\n"
            "  --policy         one policy or all (default all)\n"
            "  --seed/--seeds   replay seeds (default 42-51)\n"
            "  --inflate        arrived GPU requests to replay, x capacity (default 1.3)\n"
            "  --csv, --plot    also write per-seed curves (CSV) / a chart (SVG)\n");
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpuvisor simulate: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'gpuvisor simulate --help' for usage.\n");
    va_end(ap);
    return 2;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    *out = v;
    return *end == '\0';
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int gv_cmd_simulate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"nodes", required_argument, NULL, 'n'},   {"pods", required_argument, NULL, 'p'},
        {"synthetic", required_argument, NULL, 's'}, {"policy", required_argument, NULL, 'P'},
        {"seed", required_argument, NULL, 'e'},    {"seeds", required_argument, NULL, 'E'},
        {"inflate", required_argument, NULL, 'i'}, {"csv", required_argument, NULL, 'c'},
        {"plot", required_argument, NULL, 'o'},    {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *nodes = NULL, *pods = NULL, *synthetic = NULL, *csv = NULL, *plot = NULL;
    const char *policy = "all";
    uint64_t seed_lo = 42, seed_hi = 51;
    bool seed_given = false;
    double inflate = 1.3;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'n': nodes = optarg; break;
        case 'p': pods = optarg; break;
        case 's': synthetic = optarg; break;
        case 'P': policy = optarg; break;
        case 'c': csv = optarg; break;
        case 'o': plot = optarg; break;
        case 'e':
            if (seed_given || !parse_u64(optarg, &seed_lo))
                return bad_usage("--seed wants one non-negative integer (got \"%s\")", optarg);
            seed_hi = seed_lo;
            seed_given = true;
            break;
        case 'E': {
            const char *dash = strchr(optarg, '-');
            char lo[32];
            if (seed_given || dash == NULL || (size_t)(dash - optarg) >= sizeof(lo))
                return bad_usage("--seeds wants A-B, e.g. 42-51 (got \"%s\")", optarg);
            memcpy(lo, optarg, (size_t)(dash - optarg));
            lo[dash - optarg] = '\0';
            if (!parse_u64(lo, &seed_lo) || !parse_u64(dash + 1, &seed_hi) || seed_hi < seed_lo ||
                seed_hi - seed_lo >= 1000)
                return bad_usage("--seeds wants A-B with A <= B, at most 1000 seeds (got \"%s\")",
                                 optarg);
            seed_given = true;
            break;
        }
        case 'i': {
            char *end;
            inflate = strtod(optarg, &end);
            if (*end != '\0' || !(inflate >= 1.0 && inflate <= 3.0))
                return bad_usage("--inflate wants a number in [1, 3] (got \"%s\")", optarg);
            break;
        }
        case 'h': usage(stdout); return 0;
        default:
            return bad_usage("unknown or incomplete option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad_usage("unexpected argument \"%s\"", argv[optind]);
    if ((nodes == NULL) != (pods == NULL))
        return bad_usage("%s", "--nodes and --pods go together");
    if (nodes != NULL && synthetic != NULL)
        return bad_usage("%s", "--synthetic excludes --nodes/--pods");
    struct gv_sim_report rep = {0};
    if (strcmp(policy, "all") == 0) {
        for (int p = 0; p < GV_ALLOC_POLICY_COUNT; p++)
            rep.policies[rep.n_policies++] = (gv_alloc_policy)p;
    } else {
        int p = gv_alloc_policy_parse(policy);
        if (p < 0)
            return bad_usage("unknown policy \"%s\" (binpack, spread, bestfit, fgd, all)", policy);
        rep.policies[rep.n_policies++] = (gv_alloc_policy)p;
    }

    int status = 2;
    struct gv_error err = {0};
    struct gv_sim_trace *t = NULL;
    struct gv_sim_buf table = {0}, csvb = {0}, svg = {0};
    char title[512];
    if (gv_sim_trace_new(&t, &err) != GV_OK)
        goto fail;
    if (nodes != NULL) {
        if (gv_sim_load_nodes(t, nodes, &err) != GV_OK || gv_sim_load_pods(t, pods, &err) != GV_OK)
            goto fail;
        snprintf(title, sizeof(title), "%s on %s (%zu nodes, %llu GPUs, %zu pods)", base(pods),
                 base(nodes), gv_sim_trace_nodes(t),
                 (unsigned long long)(gv_sim_trace_gpu_milli(t) / 1000), gv_sim_trace_pods(t));
    } else {
        if (synthetic == NULL)
            synthetic = "default";
        if (gv_sim_synthetic(t, synthetic, 2023, &err) != GV_OK)
            goto fail;
        snprintf(title, sizeof(title), "synthetic cluster \"%s\" (%zu nodes, %llu GPUs, %zu pods)",
                 synthetic, gv_sim_trace_nodes(t),
                 (unsigned long long)(gv_sim_trace_gpu_milli(t) / 1000), gv_sim_trace_pods(t));
    }
    rep.n_seeds = (uint32_t)(seed_hi - seed_lo + 1);
    rep.seeds = calloc(rep.n_seeds, sizeof(*rep.seeds));
    rep.curves = calloc((size_t)rep.n_seeds * rep.n_policies, sizeof(*rep.curves));
    if (rep.seeds == NULL || rep.curves == NULL) {
        gv_error_set(&err, GV_ENOMEM, "out of memory");
        status = 1;
        goto fail;
    }
    double t0 = now();
    uint32_t runs = rep.n_seeds * rep.n_policies, done = 0;
    for (uint32_t p = 0; p < rep.n_policies; p++) {
        for (uint32_t s = 0; s < rep.n_seeds; s++) {
            rep.seeds[s] = seed_lo + s;
            struct gv_sim_curve *cv = &rep.curves[p * rep.n_seeds + s];
            if (gv_sim_run(t, rep.policies[p], rep.seeds[s], inflate, cv, &err) != GV_OK)
                goto fail;
            done++;
            if (now() - t0 > 1.0)
                fprintf(stderr, "simulate: %-7s seed %llu done (%u/%u, %.1fs)\n",
                        gv_alloc_policy_name(rep.policies[p]), (unsigned long long)rep.seeds[s],
                        done, runs, now() - t0);
        }
    }
    rep.max_pct = rep.curves[0].n - 1;
    gv_sim_report_table(&rep, title, &table);
    if (csv != NULL)
        gv_sim_report_csv(&rep, &csvb);
    if (plot != NULL)
        gv_sim_report_svg(&rep, title, &svg);
    if (table.oom || csvb.oom || svg.oom) {
        gv_error_set(&err, GV_ENOMEM, "out of memory formatting the report");
        status = 1;
        goto fail;
    }
    if ((csv != NULL && gv_file_write_atomic(csv, csvb.data, csvb.len, 0644, &err) != GV_OK) ||
        (plot != NULL && gv_file_write_atomic(plot, svg.data, svg.len, 0644, &err) != GV_OK)) {
        status = 1;
        goto fail;
    }
    fwrite(table.data, 1, table.len, stdout);
    if (plot != NULL)
        fprintf(stderr, "simulate: wrote %s\n", plot);
    if (csv != NULL)
        fprintf(stderr, "simulate: wrote %s\n", csv);
    status = 0;
fail:
    if (status != 0)
        fprintf(stderr, "gpuvisor simulate: %s\n", err.msg);
    for (uint32_t i = 0; rep.curves != NULL && i < rep.n_seeds * rep.n_policies; i++)
        gv_sim_curve_free(&rep.curves[i]);
    free(rep.curves);
    free(rep.seeds);
    gv_sim_buf_free(&table);
    gv_sim_buf_free(&csvb);
    gv_sim_buf_free(&svg);
    gv_sim_trace_free(t);
    return status;
}
