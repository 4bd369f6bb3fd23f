/*
 * t/unit/check_buf.c: worker/buf.c, the buffer, pool and formatting leaf.
 *
 * The hand-written formatters are checked against libc's (snprintf,
 * strftime, inet_ntop) over tables of edge values; the buffer appenders
 * and the pool against what their header promises.
 */
#include "config.h"

#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "worker/buf.h"

START_TEST(test_fmt_integers)
{
    static const int64_t v[] = {
        0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 12345, 65535, 99999999,
        100000000, 4294967295LL, 4294967296LL, 999999999999999999LL,
        INT64_MAX, -1, -9, -10, -99, -100, -12345, INT64_MIN + 1, INT64_MIN,
    };
    char got[32], want[32];

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        *fmt_i64(got, v[i]) = '\0';
        snprintf(want, sizeof(want), "%" PRId64, v[i]);
        ck_assert_str_eq(got, want);
        *fmt_u64(got, (uint64_t)v[i]) = '\0';
        snprintf(want, sizeof(want), "%" PRIu64, (uint64_t)v[i]);
        ck_assert_str_eq(got, want);
    }
    *fmt_u64(got, UINT64_MAX) = '\0';
    ck_assert_str_eq(got, "18446744073709551615");
}
END_TEST

START_TEST(test_fmt_pad)
{
    static const int64_t v[] = { 0, 5, 42, 999, 1000, 123456, 1234567, -1, -42, -123456 };
    static const int w[] = { 0, 1, 3, 6, 8 };
    char got[48], want[48];

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        for (size_t j = 0; j < sizeof(w) / sizeof(w[0]); j++) {
            *fmt_pad(got, v[i], w[j], '0') = '\0';
            snprintf(want, sizeof(want), "%0*" PRId64, w[j], v[i]);
            ck_assert_str_eq(got, want);
            *fmt_pad(got, v[i], w[j], ' ') = '\0';
            snprintf(want, sizeof(want), "%*" PRId64, w[j], v[i]);
            ck_assert_str_eq(got, want);
        }
}
END_TEST

START_TEST(test_fmt_writers)
{
    char b[32], *p = b;

    p = fmt_lit(p, "ab");
    p = fmt_str(p, "cde");
    p = fmt_mem(p, "fgh", 2);
    *p = '\0';
    ck_assert_str_eq(b, "abcdefg");
}
END_TEST

START_TEST(test_fmt_http_date)
{
    static const time_t t[] = {
        0, 784111777 /* RFC 9110's example */, 951782400 /* 2000-02-29 */,
        1700000000, 2147483647, 4102444800LL /* 2100-01-01 */,
    };
    char got[32], want[32];

    fmt_http_date(784111777, got);
    ck_assert_str_eq(got, "Sun, 06 Nov 1994 08:49:37 GMT");
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct tm tm;
        gmtime_r(&t[i], &tm);
        /* the C locale's names are the RFC's */
        strftime(want, sizeof(want), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        fmt_http_date(t[i], got);
        ck_assert_str_eq(got, want);
        ck_assert_uint_eq(strlen(got), 29);
    }
}
END_TEST

START_TEST(test_fmt_peer)
{
    static const char *v4[] = { "0.0.0.0", "1.2.3.4", "10.0.0.255", "192.0.2.1",
                                "255.255.255.255", "127.0.0.1" };
    static const char *v6[] = { "::1", "2001:db8::1", "::ffff:192.0.2.1",
                                "fe80::1:2:3:4", "2001:db8:0:1:1:1:1:1" };
    struct sockaddr_in s4;
    struct sockaddr_in6 s6;
    struct sockaddr_un su;
    char got[64];

    for (size_t i = 0; i < sizeof(v4) / sizeof(v4[0]); i++) {
        memset(&s4, 0, sizeof(s4));
        s4.sin_family = AF_INET;
        s4.sin_port = htons(8080);
        ck_assert_int_eq(inet_pton(AF_INET, v4[i], &s4.sin_addr), 1);
        fmt_peer((struct sockaddr *)&s4, got, sizeof(got));
        ck_assert_str_eq(got, v4[i]);
        fmt_peer((struct sockaddr *)&s4, got, INET_ADDRSTRLEN);
        ck_assert_str_eq(got, v4[i]);
        fmt_peer((struct sockaddr *)&s4, got, INET_ADDRSTRLEN - 1);
        ck_assert_str_eq(got, "?");     /* no room: never a cut address */
    }
    for (size_t i = 0; i < sizeof(v6) / sizeof(v6[0]); i++) {
        char want[64];
        memset(&s6, 0, sizeof(s6));
        s6.sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, v6[i], &s6.sin6_addr), 1);
        inet_ntop(AF_INET6, &s6.sin6_addr, want, sizeof(want));
        fmt_peer((struct sockaddr *)&s6, got, sizeof(got));
        ck_assert_str_eq(got, want);
    }
    memset(&su, 0, sizeof(su));
    su.sun_family = AF_UNIX;
    fmt_peer((struct sockaddr *)&su, got, sizeof(got));
    ck_assert_str_eq(got, "?");
}
END_TEST

