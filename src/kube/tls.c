/*
 * TLS for the kube client with mbedTLS: one shared configuration per client
 * (trusted CAs, optional client certificate, verification policy) and one
 * session per connection.
 *
 * Why mbedTLS: a process that only verifies kube-apiserver's certificate
 * and maybe presents a client certificate needs a small fraction of
 * OpenSSL; measured on Debian 12, a TLS client with libssl + libcrypto is
 * 6.5 MiB resident, with mbedTLS 2.6 MiB (docs/kube-client.md).
 *
 * Server names: DNS names go to mbedTLS (SNI + dNSName/CN match).  IP
 * literals -- the in-cluster API server is an IP such as 10.96.0.1 -- are
 * matched here against the certificate's iPAddress entries, because
 * mbedTLS 2.28 does not list those in subject_alt_names.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mbedtls/asn1.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crt.h>

#include "kube/kube_http.h"

/* Debian's bundle, what libcurl used by default. */
#define SYSTEM_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

struct gv_tls {
    mbedtls_ssl_config conf;
    mbedtls_x509_crt ca;
    mbedtls_x509_crt own_cert;
    mbedtls_pk_context own_key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    pthread_mutex_t rng_mu; /* one DRBG, many connecting threads */
    bool insecure;
};

struct gv_tls_session {
    struct gv_tls *tls;
    mbedtls_ssl_context ssl;
    int fd;
    bool ip_host; /* host is an IP literal: verify_ip checks the SAN */
    unsigned char ip[16];
    size_t ip_len;
    bool handshaken;
};

/* gv_error_set with mbedTLS's text for rc. */
static gv_status tls_error(struct gv_error *err, gv_status code, int rc, const char *what)
{
    char buf[160];
    mbedtls_strerror(rc, buf, sizeof(buf));
    return gv_error_set(err, code, "%s: %s (mbedTLS -0x%04x)", what, buf, (unsigned)-rc);
}

static int locked_rng(void *ud, unsigned char *out, size_t len)
{
    struct gv_tls *t = ud;
    pthread_mutex_lock(&t->rng_mu);
    int rc = mbedtls_ctr_drbg_random(&t->drbg, out, len);
    pthread_mutex_unlock(&t->rng_mu);
    return rc;
}

/* mbedTLS wants PEM text with its terminating NUL counted. */
static size_t pem_len(const char *s)
{
    return strlen(s) + 1;
}

static gv_status load_ca(struct gv_tls *t, const struct gv_tls_opts *o, struct gv_error *err)
{
    int rc;
    const char *src;
    if (o->ca_data != NULL) {
        src = "certificate-authority data";
        rc = mbedtls_x509_crt_parse(&t->ca, (const unsigned char *)o->ca_data, pem_len(o->ca_data));
    } else {
        src = o->ca_file != NULL ? o->ca_file : SYSTEM_CA_BUNDLE;
        rc = mbedtls_x509_crt_parse_file(&t->ca, src);
    }
    /* A positive count means some certificates of a bundle did not parse;
     * like libcurl, use the ones that did. */
    if (rc < 0 || t->ca.version == 0) {
        if (rc >= 0)
            return gv_error_set(err, GV_EINVAL, "TLS: no usable CA certificate in %s", src);
        char what[300];
        snprintf(what, sizeof(what), "TLS: cannot load CA certificates from %s", src);
        return tls_error(err, GV_EINVAL, rc, what);
    }
    return GV_OK;
}

