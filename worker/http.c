/*
 * worker/http.c: strict request heads and body framing (see http.h).
 *
 * Why a scanner of our own in front of http-parser: the parser accepts
 * obs-fold, LF-only heads and lets a few framing combinations through in
 * lenient builds, and it reports every problem as one errno.  We need
 * specific answers (400 vs 414 vs 431 vs 501), limits checked before a
 * byte is buffered past them, and no ambiguity a downstream server could
 * read differently (request smuggling).  So the scanner decides what a
 * head is and records its fields; http-parser then parses the same bytes
 * again (a second, independent check: if it disagrees we refuse) and owns
 * body framing, chunked decoding included.
 *
 * Smuggling rules enforced here (RFC 9112 6.1, 6.3, 11.2):
 *  - Content-Length with Transfer-Encoding: 400.
 *  - Content-Length not one 1*DIGIT value (a list or a second line, even
 *    of the same value; an overflow): 400.
 *  - chunked not the final coding, or applied twice: 400; a request
 *    whose final coding is not chunked ("gzip"): 400, since its length
 *    cannot be determined (RFC 9112 6.3 item 4); a coding we do not
 *    implement before a final chunked ("gzip, chunked"): 501;
 *    Transfer-Encoding in HTTP/1.0: 400.
 *  - obs-fold, whitespace before the colon, bare CR, NUL and other
 *    control bytes in a field: 400.
 *  - a chunk extension outside its grammar (RFC 9112 7.1.1: an
 *    unterminated quoted string, an empty name or value, junk after a
 *    value), in a request (400) or a response (the answer is cut): the
 *    body is forwarded as framed, so what we pass must parse one way.
 * Every refusal closes the connection (the caller's job), since after a
 * framing error the next byte's meaning is unknown.
 */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/path.h"
#include "worker/http.h"

/* tchar (RFC 9110 5.6.2) */
static const uint8_t http_tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
    ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
    ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1,
    ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
    ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1,
    ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
    ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1,
    ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

/* Blank lines tolerated before a request line (RFC 9112 2.2 asks for at
 * least one; a few more costs nothing, unbounded would be a free loop). */
#define HTTP_MAX_LEADING_BLANKS 8

_Static_assert(HTTP_MAX_FIELDS <= 255, "fidx holds 1 + a field index in a byte");
_Static_assert(HTTP_MAX_FIELDS % 64 == 0, "hop holds one bit per field");

/* The names of enum http_fid, lowercase. */
static const struct {
    const char *name;
    enum http_fid id;
} http_known[] = {
    { "accept-encoding", HTTP_F_ACCEPT_ENCODING },
    { "age", HTTP_F_AGE },
    { "authorization", HTTP_F_AUTHORIZATION },
    { "cache-control", HTTP_F_CACHE_CONTROL },
    { "cache-status", HTTP_F_CACHE_STATUS },
    { "cdn-cache-control", HTTP_F_CDN_CACHE_CONTROL },
    { "connection", HTTP_F_CONNECTION },
    { "content-encoding", HTTP_F_CONTENT_ENCODING },
    { "content-length", HTTP_F_CONTENT_LENGTH },
    { "content-location", HTTP_F_CONTENT_LOCATION },
    { "content-md5", HTTP_F_CONTENT_MD5 },
    { "content-range", HTTP_F_CONTENT_RANGE },
    { "date", HTTP_F_DATE },
    { "etag", HTTP_F_ETAG },
    { "expect", HTTP_F_EXPECT },
    { "expires", HTTP_F_EXPIRES },
    { "host", HTTP_F_HOST },
    { "if-modified-since", HTTP_F_IF_MODIFIED_SINCE },
    { "if-none-match", HTTP_F_IF_NONE_MATCH },
    { "if-range", HTTP_F_IF_RANGE },
    { "keep-alive", HTTP_F_KEEP_ALIVE },
    { "last-modified", HTTP_F_LAST_MODIFIED },
    { "location", HTTP_F_LOCATION },
    { "proxy-authenticate", HTTP_F_PROXY_AUTHENTICATE },
    { "proxy-connection", HTTP_F_PROXY_CONNECTION },
    { "range", HTTP_F_RANGE },
    { "referer", HTTP_F_REFERER },
    { "surrogate-control", HTTP_F_SURROGATE_CONTROL },
    { "te", HTTP_F_TE },
    { "trailer", HTTP_F_TRAILER },
    { "transfer-encoding", HTTP_F_TRANSFER_ENCODING },
    { "upgrade", HTTP_F_UPGRADE },
    { "user-agent", HTTP_F_USER_AGENT },
    { "vary", HTTP_F_VARY },
    { "via", HTTP_F_VIA },
    { "x-forwarded-for", HTTP_F_X_FORWARDED_FOR },
};
_Static_assert(sizeof(http_known) / sizeof(http_known[0]) == HTTP_F_NKNOWN - 1,
               "one name per enum http_fid");

/* A perfect hash of the names above, over their length and first and
 * last letters (found by search; http_known_init() checks it has no
 * collision), into http_known_slot: 1 + index in http_known (0: none)
 * and the name's length. */
#define HTTP_KNOWN_MINLEN 2
#define HTTP_KNOWN_MAXLEN 18
#define HTTP_KNOWN_HASH(n, first, last) \
    (((n) + ((unsigned)(first) | 0x20) * 11u + ((unsigned)(last) | 0x20) * 56u) & 127u)
static struct {
    uint8_t k, len;
} http_known_slot[128];

__attribute__((constructor)) static void
http_known_init(void)
{
    for (size_t k = 0; k < sizeof(http_known) / sizeof(http_known[0]); k++) {
        const char *nm = http_known[k].name;
        size_t n = strlen(nm);
        unsigned h = HTTP_KNOWN_HASH(n, nm[0], nm[n - 1]);

        if (n < HTTP_KNOWN_MINLEN || n > HTTP_KNOWN_MAXLEN || http_known_slot[h].k != 0)
            abort();    /* the table above was changed without the hash */
        http_known_slot[h].k = (uint8_t)(k + 1);
        http_known_slot[h].len = (uint8_t)n;
    }
}

