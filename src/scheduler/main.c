/* gpuvisor-scheduler: kube-scheduler extender + admission webhook daemon. */
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_file.h"
#include "common/gv_log.h"
#include "common/gv_version.h"
#include "scheduler/gv_scheduler.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuvisor-scheduler [options]\n"
            "\n"
            "  --config FILE            scheduler config (JSON, docs/scheduler.md)\n"
            "  --master URL             API server URL (default: in-cluster, then kubeconfig)\n"
            "  --kubeconfig FILE        kubeconfig for development\n"
            "  --extender-listen A:P    extender address (default 127.0.0.1:8888)\n"
            "  --extender-prefix PATH   URL prefix of the verbs (default /gpuvisor)\n"
            "  --dashboard-listen A:P   serve the read-only web dashboard here (off by default)\n"
            "  --hami-metrics on|off    HAMi's names on /metrics as well (default on)\n"
            "  --metrics-per-gpu        per-GPU and per-container series on /metrics too\n"
            "                           (or metricsPerGpu in the config; default: per-node\n"
            "                           and cluster aggregates only)\n"
            "  --extender-tls           serve the extender over HTTPS too (same cert/key)\n"
            "  --webhook-listen A:P     serve the admission webhook (HTTPS) here\n"
            "  --health-listen A:P      serve /healthz, /readyz, /metrics here (plain HTTP),\n"
            "                           apart from the webhook so abuse of one cannot\n"
            "                           fail the other's probes\n"
            "  --placement-key-file F   HMAC key signing and authenticating placements\n"
            "  --bind-journal-dir D     journal of Bindings in flight, read after a restart\n"
            "                           (or placementKeyFile in the config)\n"
            "  --insecure-unsigned-placements  run without a placement key: any tenant\n"
            "                           that can patch its pod can forge a placement\n"
            "  --tls-cert-file FILE     PEM certificate chain (reloaded when it changes)\n"
            "  --tls-key-file FILE      PEM private key (reloaded when it changes)\n"
            "  --port-file FILE         write the bound ports here once listening\n"
            "  --log-level LEVEL        error|warn|info|debug|trace (or GPUVISOR_LOG_LEVEL)\n"
            "  --version, --help\n");
}

/* "127.0.0.1:8888", "[::]:8443", ":8443" -> address (NULL = any) and port. */
static int split_listen(const char *text, char *addr, size_t cap, uint16_t *port)
{
    const char *colon = strrchr(text, ':');
    if (colon == NULL)
        return -1;
    const char *a = text;
    size_t alen = (size_t)(colon - text);
    if (alen >= 2 && a[0] == '[' && a[alen - 1] == ']') {
        a++;
        alen -= 2;
    }
    if (alen >= cap)
        return -1;
    memcpy(addr, a, alen);
    addr[alen] = '\0';
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || p < 0 || p > 65535)
        return -1;
    *port = (uint16_t)p;
    return 0;
}

/* The extender's clients are kube-scheduler replicas (loopback in the
 * deploy, or the cluster network), and they open far more connections than
 * "a few at once": kube-scheduler filters one pod at a time but binds each
 * pod in a goroutine of its own, and Go's HTTP client keeps only 2 idle
 * connections per host, so every bind in flight beyond two dials a new
 * connection.  A burst of N pods opens up to N + 1 connections at once (one
 * filter, N binds), all from one address.  libmicrohttpd closes a
 * connection over either cap as it accepts it, which kube-scheduler logs as
 * "connection reset by peer" and counts as a scheduling error (the pod goes
 * to backoff): with a per-address cap of 32 every 200-pod burst lost pods
 * that way.  So one cap, per address and in all, sized for a 1,000-pod burst
 * with every bind in flight at once (one thread each, mostly idle stack).
 * The webhook and health listeners keep their per-address caps: tenants'
 * pods can reach those. */
#define EXTENDER_MAX_CONNECTIONS 1100