static gv_status load_client_cert(struct gv_tls *t, const struct gv_tls_opts *o,
                                  struct gv_error *err)
{
    bool have_cert = o->cert_file != NULL || o->cert_data != NULL;
    bool have_key = o->key_file != NULL || o->key_data != NULL;
    if (!have_cert && !have_key)
        return GV_OK;
    if (have_cert != have_key)
        return gv_error_set(err, GV_EINVAL, "TLS: a client %s was given without its %s",
                            have_cert ? "certificate" : "key", have_cert ? "key" : "certificate");
    int rc = o->cert_data != NULL
                 ? mbedtls_x509_crt_parse(&t->own_cert, (const unsigned char *)o->cert_data,
                                          pem_len(o->cert_data))
                 : mbedtls_x509_crt_parse_file(&t->own_cert, o->cert_file);
    if (rc != 0) {
        if (rc > 0)
            return gv_error_set(err, GV_EINVAL, "TLS: client certificate does not parse");
        return tls_error(err, GV_EINVAL, rc, "TLS: cannot load the client certificate");
    }
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    rc = o->key_data != NULL
             ? mbedtls_pk_parse_key(&t->own_key, (const unsigned char *)o->key_data,
                                    pem_len(o->key_data), NULL, 0, locked_rng, t)
             : mbedtls_pk_parse_keyfile(&t->own_key, o->key_file, NULL, locked_rng, t);
#else
    rc = o->key_data != NULL
             ? mbedtls_pk_parse_key(&t->own_key, (const unsigned char *)o->key_data,
                                    pem_len(o->key_data), NULL, 0)
             : mbedtls_pk_parse_keyfile(&t->own_key, o->key_file, NULL);
#endif
    if (rc != 0) {
        return tls_error(err, GV_EINVAL, rc, "TLS: cannot load the client key");
    }
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    rc = mbedtls_pk_check_pair(&t->own_cert.pk, &t->own_key, locked_rng, t);
#else
    rc = mbedtls_pk_check_pair(&t->own_cert.pk, &t->own_key);
#endif
    if (rc != 0)
        return gv_error_set(err, GV_EINVAL, "TLS: the client key does not belong to the client "
                                            "certificate");
    rc = mbedtls_ssl_conf_own_cert(&t->conf, &t->own_cert, &t->own_key);
    if (rc != 0) {
        return tls_error(err, GV_EINVAL, rc, "TLS: client certificate");
    }
    return GV_OK;
}

gv_status gv_tls_new(const struct gv_tls_opts *o, struct gv_tls **out, struct gv_error *err)
{
    *out = NULL;
    struct gv_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return gv_error_set(err, GV_ENOMEM, "TLS: out of memory");
    pthread_mutex_init(&t->rng_mu, NULL);
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_x509_crt_init(&t->ca);
    mbedtls_x509_crt_init(&t->own_cert);
    mbedtls_pk_init(&t->own_key);
    mbedtls_entropy_init(&t->entropy);
    mbedtls_ctr_drbg_init(&t->drbg);
    t->insecure = o->insecure;
    gv_status st = GV_EINTERNAL;
    static const char pers[] = "gpuvisor kube client";
    int rc = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy,
                                   (const unsigned char *)pers, sizeof(pers) - 1);
    if (rc != 0) {
        tls_error(err, GV_EINTERNAL, rc, "TLS: cannot seed the random generator");
        goto fail;
    }
    rc = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                     MBEDTLS_SSL_PRESET_DEFAULT);
    if (rc != 0) {
        tls_error(err, GV_EINTERNAL, rc, "TLS: configuration");
        goto fail;
    }
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    mbedtls_ssl_conf_min_tls_version(&t->conf, MBEDTLS_SSL_VERSION_TLS1_2);
#else
    mbedtls_ssl_conf_min_version(&t->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                                 MBEDTLS_SSL_MINOR_VERSION_3);
#endif
    mbedtls_ssl_conf_rng(&t->conf, locked_rng, t);
    static const char *alpn[] = {"http/1.1", NULL};
    mbedtls_ssl_conf_alpn_protocols(&t->conf, alpn);
    if (o->insecure) {
        mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_NONE);
    } else {
        if ((st = load_ca(t, o, err)) != GV_OK)
            goto fail;
        mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
        mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
    }
    if ((st = load_client_cert(t, o, err)) != GV_OK)
        goto fail;
    *out = t;
    return GV_OK;
