#include "tests/scheduler/sched_testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "common/gv_buf.h"

char *st_inventory(const char *node, const struct gpu_desc *gpus, unsigned n, bool healthy)
{
    json_t *list = json_array();
    for (unsigned i = 0; i < n; i++) {
        char uuid[128];
        snprintf(uuid, sizeof(uuid), "GPU-%s-%u", node, i);
        json_array_append_new(
            list, json_pack("{s:s,s:i,s:s,s:I,s:f,s:i,s:i,s:i,s:b,s:s,s:b,s:s}", "uuid", uuid,
                            "index", (int)i, "model", gpus[i].model, "memoryMiB",
                            (json_int_t)gpus[i].mem_mib, "memoryScaling", 1.0, "cores", 100,
                            "split", (int)gpus[i].split, "numa", 0, "healthy", healthy, "mode",
                            "vgpu", "mig", 0, "pciBusId", "00000000:00:00.0"));
    }
    json_t *inv = json_pack("{s:i,s:s,s:s,s:o}", "version", 1, "driverVersion", "550.54.15",
                            "cudaVersion", "12.4", "gpus", list);
    char *text = json_dumps(inv, JSON_COMPACT);
    json_decref(inv);
    return text;
}

json_t *st_node(const char *name, const char *inventory, long heartbeat_age_s)
{
    json_t *ann = json_object();
    if (inventory != NULL)
        json_object_set_new(ann, "gpuvisor.io/node-gpus", json_string(inventory));
    if (heartbeat_age_s >= 0) {
        char ts[32];
        time_t t = time(NULL) - heartbeat_age_s;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_object_set_new(ann, "gpuvisor.io/node-heartbeat", json_string(ts));
    }
    return json_pack("{s:s,s:s,s:{s:s,s:o,s:{s:s}}}", "apiVersion", "v1", "kind", "Node",
                     "metadata", "name", name, "annotations", ann, "labels",
                     "kubernetes.io/hostname", name);
}

json_t *st_gpu_pod(const char *uid, int prio, unsigned long long mem, const char *node,
                   const char *assign)
{
    char memtext[32];
    snprintf(memtext, sizeof(memtext), "%llu", mem);
    json_t *p = json_pack(
        "{s:{s:s,s:s,s:s,s:s,s:{}},s:{s:s,s:i,s:[{s:s,s:{s:{s:s,s:s}}}]},s:{s:s}}", "metadata",
        "uid", uid, "namespace", "default", "name", uid, "resourceVersion", "7", "annotations",
        "spec", "schedulerName", "gpuvisor-scheduler", "priority", prio, "containers", "name",
        "main", "resources", "limits", "nvidia.com/gpu", "1", "nvidia.com/gpumem", memtext,
        "status", "phase", node ? "Running" : "Pending");
    if (p != NULL && node != NULL) {
        json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(node));
        json_object_set_new(json_object_get(json_object_get(p, "metadata"), "annotations"),
                            "gpuvisor.io/assignment", json_string(assign));
    }
    return p;
}

void st_put_node(struct gv_kube_client *c, json_t *node)
{
    char path[512];
    const char *name =
        json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
    snprintf(path, sizeof(path), "/api/v1/nodes/%s", name);
    json_t *cur = NULL;
    if (gv_kube_get(c, path, &cur, NULL) == GV_OK) {
        json_t *ann = json_object_get(json_object_get(node, "metadata"), "annotations");
        json_t *patch = json_pack("{s:{s:O}}", "metadata", "annotations", ann);
        /* Replace the annotations wholesale: a merge patch keeps old keys,
         * so null out the ones the new node lacks. */
        json_t *old = json_object_get(json_object_get(cur, "metadata"), "annotations");
        const char *k;
        json_t *v;
        json_object_foreach(old, k, v)
        {
            if (json_object_get(ann, k) == NULL)
                json_object_set_new(
                    json_object_get(json_object_get(patch, "metadata"), "annotations"), k,
                    json_null());
        }
        gv_kube_patch(c, path, GV_KUBE_PATCH_MERGE, patch, NULL, NULL);
        json_decref(patch);
        json_decref(cur);
    } else {
        struct gv_error err = {0};
        if (gv_kube_create(c, "/api/v1/nodes", node, NULL, &err) != GV_OK)
            fprintf(stderr, "create node %s: %s\n", name, err.msg);
    }
}

json_t *st_create_pod(struct gv_kube_client *c, const char *name, const char *containers,
                      const char *annotations)
{
    return st_create_pod_prio(c, name, containers, annotations, -1);
}

