/*
 * worker/cachectl.c: RFC 9111 rules (see cachectl.h).
 *
 * Deliberate choices, where the RFC leaves room or peers differ:
 *  - An invalid Expires (or Expires: 0) means "already stale" (RFC 9111
 *    5.3); ATS accepts some invalid dates, we do not.
 *  - A malformed max-age / s-maxage (a bad value, or bad syntax such as
 *    "max-age = 60") makes the response stale rather than falling back to
 *    Expires or a heuristic (4.2.1: "invalid ... SHOULD be treated as
 *    stale").  Any other malformed directive is ignored.
 *  - Age values that do not parse are ignored; values that overflow are
 *    clamped to 2^31 (RFC 9111 1.2.2).
 *  - A request with Authorization is stored only when the response says
 *    public, s-maxage or must-revalidate (3.5).
 *  - A response stale on arrival (lifetime 0) without no-cache,
 *    must-revalidate or a validator (ETag, Last-Modified) is not stored:
 *    it could never be used.
 *  - With must-understand, no-store is ignored for a status whose caching
 *    rules we implement (5.2.2.3), and any other status is not stored.
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "worker/buf.h"
#include "worker/cachectl.h"

#define DELTA_MAX 2147483648LL      /* RFC 9111 1.2.2 */

/* Parse delta-seconds (1*DIGIT), clamping overflow.  -1 when invalid. */
static int64_t
cc_delta(const char *p, size_t n)
{
    int64_t v = 0;

    if (n >= 2 && p[0] == '"' && p[n - 1] == '"') {
        p++;
        n -= 2;     /* the quoted form is tolerated (RFC 9111 5.2) */
    }
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        if (v < DELTA_MAX)
            v = v * 10 + (p[i] - '0');
    }
    return v > DELTA_MAX ? DELTA_MAX : v;
}

/* Walk the directives of every Cache-Control field: calls fn with the
 * name and the (unquoted-as-given) value of each; has_val is 1 with a
 * value, 0 without, -1 when the directive is malformed ("max-age = 5":
 * RFC 9111 5.2 allows no whitespace around '='; val is then NULL). */
typedef void (*cc_fn)(void *arg, const char *name, size_t nl, const char *val,
                      size_t vl, int has_val);

static void
cc_walk_(const struct http_req *r, enum http_fid id, const char *field, size_t fl,
         cc_fn fn, void *arg)
{
    /* A known name is matched by its id (the scanner set each field's),
     * from its first line on; another (Pragma) by its name. */
    int first = id != HTTP_F_OTHER ? http_field_find_id(r, id, 0) : 0;

    for (int i = first < 0 ? r->nfields : first; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        if (id != HTTP_F_OTHER ? f->id != (uint32_t)id
                               : !(f->name_len == fl
                                   && (r->base[f->name] | 0x20) == field[0]
                                   && strncasecmp(r->base + f->name, field, fl) == 0))
            continue;
        const char *p = r->base + r->fields[i].value;
        const char *end = p + r->fields[i].value_len;

        while (p < end) {
            while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
                p++;
            const char *ns = p;
            while (p < end && *p != '=' && *p != ',' && *p != ' ' && *p != '\t')
                p++;
            size_t nl = (size_t)(p - ns);
            int bad = 0;
            while (p < end && (*p == ' ' || *p == '\t'))
                p++;
            if (p < end && *p == '=' && p > ns + nl)
                bad = 1;        /* "max-age =5": no whitespace around '=' */
            const char *vs = NULL;
            size_t vl = 0;
            int has_val = 0;
            if (p < end && *p == '=') {
                p++;
                if (p < end && (*p == ' ' || *p == '\t'))
                    bad = 1;
                while (p < end && (*p == ' ' || *p == '\t'))
                    p++;
                vs = p;
                has_val = 1;
                if (p < end && *p == '"') {
                    p++;
                    while (p < end && *p != '"') {
                        if (*p == '\\' && p + 1 < end)
                            p++;
                        p++;
                    }
                    if (p < end)
                        p++;
                } else {
                    /* a token; ";..." after it is a parameter (Surrogate-
                     * Control targets one), not part of the value */
                    while (p < end && *p != ',' && *p != ' ' && *p != '\t' && *p != ';')
                        p++;
                }
                vl = (size_t)(p - vs);
            }
            while (p < end && *p != ',')
                p++;
            /* A malformed directive reaches fn with has_val -1 (no value):
             * an invalid max-age must still make the response stale. */
            if (nl)
                fn(arg, ns, nl, bad ? NULL : vs, bad ? 0 : vl, bad ? -1 : has_val);
        }
    }
}

