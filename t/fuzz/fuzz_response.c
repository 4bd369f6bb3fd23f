/*
 * t/fuzz/fuzz_response.c: what an origin sends back.
 *
 * The input is the byte stream of an origin connection, read the way
 * proxy.c reads it: http_head_scan with the response limits,
 * http_resp_parse for a GET and for a HEAD request (and a 1xx followed by
 * the final response), then the body through http_req_body in pieces
 * (and http_body_forward: fuzz_body.h) and http_body_eof at the end of
 * the input.  Invariants: accepted heads and
 * fields lie inside the input, status is 100..599, Content-Length and
 * chunked never both set, no body for HEAD/1xx/204/304, a close-delimited
 * body is never keep-alive, a refusal is a 502 with a reason, and
 * Content-Length framing delivers exactly Content-Length bytes.
 */
#include "config.h"
#include "worker/http.h"
#include "t/fuzz/fuzz.h"
#include "t/fuzz/fuzz_body.h"

/* Returns bytes consumed by one response, 0 to stop. */
static size_t
one_response(const char *buf, size_t len, int method, const struct http_limits *lim)
{
    static struct http_req r;
    int rc;

    http_req_reset(&r);
    rc = http_head_scan(&r, buf, len, lim);
    if (rc == HTTP_AGAIN)
        return 0;
    if (rc != HTTP_OK) {
        FZ_CHECK(r.reason != NULL && (rc == 400 || rc == 414 || rc == 431));
        return 0;
    }
    FZ_CHECK(r.head_len > 0 && (uint64_t)r.start + r.head_len <= len);
    for (int i = 0; i < r.nfields; i++)
        FZ_CHECK((uint64_t)r.fields[i].value + r.fields[i].value_len <= r.head_len);
    char *head = fz_dup((const uint8_t *)buf + r.start, r.head_len);
    rc = http_resp_parse(&r, head, method);
    if (rc != HTTP_OK) {
        FZ_CHECK(rc == 502 && r.reason != NULL);
        free(head);
        return 0;
    }
    FZ_CHECK(r.status >= 100 && r.status <= 599);
    FZ_CHECK(!(r.content_length >= 0 && r.chunked));
    FZ_CHECK(!(r.chunked && r.until_close));
    FZ_CHECK(!(r.until_close && r.keep_alive));
    FZ_CHECK((uint64_t)r.phrase + r.phrase_len <= r.head_len);
    if (method == HTTP_HEAD || r.status < 200 || r.status == 204 || r.status == 304)
        FZ_CHECK(r.skip_body && !r.has_body);
    size_t pos = r.start + r.head_len, got = 0, fed = 0;
    if (r.has_body) {
        static struct http_req r0;
        r0 = r;
        rc = HTTP_AGAIN;
        while (pos < len) {
            size_t step = 1 + ((unsigned char)buf[pos] % 17), used = 0;
            if (step > len - pos)
                step = len - pos;
            rc = http_req_body(&r, buf + pos, step, &used, fz_count, &got);
            FZ_CHECK(used <= step);
            pos += used;
            fed += used;
            if (rc != HTTP_AGAIN)
                break;
            FZ_CHECK(used == step);
            FZ_CHECK(got <= fed);
        }
        fz_forward_agrees(&r0, buf + r.start + r.head_len, len - r.start - r.head_len, rc,
                          fed, got);
        if (rc == HTTP_AGAIN) {
            rc = http_body_eof(&r);
            FZ_CHECK(rc == HTTP_OK || rc == 400);
            FZ_CHECK(rc != HTTP_OK || r.until_close);
            free(head);
            return 0;
        }
        if (rc != HTTP_OK) {
            FZ_CHECK(rc == 400);
            free(head);
            return 0;
        }
        FZ_CHECK(r.body_done);
#ifndef FUZZ_KNOWN_BUGS
        /* bug 3: "Transfer-Encoding: gzip, chunked" is close-delimited for
         * http_resp_parse but chunked for http-parser */
        FZ_CHECK(!r.until_close);
#endif
        if (r.content_length >= 0)
            FZ_CHECK((int64_t)got == r.content_length && (int64_t)fed == r.content_length);
    }
    free(head);
    return pos;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct http_limits defaults = { 131072, 131072 };
    static const struct http_limits tiny = { 64, 256 };
    static const int methods[2] = { HTTP_GET, HTTP_HEAD };

    for (int m = 0; m < 2; m++) {
        char *buf = fz_dup(data, size);
        size_t pos = 0;
        /* several responses on one connection (1xx then final, keep-alive) */
        for (int n = 0; n < 4 && pos < size; n++) {
            size_t used = one_response(buf + pos, size - pos, methods[m],
                                       n == 0 && m == 1 ? &tiny : &defaults);
            if (used == 0)
                break;
            pos += used;
        }
        free(buf);
    }
    return 0;
}
