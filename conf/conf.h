/*
 * conf/conf.h: Cistern's configuration, read from ATS-syntax files.
 *
 * A configuration is one immutable `struct conf` built by conf_load() from a
 * config directory: records.config, remap.config, ip_allow.config and
 * storage.config.  Reload builds a whole new struct conf; if anything fails
 * the old one stays in use (nginx's "cycle" idea).  Nothing in here is ever
 * modified after conf_load() returns, so a forked worker can read it freely.
 *
 * Every parse error is recorded as "file:line: message" in a struct
 * conf_errors; conf_load() collects all of them (it does not stop at the
 * first) so `cistern -t` shows an operator every problem at once.
 *
 * Relative paths inside the config resolve against the config directory.
 */
#ifndef CISTERN_CONF_H
#define CISTERN_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <regex.h>
#include <netinet/in.h>

#include "conf/parse.h"

#define CONF_MAX_PORTS    16

/* ---------------------------------------------------------------------
 * records.config: CONFIG name TYPE value
 */
struct conf_port {
    int      port;                    /* 0 = pick a free port */
    int      ssl;                     /* "443:ssl" */
    int      ipv6;                    /* "8080:ipv6": listen on [::] (IPv6 only) */
};

struct conf_records {
    struct conf_port ports[CONF_MAX_PORTS];
    int      nports;                  /* proxy.config.http.server_ports */
    int      workers;                 /* proxy.config.cistern.workers (0=ncpu) */
    int      remap_required;          /* proxy.config.url_remap.remap_required */
    int      pristine_host_hdr;       /* proxy.config.url_remap.pristine_host_hdr */
    int      push_method_enabled;     /* proxy.config.http.push_method_enabled */
    int      required_headers;        /* proxy.config.http.cache.required_headers */
    int      ka_no_activity_in;       /* ...keep_alive_no_activity_timeout_in */
    int      ka_no_activity_out;      /* ...keep_alive_no_activity_timeout_out */
    int      txn_no_activity_in;      /* ...transaction_no_activity_timeout_in */
    int      txn_no_activity_out;     /* ...transaction_no_activity_timeout_out */
    int      txn_active_in;           /* ...transaction_active_timeout_in (0: none) */
    int      txn_active_out;          /* ...transaction_active_timeout_out (0: none) */
    int      accept_no_activity;      /* proxy.config.http.accept_no_activity_timeout */
    int      connect_timeout;         /* proxy.config.http.connect_attempts_timeout */
    int      request_header_timeout;  /* proxy.config.cistern.request_header_timeout */
    int      request_header_max_size; /* proxy.config.http.request_header_max_size */
    int      request_line_max_size;   /* proxy.config.http.request_line_max_size */
    int      response_header_max_size;/* proxy.config.http.response_header_max_size */
    int      shutdown_timeout;        /* proxy.config.stop.shutdown_timeout */
    int      origin_max_idle;         /* proxy.config.http.per_server.connection.max_idle (per worker) */
    int      connections_throttle;    /* proxy.config.net.connections_throttle (per worker) */
    int64_t  max_doc_size;            /* proxy.config.cache.max_doc_size */
    int      debug_headers;           /* proxy.config.cistern.debug_headers */
    int      heuristic_min_lifetime;  /* proxy.config.http.cache.heuristic_min_lifetime */
    int      heuristic_max_lifetime;  /* proxy.config.http.cache.heuristic_max_lifetime */
    int      normalize_ae;            /* proxy.config.http.normalize_ae */
    int      range_write;             /* proxy.config.http.cache.range.write */
    int      cdn_cache_control;       /* proxy.config.cistern.cdn_cache_control */
    int      cache_set_cookie;        /* proxy.config.cistern.cache.set_cookie:
                                         0 a response with Set-Cookie is not
                                         stored, 1 stored without it */
    int      logging_enabled;         /* proxy.config.log.logging_enabled */
    int      collapse_timeout;        /* proxy.config.cistern.collapse_timeout */
    char    *cache_eviction;          /* proxy.config.cistern.cache.eviction */
    char    *access_log_format;       /* proxy.config.cistern.access_log_format */
    char    *logfile_dir;             /* proxy.config.log.logfile_dir (absolute) */
    char    *run_dir;                 /* proxy.config.cistern.run_dir (absolute) */
    char    *proxy_name;              /* proxy.config.proxy_name (Via) */
    char    *error_log_level;         /* proxy.config.cistern.log_level */
    char    *admin_allow;             /* proxy.config.cistern.admin.allow */
    char    *connect_ports;           /* proxy.config.http.connect_ports
                                         (conf_port_list_has) */
    char    *user_id;                 /* proxy.config.admin.user_id ("#-1": keep) */
    /* TLS (conf/ssl_multicert.c) */
    char    *ssl_multicert;           /* proxy.config.ssl.server.multicert.filename */
    char    *ssl_cert_path;           /* proxy.config.ssl.server.cert.path */
    char    *ssl_key_path;            /* proxy.config.ssl.server.private_key.path */
    char    *ssl_cipher_suite;        /* proxy.config.ssl.server.cipher_suite */
    char    *ssl_tls13_suites;        /* proxy.config.ssl.server.TLSv1_3.cipher_suites */
    char    *ssl_ticket_key_file;     /* proxy.config.ssl.server.ticket_key.filename */
    int      ssl_tlsv1, ssl_tlsv1_1,  /* proxy.config.ssl.TLSv1, TLSv1_1, */
             ssl_tlsv1_2, ssl_tlsv1_3;/*   TLSv1_2, TLSv1_3 */
    char    *ssl_verify_policy;       /* proxy.config.ssl.client.verify.server.policy */
    char    *ssl_client_ca_file;      /* proxy.config.ssl.client.CA.cert.filename */
    char    *ssl_client_ca_path;      /* proxy.config.ssl.client.CA.cert.path */
};

