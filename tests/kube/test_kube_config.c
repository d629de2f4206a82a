/*
 * Client configuration: kubeconfig parsing (contexts, token, client
 * certificates by path and inline, errors), in-cluster service-account
 * config and the resolution order.  What the client does with the
 * certificates and tokens over TLS is test_kube_tls_with_fake_apiserver.
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

/* A relative tokenFile resolves against the kubeconfig's directory; an
 * empty string is no value (kubectl's reading): token "" leaves no token,
 * so the token file is what authenticates. */
static void test_kubeconfig_token_file_and_empty_fields(void **state)
{
    (void)state;
    static const char text[] = "current-context: x\n"
                               "contexts:\n- name: x\n  context: {cluster: c, user: u, namespace: ''}\n"
                               "clusters:\n- name: c\n  cluster: {server: https://h:6443, "
                               "certificate-authority: ''}\n"
                               "users:\n- name: u\n  user: {token: '', tokenFile: secrets/token}\n";
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    assert_int_equal(gv_kube_config_parse_kubeconfig(text, strlen(text), "/etc/kube", NULL, &cfg,
                                                     &err),
                     GV_OK);
    assert_null(cfg->token);
    assert_string_equal(cfg->token_file, "/etc/kube/secrets/token");
    assert_null(cfg->namespace_);
    assert_null(cfg->ca_file);
    gv_kube_config_free(cfg);
}

static void test_kubeconfig_shapes_and_data(void **state)
{
    (void)state;
    /* a NUL (YAML's "\0" escape) in a value or a key: refused, not cut short */
    expect_error("current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n"
                 "clusters:\n- name: c\n  cluster: {server: \"https://good\\0.evil\"}\n",
                 NULL, GV_EPARSE, "NUL character");
    expect_error("\"current-context\\0\": x\n", NULL, GV_EPARSE, "NUL character");
    /* a mapping key that is itself a sequence: refused, not read as text */
    expect_error("? [a, b]\n: c\n", NULL, GV_EPARSE, "mapping key is not a scalar");
    /* base64 fields: a length that is no multiple of 4, and each user field
     * naming itself (a bad certificate must not read as "no certificate") */
    static const char head[] = "current-context: x\ncontexts:\n- name: x\n"
                               "  context: {cluster: c, user: u}\n"
                               "clusters:\n- name: c\n  cluster: {server: https://h}\n"
                               "users:\n- name: u\n  user: ";
    char text[512];
    snprintf(text, sizeof(text), "%s{client-certificate-data: '@@@@', client-key-data: S0VZ}\n",
             head);
    expect_error(text, NULL, GV_EPARSE, "client-certificate-data: invalid base64");
    snprintf(text, sizeof(text), "%s{client-certificate-data: Q0VSVA==, client-key-data: '@@@@'}\n",
             head);
    expect_error(text, NULL, GV_EPARSE, "client-key-data: invalid base64");
    snprintf(text, sizeof(text), "%s{client-certificate-data: Q0VSV, client-key-data: S0VZ}\n",
             head);
    expect_error(text, NULL, GV_EPARSE, "invalid base64 (length 5)");
}

/* Where gv_kube_config_load looks: KUBECONFIG's first file, then
 * $HOME/.kube/config; in a pod (KUBERNETES_SERVICE_HOST) the service
 * account unless a file is named; errors name the file. */
