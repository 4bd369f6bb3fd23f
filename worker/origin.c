/*
 * worker/origin.c: getting a connection to an origin.
 *
 * Resolution never blocks the loop: numeric hosts are parsed in place;
 * names go to dns.c (the hosts file, then evdns), which gives every A and
 * AAAA address of the name, cached per worker for the answer's TTL.
 *
 * Every address of a host is used.  A request walks them in order (IPv4
 * first), leaving for last the ones that failed lately: when a connect to
 * one fails, the next is tried at once, and the failed one is remembered
 * (per worker, for proxy.config.http.down_server.cache_time, as ATS marks a
 * round-robin address down in HostDB) so the next request starts with a
 * good one.  One pass over all of a host's addresses is a "round".
 *
 * The idle pool holds keep-alive connections per (host, port), at most
 * proxy.config.http.per_server.connection.max_idle per origin and
 * POOL_MAX in all per worker.  An idle connection is watched for
 * readability: anything arriving on it (the origin's close, or bytes it
 * had no business sending) makes it unusable, and it is closed at once.
 * It is also closed after keep_alive_no_activity_timeout_out.
 *
 * Bytes the origin was not asked for must never be read as the next
 * request's answer (RFC 9112 9.3: a response desync; a poisoned cache).
 * Two windows are closed besides the watch's own: bytes already in the
 * socket when the connection goes back (our last read stopped at the
 * buffer's end, right after the answer: a pipelined request would take the
 * connection before the watch ever runs) are looked for with one recv
 * when that last read filled its room (up_more; always for TLS), and the
 * watch runs at a higher priority than every other event, so bytes that
 * came before a loop turn close the connection before any request of that
 * turn can take it.  The common case (the last read drained the socket)
 * costs nothing.
 *
 * Outbound ip_allow (apply: out / dest_ip= rules) is checked here, on every
 * address about to be connected to (after resolution) and on the address
 * of a pooled connection about to be reused, with the request's method: a
 * denied address is skipped (a denied pooled connection stays idle), and
 * when every address of the host is denied the request is answered 403
 * through up_ready, with nothing connected or sent.  Without out rules, a
 * remapped request's check is one compare; a forward-proxied one is also
 * refused the machine's own addresses.
 *
 * Connect retries are ATS's, counted in rounds: when every address of the
 * host failed (refused, unreachable, connect_attempts_timeout), another
 * round starts at once, up to proxy.config.http.connect_attempts_max_retries
 * more.  When every round of a request failed, the origin (host and port)
 * is marked down for proxy.config.http.down_server.cache_time seconds, in
 * this worker only: an origin is down only when all its addresses failed.
 * Meanwhile a request makes connect_attempts_max_retries_dead_server rounds
 * in all (0: none, 502 at once), and one connection made marks it up again
 * (ATS 10's rule; ATS 9.2 waits for connect_attempts_rr_retries such
 * requests).  Only failures to connect count; an origin that accepts and
 * then fails is not retried here (proxy.c retries a dead pooled connection
 * once, as before).
 *
 * A parent of parent.config (up_prule set, up_pidx >= 0) is connected to
 * like an origin, but with ATS's parent_proxy keys: its attempts (rounds
 * over its addresses) are per_parent_connect_attempts within
 * total_connect_attempts (counted connect by connect), its timeout
 * parent_proxy.connect_attempts_timeout, and it is never marked down
 * here: worker/parent.c counts its failures in the shared parent table
 * and moves on to the next parent.
 *
 * Nothing here calls up into the transaction: the owner passes origin_get()
 * two callbacks, kept in the upstream: up_ready(up, err) when the
 * connection is ready or cannot be had, and up_attach(up) for a pooled
 * connection (tls.c calls up_ready too, after an https handshake).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/log.h"
#include "worker/worker.h"

#define POOL_MAX   1024

#define IDLE_MAGIC 0x49444c45u       /* "IDLE" */