/* Each line of field `lit` (lowercase), whose id is `id` (HTTP_F_OTHER
 * for a name the scanner does not know). */
#define cc_walk(r, id, lit, fn, arg) cc_walk_((r), (id), "" lit, sizeof(lit) - 1, (fn), (arg))

#define IS(lit) (nl == sizeof(lit) - 1 && strncasecmp(name, lit, nl) == 0)

static void
cc_resp_one(void *arg, const char *name, size_t nl, const char *val, size_t vl,
            int has_val)
{
    struct cc_resp *cc = arg;

    /* A malformed freshness directive is an invalid one (below); any
     * other malformed directive is ignored. */
    if (has_val < 0 && !IS("max-age") && !IS("s-maxage"))
        return;
    if (IS("no-store")) {
        cc->no_store = 1;
    } else if (IS("no-cache")) {
        /* no-cache="a, b" (5.2.2.4): only those fields need validation;
         * we store the response without them.  Bare no-cache: always
         * validate. */
        if (has_val && vl >= 2 && val[0] == '"') {
            cc->omit_fields = val + 1;
            cc->omit_len = vl - 2;
        } else {
            cc->no_cache = 1;
        }
    } else if (IS("private")) {
        /* private="a" (5.2.2.7): a shared cache may store the rest */
        if (has_val && vl >= 2 && val[0] == '"') {
            cc->omit_fields2 = val + 1;
            cc->omit_len2 = vl - 2;
        } else {
            cc->private_ = 1;
        }
    } else if (IS("public")) {
        cc->public_ = 1;
    } else if (IS("must-revalidate")) {
        cc->must_revalidate = 1;
    } else if (IS("proxy-revalidate")) {
        cc->proxy_revalidate = 1;
    } else if (IS("immutable")) {
        cc->immutable = 1;
    } else if (IS("no-transform")) {
        cc->no_transform = 1;
    } else if (IS("must-understand")) {
        cc->must_understand = 1;
    } else if (IS("max-age")) {
        int64_t d = has_val > 0 ? cc_delta(val, vl) : -1;
        if (d < 0)
            cc->invalid = 1;
        else if (cc->max_age < 0)
            cc->max_age = d;
        else if (d != cc->max_age)
            cc->invalid = 1;    /* conflicting duplicates: trust neither */
    } else if (IS("s-maxage")) {
        int64_t d = has_val > 0 ? cc_delta(val, vl) : -1;
        if (d < 0)
            cc->invalid = 1;
        else if (cc->s_maxage < 0)
            cc->s_maxage = d;
        else if (d != cc->s_maxage)
            cc->invalid = 1;
    } else if (IS("stale-while-revalidate")) {
        int64_t d = has_val > 0 ? cc_delta(val, vl) : -1;
        if (d >= 0)
            cc->stale_while_revalidate = d;
    } else if (IS("stale-if-error")) {
        int64_t d = has_val > 0 ? cc_delta(val, vl) : -1;
        if (d >= 0)
            cc->stale_if_error = d;
    }
}