static inline uint64_t
http_load64(const char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint32_t
http_load32(const char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint16_t
http_load16(const char *p)
{
    uint16_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

/* Does p[0..n) match the lowercase name[0..n) in any case (2 <= n <= 18)?
 * A word at a time: OR-ing 0x20 lowercases a letter and maps no other
 * byte onto a letter, digit or '-' except control bytes, which neither
 * field names nor field values hold (the scanner refused them). */
static inline int
http_name_eq(const char *p, const char *name, size_t n)
{
    if (n >= 8) {
        const uint64_t lc = 0x2020202020202020ull;
        if ((http_load64(p) | lc) != http_load64(name))
            return 0;
        if (n > 16 && (http_load64(p + 8) | lc) != http_load64(name + 8))
            return 0;
        return (http_load64(p + n - 8) | lc) == http_load64(name + n - 8);
    }
    if (n >= 4)
        return (http_load32(p) | 0x20202020u) == http_load32(name)
               && (http_load32(p + n - 4) | 0x20202020u) == http_load32(name + n - 4);
    return (uint16_t)(http_load16(p) | 0x2020u) == http_load16(name)
           && (uint16_t)(http_load16(p + n - 2) | 0x2020u) == http_load16(name + n - 2);
}

enum http_fid
http_field_id(const char *p, size_t n)
{
    if (n < HTTP_KNOWN_MINLEN || n > HTTP_KNOWN_MAXLEN)
        return HTTP_F_OTHER;
    unsigned h = HTTP_KNOWN_HASH(n, (unsigned char)p[0], (unsigned char)p[n - 1]);
    unsigned k = http_known_slot[h].k;

    if (k == 0 || http_known_slot[h].len != n || !http_name_eq(p, http_known[k - 1].name, n))
        return HTTP_F_OTHER;
    return http_known[k - 1].id;
}

void
http_req_reset(struct http_req *r)
{
    r->scan_pos = 0;
    r->start = 0;
    r->nlines = 0;
    r->head_len = 0;
    r->nfields = 0;
    r->reason = NULL;
    r->body_done = 0;
    memset(r->fidx, 0, sizeof(r->fidx));
}

/* Where the byte checks of line[from..to) must start: `to` when no byte
 * there is a control byte (below 0x20, or DEL), else an index at or
 * before the first one.  Eight bytes at a time: (x - 0x20..) & ~x has a
 * high bit set where a byte is below 0x20 (a borrow only ever starts at
 * such a byte), and x ^ 0x7f.. has a zero byte where x has DEL.  The
 * last (partial) word is checked as the eight bytes ending at `to`,
 * which may reach back before `from` into the line: a control byte
 * there (a field's HTAB before its value) only sends the caller to its
 * byte loop, which decides exactly. */
static inline int
http_has_ctl(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t d = x ^ (0x7f * ones);

    return ((((x - 0x20 * ones) & ~x) | ((d - ones) & ~d)) & highs) != 0;
}

static inline __attribute__((always_inline)) size_t
http_ctl_free(const char *line, size_t from, size_t to)
{
    size_t i = from;

    for (; i + 8 <= to; i += 8)
        if (http_has_ctl(http_load64(line + i)))
            return i;
    if (i < to && to >= 8 && !http_has_ctl(http_load64(line + to - 8)))
        return to;
    return i;
}

int
http_head_scan(struct http_req *r, const char *buf, size_t len,
               const struct http_limits *lim)
{
    size_t pos = r->scan_pos;

    for (;;) {
        const char *nl = pos < len ? memchr(buf + pos, '\n', len - pos) : NULL;
        size_t end, linelen;
        const char *line;

        if (nl == NULL) {
            size_t pending = len - pos;

            r->scan_pos = (uint32_t)pos;
            /* +1: a line of exactly line_max may wait here for its LF */
            if (r->nlines == 0 && pending > lim->line_max + 1) {
                r->reason = "request line too long";
                return 414;
            }
            if (len - r->start > lim->head_max) {
                r->reason = "request header section too large";
                return 431;
            }
            return HTTP_AGAIN;
        }
        end = (size_t)(nl - buf);
        linelen = end - pos;
        line = buf + pos;
        if (linelen > 0 && line[linelen - 1] == '\r')
            linelen--;
        if (end + 1 - r->start > lim->head_max) {
            r->reason = "request header section too large";
            return 431;
        }

        if (r->nlines == 0) {
            if (linelen == 0) {
                /* Leading blank line before the request line: r->start
                 * counts their bytes (a limit on the distance from r->start,
                 * which moves past each one, never fired). */
                if (r->start >= 2 * HTTP_MAX_LEADING_BLANKS) {
                    r->reason = "too many blank lines before the request";
                    return 400;
                }
                pos = end + 1;
                r->start = (uint32_t)pos;
                continue;
            }
            if (linelen > lim->line_max) {
                r->reason = "request line too long";
                return 414;
            }
            for (size_t i = http_ctl_free(line, 0, linelen); i < linelen; i++) {
                unsigned char c = (unsigned char)line[i];
                if (c < 0x21 && c != ' ') {
                    r->reason = "control character in the request line";
                    return 400;
                }
                if (c == 0x7f) {
                    r->reason = "control character in the request line";
                    return 400;
                }
            }
            r->nlines = 1;
            pos = end + 1;
            continue;
        }

        if (linelen == 0) {
            r->head_len = (uint32_t)(end + 1 - r->start);
            r->scan_pos = (uint32_t)(end + 1);
            return HTTP_OK;
        }
        if (line[0] == ' ' || line[0] == '\t') {
            r->reason = "obsolete line folding";
            return 400;
        }

        size_t n = 0;
        while (n < linelen && http_tchar[(unsigned char)line[n]])
            n++;
        if (n == 0 || n == linelen || line[n] != ':') {
            r->reason = (n < linelen && (line[n] == ' ' || line[n] == '\t'))
                            ? "whitespace before the colon"
                            : "malformed header field";
            return 400;
        }
        size_t v = n + 1, ve = linelen;
        for (size_t i = http_ctl_free(line, v, ve); i < ve; i++) {
            unsigned char c = (unsigned char)line[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f) {
                r->reason = c == '\r' ? "bare CR in a header field"
                                      : "control character in a header field";
                return 400;
            }
        }
        while (v < ve && (line[v] == ' ' || line[v] == '\t'))
            v++;
        while (ve > v && (line[ve - 1] == ' ' || line[ve - 1] == '\t'))
            ve--;
        if (r->nfields >= HTTP_MAX_FIELDS) {
            r->reason = "too many header fields";
            return 431;
        }
        struct http_field *f = &r->fields[r->nfields++];
        f->name = (uint32_t)(pos - r->start);
        f->name_len = (uint32_t)n;
        f->value = (uint32_t)(pos + v - r->start);
        f->value_len = (uint32_t)(ve - v);
        f->id = http_field_id(line, n);
        if (f->id != HTTP_F_OTHER && r->fidx[f->id] == 0)
            r->fidx[f->id] = (uint8_t)r->nfields;
        r->nlines++;
        pos = end + 1;
    }
}

/* ------------------------------------------------------------------ */

int
http_field_find(const struct http_req *r, const char *name, int from)
{
    size_t n = strlen(name);
    enum http_fid id = http_field_id(name, n);

    if (id != HTTP_F_OTHER)
        return http_field_find_id(r, id, from);
    for (int i = from; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        if (f->name_len == n && f->id == HTTP_F_OTHER
            && strncasecmp(r->base + f->name, name, n) == 0)
            return i;
    }
    return -1;
}

int64_t
http_max_forwards(const struct http_req *r, int *idx)
{
    int64_t v = 0;
    int i;

    /* the method first: the lookup is not for the requests that matter */
    *idx = -1;
    if (r->method != HTTP_TRACE && r->method != HTTP_OPTIONS)
        return -1;
    if ((i = *idx = http_field_find(r, "max-forwards", 0)) < 0)
        return -1;
    const char *p = r->base + r->fields[i].value;
    size_t n = r->fields[i].value_len;
    if (n == 0 || n > 18)
        return -1;
    for (size_t k = 0; k < n; k++) {
        if (p[k] < '0' || p[k] > '9')
            return -1;
        v = v * 10 + (p[k] - '0');
    }
    return v;
}

/* Next element of a comma-separated list: skips OWS and empty elements.
 * Returns 0 at the end. */
static int
http_list_next(const char **pp, const char *end, const char **tok,
               size_t *toklen)
{
    const char *p = *pp;

    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p >= end) {
            *pp = p;
            return 0;
        }
        const char *s = p;
        while (p < end && *p != ',')
            p++;
        const char *e = p;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > s) {
            *tok = s;
            *toklen = (size_t)(e - s);
            *pp = p;
            return 1;
        }
    }
}

int64_t
http_decimal(const char *p, size_t n)
{
    int64_t v = 0;

    if (n == 0)
        return -1;
    for (size_t k = 0; k < n; k++) {
        int d = p[k] - '0';
        if (d < 0 || d > 9 || v > (INT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    return v;
}

int
http_list_has(const char *p, size_t n, const char *tok)
{
    const char *end = p + n, *t;
    size_t tl, want = strlen(tok);

    while (http_list_next(&p, end, &t, &tl))
        if (tl == want && strncasecmp(t, tok, tl) == 0)
            return 1;
    return 0;
}

int
http_req_no_store(const struct http_req *r)
{
    for (int i = http_field_find_id(r, HTTP_F_CACHE_CONTROL, 0); i >= 0;
         i = http_field_find_id(r, HTTP_F_CACHE_CONTROL, i + 1))
        if (http_list_has(r->base + r->fields[i].value, r->fields[i].value_len, "no-store"))
            return 1;
    return 0;
}

static const char *const http_methods[] = {
#define XX(num, name, string) [num] = #string,
    HTTP_METHOD_MAP(XX)
#undef XX
};

const char *
http_method_name(int method)
{
    if (method == HTTP_M_PUSH)
        return "PUSH";
    if (method >= 0 && (size_t)method < sizeof(http_methods) / sizeof(http_methods[0])
        && http_methods[method])
        return http_methods[method];
    return "UNKNOWN";
}

static int
http_method_lookup(const char *p, size_t n)
{
    if (n == 4 && memcmp(p, "PUSH", 4) == 0)
        return HTTP_M_PUSH;
    for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++) {
        const char *m = http_methods[i];
        if (m && strlen(m) == n && memcmp(m, p, n) == 0)
            return (int)i;
    }
    return -1;
}

/* Validate a Host value (RFC 9110 7.2: uri-host [ ":" port ]) and split it.
 * Returns 0, or -1 when invalid. */
static int
http_host_split(const char *p, size_t n, size_t *hostlen, int *port)
{
    size_t i = 0;

    if (n == 0)
        return -1;
    if (p[0] == '[') {
        for (i = 1; i < n && p[i] != ']'; i++)
            if (!(strchr("0123456789abcdefABCDEF:.", p[i])) || p[i] == '\0')
                return -1;
        if (i >= n || i == 1)
            return -1;
        i++;
    } else {
        for (; i < n && p[i] != ':'; i++) {
            unsigned char c = (unsigned char)p[i];
            /* reg-name: unreserved / pct-encoded / sub-delims */
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                  || (c >= '0' && c <= '9') || (c && strchr("-._~%!$&'()*+,;=", c))))
                return -1;
        }
        if (i == 0)
            return -1;
    }
    *hostlen = i;
    *port = -1;
    if (i == n)
        return 0;
    if (p[i] != ':')
        return -1;
    i++;
    if (i == n)
        return 0;       /* "host:" means the default port */
    int v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
        if (v > 65535)
            return -1;
    }
    *port = v;
    return 0;
}

