/*
 * worker/store.c: the HTTP side of the cache: keys, hits, fills, Vary,
 * validation, ranges.
 *
 * Keys.  The cache key is the request URL after remap, normalised: scheme
 * and host lowercase, the scheme's default port dropped, path and query as
 * sent (RFC 9111 4.1 leaves more to the cache; more would merge URLs an
 * origin may treat differently).
 *
 * What a stored object holds (the store itself is cache/):
 *   header block  the status line and the end-to-end fields of the
 *                 response as we forwarded it, minus Age, Content-Length
 *                 and Transfer-Encoding (a hit re-frames with the length
 *                 it knows), without the blank line;
 *   body          the decoded payload;
 *   meta          status, flags, `stored` = the moment the response's age
 *                 was 0 (so its age at any later time is now - stored,
 *                 RFC 9111 4.2.3), `expires` = stored + freshness lifetime.
 *
 * Vary (RFC 9111 4.1).  A response with Vary is stored under a secondary
 * key: the URL key, a variant-set id, and the normalised values of the
 * request fields it names.  Under the URL key itself sits a marker object
 * (flag STORE_F_VARY_MARKER, no body) whose header block carries the Vary
 * field names and the id.  A lookup that finds a marker computes the
 * secondary key from the request and looks again.  PURGE removes the
 * marker, which orphans every variant at once; a new marker gets a new id,
 * so an old variant can never resurface.  `Vary: *` is never stored.
 * Accept-Encoding is normalised as ATS's proxy.config.http.normalize_ae
 * says, both in the key and in the request sent to the origin.
 *
 * The pure rules (the key, the secondary key, Accept-Encoding, Range,
 * ETag matching, reading a stored block) are in worker/variant.c.
 *
 * The hit path: one LMDB lookup (two with Vary), the header block copied
 * into the connection's output buffer (a few hundred bytes) followed by
 * Content-Length, Age and Cache-Status, and the body handed to writev
 * straight from the pinned mapping.  No allocation: the cache_obj lives in
 * the request context, which is pooled.
 */
#include "config.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <time.h>

#include "cache/cache.h"
#include "shm/log.h"
#include "worker/cachectl.h"
#include "worker/variant.h"
#include "worker/worker.h"

/* A stored header block larger than this is not worth caching. */
#define STORE_HDR_MAX 32768
/* A Vary marker outlives its variants: they expire on their own. */
#define STORE_MARKER_TTL (365 * 86400)

/* Formatting on the hit path without printf (a profile showed snprintf
 * costing a fifth of a hit): the caller has made room. */
static char *
store_put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

void
store_release(struct req *rq)
{
    struct req *q = rq;

    if (q && q->rq_rww)
        rww_release(q);
    if (q && q->obj_held) {
        cache_obj_release(wk->cache, &q->obj);
        q->obj_held = 0;
        rq->rq_body = NULL;
        rq->rq_body_len = 0;
        rq->rq_hit_pos = rq->rq_hit_end = 0;
    }
}

int
store_body_more(struct req *rq)
{
    const void *p;
    size_t n;

    if (rq->rq_rww)
        return rww_more(rq);
    if (!rq->obj_held || rq->rq_hit_pos >= rq->rq_hit_end)
        return 0;
    n = cache_obj_span(wk->cache, &rq->obj, rq->rq_hit_pos, &p);
    if (n == 0)
        return 0;
    if (n > rq->rq_hit_end - rq->rq_hit_pos)
        n = (size_t)(rq->rq_hit_end - rq->rq_hit_pos);
    rq->rq_body = p;
    rq->rq_body_len = n;
    rq->rq_hit_pos += n;
    return 1;
}

/* ------------------------------------------------------------------ */
/* Request conditions, copied out of the request head (which may be gone
 * by the time an answer is built after a revalidation). */

static void
store_copy_field(const struct http_req *r, enum http_fid id, char *out, size_t outlen)
{
    int i = http_field_find_id(r, id, 0);

    out[0] = '\0';
    if (i >= 0 && r->fields[i].value_len < outlen) {
        memcpy(out, r->base + r->fields[i].value, r->fields[i].value_len);
        out[r->fields[i].value_len] = '\0';
    }
}

void
store_cond_from(struct store_cond *sc, const struct http_req *r)
{
    sc->method = r->method;
    sc->minor = r->minor;
    store_copy_field(r, HTTP_F_IF_NONE_MATCH, sc->inm, sizeof(sc->inm));
    store_copy_field(r, HTTP_F_IF_MODIFIED_SINCE, sc->ims, sizeof(sc->ims));
    store_copy_field(r, HTTP_F_RANGE, sc->range, sizeof(sc->range));
    store_copy_field(r, HTTP_F_IF_RANGE, sc->if_range, sizeof(sc->if_range));
}

/* ------------------------------------------------------------------ */
/* Vary */

/* Resolve a Vary marker just looked up into o: the variant for r, whose
 * key goes to vkey (STORE_KEY_MAX bytes) and *vkeylen.  Returns CACHE_OK
 * with *o the variant, or CACHE_MISS (o released). */
static int
store_follow_marker(const char *key, size_t keylen, const struct http_req *r,
                    struct cache_obj *o, char *vkey, size_t *vkeylen)
{
    size_t vl, il, n;
    const char *blk = o->iov[0].iov_base;
    const char *vary = store_hdr_get(blk, o->hdr_len, "vary", &vl);
    const char *id = store_hdr_get(blk, o->hdr_len, "x-cistern-variants", &il);

    n = (vary && id) ? store_variant_key(key, keylen, vary, vl, id, il, r, r, vkey,
                                         STORE_KEY_MAX, wk->conf->rec.normalize_ae) : 0;
    cache_obj_release(wk->cache, o);
    *vkeylen = n;
    if (n == 0)
        return CACHE_MISS;
    return cache_lookup(wk->cache, vkey, n, o);
}

/* See worker.h. */
size_t
store_variants_prefix(const char *key, size_t keylen, char *out, size_t outlen)
{
    struct cache_obj o;
    size_t il = 0, n = 0;
    const char *id;

    memset(&o, 0, sizeof(o));
    if (wk->cache == NULL || cache_lookup(wk->cache, key, keylen, &o) != CACHE_OK)
        return 0;
    if ((o.meta.flags & STORE_F_VARY_MARKER)
        && (id = store_hdr_get(o.iov[0].iov_base, o.hdr_len, "x-cistern-variants", &il)) != NULL
        && keylen + il + 2 <= outlen) {
        memcpy(out, key, keylen);
        out[keylen] = '\x01';
        memcpy(out + keylen + 1, id, il);
        out[keylen + 1 + il] = '\x01';
        n = keylen + il + 2;
    }
    cache_obj_release(wk->cache, &o);
    return n;
}

/* `cistern ctl cache lookup` (worker/ctl.c): what is stored under key,
 * as "name\tvalue" lines into out.  r is the request the URL makes
 * without other fields (the variant it selects, under Vary).  Returns 1
 * stored, 0 not. */
int
store_ctl_lookup(const char *key, size_t keylen, const struct http_req *r, struct buf *out)
{
    static char vkey[STORE_KEY_MAX];
    struct cache_obj o;
    size_t vkl = 0, vl = 0;
    const char *vary = NULL;
    time_t now = time(NULL);
    int stored;

    memset(&o, 0, sizeof(o));
    stored = wk->cache && cache_lookup(wk->cache, key, keylen, &o) == CACHE_OK;
    if (stored && (o.meta.flags & STORE_F_VARY_MARKER)) {
        const char *v = store_hdr_get(o.iov[0].iov_base, o.hdr_len, "vary", &vl);
        static char vbuf[256];
        if (v) {
            vl = vl < sizeof(vbuf) - 1 ? vl : sizeof(vbuf) - 1;
            memcpy(vbuf, v, vl);
            vbuf[vl] = '\0';
            vary = vbuf;
        }
        stored = store_follow_marker(key, keylen, r, &o, vkey, &vkl) == CACHE_OK;
    }
    buf_printf(out, "stored\t%s\nkey\t%.*s\n", stored ? "true" : "false", (int)keylen, key);
    if (vary)
        buf_printf(out, "vary\t%s\nvariant_key_len\t%zu\n", vary, vkl);
    if (stored) {
        int64_t age = (int64_t)now - o.meta.stored;
        buf_printf(out, "status\t%u\nsize\t%llu\nheader_bytes\t%u\nage\t%lld\n"
                   "ttl\t%lld\nfresh\t%s\nsegment\t%u\n",
                   o.meta.status, (unsigned long long)o.body_len, o.hdr_len,
                   (long long)(age > 0 ? age : 0),
                   (long long)(o.meta.expires ? o.meta.expires - (int64_t)now : 0),
                   o.meta.expires > (int64_t)now ? "true" : "false", o.co_seg);
        cache_obj_release(wk->cache, &o);
    }
    return stored;
}

/* ------------------------------------------------------------------ */
/* Answering from a held object */

/* Is the header line p[0..ll) a purge tag field (Surrogate-Key,
 * Cache-Tag)? */
static int
store_tag_line(const char *p, size_t ll)
{
    return (ll > 14 && strncasecmp(p, "surrogate-key:", 14) == 0)
           || (ll > 10 && strncasecmp(p, "cache-tag:", 10) == 0);
}

/* Copy len bytes of header lines, without the purge tag fields when strip
 * (an object stored with them, proxy.config.cistern.purge.forward_tags 0):
 * only tagged objects pay the scan. */
static void
store_copy_lines(struct buf *b, const char *p, size_t len, int strip)
{
    const char *end = p + len;

    if (!strip) {
        memcpy(b->data + b->end, p, len);
        b->end += len;
        return;
    }
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        if (!store_tag_line(p, ll)) {
            memcpy(b->data + b->end, p, ll);
            b->end += ll;
        }
        p += ll;
    }
}

