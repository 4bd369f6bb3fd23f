/*
 * master/ctl.c: the control socket and `cistern ctl` (issue 25).
 *
 * The socket.  RUN_DIR/cistern.sock, a UNIX stream socket the master
 * creates at start (mode 0600, owned by the user the master runs as:
 * root, or whoever started it without privileges).  Only that user, and
 * root, can connect; the master also checks the peer's uid
 * (SO_PEERCRED).  The workers' user is not let in: a compromised worker
 * must not be able to reload, drain or purge.
 *
 * The protocol (one request per connection, text):
 *   request   one line, at most 4095 bytes, words separated by spaces:
 *               metric get NAME | metric match REGEX
 *               config reload | config status
 *               server drain | server undrain
 *               cache lookup URL | cache purge URL [--soft]
 *               cache purge --tag T ... | --prefix URL ... | --host H ...
 *                           | --all [--soft]
 *               host down NAME | host up NAME
 *               url top [N] [requests|misses]
 *   answer    a status line "CODE TEXT": 0 ok, 1 not found / false,
 *             2 usage, 3 unreachable, 4 error; then "name<TAB>value"
 *             lines; then the server closes the connection.
 * The exit status of `cistern ctl` is CODE; 3 also when the socket cannot
 * be reached (no instance, or no permission).
 *
 * Who answers.  The master answers config, server, host and url itself (it
 * owns reloads, the header of the shared region and the parent table; the
 * URL tables are in every slot, read from shm).
 * metric and cache go to a worker of the serving generation: the socket
 * is passed over the worker's SOCK_SEQPACKET pair with the line
 * (SCM_RIGHTS) and the worker answers on it (worker/ctl.c).  A worker
 * knows the remap rules and makes the cache key exactly as a request
 * would (a lookup that the master made by itself would need the key
 * rules twice, and the master never opens LMDB).
 *
 * `config reload` waits (the connection stays open, at most 30 s) for
 * the verdict the reload status file gets: ok once the new workers serve,
 * or failed with the configuration's errors.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "shm/log.h"
#include "shm/parenttab.h"
#include "shm/shm.h"
#include "master/master.h"

#define CTL_CLIENTS  16
#define CTL_LINE     4096
#define CTL_READ_MS  5000
#define CTL_RELOAD_MS 30000
#define CTL_URLS_MAX 100            /* rows of `url top` (~25 KiB answer) */

struct ctl_client {
    int      fd;                    /* -1: free */
    size_t   n;
    int64_t  deadline_ms;
    int      reload_wait;           /* waiting for the reload verdict */
    char     line[CTL_LINE];
};

static struct {
    int                    lfd;
    char                   path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const struct ctl_ops  *ops;
    struct ctl_client      cl[CTL_CLIENTS];
} C = { .lfd = -1 };

static int64_t
ctl_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
ctl_open(const char *run_dir, const struct ctl_ops *ops)
{
    struct sockaddr_un sa;
    mode_t old;
    int fd;

    C.ops = ops;
    for (int i = 0; i < CTL_CLIENTS; i++)
        C.cl[i].fd = -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/cistern.sock", run_dir)
        >= sizeof(sa.sun_path)) {
        log_error("control socket: %s/cistern.sock: path too long", run_dir);
        return -1;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    unlink(sa.sun_path);      /* ours: we hold the run directory's lock */
    old = umask(0077);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(sa.sun_path, 0600) < 0
        || listen(fd, 16) < 0) {
        umask(old);
        log_error("control socket %s: %s", sa.sun_path, strerror(errno));
        close(fd);
        return -1;
    }
    umask(old);
    snprintf(C.path, sizeof(C.path), "%s", sa.sun_path);
    C.lfd = fd;
    return 0;
}

void
ctl_close(int remove)
{
    for (int i = 0; i < CTL_CLIENTS; i++)
        if (C.cl[i].fd >= 0) {
            close(C.cl[i].fd);
            C.cl[i].fd = -1;
        }
    if (C.lfd >= 0) {
        close(C.lfd);
        if (remove)
            unlink(C.path);
        C.lfd = -1;
    }
}