static void test_kubeconfig_load_env(void **state)
{
    (void)state;
    write_file("first.yaml", kubeconfig);
    write_file("bad.yaml", "- a list\n");
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    unsetenv("KUBERNETES_SERVICE_HOST");
    char list[2200];
    snprintf(list, sizeof(list), "%s:%s", tpath("first.yaml"), tpath("bad.yaml"));
    setenv("KUBECONFIG", list, 1);
    assert_int_equal(gv_kube_config_load(NULL, NULL, &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    gv_kube_config_free(cfg);
    /* the error of a bad file names it */
    setenv("KUBECONFIG", tpath("bad.yaml"), 1);
    assert_int_equal(gv_kube_config_load(NULL, NULL, &cfg, &err), GV_EPARSE);
    assert_null(cfg);
    assert_non_null(strstr(err.msg, "bad.yaml"));
    assert_non_null(strstr(err.msg, "not a mapping"));
    /* no KUBECONFIG (unset or empty): $HOME/.kube/config */
    char kdir[1100];
    snprintf(kdir, sizeof(kdir), "%s/home/.kube", tmpdir);
    char home[1100];
    snprintf(home, sizeof(home), "%s/home", tmpdir);
    mkdir(home, 0700);
    mkdir(kdir, 0700);
    write_file("home/.kube/config", kubeconfig);
    const char *saved = getenv("HOME");
    char *saved_home = saved != NULL ? strdup(saved) : NULL;
    setenv("HOME", home, 1);
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            unsetenv("KUBECONFIG");
        else
            setenv("KUBECONFIG", "", 1);
        assert_int_equal(gv_kube_config_load(NULL, NULL, &cfg, &err), GV_OK);
        char want[1200];
        snprintf(want, sizeof(want), "%s/certs/ca.crt", kdir);
        assert_string_equal(cfg->ca_file, want);
        gv_kube_config_free(cfg);
    }
    unsetenv("KUBECONFIG");
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            unsetenv("HOME");
        else
            setenv("HOME", "", 1);
        assert_int_equal(gv_kube_config_load(NULL, NULL, &cfg, &err), GV_ENOTFOUND);
        assert_non_null(strstr(err.msg, "no HOME"));
    }
    /* in a pod: the service account (here or not, the in-cluster reading),
     * unless a kubeconfig is named */
    setenv("KUBERNETES_SERVICE_HOST", "10.255.255.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    gv_status st = gv_kube_config_load(NULL, NULL, &cfg, &err);
    if (st == GV_OK) {
        assert_string_equal(cfg->server, "https://10.255.255.1:443");
        gv_kube_config_free(cfg);
    } else {
        assert_non_null(strstr(err.msg, "in-cluster config"));
    }
    assert_int_equal(gv_kube_config_load(NULL, tpath("first.yaml"), &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    gv_kube_config_free(cfg);
    setenv("KUBERNETES_SERVICE_HOST", "", 1);
    setenv("HOME", home, 1);
    assert_int_equal(gv_kube_config_load(NULL, NULL, &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    gv_kube_config_free(cfg);
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    if (saved_home != NULL)
        setenv("HOME", saved_home, 1);
    else
        unsetenv("HOME");
    free(saved_home);
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
    assert_non_null(strstr(err.msg, "\"https\" is not a port"));
    /* every digit is a digit (0 and 9 too); no port, or an empty one, is 443 */
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "9090", 1);
    assert_int_equal(gv_kube_config_in_cluster(sa, &cfg, &err), GV_OK);
    assert_string_equal(cfg->server, "https://10.96.0.1:9090");
    gv_kube_config_free(cfg);
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            unsetenv("KUBERNETES_SERVICE_PORT");
        else
            setenv("KUBERNETES_SERVICE_PORT", "", 1);
        assert_int_equal(gv_kube_config_in_cluster(sa, &cfg, &err), GV_OK);
        assert_string_equal(cfg->server, "https://10.96.0.1:443");
        gv_kube_config_free(cfg);
    }
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

static int group_setup(void **state)
{
    (void)state;
    const char *base = getenv("GV_TEST_TMP");
    snprintf(tmpdir, sizeof(tmpdir), "%s/kubecfg.XXXXXX", base != NULL ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
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
        cmocka_unit_test(test_kubeconfig_token_file_and_empty_fields),
        cmocka_unit_test(test_kubeconfig_shapes_and_data),
        cmocka_unit_test(test_kubeconfig_load_env),
        cmocka_unit_test(test_in_cluster),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
