/*
 * The kube client over TLS against fake_apiserver serving HTTPS (Python's
 * ssl module, TLS 1.2+), with certificates made at run time by
 * tests/fakes/apiserver/gen_test_certs.sh (openssl CLI) into scratch space.
 *
 * What a transport must get right to talk to a real API server: verify the
 * server against the configured CA (file, in-memory PEM, bundle), check the
 * address against IP subjectAltNames (in-cluster servers are reached by IP,
 * e.g. 10.96.0.1) and DNS ones, refuse the wrong CA or name at once rather
 * than retrying, present RSA and EC client certificates (kubeadm/kind
 * write EC P-256 keys as SEC1, others PKCS#8), keep sending bearer tokens,
 * stream chunked watches and reuse connections.  The fake counts TLS
 * handshakes and the client certificates it authenticated; the tests read
 * those over its plain-HTTP control port.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "common/gv_file.h"
#include "kube_testlib.h"

static char scratch[512];
static bool have_certs;

#define NEED_CERTS()                                                                               \
    do {                                                                                           \
        if (!have_certs) {                                                                         \
            print_message("# openssl CLI not found: no certificates to test TLS with\n");          \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Path of a generated file (a few live at once). */
static const char *cpath(const char *name)
{
    static char buf[8][1024];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", scratch, name);
    return buf[i];
}

static char *read_text(const char *name)
{
    char *text = NULL;
    size_t len = 0;
    struct gv_error err;
    if (gv_file_read_all(cpath(name), &text, &len, &err) != GV_OK)
        fail_msg("%s", err.msg);
    return text;
}

static char *b64_file(const char *name)
{
    char *text = read_text(name);
    size_t n = strlen(text);
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    assert_non_null(out);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)text, (int)n);
    free(text);
    return out;
}

/* Starts the fake serving <server>.crt/.key over HTTPS, plus extra args. */
static void start_fake(struct kube_fixture *fx, const char *server, const char *const *extra)
{
    char crt[1024], key[1024];
    snprintf(crt, sizeof(crt), "%s/%s.crt", scratch, server);
    snprintf(key, sizeof(key), "%s/%s.key", scratch, server);
    const char *args[16] = {"--tls-cert", crt, "--tls-key", key, "--control-port", "0"};
    int n = 6;
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 15; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    memset(fx, 0, sizeof(*fx));
    assert_int_equal(fake_apiserver_start(&fx->fa, args), 0);
    assert_memory_equal(fx->fa.url, "https://127.0.0.1:", 18);
    assert_memory_equal(fx->fa.ctl_url, "http://", 7);
}

static void stop_fake(struct kube_fixture *fx)
{
    gv_kube_client_free(fx->client);
    fx->client = NULL;
    fake_apiserver_stop(&fx->fa);
}

/* Config for https://host:<the fake's port> with the fixture's fast retries,
 * trusting the generated CA file ca (NULL: none). */
static struct gv_kube_config *cfg_for(const struct kube_fixture *fx, const char *host,
                                      const char *ca)
{
    char url[600];
    snprintf(url, sizeof(url), "https://%s:%s", host, strrchr(fx->fa.url, ':') + 1);
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    if (gv_kube_config_from_url(url, &cfg, &err) != GV_OK)
        fail_msg("%s", err.msg);
    kube_config_fast_retries(cfg);
    if (ca != NULL)
        cfg->ca_file = strdup(cpath(ca));
    return cfg;
}

static void set_str(char **field, const char *value)
{
    free(*field);
    *field = value != NULL ? strdup(value) : NULL;
}

/* Makes a client from cfg (freed) and GETs the node list with it. */
static gv_status get_nodes(struct kube_fixture *fx, struct gv_kube_config *cfg,
                           struct gv_error *err)
{
    gv_kube_client_free(fx->client);
    fx->client = NULL;
    gv_status st = gv_kube_client_new(cfg, &fx->client, err);
    gv_kube_config_free(cfg);
    if (st != GV_OK)
        return st;
    json_t *out = NULL;
    st = gv_kube_get(fx->client, "/api/v1/nodes", &out, err);
    if (st == GV_OK)
        assert_string_equal(json_string_value(json_object_get(out, "kind")), "NodeList");
    else
        assert_null(out);
    json_decref(out);
    return st;
}