static int
ctl_write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1; /* the client went away, or stopped reading for 1 s */
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void
ctl_answer(struct ctl_client *c, int code, const char *body)
{
    static const char *const codes[] = { "ok", "not found", "usage", "unreachable", "error" };
    char head[64];
    int n = snprintf(head, sizeof(head), "%d %s\n", code, codes[code]);

    /* answers are small (tens of KiB) and go into an empty socket buffer;
     * should one ever not fit, the rest is written blocking with a 1 s
     * send timeout (the caller is an operator allowed on the socket), so
     * an answer is whole or visibly cut, never silently short */
    struct timeval tv = { 1, 0 };
    int fl = fcntl(c->fd, F_GETFL);

    if (fl >= 0)
        (void)fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
    (void)setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (ctl_write_all(c->fd, head, (size_t)n) == 0 && body)
        (void)ctl_write_all(c->fd, body, strlen(body));
    close(c->fd);
    c->fd = -1;
}

/* host down|up NAME: "host:port", or every port of host */
static void
ctl_host(struct ctl_client *c, int down, const char *name)
{
    struct parenttab *pt = C.ops->shm->parenttab;
    struct parenttab_stat st;
    char body[2048];
    size_t off = 0, nl = strlen(name);
    int n = parenttab_count(pt), hit = 0;

    for (int i = 0; i < n; i++) {
        parenttab_get(pt, i, time(NULL), 300, &st);
        if (strcmp(st.name, name) == 0
            || (strchr(name, ':') == NULL && strncmp(st.name, name, nl) == 0 && st.name[nl] == ':')) {
            parenttab_force(pt, i, down, time(NULL));
            log_notice("ctl: parent %s marked %s", st.name, down ? "down" : "up");
            if (off < sizeof(body) - 300)
                off += (size_t)snprintf(body + off, sizeof(body) - off, "%s\t%s\n", st.name,
                                        down ? "down" : "up");
            hit++;
        }
    }
    if (!hit)
        snprintf(body, sizeof(body), "error\tno parent named %s (parent.config's host:port)\n", name);
    ctl_answer(c, hit ? 0 : 1, body);
}

static void
ctl_status(struct ctl_client *c)
{
    const struct shm_hdr *h = C.ops->shm->hdr;
    char body[4096 + SHM_RELOAD_MSG_LEN];
    int ready = 0;

    for (unsigned i = 0; i < h->nslots; i++)
        ready += C.ops->shm->slots[i].pid != 0 && C.ops->shm->slots[i].state == SHM_SLOT_READY
                 && C.ops->shm->slots[i].kind == SHM_KIND_WORKER
                 && C.ops->shm->slots[i].generation == h->generation;
    snprintf(body, sizeof(body),
             "confdir\t%s\ngeneration\t%u\nworkers_ready\t%d\nreloads_ok\t%u\nreloads_failed\t%u\n"
             "last_reload_time\t%lld\nlast_reload_result\t%s\nlast_reload_failure\t%s\n"
             "draining\t%s\nworker_restarts\t%u\n",
             C.ops->confdir, h->generation, ready, h->reloads_ok, h->reloads_failed,
             (long long)h->last_reload_time, C.ops->last_result, h->last_reload_msg,
             h->ctl_drain ? "true" : "false", h->worker_restarts);
    ctl_answer(c, 0, body);
}

/* url top [N] [requests|misses]: the busiest URLs of every slot's table
 * and the retired ones, merged (shm/urltop.h) */
