/*
 * worker/worker.h: one worker process: a libevent loop serving clients.
 *
 * A worker is forked by the master into a slot of the shared region.  It
 * inherits its listening sockets (one per configured port, for its worker
 * index), builds its own event_base after fork, and runs until told to
 * stop (SIGTERM: now; SIGQUIT or a drain order: finish what is in flight).
 *
 * Connections (conn.c) are one struct each with an explicit state; memory a
 * connection holds while idle is only that struct: its buffers and request
 * context go back to per-worker free lists between requests.
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

#include "conf/conf.h"
#include "shm/shm.h"
#include "worker/http.h"

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
};

/* Run the worker; returns the process exit status. */
int worker_main(const struct worker_args *a);

/* ------------------------------------------------------------------ */
/* internals shared by the files of worker/ */

#define CONN_MAGIC   0x434f4e4eu     /* "CONN" */
#define BUF_SIZE     16384           /* pooled block: fits a typical head
                                        and a 1 KiB response many times */

struct buf {
    char    *data;
    size_t   size;
    size_t   start, end;             /* unread / unsent bytes */
    int      pooled;                 /* returns to the pool when released */
};

enum conn_state {
    CONN_IDLE = 0,                   /* keep-alive: waiting, no buffers */
    CONN_HEAD,                       /* reading a request head */
    CONN_BODY,                       /* reading (discarding) a request body */
    CONN_SEND,                       /* flushing responses, then next */
    CONN_LINGER,                     /* SHUT_WR sent; draining input */
};

struct req_ctx;

struct conn {
    uint32_t         cn_magic;
    int              cn_fd;
    enum conn_state  cn_state;
    uint64_t         cn_id;
    struct event     cn_rev, cn_wev;
    struct buf       cn_in;           /* request bytes */
    struct buf       cn_out;          /* response bytes */
    struct req_ctx  *cn_req;          /* NULL while idle */
    struct timeval   cn_head_start;   /* first byte of the current head */
    unsigned         cn_close:1;      /* close once cn_out is flushed */
    unsigned         cn_in_eof:1;
    unsigned         cn_read_blocked:1;
    struct sockaddr_storage cn_peer;
    struct conn     *cn_next;         /* free list / all-connections list */
    struct conn     *cn_prev;
};

struct req_ctx {
    struct http_req  r;
    struct req_ctx  *next;            /* free list */
};

struct worker {
    struct event_base   *base;
    const struct conf   *conf;
    struct shm          *shm;
    struct shm_slot     *slot;
    struct shm_counters *ctr;
    unsigned             index;
    uint32_t             generation;
    struct event        *listen_ev[CONF_MAX_PORTS];
    int                  listen_fd[CONF_MAX_PORTS];
    int                  nlisten;
    struct event        *sig_term, *sig_quit, *sig_int, *sig_hup, *sig_usr1;
    struct event        *master_ev;
    struct event        *tick;
    int                  draining;
    struct timeval       drain_deadline;
    struct conn         *conns;       /* every open connection */
    unsigned             nconns;
    uint64_t             next_id;
    struct conn         *free_conns;
    struct req_ctx      *free_reqs;
    char               **free_bufs;   /* stack of BUF_SIZE blocks */
    unsigned             nfree_bufs, cap_free_bufs;
    struct http_limits   limits;
};

extern struct worker *wk;            /* this process's worker */

/* conn.c */
void conn_accept(struct worker *w, int fd, const struct sockaddr *sa,
                 socklen_t salen);
void conn_drain_all(struct worker *w);
void conn_close_all(struct worker *w);

/* resp.c */
/* The current Date header value (29 bytes, RFC 9110 5.6.7), refreshed at
 * most once a second. */
const char *resp_date(void);
/* Append a complete short response to c->cn_out: status line, Date,
 * Server, Content-Type text/plain, Content-Length, `conn_hdr` (a whole
 * "Connection: ...\r\n" line or ""), any `extra` header lines (each ending
 * in CRLF), and body plus CRLF (the body is omitted for HEAD, the length
 * kept).  Returns 0, or -1 when it does not fit. */
int resp_simple(struct conn *c, int status, const char *conn_hdr,
                const char *extra, const char *body, int head_only);

/* buffers (worker.c) */
int  buf_alloc(struct buf *b);
void buf_release(struct buf *b);
int  buf_grow(struct buf *b, size_t need);

#endif /* CISTERN_WORKER_H */
