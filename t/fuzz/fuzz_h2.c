/*
 * t/fuzz/fuzz_h2.c: the HTTP/2 frame path, under a real nghttp2 server
 * session with the callbacks worker/h2.c uses for requests.
 *
 * The input is what a client sends after the preface (prepended here),
 * fed to nghttp2_session_mem_recv in two pieces (the first byte says
 * where to cut), so frames split across reads are covered.  Each
 * stream's fields go through h2_head_add (worker/h2head.c) with a small
 * header-list limit; complete HEADERS through h2_head_build and then
 * http.c's scanner and parser, as a stream's request is.  Every request
 * is answered (HEADERS and a DATA provider) and the session's output is
 * drained, so the send side runs too.  Invariants: a head that
 * h2_head_build wrote is whole (the scanner never wants more bytes) and
 * carries the :method it was given; a list past the limit keeps no more
 * fields; nothing leaks (ASan) whatever the frames.
 */
#include "config.h"

#include <nghttp2/nghttp2.h>

#include "worker/h2.h"
#include "worker/http.h"
#include "t/fuzz/fuzz.h"

#define FZ_STREAMS 8
#define FZ_LIMIT   4096

struct fz_stream {
    int32_t        id;
    int            used;
    struct h2_head hd;
};

static struct fz_stream fz_s[FZ_STREAMS];

static struct fz_stream *
fz_find(int32_t id, int make)
{
    for (int i = 0; i < FZ_STREAMS; i++)
        if (fz_s[i].used && fz_s[i].id == id)
            return &fz_s[i];
    if (!make)
        return NULL;
    for (int i = 0; i < FZ_STREAMS; i++)
        if (!fz_s[i].used) {
            fz_s[i].used = 1;
            fz_s[i].id = id;
            h2_head_init(&fz_s[i].hd);
            return &fz_s[i];
        }
    return NULL;
}

static void
fz_drop(struct fz_stream *s)
{
    h2_head_release(&s->hd);
    s->used = 0;
}

static ssize_t
fz_send(nghttp2_session *ss, const uint8_t *d, size_t n, int flags, void *arg)
{
    (void)ss; (void)d; (void)flags; (void)arg;
    return (ssize_t)n;
}

static ssize_t
fz_read(nghttp2_session *ss, int32_t id, uint8_t *buf, size_t len,
        uint32_t *flags, nghttp2_data_source *src, void *arg)
{
    (void)ss; (void)id; (void)src; (void)arg;
    if (len > 5)
        len = 5;
    memcpy(buf, "hello", len);
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)len;
}

static int
fz_begin_headers(nghttp2_session *ss, const nghttp2_frame *f, void *arg)
{
    (void)arg;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST
        && fz_find(f->hd.stream_id, 1) == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    (void)ss;
    return 0;
}

static int
fz_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
          const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    struct fz_stream *s = fz_find(f->hd.stream_id, 0);
    unsigned before;

    (void)ss; (void)flags; (void)arg;
    if (s == NULL)
        return 0;
    before = s->hd.nfields;
    if (h2_head_add(&s->hd, name, nlen, value, vlen, FZ_LIMIT) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (s->hd.over)
        FZ_CHECK(s->hd.nfields == before);
    return 0;
}

/* HEADERS whole: the HTTP/1.1 head, scanned and parsed as h2.c does. */
static void
fz_request(nghttp2_session *ss, struct fz_stream *s, int body)
{
    static const struct http_limits lim = { 8192, 65536 };
    static struct http_req r;
    struct buf out = { 0 };
    const char *why = NULL;
    int rc = s->hd.over ? 431 : h2_head_build(&s->hd, body, &out, &why);

    if (rc > 0)
        FZ_CHECK(why != NULL || rc == 431);
    if (rc == 0) {
        http_req_reset(&r);
        FZ_CHECK(out.end > 4 && memcmp(out.data + out.end - 4, "\r\n\r\n", 4) == 0);
        int sc = http_head_scan(&r, out.data, out.end, &lim);
        FZ_CHECK(sc != HTTP_AGAIN || out.end > lim.head_max);
        if (sc == HTTP_OK && http_req_parse(&r, out.data + r.start) == HTTP_OK)
            FZ_CHECK(r.head_len <= out.end);
    }
    buf_release(&out);
    nghttp2_nv nv = { (uint8_t *)":status", (uint8_t *)"200", 7, 3, 0 };
    nghttp2_data_provider dp = { .read_callback = fz_read };
    nghttp2_submit_response(ss, s->id, &nv, 1, &dp);
}

static int
fz_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *arg)
{
    struct fz_stream *s;

    (void)arg;
    if (f->hd.type != NGHTTP2_HEADERS || (s = fz_find(f->hd.stream_id, 0)) == NULL)
        return 0;
    if (f->headers.cat == NGHTTP2_HCAT_REQUEST)
        fz_request(ss, s, !(f->hd.flags & NGHTTP2_FLAG_END_STREAM));
    return 0;
}

static int
fz_close(nghttp2_session *ss, int32_t id, uint32_t code, void *arg)
{
    struct fz_stream *s = fz_find(id, 0);

    (void)ss; (void)code; (void)arg;
    if (s)
        fz_drop(s);
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static nghttp2_session_callbacks *cb;
    nghttp2_session *ss;
    nghttp2_option *opt;
    nghttp2_settings_entry set[2] = { { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 4 },
                                      { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, FZ_LIMIT } };
    size_t cut;

    if (cb == NULL) {
        nghttp2_session_callbacks_new(&cb);
        nghttp2_session_callbacks_set_send_callback(cb, fz_send);
        nghttp2_session_callbacks_set_on_begin_headers_callback(cb, fz_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cb, fz_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cb, fz_frame_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(cb, fz_close);
    }
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_closed_streams(opt, 1);
    FZ_CHECK(nghttp2_session_server_new2(&ss, cb, NULL, opt) == 0);
    nghttp2_option_del(opt);
    nghttp2_submit_settings(ss, NGHTTP2_FLAG_NONE, set, 2);
    if (nghttp2_session_mem_recv(ss, (const uint8_t *)H2_PREFACE, H2_PREFACE_LEN) < 0)
        abort();
    cut = size ? data[0] % (size + 1) : 0;
    if (size) {
        data++;
        size--;
        cut = cut > size ? size : cut;
    }
    if (nghttp2_session_mem_recv(ss, data, cut) >= 0)
        nghttp2_session_mem_recv(ss, data + cut, size - cut);
    nghttp2_session_send(ss);
    nghttp2_session_del(ss);
    for (int i = 0; i < FZ_STREAMS; i++)
        if (fz_s[i].used)
            fz_drop(&fz_s[i]);
    return 0;
}
