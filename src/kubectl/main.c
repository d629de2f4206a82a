/*
 * kubectl-gpuvisor: `kubectl gpuvisor inspect|top`, a kubectl plugin (an
 * executable named kubectl-gpuvisor on PATH; kubectl passes the arguments
 * through unchanged).  Connection as kubectl resolves it: --server, else
 * --kubeconfig / $KUBECONFIG / ~/.kube/config with --context, else the
 * in-cluster service account.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/gv_version.h"
#include "kubectl/gv_kubectl.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kubectl gpuvisor COMMAND [options]\n"
            "\n"
            "Commands:\n"
            "  inspect [NODE]            GPU allocation per node and GPU: memory and compute\n"
            "                            allocated vs total, tasks, cluster totals and\n"
            "                            fragmentation (-d: the pods on each GPU)\n"
            "  top [pods|nodes|gpus]     live usage from the gpuvisor-node agents: memory\n"
            "                            used/limit, compute share achieved/target, GPU util\n"
            "  defrag                    plan the fewest pod moves (evictions of controller-owned\n"
            "                            pods, re-placed by the scheduler) that free the most\n"
            "                            whole GPUs or let pending pods fit; --apply carries\n"
            "                            the plan out one eviction at a time\n"
            "  version\n"
            "\n"
            "Options:\n"
            "  -d, --details             inspect: list the pods holding each GPU\n"
            "  -o, --output FORMAT       table (default), wide, json or yaml\n"
            "  -n, --namespace NS        pods of this namespace (top: default from the context)\n"
            "  -A, --all-namespaces      pods of every namespace\n"
            "      --sort KEY            top: memory (pods default), memory%%, share, util\n"
            "                            (nodes/gpus default) or name\n"
            "      --kubeconfig FILE     kubeconfig (default $KUBECONFIG, ~/.kube/config,\n"
            "                            then the in-cluster service account)\n"
            "      --context NAME        kubeconfig context (default: current-context)\n"
            "  -s, --server URL          API server URL (no credentials)\n"
            "      --agent-selector SEL  label selector of the agents' pods\n"
            "                            (default app.kubernetes.io/name=gpuvisor-node)\n"
            "      --agent-namespace NS  their namespace (default gpuvisor-system)\n"
            "      --agent-port PORT     their metrics port, number or name (default \"metrics\")\n"
            "      --heartbeat-timeout S agent heartbeat age that marks a node stale (90)\n"
            "      --scheduler-name NAME schedulerName of gpuvisor's pods (gpuvisor-scheduler)\n"
            "      --max-moves N         defrag: at most N evictions (default 10)\n"
            "      --apply               defrag: evict, one move at a time, checking each\n"
            "                            replacement lands as planned; stops at the first\n"
            "                            surprise (exit 5)\n"
            "      --timeout S           defrag --apply: wait for each replacement (120)\n"
            "      --placement-key-file F  verify placements with this key (the\n"
            "                            gpuvisor-placement-key Secret's \"key\")\n"
            "      --placement-key-secret NS/NAME  else read the key from this Secret\n"
            "                            (gpuvisor-system/gpuvisor-placement-key; \"\" none)\n"
            "      --accept-unsigned-placements-before TIME  as the scheduler's setting:\n"
            "                            unsigned placements of pods created before TIME count\n"
            "      --trust-annotations   defrag --apply without a key: evict on placements\n"
            "                            as written (a tenant can forge its own)\n"
            "\n"
            "Exit status: 0 ok, 1 error, 2 usage, 3 gpuvisor not installed, 4 forbidden (RBAC),\n"
            "5 defrag --apply stopped at a surprise.\n");
}

int main(int argc, char **argv)
{
    enum {
        OPT_KUBECONFIG = 1000,
        OPT_CONTEXT,
        OPT_SORT,
        OPT_AGENT_SEL,
        OPT_AGENT_PORT,
        OPT_HB,
        OPT_SCHED_NAME,
        OPT_MAX_MOVES,
        OPT_APPLY,
        OPT_TIMEOUT,
        OPT_KEY_FILE,
        OPT_KEY_SECRET,
        OPT_UNSIGNED_BEFORE,
        OPT_TRUST,
        OPT_AGENT_NS
    };
    static const struct option opts[] = {
        {"details", no_argument, NULL, 'd'},
        {"output", required_argument, NULL, 'o'},
        {"namespace", required_argument, NULL, 'n'},
        {"all-namespaces", no_argument, NULL, 'A'},
        {"server", required_argument, NULL, 's'},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"sort", required_argument, NULL, OPT_SORT},
        {"agent-selector", required_argument, NULL, OPT_AGENT_SEL},
        {"agent-port", required_argument, NULL, OPT_AGENT_PORT},
        {"agent-namespace", required_argument, NULL, OPT_AGENT_NS},
        {"heartbeat-timeout", required_argument, NULL, OPT_HB},
        {"scheduler-name", required_argument, NULL, OPT_SCHED_NAME},
        {"max-moves", required_argument, NULL, OPT_MAX_MOVES},
        {"apply", no_argument, NULL, OPT_APPLY},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"placement-key-file", required_argument, NULL, OPT_KEY_FILE},
        {"placement-key-secret", required_argument, NULL, OPT_KEY_SECRET},
        {"accept-unsigned-placements-before", required_argument, NULL, OPT_UNSIGNED_BEFORE},
        {"trust-annotations", no_argument, NULL, OPT_TRUST},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct kc_opts o = {.agent_selector = "app.kubernetes.io/name=gpuvisor-node",
                        .agent_namespace = "gpuvisor-system",
                        .heartbeat_timeout_s = 90,
                        .scheduler_name = "gpuvisor-scheduler",
                        .max_moves = 10,
                        .move_timeout_s = 120,
                        .placement_key_secret = "gpuvisor-system/gpuvisor-placement-key",
                        .out = stdout};
    int c;
    while ((c = getopt_long(argc, argv, "do:n:As:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            o.details = true;
            break;
        case 'n':
            o.namespace_ = optarg;
            break;
        case 'A':
            o.all_namespaces = true;
            break;
        case 's':
            o.server = optarg;
            break;
        case OPT_KUBECONFIG:
            o.kubeconfig = optarg;
            break;
        case OPT_CONTEXT:
            o.context = optarg;
            break;
        case OPT_SORT:
            o.sort = optarg;
            break;
        case OPT_AGENT_SEL:
            o.agent_selector = optarg;
            break;
        case OPT_AGENT_PORT:
            o.agent_port = optarg;
            break;
        case OPT_AGENT_NS:
            if (!gv_kube_dns_label(optarg)) { /* it goes into a request path */
                fprintf(stderr, "kubectl-gpuvisor: --agent-namespace %s: not a namespace name\n",
                        optarg);
                return KC_USAGE;
            }
            o.agent_namespace = optarg;
            break;
        case OPT_SCHED_NAME:
            o.scheduler_name = optarg;
            break;
        case OPT_APPLY:
            o.apply = true;
            break;
        case OPT_KEY_FILE:
            o.placement_key_file = optarg;
            break;
        case OPT_KEY_SECRET:
            o.placement_key_secret = optarg;
            break;
        case OPT_TRUST:
            o.trust_annotations = true;
            break;
        case OPT_UNSIGNED_BEFORE:
            if (kc_parse_time(optarg, &o.unsigned_before) != 0 || o.unsigned_before <= 0) {
                fprintf(stderr,
                        "kubectl-gpuvisor: --accept-unsigned-placements-before %s: not a time like "
                        "2026-01-31T00:00:00Z\n",
                        optarg);
                return KC_USAGE;
            }
            break;
        case OPT_MAX_MOVES:
        case OPT_TIMEOUT: {
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || v < (c == OPT_TIMEOUT) || v > 100000) {
                fprintf(stderr, "kubectl-gpuvisor: --%s %s: not a number in %d..100000\n",
                        c == OPT_TIMEOUT ? "timeout" : "max-moves", optarg, c == OPT_TIMEOUT);
                return KC_USAGE;
            }
            *(c == OPT_TIMEOUT ? &o.move_timeout_s : &o.max_moves) = v;
            break;
        }
        case OPT_HB: {
            char *end = NULL;
            o.heartbeat_timeout_s = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || o.heartbeat_timeout_s <= 0) {
                fprintf(stderr,
                        "kubectl-gpuvisor: --heartbeat-timeout %s: not a positive number "
                        "of seconds\n",
                        optarg);
                return KC_USAGE;
            }
            break;
        }
        case 'o':
            if (strcmp(optarg, "json") == 0)
                o.output = KC_OUT_JSON;
            else if (strcmp(optarg, "yaml") == 0)
                o.output = KC_OUT_YAML;
            else if (strcmp(optarg, "wide") == 0)
                o.output = KC_OUT_WIDE;
            else if (strcmp(optarg, "table") == 0)
                o.output = KC_OUT_TABLE;
            else {
                fprintf(stderr, "kubectl-gpuvisor: -o %s: use json, yaml, wide or table\n", optarg);
                return KC_USAGE;
            }
            break;
        case 'h':
            usage(stdout);
            return KC_OK;
        default:
            usage(stderr);
            return KC_USAGE;
        }
    }
    const char *cmd = optind < argc ? argv[optind++] : NULL;
    const char *arg = optind < argc ? argv[optind++] : NULL;
    if (cmd == NULL) {
        usage(stderr);
        return KC_USAGE;
    }
    if (strcmp(cmd, "version") == 0) {
        printf("kubectl-gpuvisor %s\n", GV_VERSION);
        return KC_OK;
    }
    if (strcmp(cmd, "help") == 0) {
        usage(stdout);
        return KC_OK;
    }
    bool is_defrag = strcmp(cmd, "defrag") == 0;
    if ((strcmp(cmd, "inspect") != 0 && strcmp(cmd, "top") != 0 && !is_defrag) ||
        optind < argc || (is_defrag && arg != NULL)) {
        bool stray = optind < argc || (is_defrag && arg != NULL);
        fprintf(stderr, "kubectl-gpuvisor: %s '%s' (see kubectl gpuvisor --help)\n",
                stray ? "unexpected argument" : "unknown command",
                optind < argc ? argv[optind] : stray ? arg : cmd);
        return KC_USAGE;
    }
    struct gv_error err = {0};
    struct gv_kube_config *cfg = NULL;
    struct gv_kube_client *kube = NULL;
    struct gv_placement_key *key = NULL;
    char key_note[GV_ERROR_MSG_MAX + 96];
    int rc = KC_ERR;
    if (load_config(&o, &cfg, &err) != 0) {
        fprintf(stderr, "kubectl-gpuvisor: %s\n", err.msg);
        goto out;
    }
    /* An interactive command: fail in seconds, not after the daemons' backoff. */
    cfg->max_retries = 2;
    cfg->timeout_ms = 20000;
    if (o.namespace_ == NULL && cfg->namespace_ != NULL)
        o.namespace_ = cfg->namespace_;
    if (gv_kube_client_new(cfg, &kube, &err) != GV_OK) {
        fprintf(stderr, "kubectl-gpuvisor: %s\n", err.msg);
        goto out;
    }
    if (strcmp(cmd, "top") != 0) {
        /* inspect and defrag count placements: verified when a key is at hand */
        if ((rc = kc_placement_key_find(kube, &o, &key, key_note, sizeof(key_note), &err)) !=
            KC_OK) {
            fprintf(stderr, "kubectl-gpuvisor: %s\n", err.msg);
            goto out;
        }
        o.placement_key = key;
        o.placement_key_note = key_note;
        if (key == NULL && is_defrag && o.apply && !o.trust_annotations) {
            fprintf(stderr,
                    "kubectl-gpuvisor: defrag --apply: placements cannot be verified (%s), and a "
                    "tenant can forge its own pod's; give --placement-key-file, or "
                    "--trust-annotations to evict on placements as written\n",
                    key_note);
            rc = KC_USAGE;
            goto out;
        }
        kc_placement_warn(&o);
        rc = KC_ERR;
    }
    if (is_defrag) {
        rc = kc_defrag(kube, &o);
    } else if (strcmp(cmd, "inspect") == 0) {
        /* inspect shows every namespace unless one is asked for explicitly */
        if (o.namespace_ == cfg->namespace_)
            o.namespace_ = NULL;
        rc = kc_inspect(kube, &o, arg);
    } else {
        rc = kc_top(kube, &o, arg);
    }
out:
    gv_placement_key_free(key);
    gv_kube_client_free(kube);
    gv_kube_config_free(cfg);
    if (fflush(stdout) != 0 && rc == KC_OK)
        rc = KC_ERR;
    return rc;
}
