/*
 * master/master.c: the master process.
 *
 * The master parses the config, takes the run directory's lock, binds the
 * listening sockets, creates the shared region, forks the workers and then
 * only supervises.  It never serves a request and never opens LMDB, so the
 * most complex code never runs in the process whose death would take the
 * service down.
 *
 * The loop.  Signal handlers only set a flag and write one byte to a
 * self-pipe; the loop poll()s that pipe with a timeout derived from the
 * nearest timer (respawn back-off, reload deadline, drain deadline), so
 * signals and child exits are handled without races and without polling.
 *
 * Generations.  Every worker belongs to a generation: the workers started
 * with one config.  A reload builds a new config (conf_load: the same code
 * as `cistern -t`); on any error the running generation is untouched and
 * the failure is logged, counted in shm and written to the reload status
 * file.  Otherwise a new generation is forked on the *same* listening
 * sockets; when all of its workers report READY in shm, the previous
 * generation is told to drain ('q' on its pipes) and the new one becomes
 * active.  A new worker that dies before READY fails the reload and the old
 * generation keeps serving.  At most GEN_MAX generations live at once.
 *
 * Supervision.  A worker of the active generation that dies is logged (exit
 * status or signal, and the panic text it left in its shm slot), its slot's
 * counters are folded into the retired totals, and it is respawned into a
 * fresh slot at once, on the same listening sockets, so queued connections
 * wait instead of being reset.  Only workers that die within a second of
 * their start are respawned with back-off (doubling, capped at 1 s).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "shm/log.h"
#include "master/master.h"
#include "shm/filltab.h"
#include "shm/shm.h"
#include "worker/worker.h"

#include <sys/eventfd.h>

/* Live generations (1 active + draining).  Each draining one normally
 * leaves within a second or two; 8 lets an operator (or a test) reload
 * twice a second even when forks and exits are slow (sanitizer builds). */
#define GEN_MAX            8
#define START_DEADLINE_MS  10000    /* a new generation must be READY by then */
#define BACKOFF_MIN_MS     50
#define BACKOFF_MAX_MS     1000
#define QUICK_DEATH_MS     1000     /* a worker dying younger than this backs off */
#define KILL_GRACE_MS      10000    /* fast stop: SIGKILL after this */

enum gen_state { GEN_FREE = 0, GEN_STARTING, GEN_ACTIVE, GEN_DRAINING, GEN_FAILED };

struct gen {
    uint32_t        id;
    enum gen_state  state;
    struct conf    *conf;
    int             live;             /* processes not yet reaped */
    int64_t         deadline_ms;      /* STARTING: ready by; DRAINING: kill at */
};

struct proc {
    pid_t           pid;              /* 0: slot unused */
    int             index;            /* worker index */
    struct gen     *gen;
    int             pipe_w;           /* EOF tells the worker we died */
    int64_t         started_ms;
};

static struct {
    const char      *confdir;
    int              foreground;
    struct listeners lis;
    struct shm       shm;
    struct gen       gens[GEN_MAX];
    struct proc     *procs;           /* [nslots] */
    unsigned         nslots;
    int              nworkers;
    uint32_t         next_gen;
    struct gen      *active;
    int64_t          respawn_at[256]; /* per index; 0 = none pending */
    int              backoff_ms[256];
    int              stopping;        /* 1 fast, 2 graceful */
    int64_t          stop_deadline_ms;
    int              lock_fd;
    int              ready_fd;        /* daemon parent's status pipe, or -1 */
    char            *run_dir;
    uint32_t         reload_seq;
    int              failed;          /* the start failed: exit 1 */
    /* the store (NULL cache_cf: running without a cache) */
    struct cache_conf ccf;
    const struct cache_conf *cache_cf;
    pid_t            mgr_pid;
    int              mgr_pipe;        /* write end: 't' tick, 'q' quit */
    int64_t          mgr_started_ms;
    int64_t          mgr_respawn_at;
    int              mgr_quit_sent;
    int             *wake_fds;        /* [nslots] eventfds: fill-table wake-ups */
    char            *confdir_abs;
    struct ctl_ops   ctl;             /* the control socket's view (ctl.c) */
    char             reload_errors[4096]; /* the last failed load's errors */
} M = { .lock_fd = -1, .ready_fd = -1, .mgr_pipe = -1 };

static int sigpipe_fd[2] = { -1, -1 };
static volatile sig_atomic_t sig_hup, sig_term, sig_quit, sig_usr1, sig_chld;

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
master_on_signal(int sig)
{
    int saved = errno;
    char b = (char)sig;

    switch (sig) {
    case SIGHUP:  sig_hup = 1; break;
    case SIGTERM:
    case SIGINT:  sig_term = 1; break;
    case SIGQUIT: sig_quit = 1; break;
    case SIGUSR1: sig_usr1 = 1; break;
    case SIGCHLD: sig_chld = 1; break;
    }
    if (write(sigpipe_fd[1], &b, 1) < 0) {
        /* pipe full: a wake-up is already pending */
    }
    errno = saved;
}

static const int master_signals[] = { SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGCHLD };

