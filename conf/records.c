/*
 * conf/records.c: records.config, "CONFIG name TYPE value" lines.
 *
 * Every key Cistern implements is one row of rec_table below: its name, its ATS
 * type, the setter that parses the value, the struct conf_records field it
 * writes (by offsetof), its default, its bounds, and its meaning in one
 * line (`cistern --list-keys`, which README.md embeds).  Adding a key means
 * adding a field to struct conf_records and one row here; defaults, parsing,
 * range checks, the type check and the documentation all follow from the
 * row.
 *
 * Defaults are written as the same strings an operator would put in the file
 * and go through the same setters, so a default can never bypass validation
 * (conf_records_defaults() asserts that they all parse).
 *
 * A setter either stores a complete new value or records an error and leaves
 * the field as it was; struct conf_records never holds a half-parsed value.
 * String fields are always malloc'd (or NULL before defaults are applied) and
 * owned by the struct; conf_records_free() releases them.
 *
 * A key that is not in rec_table is looked up in conf_ats_keys
 * (conf/atskeys.c): a "matches" key is accepted only with a value that asks
 * for what Cistern does (any other is an error with file:line); an
 * ATS-internal key is accepted and named in one warning per file; a key in
 * neither table draws a warning of its own.  Each line also leaves a note
 * (conf_note) for the migration report `cistern -t` prints.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* asprintf, vasprintf */
#endif
#include "config.h"     /* PACKAGE_VERSION */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pwd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "conf/conf.h"

#ifndef CST_PLUGINDIR           /* Makefile.am: $(libdir)/cistern/plugins */
#define CST_PLUGINDIR "/usr/local/lib/cistern/plugins"
#endif
#ifndef CST_LOGDIR
#define CST_LOGDIR "/var/log/cistern"
#endif
#ifndef CST_RUNDIR
#define CST_RUNDIR "/run/cistern"
#endif

enum rec_type {
    REC_INT,
    REC_STRING,
    REC_FLOAT,
    REC_COUNTER,
};

static const char *const rec_type_names[] = {
    [REC_INT] = "INT",
    [REC_STRING] = "STRING",
    [REC_FLOAT] = "FLOAT",
    [REC_COUNTER] = "COUNTER",
};

struct rec_ctx;
struct rec_directive;

/* Store value into r (field at d->off); returns 0, or -1 after recording an
 * error through ctx. */
typedef int rec_setter(struct conf_records *r, const struct rec_directive *d,
                       const char *value, struct rec_ctx *ctx);

struct rec_directive {
    const char    *name;
    enum rec_type  type;
    rec_setter    *set;
    size_t         off;
    const char    *def;        /* default, in config-file syntax */
    int64_t        min, max;   /* for integers */
    const char    *desc;       /* one line: what it does (--list-keys) */
};

/* Where a value came from, for messages and relative paths.  file == NULL
 * while applying defaults. */
struct rec_ctx {
    const char         *file;
    int                 line;
    const char         *dir;
    struct conf_errors *e;
};

static rec_setter rec_set_int, rec_set_int64, rec_set_size, rec_set_string,
                  rec_set_path, rec_set_ports,
                  rec_set_log_level, rec_set_user, rec_set_policy,
                  rec_set_ip_list, rec_set_acl_subjects,
                  rec_set_forwarded, rec_set_via, rec_set_port_list,
                  rec_set_milli, rec_set_dns_servers;

#define REC_FIELD(f) offsetof(struct conf_records, f)
#define M16          (16 * 1024 * 1024)
#define ONE_DAY      86400

/* Bounds: timeouts are seconds, at most a day (anything longer is a typo for
 * milliseconds).  Header limits: ATS's floor of 1K / 256 bytes keeps normal
 * browsers working; 16M is far past anything legitimate.  Sizes accept
 * K/M/G/T like ATS. */
