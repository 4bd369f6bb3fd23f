/*
 * t/unit/check_pp.c: the PROXY protocol parser (worker/pp.c).
 *
 * A table of whole headers, v1 and v2, each with what pp_parse must say
 * (DONE with its length and source address, LOCAL, or BAD); then the
 * property the connection code relies on: every proper prefix of an
 * accepted header is PP_AGAIN (so the bytes seen so far may be consumed),
 * and the bytes behind a header are never part of it.
 */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/pp.h"

static const uint8_t sig[12] = { 0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a,
                                 0x51, 0x55, 0x49, 0x54, 0x0a };

/* A v2 header into out: ver_cmd, fam, then body[blen]; returns its length. */
static size_t
v2(uint8_t *out, uint8_t ver_cmd, uint8_t fam, const uint8_t *body, size_t blen)
{
    memcpy(out, sig, 12);
    out[12] = ver_cmd;
    out[13] = fam;
    out[14] = (uint8_t)(blen >> 8);
    out[15] = (uint8_t)blen;
    if (blen)
        memcpy(out + 16, body, blen);
    return 16 + blen;
}

/* The source of r as text ("-" when local). */
static const char *
src_text(const struct pp_result *r)
{
    static char buf[INET6_ADDRSTRLEN + 8];
    char a[INET6_ADDRSTRLEN];

    if (r->local)
        return "-";
    if (r->src.sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &r->src.in.sin_addr, a, sizeof(a));
        snprintf(buf, sizeof(buf), "%s:%u", a, ntohs(r->src.in.sin_port));
    } else {
        inet_ntop(AF_INET6, &r->src.in6.sin6_addr, a, sizeof(a));
        snprintf(buf, sizeof(buf), "[%s]:%u", a, ntohs(r->src.in6.sin6_port));
    }
    return buf;
}

/* Every proper prefix of an accepted header must be PP_AGAIN. */
static void
check_prefixes(const uint8_t *p, size_t len)
{
    struct pp_result r;

    for (size_t i = 0; i < len; i++)
        ck_assert_msg(pp_parse(p, i, &r) == PP_AGAIN,
                      "prefix of %zu of a %zu-byte header: not AGAIN (%s)",
                      i, len, r.why ? r.why : "");
}

static const struct {
    const char *in;
    int         rc;
    const char *src;                  /* DONE: source, "-" for local */
} v1_rows[] = {
    { "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n", PP_DONE, "203.0.113.7:40000" },
    { "PROXY TCP6 2001:db8::7 ::1 1 65535\r\n", PP_DONE, "[2001:db8::7]:1" },
    { "PROXY TCP6 ::ffff:1.2.3.4 ::1 0 0\r\n", PP_DONE, "[::ffff:1.2.3.4]:0" },
    { "PROXY UNKNOWN\r\n", PP_DONE, "-" },
    { "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", PP_DONE, "-" },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\rX\n", PP_BAD, NULL },
    { "PROXY TCP5 203.0.113.7 127.0.0.1 40000 80\r\n", PP_BAD, NULL },
    { "PROXY tcp4 203.0.113.7 127.0.0.1 40000 80\r\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 40000 65536\r\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 400000 80\r\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 -1 80\r\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1  80\r\n", PP_BAD, NULL },
    { "PROXY TCP4  203.0.113.7 127.0.0.1 1 80\r\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 1 80 \r\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 1\r\n", PP_BAD, NULL },
    { "PROXY TCP4 203.0.113.7 127.0.0.1 1 2 3\r\n", PP_BAD, NULL },
    { "PROXY TCP4 ::1 127.0.0.1 1 2\r\n", PP_BAD, NULL },
    { "PROXY TCP6 1.2.3.4 ::1 1 2\r\n", PP_BAD, NULL },
    { "PROXY TCP4 1.2.3.256 127.0.0.1 1 2\r\n", PP_BAD, NULL },
    { "PROXY TCP4 1.2.3.4\t127.0.0.1 1 2\r\n", PP_BAD, NULL },
    { "PROXY \r\n", PP_BAD, NULL },
    { "PROXY\r\n", PP_BAD, NULL },
    { "PROXYTCP4 1.2.3.4 1.2.3.4 1 2\r\n", PP_BAD, NULL },
    { "GET / HTTP/1.1\r\n", PP_BAD, NULL },
    { "proxy TCP4 1.2.3.4 1.2.3.4 1 2\r\n", PP_BAD, NULL },
    { "PROXY TCP4 1.2.3.4 1.2.3.4 1 2", PP_AGAIN, NULL },
    { "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\r", PP_AGAIN, NULL },
    { "PRO", PP_AGAIN, NULL },
    { "", PP_AGAIN, NULL },
};

