/*
 * worker/pp.h: the PROXY protocol header (HAProxy's spec, versions 1 and
 * 2) that a load balancer sends before anything else on a connection to
 * a `pp` port, carrying the address of the client it accepted.
 *
 * pp_parse() is a pure function over the bytes received so far (no
 * state, no allocation, no I/O): conn.c reads, calls it again with the
 * longer input, and consumes from the socket only what it says belongs to
 * the header, so the bytes behind it (a request, or a TLS ClientHello)
 * stay where they are.
 */
#ifndef CISTERN_PP_H
#define CISTERN_PP_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* v1: the spec's bound for the whole line, CRLF included. */
#define PP_V1_MAX     107
/* v2: the 16-byte fixed part, then at most this much address and TLV
 * data.  The addresses take 36 bytes at most; the rest are TLVs (a cloud
 * balancer's endpoint id, TLS details), which a few hundred bytes hold. */
#define PP_V2_FIXED   16
#define PP_V2_MAX_LEN 2048
/* The longest header pp_parse() accepts. */
#define PP_MAX        (PP_V2_FIXED + PP_V2_MAX_LEN)

enum pp_rc {
    PP_BAD = -1,                      /* not a PROXY header, or malformed */
    PP_AGAIN = 0,                     /* a valid beginning: more bytes needed */
    PP_DONE = 1,                      /* a whole header */
};

union pp_addr {
    struct sockaddr     sa;
    struct sockaddr_in  in;
    struct sockaddr_in6 in6;
};

struct pp_result {
    size_t        len;                /* PP_DONE: the header's bytes */
    int           version;            /* 1 or 2, once known */
    int           local;              /* PP_DONE: no address to take (v1
                                         UNKNOWN, v2 LOCAL, v2 UNSPEC or
                                         UNIX): keep the real peer */
    union pp_addr src;                /* PP_DONE, !local: the client */
    union pp_addr dst;                /* ...and the address it connected to */
    const char   *why;                /* PP_BAD: a short reason, for the log */
};

/* Parse the PROXY header at the start of p[0..n).
 * Returns PP_DONE with res->len (<= n) and the addresses; PP_AGAIN when
 * p is a valid beginning of a header not yet complete, and then every one
 * of the n bytes belongs to the header (the caller may consume them all);
 * PP_BAD with res->why otherwise (also when the header would exceed
 * PP_V1_MAX / PP_MAX bytes).  Accepted: v1 "PROXY TCP4|TCP6 src dst sport
 * dport\r\n" and "PROXY UNKNOWN...\r\n"; v2 with the PROXY command over
 * TCP (IPv4 or IPv6; TLVs skipped), with LOCAL, or with the UNSPEC or
 * UNIX families (taken as LOCAL).  v2 over UDP is refused. */
int pp_parse(const uint8_t *p, size_t n, struct pp_result *res);

#endif /* CISTERN_PP_H */