_Static_assert(DNS_ADDR_MAX <= 32, "up_tried and up_denied are 32-bit masks");

struct origin_idle {
    uint32_t            magic;        /* IDLE_MAGIC while pooled */
    int                 fd;
    struct ssl_st      *tls;          /* an https connection's TLS state */
    int                 https;
    char                host[256];
    int                 port;
    struct sockaddr_storage addr;     /* where it is connected (ip_allow) */
    socklen_t           addrlen;
    struct event        ev;
    struct origin_idle *next, *prev;
};

static void origin_idle_close(struct worker *w, struct origin_idle *e);
static void origin_retry(struct upstream *up, int status);
static int  origin_connect_once(struct upstream *up);
static int  origin_connect_fresh(struct upstream *up);

/* Origins marked down (ATS's down_server.cache_time): a few per worker;
 * down_n counts the slots in use, so the usual case scans nothing. */
#define DOWN_MAX 32
static struct {
    char   host[256];
    int    port;
    time_t until;                     /* 0: a free slot */
} down_tab[DOWN_MAX];
static int down_n;

/* The slot of up's origin, or -1. */
static int
origin_down_find(const struct upstream *up)
{
    for (int i = 0; down_n > 0 && i < DOWN_MAX; i++)
        if (down_tab[i].until && down_tab[i].port == up->up_port
            && strcasecmp(down_tab[i].host, up->up_host) == 0)
            return i;
    return -1;
}

static void
origin_down_clear(int i)
{
    if (i >= 0 && down_tab[i].until) {
        down_tab[i].until = 0;
        down_n--;
    }
}

/* Every attempt failed: up's origin is down for down_server.cache_time. */
static void
origin_mark_down(const struct upstream *up)
{
    int t = wk->conf->rec.down_server_time, i = origin_down_find(up);
    time_t now = time(NULL);

    if (t <= 0 || (up->up_prule != NULL && up->up_pidx >= 0))
        return;     /* (a parent's failures go to the shared parent table) */
    for (int k = 0; i < 0 && k < DOWN_MAX; k++)
        if (down_tab[k].until == 0 || down_tab[k].until <= now) {
            if (down_tab[k].until == 0)
                down_n++;
            i = k;
        }
    if (i < 0)
        return;     /* full of fresh marks: this one is not remembered */
    snprintf(down_tab[i].host, sizeof(down_tab[i].host), "%s", up->up_host);
    down_tab[i].port = up->up_port;
    if (down_tab[i].until <= now)
        log_warn("origin %s:%d marked down for %d s (every connect attempt failed)",
                 up->up_host, up->up_port, t);
    down_tab[i].until = now + t;
}

/* The attempts a request may make to up's origin: 1 + max_retries, or
 * max_retries_dead_server while it is marked down. */
static int
origin_tries(const struct upstream *up)
{
    const struct conf_records *rec = &wk->conf->rec;
    int i;

    if (up->up_prule != NULL && up->up_pidx >= 0) {
        /* a parent (worker/parent.c keeps its health, shared): ATS's
         * per_parent_connect_attempts within total_connect_attempts */
        int left = rec->parent_total_attempts - up->up_pattempts;
        return left < rec->parent_per_attempts ? left : rec->parent_per_attempts;
    }
    i = origin_down_find(up);
    if (i >= 0 && down_tab[i].until <= time(NULL)) {
        origin_down_clear(i);   /* cache_time is over */
        i = -1;
    }
    return i >= 0 ? rec->connect_retries_dead : 1 + rec->connect_retries;
}

/* Addresses that failed to connect lately (ATS marks a round-robin
 * address down in HostDB for down_server.cache_time): tried last until
 * then.  A few per worker; bad_n counts the slots in use, so the usual
 * case scans nothing. */
#define BAD_MAX 64
static struct {
    struct dns_addr a;
    int             port;
    time_t          until;            /* 0: a free slot */
} bad_tab[BAD_MAX];
static int bad_n;