/* The header block for the answer: whole, or (status304) the status line
 * of a 304 and the fields it keeps. */
static int
store_copy_head(struct buf *b, const char *blk, size_t len, int status304, int strip)
{
    if (!status304) {
        store_copy_lines(b, blk, len, strip);
        return 0;
    }
    /* A 304 carries the status line of its own and the fields a 200 would
     * have had that matter for caches (RFC 9110 15.4.5). */
    static const char *const keep[] = {
        "cache-control", "content-location", "date", "etag", "expires",
        "vary", "last-modified", "via", NULL,
    };
    int n = snprintf(b->data + b->end, b->size - b->end, "HTTP/1.1 304 Not Modified\r\n");
    b->end += (size_t)n;
    const char *p = memchr(blk, '\n', len), *end = blk + len;
    while (p && ++p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        for (int k = 0; keep[k]; k++) {
            size_t kl = strlen(keep[k]);
            if (ll > kl && p[kl] == ':' && strncasecmp(p, keep[k], kl) == 0) {
                memcpy(b->data + b->end, p, ll);
                b->end += ll;
                break;
            }
        }
        p = e;
    }
    return 0;
}

/* The status of an answer from the cache for a stored 200 (or other
 * status o holds): 304 for a matching conditional (RFC 9110 13.2.2:
 * If-None-Match wins over If-Modified-Since; GET and HEAD only), else the
 * stored one; with *part 1 and [*from, *to] for one satisfiable range of
 * a 200 (RFC 9110 14.2, If-Range honoured), -1 for an unsatisfiable
 * one. */
static int
store_answer_status(const char *hdr, size_t hdrlen, const struct cache_obj *o,
                    const struct store_cond *sc, time_t now, int *part, uint64_t *from,
                    uint64_t *to)
{
    int status = o->meta.status;
    size_t etl = 0, lml = 0;
    const char *etag, *lm;

    /* The ETag only when a condition asks (a plain hit looks up nothing) */
    etag = sc->inm[0] || (sc->range[0] && sc->if_range[0] == '"')
           ? store_hdr_get(hdr, hdrlen, "etag", &etl) : NULL;
    /* Conditional requests (RFC 9110 13.2.2): If-None-Match wins over
     * If-Modified-Since; only for GET/HEAD and a 200 we could send. */
    if ((sc->method == HTTP_GET || sc->method == HTTP_HEAD) && status == 200) {
        if (sc->inm[0]) {
            if (store_inm_matches(sc->inm, etag, etl))
                status = 304;
        } else if (sc->ims[0]) {
            time_t ims = cachectl_date(sc->ims, strlen(sc->ims)), t = -1;
            lm = store_hdr_get(hdr, hdrlen, "last-modified", &lml);
            if (lm)
                t = cachectl_date(lm, lml);
            if (t < 0) {
                const char *d = store_hdr_get(hdr, hdrlen, "date", &lml);
                if (d)
                    t = cachectl_date(d, lml);
            }
            if (ims >= 0 && t >= 0 && t <= ims && ims <= now)
                status = 304;
        }
    }
    /* Range (RFC 9110 14.2): one range of a stored 200, If-Range honoured. */
    if (status == 200 && sc->method == HTTP_GET && sc->range[0]) {
        int ok = 1;
        if (sc->if_range[0]) {
            if (sc->if_range[0] == '"') {
                /* strong comparison */
                ok = etag && etl == strlen(sc->if_range)
                     && memcmp(etag, sc->if_range, etl) == 0;
            } else {
                lm = store_hdr_get(hdr, hdrlen, "last-modified", &lml);
                ok = lm && lml == strlen(sc->if_range)
                     && memcmp(lm, sc->if_range, lml) == 0;
            }
        }
        if (ok)
            *part = store_range(sc->range, o->body_len, from, to);
    }

    return status;
}

/* A stored part (a 206, RFC 9111 3.3): its Content-Range [*a, b] of *n
 * bytes; 1 with [*from, *to] when the single range asked for lies within
 * it, else 0 (then the request goes to the origin). */
static int
store_part_span(const char *hdr, size_t hdrlen, const char *range, uint64_t *from,
                uint64_t *to, uint64_t *a, uint64_t *n)
{
    size_t crl = 0;
    const char *cr = store_hdr_get(hdr, hdrlen, "content-range", &crl);
    uint64_t b;

    if (cr == NULL || !store_content_range(cr, crl, a, &b, n) || range[0] == '\0')
        return 0;
    return store_range(range, *n, from, to) == 1 && *from >= *a && *to <= b;
}

size_t
store_part_key(const char *key, size_t keylen, char *pkey)
{
    if (keylen + STORE_PART_SUFFIX_LEN >= STORE_KEY_MAX)
        return 0;
    memcpy(pkey, key, keylen);
    memcpy(pkey + keylen, STORE_PART_SUFFIX, STORE_PART_SUFFIX_LEN);
    return keylen + STORE_PART_SUFFIX_LEN;
}

int
store_remove(const char *key, size_t keylen)
{
    char pkey[STORE_KEY_MAX];
    size_t pl = store_part_key(key, keylen, pkey);
    int rc = cache_remove(wk->cache, key, keylen), rc2;

    if (pl == 0)
        return rc;
    rc2 = cache_remove(wk->cache, pkey, pl);
    return rc == CACHE_OK || rc2 == CACHE_MISS ? rc : rc2;
}

int
store_part_covers(const struct req *rq)
{
    struct store_cond sc;
    uint64_t from, to, a, n;

    store_cond_from(&sc, &rq->r);
    return rq->obj_held && rq->obj.meta.status == 206 && !sc.if_range[0]
           && store_part_span(rq->obj.iov[0].iov_base, rq->obj.hdr_len, sc.range, &from, &to,
                              &a, &n);
}

/* The strong ETag of header block h, or NULL (none, or weak). */
static const char *
store_strong_etag(const char *h, size_t hl, size_t *len)
{
    const char *e = store_hdr_get(h, hl, "etag", len);

    return e && *len >= 2 && e[0] == '"' ? e : NULL;
}

int
store_part_ident(const struct cache_obj *o, uint64_t *a, uint64_t *b, uint64_t *n,
                 const char **etag, size_t *elen)
{
    const char *cr;
    size_t crl = 0;

    if (o->meta.status == 200 && o->body_len > 0) {
        *a = 0;
        *b = o->body_len - 1;
        *n = o->body_len;
    } else if (o->meta.status != 206
        || (cr = store_hdr_get(o->iov[0].iov_base, o->hdr_len, "content-range", &crl)) == NULL
        || !store_content_range(cr, crl, a, b, n) || o->body_len != *b - *a + 1) {
        return 0;
    }
    *etag = store_strong_etag(o->iov[0].iov_base, o->hdr_len, elen);
    return 1;
}

/* Completing a stored part (RFC 9111 3.3: a cache MAY complete it with a
 * range request and combine the answer as 3.4 says).  Only the one piece
 * missing from what the client asks for, when it is a contiguous tail or
 * head: the origin is asked for it, with If-Range the part's strong ETag,
 * and a 206 of exactly that range with that ETag combines (RFC 9110
 * 15.3.7.3: parts combine only under one strong validator).  A part with
 * no strong ETag is completed only for a request without Range: the rest
 * is asked for all the same (an origin that ignores Range, or whose
 * representation changed, answers the 200 the client needs), but a 206
 * to it is never combined, since nothing proves it the same
 * representation; proxy.c then fetches the whole. */
int
store_part_plan(const struct req *rq, struct store_cpl *cp)
{
    const struct cache_obj *o = &rq->obj;
    struct store_cond sc;
    const char *cr;
    size_t crl = 0, el = 0;
    uint64_t a, b;

    memset(cp, 0, sizeof(*cp));
    if (!rq->obj_held || o->meta.status != 206 || rq->r.method != HTTP_GET
        || http_field_find_id(&rq->r, HTTP_F_IF_RANGE, 0) >= 0
        || (cr = store_hdr_get(o->iov[0].iov_base, o->hdr_len, "content-range", &crl)) == NULL
        || !store_content_range(cr, crl, &a, &b, &cp->n) || o->body_len != b - a + 1)
        return 0;
    cp->strong = store_strong_etag(o->iov[0].iov_base, o->hdr_len, &el) != NULL;
    store_cond_from(&sc, &rq->r);
    if (sc.range[0] == '\0') {
        cp->whole = 1;
        cp->ca = 0;
        cp->cb = cp->n - 1;
    } else if (!cp->strong || store_range(sc.range, cp->n, &cp->ca, &cp->cb) != 1) {
        return 0;
    }
    if (cp->ca >= a && cp->ca <= b && cp->cb > b) {
        cp->qa = b + 1;         /* the tail: the part's bytes go first */
        cp->qb = cp->cb;
        cp->pos = cp->ca - a;
        cp->end = b + 1 - a;
    } else if (cp->ca < a && cp->cb >= a && cp->cb <= b) {
        cp->qa = cp->ca;        /* the head: the part's bytes follow */
        cp->qb = a - 1;
        cp->pos = 0;
        cp->end = cp->cb + 1 - a;
        cp->after = 1;
    } else {
        return 0;       /* covered (a hit), outside, or both ends missing */
    }
    return 1;
}

int
store_cpl_put_range(const struct req *rq, const struct store_cpl *cp, struct buf *b)
{
    char v[64], *q = v;
    size_t el = 0;
    const char *e = store_strong_etag(rq->obj.iov[0].iov_base, rq->obj.hdr_len, &el);
    int err;

    q = fmt_u64(q, cp->qa);
    *q++ = '-';
    if (cp->qb + 1 < cp->n)     /* to the end: the open form, as a client would */
        q = fmt_u64(q, cp->qb);
    err = buf_lit(b, "Range: bytes=");
    err |= buf_append(b, v, (size_t)(q - v));
    err |= buf_lit(b, "\r\n");
    if (cp->strong && e) {
        err |= buf_lit(b, "If-Range: ");
        err |= buf_append(b, e, el);
        err |= buf_lit(b, "\r\n");
    }
    return err ? -1 : 0;
}

