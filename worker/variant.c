/*
 * worker/variant.c: the pure rules of the HTTP side of the cache (see
 * variant.h): the cache key, Vary's secondary key, Accept-Encoding
 * normalisation, Range, ETag matching, reading a stored header block.
 *
 * Moved out of worker/store.c so that they can be tested one table row at
 * a time (t/unit/check_variant.c): nothing here knows a connection, the
 * store or the configuration; a mode the configuration sets (normalize_ae)
 * is a parameter.  store.c's essay describes what the keys are for.
 */
#include "config.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "worker/buf.h"
#include "worker/variant.h"

/* ------------------------------------------------------------------ */
/* Keys */

size_t
store_key(char *out, size_t outlen, const char *scheme, const char *host,
          int port, const char *path)
{
    size_t sl = strlen(scheme), hl = strlen(host), pl = strlen(path);
    int def = sl == 5 && memcmp(scheme, "https", 5) == 0 ? 443 : 80;
    char *p = out;

    if (sl + 3 + hl + 6 + pl + 1 > outlen)
        return 0;
    memcpy(p, scheme, sl);
    p += sl;
    memcpy(p, "://", 3);
    p += 3;
    for (size_t i = 0; i < hl; i++) {   /* the authority is lowercased (ASCII) */
        unsigned char c = (unsigned char)host[i];
        *p++ = (char)(c | ((unsigned)(c - 'A') < 26u) << 5);
    }
    if (port != def) {
        *p++ = ':';
        p = fmt_u64(p, (uint64_t)port);
    }
    memcpy(p, path, pl);
    p += pl;
    *p = '\0';
    return (size_t)(p - out);
}

/* ------------------------------------------------------------------ */
/* Stored header blocks and validators */

/* The value of field `name` in a stored header block (lines "Name: v\r\n",
 * the status line first), or NULL. */
const char *
store_hdr_get(const char *blk, size_t len, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    const char *p = memchr(blk, '\n', len), *end = blk + len;

    while (p && ++p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = e ? (size_t)(e - p) : (size_t)(end - p);
        if (ll > 0 && p[ll - 1] == '\r')
            ll--;
        if (ll > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1, *ve = p + ll;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            *vlen = (size_t)(ve - v);
            return v;
        }
        p = e;
    }
    return NULL;
}

/* Weak comparison (RFC 9110 8.8.3.2): W/ ignored, opaque tags equal. */
int
store_etag_weak_eq(const char *a, size_t al, const char *b, size_t bl)
{
    if (al >= 2 && a[0] == 'W' && a[1] == '/') {
        a += 2;
        al -= 2;
    }
    if (bl >= 2 && b[0] == 'W' && b[1] == '/') {
        b += 2;
        bl -= 2;
    }
    return al == bl && al >= 2 && memcmp(a, b, al) == 0;
}

/* If-None-Match list against the stored ETag. */
int
store_inm_matches(const char *inm, const char *etag, size_t etl)
{
    const char *p = inm;

    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        if (*p == '*')
            return 1;
        const char *s = p;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (*p != '"')
            return 0;       /* malformed: no match (send the full answer) */
        p++;
        while (*p && *p != '"')
            p++;
        if (*p != '"')
            return 0;
        p++;
        if (etag && store_etag_weak_eq(s, (size_t)(p - s), etag, etl))
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Vary */

/* Is the parameter list p[0..end) (";a=b;q=0", up to the element's end)
 * a weight of 0?  Parameter names are case-insensitive ("Q=0" too); a
 * qvalue is 0 when it is "0", "0." or "0." and zeros (RFC 9110 12.4.2). */
static int
ae_q0(const char *p, const char *end)
{
    int q0 = 0;

    while (p < end) {
        if (*p++ != ';')
            continue;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || (*p != 'q' && *p != 'Q') || p[1] != '=')
            continue;
        const char *v = p + 2, *ve = v;
        while (ve < end && *ve != ';' && *ve != ' ' && *ve != '\t')
            ve++;
        q0 = ve > v && *v == '0';
        for (v++; q0 && v < ve; v++)
            if (*v != '0' && !(*v == '.' && v == p + 3))
                q0 = 0;
        p = ve;
    }
    return q0;
}