/* TLS connections the fake accepted, handshake completed or not. */
static long connections(struct kube_fixture *fx)
{
    return kube_fake_count(fx, "TLS handshake") + kube_fake_count(fx, "TLS handshake-failed");
}

/* connections() once the fake's threads have caught up with a client that
 * already returned (they count a moment after the client gave up). */
static long settled_connections(struct kube_fixture *fx, long at_least)
{
    for (int i = 0; i < 200 && connections(fx) < at_least; i++)
        usleep(10000);
    usleep(100000);
    return connections(fx);
}

/*
 * A refused server certificate: a transport error (not an HTTP status)
 * naming the request and saying why in words any TLS stack uses, after a
 * single connection (verification failures are not transient: retrying
 * them only delays the error), and no request sent on it (a token must
 * never reach an unverified server).
 */
static void assert_verify_failure(struct kube_fixture *fx, struct gv_kube_config *cfg,
                                  const char *label)
{
    /* Retries allowed, with a slow backoff, so that a retry could not hide:
     * every retried connection would have a whole second to be counted by
     * the fake before the client returns.  The check is the number of
     * connections, never the time taken (no wall-clock asserts). */
    cfg->max_retries = 5;
    cfg->backoff_initial_ms = 1000;
    cfg->backoff_max_ms = 1000;
    long before = connections(fx);
    long gets = kube_fake_count(fx, "GET /api/v1/nodes");
    struct gv_error err;
    gv_status st = get_nodes(fx, cfg, &err);
    print_message("# %s: %s\n", label, err.msg);
    assert_int_equal(st, GV_EUNAVAILABLE);
    assert_non_null(strstr(err.msg, "GET /api/v1/nodes"));
    assert_true(strcasestr(err.msg, "certificate") != NULL || strcasestr(err.msg, "verif") != NULL);
    assert_int_equal(settled_connections(fx, before + 1), before + 1);
    assert_int_equal(kube_fake_count(fx, "GET /api/v1/nodes"), gets);
}

/* ---- server verification */

/* Fixture: the fake serving server.crt (IP and DNS SANs), no client CA. */
static int setup_server(void **state)
{
    *state = NULL;
    if (!have_certs)
        return 0;
    struct kube_fixture *fx = malloc(sizeof(*fx));
    if (fx == NULL)
        return -1;
    start_fake(fx, "server", NULL);
    *state = fx;
    return 0;
}

static int teardown_server(void **state)
{
    if (*state != NULL)
        stop_fake(*state);
    free(*state);
    return 0;
}

struct watch_seen {
    struct gv_kube_client *c;
    int n;
    char type[4][16];
    char name[4][64];
    gv_status create_st;
};

static bool on_event(void *ud, gv_kube_event_type type, json_t *obj)
{
    struct watch_seen *w = ud;
    if (w->n >= 4)
        return false;
    snprintf(w->type[w->n], sizeof(w->type[0]), "%s", gv_kube_event_name(type));
    snprintf(w->name[w->n], sizeof(w->name[0]), "%s",
             json_string_value(json_object_get(json_object_get(obj, "metadata"), "name")));
    w->n++;
    if (w->n == 1) {
        /* Written while the stream is open: must arrive as a live chunk. */
        json_t *pod = json_pack("{s:{s:s}}", "metadata", "name", "p2");
        struct gv_error err;
        w->create_st = gv_kube_create(w->c, "/api/v1/namespaces/default/pods", pod, NULL, &err);
        json_decref(pod);
    }
    return w->n < 2;
}

