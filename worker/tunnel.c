/*
 * worker/tunnel.c: CONNECT tunnels and protocol upgrades, relayed both
 * ways.
 *
 *   CONNECT host:port --(checks, connect)--> 200 Connection established
 *   GET + Upgrade --(proxy.c forwards it)--> origin 101 Switching Protocols
 *                                    \            /
 *                       the owner hands over (tunnel_attach)
 *                                        |
 *                 client <==relay==> origin, until both sides are done
 *
 * Checks (CONNECT): not on TLS ports (the relay reads raw sockets: 405),
 * only with proxy.config.url_remap.remap_required 0 (a reverse proxy is
 * not a way to open tunnels: 403), only to the ports of
 * proxy.config.http.connect_ports (403 with the reason).  ip_allow.config
 * has decided already (RECV, with the CONNECT method bit).  The target is
 * resolved and connected by origin.c (never blocking: 502 when it cannot
 * be reached, 504 on proxy.config.http.connect_attempts_timeout).
 *
 * The relay: per direction one buffer (BUF_SIZE, or the connection's
 * input buffer it took over): bytes read from one side wait there until
 * the other side takes them, and that side is not read while its buffer
 * is full, so a slow reader holds at most a buffer here (and the kernel's
 * socket buffers) whatever the other side sends.  An end of stream from
 * one side becomes shutdown(SHUT_WR) on the other once its buffer is
 * out; the tunnel ends when both directions have ended so.  A read or
 * write error (a reset) ends it at once, and both sockets are reset, so
 * neither peer mistakes a cut for an orderly end.  Idle: when no byte has
 * moved either way for min(transaction_no_activity_timeout_in, _out)
 * (ATS times each side by its own; a byte relayed is activity on both),
 * both sockets close.
 *
 * Counted: tunnels begun and open, bytes each way (/_stats, /_metrics),
 * client bytes in and out; logged: the request's access-log line when the
 * tunnel ends (status 200 or 101, bytes sent to the client), and an info
 * line with both byte counts.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/log.h"
#include "worker/worker.h"
#include "worker/tunnel.h"

#define TUN_MAGIC  0x54554e4eu     /* "TUNN" */
#define TUN_BURST  16              /* reads per direction per wake-up: one
                                      busy tunnel must not starve the loop */

enum { TC = 0, TO = 1 };           /* the sides: client, origin */

struct tunnel {
    uint32_t         magic;
    unsigned         ready:1;     /* connected: the owner may hand over */
    unsigned         attached:1;  /* handed over: the relay runs */
    unsigned         starting:1;  /* inside tunnel_connect's origin_get */
    int              err;         /* a result that came while starting */
    int              fd[2];       /* [TC] the client, [TO] the origin */
    struct event     rev[2];      /* readable fd[s] */
    struct event     wev[2];      /* writable fd[s] */
    unsigned char    ron[2], won[2];
    struct event     timer;       /* idle */
    struct buf       pre;         /* for the client before b[TO]: what the
                                     owner had not sent (our 200 / 101) */
    struct buf       b[2];        /* b[s]: read from side s, for the other */
    unsigned char    eof[2];      /* side s ended its stream */
    unsigned char    shut[2];     /* we ended our stream to side s */
    uint64_t         moved[2];    /* bytes from side s relayed */
    struct timeval   last;        /* when a byte last moved */
    int              unsent[2];   /* fd[s]'s kernel send queue at the last
                                     idle check (-1: not looked at) */
    struct req      *rq;
    void           (*answer)(struct req *); /* CONNECT: our answer when
                                     the connect fails (SYNTH, DONE) */
    void           (*end)(struct req *);    /* the request's end (DONE,
                                     freed), from tunnel_attach */
    struct upstream *up;          /* CONNECT: connecting */
    char             target[280]; /* host:port, for log lines */
    union conn_addr  peer;        /* the client (rq_peer, once the
                                     connection that held it is gone) */
    struct tunnel   *next, *prev;
};

static struct tunnel *tunnels;    /* this worker's */

