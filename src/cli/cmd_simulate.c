/*
 * gpuvisor simulate: replay a cluster trace (openb CSV, Kubernetes JSON
 * dump, or the built-in synthetic cluster) through the allocation engine
 * under each placement policy and compare (docs/simulate.md).
 * Exit codes: 0 ok, 1 runtime failure (writing outputs), 2 bad usage/input.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli/cmd_simulate_churn.h"
#include "cli/commands.h"
#include "common/gv_file.h"
#include "sim/gv_sim.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuvisor simulate [--nodes FILE --pods FILE | --from-cluster DUMP.json |\n"
            "                          --synthetic SPEC]\n"
            "                         [--policy binpack|spread|bestfit|fgd|all]\n"
            "                         [--seed N | --seeds A-B | --seeds N] [--inflate X]\n"
            "                         [--topology nvlink=N,pcie=M] [--shuffle-nodes] [--exact]\n"
            "                         [--high-priority PCT] [--reference full|bounds|none]\n"
            "                         [--csv OUT.csv] [--plot OUT.svg]\n"
            "                         [--defrag-every N [--churn load=P,lifetimes=K,moves=M]]\n\n"
            "Replays a trace through the allocation engine with the openb protocol and\n"
            "prints allocated vs arrived GPU share per policy (mean +- sd over seeds).\n"
            "  --nodes, --pods  openb CSV (node/pod lists) or `kubectl get ... -o json` dumps\n"
            "  --from-cluster   one `kubectl get nodes,pods -A -o json` dump of a live cluster\n"
            "  --synthetic      built-in cluster and workload: \"default\" or key=value list\n"
            "                   (nodes, pods, frac, multi, cpu, typed, seed); the default\n"
            "                   when no trace is given\n"
            "  --policy         one policy or all (default all)\n"
            "  --seed/--seeds   replay seeds (default 42-51)\n"
            "  --high-priority  this share of the pods (percent, fixed by position) is high\n"
            "                   priority and preempts the rest when it does not fit; the\n"
            "                   report adds what preemption cost each policy (with\n"
            "                   --defrag-every: how long high-priority pods wait too)\n"
            "  --inflate        arrived GPU requests to replay, x capacity (default 1.3)\n"
            "  --topology       interconnect of nodes that publish none: NVLink islands of\n"
            "                   N GPUs, PCIe switches of M (e.g. nvlink=2,pcie=4); the report\n"
            "                   then shows how multi-GPU containers' GPUs are joined\n"
            "  --shuffle-nodes  prefix node names with a per-seed random permutation, as the\n"
            "                   FGD paper's artifact does (ties go to the smallest name)\n"
            "  --exact          fgd scores every node state however large the cluster; by\n"
            "                   default, as in the scheduler, a search over more than 5,000\n"
            "                   nodes has a score budget (docs/alloc.md, \"Score budget\")\n"
            "  --reference      the offline reference at the end: full (default: oracle and\n"
            "                   bounds; the oracle costs three replays a seed), bounds (the LP\n"
            "                   and capacity bounds only), none\n"
            "  --csv, --plot    also write per-seed curves (CSV) / a chart (SVG)\n"
            "  --defrag-every   churn replay instead: pods depart, and every N arrivals the\n"
            "                   defrag planner moves pods; compared with no defragmentation\n"
            "  --churn          its offered load in %% of capacity (90), lifetimes replayed\n"
            "                   after the warm-up (10) and moves a pass (10)\n"
            "Every report ends with an offline reference (--reference): an oracle that sees\n"
            "the whole workload in advance and lower bounds on unallocated GPUs.\n");
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

/*
 * Fails before any replay when path cannot be written: a directory, or a
 * folder where no file can be created (the atomic write's temp file goes
 * beside the target).  Minutes of replay then a lost result is the worst
 * way to learn about a typo.
 */
static bool output_writable(const char *path, struct gv_error *err)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        gv_error_set(err, GV_EINVAL, "%s: is a directory", path);
        return false;
    }
    char probe[4096];
    if ((size_t)snprintf(probe, sizeof(probe), "%s.probe.XXXXXX", path) >= sizeof(probe)) {
        gv_error_set(err, GV_EINVAL, "%.64s...: path too long", path);
        return false;
    }
    int fd = mkstemp(probe);
    if (fd < 0) {
        gv_error_set(err, GV_EIO, "%s: cannot write there: %s", path, strerror(errno));
        return false;
    }
    close(fd);
    unlink(probe);
    return true;
}

/* Progress on stderr: a redrawn bar on a terminal, else one line per run;
 * quiet for runs that end within a couple of seconds. */
