/*
 * worker/conn.c: a client connection, as an explicit state machine.
 *
 *   accept -> HEAD --(head complete, checked)--> req_run (req.c: the steps)
 *               ^                                  |  |  |  |
 *               |      the answer is ours or a hit +  |  |  +-- WAIT (for
 *               |      (a body after it: BODY, read    |  |     another fill)
 *               |      and dropped)                    |  +-- BODY (the
 *               |                                      |   transaction reads it)
 *               |                   PROXY (the origin) +       |
 *               |                                      v       v
 *             IDLE <---(flushed, keep-alive, no input)-- SEND <-+
 *                                                      |
 *                                       (close)  -> LINGER -> closed
 *
 * The connection owns its request (cn_req) and lends it cn_in and
 * cn_out; the request says what it wants in its own fields (rq_close,
 * rq_abort, rq_body_owned, its transaction) and conn_sync() turns that
 * into this connection's state: only this file writes cn_state.
 *
 * Pipelining: requests are parsed strictly one after another from the
 * input buffer, and their responses are appended to the output buffer in
 * the same order, so answers can never be reordered.  While the output
 * buffer holds more than OUT_HIGH bytes we stop parsing (back-pressure on a
 * client that sends but does not read).
 *
 * Ownership: conn_close() is the one place that releases what a connection
 * owns (fd, both events, both buffers, the request) and returns the struct
 * to its pool.  An idle connection holds only the struct; its
 * buffers and request context go back to the worker's pools.
 *
 * Timeouts are ATS's: inactivity timers per direction and phase, armed
 * whenever we wait on a peer, never while the peer waits on us.
 *   fresh HEAD, nothing read yet   accept_no_activity_timeout
 *   IDLE   keep_alive_no_activity_timeout_in
 *   HEAD   min(transaction_no_activity_timeout_in, time left of
 *          request_header_timeout since the head's first byte): a client
 *          dripping bytes cannot hold a connection past the deadline
 *   BODY   transaction_no_activity_timeout_in
 *   writing to the client: transaction_no_activity_timeout_in on the write
 *          event, restarted only when bytes move (conn_wait_write)
 *   PROXY, waiting for the origin: no client timer; the origin's events
 *          carry transaction_no_activity_timeout_out (proxy.c)
 *   LINGER CONN_LINGER_MS
 * transaction_active_timeout_in (0: none) caps each of them, counted from
 * the head's first byte, and is the one timer of PROXY when set.
 *
 * Closing: shutdown(SHUT_WR), then read and discard for a short while, so
 * that unread input from the client never turns our close into a reset
 * that destroys the response still in flight.
 */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm/log.h"
#include "shm/filltab.h"
#include "worker/worker.h"
#include "worker/pp.h"
#include "worker/tunnel.h"
#include "worker/h2.h"

#define OUT_HIGH         (BUF_SIZE / 2)
#define CONN_LINGER_MS   2000
/* On drain, a connection with no request in progress gets this long to
 * send one (answered with Connection: close) before it is closed: closing
 * at once would race a client that is sending right now. */
#define DRAIN_IDLE_GRACE_MS 1000


static void conn_on_read(evutil_socket_t fd, short what, void *arg);
static int conn_want_write(struct conn *c, const struct timeval *tv);
static void conn_unwant_write(struct conn *c);
static int conn_flush(struct conn *c);
static void conn_read_resume(struct conn *c);

/* The request's transaction, and the body bytes lent with its answer. */
static inline struct upstream *
conn_up(const struct conn *c)
{
    return c->cn_req ? c->cn_req->rq_up : NULL;
}

static inline size_t
conn_body_len(const struct conn *c)
{
    return c->cn_req ? c->cn_req->rq_body_len : 0;
}
static void conn_on_write(evutil_socket_t fd, short what, void *arg);
static void conn_bg_detach(struct conn *c);
static int conn_process(struct conn *c);
static struct conn *conn_new(struct worker *w, int fd, const struct sockaddr *sa,
                             socklen_t salen);
static void conn_wait_read(struct conn *c);
static int conn_wait_write(struct conn *c, int progress);

/* ------------------------------------------------------------------ */

/* Wait (up to tv) until c's socket takes more output.  The write event is
 * lent from the worker's pool for as long as the wait lasts: most
 * responses leave in one writev and never need one, and an idle
 * connection carries only its read event.  -1: out of memory. */
static int
conn_want_write(struct conn *c, const struct timeval *tv)
{
    struct worker *w = wk;
    struct conn_wev *e = c->cn_wev;

    if (e == NULL) {
        if ((e = pool_get(&w->wev_pool)) == NULL)
            return -1;
        event_assign(&e->ev, w->base, c->cn_fd, EV_WRITE | EV_PERSIST,
                     conn_on_write, c);
        e->unsent = -1;
        c->cn_wev = e;
    }
    event_add(&e->ev, tv);
    return 0;
}

/* The wait for writability is over: the event goes back to the pool. */
static void
conn_unwant_write(struct conn *c)
{
    struct conn_wev *e = c->cn_wev;

    if (e == NULL)
        return;
    event_del(&e->ev);
    c->cn_wev = NULL;
    pool_put(&wk->wev_pool, e);
}

static const struct req_owner_ops conn_req_ops;
static struct conn *conn_of(const struct req *rq);

static void
conn_req_get(struct conn *c)
{
    struct req *rq;

    if (c->cn_req || (rq = req_new(c, &conn_req_ops)) == NULL)
        return;
    rq->rq_in = &c->cn_in;
    rq->rq_out = &c->cn_out;
    rq->rq_id = c->cn_id;
    rq->rq_peer = &c->cn_peer.sa;
    rq->rq_tls = c->cn_tls != NULL;
    rq->rq_bg = c->cn_bg;
    c->cn_req = rq;
}

static void
conn_req_put(struct conn *c)
{
    req_free(c->cn_req);
    c->cn_req = NULL;
}

static void
conn_close(struct conn *c)
{
    struct worker *w = wk;

    magic_check(c->cn_magic, CONN_MAGIC);
    if (c->cn_h2)
        h2_free(c);             /* its streams, aborted and logged */
    else if (c->cn_fd >= 0 && c->cn_req && c->cn_state == CONN_PROXY && !c->cn_abort
             && proxy_bg_fill(c->cn_req)) {
        conn_bg_detach(c);
        return;
    }
    if (c->cn_req)
        req_abort(c->cn_req);   /* a transaction cut short is still logged */
    event_del(&c->cn_rev);
    conn_unwant_write(c);
    if (c->cn_tls)
        tls_conn_free(c);
    if (c->cn_fd >= 0)
        close(c->cn_fd);
    buf_release(&c->cn_in);
    buf_release(&c->cn_out);
    conn_req_put(c);
    if (c->cn_prev)
        c->cn_prev->cn_next = c->cn_next;
    else
        w->conns = c->cn_next;
    if (c->cn_next)
        c->cn_next->cn_prev = c->cn_prev;
    w->nconns--;
    if (c->cn_fd >= 0)
        w->ctr->conns_open--;
    c->cn_magic = 0;
    pool_put(&w->conn_pool, c);
    if (w->draining && w->nconns == 0)
        event_base_loopbreak(w->base);
}