static void tun_close(struct tunnel *t, int reset, const char *why);

/* ------------------------------------------------------------------ */
/* Setting up */

static struct tunnel *
tun_new(struct req *rq)
{
    struct tunnel *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->magic = TUN_MAGIC;
    t->fd[TC] = t->fd[TO] = -1;
    t->rq = rq;
    t->next = tunnels;
    if (tunnels)
        tunnels->prev = t;
    tunnels = t;
    rq->rq_tunnel = t;
    return t;
}

static struct tunnel *
tun_of(const struct req *rq)
{
    struct tunnel *t = rq->rq_tunnel;

    magic_check(t->magic, TUN_MAGIC);
    return t;
}

/* Our answer's text when the target could not be had: err is origin.c's
 * (502, 504, or 403 from ip_allow's out rules). */
static const char *
tun_fail_why(int err)
{
    return err == 504 ? "CONNECT target connect timeout"
         : err == 403 ? "access to the CONNECT target denied by ip_allow"
         : "CONNECT target unreachable";
}

/* The connect ended (origin_get's ready callback). */
static void
tun_connected(struct upstream *up, int err)
{
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    struct req *rq = up->up_req;
    struct tunnel *t;

    magic_check(up->up_magic, UP_MAGIC);
    t = tun_of(rq);
    if (err && t->starting) {
        t->err = err;       /* tunnel_connect answers */
        return;
    }
    if (err == 0 && (buf_alloc(rq->rq_out) < 0 || buf_append(rq->rq_out, ok, sizeof(ok) - 1) < 0))
        err = 502;
    if (err) {
        void (*answer)(struct req *) = t->answer;
        if (err != 403)
            wk->ctr->origin_errors++;
        tun_close(t, 0, NULL);      /* rq_tunnel goes */
        memset(&rq->syn, 0, sizeof(rq->syn));
        rq->syn.status = err;
        rq->syn.body = tun_fail_why(err);
        rq->syn.result = err == 403 ? "TCP_DENIED" : "ERR_CONNECT_FAIL";
        rq->syn.close = 1;
        answer(rq);                 /* SYNTH, DONE (req.c's req_answer_ours) */
        rq->rq_ops->flush(rq);
        return;
    }
    t->fd[TO] = up->up_fd;
    up->up_fd = -1;
    origin_release(up);
    up->up_magic = 0;
    pool_put(&wk->up_pool, up);
    t->up = NULL;
    t->ready = 1;
    resp_count(rq, 200);
    alog_bytes(rq, sizeof(ok) - 1);
    alog_head(rq, ok, sizeof(ok) - 1);
    alog_result(rq, "TCP_TUNNEL", 200);
    if (!t->starting)
        rq->rq_ops->flush(rq);      /* the owner hands over */
}