static inline void
http_hop_set(struct http_req *r, int i)
{
    r->hop[i >> 6] |= (uint64_t)1 << (i & 63);
}

/* The names that are hop-by-hop wherever they appear (RFC 9110 7.6.1;
 * Proxy-Authenticate is meant for the next client only, 11.7.1). */
static int
http_id_hop(uint32_t id)
{
    switch (id) {
    case HTTP_F_CONNECTION:
    case HTTP_F_KEEP_ALIVE:
    case HTTP_F_PROXY_AUTHENTICATE:
    case HTTP_F_PROXY_CONNECTION:
    case HTTP_F_TE:
    case HTTP_F_TRAILER:
    case HTTP_F_TRANSFER_ENCODING:
    case HTTP_F_UPGRADE:
        return 1;
    default:
        return 0;
    }
}

/* Marking the fields a message's Connection lines name.  The common case
 * is one or two options, each matched against the fields in a pass; so
 * that a hostile list of thousands of options costs no more than its
 * length, each known name is applied once, and after HTTP_CONN_LINEAR
 * unknown options the remaining ones are looked up by binary search in
 * the other field names, sorted once. */
#define HTTP_CONN_LINEAR 8

struct http_conn_marks {
    uint64_t done;                  /* known ids applied (bit per id) */
    int      nunknown;              /* unknown-name options seen */
    int      nsorted;               /* entries in sorted, -1: not built */
    uint8_t  sorted[HTTP_MAX_FIELDS];   /* HTTP_F_OTHER fields, by name */
};
_Static_assert(HTTP_F_NKNOWN <= 64, "http_conn_marks.done has a bit per id");

/* Field names in a total order: by length, then bytes without case. */
static int
http_name_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    if (al != bl)
        return al < bl ? -1 : 1;
    return strncasecmp(a, b, al);
}

static void
http_conn_sort(struct http_req *r, struct http_conn_marks *m)
{
    m->nsorted = 0;
    for (int i = 0; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        int j;

        if (f->id != HTTP_F_OTHER)
            continue;
        /* insertion sort: at most HTTP_MAX_FIELDS names, once a message */
        for (j = m->nsorted++; j > 0; j--) {
            const struct http_field *g = &r->fields[m->sorted[j - 1]];
            if (http_name_cmp(r->base + g->name, g->name_len, r->base + f->name,
                              f->name_len) <= 0)
                break;
            m->sorted[j] = m->sorted[j - 1];
        }
        m->sorted[j] = (uint8_t)i;
    }
}

/* A connection option names the fields t[0..tl) hop-by-hop (RFC 9110
 * 7.6.1) -- except Content-Length: we forward a message with the framing
 * we validated, and a next hop that lost it would frame the body its own
 * way ("Connection: content-length" on a POST would otherwise smuggle the
 * body to the origin as a request of its own). */
static void
http_conn_option(struct http_req *r, struct http_conn_marks *m, const char *t, size_t tl)
{
    enum http_fid id = http_field_id(t, tl);
    int lo, hi;

    if (id == HTTP_F_CONTENT_LENGTH || ((m->done >> id) & 1))
        return;
    if (id != HTTP_F_OTHER) {
        m->done |= (uint64_t)1 << id;
        for (int i = http_field_find_id(r, id, 0); i >= 0; i = http_field_find_id(r, id, i + 1))
            http_hop_set(r, i);
        return;
    }
    if (++m->nunknown <= HTTP_CONN_LINEAR) {
        for (int i = 0; i < r->nfields; i++) {
            const struct http_field *f = &r->fields[i];
            if (f->name_len == tl && f->id == HTTP_F_OTHER
                && strncasecmp(r->base + f->name, t, tl) == 0)
                http_hop_set(r, i);
        }
        return;
    }
    if (m->nsorted < 0)
        http_conn_sort(r, m);
    for (lo = 0, hi = m->nsorted; lo < hi;) {     /* the first name >= t */
        int mid = (lo + hi) / 2;
        const struct http_field *f = &r->fields[m->sorted[mid]];
        if (http_name_cmp(r->base + f->name, f->name_len, t, tl) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < m->nsorted; lo++) {
        const struct http_field *f = &r->fields[m->sorted[lo]];
        if (http_name_cmp(r->base + f->name, f->name_len, t, tl) != 0)
            break;
        http_hop_set(r, m->sorted[lo]);
    }
}

/* FNV-1a of a field name, case folded: a trailer's name is matched
 * against the connection options of a head that may be gone by then. */
static uint64_t
http_name_hash(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        h = (h ^ (ch >= 'A' && ch <= 'Z' ? ch | 0x20u : ch)) * 0x100000001b3ull;
    }
    return h;
}

/* A connection option other than close and keep-alive (RFC 9110 7.6.1:
 * it names a field of the message, in the head or the trailers). */
static void
http_conn_name(struct http_req *r, const char *t, size_t tl)
{
    r->conn_tokens |= HTTP_CONN_OTHER;
    if (r->nconn_names < HTTP_CONN_NAMES)
        r->conn_names[r->nconn_names] = http_name_hash(t, tl);
    if (r->nconn_names <= HTTP_CONN_NAMES)
        r->nconn_names++;
}

/* The Connection tokens we act on (close, keep-alive), whether it names
 * other fields, and the fields it names marked hop-by-hop. */
static void
http_conn_tokens(struct http_req *r, struct http_conn_marks *m, const struct http_field *f)
{
    const char *p = r->base + f->value, *end = p + f->value_len, *t;
    size_t tl;

    while (http_list_next(&p, end, &t, &tl)) {
        if (tl == 5 && strncasecmp(t, "close", 5) == 0)
            r->conn_tokens |= HTTP_CONN_CLOSE;
        else if (tl == 10 && strncasecmp(t, "keep-alive", 10) == 0)
            r->conn_tokens |= HTTP_CONN_KEEPALIVE;
        else
            http_conn_name(r, t, tl);
        http_conn_option(r, m, t, tl);
    }
}

static int
http_refuse(struct http_req *r, int status, const char *why)
{
    r->reason = why;
    return status;
}

static int
http_cb_message_complete(http_parser *p)
{
    struct http_req *r = p->data;

    r->body_done = 1;
    /* Stop exactly at the message boundary: the rest is the next request. */
    http_parser_pause(p, 1);
    return 0;
}

static int
http_cb_body(http_parser *p, const char *at, size_t n)
{
    struct http_req *r = p->data;

    if (r->sink)
        r->sink(r->sink_arg, at, n);
    return 0;
}

static int
http_cb_headers_complete(http_parser *p)
{
    struct http_req *r = p->data;

    /* 1: no body follows (responses to HEAD, 1xx, 204, 304). */
    return r->skip_body ? 1 : 0;
}

static void http_body_init(struct http_req *r);

static const http_parser_settings http_settings = {
    .on_headers_complete = http_cb_headers_complete,
    .on_body = http_cb_body,
    .on_message_complete = http_cb_message_complete,
};

/* http-parser takes only SP after the value of Content-Length or of a
 * chunked Transfer-Encoding, where RFC 9110 5.5 allows any OWS: a valid
 * "Content-Length: 5<HTAB>" was refused as malformed.  Neither field is
 * forwarded as it came (proxy.c writes them), so their trailing OWS
 * becomes SP before the second opinion. */
