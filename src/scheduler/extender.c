#include "scheduler/gv_extender.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/gv_jalloc.h"

json_t *gv_ext_json_get(const json_t *object, const char *key)
{
    if (!json_is_object(object))
        return NULL;
    json_t *v = json_object_get(object, key);
    if (v != NULL)
        return v;
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)object, k, val)
    {
        if (strcasecmp(k, key) == 0)
            return val;
    }
    return NULL;
}

static gv_status load_object(const char *body, size_t len, const char *what, json_t **out,
                             struct gv_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (root == NULL)
        return gv_error_set(err, GV_EPARSE, "%s: invalid JSON at line %d column %d: %s", what,
                            jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return gv_error_set(err, GV_EPARSE, "%s: expected a JSON object", what);
    }
    *out = root;
    return GV_OK;
}

/*
 * Parse scratch.  A 5,000-name filter body becomes ~10,000 small jansson
 * allocations that die with the request.  From malloc they raised each
 * arena's high-water mark by ~0.5 MiB, and the reservations a filter leaves
 * behind (long-lived, small) land among them and pin those pages.  So the
 * parse runs on a scratch region of its own (gv_jalloc.h: one mapping,
 * returned whole), and only what outlives the request is copied to the
 * heap: the Pod and the names, in one block.
 */

/* Virtual space only: pages never touched cost nothing, and a body that
 * needs more than this spills to malloc. */
static size_t scratch_cap(size_t body_len)
{
    return body_len < ((size_t)64 << 20) ? body_len * 16 + (64 << 10) : (size_t)1 << 30;
}

static gv_status args_extract(json_t *root, struct gv_ext_args *out, struct gv_error *err);

/* Copies what out points into (the parse region) to the heap. */
static gv_status args_detach(struct gv_ext_args *out, struct gv_error *err)
{
    if (out->node_items != NULL) {
        /* Full Node objects are answered in the form they came in: keep the
         * whole document (rare: nodeCacheCapable senders use NodeNames). */
        json_t *copy = json_deep_copy(out->root);
        free(out->names);
        memset(out, 0, sizeof(*out));
        if (copy == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        gv_status st = args_extract(copy, out, err);
        if (st != GV_OK)
            json_decref(copy);
        return st;
    }
    size_t bytes = out->n_names * sizeof(char *);
    for (size_t i = 0; i < out->n_names; i++)
        bytes += strlen(out->names[i]) + 1;
    char **names = malloc(bytes ? bytes : 1);
    json_t *pod = json_deep_copy(out->pod);
    if (names == NULL || pod == NULL) {
        free(names);
        json_decref(pod);
        free(out->names);
        memset(out, 0, sizeof(*out));
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    char *text = (char *)(names + out->n_names);
    for (size_t i = 0; i < out->n_names; i++) {
        size_t l = strlen(out->names[i]) + 1;
        memcpy(text, out->names[i], l);
        names[i] = text;
        text += l;
    }
    free(out->names);
    out->names = (const char **)names;
    out->root = out->pod = pod;
    return GV_OK;
}

/*
 * Fast path for the common body, {"Pod":{...},"NodeNames":["a","b",...]}
 * (nodeCacheCapable), without a JSON value per name: at 50,000 names
 * jansson's tree was 8 ms of a 25 ms filter.  The top level is split into
 * members by a scanner that only skips values; every member but NodeNames
 * is then parsed by jansson (so the body is still checked as JSON), and the
 * names are taken straight from the text when each is plain printable
 * ASCII without escapes.  Anything else (escapes, other bytes, duplicate or
 * differently-cased keys, full Node objects, malformed text) returns
 * GV_EUNSUPPORTED and the body goes through jansson whole, which gives the
 * same result and every error message.
 */
static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* End of the JSON string starting at p ('"'), or NULL; *plain says whether
 * it holds only printable ASCII without escapes. */
static const char *str_end(const char *p, const char *end, bool *plain)
{
    *plain = true;
    for (p++; p < end; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"')
            return p + 1;
        if (ch == '\\') {
            *plain = false;
            p++;
        } else if (ch < 0x20 || ch > 0x7e) {
            *plain = false;
        }
    }
    return NULL;
}

/* End of the value starting at p, or NULL (structure only: jansson checks
 * the values it is given). */
static const char *value_end(const char *p, const char *end)
{
    bool plain;
    if (p >= end)
        return NULL;
    if (*p == '"')
        return str_end(p, end, &plain);
    if (*p != '{' && *p != '[') {
        while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
               *p != '\n' && *p != '\r')
            p++;
        return p;
    }
    size_t depth = 0;
    while (p < end) {
        if (*p == '"') {
            p = str_end(p, end, &plain);
            if (p == NULL)
                return NULL;
            continue;
        }
        if (*p == '{' || *p == '[')
            depth++;
        else if ((*p == '}' || *p == ']') && --depth == 0)
            return p + 1;
        p++;
    }
    return NULL;
}

/* Whether the n bytes at p are all printable ASCII (0x20..0x7e) but '\':
 * eight at a time (a byte-at-a-time check was most of the scan of a
 * 50,000-name body).  Per word, the classic exact tests for "some byte
 * below 0x20", "some byte above 0x7e" and "some byte equal to '\'"; each
 * sets the high bit of some byte exactly when such a byte is there. */
static bool plain_ascii(const char *p, size_t n)
{
    const uint64_t ones = UINT64_C(0x0101010101010101), high = UINT64_C(0x8080808080808080);
    uint64_t bad = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t bs = w ^ (ones * '\\');
        bad |= ((w - ones * 0x20) & ~w) | ((w + ones * (127 - 0x7e)) | w) | ((bs - ones) & ~bs);
    }
    if ((bad & high) != 0)
        return false;
    for (; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch < 0x20 || ch > 0x7e || ch == '\\')
            return false;
    }
    return true;
}

