/*
 * worker/push.c: PUSH (ATS semantics) and PURGE.
 *
 * PUSH stores the request body, itself a complete HTTP response, under the
 * request URL after remap: exactly the object a GET to that URL would be
 * served from.  The pushed response is parsed as strictly as an origin's
 * (the same scanner and checks: CL with TE, differing lengths, obs-fold
 * are refused), judged storable by the same rules (no-store, no freshness
 * under required_headers: 400 with the reason), and written through the
 * normal fill path while the request body streams in, so a 10 MB push is
 * never held in memory and is as crash-safe as any fill: the object
 * becomes visible only when the request body ended exactly where the
 * pushed response ends.  201 when the URL was new, 200 when it replaced
 * an object.  Any failure leaves the cache as it was.
 *
 * PURGE removes the object; 200 when something was removed, 404 when
 * nothing was cached.  Neither method ever reaches an origin.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/log.h"
#include "worker/worker.h"

#define PUSH_MAGIC 0x50555348u      /* "PUSH" */

enum push_state { PUSH_HEAD = 1, PUSH_BODY, PUSH_DONE, PUSH_FAILED };

struct push {
    uint32_t          magic;
    enum push_state   state;
    struct buf        head;          /* the pushed response head, growing */
    struct http_req  *resp;         /* its parse (heap: an http_req is large) */
    struct cache_fill *fill;
    const char       *why;           /* reason for the 400 */
    char              why_buf[96];   /* a reason built for this push only */
    int64_t           req_time;
    int               keep_alive;
    size_t            keylen;
    char              key[STORE_KEY_MAX];
};

static void
push_fail(struct push *p, const char *why)
{
    if (p->state != PUSH_FAILED) {
        p->state = PUSH_FAILED;
        p->why = why;
        store_fill_end(&p->fill, 0, NULL);
    }
}

void
push_free(struct req *rq)
{
    struct push *p = rq->rq_push;

    if (p == NULL)
        return;
    store_fill_end(&p->fill, 0, NULL);
    buf_release(&p->head);
    free(p->resp);
    p->magic = 0;
    free(p);
    rq->rq_push = NULL;
}

/* The pushed response's own body bytes (decoded). */
static void
push_sink_body(void *arg, const char *data, size_t n)
{
    struct push *p = arg;

    if (p->state == PUSH_BODY && store_fill_data(&p->fill, data, n) != CACHE_OK)
        push_fail(p, "the pushed object is larger than the cache can hold "
                     "(proxy.config.cache.max_doc_size)");
}

/* Feed bytes that follow the pushed head through its framing. */
static void
push_body_bytes(struct push *p, const char *data, size_t n)
{
    struct http_req *resp = p->resp;

    while (n > 0 && p->state == PUSH_BODY) {
        size_t used;
        int rc;

        if (resp->body_done) {
            push_fail(p, "bytes after the end of the pushed response");
            return;
        }
        rc = http_req_body(resp, data, n, &used, push_sink_body, p);
        if (rc != HTTP_OK && rc != HTTP_AGAIN) {
            push_fail(p, "bad body framing in the pushed response");
            return;
        }
        data += used;
        n -= used;
        if (used == 0 && rc == HTTP_AGAIN)
            return;
    }
}

/* Decoded request-body bytes: the pushed message itself. */
static void
push_sink(void *arg, const char *data, size_t n)
{
    struct push *p = arg;
    struct http_req *resp = p->resp;
    struct buf *h = &p->head;
    int rc;

    if (p->state == PUSH_BODY) {
        push_body_bytes(p, data, n);
        return;
    }
    if (p->state != PUSH_HEAD)
        return;
    /* Collect the head; cap at the response header limit. */
    size_t limit = (size_t)wk->conf->rec.response_header_max_size;
    size_t take = n;
    if (h->end + take > limit + 4)
        take = limit + 4 - h->end;
    if (h->size - h->end < take && buf_grow(h, take) < 0) {
        push_fail(p, "out of memory");
        return;
    }
    memcpy(h->data + h->end, data, take);
    h->end += take;
    rc = http_head_scan(resp, h->data, h->end, &wk->resp_limits);
    if (rc == HTTP_AGAIN) {
        if (take < n || h->end > limit)
            push_fail(p, "the pushed response head is too large");
        return;
    }
    if (rc != HTTP_OK) {
        push_fail(p, "the body is not an HTTP response (bad head)");
        return;
    }
    if (resp->start != 0) {
        push_fail(p, "the body is not an HTTP response");
        return;
    }
    rc = http_resp_parse(resp, h->data, HTTP_GET);
    if (rc != HTTP_OK) {
        push_fail(p, resp->reason ? resp->reason : "invalid pushed response");
        return;
    }
    if (resp->status < 200) {
        push_fail(p, "a pushed response must be final (status 200 or more)");
        return;
    }
    const char *why = store_fill_begin(p->key, p->keylen, resp, NULL, NULL, 0,
                                       p->req_time, NULL, &p->fill);
    if (why) {
        /* Built in this push's own buffer: the message is sent when the
         * request body ends, after other connections may have failed too. */
        snprintf(p->why_buf, sizeof(p->why_buf),
                 "the pushed response is not storable: %s", why);
        push_fail(p, p->why_buf);
        return;
    }
    p->state = PUSH_BODY;
    if (!resp->has_body)
        resp->body_done = 1;
    /* Bytes of this piece beyond the head are body. */
    size_t head_in_piece = resp->head_len - (h->end - take);
    if (head_in_piece < n)
        push_body_bytes(p, data + head_in_piece, n - head_in_piece);
}