int
store_cpl_joins(const struct req *rq, const struct store_cpl *cp, const struct http_req *resp)
{
    int ci = http_field_find_id(resp, HTTP_F_CONTENT_RANGE, 0);
    int ei = http_field_find_id(resp, HTTP_F_ETAG, 0);
    size_t el = 0;
    const char *e = store_strong_etag(rq->obj.iov[0].iov_base, rq->obj.hdr_len, &el);
    uint64_t a, b, n;

    return cp->strong && e && resp->status == 206 && ci >= 0 && ei >= 0
           && http_field_find_id(resp, HTTP_F_CONTENT_RANGE, ci + 1) < 0
           && store_content_range(resp->base + resp->fields[ci].value,
                                  resp->fields[ci].value_len, &a, &b, &n)
           && a == cp->qa && b == cp->qb && n == cp->n && !resp->chunked
           && resp->content_length == (int64_t)(b - a + 1)
           && http_field_find_id(resp, HTTP_F_ETAG, ei + 1) < 0
           && resp->fields[ei].value_len == el
           && memcmp(resp->base + resp->fields[ei].value, e, el) == 0;
}

/* The head of a part's answer: the stored block minus its status line
 * and its Content-Range (ours says which bytes go out). */
static void
store_copy_part_head(struct buf *b, const char *hdr, size_t len, int strip)
{
    const char *p = memchr(hdr, '\n', len), *end = hdr + len;

    while (p && ++p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        if (!(ll > 13 && p[13] == ':' && strncasecmp(p, "content-range", 13) == 0)
            && !(strip && store_tag_line(p, ll))) {
            memcpy(b->data + b->end, p, ll);
            b->end += ll;
        }
        p = e;
    }
}

/* store_send, or with span (not NULL) the held part's answer for a range
 * streamed block by block (worker/slice.c): the 206 says span's bytes,
 * the part lends those it holds. */
static int
store_send_as(struct req *rq, const struct store_cond *sc, int keep_alive,
              const char *cstatus, const char *hdr, size_t hdrlen,
              const struct store_span *span)
{
    struct cache_obj *o = &rq->obj;
    struct buf *b = rq->rq_out;
    struct timeval now;
    int64_t age;
    uint64_t from = 0, to = 0, base = 0, total = o->body_len;
    int status, part = 0, n;

    if (hdr == NULL) {
        hdr = o->iov[0].iov_base;
        hdrlen = o->hdr_len;
    }
    if (span) {
        from = span->from;
        to = span->to;
        base = span->base;
        total = span->total;
    } else if (o->meta.status == 206
               && (sc->method != HTTP_GET || sc->if_range[0]
                   || !store_part_span(hdr, hdrlen, sc->range, &from, &to, &base, &total))) {
        return -1;      /* a part answers only the ranges it covers */
    }
    event_base_gettimeofday_cached(wk->base, &now);
    age = (int64_t)now.tv_sec - o->meta.stored;
    if (age < 0)
        age = 0;

    if (o->meta.status == 206)
        status = part = 206;    /* conditionals: the origin's (not a 200 we hold) */
    else
        status = store_answer_status(hdr, hdrlen, o, sc, now.tv_sec, &part, &from, &to);
    if (buf_alloc(b) < 0 || buf_grow(b, hdrlen + 640 + VIA_MAX + wk->server_hdr_len) < 0)
        return -1;
    /* The origin's Server lines end the block (store_server_last):
     * response_server_enabled 1 puts ours in its place, 2 keeps it. */
    size_t srv = via_server_tail(hdr, hdrlen);
    int srv_ours = wk->conf->rec.server_enabled == 1 || srv == 0;
    size_t copylen = hdrlen - (wk->conf->rec.server_enabled == 1 && wk->server_hdr_len ? srv : 0);
    size_t mark = b->end;
    int strip = (o->meta.flags & STORE_F_TAGS) && !wk->conf->rec.purge_forward_tags;
    if (part < 0) {
        /* 416 keeps the representation's validators out; say why. */
        char cr[64];
        snprintf(cr, sizeof(cr), "Content-Range: bytes */%llu\r\n",
                 (unsigned long long)o->body_len);
        resp_simple(rq, 416, resp_connection_hdr(sc->minor, keep_alive), cr,
                    "range not satisfiable", sc->method == HTTP_HEAD);
        return 0;       /* (the object is released at DONE) */
    }
    if (part > 0) {
        n = snprintf(b->data + b->end, b->size - b->end, "HTTP/1.1 206 Partial Content\r\n");
        b->end += (size_t)n;
        store_copy_part_head(b, hdr, copylen, strip);
        n = snprintf(b->data + b->end, b->size - b->end,
                     "Content-Range: bytes %llu-%llu/%llu\r\nContent-Length: %llu\r\n",
                     (unsigned long long)from, (unsigned long long)to,
                     (unsigned long long)total,
                     (unsigned long long)(to - from + 1));
        b->end += (size_t)n;
        status = 206;
    } else {
        store_copy_head(b, hdr, copylen, status == 304, strip);
        if (status != 304 && status != 204) { /* RFC 9110 8.6: none on a 204 */
            char *q = store_put(b->data + b->end, "Content-Length: ", 16);
            q = fmt_u64(q, o->body_len);
            q = store_put(q, "\r\n", 2);
            b->end = (size_t)(q - b->data);
        }
    }
    /* the room reserved above covers these bounded fields */
    const char *ch = resp_connection_hdr(sc->minor, keep_alive);
    size_t csl = strlen(cstatus), dhl = strlen(wk->debug_hdr), chl = strlen(ch);
    if (b->size - b->end < 64 + csl + dhl + chl + VIA_MAX + wk->server_hdr_len)
        return -1;
    char *q = store_put(b->data + b->end, "Age: ", 5);
    q = fmt_i64(q, age);
    q = store_put(q, "\r\nCache-Status: ", 16);
    q = store_put(q, cstatus, csl);
    q = store_put(q, "\r\n", 2);
    q = store_put(q, wk->debug_hdr, dhl);
    if (wk->conf->rec.via_resp_level > 0) {
        char codes[VIA_CODES + 1];
        via_codes_init(codes, &rq->r);
        via_codes_hit(codes, cstatus, status);
        q += via_format(q, 1, 0, 1, codes);
    }
    if (srv_ours)
        q = store_put(q, wk->server_hdr, wk->server_hdr_len);
    q = store_put(q, ch, chl);
    q = store_put(q, "\r\n", 2);
    b->end = (size_t)(q - b->data);
    if (rq->rq_plugged
        && plug_send_response(rq, b, mark, status, hdr == o->iov[0].iov_base ? o : NULL) < 0)
        return -1;
    resp_count(rq, status);
    if (status == 304 && rq->log.active
        && strcmp(rq->log.result, "TCP_HIT") == 0)
        alog_result(rq, "TCP_IMS_HIT", 0);
    alog_bytes(rq, b->end - mark);
    alog_head(rq, b->data + mark, b->end - mark);
    if (sc->method == HTTP_HEAD || status == 304 || o->body_len == 0) {
        /* no body: the object is released at DONE, next */
    } else {
        /* the body goes out span by span (one per extent of a large
         * object), each lent straight from the mapping */
        rq->rq_hit_pos = status == 206 ? from - base : 0;
        rq->rq_hit_end = status == 206 ? to + 1 - base : o->body_len;
        alog_bytes(rq, rq->rq_hit_end - rq->rq_hit_pos);
        if (span && rq->rq_hit_end > o->body_len)
            rq->rq_hit_end = o->body_len;   /* a stream: the rest block by block */
        store_body_more(rq);
    }
    return 0;
}

int
store_send(struct req *rq, const struct store_cond *sc, int keep_alive,
           const char *cstatus, const char *hdr, size_t hdrlen)
{
    return store_send_as(rq, sc, keep_alive, cstatus, hdr, hdrlen, NULL);
}

int
store_send_span(struct req *rq, const struct store_cond *sc, int keep_alive,
                const char *cstatus, const struct store_span *span)
{
    if (rq->obj.meta.status != 206 || span->from < span->base
        || span->from - span->base >= rq->obj.body_len)
        return -1;
    return store_send_as(rq, sc, keep_alive, cstatus, NULL, 0, span);
}

/* Case-insensitive search for needle in p[0..n). */
static const char *
store_strcasestr_n(const char *p, size_t n, const char *needle)
{
    size_t nl = strlen(needle);

    for (size_t i = 0; i + nl <= n; i++)
        if (strncasecmp(p + i, needle, nl) == 0)
            return p + i;
    return NULL;
}

/* Is now within the stale window the stored Cache-Control gives with
 * directive `dir` ("stale-if-error=" / "stale-while-revalidate=")? */
static int
store_stale_window(const struct cache_obj *o, const char *dir, int64_t now)
{
    size_t vl, dl = strlen(dir);
    const char *cc = store_hdr_get(o->iov[0].iov_base, o->hdr_len, "cache-control", &vl);
    const char *p = cc ? store_strcasestr_n(cc, vl, dir) : NULL;

    if (p == NULL || p + dl >= cc + vl || p[dl] < '0' || p[dl] > '9')
        return 0;
    long long w = strtoll(p + dl, NULL, 10);
    return w > 0 && now < o->meta.expires + w;
}