/* A background fill's timer: its first turn (the transaction goes on at
 * once, from the event loop), then background_fill_active_timeout. */
static void
conn_on_bg(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct timeval tv = { wk->conf->rec.bg_fill_timeout, 0 };

    (void)fd;
    (void)what;
    magic_check(c->cn_magic, CONN_MAGIC);
    if (c->cn_bgkick) {
        c->cn_bgkick = 0;
        if (tv.tv_sec > 0)
            event_add(&c->cn_rev, &tv);
        conn_flush(c);
        return;
    }
    wk->ctr->timeouts++;
    conn_close(c);              /* the active timeout: the fill is dropped */
}

/* The client of a fill went away with enough of it done (proxy_bg_fill):
 * the connection becomes an internal one (no socket: what it would send
 * is dropped, as for a background revalidation) and the transaction goes
 * on from the event loop; it closes itself when the fill is over.
 * Callers treat c as closed: the first turn runs from a timer. */
static void
conn_bg_detach(struct conn *c)
{
    struct timeval now0 = { 0, 0 };

    event_del(&c->cn_rev);
    conn_unwant_write(c);
    if (c->cn_tls)
        tls_conn_free(c);
    close(c->cn_fd);
    c->cn_fd = -1;
    wk->ctr->conns_open--;
    c->cn_bg = 1;
    c->cn_in_eof = 1;
    c->cn_close = 1;
    c->cn_in_process = 0;
    c->cn_in_flush = 0;
    c->cn_out.start = c->cn_out.end = 0;
    c->cn_bgkick = 1;
    event_assign(&c->cn_rev, wk->base, -1, 0, conn_on_bg, c);
    event_add(&c->cn_rev, &now0);
}

/* Close with a reset: the response we were sending is incomplete, and an
 * orderly close could make a close-delimited (or de-chunked) body look
 * whole.  A reset is the one signal every client reads as "truncated". */
static void
conn_reset(struct conn *c)
{
    struct linger lg = { 1, 0 };

    /* Framing that shows the truncation by itself (Content-Length, or
     * chunked without its last chunk) is better served by a plain close:
     * a reset can destroy the bytes the client has not read yet. */
    if (conn_up(c) == NULL || conn_up(c)->up_resp == NULL
        || conn_up(c)->up_resp->until_close || conn_up(c)->up_decode)
        setsockopt(c->cn_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    conn_close(c);
}

/* Half-close and drain what the client still sends; see the essay. */
/* Returns 0, or -1 when it closed the connection at once (c is gone). */
static int
conn_linger(struct conn *c)
{
    struct timeval tv = { CONN_LINGER_MS / 1000, (CONN_LINGER_MS % 1000) * 1000 };

    if (c->cn_tls)
        tls_conn_shutdown(c);   /* close_notify first; the linger reads raw */
    if (c->cn_in_eof || shutdown(c->cn_fd, SHUT_WR) < 0) {
        conn_close(c);
        return -1;
    }
    c->cn_state = CONN_LINGER;
    conn_unwant_write(c);
    buf_release(&c->cn_out);
    buf_release(&c->cn_in);
    conn_req_put(c);
    event_add(&c->cn_rev, &tv);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The PROXY protocol (pp ports): before anything else on the connection,
 * before TLS too, a header from the balancer says who the client is.
 * Only peers in proxy.config.http.proxy_protocol_allowlist may send it
 * (an empty list: any peer, as in ATS); a header that is missing,
 * malformed, or not whole within the deadline closes the connection
 * without a response.  The address it carries replaces cn_peer, the one
 * client address every later user reads (rq_peer: ip_allow, admin.allow,
 * the access log, X-Forwarded-For); LOCAL and UNKNOWN keep the peer. */

/* The peer of a pp port may send a PROXY header: 1, else the socket is
 * closed (counted, one notice line) and 0. */
static int
conn_pp_peer_allowed(struct worker *w, int fd, const struct sockaddr *sa)
{
    char peer[64];

    if (w->conf->pp_allow.nrules == 0
        || conf_ip_allowed(&w->conf->pp_allow, sa, CONF_METHOD_ALL))
        return 1;
    fmt_peer(sa, peer, sizeof(peer));
    log_notice("connection from %s to a pp port refused: not in "
               "proxy.config.http.proxy_protocol_allowlist", peer);
    w->ctr->pp_refused++;
    close(fd);
    return 0;
}

/* The PROXY header of c was refused: why, then close. */
static void
conn_pp_fail(struct conn *c, const char *why)
{
    char peer[64];

    fmt_peer(&c->cn_peer.sa, peer, sizeof(peer));
    log_notice("conn %llu from %s: PROXY protocol header refused: %s",
               (unsigned long long)c->cn_id, peer, why);
    wk->ctr->pp_refused++;
    conn_close(c);
}

/* conn_on_read while the PROXY header is awaited.  It is peeked at, and
 * only the bytes pp_parse() says are the header's are consumed, so what
 * follows (a request, a TLS ClientHello) is read by the usual path. */
static void
conn_read_pp(struct conn *c)
{
    struct buf *in = &c->cn_in;
    struct pp_result pr;
    size_t want, take;
    ssize_t n;
    int rc;

    if (buf_alloc(in) < 0) {
        conn_close(c);
        return;
    }
    want = PP_MAX - in->end;        /* the buffer holds what was consumed */
    if (want > in->size - in->end)
        want = in->size - in->end;
    n = recv(c->cn_fd, in->data + in->end, want, MSG_PEEK);
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_close(c);
        return;
    }
    if (n == 0) {
        conn_close(c);      /* gone before its header was whole */
        return;
    }
    rc = pp_parse((const uint8_t *)in->data, in->end + (size_t)n, &pr);
    if (rc == PP_BAD) {
        conn_pp_fail(c, pr.why);
        return;
    }
    take = rc == PP_DONE ? pr.len - in->end : (size_t)n;
    if (recv(c->cn_fd, in->data + in->end, take, 0) != (ssize_t)take) {
        conn_close(c);      /* the peeked bytes are queued: cannot happen */
        return;
    }
    in->end += take;
    wk->ctr->bytes_in += take;
    if (rc == PP_AGAIN) {
        conn_wait_read(c);  /* re-arm: a persistent event would restart
                               its timer at every byte otherwise */
        return;
    }
    if (!pr.local)
        memcpy(&c->cn_peer, &pr.src, sizeof(c->cn_peer));
    c->cn_pp = 0;
    in->start = in->end = 0;
    /* from here on as if accepted now (the accept timer, or the TLS
     * handshake against the header deadline) */
    event_base_gettimeofday_cached(wk->base, &c->cn_head_start);
    conn_wait_read(c);
}

void
conn_accept(struct worker *w, int fd, const struct sockaddr *sa, socklen_t salen,
            int tls, int pp, int protos)
{
    struct conn *c;
    int one = 1;

    if (pp && !conn_pp_peer_allowed(w, fd, sa))
        return;

    /* Responses go out whole in one write; Nagle would only delay the
     * last segment of each. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if ((c = conn_new(w, fd, sa, salen)) == NULL) {
        log_error("out of memory accepting a connection");
        close(fd);
        return;
    }
    c->cn_protos = (unsigned)protos & 3;
    if (tls && tls_conn_new(c, protos) < 0) {
        static int said;
        /* conn_close() counts it out as open */
        w->ctr->conns_open++;
        w->ctr->tls_handshake_errors++;
        if (!said++)
            log_error("cannot start TLS on an ssl port (no certificate loaded?)");
        conn_close(c);
        return;
    }
    if (pp) {
        c->cn_pp = 1;
        conn_wait_read(c);  /* the PROXY header's deadline */
    } else if (tls) {
        conn_wait_read(c);  /* the handshake runs against the header
                               deadline, not the accept timer */
    }
    w->ctr->conns_accepted++;
    w->ctr->conns_open++;
}

