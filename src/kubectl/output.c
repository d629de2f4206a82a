/* Output of kubectl-gpuvisor: aligned tables, JSON, YAML (libyaml). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "kubectl/gv_kubectl.h"

void kc_table_init(struct kc_table *t, size_t ncol)
{
    memset(t, 0, sizeof(*t));
    t->ncol = ncol;
}

/*
 * A cell prints no control characters: C0 (escape, bell, carriage return,
 * newline...), DEL and C1 (U+0080 to U+009F, two bytes in UTF-8) each
 * become one '?'.  Some cells carry text a tenant wrote (a pending pod's
 * hold annotation names any node it likes), and an escape sequence there
 * would act on the terminal of whoever runs the plugin (clear the screen,
 * hide rows, set the clipboard through OSC 52).  -o json and -o yaml
 * escape such characters themselves (jansson, libyaml).
 */
void kc_printable(char *s)
{
    unsigned char *r = (unsigned char *)s, *w = r;
    while (*r) {
        if (*r < 0x20 || *r == 0x7f) {
            *w++ = '?';
            r++;
        } else if (r[0] == 0xc2 && r[1] >= 0x80 && r[1] <= 0x9f) {
            *w++ = '?';
            r += 2;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

void kc_table_row(struct kc_table *t, ...)
{
    if (t->nrow == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        char **cells = realloc(t->cells, cap * t->ncol * sizeof(*cells));
        if (cells == NULL)
            return;
        t->cells = cells;
        t->cap = cap;
    }
    va_list ap;
    va_start(ap, t);
    for (size_t i = 0; i < t->ncol; i++) {
        const char *s = va_arg(ap, const char *);
        char *cell = strdup(s ? s : "");
        if (cell != NULL)
            kc_printable(cell);
        t->cells[t->nrow * t->ncol + i] = cell;
    }
    va_end(ap);
    t->nrow++;
}

void kc_table_print(struct kc_table *t, FILE *out)
{
    size_t *w = calloc(t->ncol, sizeof(*w));
    if (w == NULL)
        return;
    for (size_t r = 0; r < t->nrow; r++)
        for (size_t i = 0; i < t->ncol; i++) {
            const char *c = t->cells[r * t->ncol + i];
            size_t n = c ? strlen(c) : 0;
            /* count UTF-8 characters, not bytes, for alignment */
            for (size_t k = 0; c && c[k]; k++)
                if (((unsigned char)c[k] & 0xC0) == 0x80)
                    n--;
            if (n > w[i])
                w[i] = n;
        }
    for (size_t r = 0; r < t->nrow; r++) {
        /* trailing empty cells print nothing, so no line ends in spaces */
        size_t last = t->ncol;
        while (last > 0 && (t->cells[r * t->ncol + last - 1] == NULL ||
                            t->cells[r * t->ncol + last - 1][0] == '\0'))
            last--;
        for (size_t i = 0; i < last; i++) {
            const char *c = t->cells[r * t->ncol + i] ? t->cells[r * t->ncol + i] : "";
            size_t n = strlen(c);
            for (size_t k = 0; c[k]; k++)
                if (((unsigned char)c[k] & 0xC0) == 0x80)
                    n--;
            fputs(c, out);
            if (i + 1 < last)
                fprintf(out, "%*s", (int)(w[i] - n + 3), "");
        }
        fputc('\n', out);
    }
    free(w);
}

void kc_table_free(struct kc_table *t)
{
    for (size_t i = 0; i < t->nrow * t->ncol; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof(*t));
}

void kc_fmt_mib(char *buf, size_t cap, double mib)
{
    if (mib >= 1024)
        snprintf(buf, cap, "%.1fGi", mib / 1024);
    else
        snprintf(buf, cap, "%.0fMi", mib);
}

static int yaml_write(void *ud, unsigned char *buf, size_t size)
{
    return fwrite(buf, 1, size, ud) == size;
}

static int emit_scalar(yaml_emitter_t *e, const char *text, bool plain_ok)
{
    yaml_event_t ev;
    yaml_scalar_event_initialize(
        &ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text), plain_ok, !plain_ok,
        plain_ok ? YAML_ANY_SCALAR_STYLE : YAML_DOUBLE_QUOTED_SCALAR_STYLE);
    return yaml_emitter_emit(e, &ev);
}

/* Would a YAML reader take this string for a number, boolean or null?  Then
 * it is quoted, so "true" or "1.0" stays a string. */
static bool looks_typed(const char *s)
{
    static const char *const words[] = {"true", "false", "yes", "no", "on", "off",
                                        "null", "~",     "y",   "n",  NULL};
    if (*s == '\0')
        return true;
    for (size_t i = 0; words[i] != NULL; i++)
        if (strcasecmp(s, words[i]) == 0)
            return true;
    char *end = NULL;
    strtod(s, &end);
    return end != s && *end == '\0';
}

static int emit_value(yaml_emitter_t *e, json_t *v)
{
    yaml_event_t ev;
    char num[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        if (!yaml_emitter_emit(e, &ev))
            return 0;
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            if (!emit_scalar(e, k, true) || !emit_value(e, x))
                return 0;
        }
        yaml_mapping_end_event_initialize(&ev);
        return yaml_emitter_emit(e, &ev);
    }
    case JSON_ARRAY: {
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        if (!yaml_emitter_emit(e, &ev))
            return 0;
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (!emit_value(e, x))
                return 0;
        }
        yaml_sequence_end_event_initialize(&ev);
        return yaml_emitter_emit(e, &ev);
    }
    case JSON_STRING:
        return emit_scalar(e, json_string_value(v), !looks_typed(json_string_value(v)));
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return emit_scalar(e, num, true);
    case JSON_REAL:
        snprintf(num, sizeof(num), "%.17g", json_real_value(v)); /* round-trips, as jansson's */
        return emit_scalar(e, num, true);
    case JSON_TRUE:
        return emit_scalar(e, "true", true);
    case JSON_FALSE:
        return emit_scalar(e, "false", true);
    default:
        return emit_scalar(e, "null", true);
    }
}

int kc_emit(json_t *doc, enum kc_output fmt, FILE *out)
{
    if (fmt == KC_OUT_JSON) {
        if (json_dumpf(doc, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
            return -1;
        fputc('\n', out);
        return 0;
    }
    yaml_emitter_t e;
    yaml_event_t ev;
    if (!yaml_emitter_initialize(&e))
        return -1;
    yaml_emitter_set_output(&e, yaml_write, out);
    yaml_emitter_set_unicode(&e, 1);
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    int ok = yaml_emitter_emit(&e, &ev);
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    ok = ok && yaml_emitter_emit(&e, &ev) && emit_value(&e, doc);
    yaml_document_end_event_initialize(&ev, 1);
    ok = ok && yaml_emitter_emit(&e, &ev);
    yaml_stream_end_event_initialize(&ev);
    ok = ok && yaml_emitter_emit(&e, &ev);
    yaml_emitter_delete(&e);
    return ok ? 0 : -1;
}