static void
http_framing_ows(const struct http_req *r, char *head)
{
    static const enum http_fid ids[2] = { HTTP_F_CONTENT_LENGTH, HTTP_F_TRANSFER_ENCODING };

    for (int k = 0; k < 2; k++) {
        for (int i = http_field_find_id(r, ids[k], 0); i >= 0;
             i = http_field_find_id(r, ids[k], i + 1)) {
            char *p = head + r->fields[i].value + r->fields[i].value_len;
            for (; *p == ' ' || *p == '\t'; p++)
                *p = ' ';
        }
    }
}

/* Framing fields: Content-Length, Transfer-Encoding.  See the essay.
 * For a response (resp set) a final coding other than chunked is 501,
 * which the caller turns into reading until the close. */
static int
http_req_framing(struct http_req *r, int resp)
{
    int have_te = 0, te_chunked_last = 0, te_chunked_count = 0;
    int te_other = 0;

    r->content_length = -1;
    r->chunked = 0;
    for (int i = 0; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        const char *v = r->base + f->value;

        if (f->id == HTTP_F_CONTENT_LENGTH) {
            const char *p = v, *end = v + f->value_len, *t;
            size_t tl;
            int any = 0;
            /* RFC 9110 8.6 lets a recipient take "42, 42" (or two lines
             * of 42) for 42, or refuse it: refused, as http-parser (our
             * second check) would, so one value frames the message.  Its
             * spelling ("042") is not passed on: proxy.c writes the
             * value. */
            while (http_list_next(&p, end, &t, &tl)) {
                int64_t val = http_decimal(t, tl);
                if (val < 0)
                    return http_refuse(r, 400, "invalid Content-Length");
                if (r->content_length >= 0)
                    return http_refuse(r, 400, r->content_length != val
                                                   ? "differing Content-Length values"
                                                   : "repeated Content-Length value");
                r->content_length = val;
                any = 1;
            }
            if (!any)
                return http_refuse(r, 400, "empty Content-Length");
        } else if (f->id == HTTP_F_TRANSFER_ENCODING) {
            const char *p = v, *end = v + f->value_len, *t;
            size_t tl;
            have_te = 1;
            while (http_list_next(&p, end, &t, &tl)) {
                /* a coding may carry parameters: compare the name only */
                size_t nl = 0;
                while (nl < tl && t[nl] != ';' && t[nl] != ' ' && t[nl] != '\t')
                    nl++;
                if (nl == 7 && strncasecmp(t, "chunked", 7) == 0) {
                    te_chunked_count++;
                    te_chunked_last = 1;
                } else {
                    te_other = 1;
                    te_chunked_last = 0;
                }
            }
        }
    }
    r->te_chunked_last = te_chunked_count == 1 && te_chunked_last;
    if (!have_te)
        return HTTP_OK;
    if (r->content_length >= 0)
        return http_refuse(r, 400, "Content-Length with Transfer-Encoding");
    if (r->major == 1 && r->minor == 0)
        return http_refuse(r, 400, resp ? "Transfer-Encoding in an HTTP/1.0 response"
                                        : "Transfer-Encoding in an HTTP/1.0 request");
    if (te_chunked_count > 1)
        return http_refuse(r, 400, "chunked applied more than once");
    if (te_chunked_count == 1 && !te_chunked_last)
        return http_refuse(r, 400, "chunked is not the final transfer coding");
    if (te_other && !te_chunked_last && !resp)
        return http_refuse(r, 400, "the final transfer coding is not chunked");
    if (te_other)
        return http_refuse(r, 501, "transfer coding not implemented");
    if (!te_chunked_last)
        return http_refuse(r, 400, "empty Transfer-Encoding");
    r->chunked = 1;
    return HTTP_OK;
}

/* Request line: method SP request-target SP HTTP-version (RFC 9112 3). */
static int
http_req_line(struct http_req *r, char *head, size_t len)
{
    size_t i = 0, ms, ts, te;

    while (i < len && http_tchar[(unsigned char)head[i]])
        i++;
    if (i == 0 || i >= len || head[i] != ' ')
        return http_refuse(r, 400, "malformed request line");
    ms = i;
    ts = ++i;
    while (i < len && head[i] != ' ')
        i++;
    te = i;
    if (te == ts || i >= len)
        return http_refuse(r, 400, "malformed request line");
    i++;
    if (len - i != 8 || memcmp(head + i, "HTTP/", 5) != 0
        || head[i + 5] < '0' || head[i + 5] > '9' || head[i + 6] != '.'
        || head[i + 7] < '0' || head[i + 7] > '9')
        return http_refuse(r, 400, "malformed HTTP version");
    r->major = (uint16_t)(head[i + 5] - '0');
    r->minor = (uint16_t)(head[i + 7] - '0');
    if (r->major != 1)
        return http_refuse(r, 505, "HTTP version not supported");
    r->method = http_method_lookup(head, ms);
    if (r->method < 0)
        return http_refuse(r, 501, "method not implemented");
    if (r->method == HTTP_M_PUSH)
        memcpy(head, "POST", 4);    /* same length; http-parser lacks PUSH */
    r->target = (uint32_t)ts;
    r->target_len = (uint32_t)(te - ts);
    return HTTP_OK;
}

/* ------------------------------------------------------------------ */
/* The request path (see http_path_normalize in http.h). */

static int
http_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* RFC 3986 2.3: percent-encodings of these mean the character itself. */
static int
http_unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || c == '-' || c == '.' || c == '_' || c == '~';
}

/* One path segment seg[0..n) (between slashes; its percent-encodings
 * checked): NULL, or why it is refused.  The segment is cut at ';' and at
 * an encoded slash, backslash or semicolon (%2F, %5C, %3B); when it has
 * several pieces and one of them is a dot segment ("..%2Fx", "a%5C..",
 * "..;x"), it is refused: normalising it would mean decoding what must
 * stay encoded, and an origin that decodes %2F or %5C, or strips path
 * parameters (Tomcat, Jetty; Spring after decoding), would take that
 * piece for ".." and climb out of the prefix we mapped. */
static const char *
http_segment_bad(const char *seg, size_t n)
{
    int pieces, dots = conf_path_dot_piece(seg, n, &pieces);

    return pieces > 1 && dots ? "dot segment behind an encoded slash or a parameter" : NULL;
}

/* Request-target bytes, as http_path_scan sees them.  HP_BAD: never in
 * a request-target (controls and spaces, which the head scanner refused
 * already, DEL and bytes outside ASCII). */
enum {
    HP_PLAIN = 0, HP_BAD, HP_HASH, HP_BSLASH, HP_PCT, HP_SLASH, HP_QUERY, HP_DOT, HP_SEMI
};
static uint8_t http_path_class[256];

__attribute__((constructor)) static void
http_path_init(void)
{
    for (int c = 0; c < 256; c++)
        http_path_class[c] = c <= 0x20 || c >= 0x7f ? HP_BAD : HP_PLAIN;
    http_path_class['#'] = HP_HASH;
    http_path_class['\\'] = HP_BSLASH;
    http_path_class['%'] = HP_PCT;
    http_path_class['/'] = HP_SLASH;
    http_path_class['?'] = HP_QUERY;
    http_path_class['.'] = HP_DOT;
    http_path_class[';'] = HP_SEMI;
}

/* The end of the path segment seg[0..n), which held the byte classes in
 * the bits of saw: NULL or why it is refused; *normal = 0 when it needs
 * normalising (a percent-encoding, or a dot segment). */
static const char *
http_segment_end(const char *seg, size_t n, unsigned saw, int *normal)
{
    if (saw & (1u << HP_PCT)) {
        *normal = 0;
        return http_segment_bad(seg, n);
    }
    if (saw & (1u << HP_DOT)) {
        if (n <= 2 && conf_path_is_dots(seg, n))
            *normal = 0;
        else if (saw & (1u << HP_SEMI))
            return http_segment_bad(seg, n);
    }
    return NULL;
}

/* A request-target's path and query p[0..n) (after the authority of the
 * absolute form): NULL when acceptable, else why it is refused (400).
 * Beyond what the head scanner refuses (controls, spaces): DEL and bytes
 * outside ASCII, a fragment (RFC 9112 3.2: a request-target has none),
 * and in the path a backslash (some origins take it for '/'), a malformed
 * or NUL percent-encoding, and the dot segments http_segment_bad
 * describes.  *normal: 1 when http_path_normalize would leave the path as
 * it is (it starts with '/', has no percent-encoding nor dot segment). */