fail:
    gv_tls_free(t);
    return st;
}

void gv_tls_free(struct gv_tls *t)
{
    if (t == NULL)
        return;
    mbedtls_ssl_config_free(&t->conf);
    mbedtls_x509_crt_free(&t->ca);
    mbedtls_x509_crt_free(&t->own_cert);
    mbedtls_pk_free(&t->own_key);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    pthread_mutex_destroy(&t->rng_mu);
    free(t);
}

/* ------------------------------------------------------------------------
 * Sessions
 */

static int bio_send(void *ud, const unsigned char *buf, size_t len)
{
    struct gv_tls_session *s = ud;
    ssize_t n = send(s->fd, buf, len, MSG_NOSIGNAL);
    if (n >= 0)
        return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return MBEDTLS_ERR_SSL_WANT_WRITE;
    return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int bio_recv(void *ud, unsigned char *buf, size_t len)
{
    struct gv_tls_session *s = ud;
    ssize_t n = recv(s->fd, buf, len, 0);
    if (n >= 0)
        return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return MBEDTLS_ERR_SSL_WANT_READ;
    return MBEDTLS_ERR_NET_RECV_FAILED;
}

/*
 * Does the DER extensions block carry an iPAddress SAN equal to ip?  Walks
 *   [3] { SEQUENCE OF Extension { OID, critical BOOLEAN OPTIONAL,
 *                                  OCTET STRING { SEQUENCE OF GeneralName } } }
 * with mbedTLS's ASN.1 readers; iPAddress is GeneralName tag [7].
 */
static bool san_has_ip(const mbedtls_x509_buf *v3_ext, const unsigned char *ip, size_t ip_len)
{
    unsigned char *p = v3_ext->p;
    const unsigned char *end = p + v3_ext->len;
    size_t len;
    if (p == NULL)
        return false;
    if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONTEXT_SPECIFIC |
                                                 MBEDTLS_ASN1_CONSTRUCTED | 3) == 0)
        end = p + len;
    if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE) !=
        0)
        return false;
    end = p + len;
    while (p < end) {
        if (mbedtls_asn1_get_tag(&p, end, &len,
                                 MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE) != 0)
            return false;
        unsigned char *ext_end = p + len;
        size_t oid_len;
        if (mbedtls_asn1_get_tag(&p, ext_end, &oid_len, MBEDTLS_ASN1_OID) != 0)
            return false;
        bool is_san = oid_len == MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME) &&
                      memcmp(p, MBEDTLS_OID_SUBJECT_ALT_NAME, oid_len) == 0;
        p += oid_len;
        if (!is_san) {
            p = ext_end;
            continue;
        }
        int critical;
        (void)mbedtls_asn1_get_bool(&p, ext_end, &critical); /* optional */
        if (mbedtls_asn1_get_tag(&p, ext_end, &len, MBEDTLS_ASN1_OCTET_STRING) != 0 ||
            mbedtls_asn1_get_tag(&p, ext_end, &len,
                                 MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE) != 0)
            return false;
        unsigned char *names_end = p + len;
        while (p < names_end) {
            unsigned char tag = *p++;
            if (mbedtls_asn1_get_len(&p, names_end, &len) != 0)
                return false;
            if (tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && len == ip_len &&
                memcmp(p, ip, ip_len) == 0)
                return true;
            p += len;
        }
        return false;
    }
    return false;
}

static int verify_ip(void *ud, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
    struct gv_tls_session *s = ud;
    if (depth == 0 && !san_has_ip(&crt->v3_ext, s->ip, s->ip_len))
        *flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
    return 0;
}

