/*
 * Request side of the Kubernetes API client: URLs, headers and auth, retries
 * with jittered exponential backoff on failures that a retry can cure
 * (connection errors, 429, 5xx) and never on other 4xx, and watches.  The
 * bytes travel through the transport in http.c (kube_http.h); any thread
 * may call at any time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_buf.h"
#include "common/gv_file.h"
#include "common/gv_log.h"
#include "common/gv_version.h"
#include "kube/kube_http.h"
#include "kube/kube_internal.h"

/* Responses larger than this are refused: a page of 500 objects is far
 * smaller, and the cap keeps a broken server from exhausting memory. */
#define MAX_RESPONSE_BYTES ((size_t)512 << 20)
/* Rotated service-account tokens are re-read at most this often. */
#define TOKEN_REREAD_SECONDS 60
/* A watch with a server-side timeout may run this much longer client-side
 * before it is considered dead. */
#define WATCH_GRACE_SECONDS 30

struct gv_kube_client {
    struct gv_http *http;
    long timeout_ms, backoff_initial_ms, backoff_max_ms;
    int max_retries;

    pthread_mutex_t token_mu;
    char *token;
    char *token_file;
    time_t token_read_at;
};

struct gv_kube_cancel {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool fired;
    int fd; /* eventfd, readable once fired: wakes a watch's poll() */
};

void gv_kube_transport_stats(struct gv_kube_client *c, struct gv_kube_transport_stats *out)
{
    struct gv_http_stats hs;
    gv_http_get_stats(c->http, &hs);
    *out = (struct gv_kube_transport_stats){
        .connections_opened = hs.connections_opened,
        .requests = hs.slots.taken,
        .requests_queued = hs.slots.queued,
        .queue_timeouts = hs.slots.timed_out,
        .queue_wait_seconds = (double)hs.slots.wait_us / 1e6,
        .most_queued = hs.slots.most_waiting,
        .connections_busy = hs.busy,
        .requests_waiting = hs.waiting,
    };
}

/* ------------------------------------------------------------------------
 * Small helpers
 */

static pthread_mutex_t rng_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rng_state;

/* xorshift64*: jitter only needs to decorrelate clients, not be secure. */
static uint64_t rng_next(void)
{
    pthread_mutex_lock(&rng_mu);
    if (rng_state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rng_state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() ^
                    0x9e3779b97f4a7c15ull;
    }
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
    pthread_mutex_unlock(&rng_mu);
    return r;
}

long gv_kube_backoff_ms(long initial_ms, long max_ms, unsigned attempt)
{
    if (initial_ms < 1)
        initial_ms = 1;
    if (max_ms < initial_ms)
        max_ms = initial_ms;
    long d = initial_ms;
    for (unsigned i = 0; i < attempt && d < max_ms; i++)
        d *= 2;
    if (d > max_ms)
        d = max_ms;
    long half = d / 2;
    return half + (long)(rng_next() % (uint64_t)(d - half + 1));
}