static void
cc_req_one(void *arg, const char *name, size_t nl, const char *val, size_t vl,
           int has_val)
{
    struct cc_req *cc = arg;

    if (has_val < 0)
        return;     /* malformed: ignored */
    if (IS("no-store")) {
        cc->no_store = 1;
    } else if (IS("no-cache")) {
        cc->no_cache = 1;
    } else if (IS("only-if-cached")) {
        cc->only_if_cached = 1;
    } else if (IS("max-age")) {
        int64_t d = has_val ? cc_delta(val, vl) : -1;
        if (d >= 0)
            cc->max_age = d;
    } else if (IS("max-stale")) {
        if (!has_val) {
            cc->max_stale_any = 1;
        } else {
            int64_t d = cc_delta(val, vl);
            if (d >= 0)
                cc->max_stale = d;
        }
    } else if (IS("min-fresh")) {
        int64_t d = has_val ? cc_delta(val, vl) : -1;
        if (d >= 0)
            cc->min_fresh = d;
    }
}

static void
cc_pragma_one(void *arg, const char *name, size_t nl, const char *val, size_t vl,
              int has_val)
{
    struct cc_req *cc = arg;

    if (has_val >= 0 && IS("no-cache"))
        cc->no_cache = 1;
}

#undef IS

/* Is every line of field `name` a valid Structured Fields dictionary
 * (RFC 8941 3.2) whose known directives have the right types (integers
 * for max-age, s-maxage, stale-*; booleans for the rest)?  Absent: 0. */
static int
cc_targeted_valid(const struct http_req *r, const char *name)
{
    int any = 0;

    for (int i = http_field_find(r, name, 0); i >= 0; i = http_field_find(r, name, i + 1)) {
        const char *p = r->base + r->fields[i].value;
        const char *end = p + r->fields[i].value_len;

        any = 1;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == '\t'))
                p++;
            const char *k = p;
            if (p >= end || !((*p >= 'a' && *p <= 'z') || *p == '*'))
                return 0;
            while (p < end && ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')
                               || *p == '_' || *p == '-' || *p == '.' || *p == '*'))
                p++;
            size_t kl = (size_t)(p - k);
            int is_int = (kl == 7 && memcmp(k, "max-age", 7) == 0)
                         || (kl == 8 && memcmp(k, "s-maxage", 8) == 0)
                         || (kl == 22 && memcmp(k, "stale-while-revalidate", 22) == 0)
                         || (kl == 14 && memcmp(k, "stale-if-error", 14) == 0);
            if (p < end && *p == '=') {
                p++;
                if (p < end && (*p == '-' || (*p >= '0' && *p <= '9'))) {
                    if (*p == '-')
                        p++;
                    const char *d = p;
                    while (p < end && *p >= '0' && *p <= '9')
                        p++;
                    if (p == d || p - d > 15)
                        return 0;
                    if (p < end && *p == '.')
                        return 0;       /* a decimal is the wrong type */
                } else if (is_int) {
                    return 0;           /* a string or token where a number goes */
                } else if (p < end && *p == '"') {
                    for (p++; p < end && *p != '"'; p++)
                        if (*p == '\\')
                            p++;
                    if (p >= end)
                        return 0;
                    p++;
                } else if (p < end && *p == '?') {
                    if (p + 1 >= end || (p[1] != '0' && p[1] != '1'))
                        return 0;
                    p += 2;
                } else if (p < end && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '*')) {
                    while (p < end && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
                        p++;
                } else {
                    return 0;
                }
            } else if (is_int) {
                return 0;               /* a bare max-age is boolean true */
            }
            while (p < end && *p == ';') {      /* parameters: accept tokens */
                while (p < end && *p != ',' && *p != ' ')
                    p++;
            }
            while (p < end && (*p == ' ' || *p == '\t'))
                p++;
            if (p < end) {
                if (*p != ',')
                    return 0;
                p++;
                while (p < end && (*p == ' ' || *p == '\t'))
                    p++;
                if (p >= end)
                    return 0;           /* trailing comma */
            }
        }
    }
    return any;
}

