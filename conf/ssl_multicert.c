/*
 * conf/ssl_multicert.c: ssl_multicert.config, and the OpenSSL contexts a
 * configuration owns.
 *
 * Syntax (ATS): one certificate per line, key=value pairs:
 *
 *     dest_ip=* ssl_cert_name=site.pem ssl_key_name=site.key
 *     ssl_cert_name=a.pem,a-ecdsa.pem ssl_key_name=a.key,a-ecdsa.key
 *     dest_ip=192.0.2.7 ssl_cert_name=b.pem ssl_ca_name=b-chain.pem
 *
 * ssl_cert_name resolves against proxy.config.ssl.server.cert.path,
 * ssl_key_name and ssl_ca_name against ...private_key.path (both relative
 * to the config directory; default: the config directory itself).  Without
 * ssl_key_name the key is read from the certificate file.  ssl_ticket_enabled=0
 * turns tickets off for that certificate.  Anything else is an error.
 *
 * What a line becomes: one SSL_CTX holding its certificate(s), key(s) and
 * chain, with the server settings of records.config (protocol versions,
 * cipher lists, ticket keys).  Its names (every DNS subjectAltName, or the
 * subject CN when there is none) go into a name table; the handshake's SNI
 * callback switches the connection to the context whose name matches
 * (exact first, then "*.example.com" wildcards, which cover one label).  A
 * client without SNI, or with a name nobody has, gets the dest_ip line
 * matching the local address, else the dest_ip=* line, else the first.
 *
 * Ownership and life: everything hangs off struct conf (c->tls) and dies
 * with it in conf_free().  conf_load() runs in the master, as root, before
 * the workers fork: the workers inherit the built contexts and never open
 * a key file themselves.  A reload builds a new struct conf, so a bad
 * certificate fails that reload with file:line while the old contexts keep
 * serving in the old workers; the new workers get the new ones.
 *
 * Validation is loading: an unreadable file, a PEM OpenSSL cannot parse, a
 * key that does not match its certificate, or a key protected by a pass
 * phrase (we never prompt) is an error at file:line; an expired or not yet
 * valid certificate is a warning.  Messages name files, never key bytes.
 *
 * Session tickets: the key material lives in the master process (generated
 * once at the first load, or read from proxy.config.ssl.server.ticket_key
 * .filename, ATS's format: 48-byte records of name, HMAC secret and AES-128
 * key; the first encrypts, all decrypt) and is copied into each struct
 * conf_tls, so every worker of every generation encrypts and decrypts
 * tickets alike: a ticket issued by one worker resumes on any other, and
 * across reloads.  The server-side session cache is off: tickets make it
 * unnecessary, and a per-process cache would only resume by luck.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "conf/conf.h"

#define TLS_MAGIC      0x544c5343u    /* "TLSC" */
#define TICKET_KEYS_MAX 16
#define CERTS_PER_LINE  4             /* RSA + ECDSA (+ spares) */

struct tls_ticket_key {
    unsigned char name[16];
    unsigned char hmac[32];
    size_t        hmac_len;
    unsigned char aes[32];
    int           aes256;             /* 0: AES-128-CBC (ATS key files) */
};

struct tls_cert {
    SSL_CTX *ctx;
    int      line;
    int      any_ip;                  /* dest_ip=* */
    int      has_ip;                  /* dest_ip=ADDR */
    struct sockaddr_storage ip;
};

struct tls_name {
    char    *name;                    /* lowercase; wildcard: ".example.com" */
    int      wildcard;
    SSL_CTX *ctx;
};

struct conf_tls {
    uint32_t          magic;
    struct tls_cert  *certs;
    int               ncerts;
    struct tls_name  *names;
    int               nnames;
    SSL_CTX          *def;            /* no SNI / unknown name */
    int               by_ip;          /* some line has dest_ip=ADDR */
    SSL_CTX          *client;         /* https origins */
    enum conf_verify  verify;
    struct tls_ticket_key keys[TICKET_KEYS_MAX];
    int               nkeys;
};

/* The master's own ticket key, made once and kept for the process's life
 * (reloads included), so tickets survive reloads too. */
static struct tls_ticket_key tls_proc_key;
static int tls_proc_key_set;

/* ------------------------------------------------------------------ */

/* The reason of the most recent OpenSSL error (and clear the queue). */
static const char *
tls_err(void)
{
    static char buf[256];
    unsigned long e, last = 0;

    while ((e = ERR_get_error()) != 0)
        last = e;
    if (last == 0)
        return "unknown error";
    ERR_error_string_n(last, buf, sizeof(buf));
    /* "error:0A00018E:SSL routines::ca md too weak": keep the words */
    const char *p = strrchr(buf, ':');
    return p && p[1] ? p + 1 : buf;
}

