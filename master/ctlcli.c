/*
 * master/ctlcli.c: `cistern ctl [-c CONFDIR] [--json] VERB ...`, the
 * client of the control socket (master/ctl.c has the protocol), and
 * `cistern ctl top`, the live view.
 *
 * Exit status: 0 ok, 1 not found / false (no such metric, not stored,
 * nothing purged, no such parent, a reload that failed), 2 usage, 3 the
 * instance cannot be reached (not running, no permission on the socket),
 * 4 an error.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "conf/conf.h"
#include "shm/shm.h"
#include "master/master.h"

#define CTL_ANSWER_MAX (4 * 1024 * 1024)

static void
ctl_usage(FILE *out)
{
    fprintf(out,
"Usage: cistern ctl [-c CONFDIR] [--json] VERB ...\n"
"  metric get NAME        one metric (an ATS name as /_stats shows it, or a\n"
"                         Prometheus series as /_metrics writes it)\n"
"  metric match REGEX     every metric whose ATS name matches (POSIX ERE)\n"
"  config reload          reload; waits for the verdict and the errors\n"
"  config status          generation, last reload, workers, drain state\n"
"  server drain|undrain   answers close their connections (or not again)\n"
"  cache lookup URL       is URL stored: key, size, age, TTL, Vary, hits\n"
"  cache purge URL [--soft]  remove URL's object (--soft: mark it stale)\n"
"  cache purge --tag T... | --prefix URL... | --host H... | --all [--soft]\n"
"                         purge by tag, URL prefix, host, everything\n"
"  host down|up NAME      mark a parent.config parent down until up\n"
"  url top [N] [misses]   the N busiest URLs (10; at most 100) by requests,\n"
"                         or by misses, since the start (approximate)\n"
"  top [-n FRAMES]        a live view, refreshed every second\n"
"Exit status: 0 ok, 1 not found or false, 2 usage, 3 instance unreachable,\n"
"4 error.  See cistern(8), CTL.\n");
}

/* The run directory of confdir's instance (records.config only). */
static int
ctl_socket_path(const char *confdir, char *out, size_t len)
{
    struct conf_records rec;
    struct conf_errors e;
    char rp[4096];

    memset(&e, 0, sizeof(e));
    conf_records_defaults(&rec);
    snprintf(rp, sizeof(rp), "%s/records.config", confdir);
    conf_records_parse(&rec, rp, confdir, &e);
    conf_errors_free(&e);
    snprintf(out, len, "%s/cistern.sock", rec.run_dir ? rec.run_dir : CST_RUNDIR);
    conf_records_free(&rec);
    return 0;
}

/* Send line, read the whole answer into *ans (malloc'd).  Returns the
 * answer's code, or 3 (unreachable) with a message on stderr. */
