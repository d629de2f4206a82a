/*
 * Parsing of what the API server sends that is not a plain object: Status
 * error bodies and the watch event stream.  Both come from the network, so
 * every field is checked and nothing here trusts sizes or types.
 */
#include <stdlib.h>
#include <string.h>

#include "kube/kube_internal.h"

gv_status gv_kube_status_code(long http_code, const char *reason)
{
    switch (http_code) {
    case 404:
        return GV_ENOTFOUND;
    case 409:
        /* One HTTP code, two meanings: create of an existing name versus a
         * stale resourceVersion / already-bound pod. */
        if (reason != NULL && strcmp(reason, "AlreadyExists") == 0)
            return GV_EEXIST;
        return GV_ECONFLICT;
    case 410:
        return GV_ERANGE;
    case 400:
    case 422:
        return GV_EINVAL;
    case 415:
        return GV_EUNSUPPORTED;
    case 408:
    case 504:
        return GV_ETIMEOUT;
    default:
        if (http_code == 429 || http_code >= 500)
            return GV_EUNAVAILABLE;
        return GV_EIO;
    }
}

static const char *http_reason_phrase(long code)
{
    switch (code) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
    }
}

/* Copies at most max bytes of printable text from s (error messages must
 * stay one readable line even when the server sends garbage). */
static void sanitize(char *dst, size_t dstlen, const char *s, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 1 < dstlen; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[j++] = (ch >= 0x20 && ch != 0x7f) || ch >= 0x80 ? (char)ch : ' ';
    }
    dst[j] = '\0';
}

gv_status gv_kube_http_error(long http_code, const char *body, size_t len, const char *what,
                             struct gv_error *err)
{
    const char *reason = NULL, *message = NULL;
    json_t *st = NULL;
    if (body != NULL && len > 0) {
        st = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
        const char *kind = json_string_value(json_object_get(st, "kind"));
        if (kind != NULL && strcmp(kind, "Status") == 0) {
            reason = json_string_value(json_object_get(st, "reason"));
            message = json_string_value(json_object_get(st, "message"));
        }
    }
    gv_status code = gv_kube_status_code(http_code, reason);
    char text[256];
    if (message != NULL)
        sanitize(text, sizeof(text), message, strlen(message));
    else if (body != NULL && len > 0)
        sanitize(text, sizeof(text), body, len);
    else
        text[0] = '\0';
    gv_error_set(err, code, "%s: HTTP %ld %s%s%s%s%s", what, http_code,
                 http_reason_phrase(http_code), reason != NULL ? " (" : "",
                 reason != NULL ? reason : "", reason != NULL ? ")" : "",
                 text[0] != '\0' ? ": " : "");
    if (err != NULL && text[0] != '\0') {
        size_t used = strlen(err->msg);
        snprintf(err->msg + used, sizeof(err->msg) - used, "%s", text);
    }
    json_decref(st);
    return code;
}

/* ------------------------------------------------------------------------
 * Watch stream
 */

static const struct {
    const char *name;
    gv_kube_event_type type;
} event_names[] = {
    {"ADDED", GV_KUBE_EVENT_ADDED},
    {"MODIFIED", GV_KUBE_EVENT_MODIFIED},
    {"DELETED", GV_KUBE_EVENT_DELETED},
    {"BOOKMARK", GV_KUBE_EVENT_BOOKMARK},
};

const char *gv_kube_event_name(gv_kube_event_type type)
{
    for (size_t i = 0; i < sizeof(event_names) / sizeof(event_names[0]); i++)
        if (event_names[i].type == type)
            return event_names[i].name;
    return "UNKNOWN";
}

void gv_kube_stream_init(struct gv_kube_stream *s, gv_kube_watch_fn fn, void *ud)
{
    memset(s, 0, sizeof(*s));
    s->max_line = GV_KUBE_STREAM_MAX_LINE;
    s->fn = fn;
    s->ud = ud;
}

void gv_kube_stream_release(struct gv_kube_stream *s)
{
    gv_buf_free(&s->line);
    free(s->last_rv);
    s->last_rv = NULL;
}

