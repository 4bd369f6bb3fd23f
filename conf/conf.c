/*
 * conf/conf.c: loading a whole configuration, and the pieces every parser
 * shares (error list, line reader, paths, sizes).
 *
 * conf_load() is the only way a running daemon gets a struct conf.  It reads
 * every file even after the first error, so `cistern -t` reports all
 * problems at once, and it hands back either a complete, validated config or
 * NULL; never a half-built one.  The caller keeps using its old config when
 * NULL comes back (reload = build, validate, swap).
 *
 * Which files are required is decided here, not in the parsers:
 * records.config and remap.config must exist; a missing ip_allow.config
 * means the built-in defaults (the same rules as the shipped file); a missing
 * storage.config means no cache spans.
 *
 * Error messages are malloc'd "file:line: message" strings.  Only the first
 * CONF_MAX_ERRORS are kept, but the counters keep counting so the caller can
 * say "and N more".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* asprintf, vasprintf */
#endif
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"

/* ---------------------------------------------------------------------
 * Errors and warnings
 */
static void
conf_record(struct conf_errors *e, int warn, const char *file, int line,
            const char *fmt, va_list ap)
{
    char *msg = NULL, *full = NULL;
    int   rc;

    if (warn)
        e->nwarn++;
    else
        e->n++;
    if (e->nstored >= CONF_MAX_ERRORS)
        return;

    if (vasprintf(&msg, fmt, ap) < 0)
        return;
    if (file == NULL)
        rc = asprintf(&full, "%s", msg);
    else if (line <= 0)
        rc = asprintf(&full, "%s: %s", file, msg);
    else
        rc = asprintf(&full, "%s:%d: %s", file, line, msg);
    free(msg);
    if (rc < 0)
        return;
    e->msgs[e->nstored] = full;
    e->is_warn[e->nstored] = warn;
    e->nstored++;
}

void
conf_error(struct conf_errors *e, const char *file, int line,
           const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    conf_record(e, 0, file, line, fmt, ap);
    va_end(ap);
}

void
conf_warn(struct conf_errors *e, const char *file, int line,
          const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    conf_record(e, 1, file, line, fmt, ap);
    va_end(ap);
}

void
conf_errors_free(struct conf_errors *e)
{
    for (int i = 0; i < e->nstored; i++)
        free(e->msgs[i]);
    memset(e, 0, sizeof(*e));
}

/* ---------------------------------------------------------------------
 * Lines and tokens
 */