/* Puts back the closing quotes of n names ended in place. */
static void names_restore(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        names[i][strlen(names[i])] = '"';
}

/* The names of the array at p, taken from the text in one pass; *stop is
 * where the array ends.  GV_EUNSUPPORTED for anything but plain names.
 * The block of pointers (and text, unless inplace) is sized for the most
 * names the rest of the body could hold (each takes at least 3 bytes:
 * "x",), so the pass takes each name as it is checked, with no second pass
 * and no growing array; pages past what the names use are never touched (a
 * large block is its own mapping, returned whole at free).  inplace: the
 * body is writable and each name stays in it, its closing quote made a NUL
 * (put back on failure). */
static gv_status names_from_text(const char *p, const char *end, struct gv_ext_args *out,
                                 const char **stop, bool inplace)
{
    size_t max_n = (size_t)(end - p) / 3 + 1, n = 0;
    char **names = malloc(max_n * sizeof(char *) + (inplace ? 0 : (size_t)(end - p) + 1));
    if (names == NULL)
        return GV_ENOMEM;
    char *text = (char *)(names + max_n);
    const char *q = ws(p + 1, end);
    if (q < end && *q == ']') {
        q++;
    } else {
        for (;;) {
            if (q >= end || *q != '"')
                goto fail;
            const char *e = memchr(q + 1, '"', (size_t)(end - q - 1));
            if (e == NULL || e == q + 1)
                goto fail;
            /* plain: printable ASCII without escapes (a '\' may be
             * escaping the quote found: such names go through jansson) */
            size_t l = (size_t)(e - q - 1);
            if (!plain_ascii(q + 1, l))
                goto fail;
            if (inplace) {
                names[n++] = (char *)q + 1; /* the caller's writable body */
                *(char *)e = '\0';
            } else {
                memcpy(text, q + 1, l);
                text[l] = '\0';
                names[n++] = text;
                text += l + 1;
            }
            q = ws(e + 1, end);
            if (q < end && *q == ']') {
                q++;
                break;
            }
            if (q >= end || *q != ',')
                goto fail;
            q = ws(q + 1, end);
        }
    }
    out->names = (const char **)names;
    out->n_names = n;
    *stop = q;
    return GV_OK;
fail:
    if (inplace)
        names_restore(names, n);
    free(names);
    return GV_EUNSUPPORTED;
}

