/*
 * worker/resp.c: responses Cistern writes itself (errors, redirects), and
 * the cached Date header.
 *
 * Formatting a date costs more than the rest of a small response; the value
 * changes once a second, so it is formatted once a second per worker, from
 * libevent's cached loop time (no syscall).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "worker/worker.h"

static char   resp_date_buf[32];
static time_t resp_date_sec = -1;

const char *
resp_date(void)
{
    static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char mons[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    struct timeval tv;
    struct tm tm;

    if (wk == NULL || wk->base == NULL || event_base_gettimeofday_cached(wk->base, &tv) < 0)
        tv.tv_sec = time(NULL);
    if (tv.tv_sec != resp_date_sec) {
        gmtime_r(&tv.tv_sec, &tm);
        snprintf(resp_date_buf, sizeof(resp_date_buf),
                 "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
                 tm.tm_mday, mons[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
                 tm.tm_min, tm.tm_sec);
        resp_date_sec = tv.tv_sec;
    }
    return resp_date_buf;
}

int
resp_simple(struct conn *c, int status, const char *conn_hdr,
            const char *extra, const char *body, int head_only)
{
    size_t blen = body ? strlen(body) + 2 : 0;
    size_t need = 512 + blen + (extra ? strlen(extra) : 0);
    struct buf *b = &c->cn_out;
    int n;

    conn_count_status(c, status);   /* every answer of ours, counted here */
    if (buf_alloc(b) < 0)
        return -1;
    if (b->size - b->end < need && buf_grow(b, need) < 0)
        return -1;
    /* Cache-Status on every response (RFC 9211): ours are not cacheable
     * answers unless the caller says otherwise. */
    int own_cs = extra && strstr(extra, "Cache-Status:") != NULL;
    n = snprintf(b->data + b->end, b->size - b->end,
                 "HTTP/1.1 %d %s\r\nDate: %s\r\nServer: cistern\r\n"
                 "Content-Type: text/plain; charset=utf-8\r\n"
                 "Content-Length: %zu\r\n%s%s%s\r\n%s%s",
                 status, http_status_text(status), resp_date(), blen,
                 own_cs ? "" : "Cache-Status: cistern; fwd=bypass\r\n",
                 conn_hdr, extra ? extra : "",
                 (body && !head_only) ? body : "",
                 (body && !head_only) ? "\r\n" : "");
    if (n < 0 || (size_t)n >= b->size - b->end)
        return -1;
    b->end += (size_t)n;
    alog_bytes(c, (uint64_t)n);
    return 0;
}

int
resp_body(struct conn *c, int status, const char *conn_hdr, const char *ctype,
          const char *body, size_t blen, int head_only)
{
    struct buf *b = &c->cn_out;
    int n;

    conn_count_status(c, status);
    if (buf_alloc(b) < 0 || buf_grow(b, 512 + blen) < 0)
        return -1;
    n = snprintf(b->data + b->end, b->size - b->end,
                 "HTTP/1.1 %d %s\r\nDate: %s\r\nServer: cistern\r\n"
                 "Content-Type: %s\r\nContent-Length: %zu\r\n"
                 "Cache-Control: no-store\r\nCache-Status: cistern; fwd=bypass\r\n"
                 "%s\r\n",
                 status, http_status_text(status), resp_date(), ctype, blen, conn_hdr);
    if (n < 0 || (size_t)n >= b->size - b->end)
        return -1;
    b->end += (size_t)n;
    if (!head_only) {
        memcpy(b->data + b->end, body, blen);
        b->end += blen;
    }
    alog_bytes(c, (uint64_t)n + (head_only ? 0 : blen));
    return 0;
}

/* "00" to "99": integers are written two digits at a time. */
static const char resp_pairs[200] =
    "00010203040506070809" "10111213141516171819" "20212223242526272829"
    "30313233343536373839" "40414243444546474849" "50515253545556575859"
    "60616263646566676869" "70717273747576777879" "80818283848586878889"
    "90919293949596979899";

char *
fmt_u64(char *p, uint64_t v)
{
    char *end = p + 1;

    if (v < 10) {
        *p = (char)('0' + v);
        return end;
    }
    for (uint64_t x = v; x >= 10; x /= 10)
        end++;
    p = end;
    for (; v >= 100; v /= 100) {
        p -= 2;
        memcpy(p, resp_pairs + v % 100 * 2, 2);
    }
    if (v >= 10)
        memcpy(p - 2, resp_pairs + v * 2, 2);
    else
        p[-1] = (char)('0' + v);
    return end;
}

char *
fmt_i64(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return fmt_u64(p, (uint64_t)0 - (uint64_t)v);
    }
    return fmt_u64(p, (uint64_t)v);
}
