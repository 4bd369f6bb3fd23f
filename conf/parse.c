/*
 * conf/parse.c: the helpers every conf/ parser calls: the error list
 * ("file:line: message"), the line reader and tokeniser, paths and sizes.
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

#include "conf/parse.h"

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
conf_note(struct conf_errors *e, enum conf_note_kind kind, const char *file,
          int line, const char *fmt, ...)
{
    char   *msg = NULL, *full = NULL;
    va_list ap;
    int     rc;

    if (e->nnotes == e->notecap) {
        int   cap = e->notecap ? e->notecap * 2 : 64;
        void *n = realloc(e->notes, (size_t)cap * sizeof(*e->notes));

        if (n == NULL)
            return;
        e->notes = n;
        e->notecap = cap;
    }
    va_start(ap, fmt);
    rc = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (rc < 0)
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
    e->notes[e->nnotes].kind = kind;
    e->notes[e->nnotes].text = full;
    e->nnotes++;
}

void
conf_errors_free(struct conf_errors *e)
{
    for (int i = 0; i < e->nstored; i++)
        free(e->msgs[i]);
    for (int i = 0; i < e->nnotes; i++)
        free(e->notes[i].text);
    free(e->notes);
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

int
conf_pair(char **cur, char **label, char **value, const char **why)
{
    char *p = *cur;

    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    *label = p;
    while (*p && *p != '=' && *p != ' ' && *p != '\t')
        p++;
    if (*p != '=') {
        *why = "expected label=value";
        return -1;
    }
    *p++ = '\0';
    if (*p == '"') {
        *value = ++p;
        while (*p && *p != '"')
            p++;
        if (*p != '"') {
            *why = "unterminated quoted value";
            return -1;
        }
        *p++ = '\0';
    } else {
        *value = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        if (*p)
            *p++ = '\0';
    }
    *cur = p;
    if (**value == '\0') {
        *why = "empty value";
        return -1;
    }
    return 1;
}