static char *xstrdup(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

static bool dup_into(char **dst, const char *src)
{
    if (src == NULL)
        return true;
    *dst = strdup(src);
    return *dst != NULL;
}

/* ------------------------------------------------------------------------
 * Cancel
 */

gv_status gv_kube_cancel_new(struct gv_kube_cancel **out, struct gv_error *err)
{
    struct gv_kube_cancel *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return gv_error_set(err, GV_ENOMEM, "kube cancel: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    c->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->fd < 0) {
        int e = errno;
        gv_kube_cancel_free(c);
        return gv_error_set(err, GV_EINTERNAL, "kube cancel: eventfd: %s", strerror(e));
    }
    *out = c;
    return GV_OK;
}

void gv_kube_cancel_fire(struct gv_kube_cancel *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    if (!c->fired) {
        uint64_t one = 1;
        ssize_t n = write(c->fd, &one, sizeof(one));
        (void)n; /* an eventfd counter cannot overflow from one write */
    }
    c->fired = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

bool gv_kube_cancel_fired(const struct gv_kube_cancel *c)
{
    if (c == NULL)
        return false;
    struct gv_kube_cancel *m = (struct gv_kube_cancel *)c;
    pthread_mutex_lock(&m->mu);
    bool f = m->fired;
    pthread_mutex_unlock(&m->mu);
    return f;
}

void gv_kube_cancel_free(struct gv_kube_cancel *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void gv_kube_deadline(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

bool gv_kube_cancel_sleep(struct gv_kube_cancel *c, long ms)
{
    if (c == NULL) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        return false;
    }
    struct timespec deadline;
    gv_kube_deadline(&deadline, ms);
    pthread_mutex_lock(&c->mu);
    while (!c->fired) {
        if (pthread_cond_timedwait(&c->cond, &c->mu, &deadline) == ETIMEDOUT)
            break;
    }
    bool f = c->fired;
    pthread_mutex_unlock(&c->mu);
    return f;
}

/* ------------------------------------------------------------------------
 * Client
 */

gv_status gv_kube_client_new(const struct gv_kube_config *cfg, struct gv_kube_client **out,
                             struct gv_error *err)
{
    *out = NULL;
    if (cfg == NULL || cfg->server == NULL || cfg->server[0] == '\0')
        return gv_error_set(err, GV_EINVAL, "kube client: no API server URL configured");
    struct gv_kube_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return gv_error_set(err, GV_ENOMEM, "kube client: out of memory");
    pthread_mutex_init(&c->token_mu, NULL);
    if (!dup_into(&c->token, cfg->token) || !dup_into(&c->token_file, cfg->token_file)) {
        gv_kube_client_free(c);
        return gv_error_set(err, GV_ENOMEM, "kube client: out of memory");
    }
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
    c->max_retries = cfg->max_retries >= 0 ? cfg->max_retries : 5;
    c->backoff_initial_ms = cfg->backoff_initial_ms > 0 ? cfg->backoff_initial_ms : 200;
    c->backoff_max_ms = cfg->backoff_max_ms > 0 ? cfg->backoff_max_ms : 5000;
    struct gv_http_opts ho = {
        .server = cfg->server,
        .unix_socket = cfg->unix_socket,
        .tls = {.ca_file = cfg->ca_file,
                .ca_data = cfg->ca_data,
                .cert_file = cfg->client_cert_file,
                .cert_data = cfg->client_cert_data,
                .key_file = cfg->client_key_file,
                .key_data = cfg->client_key_data,
                .insecure = cfg->insecure_skip_tls_verify},
        .connect_timeout_ms = cfg->connect_timeout_ms, /* the transport defaults it */
    };
    gv_status st = gv_http_new(&ho, &c->http, err);
    if (st != GV_OK) {
        gv_error_prefix(err, "kube client");
        gv_kube_client_free(c);
        return st;
    }
    *out = c;
    return GV_OK;
}

void gv_kube_client_free(struct gv_kube_client *c)
{
    if (c == NULL)
        return;
    gv_http_free(c->http);
    pthread_mutex_destroy(&c->token_mu);
    free(c->token);
    free(c->token_file);
    free(c);
}

/* Re-reads token_file when forced or when the last read is older than
 * TOKEN_REREAD_SECONDS, keeping the old token if the file is briefly
 * unreadable during rotation.  Returns true when the token changed.
 * Caller holds token_mu. */
static bool refresh_token_locked(struct gv_kube_client *c, bool force)
{
    if (c->token_file == NULL)
        return false;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!force && c->token != NULL && now.tv_sec - c->token_read_at < TOKEN_REREAD_SECONDS)
        return false;
    char *text = NULL;
    size_t len = 0;
    struct gv_error e;
    if (gv_file_read_all(c->token_file, &text, &len, &e) != GV_OK) {
        gv_warn("kube: cannot re-read token file: %s", e.msg);
        return false;
    }
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        text[--len] = '\0';
    bool changed = c->token == NULL || strcmp(c->token, text) != 0;
    free(c->token);
    c->token = text;
    c->token_read_at = now.tv_sec;
    return changed;
}

/* Current bearer token (heap copy, or NULL). */
static char *current_token(struct gv_kube_client *c)
{
    pthread_mutex_lock(&c->token_mu);
    refresh_token_locked(c, false);
    char *t = xstrdup(c->token);
    pthread_mutex_unlock(&c->token_mu);
    return t;
}

/* After a 401: a rotated token may be on disk already. */
static bool token_rotated(struct gv_kube_client *c)
{
    pthread_mutex_lock(&c->token_mu);
    bool changed = refresh_token_locked(c, true);
    pthread_mutex_unlock(&c->token_mu);
    return changed;
}

/* Appends s percent-encoded for a query value (RFC 3986: all but the
 * unreserved characters). */
static gv_status append_escaped(struct gv_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    gv_status st = GV_OK;
    for (; *s != '\0' && st == GV_OK; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            st = gv_buf_append(b, s, 1);
        } else {
            char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
            st = gv_buf_append(b, e, 3);
        }
    }
    return st;
}

/* "path ? query" from name/value pairs (values escaped, NULL values
 * skipped); the transport puts the server's prefix in front. */
static char *build_target(const char *path, const char *const *kv, size_t nkv)
{
    struct gv_buf b = {0};
    bool ok = gv_buf_append(&b, path, strlen(path)) == GV_OK;
    char sep = strchr(path, '?') != NULL ? '&' : '?';
    for (size_t i = 0; ok && i + 1 < nkv; i += 2) {
        if (kv[i + 1] == NULL)
            continue;
        ok = gv_buf_append(&b, &sep, 1) == GV_OK &&
             gv_buf_append(&b, kv[i], strlen(kv[i])) == GV_OK &&
             gv_buf_append(&b, "=", 1) == GV_OK && append_escaped(&b, kv[i + 1]) == GV_OK;
        sep = '&';
    }
    if (!ok) {
        gv_buf_free(&b);
        return NULL;
    }
    return b.data;
}

struct request {
    const char *method;
    const char *path;        /* for messages */
    const char *const *query; /* name/value pairs */
    size_t nquery;
    const char *content_type;
    const char *body;
    size_t body_len;
};

/* Target and header lines every request shares: Accept, Content-Type,
 * the bearer token.  Both strings are the caller's to free. */
/* Appends "name: [scheme ]value\r\n"; nothing when value is NULL or empty. */
static gv_status add_header(struct gv_buf *h, const char *name, const char *scheme,
                            const char *value)
{
    if (value == NULL || value[0] == '\0')
        return GV_OK;
    const char *parts[] = {name, ": ", scheme ? scheme : "", scheme ? " " : "", value, "\r\n"};
    gv_status st = GV_OK;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]) && st == GV_OK; i++)
        st = gv_buf_append(h, parts[i], strlen(parts[i]));
    return st;
}

