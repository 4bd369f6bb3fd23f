/*
 * worker/tls.c: TLS on client connections (PORT:ssl listeners) and on
 * connections to https origins.
 *
 * Where things live.  Certificates, keys and every SSL_CTX belong to the
 * configuration (conf/ssl_multicert.c): the master builds them with the
 * rest of struct conf, as root, before it forks a generation of workers,
 * and a reload builds new ones beside the old.  A worker never reads a
 * key file; it inherits the contexts and only makes SSL objects from them.
 * Session tickets are sealed with keys from the same place, identical in
 * every worker, so a ticket from worker A resumes on worker B; the
 * server-side session cache is off (it would be per process).
 *
 * The connection stays what it was: the same struct conn, the same state
 * machine and the same libevent events on the socket; OpenSSL only
 * replaces read() and writev() (the socket BIO does the system calls).
 * conn.c branches on c->cn_tls != NULL and nowhere else, so the plain
 * path costs one predictable test.  What TLS adds to the state machine:
 *
 *  - The handshake runs first, in state CONN_HEAD with an empty input
 *    buffer, so its deadline is the request head's: request_header_timeout
 *    from accept (a client that stalls the handshake is a slowloris like
 *    any other).  tls_conn_handshake() says which way it waits (enum
 *    tls_want); conn.c arms the read event with the head deadline, or the
 *    write event.  This file arms no event of a client connection and
 *    calls nothing in conn.c or proxy.c.
 *  - Either direction may need the other: SSL_read can need to write
 *    (cn_tls_rw, set here: conn.c arms the write event, which retries
 *    the read) and SSL_write can need
 *    to read (cn_tls_wr: the read event retries the flush).  Renegotiation
 *    is refused, so in practice this is TLS 1.3 key updates only, but the
 *    flags make a stall impossible rather than unlikely.
 *  - OpenSSL may hold decrypted bytes the socket will never signal again
 *    (a record larger than the room we offered).  After every read, and
 *    whenever reading resumes, tls_conn_pending() > 0 makes the read event
 *    active by hand.
 *  - Closing: SSL_shutdown (one close_notify, never waiting for the
 *    peer's), then the usual shutdown(SHUT_WR) and lingering read.
 *
 * Writes, the part that decides throughput.  A TLS record carries up to
 * 16 KiB; every SSL_write call with partial writes enabled produces at
 * most one record and one send().  Writing the response head and its body
 * separately would cost two records, two MACs and two system calls for a
 * 1 KiB hit, and a small record for every head.  So tls_conn_write() takes
 * the (head, body) pair conn_flush() would have given writev(): when both
 * are present it copies the head and the first 16 KiB - head bytes of the
 * body into one per-worker staging buffer (TLS_RECORD bytes, static: no
 * allocation on the hit path) and writes that as one full record; after
 * that the body goes out from where it lies (the pinned cache mapping or
 * the origin buffer), a full record per call.  A write that returns
 * WANT_WRITE has its record already encrypted inside OpenSSL; the retry
 * re-stages the same bytes (nothing was consumed) at the same or greater
 * length, which SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER allows, so the staging
 * buffer may be reused by other connections in between.
 *
 * Origins.  After the TCP connect, tls_origin_start() runs the client
 * handshake with SNI set to the origin host and, unless the policy is
 * DISABLED, the host name checked against the certificate (SSL_set1_host;
 * an IP literal is checked as an IP).  ENFORCED (the default) fails the
 * handshake on any verification error: the client gets a 502 and the log
 * says why (the X509 verify error).  PERMISSIVE logs the same and goes on.
 * The CA store is the system's (SSL_CTX_set_default_verify_paths) unless
 * proxy.config.ssl.client.CA.cert.filename / .path name others.  A TLS
 * origin connection returns to the idle pool with its SSL object, and the
 * pool never hands an https connection to an http request or back.
 * The handshake's outcome goes to up->up_ready (origin_get's callback).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "shm/log.h"
#include "worker/worker.h"

#define TLS_RECORD 16384             /* SSL3_RT_MAX_PLAIN_LENGTH */