/* Never ask for a pass phrase: an encrypted key is a config error. */
static int
tls_no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf; (void)size; (void)rwflag; (void)u;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Handshake callbacks (run in the workers) */

static int
tls_ticket_cb(SSL *s, unsigned char key_name[16], unsigned char *iv,
              EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc)
{
    static char sha256[] = "SHA256";
    const struct conf_tls *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(s));
    const struct tls_ticket_key *k = NULL;
    OSSL_PARAM params[3];
    int i;

    if (t == NULL || t->magic != TLS_MAGIC || t->nkeys == 0)
        return -1;
    if (enc) {
        k = &t->keys[0];
        memcpy(key_name, k->name, 16);
        if (RAND_bytes(iv, 16) <= 0)
            return -1;
    } else {
        for (i = 0; i < t->nkeys && k == NULL; i++)
            if (memcmp(key_name, t->keys[i].name, 16) == 0)
                k = &t->keys[i];
        if (k == NULL)
            return 0;       /* unknown key: a full handshake */
    }
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY,
                                                  (void *)k->hmac, k->hmac_len);
    params[1] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, sha256, 0);
    params[2] = OSSL_PARAM_construct_end();
    if (!EVP_MAC_CTX_set_params(hctx, params))
        return -1;
    const EVP_CIPHER *ciph = k->aes256 ? EVP_aes_256_cbc() : EVP_aes_128_cbc();
    if (enc) {
        if (!EVP_EncryptInit_ex(cctx, ciph, NULL, k->aes, iv))
            return -1;
        return 1;
    }
    if (!EVP_DecryptInit_ex(cctx, ciph, NULL, k->aes, iv))
        return -1;
    return k == &t->keys[0] ? 1 : 2;    /* 2: renew with the current key */
}

static SSL_CTX *
tls_find_name(const struct conf_tls *t, const char *name)
{
    const char *dot = strchr(name, '.');

    for (int i = 0; i < t->nnames; i++)
        if (!t->names[i].wildcard && strcasecmp(t->names[i].name, name) == 0)
            return t->names[i].ctx;
    if (dot == NULL || dot == name)
        return NULL;
    for (int i = 0; i < t->nnames; i++)
        if (t->names[i].wildcard && strcasecmp(t->names[i].name, dot) == 0)
            return t->names[i].ctx;
    return NULL;
}

static int
tls_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family == AF_INET && b->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr
               == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6 && b->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return 0;
}

static int
tls_sni_cb(SSL *s, int *al, void *arg)
{
    const struct conf_tls *t = arg;
    const char *name = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
    SSL_CTX *ctx = NULL;

    (void)al;
    if (name != NULL)
        ctx = tls_find_name(t, name);
    if (ctx == NULL && t->by_ip) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(SSL_get_fd(s), (struct sockaddr *)&ss, &sl) == 0)
            for (int i = 0; i < t->ncerts && ctx == NULL; i++)
                if (t->certs[i].has_ip && tls_same_ip(&t->certs[i].ip, &ss))
                    ctx = t->certs[i].ctx;
    }
    if (ctx != NULL && ctx != SSL_get_SSL_CTX(s)) {
        SSL_set_SSL_CTX(s, ctx);
        if (SSL_CTX_get_options(ctx) & SSL_OP_NO_TICKET)
            SSL_set_options(s, SSL_OP_NO_TICKET);
    }
    return SSL_TLSEXT_ERR_OK;
}

/* May this TLS carry HTTP/2?  RFC 9113 9.2: TLS 1.2 or later, and on
 * TLS 1.2 none of the suites of its Appendix A (all but AEAD ones with an
 * ephemeral key exchange), which browsers answer with INADEQUATE_SECURITY.
 * TLS 1.0/1.1 (proxy.config.ssl.TLSv1*) and their CBC suites stay for
 * HTTP/1.1.  Called from the ALPN callback, where OpenSSL has chosen the
 * version and the cipher already. */
static int
tls_h2_ok(const SSL *s)
{
    const SSL_CIPHER *c = SSL_get_pending_cipher(s);
    int kx;

    if (SSL_version(s) < TLS1_2_VERSION || c == NULL || !SSL_CIPHER_is_aead(c))
        return 0;
    kx = SSL_CIPHER_get_kx_nid(c);
    return kx == NID_kx_ecdhe || kx == NID_kx_dhe || kx == NID_kx_any
           || kx == NID_kx_ecdhe_psk || kx == NID_kx_dhe_psk;
}

