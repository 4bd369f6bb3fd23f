/*
 * worker/worker.h: one worker process: a libevent loop serving clients.
 *
 * A worker is forked by the master into a slot of the shared region.  It
 * inherits its listening sockets (one per configured port, for its worker
 * index), builds its own event_base after fork, and runs until told to
 * stop (SIGTERM: now; SIGQUIT or a drain order: finish what is in flight).
 *
 * Connections (conn.c) are one struct each with an explicit state; each
 * carries its requests (req.h, req.c: the steps).  Memory a connection
 * holds while idle is only that struct: its buffers and request go back
 * to the worker's pools (buf.h) between requests.  DESIGN.md has the
 * files' layering and what each may call.
 */
#ifndef CISTERN_WORKER_H
#define CISTERN_WORKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <sys/socket.h>

#include "cache/cache.h"
#include "conf/conf.h"
#include "shm/shm.h"
#include "worker/buf.h"
#include "worker/http.h"
#include "worker/variant.h"
#include "worker/dns.h"
#include "cache/cache.h"
#include "worker/req.h"

/* cache_meta.flags of ours */
#define STORE_F_NO_CACHE        0x1   /* always revalidate */
#define STORE_F_MUST_REVALIDATE 0x2   /* never served stale */
#define STORE_F_VARY_MARKER     0x4   /* lists the Vary fields of a URL */
#define STORE_F_HEURISTIC       0x8   /* its freshness was a heuristic */
#define STORE_F_SET_COOKIE      0x10  /* came with Set-Cookie (not stored) */
#define STORE_F_TAGS            0x20  /* holds Surrogate-Key / Cache-Tag lines */

/* What an answer from the cache must honour, copied out of the request. */
struct store_cond {
    int      method;
    int      minor;
    char     inm[512];                /* If-None-Match */
    char     ims[64];                 /* If-Modified-Since */
    char     range[128];
    char     if_range[128];
};
enum store_verdict {
    STORE_MISS = 0,
    STORE_HIT,          /* fresh (or stale as the client allows): serve it */
    STORE_HIT_STALE,    /* stale-while-revalidate: serve it, refresh behind */
    STORE_REVALIDATE,   /* held for a conditional request to the origin */
    STORE_ONLY_CACHED,  /* a miss the client forbids us to fetch (504) */
};

struct origin_idle;
struct ssl_st;

/* What the master hands a worker. */
struct worker_args {
    const struct conf *conf;
    struct shm        *shm;
    unsigned           slot;         /* shm slot */
    unsigned           index;        /* worker index = listener column */
    uint32_t           generation;
    const int         *listen_fds;   /* [nports] for this index */
    int                nlisten;
    int                master_pipe;  /* read end; EOF = master died */
    const struct cache_conf *cache_cf; /* NULL: run without a cache */
    const int         *wake_fds;     /* [nslots]: fill-table wake-ups */
    unsigned           nslots;
};

/* Run the worker; returns the process exit status. */
int worker_main(const struct worker_args *a);

/* ------------------------------------------------------------------ */
/* internals shared by the files of worker/ */

#define CONN_MAGIC   0x434f4e4eu     /* "CONN" */
#define WORKER_MAGIC 0x574f524bu     /* "WORK" */

enum conn_state {
    CONN_IDLE = 0,                   /* keep-alive: waiting, no buffers */
    CONN_HEAD,                       /* reading a request head */
    CONN_BODY,                       /* reading (discarding) a request body */
    CONN_PROXY,                      /* an origin transaction is running */
    CONN_WAIT,                       /* waiting for another worker's fill */
    CONN_SEND,                       /* flushing responses, then next */
    CONN_LINGER,                     /* SHUT_WR sent; draining input */
    CONN_TUNNEL,                     /* CONNECT connecting, or a tunnel
                                        ready to take the socket over */
};

struct upstream;
struct push;

/* A client address, no bigger than an IPv6 one (sockaddr_storage would
 * add 100 bytes to every connection). */
union conn_addr {
    struct sockaddr      sa;
    struct sockaddr_in   in;
    struct sockaddr_in6  in6;
};

/* A write event lent to a connection while its output waits. */
struct conn_wev {
    struct event         ev;
    int                  unsent;      /* sock_unsent() when the timer was
                                         last started: see conn_on_write */
};

