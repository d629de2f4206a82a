/*
 * The node agents' /metrics as consumers read them (contracts/agent_usage.h):
 * a Prometheus text exposition reader and the usage model.  Only samples
 * matter: comments and TYPE/HELP lines are skipped, a malformed line is
 * counted and skipped, label values are unescaped in place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "contracts/agent_usage.h"

static bool name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9');
}

static char *skip_blank(char *p, char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* Parses one line [p, end) (end is where the newline was; writable). */
static bool parse_line(char *p, char *end, struct gv_expfmt_sample *s)
{
    memset(s, 0, sizeof(*s));
    p = skip_blank(p, end);
    if (p == end || *p == '#')
        return true; /* blank or comment: nothing, not malformed */
    if (!name_start(*p))
        return false;
    s->name = p;
    while (p < end && name_char(*p))
        p++;
    char *name_end = p;
    if (p < end && *p == '{') {
        *name_end = '\0';
        p++;
        for (;;) {
            p = skip_blank(p, end);
            if (p < end && *p == '}') {
                p++;
                break;
            }
            if (p == end || !name_start(*p) || s->n_labels == GV_EXPFMT_MAX_LABELS)
                return false;
            char *ln = p;
            while (p < end && name_char(*p))
                p++;
            char *ln_end = p;
            p = skip_blank(p, end);
            if (p + 1 >= end || *p != '=' || p[1] != '"')
                return false;
            *ln_end = '\0';
            p += 2;
            char *v = p, *w = p; /* unescape in place */
            while (p < end && *p != '"') {
                if (*p == '\\') {
                    if (p + 1 >= end)
                        return false;
                    p++;
                    *w++ = *p == 'n' ? '\n' : *p;
                    p++;
                } else {
                    *w++ = *p++;
                }
            }
            if (p == end)
                return false;
            *w = '\0';
            p++;
            s->label_names[s->n_labels] = ln;
            s->label_values[s->n_labels++] = v;
            p = skip_blank(p, end);
            if (p < end && *p == ',')
                p++;
            else if (p < end && *p == '}') {
                p++;
                break;
            } else {
                return false;
            }
        }
    } else if (p == end || (*p != ' ' && *p != '\t')) {
        return false;
    }
    p = skip_blank(p, end);
    if (p == end)
        return false;
    if (name_end < end && *name_end != '\0')
        *name_end = '\0';
    char *vs = p;
    while (p < end && *p != ' ' && *p != '\t')
        p++;
    char saved = p < end ? *p : '\0';
    *p = '\0';
    char *stop = NULL;
    double v = strtod(vs, &stop);
    if (stop == vs || *stop != '\0') {
        if (p < end)
            *p = saved;
        return false;
    }
    s->value = v;
    return true; /* a timestamp, if any, is ignored */
}

size_t gv_expfmt_parse(char *text, size_t len, gv_expfmt_fn fn, void *ud)
{
    size_t bad = 0;
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        if (le > p && le[-1] == '\r')
            le--;
        /* The line is parsed in a copy-free way: its end becomes a NUL. */
        char keep = le < end ? *le : '\0';
        if (le < end)
            *le = '\0';
        struct gv_expfmt_sample s;
        if (le == end) {
            /* Last line without a newline: needs a terminator of its own. */
            size_t n = (size_t)(le - p);
            char *copy = malloc(n + 1);
            if (copy != NULL) {
                memcpy(copy, p, n);
                copy[n] = '\0';
                if (!parse_line(copy, copy + n, &s))
                    bad++;
                else if (s.name != NULL)
                    fn(ud, &s);
                free(copy);
            }
            break;
        }
        if (!parse_line(p, le, &s))
            bad++;
        else if (s.name != NULL)
            fn(ud, &s);
        (void)keep;
        p = nl ? nl + 1 : end;
    }
    return bad;
}

const char *gv_expfmt_label(const struct gv_expfmt_sample *s, const char *name)
{
    for (size_t i = 0; i < s->n_labels; i++)
        if (strcmp(s->label_names[i], name) == 0)
            return s->label_values[i];
    return NULL;
}

/* ---- the usage model --------------------------------------------------- */

static char *dup0(const char *s)
{
    return strdup(s ? s : "");
}

long gv_usage_agent_port(const void *pod_json, const char *name)
{
    const json_t *pod = pod_json;
    if (name != NULL && name[0] >= '0' && name[0] <= '9')
        return strtol(name, NULL, 10);
    size_t i, j;
    json_t *c, *p;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c)
    {
        json_array_foreach(json_object_get(c, "ports"), j, p)
        {
            const char *nm = json_string_value(json_object_get(p, "name"));
            if (nm != NULL && strcmp(nm, name ? name : "metrics") == 0)
                return (long)json_integer_value(json_object_get(p, "containerPort"));
        }
    }
    return -1;
}