static gv_status stream_error_event(json_t *obj, struct gv_error *err)
{
    long code = 500;
    json_t *jc = json_object_get(obj, "code");
    if (json_is_integer(jc))
        code = (long)json_integer_value(jc);
    char *dump = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    gv_status st = gv_kube_http_error(code, dump, dump != NULL ? strlen(dump) : 0,
                                      "watch ERROR event", err);
    free(dump);
    return st;
}

static gv_status stream_line(struct gv_kube_stream *s, const char *line, size_t len,
                             struct gv_error *err)
{
    /* Tolerate blank lines and CR (keep-alive padding some proxies add). */
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (len == 0)
        return GV_OK;
    json_error_t jerr;
    json_t *ev = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (ev == NULL)
        return gv_error_set(err, GV_EPROTO, "watch event %zu: invalid JSON at column %d: %s",
                            s->events + 1, jerr.column, jerr.text);
    gv_status st = GV_OK;
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *obj = json_object_get(ev, "object");
    if (!json_is_object(ev) || type == NULL) {
        st = gv_error_set(err, GV_EPROTO, "watch event %zu: missing string \"type\"",
                          s->events + 1);
        goto out;
    }
    if (strcmp(type, "ERROR") == 0) {
        st = stream_error_event(json_is_object(obj) ? obj : NULL, err);
        goto out;
    }
    size_t i;
    for (i = 0; i < sizeof(event_names) / sizeof(event_names[0]); i++)
        if (strcmp(type, event_names[i].name) == 0)
            break;
    if (i == sizeof(event_names) / sizeof(event_names[0])) {
        char t[64];
        sanitize(t, sizeof(t), type, strlen(type));
        st = gv_error_set(err, GV_EPROTO, "watch event %zu: unknown type \"%s\"",
                          s->events + 1, t);
        goto out;
    }
    if (!json_is_object(obj)) {
        st = gv_error_set(err, GV_EPROTO, "watch event %zu (%s): \"object\" is not an object",
                          s->events + 1, type);
        goto out;
    }
    const char *rv =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    if (rv != NULL && rv[0] != '\0') {
        char *copy = strdup(rv);
        if (copy == NULL) {
            st = gv_error_set(err, GV_ENOMEM, "watch event: out of memory");
            goto out;
        }
        free(s->last_rv);
        s->last_rv = copy;
    }
    s->events++;
    if (s->fn != NULL && !s->fn(s->ud, event_names[i].type, obj))
        s->stopped = true;
out:
    json_decref(ev);
    return st;
}

gv_status gv_kube_stream_feed(struct gv_kube_stream *s, const char *data, size_t len,
                              struct gv_error *err)
{
    while (len > 0 && !s->stopped) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl != NULL ? (size_t)(nl - data) : len;
        if (s->line.len + take > s->max_line)
            return gv_error_set(err, GV_EPROTO, "watch event %zu exceeds %zu bytes",
                                s->events + 1, s->max_line);
        if (nl != NULL && s->line.len == 0) {
            /* Whole line in this chunk: parse in place, no copy. */
            gv_status st = stream_line(s, data, take, err);
            if (st != GV_OK)
                return st;
        } else {
            if (gv_buf_append(&s->line, data, take) != GV_OK)
                return gv_error_set(err, GV_ENOMEM, "watch stream: out of memory");
            if (nl != NULL) {
                gv_status st = stream_line(s, s->line.data, s->line.len, err);
                gv_buf_reset(&s->line);
                if (st != GV_OK)
                    return st;
            }
        }
        if (nl == NULL)
            break;
        data += take + 1;
        len -= take + 1;
    }
    return GV_OK;
}

gv_status gv_kube_stream_finish(struct gv_kube_stream *s, struct gv_error *err)
{
    if (s->stopped || s->line.len == 0)
        return GV_OK;
    /* The API server ends every event with a newline; a final event without
     * one is complete only if it parses, otherwise the stream was cut. */
    size_t l = s->line.len;
    json_t *probe = json_loadb(s->line.data, l, 0, NULL);
    gv_status st = probe == NULL ? gv_error_set(err, GV_EPROTO,
                                                "watch stream ended inside event %zu (%zu bytes)",
                                                s->events + 1, l)
                                 : stream_line(s, s->line.data, l, err);
    json_decref(probe);
    gv_buf_reset(&s->line);
    return st;
}