START_TEST(test_v1_table)
{
    for (size_t i = 0; i < sizeof(v1_rows) / sizeof(v1_rows[0]); i++) {
        struct pp_result r;
        const char *in = v1_rows[i].in;
        size_t n = strlen(in);
        int rc = pp_parse((const uint8_t *)in, n, &r);

        ck_assert_msg(rc == v1_rows[i].rc, "row %zu \"%s\": rc %d, want %d (%s)",
                      i, in, rc, v1_rows[i].rc, r.why ? r.why : "");
        if (rc == PP_BAD)
            ck_assert_msg(r.why != NULL, "row %zu: no reason", i);
        if (rc != PP_DONE)
            continue;
        ck_assert_uint_eq(r.len, n);
        ck_assert_int_eq(r.version, 1);
        ck_assert_str_eq(src_text(&r), v1_rows[i].src);
        check_prefixes((const uint8_t *)in, n);
    }
}
END_TEST

/* The 107-byte bound: a line of exactly 107 bytes is taken, 108 is not,
 * and 107 bytes without a LF are refused without waiting for more. */
START_TEST(test_v1_bound)
{
    char line[200];
    struct pp_result r;
    size_t n;

    strcpy(line, "PROXY UNKNOWN ");
    n = strlen(line);
    memset(line + n, 'x', PP_V1_MAX - 2 - n);
    memcpy(line + PP_V1_MAX - 2, "\r\n", 3);
    ck_assert_uint_eq(strlen(line), PP_V1_MAX);
    ck_assert_int_eq(pp_parse((const uint8_t *)line, PP_V1_MAX, &r), PP_DONE);
    ck_assert_uint_eq(r.len, PP_V1_MAX);

    memmove(line + 1, line, PP_V1_MAX + 1);
    line[0] = 'P';
    memcpy(line, "PROXY UNKNOWN x", 15);
    ck_assert_uint_eq(strlen(line), PP_V1_MAX + 1);
    ck_assert_int_eq(pp_parse((const uint8_t *)line, PP_V1_MAX + 1, &r), PP_BAD);
    ck_assert_int_eq(pp_parse((const uint8_t *)line, PP_V1_MAX, &r), PP_BAD);
    ck_assert_int_eq(pp_parse((const uint8_t *)line, PP_V1_MAX - 1, &r), PP_AGAIN);
}
END_TEST

/* What follows a header is not part of it: a request behind v1 and v2. */
START_TEST(test_bytes_behind)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    uint8_t buf[512], body[12] = { 192, 0, 2, 1, 127, 0, 0, 1, 0x9c, 0x40, 0, 80 };
    struct pp_result r;
    size_t n;

    n = (size_t)snprintf((char *)buf, sizeof(buf), "PROXY TCP4 192.0.2.1 127.0.0.1 40000 80\r\n%s", req);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_uint_eq(r.len, n - strlen(req));
    n = v2(buf, 0x21, 0x11, body, sizeof(body));
    memcpy(buf + n, req, strlen(req));
    ck_assert_int_eq(pp_parse(buf, n + strlen(req), &r), PP_DONE);
    ck_assert_uint_eq(r.len, n);
    ck_assert_str_eq(src_text(&r), "192.0.2.1:40000");
}
END_TEST