static void test_ip_san_get_list_patch_watch(void **state)
{
    NEED_CERTS();
    struct kube_fixture *fx = *state;
    struct gv_kube_config *cfg = cfg_for(fx, "127.0.0.1", "ca.crt");
    struct gv_error err;
    assert_int_equal(gv_kube_client_new(cfg, &fx->client, &err), GV_OK);
    gv_kube_config_free(cfg);
    struct gv_kube_client *c = fx->client;

    json_t *p1 = kube_create_pod(c, "default", "p1", "app", "x", NULL);
    json_t *got = NULL;
    assert_int_equal(gv_kube_get(c, "/api/v1/namespaces/default/pods/p1", &got, &err), GV_OK);
    assert_string_equal(kube_rv(got), kube_rv(p1));
    json_decref(got);

    struct gv_kube_list_opts lo = {.label_selector = "app=x"};
    json_t *list = NULL;
    assert_int_equal(gv_kube_list(c, "/api/v1/pods", &lo, &list, &err), GV_OK);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 1);
    char *list_rv = strdup(kube_rv(list));
    json_decref(list);

    /* Conditional patch, then the same precondition again: 409 over TLS. */
    const char *k[] = {"gpuvisor.io/x"}, *v[] = {"1"};
    json_t *patched = NULL;
    assert_int_equal(gv_kube_patch_annotations(c, "/api/v1/namespaces/default/pods/p1",
                                               kube_rv(p1), k, v, 1, &patched, &err),
                     GV_OK);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(patched, "metadata"), "annotations"),
                            "gpuvisor.io/x")),
                        "1");
    assert_int_equal(gv_kube_patch_annotations(c, "/api/v1/namespaces/default/pods/p1",
                                               kube_rv(p1), k, v, 1, NULL, &err),
                     GV_ECONFLICT);
    assert_non_null(strstr(err.msg, "HTTP 409"));

    /* Watch from the LIST: the patch is pending; p2 is created from the
     * callback and must be streamed while the watch is open. */
    struct watch_seen w = {.c = c, .create_st = GV_EINTERNAL};
    struct gv_kube_watch_opts wo = {.resource_version = list_rv, .timeout_seconds = 10};
    char *last = NULL;
    assert_int_equal(gv_kube_watch(c, "/api/v1/namespaces/default/pods", &wo, on_event, &w, &last,
                                   &err),
                     GV_OK);
    assert_int_equal(w.create_st, GV_OK);
    assert_int_equal(w.n, 2);
    assert_string_equal(w.type[0], "MODIFIED");
    assert_string_equal(w.name[0], "p1");
    assert_string_equal(w.type[1], "ADDED");
    assert_string_equal(w.name[1], "p2");
    assert_non_null(last);

    /* A watch the server ends (timeoutSeconds) ends cleanly, with no event. */
    struct watch_seen quiet = {.c = c};
    wo.resource_version = last;
    wo.timeout_seconds = 1;
    quiet.n = 2; /* no create from the callback */
    assert_int_equal(gv_kube_watch(c, "/api/v1/namespaces/default/pods", &wo, on_event, &quiet,
                                   NULL, &err),
                     GV_OK);
    assert_int_equal(quiet.n, 2);

    assert_true(kube_fake_count(fx, "TLS handshake") >= 1);
    assert_int_equal(kube_fake_count(fx, "TLS handshake-failed"), 0);
    free(last);
    free(list_rv);
    json_decref(patched);
    json_decref(p1);
    stop_fake(fx);
}

static void test_dns_san_localhost(void **state)
{
    NEED_CERTS();
    struct kube_fixture *fx = *state;
    struct gv_kube_config *cfg = cfg_for(fx, "localhost", "ca.crt");
    struct gv_error err;
    assert_int_equal(get_nodes(fx, cfg, &err), GV_OK);
    stop_fake(fx);
}

static void test_ca_data_and_bundle(void **state)
{
    NEED_CERTS();
    struct kube_fixture *fx = *state;
    char *ca = read_text("ca.crt"), *other = read_text("other-ca.crt");
    struct gv_error err;

    struct gv_kube_config *cfg = cfg_for(fx, "127.0.0.1", NULL);
    set_str(&cfg->ca_data, ca);
    assert_int_equal(get_nodes(fx, cfg, &err), GV_OK);

    /* A bundle whose first certificate is unrelated (as in ca-certificates). */
    size_t n = strlen(other) + strlen(ca) + 1;
    char *bundle = malloc(n);
    assert_non_null(bundle);
    snprintf(bundle, n, "%s%s", other, ca);
    cfg = cfg_for(fx, "127.0.0.1", NULL);
    set_str(&cfg->ca_data, bundle);
    assert_int_equal(get_nodes(fx, cfg, &err), GV_OK);

    cfg = cfg_for(fx, "127.0.0.1", NULL);
    set_str(&cfg->ca_data, other);
    assert_verify_failure(fx, cfg, "wrong ca_data");
    free(bundle);
    free(ca);
    free(other);
    stop_fake(fx);
}

