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
#include <stdio.h>
#include <regex.h>
#include <netinet/in.h>

#include "conf/parse.h"
#include "conf/logging.h"

#define CONF_MAX_PORTS    16

/* ---------------------------------------------------------------------
 * records.config: CONFIG name TYPE value
 */
/* One descriptor of proxy.config.http.server_ports, ATS syntax
 * (conf/records.c rec_parse_port): "8080", "8080:ipv6", "443:ssl",
 * "ip-in=127.0.0.1:8080", "ip-in=[::1]:8080:pp", "8080:proto=http".  Each
 * descriptor is one listener; "8080 8080:ipv6" is two, one per family.
 * The struct is zeroed before it is filled, so two descriptors that mean
 * the same listener compare equal with memcmp (the reload check). */
struct conf_port {
    int      port;                    /* 0 = pick a free port */
    int      ssl;                     /* "443:ssl" */
    int      ipv6;                    /* "8080:ipv6" or an IPv6 ip-in: listen on
                                         IPv6 only (IPV6_V6ONLY) */
    int      pp;                      /* "8080:pp": every connection starts
                                         with a PROXY protocol header */
    int      proto;                   /* "proto=http;http2": CONF_PROTO_* bits;
                                         0: the default (ssl: HTTP/1.1 and
                                         h2 by ALPN; cleartext: HTTP/1.x) */
    int      has_addr;                /* "ip-in=ADDR": bind that address
                                         (else the family's any address) */
    uint8_t  addr[16];                /* network order; IPv4 in the first 4 */
};

#define CONF_PROTO_H1 0x1             /* HTTP/1.0 and 1.1 */
#define CONF_PROTO_H2 0x2             /* HTTP/2: ALPN h2 on ssl, prior
                                         knowledge (h2c) on cleartext */