/* ALPN: what the port speaks (the worker sets it on each connection with
 * conf_tls_set_protos: CONF_PROTO_* in the SSL's app data, 0 meaning
 * HTTP/1.1 alone), h2 first when this TLS may carry it.  A client that
 * offers none of ours goes on without ALPN (HTTP/1.1, ATS's way) on a
 * port that speaks HTTP/1.1; on an h2-only port it is refused with
 * no_application_protocol (RFC 7301 3.2; nginx since 1.21.4), since it
 * said it cannot speak h2 and would get h2 frames.  A client without ALPN
 * at all never comes here: on an h2-only port it is taken for h2 with
 * prior knowledge, its preface deciding (as ATS's protocol probe and
 * nginx's preface check do; conn.c). */
static int
tls_alpn_cb(SSL *s, const unsigned char **out, unsigned char *outlen,
            const unsigned char *in, unsigned int inlen, void *arg)
{
    static const unsigned char both[] = "\x02h2\x08http/1.1";
    static const unsigned char h2[] = "\x02h2";
    static const unsigned char h11[] = "\x08http/1.1";
    uintptr_t protos = (uintptr_t)SSL_get_app_data(s);
    const unsigned char *ours = h11;
    unsigned ourlen = sizeof(h11) - 1;
    unsigned char *sel;

    (void)arg;
    if ((protos & CONF_PROTO_H2) && !tls_h2_ok(s)) {
        if (!(protos & CONF_PROTO_H1))
            return SSL_TLSEXT_ERR_ALERT_FATAL;  /* h2 alone: no_application_protocol */
        protos &= ~(uintptr_t)CONF_PROTO_H2;
    }
    if ((protos & CONF_PROTO_H2) && (protos & CONF_PROTO_H1)) {
        ours = both;
        ourlen = sizeof(both) - 1;
    } else if (protos & CONF_PROTO_H2) {
        ours = h2;
        ourlen = sizeof(h2) - 1;
    }
    if (SSL_select_next_proto(&sel, outlen, ours, ourlen, in, inlen)
        != OPENSSL_NPN_NEGOTIATED)
        return ours == h2 ? SSL_TLSEXT_ERR_ALERT_FATAL : SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

void
conf_tls_set_protos(struct ssl_st *s, int protos)
{
    SSL_set_app_data(s, (void *)(uintptr_t)protos);
}

int
conf_tls_alpn_h2(const struct ssl_st *s)
{
    const unsigned char *p = NULL;
    unsigned n = 0;

    SSL_get0_alpn_selected(s, &p, &n);
    return n == 2 && memcmp(p, "h2", 2) == 0;
}

/* ------------------------------------------------------------------ */
/* Building */

struct tls_load {
    struct conf        *c;
    struct conf_tls    *t;
    struct conf_errors *e;
    const char         *file;        /* ssl_multicert.config path */
    const char         *recfile;     /* records.config path, for messages */
    char               *cert_dir, *key_dir;
    int                 minv, maxv;  /* protocol range */
    int                 legacy;      /* TLS < 1.2 enabled */
    int                 any_line;    /* dest_ip=* seen */
};

/* Protocol versions from the four ATS switches. */
static int
tls_versions(struct tls_load *L)
{
    const struct conf_records *r = &L->c->rec;
    const int on[4] = { r->ssl_tlsv1, r->ssl_tlsv1_1, r->ssl_tlsv1_2, r->ssl_tlsv1_3 };
    const int ver[4] = { TLS1_VERSION, TLS1_1_VERSION, TLS1_2_VERSION, TLS1_3_VERSION };

    L->minv = L->maxv = 0;
    for (int i = 0; i < 4; i++)
        if (on[i]) {
            if (L->minv == 0)
                L->minv = ver[i];
            L->maxv = ver[i];
        }
    if (L->minv == 0) {
        conf_error(L->e, L->recfile, 0, "proxy.config.ssl.TLSv1*: every TLS "
                   "version is disabled");
        return -1;
    }
    L->legacy = L->minv < TLS1_2_VERSION;
    return 0;
}

/* A server context with the records.config settings, no certificate yet. */
static SSL_CTX *
tls_server_ctx(struct tls_load *L, int line)
{
    const struct conf_records *r = &L->c->rec;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    char *ciphers = NULL;

    if (ctx == NULL) {
        conf_error(L->e, L->file, line, "cannot create a TLS context: %s", tls_err());
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, L->minv);
    SSL_CTX_set_max_proto_version(ctx, L->maxv);
    /* Holes in the range (TLSv1 and TLSv1_2 on, TLSv1_1 off). */
    if (L->minv < TLS1_1_VERSION && L->maxv > TLS1_1_VERSION && !r->ssl_tlsv1_1)
        SSL_CTX_set_options(ctx, SSL_OP_NO_TLSv1_1);
    if (L->minv < TLS1_2_VERSION && L->maxv > TLS1_2_VERSION && !r->ssl_tlsv1_2)
        SSL_CTX_set_options(ctx, SSL_OP_NO_TLSv1_2);
    /* OpenSSL 3's level 1 refuses TLS 1.0/1.1 (SHA-1 signatures): an
     * operator who turned them on means it. */
    if (L->legacy)
        SSL_CTX_set_security_level(ctx, 0);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE
                             | SSL_OP_NO_RENEGOTIATION
                             | SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* Partial writes: one record per SSL_write, so the caller accounts
     * exactly; moving buffer: a retry may come from a re-staged copy. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE
                          | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"cistern", 7);
    SSL_CTX_set_default_passwd_cb(ctx, tls_no_passphrase);
    SSL_CTX_set_app_data(ctx, L->t);
    SSL_CTX_set_tlsext_servername_callback(ctx, tls_sni_cb);
    SSL_CTX_set_tlsext_servername_arg(ctx, L->t);
    SSL_CTX_set_alpn_select_cb(ctx, tls_alpn_cb, NULL);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, tls_ticket_cb);

    if (L->legacy && strcmp(r->ssl_cipher_suite, CONF_SSL_CIPHERS_DEFAULT) == 0) {
        if (asprintf(&ciphers, "%s:%s", r->ssl_cipher_suite, CONF_SSL_CIPHERS_LEGACY) < 0)
            ciphers = NULL;
    } else {
        ciphers = strdup(r->ssl_cipher_suite);
    }
    if (ciphers == NULL || !SSL_CTX_set_cipher_list(ctx, ciphers)) {
        conf_error(L->e, L->recfile, 0, "proxy.config.ssl.server.cipher_suite: "
                   "\"%s\": %s", r->ssl_cipher_suite, tls_err());
        goto fail;
    }
    if (!SSL_CTX_set_ciphersuites(ctx, r->ssl_tls13_suites)) {
        conf_error(L->e, L->recfile, 0, "proxy.config.ssl.server.TLSv1_3.cipher_suites: "
                   "\"%s\": %s", r->ssl_tls13_suites, tls_err());
        goto fail;
    }
    free(ciphers);
    return ctx;
