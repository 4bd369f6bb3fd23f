/*
 * shm/log.c: the error log (opened by the master, inherited by workers).
 *
 * Every line is formatted into a stack buffer and written with one write(2)
 * to an O_APPEND descriptor, so lines from the master and all workers,
 * which share the descriptor across fork, never interleave or tear.  Lines
 * longer than the buffer are truncated (marked with "..."), never split.
 *
 * Reopen (SIGUSR1) opens the file anew and dup2()s it onto the descriptor
 * number already in use, so children that inherited that number write to
 * the new file without being told.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "shm/log.h"

#define LOG_LINE_MAX 2048

static int log_file_fd = -1;
static int log_to_stderr = 1;
static enum log_level log_min = LOG_LVL_INFO;

static const char *const log_names[] = {
    "debug", "info", "notice", "warn", "error", "crit",
};

int
log_level_parse(const char *name)
{
    for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++)
        if (strcasecmp(name, log_names[i]) == 0)
            return (int)i;
    return -1;
}

void
log_set_level(enum log_level level)
{
    log_min = level;
}

void
log_set_stderr(int on)
{
    log_to_stderr = on;
}

int
log_fd(void)
{
    return log_file_fd;
}

int
log_open(const char *dir)
{
    char path[4096];
    int fd;

    if (snprintf(path, sizeof(path), "%s/error.log", dir) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* Root reopens this in a directory the user may own: there, never
     * through a link the user planted (a symlink or a hard link to a file
     * of root's), nor into anything but a plain file.  In a directory only
     * root can write, links are the administrator's own (error.log ->
     * /dev/stdout in a container) and are followed.  O_NONBLOCK: a FIFO
     * put in its place must not block the master in open(2). */
    struct stat ds, st;
    int trusted = geteuid() != 0
                  || (stat(dir, &ds) == 0 && ds.st_uid == 0 && !(ds.st_mode & 022));
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK
                    | (trusted ? 0 : O_NOFOLLOW), 0644);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0
        || (!trusted && (!S_ISREG(st.st_mode) || st.st_nlink != 1))
        || fcntl(fd, F_SETFL, O_WRONLY | O_APPEND) < 0) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    if (log_file_fd < 0) {
        log_file_fd = fd;
        return 0;
    }
    /* Keep the descriptor number: children inherited it. */
    if (dup3(fd, log_file_fd, O_CLOEXEC) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    close(fd);
    return 0;
}

void
log_close(void)
{
    if (log_file_fd >= 0)
        close(log_file_fd);
    log_file_fd = -1;
}

void
log_write(enum log_level level, const char *fmt, ...)
{
    char line[LOG_LINE_MAX];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    int n, m;
    int saved = errno;

    if (level < log_min)
        return;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = snprintf(line, sizeof(line),
                 "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ [%s] [pid %d] ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                 log_names[level], (int)getpid());
    va_start(ap, fmt);
    m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m;
    if (n > (int)sizeof(line) - 2) {
        n = (int)sizeof(line) - 2;
        memcpy(line + n - 3, "...", 3);
    }
    line[n++] = '\n';
    /* One write per line per destination; a short write to a log is not
     * worth retrying at the cost of interleaving. */
    if (log_file_fd >= 0 && write(log_file_fd, line, (size_t)n) < 0) {
        /* nothing sensible to do: the log itself failed */
    }
    if (log_to_stderr || log_file_fd < 0) {
        if (write(STDERR_FILENO, line, (size_t)n) < 0) {
            /* as above */
        }
    }
    errno = saved;
}