static gv_status prepare(struct gv_kube_client *c, const struct request *r, char **target,
                         char **headers, struct gv_error *err)
{
    *headers = NULL;
    *target = build_target(r->path, r->query, r->nquery);
    char *tok = current_token(c);
    struct gv_buf h = {0};
    gv_status st;
    if (tok != NULL && strpbrk(tok, "\r\n") != NULL) {
        /* A token with a line break would inject headers: refuse it. */
        st = gv_error_set(err, GV_EINVAL, "%s %s: bearer token contains a line break",
                          r->method, r->path);
        goto fail;
    }
    st = *target == NULL ? GV_ENOMEM : add_header(&h, "Accept", NULL, "application/json");
    if (st == GV_OK)
        st = add_header(&h, "Content-Type", NULL, r->content_type);
    if (st == GV_OK)
        st = add_header(&h, "Authorization", "Bearer", tok);
    if (st != GV_OK) {
        st = gv_error_set(err, GV_ENOMEM, "%s %s: out of memory", r->method, r->path);
        goto fail;
    }
    free(tok);
    *headers = h.data;
    return GV_OK;
fail:
    free(tok);
    gv_buf_free(&h);
    free(*target);
    *target = NULL;
    return st;
}

static bool collect_body(void *ud, const char *data, size_t len)
{
    return gv_buf_append(ud, data, len) == GV_OK;
}

