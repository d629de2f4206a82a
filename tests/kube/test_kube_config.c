/*
 * Client configuration: kubeconfig parsing (contexts, token, client
 * certificates by path and inline, errors), in-cluster service-account
 * config, the resolution order, and TLS end to end against fake_apiserver
 * serving HTTPS with certificates made here by the openssl CLI.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/gv_file.h"
#include "kube_testlib.h"

static char tmpdir[512];

static void write_file(const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    struct gv_error err;
    assert_int_equal(gv_file_write_atomic(path, text, strlen(text), 0600, &err), GV_OK);
}

static char *tpath(const char *name)
{
    static char buf[4][1024];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", tmpdir, name);
    return buf[i];
}

static const char kubeconfig[] =
    "apiVersion: v1\n"
    "kind: Config\n"
    "current-context: dev\n"
    "clusters:\n"
    "- name: local\n"
    "  cluster:\n"
    "    server: https://127.0.0.1:6443\n"
    "    certificate-authority: certs/ca.crt\n"
    "- name: insecure\n"
    "  cluster:\n"
    "    server: https://10.0.0.1\n"
    "    insecure-skip-tls-verify: true\n"
    "    certificate-authority-data: LS0tLS1CRUdJTiBDQS0tLS0tCg==\n"
    "contexts:\n"
    "- name: dev\n"
    "  context: {cluster: local, user: me, namespace: team}\n"
    "- name: other\n"
    "  context:\n"
    "    cluster: insecure\n"
    "    user: tok\n"
    "- name: plugin\n"
    "  context: {cluster: local, user: exec-user}\n"
    "- name: halfcert\n"
    "  context: {cluster: local, user: half}\n"
    "- name: nouser\n"
    "  context: {cluster: local, user: ghost}\n"
    "users:\n"
    "- name: me\n"
    "  user:\n"
    "    client-certificate: /abs/client.crt\n"
    "    client-key: client.key\n"
    "- name: tok\n"
    "  user:\n"
    "    token: s3cret\n"
    "    client-certificate-data: Q0VSVA==\n"
    "    client-key-data: S0VZ\n"
    "- name: exec-user\n"
    "  user:\n"
    "    exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}\n"
    "- name: half\n"
    "  user: {client-certificate: c.crt}\n";

static void test_kubeconfig_current_context(void **state)
{
    (void)state;
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_config_parse_kubeconfig(kubeconfig, strlen(kubeconfig), "/home/u/.kube",
                                                     NULL, &cfg, &err),
                     GV_OK);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    /* Relative paths resolve against the kubeconfig's directory. */
    assert_string_equal(cfg->ca_file, "/home/u/.kube/certs/ca.crt");
    assert_string_equal(cfg->client_cert_file, "/abs/client.crt");
    assert_string_equal(cfg->client_key_file, "/home/u/.kube/client.key");
    assert_string_equal(cfg->namespace_, "team");
    assert_null(cfg->token);
    assert_false(cfg->insecure_skip_tls_verify);
    assert_int_equal(cfg->max_retries, 5);
    gv_kube_config_free(cfg);
}

static void test_kubeconfig_named_context_inline_data(void **state)
{
    (void)state;
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_config_parse_kubeconfig(kubeconfig, strlen(kubeconfig), NULL,
                                                     "other", &cfg, &err),
                     GV_OK);
    assert_string_equal(cfg->server, "https://10.0.0.1");
    assert_true(cfg->insecure_skip_tls_verify);
    assert_string_equal(cfg->ca_data, "-----BEGIN CA-----\n");
    assert_string_equal(cfg->client_cert_data, "CERT");
    assert_string_equal(cfg->client_key_data, "KEY");
    assert_string_equal(cfg->token, "s3cret");
    assert_null(cfg->namespace_);
    gv_kube_config_free(cfg);
}

static void expect_error(const char *text, const char *context, gv_status code,
                         const char *needle)
{
    struct gv_kube_config *cfg = (struct gv_kube_config *)1;
    struct gv_error err;
    assert_int_equal(gv_kube_config_parse_kubeconfig(text, strlen(text), "/d", context, &cfg, &err),
                     code);
    assert_null(cfg);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" does not mention \"%s\"", err.msg, needle);
}

static void test_kubeconfig_errors(void **state)
{
    (void)state;
    expect_error(kubeconfig, "missing", GV_ENOTFOUND, "context \"missing\" not found");
    expect_error(kubeconfig, "plugin", GV_EUNSUPPORTED, "exec/auth-provider");
    expect_error(kubeconfig, "halfcert", GV_EINVAL, "client certificate without its key");
    expect_error(kubeconfig, "nouser", GV_ENOTFOUND, "user \"ghost\" not found");
    expect_error("a: [1, 2\nb: c\n", NULL, GV_EPARSE, "line");
    expect_error("- just\n- a list\n", NULL, GV_EPARSE, "not a mapping");
    expect_error("kind: Config\n", NULL, GV_EINVAL, "no current-context");
    expect_error("current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n"
                 "clusters:\n- name: c\n  cluster: {server: ftp://h}\n",
                 NULL, GV_EINVAL, "http:// or https://");
    expect_error("current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n"
                 "clusters:\n- name: c\n  cluster: {server: https://h, "
                 "certificate-authority-data: '@@@'}\n",
                 NULL, GV_EPARSE, "certificate-authority-data");
    expect_error("current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n"
                 "clusters:\n- name: c\n  cluster: {insecure-skip-tls-verify: true}\n",
                 NULL, GV_EINVAL, "has no server");
    expect_error("", NULL, GV_EPARSE, "empty document");
    /* Alias expansion ("billion laughs") is bounded, not exponential. */
    expect_error("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                 "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                 "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                 "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                 "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                 "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                 "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
                 NULL, GV_EPARSE, "too many nodes");
}