static int
origin_bad_find(const struct dns_addr *a, int port)
{
    for (int i = 0; bad_n > 0 && i < BAD_MAX; i++)
        if (bad_tab[i].until && bad_tab[i].port == port
            && memcmp(&bad_tab[i].a, a, sizeof(*a)) == 0)
            return i;
    return -1;
}

static void
origin_bad_clear(int i)
{
    if (i >= 0 && bad_tab[i].until) {
        bad_tab[i].until = 0;
        bad_n--;
    }
}

/* Is up_ans[i] marked failed (and the mark not over)? */
static int
origin_bad(const struct upstream *up, int i, time_t now)
{
    int k;

    if (bad_n == 0 || (k = origin_bad_find(&up->up_ans.addr[i], up->up_port)) < 0)
        return 0;
    if (bad_tab[k].until > now)
        return 1;
    origin_bad_clear(k);
    return 0;
}

/* The address up is connecting to failed: mark it (when up_host has others
 * to prefer; a full table of fresh marks forgets this one). */
static void
origin_bad_mark(const struct upstream *up)
{
    int t = wk->conf->rec.down_server_time, i;
    time_t now = time(NULL);
    struct dns_addr a;

    if (t <= 0 || up->up_ans.n < 2)
        return;
    dns_addr_of((const struct sockaddr *)&up->up_addr, &a);
    i = origin_bad_find(&a, up->up_port);
    for (int k = 0; i < 0 && k < BAD_MAX; k++)
        if (bad_tab[k].until == 0 || bad_tab[k].until <= now) {
            if (bad_tab[k].until == 0)
                bad_n++;
            i = k;
        }
    if (i < 0)
        return;
    bad_tab[i].a = a;
    bad_tab[i].port = up->up_port;
    bad_tab[i].until = now + t;
}

/* TCP is up: https origins handshake first (tls.c). */
static void
origin_connected(struct upstream *up)
{
    metrics_connected(up);
    if (down_n > 0)
        origin_down_clear(origin_down_find(up));
    if (bad_n > 0) {
        struct dns_addr a;
        dns_addr_of((const struct sockaddr *)&up->up_addr, &a);
        origin_bad_clear(origin_bad_find(&a, up->up_port));
    }
    if (up->up_https)
        tls_origin_start(up);
    else
        up->up_ready(up, 0);
}

/* The machine's own addresses (every interface's), read once per worker
 * with getifaddrs(): a forward-proxy client must not reach them. */
#define OWN_MAX 64
static struct sockaddr_storage own_addr[OWN_MAX];
static int own_n = -1;

static void
origin_own_load(void)
{
    struct ifaddrs *ifa = NULL;

    own_n = 0;
    if (getifaddrs(&ifa) < 0)
        return;
    for (struct ifaddrs *i = ifa; i != NULL && own_n < OWN_MAX; i = i->ifa_next) {
        if (i->ifa_addr == NULL)
            continue;
        if (i->ifa_addr->sa_family == AF_INET)
            memcpy(&own_addr[own_n++], i->ifa_addr, sizeof(struct sockaddr_in));
        else if (i->ifa_addr->sa_family == AF_INET6)
            memcpy(&own_addr[own_n++], i->ifa_addr, sizeof(struct sockaddr_in6));
    }
    freeifaddrs(ifa);
}

/* 1 when sa is this machine or its link: loopback, "this host" (0/8, ::),
 * link-local, or an address of one of its interfaces (IPv4-mapped IPv6
 * addresses are judged as IPv4). */