struct conn {
    uint32_t         cn_magic;
    int              cn_fd;
    enum conn_state  cn_state;
    /* flags, together so they share one word */
    unsigned         cn_close:1;      /* close once cn_out is flushed */
    unsigned         cn_in_eof:1;
    unsigned         cn_read_blocked:1;
    unsigned         cn_abort:1;      /* cut now: a response was truncated */
    unsigned         cn_in_process:1; /* inside conn_process(): no re-entry */
    unsigned         cn_hold:1;       /* cn_out waits until the request body
                                         we are discarding has ended */
    unsigned         cn_bg:1;         /* internal: a background revalidation
                                         or fill (no client) */
    unsigned         cn_bgkick:1;     /* a background fill's first turn is due */
    unsigned         cn_tls_up:1;     /* TLS handshake done */
    unsigned         cn_tls_rw:1;     /* SSL_read waits for writability */
    unsigned         cn_tls_wr:1;     /* SSL_write waits for readability */
    unsigned         cn_in_flush:1;   /* inside conn_flush(): a nested call
                                         (an origin failure found while
                                         pumping) leaves the work to it */
    unsigned         cn_fresh:1;      /* no request head completed yet */
    unsigned         cn_local_ok:1;   /* cn_local is known (conn_local) */
    unsigned         cn_pp:1;         /* a pp port: the PROXY header is
                                         still to come (conn.c, pp.h) */
    unsigned         cn_protos:2;     /* CONF_PROTO_* of its port */
    void            *cn_h2;           /* HTTP/2 (h2.c's struct h2c), or
                                         NULL: HTTP/1.x */
    uint64_t         cn_id;
    struct event     cn_rev;
    struct conn_wev *cn_wev;          /* write interest, from the worker's pool
                                         while a write waits (conn_want_write),
                                         else NULL: idle connections hold none */
    struct buf       cn_in;           /* request bytes */
    struct buf       cn_out;          /* response bytes */
    struct req      *cn_req;          /* NULL while idle */
    struct timeval   cn_head_start;   /* first byte of the current head */
    size_t           cn_hold_mark;    /* cn_out.end before the held answer */
    size_t           cn_discarded;    /* body bytes dropped for it so far */
    union conn_addr  cn_peer;         /* the client (IPv4 or IPv6) */
    union conn_addr  cn_local;        /* where it connected to, once asked */
    struct ssl_st   *cn_tls;          /* TLS (tls.c), or NULL: plain TCP */
    struct conn     *cn_next;         /* the worker's list of connections */
    struct conn     *cn_prev;
};

#define UP_MAGIC 0x55505354u           /* "UPST" */

/* Event priorities (libevent runs only the most urgent of a turn's active
 * events, then polls again): an idle origin connection's watch comes
 * before everything else, so bytes it got close it before a request of the
 * same turn can reuse it (origin.c).  Every other event has the default,
 * WK_PRIORITIES / 2. */
#define WK_PRIORITIES 2
#define WK_PRIO_IDLE  0

enum up_state {
    UP_RESOLVING = 1,                 /* waiting for the name (dns.c) */
    UP_CONNECTING,                    /* non-blocking connect in progress */
    UP_SENDING,                       /* request head (and body) going out */
    UP_HEAD,                          /* reading the response head */
    UP_BODY,                          /* streaming the response body */
};

/* How origin.c (and tls.c) hand an upstream back to its owner: ready
 * says the connection is usable (err 0) or could not be had (err: the
 * status to answer, 502 or 504, or 403 from ip_allow's out rules); attach sets up the owner's events on a
 * pooled connection (see origin_get). */
typedef void (*origin_ready_fn)(struct upstream *up, int err);
typedef void (*origin_attach_fn)(struct upstream *up);

/* One origin transaction, owned by its request (rq_up). */
/* A stored part held while a fill combines with it (store.c). */
struct store_part_old {
    struct cache_obj obj;
    uint64_t         tail, end;       /* its body bytes [tail, end) follow ours */
    int              held;
};

/* Completing a stored part (store_part_plan, RFC 9111 3.3): the one
 * range asked of the origin, and the part's bytes that go with it. */
struct store_cpl {
    uint64_t         qa, qb;          /* the range asked of the origin */
    uint64_t         n;               /* the representation's length */
    uint64_t         ca, cb;          /* the bytes the client gets */
    uint64_t         pos, end;        /* the part's body bytes [pos, end)
                                         sent with the origin's */
    unsigned         after:1;         /* they follow the origin's (the
                                         head was missing), else precede */
    unsigned         whole:1;         /* no Range: the client gets a 200 */
    unsigned         strong:1;        /* the part has a strong ETag: sent
                                         as If-Range, a 206 may combine */
};