static const struct rec_directive rec_table[] = {
    { "proxy.config.http.server_ports", REC_STRING, rec_set_ports,
      0, "8080", 0, 0,
      "listeners, ATS descriptors separated by spaces: `PORT`, `PORT:ipv6` "
      "(IPv6 only; `8080 8080:ipv6` is both families), `PORT:ssl`, "
      "`PORT:pp` (PROXY protocol), `ip-in=ADDR:PORT` (`[v6]`), "
      "`proto=http;http2` (ssl: what ALPN offers, default both; "
      "cleartext: http2 is h2c with prior knowledge, default http); "
      "`0` picks a free port; transparency, `blind`, `ip-out`... are errors" },
    { "proxy.config.cistern.workers", REC_INT, rec_set_int,
      REC_FIELD(workers), "0", 0, 256,
      "worker processes; 0 = one per CPU" },
    { "proxy.config.url_remap.remap_required", REC_INT, rec_set_int,
      REC_FIELD(remap_required), "1", 0, 1,
      "1: no matching rule = 404; 0: absolute-form requests are "
      "forward-proxied (uncached)" },
    { "proxy.config.url_remap.pristine_host_hdr", REC_INT, rec_set_int,
      REC_FIELD(pristine_host_hdr), "0", 0, 1,
      "1: send the client's Host to the origin (the cache key names it too)" },
    { "proxy.config.http.push_method_enabled", REC_INT, rec_set_int,
      REC_FIELD(push_method_enabled), "0", 0, 1,
      "allow PUSH (from addresses ip_allow lets)" },
    { "proxy.config.http.cache.required_headers", REC_INT, rec_set_int,
      REC_FIELD(required_headers), "1", 0, 2,
      "what freshness a response needs to be stored (CACHING.md)" },
    { "proxy.config.http.keep_alive_no_activity_timeout_in", REC_INT,
      rec_set_int, REC_FIELD(ka_no_activity_in), "120", 0, ONE_DAY,
      "idle client keep-alive, seconds" },
    { "proxy.config.http.keep_alive_no_activity_timeout_out", REC_INT,
      rec_set_int, REC_FIELD(ka_no_activity_out), "120", 0, ONE_DAY,
      "idle origin connection in the pool, seconds" },
    { "proxy.config.http.transaction_no_activity_timeout_in", REC_INT,
      rec_set_int, REC_FIELD(txn_no_activity_in), "30", 1, ONE_DAY,
      "client silent mid-request or not reading the response, seconds (never "
      "while the origin is awaited)" },
    { "proxy.config.http.transaction_no_activity_timeout_out", REC_INT,
      rec_set_int, REC_FIELD(txn_no_activity_out), "30", 1, ONE_DAY,
      "origin silent, seconds" },
    { "proxy.config.http.transaction_active_timeout_in", REC_INT,
      rec_set_int, REC_FIELD(txn_active_in), "0", 0, ONE_DAY,
      "cap on a whole client transaction, seconds; 0 = none" },
    { "proxy.config.http.transaction_active_timeout_out", REC_INT,
      rec_set_int, REC_FIELD(txn_active_out), "0", 0, ONE_DAY,
      "cap on a whole origin transaction, seconds; 0 = none" },
    { "proxy.config.http.accept_no_activity_timeout", REC_INT,
      rec_set_int, REC_FIELD(accept_no_activity), "120", 1, ONE_DAY,
      "a new connection silent before its first byte, seconds" },
    { "proxy.config.http.connect_attempts_timeout", REC_INT, rec_set_int,
      REC_FIELD(connect_timeout), "30", 1, ONE_DAY,
      "connecting to an origin, seconds" },
    { "proxy.config.cistern.request_header_timeout", REC_INT, rec_set_int,
      REC_FIELD(request_header_timeout), "10", 1, ONE_DAY,
      "the whole request header must arrive within this, seconds (slowloris)" },
    { "proxy.config.http.request_header_max_size", REC_INT, rec_set_size,
      REC_FIELD(request_header_max_size), "131072", 1024, M16,
      "request header block limit; 431 beyond" },
    { "proxy.config.http.request_line_max_size", REC_INT, rec_set_size,
      REC_FIELD(request_line_max_size), "65535", 256, M16,
      "request line limit; 414 beyond" },
    { "proxy.config.http.response_header_max_size", REC_INT, rec_set_size,
      REC_FIELD(response_header_max_size), "131072", 1024, M16,
      "origin response header limit; 502 beyond" },
    { "proxy.config.stop.shutdown_timeout", REC_INT, rec_set_int,
      REC_FIELD(shutdown_timeout), "30", 0, ONE_DAY,
      "drain deadline on graceful stop, seconds" },
    { "proxy.config.http.per_server.connection.max_idle", REC_INT,
      rec_set_int, REC_FIELD(origin_max_idle), "64", 0, 65535,
      "idle keep-alive connections per origin, per worker; 0 = no reuse" },
    { "proxy.config.net.connections_throttle", REC_INT, rec_set_int,
      REC_FIELD(connections_throttle), "30000", 1, 1000000,
      "client connections per worker; beyond, 503 and close" },
    /* ATS: 0 = no limit.  Here objects span segments and a fill pins
     * what it wrote until it commits, so 0 = a quarter of the store and
     * no value goes past half of it. */
    { "proxy.config.cache.max_doc_size", REC_INT, rec_set_int64,
      REC_FIELD(max_doc_size), "0", 0, INT64_MAX,
      "largest object stored; 0 = a quarter of the store's content (at most half)" },
    { "proxy.config.cache.enable_read_while_writer", REC_INT, rec_set_int,
      REC_FIELD(rww_enable), "1", 0, 1,
      "a miss that joins a fill over 1 MiB with a Content-Length (any worker) is "
      "served from the bytes already stored and follows the fill (0: it waits, "
      "or goes to the origin itself)" },
    /* ATS semantics: a client that goes away during a fill leaves it
     * running when at least this share of a known length has arrived. */
    { "proxy.config.http.background_fill_completed_threshold", REC_FLOAT, rec_set_milli,
      REC_FIELD(bg_fill_milli), "0.5", 0, 1000000,
      "a miss whose client leaves goes on filling once this share (0 to 1) of its "
      "Content-Length has arrived (0: always, even without a length; over 1: never)" },
    { "proxy.config.http.background_fill_active_timeout", REC_INT, rec_set_int,
      REC_FIELD(bg_fill_timeout), "0", 0, ONE_DAY,
      "seconds a background fill may run after its client left (0: no limit but "
      "the origin inactivity timeout)" },
    { "proxy.config.cistern.debug_headers", REC_INT, rec_set_int,
      REC_FIELD(debug_headers), "0", 0, 1,
      "1: add `X-Cistern-Worker` to responses" },
    { "proxy.config.cistern.admin.allow", REC_STRING, rec_set_ip_list,
      REC_FIELD(admin_allow), "127.0.0.1 ::1", 0, 0,
      "who may read `/_stats` and `/_metrics`: addresses, ranges, CIDRs, or "
      "`none`" },
    { "proxy.config.http.connect_ports", REC_STRING, rec_set_port_list,
      REC_FIELD(connect_ports), "443", 0, 0,
      "the ports CONNECT may tunnel to: ports, ranges (443 8000-9000) or *" },
    { "proxy.config.admin.user_id", REC_STRING, rec_set_user,
      REC_FIELD(user_id), "nobody", 0, 0,
      "user of the workers when started as root; `#-1` keeps the starting "
      "user" },
    { "proxy.config.http.normalize_ae", REC_INT, rec_set_int,
      REC_FIELD(normalize_ae), "1", 0, 2,
      "Accept-Encoding normalisation: 0 as sent, 1 `gzip` or nothing, 2 "
      "`br`, `gzip` or nothing" },
    { "proxy.config.http.cache.range.write", REC_INT, rec_set_int,
      REC_FIELD(range_write), "0", 0, 1,
      "1: a Range miss fetches and stores the whole object" },
    { "proxy.config.cistern.slice.blockbytes", REC_INT, rec_set_int,
      REC_FIELD(slice_blockbytes), "0", 0, 1073741824,
      "ATS slice's --blockbytes: a `bytes=a-b` or `bytes=a-` miss fetches the "
      "blocks of this many bytes that hold it (aligned), stores them as a "
      "part and answers from it (a range over more than two blocks streamed "
      "block by block, one ahead); 0 = off" },
    { "proxy.config.cistern.purge.forward_tags", REC_INT, rec_set_int,
      REC_FIELD(purge_forward_tags), "0", 0, 1,
      "1: send the Surrogate-Key and Cache-Tag fields (purge tags) to clients; "
      "0: they are stored and purged by, never sent" },
    { "proxy.config.cistern.cache.set_cookie", REC_INT, rec_set_int,
      REC_FIELD(cache_set_cookie), "0", 0, 1,
      "0: a response with Set-Cookie is not stored; 1: stored without its "
      "Set-Cookie" },
    { "proxy.config.cistern.cdn_cache_control", REC_INT, rec_set_int,
      REC_FIELD(cdn_cache_control), "1", 0, 1,
      "honour CDN-Cache-Control / Surrogate-Control" },
    { "proxy.config.cistern.cache.eviction", REC_STRING, rec_set_string,
      REC_FIELD(cache_eviction), "s3fifo", 0, 0,
      "`s3fifo` keeps hot objects when the store laps, `fifo` drops all in "
      "the way (ATS)" },
    { "proxy.config.cistern.collapse_timeout", REC_INT, rec_set_int,
      REC_FIELD(collapse_timeout), "10", 0, 300,
      "how long a miss waits for another worker's fetch of the same URL, "
      "seconds; 0 = no collapsing" },
    { "proxy.config.log.logging_enabled", REC_INT, rec_set_int,
      REC_FIELD(logging_enabled), "3", 0, 3,
      "2 or 3: access log on; 0 or 1: off" },
    { "proxy.config.cistern.access_log_format", REC_STRING, rec_set_string,
      REC_FIELD(access_log_format), "combined", 0, 0,
      "`combined`, `squid` or `json`" },
    { "proxy.config.http.cache.heuristic_min_lifetime", REC_INT, rec_set_int,
      REC_FIELD(heuristic_min_lifetime), "3600", 0, 31536000,
      "least heuristic freshness, seconds (see heuristic_lm_factor)" },
    { "proxy.config.http.cache.heuristic_lm_factor", REC_FLOAT, rec_set_milli,
      REC_FIELD(heuristic_lm_milli), "0.10", 0, 1000,
      "heuristic freshness: this fraction of the time since Last-Modified "
      "(0 to 1), then bounded by heuristic_min/max_lifetime" },
    { "proxy.config.http.cache.heuristic_max_lifetime", REC_INT, rec_set_int,
      REC_FIELD(heuristic_max_lifetime), "86400", 0, 31536000,
      "most heuristic freshness, seconds" },
    { "proxy.config.log.logfile_dir", REC_STRING, rec_set_path,
      REC_FIELD(logfile_dir), CST_LOGDIR, 0, 0,
      "error and access logs" },
    { "proxy.config.plugin.plugin_dir", REC_STRING, rec_set_path,
      REC_FIELD(plugin_dir), CST_PLUGINDIR, 0, 0,
      "where `@plugin=` and plugin.config find a plugin named by a relative "
      "path (cistern-plugin(3))" },
    { "proxy.config.cistern.run_dir", REC_STRING, rec_set_path,
      REC_FIELD(run_dir), CST_RUNDIR, 0, 0,
      "pid, lock, `ports` and `reload.status` files" },
    { "proxy.config.proxy_name", REC_STRING, rec_set_string,
      REC_FIELD(proxy_name), "cistern", 0, 0,
      "this proxy's name in Via" },
    { "proxy.config.cistern.log_level", REC_STRING, rec_set_log_level,
      REC_FIELD(error_log_level), "info", 0, 0,
      "error log level: debug, info, notice, warn, error or crit" },
    /* TLS (conf/ssl_multicert.c).  Paths stay as written: the certificate
     * paths resolve against the config directory when the certificates
     * are loaded; a STRING of NULL means unset, as in ATS.  The cipher
     * lists: Mozilla's "intermediate" profile for TLS 1.2 (ECDHE with
     * AES-GCM or ChaCha20 only) and OpenSSL's TLS 1.3 defaults. */
    { "proxy.config.ssl.server.multicert.filename", REC_STRING, rec_set_string,
      REC_FIELD(ssl_multicert), "ssl_multicert.config", 0, 0,
      "the certificates file (ssl_multicert.config)" },
    { "proxy.config.ssl.server.cert.path", REC_STRING, rec_set_string,
      REC_FIELD(ssl_cert_path), ".", 0, 0,
      "where relative certificate paths resolve" },
    { "proxy.config.ssl.server.private_key.path", REC_STRING, rec_set_string,
      REC_FIELD(ssl_key_path), ".", 0, 0,
      "where relative key paths resolve" },
    { "proxy.config.ssl.server.cipher_suite", REC_STRING, rec_set_string,
      REC_FIELD(ssl_cipher_suite), CONF_SSL_CIPHERS_DEFAULT, 0, 0,
      "TLS 1.2 ciphers (OpenSSL syntax)" },
    { "proxy.config.ssl.server.TLSv1_3.cipher_suites", REC_STRING, rec_set_string,
      REC_FIELD(ssl_tls13_suites),
      "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256", 0, 0,
      "TLS 1.3 cipher suites" },
    { "proxy.config.ssl.server.ticket_key.filename", REC_STRING, rec_set_string,
      REC_FIELD(ssl_ticket_key_file), "NULL", 0, 0,
      "session ticket keys (ATS format: 48-byte records, the first "
      "encrypts); NULL: a random key made once by the master" },
    { "proxy.config.ssl.TLSv1", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1), "0", 0, 1,
      "1: accept TLS 1.0 clients" },
    { "proxy.config.ssl.TLSv1_1", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1_1), "0", 0, 1,
      "1: accept TLS 1.1 clients" },
    { "proxy.config.ssl.TLSv1_2", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1_2), "1", 0, 1,
      "1: accept TLS 1.2 clients" },
    { "proxy.config.ssl.TLSv1_3", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1_3), "1", 0, 1,
      "1: accept TLS 1.3 clients" },
    { "proxy.config.ssl.client.verify.server.policy", REC_STRING, rec_set_policy,
      REC_FIELD(ssl_verify_policy), "ENFORCED", 0, 0,
      "https origins: ENFORCED (502 on a bad certificate), PERMISSIVE (log "
      "it) or DISABLED" },
    { "proxy.config.ssl.client.CA.cert.filename", REC_STRING, rec_set_string,
      REC_FIELD(ssl_client_ca_file), "NULL", 0, 0,
      "CA bundle for https origins; NULL = the system's" },
    { "proxy.config.ssl.client.CA.cert.path", REC_STRING, rec_set_string,
      REC_FIELD(ssl_client_ca_path), "NULL", 0, 0,
      "CA directory for https origins; NULL = the system's" },
    /* issue 18, remap ACLs (conf/remap.c) */
    { "proxy.config.url_remap.acl_behavior_policy", REC_INT, rec_set_int,
      REC_FIELD(acl_behavior_policy), "0", 0, 1,
      "remap ACL filters: 0 ATS 9 (every filter must pass), 1 ATS 10's "
      "first match decides" },
    /* issue 18, ports: the PROXY protocol (ATS 9 name; ATS 8 called it
     * proxy_protocol_whitelist) */
    { "proxy.config.http.proxy_protocol_allowlist", REC_STRING, rec_set_ip_list,
      REC_FIELD(pp_allowlist), "none", 0, 0,
      "the peers a PROXY header is taken from on pp ports (addresses, "
      "ranges, CIDRs); none with a pp port is an error (ATS trusts every "
      "peer; write 0/0 ::/0 for that)" },
    { "proxy.config.http.proxy_protocol_whitelist", REC_STRING, rec_set_ip_list,
      REC_FIELD(pp_allowlist), "none", 0, 0,
      "ATS 8's name of proxy_protocol_allowlist" },
    { "proxy.config.acl.subjects", REC_STRING, rec_set_acl_subjects,
      REC_FIELD(acl_subjects), "PEER", 0, 0,
      "PEER and PROXY both mean the PROXY header's address when there was "
      "one (ATS 9); PLUGIN is an error" },
    /* issue 18, policy keys (CACHING.md says what each does).  Defaults are
     * ATS 9's, except ignore_client_no_cache and ignore_client_cc_max_age
     * (ATS: 1), which are 0: a client's no-cache and max-age are honoured
     * (RFC 9111 5.2.1), as Cistern always did.  negative_caching_list is
     * checked and read by conf/cache_config.c. */
    { "proxy.config.http.cache.http", REC_INT, rec_set_int,
      REC_FIELD(cache_http), "1", 0, 1,
      "0: nothing is looked up or stored (proxy only); 1: cache" },
    { "proxy.config.http.cache.cache_responses_to_cookies", REC_INT, rec_set_int,
      REC_FIELD(cache_cookies), "1", 0, 4,
      "ATS 0-4: which responses to requests with cookies, or with "
      "Set-Cookie, may be cached (0 none, 1 any, 2 images, 3 all but "
      "text, 4 all but text unless the origin allows it); Set-Cookie is "
      "never shared" },
    { "proxy.config.http.cache.ignore_client_cc_max_age", REC_INT, rec_set_int,
      REC_FIELD(ignore_client_cc_max_age), "0", 0, 1,
      "1: ignore a client's Cache-Control max-age (ATS default 1; "
      "Cistern 0, RFC 9111)" },
    { "proxy.config.http.cache.ignore_client_no_cache", REC_INT, rec_set_int,
      REC_FIELD(ignore_client_no_cache), "0", 0, 1,
      "1: ignore a client's no-cache (ATS default 1; Cistern 0, RFC "
      "9111)" },
    { "proxy.config.http.cache.ignore_server_no_cache", REC_INT, rec_set_int,
      REC_FIELD(ignore_server_no_cache), "0", 0, 1,
      "1: store responses marked no-cache as if they were not" },
    { "proxy.config.http.cache.ignore_authentication", REC_INT, rec_set_int,
      REC_FIELD(ignore_authentication), "0", 0, 1,
      "1: store responses carrying WWW-Authenticate" },
    { "proxy.config.http.cache.when_to_revalidate", REC_INT, rec_set_int,
      REC_FIELD(when_to_revalidate), "0", 0, 4,
      "ATS 0-4: 0 by freshness, 1 a heuristic freshness counts as stale, "
      "2 always stale (always validated), 3 never stale, 4 stale when "
      "the request has If-Modified-Since" },
    { "proxy.config.http.cache.max_stale_age", REC_INT, rec_set_int,
      REC_FIELD(max_stale_age), "604800", 0, 2147483647,
      "the stalest copy ever served (max-stale, stale-while-revalidate, "
      "stale-if-error), seconds" },
    { "proxy.config.http.cache.guaranteed_min_lifetime", REC_INT, rec_set_int,
      REC_FIELD(guaranteed_min_lifetime), "0", 0, 2147483647,
      "freshness lifetime at least this, seconds" },
    { "proxy.config.http.cache.guaranteed_max_lifetime", REC_INT, rec_set_int,
      REC_FIELD(guaranteed_max_lifetime), "31536000", 0, 2147483647,
      "freshness lifetime at most this, seconds; 0 = no bound" },
    { "proxy.config.http.negative_caching_enabled", REC_INT, rec_set_int,
      REC_FIELD(negative_caching_enabled), "0", 0, 1,
      "1: cache the statuses of negative_caching_list without freshness "
      "information" },
    { "proxy.config.http.negative_caching_lifetime", REC_INT, rec_set_int,
      REC_FIELD(negative_caching_lifetime), "1800", 0, 2147483647,
      "how long a negative answer is fresh, seconds" },
    { "proxy.config.http.negative_caching_list", REC_STRING, rec_set_string,
      REC_FIELD(negative_caching_list), "204 305 403 404 414 500 501 502 503 504", 0, 0,
      "the statuses negative caching applies to" },
    /* ATS 8+ default 1; Cistern 0: RFC 9111 4.2.4 lets a cache serve
     * stale only when permitted (stale-if-error) or disconnected. */
    { "proxy.config.http.negative_revalidating_enabled", REC_INT, rec_set_int,
      REC_FIELD(negative_revalidating), "0", 0, 1,
      "1: when revalidating a stale object fails (no connection, or a 5xx), "
      "serve the stale object within max_stale_age instead (ATS default 1; "
      "Cistern 0, RFC 9111)" },
    /* issue 18, header and origin-retry keys: ATS 9's names and defaults
     * (but the Via and Server strings name Cistern).  worker/via.c makes
     * the fields, worker/origin.c retries and marks origins down. */
    { "proxy.config.http.insert_client_ip", REC_INT, rec_set_int,
      REC_FIELD(insert_client_ip), "1", 0, 2,
      "Client-ip to origins: 0 none, 1 unless the client sent one, 2 "
      "always (replacing the client's)" },
    { "proxy.config.http.insert_squid_x_forwarded_for", REC_INT, rec_set_int,
      REC_FIELD(insert_xff), "1", 0, 1,
      "1: append the client's address to X-Forwarded-For; 0: pass the "
      "client's lines as sent" },
    { "proxy.config.http.insert_forwarded", REC_STRING, rec_set_forwarded,
      REC_FIELD(insert_forwarded), "none", 0, 0,
      "RFC 7239 Forwarded to origins, ATS's list: none, for, "
      "by=unknown, by=servername, proto, host, connection=compact|std" },
    { "proxy.config.http.insert_request_via_str", REC_INT, rec_set_via,
      REC_FIELD(via_req_level), "1", 0, 3,
      "Via to origins: 0 none, 1 protocol and name, 2 with ATS's short "
      "codes, 3 all codes" },
    { "proxy.config.http.insert_response_via_str", REC_INT, rec_set_via,
      REC_FIELD(via_resp_level), "0", 0, 3,
      "Via to clients, the same levels (ATS default 0: none)" },
    { "proxy.config.http.request_via_str", REC_STRING, rec_set_string,
      REC_FIELD(via_req_str), "Cistern/" PACKAGE_VERSION, 0, 0,
      "the text in parentheses of the request Via" },
    { "proxy.config.http.response_via_str", REC_STRING, rec_set_string,
      REC_FIELD(via_resp_str), "Cistern/" PACKAGE_VERSION, 0, 0,
      "the text in parentheses of the response Via" },
    { "proxy.config.http.response_server_enabled", REC_INT, rec_set_int,
      REC_FIELD(server_enabled), "1", 0, 2,
      "Server on responses: 0 none added, 1 response_server_str "
      "replaces the origin's, 2 added only where the origin sent none" },
    { "proxy.config.http.response_server_str", REC_STRING, rec_set_string,
      REC_FIELD(server_str), "cistern", 0, 0,
      "the Server value; NULL = none" },
    { "proxy.config.http.connect_attempts_max_retries", REC_INT, rec_set_int,
      REC_FIELD(connect_retries), "3", 0, 254,
      "connect retries to an origin after the first attempt (an attempt "
      "tries each address of its name once)" },
    { "proxy.config.http.connect_attempts_max_retries_dead_server", REC_INT, rec_set_int,
      REC_FIELD(connect_retries_dead), "1", 0, 254,
      "connect attempts in all (each trying every address) to an origin "
      "marked down" },
    /* (ATS 10's name for the same) */
    { "proxy.config.http.connect_attempts_max_retries_down_server", REC_INT, rec_set_int,
      REC_FIELD(connect_retries_dead), "1", 0, 254,
      "ATS 10's name of connect_attempts_max_retries_dead_server" },
    { "proxy.config.http.connect_attempts_rr_retries", REC_INT, rec_set_int,
      REC_FIELD(connect_rr_retries), "3", 0, 254,
      "accepted, no effect: when one address of an origin fails, its next "
      "address is tried at once (ATS retries the same one this many times)" },
    { "proxy.config.http.down_server.cache_time", REC_INT, rec_set_int,
      REC_FIELD(down_server_time), "60", 0, ONE_DAY,
      "how long an origin whose connects all failed stays marked down, "
      "and an address of it that failed is tried last (per worker), "
      "seconds" },
    /* issue 20: name resolution (worker/dns.c) */
    { "proxy.config.dns.nameservers", REC_STRING, rec_set_dns_servers,
      REC_FIELD(dns_nameservers), "NULL", 0, 0,
      "DNS servers for origin names, `IP[:PORT]` (`[v6]:PORT`) separated "
      "by spaces, commas or semicolons; NULL = those of resolv_conf" },
    { "proxy.config.dns.resolv_conf", REC_STRING, rec_set_path,
      REC_FIELD(dns_resolv_conf), "/etc/resolv.conf", 0, 0,
      "where the nameservers (and timeout/attempts options) come from "
      "when nameservers is NULL" },
    { "proxy.config.hostdb.host_file.path", REC_STRING, rec_set_path,
      REC_FIELD(hosts_file), "/etc/hosts", 0, 0,
      "the hosts file, consulted before DNS (re-read when it changes)" },
    /* issue 20: parent.config (worker/parent.c) */
    { "proxy.config.http.parent_proxy.retry_time", REC_INT, rec_set_int,
      REC_FIELD(parent_retry_time), "300", 1, ONE_DAY,
      "how long a parent marked down is skipped (all workers) before live "
      "traffic probes it, seconds" },
    { "proxy.config.http.parent_proxy.fail_threshold", REC_INT, rec_set_int,
      REC_FIELD(parent_fail_threshold), "10", 1, 10000,
      "failures within retry_time that mark a parent down" },
    { "proxy.config.http.parent_proxy.total_connect_attempts", REC_INT, rec_set_int,
      REC_FIELD(parent_total_attempts), "4", 1, 254,
      "connect attempts to parents in all, per request, before go_direct "
      "or an error" },
    { "proxy.config.http.parent_proxy.per_parent_connect_attempts", REC_INT, rec_set_int,
      REC_FIELD(parent_per_attempts), "2", 1, 254,
      "connect attempts to one parent, per request" },
    { "proxy.config.http.parent_proxy.connect_attempts_timeout", REC_INT, rec_set_int,
      REC_FIELD(parent_connect_timeout), "30", 1, ONE_DAY,
      "connecting to a parent, seconds" },
    { "proxy.config.http.parent_proxy.mark_down_hostdb", REC_INT, rec_set_int,
      REC_FIELD(parent_mark_down_hostdb), "0", 0, 0,
      "0 only: a parent is marked down in the shared parent table, not its "
      "host's addresses" },
    { "proxy.config.http.forward.proxy_auth_to_parent", REC_INT, rec_set_int,
      REC_FIELD(proxy_auth_to_parent), "0", 0, 1,
      "1 passes Proxy-Authorization to a parent proxy; 0 strips it" },
    { "proxy.config.http.uncacheable_requests_bypass_parent", REC_INT, rec_set_int,
      REC_FIELD(uncacheable_bypass_parent), "1", 0, 1,
      "1: a request that is not a cache lookup (not GET/HEAD) goes to its "
      "origin, not to a parent proxy (parent_is_proxy=false pools still used)" },
    /* issue 24: HTTP/2 to clients (worker/h2.c), ATS 9's names and defaults */
    { "proxy.config.http2.max_concurrent_streams_in", REC_INT, rec_set_int,
      REC_FIELD(h2_max_streams), "100", 1, 1000,
      "HTTP/2: streams a client may have open at once (SETTINGS); one "
      "more is REFUSED_STREAM before the client has our SETTINGS, and a "
      "connection error (GOAWAY PROTOCOL_ERROR, nghttp2's rule) after" },
    { "proxy.config.http2.initial_window_size_in", REC_INT, rec_set_int,
      REC_FIELD(h2_window), "65535", 1024, 16777216,
      "HTTP/2: the flow-control window we give each client stream for "
      "request bodies (bytes)" },
    { "proxy.config.http2.flow_control.policy_in", REC_INT, rec_set_int,
      REC_FIELD(h2_flow_policy), "1", 0, 1,
      "HTTP/2 (ATS 10's key): the connection's window for request bodies; "
      "0: one stream's (initial_window_size_in), so uploads on several "
      "streams share it; 1: initial_window_size_in x "
      "max_concurrent_streams_in (at most 2^31-1), the sum of the streams' "
      "windows, so no stream waits for another's; not ATS's default 0, "
      "which holds a connection's uploads to 64 KiB in flight; 2 (ATS's "
      "dynamic stream windows) is not implemented" },
    { "proxy.config.http2.max_frame_size", REC_INT, rec_set_int,
      REC_FIELD(h2_frame_size), "16384", 16384, 16777215,
      "HTTP/2: the largest frame payload we accept (SETTINGS); DATA we send "
      "is cut at 16 KiB whatever the client allows" },
    { "proxy.config.http2.header_table_size", REC_INT, rec_set_int,
      REC_FIELD(h2_table_size), "4096", 0, 65536,
      "HTTP/2: the HPACK dynamic table the client may use toward us (bytes)" },
    { "proxy.config.http2.max_header_list_size", REC_INT, rec_set_int,
      REC_FIELD(h2_header_list), "131072", 1024, M16,
      "HTTP/2: decoded header bytes (names, values, 32 each) one request "
      "may carry; more is 431 (the HPACK bomb defence)" },
    { "proxy.config.http2.no_activity_timeout_in", REC_INT, rec_set_int,
      REC_FIELD(h2_idle_in), "120", 1, ONE_DAY,
      "HTTP/2: seconds a connection may pass with no request or DATA read "
      "and no DATA sent (a zero-window stall) before GOAWAY and close" },
    { "proxy.config.http2.stream_priority_enabled", REC_INT, rec_set_int,
      REC_FIELD(h2_priority), "0", 0, 1,
      "HTTP/2: 1: RFC 7540 priorities (PRIORITY frames order DATA in "
      "nghttp2's scheduler); 0: SETTINGS_NO_RFC7540_PRIORITIES, streams of "
      "one urgency served round-robin" },
    { "proxy.config.http2.max_settings_per_frame", REC_INT, rec_set_int,
      REC_FIELD(h2_settings_per_frame), "7", 1, 1000,
      "HTTP/2: settings one SETTINGS frame may carry; more is "
      "ENHANCE_YOUR_CALM and close" },
    { "proxy.config.http2.max_settings_per_minute", REC_INT, rec_set_int,
      REC_FIELD(h2_settings_min), "14", 1, 1000000,
      "HTTP/2: settings a client may send in a minute; more closes" },
    { "proxy.config.http2.max_settings_frames_per_minute", REC_INT, rec_set_int,
      REC_FIELD(h2_settings_frames_min), "14", 1, 1000000,
      "HTTP/2: SETTINGS frames a client may send in a minute (the "
      "SETTINGS flood); more closes with ENHANCE_YOUR_CALM" },
    { "proxy.config.http2.max_ping_frames_per_minute", REC_INT, rec_set_int,
      REC_FIELD(h2_ping_min), "60", 1, 1000000,
      "HTTP/2: PING frames a client may send in a minute (the PING flood)" },
    { "proxy.config.http2.max_empty_frames_per_minute", REC_INT, rec_set_int,
      REC_FIELD(h2_empty_min), "120", 0, 1000000,
      "HTTP/2: DATA frames carrying nothing (no payload but padding, no "
      "END_STREAM) a client may send in a minute; more closes with "
      "ENHANCE_YOUR_CALM (ATS 10's default, 0, would refuse the odd "
      "empty flush some clients send)" },
    { "proxy.config.http2.max_priority_frames_per_minute", REC_INT, rec_set_int,
      REC_FIELD(h2_priority_min), "120", 1, 1000000,
      "HTTP/2: PRIORITY frames a client may send in a minute" },
    { "proxy.config.http2.max_rst_stream_frames_per_minute", REC_INT, rec_set_int,
      REC_FIELD(h2_rst_min), "200", 1, 1000000,
      "HTTP/2: RST_STREAM frames a client may send in a minute (rapid "
      "reset, CVE-2023-44487), counted with the resets its stream errors "
      "make us send (MadeYouReset); more closes with ENHANCE_YOUR_CALM" },
    { "proxy.config.http2.max_continuation_frames_per_minute", REC_INT, rec_set_int,
      REC_FIELD(h2_cont_min), "120", 1, 1000000,
      "HTTP/2: CONTINUATION frames a client may send in a minute (the "
      "CONTINUATION flood of 2024)" },
    { "proxy.config.cistern.http2.max_window_update_frames_per_minute", REC_INT,
      rec_set_int, REC_FIELD(h2_wu_min), "1000", 1, 1000000,
      "HTTP/2 (no ATS key): WINDOW_UPDATE frames in a minute beyond one per "
      "DATA frame we sent (the WINDOW_UPDATE flood); more closes" },
    { "proxy.config.cistern.http2.max_unknown_frames_per_minute", REC_INT,
      rec_set_int, REC_FIELD(h2_unknown_min), "120", 0, 1000000,
      "HTTP/2 (no ATS key: ATS drops them uncounted): frames of types RFC "
      "9113 does not define (5.5: ignored) a client may send in a minute; "
      "more closes with ENHANCE_YOUR_CALM (PRIORITY_UPDATE counts as a "
      "PRIORITY)" },
    { "proxy.config.http2.stream_error_rate_threshold", REC_FLOAT, rec_set_milli,
      REC_FIELD(h2_err_rate), "0.1", 0, 1000,
      "HTTP/2: the share of a connection's streams that may end in a "
      "stream error (a reset the client caused) once it has opened "
      "stream_error_sampling_threshold and 1/this streams; past it the "
      "connection drains (a final GOAWAY ENHANCE_YOUR_CALM once quiet), "
      "past twice it (at most 1) GOAWAY ENHANCE_YOUR_CALM and the close; "
      "0: no limit" },
    { "proxy.config.http2.stream_error_sampling_threshold", REC_INT, rec_set_int,
      REC_FIELD(h2_err_sample), "10", 1, 1000000,
      "HTTP/2: streams a connection opens before its stream error rate "
      "counts" },
};

