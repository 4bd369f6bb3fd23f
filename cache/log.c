/*
 * cache/log.c: the cache's only way to say something.
 *
 * cache/ sits below the daemon's error log (shm/log.c) and must not call
 * it: each line is formatted here and handed to the callback the daemon
 * gave to cache_set_log(); with none, the line is dropped.  errno is kept,
 * so a caller may log between a failing call and reading errno.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "cache/cache-int.h"

static cache_log_fn cache_log_cb;

void
cache_set_log(cache_log_fn fn)
{
    cache_log_cb = fn;
}

void
cache_log(enum cache_log_level level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int saved = errno;

    if (cache_log_cb == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    cache_log_cb(level, line);
    errno = saved;
}