struct upstream {
    uint32_t         up_magic;
    enum up_state    up_state;
    struct req      *up_req;          /* the request it serves */
    int              up_fd;
    struct ssl_st   *up_tls;          /* https origin (tls.c), or NULL */
    unsigned         up_https:1;      /* the target's scheme is https */
    struct event     up_rev, up_wev;
    struct buf       up_in;           /* origin -> us; [start, parsed) is
                                         body ready for the client */
    struct buf       up_out;          /* us -> origin */
    size_t           up_parsed;       /* offset in up_in parsed so far */
    struct http_req *up_resp;         /* the response head's parse */
    struct dns_wait  up_dns;          /* the name's lookup (dns.c) */
    origin_ready_fn  up_ready;        /* set by origin_get() */
    origin_attach_fn up_attach;
    void           (*up_answer)(struct req *); /* our answer when the
                                         origin fails (proxy_start) */
    char             up_host[256];    /* origin host (pool key with port) */
    int              up_port;
    struct sockaddr_storage up_addr;  /* the address being connected to */
    socklen_t        up_addrlen;
    struct dns_answer up_ans;         /* every address of up_host */
    uint32_t         up_tried;        /* bits of up_ans tried this round */
    uint32_t         up_denied;       /* bits of up_ans ip_allow denies */
    int              up_cfail;        /* the last failed attempt's status */
    int              up_method;       /* the client's request */
    int              up_client_minor;
    int              up_client_ka;    /* client keep-alive wanted */
    uint64_t         up_req_body_left;/* client body bytes still to forward */
    unsigned         up_reused:1;     /* connection came from the pool */
    unsigned         up_retried:1;
    int              up_tries;        /* connect rounds left (origin.c) */
    unsigned         up_req_body:1;   /* the request has a body */
    unsigned         up_body_moot:1;  /* ... its method gives no meaning,
                                         or the answer came before all of
                                         the request was sent: the
                                         connection is never pooled */
    unsigned         up_req_done:1;   /* request fully written to origin */
    unsigned         up_resp_bytes:1; /* any response byte received */
    unsigned         up_eof:1;        /* origin closed */
    unsigned         up_more:1;       /* the last read filled its room, or
                                         was TLS: the socket may hold more */
    unsigned         up_decode:1;     /* de-chunk for an HTTP/1.0 client */
    unsigned         up_safe:1;       /* safe to retry on a fresh connection */
    unsigned         up_upgrade:1;    /* Upgrade forwarded: a 101 tunnels */
    const struct conf_remap_rule *up_rule;
    /* caching */
    unsigned         up_store:1;      /* GET with a key: may fill */
    unsigned         up_part:1;       /* a Range miss: a 206 fills the part
                                         key (up_key ends STORE_PART_SUFFIX) */
    unsigned         up_req_auth:1;   /* the request had Authorization */
    int64_t          up_req_time;     /* when we sent the request */
    uint64_t         up_purge_gen;    /* cache_purge_gen() then (a fill across a
                                         purge is stored stale) */
    struct timeval   up_deadline;     /* transaction_active_timeout_out, or 0 */
    const char      *up_cstatus;      /* Cache-Status fwd= value */
    const char      *up_cdetail;      /* why not stored, or NULL */
    unsigned         up_reval:1;      /* conditional on a held stale object */
    unsigned         up_claim:1;      /* we hold the fill-table entry */
    unsigned         up_bg_rww:1;     /* a background fill kept for joiners */
    unsigned         up_orphan:1;     /* ... all gone before enough came */
    int              up_unsent;       /* sock_unsent() at the last wait to
                                         write the request (up_on_timeout) */
    uint8_t          up_hash[16];
    int64_t          up_claim_renew;  /* ms: renew the claim (a fill still
                                         receiving) from then on */
    /* parent.config (worker/parent.c): up_host/up_port are the parent in
     * use while up_pidx >= 0; the origin is kept in up_ohost/up_oport */
    const struct conf_parent_rule *up_prule; /* the matching rule, or NULL */
    int              up_pidx;         /* the parent in use, -1: the origin */
    int              up_pslot;        /* its shm parent-table entry, or -1 */
    uint64_t         up_ptried;       /* parents tried (a bit per index) */
    int              up_pattempts;    /* connect attempts to parents */
    int              up_psimple;      /* simple / unavailable-server */
    int              up_punavail;     /*   retries made */
    int              up_ppos, up_pnorder;  /* position in, length of ... */
    uint8_t          up_porder[CONF_PP_MAX_PARENTS]; /* the order to try */
    int              up_oh1;          /* metrics: label index + 1 of the
                                         origin host counted (0: not yet) */
    int64_t          up_cstart;       /* metrics: connect began (0: none) */
    unsigned         up_pabs:1;       /* the request line is absolute-form */
    unsigned         up_ohttps:1;     /* the origin's scheme is https */
    int              up_abslen;       /* bytes of "scheme://authority" in it */
    int              up_oport;
    char             up_ohost[256];
    struct store_cond up_cond;        /* the client's conditions */
    struct cache_fill *up_fill;
    uint64_t         up_fill_got;     /* body bytes given to up_fill */
    struct store_part_old up_old;     /* a stored part this fill combines with */
    struct store_cpl up_cpl;          /* completing the part rq->obj holds */
    size_t           up_cpl_off;      /* where our Range starts in up_out */
    unsigned         up_cpl_on:1;     /* our Range asks for the rest */
    unsigned         up_cpl_join:1;   /* the 206 combines: the client gets
                                         the part's bytes and the origin's */
    unsigned         up_lent:1;       /* rq_body is the part's, not up_in's */
    int              up_rww;          /* read-while-writer: published in
                                         the fill table's slot up_rww - 1 */
    uint64_t         up_rww_next;     /* publish again at this many bytes */
    size_t           up_keylen;
    char             up_key[STORE_KEY_MAX];
};

struct worker {
    uint32_t             magic;       /* WORKER_MAGIC */
    struct event_base   *base;
    const struct conf   *conf;
    struct shm          *shm;
    struct shm_slot     *slot;
    struct shm_counters *ctr;
    struct urltop       *urls;       /* the slot's busiest URLs */
    unsigned             index;
    uint32_t             generation;
    struct event        *listen_ev[CONF_MAX_PORTS];
    int                  listen_fd[CONF_MAX_PORTS];
    int                  listen_tls[CONF_MAX_PORTS]; /* a PORT:ssl listener */
    int                  listen_pp[CONF_MAX_PORTS];  /* a PORT:pp listener */
    int                  listen_protos[CONF_MAX_PORTS]; /* CONF_PROTO_* */
    int                  nlisten;
    struct event        *sig_term, *sig_quit, *sig_int, *sig_hup, *sig_usr1;
    struct event        *master_ev;
    struct event        *tick;
    struct event        *accept_pause;  /* re-arms the listeners after EMFILE */
    int                  draining;
    int                  accepting;     /* listeners watched: our generation serves */
    struct timeval       drain_deadline;
    struct conn         *conns;       /* every open connection */
    unsigned             nconns;
    uint64_t             next_id;
    struct http_limits   limits;
    struct http_limits   resp_limits;
    struct evdns_base   *dns;
    struct origin_idle  *idle;        /* pooled origin connections */
    unsigned             nidle;
    /* The typed pools (buf.h): every fixed-size object of a worker. */
    struct pool          conn_pool;   /* struct conn */
    struct pool          wev_pool;    /* struct conn_wev */
    struct pool          req_pool;    /* struct req */
    struct pool          up_pool;     /* struct upstream */
    struct pool          head_pool;   /* struct http_req: an origin's
                                         response head */
    struct pool          idle_pool;   /* origin.c's struct origin_idle */
    char                 server_hdr[300]; /* "Server: ...\r\n" or "" (via.c) */
    size_t               server_hdr_len;
    char                 debug_hdr[96];/* "X-Cistern-Worker: ..." or "" */
    struct cache        *cache;       /* NULL: no store */
    unsigned             slotno;      /* our shm slot */
    const int           *wake_fds;    /* every slot's eventfd */
    unsigned             nslots;
    struct event        *wake_ev;
    struct req          *waitq;       /* requests in REQ_WAIT */
    struct req          *joinq;       /* joiners of fills (worker/rww.c) */
    struct req          *sliceq;      /* ranges streamed block by block
                                         (worker/slice.c) */
    int                  cache_area_ok;/* the shm cache area is laid out */
};