/* A connection struct for fd (-1: an internal transaction with no client,
 * whose output is discarded: a background revalidation). */
static struct conn *
conn_new(struct worker *w, int fd, const struct sockaddr *sa, socklen_t salen)
{
    struct conn *c;

    if ((c = pool_get(&w->conn_pool)) == NULL)
        return NULL;
    memset(c, 0, sizeof(*c));
    c->cn_magic = CONN_MAGIC;
    c->cn_fd = fd;
    c->cn_id = ++w->next_id;
    c->cn_state = CONN_HEAD;
    c->cn_fresh = 1;
    if (salen <= sizeof(c->cn_peer))
        memcpy(&c->cn_peer, sa, salen);
    event_assign(&c->cn_rev, w->base, fd, EV_READ | EV_PERSIST, conn_on_read, c);
    event_base_gettimeofday_cached(w->base, &c->cn_head_start);
    c->cn_next = w->conns;
    if (w->conns)
        w->conns->cn_prev = c;
    w->conns = c;
    w->nconns++;
    if (fd >= 0)
        conn_wait_read(c);
    return c;
}

/* stale-while-revalidate: rq was just answered with a stale object;
 * fetch a fresh one in the background, once per object across all
 * workers (the fill table decides who), on an internal connection that
 * replays rq's request head and throws its answer away. */