#define REC_NKEYS (sizeof(rec_table) / sizeof(rec_table[0]))

static void
rec_fail(struct rec_ctx *ctx, const struct rec_directive *d, const char *fmt,
         ...) __attribute__((format(printf, 3, 4)));

static void
rec_fail(struct rec_ctx *ctx, const struct rec_directive *d, const char *fmt,
         ...)
{
    char   *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    conf_error(ctx->e, ctx->file, ctx->line, "%s: %s", d->name,
               msg != NULL ? msg : "invalid value");
    free(msg);
}

/* ---------------------------------------------------------------------
 * Setters
 */

/* Parse an integer (with K/M/G/T when sizes is set) and check the row's
 * bounds. */
static int
rec_parse_int(const struct rec_directive *d, const char *value, int sizes,
              struct rec_ctx *ctx, int64_t *out)
{
    int64_t v;
    char   *end;

    if (sizes && value[0] != '-') {
        if (conf_parse_size(value, &v) < 0) {
            rec_fail(ctx, d, "\"%s\" is not a size (bytes, or a number with "
                     "a K, M, G or T suffix)", value);
            return -1;
        }
    } else {
        errno = 0;
        v = strtoll(value, &end, 10);
        if (end == value || *end != '\0' || isspace((unsigned char)*value)) {
            rec_fail(ctx, d, "\"%s\" is not an integer", value);
            return -1;
        }
        if (errno == ERANGE) {
            rec_fail(ctx, d, "%s is out of range (%lld..%lld)", value,
                     (long long)d->min, (long long)d->max);
            return -1;
        }
    }
    if (v < d->min || v > d->max) {
        rec_fail(ctx, d, "%s is out of range (%lld..%lld)", value,
                 (long long)d->min, (long long)d->max);
        return -1;
    }
    *out = v;
    return 0;
}