/* The protocols a port speaks (its proto=, or the default). */
static inline int
conf_port_protos(const struct conf_port *p)
{
    if (p->proto)
        return p->proto;
    return p->ssl ? CONF_PROTO_H1 | CONF_PROTO_H2 : CONF_PROTO_H1;
}

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
    int      bg_fill_milli;           /* ...http.background_fill_completed_threshold, thousandths */
    int      rww_enable;              /* proxy.config.cache.enable_read_while_writer */
    int      bg_fill_timeout;         /* ...http.background_fill_active_timeout, s (0: none) */
    int      debug_headers;           /* proxy.config.cistern.debug_headers */
    int      heuristic_min_lifetime;  /* proxy.config.http.cache.heuristic_min_lifetime */
    int      heuristic_max_lifetime;  /* proxy.config.http.cache.heuristic_max_lifetime */
    int      heuristic_lm_milli;      /* ...cache.heuristic_lm_factor, in thousandths */
    int      normalize_ae;            /* proxy.config.http.normalize_ae */
    int      range_write;             /* proxy.config.http.cache.range.write */
    int      slice_blockbytes;        /* proxy.config.cistern.slice.blockbytes */
    int      cdn_cache_control;       /* proxy.config.cistern.cdn_cache_control */
    int      purge_forward_tags;      /* proxy.config.cistern.purge.forward_tags */
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
    char    *plugin_dir;              /* proxy.config.plugin.plugin_dir (absolute) */
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
    /* issue 18, remap ACLs */
    int      acl_behavior_policy;     /* proxy.config.url_remap.acl_behavior_policy
                                         (enum conf_acl_policy) */
    /* issue 18, ports: the PROXY protocol */
    char    *pp_allowlist;            /* proxy.config.http.proxy_protocol_allowlist
                                         ("none" or empty: every peer) */
    char    *acl_subjects;            /* proxy.config.acl.subjects (ATS 9.2.11+):
                                         PEER and/or PROXY; either way the
                                         ACLs see the PROXY address when a
                                         header carried one (ATS 9) */
    /* issue 18, policy keys (what is cached and how; CACHING.md) */
    int      cache_http;              /* proxy.config.http.cache.http */
    int      cache_cookies;           /* ...cache.cache_responses_to_cookies 0-4 */
    int      ignore_client_cc_max_age;/* ...cache.ignore_client_cc_max_age */
    int      ignore_client_no_cache;  /* ...cache.ignore_client_no_cache */
    int      ignore_server_no_cache;  /* ...cache.ignore_server_no_cache */
    int      ignore_authentication;   /* ...cache.ignore_authentication */
    int      when_to_revalidate;      /* ...cache.when_to_revalidate 0-4 */
    int      max_stale_age;           /* ...cache.max_stale_age */
    int      guaranteed_min_lifetime; /* ...cache.guaranteed_min_lifetime */
    int      guaranteed_max_lifetime; /* ...cache.guaranteed_max_lifetime (0: none) */
    int      negative_caching_enabled;/* proxy.config.http.negative_caching_enabled */
    int      negative_caching_lifetime;/* ...negative_caching_lifetime */
    char    *negative_caching_list;   /* ...negative_caching_list (statuses) */
    int      negative_revalidating;   /* ...negative_revalidating_enabled */
    /* issue 18, header and origin-retry keys (worker/via.c, origin.c) */
    int      insert_client_ip;        /* proxy.config.http.insert_client_ip:
                                         0 no Client-ip, 1 unless the client
                                         sent one, 2 always (replacing it) */
    int      insert_xff;              /* ...insert_squid_x_forwarded_for */
    int      insert_forwarded;        /* ...insert_forwarded: CONF_FWD_* bits */
    int      via_req_level;           /* ...insert_request_via_str 0-3 */
    int      via_resp_level;          /* ...insert_response_via_str 0-3 */
    char    *via_req_str;             /* ...request_via_str */
    char    *via_resp_str;            /* ...response_via_str */
    int      server_enabled;          /* ...response_server_enabled 0-2 */
    char    *server_str;              /* ...response_server_str (NULL: none) */
    int      connect_retries;         /* ...connect_attempts_max_retries */
    int      connect_retries_dead;    /* ..._max_retries_dead_server */
    int      connect_rr_retries;      /* ...connect_attempts_rr_retries */
    int      down_server_time;        /* ...down_server.cache_time (s) */
    /* issue 20, name resolution (worker/dns.c) */
    char    *dns_nameservers;         /* proxy.config.dns.nameservers ("NULL":
                                         dns_resolv_conf's) */
    char    *dns_resolv_conf;         /* proxy.config.dns.resolv_conf */
    char    *hosts_file;              /* proxy.config.hostdb.host_file.path */
    /* issue 20, parent proxies (conf/parent.c, worker/parent.c) */
    int      parent_retry_time;       /* proxy.config.http.parent_proxy.retry_time */
    int      parent_fail_threshold;   /* ...parent_proxy.fail_threshold */
    int      parent_total_attempts;   /* ...parent_proxy.total_connect_attempts */
    int      parent_per_attempts;     /* ...parent_proxy.per_parent_connect_attempts */
    int      parent_connect_timeout;  /* ...parent_proxy.connect_attempts_timeout */
    int      parent_mark_down_hostdb; /* ...parent_proxy.mark_down_hostdb */
    int      proxy_auth_to_parent;    /* ...forward.proxy_auth_to_parent */
    int      uncacheable_bypass_parent;/* ...uncacheable_requests_bypass_parent */
    /* issue 24, HTTP/2 to clients (worker/h2.c): proxy.config.http2.* */
    int      h2_max_streams;          /* max_concurrent_streams_in */
    int      h2_window;               /* initial_window_size_in */
    int      h2_flow_policy;          /* flow_control.policy_in (ATS 10) */
    int      h2_frame_size;           /* max_frame_size */
    int      h2_table_size;           /* header_table_size */
    int      h2_header_list;          /* max_header_list_size */
    int      h2_idle_in;              /* no_activity_timeout_in */
    int      h2_priority;             /* stream_priority_enabled (parsed) */
    int      h2_settings_per_frame;   /* max_settings_per_frame */
    int      h2_settings_min;         /* max_settings_per_minute */
    int      h2_settings_frames_min;  /* max_settings_frames_per_minute */
    int      h2_ping_min;             /* max_ping_frames_per_minute */
    int      h2_priority_min;         /* max_priority_frames_per_minute */
    int      h2_empty_min;            /* max_empty_frames_per_minute */
    int      h2_rst_min;              /* max_rst_stream_frames_per_minute */
    int      h2_cont_min;             /* max_continuation_frames_per_minute */
    int      h2_wu_min;               /* proxy.config.cistern.http2.
                                         max_window_update_frames_per_minute */
    int      h2_unknown_min;          /* proxy.config.cistern.http2.
                                         max_unknown_frames_per_minute */
    int      h2_err_rate;             /* stream_error_rate_threshold, in
                                         thousandths */
    int      h2_err_sample;           /* stream_error_sampling_threshold */
};

