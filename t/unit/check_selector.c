/*
 * t/unit/check_selector.c: unit tests for conf/selector.c, ATS's selector
 * grammar shared by cache.config and parent.config: the parser (what it
 * takes, its file:line errors, the twice answer), the matcher (every
 * primary and secondary) and where the two dialects differ.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "conf/parse.h"
#include "conf/selector.h"

static struct conf_errors   errs;
static struct conf_selector sel;

static void
setup(void)
{
    memset(&errs, 0, sizeof(errs));
    conf_sel_init(&sel);
}

static void
teardown(void)
{
    conf_sel_free(&sel);
    conf_errors_free(&errs);
}

static int
take(const struct conf_sel_dialect *d, const char *label, const char *value)
{
    return conf_sel_parse(&sel, d, label, value, "x.config", 7, &errs);
}

/* A request for host (port 80, GET, from 10.1.2.3 unless src is NULL). */
static struct conf_sel_req
rq(const char *host, const char *path)
{
    static struct sockaddr_in sa;
    struct conf_sel_req q;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    inet_pton(AF_INET, "10.1.2.3", &sa.sin_addr);
    memset(&q, 0, sizeof(q));
    q.scheme = "http";
    q.host = host;
    q.hostlen = strlen(host);
    q.port = 80;
    q.path = path;
    q.pathlen = strlen(path);
    q.method = "GET";
    q.src = (const struct sockaddr *)&sa;
    q.tod = 12 * 3600;
    return q;
}

static int
starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int
hit(const struct conf_sel_dialect *d, const char *host, const char *path)
{
    struct conf_sel_req q = rq(host, path);

    return conf_sel_match(&sel, d, &q);
}

START_TEST(test_sel_labels)
{
    ck_assert(conf_sel_is_primary("dest_domain"));
    ck_assert(conf_sel_is_primary("DEST_HOST"));
    ck_assert(conf_sel_is_primary("dest_ip"));
    ck_assert(conf_sel_is_primary("host_regex"));
    ck_assert(conf_sel_is_primary("url_regex"));
    ck_assert(!conf_sel_is_primary("prefix"));
    /* not a selector label: 0, nothing recorded */
    ck_assert_int_eq(take(&conf_sel_cache, "action", "never-cache"), 0);
    ck_assert_int_eq(take(&conf_sel_parent, "parent", "p:1"), 0);
    ck_assert_int_eq(errs.n, 0);
}
END_TEST

START_TEST(test_sel_domain)
{
    ck_assert_int_eq(take(&conf_sel_cache, "dest_domain", "..Example.COM."), 1);
    ck_assert_int_eq(sel.primary, CONF_SEL_DOMAIN);
    ck_assert_str_eq(sel.domain, "example.com");
    ck_assert(hit(&conf_sel_cache, "example.com", "/"));
    ck_assert(hit(&conf_sel_cache, "WWW.example.com.", "/"));
    ck_assert(!hit(&conf_sel_cache, "badexample.com", "/"));    /* label boundary */
    ck_assert(!hit(&conf_sel_cache, "example.org", "/"));
    ck_assert(!hit(&conf_sel_cache, "com", "/"));
    /* one primary a line */
    ck_assert_int_eq(take(&conf_sel_cache, "host_regex", "x"), -1);
    ck_assert_int_eq(errs.n, 1);
    ck_assert_str_eq(errs.msgs[0], "x.config:7: host_regex=: a line has one primary destination");
}
END_TEST

START_TEST(test_sel_root_domain)
{
    ck_assert_int_eq(take(&conf_sel_parent, "dest_domain", "."), 1);
    ck_assert_uint_eq(sel.domainlen, 0);
    ck_assert(hit(&conf_sel_parent, "any.test", "/"));
    ck_assert(hit(&conf_sel_cache, "any.test", "/"));
    /* an empty host: parent.config's "." takes it, cache.config's not */
    ck_assert(hit(&conf_sel_parent, ".", "/"));
    ck_assert(!hit(&conf_sel_cache, ".", "/"));
}
END_TEST