static int
rec_set_int(struct conf_records *r, const struct rec_directive *d,
            const char *value, struct rec_ctx *ctx)
{
    int64_t v;

    if (rec_parse_int(d, value, 0, ctx, &v) < 0)
        return -1;
    *(int *)((char *)r + d->off) = (int)v;
    return 0;
}

static int
rec_set_size(struct conf_records *r, const struct rec_directive *d,
             const char *value, struct rec_ctx *ctx)
{
    int64_t v;

    if (rec_parse_int(d, value, 1, ctx, &v) < 0)
        return -1;
    *(int *)((char *)r + d->off) = (int)v;
    return 0;
}

/* A FLOAT kept as an int in thousandths (0.10 -> 100), bounded by the row's
 * min and max, which are in thousandths too. */
static int
rec_set_milli(struct conf_records *r, const struct rec_directive *d,
              const char *value, struct rec_ctx *ctx)
{
    char  *end;
    double v;

    errno = 0;
    v = strtod(value, &end);
    if (end == value || *end != '\0' || errno == ERANGE || v != v) {
        rec_fail(ctx, d, "\"%s\" is not a number", value);
        return -1;
    }
    if (v * 1000 < (double)d->min || v * 1000 > (double)d->max) {
        rec_fail(ctx, d, "%s is out of range (%g..%g)", value,
                 (double)d->min / 1000, (double)d->max / 1000);
        return -1;
    }
    *(int *)((char *)r + d->off) = (int)(v * 1000 + 0.5);
    return 0;
}

