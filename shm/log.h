/*
 * shm/log.h: the error log, shared by every process.
 *
 * It lives in shm/ (the layer of what processes share) because the master
 * and every worker write to the same file; cache/ does not use it (the cache
 * logs through the callback it is given, cache_set_log()).  Who opens it:
 * the master, with log_open() after reading records.config; workers only
 * write to the descriptor they inherit across fork.
 *
 * One line per event: "2026-11-30T03:16:16.123Z [level] [pid N] message".
 * The master opens the file (proxy.config.log.logfile_dir/error.log) and
 * owns it; workers inherit the descriptor and write whole lines with one
 * write(2) on an O_APPEND file, so lines from many processes never
 * interleave.  Before the file is open (and with -f, in addition) lines go
 * to stderr.  SIGUSR1 makes the master reopen the file; workers pick up the
 * new descriptor through log_reopen_fd() (dup2 onto the same number).
 */
#ifndef CISTERN_LOG_H
#define CISTERN_LOG_H

enum log_level {
    LOG_LVL_DEBUG = 0,
    LOG_LVL_INFO,
    LOG_LVL_NOTICE,
    LOG_LVL_WARN,
    LOG_LVL_ERROR,
    LOG_LVL_CRIT,
};

/* Write one line at `level` (dropped when below the configured level). */
void log_write(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...)  log_write(LOG_LVL_DEBUG, __VA_ARGS__)
#define log_info(...)   log_write(LOG_LVL_INFO, __VA_ARGS__)
#define log_notice(...) log_write(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_warn(...)   log_write(LOG_LVL_WARN, __VA_ARGS__)
#define log_error(...)  log_write(LOG_LVL_ERROR, __VA_ARGS__)
#define log_crit(...)   log_write(LOG_LVL_CRIT, __VA_ARGS__)

/* Open (or reopen) dir/error.log.  Returns 0, or -1 with errno set (the old
 * descriptor, if any, stays in use). */
int  log_open(const char *dir);
/* Also copy every line to stderr (foreground mode / before daemonising). */
void log_set_stderr(int on);
void log_set_level(enum log_level level);
/* Parse "debug|info|notice|warn|error|crit"; -1 when unknown. */
int  log_level_parse(const char *name);
/* The descriptor in use for the file, or -1. */
int  log_fd(void);
void log_close(void);

#endif /* CISTERN_LOG_H */