/* stale-if-error (RFC 5861): may the held stale object answer an error? */
int
store_stale_on_error(struct req *rq)
{
    struct req *q = rq;
    struct timeval now;

    if (q == NULL || !q->obj_held || q->obj.meta.status == 206)
        return 0;       /* (a part held to be completed answers nothing whole) */
    /* never for what must not be served stale (RFC 9111 5.2.2.2, 5.2.2.4) */
    if (q->obj.meta.flags & (STORE_F_NO_CACHE | STORE_F_MUST_REVALIDATE))
        return 0;
    event_base_gettimeofday_cached(wk->base, &now);
    /* proxy.config.http.cache.max_stale_age bounds every stale answer */
    if ((int64_t)now.tv_sec - q->obj.meta.expires > wk->conf->rec.max_stale_age)
        return 0;
    /* ATS's negative revalidating: any failed revalidation keeps the
     * stale copy (and the error is not stored in its place) */
    if (wk->conf->rec.negative_revalidating)
        return 1;
    return store_stale_window(&q->obj, "stale-if-error=", now.tv_sec);
}

/* ------------------------------------------------------------------ */
/* Policy (records.config's keys and cache.config's lines; CACHING.md) */

void
store_policy(struct req *rq, const struct conf_remap_result *res)
{
    /* records.config's policy, made once per configuration (a worker
     * keeps its configuration for life) */
    static const struct conf *dconf;
    static struct req_policy dpol;
    const struct conf *cf = wk->conf;
    struct req_policy *p = &rq->rq_pol;

    if (dconf != cf) {
        const struct conf_records *rec = &cf->rec;

        memset(&dpol, 0, sizeof(dpol));
        dpol.cache = rec->cache_http != 0;
        dpol.ign_client_nc = rec->ignore_client_no_cache != 0;
        dpol.ign_server_nc = rec->ignore_server_no_cache != 0;
        dpol.ign_client_max_age = rec->ignore_client_cc_max_age != 0;
        dpol.cookies = (unsigned)rec->cache_cookies & 7;
        dpol.revalidate = -1;
        dconf = cf;
    }
    *p = dpol;
    /* No rules, no cost: the hit path copies the above and goes on.  The
     * rules match the origin's URL, a remap rule's or, forward proxying,
     * the target's own (ATS applies cache.config to both). */
    if (cf->cache.nrules && p->cache) {
        struct conf_cache_req q;
        struct conf_cache_result cr;
        struct timeval now;
        struct tm tm;
        char url[sizeof(res->host) + sizeof(res->path) + 32];
        int def = strcmp(res->scheme, "https") == 0 ? 443 : 80;
        time_t t;

        memset(&q, 0, sizeof(q));
        q.scheme = res->scheme;
        q.host = res->host;
        q.hostlen = strlen(res->host);
        q.port = res->port;
        q.path = res->path;
        q.pathlen = res->pathlen;
        q.method = http_method_name(rq->r.method);
        q.src = rq->rq_peer;
        event_base_gettimeofday_cached(wk->base, &now);
        t = now.tv_sec;
        q.tod = localtime_r(&t, &tm) ? tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec : 0;
        if (cf->cache.need_url) {
            if (res->port == def)
                snprintf(url, sizeof(url), "%s://%s%s", res->scheme, res->host, res->path);
            else
                snprintf(url, sizeof(url), "%s://%s:%d%s", res->scheme, res->host,
                         res->port, res->path);
            q.url = url;
        }
        if (conf_cache_match(&cf->cache, &q, &cr) > 0) {
            p->cache = !cr.never_cache;
            p->ign_client_nc |= cr.ignore_client_no_cache;
            p->ign_server_nc |= cr.ignore_server_no_cache;
            p->ttl_in_cache = cr.ttl_in_cache;
            p->revalidate = cr.revalidate;
            if (cr.cookies >= 0)
                p->cookies = (unsigned)cr.cookies & 7;
        }
    }
    if (p->cookies != 1)
        p->req_cookie = http_field_find(&rq->r, "cookie", 0) >= 0;
}

/* The policy of a request that had none resolved (a PUSH): records'. */
static void
store_policy_default(struct req_policy *p)
{
    const struct conf_records *rec = &wk->conf->rec;

    memset(p, 0, sizeof(*p));
    p->cache = 1;
    p->ign_server_nc = rec->ignore_server_no_cache != 0;
    p->cookies = (unsigned)rec->cache_cookies & 7;
    p->revalidate = -1;
}

/* Do cookies keep this response out of the cache (ATS's
 * cache_responses_to_cookies: 0 none with cookies, 1 any, 2 images only,
 * 3 all but text, 4 all but text unless without Set-Cookie or public)?
 * Cookies means a Cookie in the request or a Set-Cookie in the response. */
static int
store_cookies_prevent(unsigned mode, int req_cookie, int set_cookie, const char *ctype,
                      size_t ctlen, int public_)
{
    if (mode == 1 || (!req_cookie && !set_cookie))
        return 0;
    if (mode == 0)
        return 1;
    if (mode == 2)
        return !(ctype && ctlen >= 5 && strncasecmp(ctype, "image", 5) == 0);
    if (ctype && ctlen >= 4 && strncasecmp(ctype, "text", 4) == 0)
        return !(mode == 4 && (!set_cookie || public_));
    return 0;
}

/* Was the freshness lifetime given by the response (RFC 9111 4.2.1), not a
 * heuristic? */
static int
store_explicit(const struct http_req *resp, const struct cc_resp *cc)
{
    return cc->invalid || cc->s_maxage >= 0 || cc->max_age >= 0
           || http_field_find_id(resp, HTTP_F_EXPIRES, 0) >= 0;
}

/* The freshness lifetime to store (cachectl_lifetime, then ATS's
 * negative_caching_lifetime for a listed status without explicit
 * freshness, then the guaranteed_min/max_lifetime bounds); -1: none.
 * *heur: it came from a heuristic. */
static int64_t
store_lifetime(const struct http_req *resp, const struct cc_resp *cc, time_t now,
               int negative, int *heur)
{
    const struct conf_records *rec = &wk->conf->rec;
    int64_t l = cachectl_lifetime(resp, cc, now, rec->required_headers,
                                  rec->heuristic_min_lifetime, rec->heuristic_max_lifetime,
                                  rec->heuristic_lm_milli);
    int expl = store_explicit(resp, cc);

    *heur = l >= 0 && !expl;
    if (negative && !expl) {
        l = rec->negative_caching_lifetime;
        *heur = 0;
    }
    if (l >= 0) {
        if (rec->guaranteed_max_lifetime > 0 && l > rec->guaranteed_max_lifetime)
            l = rec->guaranteed_max_lifetime;
        if (l < rec->guaranteed_min_lifetime)
            l = rec->guaranteed_min_lifetime;
    }
    return l;
}

/* Is the held object fresh enough to answer r (RFC 9111 4.2 and 5.2.1, as
 * the policy bends them)?  *ttl (in: the stored expiry less now) becomes
 * the seconds of freshness left by the rule that decided; *plain says
 * the RFC's rules decided, so a stale answer (max-stale, stale-while-
 * revalidate) may still be given. */
static int
store_fresh(const struct cache_obj *o, const struct cc_req *rcc, const struct req_policy *pol,
            const struct http_req *r, int64_t age, int64_t *ttl, int *plain)
{
    const struct conf_records *rec = &wk->conf->rec;
    int objnc = (o->meta.flags & STORE_F_NO_CACHE) && !pol->ign_server_nc;
    int wtr = rec->when_to_revalidate;
    int ok = !objnc && !rcc->no_cache;

    *plain = 0;
    if (pol->ttl_in_cache > 0
        && !(rec->negative_caching_enabled
             && conf_cache_negative(&wk->conf->cache, o->meta.status))) {
        *ttl = pol->ttl_in_cache - age;         /* cache.config ttl-in-cache */
        return ok && *ttl > 0;
    }
    if (wtr == 2 || (wtr == 1 && (o->meta.flags & STORE_F_HEURISTIC))
        || (wtr == 4 && http_field_find_id(r, HTTP_F_IF_MODIFIED_SINCE, 0) >= 0)) {
        if (*ttl > 0)
            *ttl = 0;
        return 0;                               /* when_to_revalidate: stale */
    }
    if (wtr == 3)
        return ok;                              /* when_to_revalidate: never stale */
    if (pol->revalidate >= 0) {
        *ttl = pol->revalidate - age;           /* cache.config revalidate */
        return ok && *ttl > 0 && rcc->max_age != 0;
    }
    *plain = 1;
    /* max-age=0 (a browser's reload) always validates: ages are counted
     * in whole seconds, and "0" would otherwise accept this second's copy */
    if (ok && *ttl > 0 && !(rcc->max_age >= 0 && (age > rcc->max_age || rcc->max_age == 0))
        && !(rcc->min_fresh >= 0 && *ttl < rcc->min_fresh))
        return 1;
    /* the client accepts it this stale (within max_stale_age) */
    return ok && *ttl <= 0 && !(o->meta.flags & STORE_F_MUST_REVALIDATE)
           && (rcc->max_stale_any || (rcc->max_stale >= 0 && -*ttl <= rcc->max_stale))
           && -*ttl <= rec->max_stale_age
           && !(rcc->max_age >= 0 && age > rcc->max_age);
}

/* ------------------------------------------------------------------ */

/* The request's Cache-Control as the policy bends it. */
static void
store_req_cc(const struct req *q, struct cc_req *rcc)
{
    cachectl_parse_req(&q->r, rcc);
    if (q->rq_pol.ign_client_nc)
        rcc->no_cache = 0;      /* ignore_client_no_cache */
    if (q->rq_pol.ign_client_max_age)
        rcc->max_age = -1;      /* ignore_client_cc_max_age */
}

/* A request with Cookie, under cache_responses_to_cookies 0, 2-4, takes
 * only what that value lets cookies share: 1 when it may not take o (its
 * header block; set_cookie: its response had Set-Cookie). */