/* Is the target p[0..n) plainly acceptable and normal: it starts with
 * '/', holds no byte the scan below stops at ('%', '#', '\\', ';', a
 * control, a space, DEL or non-ASCII) and no "/." (where every dot
 * segment starts)?  Eight bytes a step, by the has-zero-byte trick, which
 * may flag a byte that is not one of these (the full scan then decides)
 * but never misses one.  A profile put the byte-at-a-time scan at ~11
 * instructions a byte of every request target. */
static int
http_path_plain(const char *p, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t carry = 0;     /* the previous word's last byte was '/' */
    size_t i = 0;

    if (n == 0 || p[0] != '/')
        return 0;
#define HTTP_HAS(x, c) ((((x) ^ ((c) * ones)) - ones) & ~((x) ^ ((c) * ones)) & highs)
    for (; i + 8 <= n; i += 8) {
        uint64_t x = http_load64(p + i);
        uint64_t bad = (((x - 0x21 * ones) & ~x) | x) & highs;
        bad |= HTTP_HAS(x, 0x7f) | HTTP_HAS(x, '%') | HTTP_HAS(x, '#')
               | HTTP_HAS(x, '\\') | HTTP_HAS(x, ';');
        uint64_t slash = HTTP_HAS(x, '/'), dot = HTTP_HAS(x, '.');
        if (bad || (((slash << 8) | carry) & dot))
            return 0;
        carry = slash >> 56;    /* byte 7's flag, as byte 0's */
    }
#undef HTTP_HAS
    for (; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c >= 0x7f || c == '%' || c == '#' || c == '\\' || c == ';'
            || (c == '.' && i > 0 && p[i - 1] == '/'))
            return 0;
    }
    return 1;
#else
    (void)p;
    (void)n;
    return 0;
#endif
}

static const char *
http_path_scan(const char *p, size_t n, int *normal)
{
    const char *why;
    size_t i, seg = 0;
    unsigned saw = 0;

    if (http_path_plain(p, n)) {
        *normal = 1;
        return NULL;
    }
    *normal = n > 0 && p[0] == '/';
    for (i = 0; i < n; i++) {
        unsigned k = http_path_class[(unsigned char)p[i]];
        int hi, lo;

        switch (k) {
        case HP_PLAIN:
            continue;
        case HP_BAD:
            return "invalid byte in the request target";
        case HP_HASH:
            return "fragment in the request target";
        case HP_BSLASH:
            return "backslash in the request path";
        case HP_PCT:
            if (n - i < 3 || (hi = http_hexval((unsigned char)p[i + 1])) < 0
                || (lo = http_hexval((unsigned char)p[i + 2])) < 0)
                return "invalid percent-encoding in the request path";
            if (hi == 0 && lo == 0)
                return "encoded NUL in the request path";
            i += 2;
            break;
        case HP_SLASH:
        case HP_QUERY:
            if (saw && (why = http_segment_end(p + seg, i - seg, saw, normal)) != NULL)
                return why;
            if (k == HP_QUERY)
                goto query;
            seg = i + 1;
            saw = 0;
            continue;
        }
        saw |= 1u << k;
    }
    return saw ? http_segment_end(p + seg, n - seg, saw, normal) : NULL;

query:
    /* The query is kept as sent: only bytes a target never holds. */
    for (i++; i < n; i++) {
        unsigned k = http_path_class[(unsigned char)p[i]];
        if (k == HP_BAD)
            return "invalid byte in the request target";
        if (k == HP_HASH)
            return "fragment in the request target";
    }
    return NULL;
}

const char *
http_req_path(const struct http_req *r, char *buf, size_t bufsz, size_t *outlen)
{
    if (r->path_normal && r->path_len + 2 <= bufsz) {
        *outlen = r->path_len;
        return r->base + r->path;
    }
    return http_path_normalize(r->base + r->path, r->path_len, buf, bufsz, outlen);
}

const char *
http_path_normalize(const char *p, size_t n, char *buf, size_t bufsz, size_t *outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t pe, i, o;

    /* room for the "/" an empty path gets */
    if (n + 2 > bufsz)
        return NULL;
    for (pe = 0; pe < n && p[pe] != '?'; pe++)
        ;
    /* Already normal (the common case): no percent sign, no dot segment. */
    if (pe > 0 && p[0] == '/') {
        for (i = 1; i < pe; i++)
            if (p[i] == '%' || (p[i] == '.' && p[i - 1] == '/'
                                && (i + 1 == pe || p[i + 1] == '/'
                                    || (p[i + 1] == '.' && (i + 2 == pe || p[i + 2] == '/')))))
                break;
        if (i == pe) {
            *outlen = n;
            return p;
        }
    }

    /* Segment by segment: decode, then drop "." and let ".." take the
     * segment before it away (RFC 3986 5.2.4; at the root it is dropped).
     * buf[0..o) holds "/seg/seg..." without a trailing slash. */
    o = 0;
    i = pe > 0 && p[0] == '/' ? 1 : 0;
    while (pe > 0) {
        size_t start = o + 1, d = start;

        buf[o] = '/';
        for (; i < pe && p[i] != '/'; i++) {
            if (p[i] != '%') {
                buf[d++] = p[i];
                continue;
            }
            int hi = i + 2 < pe ? http_hexval((unsigned char)p[i + 1]) : -1;
            int lo = hi < 0 ? -1 : http_hexval((unsigned char)p[i + 2]);
            int v = hi * 16 + lo;
            if (lo < 0) {
                buf[d++] = p[i];    /* not from the parser: left alone */
                continue;
            }
            if (http_unreserved((unsigned char)v)) {
                buf[d++] = (char)v;
            } else {
                buf[d++] = '%';
                buf[d++] = hex[v >> 4];
                buf[d++] = hex[v & 15];
            }
            i += 2;
        }
        if (!conf_path_is_dots(buf + start, d - start)) {
            o = d;
        } else {
            if (d - start == 2)
                while (o > 0 && buf[--o] != '/')
                    ;
            if (i >= pe)
                buf[o++] = '/';     /* "/a/." and "/a/b/..": "/a/" */
        }
        if (i >= pe)
            break;
        i++;
    }
    if (o == 0)
        buf[o++] = '/';             /* "" and "?q": the path is "/" */
    memcpy(buf + o, p + pe, n - pe);
    *outlen = o + n - pe;
    return buf;
}