static void test_wrong_ca_fails_at_once(void **state)
{
    NEED_CERTS();
    struct kube_fixture *fx = *state;
    struct gv_kube_config *cfg = cfg_for(fx, "127.0.0.1", "other-ca.crt");
    assert_verify_failure(fx, cfg, "wrong CA");
    /* No CA configured: the system store, which does not know the test CA
     * (or is absent on a minimal system: refused before connecting then). */
    struct gv_error err;
    assert_int_equal(get_nodes(fx, cfg_for(fx, "127.0.0.1", NULL), &err), GV_EUNAVAILABLE);
    print_message("# system store: %s\n", err.msg);
    assert_true(strcasestr(err.msg, "certificate") != NULL || strcasestr(err.msg, "verif") != NULL);
    assert_int_equal(kube_fake_count(fx, "GET /api/v1/nodes"), 0);
    stop_fake(fx);
}

static void test_san_mismatch(void **state)
{
    (void)state;
    NEED_CERTS();
    struct kube_fixture fx;
    struct gv_error err;
    /* Right CA, wrong name (DNS:wrong.example only). */
    start_fake(&fx, "wrong-san", NULL);
    struct gv_kube_config *cfg = cfg_for(&fx, "127.0.0.1", "ca.crt");
    assert_verify_failure(&fx, cfg, "SAN mismatch (IP)");
    cfg = cfg_for(&fx, "localhost", "ca.crt");
    assert_verify_failure(&fx, cfg, "SAN mismatch (DNS)");
    /* insecure-skip-tls-verify accepts it (and any CA). */
    cfg = cfg_for(&fx, "127.0.0.1", NULL);
    cfg->insecure_skip_tls_verify = true;
    assert_int_equal(get_nodes(&fx, cfg, &err), GV_OK);
    cfg = cfg_for(&fx, "127.0.0.1", "other-ca.crt");
    cfg->insecure_skip_tls_verify = true;
    assert_int_equal(get_nodes(&fx, cfg, &err), GV_OK);
    stop_fake(&fx);

    /* An address is matched against IP SANs only: DNS:127.0.0.1 is a name
     * (as Go's crypto/tls and OpenSSL decide), so it does not verify it. */
    start_fake(&fx, "ip-as-dns", NULL);
    cfg = cfg_for(&fx, "127.0.0.1", "ca.crt");
    assert_verify_failure(&fx, cfg, "IP in a DNS SAN");
    stop_fake(&fx);
}

static void test_keepalive_reuses_connection(void **state)
{
    NEED_CERTS();
    struct kube_fixture *fx = *state;
    struct gv_kube_config *cfg = cfg_for(fx, "127.0.0.1", "ca.crt");
    struct gv_error err;
    assert_int_equal(get_nodes(fx, cfg, &err), GV_OK);
    json_t *out = NULL;
    for (int i = 0; i < 20; i++) {
        assert_int_equal(gv_kube_get(fx->client, "/api/v1/nodes", &out, &err), GV_OK);
        json_decref(out);
    }
    /* 21 sequential requests: one handshake (two if the first connection
     * was closed for a reason of the client's), not one each. */
    assert_int_equal(kube_fake_count(fx, "GET /api/v1/nodes"), 21);
    assert_in_range(kube_fake_count(fx, "TLS handshake"), 1, 2);
    stop_fake(fx);
}

/* ---- client certificates (x509 authentication) and tokens */

struct cert_case {
    const char *crt, *key, *cn;
    bool inline_data; /* *-data fields, else paths relative to the kubeconfig */
};

static const struct cert_case rsa_data = {"client-rsa.crt", "client-rsa.key",
                                          "system:node:node1", true};
static const struct cert_case rsa_file = {"client-rsa.crt", "client-rsa.key",
                                          "system:node:node1", false};
static const struct cert_case ec_sec1_data = {"client-ec.crt", "client-ec.key",
                                              "system:node:node2", true};
static const struct cert_case ec_pkcs8_file = {"client-ec.crt", "client-ec.p8.key",
                                               "system:node:node2", false};

/* Writes a kubeconfig for the fake with the CA and client cert of cc
 * (cc NULL: no client certificate; token NULL: none) and loads it. */
