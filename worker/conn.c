/*
 * worker/conn.c: a client connection, as an explicit state machine.
 *
 *   accept -> HEAD --(head complete, checked)--> route -> response queued
 *               ^         |                            |
 *               |         +--(body)--> BODY ------------+
 *               |                                      v
 *             IDLE <---(flushed, keep-alive, no input)-- SEND
 *                                                      |
 *                                       (close)  -> LINGER -> closed
 *
 * Pipelining: requests are parsed strictly one after another from the
 * input buffer, and their responses are appended to the output buffer in
 * the same order, so answers can never be reordered.  While the output
 * buffer holds more than OUT_HIGH bytes we stop parsing (back-pressure on a
 * client that sends but does not read).
 *
 * Ownership: conn_close() is the one place that releases what a connection
 * owns (fd, both events, both buffers, the request context) and returns the
 * struct to the free list.  An idle connection holds only the struct; its
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

#define OUT_HIGH         (BUF_SIZE / 2)
#define CONN_LINGER_MS   2000
/* A request body we do not need is read and dropped up to this size;
 * beyond it we answer and close rather than swallow an upload. */
#define DISCARD_MAX      (1024 * 1024)
/* On drain, a connection with no request in progress gets this long to
 * send one (answered with Connection: close) before it is closed: closing
 * at once would race a client that is sending right now. */
#define DRAIN_IDLE_GRACE_MS 1000

/* The methods a mapped URL takes (405 and OPTIONS answers); PUSH too when
 * proxy.config.http.push_method_enabled says so, not listed. */
#define CONN_ALLOW "Allow: GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, PURGE\r\n"

static void conn_on_read(evutil_socket_t fd, short what, void *arg);
static void conn_on_write(evutil_socket_t fd, short what, void *arg);
static int conn_process(struct conn *c);
static void conn_dispatch(struct conn *c);
static void conn_wait_unlink(struct conn *c);
static struct conn *conn_new(struct worker *w, int fd, const struct sockaddr *sa,
                             socklen_t salen);
static void conn_wait_read(struct conn *c);
static int conn_wait_write(struct conn *c, int progress);

/* ------------------------------------------------------------------ */

/* Wait (up to tv) until c's socket takes more output.  The write event is
 * lent from the worker's pool for as long as the wait lasts: most
 * responses leave in one writev and never need one, and an idle
 * connection carries only its read event.  -1: out of memory. */
int
conn_want_write(struct conn *c, const struct timeval *tv)
{
    struct worker *w = wk;
    struct conn_wev *e = c->cn_wev;

    if (e == NULL) {
        if (w->free_wevs) {
            e = w->free_wevs;
            w->free_wevs = e->next;
        } else if ((e = malloc(sizeof(*e))) == NULL) {
            return -1;
        }
        event_assign(&e->ev, w->base, c->cn_fd, EV_WRITE | EV_PERSIST,
                     conn_on_write, c);
        e->unsent = -1;
        c->cn_wev = e;
    }
    event_add(&e->ev, tv);
    return 0;
}

/* The wait for writability is over: the event goes back to the pool. */
void
conn_unwant_write(struct conn *c)
{
    struct conn_wev *e = c->cn_wev;

    if (e == NULL)
        return;
    event_del(&e->ev);
    c->cn_wev = NULL;
#ifdef CST_ASAN
    free(e);
#else
    e->next = wk->free_wevs;
    wk->free_wevs = e;
#endif
}

static void
conn_req_get(struct conn *c)
{
    struct worker *w = wk;

    if (c->cn_req)
        return;
    if (w->free_reqs) {
        c->cn_req = w->free_reqs;
        w->free_reqs = c->cn_req->next;
    } else {
        c->cn_req = malloc(sizeof(*c->cn_req));
        if (c->cn_req == NULL)
            return;
    }
    http_req_reset(&c->cn_req->r);
    c->cn_req->obj_held = 0;
    c->cn_req->log.active = 0;
    c->cn_req->counted = 0;
}

static void
conn_req_put(struct conn *c)
{
    if (c->cn_req == NULL)
        return;
    store_release(c);
#ifdef CST_ASAN
    free(c->cn_req);
#else
    c->cn_req->next = wk->free_reqs;
    wk->free_reqs = c->cn_req;
#endif
    c->cn_req = NULL;
}