static int
rec_set_int64(struct conf_records *r, const struct rec_directive *d,
              const char *value, struct rec_ctx *ctx)
{
    int64_t v;

    if (rec_parse_int(d, value, 1, ctx, &v) < 0)
        return -1;
    *(int64_t *)((char *)r + d->off) = v;
    return 0;
}

static int
rec_store_string(struct conf_records *r, const struct rec_directive *d,
                 char *s, struct rec_ctx *ctx)
{
    char **field = (char **)((char *)r + d->off);

    if (s == NULL) {
        rec_fail(ctx, d, "out of memory");
        return -1;
    }
    free(*field);
    *field = s;
    return 0;
}

static int
rec_set_string(struct conf_records *r, const struct rec_directive *d,
               const char *value, struct rec_ctx *ctx)
{
    return rec_store_string(r, d, strdup(value), ctx);
}

static int
rec_set_path(struct conf_records *r, const struct rec_directive *d,
             const char *value, struct rec_ctx *ctx)
{
    if (strchr(value, ' ') != NULL || strchr(value, '\t') != NULL) {
        rec_fail(ctx, d, "\"%s\": spaces in paths are not supported", value);
        return -1;
    }
    return rec_store_string(r, d, conf_path(ctx->dir, value), ctx);
}

static int
rec_set_log_level(struct conf_records *r, const struct rec_directive *d,
                  const char *value, struct rec_ctx *ctx)
{
    static const char *const levels[] = {
        "debug", "info", "notice", "warn", "error", "crit",
    };

    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
        if (strcasecmp(value, levels[i]) == 0)
            return rec_store_string(r, d, strdup(levels[i]), ctx);
    rec_fail(ctx, d, "unknown log level \"%s\" (expected debug, info, "
             "notice, warn, error or crit)", value);
    return -1;
}

/* proxy.config.ssl.client.verify.server.policy: ATS's three words. */
static int
rec_set_policy(struct conf_records *r, const struct rec_directive *d,
               const char *value, struct rec_ctx *ctx)
{
    static const char *const pol[] = { "ENFORCED", "PERMISSIVE", "DISABLED" };

    for (size_t i = 0; i < sizeof(pol) / sizeof(pol[0]); i++)
        if (strcasecmp(value, pol[i]) == 0)
            return rec_store_string(r, d, strdup(pol[i]), ctx);
    rec_fail(ctx, d, "unknown policy \"%s\" (expected ENFORCED, PERMISSIVE "
             "or DISABLED)", value);
    return -1;
}

/* proxy.config.http.insert_forwarded: "none", or ATS's list of RFC 7239
 * Forwarded parameters separated by "|" or ":" (case and white space
 * ignored).  by=ip, by=uuid and connection=full are refused: Cistern has no
 * node UUID, and does not keep the address a client connected to or the
 * protocol tags. */
static int
rec_set_forwarded(struct conf_records *r, const struct rec_directive *d,
                  const char *value, struct rec_ctx *ctx)
{
    static const struct { const char *name; int bit; } opts[] = {
        { "for", CONF_FWD_FOR }, { "by=unknown", CONF_FWD_BY_UNKNOWN },
        { "by=servername", CONF_FWD_BY_NAME }, { "proto", CONF_FWD_PROTO },
        { "host", CONF_FWD_HOST }, { "connection=compact", CONF_FWD_CONN_COMPACT },
        { "connection=std", CONF_FWD_CONN_STD },
        { "by=ip", -1 }, { "by=uuid", -1 }, { "connection=full", -1 },
    };
    char opt[32];
    int bits = 0, rc = 0;
    const char *p = value;

    for (;;) {
        size_t n = 0;
        for (; *p && *p != '|' && *p != ':'; p++)
            if (!isspace((unsigned char)*p) && n < sizeof(opt) - 1)
                opt[n++] = (char)tolower((unsigned char)*p);
        opt[n] = '\0';
        if (strcmp(opt, "none") == 0 && bits == 0 && *p == '\0')
            break;
        size_t i;
        for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
            if (strcmp(opt, opts[i].name) == 0)
                break;
        if (i == sizeof(opts) / sizeof(opts[0])) {
            rec_fail(ctx, d, "\"%s\" is not a Forwarded parameter (for, "
                     "by=unknown, by=servername, proto, host, connection=compact, "
                     "connection=std)", opt);
            rc = -1;
        } else if (opts[i].bit < 0) {
            rec_fail(ctx, d, "\"%s\" is not supported (no node UUID, local "
                     "address or protocol tags are kept)", opt);
            rc = -1;
        } else {
            bits |= opts[i].bit;
        }
        if (*p == '\0')
            break;
        p++;
    }
    if (rc < 0)
        return -1;
    *(int *)((char *)r + d->off) = bits;
    return 0;
}

/* insert_request_via_str / insert_response_via_str: ATS's levels 0-3;
 * 4 (the connection's protocol tags) is not supported. */
static int
rec_set_via(struct conf_records *r, const struct rec_directive *d,
            const char *value, struct rec_ctx *ctx)
{
    if (strcmp(value, "4") == 0) {
        rec_fail(ctx, d, "4 (protocol tags in Via) is not supported; "
                 "levels 0-3 are");
        return -1;
    }
    return rec_set_int(r, d, value, ctx);
}

int
conf_port_list_has(const char *list, int port)
{
    const char *p = list;
    int found = 0, any = 0;

    while (*p) {
        long lo, hi;
        char *e;

        if (*p == ' ' || *p == '\t' || *p == ',') {
            p++;
            continue;
        }
        any = 1;
        if (*p == '*') {
            found = 1;
            p++;
        } else {
            if (!isdigit((unsigned char)*p))
                return -1;
            lo = hi = strtol(p, &e, 10);
            if (*e == '-') {
                if (!isdigit((unsigned char)e[1]))
                    return -1;
                hi = strtol(e + 1, &e, 10);
            }
            if (lo < 0 || hi > 65535 || lo > hi)
                return -1;
            if (port >= lo && port <= hi)
                found = 1;
            p = e;
        }
        if (*p && *p != ' ' && *p != '\t' && *p != ',')
            return -1;
    }
    return any ? found : -1;
}