extern struct worker *wk;            /* this process's worker */

/* Do answers end their connections?  While the worker drains, and while
 * `cistern ctl server drain` says so (every worker, until undrain). */
static inline int
worker_closing(void)
{
    return wk->draining || wk->shm->hdr->ctl_drain;
}

/* conn.c */
/* Take an accepted socket; tls: the listener is PORT:ssl; pp: PORT:pp
 * (a PROXY protocol header comes first, from an allowed peer). */
void conn_accept(struct worker *w, int fd, const struct sockaddr *sa,
                 socklen_t salen, int tls, int pp, int protos);
void conn_drain_all(struct worker *w);
void conn_close_all(struct worker *w);

/* origin.c: connections to origins (DNS, connect, the idle pool) */
/* Start getting a connection for up (host/port set): from the pool when
 * `pooled`, else a new one; calls ready(up, err) when done (maybe before
 * returning).  err is 0, or the status to answer (502/504, or 403 when
 * ip_allow's out rules deny the origin's address).  A pooled
 * connection is given to attach(up) first, while the idle watch still
 * holds the fd; ready is also called by tls.c after the handshake with
 * an https origin.  Both are kept in up (up_ready, up_attach). */
void origin_get(struct upstream *up, int pooled, origin_ready_fn ready,
                origin_attach_fn attach);
/* Return up's connection to the pool (or close it when the pool is full). */
void origin_put(struct upstream *up);
/* Cancel a pending resolve/connect and close the fd. */
void origin_release(struct upstream *up);
void origin_pool_init(struct worker *w);
void origin_pool_close_all(struct worker *w);

/* parent.c: parent.config's selection and failover (issue 20) */
enum parent_why { PARENT_FAIL = 1, PARENT_SIMPLE, PARENT_UNAVAIL };
/* Route up (set up from res) through a parent when a parent.config line
 * matches: up_host/up_port become the parent's.  lookupable: the request
 * is a cache lookup (uncacheable_requests_bypass_parent).  0, or the
 * status to answer (every parent down and no go_direct), *why set. */
int  parent_route(struct upstream *up, const struct req *rq,
                  const struct conf_remap_result *res, int lookupable,
                  const char **why);
/* The attempt failed (why): count it against the parent, and choose the
 * next target (a parent, or the origin with go_direct), rewriting the
 * request line when that changes its form.  1 when there is one (the
 * caller reconnects), 0 when not. */
int  parent_next(struct upstream *up, enum parent_why why);
/* Count a failure only (the request cannot be repeated). */
void parent_failed(struct upstream *up);
/* A parent's response of status: PARENT_SIMPLE / PARENT_UNAVAIL when the
 * rule retries it elsewhere (counted), else 0. */
int  parent_status_retry(struct upstream *up, int status);
/* The parent answered: it is up; its name goes to the access log. */
void parent_answered(struct upstream *up);
/* The name of the parent in use, or NULL. */
const char *parent_name(const struct upstream *up);

/* proxy.c: the origin transaction */
/* Forward request rq to the origin chosen by res; key (or NULL) is the
 * cache key a GET may fill, fwd the Cache-Status reason.  Returns 0 (the
 * transaction runs, in rq_up; or it failed at once and answered, and
 * rq_up is NULL), or a status to answer with, *why saying why.  When the
 * origin fails before it answers, the transaction describes our answer
 * in rq->syn and calls answer(rq) (the completion callback: req.c's
 * req_answer_ours), maybe before proxy_start returns. */
int  proxy_start(struct req *rq, const struct conf_remap_result *res,
                 const struct conf_remap_rule *rule, int keep_alive,
                 const char *key, size_t keylen, const char *fwd,
                 void (*answer)(struct req *), const char **why);
/* origin_get()'s ready callback (see origin_ready_fn). */
void proxy_origin_ready(struct upstream *up, int err);
/* The Host value sent with proxy.config.url_remap.pristine_host_hdr: the
 * client's Host, or an absolute-form target's authority.  Into out (NUL
 * ended); returns its length, 0 when there is none or it does not fit. */
size_t proxy_pristine_host(const struct http_req *r, char *out, size_t outlen);
/* origin_get()'s attach callback: set up up's events on its (pooled)
 * connection and arm the read side, before proxy_origin_ready(up, 0). */
void proxy_origin_attach(struct upstream *up);
/* Client side callbacks from conn.c */

enum wk_rc proxy_pump(struct req *rq);
void proxy_client_sent(struct req *rq, size_t n);
/* Feed the client's request body; returns HTTP_OK / HTTP_AGAIN / status. */
int  proxy_client_body(struct req *rq);
void proxy_abort(struct req *rq);
/* Should rq's origin transaction go on without its client (a background
 * fill: the client left, a fill runs, enough of it arrived or joiners
 * follow it, until they all leave before enough came)? */