/* One per worker process; see the essay. */
static char tls_stage[TLS_RECORD];

/* The reason of the last OpenSSL error, for one log line; clears the queue. */
static const char *
tls_reason(void)
{
    static char buf[256];
    unsigned long e, last = 0;

    while ((e = ERR_get_error()) != 0)
        last = e;
    if (last == 0)
        return errno ? strerror(errno) : "connection closed";
    ERR_error_string_n(last, buf, sizeof(buf));
    const char *p = strrchr(buf, ':');
    return p && p[1] ? p + 1 : buf;
}

/* ------------------------------------------------------------------ */
/* Client connections */

int
tls_conn_new(struct conn *c, int protos)
{
    SSL_CTX *ctx = conf_tls_server_ctx(wk->conf->tls);
    SSL *s;

    if (ctx == NULL)
        return -1;
    if ((s = SSL_new(ctx)) == NULL || !SSL_set_fd(s, c->cn_fd)) {
        SSL_free(s);
        ERR_clear_error();
        return -1;
    }
    SSL_set_accept_state(s);
    conf_tls_set_protos(s, protos);     /* what ALPN offers */
    c->cn_tls = s;
    return 0;
}

enum tls_want
tls_conn_handshake(struct conn *c)
{
    SSL *s = c->cn_tls;
    int rc, err;

    ERR_clear_error();
    errno = 0;
    rc = SSL_do_handshake(s);
    if (rc == 1) {
        c->cn_tls_up = 1;
        wk->ctr->tls_handshakes++;
        if (SSL_session_reused(s))
            wk->ctr->tls_resumed++;
        return TLS_OK;
    }
    err = SSL_get_error(s, rc);
    if (err == SSL_ERROR_WANT_READ)
        return TLS_WANT_READ;
    if (err == SSL_ERROR_WANT_WRITE)
        return TLS_WANT_WRITE;
    wk->ctr->tls_handshake_errors++;
    if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0) {
        /* the client just went away: not worth a line */
    } else {
        char peer[64];
        fmt_peer(&c->cn_peer.sa, peer, sizeof(peer));
        log_info("conn %llu from %s: TLS handshake failed: %s",
                 (unsigned long long)c->cn_id, peer, tls_reason());
    }
    ERR_clear_error();
    return TLS_ERR;
}

/* SSL_read for either side: n bytes into p, or -1 with errno (EAGAIN,
 * ECONNRESET, EIO); 0 at the peer's close_notify.  Bytes OpenSSL has
 * decrypted but we had no room for do not wake the socket, so rev is made
 * active again; *want_write is set when the read needs a write first. */
static ssize_t
tls_read(SSL *s, struct event *rev, char *p, size_t n, int *want_write)
{
    int rc;

    *want_write = 0;
    ERR_clear_error();
    rc = SSL_read(s, p, n > INT_MAX ? INT_MAX : (int)n);
    if (rc > 0) {
        if (SSL_pending(s) > 0)
            event_active(rev, EV_READ, 1);
        return rc;
    }
    switch (SSL_get_error(s, rc)) {
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_WANT_READ:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        *want_write = 1;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_SYSCALL:
        if (errno == 0 || errno == EAGAIN)
            errno = ECONNRESET;
        ERR_clear_error();
        return -1;
    default:
        errno = EIO;
        return -1;
    }
}

ssize_t
tls_conn_read(struct conn *c, char *p, size_t n)
{
    int want_write;
    ssize_t rc = tls_read(c->cn_tls, &c->cn_rev, p, n, &want_write);

    if (want_write) {
        c->cn_tls_rw = 1;       /* errno EAGAIN: the caller waits to write */
        return -1;
    } else if (rc < 0 && errno == EIO) {
        log_debug("conn %llu: TLS read: %s", (unsigned long long)c->cn_id, tls_reason());
    }
    return rc;
}