static int
store_cookie_refuses(const struct req *q, const struct cache_obj *o, int set_cookie)
{
    size_t ctl = 0, ccl = 0;
    const char *ct, *cc;

    if (!q->rq_pol.req_cookie || q->rq_pol.ttl_in_cache > 0)
        return 0;
    ct = store_hdr_get(o->iov[0].iov_base, o->hdr_len, "content-type", &ctl);
    cc = store_hdr_get(o->iov[0].iov_base, o->hdr_len, "cache-control", &ccl);
    return store_cookies_prevent(q->rq_pol.cookies, 1, set_cookie, ct, ctl,
                                 cc && store_strcasestr_n(cc, ccl, "public"));
}

int
store_joinable(const struct req *q, const struct cache_obj *o)
{
    struct cc_req rcc;
    struct timeval now;
    int64_t age, ttl;
    int plain;

    store_req_cc(q, &rcc);
    event_base_gettimeofday_cached(wk->base, &now);
    age = (int64_t)now.tv_sec - o->meta.stored;
    if (age < 0)
        age = 0;
    ttl = o->meta.expires - (int64_t)now.tv_sec;
    return !store_cookie_refuses(q, o, (o->meta.flags & STORE_F_SET_COOKIE) != 0)
           && store_fresh(o, &rcc, &q->rq_pol, &q->r, age, &ttl, &plain);
}

int
store_lookup(struct req *rq, const char *key, size_t keylen, const uint8_t hash[16],
             int count, const char **why, char *cs, size_t cslen)
{
    struct req *q = rq;
    struct http_req *r = &q->r;
    struct cache_obj *o = &q->obj;
    struct cc_req rcc;
    struct timeval now;
    int64_t age, ttl;
    int fresh;

    *why = "uri-miss";
    store_req_cc(q, &rcc);
    if ((count ? cache_lookup_hashed(wk->cache, key, keylen, hash, o)
               : cache_probe_hashed(wk->cache, key, keylen, hash, o)) != CACHE_OK)
        goto miss;
    if (o->meta.flags & STORE_F_VARY_MARKER) {
        if (store_follow_marker(key, keylen, r, o, q->obj_key, &q->obj_keylen) != CACHE_OK) {
            *why = "vary-miss";
            goto miss;
        }
    } else {
        memcpy(q->obj_key, key, keylen);
        q->obj_keylen = keylen;
    }
    q->obj_held = 1;
    event_base_gettimeofday_cached(wk->base, &now);
    age = (int64_t)now.tv_sec - o->meta.stored;
    if (age < 0)
        age = 0;
    ttl = o->meta.expires - (int64_t)now.tv_sec;

    if (store_cookie_refuses(q, o, (o->meta.flags & STORE_F_SET_COOKIE) != 0)) {
        store_release(rq);
        *why = "request";
        goto miss;
    }

    /* Usable without asking the origin (RFC 9111 4.2, 5.2.1)? */
    int plain;
    int objnc = (o->meta.flags & STORE_F_NO_CACHE) && !q->rq_pol.ign_server_nc;
    int64_t ttl0 = ttl;
    fresh = store_fresh(o, &rcc, &q->rq_pol, r, age, &ttl, &plain);
    if (fresh) {
        char *e = store_put(cs, q->rq_collapsed ? "cistern; fwd=uri-miss; collapsed; ttl="
                                                : "cistern; hit; ttl=",
                            q->rq_collapsed ? 38 : 18);
        *fmt_i64(e, ttl) = '\0';
        return STORE_HIT;
    }
    /* stale-while-revalidate (RFC 5861): serve it now, refresh it behind. */
    if (plain && !q->rq_bg && r->method == HTTP_GET && ttl <= 0 && !rcc.no_cache && !objnc
        && !(o->meta.flags & STORE_F_MUST_REVALIDATE)
        && -ttl0 <= wk->conf->rec.max_stale_age
        && store_stale_window(o, "stale-while-revalidate=", now.tv_sec)) {
        snprintf(cs, cslen, "cistern; hit; ttl=%lld; detail=stale-while-revalidate",
                 (long long)ttl);
        return STORE_HIT_STALE;
    }
    /* stale by itself, or only for this request's directives (RFC 9211) */
    *why = (ttl <= 0 || objnc) && !rcc.no_cache ? "stale" : "request";
    if (rcc.only_if_cached) {
        store_release(rq);
        goto miss;
    }
    /* Keep it: the origin may say it is still good (304), or fail; a
     * whole object also for HEAD, whose 200 may refresh it (4.3.5). */
    if (r->method != HTTP_GET && (r->method != HTTP_HEAD || o->meta.status == 206))
        store_release(rq);
    return STORE_REVALIDATE;

miss:
    return rcc.only_if_cached ? STORE_ONLY_CACHED : STORE_MISS;
}

/* ------------------------------------------------------------------ */
/* Fills */

/* Is field i of resp a Set-Cookie? */
static int
store_is_set_cookie(const struct http_req *resp, int i)
{
    return resp->fields[i].id == HTTP_F_OTHER && http_field_is(resp, i, "set-cookie");
}

/* Does cc name the field name[0..nl) in private="..." or no-cache="..."
 * (RFC 9111 5.2.2.7, 5.2.2.4): a field a shared cache does not store? */
static int
store_cc_omits(const struct cc_resp *cc, const char *name, size_t nl)
{
    char nm[128];

    if ((!cc->omit_fields && !cc->omit_fields2) || nl >= sizeof(nm))
        return 0;
    memcpy(nm, name, nl);
    nm[nl] = '\0';
    return (cc->omit_fields && http_list_has(cc->omit_fields, cc->omit_len, nm))
           || (cc->omit_fields2 && http_list_has(cc->omit_fields2, cc->omit_len2, nm));
}

/* Header block blk[0..len) (the status line, then "Name: value" lines)
 * into out without the fields cc omits (store_cc_omits) and without
 * Set-Cookie (never stored).  Returns the bytes written (at most len). */
static size_t
store_block_omit(const char *blk, size_t len, const struct cc_resp *cc, char *out)
{
    const char *p = blk, *end = blk + len;
    size_t n = 0;

    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        const char *colon = p > blk ? memchr(p, ':', ll) : NULL;
        size_t nl = colon ? (size_t)(colon - p) : 0;
        if (colon == NULL || !(store_cc_omits(cc, p, nl)
                               || (nl == 10 && strncasecmp(p, "set-cookie", 10) == 0))) {
            memcpy(out + n, p, ll);
            n += ll;
        }
        p += ll;
    }
    return n;
}

/* Fields never stored: hop-by-hop ones (RFC 9111 3.1: the fixed names
 * and those a Connection line lists, marked by http_resp_parse), and those
 * every answer makes anew (framing, Age, Cache-Status).  The origin's Via
 * is kept (ours is added to each answer, as insert_response_via_str says). */
static int
store_skip_field(const struct http_req *resp, int i)
{
    if (http_field_hop(resp, i))
        return 1;
    switch (resp->fields[i].id) {
    case HTTP_F_AGE:
    case HTTP_F_CONTENT_LENGTH:
    case HTTP_F_CACHE_STATUS:
        return 1;
    case HTTP_F_OTHER:
        /* one client's cookie is never replayed to another (a response
         * with one is stored only when proxy.config.cistern.cache.
         * set_cookie says so, and then without it) */
        return store_is_set_cookie(resp, i);
    default:
        return 0;
    }
}

/* Does the Vary list v[0..vl) name a request field whose forwarded
 * value we made from the client's address or our own name (X-Forwarded-
 * For, Forwarded and Via appended to, Client-ip replaced)?  A variant is
 * stored by the value forwarded but looked up by the client's own, so a
 * client sending the value another was forwarded with would be served
 * that client's answer (an origin that answers by the address, for one):
 * such an answer is not stored. */
static int
store_vary_ours(const char *v, size_t vl)
{
    const struct conf_records *rec = &wk->conf->rec;

    return (rec->insert_xff && http_list_has(v, vl, "x-forwarded-for"))
           || (rec->insert_forwarded && http_list_has(v, vl, "forwarded"))
           || (rec->via_req_level > 0 && http_list_has(v, vl, "via"))
           || (rec->insert_client_ip == 2 && http_list_has(v, vl, "client-ip"));
}

/* Does resp carry purge tags (kept in the header block, indexed by the
 * store, stripped from answers unless purge.forward_tags)? */
static int
store_resp_tagged(const struct http_req *resp)
{
    return http_field_find(resp, "surrogate-key", 0) >= 0
           || http_field_find(resp, "cache-tag", 0) >= 0;
}

/* Move the Server lines of header block blk to its end, where a hit
 * finds the origin's by its last lines (via_server_tail). */
static void
store_server_last(char *blk, size_t len)
{
    static char srv[STORE_HDR_MAX];
    char *p = memchr(blk, '\n', len), *end = blk + len, *w;
    size_t sl = 0;

    if (p == NULL)
        return;
    for (w = ++p; p < end;) {
        char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        if (ll > 7 && strncasecmp(p, "server:", 7) == 0) {
            memcpy(srv + sl, p, ll);
            sl += ll;
        } else {
            memmove(w, p, ll);
            w += ll;
        }
        p += ll;
    }
    memcpy(w, srv, sl);
}

static uint64_t
store_new_id(void)
{
    static uint64_t seed, ctr;

    if (seed == 0) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, &seed, sizeof(seed)) != sizeof(seed))
            seed = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)time(NULL);
        if (fd >= 0)
            close(fd);
    }
    return seed ^ (++ctr * 0x9e3779b97f4a7c15ULL);
}

/* The variant-set id for key with this Vary list: the marker's when it
 * has the same list, else a new marker is written.  Returns the id length
 * (written to id), or 0. */
