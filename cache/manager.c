/*
 * cache/manager.c: the cache manager's body, the store's one long-lived
 * housekeeper.
 *
 * The master forks the manager into the last shm slot (master/manager.c
 * does the process plumbing: signals, privileges, parent-death signal) and
 * then calls cache_manager_run(), which never returns until the manager
 * should exit:
 *   - cache_manager_tick() once a second (LMDB sync, reader check, index
 *     eviction at the high-water mark, sweep of lapped entries), and at
 *     once when the master writes 't' on the pipe (it has reaped a worker,
 *     whose LMDB reader slot is then freed promptly);
 *   - on 'q' it marks the clean shutdown (the master sends it only after
 *     every worker has exited, so the manager is the last process with the
 *     store open) and returns 0;
 *   - EOF on the pipe means the master died: return 1 without the marker,
 *     so the next start verifies the index.
 * Logs through cache_log (cache_set_log), like the rest of cache/.
 */
#include "config.h"

#include <assert.h>
#include <poll.h>
#include <unistd.h>

#include "cache/cache-int.h"

#define MANAGER_TICK_MS 1000

/* Wait up to one tick for the master's word.  Returns 1 on 'q', -1 when
 * the master went away, 0 otherwise. */
static int
manager_wait(int pipe_r)
{
    struct pollfd pfd = { .fd = pipe_r, .events = POLLIN };
    char b[16];
    int quit = 0;

    if (poll(&pfd, 1, MANAGER_TICK_MS) <= 0)
        return 0;
    ssize_t n = read(pipe_r, b, sizeof(b));
    if (n == 0)
        return -1;
    for (ssize_t i = 0; i < n; i++)
        if (b[i] == 'q')
            quit = 1;
    return quit;
}

int
cache_manager_run(const struct cache_conf *cf, void *shm_area, int slot, int pipe_r)
{
    char err[512];
    struct cache *c;
    int quit = 0;

    c = cache_open(cf, shm_area, slot, err, sizeof(err));
    if (c == NULL) {
        cache_log_error("cache manager: cannot open the store: %s", err);
        return 1;
    }
    while (!quit) {
        quit = manager_wait(pipe_r);
        if (quit < 0) {
            cache_log_warn("cache manager: the master went away; exiting");
            cache_close(c);
            return 1;
        }
        if (cache_manager_tick(c) < 0)
            cache_log_warn("cache manager: housekeeping failed this round");
    }
    if (cache_mark_clean_shutdown(c) != CACHE_OK)
        cache_log_warn("cache manager: could not record a clean shutdown");
    cache_close(c);
    return 0;
}

/*
 * See cache.h.
 */
int
cache_manager_tick(struct cache *c)
{
    int dead = 0, rc, removed = 0;

    assert(c && c->magic == CACHE_MAGIC);
    if ((rc = mdb_env_sync(c->env, 1)) != 0)
        cache_log_error("cache: index sync: %s", mdb_strerror(rc));
    if ((rc = mdb_reader_check(c->env, &dead)) != 0)
        cache_log_error("cache: mdb_reader_check: %s", mdb_strerror(rc));
    else if (dead > 0)
        cache_log_info("cache: cleared %d stale index reader slot(s)", dead);
    rc = cache_index_highwater(c);
    if (rc > 0)
        removed += rc;
    rc = cache_index_sweep(c, 4096);
    if (rc > 0)
        removed += rc;
    cache_evict_ahead(c);       /* normally done by the process that moved the head */
    if (cache_index_save_ring(c) != CACHE_OK)
        return CACHE_ERROR;
    return removed;
}