static int
master_signals_install(void)
{
    struct sigaction sa;

    if (pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = master_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(master_signals) / sizeof(master_signals[0]); i++)
        if (sigaction(master_signals[i], &sa, NULL) < 0)
            return -1;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

void
master_print_errors(const struct conf_errors *e)
{
    for (int i = 0; i < e->nstored; i++)
        fprintf(stderr, "%s%s\n", e->is_warn[i] ? "warning: " : "", e->msgs[i]);
    if (e->n > e->nstored)
        fprintf(stderr, "(%d more errors not shown)\n", e->n - e->nstored);
}

static int
mkdir_p(const char *path)
{
    char tmp[4096];
    size_t n = strlen(path);

    if (n == 0 || n >= sizeof(tmp))
        return -1;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Write path atomically (tmp + rename), so readers never see half a file. */
static int
write_file_atomic(const char *dir, const char *name, const char *text)
{
    char path[4096], tmp[4096];
    int fd;
    size_t n = strlen(text);

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (write(fd, text, n) != (ssize_t)n) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    return rename(tmp, path);
}

static void
remove_run_file(const char *name)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", M.run_dir, name);
    unlink(path);
}

/* The reload status file lets `cistern -s reload` report the outcome. */
static void
master_reload_status(int ok, const char *msg)
{
    char text[SHM_RELOAD_MSG_LEN + 64];

    snprintf(text, sizeof(text), "%u %s %s\n", ++M.reload_seq,
             ok ? "ok" : "failed", msg);
    if (write_file_atomic(M.run_dir, "reload.status", text) < 0)
        log_warn("cannot write %s/reload.status: %s", M.run_dir, strerror(errno));
    if (!ok) {
        M.shm.hdr->reloads_failed++;
        snprintf(M.shm.hdr->last_reload_msg, SHM_RELOAD_MSG_LEN, "%s", msg);
    } else {
        M.shm.hdr->reloads_ok++;
    }
    M.shm.hdr->last_reload_time = time(NULL);
    M.ctl.last_result = ok ? "ok" : "failed";
    ctl_reload_done(ok, msg, M.reload_errors);
}

/* ------------------------------------------------------------------ */
/* Processes */

static int
master_free_slot(void)
{
    /* The last slot is the cache manager's. */
    for (unsigned i = 0; i + 1 < M.nslots; i++)
        if (M.procs[i].pid == 0 && M.shm.slots[i].pid == 0)
            return (int)i;
    return -1;
}

/* In a fresh child: drop everything that belongs to the master. */
static void
master_child_cleanup(int keep_index)
{
    for (size_t i = 0; i < sizeof(master_signals) / sizeof(master_signals[0]); i++)
        signal(master_signals[i], SIG_DFL);
    /* The master forwards SIGUSR1 (reopen logs) to its workers; one that
     * arrives before the worker has its own handler must not kill it. */
    signal(SIGUSR1, SIG_IGN);
    close(sigpipe_fd[0]);
    close(sigpipe_fd[1]);
    for (unsigned i = 0; i < M.nslots; i++)
        if (M.procs[i].pid && M.procs[i].pipe_w >= 0)
            close(M.procs[i].pipe_w);
    if (M.ready_fd >= 0)
        close(M.ready_fd);
    if (M.lock_fd >= 0)
        close(M.lock_fd);
    if (M.mgr_pipe >= 0)
        close(M.mgr_pipe);
    ctl_close(0);
    for (int p = 0; M.lis.fd && p < M.lis.nports; p++)
        for (int w = 0; w < M.lis.nworkers; w++)
            if (w != keep_index) {
                close(M.lis.fd[p * M.lis.nworkers + w]);
                M.lis.fd[p * M.lis.nworkers + w] = -1;
            }
}

static int
master_spawn_worker(struct gen *g, int index)
{
    int slot = master_free_slot(), pfd[2];
    sigset_t all, old;
    pid_t pid;

    if (M.lis.fd == NULL)
        return -1;      /* stopping: the listening sockets are closed */
    if (slot < 0) {
        log_error("no free worker slot for worker %d (generation %u)", index, g->id);
        return -1;
    }
    /* A SOCK_SEQPACKET pair: 'q' (drain), `cistern ctl` requests with
     * the client's socket (ctl.c), and EOF when the master dies. */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pfd) < 0) {
        log_error("socketpair: %s", strerror(errno));
        return -1;
    }
    /* The slot says STARTING before the child exists: the child marks it
     * READY as soon as it serves, and may do so before fork() returns here,
     * so writing STARTING after the fork could overwrite READY and the
     * worker would never count as ready. */
    struct shm_slot *sl = &M.shm.slots[slot];
    sl->generation = g->id;
    sl->kind = SHM_KIND_WORKER;
    sl->index = index;
    sl->state = SHM_SLOT_STARTING;
    /* Block signals across fork so the child cannot run our handlers. */
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        log_error("fork: %s", strerror(errno));
        memset(sl, 0, sizeof(*sl));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        struct worker_args a;
        int fds[CONF_MAX_PORTS];

        close(pfd[1]);
        master_child_cleanup(index);
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (priv_drop("worker") < 0)
            _exit(1);
        M.shm.slots[slot].pid = getpid();
        listen_fds_for(&M.lis, index, fds);
        memset(&a, 0, sizeof(a));
        a.conf = g->conf;
        a.shm = &M.shm;
        a.slot = (unsigned)slot;
        a.index = (unsigned)index;
        a.generation = g->id;
        a.listen_fds = fds;
        a.nlisten = M.lis.nports;
        a.master_pipe = pfd[0];
        a.cache_cf = M.cache_cf;
        a.wake_fds = M.wake_fds;
        a.nslots = M.nslots;
        exit(worker_main(&a));
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(pfd[0]);
    sl->pid = pid;
    M.procs[slot].pid = pid;
    M.procs[slot].index = index;
    M.procs[slot].gen = g;
    M.procs[slot].pipe_w = pfd[1];
    M.procs[slot].started_ms = now_ms();
    g->live++;
    return 0;
}