static void
conn_bg_revalidate(struct req *rq, const char *key, size_t keylen)
{
    struct http_req *r = &rq->r;
    struct timeval now;
    struct conn *g;
    uint8_t h[16];

    if (r->has_body)
        return;     /* its replay would wait for a body never sent (and a
                       request with a body is not served from the cache) */
    event_base_gettimeofday_cached(wk->base, &now);
    cache_key_hash(wk->cache, key, keylen, h);
    switch (filltab_claim(wk->shm->filltab, h, (int)wk->slotno,
                          (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000,
                          (int64_t)wk->conf->rec.txn_no_activity_out * 1000 + 5000)) {
    case FT_CLAIMED:
        break;
    case FT_WAIT:
        filltab_unwait(wk->shm->filltab, h, (int)wk->slotno);
        return;     /* someone is fetching it already */
    default:
        return;
    }
    g = conn_new(wk, -1, rq->rq_peer, sizeof(union conn_addr));
    if (g)
        conn_req_get(g);    /* carries the claim (whash) */
    if (g == NULL || g->cn_req == NULL || buf_alloc(&g->cn_in) < 0
        || buf_grow(&g->cn_in, r->head_len) < 0) {
        fill_release(h, 0);
        if (g)
            conn_close(g);
        return;
    }
    g->cn_bg = 1;
    /* its replay is routed as the client's request was: the same local
     * address (known when a rule asked for it) */
    if (rq->rq_ops == &conn_req_ops && conn_of(rq)->cn_local_ok) {
        g->cn_local = conn_of(rq)->cn_local;
        g->cn_local_ok = 1;
    }
    g->cn_req->rq_bg = 1;
    g->cn_req->rq_claim = 1;
    memcpy(g->cn_req->whash, h, 16);
    memcpy(g->cn_in.data, r->base, r->head_len);
    g->cn_in.end = r->head_len;
    conn_process(g);
}

/* ATS slice: replay head (rq's, without its Range line and its empty
 * line) with range on an internal connection (like a background
 * revalidation: its answer goes nowhere but the cache), carrying the fill
 * claim on hash that its clients wait on. */
static int
conn_bg_slice(struct req *rq, const char *head, size_t headlen, const uint8_t hash[16],
              const char *range)
{
    size_t rl = strlen(range);
    struct conn *g;

    if (rq->r.has_body)
        return -1;
    g = conn_new(wk, -1, rq->rq_peer, sizeof(union conn_addr));
    if (g)
        conn_req_get(g);
    if (g == NULL || g->cn_req == NULL || buf_alloc(&g->cn_in) < 0
        || buf_grow(&g->cn_in, headlen + rl + 11) < 0) {
        if (g)
            conn_close(g);
        return -1;
    }
    g->cn_bg = 1;
    if (conn_of(rq)->cn_local_ok) {
        g->cn_local = conn_of(rq)->cn_local;
        g->cn_local_ok = 1;
    }
    g->cn_req->rq_bg = 1;
    g->cn_req->rq_slicer = 1;
    g->cn_req->rq_nowait = 1;   /* no claim of the object's key: ours is the part's */
    g->cn_req->rq_claim = 1;
    memcpy(g->cn_req->whash, hash, 16);
    char *d = g->cn_in.data;
    memcpy(d, head, headlen);
    memcpy(d + headlen, "Range: ", 7);
    memcpy(d + headlen + 7, range, rl);
    memcpy(d + headlen + 7 + rl, "\r\n\r\n", 4);
    g->cn_in.end = headlen + rl + 11;
    conn_process(g);
    return 0;
}

/* ------------------------------------------------------------------ */

/* The time from now to deadline into left: at least a microsecond, so a
 * deadline already past fires at once instead of meaning "no timer". */
static void
conn_time_left(const struct timeval *deadline, struct timeval *left)
{
    struct timeval now;

    event_base_gettimeofday_cached(wk->base, &now);
    if (evutil_timercmp(deadline, &now, <=)) {
        left->tv_sec = 0;
        left->tv_usec = 1;
    } else {
        evutil_timersub(deadline, &now, left);
    }
}

/* tv, cut to what is left of the client transaction's
 * transaction_active_timeout_in (0: no cap), counted from the first byte
 * of its head.  A tv of zero means "no timer" and becomes the cap alone.
 * Returns 1 when c should have a timer at all. */
static int
conn_txn_cap(const struct conn *c, struct timeval *tv)
{
    int active = wk->conf->rec.txn_active_in;
    struct timeval deadline, left;

    if (active <= 0)
        return evutil_timerisset(tv);
    deadline = c->cn_head_start;
    deadline.tv_sec += active;
    conn_time_left(&deadline, &left);
    if (!evutil_timerisset(tv) || evutil_timercmp(&left, tv, <))
        *tv = left;
    return 1;
}

/* Arm the read event for c's state.  Its timer runs only while we wait
 * for the client to send (ATS's _in timeouts: the accept, keep-alive,
 * header and transaction inactivity timers); while the client waits for
 * us (the origin's _out timers run, or the write event's) it reads
 * without one, only to notice a close and buffer pipelined requests. */
static void
conn_wait_read(struct conn *c)
{
    const struct conf_records *rec = &wk->conf->rec;
    struct timeval tv = { 0, 0 };

    if (c->cn_fd < 0)
        return;     /* internal: nothing to read */
    switch (c->cn_state) {
    case CONN_IDLE:
        tv.tv_sec = rec->ka_no_activity_in;
        break;
    case CONN_HEAD: {
        if (c->cn_pp) {
            /* the PROXY header: whole within the accept timeout (or the
             * header timeout if shorter) from accept, however it drips */
            struct timeval deadline = c->cn_head_start;
            deadline.tv_sec += rec->accept_no_activity < rec->request_header_timeout
                               ? rec->accept_no_activity : rec->request_header_timeout;
            conn_time_left(&deadline, &tv);
            break;
        }
        if (c->cn_fresh && c->cn_in.end == c->cn_in.start
            && (c->cn_tls == NULL || c->cn_tls_up)) {
            /* accepted, nothing sent yet (a TLS handshake counts as the
             * head: it runs against the header deadline) */
            tv.tv_sec = rec->accept_no_activity;
            break;
        }
        struct timeval deadline = c->cn_head_start;
        deadline.tv_sec += rec->request_header_timeout;
        conn_time_left(&deadline, &tv);
        if (tv.tv_sec >= rec->txn_no_activity_in) {
            tv.tv_sec = rec->txn_no_activity_in;
            tv.tv_usec = 0;
        }
        break;
    }
    case CONN_BODY:
        tv.tv_sec = rec->txn_no_activity_in;
        conn_txn_cap(c, &tv);
        break;
    case CONN_SEND:
    case CONN_PROXY:
        /* event_add() keeps a pending event's old timer: drop it */
        event_remove_timer(&c->cn_rev);
        if (conn_txn_cap(c, &tv))
            event_add(&c->cn_rev, &tv);
        else
            event_add(&c->cn_rev, NULL);
        if (c->cn_tls && tls_conn_pending(c))
            event_active(&c->cn_rev, EV_READ, 1);
        return;
    case CONN_WAIT:
    case CONN_TUNNEL:
        return;     /* reads nothing until resumed (conn_after_steps), or
                       until the tunnel takes the socket (conn_tunnel) */
    case CONN_LINGER:
        tv.tv_sec = CONN_LINGER_MS / 1000;
        break;
    }
    if (wk->draining && (c->cn_state == CONN_IDLE
                         || (c->cn_state == CONN_HEAD && c->cn_in.end == c->cn_in.start))) {
        struct timeval g = { 0, DRAIN_IDLE_GRACE_MS * 1000 };
        if (evutil_timercmp(&g, &tv, <))
            tv = g;
    }
    event_add(&c->cn_rev, &tv);
    if (c->cn_tls && tls_conn_pending(c))
        event_active(&c->cn_rev, EV_READ, 1);   /* the socket will not say */
}

/* The client does not take our output yet: wait for it.  The write
 * event's timer is now the client's inactivity timer
 * (transaction_no_activity_timeout_in), restarted only when bytes moved,
 * so an origin refilling our buffer cannot keep alive a client that reads
 * nothing; the read side stops timing (unless a head is still being read
 * behind the response).  Returns 0, or -1: out of memory. */
static int
conn_wait_write(struct conn *c, int progress)
{
    struct timeval tv = { wk->conf->rec.txn_no_activity_in, 0 };

    conn_txn_cap(c, &tv);
    if (c->cn_state == CONN_SEND || c->cn_state == CONN_PROXY)
        event_remove_timer(&c->cn_rev);
    if (c->cn_tls && c->cn_tls_wr) {
        /* TLS writing may have to read first (tls.c) */
        event_add(&c->cn_rev, &tv);
        return 0;
    }
    if (!progress && c->cn_wev && event_pending(&c->cn_wev->ev, EV_WRITE, NULL))
        return 0;   /* nothing moved: the running timer stands */
    if (conn_want_write(c, &tv) < 0)
        return -1;
    c->cn_wev->unsent = progress ? sock_unsent(c->cn_fd) : -1;
    return 0;
}

/* The answer held while a request body was read is void (the body was
 * malformed, or never came): it never reaches the client. */
static void
conn_void_held(struct conn *c)
{
    c->cn_out.end = c->cn_hold_mark;
    c->cn_hold = 0;
    if (c->cn_req)
        resp_uncount(c->cn_req);
}

/* Take over what the request's transaction asked for: it writes only
 * its own fields (rq_close, rq_abort, rq_body_owned, rq_up, rq_push), and
 * the connection's state follows them here. */
static inline void
conn_sync(struct conn *c)
{
    struct req *rq = c->cn_req;

    if (rq == NULL)
        return;
    if (rq->rq_close)
        c->cn_close = 1;
    if (rq->rq_abort)
        c->cn_abort = 1;
    if (rq->rq_up || rq->rq_push)
        c->cn_state = rq->rq_body_owned ? CONN_BODY : CONN_PROXY;
    else if (rq->rq_tunnel)
        c->cn_state = CONN_TUNNEL;
    else if ((c->cn_state == CONN_BODY && !c->cn_hold) || c->cn_state == CONN_PROXY
             || c->cn_state == CONN_TUNNEL)
        c->cn_state = CONN_SEND;    /* the transaction is over */
}

/* Refuse a request we cannot trust (a head that does not parse, a body
 * that does not, a timeout): the request answers it (SYNTH), then we
 * close. */
static void
conn_refuse(struct conn *c, int status, const char *reason)
{
    if (c->cn_hold)     /* the request turned out malformed */
        conn_void_held(c);
    if (c->cn_req) {
        c->cn_req->rq_start = c->cn_head_start;
        req_refuse(c->cn_req, status, reason);
    } else {
        /* no request to answer with: out of memory */
        static const char oom[] = "HTTP/1.1 503 Service Unavailable\r\n"
                                  "Connection: close\r\nContent-Length: 0\r\n\r\n";
        (void)reason;
        if (buf_alloc(&c->cn_out) == 0 && c->cn_out.size - c->cn_out.end >= sizeof(oom)) {
            memcpy(c->cn_out.data + c->cn_out.end, oom, sizeof(oom) - 1);
            c->cn_out.end += sizeof(oom) - 1;
        }
    }
    c->cn_close = 1;
    c->cn_state = CONN_SEND;
}

/* ------------------------------------------------------------------ */
/* Requests: the steps (req.c) decide, the connection carries it out. */

/* Every answer given here rather than by an origin or a PUSH (admin
 * pages, ip_allow refusals, redirects, 404s, PURGE, TRACE and OPTIONS,
 * hits, errors) ends through this one function, which decides what
 * becomes of the request's body: read and dropped before the answer goes
 * out (held from `mark` in cn_out, so a malformed body still gets its 400
 * instead), or the connection closes after the answer.  Never is a body
 * left in the input to be parsed as the next request. */
static void
conn_answered(struct conn *c, size_t mark, int keep_alive)
{
    const struct http_req *r = &c->cn_req->r;

    if (c->cn_req->rq_close)
        c->cn_close = 1;
    if (r->has_body && req_body_discardable(r) && !c->cn_close) {
        c->cn_hold = 1;
        c->cn_hold_mark = mark;
        c->cn_discarded = 0;
        c->cn_state = CONN_BODY;
        return;
    }
    if (!keep_alive || !req_body_discardable(r))
        c->cn_close = 1;
}

/* The steps ran and parked (or ended): put the connection in the state
 * they ask for.  mark: cn_out's end before the answer. */
static void
conn_after_steps(struct conn *c, size_t mark)
{
    struct req *rq = c->cn_req;
    int keep_alive = rq->r.keep_alive && !worker_closing();

    switch (rq->rq_step) {
    case REQ_WAIT:
        /* reads nothing (the head stays where it is in the input) until
         * the request moves (conn_req_moved) */
        c->cn_state = CONN_WAIT;
        event_del(&c->cn_rev);
        conn_unwant_write(c);
        return;
    case REQ_TUNNEL:
        /* CONNECT connecting: nothing is read (bytes past the head are
         * the tunnel's) until the tunnel takes over or it failed */
        conn_sync(c);
        event_del(&c->cn_rev);
        return;
    case REQ_FETCH:
    case REQ_PUSH:
        conn_sync(c);
        if (c->cn_state == CONN_BODY || c->cn_state == CONN_PROXY)
            return;     /* the body belongs to the transaction / PUSH */
        /* it failed at once and queued its own answer (a stale object's,
         * maybe, with its body lent: DONE once that is out, conn_flush) */
        if (!keep_alive || rq->r.has_body)
            c->cn_close = 1;
        return;
    default:    /* DONE: answered; HIT: answered, its body lent */
        c->cn_state = CONN_SEND;
        conn_answered(c, mark, keep_alive);
        return;
    }
}

/* The connection that owns rq (a callback's way back: magic checked). */
static struct conn *
conn_of(const struct req *rq)
{
    struct conn *c = rq->rq_owner;

    magic_check(c->cn_magic, CONN_MAGIC);
    return c;
}

/* The end of the live head in cn_in, or 0.  A request still in progress
 * after its head was stepped over (proxied, its body read or dropped)
 * is still read through rq->r, which points into cn_in: at the response,
 * Via's codes and the plugins' request fields (headers.so's if-field=,
 * deciding what is stored).  Pipelined bytes or body bytes read into the
 * buffer must not land on it: neither the reset of an empty buffer nor a
 * compaction goes below this end.  (A request answered at once had its
 * head reset when it was stepped over: 0.) */
static size_t
conn_head_end(const struct conn *c)
{
    const struct buf *in = &c->cn_in;
    const struct http_req *r;
    uintptr_t b, d = (uintptr_t)in->data;

    if (c->cn_req == NULL || in->data == NULL || (r = &c->cn_req->r)->head_len == 0)
        return 0;
    b = (uintptr_t)r->base;
    if (b < d || b + r->head_len > d + in->start)
        return 0;       /* not in this buffer, or not stepped over yet */
    return (size_t)(b - d) + r->head_len;
}

/* The current head has been dispatched: step over it. */
static void
conn_consume_head(struct conn *c)
{
    struct http_req *r = &c->cn_req->r;

    c->cn_in.start += r->start + r->head_len;
    wk->ctr->bytes_in += r->start + r->head_len;
    if (c->cn_state == CONN_SEND)
        http_req_reset(r);
}

/* A complete, checked head: run the request's steps. */
static void
conn_request(struct conn *c)
{
    size_t mark = c->cn_out.end;

    c->cn_req->rq_start = c->cn_head_start;
    req_run(c->cn_req);
    conn_after_steps(c, mark);
}

/* A waiting request moved (req.c, after a WAIT): carry on. */
static void
conn_req_moved(struct req *rq)
{
    struct conn *c = conn_of(rq);

    c->cn_state = CONN_SEND;
    conn_after_steps(c, c->cn_out.end);
    if (c->cn_state == CONN_WAIT)
        return;     /* another fill started meanwhile: wait for that one */
    conn_consume_head(c);
    conn_process(c);
}

static int
conn_req_flush(struct req *rq)
{
    return conn_flush(conn_of(rq));
}

static void
conn_req_body_resume(struct req *rq)
{
    conn_read_resume(conn_of(rq));
}

/* The local address, looked up the first time a request asks (a remap
 * rule with @in_ip= or map_with_recv_port): accepting costs no syscall
 * more when no rule needs it. */
static const struct sockaddr *
conn_local(struct req *rq)
{
    struct conn *c = conn_of(rq);
    socklen_t sl = sizeof(c->cn_local);

    if (!c->cn_local_ok && c->cn_fd >= 0
        && getsockname(c->cn_fd, &c->cn_local.sa, &sl) == 0 && sl <= sizeof(c->cn_local))
        c->cn_local_ok = 1;
    return c->cn_local_ok ? &c->cn_local.sa : NULL;
}

static const struct req_owner_ops conn_req_ops = {
    .moved = conn_req_moved,
    .flush = conn_req_flush,
    .body_resume = conn_req_body_resume,
    .revalidate = conn_bg_revalidate,
    .slice = conn_bg_slice,
    .local = conn_local,
};

/* From now on c speaks HTTP/2 (h2.c takes its events).  Returns 0, or -1
 * when c was closed. */
static const struct h2_conn_ops conn_h2_ops = {
    .close = conn_close,
    .revalidate = conn_bg_revalidate,
};

static int
conn_h2(struct conn *c)
{
    conn_unwant_write(c);
    buf_release(&c->cn_out);
    if (c->cn_req)
        conn_req_put(c);
    c->cn_fresh = 0;
    c->cn_state = CONN_SEND;
    if (h2_attach(c, &conn_h2_ops) < 0) {
        conn_close(c);
        return -1;
    }
    return 0;
}

/* A cleartext port that speaks h2c: does the input start with the
 * HTTP/2 preface (prior knowledge, RFC 9113 3.3)?  1: yes, switch; 0:
 * no, HTTP/1.x; -1: too few bytes to tell.  A port that speaks only h2c
 * switches on any input (nghttp2 refuses a wrong preface). */
static int
conn_h2_preface(const struct conn *c)
{
    size_t avail = c->cn_in.end - c->cn_in.start;

    if (!(c->cn_protos & CONF_PROTO_H1))
        return 1;
    if (memcmp(c->cn_in.data + c->cn_in.start, H2_PREFACE,
               avail < H2_PREFACE_LEN ? avail : H2_PREFACE_LEN) != 0)
        return 0;
    return avail >= H2_PREFACE_LEN ? 1 : -1;
}

/* conn_process, a body the origin transaction owns: hand it what the
 * input holds.  1: go on (more of it is read already), 0: stop here. */
static int
conn_body_proxied(struct conn *c)
{
    size_t from = c->cn_in.start;
    int rc = proxy_client_body(c->cn_req);

    conn_sync(c);
    /* The origin may have taken that piece at once (its body_resume,
     * called from in here, does nothing): the rest of the body already
     * read is not left waiting for more input that may never come. */
    if (rc == HTTP_AGAIN && c->cn_in.start != from && c->cn_state == CONN_BODY
        && c->cn_in.end > c->cn_in.start)
        return 1;
    if (rc == HTTP_AGAIN || rc == HTTP_OK)
        return 0;       /* more body later, or the response */
    if (conn_up(c) && conn_up(c)->up_state == UP_BODY) {
        c->cn_abort = 1;
        return 0;
    }
    proxy_abort(c->cn_req);
    conn_refuse(c, rc, c->cn_req->r.reason);
    return 0;
}

/* Parse and answer as many complete requests as the input holds.
 * Returns 0, or -1 when the connection was closed (c is gone). */
static int
conn_process(struct conn *c)
{
    struct worker *w = wk;
    int rc;

    if (c->cn_in_process)
        return 0;
    c->cn_in_process = 1;
    while (!c->cn_close && !c->cn_abort) {
        size_t avail = c->cn_in.end - c->cn_in.start;

        if ((c->cn_out.end - c->cn_out.start > OUT_HIGH || conn_body_len(c))
            && !c->cn_hold)
            break;      /* let the client read first */
        if (c->cn_state == CONN_IDLE || c->cn_state == CONN_SEND) {
            if (avail == 0)
                break;
            /* A new request: whatever answered the last one (a proxy, a
             * PUSH, a refusal) may have left the parser mid-state. */
            if (c->cn_req)
                req_reset(c->cn_req);
            c->cn_state = CONN_HEAD;
            event_base_gettimeofday_cached(w->base, &c->cn_head_start);
        }
        if (c->cn_state == CONN_HEAD) {
            struct http_req *r;
            char *p;

            if (avail == 0)
                break;
            conn_req_get(c);
            if (c->cn_req == NULL) {
                conn_refuse(c, 503, "out of memory");
                break;
            }
            r = &c->cn_req->r;
            p = c->cn_in.data + c->cn_in.start;
            rc = http_head_scan(r, p, avail, &w->limits);
            if (rc == HTTP_AGAIN)
                break;
            if (rc != HTTP_OK) {
                conn_refuse(c, rc, r->reason);
                break;
            }
            rc = http_req_parse(r, p + r->start);
            if (rc != HTTP_OK) {
                conn_refuse(c, rc, r->reason);
                break;
            }
            c->cn_state = CONN_SEND;
            c->cn_fresh = 0;
            conn_request(c);
            if (c->cn_state == CONN_WAIT)
                break;      /* the head stays in the buffer until we resume */
            conn_consume_head(c);
            if (c->cn_state == CONN_TUNNEL)
                break;      /* what follows is the tunnel's, not requests */
            continue;
        }
        if (c->cn_state == CONN_BODY) {
            struct http_req *r = &c->cn_req->r;
            size_t used;

            if (c->cn_req->rq_push) {
                rc = push_body(c->cn_req);
                if (rc == HTTP_AGAIN)
                    break;
                if (rc != HTTP_OK) {
                    conn_refuse(c, rc, r->reason);
                    break;
                }
                req_answer_ours(c->cn_req);   /* its answer, then DONE */
                conn_sync(c);
                http_req_reset(r);
                continue;
            }
            if (conn_up(c)) {
                if (conn_body_proxied(c))
                    continue;
                break;
            }
            rc = http_req_body(r, c->cn_in.data + c->cn_in.start, avail,
                               &used, NULL, NULL);
            c->cn_in.start += used;
            w->ctr->bytes_in += used;
            c->cn_discarded += used;
            if (rc == HTTP_AGAIN && c->cn_discarded > REQ_DISCARD_MAX) {
                /* Not worth swallowing: answer and close. */
                c->cn_hold = 0;
                c->cn_close = 1;
                break;
            }
            if (rc == HTTP_AGAIN)
                break;
            if (rc != HTTP_OK) {
                conn_refuse(c, rc, r->reason);
                break;
            }
            c->cn_hold = 0;
            http_req_reset(r);
            c->cn_state = CONN_SEND;
            if (!r->keep_alive || worker_closing())
                c->cn_close = 1;
            continue;
        }
        break;
    }
    if (c->cn_in.start == c->cn_in.end)
        c->cn_in.start = c->cn_in.end = conn_head_end(c);
    c->cn_in_process = 0;
    return conn_flush(c);
}

/* Write cn_out, then the body lent with the answer, until all is out.
 * 0: all written; 1: the socket is full (wait to write); -1: closed (the
 * peer is gone: nothing to save).  *progress: set once bytes moved. */
static int
conn_send(struct conn *c, int *progress)
{
    struct buf *o = &c->cn_out;
    struct req *rq = c->cn_req;

    while (o->end > o->start || conn_body_len(c) > 0) {
        struct iovec iov[2];
        int n = 0;
        size_t head = o->end - o->start, blen = conn_body_len(c);
        ssize_t k;

        if (head) {
            iov[n].iov_base = o->data + o->start;
            iov[n++].iov_len = head;
        }
        if (blen) {
            iov[n].iov_base = (void *)rq->rq_body;
            iov[n++].iov_len = blen;
        }
        /* An internal transaction has no client: its answer is dropped. */
        if (c->cn_tls)
            k = tls_conn_write(c, o->data + o->start, head, blen ? rq->rq_body : NULL, blen);
        else
            k = c->cn_fd >= 0 ? writev(c->cn_fd, iov, n) : (ssize_t)(head + blen);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 1;
            conn_close(c);
            return -1;
        }
        *progress = 1;
        wk->ctr->bytes_out += (uint64_t)k;
        if ((size_t)k <= head) {
            o->start += (size_t)k;
        } else {
            o->start = o->end;
            k -= (ssize_t)head;
            rq->rq_body += k;
            rq->rq_body_len -= (size_t)k;
            if (rq->rq_up)
                proxy_client_sent(rq, (size_t)k);
            else if (rq->rq_body_len == 0)
                store_body_more(rq);    /* a large hit's next extent */
        }
    }
    return 0;
}

