/*
 * worker/store.c: the HTTP side of the cache: keys, hits, fills.
 *
 * The cache key is the request URL after remap, normalised: scheme and
 * host lowercase, the scheme's default port dropped, path and query as
 * sent (RFC 9111 4.1 leaves normalisation beyond that to the cache; more
 * would merge URLs an origin may treat differently).
 *
 * What a stored object holds (the store itself is cache/):
 *   header block  the status line and the end-to-end fields of the
 *                 response as we forwarded it, minus Age, Content-Length,
 *                 Transfer-Encoding (a hit re-frames with the length it
 *                 knows), without the blank line;
 *   body          the decoded payload;
 *   meta          status, flags (no-cache, must-revalidate), `stored` =
 *                 the moment the response's age was 0 (so age at any later
 *                 time is now - stored, RFC 9111 4.2.3), `expires` =
 *                 stored + freshness lifetime.
 *
 * The hit path: one LMDB lookup, the header block copied into the
 * connection's output buffer (a few hundred bytes) followed by Content-
 * Length, Age and Cache-Status, and the body handed to writev straight
 * from the pinned mapping.  No allocation: the cache_obj lives in the
 * request context, which is pooled.
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cache/cache.h"
#include "master/log.h"
#include "worker/cachectl.h"
#include "worker/worker.h"

/* A stored header block larger than this is not worth caching. */
#define STORE_HDR_MAX 32768

size_t
store_key(char *out, size_t outlen, const char *scheme, const char *host,
          int port, const char *path)
{
    int def = strcmp(scheme, "https") == 0 ? 443 : 80;
    int n;

    if (port == def)
        n = snprintf(out, outlen, "%s://%s%s", scheme, host, path);
    else
        n = snprintf(out, outlen, "%s://%s:%d%s", scheme, host, port, path);
    if (n < 0 || (size_t)n >= outlen)
        return 0;
    /* lowercase the authority only */
    size_t hs = strlen(scheme) + 3;
    for (size_t i = hs; i < (size_t)n && out[i] != '/'; i++)
        out[i] = (char)tolower((unsigned char)out[i]);
    return (size_t)n;
}

void
store_release(struct conn *c)
{
    struct req_ctx *q = c->cn_req;

    if (q && q->obj_held) {
        cache_obj_release(wk->cache, &q->obj);
        q->obj_held = 0;
        c->cn_body = NULL;
        c->cn_body_len = 0;
    }
}

