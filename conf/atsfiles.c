/*
 * conf/atsfiles.c: the other files of an ATS config directory, which
 * Cistern does not read.  Fail closed: a file that asks for something
 * (anything but comments and blank lines) that would restrict access,
 * change routing or change what is cached is an error with file:line.
 * An empty file asks for what Cistern does and is noted as matching.
 * (logging.yaml is read: conf/logging.c.)
 *
 *   socks.config      read by ATS only when proxy.config.socks.socks_needed
 *                     is 1 (which records.config refuses); with 0 its lines
 *                     are inert, as in ATS: matches.
 *   strategies.yaml   parent strategies (routing): an error when not empty
 *                     (parent.config is read: conf/parent.c).
 *   plugin.config     read by conf/plugin.c (global plugins).
 *   hosting.config,   which hosts are cached on which volume: an error.
 *   volume.config
 *   splitdns.config   which DNS server resolves which origin: an error.
 *   sni.yaml          per-name TLS policy (client certificates, tunnels,
 *                     verification, versions): an error; so is ATS 8's
 *                     ssl_server_name.yaml, its old name.
 *   records.yaml      ATS 10's records (in place of records.config): an
 *                     error, its keys would go unread.
 *   body_factory/     error page templates: noted as ignored.
 *
 * YAML files are not parsed here: "empty" is comments, blank lines,
 * document markers and top-level keys with no entries ("ip_allow:",
 * "strategies: []").  Anything else counts as content.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"

struct ats_scan {
    int  yaml;
    int  first;                       /* line of the first content, or 0 */
    int  n;                           /* lines of content */
    char text[80];                    /* the first content line, cut */
};

/* A YAML line that adds no entry: a document marker, or a top-level key
 * whose value is empty ("key:", "key: []", "key: {}", "key: ~", "key:
 * null"), with an optional comment. */
static int
ats_yaml_line_empty(const char *line)
{
    const char *p = line;

    if (strcmp(line, "---") == 0 || strcmp(line, "...") == 0)
        return 1;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.')
        p++;
    if (p == line || *p != ':')
        return 0;
    p++;
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "[]", 2) == 0 || strncmp(p, "{}", 2) == 0)
        p += 2;
    else if (*p == '~')
        p++;
    else if (strncmp(p, "null", 4) == 0)
        p += 4;
    while (*p == ' ' || *p == '\t')
        p++;
    return *p == '\0' || *p == '#';
}

static int
ats_scan_line(void *arg, char *line, int lineno)
{
    struct ats_scan *s = arg;

    if (s->yaml && ats_yaml_line_empty(line))
        return 0;
    if (s->n++ == 0) {
        s->first = lineno;
        snprintf(s->text, sizeof(s->text), "%s", line);
    }
    return 0;
}

/* Scan dir/name.  Returns its path (malloc'd) and fills *s, or NULL when
 * the file does not exist (or on an error, recorded). */
static char *
ats_scan(const char *dir, const char *name, struct ats_scan *s,
         struct conf_errors *e)
{
    char *path = conf_path(dir, name);

    memset(s, 0, sizeof(*s));
    if (path == NULL) {
        conf_error(e, dir, 0, "out of memory");
        return NULL;
    }
    if (access(path, F_OK) < 0 && errno == ENOENT) {
        free(path);
        return NULL;
    }
    s->yaml = strlen(name) > 5 && strcmp(name + strlen(name) - 5, ".yaml") == 0;
    if (conf_foreach_line(path, e, ats_scan_line, s) < 0) {
        free(path);
        return NULL;
    }
    return path;
}

/* proxy.config.socks.socks_needed as records.config sets it (last line
 * wins), or 0 (ATS's default). */
struct ats_socks {
    int needed;
};

static int
ats_socks_line(void *arg, char *line, int lineno)
{
    struct ats_socks *s = arg;
    char *p = line, *kw, *name, *type, *value;

    (void)lineno;
    kw = conf_token(&p);
    name = conf_token(&p);
    type = conf_token(&p);
    value = conf_token(&p);
    if (kw != NULL && name != NULL && type != NULL && value != NULL
        && strcmp(name, "proxy.config.socks.socks_needed") == 0)
        s->needed = strcmp(value, "0") != 0;
    return 0;
}

