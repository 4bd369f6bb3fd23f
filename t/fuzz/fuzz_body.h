/*
 * t/fuzz/fuzz_body.h: the forwarding body decoder against the plain one.
 *
 * proxy.c forwards a framed body through http_body_forward, which leaves
 * out the trailer lines a recipient may not merge.  It must frame the
 * body exactly as http_req_body does (the same outcome and payload; only
 * a trailer name it holds back until whole may be left at the end of the
 * input), what it drops must be trailer lines, and what it
 * keeps must be a body of its own framing the same payload.
 */
#ifndef CISTERN_FUZZ_BODY_H
#define CISTERN_FUZZ_BODY_H

#include "worker/http.h"
#include "t/fuzz/fuzz.h"

static void
fz_count(void *arg, const char *p, size_t n)
{
    volatile char c = n ? p[0] ^ p[n - 1] : 0;   /* touch both ends: ASan */
    (void)c;
    *(size_t *)arg += n;
}

/* r0: a parsed head whose body buf[0..len) is not fed yet; rc, fed and
 * payload: what http_req_body made of the same bytes in pieces. */
static void
fz_forward_agrees(const struct http_req *r0, const char *buf, size_t len, int rc,
                  size_t fed, size_t payload)
{
    static struct http_req f, k;
    char *kept = fz_dup((const uint8_t *)buf, len);
    size_t pos = 0, nkept = 0, extra = 0, got = 0, used;
    int frc = HTTP_AGAIN, drop;

    f = *r0;
    while (pos < len) {
        size_t step = 1 + ((unsigned char)buf[pos] % 11) + extra;
        if (step > len - pos)
            step = len - pos;
        used = 0;
        frc = http_body_forward(&f, buf + pos, step, &used, &drop, fz_count, &got);
        FZ_CHECK(used <= step);
        if (drop) {
            /* part of one trailer line, up to its end or the piece's
             * (or a refusal inside it) */
            FZ_CHECK(frc != HTTP_OK);
            FZ_CHECK(frc != HTTP_AGAIN
                     || (used > 0 && memchr(buf + pos, '\n', used - 1) == NULL
                         && (buf[pos + used - 1] == '\n' || used == step)));
        } else {
            memcpy(kept + nkept, buf + pos, used);
            nkept += used;
        }
        pos += used;
        if (frc != HTTP_AGAIN || (used == 0 && step == len - pos))
            break;
        extra = used == 0 ? extra + step : 0;   /* a trailer name held back */
    }
    FZ_CHECK(frc == rc);
    if (rc == HTTP_AGAIN)
        FZ_CHECK(pos <= fed && fed - pos <= 257 && got <= payload);
    if (rc == HTTP_OK) {
        FZ_CHECK(pos == fed && got == payload);
        size_t got2 = 0;
        k = *r0;
        FZ_CHECK(http_req_body(&k, kept, nkept, &used, fz_count, &got2) == HTTP_OK);
        FZ_CHECK(used == nkept && got2 == payload);
    }
    free(kept);
}

#endif