int
tunnel_connect(struct req *rq, void (*answer)(struct req *), const char **why)
{
    static char reason[96];
    const struct http_req *r = &rq->r;
    const char *tg = r->base + r->target, *colon;
    size_t n = r->target_len, hl;
    struct tunnel *t;
    struct upstream *up;
    long port = 0;

    if (rq->rq_tls) {
        *why = "CONNECT is not supported on TLS ports";
        return 405;
    }
    if (wk->conf->rec.remap_required) {
        *why = "CONNECT needs a forward proxy (proxy.config.url_remap.remap_required 0)";
        return 403;
    }
    if (r->has_body) {
        *why = "CONNECT with a body";
        return 400;
    }
    /* authority-form, checked by the parser: host ":" port */
    for (colon = tg + n; colon > tg && colon[-1] != ':'; colon--)
        ;
    colon--;
    if (colon < tg || (hl = (size_t)(colon - tg)) == 0
        || hl >= sizeof(((struct upstream *)0)->up_host)) {
        *why = "invalid CONNECT target";
        return 400;
    }
    for (const char *p = colon + 1; p < tg + n && port <= 65535; p++)
        port = port * 10 + (*p - '0');
    if (port <= 0 || port > 65535) {
        *why = "invalid CONNECT port";
        return 400;
    }
    if (conf_port_list_has(wk->conf->rec.connect_ports, (int)port) != 1) {
        char peer[64];
        snprintf(reason, sizeof(reason),
                 "port %ld is not in proxy.config.http.connect_ports", port);
        fmt_peer(rq->rq_peer, peer, sizeof(peer));
        log_notice("conn %llu from %s: CONNECT %.*s refused: %s",
                   (unsigned long long)rq->rq_id, peer, (int)n, tg, reason);
        *why = reason;
        return 403;
    }
    if ((up = pool_get(&wk->up_pool)) == NULL) {
        *why = "out of memory";
        return 503;
    }
    memset(up, 0, offsetof(struct upstream, up_cond));
    up->up_magic = UP_MAGIC;
    up->up_fd = -1;
    up->up_req = rq;
    up->up_method = HTTP_CONNECT;   /* ip_allow's out rules judge the method
                                       (0, the memset's, is HTTP_DELETE) */
    memcpy(up->up_host, tg, hl);
    up->up_host[hl] = '\0';
    up->up_port = (int)port;
    if ((t = tun_new(rq)) == NULL) {
        up->up_magic = 0;
        pool_put(&wk->up_pool, up);
        *why = "out of memory";
        return 503;
    }
    t->up = up;
    t->answer = answer;
    snprintf(t->target, sizeof(t->target), "%.*s", (int)n, tg);
    wk->ctr->origin_requests++;
    t->starting = 1;
    origin_get(up, 0, tun_connected, NULL);
    t->starting = 0;
    if (t->err) {
        int err = t->err;
        if (err != 403)
            wk->ctr->origin_errors++;
        tun_close(t, 0, NULL);
        rq->syn.result = "ERR_CONNECT_FAIL";    /* (step_tunnel: 403 TCP_DENIED) */
        *why = tun_fail_why(err);
        return err;
    }
    return 0;
}

int
tunnel_upgrade_asked(const struct req *rq)
{
    const struct http_req *r = &rq->r;
    int i, asked = 0;

    /* RFC 9110 7.8: Upgrade is HTTP/1.1's, and a request with content
     * would leave its body in the way of the new protocol. */
    if (r->method != HTTP_GET || r->has_body || r->minor < 1 || rq->rq_tls || rq->rq_bg)
        return 0;
    for (i = http_field_find_id(r, HTTP_F_UPGRADE, 0); i >= 0;
         i = http_field_find_id(r, HTTP_F_UPGRADE, i + 1)) {
        const struct http_field *f = &r->fields[i];
        if (f->value_len == 0 || http_list_has(r->base + f->value, f->value_len, "h2c"))
            return 0;   /* h2c is ours to refuse: stripped, as before */
        asked = 1;
    }
    if (!asked)
        return 0;
    for (i = http_field_find_id(r, HTTP_F_CONNECTION, 0); i >= 0;
         i = http_field_find_id(r, HTTP_F_CONNECTION, i + 1)) {
        const struct http_field *f = &r->fields[i];
        if (http_list_has(r->base + f->value, f->value_len, "upgrade"))
            return 1;
    }
    return 0;
}

int
tunnel_put_upgrade(const struct req *rq, struct buf *o)
{
    const struct http_req *r = &rq->r;
    int err = 0;

    if (!tunnel_upgrade_asked(rq))
        return 0;
    for (int i = http_field_find_id(r, HTTP_F_UPGRADE, 0); i >= 0;
         i = http_field_find_id(r, HTTP_F_UPGRADE, i + 1)) {
        const struct http_field *f = &r->fields[i];
        err |= buf_lit(o, "Upgrade: ");
        err |= buf_append(o, r->base + f->value, f->value_len);
        err |= buf_lit(o, "\r\n");
    }
    err |= buf_lit(o, "Connection: upgrade\r\n");
    return err ? -1 : 1;
}