gv_status gv_tls_session_new(struct gv_tls *t, int fd, const char *host,
                             struct gv_tls_session **out, struct gv_error *err)
{
    *out = NULL;
    struct gv_tls_session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return gv_error_set(err, GV_ENOMEM, "TLS: out of memory");
    s->tls = t;
    s->fd = fd;
    mbedtls_ssl_init(&s->ssl);
    gv_status st = GV_OK;
    int rc = mbedtls_ssl_setup(&s->ssl, &t->conf);
    if (rc != 0) {
        st = tls_error(err, GV_ENOMEM, rc, "TLS: session setup");
        goto fail;
    }
    if (inet_pton(AF_INET, host, s->ip) == 1) {
        s->ip_host = true;
        s->ip_len = 4;
    } else if (inet_pton(AF_INET6, host, s->ip) == 1) {
        s->ip_host = true;
        s->ip_len = 16;
    }
    if (s->ip_host) {
        /* No SNI for IP literals (RFC 6066); the SAN check is ours. */
        if (!t->insecure)
            mbedtls_ssl_set_verify(&s->ssl, verify_ip, s);
        rc = mbedtls_ssl_set_hostname(&s->ssl, NULL);
    } else {
        rc = mbedtls_ssl_set_hostname(&s->ssl, host);
    }
    if (rc != 0) {
        st = tls_error(err, GV_EINVAL, rc, "TLS: server name");
        goto fail;
    }
    mbedtls_ssl_set_bio(&s->ssl, s, bio_send, bio_recv, NULL);
    *out = s;
    return GV_OK;
fail:
    mbedtls_ssl_free(&s->ssl);
    free(s);
    return st;
}

void gv_tls_session_free(struct gv_tls_session *s)
{
    if (s == NULL)
        return;
    if (s->handshaken)
        (void)mbedtls_ssl_close_notify(&s->ssl); /* best effort, non-blocking */
    mbedtls_ssl_free(&s->ssl);
    free(s);
}

static enum gv_tls_io want(int rc)
{
    if (rc == MBEDTLS_ERR_SSL_WANT_READ)
        return GV_TLS_WANT_READ;
    if (rc == MBEDTLS_ERR_SSL_WANT_WRITE)
        return GV_TLS_WANT_WRITE;
    return GV_TLS_ERROR;
}

/*
 * Fatal alerts a server sends when it will not take this client's
 * credentials or parameters.  They are configuration, so retrying only
 * delays the error; any other alert (internal_error, ...) stays retryable.
 * handshake_failure is what OpenSSL sends over TLS 1.2 when a required
 * client certificate is missing.
 */
#define GV_TLS_FINAL_ALERTS(X)                                                                     \
    X(40, "handshake_failure", "no common parameters, or no client certificate where one is "      \
                               "required")                                                         \
    X(42, "bad_certificate", "the server rejects our client certificate")                         \
    X(43, "unsupported_certificate", "the server rejects our client certificate")                 \
    X(44, "certificate_revoked", "our client certificate is revoked")                             \
    X(45, "certificate_expired", "our client certificate has expired")                            \
    X(46, "certificate_unknown", "the server rejects our client certificate")                     \
    X(48, "unknown_ca", "the server does not trust the CA of our client certificate")             \
    X(49, "access_denied", "the server denies access")                                            \
    X(70, "protocol_version", "no TLS version in common")                                         \
    X(116, "certificate_required", "the server requires a client certificate")

/* The description of the fatal alert just received. */
static unsigned received_alert(const mbedtls_ssl_context *ssl)
{
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return ssl->MBEDTLS_PRIVATE(in_msg)[1];
#else
    return ssl->in_msg[1];
#endif
}

/*
 * A server that refuses our certificate sends its alert and closes at once,
 * with the rest of our flight unread, so its kernel answers that with a
 * reset.  When the reset breaks one of our writes first, the alert is still
 * waiting, unread, in our socket (data that arrived before a reset stays
 * readable).  Handshake alerts before the server's ChangeCipherSpec are
 * plaintext records: content type 21, version 3.x, length 2, level 2
 * (fatal), description.  Returns the description, or -1 when none is there.
 */