/* Is port in list, ATS's proxy.config.http.connect_ports syntax: ports
 * and ranges ("443 563 8000-9000"), separated by spaces or commas, or "*"
 * for any?  1 yes, 0 no, -1 the list is malformed (port -1: only check). */
int conf_port_list_has(const char *list, int port);

/* ---------------------------------------------------------------------
 * remap.config
 */
enum conf_remap_type {
    CONF_REMAP_MAP = 1,
    CONF_REMAP_REVERSE_MAP,
    CONF_REMAP_REGEX_MAP,
    CONF_REMAP_REDIRECT,
    CONF_REMAP_REDIRECT_TEMPORARY,
};

struct conf_url {
    char    *scheme;                  /* "http" / "https", lowercase */
    char    *host;                    /* lowercase; for regex_map: the pattern */
    int      port;                    /* explicit or the scheme's default */
    int      port_explicit;
    char    *path;                    /* always starts with '/' */
    size_t   hostlen, pathlen;
};

struct conf_remap_rule {
    enum conf_remap_type type;
    struct conf_url from;
    struct conf_url to;
    regex_t  re;                      /* CONF_REMAP_REGEX_MAP only */
    int      re_ok;
    const char *file;                 /* owned by struct conf_remap */
    int      line;
};

struct conf_remap {
    struct conf_remap_rule *rules;    /* file order (includes followed) */
    int      nrules;
    char   **files;                   /* names for rule->file */
    int      nfiles;
};

/* The target of a matched rule, built by conf_remap_apply(). */
struct conf_remap_result {
    const struct conf_remap_rule *rule;
    char     scheme[8];
    char     host[256];
    int      port;
    size_t   pathlen;                 /* new path + query, NUL terminated */
    char     path[8192];
};