/* The cache manager lives in the last slot; see master/manager.c. */
static int
master_spawn_manager(void)
{
    int slot = (int)M.nslots - 1, pfd[2];
    struct shm_slot *sl = &M.shm.slots[slot];
    sigset_t all, old;
    pid_t pid;

    if (pipe2(pfd, O_CLOEXEC) < 0) {
        log_error("pipe: %s", strerror(errno));
        return -1;
    }
    memset(&sl->c, 0, sizeof(sl->c));
    sl->panic[0] = '\0';
    sl->kind = SHM_KIND_MANAGER;
    sl->index = -1;
    sl->state = SHM_SLOT_READY;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        log_error("fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        close(pfd[1]);
        master_child_cleanup(-1);
        /* Stop signals are the master's to act on: the manager leaves
         * last, on 'q', once no worker has the store open.  Ignore them
         * before unblocking, so one already pending cannot kill it. */
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        signal(SIGQUIT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        signal(SIGUSR1, SIG_IGN);
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (priv_drop("cache manager") < 0)
            _exit(1);
        sl->pid = getpid();
        exit(manager_main(M.cache_cf, M.shm.cache_area, slot, pfd[0]));
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(pfd[0]);
    sl->pid = pid;
    M.procs[slot].pid = pid;
    M.procs[slot].index = -1;
    M.procs[slot].gen = NULL;
    M.procs[slot].pipe_w = -1;
    M.procs[slot].started_ms = now_ms();
    M.mgr_pid = pid;
    M.mgr_pipe = pfd[1];
    M.mgr_started_ms = M.procs[slot].started_ms;
    M.mgr_quit_sent = 0;
    return 0;
}

/* A dead slot's fill claims are released and their waiters woken, so no
 * request waits on a fetch that will never finish. */
static void
master_filltab_reset(int slot)
{
    uint64_t wake[4], one = 1;

    filltab_slot_reset(M.shm.filltab, slot, wake);
    for (unsigned s = 0; s < M.nslots && s < FILLTAB_MAX_SLOTS; s++)
        if ((wake[s / 64] >> (s % 64)) & 1)
            if (write(M.wake_fds[s], &one, sizeof(one)) < 0) { /* full: already pending */ }
}

static void
master_tell_manager(char what)
{
    if (M.mgr_pid && M.mgr_pipe >= 0 && write(M.mgr_pipe, &what, 1) < 0)
        log_warn("cannot reach the cache manager: %s", strerror(errno));
}

static int
master_live_workers(void)
{
    int n = 0;

    for (unsigned i = 0; i < M.nslots; i++)
        n += M.procs[i].pid != 0 && M.procs[i].gen != NULL;
    return n;
}

static void
master_signal_gen(struct gen *g, int sig)
{
    for (unsigned i = 0; i < M.nslots; i++)
        if (M.procs[i].pid && M.procs[i].gen == g)
            kill(M.procs[i].pid, sig);
}

/* Order a generation to drain: stop accepting, finish, exit. */
static void
master_drain_gen(struct gen *g, int64_t deadline_ms)
{
    g->state = GEN_DRAINING;
    g->deadline_ms = deadline_ms;
    for (unsigned i = 0; i < M.nslots; i++)
        if (M.procs[i].pid && M.procs[i].gen == g) {
            if (write(M.procs[i].pipe_w, "q", 1) < 0)
                kill(M.procs[i].pid, SIGQUIT);
        }
}

/* Generation g serves now: its workers start accepting (a worker that
 * misses its 'g' sees the shm generation within a second, at its tick). */
static void
master_signal_go(const struct gen *g)
{
    for (unsigned i = 0; i < M.nslots; i++)
        if (M.procs[i].pid && M.procs[i].gen == g
            && write(M.procs[i].pipe_w, "g", 1) < 0)
            log_warn("worker pid %d: cannot tell it to accept: %s",
                     (int)M.procs[i].pid, strerror(errno));
}

static void
master_gen_release(struct gen *g)
{
    if (g->live > 0 || g->state == GEN_ACTIVE || g->state == GEN_FREE)
        return;
    if (g->conf)
        conf_free(g->conf);
    memset(g, 0, sizeof(*g));
}

static struct gen *
master_gen_new(struct conf *c)
{
    for (int i = 0; i < GEN_MAX; i++)
        if (M.gens[i].state == GEN_FREE) {
            struct gen *g = &M.gens[i];
            g->id = ++M.next_gen;
            g->state = GEN_STARTING;
            g->conf = c;
            g->live = 0;
            g->deadline_ms = now_ms() + START_DEADLINE_MS;
            return g;
        }
    return NULL;
}

static int
master_gen_ready(const struct gen *g)
{
    int ready = 0;

    for (unsigned i = 0; i < M.nslots; i++)
        if (M.procs[i].pid && M.procs[i].gen == g
            && M.shm.slots[i].state == SHM_SLOT_READY)
            ready++;
    return ready == M.nworkers;
}

static void
master_fail_gen(struct gen *g, const char *why)
{
    log_error("reload failed: %s; generation %u keeps serving", why,
              M.active ? M.active->id : 0);
    master_reload_status(0, why);
    g->state = GEN_FAILED;
    master_signal_gen(g, SIGTERM);
    master_gen_release(g);
}

static void
describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
    else
        snprintf(buf, len, "stopped (status %#x)", status);
}

static void
master_reap(void)
{
    int status;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        unsigned i;
        for (i = 0; i < M.nslots; i++)
            if (M.procs[i].pid == pid)
                break;
        if (i == M.nslots)
            continue;   /* not ours (the daemonising parent, say) */

        struct proc *p = &M.procs[i];
        struct gen *g = p->gen;

        if (M.cache_cf)
            cache_slot_reset(M.shm.cache_area, (int)i);
        if (g == NULL) {
            /* the cache manager */
            char how[128];
            describe_status(status, how, sizeof(how));
            if (M.stopping && WIFEXITED(status) && WEXITSTATUS(status) == 0)
                log_info("cache manager (pid %d) %s", (int)pid, how);
            else
                log_error("cache manager (pid %d) %s", (int)pid, how);
            shm_slot_retire(&M.shm, i);
            memset(p, 0, sizeof(*p));
            p->pipe_w = -1;
            if (M.mgr_pipe >= 0)
                close(M.mgr_pipe);
            M.mgr_pipe = -1;
            M.mgr_pid = 0;
            if (!M.stopping)
                M.mgr_respawn_at = now_ms()
                    + (now_ms() - M.mgr_started_ms < QUICK_DEATH_MS ? BACKOFF_MAX_MS : 1);
            continue;
        }
        struct shm_slot *sl = &M.shm.slots[i];
        int idx = p->index;     /* *p is cleared below */
        char how[128];
        int clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        int64_t age = now_ms() - p->started_ms;

        /* Our own SIGTERM (fast stop, a failed generation) can land after
         * the worker left its loop and dropped its handler: that death is
         * what we asked for, not a failure. */
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM
            && (M.stopping == 1 || g->state == GEN_FAILED))
            clean = 1;

        describe_status(status, how, sizeof(how));
        if (clean && (g->state != GEN_ACTIVE || M.stopping))
            log_info("worker %d (pid %d, generation %u) %s", idx, (int)pid, g->id, how);
        else
            log_error("worker %d (pid %d, generation %u) %s%s%s", idx,
                      (int)pid, g->id, how, sl->panic[0] ? ": " : "", sl->panic);

        close(p->pipe_w);
        shm_slot_retire(&M.shm, i);
        master_tell_manager('t');   /* free the dead worker's LMDB reader */
        master_filltab_reset((int)i);
        memset(p, 0, sizeof(*p));
        p->pipe_w = -1;
        g->live--;

        if (M.stopping) {
            master_gen_release(g);
            continue;
        }
        if (g->state == GEN_STARTING) {
            char why[256];
            snprintf(why, sizeof(why), "a worker of generation %u %s before it was ready", g->id, how);
            if (M.active) {
                master_fail_gen(g, why);
            } else {
                log_crit("start failed: %s", why);
                M.failed = 1;
                g->state = GEN_FAILED;
                master_signal_gen(g, SIGTERM);
                M.stopping = 1;
                M.stop_deadline_ms = now_ms() + KILL_GRACE_MS;
            }
            continue;
        }
        if (g->state == GEN_ACTIVE) {
            if (age < QUICK_DEATH_MS) {
                M.backoff_ms[idx] = M.backoff_ms[idx] ? M.backoff_ms[idx] * 2 : BACKOFF_MIN_MS;
                if (M.backoff_ms[idx] > BACKOFF_MAX_MS)
                    M.backoff_ms[idx] = BACKOFF_MAX_MS;
            } else {
                M.backoff_ms[idx] = 0;
            }
            M.respawn_at[idx] = now_ms() + M.backoff_ms[idx];
            M.shm.hdr->worker_restarts++;
            continue;
        }
        master_gen_release(g);
    }
}