int  proxy_bg_fill(struct req *rq);

/* store.c: hits and fills (the pure key, Vary and Range rules: variant.h) */
/* req.c: `cistern ctl cache lookup|purge URL`; 0, 1 (not stored), 4 */
int  req_ctl_cache(int purge, const char *url, struct buf *out);
int  store_ctl_lookup(const char *key, size_t keylen, const struct http_req *r,
                      struct buf *out);
/* When key holds a Vary marker: the prefix of its current variants'
 * secondary keys (key, \x01, set id, \x01) into out; its length, or 0. */
size_t store_variants_prefix(const char *key, size_t keylen, char *out, size_t outlen);
/* Look key (hash: its cache_key_hash) up for the request rq, counted in
 * the cache's hit and miss counters when count is set (a second look for
 * one request is not).  A verdict of STORE_HIT or STORE_HIT_STALE holds
 * the object (rq->obj) with its Cache-Status in cs; STORE_REVALIDATE may
 * hold a stale one for a conditional request.  *why: Cache-Status fwd=
 * for the others. */
int  store_lookup(struct req *rq, const char *key, size_t keylen, const uint8_t hash[16],
                  int count, const char **why, char *cs, size_t cslen);
void store_release(struct req *rq);
/* A hit's body spans extents (cache_obj_span): lend the next span as
 * rq_body once the last one went out.  Returns 1 if one was lent. */
int  store_body_more(struct req *rq);
void store_cond_from(struct store_cond *sc, const struct http_req *r);
/* Queue the answer for the held object (conditionals, Range honoured);
 * hdr/hdrlen replace its stored header block when not NULL. */
int  store_send(struct req *rq, const struct store_cond *sc, int keep_alive,
                const char *cstatus, const char *hdr, size_t hdrlen);
/* A range streamed block by block (worker/slice.c): bytes [from, to] of
 * total, the held part (a 206) starting at base. */
struct store_span {
    uint64_t from, to, base, total;
};
/* store_send for the held part's first bytes of span: the 206 says all
 * of span, the part lends what it holds of it (rq_hit_pos, rq_hit_end). */
int  store_send_span(struct req *rq, const struct store_cond *sc, int keep_alive,
                     const char *cstatus, const struct store_span *span);
/* Validators of the held object as request fields into b; 1 if any. */
int  store_validators(struct req *rq, struct buf *b);
/* Merge a 304 into the held object's headers and store them (stale, when
 * a purge began since purge_gen, as a fill); the merged block goes to
 * out.  Returns its length or 0. */
size_t store_refresh(struct req *rq, const struct http_req *resp, int64_t req_time,
                     uint64_t purge_gen, char *out, size_t outlen);
/* A 200 to a forwarded HEAD: 1 when it may refresh the held object
 * (RFC 9111 4.3.5: same validators and length), else the object is
 * removed and released and 0. */
int  store_head_fits(struct req *rq, const struct http_req *resp);
int  store_stale_on_error(struct req *rq);
/* An unsafe method's success: remove key and the Location /
 * Content-Location URLs of resp of the same origin as key. */
void store_invalidate(const char *key, size_t keylen, const struct http_req *resp);
/* Start storing the response whose head is resp (for a request sent at
 * req_time, with Authorization when req_auth, under the request's policy
 * pol, NULL: records.config's) under key.  A Vary answer is stored as
 * the variant of req, the request as forwarded, but for Host, which is
 * creq's, the client's (store_variant_key).  Returns NULL with *out set,
 * or why it is not stored (a Cache-Status detail). */
const char *store_fill_begin(const char *key, size_t keylen,
                             const struct http_req *resp,
                             const struct http_req *req, const struct http_req *creq,
                             int req_auth, int64_t req_time,
                             const struct req_policy *pol, struct cache_fill **out);
/* The same for a 206 answering a Range miss (key: the part key, the
 * object's key + STORE_PART_SUFFIX): stored as the byte range it is when
 * it has one Content-Range with a complete length.  A stored part with the
 * same strong ETag that overlaps or adjoins it is combined with it (RFC
 * 9111 3.4): its bytes before ours are written now, those after ours at
 * store_fill_end_part (*old holds it meanwhile); combined up to the whole
 * representation, it is stored as a 200 under the object's key. */
const char *store_fill_begin_part(const char *key, size_t keylen,
                                  const struct http_req *resp, int req_auth,
                                  int64_t req_time, const struct req_policy *pol,
                                  struct cache_fill **out, struct store_part_old *old);
/* store_fill_end() after the held part's tail; releases it. */
int  store_fill_end_part(struct cache_fill **f, struct store_part_old *old, int complete);
/* The key of the stored byte range of an object (RFC 9111 3.3): a tab
 * never appears in a URL key. */
#define STORE_PART_SUFFIX "\tpart"
#define STORE_PART_SUFFIX_LEN 5
/* Does the held object (a stored 206) hold every byte the request's
 * single Range asks for? */
int  store_part_covers(const struct req *rq);
/* The part key of key in pkey[STORE_KEY_MAX]: its length, 0 when too long. */
size_t store_part_key(const char *key, size_t keylen, char *pkey);
/* Remove the object stored under key and its stored part (a PURGE, an
 * invalidation): CACHE_OK when either was removed, CACHE_MISS when
 * neither was there, else an error. */