/* Where the request goes: absolute-form authority, else Host. */
static int
http_req_target(struct http_req *r)
{
    const char *t = r->base + r->target;
    size_t tl = r->target_len, hl;
    int port;

    r->absolute = 0;
    r->https = 0;
    r->path_normal = 0;
    if (t[0] == '/') {
        r->path = r->target;
        r->path_len = r->target_len;
    } else if (tl == 1 && t[0] == '*') {
        if (r->method != HTTP_OPTIONS)
            return http_refuse(r, 400, "asterisk-form target outside OPTIONS");
        r->path = r->target;
        r->path_len = 1;
    } else if (r->method == HTTP_CONNECT) {
        /* authority-form, port required (RFC 9112 3.2.3); refused later
         * with 405 either way, but never with bytes a log or a key
         * could be confused by. */
        if (http_host_split(t, tl, &hl, &port) != 0 || port < 0)
            return http_refuse(r, 400, "invalid CONNECT target");
        r->path = r->target;
        r->path_len = r->target_len;
        return HTTP_OK;     /* no Host logic */
    } else {
        struct http_parser_url u;

        http_parser_url_init(&u);
        if (http_parser_parse_url(t, tl, 0, &u) != 0
            || !(u.field_set & (1 << UF_SCHEMA)) || !(u.field_set & (1 << UF_HOST)))
            return http_refuse(r, 400, "invalid request target");
        /* an empty userinfo ("http://@host/") is one too: http-parser
         * sets no UF_USERINFO for it, but its '@' precedes the host */
        if ((u.field_set & (1 << UF_USERINFO)) || memchr(t, '@', u.field_data[UF_HOST].off))
            return http_refuse(r, 400, "userinfo in the request target");
        const char *sch = t + u.field_data[UF_SCHEMA].off;
        size_t schl = u.field_data[UF_SCHEMA].len;
        if (schl == 4 && strncasecmp(sch, "http", 4) == 0)
            r->https = 0;
        else if (schl == 5 && strncasecmp(sch, "https", 5) == 0)
            r->https = 1;
        else
            return http_refuse(r, 400, "unsupported scheme in the request target");
        r->absolute = 1;
        r->host = r->target + u.field_data[UF_HOST].off;
        r->host_len = u.field_data[UF_HOST].len;
        /* http-parser strips the brackets of an IPv6 literal; keep them. */
        if (r->host > r->target && r->base[r->host - 1] == '[') {
            r->host--;
            r->host_len += 2;
        }
        r->port = (u.field_set & (1 << UF_PORT)) ? u.port : (r->https ? 443 : 80);
        if (u.field_set & (1 << UF_PATH)) {
            r->path = r->target + u.field_data[UF_PATH].off;
            r->path_len = r->target_len - u.field_data[UF_PATH].off;
        } else {
            /* "http://h?q" or "http://h": the path is "/" (RFC 9112 3.2.1);
             * we point at a static "/" later via path_len 0. */
            r->path = (u.field_set & (1 << UF_QUERY))
                          ? r->target + u.field_data[UF_QUERY].off - 1
                          : r->target + r->target_len;
            r->path_len = r->target + r->target_len - r->path;
        }
        if (u.field_set & (1 << UF_FRAGMENT))
            return http_refuse(r, 400, "fragment in the request target");
    }
    if (r->path_len != 1 || r->base[r->path] != '*') {
        const char *why = http_path_scan(r->base + r->path, r->path_len, &r->path_normal);
        if (why)
            return http_refuse(r, 400, why);
    }

    if (r->f_host >= 0) {
        const struct http_field *f = &r->fields[r->f_host];
        if (http_host_split(r->base + f->value, f->value_len, &hl, &port) != 0)
            return http_refuse(r, 400, "invalid Host");
        if (!r->absolute) {
            r->host = f->value;
            r->host_len = (uint32_t)hl;
            r->port = port < 0 ? 80 : port;
        }
    } else if (!r->absolute) {
        r->host = 0;
        r->host_len = 0;
        r->port = 80;
    }
    return HTTP_OK;
}

int
http_req_parse(struct http_req *r, char *head)
{
    struct http_conn_marks marks;
    size_t line_len, n;
    int rc;

    r->base = head;
    r->f_host = -1;
    r->conn_tokens = 0;
    r->nconn_names = 0;
    memset(r->hop, 0, sizeof(r->hop));
    r->expect_continue = 0;
    r->content_length = -1;
    r->chunked = 0;
    r->has_body = 0;
    r->skip_body = 0;
    r->until_close = 0;
    r->status = 0;
    r->host = r->host_len = 0;
    r->port = 80;

    line_len = (size_t)((char *)memchr(head, '\n', r->head_len) - head);
    if (line_len > 0 && head[line_len - 1] == '\r')
        line_len--;
    if ((rc = http_req_line(r, head, line_len)) != HTTP_OK)
        return rc;

    marks.done = 0;
    marks.nunknown = 0;
    marks.nsorted = -1;
    for (int i = 0; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        if (http_id_hop(f->id))
            http_hop_set(r, i);
        if (f->id == HTTP_F_HOST) {
            if (r->f_host >= 0)
                return http_refuse(r, 400, "duplicate Host");
            r->f_host = i;
        } else if (f->id == HTTP_F_CONNECTION) {
            http_conn_tokens(r, &marks, f);
        } else if (f->id == HTTP_F_EXPECT) {
            /* RFC 9110 10.1.1: ignored in an HTTP/1.0 request, whose
             * client takes no 1xx (15.2) and sends its body anyway */
            if (f->value_len == 12 && strncasecmp(head + f->value, "100-continue", 12) == 0)
                r->expect_continue = r->minor >= 1;
            else
                return http_refuse(r, 417, "unsupported expectation");
        }
    }
    if ((rc = http_req_framing(r, 0)) != HTTP_OK)
        return rc;
    if ((rc = http_req_target(r)) != HTTP_OK)
        return rc;
    /* RFC 9112 3.2 wants 400 for any HTTP/1.1 request without Host.  As
     * ATS (and Squid) do, a target that carries its own authority (the
     * absolute form, CONNECT's authority form) is accepted without one:
     * Cistern routes and keys by that authority and writes the Host line
     * the origin sees itself, so no second reading of the request can
     * disagree about where it goes.  The origin form still needs Host. */
    if (r->minor >= 1 && r->f_host < 0 && !r->absolute
        && r->method != HTTP_CONNECT)
        return http_refuse(r, 400, "missing Host");

    if (r->minor >= 1)
        r->keep_alive = !(r->conn_tokens & HTTP_CONN_CLOSE);
    else
        r->keep_alive = (r->conn_tokens & HTTP_CONN_KEEPALIVE)
                        && !(r->conn_tokens & HTTP_CONN_CLOSE);
    r->has_body = r->chunked || r->content_length > 0;

    /* The independent second opinion, and the body framing state. */
    http_framing_ows(r, head);
    http_parser_init(&r->parser, HTTP_REQUEST);
    r->parser.data = r;
    r->sink = NULL;
    r->body_done = 0;
    n = http_parser_execute(&r->parser, &http_settings, head, r->head_len);
    if (HTTP_PARSER_ERRNO(&r->parser) == HPE_PAUSED) {
        /* message complete within the head: no body */
        http_parser_pause(&r->parser, 0);
    } else if (HTTP_PARSER_ERRNO(&r->parser) != HPE_OK || n != r->head_len) {
        return http_refuse(r, 400, "malformed request");
    }
    if (r->body_done != !r->has_body)
        return http_refuse(r, 400, "ambiguous message framing");
    http_body_init(r);
    return HTTP_OK;
}