static size_t
store_marker(const char *key, size_t keylen, const char *vary, size_t vlen,
             char *id, size_t idlen, int64_t now)
{
    struct cache_obj o;
    size_t l1, l2;

    if (cache_lookup(wk->cache, key, keylen, &o) == CACHE_OK) {
        const char *v = NULL, *i = NULL;
        if (o.meta.flags & STORE_F_VARY_MARKER) {
            v = store_hdr_get(o.iov[0].iov_base, o.hdr_len, "vary", &l1);
            i = store_hdr_get(o.iov[0].iov_base, o.hdr_len, "x-cistern-variants", &l2);
        }
        if (v && i && l1 == vlen && strncasecmp(v, vary, vlen) == 0 && l2 < idlen) {
            memcpy(id, i, l2);
            cache_obj_release(wk->cache, &o);
            return l2;
        }
        cache_obj_release(wk->cache, &o);
    }
    char hdr[1024];
    int n = snprintf(id, idlen, "%016llx", (unsigned long long)store_new_id());
    int hn = snprintf(hdr, sizeof(hdr), "HTTP/1.1 200 Variants\r\nVary: %.*s\r\n"
                      "X-Cistern-Variants: %s\r\n", (int)vlen, vary, id);
    if (n <= 0 || hn <= 0 || (size_t)hn >= sizeof(hdr))
        return 0;
    struct cache_meta meta = { .status = 200, .flags = STORE_F_VARY_MARKER,
                               .stored = now, .expires = now + STORE_MARKER_TTL };
    struct cache_fill *f;
    if (cache_fill_begin(wk->cache, key, keylen, &meta, hdr, (size_t)hn, 0, &f) != CACHE_OK)
        return 0;
    if (cache_fill_commit(f, NULL) != CACHE_OK)
        return 0;
    return (size_t)n;
}

/* May resp be stored under pol (RFC 9111 3 as cachectl.c has it, bent by
 * ATS's keys and cache.config)?  NULL with *lifetime, *heur (a heuristic
 * gave it) and *set_cookie, or why not (a Cache-Status detail).  The
 * request's part (a GET without no-store) is proxy.c's up_store. */
static const char *
store_decide(const struct http_req *resp, struct cc_resp *cc, const struct req_policy *pol,
             int req_auth, time_t now, int64_t *lifetime, int *heur, int *set_cookie, int part)
{
    const struct conf_records *rec = &wk->conf->rec;
    int negative;

    cachectl_parse_resp(resp, cc, rec->cdn_cache_control);
    cc->part_ok = part != 0;
    if (pol->ign_server_nc)
        cc->no_store = cc->no_cache = 0;        /* ignore_server_no_cache */
    negative = rec->negative_caching_enabled
               && conf_cache_negative(&wk->conf->cache, resp->status);
    /* no-store that ttl-in-cache does not override: cachectl_storable_resp
     * refuses it before looking at the lifetime, so none is worked out */
    if (cc->no_store && !cc->must_understand && !(pol->ttl_in_cache > 0 && !negative)) {
        *lifetime = -1;
        *heur = 0;
    } else {
        *lifetime = store_lifetime(resp, cc, now, negative, heur);
    }
    if (pol->ttl_in_cache > 0 && !negative) {
        /* cache.config ttl-in-cache (ATS): stored whatever no-store or
         * private say, for a status ATS stores without explicit freshness */
        static const int ok[] = { 200, 203, 204, 300, 301, 308, 410 };
        int st = *lifetime >= 0 && !*heur;
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
            st |= resp->status == ok[i];
        if (!st && !cc->public_)
            return "no-freshness";
        cc->no_store = cc->private_ = 0;
        *lifetime = pol->ttl_in_cache;
        *heur = 0;
    }
    /* ATS's ignore_authentication 0: a response with WWW-Authenticate is
     * not stored; 1: neither it nor the request's Authorization matter. */
    if (!rec->ignore_authentication && http_field_find(resp, "www-authenticate", 0) >= 0)
        return "www-authenticate";
    const char *why = cachectl_storable_resp(resp, cc, *lifetime,
                                             req_auth && !rec->ignore_authentication);
    if (why)
        return why;
    *set_cookie = http_field_find(resp, "set-cookie", 0) >= 0;
    if (pol->ttl_in_cache <= 0) {
        int ci = http_field_find(resp, "content-type", 0);
        if (store_cookies_prevent(pol->cookies, pol->req_cookie, *set_cookie,
                                  ci >= 0 ? resp->base + resp->fields[ci].value : NULL,
                                  ci >= 0 ? resp->fields[ci].value_len : 0, cc->public_))
            return "cookie";
    }
    /* Set-Cookie is never stored: with it, a response is stored without it
     * (cistern.cache.set_cookie 1) or not at all (0). */
    if (!rec->cache_set_cookie && *set_cookie)
        return "set-cookie";
    return NULL;
}

/* What a part's fill stores: bytes [ca, cb] of a representation of n. */
struct store_part_plan {
    uint64_t ca, cb, n;
};

static const char *
store_fill_begin_as(const char *key, size_t keylen, const struct http_req *resp,
                    const struct http_req *req, const struct http_req *creq,
                    int req_auth, int64_t req_time,
                    const struct req_policy *pol, struct cache_fill **out,
                    const struct store_part_plan *pp)
{
    static char hdr[STORE_HDR_MAX];
    struct cc_resp cc;
    struct cache_meta meta;
    struct timeval now;
    struct req_policy dpol;
    int64_t lifetime, initial_age, body_len;
    size_t len = 0;
    char vkey[STORE_KEY_MAX];
    int n, rc, heur, set_cookie;

    *out = NULL;
    if (pol == NULL) {
        store_policy_default(&dpol);
        pol = &dpol;
    }
    event_base_gettimeofday_cached(wk->base, &now);
    const char *why = store_decide(resp, &cc, pol, req_auth, now.tv_sec, &lifetime, &heur,
                                   &set_cookie, pp != NULL);
    if (why)
        return why;
    if (pp && http_field_find_id(resp, HTTP_F_VARY, 0) >= 0)
        return "part-vary";     /* a part is stored for the plain key only */
    /* combined up to the whole representation: a 200, the object's key */
    int whole = pp && pp->ca == 0 && pp->cb + 1 == pp->n;
    if (whole)
        keylen -= STORE_PART_SUFFIX_LEN;

    /* Vary: store under the variant's key, behind a marker. */
    int vi = http_field_find_id(resp, HTTP_F_VARY, 0);
    if (vi >= 0) {
        const char *v = resp->base + resp->fields[vi].value;
        size_t vl = resp->fields[vi].value_len;
        char id[32];
        size_t il, kl;
        /* (Vary: * on any line was refused above.)  The marker keeps one
         * Vary line: several are not stored. */
        if (http_field_find_id(resp, HTTP_F_VARY, vi + 1) >= 0)
            return "vary-several-lines";
        if (store_vary_ours(v, vl))
            return "vary-ours";
        il = store_marker(key, keylen, v, vl, id, sizeof(id), now.tv_sec);
        kl = il ? store_variant_key(key, keylen, v, vl, id, il, req, creq, vkey,
                                    sizeof(vkey), wk->conf->rec.normalize_ae) : 0;
        if (kl == 0)
            return "vary-key";
        key = vkey;
        keylen = kl;
    }

    if (whole)
        n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 200 OK\r\n");
    else if (pp)
        n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 206 Partial Content\r\n"
                     "Content-Range: bytes %llu-%llu/%llu\r\n", (unsigned long long)pp->ca,
                     (unsigned long long)pp->cb, (unsigned long long)pp->n);
    else
        n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %d %.*s\r\n", resp->status,
                     (int)resp->phrase_len, resp->base + resp->phrase);
    len = (size_t)n;
    for (int i = 0; i < resp->nfields; i++) {
        const struct http_field *f = &resp->fields[i];
        size_t fl = f->value + f->value_len - f->name;

        if (store_skip_field(resp, i) || (pp && f->id == HTTP_F_CONTENT_RANGE)
            || store_cc_omits(&cc, resp->base + f->name, f->name_len))
            continue;
        if (len + fl + 2 >= sizeof(hdr))
            return "header-too-large";
        memcpy(hdr + len, resp->base + f->name, fl);
        len += fl;
        memcpy(hdr + len, "\r\n", 2);
        len += 2;
    }
    if (http_field_find_id(resp, HTTP_F_DATE, 0) < 0) {
        char d[32];
        cachectl_fmt_date(now.tv_sec, d);
        n = snprintf(hdr + len, sizeof(hdr) - len, "Date: %s\r\n", d);
        if (n < 0 || (size_t)n >= sizeof(hdr) - len)
            return "header-too-large";
        len += (size_t)n;
    }
    store_server_last(hdr, len);

    initial_age = cachectl_initial_age(resp, req_time, now.tv_sec);
    memset(&meta, 0, sizeof(meta));
    meta.status = (uint16_t)(whole ? 200 : resp->status);
    meta.flags = (cc.no_cache ? STORE_F_NO_CACHE : 0)
                 | (cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage >= 0
                    ? STORE_F_MUST_REVALIDATE : 0)
                 | (heur ? STORE_F_HEURISTIC : 0) | (set_cookie ? STORE_F_SET_COOKIE : 0)
                 | (store_resp_tagged(resp) ? STORE_F_TAGS : 0);
    meta.stored = (int64_t)now.tv_sec - initial_age;
    meta.expires = meta.stored + (lifetime > 0 ? lifetime : 0);
    body_len = resp->skip_body ? 0
             : (resp->chunked || resp->until_close) ? -1 : resp->content_length;
    if (body_len < -1)
        body_len = -1;
    if (pp)
        body_len = (int64_t)(pp->cb - pp->ca + 1);     /* checked at commit */
    rc = cache_fill_begin(wk->cache, key, keylen, &meta, hdr, len, body_len, out);
    if (rc != CACHE_OK) {
        *out = NULL;
        return rc == CACHE_TOOBIG ? "too-big" : "store-busy";
    }
    return NULL;
}

