/*
 * conf/storage.c: storage.config, where the cache lives.
 *
 * ATS syntax: one span per line, "PATH SIZE [id=...] [volume=...]".  Cistern
 * keeps its cache in a directory, and (as ATS requires for a directory) the
 * size must be given.  ATS's id= and volume= options have no meaning here;
 * they are ignored with a warning so an ATS file still loads.
 *
 * Relative paths resolve against the config directory.  Every span is
 * parsed and kept (so `cistern -t` validates all of them), but the cache
 * uses only the first; a second span draws a warning.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"

/* Below this the segment ring would hold only a handful of objects. */
#define STORAGE_MIN_SIZE (16 * 1024 * 1024)

struct storage_parse {
    struct conf_storages *st;
    const char           *file;
    const char           *dir;
    struct conf_errors   *e;
};

static int
storage_line(void *arg, char *line, int lineno)
{
    struct storage_parse *ps = arg;
    struct conf_storage  *ns, span;
    char   *p = line, *path, *size, *opt;
    int64_t bytes;

    path = conf_token(&p);
    size = conf_token(&p);
    if (size == NULL || size[0] == '#') {
        conf_error(ps->e, ps->file, lineno,
                   "\"%s\": missing size (a cache directory needs one, "
                   "e.g. \"%s 256M\")", path, path);
        return 0;
    }
    if (conf_parse_size(size, &bytes) < 0) {
        conf_error(ps->e, ps->file, lineno,
                   "\"%s\" is not a size (bytes, or a number with a K, M, G "
                   "or T suffix)", size);
        return 0;
    }
    if (bytes < STORAGE_MIN_SIZE) {
        conf_error(ps->e, ps->file, lineno,
                   "size %s is too small (at least 16M)", size);
        return 0;
    }
    while ((opt = conf_token(&p)) != NULL) {
        if (opt[0] == '#')
            break;
        if (strncasecmp(opt, "id=", 3) == 0
            || strncasecmp(opt, "volume=", 7) == 0) {
            conf_warn(ps->e, ps->file, lineno,
                      "option \"%s\" is not supported and is ignored", opt);
            continue;
        }
        conf_error(ps->e, ps->file, lineno,
                   "unexpected \"%s\" (expected PATH SIZE)", opt);
        return 0;
    }

    span.path = conf_path(ps->dir, path);
    span.size = bytes;
    span.line = lineno;
    if (span.path == NULL)
        goto oom;
    ns = realloc(ps->st->spans, sizeof(*ns) * (size_t)(ps->st->nspans + 1));
    if (ns == NULL) {
        free(span.path);
        goto oom;
    }
    ps->st->spans = ns;
    ps->st->spans[ps->st->nspans++] = span;
    if (ps->st->nspans == 2)
        conf_warn(ps->e, ps->file, lineno,
                  "more than one span: the cache uses only the first (line "
                  "%d)", ps->st->spans[0].line);
    return 0;

oom:
    conf_error(ps->e, ps->file, lineno, "out of memory");
    return -1;
}

int
conf_storage_parse(struct conf_storages *st, const char *file,
                   const char *dir, struct conf_errors *e)
{
    struct storage_parse ps = { .st = st, .file = file, .dir = dir, .e = e };
    int                  n0 = e->n;

    if (conf_foreach_line(file, e, storage_line, &ps) < 0)
        return -1;
    return e->n == n0 ? 0 : -1;
}

void
conf_storage_free(struct conf_storages *st)
{
    for (int i = 0; i < st->nspans; i++)
        free(st->spans[i].path);
    free(st->spans);
    st->spans = NULL;
    st->nspans = 0;
}