static void
master_respawn_due(void)
{
    int64_t now = now_ms();

    if (M.active == NULL || M.stopping)
        return;
    for (int i = 0; i < M.nworkers; i++) {
        if (M.respawn_at[i] && M.respawn_at[i] <= now) {
            M.respawn_at[i] = 0;
            if (master_spawn_worker(M.active, i) == 0)
                log_notice("worker %d respawned (generation %u)", i, M.active->id);
            else
                M.respawn_at[i] = now + BACKOFF_MAX_MS;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Reload */

/* Settings bound at start: a reload logs a change and keeps the old value. */
static void
master_keep_restart_settings(struct conf *nc, const struct conf *oc)
{
    struct conf_records *n = &nc->rec;
    const struct conf_records *o = &oc->rec;
    int ports_changed = n->nports != o->nports;

    /* every field: the listeners are bound once (conf_port is zeroed
     * before it is filled, so memcmp compares the meaning) */
    for (int i = 0; !ports_changed && i < n->nports; i++)
        ports_changed = memcmp(&n->ports[i], &o->ports[i], sizeof(n->ports[i])) != 0;
    if (ports_changed) {
        log_warn("reload: proxy.config.http.server_ports changed: needs a restart; keeping the old ports");
        memcpy(n->ports, o->ports, sizeof(n->ports));
        n->nports = o->nports;
    }
    if (n->workers != o->workers) {
        log_warn("reload: proxy.config.cistern.workers changed: needs a restart; keeping %d", o->workers);
        n->workers = o->workers;
    }
    if (strcmp(n->run_dir, o->run_dir) != 0) {
        log_warn("reload: proxy.config.cistern.run_dir changed: needs a restart; keeping %s", o->run_dir);
        free(n->run_dir);
        n->run_dir = strdup(o->run_dir);
    }
    if (strcmp(n->logfile_dir, o->logfile_dir) != 0) {
        log_warn("reload: proxy.config.log.logfile_dir changed: needs a restart; keeping %s", o->logfile_dir);
        free(n->logfile_dir);
        n->logfile_dir = strdup(o->logfile_dir);
    }
    if (strcmp(n->user_id, o->user_id) != 0) {
        log_warn("reload: proxy.config.admin.user_id changed: needs a restart; keeping %s", o->user_id);
        free(n->user_id);
        n->user_id = strdup(o->user_id);
    }
    int st_changed = nc->storage.nspans != oc->storage.nspans;
    for (int i = 0; !st_changed && i < nc->storage.nspans; i++)
        st_changed = strcmp(nc->storage.spans[i].path, oc->storage.spans[i].path) != 0
                     || nc->storage.spans[i].size != oc->storage.spans[i].size;
    if (st_changed)
        log_warn("reload: storage.config changed: needs a restart; keeping the running store");
    if (n->cache_eviction && o->cache_eviction && strcmp(n->cache_eviction, o->cache_eviction) != 0)
        log_warn("reload: proxy.config.cistern.cache.eviction changed: needs a restart; "
                 "the store keeps %s", o->cache_eviction);
}

static void
master_reload(void)
{
    struct conf_errors e;
    struct conf *nc;
    struct gen *g;
    int live = 0;

    memset(&e, 0, sizeof(e));
    M.reload_errors[0] = '\0';
    log_notice("reload requested (SIGHUP)");
    if (M.active == NULL) {
        log_warn("reload ignored: the first generation is still starting");
        return;
    }
    nc = conf_load(M.confdir, &e);
    for (int i = 0; i < e.nstored; i++) {
        size_t off = strlen(M.reload_errors);
        if (e.is_warn[i])
            log_warn("%s", e.msgs[i]);
        else
            log_error("%s", e.msgs[i]);
        if (!e.is_warn[i] && off < sizeof(M.reload_errors) - 64)
            snprintf(M.reload_errors + off, sizeof(M.reload_errors) - off, "error\t%s\n", e.msgs[i]);
    }
    if (nc == NULL) {
        char why[SHM_RELOAD_MSG_LEN];
        int first = -1;
        for (int i = 0; i < e.nstored && first < 0; i++)
            if (!e.is_warn[i])
                first = i;
        snprintf(why, sizeof(why), "%d error(s) in the configuration%s%s", e.n,
                 first >= 0 ? "; first: " : "", first >= 0 ? e.msgs[first] : "");
        log_error("reload failed: %s; generation %u keeps serving", why, M.active->id);
        master_reload_status(0, why);
        conf_errors_free(&e);
        return;
    }
    conf_errors_free(&e);
    master_keep_restart_settings(nc, M.active->conf);
    for (int i = 0; i < GEN_MAX; i++)
        live += M.gens[i].state != GEN_FREE;
    if (live >= GEN_MAX || (g = master_gen_new(nc)) == NULL) {
        const char *why = "too many generations still draining; try again later";
        log_error("reload failed: %s", why);
        master_reload_status(0, why);
        conf_free(nc);
        return;
    }
    for (int i = 0; i < M.nworkers; i++)
        if (master_spawn_worker(g, i) < 0) {
            master_fail_gen(g, "could not start the new workers");
            return;
        }
    log_info("reload: generation %u starting %d worker(s)", g->id, M.nworkers);
}

/* A STARTING generation that is fully READY takes over. */
static void
master_check_starting(void)
{
    for (int i = 0; i < GEN_MAX; i++) {
        struct gen *g = &M.gens[i];
        if (g->state != GEN_STARTING)
            continue;
        if (M.active && M.active->id > g->id) {
            /* SIGHUPs in a row: a newer generation was ready first and
             * serves; this older one (an older reading of the files) never
             * takes over from it.  Drained now, ready or not: waiting for
             * its slowest worker would let its start deadline, or a ready
             * worker leaving, fail a reload that the newer one made. */
            master_drain_gen(g, now_ms() + (int64_t)g->conf->rec.shutdown_timeout * 1000 + 2000);
            log_notice("reload: generation %u superseded by generation %u before it "
                       "served; draining it", g->id, M.active->id);
        } else if (master_gen_ready(g)) {
            struct gen *old = M.active;
            g->state = GEN_ACTIVE;
            M.active = g;
            /* The switch (worker/worker.c): from this write on, the old
             * generation accepts nothing new; 'g' lets the new one start. */
            M.shm.hdr->generation = g->id;
            master_signal_go(g);
            for (int k = 0; k < M.nworkers; k++)
                M.respawn_at[k] = 0;
            if (old) {
                master_drain_gen(old, now_ms() + (int64_t)old->conf->rec.shutdown_timeout * 1000 + 2000);
                log_notice("reload ok: generation %u serving, generation %u draining", g->id, old->id);
                master_reload_status(1, "configuration reloaded");
            } else {
                char ports[256] = "";
                size_t off = 0;
                for (int p = 0; p < M.lis.nports; p++)
                    off += (size_t)snprintf(ports + off, sizeof(ports) - off, "%s%d",
                                            p ? " " : "", M.lis.port[p]);
                log_notice("cistern %s ready: %d worker(s) on port(s) %s", PACKAGE_VERSION,
                           M.nworkers, ports);
                if (M.ready_fd >= 0) {
                    if (write(M.ready_fd, "R", 1) < 0) { /* parent gone */ }
                    close(M.ready_fd);
                    M.ready_fd = -1;
                }
            }
        } else if (now_ms() >= g->deadline_ms) {
            if (M.active) {
                master_fail_gen(g, "the new workers did not become ready in time");
            } else {
                log_crit("start failed: the workers did not become ready in time");
                M.failed = 1;
                g->state = GEN_FAILED;
                master_signal_gen(g, SIGTERM);
                M.stopping = 1;
                M.stop_deadline_ms = now_ms() + KILL_GRACE_MS;
            }
        }
    }
}

/* ------------------------------------------------------------------ */

static void
master_stop(int graceful)
{
    int64_t now = now_ms();

    if (M.stopping == 1 || (M.stopping == 2 && graceful))
        return;
    M.stopping = graceful ? 2 : 1;
    /* Nothing will accept again: close our copies of the listening
     * sockets (the workers close theirs when they stop accepting), so new
     * clients are refused now instead of waiting in an accept queue until
     * we exit and then being reset.  No worker is forked after this. */
    listen_close(&M.lis);
    if (graceful) {
        int timeout = M.active ? M.active->conf->rec.shutdown_timeout : 30;
        log_notice("graceful stop (SIGQUIT): draining for up to %d s", timeout);
        M.stop_deadline_ms = now + (int64_t)timeout * 1000 + 2000;
        for (int i = 0; i < GEN_MAX; i++)
            if (M.gens[i].state != GEN_FREE && M.gens[i].live)
                master_drain_gen(&M.gens[i], M.stop_deadline_ms);
    } else {
        log_notice("fast stop");
        M.stop_deadline_ms = now + KILL_GRACE_MS;
        for (unsigned i = 0; i < M.nslots; i++)
            if (M.procs[i].pid)
                if (M.procs[i].gen != NULL)     /* the manager goes on 'q' */
                    kill(M.procs[i].pid, SIGTERM);
    }
}

static int
master_live_procs(void)
{
    int n = 0;

    for (unsigned i = 0; i < M.nslots; i++)
        n += M.procs[i].pid != 0;
    return n;
}

static int
master_poll_timeout(void)
{
    int64_t now = now_ms(), next = now + 1000;

    for (int i = 0; i < M.nworkers; i++)
        if (M.respawn_at[i] && M.respawn_at[i] < next)
            next = M.respawn_at[i];
    for (int i = 0; i < GEN_MAX; i++)
        if (M.gens[i].state == GEN_STARTING)
            next = now + 10;    /* watch for READY closely */
    if (M.stopping && M.stop_deadline_ms < next)
        next = M.stop_deadline_ms;
    return next > now ? (int)(next - now) : 0;
}

static void
master_loop(void)
{
    for (;;) {
        struct pollfd pfd[1 + 17];
        char drain[64];
        int n;

        pfd[0] = (struct pollfd){ .fd = sigpipe_fd[0], .events = POLLIN };
        n = 1 + ctl_pollfds(pfd + 1, 17);
        if (poll(pfd, (nfds_t)n, master_poll_timeout()) > 0) {
            if (pfd[0].revents)
                while (read(sigpipe_fd[0], drain, sizeof(drain)) > 0)
                    ;
            ctl_events(pfd + 1, n - 1);
        }
        if (sig_chld) {
            sig_chld = 0;
            master_reap();
        }
        if (sig_term) {
            sig_term = 0;
            master_stop(0);
        }
        if (sig_quit) {
            sig_quit = 0;
            master_stop(1);
        }
        if (sig_usr1) {
            sig_usr1 = 0;
            if (M.active && log_open(M.active->conf->rec.logfile_dir) < 0) {
                log_error("reopening the error log: %s", strerror(errno));
            } else {
                /* before the notice: it tells the workers' reopen is next */
                if (M.active)
                    priv_give_logs(M.active->conf->rec.logfile_dir, 1);
                log_notice("log files reopened");
                /* Workers write the log through their own copy of the
                 * descriptor: each must reopen too.  Workers forked from
                 * now on inherit the new file. */
                for (unsigned i = 0; i < M.nslots; i++)
                    if (M.procs[i].pid)
                        kill(M.procs[i].pid, SIGUSR1);
            }
        }
        if (sig_hup) {
            sig_hup = 0;
            if (!M.stopping)
                master_reload();
        }
        if (M.stopping) {
            /* The manager goes last: it records the clean shutdown once
             * no worker has the store open. */
            if (master_live_workers() == 0 && M.mgr_pid && !M.mgr_quit_sent) {
                master_tell_manager('q');
                M.mgr_quit_sent = 1;
            }
            if (master_live_procs() == 0)
                return;
            if (now_ms() >= M.stop_deadline_ms) {
                log_warn("stop deadline reached: killing %d process(es)", master_live_procs());
                for (unsigned i = 0; i < M.nslots; i++)
                    if (M.procs[i].pid)
                        kill(M.procs[i].pid, SIGKILL);
                M.stop_deadline_ms = now_ms() + 1000;
            }
            continue;
        }
        master_check_starting();
        master_respawn_due();
        if (M.mgr_respawn_at && now_ms() >= M.mgr_respawn_at) {
            M.mgr_respawn_at = 0;
            if (master_spawn_manager() == 0)
                log_notice("cache manager respawned");
            else
                M.mgr_respawn_at = now_ms() + BACKOFF_MAX_MS;
        }
        /* draining generations past their deadline are cut */
        for (int i = 0; i < GEN_MAX; i++)
            if (M.gens[i].state == GEN_DRAINING && M.gens[i].live
                && now_ms() >= M.gens[i].deadline_ms) {
                log_warn("generation %u missed its drain deadline: killing it", M.gens[i].id);
                master_signal_gen(&M.gens[i], SIGKILL);
                M.gens[i].deadline_ms = now_ms() + 1000;
            }
    }
}

/* ------------------------------------------------------------------ */

static int
master_lock(const char *run_dir)
{
    char path[4096];
    int fd;

    snprintf(path, sizeof(path), "%s/cistern.lock", run_dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "cistern: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        char pidpath[4096], buf[32] = "";
        FILE *f;

        snprintf(pidpath, sizeof(pidpath), "%s/cistern.pid", run_dir);
        if ((f = fopen(pidpath, "r")) != NULL) {
            if (fgets(buf, sizeof(buf), f) == NULL)
                buf[0] = '\0';
            fclose(f);
            buf[strcspn(buf, "\n")] = '\0';
        }
        fprintf(stderr, "cistern: another cistern is already running with run directory %s%s%s%s\n",
                run_dir, buf[0] ? " (pid " : "", buf, buf[0] ? ")" : "");
        close(fd);
        return -1;
    }
    return fd;
}

/* Detach; the parent exits only when the workers are READY (status 0) or
 * the start failed (status 1), so an init script learns the truth. */
static int
master_daemonize(void)
{
    int p[2];
    pid_t pid;
    char b;

    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid > 0) {
        close(p[1]);
        ssize_t n;
        do {
            n = read(p[0], &b, 1);
        } while (n < 0 && errno == EINTR);
        _exit(n == 1 && b == 'R' ? 0 : 1);
    }
    close(p[0]);
    M.ready_fd = p[1];
    setsid();
    if (chdir("/") < 0) { /* harmless */ }
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, STDIN_FILENO);
        dup2(nul, STDOUT_FILENO);
        dup2(nul, STDERR_FILENO);
        if (nul > 2)
            close(nul);
    }
    log_set_stderr(0);
    return 0;
}