const char *
store_fill_begin(const char *key, size_t keylen, const struct http_req *resp,
                 const struct http_req *req, const struct http_req *creq, int req_auth,
                 int64_t req_time, const struct req_policy *pol, struct cache_fill **out)
{
    return store_fill_begin_as(key, keylen, resp, req, creq, req_auth, req_time, pol, out,
                               NULL);
}

static void
store_part_release(struct store_part_old *old)
{
    if (old->held)
        cache_obj_release(wk->cache, &old->obj);
    old->held = 0;
    old->tail = old->end = 0;
}

/* Write body bytes [from, to) of held object o into fill *f. */
static int
store_fill_copy(struct cache_fill **f, const struct cache_obj *o, uint64_t from, uint64_t to)
{
    const void *p;

    while (*f && from < to) {
        size_t n = cache_obj_span(wk->cache, o, from, &p);
        if (n == 0)
            return CACHE_ERROR;
        if (n > to - from)
            n = (size_t)(to - from);
        if (store_fill_data(f, p, n) != CACHE_OK)
            return CACHE_ERROR;
        from += n;
    }
    return *f ? CACHE_OK : CACHE_ERROR;
}

/* May the stored part under key combine with the new one [a, b] of n
 * (RFC 9111 3.4: the same strong validator, the same complete length,
 * overlapping or adjoining)?  1 with old->obj held and [*oa, *ob]. */
static int
store_part_old(const char *key, size_t keylen, const struct http_req *resp, uint64_t a,
               uint64_t b, uint64_t n, struct store_part_old *old, uint64_t *oa, uint64_t *ob)
{
    struct cache_obj *o = &old->obj;
    int ei = http_field_find_id(resp, HTTP_F_ETAG, 0);
    size_t el = 0, crl = 0;
    uint64_t on;

    if (ei < 0 || resp->fields[ei].value_len < 2 || resp->base[resp->fields[ei].value] != '"'
        || cache_lookup(wk->cache, key, keylen, o) != CACHE_OK)
        return 0;
    old->held = 1;
    const char *h = o->iov[0].iov_base, *e = store_strong_etag(h, o->hdr_len, &el);
    const char *cr = store_hdr_get(h, o->hdr_len, "content-range", &crl);
    if (o->meta.status == 206 && e && el == resp->fields[ei].value_len
        && memcmp(e, resp->base + resp->fields[ei].value, el) == 0 && cr
        && store_content_range(cr, crl, oa, ob, &on) && on == n && o->body_len == *ob - *oa + 1
        && a <= *ob + 1 && *oa <= b + 1
        /* (combined beyond the largest object, ours replaces it: a long
         * range streamed block by block goes on from the newest blocks) */
        && (*ob > b ? *ob : b) - (*oa < a ? *oa : a) + 1 + o->hdr_len
           <= (uint64_t)cache_max_doc_size(wk->cache))
        return 1;
    cache_obj_release(wk->cache, o);
    old->held = 0;
    return 0;
}

const char *
store_fill_begin_part(const char *key, size_t keylen, const struct http_req *resp,
                      int req_auth, int64_t req_time, const struct req_policy *pol,
                      struct cache_fill **out, struct store_part_old *old)
{
    struct store_part_plan pp;
    uint64_t a, b, oa = 0, ob = 0;
    int ci = http_field_find_id(resp, HTTP_F_CONTENT_RANGE, 0);

    *out = NULL;
    if (resp->status != 206 || ci < 0 || http_field_find_id(resp, HTTP_F_CONTENT_RANGE, ci + 1) >= 0
        || !store_content_range(resp->base + resp->fields[ci].value, resp->fields[ci].value_len,
                                &a, &b, &pp.n))
        return "part-range";    /* multipart, or no complete length */
    if (b - a + 1 > (uint64_t)INT64_MAX
        || (resp->content_length >= 0 && resp->content_length != (int64_t)(b - a + 1)))
        return "part-length";
    pp.ca = a;
    pp.cb = b;
    if (store_part_old(key, keylen, resp, a, b, pp.n, old, &oa, &ob)) {
        pp.ca = oa < a ? oa : a;
        pp.cb = ob > b ? ob : b;
        old->tail = ob > b ? b + 1 - oa : 0;
        old->end = ob > b ? ob + 1 - oa : 0;
    }
    const char *why = store_fill_begin_as(key, keylen, resp, NULL, NULL, req_auth, req_time, pol,
                                          out, &pp);
    /* the stored bytes before ours go first */
    if (why == NULL && oa < a && old->held && store_fill_copy(out, &old->obj, 0, a - oa) != CACHE_OK)
        why = "part-combine";
    if (why)
        store_fill_end_part(out, old, 0);       /* drops the fill, releases old */
    else if (old->tail == old->end)
        store_part_release(old);                /* nothing of it after ours */
    return why;
}

int
store_fill_end_part(struct cache_fill **f, struct store_part_old *old, int complete)
{
    if (*f && complete && old->held && old->tail < old->end
        && store_fill_copy(f, &old->obj, old->tail, old->end) != CACHE_OK)
        complete = 0;
    store_part_release(old);
    return store_fill_end(f, complete, NULL);
}

int
store_fill_data(struct cache_fill **f, const char *p, size_t n)
{
    int rc;

    if (*f == NULL || n == 0)
        return CACHE_OK;
    rc = cache_fill_write(*f, p, n);
    if (rc != CACHE_OK) {
        cache_fill_abort(*f);
        *f = NULL;
    }
    return rc;
}

int
store_fill_end(struct cache_fill **f, int complete, int *replaced)
{
    int rc = CACHE_ABORTED;

    if (*f == NULL)
        return rc;
    if (complete)
        rc = cache_fill_commit(*f, replaced);
    else
        cache_fill_abort(*f);
    *f = NULL;
    return rc;
}

/* ------------------------------------------------------------------ */
/* Validation (RFC 9111 4.3) */

/* Add If-None-Match / If-Modified-Since for the held object to b.
 * Returns 1 when the object has a validator. */
int
store_validators(struct req *rq, struct buf *b)
{
    struct cache_obj *o = &rq->obj;
    size_t l;
    const char *v;
    int any = 0;

    if (!rq->obj_held)
        return 0;
    if ((v = store_hdr_get(o->iov[0].iov_base, o->hdr_len, "etag", &l)) != NULL) {
        buf_printf(b, "If-None-Match: %.*s\r\n", (int)l, v);
        any = 1;
    }
    if ((v = store_hdr_get(o->iov[0].iov_base, o->hdr_len, "last-modified", &l)) != NULL) {
        buf_printf(b, "If-Modified-Since: %.*s\r\n", (int)l, v);
        any = 1;
    }
    return any;
}

/* Fields a 304 must not change in what we stored: those describing the
 * stored body itself (RFC 9111 3.2), besides the ones never stored. */
static int
store_keep_on_304(const struct http_req *resp, int i)
{
    switch (resp->fields[i].id) {
    case HTTP_F_CONTENT_ENCODING:
    case HTTP_F_CONTENT_RANGE:
    case HTTP_F_CONTENT_MD5:
    case HTTP_F_ETAG:
        return 1;
    default:
        return store_skip_field(resp, i);
    }
}

/* Store the refreshed header block blk[0..len) of the held object with
 * meta: the body stays where it is (RFC 9111 4.3.4), only headers move;
 * without the fields cc names in private="..." or no-cache="..." (a
 * shared cache does not store them, 5.2.2.7 and 5.2.2.4, though the
 * client that revalidated gets them) and without Set-Cookie; not at all
 * when cc says no-store or (unqualified) private, nor when the answer
 * carried Set-Cookie (set_cookie) and cistern.cache.set_cookie is 0, as
 * a fill with one is not stored. */
static void
store_refresh_put(struct req *rq, struct cache_meta *meta, const struct cc_resp *cc,
                  const char *blk, size_t len, int set_cookie)
{
    static char kept[32768];
    const char *b = blk;
    size_t bl = len;

    if (cc->no_store || cc->private_ || (set_cookie && !wk->conf->rec.cache_set_cookie))
        return;
    if (cc->omit_fields || cc->omit_fields2 || set_cookie) {
        if (len > sizeof(kept))
            return;
        bl = store_block_omit(blk, len, cc, kept);
        b = kept;
    }
    if (cache_obj_update_headers(wk->cache, &rq->obj, rq->obj_key, rq->obj_keylen, meta, b, bl)
        != CACHE_OK)
        log_debug("conn %llu: refreshed headers of %.*s not stored",
                  (unsigned long long)rq->rq_id, (int)rq->obj_keylen, rq->obj_key);
}

/* The origin said 304 for the held object: merge its fields into the
 * stored header block (RFC 9111 3.2: every field of the 304 replaces the
 * stored ones of that name, except the framing), store that, and build
 * the merged block into out.  Returns its length, or 0. */
