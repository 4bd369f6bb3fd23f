/*
 * worker/h2.h: HTTP/2 to clients, on nghttp2 (issue 24).
 *
 * Two parts:
 *  - h2head.c, pure: an HTTP/2 request's header fields (as nghttp2 hands
 *    them over, already checked against RFC 9113's rules: pseudo-header
 *    order and set, lowercase names, no connection-specific fields) kept
 *    in one buffer, then written out as the HTTP/1.1 head the request
 *    steps parse like any other (http.c: the same limits and checks).
 *    The libFuzzer target t/fuzz/fuzz_h2.c drives it under a real nghttp2
 *    server session.
 *  - h2.c: the connection (an nghttp2 server session on a struct conn
 *    that conn.c hands over after ALPN h2 or an h2c preface) and its
 *    streams, each the owner of one struct req (DESIGN.md, "HTTP/2").
 */
#ifndef CISTERN_H2_H
#define CISTERN_H2_H

#include <stddef.h>
#include <stdint.h>

#include "worker/buf.h"

/* The client connection preface (RFC 9113 3.4). */
#define H2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24

/* ------------------------------------------------------------------ */
/* h2head.c: the request head */

/* What one stream's HEADERS said, kept as records in b (the stream's
 * head buffer): each field is [u32 name length][u32 value length][name]
 * [value].  The pseudo-header fields are remembered by offset. */
struct h2_head {
    struct buf  b;
    uint64_t    size;                 /* RFC 9113 6.5.2's size: name +
                                         value + 32 per field */
    unsigned    nfields;
    unsigned    has_cl:1;             /* content-length was given */
    unsigned    over:1;               /* past the list limit: 431 */
};

/* Start empty (no memory taken until the first field). */
void h2_head_init(struct h2_head *h);
void h2_head_release(struct h2_head *h);
/* One field.  Past limit bytes (the header list size) nothing more is
 * kept and over is set: the request gets a 431.  0, or -1: out of memory. */
int  h2_head_add(struct h2_head *h, const uint8_t *name, size_t nlen,
                 const uint8_t *value, size_t vlen, uint64_t limit);
/* The HTTP/1.1 request head for it into out (appended): the request line
 * from :method and :path, Host from :authority (or host), the fields in
 * order (te dropped: hop-by-hop; cookie crumbs joined with "; " as RFC
 * 9113 8.2.3 asks; expect dropped: the stream has no interim answer),
 * and, when a body follows (body) without content-length,
 * "Transfer-Encoding: chunked" (h2.c frames the DATA so).  Returns 0; -1
 * when out cannot grow; or a status (400: no :path or no authority, 501:
 * CONNECT, which has no tunnel over HTTP/2 here) with *why. */
int  h2_head_build(const struct h2_head *h, int body, struct buf *out,
                   const char **why);

/* ------------------------------------------------------------------ */
/* h2.c: the connection */

struct conn;
struct req;
/* What conn.c lends the HTTP/2 side: the calls back into it (function
 * pointers: conn.c calls h2.c, never the other way by name). */
struct h2_conn_ops {
    /* end the connection (conn_close: frees c, and the h2 state with it) */
    void (*close)(struct conn *c);
    /* stale-while-revalidate's background fetch of a stream's request */
    void (*revalidate)(struct req *rq, const char *key, size_t keylen);
};
/* Speak HTTP/2 on c from now on (ALPN chose h2, or the h2c preface came):
 * its events are taken over, the bytes read so far (cn_in) are the first
 * input.  0, or -1 (out of memory: the caller closes c). */
int  h2_attach(struct conn *c, const struct h2_conn_ops *ops);
/* conn_close's: every stream aborted (logged), the session freed. */
void h2_free(struct conn *c);
/* The worker drains: GOAWAY, the open streams finish, then close. */
void h2_drain(struct conn *c);

#endif /* CISTERN_H2_H */