/* proxy.config.http.connect_ports: checked here, matched by
 * conf_port_list_has() for each CONNECT. */
static int
rec_set_port_list(struct conf_records *r, const struct rec_directive *d,
                  const char *value, struct rec_ctx *ctx)
{
    if (conf_port_list_has(value, -1) < 0) {
        rec_fail(ctx, d, "\"%s\": expected ports, ranges (443 8000-9000) or *",
                 value);
        return -1;
    }
    return rec_store_string(r, d, strdup(value), ctx);
}

/* proxy.config.admin.user_id: a user name, "#UID", or "#-1" (keep the
 * starting user).  The user must exist: a typo is a config error that
 * `cistern -t` reports, not a surprise at start.  The built-in default is
 * not looked up here (defaults must always parse); the master resolves the
 * user again when it starts. */
static int
rec_set_user(struct conf_records *r, const struct rec_directive *d,
             const char *value, struct rec_ctx *ctx)
{
    struct passwd *pw = NULL;
    char *end;
    long  v;

    if (strcmp(value, "#-1") == 0 || ctx->file == NULL)
        return rec_store_string(r, d, strdup(value), ctx);
    if (value[0] == '#') {
        errno = 0;
        v = strtol(value + 1, &end, 10);
        if (end != value + 1 && *end == '\0' && errno == 0 && v >= 0)
            pw = getpwuid((uid_t)v);
    } else if (strchr(value, ' ') == NULL) {
        pw = getpwnam(value);
    }
    if (pw == NULL) {
        rec_fail(ctx, d, "no such user \"%s\"", value);
        return -1;
    }
    return rec_store_string(r, d, strdup(value), ctx);
}

/* ---------------------------------------------------------------------
 * proxy.config.http.server_ports: ATS's port descriptors
 *
 * A descriptor is colon-separated items in any order (ATS 9): the port
 * number, ipv4, ipv6, ssl, pp, ip-in=ADDR (an IPv6 address in brackets),
 * proto=LIST.  A keyword with a value may leave out the '=' (ATS).  Every
 * other ATS item (transparency, blind tunnels, ip-out, ip-resolve, ...) asks
 * for something Cistern does not do, so it is an error naming the item:
 * never a listener that silently behaves otherwise.
 */

/* The value of a keyword item ("ip-in=1.2.3.4", "ip-in1.2.3.4"), or NULL
 * when item is not that keyword. */
static const char *
rec_port_value(const char *item, const char *kw)
{
    size_t n = strlen(kw);

    if (strncasecmp(item, kw, n) != 0)
        return NULL;
    return item[n] == '=' ? item + n + 1 : item + n;
}

/* proto=: ATS's session protocol list (';' or '|' separated): http (and
 * its spellings http/1.0, http/1.1) and http2 (h2, http/2; h2c for the
 * cleartext prior-knowledge form).  On an ssl port the list is what ALPN
 * offers (h2 first); on a cleartext port http2 means h2c with prior
 * knowledge (a connection that starts with the HTTP/2 preface), alone
 * or beside HTTP/1.x.  There is no h2c Upgrade (README says why). */
static int
rec_port_proto(const struct rec_directive *d, const char *orig,
               const char *value, struct rec_ctx *ctx, struct conf_port *out)
{
    char  buf[128], *save = NULL, *t;
    int   n = 0;

    if (strlen(value) >= sizeof(buf)) {
        rec_fail(ctx, d, "\"%s\": proto= list too long", orig);
        return -1;
    }
    strcpy(buf, value);
    for (t = strtok_r(buf, ";|", &save); t; t = strtok_r(NULL, ";|", &save), n++) {
        if (strcasecmp(t, "http") == 0 || strcasecmp(t, "http/1.1") == 0
            || strcasecmp(t, "http/1.0") == 0) {
            out->proto |= CONF_PROTO_H1;
            continue;
        }
        if (strcasecmp(t, "http2") == 0 || strcasecmp(t, "h2") == 0
            || strcasecmp(t, "http/2") == 0 || strcasecmp(t, "h2c") == 0) {
            out->proto |= CONF_PROTO_H2;
            continue;
        }
        rec_fail(ctx, d, "\"%s\": proto=%s: protocol not supported (only "
                 "http, http/1.0, http/1.1, http2, h2, h2c)", orig, t);
        return -1;
    }
    if (n == 0) {
        rec_fail(ctx, d, "\"%s\": proto= needs a protocol", orig);
        return -1;
    }
    return 0;
}

/* ip-in=ADDR: IPv4, or IPv6 in brackets as ATS writes it (bare IPv6 is
 * taken too when it made it through the tokenizer: "ip-in=::1" cannot). */
static int
rec_port_addr(const struct rec_directive *d, const char *orig,
              const char *value, struct rec_ctx *ctx, struct conf_port *out,
              int *fam)
{
    char   buf[64];
    size_t n = strlen(value);

    if (n >= 2 && value[0] == '[' && value[n - 1] == ']') {
        value++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof(buf)) {
        rec_fail(ctx, d, "\"%s\": ip-in= needs an address", orig);
        return -1;
    }
    memcpy(buf, value, n);
    buf[n] = '\0';
    memset(out->addr, 0, sizeof(out->addr));
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        *fam = AF_INET;
    } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        *fam = AF_INET6;
    } else {
        rec_fail(ctx, d, "\"%s\": ip-in=%s is not an IP address (IPv6 goes "
                 "in brackets: ip-in=[::1])", orig, buf);
        return -1;
    }
    out->has_addr = 1;
    return 0;
}

/* The ATS items Cistern refuses, and why. */
static const struct {
    const char *item;
    int         prefix;               /* takes a value */
    const char *why;
} rec_port_unsupported[] = {
    { "tr-full", 0, "transparent proxying is not supported" },
    { "tr-in", 0, "transparent proxying is not supported" },
    { "tr-out", 0, "transparent proxying is not supported" },
    { "tr-pass", 0, "transparent pass-through is not supported" },
    { "blind", 0, "blind tunnel (CONNECT-only) ports are not supported" },
    { "compressed", 0, "compressed ports are not supported" },
    { "compress", 0, "compressed ports are not supported" },
    { "mptcp", 0, "Multipath TCP is not supported" },
    { "quic", 0, "QUIC (HTTP/3) is not supported" },
    { "plugin", 0, "plugin ports are not supported" },
    { "allow-plain", 0, "plain HTTP on an ssl port is not supported" },
    { "ip-out", 1, "a per-port outbound address is not supported (origins "
      "are reached from the system's source address)" },
    { "ip-resolve", 1, "per-port resolution order is not supported (origins "
      "names are connected to IPv4 addresses first, then IPv6)" },
    { "fd", 1, "inherited listening descriptors are not supported" },
};

/* Split a descriptor at colons outside brackets into items[]; returns the
 * number of items, or -1 for an unclosed bracket. */
static int
rec_port_split(char *entry, char **items, int max)
{
    int n = 0, bracket = 0;
    char *tok = NULL;

    for (char *p = entry; *p != '\0'; p++) {
        if (bracket) {
            if (*p == ']')
                bracket = 0;
            continue;
        }
        if (*p == ':') {
            *p = '\0';
            tok = NULL;
            continue;
        }
        if (tok == NULL) {
            if (n == max)
                return -1;
            tok = items[n++] = p;
        }
        if (*p == '[')
            bracket = 1;
    }
    return bracket ? -1 : n;
}

/* One item of a descriptor into out; 0, or -1 after an error. */
static int
rec_port_item(const struct rec_directive *d, const char *orig, char *item,
              struct rec_ctx *ctx, struct conf_port *out, int *fam,
              int *fam_set, int *have_port)
{
    const char *v;
    char *end;
    long  num;

    if (isdigit((unsigned char)item[0])) {
        errno = 0;
        num = strtol(item, &end, 10);
        if (*end != '\0') {
            rec_fail(ctx, d, "\"%s\": \"%s\" is not a port number", orig, item);
            return -1;
        }
        if (errno == ERANGE || num > 65535) {
            rec_fail(ctx, d, "port %s is out of range (0..65535)", item);
            return -1;
        }
        if (*have_port) {
            rec_fail(ctx, d, "\"%s\": two port numbers", orig);
            return -1;
        }
        out->port = (int)num;
        *have_port = 1;
    } else if (strcasecmp(item, "ssl") == 0) {
        out->ssl = 1;
    } else if (strcasecmp(item, "pp") == 0) {
        out->pp = 1;
    } else if (strcasecmp(item, "ipv4") == 0 || strcasecmp(item, "ipv6") == 0) {
        int f = strcasecmp(item, "ipv6") == 0 ? AF_INET6 : AF_INET;
        if (*fam_set && *fam != f) {
            rec_fail(ctx, d, "\"%s\": ipv4 and ipv6 conflict", orig);
            return -1;
        }
        *fam = f;
        *fam_set = 1;
    } else if ((v = rec_port_value(item, "ip-in")) != NULL) {
        int f = 0;
        if (rec_port_addr(d, orig, v, ctx, out, &f) < 0)
            return -1;
        if (*fam_set && *fam != f) {
            rec_fail(ctx, d, "\"%s\": the ip-in= address is not %s", orig,
                     *fam == AF_INET6 ? "IPv6" : "IPv4");
            return -1;
        }
        *fam = f;
        *fam_set = 1;
    } else if ((v = rec_port_value(item, "proto")) != NULL) {
        return rec_port_proto(d, orig, v, ctx, out);
    } else {
        for (size_t i = 0; i < sizeof(rec_port_unsupported) / sizeof(rec_port_unsupported[0]); i++) {
            const char *u = rec_port_unsupported[i].item;
            if (rec_port_unsupported[i].prefix ? rec_port_value(item, u) != NULL
                                               : strcasecmp(item, u) == 0) {
                rec_fail(ctx, d, "\"%s\": %s: %s", orig, item,
                         rec_port_unsupported[i].why);
                return -1;
            }
        }
        rec_fail(ctx, d, "\"%s\": unknown port option \"%s\"", orig, item);
        return -1;
    }
    return 0;
}