static int
ctl_call(const char *sock, const char *line, char **ans)
{
    struct sockaddr_un sa;
    size_t n = 0, cap = 8192;
    char *b;
    int fd;

    *ans = NULL;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "cistern ctl: cannot reach the instance at %s: %s\n", sock, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 3;
    }
    if (write(fd, line, strlen(line)) < 0 || write(fd, "\n", 1) < 0) {
        fprintf(stderr, "cistern ctl: %s: %s\n", sock, strerror(errno));
        close(fd);
        return 3;
    }
    if ((b = malloc(cap)) == NULL) {
        close(fd);
        return 4;
    }
    for (;;) {
        ssize_t r;
        if (n + 1 >= cap) {
            char *nb = cap < CTL_ANSWER_MAX ? realloc(b, cap * 2) : NULL;
            if (nb == NULL)
                break;
            b = nb;
            cap *= 2;
        }
        r = read(fd, b + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    b[n] = '\0';
    *ans = b;
    if (n == 0 || b[0] < '0' || b[0] > '4') {
        fprintf(stderr, "cistern ctl: no answer from the instance\n");
        return 3;
    }
    return b[0] - '0';
}

int
ctl_call_top(const char *sock, const char *line, char **ans)
{
    return ctl_call(sock, line, ans);
}

static int
ctl_is_number(const char *v)
{
    char *end;

    if (*v == '\0')
        return 0;
    (void)strtod(v, &end);
    return *end == '\0' && strspn(v, "0123456789.-") == strlen(v);
}

static void
ctl_json_str(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* `url top` as text: one row per URL (the answer's url.N lines). */
static void
ctl_print_urls(const char *ans)
{
    const char *p = strchr(ans, '\n');
    unsigned long long v[4] = { 0, 0, 0, 0 };
    static const char *const f[4] = { ".requests\t", ".hits\t", ".misses\t", ".error\t" };
    char url[512] = "";

    printf("%10s %10s %10s %10s  %s\n", "REQUESTS", "HITS", "MISSES", "+-ERROR", "URL");
    for (p = p ? p + 1 : ans; *p;) {
        const char *e = strchr(p, '\n'), *t = strchr(p, '\t');
        size_t ll = e ? (size_t)(e - p) : strlen(p);
        if (t && t < p + ll && strncmp(p, "url.", 4) == 0) {
            const char *d = p + 4 + strspn(p + 4, "0123456789");
            if (d == t)
                snprintf(url, sizeof(url), "%.*s", (int)(ll - (size_t)(t + 1 - p)), t + 1);
            for (int k = 0; k < 4; k++)
                if (strncmp(d, f[k], strlen(f[k])) == 0)
                    v[k] = strtoull(t + 1, NULL, 10);
            if (strncmp(d, f[3], strlen(f[3])) == 0)
                printf("%10llu %10llu %10llu %10llu  %s\n", v[0], v[1], v[2], v[3], url);
        }
        p += ll + (e != NULL);
    }
}

/* The answer's "name\tvalue" lines: as text, or one JSON object. */
static void
ctl_print(int code, const char *ans, int json)
{
    const char *p = strchr(ans, '\n');
    int first = 1;

    p = p ? p + 1 : ans + strlen(ans);
    if (json)
        printf("{");
    while (*p) {
        const char *e = strchr(p, '\n'), *t;
        size_t ll = e ? (size_t)(e - p) : strlen(p);
        t = memchr(p, '\t', ll);
        if (t) {
            size_t kl = (size_t)(t - p), vl = ll - kl - 1;
            char v[4096];
            snprintf(v, sizeof(v), "%.*s", (int)vl, t + 1);
            if (json) {
                printf("%s\n  ", first ? "" : ",");
                ctl_json_str(p, kl);
                printf(": ");
                if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0 || ctl_is_number(v))
                    printf("%s", v);
                else
                    ctl_json_str(v, vl);
            } else if (code != 0 && kl == 5 && strncmp(p, "error", 5) == 0) {
                fprintf(stderr, "cistern ctl: %s\n", v);
            } else {
                printf("%.*s %s\n", (int)kl, p, v);
            }
            first = 0;
        }
        p += ll + (e != NULL);
    }
    if (json)
        printf("%s}\n", first ? "" : "\n");
}

int
ctl_main(int argc, char **argv)
{
    const char *confdir = CST_SYSCONFDIR;
    char sock[4096], line[4096], *ans;
    int json = 0, i = 1, frames = -1, code;
    size_t off = 0;

    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
            confdir = argv[++i];
        else if (strcmp(argv[i], "--json") == 0 || strcmp(argv[i], "-j") == 0)
            json = 1;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            ctl_usage(stdout);
            return 0;
        } else {
            ctl_usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        ctl_usage(stderr);
        return 2;
    }
    ctl_socket_path(confdir, sock, sizeof(sock));
    if (strcmp(argv[i], "top") == 0) {
        for (i++; i < argc; i++) {
            if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
                frames = atoi(argv[++i]);
            else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
                ctl_socket_path(argv[++i], sock, sizeof(sock));
            else {
                ctl_usage(stderr);
                return 2;
            }
        }
        return ctl_top(sock, frames);
    }
    for (; i < argc; i++) {
        if (strchr(argv[i], '\n') || off + strlen(argv[i]) + 2 >= sizeof(line)) {
            fprintf(stderr, "cistern ctl: argument too long or with a newline\n");
            return 2;
        }
        off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%s", off ? " " : "", argv[i]);
    }
    code = ctl_call(sock, line, &ans);
    if (ans && code == 0 && !json && strncmp(line, "url top", 7) == 0) {
        ctl_print_urls(ans);
    } else if (ans) {
        ctl_print(code, ans, json);
        if (code == 2)
            ctl_usage(stderr);
    }
    free(ans);
    return code;
}
