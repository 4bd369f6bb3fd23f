/*
 * worker/h2head.c: an HTTP/2 request's fields, written out as the
 * HTTP/1.1 head the request steps parse (h2.h).  Pure: buffers only, so
 * the fuzz target links it with buf.c and http.c alone.
 *
 * nghttp2 has already applied RFC 9113 8.2 and 8.3 by the time a field
 * reaches h2_head_add (its HTTP messaging checks are on): names are
 * lowercase tokens, values hold no NUL, CR or LF, pseudo-header fields
 * come first, once each, and only the request ones; connection-specific
 * fields (connection, keep-alive, proxy-connection, transfer-encoding,
 * upgrade) and a te other than "trailers" reset the stream before we see
 * them; content-length is checked against the DATA.  What is left for
 * us is the translation, and http.c's parser checks the result as it
 * checks any HTTP/1.1 head (Host, the target's form, sizes).
 */
#include "config.h"

#include <string.h>

#include "worker/h2.h"

void
h2_head_init(struct h2_head *h)
{
    memset(h, 0, sizeof(*h));
}

void
h2_head_release(struct h2_head *h)
{
    buf_release(&h->b);
    h->nfields = 0;
    h->size = 0;
}

static int
h2_is(const uint8_t *p, size_t n, const char *lit)
{
    size_t l = strlen(lit);

    return n == l && memcmp(p, lit, l) == 0;
}

int
h2_head_add(struct h2_head *h, const uint8_t *name, size_t nlen,
            const uint8_t *value, size_t vlen, uint64_t limit)
{
    uint32_t ln = (uint32_t)nlen, lv = (uint32_t)vlen;

    h->size += nlen + vlen + 32;
    if (h->over || h->size > limit) {
        h->over = 1;
        return 0;       /* counted, not kept: the HPACK bomb stops here */
    }
    if (h2_is(name, nlen, "content-length"))
        h->has_cl = 1;
    if (h->b.data == NULL && buf_alloc(&h->b) < 0)
        return -1;
    if (buf_append(&h->b, (const char *)&ln, 4) < 0
        || buf_append(&h->b, (const char *)&lv, 4) < 0
        || buf_append(&h->b, (const char *)name, nlen) < 0
        || buf_append(&h->b, (const char *)value, vlen) < 0)
        return -1;
    h->nfields++;
    return 0;
}

/* Walk the records: *off at the next one; 0 at the end. */
struct h2_field {
    const char *n, *v;
    uint32_t    nl, vl;
};

static int
h2_next(const struct h2_head *h, size_t *off, struct h2_field *f)
{
    const char *p = h->b.data + *off;

    if (*off + 8 > h->b.end)
        return 0;
    memcpy(&f->nl, p, 4);
    memcpy(&f->vl, p + 4, 4);
    f->n = p + 8;
    f->v = f->n + f->nl;
    *off += 8 + (size_t)f->nl + f->vl;
    return 1;
}

static int
h2_fis(const struct h2_field *f, const char *lit)
{
    return h2_is((const uint8_t *)f->n, f->nl, lit);
}

/* The pseudo-header fields (the last of each, though nghttp2 lets only
 * one through) and the host field. */
struct h2_pseudo {
    struct h2_field method, path, authority, host;
    int             has_method, has_path, has_authority, has_host;
};

static void
h2_pseudo_find(const struct h2_head *h, struct h2_pseudo *ps)
{
    struct h2_field f;
    size_t off = 0;

    memset(ps, 0, sizeof(*ps));
    while (h2_next(h, &off, &f)) {
        if (h2_fis(&f, ":method")) {
            ps->method = f;
            ps->has_method = 1;
        } else if (h2_fis(&f, ":path")) {
            ps->path = f;
            ps->has_path = 1;
        } else if (h2_fis(&f, ":authority")) {
            ps->authority = f;
            ps->has_authority = 1;
        } else if (h2_fis(&f, "host") && !ps->has_host) {
            ps->host = f;
            ps->has_host = 1;
        }
    }
}

/* The fields after the pseudo ones, as HTTP/1.1 lines; cookie crumbs
 * joined into one line at the end. */
static int
h2_put_fields(const struct h2_head *h, struct buf *out)
{
    struct h2_field f;
    size_t off = 0;
    int err = 0, cookies = 0;

    while (h2_next(h, &off, &f)) {
        if (f.nl == 0 || f.n[0] == ':' || h2_fis(&f, "host") || h2_fis(&f, "te")
            || h2_fis(&f, "expect") || h2_fis(&f, "cookie"))
            continue;
        err |= buf_append(out, f.n, f.nl);
        err |= buf_lit(out, ": ");
        err |= buf_append(out, f.v, f.vl);
        err |= buf_lit(out, "\r\n");
    }
    off = 0;
    while (h2_next(h, &off, &f)) {
        if (!h2_fis(&f, "cookie"))
            continue;
        err |= cookies++ ? buf_lit(out, "; ") : buf_lit(out, "Cookie: ");
        err |= buf_append(out, f.v, f.vl);
    }
    if (cookies)
        err |= buf_lit(out, "\r\n");
    return err;
}

int
h2_head_build(const struct h2_head *h, int body, struct buf *out,
              const char **why)
{
    struct h2_pseudo ps;
    const struct h2_field *host;
    int err = 0;

    h2_pseudo_find(h, &ps);
    if (!ps.has_method) {
        *why = "no :method";
        return 400;
    }
    if (h2_is((const uint8_t *)ps.method.v, ps.method.vl, "CONNECT")) {
        *why = "CONNECT over HTTP/2 (no tunnels on a stream)";
        return 501;
    }
    if (!ps.has_path || ps.path.vl == 0) {
        *why = "no :path";
        return 400;
    }
    host = ps.has_authority ? &ps.authority : ps.has_host ? &ps.host : NULL;
    if (host == NULL || host->vl == 0) {
        *why = "no :authority or host";
        return 400;
    }
    if (buf_alloc(out) < 0)
        return -1;
    err |= buf_append(out, ps.method.v, ps.method.vl);
    err |= buf_lit(out, " ");
    err |= buf_append(out, ps.path.v, ps.path.vl);
    err |= buf_lit(out, " HTTP/1.1\r\nHost: ");
    err |= buf_append(out, host->v, host->vl);
    err |= buf_lit(out, "\r\n");
    err |= h2_put_fields(h, out);
    if (body && !h->has_cl)
        err |= buf_lit(out, "Transfer-Encoding: chunked\r\n");
    err |= buf_lit(out, "\r\n");
    return err ? -1 : 0;
}
