/*
 * Prometheus text exposition (format 0.0.4) reader for `kubectl gpuvisor
 * top`: the node agents' /metrics arrive through the API server and are
 * parsed here without trusting them.  Only samples matter: comments and
 * TYPE/HELP lines are skipped, a malformed line is counted and skipped (one
 * bad line must not hide a node's other series), label values are
 * unescaped in place.  Fuzzed: tests/kubectl/fuzz_expfmt.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kubectl/gv_kubectl.h"

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
static bool parse_line(char *p, char *end, struct kc_sample *s)
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
            if (p == end || !name_start(*p) || s->n_labels == KC_EXP_MAX_LABELS)
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

size_t kc_expfmt_parse(char *text, size_t len, kc_sample_fn fn, void *ud)
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
        struct kc_sample s;
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

const char *kc_sample_label(const struct kc_sample *s, const char *name)
{
    for (size_t i = 0; i < s->n_labels; i++)
        if (strcmp(s->label_names[i], name) == 0)
            return s->label_values[i];
    return NULL;
}
