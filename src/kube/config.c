/*
 * Where the client finds the API server and its credentials: an explicit
 * URL (tests, --kube-url), the in-cluster service account, or a kubeconfig
 * file.  Kubeconfig is YAML; libyaml loads it into a node graph that we
 * convert to a jansson tree (maps, sequences, string scalars) so the lookup
 * code is plain JSON navigation.  The conversion bounds depth and node count
 * because aliases can make a small file expand exponentially.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include <mbedtls/base64.h>

#include "common/gv_file.h"
#include "kube/gv_kube.h"

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define YAML_MAX_DEPTH 64
#define YAML_MAX_NODES 200000

static struct gv_kube_config *config_alloc(void)
{
    struct gv_kube_config *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL)
        return NULL;
    cfg->timeout_ms = 30000;
    cfg->connect_timeout_ms = 5000;
    cfg->max_retries = 5;
    cfg->backoff_initial_ms = 200;
    cfg->backoff_max_ms = 5000;
    return cfg;
}

void gv_kube_config_free(struct gv_kube_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->server);
    free(cfg->token);
    free(cfg->token_file);
    free(cfg->ca_file);
    free(cfg->ca_data);
    free(cfg->client_cert_file);
    free(cfg->client_cert_data);
    free(cfg->client_key_file);
    free(cfg->client_key_data);
    free(cfg->unix_socket);
    free(cfg->namespace_);
    free(cfg);
}

gv_status gv_kube_config_from_url(const char *url, struct gv_kube_config **out,
                                  struct gv_error *err)
{
    *out = NULL;
    if (url == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0))
        return gv_error_set(err, GV_EINVAL, "kube url \"%s\": must start with http:// or https://",
                            url != NULL ? url : "(null)");
    struct gv_kube_config *cfg = config_alloc();
    if (cfg == NULL || (cfg->server = strdup(url)) == NULL) {
        gv_kube_config_free(cfg);
        return gv_error_set(err, GV_ENOMEM, "kube config: out of memory");
    }
    *out = cfg;
    return GV_OK;
}

static bool file_exists(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    fclose(f);
    return true;
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Reads a small text file, strips trailing whitespace. */
static gv_status read_trimmed(const char *path, char **out, struct gv_error *err)
{
    size_t len = 0;
    gv_status st = gv_file_read_all(path, out, &len, err);
    if (st != GV_OK)
        return st;
    while (len > 0 && ((*out)[len - 1] == '\n' || (*out)[len - 1] == '\r' ||
                       (*out)[len - 1] == ' ' || (*out)[len - 1] == '\t'))
        (*out)[--len] = '\0';
    return GV_OK;
}

gv_status gv_kube_config_in_cluster(const char *dir, struct gv_kube_config **out,
                                    struct gv_error *err)
{
    *out = NULL;
    if (dir == NULL)
        dir = DEFAULT_SA_DIR;
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (host == NULL || host[0] == '\0')
        return gv_error_set(err, GV_ENOTFOUND,
                            "in-cluster config: KUBERNETES_SERVICE_HOST is not set "
                            "(not running in a pod?)");
    if (port == NULL || port[0] == '\0')
        port = "443";
    for (const char *p = port; *p; p++)
        if (*p < '0' || *p > '9')
            return gv_error_set(err, GV_EINVAL,
                                "in-cluster config: KUBERNETES_SERVICE_PORT \"%s\" is not a port",
                                port);
    gv_status st = GV_ENOMEM;
    struct gv_kube_config *cfg = config_alloc();
    char *ns_path = NULL;
    if (cfg == NULL)
        goto fail;
    size_t n = strlen(host) + strlen(port) + 16;
    if ((cfg->server = malloc(n)) == NULL)
        goto fail;
    /* An IPv6 service address needs brackets in a URL. */
    snprintf(cfg->server, n, strchr(host, ':') != NULL ? "https://[%s]:%s" : "https://%s:%s",
             host, port);
    if ((cfg->token_file = path_join(dir, "token")) == NULL ||
        (cfg->ca_file = path_join(dir, "ca.crt")) == NULL ||
        (ns_path = path_join(dir, "namespace")) == NULL)
        goto fail;
    /* Fail now, with the path, rather than on the first request. */
    st = read_trimmed(cfg->token_file, &cfg->token, err);
    if (st != GV_OK) {
        gv_error_prefix(err, "in-cluster config: service-account token");
        goto fail;
    }
    if (!file_exists(cfg->ca_file)) {
        st = gv_error_set(err, GV_ENOTFOUND, "in-cluster config: CA bundle %s not found",
                          cfg->ca_file);
        goto fail;
    }
    if (file_exists(ns_path)) {
        st = read_trimmed(ns_path, &cfg->namespace_, err);
        if (st != GV_OK)
            goto fail;
    }
    free(ns_path);
    *out = cfg;
    return GV_OK;
fail:
    if (st == GV_ENOMEM)
        gv_error_set(err, GV_ENOMEM, "in-cluster config: out of memory");
    free(ns_path);
    gv_kube_config_free(cfg);
    return st;
}