ssize_t
tls_conn_write(struct conn *c, const char *head, size_t hlen,
               const char *body, size_t blen)
{
    SSL *s = c->cn_tls;
    const char *p;
    size_t n;
    int rc, err;

    if (hlen && blen && hlen < TLS_RECORD) {
        size_t take = blen < TLS_RECORD - hlen ? blen : TLS_RECORD - hlen;
        memcpy(tls_stage, head, hlen);
        memcpy(tls_stage + hlen, body, take);
        p = tls_stage;
        n = hlen + take;
    } else if (hlen) {
        p = head;
        n = hlen;
    } else {
        p = body;
        n = blen;
    }
    ERR_clear_error();
    rc = SSL_write(s, p, n > INT_MAX ? INT_MAX : (int)n);
    if (rc > 0)
        return rc;
    err = SSL_get_error(s, rc);
    switch (err) {
    case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_READ:
        c->cn_tls_wr = 1;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_SYSCALL:
        if (errno == 0 || errno == EAGAIN)
            errno = EPIPE;
        ERR_clear_error();
        return -1;
    default:
        log_debug("conn %llu: TLS write: %s", (unsigned long long)c->cn_id, tls_reason());
        errno = EIO;
        return -1;
    }
}

int
tls_conn_pending(const struct conn *c)
{
    return c->cn_tls_up && SSL_pending(c->cn_tls) > 0;
}

void
tls_conn_shutdown(struct conn *c)
{
    if (c->cn_tls_up && !(SSL_get_shutdown(c->cn_tls) & SSL_SENT_SHUTDOWN))
        SSL_shutdown(c->cn_tls);    /* one close_notify; not waiting for theirs */
    ERR_clear_error();
}

void
tls_conn_free(struct conn *c)
{
    SSL_free(c->cn_tls);
    c->cn_tls = NULL;
    c->cn_tls_up = c->cn_tls_rw = c->cn_tls_wr = 0;
}

/* ------------------------------------------------------------------ */
/* Origins */

static void tls_origin_step(struct upstream *up);

static void
tls_origin_on_io(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *up = arg;

    (void)fd;
    magic_check(up->up_magic, UP_MAGIC);
    if (what & EV_TIMEOUT) {
        event_del(&up->up_rev);
        event_del(&up->up_wev);
        log_warn("conn %llu: TLS handshake with origin %s:%d timed out",
                 (unsigned long long)up->up_req->rq_id, up->up_host, up->up_port);
        wk->ctr->origin_tls_errors++;
        up->up_ready(up, 504);
        return;
    }
    tls_origin_step(up);
}

static void
tls_origin_step(struct upstream *up)
{
    struct timeval tv = { wk->conf->rec.connect_timeout, 0 };
    enum conf_verify pol = conf_tls_verify_policy(wk->conf->tls);
    SSL *s = up->up_tls;
    int rc, err;
    long vr;

    ERR_clear_error();
    errno = 0;
    rc = SSL_do_handshake(s);
    if (rc == 1) {
        event_del(&up->up_rev);
        event_del(&up->up_wev);
        vr = SSL_get_verify_result(s);
        if (vr != X509_V_OK && pol == CONF_VERIFY_PERMISSIVE)
            log_warn("conn %llu: origin %s:%d: certificate not verified (%s); "
                     "continuing (verify.server.policy PERMISSIVE)",
                     (unsigned long long)up->up_req->rq_id, up->up_host,
                     up->up_port, X509_verify_cert_error_string(vr));
        wk->ctr->origin_tls_handshakes++;
        up->up_ready(up, 0);
        return;
    }
    err = SSL_get_error(s, rc);
    if (err == SSL_ERROR_WANT_READ) {
        event_del(&up->up_wev);
        event_add(&up->up_rev, &tv);
        return;
    }
    if (err == SSL_ERROR_WANT_WRITE) {
        event_del(&up->up_rev);
        event_add(&up->up_wev, &tv);
        return;
    }
    event_del(&up->up_rev);
    event_del(&up->up_wev);
    vr = SSL_get_verify_result(s);
    log_warn("conn %llu: TLS handshake with origin %s:%d failed: %s",
             (unsigned long long)up->up_req->rq_id, up->up_host, up->up_port,
             vr != X509_V_OK ? X509_verify_cert_error_string(vr) : tls_reason());
    ERR_clear_error();
    wk->ctr->origin_tls_errors++;
    up->up_ready(up, 502);
}