static int
origin_addr_internal(const struct sockaddr *sa)
{
    struct in_addr v4 = { 0 };
    const struct in6_addr *a6 = NULL;

    if (sa->sa_family == AF_INET6) {
        a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (!IN6_IS_ADDR_V4MAPPED(a6)) {
            if (IN6_IS_ADDR_LOOPBACK(a6) || IN6_IS_ADDR_UNSPECIFIED(a6)
                || IN6_IS_ADDR_LINKLOCAL(a6))
                return 1;
            goto own;
        }
        memcpy(&v4, &a6->s6_addr[12], 4);
    } else if (sa->sa_family == AF_INET) {
        v4 = ((const struct sockaddr_in *)sa)->sin_addr;
    } else {
        return 1;
    }
    uint32_t h = ntohl(v4.s_addr);
    if ((h >> 24) == 127 || (h >> 24) == 0 || (h >> 16) == 0xa9fe)
        return 1;
    a6 = NULL;
own:
    if (own_n < 0)
        origin_own_load();
    for (int i = 0; i < own_n; i++) {
        const struct sockaddr *o = (const struct sockaddr *)&own_addr[i];
        if (a6 == NULL && o->sa_family == AF_INET
            && ((const struct sockaddr_in *)o)->sin_addr.s_addr == v4.s_addr)
            return 1;
        if (a6 != NULL && o->sa_family == AF_INET6
            && memcmp(&((const struct sockaddr_in6 *)o)->sin6_addr, a6, 16) == 0)
            return 1;
    }
    return 0;
}

/* Outbound ip_allow: 1 (and a log line unless quiet) when up's request
 * must not be sent to sa.  The out rules decide where one holds the
 * address; where none does, remapped requests go anywhere (their origin is
 * the operator's choice), while forward-proxied ones (no rule: the client named the
 * host) never reach the machine itself or its link, so an open forward
 * port is no way into local services or the admin endpoints. */
static int
origin_denied(const struct upstream *up, const struct sockaddr *sa, int quiet)
{
    const struct conf_ip_allow *ia = &wk->conf->ip_allow;
    const char *m, *by;
    char        peer[64];
    int         rc;

    if (ia->nout == 0 && (up->up_rule != NULL || (up->up_prule != NULL && up->up_pidx >= 0)))
        return 0;
    m = http_method_name(up->up_method);
    rc = conf_ip_out_decide(ia, sa, m, strlen(m));
    by = ia->source;
    if (rc < 0) {
        /* a parent.config parent is the operator's choice, as a remap
         * rule's origin is */
        rc = up->up_rule != NULL || (up->up_prule != NULL && up->up_pidx >= 0)
             || !origin_addr_internal(sa);
        by = "the forward-proxy default (no dest_ip / apply: out rule "
             "holds this address)";
    }
    if (rc)
        return 0;
    if (quiet)
        return 1;
    fmt_peer(sa, peer, sizeof(peer));
    log_notice("conn %llu: %s to origin %s (%s) denied by %s",
               (unsigned long long)up->up_req->rq_id, m, up->up_host, peer, by);
    return 1;
}

/* ------------------------------------------------------------------ */

/* A numeric host ("1.2.3.4", "[::1]") as up's only address: 1, else 0. */
static int
origin_numeric(struct upstream *up)
{
    char h[256];
    size_t n = strlen(up->up_host);
    struct dns_addr *a = &up->up_ans.addr[0];

    memset(a, 0, sizeof(*a));
    if (inet_pton(AF_INET, up->up_host, a->a) == 1) {
        a->family = AF_INET;
        up->up_ans.n = 1;
        return 1;
    }
    if (n > 2 && up->up_host[0] == '[' && n - 2 < sizeof(h)) {
        memcpy(h, up->up_host + 1, n - 2);
        h[n - 2] = '\0';
        if (inet_pton(AF_INET6, h, a->a) == 1) {
            a->family = AF_INET6;
            up->up_ans.n = 1;
            return 1;
        }
    }
    return 0;
}