/* One server_ports descriptor into *out (zeroed first). */
static int
rec_parse_port(const struct rec_directive *d, char *entry,
               struct rec_ctx *ctx, struct conf_port *out)
{
    char *items[16];
    char  orig[160];
    int   n, fam = AF_INET, fam_set = 0, have_port = 0;

    snprintf(orig, sizeof(orig), "%s", entry);
    memset(out, 0, sizeof(*out));
    n = rec_port_split(entry, items, (int)(sizeof(items) / sizeof(items[0])));
    if (n < 0) {
        rec_fail(ctx, d, "\"%s\": an unclosed '[' or too many items", orig);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (rec_port_item(d, orig, items[i], ctx, out, &fam, &fam_set,
                          &have_port) < 0)
            return -1;
    if (!have_port) {
        rec_fail(ctx, d, "\"%s\" has no port number (expected e.g. 8080, "
                 "8080:ipv6, 443:ssl, ip-in=127.0.0.1:8080)", orig);
        return -1;
    }
    out->ipv6 = fam == AF_INET6;
    return 0;
}

/* Two descriptors for the same listener: same port, family and address.
 * (8080 and 8080:ipv6 are two listeners; port 0 always picks its own.) */
static int
rec_port_same(const struct conf_port *a, const struct conf_port *b)
{
    return a->port != 0 && a->port == b->port && a->ipv6 == b->ipv6
           && a->has_addr == b->has_addr
           && memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

static int
rec_set_ports(struct conf_records *r, const struct rec_directive *d,
              const char *value, struct rec_ctx *ctx)
{
    struct conf_port ports[CONF_MAX_PORTS];
    char *copy, *p, *entry;
    int   n = 0, rc = 0;

    copy = strdup(value);
    if (copy == NULL) {
        rec_fail(ctx, d, "out of memory");
        return -1;
    }
    /* ATS separates entries with spaces or commas. */
    for (p = copy; *p != '\0'; p++)
        if (*p == ',')
            *p = ' ';
    p = copy;
    while ((entry = conf_token(&p)) != NULL) {
        char orig[160];

        if (n == CONF_MAX_PORTS) {
            rec_fail(ctx, d, "too many ports (at most %d)", CONF_MAX_PORTS);
            rc = -1;
            break;
        }
        snprintf(orig, sizeof(orig), "%s", entry);
        if (rec_parse_port(d, entry, ctx, &ports[n]) < 0) {
            rc = -1;
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (rec_port_same(&ports[i], &ports[n])) {
                rec_fail(ctx, d, "\"%s\": port %d (%s%s) is listed twice",
                         orig, ports[n].port, ports[n].ipv6 ? "IPv6" : "IPv4",
                         ports[n].has_addr ? ", same ip-in" : "");
                rc = -1;
                break;
            }
        }
        n++;
    }
    free(copy);
    if (rc == 0 && n == 0) {
        rec_fail(ctx, d, "no ports to listen on");
        rc = -1;
    }
    if (rc < 0)
        return -1;
    memcpy(r->ports, ports, sizeof(ports[0]) * (size_t)n);
    r->nports = n;
    return 0;
}

/* proxy.config.http.proxy_protocol_allowlist and cistern.admin.allow:
 * addresses, ranges and CIDRs separated by commas or spaces
 * (conf_ip_list_parse), or "none" (nobody).  Checked here so a typo is
 * reported with its line; conf_load() builds the list. */
static int
rec_set_ip_list(struct conf_records *r, const struct rec_directive *d,
                const char *value, struct rec_ctx *ctx)
{
    struct conf_ip_allow tmp;
    const char *why = NULL;
    int rc;

    memset(&tmp, 0, sizeof(tmp));
    rc = strcasecmp(value, "none") == 0 ? 0 : conf_ip_list_parse(&tmp, value, &why);
    conf_ip_allow_free(&tmp);
    if (rc < 0) {
        rec_fail(ctx, d, "%s in \"%s\"", why ? why : "invalid list", value);
        return -1;
    }
    return rec_store_string(r, d, strdup(value), ctx);
}

/* proxy.config.dns.nameservers: checked here, parsed again by each worker
 * (conf_dns_servers) when it starts its resolver. */
static int
rec_set_dns_servers(struct conf_records *r, const struct rec_directive *d,
                    const char *value, struct rec_ctx *ctx)
{
    struct sockaddr_storage ss[CONF_DNS_SERVERS_MAX];
    const char *why = NULL;

    if (conf_dns_servers(value, ss, CONF_DNS_SERVERS_MAX, &why) < 0) {
        rec_fail(ctx, d, "%s in \"%s\"", why, value);
        return -1;
    }
    return rec_store_string(r, d, strdup(value), ctx);
}

/* One "IP", "IP:PORT" or "[IPv6]:PORT" (a bare IPv6 address has no port)
 * into *ss; -1 when it is none of those. */
static int
conf_dns_server(const char *item, struct sockaddr_storage *ss)
{
    struct sockaddr_in  *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    char        host[64];
    const char *colon, *port = NULL;
    size_t      n;
    long        p = 53;
    char       *end;

    memset(ss, 0, sizeof(*ss));
    if (item[0] == '[') {
        const char *rb = strchr(item, ']');
        if (rb == NULL || (rb[1] != '\0' && rb[1] != ':'))
            return -1;
        n = (size_t)(rb - item - 1);
        if (n >= sizeof(host))
            return -1;
        memcpy(host, item + 1, n);
        host[n] = '\0';
        if (rb[1] == ':')
            port = rb + 2;
    } else {
        colon = strchr(item, ':');
        if (colon != NULL && strchr(colon + 1, ':') == NULL) {
            n = (size_t)(colon - item);
            port = colon + 1;
        } else {
            n = strlen(item);       /* IPv4, or a bare IPv6 address */
        }
        if (n >= sizeof(host))
            return -1;
        memcpy(host, item, n);
        host[n] = '\0';
    }
    if (port != NULL) {
        errno = 0;
        p = strtol(port, &end, 10);
        if (end == port || *end != '\0' || errno != 0 || p < 1 || p > 65535)
            return -1;
    }
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)p);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)p);
        return 0;
    }
    return -1;
}

int
conf_dns_servers(const char *list, struct sockaddr_storage *out, int max,
                 const char **why)
{
    char  buf[1024], *save = NULL, *t;
    int   n = 0;

    if (strcmp(list, "NULL") == 0)
        return 0;
    if (strlen(list) >= sizeof(buf)) {
        *why = "list too long";
        return -1;
    }
    memcpy(buf, list, strlen(list) + 1);
    for (t = strtok_r(buf, " \t,;", &save); t != NULL;
         t = strtok_r(NULL, " \t,;", &save)) {
        if (n == max) {
            *why = "too many nameservers";
            return -1;
        }
        if (conf_dns_server(t, &out[n]) < 0) {
            *why = "expected IP, IP:PORT or [IPv6]:PORT";
            return -1;
        }
        n++;
    }
    if (n == 0) {
        *why = "no nameserver (NULL means the resolv.conf ones)";
        return -1;
    }
    return n;
}

/* proxy.config.acl.subjects (ATS 9.2.11 and 10): where the ACLs take the
 * client address from, the first available of a comma-separated list of
 * PEER and PROXY.  In ATS 9 the PROXY header's address replaces the
 * connection's remote address before any ACL runs, so PEER and PROXY both
 * mean "the PROXY address when there was one, else the peer", which is
 * what Cistern does (ATS 10 keeps them apart: there PEER is the balancer).
 * PLUGIN (an address a plugin verified) is an error: no plugins. */
static int
rec_set_acl_subjects(struct conf_records *r, const struct rec_directive *d,
                     const char *value, struct rec_ctx *ctx)
{
    char buf[64], *save = NULL, *t;
    int  n = 0;

    if (strlen(value) >= sizeof(buf)) {
        rec_fail(ctx, d, "\"%s\": list too long", value);
        return -1;
    }
    strcpy(buf, value);
    for (t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save), n++) {
        if (strcmp(t, "PEER") == 0 || strcmp(t, "PROXY") == 0)
            continue;
        if (strcmp(t, "PLUGIN") == 0)
            rec_fail(ctx, d, "PLUGIN: plugins are not supported (the ACLs "
                     "would run on another address)");
        else
            rec_fail(ctx, d, "unknown subject \"%s\" (expected PEER or PROXY)", t);
        return -1;
    }
    if (n == 0) {
        rec_fail(ctx, d, "no subject (expected PEER or PROXY)");
        return -1;
    }
    return rec_store_string(r, d, strdup(value), ctx);
}

/* ---------------------------------------------------------------------
 * The file
 */
static const struct rec_directive *
rec_find(const char *name)
{
    for (size_t i = 0; i < REC_NKEYS; i++)
        if (strcmp(rec_table[i].name, name) == 0)
            return &rec_table[i];
    return NULL;
}