int  store_remove(const char *key, size_t keylen);
/* May q take o, a fill's header block and meta (read-while-writer), as a
 * lookup would take it stored: the cookie rule, and fresh enough for q
 * without asking the origin?  1 or 0. */
int  store_joinable(const struct req *q, const struct cache_obj *o);
/* A stored part o: its bytes [*a, *b] of *n and its strong ETag (*etag
 * NULL when none); a whole object (a 200) is [0, len - 1] of len.  0 when
 * o is neither (a 206 without a complete length, an empty 200, ...). */
int  store_part_ident(const struct cache_obj *o, uint64_t *a, uint64_t *b, uint64_t *n,
                      const char **etag, size_t *elen);
/* May the held part (a fresh 206) be completed for rq (a GET without
 * If-Range) with one origin range, the missing tail or head of what rq
 * asks for?  1 with *cp.  Without a strong ETag only a request without
 * Range is (the answer must then be a 200: a 206 never combines). */
int  store_part_plan(const struct req *rq, struct store_cpl *cp);
/* The Range (and If-Range: the part's strong ETag) asking for cp's
 * missing bytes, as request fields into b.  0, or -1 (no room). */
int  store_cpl_put_range(const struct req *rq, const struct store_cpl *cp, struct buf *b);
/* Is resp (a 206) exactly the range cp asked for, of the held part's
 * representation: one Content-Range [qa, qb] of n, that Content-Length,
 * the same strong ETag (RFC 9110 15.3.7.3)? */
int  store_cpl_joins(const struct req *rq, const struct store_cpl *cp,
                     const struct http_req *resp);
/* Resolve rq->rq_pol for the routed request (res: its origin's URL, after
 * remap or, forward proxying, the target's). */
void store_policy(struct req *rq, const struct conf_remap_result *res);
/* Append body bytes; on failure the fill is dropped (*f = NULL) and the
 * cache's code returned. */
int  store_fill_data(struct cache_fill **f, const char *p, size_t n);
/* Commit (complete) or abort *f; returns the cache's code. */
int  store_fill_end(struct cache_fill **f, int complete, int *replaced);

/* push.c: PUSH and PURGE (never forwarded) */
/* Start receiving a PUSH body for key: 0, or -1 with the refusal
 * described in rq->syn. */
int  push_start(struct req *rq, const char *key, size_t keylen, int keep_alive);
/* Feed the request body: HTTP_AGAIN; HTTP_OK, the PUSH over, its answer
 * described in rq->syn (for req_answer_ours; the push is freed at DONE); or a
 * status for a malformed request body. */
int  push_body(struct req *rq);
void push_free(struct req *rq);

/* Release our fill-table claim for up and wake its waiters. */
void proxy_release_claim(struct upstream *up, int64_t pass_ms);
/* Release our claim on key hash h (pass_ms: hit-for-miss for that long)
 * and wake every worker with waiters on it: the one way a claim ends. */
void fill_release(const uint8_t h[16], int64_t pass_ms);
/* The event loop's cached time in milliseconds (the fill table's clock). */
int64_t proxy_now_ms(void);

/* resp.c: our own answers, and the counting of every answer */
/* Count a response to c's client by its status (the access log's and
 * /_stats's), once; a background revalidation's are not counted. */
void resp_count(struct req *rq, int status);
/* An interim (1xx) response went to the client: counted, not logged. */
void resp_count_interim(struct req *rq);
/* The answer last counted never reaches the client: its count goes. */
void resp_uncount(struct req *rq);
/* The Connection line of an answer ("" for HTTP/1.1 keep-alive). */
const char *resp_connection_hdr(int minor, int keep_alive);
/* The current Date header value (29 bytes, RFC 9110 5.6.7), refreshed at
 * most once a second. */
const char *resp_date(void);
/* Count status (the access log's and /_stats's), then append a complete
 * short response to c->cn_out: status line, Date,
 * Server, Content-Type text/plain, Content-Length, `conn_hdr` (a whole
 * "Connection: ...\r\n" line or ""), any `extra` header lines (each ending
 * in CRLF), and body plus CRLF (the body is omitted for HEAD, the length
 * kept).  Returns 0, or -1 when it does not fit. */
int resp_simple(struct req *rq, int status, const char *conn_hdr,
                const char *extra, const char *body, int head_only);

/* The same with a body of our own (may hold any bytes) and its type. */
int resp_body(struct req *rq, int status, const char *conn_hdr,
              const char *ctype, const char *body, size_t blen, int head_only);

/* via.c: the Via and Server fields we add (ATS's keys; see its essay) */
#define VIA_CODES      22     /* ATS's via string */
#define VIA_PART_MAX   256    /* proxy_name and *_via_str are cut here */
#define VIA_MAX        (13 + 2 * VIA_PART_MAX + VIA_CODES + 16)
enum { VIA_C_CLIENT = 1, VIA_C_CACHE = 3, VIA_C_SERVER = 5, VIA_C_FILL = 7,
       VIA_C_PROXY = 9, VIA_C_CACHE_TYPE = 16, VIA_C_LOOKUP = 17,
       VIA_C_CONNECT = 21 };
/* w->server_hdr from the configuration. */
void   via_init(struct worker *w);
/* The codes for request r: blank but for the client's letter. */
void   via_codes_init(char c[VIA_CODES + 1], const struct http_req *r);
/* The cache lookup's letters from a Cache-Status fwd= value. */
void   via_codes_lookup(char c[VIA_CODES + 1], const char *fwd, int reval);
/* The codes of an answer from the cache with Cache-Status cs and this
 * status (after via_codes_init). */
