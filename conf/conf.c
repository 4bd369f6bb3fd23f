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
 * records.config and remap.config must exist; ip_allow.yaml or
 * ip_allow.config (not both) is read, and with neither the built-in
 * defaults apply (the same rules as the shipped file); a missing
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
#include <strings.h>
#include <sys/stat.h>
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
    struct stat st;

    /* lstat: a dangling symlink is a file that cannot be read (an error),
     * not a missing one (the permissive built-in defaults) */
    return lstat(path, &st) == 0 || errno != ENOENT;
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
    if (r->admin_allow && strcasecmp(r->admin_allow, "none") != 0
        && conf_ip_list_parse(&c->admin_allow, r->admin_allow, &why) < 0)
        conf_error(e, recfile, 0, "proxy.config.cistern.admin.allow: %s in \"%s\"",
                   why, r->admin_allow);
    if (r->pp_allowlist && strcasecmp(r->pp_allowlist, "none") != 0
        && conf_ip_list_parse(&c->pp_allow, r->pp_allowlist, &why) < 0)
        conf_error(e, recfile, 0, "proxy.config.http.proxy_protocol_allowlist: "
                   "%s in \"%s\"", why, r->pp_allowlist);
    /* A pp port believes the client address a PROXY header claims, and
     * every ACL judges that address: with no allowlist anyone who reaches
     * the port could claim any address (ATS trusts every peer then).
     * Trust is written out or refused. */
    for (int i = 0; i < r->nports; i++) {
        if (r->ports[i].pp && (r->pp_allowlist == NULL
                               || strcasecmp(r->pp_allowlist, "none") == 0
                               || *r->pp_allowlist == '\0')) {
            conf_error(e, recfile, 0, "proxy.config.http.server_ports has a pp "
                       "port, but proxy.config.http.proxy_protocol_allowlist "
                       "names no peer: every client could claim any address "
                       "to the ACLs; list the load balancers' addresses "
                       "(\"0/0 ::/0\" trusts everyone, as ATS does by default)");
            break;
        }
    }
    /* The request line is part of the header block, so a longer line limit
     * than header limit can never take effect. */
    if (r->request_line_max_size > r->request_header_max_size)
        conf_warn(e, recfile, 0,
                  "proxy.config.http.request_line_max_size (%d) exceeds "
                  "proxy.config.http.request_header_max_size (%d); the "
                  "header limit applies",
                  r->request_line_max_size, r->request_header_max_size);
}

/* ip_allow.yaml (ATS 9+) or ip_allow.config (ATS 8), never both: which
 * one an operator meant is not ours to guess, and rules read from the wrong
 * one would allow what the other denies.  Neither: the built-in defaults.
 * Returns -1 only when out of memory. */
static int
conf_load_ip_allow(struct conf *c, struct conf_errors *errs)
{
    char *yml = conf_path(c->confdir, "ip_allow.yaml");
    char *cfg = conf_path(c->confdir, "ip_allow.config");
    int   has_yml, has_cfg;

    if (yml == NULL || cfg == NULL) {
        free(yml);
        free(cfg);
        return -1;
    }
    has_yml = conf_optional_exists(yml);
    has_cfg = conf_optional_exists(cfg);
    if (has_yml && has_cfg)
        conf_error(errs, yml, 0, "both %s and %s exist; ATS 9 reads only "
                   "ip_allow.yaml, ATS 8 only ip_allow.config: remove the "
                   "one that is not meant", yml, cfg);
    else if (has_yml)
        conf_ip_allow_yaml_parse(&c->ip_allow, yml, errs);
    else if (has_cfg)
        conf_ip_allow_parse(&c->ip_allow, cfg, errs);
    else
        conf_ip_allow_defaults(&c->ip_allow);
    free(yml);
    free(cfg);
    return 0;
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
    c->remap.acl_policy = (enum conf_acl_policy)c->rec.acl_behavior_policy;
    conf_remap_parse(&c->remap, path, c->confdir, errs);
    free(path);

    if (conf_load_ip_allow(c, errs) < 0)
        goto oom;

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

    /* parent.config (optional: missing means no parents) */
    path = conf_path(c->confdir, "parent.config");
    if (path == NULL)
        goto oom;
    if (conf_optional_exists(path))
        conf_parent_parse(&c->parents, path, errs);
    free(path);

    /* logging.yaml (optional: missing means the built-in access log) */
    path = conf_path(c->confdir, "logging.yaml");
    if (path == NULL)
        goto oom;
    if (conf_optional_exists(path) && c->rec.logfile_dir != NULL)
        conf_logging_parse(&c->logging, path, c->rec.logfile_dir, errs);
    free(path);

    /* socks.config, plugin.config, ...: read by ATS, not by
     * Cistern; anything in them that Cistern would not do is refused. */
    conf_ats_files_check(c, errs);

    /* plugin.config and the rules' @plugin=: loaded and created now, so
     * that a missing file or a bad argument fails this load (issue 22) */
    if (errs->n == n0)
        conf_plugins_load(c, errs);

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
    conf_ip_allow_free(&c->pp_allow);
    conf_storage_free(&c->storage);
    conf_tls_free(c->tls);
    conf_cache_free(&c->cache);
    conf_parent_free(&c->parents);
    conf_plugins_free(c->globals, c->nglobals);
    free(c->gplan);
    conf_logging_free(&c->logging);
    free(c->confdir);
    free(c);
}