static gv_status args_fast(const char *body, size_t len, struct gv_ext_args *out, bool inplace)
{
    static const char *const keys[] = {"Pod", "NodeNames", "Nodes"};
    const char *end = body + len, *span[3] = {NULL}, *span_end[3] = {NULL};
    const char *p = ws(body, end);
    json_t *pod = NULL;
    gv_status st = GV_EUNSUPPORTED;
    if (p >= end || *p != '{')
        return GV_EUNSUPPORTED;
    p = ws(p + 1, end);
    if (p < end && *p == '}')
        return GV_EUNSUPPORTED;
    for (;;) {
        bool plain;
        const char *k = p, *ke = p < end && *p == '"' ? str_end(p, end, &plain) : NULL;
        if (ke == NULL || !plain)
            goto fail;
        p = ws(ke, end);
        if (p >= end || *p != ':')
            goto fail;
        const char *v = ws(p + 1, end), *ve = NULL;
        size_t kl = (size_t)(ke - k - 2);
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (strlen(keys[i]) == kl && strncasecmp(k + 1, keys[i], kl) == 0)
                which = i;
        if (which >= 0 && (span[which] != NULL || strncmp(k + 1, keys[which], kl) != 0))
            goto fail; /* duplicates and other cases: jansson's rules */
        if (which == 1 && v < end && *v == '[') {
            /* the names, in the same pass */
            if ((st = names_from_text(v, end, out, &ve, inplace)) != GV_OK)
                goto fail;
            st = GV_EUNSUPPORTED;
        } else if ((ve = value_end(v, end)) == NULL || ve == v) {
            goto fail;
        }
        if (which >= 0) {
            span[which] = v;
            span_end[which] = ve;
        } else {
            /* a member we ignore must still be JSON */
            json_t *x = json_loadb(v, (size_t)(ve - v), JSON_DECODE_ANY, NULL);
            if (x == NULL)
                goto fail;
            json_decref(x);
        }
        p = ws(ve, end);
        if (p < end && *p == '}')
            break;
        if (p >= end || *p != ',')
            goto fail;
        p = ws(p + 1, end);
    }
    if (ws(p + 1, end) != end || span[0] == NULL || out->names == NULL ||
        (span[2] != NULL && (span_end[2] - span[2] != 4 || strncmp(span[2], "null", 4) != 0)))
        goto fail;
    pod = json_loadb(span[0], (size_t)(span_end[0] - span[0]), 0, NULL);
    if (!json_is_object(pod) || !json_is_object(gv_ext_json_get(pod, "metadata"))) {
        json_decref(pod);
        goto fail;
    }
    out->root = out->pod = pod;
    out->scanned = true;
    return GV_OK;
fail:
    if (inplace && out->names != NULL)
        names_restore((char **)out->names, out->n_names);
    free(out->names);
    out->names = NULL;
    out->n_names = 0;
    return st;
}

static gv_status args_parse(const char *body, size_t len, struct gv_ext_args *out,
                            struct gv_error *err, bool inplace)
{
    memset(out, 0, sizeof(*out));
    gv_status fast = args_fast(body, len, out, inplace);
    if (fast == GV_OK)
        return GV_OK;
    memset(out, 0, sizeof(*out));
    if (fast == GV_ENOMEM)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    gv_jalloc_init();
    struct gv_jscratch a;
    gv_jscratch_open(&a, scratch_cap(len));
    gv_jscratch_enter(&a);
    json_t *root = NULL;
    gv_status st = load_object(body, len, "ExtenderArgs", &root, err);
    if (st == GV_OK)
        st = args_extract(root, out, err);
    gv_jalloc_leave();
    if (st == GV_OK && a.base != 0)
        st = args_detach(out, err);
    gv_jscratch_enter(&a);
    if (a.base != 0 || st != GV_OK)
        json_decref(root);
    gv_jalloc_leave();
    gv_jscratch_close(&a);
    return st;
}

gv_status gv_ext_args_parse(const char *body, size_t len, struct gv_ext_args *out,
                            struct gv_error *err)
{
    return args_parse(body, len, out, err, false);
}

gv_status gv_ext_args_parse_inplace(char *body, size_t len, struct gv_ext_args *out,
                                    struct gv_error *err)
{
    return args_parse(body, len, out, err, true);
}

/* Fills out from root (which it then owns); on failure leaves out empty
 * and root to the caller. */