static void
ats_socks(const char *dir, struct conf_errors *e)
{
    struct ats_scan  s;
    struct ats_socks socks = { 0 };
    char *path, *rec;

    path = ats_scan(dir, "socks.config", &s, e);
    if (path == NULL)
        return;
    rec = conf_path(dir, "records.config");
    if (rec != NULL && access(rec, R_OK) == 0) {
        struct conf_errors ignore;

        memset(&ignore, 0, sizeof(ignore));
        conf_foreach_line(rec, &ignore, ats_socks_line, &socks);
        conf_errors_free(&ignore);
    }
    free(rec);
    if (s.n == 0)
        conf_note(e, CONF_NOTE_MATCHES, path, 0, "empty: no SOCKS server");
    else if (socks.needed)
        conf_error(e, path, s.first, "SOCKS is not supported, and "
                   "proxy.config.socks.socks_needed asks for it: Cistern "
                   "would connect to origins directly (%d line%s)", s.n,
                   s.n == 1 ? "" : "s");
    else
        conf_note(e, CONF_NOTE_MATCHES, path, s.first, "%d line%s not used "
                  "while proxy.config.socks.socks_needed is 0, as in ATS",
                  s.n, s.n == 1 ? "" : "s");
    free(path);
}

/* A file that must be empty: an error at its first line of content. */
static void
ats_must_be_empty(const char *dir, const char *name, const char *empty_means,
                  const char *why, struct conf_errors *e)
{
    struct ats_scan s;
    char *path = ats_scan(dir, name, &s, e);

    if (path == NULL)
        return;
    if (s.n == 0)
        conf_note(e, CONF_NOTE_MATCHES, path, 0, "empty: %s", empty_means);
    else
        conf_error(e, path, s.first, "\"%s\": %s (%d line%s; the file must "
                   "be empty or hold only comments)", s.text, why, s.n,
                   s.n == 1 ? "" : "s");
    free(path);
}

static void
ats_body_factory(const char *dir, struct conf_errors *e)
{
    struct stat st;
    char *path = conf_path(dir, "body_factory");

    if (path == NULL)
        return;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        conf_note(e, CONF_NOTE_INTERNAL, path, 0, "ATS's error page "
                  "templates: not read; Cistern's error responses carry their "
                  "own short bodies");
    free(path);
}

void
conf_ats_files_check(const struct conf *c, struct conf_errors *e)
{
    static const char *const sni_names[] = { "sni.yaml", "ssl_server_name.yaml" };
    const char *dir = c->confdir;

    ats_socks(dir, e);
    /* parent.config is read (conf/parent.c) */
    ats_must_be_empty(dir, "strategies.yaml", "no parent strategies",
                      "strategies.yaml is not supported yet; write the "
                      "parents in parent.config (ATS syntax), which Cistern "
                      "reads", e);
    /* plugin.config is read (conf/plugin.c) */
    ats_must_be_empty(dir, "hosting.config", "every host in every volume",
                      "cache partitions per host are not supported: Cistern "
                      "caches every host in the one store storage.config "
                      "names", e);
    ats_must_be_empty(dir, "volume.config", "one cache volume",
                      "cache volumes are not supported: Cistern has one "
                      "store, the one storage.config names", e);
    ats_must_be_empty(dir, "splitdns.config", "one resolver for all",
                      "split DNS is not supported: Cistern resolves every "
                      "origin name with the same nameservers "
                      "(proxy.config.dns.nameservers)", e);
    /* sni.yaml was ssl_server_name.yaml in ATS 8 */
    for (size_t i = 0; i < sizeof(sni_names) / sizeof(sni_names[0]); i++)
        ats_must_be_empty(dir, sni_names[i], "no per-name TLS policy",
                          "per-name TLS policy (client certificates, tunnels, "
                          "verification, protocol versions) is not supported "
                          "yet; Cistern would apply its defaults to every name",
                          e);
    ats_must_be_empty(dir, "records.yaml", "no ATS 10 records",
                      "records.yaml (ATS 10) is not read: Cistern reads "
                      "records.config (CONFIG name TYPE value lines); write "
                      "these keys there", e);
    ats_body_factory(dir, e);
}