/* Find the rule for a request, by ATS precedence: map / regex_map first (file
 * order), then redirect / redirect_temporary (file order).  reverse_map rules
 * never match requests (they rewrite responses).  host need not be
 * lowercase; port is the request's port (the scheme default when the Host
 * header had none).  path includes the query.  Returns NULL when nothing
 * matches.  On match, fills *res with the rewritten target: path prefix
 * replaced, the rest of the path and the query appended, regex_map's $0-$9
 * substituted into the target host.  Returns NULL too when the rewritten
 * target would not fit in *res, or when it would hold a dot segment the
 * request path did not (a from-path not ending in '/' glues the rest to the
 * to-path: "/p.." under "map http://a/p http://o/q/" would be "/q/..").
 * path is expected normalised (http_path_normalize): matching is on bytes,
 * so "/a/../b" would match a rule for "/a/". */
const struct conf_remap_rule *
conf_remap_find(const struct conf_remap *rm, const char *scheme,
                const char *host, size_t hostlen, int port,
                const char *path, size_t pathlen,
                struct conf_remap_result *res);

/* For reverse_map (and map rules, as ATS does): rewrite a Location-style URL
 * from the origin's form back to the client's.  Returns 1 and fills out
 * (NUL-terminated) when rewritten, 0 when no rule applies or out too small.
 * reverse_map rules are tried first (file order), then map rules.  As in
 * ATS, "reverse_map ORIGIN CLIENT" rewrites urls under its from-URL to its
 * to-URL, while "map CLIENT ORIGIN" is used backwards (to-URL -> from-URL).
 * "Under" means same scheme, host (case-insensitive), port (omitted = the
 * scheme default) and a path starting with the rule's path; the output
 * carries the client URL's port only when it was written explicitly. */
int conf_remap_reverse(const struct conf_remap *rm, const char *url,
                       size_t urllen, char *out, size_t outlen);

/* ---------------------------------------------------------------------
 * ip_allow.config (ATS 8 line syntax)
 */
#define CONF_METHOD_GET      (1u << 0)
#define CONF_METHOD_HEAD     (1u << 1)
#define CONF_METHOD_POST     (1u << 2)
#define CONF_METHOD_PUT      (1u << 3)
#define CONF_METHOD_DELETE   (1u << 4)
#define CONF_METHOD_OPTIONS  (1u << 5)
#define CONF_METHOD_TRACE    (1u << 6)
#define CONF_METHOD_CONNECT  (1u << 7)
#define CONF_METHOD_PATCH    (1u << 8)
#define CONF_METHOD_PURGE    (1u << 9)
#define CONF_METHOD_PUSH     (1u << 10)
#define CONF_METHOD_OTHER    (1u << 11)
#define CONF_METHOD_ALL      0xfffu

struct conf_ip_range {
    int      family;                  /* AF_INET or AF_INET6 */
    uint8_t  lo[16], hi[16];          /* inclusive, network order; v4 in 4 bytes */
};

struct conf_ip_rule {
    struct conf_ip_range range;
    int      allow;                   /* action=ip_allow (1) / ip_deny (0) */
    unsigned methods;                 /* CONF_METHOD_* bits */
    int      line;
};

struct conf_ip_allow {
    struct conf_ip_rule *rules;
    int      nrules;
};

/* Parse a space/comma separated list of addresses, ranges or CIDRs into
 * allow-everything rules appended to ia.  Returns 0, or -1 with *why. */
int conf_ip_list_parse(struct conf_ip_allow *ia, const char *list,
                       const char **why);

/* Map a method name to its CONF_METHOD_* bit (unknown -> CONF_METHOD_OTHER). */
unsigned conf_method_bit(const char *name, size_t len);

/* First matching rule decides: returns 1 when the address may use the
 * method, 0 when denied (also when no rule matches).  sa is a sockaddr_in or
 * sockaddr_in6 (v4-mapped v6 addresses are checked as v4). */
int conf_ip_allowed(const struct conf_ip_allow *ia, const struct sockaddr *sa,
                    unsigned method_bit);

/* ---------------------------------------------------------------------
 * storage.config: "path size" lines, e.g. "var/cache 256M"
 */
struct conf_storage {
    char    *path;                    /* absolute */
    int64_t  size;                    /* bytes */
    int      line;
};