/* Is the protocol t[0..tl) in one of r's Upgrade lists? */
static int
tunnel_upgrade_listed(const struct http_req *r, const char *t, size_t tl)
{
    char tok[64];

    if (tl >= sizeof(tok))
        return 0;
    memcpy(tok, t, tl);
    tok[tl] = '\0';
    for (int i = http_field_find_id(r, HTTP_F_UPGRADE, 0); i >= 0;
         i = http_field_find_id(r, HTTP_F_UPGRADE, i + 1))
        if (http_list_has(r->base + r->fields[i].value, r->fields[i].value_len, tok))
            return 1;
    return 0;
}

/* A 101 is a tunnel straight to the origin, past remap and its filters:
 * only one that switches to what the client asked for opens it, else an
 * origin path that echoes a status (WebSocket smuggling) would. */
int
tunnel_upgrade_agreed(const struct req *rq, const struct http_req *resp)
{
    int named = 0;

    for (int i = http_field_find_id(resp, HTTP_F_UPGRADE, 0); i >= 0;
         i = http_field_find_id(resp, HTTP_F_UPGRADE, i + 1)) {
        const char *p = resp->base + resp->fields[i].value;
        const char *end = p + resp->fields[i].value_len;

        while (p < end) {
            const char *t = p;
            while (p < end && *p != ',')
                p++;
            const char *e = p++;
            while (t < e && (*t == ' ' || *t == '\t'))
                t++;
            while (e > t && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            if (e == t)
                continue;   /* an empty list element (RFC 9110 5.6.1) */
            if (!tunnel_upgrade_listed(&rq->r, t, (size_t)(e - t)))
                return 0;
            named = 1;
        }
    }
    return named;
}

int
tunnel_from_origin(struct req *rq, struct upstream *up)
{
    struct tunnel *t = tun_new(rq);

    if (t == NULL)
        return -1;
    snprintf(t->target, sizeof(t->target), "%s:%d", up->up_host, up->up_port);
    if (event_initialized(&up->up_rev))
        event_del(&up->up_rev);
    if (event_initialized(&up->up_wev))
        event_del(&up->up_wev);
    t->fd[TO] = up->up_fd;
    up->up_fd = -1;
    t->b[TO] = up->up_in;           /* what came after the 101 head */
    memset(&up->up_in, 0, sizeof(up->up_in));
    up->up_parsed = 0;
    t->ready = 1;
    return 0;
}

int
tunnel_ready(const struct req *rq)
{
    return tun_of(rq)->ready;
}

void
tunnel_abort(struct req *rq)
{
    tun_close(tun_of(rq), 1, "its client went away");
}

/* ------------------------------------------------------------------ */
/* The relay */

/* Bytes waiting to go to side 1 - s. */
static size_t
tun_pending(const struct tunnel *t, int s)
{
    size_t n = t->b[s].end - t->b[s].start;

    return s == TO ? n + (t->pre.end - t->pre.start) : n;
}

/* Write what came from side s to the other side.  0 (all out, or the
 * socket is full), -1 on an error. */
static int
tun_write(struct tunnel *t, int s)
{
    int o = 1 - s;

    for (;;) {
        struct buf *b = s == TO && t->pre.end > t->pre.start ? &t->pre : &t->b[s];
        size_t n = b->end - b->start;
        ssize_t k;

        if (n == 0)
            return 0;
        k = send(t->fd[o], b->data + b->start, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        b->start += (size_t)k;
        event_base_gettimeofday_cached(wk->base, &t->last);
        if (b == &t->pre) {
            wk->ctr->bytes_out += (uint64_t)k;
            continue;
        }
        t->moved[s] += (uint64_t)k;
        if (s == TC) {
            wk->ctr->tunnel_bytes_up += (uint64_t)k;
            wk->ctr->bytes_in += (uint64_t)k;
        } else {
            wk->ctr->tunnel_bytes_down += (uint64_t)k;
            wk->ctr->bytes_out += (uint64_t)k;
        }
    }
}

/* Move bytes from side s to the other side until one of them waits.
 * 0, or -1 on an error (errno). */
static int
tun_pump(struct tunnel *t, int s)
{
    struct buf *b = &t->b[s];
    int o = 1 - s;

    for (int burst = 0; ; burst++) {
        ssize_t n;

        if (tun_write(t, s) < 0)
            return -1;
        if (tun_pending(t, s) == 0) {
            b->start = b->end = 0;
            if (t->eof[s] && !t->shut[o]) {
                /* half-close: pass the end of stream on */
                t->shut[o] = 1;
                if (shutdown(t->fd[o], SHUT_WR) < 0 && errno != ENOTCONN)
                    return -1;
            }
        }
        if (t->eof[s] || burst == TUN_BURST)
            return 0;
        if (b->end == b->size) {
            if (b->start == 0)
                return 0;   /* full: the other side reads first */
            memmove(b->data, b->data + b->start, b->end - b->start);
            b->end -= b->start;
            b->start = 0;
        }
        n = recv(t->fd[s], b->data + b->end, b->size - b->end, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        if (n == 0)
            t->eof[s] = 1;
        b->end += (size_t)n;
    }
}

static void
tun_want(struct event *ev, unsigned char *on, int want)
{
    if (want && !*on)
        event_add(ev, NULL);
    else if (!want && *on)
        event_del(ev);
    *on = (unsigned char)want;
}

static void
tun_run(struct tunnel *t)
{
    int done = 1;

    for (int s = 0; s < 2; s++) {
        if (tun_pump(t, s) < 0) {
            char why[96];
            snprintf(why, sizeof(why), "%s side: %s", s == TC ? "client" : "origin",
                     strerror(errno));
            tun_close(t, 1, why);
            return;
        }
    }
    for (int s = 0; s < 2; s++) {
        int o = 1 - s;
        const struct buf *b = &t->b[s];
        if (!t->eof[s] || tun_pending(t, s) || !t->shut[o])
            done = 0;
        tun_want(&t->rev[s], &t->ron[s],
                 !t->eof[s] && (b->end < b->size || b->start > 0));
        tun_want(&t->wev[o], &t->won[o], tun_pending(t, s) > 0);
    }
    if (done)
        tun_close(t, 0, NULL);
}

static void
tun_on_io(evutil_socket_t fd, short what, void *arg)
{
    struct tunnel *t = arg;

    (void)fd;
    (void)what;
    magic_check(t->magic, TUN_MAGIC);
    tun_run(t);
}

/* No byte moved for idle seconds: the tunnel ends. */
static int
tun_idle(void)
{
    const struct conf_records *rec = &wk->conf->rec;

    return rec->txn_no_activity_in < rec->txn_no_activity_out
           ? rec->txn_no_activity_in : rec->txn_no_activity_out;
}

static void
tun_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct tunnel *t = arg;
    struct timeval now, due, left;

    (void)fd;
    (void)what;
    magic_check(t->magic, TUN_MAGIC);
    event_base_gettimeofday_cached(wk->base, &now);
    due = t->last;
    due.tv_sec += tun_idle();
    if (evutil_timercmp(&now, &due, <)) {
        /* bytes moved since: the queues are new ones */
        t->unsent[TC] = t->unsent[TO] = -1;
        evutil_timersub(&due, &now, &left);
        event_add(&t->timer, &left);
        return;
    }
    /* A reader slower than the kernel's send buffer takes bytes from the
     * queue, not from us: while a queue shrinks the tunnel is not idle
     * (conn.c does the same for responses).  A queue never looked at
     * counts as moving once, so a reader stalled with bytes queued is cut
     * after two idle periods, with a reset: a plain close would end its
     * stream as if whole. */
    int moving = 0, queued = 0;
    for (int s = 0; s < 2; s++) {
        int q = t->fd[s] >= 0 ? sock_unsent(t->fd[s]) : 0;
        if (q > 0 && (t->unsent[s] < 0 || q < t->unsent[s]))
            moving = 1;
        queued |= q > 0;
        t->unsent[s] = q;
    }
    if (moving) {
        struct timeval tv = { tun_idle(), 0 };
        t->last = now;
        event_add(&t->timer, &tv);
        return;
    }
    wk->ctr->timeouts++;
    tun_close(t, queued, "idle (transaction_no_activity_timeout)");
}

void
tunnel_attach(struct req *rq, int fd, struct buf *in, struct buf *out,
              void (*end)(struct req *))
{
    struct tunnel *t = tun_of(rq);
    struct worker *w = wk;
    struct timeval tv = { tun_idle(), 0 };

    /* from here the tunnel is one of the worker's connections, and what
     * the request borrowed from the old one is the tunnel's */
    t->attached = 1;
    t->end = end;
    if (rq->rq_peer)
        memcpy(&t->peer, rq->rq_peer, rq->rq_peer->sa_family == AF_INET6
               ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    rq->rq_peer = &t->peer.sa;
    rq->rq_owner = t;
    rq->rq_in = &t->b[TC];
    rq->rq_out = &t->pre;
    t->fd[TC] = fd;
    w->nconns++;
    w->ctr->tunnels_opened++;
    w->ctr->tunnels_active++;
    t->pre = *out;
    memset(out, 0, sizeof(*out));
    t->b[TC] = *in;
    memset(in, 0, sizeof(*in));
    for (int s = 0; s < 2; s++) {
        event_assign(&t->rev[s], w->base, t->fd[s], EV_READ | EV_PERSIST, tun_on_io, t);
        event_assign(&t->wev[s], w->base, t->fd[s], EV_WRITE | EV_PERSIST, tun_on_io, t);
    }
    evtimer_assign(&t->timer, w->base, tun_on_timer, t);
    t->unsent[TC] = t->unsent[TO] = -1;
    event_base_gettimeofday_cached(w->base, &t->last);
    if (buf_alloc(&t->b[TC]) < 0 || buf_alloc(&t->b[TO]) < 0) {
        tun_close(t, 1, "out of memory");
        return;
    }
    event_add(&t->timer, &tv);
    log_debug("conn %llu: tunnel to %s open", (unsigned long long)rq->rq_id, t->target);
    tun_run(t);
}

/* ------------------------------------------------------------------ */
/* The end */

static void
tun_close(struct tunnel *t, int reset, const char *why)
{
    struct worker *w = wk;
    struct req *rq = t->rq;
    struct linger lg = { 1, 0 };

    for (int s = 0; s < 2; s++) {
        if (t->attached) {
            event_del(&t->rev[s]);
            event_del(&t->wev[s]);
        }
        if (t->fd[s] < 0)
            continue;
        if (reset)
            setsockopt(t->fd[s], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(t->fd[s]);
    }
    if (t->up) {
        origin_release(t->up);
        t->up->up_magic = 0;
        pool_put(&w->up_pool, t->up);
    }
    buf_release(&t->pre);
    buf_release(&t->b[TC]);
    buf_release(&t->b[TO]);
    if (t->prev)
        t->prev->next = t->next;
    else
        tunnels = t->next;
    if (t->next)
        t->next->prev = t->prev;
    rq->rq_tunnel = NULL;
    if (t->attached) {
        event_del(&t->timer);
        w->ctr->conns_open--;
        w->ctr->tunnels_active--;
        w->nconns--;
        log_info("conn %llu: tunnel to %s closed (%s): %llu bytes up, %llu down",
                 (unsigned long long)rq->rq_id, t->target, why ? why : "both sides done",
                 (unsigned long long)t->moved[TC], (unsigned long long)t->moved[TO]);
        alog_bytes(rq, t->moved[TO]);
        t->end(rq);         /* DONE (the access-log line), freed */
    }
    t->magic = 0;
    free(t);
    if (w->draining && w->nconns == 0)
        event_base_loopbreak(w->base);
}

void
tunnel_close_all(struct worker *w)
{
    (void)w;
    while (tunnels)
        tun_close(tunnels, 1, "the worker exits");
}