/* The codings normalize_ae knows, as bits. */
#define AE_GZIP 1
#define AE_BR   2
#define AE_STAR 4

static unsigned
ae_coding(const char *s, size_t n)
{
    if ((n == 4 && strncasecmp(s, "gzip", 4) == 0) ||
        (n == 6 && strncasecmp(s, "x-gzip", 6) == 0))     /* RFC 9110 8.4.1.3 */
        return AE_GZIP;
    if (n == 2 && strncasecmp(s, "br", 2) == 0)
        return AE_BR;
    if (n == 1 && *s == '*')
        return AE_STAR;
    return 0;
}

/* Fold the Accept-Encoding list v[0..n) into *yes (codings listed with
 * q > 0) and *no (listed with q=0).  Elements never span a line, so
 * folding each line in turn is folding the lines joined by ", ". */
static void
ae_fold(const char *v, size_t n, unsigned *yes, unsigned *no)
{
    const char *p = v, *end = v + n;

    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *s = p;
        while (p < end && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        unsigned c = ae_coding(s, (size_t)(p - s));
        const char *pe = p;
        while (pe < end && *pe != ',')
            pe++;
        if (ae_q0(p, pe))
            *no |= c;
        else
            *yes |= c;
        p = pe;
    }
}

/* The answer of normalize_ae mode for what ae_fold found: a coding listed
 * with q > 0 anywhere is accepted; one listed only with q=0 is refused,
 * even when `*` is there (RFC 9110 12.5.3: `*` matches only the codings
 * not listed); one not listed is accepted when `*` is, with q > 0. */
static const char *
ae_pick(unsigned yes, unsigned no, int mode)
{
    no &= ~yes;
    if (yes & AE_STAR)
        yes |= (AE_GZIP | AE_BR) & ~no;
    if (mode >= 2 && (yes & AE_BR))
        return "br";
    return (yes & AE_GZIP) ? "gzip" : "";
}

/* Accept-Encoding as ATS's normalize_ae: 1 "gzip" or "", 2 "br", "gzip"
 * or "" (see ae_pick). */
const char *
store_norm_ae(const char *v, size_t n, int mode)
{
    unsigned yes = 0, no = 0;

    ae_fold(v, n, &yes, &no);
    return ae_pick(yes, no, mode);
}

/* Every Accept-Encoding line of r as one list, normalised. */
const char *
store_norm_ae_req(const struct http_req *r, int mode)
{
    unsigned yes = 0, no = 0;

    for (int i = r ? http_field_find_id(r, HTTP_F_ACCEPT_ENCODING, 0) : -1; i >= 0;
         i = http_field_find_id(r, HTTP_F_ACCEPT_ENCODING, i + 1))
        ae_fold(r->base + r->fields[i].value, r->fields[i].value_len, &yes, &no);
    return ae_pick(yes, no, mode);
}

/* Copy v[0..vl) into out without the blanks next to a comma outside a
 * quoted string: RFC 9111 4.1 lets selecting fields match across "adding
 * or removing whitespace, where allowed in the header field's syntax",
 * and a list allows it around its commas (RFC 9110 5.6.1), so "a,b",
 * "a, b" and "a ,b" select one response.  Returns the bytes written (at
 * most vl). */
