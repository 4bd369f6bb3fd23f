/*
 * worker/worker.c: the worker process's life: event loop, accepting,
 * signals, drain, and the per-worker object pools.
 *
 * Life of a worker:
 *   forked by the master -> worker_main() -> event_base after fork (never
 *   share one across fork) -> READY in its shm slot -> serve ->
 *   SIGTERM: close everything, exit now;
 *   SIGQUIT: stop accepting, finish in-flight responses, close keep-alive
 *   connections at the next request boundary, exit when none is left or
 *   at proxy.config.stop.shutdown_timeout.
 * The master's death is noticed two ways: PR_SET_PDEATHSIG (SIGTERM) and
 * EOF on a pipe whose write end only the master holds.
 *
 * The listening sockets belong to the master; a worker only closes its
 * copies.  Closing the master's copy would drop the accept queue.
 *
 * Every generation accepts from the same sockets, so a reload switches
 * which processes accept, not where clients connect.  The switch is one
 * write: the master's shm generation.  A worker of a newer generation
 * watches its listeners only once the master has made that generation the
 * serving one (the master's 'g'; a respawn into the serving generation
 * starts watching at once), and an older worker stops at the first accept
 * it sees after the switch, before its 'q' arrives.  So once anyone has
 * been answered by the new configuration, or `cistern -s reload` has said
 * ok, no new connection gets the old one; connections the old generation
 * already holds finish their request under it (the drain).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "shm/log.h"
#include "shm/panic.h"
#include "worker/worker.h"
#include "worker/tunnel.h"

struct worker *wk;

/* Accepts per readiness event: enough to empty a burst, small enough that
 * one listener cannot starve established connections. */
#define ACCEPT_BATCH 64

/* ------------------------------------------------------------------ */

static void
worker_stop_accepting(struct worker *w)
{
    for (int i = 0; i < w->nlisten; i++) {
        if (w->listen_ev[i]) {
            event_free(w->listen_ev[i]);
            w->listen_ev[i] = NULL;
        }
        if (w->listen_fd[i] >= 0) {
            close(w->listen_fd[i]);
            w->listen_fd[i] = -1;
        }
    }
}

static void
worker_begin_drain(struct worker *w)
{
    struct timeval now;

    if (w->draining)
        return;
    w->draining = 1;
    w->slot->state = SHM_SLOT_DRAINING;
    worker_stop_accepting(w);
    event_base_gettimeofday_cached(w->base, &now);
    w->drain_deadline = now;
    w->drain_deadline.tv_sec += w->conf->rec.shutdown_timeout;
    log_info("worker %u (generation %u) draining %u connection(s)",
             w->index, w->generation, w->nconns);
    /* The idle connections' grace (conn_wait_read) runs from now, not
     * from the loop's cached time: callbacks earlier in this turn may
     * have just answered them with keep-alive, and a turn stalled on a
     * loaded machine (an ASan run under load: 0.6 s measured) would leave
     * their clients little or no time to send the next request before
     * the close. */
    event_base_update_cache_time(w->base);
    conn_drain_all(w);
    if (w->nconns == 0)
        event_base_loopbreak(w->base);
}

/* Watch the listeners: our generation is (now) the serving one. */
static void
worker_start_accepting(struct worker *w)
{
    if (w->accepting || w->draining)
        return;
    w->accepting = 1;
    for (int i = 0; i < w->nlisten; i++)
        if (w->listen_ev[i] && event_add(w->listen_ev[i], NULL) < 0)
            log_crit("worker %u: cannot watch listener %d", w->index, i);
}

#define ACCEPT_PAUSE_MS 100

static void
worker_on_resume_accept(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    magic_check(w->magic, WORKER_MAGIC);
    for (int i = 0; i < w->nlisten; i++)
        if (w->listen_ev[i])
            event_add(w->listen_ev[i], NULL);
}

static void
worker_pause_accepting(struct worker *w)
{
    struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };

    for (int i = 0; i < w->nlisten; i++)
        if (w->listen_ev[i])
            event_del(w->listen_ev[i]);
    if (w->accept_pause == NULL)
        w->accept_pause = evtimer_new(w->base, worker_on_resume_accept, w);
    if (w->accept_pause)
        evtimer_add(w->accept_pause, &tv);
}