static void
conn_close(struct conn *c)
{
    struct worker *w = wk;

    if (c->cn_magic != CONN_MAGIC)
        abort();
    if (c->cn_up)
        proxy_abort(c);
    if (c->cn_state == CONN_WAIT) {
        conn_wait_unlink(c);
        filltab_unwait(w->shm->filltab, c->cn_req->whash, (int)w->slotno);
    }
    push_free(c);
    alog_end(c);        /* a transaction cut short is still logged */
    if (c->cn_bgclaim)   /* a background revalidation that never reached
                            the origin: its waiters fetch for themselves */
        fill_release(c->cn_req->whash, 0);
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
#ifdef CST_ASAN
    free(c);
#else
    c->cn_next = w->free_conns;
    w->free_conns = c;
#endif
    if (w->draining && w->nconns == 0)
        event_base_loopbreak(w->base);
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
    if (c->cn_up == NULL || c->cn_up->up_resp == NULL
        || c->cn_up->up_resp->r.until_close || c->cn_up->up_decode)
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

void
conn_accept(struct worker *w, int fd, const struct sockaddr *sa, socklen_t salen,
            int tls)
{
    struct conn *c;
    int one = 1;

    /* Responses go out whole in one write; Nagle would only delay the
     * last segment of each. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if ((c = conn_new(w, fd, sa, salen)) == NULL) {
        log_error("out of memory accepting a connection");
        close(fd);
        return;
    }
    if (tls && tls_conn_new(c) < 0) {
        static int said;
        /* conn_close() counts it out as open */
        w->ctr->conns_open++;
        w->ctr->tls_handshake_errors++;
        if (!said++)
            log_error("cannot start TLS on an ssl port (no certificate loaded?)");
        conn_close(c);
        return;
    }
    if (tls)
        conn_wait_read(c);  /* the handshake runs against the header
                               deadline, not the accept timer */
    w->ctr->conns_accepted++;
    w->ctr->conns_open++;
}

/* A connection struct for fd (-1: an internal transaction with no client,
 * whose output is discarded: a background revalidation). */
