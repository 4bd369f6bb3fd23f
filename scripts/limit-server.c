/*
 * scripts/limit-server.c: the "limit" of scripts/bench.sh.
 *
 * A trivial single-threaded epoll HTTP/1.1 server that answers every request
 * with the same precomputed response from memory: the practical ceiling of
 * one core on loopback for a given response size.  Every benchmark figure is
 * printed as a fraction of this server's req/s.
 *
 * It does the least any correct keep-alive server must do per request: read
 * the request bytes, find its end ("\r\n\r\n", so pipelined requests are
 * counted right and a request split across reads waits for its end), and
 * write the response.  It ignores the method and target and never closes a
 * connection first.  Every response says "Connection: keep-alive", which
 * ab -k (HTTP/1.0) needs to see to reuse the connection.  All responses for the requests found in one read go out
 * in as few write() calls as the socket takes; a short write keeps the rest
 * (as a count of whole responses plus an offset) and waits for EPOLLOUT.
 *
 * Not a test and not part of the daemon: bench.sh builds it with
 * `gcc -O2 -o DIR/limit-server scripts/limit-server.c` and runs
 * `limit-server PORT BODY_BYTES [STATUS]` pinned like the other servers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define LS_MAX_EVENTS 256
#define LS_READ_BUF   16384   /* one read; 100 pipelined ab requests fit */
#define LS_MAX_HEADER 16384   /* a request head longer than this: close */
#define LS_IOV_MAX    64

struct ls_conn {
    int    fd;
    size_t inlen;              /* bytes of an unfinished request head kept */
    size_t pending;            /* whole responses still to send */
    size_t off;                /* bytes of the first pending one already sent */
    int    want_out;           /* registered for EPOLLOUT */
    char   in[LS_MAX_HEADER];
};

static char  *ls_resp;
static size_t ls_resp_len;
static int    ls_ep;

static void
ls_close(struct ls_conn *c)
{
    close(c->fd);
    free(c);
}

/* Count the request heads ending in c->in[0..len); keep the unfinished tail
 * (the bytes after the last "\r\n\r\n") at the start of c->in. */
static size_t
ls_count_requests(struct ls_conn *c, size_t len, size_t scan_from)
{
    size_t n = 0, start = 0, i;

    for (i = scan_from; i + 3 < len; i++) {
        if (c->in[i] == '\r' && c->in[i + 1] == '\n' && c->in[i + 2] == '\r'
            && c->in[i + 3] == '\n') {
            n++;
            i += 3;
            start = i + 1;
        }
    }
    if (start > 0)
        memmove(c->in, c->in + start, len - start);
    c->inlen = len - start;
    return n;
}

/* Send the pending responses.  Returns -1 on a fatal error. */
static int
ls_flush(struct ls_conn *c)
{
    struct iovec iov[LS_IOV_MAX];

    while (c->pending > 0) {
        int     k = 0;
        size_t  p = c->pending;
        ssize_t w;

        iov[k].iov_base = ls_resp + c->off;
        iov[k].iov_len = ls_resp_len - c->off;
        k++;
        for (p--; p > 0 && k < LS_IOV_MAX; p--, k++) {
            iov[k].iov_base = ls_resp;
            iov[k].iov_len = ls_resp_len;
        }
        w = k == 1 ? write(c->fd, iov[0].iov_base, iov[0].iov_len)
                   : writev(c->fd, iov, k);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            return -1;
        }
        c->off += (size_t)w;
        while (c->pending > 0 && c->off >= ls_resp_len) {
            c->off -= ls_resp_len;
            c->pending--;
        }
    }
    if ((c->pending > 0) != c->want_out) {
        struct epoll_event ev;

        c->want_out = c->pending > 0;
        ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0);
        ev.data.ptr = c;
        if (epoll_ctl(ls_ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
            return -1;
    }
    return 0;
}

static void
ls_on_conn(struct ls_conn *c, unsigned events)
{
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        for (;;) {
            size_t  room = sizeof(c->in) - c->inlen, from;
            ssize_t r;

            if (room == 0)
                goto close;            /* a head over LS_MAX_HEADER */
            r = read(c->fd, c->in + c->inlen, room);
            if (r == 0)
                goto close;
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN)
                    break;
                goto close;
            }
            /* a terminator may straddle the old tail and the new bytes */
            from = c->inlen >= 3 ? c->inlen - 3 : 0;
            c->pending += ls_count_requests(c, c->inlen + (size_t)r, from);
            if ((size_t)r < room)
                break;                 /* drained: skip the EAGAIN read */
        }
    }
    if (ls_flush(c) < 0)
        goto close;
    return;
close:
    ls_close(c);
}

int
main(int argc, char **argv)
{
    struct epoll_event ev, evs[LS_MAX_EVENTS];
    struct sockaddr_in sin;
    size_t             body, hlen;
    int                lfd, one = 1, status;
    char               head[256];

    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT BODY_BYTES [STATUS]\n", argv[0]);
        return 2;
    }
    body = strtoul(argv[2], NULL, 10);
    status = argc > 3 ? atoi(argv[3]) : 200;
    hlen = (size_t)snprintf(head, sizeof(head),
                            "HTTP/1.1 %d %s\r\nServer: limit\r\n"
                            "Content-Type: application/octet-stream\r\n"
                            "Cache-Control: max-age=3600\r\n"
                            "Connection: keep-alive\r\n"
                            "Content-Length: %zu\r\n\r\n",
                            status, status == 200 ? "OK" : "X", body);
    ls_resp_len = hlen + body;
    ls_resp = malloc(ls_resp_len);
    if (ls_resp == NULL)
        return 1;
    memcpy(ls_resp, head, hlen);
    memset(ls_resp + hlen, 'a', body);
    signal(SIGPIPE, SIG_IGN);

    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((unsigned short)atoi(argv[1]));
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0
        || listen(lfd, 4096) < 0) {
        perror("limit-server: bind/listen");
        return 1;
    }
    ls_ep = epoll_create1(0);
    ev.events = EPOLLIN;
    ev.data.ptr = NULL;               /* NULL: the listener */
    epoll_ctl(ls_ep, EPOLL_CTL_ADD, lfd, &ev);

    for (;;) {
        int n = epoll_wait(ls_ep, evs, LS_MAX_EVENTS, -1), i;

        for (i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                int fd;

                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    struct ls_conn *c = calloc(1, sizeof(*c));

                    if (c == NULL) {
                        close(fd);
                        continue;
                    }
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
                               sizeof(one));
                    c->fd = fd;
                    ev.events = EPOLLIN;
                    ev.data.ptr = c;
                    if (epoll_ctl(ls_ep, EPOLL_CTL_ADD, fd, &ev) < 0)
                        ls_close(c);
                }
                continue;
            }
            ls_on_conn(evs[i].data.ptr, evs[i].events);
        }
    }
}
