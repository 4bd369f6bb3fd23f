/*
 * worker/req.h: one request, apart from the connection that carries it.
 *
 * A request runs through steps (req.c), each a function that returns the
 * next: RECV, ROUTE, LOOKUP, WAIT, HIT, FETCH, PUSH, PURGE, SYNTH, DONE.
 * Its owner (today an HTTP/1 connection, conn.c) gives it a parsed head,
 * an output buffer and two callbacks, runs it with req_run(), and takes
 * the answer back from that buffer.  See DESIGN.md, "A request".
 */
#ifndef CISTERN_REQ_H
#define CISTERN_REQ_H

#include <stdint.h>
#include <sys/time.h>

#include "cache/cache.h"
#include "worker/http.h"
#include "worker/plugin.h"

#define REQ_MAGIC 0x52455155u           /* "REQU" */
#define STORE_KEY_MAX 4096
/* A request body we do not need is read and dropped up to this size;
 * beyond it we answer and close rather than swallow an upload. */
#define REQ_DISCARD_MAX (1024 * 1024)

/* The steps.  REQ_PARK is not a step: the loop stops, and the request
 * goes on when its owner or an event resumes it. */
enum req_step {
    REQ_RECV = 0,       /* count, log, ip_allow, the admin pages */
    REQ_ROUTE,          /* remap: a redirect, a 404, or where to fetch */
    REQ_LOOKUP,         /* the cache: a hit, a stale copy, a miss */
    REQ_WAIT,           /* another worker is fetching it: wait for that */
    REQ_HIT,            /* answer from the cache (body lent from the map) */
    REQ_FETCH,          /* the origin transaction (proxy.c) */
    REQ_PUSH,           /* receive a PUSH body into the cache (push.c) */
    REQ_PURGE,          /* remove an object */
    REQ_TUNNEL,         /* CONNECT: connect, then a tunnel (tunnel.c) */
    REQ_SYNTH,          /* every answer of our own: made and counted here */
    REQ_DONE,           /* logged, held object and claims released */
    REQ_PARK,
};

/* One access-log record (alog.c), kept with its request.  The target,
 * referer and user agent are kept raw, escaped when the line is written.
 * A field's next byte goes into the line only while fewer than these many
 * characters of the field are there, so no more raw bytes are kept.  (The
 * 1 KiB and 256-byte buffers of the first format less room for a \xHH and
 * a NUL: overlong fields are cut where they always were.) */
#define ALOG_TARGET_MAX 1019
#define ALOG_FIELD_MAX  251
#define ALOG_CTYPE_MAX  96
#define ALOG_HDRS       16              /* = CONF_LOG_HDRS */
#define ALOG_HDR_AREA   2048
#define ALOG_HDR_NONE   0xffff
struct alog_txn {
    int              active;
    struct timeval   start;
    const char      *method;
    const char      *result;          /* TCP_HIT, TCP_MISS, ... */
    int              minor;
    int              status, ostatus;
    uint64_t         bytes;
    const char      *parent;          /* the parent that answered (its
                                         "host:port", the config's), or NULL */
    uint16_t         target_len, referer_len, ua_len;
    char             target[ALOG_TARGET_MAX];
    char             referer[ALOG_FIELD_MAX];
    char             ua[ALOG_FIELD_MAX];
    /* logging.yaml's fields (alog.c): filled only while a logging.yaml
     * log is written, the costly ones only when a format names them
     * (struct conf_logging's need bits) */
    uint32_t         head_len;        /* cqhl */
    uint32_t         rhead_len;       /* pshl: our response head */
    uint32_t         ohead_len;       /* sshl: the origin's (0: none) */
    uint32_t         oreq_len;        /* pqhl: our request head to it */
    uint64_t         oreq_body;       /* pqcl */
    uint64_t         obody;           /* sscl: origin body bytes relayed */
    int64_t          req_cl;          /* the request's Content-Length, -1 */
    unsigned         intr:1;          /* cfsc: the client went away */
    unsigned         tls:1;
    unsigned         h2:1;            /* HTTP/2: the version is "2" */
    uint8_t          oaddr[17];       /* shi: family (4, 6; 0 none), address */
    uint8_t          laddr[17];       /* pqsi */
    uint16_t         murl_len, uhost_len, ohost_len, ctype_len, phrase_len;
    char             murl[ALOG_TARGET_MAX];   /* the URL after remap */
    char             uhost[ALOG_FIELD_MAX];   /* the host before it */
    char             ohost[ALOG_FIELD_MAX];   /* shn */
    char             ctype[ALOG_CTYPE_MAX];   /* psct */
    char             phrase[32];              /* prrp */
    /* named headers ({Name}cqh, psh, ssh): [hoff, hoff + hlen) of harea;
     * hlen ALOG_HDR_NONE when absent */
    uint16_t         hoff[ALOG_HDRS], hlen[ALOG_HDRS];
    uint16_t         hused;
    char             harea[ALOG_HDR_AREA];
};

