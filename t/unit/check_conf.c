/*
 * t/unit/check_conf.c: unit tests for conf/ (every parser, matching, the
 * built-in defaults and conf_load()).
 *
 * Each test gets a fresh mkdtemp() directory under /tmp (the source tree
 * may be read-only) and writes its config files there; the fixture removes
 * it afterwards.  Error messages are asserted in full, because "file:line:
 * message" is a promise made to operators.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <check.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "conf/yaml.h"

static char               tmpdir[64];
static struct conf_errors errs;

static void
setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/check_conf.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    memset(&errs, 0, sizeof(errs));
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
teardown(void)
{
    conf_errors_free(&errs);
    nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Write tmpdir/name; returns the full path (static buffer, next call
 * overwrites it). */
static const char *
put(const char *name, const char *text)
{
    static char path[512];
    FILE       *fp;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
    return path;
}

/* Assert that errs holds exactly the message "tmpdir/<fmt...>" and that
 * it has the given kind (error or warning). */
static void check_msg(int warn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
check_msg(int warn, const char *fmt, ...)
{
    char   *tail, *want;
    va_list ap;

    va_start(ap, fmt);
    ck_assert_int_ge(vasprintf(&tail, fmt, ap), 0);
    va_end(ap);
    ck_assert_int_ge(asprintf(&want, "%s/%s", tmpdir, tail), 0);
    free(tail);
    for (int i = 0; i < errs.nstored; i++) {
        if (strcmp(errs.msgs[i], want) == 0) {
            ck_assert_int_eq(errs.is_warn[i], warn);
            free(want);
            return;
        }
    }
    for (int i = 0; i < errs.nstored; i++)
        fprintf(stderr, "  have: %s\n", errs.msgs[i]);
    ck_abort_msg("missing message: %s", want);
}

#define check_error(...) check_msg(0, __VA_ARGS__)
#define check_warning(...) check_msg(1, __VA_ARGS__)

/* ---------------------------------------------------------------------
 * Shared helpers: errors, sizes, paths
 */
START_TEST(test_errors_format)
{
    conf_error(&errs, "f", 3, "bad %s", "x");
    conf_error(&errs, "f", 0, "no line");
    conf_warn(&errs, NULL, 7, "bare");
    ck_assert_int_eq(errs.n, 2);
    ck_assert_int_eq(errs.nwarn, 1);
    ck_assert_str_eq(errs.msgs[0], "f:3: bad x");
    ck_assert_str_eq(errs.msgs[1], "f: no line");
    ck_assert_str_eq(errs.msgs[2], "bare");
    ck_assert_int_eq(errs.is_warn[2], 1);
    for (int i = 0; i < CONF_MAX_ERRORS + 10; i++)
        conf_error(&errs, "f", i + 1, "e");
    ck_assert_int_eq(errs.n, CONF_MAX_ERRORS + 12);
    ck_assert_int_eq(errs.nstored, CONF_MAX_ERRORS);
}
END_TEST

START_TEST(test_parse_size)
{
    int64_t v;

    ck_assert_int_eq(conf_parse_size("0", &v), 0);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(conf_parse_size("123", &v), 0);
    ck_assert_int_eq(v, 123);
    ck_assert_int_eq(conf_parse_size("4K", &v), 0);
    ck_assert_int_eq(v, 4096);
    ck_assert_int_eq(conf_parse_size("64M", &v), 0);
    ck_assert_int_eq(v, 64LL << 20);
    ck_assert_int_eq(conf_parse_size("2g", &v), 0);
    ck_assert_int_eq(v, 2LL << 30);
    ck_assert_int_eq(conf_parse_size("3T", &v), 0);
    ck_assert_int_eq(v, 3LL << 40);
    ck_assert_int_eq(conf_parse_size("", &v), -1);
    ck_assert_int_eq(conf_parse_size("M", &v), -1);
    ck_assert_int_eq(conf_parse_size("-1", &v), -1);
    ck_assert_int_eq(conf_parse_size("1X", &v), -1);
    ck_assert_int_eq(conf_parse_size("1MB", &v), -1);
    ck_assert_int_eq(conf_parse_size(" 1", &v), -1);
    ck_assert_int_eq(conf_parse_size("99999999999999999999", &v), -1);
    ck_assert_int_eq(conf_parse_size("9999999999T", &v), -1);
}
END_TEST

START_TEST(test_path)
{
    char *p;

    p = conf_path("/etc/cistern", "/var/log");
    ck_assert_str_eq(p, "/var/log");
    free(p);
    p = conf_path("/etc/cistern", "logs");
    ck_assert_str_eq(p, "/etc/cistern/logs");
    free(p);
    p = conf_path("/etc/cistern/", "./logs/x");
    ck_assert_str_eq(p, "/etc/cistern/logs/x");
    free(p);
    p = conf_path("/", "logs");
    ck_assert_str_eq(p, "/logs");
    free(p);
    p = conf_path("/etc/cistern", ".");
    ck_assert_str_eq(p, "/etc/cistern");
    free(p);
}
END_TEST

/* ---------------------------------------------------------------------
 * records.config
 */
static struct conf_records rec;

static int
records(const char *text)
{
    const char *f = put("records.config", text);

    conf_records_defaults(&rec);
    return conf_records_parse(&rec, f, tmpdir, &errs);
}

START_TEST(test_records_defaults)
{
    conf_records_defaults(&rec);
    ck_assert_int_eq(rec.nports, 1);
    ck_assert_int_eq(rec.ports[0].port, 8080);
    ck_assert_int_eq(rec.ports[0].ssl, 0);
    ck_assert_int_eq(rec.workers, 0);
    ck_assert_int_eq(rec.remap_required, 1);
    ck_assert_int_eq(rec.pristine_host_hdr, 0);
    ck_assert_int_eq(rec.push_method_enabled, 0);
    ck_assert_int_eq(rec.required_headers, 1);
    ck_assert_int_eq(rec.ka_no_activity_in, 120);
    ck_assert_int_eq(rec.ka_no_activity_out, 120);
    ck_assert_int_eq(rec.txn_no_activity_in, 30);
    ck_assert_int_eq(rec.txn_no_activity_out, 30);
    ck_assert_int_eq(rec.connect_timeout, 30);
    ck_assert_int_eq(rec.request_header_timeout, 10);
    ck_assert_int_eq(rec.request_header_max_size, 131072);
    ck_assert_int_eq(rec.request_line_max_size, 65535);
    ck_assert_int_eq(rec.response_header_max_size, 131072);
    ck_assert_int_eq(rec.shutdown_timeout, 30);
    ck_assert_int_eq(rec.origin_max_idle, 64);
    ck_assert_int_eq(rec.connections_throttle, 30000);
    ck_assert_int_eq(rec.max_doc_size, 0);
    ck_assert_int_eq(rec.debug_headers, 0);
    ck_assert_str_eq(rec.proxy_name, "cistern");
    ck_assert_str_eq(rec.error_log_level, "info");
    ck_assert_ptr_nonnull(rec.logfile_dir);
    ck_assert_int_eq(rec.logfile_dir[0], '/');
    ck_assert_ptr_nonnull(rec.run_dir);
    ck_assert_int_eq(rec.run_dir[0], '/');
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_good)
{
    int rc = records(
        "# a comment\n"
        "\n"
        "   CONFIG proxy.config.http.server_ports STRING 8080 8443:ssl  0 "
        "9000:ipv6:ssl 9001:ipv4   \n"
        "CONFIG proxy.config.cistern.workers INT 4\n"
        "LOCAL proxy.config.url_remap.remap_required INT 0\n"
        "\tCONFIG proxy.config.http.push_method_enabled INT 1\n"
        "CONFIG proxy.config.cache.max_doc_size INT 0\n"
        "CONFIG proxy.config.http.request_header_max_size INT 64K\n"
        "CONFIG proxy.config.proxy_name STRING my proxy  \n"
        "CONFIG proxy.config.log.logfile_dir STRING logs\n"
        "CONFIG proxy.config.cistern.run_dir STRING /run/x\n"
        "CONFIG proxy.config.cistern.log_level STRING DEBUG\r\n");
    char *want;

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 0);
    ck_assert_int_eq(rec.nports, 5);
    ck_assert_int_eq(rec.ports[0].port, 8080);
    ck_assert_int_eq(rec.ports[1].port, 8443);
    ck_assert_int_eq(rec.ports[1].ssl, 1);
    ck_assert_int_eq(rec.ports[2].port, 0);
    ck_assert_int_eq(rec.ports[3].port, 9000);
    ck_assert_int_eq(rec.ports[3].ipv6, 1);
    ck_assert_int_eq(rec.ports[3].ssl, 1);
    ck_assert_int_eq(rec.ports[4].ipv6, 0);
    ck_assert_int_eq(rec.workers, 4);
    ck_assert_int_eq(rec.remap_required, 0);
    ck_assert_int_eq(rec.push_method_enabled, 1);
    ck_assert_int_eq(rec.max_doc_size, 0);
    ck_assert_int_eq(rec.request_header_max_size, 65536);
    ck_assert_str_eq(rec.proxy_name, "my proxy");
    ck_assert_int_ge(asprintf(&want, "%s/logs", tmpdir), 0);
    ck_assert_str_eq(rec.logfile_dir, want);
    free(want);
    ck_assert_str_eq(rec.run_dir, "/run/x");
    ck_assert_str_eq(rec.error_log_level, "debug");
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_unknown_key_warns)
{
    int rc = records("CONFIG proxy.config.cistern.no_such_key INT 1\n"
                     "CONFIG proxy.config.cistern.workers INT 2\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 1);
    check_warning("records.config:1: unknown key "
                  "\"proxy.config.cistern.no_such_key\" ignored");
    ck_assert_int_eq(rec.workers, 2);
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_duplicate_warns)
{
    int rc = records("CONFIG proxy.config.cistern.workers INT 2\n"
                     "# x\n"
                     "CONFIG proxy.config.cistern.workers INT 3\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.nwarn, 1);
    check_warning("records.config:3: proxy.config.cistern.workers: set again "
                  "(line 1's value is replaced)");
    ck_assert_int_eq(rec.workers, 3);
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_errors)
{
    int rc = records(
        "CONFIG proxy.config.cistern.workers INT abc\n"                /* 1 */
        "CONFIG proxy.config.cistern.workers INT 300\n"                /* 2 */
        "CONFIG proxy.config.cistern.workers STRING 3\n"               /* 3 */
        "CONFIG proxy.config.cistern.workers INT\n"                    /* 4 */
        "CONFIF proxy.config.cistern.workers INT 3\n"                  /* 5 */
        "CONFIG proxy.config.cistern.workers BOOL 3\n"                 /* 6 */
        "CONFIG proxy.config.cistern.workers\n"                        /* 7 */
        "CONFIG\n"                                                     /* 8 */
        "CONFIG proxy.config.url_remap.remap_required INT 2\n"         /* 9 */
        "CONFIG proxy.config.http.server_ports STRING 80x\n"           /* 10 */
        "CONFIG proxy.config.http.server_ports STRING 70000\n"         /* 11 */
        "CONFIG proxy.config.http.server_ports STRING 80:tls\n"        /* 12 */
        "CONFIG proxy.config.http.server_ports STRING 80 80\n"         /* 13 */
        "CONFIG proxy.config.cistern.log_level STRING loud\n"          /* 14 */
        "CONFIG proxy.config.http.request_header_max_size INT 512\n"   /* 15 */
        "CONFIG proxy.config.cache.max_doc_size INT 64X\n"             /* 16 */
        "CONFIG proxy.config.cistern.workers INT 4K\n"                 /* 17 */
        "CONFIG proxy.config.cistern.workers INT -1\n"                 /* 18 */
        "CONFIG proxy.config.http.server_ports STRING :ssl\n"          /* 19 */
        "CONFIG proxy.config.http.server_ports STRING 1:ipv4:ipv6\n"   /* 20 */
        "CONFIG proxy.config.cistern.workers INT 99999999999999999999\n" /* 21 */
        "CONFIG proxy.config.cistern.workers INT 1 2\n");              /* 22 */
    const char *w = "proxy.config.cistern.workers";

    ck_assert_int_eq(rc, -1);
    check_error("records.config:1: %s: \"abc\" is not an integer", w);
    check_error("records.config:2: %s: 300 is out of range (0..256)", w);
    check_error("records.config:3: %s: type must be INT, not STRING", w);
    check_error("records.config:4: %s: missing value", w);
    check_error("records.config:5: unknown keyword \"CONFIF\" "
                "(expected CONFIG)");
    check_error("records.config:6: %s: unknown type \"BOOL\" (expected INT, "
                "STRING, FLOAT or COUNTER)", w);
    check_error("records.config:7: %s: missing type", w);
    check_error("records.config:8: missing key name after CONFIG");
    check_error("records.config:9: proxy.config.url_remap.remap_required: "
                "2 is out of range (0..1)");
    check_error("records.config:10: proxy.config.http.server_ports: \"80x\": "
                "\"80x\" is not a port number");
    check_error("records.config:11: proxy.config.http.server_ports: port "
                "70000 is out of range (0..65535)");
    check_error("records.config:12: proxy.config.http.server_ports: "
                "\"80:tls\": unknown port option \"tls\"");
    check_error("records.config:13: proxy.config.http.server_ports: \"80\": "
                "port 80 (IPv4) is listed twice");
    check_error("records.config:14: proxy.config.cistern.log_level: unknown "
                "log level \"loud\" (expected debug, info, notice, warn, "
                "error or crit)");
    check_error("records.config:15: proxy.config.http.request_header_max_size"
                ": 512 is out of range (1024..16777216)");
    check_error("records.config:16: proxy.config.cache.max_doc_size: \"64X\" "
                "is not a size (bytes, or a number with a K, M, G or T "
                "suffix)");
    check_error("records.config:17: %s: \"4K\" is not an integer", w);
    check_error("records.config:18: %s: -1 is out of range (0..256)", w);
    check_error("records.config:19: proxy.config.http.server_ports: \":ssl\" "
                "has no port number (expected e.g. 8080, 8080:ipv6, 443:ssl, "
                "ip-in=127.0.0.1:8080)");
    check_error("records.config:20: proxy.config.http.server_ports: "
                "\"1:ipv4:ipv6\": ipv4 and ipv6 conflict");
    check_error("records.config:21: %s: 99999999999999999999 is out of range "
                "(0..256)", w);
    check_error("records.config:22: %s: \"1 2\" is not an integer", w);
    ck_assert_int_eq(errs.n, 22);
    /* Failed settings leave the defaults alone. */
    ck_assert_int_eq(rec.workers, 0);
    ck_assert_int_eq(rec.nports, 1);
    ck_assert_int_eq(rec.ports[0].port, 8080);
    ck_assert_str_eq(rec.error_log_level, "info");
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_sizes)
{
    int rc = records("CONFIG proxy.config.cache.max_doc_size INT 1G\n"
                     "CONFIG proxy.config.http.response_header_max_size INT 1M\n"
                     "CONFIG proxy.config.http.request_line_max_size INT 256\n"
                     "CONFIG proxy.config.http.request_header_max_size INT 16M\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rec.max_doc_size, 1LL << 30);
    ck_assert_int_eq(rec.response_header_max_size, 1 << 20);
    ck_assert_int_eq(rec.request_line_max_size, 256);
    ck_assert_int_eq(rec.request_header_max_size, 16 << 20);
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_missing_file)
{
    char *f;

    conf_records_defaults(&rec);
    ck_assert_int_ge(asprintf(&f, "%s/nope.config", tmpdir), 0);
    ck_assert_int_eq(conf_records_parse(&rec, f, tmpdir, &errs), -1);
    check_error("nope.config: cannot open: No such file or directory");
    free(f);
    conf_records_free(&rec);
}
END_TEST

/* issue 18, header and origin-retry keys: ATS 9's defaults, the
 * insert_forwarded list, and the values refused. */
START_TEST(test_records_header_keys)
{
    conf_records_defaults(&rec);
    ck_assert_int_eq(rec.insert_client_ip, 1);
    ck_assert_int_eq(rec.insert_xff, 1);
    ck_assert_int_eq(rec.insert_forwarded, 0);
    ck_assert_int_eq(rec.via_req_level, 1);
    ck_assert_int_eq(rec.via_resp_level, 0);
    ck_assert_int_eq(rec.server_enabled, 1);
    ck_assert_str_eq(rec.server_str, "cistern");
    ck_assert_int_eq(rec.connect_retries, 3);
    ck_assert_int_eq(rec.connect_retries_dead, 1);
    ck_assert_int_eq(rec.down_server_time, 60);
    conf_records_free(&rec);

    ck_assert_int_eq(records(
        "CONFIG proxy.config.http.insert_forwarded STRING for| By=ServerName :proto\n"
        "CONFIG proxy.config.http.connect_attempts_max_retries_down_server INT 0\n"), 0);
    ck_assert_int_eq(rec.insert_forwarded, CONF_FWD_FOR | CONF_FWD_BY_NAME | CONF_FWD_PROTO);
    ck_assert_int_eq(rec.connect_retries_dead, 0);
    conf_records_free(&rec);
    ck_assert_int_eq(records("CONFIG proxy.config.http.insert_forwarded STRING None\n"), 0);
    ck_assert_int_eq(rec.insert_forwarded, 0);
    conf_records_free(&rec);

    ck_assert_int_eq(records(
        "CONFIG proxy.config.http.insert_forwarded STRING for|by=uuid\n"
        "CONFIG proxy.config.http.insert_forwarded STRING nonsense\n"
        "CONFIG proxy.config.http.insert_request_via_str INT 4\n"
        "CONFIG proxy.config.http.response_server_enabled INT 3\n"), -1);
    check_error("records.config:1: proxy.config.http.insert_forwarded: \"by=uuid\" is "
                "not supported (no node UUID, local address or protocol tags are kept)");
    check_error("records.config:2: proxy.config.http.insert_forwarded: \"nonsense\" is "
                "not a Forwarded parameter (for, by=unknown, by=servername, proto, host, "
                "connection=compact, connection=std)");
    check_error("records.config:3: proxy.config.http.insert_request_via_str: 4 (protocol "
                "tags in Via) is not supported; levels 0-3 are");
    check_error("records.config:4: proxy.config.http.response_server_enabled: 3 is out "
                "of range (0..2)");
    conf_records_free(&rec);
}
END_TEST

/* ---------------------------------------------------------------------
 * remap.config
 */
static struct conf_remap rm;

static int
remap(const char *text)
{
    const char *f = put("remap.config", text);

    memset(&rm, 0, sizeof(rm));
    return conf_remap_parse(&rm, f, tmpdir, &errs);
}

/* conf_remap_find() on "scheme://host:port" + path; returns the result as
 * "scheme://host:port/path" or "-" when nothing matches. */
static const char *
find(const char *scheme, const char *host, int port, const char *path)
{
    static char                     out[9000];
    static struct conf_remap_result res;

    if (conf_remap_find(&rm, scheme, host, strlen(host), port, path,
                        strlen(path), &res) == NULL)
        return "-";
    ck_assert_ptr_nonnull(res.rule);
    ck_assert_uint_eq(res.pathlen, strlen(res.path));
    snprintf(out, sizeof(out), "%s://%s:%d%s", res.scheme, res.host,
             res.port, res.path);
    return out;
}

/* ATS's @options that Cistern does not implement (plugins, strategies,
 * volumes...) are errors: ignored, they would load a rule that runs a
 * plugin (an auth check) as one that does not.  So are unknown ones. */
START_TEST(test_remap_options_fail_closed)
{
    int rc = remap(
        "map http://a/ http://o/ @action=deny @src_ip=10.0.0.0-10.255.255.255\n"
        "map http://b/ http://o/ @method=GET @frobnicate=1\n"
        "map http://c/ http://o/ @plugin=auth.so @pparam=x\n"
        "map http://d/ http://o/\n"
        "map http://e/ http://o/ @strategy=s1\n"
        "map http://f/ http://o/ @action=maybe\n"
        "map http://g/ http://o/ @action=deny @action=allow\n"
        "map http://h/ http://o/ @src_ip=10.0.0.300\n"
        "map http://i/ http://o/ @src_ip=\n"
        "map http://j/ http://o/ @src_ip=1.2.3.4,5.6.7.8\n"
        "map_with_referer http://k/ http://o/ http://r/ .*\\.k\n"
        "reverse_map http://o/ http://l/ @action=deny\n"
        "map http://m/ http://o/ @internal=1\n"
        "map http://n/ http://o/ @pparam=x\n");

    ck_assert_int_eq(rc, -1);
    check_error("remap.config:2: unknown option \"@frobnicate=1\"");
    check_error("remap.config:5: @strategy=s1: next-hop strategies (strategies.yaml) "
                "are not supported; this rule would go to its origin directly");
    check_error("remap.config:6: unknown action in \"@action=maybe\" (expected allow, "
                "deny, add_allow, add_deny, set_allow or set_deny)");
    check_error("remap.config:7: only one @action= per filter (\"@action=allow\")");
    check_error("remap.config:8: \"@src_ip=10.0.0.300\": bad address");
    check_error("remap.config:9: empty value in \"@src_ip=\"");
    check_error("remap.config:10: \"@src_ip=1.2.3.4,5.6.7.8\": one address or range "
                "per option (repeat the option)");
    check_error("remap.config:11: map_with_referer: the Referer check (deep-linking "
                "protection) is not supported");
    check_error("remap.config:12: reverse_map: @action=deny: a reverse_map rule never "
                "matches a request, so a filter on it would restrict nothing");
    check_error("remap.config:13: unknown option \"@internal=1\"");
    check_error("remap.config:14: @pparam=x: @pparam= before any @plugin= (a "
                "parameter belongs to the @plugin= before it)");
    /* lines 1, 3 (a plugin: loaded by conf_load, not here) and 4 are fine */
    ck_assert_int_eq(errs.n, 11);
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_parse_urls)
{
    int rc = remap(
        "# comment\n"
        "map HTTP://WWW.Example.COM http://origin:8080/base/\n"
        "map https://[::1]:8443/x http://[2001:db8::1]/y\n"
        "reverse_map http://origin:8080/ http://www.example.com/\n"
        "  redirect http://old/ https://new/  # trailing comment\n");
    const struct conf_remap_rule *r;

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 0);
    ck_assert_int_eq(rm.nrules, 4);
    r = &rm.rules[0];
    ck_assert_int_eq(r->type, CONF_REMAP_MAP);
    ck_assert_str_eq(r->from.scheme, "http");
    ck_assert_str_eq(r->from.host, "www.example.com");
    ck_assert_int_eq(r->from.port, 80);
    ck_assert_int_eq(r->from.port_explicit, 0);
    ck_assert_str_eq(r->from.path, "/");
    ck_assert_int_eq(r->to.port, 8080);
    ck_assert_int_eq(r->to.port_explicit, 1);
    ck_assert_str_eq(r->to.path, "/base/");
    ck_assert_int_eq(r->line, 2);
    ck_assert_str_eq(r->file, rm.files[0]);
    r = &rm.rules[1];
    ck_assert_str_eq(r->from.scheme, "https");
    ck_assert_str_eq(r->from.host, "[::1]");
    ck_assert_int_eq(r->from.port, 8443);
    ck_assert_str_eq(r->from.path, "/x");
    ck_assert_str_eq(r->to.host, "[2001:db8::1]");
    ck_assert_int_eq(r->to.port, 80);
    ck_assert_int_eq(rm.rules[2].type, CONF_REMAP_REVERSE_MAP);
    ck_assert_int_eq(rm.rules[3].type, CONF_REMAP_REDIRECT);
    ck_assert_int_eq(rm.rules[3].to.port, 443);
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_errors)
{
    int rc = remap(
        "mpa http://a/ http://b/\n"                         /* 1 */
        "map http://a/\n"                                   /* 2 */
        "map http://a/ http://b/ http://c/\n"               /* 3 */
        "map ftp://a/ http://b/\n"                          /* 4 */
        "map http:///x http://b/\n"                         /* 5 */
        "map http://a:/ http://b/\n"                        /* 6 */
        "map http://a:99999/ http://b/\n"                   /* 7 */
        "map http://a:8x/ http://b/\n"                      /* 8 */
        "map a.example.com http://b/\n"                     /* 9 */
        "regex_map http://(a/ http://b/\n"                  /* 10 */
        "map http://[::1/ http://b/\n"                      /* 11 */
        "map http://[zz]/ http://b/\n"                      /* 12 */
        "redirect\n"                                        /* 13 */
        "map http://a:0/ http://b/\n"                       /* 14 */
        "map http://a/ http://b c/\n");                     /* 15 */

    ck_assert_int_eq(rc, -1);
    check_error("remap.config:1: unknown directive \"mpa\"");
    check_error("remap.config:2: map: too few fields (expected map FROM TO)");
    check_error("remap.config:3: map: too many fields (unexpected "
                "\"http://c/\")");
    check_error("remap.config:4: unsupported scheme \"ftp\" in \"ftp://a/\" "
                "(expected http or https)");
    check_error("remap.config:5: missing host in \"http:///x\"");
    check_error("remap.config:6: missing port number in \"http://a:/\"");
    check_error("remap.config:7: port 99999 is out of range (1..65535) in "
                "\"http://a:99999/\"");
    check_error("remap.config:8: bad port \"8x\" in \"http://a:8x/\"");
    check_error("remap.config:9: \"a.example.com\" is not a URL (expected "
                "scheme://host/path)");
    /* regerror() wording belongs to the C library; check the start. */
    {
        char *want;
        int   found = 0;

        ck_assert_int_ge(asprintf(&want, "%s/remap.config:10: regex_map: "
                                  "invalid regular expression \"(a\": ",
                                  tmpdir), 0);
        for (int i = 0; i < errs.nstored; i++)
            if (strncmp(errs.msgs[i], want, strlen(want)) == 0)
                found = 1;
        free(want);
        ck_assert(found);
    }
    check_error("remap.config:11: unterminated IPv6 address in "
                "\"http://[::1/\"");
    check_error("remap.config:12: bad IPv6 address \"[zz]\" in "
                "\"http://[zz]/\"");
    check_error("remap.config:13: redirect: too few fields (expected "
                "redirect FROM TO)");
    check_error("remap.config:14: port 0 is out of range (1..65535) in "
                "\"http://a:0/\"");
    check_error("remap.config:15: map: too many fields (unexpected \"c/\")");
    ck_assert_int_eq(errs.n, 15);
    ck_assert_int_eq(rm.nrules, 0);
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_precedence)
{
    int rc = remap(
        "redirect http://a.com/ http://moved.com/\n"
        "map http://a.com/ http://first/\n"
        "map http://a.com/ http://second/\n"
        "redirect_temporary http://b.com/ http://tmp.com/\n"
        "redirect http://b.com/ http://never/\n"
        "reverse_map http://c.com/ http://rev/\n");
    struct conf_remap_result res;

    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(find("http", "a.com", 80, "/x"), "http://first:80/x");
    ck_assert_str_eq(find("http", "b.com", 80, "/x"), "http://tmp.com:80/x");
    ck_assert_ptr_eq(conf_remap_find(&rm, "http", "b.com", 5, 80, "/", 1,
                                     &res), &rm.rules[3]);
    ck_assert_int_eq(res.rule->type, CONF_REMAP_REDIRECT_TEMPORARY);
    /* reverse_map never matches requests. */
    ck_assert_str_eq(find("http", "c.com", 80, "/"), "-");
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_ports_and_hosts)
{
    int rc = remap(
        "map http://a.com/ http://o1/\n"
        "map http://a.com:8080/ http://o2/\n"
        "map https://a.com/ https://o3:8443/\n"
        "map http://b.com:80/ http://o4/\n"
        "map http://[::1]:81/ http://[::2]/\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(find("http", "A.COM", 80, "/"), "http://o1:80/");
    ck_assert_str_eq(find("HTTP", "a.com", 80, "/"), "http://o1:80/");
    ck_assert_str_eq(find("http", "a.com", 8080, "/"), "http://o2:80/");
    ck_assert_str_eq(find("https", "a.com", 443, "/"), "https://o3:8443/");
    ck_assert_str_eq(find("http", "a.com", 443, "/"), "-");
    ck_assert_str_eq(find("https", "a.com", 80, "/"), "-");
    ck_assert_str_eq(find("http", "b.com", 80, "/"), "http://o4:80/");
    ck_assert_str_eq(find("http", "a.co", 80, "/"), "-");
    ck_assert_str_eq(find("http", "a.comm", 80, "/"), "-");
    ck_assert_str_eq(find("http", "[::1]", 81, "/"), "http://[::2]:80/");
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_paths)
{
    int rc = remap(
        "map http://a/ http://o/\n"
        "map http://b/ http://o/base\n"
        "map http://c/img/ http://o/i/\n"
        "map http://d/img http://o/\n"
        "map http://e/img http://o/pics\n"
        "map http://f/x/ http://o/y\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(find("http", "a", 80, "/a/b?x"), "http://o:80/a/b?x");
    ck_assert_str_eq(find("http", "a", 80, "/"), "http://o:80/");
    ck_assert_str_eq(find("http", "b", 80, "/a?q=1"), "http://o:80/base/a?q=1");
    ck_assert_str_eq(find("http", "b", 80, "/"), "http://o:80/base");
    ck_assert_str_eq(find("http", "b", 80, "/?q"), "http://o:80/base?q");
    ck_assert_str_eq(find("http", "c", 80, "/img/a.png?v=2"),
                     "http://o:80/i/a.png?v=2");
    ck_assert_str_eq(find("http", "c", 80, "/im"), "-");
    ck_assert_str_eq(find("http", "c", 80, "/img"), "-");
    ck_assert_str_eq(find("http", "d", 80, "/img/a"), "http://o:80/a");
    ck_assert_str_eq(find("http", "d", 80, "/img"), "http://o:80/");
    ck_assert_str_eq(find("http", "e", 80, "/img/a?z"), "http://o:80/pics/a?z");
    ck_assert_str_eq(find("http", "f", 80, "/x/a"), "http://o:80/y/a");
    conf_remap_free(&rm);
}
END_TEST

/* A from-path that does not end in '/' glues the rest of the request path
 * to the to-path's last segment: that must never make a dot segment the
 * (normalised) request path did not have. */
START_TEST(test_remap_join_makes_no_dot_segment)
{
    int rc = remap(
        "map http://a/pre http://o/pub/\n"
        "map http://b/pre http://o/pub\n"
        "map http://c/ http://o/\n"
        "redirect http://d/pre http://o/pub/\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(find("http", "a", 80, "/pre.."), "-");
    ck_assert_str_eq(find("http", "a", 80, "/pre../x"), "-");
    ck_assert_str_eq(find("http", "a", 80, "/pre./x?q"), "-");
    ck_assert_str_eq(find("http", "a", 80, "/pre%2e%2e/x"), "-");
    ck_assert_str_eq(find("http", "a", 80, "/pre..."), "http://o:80/pub/...");
    ck_assert_str_eq(find("http", "a", 80, "/pre.x"), "http://o:80/pub/.x");
    ck_assert_str_eq(find("http", "a", 80, "/pre/x?a/.."), "http://o:80/pub/x?a/..");
    ck_assert_str_eq(find("http", "a", 80, "/prefix"), "http://o:80/pub/fix");
    ck_assert_str_eq(find("http", "b", 80, "/pre.."), "http://o:80/pub..");
    ck_assert_str_eq(find("http", "c", 80, "/x/y"), "http://o:80/x/y");
    ck_assert_str_eq(find("http", "d", 80, "/pre../x"), "-");
    conf_remap_free(&rm);

    /* from-paths are written as requests' normalised paths are */
    rc = remap("map http://a/%7euser/%2fx%41/ http://o/u/\n"
               "reverse_map http://o/%7e/ http://a/t/\n");
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(find("http", "a", 80, "/~user/%2FxA/i"), "http://o:80/u/i");
    ck_assert_str_eq(rm.rules[1].from.path, "/%7e/");
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_first_match)
{
    int rc = remap(
        "map http://a/ http://root/\n"
        "map http://a/special/ http://special/\n"
        "map http://b/special/ http://special/\n"
        "map http://b/ http://root/\n");

    ck_assert_int_eq(rc, 0);
    /* File order, not longest prefix. */
    ck_assert_str_eq(find("http", "a", 80, "/special/x"),
                     "http://root:80/special/x");
    ck_assert_str_eq(find("http", "b", 80, "/special/x"),
                     "http://special:80/x");
    ck_assert_str_eq(find("http", "b", 80, "/other"), "http://root:80/other");
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_regex)
{
    int rc = remap(
        "regex_map http://(.*)\\.cdn\\.example\\.com/ "
        "http://$1.origin:8080/\n"
        "regex_map http://([a-z]+)-([0-9]+)\\.test:8080/s/ http://$2.$1.$0/\n"
        "regex_map http://x[0-9]/ http://plain/\n");
    struct conf_remap_result res;

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rm.rules[0].re_ok, 1);
    ck_assert_str_eq(find("http", "img.cdn.example.com", 80, "/a?b"),
                     "http://img.origin:8080/a?b");
    ck_assert_str_eq(find("http", "IMG.CDN.Example.com", 80, "/"),
                     "http://img.origin:8080/");
    /* Anchored: no match on a suffix or prefix. */
    ck_assert_str_eq(find("http", "img.cdn.example.com.evil", 80, "/"), "-");
    ck_assert_str_eq(find("http", "abc-12.test", 8080, "/s/q"),
                     "http://12.abc.abc-12.test:80/q");
    ck_assert_str_eq(find("http", "abc-12.test", 80, "/s/q"), "-");
    ck_assert_str_eq(find("http", "x1", 80, "/"), "http://plain:80/");
    ck_assert_str_eq(find("http", "x12", 80, "/"), "-");
    ck_assert_str_eq(find("http", "ax1", 80, "/"), "-");
    /* The rewritten host must fit. */
    {
        char host[300];

        memset(host, 'a', 240);
        memcpy(host + 240, ".cdn.example.com", 17);
        ck_assert_ptr_null(conf_remap_find(&rm, "http", host, strlen(host),
                                           80, "/", 1, &res));
    }
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_include)
{
    int rc;

    {
        char d[512];

        snprintf(d, sizeof(d), "%s/sub", tmpdir);
        ck_assert_int_eq(mkdir(d, 0700), 0);
    }
    put("sub/one.config", "map http://one/ http://o1/\n"
                          ".include sub/two.config\n");
    put("sub/two.config", "\nmap http://two/ http://o2/\n");
    rc = remap("map http://zero/ http://o0/\n"
               ".include sub/one.config\n"
               "map http://three/ http://o3/\n");
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(rm.nrules, 4);
    ck_assert_str_eq(rm.rules[0].from.host, "zero");
    ck_assert_str_eq(rm.rules[1].from.host, "one");
    ck_assert_str_eq(rm.rules[2].from.host, "two");
    ck_assert_str_eq(rm.rules[3].from.host, "three");
    ck_assert_int_eq(rm.rules[2].line, 2);
    ck_assert_ptr_nonnull(strstr(rm.rules[2].file, "/sub/two.config"));
    ck_assert_ptr_nonnull(strstr(rm.rules[3].file, "/remap.config"));
    ck_assert_int_eq(rm.nfiles, 3);
    ck_assert_str_eq(find("http", "two", 80, "/"), "http://o2:80/");
    conf_remap_free(&rm);
}
END_TEST

/* ATS: .include takes several paths, and a directory's files (not its
 * subdirectories) are read in alphasort order. */
START_TEST(test_remap_include_directory)
{
    int rc;

    for (int i = 0; i < 2; i++) {
        char d[512];

        snprintf(d, sizeof(d), "%s/%s", tmpdir, i ? "d/sub" : "d");
        ck_assert_int_eq(mkdir(d, 0700), 0);
    }
    put("d/b.config", "map http://b/ http://ob/\n");
    put("d/a.config", "map http://a/ http://oa/\n");
    put("d/sub/c.config", "map http://c/ http://oc/\n");
    put("one.config", "map http://one/ http://o1/\n");
    rc = remap(".include one.config d\nmap http://last/ http://ol/\n");
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(rm.nrules, 4);
    ck_assert_str_eq(rm.rules[0].from.host, "one");
    ck_assert_str_eq(rm.rules[1].from.host, "a");
    ck_assert_str_eq(rm.rules[2].from.host, "b");
    ck_assert_str_eq(rm.rules[3].from.host, "last");
    ck_assert_ptr_nonnull(strstr(rm.rules[2].file, "/d/b.config"));
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_include_errors)
{
    int rc;

    put("a.config", "map http://a/ http://o/\n.include b.config\n");
    put("b.config", "\n\n.include a.config\n");
    rc = remap(".include a.config\n"
               ".include missing.config\n"
               ".include\n"
               ".include x y\n"
               ".include remap.config\n");
    ck_assert_int_eq(rc, -1);
    check_error("b.config:3: .include \"a.config\": include loop (the file "
                "is already being read)");
    check_error("remap.config:2: .include \"missing.config\": No such file "
                "or directory");
    check_error("remap.config:3: .include: missing file name");
    check_error("remap.config:4: .include \"x\": No such file or directory");
    check_error("remap.config:4: .include \"y\": No such file or directory");
    check_error("remap.config:5: .include \"remap.config\": include loop "
                "(the file is already being read)");
    ck_assert_int_eq(errs.n, 6);
    ck_assert_int_eq(rm.nrules, 1);
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_include_depth)
{
    char name[32], text[64];
    int  rc;

    /* remap.config includes d0, d0 includes d1, ...: d0..d7 are the eight
     * levels allowed, so d7 may not include d8. */
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "d%d.config", i);
        snprintf(text, sizeof(text), ".include d%d.config\n", i + 1);
        put(name, text);
    }
    put("d10.config", "map http://deep/ http://o/\n");
    rc = remap(".include d0.config\n");
    ck_assert_int_eq(rc, -1);
    check_error("d7.config:1: .include \"d8.config\": includes nested deeper "
                "than 8");
    ck_assert_int_eq(errs.n, 1);
    conf_remap_free(&rm);

    /* Eight levels are fine. */
    conf_errors_free(&errs);
    put("d7.config", "map http://deep/ http://o/\n");
    rc = remap(".include d0.config\n");
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rm.nrules, 1);
    conf_remap_free(&rm);
}
END_TEST

static const char *
rev(const char *url)
{
    static char out[512];

    if (!conf_remap_reverse(&rm, url, strlen(url), out, sizeof(out)))
        return "-";
    return out;
}

START_TEST(test_remap_reverse)
{
    int  rc = remap(
        "map http://www.example.com/ http://origin:8080/\n"
        "map https://secure.example.com:8443/app/ http://app.internal/v1/\n"
        "reverse_map http://origin:8080/special/ http://special.example.com/\n"
        "redirect http://r.com/ http://target/\n"
        "regex_map http://(.*)\\.x/ http://$1.y/\n");
    char small[16];

    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(rev("http://origin:8080/a/b?c=d"),
                     "http://www.example.com/a/b?c=d");
    ck_assert_str_eq(rev("HTTP://ORIGIN:8080/"), "http://www.example.com/");
    ck_assert_str_eq(rev("http://origin:8080"), "http://www.example.com/");
    /* reverse_map is tried before map rules. */
    ck_assert_str_eq(rev("http://origin:8080/special/x"),
                     "http://special.example.com/x");
    ck_assert_str_eq(rev("http://origin/a"), "-");
    ck_assert_str_eq(rev("http://origin:80/a"), "-");
    ck_assert_str_eq(rev("http://app.internal/v1/login?x"),
                     "https://secure.example.com:8443/app/login?x");
    ck_assert_str_eq(rev("http://app.internal:80/v1/"),
                     "https://secure.example.com:8443/app/");
    ck_assert_str_eq(rev("http://app.internal/v2/"), "-");
    ck_assert_str_eq(rev("https://app.internal/v1/"), "-");
    ck_assert_str_eq(rev("http://target/"), "-");
    ck_assert_str_eq(rev("/relative"), "-");
    ck_assert_int_eq(conf_remap_reverse(&rm, "http://origin:8080/abcdefgh",
                                        27, small, sizeof(small)), 0);
    /* A Location that ends right after "://" (no NUL after it: an exact
     * heap copy, so ASan sees a read past it; libFuzzer found this) */
    {
        char *exact = malloc(7);
        ck_assert_ptr_nonnull(exact);
        memcpy(exact, "http://", 7);
        ck_assert_int_eq(conf_remap_reverse(&rm, exact, 7, small, sizeof(small)), 0);
        free(exact);
    }
    conf_remap_free(&rm);
}
END_TEST

/* ---------------------------------------------------------------------
 * ip_allow.config
 */
static struct conf_ip_allow ia;

static int
ip_allow(const char *text)
{
    const char *f = put("ip_allow.config", text);

    memset(&ia, 0, sizeof(ia));
    return conf_ip_allow_parse(&ia, f, &errs);
}

static int
allowed(const char *addr, unsigned method)
{
    struct sockaddr_in  s4;
    struct sockaddr_in6 s6;

    memset(&s4, 0, sizeof(s4));
    memset(&s6, 0, sizeof(s6));
    if (inet_pton(AF_INET, addr, &s4.sin_addr) == 1) {
        s4.sin_family = AF_INET;
        return conf_ip_allowed(&ia, (struct sockaddr *)&s4, method);
    }
    ck_assert_int_eq(inet_pton(AF_INET6, addr, &s6.sin6_addr), 1);
    s6.sin6_family = AF_INET6;
    return conf_ip_allowed(&ia, (struct sockaddr *)&s6, method);
}

START_TEST(test_method_bit)
{
    ck_assert_uint_eq(conf_method_bit("GET", 3), CONF_METHOD_GET);
    ck_assert_uint_eq(conf_method_bit("get", 3), CONF_METHOD_GET);
    ck_assert_uint_eq(conf_method_bit("GETX", 3), CONF_METHOD_GET);
    ck_assert_uint_eq(conf_method_bit("PURGE", 5), CONF_METHOD_PURGE);
    ck_assert_uint_eq(conf_method_bit("PUSH", 4), CONF_METHOD_PUSH);
    ck_assert_uint_eq(conf_method_bit("PATCH", 5), CONF_METHOD_PATCH);
    ck_assert_uint_eq(conf_method_bit("BREW", 4), CONF_METHOD_OTHER);
    ck_assert_uint_eq(conf_method_bit("GE", 2), CONF_METHOD_OTHER);
}
END_TEST

START_TEST(test_ip_allow_first_match)
{
    int rc = ip_allow(
        "# comment\n"
        "src_ip=10.0.0.5 action=ip_deny\n"
        "action=ip_allow src_ip=10.0.0.0/8 method=GET|head\n"
        "src_ip=192.168.1.10-192.168.1.20 action=ip_allow method=ALL\n"
        "src_ip=2001:db8::/32 action=ip_allow method=POST\n"
        "src_ip=fe80::1-fe80::ff action=ip_allow\n"
        "src_ip=172.16.5.77/12 action=ip_allow  # host bits ignored\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(ia.nrules, 6);
    ck_assert_int_eq(allowed("10.0.0.5", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("10.0.0.6", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("10.255.255.255", CONF_METHOD_HEAD), 1);
    ck_assert_int_eq(allowed("10.0.0.6", CONF_METHOD_POST), 0);
    ck_assert_int_eq(allowed("11.0.0.0", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("9.255.255.255", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("192.168.1.10", CONF_METHOD_PUT), 1);
    ck_assert_int_eq(allowed("192.168.1.20", CONF_METHOD_OTHER), 1);
    ck_assert_int_eq(allowed("192.168.1.21", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("192.168.1.9", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("2001:db8:ffff::1", CONF_METHOD_POST), 1);
    ck_assert_int_eq(allowed("2001:db8:ffff::1", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("2001:db9::", CONF_METHOD_POST), 0);
    ck_assert_int_eq(allowed("fe80::1", CONF_METHOD_DELETE), 1);
    ck_assert_int_eq(allowed("fe80::100", CONF_METHOD_DELETE), 0);
    ck_assert_int_eq(allowed("172.31.255.255", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("172.32.0.0", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("172.16.0.0", CONF_METHOD_GET), 1);
    /* v4-mapped v6 is checked as v4. */
    ck_assert_int_eq(allowed("::ffff:10.0.0.6", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("::ffff:10.0.0.5", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("::ffff:192.168.1.15", CONF_METHOD_PUT), 1);
    conf_ip_allow_free(&ia);
}
END_TEST

START_TEST(test_ip_allow_cidr_edges)
{
    /* The /0 rules come last: the first rule holding an address decides
     * (ATS), and they hold every address.  They allow only HEAD, so a GET
     * tells which rule decided. */
    int rc = ip_allow("src_ip=1.2.3.4/32 action=ip_allow\n"
                      "src_ip=::1/128 action=ip_allow\n"
                      "src_ip=10.1.0.0/15 action=ip_allow\n"
                      "src_ip=::ffff:192.0.2.0/120 action=ip_allow\n"
                      "src_ip=0.0.0.0/0 action=ip_allow method=HEAD\n"
                      "src_ip=::/0 action=ip_allow method=HEAD\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(allowed("1.2.3.4", CONF_METHOD_PUT), 1);
    ck_assert_int_eq(allowed("1.2.3.4", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("1.2.3.5", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("1.2.3.5", CONF_METHOD_HEAD), 1);
    ck_assert_int_eq(allowed("::1", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("::2", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("::2", CONF_METHOD_HEAD), 1);
    ck_assert_int_eq(allowed("10.0.0.0", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("10.1.255.255", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("10.2.0.0", CONF_METHOD_GET), 0);
    /* A v4-mapped rule applies to IPv4 clients, however they arrive. */
    ck_assert_int_eq(ia.rules[3].range.family, AF_INET);
    ck_assert_int_eq(allowed("192.0.2.77", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("::ffff:192.0.2.77", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("192.0.3.1", CONF_METHOD_GET), 0);
    conf_ip_allow_free(&ia);
}
END_TEST

START_TEST(test_ip_allow_errors)
{
    int rc = ip_allow(
        "src_ip=1.2.3.4\n"                                      /* 1 */
        "action=ip_allow\n"                                     /* 2 */
        "src_ip=1.2.3 action=ip_allow\n"                        /* 3 */
        "src_ip=1.2.3.4 action=allow\n"                         /* 4 */
        "src_ip=1.2.3.4 action=ip_allow colour=red\n"           /* 5 */
        "src_ip=1.2.3.4 action=ip_allow method=GET||PUT\n"      /* 6 */
        "src_ip=1.2.3.9-1.2.3.4 action=ip_allow\n"              /* 7 */
        "src_ip=1.2.3.4-::1 action=ip_allow\n"                  /* 8 */
        "src_ip=1.2.3.4/33 action=ip_allow\n"                   /* 9 */
        "src_ip=1.2.3.4 src_ip=1.2.3.5 action=ip_allow\n"       /* 10 */
        "src_ip=1.2.3.4 ip_allow\n"                             /* 11 */
        "src_ip=1.2.3.4 dest_ip=1.2.3.5 action=ip_allow\n"      /* 12 */
        "src_ip=1.2.3.4 action=ip_allow method=GET|BREW\n"      /* 13 */
        "src_ip=::/x action=ip_allow\n");                       /* 14 */

    ck_assert_int_eq(rc, -1);
    check_error("ip_allow.config:1: missing action=");
    check_error("ip_allow.config:2: missing src_ip= (or dest_ip=)");
    check_error("ip_allow.config:3: src_ip \"1.2.3\": bad address");
    check_error("ip_allow.config:4: unknown action \"allow\" (expected "
                "ip_allow or ip_deny)");
    check_error("ip_allow.config:5: unknown key \"colour\"");
    check_error("ip_allow.config:6: empty method name in method=");
    check_error("ip_allow.config:7: src_ip \"1.2.3.9-1.2.3.4\": starts after "
                "it ends");
    check_error("ip_allow.config:8: src_ip \"1.2.3.4-::1\": mixes IPv4 and "
                "IPv6");
    check_error("ip_allow.config:9: src_ip \"1.2.3.4/33\": bad prefix length");
    check_error("ip_allow.config:10: src_ip given twice");
    check_error("ip_allow.config:11: \"ip_allow\" is not key=value");
    check_error("ip_allow.config:12: src_ip= and dest_ip= on one line (one "
                "rule each)");
    check_error("ip_allow.config:14: src_ip \"::/x\": bad prefix length");
    ck_assert_int_eq(errs.n, 13);
    ck_assert_int_eq(errs.nwarn, 0);
    /* A method without a bit is kept by name (ATS matches it by name). */
    ck_assert_int_eq(ia.nrules, 1);
    ck_assert_uint_eq(ia.rules[0].methods, CONF_METHOD_GET);
    ck_assert_int_eq(ia.rules[0].nnames, 1);
    ck_assert_str_eq(ia.rules[0].names[0], "BREW");
    conf_ip_allow_free(&ia);
}
END_TEST

START_TEST(test_ip_allow_defaults)
{
    memset(&ia, 0, sizeof(ia));
    conf_ip_allow_defaults(&ia);
    ck_assert_int_eq(ia.nrules, 4);
    ck_assert_int_eq(allowed("127.0.0.1", CONF_METHOD_PUSH), 1);
    ck_assert_int_eq(allowed("127.0.0.1", CONF_METHOD_PURGE), 1);
    ck_assert_int_eq(allowed("127.0.0.2", CONF_METHOD_PUSH), 0);
    ck_assert_int_eq(allowed("127.0.0.2", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("8.8.8.8", CONF_METHOD_DELETE), 0);
    ck_assert_int_eq(allowed("8.8.8.8", CONF_METHOD_POST), 1);
    ck_assert_int_eq(allowed("8.8.8.8", CONF_METHOD_OTHER), 1);
    ck_assert_int_eq(allowed("::1", CONF_METHOD_PUSH), 1);
    ck_assert_int_eq(allowed("::1", CONF_METHOD_DELETE), 1);
    ck_assert_int_eq(allowed("::1", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("2001:db8::1", CONF_METHOD_PURGE), 0);
    ck_assert_int_eq(allowed("2001:db8::1", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("::ffff:127.0.0.1", CONF_METHOD_PUSH), 1);
    ck_assert_int_eq(allowed("::ffff:127.0.0.2", CONF_METHOD_PUSH), 0);
    conf_ip_allow_free(&ia);
}
END_TEST

/* The shipped file and the built-in defaults must agree. */
START_TEST(test_ip_allow_shipped_file)
{
    struct conf_ip_allow def;
    const char *srcdir = getenv("CISTERN_SRCDIR");
    char       *f;

    ck_assert_int_ge(asprintf(&f, "%s/conf/ip_allow.config",
                              srcdir != NULL ? srcdir : "."), 0);
    if (access(f, R_OK) != 0) {
        free(f);
        return;    /* not run from the source tree */
    }
    memset(&ia, 0, sizeof(ia));
    memset(&def, 0, sizeof(def));
    ck_assert_int_eq(conf_ip_allow_parse(&ia, f, &errs), 0);
    free(f);
    conf_ip_allow_defaults(&def);
    ck_assert_int_eq(ia.nrules, def.nrules);
    for (int i = 0; i < ia.nrules; i++) {
        ck_assert_int_eq(ia.rules[i].allow, def.rules[i].allow);
        ck_assert_uint_eq(ia.rules[i].methods, def.rules[i].methods);
        ck_assert(memcmp(&ia.rules[i].range, &def.rules[i].range,
                         sizeof(ia.rules[i].range)) == 0);
    }
    conf_ip_allow_free(&def);
    conf_ip_allow_free(&ia);
}
END_TEST

/* ---------------------------------------------------------------------
 * storage.config
 */
static struct conf_storages st;

static int
storage(const char *text)
{
    const char *f = put("storage.config", text);

    memset(&st, 0, sizeof(st));
    return conf_storage_parse(&st, f, tmpdir, &errs);
}

START_TEST(test_storage_good)
{
    int   rc = storage("# cache\n"
                       "var/cache 256M\n"
                       "/abs/cache 17000000 id=1 volume=2\n"
                       "cache2 1G\n");
    char *want;

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(st.nspans, 3);
    ck_assert_int_ge(asprintf(&want, "%s/var/cache", tmpdir), 0);
    ck_assert_str_eq(st.spans[0].path, want);
    free(want);
    ck_assert_int_eq(st.spans[0].size, 256LL << 20);
    ck_assert_int_eq(st.spans[0].line, 2);
    ck_assert_str_eq(st.spans[1].path, "/abs/cache");
    ck_assert_int_eq(st.spans[1].size, 17000000);
    ck_assert_int_eq(st.spans[2].size, 1LL << 30);
    check_warning("storage.config:3: option \"id=1\" is not supported and is "
                  "ignored");
    check_warning("storage.config:3: option \"volume=2\" is not supported "
                  "and is ignored");
    check_warning("storage.config:3: more than one span: the cache uses only "
                  "the first (line 2)");
    ck_assert_int_eq(errs.nwarn, 3);
    conf_storage_free(&st);
}
END_TEST

START_TEST(test_storage_errors)
{
    int rc = storage("cache\n"
                     "cache 1M\n"
                     "cache 256Q\n"
                     "cache 256M extra\n"
                     "cache 16M\n"
                     "cache 16777215\n");

    ck_assert_int_eq(rc, -1);
    check_error("storage.config:1: \"cache\": missing size (a cache "
                "directory needs one, e.g. \"cache 256M\")");
    check_error("storage.config:2: size 1M is too small (at least 16M)");
    check_error("storage.config:3: \"256Q\" is not a size (bytes, or a number "
                "with a K, M, G or T suffix)");
    check_error("storage.config:4: unexpected \"extra\" (expected PATH SIZE)");
    check_error("storage.config:6: size 16777215 is too small (at least 16M)");
    ck_assert_int_eq(errs.n, 5);
    ck_assert_int_eq(st.nspans, 1);
    ck_assert_int_eq(st.spans[0].size, 16LL << 20);
    conf_storage_free(&st);
}
END_TEST

/* ---------------------------------------------------------------------
 * conf_load()
 */
START_TEST(test_load_minimal)
{
    struct conf *c;
    char        *want;

    put("records.config", "CONFIG proxy.config.http.server_ports STRING 0\n"
                          "CONFIG proxy.config.log.logfile_dir STRING ./log\n");
    put("remap.config", "map http://a/ http://b/\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_str_eq(c->confdir, tmpdir);
    ck_assert_int_eq(c->rec.ports[0].port, 0);
    ck_assert_int_ge(asprintf(&want, "%s/log", tmpdir), 0);
    ck_assert_str_eq(c->rec.logfile_dir, want);
    free(want);
    ck_assert_int_eq(c->remap.nrules, 1);
    ck_assert_int_eq(c->ip_allow.nrules, 4);    /* built-in defaults */
    ck_assert_int_eq(c->storage.nspans, 0);
    conf_free(c);
}
END_TEST

START_TEST(test_load_relative_dir)
{
    struct conf *c;
    char         cwd[4096];

    put("records.config", "");
    put("remap.config", "");
    put("ip_allow.config", "src_ip=::1 action=ip_allow\n");
    put("storage.config", "cache 32M\n");
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    ck_assert_int_eq(chdir("/tmp"), 0);
    c = conf_load(tmpdir + strlen("/tmp/"), &errs);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(c->confdir, tmpdir);
    ck_assert_int_eq(c->ip_allow.nrules, 1);
    ck_assert_int_eq(c->storage.nspans, 1);
    ck_assert_int_eq(strncmp(c->storage.spans[0].path, tmpdir,
                             strlen(tmpdir)), 0);
    conf_free(c);
}
END_TEST

START_TEST(test_load_errors_collected)
{
    struct conf *c;

    put("records.config", "CONFIG proxy.config.cistern.workers INT x\n");
    put("remap.config", "bogus\n");
    put("ip_allow.config", "src_ip=x action=ip_allow\n");
    put("storage.config", "cache 1K\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(errs.n, 4);
    check_error("records.config:1: proxy.config.cistern.workers: \"x\" is not "
                "an integer");
    check_error("remap.config:1: unknown directive \"bogus\"");
    check_error("ip_allow.config:1: src_ip \"x\": bad address");
    check_error("storage.config:1: size 1K is too small (at least 16M)");
}
END_TEST

START_TEST(test_load_missing_required)
{
    struct conf *c;
    char         d[128];

    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_null(c);
    check_error("records.config: cannot open: No such file or directory");
    check_error("remap.config: cannot open: No such file or directory");
    ck_assert_int_eq(errs.n, 2);
    conf_errors_free(&errs);

    snprintf(d, sizeof(d), "%s/none", tmpdir);
    c = conf_load(d, &errs);
    ck_assert_ptr_null(c);
    check_error("none: cannot use config directory: No such file or "
                "directory");
}
END_TEST

START_TEST(test_load_warnings_do_not_fail)
{
    struct conf *c;

    put("records.config", "CONFIG proxy.config.some.ats.key INT 1\n"
                          "CONFIG proxy.config.http.request_line_max_size "
                          "INT 1M\n");
    put("remap.config", "map http://a/ http://b/\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 2);
    check_warning("records.config: proxy.config.http.request_line_max_size "
                  "(1048576) exceeds proxy.config.http.request_header_max_size"
                  " (131072); the header limit applies");
    conf_free(c);
}
END_TEST

/* The shipped defaults (with the @...@ placeholders filled in as the
 * Makefile does) load cleanly and match the built-in defaults. */
START_TEST(test_load_shipped_files)
{
    const char *srcdir = getenv("CISTERN_SRCDIR");
    const char *names[] = { "records.config", "remap.config",
                            "ip_allow.config", "storage.config" };
    struct conf_records def;
    struct conf *c;
    char        *cmd;

    if (srcdir == NULL)
        srcdir = ".";
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        ck_assert_int_ge(asprintf(&cmd, "f=%s/conf/%s; [ -f $f.in ] && f=$f.in; "
                                  "[ -f $f ] || exit 3; sed -e "
                                  "'s|@localstatedir@|/var|g' -e "
                                  "'s|@runstatedir@|/run|g' $f > %s/%s",
                                  srcdir, names[i], tmpdir, names[i]), 0);
        if (system(cmd) != 0) {
            free(cmd);
            return;    /* not run from the source tree */
        }
        free(cmd);
    }
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 0);
    conf_records_defaults(&def);
    ck_assert_int_eq(c->rec.nports, def.nports);
    ck_assert_int_eq(c->rec.workers, def.workers);
    ck_assert_int_eq(c->rec.max_doc_size, def.max_doc_size);
    ck_assert_int_eq(c->rec.request_header_max_size,
                     def.request_header_max_size);
    ck_assert_int_eq(c->rec.ka_no_activity_in, def.ka_no_activity_in);
    ck_assert_int_eq(c->rec.connections_throttle, def.connections_throttle);
    ck_assert_str_eq(c->rec.logfile_dir, "/var/log/cistern");
    ck_assert_str_eq(c->rec.run_dir, "/run/cistern");
    conf_records_free(&def);
    ck_assert_int_eq(c->remap.nrules, 0);
    ck_assert_int_eq(c->ip_allow.nrules, 4);
    ck_assert_int_eq(c->storage.nspans, 1);
    ck_assert_str_eq(c->storage.spans[0].path, "/var/cache/cistern");
    ck_assert_int_eq(c->storage.spans[0].size, 256LL << 20);
    conf_free(c);
}
END_TEST

/* ---------------------------------------------------------------------
 * Issue 18, records: ATS keys Cistern does not implement (conf/atskeys.c)
 */
static int
count_notes(enum conf_note_kind kind)
{
    int n = 0;

    for (int i = 0; i < errs.nnotes; i++)
        n += errs.notes[i].kind == kind;
    return n;
}

START_TEST(test_records_matches_keys)
{
    int rc = records(
        "CONFIG proxy.config.reverse_proxy.enabled INT 1\n"                 /* 1 */
        "CONFIG proxy.config.http.cache.post_method INT 0\n"                /* 2 */
        "CONFIG proxy.config.socks.socks_needed INT 0\n"                    /* 3 */
        "CONFIG proxy.config.ssl.client.verify.server.properties STRING all\n" /* 4 */
        "CONFIG proxy.config.cistern.workers INT 2\n");                     /* 5 */

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 0);
    ck_assert_int_eq(count_notes(CONF_NOTE_MATCHES), 4);
    ck_assert_int_eq(count_notes(CONF_NOTE_USED), 1);
    conf_records_free(&rec);
}
END_TEST

/* issue 18, ports: ATS port descriptors, parsed into struct conf_port */
START_TEST(test_records_ports_ats)
{
    int rc = records(
        "CONFIG proxy.config.http.server_ports STRING 8080 8080:ipv6,"
        "ip-in=[::1]:9090:pp SSL:ip-in=10.1.2.3:81:proto=http/1.1;http "
        "IPV4:82:proto=http:pp 83:ip-in127.0.0.2\n"
        "CONFIG proxy.config.http.proxy_protocol_allowlist STRING 10.0.0.0/8, 127.0.0.1\n"
        "CONFIG proxy.config.acl.subjects STRING PROXY,PEER\n");
    static const uint8_t v6one[16] = { [15] = 1 };

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(rec.nports, 6);
    ck_assert_int_eq(rec.ports[0].port, 8080);
    ck_assert_int_eq(rec.ports[0].ipv6, 0);
    ck_assert_int_eq(rec.ports[1].port, 8080);
    ck_assert_int_eq(rec.ports[1].ipv6, 1);
    ck_assert_int_eq(rec.ports[1].has_addr, 0);
    ck_assert_int_eq(rec.ports[2].port, 9090);
    ck_assert_int_eq(rec.ports[2].ipv6, 1);
    ck_assert_int_eq(rec.ports[2].pp, 1);
    ck_assert_int_eq(rec.ports[2].has_addr, 1);
    ck_assert_mem_eq(rec.ports[2].addr, v6one, 16);
    ck_assert_int_eq(rec.ports[3].port, 81);
    ck_assert_int_eq(rec.ports[3].ssl, 1);
    ck_assert_int_eq(rec.ports[3].ipv6, 0);
    ck_assert_mem_eq(rec.ports[3].addr, "\x0a\x01\x02\x03", 4);
    ck_assert_int_eq(rec.ports[4].port, 82);
    ck_assert_int_eq(rec.ports[4].pp, 1);
    ck_assert_int_eq(rec.ports[4].ssl, 0);
    ck_assert_int_eq(rec.ports[5].port, 83);
    ck_assert_mem_eq(rec.ports[5].addr, "\x7f\x00\x00\x02", 4);
    ck_assert_str_eq(rec.pp_allowlist, "10.0.0.0/8, 127.0.0.1");
    ck_assert_str_eq(rec.acl_subjects, "PROXY,PEER");
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_matches_other_value_is_error)
{
    int rc = records(
        "CONFIG proxy.config.reverse_proxy.enabled INT 0\n"                 /* 1 */
        "CONFIG proxy.config.http.cache.post_method INT 1\n"                /* 2 */
        "CONFIG proxy.config.socks.socks_needed STRING 0\n"                 /* 3 */
        "CONFIG proxy.config.http.cache.cache_urls_that_look_dynamic INT 0\n"); /* 4 */

    ck_assert_int_eq(rc, -1);
    ck_assert_int_eq(errs.n, 4);
    check_error("records.config:1: proxy.config.reverse_proxy.enabled 0 is "
                "not supported (only 1): Cistern is always a reverse proxy "
                "(remap.config decides what it serves)");
    check_error("records.config:2: proxy.config.http.cache.post_method 1 is "
                "not supported (only 0): responses to POST are never stored");
    check_error("records.config:3: proxy.config.socks.socks_needed: type must "
                "be INT, not STRING");
    ck_assert_int_eq(count_notes(CONF_NOTE_MATCHES), 0);
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_records_internal_one_warning)
{
    int rc = records(
        "CONFIG proxy.config.exec_thread.limit INT 2\n"
        "CONFIG proxy.config.cache.ram_cache.size INT -1\n"
        "CONFIG proxy.config.diags.debug.tags STRING http|dns\n"
        "CONFIG proxy.config.no.such.key INT 1\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 2);
    check_warning("records.config: 3 keys only tune ATS internals and are "
                  "ignored (the `cistern -t` report says why): "
                  "proxy.config.exec_thread.limit, "
                  "proxy.config.cache.ram_cache.size, "
                  "proxy.config.diags.debug.tags");
    check_warning("records.config:4: unknown key \"proxy.config.no.such.key\" "
                  "ignored");
    ck_assert_int_eq(count_notes(CONF_NOTE_INTERNAL), 3);
    ck_assert_int_eq(count_notes(CONF_NOTE_UNKNOWN), 1);
    conf_records_free(&rec);
}
END_TEST

START_TEST(test_ats_key_table)
{
    /* exact rows win; prefixes need something after them */
    ck_assert_ptr_nonnull(conf_ats_key_find("proxy.config.exec_thread.autoconfig.scale"));
    ck_assert_ptr_null(conf_ats_key_find("proxy.config.exec_thread."));
    ck_assert_ptr_null(conf_ats_key_find("proxy.config.http.server_ports"));
    /* no key is both implemented and classified, and every row is
     * complete: a MATCHES row has values, every row has a reason */
    for (size_t i = 0; i < conf_ats_nkeys; i++) {
        const struct conf_ats_key *k = &conf_ats_keys[i];
        struct conf_records r;
        char line[256];

        ck_assert_ptr_nonnull(k->why);
        ck_assert(k->cls == CONF_ATS_INTERNAL || k->values != NULL);
        if (strchr(k->name, '*') != NULL)
            continue;
        conf_errors_free(&errs);
        conf_records_defaults(&r);
        snprintf(line, sizeof(line), "CONFIG %s %s %s\n", k->name, k->type,
                 k->values ? k->values : "1");
        if (k->values == NULL || strchr(k->values, '|') == NULL) {
            conf_records_parse(&r, put("records.config", line), tmpdir, &errs);
            ck_assert_msg(count_notes(CONF_NOTE_USED) == 0,
                          "%s is in rec_table too", k->name);
            ck_assert_msg(errs.n == 0, "%s: its own value refused", k->name);
        }
        conf_records_free(&r);
    }
}
END_TEST

START_TEST(test_ats_files)
{
    struct conf_errors e2;
    struct conf *c;
    char *sub;

    put("records.config", "CONFIG proxy.config.http.server_ports STRING 0\n");
    put("remap.config", "");
    put("socks.config", "# c\nno_socks 10.0.0.1\n");
    put("parent.config", "# nothing\n\n");
    put("strategies.yaml", "# c\n---\nstrategies: []\n");
    /* logging.yaml is read (issue 25): a valid one loads, quietly */
    put("logging.yaml", "logging:\n  formats:\n    - name: s\n      format: "
        "'%<chi>'\n  logs:\n    - filename: squid\n      format: s\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(errs.nwarn, 0);
    ck_assert_int_eq(c->logging.nlogs, 1);
    ck_assert_int_eq(count_notes(CONF_NOTE_MATCHES), 3);
    conf_free(c);

    put("parent.config", "dest_domain=. parent=\"p\"\n");
    put("plugin.config", "# c\n\ngen.so\n");
    put("sni.yaml", "sni:\n- fqdn: a.test\n  verify_client: STRICT\n");
    put("hosting.config", "hostname=a.test volume=1\n");
    put("volume.config", "volume=1 scheme=http size=50%\n");
    put("splitdns.config", "dest_domain=a.test named=10.0.0.1\n");
    put("records.config", "CONFIG proxy.config.http.server_ports STRING 0\n"
        "CONFIG proxy.config.socks.socks_needed INT 1\n");
    memset(&e2, 0, sizeof(e2));
    c = conf_load(tmpdir, &e2);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(e2.n, 7);      /* plugins load once the rest is sound */
    conf_errors_free(&errs);
    errs = e2;
    check_error("parent.config:1: parent=: \"p\": a parent needs host:port "
                "(the port is required)");
    check_error("socks.config:2: SOCKS is not supported, and "
                "proxy.config.socks.socks_needed asks for it: Cistern would "
                "connect to origins directly (1 line)");
    /* the rest sound: plugin.config's missing plugin is the error */
    put("records.config", "CONFIG proxy.config.http.server_ports STRING 0\n");
    put("parent.config", "");
    put("sni.yaml", "");
    put("hosting.config", "");
    put("volume.config", "");
    put("splitdns.config", "");
    conf_errors_free(&errs);
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_null(c);
    ck_assert_int_ge(asprintf(&sub, "%s/plugin.config:3: ", tmpdir), 0);
    int found = 0;
    for (int i = 0; i < errs.nstored; i++)
        found |= strncmp(errs.msgs[i], sub, strlen(sub)) == 0;
    ck_assert_msg(found, "no plugin.config:3 error");
    free(sub);
}
END_TEST

/* ---------------------------------------------------------------------
 * issue 18: ATS's ip_allow semantics, dest_ip=, conf/yaml.c, ip_allow.yaml
 */
static int
method_ok(const char *addr, const char *method, int out)
{
    struct sockaddr_storage ss;
    struct sockaddr_in     *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6    *s6 = (struct sockaddr_in6 *)&ss;

    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
    } else {
        ck_assert_int_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
        s6->sin6_family = AF_INET6;
    }
    if (out)
        return conf_ip_out_decide(&ia, (struct sockaddr *)&ss, method,
                                  strlen(method));
    return conf_ip_method_allowed(&ia, (struct sockaddr *)&ss, method,
                                  strlen(method));
}

/* The first rule holding the address decides (ATS fills an address map):
 * a later rule for the same address is never consulted (and said so: a
 * warning for one allowing everything), and a rule's action applies to
 * the methods it lists, the opposite to the others. */
START_TEST(test_ip_allow_ats_order)
{
    int rc = ip_allow("src_ip=10.0.0.0/8 action=ip_allow method=GET|PROPFIND\n"
                      "src_ip=0/0 action=ip_deny method=PURGE|MKCOL\n"
                      "src_ip=0.0.0.0/0 action=ip_allow\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 1);
    check_warning("ip_allow.config:3: 0.0.0.0-255.255.255.255: this rule never "
                  "applies: earlier rules hold all of it (line 2 first), and the "
                  "first rule holding an address decides");
    ck_assert_int_eq(method_ok("10.1.2.3", "GET", 0), 1);
    ck_assert_int_eq(method_ok("10.1.2.3", "POST", 0), 0);   /* not rule 3 */
    ck_assert_int_eq(method_ok("10.1.2.3", "PROPFIND", 0), 1);
    ck_assert_int_eq(method_ok("10.1.2.3", "propfind", 0), 1);
    ck_assert_int_eq(method_ok("10.1.2.3", "MKCOL", 0), 0);
    /* "0/0" is 0.0.0.0/0, as ATS reads it */
    ck_assert_int_eq(method_ok("11.0.0.1", "GET", 0), 1);
    ck_assert_int_eq(method_ok("11.0.0.1", "PURGE", 0), 0);
    ck_assert_int_eq(method_ok("11.0.0.1", "MKCOL", 0), 0);
    ck_assert_int_eq(method_ok("11.0.0.1", "PROPFIND", 0), 1);
    ck_assert_int_eq(method_ok("255.255.255.255", "DELETE", 0), 1);
    ck_assert_int_eq(method_ok("::2", "GET", 0), 0);   /* no IPv6 rule */
    /* out rules: none, so none decides (-1: ATS allows) */
    ck_assert_int_eq(ia.nout, 0);
    ck_assert_int_eq(method_ok("10.1.2.3", "DELETE", 1), -1);
    conf_ip_allow_free(&ia);
    /* inet_aton's dotted short forms stay refused */
    ck_assert_int_eq(ip_allow("src_ip=192.168.1/24 action=ip_allow\n"), -1);
    check_error("ip_allow.config:1: src_ip \"192.168.1/24\": bad address");
    conf_ip_allow_free(&ia);
}
END_TEST

/* dest_ip= lines are out rules: they never touch clients, and for an
 * origin no out rule holds none decides (-1). */
START_TEST(test_ip_allow_dest_ip)
{
    int rc = ip_allow("dest_ip=10.0.0.1 action=ip_deny\n"
                      "dest_ip=10.0.0.0/24 action=ip_deny method=DELETE\n"
                      "dest_ip=fd00::/8 action=ip_allow method=GET|HEAD\n"
                      "src_ip=0/0 action=ip_allow\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(ia.nrules, 1);
    ck_assert_int_eq(ia.nout, 3);
    ck_assert_int_eq(method_ok("10.0.0.1", "GET", 1), 0);
    ck_assert_int_eq(method_ok("10.0.0.2", "GET", 1), 1);
    ck_assert_int_eq(method_ok("10.0.0.2", "DELETE", 1), 0);
    ck_assert_int_eq(method_ok("::ffff:10.0.0.2", "DELETE", 1), 0);
    ck_assert_int_eq(method_ok("10.0.1.2", "DELETE", 1), -1);  /* no rule */
    ck_assert_int_eq(method_ok("fd12::1", "HEAD", 1), 1);
    ck_assert_int_eq(method_ok("fd12::1", "POST", 1), 0);
    ck_assert_int_eq(method_ok("fe80::1", "POST", 1), -1);
    /* clients are checked against the src_ip rules only */
    ck_assert_int_eq(method_ok("10.0.0.1", "GET", 0), 1);
    conf_ip_allow_free(&ia);
}
END_TEST

static struct conf_yaml *
yaml(const char *text, int want_rc)
{
    struct conf_yaml *root = NULL;
    const char       *f = put("t.yaml", text);

    ck_assert_int_eq(conf_yaml_load(f, &errs, &root), want_rc);
    return root;
}

START_TEST(test_yaml_tree)
{
    struct conf_yaml *root = yaml(
        "# comment\n"                                   /* 1 */
        "a: plain\n"                                    /* 2 */
        "b: 'single ''q'''\n"                           /* 3 */
        "c: [1, \"two\", {x: y}]\n"                     /* 4 */
        "d: &anc\n"                                     /* 5 */
        "  - one\n"                                     /* 6 */
        "  - two\n"                                     /* 7 */
        "e: *anc\n"                                     /* 8 */
        "f: |\n"                                        /* 9 */
        "  line1\n"                                     /* 10 */
        "  line2\n"                                     /* 11 */
        "g:\n", 0);                                     /* 12 */
    const struct conf_yaml *v;

    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(root->kind, CONF_YAML_MAP);
    ck_assert_int_eq(root->nkids, 14);
    ck_assert_int_eq(root->line, 2);
    v = conf_yaml_get(root, "a");
    ck_assert_str_eq(v->str, "plain");
    ck_assert_int_eq(v->plain, 1);
    ck_assert_int_eq(v->line, 2);
    v = conf_yaml_get(root, "b");
    ck_assert_str_eq(v->str, "single 'q'");
    ck_assert_int_eq(v->plain, 0);
    ck_assert_int_eq(v->line, 3);
    v = conf_yaml_get(root, "c");
    ck_assert_int_eq(v->kind, CONF_YAML_SEQ);
    ck_assert_int_eq(v->nkids, 3);
    ck_assert_str_eq(v->kids[1]->str, "two");
    ck_assert_int_eq(v->kids[2]->kind, CONF_YAML_MAP);
    ck_assert_str_eq(conf_yaml_get(v->kids[2], "x")->str, "y");
    v = conf_yaml_get(root, "d");
    ck_assert_int_eq(v->line, 5);                  /* at its anchor */
    ck_assert_int_eq(v->kids[1]->line, 7);
    /* the alias is a copy of the anchored node, with its lines */
    v = conf_yaml_get(root, "e");
    ck_assert_int_eq(v->kind, CONF_YAML_SEQ);
    ck_assert_ptr_ne(v, conf_yaml_get(root, "d"));
    ck_assert_str_eq(v->kids[0]->str, "one");
    ck_assert_int_eq(v->kids[0]->line, 6);
    ck_assert_str_eq(conf_yaml_get(root, "f")->str, "line1\nline2\n");
    ck_assert_str_eq(conf_yaml_get(root, "g")->str, "");
    ck_assert_ptr_null(conf_yaml_get(root, "h"));
    ck_assert_ptr_null(conf_yaml_get(v, "a"));     /* not a mapping */
    conf_yaml_free(root);

    /* empty file: no document, no error */
    ck_assert_ptr_null(yaml("# nothing\n", 0));
    ck_assert_int_eq(errs.n, 0);
    ck_assert_str_eq(conf_yaml_kind_name(CONF_YAML_SEQ), "sequence");
}
END_TEST

START_TEST(test_yaml_errors)
{
    char *bomb, *p;

    ck_assert_ptr_null(yaml("a: b\n  c: d\n", -1));
    check_error("t.yaml:2: mapping values are not allowed in this context");
    ck_assert_ptr_null(yaml("a:\n  - x\n - y\n", -1));
    check_error("t.yaml:3: did not find expected key (while parsing a block "
                "mapping started on line 1)");
    ck_assert_ptr_null(yaml("a: [1, 2\n", -1));
    check_error("t.yaml:2: did not find expected ',' or ']' (while parsing a "
                "flow sequence started on line 1)");
    ck_assert_ptr_null(yaml("a: *nowhere\n", -1));
    check_error("t.yaml:1: found undefined alias");
    ck_assert_ptr_null(yaml("a: 1\nb: 2\na: 3\n", -1));
    check_error("t.yaml:3: duplicate key \"a\" (first on line 1)");
    ck_assert_ptr_null(yaml("a: 1\n---\nb: 2\n", -1));
    check_error("t.yaml:2: a second YAML document (only one is read)");
    ck_assert_ptr_null(yaml("a: \"\xff\"\n", -1));
    check_error("t.yaml:1: invalid leading UTF-8 octet");
    /* an anchor used inside itself: a cycle, stopped by the depth bound */
    ck_assert_ptr_null(yaml("a: &x [1, *x]\n", -1));
    check_error("t.yaml:1: nested deeper than %d levels", CONF_YAML_MAX_DEPTH);
    /* an alias bomb: 10 levels of 10 aliases each is 10^10 nodes */
    bomb = malloc(4096);
    ck_assert_ptr_nonnull(bomb);
    p = bomb + sprintf(bomb, "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 10; i++) {
        p += sprintf(p, "l%d: &l%d [", i, i);
        for (int j = 0; j < 10; j++)
            p += sprintf(p, "%s*l%d", j ? ", " : "", i - 1);
        p += sprintf(p, "]\n");
    }
    ck_assert_ptr_null(yaml(bomb, -1));
    free(bomb);
    /* (reported at the line of the node whose copy crossed the bound) */
    check_error("t.yaml:1: more than %d nodes (after expanding aliases)",
                CONF_YAML_MAX_NODES);
    /* the size bound, checked before libyaml sees a byte */
    bomb = malloc(CONF_YAML_MAX_BYTES + 2);
    ck_assert_ptr_nonnull(bomb);
    memset(bomb, '\n', CONF_YAML_MAX_BYTES + 1);
    bomb[CONF_YAML_MAX_BYTES + 1] = '\0';
    ck_assert_ptr_null(yaml(bomb, -1));
    free(bomb);
    check_error("t.yaml: larger than %d bytes", CONF_YAML_MAX_BYTES);
    ck_assert_int_eq(errs.n, 10);
}
END_TEST

static int
ip_allow_yaml(const char *text)
{
    const char *f = put("ip_allow.yaml", text);

    memset(&ia, 0, sizeof(ia));
    return conf_ip_allow_yaml_parse(&ia, f, &errs);
}

/* Debian 12's /etc/trafficserver/ip_allow.yaml (trafficserver 9.2.5), as
 * shipped, comments shortened. */
static const char debian_ip_allow_yaml[] =
    "# YAML\n"
    "ip_allow:\n"
    "  - apply: in\n"
    "    ip_addrs: 127.0.0.1\n"
    "    action: allow\n"
    "    methods: ALL\n"
    "  - apply: in\n"
    "    ip_addrs: ::1\n"
    "    action: allow\n"
    "    methods: ALL\n"
    "  - apply: in\n"
    "    ip_addrs: 0/0\n"
    "    action: deny\n"
    "    methods:\n"
    "      - PURGE\n"
    "      - PUSH\n"
    "      - DELETE\n"
    "      - TRACE\n"
    "  - apply: in\n"
    "    ip_addrs: ::/0\n"
    "    action: deny\n"
    "    methods:\n"
    "      - PURGE\n"
    "      - PUSH\n"
    "      - DELETE\n"
    "      - TRACE\n";

START_TEST(test_ip_allow_yaml_debian)
{
    ck_assert_int_eq(ip_allow_yaml(debian_ip_allow_yaml), 0);
    ck_assert_int_eq(errs.n + errs.nwarn, 0);
    ck_assert_int_eq(ia.nrules, 4);
    ck_assert_int_eq(ia.nout, 0);
    ck_assert_str_eq(ia.source, "ip_allow.yaml");
    ck_assert_int_eq(ia.rules[2].line, 11);
    ck_assert_int_eq(method_ok("127.0.0.1", "PURGE", 0), 1);
    ck_assert_int_eq(method_ok("127.0.0.1", "TRACE", 0), 1);
    ck_assert_int_eq(method_ok("::1", "DELETE", 0), 1);
    ck_assert_int_eq(method_ok("127.0.0.2", "PURGE", 0), 0);
    ck_assert_int_eq(method_ok("127.0.0.2", "TRACE", 0), 0);
    ck_assert_int_eq(method_ok("127.0.0.2", "GET", 0), 1);
    ck_assert_int_eq(method_ok("192.0.2.1", "POST", 0), 1);
    ck_assert_int_eq(method_ok("192.0.2.1", "PROPFIND", 0), 1);
    ck_assert_int_eq(method_ok("2001:db8::1", "PUSH", 0), 0);
    ck_assert_int_eq(method_ok("2001:db8::1", "PUT", 0), 1);
    conf_ip_allow_free(&ia);
}
END_TEST

START_TEST(test_ip_allow_yaml_forms)
{
    /* one rule as a mapping (ATS allows it), flow style, quoting, ATS 10's
     * action names, several ranges, anchors */
    ck_assert_int_eq(ip_allow_yaml(
        "ip_allow: {apply: in, ip_addrs: [10.0.0.0/8, '::1'], action: allow,"
        " methods: [GET, \"HEAD\"]}\n"), 0);
    ck_assert_int_eq(ia.nrules, 2);
    ck_assert_int_eq(method_ok("10.9.9.9", "HEAD", 0), 1);
    ck_assert_int_eq(method_ok("::1", "GET", 0), 1);
    ck_assert_int_eq(method_ok("::1", "POST", 0), 0);
    conf_ip_allow_free(&ia);

    ck_assert_int_eq(ip_allow_yaml(
        "ip_allow:\n"
        "  - apply: OUT\n"
        "    ip_addrs: &private\n"
        "      - 10.0.0.0-10.255.255.255\n"
        "      - 192.168.0.0/16\n"
        "    action: set_deny\n"
        "    methods: [DELETE, PURGE]\n"
        "  - apply: in\n"
        "    ip_addrs: *private\n"
        "    action: set_allow\n"
        "  - apply: out\n"
        "    ip_addrs: 127.0.0.0/8\n"
        "    action: deny\n"
        "    methods: all\n"), 0);
    ck_assert_int_eq(ia.nrules, 2);
    ck_assert_int_eq(ia.nout, 3);
    ck_assert_int_eq(method_ok("10.1.1.1", "DELETE", 1), 0);
    ck_assert_int_eq(method_ok("10.1.1.1", "GET", 1), 1);
    ck_assert_int_eq(method_ok("192.168.3.4", "PURGE", 1), 0);
    ck_assert_int_eq(method_ok("127.0.0.5", "GET", 1), 0);
    ck_assert_int_eq(method_ok("8.8.8.8", "DELETE", 1), -1);  /* no rule holds it */
    ck_assert_int_eq(method_ok("192.168.3.4", "DELETE", 0), 1);
    ck_assert_int_eq(method_ok("8.8.8.8", "GET", 0), 0);
    conf_ip_allow_free(&ia);
}
END_TEST

START_TEST(test_ip_allow_yaml_errors)
{
    ck_assert_int_eq(ip_allow_yaml(
        "ip_allow:\n"                                   /* 1 */
        "  - apply: in\n"                               /* 2 */
        "    ip_addrs: 10.0.0.1\n"                      /* 3 */
        "    action: allow\n"                           /* 4 */
        "    method: GET\n"                             /* 5 */
        "  - apply: sideways\n"                         /* 6 */
        "    ip_addrs: 10.0.0.1\n"                      /* 7 */
        "    action: allow\n"                           /* 8 */
        "  - apply: in\n"                               /* 9 */
        "    ip_addrs: [10.0.0.1, 10.0.0.300]\n"        /* 10 */
        "    action: allow\n"                           /* 11 */
        "  - apply: in\n"                               /* 12 */
        "    ip_addrs: 10.0.0.1\n"                      /* 13 */
        "    action: Allow\n"                           /* 14 */
        "  - apply: in\n"                               /* 15 */
        "    action: deny\n"                            /* 16 */
        "  - apply: out\n"                              /* 17 */
        "    ip_categories: ACME_INTERNAL\n"            /* 18 */
        "    action: deny\n"                            /* 19 */
        "  - apply: in\n"                               /* 20 */
        "    ip_addrs: {a: b}\n"                        /* 21 */
        "    action: deny\n"                            /* 22 */
        "  - apply: in\n"                               /* 23 */
        "    ip_addrs: 10.0.0.1\n"                      /* 24 */
        "    action: deny\n"                            /* 25 */
        "    methods: [GET, [PUT]]\n"                   /* 26 */
        "  - just a string\n"                           /* 27 */
        "ip_categories:\n"                              /* 28 */
        "  - name: X\n"                                 /* 29 */
        "other: 1\n"), -1);                             /* 30 */
    check_error("ip_allow.yaml:5: unknown key \"method\" in a rule (expected "
                "apply, ip_addrs, action, methods)");
    check_error("ip_allow.yaml:6: apply: expected in or out");
    check_error("ip_allow.yaml:10: ip_addrs \"10.0.0.300\": bad address");
    check_error("ip_allow.yaml:14: action: expected allow or deny (or "
                "set_allow, set_deny)");
    check_error("ip_allow.yaml:15: a rule needs ip_addrs:");
    check_error("ip_allow.yaml:18: ip_categories (ATS 10) is not supported; "
                "this rule could not be enforced");
    check_error("ip_allow.yaml:21: ip_addrs: expected a value or a sequence "
                "of values, not a mapping");
    check_error("ip_allow.yaml:26: methods: expected a value, not a sequence");
    check_error("ip_allow.yaml:27: a rule is a mapping (apply, ip_addrs, "
                "action, methods), not a scalar");
    check_error("ip_allow.yaml:28: ip_categories (ATS 10) is not supported");
    check_error("ip_allow.yaml:30: unknown top-level key \"other\" (only "
                "ip_allow is read)");
    ck_assert_int_eq(errs.n, 11);
    conf_ip_allow_free(&ia);

    ck_assert_int_eq(ip_allow_yaml("ip_allow:\n  - apply: in\n    ip_addrs: x\n"
                                   "   action: allow\n"), -1);
    check_error("ip_allow.yaml:4: did not find expected '-' indicator (while "
                "parsing a block collection started on line 2)");
    conf_ip_allow_free(&ia);
    ck_assert_int_eq(ip_allow_yaml("ip_allow: []\n"), -1);
    check_error("ip_allow.yaml:1: ip_allow: no rules");
    conf_ip_allow_free(&ia);
    ck_assert_int_eq(ip_allow_yaml("# nothing\n"), -1);
    check_error("ip_allow.yaml: empty: no ip_allow rules");
    conf_ip_allow_free(&ia);
    ck_assert_int_eq(ip_allow_yaml("- apply: in\n"), -1);
    check_error("ip_allow.yaml:1: the top level is a mapping with an ip_allow "
                "key, not a sequence");
    conf_ip_allow_free(&ia);
    ck_assert_int_eq(ip_allow_yaml("ip_allow: allow\n"), -1);
    check_error("ip_allow.yaml:1: ip_allow: expected a sequence of rules, not "
                "a scalar");
    conf_ip_allow_free(&ia);
    ck_assert_int_eq(ip_allow_yaml("ip_allow:\n  - apply: in\n    ip_addrs: x\n"
                                   "    ip_addrs: y\n    action: deny\n"), -1);
    check_error("ip_allow.yaml:4: duplicate key \"ip_addrs\" (first on line 3)");
    conf_ip_allow_free(&ia);
}
END_TEST

/* conf_load(): ip_allow.yaml when it exists, never both files. */
START_TEST(test_load_ip_allow_yaml)
{
    struct conf *c;

    put("records.config", "");
    put("remap.config", "");
    put("ip_allow.yaml", debian_ip_allow_yaml);
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->ip_allow.nrules, 4);
    ck_assert_str_eq(c->ip_allow.source, "ip_allow.yaml");
    conf_free(c);

    put("ip_allow.config", "src_ip=::1 action=ip_allow\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_null(c);
    check_error("ip_allow.yaml: both %s/ip_allow.yaml and %s/ip_allow.config "
                "exist; ATS 9 reads only ip_allow.yaml, ATS 8 only "
                "ip_allow.config: remove the one that is not meant",
                tmpdir, tmpdir);
    ck_assert_int_eq(errs.n, 1);
}
END_TEST

/* ---------------------------------------------------------------------
 * remap.config ACL filters, named filters, map_with_recv_port,
 * regex_redirect (issue 18)
 */
static struct sockaddr_storage acl_peer, acl_local;

/* An address (v4 or v6) as a sockaddr in *ss. */
static const struct sockaddr *
acl_addr(struct sockaddr_storage *ss, const char *a)
{
    memset(ss, 0, sizeof(*ss));
    if (strchr(a, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, a, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, a, &s4->sin_addr), 1);
    }
    return (const struct sockaddr *)ss;
}

/* Does rule i let peer (connected to local, NULL: unknown) use method? */
static int
acl_ok(int i, const char *peer, const char *local, const char *method)
{
    const char *by;

    ck_assert_int_lt(i, rm.nrules);
    return conf_remap_acl_allows(&rm, &rm.rules[i], acl_addr(&acl_peer, peer),
                                 local != NULL ? acl_addr(&acl_local, local) : NULL,
                                 method, strlen(method), &by);
}

START_TEST(test_remap_acl_legacy)
{
    int rc = remap(
        "map http://a/ http://o/ @action=deny @src_ip=127.0.0.1\n"
        "map http://b/ http://o/ @action=allow @src_ip=10.0.0.0/8 "
        "@src_ip=192.168.1.1-192.168.1.9 @src_ip=2001:db8::/32\n"
        "map http://c/ http://o/ @action=deny @src_ip=~127.0.0.0/8\n"
        "map http://d/ http://o/ @action=allow @method=GET @method=head\n"
        "map http://e/ http://o/ @action=deny @method=post\n"
        "map http://f/ http://o/ @in_ip=127.0.0.1\n"
        "map http://g/ http://o/ @action=allow @internal\n"
        "map http://h/ http://o/ @action=deny @internal\n"
        "map http://i/ http://o/ @action=deny @src_ip=all\n"
        "map http://j/ http://o/ @action=deny @src_ip=127.0.0.1 @method=PURGE\n"
        "map http://k/ http://o/ @action=1 @src_ip=10.0.0.1\n"
        "map http://l/ http://o/ @action=add_deny @src_ip=10.0.0.1\n"
        "map http://m/ http://o/\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(rm.nrules, 13);
    /* deny from one address: that one refused, a neighbour allowed */
    ck_assert_int_eq(acl_ok(0, "127.0.0.1", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(0, "127.0.0.2", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(0, "::ffff:127.0.0.1", NULL, "GET"), 0);   /* v4-mapped */
    /* allow: only the listed ranges (any of them) */
    ck_assert_int_eq(acl_ok(1, "10.200.0.1", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(1, "192.168.1.9", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(1, "192.168.1.10", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(1, "2001:db8::5", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(1, "::1", NULL, "GET"), 0);
    /* ~: everyone outside loopback is denied */
    ck_assert_int_eq(acl_ok(2, "127.0.0.9", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(2, "10.0.0.1", NULL, "GET"), 0);
    /* methods: an allow list, a deny list */
    ck_assert_int_eq(acl_ok(3, "1.2.3.4", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(3, "1.2.3.4", NULL, "HEAD"), 1);
    ck_assert_int_eq(acl_ok(3, "1.2.3.4", NULL, "POST"), 0);
    ck_assert_int_eq(acl_ok(4, "1.2.3.4", NULL, "POST"), 0);
    ck_assert_int_eq(acl_ok(4, "1.2.3.4", NULL, "PUT"), 1);
    /* @in_ip alone: an allow filter on the local address */
    ck_assert_int_eq(rm.rules[5].acl_local, 1);
    ck_assert_int_eq(rm.rules[0].acl_local, 0);
    ck_assert_int_eq(acl_ok(5, "1.2.3.4", "127.0.0.1", "GET"), 1);
    ck_assert_int_eq(acl_ok(5, "1.2.3.4", "127.0.0.2", "GET"), 0);
    ck_assert_int_eq(acl_ok(5, "1.2.3.4", NULL, "GET"), 0);
    /* @internal matches no request from outside */
    ck_assert_int_eq(acl_ok(6, "127.0.0.1", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(7, "127.0.0.1", NULL, "GET"), 1);
    /* all: both families */
    ck_assert_int_eq(acl_ok(8, "1.2.3.4", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(8, "::1", NULL, "GET"), 0);
    /* address and method together */
    ck_assert_int_eq(acl_ok(9, "127.0.0.1", NULL, "PURGE"), 0);
    ck_assert_int_eq(acl_ok(9, "127.0.0.1", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(9, "127.0.0.2", NULL, "PURGE"), 1);
    /* ATS 9's 1/0 and ATS 10's add_ forms, legacy: plain allow / deny */
    ck_assert_int_eq(acl_ok(10, "10.0.0.1", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(10, "10.0.0.2", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(11, "10.0.0.1", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(11, "10.0.0.2", NULL, "GET"), 1);
    /* a rule without filters has none */
    ck_assert_int_eq(rm.rules[12].nacl, 0);
    ck_assert_ptr_null(rm.rules[12].acl);
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_named_filters)
{
    put("inc.config",
        ".activatefilter no_purge\n"
        "map http://inc/ http://o/\n"
        ".deactivatefilter no_purge\n");
    int rc = remap(
        ".definefilter no_purge @action=deny @method=PURGE\n"
        ".definefilter local_only @action=allow @src_ip=127.0.0.0/8\n"
        "map http://a/ http://o/\n"                         /* 0: none */
        ".activatefilter no_purge\n"
        "map http://b/ http://o/\n"                         /* 1: no_purge */
        ".activatefilter local_only\n"
        "map http://c/ http://o/ @action=deny @method=DELETE\n" /* 2: in-line, no_purge, local_only */
        ".deactivatefilter no_purge\n"
        "map http://d/ http://o/\n"                         /* 3: local_only */
        ".activatefilter no_purge\n"
        "map http://e/ http://o/\n"                         /* 4: local_only, no_purge */
        ".deletefilter local_only\n"
        ".deletefilter never_defined\n"
        "map http://f/ http://o/\n"                         /* 5: no_purge */
        ".deactivatefilter no_purge\n"
        ".include inc.config\n"                             /* 6: no_purge */
        "map http://g/ http://o/\n"                         /* 7: none */
        ".definefilter local_only @src_ip=10.0.0.1\n"
        ".definefilter local_only @action=deny\n"           /* adds to it (ATS) */
        ".activatefilter local_only\n"
        "map http://h/ http://o/\n"                         /* 8: deny 10.0.0.1 */
        ".activatefilter ip_allow\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(rm.nrules, 9);
    ck_assert_int_eq(rm.rules[0].nacl, 0);
    ck_assert_int_eq(rm.rules[1].nacl, 1);
    ck_assert_str_eq(rm.rules[1].acl[0].name, "no_purge");
    ck_assert_int_eq(rm.rules[2].nacl, 3);
    ck_assert_ptr_null(rm.rules[2].acl[0].name);            /* in-line first */
    ck_assert_str_eq(rm.rules[2].acl[1].name, "no_purge");
    ck_assert_str_eq(rm.rules[2].acl[2].name, "local_only");
    ck_assert_int_eq(rm.rules[3].nacl, 1);
    ck_assert_str_eq(rm.rules[3].acl[0].name, "local_only");
    ck_assert_int_eq(rm.rules[4].nacl, 2);                  /* activation order */
    ck_assert_str_eq(rm.rules[4].acl[0].name, "local_only");
    ck_assert_str_eq(rm.rules[4].acl[1].name, "no_purge");
    ck_assert_int_eq(rm.rules[5].nacl, 1);
    ck_assert_int_eq(rm.rules[6].nacl, 1);                  /* included file */
    ck_assert_str_eq(rm.rules[6].acl[0].name, "no_purge");
    ck_assert_int_eq(rm.rules[7].nacl, 0);
    ck_assert_int_eq(rm.rules[8].nacl, 1);

    ck_assert_int_eq(acl_ok(1, "1.2.3.4", NULL, "PURGE"), 0);
    ck_assert_int_eq(acl_ok(1, "1.2.3.4", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(2, "127.0.0.1", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(2, "127.0.0.1", NULL, "DELETE"), 0);  /* in-line */
    ck_assert_int_eq(acl_ok(2, "127.0.0.1", NULL, "PURGE"), 0);   /* no_purge */
    ck_assert_int_eq(acl_ok(2, "10.0.0.1", NULL, "GET"), 0);      /* local_only */
    ck_assert_int_eq(acl_ok(3, "127.0.0.1", NULL, "PURGE"), 1);
    ck_assert_int_eq(acl_ok(3, "10.0.0.1", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(5, "10.0.0.1", NULL, "GET"), 1);      /* deleted */
    ck_assert_int_eq(acl_ok(8, "10.0.0.1", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(8, "10.0.0.2", NULL, "GET"), 1);
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_filter_errors)
{
    int rc = remap(
        ".activatefilter nope\n"
        ".deactivatefilter nope\n"
        ".definefilter empty\n"
        ".definefilter\n"
        ".definefilter bad @action=deny @plugin=x.so\n"
        ".deactivatefilter ip_allow\n"
        ".activatefilter empty extra\n");

    ck_assert_int_eq(rc, -1);
    check_error("remap.config:1: .activatefilter: undefined filter \"nope\"");
    check_error("remap.config:2: .deactivatefilter: undefined filter \"nope\"");
    check_error("remap.config:3: .definefilter empty: no filter options");
    check_error("remap.config:4: .definefilter: missing filter name");
    check_error("remap.config:5: unknown option \"@plugin=x.so\"");
    check_error("remap.config:6: .deactivatefilter ip_allow: lifting ip_allow.config for "
                "some rules is not supported (Cistern checks it before any rule is chosen)");
    check_error("remap.config:7: .activatefilter empty: unexpected \"extra\"");
    ck_assert_int_eq(errs.n, 7);
    conf_remap_free(&rm);
}
END_TEST

/* ATS 10's modern policy (acl_behavior_policy 1): the first filter whose
 * addresses match decides; allow and deny are errors. */
START_TEST(test_remap_acl_modern)
{
    const char *f = put("remap.config",
        "map http://a/ http://o/ @action=deny @src_ip=127.0.0.1\n");

    memset(&rm, 0, sizeof(rm));
    rm.acl_policy = CONF_ACL_MODERN;
    ck_assert_int_eq(conf_remap_parse(&rm, f, tmpdir, &errs), -1);
    check_error("remap.config:1: \"@action=deny\": allow and deny are not valid with "
                "proxy.config.url_remap.acl_behavior_policy 1; use add_deny or set_deny");
    conf_remap_free(&rm);
    conf_errors_free(&errs);
    memset(&errs, 0, sizeof(errs));

    f = put("remap.config",
        ".definefilter get_only @action=set_allow @method=GET\n"
        ".activatefilter get_only\n"
        "map http://a/ http://o/ @action=set_allow @src_ip=10.0.0.0/8 @method=POST\n"
        "map http://b/ http://o/ @action=add_allow @src_ip=10.0.0.0/8 @method=POST\n"
        "map http://c/ http://o/ @action=set_deny @src_ip=10.0.0.1 @method=GET\n");
    memset(&rm, 0, sizeof(rm));
    rm.acl_policy = CONF_ACL_MODERN;
    ck_assert_int_eq(conf_remap_parse(&rm, f, tmpdir, &errs), 0);
    /* a: the in-line filter decides for 10/8 (POST only), get_only for others */
    ck_assert_int_eq(acl_ok(0, "10.0.0.1", NULL, "POST"), 1);
    ck_assert_int_eq(acl_ok(0, "10.0.0.1", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(0, "1.2.3.4", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(0, "1.2.3.4", NULL, "POST"), 0);
    /* b: add_allow adds POST to what follows (get_only) */
    ck_assert_int_eq(acl_ok(1, "10.0.0.1", NULL, "POST"), 1);
    ck_assert_int_eq(acl_ok(1, "10.0.0.1", NULL, "GET"), 1);
    ck_assert_int_eq(acl_ok(1, "10.0.0.1", NULL, "PUT"), 0);
    /* c: set_deny GET for 10.0.0.1 decides (other methods allowed) */
    ck_assert_int_eq(acl_ok(2, "10.0.0.1", NULL, "GET"), 0);
    ck_assert_int_eq(acl_ok(2, "10.0.0.1", NULL, "PUT"), 1);
    ck_assert_int_eq(acl_ok(2, "10.0.0.2", NULL, "PUT"), 0);   /* get_only */
    conf_remap_free(&rm);
}
END_TEST

/* map_with_recv_port matches on the port the connection came in on, and
 * comes before every other rule; regex_redirect comes after redirect. */
START_TEST(test_remap_recv_port_and_regex_redirect)
{
    static struct conf_remap_result res;
    int rc = remap(
        "map http://a.test/ http://plain/\n"
        "map_with_recv_port http://a.test:8001/ http://p8001/\n"
        "map_with_recv_port http://a.test:8002/ http://p8002/\n"
        "regex_map_with_recv_port http://(x|y)\\.test:8003/ http://$1-8003/\n"
        "regex_redirect http://old\\.(.*)\\.z/ http://new.$1.z/\n"
        "redirect http://old.b.z/ http://exact.b.z/\n"
        "regex_redirect_temporary http://tmp\\.(.*)/ http://t.$1/\n");
    const struct conf_remap_rule *r;

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rm.has_recv_port, 1);
    r = conf_remap_find_recv(&rm, "http", "a.test", 6, 80, 8001, "/q", 2, &res);
    ck_assert_ptr_eq(r, &rm.rules[1]);
    ck_assert_str_eq(res.host, "p8001");
    r = conf_remap_find_recv(&rm, "http", "a.test", 6, 8001, 8002, "/q", 2, &res);
    ck_assert_ptr_eq(r, &rm.rules[2]);        /* the Host's port does not count */
    r = conf_remap_find_recv(&rm, "http", "a.test", 6, 80, 9999, "/q", 2, &res);
    ck_assert_ptr_eq(r, &rm.rules[0]);
    r = conf_remap_find_recv(&rm, "http", "a.test", 6, 80, 0, "/q", 2, &res);
    ck_assert_ptr_eq(r, &rm.rules[0]);        /* port unknown */
    r = conf_remap_find_recv(&rm, "http", "Y.test", 6, 80, 8003, "/q", 2, &res);
    ck_assert_ptr_eq(r, &rm.rules[3]);
    ck_assert_str_eq(res.host, "y-8003");
    /* redirect before regex_redirect, whatever the file order */
    r = conf_remap_find(&rm, "http", "old.b.z", 7, 80, "/p", 2, &res);
    ck_assert_ptr_eq(r, &rm.rules[5]);
    r = conf_remap_find(&rm, "http", "old.c.z", 7, 80, "/p", 2, &res);
    ck_assert_ptr_eq(r, &rm.rules[4]);
    ck_assert_int_eq(r->type, CONF_REMAP_REGEX_REDIRECT);
    ck_assert_str_eq(res.host, "new.c.z");
    ck_assert_str_eq(res.path, "/p");
    r = conf_remap_find(&rm, "http", "tmp.q", 5, 80, "/", 1, &res);
    ck_assert_ptr_eq(r, &rm.rules[6]);
    ck_assert_int_eq(r->type, CONF_REMAP_REGEX_REDIRECT_TEMPORARY);
    ck_assert_str_eq(res.host, "t.q");
    conf_remap_free(&rm);

    /* without recv_port rules a known port changes nothing */
    ck_assert_int_eq(remap("map http://a.test/ http://plain/\n"), 0);
    ck_assert_int_eq(rm.has_recv_port, 0);
    ck_assert_ptr_eq(conf_remap_find_recv(&rm, "http", "a.test", 6, 80, 8001, "/", 1, &res),
                     &rm.rules[0]);
    conf_remap_free(&rm);
}
END_TEST

/* records.config's acl_behavior_policy reaches the remap parser. */
START_TEST(test_load_acl_policy)
{
    struct conf *c;

    put("records.config", "CONFIG proxy.config.url_remap.acl_behavior_policy INT 1\n"
                          "CONFIG proxy.config.http.server_ports STRING 0\n");
    put("remap.config", "map http://a/ http://o/ @action=allow @src_ip=127.0.0.1\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_null(c);
    check_error("remap.config:1: \"@action=allow\": allow and deny are not valid with "
                "proxy.config.url_remap.acl_behavior_policy 1; use add_allow or set_allow");
    conf_errors_free(&errs);
    memset(&errs, 0, sizeof(errs));
    put("remap.config", "map http://a/ http://o/ @action=set_allow @src_ip=127.0.0.1\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->remap.acl_policy, CONF_ACL_MODERN);
    conf_free(c);
}
END_TEST

START_TEST(test_records_ports_ats_errors)
{
    int rc = records(
        "CONFIG proxy.config.http.server_ports STRING 80 80:ipv6 80:ipv6\n"        /* 1 */
        "CONFIG proxy.config.http.server_ports STRING 80:tr-full\n"                /* 2 */
        "CONFIG proxy.config.http.server_ports STRING 80:proto=http2;spdy\n"       /* 3 */
        "CONFIG proxy.config.http.server_ports STRING ip-in=[::1:80\n"             /* 4 */
        "CONFIG proxy.config.http.server_ports STRING ip-in=1.2.3.4:80:ipv6\n"     /* 5 */
        "CONFIG proxy.config.http.server_ports STRING 80:81\n"                     /* 6 */
        "CONFIG proxy.config.http.server_ports STRING 80:ip-out=[::1]\n"           /* 7 */
        "CONFIG proxy.config.http.proxy_protocol_allowlist STRING 10.0.0.0/33\n"   /* 8 */
        "CONFIG proxy.config.http.server_ports STRING 80:proto=\n"                /* 9 */
        "CONFIG proxy.config.acl.subjects STRING PLUGIN,PEER\n"                    /* 10 */
        "CONFIG proxy.config.acl.subjects STRING PEER,CLIENT\n");                  /* 11 */
    const char *k = "proxy.config.http.server_ports";

    ck_assert_int_eq(rc, -1);
    check_error("records.config:1: %s: \"80:ipv6\": port 80 (IPv6) is listed twice", k);
    check_error("records.config:2: %s: \"80:tr-full\": tr-full: transparent "
                "proxying is not supported", k);
    check_error("records.config:3: %s: \"80:proto=http2;spdy\": proto=spdy: "
                "protocol not supported (only http, http/1.0, http/1.1, http2, h2, h2c)", k);
    check_error("records.config:4: %s: \"ip-in=[::1:80\": an unclosed '[' or "
                "too many items", k);
    check_error("records.config:5: %s: \"ip-in=1.2.3.4:80:ipv6\": ipv4 and ipv6 "
                "conflict", k);
    check_error("records.config:6: %s: \"80:81\": two port numbers", k);
    check_error("records.config:7: %s: \"80:ip-out=[::1]\": ip-out=[::1]: a "
                "per-port outbound address is not supported (origins are "
                "reached from the system's source address)", k);
    check_error("records.config:8: proxy.config.http.proxy_protocol_allowlist: "
                "bad prefix length in \"10.0.0.0/33\"");
    check_error("records.config:9: %s: \"80:proto=\": proto= needs a protocol", k);
    check_error("records.config:10: proxy.config.acl.subjects: PLUGIN: plugins "
                "are not supported (the ACLs would run on another address)");
    check_error("records.config:11: proxy.config.acl.subjects: unknown subject "
                "\"CLIENT\" (expected PEER or PROXY)");
    ck_assert_int_eq(errs.n, 11);
    ck_assert_int_eq(rec.nports, 1);    /* the default, untouched */
    conf_records_free(&rec);
}
END_TEST

/* ---------------------------------------------------------------------
 * cache.config (issue 18, policy)
 */
static struct conf_cache ccfg;

static int
cache_config(const char *text)
{
    memset(&ccfg, 0, sizeof(ccfg));
    return conf_cache_parse(&ccfg, put("cache.config", text), &errs);
}

/* Match a GET of http://host:port/path from 10.0.0.1 at noon. */
static int
cc_match(const char *scheme, const char *host, int port, const char *path,
         const char *method, struct conf_cache_result *res)
{
    struct sockaddr_in sin;
    char url[512];
    struct conf_cache_req q = {
        .scheme = scheme, .host = host, .hostlen = strlen(host), .port = port,
        .path = path, .pathlen = strlen(path), .method = method,
        .src = (const struct sockaddr *)&sin, .tod = 12 * 3600,
    };

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(0x0a000001);
    snprintf(url, sizeof(url), "%s://%s%s", scheme, host, path);
    q.url = url;
    return conf_cache_match(&ccfg, &q, res);
}

START_TEST(test_cache_duration)
{
    int v = -1;

    ck_assert_int_eq(conf_parse_duration("1d2h3m4s", &v), 0);
    ck_assert_int_eq(v, 93784);
    ck_assert_int_eq(conf_parse_duration("90", &v), 0);
    ck_assert_int_eq(v, 90);
    ck_assert_int_eq(conf_parse_duration("5m30", &v), 0);
    ck_assert_int_eq(v, 330);
    ck_assert_int_eq(conf_parse_duration("2w", &v), 0);
    ck_assert_int_eq(v, 14 * 86400);
    ck_assert_int_eq(conf_parse_duration("0s", &v), 0);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(conf_parse_duration("", &v), -1);
    ck_assert_int_eq(conf_parse_duration("1x", &v), -1);
    ck_assert_int_eq(conf_parse_duration("h", &v), -1);
    ck_assert_int_eq(conf_parse_duration("-5s", &v), -1);
    ck_assert_int_eq(conf_parse_duration("1d d", &v), -1);
    ck_assert_int_eq(conf_parse_duration("99999999999s", &v), -1);
}
END_TEST

START_TEST(test_cache_config_good)
{
    int rc = cache_config(
        "# comment\n"
        "dest_domain=example.com action=never-cache\n"
        "dest_host=static.test suffix=gif,JPG prefix=/img/ ttl-in-cache=1d2h\n"
        "url_regex=\"^http://a\\.test/x [0-9]+$\" revalidate=30m\n"
        "host_regex=^cdn[0-9]*\\.test$ port=80-8080 scheme=http method=get "
        "time=08:00-18:30 src_ip=10.0.0.0/8 internal=false action=ignore-no-cache\n"
        "dest_domain=old.test action=cluster-cache-local\n"
        "dest_domain=c.test action=ignore-server-no-cache cache-responses-to-cookies=0\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(ccfg.nrules, 6);
    ck_assert_int_eq(ccfg.need_url, 1);
    ck_assert_int_eq(ccfg.rules[0].sel.primary, CONF_SEL_DOMAIN);
    ck_assert_int_eq(ccfg.rules[0].action, CONF_CC_NEVER_CACHE);
    ck_assert_int_eq(ccfg.rules[0].line, 2);
    ck_assert_int_eq(ccfg.rules[1].action, CONF_CC_TTL_IN_CACHE);
    ck_assert_int_eq(ccfg.rules[1].secs, 93600);
    ck_assert_str_eq(ccfg.rules[1].sel.prefix, "/img/");
    ck_assert_int_eq(ccfg.rules[2].sel.primary, CONF_SEL_URL_REGEX);
    ck_assert_int_eq(ccfg.rules[2].secs, 1800);
    ck_assert_int_eq(ccfg.rules[3].sel.port_lo, 80);
    ck_assert_int_eq(ccfg.rules[3].sel.port_hi, 8080);
    ck_assert_int_eq(ccfg.rules[3].sel.tod_lo, 8 * 3600);
    ck_assert_int_eq(ccfg.rules[3].sel.tod_hi, 18 * 3600 + 1800);
    ck_assert_int_eq(ccfg.rules[5].cookies, 0);
    conf_cache_free(&ccfg);
}
END_TEST

START_TEST(test_cache_config_errors)
{
    int rc = cache_config(
        "dest_ip=10.0.0.1 action=never-cache\n"
        "dest_domain=a.test pin-in-cache=1h\n"
        "dest_domain=a.test action=never-cache ttl-in-cache=1h\n"
        "dest_domain=a.test action=sometimes\n"
        "dest_domain=a.test\n"
        "suffix=gif action=never-cache\n"
        "dest_domain=a.test bogus=1 action=never-cache\n"
        "dest_domain=a.test port=1 port=2 action=never-cache\n"
        "dest_domain=a.test ttl-in-cache=1y\n"
        "dest_domain=a.test tag=x action=never-cache\n"
        "url_regex=( action=never-cache\n"
        "dest_domain=a.test time=8-9 action=never-cache\n"
        "dest_domain=a.test cache-responses-to-cookies=5 action=never-cache\n"
        "dest_domain=a.test src_ip=nope action=never-cache\n"
        "dest_domain=a.test action\n"
        "dest_domain=a.test dest_domain=b.test action=never-cache\n");

    ck_assert_int_eq(rc, -1);
    ck_assert_int_eq(ccfg.nrules, 0);
    ck_assert_int_eq(errs.n, 16);
    check_error("cache.config:1: dest_ip=10.0.0.1: not supported: Cistern decides what "
                "to cache before it resolves the origin; use dest_domain= or host_regex=");
    check_error("cache.config:2: pin-in-cache=1h: not supported: Cistern's eviction "
                "cannot keep an object in the cache");
    check_error("cache.config:3: ttl-in-cache: a line has one directive (action=, "
                "ttl-in-cache= or revalidate=)");
    check_error("cache.config:5: no directive (action=, ttl-in-cache= or revalidate=)");
    check_error("cache.config:6: no primary destination (dest_domain=, dest_host=, "
                "host_regex= or url_regex=)");
    check_error("cache.config:7: unknown specifier \"bogus\"");
    check_error("cache.config:8: port= given twice (each secondary specifier appears "
                "at most once)");
    check_error("cache.config:9: ttl-in-cache=1y: not a time (e.g. 90, 30s, 1d2h3m4s)");
    check_error("cache.config:12: time=8-9: expected HH:MM-HH:MM");
    check_error("cache.config:15: expected label=value");
    check_error("cache.config:16: dest_domain=: a line has one primary destination");
    conf_cache_free(&ccfg);
}
END_TEST

START_TEST(test_cache_config_match)
{
    struct conf_cache_result r;
    int rc = cache_config(
        "dest_domain=example.com suffix=.js revalidate=7d\n"          /* 1 */
        "dest_domain=example.com revalidate=1d\n"                     /* 2 */
        "dest_domain=example.com prefix=nocache action=never-cache\n" /* 3 */
        "url_regex=example\\.com/nocache/keep ttl-in-cache=1h\n"      /* 4 */
        "dest_domain=example.com action=ignore-client-no-cache\n"     /* 5 */
        "host_regex=^www\\. action=ignore-server-no-cache\n"          /* 6 */
        "dest_domain=p.test port=8080 scheme=https method=POST src_ip=10.0.0.0/8 "
        "time=11:00-13:00 action=never-cache\n"                       /* 7 */
        "dest_domain=q.test internal=true action=never-cache\n"       /* 8 */
        "dest_domain=q.test time=00:00-01:00 action=never-cache\n"    /* 9 */
        "dest_domain=q.test src_ip=192.168.0.1 action=never-cache\n"  /* 10 */
        "dest_domain=r.test action=never-cache cache-responses-to-cookies=2\n" /* 11 */
        "dest_domain=r.test action=standard-cache\n");                /* 12 */

    ck_assert_int_eq(rc, 0);
    /* the earliest matching line of a kind wins (ATS's code) */
    ck_assert_int_eq(cc_match("http", "www.example.com", 80, "/a/b.JS?x=1", "GET", &r), 4);
    ck_assert_int_eq(r.revalidate, 7 * 86400);
    ck_assert_int_eq(r.ignore_client_no_cache, 1);
    ck_assert_int_eq(r.ignore_server_no_cache, 1);
    ck_assert_int_eq(r.never_cache, 0);
    ck_assert_int_eq(r.cookies, -1);
    cc_match("http", "example.com", 80, "/b.css", "GET", &r);
    ck_assert_int_eq(r.revalidate, 86400);
    ck_assert_int_eq(r.ignore_server_no_cache, 0);
    /* a domain is itself or a subdomain, never a longer name */
    ck_assert_int_eq(cc_match("http", "badexample.com", 80, "/b.js", "GET", &r), 0);
    ck_assert_int_eq(r.revalidate, -1);
    /* prefix= needs no leading '/'; the query is not the path */
    cc_match("http", "example.com", 80, "/nocache/x", "GET", &r);
    ck_assert_int_eq(r.never_cache, 1);
    ck_assert_int_eq(r.ttl_in_cache, 0);
    cc_match("http", "example.com", 80, "/x?/nocache", "GET", &r);
    ck_assert_int_eq(r.never_cache, 0);
    /* ttl-in-cache cancels never-cache, even from a later line */
    cc_match("http", "example.com", 80, "/nocache/keep", "GET", &r);
    ck_assert_int_eq(r.never_cache, 0);
    ck_assert_int_eq(r.ttl_in_cache, 3600);
    /* every secondary must hold */
    ck_assert_int_eq(cc_match("https", "p.test", 8080, "/", "post", &r), 1);
    ck_assert_int_eq(r.never_cache, 1);
    ck_assert_int_eq(cc_match("http", "p.test", 8080, "/", "POST", &r), 0);
    ck_assert_int_eq(cc_match("https", "p.test", 8081, "/", "POST", &r), 0);
    ck_assert_int_eq(cc_match("https", "p.test", 8080, "/", "GET", &r), 0);
    /* internal=true, another time, another client: none of ours */
    ck_assert_int_eq(cc_match("http", "q.test", 80, "/", "GET", &r), 0);
    /* never-cache then standard-cache: the earlier line wins; the tweak */
    cc_match("http", "r.test", 80, "/", "GET", &r);
    ck_assert_int_eq(r.never_cache, 1);
    ck_assert_int_eq(r.cookies, 2);
    conf_cache_free(&ccfg);
}
END_TEST

/* proxy.config.dns.nameservers: ATS's list syntax, ports, IPv6 brackets. */
START_TEST(test_dns_servers)
{
    static const struct { const char *list; int n; int port0, family0; } good[] = {
        { "NULL", 0, 0, 0 },
        { "127.0.0.1", 1, 53, AF_INET },
        { "127.0.0.1:5353", 1, 5353, AF_INET },
        { "::1", 1, 53, AF_INET6 },
        { "[::1]:54", 1, 54, AF_INET6 },
        { "10.0.0.1 10.0.0.2,10.0.0.3;[2001:db8::1]:53", 4, 53, AF_INET },
        { " ,; 192.0.2.1 ;", 1, 53, AF_INET },
    };
    static const char *const bad[] = {
        "", " , ", "ns.example", "127.0.0.1:0", "127.0.0.1:65536", "1.2.3.4:x",
        "[::1", "[::1]x", "[1.2.3.4]:53:", "1.2.3.4:53:53",
        "1 2 3 4 5 6 7 8 9",
        "1.1.1.1 1.1.1.2 1.1.1.3 1.1.1.4 1.1.1.5 1.1.1.6 1.1.1.7 1.1.1.8 1.1.1.9",
    };
    struct sockaddr_storage ss[CONF_DNS_SERVERS_MAX];
    const char *why;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        why = NULL;
        ck_assert_msg(conf_dns_servers(good[i].list, ss, CONF_DNS_SERVERS_MAX, &why)
                      == good[i].n, "%s: %s", good[i].list, why ? why : "");
        if (good[i].n == 0)
            continue;
        ck_assert_int_eq(ss[0].ss_family, good[i].family0);
        ck_assert_int_eq(ntohs(good[i].family0 == AF_INET
                               ? ((struct sockaddr_in *)&ss[0])->sin_port
                               : ((struct sockaddr_in6 *)&ss[0])->sin6_port),
                         good[i].port0);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        ck_assert_msg(conf_dns_servers(bad[i], ss, CONF_DNS_SERVERS_MAX, &why) == -1,
                      "accepted \"%s\"", bad[i]);
        ck_assert_ptr_nonnull(why);
    }
}
END_TEST

START_TEST(test_cache_negative_list)
{
    struct conf_records r;

    conf_records_defaults(&r);
    memset(&ccfg, 0, sizeof(ccfg));
    ck_assert_int_eq(conf_cache_records(&ccfg, &r, "records.config", &errs), 0);
    ck_assert(conf_cache_negative(&ccfg, 404));
    ck_assert(conf_cache_negative(&ccfg, 204));
    ck_assert(conf_cache_negative(&ccfg, 504));
    ck_assert(!conf_cache_negative(&ccfg, 200));
    ck_assert(!conf_cache_negative(&ccfg, 405));
    free(r.negative_caching_list);
    r.negative_caching_list = strdup("404, 410 503");
    ck_assert_int_eq(conf_cache_records(&ccfg, &r, "records.config", &errs), 0);
    ck_assert(conf_cache_negative(&ccfg, 410));
    ck_assert(!conf_cache_negative(&ccfg, 204));
    free(r.negative_caching_list);
    r.negative_caching_list = strdup("404 four");
    ck_assert_int_eq(conf_cache_records(&ccfg, &r, "records.config", &errs), -1);
    ck_assert_int_eq(errs.n, 1);
    conf_records_free(&r);
}
END_TEST


/* ---------------------------------------------------------------------
 * parent.config (issue 20)
 */
static struct conf_parent_req
pq(const char *host, int port, const char *path)
{
    struct conf_parent_req q;

    memset(&q, 0, sizeof(q));
    q.scheme = "http";
    q.host = host;
    q.hostlen = strlen(host);
    q.port = port;
    q.path = path;
    q.pathlen = strlen(path);
    q.method = "GET";
    return q;
}

START_TEST(test_parent_parse)
{
    struct conf_parents pp;
    const struct conf_parent_rule *r;
    struct conf_parent_req q;
    const char *f = put("parent.config",
        "# tier\n"
        "dest_host=img.test port=8080 parent=\"p1.test:3128|2.5, p2.test:3128;[::1]:81&x\" "
        "round_robin=consistent_hash go_direct=false qstring=ignore "
        "secondary_parent=\"s1.test:80\" secondary_mode=2\n"
        "dest_domain=pool.test parent=\"10.0.0.1:80;10.0.0.2:80\" round_robin=strict "
        "parent_is_proxy=false parent_retry=both unavailable_server_retry_responses=\"502,503\" "
        "max_unavailable_server_retries=2\n"
        "dest_ip=192.168.1.0/24 go_direct=true\n"
        "url_regex=^http://x\\.test/a/ prefix=/a parent=\"p3:1\" round_robin=latched\n"
        "dest_domain=. scheme=http parent=\"dflt:8080\"\n");

    memset(&pp, 0, sizeof(pp));
    ck_assert_int_eq(conf_parent_parse(&pp, f, &errs), 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(pp.nrules, 5);
    r = &pp.rules[0];
    ck_assert_int_eq(r->nprimary, 3);
    ck_assert_int_eq(r->nsecondary, 1);
    ck_assert_str_eq(r->hosts[0].name, "p1.test:3128");
    ck_assert(r->hosts[0].weight == 2.5);
    ck_assert_str_eq(r->hosts[2].host, "[::1]");
    ck_assert_int_eq(r->hosts[2].port, 81);
    ck_assert(r->hosts[2].hid == conf_parent_hash("x", 1));
    ck_assert_int_eq(r->rr, CONF_PP_RR_HASH);
    ck_assert_int_eq(r->go_direct, 0);
    ck_assert_int_eq(r->ignore_query, 1);
    ck_assert_int_eq(r->secondary_mode, 2);
    ck_assert_int_eq(r->retry, 0);
    r = &pp.rules[1];
    ck_assert_int_eq(r->is_proxy, 0);
    ck_assert_int_eq(r->go_direct, 0);          /* ignored for origin pools */
    ck_assert_int_eq(r->rr, CONF_PP_RR_STRICT);
    ck_assert_int_eq(r->retry, CONF_PP_RETRY_SIMPLE | CONF_PP_RETRY_UNAVAIL);
    ck_assert(conf_parent_code(r->unavail_codes, 502));
    ck_assert(!conf_parent_code(r->unavail_codes, 504));
    ck_assert(conf_parent_code(r->simple_codes, 404));
    ck_assert_int_eq(r->max_unavail, 2);
    ck_assert_int_eq(pp.rules[0].max_simple, 1);

    /* first match in file order */
    q = pq("img.test", 8080, "/x");
    ck_assert_ptr_eq(conf_parent_find(&pp, &q), &pp.rules[0]);
    q = pq("img.test", 80, "/x");
    ck_assert_ptr_eq(conf_parent_find(&pp, &q), &pp.rules[4]);
    q = pq("a.pool.test", 80, "/");
    ck_assert_ptr_eq(conf_parent_find(&pp, &q), &pp.rules[1]);
    q = pq("xpool.test", 80, "/");
    ck_assert_ptr_eq(conf_parent_find(&pp, &q), &pp.rules[4]);
    q = pq("192.168.1.7", 80, "/");
    ck_assert_ptr_eq(conf_parent_find(&pp, &q), &pp.rules[2]);
    q = pq("x.test", 80, "/a/b");
    q.url = "http://x.test/a/b";
    ck_assert_ptr_eq(conf_parent_find(&pp, &q), &pp.rules[3]);
    q.url = "http://x.test/b/";
    ck_assert_ptr_eq(conf_parent_find(&pp, &q), &pp.rules[4]);
    q = pq("x.test", 80, "/");
    q.scheme = "https";
    ck_assert_ptr_null(conf_parent_find(&pp, &q));
    conf_parent_free(&pp);
}
END_TEST

START_TEST(test_parent_errors)
{
    struct conf_parents pp;
    const char *f = put("parent.config",
        "dest_domain=a parent=\"p\"\n"
        "dest_domain=a parent=\"p:0\"\n"
        "dest_domain=a parent=\"p:80|x\"\n"
        "dest_domain=a round_robin=sometimes parent=\"p:80\"\n"
        "dest_domain=a parent=\"p:80\" frobnicate=1\n"
        "parent=\"p:80\"\n"
        "dest_domain=a\n"
        "dest_domain=a go_direct=false\n"
        "dest_domain=a parent=\"p:80\" max_simple_retries=6\n"
        "dest_domain=a parent=\"p:80\" time=08:00-14:00\n"
        "dest_domain=a parent=\"p:80\" parent=\"q:80\"\n"
        "dest_domain=a parent=\"p:80\" unavailable_server_retry_responses=404\n"
        "dest_domain=a parent=\"p:80\" host_override=true\n"
        "dest_domain=a dest_host=b parent=\"p:80\"\n");

    memset(&pp, 0, sizeof(pp));
    ck_assert_int_eq(conf_parent_parse(&pp, f, &errs), -1);
    ck_assert_int_eq(errs.n, 14);
    ck_assert_int_eq(pp.nrules, 0);
    check_error("parent.config:1: parent=: \"p\": a parent needs host:port (the port is required)");
    check_error("parent.config:2: parent=: \"p:0\": the port is not 1-65535");
    check_error("parent.config:3: parent=: \"p:80|x\": the weight after '|' is not a positive number");
    check_error("parent.config:4: round_robin=sometimes: expected true, strict, false, "
                "consistent_hash or latched");
    check_error("parent.config:5: unknown label \"frobnicate\"");
    check_error("parent.config:6: no primary destination (dest_domain=, dest_host=, "
                "dest_ip=, host_regex= or url_regex=)");
    check_error("parent.config:7: every line needs parent= or go_direct=");
    check_error("parent.config:8: go_direct=false without parent=: no request it "
                "matches could be served");
    check_error("parent.config:9: max_simple_retries=6: expected 1 to 5");
    check_error("parent.config:10: time=08:00-14:00: not supported: the rest of the "
                "day's requests would take another route without a word");
    check_error("parent.config:11: parent= given twice");
    check_error("parent.config:12: unavailable_server_retry_responses=404: expected a "
                "list of 5xx status codes");
    check_error("parent.config:13: host_override=true: only false is supported");
    check_error("parent.config:14: dest_host=: a line has one primary destination");
    conf_parent_free(&pp);
}
END_TEST

/* Rendezvous hashing: balance within 1.1 of the mean over 100k uniform
 * keys, weights honoured, and removing a parent moves only its keys. */
START_TEST(test_parent_hash_balance)
{
    struct conf_parent_host h[5];
    int order[5], owner[100000], count[5], moved = 0, wrong = 0;
    char name[64];

    memset(h, 0, sizeof(h));
    for (int i = 0; i < 5; i++) {
        snprintf(h[i].name, sizeof(h[i].name), "10.0.0.%d:8080", i + 1);
        h[i].weight = 1.0;
        h[i].hid = conf_parent_hash(h[i].name, strlen(h[i].name));
    }
    for (int n = 2; n <= 5; n++) {
        memset(count, 0, sizeof(count));
        for (int k = 0; k < 100000; k++) {
            int len = snprintf(name, sizeof(name), "http://o.test/obj/%d", k);
            conf_parent_rank(h, n, conf_parent_hash(name, (size_t)len), order);
            count[order[0]]++;
        }
        int max = 0;
        for (int i = 0; i < n; i++)
            max = count[i] > max ? count[i] : max;
        double ratio = max / (100000.0 / n);
        fprintf(stderr, "parent hash: %d parents, max/mean %.4f\n", n, ratio);
        ck_assert_msg(ratio < 1.1, "%d parents: max/mean %.3f", n, ratio);
    }
    /* 4 parents, then the third leaves */
    for (int k = 0; k < 100000; k++) {
        int len = snprintf(name, sizeof(name), "http://o.test/obj/%d", k);
        conf_parent_rank(h, 4, conf_parent_hash(name, (size_t)len), order);
        owner[k] = order[0];
    }
    struct conf_parent_host h3[3] = { h[0], h[1], h[3] };
    const int map3[3] = { 0, 1, 3 };
    for (int k = 0; k < 100000; k++) {
        int len = snprintf(name, sizeof(name), "http://o.test/obj/%d", k);
        conf_parent_rank(h3, 3, conf_parent_hash(name, (size_t)len), order);
        if (map3[order[0]] != owner[k]) {
            moved++;
            wrong += owner[k] != 2;
        }
    }
    fprintf(stderr, "parent hash: one of 4 leaves: %d of 100000 keys moved, "
            "%d of them not its own\n", moved, wrong);
    ck_assert_int_eq(wrong, 0);
    ck_assert(moved > 22000 && moved < 28000);
    /* weights: 1, 2, 1 -> 25%, 50%, 25% */
    h[1].weight = 2.0;
    memset(count, 0, sizeof(count));
    for (int k = 0; k < 100000; k++) {
        int len = snprintf(name, sizeof(name), "k%d", k);
        conf_parent_rank(h, 3, conf_parent_hash(name, (size_t)len), order);
        count[order[0]]++;
    }
    fprintf(stderr, "parent hash: weights 1,2,1: %d %d %d\n", count[0], count[1], count[2]);
    ck_assert(count[1] > 48000 && count[1] < 52000);
    ck_assert(count[0] > 23000 && count[0] < 27000);
}
END_TEST

START_TEST(test_parent_load_and_keys)
{
    struct conf *c;

    put("records.config", "CONFIG proxy.config.http.server_ports STRING 0\n"
        "CONFIG proxy.config.http.parent_proxy.retry_time INT 5\n"
        "CONFIG proxy.config.http.parent_proxy.fail_threshold INT 2\n"
        "CONFIG proxy.config.http.forward.proxy_auth_to_parent INT 1\n");
    put("remap.config", "");
    put("parent.config", "dest_domain=. parent=\"p:8080\"\n");
    c = conf_load(tmpdir, &errs);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->parents.nrules, 1);
    ck_assert_int_eq(c->rec.parent_retry_time, 5);
    ck_assert_int_eq(c->rec.parent_fail_threshold, 2);
    ck_assert_int_eq(c->rec.parent_total_attempts, 4);
    ck_assert_int_eq(c->rec.parent_per_attempts, 2);
    ck_assert_int_eq(c->rec.parent_connect_timeout, 30);
    ck_assert_int_eq(c->rec.proxy_auth_to_parent, 1);
    ck_assert_int_eq(c->rec.uncacheable_bypass_parent, 1);
    conf_free(c);
}
END_TEST

static TCase *
parent_tcase(void)
{
    TCase *tc = tcase_create("parent");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_parent_parse);
    tcase_add_test(tc, test_parent_errors);
    tcase_add_test(tc, test_parent_hash_balance);
    tcase_add_test(tc, test_parent_load_and_keys);
    return tc;
}


/* ---------------------------------------------------------------------
 * logging.yaml (issue 25, conf/logging.c)
 */
static int
errs_contain(const char *needle)
{
    for (int i = 0; i < errs.nstored; i++)
        if (strstr(errs.msgs[i], needle) != NULL)
            return 1;
    return 0;
}

START_TEST(test_logging_compile)
{
    struct conf_logging    lg;
    struct conf_log_format f;
    const char            *why = NULL;
    size_t                 col = 0;

    memset(&lg, 0, sizeof(lg));
    memset(&f, 0, sizeof(f));
    ck_assert_int_eq(conf_logging_compile(&lg, &f, "a %<chi> b%<{User-Agent}cqh>%<pssc>",
                                          &why, &col), 0);
    ck_assert_int_eq(f.nops, 5);
    ck_assert_int_eq(f.ops[0].kind, CONF_LF_LIT);
    ck_assert_int_eq(f.ops[0].len, 2);
    ck_assert_int_eq(memcmp(f.lit + f.ops[0].off, "a ", 2), 0);
    ck_assert_int_eq(f.ops[1].kind, CONF_LF_CHI);
    ck_assert_int_eq(f.ops[2].kind, CONF_LF_LIT);
    ck_assert_int_eq(f.ops[3].kind, CONF_LF_CQH);
    ck_assert_int_eq(f.ops[4].kind, CONF_LF_PSSC);
    ck_assert_int_eq(lg.nhdrs, 1);
    ck_assert_str_eq(lg.hdrs[f.ops[3].hdr], "User-Agent");
    ck_assert(lg.need & CONF_LOGN_CQH);
    free(f.ops);
    free(f.lit);
    /* a literal '%' not before '<' is text; aliases share a field */
    memset(&f, 0, sizeof(f));
    ck_assert_int_eq(conf_logging_compile(&lg, &f, "100% %<pqu>=%<cqu>", &why, &col), 0);
    ck_assert_int_eq(f.ops[1].kind, CONF_LF_CQU);
    ck_assert_int_eq(f.ops[3].kind, CONF_LF_CQU);
    ck_assert(lg.need & CONF_LOGN_MAPPED);
    free(f.ops);
    free(f.lit);
    /* errors, with the byte where they are */
    static const struct { const char *spec; const char *why; size_t col; } bad[] = {
        { "x %<nosuch>", "unknown log field", 2 },
        { "%<chi> %<cqssv>", "an ATS log field Cistern does not record", 7 },
        { "%<chi", "%< without its closing >", 0 },
        { "%<cqh>", "a header field needs the header's name: %<{Name}cqh>", 0 },
        { "%<{A}chi>", "only cqh, psh and ssh take a {header name}", 0 },
        { "%<{A B}cqh>", "not a header name between { and }", 0 },
        { "%<SUM(psql)>", "aggregate fields (summary logs) are not supported", 0 },
        { "a\nb", "a control character (a newline?) in the format", 1 },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&f, 0, sizeof(f));
        ck_assert_int_eq(conf_logging_compile(&lg, &f, bad[i].spec, &why, &col), -1);
        ck_assert_str_eq(why, bad[i].why);
        ck_assert_uint_eq(col, bad[i].col);
        free(f.ops);
        free(f.lit);
    }
    conf_logging_free(&lg);
}
END_TEST

START_TEST(test_logging_yaml)
{
    struct conf_logging lg;
    const char *file = put("logging.yaml",
        "logging:\n"
        "  formats:\n"
        "    - name: f\n"
        "      format: '%<chi> %<cqhm>'\n"
        "  filters:\n"
        "    - name: nopurge\n"
        "      action: REJECT\n"
        "      condition: cqhm CASE_INSENSITIVE_MATCH purge,push\n"
        "    - name: big\n"
        "      action: accept\n"
        "      condition: psql GT 1000\n"
        "    - name: lan\n"
        "      action: accept\n"
        "      condition: chi MATCH 10.0.0.0-10.255.255.255,::1\n"
        "  logs:\n"
        "    - filename: one\n"
        "      format: f\n"
        "      filters: [nopurge, big]\n"
        "      rolling_enabled: log.roll.time\n"
        "    - filename: two.txt\n"
        "      format: f\n"
        "      mode: binary\n"
        "    - filename: stdout\n"
        "      format: f\n");

    memset(&lg, 0, sizeof(lg));
    ck_assert_int_eq(conf_logging_parse(&lg, file, "/var/log/x", &errs), 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 1);                    /* mode: binary */
    ck_assert(errs_contain("logging.yaml:22: log \"two.txt\": mode: binary"));
    ck_assert_int_eq(lg.nlogs, 3);
    ck_assert_str_eq(lg.logs[0].path, "/var/log/x/one.log");
    ck_assert_str_eq(lg.logs[1].path, "/var/log/x/two.txt");
    ck_assert_str_eq(lg.logs[2].path, "stdout");
    ck_assert_int_eq(lg.logs[0].nfilters, 2);
    ck_assert_int_eq(lg.nfilters, 3);
    ck_assert_int_eq(lg.filters[0].action, CONF_LOG_REJECT);
    ck_assert_int_eq(lg.filters[0].oper, CONF_LOG_CASE_INSENSITIVE_MATCH);
    ck_assert_int_eq(lg.filters[0].nvals, 2);
    ck_assert_str_eq(lg.filters[0].vals[1], "push");
    ck_assert_int_eq(lg.filters[1].type, CONF_LFT_INT);
    ck_assert_int_eq(lg.filters[1].oper, CONF_LOG_GT);
    ck_assert_int_eq(lg.filters[1].nums[0], 1000);
    ck_assert_int_eq(lg.filters[2].type, CONF_LFT_IP);
    ck_assert_int_eq(lg.filters[2].nvals, 2);
    ck_assert_int_eq(lg.filters[2].ips[0][1][0], 4);
    ck_assert_int_eq(lg.filters[2].ips[0][1][2], 255);
    ck_assert_int_eq(lg.filters[2].ips[1][0][0], 6);
    conf_logging_free(&lg);
}
END_TEST

START_TEST(test_logging_yaml_errors)
{
    static const struct { const char *text; const char *err; } cases[] = {
        { "logging:\n  formats:\n    - name: f\n      format: '%<bogus>'\n",
          "logging.yaml:4: format \"f\": unknown log field at \"%<bogus>\"" },
        { "logging:\n  logs:\n    - filename: a\n      format: nope\n",
          "logging.yaml:4: log \"a\": format \"nope\" is not defined" },
        { "logging:\n  filters:\n    - name: w\n      action: wipe_field_value\n"
          "      condition: cquuc CONTAIN password\n",
          "logging.yaml:4: filter \"w\": wipe_field_value is not supported" },
        { "logging:\n  filters:\n    - name: n\n      action: accept\n"
          "      condition: cqhm GT 3\n",
          "logging.yaml:5: filter \"n\": GT compares numbers; cqhm is not one" },
        { "logging:\n  filters:\n    - name: n\n      action: accept\n"
          "      condition: pssc MATCH ok\n",
          "logging.yaml:5: filter \"n\": \"ok\" is not a number" },
        { "logging:\n  filters:\n    - name: n\n      action: accept\n"
          "      condition: chi MATCH 10.0.0.1-::1\n",
          "logging.yaml:5: filter \"n\": \"10.0.0.1-::1\" is not an address" },
        { "logging:\n  formats:\n    - name: f\n      format: x\n      interval: 10\n",
          "logging.yaml:5: format \"f\": interval (a summary log) is not supported" },
        { "logging:\n  formats:\n    - name: f\n      format: x\n"
          "  logs:\n    - filename: a\n      format: f\n      colour: red\n",
          "logging.yaml:8: log: unknown key \"colour\"" },
        { "logs:\n  - filename: a\n",
          "logging.yaml:1: the top level is a mapping with one key, logging" },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct conf_logging lg;
        const char *file = put("logging.yaml", cases[i].text);

        memset(&lg, 0, sizeof(lg));
        conf_errors_free(&errs);
        memset(&errs, 0, sizeof(errs));
        ck_assert_int_eq(conf_logging_parse(&lg, file, "/l", &errs), -1);
        if (!errs_contain(cases[i].err))
            ck_abort_msg("case %zu: no \"%s\" in \"%s\"", i, cases[i].err,
                         errs.nstored ? errs.msgs[0] : "(none)");
        conf_logging_free(&lg);
    }
}
END_TEST

/* The suite's test cases, one function each (as parent_tcase above),
 * every one with the setup/teardown fixture. */
static TCase *
fixture_tcase(const char *name)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, setup, teardown);
    return tc;
}

static TCase *
common_tcase(void)
{
    TCase *tc = fixture_tcase("common");

    tcase_add_test(tc, test_errors_format);
    tcase_add_test(tc, test_parse_size);
    tcase_add_test(tc, test_path);
    return tc;
}

static TCase *
records_tcase(void)
{
    TCase *tc = fixture_tcase("records");

    tcase_add_test(tc, test_records_defaults);
    tcase_add_test(tc, test_records_good);
    tcase_add_test(tc, test_records_unknown_key_warns);
    tcase_add_test(tc, test_records_duplicate_warns);
    tcase_add_test(tc, test_records_errors);
    tcase_add_test(tc, test_records_sizes);
    tcase_add_test(tc, test_records_missing_file);
    tcase_add_test(tc, test_records_ports_ats);
    tcase_add_test(tc, test_records_ports_ats_errors);
    return tc;
}

static TCase *
remap_tcase(void)
{
    TCase *tc = fixture_tcase("remap");

    tcase_add_test(tc, test_remap_parse_urls);
    tcase_add_test(tc, test_remap_options_fail_closed);
    tcase_add_test(tc, test_remap_errors);
    tcase_add_test(tc, test_remap_precedence);
    tcase_add_test(tc, test_remap_ports_and_hosts);
    tcase_add_test(tc, test_remap_paths);
    tcase_add_test(tc, test_remap_join_makes_no_dot_segment);
    tcase_add_test(tc, test_remap_first_match);
    tcase_add_test(tc, test_remap_regex);
    tcase_add_test(tc, test_remap_include);
    tcase_add_test(tc, test_remap_include_errors);
    tcase_add_test(tc, test_remap_include_directory);
    tcase_add_test(tc, test_remap_include_depth);
    tcase_add_test(tc, test_remap_reverse);
    return tc;
}

static TCase *
ip_allow_tcase(void)
{
    TCase *tc = fixture_tcase("ip_allow");

    tcase_add_test(tc, test_method_bit);
    tcase_add_test(tc, test_ip_allow_first_match);
    tcase_add_test(tc, test_ip_allow_cidr_edges);
    tcase_add_test(tc, test_ip_allow_errors);
    tcase_add_test(tc, test_ip_allow_defaults);
    tcase_add_test(tc, test_ip_allow_shipped_file);
    return tc;
}

static TCase *
storage_tcase(void)
{
    TCase *tc = fixture_tcase("storage");

    tcase_add_test(tc, test_storage_good);
    tcase_add_test(tc, test_storage_errors);
    return tc;
}

static TCase *
load_tcase(void)
{
    TCase *tc = fixture_tcase("load");

    tcase_add_test(tc, test_load_minimal);
    tcase_add_test(tc, test_load_relative_dir);
    tcase_add_test(tc, test_load_errors_collected);
    tcase_add_test(tc, test_load_missing_required);
    tcase_add_test(tc, test_load_warnings_do_not_fail);
    tcase_add_test(tc, test_load_shipped_files);
    return tc;
}

static TCase *
atskeys_tcase(void)
{
    TCase *tc = fixture_tcase("atskeys");

    tcase_add_test(tc, test_records_matches_keys);
    tcase_add_test(tc, test_records_matches_other_value_is_error);
    tcase_add_test(tc, test_records_internal_one_warning);
    tcase_add_test(tc, test_ats_key_table);
    tcase_add_test(tc, test_ats_files);
    return tc;
}

static TCase *
issue18_ip_allow_tcase(void)
{
    TCase *tc = fixture_tcase("issue18_ip_allow");

    tcase_add_test(tc, test_ip_allow_ats_order);
    tcase_add_test(tc, test_ip_allow_dest_ip);
    tcase_add_test(tc, test_yaml_tree);
    tcase_add_test(tc, test_yaml_errors);
    tcase_add_test(tc, test_ip_allow_yaml_debian);
    tcase_add_test(tc, test_ip_allow_yaml_forms);
    tcase_add_test(tc, test_ip_allow_yaml_errors);
    tcase_add_test(tc, test_load_ip_allow_yaml);
    return tc;
}

static TCase *
remap_acl_tcase(void)
{
    TCase *tc = fixture_tcase("remap_acl");

    tcase_add_test(tc, test_remap_acl_legacy);
    tcase_add_test(tc, test_remap_named_filters);
    tcase_add_test(tc, test_remap_filter_errors);
    tcase_add_test(tc, test_remap_acl_modern);
    tcase_add_test(tc, test_remap_recv_port_and_regex_redirect);
    tcase_add_test(tc, test_load_acl_policy);
    return tc;
}

static TCase *
cache_config_tcase(void)
{
    TCase *tc = fixture_tcase("cache_config");

    tcase_add_test(tc, test_cache_duration);
    tcase_add_test(tc, test_cache_config_good);
    tcase_add_test(tc, test_cache_config_errors);
    tcase_add_test(tc, test_cache_config_match);
    tcase_add_test(tc, test_cache_negative_list);
    return tc;
}

static TCase *
issue25_logging_tcase(void)
{
    TCase *tc = fixture_tcase("issue25-logging");

    tcase_add_test(tc, test_logging_compile);
    tcase_add_test(tc, test_logging_yaml);
    tcase_add_test(tc, test_logging_yaml_errors);
    return tc;
}

static TCase *
issue18_headers_tcase(void)
{
    TCase *tc = fixture_tcase("issue18-headers");

    tcase_add_test(tc, test_records_header_keys);
    tcase_add_test(tc, test_dns_servers);
    return tc;
}

static Suite *
conf_suite(void)
{
    Suite *s = suite_create("conf");

    suite_add_tcase(s, common_tcase());
    suite_add_tcase(s, records_tcase());
    suite_add_tcase(s, remap_tcase());
    suite_add_tcase(s, ip_allow_tcase());
    suite_add_tcase(s, storage_tcase());
    suite_add_tcase(s, load_tcase());
    suite_add_tcase(s, atskeys_tcase());
    suite_add_tcase(s, issue18_ip_allow_tcase());
    suite_add_tcase(s, remap_acl_tcase());
    suite_add_tcase(s, cache_config_tcase());
    suite_add_tcase(s, parent_tcase());
    suite_add_tcase(s, issue25_logging_tcase());
    suite_add_tcase(s, issue18_headers_tcase());
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(conf_suite());
    int      failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
