/*
 * worker/buf.h: buffers, the one typed free-list pool, and the formatting
 * helpers every file of worker/ writes with.
 *
 * A leaf: buf.c calls nothing in worker/ (only libc), so any other file
 * may use it.  Three parts:
 *
 *  - struct pool: a free list of objects of one size.  pool_get() takes
 *    the last one put back (still warm in the cache) or mallocs when the
 *    list is empty; pool_put() keeps at most max_idle, frees the rest.
 *    The link lives in the first word of a free object, so a stale
 *    pointer to one reads a garbage magic there, which magic_check()
 *    catches.  The ASan build (CST_ASAN) never recycles: every get is a
 *    malloc, every put a free, so the sanitizer sees each use after put.
 *  - struct buf: a byte buffer, normally one pooled BUF_SIZE block; grown
 *    (and then no longer pooled) only for the rare oversized head.
 *  - appenders (buf_append, buf_lit, buf_puts, buf_putu, buf_printf) that
 *    return 0, or -1 when the buffer could not grow: callers OR the
 *    results and refuse a head with any failure, so a head is never sent
 *    with a line missing; and writers into memory the caller has made
 *    room in (fmt_mem, fmt_lit, fmt_str, fmt_u64, fmt_i64, fmt_pad,
 *    fmt_http_date, fmt_peer).  The hot paths format without
 *    printf (a profile showed snprintf at a fifth of a cache hit).
 */
#ifndef CISTERN_BUF_H
#define CISTERN_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include "shm/panic.h"

/* ------------------------------------------------------------------ */
/* The worker's one vocabulary for work driven by events (the origin
 * transaction's pump; a request's steps say REQ_PARK, the parsers
 * HTTP_OK / HTTP_AGAIN / a status, TLS which way it waits):
 *   WK_MORE   progress made: call again
 *   WK_WAIT   nothing more until an event
 *   WK_DONE   finished
 *   WK_ABORT  failed after output began: the caller cuts the connection */
enum wk_rc { WK_MORE, WK_WAIT, WK_DONE, WK_ABORT };

/* ------------------------------------------------------------------ */
/* Magics */

/* A callback's argument must carry its struct's magic: a mismatch is a
 * use after free (or a wrong argument), and the process stops at once
 * rather than corrupt what another connection owns: cst_panic leaves
 * the reason in our shm slot, and the master logs it (shm/panic.h). */
#define magic_check(have, want)                                               \
    do {                                                                      \
        if (__builtin_expect((have) != (want), 0))                            \
            cst_panic("bad magic %08x, want %08x", (unsigned)(have),          \
                      (unsigned)(want));                                      \
    } while (0)

/* ------------------------------------------------------------------ */
/* The pool */

struct pool {
    size_t    size;                  /* bytes per object (>= a pointer) */
    unsigned  max_idle;              /* free objects kept at most */
    unsigned  nidle;                 /* on the free list now */
    void     *free;                  /* the free list */
};

/* An empty pool of size-byte objects that keeps any number free; set
 * max_idle after it to bound what a burst leaves behind. */
void pool_init(struct pool *p, size_t size);
/* Free every idle object (objects still out are the caller's). */
void pool_drain(struct pool *p);

/* An object (uninitialised memory), or NULL when malloc fails. */
static inline void *
pool_get(struct pool *p)
{
#ifndef CST_ASAN
    void *o = p->free;

    if (o != NULL) {
        p->free = *(void **)o;
        p->nidle--;
        return o;
    }
#endif
    return malloc(p->size);
}

/* Give o (from pool_get on p; NULL is ignored) back. */
static inline void
pool_put(struct pool *p, void *o)
{
    if (o == NULL)
        return;
#ifndef CST_ASAN
    if (p->nidle < p->max_idle) {
        *(void **)o = p->free;
        p->free = o;
        p->nidle++;
        return;
    }
#endif
    free(o);
}

/* ------------------------------------------------------------------ */
/* Formatting into caller memory */

