/*
 * t/fuzz/fuzz_request.c: the client side of a connection.
 *
 * The input is everything a client sends on one connection.  It goes
 * through what conn.c does: http_head_scan (once whole, and again fed in
 * pieces, which must agree: the scanner is resumable), http_req_parse,
 * then http_req_body for the body (and http_body_forward: fuzz_body.h),
 * then the next pipelined request, up to a few.  Two limit sets: the
 * defaults and tiny ones (to reach 414/431).
 * Invariants: an accepted head lies inside the input, every offset lies
 * inside the head, Content-Length and chunked are never both set, a
 * Transfer-Encoding field always means chunked, a refusal has a reason
 * and a status we answer with; body framing never consumes more than it
 * was given nor delivers more payload than it consumed.
 */
#include "config.h"
#include "worker/http.h"
#include "t/fuzz/fuzz.h"
#include "t/fuzz/fuzz_body.h"

struct sink_count {
    size_t bytes;
};

static void
count_sink(void *arg, const char *p, size_t n)
{
    struct sink_count *s = arg;
    volatile char c = n ? p[0] ^ p[n - 1] : 0;   /* touch both ends: ASan */
    (void)c;
    s->bytes += n;
}

static void
check_fields(const struct http_req *r)
{
    FZ_CHECK(r->nfields >= 0 && r->nfields <= HTTP_MAX_FIELDS);
    for (int i = 0; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        FZ_CHECK(f->name_len > 0);
        FZ_CHECK((uint64_t)f->name + f->name_len < r->head_len);
        FZ_CHECK((uint64_t)f->value + f->value_len <= r->head_len);
        FZ_CHECK(f->value >= f->name + f->name_len + 1);
    }
}

/* The path remap and the cache see (http_req_path): it starts with '/',
 * holds no dot segment (in any spelling), agrees with what
 * http_path_normalize finds for itself, and normalising it again changes
 * nothing. */
static void
check_path(const struct http_req *r)
{
    static char buf[70000], again[70000];
    const char *p, *q;
    size_t n, n2, s = 0;

    if (r->method == HTTP_CONNECT || (r->path_len == 1 && r->base[r->path] == '*'))
        return;
    p = http_req_path(r, buf, sizeof(buf), &n);
    FZ_CHECK(p != NULL && n > 0 && p[0] == '/');
    q = http_path_normalize(r->base + r->path, r->path_len, again, sizeof(again), &n2);
    FZ_CHECK(q != NULL && n2 == n && memcmp(p, q, n) == 0);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && p[i] != '/' && p[i] != '?')
            continue;
        size_t l = i - s - 1;
        const char *g = p + s + 1;
        FZ_CHECK(!(l == 1 && g[0] == '.') && !(l == 2 && g[0] == '.' && g[1] == '.'));
        FZ_CHECK(!(l >= 3 && g[0] == '%' && g[1] == '2' && (g[2] | 0x20) == 'e'));
        if (i == n || p[i] == '?')
            break;
        s = i;
    }
    q = http_path_normalize(p, n, again, sizeof(again), &n2);
    FZ_CHECK(q != NULL && n2 == n && memcmp(p, q, n) == 0);
}

/* Scan buf[0..len) in pieces whose sizes come from the data itself. */
static int
scan_pieces(struct http_req *r, const char *buf, size_t len,
            const struct http_limits *lim)
{
    size_t have = 0;
    int rc = HTTP_AGAIN;

    http_req_reset(r);
    while (have < len) {
        size_t step = 1 + ((unsigned char)buf[have] % 7);
        have = have + step > len ? len : have + step;
        rc = http_head_scan(r, buf, have, lim);
        if (rc != HTTP_AGAIN)
            return rc;
    }
    return rc;
}

static int
is_tchar_name(const struct http_req *r, int i, const char *name)
{
    return http_field_is(r, i, name);
}

/* Invariants of a head http_req_parse accepted (head: its private copy). */
static void
check_parsed(const struct http_req *r, const char *head)
{
    FZ_CHECK(r->reason == NULL);
    FZ_CHECK(r->major == 1 && r->minor <= 9);
    FZ_CHECK(!(r->content_length >= 0 && r->chunked));
    FZ_CHECK(r->has_body == (r->chunked || r->content_length > 0));
    FZ_CHECK(r->target_len > 0 && (uint64_t)r->target + r->target_len <= r->head_len);
    FZ_CHECK((uint64_t)r->host + r->host_len <= r->head_len);
    FZ_CHECK((uint64_t)r->path + r->path_len <= r->head_len);
    FZ_CHECK(r->port >= 0 && r->port <= 65535);
    FZ_CHECK(r->f_host >= -1 && r->f_host < r->nfields);
    /* HTTP/1.1 needs Host, but for a target carrying its own authority
     * (absolute form, CONNECT's authority form), as in ATS (issue 19) */
    FZ_CHECK(r->minor == 0 || r->f_host >= 0 || r->absolute
             || r->method == HTTP_CONNECT);
    FZ_CHECK(!r->absolute || r->host_len > 0);
    FZ_CHECK(r->method >= 0);
    FZ_CHECK(strcmp(http_method_name(r->method), "UNKNOWN") != 0);
    int nhost = 0, nte = 0, ncl = 0;
    for (int i = 0; i < r->nfields; i++) {
        nhost += is_tchar_name(r, i, "host");
        nte += is_tchar_name(r, i, "transfer-encoding");
        ncl += is_tchar_name(r, i, "content-length");
    }
    FZ_CHECK(nhost <= 1);
    FZ_CHECK(!(nte && ncl));            /* CL with TE is always refused */
    FZ_CHECK(!nte || r->chunked);       /* TE accepted only as chunked */
    FZ_CHECK(!ncl || r->content_length >= 0);
    FZ_CHECK(!nte || r->minor >= 1);
    /* Host in the head is a valid authority: no bytes a cache key or an
     * upstream request line could be confused by. */
    for (uint32_t k = 0; k < r->host_len; k++) {
        unsigned char c = (unsigned char)head[r->host + k];
        FZ_CHECK(c > 0x20 && c != 0x7f && c != '/' && c != '?' && c != '#' && c != '@');
    }
    for (uint32_t k = 0; k < r->path_len; k++) {
        unsigned char c = (unsigned char)head[r->path + k];
        FZ_CHECK(c > 0x20 && c != 0x7f && c < 0x80 && c != '#');
    }
    check_path(r);
}