static void
worker_on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct worker *w = arg;
    int tls = 0, pp = 0, protos = CONF_PROTO_H1;

    magic_check(w->magic, WORKER_MAGIC);
    for (int i = 0; i < w->nlisten; i++)
        if (w->listen_fd[i] == lfd) {
            tls = w->listen_tls[i];
            pp = w->listen_pp[i];
            protos = w->listen_protos[i];
        }
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (w->shm->hdr->generation > w->generation) {
            /* A newer generation serves (checked at each accept: the
             * switch can land inside a batch); its connections are not
             * ours even though our 'q' has not been read yet. */
            worker_begin_drain(w);
            return;
        }
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                || errno == ECONNABORTED)
                return;
            if (errno == EMFILE || errno == ENFILE) {
                /* The listener stays readable: without a pause we would
                 * spin.  Stop accepting for a moment; the kernel queues. */
                log_warn("accept: %s (worker %u has %u connections); pausing accepts",
                         strerror(errno), w->index, w->nconns);
                worker_pause_accepting(w);
                return;
            }
            log_error("accept: %s", strerror(errno));
            return;
        }
        if (w->conf->rec.connections_throttle > 0
            && w->nconns >= (unsigned)w->conf->rec.connections_throttle) {
            static const char busy[] =
                "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                "Connection: close\r\nRetry-After: 1\r\n\r\n";
            /* Best effort: a full socket buffer just loses the courtesy
             * (which a TLS client could not read: it just sees a close). */
            if (!tls && write(fd, busy, sizeof(busy) - 1) < 0) { /* ignore */ }
            close(fd);
            w->ctr->conns_refused++;
            continue;
        }
        conn_accept(w, fd, (struct sockaddr *)&ss, sl, tls, pp, protos);
    }
}

static void
worker_on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct worker *w = arg;

    magic_check(w->magic, WORKER_MAGIC);
    switch (sig) {
    case SIGTERM:
    case SIGINT:
        event_base_loopbreak(w->base);
        break;
    case SIGQUIT:
        worker_begin_drain(w);
        break;
    case SIGUSR1:
        /* The master reopened the error log; our descriptor still points
         * at the old file. */
        if (log_open(w->conf->rec.logfile_dir) < 0)
            log_error("worker %u: reopening the error log: %s", w->index,
                      strerror(errno));
        alog_flush();
        alog_open();
        break;
    default:
        /* SIGHUP is the master's business. */
        break;
    }
}

static void
worker_on_master(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    char b[4100];
    union { struct cmsghdr h; char c[CMSG_SPACE(sizeof(int))]; } cm;
    struct iovec iov = { b, sizeof(b) - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.c, .msg_controllen = sizeof(cm.c) };
    struct cmsghdr *ch;
    int cfd = -1;
    ssize_t n;

    magic_check(w->magic, WORKER_MAGIC);
    n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        log_warn("worker %u: master went away; stopping", w->index);
        event_base_loopbreak(w->base);
        return;
    }
    for (ch = CMSG_FIRSTHDR(&mh); ch; ch = CMSG_NXTHDR(&mh, ch))
        if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS)
            memcpy(&cfd, CMSG_DATA(ch), sizeof(int));
    /* Messages (a SOCK_SEQPACKET pair): 'g' says our generation serves
     * now (start accepting); 'q' orders a drain (a newer generation is
     * up); 'c' LINE with a socket is a `cistern ctl`
     * request to answer on it (worker/ctl.c). */
    if (n > 0 && b[0] == 'c') {
        /* A ctl line is never orders, even when its socket did not come
         * (MSG_CTRUNC: we are at the descriptor limit); its client then
         * sees the master's close, "no answer". */
        if (cfd < 0) {
            log_warn("worker %u: a ctl request came without its socket (%s); not answered",
                     w->index, (mh.msg_flags & MSG_CTRUNC) ? "out of descriptors" : "none sent");
            return;
        }
        b[n] = '\0';
        worker_ctl(cfd, b + 1);
        return;
    }
    if (cfd >= 0)
        close(cfd);
    for (ssize_t i = 0; i < n; i++) {
        if (b[i] == 'q')
            worker_begin_drain(w);
        else if (b[i] == 'g')
            worker_start_accepting(w);
    }
}