/* The migration report `cistern -t` prints after the errors and warnings:
 * what each line of the directory became (conf_note()), by kind, then how
 * many errors refused it.  Paths are shown relative to the directory. */
static void
master_print_report(const struct conf_errors *e, const char *confdir,
                    FILE *out)
{
    static const char *const head[CONF_NOTE_KINDS] = {
        [CONF_NOTE_USED] = "understood (Cistern does what these ask)",
        [CONF_NOTE_MATCHES] = "matches (these ask for what Cistern already does)",
        [CONF_NOTE_INTERNAL] = "ignored (ATS-internal tuning; changes no "
                               "access, routing or caching)",
        [CONF_NOTE_UNKNOWN] = "unknown (not known at all; ignored, warned above)",
    };
    char  *real = realpath(confdir, NULL);
    size_t rlen = real != NULL ? strlen(real) : 0;

    fprintf(out, "Migration report for %s:\n", real != NULL ? real : confdir);
    for (int k = 0; k < CONF_NOTE_KINDS; k++) {
        int n = 0;

        for (int i = 0; i < e->nnotes; i++)
            n += e->notes[i].kind == (enum conf_note_kind)k;
        fprintf(out, "  %s: %d\n", head[k], n);
        for (int i = 0; i < e->nnotes; i++) {
            const char *t = e->notes[i].text;

            if (e->notes[i].kind != (enum conf_note_kind)k)
                continue;
            if (rlen > 0 && strncmp(t, real, rlen) == 0 && t[rlen] == '/')
                t += rlen + 1;
            fprintf(out, "    %s\n", t);
        }
    }
    fprintf(out, "  refused: %d error%s%s\n", e->n, e->n == 1 ? "" : "s",
            e->n > 0 ? " (listed above)" : "");
    free(real);
}

