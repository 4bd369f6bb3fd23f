/*
 * worker/ctl.c: the `cistern ctl` verbs a worker answers (the master
 * hands it the client's socket, master/ctl.c): metric get and match, cache
 * lookup and purge.  The answer is the protocol's (master/ctl.c): a status
 * line "CODE text", then "name\tvalue" lines, then the socket is closed.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shm/log.h"
#include "worker/worker.h"

static int
ctl_metric(int match, const char *arg, struct buf *body)
{
    static struct admin_stats as;
    char val[64], pname[600];
    regex_t re;
    int found = 0;

    if (match && regcomp(&re, arg, REG_EXTENDED | REG_NOSUB) != 0) {
        buf_printf(body, "error\tbad regular expression\n");
        return 2;
    }
    if (admin_collect(&as) < 0) {
        if (match)
            regfree(&re);
        buf_printf(body, "error\tout of memory\n");
        return 4;
    }
    for (int i = 0; i < as.n; i++) {
        const struct admin_stat *st = &as.st[i];
        snprintf(pname, sizeof(pname), "%s%s%s", st->prom, st->suffix, st->labels);
        if (match ? regexec(&re, st->ats, 0, NULL, 0) == 0
                  : strcmp(st->ats, arg) == 0 || strcmp(pname, arg) == 0) {
            if (st->text)
                snprintf(val, sizeof(val), "%s", st->text);
            else
                admin_value(st, val, sizeof(val), 0);
            buf_printf(body, "%s\t%s\n", st->ats, val);
            found++;
            if (!match)
                break;
        }
    }
    if (match)
        regfree(&re);
    if (!found)
        buf_printf(body, "error\tno such metric\n");
    return found ? 0 : 1;
}

static void
ctl_send(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;     /* the client went away */
        p += w;
        n -= (size_t)w;
    }
}

void
worker_ctl(int fd, char *line)
{
    static struct buf body;
    static const char *const codes[] = { "ok", "not found", "usage", "unreachable", "error" };
    char *verb = strtok(line, " "), *obj = strtok(NULL, " "), *arg = strtok(NULL, "");
    char head[64];
    int rc = 2;

    body.start = body.end = 0;
    if (buf_alloc(&body) < 0) {
        close(fd);
        return;
    }
    /* blocking, with a bound: a client that never reads cannot hold us */
    struct timeval tv = { 2, 0 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (verb && obj && arg && strcmp(verb, "metric") == 0 && strcmp(obj, "get") == 0)
        rc = ctl_metric(0, arg, &body);
    else if (verb && obj && arg && strcmp(verb, "metric") == 0 && strcmp(obj, "match") == 0)
        rc = ctl_metric(1, arg, &body);
    else if (verb && obj && arg && strcmp(verb, "cache") == 0 && strcmp(obj, "lookup") == 0)
        rc = req_ctl_cache(0, arg, &body);
    else if (verb && obj && arg && strcmp(verb, "cache") == 0 && strcmp(obj, "purge") == 0)
        rc = req_ctl_cache(1, arg, &body);
    else
        buf_printf(&body, "error\tunknown verb\n");
    snprintf(head, sizeof(head), "%d %s\n", rc, codes[rc]);
    ctl_send(fd, head, strlen(head));
    ctl_send(fd, body.data + body.start, body.end - body.start);
    close(fd);
}
