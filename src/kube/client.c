/*
 * HTTP side of the Kubernetes API client: one curl easy handle per call
 * (so any thread may call at any time), a curl share object for the
 * connection cache, DNS and TLS sessions (so calls still reuse keep-alive
 * connections), retries with jittered exponential backoff on failures that
 * a retry can cure (connection errors, 429, 5xx) and never on other 4xx.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/gv_buf.h"
#include "common/gv_file.h"
#include "common/gv_log.h"
#include "common/gv_version.h"
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
    char *server;
    char *unix_socket;
    char *ca_file, *cert_file, *key_file;
    char *ca_data, *cert_data, *key_data;
    bool insecure;
    long timeout_ms, connect_timeout_ms, backoff_initial_ms, backoff_max_ms;
    int max_retries;

    pthread_mutex_t token_mu;
    char *token;
    char *token_file;
    time_t token_read_at;

    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
};

struct gv_kube_cancel {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool fired;
    CURLM *active; /* the watch's multi handle while one runs */
};

/* ------------------------------------------------------------------------
 * Small helpers
 */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

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
    *out = c;
    return GV_OK;
}

void gv_kube_cancel_fire(struct gv_kube_cancel *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->fired = true;
    if (c->active != NULL)
        curl_multi_wakeup(c->active);
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

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h;
    (void)access;
    struct gv_kube_client *c = ud;
    pthread_mutex_lock(&c->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    struct gv_kube_client *c = ud;
    pthread_mutex_unlock(&c->share_mu[data]);
}

gv_status gv_kube_client_new(const struct gv_kube_config *cfg, struct gv_kube_client **out,
                             struct gv_error *err)
{
    *out = NULL;
    if (cfg == NULL || cfg->server == NULL || cfg->server[0] == '\0')
        return gv_error_set(err, GV_EINVAL, "kube client: no API server URL configured");
    if (strncmp(cfg->server, "http://", 7) != 0 && strncmp(cfg->server, "https://", 8) != 0)
        return gv_error_set(err, GV_EINVAL,
                            "kube client: server \"%s\" is not an http:// or https:// URL",
                            cfg->server);
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return gv_error_set(err, GV_EINTERNAL, "kube client: curl_global_init: %s",
                            curl_easy_strerror(curl_init_rc));
    struct gv_kube_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return gv_error_set(err, GV_ENOMEM, "kube client: out of memory");
    pthread_mutex_init(&c->token_mu, NULL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_mu[i], NULL);
    if (!dup_into(&c->server, cfg->server) || !dup_into(&c->unix_socket, cfg->unix_socket) ||
        !dup_into(&c->ca_file, cfg->ca_file) || !dup_into(&c->ca_data, cfg->ca_data) ||
        !dup_into(&c->cert_file, cfg->client_cert_file) ||
        !dup_into(&c->cert_data, cfg->client_cert_data) ||
        !dup_into(&c->key_file, cfg->client_key_file) ||
        !dup_into(&c->key_data, cfg->client_key_data) || !dup_into(&c->token, cfg->token) ||
        !dup_into(&c->token_file, cfg->token_file))
        goto nomem;
    /* Strip a trailing slash so "server + path" never doubles it. */
    size_t sl = strlen(c->server);
    while (sl > 0 && c->server[sl - 1] == '/')
        c->server[--sl] = '\0';
    c->insecure = cfg->insecure_skip_tls_verify;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
    c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 5000;
    c->max_retries = cfg->max_retries >= 0 ? cfg->max_retries : 5;
    c->backoff_initial_ms = cfg->backoff_initial_ms > 0 ? cfg->backoff_initial_ms : 200;
    c->backoff_max_ms = cfg->backoff_max_ms > 0 ? cfg->backoff_max_ms : 5000;

    c->share = curl_share_init();
    if (c->share == NULL)
        goto nomem;
    curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    *out = c;
    return GV_OK;
nomem:
    gv_kube_client_free(c);
    return gv_error_set(err, GV_ENOMEM, "kube client: out of memory");
}

void gv_kube_client_free(struct gv_kube_client *c)
{
    if (c == NULL)
        return;
    if (c->share != NULL)
        curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_mu[i]);
    pthread_mutex_destroy(&c->token_mu);
    free(c->server);
    free(c->unix_socket);
    free(c->ca_file);
    free(c->ca_data);
    free(c->cert_file);
    free(c->cert_data);
    free(c->key_file);
    free(c->key_data);
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

/* Builds "server + path ? query" where query comes from name/value pairs
 * (values escaped, NULL values skipped). */
static char *build_url(struct gv_kube_client *c, CURL *h, const char *path,
                       const char *const *kv, size_t nkv)
{
    struct gv_buf b = {0};
    bool ok = gv_buf_append(&b, c->server, strlen(c->server)) == GV_OK &&
              gv_buf_append(&b, path, strlen(path)) == GV_OK;
    char sep = strchr(path, '?') != NULL ? '&' : '?';
    for (size_t i = 0; ok && i + 1 < nkv; i += 2) {
        if (kv[i + 1] == NULL)
            continue;
        char *esc = curl_easy_escape(h, kv[i + 1], 0);
        ok = esc != NULL && gv_buf_append(&b, &sep, 1) == GV_OK &&
             gv_buf_append(&b, kv[i], strlen(kv[i])) == GV_OK &&
             gv_buf_append(&b, "=", 1) == GV_OK && gv_buf_append(&b, esc, strlen(esc)) == GV_OK;
        curl_free(esc);
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

/* Sets the options every request shares: TLS, auth, timeouts. */
static gv_status setup_handle(struct gv_kube_client *c, CURL *h, const struct request *r,
                              struct curl_slist **headers, char **url_out, char *errbuf,
                              struct gv_error *err)
{
    char *url = build_url(c, h, r->path, r->query, r->nquery);
    if (url == NULL)
        return gv_error_set(err, GV_ENOMEM, "%s %s: out of memory", r->method, r->path);
    *url_out = url;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_SHARE, c->share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "gpuvisor/" GV_VERSION);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    /* HTTP/1.1 on purpose: each watch gets its own TCP connection, so TCP
     * keepalive detects a dead one, instead of every watch stalling on one
     * shared HTTP/2 connection (client-go needed HTTP/2 pings for that). */
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    }
    if (c->unix_socket != NULL)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->unix_socket);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (c->ca_file != NULL)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->ca_data != NULL) {
        struct curl_blob blob = {c->ca_data, strlen(c->ca_data), CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    }
    if (c->cert_file != NULL)
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
    if (c->cert_data != NULL) {
        struct curl_blob blob = {c->cert_data, strlen(c->cert_data), CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
    }
    if (c->key_file != NULL)
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
    if (c->key_data != NULL) {
        struct curl_blob blob = {c->key_data, strlen(c->key_data), CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
    }

    struct curl_slist *hl = curl_slist_append(NULL, "Accept: application/json");
    if (hl != NULL && r->content_type != NULL) {
        char ct[128];
        snprintf(ct, sizeof(ct), "Content-Type: %s", r->content_type);
        struct curl_slist *n = curl_slist_append(hl, ct);
        hl = n != NULL ? n : (curl_slist_free_all(hl), NULL);
    }
    char *tok = current_token(c);
    if (hl != NULL && tok != NULL && tok[0] != '\0') {
        size_t n = strlen(tok) + 32;
        char *auth = malloc(n);
        struct curl_slist *nl = NULL;
        if (auth != NULL) {
            snprintf(auth, n, "Authorization: Bearer %s", tok);
            nl = curl_slist_append(hl, auth);
            free(auth);
        }
        hl = nl != NULL ? nl : (curl_slist_free_all(hl), NULL);
    }
    free(tok);
    if (hl == NULL)
        return gv_error_set(err, GV_ENOMEM, "%s %s: out of memory", r->method, r->path);
    /* libcurl would otherwise send "Expect: 100-continue" for large bodies
     * and wait a second for an answer the API server does not send. */
    struct curl_slist *nl = curl_slist_append(hl, "Expect:");
    if (nl == NULL) {
        curl_slist_free_all(hl);
        return gv_error_set(err, GV_ENOMEM, "%s %s: out of memory", r->method, r->path);
    }
    *headers = nl;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nl);
    return GV_OK;
}

static long retry_after_ms(CURL *h)
{
    struct curl_header *hd = NULL;
    if (curl_easy_header(h, "Retry-After", 0, CURLH_HEADER, -1, &hd) != CURLHE_OK)
        return 0;
    char *end = NULL;
    long s = strtol(hd->value, &end, 10);
    if (end == hd->value || s < 0)
        return 0;
    return s > 3600 ? 3600000L : s * 1000L;
}

static bool curl_retryable(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
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
        CURL *h = curl_easy_init();
        if (h == NULL)
            return gv_error_set(err, GV_ENOMEM, "%s: curl_easy_init failed", what);
        struct curl_slist *headers = NULL;
        char *url = NULL;
        char errbuf[CURL_ERROR_SIZE] = "";
        gv_buf_free(resp);
        gv_buf_init(resp, MAX_RESPONSE_BYTES);
        st = setup_handle(c, h, r, &headers, &url, errbuf, err);
        if (st != GV_OK) {
            curl_easy_cleanup(h);
            curl_slist_free_all(headers);
            free(url);
            return st;
        }
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, gv_buf_write_cb);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
        CURLcode rc = curl_easy_perform(h);
        long code = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        bool retry = false;
        long min_delay = 0;
        if (rc != CURLE_OK) {
            if (resp->overflow)
                st = gv_error_set(err, GV_EPROTO, "%s: response larger than %zu bytes", what,
                                  MAX_RESPONSE_BYTES);
            else
                st = gv_error_set(err,
                                  rc == CURLE_OPERATION_TIMEDOUT ? GV_ETIMEOUT : GV_EUNAVAILABLE,
                                  "%s: %s%s%s", what, curl_easy_strerror(rc),
                                  errbuf[0] ? ": " : "", errbuf);
            retry = !resp->overflow && curl_retryable(rc);
        } else if (code >= 200 && code < 300) {
            st = GV_OK;
        } else {
            st = gv_kube_http_error(code, resp->data, resp->len, what, err);
            retry = code == 429 || code >= 500;
            if (retry)
                min_delay = retry_after_ms(h);
        }
        curl_easy_cleanup(h);
        curl_slist_free_all(headers);
        free(url);
        if (code == 401 && !reauthed && token_rotated(c)) {
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

gv_status gv_kube_bind_pod(struct gv_kube_client *c, const char *namespace_, const char *name,
                           const char *uid, const char *node, struct gv_error *err)
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
 * Watch: multi interface so a cancel can wake the transfer at once
 * (curl_multi_wakeup) instead of waiting for the next progress callback.
 */

struct watch_ctx {
    CURL *h;
    struct gv_kube_stream stream;
    struct gv_buf errbody; /* body of a non-200 answer */
    long code;
    gv_status st;
    struct gv_error err;
};

static size_t write_watch(char *p, size_t size, size_t n, void *ud)
{
    struct watch_ctx *w = ud;
    size_t len = size * n;
    if (w->code == 0)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->code);
    if (w->code != 200) {
        /* Error bodies are small Status objects; cap what we keep. */
        if (w->errbody.len < 65536)
            gv_buf_append(&w->errbody, p, len);
        return len;
    }
    w->st = gv_kube_stream_feed(&w->stream, p, len, &w->err);
    if (w->st != GV_OK || w->stream.stopped)
        return 0; /* aborts the transfer */
    return len;
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

    struct watch_ctx w;
    memset(&w, 0, sizeof(w));
    gv_kube_stream_init(&w.stream, fn, ud);
    struct curl_slist *headers = NULL;
    char *url = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    CURLM *m = NULL;
    bool attached = false;
    w.h = curl_easy_init();
    m = curl_multi_init();
    if (w.h == NULL || m == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "%s: curl init failed", what);
        goto out;
    }
    st = setup_handle(c, w.h, &r, &headers, &url, errbuf, err);
    if (st != GV_OK)
        goto out;
    if (opts->timeout_seconds > 0)
        curl_easy_setopt(w.h, CURLOPT_TIMEOUT_MS,
                         (opts->timeout_seconds + WATCH_GRACE_SECONDS) * 1000L);
    curl_easy_setopt(w.h, CURLOPT_WRITEFUNCTION, write_watch);
    curl_easy_setopt(w.h, CURLOPT_WRITEDATA, &w);
    curl_multi_add_handle(m, w.h);
    attached = true;

    if (opts->cancel != NULL) {
        pthread_mutex_lock(&opts->cancel->mu);
        opts->cancel->active = m;
        pthread_mutex_unlock(&opts->cancel->mu);
    }
    CURLcode rc = CURLE_OK;
    bool cancelled = false;
    for (;;) {
        int running = 0;
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc != CURLM_OK) {
            st = gv_error_set(err, GV_EINTERNAL, "%s: %s", what, curl_multi_strerror(mc));
            goto detach;
        }
        int queued;
        CURLMsg *msg = curl_multi_info_read(m, &queued);
        if (msg != NULL && msg->msg == CURLMSG_DONE) {
            rc = msg->data.result;
            break;
        }
        if (gv_kube_cancel_fired(opts->cancel)) {
            cancelled = true;
            break;
        }
        mc = curl_multi_poll(m, NULL, 0, 1000, NULL);
        if (mc != CURLM_OK) {
            st = gv_error_set(err, GV_EINTERNAL, "%s: %s", what, curl_multi_strerror(mc));
            goto detach;
        }
    }
    if (w.code == 0)
        curl_easy_getinfo(w.h, CURLINFO_RESPONSE_CODE, &w.code);
    if (cancelled || w.stream.stopped) {
        st = GV_OK;
    } else if (w.st != GV_OK) {
        /* The decoder refused the stream (malformed event, ERROR event). */
        st = w.st;
        if (err != NULL) {
            *err = w.err;
            gv_error_prefix(err, "%s", what);
        }
    } else if (w.code != 0 && w.code != 200) {
        st = gv_kube_http_error(w.code, w.errbody.data, w.errbody.len, what, err);
        if (w.code == 401)
            token_rotated(c); /* the caller's next watch uses a rotated token */
    } else if (rc != CURLE_OK) {
        st = gv_error_set(err, rc == CURLE_OPERATION_TIMEDOUT ? GV_ETIMEOUT : GV_EUNAVAILABLE,
                          "%s: %s%s%s", what, curl_easy_strerror(rc), errbuf[0] ? ": " : "",
                          errbuf);
    } else {
        st = gv_kube_stream_finish(&w.stream, &w.err);
        if (st != GV_OK && err != NULL) {
            *err = w.err;
            gv_error_prefix(err, "%s", what);
        }
    }
detach:
    if (opts->cancel != NULL) {
        pthread_mutex_lock(&opts->cancel->mu);
        opts->cancel->active = NULL;
        pthread_mutex_unlock(&opts->cancel->mu);
    }
out:
    if (last_rv != NULL && w.stream.last_rv != NULL) {
        free(*last_rv);
        *last_rv = w.stream.last_rv;
        w.stream.last_rv = NULL;
    }
    if (attached)
        curl_multi_remove_handle(m, w.h);
    if (w.h != NULL)
        curl_easy_cleanup(w.h);
    if (m != NULL)
        curl_multi_cleanup(m);
    curl_slist_free_all(headers);
    free(url);
    gv_buf_free(&w.errbody);
    gv_kube_stream_release(&w.stream);
    return st;
}
