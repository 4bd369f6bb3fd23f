/*
 * master/priv.c: privilege drop (proxy.config.admin.user_id).
 *
 * Started as root, the master keeps root for itself: it binds the ports,
 * opens the error log, writes the pid, lock and ports files, creates the
 * shared region and has the store prepared.  Every child that touches
 * traffic or the store (workers, the cache manager) drops to the configured
 * user right after fork(), before it opens anything, so a compromised
 * worker holds no more than that user's rights plus the descriptors it
 * inherited.  The short-lived store-prepare child stays root: it only
 * creates and checks files, and the master then hands them over.
 *
 * What the user must be able to write, it is given (chown), and the log
 * says so:
 *  - the store directory and everything in it (LMDB's files, the content
 *    file): workers and the manager open them after the drop;
 *  - the log directory and its *.log files: workers reopen the error log
 *    themselves on SIGUSR1 (log/rotate), and create their own log files.
 * The master re-chowns the log files after each reopen, since the fresh
 * error.log it creates is root's.
 *
 * The user is resolved once, in the master (getpwnam / getpwuid and the
 * supplementary groups with getgrouplist), so a child only makes system
 * calls: setgroups, setgid, setuid, in that order (setgid after setuid
 * would be refused), each checked, then verified with getuid/geteuid and
 * a setuid(0) that must fail.  A child that cannot drop exits at once
 * with a crit line: it never serves as root by accident.
 *
 * "#-1" keeps the starting user (tests, non-root installs).  Started as
 * non-root, the setting cannot apply: a notice, and the current user stays.
 * Changing the user needs a restart (master_keep_restart_settings()).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "master/log.h"
#include "master/master.h"

#define PRIV_MAX_GROUPS  256
#define PRIV_MAX_DEPTH   4          /* the store is one directory, maybe two */

static struct {
    int    drop;                      /* 1: children setuid to uid */
    uid_t  uid;
    gid_t  gid;
    gid_t  groups[PRIV_MAX_GROUPS];
    int    ngroups;
    char   name[64];
} P;

/* Resolve "#-1", "#UID" or a name.  Returns 1 keep, 0 resolved, -1 unknown. */
static int
priv_resolve(const char *user_id, struct passwd **pw)
{
    char *end;
    long  v;

    *pw = NULL;
    if (user_id == NULL || strcmp(user_id, "#-1") == 0)
        return 1;
    if (user_id[0] == '#') {
        errno = 0;
        v = strtol(user_id + 1, &end, 10);
        if (end == user_id + 1 || *end != '\0' || errno != 0 || v < 0)
            return -1;
        *pw = getpwuid((uid_t)v);
    } else {
        *pw = getpwnam(user_id);
    }
    return *pw != NULL ? 0 : -1;
}

int
priv_init(const char *user_id, char *err, size_t errlen)
{
    struct passwd *pw;
    int rc;

    memset(&P, 0, sizeof(P));
    rc = priv_resolve(user_id, &pw);
    if (rc < 0) {
        snprintf(err, errlen, "proxy.config.admin.user_id: no such user \"%s\"",
                 user_id);
        return -1;
    }
    if (rc == 1)
        return 0;
    if (geteuid() != 0) {
        struct passwd *me = getpwuid(geteuid());
        log_notice("not started as root: proxy.config.admin.user_id \"%s\" "
                   "does not apply; running as %s (uid %d)", user_id,
                   me ? me->pw_name : "?", (int)geteuid());
        return 0;
    }
    if (snprintf(P.name, sizeof(P.name), "%s", pw->pw_name) >= (int)sizeof(P.name)) {
        snprintf(err, errlen, "proxy.config.admin.user_id: user name \"%s\" "
                 "is too long", pw->pw_name);
        return -1;
    }
    P.uid = pw->pw_uid;
    P.gid = pw->pw_gid;
    P.ngroups = PRIV_MAX_GROUPS;
    if (getgrouplist(P.name, P.gid, P.groups, &P.ngroups) < 0) {
        snprintf(err, errlen, "proxy.config.admin.user_id: user \"%s\" is in "
                 "more than %d groups", P.name, PRIV_MAX_GROUPS);
        return -1;
    }
    if (P.uid == 0) {
        log_warn("proxy.config.admin.user_id \"%s\" is root: workers keep "
                 "full privileges", user_id);
        return 0;
    }
    P.drop = 1;
    log_notice("workers and the cache manager run as user %s (uid %d, gid %d)",
               P.name, (int)P.uid, (int)P.gid);
    return 0;
}

int
priv_dropping(void)
{
    return P.drop;
}

int
priv_drop(const char *who)
{
    if (!P.drop)
        return 0;
    if (setgroups((size_t)P.ngroups, P.groups) < 0) {
        log_crit("%s: setgroups for user %s: %s", who, P.name, strerror(errno));
        return -1;
    }
    if (setgid(P.gid) < 0) {
        log_crit("%s: setgid(%d): %s", who, (int)P.gid, strerror(errno));
        return -1;
    }
    if (setuid(P.uid) < 0) {
        log_crit("%s: setuid(%d): %s", who, (int)P.uid, strerror(errno));
        return -1;
    }
    /* Trust, but verify: a half-dropped process must not serve. */
    if (getuid() != P.uid || geteuid() != P.uid || getgid() != P.gid
        || getegid() != P.gid || setuid(0) == 0) {
        log_crit("%s: still privileged after dropping to user %s", who, P.name);
        return -1;
    }
    return 0;
}