/*
 * Performs r with retries.  On success (2xx) *resp holds the body.  Errors:
 * the mapped API error for non-2xx answers, GV_EUNAVAILABLE/GV_ETIMEOUT for
 * transport failures once retries are exhausted.
 */
static gv_status perform(struct gv_kube_client *c, const struct request *r, struct gv_buf *resp,
                         struct gv_error *err)
{
    char what[300];
    snprintf(what, sizeof(what), "%s %s", r->method, r->path);
    gv_status st = GV_EINTERNAL;
    bool reauthed = false;
    for (unsigned attempt = 0;; attempt++) {
        char *target = NULL, *headers = NULL;
        gv_buf_free(resp);
        gv_buf_init(resp, MAX_RESPONSE_BYTES);
        st = prepare(c, r, &target, &headers, err);
        if (st != GV_OK)
            return st;
        struct gv_http_request hr = {.method = r->method,
                                     .target = target,
                                     .headers = headers,
                                     .body = r->body,
                                     .body_len = r->body_len,
                                     .timeout_ms = c->timeout_ms,
                                     .cancel_fd = -1};
        struct gv_http_result res;
        st = gv_http_exchange(c->http, &hr, collect_body, resp, &res, err);
        free(target);
        free(headers);
        bool retry = false;
        long min_delay = 0;
        if (resp->overflow) {
            st = gv_error_set(err, GV_EPROTO, "%s: response larger than %zu bytes", what,
                              MAX_RESPONSE_BYTES);
        } else if (st != GV_OK) {
            gv_error_prefix(err, "%s", what);
            retry = res.retryable;
        } else if (res.status >= 200 && res.status < 300) {
            st = GV_OK;
        } else {
            st = gv_kube_http_error(res.status, resp->data, resp->len, what, err);
            retry = res.status == 429 || res.status >= 500;
            if (retry && res.retry_after_s > 0)
                min_delay = res.retry_after_s > 3600 ? 3600000L : res.retry_after_s * 1000L;
        }
        if (res.status == 401 && !reauthed && token_rotated(c)) {
            /* Rotated service-account token: retry once at once. */
            reauthed = true;
            attempt--;
            continue;
        }
        if (!retry || attempt >= (unsigned)c->max_retries) {
            if (retry && err != NULL)
                gv_error_prefix(err, "after %u attempts", attempt + 1);
            return st;
        }
        long delay = gv_kube_backoff_ms(c->backoff_initial_ms, c->backoff_max_ms, attempt);
        if (delay < min_delay)
            delay = min_delay < c->backoff_max_ms ? min_delay : c->backoff_max_ms;
        gv_debug("kube: %s failed (%s), retry %u in %ld ms", what, err ? err->msg : "",
                 attempt + 1, delay);
        gv_kube_cancel_sleep(NULL, delay);
    }
}

/* Runs a request whose answer is a JSON object; *out may be NULL to drop it. */
static gv_status request_json(struct gv_kube_client *c, const struct request *r, json_t **out,
                              struct gv_error *err)
{
    if (out != NULL)
        *out = NULL;
    struct gv_buf resp = {0};
    gv_status st = perform(c, r, &resp, err);
    if (st != GV_OK)
        goto done;
    if (out != NULL) {
        json_error_t jerr;
        json_t *j = json_loadb(resp.data != NULL ? resp.data : "", resp.len, 0, &jerr);
        if (!json_is_object(j)) {
            json_decref(j);
            st = j == NULL ? gv_error_set(err, GV_EPROTO,
                                          "%s %s: malformed JSON in response at line %d "
                                          "column %d: %s",
                                          r->method, r->path, jerr.line, jerr.column, jerr.text)
                           : gv_error_set(err, GV_EPROTO,
                                          "%s %s: response is not a JSON object", r->method,
                                          r->path);
            goto done;
        }
        *out = j;
    }
done:
    gv_buf_free(&resp);
    return st;
}