/* proxy.config.http.insert_forwarded's parameters (RFC 7239 Forwarded) */
#define CONF_FWD_FOR          0x01    /* for=client */
#define CONF_FWD_BY_UNKNOWN   0x02    /* by=unknown */
#define CONF_FWD_BY_NAME      0x04    /* by=proxy_name (ATS's by=servername) */
#define CONF_FWD_PROTO        0x08    /* proto=http|https */
#define CONF_FWD_HOST         0x10    /* host=the client's Host */
#define CONF_FWD_CONN_COMPACT 0x20    /* connection=http|https */
#define CONF_FWD_CONN_STD     0x40    /* connection=http/1.1 ... */
/* Is port in list, ATS's proxy.config.http.connect_ports syntax: ports
 * and ranges ("443 563 8000-9000"), separated by spaces or commas, or "*"
 * for any?  1 yes, 0 no, -1 the list is malformed (port -1: only check). */
int conf_port_list_has(const char *list, int port);
/* proxy.config.dns.nameservers: "NULL" (none: the resolv.conf ones), or
 * addresses "IP", "IP:PORT", "[IPv6]:PORT" separated by spaces, commas or
 * semicolons (port 53 unless given).  Fills out[0..max) and returns how
 * many, or -1 with *why set when list is malformed or has more than max. */
#define CONF_DNS_SERVERS_MAX 8
int conf_dns_servers(const char *list, struct sockaddr_storage *out, int max,
                     const char **why);

/* ---------------------------------------------------------------------
 * remap.config
 */
enum conf_remap_type {
    CONF_REMAP_MAP = 1,
    CONF_REMAP_REVERSE_MAP,
    CONF_REMAP_REGEX_MAP,
    CONF_REMAP_REDIRECT,
    CONF_REMAP_REDIRECT_TEMPORARY,
    CONF_REMAP_MAP_RECV_PORT,         /* map_with_recv_port (regex_ too: re_ok) */
    CONF_REMAP_REGEX_REDIRECT,        /* regex_redirect */
    CONF_REMAP_REGEX_REDIRECT_TEMPORARY, /* regex_redirect_temporary */
};

/* One @src_ip= or @in_ip= of an ACL filter: a range, or its complement
 * ("@src_ip=~RANGE").  "all" is two entries, 0.0.0.0/0 and ::/0. */
struct conf_acl_ip {
    struct conf_ip_range *ranges;     /* (defined below) */
    int      nranges;
    int      invert;
};

/* ACL filter actions (@action=).  ATS 9 spells allow/deny also as
 * 1/on/enable and 0/off/disable; ATS 10 adds add_ and set_ forms. */
enum conf_acl_action {
    CONF_ACL_ALLOW = 1,
    CONF_ACL_DENY,
    CONF_ACL_ADD_ALLOW,
    CONF_ACL_ADD_DENY,
    CONF_ACL_SET_ALLOW,
    CONF_ACL_SET_DENY,
};

/* One ACL filter (an in-line one, or a named one applied to a rule). */
struct conf_acl {
    enum conf_acl_action action;
    int      allow;                   /* the action allows (1) or denies (0) */
    unsigned methods;                 /* CONF_METHOD_* bits; 0: every method */
    char   **mnames;                  /* @method= names without a bit of their
                                         own (CONF_METHOD_OTHER): matched by
                                         name, as ATS does */
    int      nmnames;
    struct conf_acl_ip *src, *in;     /* @src_ip=, @in_ip= (any one matches) */
    int      nsrc, nin;
    int      internal;                /* @internal: matches internal requests
                                         only, and Cistern has none */
    const char *name;                 /* the named filter, or NULL (in-line);
                                         a string in struct conf_remap */
};

