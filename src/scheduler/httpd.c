#include "scheduler/gv_httpd.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>

#include "common/gv_buf.h"
#include "common/gv_file.h"
#include "common/gv_log.h"

/* Latency buckets (seconds): the extender's budget is a few milliseconds per
 * call, so resolution sits below 10 ms; binds include API round trips. */
static const double latency_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,   0.1,   0.25,   0.5,   1.0,  2.5};
#define N_BUCKETS (sizeof(latency_buckets) / sizeof(latency_buckets[0]))

/* Status codes we count separately; anything else lands in "other". */
static const unsigned counted_codes[] = {200, 400, 404, 405, 413, 500, 503};
#define N_CODES (sizeof(counted_codes) / sizeof(counted_codes[0]))

struct route {
    char *method;
    char *path;
    gv_httpd_handler fn;
    void *ctx;
    pthread_mutex_t lock; /* guards the counters below */
    uint64_t buckets[N_BUCKETS];
    uint64_t count;
    double sum;
    uint64_t codes[N_CODES + 1];
};

/* One loaded certificate chain + key.  Retired generations stay allocated
 * until shutdown-or-later, because a handshake in another thread may still
 * hold the pointers the callback returned (GnuTLS does not copy them). */
struct tls_gen {
    gnutls_pcert_st pcerts[8];
    unsigned n_pcerts;
    gnutls_privkey_t key;
    struct tls_gen *older;
};

struct gv_httpd {
    char *name;
    char *address;
    uint16_t port;
    char *cert_file;
    char *key_file;
    size_t max_body;
    unsigned timeout_seconds;
    unsigned max_connections, max_per_ip;
    size_t max_buffered;
    char *tls_priorities;
    atomic_size_t buffered; /* body bytes held by all connections */
    struct route *routes;
    size_t n_routes;
    struct MHD_Daemon *daemon;
};

/* GnuTLS's certificate callback carries no user pointer, so the TLS identity
 * is process-wide: every HTTPS listener of a process serves the same
 * certificate/key files (the extender and the webhook share the pod's
 * serving certificate).  users counts the listeners holding it. */
static struct {
    pthread_mutex_t lock;
    char *cert_file, *key_file;
    unsigned users;
    struct tls_gen *current; /* ->older chains retired generations */
    struct timespec cert_mtime, key_mtime;
    time_t checked; /* last stat of the files (at most once a second) */
} tls = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Per-connection request state while the body arrives. */
struct pending {
    struct gv_buf body; /* capped at max_body; overflow: Content-Length said more (413) */
    struct timespec start;
    size_t charged;     /* bytes of h->buffered this request holds */
    size_t declared;    /* Content-Length (0: none) */
};

/* Most a body's buffer is sized for up front from its Content-Length. */
#define BODY_PRESIZE_MAX ((size_t)16 << 20)

/* Takes n more bytes of the listener's body budget for p; false when that
 * would pass max_buffered (nothing taken). */
static bool budget_take(struct gv_httpd *h, struct pending *p, size_t n)
{
    size_t cur = atomic_load(&h->buffered);
    do {
        if (n > h->max_buffered || cur > h->max_buffered - n)
            return false;
    } while (!atomic_compare_exchange_weak(&h->buffered, &cur, cur + n));
    p->charged += n;
    return true;
}

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

void gv_http_respond(struct gv_http_response *resp, unsigned status, const char *content_type,
                     const char *body)
{
    free(resp->body);
    resp->status = status;
    resp->content_type = content_type;
    resp->body = strdup(body ? body : "");
    resp->body_len = resp->body ? strlen(resp->body) : 0;
}

void gv_http_respond_error(struct gv_http_response *resp, unsigned status, const char *message)
{
    /* The extender's result types all carry an "Error" string, so one shape
     * serves kube-scheduler and humans alike. */
    json_t *o = json_pack("{s:s}", "Error", message ? message : "error");
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    gv_http_respond(resp, status, "application/json", text ? text : "{\"Error\":\"error\"}");
    free(text);
}

/* ---- TLS ------------------------------------------------------------- */

static void tls_gen_free(struct tls_gen *g)
{
    while (g != NULL) {
        struct tls_gen *older = g->older;
        for (unsigned i = 0; i < g->n_pcerts; i++)
            gnutls_pcert_deinit(&g->pcerts[i]);
        if (g->key != NULL)
            gnutls_privkey_deinit(g->key);
        free(g);
        g = older;
    }
}

