/*
 * master/manager.c: the store's helpers outside the master.
 *
 * The master never opens LMDB (an env must not cross fork, and the master
 * must stay simple enough never to die).  Two kinds of child do it for
 * the master:
 *
 *  - the prepare child, short-lived, run once before the workers start:
 *    creates, checks or repairs the store (cache_store_prepare) and exits
 *    with its verdict;
 *  - the cache manager, one long-lived process in the last shm slot:
 *    cache_manager_tick() once a second (LMDB sync, reader check, index
 *    eviction at the high-water mark, sweep of lapped entries), and at
 *    once when the master reaps a worker ('t' on its pipe, so a dead
 *    worker's LMDB reader slot is freed promptly).  On 'q' it marks the
 *    clean shutdown (the master sends it only after every worker has
 *    exited, so it is the last process with the store open) and exits.
 *    EOF on the pipe means the master died: exit without the marker, so
 *    the next start verifies the index.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "shm/log.h"
#include "master/master.h"

#define MANAGER_TICK_MS 1000

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
    char err[512], b[16];
    struct cache *c;
    int quit = 0;

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
    c = cache_open(cf, shm_area, slot, err, sizeof(err));
    if (c == NULL) {
        log_error("cache manager: cannot open the store: %s", err);
        return 1;
    }
    while (!quit) {
        struct pollfd pfd = { .fd = pipe_r, .events = POLLIN };
        int r = poll(&pfd, 1, MANAGER_TICK_MS);

        if (r > 0) {
            ssize_t n = read(pipe_r, b, sizeof(b));
            if (n == 0) {
                log_warn("cache manager: the master went away; exiting");
                cache_close(c);
                return 1;
            }
            for (ssize_t i = 0; i < n; i++)
                if (b[i] == 'q')
                    quit = 1;
        }
        if (cache_manager_tick(c) < 0)
            log_warn("cache manager: housekeeping failed this round");
    }
    if (cache_mark_clean_shutdown(c) != CACHE_OK)
        log_warn("cache manager: could not record a clean shutdown");
    cache_close(c);
    return 0;
}