/* The request is a tunnel now (tunnel.c: a CONNECT's target is
 * connected, or the origin answered 101 to an Upgrade): the relay takes
 * the socket, the request, the bytes still queued for the client (the
 * 200 or 101 head last among them) and those the client sent past the
 * head.  This connection ends here; the tunnel counts as it (nconns,
 * conns_open) until it closes.  Returns -1: c is gone. */
/* A tunnel's request ends with the tunnel: DONE, and freed. */
static void
conn_tunnel_end(struct req *rq)
{
    req_finish(rq);
    req_free(rq);
}

static int
conn_tunnel(struct conn *c)
{
    struct req *rq = c->cn_req;
    int fd = c->cn_fd;

    if (c->cn_tls || fd < 0) {
        conn_close(c);      /* never asked for (tunnel.c): aborts it */
        return -1;
    }
    event_del(&c->cn_rev);
    conn_unwant_write(c);
    c->cn_req = NULL;
    c->cn_fd = -1;          /* conn_close leaves it, and its count, open */
    tunnel_attach(rq, fd, &c->cn_in, &c->cn_out, conn_tunnel_end);
    conn_close(c);
    return -1;
}

/* Write what is queued (our bytes, then body bytes lent by the origin
 * transaction), let the transaction refill, and when all is done: close,
 * go idle, or answer the next pipelined request.
 *
 * Re-entry: the transaction may find the origin broken while we pump it
 * (proxy_pump -> up_fail) and call back here; that nested call returns at
 * once and this loop, which looks at the state again after every pump,
 * does the work.  Without the guard the nested call could close c under
 * the outer loop (a client that half-closed, then an origin that failed).
 * Returns 0, or -1 when the connection was closed (c is gone). */