START_TEST(test_sel_host)
{
    ck_assert_int_eq(take(&conf_sel_parent, "dest_host", "static.test"), 1);
    ck_assert_int_eq(sel.primary, CONF_SEL_HOST);
    ck_assert(hit(&conf_sel_parent, "STATIC.test.", "/"));
    ck_assert(!hit(&conf_sel_parent, "a.static.test", "/"));
    conf_sel_free(&sel);
    /* leading dots: cache.config drops them, parent.config keeps them */
    ck_assert_int_eq(take(&conf_sel_cache, "dest_host", ".h.test"), 1);
    ck_assert_str_eq(sel.domain, "h.test");
    conf_sel_free(&sel);
    ck_assert_int_eq(take(&conf_sel_parent, "dest_host", ".h.test"), 1);
    ck_assert_str_eq(sel.domain, ".h.test");
    conf_sel_free(&sel);
    ck_assert_int_eq(take(&conf_sel_cache, "dest_host", "..."), -1);
    ck_assert_str_eq(errs.msgs[0], "x.config:7: dest_host=: not a host name");
}
END_TEST

START_TEST(test_sel_ip)
{
    ck_assert_int_eq(take(&conf_sel_parent, "dest_ip", "192.168.1.0/24,::1"), 1);
    ck_assert_int_eq(sel.primary, CONF_SEL_IP);
    ck_assert(hit(&conf_sel_parent, "192.168.1.77", "/"));
    ck_assert(hit(&conf_sel_parent, "[::1]", "/"));
    ck_assert(!hit(&conf_sel_parent, "192.168.2.1", "/"));
    ck_assert(!hit(&conf_sel_parent, "example.com", "/"));     /* never resolved */
    conf_sel_free(&sel);
    ck_assert_int_eq(take(&conf_sel_parent, "dest_ip", "nonsense"), -1);
    ck_assert_int_eq(errs.n, 1);
    ck_assert(starts(errs.msgs[0], "x.config:7: dest_ip=nonsense: "));
}
END_TEST

START_TEST(test_sel_regex)
{
    struct conf_sel_req q = rq("cdn7.test", "/a/b?x=1");

    ck_assert_int_eq(take(&conf_sel_cache, "host_regex", "^CDN[0-9]+\\.test$"), 1);
    ck_assert(hit(&conf_sel_cache, "cdn7.test", "/"));         /* any case */
    ck_assert(!hit(&conf_sel_cache, "cdn.test", "/"));
    conf_sel_free(&sel);
    ck_assert_int_eq(take(&conf_sel_cache, "url_regex", "/a/b\\?x="), 1);
    ck_assert_int_eq(sel.primary, CONF_SEL_URL_REGEX);
    ck_assert(!conf_sel_match(&sel, &conf_sel_cache, &q));      /* no URL made */
    q.url = "http://cdn7.test/a/b?x=1";
    ck_assert(conf_sel_match(&sel, &conf_sel_cache, &q));
    conf_sel_free(&sel);
    ck_assert_int_eq(take(&conf_sel_cache, "url_regex", "("), -1);
    ck_assert(starts(errs.msgs[0], "x.config:7: url_regex=(: bad regular expression: "));
}
END_TEST

START_TEST(test_sel_secondary)
{
    ck_assert_int_eq(take(&conf_sel_cache, "dest_domain", "t.test"), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "prefix", "//img/"), 1);
    ck_assert_str_eq(sel.prefix, "/img/");
    ck_assert_int_eq(take(&conf_sel_cache, "suffix", "gif,JPG"), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "port", "80-8080"), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "scheme", "HTTP"), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "method", "get"), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "time", "08:00-18:30:15"), 1);
    ck_assert_int_eq(sel.tod_hi, 18 * 3600 + 30 * 60 + 15);
    ck_assert_int_eq(take(&conf_sel_cache, "src_ip", "10.0.0.0/8"), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "internal", "false"), 1);
    ck_assert_int_eq(errs.n, 0);

    ck_assert(hit(&conf_sel_cache, "t.test", "/img/a.jpg?q=.png"));  /* the query is not path */
    ck_assert(!hit(&conf_sel_cache, "t.test", "/img/a.png"));
    ck_assert(!hit(&conf_sel_cache, "t.test", "/x/img/a.gif"));
    ck_assert(!hit(&conf_sel_cache, "t.test", "/im"));

    struct conf_sel_req q = rq("t.test", "/img/a.gif");
    ck_assert(conf_sel_match(&sel, &conf_sel_cache, &q));
    q.port = 9000;
    ck_assert(!conf_sel_match(&sel, &conf_sel_cache, &q));
    q = rq("t.test", "/img/a.gif");
    q.scheme = "https";
    ck_assert(!conf_sel_match(&sel, &conf_sel_cache, &q));
    q = rq("t.test", "/img/a.gif");
    q.method = "POST";
    ck_assert(!conf_sel_match(&sel, &conf_sel_cache, &q));
    q.method = NULL;
    ck_assert(!conf_sel_match(&sel, &conf_sel_cache, &q));
    q = rq("t.test", "/img/a.gif");
    q.tod = 19 * 3600;
    ck_assert(!conf_sel_match(&sel, &conf_sel_cache, &q));
    q = rq("t.test", "/img/a.gif");
    q.src = NULL;
    ck_assert(!conf_sel_match(&sel, &conf_sel_cache, &q));
}
END_TEST

