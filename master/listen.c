/*
 * master/listen.c: the listening sockets.
 *
 * SO_REUSEPORT lets each worker own an accept queue (no thundering herd,
 * no accept lock), but it also lets a second process of the same user bind
 * the same port without an error, silently splitting the traffic.  So every
 * fixed port is first probed with a plain bind (no SO_REUSEPORT), which
 * fails with EADDRINUSE when anyone listens there.
 *
 * Port 0 means "pick one": the first socket binds port 0 and the others
 * bind the port it got.
 *
 * Each server_ports descriptor is one listener: "8080 8080:ipv6" (ATS's
 * stock default) is an IPv4 socket and an IPv6 one with IPV6_V6ONLY, so
 * neither takes the other's connections.  ip-in= binds that address.  All
 * the probes run before any listener is bound, so descriptors that overlap
 * without being the same ("8080" and "ip-in=127.0.0.1:8080": the kernel
 * gives the more specific one its address's connections) do not find each
 * other's sockets and mistake them for another server's.
 *
 * The master keeps every socket open for its whole life.  Closing a
 * reuseport socket drops the connections queued on it, so reloads and
 * respawns hand the same sockets to the new workers.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "master/master.h"

/* Accept queue per socket: the kernel caps it at net.core.somaxconn. */
#define LISTEN_BACKLOG 4096

static int
listen_addr(const struct conf_port *p, int port, struct sockaddr_storage *ss,
            socklen_t *sl)
{
    memset(ss, 0, sizeof(*ss));
    if (p->ipv6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = in6addr_any;
        if (p->has_addr)
            memcpy(&s6->sin6_addr, p->addr, 16);
        s6->sin6_port = htons((uint16_t)port);
        *sl = sizeof(*s6);
        return AF_INET6;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(INADDR_ANY);
    if (p->has_addr)
        memcpy(&s4->sin_addr, p->addr, 4);
    s4->sin_port = htons((uint16_t)port);
    *sl = sizeof(*s4);
    return AF_INET;
}

/* "8080", "[::]:8080", "127.0.0.1:8080": which listener, for messages. */
static void
listen_name(const struct conf_port *p, int port, char *out, size_t n)
{
    char a[INET6_ADDRSTRLEN] = "::";

    if (p->has_addr)
        inet_ntop(p->ipv6 ? AF_INET6 : AF_INET, p->addr, a, sizeof(a));
    if (p->ipv6)
        snprintf(out, n, "[%s]:%d", a, port);
    else if (p->has_addr)
        snprintf(out, n, "%s:%d", a, port);
    else
        snprintf(out, n, "%d", port);
}

static int
listen_socket(const struct conf_port *p, int port, int reuseport, int *got,
              char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int one = 1, fd, fam;

    fam = listen_addr(p, port, &ss, &sl);
    fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* SO_REUSEADDR only lets us bind over TIME_WAIT leftovers; on Linux it
     * never lets two listeners share a port. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fam == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        snprintf(err, errlen, "SO_REUSEPORT: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
        char a[INET6_ADDRSTRLEN + 8];

        listen_name(p, port, a, sizeof(a));
        if (errno == EADDRINUSE)
            snprintf(err, errlen, "port %s in use (another server listens there)", a);
        else
            snprintf(err, errlen, "bind port %s: %s", a, strerror(errno));
        close(fd);
        return -1;
    }
    if (got) {
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
            snprintf(err, errlen, "getsockname: %s", strerror(errno));
            close(fd);
            return -1;
        }
        *got = ntohs(fam == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
    }
    return fd;
}

int
listen_open(struct listeners *l, const struct conf_records *rec, int nworkers,
            char *err, size_t errlen)
{
    memset(l, 0, sizeof(*l));
    l->nports = rec->nports;
    l->nworkers = nworkers;
    l->fd = malloc(sizeof(int) * (size_t)(rec->nports * nworkers));
    if (l->fd == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < rec->nports * nworkers; i++)
        l->fd[i] = -1;

    for (int p = 0; p < rec->nports; p++) {
        const struct conf_port *cp = &rec->ports[p];

        if (cp->port != 0) {
            int probe = listen_socket(cp, cp->port, 0, NULL, err, errlen);
            if (probe < 0)
                goto fail;
            close(probe);
        }
    }
    for (int p = 0; p < rec->nports; p++) {
        const struct conf_port *cp = &rec->ports[p];
        int port = cp->port;

        for (int w = 0; w < nworkers; w++) {
            int fd = listen_socket(cp, port, 1, port == 0 ? &port : NULL,
                                   err, errlen);
            if (fd < 0)
                goto fail;
            l->fd[p * nworkers + w] = fd;
            if (listen(fd, LISTEN_BACKLOG) < 0) {
                snprintf(err, errlen, "listen on port %d: %s", port, strerror(errno));
                goto fail;
            }
        }
        l->port[p] = port;
    }
    return 0;

fail:
    listen_close(l);
    return -1;
}

void
listen_close(struct listeners *l)
{
    if (l->fd) {
        for (int i = 0; i < l->nports * l->nworkers; i++)
            if (l->fd[i] >= 0)
                close(l->fd[i]);
        free(l->fd);
    }
    l->fd = NULL;
}

void
listen_fds_for(const struct listeners *l, int index, int *out)
{
    for (int p = 0; p < l->nports; p++)
        out[p] = l->fd[p * l->nworkers + index];
}