void   via_codes_hit(char c[VIA_CODES + 1], const char *cs, int status);
/* "Via: ...\r\n" for a request to the origin (response 0) or a
 * response to the client (1) at the configured level, into out (at least
 * VIA_MAX bytes); returns its length, 0 at level 0.  tls: that hop is
 * TLS; minor: its HTTP/1.x version; codes may be NULL below level 2. */
size_t via_format(char *out, int response, int tls, int minor, const char *codes);
/* The Forwarded field (RFC 7239) of proxy.config.http.insert_forwarded
 * for request r from peer (tls: over TLS), appended to o; host (hostlen
 * bytes, 0: none) is the authority r was routed by, for host=.  0, or -1
 * when it does not fit. */
int    via_put_forwarded(struct buf *o, const struct http_req *r, const char *host,
                         size_t hostlen, const struct sockaddr *peer, int tls);
/* The length of a stored header block's last lines that are Server
 * fields (store.c keeps the origin's there), else 0. */
size_t via_server_tail(const char *blk, size_t len);

/* alog.c: the access log */
int  alog_format_parse(const char *name);
int  alog_open(void);
void alog_flush(void);
void alog_close(void);
void alog_begin(struct req *rq);
void alog_result(struct req *rq, const char *result, int ostatus);
void alog_bytes(struct req *rq, uint64_t n);
void alog_status(struct req *rq, int status);
void alog_end(struct req *rq);
void alog_refused(struct req *rq, int status, uint64_t bytes);
/* For logging.yaml's fields (each a no-op unless a format needs it):
 * the URL after remap; our response head as sent (psct, prrp, psh,
 * pshl); the origin's response (sshl, shn, shi, pqsi, ssh); the request
 * head sent to it (pqhl), body bytes sent to it (pqcl) and relayed from
 * it (sscl); the client went away before the end (cfsc). */
/* (The checks are inline: with no logging.yaml log they cost a load and
 * a branch each on the hot path, scripts/profile.sh hit.) */
struct conf_remap_result;
extern unsigned alog_need;            /* CONF_LOGN_*, ALOG_NEED_CUSTOM */
#define ALOG_NEED_CUSTOM 0x8000u      /* a logging.yaml log is written */
void alog_mapped_(struct req *rq, const struct conf_remap_result *res);
void alog_head_(struct req *rq, const char *head, size_t len);
void alog_origin_(struct req *rq, const struct upstream *up);
void alog_oreq_(struct req *rq, size_t head, size_t body);
void alog_obody_(struct req *rq, uint64_t n);
void alog_intr(struct req *rq);
static inline void
alog_mapped(struct req *rq, const struct conf_remap_result *res)
{
    if (alog_need & CONF_LOGN_MAPPED)
        alog_mapped_(rq, res);
}
static inline void
alog_head(struct req *rq, const char *head, size_t len)
{
    if (alog_need)
        alog_head_(rq, head, len);
}
static inline void
alog_origin(struct req *rq, const struct upstream *up)
{
    if (alog_need & CONF_LOGN_ORIGIN)
        alog_origin_(rq, up);
}
static inline void
alog_oreq(struct req *rq, size_t head, size_t body)
{
    if (alog_need)
        alog_oreq_(rq, head, body);
}
static inline void
alog_obody(struct req *rq, uint64_t n)
{
    if (alog_need)
        alog_obody_(rq, n);
}

/* metrics.c: the per-request metrics (issue 25) */
void metrics_init(struct worker *w);
/* CLOCK_MONOTONIC in microseconds (vDSO: no system call) */
int64_t metrics_now(void);
void metrics_route(struct req *rq, const struct conf_remap_rule *rule);
void metrics_done(struct req *rq);
/* LOOKUP: rq's cache key (its 16-byte hash) counts one request in the
 * worker's busiest-URL table, labelled from the head (valid now, maybe
 * not at DONE); DONE adds its hit or miss.  Once per request. */
void metrics_url(struct req *rq, const uint8_t hash[16]);
int  metrics_ohost(const char *host, int port);
/* count SHM_OH_REQ or SHM_OH_ERR for up's host */
void metrics_ohost_count(struct upstream *up, int what);
/* up's new connection is up: its connect time */
void metrics_connected(struct upstream *up);

/* ctl.c: answer a `cistern ctl` request LINE on socket fd (closed) */
void worker_ctl(int fd, char *line);

/* admin.c: every series the stats pages and `cistern ctl metric` show */
struct admin_stat {
    char        ats[360];             /* ATS-style flat name (/_stats, ctl) */
    const char *prom;                 /* Prometheus family */
    char        labels[256];          /* "{...}" or "" */
    const char *type;                 /* counter, gauge, histogram, summary */
    const char *help;                 /* the family's HELP (first row) */
    const char *suffix;               /* "", "_bucket", "_sum", "_count" */
    const char *text;                 /* /_stats shows this instead, or NULL */
    uint64_t    v;
    uint32_t    div;                  /* shown as v / div (1: an integer) */
};
struct admin_stats {
    struct admin_stat *st;
    int                n, max;
};
/* Fill as (kept between calls; admin_stats_free frees).  0, or -1. */
int  admin_collect(struct admin_stats *as);
void admin_stats_free(struct admin_stats *as);
int  admin_value(const struct admin_stat *st, char *out, size_t len, int prom);
/* admin.c: /_stats and /_metrics; returns 1 (the answer described in
 * *syn) when the request is for them. */