static gv_status check_path(const char *what, const char *path, struct gv_error *err)
{
    if (path == NULL || path[0] != '/')
        return gv_error_set(err, GV_EINVAL, "%s: API path \"%s\" must start with '/'", what,
                            path != NULL ? path : "(null)");
    return GV_OK;
}

gv_status gv_kube_get(struct gv_kube_client *c, const char *path, json_t **out,
                      struct gv_error *err)
{
    gv_status st = check_path("GET", path, err);
    if (st != GV_OK)
        return st;
    struct request r = {.method = "GET", .path = path};
    return request_json(c, &r, out, err);
}

gv_status gv_kube_get_text(struct gv_kube_client *c, const char *path, char **out, size_t *len,
                           struct gv_error *err)
{
    *out = NULL;
    gv_status st = check_path("GET", path, err);
    if (st != GV_OK)
        return st;
    struct request r = {.method = "GET", .path = path};
    struct gv_buf resp = {0};
    if ((st = perform(c, &r, &resp, err)) == GV_OK) {
        *out = malloc(resp.len + 1);
        if (*out == NULL) {
            st = gv_error_set(err, GV_ENOMEM, "GET %s: out of memory", path);
        } else {
            if (resp.len > 0)
                memcpy(*out, resp.data, resp.len);
            (*out)[resp.len] = '\0';
            if (len != NULL)
                *len = resp.len;
        }
    }
    gv_buf_free(&resp);
    return st;
}

gv_status gv_kube_list_pages(struct gv_kube_client *c, const char *path,
                             const struct gv_kube_list_opts *opts, gv_kube_page_fn fn, void *ud,
                             struct gv_error *err)
{
    gv_status st = check_path("LIST", path, err);
    if (st != GV_OK)
        return st;
    char limit[32] = "";
    if (opts != NULL && opts->limit > 0)
        snprintf(limit, sizeof(limit), "%ld", opts->limit);
    char *cont = NULL;
    do {
        const char *q[] = {
            "labelSelector", opts ? opts->label_selector : NULL,
            "fieldSelector", opts ? opts->field_selector : NULL,
            "limit",         limit[0] ? limit : NULL,
            "continue",      cont,
        };
        struct request r = {.method = "GET", .path = path, .query = q, .nquery = 8};
        json_t *pg = NULL;
        st = request_json(c, &r, &pg, err);
        free(cont);
        cont = NULL;
        if (st != GV_OK)
            break;
        json_t *items = json_object_get(pg, "items");
        if (items == NULL || json_is_null(items)) {
            /* Empty lists may come without "items". */
            json_object_set_new(pg, "items", json_array());
        } else if (!json_is_array(items)) {
            json_decref(pg);
            st = gv_error_set(err, GV_EPROTO, "LIST %s: \"items\" is not an array", path);
            break;
        }
        json_t *md = json_object_get(pg, "metadata");
        const char *next = json_string_value(json_object_get(md, "continue"));
        if (next != NULL && next[0] != '\0' && (cont = strdup(next)) == NULL) {
            json_decref(pg);
            st = gv_error_set(err, GV_ENOMEM, "LIST %s: out of memory", path);
            break;
        }
        if (json_is_object(md))
            json_object_del(md, "continue");
        st = fn(ud, pg, err);
        json_decref(pg);
    } while (st == GV_OK && cont != NULL);
    free(cont);
    return st;
}

struct merge {
    json_t *result;
};

static gv_status merge_page(void *ud, json_t *page, struct gv_error *err)
{
    struct merge *m = ud;
    if (m->result == NULL) {
        m->result = json_incref(page);
        return GV_OK;
    }
    if (json_array_extend(json_object_get(m->result, "items"), json_object_get(page, "items")) !=
        0)
        return gv_error_set(err, GV_ENOMEM, "LIST: out of memory");
    return GV_OK;
}

