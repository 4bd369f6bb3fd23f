/*
 * worker/h2.c: HTTP/2 to clients, on nghttp2 (issue 24).
 *
 * A connection becomes HTTP/2 when TLS's ALPN chose h2 or a cleartext
 * h2c port read the client preface (conn.c, conn_h2); conn.c then hands
 * the struct conn over (h2_attach): this file takes its read event, adds
 * a write event, a timer and a deferred "work" event, and runs one
 * nghttp2 server session on it.  The socket, TLS, the peer, the ids and
 * the counts stay the connection's; conn_close() ends both (h2_free).
 *
 * A stream is a request whose owner is not a connection (DESIGN.md,
 * "HTTP/2"): struct h2s owns one struct req, lends it three buffers --
 * the HTTP/1.1 head written from the HEADERS (h2head.c; r.base points
 * into it), the request body (rq_in: DATA as it came, chunk-framed when
 * the client gave no content-length) and the answer (rq_out) -- and
 * provides the owner ops.  The steps run unchanged: hits, misses,
 * collapsing, read-while-writer (a stream that caught up with the fill
 * it joined defers its DATA until rww_wake lends more), PUSH, PURGE, ACLs, the access log (with HTTP/2 as the
 * protocol) and Cache-Status.  The answer comes back as HTTP/1.1 text in
 * rq_out, and the body after it or lent (rq_body: a hit's mapping, the
 * origin's input buffer); its head becomes HEADERS (hop-by-hop fields
 * out, names lowercased), and its body DATA frames that nghttp2 asks us
 * to send ourselves (NGHTTP2_DATA_FLAG_NO_COPY): h2_send_data writes the
 * 9-byte frame header and the lent bytes with one writev, so on h2c a
 * hit's body goes from the mapping to the socket without a copy (over TLS
 * the frame is staged in cn_out first: see h2_cb_send_data).  A chunked origin answer is de-chunked for the stream (proxy.c,
 * up_decode), as for an HTTP/1.0 client.
 *
 * Nothing is called from inside another: the owner ops (flush, moved,
 * body_resume) only mark the stream and wake the work event; h2_send
 * pumps the marked streams (the same order of work as conn_flush: the
 * answer's head, its lent body, then the origin transaction again), then
 * runs nghttp2_session_send.  Streams are freed only in nghttp2's
 * on_stream_close, which runs inside session_send / mem_recv, never
 * inside a pump.
 *
 * Flow control and back-pressure:
 *   - response DATA: nghttp2 keeps the client's windows; a stream with
 *     nothing to send defers, so a slow stream holds only its own
 *     buffers and its origin transaction (proxy.c stops reading the
 *     origin while up_in is full), never the others or the fill;
 *   - our output: frames are written as they come; when the socket does
 *     not take them, at most H2_OUT_HIGH bytes wait in cn_out and no
 *     more frames are made, nor input read, until it drains;
 *   - request DATA: automatic WINDOW_UPDATE is off; the bytes given back
 *     are those the transaction has taken (or we dropped), so a client
 *     can have at most initial_window_size_in bytes per stream in us;
 *     the connection's window is the sum of the streams'
 *     (flow_control.policy_in 1, h2_conn_window), so it throttles no
 *     stream and lets in nothing the stream windows do not.
 *
 * Defences (counted per minute, ATS's keys): RST_STREAM (rapid reset;
 * with the resets a client's stream errors make us send: MadeYouReset),
 * SETTINGS, PING (ACKs too), PRIORITY (PRIORITY_UPDATE too), CONTINUATION
 * and WINDOW_UPDATE floods, one of DATA frames that carry nothing
 * (max_empty_frames_per_minute) and one of frames of unknown types
 * (max_unknown_frames_per_minute) close the connection with
 * GOAWAY(ENHANCE_YOUR_CALM); a connection whose streams end in errors
 * it caused too often (stream_error_rate_threshold) drains, or past
 * twice the rate is closed the same way; a header list past
 * max_header_list_size (an HPACK bomb) is kept no further and answered
 * 431; streams past max_concurrent_streams_in are refused by nghttp2;
 * no_activity_timeout_in ends a connection that neither sends requests
 * or DATA nor takes DATA (a zero-window stall), unless a stream waits on
 * its origin; and each stream has HTTP/1.1's client timers
 * (h2_streams_tick): transaction_no_activity_timeout_in while it waits
 * on its client (the rest of its request body: 408; window for its
 * answer: RST_STREAM CANCEL), transaction_active_timeout_in from its
 * start, so no stream outlives them because others keep the connection
 * busy.  The drain on reload sends GOAWAY and lets the open streams
 * finish.
 *
 * Protocol rules are nghttp2's, but for three it leaves out by choice,
 * checked in h2_cb_begin_frame: PRIORITY on stream 0, HEADERS on a
 * stream id the client skipped (h2_sid_down) or on one it ended
 * (h2_sid_done); and two it drops before any callback, checked in
 * h2_frame_check on frame headers followed as the input goes to nghttp2
 * (h2_recv): DATA on a stream the client ended, and a PRIORITY making a
 * stream depend on itself (its payload is skipped once we said
 * NO_RFC7540_PRIORITIES).
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "shm/log.h"
#include "worker/worker.h"
#include "worker/h2.h"

#define H2C_MAGIC     0x48324343u      /* "H2CC" */
#define H2S_MAGIC     0x48325353u      /* "H2SS" */
#define H2_DATA_MAX   16384            /* DATA payload per frame we send */
#define H2_OUT_HIGH   (64 * 1024)      /* cn_out bytes waiting: stop */
#define H2_READ_MAX   16384
#define H2_LINGER_MS  2000
#define H2_NV_MAX     (HTTP_MAX_FIELDS + 2)
#define H2_DONE_MAX   16               /* closed streams remembered */
struct h2c;

/* One stream: the owner of one request. */
struct h2s {
    uint32_t         magic;
    int32_t          id;
    struct h2c      *h;
    struct req      *rq;
    struct h2_head   hd;              /* HEADERS as they come */
    struct buf       head;            /* the HTTP/1.1 head (r.base) */
    struct buf       in;              /* the request body: rq_in */
    struct buf       out;             /* the answer: rq_out */
    struct h2s      *next, *prev;
    int64_t          clen;            /* answer body bytes still to send
                                         (its Content-Length), -1: unknown */
    uint64_t         unacked;         /* DATA bytes not given back yet */
    int64_t          born;            /* the request's start (ms) */
    int64_t          stall;           /* first seen waiting on its client
                                         (ms), 0: not waiting */
    unsigned         started:1;       /* the request runs */
    unsigned         body:1;          /* a request body comes */
    unsigned         body_end:1;      /* ... and has ended */
    unsigned         chunked:1;       /* we frame it chunked */
    unsigned         head_sent:1;     /* HEADERS submitted */
    unsigned         eof:1;           /* the answer is complete */
    unsigned         kick:1;          /* to pump */
    unsigned         dead:1;          /* reset: nothing more */
    unsigned         client_rst:1;    /* the client reset it */
};

/* One HTTP/2 connection. */
struct h2c {
    uint32_t              magic;
    struct conn          *c;
    const struct h2_conn_ops *ops;
    nghttp2_session      *ss;
    struct event          wev;        /* the socket takes output again */
    struct event          work;       /* marked streams to pump */
    struct event          tmr;        /* no_activity_timeout_in, linger */
    struct h2s           *streams;
    unsigned              nstreams;
    unsigned              kicked:1;   /* some stream is marked */
    unsigned              in_send:1;  /* inside h2_send: no re-entry */
    unsigned              wev_on:1;
    unsigned              goaway:1;   /* GOAWAY submitted: no new streams */
    unsigned              calm:1;     /* a flood: closing */
    unsigned              lingering:1;
    unsigned              eof:1;      /* the client closed its side */
    unsigned              draining:1; /* the worker drains: GOAWAY once quiet */
    unsigned              read_off:1; /* reading stopped: output backed up */
    unsigned              ticking:1;  /* tmr armed for the streams' timers */
    unsigned              calm_drain:1; /* draining for its stream error rate */
    int64_t               active;     /* last request, DATA in or out (ms) */
    int64_t               minute;     /* the counters' minute (ms) */
    unsigned              n_rst, n_settings, n_setvals, n_ping, n_prio;
    unsigned              n_cont, n_wu, n_data, n_empty, n_unknown;
    unsigned              n_opened, n_errs; /* streams it opened, stream
                                         errors it caused (h2_stream_error) */
    int32_t               last_sid;   /* the highest stream the client opened */
    int32_t               gap_lo, gap_hi; /* the ids it skipped last: closed unused */
    int32_t               done[H2_DONE_MAX]; /* streams the client ended, closed */
    unsigned              ndone;
    /* the input's frame headers, followed for h2_frame_check */
    uint32_t              fr_skip;    /* bytes nghttp2 takes before the next header */
    uint8_t               fr_hd[13];  /* a header, and a PRIORITY's dependency
                                         or a padded DATA's pad length */
    uint8_t               fr_have, fr_need;
};

