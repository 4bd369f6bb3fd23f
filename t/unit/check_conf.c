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
    ck_assert_int_eq(rec.max_doc_size, 64LL << 20);
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
    int rc = records("CONFIG proxy.config.http.cache.http INT 1\n"
                     "CONFIG proxy.config.cistern.workers INT 2\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(errs.nwarn, 1);
    check_warning("records.config:1: unknown key "
                  "\"proxy.config.http.cache.http\" ignored");
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
    check_error("records.config:10: proxy.config.http.server_ports: \"80x\" "
                "is not a port (expected PORT, PORT:ssl, PORT:ipv4 or "
                "PORT:ipv6)");
    check_error("records.config:11: proxy.config.http.server_ports: port "
                "70000 is out of range (0..65535)");
    check_error("records.config:12: proxy.config.http.server_ports: unknown "
                "port option \"tls\" in \"80:tls\"");
    check_error("records.config:13: proxy.config.http.server_ports: port 80 "
                "is listed twice");
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
                "is not a port (expected PORT, PORT:ssl, PORT:ipv4 or "
                "PORT:ipv6)");
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

/* ATS's @options restrict access (@action=deny, @src_ip=, @method=) or
 * hand the request to a plugin (an auth check): ignored, they would load
 * a restricted rule as an open one.  Each is an error until implemented. */
