/*
 * t/fuzz/fuzz_push.c: PUSH, a request whose body is itself a response.
 *
 * Composition as in worker/push.c: the outer request is parsed by
 * http_req_parse and its body fed through http_req_body; its decoded
 * payload goes to a sink that collects the inner head (capped at the
 * response limit), scans it with http_head_scan, parses it with
 * http_resp_parse and then feeds the rest through the inner parser's
 * http_req_body: two http-parser instances, one called from inside the
 * other's callback.  The first input byte picks the outer framing
 * (Content-Length or chunked, in pieces of varying size); the rest is the
 * pushed message.  A second pass runs the input as a raw outer request.
 * Invariants: as fuzz_response for the inner message, and the inner
 * parser never sees more bytes than the outer one delivered.
 */
#include "config.h"
#include "worker/http.h"
#include "t/fuzz/fuzz.h"

enum { P_HEAD, P_BODY, P_FAILED };

struct push {
    int state;
    struct http_req resp;
    char head[1024 + 4];
    size_t hend;
    size_t delivered, inner_used, inner_payload;
};

static const struct http_limits resp_limits = { 1024, 1024 };

static void
inner_sink(void *arg, const char *p, size_t n)
{
    volatile char c = n ? p[0] ^ p[n - 1] : 0;
    (void)c;
    ((struct push *)arg)->inner_payload += n;
}

static void
push_body_bytes(struct push *p, const char *data, size_t n)
{
    while (n > 0 && p->state == P_BODY) {
        size_t used;
        int rc;

        if (p->resp.body_done) {
            p->state = P_FAILED;
            return;
        }
        rc = http_req_body(&p->resp, data, n, &used, inner_sink, p);
        FZ_CHECK(used <= n);
        if (rc != HTTP_OK && rc != HTTP_AGAIN) {
            p->state = P_FAILED;
            return;
        }
        p->inner_used += used;
        data += used;
        n -= used;
        if (used == 0 && rc == HTTP_AGAIN)
            return;
    }
}

static void
push_sink(void *arg, const char *data, size_t n)
{
    struct push *p = arg;
    int rc;

    p->delivered += n;
    if (p->state == P_BODY) {
        push_body_bytes(p, data, n);
        return;
    }
    if (p->state != P_HEAD)
        return;
    size_t limit = resp_limits.head_max, take = n;
    if (p->hend + take > limit + 4)
        take = limit + 4 - p->hend;
    memcpy(p->head + p->hend, data, take);
    p->hend += take;
    rc = http_head_scan(&p->resp, p->head, p->hend, &resp_limits);
    if (rc == HTTP_AGAIN) {
        if (take < n || p->hend > limit)
            p->state = P_FAILED;
        return;
    }
    if (rc != HTTP_OK || p->resp.start != 0) {
        FZ_CHECK(rc == HTTP_OK || p->resp.reason);
        p->state = P_FAILED;
        return;
    }
    FZ_CHECK(p->resp.head_len <= p->hend);
    rc = http_resp_parse(&p->resp, p->head, HTTP_GET);
    if (rc != HTTP_OK || p->resp.status < 200) {
        FZ_CHECK(rc == HTTP_OK || (rc == 502 && p->resp.reason));
        p->state = P_FAILED;
        return;
    }
    FZ_CHECK(!(p->resp.content_length >= 0 && p->resp.chunked));
    p->state = P_BODY;
    if (!p->resp.has_body)
        p->resp.body_done = 1;
    /* the head ended inside this piece: that is where its body starts */
    FZ_CHECK(p->resp.head_len >= p->hend - take);
    size_t head_in_piece = p->resp.head_len - (p->hend - take);
    FZ_CHECK(head_in_piece <= take);
    if (head_in_piece < n)
        push_body_bytes(p, data + head_in_piece, n - head_in_piece);
}

static void
run_push(char *req, size_t len)
{
    static const struct http_limits lim = { 65535, 131072 };
    static struct http_req r;
    static struct push p;
    int rc;

    http_req_reset(&r);
    if (http_head_scan(&r, req, len, &lim) != HTTP_OK)
        return;
    if (http_req_parse(&r, req + r.start) != HTTP_OK || !r.has_body)
        return;
    memset(&p, 0, sizeof(p));
    p.state = P_HEAD;
    http_req_reset(&p.resp);
    size_t pos = r.start + r.head_len, fed = 0;
    rc = HTTP_AGAIN;
    while (pos < len) {
        size_t step = 1 + ((unsigned char)req[pos] % 29), used;
        if (step > len - pos)
            step = len - pos;
        rc = http_req_body(&r, req + pos, step, &used, push_sink, &p);
        if (rc != HTTP_OK && rc != HTTP_AGAIN)
            return;         /* the outer request is malformed: 400 */
        pos += used;
        fed += used;
        FZ_CHECK(p.delivered <= fed);
        if (rc == HTTP_OK)
            break;
        FZ_CHECK(used == step);
    }
    if (rc != HTTP_OK)
        return;
    FZ_CHECK(r.body_done);
    FZ_CHECK(p.inner_used + p.resp.head_len <= p.delivered || p.state != P_BODY);
    /* (a failing inner feed may have passed payload before its error) */
    FZ_CHECK(p.inner_payload <= p.inner_used || p.state == P_FAILED);
    if (p.state == P_BODY && !p.resp.body_done)
        (void)http_body_eof(&p.resp);
    if (p.state == P_BODY && p.resp.body_done && p.resp.content_length >= 0)
        FZ_CHECK((int64_t)p.inner_payload == p.resp.content_length);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* 1: wrap data[1..] in a PUSH request with the chosen framing */
    const uint8_t *msg = data + 1;
    size_t mlen = size - 1, cap = mlen * 12 + 256, n = 0;
    char *req = malloc(cap);
    if (req == NULL)
        abort();
    if (data[0] & 1) {
        n = (size_t)snprintf(req, cap, "PUSH http://m.test/x HTTP/1.1\r\nHost: m.test\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n");
        size_t i = 0, csz = 1 + (data[0] >> 1);
        while (i < mlen) {
            size_t c = mlen - i < csz ? mlen - i : csz;
            n += (size_t)snprintf(req + n, cap - n, "%zx\r\n", c);
            memcpy(req + n, msg + i, c);
            n += c;
            memcpy(req + n, "\r\n", 2);
            n += 2;
            i += c;
            csz = csz * 2 + 1;
        }
        n += (size_t)snprintf(req + n, cap - n, "0\r\n\r\n");
    } else {
        n = (size_t)snprintf(req, cap, "PUSH http://m.test/x HTTP/1.1\r\nHost: m.test\r\n"
                             "Content-Length: %zu\r\n\r\n", mlen);
        memcpy(req + n, msg, mlen);
        n += mlen;
    }
    char *exact = fz_dup((const uint8_t *)req, n);
    free(req);
    run_push(exact, n);
    free(exact);
    /* 2: the input as the whole outer request */
    char *raw = fz_dup(data, size);
    run_push(raw, size);
    free(raw);
    return 0;
}