gv_status gv_kube_list(struct gv_kube_client *c, const char *path,
                       const struct gv_kube_list_opts *opts, json_t **out,
                       struct gv_error *err)
{
    struct merge m = {NULL};
    gv_status st = gv_kube_list_pages(c, path, opts, merge_page, &m, err);
    if (st != GV_OK) {
        json_decref(m.result);
        m.result = NULL;
    }
    *out = m.result;
    return st;
}

static gv_status send_body(struct gv_kube_client *c, const char *method, const char *path,
                           const char *ctype, const json_t *body, json_t **out,
                           struct gv_error *err)
{
    if (out != NULL)
        *out = NULL;
    gv_status st = check_path(method, path, err);
    if (st != GV_OK)
        return st;
    if (body == NULL)
        return gv_error_set(err, GV_EINVAL, "%s %s: no body", method, path);
    char *text = json_dumps(body, JSON_COMPACT);
    if (text == NULL)
        return gv_error_set(err, GV_ENOMEM, "%s %s: cannot encode body", method, path);
    struct request r = {.method = method,
                        .path = path,
                        .content_type = ctype,
                        .body = text,
                        .body_len = strlen(text)};
    st = request_json(c, &r, out, err);
    free(text);
    return st;
}

gv_status gv_kube_create(struct gv_kube_client *c, const char *path, const json_t *body,
                         json_t **out, struct gv_error *err)
{
    return send_body(c, "POST", path, "application/json", body, out, err);
}

gv_status gv_kube_replace(struct gv_kube_client *c, const char *path, const json_t *body,
                          json_t **out, struct gv_error *err)
{
    return send_body(c, "PUT", path, "application/json", body, out, err);
}

gv_status gv_kube_patch(struct gv_kube_client *c, const char *path, gv_kube_patch_type type,
                        const json_t *body, json_t **out, struct gv_error *err)
{
    const char *ctype;
    switch (type) {
    case GV_KUBE_PATCH_MERGE:
        ctype = "application/merge-patch+json";
        break;
    case GV_KUBE_PATCH_JSON:
        ctype = "application/json-patch+json";
        break;
    case GV_KUBE_PATCH_STRATEGIC:
        ctype = "application/strategic-merge-patch+json";
        break;
    default:
        return gv_error_set(err, GV_EINVAL, "PATCH %s: unknown patch type %d", path, (int)type);
    }
    return send_body(c, "PATCH", path, ctype, body, out, err);
}

gv_status gv_kube_patch_annotations(struct gv_kube_client *c, const char *path,
                                    const char *resource_version, const char *const *keys,
                                    const char *const *values, size_t n, json_t **out,
                                    struct gv_error *err)
{
    json_t *ann = json_object();
    json_t *md = json_object();
    json_t *patch = json_object();
    gv_status st = GV_ENOMEM;
    if (ann == NULL || md == NULL || patch == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (keys[i] == NULL) {
            st = gv_error_set(err, GV_EINVAL, "PATCH %s: annotation key %zu is NULL", path, i);
            goto fail;
        }
        json_t *v = values[i] != NULL ? json_string(values[i]) : json_null();
        if (v == NULL) {
            st = gv_error_set(err, GV_EINVAL,
                              "PATCH %s: annotation %s value is not valid UTF-8", path, keys[i]);
            goto fail;
        }
        if (json_object_set_new(ann, keys[i], v) != 0)
            goto fail;
    }
    if (json_object_set(md, "annotations", ann) != 0 ||
        (resource_version != NULL &&
         json_object_set_new(md, "resourceVersion", json_string(resource_version)) != 0) ||
        json_object_set(patch, "metadata", md) != 0)
        goto fail;
    st = gv_kube_patch(c, path, GV_KUBE_PATCH_MERGE, patch, out, err);
    json_decref(ann);
    json_decref(md);
    json_decref(patch);
    return st;
fail:
    json_decref(ann);
    json_decref(md);
    json_decref(patch);
    if (st == GV_ENOMEM)
        gv_error_set(err, GV_ENOMEM, "PATCH %s: out of memory", path);
    return st;
}