/* An answer of our own, described by the step that decides it and made
 * by SYNTH. */
struct req_synth {
    int              status;
    const char      *extra;           /* header lines, each with CRLF, or NULL */
    const char      *body;            /* text (NUL ended), or bytes with ctype */
    size_t           blen;
    const char      *ctype;           /* NULL: body is text/plain */
    const char      *result;          /* access log result, or NULL */
    unsigned         close:1;         /* the connection closes after it */
    unsigned         refuse:1;        /* a request we do not take (logged) */
    unsigned         free_body:1;     /* body is malloc'd: SYNTH frees it */
};

/* The cache policy of one request: records.config's values, overridden
 * by the cache.config lines that match it, resolved once in LOOKUP
 * (store.c's store_policy) so the rest reads bits. */
struct req_policy {
    unsigned         cache:1;         /* look up and store (cache.http,
                                         never-cache) */
    unsigned         ign_client_nc:1; /* a client's no-cache / no-store */
    unsigned         ign_server_nc:1; /* an origin's no-cache / no-store */
    unsigned         ign_client_max_age:1;
    unsigned         req_cookie:1;    /* the request has Cookie (read only
                                         when cookies != 1) */
    unsigned         cookies:3;       /* cache_responses_to_cookies, 0-4 */
    int32_t          ttl_in_cache;    /* > 0: cache.config ttl-in-cache */
    int32_t          revalidate;      /* >= 0: cache.config revalidate */
};

struct req;
struct upstream;
struct push;
struct tunnel;
struct buf;
struct sockaddr;

/* What an owner gives its requests: the calls up from a request to the
 * layer that owns it, as function pointers (the one documented upcall). */
struct req_owner_ops {
    /* The request moved by itself (a WAIT ended and the steps ran on):
     * look at rq_step as after req_run(). */
    void (*moved)(struct req *rq);
    /* The transaction queued output, or ended: write what is queued and
     * pump it.  Returns 0, or -1 when the owner closed (rq is gone). */
    int (*flush)(struct req *rq);
    /* The transaction took the request body it was given: read more. */
    void (*body_resume)(struct req *rq);
    /* Start a background revalidation of key, replaying rq's head, on an
     * owner of its own whose answer goes nowhere. */
    void (*revalidate)(struct req *rq, const char *key, size_t keylen);
    /* Start a fetch replaying head (rq's, without its Range line and its
     * ending empty line: headlen bytes) with range (a slice-aligned one),
     * on an owner of its own, carrying the fill claim on hash.  Returns 0
     * when started (the claim is its), -1 (the claim is ours).  NULL: the
     * owner cannot (then no slicing). */
    int (*slice)(struct req *rq, const char *head, size_t headlen, const uint8_t hash[16],
                 const char *range);
    /* The local address the request arrived on (remap's @in_ip= and
     * map_with_recv_port), or NULL when unknown.  Asked only when a rule
     * needs it: the owner may look it up then (one getsockname per
     * connection). */
    const struct sockaddr *(*local)(struct req *rq);
};