fail:
    free(ciphers);
    SSL_CTX_free(ctx);
    return NULL;
}

static int
tls_readable(struct tls_load *L, int line, const char *what, const char *path)
{
    FILE *fp = fopen(path, "r");

    if (fp == NULL) {
        conf_error(L->e, L->file, line, "%s %s: %s", what, path, strerror(errno));
        return -1;
    }
    fclose(fp);
    return 0;
}

static void
tls_check_dates(struct tls_load *L, int line, const char *path, X509 *x)
{
    char when[64] = "?";
    struct tm tm;

    if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
        if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm))
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
        conf_warn(L->e, L->file, line, "certificate %s expired on %s", path, when);
    } else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) {
        if (ASN1_TIME_to_tm(X509_get0_notBefore(x), &tm))
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
        conf_warn(L->e, L->file, line, "certificate %s is not valid before %s", path, when);
    }
}

static int
tls_add_name(struct tls_load *L, const char *name, size_t len, SSL_CTX *ctx)
{
    struct conf_tls *t = L->t;
    struct tls_name *n;
    int wild = len > 2 && name[0] == '*' && name[1] == '.';

    if (len == 0 || memchr(name, '\0', len) != NULL)
        return 0;
    n = realloc(t->names, sizeof(*n) * (size_t)(t->nnames + 1));
    if (n == NULL)
        return -1;
    t->names = n;
    n = &t->names[t->nnames];
    n->name = wild ? strndup(name + 1, len - 1) : strndup(name, len);
    if (n->name == NULL)
        return -1;
    for (char *p = n->name; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    n->wildcard = wild;
    n->ctx = ctx;
    t->nnames++;
    return 0;
}

/* The names a certificate answers for: DNS SANs, else the subject CN. */
static int
tls_cert_names(struct tls_load *L, X509 *x, SSL_CTX *ctx)
{
    GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int ndns = 0, rc = 0;

    for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        if (g->type != GEN_DNS)
            continue;
        ndns++;
        if (tls_add_name(L, (const char *)ASN1_STRING_get0_data(g->d.dNSName),
                         (size_t)ASN1_STRING_length(g->d.dNSName), ctx) < 0)
            rc = -1;
    }
    GENERAL_NAMES_free(sans);
    if (ndns == 0) {
        X509_NAME *sub = X509_get_subject_name(x);
        int idx = X509_NAME_get_index_by_NID(sub, NID_commonName, -1);
        if (idx >= 0) {
            ASN1_STRING *cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(sub, idx));
            if (tls_add_name(L, (const char *)ASN1_STRING_get0_data(cn),
                             (size_t)ASN1_STRING_length(cn), ctx) < 0)
                rc = -1;
        }
    }
    return rc;
}