static struct gv_kube_config *load_kubeconfig(const struct kube_fixture *fx,
                                              const struct cert_case *cc, const char *token)
{
    char *ca = b64_file("ca.crt");
    char user[32768] = "";
    size_t u = 0;
    if (cc != NULL && cc->inline_data) {
        char *crt = b64_file(cc->crt), *key = b64_file(cc->key);
        u = (size_t)snprintf(user, sizeof(user),
                             "    client-certificate-data: %s\n    client-key-data: %s\n", crt,
                             key);
        free(crt);
        free(key);
    } else if (cc != NULL) {
        u = (size_t)snprintf(user, sizeof(user),
                             "    client-certificate: %s\n    client-key: %s\n", cc->crt, cc->key);
    }
    if (token != NULL)
        snprintf(user + u, sizeof(user) - u, "    token: %s\n", token);
    size_t n = strlen(user) + strlen(ca) + 1024;
    char *yaml = malloc(n);
    assert_non_null(yaml);
    int len = snprintf(yaml, n,
                       "apiVersion: v1\nkind: Config\ncurrent-context: tls\n"
                       "clusters:\n- name: fake\n  cluster:\n    server: %s\n"
                       "    %s: %s\n"
                       "contexts:\n- name: tls\n  context: {cluster: fake, user: u}\n"
                       "users:\n- name: u\n  user:\n%s",
                       fx->fa.url, cc != NULL && !cc->inline_data ? "certificate-authority"
                                                                  : "certificate-authority-data",
                       cc != NULL && !cc->inline_data ? "ca.crt" : ca,
                       user[0] ? user : "    {}\n");
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(cpath("kubeconfig"), yaml, (size_t)len, 0600, &err),
                     GV_OK);
    struct gv_kube_config *cfg = NULL;
    if (gv_kube_config_from_kubeconfig(cpath("kubeconfig"), NULL, &cfg, &err) != GV_OK)
        fail_msg("kubeconfig: %s\n%s", err.msg, yaml);
    kube_config_fast_retries(cfg);
    free(yaml);
    free(ca);
    return cfg;
}

/* The fake requires a client cert (--client-ca) and has a token it would
 * also accept: a kubeconfig with only a client certificate is let in as
 * that certificate's subject. */
