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
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/log.h"
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

/*
 * Handing a directory over, without ever being led outside it.
 *
 * The directories we chown already belong to the user (from the previous
 * start), so whatever runs as the user, a compromised worker included, can
 * rename, link and swap entries in them while we walk.  A walk by path
 * name would follow a directory swapped for a symlink between readdir and
 * opendir, and chown a file that was hard-linked in from elsewhere: root
 * would give /etc away.  So the walk holds a descriptor for each directory
 * and looks at every entry relative to it:
 *  - each entry is opened with openat(O_PATH | O_NOFOLLOW) on the
 *    descriptor of its directory and checked with fstat on its own
 *    descriptor: a symlink opens as itself, never as its target, whatever
 *    was swapped in since readdir;
 *  - a directory is then reopened for reading through that descriptor and
 *    walked, a regular file (with a single link, on the same filesystem)
 *    chowned through it: the inode checked is the inode chowned;
 *  - a symlink is left alone (nothing is ever chowned through it), and so
 *    is anything on another filesystem (a mount inside the store), a file
 *    with other hard links, a device, fifo or socket: each with a warning
 *    naming it, since the store holds none of these by itself.
 * Only the starting directory is opened by its configured path, following
 * it: it is the administrator's choice (a store symlinked onto a larger
 * disk), and its parent is not the user's.
 */

static int
priv_owned(const struct stat *st)
{
    return st->st_uid == P.uid && st->st_gid == P.gid;
}

/* Give the object behind fd (described by st) to the user unless it is
 * theirs already.  Returns 1 changed, 0 already right, -1 failed (logged). */
static int
priv_chown_fd(int fd, const struct stat *st, const char *path)
{
    if (priv_owned(st))
        return 0;
    if (fchownat(fd, "", P.uid, P.gid, AT_EMPTY_PATH) < 0) {
        log_error("cannot give %s to user %s: chown: %s", path, P.name,
                  strerror(errno));
        return -1;
    }
    return 1;
}

/* An entry that is left alone; said once per start (not on the quiet
 * re-chowns after a log reopen). */
static void
priv_skip(int quiet, const char *path, const char *why)
{
    if (!quiet)
        log_warn("%s %s: left alone, not given to user %s", path, why, P.name);
}

/* Give the directory open on dfd (which this takes over) and its entries:
 * subdirectories recursively up to depth more levels, or, with suffix, only
 * the regular files whose names end in it.  Never leaves filesystem dev.
 * Returns the number of objects changed, or -1 on error (logged). */
static int
priv_chown_walk(int dfd, const char *dir, const char *suffix, int depth,
                dev_t dev, int quiet)
{
    struct stat st;
    struct dirent *de;
    size_t slen = suffix ? strlen(suffix) : 0;
    int n, total;
    DIR *d;

    if (fstat(dfd, &st) < 0) {
        log_error("cannot give %s to user %s: %s", dir, P.name, strerror(errno));
        close(dfd);
        return -1;
    }
    if ((total = priv_chown_fd(dfd, &st, dir)) < 0) {
        close(dfd);
        return -1;
    }
    if ((d = fdopendir(dfd)) == NULL) {
        log_error("cannot give %s to user %s: %s", dir, P.name, strerror(errno));
        close(dfd);
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        char path[4096];
        int fd;

        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        if (suffix && (len < slen || strcmp(name + len - slen, suffix) != 0))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, name);   /* for the log */
        /* O_PATH opens anything without side effects (a fifo does not
         * block, a device is not opened); O_NOFOLLOW stops at a symlink. */
        fd = openat(dirfd(d), name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT)
                continue;           /* gone since readdir */
            log_error("cannot give %s to user %s: %s", path, P.name,
                      strerror(errno));
            closedir(d);
            return -1;
        }
        if (fstat(fd, &st) < 0) {
            log_error("cannot give %s to user %s: %s", path, P.name,
                      strerror(errno));
            close(fd);
            closedir(d);
            return -1;
        }
        n = 0;
        if (S_ISLNK(st.st_mode)) {
            priv_skip(quiet, path, "is a symbolic link (never followed)");
        } else if (st.st_dev != dev) {
            priv_skip(quiet, path, "is on another filesystem");
        } else if (S_ISREG(st.st_mode)) {
            /* Another name for this inode may be outside the store. */
            if (st.st_nlink != 1 && !priv_owned(&st))
                priv_skip(quiet, path, "has other hard links");
            else
                n = priv_chown_fd(fd, &st, path);
        } else if (S_ISDIR(st.st_mode) && !suffix) {
            /* Reopen for reading, relative to this O_PATH descriptor of
             * the directory we checked: no name is looked up again. */
            int sub = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

            if (sub < 0) {
                log_error("cannot give %s to user %s: %s", path, P.name,
                          strerror(errno));
                n = -1;
            } else if (depth > 0) {
                n = priv_chown_walk(sub, path, NULL, depth - 1, dev, quiet);
            } else {
                n = priv_chown_fd(sub, &st, path);
                close(sub);
            }
        } else if (!S_ISDIR(st.st_mode)) {
            priv_skip(quiet, path, "is not a regular file or a directory");
        }
        close(fd);
        if (n < 0) {
            closedir(d);
            return -1;
        }
        total += n;
    }
    closedir(d);
    return total;
}

/* Give dir (followed: the configured path) and its entries; see
 * priv_chown_walk.  Returns the number changed, -1 on error (logged). */
static int
priv_chown_dir(const char *dir, const char *suffix, int depth, int quiet)
{
    struct stat st;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &st) < 0) {
        log_error("cannot give %s to user %s: %s", dir, P.name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return priv_chown_walk(fd, dir, suffix, depth, st.st_dev, quiet);
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
    if ((n = priv_chown_dir(dir, ".log", 0, quiet)) < 0)
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
    if ((n = priv_chown_dir(dir, NULL, PRIV_MAX_DEPTH, 0)) < 0) {
        snprintf(err, errlen, "cannot give %s to user %s", dir, P.name);
        return -1;
    }
    if (n > 0)
        log_notice("store directory %s now belongs to user %s (%d file(s) "
                   "changed)", dir, P.name, n);
    return priv_can_use(dir, err, errlen);
}