/* Extra chain certificates (ssl_ca_name). */
static int
tls_load_chain(struct tls_load *L, int line, SSL_CTX *ctx, const char *path)
{
    FILE *fp;
    X509 *x;
    int n = 0;

    if (tls_readable(L, line, "ssl_ca_name", path) < 0)
        return -1;
    fp = fopen(path, "r");
    if (fp == NULL)
        return -1;
    while ((x = PEM_read_X509(fp, NULL, NULL, NULL)) != NULL) {
        if (!SSL_CTX_add0_chain_cert(ctx, x)) {
            X509_free(x);
            fclose(fp);
            conf_error(L->e, L->file, line, "ssl_ca_name %s: %s", path, tls_err());
            return -1;
        }
        n++;
    }
    fclose(fp);
    ERR_clear_error();      /* the loop ends on "no start line" */
    if (n == 0) {
        conf_error(L->e, L->file, line, "ssl_ca_name %s: no certificate in the file", path);
        return -1;
    }
    return 0;
}

/* Split a comma list in place into at most max parts; returns the count. */
static int
tls_split(char *s, char **out, int max)
{
    int n = 0;
    char *save = NULL, *p;

    for (p = strtok_r(s, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (n == max)
            return max + 1;
        out[n++] = p;
    }
    return n;
}

/* The key=value options of one ssl_multicert.config line. */
struct tls_line_opts {
    char *cert, *key, *ca, *dest;
    int   tickets;
};

/* tls_line, 1: read the options of the line (errors recorded). */
static void
tls_line_opts(struct tls_load *L, char *line, int lineno, struct tls_line_opts *o)
{
    char *cur = line, *tok;

    while ((tok = conf_token(&cur)) != NULL) {
        char *eq = strchr(tok, '=');
        if (eq == NULL || eq == tok || eq[1] == '\0') {
            conf_error(L->e, L->file, lineno, "\"%s\" is not key=value", tok);
            continue;
        }
        *eq = '\0';
        char *v = eq + 1;
        if (v[0] == '"' && strlen(v) > 1 && v[strlen(v) - 1] == '"') {
            v[strlen(v) - 1] = '\0';
            v++;
        }
        if (strcmp(tok, "ssl_cert_name") == 0)
            o->cert = v;
        else if (strcmp(tok, "ssl_key_name") == 0)
            o->key = v;
        else if (strcmp(tok, "ssl_ca_name") == 0)
            o->ca = v;
        else if (strcmp(tok, "dest_ip") == 0)
            o->dest = v;
        else if (strcmp(tok, "ssl_ticket_enabled") == 0 && (!strcmp(v, "0") || !strcmp(v, "1")))
            o->tickets = v[0] == '1';
        else if (strcmp(tok, "ssl_key_dialog") == 0 && strcmp(v, "builtin") != 0)
            conf_error(L->e, L->file, lineno, "ssl_key_dialog=%s: pass phrases are not "
                       "supported (keys are loaded unattended)", v);
        else if (strcmp(tok, "ssl_key_dialog") == 0)
            conf_error(L->e, L->file, lineno, "ssl_key_dialog=builtin: pass phrases "
                       "are not supported (keys are loaded unattended)");
        else if (strcmp(tok, "action") == 0)
            conf_error(L->e, L->file, lineno, "action=%s is not supported", v);
        else
            conf_error(L->e, L->file, lineno, "unknown key \"%s\" (expected dest_ip, "
                       "ssl_cert_name, ssl_key_name, ssl_ca_name or ssl_ticket_enabled)", tok);
    }
}

/* tls_line, 2: dest_ip= (an address, or * for the default of every
 * address) into tc (errors recorded). */
static void
tls_line_dest(struct tls_load *L, int lineno, const char *dest, struct tls_cert *tc)
{
    if (strcmp(dest, "*") == 0) {
        if (L->any_line)
            conf_error(L->e, L->file, lineno, "dest_ip=* given twice (line %d first)",
                       L->any_line);
        tc->any_ip = 1;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&tc->ip;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&tc->ip;
        if (inet_pton(AF_INET, dest, &s4->sin_addr) == 1)
            s4->sin_family = AF_INET;
        else if (inet_pton(AF_INET6, dest, &s6->sin6_addr) == 1)
            s6->sin6_family = AF_INET6;
        else
            conf_error(L->e, L->file, lineno, "dest_ip=%s is not an address or *", dest);
        tc->has_ip = 1;
    }
}

/* tls_line, 3: load the nc certificate and key pairs into ctx (keys NULL:
 * each key is in its certificate's file); errors recorded. */
static void
tls_line_pairs(struct tls_load *L, int lineno, SSL_CTX *ctx, char **certs, char **keys,
               int nc)
{
    for (int i = 0; i < nc; i++) {
        char *cp = conf_path(L->cert_dir, certs[i]);
        char *kp = conf_path(L->key_dir, keys ? keys[i] : certs[i]);
        if (keys == NULL) {
            free(kp);
            kp = cp ? strdup(cp) : NULL;
        }
        if (cp == NULL || kp == NULL) {
            conf_error(L->e, L->file, lineno, "out of memory");
        } else if (tls_readable(L, lineno, "ssl_cert_name", cp) == 0
                   && (keys == NULL || tls_readable(L, lineno, "ssl_key_name", kp) == 0)) {
            if (!SSL_CTX_use_certificate_chain_file(ctx, cp)) {
                conf_error(L->e, L->file, lineno, "ssl_cert_name %s: cannot load the "
                           "certificate: %s", cp, tls_err());
            } else if (!SSL_CTX_use_PrivateKey_file(ctx, kp, SSL_FILETYPE_PEM)) {
                conf_error(L->e, L->file, lineno, "ssl_key_name %s: cannot load the "
                           "private key: %s", kp, tls_err());
            } else if (!SSL_CTX_check_private_key(ctx)) {
                ERR_clear_error();
                conf_error(L->e, L->file, lineno, "ssl_key_name %s does not match the "
                           "certificate %s", kp, cp);
            } else {
                X509 *x = SSL_CTX_get0_certificate(ctx);
                tls_check_dates(L, lineno, cp, x);
                if (tls_cert_names(L, x, ctx) < 0)
                    conf_error(L->e, L->file, lineno, "out of memory");
            }
        }
        free(cp);
        free(kp);
    }
}

/* One line of ssl_multicert.config: its options, then one SSL_CTX with
 * every certificate and key pair it names, appended to L->t->certs when
 * nothing on the line failed.  Always 0 (go on: errors are recorded). */
static int
tls_line(void *arg, char *line, int lineno)
{
    struct tls_load *L = arg;
    struct tls_line_opts o = { .tickets = 1 };
    int n0 = L->e->n;
    struct tls_cert tc;
    SSL_CTX *ctx = NULL;

    memset(&tc, 0, sizeof(tc));
    tls_line_opts(L, line, lineno, &o);
    if (o.cert == NULL) {
        conf_error(L->e, L->file, lineno, "ssl_cert_name is missing");
        return 0;
    }
    if (o.dest != NULL)
        tls_line_dest(L, lineno, o.dest, &tc);
    if (L->e->n != n0)
        return 0;

    char *certs[CERTS_PER_LINE + 1], *keys[CERTS_PER_LINE + 1];
    int nc = tls_split(o.cert, certs, CERTS_PER_LINE), nk = 0;
    if (o.key != NULL)
        nk = tls_split(o.key, keys, CERTS_PER_LINE);
    if (nc > CERTS_PER_LINE || nc == 0 || (o.key != NULL && nk != nc)) {
        conf_error(L->e, L->file, lineno, "ssl_cert_name lists %d certificate(s) and "
                   "ssl_key_name %d key(s); expected 1 to %d of each, pairwise",
                   nc, o.key ? nk : nc, CERTS_PER_LINE);
        return 0;
    }
    if ((ctx = tls_server_ctx(L, lineno)) == NULL)
        return 0;
    if (!o.tickets)
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    tls_line_pairs(L, lineno, ctx, certs, o.key ? keys : NULL, nc);
    if (o.ca != NULL && L->e->n == n0) {
        char *p = conf_path(L->key_dir, o.ca);
        if (p == NULL)
            conf_error(L->e, L->file, lineno, "out of memory");
        else
            tls_load_chain(L, lineno, ctx, p);
        free(p);
    }
    if (L->e->n != n0) {
        SSL_CTX_free(ctx);
        return 0;
    }
    struct tls_cert *nv = realloc(L->t->certs, sizeof(*nv) * (size_t)(L->t->ncerts + 1));
    if (nv == NULL) {
        SSL_CTX_free(ctx);
        conf_error(L->e, L->file, lineno, "out of memory");
        return 0;
    }
    L->t->certs = nv;
    tc.ctx = ctx;
    tc.line = lineno;
    nv[L->t->ncerts++] = tc;
    if (tc.any_ip)
        L->any_line = lineno;
    if (tc.has_ip)
        L->t->by_ip = 1;
    return 0;
}

/* Ticket keys: ATS's key file, or the process's own random key. */
static int
tls_ticket_keys(struct tls_load *L)
{
    const char *f = L->c->rec.ssl_ticket_key_file;
    struct conf_tls *t = L->t;

    if (f == NULL || strcmp(f, "NULL") == 0) {
        if (!tls_proc_key_set) {
            if (RAND_bytes(tls_proc_key.name, 16) <= 0
                || RAND_bytes(tls_proc_key.hmac, 32) <= 0
                || RAND_bytes(tls_proc_key.aes, 32) <= 0) {
                conf_error(L->e, L->recfile, 0, "cannot generate session ticket "
                           "keys: %s", tls_err());
                return -1;
            }
            tls_proc_key.hmac_len = 32;
            tls_proc_key.aes256 = 1;
            tls_proc_key_set = 1;
        }
        t->keys[0] = tls_proc_key;
        t->nkeys = 1;
        return 0;
    }
    char *path = conf_path(L->c->confdir, f);
    unsigned char buf[48 * TICKET_KEYS_MAX];
    size_t n = 0;
    FILE *fp = path ? fopen(path, "rb") : NULL;
    if (fp == NULL) {
        conf_error(L->e, L->recfile, 0, "proxy.config.ssl.server.ticket_key.filename: "
                   "%s: %s", path ? path : f, strerror(errno));
        free(path);
        return -1;
    }
    n = fread(buf, 1, sizeof(buf), fp);
    int more = fgetc(fp) != EOF;
    fclose(fp);
    if (n == 0 || n % 48 != 0 || more) {
        conf_error(L->e, L->recfile, 0, "proxy.config.ssl.server.ticket_key.filename: "
                   "%s: expected 1 to %d keys of 48 bytes", path, TICKET_KEYS_MAX);
        free(path);
        OPENSSL_cleanse(buf, sizeof(buf));
        return -1;
    }
    for (size_t i = 0; i < n / 48; i++) {
        struct tls_ticket_key *k = &t->keys[i];
        memcpy(k->name, buf + i * 48, 16);
        memcpy(k->hmac, buf + i * 48 + 16, 16);
        memcpy(k->aes, buf + i * 48 + 32, 16);
        k->hmac_len = 16;
        k->aes256 = 0;
    }
    t->nkeys = (int)(n / 48);
    OPENSSL_cleanse(buf, sizeof(buf));
    free(path);
    return 0;
}

/* The context for https origins. */
static int
tls_client(struct tls_load *L)
{
    const struct conf_records *r = &L->c->rec;
    struct conf_tls *t = L->t;
    const char *cf = r->ssl_client_ca_file, *cp = r->ssl_client_ca_path;
    char *file = NULL, *dir = NULL;
    int rc = 0;

    if (strcmp(r->ssl_verify_policy, "PERMISSIVE") == 0)
        t->verify = CONF_VERIFY_PERMISSIVE;
    else if (strcmp(r->ssl_verify_policy, "DISABLED") == 0)
        t->verify = CONF_VERIFY_DISABLED;
    else
        t->verify = CONF_VERIFY_ENFORCED;
    t->client = SSL_CTX_new(TLS_client_method());
    if (t->client == NULL) {
        conf_error(L->e, L->recfile, 0, "cannot create a TLS context: %s", tls_err());
        return -1;
    }
    SSL_CTX_set_min_proto_version(t->client, TLS1_2_VERSION);
    /* No SSL_OP_IGNORE_UNEXPECTED_EOF: an origin that closes without
     * close_notify has been cut (or an attacker cut it), and for a body
     * delimited by the close that is the only sign of truncation.  The
     * read fails (proxy.c: a 502, or the client cut), nothing is stored.
     * Bodies framed by HTTP end before that read. */
    SSL_CTX_set_options(t->client, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(t->client, SSL_MODE_ENABLE_PARTIAL_WRITE
                                | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(t->client, SSL_SESS_CACHE_OFF);
    if (cf && strcmp(cf, "NULL") != 0)
        file = conf_path(L->c->confdir, cf);
    if (cp && strcmp(cp, "NULL") != 0)
        dir = conf_path(L->c->confdir, cp);
    if (file || dir) {
        /* Configured CAs replace the system store. */
        if (file && access(file, R_OK) < 0) {
            conf_error(L->e, L->recfile, 0, "proxy.config.ssl.client.CA.cert.filename: "
                       "%s: %s", file, strerror(errno));
            rc = -1;
        } else if (dir && access(dir, R_OK | X_OK) < 0) {
            conf_error(L->e, L->recfile, 0, "proxy.config.ssl.client.CA.cert.path: "
                       "%s: %s", dir, strerror(errno));
            rc = -1;
        } else if (!SSL_CTX_load_verify_locations(t->client, file, dir)) {
            conf_error(L->e, L->recfile, 0, "proxy.config.ssl.client.CA.cert.filename: "
                       "%s: %s", file ? file : dir, tls_err());
            rc = -1;
        }
    } else if (!SSL_CTX_set_default_verify_paths(t->client)) {
        conf_warn(L->e, L->recfile, 0, "cannot load the system CA store: %s", tls_err());
    }
    free(file);
    free(dir);
    /* Verification always runs (SSL_get_verify_result tells PERMISSIVE
     * what to log); only ENFORCED fails the handshake on it. */
    SSL_CTX_set_verify(t->client, t->verify == CONF_VERIFY_ENFORCED
                                  ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    return rc;
}

int
conf_tls_load(struct conf *c, struct conf_errors *e)
{
    struct tls_load L;
    int n0 = e->n, any_ssl = 0;
    char *recfile = conf_path(c->confdir, "records.config");

    memset(&L, 0, sizeof(L));
    L.c = c;
    L.e = e;
    L.recfile = recfile ? recfile : "records.config";
    L.t = c->tls = calloc(1, sizeof(*c->tls));
    if (c->tls == NULL || recfile == NULL) {
        conf_error(e, c->confdir, 0, "out of memory");
        free(recfile);
        return -1;
    }
    L.t->magic = TLS_MAGIC;
    for (int i = 0; i < c->rec.nports; i++)
        any_ssl |= c->rec.ports[i].ssl;

    tls_client(&L);

    char *file = conf_path(c->confdir, c->rec.ssl_multicert);
    L.cert_dir = conf_path(c->confdir, c->rec.ssl_cert_path);
    L.key_dir = conf_path(c->confdir, c->rec.ssl_key_path);
    L.file = file;
    if (file == NULL || L.cert_dir == NULL || L.key_dir == NULL) {
        conf_error(e, c->confdir, 0, "out of memory");
    } else if (access(file, F_OK) == 0 || errno != ENOENT || any_ssl) {
        if (tls_versions(&L) == 0 && tls_ticket_keys(&L) == 0) {
            conf_foreach_line(file, e, tls_line, &L);
            if (e->n == n0 && L.t->ncerts == 0 && any_ssl)
                conf_error(e, file, 0, "no certificates, but "
                           "proxy.config.http.server_ports has ssl ports");
        }
    }
    if (e->n == n0 && L.t->ncerts > 0) {
        L.t->def = L.t->certs[0].ctx;
        for (int i = 0; i < L.t->ncerts; i++)
            if (L.t->certs[i].any_ip)
                L.t->def = L.t->certs[i].ctx;
    }
    free(file);
    free(L.cert_dir);
    free(L.key_dir);
    free(recfile);
    return e->n == n0 ? 0 : -1;
}

void
conf_tls_free(struct conf_tls *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < t->ncerts; i++)
        SSL_CTX_free(t->certs[i].ctx);
    for (int i = 0; i < t->nnames; i++)
        free(t->names[i].name);
    free(t->certs);
    free(t->names);
    SSL_CTX_free(t->client);
    OPENSSL_cleanse(t->keys, sizeof(t->keys));
    t->magic = 0;
    free(t);
}

struct ssl_ctx_st *
conf_tls_server_ctx(const struct conf_tls *t)
{
    return t ? t->def : NULL;
}

struct ssl_ctx_st *
conf_tls_client_ctx(const struct conf_tls *t)
{
    return t ? t->client : NULL;
}

enum conf_verify
conf_tls_verify_policy(const struct conf_tls *t)
{
    return t ? t->verify : CONF_VERIFY_ENFORCED;
}