static struct pool h2c_pool, h2s_pool;
static int         h2_pools_ok;
static nghttp2_session_callbacks *h2_cbs;

/* ------------------------------------------------------------------ */
/* nghttp2's memory: its stream objects, header blocks, outbound items
 * and buffers come from size classes kept on free lists (struct pool,
 * like every fixed-size object of a worker), so once a few connections
 * have run, a stream costs no malloc at all.  Each block starts with a
 * 16-byte header: its class (H2M_BIG: a plain malloc) and its size. */
#define H2M_BIG 0xffu
struct h2m_head {
    uint32_t cls;
    uint32_t pad;
    size_t   size;
};
/* block sizes, header included: steps of 1.5 and 2 over the powers of
 * two nghttp2 asks for (its HPACK rings are 1 KiB, its frame buffer 16 KiB
 * and a few bytes), so an idle session is rounded up by little */
static const size_t h2m_size[] = { 48, 80, 112, 144, 208, 272, 400, 528, 784, 1040,
                                   1552, 2064, 3088, 4112, 6160, 8208, 12304,
                                   16384 + 64, 32768 + 64 };
#define H2M_NCLASS (sizeof(h2m_size) / sizeof(h2m_size[0]))
static struct pool h2m_pool[H2M_NCLASS];

static void *
h2m_malloc(size_t n, void *arg)
{
    struct h2m_head *b = NULL;
    unsigned k;

    (void)arg;
    for (k = 0; k < H2M_NCLASS && h2m_size[k] < n + sizeof(*b); k++)
        ;
    if (k < H2M_NCLASS)
        b = pool_get(&h2m_pool[k]);
    else if (n < SIZE_MAX - sizeof(*b))
        b = malloc(n + sizeof(*b));
    if (b == NULL)
        return NULL;
    b->cls = k < H2M_NCLASS ? k : H2M_BIG;
    b->size = n;
    return b + 1;
}

static void
h2m_free(void *p, void *arg)
{
    struct h2m_head *b;

    (void)arg;
    if (p == NULL)
        return;
    b = (struct h2m_head *)p - 1;
    if (b->cls == H2M_BIG)
        free(b);
    else
        pool_put(&h2m_pool[b->cls], b);
}

static void *
h2m_calloc(size_t nmemb, size_t size, void *arg)
{
    void *p;

    if (size && nmemb > SIZE_MAX / size)
        return NULL;
    if ((p = h2m_malloc(nmemb * size, arg)) != NULL)
        memset(p, 0, nmemb * size);
    return p;
}

static void *
h2m_realloc(void *p, size_t n, void *arg)
{
    struct h2m_head *b;
    void *q;

    if (p == NULL)
        return h2m_malloc(n, arg);
    b = (struct h2m_head *)p - 1;
    if (b->cls != H2M_BIG && n + sizeof(*b) <= h2m_size[b->cls]) {
        b->size = n;
        return p;
    }
    if ((q = h2m_malloc(n, arg)) == NULL)
        return NULL;
    memcpy(q, p, b->size < n ? b->size : n);
    h2m_free(p, arg);
    return q;
}

static nghttp2_mem h2m = { NULL, h2m_malloc, h2m_free, h2m_calloc, h2m_realloc };

static void h2_send(struct h2c *h);
static void h2_close(struct h2c *h);
static void h2_tick_start(struct h2c *h);
static void h2_drain_start(struct h2c *h);

static int64_t
h2_now_ms(void)
{
    struct timeval now;

    event_base_gettimeofday_cached(wk->base, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
}

/* ------------------------------------------------------------------ */
/* Streams: the owner ops */

static struct h2s *
h2s_of(const struct req *rq)
{
    struct h2s *s = rq->rq_owner;

    magic_check(s->magic, H2S_MAGIC);
    return s;
}

static void
h2_on_work(evutil_socket_t fd, short what, void *arg)
{
    struct h2c *h = arg;

    (void)fd; (void)what;
    magic_check(h->magic, H2C_MAGIC);
    h2_send(h);
}

/* Mark s to be pumped; the work event does it (never from inside). */
static void
h2s_kick(struct h2s *s)
{
    struct h2c *h = s->h;

    s->kick = 1;
    h->kicked = 1;
    if (!h->in_send)
        event_active(&h->work, EV_TIMEOUT, 1);
}

static void
h2s_moved(struct req *rq)
{
    h2s_kick(h2s_of(rq));
}

static int
h2s_flush(struct req *rq)
{
    h2s_kick(h2s_of(rq));
    return 0;
}

static void
h2s_body_resume(struct req *rq)
{
    h2s_kick(h2s_of(rq));
}

static void
h2s_revalidate(struct req *rq, const char *key, size_t keylen)
{
    struct h2s *s = h2s_of(rq);

    if (s->h->ops->revalidate)
        s->h->ops->revalidate(rq, key, keylen);
}

static const struct sockaddr *
h2s_local(struct req *rq)
{
    struct conn *c = h2s_of(rq)->h->c;
    socklen_t sl = sizeof(c->cn_local);

    if (!c->cn_local_ok && getsockname(c->cn_fd, &c->cn_local.sa, &sl) == 0
        && sl <= sizeof(c->cn_local))
        c->cn_local_ok = 1;
    return c->cn_local_ok ? &c->cn_local.sa : NULL;
}

static const struct req_owner_ops h2s_ops = {
    .moved = h2s_moved,
    .flush = h2s_flush,
    .body_resume = h2s_body_resume,
    .revalidate = h2s_revalidate,
    .local = h2s_local,
};

/* ------------------------------------------------------------------ */
/* Streams: life */

static struct h2s *
h2s_new(struct h2c *h, int32_t id)
{
    struct h2s *s = pool_get(&h2s_pool);

    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->magic = H2S_MAGIC;
    s->id = id;
    s->h = h;
    s->clen = -1;
    h2_head_init(&s->hd);
    s->next = h->streams;
    if (h->streams)
        h->streams->prev = s;
    h->streams = s;
    h->nstreams++;
    return s;
}

static void
h2s_free(struct h2c *h, struct h2s *s)
{
    if (s->rq) {
        if (s->rq->rq_step != REQ_DONE)
            req_abort(s->rq);       /* cut short: still logged */
        req_free(s->rq);
        s->rq = NULL;
    }
    h2_head_release(&s->hd);
    buf_release(&s->head);
    buf_release(&s->in);
    buf_release(&s->out);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    h->nstreams--;
    s->magic = 0;
    pool_put(&h2s_pool, s);
}

/* Reset s (the answer cannot be completed); its request ends when
 * nghttp2 closes the stream. */
static void
h2s_reset(struct h2c *h, struct h2s *s, uint32_t code)
{
    if (s->dead)
        return;
    s->dead = 1;
    if (s->rq && s->rq->rq_step != REQ_DONE)
        req_abort(s->rq);
    nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, s->id, code);
}

/* Give DATA bytes back to the client's windows. */
static void
h2s_ack(struct h2c *h, struct h2s *s)
{
    if (s->unacked) {
        nghttp2_session_consume(h->ss, s->id, (size_t)s->unacked);
        s->unacked = 0;
    }
}

/* ------------------------------------------------------------------ */
/* The request: the head, then the steps */

static void
h2s_refuse(struct h2s *s, int status, const char *why)
{
    req_refuse(s->rq, status, why);
}

/* HEADERS are whole: write the HTTP/1.1 head, parse it, run the steps. */
static void
h2s_start(struct h2c *h, struct h2s *s, int end_stream)
{
    struct conn *c = h->c;
    struct req *rq;
    const char *why = NULL;
    int rc;

    if ((rq = req_new(s, &h2s_ops)) == NULL) {
        h2s_reset(h, s, NGHTTP2_REFUSED_STREAM);
        return;
    }
    s->rq = rq;
    rq->rq_in = &s->in;
    rq->rq_out = &s->out;
    rq->rq_id = c->cn_id;
    rq->rq_peer = &c->cn_peer.sa;
    rq->rq_tls = c->cn_tls != NULL;
    rq->rq_h2 = 1;
    event_base_gettimeofday_cached(wk->base, &rq->rq_start);
    s->started = 1;
    s->body = !end_stream;
    s->body_end = end_stream;
    s->chunked = s->body && !s->hd.has_cl;
    h->active = s->born = h2_now_ms();
    h2_tick_start(h);
    if (s->hd.over) {
        h2_head_release(&s->hd);
        h2s_refuse(s, 431, "HTTP/2 header list larger than max_header_list_size");
        h2s_kick(s);
        return;
    }
    rc = h2_head_build(&s->hd, s->body, &s->head, &why);
    h2_head_release(&s->hd);
    if (rc != 0) {
        h2s_refuse(s, rc < 0 ? 503 : rc, rc < 0 ? "out of memory" : why);
        h2s_kick(s);
        return;
    }
    rc = http_head_scan(&rq->r, s->head.data, s->head.end, &wk->limits);
    if (rc == HTTP_AGAIN)
        rc = 400;
    if (rc == HTTP_OK)
        rc = http_req_parse(&rq->r, s->head.data + rq->r.start);
    if (rc != HTTP_OK)
        h2s_refuse(s, rc, rq->r.reason ? rq->r.reason : "bad request head");
    else
        req_run(rq);
    h2s_kick(s);
}

