/*
 * conf/atskeys.c: the records.config keys of Apache Traffic Server that
 * Cistern does not implement, and what it does with each.
 *
 * The keys Cistern implements are rec_table in conf/records.c.  Every other
 * ATS key falls in one of three classes (README.md "Configuration", the
 * rule of issue 18: fail closed):
 *
 *   MATCHES   the key asks for something Cistern always does, when its value
 *             is one of `values` (ATS's default, and every value Debian 12's
 *             stock records.config sets).  Any other value asks for
 *             behaviour Cistern lacks: an error with file:line, saying what
 *             Cistern does instead (`why`).
 *   INTERNAL  the key tunes ATS's own machinery (threads, RAM cache, log
 *             rolling, diagnostics) and changes no access, routing or
 *             caching decision: accepted whatever its value, with one
 *             warning per file naming them all, `why` saying why ignoring it
 *             is safe.
 *   unknown   not in either table: one warning each (ATS has hundreds of
 *             keys; an unknown one is reported, not silently taken).
 *
 * A key that would restrict access, change routing or change what is
 * cached is never INTERNAL: it is implemented (rec_table) or MATCHES.
 *
 * A name ending in '*' is a prefix: "proxy.config.diags.*" covers every key
 * under proxy.config.diags.  An exact row wins over a prefix row.
 *
 * Defaults and meanings are ATS 9.2's (mgmt/RecordsConfig.cc and
 * doc/admin-guide/files/records.config.en.rst), which Debian 12 ships.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"


const struct conf_ats_key conf_ats_keys[] = {
    /* -------------------------------------------------------------------
     * MATCHES: accepted only with these values
     */
    { "proxy.config.reverse_proxy.enabled", "INT", CONF_ATS_MATCHES, "1",
      "Cistern is always a reverse proxy (remap.config decides what it serves)" },
    { "proxy.config.http.cache.cache_urls_that_look_dynamic", "INT",
      CONF_ATS_MATCHES, "1",
      "URLs with a query or ';' are cached like any other (the response's "
      "freshness decides)" },
    { "proxy.config.http.cache.post_method", "INT", CONF_ATS_MATCHES, "0",
      "responses to POST are never stored" },
    { "proxy.config.http.cache.range.lookup", "INT", CONF_ATS_MATCHES, "1",
      "Range requests are answered from stored objects" },
    { "proxy.config.http.cache.ignore_accept_mismatch", "INT",
      CONF_ATS_MATCHES, "2",
      "stored variants are told apart by Vary only: without Vary a stored "
      "response is served whatever the request's Accept says" },
    { "proxy.config.http.cache.ignore_accept_language_mismatch", "INT",
      CONF_ATS_MATCHES, "2",
      "stored variants are told apart by Vary only (Accept-Language counts "
      "only when Vary names it)" },
    { "proxy.config.http.cache.ignore_accept_encoding_mismatch", "INT",
      CONF_ATS_MATCHES, "2",
      "stored variants are told apart by Vary only (Accept-Encoding counts "
      "only when Vary names it, normalised by normalize_ae)" },
    { "proxy.config.http.cache.ignore_accept_charset_mismatch", "INT",
      CONF_ATS_MATCHES, "2",
      "stored variants are told apart by Vary only (Accept-Charset counts "
      "only when Vary names it)" },
    { "proxy.config.http.max_post_size", "INT", CONF_ATS_MATCHES, "0",
      "request bodies are not limited in size (they are streamed to the "
      "origin, never held whole)" },
    { "proxy.config.http.send_http11_requests", "INT", CONF_ATS_MATCHES, "1",
      "requests to origins are always HTTP/1.1" },
    { "proxy.config.http.keep_alive_enabled_in", "INT", CONF_ATS_MATCHES, "1",
      "client connections are kept alive (keep_alive_no_activity_timeout_in "
      "bounds the idle time)" },
    { "proxy.config.http.keep_alive_enabled_out", "INT", CONF_ATS_MATCHES, "1",
      "origin connections are reused (per_server.connection.max_idle 0 "
      "turns reuse off)" },
    { "proxy.config.http.per_server.connection.max", "INT", CONF_ATS_MATCHES,
      "0", "connections to one origin are not limited" },
    { "proxy.config.net.max_requests_in", "INT", CONF_ATS_MATCHES, "0",
      "active requests are not limited apart from "
      "proxy.config.net.connections_throttle" },
    { "proxy.config.ssl.client.verify.server.properties", "STRING",
      CONF_ATS_MATCHES, "ALL",
      "an origin's certificate is checked for both signature and name, as "
      "proxy.config.ssl.client.verify.server.policy says" },
    { "proxy.config.socks.socks_needed", "INT", CONF_ATS_MATCHES, "0",
      "SOCKS is not supported: Cistern connects to origins directly "
      "(socks.config is not read)" },
    { "proxy.config.dns.splitDNS.enabled", "INT", CONF_ATS_MATCHES, "0",
      "there is no split DNS: every origin name is resolved by the same "
      "nameservers (splitdns.config must be empty)" },
    { "proxy.config.dns.search_default_domains", "INT", CONF_ATS_MATCHES,
      "0", "origin names are resolved as written: no search domains" },
    { "proxy.config.http.no_dns_just_forward_to_parent", "INT",
      CONF_ATS_MATCHES, "0",
      "a request for a parent proxy is sent without resolving its origin, "
      "and uncacheable_requests_bypass_parent applies (ATS's 0)" },

    /* Access restrictions ATS has and Cistern does not: accepted with the
     * value that asks for none.  Unlisted, they were unknown keys, a
     * warning, and a client without a certificate was served where the
     * operator asked for one. */
    { "proxy.config.ssl.client.certification_level", "INT", CONF_ATS_MATCHES,
      "0", "client certificates are never asked for: every TLS client is "
      "served without one" },
    { "proxy.config.ssl.allow_client_renegotiation", "INT", CONF_ATS_MATCHES,
      "0", "clients may not renegotiate TLS" },
    { "proxy.config.ssl.hsts_max_age", "INT", CONF_ATS_MATCHES, "-1",
      "no Strict-Transport-Security field is added to responses" },
    { "proxy.config.ssl.hsts_include_subdomains", "INT", CONF_ATS_MATCHES,
      "0", "no Strict-Transport-Security field is added to responses" },
    { "proxy.config.ssl.client.verify.server", "INT", CONF_ATS_MATCHES, "0",
      "ATS 7's switch is not read: an origin's certificate is checked as "
      "proxy.config.ssl.client.verify.server.policy says" },
    { "proxy.config.ssl.client.TLSv1", "INT", CONF_ATS_MATCHES, "0",
      "origins are spoken to in TLS 1.2 and 1.3 only" },
    { "proxy.config.ssl.client.TLSv1_1", "INT", CONF_ATS_MATCHES, "0",
      "origins are spoken to in TLS 1.2 and 1.3 only" },
    { "proxy.config.ssl.client.TLSv1_2", "INT", CONF_ATS_MATCHES, "1",
      "origins are spoken to in TLS 1.2 and 1.3 only" },
    { "proxy.config.ssl.client.TLSv1_3", "INT", CONF_ATS_MATCHES, "1",
      "origins are spoken to in TLS 1.2 and 1.3 only" },
    { "proxy.config.ssl.client.cipher_suite", "STRING", CONF_ATS_MATCHES,
      "NULL", "origin TLS uses OpenSSL's default ciphers" },
    { "proxy.config.ssl.client.TLSv1_3.cipher_suites", "STRING",
      CONF_ATS_MATCHES, "NULL", "origin TLS uses OpenSSL's default ciphers" },
    { "proxy.config.ssl.server.groups_list", "STRING", CONF_ATS_MATCHES,
      "NULL", "TLS key exchange uses OpenSSL's default groups" },
    { "proxy.config.ssl.client.groups_list", "STRING", CONF_ATS_MATCHES,
      "NULL", "TLS key exchange uses OpenSSL's default groups" },
    { "proxy.config.http.host_sni_policy", "INT", CONF_ATS_MATCHES, "0|1|2",
      "sni.yaml's per-name policies are not read (sni.yaml must be empty), "
      "so there is none a Host field could bypass" },
    { "proxy.config.http.referer_filter", "INT", CONF_ATS_MATCHES, "0",
      "the Referer is not checked (map_with_referer is an error)" },
    { "proxy.config.http.strict_uri_parsing", "INT", CONF_ATS_MATCHES, "0|2",
      "a request-target with a control character or a space is refused "
      "(400); other characters RFC 3986 does not allow are passed on" },
    { "proxy.config.http.disallow_post_100_continue", "INT",
      CONF_ATS_MATCHES, "0", "a POST with Expect: 100-continue is taken" },
    { "proxy.config.http.websocket.max_number_of_connections", "INT",
      CONF_ATS_MATCHES, "-1", "WebSocket tunnels are not limited in number "
      "apart from proxy.config.net.connections_throttle" },
    { "proxy.config.http2.max_active_streams_in", "INT", CONF_ATS_MATCHES,
      "0", "HTTP/2 streams are limited per connection only "
      "(proxy.config.http2.max_concurrent_streams_in)" },
    { "proxy.config.http.anonymize_remove_from", "INT", CONF_ATS_MATCHES,
      "0", "the client's From field is passed to the origin" },
    { "proxy.config.http.anonymize_remove_referer", "INT", CONF_ATS_MATCHES,
      "0", "the client's Referer field is passed to the origin" },
    { "proxy.config.http.anonymize_remove_user_agent", "INT",
      CONF_ATS_MATCHES, "0",
      "the client's User-Agent field is passed to the origin" },
    { "proxy.config.http.anonymize_remove_cookie", "INT", CONF_ATS_MATCHES,
      "0", "the client's Cookie field is passed to the origin" },
    { "proxy.config.http.anonymize_remove_client_ip", "INT",
      CONF_ATS_MATCHES, "0", "the client's address fields are not removed "
      "(proxy.config.http.insert_client_ip and insert_squid_x_forwarded_for "
      "say what Cistern adds)" },
    { "proxy.config.http.anonymize_other_header_list", "STRING",
      CONF_ATS_MATCHES, "NULL",
      "no other client field is removed before the origin" },
    { "proxy.config.admin.api.restricted", "INT", CONF_ATS_MATCHES, "0",
      "`cistern ctl`'s socket is mode 0600: the user the master runs as, "
      "and root, may use every verb" },
    { "proxy.config.http.number_of_redirections", "INT", CONF_ATS_MATCHES,
      "0", "an origin's redirect is passed to the client, never followed" },
    { "proxy.config.http.forward_connect_method", "INT", CONF_ATS_MATCHES,
      "0", "CONNECT is tunnelled by Cistern itself, never forwarded" },
    { "proxy.config.http.use_client_target_addr", "INT", CONF_ATS_MATCHES,
      "0", "an origin's address comes from its name, never from the "
      "client's connection" },
    { "proxy.local.incoming_ip_to_bind", "STRING", CONF_ATS_MATCHES, "NULL",
      "listeners bind to every address unless proxy.config.http.server_ports "
      "names one (`ip-in=ADDR:PORT`)" },
    { "proxy.local.outgoing_ip_to_bind", "STRING", CONF_ATS_MATCHES, "NULL",
      "origin connections leave from the address the kernel picks" },
    { "proxy.config.hostdb.ip_resolve", "STRING", CONF_ATS_MATCHES,
      "ipv4;ipv6", "an origin's IPv4 addresses are tried first, then its "
      "IPv6 ones" },

    /* The files ATS reads, under other names: Cistern reads (or checks)
     * the files of the config directory under ATS's default names only. */
    { "proxy.config.url_remap.filename", "STRING", CONF_ATS_MATCHES,
      "remap.config", "Cistern reads remap.config in the config directory" },
    { "proxy.config.url_remap.strategies.filename", "STRING",
      CONF_ATS_MATCHES, "strategies.yaml",
      "Cistern checks strategies.yaml in the config directory (it must be "
      "empty)" },
    { "proxy.config.socks.socks_config_file", "STRING", CONF_ATS_MATCHES,
      "socks.config", "Cistern checks socks.config in the config directory" },
    { "proxy.config.cache.hosting_filename", "STRING", CONF_ATS_MATCHES,
      "hosting.config",
      "Cistern checks hosting.config in the config directory (it must be "
      "empty)" },
    { "proxy.config.cache.volume_filename", "STRING", CONF_ATS_MATCHES,
      "volume.config",
      "Cistern checks volume.config in the config directory (it must be "
      "empty)" },
    { "proxy.config.dns.splitdns.filename", "STRING", CONF_ATS_MATCHES,
      "splitdns.config",
      "Cistern checks splitdns.config in the config directory (it must be "
      "empty)" },
    { "proxy.config.ssl.servername.filename", "STRING", CONF_ATS_MATCHES,
      "sni.yaml",
      "Cistern checks sni.yaml in the config directory (it must be empty)" },
    { "proxy.config.log.config.filename", "STRING", CONF_ATS_MATCHES,
      "logging.yaml", "Cistern reads logging.yaml in the config directory" },
    /* The files holding access, caching and routing rules: another name
     * would leave the operator's rules unread (the built-in ip_allow lets
     * every address GET). */
    { "proxy.config.cache.ip_allow.filename", "STRING", CONF_ATS_MATCHES,
      "ip_allow.yaml|ip_allow.config",
      "Cistern reads ip_allow.yaml (or ip_allow.config) in the config "
      "directory" },
    { "proxy.config.cache.control.filename", "STRING", CONF_ATS_MATCHES,
      "cache.config", "Cistern reads cache.config in the config directory" },
    { "proxy.config.cache.storage_filename", "STRING", CONF_ATS_MATCHES,
      "storage.config", "Cistern reads storage.config in the config directory" },
    { "proxy.config.http.parent_proxy.file", "STRING", CONF_ATS_MATCHES,
      "parent.config",
      "Cistern checks parent.config in the config directory (it must be "
      "empty)" },

    /* -------------------------------------------------------------------
     * INTERNAL: ATS's own machinery, ignored (one warning per file)
     */
    /* Parent-proxy machinery Cistern has no counterpart of */
    { "proxy.config.http.parent_proxy.max_trans_retries", "INT", CONF_ATS_INTERNAL,
      NULL, "ATS limits concurrent probes of a parent; Cistern lets one "
      "request probe it per retry_time" },
    { "proxy.config.http.parent_proxy.disable_connect_tunneling", "INT",
      CONF_ATS_INTERNAL, NULL, "CONNECT is never sent to a parent: Cistern "
      "tunnels to the destination itself" },
    { "proxy.config.http.parent_proxy.consistent_hash_algorithm", "STRING",
      CONF_ATS_INTERNAL, NULL, "Cistern's consistent hash is its own "
      "(weighted rendezvous hashing): the same URL may have another owner "
      "than under ATS, each still one" },
    { "proxy.config.http.parent_proxy.consistent_hash_seed0", "INT",
      CONF_ATS_INTERNAL, NULL, "Cistern's consistent hash has no seed" },
    { "proxy.config.http.parent_proxy.consistent_hash_seed1", "INT",
      CONF_ATS_INTERNAL, NULL, "Cistern's consistent hash has no seed" },
    { "proxy.config.http.parent_proxy.consistent_hash_replicas", "INT",
      CONF_ATS_INTERNAL, NULL, "rendezvous hashing needs no ring points" },
    { "proxy.config.exec_thread.*", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's event threads; Cistern runs single-threaded worker processes "
      "(proxy.config.cistern.workers)" },
    { "proxy.config.accept_threads", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's accept threads; each Cistern worker accepts on its own" },
    { "proxy.config.task_threads", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's task threads; Cistern has none" },
    { "proxy.config.thread.*", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's thread stacks; Cistern's workers are processes" },
    { "proxy.config.cache.threads_per_disk", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's disk I/O threads; Cistern's store is memory-mapped" },
    { "proxy.config.cache.ram_cache.*", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's RAM cache; Cistern's hot objects stay in the kernel's page "
      "cache over its memory-mapped store" },
    { "proxy.config.cache.ram_cache_cutoff", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's RAM cache; Cistern's hot objects stay in the kernel's page "
      "cache over its memory-mapped store" },
    { "proxy.config.cache.min_average_object_size", "INT", CONF_ATS_INTERNAL,
      NULL, "sizes ATS's cache directory; Cistern's index grows as needed" },
    { "proxy.config.cache.limits.http.max_alts", "INT", CONF_ATS_INTERNAL,
      NULL,
      "a space bound: ATS evicts a URL's oldest variant beyond this many; "
      "Cistern keeps each variant until its eviction reaches it (every "
      "variant served is still the one Vary selects)" },
    { "proxy.config.cache.log.alternate.eviction", "INT", CONF_ATS_INTERNAL,
      NULL, "ATS's diagnostics for max_alts evictions" },
    { "proxy.config.cache.read_while_writer.max_retries", "INT",
      CONF_ATS_INTERNAL, NULL,
      "ATS's readers poll the writer; Cistern's joiners of a fill are woken "
      "by it (proxy.config.cache.enable_read_while_writer)" },
    { "proxy.config.cache.read_while_writer_retry.delay", "INT",
      CONF_ATS_INTERNAL, NULL,
      "ATS's readers poll the writer; Cistern's joiners of a fill are woken "
      "by it (proxy.config.cache.enable_read_while_writer)" },
    { "proxy.config.http.cache.max_open_read_retries", "INT",
      CONF_ATS_INTERNAL, NULL,
      "ATS's cache lock retries; Cistern collapses concurrent misses "
      "(proxy.config.cistern.collapse_timeout)" },
    { "proxy.config.http.cache.open_read_retry_time", "INT",
      CONF_ATS_INTERNAL, NULL,
      "ATS's cache lock retries; Cistern collapses concurrent misses "
      "(proxy.config.cistern.collapse_timeout)" },
    { "proxy.config.http.cache.max_open_write_retries", "INT",
      CONF_ATS_INTERNAL, NULL,
      "ATS's cache lock retries; Cistern collapses concurrent misses "
      "(proxy.config.cistern.collapse_timeout)" },
    { "proxy.config.log.rolling_*", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's log rolling; Cistern's logs are rotated by logrotate and "
      "`cistern -s reopen`" },
    { "proxy.config.log.max_space_mb_*", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's log space management; Cistern's logs are rotated by logrotate" },
    { "proxy.config.log.auto_delete_rolled_files", "INT", CONF_ATS_INTERNAL,
      NULL, "ATS's log space management; Cistern's logs are rotated by "
      "logrotate" },
    { "proxy.config.log.periodic_tasks_interval", "INT", CONF_ATS_INTERNAL,
      NULL, "ATS's log housekeeping timer" },
    { "proxy.config.log.max_secs_per_buffer", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's log buffering" },
    { "proxy.config.log.log_buffer_size", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's log buffering" },
    { "proxy.config.log.max_line_size", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's log buffering" },
    { "proxy.config.diags.*", "STRING", CONF_ATS_INTERNAL, NULL,
      "ATS's diagnostics; Cistern's error log level is "
      "proxy.config.cistern.log_level" },
    { "proxy.config.http.slow.log.threshold", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's slow-transaction diagnostics" },
    { "proxy.config.res_track_memory", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's memory diagnostics" },
    { "proxy.config.dump_mem_info_frequency", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's memory diagnostics" },
    { "proxy.config.allocator.*", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's memory allocator" },
    { "proxy.config.net.sock_*", "INT", CONF_ATS_INTERNAL, NULL,
      "socket buffer and option tuning; Cistern uses the kernel's defaults "
      "and sets TCP_NODELAY itself" },
    { "proxy.config.net.default_inactivity_timeout", "INT",
      CONF_ATS_INTERNAL, NULL,
      "ATS's fallback for connections without a timeout; every Cistern "
      "connection state has one (keep_alive_, transaction_ and accept_ "
      "timeouts)" },
    { "proxy.config.net.max_connections_in", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS trims idle keep-alive connections at this total; Cistern's "
      "connection cap is proxy.config.net.connections_throttle (per worker)" },
    { "proxy.config.http.post_connect_attempts_timeout", "INT",
      CONF_ATS_INTERNAL, NULL,
      "a connect timeout for POST and PUT; Cistern connects for every "
      "method within proxy.config.http.connect_attempts_timeout" },
    { "proxy.config.body_factory.*", "INT", CONF_ATS_INTERNAL, NULL,
      "ATS's error page templates; Cistern's error responses carry their "
      "own short bodies (body_factory/ is not read)" },
};

const size_t conf_ats_nkeys = sizeof(conf_ats_keys) / sizeof(conf_ats_keys[0]);

static int
ats_name_matches(const char *pattern, const char *name, int *prefix)
{
    size_t n = strlen(pattern);

    if (n > 0 && pattern[n - 1] == '*') {
        *prefix = 1;
        return strncmp(pattern, name, n - 1) == 0 && name[n - 1] != '\0';
    }
    *prefix = 0;
    return strcmp(pattern, name) == 0;
}

const struct conf_ats_key *
conf_ats_key_find(const char *name)
{
    const struct conf_ats_key *best = NULL;
    size_t bestlen = 0;

    for (size_t i = 0; i < conf_ats_nkeys; i++) {
        int prefix;

        if (!ats_name_matches(conf_ats_keys[i].name, name, &prefix))
            continue;
        if (!prefix)
            return &conf_ats_keys[i];
        if (strlen(conf_ats_keys[i].name) > bestlen) {
            best = &conf_ats_keys[i];
            bestlen = strlen(best->name);
        }
    }
    return best;
}

/* One value against one accepted value: numbers as numbers ("0.10" is
 * "0.1", "01" is "1"), ATS's words without regard to case, file names
 * exactly. */
static int
ats_value_equal(const char *type, const char *want, size_t wlen,
                const char *value)
{
    char  buf[64];
    char *end;

    if (wlen >= sizeof(buf))
        return 0;
    memcpy(buf, want, wlen);
    buf[wlen] = '\0';
    if (strcmp(type, "INT") == 0) {
        long long a, b;

        errno = 0;
        b = strtoll(value, &end, 10);
        if (end == value || *end != '\0' || errno != 0)
            return 0;
        a = strtoll(buf, NULL, 10);
        return a == b;
    }
    if (strcmp(type, "FLOAT") == 0) {
        double a, b;

        errno = 0;
        b = strtod(value, &end);
        if (end == value || *end != '\0' || errno != 0)
            return 0;
        a = strtod(buf, NULL);
        return a - b < 1e-9 && b - a < 1e-9;
    }
    /* ATS's upper-case words ("ALL") are read without regard to case;
     * file names are not */
    for (const char *q = buf; *q != '\0'; q++)
        if (!isupper((unsigned char)*q) && *q != '_')
            return strcmp(buf, value) == 0;
    return strcasecmp(buf, value) == 0;
}

int
conf_ats_value_matches(const struct conf_ats_key *k, const char *value)
{
    const char *p = k->values, *bar;

    if (p == NULL)
        return 1;
    for (;;) {
        bar = strchr(p, '|');
        if (ats_value_equal(k->type, p, bar ? (size_t)(bar - p) : strlen(p),
                            value))
            return 1;
        if (bar == NULL)
            return 0;
        p = bar + 1;
    }
}