static void progress(bool tty, double elapsed, uint32_t done, uint32_t runs, const char *what,
                     uint64_t seed)
{
    /* GV_SIMULATE_PROGRESS_AFTER (seconds) lets a test see the bar
     * without a slow replay */
    static double after = -1;
    if (after < 0) {
        const char *e = getenv("GV_SIMULATE_PROGRESS_AFTER");
        after = e != NULL ? atof(e) : 2.0;
        if (!(after >= 0))
            after = 2.0;
    }
    if (elapsed < after)
        return;
    if (!tty) {
        fprintf(stderr, "simulate: %-7s seed %llu done (%u/%u, %.1fs)\n", what,
                (unsigned long long)seed, done, runs, elapsed);
        return;
    }
    char bar[31];
    uint32_t fill = runs ? done * 30 / runs : 30;
    for (uint32_t i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    double eta = done ? elapsed * (runs - done) / done : 0;
    fprintf(stderr, "\rsimulate [%s] %u/%u runs, %.0fs, about %.0fs left ", bar, done, runs,
            elapsed, eta);
    if (done == runs)
        fprintf(stderr, "\n");
    fflush(stderr);
}

int gv_cmd_simulate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"nodes", required_argument, NULL, 'n'},   {"pods", required_argument, NULL, 'p'},
        {"synthetic", required_argument, NULL, 's'}, {"policy", required_argument, NULL, 'P'},
        {"seed", required_argument, NULL, 'e'},    {"seeds", required_argument, NULL, 'E'},
        {"inflate", required_argument, NULL, 'i'}, {"csv", required_argument, NULL, 'c'},
        {"plot", required_argument, NULL, 'o'},    {"help", no_argument, NULL, 'h'},
        {"from-cluster", required_argument, NULL, 'C'},
        {"topology", required_argument, NULL, 'T'},
        {"shuffle-nodes", no_argument, NULL, 'S'},
        {"exact", no_argument, NULL, 'X'},
        {"high-priority", required_argument, NULL, 'H'},
        {"defrag-every", required_argument, NULL, 'D'},
        {"churn", required_argument, NULL, 'K'},
        {"reference", required_argument, NULL, 'R'},
        {NULL, 0, NULL, 0}};
    struct gv_sim_churn_opts churn = {.load = 0.9, .lifetimes = 10, .max_moves = 10};
    const char *churn_spec = NULL;
    const char *nodes = NULL, *pods = NULL, *synthetic = NULL, *csv = NULL, *plot = NULL;
    const char *dump = NULL, *topology = NULL;
    const char *policy = "all";
    uint64_t seed_lo = 42, seed_hi = 51;
    bool seed_given = false, shuffle = false, exact = false;
    enum { REF_FULL, REF_BOUNDS, REF_NONE } reference = REF_FULL;
    double inflate = 1.3, high_pct = 0;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'n': nodes = optarg; break;
        case 'p': pods = optarg; break;
        case 'C': dump = optarg; break;
        case 'T': topology = optarg; break;
        case 's': synthetic = optarg; break;
        case 'P': policy = optarg; break;
        case 'c': csv = optarg; break;
        case 'o': plot = optarg; break;
        case 'S': shuffle = true; break;
        case 'X': exact = true; break;
        case 'H': {
            char *end = NULL;
            high_pct = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(high_pct >= 0 && high_pct <= 100))
                return bad_usage("--high-priority wants a percentage in [0, 100] (got \"%s\")",
                                 optarg);
            break;
        }
        case 'K': churn_spec = optarg; break;
        case 'R':
            if (strcmp(optarg, "full") == 0)
                reference = REF_FULL;
            else if (strcmp(optarg, "bounds") == 0)
                reference = REF_BOUNDS;
            else if (strcmp(optarg, "none") == 0)
                reference = REF_NONE;
            else
                return bad_usage("--reference wants full, bounds or none (got \"%s\")", optarg);
            break;
        case 'D': {
            char *end = NULL;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (end == optarg || *end != '\0' || optarg[0] == '-' || v == 0 || v > 100000000)
                return bad_usage("--defrag-every wants a positive number of arrivals (got \"%s\")",
                                 optarg);
            churn.defrag_every = v;
            break;
        }
        case 'e':
            if (seed_given || !parse_u64(optarg, &seed_lo))
                return bad_usage("--seed wants one non-negative integer (got \"%s\")", optarg);
            seed_hi = seed_lo;
            seed_given = true;
            break;
        case 'E': {
            const char *dash = strchr(optarg, '-');
            char lo[32];
            if (!seed_given && dash == NULL && parse_u64(optarg, &seed_lo)) {
                /* one seed is a range of one */
                seed_hi = seed_lo;
                seed_given = true;
                break;
            }
            if (seed_given || dash == NULL || (size_t)(dash - optarg) >= sizeof(lo))
                return bad_usage("--seeds wants A-B or N, e.g. 42-51 (got \"%s\")", optarg);
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
    if (dump != NULL && (nodes != NULL || synthetic != NULL))
        return bad_usage("%s", "--from-cluster excludes --nodes/--pods and --synthetic");
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
    if (churn_spec != NULL && churn.defrag_every == 0)
        return bad_usage("%s", "--churn goes with --defrag-every");
    if (churn_spec != NULL && gv_sim_churn_parse(churn_spec, &churn, &err) != GV_OK)
        return bad_usage("%s", err.msg);
    if (churn.defrag_every > 0 && (csv != NULL || plot != NULL))
        return bad_usage("%s", "--defrag-every prints a table only (no --csv, --plot)");
    struct gv_sim_trace *t = NULL;
    struct gv_sim_buf table = {0}, csvb = {0}, svg = {0};
    char title[512];
    if ((csv != NULL && !output_writable(csv, &err)) ||
        (plot != NULL && !output_writable(plot, &err))) {
        status = 1;
        goto fail;
    }
    if (gv_sim_trace_new(&t, &err) != GV_OK)
        goto fail;
    if (dump != NULL) {
        if (gv_sim_load_cluster(t, dump, &err) != GV_OK)
            goto fail;
        snprintf(title, sizeof(title), "cluster dump %s (%zu nodes, %llu GPUs, %zu pods)",
                 base(dump), gv_sim_trace_nodes(t),
                 (unsigned long long)(gv_sim_trace_gpu_milli(t) / 1000), gv_sim_trace_pods(t));
    } else if (nodes != NULL) {
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
    if (high_pct > 0 && gv_sim_set_high_priority(t, high_pct, &err) != GV_OK)
        goto fail;
    if (topology != NULL && gv_sim_set_topology(t, topology, &err) != GV_OK) {
        status = 2;
        goto fail;
    }
    if (churn.defrag_every > 0) {
        status = gv_simulate_churn(t, title, rep.policies, rep.n_policies, seed_lo, seed_hi,
                                   &churn);
        gv_sim_trace_free(t);
        return status;
    }
    rep.topology = gv_sim_trace_has_topology(t);
    gv_sim_trace_set_shuffle_names(t, shuffle);
    gv_sim_trace_set_exact(t, exact);
    rep.n_seeds = (uint32_t)(seed_hi - seed_lo + 1);
    rep.seeds = calloc(rep.n_seeds, sizeof(*rep.seeds));
    rep.curves = calloc((size_t)rep.n_seeds * rep.n_policies, sizeof(*rep.curves));
    rep.refs = calloc(rep.n_seeds, sizeof(*rep.refs));
    if (rep.seeds == NULL || rep.curves == NULL || rep.refs == NULL) {
        gv_error_set(&err, GV_ENOMEM, "out of memory");
        status = 1;
        goto fail;
    }
    double t0 = now();
    bool tty = isatty(STDERR_FILENO);
    uint32_t runs = rep.n_seeds * (rep.n_policies + 1), done = 0;
    for (uint32_t p = 0; p < rep.n_policies; p++) {
        for (uint32_t s = 0; s < rep.n_seeds; s++) {
            rep.seeds[s] = seed_lo + s;
            struct gv_sim_curve *cv = &rep.curves[p * rep.n_seeds + s];
            if (gv_sim_run(t, rep.policies[p], rep.seeds[s], inflate, cv, &err) != GV_OK)
                goto fail;
            progress(tty, now() - t0, ++done, runs, gv_alloc_policy_name(rep.policies[p]),
                     rep.seeds[s]);
        }
    }
    /* no GPU-share workload (whole devices only): no share curve to compare with */
    /* --reference none, or GV_SIMULATE_NO_REFERENCE=1 (the same, for scripts
     * that also run older builds): no offline reference */
    const char *noref = getenv("GV_SIMULATE_NO_REFERENCE");
    if (noref != NULL && strcmp(noref, "1") == 0)
        reference = REF_NONE;
    if (gv_sim_trace_request_milli(t) == 0 || gv_sim_trace_gpu_milli(t) == 0 ||
        reference == REF_NONE) {
        free(rep.refs);
        rep.refs = NULL;
    }
    for (uint32_t s = 0; rep.refs != NULL && s < rep.n_seeds; s++) {
        if ((reference == REF_BOUNDS
                 ? gv_sim_reference_bounds(t, rep.seeds[s], &rep.refs[s], &err)
                 : gv_sim_reference(t, rep.seeds[s], &rep.refs[s], &err)) != GV_OK)
            goto fail;
        progress(tty, now() - t0, ++done, runs, "oracle", rep.seeds[s]);
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
    free(rep.refs);
    gv_sim_buf_free(&table);
    gv_sim_buf_free(&csvb);
    gv_sim_buf_free(&svg);
    gv_sim_trace_free(t);
    return status;
}