static size_t
vary_squeeze(const char *v, size_t vl, char *out)
{
    size_t n = 0;
    int quoted = 0;

    for (size_t i = 0; i < vl; i++) {
        char c = v[i];
        if (quoted) {
            if (c == '\\' && i + 1 < vl)
                out[n++] = v[i++];
            else if (c == '"')
                quoted = 0;
        } else if (c == '"') {
            quoted = 1;
        } else if (c == ' ' || c == '\t') {
            size_t j = i;
            while (j < vl && (v[j] == ' ' || v[j] == '\t'))
                j++;
            if (n == 0 || out[n - 1] == ',' || j == vl || v[j] == ',') {
                i = j - 1;
                continue;       /* blanks next to a comma (or at an end) */
            }
        }
        out[n++] = v[i];
    }
    return n;
}

/* The value of a varying field in request r as it was forwarded: every
 * line of it, joined by "," with the blanks around commas dropped
 * (vary_squeeze), Accept-Language lowercased (Accept-Encoding as normalised by ae_mode,
 * since that is what we forward).  Writes into out; returns the length, or -1
 * when it does not fit. */
int
store_vary_value(const struct http_req *r, const char *name, size_t nl,
                 char *out, size_t outlen, int ae_mode)
{
    size_t len = 0;
    char nm[64];
    int lang = nl == 15 && strncasecmp(name, "accept-language", 15) == 0;
    int is_ae = nl == 15 && strncasecmp(name, "accept-encoding", 15) == 0, found = 0;

    if (nl >= sizeof(nm))
        return -1;
    memcpy(nm, name, nl);
    nm[nl] = '\0';
    for (int i = r ? http_field_find(r, nm, 0) : -1; i >= 0; i = http_field_find(r, nm, i + 1)) {
        const char *v = r->base + r->fields[i].value;
        size_t vl = r->fields[i].value_len;
        if (is_ae && ae_mode) {
            /* every line as one list (RFC 9110 5.3), normalised once */
            const char *ae = store_norm_ae_req(r, ae_mode);
            size_t al = strlen(ae);
            if (al >= outlen)
                return -1;
            memcpy(out, ae, al);
            return (int)al;
        }
        /* As forwarded but for whitespace: the origin chose its answer
         * by these elements, so only the same ones select it (`en,` is
         * not `en`).  Several lines are joined by ",", which RFC 9110 5.3
         * makes the same. */
        if (len + vl + 1 >= outlen)
            return -1;
        if (len)
            out[len++] = ',';
        size_t sq = vary_squeeze(v, vl, out + len);
        /* language ranges are case-insensitive (RFC 4647 2.1), which
         * RFC 9111 4.1 lets a cache normalise: `EN` selects `en` */
        if (lang)
            for (size_t k = len; k < len + sq; k++)
                out[k] = (char)tolower((unsigned char)out[k]);
        len += sq;
        found = 1;
    }
    /* absent is not empty (RFC 9111 4.1), unless normalised alike */
    return found || (is_ae && ae_mode) ? (int)len : -2;
}

/* Secondary key: URL key, \x01, set id, then \x01name=value per Vary name
 * (\x01name when the field is absent; see variant.h for whose value). */
size_t
store_variant_key(const char *key, size_t keylen, const char *vary, size_t vlen,
                  const char *id, size_t idlen, const struct http_req *r,
                  const struct http_req *host_r, char *out, size_t outlen, int ae_mode)
{
    size_t len;
    const char *p = vary, *end = vary + vlen;

    if (keylen + idlen + 2 >= outlen)
        return 0;
    memcpy(out, key, keylen);
    len = keylen;
    out[len++] = '\x01';
    memcpy(out + len, id, idlen);
    len += idlen;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *s = p;
        while (p < end && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        size_t nl = (size_t)(p - s);
        if (nl == 0)
            continue;
        if (len + nl + 3 >= outlen)
            return 0;
        out[len++] = '\x01';
        for (size_t k = 0; k < nl; k++)
            out[len++] = (char)tolower((unsigned char)s[k]);
        /* "name=value", or "name" alone when the field is absent (a
         * name holds no '=', a value no \x01: no two keys alike) */
        int host = nl == 4 && strncasecmp(s, "host", 4) == 0;
        int vl = store_vary_value(host ? host_r : r, s, nl, out + len + 1, outlen - len - 1,
                                  ae_mode);
        if (vl == -1)
            return 0;
        if (vl >= 0) {
            out[len++] = '=';
            len += (size_t)vl;
        }
    }
    return len;
}