/* DATA of the request body into rq_in (framed chunked when we said so). */
static int
h2s_body_data(struct h2s *s, const uint8_t *p, size_t n)
{
    struct buf *in = &s->in;
    int err = 0;

    if (in->data == NULL && buf_alloc(in) < 0)
        return -1;
    if (in->start == in->end)
        in->start = in->end = 0;
    if (s->chunked) {
        char hex[24];
        int k = 0;
        for (size_t v = n; v; v >>= 4)
            k++;
        for (int i = 0; i < k; i++)
            hex[k - 1 - i] = "0123456789abcdef"[(n >> (4 * i)) & 15];
        hex[k++] = '\r';
        hex[k++] = '\n';
        err |= buf_append(in, hex, (size_t)k);
    }
    err |= buf_append(in, (const char *)p, n);
    if (s->chunked)
        err |= buf_lit(in, "\r\n");
    return err;
}

/* The request body has ended (END_STREAM). */
static int
h2s_body_fin(struct h2s *s)
{
    s->body_end = 1;
    if (!s->chunked)
        return 0;
    if (s->in.data == NULL && buf_alloc(&s->in) < 0)
        return -1;
    return buf_lit(&s->in, "0\r\n\r\n");
}

/* Hand the request body to whatever reads it: the PUSH, the origin
 * transaction; dropped once the request is answered without it. */
static void
h2s_feed(struct h2c *h, struct h2s *s)
{
    struct req *rq = s->rq;
    struct buf *in = &s->in;
    int rc;

    if (!s->body)
        return;
    if (rq->rq_push && (in->end > in->start || s->body_end)) {
        rc = push_body(rq);
        if (rc == HTTP_OK)
            req_answer_ours(rq);
        else if (rc != HTTP_AGAIN && !s->head_sent)
            h2s_refuse(s, rc, rq->r.reason ? rq->r.reason : "bad request body");
        else if (rc != HTTP_AGAIN)
            h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
    } else if (rq->rq_up && rq->rq_body_owned && in->end > in->start) {
        rc = proxy_client_body(rq);
        if (rc != HTTP_OK && rc != HTTP_AGAIN) {
            if (rq->rq_up && rq->rq_up->up_state == UP_BODY) {
                h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
                return;
            }
            proxy_abort(rq);
            h2s_refuse(s, rc, rq->r.reason ? rq->r.reason : "bad request body");
        }
    } else if (rq->rq_step == REQ_DONE || rq->rq_step == REQ_HIT) {
        in->start = in->end;        /* answered without it: dropped */
    }
    if (in->start == in->end) {
        in->start = in->end = 0;
        h2s_ack(h, s);
    }
}

/* ------------------------------------------------------------------ */
/* The answer: HTTP/1.1 head -> HEADERS, body -> DATA */

static ssize_t h2s_read(nghttp2_session *ss, int32_t id, uint8_t *buf, size_t len,
                        uint32_t *flags, nghttp2_data_source *src, void *arg);

/* Bytes ready to go as DATA: what follows the head in rq_out, else the
 * body lent.  *p: where they are. */
static size_t
h2s_avail(const struct h2s *s, const char **p)
{
    const struct buf *o = &s->out;

    if (o->end > o->start) {
        *p = o->data + o->start;
        return o->end - o->start;
    }
    *p = s->rq->rq_body;
    return s->rq->rq_body_len;
}

/* n of those bytes are gone (sent, or beyond the answer's length). */
static void
h2s_take(struct h2s *s, size_t n)
{
    struct buf *o = &s->out;
    struct req *rq = s->rq;

    if (s->clen >= 0)
        s->clen -= (int64_t)n < s->clen ? (int64_t)n : s->clen;
    if (o->end > o->start) {
        o->start += n;
        if (o->start == o->end)
            o->start = o->end = 0;
        return;
    }
    rq->rq_body += n;
    rq->rq_body_len -= n;
    if (rq->rq_up)
        proxy_client_sent(rq, n);
    else if (rq->rq_body_len == 0)
        store_body_more(rq);    /* a large hit's next extent */
}

static int
h2_lc_names(const struct http_req *resp, nghttp2_nv *nv, int *nnv, char *scratch,
            size_t room)
{
    size_t used = 0;

    for (int i = 0; i < resp->nfields; i++) {
        const struct http_field *f = &resp->fields[i];

        if (http_field_hop(resp, i) || f->id == HTTP_F_TRANSFER_ENCODING
            || f->id == HTTP_F_CONNECTION || f->id == HTTP_F_KEEP_ALIVE
            || f->id == HTTP_F_PROXY_CONNECTION || f->id == HTTP_F_UPGRADE)
            continue;
        if (used + f->name_len > room || *nnv >= H2_NV_MAX)
            return -1;
        for (uint32_t k = 0; k < f->name_len; k++) {
            char ch = resp->base[f->name + k];
            scratch[used + k] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        }
        nv[*nnv].name = (uint8_t *)scratch + used;
        nv[*nnv].namelen = f->name_len;
        nv[*nnv].value = (uint8_t *)resp->base + f->value;
        nv[*nnv].valuelen = f->value_len;
        /* Date and Age change every second: indexing them would only
         * churn the HPACK table (and nghttp2's memory) */
        nv[*nnv].flags = f->id == HTTP_F_DATE || f->id == HTTP_F_AGE
                         ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE;
        (*nnv)++;
        used += f->name_len;
    }
    return 0;
}

/* The answer's head is in rq_out: submit it as HEADERS.  1: an interim
 * head was skipped (call again); 0: submitted; -1: unusable. */
static int
h2s_head(struct h2c *h, struct h2s *s)
{
    static const struct http_limits lim = { 65536, 1 << 20 };
    static char scratch[16384];
    static nghttp2_nv nv[H2_NV_MAX];
    struct buf *o = &s->out;
    struct http_req *resp;
    char status[4];
    int nnv = 0, rc;

    if ((resp = pool_get(&wk->head_pool)) == NULL)
        return -1;
    http_req_reset(resp);
    rc = http_head_scan(resp, o->data + o->start, o->end - o->start, &lim);
    if (rc == HTTP_OK)
        rc = http_resp_parse(resp, o->data + o->start + resp->start, s->rq->r.method);
    if (rc != HTTP_OK || resp->status > 999 || (resp->chunked && !resp->skip_body)) {
        pool_put(&wk->head_pool, resp);
        return -1;
    }
    if (resp->status < 200) {
        o->start += resp->start + resp->head_len;
        pool_put(&wk->head_pool, resp);
        return 1;   /* 1xx: the client has no use for them here */
    }
    status[0] = (char)('0' + resp->status / 100);
    status[1] = (char)('0' + resp->status / 10 % 10);
    status[2] = (char)('0' + resp->status % 10);
    nv[0].name = (uint8_t *)":status";
    nv[0].namelen = 7;
    nv[0].value = (uint8_t *)status;
    nv[0].valuelen = 3;
    nv[0].flags = NGHTTP2_NV_FLAG_NONE;
    nnv = 1;
    if (h2_lc_names(resp, nv, &nnv, scratch, sizeof(scratch)) < 0) {
        pool_put(&wk->head_pool, resp);
        return -1;
    }
    s->clen = resp->skip_body ? 0 : resp->content_length;
    nghttp2_data_provider dp = { .source.ptr = s, .read_callback = h2s_read };
    rc = nghttp2_submit_response(h->ss, s->id, nv, (size_t)nnv, &dp);
    o->start += resp->start + resp->head_len;
    if (o->start == o->end)
        o->start = o->end = 0;
    pool_put(&wk->head_pool, resp);
    if (rc != 0)
        return -1;
    s->head_sent = 1;
    return 0;
}

/* Move s along, as conn_flush moves a connection's answer: its head,
 * then its body, then the origin transaction for more. */