size_t
store_refresh(struct req *rq, const struct http_req *resp, int64_t req_time,
              uint64_t purge_gen, char *out, size_t outlen)
{
    struct cache_obj *o = &rq->obj;
    const char *blk = o->iov[0].iov_base, *end = blk + o->hdr_len;
    const char *p = memchr(blk, '\n', o->hdr_len);
    size_t len;
    struct cc_resp cc;
    struct timeval now;
    int64_t lifetime, initial_age;

    if (p == NULL)
        return 0;
    p++;
    len = (size_t)(p - blk);
    if (len >= outlen)
        return 0;
    memcpy(out, blk, len);
    /* the stored fields the 304 does not replace */
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        const char *colon = memchr(p, ':', ll);
        int replaced = 0;
        if (colon) {
            for (int i = 0; i < resp->nfields && !replaced; i++) {
                const struct http_field *f = &resp->fields[i];
                replaced = f->name_len == (size_t)(colon - p)
                           && strncasecmp(resp->base + f->name, p, f->name_len) == 0
                           && !store_keep_on_304(resp, i);
            }
        }
        if (!replaced) {
            if (len + ll >= outlen)
                return 0;
            memcpy(out + len, p, ll);
            len += ll;
        }
        p += ll;
    }
    for (int i = 0; i < resp->nfields; i++) {
        const struct http_field *f = &resp->fields[i];
        size_t fl = f->value + f->value_len - f->name;
        if (store_keep_on_304(resp, i) && !store_is_set_cookie(resp, i))
            continue;       /* (Set-Cookie: for this answer, never stored) */
        if (len + fl + 2 >= outlen)
            return 0;
        memcpy(out + len, resp->base + f->name, fl);
        len += fl;
        memcpy(out + len, "\r\n", 2);
        len += 2;
    }

    store_server_last(out, len);
    /* New freshness from the merged fields. */
    static struct http_req merged;
    http_req_reset(&merged);
    if (len + 2 >= outlen)
        return 0;
    memcpy(out + len, "\r\n", 2);
    if (http_head_scan(&merged, out, len + 2, &wk->resp_limits) != HTTP_OK
        || http_resp_parse(&merged, out, HTTP_GET) != HTTP_OK)
        return 0;
    event_base_gettimeofday_cached(wk->base, &now);
    cachectl_parse_resp(&merged, &cc, wk->conf->rec.cdn_cache_control);
    if (rq->rq_pol.ign_server_nc)
        cc.no_store = cc.no_cache = 0;
    int heur, negative = wk->conf->rec.negative_caching_enabled
                         && conf_cache_negative(&wk->conf->cache, o->meta.status);
    lifetime = store_lifetime(&merged, &cc, now.tv_sec, negative, &heur);
    if (rq->rq_pol.ttl_in_cache > 0 && !negative) {
        lifetime = rq->rq_pol.ttl_in_cache;
        heur = 0;
    }
    initial_age = cachectl_initial_age(resp, req_time, now.tv_sec);
    struct cache_meta meta = o->meta;
    meta.stored = (int64_t)now.tv_sec - initial_age;
    meta.expires = meta.stored + (lifetime > 0 ? lifetime : 0);
    meta.flags = (meta.flags & ~(STORE_F_NO_CACHE | STORE_F_MUST_REVALIDATE | STORE_F_HEURISTIC
                                 | STORE_F_TAGS))
                 | (store_resp_tagged(&merged) ? STORE_F_TAGS : 0)
                 | (cc.no_cache ? STORE_F_NO_CACHE : 0)
                 | (heur ? STORE_F_HEURISTIC : 0)
                 | (cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage >= 0
                    ? STORE_F_MUST_REVALIDATE : 0);
    int64_t fresh_until = meta.expires;
    /* a purge began since the conditional request was sent: the 304
     * vouches for what the origin had before it, so the copy is stored
     * stale, as a fill across a purge is (this answer still uses it) */
    if (cache_purge_gen(wk->cache) != purge_gen && meta.expires > (int64_t)now.tv_sec - 1)
        meta.expires = (int64_t)now.tv_sec - 1;
    store_refresh_put(rq, &meta, &cc, out, len, http_field_find(resp, "set-cookie", 0) >= 0);
    o->meta.flags = (o->meta.flags & ~STORE_F_TAGS) | (meta.flags & STORE_F_TAGS);
    o->meta.stored = meta.stored;       /* what this answer reports as Age */
    o->meta.expires = fresh_until;
    return len;
}

/* Does the value of resp's field id equal the held block's `name`?  An
 * absent field on both sides is equal; on one side only, not. */
static int
store_same_field(const struct http_req *resp, enum http_fid id, const char *blk, size_t blen,
                 const char *name)
{
    int i = http_field_find_id(resp, id, 0);
    size_t l = 0;
    const char *v = store_hdr_get(blk, blen, name, &l);

    if (i < 0)
        return 1;       /* not received: nothing to compare (4.3.5) */
    return v && l == resp->fields[i].value_len
           && memcmp(v, resp->base + resp->fields[i].value, l) == 0;
}

/* Is a HEAD response's Content-Length (not framing, so the parser left
 * it unread) absent or len?  Several lines or a malformed value: no. */
static int
store_head_length_is(const struct http_req *resp, uint64_t len)
{
    int i = http_field_find_id(resp, HTTP_F_CONTENT_LENGTH, 0);
    uint64_t v = 0;

    if (i < 0)
        return 1;
    if (http_field_find_id(resp, HTTP_F_CONTENT_LENGTH, i + 1) >= 0)
        return 0;
    const char *p = resp->base + resp->fields[i].value;
    size_t n = resp->fields[i].value_len;
    if (n == 0 || n > 19)
        return 0;
    for (size_t k = 0; k < n; k++) {
        if (p[k] < '0' || p[k] > '9')
            return 0;
        v = v * 10 + (uint64_t)(p[k] - '0');
    }
    return v == len;
}

/* A 200 to a HEAD we forwarded while holding the stored GET response
 * (RFC 9111 4.3.5): may it update the held object?  Yes when the held one
 * is a whole 200, the received validators (ETag, Last-Modified) are the
 * stored ones and a received Content-Length is the stored body's length.
 * Otherwise the stored response no longer describes what the origin has:
 * it is removed (4.3.5: "consider the stored response to be stale") and
 * released.  Returns 1 to refresh (store_refresh), 0 when released. */
int
store_head_fits(struct req *rq, const struct http_req *resp)
{
    struct cache_obj *o = &rq->obj;
    const char *blk = o->iov[0].iov_base;

    if (!rq->obj_held || o->meta.status != 200)
        return 0;
    if (store_same_field(resp, HTTP_F_ETAG, blk, o->hdr_len, "etag")
        && store_same_field(resp, HTTP_F_LAST_MODIFIED, blk, o->hdr_len, "last-modified")
        && store_head_length_is(resp, o->body_len))
        return 1;
    store_remove(rq->obj_key, rq->obj_keylen);
    store_release(rq);
    return 0;
}

/* The cache key of URL reference v[0..vl) (an absolute URL, or a path
 * from the root) into out when it is of the same origin as key: key's
 * scheme and authority (store_key's spelling, so host case and default
 * ports compare), the path, then what key names after its URL (from its
 * first space: the pristine Host, " forward").  Returns its length, or 0
 * for another origin or a reference we do not resolve. */
static size_t
store_same_origin_key(const char *key, size_t keylen, const char *v, size_t vl, char *out,
                      size_t outlen)
{
    const char *ke = memchr(key, ' ', keylen), *sep = strstr(key, "://");
    size_t ul = ke ? (size_t)(ke - key) : keylen, ol, n;
    char path[STORE_KEY_MAX], url[STORE_KEY_MAX];

    if (sep == NULL || (size_t)(sep - key) >= ul)
        return 0;
    const char *slash = memchr(sep + 3, '/', ul - (size_t)(sep + 3 - key));
    ol = slash ? (size_t)(slash - key) : ul;     /* "scheme://authority" */
    if (vl > 0 && v[0] == '/' && (vl == 1 || v[1] != '/')) {
        if (ol + vl >= sizeof(url))
            return 0;
        memcpy(url, key, ol);
        memcpy(url + ol, v, vl);
        n = ol + vl;
    } else {
        struct http_parser_url u;
        char sch[8], host[256];
        http_parser_url_init(&u);
        if (http_parser_parse_url(v, vl, 0, &u) != 0 || !(u.field_set & (1 << UF_HOST))
            || !(u.field_set & (1 << UF_SCHEMA)) || u.field_data[UF_SCHEMA].len >= sizeof(sch)
            || u.field_data[UF_HOST].len >= sizeof(host))
            return 0;
        size_t sl = u.field_data[UF_SCHEMA].len, hl = u.field_data[UF_HOST].len;
        for (size_t i = 0; i < sl; i++)
            sch[i] = (char)tolower((unsigned char)v[u.field_data[UF_SCHEMA].off + i]);
        sch[sl] = '\0';
        memcpy(host, v + u.field_data[UF_HOST].off, hl);
        host[hl] = '\0';
        size_t po = (u.field_set & (1 << UF_PATH)) ? u.field_data[UF_PATH].off : vl;
        if (vl - po >= sizeof(path))
            return 0;
        memcpy(path, v + po, vl - po);
        path[vl - po] = '\0';
        int port = (u.field_set & (1 << UF_PORT)) ? u.port : (sl == 5 ? 443 : 80);
        n = store_key(url, sizeof(url), sch, host, port, path[0] ? path : "/");
        if (n < ol || memcmp(url, key, ol) != 0 || (n > ol && url[ol] != '/'))
            return 0;   /* another origin: never invalidated (4.4) */
    }
    if (n + (keylen - ul) >= outlen)
        return 0;
    memcpy(out, url, n);
    memcpy(out + n, key + ul, keylen - ul);
    return n + (keylen - ul);
}

/* Unsafe methods (RFC 9111 4.4): a non-error answer invalidates the URL
 * (key) and the Location / Content-Location URLs of the same origin as
 * the key names it (the remapped URL's, not that of the host the request
 * went to, such as a parent). */
void
store_invalidate(const char *key, size_t keylen, const struct http_req *resp)
{
    static const char *const hdrs[] = { "location", "content-location" };
    char k2[STORE_KEY_MAX];

    store_remove(key, keylen);
    for (size_t h = 0; h < 2; h++) {
        int i = http_field_find(resp, hdrs[h], 0);
        if (i < 0)
            continue;
        size_t kl = store_same_origin_key(key, keylen, resp->base + resp->fields[i].value,
                                          resp->fields[i].value_len, k2, sizeof(k2));
        if (kl)
            store_remove(k2, kl);
    }
}