static void
ctl_urls(struct ctl_client *c, const char *args)
{
    struct urltop_ent *e = NULL;
    char *body = NULL, *end;
    int max = 10, by_misses = 0, n;
    size_t off = 0, cap;

    while (*args) {
        size_t k = strcspn(args, " ");
        if (k == 6 && strncmp(args, "misses", 6) == 0)
            by_misses = 1;
        else if (!(k == 8 && strncmp(args, "requests", 8) == 0)) {
            max = (int)strtol(args, &end, 10);
            if (end != args + k || max < 1 || max > CTL_URLS_MAX) {
                ctl_answer(c, 2, "error\turl top [N (1-100)] [requests|misses]\n");
                return;
            }
        }
        args += k;
        args += strspn(args, " ");
    }
    cap = (size_t)max * (URLTOP_URL + 200) + 64;
    if ((e = calloc((size_t)max, sizeof(*e))) == NULL || (body = malloc(cap)) == NULL
        || (n = urltop_collect(C.ops->shm, by_misses, e, max)) < 0) {
        ctl_answer(c, 4, "error\tout of memory\n");
        goto out;
    }
    body[0] = '\0';
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(body + off, cap - off,
                                "url.%d\t%s\nurl.%d.requests\t%llu\nurl.%d.hits\t%llu\n"
                                "url.%d.misses\t%llu\nurl.%d.error\t%llu\n",
                                i + 1, e[i].url, i + 1, (unsigned long long)e[i].requests,
                                i + 1, (unsigned long long)e[i].hits, i + 1,
                                (unsigned long long)e[i].misses, i + 1,
                                (unsigned long long)e[i].err);
    ctl_answer(c, 0, body);
out:
    free(body);
    free(e);
}

/* metric and cache: the client's socket goes to a worker with the line */
static void
ctl_forward(struct ctl_client *c)
{
    union { struct cmsghdr h; char c[CMSG_SPACE(sizeof(int))]; } cm;
    char msg[CTL_LINE + 1];
    struct iovec iov = { msg, 0 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.c, .msg_controllen = sizeof(cm.c) };
    struct cmsghdr *ch;
    int wfd = C.ops->worker_sock();

    msg[0] = 'c';
    memcpy(msg + 1, c->line, c->n);
    iov.iov_len = c->n + 1;
    memset(&cm, 0, sizeof(cm));
    ch = CMSG_FIRSTHDR(&mh);
    ch->cmsg_level = SOL_SOCKET;
    ch->cmsg_type = SCM_RIGHTS;
    ch->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(ch), &c->fd, sizeof(int));
    if (wfd < 0 || sendmsg(wfd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        ctl_answer(c, 3, "error\tno worker is serving\n");
        return;
    }
    close(c->fd);       /* the worker has its own copy now */
    c->fd = -1;
}

static void
ctl_request(struct ctl_client *c)
{
    char w[3][CTL_LINE];
    int nw = 0;
    const char *p = c->line;

    memset(w, 0, sizeof(w));
    while (*p && nw < 3) {
        size_t k;
        while (*p == ' ')
            p++;
        k = nw < 2 ? strcspn(p, " ") : strlen(p);
        if (k == 0)
            break;
        memcpy(w[nw++], p, k);
        p += k;
    }
    log_info("ctl: %s", c->line);
    if (nw >= 2 && strcmp(w[0], "config") == 0 && strcmp(w[1], "reload") == 0 && nw == 2) {
        c->reload_wait = 1;
        c->deadline_ms = ctl_now_ms() + CTL_RELOAD_MS;
        C.ops->reload();        /* the verdict comes to ctl_reload_done */
    } else if (nw == 2 && strcmp(w[0], "config") == 0 && strcmp(w[1], "status") == 0) {
        ctl_status(c);
    } else if (nw == 2 && strcmp(w[0], "server") == 0
               && (strcmp(w[1], "drain") == 0 || strcmp(w[1], "undrain") == 0)) {
        int d = strcmp(w[1], "drain") == 0;
        C.ops->shm->hdr->ctl_drain = (uint32_t)d;
        log_notice("ctl: server %s: answers %s", w[1],
                   d ? "close their connections (Connection: close)" : "keep connections alive again");
        ctl_answer(c, 0, d ? "draining\ttrue\n" : "draining\tfalse\n");
    } else if (nw >= 2 && strcmp(w[0], "url") == 0 && strcmp(w[1], "top") == 0) {
        ctl_urls(c, w[2]);
    } else if (nw == 3 && strcmp(w[0], "host") == 0
               && (strcmp(w[1], "down") == 0 || strcmp(w[1], "up") == 0)) {
        ctl_host(c, strcmp(w[1], "down") == 0, w[2]);
    } else if (nw == 3 && ((strcmp(w[0], "metric") == 0
                            && (strcmp(w[1], "get") == 0 || strcmp(w[1], "match") == 0))
                           || (strcmp(w[0], "cache") == 0
                               && (strcmp(w[1], "lookup") == 0 || strcmp(w[1], "purge") == 0)))) {
        ctl_forward(c);
    } else {
        ctl_answer(c, 2, "error\tunknown verb (cistern ctl --help)\n");
    }
}