gv_status gv_kube_delete(struct gv_kube_client *c, const char *path, json_t **out,
                         struct gv_error *err)
{
    gv_status st = check_path("DELETE", path, err);
    if (st != GV_OK)
        return st;
    struct request r = {.method = "DELETE", .path = path};
    return request_json(c, &r, out, err);
}

gv_status gv_kube_delete_uid(struct gv_kube_client *c, const char *path, const char *uid,
                             json_t **out, struct gv_error *err)
{
    if (uid == NULL || uid[0] == '\0')
        return gv_error_set(err, GV_EINVAL, "DELETE %s: a uid precondition is required",
                            path ? path : "(null)");
    gv_status st = check_path("DELETE", path, err);
    if (st != GV_OK)
        return st;
    json_t *opts = json_pack("{s:s, s:s, s:{s:s}}", "kind", "DeleteOptions", "apiVersion", "v1",
                             "preconditions", "uid", uid);
    char *body = opts ? json_dumps(opts, JSON_COMPACT) : NULL;
    json_decref(opts);
    if (body == NULL)
        return gv_error_set(err, GV_ENOMEM, "DELETE %s: out of memory", path);
    struct request r = {.method = "DELETE", .path = path, .content_type = "application/json",
                        .body = body, .body_len = strlen(body)};
    st = request_json(c, &r, out, err);
    free(body);
    return st;
}

gv_status gv_kube_bind_pod(struct gv_kube_client *c, const char *namespace_, const char *name,
                           const char *uid, const char *node, struct gv_error *err)
{
    return gv_kube_bind_pod_annotated(c, namespace_, name, uid, NULL, node, NULL, err);
}

gv_status gv_kube_bind_pod_annotated(struct gv_kube_client *c, const char *namespace_,
                                     const char *name, const char *uid, const char *rv,
                                     const char *node, json_t *annotations, struct gv_error *err)
{
    if (namespace_ == NULL || name == NULL || node == NULL)
        return gv_error_set(err, GV_EINVAL, "bind: namespace, name and node are required");
    char path[1024];
    int n = snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/binding", namespace_,
                     name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return gv_error_set(err, GV_EINVAL, "bind: pod name too long");
    json_t *md = json_pack("{s:s, s:s}", "name", name, "namespace", namespace_);
    if (md != NULL && uid != NULL)
        json_object_set_new(md, "uid", json_string(uid));
    if (md != NULL && rv != NULL)
        json_object_set_new(md, "resourceVersion", json_string(rv));
    if (md != NULL && annotations != NULL)
        json_object_set(md, "annotations", annotations);
    json_t *b = md == NULL ? NULL
                           : json_pack("{s:s, s:s, s:o, s:{s:s, s:s, s:s}}", "apiVersion", "v1",
                                       "kind", "Binding", "metadata", md, "target",
                                       "apiVersion", "v1", "kind", "Node", "name", node);
    if (b == NULL)
        return gv_error_set(err, GV_EINVAL, "bind %s/%s: cannot build Binding (invalid UTF-8?)",
                            namespace_, name);
    gv_status st = gv_kube_create(c, path, b, NULL, err);
    json_decref(b);
    if (st == GV_ECONFLICT) {
        /* Already bound.  If to this node (our own earlier attempt whose
         * answer was lost, then retried), the bind did happen: success. */
        struct gv_error gerr;
        json_t *pod = NULL;
        path[strlen(path) - strlen("/binding")] = '\0';
        if (gv_kube_get(c, path, &pod, &gerr) == GV_OK) {
            const char *bound =
                json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
            const char *puid =
                json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
            if (bound != NULL && strcmp(bound, node) == 0 &&
                (uid == NULL || (puid != NULL && strcmp(puid, uid) == 0))) {
                gv_error_clear(err);
                st = GV_OK;
            }
        }
        json_decref(pod);
    }
    return st;
}

/* ------------------------------------------------------------------------
 * Watch: one long response on a dedicated connection, decoded as it
 * arrives; a cancel wakes the transport's poll() through the eventfd.
 */