static struct conn *
conn_new(struct worker *w, int fd, const struct sockaddr *sa, socklen_t salen)
{
    struct conn *c;

    if (w->free_conns) {
        c = w->free_conns;
        w->free_conns = c->cn_next;
    } else if ((c = malloc(sizeof(*c))) == NULL) {
        return NULL;
    }
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

/* stale-while-revalidate: c was just answered with a stale object; fetch
 * a fresh one in the background, once per object across all workers (the
 * fill table decides who), on an internal connection that replays c's
 * request head and throws its answer away. */
void
conn_bg_revalidate(struct conn *c, const char *key, size_t keylen)
{
    struct http_req *r = &c->cn_req->r;
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
    g = conn_new(wk, -1, &c->cn_peer.sa, sizeof(c->cn_peer));
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
    g->cn_bgclaim = 1;
    memcpy(g->cn_req->whash, h, 16);
    memcpy(g->cn_in.data, r->base, r->head_len);
    g->cn_in.end = r->head_len;
    conn_process(g);
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
        return;     /* reads nothing until resumed (see conn_wait_start) */
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

const char *
conn_connection_hdr(int minor, int keep_alive)
{
    if (!keep_alive)
        return "Connection: close\r\n";
    return minor == 0 ? "Connection: keep-alive\r\n" : "";
}

/* The response counter of status's class. */
static uint64_t *
conn_status_ctr(int status)
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
conn_count_status(struct conn *c, int status)
{
    if (c->cn_bg)
        return;     /* a background revalidation answers no client */
    alog_status(c, status);
    (*conn_status_ctr(status))++;
    if (c->cn_req)
        c->cn_req->counted = status;
}

void
conn_count_interim(struct conn *c)
{
    if (!c->cn_bg)
        wk->ctr->resp_1xx++;
}

/* The answer held while a request body was read is void (the body was
 * malformed, or never came): it never reaches the client, so its count
 * goes. */
static void
conn_void_held(struct conn *c)
{
    c->cn_out.end = c->cn_hold_mark;
    c->cn_hold = 0;
    if (c->cn_req && c->cn_req->counted) {
        (*conn_status_ctr(c->cn_req->counted))--;
        c->cn_req->counted = 0;
    }
}

void
conn_peer_str(const struct conn *c, char *out, size_t len)
{
    /* IPv4 by hand: glibc's inet_ntop formats through sprintf, which cost
     * as much as the rest of a forwarded request head (callgrind), and
     * this runs for every X-Forwarded-For.  IPv6 is left to inet_ntop
     * (RFC 5952's zero-run rules are not worth a second copy). */
    if (c->cn_peer.sa.sa_family == AF_INET && len >= INET_ADDRSTRLEN) {
        const unsigned char *a = (const unsigned char *)&c->cn_peer.in.sin_addr;
        char *p = out;
        for (int i = 0; i < 4; i++) {
            if (i)
                *p++ = '.';
            p = fmt_u64(p, a[i]);
        }
        *p = '\0';
        return;
    }
    if (len > 1)
        memcpy(out, "?", 2);
    if (c->cn_peer.sa.sa_family == AF_INET6)
        inet_ntop(AF_INET6, &c->cn_peer.in6.sin6_addr, out, (socklen_t)len);
}

/* Refuse a request we cannot trust: answer, then close. */
static void
conn_refuse(struct conn *c, int status, const char *reason)
{
    const struct http_req *r = c->cn_req ? &c->cn_req->r : NULL;
    char peer[64];
    const char *extra = NULL;

    conn_peer_str(c, peer, sizeof(peer));
    log_info("conn %llu from %s: %d %s: %s", (unsigned long long)c->cn_id,
             peer, status, http_status_text(status), reason ? reason : "");
    size_t before = c->cn_out.end;
    if (status < 500 && status != 405)
        wk->ctr->bad_requests++;
    if (status == 405)
        extra = CONN_ALLOW;
    if (c->cn_hold)     /* the request turned out malformed */
        conn_void_held(c);
    resp_simple(c, status, "Connection: close\r\n", extra,
                reason ? reason : http_status_text(status),
                r && r->method == HTTP_HEAD && status != 400);
    alog_refused(c, status, c->cn_out.end - before);
    c->cn_close = 1;
    c->cn_state = CONN_SEND;
}

/* The answer of the final recipient to TRACE (the request head echoed as
 * message/http, without the credentials it carried: RFC 9110 9.3.8) or
 * OPTIONS (the methods we take). */
static void
conn_answer_final(struct conn *c, const char *ch)
{
    const struct http_req *r = &c->cn_req->r;

    if (r->method == HTTP_OPTIONS) {
        resp_simple(c, 200, ch, CONN_ALLOW, NULL, 0);
        return;
    }
    /* each line as received plus CRLF (a bare-LF line grows by one) */
    char *echo = malloc(r->head_len + 2 * (size_t)r->nfields + 4);   /* rare: no pool */
    const char *eol = memchr(r->base, '\n', r->head_len);
    size_t n;

    if (echo == NULL || eol == NULL) {
        free(echo);
        conn_refuse(c, 500, "out of memory");
        return;
    }
    n = (size_t)(eol + 1 - r->base);
    memcpy(echo, r->base, n);
    for (int i = 0; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        if (f->id == HTTP_F_AUTHORIZATION
            || http_field_is(r, i, "proxy-authorization") || http_field_is(r, i, "cookie"))
            continue;
        size_t l = f->value + f->value_len - f->name;
        memcpy(echo + n, r->base + f->name, l);
        n += l;
        echo[n++] = '\r';
        echo[n++] = '\n';
    }
    echo[n++] = '\r';
    echo[n++] = '\n';
    resp_body(c, 200, ch, "message/http", echo, n, 0);
    free(echo);
}

/* ------------------------------------------------------------------ */
/* Routing: remap, then a redirect, a 404, or the origin. */

/* A body we answer without: small ones are read and dropped (so the
 * connection survives); with Expect: 100-continue the client may never
 * send it, and a large one is not worth swallowing, so those close. */
static int
conn_body_discardable(const struct http_req *r)
{
    return !r->has_body || (!r->expect_continue
                            && (r->chunked || r->content_length <= DISCARD_MAX));
}

/* "name:port" or "[v6]:port", as opposed to "name" or "[v6]". */
static int
conn_host_has_port(const char *v, size_t n)
{
    while (n > 0 && (v[n - 1] >= '0' && v[n - 1] <= '9'))
        n--;
    return n > 0 && v[n - 1] == ':' && (v[0] != '[' || (n >= 2 && v[n - 2] == ']'));
}

/* Decide and queue the answer for a complete head.  Returns 1 when the
 * request's body (if any) now belongs to someone else (an origin
 * transaction or a PUSH), 0 when the answer is local. */
static int
conn_route(struct conn *c, int keep_alive)
{
    const struct conf *cf = wk->conf;
    struct http_req *r = &c->cn_req->r;
    const char *base = r->base;
    struct conf_remap_result res;
    const struct conf_remap_rule *rule;
    const char *path = base + r->path;
    size_t pathlen = r->path_len;
    char loc[sizeof(res.path) + 512], npath[sizeof(res.path) + 1];
    int head = r->method == HTTP_HEAD;
    int local_ka = keep_alive && conn_body_discardable(r);
    const char *ch = conn_connection_hdr(r->minor, local_ka);

    if (r->method == HTTP_CONNECT) {
        conn_refuse(c, 405, "CONNECT is not supported");
        return 0;
    }
    if (r->method == HTTP_M_PUSH && !cf->rec.push_method_enabled) {
        resp_simple(c, 403, ch, NULL,
                    "PUSH is disabled (proxy.config.http.push_method_enabled)", 0);
        return 0;
    }
    /* OPTIONS * asks about the server as a whole (RFC 9110 9.3.7): us. */
    if (r->method == HTTP_OPTIONS && pathlen == 1 && path[0] == '*') {
        conn_answer_final(c, ch);
        return 0;
    }
    /* Remap, the cache key and the origin all see the normalised path. */
    if ((path = http_req_path(r, npath, sizeof(npath), &pathlen)) == NULL) {
        resp_simple(c, 414, ch, NULL, "request target too long to map", head);
        return 0;
    }

    /* Over TLS an origin-form request is an https one, and a Host without
     * a port means 443 (the parser, knowing no connection, said 80). */
    int https = r->https, port = r->port;
    if (c->cn_tls && !r->absolute) {
        https = 1;
        if (r->f_host >= 0 && !conn_host_has_port(base + r->fields[r->f_host].value,
                                                  r->fields[r->f_host].value_len))
            port = 443;
    }
    rule = r->host_len == 0 ? NULL
         : conf_remap_find(&cf->remap, https ? "https" : "http",
                           base + r->host, r->host_len, port, path,
                           pathlen, &res);
    if (rule == NULL && r->absolute && !cf->rec.remap_required
        && r->host_len < sizeof(res.host) && pathlen + 1 < sizeof(res.path)) {
        /* Forward proxy: the target's own authority is the origin. */
        memset(&res, 0, sizeof(res));
        snprintf(res.scheme, sizeof(res.scheme), "%s", r->https ? "https" : "http");
        memcpy(res.host, base + r->host, r->host_len);
        res.port = r->port;
        if (path[0] != '/')
            res.path[res.pathlen++] = '/';
        memcpy(res.path + res.pathlen, path, pathlen);
        res.pathlen += pathlen;
        rule = NULL;
    } else if (rule == NULL) {
        resp_simple(c, 404, ch, NULL, "no remap rule matches this request", head);
        return 0;
    } else if (rule->type == CONF_REMAP_REDIRECT
               || rule->type == CONF_REMAP_REDIRECT_TEMPORARY) {
        int def = strcmp(res.scheme, "https") == 0 ? 443 : 80;
        int status = rule->type == CONF_REMAP_REDIRECT ? 301 : 307;
        if (r->method == HTTP_M_PUSH || r->method == HTTP_PURGE) {
            resp_simple(c, 404, ch, NULL, "a redirect rule holds no cached object", 0);
            return 0;
        }
        if (res.port == def)
            snprintf(loc, sizeof(loc), "Location: %s://%s%s\r\n", res.scheme,
                     res.host, res.path);
        else
            snprintf(loc, sizeof(loc), "Location: %s://%s:%d%s\r\n",
                     res.scheme, res.host, res.port, res.path);
        resp_simple(c, status, ch, loc, http_status_text(status), head);
        return 0;
    }

    /* RFC 9110 7.6.2: TRACE or OPTIONS with Max-Forwards: 0 is answered
     * here, as its final recipient. */
    int mfi;
    if (http_max_forwards(r, &mfi) == 0) {
        conn_answer_final(c, ch);
        return 0;
    }

    /* A mapped request: the cache's business first, then the origin. */
    char key[STORE_KEY_MAX];
    size_t keylen = store_key(key, sizeof(key), res.scheme, res.host, res.port, res.path);
    if (keylen && rule && cf->rec.pristine_host_hdr) {
        /* The origin is asked with the client's Host (proxy_start), so two
         * vhosts mapped to one origin are two objects: the key names the
         * Host sent too, after a space (never in a URL). */
        char ph[300];
        size_t phl = proxy_pristine_host(r, ph, sizeof(ph));
        if (phl == 0 || keylen + 1 + phl >= sizeof(key)) {
            keylen = 0;     /* not cacheable */
        } else {
            key[keylen++] = ' ';
            for (size_t i = 0; i < phl; i++)
                key[keylen++] = (char)tolower((unsigned char)ph[i]);
            key[keylen] = '\0';
        }
    }
    const char *fwd = wk->cache ? "method" : "bypass";

    if (r->method == HTTP_PURGE) {
        if (keylen)
            purge_handle(c, key, keylen, local_ka);
        else
            resp_simple(c, 404, ch, NULL, "not cached", 0);
        return 0;
    }
    if (r->method == HTTP_M_PUSH) {
        if (wk->cache == NULL || keylen == 0) {
            resp_simple(c, 503, "Connection: close\r\n", NULL,
                        wk->cache ? "URL too long to cache" : "no cache is configured", 0);
            c->cn_close = 1;
            return 0;
        }
        push_start(c, key, keylen, keep_alive);
        return c->cn_state == CONN_BODY;
    }
    int verdict = STORE_MISS, claimed = 0;
    uint8_t h[16];
    /* A GET or HEAD with a body (content RFC 9110 9.3.1 gives no meaning,
     * but an origin may answer by it) neither takes an answer from the
     * shared cache nor leaves one there: it is passed through. */
    if (wk->cache && (r->method == HTTP_GET || r->method == HTTP_HEAD) && !r->has_body) {
        if (keylen && (verdict = store_serve(c, key, keylen, local_ka, &fwd)) == STORE_HIT)
            return 0;
        if (!keylen)
            fwd = "bypass";
    } else if (r->has_body && (r->method == HTTP_GET || r->method == HTTP_HEAD)) {
        fwd = "bypass";
    }
    if (rule == NULL)
        fwd = "bypass";     /* forward proxying is not cached */
    /* Collapsed forwarding: one fetch per missing object, all workers. */
    if (wk->cache && rule && keylen && verdict == STORE_MISS && r->method == HTTP_GET
        && !r->has_body && !c->cn_nowait && wk->conf->rec.collapse_timeout > 0
        && !http_req_no_store(r)) {
        struct timeval now;
        event_base_gettimeofday_cached(wk->base, &now);
        cache_key_hash(wk->cache, key, keylen, h);
        switch (filltab_claim(wk->shm->filltab, h, (int)wk->slotno,
                              (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000,
                              (int64_t)wk->conf->rec.txn_no_activity_out * 1000 + 5000)) {
        case FT_CLAIMED:
            claimed = 1;
            break;
        case FT_WAIT:
            conn_wait_start(c, h);
            return 1;
        case FT_PASS:
            fwd = "uri-miss";     /* hit-for-miss: straight to the origin */
            break;
        default:
            break;
        }
    }
    int rc = proxy_start(c, &res, rule, keep_alive, (keylen && rule) ? key : NULL,
                         keylen, fwd);
    if (c->cn_bgclaim && rc == 0 && c->cn_up) {
        /* the background revalidation's fetch carries its claim */
        c->cn_up->up_claim = 1;
        memcpy(c->cn_up->up_hash, c->cn_req->whash, 16);
        c->cn_bgclaim = 0;
    }
    if (claimed) {
        if (rc == 0 && c->cn_up) {
            c->cn_up->up_claim = 1;
            memcpy(c->cn_up->up_hash, h, 16);
        } else {
            /* failed at once: let the waiters try for themselves */
            fill_release(h, 0);
        }
    }
    return rc == 0;
}

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

    alog_end(c);
    if (r->has_body && conn_body_discardable(r) && !c->cn_close) {
        c->cn_hold = 1;
        c->cn_hold_mark = mark;
        c->cn_discarded = 0;
        c->cn_state = CONN_BODY;
        return;
    }
    if (!keep_alive || !conn_body_discardable(r))
        c->cn_close = 1;
}

/* A complete, checked head: decide and queue the answer. */
static void
conn_request(struct conn *c)
{
    struct http_req *r = &c->cn_req->r;
    int keep_alive = r->keep_alive && !wk->draining;
    size_t mark = c->cn_out.end;

    wk->ctr->requests++;
    c->cn_req->counted = 0;
    c->cn_nowait = 0;
    c->cn_collapsed = 0;
    alog_begin(c);
    if (!conf_ip_allowed(&wk->conf->ip_allow, &c->cn_peer.sa,
                         conf_method_bit(http_method_name(r->method),
                                         strlen(http_method_name(r->method))))) {
        char peer[64];
        conn_peer_str(c, peer, sizeof(peer));
        log_notice("conn %llu from %s: %s denied by ip_allow.config",
                   (unsigned long long)c->cn_id, peer, http_method_name(r->method));
        resp_simple(c, 403, "Connection: close\r\n", NULL,
                    "access denied by ip_allow.config", r->method == HTTP_HEAD);
        alog_result(c, "TCP_DENIED", 0);
        c->cn_close = 1;    /* no body of a refused client is read */
        conn_answered(c, mark, 0);
        return;
    }
    if (admin_handle(c, keep_alive && conn_body_discardable(r))) {
        conn_answered(c, mark, keep_alive);
        return;
    }
    conn_dispatch(c);
}

/* Route and answer (again, after waiting on another worker's fill). */
static void
conn_dispatch(struct conn *c)
{
    struct http_req *r = &c->cn_req->r;
    int keep_alive = r->keep_alive && !wk->draining;
    size_t mark = c->cn_out.end;

    if (conn_route(c, keep_alive)) {
        if (c->cn_state == CONN_BODY || c->cn_state == CONN_PROXY
            || c->cn_state == CONN_WAIT)
            return;         /* the body belongs to the transaction / PUSH */
        /* it failed at once and queued its own answer */
        alog_end(c);
        if (!keep_alive || r->has_body)
            c->cn_close = 1;
        return;
    }
    conn_answered(c, mark, keep_alive);
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

/* ------------------------------------------------------------------ */
/* Collapsed forwarding: waiting for another worker's fill.
 *
 * A waiting connection reads nothing (its head must stay where it is in
 * the input buffer) and sits on the worker's wait list.  It resumes when
 * the fill table no longer shows the fill in progress (the filler's wake-up
 * on our eventfd, or the master's after the filler died), or at its
 * deadline, after which it goes to the origin itself, uncollapsed. */

void
conn_wait_start(struct conn *c, const uint8_t h[16])
{
    struct timeval now;

    memcpy(c->cn_req->whash, h, 16);
    event_base_gettimeofday_cached(wk->base, &now);
    c->cn_req->wdeadline = now;
    c->cn_req->wdeadline.tv_sec += wk->conf->rec.collapse_timeout;
    c->cn_state = CONN_WAIT;
    event_del(&c->cn_rev);
    conn_unwant_write(c);
    c->cn_req->wnext = wk->waitq;
    wk->waitq = c;
}

static void
conn_wait_unlink(struct conn *c)
{
    for (struct conn **pp = &wk->waitq; *pp; pp = &(*pp)->cn_req->wnext)
        if (*pp == c) {
            *pp = c->cn_req->wnext;
            break;
        }
    c->cn_req->wnext = NULL;
}

static void
conn_wait_resume(struct conn *c, int timed_out)
{
    conn_wait_unlink(c);
    if (timed_out)
        filltab_unwait(wk->shm->filltab, c->cn_req->whash, (int)wk->slotno);
    c->cn_nowait = timed_out;
    c->cn_collapsed = !timed_out;
    c->cn_state = CONN_SEND;
    c->cn_in_process = 1;
    conn_dispatch(c);
    c->cn_in_process = 0;
    if (c->cn_state == CONN_WAIT)
        return;     /* another fill started meanwhile: wait for that one */
    conn_consume_head(c);
    conn_process(c);
}

void
conn_wait_check(struct worker *w, int deadlines_only)
{
    struct timeval now;
    struct conn *c, *next;

    event_base_gettimeofday_cached(w->base, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
    for (c = w->waitq; c; c = next) {
        next = c->cn_req->wnext;
        if (evutil_timercmp(&now, &c->cn_req->wdeadline, >=))
            conn_wait_resume(c, 1);
        else if (!deadlines_only
                 && !filltab_busy(w->shm->filltab, c->cn_req->whash, (int)w->slotno, now_ms))
            conn_wait_resume(c, 0);
        /* next was read before resuming: a resumed connection may have
         * closed, never one further down the list */
    }
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

        if ((c->cn_out.end - c->cn_out.start > OUT_HIGH || c->cn_body_len)
            && !c->cn_hold)
            break;      /* let the client read first */
        if (c->cn_state == CONN_IDLE || c->cn_state == CONN_SEND) {
            if (avail == 0)
                break;
            /* A new request: whatever answered the last one (a proxy, a
             * PUSH, a refusal) may have left the parser mid-state. */
            if (c->cn_req)
                http_req_reset(&c->cn_req->r);
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
            continue;
        }
        if (c->cn_state == CONN_BODY) {
            struct http_req *r = &c->cn_req->r;
            size_t used;

            if (c->cn_push) {
                rc = push_body(c);
                if (rc == HTTP_AGAIN)
                    break;
                if (rc != HTTP_OK) {
                    conn_refuse(c, rc, r->reason);
                    break;
                }
                http_req_reset(r);
                continue;
            }
            if (c->cn_up) {
                rc = proxy_client_body(c);
                if (rc == HTTP_AGAIN || rc == HTTP_OK)
                    break;      /* more body later, or the response */
                if (c->cn_up && c->cn_up->up_state == UP_BODY) {
                    c->cn_abort = 1;
                    break;
                }
                proxy_abort(c);
                conn_refuse(c, rc, r->reason);
                break;
            }
            rc = http_req_body(r, c->cn_in.data + c->cn_in.start, avail,
                               &used, NULL, NULL);
            c->cn_in.start += used;
            w->ctr->bytes_in += used;
            c->cn_discarded += used;
            if (rc == HTTP_AGAIN && c->cn_discarded > DISCARD_MAX) {
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
            if (!r->keep_alive || w->draining)
                c->cn_close = 1;
            continue;
        }
        break;
    }
    if (c->cn_in.start == c->cn_in.end)
        c->cn_in.start = c->cn_in.end = 0;
    c->cn_in_process = 0;
    return conn_flush(c);
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
int
conn_flush(struct conn *c)
{
    struct buf *o = &c->cn_out;
    int progress = 0;

    if (c->cn_in_process || c->cn_in_flush)
        return 0;       /* the outer caller flushes when it is done */
    c->cn_in_flush = 1;
    for (;;) {
        if (c->cn_abort) {
            conn_reset(c);
            return -1;
        }
        while (!c->cn_hold && (o->end > o->start || c->cn_body_len > 0)) {
            struct iovec iov[2];
            int n = 0;
            size_t head = o->end - o->start;
            ssize_t k;

            if (head) {
                iov[n].iov_base = o->data + o->start;
                iov[n++].iov_len = head;
            }
            if (c->cn_body_len) {
                iov[n].iov_base = (void *)c->cn_body;
                iov[n++].iov_len = c->cn_body_len;
            }
            /* An internal transaction has no client: its answer is dropped. */
            if (c->cn_tls)
                k = tls_conn_write(c, o->data + o->start, head, c->cn_body,
                                   c->cn_body_len);
            else
                k = c->cn_fd >= 0 ? writev(c->cn_fd, iov, n)
                                  : (ssize_t)(head + c->cn_body_len);
            if (k < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    c->cn_in_flush = 0;
                    if (conn_wait_write(c, progress) < 0) {
                        conn_close(c);
                        return -1;
                    }
                    return 0;
                }
                conn_close(c);      /* the peer is gone: nothing to save */
                return -1;
            }
            progress = 1;
            wk->ctr->bytes_out += (uint64_t)k;
            if ((size_t)k <= head) {
                o->start += (size_t)k;
            } else {
                o->start = o->end;
                k -= (ssize_t)head;
                c->cn_body += k;
                c->cn_body_len -= (size_t)k;
                if (c->cn_up)
                    proxy_client_sent(c, (size_t)k);
            }
        }
        if (c->cn_up == NULL && c->cn_body_len == 0)
            store_release(c);       /* a hit's body is out: unpin */
        if (!c->cn_hold)
            o->start = o->end = 0;
        if (c->cn_up == NULL || c->cn_hold)
            break;
        switch (proxy_pump(c)) {
        case PROXY_MORE:
            continue;
        case PROXY_DONE:
            alog_end(c);
            continue;
        case PROXY_ABORT:
            conn_reset(c);
            return -1;
        case PROXY_WAIT:
            c->cn_in_flush = 0;
            conn_unwant_write(c);
            if (!c->cn_in_eof)
                conn_wait_read(c);
            return 0;
        }
    }
    c->cn_in_flush = 0;
    conn_unwant_write(c);
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
void
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
        if (c->cn_up == NULL || c->cn_up->up_state < UP_BODY) {
            proxy_abort(c);
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

static void
conn_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct buf *in = &c->cn_in;
    ssize_t n;

    /* A timer that expires as input arrives (libevent then reports both)
     * loses to the input: closing with unread bytes would answer the
     * client's request with a reset (a drained keep-alive connection whose
     * next request was on its way, under load).  An idle connection whose
     * request is already waiting is served, not closed. */
    if ((what & EV_TIMEOUT) && !(what & EV_READ)) {
        char b;
        if (c->cn_state == CONN_LINGER) {
            conn_close(c);
            return;
        }
        if (!((c->cn_state == CONN_IDLE
               || (c->cn_state == CONN_HEAD && in->end == in->start))
              && (recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0
                  || (c->cn_tls && tls_conn_pending(c))))) {
            conn_timeout(c);
            return;
        }
    }
    if (c->cn_state == CONN_LINGER) {
        char sink[4096];
        n = read(fd, sink, sizeof(sink));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            conn_close(c);
        return;
    }
    if (c->cn_tls) {
        c->cn_tls_rw = 0;
        if (!c->cn_tls_up) {
            int rc = tls_conn_handshake(c);
            if (rc < 0) {
                conn_close(c);
                return;
            }
            conn_wait_read(c);  /* the head deadline runs from accept */
            if (rc == 0)
                return;
        }
        if (c->cn_tls_wr) {
            /* a write waited for this readability */
            c->cn_tls_wr = 0;
            conn_flush(c);
            return;
        }
    }
    if (buf_alloc(in) < 0) {
        conn_close(c);
        return;
    }
    if (in->end == in->size) {
        size_t limit = wk->limits.head_max + BUF_SIZE;
        if (in->start > 0) {
            buf_grow(in, 1);    /* compacts; never grows */
        } else if (c->cn_state == CONN_HEAD && in->size < limit) {
            if (buf_grow(in, BUF_SIZE) < 0) {
                conn_close(c);
                return;
            }
        } else if (c->cn_state == CONN_HEAD && c->cn_out.end == c->cn_out.start
                   && c->cn_body_len == 0) {
            /* A head that fills the largest buffer and is still not
             * whole (the scanner's own limits should have said so first):
             * never stop reading without a timer, answer. */
            event_del(&c->cn_rev);
            conn_refuse(c, 431, "request header section too large");
            conn_flush(c);
            return;
        } else {
            /* Full of input we cannot take yet (pipelined requests behind
             * a slow response, or a body the origin is slow to accept):
             * stop reading until that changes. */
            event_del(&c->cn_rev);
            c->cn_read_blocked = 1;
            return;
        }
    }
    if (c->cn_fresh && c->cn_state == CONN_HEAD && in->end == in->start
        && (c->cn_tls == NULL || c->cn_tls_up))
        /* the header deadline runs from the head's first byte */
        event_base_gettimeofday_cached(wk->base, &c->cn_head_start);
    if (c->cn_tls)
        n = tls_conn_read(c, in->data + in->end, in->size - in->end);
    else
        n = read(fd, in->data + in->end, in->size - in->end);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return;
        conn_close(c);
        return;
    }
    if (n == 0) {
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
                && c->cn_out.end == c->cn_out.start && !c->cn_up) {
                conn_close(c);
                return;
            }
            if (c->cn_state == CONN_BODY || c->cn_in.end > c->cn_in.start) {
                proxy_abort(c);
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
        return;
    }
    in->end += (size_t)n;
    conn_process(c);
}

static void
conn_on_write(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

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