static gv_status tls_load(const char *cert_file, const char *key_file, struct tls_gen **out,
                          struct gv_error *err)
{
    char *cert = NULL, *key = NULL;
    size_t cert_len = 0, key_len = 0;
    struct tls_gen *g = calloc(1, sizeof(*g));
    gv_status st = GV_ENOMEM;
    if (g == NULL)
        goto fail;
    if ((st = gv_file_read_all(cert_file, &cert, &cert_len, err)) != GV_OK)
        goto fail;
    if ((st = gv_file_read_all(key_file, &key, &key_len, err)) != GV_OK)
        goto fail;
    gnutls_datum_t cd = {(unsigned char *)cert, (unsigned)cert_len};
    gnutls_datum_t kd = {(unsigned char *)key, (unsigned)key_len};
    g->n_pcerts = sizeof(g->pcerts) / sizeof(g->pcerts[0]);
    int rc =
        gnutls_pcert_list_import_x509_raw(g->pcerts, &g->n_pcerts, &cd, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0) {
        g->n_pcerts = 0;
        st = gv_error_set(err, GV_EPARSE, "%s: not a PEM certificate chain: %s", cert_file,
                          gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_privkey_init(&g->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(g->key, &kd, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        st = gv_error_set(err, GV_EPARSE, "%s: not a PEM private key: %s", key_file,
                          gnutls_strerror(rc));
        goto fail;
    }
    free(cert);
    free(key);
    *out = g;
    return GV_OK;
fail:
    free(cert);
    free(key);
    tls_gen_free(g);
    return st;
}

static int mtime_of(const char *path, struct timespec *ts)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -1;
    *ts = sb.st_mtim;
    return 0;
}

static int same_time(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Reloads the pair when either file changed (called with tls.lock held).  A
 * broken new pair (half written, mismatched) keeps the old one serving. */
static void tls_maybe_reload(void)
{
    time_t now = time(NULL);
    if (now == tls.checked)
        return;
    tls.checked = now;
    struct timespec cm, km;
    if (mtime_of(tls.cert_file, &cm) != 0 || mtime_of(tls.key_file, &km) != 0)
        return;
    if (same_time(cm, tls.cert_mtime) && same_time(km, tls.key_mtime))
        return;
    struct tls_gen *g = NULL;
    struct gv_error err = {0};
    if (tls_load(tls.cert_file, tls.key_file, &g, &err) != GV_OK) {
        gv_warn("keeping the previous TLS certificate: %s", err.msg);
        return;
    }
    tls.cert_mtime = cm;
    tls.key_mtime = km;
    g->older = tls.current;
    tls.current = g;
    gv_info("reloaded TLS certificate from %s", tls.cert_file);
}

static int tls_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                        const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                        gnutls_pcert_st **pcert, unsigned int *pcert_length,
                        gnutls_privkey_t *privkey)
{
    (void)session;
    (void)req_ca_rdn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    pthread_mutex_lock(&tls.lock);
    tls_maybe_reload();
    struct tls_gen *g = tls.current;
    pthread_mutex_unlock(&tls.lock);
    if (g == NULL)
        return -1;
    *pcert = g->pcerts;
    *pcert_length = g->n_pcerts;
    *privkey = g->key;
    return 0;
}

static gv_status tls_acquire(const struct gv_httpd *h, struct gv_error *err)
{
    gv_status st = GV_OK;
    pthread_mutex_lock(&tls.lock);
    if (tls.users > 0) {
        if (strcmp(tls.cert_file, h->cert_file) != 0 || strcmp(tls.key_file, h->key_file) != 0)
            st = gv_error_set(err, GV_EUNSUPPORTED,
                              "%s: every HTTPS listener of a process must use the same "
                              "certificate and key files (%s, %s)",
                              h->name, tls.cert_file, tls.key_file);
        else
            tls.users++;
        goto out;
    }
    struct gv_error lerr = {0};
    if (tls_load(h->cert_file, h->key_file, &tls.current, &lerr) != GV_OK) {
        st = gv_error_set(err, lerr.code, "%s: %s", h->name, lerr.msg);
        goto out;
    }
    tls.cert_file = strdup(h->cert_file);
    tls.key_file = strdup(h->key_file);
    mtime_of(tls.cert_file, &tls.cert_mtime);
    mtime_of(tls.key_file, &tls.key_mtime);
    tls.checked = time(NULL);
    tls.users = 1;
out:
    pthread_mutex_unlock(&tls.lock);
    return st;
}

static void tls_release(void)
{
    pthread_mutex_lock(&tls.lock);
    if (tls.users > 0 && --tls.users == 0) {
        tls_gen_free(tls.current);
        tls.current = NULL;
        free(tls.cert_file);
        free(tls.key_file);
        tls.cert_file = tls.key_file = NULL;
    }
    pthread_mutex_unlock(&tls.lock);
}

/* ---- request handling ------------------------------------------------ */

static double elapsed_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static void route_observe(struct route *r, double seconds, unsigned status)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < N_BUCKETS; i++)
        if (seconds <= latency_buckets[i])
            r->buckets[i]++;
    r->count++;
    r->sum += seconds;
    size_t c = N_CODES;
    for (size_t i = 0; i < N_CODES; i++)
        if (counted_codes[i] == status)
            c = i;
    r->codes[c]++;
    pthread_mutex_unlock(&r->lock);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct gv_http_response *r = cls;
    size_t n = r->stream(r->stream_cls, buf, max);
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void stream_done(void *cls)
{
    struct gv_http_response *r = cls;
    if (r->stream_free != NULL)
        r->stream_free(r->stream_cls);
    free(r);
}

static enum MHD_Result send_response(struct MHD_Connection *conn, struct gv_http_response *resp)
{
    struct MHD_Response *r;
    if (resp->stream != NULL) {
        struct gv_http_response *held = malloc(sizeof(*held));
        if (held == NULL) {
            if (resp->stream_free != NULL)
                resp->stream_free(resp->stream_cls);
            free(resp->body);
            return MHD_NO;
        }
        *held = *resp;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, held,
                                              stream_done);
        if (r == NULL) {
            stream_done(held);
            free(resp->body);
            return MHD_NO;
        }
        free(resp->body);
        resp->body = NULL;
    } else {
        r = MHD_create_response_from_buffer(resp->body_len, resp->body ? resp->body : (char *)"",
                                            resp->body ? MHD_RESPMEM_MUST_FREE
                                                       : MHD_RESPMEM_PERSISTENT);
        if (r == NULL) {
            free(resp->body);
            return MHD_NO;
        }
        resp->body = NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type ? resp->content_type : "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static struct route *find_route(struct gv_httpd *h, const char *method, const char *path,
                                int *path_known)
{
    *path_known = 0;
    for (size_t i = 0; i < h->n_routes; i++) {
        if (strcmp(h->routes[i].path, path) != 0)
            continue;
        *path_known = 1;
        if (strcmp(h->routes[i].method, method) == 0)
            return &h->routes[i];
    }
    return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct gv_httpd *h = cls;
    struct pending *p = *con_cls;
    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        if (p == NULL)
            return MHD_NO;
        gv_buf_init(&p->body, h->max_body);
        clock_gettime(CLOCK_MONOTONIC, &p->start);
        *con_cls = p;
        /* Refuse a declared oversize body before reading a byte of it. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && strtoull(cl, NULL, 10) > h->max_body)
            p->body.overflow = true;
        else if (cl != NULL)
            p->declared = (size_t)strtoull(cl, NULL, 10);
        if (!p->body.overflow)
            return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        /* Mid-body, libmicrohttpd cannot queue an answer (only before the
         * body or after all of it): a body found too large here, or one
         * past the listener's shared budget, ends the connection at once.
         * Reading on just to answer would let a stalled client hold the
         * memory and the thread. */
        if (p->body.len + n > h->max_body || !budget_take(h, p, n)) {
            gv_debug("%s: request body past %s; closing the connection", h->name,
                     p->body.len + n > h->max_body ? "the size limit" : "the shared budget");
            return MHD_NO;
        }
        *upload_data_size = 0;
        /* Room for the declared length once its first bytes came (capped:
         * a declaration alone reserves nothing, and past the cap the
         * buffer grows as before): a 50,000-name filter body was copied
         * through five reallocations. */
        if (p->body.len == 0 && p->declared > n)
            (void)gv_buf_reserve(&p->body, p->declared < BODY_PRESIZE_MAX ? p->declared
                                                                          : BODY_PRESIZE_MAX);
        return gv_buf_append(&p->body, upload_data, n) == GV_ENOMEM ? MHD_NO : MHD_YES;
    }
    if (p->body.overflow) {
        /* Declared too large: answer before reading any of it; MHD closes
         * the connection after the response. */
        struct gv_http_response big = {0};
        char msg[96];
        snprintf(msg, sizeof(msg), "request body larger than %zu bytes", h->max_body);
        gv_http_respond_error(&big, 413, msg);
        int path_known = 0;
        struct route *r = find_route(h, method, url, &path_known);
        enum MHD_Result ret = send_response(conn, &big);
        if (r != NULL)
            route_observe(r, elapsed_since(&p->start), 413);
        return ret;
    }
    struct gv_http_response resp = {.status = 200, .content_type = "application/json"};
    int path_known = 0;
    struct route *r = find_route(h, method, url, &path_known);
    if (r == NULL) {
        if (path_known)
            gv_http_respond_error(&resp, 405, "method not allowed");
        else
            gv_http_respond_error(&resp, 404, "no such path");
    } else {
        char empty[1] = "";
        struct gv_http_request req = {method, url, p->body.data ? p->body.data : empty,
                                      p->body.len};
        r->fn(r->ctx, &req, &resp);
        if (resp.body == NULL && resp.stream == NULL)
            gv_http_respond(&resp, resp.status, resp.content_type, "");
    }
    unsigned status = resp.status;
    enum MHD_Result ret = send_response(conn, &resp);
    if (r != NULL)
        route_observe(r, elapsed_since(&p->start), status);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    struct gv_httpd *h = cls;
    struct pending *p = *con_cls;
    if (p != NULL) {
        atomic_fetch_sub(&h->buffered, p->charged);
        gv_buf_free(&p->body);
        free(p);
        *con_cls = NULL;
    }
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct gv_httpd *h = cls;
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    gv_debug("%s: %s", h->name, buf);
}