/* The read-only dashboard on a listener of its own (GET routes only). */
static gv_status start_dashboard(struct gv_sched *s, const char *listen, struct gv_httpd **out,
                                 struct gv_error *err)
{
    char addr[128];
    uint16_t port = 0;
    if (split_listen(listen, addr, sizeof(addr), &port) != 0)
        return gv_error_set(err, GV_EINVAL, "--dashboard-listen '%s' is not ADDRESS:PORT", listen);
    struct gv_httpd_options o = {
        .name = "dashboard",
        .address = addr[0] ? addr : NULL,
        .port = port,
        .max_body = 4096,
        /* the same caps as the health listener (docs/isolation.md) */
        .timeout_seconds = 10,
        .max_connections = 32,
        .max_per_ip = 8};
    gv_status st;
    if ((st = gv_httpd_new(&o, out, err)) != GV_OK ||
        (st = gv_sched_serve_dashboard(s, *out, err)) != GV_OK)
        return st;
    return gv_httpd_start(*out, err);
}

int main(int argc, char **argv)
{
    enum {
        OPT_CONFIG = 1000,
        OPT_MASTER,
        OPT_DASH_LISTEN,
        OPT_HAMI_METRICS,
        OPT_KUBECONFIG,
        OPT_EXT_LISTEN,
        OPT_EXT_PREFIX,
        OPT_EXT_TLS,
        OPT_WH_LISTEN,
        OPT_CERT,
        OPT_KEY,
        OPT_PORT_FILE,
        OPT_LOG_LEVEL,
        OPT_VERSION,
        OPT_HEALTH_LISTEN,
        OPT_KEY_FILE,
        OPT_JOURNAL,
        OPT_INSECURE,
        OPT_PER_GPU,
    };
    static const struct option opts[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"master", required_argument, NULL, OPT_MASTER},
        {"dashboard-listen", required_argument, NULL, OPT_DASH_LISTEN},
        {"hami-metrics", required_argument, NULL, OPT_HAMI_METRICS},
        {"metrics-per-gpu", no_argument, NULL, OPT_PER_GPU},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"extender-listen", required_argument, NULL, OPT_EXT_LISTEN},
        {"extender-prefix", required_argument, NULL, OPT_EXT_PREFIX},
        {"extender-tls", no_argument, NULL, OPT_EXT_TLS},
        {"webhook-listen", required_argument, NULL, OPT_WH_LISTEN},
        {"tls-cert-file", required_argument, NULL, OPT_CERT},
        {"tls-key-file", required_argument, NULL, OPT_KEY},
        {"port-file", required_argument, NULL, OPT_PORT_FILE},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"version", no_argument, NULL, OPT_VERSION},
        {"health-listen", required_argument, NULL, OPT_HEALTH_LISTEN},
        {"placement-key-file", required_argument, NULL, OPT_KEY_FILE},
        {"bind-journal-dir", required_argument, NULL, OPT_JOURNAL},
        {"insecure-unsigned-placements", no_argument, NULL, OPT_INSECURE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config = NULL, *master = NULL, *kubeconfig = NULL;
    const char *dash_listen = NULL;
    bool hami_metrics = true;
    const char *ext_listen = "127.0.0.1:8888", *ext_prefix = "/gpuvisor", *wh_listen = NULL;
    const char *cert = NULL, *key = NULL, *port_file = NULL;
    const char *health_listen = NULL, *key_file = NULL, *journal = NULL;
    bool ext_tls = false, insecure = false, per_gpu = false;
    gv_log_init("gpuvisor-scheduler", GV_LOG_INFO);
    /* Every HTTP connection has its own thread, and glibc spreads threads
     * over its arenas: each arena then keeps the high-water mark of a whole
     * 5,000-node filter (measured: with two arenas the second one reached it
     * within ~50 filters, +0.7 MiB that looked like per-pod growth).  One
     * arena is enough: the filter's JSON parse no longer calls malloc (see
     * extender.c) and the hot path holds one lock anyway. */
    mallopt(M_ARENA_MAX, 1);
    /* Fixed thresholds: glibc would raise both after the first large
     * request body is freed (up to 32 MiB), and every later filter's
     * transient 5,000-name JSON would stay resident. */
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    mallopt(M_TRIM_THRESHOLD, 256 << 10);
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_CONFIG:
            config = optarg;
            break;
        case OPT_MASTER:
            master = optarg;
            break;
        case OPT_DASH_LISTEN:
            dash_listen = optarg;
            break;
        case OPT_HAMI_METRICS:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                fprintf(stderr, "gpuvisor-scheduler: --hami-metrics takes on or off\n");
                return 2;
            }
            hami_metrics = strcmp(optarg, "on") == 0;
            break;
        case OPT_KUBECONFIG:
            kubeconfig = optarg;
            break;
        case OPT_EXT_LISTEN:
            ext_listen = optarg;
            break;
        case OPT_EXT_PREFIX:
            ext_prefix = optarg;
            break;
        case OPT_EXT_TLS:
            ext_tls = true;
            break;
        case OPT_WH_LISTEN:
            wh_listen = optarg;
            break;
        case OPT_CERT:
            cert = optarg;
            break;
        case OPT_KEY:
            key = optarg;
            break;
        case OPT_PORT_FILE:
            port_file = optarg;
            break;
        case OPT_HEALTH_LISTEN:
            health_listen = optarg;
            break;
        case OPT_KEY_FILE:
            key_file = optarg;
            break;
        case OPT_JOURNAL:
            journal = optarg;
            break;
        case OPT_INSECURE:
            insecure = true;
            break;
        case OPT_PER_GPU:
            per_gpu = true;
            break;
        case OPT_LOG_LEVEL: {
            int l = gv_log_parse_level(optarg);
            if (l < 0) {
                fprintf(stderr, "gpuvisor-scheduler: unknown log level '%s'\n", optarg);
                return 2;
            }
            gv_log_set_level((gv_log_level)l);
            break;
        }
        case OPT_VERSION:
            printf("gpuvisor-scheduler %s\n", GV_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpuvisor-scheduler: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((wh_listen != NULL || ext_tls) && (cert == NULL || key == NULL)) {
        fprintf(stderr, "gpuvisor-scheduler: the webhook and --extender-tls need "
                        "--tls-cert-file and --tls-key-file\n");
        return 2;
    }

    /* Signals are taken synchronously by the main thread; every thread
     * created below inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    struct gv_error err = {0};
    struct gv_sched_config cfg;
    struct gv_kube_config *kcfg = NULL;
    struct gv_kube_client *kube = NULL;
    struct gv_sched *s = NULL;
    struct gv_httpd *ext = NULL, *wh = NULL, *hl = NULL;
    char addr[128];
    uint16_t port = 0;
    struct gv_httpd *dash = NULL; /* the dashboard's own listener */
    if (gv_sched_config_default(&cfg, &err) != GV_OK ||
        (config != NULL && gv_sched_config_load(config, &cfg, &err) != GV_OK))
        goto fail;
    if (gv_sched_config_load_key(&cfg, key_file, &err) != GV_OK)
        goto fail;
    cfg.insecure_unsigned |= insecure;
    if (journal != NULL) {
        free(cfg.bind_journal_dir);
        if ((cfg.bind_journal_dir = strdup(journal)) == NULL) {
            gv_error_set(&err, GV_ENOMEM, "out of memory");
            goto fail;
        }
    }
    cfg.metrics_per_gpu |= per_gpu;
    if (cfg.placement_key == NULL && !cfg.insecure_unsigned) {
        /* Fail closed: without a key every placement annotation would be
         * trusted as written. */
        gv_error_set(&err, GV_EINVAL,
                     "no placement key: give --placement-key-file (or placementKeyFile in the "
                     "config) the file of the gpuvisor-placement-key Secret; "
                     "--insecure-unsigned-placements runs without one, trusting every "
                     "placement annotation as written (docs/isolation.md)");
        goto fail;
    }
    if (cfg.placement_key == NULL)
        gv_warn("INSECURE: no placement key; placement annotations are not authenticated and "
                "any tenant that can patch its own pod can forge one (docs/isolation.md)");
    if (gv_kube_config_load(master, kubeconfig, &kcfg, &err) != GV_OK ||
        gv_kube_client_new(kcfg, &kube, &err) != GV_OK)
        goto fail;
    if (gv_sched_new(&cfg, kube, &s, &err) != GV_OK)
        goto fail;
    gv_sched_obs_set_hami(s, hami_metrics);
    if (dash_listen != NULL && start_dashboard(s, dash_listen, &dash, &err) != GV_OK)
        goto fail;

    if (split_listen(ext_listen, addr, sizeof(addr), &port) != 0) {
        gv_error_set(&err, GV_EINVAL, "--extender-listen '%s' is not ADDRESS:PORT", ext_listen);
        goto fail;
    }
    struct gv_httpd_options eo = {.name = "extender",
                                  .address = addr[0] ? addr : NULL,
                                  .port = port,
                                  .cert_file = ext_tls ? cert : NULL,
                                  .key_file = ext_tls ? key : NULL,
                                  /* 5,000 full Node objects (nodeCacheCapable: false) */
                                  .max_body = 64u << 20,
                                  .max_connections = EXTENDER_MAX_CONNECTIONS,
                                  .max_per_ip = EXTENDER_MAX_CONNECTIONS,
                                  .max_buffered = 128u << 20};
    if (gv_httpd_new(&eo, &ext, &err) != GV_OK ||
        gv_sched_serve_extender(s, ext, ext_prefix, &err) != GV_OK ||
        gv_sched_serve_health(s, ext, &err) != GV_OK)
        goto fail;
    if (wh_listen != NULL) {
        char waddr[128];
        uint16_t wport = 0;
        if (split_listen(wh_listen, waddr, sizeof(waddr), &wport) != 0) {
            gv_error_set(&err, GV_EINVAL, "--webhook-listen '%s' is not ADDRESS:PORT", wh_listen);
            goto fail;
        }
        struct gv_httpd_options wo = {.name = "webhook",
                                      .address = waddr[0] ? waddr : NULL,
                                      .port = wport,
                                      .cert_file = cert,
                                      .key_file = key,
                                      /* Pod + oldObject of an UPDATE: each at most
                                       * etcd's 1.5 MiB object limit */
                                      .max_body = 4u << 20,
                                      /* the API server answers in 10 s or gives up */
                                      .timeout_seconds = 10,
                                      .max_connections = 128,
                                      .max_per_ip = 32,
                                      .max_buffered = 16u << 20};
        /* No health or metrics here: tenants' pods may reach this port,
         * and metrics list every node and GPU. */
        if (gv_httpd_new(&wo, &wh, &err) != GV_OK || gv_sched_serve_webhook(s, wh, &err) != GV_OK)
            goto fail;
    }
    if (health_listen != NULL) {
        char haddr[128];
        uint16_t hport = 0;
        if (split_listen(health_listen, haddr, sizeof(haddr), &hport) != 0) {
            gv_error_set(&err, GV_EINVAL, "--health-listen '%s' is not ADDRESS:PORT",
                         health_listen);
            goto fail;
        }
        struct gv_httpd_options ho = {.name = "health",
                                      .address = haddr[0] ? haddr : NULL,
                                      .port = hport,
                                      .max_body = 4096,
                                      .timeout_seconds = 10,
                                      .max_connections = 32,
                                      .max_per_ip = 8};
        if (gv_httpd_new(&ho, &hl, &err) != GV_OK || gv_sched_serve_health(s, hl, &err) != GV_OK)
            goto fail;
    }
    /* Serve health and metrics at once; filter answers only from synced
     * caches once the informers have listed (readyz says when). */
    if (gv_httpd_start(ext, &err) != GV_OK || (wh != NULL && gv_httpd_start(wh, &err) != GV_OK) ||
        (hl != NULL && gv_httpd_start(hl, &err) != GV_OK))
        goto fail;
    if (gv_sched_start(s, &err) != GV_OK)
        goto fail;
    if (port_file != NULL) {
        char text[128];
        int n = snprintf(text, sizeof(text), "extender=%u\nwebhook=%u\nhealth=%u\ndashboard=%u\n",
                         (unsigned)gv_httpd_port(ext), wh ? (unsigned)gv_httpd_port(wh) : 0u,
                         hl ? (unsigned)gv_httpd_port(hl) : 0u,
                         dash ? (unsigned)gv_httpd_port(dash) : 0u);
        if (gv_file_write_atomic(port_file, text, (size_t)n, 0644, &err) != GV_OK)
            goto fail;
    }
    gv_info("ready: extender on %s%s, webhook %s", ext_listen, ext_prefix,
            wh_listen ? wh_listen : "disabled");
    int sig = 0;
    sigwait(&sigs, &sig);
    gv_info("signal %d: shutting down", sig);
    rc = 0;
fail:
    if (rc != 0)
        gv_error("%s", err.msg[0] ? err.msg : "start-up failed");
    /* Servers first: no handler may run once the state is gone. */
    gv_httpd_free(hl);
    gv_httpd_free(wh);
    gv_httpd_free(ext);
    gv_httpd_free(dash);
    gv_sched_free(s);
    gv_kube_client_free(kube);
    gv_kube_config_free(kcfg);
    gv_sched_config_clear(&cfg);
    return rc;
}