struct conf_url {
    char    *scheme;                  /* "http" / "https", lowercase */
    char    *host;                    /* lowercase; for regex_map: the pattern */
    int      port;                    /* explicit or the scheme's default */
    int      port_explicit;
    char    *path;                    /* always starts with '/' */
    size_t   hostlen, pathlen;
};

/* One plugin instance (conf/plugin.c): a remap rule's @plugin= (with its
 * @pparam= values) or a plugin.config line.  Loaded (dlopen) and created
 * by conf_load(); destroyed and unloaded by conf_free(). */
struct cst_plugin;
struct conf_plugin {
    char    *path;                    /* as written */
    char    *name;                    /* its file's base name, for logs */
    int      argc;                    /* argv[0] = path, then the arguments */
    char   **argv;
    void    *handle;                  /* dlopen's */
    const struct cst_plugin *p;       /* the exported cistern_plugin */
    void    *inst;                    /* create()'s */
    unsigned hooks;                   /* CONF_PH_ bits it is called for */
    int      line;
};

/* The hooks, as bits (cistern/plugin.h's CST_HOOK_ bits, the same
 * values): an instance's (its plugin's hooks less those its create()
 * turned off with hooks_off) and a plan's (any of its instances'). */
#define CONF_PH_READ_REQUEST  0x01u
#define CONF_PH_REMAP         0x02u
#define CONF_PH_SEND_REQUEST  0x04u
#define CONF_PH_INTERCEPT     0x08u
#define CONF_PH_READ_RESPONSE 0x10u
#define CONF_PH_SEND_RESPONSE 0x20u
#define CONF_PH_TXN_END       0x40u
#define CONF_PH_COUNT         7
#define CONF_PLAN_MAX         16      /* instances on one request (global + rule) */

/* One hook call of a plan: the function, its instance and its slot. */
struct cst_txn;
struct conf_pcall {
    union {
        int  (*hook)(void *inst, struct cst_txn *t);
        void (*end)(void *inst, struct cst_txn *t);
    } fn;
    void       *inst;
    const char *name;                 /* the plugin's, for logs and panics */
    const struct conf_plugin *pl;
    int         k;                    /* its slot: its index in pl[] */
};

/* The plugins a request runs, made once per configuration (conf_plugins_
 * load): the global ones (struct conf's gplan), or the global ones then a
 * rule's (the rule's plan).  A step calls calls[first[h] .. first[h + 1])
 * for hook bit 1 << h: no test per instance, no lookup per call. */
struct conf_plan {
    unsigned hooks;                   /* CONF_PH_ bits: some call has it */
    int      n;                       /* instances (at most CONF_PLAN_MAX) */
    uint8_t  first[CONF_PH_COUNT + 1];    /* (a step's reads: one line) */
    const struct conf_plugin *pl[CONF_PLAN_MAX];    /* by slot */
    struct conf_pcall calls[];        /* first[CONF_PH_COUNT] of them */
};

struct conf_remap_rule {
    enum conf_remap_type type;
    struct conf_url from;
    struct conf_url to;
    regex_t  re;                      /* CONF_REMAP_REGEX_MAP only */
    int      re_ok;
    const char *file;                 /* owned by struct conf_remap */
    int      line;
    struct conf_acl *acl;             /* the in-line filter first, then the
                                         named filters active at this line,
                                         in activation order; NULL: none */
    int      nacl;
    int      acl_local;               /* some filter has @in_ip= */
    struct conf_plugin *plugins;      /* @plugin= in order, or NULL: none */
    int      nplugins;
    struct conf_plan *plan;           /* the global plugins' then these, or NULL */
    const char *name;                 /* @name=NAME (issue 25: the metrics'
                                         rule label), or NULL; a string in
                                         struct conf_remap */
    int      cls;                     /* precedence class (conf_remap_find_recv):
                                         0 recv_port, 1 map, 2 redirect, 3 regex
                                         redirect, -1 reverse_map */
};

/* proxy.config.url_remap.acl_behavior_policy (ATS 10): 0 legacy (ATS 9's
 * behaviour, the default), 1 modern. */
enum conf_acl_policy { CONF_ACL_LEGACY = 0, CONF_ACL_MODERN = 1 };