/* dns.c has up's addresses, or none. */
static void
origin_on_dns(struct dns_wait *wait, enum dns_rc rc)
{
    struct upstream *up = (struct upstream *)((char *)wait
                                              - offsetof(struct upstream, up_dns));

    magic_check(up->up_magic, UP_MAGIC);
    if (rc != DNS_OK) {
        log_warn("conn %llu: cannot resolve origin %s: %s",
                 (unsigned long long)up->up_req->rq_id, up->up_host,
                 dns_strerror(wait->err));
        up->up_ready(up, 502);
        return;
    }
    if (origin_connect_fresh(up) < 0)
        up->up_ready(up, up->up_cfail);
}

static void
origin_on_connect(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *up = arg;
    int err = 0;
    socklen_t len = sizeof(err);
    char peer[64];

    magic_check(up->up_magic, UP_MAGIC);
    event_del(&up->up_wev);
    fmt_peer((struct sockaddr *)&up->up_addr, peer, sizeof(peer));
    if (what & EV_TIMEOUT) {
        log_warn("conn %llu: connect to origin %s:%d (%s) timed out",
                 (unsigned long long)up->up_req->rq_id, up->up_host,
                 up->up_port, peer);
        origin_retry(up, 504);
        return;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err) {
        log_warn("conn %llu: connect to origin %s:%d (%s): %s",
                 (unsigned long long)up->up_req->rq_id, up->up_host,
                 up->up_port, peer, strerror(err));
        origin_retry(up, 502);
        return;
    }
    origin_connected(up);
}

/* An attempt failed (status: the answer if it was the last): mark the
 * address, go on with the next one (or round) while any is left. */
static void
origin_retry(struct upstream *up, int status)
{
    close(up->up_fd);
    up->up_fd = -1;
    up->up_cfail = status;
    origin_bad_mark(up);
    if (origin_connect_fresh(up) == 0)
        return;
    up->up_ready(up, up->up_cfail);
}

/* The next address of up_ans to try in this round: the untried ones in
 * order, those marked failed last; -1 when every one was tried. */
static int
origin_pick(const struct upstream *up)
{
    time_t now = time(NULL);
    uint32_t done = up->up_tried | up->up_denied;
    int marked = -1;

    for (int i = 0; i < up->up_ans.n; i++) {
        if (done & (1u << i))
            continue;
        if (!origin_bad(up, i, now))
            return i;
        if (marked < 0)
            marked = i;
    }
    return marked;
}

/* Connect to up's next address, round after round while rounds are left:
 * 0 when a connection is made or under way, or up_ready was called (403:
 * ip_allow denies every address); -1 when every attempt failed (after
 * marking the origin down): the caller answers up_cfail. */
static int
origin_connect_fresh(struct upstream *up)
{
    uint32_t all = up->up_ans.n >= 32 ? ~0u : (1u << up->up_ans.n) - 1;
    int i, rc;

    for (;;) {
        if ((i = origin_pick(up)) < 0) {
            if (up->up_denied == all) {
                up->up_ready(up, 403);
                return 0;
            }
            if (--up->up_tries <= 0) {
                origin_mark_down(up);
                return -1;
            }
            up->up_tried = 0;       /* another round */
            continue;
        }
        up->up_tried |= 1u << i;
        up->up_addrlen = dns_sockaddr(&up->up_ans.addr[i], up->up_port,
                                      &up->up_addr);
        if (origin_denied(up, (struct sockaddr *)&up->up_addr, 0)) {
            up->up_denied |= 1u << i;
            continue;
        }
        if ((rc = origin_connect_once(up)) == 0)
            return 0;
        if (up->up_fd >= 0) {
            close(up->up_fd);
            up->up_fd = -1;
        }
        up->up_cfail = 502;
        if (rc == -2) {
            up->up_ready(up, 502);  /* ours, not the origin's: no retry, no mark */
            return 0;
        }
        origin_bad_mark(up);
    }
}

/* One attempt at up_addr: 0 (connected, or connecting), -1 (it failed),
 * or -2 (no socket). */