int
push_start(struct req *rq, const char *key, size_t keylen, int keep_alive)
{
    struct http_req *r = &rq->r;
    struct timeval now;
    struct push *p;

    if (!r->has_body) {
        rq->syn.status = 400;
        rq->syn.body = "PUSH needs a body: the response to store";
        return -1;
    }
    if ((p = calloc(1, sizeof(*p))) == NULL
        || (p->resp = malloc(sizeof(*p->resp))) == NULL || buf_alloc(&p->head) < 0) {
        if (p) {
            free(p->resp);
            buf_release(&p->head);
            free(p);
        }
        rq->syn.status = 503;
        rq->syn.body = "out of memory";
        rq->syn.close = 1;
        return -1;
    }
    p->magic = PUSH_MAGIC;
    p->state = PUSH_HEAD;
    http_req_reset(p->resp);
    memcpy(p->key, key, keylen);
    p->keylen = keylen;
    p->keep_alive = keep_alive;
    event_base_gettimeofday_cached(wk->base, &now);
    p->req_time = now.tv_sec;
    rq->rq_push = p;
    if (r->expect_continue) {
        buf_alloc(rq->rq_out);
        if (rq->rq_out->size - rq->rq_out->end >= 25) {
            memcpy(rq->rq_out->data + rq->rq_out->end, "HTTP/1.1 100 Continue\r\n\r\n", 25);
            rq->rq_out->end += 25;
        }
    }
    rq->rq_body_owned = 1;
    return 0;
}

int
push_body(struct req *rq)
{
    struct push *p = rq->rq_push;
    struct http_req *r = &rq->r;
    struct buf *in = rq->rq_in;
    size_t used;
    int rc, replaced = 0;

    rc = http_req_body(r, in->data + in->start, in->end - in->start, &used,
                       push_sink, p);
    in->start += used;
    wk->ctr->bytes_in += used;
    if (rc == HTTP_AGAIN)
        return HTTP_AGAIN;
    if (rc != HTTP_OK) {
        push_free(rq);
        return rc;      /* the request itself is malformed: 400 and close */
    }

    /* The request body ended: so must the pushed response. */
    struct http_req *resp = p->resp;
    if (p->state == PUSH_HEAD)
        push_fail(p, "the body is not a complete HTTP response");
    else if (p->state == PUSH_BODY && !resp->body_done
             && http_body_eof(resp) != HTTP_OK)
        push_fail(p, "the pushed response is truncated (its length disagrees)");
    if (p->state == PUSH_BODY && p->fill == NULL)
        push_fail(p, "the pushed object could not be stored");

    int ka = p->keep_alive && !worker_closing();

    rq->syn.result = "TCP_MISS";
    rq->syn.close = !ka;
    if (p->state != PUSH_FAILED) {
        rc = store_fill_end(&p->fill, 1, &replaced);
        if (rc != CACHE_OK) {
            log_info("conn %llu: PUSH %.*s not stored: %s", (unsigned long long)rq->rq_id,
                     (int)p->keylen, p->key, cache_strerror(rc));
            rq->syn.status = 503;
            rq->syn.body = "the cache could not store the object";
        } else {
            log_info("conn %llu: PUSH stored %.*s (%s)", (unsigned long long)rq->rq_id,
                     (int)p->keylen, p->key, replaced ? "replaced" : "new");
            rq->syn.status = replaced ? 200 : 201;
            rq->syn.body = replaced ? "replaced" : "created";
        }
    } else {
        log_info("conn %llu: PUSH %.*s refused: %s", (unsigned long long)rq->rq_id,
                 (int)p->keylen, p->key, p->why);
        wk->ctr->bad_requests++;
        rq->syn.status = 400;
        rq->syn.body = p->why;      /* the push lives until DONE */
    }
    rq->rq_body_owned = 0;
    return HTTP_OK;
}
