/*
 * Fuzz target: kube LIST paging (gv_kube_list_pages / gv_kube_list) against
 * a server that answers with hostile pages.  The input is split at NUL
 * bytes into up to 8 response bodies (status line and headers added here),
 * served one per request on a unix socket by a peer thread.  Properties:
 *  - the loop ends: at most one request per page served (the peer answers
 *    nothing after its pages, and a page without "continue" ends paging);
 *  - each request after a page carrying a continue token sends exactly that
 *    token back (percent-decoded from the query);
 *  - gv_kube_list's merged result holds exactly the items of all pages.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "kube/gv_kube.h"
#include "fuzz_peer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
    size_t pages, items;
};

static gv_status on_page(void *ud, json_t *page, struct gv_error *err)
{
    (void)err;
    struct seen *s = ud;
    s->pages++;
    s->items += json_array_size(json_object_get(page, "items"));
    return GV_OK;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The continue= value of a request line, percent-decoded ("" when absent). */
static void query_continue(const char *req, char *out, size_t cap)
{
    out[0] = '\0';
    const char *eol = strstr(req, "\r\n");
    const char *q = strstr(req, "continue=");
    if (q == NULL || (eol != NULL && q > eol))
        return;
    q += 9;
    size_t o = 0;
    while (*q && *q != '&' && *q != ' ' && o + 1 < cap) {
        if (*q == '%' && hexval(q[1]) >= 0 && hexval(q[2]) >= 0) {
            out[o++] = (char)(hexval(q[1]) * 16 + hexval(q[2]));
            q += 3;
        } else {
            out[o++] = *q == '+' ? ' ' : *q;
            q++;
        }
    }
    out[o] = '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++)
        gv_log_set_level(GV_LOG_ERROR);
    if (size > 200000)
        return 0;
    struct fuzz_peer *p = calloc(1, sizeof(*p));
    char *answers[8] = {0};
    const char *bodies[8];
    size_t blen[8], n = 0;
    /* A leading '1' or '0' picks gv_kube_list_pages or gv_kube_list. */
    bool by_page = size > 0 && data[0] == '1';
    size_t start = size > 0 && (data[0] == '0' || data[0] == '1') ? 1 : 0;
    for (size_t off = start; off <= size && n < 8;) {
        const uint8_t *nul = memchr(data + off, '\0', size - off);
        size_t end = nul ? (size_t)(nul - data) : size;
        bodies[n] = (const char *)data + off;
        blen[n++] = end - off;
        off = end + 1;
        if (nul == NULL)
            break;
    }
    for (size_t i = 0; i < n; i++) {
        answers[i] = malloc(blen[i] + 160);
        int h = snprintf(answers[i], 160,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                         blen[i]);
        memcpy(answers[i] + h, bodies[i], blen[i]);
        p->answers[i] = answers[i];
        p->lens[i] = (size_t)h + blen[i];
    }
    p->n = n;
    struct gv_kube_config *cfg = NULL;
    struct gv_kube_client *c = NULL;
    struct gv_error err;
    if (fuzz_peer_start(p) != 0 || gv_kube_config_from_url("http://localhost", &cfg, &err) != GV_OK)
        abort();
    cfg->unix_socket = strdup(p->path);
    cfg->max_retries = 0;
    cfg->timeout_ms = 3000;
    if (gv_kube_client_new(cfg, &c, &err) != GV_OK)
        abort();
    struct gv_kube_list_opts opts = {.limit = 2};
    struct seen s = {0};
    json_t *merged = NULL;
    gv_status st;
    if (by_page) {
        st = gv_kube_list_pages(c, "/api/v1/pods", &opts, on_page, &s, &err);
    } else {
        st = gv_kube_list(c, "/api/v1/pods", &opts, &merged, &err);
    }
    gv_kube_client_free(c);
    gv_kube_config_free(cfg);
    fuzz_peer_stop(p);
    if (p->served > n)
        abort(); /* more requests than pages: paging did not end */
    if (st == GV_OK) {
        /* Each follow-up request carried the previous page's token. */
        size_t total = 0;
        for (size_t i = 0; i < p->served; i++) {
            json_t *pg = json_loadb(bodies[i], blen[i], 0, NULL);
            total += json_array_size(json_object_get(pg, "items"));
            const char *next =
                json_string_value(json_object_get(json_object_get(pg, "metadata"), "continue"));
            if (next != NULL && next[0] != '\0') {
                char got[4096];
                if (i + 1 >= p->served)
                    abort(); /* a token was given but not followed */
                query_continue(p->requests[i + 1], got, sizeof(got));
                if (strlen(next) < sizeof(got) - 1 && strcmp(got, next) != 0)
                    abort();
            }
            json_decref(pg);
        }
        if (merged != NULL && json_array_size(json_object_get(merged, "items")) != total)
            abort();
        if (merged == NULL && s.items != total)
            abort();
    }
    json_decref(merged);
    for (size_t i = 0; i < n; i++)
        free(answers[i]);
    free(p);
    return 0;
}