struct req {
    uint32_t         rq_magic;
    enum req_step    rq_step;         /* written only by req_run() */
    struct http_req  r;
    struct alog_txn  log;
    struct cache_obj obj;             /* a hit being sent (pinned) */
    int              obj_held;
    int              counted;         /* the status last counted (a held
                                         answer voided takes it back) */
    unsigned         rq_close:1;      /* the answer ends the connection */
    unsigned         rq_nowait:1;     /* waited already: fetch uncollapsed */
    unsigned         rq_collapsed:1;  /* answered by another's fill */
    unsigned         rq_bg:1;         /* a background revalidation */
    unsigned         rq_sliced:1;     /* started its slice fetch already */
    unsigned         rq_slicer:1;     /* a slice's fetch: only a 206 will do */
    unsigned         rq_claim:1;      /* holds the fill claim whash (a
                                         background revalidation's, until
                                         its fetch takes it over) */
    struct req_synth syn;             /* SYNTH's answer */
    struct req_policy rq_pol;         /* LOOKUP's: what may be cached, how */
    size_t           obj_keylen;      /* its key (a variant's, with Vary) */
    char             obj_key[STORE_KEY_MAX];
    /* WAIT (and a background revalidation's claim) */
    uint8_t          whash[16];       /* the key waited for (or claimed) */
    struct timeval   wdeadline;
    struct req      *wnext;           /* the worker's wait list */
    /* The owner's side, set by the owner */
    void            *rq_owner;        /* (conn.c: its struct conn) */
    const struct req_owner_ops *rq_ops;
    struct buf      *rq_in;           /* request bytes: the body is read here */
    struct buf      *rq_out;          /* the answer is appended here */
    uint64_t         rq_id;           /* the owner's id, for log lines */
    const struct sockaddr *rq_peer;   /* the client */
    struct timeval   rq_start;        /* the first byte of the head */
    unsigned         rq_tls:1;        /* it came over TLS */
    unsigned         rq_h2:1;         /* an HTTP/2 stream (h2.c): the
                                         answer is de-chunked, the log
                                         says HTTP/2 */
    /* The answer and the transaction, which write only these: the owner
     * reads them (conn_sync) and acts */
    const char      *rq_body;         /* body bytes lent, to send after
                                         rq_out (a hit's mapping, or the
                                         origin's input buffer) */
    size_t           rq_body_len;
    uint64_t         rq_hit_pos;      /* a hit's body: next byte to lend */
    uint64_t         rq_hit_end;      /* and the end of what is sent */
    void            *rq_rww;          /* read-while-writer: the fill joined
                                         (worker/rww.c), or NULL */
    void            *rq_slice;        /* a range streamed block by block
                                         (worker/slice.c), or NULL */
    struct upstream *rq_up;           /* FETCH's origin transaction */
    struct push     *rq_push;         /* PUSH's body being stored */
    struct tunnel   *rq_tunnel;       /* a tunnel connecting, or waiting
                                         for the owner to hand over */
    unsigned         rq_body_owned:1; /* the transaction reads the request
                                         body (the owner feeds it) */
    unsigned         rq_abort:1;      /* the answer is cut short: reset */
    /* Plugins (worker/plugin.c): set when any runs on this request */
    unsigned         rq_plugged:1;
    const struct conf_remap_rule *rq_prule; /* the rule whose plugins run */
    struct cst_txn   rq_plug;         /* their state: slots, field edits */
    /* issue 25: what worker/metrics.c counts at DONE */
    int64_t          rq_t0;           /* metrics_now(): the steps began */
    int64_t          rq_ttfb;         /* the answer's head was made (0: not) */
    int64_t          rq_ostart;       /* the origin transaction began (0: none) */
    const char      *rq_result;       /* TCP_HIT, ... as the access log's */
    uint64_t         rq_sent;         /* answer bytes, as the access log's */
    int              rq_rule;         /* label index of the rule, -1: none */
    uint64_t         rq_topkey;       /* its key in the URL table
                                         (shm/urltop.h), 0: not counted */
    struct urltop_ent *rq_topent;     /* its entry there (unless retaken) */
};

/* From the worker's pool (NULL: out of memory), and back. */
struct req *req_new(void *owner, const struct req_owner_ops *ops);
void req_free(struct req *rq);
/* Reset for the next request on the same owner. */
void req_reset(struct req *rq);

/* A complete, checked head: run the steps from RECV until one parks or
 * DONE.  The owner then reads rq_step: DONE (answered: rq_close says
 * whether the connection goes), HIT (a body is lent: call req_sent_all
 * once it is out), FETCH or PUSH (the transaction owns the request body,
 * and calls req_finish when over), WAIT (parked; the owner's `woken`
 * callback runs when it resumes). */
void req_run(struct req *rq);
/* A refusal of a head that did not parse, or a request that went wrong
 * (the status, why): SYNTH, then DONE. */
void req_refuse(struct req *rq, int status, const char *why);
/* A transaction ended in an answer of ours (a PUSH stored or refused,
 * an origin that failed before answering), described in rq->syn: make
 * it (SYNTH), then DONE. */
void req_answer_ours(struct req *rq);
/* The answer went out, and a body lent with it (a HIT's, or a FETCH's
 * whose transaction has ended): DONE. */
void req_sent_all(struct req *rq);
/* The transaction (FETCH, PUSH) is over: DONE. */
void req_finish(struct req *rq);
/* The owner is going away: stop whatever runs, then DONE. */
void req_abort(struct req *rq);

/* May a body we answer without be read and dropped (small, no
 * 100-continue), rather than closing the connection? */
int  req_body_discardable(const struct http_req *r);

/* Resume waiters whose fill ended (or, with deadlines_only, whose wait
 * timed out). */
struct worker;
void req_wait_check(struct worker *w, int deadlines_only);

#endif /* CISTERN_REQ_H */