char *
conf_trim(char *s)
{
    size_t n;

    while (*s != '\0' && isspace((unsigned char)*s))
        s++;
    n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

char *
conf_token(char **cursor)
{
    char *p = *cursor, *start;

    while (*p != '\0' && isspace((unsigned char)*p))
        p++;
    if (*p == '\0') {
        *cursor = p;
        return NULL;
    }
    start = p;
    while (*p != '\0' && !isspace((unsigned char)*p))
        p++;
    if (*p != '\0')
        *p++ = '\0';
    *cursor = p;
    return start;
}

/* One physical line: hand it on unless it is blank or a comment. */
static int
conf_line(char *raw, int lineno, conf_line_fn *fn, void *arg)
{
    char *line = conf_trim(raw);

    if (*line == '\0' || *line == '#')
        return 0;
    return fn(arg, line, lineno);
}

int
conf_foreach_line(const char *file, struct conf_errors *e, conf_line_fn *fn,
                  void *arg)
{
    FILE   *fp;
    char   *buf = NULL;
    size_t  cap = 0;
    ssize_t len;
    int     lineno = 0;

    fp = fopen(file, "r");
    if (fp == NULL) {
        conf_error(e, file, 0, "cannot open: %s", strerror(errno));
        return -1;
    }
    while ((len = getline(&buf, &cap, fp)) >= 0) {
        lineno++;
        /* An embedded NUL would silently cut the line; say so instead. */
        if ((size_t)len != strlen(buf)) {
            conf_error(e, file, lineno, "line contains a NUL byte");
            continue;
        }
        if (conf_line(buf, lineno, fn, arg) < 0)
            break;
    }
    if (ferror(fp))
        conf_error(e, file, 0, "read error: %s", strerror(errno));
    free(buf);
    fclose(fp);
    return 0;
}

int
conf_foreach_text_line(const char *text, conf_line_fn *fn, void *arg)
{
    char *copy, *p, *nl;
    int   lineno = 0;

    copy = strdup(text);
    if (copy == NULL)
        return -1;
    for (p = copy; *p != '\0'; p = nl + 1) {
        lineno++;
        nl = strchr(p, '\n');
        if (nl != NULL)
            *nl = '\0';
        if (conf_line(p, lineno, fn, arg) < 0 || nl == NULL)
            break;
    }
    free(copy);
    return 0;
}

/* ---------------------------------------------------------------------
 * Paths and sizes
 */
char *
conf_path(const char *dir, const char *p)
{
    char   *out;
    size_t  dlen;

    if (p[0] == '/' || dir == NULL || dir[0] == '\0')
        return strdup(p);
    dlen = strlen(dir);
    while (dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    /* "./x" reads better in messages and logs as "dir/x". */
    while (p[0] == '.' && p[1] == '/') {
        p += 2;
        while (*p == '/')
            p++;
    }
    if (p[0] == '\0' || strcmp(p, ".") == 0)
        return strndup(dir, dlen);
    if (asprintf(&out, "%.*s%s%s", (int)dlen, dir,
                 dir[dlen - 1] == '/' ? "" : "/", p) < 0)
        return NULL;
    return out;
}

int
conf_parse_size(const char *s, int64_t *out)
{
    uint64_t v = 0;
    int      shift = 0;
    const char *p = s;

    if (!isdigit((unsigned char)*p))
        return -1;
    for (; isdigit((unsigned char)*p); p++) {
        if (v > (uint64_t)INT64_MAX / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > (uint64_t)INT64_MAX)
            return -1;
    }
    switch (*p) {
    case '\0':             break;
    case 'k': case 'K':    shift = 10; p++; break;
    case 'm': case 'M':    shift = 20; p++; break;
    case 'g': case 'G':    shift = 30; p++; break;
    case 't': case 'T':    shift = 40; p++; break;
    default:               return -1;
    }
    if (*p != '\0')
        return -1;
    if (shift != 0 && v > ((uint64_t)INT64_MAX >> shift))
        return -1;
    *out = (int64_t)(v << shift);
    return 0;
}

/* ---------------------------------------------------------------------
 * The whole configuration
 */

/* Parse an optional file: missing means "use the caller's default", any
 * other failure to open it is an error like a parse error. */
static int
conf_optional_exists(const char *path)
{
    return access(path, F_OK) == 0 || errno != ENOENT;
}

static void
conf_cross_check(struct conf *c, const char *recfile, struct conf_errors *e)
{
    const struct conf_records *r = &c->rec;

    if (r->nports < 1)
        conf_error(e, recfile, 0,
                   "proxy.config.http.server_ports: no ports to listen on");
    const char *why = NULL;
    if (r->cache_eviction && strcmp(r->cache_eviction, "s3fifo") != 0
        && strcmp(r->cache_eviction, "fifo") != 0)
        conf_error(e, recfile, 0, "proxy.config.cistern.cache.eviction: "
                   "\"%s\" is not s3fifo or fifo", r->cache_eviction);
    if (r->access_log_format && strcmp(r->access_log_format, "combined") != 0
        && strcmp(r->access_log_format, "squid") != 0
        && strcmp(r->access_log_format, "json") != 0)
        conf_error(e, recfile, 0, "proxy.config.cistern.access_log_format: "
                   "\"%s\" is not combined, squid or json", r->access_log_format);
    if (r->admin_allow && conf_ip_list_parse(&c->admin_allow, r->admin_allow, &why) < 0)
        conf_error(e, recfile, 0, "proxy.config.cistern.admin.allow: %s in \"%s\"",
                   why, r->admin_allow);
    /* The request line is part of the header block, so a longer line limit
     * than header limit can never take effect. */
    if (r->request_line_max_size > r->request_header_max_size)
        conf_warn(e, recfile, 0,
                  "proxy.config.http.request_line_max_size (%d) exceeds "
                  "proxy.config.http.request_header_max_size (%d); the "
                  "header limit applies",
                  r->request_line_max_size, r->request_header_max_size);
}

struct conf *
conf_load(const char *confdir, struct conf_errors *errs)
{
    struct conf *c;
    char        *path = NULL;
    int          n0 = errs->n;

    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        conf_error(errs, confdir, 0, "out of memory");
        return NULL;
    }
    conf_records_defaults(&c->rec);

    c->confdir = realpath(confdir, NULL);
    if (c->confdir == NULL) {
        conf_error(errs, confdir, 0, "cannot use config directory: %s",
                   strerror(errno));
        goto fail;
    }

    path = conf_path(c->confdir, "records.config");
    if (path == NULL)
        goto oom;
    conf_records_parse(&c->rec, path, c->confdir, errs);
    if (errs->n == n0)
        conf_cross_check(c, path, errs);
    free(path);

    path = conf_path(c->confdir, "remap.config");
    if (path == NULL)
        goto oom;
    conf_remap_parse(&c->remap, path, c->confdir, errs);
    free(path);

    path = conf_path(c->confdir, "ip_allow.config");
    if (path == NULL)
        goto oom;
    if (conf_optional_exists(path))
        conf_ip_allow_parse(&c->ip_allow, path, errs);
    else
        conf_ip_allow_defaults(&c->ip_allow);
    free(path);

    path = conf_path(c->confdir, "storage.config");
    if (path == NULL)
        goto oom;
    if (conf_optional_exists(path))
        conf_storage_parse(&c->storage, path, c->confdir, errs);
    free(path);

    if (errs->n == n0)
        conf_tls_load(c, errs);     /* certificates: after records (paths) */

    if (errs->n != n0)
        goto fail;
    return c;

oom:
    conf_error(errs, confdir, 0, "out of memory");
fail:
    conf_free(c);
    return NULL;
}

void
conf_free(struct conf *c)
{
    if (c == NULL)
        return;
    conf_records_free(&c->rec);
    conf_remap_free(&c->remap);
    conf_ip_allow_free(&c->ip_allow);
    conf_ip_allow_free(&c->admin_allow);
    conf_storage_free(&c->storage);
    conf_tls_free(c->tls);
    free(c->confdir);
    free(c);
}