static int
origin_connect_once(struct upstream *up)
{
    struct worker *w = wk;
    int parent = up->up_prule != NULL && up->up_pidx >= 0;
    struct timeval tv = { parent ? w->conf->rec.parent_connect_timeout
                                 : w->conf->rec.connect_timeout, 0 };
    int fd, one = 1;
    char peer[64];

    fd = socket(up->up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        log_warn("conn %llu: origin socket: %s",
                 (unsigned long long)up->up_req->rq_id, strerror(errno));
        return -2;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    up->up_fd = fd;
    up->up_reused = 0;
    if (parent)
        up->up_pattempts++;
    w->ctr->origin_conns_opened++;
    up->up_cstart = metrics_now();
    up->up_state = UP_CONNECTING;
    if (connect(fd, (struct sockaddr *)&up->up_addr, up->up_addrlen) == 0) {
        origin_connected(up);
        return 0;
    }
    if (errno != EINPROGRESS) {
        fmt_peer((struct sockaddr *)&up->up_addr, peer, sizeof(peer));
        log_warn("conn %llu: connect to origin %s:%d (%s): %s",
                 (unsigned long long)up->up_req->rq_id, up->up_host,
                 up->up_port, peer, strerror(errno));
        return -1;
    }
    event_assign(&up->up_wev, w->base, fd, EV_WRITE, origin_on_connect, up);
    event_add(&up->up_wev, &tv);
    return 0;
}

/* A pooled connection to up's origin that ip_allow lets up use: 1 when one
 * was attached and up_ready called, else 0. */
static int
origin_from_pool(struct upstream *up)
{
    struct worker *w = wk;

    for (struct origin_idle *e = w->idle; e; e = e->next) {
        if (e->port != up->up_port || e->https != (int)up->up_https
            || strcasecmp(e->host, up->up_host) != 0)
            continue;
        if (origin_denied(up, (struct sockaddr *)&e->addr, 1))
            continue;       /* stays idle; a fresh connect says why */
        memcpy(&up->up_addr, &e->addr, e->addrlen);
        up->up_addrlen = e->addrlen;
        up->up_fd = e->fd;
        up->up_tls = e->tls;
        e->fd = -1;
        e->tls = NULL;
        /* The transaction's read event is added before the idle
         * watch goes: the fd's interest set never changes, and epoll
         * is not told (two epoll_ctl calls per request). */
        up->up_attach(up);
        origin_idle_close(w, e);
        up->up_reused = 1;
        w->ctr->origin_conns_reused++;
        up->up_ready(up, 0);
        return 1;
    }
    return 0;
}

void
origin_get(struct upstream *up, int pooled, origin_ready_fn ready,
           origin_attach_fn attach)
{
    up->up_ready = ready;
    up->up_attach = attach;
    up->up_fd = -1;
    if (pooled && origin_from_pool(up))
        return;
    /* (a pooled connection is not an attempt: counted from here) */
    if ((up->up_tries = origin_tries(up)) <= 0) {
        log_warn("conn %llu: origin %s:%d is marked down: not tried",
                 (unsigned long long)up->up_req->rq_id, up->up_host, up->up_port);
        up->up_ready(up, 502);
        return;
    }
    up->up_tried = up->up_denied = 0;
    up->up_cfail = 502;
    if (!origin_numeric(up)) {
        enum dns_rc rc;

        up->up_dns.ans = &up->up_ans;
        up->up_dns.done = origin_on_dns;
        up->up_state = UP_RESOLVING;
        if ((rc = dns_lookup(up->up_host, &up->up_dns)) == DNS_WAIT)
            return;
        if (rc != DNS_OK) {
            origin_on_dns(&up->up_dns, rc);
            return;
        }
    }
    if (origin_connect_fresh(up) < 0)
        up->up_ready(up, up->up_cfail);
}

void
origin_release(struct upstream *up)
{
    dns_cancel(&up->up_dns);
    if (up->up_fd >= 0) {
        /* (a connect still in progress has only its write event) */
        if (event_initialized(&up->up_rev))
            event_del(&up->up_rev);
        if (event_initialized(&up->up_wev))
            event_del(&up->up_wev);
        close(up->up_fd);
        up->up_fd = -1;
    }
    if (up->up_tls) {
        tls_origin_free(up->up_tls);
        up->up_tls = NULL;
    }
}

/* ------------------------------------------------------------------ */

static void
origin_idle_close(struct worker *w, struct origin_idle *e)
{
    event_del(&e->ev);
    if (e->tls)
        tls_origin_free(e->tls);
    e->tls = NULL;
    if (e->fd >= 0)
        close(e->fd);
    if (e->prev)
        e->prev->next = e->next;
    else
        w->idle = e->next;
    if (e->next)
        e->next->prev = e->prev;
    w->nidle--;
    e->magic = 0;
    pool_put(&w->idle_pool, e);
}

static void
origin_on_idle_event(evutil_socket_t fd, short what, void *arg)
{
    struct origin_idle *e = arg;

    /* EOF, stray bytes or the idle timeout: the connection is done. */
    magic_check(e->magic, IDLE_MAGIC);
    origin_idle_close(wk, e);
}

/* Has the origin sent up anything more (bytes nobody asked for, or its
 * close) that our reads have not taken?  Looked for only when the last
 * read may have left some (up_more).  1 if so (bytes are logged and
 * counted), or when the socket cannot be read. */
static int
origin_spoke(const struct upstream *up)
{
    char c;
    ssize_t n = 1;

    if (!up->up_more)
        return 0;
    if (!tls_origin_pending(up)) {
        n = recv(up->up_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
    }
    if (n > 0) {
        log_warn("conn %llu: origin %s:%d sent bytes after its answer: not reused",
                 (unsigned long long)up->up_req->rq_id, up->up_host, up->up_port);
        wk->ctr->origin_errors++;
    }
    return 1;
}

void
origin_put(struct upstream *up)
{
    struct worker *w = wk;
    struct timeval tv = { w->conf->rec.ka_no_activity_out, 0 };
    struct origin_idle *e;
    int same = 0;

    for (e = w->idle; e; e = e->next)
        if (e->port == up->up_port && e->https == (int)up->up_https
            && strcasecmp(e->host, up->up_host) == 0)
            same++;
    if (w->draining || same >= w->conf->rec.origin_max_idle || w->nidle >= POOL_MAX
        || w->conf->rec.ka_no_activity_out == 0 || origin_spoke(up)
        || (e = pool_get(&w->idle_pool)) == NULL) {
        origin_release(up);
        return;
    }
    e->magic = IDLE_MAGIC;
    e->fd = up->up_fd;
    e->tls = up->up_tls;
    e->https = up->up_https;
    e->port = up->up_port;
    memcpy(e->host, up->up_host, sizeof(e->host));
    memcpy(&e->addr, &up->up_addr, up->up_addrlen);
    e->addrlen = up->up_addrlen;
    /* The idle watch is added before the transaction's events go, so the
     * fd stays in epoll as it was (see origin_get). */
    event_assign(&e->ev, w->base, e->fd, EV_READ, origin_on_idle_event, e);
    event_priority_set(&e->ev, WK_PRIO_IDLE);
    event_add(&e->ev, &tv);
    event_del(&up->up_rev);
    event_del(&up->up_wev);
    up->up_fd = -1;
    up->up_tls = NULL;
    e->prev = NULL;
    e->next = w->idle;
    if (w->idle)
        w->idle->prev = e;
    w->idle = e;
    w->nidle++;
}

void
origin_pool_init(struct worker *w)
{
    pool_init(&w->idle_pool, sizeof(struct origin_idle));
}

void
origin_pool_close_all(struct worker *w)
{
    while (w->idle)
        origin_idle_close(w, w->idle);
    pool_drain(&w->idle_pool);
    dns_shutdown(w);
}