/* chown one path to the user unless it is theirs already (never follows a
 * symlink).  Returns 1 changed, 0 already right, -1 failed (logged). */
static int
priv_chown_one(const char *path)
{
    struct stat st;

    if (lstat(path, &st) < 0) {
        log_error("cannot give %s to user %s: %s", path, P.name, strerror(errno));
        return -1;
    }
    if (st.st_uid == P.uid && st.st_gid == P.gid)
        return 0;
    if (lchown(path, P.uid, P.gid) < 0) {
        log_error("cannot give %s to user %s: chown: %s", path, P.name,
                  strerror(errno));
        return -1;
    }
    return 1;
}

/* dir and its entries (recursively up to depth, or only files ending in
 * suffix when suffix is set).  Returns the number changed, -1 on error. */
static int
priv_chown_dir(const char *dir, const char *suffix, int depth)
{
    DIR *d;
    struct dirent *de;
    int n, total;

    if ((total = priv_chown_one(dir)) < 0)
        return -1;
    if ((d = opendir(dir)) == NULL) {
        log_error("cannot give %s to user %s: %s", dir, P.name, strerror(errno));
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        char path[4096];
        size_t len = strlen(de->d_name);

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (suffix && (len < strlen(suffix)
                       || strcmp(de->d_name + len - strlen(suffix), suffix) != 0))
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
            continue;
        if (de->d_type == DT_DIR && !suffix && depth > 0)
            n = priv_chown_dir(path, NULL, depth - 1);
        else if (de->d_type == DT_REG || (de->d_type == DT_DIR && !suffix))
            n = priv_chown_one(path);
        else
            continue;
        if (n < 0) {
            closedir(d);
            return -1;
        }
        total += n;
    }
    closedir(d);
    return total;
}

/* A directory we must never hand over: the root, or a shared one like /tmp
 * (sticky bit). */
static int
priv_dir_is_shared(const char *dir)
{
    struct stat st;

    return strcmp(dir, "/") == 0
           || (stat(dir, &st) == 0 && (st.st_mode & S_ISVTX));
}

/* Can the user reach and write dir?  Asked of the kernel in a child that
 * drops first, so supplementary groups, ACLs and every parent directory's
 * search bit count.  Returns 0, or -1 with the reason in err. */
static int
priv_can_use(const char *dir, char *err, size_t errlen)
{
    int p[2], status, e = 0;
    pid_t pid;

    if (pipe(p) < 0)
        return 0;       /* cannot ask: let the children find out */
    if ((pid = fork()) < 0) {
        close(p[0]);
        close(p[1]);
        return 0;
    }
    if (pid == 0) {
        close(p[0]);
        if (priv_drop("check") < 0)
            e = EPERM;
        else if (access(dir, R_OK | W_OK | X_OK) < 0)
            e = errno;
        if (write(p[1], &e, sizeof(e)) < 0) { /* the parent sees EOF */ }
        _exit(0);
    }
    close(p[1]);
    if (read(p[0], &e, sizeof(e)) != (ssize_t)sizeof(e))
        e = 0;
    close(p[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (e == 0)
        return 0;
    snprintf(err, errlen, "user %s cannot use %s: %s%s", P.name, dir, strerror(e),
             e == EACCES ? " (is every parent directory searchable by it?)" : "");
    return -1;
}

int
priv_give_logs(const char *dir, int quiet)
{
    char err[4200];
    int n;

    if (!P.drop)
        return 0;
    if (priv_dir_is_shared(dir)) {
        log_warn("log directory %s is shared: not giving it to user %s; "
                 "workers cannot reopen their logs", dir, P.name);
        return 0;
    }
    if ((n = priv_chown_dir(dir, ".log", 0)) < 0)
        return -1;
    if (n > 0 && !quiet)
        log_notice("log directory %s and its log files now belong to user %s "
                   "(workers reopen them)", dir, P.name);
    if (!quiet && priv_can_use(dir, err, sizeof(err)) < 0)
        log_warn("%s: workers cannot reopen their logs", err);
    return 0;
}

int
priv_give_store(const char *dir, char *err, size_t errlen)
{
    int n;

    if (!P.drop)
        return 0;
    if (priv_dir_is_shared(dir)) {
        snprintf(err, errlen, "store directory %s is shared (sticky bit): "
                 "not giving it to user %s", dir, P.name);
        return -1;
    }
    if ((n = priv_chown_dir(dir, NULL, PRIV_MAX_DEPTH)) < 0) {
        snprintf(err, errlen, "cannot give %s to user %s", dir, P.name);
        return -1;
    }
    if (n > 0)
        log_notice("store directory %s now belongs to user %s (%d file(s) "
                   "changed)", dir, P.name, n);
    return priv_can_use(dir, err, errlen);
}