static int
conn_flush(struct conn *c)
{
    struct buf *o = &c->cn_out;
    int progress = 0, k;

    if (c->cn_in_process || c->cn_in_flush)
        return 0;       /* the outer caller flushes when it is done */
    c->cn_in_flush = 1;
    for (;;) {
        conn_sync(c);
        if (c->cn_abort) {
            conn_reset(c);
            return -1;
        }
        if (c->cn_state == CONN_TUNNEL && tunnel_ready(c->cn_req))
            return conn_tunnel(c);
        if (!c->cn_hold && (k = conn_send(c, &progress)) != 0) {
            if (k < 0)
                return -1;      /* closed */
            c->cn_in_flush = 0;
            if (conn_wait_write(c, progress) < 0) {
                conn_close(c);
                return -1;
            }
            return 0;
        }
        if (conn_up(c) == NULL && conn_body_len(c) == 0 && c->cn_req)
            req_sent_all(c->cn_req);    /* a hit's or a transaction's answer
                                           is out: DONE */
        if (!c->cn_hold)
            o->start = o->end = 0;
        if (conn_up(c) == NULL || c->cn_hold)
            break;
        switch (proxy_pump(c->cn_req)) {
        case WK_MORE:
            continue;
        case WK_DONE:
            continue;   /* DONE once a body lent from the cache is out too */
        case WK_ABORT:
            conn_reset(c);
            return -1;
        case WK_WAIT:
            conn_sync(c);
            c->cn_in_flush = 0;
            conn_unwant_write(c);
            if (!c->cn_in_eof)
                conn_wait_read(c);
            return 0;
        }
    }
    c->cn_in_flush = 0;
    conn_unwant_write(c);
    if (c->cn_req && (rww_waiting(c->cn_req)
                      || (c->cn_req->rq_slice && slice_waiting(c->cn_req))))
        return 0;   /* a joiner that caught up with the fill: the filler
                       wakes it (worker/rww.c), which flushes again; a
                       stream: its next block (worker/slice.c) */
    if (c->cn_fd < 0 && c->cn_state != CONN_PROXY && c->cn_state != CONN_WAIT) {
        conn_close(c);      /* the background transaction is over */
        return -1;
    }
    if (!c->cn_close && (c->cn_hold || c->cn_state == CONN_BODY)) {
        if (c->cn_in_eof) {
            conn_close(c);
            return -1;
        }
        conn_wait_read(c);
        return 0;
    }
    if (c->cn_close)
        return conn_linger(c);
    if (c->cn_state == CONN_TUNNEL)
        return 0;   /* CONNECT connecting: the tunnel takes the socket, and
                       an end of stream read already stays for it to read */
    if (c->cn_state == CONN_SEND && c->cn_in.end > c->cn_in.start)
        return conn_process(c);     /* pipelined requests behind a proxied one */
    if (c->cn_state == CONN_SEND) {
        /* Between requests with nothing pending: give memory back. */
        c->cn_state = CONN_IDLE;
        buf_release(&c->cn_in);
        buf_release(&c->cn_out);
        conn_req_put(c);
    }
    if (c->cn_in_eof) {
        /* The client half-closed: nothing more will come. */
        conn_close(c);
        return -1;
    }
    if (c->cn_read_blocked) {
        c->cn_read_blocked = 0;
    }
    conn_wait_read(c);
    return 0;
}