json_t *st_create_pod_prio(struct gv_kube_client *c, const char *name, const char *containers,
                           const char *annotations, int prio)
{
    json_t *spec_c = json_loads(containers, 0, NULL);
    json_t *ann = annotations ? json_loads(annotations, 0, NULL) : json_object();
    json_t *list = json_array();
    size_t i;
    json_t *ct;
    json_array_foreach(spec_c, i, ct)
    {
        json_array_append_new(list, json_pack("{s:O,s:s,s:{s:O,s:O}}", "name",
                                              json_object_get(ct, "name"), "image", "cuda:12",
                                              "resources", "limits", json_object_get(ct, "limits"),
                                              "requests", json_object_get(ct, "limits")));
    }
    json_t *pod = json_pack("{s:s,s:s,s:{s:s,s:s,s:o},s:{s:s,s:o},s:{s:s}}", "apiVersion", "v1",
                            "kind", "Pod", "metadata", "name", name, "namespace", "default",
                            "annotations", ann, "spec", "schedulerName", "gpuvisor-scheduler",
                            "containers", list, "status", "phase", "Pending");
    json_decref(spec_c);
    if (prio >= 0)
        json_object_set_new(json_object_get(pod, "spec"), "priority", json_integer(prio));
    json_t *out = NULL;
    struct gv_error err = {0};
    if (gv_kube_create(c, "/api/v1/namespaces/default/pods", pod, &out, &err) != GV_OK)
        fprintf(stderr, "create pod %s: %s\n", name, err.msg);
    json_decref(pod);
    return out;
}

long st_http(const char *method, const char *url, const char *body, char **out)
{
    CURL *c = curl_easy_init();
    struct gv_buf b = {0};
    long code = 0;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gv_buf_write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (body != NULL)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out != NULL)
        *out = b.data;
    else
        free(b.data);
    return code;
}

json_t *st_post(const char *base, const char *verb, json_t *args, long *status)
{
    char *body = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    char url[512], *out = NULL;
    snprintf(url, sizeof(url), "%s/%s", base, verb);
    long code = st_http("POST", url, body, &out);
    free(body);
    if (status != NULL)
        *status = code;
    json_t *res = code == 200 && out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    return res;
}

json_t *st_filter(const char *base, json_t *pod, const char *const *names, size_t n, long *status)
{
    json_t *jn = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(jn, json_string(names[i]));
    return st_post(base, "filter",
                   json_pack("{s:O,s:n,s:o}", "Pod", pod, "Nodes", "NodeNames", jn), status);
}

char *st_bind(const char *base, json_t *pod, const char *node)
{
    json_t *md = json_object_get(pod, "metadata");
    long code;
    json_t *res = st_post(base, "bind",
                          json_pack("{s:O,s:O,s:O,s:s}", "PodName", json_object_get(md, "name"),
                                    "PodNamespace", json_object_get(md, "namespace"), "PodUID",
                                    json_object_get(md, "uid"), "Node", node),
                          &code);
    char *err = NULL;
    if (res == NULL) {
        err = malloc(64);
        snprintf(err, 64, "HTTP %ld", code);
    } else {
        const char *e = json_string_value(json_object_get(res, "Error"));
        err = strdup(e != NULL ? e : "no Error key in the answer");
    }
    json_decref(res);
    return err;
}

const char *st_chosen(json_t *result)
{
    json_t *names = json_object_get(result, "NodeNames");
    if (json_array_size(names) != 1)
        return NULL;
    return json_string_value(json_array_get(names, 0));
}

double st_metric(const char *url, const char *name, const char *label_substring)
{
    char *text = NULL;
    if (st_http("GET", url, NULL, &text) != 200 || text == NULL) {
        free(text);
        return -1;
    }
    double sum = 0;
    size_t nlen = strlen(name);
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, name, nlen) != 0 || (line[nlen] != '{' && line[nlen] != ' '))
            continue;
        if (label_substring != NULL && strstr(line, label_substring) == NULL)
            continue;
        const char *sp = strrchr(line, ' ');
        if (sp != NULL)
            sum += strtod(sp + 1, NULL);
    }
    free(text);
    return sum;
}

bool st_wait(bool (*cond)(void *ud), void *ud, long timeout_ms)
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    for (long waited = 0; waited < timeout_ms; waited += 20) {
        if (cond(ud))
            return true;
        nanosleep(&ts, NULL);
    }
    return cond(ud);
}

struct gv_kube_client *st_kube(const char *url)
{
    struct gv_kube_config *kc = NULL;
    struct gv_kube_client *c = NULL;
    if (gv_kube_config_from_url(url, &kc, NULL) != GV_OK)
        return NULL;
    kc->max_retries = 2;
    kc->backoff_initial_ms = 10;
    if (gv_kube_client_new(kc, &c, NULL) != GV_OK)
        c = NULL;
    gv_kube_config_free(kc);
    return c;
}

void st_race(size_t n, void *(*fn)(void *), void *ctx, size_t size)
{
    pthread_t *t = calloc(n ? n : 1, sizeof(*t));
    bool *started = calloc(n ? n : 1, sizeof(*started));
    for (size_t i = 0; t != NULL && started != NULL && i < n; i++)
        started[i] = pthread_create(&t[i], NULL, fn, (char *)ctx + i * size) == 0;
    for (size_t i = 0; t != NULL && started != NULL && i < n; i++)
        if (started[i])
            pthread_join(t[i], NULL);
    free(started);
    free(t);
}