struct watch_ctx {
    struct gv_http_result *res;
    struct gv_kube_stream stream;
    struct gv_buf errbody; /* body of a non-200 answer */
    gv_status st;
    struct gv_error err;
};

static bool watch_body(void *ud, const char *p, size_t len)
{
    struct watch_ctx *w = ud;
    if (w->res->status != 200) {
        /* Error bodies are small Status objects; cap what we keep. */
        if (w->errbody.len < 65536)
            gv_buf_append(&w->errbody, p, len);
        return true;
    }
    w->st = gv_kube_stream_feed(&w->stream, p, len, &w->err);
    return w->st == GV_OK && !w->stream.stopped;
}

gv_status gv_kube_watch(struct gv_kube_client *c, const char *path,
                        const struct gv_kube_watch_opts *opts, gv_kube_watch_fn fn, void *ud,
                        char **last_rv, struct gv_error *err)
{
    gv_status st = check_path("WATCH", path, err);
    if (st != GV_OK)
        return st;
    struct gv_kube_watch_opts none = {0};
    if (opts == NULL)
        opts = &none;
    char tmo[32] = "";
    if (opts->timeout_seconds > 0)
        snprintf(tmo, sizeof(tmo), "%ld", opts->timeout_seconds);
    const char *rv = opts->resource_version != NULL && opts->resource_version[0] != '\0'
                         ? opts->resource_version
                         : NULL;
    const char *q[] = {
        "watch",               "1",
        "labelSelector",       opts->label_selector,
        "fieldSelector",       opts->field_selector,
        "resourceVersion",     rv,
        "allowWatchBookmarks", opts->bookmarks ? "true" : NULL,
        "timeoutSeconds",      tmo[0] ? tmo : NULL,
    };
    struct request r = {.method = "GET", .path = path, .query = q, .nquery = 12};
    char what[300];
    snprintf(what, sizeof(what), "WATCH %s", path);

    struct gv_http_result res;
    struct watch_ctx w;
    memset(&w, 0, sizeof(w));
    w.res = &res;
    gv_kube_stream_init(&w.stream, fn, ud);
    char *target = NULL, *headers = NULL;
    st = prepare(c, &r, &target, &headers, err);
    if (st != GV_OK)
        goto out;
    struct gv_http_request hr = {
        .method = "GET",
        .target = target,
        .headers = headers,
        .timeout_ms = opts->timeout_seconds > 0
                          ? (opts->timeout_seconds + WATCH_GRACE_SECONDS) * 1000L
                          : 0,
        .cancel_fd = opts->cancel != NULL ? opts->cancel->fd : -1,
        .dedicated = true,
    };
    struct gv_error terr;
    gv_status tst = gv_http_exchange(c->http, &hr, watch_body, &w, &res, &terr);
    if (res.cancelled || w.stream.stopped) {
        st = GV_OK;
    } else if (w.st != GV_OK) {
        /* The decoder refused the stream (malformed event, ERROR event). */
        st = w.st;
        if (err != NULL) {
            *err = w.err;
            gv_error_prefix(err, "%s", what);
        }
    } else if (res.status != 0 && res.status != 200) {
        st = gv_kube_http_error(res.status, w.errbody.data, w.errbody.len, what, err);
        if (res.status == 401)
            token_rotated(c); /* the caller's next watch uses a rotated token */
    } else if (tst != GV_OK) {
        st = tst;
        if (err != NULL) {
            *err = terr;
            gv_error_prefix(err, "%s", what);
        }
    } else {
        st = gv_kube_stream_finish(&w.stream, &w.err);
        if (st != GV_OK && err != NULL) {
            *err = w.err;
            gv_error_prefix(err, "%s", what);
        }
    }
out:
    if (last_rv != NULL && w.stream.last_rv != NULL) {
        free(*last_rv);
        *last_rv = w.stream.last_rv;
        w.stream.last_rv = NULL;
    }
    free(target);
    free(headers);
    gv_buf_free(&w.errbody);
    gv_kube_stream_release(&w.stream);
    return st;
}
