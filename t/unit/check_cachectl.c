/*
 * t/unit/check_cachectl.c: the RFC 9111 rules of worker/cachectl.c, one
 * table row per case.
 *
 * Heads are written as text (lines separated by '\n', turned into CRLF
 * here) and go through the real scanner and parser (http_head_scan,
 * http_req_parse, http_resp_parse), so a row reads like the exchange it
 * stands for.  Every row names the RFC section it comes from.
 *
 * Every row is asserted.  The known differences this suite once printed
 * (an invalid "max-age = 60" taken as absent, Vary: * on a second line,
 * must-understand with no-store, 29 February of a common year, the fixed
 * RFC 850 year pivot) are fixed and are rows of their tables now.
 * cachectl_storable's answers are the Cache-Status details the worker
 * sends (store_fill_begin asks cachectl_storable_resp).
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/cachectl.h"

/* Sun, 06 Nov 1994 08:49:37 GMT, the RFCs' example date */
#define D0 784111777
#define DATE0 "Date: Sun, 06 Nov 1994 08:49:37 GMT\n"
#define NOCC  ((const char *)0)

static const struct http_limits lim = { 65535, 131072 };

/* Head text with '\n' line ends into CRLF ones, the blank line added. */
static size_t
crlf(const char *first, const char *fields, char *out, size_t outlen)
{
    size_t n = 0;

    n += (size_t)snprintf(out + n, outlen - n, "%s\r\n", first);
    for (const char *p = fields ? fields : ""; *p; p++) {
        ck_assert_uint_lt(n + 3, outlen);
        if (*p == '\n')
            out[n++] = '\r';
        out[n++] = *p;
    }
    ck_assert_uint_lt(n + 3, outlen);
    memcpy(out + n, "\r\n", 3);
    return n + 2;
}

/* Parse a response "HTTP/1.1 <status>" with fields into r (buffer buf). */
static void
mkresp(struct http_req *r, char *buf, size_t bufsz, const char *status,
       const char *fields, int method)
{
    char first[128];
    size_t n;

    snprintf(first, sizeof(first), "HTTP/1.1 %s", status);
    n = crlf(first, fields, buf, bufsz);
    http_req_reset(r);
    ck_assert_int_eq(http_head_scan(r, buf, n, &lim), HTTP_OK);
    ck_assert_msg(http_resp_parse(r, buf + r->start, method) == HTTP_OK,
                  "response %s / %s refused: %s", status, fields, r->reason);
}

/* Parse a request "<method> / HTTP/1.1" with Host and fields into r. */
static void
mkreq(struct http_req *r, char *buf, size_t bufsz, const char *method,
      const char *fields)
{
    char first[128], all[4096];
    size_t n;

    snprintf(first, sizeof(first), "%s / HTTP/1.1", method);
    snprintf(all, sizeof(all), "Host: a.test\n%s", fields ? fields : "");
    n = crlf(first, all, buf, bufsz);
    http_req_reset(r);
    ck_assert_int_eq(http_head_scan(r, buf, n, &lim), HTTP_OK);
    ck_assert_msg(http_req_parse(r, buf + r->start) == HTTP_OK,
                  "request %s / %s refused: %s", method, fields, r->reason);
}

/* Row text for a message: line ends shown as "\\n" (one buffer per call
 * slot, so two may appear in one printf). */
static const char *
esc(const char *s, int slot)
{
    static char out[2][1024];
    size_t n = 0;

    for (const char *p = s ? s : "(none)"; *p && n + 3 < sizeof(out[0]); p++) {
        if (*p == '\n') {
            out[slot][n++] = '\\';
            out[slot][n++] = 'n';
        } else {
            out[slot][n++] = *p;
        }
    }
    out[slot][n] = '\0';
    return out[slot];
}

/* ------------------------------------------------------------------ */
/* Freshness lifetime and storability */

struct life_row {
    const char *rfc;            /* where the rule is */
    const char *status;         /* status line after "HTTP/1.1 " */
    const char *resp;           /* response fields */
    const char *method;         /* request method */
    const char *req;            /* request fields (Host is added) */
    int         cdn;            /* CDN-Cache-Control honoured */
    int         required;       /* proxy.config.http.cache.required_headers */
    int64_t     hmin, hmax;     /* heuristic bounds */
    int64_t     lifetime;       /* cachectl_lifetime at response_time D0 */
    const char *storable;       /* cachectl_storable: NULL or the reason */
};

#define H0 0, 0, 3600, 86400    /* cdn off, no headers required, 1 h .. 1 d */
/* stale on arrival with nothing to validate it by: never usable, not stored */
#define SOA "stale-on-arrival"