/* ------------------------------------------------------------------ */
/* Range */

/* The digits at p (1*DIGIT, RFC 9110 14.1.1: no sign, no blank) into *n,
 * saturated at UINT64_MAX (a position past any length); returns the end,
 * or NULL when p does not start with a digit. */
static const char *
range_pos(const char *p, uint64_t *n)
{
    uint64_t v = 0;

    if (*p < '0' || *p > '9')
        return NULL;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
    }
    *n = v;
    return p;
}

/* v (vl bytes, trailing blanks ignored) copied NUL-ended into t when it
 * starts with the six bytes of unit ("bytes " or "bytes="): where the
 * first number starts in t, or NULL. */
#define RANGE_TEXT_MAX 72
static const char *
range_text(const char *v, size_t vl, const char *unit, char t[RANGE_TEXT_MAX])
{
    const char *e;

    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    if (vl >= RANGE_TEXT_MAX || vl < 6 || strncasecmp(v, unit, 6) != 0)
        return NULL;
    memcpy(t, v, vl);
    t[vl] = '\0';
    e = t + 6;
    while (*e == ' ')
        e++;
    return e;
}

int
store_content_range(const char *v, size_t vl, uint64_t *a, uint64_t *b, uint64_t *n)
{
    char t[RANGE_TEXT_MAX];
    const char *e = range_text(v, vl, "bytes ", t);

    if (e == NULL || (e = range_pos(e, a)) == NULL || *e != '-')
        return 0;
    if ((e = range_pos(e + 1, b)) == NULL || *e != '/')
        return 0;
    if ((e = range_pos(e + 1, n)) == NULL || *e != '\0')
        return 0;
    return *a <= *b && *b < *n && *n != UINT64_MAX;
}

int
store_range_first(const char *v, size_t vl, uint64_t *a, uint64_t *b)
{
    char t[RANGE_TEXT_MAX];
    const char *e = range_text(v, vl, "bytes=", t);

    if (e == NULL || (e = range_pos(e, a)) == NULL || *e != '-' || *a >= UINT64_MAX / 2)
        return 0;
    if (e[1] == '\0') {
        *b = UINT64_MAX;
        return 2;
    }
    if ((e = range_pos(e + 1, b)) == NULL || *e != '\0')
        return 0;
    return *a <= *b && *b < UINT64_MAX / 2;
}

/* Parse "bytes=a-b" (one range) against a body of len bytes.  Returns 1
 * with [*from, *to] inclusive, 0 when the field is not a single byte range
 * we serve (answer with the whole object), -1 when unsatisfiable. */
int
store_range(const char *v, uint64_t len, uint64_t *from, uint64_t *to)
{
    uint64_t a, b;
    const char *e;

    if (strncasecmp(v, "bytes=", 6) != 0)
        return 0;
    v += 6;
    while (*v == ' ')
        v++;
    if (strchr(v, ','))
        return 0;       /* several ranges: the whole object is allowed */
    if (*v == '-') {
        e = range_pos(v + 1, &b);
        if (e == NULL || *e != '\0')
            return 0;
        if (b == 0 || len == 0)
            return -1;
        *from = b >= len ? 0 : len - b;
        *to = len - 1;
        return 1;
    }
    e = range_pos(v, &a);
    if (e == NULL || *e != '-')
        return 0;
    v = e + 1;
    if (*v == '\0') {
        b = len ? len - 1 : 0;
    } else {
        e = range_pos(v, &b);
        if (e == NULL || *e != '\0' || b < a)
            return 0;
        if (b >= len)
            b = len - 1;
    }
    if (a >= len)
        return -1;
    *from = a;
    *to = b;
    return 1;
}