/* The origin took the request body we had: read more from the client. */
static void
conn_read_resume(struct conn *c)
{
    if (c->cn_in_process)
        return;
    if (c->cn_read_blocked) {
        c->cn_read_blocked = 0;
        conn_wait_read(c);
    }
    if (c->cn_in.end > c->cn_in.start)
        conn_process(c);
}

static void
conn_timeout(struct conn *c)
{
    wk->ctr->timeouts++;
    switch (c->cn_state) {
    case CONN_HEAD:
        if (c->cn_in.end > c->cn_in.start) {
            conn_refuse(c, 408, "request header timeout");
            conn_flush(c);
            return;
        }
        break;
    case CONN_BODY:
        if (conn_up(c) == NULL || conn_up(c)->up_state < UP_BODY) {
            proxy_abort(c->cn_req);
            conn_refuse(c, 408, "request body timeout");
            conn_flush(c);
            return;
        }
        break;
    default:
        break;
    }
    conn_close(c);
}

/* conn_on_read, a timer: 1 when it was handled (the connection may be
 * gone).  A timer that expires as input arrives (libevent then reports
 * both) loses to the input: closing with unread bytes would answer the
 * client's request with a reset (a drained keep-alive connection whose
 * next request was on its way, under load).  An idle connection whose
 * request is already waiting is served, not closed. */
static int
conn_read_timer(struct conn *c, evutil_socket_t fd, short what)
{
    char b;

    if (!(what & EV_TIMEOUT) || (what & EV_READ))
        return 0;
    if (c->cn_state == CONN_LINGER || c->cn_pp) {
        if (c->cn_pp)
            wk->ctr->timeouts++;
        conn_close(c);      /* a PROXY header late: closed, no answer */
        return 1;
    }
    if ((c->cn_state == CONN_IDLE
         || (c->cn_state == CONN_HEAD && c->cn_in.end == c->cn_in.start))
        && (recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0
            || (c->cn_tls && tls_conn_pending(c))))
        return 0;
    conn_timeout(c);
    return 1;
}

/* conn_on_read, TLS first: the handshake, or a write that waited for
 * readability.  1 when it was handled (the connection may be gone). */
static int
conn_read_tls(struct conn *c)
{
    c->cn_tls_rw = 0;
    if (!c->cn_tls_up) {
        enum tls_want rc = tls_conn_handshake(c);
        if (rc == TLS_WANT_WRITE) {
            struct timeval tv = { wk->conf->rec.txn_no_activity_in, 0 };
            if (conn_want_write(c, &tv) < 0)
                rc = TLS_ERR;
        } else if (rc != TLS_ERR) {
            conn_unwant_write(c);
        }
        if (rc == TLS_ERR) {
            conn_close(c);
            return 1;
        }
        conn_wait_read(c);  /* the head deadline runs from accept */
        if (rc != TLS_OK)
            return 1;
        if ((c->cn_protos & CONF_PROTO_H2)
            && (conf_tls_alpn_h2(c->cn_tls) || !(c->cn_protos & CONF_PROTO_H1))) {
            conn_h2(c);     /* ALPN chose h2 (or the port speaks nothing else) */
            return 1;
        }
    }
    if (c->cn_tls_wr) {
        /* a write waited for this readability */
        c->cn_tls_wr = 0;
        conn_flush(c);
        return 1;
    }
    return 0;
}

/* cn_in's unread bytes to the front, behind the live head if there is
 * one (conn_head_end), which moves to the very front first.  0, or -1
 * when no room could be made (the unread bytes fill all the rest). */