void
tls_origin_start(struct upstream *up)
{
    SSL_CTX *ctx = conf_tls_client_ctx(wk->conf->tls);
    enum conf_verify pol = conf_tls_verify_policy(wk->conf->tls);
    char host[256];
    size_t hl = strlen(up->up_host);
    int literal = 0;
    unsigned char tmp[16];
    SSL *s = NULL;

    /* "[::1]" -> "::1" for the IP check; IP literals get no SNI (RFC 6066). */
    if (hl > 2 && up->up_host[0] == '[' && hl - 2 < sizeof(host)) {
        memcpy(host, up->up_host + 1, hl - 2);
        host[hl - 2] = '\0';
    } else {
        snprintf(host, sizeof(host), "%s", up->up_host);
    }
    literal = inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1;
    if (ctx == NULL || (s = SSL_new(ctx)) == NULL || !SSL_set_fd(s, up->up_fd)) {
        SSL_free(s);
        log_warn("conn %llu: cannot start TLS to origin %s:%d: %s",
                 (unsigned long long)up->up_req->rq_id, up->up_host, up->up_port,
                 ctx ? tls_reason() : "no TLS client context");
        ERR_clear_error();
        up->up_ready(up, 502);
        return;
    }
    SSL_set_connect_state(s);
    if (!literal)
        SSL_set_tlsext_host_name(s, host);
    if (pol != CONF_VERIFY_DISABLED) {
        if (literal)
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), host);
        else
            SSL_set1_host(s, host);
    }
    up->up_tls = s;
    event_assign(&up->up_rev, wk->base, up->up_fd, EV_READ, tls_origin_on_io, up);
    event_assign(&up->up_wev, wk->base, up->up_fd, EV_WRITE, tls_origin_on_io, up);
    tls_origin_step(up);
}

ssize_t
tls_origin_read(struct upstream *up, char *p, size_t n)
{
    int want_write;     /* renegotiation is off: only key updates, whose
                           answer fits the socket: retry on the next read */
    ssize_t rc = tls_read(up->up_tls, &up->up_rev, p, n, &want_write);

    if (rc < 0 && errno == EIO)
        log_debug("origin %s:%d: TLS read: %s", up->up_host, up->up_port, tls_reason());
    return rc;
}

ssize_t
tls_origin_write(struct upstream *up, const char *p, size_t n)
{
    SSL *s = up->up_tls;
    int rc, err;

    ERR_clear_error();
    rc = SSL_write(s, p, n > INT_MAX ? INT_MAX : (int)n);
    if (rc > 0)
        return rc;
    err = SSL_get_error(s, rc);
    if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
        errno = EAGAIN;     /* up_send waits for both directions */
        return -1;
    }
    if (err == SSL_ERROR_SYSCALL) {
        if (errno == 0 || errno == EAGAIN)
            errno = EPIPE;
    } else {
        log_debug("origin %s:%d: TLS write: %s", up->up_host, up->up_port, tls_reason());
        errno = EIO;
    }
    ERR_clear_error();
    return -1;
}

int
tls_origin_pending(const struct upstream *up)
{
    return up->up_tls && SSL_pending(up->up_tls) > 0;
}

void
tls_origin_free(struct ssl_st *ssl)
{
    SSL_free(ssl);
}