/* These write at p and return the end; they never check for room (the
 * caller has reserved it: a log line, a fixed field).  Appending to a
 * struct buf that grows is buf_append and friends, below. */

/* n bytes. */
static inline char *
fmt_mem(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

/* A string literal, its length known when compiling. */
#define fmt_lit(p, lit) fmt_mem((p), "" lit, sizeof(lit) - 1)

/* A short string of ours (a method, a result): a loop beats strlen and
 * memcpy. */
static inline char *
fmt_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

/* v in decimal (as printf's %llu / %lld) at p, which has room for 20
 * digits and a sign. */
char *fmt_u64(char *p, uint64_t v);
char *fmt_i64(char *p, int64_t v);
/* v in decimal, padded on the left to width characters with pad ('0' or
 * ' '), as printf's %03d or %6lld (with '0', the sign comes first). */
char *fmt_pad(char *p, int64_t v, int width, char pad);
/* t as an IMF-fixdate (RFC 9110 5.6.7; 29 characters and a NUL). */
void  fmt_http_date(time_t t, char out[32]);
/* An address as text, NUL ended: IPv4 dotted (by hand: glibc's inet_ntop
 * formats through sprintf), IPv6 as inet_ntop writes it, "?" for anything
 * else or when out is too small.  The port is not included. */
void  fmt_peer(const struct sockaddr *sa, char *out, size_t len);
/* fmt_peer's text of sa (NUL ended, its length in *len), in memory of
 * ours that stays valid until the next call.  The text of the last IPv4
 * or IPv6 address is kept: the requests of a keep-alive client (or of
 * many connections from one address) cost a compare, not a formatting
 * (X-Forwarded-For and the access log both ask, per request). */
const char *fmt_peer_text(const struct sockaddr *sa, size_t *len);

/* ------------------------------------------------------------------ */
/* Buffers */

#define BUF_SIZE     16384           /* pooled block: fits a typical head
                                        and a 1 KiB response many times */
#define BUF_IDLE_MAX 256             /* idle blocks kept: a burst must not
                                        pin its peak memory forever */

struct buf {
    char    *data;
    size_t   size;
    size_t   start, end;             /* unread / unsent bytes */
    int      pooled;                 /* returns to the pool when released */
};

/* Give b a pooled block (no-op when it has one); 0 or -1. */
int  buf_alloc(struct buf *b);
/* Give b's memory back (to the pool when pooled); b becomes empty. */
void buf_release(struct buf *b);
/* Make room for `need` more bytes after b->end: compact first, and grow
 * (leaving the pool) only when that is not enough.  0 or -1. */
int  buf_grow(struct buf *b, size_t need);
/* Free the idle blocks (the worker's exit). */
void buf_pool_drain(void);

/* Append n bytes.  (Inline: the forwarded head is built from dozens of
 * these, and a call each was measurable.) */
static inline int
buf_append(struct buf *b, const char *p, size_t n)
{
    if (b->size - b->end < n && buf_grow(b, n) < 0)
        return -1;
    memcpy(b->data + b->end, p, n);
    b->end += n;
    return 0;
}

/* A string literal, its length known when compiling. */
#define buf_lit(b, s) buf_append((b), "" s "", sizeof(s) - 1)

static inline int
buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

/* Decimal, for ports and statuses. */
static inline int
buf_putu(struct buf *b, unsigned v)
{
    char d[20];

    return buf_append(b, d, (size_t)(fmt_u64(d, v) - d));
}

/* printf into b, growing it as needed; 0 or -1. */
int  buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Bytes written to socket fd that its peer has not acknowledged yet
 * (SIOCOUTQ), or -1.  A write timer that fires while this shrinks is not
 * a silent peer: it reads, and the kernel's buffer hid it from us (with
 * megabytes queued, writability can take longer to come back than a
 * timeout, at 1 MiB/s). */
int  sock_unsent(int fd);

#endif /* CISTERN_BUF_H */