static void
h2s_pump(struct h2c *h, struct h2s *s)
{
    struct req *rq = s->rq;
    const char *p;

    s->kick = 0;
    if (rq == NULL || s->dead || !s->started)
        return;
    for (int guard = 0; guard < 64; guard++) {
        if (rq->rq_abort) {
            h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
            return;
        }
        h2s_feed(h, s);
        if (s->dead)
            return;
        if (!s->head_sent && s->out.end > s->out.start) {
            int rc = h2s_head(h, s);
            if (rc < 0) {
                h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
                return;
            }
            continue;
        }
        if (s->head_sent && h2s_avail(s, &p) > 0) {
            nghttp2_session_resume_data(h->ss, s->id);
            return;     /* sending it kicks us again */
        }
        if (rq->rq_up == NULL) {
            req_sent_all(rq);       /* a hit's body is out: DONE */
            if (rq->rq_step == REQ_DONE && !s->eof) {
                if (!s->head_sent) {
                    h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
                    return;
                }
                s->eof = 1;
                nghttp2_session_resume_data(h->ss, s->id);
            }
            return;
        }
        switch (proxy_pump(rq)) {
        case WK_MORE:
        case WK_DONE:
            continue;
        case WK_ABORT:
            h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
            return;
        case WK_WAIT:
            return;
        }
    }
    h2s_kick(s);    /* more later: others get their turn */
}

/* nghttp2 asks for s's next DATA: we say how much, it calls
 * h2_send_data to write it (no copy). */