void
cachectl_parse_resp(const struct http_req *r, struct cc_resp *cc, int cdn)
{
    memset(cc, 0, sizeof(*cc));
    cc->max_age = cc->s_maxage = -1;
    cc->stale_while_revalidate = cc->stale_if_error = -1;
    /* RFC 9213: a valid targeted field replaces Cache-Control for this
     * cache's decisions; an invalid one is ignored as a whole.  The older
     * Surrogate-Control (W3C Edge Architecture) is honoured the same way
     * when there is no CDN-Cache-Control. */
    if (cdn && cc_targeted_valid(r, "cdn-cache-control"))
        cc_walk(r, HTTP_F_CDN_CACHE_CONTROL, "cdn-cache-control", cc_resp_one, cc);
    else if (cdn && http_field_find_id(r, HTTP_F_CDN_CACHE_CONTROL, 0) < 0
             && http_field_find_id(r, HTTP_F_SURROGATE_CONTROL, 0) >= 0)
        cc_walk(r, HTTP_F_SURROGATE_CONTROL, "surrogate-control", cc_resp_one, cc);
    else
        cc_walk(r, HTTP_F_CACHE_CONTROL, "cache-control", cc_resp_one, cc);
}

void
cachectl_parse_req(const struct http_req *r, struct cc_req *cc)
{
    memset(cc, 0, sizeof(*cc));
    cc->max_age = cc->max_stale = cc->min_fresh = -1;
    if (http_field_find_id(r, HTTP_F_CACHE_CONTROL, 0) >= 0)
        cc_walk(r, HTTP_F_CACHE_CONTROL, "cache-control", cc_req_one, cc);
    else
        cc_walk(r, HTTP_F_OTHER, "pragma", cc_pragma_one, cc);    /* RFC 9111 5.4 */
}

/* ------------------------------------------------------------------ */
/* Dates (RFC 9110 5.6.7) */

static int
cc_month(const char *p)
{
    static const char m[] = "JanFebMarAprMayJunJulAugSepOctNovDec";

    for (int i = 0; i < 12; i++)
        if (strncmp(p, m + 3 * i, 3) == 0)
            return i;
    return -1;
}