struct conf_remap {
    struct conf_remap_rule *rules;    /* file order (includes followed) */
    int      nrules;
    char   **files;                   /* names for rule->file */
    int      nfiles;
    char   **names;                   /* named filters' names, for acl->name */
    int      nnames;
    int      has_recv_port;           /* some rule is map_with_recv_port */
    enum conf_acl_policy acl_policy;  /* set before conf_remap_parse() */
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

/* The same, for a request that arrived on local port recv_port (0:
 * unknown): map_with_recv_port rules match on that port instead of the
 * request's, and are tried before every other rule (ATS's precedence:
 * map_with_recv_port, then map and regex_map, then redirect and
 * redirect_temporary, then regex_redirect and regex_redirect_temporary). */
const struct conf_remap_rule *
conf_remap_find_recv(const struct conf_remap *rm, const char *scheme,
                     const char *host, size_t hostlen, int port, int recv_port,
                     const char *path, size_t pathlen,
                     struct conf_remap_result *res);

/* The ACL filters of a matched rule (rule->nacl > 0): does the request
 * pass?  peer is the client, local the address it connected to (NULL when
 * unknown: an @in_ip= never matches then), method (mlen bytes) its method
 * (a method without a CONF_METHOD_* bit matches a filter by name).
 * With policy legacy (ATS 9, and ATS 10's default) every filter must
 * pass: an allow filter passes when it matches, a deny filter when it
 * does not.  With modern (ATS 10, acl_behavior_policy 1), the first
 * filter whose addresses match decides: by its action when the method
 * matches too, by the opposite when it does not (add_allow / add_deny:
 * the next filter decides); no filter deciding allows.  Returns 1 to
 * allow, 0 to deny; *by (may be NULL) names the deciding filter ("in-line"
 * or the filter's name). */
int conf_remap_acl_allows(const struct conf_remap *rm,
                          const struct conf_remap_rule *rule,
                          const struct sockaddr *peer,
                          const struct sockaddr *local, const char *method,
                          size_t mlen, const char **by);

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
 * ip_allow.yaml (ATS 9+) or ip_allow.config (ATS 8 line syntax)
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

/* One address range of a rule (a rule listing several ranges becomes one
 * conf_ip_rule per range, in order).  As in ATS, the rule's method list
 * says which methods its action applies to, and the opposite applies to
 * every other method: "allow GET" denies POST, "deny PURGE" allows GET. */
struct conf_ip_rule {
    struct conf_ip_range range;
    int      allow;                   /* allow / ip_allow (1), deny / ip_deny (0) */
    unsigned methods;                 /* the listed methods: CONF_METHOD_* bits
                                         (CONF_METHOD_ALL: every method) */
    char   **names;                   /* listed methods without a bit, by name
                                         (e.g. PROPFIND), or NULL */
    int      nnames;
    int      line;
};

struct conf_ip_allow {
    struct conf_ip_rule *rules;       /* inbound: apply: in / src_ip= */
    int      nrules;
    struct conf_ip_rule *out;         /* outbound: apply: out / dest_ip= */
    int      nout;
    const char *source;               /* "ip_allow.yaml", "ip_allow.config" or
                                         "built-in ip_allow" (for messages) */
};

/* Parse a space/comma separated list of addresses, ranges or CIDRs into
 * allow-everything rules appended to ia.  Returns 0, or -1 with *why. */
int conf_ip_list_parse(struct conf_ip_allow *ia, const char *list,
                       const char **why);

/* Map a method name to its CONF_METHOD_* bit (unknown -> CONF_METHOD_OTHER). */
unsigned conf_method_bit(const char *name, size_t len);
/* 1 when name (len bytes) can be a request's method: an RFC 9110 token
 * without '|'.  A list written as one name ("PURGE, DELETE", "GET|POST")
 * is not, and would match no request. */
int conf_method_name_ok(const char *name, size_t len);

/* Inbound decision, ATS's: the first rule whose range holds the address
 * decides, by its action and method list; an address no rule holds is
 * denied.  Returns 1 when the address may use the method, else 0.  sa is a
 * sockaddr_in or sockaddr_in6 (v4-mapped v6 addresses are checked as v4).
 * conf_ip_allowed() takes the method as a bit, and a CONF_METHOD_OTHER
 * method is one no rule names; conf_ip_method_allowed() takes its name. */
int conf_ip_allowed(const struct conf_ip_allow *ia, const struct sockaddr *sa,
                    unsigned method_bit);
int conf_ip_method_allowed(const struct conf_ip_allow *ia,
                           const struct sockaddr *sa, const char *method,
                           size_t mlen);
/* Outbound decision (the origin's address, before connecting): the same,
 * over the out rules: 1 allowed, 0 denied, -1 when no rule holds the
 * address (ATS then allows; the caller decides: worker/origin.c refuses
 * forward-proxied requests to the machine's own addresses). */
int conf_ip_out_decide(const struct conf_ip_allow *ia,
                       const struct sockaddr *sa, const char *method,
                       size_t mlen);

/* ATS's selector grammar (cache.config, parent.config): conf/selector.h */
#include "conf/selector.h"

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
 * cache.config (ATS syntax): per-URL caching policy (conf/cache_config.c)
 */
enum conf_cc_action {
    CONF_CC_NEVER_CACHE = 1, CONF_CC_STANDARD_CACHE, CONF_CC_IGNORE_NO_CACHE,
    CONF_CC_IGNORE_CLIENT_NO_CACHE, CONF_CC_IGNORE_SERVER_NO_CACHE,
    CONF_CC_CLUSTER_CACHE_LOCAL, CONF_CC_TTL_IN_CACHE, CONF_CC_REVALIDATE,
};

struct conf_cache_rule {
    struct conf_selector sel;         /* which requests (no dest_ip=) */
    /* the one directive of the line, and the cookies tweak */
    enum conf_cc_action action;
    int      secs;                    /* ttl-in-cache / revalidate */
    int      cookies;                 /* cache-responses-to-cookies=, -1 */
    int      line;
};

struct conf_cache {
    struct conf_cache_rule *rules;    /* file order */
    int      nrules;
    int      need_url;                /* a url_regex rule: match needs the URL */
    uint8_t  neg[1000 / 8];           /* negative_caching_list, as a bitmap */
};

/* What is matched: the request after remap. */
struct conf_cache_req {
    const char *scheme, *host;        /* host lowercase */
    size_t   hostlen;
    int      port;
    const char *path;                 /* from '/', the query included */
    size_t   pathlen;
    const char *url;                  /* "scheme://host[:port]/path?q" (need_url) */
    const char *method;
    const struct sockaddr *src;       /* the client */
    int      tod;                     /* local time of day, seconds */
};

/* The actions of every matching line, by ATS's precedence (its code, ATS 9
 * and 10): for each kind, the earliest matching line wins; ttl-in-cache
 * cancels never-cache wherever it is; the ignore-* actions add up. */
struct conf_cache_result {
    int      never_cache;             /* 1: neither looked up nor stored */
    int      ignore_client_no_cache, ignore_server_no_cache;
    int      ttl_in_cache;            /* 0: none */
    int      revalidate;              /* -1: none */
    int      cookies;                 /* -1: the records.config value */
};

/* Parse cache.config (missing file: no rules) and build the records-derived
 * parts (negative_caching_list).  0, or -1 after recording errors. */
int  conf_cache_parse(struct conf_cache *cc, const char *file, struct conf_errors *e);
int  conf_cache_records(struct conf_cache *cc, const struct conf_records *r,
                        const char *recfile, struct conf_errors *e);
void conf_cache_free(struct conf_cache *cc);
/* Fill *res for q; returns how many lines matched. */
int  conf_cache_match(const struct conf_cache *cc, const struct conf_cache_req *q,
                      struct conf_cache_result *res);
/* ATS's durations: "1d2h3m4s", "90" (seconds), units w d h m s.  0 or -1. */
int  conf_parse_duration(const char *s, int *out);
/* Is status in negative_caching_list? */
static inline int
conf_cache_negative(const struct conf_cache *cc, int status)
{
    return status >= 0 && status < 1000 && (cc->neg[status / 8] >> (status % 8)) & 1;
}

/* ---------------------------------------------------------------------
 * The whole configuration
 */
/* ---------------------------------------------------------------------
 * parent.config (ATS syntax): parent proxies and origin pools
 * (conf/parent.c; the selection at run time is worker/parent.c)
 */
enum conf_pp_rr {
    CONF_PP_RR_FALSE = 0,             /* the first parent that is up */
    CONF_PP_RR_TRUE,                  /* by the client's address */
    CONF_PP_RR_STRICT,                /* in turn, request by request */
    CONF_PP_RR_HASH,                  /* consistent hash of the URL */
    CONF_PP_RR_LATCHED,               /* one until it fails, then the next */
};
#define CONF_PP_MAX_PARENTS 64        /* parent= and secondary_parent= together */
#define CONF_PP_RETRY_SIMPLE  1       /* parent_retry=simple_retry */
#define CONF_PP_RETRY_UNAVAIL 2       /* parent_retry=unavailable_server_retry */

struct conf_parent_host {
    char     host[256];               /* lowercase; an IPv6 literal in [] */
    int      port;
    double   weight;                  /* |w, default 1 */
    uint64_t hid;                     /* hash of its identity ("&name", or
                                         host:port): the hash ring's */
    char     name[272];               /* "host:port", for logs and stats */
};

struct conf_parent_rule {
    struct conf_selector sel;         /* which requests (no time=) */
    /* actions */
    struct conf_parent_host *hosts;   /* parent= then secondary_parent= */
    int      nprimary, nsecondary;
    enum conf_pp_rr rr;
    int      go_direct;               /* default 1 (ATS); 0 with parent_is_proxy=false */
    int      is_proxy;                /* parent_is_proxy, default 1 */
    int      ignore_query;            /* qstring=ignore */
    int      retry;                   /* CONF_PP_RETRY_* bits */
    int      max_simple, max_unavail; /* 1..5, default 1 */
    int      secondary_mode;          /* 1 (default), 2, 3 */
    uint8_t  simple_codes[125];       /* bitmaps of statuses 0-999 */
    uint8_t  unavail_codes[125];
    int      line;
};

struct conf_parents {
    struct conf_parent_rule *rules;   /* file order: the first match wins */
    int      nrules;
    int      need_url;                /* a url_regex= rule */
};

/* What a rule is matched against: the request after remap. */
struct conf_parent_req {
    const char *scheme, *host;        /* host as in the target, any case */
    size_t   hostlen;
    int      port;
    const char *path;                 /* from '/', query included */
    size_t   pathlen;
    const char *url;                  /* scheme://host[:port]/path, the port
                                         only when not the default (need_url) */
    const char *method;
    const struct sockaddr *src;       /* the client */
};

int  conf_parent_parse(struct conf_parents *pp, const char *file, struct conf_errors *e);
void conf_parent_free(struct conf_parents *pp);
/* The first rule (file order, ATS's ControlMatcher) matching q, or NULL. */
const struct conf_parent_rule *conf_parent_find(const struct conf_parents *pp,
                                                const struct conf_parent_req *q);
/* Is status in the rule's simple / unavailable retry list? */
int  conf_parent_code(const uint8_t *bits, int status);
/* A 64-bit hash of n bytes (FNV-1a, then a 64-bit finaliser). */
uint64_t conf_parent_hash(const void *p, size_t n);
/* Consistent hashing (weighted rendezvous): order[0..n) = the indexes of
 * hosts[0..n) by descending score for the key hash; order[0] owns the key.
 * Removing a host moves only the keys it owned. */
void conf_parent_rank(const struct conf_parent_host *hosts, int n, uint64_t key,
                      int *order);

struct conf {
    char                *confdir;     /* absolute */
    struct conf_records  rec;
    struct conf_remap    remap;
    struct conf_ip_allow ip_allow;
    struct conf_storages storage;
    struct conf_ip_allow admin_allow; /* from proxy.config.cistern.admin.allow */
    struct conf_ip_allow pp_allow;    /* from proxy.config.http.proxy_protocol_allowlist:
                                         the peers a PROXY header is taken
                                         from; no rules = every peer (ATS) */
    struct conf_tls     *tls;         /* certificates and TLS contexts, or NULL
                                         (conf/ssl_multicert.c) */
    struct conf_cache    cache;       /* cache.config (issue 18, policy) */
    struct conf_parents  parents;     /* parent.config (issue 20) */
    struct conf_plugin  *globals;     /* plugin.config (issue 22), in order */
    int                  nglobals;
    struct conf_plan    *gplan;       /* their plan, or NULL: none */
    struct conf_logging  logging;     /* logging.yaml (issue 25) */
};

/* conf/plugin.c (issue 22).  A remap option: 1 when opt ("@plugin=X",
 * "@pparam=Y") was taken into *v / *n, 0 when it is no plugin option, -1
 * with *why (a @pparam= before any @plugin=, out of memory). */
int  conf_plugin_opt(struct conf_plugin **v, int *n, const char *opt, int line,
                     const char **why);
void conf_plugins_free(struct conf_plugin *v, int n);
/* Read plugin.config and load every plugin of c (the rules' and the
 * global ones): dlopen, the ABI check, create().  Errors as file:line. */
int  conf_plugins_load(struct conf *c, struct conf_errors *e);
/* The function table plugins get (worker/plugin.c's), set once by the
 * process before any conf_load(); NULL in programs without workers. */
void conf_plugin_set_api(const void *api);
/* During a create() (the API's hooks_off): the instance being created is
 * not called for these CONF_PH_ bits.  0, or -1 outside a create(). */
int  conf_plugin_hooks_off(unsigned hooks);

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
/* Print every records.config key Cistern knows (`cistern --list-keys`), by
 * class, as Markdown tables: implemented (rec_table, with default and
 * meaning), matches (conf_ats_keys: accepted values) and ATS-internal
 * (ignored, with the reason).  README.md embeds this output
 * (scripts/readme-keys.sh). */
void conf_records_list_keys(FILE *out);

/* conf/atskeys.c: the ATS keys Cistern does not implement (see there). */
enum conf_ats_class {
    CONF_ATS_MATCHES,                 /* accepted only with `values` */
    CONF_ATS_INTERNAL,                /* ATS internals: ignored, warned once */
};
struct conf_ats_key {
    const char *name;                 /* exact, or a prefix ending in '*' */
    const char *type;                 /* ATS's: "INT", "STRING", "FLOAT" */
    enum conf_ats_class cls;
    const char *values;               /* MATCHES: accepted, '|'-separated */
    const char *why;                  /* MATCHES: what Cistern does;
                                         INTERNAL: why ignoring it is safe */
};
extern const struct conf_ats_key conf_ats_keys[];
extern const size_t conf_ats_nkeys;
/* The row for name (an exact row before the longest prefix), or NULL. */
const struct conf_ats_key *conf_ats_key_find(const char *name);
/* Whether value is one of k's accepted values (numbers compared as
 * numbers, upper-case words without regard to case, file names exactly);
 * 1 for INTERNAL rows. */
int conf_ats_value_matches(const struct conf_ats_key *k, const char *value);

/* conf/atsfiles.c: the other files an ATS config directory holds
 * (socks.config, parent.config, strategies.yaml, plugin.config,
 * hosting.config, volume.config, splitdns.config, sni.yaml,
 * body_factory/).  Cistern reads none of them; one that asks for something
 * (is not empty) is an error, or a warning where it changes no access,
 * routing or caching.  Records notes for the migration report. */
void conf_ats_files_check(const struct conf *c, struct conf_errors *e);

int  conf_remap_parse(struct conf_remap *rm, const char *file,
                      const char *dir, struct conf_errors *e);
void conf_remap_free(struct conf_remap *rm);

int  conf_ip_allow_parse(struct conf_ip_allow *ia, const char *file,
                         struct conf_errors *e);
/* ip_allow.yaml (ATS 9 and 10 syntax; conf/ip_allow.c says what is read). */
int  conf_ip_allow_yaml_parse(struct conf_ip_allow *ia, const char *file,
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
/* ALPN for one client connection: the CONF_PROTO_* bits of its port
 * (h2 is offered first when the port speaks it); after the handshake,
 * did the client choose h2? */
struct ssl_st;
void conf_tls_set_protos(struct ssl_st *s, int protos);
int  conf_tls_alpn_h2(const struct ssl_st *s);
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
