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
    struct timeval tv;

    if (wk == NULL || wk->base == NULL || event_base_gettimeofday_cached(wk->base, &tv) < 0)
        tv.tv_sec = time(NULL);
    if (tv.tv_sec != resp_date_sec) {
        fmt_http_date(tv.tv_sec, resp_date_buf);
        resp_date_sec = tv.tv_sec;
    }
    return resp_date_buf;
}

/* Our Server line (proxy.config.http.response_server_enabled and
 * response_server_str: via.c), or "". */
static const char *
resp_server(void)
{
    return wk ? wk->server_hdr : "";
}

/* ------------------------------------------------------------------ */
/* Counting: every response to a client is counted once, by class (the
 * access log's status and /_stats's counters). */

const char *
resp_connection_hdr(int minor, int keep_alive)
{
    if (!keep_alive)
        return "Connection: close\r\n";
    return minor == 0 ? "Connection: keep-alive\r\n" : "";
}

/* The response counter of status's class. */
static uint64_t *
resp_status_ctr(int status)
{
    struct shm_counters *ctr = wk->ctr;

    switch (status / 100) {
    case 1: return &ctr->resp_1xx;
    case 2: return &ctr->resp_2xx;
    case 3: return &ctr->resp_3xx;
    case 4: return &ctr->resp_4xx;
    default: return &ctr->resp_5xx;
    }
}

void
resp_count(struct req *rq, int status)
{
    if (rq->rq_bg)
        return;     /* a background revalidation answers no client */
    alog_status(rq, status);
    if (rq->rq_ttfb == 0)
        rq->rq_ttfb = metrics_now();
    (*resp_status_ctr(status))++;
    if (rq)
        rq->counted = status;
}

void
resp_count_interim(struct req *rq)
{
    if (!rq->rq_bg)
        wk->ctr->resp_1xx++;
}

void
resp_uncount(struct req *rq)
{
    if (rq && rq->counted) {
        (*resp_status_ctr(rq->counted))--;
        rq->counted = 0;
    }
}

int
resp_simple(struct req *rq, int status, const char *conn_hdr,
            const char *extra, const char *body, int head_only)
{
    size_t blen = body ? strlen(body) + 2 : 0;
    size_t need = 512 + blen + (extra ? strlen(extra) : 0) + strlen(resp_server());
    struct buf *b = rq->rq_out;
    int n;

    resp_count(rq, status);   /* every answer of ours, counted here */
    if (buf_alloc(b) < 0)
        return -1;
    if (b->size - b->end < need && buf_grow(b, need) < 0)
        return -1;
    /* Cache-Status on every response (RFC 9211): ours are not cacheable
     * answers unless the caller says otherwise. */
    int own_cs = extra && strstr(extra, "Cache-Status:") != NULL;
    n = snprintf(b->data + b->end, b->size - b->end,
                 "HTTP/1.1 %d %s\r\nDate: %s\r\n%s"
                 "Content-Type: text/plain; charset=utf-8\r\n"
                 "Content-Length: %zu\r\n%s%s%s\r\n%s%s",
                 status, http_status_text(status), resp_date(), resp_server(), blen,
                 own_cs ? "" : "Cache-Status: cistern; fwd=bypass\r\n",
                 conn_hdr, extra ? extra : "",
                 (body && !head_only) ? body : "",
                 (body && !head_only) ? "\r\n" : "");
    if (n < 0 || (size_t)n >= b->size - b->end)
        return -1;
    {
        const char *h = b->data + b->end;
        const char *e = memmem(h, (size_t)n, "\r\n\r\n", 4);
        alog_head(rq, h, e ? (size_t)(e - h) + 4 : (size_t)n);
    }
    b->end += (size_t)n;
    alog_bytes(rq, (uint64_t)n);
    return 0;
}

int
resp_body(struct req *rq, int status, const char *conn_hdr, const char *ctype,
          const char *body, size_t blen, int head_only)
{
    struct buf *b = rq->rq_out;
    int n;

    resp_count(rq, status);
    if (buf_alloc(b) < 0 || buf_grow(b, 512 + blen + strlen(resp_server())) < 0)
        return -1;
    n = snprintf(b->data + b->end, b->size - b->end,
                 "HTTP/1.1 %d %s\r\nDate: %s\r\n%s"
                 "Content-Type: %s\r\nContent-Length: %zu\r\n"
                 "Cache-Control: no-store\r\nCache-Status: cistern; fwd=bypass\r\n"
                 "%s\r\n",
                 status, http_status_text(status), resp_date(), resp_server(), ctype, blen,
                 conn_hdr);
    if (n < 0 || (size_t)n >= b->size - b->end)
        return -1;
    alog_head(rq, b->data + b->end, (size_t)n);
    b->end += (size_t)n;
    if (!head_only) {
        memcpy(b->data + b->end, body, blen);
        b->end += blen;
    }
    alog_bytes(rq, (uint64_t)n + (head_only ? 0 : blen));
    return 0;
}