int admin_handle(struct req *rq, struct req_synth *syn);

/* purge.c: purge by tag, prefix, host, all (POST /_purge, ctl) */
#define PURGE_ARGS_MAX 64
struct purge_ask {
    int          kind;          /* enum shm_purge */
    int          soft;
    int          nargs;
    const char  *arg[PURGE_ARGS_MAX];   /* decoded, NUL ended, in buf */
    size_t       len[PURGE_ARGS_MAX];
    size_t       used;
    char         buf[16384];
};
/* Is r for /_purge (the path, any query)? */
int  purge_is_path(const struct http_req *r);
/* Parse /_purge's query q[0..n) into *pa: NULL, or why not (a 400). */
const char *purge_parse_query(const char *q, size_t n, struct purge_ask *pa);
/* Purge: kind (enum shm_purge) over nargs cache keys (URL: a soft one
 * marks a Vary URL's current variants), tags, or key prefixes (PREFIX,
 * HOST: mapped already); counted.  Returns the objects
 * purged, or a CACHE_* error (< 0). */
int64_t purge_run(int kind, const char *const *arg, const size_t *len, int nargs, int soft);
/* Count one purge of kind that touched n objects. */
void purge_count(int kind, int soft, uint64_t n);
const char *purge_kind_name(int kind);
/* Length of key's "scheme://authority/" part, or 0. */
size_t purge_key_origin(const char *key, size_t keylen);

/* tls.c: TLS on client and origin connections (see its essay).  It arms
 * no event of the client connection and calls nothing in conn.c or
 * proxy.c: it says which way it waits, and the caller waits. */
enum tls_want { TLS_OK = 0, TLS_WANT_READ, TLS_WANT_WRITE, TLS_ERR };
/* Set c up for a server handshake on its socket; 0, or -1 (c untouched). */
int  tls_conn_new(struct conn *c, int protos);
/* Drive the handshake: TLS_OK done, TLS_WANT_READ / TLS_WANT_WRITE
 * waiting for that (the caller arms the event; the read timeout is the
 * head's), TLS_ERR failed (logged, counted). */
enum tls_want tls_conn_handshake(struct conn *c);
/* read(2) for a TLS connection: > 0 bytes, 0 end of stream, -1 with errno
 * (EAGAIN: wait; with cn_tls_rw set it must wait for writability, which
 * the caller arms: cn_tls_rw is only ever set here, so the caller clears
 * it before the call). */
ssize_t tls_conn_read(struct conn *c, char *p, size_t n);
/* Write cn_out then the lent body (rq_body) as full TLS records (the head and the start of
 * the body coalesced in one record); same contract as writev: bytes taken
 * from the front of (head, body), or -1 with errno (EAGAIN: wait, with
 * cn_tls_wr set when it must wait for readability). */
ssize_t tls_conn_write(struct conn *c, const char *head, size_t hlen,
                       const char *body, size_t blen);
/* Application bytes already decrypted and waiting inside OpenSSL: the
 * socket will not signal them, so the caller must not wait for it. */
int  tls_conn_pending(const struct conn *c);
/* Send close_notify (best effort, never blocks). */
void tls_conn_shutdown(struct conn *c);
void tls_conn_free(struct conn *c);
/* Origins: after connect, run the client handshake for up (SNI, verify);
 * calls up->up_ready(up, 0 / 502 / 504) when done. */
void tls_origin_start(struct upstream *up);
ssize_t tls_origin_read(struct upstream *up, char *p, size_t n);
ssize_t tls_origin_write(struct upstream *up, const char *p, size_t n);
int  tls_origin_pending(const struct upstream *up);
void tls_origin_free(struct ssl_st *ssl);


/* worker/rww.c: read-while-writer, the joiner's side */
int  rww_joinable(const struct req *rq);
/* 0 joined; -1 not (wait as before); -2 a published fill rq cannot join
 * (Range, conditions; or it asked the origin before a purge began):
 * fetch for itself */
int  rww_join(struct req *rq, const uint8_t h[16]);
int  rww_more(struct req *rq);
int  rww_waiting(const struct req *rq);
void rww_release(struct req *rq);
void rww_wake_all(struct worker *w);

/* worker/slice.c: ranges over many blocks streamed block by block */
/* Fetch the slice blocks of rq's miss for [a, b] (b UINT64_MAX: open)
 * under the part key's hash h: a closed range of a few blocks whole, else
 * the block holding a.  1: wait on h (a fetch runs); 0: not sliced. */
int  slice_start(struct req *rq, const uint8_t h[16], uint64_t a, uint64_t b);
/* The held part (rq->obj, a fresh 206 under key, hash h) holds a but not
 * the whole of [a, b]: stream it (1, rq->rq_slice set), or 0. */
int  slice_begin(struct req *rq, const char *key, size_t keylen, const uint8_t h[16],
                 uint64_t a, uint64_t b);
/* HIT's answer of a stream (store_send_span); 0, or -1 as store_send. */
int  slice_send(struct req *rq, const struct store_cond *sc, int keep_alive,
                const char *cstatus);
/* The bytes lent are out (req_sent_all): 1 when the stream goes on (its
 * next bytes are lent from this worker's next wake-up, slice_wake_all,
 * once their block is stored), 0 when it is over. */
int  slice_sent(struct req *rq);
/* Has the stream (rq_slice) more to send than it has lent? */
int  slice_waiting(const struct req *rq);
void slice_end(struct req *rq);
void slice_wake_all(struct worker *w);

#endif /* CISTERN_WORKER_H */