static int
conn_compact(struct conn *c)
{
    struct buf *in = &c->cn_in;
    size_t keep = conn_head_end(c);
    struct http_req *r;

    if (keep == 0) {
        buf_grow(in, 1);    /* compacts; never grows */
        return 0;
    }
    r = &c->cn_req->r;
    if (r->base != in->data) {
        memmove(in->data, r->base, r->head_len);
        r->base = in->data;
        keep = r->head_len;
    }
    if (keep < in->start) {
        memmove(in->data + keep, in->data + in->start, in->end - in->start);
        in->end -= in->start - keep;
        in->start = keep;
        return 0;
    }
    if (in->end > in->start)
        return -1;
    /* a head as large as the buffer, all else read: room for the body
     * (start 0 for the call: buf_grow would compact over the head) */
    in->start = 0;
    if (buf_grow(in, BUF_SIZE) < 0) {
        in->start = keep;
        return -1;
    }
    in->start = keep;
    r->base = in->data;
    return 0;
}

/* conn_on_read: room in cn_in for more.  0, or -1 when it was handled
 * instead (read blocked, refused or closed). */
static int
conn_read_room(struct conn *c)
{
    struct buf *in = &c->cn_in;
    size_t limit = wk->limits.head_max + BUF_SIZE;

    if (buf_alloc(in) < 0) {
        conn_close(c);
        return -1;
    }
    if (in->end < in->size)
        return 0;
    if (in->start > 0 && conn_compact(c) == 0) {
        /* room at the end */
    } else if (c->cn_state == CONN_HEAD && in->size < limit) {
        if (buf_grow(in, BUF_SIZE) < 0) {
            conn_close(c);
            return -1;
        }
    } else if (c->cn_state == CONN_HEAD && c->cn_out.end == c->cn_out.start
               && conn_body_len(c) == 0) {
        /* A head that fills the largest buffer and is still not whole
         * (the scanner's own limits should have said so first): never
         * stop reading without a timer, answer. */
        event_del(&c->cn_rev);
        conn_refuse(c, 431, "request header section too large");
        conn_flush(c);
        return -1;
    } else {
        /* Full of input we cannot take yet (pipelined requests behind a
         * slow response, or a body the origin is slow to accept): stop
         * reading until that changes. */
        event_del(&c->cn_rev);
        c->cn_read_blocked = 1;
        return -1;
    }
    return 0;
}

/* conn_on_read: the client closed its side. */
static void
conn_read_eof(struct conn *c)
{
    c->cn_in_eof = 1;
    event_del(&c->cn_rev);
    switch (c->cn_state) {
    case CONN_IDLE:
        conn_close(c);
        return;
    case CONN_HEAD:
    case CONN_BODY:
        /* Mid-request EOF: this request can never complete. */
        if (c->cn_in.end == c->cn_in.start && c->cn_state == CONN_HEAD
            && c->cn_out.end == c->cn_out.start && !conn_up(c)) {
            conn_close(c);
            return;
        }
        if (c->cn_state == CONN_BODY || c->cn_in.end > c->cn_in.start) {
            proxy_abort(c->cn_req);
            if (c->cn_hold)
                conn_void_held(c);
            c->cn_close = 1;
        }
        break;
    default:
        /* PROXY / SEND: finish the response, then close. */
        break;
    }
    conn_flush(c);
}

static void
conn_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct buf *in = &c->cn_in;
    ssize_t n;

    magic_check(c->cn_magic, CONN_MAGIC);
    if (conn_read_timer(c, fd, what))
        return;
    if (c->cn_pp) {
        conn_read_pp(c);
        return;
    }
    if (c->cn_state == CONN_LINGER) {
        char sink[4096];
        n = read(fd, sink, sizeof(sink));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            conn_close(c);
        return;
    }
    if (c->cn_tls && conn_read_tls(c))
        return;
    if (conn_read_room(c) < 0)
        return;
    if (c->cn_fresh && c->cn_state == CONN_HEAD && in->end == in->start
        && (c->cn_tls == NULL || c->cn_tls_up))
        /* the header deadline runs from the head's first byte */
        event_base_gettimeofday_cached(wk->base, &c->cn_head_start);
    if (c->cn_tls) {
        n = tls_conn_read(c, in->data + in->end, in->size - in->end);
        if (n < 0 && c->cn_tls_rw) {
            /* the read waits for writability */
            struct timeval tv = { wk->conf->rec.txn_no_activity_in, 0 };
            if (conn_want_write(c, &tv) < 0)
                errno = ENOMEM;     /* closed below */
        }
    } else {
        n = read(fd, in->data + in->end, in->size - in->end);
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_close(c);
        return;
    }
    if (n == 0) {
        conn_read_eof(c);
        return;
    }
    in->end += (size_t)n;
    if (c->cn_fresh && (c->cn_protos & CONF_PROTO_H2) && c->cn_tls == NULL) {
        int k = conn_h2_preface(c);     /* h2c with prior knowledge? */
        if (k < 0)
            return;                     /* too few bytes to tell */
        if (k > 0) {
            conn_h2(c);
            return;
        }
    }
    conn_process(c);
}

static void
conn_on_write(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    magic_check(c->cn_magic, CONN_MAGIC);
    if (what & EV_TIMEOUT) {
        struct conn_wev *e = c->cn_wev;
        struct timeval tv = { wk->conf->rec.txn_no_activity_in, 0 };
        int q = sock_unsent(fd);

        /* Still reading, only slower than the kernel's buffer lets us
         * see: not inactive (unless the transaction's cap has come). */
        if (e && q >= 0 && e->unsent >= 0 && q < e->unsent
            && !(conn_txn_cap(c, &tv) && tv.tv_sec == 0 && tv.tv_usec <= 1)) {
            e->unsent = q;
            event_add(&e->ev, &tv);
            return;
        }
        /* A reset, not a close: the data the client will not read must
         * not sit in our send queue for minutes (FIN-WAIT-1). */
        struct linger lg = { 1, 0 };
        setsockopt(c->cn_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        wk->ctr->timeouts++;
        conn_close(c);
        return;
    }
    if (c->cn_tls && (!c->cn_tls_up || c->cn_tls_rw)) {
        /* the handshake, or a read, waited for this writability */
        conn_unwant_write(c);
        conn_on_read(fd, EV_READ, c);
        return;
    }
    if (conn_flush(c) < 0 || c->cn_state == CONN_LINGER)
        return;
    if (c->cn_read_blocked && c->cn_out.end == c->cn_out.start) {
        c->cn_read_blocked = 0;
        if (c->cn_in.end > c->cn_in.start)
            conn_process(c);
        else
            conn_wait_read(c);
    }
}

/* ------------------------------------------------------------------ */

void
conn_drain_all(struct worker *w)
{
    struct conn *c, *next;

    for (c = w->conns; c; c = next) {
        next = c->cn_next;
        if (c->cn_h2) {
            h2_drain(c);    /* GOAWAY; its streams finish */
            continue;
        }
        /* Idle ones get a short grace (conn_wait_read applies it); busy
         * ones finish and answer with Connection: close. */
        if (c->cn_state == CONN_IDLE
            || (c->cn_state == CONN_HEAD && c->cn_in.end == c->cn_in.start))
            conn_wait_read(c);
    }
}

void
conn_close_all(struct worker *w)
{
    while (w->conns)
        conn_close(w->conns);
}