/* Feed the body after the head in pieces from *pos; returns 1 when it ended
 * cleanly (*pos past it), 0 to stop. */
static int
feed_body(struct http_req *r, const char *buf, size_t len, size_t *pos_io)
{
    size_t pos = *pos_io;
    int rc;

    if (r->has_body) {
        struct sink_count sc = { 0 };
        size_t fed = 0, from = pos;
        static struct http_req r0;
        r0 = *r;
        rc = HTTP_AGAIN;
        while (pos < len) {
            /* pieces of up to 1 + (byte % 13) bytes */
            size_t step = 1 + ((unsigned char)buf[pos] % 13), used = 0;
            if (step > len - pos)
                step = len - pos;
            rc = http_req_body(r, buf + pos, step, &used, count_sink, &sc);
            FZ_CHECK(used <= step);
            fed += used;
            pos += used;
            if (rc != HTTP_AGAIN && rc != HTTP_OK)
                break;      /* on an error, payload before it may have gone to the sink */
            FZ_CHECK(sc.bytes <= fed);
            if (rc != HTTP_AGAIN)
                break;
            if (used < step) {
                /* HTTP_AGAIN must have consumed the piece */
                FZ_CHECK(0);
            }
        }
        fz_forward_agrees(&r0, buf + from, len - from, rc, fed, sc.bytes);
        if (rc != HTTP_OK && rc != HTTP_AGAIN) {
            FZ_CHECK(rc == 400 && r->reason != NULL);
            return 0;
        }
        if (rc == HTTP_AGAIN) {
            FZ_CHECK(http_body_eof(r) == 400);   /* a request is never close-delimited */
            return 0;
        }
        FZ_CHECK(r->body_done);
        if (r->content_length >= 0)
            FZ_CHECK((int64_t)sc.bytes == r->content_length && (int64_t)fed == r->content_length);
        /* A finished body takes no more bytes. */
        size_t used = 1;
        FZ_CHECK(http_req_body(r, buf + pos, len - pos, &used, NULL, NULL) == HTTP_OK
                 && used == 0);
    } else {
        FZ_CHECK(r->body_done);
    }
    *pos_io = pos;
    return 1;
}

/* One request starting at buf[0]; returns bytes consumed, 0 to stop. */
static size_t
one_request(const char *buf, size_t len, const struct http_limits *lim)
{
    static struct http_req r, r2;
    int rc, rc2;

    http_req_reset(&r);
    rc = http_head_scan(&r, buf, len, lim);
    rc2 = scan_pieces(&r2, buf, len, lim);
    /* Pieces must not change the verdict.  Known and tolerated: a line
     * over both limits is 431 when it arrives whole, 414 when it drips. */
    FZ_CHECK(rc == rc2 || (rc >= 414 && rc2 >= 414)
#ifdef FUZZ_KNOWN_BUGS
             /* bug 1: a request line of exactly line_max bytes is a 414
              * when its CR arrives in a read before its LF */
             || rc2 == 414
#endif
             );
    if (rc == HTTP_AGAIN)
        return 0;
    if (rc != HTTP_OK) {
        FZ_CHECK(rc == 400 || rc == 414 || rc == 431);
        FZ_CHECK(r.reason != NULL);
        return 0;
    }
    FZ_CHECK(r.head_len > 0);
    FZ_CHECK((uint64_t)r.start + r.head_len <= len);
    if (rc2 == HTTP_OK)
        FZ_CHECK(r2.head_len == r.head_len && r2.start == r.start
                 && r2.nfields == r.nfields);
    FZ_CHECK(r.head_len <= lim->head_max);
    check_fields(&r);

    /* http_req_parse may rewrite PUSH to POST: parse a private copy of
     * exactly the head, so a read past it is an ASan report. */
    char *head = fz_dup((const uint8_t *)buf + r.start, r.head_len);
    rc = http_req_parse(&r, head);
    if (rc != HTTP_OK) {
        FZ_CHECK(rc == 400 || rc == 417 || rc == 501 || rc == 505);
        FZ_CHECK(r.reason != NULL);
        free(head);
        return 0;
    }
    check_parsed(&r, head);

    size_t pos = r.start + r.head_len;
    if (!feed_body(&r, buf, len, &pos)) {
        free(head);
        return 0;
    }
    free(head);
    return pos;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct http_limits defaults = { 65535, 131072 };
    static const struct http_limits tiny = { 40, 200 };
    const struct http_limits *lims[2] = { &defaults, &tiny };

    for (int l = 0; l < 2; l++) {
        /* an exact-size copy: reads past the input are ASan reports */
        char *buf = fz_dup(data, size);
        size_t pos = 0;
        for (int n = 0; n < 4 && pos < size; n++) {
            size_t used = one_request(buf + pos, size - pos, lims[l]);
            if (used == 0)
                break;
            pos += used;
        }
        free(buf);
    }
    return 0;
}