START_TEST(test_remap_options_fail_closed)
{
    int rc = remap(
        "map http://a/ http://o/ @action=deny @src_ip=10.0.0.0-10.255.255.255\n"
        "map http://b/ http://o/ @method=GET\n"
        "map http://c/ http://o/ @plugin=auth.so @pparam=x\n"
        "map http://d/ http://o/\n");

    ck_assert_int_eq(rc, -1);
    check_error("remap.config:1: map: option \"@action=deny\" is not supported "
                "(ignoring it could open what the rule restricts)");
    check_error("remap.config:2: map: option \"@method=GET\" is not supported "
                "(ignoring it could open what the rule restricts)");
    check_error("remap.config:3: map: option \"@plugin=auth.so\" is not supported "
                "(ignoring it could open what the rule restricts)");
    ck_assert_int_eq(errs.n, 3);
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
    check_error("remap.config:4: .include: too many fields (expected one "
                "file name)");
    check_error("remap.config:5: .include \"remap.config\": include loop "
                "(the file is already being read)");
    ck_assert_int_eq(errs.n, 5);
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
    int rc = ip_allow("src_ip=0.0.0.0/0 action=ip_deny method=PUT\n"
                      "src_ip=::/0 action=ip_deny method=PUT\n"
                      "src_ip=1.2.3.4/32 action=ip_allow\n"
                      "src_ip=::1/128 action=ip_allow\n"
                      "src_ip=10.1.0.0/15 action=ip_allow\n"
                      "src_ip=::ffff:192.0.2.0/120 action=ip_allow\n");

    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(allowed("1.2.3.4", CONF_METHOD_PUT), 0);
    ck_assert_int_eq(allowed("1.2.3.4", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("1.2.3.5", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("::1", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("::1", CONF_METHOD_PUT), 0);
    ck_assert_int_eq(allowed("::2", CONF_METHOD_GET), 0);
    ck_assert_int_eq(allowed("10.0.0.0", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("10.1.255.255", CONF_METHOD_GET), 1);
    ck_assert_int_eq(allowed("10.2.0.0", CONF_METHOD_GET), 0);
    /* A v4-mapped rule applies to IPv4 clients, however they arrive. */
    ck_assert_int_eq(ia.rules[5].range.family, AF_INET);
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
        "dest_ip=1.2.3.4 action=ip_allow\n"                     /* 12 */
        "src_ip=1.2.3.4 action=ip_allow method=GET|BREW\n"      /* 13 */
        "src_ip=::/x action=ip_allow\n");                       /* 14 */

    ck_assert_int_eq(rc, -1);
    check_error("ip_allow.config:1: missing action=");
    check_error("ip_allow.config:2: missing src_ip=");
    check_error("ip_allow.config:3: src_ip \"1.2.3\": bad address");
    check_error("ip_allow.config:4: unknown action \"allow\" (expected "
                "ip_allow or ip_deny)");
    check_error("ip_allow.config:5: unknown key \"colour\"");
    check_error("ip_allow.config:6: empty method name in \"method=GET||PUT\"");
    check_error("ip_allow.config:7: src_ip \"1.2.3.9-1.2.3.4\": starts after "
                "it ends");
    check_error("ip_allow.config:8: src_ip \"1.2.3.4-::1\": mixes IPv4 and "
                "IPv6");
    check_error("ip_allow.config:9: src_ip \"1.2.3.4/33\": bad prefix length");
    check_error("ip_allow.config:10: src_ip given twice");
    check_error("ip_allow.config:11: \"ip_allow\" is not key=value");
    check_error("ip_allow.config:12: dest_ip rules are not supported (ignoring "
                "one could allow what it denies)");
    check_warning("ip_allow.config:13: unknown method \"BREW\" (it stands for "
                  "every non-standard method)");
    check_error("ip_allow.config:14: src_ip \"::/x\": bad prefix length");
    ck_assert_int_eq(errs.n, 13);
    ck_assert_int_eq(errs.nwarn, 1);
    ck_assert_int_eq(ia.nrules, 1);
    ck_assert_uint_eq(ia.rules[0].methods,
                      CONF_METHOD_GET | CONF_METHOD_OTHER);
    conf_ip_allow_free(&ia);
}
END_TEST

START_TEST(test_ip_allow_defaults)
{
    memset(&ia, 0, sizeof(ia));
    conf_ip_allow_defaults(&ia);
    ck_assert_int_eq(ia.nrules, 6);
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
    ck_assert_int_eq(c->ip_allow.nrules, 6);    /* built-in defaults */
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
    ck_assert_int_eq(c->ip_allow.nrules, 6);
    ck_assert_int_eq(c->storage.nspans, 1);
    ck_assert_str_eq(c->storage.spans[0].path, "/var/cache/cistern");
    ck_assert_int_eq(c->storage.spans[0].size, 256LL << 20);
    conf_free(c);
}
END_TEST

static Suite *
conf_suite(void)
{
    Suite *s = suite_create("conf");
    TCase *tc;

    tc = tcase_create("common");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_errors_format);
    tcase_add_test(tc, test_parse_size);
    tcase_add_test(tc, test_path);
    suite_add_tcase(s, tc);

    tc = tcase_create("records");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_records_defaults);
    tcase_add_test(tc, test_records_good);
    tcase_add_test(tc, test_records_unknown_key_warns);
    tcase_add_test(tc, test_records_duplicate_warns);
    tcase_add_test(tc, test_records_errors);
    tcase_add_test(tc, test_records_sizes);
    tcase_add_test(tc, test_records_missing_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("remap");
    tcase_add_checked_fixture(tc, setup, teardown);
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
    tcase_add_test(tc, test_remap_include_depth);
    tcase_add_test(tc, test_remap_reverse);
    suite_add_tcase(s, tc);

    tc = tcase_create("ip_allow");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_method_bit);
    tcase_add_test(tc, test_ip_allow_first_match);
    tcase_add_test(tc, test_ip_allow_cidr_edges);
    tcase_add_test(tc, test_ip_allow_errors);
    tcase_add_test(tc, test_ip_allow_defaults);
    tcase_add_test(tc, test_ip_allow_shipped_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("storage");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_storage_good);
    tcase_add_test(tc, test_storage_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("load");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_load_minimal);
    tcase_add_test(tc, test_load_relative_dir);
    tcase_add_test(tc, test_load_errors_collected);
    tcase_add_test(tc, test_load_missing_required);
    tcase_add_test(tc, test_load_warnings_do_not_fail);
    tcase_add_test(tc, test_load_shipped_files);
    suite_add_tcase(s, tc);

    tc = tcase_create("issue18-headers");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_records_header_keys);
    suite_add_tcase(s, tc);

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