int
master_check(const char *confdir)
{
    struct conf_errors e;
    struct conf *c;

    memset(&e, 0, sizeof(e));
    c = conf_load(confdir, &e);
    master_print_errors(&e);
    fflush(stderr);
    master_print_report(&e, confdir, stdout);
    fflush(stdout);
    conf_errors_free(&e);
    if (c == NULL) {
        fprintf(stderr, "cistern: configuration %s has errors\n", confdir);
        return 1;
    }
    printf("cistern: configuration %s is ok\n", c->confdir);
    conf_free(c);
    return 0;
}

/* cache/ logs through this (cache_set_log): its lines go to the error log. */
static void
master_cache_log(enum cache_log_level level, const char *line)
{
    log_write(level == CACHE_LOG_ERROR ? LOG_LVL_ERROR
              : level == CACHE_LOG_WARN ? LOG_LVL_WARN : LOG_LVL_INFO, "%s", line);
}

/* master_run, 1: load the configuration and take the run directory (log
 * level, directories, the lock).  Returns the config, or NULL (reported on
 * stderr; nothing left to undo). */
static struct conf *
master_load(const char *confdir)
{
    struct conf_errors e;
    struct conf *c;

    memset(&e, 0, sizeof(e));
    M.confdir = confdir;
    c = conf_load(confdir, &e);
    master_print_errors(&e);
    conf_errors_free(&e);
    if (c == NULL) {
        fprintf(stderr, "cistern: not started: configuration %s has errors\n", confdir);
        return NULL;
    }
    /* Reloads must find the same directory after we chdir("/") to
     * detach: keep its absolute form (conf_load resolved it). */
    M.confdir_abs = strdup(c->confdir);
    if (M.confdir_abs)
        M.confdir = M.confdir_abs;
    if (c->rec.error_log_level) {
        int lvl = log_level_parse(c->rec.error_log_level);
        if (lvl >= 0)
            log_set_level((enum log_level)lvl);
    }
    if (mkdir_p(c->rec.run_dir) < 0 || mkdir_p(c->rec.logfile_dir) < 0) {
        fprintf(stderr, "cistern: cannot create %s or %s: %s\n", c->rec.run_dir,
                c->rec.logfile_dir, strerror(errno));
        conf_free(c);
        return NULL;
    }
    M.run_dir = strdup(c->rec.run_dir);
    if ((M.lock_fd = master_lock(c->rec.run_dir)) < 0) {
        conf_free(c);
        free(M.run_dir);
        return NULL;
    }
    return c;
}