static void test_kubeconfig_file_and_load_order(void **state)
{
    (void)state;
    write_file("kubeconfig", kubeconfig);
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    unsetenv("KUBERNETES_SERVICE_HOST");
    setenv("KUBECONFIG", tpath("kubeconfig"), 1);
    assert_int_equal(gv_kube_config_load(NULL, NULL, &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    char want[1100];
    snprintf(want, sizeof(want), "%s/certs/ca.crt", tmpdir);
    assert_string_equal(cfg->ca_file, want);
    gv_kube_config_free(cfg);
    /* An explicit URL wins over everything. */
    assert_int_equal(gv_kube_config_load("http://127.0.0.1:1", NULL, &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "http://127.0.0.1:1");
    gv_kube_config_free(cfg);
    /* A missing file names its path. */
    assert_int_not_equal(gv_kube_config_from_kubeconfig(tpath("nope"), NULL, &cfg, &err), GV_OK);
    assert_non_null(strstr(err.msg, "nope"));
    unsetenv("KUBECONFIG");
}

static void test_in_cluster(void **state)
{
    (void)state;
    char sa[1024];
    snprintf(sa, sizeof(sa), "%s/sa", tmpdir);
    mkdir(sa, 0700);
    write_file("sa/token", "eyJhbGciOi.token\n");
    write_file("sa/ca.crt", "-----BEGIN CERTIFICATE-----\n");
    write_file("sa/namespace", "gpuvisor-system");
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_config_in_cluster(sa, &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "https://10.96.0.1:443");
    assert_string_equal(cfg->token, "eyJhbGciOi.token");
    assert_string_equal(cfg->token_file, tpath("sa/token"));
    assert_string_equal(cfg->ca_file, tpath("sa/ca.crt"));
    assert_string_equal(cfg->namespace_, "gpuvisor-system");
    gv_kube_config_free(cfg);

    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    assert_int_equal(gv_kube_config_in_cluster(sa, &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "https://[fd00::1]:443");
    gv_kube_config_free(cfg);

    setenv("KUBERNETES_SERVICE_PORT", "https", 1);
    assert_int_equal(gv_kube_config_in_cluster(sa, &cfg, &err), GV_EINVAL);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);

    char empty[1024];
    snprintf(empty, sizeof(empty), "%s/empty", tmpdir);
    mkdir(empty, 0700);
    assert_int_not_equal(gv_kube_config_in_cluster(empty, &cfg, &err), GV_OK);
    assert_null(cfg);
    assert_non_null(strstr(err.msg, "token"));

    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(gv_kube_config_in_cluster(sa, &cfg, &err), GV_ENOTFOUND);
    assert_non_null(strstr(err.msg, "KUBERNETES_SERVICE_HOST"));
}

/* ---- TLS end to end */

static bool have_certs;

static int run(const char *cmd)
{
    char full[4096];
    snprintf(full, sizeof(full), "cd '%s' && %s >/dev/null 2>&1", tmpdir, cmd);
    return system(full);
}

static void make_certs(void)
{
    if (run("command -v openssl") != 0)
        return;
    have_certs =
        run("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 "
            "-subj /CN=test-ca") == 0 &&
        run("openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
            "-subj /CN=127.0.0.1") == 0 &&
        run("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && "
            "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
            "-out server.crt -days 2 -extfile san.ext") == 0 &&
        run("openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr "
            "-subj /CN=gpuvisor-scheduler") == 0 &&
        run("openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
            "-out client.crt -days 2") == 0;
}

static char *b64_file(const char *name)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "base64 -w0 '%s/%s'", tmpdir, name);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char buf[4][16384];
    static int i;
    i = (i + 1) % 4;
    size_t n = fread(buf[i], 1, sizeof(buf[i]) - 1, p);
    buf[i][n] = '\0';
    pclose(p);
    return buf[i];
}

static struct gv_kube_client *client_from(const char *yaml, const char *context)
{
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    if (gv_kube_config_parse_kubeconfig(yaml, strlen(yaml), tmpdir, context, &cfg, &err) != GV_OK)
        fail_msg("kubeconfig: %s", err.msg);
    cfg->max_retries = 0;
    struct gv_kube_client *c = NULL;
    assert_int_equal(gv_kube_client_new(cfg, &c, &err), GV_OK);
    gv_kube_config_free(cfg);
    return c;
}

static void test_tls_client_cert_with_fake_apiserver(void **state)
{
    (void)state;
    if (!have_certs)
        skip();
    char ca[1024], crt[1024], key[1024];
    snprintf(ca, sizeof(ca), "%s", tpath("ca.crt"));
    snprintf(crt, sizeof(crt), "%s", tpath("server.crt"));
    snprintf(key, sizeof(key), "%s", tpath("server.key"));
    const char *args[] = {"--tls-cert", crt, "--tls-key", key, "--client-ca", ca,
                          "--token", "s3cret", NULL};
    struct fake_apiserver fa;
    assert_int_equal(fake_apiserver_start(&fa, args), 0);
    assert_memory_equal(fa.url, "https://", 8);

    static char yaml[65536];
    snprintf(yaml, sizeof(yaml),
             "current-context: files\n"
             "clusters:\n"
             "- name: c\n  cluster: {server: '%s', certificate-authority: ca.crt}\n"
             "- name: inline\n  cluster: {server: '%s', certificate-authority-data: %s}\n"
             "contexts:\n"
             "- name: files\n  context: {cluster: c, user: files}\n"
             "- name: inline\n  context: {cluster: inline, user: inline}\n"
             "- name: nocert\n  context: {cluster: c, user: nocert}\n"
             "- name: badtoken\n  context: {cluster: c, user: badtoken}\n"
             "users:\n"
             "- name: files\n  user: {token: s3cret, client-certificate: client.crt, "
             "client-key: client.key}\n"
             "- name: inline\n  user: {token: s3cret, client-certificate-data: %s, "
             "client-key-data: %s}\n"
             "- name: nocert\n  user: {token: s3cret}\n"
             "- name: badtoken\n  user: {token: wrong, client-certificate: client.crt, "
             "client-key: client.key}\n",
             fa.url, fa.url, b64_file("ca.crt"), b64_file("client.crt"), b64_file("client.key"));

    struct gv_error err;
    json_t *out = NULL;
    /* Certificates and CA by path. */
    struct gv_kube_client *c = client_from(yaml, "files");
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &out, &err), GV_OK);
    json_decref(out);
    gv_kube_client_free(c);
    /* Inline *-data: the same, from memory. */
    c = client_from(yaml, "inline");
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &out, &err), GV_OK);
    json_decref(out);
    gv_kube_client_free(c);
    /* The server requires a client certificate. */
    c = client_from(yaml, "nocert");
    assert_int_not_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &out, &err), GV_OK);
    assert_null(out);
    gv_kube_client_free(c);
    /* Wrong bearer token → 401 with the API's message. */
    c = client_from(yaml, "badtoken");
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &out, &err), GV_EIO);
    assert_non_null(strstr(err.msg, "HTTP 401"));
    gv_kube_client_free(c);
    fake_apiserver_stop(&fa);
}