static gv_status args_extract(json_t *root, struct gv_ext_args *out, struct gv_error *err)
{
    gv_status st;
    json_t *pod = gv_ext_json_get(root, "Pod");
    json_t *names = gv_ext_json_get(root, "NodeNames");
    json_t *nodes = gv_ext_json_get(root, "Nodes");
    if (!json_is_object(pod)) {
        st = gv_error_set(err, GV_EINVAL, "ExtenderArgs: \"Pod\" must be a Pod object");
        goto fail;
    }
    if (!json_is_object(gv_ext_json_get(pod, "metadata"))) {
        st = gv_error_set(err, GV_EINVAL, "ExtenderArgs: Pod has no metadata object");
        goto fail;
    }
    json_t *items = NULL;
    size_t n = 0;
    if (names != NULL && !json_is_null(names)) {
        /* nodeCacheCapable: the scheduler sends names only. */
        if (!json_is_array(names)) {
            st = gv_error_set(err, GV_EINVAL, "ExtenderArgs: \"NodeNames\" must be an array");
            goto fail;
        }
        n = json_array_size(names);
    } else if (nodes != NULL && !json_is_null(nodes)) {
        /* Full Node objects (nodeCacheCapable: false). */
        if (!json_is_object(nodes)) {
            st = gv_error_set(err, GV_EINVAL, "ExtenderArgs: \"Nodes\" must be a NodeList");
            goto fail;
        }
        items = gv_ext_json_get(nodes, "items");
        if (items == NULL || json_is_null(items)) {
            items = json_array();
            if (items == NULL || json_object_set_new(nodes, "items", items) != 0) {
                st = gv_error_set(err, GV_ENOMEM, "out of memory");
                goto fail;
            }
        } else if (!json_is_array(items)) {
            st = gv_error_set(err, GV_EINVAL, "ExtenderArgs: \"Nodes.items\" must be an array");
            goto fail;
        }
        n = json_array_size(items);
    } else {
        st =
            gv_error_set(err, GV_EINVAL, "ExtenderArgs: neither \"NodeNames\" nor \"Nodes\" given");
        goto fail;
    }
    out->names = calloc(n ? n : 1, sizeof(*out->names));
    if (out->names == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL;
        if (items != NULL) {
            json_t *node = json_array_get(items, i);
            name = json_string_value(gv_ext_json_get(gv_ext_json_get(node, "metadata"), "name"));
            if (name == NULL || *name == '\0') {
                st = gv_error_set(err, GV_EINVAL,
                                  "ExtenderArgs: Nodes.items[%zu] has no metadata.name", i);
                goto fail;
            }
        } else {
            name = json_string_value(json_array_get(names, i));
            if (name == NULL || *name == '\0') {
                st = gv_error_set(err, GV_EINVAL,
                                  "ExtenderArgs: NodeNames[%zu] must be a non-empty string", i);
                goto fail;
            }
        }
        out->names[i] = name;
    }
    out->root = root;
    out->pod = pod;
    out->n_names = n;
    out->node_items = items;
    return GV_OK;
fail:
    free(out->names);
    memset(out, 0, sizeof(*out));
    return st;
}

void gv_ext_args_clear(struct gv_ext_args *args)
{
    free(args->names);
    json_decref(args->root);
    memset(args, 0, sizeof(*args));
}