/* master_run, 2: the error log, privileges and the listening sockets.
 * Returns 0, or -1 (reported; the caller undoes from out_conf). */
static int
master_open_outside(const struct conf *c)
{
    char err[512] = "";
    int ncpu;

    if (log_open(c->rec.logfile_dir) < 0) {
        fprintf(stderr, "cistern: cannot open %s/error.log: %s\n", c->rec.logfile_dir, strerror(errno));
        return -1;
    }
    cache_set_log(master_cache_log);
    if (priv_init(c->rec.user_id, err, sizeof(err)) < 0
        || priv_give_logs(c->rec.logfile_dir, 0) < 0) {
        fprintf(stderr, "cistern: not started: %s\n", err[0] ? err : "cannot set up the log directory");
        log_error("not started: %s", err[0] ? err : "cannot set up the log directory");
        return -1;
    }
    ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    M.nworkers = c->rec.workers > 0 ? c->rec.workers : (ncpu > 0 ? ncpu : 1);
    if (M.nworkers > 256)
        M.nworkers = 256;
    if (listen_open(&M.lis, &c->rec, M.nworkers, err, sizeof(err)) < 0) {
        fprintf(stderr, "cistern: not started: %s\n", err);
        log_error("not started: %s", err);
        return -1;
    }
    M.nslots = (unsigned)(M.nworkers * GEN_MAX + 1);
    return 0;
}

/* master_run, 3: the shared memory, with the cache's area laid out and the
 * store prepared when storage.config names one (a cache that cannot be set
 * up is logged and left out).  Returns 0, or -1 (reported; the caller
 * undoes from out_listen). */
static int
master_open_shm(const struct conf *c)
{
    char err[512] = "";
    size_t cache_len = 0;

    if (c->storage.nspans > 0) {
        memset(&M.ccf, 0, sizeof(M.ccf));
        M.ccf.dir = strdup(c->storage.spans[0].path);
        M.ccf.size = c->storage.spans[0].size;
        M.ccf.max_doc_size = c->rec.max_doc_size;
        M.ccf.eviction = c->rec.cache_eviction && strcmp(c->rec.cache_eviction, "fifo") == 0
                         ? CACHE_EVICT_FIFO : CACHE_EVICT_S3FIFO;
        cache_len = cache_shm_size(&M.ccf, (int)M.nslots);
        if (cache_len == 0)
            log_error("cache disabled: the store of %s is too small", M.ccf.dir);
    } else {
        log_notice("no storage.config spans: running as a plain proxy, without a cache");
    }
    if (shm_create(&M.shm, M.nslots, cache_len) < 0) {
        fprintf(stderr, "cistern: shared memory: %s\n", strerror(errno));
        return -1;
    }
    if (cache_len) {
        /* The store is given to the user before anything is opened in
         * it, and the check runs as the user (manager_prepare): root never
         * opens a file in a directory the user could plant a link in. */
        if (cache_shm_init(M.shm.cache_area, cache_len, &M.ccf, (int)M.nslots) != CACHE_OK)
            log_error("cache disabled: cannot lay out its shared memory");
        else if (mkdir(M.ccf.dir, 0700) < 0 && errno != EEXIST)
            log_error("cache disabled: mkdir %s: %s", M.ccf.dir, strerror(errno));
        else if (priv_give_store(M.ccf.dir, err, sizeof(err)) < 0)
            log_error("cache disabled: store %s: %s", M.ccf.dir, err);
        else if (manager_prepare(&M.ccf, err, sizeof(err)) < 0)
            log_error("cache disabled: store %s: %s", M.ccf.dir, err);
        else
            M.cache_cf = &M.ccf;
    }
    return 0;
}

/* master_run, 4: the per-slot tables and the signal handlers.  Returns 0,
 * or -1 (reported; the caller undoes from out_shm). */