START_TEST(test_sel_errors)
{
    ck_assert_int_eq(take(&conf_sel_cache, "port", "0"), -1);
    ck_assert_int_eq(take(&conf_sel_cache, "port", "90-80"), -1);
    ck_assert_int_eq(take(&conf_sel_cache, "scheme", "ftp"), -1);
    ck_assert_int_eq(take(&conf_sel_cache, "time", "8-9"), -1);
    ck_assert_int_eq(take(&conf_sel_cache, "src_ip", ""), -1);
    ck_assert_int_eq(take(&conf_sel_cache, "internal", "1"), -1);   /* cache: words only */
    ck_assert_int_eq(errs.n, 6);
    ck_assert_str_eq(errs.msgs[0], "x.config:7: port=0: expected a port or a range N-M");
    ck_assert_str_eq(errs.msgs[1], "x.config:7: port=90-80: expected a port or a range N-M");
    ck_assert_str_eq(errs.msgs[2], "x.config:7: scheme=ftp: expected http or https");
    ck_assert_str_eq(errs.msgs[3], "x.config:7: time=8-9: expected HH:MM-HH:MM");
    ck_assert_str_eq(errs.msgs[4], "x.config:7: src_ip=: no address");
    ck_assert_str_eq(errs.msgs[5], "x.config:7: internal=1: expected true or false");
    /* parent.config's booleans take digits */
    ck_assert_int_eq(take(&conf_sel_parent, "internal", "1"), 1);
    ck_assert_int_eq(sel.internal, 1);
}
END_TEST

START_TEST(test_sel_twice)
{
    static const char *const pairs[][2] = {
        { "prefix", "/a" }, { "suffix", "gif" }, { "port", "80" }, { "scheme", "http" },
        { "method", "GET" }, { "time", "01:00-02:00" }, { "src_ip", "10.0.0.1" },
        { "internal", "false" },
    };

    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        ck_assert_int_eq(take(&conf_sel_cache, pairs[i][0], pairs[i][1]), 1);
        ck_assert_int_eq(take(&conf_sel_cache, pairs[i][0], pairs[i][1]), -2);
    }
    ck_assert_int_eq(errs.n, 0);        /* each file words "twice" itself */
}
END_TEST

START_TEST(test_sel_suffix_star)
{
    ck_assert_int_eq(take(&conf_sel_cache, "dest_domain", "."), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "suffix", "*"), 1);
    ck_assert(hit(&conf_sel_cache, "a.test", "/x.html"));      /* cache: every path */
    ck_assert(!hit(&conf_sel_parent, "a.test", "/x.html"));    /* parent: a '*' suffix */
    ck_assert(hit(&conf_sel_parent, "a.test", "/x*"));
}
END_TEST

START_TEST(test_sel_internal_never)
{
    ck_assert_int_eq(take(&conf_sel_cache, "dest_domain", "."), 1);
    ck_assert_int_eq(take(&conf_sel_cache, "internal", "TRUE"), 1);
    ck_assert(!hit(&conf_sel_cache, "a.test", "/"));           /* no request is internal */
}
END_TEST

START_TEST(test_sel_no_primary)
{
    ck_assert(!hit(&conf_sel_cache, "a.test", "/"));           /* matches nothing yet */
}
END_TEST

static Suite *
selector_suite(void)
{
    Suite *s = suite_create("selector");
    TCase *tc = tcase_create("selector");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_sel_labels);
    tcase_add_test(tc, test_sel_domain);
    tcase_add_test(tc, test_sel_root_domain);
    tcase_add_test(tc, test_sel_host);
    tcase_add_test(tc, test_sel_ip);
    tcase_add_test(tc, test_sel_regex);
    tcase_add_test(tc, test_sel_secondary);
    tcase_add_test(tc, test_sel_errors);
    tcase_add_test(tc, test_sel_twice);
    tcase_add_test(tc, test_sel_suffix_star);
    tcase_add_test(tc, test_sel_internal_never);
    tcase_add_test(tc, test_sel_no_primary);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(selector_suite());
    int      failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