static ssize_t
h2s_read(nghttp2_session *ss, int32_t id, uint8_t *buf, size_t len,
         uint32_t *flags, nghttp2_data_source *src, void *arg)
{
    struct h2s *s = src->ptr;
    const char *p;
    size_t n;

    (void)ss; (void)id; (void)buf; (void)arg;
    magic_check(s->magic, H2S_MAGIC);
    if (s->rq == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    while ((n = h2s_avail(s, &p)) > 0 && s->clen == 0)
        h2s_take(s, n);     /* past the answer's length (a body's CRLF
                               an HTTP/1.x client reads as framing) */
    if (n > 0) {
        if (n > len)
            n = len;
        if (n > H2_DATA_MAX)
            n = H2_DATA_MAX;
        if (s->clen >= 0 && (int64_t)n > s->clen)
            n = (size_t)s->clen;
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
        return (ssize_t)n;
    }
    if (s->eof) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    if (s->rq->rq_up || s->rq->rq_step == REQ_HIT)
        h2s_kick(s);        /* the pump refills */
    return NGHTTP2_ERR_DEFERRED;
}

/* ------------------------------------------------------------------ */
/* Output */

/* Write what waits in cn_out.  0: all out; 1: the socket is full; -1:
 * the connection is broken. */
static int
h2_flush_out(struct h2c *h)
{
    struct conn *c = h->c;
    struct buf *o = &c->cn_out;

    while (o->end > o->start) {
        size_t n = o->end - o->start;
        ssize_t k;

        if (c->cn_tls)
            k = tls_conn_write(c, o->data + o->start, n, NULL, 0);
        else
            k = write(c->cn_fd, o->data + o->start, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
        }
        wk->ctr->bytes_out += (uint64_t)k;
        o->start += (size_t)k;
    }
    o->start = o->end = 0;
    return 0;
}

/* nghttp2's frames other than our DATA: queued in cn_out (a few bytes
 * each; written by h2_flush_out, or ahead of the next DATA frame). */
static ssize_t
h2_cb_send(nghttp2_session *ss, const uint8_t *data, size_t len, int flags,
           void *arg)
{
    struct h2c *h = arg;
    struct buf *o = &h->c->cn_out;

    (void)ss; (void)flags;
    if (o->end - o->start > H2_OUT_HIGH)
        return NGHTTP2_ERR_WOULDBLOCK;
    if ((o->data == NULL && buf_alloc(o) < 0) || buf_append(o, (const char *)data, len) < 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return (ssize_t)len;
}

/* A DATA frame: its header and the stream's bytes (in rq_out, or lent:
 * a hit's mapping, the origin's buffer) in one writev with whatever
 * frames wait before it (over TLS: appended to cn_out, then flushed).  What the socket does not take is copied to
 * cn_out, so a frame is always whole once this returns 0. */
static int
h2_cb_send_data(nghttp2_session *ss, nghttp2_frame *frame, const uint8_t *hd,
                size_t len, nghttp2_data_source *src, void *arg)
{
    struct h2c *h = arg;
    struct h2s *s = src->ptr;
    struct conn *c = h->c;
    struct buf *o = &c->cn_out;
    const char *p;
    size_t pend;
    ssize_t k;

    (void)ss; (void)frame;
    magic_check(s->magic, H2S_MAGIC);
    if (o->end - o->start > H2_OUT_HIGH)
        return NGHTTP2_ERR_WOULDBLOCK;
    if (h2s_avail(s, &p) < len)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if ((o->data == NULL && buf_alloc(o) < 0) || buf_append(o, (const char *)hd, 9) < 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (c->cn_tls) {
        /* TLS: the frame joins cn_out and goes out from there.  An
         * SSL_write that wants to be retried must be given the same bytes
         * again; written straight from (cn_out, the lent body), a retry
         * from h2_flush_out with other frames queued behind cn_out's would
         * have sent the encrypted DATA record as those frames' bytes. */
        if (buf_append(o, p, len) < 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        h2s_take(s, len);
        h->n_data++;
        h->active = h2_now_ms();
        s->stall = 0;
        h2s_kick(s);
        return h2_flush_out(h) < 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
    }
    pend = o->end - o->start;
    for (;;) {
        struct iovec iov[2] = { { o->data + o->start, pend }, { (void *)p, len } };

        k = writev(c->cn_fd, iov, 2);
        if (k >= 0 || errno != EINTR)
            break;
    }
    if (k < 0) {
        o->end -= 9;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return NGHTTP2_ERR_WOULDBLOCK;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    wk->ctr->bytes_out += (uint64_t)k;
    if ((size_t)k < pend) {
        o->start += (size_t)k;
        if (buf_append(o, p, len) < 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    } else {
        size_t done = (size_t)k - pend;
        o->start = o->end = 0;
        if (done < len && buf_append(o, p + done, len - done) < 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    h2s_take(s, len);
    h->n_data++;
    h->active = h2_now_ms();
    s->stall = 0;
    h2s_kick(s);
    return 0;
}

/* The client has closed its side (h->eof): can no stream ever end?  No
 * WINDOW_UPDATE can come any more, so a stream whose HEADERS are out and
 * whose window (its own or the connection's) is spent waits forever;
 * without this the connection (its fd, the streams, a hit's mapping)
 * stayed until no_activity_timeout_in.  A stream still to answer, or with
 * window left, or being reset, may yet end. */
static int
h2_stuck(const struct h2c *h)
{
    int32_t cw = nghttp2_session_get_remote_window_size(h->ss);

    if (nghttp2_session_want_write(h->ss) || h->c->cn_out.end > h->c->cn_out.start)
        return h->nstreams == 0;
    for (const struct h2s *s = h->streams; s; s = s->next)
        if (s->dead || !s->head_sent
            || (cw > 0 && nghttp2_session_get_stream_remote_window_size(h->ss, s->id) > 0))
            return 0;
    return 1;
}

/* Pump the marked streams, let nghttp2 write, flush; wait for the socket
 * when it is full.  Closes the connection when the session is over. */
static void
h2_send(struct h2c *h)
{
    struct conn *c = h->c;
    int k = 0;

    if (h->in_send || h->lingering)
        return;
    h->in_send = 1;
    for (int round = 0; round < 16; round++) {
        if (h->kicked) {
            h->kicked = 0;
            for (struct h2s *s = h->streams; s; s = s->next)
                if (s->kick)
                    h2s_pump(h, s);
        }
        /* room first: a DATA frame refused (WOULDBLOCK) while cn_out
         * was full is tried again only by a later session_send */
        if ((k = h2_flush_out(h)) != 0)
            break;
        if (nghttp2_session_send(h->ss) != 0) {
            h->in_send = 0;
            h2_close(h);
            return;
        }
        if ((k = h2_flush_out(h)) != 0)
            break;
        if (!h->kicked && !nghttp2_session_want_write(h->ss))
            break;
    }
    h->in_send = 0;
    if (k < 0) {
        h2_close(h);
        return;
    }
    if (h->kicked)
        event_active(&h->work, EV_TIMEOUT, 1);
    if (k == 1 || (c->cn_tls && c->cn_tls_wr)) {
        if (!h->wev_on && !(c->cn_tls && c->cn_tls_wr)) {
            event_add(&h->wev, NULL);
            h->wev_on = 1;
        }
        return;
    }
    if (h->wev_on) {
        event_del(&h->wev);
        h->wev_on = 0;
    }
    if (h->read_off && !h->eof) {
        h->read_off = 0;
        event_add(&c->cn_rev, NULL);
        event_active(&c->cn_rev, EV_READ, 1);
    }
    if (c->cn_out.end == c->cn_out.start)
        buf_release(&c->cn_out);
    if (!nghttp2_session_want_read(h->ss) && !nghttp2_session_want_write(h->ss))
        h2_close(h);
    else if (h->eof && h2_stuck(h))
        h2_close(h);
}

/* ------------------------------------------------------------------ */
/* Input: nghttp2's callbacks */

/* A flood: GOAWAY(ENHANCE_YOUR_CALM), and the connection ends once that
 * is out.  Returns what the callback returns (stop reading). */
static int
h2_calm(struct h2c *h, const char *what, unsigned n)
{
    char peer[64];

    fmt_peer(&h->c->cn_peer.sa, peer, sizeof(peer));
    log_notice("conn %llu from %s: HTTP/2 %s flood (%u in a minute): GOAWAY "
               "ENHANCE_YOUR_CALM", (unsigned long long)h->c->cn_id, peer, what, n);
    h->calm = 1;
    nghttp2_session_terminate_session(h->ss, NGHTTP2_ENHANCE_YOUR_CALM);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* A client's HEADERS on stream id: -1 when the id is one it skipped.
 * RFC 9113 5.1.1: opening a stream closes every idle one below it, and a
 * HEADERS on such an id (the ids going down) is a connection error
 * PROTOCOL_ERROR.  nghttp2 ignores HEADERS on any id below the last it
 * does not hold open, as it cannot tell trailers meeting our RST_STREAM
 * from that; an id the client skipped was never opened, so no frame of
 * it can be in flight.  Clients open ids in order: the last gap is kept. */
static int
h2_sid_down(struct h2c *h, int32_t id)
{
    if (!(id & 1))
        return 0;       /* nghttp2's own check */
    if (id > h->last_sid) {
        if (id > h->last_sid + 2) {
            h->gap_lo = h->last_sid + 2;
            h->gap_hi = id - 2;
        }
        h->last_sid = id;
        return 0;
    }
    return id >= h->gap_lo && id <= h->gap_hi && h->gap_hi > 0 ? -1 : 0;
}

/* Did the client end stream id (END_STREAM or RST_STREAM) before it
 * closed?  Then a HEADERS on it is a connection error STREAM_CLOSED (RFC
 * 9113 5.1: nothing can follow the sender's own end), which nghttp2
 * ignores once it has let the stream go (it cannot tell it from trailers
 * that crossed a RST_STREAM of ours; these cannot have).  The last
 * H2_DONE_MAX such streams are remembered.  (A DATA on them nghttp2
 * drops before any callback: h2_frame_check sees it.) */
static int
h2_sid_done(const struct h2c *h, int32_t id)
{
    unsigned n = h->ndone < H2_DONE_MAX ? h->ndone : H2_DONE_MAX;

    if (id == 0 || nghttp2_session_find_stream(h->ss, id) != NULL)
        return 0;       /* open (or idle): nghttp2's rules */
    for (unsigned i = 0; i < n; i++)
        if (h->done[i] == id)
            return 1;
    return 0;
}

/* The per-minute budgets start again each minute. */
static void
h2_minute(struct h2c *h)
{
    int64_t now = h2_now_ms();

    if (now - h->minute >= 60000) {
        h->minute = now;
        h->n_rst = h->n_settings = h->n_setvals = h->n_ping = h->n_prio = 0;
        h->n_cont = h->n_wu = h->n_data = h->n_empty = h->n_unknown = 0;
    }
}

/* Every frame's header, before its payload: the per-minute budgets. */
static int
h2_cb_begin_frame(nghttp2_session *ss, const nghttp2_frame_hd *hd, void *arg)
{
    struct h2c *h = arg;
    const struct conf_records *rec = &wk->conf->rec;

    (void)ss;
    h2_minute(h);
    switch (hd->type) {
    case NGHTTP2_HEADERS:
        if ((hd->stream_id & 1) && hd->stream_id > h->last_sid)
            h->n_opened++;
        if (h2_sid_down(h, hd->stream_id) < 0) {
            nghttp2_session_terminate_session(h->ss, NGHTTP2_PROTOCOL_ERROR);
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (h2_sid_done(h, hd->stream_id)) {
            nghttp2_session_terminate_session(h->ss, NGHTTP2_STREAM_CLOSED);
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        break;
    case NGHTTP2_RST_STREAM:
        if (++h->n_rst > (unsigned)rec->h2_rst_min)
            return h2_calm(h, "RST_STREAM (rapid reset)", h->n_rst);
        break;
    case NGHTTP2_SETTINGS:
        if (hd->flags & NGHTTP2_FLAG_ACK)
            break;
        h->n_setvals += (unsigned)(hd->length / 6);
        if (++h->n_settings > (unsigned)rec->h2_settings_frames_min)
            return h2_calm(h, "SETTINGS", h->n_settings);
        if (hd->length / 6 > (size_t)rec->h2_settings_per_frame
            || h->n_setvals > (unsigned)rec->h2_settings_min)
            return h2_calm(h, "settings", h->n_setvals);
        break;
    case NGHTTP2_PING:
        /* an ACK too: we send no PING, so every ACK is unasked for, and
         * costs us as much as a PING without the answer */
        if (++h->n_ping > (unsigned)rec->h2_ping_min)
            return h2_calm(h, "PING", h->n_ping);
        break;
    case NGHTTP2_PRIORITY:
        if (++h->n_prio > (unsigned)rec->h2_priority_min)
            return h2_calm(h, "PRIORITY", h->n_prio);
        if (hd->stream_id == 0) {
            /* RFC 9113 6.3: a connection error.  nghttp2 skips the
             * payload of every PRIORITY once we said
             * NO_RFC7540_PRIORITIES, and this check with it. */
            nghttp2_session_terminate_session(h->ss, NGHTTP2_PROTOCOL_ERROR);
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        break;
    case NGHTTP2_CONTINUATION:
        if (++h->n_cont > (unsigned)rec->h2_cont_min)
            return h2_calm(h, "CONTINUATION", h->n_cont);
        break;
    case NGHTTP2_WINDOW_UPDATE:
        if (++h->n_wu > h->n_data + (unsigned)rec->h2_wu_min)
            return h2_calm(h, "WINDOW_UPDATE", h->n_wu);
        break;
    default:
        break;
    }
    return 0;
}

/* A DATA frame that carries nothing: no END_STREAM, and no payload but
 * its padding (f: its header, and its pad length when padded, n bytes).
 * RFC 9113 10.5: such frames cost us a frame's work for nothing
 * (CVE-2019-9518), and nghttp2 takes any number of them. */
static int
h2_data_empty(const uint8_t *f, unsigned n)
{
    uint32_t len = (uint32_t)f[0] << 16 | (uint32_t)f[1] << 8 | f[2];

    if (f[4] & NGHTTP2_FLAG_END_STREAM)
        return 0;
    return len == 0 || (n == 10 && len == 1u + f[9]);
}

/* A frame of a type RFC 9113 does not define, which nghttp2 skips
 * without a callback (5.5: ignored): PRIORITY_UPDATE (RFC 9218) counts as
 * a PRIORITY, any other (an unknown type; ALTSVC or ORIGIN, which a
 * client may not send) against max_unknown_frames_per_minute.
 * Uncounted, a client had us read and skip them without end at no cost
 * to itself.  0, or -1: the connection ends (GOAWAY submitted). */
static int
h2_frame_extension(struct h2c *h, uint8_t type)
{
    const struct conf_records *rec = &wk->conf->rec;

    if (type == NGHTTP2_PRIORITY_UPDATE) {
        if (++h->n_prio > (unsigned)rec->h2_priority_min) {
            (void)h2_calm(h, "PRIORITY_UPDATE", h->n_prio);
            return -1;
        }
        return 0;
    }
    if (++h->n_unknown > (unsigned)rec->h2_unknown_min) {
        (void)h2_calm(h, "unknown frame type", h->n_unknown);
        return -1;
    }
    return 0;
}

/* A DATA frame's header f (with its pad length when padded: 10 bytes),
 * a PRIORITY's with its dependency (13 bytes), or an extension frame's
 * header, n bytes, once nghttp2 has taken every frame before it: the
 * rules nghttp2 drops such a frame without checking, and the budgets of
 * frames that carry nothing.  0 to go on, -1 when the connection ends
 * (GOAWAY submitted). */
static int
h2_frame_check(struct h2c *h, const uint8_t *f, unsigned n)
{
    int32_t id = (int32_t)(((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8
                            | f[8]) & 0x7fffffffu);
    int32_t dep;

    h2_minute(h);
    if (f[3] > NGHTTP2_CONTINUATION)
        return h2_frame_extension(h, f[3]);
    if (f[3] == NGHTTP2_DATA && h2_data_empty(f, n)
        && ++h->n_empty > (unsigned)wk->conf->rec.h2_empty_min) {
        (void)h2_calm(h, "empty DATA", h->n_empty);
        return -1;
    }
    if (f[3] == NGHTTP2_DATA && h2_sid_done(h, id)) {
        /* RFC 9113 5.1 and 6.1: the client's own end came first */
        nghttp2_session_terminate_session(h->ss, NGHTTP2_STREAM_CLOSED);
        return -1;
    }
    if (f[3] != NGHTTP2_PRIORITY || id == 0)
        return 0;
    dep = (int32_t)(((uint32_t)f[9] << 24 | (uint32_t)f[10] << 16 | (uint32_t)f[11] << 8
                     | f[12]) & 0x7fffffffu);
    if (dep != id)
        return 0;
    /* RFC 9113 5.3.1: a stream error PROTOCOL_ERROR; but no RST_STREAM
     * may go on a stream idle or closed (6.4, 5.1), so there it is the
     * connection's (5.4.1 allows it; nghttp2 does so with priorities on) */
    if (nghttp2_session_find_stream(h->ss, id) == NULL) {
        nghttp2_session_terminate_session(h->ss, NGHTTP2_PROTOCOL_ERROR);
        return -1;
    }
    nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, id, NGHTTP2_PROTOCOL_ERROR);
    return 0;
}

/* Feed n bytes of input to nghttp2, stopping at each DATA, PRIORITY and
 * extension frame's header (and a padded DATA's pad length) to check it
 * first (h2_frame_check).  A request without a
 * body costs one nghttp2_session_mem_recv, as before, and a look at each
 * frame header.  Returns 0, or -1: the connection ends (nghttp2 failed,
 * or a GOAWAY was submitted). */
static int
h2_recv(struct h2c *h, const uint8_t *p, size_t n)
{
    size_t i = 0, fed = 0, k;

    while (i < n) {
        if (h->fr_skip > 0) {
            k = n - i < h->fr_skip ? n - i : h->fr_skip;
            i += k;
            h->fr_skip -= (uint32_t)k;
            continue;
        }
        k = n - i < (size_t)(h->fr_need - h->fr_have) ? n - i : (size_t)(h->fr_need - h->fr_have);
        memcpy(h->fr_hd + h->fr_have, p + i, k);
        h->fr_have += (uint8_t)k;
        i += k;
        if (h->fr_have < h->fr_need)
            break;
        uint32_t len = (uint32_t)h->fr_hd[0] << 16 | (uint32_t)h->fr_hd[1] << 8 | h->fr_hd[2];
        if (h->fr_need == 9 && h->fr_hd[3] == NGHTTP2_PRIORITY && len == 5) {
            h->fr_need = 13;        /* its dependency too */
            continue;
        }
        if (h->fr_need == 9 && h->fr_hd[3] == NGHTTP2_DATA
            && (h->fr_hd[4] & NGHTTP2_FLAG_PADDED) && len > 0) {
            h->fr_need = 10;        /* its pad length too */
            continue;
        }
        if (h->fr_hd[3] == NGHTTP2_DATA || h->fr_need == 13
            || h->fr_hd[3] > NGHTTP2_CONTINUATION) {
            /* (a PRIORITY of another length is nghttp2's FRAME_SIZE_ERROR.)
             * nghttp2 first takes what comes before this frame (a header
             * that began in an earlier read is partly in it already). */
            size_t at = i >= h->fr_have ? i - h->fr_have : 0;

            if (at > fed && nghttp2_session_mem_recv(h->ss, p + fed, at - fed) < 0)
                return -1;
            fed = at > fed ? at : fed;
            if (h2_frame_check(h, h->fr_hd, h->fr_need) < 0)
                return -1;
        }
        h->fr_skip = len - (uint32_t)(h->fr_need - 9);
        h->fr_have = 0;
        h->fr_need = 9;
    }
    return fed < n && nghttp2_session_mem_recv(h->ss, p + fed, n - fed) < 0 ? -1 : 0;
}

static int
h2_cb_begin_headers(nghttp2_session *ss, const nghttp2_frame *f, void *arg)
{
    struct h2c *h = arg;
    struct h2s *s;

    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (h->goaway)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if ((s = h2s_new(h, f->hd.stream_id)) == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(ss, f->hd.stream_id, s);
    return 0;
}

static int
h2_cb_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *name,
             size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    struct h2s *s = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id);

    (void)flags; (void)arg;
    if (s == NULL || s->started)
        return 0;   /* trailers: HTTP/1.1's chunked trailers are not sent */
    if (h2_head_add(&s->hd, name, nlen, value, vlen,
                    (uint64_t)wk->conf->rec.h2_header_list) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static int
h2_cb_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *arg)
{
    struct h2c *h = arg;
    struct h2s *s;

    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA
        && f->hd.type != NGHTTP2_RST_STREAM)
        return 0;
    if ((s = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id)) == NULL)
        return 0;
    if (f->hd.type == NGHTTP2_RST_STREAM) {
        s->client_rst = 1;
        return 0;
    }
    if (f->hd.type == NGHTTP2_HEADERS && !s->started) {
        h2s_start(h, s, (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
        return 0;
    }
    if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && s->body && !s->body_end) {
        if (h2s_body_fin(s) < 0)
            h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
        h2s_kick(s);
    }
    return 0;
}

static int
h2_cb_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *p,
                 size_t n, void *arg)
{
    struct h2c *h = arg;
    struct h2s *s = nghttp2_session_get_stream_user_data(ss, id);

    (void)flags;
    h->active = h2_now_ms();
    if (s == NULL || s->dead || !s->started || s->rq == NULL
        || s->rq->rq_step == REQ_DONE || s->rq->rq_step == REQ_HIT) {
        nghttp2_session_consume(ss, id, n);     /* nobody reads it */
        return 0;
    }
    s->unacked += n;
    s->stall = 0;
    if (h2s_body_data(s, p, n) < 0) {
        h2s_reset(h, s, NGHTTP2_INTERNAL_ERROR);
        return 0;
    }
    h2s_kick(s);
    return 0;
}

/* A stream the client made us reset (h2_cb_frame_send) is a stream
 * error: ATS's stream_error_rate_threshold over the streams it opened,
 * once it has opened stream_error_sampling_threshold and 1/threshold of
 * them.  Past the rate the connection drains, its final GOAWAY saying
 * ENHANCE_YOUR_CALM; past twice the rate (at most every stream), GOAWAY
 * ENHANCE_YOUR_CALM now.  The rapid-reset budget counts the same resets
 * per minute; this catches a client whose streams mostly fail below it. */
static void
h2_stream_error(struct h2c *h)
{
    const struct conf_records *rec = &wk->conf->rec;
    uint64_t errs = ++h->n_errs, total = h->n_opened, thr = (uint64_t)rec->h2_err_rate;
    uint64_t hard = thr * 2 < 1000 ? thr * 2 : 1000;
    char peer[64];

    if (thr == 0 || total < (uint64_t)rec->h2_err_sample || total * thr < 1000
        || errs * 1000 <= thr * total || (h->draining && errs * 1000 <= hard * total))
        return;
    fmt_peer(&h->c->cn_peer.sa, peer, sizeof(peer));
    log_notice("conn %llu from %s: HTTP/2 stream error rate %llu of %llu streams, past "
               "stream_error_rate_threshold %.3f: %s", (unsigned long long)h->c->cn_id, peer,
               (unsigned long long)errs, (unsigned long long)total, (double)thr / 1000,
               errs * 1000 > hard * total ? "GOAWAY ENHANCE_YOUR_CALM" : "draining");
    if (errs * 1000 > hard * total) {
        h->calm = 1;
        nghttp2_session_terminate_session(h->ss, NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    h->calm_drain = 1;
    h2_drain_start(h);
}

/* A frame went out: a complete answer ends the client's upload too. */
static int
h2_cb_frame_send(nghttp2_session *ss, const nghttp2_frame *f, void *arg)
{
    struct h2c *h = arg;
    struct h2s *s;

    if (f->hd.type == NGHTTP2_RST_STREAM && f->rst_stream.error_code != NGHTTP2_NO_ERROR) {
        /* a reset the client caused (a stream error nghttp2 found, a
         * stream refused): it counts as one the client sent, or a client
         * that never sends RST_STREAM resets streams at will
         * (MadeYouReset, CVE-2025-8671).  Ours (h2s_reset: dead) do not. */
        s = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id);
        if ((s != NULL && s->dead) || h->calm)
            return 0;
        if (++h->n_rst > (unsigned)wk->conf->rec.h2_rst_min)
            (void)h2_calm(h, "stream reset (rapid reset by stream errors)", h->n_rst);
        else
            h2_stream_error(h);
        return 0;
    }
    if (!(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    s = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id);
    if (s && s->body && !s->body_end)
        nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

/* The drain: the streams go on, and GOAWAY (with the last stream we
 * took) goes out once the client has had no stream open for
 * H2_DRAIN_QUIET_MS; then the close.  Not at once, and no shutdown notice
 * (GOAWAY 2^31-1) either: clients built on nghttp2 (h2load, nghttp) open
 * no stream after any GOAWAY and count the requests they had left as
 * failed instead of reconnecting, so a reload under load would fail
 * them.  A client that never pauses is closed at the worker's
 * proxy.config.stop.shutdown_timeout, as an HTTP/1.1 one is. */
#define H2_DRAIN_QUIET_MS 1000

static void
h2_drain_start(struct h2c *h)
{
    struct timeval tv = { 0, 250 * 1000 };

    if (h->draining || h->goaway || h->lingering)
        return;
    h->draining = 1;
    event_del(&h->tmr);
    event_add(&h->tmr, &tv);
}

/* The drain's timer: the final GOAWAY once the client is quiet. */
static void
h2_drain_tick(struct h2c *h)
{
    struct timeval tv = { 0, 250 * 1000 };

    if (h->nstreams == 0 && h2_now_ms() - h->active >= H2_DRAIN_QUIET_MS) {
        nghttp2_submit_goaway(h->ss, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(h->ss),
                              h->calm_drain ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_NO_ERROR,
                              NULL, 0);
        h->goaway = 1;
        h2_send(h);
        if (!h->lingering)
            h2_close(h);
        return;
    }
    event_add(&h->tmr, &tv);
}

static int
h2_cb_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *arg)
{
    struct h2c *h = arg;
    struct h2s *s = nghttp2_session_get_stream_user_data(ss, id);

    (void)code;
    if (s == NULL)
        return 0;
    if ((s->started && (!s->body || s->body_end)) || s->client_rst)
        h->done[h->ndone++ % H2_DONE_MAX] = id;     /* the client ended it */
    nghttp2_session_set_stream_user_data(ss, id, NULL);
    h2s_free(h, s);
    if (!h->draining && worker_closing())
        h2_drain_start(h);  /* `cistern ctl server drain`: as HTTP/1.1
                               answers say Connection: close */
    return 0;
}

static int
h2_cbs_init(void)
{
    nghttp2_session_callbacks *cb;

    if (h2_cbs)
        return 0;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    nghttp2_session_callbacks_set_send_callback(cb, h2_cb_send);
    nghttp2_session_callbacks_set_send_data_callback(cb, h2_cb_send_data);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, h2_cb_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, h2_cb_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, h2_cb_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2_cb_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_cb_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, h2_cb_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_cb_stream_close);
    h2_cbs = cb;
    return 0;
}

/* ------------------------------------------------------------------ */
/* The connection's events */

/* The end, when everything that could be said is out: shutdown our side,
 * read what the client still sends for a moment (so its unread frames
 * do not turn our close into a reset that destroys the GOAWAY), close. */
static void
h2_close(struct h2c *h)
{
    struct conn *c = h->c;
    struct timeval tv = { H2_LINGER_MS / 1000, (H2_LINGER_MS % 1000) * 1000 };

    if (h->lingering)
        return;
    h->lingering = 1;
    if (c->cn_out.end > c->cn_out.start)
        h2_flush_out(h);
    if (c->cn_tls)
        tls_conn_shutdown(c);
    if (h->eof || shutdown(c->cn_fd, SHUT_WR) < 0) {
        /* closed from the timer, never under a caller that still holds h */
        event_del(&h->tmr);
        event_active(&h->tmr, EV_TIMEOUT, 1);
        return;
    }
    if (h->wev_on) {
        event_del(&h->wev);
        h->wev_on = 0;
    }
    event_del(&h->tmr);
    event_add(&h->tmr, &tv);
    event_del(&c->cn_rev);
    event_add(&c->cn_rev, NULL);
}

/* Read and feed nghttp2 until the socket is empty (or output is backed
 * up: then the client waits for us to write first). */
static void
h2_read(struct h2c *h)
{
    static uint8_t ib[H2_READ_MAX];
    struct conn *c = h->c;

    for (int i = 0; i < 8; i++) {
        ssize_t n;

        if (c->cn_out.end - c->cn_out.start > H2_OUT_HIGH) {
            /* the client does not read: neither do we (a level-triggered
             * read event would spin), until h2_send drains cn_out */
            event_del(&c->cn_rev);
            h->read_off = 1;
            break;
        }
        c->cn_tls_rw = 0;
        n = c->cn_tls ? tls_conn_read(c, (char *)ib, sizeof(ib))
                      : read(c->cn_fd, ib, sizeof(ib));
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                if (c->cn_tls_rw && !h->wev_on) {
                    event_add(&h->wev, NULL);
                    h->wev_on = 1;
                }
                break;
            }
            h->ops->close(c);
            return;
        }
        if (n == 0) {
            h->eof = 1;
            event_del(&c->cn_rev);
            break;
        }
        wk->ctr->bytes_in += (uint64_t)n;
        if (h2_recv(h, ib, (size_t)n) < 0) {
            if (!h->calm)
                nghttp2_session_terminate_session(h->ss, NGHTTP2_PROTOCOL_ERROR);
            h->in_send = 0;
            nghttp2_session_send(h->ss);
            h2_close(h);
            return;
        }
    }
    h2_send(h);
}

static void
h2_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct h2c *h = arg;
    struct conn *c = h->c;

    magic_check(h->magic, H2C_MAGIC);
    if (h->lingering) {
        char sink[4096];
        ssize_t n = read(fd, sink, sizeof(sink));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            h->ops->close(c);
        return;
    }
    if (c->cn_tls && c->cn_tls_wr) {
        c->cn_tls_wr = 0;       /* a write waited for this */
        h2_send(h);
        if (h->lingering)
            return;
    }
    (void)what;
    h2_read(h);
}

static void
h2_on_write(evutil_socket_t fd, short what, void *arg)
{
    struct h2c *h = arg;
    struct conn *c = h->c;

    (void)fd; (void)what;
    magic_check(h->magic, H2C_MAGIC);
    h->wev_on = 0;
    if (c->cn_tls && c->cn_tls_rw) {
        h2_read(h);     /* a read waited for this */
        return;
    }
    h2_send(h);
}

/* Is some stream waiting on its origin (not on the client)?  Then the
 * connection is not idle: the origin's own timers run (a joiner that
 * caught up with a fill waits on the filler's origin). */
static int
h2_origin_busy(const struct h2c *h)
{
    for (const struct h2s *s = h->streams; s; s = s->next)
        if (s->rq && !s->dead
            && (s->rq->rq_step == REQ_WAIT
                || ((s->rq->rq_up || rww_waiting(s->rq)) && s->out.end == s->out.start
                    && s->rq->rq_body_len == 0)))
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* The streams' client timers: HTTP/1.1's (conn.c), per stream.  The
 * connection's no_activity_timeout_in alone let a stream wait on its
 * client for ever: one whose request body stopped coming counts as
 * waiting on its origin (h2_origin_busy), and one whose window the
 * client keeps shut lives as long as other streams keep the connection
 * busy, holding its origin connection or its hit's pinned segments.
 * The streams are walked on the connection's timer, every quarter of
 * the shortest timeout while any is open, so a stream is cut between T
 * and 1.25 T after it began to wait, never before. */

static int64_t
h2_tick_ms(void)
{
    const struct conf_records *rec = &wk->conf->rec;
    int64_t t = rec->txn_no_activity_in;

    if (rec->txn_active_in > 0 && rec->txn_active_in < t)
        t = rec->txn_active_in;
    return t * 1000 / 4 < 250 ? 250 : t * 1000 / 4;
}

static void
h2_arm_ms(struct h2c *h, int64_t ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        tv.tv_usec = 1000;
    event_del(&h->tmr);
    event_add(&h->tmr, &tv);
}

/* A stream started: the timer ticks for it, and still by the idle
 * deadline (the drain and the linger have timers of their own; the
 * drain's walks the streams too). */
static void
h2_tick_start(struct h2c *h)
{
    int64_t idle = (int64_t)wk->conf->rec.h2_idle_in * 1000, t = h2_tick_ms();

    if (h->ticking || h->lingering || h->draining)
        return;
    h->ticking = 1;
    h2_arm_ms(h, t < idle ? t : idle);
}

/* Does s wait on its client: for the rest of its request body (we hold
 * none of it: the transaction has taken all there was), or for window to
 * send the answer bytes it has ready? */
static int
h2s_waits_client(const struct h2s *s)
{
    const char *p;

    if (s->rq->rq_step == REQ_WAIT)
        return 0;
    if (s->body && !s->body_end && s->in.start == s->in.end)
        return 1;
    return s->head_sent && h2s_avail(s, &p) > 0;
}

/* s is past a client timer: a request body that stopped coming before the
 * origin began to answer gets 408, as on HTTP/1.1 (conn_timeout); any
 * other stream is reset. */
static void
h2s_expire(struct h2c *h, struct h2s *s)
{
    struct req *rq = s->rq;

    wk->ctr->timeouts++;
    if (!s->head_sent && s->body && !s->body_end && rq->rq_step != REQ_DONE
        && (rq->rq_up == NULL || rq->rq_up->up_state < UP_BODY)) {
        proxy_abort(rq);
        h2s_refuse(s, 408, "request body timeout");
        s->stall = 0;       /* the answer's timer starts now */
        h2s_kick(s);
        return;
    }
    h2s_reset(h, s, NGHTTP2_CANCEL);
    event_active(&h->work, EV_TIMEOUT, 1);     /* the RST_STREAM out */
}

static void
h2_streams_tick(struct h2c *h)
{
    const struct conf_records *rec = &wk->conf->rec;
    int64_t now = h2_now_ms();

    for (struct h2s *s = h->streams; s; s = s->next) {
        if (!s->started || s->dead || s->rq == NULL)
            continue;
        if (rec->txn_active_in > 0 && now - s->born >= (int64_t)rec->txn_active_in * 1000)
            h2s_expire(h, s);
        else if (!h2s_waits_client(s))
            s->stall = 0;
        else if (s->stall == 0)
            s->stall = now;
        else if (now - s->stall >= (int64_t)rec->txn_no_activity_in * 1000)
            h2s_expire(h, s);
    }
}

/* no_activity_timeout_in, the streams' timers, and the end of a linger. */
static void
h2_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct h2c *h = arg;
    int64_t idle = (int64_t)wk->conf->rec.h2_idle_in * 1000, left;

    (void)fd; (void)what;
    magic_check(h->magic, H2C_MAGIC);
    if (h->lingering) {
        h->ops->close(h->c);
        return;
    }
    h->ticking = 0;
    h2_streams_tick(h);
    if (h->draining && !h->goaway) {
        h2_drain_tick(h);
        return;
    }
    left = h->active + idle - h2_now_ms();
    if (left > 0 || h2_origin_busy(h)) {
        int64_t at = left > 0 ? left : idle;
        if (h->nstreams > 0 && h2_tick_ms() < at) {
            at = h2_tick_ms();
            h->ticking = 1;
        }
        h2_arm_ms(h, at);
        return;
    }
    wk->ctr->timeouts++;
    nghttp2_session_terminate_session(h->ss, NGHTTP2_NO_ERROR);
    h->goaway = 1;
    h->in_send = 0;
    nghttp2_session_send(h->ss);
    h2_close(h);
}

/* ------------------------------------------------------------------ */
/* Attach, drain, free */

/* The connection's receive window (flow_control.policy_in): RFC 9113
 * 6.9.2 starts it at 65,535 whatever SETTINGS say, so it grows by a
 * WINDOW_UPDATE on stream 0 right after our SETTINGS.  Policy 1 makes it
 * the sum of the streams' windows: a stream is never held back by the
 * others (or, with initial_window_size_in past 64 KiB, by the connection
 * alone), and what a client can have in us is still what the stream
 * windows allow (request DATA is given back only as the transaction
 * takes it: h2s_ack).  Policy 0 is ATS's: one stream's window. */
static int32_t
h2_conn_window(const struct conf_records *rec)
{
    int64_t w = rec->h2_window;

    if (rec->h2_flow_policy == 1)
        w *= rec->h2_max_streams;
    return w > NGHTTP2_MAX_WINDOW_SIZE ? NGHTTP2_MAX_WINDOW_SIZE : (int32_t)w;
}

static int
h2_session_new(struct h2c *h)
{
    const struct conf_records *rec = &wk->conf->rec;
    nghttp2_option *opt;
    nghttp2_settings_entry set[6];
    int rc;

    if (h2_cbs_init() < 0 || nghttp2_option_new(&opt) != 0)
        return -1;
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_settings(opt, (size_t)rec->h2_settings_per_frame);
    nghttp2_option_set_no_closed_streams(opt, 1);
    rc = nghttp2_session_server_new3(&h->ss, h2_cbs, h, opt, &h2m);
    nghttp2_option_del(opt);
    if (rc != 0)
        return -1;
    set[0] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
                                       (uint32_t)rec->h2_max_streams };
    set[1] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
                                       (uint32_t)rec->h2_window };
    set[2] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_MAX_FRAME_SIZE,
                                       (uint32_t)rec->h2_frame_size };
    set[3] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_HEADER_TABLE_SIZE,
                                       (uint32_t)rec->h2_table_size };
    set[4] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
                                       (uint32_t)rec->h2_header_list };
    set[5] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES,
                                       rec->h2_priority ? 0u : 1u };
    if (nghttp2_submit_settings(h->ss, NGHTTP2_FLAG_NONE, set, 6) != 0
        || nghttp2_session_set_local_window_size(h->ss, NGHTTP2_FLAG_NONE, 0,
                                                 h2_conn_window(rec)) != 0) {
        nghttp2_session_del(h->ss);
        h->ss = NULL;
        return -1;
    }
    return 0;
}

int
h2_attach(struct conn *c, const struct h2_conn_ops *ops)
{
    struct h2c *h;
    struct buf *in = &c->cn_in;
    struct timeval tv = { wk->conf->rec.h2_idle_in, 0 };

    if (!h2_pools_ok) {
        pool_init(&h2c_pool, sizeof(struct h2c));
        pool_init(&h2s_pool, sizeof(struct h2s));
        h2c_pool.max_idle = 256;
        h2s_pool.max_idle = 1024;
        for (unsigned k = 0; k < H2M_NCLASS; k++) {
            pool_init(&h2m_pool[k], h2m_size[k]);
            h2m_pool[k].max_idle = h2m_size[k] <= 1024 ? 4096 : 256;
        }
        h2_pools_ok = 1;
    }
    if ((h = pool_get(&h2c_pool)) == NULL)
        return -1;
    memset(h, 0, sizeof(*h));
    h->magic = H2C_MAGIC;
    h->c = c;
    h->ops = ops;
    h->fr_skip = NGHTTP2_CLIENT_MAGIC_LEN;  /* nghttp2 reads the preface */
    h->fr_need = 9;
    if (h2_session_new(h) < 0) {
        h->magic = 0;
        pool_put(&h2c_pool, h);
        return -1;
    }
    c->cn_h2 = h;
    h->active = h->minute = h2_now_ms();
    event_del(&c->cn_rev);
    event_assign(&c->cn_rev, wk->base, c->cn_fd, EV_READ | EV_PERSIST, h2_on_read, h);
    event_assign(&h->wev, wk->base, c->cn_fd, EV_WRITE, h2_on_write, h);
    event_assign(&h->work, wk->base, -1, 0, h2_on_work, h);
    event_assign(&h->tmr, wk->base, -1, 0, h2_on_timer, h);
    event_add(&c->cn_rev, NULL);
    event_add(&h->tmr, &tv);
    if (in->end > in->start) {
        /* what was read before we knew (the preface, maybe more) */
        int rv = h2_recv(h, (const uint8_t *)in->data + in->start, in->end - in->start);
        in->start = in->end = 0;
        if (rv < 0) {
            nghttp2_session_terminate_session(h->ss, NGHTTP2_PROTOCOL_ERROR);
        }
    }
    buf_release(in);
    if (c->cn_tls && tls_conn_pending(c))
        event_active(&c->cn_rev, EV_READ, 1);
    event_active(&h->work, EV_TIMEOUT, 1);
    return 0;
}

void
h2_drain(struct conn *c)
{
    struct h2c *h = c->cn_h2;

    magic_check(h->magic, H2C_MAGIC);
    h2_drain_start(h);
}

void
h2_free(struct conn *c)
{
    struct h2c *h = c->cn_h2;

    if (h == NULL)
        return;
    magic_check(h->magic, H2C_MAGIC);
    while (h->streams) {
        struct h2s *s = h->streams;
        nghttp2_session_set_stream_user_data(h->ss, s->id, NULL);
        h2s_free(h, s);
    }
    if (h->wev_on)
        event_del(&h->wev);
    event_del(&h->work);
    event_del(&h->tmr);
    nghttp2_session_del(h->ss);
    h->magic = 0;
    c->cn_h2 = NULL;
    pool_put(&h2c_pool, h);
}