/* ------------------------------------------------------------------------
 * YAML → jansson
 */

struct yconv {
    yaml_document_t *doc;
    size_t nodes;
};

static json_t *yaml_to_json(struct yconv *y, yaml_node_t *node, int depth, const char **why)
{
    if (node == NULL) {
        *why = "dangling node";
        return NULL;
    }
    if (depth > YAML_MAX_DEPTH) {
        *why = "nested too deeply";
        return NULL;
    }
    if (++y->nodes > YAML_MAX_NODES) {
        *why = "too many nodes (alias expansion?)";
        return NULL;
    }
    switch (node->type) {
    case YAML_SCALAR_NODE: {
        /* "\0" is a valid YAML escape; C strings would end there and read
         * "https://a\0.b" as "https://a" (and two keys as one) */
        if (memchr(node->data.scalar.value, '\0', node->data.scalar.length) != NULL) {
            *why = "scalar holds a NUL character";
            return NULL;
        }
        json_t *s = json_stringn((const char *)node->data.scalar.value, node->data.scalar.length);
        if (s == NULL)
            *why = "scalar is not valid UTF-8";
        return s;
    }
    case YAML_SEQUENCE_NODE: {
        json_t *a = json_array();
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             a != NULL && it < node->data.sequence.items.top; it++) {
            json_t *v = yaml_to_json(y, yaml_document_get_node(y->doc, *it), depth + 1, why);
            if (v == NULL || json_array_append_new(a, v) != 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case YAML_MAPPING_NODE: {
        json_t *o = json_object();
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
             o != NULL && p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(y->doc, p->key);
            if (k == NULL || k->type != YAML_SCALAR_NODE) {
                *why = "mapping key is not a scalar";
                json_decref(o);
                return NULL;
            }
            if (memchr(k->data.scalar.value, '\0', k->data.scalar.length) != NULL) {
                *why = "mapping key holds a NUL character";
                json_decref(o);
                return NULL;
            }
            json_t *v = yaml_to_json(y, yaml_document_get_node(y->doc, p->value), depth + 1, why);
            if (v == NULL) {
                json_decref(o);
                return NULL;
            }
            char *key = strndup((const char *)k->data.scalar.value, k->data.scalar.length);
            if (key == NULL || json_object_set_new(o, key, v) != 0) {
                if (key != NULL && *why == NULL)
                    *why = "mapping key is not valid UTF-8";
                free(key);
                json_decref(o);
                return NULL;
            }
            free(key);
        }
        return o;
    }
    default:
        *why = "empty node";
        return NULL;
    }
}

static gv_status load_yaml(const char *text, size_t len, const char *name, json_t **out,
                           struct gv_error *err)
{
    *out = NULL;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return gv_error_set(err, GV_ENOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        gv_status st = gv_error_set(err, GV_EPARSE, "%s: line %zu column %zu: %s", name,
                                    parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                                    parser.problem != NULL ? parser.problem : "invalid YAML");
        yaml_parser_delete(&parser);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    gv_status st = GV_OK;
    if (root == NULL) {
        st = gv_error_set(err, GV_EPARSE, "%s: empty document", name);
    } else {
        struct yconv y = {&doc, 0};
        const char *why = NULL;
        *out = yaml_to_json(&y, root, 0, &why);
        if (*out == NULL)
            st = gv_error_set(err, GV_EPARSE, "%s: %s", name, why != NULL ? why : "out of memory");
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return st;
}

gv_status gv_kube_yaml_load(const char *text, size_t len, const char *name, json_t **out,
                            struct gv_error *err)
{
    return load_yaml(text, len, name, out, err);
}

/* ------------------------------------------------------------------------
 * Kubeconfig
 */

/* Entry of a named list ("clusters", "contexts", "users") by name → its
 * inner object (key inner). */
static json_t *named_entry(json_t *root, const char *list, const char *name, const char *inner)
{
    json_t *arr = json_object_get(root, list);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n != NULL && strcmp(n, name) == 0) {
            json_t *v = json_object_get(e, inner);
            return json_is_object(v) ? v : NULL;
        }
    }
    return NULL;
}

static const char *str_field(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL && s[0] != '\0' ? s : NULL;
}

static bool yaml_true(const char *s)
{
    return s != NULL && (strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0 ||
                         strcasecmp(s, "on") == 0);
}

/* Decodes base64 (the kubeconfig *-data fields) to a NUL-terminated string. */
static gv_status b64_decode(const char *field, const char *in, char **out, struct gv_error *err)
{
    size_t n = strlen(in);
    if (n % 4 != 0)
        return gv_error_set(err, GV_EPARSE, "kubeconfig %s: invalid base64 (length %zu)", field,
                            n);
    size_t len = 0;
    char *buf = malloc(n / 4 * 3 + 1);
    if (buf == NULL)
        return gv_error_set(err, GV_ENOMEM, "kubeconfig %s: out of memory", field);
    if (mbedtls_base64_decode((unsigned char *)buf, n / 4 * 3 + 1, &len,
                              (const unsigned char *)in, n) != 0) {
        free(buf);
        return gv_error_set(err, GV_EPARSE, "kubeconfig %s: invalid base64", field);
    }
    if (memchr(buf, '\0', len) != NULL) {
        free(buf);
        return gv_error_set(err, GV_EPARSE, "kubeconfig %s: decoded data is not PEM text", field);
    }
    buf[len] = '\0';
    *out = buf;
    return GV_OK;
}

/* Path from the kubeconfig, made absolute against base_dir. */
static gv_status resolve_path(const char *base_dir, const char *p, char **out,
                              struct gv_error *err)
{
    *out = p[0] == '/' || base_dir == NULL ? strdup(p) : path_join(base_dir, p);
    return *out != NULL ? GV_OK : gv_error_set(err, GV_ENOMEM, "kubeconfig: out of memory");
}

gv_status gv_kube_config_parse_kubeconfig(const char *text, size_t len, const char *base_dir,
                                          const char *context, struct gv_kube_config **out,
                                          struct gv_error *err)
{
    *out = NULL;
    json_t *root = NULL;
    struct gv_kube_config *cfg = NULL;
    gv_status st = load_yaml(text, len, "kubeconfig", &root, err);
    if (st != GV_OK)
        return st;
    if (!json_is_object(root)) {
        st = gv_error_set(err, GV_EPARSE, "kubeconfig: top level is not a mapping");
        goto fail;
    }
    const char *ctx_name = context != NULL ? context : str_field(root, "current-context");
    if (ctx_name == NULL) {
        st = gv_error_set(err, GV_EINVAL, "kubeconfig: no current-context and none given");
        goto fail;
    }
    json_t *ctx = named_entry(root, "contexts", ctx_name, "context");
    if (ctx == NULL) {
        st = gv_error_set(err, GV_ENOTFOUND, "kubeconfig: context \"%s\" not found", ctx_name);
        goto fail;
    }
    const char *cluster_name = str_field(ctx, "cluster");
    const char *user_name = str_field(ctx, "user");
    json_t *cluster = cluster_name ? named_entry(root, "clusters", cluster_name, "cluster") : NULL;
    if (cluster == NULL) {
        st = gv_error_set(err, GV_ENOTFOUND, "kubeconfig: context \"%s\": cluster \"%s\" not found",
                          ctx_name, cluster_name ? cluster_name : "");
        goto fail;
    }
    json_t *user = user_name ? named_entry(root, "users", user_name, "user") : NULL;
    if (user_name != NULL && user == NULL) {
        st = gv_error_set(err, GV_ENOTFOUND, "kubeconfig: context \"%s\": user \"%s\" not found",
                          ctx_name, user_name);
        goto fail;
    }
    const char *server = str_field(cluster, "server");
    if (server == NULL) {
        st = gv_error_set(err, GV_EINVAL, "kubeconfig: cluster \"%s\" has no server",
                          cluster_name);
        goto fail;
    }
    st = gv_kube_config_from_url(server, &cfg, err);
    if (st != GV_OK) {
        gv_error_prefix(err, "kubeconfig: cluster \"%s\"", cluster_name);
        goto fail;
    }
    cfg->insecure_skip_tls_verify = yaml_true(str_field(cluster, "insecure-skip-tls-verify"));
    const char *s;
    if ((s = str_field(cluster, "certificate-authority-data")) != NULL)
        st = b64_decode("certificate-authority-data", s, &cfg->ca_data, err);
    else if ((s = str_field(cluster, "certificate-authority")) != NULL)
        st = resolve_path(base_dir, s, &cfg->ca_file, err);
    if (st != GV_OK)
        goto fail;
    if ((s = str_field(ctx, "namespace")) != NULL && (cfg->namespace_ = strdup(s)) == NULL)
        goto nomem;
    if (user != NULL) {
        if (json_object_get(user, "exec") != NULL ||
            json_object_get(user, "auth-provider") != NULL) {
            st = gv_error_set(err, GV_EUNSUPPORTED,
                              "kubeconfig: user \"%s\" uses an exec/auth-provider plugin; "
                              "gpuvisor supports token, tokenFile and client certificates",
                              user_name);
            goto fail;
        }
        if ((s = str_field(user, "token")) != NULL && (cfg->token = strdup(s)) == NULL)
            goto nomem;
        if ((s = str_field(user, "tokenFile")) != NULL &&
            (st = resolve_path(base_dir, s, &cfg->token_file, err)) != GV_OK)
            goto fail;
        if ((s = str_field(user, "client-certificate-data")) != NULL)
            st = b64_decode("client-certificate-data", s, &cfg->client_cert_data, err);
        else if ((s = str_field(user, "client-certificate")) != NULL)
            st = resolve_path(base_dir, s, &cfg->client_cert_file, err);
        if (st != GV_OK)
            goto fail;
        if ((s = str_field(user, "client-key-data")) != NULL)
            st = b64_decode("client-key-data", s, &cfg->client_key_data, err);
        else if ((s = str_field(user, "client-key")) != NULL)
            st = resolve_path(base_dir, s, &cfg->client_key_file, err);
        if (st != GV_OK)
            goto fail;
        bool has_cert = cfg->client_cert_data != NULL || cfg->client_cert_file != NULL;
        bool has_key = cfg->client_key_data != NULL || cfg->client_key_file != NULL;
        if (has_cert != has_key) {
            st = gv_error_set(err, GV_EINVAL,
                              "kubeconfig: user \"%s\" has a client %s without its %s", user_name,
                              has_cert ? "certificate" : "key", has_cert ? "key" : "certificate");
            goto fail;
        }
    }
    json_decref(root);
    *out = cfg;
    return GV_OK;
nomem:
    st = gv_error_set(err, GV_ENOMEM, "kubeconfig: out of memory");
fail:
    json_decref(root);
    gv_kube_config_free(cfg);
    return st;
}

gv_status gv_kube_config_from_kubeconfig(const char *path, const char *context,
                                         struct gv_kube_config **out, struct gv_error *err)
{
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    gv_status st = gv_file_read_all(path, &text, &len, err);
    if (st != GV_OK)
        return st;
    char *dir = strdup(path);
    if (dir == NULL) {
        free(text);
        return gv_error_set(err, GV_ENOMEM, "kubeconfig: out of memory");
    }
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    st = gv_kube_config_parse_kubeconfig(text, len, dir, context, out, err);
    if (st != GV_OK)
        gv_error_prefix(err, "%s", path);
    free(dir);
    free(text);
    return st;
}

gv_status gv_kube_config_load(const char *url, const char *kubeconfig,
                              struct gv_kube_config **out, struct gv_error *err)
{
    if (url != NULL)
        return gv_kube_config_from_url(url, out, err);
    if (kubeconfig == NULL) {
        const char *h = getenv("KUBERNETES_SERVICE_HOST");
        if (h != NULL && h[0] != '\0')
            return gv_kube_config_in_cluster(NULL, out, err);
    }
    char path[4096];
    if (kubeconfig == NULL) {
        const char *env = getenv("KUBECONFIG");
        if (env != NULL && env[0] != '\0') {
            /* KUBECONFIG is a ':'-separated list; we read its first file. */
            size_t n = strcspn(env, ":");
            snprintf(path, sizeof(path), "%.*s", (int)n, env);
        } else {
            const char *home = getenv("HOME");
            if (home == NULL || home[0] == '\0')
                return gv_error_set(err, GV_ENOTFOUND,
                                    "kube config: no URL, not in a cluster, no KUBECONFIG "
                                    "and no HOME");
            snprintf(path, sizeof(path), "%s/.kube/config", home);
        }
        kubeconfig = path;
    }
    return gv_kube_config_from_kubeconfig(kubeconfig, NULL, out, err);
}
