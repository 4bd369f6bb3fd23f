/*
 * conf/conf.c: loading a whole configuration (the loader).  The pieces
 * every parser shares (error list, line reader, paths, sizes) are in
 * conf/parse.c.
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

    /* cache.config (optional: missing means no rules) and the policy
     * values records.config gives it (issue 18) */
    path = conf_path(c->confdir, "cache.config");
    if (path == NULL)
        goto oom;
    conf_cache_records(&c->cache, &c->rec, "records.config", errs);
    if (conf_optional_exists(path))
        conf_cache_parse(&c->cache, path, errs);
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
    conf_cache_free(&c->cache);
    free(c->confdir);
    free(c);
}