static const struct life_row life_rows[] = {
    /* explicit freshness: max-age and s-maxage (RFC 9111 5.2.2.1, 5.2.2.10) */
    { "5.2.2.1", "200 OK", "Cache-Control: max-age=60\n", "GET", NULL, H0, 60, NULL },
    { "5.2.2.1", "200 OK", "Cache-Control: MAX-AGE=60\n", "GET", NULL, H0, 60, NULL },
    { "5.2.2.1", "200 OK", "Cache-Control: max-age=0\n", "GET", NULL, H0, 0, SOA },
    { "5.2", "200 OK", "Cache-Control: max-age=\"60\"\n", "GET", NULL, H0, 60, NULL },
    { "5.2.2.10", "200 OK", "Cache-Control: s-maxage=30, max-age=60\n", "GET", NULL, H0, 30, NULL },
    { "5.2.2.10", "200 OK", "Cache-Control: max-age=60, s-maxage=30\n", "GET", NULL, H0, 30, NULL },
    { "5.2.2.10", "200 OK", "Cache-Control: s-maxage=0, max-age=60\n", "GET", NULL, H0, 0, SOA },
    { "5.2.2.10", "200 OK", "Cache-Control: s-maxage=90\n", "GET", NULL, H0, 90, NULL },
    { "5.2.2.1", "200 OK", "Cache-Control: public, max-age=60\n", "GET", NULL, H0, 60, NULL },
    { "5.2.2.1", "200 OK", "Cache-Control: max-age=60,public\n", "GET", NULL, H0, 60, NULL },
    { "5.2.2.1", "200 OK", "Cache-Control: public\nCache-Control: max-age=60\n", "GET", NULL, H0, 60, NULL },
    { "5.2.2.1", "200 OK", "Cache-Control: max-age=60, max-age=60\n", "GET", NULL, H0, 60, NULL },
    /* invalid or conflicting values: stale (4.2.1) */
    { "4.2.1", "200 OK", "Cache-Control: max-age=60, max-age=70\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age=60\nCache-Control: max-age=70\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age=-1\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age=a\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age=6.5\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age=\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: s-maxage=x, max-age=60\n", "GET", NULL, H0, 0, SOA },
    /* "max-age = 60" is not a valid directive (5.2: no whitespace around
     * '='): an invalid max-age, so stale, not absent (no heuristic) */
    { "4.2.1", "200 OK", "Cache-Control: max-age = 60\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age =60\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age= 60\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: s-maxage = 60, max-age=60\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", DATE0 "Cache-Control: max-age = 60\n"
      "Expires: Sun, 06 Nov 1994 08:50:37 GMT\n", "GET", NULL, H0, 0, SOA },
    { "4.2.1", "200 OK", "Cache-Control: max-age = 60\nETag: \"e\"\n", "GET", NULL, H0, 0, NULL },
    /* other malformed directives are ignored */
    { "5.2", "200 OK", "Cache-Control: foo = 1, max-age=60\n", "GET", NULL, H0, 60, NULL },
    /* lifetime 0 is stored when it can be validated or must be anyway */
    { "4.3", "200 OK", "Cache-Control: max-age=0\nETag: \"e\"\n", "GET", NULL, H0, 0, NULL },
    { "4.3", "200 OK", DATE0 "Cache-Control: max-age=0\n"
      "Last-Modified: Sun, 06 Nov 1994 06:02:57 GMT\n", "GET", NULL, H0, 0, NULL },
    { "5.2.2.2", "200 OK", "Cache-Control: max-age=0, must-revalidate\n", "GET", NULL, H0, 0, NULL },
    { "5.2.2.4", "200 OK", "Cache-Control: max-age=0, no-cache\n", "GET", NULL, H0, 0, NULL },
    /* delta-seconds overflow: 2^31 (1.2.2) */
    { "1.2.2", "200 OK", "Cache-Control: max-age=99999999999999999999\n", "GET", NULL, H0,
      2147483648LL, NULL },
    { "1.2.2", "200 OK", "Cache-Control: max-age=2147483647\n", "GET", NULL, H0, 2147483647LL, NULL },
    /* Expires - Date (4.2.1, 5.3) */
    { "5.3", "200 OK", DATE0 "Expires: Sun, 06 Nov 1994 08:50:37 GMT\n", "GET", NULL, H0, 60, NULL },
    { "5.3", "200 OK", DATE0 "Expires: Sun, 06 Nov 1994 08:48:37 GMT\n", "GET", NULL, H0, 0, SOA },
    { "5.3", "200 OK", DATE0 "Expires: Sun, 06 Nov 1994 08:49:37 GMT\n", "GET", NULL, H0, 0, SOA },
    { "5.3", "200 OK", "Expires: Sun, 06 Nov 1994 09:49:37 GMT\n", "GET", NULL, H0, 3600, NULL },
    { "5.3", "200 OK", DATE0 "Expires: 0\n", "GET", NULL, H0, 0, SOA },
    { "5.3", "200 OK", DATE0 "Expires: tomorrow\n", "GET", NULL, H0, 0, SOA },
    { "5.3", "200 OK", DATE0 "Expires: Sunday, 06-Nov-94 08:50:37 GMT\n", "GET", NULL, H0, 60, NULL },
    { "5.3", "200 OK", DATE0 "Expires: Sun Nov  6 08:50:37 1994\n", "GET", NULL, H0, 60, NULL },
    { "5.3", "200 OK", DATE0 "Expires: Sun, 06 Nov 1994 08:50:37 GMT\nCache-Control: max-age=10\n",
      "GET", NULL, H0, 10, NULL },
    { "5.3", "200 OK", DATE0 "Expires: Sun, 06 Nov 1994 08:50:37 GMT\nCache-Control: s-maxage=5\n",
      "GET", NULL, H0, 5, NULL },
    { "5.3", "200 OK", "Date: garbage\nExpires: Sun, 06 Nov 1994 08:50:37 GMT\n", "GET", NULL, H0,
      60, NULL },
    /* heuristic freshness (4.2.2): 10% of Date - Last-Modified, clamped */
    { "4.2.2", "200 OK", DATE0 "Last-Modified: Sun, 06 Nov 1994 06:02:57 GMT\n", "GET", NULL,
      0, 0, 0, 86400, 1000, NULL },
    { "4.2.2", "200 OK", DATE0 "Last-Modified: Sun, 06 Nov 1994 06:02:57 GMT\n", "GET", NULL,
      H0, 3600, NULL },
    { "4.2.2", "200 OK", DATE0 "Last-Modified: Sun, 06 Nov 1984 08:49:37 GMT\n", "GET", NULL,
      H0, 86400, NULL },
    { "4.2.2", "200 OK", DATE0 "Last-Modified: Mon, 07 Nov 1994 08:49:37 GMT\n", "GET", NULL,
      0, 0, 0, 86400, 0, NULL },
    { "4.2.2", "200 OK", "Last-Modified: Sun, 06 Nov 1994 06:02:57 GMT\n", "GET", NULL,
      0, 0, 0, 86400, 1000, NULL },
    { "4.2.2", "200 OK", DATE0, "GET", NULL, H0, 3600, NULL },
    { "4.2.2", "200 OK", DATE0, "GET", NULL, 0, 1, 3600, 86400, -1, "no-freshness" },
    { "4.2.2", "200 OK", DATE0 "Last-Modified: Sun, 06 Nov 1994 06:02:57 GMT\n", "GET", NULL,
      0, 1, 0, 86400, 1000, NULL },
    { "4.2.2", "200 OK", DATE0 "Last-Modified: Sun, 06 Nov 1994 06:02:57 GMT\n", "GET", NULL,
      0, 2, 0, 86400, -1, "no-freshness" },
    { "4.2.2", "200 OK", DATE0 "Cache-Control: max-age=5\n", "GET", NULL, 0, 2, 0, 86400, 5, NULL },
    /* status codes heuristically cacheable (RFC 9110 15.1) or not */
    { "4.2.2", "404 Not Found", DATE0, "GET", NULL, H0, 3600, NULL },
    { "4.2.2", "410 Gone", DATE0, "GET", NULL, H0, 3600, NULL },
    { "4.2.2", "301 Moved Permanently", DATE0 "Location: /x\n", "GET", NULL, H0, 3600, NULL },
    { "4.2.2", "308 Permanent Redirect", DATE0 "Location: /x\n", "GET", NULL, H0, 3600, NULL },
    { "4.2.2", "204 No Content", DATE0, "GET", NULL, H0, 3600, NULL },
    { "4.2.2", "501 Not Implemented", DATE0, "GET", NULL, H0, 3600, NULL },
    { "4.2.2", "302 Found", DATE0 "Location: /x\n", "GET", NULL, H0, -1, "no-freshness" },
    { "4.2.2", "307 Temporary Redirect", DATE0 "Location: /x\n", "GET", NULL, H0, -1, "no-freshness" },
    { "4.2.2", "500 Internal Server Error", DATE0, "GET", NULL, H0, -1, "no-freshness" },
    { "4.2.2", "503 Service Unavailable", DATE0, "GET", NULL, H0, -1, "no-freshness" },
    { "4.2.2", "403 Forbidden", DATE0, "GET", NULL, H0, -1, "no-freshness" },
    { "4.2.2", "302 Found", DATE0 "Location: /x\nCache-Control: public\n", "GET", NULL, H0, 3600, NULL },
    { "3", "500 Internal Server Error", DATE0 "Cache-Control: max-age=60\n", "GET", NULL, H0, 60, NULL },
    { "3", "302 Found", DATE0 "Location: /x\nCache-Control: max-age=60\n", "GET", NULL, H0, 60, NULL },
    /* statuses never stored here */
    { "3", "206 Partial Content", "Content-Range: bytes 0-0/10\nCache-Control: max-age=60\n",
      "GET", NULL, H0, 60, "status" },
    { "3", "304 Not Modified", "Cache-Control: max-age=60\n", "GET", NULL, H0, 60, "status" },
    /* no-store, private, no-cache (5.2.2) */
    { "5.2.2.5", "200 OK", "Cache-Control: no-store, max-age=60\n", "GET", NULL, H0, 60, "no-store" },
    { "5.2.2.5", "200 OK", "Cache-Control: max-age=60\nCache-Control: no-store\n", "GET", NULL, H0,
      60, "no-store" },
    { "5.2.2.7", "200 OK", "Cache-Control: private, max-age=60\n", "GET", NULL, H0, 60, "private" },
    { "5.2.2.7", "200 OK", "Cache-Control: public, private, max-age=60\n", "GET", NULL, H0, 60,
      "private" },
    { "5.2.2.7", "200 OK", "Cache-Control: private=\"Set-Cookie\", max-age=60\n", "GET", NULL, H0,
      60, NULL },
    { "5.2.2.4", "200 OK", "Cache-Control: no-cache\n", "GET", NULL, H0, 3600, NULL },
    { "5.2.2.4", "200 OK", "Cache-Control: no-cache\n", "GET", NULL, 0, 2, 0, 0, -1, NULL },
    { "5.2.2.4", "200 OK", "Cache-Control: no-cache=\"Set-Cookie\", max-age=60\n", "GET", NULL, H0,
      60, NULL },
    { "5.4", "200 OK", "Pragma: no-cache\nCache-Control: max-age=60\n", "GET", NULL, H0, 60, NULL },
    /* the request's part (3, 3.5, 5.2.1.5) */
    { "3", "200 OK", "Cache-Control: max-age=60\n", "HEAD", NULL, H0, 60, "method" },
    { "3", "200 OK", "Cache-Control: max-age=60\n", "POST", "Content-Length: 0\n", H0, 60, "method" },
    { "5.2.1.5", "200 OK", "Cache-Control: max-age=60\n", "GET", "Cache-Control: no-store\n", H0, 60,
      "request-no-store" },
    { "3.5", "200 OK", "Cache-Control: max-age=60\n", "GET", "Authorization: Basic eDp5\n", H0, 60,
      "authorization" },
    { "3.5", "200 OK", "Cache-Control: public, max-age=60\n", "GET", "Authorization: Basic eDp5\n",
      H0, 60, NULL },
    { "3.5", "200 OK", "Cache-Control: s-maxage=60\n", "GET", "Authorization: Basic eDp5\n", H0, 60,
      NULL },
    { "3.5", "200 OK", "Cache-Control: must-revalidate, max-age=60\n", "GET",
      "Authorization: Basic eDp5\n", H0, 60, NULL },
    /* Vary: * is never stored (4.1) */
    { "4.1", "200 OK", "Cache-Control: max-age=60\nVary: *\n", "GET", NULL, H0, 60, "vary-star" },
    { "4.1", "200 OK", "Cache-Control: max-age=60\nVary: Accept, *\n", "GET", NULL, H0, 60, "vary-star" },
    { "4.1", "200 OK", "Cache-Control: max-age=60\nVary: Accept-Encoding\n", "GET", NULL, H0, 60,
      NULL },
    /* field lines are one list (RFC 9110 5.3): "Accept, *" */
    { "4.1", "200 OK", "Cache-Control: max-age=60\nVary: Accept\nVary: *\n", "GET", NULL, H0, 60,
      "vary-star" },
    { "4.1", "200 OK", "Cache-Control: max-age=60\nVary: Accept\nVary: Cookie\n", "GET", NULL,
      H0, 60, NULL },
    /* must-understand (5.2.2.3): no-store is overridden for a status whose
     * rules we implement; any other status is not stored */
    { "5.2.2.3", "200 OK", "Cache-Control: must-understand, no-store, max-age=60\n", "GET", NULL,
      H0, 60, NULL },
    { "5.2.2.3", "404 Not Found", "Cache-Control: no-store, must-understand, max-age=60\n", "GET",
      NULL, H0, 60, NULL },
    { "5.2.2.3", "200 OK", "Cache-Control: must-understand, max-age=60\n", "GET", NULL, H0, 60,
      NULL },
    { "5.2.2.3", "500 Internal Server Error", "Cache-Control: must-understand, no-store, "
      "max-age=60\n", "GET", NULL, H0, 60, "must-understand" },
    { "5.2.2.3", "500 Internal Server Error", "Cache-Control: must-understand, max-age=60\n",
      "GET", NULL, H0, 60, "must-understand" },
    { "5.2.2.3", "200 OK", "Cache-Control: must-understand, private, max-age=60\n", "GET", NULL,
      H0, 60, "private" },
    /* CDN-Cache-Control and Surrogate-Control (RFC 9213) */
    { "9213", "200 OK", "CDN-Cache-Control: max-age=600\nCache-Control: max-age=60\n", "GET", NULL,
      1, 0, 3600, 86400, 600, NULL },
    { "9213", "200 OK", "CDN-Cache-Control: max-age=600\nCache-Control: max-age=60\n", "GET", NULL,
      H0, 60, NULL },
    { "9213", "200 OK", "CDN-Cache-Control: max-age=abc\nCache-Control: max-age=60\n", "GET", NULL,
      1, 0, 3600, 86400, 60, NULL },
    { "9213", "200 OK", "CDN-Cache-Control: no-store\nCache-Control: max-age=60\n", "GET", NULL,
      1, 0, 3600, 86400, 3600, "no-store" },
    { "9213", "200 OK", "CDN-Cache-Control: max-age=600, private\nCache-Control: max-age=60\n",
      "GET", NULL, 1, 0, 3600, 86400, 600, "private" },
    { "9213", "200 OK", "Surrogate-Control: max-age=300\nCache-Control: max-age=60\n", "GET", NULL,
      1, 0, 3600, 86400, 300, NULL },
    { "9213", "200 OK", "CDN-Cache-Control: max-age=600\nSurrogate-Control: max-age=300\n", "GET",
      NULL, 1, 0, 3600, 86400, 600, NULL },
};