static int
cc_num(const char *p, int n)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t
cc_days(int y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The time of a valid date, or -1: the day must exist in that month of
 * that year (29 February only in a leap year). */
static time_t
cc_mktime(int y, int mon, int d, int h, int mi, int s)
{
    static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

    if (mon < 0 || d < 1 || d > mdays[mon] + (mon == 1 && leap) || h > 23 || mi > 59
        || s > 60 || y < 1900)
        return -1;
    time_t t = (time_t)(cc_days(y, mon + 1, d) * 86400 + h * 3600 + mi * 60 + s);
    /* A valid date before 1970 is simply long ago: the epoch serves, and
     * -1 stays free to mean "invalid". */
    return t < 0 ? 0 : t;
}

/* The year of a two-digit RFC 850 year yy at time now (RFC 9110 5.6.7):
 * the latest year ending in yy that is not more than 50 years after now.
 * 50 years is counted in seconds (of an average Gregorian year) from the
 * date itself, month, day and time included. */
static time_t
cc_rfc850(int yy, int mon, int d, int h, int mi, int s, time_t now)
{
    int64_t days = (int64_t)now / 86400;
    /* the year of now (civil from days, the inverse of cc_days) */
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t nowy = yoe + era * 400 + (mp >= 10);
    int64_t limit = (int64_t)now + 1577836800LL;   /* 50 * 365.2425 days */
    int64_t y = nowy + 51 - ((nowy + 51 - yy) % 100 + 100) % 100;

    if (mon < 0)
        return -1;
    /* the year is chosen by the time the fields name (a day that does not
     * exist then, like 29 February, counts as the next one), then checked */
    if (cc_days((int)y, mon + 1, d) * 86400 + h * 3600 + mi * 60 + s > limit)
        y -= 100;
    return cc_mktime((int)y, mon, d, h, mi, s);
}

time_t
cachectl_date(const char *p, size_t n)
{
    return cachectl_date_at(p, n, time(NULL));
}

time_t
cachectl_date_at(const char *p, size_t n, time_t now)
{
    char b[64];
    int d, y, h, mi, s, mon;

    while (n && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n >= sizeof(b) || n < 20)
        return -1;
    memcpy(b, p, n);
    b[n] = '\0';

    /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
    if (n == 29 && b[3] == ',' && b[4] == ' ' && b[7] == ' ' && b[11] == ' '
        && b[16] == ' ' && b[19] == ':' && b[22] == ':' && strcmp(b + 25, " GMT") == 0) {
        d = cc_num(b + 5, 2);
        mon = cc_month(b + 8);
        y = cc_num(b + 12, 4);
        h = cc_num(b + 17, 2);
        mi = cc_num(b + 20, 2);
        s = cc_num(b + 23, 2);
        if (d < 0 || y < 0 || h < 0 || mi < 0 || s < 0)
            return -1;
        return cc_mktime(y, mon, d, h, mi, s);
    }
    /* asctime: "Sun Nov  6 08:49:37 1994" */
    if (n == 24 && b[3] == ' ' && b[7] == ' ' && b[10] == ' ' && b[13] == ':'
        && b[16] == ':' && b[19] == ' ') {
        mon = cc_month(b + 4);
        d = b[8] == ' ' ? cc_num(b + 9, 1) : cc_num(b + 8, 2);
        h = cc_num(b + 11, 2);
        mi = cc_num(b + 14, 2);
        s = cc_num(b + 17, 2);
        y = cc_num(b + 20, 4);
        if (d < 0 || y < 0 || h < 0 || mi < 0 || s < 0)
            return -1;
        return cc_mktime(y, mon, d, h, mi, s);
    }
    /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
    const char *c = strchr(b, ',');
    if (c && strlen(c) == 24 && c[1] == ' ' && c[4] == '-' && c[8] == '-'
        && c[11] == ' ' && c[14] == ':' && c[17] == ':' && strcmp(c + 20, " GMT") == 0) {
        d = cc_num(c + 2, 2);
        mon = cc_month(c + 5);
        y = cc_num(c + 9, 2);
        h = cc_num(c + 12, 2);
        mi = cc_num(c + 15, 2);
        s = cc_num(c + 18, 2);
        if (d < 0 || y < 0 || h < 0 || mi < 0 || s < 0)
            return -1;
        return cc_rfc850(y, mon, d, h, mi, s, now);
    }
    return -1;
}

/* One formatter for every date we write: buf.c's. */
void
cachectl_fmt_date(time_t t, char out[32])
{
    fmt_http_date(t, out);
}

time_t
cachectl_field_date(const struct http_req *r, enum http_fid id)
{
    int i = http_field_find_id(r, id, 0);

    if (i < 0)
        return -1;
    return cachectl_date(r->base + r->fields[i].value, r->fields[i].value_len);
}

/* ------------------------------------------------------------------ */

int
cachectl_status_understood(int status)
{
    switch (status) {
    case 200: case 203: case 204: case 300: case 301: case 302: case 303:
    case 307: case 308: case 404: case 405: case 410: case 414: case 501:
        return 1;
    default:
        return 0;
    }
}

int
cachectl_status_heuristic(int status)
{
    switch (status) {
    case 200: case 203: case 204: case 206: case 300: case 301: case 308:
    case 404: case 405: case 410: case 414: case 501:
        return 1;
    default:
        return 0;
    }
}

int64_t
cachectl_lifetime(const struct http_req *resp, const struct cc_resp *cc,
                  time_t response_time, int required_headers, int64_t hmin,
                  int64_t hmax, int lm_milli)
{
    time_t date, expires, lm;
    int ei;

    if (cc->invalid)
        return 0;
    if (cc->s_maxage >= 0)
        return cc->s_maxage;
    if (cc->max_age >= 0)
        return cc->max_age;
    ei = http_field_find_id(resp, HTTP_F_EXPIRES, 0);
    if (ei >= 0) {
        expires = cachectl_date(resp->base + resp->fields[ei].value,
                                resp->fields[ei].value_len);
        if (expires < 0)
            return 0;           /* invalid Expires: already stale */
        date = cachectl_field_date(resp, HTTP_F_DATE);
        if (date < 0)
            date = response_time;
        return expires > date ? (int64_t)(expires - date) : 0;
    }
    if (required_headers >= 2)
        return -1;
    if (!cachectl_status_heuristic(resp->status) && !cc->public_)
        return -1;
    lm = cachectl_field_date(resp, HTTP_F_LAST_MODIFIED);
    if (lm < 0) {
        if (required_headers >= 1)
            return -1;
        return hmin;
    }
    date = cachectl_field_date(resp, HTTP_F_DATE);
    if (date < 0)
        date = response_time;
    int64_t h = date > lm ? (int64_t)(date - lm) * lm_milli / 1000 : 0;
    if (h < hmin)
        h = hmin;
    if (h > hmax)
        h = hmax;
    return h;
}

int64_t
cachectl_initial_age(const struct http_req *resp, time_t request_time,
                     time_t response_time)
{
    int ai = http_field_find_id(resp, HTTP_F_AGE, 0);
    int64_t age_value = 0, apparent, corrected, delay;
    time_t date = cachectl_field_date(resp, HTTP_F_DATE);

    if (ai >= 0) {
        /* A list ("7200, 0") or several lines: the first member counts
         * (RFC 9111 5.1); an invalid one means no Age at all. */
        const char *v = resp->base + resp->fields[ai].value;
        size_t n = resp->fields[ai].value_len, k = 0;
        while (k < n && v[k] != ',')
            k++;
        while (k > 0 && (v[k - 1] == ' ' || v[k - 1] == '\t'))
            k--;
        int64_t a = (k > 0 && v[0] != '"') ? cc_delta(v, k) : -1;
        if (a > 0)
            age_value = a;
    }
    apparent = date >= 0 && response_time > date ? (int64_t)(response_time - date) : 0;
    delay = response_time > request_time ? (int64_t)(response_time - request_time) : 0;
    corrected = age_value + delay;
    return apparent > corrected ? apparent : corrected;
}

/* Does any Vary line of resp list "*"?  (The lines are one list, RFC
 * 9110 5.3: "Vary: Accept" then "Vary: *" is Vary: *.) */
static int
cc_vary_star(const struct http_req *resp)
{
    for (int i = http_field_find_id(resp, HTTP_F_VARY, 0); i >= 0;
         i = http_field_find_id(resp, HTTP_F_VARY, i + 1))
        if (http_list_has(resp->base + resp->fields[i].value, resp->fields[i].value_len, "*"))
            return 1;
    return 0;
}

const char *
cachectl_storable_resp(const struct http_req *resp, const struct cc_resp *cc,
                       int64_t lifetime, int req_auth)
{
    /* must-understand (5.2.2.3): store only a status whose caching rules
     * we implement, and then no-store does not apply. */
    if (cc->must_understand) {
        if (!cachectl_status_understood(resp->status))
            return "must-understand";
    } else if (cc->no_store) {
        return "no-store";
    }
    if (cc->private_)
        return "private";
    if (resp->status < 200 || (resp->status == 206 && !cc->part_ok) || resp->status == 304)
        return "status";
    if (req_auth && !cc->public_ && cc->s_maxage < 0 && !cc->must_revalidate)
        return "authorization";
    if (cc_vary_star(resp))
        return "vary-star";
    /* Something must let us reuse it: explicit freshness, a heuristic
     * the configuration allows, or no-cache (stored, always validated). */
    if (lifetime < 0 && !cc->no_cache)
        return "no-freshness";
    if (lifetime <= 0 && !cc->no_cache && !cc->must_revalidate
        && http_field_find_id(resp, HTTP_F_ETAG, 0) < 0
        && http_field_find_id(resp, HTTP_F_LAST_MODIFIED, 0) < 0)
        return "stale-on-arrival";  /* and no validator to make it useful */
    return NULL;
}

const char *
cachectl_storable(const struct http_req *req, const struct cc_req *rcc,
                  const struct http_req *resp, const struct cc_resp *cc,
                  int64_t lifetime)
{
    if (req->method != HTTP_GET)
        return "method";
    if (rcc->no_store)
        return "request-no-store";
    return cachectl_storable_resp(resp, cc, lifetime,
                                  http_field_find_id(req, HTTP_F_AUTHORIZATION, 0) >= 0);
}