/* Another process ended a fill we may be waiting for. */
static void
worker_on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    uint64_t n;

    magic_check(w->magic, WORKER_MAGIC);
    if (read(fd, &n, sizeof(n)) < 0) { /* spurious: check anyway */ }
    req_wait_check(w, 0);
}

static void
worker_on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct timeval now;

    magic_check(w->magic, WORKER_MAGIC);
    if (w->waitq || w->sliceq)
        req_wait_check(w, 0);
    event_base_gettimeofday_cached(w->base, &now);
    w->slot->heartbeat = (uint64_t)now.tv_sec;
    alog_flush();
    /* The master's 'g' is the prompt way; this catches one that was lost. */
    if (!w->accepting && w->shm->hdr->generation == w->generation)
        worker_start_accepting(w);
    if (w->draining) {
        if (w->nconns == 0 || evutil_timercmp(&now, &w->drain_deadline, >=)) {
            if (w->nconns)
                log_notice("worker %u: drain deadline reached, closing %u connection(s)",
                           w->index, w->nconns);
            event_base_loopbreak(w->base);
        }
    }
}

static struct event *
worker_signal(struct worker *w, int sig)
{
    struct event *ev = evsignal_new(w->base, sig, worker_on_signal, w);

    if (ev == NULL || event_add(ev, NULL) < 0) {
        log_crit("worker %u: cannot install the handler for signal %d",
                 w->index, sig);
        abort();
    }
    return ev;
}

/* worker_main, 1: the worker's fields, from its arguments. */
static void
worker_init(struct worker *w, const struct worker_args *a)
{
    w->magic = WORKER_MAGIC;
    pool_init(&w->conn_pool, sizeof(struct conn));
    pool_init(&w->wev_pool, sizeof(struct conn_wev));
    pool_init(&w->req_pool, sizeof(struct req));
    pool_init(&w->up_pool, sizeof(struct upstream));
    pool_init(&w->head_pool, sizeof(struct http_req));
    origin_pool_init(w);
    w->conf = a->conf;
    w->shm = a->shm;
    w->slot = &a->shm->slots[a->slot];
    w->ctr = &w->slot->c;
    w->urls = &w->slot->urls;
    w->index = a->index;
    w->generation = a->generation;
    w->nlisten = a->nlisten;
    w->limits.line_max = (size_t)a->conf->rec.request_line_max_size;
    w->limits.head_max = (size_t)a->conf->rec.request_header_max_size;
    w->resp_limits.line_max = (size_t)a->conf->rec.response_header_max_size;
    w->resp_limits.head_max = (size_t)a->conf->rec.response_header_max_size;
    via_init(w);
    for (int i = 0; i < a->nlisten; i++) {
        w->listen_fd[i] = a->listen_fds[i];
        w->listen_tls[i] = i < a->conf->rec.nports && a->conf->rec.ports[i].ssl;
        w->listen_pp[i] = i < a->conf->rec.nports && a->conf->rec.ports[i].pp;
        w->listen_protos[i] = i < a->conf->rec.nports
                              ? conf_port_protos(&a->conf->rec.ports[i]) : CONF_PROTO_H1;
        if (w->listen_tls[i] && conf_tls_server_ctx(a->conf->tls) == NULL)
            log_error("worker %u: port %d is ssl but no certificate is loaded",
                      a->index, a->conf->rec.ports[i].port);
    }
}

/* worker_main, 2: the event base and every event of the process (signals,
 * the master's pipe, the wake-up eventfd, the tick, the listeners).
 * Returns 0, or -1 (logged). */