START_TEST(test_buf_appenders)
{
    struct buf b = { 0 };
    char big[3 * BUF_SIZE];

    ck_assert_int_eq(buf_alloc(&b), 0);
    ck_assert_int_eq(b.size, BUF_SIZE);
    ck_assert_int_eq(b.pooled, 1);
    ck_assert_int_eq(buf_lit(&b, "HTTP/1.1 "), 0);
    ck_assert_int_eq(buf_putu(&b, 200), 0);
    ck_assert_int_eq(buf_puts(&b, " OK"), 0);
    ck_assert_int_eq(buf_printf(&b, "\r\n%s: %d\r\n", "Age", 7), 0);
    ck_assert_uint_eq(b.end, strlen("HTTP/1.1 200 OK\r\nAge: 7\r\n"));
    ck_assert_int_eq(memcmp(b.data, "HTTP/1.1 200 OK\r\nAge: 7\r\n", b.end), 0);

    /* Compaction first: consumed bytes make the room, the buffer stays. */
    b.start = 9;
    memset(big, 'x', sizeof(big));
    ck_assert_int_eq(buf_grow(&b, BUF_SIZE - (b.end - b.start)), 0);
    ck_assert_int_eq(b.start, 0);
    ck_assert_int_eq(b.pooled, 1);
    ck_assert_int_eq(memcmp(b.data, "200 OK\r\n", 8), 0);

    /* Then growth: the bytes move, the buffer leaves the pool. */
    ck_assert_int_eq(buf_append(&b, big, sizeof(big)), 0);
    ck_assert_int_eq(b.pooled, 0);
    ck_assert_uint_ge(b.size, b.end);
    ck_assert_int_eq(memcmp(b.data, "200 OK\r\nAge: 7\r\nxxx", 19), 0);
    ck_assert_int_eq(b.data[b.end - 1], 'x');

    /* buf_printf past the room it has grows too. */
    buf_release(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_int_eq(buf_alloc(&b), 0);
    ck_assert_int_eq(buf_printf(&b, "%.*s!", (int)sizeof(big), big), 0);
    ck_assert_uint_eq(b.end, sizeof(big) + 1);
    ck_assert_int_eq(b.data[b.end - 1], '!');
    buf_release(&b);
    buf_pool_drain();
}
END_TEST

START_TEST(test_pool)
{
    struct pool p;
    void *a, *b, *c;

    pool_init(&p, 3);
    ck_assert_uint_ge(p.size, sizeof(void *));     /* room for the link */
    p.max_idle = 1;
    a = pool_get(&p);
    b = pool_get(&p);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_ne(a, b);
    pool_put(&p, a);
    pool_put(&p, b);            /* over max_idle: freed */
    pool_put(&p, NULL);         /* ignored */
#ifdef CST_ASAN
    ck_assert_uint_eq(p.nidle, 0);      /* never recycles */
#else
    ck_assert_uint_eq(p.nidle, 1);
    c = pool_get(&p);
    ck_assert_ptr_eq(c, a);     /* the last one kept comes back first */
    ck_assert_uint_eq(p.nidle, 0);
    pool_put(&p, c);
#endif
    c = pool_get(&p);
    pool_put(&p, c);
    pool_drain(&p);
    ck_assert_uint_eq(p.nidle, 0);
    ck_assert_ptr_null(p.free);
}
END_TEST

START_TEST(test_magic_check_aborts)
{
    magic_check(1, 2);
}
END_TEST

static Suite *
buf_suite(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("buf");

    tcase_add_test(tc, test_fmt_integers);
    tcase_add_test(tc, test_fmt_pad);
    tcase_add_test(tc, test_fmt_writers);
    tcase_add_test(tc, test_fmt_http_date);
    tcase_add_test(tc, test_fmt_peer);
    tcase_add_test(tc, test_buf_appenders);
    tcase_add_test(tc, test_pool);
    tcase_add_test_raise_signal(tc, test_magic_check_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(buf_suite());
    int      failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