void
conf_records_defaults(struct conf_records *r)
{
    struct conf_errors e;
    struct rec_ctx     ctx = { .file = NULL, .line = 0, .dir = NULL, .e = &e };

    memset(&e, 0, sizeof(e));
    memset(r, 0, sizeof(*r));
    for (size_t i = 0; i < REC_NKEYS; i++)
        rec_table[i].set(r, &rec_table[i], rec_table[i].def, &ctx);
    /* A default that does not parse is a bug in rec_table, or memory ran
     * out before the daemon even started. */
    assert(e.n == 0);
    conf_errors_free(&e);
}

struct rec_parse {
    struct conf_records *r;
    struct rec_ctx       ctx;
    int                  seen[REC_NKEYS];   /* line of last setting, or 0 */
    char                *internal;          /* ATS-internal keys seen:
                                               "a, b, c" (malloc'd) */
    int                  ninternal;
};

/* Append name to the list of ATS-internal keys the file sets. */
static void
rec_internal_seen(struct rec_parse *ps, const char *name)
{
    char *n = NULL;

    if (asprintf(&n, "%s%s%s", ps->internal ? ps->internal : "",
                 ps->internal ? ", " : "", name) < 0)
        return;
    free(ps->internal);
    ps->internal = n;
    ps->ninternal++;
}

/* A key rec_table does not have: matches, ATS-internal or unknown. */
static void
rec_not_implemented(struct rec_parse *ps, const char *name, const char *type,
                    const char *value)
{
    struct rec_ctx *ctx = &ps->ctx;
    const struct conf_ats_key *k = conf_ats_key_find(name);

    if (k == NULL) {
        conf_warn(ctx->e, ctx->file, ctx->line, "unknown key \"%s\" ignored",
                  name);
        conf_note(ctx->e, CONF_NOTE_UNKNOWN, ctx->file, ctx->line, "%s",
                  name);
        return;
    }
    if (k->cls == CONF_ATS_INTERNAL) {
        rec_internal_seen(ps, name);
        conf_note(ctx->e, CONF_NOTE_INTERNAL, ctx->file, ctx->line, "%s: %s",
                  name, k->why);
        return;
    }
    if (strcmp(type, k->type) != 0) {
        conf_error(ctx->e, ctx->file, ctx->line, "%s: type must be %s, not %s",
                   name, k->type, type);
        return;
    }
    if (!conf_ats_value_matches(k, value)) {
        conf_error(ctx->e, ctx->file, ctx->line, "%s %s is not supported "
                   "(only %s): %s", name, value, k->values, k->why);
        return;
    }
    conf_note(ctx->e, CONF_NOTE_MATCHES, ctx->file, ctx->line, "%s %s: %s",
              name, value, k->why);
}

static int
rec_line(void *arg, char *line, int lineno)
{
    struct rec_parse *ps = arg;
    struct rec_ctx   *ctx = &ps->ctx;
    const struct rec_directive *d;
    char *p = line, *kw, *name, *type, *value;
    int   t = -1;
    size_t idx;

    ctx->line = lineno;
    kw = conf_token(&p);
    /* ATS writes LOCAL for per-node settings; one node here, so same thing. */
    if (strcmp(kw, "CONFIG") != 0 && strcmp(kw, "LOCAL") != 0) {
        conf_error(ctx->e, ctx->file, lineno,
                   "unknown keyword \"%s\" (expected CONFIG)", kw);
        return 0;
    }
    name = conf_token(&p);
    if (name == NULL) {
        conf_error(ctx->e, ctx->file, lineno, "missing key name after %s",
                   kw);
        return 0;
    }
    type = conf_token(&p);
    if (type == NULL) {
        conf_error(ctx->e, ctx->file, lineno, "%s: missing type", name);
        return 0;
    }
    for (int i = 0; i < (int)(sizeof(rec_type_names) / sizeof(rec_type_names[0])); i++)
        if (strcmp(type, rec_type_names[i]) == 0)
            t = i;
    if (t < 0) {
        conf_error(ctx->e, ctx->file, lineno, "%s: unknown type \"%s\" "
                   "(expected INT, STRING, FLOAT or COUNTER)", name, type);
        return 0;
    }
    value = conf_trim(p);

    d = rec_find(name);
    if (d == NULL) {
        rec_not_implemented(ps, name, type, value);
        return 0;
    }
    if ((enum rec_type)t != d->type) {
        conf_error(ctx->e, ctx->file, lineno, "%s: type must be %s, not %s",
                   name, rec_type_names[d->type], type);
        return 0;
    }
    if (*value == '\0') {
        conf_error(ctx->e, ctx->file, lineno, "%s: missing value", name);
        return 0;
    }
    idx = (size_t)(d - rec_table);
    if (ps->seen[idx] != 0)
        conf_warn(ctx->e, ctx->file, lineno,
                  "%s: set again (line %d's value is replaced)", name,
                  ps->seen[idx]);
    if (d->set(ps->r, d, value, ctx) == 0) {
        ps->seen[idx] = lineno;
        conf_note(ctx->e, CONF_NOTE_USED, ctx->file, lineno, "%s %s", name,
                  value);
    }
    return 0;
}

int
conf_records_parse(struct conf_records *r, const char *file, const char *dir,
                   struct conf_errors *e)
{
    struct rec_parse ps;
    int              n0 = e->n;

    memset(&ps, 0, sizeof(ps));
    ps.r = r;
    ps.ctx.file = file;
    ps.ctx.dir = dir;
    ps.ctx.e = e;
    if (conf_foreach_line(file, e, rec_line, &ps) < 0)
        return -1;
    if (ps.ninternal > 0)
        conf_warn(e, file, 0, "%d key%s only tune%s ATS internals and %s "
                  "ignored (the `cistern -t` report says why): %s",
                  ps.ninternal, ps.ninternal == 1 ? "" : "s",
                  ps.ninternal == 1 ? "s" : "",
                  ps.ninternal == 1 ? "is" : "are", ps.internal);
    free(ps.internal);
    return e->n == n0 ? 0 : -1;
}

/* The setters that store a malloc'd string in the row's field. */
static int
rec_owns_string(const struct rec_directive *d)
{
    return d->set == rec_set_string || d->set == rec_set_path
           || d->set == rec_set_log_level || d->set == rec_set_user
           || d->set == rec_set_policy || d->set == rec_set_ip_list
           || d->set == rec_set_acl_subjects || d->set == rec_set_port_list
           || d->set == rec_set_dns_servers;
}

void
conf_records_free(struct conf_records *r)
{
    for (size_t i = 0; i < REC_NKEYS; i++) {
        if (rec_owns_string(&rec_table[i])) {
            char **field = (char **)((char *)r + rec_table[i].off);

            free(*field);
            *field = NULL;
        }
    }
}

/* ---------------------------------------------------------------------
 * The key list (`cistern --list-keys`, README.md)
 */

/* A table cell: '|' would end it, so it is escaped. */
static void
rec_cell(FILE *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '|')
            fputc('\\', out);
        fputc(*s, out);
    }
}

/* Defaults that depend on the build's directories are shown as the
 * directory variable, so the list is the same for every build. */
static const char *
rec_shown_default(const struct rec_directive *d)
{
    if (strcmp(d->def, CST_LOGDIR) == 0)
        return "$(localstatedir)/log/cistern";
    if (strcmp(d->def, CST_RUNDIR) == 0)
        return "$(runstatedir)/cistern";
    return d->def;
}

void
conf_records_list_keys(FILE *out)
{
    size_t n;

    fprintf(out, "Implemented (%zu keys): Cistern does what the key asks.\n\n"
            "| key | type | default | meaning |\n|---|---|---|---|\n",
            REC_NKEYS);
    for (size_t i = 0; i < REC_NKEYS; i++) {
        const struct rec_directive *d = &rec_table[i];

        fprintf(out, "| `%s` | %s | `", d->name, rec_type_names[d->type]);
        rec_cell(out, rec_shown_default(d));
        fputs("` | ", out);
        rec_cell(out, d->desc);
        fputs(" |\n", out);
    }
    n = 0;
    for (size_t i = 0; i < conf_ats_nkeys; i++)
        n += conf_ats_keys[i].cls == CONF_ATS_MATCHES;
    fprintf(out, "\nMatches (%zu keys): accepted only with the values listed, "
            "which ask for what Cistern does; any other value is an error.\n\n"
            "| key | type | accepted | what Cistern does |\n"
            "|---|---|---|---|\n",
            n);
    for (size_t i = 0; i < conf_ats_nkeys; i++) {
        const struct conf_ats_key *k = &conf_ats_keys[i];

        if (k->cls != CONF_ATS_MATCHES)
            continue;
        fprintf(out, "| `%s` | %s | `", k->name, k->type);
        rec_cell(out, k->values);
        fputs("` | ", out);
        rec_cell(out, k->why);
        fputs(" |\n", out);
    }
    fprintf(out, "\nATS-internal (%zu keys or families): accepted whatever "
            "the value and ignored, named in one warning per file; none "
            "changes access, routing or caching.\n\n"
            "| key | why it is safe to ignore |\n|---|---|\n",
            conf_ats_nkeys - n);
    for (size_t i = 0; i < conf_ats_nkeys; i++) {
        const struct conf_ats_key *k = &conf_ats_keys[i];

        if (k->cls != CONF_ATS_INTERNAL)
            continue;
        fprintf(out, "| `%s` | ", k->name);
        rec_cell(out, k->why);
        fputs(" |\n", out);
    }
    fputs("\nAny other key is unknown: it draws a warning of its own and is "
          "ignored.\n", out);
}