START_TEST(test_v2_table)
{
    uint8_t buf[PP_MAX + 64], body[PP_V2_MAX_LEN + 8];
    struct pp_result r;
    size_t n;

    memset(body, 0, sizeof(body));
    /* TCP over IPv4, then with TLVs after the addresses */
    memcpy(body, (uint8_t[]){ 203, 0, 113, 7, 127, 0, 0, 1, 0x9c, 0x40, 0, 80 }, 12);
    n = v2(buf, 0x21, 0x11, body, 12);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_uint_eq(r.len, 28);
    ck_assert_int_eq(r.version, 2);
    ck_assert_str_eq(src_text(&r), "203.0.113.7:40000");
    check_prefixes(buf, n);
    memcpy(body + 12, (uint8_t[]){ 0x04, 0, 3, 'a', 'b', 'c', 0xea, 0, 1, 'z' }, 10);
    n = v2(buf, 0x21, 0x11, body, 22);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_uint_eq(r.len, 38);
    ck_assert_str_eq(src_text(&r), "203.0.113.7:40000");

    /* TCP over IPv6 */
    memset(body, 0, 36);
    inet_pton(AF_INET6, "2001:db8::7", body);
    inet_pton(AF_INET6, "::1", body + 16);
    body[32] = 0x01; body[33] = 0xbb;
    n = v2(buf, 0x21, 0x21, body, 36);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_str_eq(src_text(&r), "[2001:db8::7]:443");
    check_prefixes(buf, n);

    /* LOCAL, UNSPEC, UNIX: the real peer stays */
    n = v2(buf, 0x20, 0x00, NULL, 0);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_int_eq(r.local, 1);
    n = v2(buf, 0x20, 0x11, body, 12);  /* LOCAL with addresses: ignored */
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_int_eq(r.local, 1);
    n = v2(buf, 0x21, 0x00, NULL, 0);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_int_eq(r.local, 1);
    n = v2(buf, 0x21, 0x31, body, 216);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    ck_assert_int_eq(r.local, 1);

    /* refused: version, command, family, protocol, UDP, short, too long */
    n = v2(buf, 0x11, 0x11, body, 12);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_BAD);
    ck_assert_int_eq(pp_parse(buf, 13, &r), PP_BAD);    /* at once */
    n = v2(buf, 0x22, 0x11, body, 12);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_BAD);
    n = v2(buf, 0x21, 0x41, body, 12);
    ck_assert_int_eq(pp_parse(buf, 14, &r), PP_BAD);
    n = v2(buf, 0x21, 0x13, body, 12);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_BAD);
    n = v2(buf, 0x21, 0x12, body, 12);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_BAD);     /* UDP */
    n = v2(buf, 0x21, 0x11, body, 11);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_BAD);
    n = v2(buf, 0x21, 0x21, body, 35);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_BAD);
    n = v2(buf, 0x21, 0x11, body, PP_V2_MAX_LEN);
    ck_assert_int_eq(pp_parse(buf, n, &r), PP_DONE);
    n = v2(buf, 0x21, 0x11, body, PP_V2_MAX_LEN + 1);
    ck_assert_int_eq(pp_parse(buf, 16, &r), PP_BAD);    /* from its length */
    buf[5] = 'x';
    ck_assert_int_eq(pp_parse(buf, 6, &r), PP_BAD);     /* signature */
}
END_TEST

static Suite *
pp_suite(void)
{
    Suite *s = suite_create("pp");
    TCase *tc = tcase_create("parse");

    tcase_add_test(tc, test_v1_table);
    tcase_add_test(tc, test_v1_bound);
    tcase_add_test(tc, test_bytes_behind);
    tcase_add_test(tc, test_v2_table);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(pp_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