int
store_serve(struct conn *c, const char *key, size_t keylen, int keep_alive,
            const char **why)
{
    struct req_ctx *q = c->cn_req;
    struct http_req *r = &q->r;
    struct cache_obj *o = &q->obj;
    struct cc_req rcc;
    struct timeval now;
    struct buf *b = &c->cn_out;
    int64_t age, ttl;
    int n;

    *why = "uri-miss";
    cachectl_parse_req(r, &rcc);
    if (rcc.no_cache) {
        *why = "request";
        return 0;
    }
    if (cache_lookup(wk->cache, key, keylen, o) != CACHE_OK)
        return 0;
    event_base_gettimeofday_cached(wk->base, &now);
    age = (int64_t)now.tv_sec - o->meta.stored;
    if (age < 0)
        age = 0;
    ttl = o->meta.expires - (int64_t)now.tv_sec;
    /* Fresh enough for this request (RFC 9111 4.2, 5.2.1)? */
    if (ttl <= 0 || (o->meta.flags & STORE_F_NO_CACHE)
        || (rcc.max_age >= 0 && age > rcc.max_age)
        || (rcc.min_fresh >= 0 && ttl < rcc.min_fresh)) {
        cache_obj_release(wk->cache, o);
        *why = "stale";
        return 0;
    }
    q->obj_held = 1;
    if (buf_alloc(b) < 0 || buf_grow(b, o->hdr_len + 512) < 0) {
        store_release(c);
        return 0;
    }
    memcpy(b->data + b->end, o->iov[0].iov_base, o->hdr_len);
    b->end += o->hdr_len;
    n = snprintf(b->data + b->end, b->size - b->end,
                 "Content-Length: %llu\r\nAge: %lld\r\n"
                 "Cache-Status: cistern; hit; ttl=%lld\r\n%s%s\r\n",
                 (unsigned long long)o->body_len, (long long)age, (long long)ttl,
                 wk->debug_hdr, conn_connection_hdr(r->minor, keep_alive));
    if (n < 0 || (size_t)n >= b->size - b->end) {
        b->end -= o->hdr_len;
        store_release(c);
        return 0;
    }
    b->end += (size_t)n;
    conn_count_status(o->meta.status);
    if (r->method == HTTP_HEAD || o->body_len == 0) {
        store_release(c);
    } else {
        c->cn_body = o->iov[1].iov_base;
        c->cn_body_len = o->iov[1].iov_len;
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* Fills */

static int
store_skip_field(const struct http_req *resp, int i)
{
    static const char *const skip[] = {
        "age", "content-length", "transfer-encoding", "connection",
        "keep-alive", "proxy-connection", "te", "trailer", "upgrade",
        "proxy-authenticate", "via",
    };

    for (size_t k = 0; k < sizeof(skip) / sizeof(skip[0]); k++)
        if (http_field_is(resp, i, skip[k]))
            return 1;
    /* fields named in Connection are hop-by-hop too (RFC 9111 3.1) */
    if (resp->conn_tokens & HTTP_CONN_OTHER) {
        const struct http_field *f = &resp->fields[i];
        char name[128];
        if (f->name_len < sizeof(name)) {
            memcpy(name, resp->base + f->name, f->name_len);
            name[f->name_len] = '\0';
            for (int j = 0; j < resp->nfields; j++)
                if (http_field_is(resp, j, "connection")
                    && http_list_has(resp->base + resp->fields[j].value,
                                     resp->fields[j].value_len, name))
                    return 1;
        }
    }
    return 0;
}

const char *
store_fill_begin(const char *key, size_t keylen, const struct http_req *resp,
                 int req_auth, int64_t req_time, struct cache_fill **out)
{
    static char hdr[STORE_HDR_MAX];
    struct cc_resp cc;
    struct cache_meta meta;
    struct timeval now;
    const struct conf_records *rec = &wk->conf->rec;
    int64_t lifetime, initial_age, body_len;
    size_t len = 0;
    int n, rc;

    event_base_gettimeofday_cached(wk->base, &now);
    cachectl_parse_resp(resp, &cc);
    lifetime = cachectl_lifetime(resp, &cc, now.tv_sec, rec->required_headers,
                                 rec->heuristic_min_lifetime, rec->heuristic_max_lifetime);
    *out = NULL;
    if (req_auth && !cc.public_ && cc.s_maxage < 0 && !cc.must_revalidate)
        return "authorization";
    if (cc.no_store)
        return "no-store";
    if (cc.private_)
        return "private";
    if (resp->status < 200 || resp->status == 206 || resp->status == 304)
        return "status";
    int vi = http_field_find(resp, "vary", 0);
    if (vi >= 0)
        return "vary";      /* variants are not stored yet */
    if (lifetime < 0 && !cc.no_cache)
        return "no-freshness";
    if (lifetime <= 0 && !cc.no_cache && !cc.must_revalidate)
        return "stale-on-arrival";

    n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %d %.*s\r\n", resp->status,
                 (int)resp->phrase_len, resp->base + resp->phrase);
    len = (size_t)n;
    for (int i = 0; i < resp->nfields; i++) {
        const struct http_field *f = &resp->fields[i];
        size_t fl = f->value + f->value_len - f->name;

        if (store_skip_field(resp, i))
            continue;
        if (len + fl + 2 >= sizeof(hdr))
            return "header-too-large";
        memcpy(hdr + len, resp->base + f->name, fl);
        len += fl;
        memcpy(hdr + len, "\r\n", 2);
        len += 2;
    }
    if (http_field_find(resp, "date", 0) < 0) {
        char d[32];
        cachectl_fmt_date(now.tv_sec, d);
        n = snprintf(hdr + len, sizeof(hdr) - len, "Date: %s\r\n", d);
        if (n < 0 || (size_t)n >= sizeof(hdr) - len)
            return "header-too-large";
        len += (size_t)n;
    }
    n = snprintf(hdr + len, sizeof(hdr) - len, "Via: %s\r\n", wk->via);
    if (n < 0 || (size_t)n >= sizeof(hdr) - len)
        return "header-too-large";
    len += (size_t)n;

    initial_age = cachectl_initial_age(resp, req_time, now.tv_sec);
    memset(&meta, 0, sizeof(meta));
    meta.status = (uint16_t)resp->status;
    meta.flags = (cc.no_cache ? STORE_F_NO_CACHE : 0)
                 | (cc.must_revalidate || cc.proxy_revalidate ? STORE_F_MUST_REVALIDATE : 0);
    meta.stored = (int64_t)now.tv_sec - initial_age;
    meta.expires = meta.stored + (lifetime > 0 ? lifetime : 0);
    body_len = resp->skip_body ? 0
             : (resp->chunked || resp->until_close) ? -1 : resp->content_length;
    if (body_len < -1)
        body_len = -1;
    rc = cache_fill_begin(wk->cache, key, keylen, &meta, hdr, len, body_len, out);
    if (rc != CACHE_OK) {
        *out = NULL;
        return rc == CACHE_TOOBIG ? "too-big" : "store-busy";
    }
    return NULL;
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