static void test_tls_wrong_ca_with_fake_apiserver(void **state)
{
    (void)state;
    if (!have_certs)
        skip();
    const char *args[] = {"--tls-cert", NULL, "--tls-key", NULL, NULL};
    char crt[1024], key[1024];
    snprintf(crt, sizeof(crt), "%s", tpath("server.crt"));
    snprintf(key, sizeof(key), "%s", tpath("server.key"));
    args[1] = crt;
    args[3] = key;
    struct fake_apiserver fa;
    assert_int_equal(fake_apiserver_start(&fa, args), 0);
    /* The server's certificate is checked: the client's own cert is not a CA for it. */
    static char yaml[4096];
    snprintf(yaml, sizeof(yaml),
             "current-context: x\n"
             "clusters:\n- name: c\n  cluster: {server: '%s', certificate-authority: client.crt}\n"
             "- name: skip\n  cluster: {server: '%s', insecure-skip-tls-verify: true}\n"
             "contexts:\n- name: x\n  context: {cluster: c}\n"
             "- name: skip\n  context: {cluster: skip}\n",
             fa.url, fa.url);
    struct gv_error err;
    json_t *out = NULL;
    struct gv_kube_client *c = client_from(yaml, "x");
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &out, &err), GV_EUNAVAILABLE);
    assert_non_null(strstr(err.msg, "GET /api/v1/nodes"));
    gv_kube_client_free(c);
    c = client_from(yaml, "skip");
    assert_int_equal(gv_kube_list(c, "/api/v1/nodes", NULL, &out, &err), GV_OK);
    json_decref(out);
    gv_kube_client_free(c);
    fake_apiserver_stop(&fa);
}

static int group_setup(void **state)
{
    (void)state;
    const char *base = getenv("GV_TEST_TMP");
    snprintf(tmpdir, sizeof(tmpdir), "%s/kubecfg.XXXXXX", base != NULL ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    make_certs();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kubeconfig_current_context),
        cmocka_unit_test(test_kubeconfig_named_context_inline_data),
        cmocka_unit_test(test_kubeconfig_errors),
        cmocka_unit_test(test_kubeconfig_file_and_load_order),
        cmocka_unit_test(test_in_cluster),
        cmocka_unit_test(test_tls_client_cert_with_fake_apiserver),
        cmocka_unit_test(test_tls_wrong_ca_with_fake_apiserver),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