static void test_kubeconfig_client_cert(void **state)
{
    const struct cert_case *cc = *state;
    NEED_CERTS();
    struct kube_fixture fx;
    const char *extra[] = {"--client-ca", cpath("ca.crt"), "--token", "s3cret", NULL};
    start_fake(&fx, "server", extra);
    struct gv_error err;
    if (get_nodes(&fx, load_kubeconfig(&fx, cc, NULL), &err) != GV_OK)
        fail_msg("%s: %s", cc->key, err.msg);
    char key[128];
    snprintf(key, sizeof(key), "X509 %s", cc->cn);
    assert_int_equal(kube_fake_count(&fx, key), 1);
    /* With a token as well, the token is still sent and checked. */
    assert_int_equal(get_nodes(&fx, load_kubeconfig(&fx, cc, "s3cret"), &err), GV_OK);
    assert_int_equal(get_nodes(&fx, load_kubeconfig(&fx, cc, "wrong"), &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 401"));
    assert_int_equal(kube_fake_count(&fx, key), 1);
    stop_fake(&fx);
}

/*
 * The fake refuses, in the TLS handshake, a connection without a client
 * certificate or with one from another CA.  The server's alert is final:
 * one connection each however many retries are allowed, and the message
 * names the alert (a TLS 1.3 client would see it on its first read
 * instead; mbedTLS 2.28 negotiates 1.2 either way).
 */
static void client_cert_refused(const char *tls_max)
{
    struct kube_fixture fx;
    const char *extra[] = {"--client-ca", cpath("ca.crt"), "--token", "s3cret",
                           tls_max ? "--tls-max-version" : NULL, tls_max, NULL};
    start_fake(&fx, "server", extra);
    struct gv_error err;
    struct gv_kube_config *cfg = load_kubeconfig(&fx, NULL, "s3cret");
    cfg->max_retries = 5; /* with a slow backoff a retry could not hide */
    cfg->backoff_initial_ms = cfg->backoff_max_ms = 1000;
    gv_status st = get_nodes(&fx, cfg, &err);
    print_message("# no client cert (TLS max %s): %s\n", tls_max ? tls_max : "1.3", err.msg);
    assert_int_equal(st, GV_EUNAVAILABLE);
    assert_non_null(strstr(err.msg, "GET /api/v1/nodes"));
    assert_non_null(strstr(err.msg, "refused the handshake with alert"));
    assert_int_equal(settled_connections(&fx, 1), 1);

    cfg = cfg_for(&fx, "127.0.0.1", "ca.crt");
    set_str(&cfg->client_cert_file, cpath("other-client.crt"));
    set_str(&cfg->client_key_file, cpath("other-client.key"));
    cfg->max_retries = 5;
    cfg->backoff_initial_ms = cfg->backoff_max_ms = 1000;
    st = get_nodes(&fx, cfg, &err);
    assert_non_null(strstr(err.msg, "unknown_ca"));
    print_message("# client cert of another CA (TLS max %s): %s\n", tls_max ? tls_max : "1.3",
                  err.msg);
    assert_int_equal(st, GV_EUNAVAILABLE);
    assert_int_equal(kube_fake_count(&fx, "GET /api/v1/nodes"), 0);
    assert_int_equal(settled_connections(&fx, 2), 2);
    assert_int_equal(kube_fake_count(&fx, "TLS handshake-failed"), 2);
    stop_fake(&fx);
}

/*
 * Broken client credentials are a configuration error found before any
 * connection: each names what is wrong, none is retried, and the server
 * never sees a handshake (a key that does not match its certificate would
 * otherwise fail there with a far less helpful alert).
 */
static void test_bad_client_credentials_refused_locally(void **state)
{
    (void)state;
    NEED_CERTS();
    struct kube_fixture fx;
    const char *extra[] = {"--client-ca", cpath("ca.crt"), NULL};
    start_fake(&fx, "server", extra);
    char *junk = NULL;
    if (asprintf(&junk, "%s", cpath("junk.pem")) < 0)
        fail();
    FILE *f = fopen(junk, "w");
    assert_non_null(f);
    fputs("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n", f);
    fclose(f);
    const struct {
        const char *cert, *key, *says;
    } cases[] = {
        {"client-rsa.crt", NULL, "client certificate was given without its key"},
        {NULL, "client-rsa.key", "client key was given without its certificate"},
        {"client-rsa.crt", "junk.pem", "cannot load the client key"},
        {"junk.pem", "client-rsa.key", "client certificate"},
        {"client-rsa.crt", "client-ec.key", "does not belong to the client certificate"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gv_kube_config *cfg = cfg_for(&fx, "127.0.0.1", "ca.crt");
        if (cases[i].cert != NULL)
            set_str(&cfg->client_cert_file, cpath(cases[i].cert));
        if (cases[i].key != NULL)
            set_str(&cfg->client_key_file, cpath(cases[i].key));
        cfg->max_retries = 5;
        cfg->backoff_initial_ms = cfg->backoff_max_ms = 1000;
        struct gv_error err;
        gv_error_clear(&err);
        gv_status st = get_nodes(&fx, cfg, &err);
        print_message("# %s + %s: %s\n", cases[i].cert ? cases[i].cert : "-",
                      cases[i].key ? cases[i].key : "-", err.msg);
        assert_int_not_equal(st, GV_OK);
        if (strstr(err.msg, cases[i].says) == NULL)
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.msg, cases[i].says);
    }
    assert_int_equal(settled_connections(&fx, 0), 0);
    assert_int_equal(kube_fake_count(&fx, "GET /api/v1/nodes"), 0);
    free(junk);
    stop_fake(&fx);
}

static void test_client_cert_required(void **state)
{
    (void)state;
    NEED_CERTS();
    client_cert_refused(NULL);
    client_cert_refused("1.2");
}

/* TLS 1.2 only (what a TLS-1.2 client negotiates with any server): client
 * certificates of both key types, in-memory, and a watch. */
static void test_tls12_client_cert_and_watch(void **state)
{
    (void)state;
    NEED_CERTS();
    struct kube_fixture fx;
    const char *extra[] = {"--client-ca", cpath("ca.crt"), "--tls-max-version", "1.2", NULL};
    start_fake(&fx, "server", extra);
    struct gv_error err;
    const char *pairs[][2] = {{"client-rsa.crt", "client-rsa.key"},
                              {"client-ec.crt", "client-ec.key"}};
    for (size_t i = 0; i < 2; i++) {
        struct gv_kube_config *cfg = cfg_for(&fx, "127.0.0.1", NULL);
        cfg->ca_data = read_text("ca.crt");
        cfg->client_cert_data = read_text(pairs[i][0]);
        cfg->client_key_data = read_text(pairs[i][1]);
        if (get_nodes(&fx, cfg, &err) != GV_OK)
            fail_msg("%s: %s", pairs[i][1], err.msg);
    }
    json_decref(kube_create_node(fx.client, "n1", NULL, NULL));
    struct watch_seen w = {.c = fx.client, .n = 1}; /* n = 1: no create */
    struct gv_kube_watch_opts wo = {.timeout_seconds = 10};
    assert_int_equal(gv_kube_watch(fx.client, "/api/v1/nodes", &wo, on_event, &w, NULL, &err),
                     GV_OK);
    assert_int_equal(w.n, 2);
    assert_string_equal(w.type[1], "ADDED");
    assert_string_equal(w.name[1], "n1");
    assert_int_equal(kube_fake_count(&fx, "TLS TLSv1.3"), 0);
    assert_true(kube_fake_count(&fx, "TLS TLSv1.2") >= 2);
    assert_int_equal(kube_fake_count(&fx, "X509 system:node:node1"), 1);
    assert_true(kube_fake_count(&fx, "X509 system:node:node2") >= 3);
    stop_fake(&fx);
}

static void test_bearer_token_over_tls(void **state)
{
    (void)state;
    NEED_CERTS();
    struct kube_fixture fx;
    const char *extra[] = {"--token", "s3cret", NULL};
    start_fake(&fx, "server", extra);
    struct gv_error err;
    struct gv_kube_config *cfg = cfg_for(&fx, "127.0.0.1", "ca.crt");
    set_str(&cfg->token, "s3cret");
    assert_int_equal(get_nodes(&fx, cfg, &err), GV_OK);
    const char *bad[] = {"wrong", NULL};
    for (size_t i = 0; i < 2; i++) {
        cfg = cfg_for(&fx, "127.0.0.1", "ca.crt");
        set_str(&cfg->token, bad[i]);
        assert_int_equal(get_nodes(&fx, cfg, &err), GV_EIO);
        assert_non_null(strstr(err.msg, "HTTP 401"));
    }
    assert_int_equal(kube_fake_count(&fx, "GET /api/v1/nodes"), 3);
    stop_fake(&fx);
}

static int group_setup(void **state)
{
    (void)state;
    const char *base = getenv("GV_TEST_TMP");
    snprintf(scratch, sizeof(scratch), "%s/kubetls.XXXXXX", base != NULL ? base : "/tmp");
    if (mkdtemp(scratch) == NULL)
        return -1;
    const char *src = getenv("GV_SRCDIR");
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "sh '%s/tests/fakes/apiserver/gen_test_certs.sh' '%s'",
             src != NULL ? src : ".", scratch);
    int rc = system(cmd);
    if (rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 2) {
        print_message("# SKIP openssl CLI not found: no certificates to test TLS with\n");
        return 0;
    }
    if (rc != 0)
        return -1;
    have_certs = true;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
    return system(cmd) == 0 ? 0 : -1;
}

#define SERVER_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup_server, teardown_server)
#define CERT_CASE(c)                                                                               \
    {"test_kubeconfig_client_cert_" #c, test_kubeconfig_client_cert, NULL, NULL, (void *)&c}

int main(void)
{
    const struct CMUnitTest tests[] = {
        SERVER_TEST(test_ip_san_get_list_patch_watch),
        SERVER_TEST(test_dns_san_localhost),
        SERVER_TEST(test_ca_data_and_bundle),
        SERVER_TEST(test_wrong_ca_fails_at_once),
        cmocka_unit_test(test_san_mismatch),
        SERVER_TEST(test_keepalive_reuses_connection),
        CERT_CASE(rsa_data),
        CERT_CASE(rsa_file),
        CERT_CASE(ec_sec1_data),
        CERT_CASE(ec_pkcs8_file),
        cmocka_unit_test(test_bad_client_credentials_refused_locally),
        cmocka_unit_test(test_client_cert_required),
        cmocka_unit_test(test_tls12_client_cert_and_watch),
        cmocka_unit_test(test_bearer_token_over_tls),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