static int
life_eval(const struct life_row *w, int64_t *lifetime, const char **storable)
{
    static char rbuf[8192], qbuf[8192];
    static struct http_req resp, req;
    struct cc_resp cc;
    struct cc_req rcc;
    int method = strcmp(w->method, "GET") == 0 ? HTTP_GET
                 : strcmp(w->method, "HEAD") == 0 ? HTTP_HEAD : HTTP_POST;

    mkresp(&resp, rbuf, sizeof(rbuf), w->status, w->resp, method);
    mkreq(&req, qbuf, sizeof(qbuf), w->method, w->req);
    cachectl_parse_resp(&resp, &cc, w->cdn);
    cachectl_parse_req(&req, &rcc);
    *lifetime = cachectl_lifetime(&resp, &cc, D0, w->required, w->hmin, w->hmax, 100);
    *storable = cachectl_storable(&req, &rcc, &resp, &cc, *lifetime);
    return *lifetime == w->lifetime
           && (*storable == NULL ? w->storable == NULL
                                 : w->storable && strcmp(*storable, w->storable) == 0);
}

START_TEST(test_lifetime_and_storable)
{
    int64_t lt;
    const char *st;

    for (size_t i = 0; i < sizeof(life_rows) / sizeof(life_rows[0]); i++) {
        const struct life_row *w = &life_rows[i];
        ck_assert_msg(life_eval(w, &lt, &st),
                      "row %zu (RFC 9111 %s) %s / %s: lifetime %lld storable %s, want %lld %s",
                      i, w->rfc, w->status, esc(w->resp, 0), (long long)lt, st ? st : "yes",
                      (long long)w->lifetime, w->storable ? w->storable : "yes");
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Corrected initial age (RFC 9111 4.2.3) */

struct age_row {
    const char *resp;
    int64_t     request_time;   /* relative to D0 */
    int64_t     response_time;
    int64_t     age;
};

static const struct age_row age_rows[] = {
    { NULL, 0, 0, 0 },
    { DATE0, 0, 0, 0 },
    { "Age: 100\n", 0, 0, 100 },
    { "Age: 100\n", -5, 0, 105 },
    { DATE0 "Age: 10\n", 0, 50, 60 },       /* age_value + delay (50) > apparent (50) */
    { DATE0 "Age: 10\n", 45, 50, 50 },      /* apparent 50 > 10 + 5 */
    { DATE0, -3, 50, 53 },
    { "Date: Sun, 06 Nov 1994 08:50:37 GMT\n", 0, 0, 0 },    /* Date ahead: apparent 0 */
    { "Age: 7200, 0\n", 0, 0, 7200 },       /* a list: the first member (5.1) */
    { "Age: 7200 , 0\n", 0, 0, 7200 },
    { "Age: 10\nAge: 20\n", 0, 0, 10 },
    { "Age: \"100\"\n", 0, 0, 0 },          /* not delta-seconds: ignored */
    { "Age: -5\n", 0, 0, 0 },
    { "Age: abc\n", 0, 0, 0 },
    { "Age: 1.5\n", 0, 0, 0 },
    { "Age: 0\n", 0, 0, 0 },
    { "Age: 99999999999999\n", 0, 0, 2147483648LL },
    { "Age: 100\n", 10, 0, 100 },           /* clock going backwards: no delay */
    { "Date: garbage\nAge: 5\n", 0, 100, 105 },
};

START_TEST(test_initial_age)
{
    static char buf[4096];
    static struct http_req r;

    for (size_t i = 0; i < sizeof(age_rows) / sizeof(age_rows[0]); i++) {
        const struct age_row *w = &age_rows[i];
        mkresp(&r, buf, sizeof(buf), "200 OK", w->resp, HTTP_GET);
        int64_t a = cachectl_initial_age(&r, D0 + w->request_time, D0 + w->response_time);
        ck_assert_msg(a == w->age, "row %zu %s: age %lld, want %lld", i, esc(w->resp, 0),
                      (long long)a, (long long)w->age);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Request directives (RFC 9111 5.2.1, 5.4) */

struct reqcc_row {
    const char *req;
    unsigned    no_store, no_cache, only_if_cached, max_stale_any;
    int64_t     max_age, max_stale, min_fresh;
};

static const struct reqcc_row reqcc_rows[] = {
    { NULL, 0, 0, 0, 0, -1, -1, -1 },
    { "Cache-Control: no-cache\n", 0, 1, 0, 0, -1, -1, -1 },
    { "Cache-Control: NO-CACHE\n", 0, 1, 0, 0, -1, -1, -1 },
    { "Cache-Control: no-store\n", 1, 0, 0, 0, -1, -1, -1 },
    { "Cache-Control: only-if-cached\n", 0, 0, 1, 0, -1, -1, -1 },
    { "Cache-Control: max-age=0\n", 0, 0, 0, 0, 0, -1, -1 },
    { "Cache-Control: max-age=30\n", 0, 0, 0, 0, 30, -1, -1 },
    { "Cache-Control: max-age=x\n", 0, 0, 0, 0, -1, -1, -1 },
    { "Cache-Control: max-stale\n", 0, 0, 0, 1, -1, -1, -1 },
    { "Cache-Control: max-stale=10\n", 0, 0, 0, 0, -1, 10, -1 },
    { "Cache-Control: min-fresh=5\n", 0, 0, 0, 0, -1, -1, 5 },
    { "Cache-Control: max-age=5, min-fresh=2, max-stale=9\n", 0, 0, 0, 0, 5, 9, 2 },
    { "Cache-Control: max-age=5\nCache-Control: no-cache\n", 0, 1, 0, 0, 5, -1, -1 },
    { "Cache-Control: foo, bar=\"a,b\", no-store\n", 1, 0, 0, 0, -1, -1, -1 },
    { "Pragma: no-cache\n", 0, 1, 0, 0, -1, -1, -1 },
    { "Pragma: no-cache\nCache-Control: max-age=5\n", 0, 0, 0, 0, 5, -1, -1 },  /* 5.4 */
    { "Pragma: foo\n", 0, 0, 0, 0, -1, -1, -1 },
};

START_TEST(test_request_directives)
{
    static char buf[4096];
    static struct http_req r;
    struct cc_req cc;

    for (size_t i = 0; i < sizeof(reqcc_rows) / sizeof(reqcc_rows[0]); i++) {
        const struct reqcc_row *w = &reqcc_rows[i];
        mkreq(&r, buf, sizeof(buf), "GET", w->req);
        cachectl_parse_req(&r, &cc);
        ck_assert_msg(cc.no_store == w->no_store && cc.no_cache == w->no_cache
                      && cc.only_if_cached == w->only_if_cached
                      && cc.max_stale_any == w->max_stale_any && cc.max_age == w->max_age
                      && cc.max_stale == w->max_stale && cc.min_fresh == w->min_fresh,
                      "row %zu %s: %u %u %u %u %lld %lld %lld", i, esc(w->req, 0),
                      cc.no_store, cc.no_cache, cc.only_if_cached, cc.max_stale_any,
                      (long long)cc.max_age, (long long)cc.max_stale, (long long)cc.min_fresh);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Response directives that are flags (RFC 9111 5.2.2) */

START_TEST(test_response_directives)
{
    static char buf[4096];
    static struct http_req r;
    struct cc_resp cc;

    mkresp(&r, buf, sizeof(buf), "200 OK", "Cache-Control: must-revalidate, proxy-revalidate, "
           "immutable, no-transform, must-understand, stale-while-revalidate=30, "
           "stale-if-error=60, unknown-ext=\"x, y\"\n", HTTP_GET);
    cachectl_parse_resp(&r, &cc, 0);
    ck_assert(cc.must_revalidate && cc.proxy_revalidate && cc.immutable && cc.no_transform
              && cc.must_understand && !cc.no_store && !cc.private_ && !cc.invalid);
    ck_assert_int_eq(cc.stale_while_revalidate, 30);
    ck_assert_int_eq(cc.stale_if_error, 60);
    ck_assert_int_eq(cc.max_age, -1);

    mkresp(&r, buf, sizeof(buf), "200 OK",
           "Cache-Control: no-cache=\"Set-Cookie, X-A\", private=\"X-B\"\n", HTTP_GET);
    cachectl_parse_resp(&r, &cc, 0);
    ck_assert(!cc.no_cache && !cc.private_);
    ck_assert_uint_eq(cc.omit_len, 15);
    ck_assert(strncmp(cc.omit_fields, "Set-Cookie, X-A", 15) == 0);
    ck_assert_uint_eq(cc.omit_len2, 3);
    ck_assert(strncmp(cc.omit_fields2, "X-B", 3) == 0);

    /* a quoted string holding a comma is one value, not two directives */
    mkresp(&r, buf, sizeof(buf), "200 OK", "Cache-Control: ext=\"no-store, max-age=1\"\n", HTTP_GET);
    cachectl_parse_resp(&r, &cc, 0);
    ck_assert(!cc.no_store);
    ck_assert_int_eq(cc.max_age, -1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* HTTP-date (RFC 9110 5.6.7) */

struct date_row {
    const char *s;
    long long   t;              /* -1: invalid */
};

static const struct date_row date_rows[] = {
    { "Sun, 06 Nov 1994 08:49:37 GMT", D0 },
    { "  Sun, 06 Nov 1994 08:49:37 GMT  ", D0 },
    { "Sunday, 06-Nov-94 08:49:37 GMT", D0 },
    { "Sun Nov  6 08:49:37 1994", D0 },
    { "Sun Nov 06 08:49:37 1994", D0 },
    { "Thu, 01 Jan 1970 00:00:00 GMT", 0 },
    { "Wed, 31 Dec 1969 23:59:59 GMT", 0 },         /* before the epoch: the epoch */
    { "Fri, 31 Dec 9999 23:59:59 GMT", 253402300799LL },
    { "Sat, 29 Feb 2020 12:00:00 GMT", 1582977600LL },
    { "Tue, 19 Jan 2038 03:14:08 GMT", 2147483648LL },
    { "Sun, 06 Nov 1994 08:49:60 GMT", D0 + 23 },   /* a leap second */
    { "Sunday, 06-Nov-69 08:49:37 GMT", 3150953377LL },     /* 2069 (now: NOW26) */
    { "Thursday, 06-Nov-70 08:49:37 GMT", 3182489377LL },   /* 2070 */
    /* the day must exist in its month and year */
    { "Tue, 29 Feb 1994 08:49:37 GMT", -1 },
    { "Mon, 29 Feb 1900 08:49:37 GMT", -1 },                /* 1900: not a leap year */
    { "Tue, 29 Feb 2000 00:00:00 GMT", 951782400LL },       /* 2000: a leap year */
    { "Tue Feb 29 08:49:37 1994", -1 },
    { "Tue, 31 Apr 1994 08:49:37 GMT", -1 },
    { "Tue, 30 Apr 1994 08:49:37 GMT", 767695777LL },
    { "Tue, 28 Feb 1994 08:49:37 GMT", 762425377LL },
    { "Sun, 06 Nov 1994 08:49:37 UTC", -1 },
    { "Sun, 06 Nov 1994 08:49:37", -1 },
    { "Sun, 06 nov 1994 08:49:37 GMT", -1 },        /* month names are case-sensitive */
    { "Sun, 06 Nox 1994 08:49:37 GMT", -1 },
    { "Sun, 32 Nov 1994 08:49:37 GMT", -1 },
    { "Sun, 31 Nov 1994 08:49:37 GMT", -1 },
    { "Sun, 00 Nov 1994 08:49:37 GMT", -1 },
    { "Sun, 06 Nov 1994 24:00:00 GMT", -1 },
    { "Sun, 06 Nov 1994 08:60:00 GMT", -1 },
    { "Sun, 06 Nov 1994 08:49:61 GMT", -1 },
    { "Sun, 6 Nov 1994 08:49:37 GMT", -1 },
    { "Sun, 06 Nov 94 08:49:37 GMT", -1 },
    { "Sun, 06 Nov 1899 08:49:37 GMT", -1 },
    { "Sun, 06 Nov 1994 08:49:3x GMT", -1 },
    { "0", -1 },
    { "", -1 },
    { "-1", -1 },
    { "1994-11-06T08:49:37Z", -1 },
    { "Sun, 06 Nov 1994 08:49:37 GMT trailing", -1 },
};

/* RFC 850 two-digit years against a given now (RFC 9110 5.6.7): the
 * latest year with those digits not more than 50 years after now (50
 * average Gregorian years, 1577836800 s, counted from the whole date). */
struct rfc850_row {
    long long   now;
    const char *s;
    long long   t;
};

#define NOW26 1767225600LL      /* Thu, 01 Jan 2026 00:00:00 GMT; + 50 years
                                 * is 2076-01-01 00:00:00 exactly */

static const struct rfc850_row rfc850_rows[] = {
    { NOW26, "Sunday, 06-Nov-94 08:49:37 GMT", D0 },
    { NOW26, "Thursday, 06-Nov-70 08:49:37 GMT", 3182489377LL },   /* 2070 */
    { NOW26, "Sunday, 06-Nov-69 08:49:37 GMT", 3150953377LL },     /* 2069 */
    { NOW26, "Thursday, 01-Jan-76 00:00:00 GMT", 3345062400LL },   /* 2076: 50 years, not more */
    { NOW26, "Thursday, 01-Jan-76 00:00:01 GMT", 189302401LL },    /* 1976 */
    { NOW26, "Friday, 31-Dec-76 00:00:00 GMT", 220838400LL },      /* 1976 */
    { NOW26, "Saturday, 06-Nov-77 08:49:37 GMT", 247654177LL },    /* 1977 */
    { NOW26, "Thursday, 01-Jan-26 00:00:00 GMT", NOW26 },
    { NOW26, "Tuesday, 29-Feb-00 00:00:00 GMT", 951782400LL },     /* 2000, a leap year */
    { NOW26, "Monday, 29-Feb-27 00:00:00 GMT", -1 },               /* 2027: no such day */
    { NOW26, "Thursday, 29-Feb-76 00:00:00 GMT", 194400000LL },    /* 1976, leap */
    /* another now: 2090-06-01 00:00:00 (limit 2140-06-01) */
    { 3799958400LL, "Sunday, 06-Nov-10 00:00:00 GMT", 4444675200LL },  /* 2110 */
    { 3799958400LL, "Tuesday, 06-Nov-40 00:00:00 GMT", 2235772800LL }, /* 2040 */
    { 3799958400LL, "Tuesday, 01-May-40 00:00:00 GMT", 5375116800LL }, /* 2140 */
    /* before 1970 */
    { 0, "Thursday, 01-Jan-70 00:00:00 GMT", 0 },
    { 0, "Wednesday, 06-Nov-19 08:49:37 GMT", 1573030177LL },     /* 2019 */
    { 0, "Friday, 06-Nov-20 08:49:37 GMT", 0 },                   /* 1920: before the epoch */
};

START_TEST(test_dates)
{
    for (size_t i = 0; i < sizeof(date_rows) / sizeof(date_rows[0]); i++) {
        const struct date_row *w = &date_rows[i];
        long long t = (long long)cachectl_date_at(w->s, strlen(w->s), (time_t)NOW26);
        ck_assert_msg(t == w->t, "row %zu \"%s\": %lld, want %lld", i, w->s, t, w->t);
    }
    for (size_t i = 0; i < sizeof(rfc850_rows) / sizeof(rfc850_rows[0]); i++) {
        const struct rfc850_row *w = &rfc850_rows[i];
        long long t = (long long)cachectl_date_at(w->s, strlen(w->s), (time_t)w->now);
        ck_assert_msg(t == w->t, "rfc850 row %zu \"%s\" at %lld: %lld, want %lld", i, w->s,
                      w->now, t, w->t);
    }
    /* cachectl_date is cachectl_date_at now: the year 50 years on (as
     * two digits) is this century's, the one after is the last one's */
    {
        time_t now = time(NULL);
        struct tm tm;
        char b1[64], b2[64];
        gmtime_r(&now, &tm);
        snprintf(b1, sizeof(b1), "Monday, 01-Jan-%02d 00:00:00 GMT", (tm.tm_year + 1900 + 49) % 100);
        snprintf(b2, sizeof(b2), "Monday, 01-Jan-%02d 00:00:00 GMT", (tm.tm_year + 1900 + 51) % 100);
        ck_assert_int_eq((long long)cachectl_date(b1, strlen(b1)),
                         (long long)cachectl_date_at(b1, strlen(b1), now));
        ck_assert_int_gt((long long)cachectl_date(b1, strlen(b1)), (long long)now);
        ck_assert_int_lt((long long)cachectl_date(b2, strlen(b2)), (long long)now);
    }
    /* formatting and parsing agree */
    static const long long ts[] = { 0, D0, 951782400LL, 2147483647LL, 4102444800LL };
    char out[32];
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        cachectl_fmt_date((time_t)ts[i], out);
        ck_assert_uint_eq(strlen(out), 29);
        ck_assert_msg(cachectl_date(out, 29) == (time_t)ts[i], "%s", out);
    }
    cachectl_fmt_date(D0, out);
    ck_assert_str_eq(out, "Sun, 06 Nov 1994 08:49:37 GMT");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Status codes (RFC 9110 15.1; RFC 9111 5.2.2.3) */

START_TEST(test_status_codes)
{
    static const int heuristic[] = { 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501 };
    static const int understood[] = { 200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405,
                                      410, 414, 501 };
    int h = 0, u = 0;

    for (int s = 100; s < 600; s++) {
        int want_h = 0, want_u = 0;
        for (size_t i = 0; i < sizeof(heuristic) / sizeof(heuristic[0]); i++)
            want_h |= heuristic[i] == s;
        for (size_t i = 0; i < sizeof(understood) / sizeof(understood[0]); i++)
            want_u |= understood[i] == s;
        ck_assert_msg(cachectl_status_heuristic(s) == want_h, "heuristic %d", s);
        ck_assert_msg(cachectl_status_understood(s) == want_u, "understood %d", s);
        h += want_h;
        u += want_u;
    }
    ck_assert_int_eq(h, 12);
    ck_assert_int_eq(u, 14);
}
END_TEST

static Suite *
cachectl_suite(void)
{
    Suite *s = suite_create("cachectl");
    TCase *tc = tcase_create("rfc9111");

    tcase_add_test(tc, test_lifetime_and_storable);
    tcase_add_test(tc, test_initial_age);
    tcase_add_test(tc, test_request_directives);
    tcase_add_test(tc, test_response_directives);
    tcase_add_test(tc, test_dates);
    tcase_add_test(tc, test_status_codes);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(cachectl_suite());
    int      failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