static int
worker_events(struct worker *w, const struct worker_args *a)
{
    struct event_config *ecfg;
    struct timeval one = { 1, 0 };

    ecfg = event_config_new();
    /* We never share the base between threads. */
    event_config_set_flag(ecfg, EVENT_BASE_FLAG_NOLOCK);
    w->base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
    if (w->base == NULL || event_base_priority_init(w->base, WK_PRIORITIES) < 0) {
        log_crit("worker %u: event_base_new failed", w->index);
        return -1;
    }
    w->sig_term = worker_signal(w, SIGTERM);
    w->sig_int = worker_signal(w, SIGINT);
    w->sig_quit = worker_signal(w, SIGQUIT);
    w->sig_hup = worker_signal(w, SIGHUP);
    w->sig_usr1 = worker_signal(w, SIGUSR1);
    w->master_ev = event_new(w->base, a->master_pipe, EV_READ | EV_PERSIST,
                             worker_on_master, w);
    event_add(w->master_ev, NULL);
    w->slotno = a->slot;
    w->wake_fds = a->wake_fds;
    w->nslots = a->nslots;
    if (a->wake_fds) {
        w->wake_ev = event_new(w->base, a->wake_fds[a->slot], EV_READ | EV_PERSIST,
                               worker_on_wake, w);
        event_add(w->wake_ev, NULL);
    }
    w->tick = event_new(w->base, -1, EV_PERSIST, worker_on_tick, w);
    event_add(w->tick, &one);

    for (int i = 0; i < w->nlisten; i++) {
        w->listen_ev[i] = event_new(w->base, w->listen_fd[i],
                                    EV_READ | EV_PERSIST, worker_on_accept, w);
        if (w->listen_ev[i] == NULL) {
            log_crit("worker %u: cannot watch listener %d", w->index, i);
            return -1;
        }
    }
    return 0;
}

/* worker_main, 4: leaving.  Whatever is still open is cut (fast stop or
 * deadline), and everything the process holds is freed. */
static void
worker_exit(struct worker *w)
{
    /* The master's stop signals may still arrive while we clean up; they
     * must not turn a clean exit into a death by signal. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGQUIT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    worker_stop_accepting(w);
    conn_close_all(w);
    tunnel_close_all(w);
    origin_pool_close_all(w);
    if (w->cache)
        cache_close(w->cache);
    alog_close();
    event_free(w->sig_term);
    event_free(w->sig_int);
    event_free(w->sig_quit);
    event_free(w->sig_hup);
    event_free(w->sig_usr1);
    event_free(w->master_ev);
    event_free(w->tick);
    if (w->accept_pause)
        event_free(w->accept_pause);
    if (w->wake_ev)
        event_free(w->wake_ev);
    pool_drain(&w->conn_pool);
    pool_drain(&w->wev_pool);
    pool_drain(&w->req_pool);
    pool_drain(&w->up_pool);
    pool_drain(&w->head_pool);
    buf_pool_drain();
    event_base_free(w->base);
    w->magic = 0;
}

int
worker_main(const struct worker_args *a)
{
    static struct worker w0;
    struct worker *w = &w0;

    wk = w;
    worker_init(w, a);
    /* A crash leaves its signal (or cst_panic's reason) in our slot; the
     * master logs it when it reaps us (shm/panic.h). */
    if (panic_install(w->slot) < 0)
        log_warn("worker %u: no abort hook: %s", w->index, strerror(errno));

    /* The master's death must not leave us serving: SIGTERM on its exit. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (fcntl(a->master_pipe, F_GETFD) < 0) {
        log_crit("worker %u: no master pipe", w->index);
        return 1;
    }
    /* PDEATHSIG is not retroactive: the master may already be gone. */
    if (getppid() == 1)
        return 0;

    signal(SIGPIPE, SIG_IGN);
    if (worker_events(w, a) < 0)
        return 1;

    /* worker_main, 3: open the store and the access log, then serve. */
    w->cache_area_ok = a->cache_cf != NULL;
    if (a->cache_cf) {
        char err[512];
        w->cache = cache_open(a->cache_cf, a->shm->cache_area, (int)a->slot,
                              err, sizeof(err));
        if (w->cache == NULL)
            log_error("worker %u: cache unavailable, proxying uncached: %s",
                      w->index, err);
    }
    alog_open();
    metrics_init(w);
    if (a->conf->rec.debug_headers)
        snprintf(w->debug_hdr, sizeof(w->debug_hdr),
                 "X-Cistern-Worker: %u; pid=%d\r\n", w->index, (int)getpid());
    w->slot->heartbeat = (uint64_t)time(NULL);
    w->slot->state = SHM_SLOT_READY;
    /* A respawn into the serving generation accepts at once; a new
     * generation waits for the master's 'g'; one already superseded by a
     * newer serving one never accepts (the master drains it). */
    if (w->shm->hdr->generation == w->generation)
        worker_start_accepting(w);
    event_base_dispatch(w->base);

    worker_exit(w);
    return 0;
}