struct conf_storages {
    struct conf_storage *spans;
    int      nspans;
};

/* ---------------------------------------------------------------------
 * The whole configuration
 */
struct conf {
    char                *confdir;     /* absolute */
    struct conf_records  rec;
    struct conf_remap    remap;
    struct conf_ip_allow ip_allow;
    struct conf_storages storage;
    struct conf_ip_allow admin_allow; /* from proxy.config.cistern.admin.allow */
    struct conf_tls     *tls;         /* certificates and TLS contexts, or NULL
                                         (conf/ssl_multicert.c) */
};

/* Load and validate everything under confdir.  Returns the new config, or
 * NULL when any error was recorded in *errs (warnings alone do not fail).
 * errs must be zeroed by the caller. */
struct conf *conf_load(const char *confdir, struct conf_errors *errs);
void conf_free(struct conf *c);

/* Per-file parsers, used by conf_load() and directly by the unit tests.
 * Each returns 0 on success, -1 when it recorded at least one error.
 * `file` is the path used in messages; `dir` resolves relative paths and
 * .include.  A missing optional file is not an error for the caller to
 * worry about: conf_load() decides which files are required.
 * The remap, ip_allow and storage parsers append to their struct, which
 * must start zeroed; conf_records_parse() expects conf_records_defaults()
 * to have run.  Each *_free() releases what the struct owns and leaves it
 * zeroed (records: its strings NULL). */
void conf_records_defaults(struct conf_records *r);
int  conf_records_parse(struct conf_records *r, const char *file,
                        const char *dir, struct conf_errors *e);
void conf_records_free(struct conf_records *r);

int  conf_remap_parse(struct conf_remap *rm, const char *file,
                      const char *dir, struct conf_errors *e);
void conf_remap_free(struct conf_remap *rm);

int  conf_ip_allow_parse(struct conf_ip_allow *ia, const char *file,
                         struct conf_errors *e);
void conf_ip_allow_defaults(struct conf_ip_allow *ia);
void conf_ip_allow_free(struct conf_ip_allow *ia);

int  conf_storage_parse(struct conf_storages *st, const char *file,
                        const char *dir, struct conf_errors *e);
void conf_storage_free(struct conf_storages *st);

/* ssl_multicert.config and the TLS contexts built from it (OpenSSL).
 * conf_tls_load() reads the certificates and private keys (the master does
 * it, before any privilege drop, and again on every reload) and builds one
 * SSL_CTX per certificate line plus the client context for https origins;
 * c->tls stays NULL when there is no ssl_multicert.config and no ssl port.
 * Returns 0, or -1 after recording errors as file:line.  conf_tls_free()
 * releases all of it (conf_free() calls it). */
struct conf_tls;
struct ssl_ctx_st;
int  conf_tls_load(struct conf *c, struct conf_errors *e);
void conf_tls_free(struct conf_tls *t);
/* The context a TLS listener starts every handshake with (the default
 * certificate; SNI switches to another), or NULL. */
struct ssl_ctx_st *conf_tls_server_ctx(const struct conf_tls *t);
/* The context for connections to https origins, or NULL. */
struct ssl_ctx_st *conf_tls_client_ctx(const struct conf_tls *t);
/* The default of proxy.config.ssl.server.cipher_suite (records.c): TLS 1.2
 * AEAD suites only.  TLS 1.0 and 1.1 have none, so enabling them with this
 * default adds the ECDHE CBC suites they need. */
#define CONF_SSL_CIPHERS_DEFAULT \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define CONF_SSL_CIPHERS_LEGACY \
    "ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:" \
    "ECDHE-ECDSA-AES256-SHA:ECDHE-RSA-AES256-SHA"
/* proxy.config.ssl.client.verify.server.policy */
enum conf_verify { CONF_VERIFY_ENFORCED = 0, CONF_VERIFY_PERMISSIVE, CONF_VERIFY_DISABLED };
enum conf_verify conf_tls_verify_policy(const struct conf_tls *t);

#endif /* CISTERN_CONF_H */