void
ctl_reload_done(int ok, const char *msg, const char *errors)
{
    char body[8192];

    snprintf(body, sizeof(body), "reload\t%s\nmessage\t%s\n%s", ok ? "ok" : "failed", msg,
             errors && !ok ? errors : "");
    for (int i = 0; i < CTL_CLIENTS; i++)
        if (C.cl[i].fd >= 0 && C.cl[i].reload_wait)
            ctl_answer(&C.cl[i], ok ? 0 : 1, body);
}

int
ctl_pollfds(struct pollfd *p, int max)
{
    int n = 0;

    if (C.lfd >= 0 && n < max)
        p[n++] = (struct pollfd){ .fd = C.lfd, .events = POLLIN };
    for (int i = 0; i < CTL_CLIENTS && n < max; i++)
        if (C.cl[i].fd >= 0 && !C.cl[i].reload_wait)
            p[n++] = (struct pollfd){ .fd = C.cl[i].fd, .events = POLLIN };
    return n;
}

static void
ctl_accept(void)
{
    struct ucred cr;
    socklen_t crl = sizeof(cr);
    int fd, i;

    while ((fd = accept4(C.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        for (i = 0; i < CTL_CLIENTS && C.cl[i].fd >= 0; i++)
            ;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0
            || (cr.uid != 0 && cr.uid != geteuid()) || i == CTL_CLIENTS) {
            static const char no[] = "3 unreachable\nerror\trefused\n";
            if (write(fd, no, sizeof(no) - 1) < 0) { /* gone */ }
            close(fd);
            continue;
        }
        C.cl[i].fd = fd;
        C.cl[i].n = 0;
        C.cl[i].reload_wait = 0;
        C.cl[i].deadline_ms = ctl_now_ms() + CTL_READ_MS;
    }
}

static void
ctl_read(struct ctl_client *c)
{
    ssize_t r = read(c->fd, c->line + c->n, sizeof(c->line) - 1 - c->n);
    char *nl;

    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close(c->fd);
        c->fd = -1;
        return;
    }
    if (r < 0)
        return;
    c->n += (size_t)r;
    c->line[c->n] = '\0';
    if ((nl = memchr(c->line, '\n', c->n)) != NULL) {
        *nl = '\0';
        c->n = (size_t)(nl - c->line);
        if (c->n && c->line[c->n - 1] == '\r')
            c->line[--c->n] = '\0';
        ctl_request(c);
    } else if (c->n >= sizeof(c->line) - 1) {
        ctl_answer(c, 2, "error\tline too long\n");
    }
}

void
ctl_events(const struct pollfd *p, int n)
{
    int64_t now = ctl_now_ms();

    for (int k = 0; k < n; k++) {
        if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        if (p[k].fd == C.lfd) {
            ctl_accept();
            continue;
        }
        for (int i = 0; i < CTL_CLIENTS; i++)
            if (C.cl[i].fd == p[k].fd && !C.cl[i].reload_wait)
                ctl_read(&C.cl[i]);
    }
    for (int i = 0; i < CTL_CLIENTS; i++)
        if (C.cl[i].fd >= 0 && now >= C.cl[i].deadline_ms)
            ctl_answer(&C.cl[i], 4, C.cl[i].reload_wait
                       ? "error\tno reload verdict in time; see config status\n"
                       : "error\tno request line in time\n");
}