/* Status line: HTTP-version SP 3DIGIT SP [reason-phrase] (RFC 9112 4). */
static int
http_resp_line(struct http_req *r, const char *head, size_t len)
{
    if (len < 12 || memcmp(head, "HTTP/1.", 7) != 0 || head[7] < '0'
        || head[7] > '9' || head[8] != ' ' || head[9] < '1' || head[9] > '5'
        || head[10] < '0' || head[10] > '9' || head[11] < '0' || head[11] > '9'
        || (len > 12 && head[12] != ' '))
        return http_refuse(r, 502, "invalid status line from the origin");
    r->major = 1;
    r->minor = (uint16_t)(head[7] - '0');
    r->status = (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
    r->phrase = len > 13 ? 13 : (uint32_t)len;
    r->phrase_len = len > 13 ? (uint32_t)(len - 13) : 0;
    return HTTP_OK;
}

int
http_resp_parse(struct http_req *r, char *head, int req_method)
{
    struct http_conn_marks marks;
    size_t line_len, n;
    int rc;

    r->base = head;
    r->conn_tokens = 0;
    r->nconn_names = 0;
    memset(r->hop, 0, sizeof(r->hop));
    r->content_length = -1;
    r->chunked = 0;
    r->until_close = 0;
    r->f_host = -1;
    r->method = req_method;
    line_len = (size_t)((char *)memchr(head, '\n', r->head_len) - head);
    if (line_len > 0 && head[line_len - 1] == '\r')
        line_len--;
    if ((rc = http_resp_line(r, head, line_len)) != HTTP_OK)
        return rc;
    marks.done = 0;
    marks.nunknown = 0;
    marks.nsorted = -1;
    for (int i = 0; i < r->nfields; i++) {
        if (http_id_hop(r->fields[i].id))
            http_hop_set(r, i);
        if (r->fields[i].id == HTTP_F_CONNECTION)
            http_conn_tokens(r, &marks, &r->fields[i]);
    }
    r->skip_body = req_method == HTTP_HEAD || r->status < 200
                   || r->status == 204 || r->status == 304;
    if (r->status < 200 || r->status == 204) {
        /* RFC 9110 8.6, RFC 9112 6.1: no Content-Length or
         * Transfer-Encoding in a 1xx or 204; an origin's is not passed on */
        for (int i = 0; i < r->nfields; i++)
            if (r->fields[i].id == HTTP_F_CONTENT_LENGTH || r->fields[i].id == HTTP_F_TRANSFER_ENCODING)
                http_hop_set(r, i);
    }
    if (!r->skip_body) {
        /* Same smuggling rules as requests, except that a response without
         * chunked last is read until close (RFC 9112 6.3 item 4). */
        rc = http_req_framing(r, 1);
        if (rc == 501 && r->te_chunked_last) {
            /* "gzip, chunked": we could frame it but not undo the gzip,
             * and must not pass it on relabelled as plain chunked */
            r->status = 0;
            return http_refuse(r, 502, "transfer coding not supported");
        } else if (rc == 501) {
            /* an unknown coding alone: passed on, read until close; not
             * a refusal (a reason left set would cut the body later) */
            r->reason = NULL;
            r->until_close = 1;
        } else if (rc != HTTP_OK) {
            r->status = 0;
            return http_refuse(r, 502, r->reason);
        }
        if (!r->chunked && r->content_length < 0)
            r->until_close = 1;
    }
    r->keep_alive = !(r->conn_tokens & HTTP_CONN_CLOSE) && !r->until_close
                    && (r->minor >= 1 || (r->conn_tokens & HTTP_CONN_KEEPALIVE));
    r->has_body = !r->skip_body && (r->chunked || r->until_close || r->content_length > 0);

    http_framing_ows(r, head);
    http_parser_init(&r->parser, HTTP_RESPONSE);
    r->parser.data = r;
    r->sink = NULL;
    r->body_done = 0;
    n = http_parser_execute(&r->parser, &http_settings, head, r->head_len);
    if (HTTP_PARSER_ERRNO(&r->parser) == HPE_PAUSED)
        http_parser_pause(&r->parser, 0);
    else if (HTTP_PARSER_ERRNO(&r->parser) != HPE_OK || n != r->head_len)
        return http_refuse(r, 502, "malformed response from the origin");
    http_body_init(r);
    return HTTP_OK;
}

/* Chunked decoder states (RFC 9112 7.1), strict: CRLF everywhere, no
 * bare CR or LF, bounded extensions and trailers.  CS_EXT_* walk a chunk
 * extension by its grammar (7.1.1). */
enum {
    CS_SIZE = 0, CS_SIZE_BWS, CS_SIZE_LF, CS_DATA, CS_DATA_CR,
    CS_DATA_LF, CS_TRAILER, CS_TRAILER_NAME, CS_TRAILER_LINE, CS_TRAILER_LF, CS_END_LF,
    CS_EXT, CS_EXT_NAME, CS_EXT_NAME_END, CS_EXT_VAL, CS_EXT_TOKEN, CS_EXT_QUOTED,
    CS_EXT_QPAIR, CS_EXT_VAL_END,
};
#define HTTP_CHUNK_EXT_MAX   4096
#define HTTP_TRAILER_MAX     16384
/* A trailer field name is held back until whole (http_body_forward), so
 * it is bounded well within a buffer. */
#define HTTP_TRAILER_NAME_MAX 256

/* Set up the body decoder once the head is parsed. */
static void
http_body_init(struct http_req *r)
{
    r->bstate = CS_SIZE;
    r->bcount = 0;
    r->bleft = r->chunked ? 0 : (r->content_length > 0 ? (uint64_t)r->content_length : 0);
    r->body_done = !r->has_body;
    r->bfwd = r->bskip = r->tdrop = 0;
}

int
http_body_eof(struct http_req *r)
{
    if (r->body_done)
        return HTTP_OK;
    if (!r->until_close)
        return 400;
    r->body_done = 1;
    return HTTP_OK;
}

static int
http_chunk_fail(struct http_req *r, const char *why)
{
    r->reason = why;
    return 400;
}

/* A trailer field that frames or routes the message (RFC 9110 6.5.1:
 * never allowed there) is refused rather than passed on, where a
 * recipient that merges it would frame the message its own way. */
static int
http_trailer_framing(const struct http_req *r)
{
    static const struct { const char *name; uint32_t len; } no[] = {
        { "content-length", 14 }, { "transfer-encoding", 17 }, { "host", 4 },
    };

    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (r->tname == no[i].len && memcmp(r->tbuf, no[i].name, no[i].len) == 0)
            return 1;
    return 0;
}

#define HTTP_FBIT(id) ((uint64_t)1 << (id))

/* Is the trailer field named p[0..n) one a recipient may not merge into
 * the head (RFC 9110 6.5.1, 6.5.2; RFC 7230 4.1.2 listed them), or one
 * the head's Connection names (7.6.1)?  Then it is not forwarded.  The
 * framing and routing fields are refused instead (http_trailer_framing);
 * Authentication-Info is defined for trailers (11.6.3) and goes on. */
static int
http_trailer_dropped(const struct http_req *r, const char *p, size_t n)
{
    static const uint64_t ids =
        /* hop-by-hop, framing */
        HTTP_FBIT(HTTP_F_CONNECTION) | HTTP_FBIT(HTTP_F_KEEP_ALIVE)
        | HTTP_FBIT(HTTP_F_PROXY_CONNECTION) | HTTP_FBIT(HTTP_F_TE)
        | HTTP_FBIT(HTTP_F_UPGRADE) | HTTP_FBIT(HTTP_F_TRAILER)
        /* credentials */
        | HTTP_FBIT(HTTP_F_AUTHORIZATION) | HTTP_FBIT(HTTP_F_PROXY_AUTHENTICATE)
        /* request modifiers */
        | HTTP_FBIT(HTTP_F_EXPECT) | HTTP_FBIT(HTTP_F_RANGE) | HTTP_FBIT(HTTP_F_IF_RANGE)
        | HTTP_FBIT(HTTP_F_IF_NONE_MATCH) | HTTP_FBIT(HTTP_F_IF_MODIFIED_SINCE)
        /* response controls, request ones too */
        | HTTP_FBIT(HTTP_F_CACHE_CONTROL) | HTTP_FBIT(HTTP_F_CDN_CACHE_CONTROL)
        | HTTP_FBIT(HTTP_F_SURROGATE_CONTROL) | HTTP_FBIT(HTTP_F_AGE)
        | HTTP_FBIT(HTTP_F_EXPIRES) | HTTP_FBIT(HTTP_F_DATE) | HTTP_FBIT(HTTP_F_LOCATION)
        | HTTP_FBIT(HTTP_F_VARY)
        /* how to process the content */
        | HTTP_FBIT(HTTP_F_CONTENT_ENCODING) | HTTP_FBIT(HTTP_F_CONTENT_RANGE);
    static const struct { const char *name; size_t len; } other[] = {
        { "proxy-authorization", 19 }, { "www-authenticate", 16 }, { "cookie", 6 },
        { "set-cookie", 10 }, { "max-forwards", 12 }, { "pragma", 6 }, { "if-match", 8 },
        { "if-unmodified-since", 19 }, { "retry-after", 11 }, { "warning", 7 },
        { "content-type", 12 },
    };
    enum http_fid id = http_field_id(p, n);
    uint64_t h;

    if ((ids >> id) & 1)
        return 1;
    for (size_t i = 0; id == HTTP_F_OTHER && i < sizeof(other) / sizeof(other[0]); i++)
        if (n == other[i].len && strncasecmp(p, other[i].name, n) == 0)
            return 1;
    if (r->nconn_names > HTTP_CONN_NAMES)
        return 1;
    h = http_name_hash(p, n);
    for (int i = 0; i < r->nconn_names; i++)
        if (r->conn_names[i] == h)
            return 1;
    return 0;
}

/* At the start of a trailer field line p[0..n): 1 when it is not to be
 * forwarded, 0 when it is (or is malformed: the byte loop refuses it),
 * -1 when its name is not whole yet. */
static int
http_trailer_fate(const struct http_req *r, const char *p, size_t n)
{
    for (size_t k = 0; k < n && k <= HTTP_TRAILER_NAME_MAX; k++) {
        if (p[k] == ':')
            return http_trailer_dropped(r, p, k);
        if (!http_tchar[(unsigned char)p[k]])
            return 0;
    }
    return n > HTTP_TRAILER_NAME_MAX ? 0 : -1;
}

/* One byte of a chunk extension (RFC 9112 7.1.1):
 *   chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )
 * CS_EXT: after a ';' (a name is due), CS_EXT_NAME_END: after a name's
 * BWS, CS_EXT_VAL: after '=', CS_EXT_VAL_END: after a value's BWS.  The
 * extension is forwarded as it came, so anything else is refused: a
 * recipient that reads a quoted string by the grammar would take a CRLF
 * we ended the line at ('1;a="' CRLF) for part of the string and frame
 * the rest of the stream its own way.  NULL, or why it is refused. */
static const char *
http_chunk_ext_byte(struct http_req *r, unsigned char ch)
{
    int bws = ch == ' ' || ch == '\t', tok = http_tchar[ch];
    int s = r->bstate;

    if (++r->bcount > HTTP_CHUNK_EXT_MAX)
        return "chunk extension too long";
    if (s == CS_EXT_QUOTED) {
        /* qdtext: HTAB, SP, VCHAR but '"' and '\\', obs-text */
        if (ch == '"')
            r->bstate = CS_EXT_VAL_END;
        else if (ch == '\\')
            r->bstate = CS_EXT_QPAIR;
        else if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return "control character in a chunk extension";
        return NULL;
    }
    if (s == CS_EXT_QPAIR) {
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return "control character in a chunk extension";
        r->bstate = CS_EXT_QUOTED;
        return NULL;
    }
    if (tok && (s == CS_EXT || s == CS_EXT_NAME))
        r->bstate = CS_EXT_NAME;
    else if (tok && (s == CS_EXT_VAL || s == CS_EXT_TOKEN))
        r->bstate = CS_EXT_TOKEN;
    else if (ch == '"' && s == CS_EXT_VAL)
        r->bstate = CS_EXT_QUOTED;
    else if (bws)
        r->bstate = s == CS_EXT_NAME ? CS_EXT_NAME_END : s == CS_EXT_TOKEN ? CS_EXT_VAL_END : s;
    else if (ch == '=' && (s == CS_EXT_NAME || s == CS_EXT_NAME_END))
        r->bstate = CS_EXT_VAL;
    else if ((ch == ';' || ch == '\r') && s != CS_EXT && s != CS_EXT_VAL)
        r->bstate = ch == ';' ? CS_EXT : CS_SIZE_LF;
    else
        return "malformed chunk extension";
    return NULL;
}

/* One byte of a chunked body outside the chunk data and the final LF:
 * the chunk-size line, the CRLF after the data, the trailer section.
 * NULL, or why the framing is refused. */
static const char *
http_chunk_byte(struct http_req *r, unsigned char ch)
{
    if (r->bstate >= CS_EXT)
        return http_chunk_ext_byte(r, ch);
    switch (r->bstate) {
    case CS_SIZE: {
        int v = ch >= '0' && ch <= '9' ? ch - '0'
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (v >= 0) {
            if (r->bcount >= 15)
                return "chunk size too large";
            r->bleft = r->bleft * 16 + (uint64_t)v;
            r->bcount++;
        } else if (r->bcount == 0) {
            return "bad chunk size";
        } else if (ch == '\r') {
            r->bstate = CS_SIZE_LF;
        } else if (ch == ';') {
            r->bstate = CS_EXT;
            r->bcount = 0;
        } else if (ch == ' ' || ch == '\t') {
            r->bstate = CS_SIZE_BWS;
        } else {
            return "bad chunk size";
        }
        break;
    }
    case CS_SIZE_BWS:
        /* BWS may only lead to an extension */
        if (ch == ';') {
            r->bstate = CS_EXT;
            r->bcount = 0;
        } else if (ch != ' ' && ch != '\t') {
            return "bad chunk size line";
        }
        break;
    case CS_SIZE_LF:
        if (ch != '\n')
            return "bare CR in a chunk size line";
        r->bcount = 0;
        r->bstate = r->bleft == 0 ? CS_TRAILER : CS_DATA;
        break;
    case CS_DATA_CR:
        if (ch != '\r')
            return "chunk data not followed by CRLF";
        r->bstate = CS_DATA_LF;
        break;
    case CS_DATA_LF:
        if (ch != '\n')
            return "chunk data not followed by CRLF";
        r->bstate = CS_SIZE;
        r->bcount = 0;
        r->bleft = 0;
        break;
    case CS_TRAILER:        /* at the start of a trailer line */
        if (ch == '\r') {
            r->bstate = CS_END_LF;
        } else if (!http_tchar[(unsigned char)ch]) {
            return "malformed trailer";
        } else {
            r->bstate = CS_TRAILER_NAME;
            r->tname = 1;
            r->tbuf[0] = (char)(ch | 0x20);
            if (++r->bcount > HTTP_TRAILER_MAX)
                return "trailer section too large";
        }
        break;
    case CS_TRAILER_NAME:
        /* field-name ":" as in the head (RFC 9112 7.1.2, 5): a line
         * that is not a field line is where parsers disagree on the
         * end of the message, so it ends the connection instead */
        if (ch == ':') {
            r->bstate = CS_TRAILER_LINE;
            if (http_trailer_framing(r))
                return "framing field in a trailer";
        } else if (!http_tchar[(unsigned char)ch]) {
            return "malformed trailer field";
        } else {
            if (r->tname < sizeof(r->tbuf))
                r->tbuf[r->tname] = (char)(ch | 0x20);
            if (++r->tname > HTTP_TRAILER_NAME_MAX)
                return "trailer field name too long";
        }
        if (++r->bcount > HTTP_TRAILER_MAX)
            return "trailer section too large";
        break;
    case CS_TRAILER_LINE:
        if (ch == '\r')
            r->bstate = CS_TRAILER_LF;
        else if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return "control character in a trailer";
        else if (++r->bcount > HTTP_TRAILER_MAX)
            return "trailer section too large";
        break;
    case CS_TRAILER_LF:
        if (ch != '\n')
            return "bare CR in a trailer";
        r->bstate = CS_TRAILER;
        break;
    case CS_DATA:
    case CS_END_LF:
        break;      /* the caller's */
    }
    return NULL;
}

int
http_req_body(struct http_req *r, const char *buf, size_t len, size_t *used,
              http_body_sink sink, void *arg)
{
    size_t i = 0;

    *used = 0;
    if (r->body_done)
        return HTTP_OK;
    if (len == 0)
        return HTTP_AGAIN;
    if (r->until_close) {
        if (sink)
            sink(arg, buf, len);
        *used = len;
        return HTTP_AGAIN;
    }
    if (!r->chunked) {
        size_t n = len < r->bleft ? len : (size_t)r->bleft;
        if (sink && n)
            sink(arg, buf, n);
        r->bleft -= n;
        *used = n;
        if (r->bleft == 0)
            r->body_done = 1;
        return r->body_done ? HTTP_OK : HTTP_AGAIN;
    }

    while (i < len) {
        unsigned char ch = (unsigned char)buf[i];
        const char *why;

        if (r->bstate == CS_DATA) {
            size_t n = len - i < r->bleft ? len - i : (size_t)r->bleft;
            if (sink)
                sink(arg, buf + i, n);
            i += n;
            r->bleft -= n;
            if (r->bleft == 0)
                r->bstate = CS_DATA_CR;
            continue;
        }
        if (r->bstate == CS_END_LF) {
            if (ch != '\n')
                return http_chunk_fail(r, "bare CR after the last chunk");
            r->body_done = 1;
            *used = i + 1;
            return HTTP_OK;
        }
        if (r->bstate == CS_TRAILER && ch != '\r' && r->bfwd) {
            /* a field line: forwarded or not, it is one piece */
            int drop = http_trailer_fate(r, buf + i, len - i);
            if (drop < 0 || (drop && i > 0)) {
                *used = i;
                return HTTP_AGAIN;
            }
            r->tdrop = r->bskip = (uint8_t)drop;
        }
        if ((why = http_chunk_byte(r, ch)) != NULL)
            return http_chunk_fail(r, why);
        i++;
        if (r->tdrop && r->bstate == CS_TRAILER) {
            r->tdrop = 0;
            if (r->bfwd) {      /* the dropped line ends its call */
                *used = i;
                return HTTP_AGAIN;
            }
        }
    }
    *used = i;
    return HTTP_AGAIN;
}

int
http_body_forward(struct http_req *r, const char *buf, size_t len, size_t *used,
                  int *drop, http_body_sink sink, void *arg)
{
    int rc;

    r->bfwd = 1;
    r->bskip = r->tdrop;
    rc = http_req_body(r, buf, len, used, sink, arg);
    r->bfwd = 0;
    *drop = r->bskip;
    return rc;
}

const char *
http_status_text(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 511: return "Network Authentication Required";
    default:  return "Unknown";
    }
}
