/*
 * t/fuzz/fuzz_cachectl.c: the caching rules over hostile heads.
 *
 * The input is a response head, optionally followed by a request head
 * (everything after the first blank line is tried as the request).  Both
 * are scanned and parsed as the worker does; then every cachectl question
 * is asked: Cache-Control for both sides (with and without
 * CDN-Cache-Control), every date field, lifetime under the three
 * required_headers levels, initial age, storable.  The whole input and
 * each field value are also fed to cachectl_date directly.
 * Invariants: deltas are -1 or in [0, 2^31]; a lifetime is -1 or >= 0;
 * a valid date formats and parses back to itself.
 */
#include "config.h"
#include "worker/cachectl.h"
#include "t/fuzz/fuzz.h"

#define DMAX 2147483648LL

static void
check_date(const char *p, size_t n)
{
    char *copy = fz_dup((const uint8_t *)p, n);
    time_t t = cachectl_date(copy, n);
    free(copy);
#ifndef FUZZ_KNOWN_BUGS
    /* bug 4: a date before 1970 is returned as a negative time, not -1 */
    FZ_CHECK(t >= -1);
#endif
    if (t >= 0 && t < 253402300800LL) {     /* before year 10000 */
        char out[32];
        cachectl_fmt_date(t, out);
        FZ_CHECK(strlen(out) == 29);
        FZ_CHECK(cachectl_date(out, 29) == t);
    }
}

static int
delta_ok(int64_t v)
{
    return v == -1 || (v >= 0 && v <= DMAX);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct http_limits lim = { 131072, 131072 };
    static struct http_req resp, req;
    char *buf = fz_dup(data, size);

    check_date(buf, size > 64 ? 64 : size);

    http_req_reset(&resp);
    if (http_head_scan(&resp, buf, size, &lim) != HTTP_OK
        || http_resp_parse(&resp, buf + resp.start, HTTP_GET) != HTTP_OK) {
        free(buf);
        return 0;
    }
    for (int i = 0; i < resp.nfields; i++)
        check_date(resp.base + resp.fields[i].value, resp.fields[i].value_len);

    /* the request: the rest of the input, or a plain GET */
    size_t rest = resp.start + resp.head_len;
    int have_req = 0;
    http_req_reset(&req);
    if (rest < size && http_head_scan(&req, buf + rest, size - rest, &lim) == HTTP_OK
        && http_req_parse(&req, buf + rest + req.start) == HTTP_OK)
        have_req = 1;
    if (!have_req) {
        static char get[] = "GET / HTTP/1.1\r\nHost: m.test\r\n\r\n";
        http_req_reset(&req);
        FZ_CHECK(http_head_scan(&req, get, sizeof(get) - 1, &lim) == HTTP_OK);
        FZ_CHECK(http_req_parse(&req, get) == HTTP_OK);
    }

    struct cc_req rcc;
    cachectl_parse_req(&req, &rcc);
    FZ_CHECK(delta_ok(rcc.max_age) && delta_ok(rcc.min_fresh) && delta_ok(rcc.max_stale));
    for (int cdn = 0; cdn < 2; cdn++) {
        struct cc_resp cc;
        cachectl_parse_resp(&resp, &cc, cdn);
        FZ_CHECK(delta_ok(cc.max_age) && delta_ok(cc.s_maxage));
        FZ_CHECK(delta_ok(cc.stale_while_revalidate) && delta_ok(cc.stale_if_error));
        for (int rh = 0; rh <= 2; rh++) {
            time_t now = 1700000000;
            int64_t lt = cachectl_lifetime(&resp, &cc, now, rh, 0, 86400, 100);
            FZ_CHECK(lt >= -1);
            FZ_CHECK(lt == -1 || rh < 2 || cc.invalid || cc.s_maxage >= 0
                     || cc.max_age >= 0 || http_field_find(&resp, "expires", 0) >= 0);
            int64_t age = cachectl_initial_age(&resp, now - 1, now);
            FZ_CHECK(age >= 0);
            const char *why = cachectl_storable(&req, &rcc, &resp, &cc, lt);
            FZ_CHECK(why == NULL || why[0] != '\0');
        }
    }
    (void)cachectl_field_date(&resp, HTTP_F_DATE);
    (void)cachectl_field_date(&resp, HTTP_F_LAST_MODIFIED);
    (void)cachectl_field_date(&req, HTTP_F_IF_MODIFIED_SINCE);
    free(buf);
    return 0;
}