char *gv_ext_reason_text(const char *in)
{
    size_t n = 0;
    for (const char *p = in; *p; p++)
        n += *p == '%' ? 8 : 1;
    char *out = malloc(n + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (const char *p = in; *p; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        /* "30% cores" -> "30 percent cores"; "a % b" -> "a percent b". */
        const char *word = p > in && p[-1] != ' ' ? " percent" : "percent";
        memcpy(o, word, strlen(word));
        o += strlen(word);
    }
    *o = '\0';
    return out;
}

/* A JSON string of a user-facing reason, made format-safe. */
static json_t *reason_json(const char *in)
{
    char *t = gv_ext_reason_text(in);
    json_t *j = t != NULL ? json_string(t) : NULL;
    free(t);
    return j;
}

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

char *gv_ext_filter_result_encode(const struct gv_ext_args *args,
                                  const enum gv_ext_verdict *verdicts, const char *const *reasons,
                                  const char *error)
{
    json_t *res = json_object();
    json_t *failed = json_object();
    json_t *unres = json_object();
    json_t *kept = json_array();
    if (res == NULL || failed == NULL || unres == NULL || kept == NULL)
        goto fail;
    for (size_t i = 0; i < args->n_names; i++) {
        enum gv_ext_verdict v = verdicts ? verdicts[i] : GV_EXT_FIT;
        if (v == GV_EXT_FIT) {
            json_t *item = args->node_items ? json_incref(json_array_get(args->node_items, i))
                                            : json_string(args->names[i]);
            if (json_array_append_new(kept, item) != 0)
                goto fail;
            continue;
        }
        if (v == GV_EXT_DROPPED)
            continue;
        const char *why = reasons && reasons[i] ? reasons[i] : "does not fit";
        if (json_object_set_new(v == GV_EXT_FAILED ? failed : unres, args->names[i],
                                reason_json(why)) != 0)
            goto fail;
    }
    if (args->node_items != NULL) {
        json_t *list = json_pack("{s:{},s:o}", "metadata", "items", kept);
        kept = NULL;
        if (list == NULL || json_object_set_new(res, "Nodes", list) != 0 ||
            json_object_set_new(res, "NodeNames", json_null()) != 0)
            goto fail;
    } else {
        if (json_object_set_new(res, "Nodes", json_null()) != 0 ||
            json_object_set_new(res, "NodeNames", kept) != 0) {
            kept = NULL;
            goto fail;
        }
        kept = NULL;
    }
    json_object_set_new(res, "FailedNodes", failed);
    json_object_set_new(res, "FailedAndUnresolvableNodes", unres);
    failed = unres = NULL;
    if (json_object_set_new(res, "Error", reason_json(error ? error : "")) != 0)
        goto fail;
    return dump(res);
fail:
    json_decref(res);
    json_decref(failed);
    json_decref(unres);
    json_decref(kept);
    return NULL;
}

char *gv_ext_priorities_encode(const char *const *names, const long *scores, size_t n)
{
    json_t *list = json_array();
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        long s = scores[i] < 0 ? 0 : scores[i] > GV_EXT_MAX_SCORE ? GV_EXT_MAX_SCORE : scores[i];
        if (json_array_append_new(
                list, json_pack("{s:s,s:I}", "Host", names[i], "Score", (json_int_t)s)) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    return dump(list);
}

static gv_status get_string(json_t *root, const char *key, int required, char **out,
                            struct gv_error *err)
{
    json_t *v = gv_ext_json_get(root, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            return gv_error_set(err, GV_EINVAL, "ExtenderBindingArgs: \"%s\" missing", key);
        *out = strdup("");
    } else if (!json_is_string(v)) {
        return gv_error_set(err, GV_EINVAL, "ExtenderBindingArgs: \"%s\" must be a string", key);
    } else {
        if (required && json_string_length(v) == 0)
            return gv_error_set(err, GV_EINVAL, "ExtenderBindingArgs: \"%s\" is empty", key);
        if (strlen(json_string_value(v)) != json_string_length(v))
            return gv_error_set(err, GV_EINVAL, "ExtenderBindingArgs: \"%s\" contains NUL", key);
        *out = strdup(json_string_value(v));
    }
    return *out ? GV_OK : gv_error_set(err, GV_ENOMEM, "out of memory");
}

gv_status gv_ext_bind_args_parse(const char *body, size_t len, struct gv_ext_bind_args *out,
                                 struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    json_t *root = NULL;
    gv_status st = load_object(body, len, "ExtenderBindingArgs", &root, err);
    if (st != GV_OK)
        return st;
    if ((st = get_string(root, "PodName", 1, &out->pod_name, err)) != GV_OK ||
        (st = get_string(root, "PodNamespace", 0, &out->pod_namespace, err)) != GV_OK ||
        (st = get_string(root, "PodUID", 0, &out->pod_uid, err)) != GV_OK ||
        (st = get_string(root, "Node", 1, &out->node, err)) != GV_OK) {
        gv_ext_bind_args_clear(out);
        json_decref(root);
        return st;
    }
    if (out->pod_namespace[0] == '\0') {
        /* Go leaves an omitted namespace empty; the API means "default". */
        free(out->pod_namespace);
        out->pod_namespace = strdup("default");
        if (out->pod_namespace == NULL) {
            gv_ext_bind_args_clear(out);
            json_decref(root);
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        }
    }
    json_decref(root);
    return GV_OK;
}

void gv_ext_bind_args_clear(struct gv_ext_bind_args *args)
{
    free(args->pod_name);
    free(args->pod_namespace);
    free(args->pod_uid);
    free(args->node);
    memset(args, 0, sizeof(*args));
}

char *gv_ext_bind_result_encode(const char *error)
{
    return dump(json_pack("{s:o}", "Error", reason_json(error ? error : "")));
}
