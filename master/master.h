/*
 * master/master.h: the master process (config, sockets, signals,
 * supervision).  It never touches traffic, and never opens LMDB: it lays
 * out the cache's shared memory (cache_shm_init) and resets a dead child's
 * slot (cache_slot_reset), but the store itself is opened only by the
 * children it forks (the store check, the cache manager, the workers).
 */
#ifndef CISTERN_MASTER_H
#define CISTERN_MASTER_H

#include "conf/conf.h"

/* Listening sockets: one SO_REUSEPORT socket per (port, worker index),
 * opened once and kept for the master's whole life (reloads reuse them). */
struct listeners {
    int  nports;
    int  nworkers;
    int  port[CONF_MAX_PORTS];        /* actual port numbers */
    int *fd;                          /* [port * nworkers + index] */
};

/* Probe, bind and listen.  Returns 0, or -1 with a message in err. */
int  listen_open(struct listeners *l, const struct conf_records *rec,
                 int nworkers, char *err, size_t errlen);
void listen_close(struct listeners *l);
/* The fds of worker `index`, one per port, into out[nports]. */
void listen_fds_for(const struct listeners *l, int index, int *out);

struct cache_conf;
/* manager.c: run cache_store_prepare() in a short-lived child.  Returns 0,
 * or -1 with the reason in err. */
int manager_prepare(const struct cache_conf *cf, char *err, size_t errlen);
/* The cache manager process: its signals, then cache_manager_run()
 * (cache/manager.c); returns its exit status. */
int manager_main(const struct cache_conf *cf, void *shm_area, int slot,
                 int pipe_r);

/* priv.c: privilege drop (proxy.config.admin.user_id).
 * priv_init: resolve the user once, in the master; decides whether
 *   children drop (started as root, user not "#-1").  Returns 0, or -1
 *   with the reason in err (unknown user).
 * priv_drop: in a fresh child, before it opens anything: setgroups,
 *   setgid, setuid, verified.  Returns 0, or -1 (logged: exit at once).
 * priv_give_logs / priv_give_store: chown the log directory (and its
 *   *.log files) / the store directory to the user, logged unless quiet;
 *   the store must then be usable by the user (-1 with err otherwise).
 * All are no-ops when children do not drop (priv_dropping() == 0). */
int  priv_init(const char *user_id, char *err, size_t errlen);
int  priv_dropping(void);
int  priv_drop(const char *who);
int  priv_give_logs(const char *dir, int quiet);
int  priv_give_store(const char *dir, char *err, size_t errlen);

/* ctl.c: the control socket (the server side) and `cistern ctl`. */
struct shm;
struct pollfd;
struct ctl_ops {
    struct shm *shm;
    const char *confdir;
    const char *last_result;          /* "ok", "failed" or "none" */
    void      (*reload)(void);        /* as SIGHUP; the verdict comes to
                                         ctl_reload_done */
    int       (*worker_sock)(void);   /* a serving worker's pair, or -1 */
};
int  ctl_open(const char *run_dir, const struct ctl_ops *ops);
/* remove: unlink the socket (the master leaving; a child only closes) */
void ctl_close(int remove);
int  ctl_pollfds(struct pollfd *p, int max);
void ctl_events(const struct pollfd *p, int n);
void ctl_reload_done(int ok, const char *msg, const char *errors);
/* `cistern ctl ...` (argv[0] is "ctl"): the exit status */
int  ctl_main(int argc, char **argv);
/* ctlcli.c: one request on the socket; the answer's code (3: unreachable) */
int  ctl_call_top(const char *sock, const char *line, char **ans);
/* top.c: `cistern ctl top [-n FRAMES]` */
int  ctl_top(const char *sock, int frames);

/* Print every message of *e to stderr ("file:line: message"). */
void master_print_errors(const struct conf_errors *e);

/* `cistern [-f]`: run the master.  Returns the process exit status. */
int master_run(const char *confdir, int foreground);

/* `cistern -s ACTION`: signal the running master through its pid file.
 * Returns the exit status (0 sent, 1 no master / bad config, 2 usage). */
int master_send(const char *confdir, const char *action);

/* `cistern -t`: check the configuration through the reload code path. */
int master_check(const char *confdir);

#endif /* CISTERN_MASTER_H */