static char *row_key(const char *ns, const char *pod, const char *ctr, const char *uuid)
{
    /* uuids compare on 40 characters: HAMi's series cut them there */
    size_t kl = strlen(ns ? ns : "") + strlen(pod ? pod : "") + strlen(ctr ? ctr : "") + 48;
    char *key = malloc(kl);
    if (key != NULL)
        snprintf(key, kl, "%s\x1f%s\x1f%s\x1f%.40s", ns ? ns : "", pod ? pod : "", ctr ? ctr : "",
                 uuid ? uuid : "");
    return key;
}

struct gv_usage_row *gv_usage_row_find(struct gv_usage_rows *r, const char *ns, const char *pod,
                                       const char *ctr, const char *uuid)
{
    char *key = row_key(ns, pod, ctr, uuid);
    json_t *at = key && r->index ? json_object_get(r->index, key) : NULL;
    free(key);
    return at != NULL ? &r->v[json_integer_value(at)] : NULL;
}

int gv_usage_rows_reindex(struct gv_usage_rows *r)
{
    json_decref(r->index);
    if ((r->index = json_object()) == NULL)
        return -1;
    for (size_t i = 0; i < r->n; i++) {
        char *key = row_key(r->v[i].ns, r->v[i].pod, r->v[i].ctr, r->v[i].uuid);
        if (key == NULL || json_object_set_new(r->index, key, json_integer((json_int_t)i)) != 0) {
            free(key);
            return -1;
        }
        free(key);
    }
    return 0;
}

struct gv_usage_row *gv_usage_row_get(struct gv_usage_rows *r, const char *ns, const char *pod,
                                      const char *ctr, const char *uuid)
{
    char *key = row_key(ns, pod, ctr, uuid);
    if (key == NULL)
        return NULL;
    if (r->index == NULL && (r->index = json_object()) == NULL) {
        free(key);
        return NULL;
    }
    json_t *at = json_object_get(r->index, key);
    if (at != NULL) {
        free(key);
        return &r->v[json_integer_value(at)];
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        struct gv_usage_row *v = realloc(r->v, cap * sizeof(*v));
        if (v == NULL) {
            free(key);
            return NULL;
        }
        r->v = v;
        r->cap = cap;
    }
    struct gv_usage_row *x = &r->v[r->n];
    memset(x, 0, sizeof(*x));
    x->ns = dup0(ns);
    x->pod = dup0(pod);
    x->ctr = dup0(ctr);
    x->uuid = dup0(uuid);
    x->node = dup0("");
    x->model = dup0("");
    x->index = -1;
    if (!x->ns || !x->pod || !x->ctr || !x->uuid || !x->node || !x->model ||
        json_object_set_new(r->index, key, json_integer((json_int_t)r->n)) != 0) {
        free(x->ns), free(x->pod), free(x->ctr), free(x->uuid), free(x->node), free(x->model);
        free(key);
        return NULL;
    }
    free(key);
    r->n++;
    return x;
}

void gv_usage_row_set_node(struct gv_usage_row *x, const char *node)
{
    if (node != NULL && *node != '\0' && x->node[0] == '\0') {
        char *n = strdup(node);
        if (n != NULL) {
            free(x->node);
            x->node = n;
        }
    }
}

void gv_usage_rows_free(struct gv_usage_rows *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].ns);
        free(r->v[i].pod);
        free(r->v[i].ctr);
        free(r->v[i].uuid);
        free(r->v[i].node);
        free(r->v[i].model);
    }
    free(r->v);
    json_decref(r->index);
    memset(r, 0, sizeof(*r));
}

void gv_usage_free(struct gv_usage *u)
{
    gv_usage_rows_free(&u->ctrs);
    gv_usage_rows_free(&u->gpus);
}

struct reading {
    struct gv_usage *u;
    const char *node;    /* the agent's node */
    bool gpuvisor_names; /* it exports gpuvisor_container_*: HAMi's twins are ignored */
};

