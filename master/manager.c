/*
 * master/manager.c: the process plumbing around the store's helpers.
 *
 * The master process never opens LMDB itself (an env must not cross fork,
 * and the master must stay simple enough never to die): every LMDB call is
 * in cache/, made by children the master forks.  This file only starts
 * them; what they do is cache/'s:
 *
 *  - the prepare child, short-lived, run once before the workers start:
 *    drops privileges, runs cache_store_prepare() and exits with its
 *    verdict (the reason on a pipe);
 *  - the cache manager, one long-lived process in the last shm slot:
 *    manager_main() ignores the stop signals (the master decides when it
 *    stops), asks for SIGKILL when the master dies, then runs the body,
 *    cache_manager_run() in cache/manager.c.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "master/master.h"

int
manager_prepare(const struct cache_conf *cf, char *err, size_t errlen)
{
    int p[2], status;
    pid_t pid;
    ssize_t n;

    if (pipe(p) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        char msg[512] = "";
        close(p[0]);
        /* as the user that will own the store, never as root */
        if (priv_drop("store check") < 0)
            _exit(1);
        int rc = cache_store_prepare(cf, msg, sizeof(msg));
        if (rc != CACHE_OK && write(p[1], msg, strlen(msg)) < 0) {
            /* the master sees a failure without a reason */
        }
        close(p[1]);
        _exit(rc == CACHE_OK ? 0 : 1);
    }
    close(p[1]);
    err[0] = '\0';
    do {
        n = read(p[0], err, errlen - 1);
    } while (n < 0 && errno == EINTR);
    err[n > 0 ? n : 0] = '\0';
    close(p[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (err[0] == '\0')
        snprintf(err, errlen, "the store check failed (status %#x)", status);
    return -1;
}

int
manager_main(const struct cache_conf *cf, void *shm_area, int slot, int pipe_r)
{
    /* Ctrl-C reaches the whole process group: the master decides when the
     * manager stops (after the workers), not the terminal. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    return cache_manager_run(cf, shm_area, slot, pipe_r);
}