static int
master_open_procs(void)
{
    M.procs = calloc(M.nslots, sizeof(*M.procs));
    M.wake_fds = calloc(M.nslots, sizeof(*M.wake_fds));
    for (unsigned i = 0; M.wake_fds && i < M.nslots; i++)
        if ((M.wake_fds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
            fprintf(stderr, "cistern: eventfd: %s\n", strerror(errno));
            return -1;
        }
    if (M.procs == NULL || master_signals_install() < 0) {
        fprintf(stderr, "cistern: cannot set up the master: %s\n", strerror(errno));
        return -1;
    }
    for (unsigned i = 0; i < M.nslots; i++)
        M.procs[i].pipe_w = -1;
    return 0;
}

/* A serving worker's end of its pair, for ctl.c (round robin). */
static int
master_worker_sock(void)
{
    static unsigned next;

    for (unsigned k = 0; k < M.nslots; k++) {
        unsigned i = (next + k) % M.nslots;
        if (M.procs[i].pid && M.active && M.procs[i].gen == M.active && M.procs[i].pipe_w >= 0
            && M.shm.slots[i].state == SHM_SLOT_READY) {
            next = i + 1;
            return M.procs[i].pipe_w;
        }
    }
    return -1;
}

/* master_run, 5: run/cistern.pid and run/ports.  Returns 0, or -1 when the
 * ports file (what scripts wait for) cannot be written. */
static int
master_write_run_files(const struct conf *c)
{
    char text[512];

    snprintf(text, sizeof(text), "%d\n", (int)getpid());
    if (write_file_atomic(c->rec.run_dir, "cistern.pid", text) < 0)
        log_warn("cannot write %s/cistern.pid: %s", c->rec.run_dir, strerror(errno));
    size_t off = 0;
    for (int p = 0; p < M.lis.nports; p++)
        off += (size_t)snprintf(text + off, sizeof(text) - off, "%d\n", M.lis.port[p]);
    if (write_file_atomic(c->rec.run_dir, "ports", text) < 0) {
        log_crit("cannot write %s/ports: %s", c->rec.run_dir, strerror(errno));
        return -1;
    }
    return 0;
}

int
master_run(const char *confdir, int foreground)
{
    struct conf *c;
    struct gen *g;
    int rc = 1;

    if ((c = master_load(confdir)) == NULL)
        return 1;
    if (master_open_outside(c) < 0)
        goto out_conf;
    if (master_open_shm(c) < 0)
        goto out_listen;
    if (master_open_procs() < 0)
        goto out_shm;
    if (!foreground && master_daemonize() < 0) {
        fprintf(stderr, "cistern: cannot daemonise: %s\n", strerror(errno));
        goto out_shm;
    }
    log_set_stderr(foreground);
    if (master_write_run_files(c) < 0)
        goto out_files;
    M.ctl.shm = &M.shm;
    M.ctl.confdir = M.confdir;
    M.ctl.last_result = "none";
    M.ctl.reload = master_reload;
    M.ctl.worker_sock = master_worker_sock;
    if (ctl_open(c->rec.run_dir, &M.ctl) < 0)
        log_warn("no control socket: `cistern ctl` cannot reach this instance");

    g = master_gen_new(c);
    c = NULL;       /* owned by the generation now */
    if (M.cache_cf && master_spawn_manager() < 0)
        log_error("cannot start the cache manager; the store is not synced");
    for (int i = 0; i < M.nworkers; i++)
        if (master_spawn_worker(g, i) < 0) {
            M.failed = 1;
            M.stopping = 1;
            M.stop_deadline_ms = now_ms() + KILL_GRACE_MS;
            master_signal_gen(g, SIGTERM);
            break;
        }
    master_loop();
    rc = M.failed ? 1 : 0;
    log_notice("cistern stopped");

out_files:
    ctl_close(1);
    remove_run_file("ports");
    remove_run_file("cistern.pid");
    for (int i = 0; i < GEN_MAX; i++) {
        if (M.gens[i].conf)
            conf_free(M.gens[i].conf);
        memset(&M.gens[i], 0, sizeof(M.gens[i]));
    }
out_shm:
    for (unsigned i = 0; M.wake_fds && i < M.nslots; i++)
        if (M.wake_fds[i] > 0)
            close(M.wake_fds[i]);
    free(M.wake_fds);
    M.wake_fds = NULL;
    free(M.procs);
    M.procs = NULL;
    shm_destroy(&M.shm);
out_listen:
    listen_close(&M.lis);
out_conf:
    if (c)
        conf_free(c);
    if (M.ready_fd >= 0)
        close(M.ready_fd);
    close(M.lock_fd);
    free(M.run_dir);
    free((char *)M.ccf.dir);
    free(M.confdir_abs);
    log_close();
    return rc;
}

/* ------------------------------------------------------------------ */

static int
read_reload_seq(const char *run_dir, unsigned *seq, char *line, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/reload.status", run_dir);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    if (fgets(line, (int)len, f) == NULL) {
        fclose(f);
        return -1;
    }
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    *seq = (unsigned)strtoul(line, NULL, 10);
    return 0;
}

int
master_send(const char *confdir, const char *action)
{
    struct conf_errors e;
    struct conf_records rec;
    struct conf *c;
    char path[4096], buf[64], line[SHM_RELOAD_MSG_LEN + 64];
    const char *run_dir;
    unsigned seq0 = 0, seq;
    FILE *f;
    int sig;
    long pid;

    if (strcmp(action, "reload") == 0)
        sig = SIGHUP;
    else if (strcmp(action, "stop") == 0)
        sig = SIGTERM;
    else if (strcmp(action, "quit") == 0)
        sig = SIGQUIT;
    else if (strcmp(action, "reopen") == 0)
        sig = SIGUSR1;
    else {
        fprintf(stderr, "cistern: -s takes reload, stop, quit or reopen, not \"%s\"\n", action);
        return 2;
    }

    memset(&e, 0, sizeof(e));
    memset(&rec, 0, sizeof(rec));
    c = conf_load(confdir, &e);
    if (c == NULL && sig == SIGHUP) {
        /* Same check as the reload itself: refuse before signalling. */
        master_print_errors(&e);
        conf_errors_free(&e);
        fprintf(stderr, "cistern: reload refused: configuration %s has errors; the running configuration stays\n", confdir);
        return 1;
    }
    if (c == NULL) {
        /* Stopping must work even when the config on disk is broken. */
        char rp[4096];
        conf_records_defaults(&rec);
        snprintf(rp, sizeof(rp), "%s/records.config", confdir);
        conf_errors_free(&e);
        memset(&e, 0, sizeof(e));
        conf_records_parse(&rec, rp, confdir, &e);
        run_dir = rec.run_dir;
    } else {
        run_dir = c->rec.run_dir;
    }
    conf_errors_free(&e);

    snprintf(path, sizeof(path), "%s/cistern.pid", run_dir);
    f = fopen(path, "r");
    if (f == NULL || fgets(buf, sizeof(buf), f) == NULL
        || (pid = strtol(buf, NULL, 10)) <= 0 || kill((pid_t)pid, 0) < 0) {
        fprintf(stderr, "cistern: no running master (pid file %s %s)\n", path,
                f ? "is stale" : "is missing");
        if (f)
            fclose(f);
        if (c)
            conf_free(c);
        else
            conf_records_free(&rec);
        return 1;
    }
    fclose(f);
    if (sig == SIGHUP)
        read_reload_seq(run_dir, &seq0, line, sizeof(line));
    if (kill((pid_t)pid, sig) < 0) {
        fprintf(stderr, "cistern: cannot signal pid %ld: %s\n", pid, strerror(errno));
        if (c)
            conf_free(c);
        else
            conf_records_free(&rec);
        return 1;
    }
    int rc = 0;
    if (sig == SIGHUP) {
        /* Wait for the master's verdict: new workers ready, or why not. */
        struct timespec ts = { 0, 50 * 1000000 };
        int waited;
        rc = 1;
        for (waited = 0; waited < 15000; waited += 50) {
            if (read_reload_seq(run_dir, &seq, line, sizeof(line)) == 0 && seq != seq0) {
                char *res = strchr(line, ' ');
                res = res ? res + 1 : line;
                if (strncmp(res, "ok", 2) == 0) {
                    printf("cistern: reload ok\n");
                    rc = 0;
                } else {
                    fprintf(stderr, "cistern: reload %s\n", res);
                }
                break;
            }
            nanosleep(&ts, NULL);
        }
        if (waited >= 15000)
            fprintf(stderr, "cistern: sent SIGHUP to pid %ld, but no reload result within 15 s\n", pid);
    }
    if (c)
        conf_free(c);
    else
        conf_records_free(&rec);
    return rc;
}