static void on_sample(void *ud, const struct gv_expfmt_sample *s)
{
    struct reading *rd = ud;
    const char *n = s->name;
    bool gv = strncmp(n, "gpuvisor_container_gpu_", 23) == 0;
    bool hami = strncmp(n, "hami_vgpu_", 10) == 0 ||
                strcmp(n, "hami_container_device_utilization_ratio") == 0;
    if (gv || (hami && !rd->gpuvisor_names)) {
        const char *uuid = gv ? gv_expfmt_label(s, "uuid") : gv_expfmt_label(s, "device_uuid");
        struct gv_usage_row *x =
            gv_usage_row_get(&rd->u->ctrs, gv_expfmt_label(s, "namespace"),
                             gv_expfmt_label(s, "pod"), gv_expfmt_label(s, "container"), uuid);
        if (x == NULL)
            return;
        gv_usage_row_set_node(x,
                              gv_expfmt_label(s, "node") ? gv_expfmt_label(s, "node") : rd->node);
        if (strcmp(n, "gpuvisor_container_gpu_memory_used_bytes") == 0 ||
            strcmp(n, "hami_vgpu_memory_used_bytes") == 0)
            x->used = s->value, x->have_used = true;
        else if (strcmp(n, "gpuvisor_container_gpu_memory_limit_bytes") == 0 ||
                 strcmp(n, "hami_vgpu_memory_limit_bytes") == 0)
            x->limit = s->value, x->have_limit = true;
        else if (strcmp(n, "gpuvisor_container_gpu_compute_share_achieved_ratio") == 0)
            x->share = s->value, x->have_share = true;
        else if (strcmp(n, "hami_container_device_utilization_ratio") == 0)
            x->share = s->value / 100.0, x->have_share = true;
        else if (strcmp(n, "gpuvisor_container_gpu_compute_share_limit_ratio") == 0)
            x->target = s->value, x->have_target = true;
        return;
    }
    bool dcgm = strncmp(n, "DCGM_FI_DEV_", 12) == 0;
    if (!dcgm && strncmp(n, "hami_host_gpu_", 14) != 0)
        return;
    const char *uuid = dcgm ? gv_expfmt_label(s, "UUID") : gv_expfmt_label(s, "device_uuid");
    struct gv_usage_row *g = gv_usage_row_get(&rd->u->gpus, "", "", "", uuid);
    if (g == NULL)
        return;
    gv_usage_row_set_node(g, dcgm ? gv_expfmt_label(s, "Hostname") : gv_expfmt_label(s, "node"));
    gv_usage_row_set_node(g, rd->node);
    const char *idx = dcgm ? gv_expfmt_label(s, "gpu") : gv_expfmt_label(s, "device_index");
    if (idx != NULL && idx[0] >= '0' && idx[0] <= '9')
        g->index = strtol(idx, NULL, 10);
    const char *model = gv_expfmt_label(s, "modelName");
    const char *type = gv_expfmt_label(s, "device_type"); /* HAMi: "NVIDIA-<model>" */
    if (model == NULL && type != NULL)
        model = strncmp(type, "NVIDIA-", 7) == 0 ? type + 7 : type;
    if (model != NULL && g->model[0] == '\0') {
        char *m = strdup(model);
        if (m != NULL) {
            free(g->model);
            g->model = m;
        }
    }
    if (strcmp(n, "DCGM_FI_DEV_GPU_UTIL") == 0 ||
        (strcmp(n, "hami_host_gpu_utilization_ratio") == 0 && !g->have_util))
        g->util = s->value, g->have_util = true;
    else if (strcmp(n, "DCGM_FI_DEV_FB_USED") == 0)
        g->fb_used = s->value, g->have_fb = true, g->fb_total += s->value;
    else if (strcmp(n, "DCGM_FI_DEV_FB_FREE") == 0)
        g->fb_total += s->value;
    else if (strcmp(n, "hami_host_gpu_memory_used_bytes") == 0 && !g->have_fb)
        g->fb_used = s->value / 1048576.0, g->have_fb = true;
}

static void note_names(void *ud, const struct gv_expfmt_sample *s)
{
    struct reading *rd = ud;
    if (strncmp(s->name, "gpuvisor_container_gpu_", 23) == 0)
        rd->gpuvisor_names = true;
}

size_t gv_usage_add_text(struct gv_usage *u, char *text, size_t len, const char *node)
{
    struct reading rd = {u, node, false};
    /* Two passes: which names the agent exports decides which to read; the
     * first runs on a copy because the parser writes into its input. */
    char *copy = malloc(len + 1);
    if (copy != NULL) {
        memcpy(copy, text, len);
        copy[len] = '\0';
        gv_expfmt_parse(copy, len, note_names, &rd);
        free(copy);
    }
    return gv_expfmt_parse(text, len, on_sample, &rd);
}
