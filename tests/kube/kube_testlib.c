#include "kube_testlib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

void kube_config_fast_retries(struct gv_kube_config *cfg)
{
    /* Fast retries keep fault-injection tests short. */
    cfg->backoff_initial_ms = 5;
    cfg->backoff_max_ms = 20;
    cfg->max_retries = 3;
    cfg->timeout_ms = 10000;
}

int kube_fixture_setup_args(void **state, const char *const *args)
{
    struct kube_fixture *fx = calloc(1, sizeof(*fx));
    if (fx == NULL || fake_apiserver_start(&fx->fa, args) != 0) {
        free(fx);
        return -1;
    }
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    if (gv_kube_config_from_url(fx->fa.url, &cfg, &err) != GV_OK)
        goto fail;
    kube_config_fast_retries(cfg);
    gv_status st = gv_kube_client_new(cfg, &fx->client, &err);
    gv_kube_config_free(cfg);
    if (st != GV_OK)
        goto fail;
    *state = fx;
    return 0;
fail:
    fake_apiserver_stop(&fx->fa);
    free(fx);
    return -1;
}

int kube_fixture_setup(void **state)
{
    return kube_fixture_setup_args(state, NULL);
}

int kube_fixture_teardown(void **state)
{
    struct kube_fixture *fx = *state;
    gv_kube_client_free(fx->client);
    fake_apiserver_stop(&fx->fa);
    free(fx);
    return 0;
}

json_t *kube_create_pod(struct gv_kube_client *c, const char *ns, const char *name,
                        const char *label_key, const char *label_value, const char *node)
{
    json_t *pod = json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:s, s:s}]}}", "apiVersion", "v1",
                            "kind", "Pod", "metadata", "name", name, "spec", "containers",
                            "name", "main", "image", "busybox");
    if (label_key != NULL)
        json_object_set_new(json_object_get(pod, "metadata"), "labels",
                            json_pack("{s:s}", label_key, label_value));
    if (node != NULL)
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node));
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
    json_t *out = NULL;
    struct gv_error err;
    gv_status st = gv_kube_create(c, path, pod, &out, &err);
    json_decref(pod);
    if (st != GV_OK)
        fail_msg("create pod %s/%s: %s", ns, name, err.msg);
    return out;
}

json_t *kube_create_node(struct gv_kube_client *c, const char *name, const char *label_key,
                         const char *label_value)
{
    json_t *node = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Node",
                             "metadata", "name", name);
    if (label_key != NULL)
        json_object_set_new(json_object_get(node, "metadata"), "labels",
                            json_pack("{s:s}", label_key, label_value));
    json_t *out = NULL;
    struct gv_error err;
    gv_status st = gv_kube_create(c, "/api/v1/nodes", node, &out, &err);
    json_decref(node);
    if (st != GV_OK)
        fail_msg("create node %s: %s", name, err.msg);
    return out;
}

long kube_fake_count(struct kube_fixture *fx, const char *method_path)
{
    char *body = NULL;
    long code = fake_apiserver_ctl(&fx->fa, "GET stats", &body);
    long n = -1;
    if (code == 200) {
        json_t *j = json_loads(body, 0, NULL);
        json_t *v = json_object_get(j, method_path);
        n = json_is_integer(v) ? (long)json_integer_value(v) : 0;
        json_decref(j);
    }
    free(body);
    return n;
}

const char *kube_rv(json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
}