/* ---- lifecycle ------------------------------------------------------- */

gv_status gv_httpd_new(const struct gv_httpd_options *opts, struct gv_httpd **out,
                       struct gv_error *err)
{
    if ((opts->cert_file == NULL) != (opts->key_file == NULL))
        return gv_error_set(err, GV_EINVAL,
                            "TLS needs both a certificate file and a key file (got only %s)",
                            opts->cert_file ? "the certificate" : "the key");
    struct gv_httpd *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    h->name = xstrdup(opts->name ? opts->name : "http");
    h->address = xstrdup(opts->address);
    h->port = opts->port;
    h->cert_file = xstrdup(opts->cert_file);
    h->key_file = xstrdup(opts->key_file);
    h->max_body = opts->max_body ? opts->max_body : (8u << 20);
    h->timeout_seconds = opts->timeout_seconds ? opts->timeout_seconds : 60;
    h->max_connections = opts->max_connections ? opts->max_connections : 256;
    h->max_per_ip = opts->max_per_ip ? opts->max_per_ip : 32;
    h->max_buffered = opts->max_buffered ? opts->max_buffered : 4 * h->max_body;
    if (h->max_buffered < h->max_body)
        h->max_buffered = h->max_body;
    h->tls_priorities = xstrdup(opts->tls_priorities ? opts->tls_priorities
                                                     : GV_HTTPD_TLS_PRIORITIES);
    atomic_init(&h->buffered, 0);
    if (h->name == NULL || h->tls_priorities == NULL) {
        gv_httpd_free(h);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    *out = h;
    return GV_OK;
}

gv_status gv_httpd_route(struct gv_httpd *h, const char *method, const char *path,
                         gv_httpd_handler fn, void *ctx, struct gv_error *err)
{
    struct route *nr = realloc(h->routes, (h->n_routes + 1) * sizeof(*nr));
    if (nr == NULL)
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    h->routes = nr;
    struct route *r = &h->routes[h->n_routes];
    memset(r, 0, sizeof(*r));
    r->method = strdup(method);
    r->path = strdup(path);
    r->fn = fn;
    r->ctx = ctx;
    pthread_mutex_init(&r->lock, NULL);
    if (r->method == NULL || r->path == NULL) {
        free(r->method);
        free(r->path);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    h->n_routes++;
    return GV_OK;
}

static gv_status parse_address(const struct gv_httpd *h, struct sockaddr_storage *ss,
                               struct gv_error *err)
{
    memset(ss, 0, sizeof(*ss));
    const char *a = h->address ? h->address : "0.0.0.0";
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, a, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(h->port);
        return GV_OK;
    }
    if (inet_pton(AF_INET6, a, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(h->port);
        return GV_OK;
    }
    return gv_error_set(err, GV_EINVAL, "%s: listen address '%s' is not an IPv4/IPv6 literal",
                        h->name, a);
}

gv_status gv_httpd_start(struct gv_httpd *h, struct gv_error *err)
{
    struct sockaddr_storage ss;
    gv_status st = parse_address(h, &ss, err);
    if (st != GV_OK)
        return st;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (h->cert_file != NULL) {
        if ((st = tls_acquire(h, err)) != GV_OK)
            return st;
        /* The priority string is checked here so a typo fails start-up
         * with GnuTLS's reason rather than every handshake later. */
        gnutls_priority_t prio = NULL;
        const char *bad = NULL;
        int rc = gnutls_priority_init(&prio, h->tls_priorities, &bad);
        if (rc < 0) {
            tls_release();
            return gv_error_set(err, GV_EINVAL, "%s: TLS priorities '%s' rejected at '%s': %s",
                                h->name, h->tls_priorities, bad ? bad : "?", gnutls_strerror(rc));
        }
        gnutls_priority_deinit(prio);
        flags |= MHD_USE_TLS;
        h->daemon = MHD_start_daemon(
            flags, h->port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_TIMEOUT,
            h->timeout_seconds, MHD_OPTION_CONNECTION_LIMIT, h->max_connections,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT, h->max_per_ip, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)(32 << 10), MHD_OPTION_HTTPS_PRIORITIES, h->tls_priorities, MHD_OPTION_HTTPS_CERT_CALLBACK,
            tls_retrieve, MHD_OPTION_END);
    } else {
        h->daemon = MHD_start_daemon(
            flags, h->port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_TIMEOUT,
            h->timeout_seconds, MHD_OPTION_CONNECTION_LIMIT, h->max_connections,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT, h->max_per_ip, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)(32 << 10), MHD_OPTION_END);
    }
    if (h->daemon == NULL) {
        if (h->cert_file != NULL)
            tls_release();
        return gv_error_set(err, GV_EIO, "%s: cannot listen on %s port %u (in use?)", h->name,
                            h->address ? h->address : "0.0.0.0", (unsigned)h->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (info != NULL && info->port != 0)
        h->port = info->port;
    gv_info("%s: listening on %s port %u (%s)", h->name, h->address ? h->address : "0.0.0.0",
            (unsigned)h->port, h->cert_file ? "https" : "http");
    return GV_OK;
}

uint16_t gv_httpd_port(const struct gv_httpd *h)
{
    return h->port;
}


void gv_httpd_free(struct gv_httpd *h)
{
    if (h == NULL)
        return;
    if (h->daemon != NULL) {
        MHD_stop_daemon(h->daemon);
        if (h->cert_file != NULL)
            tls_release();
    }
    for (size_t i = 0; i < h->n_routes; i++) {
        free(h->routes[i].method);
        free(h->routes[i].path);
        pthread_mutex_destroy(&h->routes[i].lock);
    }
    free(h->routes);
    free(h->name);
    free(h->address);
    free(h->cert_file);
    free(h->key_file);
    free(h->tls_priorities);
    free(h);
}

void gv_httpd_write_metrics_header(FILE *out)
{
    fputs("# HELP gpuvisor_http_request_duration_seconds Time to answer an HTTP request, "
          "by server and path.\n"
          "# TYPE gpuvisor_http_request_duration_seconds histogram\n"
          "# HELP gpuvisor_http_requests_total HTTP requests answered, by server, path and "
          "status code.\n"
          "# TYPE gpuvisor_http_requests_total counter\n",
          out);
}

void gv_httpd_write_metrics(struct gv_httpd *h, FILE *out)
{
    for (size_t i = 0; i < h->n_routes; i++) {
        struct route *r = &h->routes[i];
        pthread_mutex_lock(&r->lock);
        for (size_t b = 0; b < N_BUCKETS; b++)
            fprintf(out,
                    "gpuvisor_http_request_duration_seconds_bucket{server=\"%s\",path=\"%s\","
                    "le=\"%g\"} %llu\n",
                    h->name, r->path, latency_buckets[b], (unsigned long long)r->buckets[b]);
        fprintf(out,
                "gpuvisor_http_request_duration_seconds_bucket{server=\"%s\",path=\"%s\","
                "le=\"+Inf\"} %llu\n",
                h->name, r->path, (unsigned long long)r->count);
        fprintf(out, "gpuvisor_http_request_duration_seconds_sum{server=\"%s\",path=\"%s\"} %.6f\n",
                h->name, r->path, r->sum);
        fprintf(out,
                "gpuvisor_http_request_duration_seconds_count{server=\"%s\",path=\"%s\"} %llu\n",
                h->name, r->path, (unsigned long long)r->count);
        for (size_t c = 0; c <= N_CODES; c++) {
            if (r->codes[c] == 0)
                continue;
            char code[8];
            if (c < N_CODES)
                snprintf(code, sizeof(code), "%u", counted_codes[c]);
            else
                snprintf(code, sizeof(code), "other");
            fprintf(out,
                    "gpuvisor_http_requests_total{server=\"%s\",path=\"%s\",code=\"%s\"} %llu\n",
                    h->name, r->path, code, (unsigned long long)r->codes[c]);
        }
        pthread_mutex_unlock(&r->lock);
    }
}