static int pending_fatal_alert(int fd)
{
    unsigned char rec[7];
    ssize_t n = recv(fd, rec, sizeof(rec), MSG_PEEK | MSG_DONTWAIT);
    if (n != (ssize_t)sizeof(rec) || rec[0] != 21 || rec[1] != 3 || rec[3] != 0 || rec[4] != 2 ||
        rec[5] != 2)
        return -1;
    return rec[6];
}

enum gv_tls_io gv_tls_handshake(struct gv_tls_session *s, bool *retryable, struct gv_error *err)
{
    *retryable = true;
    int rc = mbedtls_ssl_handshake(&s->ssl);
    if (rc == 0) {
        s->handshaken = true;
        return GV_TLS_DONE;
    }
    enum gv_tls_io w = want(rc);
    if (w != GV_TLS_ERROR)
        return w;
    if (rc == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
        char info[256];
        mbedtls_x509_crt_verify_info(info, sizeof(info), "", mbedtls_ssl_get_verify_result(&s->ssl));
        size_t n = strlen(info);
        while (n > 0 && info[n - 1] == '\n')
            info[--n] = '\0';
        for (char *c = info; *c != '\0'; c++)
            if (*c == '\n')
                *c = ';';
        *retryable = false;
        gv_error_set(err, GV_EUNAVAILABLE, "TLS: server certificate verification failed: %s",
                     info);
        return GV_TLS_ERROR;
    }
    int pending = -1;
    if (rc == MBEDTLS_ERR_NET_CONN_RESET || rc == MBEDTLS_ERR_NET_SEND_FAILED)
        pending = pending_fatal_alert(s->fd);
    if (rc == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE || pending >= 0) {
        unsigned alert = pending >= 0 ? (unsigned)pending : received_alert(&s->ssl);
        switch (alert) {
#define GV_TLS_ALERT_CASE(code, name, why)                                                         \
    case code:                                                                                     \
        *retryable = false;                                                                        \
        gv_error_set(err, GV_EUNAVAILABLE, "TLS: the server refused the handshake with alert "    \
                     "%u %s: %s", alert, name, why);                                               \
        return GV_TLS_ERROR;
            GV_TLS_FINAL_ALERTS(GV_TLS_ALERT_CASE)
#undef GV_TLS_ALERT_CASE
        default:
            gv_error_set(err, GV_EUNAVAILABLE, "TLS handshake failed: the server sent alert %u",
                         alert);
            return GV_TLS_ERROR;
        }
    }
    tls_error(err, GV_EUNAVAILABLE, rc, "TLS handshake failed");
    return GV_TLS_ERROR;
}

enum gv_tls_io gv_tls_read(struct gv_tls_session *s, char *buf, size_t cap, size_t *n,
                           struct gv_error *err)
{
    *n = 0;
    int rc = mbedtls_ssl_read(&s->ssl, (unsigned char *)buf, cap);
    if (rc > 0) {
        *n = (size_t)rc;
        return GV_TLS_DONE;
    }
    if (rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
        return GV_TLS_EOF;
    enum gv_tls_io w = want(rc);
    if (w == GV_TLS_ERROR)
        tls_error(err, GV_EUNAVAILABLE, rc, "TLS read");
    return w;
}

enum gv_tls_io gv_tls_write(struct gv_tls_session *s, const char *buf, size_t len, size_t *n,
                            struct gv_error *err)
{
    *n = 0;
    int rc = mbedtls_ssl_write(&s->ssl, (const unsigned char *)buf, len);
    if (rc >= 0) {
        *n = (size_t)rc;
        return GV_TLS_DONE;
    }
    enum gv_tls_io w = want(rc);
    if (w == GV_TLS_ERROR)
        tls_error(err, GV_EUNAVAILABLE, rc, "TLS write");
    return w;
}

size_t gv_tls_pending(const struct gv_tls_session *s)
{
    return mbedtls_ssl_get_bytes_avail(&s->ssl);
}
